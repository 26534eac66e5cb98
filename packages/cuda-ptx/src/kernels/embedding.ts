import { embedding, embeddingBackward, FLOAT, pow2AtLeast } from '@rayo/core';
import { type AnyCudaKernel, cudaKernel, type Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type Param, type Pred, type R32, type R64 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { castKey, castModule } from './cast.js';
import { BLOCK, checkElementCount, gridFor, loadPointer, loadU32 } from './common.js';
import {
  accessWidth,
  forEachRow,
  type GroupPlace,
  geometryKey,
  groupPlace,
  type RowGeometry,
  rowLaunchDims,
  WARP_ROWS_BLOCK,
} from './rowReduce.js';
import {
  type FloatStorage,
  fillZero,
  loadAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storesOf,
} from './storage.js';

// A group of up to a warp per id: the id is read once per row and the
// group's lanes move the row, `.v4` where D and every base allow. Ids live
// on the device: one outside [0, V) is compared as unsigned (negative ids
// are above V), never clamped, and its table row is never addressed.

const NAN = Number.NaN;

/** Up to a warp per row, enough lanes for one access each along D. */
export function embeddingGeometry(dim: number, operands: readonly Operand[]): RowGeometry {
  const width = accessWidth(dim, operands);
  const accesses = Math.max(1, Math.ceil(dim / width));
  const threads = Math.min(32, pow2AtLeast(accesses));
  return { threads, block: WARP_ROWS_BLOCK, width, slots: 0 };
}

/** `body`'s instructions guarded by `p`, or unguarded where p is undefined (always true). */
function guarded(k: KernelBuilder, p: Pred | undefined, body: () => void): void {
  if (p) k.predicated(p, body);
  else body();
}

/** The row's id (all ones where the row does not exist) and whether it names a table row. */
function loadId(k: KernelBuilder, ids: R64, row: R32, rowValid: Pred | undefined, vocab: R32) {
  const id = k.mov('u32', k.reg('u32'), 0xffffffff);
  const at = k.elementAddress(ids, row, 4);
  guarded(k, rowValid, () => k.ldGlobal('u32', id, at, { nc: true }));
  return { id, idValid: k.setp('lo', 'u32', k.reg('pred'), id, vocab) };
}

/** Runs `body` at the thread's columns of a row: laneInGroup·width onwards, a group's width of accesses apart. */
function forEachColumn(k: KernelBuilder, place: GroupPlace, dim: R32, body: (col: R32) => void): void {
  const g = place.geometry;
  const col = k.reg('u32');
  const start = k.mulLo('u32', k.reg('u32'), place.laneInGroup, g.width);
  k.forRange(col, start, dim, g.threads * g.width, () => body(col));
}

/** What the row of an embedding kernel works with. */
interface EmbeddingRow {
  readonly k: KernelBuilder;
  readonly place: GroupPlace;
  readonly ptr: Readonly<Record<string, R64>>;
  readonly vocab: R32;
  readonly dim: R32;
  readonly row: R32;
  /** Whether the row exists (undefined: always). */
  readonly rowValid: Pred | undefined;
  /** The row's id, all ones where the row does not exist. */
  readonly id: R32;
  readonly idValid: Pred;
}

/** An entry with `pointers`, `rows`, `vocab` and `dim`: a group per row, `row` once per row with its id. */
function embeddingEntry(
  m: PtxModule,
  name: string,
  pointers: readonly string[],
  g: RowGeometry,
  row: (r: EmbeddingRow) => void,
): void {
  const params: Record<string, ParamType> = {};
  for (const p of pointers) params[p] = 'ptr';
  Object.assign(params, { rows: 'u32', vocab: 'u32', dim: 'u32' });
  m.entry(
    name,
    params,
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const ptr = Object.fromEntries(pointers.map((n) => [n, loadPointer(k, p, n)]));
      const [rows, vocab, dim] = ['rows', 'vocab', 'dim'].map((n) => loadU32(k, p, n)) as [R32, R32, R32];
      const place = groupPlace(k, g);
      forEachRow(k, place, rows, (r, rowValid) => {
        const { id, idValid } = loadId(k, ptr.ids!, r, rowValid, vocab);
        row({ k, place, ptr, dim, row: r, rowValid, id, idValid, vocab });
      });
    },
    { requiredThreadsPerBlock: g.block },
  );
}

