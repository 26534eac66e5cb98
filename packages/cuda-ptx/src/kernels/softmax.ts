import {
  FLOAT,
  type KernelSpec,
  logSoftmax,
  logSoftmaxBackward,
  type NoAttrs,
  softmax,
  softmaxBackward,
} from '@rayo/core';
import { type AnyCudaKernel, cudaKernel } from '../kernel.js';
import type { PtxModule } from '../ptx/module.js';
import type { F32 } from '../ptx/operands.js';
import { checkElementCount } from './common.js';
import { expF32 } from './math.js';
import {
  accessWidth,
  entryNameOf,
  geometryKey,
  planRows,
  type RowGeometry,
  type RowKernel,
  type RowSource,
  rowKernelModule,
  rowLaunchDims,
} from './rowReduce.js';
import { type FloatStorage, storageKey, storageOf } from './storage.js';

/** One softmax-family kernel: its inputs (read through the row tile), its output and one row's work. */
export interface SoftmaxDecl {
  readonly spec: KernelSpec<NoAttrs>;
  readonly inputs: Readonly<Record<string, Omit<RowSource, 'ptr'>>>;
  readonly output: string;
  /**
   * Floats per element a thread holds at once: reused inputs and derived
   * values, and what ptxas keeps in flight (loads it hoists, exps it
   * overlaps); the ptxas tests check the planned geometries do not spill.
   */
  readonly registers: number;
  readonly row: (r: RowKernel, out: ReturnType<RowKernel['pointer']>) => void;
}

const reused = { kind: 'row', reuse: true } as const;
const once = { kind: 'row' } as const;

function sub(r: RowKernel, a: F32, b: F32): F32 {
  return r.k.sub('f32', r.k.reg('f32'), a, b, { rnd: 'rn' });
}

function mul(r: RowKernel, a: F32, b: F32): F32 {
  return r.k.mul('f32', r.k.reg('f32'), a, b, { rnd: 'rn' });
}

/** The row max (subtracted before exp, so that exp never overflows). */
function rowMax(r: RowKernel): F32 {
  return r.tile.reduce(r.reducer, ['max'], (slot, j) => [slot.get('x')[j]!])[0]!;
}

export const SOFTMAX_DECLS: readonly SoftmaxDecl[] = [
  {
    spec: softmax,
    inputs: { x: reused },
    output: 'y',
    registers: 2,
    // y = e / Σ e with e = exp(x − max), kept in registers between the sum and the store.
    row: (r, y) => {
      const max = rowMax(r);
      r.tile.derive('e', (slot) => slot.get('x').map((v) => expF32(r.k, sub(r, v, max))));
      const [total] = r.tile.reduce(r.reducer, ['sum'], (slot, j) => [slot.get('e')[j]!]);
      const inverse = r.k.rcp(r.k.reg('f32'), total!, 'rn');
      r.tile.store(y, (slot) => slot.get('e').map((e) => mul(r, e, inverse)));
    },
  },
  {
    spec: logSoftmax,
    inputs: { x: reused },
    output: 'y',
    registers: 2,
    // y = x − max − log Σ exp(x − max); the sum is in [1, n], where lg2.approx is accurate to ~1e-7.
    row: (r, y) => {
      const max = rowMax(r);
      const [total] = r.tile.reduce(r.reducer, ['sum'], (slot, j) => [
        expF32(r.k, sub(r, slot.get('x')[j]!, max)),
      ]);
      const logTotal = r.k.lg2(r.k.reg('f32'), total!);
      r.k.mul('f32', logTotal, logTotal, Math.LN2, { rnd: 'rn' });
      r.tile.store(y, (slot) => slot.get('x').map((v) => sub(r, sub(r, v, max), logTotal)));
    },
  },
  {
    spec: softmaxBackward,
    inputs: { dy: reused, y: reused },
    output: 'dx',
    registers: 2,
    // dx = y · (dy − Σ dy · y)
    row: (r, dx) => {
      const [dot] = r.tile.reduce(r.reducer, ['sum'], (slot, j) => [
        mul(r, slot.get('dy')[j]!, slot.get('y')[j]!),
      ]);
      r.tile.store(dx, (slot) => slot.get('y').map((p, j) => mul(r, p, sub(r, slot.get('dy')[j]!, dot!))));
    },
  },
  {
    spec: logSoftmaxBackward,
    inputs: { dy: reused, y: once },
    output: 'dx',
    registers: 2,
    // dx = dy − exp(y) · Σ dy, rounded once.
    row: (r, dx) => {
      const [total] = r.tile.reduce(r.reducer, ['sum'], (slot, j) => [slot.get('dy')[j]!]);
      r.tile.store(dx, (slot) =>
        slot.get('y').map((v, j) => {
          const p = r.k.neg('f32', r.k.reg('f32'), expF32(r.k, v));
          return r.k.fma('f32', r.k.reg('f32'), p, total!, slot.get('dy')[j]!);
        }),
      );
    },
  },
];

export function softmaxEntry(decl: SoftmaxDecl): string {
  return entryNameOf(decl.spec.name);
}

export function softmaxKey(decl: SoftmaxDecl, g: RowGeometry, type: FloatStorage = 'f32'): string {
  return `softmax/${decl.spec.name}/${geometryKey(g)}${storageKey([type])}`;
}

/** The module of one kernel; every tensor is stored as `type`. */
export function softmaxModule(decl: SoftmaxDecl, g: RowGeometry, type: FloatStorage = 'f32'): PtxModule {
  return rowKernelModule({
    entry: softmaxEntry(decl),
    geometry: g,
    type,
    pointers: [...Object.keys(decl.inputs), decl.output],
    sources: decl.inputs,
    build: (r) => ({ row: () => decl.row(r, r.pointer(decl.output)) }),
  });
}

/** The geometry for rows of `n` of these operands. */
export function softmaxGeometry(decl: SoftmaxDecl, n: number, pointers: readonly bigint[]): RowGeometry {
  return planRows(n, accessWidth(n, pointers), decl.registers);
}

function softmaxKernel(decl: SoftmaxDecl): AnyCudaKernel {
  return cudaKernel(
    decl.spec,
    (encoder, { inputs, outputs, io }) => {
      const out = outputs[0]!;
      if (out.size === 0) return;
      checkElementCount(decl.spec.name, Object.keys(decl.inputs)[0]!, out.size);
      const shape = io.inputs[0]!.shape;
      const n = shape[shape.length - 1]!;
      const rows = out.size / n;
      const operands = [...inputs.map((x) => x!), out];
      const g = softmaxGeometry(
        decl,
        n,
        operands.map((o) => o.ptr),
      );
      const args: Record<string, (typeof operands)[number] | number> = { rows, n };
      Object.keys(decl.inputs).forEach((name, i) => {
        args[name] = inputs[i]!;
      });
      args[decl.output] = out;
      const type = storageOf(out);
      encoder.launch({
        key: softmaxKey(decl, g, type),
        module: () => softmaxModule(decl, g, type),
        entry: softmaxEntry(decl),
        ...rowLaunchDims(encoder.device, g, rows),
        args,
      });
    },
    { dtypes: FLOAT },
  );
}

export const SOFTMAX_KERNELS: readonly AnyCudaKernel[] = SOFTMAX_DECLS.map(softmaxKernel);
