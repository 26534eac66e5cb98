import {
  type Backend,
  DTypeError,
  type QuantizedHostWeight,
  type QuantizedWeight,
  quantLayout,
  ShapeError,
  uploadQuantized,
} from '@rayo/core';
import type { GgmlQuantizedType } from './ggmlTypes.js';
import { CORE_FORMAT_OF, ggufAsCoreFormat, type RepackedWeight, repackedWeightOf } from './repack.js';

/**
 * Where a GGUF load keeps its quantized tensors in the layout they take on
 * the device (core's host parts, as `ggufAsCoreFormat` makes them), so that
 * a later load of the same file reads and uploads them as they are: no
 * stored blocks read, no repack. A browser's model cache keeps them beside
 * the cached file; the store answers for that file's identity.
 */
export interface PreparedWeights {
  /**
   * The parts an earlier load kept of tensor `name` (its GGUF name), or
   * undefined where none are kept; data that fails the store's checks
   * (sizes, checksum) is a RayoError naming the store's file, never weights.
   */
  read(name: string): Promise<QuantizedHostWeight | undefined>;
  /**
   * Optional: told of each tensor `read` gave, once its parts are uploaded
   * (`weight`, on `backend`). A store that checks its data on the device
   * rather than on the host before the upload checks it here; a failure is
   * then met by `end(true)`, which the load awaits before its weights are
   * used, and is a RayoError naming the store's file as `read`'s are.
   */
  uploaded?(name: string, weight: QuantizedWeight, backend: Backend): void;
  /** Keeps the parts of tensor `name`, made by this load (called for each tensor `read` had not). */
  write(name: string, weight: QuantizedHostWeight): Promise<void>;
  /** Called once, after the last tensor: `complete` false where the load failed (what was written is dropped). */
  end(complete: boolean): Promise<void>;
}

/** A quantized GGUF tensor as the loader meets it, with a way to read its stored blocks. */
export interface PreparedTensor {
  readonly name: string;
  readonly type: GgmlQuantizedType;
  readonly shape: readonly [number, number];
  /** The stored blocks in the decoder's row order (Q and K rows already moved back). */
  readonly blocks: () => Promise<Uint8Array>;
}

/**
 * Checks that kept parts are those `ggufAsCoreFormat` gives the tensor: its
 * type's format and shape, every part of its layout's length. A store that
 * hands back another file's tensor is refused by name, never uploaded.
 */
function checkKept(tensor: PreparedTensor, kept: QuantizedHostWeight): void {
  const [rows, cols] = tensor.shape;
  const format = CORE_FORMAT_OF[tensor.type];
  if (kept.format !== format || kept.n !== rows || kept.k !== cols) {
    throw new ShapeError('the prepared weight is not the tensor the file stores', {
      operation: 'loadGgufLlama',
      argument: tensor.name,
      expected: `${format} [${rows}, ${cols}] (${tensor.type} in the file)`,
      actual: `${kept.format} [${kept.n}, ${kept.k}]`,
    });
  }
  const layout = quantLayout(format, cols);
  const lengths: [string, number | undefined, number | undefined][] = [
    ['packed', kept.packed.length, rows * layout.rowWords],
    ['scales', kept.scales.length, rows * layout.groups],
    ['offsets', kept.offsets?.length, kept.offsets ? rows * layout.groups : undefined],
    ['zeros', kept.zeros?.length, layout.subBlockScales ? rows * layout.zeroWords : undefined],
  ];
  for (const [part, actual, expected] of lengths) {
    if (actual !== expected) {
      throw new DTypeError('a part of the prepared weight has the wrong length', {
        operation: 'loadGgufLlama',
        argument: `${tensor.name}.${part}`,
        expected: `${expected} elements`,
        actual: `${actual}`,
      });
    }
  }
}

/**
 * A quantized tensor on the device in core's format for its type, from
 * `prepared` where an earlier load kept it, else repacked from its stored
 * blocks and kept there for the next load.
 */
export async function uploadPrepared(
  backend: Backend,
  prepared: PreparedWeights,
  tensor: PreparedTensor,
): Promise<RepackedWeight> {
  let host = await prepared.read(tensor.name);
  // Parts of the tensor's shape in another format are an older layout of its type (Q4_K was q4g32a before
  // q4k, Q6_K q8g16 before q6k, Q5_K q8g32a before q5k, Q5_0 q8g32 before q5g32, Q5_1 q8g32a before
  // q5g32a): repacked from the blocks and kept anew, never refused.
  const [rows, cols] = tensor.shape;
  if (host && host.format !== CORE_FORMAT_OF[tensor.type] && host.n === rows && host.k === cols)
    host = undefined;
  if (host) {
    checkKept(tensor, host);
    const weight = uploadQuantized(backend, host);
    prepared.uploaded?.(tensor.name, weight, backend);
    return repackedWeightOf(weight, tensor.shape);
  }
  host = ggufAsCoreFormat(tensor.type, await tensor.blocks(), rows, cols);
  await prepared.write(tensor.name, host);
  return repackedWeightOf(uploadQuantized(backend, host), tensor.shape);
}