// ---- embedding -------------------------------------------------------------------

export function embeddingKey(g: RowGeometry, type: FloatStorage = 'f32'): string {
  return `embedding/gather/${geometryKey(g)}${storageKey([type])}`;
}

/** y[r, :] = table[ids[r], :], or NaN where ids[r] is outside the table; y has the table's dtype. */
export function embeddingModule(g: RowGeometry, type: FloatStorage = 'f32'): PtxModule {
  const bytes = STORAGE_BYTES[type];
  const m = new PtxModule();
  embeddingEntry(
    m,
    'embedding_gather',
    ['table', 'ids', 'y'],
    g,
    ({ k, place, ptr, dim, row, rowValid, id, idValid }) => {
      const src = k.mulLo('u32', k.reg('u32'), id, dim);
      const dst = k.mulLo('u32', k.reg('u32'), row, dim);
      forEachColumn(k, place, dim, (col) => {
        const from = k.elementAddress(ptr.table!, k.add('u32', k.reg('u32'), src, col), bytes);
        const loaded = k.regs('f32', g.width);
        loadAsF32(k, type, loaded, from, { ok: idValid });
        const values = loaded.map((v) => k.selp('f32', k.reg('f32'), v, NAN, idValid));
        const to = k.elementAddress(ptr.y!, k.add('u32', k.reg('u32'), dst, col), bytes);
        const store = storesOf(k, type, values);
        guarded(k, rowValid, () => store(to));
      });
    },
  );
  return m;
}

const embeddingKernel = cudaKernel(
  embedding,
  (encoder, { inputs, outputs }) => {
    const [table, ids] = inputs as Operand[];
    const y = outputs[0]!;
    if (y.size === 0) return;
    checkElementCount('embedding', 'table', table!.size);
    checkElementCount('embedding', 'y', y.size);
    const [vocab, dim] = table!.shape as [number, number];
    const g = embeddingGeometry(dim, [table!, y]);
    const type = storageOf(table!);
    encoder.launch({
      key: embeddingKey(g, type),
      module: () => embeddingModule(g, type),
      entry: 'embedding_gather',
      ...rowLaunchDims(encoder.device, g, ids!.size),
      args: { table: table!, ids: ids!, y, rows: ids!.size, vocab, dim },
    });
  },
  { dtypes: FLOAT },
);

// ---- embeddingBackward -------------------------------------------------------------

export function embeddingScatterKey(g: RowGeometry, type: FloatStorage = 'f32'): string {
  return `embedding/scatterAdd/${geometryKey(g)}${storageKey([type])}`;
}

export const EMBEDDING_POISON_KEY = 'embedding/poisonIfFlagged';

/**
 * dtable[ids[r], :] += dy[r, :] with f32 atomic adds into the zeroed table
 * (the order of the adds varies: sums agree to rounding). An id outside
 * the table raises `flag` instead, and its row is skipped. dy may be half;
 * the sums are f32 (for a half dtable, a scratch table cast afterwards).
 */
