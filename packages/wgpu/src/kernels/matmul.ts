import {
  batchedMatmul,
  batchedMatmulLaunch,
  FLOAT,
  isHalf,
  type MatmulDims,
  type MatmulLaunch,
  matmul,
  matmulLaunch,
  pow2AtLeast,
  UnsupportedOnBackendError,
} from '@rayo/core';
import type { SubgroupMatrixConfig } from '../device.js';
import { type AnyWgpuKernel, gridFor, type KernelEncoder, type Operand, wgpuKernel } from '../kernel.js';
import type { ShaderSource } from '../pipelines.js';
import type { HalfGemmMode, HalfGemmTileName } from '../tuning.js';
import { type Storage, storageOf } from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { encodeCast, encodeCastPaddedRows } from './cast.js';
import { elementGrid, elementIndex } from './common.js';
import { encodeWithF32Activations } from './halfEdges.js';
import { encodeMatmulColumns } from './matmulColumns.js';
import {
  HALF_TILE_LARGE,
  HALF_TILE_MID,
  type HalfGemmVariant,
  halfGemmShader,
  halfThreads,
  halfTileBytes,
  halfTileNamed,
  paddedRowLength,
  pickSubgroupMatrixConfig,
  type SubgroupMatrixShape,
} from './matmulHalf.js';
import {
  AXPY_LANES,
  dotStep,
  GEMV_AXPY_ROW_BYTES,
  type GemvVariant,
  gemvColumns,
  gemvShader,
  SMALL_M_DOT,
  STREAM_ROWS,
  type StreamShape,
  type StreamVariant,
  streamColumns,
  streamShader,
} from './matmulStream.js';
import { TILE_LARGE, TILE_MID, type TileVariant, tileBytes, tileShader } from './matmulTile.js';
import {
  type Epilogue,
  epilogueActivationWgsl,
  epilogueKey,
  type Output,
  PARAMS,
  REDUCE_PARAMS,
  storeWgsl,
} from './matmulWgsl.js';

// Three kernels, chosen by shape (see `planMatmul`):
//  - gemv (M = 1): the whole workgroup streams a block of b with coalesced
//    vec4 loads, K split over its invocations, and sums the split with
//    subgroup operations where the device has them (workgroup memory where
//    not); memory-bound by design.
//  - smallm (M ≤ 32 with b stored [N, K], M ≤ 4 otherwise): the same
//    streaming kernels, each loaded vector of b reused for 4 rows of a (and,
//    with b stored [N, K], each vector of a for 4 rows of b) in registers.
//  - tile: register-blocked GEMM with double-buffered workgroup tiles, vec4
//    global and workgroup loads, transposes baked into the loaders.
// Each may split K across workgroups when the output alone gives too few of
// them; the partial sums then go through a scratch buffer and a reduce pass
// that applies the alpha/beta/c epilogue (and linear's bias and activation).
// b may be stored in f16 or bf16 (weight-only half): every kernel widens it
// as it loads. Half activations go through f32 scratch (see halfEdges.ts).

// The fused kernels stream the way the matrix products do.
export { CHECK_SUBGROUP_LAYOUT, streamLoop } from './matmulStream.js';

/** Workgroups a split-K plan aims for: a few per SM of a large GPU. */
const TARGET_WORKGROUPS = 256;
/** Fewest K per split worth a workgroup (and a share of the reduce pass). */
const MIN_SPLIT_K = 256;
/** Largest M served by the streaming kernels when b is stored [N, K]. */
const SMALL_M_MAX = 32;

// ---- split-K reduction and the K = 0 epilogue ------------------------------------

