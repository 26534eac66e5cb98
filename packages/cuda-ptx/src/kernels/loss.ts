import { crossEntropy, crossEntropyBackward, FLOAT } from '@rayo/core';
import { type AnyCudaKernel, cudaKernel, type Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Param, Pred, R32, R64 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { BLOCK, checkElementCount, loadPointer, loadU32 } from './common.js';
import { loadParams } from './entryParams.js';
import { expF32 } from './math.js';
import {
  accessWidth,
  forEachRow,
  GroupReducer,
  geometryKey,
  groupPlace,
  masked,
  planRows,
  type RowGeometry,
  RowTile,
  rowLaunchDims,
} from './rowReduce.js';
import { type FloatStorage, loadOneAsF32, STORAGE_BYTES, storageKey, storageOf } from './storage.js';

// Cross-entropy reads each row once for its log-sum-exp: every thread folds
// its elements into an online state (running max m, Σ exp(x − m)) with one
// exp per element, then the row's threads agree on the max and add their
// sums rescaled to it. Short rows share a warp, long vocabulary rows take a
// block (rowReduce's geometry); the backward keeps the row in registers
// where it fits, so it too reads the logits once.

const NAN = Number.NaN;
const NEG_INF = Number.NEGATIVE_INFINITY;

/** The geometry for rows of `classes` logits (kept in registers by the backward where they fit). */
export function lossGeometry(classes: number, operands: readonly Operand[]): RowGeometry {
  return planRows(classes, accessWidth(classes, operands), 1);
}

/** One thread's log-sum-exp state: m = the max of its values, s = Σ exp(x − m). */
interface LseState {
  readonly m: F32;
  readonly s: F32;
}

/**
 * Folds x into (m, s) with one exp: exp(−|x − m|) is the new term when
 * x <= m and the old sum's rescale when x > m. A −inf element adds 0 (also
 * against m = −inf, where x − m is NaN); a NaN element makes s NaN.
 */
function absorb(k: KernelBuilder, { m, s }: LseState, x: F32): void {
  const distance = k.abs('f32', k.reg('f32'), k.sub('f32', k.reg('f32'), x, m, { rnd: 'rn' }));
  const e = expF32(k, k.neg('f32', k.reg('f32'), distance));
  const term = k.selp('f32', k.reg('f32'), 0, e, k.setp('eq', 'f32', k.reg('pred'), x, NEG_INF));
  const greater = k.setp('gt', 'f32', k.reg('pred'), x, m);
  const rescaled = k.fma('f32', k.reg('f32'), s, term, 1);
  const added = k.add('f32', k.reg('f32'), s, term, { rnd: 'rn' });
  k.selp('f32', s, rescaled, added, greater);
  k.selp('f32', m, x, m, greater);
}

/**
 * The row's max and Σ exp(x − max), in every thread of its group. A +inf
 * logit makes the sum NaN, as the reference's exp(inf − inf) does.
 */
function rowLogSumExp(k: KernelBuilder, tile: RowTile, reducer: GroupReducer): { max: F32; sum: F32 } {
  const state = { m: k.mov('f32', k.reg('f32'), NEG_INF), s: k.mov('f32', k.reg('f32'), 0) };
  tile.each((slot) => {
    for (const x of slot.get('logits')) absorb(k, state, masked(k, 'max', x, slot.valid));
  });
  const [max] = reducer.reduce(['max'], [state.m]);
  // A thread that saw only −inf (or nothing) adds 0, not 0 · exp(NaN).
  const rescale = expF32(k, k.sub('f32', k.reg('f32'), state.m, max!, { rnd: 'rn' }));
  const empty = k.setp('eq', 'f32', k.reg('pred'), state.m, NEG_INF);
  k.selp('f32', rescale, 0, rescale, empty);
  const [sum] = reducer.reduce(['sum'], [k.mul('f32', k.reg('f32'), state.s, rescale, { rnd: 'rn' })]);
  const infinite = k.setp('eq', 'f32', k.reg('pred'), max!, Number.POSITIVE_INFINITY);
  return { max: max!, sum: k.selp('f32', k.reg('f32'), NAN, sum!, infinite) };
}

/** What a row of a loss kernel works with. */
interface LossRow {
  readonly k: KernelBuilder;
  readonly tile: RowTile;
  readonly reducer: GroupReducer;
  readonly ptr: Readonly<Record<string, R64>>;
  readonly float: Readonly<Record<string, F32>>;
  readonly classes: R32;
  readonly row: R32;
  /** Whether the row exists (undefined: always). */
  readonly rowValid: Pred | undefined;
  /** Whether this thread writes the row's single values. */
  readonly leader: Pred;
  /** The row's target, all ones where the row does not exist. */
  readonly target: R32;
  /** Whether the target is a class: compared as unsigned, so negative targets are out too. */
  readonly targetValid: Pred;
}

/**
 * An entry over rows of `logits` [rows, classes] with `targets` [rows]:
 * parameters `pointers`, `rows`, `classes` and `floats`; `row` runs once
 * per row in each thread of the row's group.
 */
function lossModule(
  entry: string,
  g: RowGeometry,
  pointers: readonly string[],
  floats: readonly string[],
  reuseLogits: boolean,
  type: FloatStorage,
  row: (r: LossRow) => void,
): PtxModule {
  const params: Record<string, ParamType> = {};
  for (const name of pointers) params[name] = 'ptr';
  Object.assign(params, { rows: 'u32', classes: 'u32' });
  for (const name of floats) params[name] = 'f32';
  const m = new PtxModule();
  m.entry(
    entry,
    params,
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const ptr = Object.fromEntries(pointers.map((name) => [name, loadPointer(k, p, name)]));
      const float = Object.fromEntries(floats.map((name) => [name, k.ldParam(p[name] as Param<'f32'>)]));
      const rows = loadU32(k, p, 'rows');
      const classes = loadU32(k, p, 'classes');
      const place = groupPlace(k, g);
      const reducer = new GroupReducer(k, place);
      const tile = new RowTile(
        k,
        place,
        classes,
        {
          logits: { ptr: ptr.logits!, kind: 'row', reuse: reuseLogits },
        },
        type,
      );
      const first = k.setp('eq', 'u32', k.reg('pred'), place.laneInGroup, 0);
      forEachRow(
        k,
        place,
        rows,
        (r, rowValid) => {
          tile.begin(r, rowValid);
          const target = k.mov('u32', k.reg('u32'), 0xffffffff);
          const at = k.elementAddress(ptr.targets!, r, 4);
          const leader = rowValid ? k.and('pred', k.reg('pred'), first, rowValid) : first;
          if (rowValid) k.predicated(rowValid, () => k.ldGlobal('u32', target, at, { nc: true }));
          else k.ldGlobal('u32', target, at, { nc: true });
          const targetValid = k.setp('lo', 'u32', k.reg('pred'), target, classes);
          row({ k, tile, reducer, ptr, float, classes, row: r, rowValid, leader, target, targetValid });
        },
        reducer,
      );
    },
    { requiredThreadsPerBlock: g.block },
  );
  return m;
}