export function embeddingScatterModule(g: RowGeometry, type: FloatStorage = 'f32'): PtxModule {
  const m = new PtxModule();
  embeddingEntry(
    m,
    'embedding_scatter_add',
    ['dy', 'ids', 'dtable', 'flag'],
    g,
    ({ k, place, ptr, dim, row, rowValid, id, idValid, vocab }) => {
      const badId = k.setp('hs', 'u32', k.reg('pred'), id, vocab);
      if (rowValid) k.and('pred', badId, badId, rowValid);
      k.predicated(badId, () => k.stGlobal('u32', ptr.flag!, 1));
      const src = k.mulLo('u32', k.reg('u32'), row, dim);
      const dst = k.mulLo('u32', k.reg('u32'), id, dim);
      forEachColumn(k, place, dim, (col) => {
        const from = k.elementAddress(ptr.dy!, k.add('u32', k.reg('u32'), src, col), STORAGE_BYTES[type]);
        const to = k.elementAddress(ptr.dtable!, k.add('u32', k.reg('u32'), dst, col), 4);
        k.predicated(idValid, () => {
          const values = k.regs('f32', g.width);
          loadAsF32(k, type, values, from);
          for (const [l, x] of values.entries()) k.red('global', 'add', 'f32', addr(to, 4 * l), x);
        });
      });
    },
  );
  return m;
}

/** dtable[:] = NaN if the scatter raised the flag: a lost gradient must show. */
export function embeddingPoisonModule(): PtxModule {
  const m = new PtxModule();
  m.entry(
    'embedding_poison',
    { flag: 'ptr', dtable: 'ptr', n: 'u32' },
    (k, p) => {
      const flag = k.ldGlobal('u32', k.reg('u32'), k.globalPointer(p.flag));
      const dtable = k.globalPointer(p.dtable);
      const n = k.ldParam(p.n);
      k.ifThen(k.setp('ne', 'u32', k.reg('pred'), flag, 0), () => {
        k.gridStrideLoop(n, (i) => k.stGlobal('f32', k.elementAddress(dtable, i, 4), NAN));
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

const embeddingBackwardKernel = cudaKernel(
  embeddingBackward,
  (encoder, { inputs, outputs, attrs }) => {
    const [dy, ids] = inputs as Operand[];
    const dtable = outputs[0]!;
    if (dtable.size === 0) return;
    checkElementCount('embeddingBackward', 'dtable', dtable.size);
    checkElementCount('embeddingBackward', 'dy', dy!.size);
    const type = storageOf(dtable);
    if (dy!.size === 0) {
      fillZero(encoder, dtable);
      return;
    }
    // A half table is summed in an f32 scratch table, then rounded into dtable once.
    const sums = type === 'f32' ? dtable.ptr : encoder.scratch(4 * dtable.size);
    encoder.fill32(sums, 0, dtable.size);
    const dim = dtable.shape[1]!;
    const flag = encoder.scratch(4);
    encoder.fill32(flag, 0, 1);
    const g = embeddingGeometry(dim, [dy!, dtable]);
    encoder.launch({
      key: embeddingScatterKey(g, type),
      module: () => embeddingScatterModule(g, type),
      entry: 'embedding_scatter_add',
      ...rowLaunchDims(encoder.device, g, ids!.size),
      args: { dy: dy!, ids: ids!, dtable: sums, flag, rows: ids!.size, vocab: attrs.vocabSize, dim },
    });
    encoder.launch({
      key: EMBEDDING_POISON_KEY,
      module: embeddingPoisonModule,
      entry: 'embedding_poison',
      // Almost always a no-op, so a small grid keeps it cheap.
      grid: Math.min(gridFor(encoder.device, dtable.size), encoder.device.multiprocessors),
      block: BLOCK,
      args: { flag, dtable: sums, n: dtable.size },
    });
    if (type === 'f32') return;
    encoder.launch({
      key: castKey('f32', type),
      module: () => castModule('f32', type),
      entry: `cast_f32_${type}`,
      grid: gridFor(encoder.device, dtable.size),
      block: BLOCK,
      args: { x: sums, y: dtable, n: dtable.size },
    });
  },
  { dtypes: FLOAT },
);

export const EMBEDDING_KERNELS: readonly AnyCudaKernel[] = [embeddingKernel, embeddingBackwardKernel];