/** Binds part (when partial), c, bias, y and z where present, then the params. */
function reduceShader(partial: boolean, c: boolean, epilogue: Epilogue | undefined, kernel: string) {
  const sum = partial
    ? `var acc = 0.0;
  for (var s = 0u; s < params.splits; s++) { acc += part[s * params.total + i]; }`
    : 'let acc = 0.0;';
  const value = `params.alpha * acc${c ? ' + params.beta * c[i]' : ''}`;
  return {
    key: `matmul/reduce/${partial ? 'splits' : 'empty'}/c${+c}${epilogueKey(epilogue)}`,
    kernel,
    code: () => {
      const module = new ShaderModule().params(REDUCE_PARAMS);
      if (partial) module.storage('part', 'f32', 'read');
      if (c) module.storage('c', 'f32', 'read');
      if (epilogue?.bias) module.storage('bias', 'f32', 'read');
      module.storage('y', 'f32', 'read_write');
      if (epilogue?.z) module.storage('z', 'f32', 'read_write');
      module.declare(epilogueActivationWgsl(epilogue));
      return module.build(
        undefined,
        256,
        `  ${elementIndex('params.total')}
  ${sum}
  ${storeWgsl(epilogue, value, 'i % params.n', '[i]', false)}`,
      );
    },
  };
}

// ---- planning --------------------------------------------------------------------

export interface MatmulProblem extends MatmulDims {
  /** Byte offsets of the operands (vec4 bindings need 16-byte alignment). */
  readonly offsets?: {
    readonly a: number;
    readonly b: number;
    readonly c?: number;
    readonly y: number;
    readonly z?: number;
  };
  /** How b is stored: f32 (the default) or halves in u32 words. */
  readonly b?: Storage;
  /** How a is stored: f32 (the default), or halves the GEMV reads in place (M = 1, b in the same half). */
  readonly a?: Storage;
}

/** How a plan's launch lays out: y bound as vec4 or not, the tiles of y, and K cut into splits. */
export interface MatmulGrid {
  readonly vecY: boolean;
  readonly tilesM: number;
  readonly tilesN: number;
  readonly splits: number;
  readonly kPerSplit: number;
}

export type MatmulPlan =
  | { readonly path: 'empty' }
  | (MatmulGrid & { readonly path: 'gemv'; readonly variant: Omit<GemvVariant, 'out'> })
  | (MatmulGrid & { readonly path: 'smallm'; readonly variant: Omit<StreamVariant, 'out'> })
  | (MatmulGrid & { readonly path: 'tile'; readonly variant: Omit<TileVariant, 'out'> });

/** What of the device the f16 product depends on. */
export interface HalfGemmDevice {
  readonly maxWorkgroupBytes?: number;
  readonly maxInvocations?: number;
  readonly shaderF16?: boolean;
  /** The f16GemmTile switch: this tile where it fits. */
  readonly tile?: HalfGemmTileName;
  readonly subgroupMatrix?: {
    readonly configs: readonly SubgroupMatrixConfig[];
    readonly subgroupSize: number;
    readonly minSubgroupSize: number;
  };
}

export interface HalfGemmPlan extends MatmulGrid {
  readonly variant: Omit<HalfGemmVariant, 'out'>;
}

/**
 * The f16 × f16 product's plan in `mode`, or undefined where that mode does
 * not apply (the shape goes to the streaming kernels, or 'widen'). A mode the
 * device cannot run is an UnsupportedOnBackendError naming what it lacks.
 */