// ---- crossEntropy ------------------------------------------------------------------

export function crossEntropyRowsKey(g: RowGeometry, type: FloatStorage = 'f32'): string {
  return `loss/crossEntropy/rows/${geometryKey(g)}${storageKey([type])}`;
}

export const CROSS_ENTROPY_MEAN_KEY = `loss/crossEntropy/mean/block${BLOCK}`;

/** rowLoss[r] = (max − x[r, t]) + ln Σ exp(x − max) for a target t in [0, C), else NaN. */
export function crossEntropyRowsModule(g: RowGeometry, type: FloatStorage = 'f32'): PtxModule {
  return lossModule('cross_entropy_rows', g, ['logits', 'targets', 'rowLoss'], [], false, type, (r) => {
    const { k } = r;
    const { max, sum } = rowLogSumExp(k, r.tile, r.reducer);
    const index = k.madLo('u32', k.reg('u32'), r.row, r.classes, r.target);
    const at = k.elementAddress(r.ptr.logits!, index, STORAGE_BYTES[type]);
    const logit = loadOneAsF32(k, type, at, r.targetValid);
    const picked = k.selp('f32', k.reg('f32'), logit, NAN, r.targetValid);
    // ln via lg2.approx (about 2^-22 absolute), far inside a loss's tolerance.
    const lnSum = k.mul('f32', k.reg('f32'), k.lg2(k.reg('f32'), sum), Math.LN2, { rnd: 'rn' });
    const loss = k.add('f32', k.reg('f32'), k.sub('f32', k.reg('f32'), max, picked, { rnd: 'rn' }), lnSum, {
      rnd: 'rn',
    });
    k.predicated(r.leader, () => k.stGlobal('f32', k.elementAddress(r.ptr.rowLoss!, r.row, 4), loss));
  });
}

/** loss = Σ rowLoss / N in one block, added in a fixed order: the loss is deterministic. */
export function crossEntropyMeanModule(): PtxModule {
  const m = new PtxModule();
  m.entry(
    'cross_entropy_mean',
    { rowLoss: 'ptr', rows: 'u32', rowCount: 'f32', loss: 'ptr' },
    (k, p) => {
      const { rowLoss, rows } = loadParams(k, p, 'rowLoss', 'rows');
      const acc = k.mov('f32', k.reg('f32'), 0);
      const i = k.reg('u32');
      k.forRange(i, k.tid('x'), rows, BLOCK, () => {
        const value = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(rowLoss, i, 4));
        k.add('f32', acc, acc, value, { rnd: 'rn' });
      });
      const place = groupPlace(k, { threads: BLOCK, block: BLOCK, width: 1, slots: 0 });
      const [total] = new GroupReducer(k, place).reduce(['sum'], [acc]);
      k.ifThen(k.setp('eq', 'u32', k.reg('pred'), place.tid, 0), () => {
        const mean = k.div('f32', k.reg('f32'), total!, k.ldParam(p.rowCount), 'rn');
        k.stGlobal('f32', k.globalPointer(p.loss), mean);
      });
    },
    { requiredThreadsPerBlock: BLOCK },
  );
  return m;
}

