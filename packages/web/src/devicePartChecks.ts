import {
  type Backend,
  bytesPerElement,
  PART_CHECKSUM_BLOCK_BYTES,
  type QuantizedWeight,
  type Tensor,
} from '@rayo/core';
import { partChecksum } from './partChecksum.js';

// Kept weights checked where they were uploaded: a backend that computes
// core's part checksums on its device (wgpu's) hashes the uploaded parts
// there, so the host only reads and copies them. Checks run as the tensors
// are uploaded; the load waits for all of them at its end. Where the device
// cannot hash a batch (a part it cannot bind), its parts are read back and
// hashed on the host instead: checked either way.

/** A backend that computes part checksums on its device. */
export interface ChecksummingBackend extends Backend {
  partChecksums(tensors: readonly Tensor[]): Promise<Uint32Array>;
}

/** `backend` where it computes part checksums on its device (and can bind a checksum block), else undefined. */
export function checksummingBackend(backend: Backend): ChecksummingBackend | undefined {
  const candidate = backend as Partial<ChecksummingBackend> & { maxBindingBytes?: number };
  if (typeof candidate.partChecksums !== 'function') return undefined;
  if ((candidate.maxBindingBytes ?? Number.POSITIVE_INFINITY) < PART_CHECKSUM_BLOCK_BYTES) return undefined;
  return backend as ChecksummingBackend;
}

/** The part of a quantized weight a checksum is kept for. */
export type WeightPart = 'packed' | 'scales' | 'zeros' | 'offsets';

/** A part's kept checksum. */
export interface ExpectedChecksum {
  readonly part: WeightPart;
  readonly checksum: number;
}

/** A part whose bytes on the device are not what was kept. */
export interface PartMismatch {
  /** `tensor.part`. */
  readonly what: string;
  readonly expected: number;
  readonly actual: number;
}

/** Bytes of parts checked by one device pass: a few passes for a model, not one per tensor. */
const BATCH_BYTES = 128 * 2 ** 20;

interface Waiting {
  readonly name: string;
  readonly tensors: readonly Tensor[];
  readonly expected: readonly ExpectedChecksum[];
}

/** The checks of one load's uploaded parts, sent to the device in batches as tensors are uploaded. */
export class DevicePartChecks {
  readonly #pending: Promise<PartMismatch | undefined>[] = [];
  #batch: Waiting[] = [];
  #batchBytes = 0;
  #backend: ChecksummingBackend | undefined;

  /** Checks tensor `name`'s uploaded parts against `expected` (with the next batch). */
  check(
    backend: ChecksummingBackend,
    name: string,
    weight: QuantizedWeight,
    expected: readonly ExpectedChecksum[],
  ): void {
    if (this.#backend !== backend) this.#flush();
    this.#backend = backend;
    const tensors = expected.map(({ part }) => weight[part]!);
    this.#batch.push({ name, tensors, expected });
    this.#batchBytes += tensors.reduce((n, t) => n + t.size * bytesPerElement(t.dtype), 0);
    if (this.#batchBytes >= BATCH_BYTES) this.#flush();
  }

  #flush(): void {
    const batch = this.#batch;
    const backend = this.#backend;
    this.#batch = [];
    this.#batchBytes = 0;
    if (batch.length === 0 || !backend) return;
    const tensors = batch.flatMap((w) => w.tensors);
    const sums = backend
      .partChecksums(tensors)
      .catch(async () =>
        Uint32Array.from(await Promise.all(tensors.map(async (t) => partChecksum(await t.read())))),
      );
    const checked = sums.then((sums) => {
      let at = 0;
      for (const { name, expected } of batch) {
        for (const { part, checksum } of expected) {
          const actual = sums[at++]!;
          if (actual !== checksum) return { what: `${name}.${part}`, expected: checksum, actual };
        }
      }
      return undefined;
    });
    // Met by `settle`; a rejection meanwhile is not unhandled.
    checked.catch(() => {});
    this.#pending.push(checked);
  }

  /**
   * The first mismatch of every check (once all are done; the last batch
   * sent now), or undefined; rejects as a check did. `discard` drops the
   * batch not yet sent (a failed load, whose weights may be gone).
   */
  async settle(discard = false): Promise<PartMismatch | undefined> {
    if (discard) this.#batch = [];
    else this.#flush();
    const results = await Promise.all(this.#pending);
    return results.find((r) => r !== undefined);
  }
}