export function planHalfGemm(
  p: MatmulProblem & {
    /** a will be stored in rows padded to a multiple of 8 halves, 16-byte aligned. */
    readonly padA?: boolean;
  },
  mode: HalfGemmMode,
  device: HalfGemmDevice,
  kernel = 'matmul',
): HalfGemmPlan | undefined {
  const { batch, m, n, k, transA, transB } = p;
  if (mode === 'widen' || batch === 0 || m === 0 || n === 0 || k === 0) return undefined;
  if (m <= (transB ? SMALL_M_MAX : STREAM_ROWS)) return undefined;
  let shape: SubgroupMatrixShape;
  if (mode === 'subgroup-matrix') {
    const sm = device.subgroupMatrix;
    const config = sm && pickSubgroupMatrixConfig(sm.configs);
    if (!sm || !config || sm.subgroupSize === 0 || sm.minSubgroupSize !== sm.subgroupSize) {
      throw new UnsupportedOnBackendError(`${kernel}: no subgroup-matrix configuration for f16 operands`, {
        operation: kernel,
        argument: 'a',
        expected:
          "the 'chromium-experimental-subgroup-matrix' feature (Dawn: allow_unsafe_apis) with an f16 → f32 configuration and one subgroup size",
        actual: sm
          ? `configurations ${JSON.stringify(sm.configs)}, subgroup sizes ${sm.minSubgroupSize}–${sm.subgroupSize}`
          : 'no subgroup matrices on this device',
      });
    }
    shape = { m: config.M, n: config.N, k: config.K, lanes: sm.subgroupSize };
  } else {
    if (!device.shaderF16) {
      throw new UnsupportedOnBackendError(`${kernel}: the emulated f16 product needs shader-f16`, {
        operation: kernel,
        argument: 'a',
        expected: "the 'shader-f16' feature",
        actual: 'a device without it',
      });
    }
    shape = { m: 16, n: 16, k: 16, lanes: 32 };
  }
  const { maxWorkgroupBytes = 16384, maxInvocations = 256 } = device;
  const aligned = (offset: number | undefined) => (offset ?? 0) % 16 === 0;
  const off = p.offsets ?? { a: 0, b: 0, y: 0 };
  const fits = (t: typeof HALF_TILE_LARGE) =>
    halfTileBytes(t, shape, transA, transB) <= maxWorkgroupBytes && halfThreads(t, shape) <= maxInvocations;
  const large =
    Math.ceil(m / HALF_TILE_LARGE.bm) * Math.ceil(n / HALF_TILE_LARGE.bn) * batch >= TARGET_WORKGROUPS / 2;
  const named = device.tile && halfTileNamed(device.tile);
  const tile =
    named && fits(named) ? named : large && fits(HALF_TILE_LARGE) ? HALF_TILE_LARGE : HALF_TILE_MID;
  if (!fits(tile)) return undefined;
  // 8 halves per vec4<u32> along each operand's stored rows.
  const padA = p.padA === true;
  const vecA = padA || ((transA ? m % 8 === 0 : k % 8 === 0) && aligned(off.a));
  const vecB = (transB ? k % 8 === 0 : n % 8 === 0) && aligned(off.b);
  const vecY = n % 4 === 0 && aligned(off.y) && aligned(off.c) && aligned(off.z);
  const tilesM = Math.ceil(m / tile.bm);
  const tilesN = Math.ceil(n / tile.bn);
  const plan = splitK(tilesM * tilesN * batch, k, tile.bk);
  const variant = {
    compute: mode === 'emulated' ? ('emulated' as const) : ('subgroup-matrix' as const),
    shape,
    tile,
    transA,
    transB,
    vecA,
    vecB,
    ...(padA ? { padA } : {}),
  };
  return { variant, vecY, tilesM, tilesN, ...plan };
}

/** The f16 product's mode: the backend's f16Gemm option where set, else subgroup matrices where the device has them. */
export function halfGemmMode(encoder: KernelEncoder): HalfGemmMode {
  if (encoder.tuning.f16Gemm !== undefined) return encoder.tuning.f16Gemm;
  const sm = encoder.subgroupMatrix;
  const usable = sm && pickSubgroupMatrixConfig(sm.configs) && sm.minSubgroupSize === sm.subgroupSize;
  return usable ? 'subgroup-matrix' : 'widen';
}

/** K splits that bring `blocks` workgroups near the target; kPerSplit a multiple of `granule`. */
function splitK(blocks: number, k: number, granule: number): { splits: number; kPerSplit: number } {
  let splits = 1;
  if (blocks < TARGET_WORKGROUPS && k >= 2 * MIN_SPLIT_K) {
    splits = Math.min(Math.ceil(TARGET_WORKGROUPS / blocks), Math.floor(k / MIN_SPLIT_K));
  }
  const kPerSplit = Math.ceil(k / splits / granule) * granule;
  return { splits: Math.ceil(k / kPerSplit), kPerSplit };
}

