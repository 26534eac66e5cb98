import { argmax, FLOAT, type KernelSpec, max, sizeOf, sum, sumSquares } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import { type AnyCudaKernel, cudaKernel, type KernelEncoder, type Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { type Address, addr, type F32, type R32 } from '../ptx/operands.js';
import { checkElementCount } from './common.js';
import { loadAllParams } from './entryParams.js';
import {
  accessWidth,
  combine,
  forEachRow,
  GroupReducer,
  geometryKey,
  groupPlace,
  identityOf,
  type ReduceOp,
  type RowGeometry,
  rowGrid,
  rowLaunchDims,
  WARP_ROWS_BLOCK,
} from './rowReduce.js';
import {
  type FloatStorage,
  loadAsF32,
  loadOneAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storesOf,
} from './storage.js';

/** What a reduction kernel adds up: the op, and whether it squares each element first. */
export interface ReduceKind {
  readonly op: ReduceOp;
  readonly square: boolean;
}

/**
 * How `rows` runs of `n` elements are reduced: each run is cut into `splits`
 * segments of `chunk` elements (the last may be shorter), one row group per
 * segment. With more than one split a second pass reduces the segments'
 * results.
 */
export interface ReductionPlan {
  readonly geometry: RowGeometry;
  readonly splits: number;
  readonly chunk: number;
}

/** Loads a thread of the reduction keeps in flight. */
const UNROLL = 4;
/** Warps that keep a device busy with one short row each. */
const WARP_ROWS_PER_SM = 64;
const SEGMENT_BLOCK = 256;
/** The least accesses per thread worth a segment of its own. */
const ACCESSES_PER_THREAD = 4;

/**
 * Short runs go to groups within a warp; long ones to blocks, cut into
 * segments when the runs alone would leave SMs idle. `width` is the access
 * width every segment start is aligned to.
 */
export function planReduction(
  device: DeviceProperties,
  rows: number,
  n: number,
  width: 1 | 2 | 4,
  allowSplit = true,
): ReductionPlan {
  const accesses = Math.ceil(n / width);
  const manyRows = rows >= device.multiprocessors * WARP_ROWS_PER_SM;
  if (accesses <= 32 * ACCESSES_PER_THREAD || (manyRows && accesses <= 32 * 4 * ACCESSES_PER_THREAD)) {
    let threads = 1;
    while (threads < Math.min(32, accesses)) threads *= 2;
    return { geometry: { threads, block: WARP_ROWS_BLOCK, width, slots: 0 }, splits: 1, chunk: n };
  }
  const geometry: RowGeometry = { threads: SEGMENT_BLOCK, block: SEGMENT_BLOCK, width, slots: 0 };
  const resident = rowGrid(device, geometry, Number.MAX_SAFE_INTEGER);
  let splits = 1;
  if (allowSplit && rows < resident) {
    splits = Math.min(
      Math.ceil(accesses / (SEGMENT_BLOCK * ACCESSES_PER_THREAD)),
      Math.ceil(resident / rows),
    );
  }
  const chunk = Math.ceil(Math.ceil(n / splits) / width) * width;
  return { geometry, splits: Math.ceil(n / chunk), chunk };
}

export function reductionEntry(kind: ReduceKind): string {
  return `reduce_${kind.op}${kind.square ? '_squares' : ''}`;
}

/** Storage of a reduction's input and output (a split's partial results are f32). */
export interface ReduceTypes {
  readonly x: FloatStorage;
  readonly y: FloatStorage;
}

const F32_REDUCE: ReduceTypes = { x: 'f32', y: 'f32' };

export function reductionKey(kind: ReduceKind, g: RowGeometry, split: boolean, types = F32_REDUCE): string {
  return `reduction/${kind.op}${kind.square ? 'Squares' : ''}/${geometryKey(g)}${split ? '/split' : ''}${storageKey([types.x, types.y])}`;
}

/**
 * y[s] = op over segment s of x. Segment s is part `s mod splits` of run
 * `s / splits` (with `split`; else the whole run s): `chunk` elements from
 * its start, fewer at the end of the run. A thread reads `width` elements
 * per access, a group's accesses are adjacent; a run of one row may end in
 * fewer than `width` elements, which the lanes read one by one.
 */
export function reductionModule(
  kind: ReduceKind,
  g: RowGeometry,
  split: boolean,
  types = F32_REDUCE,
): PtxModule {
  const bytes = STORAGE_BYTES[types.x];
  const m = new PtxModule();
  m.entry(
    reductionEntry(kind),
    { x: 'ptr', y: 'ptr', segments: 'u32', n: 'u32', chunk: 'u32', splits: 'u32' },
    (k, p) => {
      const { x, y, segments, n, chunk, splits } = loadAllParams(k, p);
      const place = groupPlace(k, g);
      const reducer = new GroupReducer(k, place);
      const accumulate = (acc: F32, v: F32) => {
        if (kind.square) k.fma('f32', acc, v, v, acc);
        else combine(k, kind.op, acc, v);
      };
      forEachRow(
        k,
        place,
        segments,
        (segment, valid) => {
          let start = k.mulLo('u32', k.reg('u32'), segment, n);
          let len = n;
          if (split) {
            const row = k.div('u32', k.reg('u32'), segment, splits);
            const part = k.sub('u32', k.reg('u32'), segment, k.mulLo('u32', k.reg('u32'), row, splits));
            const offset = k.mulLo('u32', k.reg('u32'), part, chunk);
            start = k.madLo('u32', k.reg('u32'), row, n, offset);
            len = k.min('u32', k.reg('u32'), chunk, k.sub('u32', k.reg('u32'), n, offset));
          }
          // A group past the last segment reads nothing but joins the shuffles.
          if (valid) len = k.selp('u32', k.reg('u32'), len, 0, valid);
          const acc = k.mov('f32', k.reg('f32'), identityOf(kind.op));
          const whole = g.width === 1 ? len : k.and('b32', k.reg('u32'), len, ~(g.width - 1) >>> 0);
          const c = k.reg('u32');
          const first = k.mulLo('u32', k.reg('u32'), place.laneInGroup, g.width);
          const stride = g.threads * g.width;
          // UNROLL accesses in flight per thread while they all fit, then one at a time.
          const span = (UNROLL - 1) * stride;
          const unrolledEnd = k.sub('u32', k.reg('u32'), k.max('u32', k.reg('u32'), whole, span), span);
          const loadAt = (at: Address) => {
            const regs = k.regs('f32', g.width);
            loadAsF32(k, types.x, regs, at);
            return regs;
          };
          k.forRange(c, first, unrolledEnd, UNROLL * stride, () => {
            const at = k.elementAddress(x, k.add('u32', k.reg('u32'), start, c), bytes);
            const loads = Array.from({ length: UNROLL }, (_, u) => loadAt(addr(at, u * stride * bytes)));
            for (const v of loads.flat()) accumulate(acc, v);
          });
          k.forRange(c, c, whole, stride, () => {
            const at = k.elementAddress(x, k.add('u32', k.reg('u32'), start, c), bytes);
            for (const v of loadAt(addr(at))) accumulate(acc, v);
          });
          if (g.width > 1) {
            // The last fewer-than-width elements of a one-row run, one by one (a group may be narrower than them).
            const t = k.reg('u32');
            k.forRange(t, k.add('u32', k.reg('u32'), whole, place.laneInGroup), len, g.threads, () => {
              const at = k.elementAddress(x, k.add('u32', k.reg('u32'), start, t), bytes);
              accumulate(acc, loadOneAsF32(k, types.x, at));
            });
          }
          const [result] = reducer.reduce([kind.op], [acc]);
          const leader = k.setp('eq', 'u32', k.reg('pred'), place.laneInGroup, 0);
          const write = valid ? k.and('pred', k.reg('pred'), leader, valid) : leader;
          const out = k.elementAddress(y, segment, STORAGE_BYTES[types.y]);
          const store = storesOf(k, types.y, [result!]);
          k.predicated(write, () => store(out));
        },
        reducer,
      );
    },
    { requiredThreadsPerBlock: [g.block, 1, 1] },
  );
  return m;
}

/** Records the reduction of `rows` runs of `n` elements of `x` into `y` (one value per run). */
export function launchReduction(
  encoder: KernelEncoder,
  kind: ReduceKind,
  x: Operand | bigint,
  y: Operand | bigint,
  rows: number,
  n: number,
  allowSplit = true,
  types = F32_REDUCE,
): void {
  // One run needs only its start aligned (its last elements are read one by one); more need n too.
  const width = rows === 1 ? accessWidth(4, [x]) : accessWidth(n, [x]);
  const plan = planReduction(encoder.device, rows, n, width, allowSplit);
  const split = plan.splits > 1;
  const segments = rows * plan.splits;
  const out = split ? encoder.scratch(segments * 4) : y;
  const first = split ? { x: types.x, y: 'f32' as const } : types;
  encoder.launch({
    key: reductionKey(kind, plan.geometry, split, first),
    module: () => reductionModule(kind, plan.geometry, split, first),
    entry: reductionEntry(kind),
    ...rowLaunchDims(encoder.device, plan.geometry, segments),
    args: { x, y: out, segments, n, chunk: plan.chunk, splits: plan.splits },
  });
  // The segments' results are plain partial sums (or maxima): reduce them without squaring.
  if (split) {
    const rest = { x: 'f32' as const, y: types.y };
    launchReduction(encoder, { op: kind.op, square: false }, out, y, rows, plan.splits, false, rest);
  }
}

function reductionKernel(spec: KernelSpec<{ axis: 'last' | 'all' }>, kind: ReduceKind): AnyCudaKernel {
  return cudaKernel(
    spec,
    (encoder, { inputs, outputs, attrs, io }) => {
      const x = inputs[0]!;
      const y = outputs[0]!;
      if (y.size === 0) return;
      checkElementCount(spec.name, 'x', x.size);
      const shape = io.inputs[0]!.shape;
      const n = attrs.axis === 'all' ? sizeOf(shape) : shape[shape.length - 1]!;
      const types = { x: storageOf(x), y: storageOf(y) };
      // A sum of nothing is 0 (max rejects empty runs in its spec); half outputs are not whole words: the kernel writes them.
      if (n === 0 && types.y === 'f32') {
        encoder.fill32(y.ptr, 0, y.size);
        return;
      }
      launchReduction(encoder, kind, x, y, y.size, n, true, types);
    },
    { dtypes: FLOAT },
  );
}

// ---- argmax ---------------------------------------------------------------------

// Values are compared as u32 keys: the float's bits mapped so that unsigned
// order is numeric order, every NaN mapped above +Infinity and -0 onto +0.
// A (key, index) pair beats another with a larger key, or an equal key and a
// lower index: a total order, so the butterfly leaves every lane with the
// same pair and ties go to the lowest index whatever the reduction order.

/** A thread's best element so far. */
interface Best {
  readonly key: R32;
  readonly index: R32;
}

/** The u32 order key of `v` (see above). */
export function orderKey(k: KernelBuilder, v: F32): R32 {
  const bits = k.mov('b32', k.reg('u32'), v);
  // Negative values flip every bit, the others only the sign.
  const flip = k.shr('s32', k.reg('u32'), bits, 31);
  k.or('b32', flip, flip, 0x80000000);
  const key = k.xor('b32', k.reg('u32'), bits, flip);
  const magnitude = k.and('b32', k.reg('u32'), bits, 0x7fffffff);
  k.selp('u32', key, 0x80000000, key, k.setp('eq', 'u32', k.reg('pred'), magnitude, 0));
  k.selp('u32', key, 0xffffffff, key, k.setp('gt', 'u32', k.reg('pred'), magnitude, 0x7f800000));
  return key;
}

/** `best = the better of best and other`. */
function takeBetter(k: KernelBuilder, best: Best, other: Best): void {
  const wins = k.setp('gt', 'u32', k.reg('pred'), other.key, best.key);
  const equal = k.setp('eq', 'u32', k.reg('pred'), other.key, best.key);
  const lower = k.setp('lt', 'u32', k.reg('pred'), other.index, best.index);
  k.or('pred', wins, wins, k.and('pred', equal, equal, lower));
  k.selp('u32', best.key, other.key, best.key, wins);
  k.selp('u32', best.index, other.index, best.index, wins);
}

/** Accesses per thread a row aims for before it takes more threads. */
const ARGMAX_ACCESSES_PER_THREAD = 8;
/** Threads per block of a long row: many loads in flight for the one row a decode step has. */
const ARGMAX_BLOCK = 512;

/** Groups within a warp for rows of up to 256 accesses, else a 512-thread block per row. */
export function planArgmax(n: number, width: 1 | 2 | 4): RowGeometry {
  const accesses = n / width;
  if (accesses <= 32 * ARGMAX_ACCESSES_PER_THREAD) {
    let threads = 1;
    while (threads < Math.min(32, Math.ceil(accesses / ARGMAX_ACCESSES_PER_THREAD))) threads *= 2;
    return { threads, block: WARP_ROWS_BLOCK, width, slots: 0 };
  }
  return { threads: ARGMAX_BLOCK, block: ARGMAX_BLOCK, width, slots: 0 };
}

/** A block of a row's part: many parts of few long rows spread over the SMs. */
const ARGMAX_PART_GEOMETRY = (width: 1 | 2 | 4): RowGeometry => ({
  threads: SEGMENT_BLOCK,
  block: SEGMENT_BLOCK,
  width,
  slots: 0,
});

/**
 * How argmax cuts each of `rows` rows of `n` into `splits` parts of `chunk`
 * elements (the last may be shorter; `width` aligned), one block a part,
 * where the rows take a block each (planArgmax) and alone would leave SMs
 * idle: decoding's one row of 128,256 logits on one SM read 500 KB four
 * loads at a time. One split where they would not.
 */
export function planArgmaxParts(
  device: DeviceProperties,
  rows: number,
  n: number,
  width: 1 | 2 | 4,
): { readonly splits: number; readonly chunk: number } {
  const accesses = Math.ceil(n / width);
  const resident = rowGrid(device, ARGMAX_PART_GEOMETRY(width), Number.MAX_SAFE_INTEGER);
  if (planArgmax(n, width).threads !== ARGMAX_BLOCK || rows >= resident) return { splits: 1, chunk: n };
  const splits = Math.min(
    Math.ceil(accesses / (SEGMENT_BLOCK * ACCESSES_PER_THREAD)),
    Math.ceil(resident / rows),
  );
  const chunk = Math.ceil(Math.ceil(n / splits) / width) * width;
  return { splits: Math.ceil(n / chunk), chunk };
}

export function argmaxKey(g: RowGeometry, type: FloatStorage = 'f32', split = false): string {
  return `reduction/argmax/${geometryKey(g)}${split ? '/split' : ''}${storageKey([type])}`;
}

/**
 * y[row] = the index of the largest of x[row, 0 ..< n], for every row (n a
 * multiple of the access width). A thread reads its accesses in increasing
 * index order, so only a strictly larger key displaces its best; the
 * group's pairs then meet in a shuffle butterfly, a block's warps through
 * shared memory in warp order.
 */
export function argmaxModule(g: RowGeometry, type: FloatStorage = 'f32', split = false): PtxModule {
  const bytes = STORAGE_BYTES[type];
  const m = new PtxModule();
  m.entry(
    'argmax',
    { x: 'ptr', y: 'ptr', rows: 'u32', n: 'u32', chunk: 'u32', splits: 'u32' },
    (k, p) => {
      const { x, y, rows, n, chunk, splits } = loadAllParams(k, p);
      const place = groupPlace(k, g);
      const warps = g.block / 32;
      const pairs = g.threads > 32 ? k.sharedArray('argmax_pairs', 'u32', 2 * warps, 16) : undefined;
      const stride = g.threads * g.width;
      forEachRow(k, place, rows, (segment, valid) => {
        let start = k.mulLo('u32', k.reg('u32'), segment, n);
        let whole: R32 = n;
        // With `split`, segment s is part s mod splits of row s / splits, its indices counted from `offset`.
        let offset: R32 | undefined;
        if (split) {
          const row = k.div('u32', k.reg('u32'), segment, splits);
          const part = k.sub('u32', k.reg('u32'), segment, k.mulLo('u32', k.reg('u32'), row, splits));
          offset = k.mulLo('u32', k.reg('u32'), part, chunk);
          start = k.madLo('u32', k.reg('u32'), row, n, offset);
          whole = k.min('u32', k.reg('u32'), chunk, k.sub('u32', k.reg('u32'), n, offset));
        }
        // A group past the last row reads nothing but joins the shuffles.
        const len = valid ? k.selp('u32', k.reg('u32'), whole, 0, valid) : whole;
        // Key 0 is no float's: the first element read displaces it.
        const best: Best = {
          key: k.mov('u32', k.reg('u32'), 0),
          index: k.mov('u32', k.reg('u32'), 0xffffffff),
        };
        const read = (c: R32, offset: number) => {
          const at = k.elementAddress(x, k.add('u32', k.reg('u32'), start, c), bytes);
          const regs = k.regs('f32', g.width);
          loadAsF32(k, type, regs, addr(at, offset * bytes));
          return regs;
        };
        /** Absorbs the loads made at c, c + stride, … element by element, in index order. */
        const absorb = (loads: readonly F32[][], c: R32) => {
          for (const [u, values] of loads.entries()) {
            for (const [i, v] of values.entries()) {
              const key = orderKey(k, v);
              const larger = k.setp('gt', 'u32', k.reg('pred'), key, best.key);
              k.selp('u32', best.key, key, best.key, larger);
              const index = k.add('u32', k.reg('u32'), c, u * stride + i);
              k.selp('u32', best.index, index, best.index, larger);
            }
          }
        };
        const c = k.reg('u32');
        const first = k.mulLo('u32', k.reg('u32'), place.laneInGroup, g.width);
        // UNROLL accesses in flight per thread while they all fit, then one at a time.
        const span = (UNROLL - 1) * stride;
        const unrolledEnd = k.sub('u32', k.reg('u32'), k.max('u32', k.reg('u32'), len, span), span);
        k.forRange(c, first, unrolledEnd, UNROLL * stride, () => {
          absorb(
            Array.from({ length: UNROLL }, (_, u) => read(c, u * stride)),
            c,
          );
        });
        k.forRange(c, c, len, stride, () => absorb([read(c, 0)], c));
        const other: Best = { key: k.reg('u32'), index: k.reg('u32') };
        for (let offset = Math.min(g.threads, 32) / 2; offset >= 1; offset /= 2) {
          k.shflSync('bfly', other.key, best.key, offset);
          k.shflSync('bfly', other.index, best.index, offset);
          takeBetter(k, best, other);
        }
        if (pairs) {
          const base = k.sharedAddress(pairs);
          const leadsWarp = k.setp('eq', 'u32', k.reg('pred'), place.lane, 0);
          const slot = k.madLo('u32', k.reg('u32'), place.warp, 8, base);
          k.predicated(leadsWarp, () => k.stShared('u32', addr(slot), [best.key, best.index]));
          k.barSync();
          for (let w = 0; w < warps; w++) {
            k.ldShared('u32', [other.key, other.index], addr(base, w * 8));
            takeBetter(k, best, other);
          }
          // No warp rewrites the pairs for its next row while another still reads these.
          k.barSync();
        }
        const leader = k.setp('eq', 'u32', k.reg('pred'), place.laneInGroup, 0);
        const write = valid ? k.and('pred', k.reg('pred'), leader, valid) : leader;
        if (offset) {
          // The part's best as a (key, index in the row) pair, for argmaxPairsModule.
          const index = k.add('u32', k.reg('u32'), best.index, offset);
          const out = k.elementAddress(y, segment, 8);
          k.predicated(write, () => k.stGlobal('u32', out, [best.key, index]));
        } else {
          const out = k.elementAddress(y, segment, 4);
          k.predicated(write, () => k.stGlobal('u32', out, best.index));
        }
      });
    },
    { requiredThreadsPerBlock: [g.block, 1, 1] },
  );
  return m;
}

/** A warp a row: the second pass over each row's parts. */
const ARGMAX_PAIRS_GEOMETRY: RowGeometry = { threads: 32, block: WARP_ROWS_BLOCK, width: 1, slots: 0 };

export const ARGMAX_PAIRS_KEY = `reduction/argmax/pairs/${geometryKey(ARGMAX_PAIRS_GEOMETRY)}`;

/**
 * y[row] = the index of the best of the `splits` (key, index) pairs of row
 * `row` in `pairs` (argmaxModule's with `split`): a warp a row, its lanes
 * taking every 32nd pair, then the butterfly. The order is total (see
 * above), so the lowest index of the largest key wins whatever the parts.
 */
export function argmaxPairsModule(): PtxModule {
  const g = ARGMAX_PAIRS_GEOMETRY;
  const m = new PtxModule();
  m.entry(
    'argmax_pairs',
    { pairs: 'ptr', y: 'ptr', rows: 'u32', splits: 'u32' },
    (k, p) => {
      const { pairs, y, rows, splits } = loadAllParams(k, p);
      const place = groupPlace(k, g);
      forEachRow(k, place, rows, (row, valid) => {
        const len = valid ? k.selp('u32', k.reg('u32'), splits, 0, valid) : splits;
        const start = k.mulLo('u32', k.reg('u32'), row, splits);
        const best: Best = {
          key: k.mov('u32', k.reg('u32'), 0),
          index: k.mov('u32', k.reg('u32'), 0xffffffff),
        };
        const other: Best = { key: k.reg('u32'), index: k.reg('u32') };
        const c = k.reg('u32');
        k.forRange(c, place.laneInGroup, len, g.threads, () => {
          const at = k.elementAddress(pairs, k.add('u32', k.reg('u32'), start, c), 8);
          k.ldGlobal('u32', [other.key, other.index], at);
          takeBetter(k, best, other);
        });
        for (let offset = g.threads / 2; offset >= 1; offset /= 2) {
          k.shflSync('bfly', other.key, best.key, offset);
          k.shflSync('bfly', other.index, best.index, offset);
          takeBetter(k, best, other);
        }
        const leader = k.setp('eq', 'u32', k.reg('pred'), place.laneInGroup, 0);
        const write = valid ? k.and('pred', k.reg('pred'), leader, valid) : leader;
        k.predicated(write, () => k.stGlobal('u32', k.elementAddress(y, row, 4), best.index));
      });
    },
    { requiredThreadsPerBlock: [g.block, 1, 1] },
  );
  return m;
}

const argmaxKernel = cudaKernel(
  argmax,
  (encoder, { inputs, outputs, io }) => {
    const x = inputs[0]!;
    const y = outputs[0]!;
    if (y.size === 0) return;
    checkElementCount('argmax', 'x', x.size);
    const shape = io.inputs[0]!.shape;
    const n = shape[shape.length - 1]!;
    const rows = y.size;
    const width = accessWidth(n, [x]);
    const type = storageOf(x);
    const { splits, chunk } = planArgmaxParts(encoder.device, rows, n, width);
    if (splits === 1) {
      const g = planArgmax(n, width);
      encoder.launch({
        key: argmaxKey(g, type),
        module: () => argmaxModule(g, type),
        entry: 'argmax',
        ...rowLaunchDims(encoder.device, g, rows),
        args: { x, y, rows, n, chunk: n, splits: 1 },
      });
      return;
    }
    // Each part's best pair into scratch, then a warp a row over its parts' pairs.
    const g = ARGMAX_PART_GEOMETRY(width);
    const segments = rows * splits;
    const pairs = encoder.scratch(segments * 8);
    encoder.launch({
      key: argmaxKey(g, type, true),
      module: () => argmaxModule(g, type, true),
      entry: 'argmax',
      ...rowLaunchDims(encoder.device, g, segments),
      args: { x, y: pairs, rows: segments, n, chunk, splits },
    });
    encoder.launch({
      key: ARGMAX_PAIRS_KEY,
      module: argmaxPairsModule,
      entry: 'argmax_pairs',
      ...rowLaunchDims(encoder.device, ARGMAX_PAIRS_GEOMETRY, rows),
      args: { pairs, y, rows, splits },
    });
  },
  { dtypes: FLOAT },
);

export const REDUCTION_KERNELS: readonly AnyCudaKernel[] = [
  reductionKernel(sum, { op: 'sum', square: false }),
  reductionKernel(max, { op: 'max', square: false }),
  reductionKernel(sumSquares, { op: 'sum', square: true }),
  argmaxKernel,
];