const crossEntropyKernel = cudaKernel(
  crossEntropy,
  (encoder, { inputs, outputs }) => {
    const [logits, targets] = inputs as Operand[];
    checkElementCount('crossEntropy', 'logits', logits!.size);
    const [rows, classes] = logits!.shape as [number, number];
    const g = lossGeometry(classes, [logits!]);
    const rowLoss = encoder.scratch(4 * rows);
    encoder.launch({
      key: crossEntropyRowsKey(g, storageOf(logits!)),
      module: () => crossEntropyRowsModule(g, storageOf(logits!)),
      entry: 'cross_entropy_rows',
      ...rowLaunchDims(encoder.device, g, rows),
      args: { logits: logits!, targets: targets!, rowLoss, rows, classes },
    });
    encoder.launch({
      key: CROSS_ENTROPY_MEAN_KEY,
      module: crossEntropyMeanModule,
      entry: 'cross_entropy_mean',
      grid: 1,
      block: BLOCK,
      args: { rowLoss, rows, rowCount: rows, loss: outputs[0]! },
    });
  },
  { dtypes: FLOAT },
);

// ---- crossEntropyBackward ---------------------------------------------------------

export function crossEntropyBackwardKey(g: RowGeometry, type: FloatStorage = 'f32'): string {
  return `loss/crossEntropyBackward/${geometryKey(g)}${storageKey([type])}`;
}

/**
 * dlogits[r, j] = (dloss / N) · (exp(x − max) / Σ − [j = t]); a row whose
 * target is not a class is NaN. dloss is read on the device.
 */
export function crossEntropyBackwardModule(g: RowGeometry, type: FloatStorage = 'f32'): PtxModule {
  return lossModule(
    'cross_entropy_backward',
    g,
    ['logits', 'targets', 'dloss', 'dlogits'],
    ['rowCount'],
    true,
    type,
    (r) => {
      const { k } = r;
      const dloss = k.ldGlobal('f32', k.reg('f32'), r.ptr.dloss!);
      const coef = k.div('f32', k.reg('f32'), dloss, r.float.rowCount!, 'rn');
      const rowCoef = k.selp('f32', k.reg('f32'), coef, NAN, r.targetValid);
      const { max, sum } = rowLogSumExp(k, r.tile, r.reducer);
      const inverse = k.rcp(k.reg('f32'), sum, 'rn');
      r.tile.store(r.ptr.dlogits!, (slot) =>
        slot.get('logits').map((x, l) => {
          const e = expF32(k, k.sub('f32', k.reg('f32'), x, max, { rnd: 'rn' }));
          const prob = k.mul('f32', k.reg('f32'), e, inverse, { rnd: 'rn' });
          const column = l === 0 ? slot.col : k.add('u32', k.reg('u32'), slot.col, l);
          const isTarget = k.setp('eq', 'u32', k.reg('pred'), column, r.target);
          const delta = k.sub('f32', k.reg('f32'), prob, k.selp('f32', k.reg('f32'), 1, 0, isTarget), {
            rnd: 'rn',
          });
          return k.mul('f32', k.reg('f32'), rowCoef, delta, { rnd: 'rn' });
        }),
      );
    },
  );
}

const crossEntropyBackwardKernel = cudaKernel(
  crossEntropyBackward,
  (encoder, { inputs, outputs }) => {
    const [logits, targets, dloss] = inputs as Operand[];
    const dlogits = outputs[0]!;
    checkElementCount('crossEntropyBackward', 'logits', logits!.size);
    const [rows, classes] = logits!.shape as [number, number];
    const g = lossGeometry(classes, [logits!, dlogits]);
    encoder.launch({
      key: crossEntropyBackwardKey(g, storageOf(logits!)),
      module: () => crossEntropyBackwardModule(g, storageOf(logits!)),
      entry: 'cross_entropy_backward',
      ...rowLaunchDims(encoder.device, g, rows),
      args: { logits: logits!, targets: targets!, dloss: dloss!, dlogits, rows, classes, rowCount: rows },
    });
  },
  { dtypes: FLOAT },
);

export const LOSS_KERNELS: readonly AnyCudaKernel[] = [crossEntropyKernel, crossEntropyBackwardKernel];