/** What of the device a plan depends on. */
export interface MatmulDevice {
  /** maxComputeWorkgroupStorageSize */
  readonly maxWorkgroupBytes?: number;
  /** The `subgroups` feature is enabled. */
  readonly subgroups?: boolean;
}

/** Chooses the kernel, its specialisation and its grid for one problem. */
export function planMatmul(p: MatmulProblem, device: MatmulDevice = {}): MatmulPlan {
  const { maxWorkgroupBytes = 16384, subgroups = false } = device;
  const { batch, m, n, k, transA, transB, b = 'f32' } = p;
  if (batch === 0 || m === 0 || n === 0 || k === 0) return { path: 'empty' };
  const aligned = (offset: number | undefined) => (offset ?? 0) % 16 === 0;
  const off = p.offsets ?? { a: 0, b: 0, y: 0 };
  const vecY = n % 4 === 0 && aligned(off.y) && aligned(off.c) && aligned(off.z);
  // transB reads b and a along K (8 halves per vector of a half b); otherwise b along N.
  const streamVecB = (transB ? k % dotStep(b) === 0 : n % 4 === 0) && aligned(off.b);
  // Splits of K start on a vector step of b.
  const granule = b === 'f32' ? 4 : 8;

  if (m === 1) {
    // [K, 1] and [1, K] are the same memory: a is read as untransposed.
    const vecB = streamVecB;
    const vecA = transB && vecB && aligned(off.a);
    const width = vecB ? 4 : 1;
    // The widest row segment that still gives every SM a few workgroups.
    const rowBytes =
      GEMV_AXPY_ROW_BYTES.find((bytes) => Math.ceil((n * 4) / bytes) * batch >= TARGET_WORKGROUPS) ??
      GEMV_AXPY_ROW_BYTES[GEMV_AXPY_ROW_BYTES.length - 1]!;
    const variant = { transB, vecA, vecB, lanes: rowBytes / 4 / width, subgroups, b, a: p.a ?? 'f32' };
    const tilesN = Math.ceil(n / gemvColumns(variant));
    const plan = splitK(tilesN * batch, k, granule);
    // The dot kernel writes single columns.
    return { path: 'gemv', variant, vecY: vecY && !transB, tilesM: 1, tilesN, ...plan };
  }

  // Small M with K-major b (the weight layout) streams too; with N-major b,
  // the 64×64 tiles overtake it past M = 4.
  if (m <= (transB ? SMALL_M_MAX : STREAM_ROWS)) {
    const vecB = streamVecB;
    const vecA = transB && vecB && !transA && aligned(off.a);
    const rows = Math.min(STREAM_ROWS, pow2AtLeast(m));
    const shape: StreamShape = transB
      ? SMALL_M_DOT
      : { group: AXPY_LANES, cols: 1, unroll: rows <= 2 ? 4 : 2 };
    const variant = { rows, shape, transA, transB, vecA, vecB, b };
    const tilesM = Math.ceil(m / rows);
    const tilesN = Math.ceil(n / streamColumns(variant));
    const plan = splitK(tilesM * tilesN * batch, k, granule);
    // The dot kernel writes single columns.
    return { path: 'smallm', variant, vecY: vecY && !transB, tilesM, tilesN, ...plan };
  }

  const large = Math.ceil(m / TILE_LARGE.bm) * Math.ceil(n / TILE_LARGE.bn) * batch >= TARGET_WORKGROUPS / 2;
  const tile = large && tileBytes(TILE_LARGE) <= maxWorkgroupBytes ? TILE_LARGE : TILE_MID;
  // vec4 loads need whole vectors along the contiguous axis of each operand.
  const vecA = (transA ? m % 4 === 0 : k % 4 === 0) && aligned(off.a);
  const vecB = (transB ? k % 4 === 0 : n % 4 === 0) && aligned(off.b);
  const swap = transA && transB;
  const tilesM = Math.ceil((swap ? n : m) / tile.bm);
  const tilesN = Math.ceil((swap ? m : n) / tile.bn);
  const plan = splitK(tilesM * tilesN * batch, k, tile.bk);
  const variant = { tile, swap, transA, transB, vecA, vecB, b };
  // Swapped tiles write y element by element.
  return { path: 'tile', variant, vecY: vecY && !swap, tilesM, tilesN, ...plan };
}

// ---- encoding ----------------------------------------------------------------------

export type MatmulCall = MatmulLaunch<Operand>;

/**
 * Encodes the plan of one matrix product (and, for linear, its epilogue): b
 * in any float dtype, read as stored; half a, c, bias, y and z through f32.
 */
export function encodeMatmul(encoder: KernelEncoder, call: MatmulCall, kernel: string): void {
  // b stored [N, K] larger than one binding: a product per piece of its rows.
  encodeMatmulColumns(encoder, call, kernel, (part) => encodeMatmulWhole(encoder, part, kernel));
}

function encodeMatmulWhole(encoder: KernelEncoder, call: MatmulCall, kernel: string): void {
  const { b, c, bias, y, z } = call;
  if (call.batch * call.m * call.n === 0) return;
  // Precision 'half' rounds an f32 a to b's f16 (nearest even, once, into
  // scratch) where the half GEMM runs on subgroup matrices: the prompt's
  // f32 activations times f16 weights on the tensor cores. Elsewhere wgpu
  // keeps computing such products exactly, more precisely than asked.
  const roundA =
    call.precision === 'half' &&
    call.a.dtype === 'f32' &&
    b.dtype === 'f16' &&
    halfGemmMode(encoder) !== 'widen';
  if ((call.a.dtype === 'f16' || roundA) && b.dtype === 'f16' && call.k > 0) {
    // Rounded into scratch, a's rows can be padded to whole 8-half vectors:
    // an odd row (the LM head's gradients over 50,257 columns) then loads 8
    // halves at a time instead of one.
    const aRow = call.transA ? call.m : call.k;
    const padA = roundA && aRow % 8 !== 0;
    const plan = planHalfGemm(
      {
        ...call,
        padA,
        offsets: { a: roundA ? 0 : call.a.offset, b: b.offset, c: c?.offset, y: y.offset, z: z?.offset },
        a: 'f16',
        b: 'f16',
      },
      halfGemmMode(encoder),
      {
        maxWorkgroupBytes: encoder.limits.maxComputeWorkgroupStorageSize,
        maxInvocations: encoder.limits.maxComputeInvocationsPerWorkgroup,
        shaderF16: encoder.features.has('shader-f16'),
        subgroupMatrix: encoder.subgroupMatrix,
        ...(encoder.tuning.f16GemmTile ? { tile: encoder.tuning.f16GemmTile } : {}),
      },
      kernel,
    );
    if (plan) {
      const a = roundA ? halfScratchOf(encoder, call.a, padA ? aRow : undefined) : call.a;
      // a and b are read in f16; c and bias widened, y and z rounded from f32.
      const strideA = padA ? (call.m * call.k * paddedRowLength(aRow)) / aRow : undefined;
      encodeWithF32Activations(encoder, kernel, { c, bias }, { y, z }, (inputs, outputs) =>
        encodeHalfGemm(
          encoder,
          { ...call, a, ...inputs, ...outputs, y: outputs.y! },
          { ...plan, strideA },
          kernel,
        ),
      );
      return;
    }
  }
  const { a } = call;
  // The GEMV (M = 1) reads a half a in place when b is stored in the same
  // half, and (one K split, b stored [N, K], no epilogue, N even) stores a
  // half y in place too: no cast dispatches around it.
  const halfA = call.m === 1 && call.k > 0 && isHalf(a.dtype) && b.dtype === a.dtype;
  const widen = halfA ? { c, bias } : { a, c, bias };
  const halfY = halfA && call.activation === undefined && halfGemvStoresY(encoder, call);
  const outputs = halfY ? {} : { y, z };
  encodeWithF32Activations(encoder, kernel, widen, outputs, (inputs, wide) =>
    encodeF32Activations(
      encoder,
      { ...call, ...inputs, ...wide, y: (wide as { y?: Operand }).y ?? y },
      kernel,
      halfY ? storageOf(y.dtype) : 'f32',
    ),
  );
}

/**
 * `a` rounded (nearest even) into f16 scratch that lives until the
 * submission finished; with `rowLength`, in rows padded to whole 8-half
 * vectors (the padding zero).
 */
function halfScratchOf(encoder: KernelEncoder, a: Operand, rowLength?: number): Operand {
  const size = rowLength === undefined ? a.size : (a.size / rowLength) * paddedRowLength(rowLength);
  const half: Operand = {
    buffer: encoder.scratch(Math.max(16, Math.ceil(size / 2) * 4)),
    offset: 0,
    size,
    shape: a.shape,
    dtype: 'f16',
  };
  if (rowLength === undefined) encodeCast(encoder, a, half);
  else encodeCastPaddedRows(encoder, a, half, rowLength, paddedRowLength(rowLength));
  return half;
}

/** Whether the GEMV of `call` (M = 1, half a and b) can store its half y in place. */
function halfGemvStoresY(encoder: KernelEncoder, call: MatmulCall): boolean {
  const { a, b, c, y } = call;
  if (!call.transB || call.n % 2 !== 0 || y.offset % 4 !== 0) return false;
  const plan = planMatmul(
    {
      ...call,
      offsets: { a: a.offset, b: b.offset, c: c?.offset, y: y.offset },
      a: storageOf(a.dtype),
      b: storageOf(b.dtype),
    },
    {
      maxWorkgroupBytes: encoder.limits.maxComputeWorkgroupStorageSize,
      subgroups: encoder.features.has('subgroups'),
    },
  );
  return plan.path === 'gemv' && plan.splits === 1;
}

function encodeF32Activations(
  encoder: KernelEncoder,
  call: MatmulCall,
  kernel: string,
  yStorage: Storage = 'f32',
): void {
  const { a, b, c, y, batch, m, n, bias, z } = call;
  const total = batch * m * n;
  if (total === 0) return;
  const epilogue = epilogueOf(call);
  const plan = planMatmul(
    {
      ...call,
      offsets: { a: a.offset, b: b.offset, c: c?.offset, y: y.offset, z: z?.offset },
      b: storageOf(b.dtype),
      a: storageOf(a.dtype),
    },
    {
      maxWorkgroupBytes: encoder.limits.maxComputeWorkgroupStorageSize,
      subgroups: encoder.features.has('subgroups'),
    },
  );
  if (plan.path === 'empty') {
    // K = 0: the product is zero; only beta·c remains.
    encoder.dispatch({
      shader: reduceShader(false, c !== undefined, epilogue, kernel),
      buffers: [...(c ? [c] : []), ...(bias ? [bias] : []), y, ...(z ? [z] : [])],
      params: { layout: REDUCE_PARAMS, values: { total, splits: 0, n, alpha: call.alpha, beta: call.beta } },
      workgroups: elementGrid(encoder, total),
    });
    return;
  }
  encodeTiles(encoder, call, plan, epilogue, kernel, (out) =>
    plan.path === 'tile'
      ? tileShader({ ...plan.variant, out }, kernel)
      : plan.path === 'gemv'
        ? gemvShader(
            yStorage === 'f32'
              ? { ...plan.variant, out }
              : { ...plan.variant, y: yStorage, out: { vec: false, c: out.c } },
            kernel,
          )
        : streamShader({ ...plan.variant, out }, kernel),
  );
}

function epilogueOf(call: MatmulCall): Epilogue | undefined {
  return call.activation === undefined
    ? undefined
    : { bias: call.bias !== undefined, activation: call.activation, z: call.z !== undefined };
}

function encodeHalfGemm(
  encoder: KernelEncoder,
  call: MatmulCall,
  plan: HalfGemmPlan & { strideA?: number | undefined },
  kernel: string,
): void {
  encodeTiles(encoder, call, plan, epilogueOf(call), kernel, (out) =>
    halfGemmShader({ ...plan.variant, out }, kernel),
  );
}

/** The main dispatch of a plan over tiles and K splits, and the reduce pass that sums the splits. */
function encodeTiles(
  encoder: KernelEncoder,
  call: MatmulCall,
  plan: {
    tilesM: number;
    tilesN: number;
    splits: number;
    kPerSplit: number;
    vecY: boolean;
    /** Elements between a's batches where its rows are padded (m·k otherwise). */
    strideA?: number | undefined;
  },
  epilogue: Epilogue | undefined,
  kernel: string,
  shaderFor: (out: Output) => ShaderSource,
): void {
  const { a, b, c, y, batch, m, n, k, bias, z } = call;
  const total = batch * m * n;
  // The operands after a and b, in the order `bindings` and `reduceShader` declare them.
  const tail = (first: readonly (Operand | GPUBufferBinding)[]) => [
    ...first,
    ...(c ? [c] : []),
    ...(bias ? [bias] : []),
    y,
    ...(z ? [z] : []),
  ];
  const splitting = plan.splits > 1;
  // K splits write raw sums (alpha 1, no c) to scratch, each split its own block.
  const out: Output = splitting
    ? { vec: n % 4 === 0, c: false }
    : { vec: plan.vecY, c: c !== undefined, ...(epilogue ? { epilogue } : {}) };
  const shader = shaderFor(out);
  const values = {
    m,
    n,
    k,
    tilesM: plan.tilesM,
    tilesN: plan.tilesN,
    splits: plan.splits,
    batches: batch,
    kPerSplit: plan.kPerSplit,
    strideA: plan.strideA ?? m * k,
    strideB: k * n,
    strideY: m * n,
    partStride: splitting ? total : 0,
    alpha: splitting ? 1 : call.alpha,
    beta: call.beta,
  };
  const workgroups = gridFor(plan.tilesM * plan.tilesN * plan.splits * batch, encoder.limits);
  if (!splitting) {
    encoder.dispatch({
      shader,
      buffers: tail([a, b]),
      params: { layout: PARAMS, values },
      workgroups,
    });
    return;
  }
  const bytes = plan.splits * total * 4;
  const scratch: GPUBufferBinding = { buffer: encoder.scratch(bytes), offset: 0, size: bytes };
  encoder.dispatch({ shader, buffers: [a, b, scratch], params: { layout: PARAMS, values }, workgroups });
  encoder.dispatch({
    shader: reduceShader(true, c !== undefined, epilogue, kernel),
    buffers: tail([scratch]),
    params: {
      layout: REDUCE_PARAMS,
      values: { total, splits: plan.splits, n, alpha: call.alpha, beta: call.beta },
    },
    workgroups: elementGrid(encoder, total),
  });
}

// matmul's precision 'tf32' is accepted and computed in f32 (WGSL has no tf32):
// more precise than asked, as the spec allows.
export const MATMUL_KERNELS: readonly AnyWgpuKernel[] = [
  // b stored [N, K] (transB) larger than one binding is bound in pieces of whole rows.
  wgpuKernel(matmul, (encoder, call) => encodeMatmul(encoder, matmulLaunch(call), matmul.name), {
    splitsLargeOperands: true,
    dtypes: FLOAT,
  }),
  wgpuKernel(
    batchedMatmul,
    (encoder, call) => encodeMatmul(encoder, batchedMatmulLaunch(call), batchedMatmul.name),
    { dtypes: FLOAT },
  ),
];
