import type { KernelEncoder } from '../kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32 } from '../ptx/operands.js';
import { BLOCK, gridFor } from './common.js';
import { loadParams } from './entryParams.js';
import { biasAndActivation, type Epilogue, epilogueKey, scaleAndAdd } from './gemv.js';
import { type FloatStorage, loadOneAsF32, STORAGE_BYTES, storageKey, storeFromF32 } from './storage.js';

// Split-K: when the output alone gives too few blocks, the tiled kernels
// write each split of K's partial sums to scratch, and this kernel adds them
// and applies the epilogue.

export const SPLIT_SUM_ENTRY = 'matmul_split_sum';

export function splitSumKey(withC: boolean, epilogue?: Epilogue, out: FloatStorage = 'f32'): string {
  return `matmul/split_sum${withC ? '/c' : ''}${epilogueKey(epilogue)}${storageKey([out])}`;
}

/**
 * y[i] = alpha · Σ_s parts[s · total + i] (+ beta · c[i]): the split-K
 * tiles' partial sums, added in split order (the same result every run),
 * then linear's bias (of column i mod n) and activation.
 */
export function splitSumModule(withC: boolean, epilogue?: Epilogue, out: FloatStorage = 'f32'): PtxModule {
  const bytes = STORAGE_BYTES[out];
  const m = new PtxModule();
  m.entry(
    SPLIT_SUM_ENTRY,
    {
      parts: 'ptr',
      c: 'ptr',
      y: 'ptr',
      total: 'u32',
      splits: 'u32',
      alpha: 'f32',
      beta: 'f32',
      bias: 'ptr',
      z: 'ptr',
      n: 'u32',
    },
    (k, p) => {
      const { parts, c, y } = loadParams(k, p, 'parts', 'c', 'y');
      const { total, splits, alpha, beta } = loadParams(k, p, 'total', 'splits', 'alpha', 'beta');
      k.gridStrideLoop(total, (i) => {
        const sum = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(parts, i, 4), { nc: true });
        const at = k.mov('u32', k.reg('u32'), i);
        const s = k.reg('u32');
        k.forRange(s, 1, splits, 1, () => {
          k.add('u32', at, at, total);
          const part = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(parts, at, 4), { nc: true });
          k.add('f32', sum, sum, part, { rnd: 'rn' });
        });
        const extra = withC ? { beta, c: loadOneAsF32(k, out, k.elementAddress(c, i, bytes)) } : undefined;
        let bias: F32 | undefined;
        if (epilogue?.bias) {
          const col = k.rem('u32', k.reg('u32'), i, k.ldParam(p.n));
          bias = loadOneAsF32(k, out, k.elementAddress(k.globalPointer(p.bias), col, bytes));
        }
        const result = biasAndActivation(k, epilogue, scaleAndAdd(k, sum, alpha, extra), bias);
        if (epilogue?.z) storeFromF32(k, out, k.elementAddress(k.globalPointer(p.z), i, bytes), result.z);
        storeFromF32(k, out, k.elementAddress(y, i, bytes), result.y);
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

/** Where the partial sums are and what the sum kernel makes of them. */
export interface SplitSumLaunch {
  /** f32 [splits, total] partial sums. */
  readonly parts: bigint;
  readonly splits: number;
  readonly total: number;
  /** Columns of y (the bias's length). */
  readonly n: number;
  readonly y: bigint;
  readonly c?: bigint | undefined;
  readonly alpha: number;
  readonly beta: number;
  readonly out: FloatStorage;
  readonly epilogue?: Epilogue | undefined;
  /** linear's bias and pre-activation output, where its epilogue has them. */
  readonly bias?: bigint;
  readonly z?: bigint;
}

/** Launches `splitSumModule` over a split product's partial sums. */
export function encodeSplitSum(encoder: KernelEncoder, s: SplitSumLaunch): void {
  const withC = s.c !== undefined;
  encoder.launch({
    key: splitSumKey(withC, s.epilogue, s.out),
    module: () => splitSumModule(withC, s.epilogue, s.out),
    entry: SPLIT_SUM_ENTRY,
    grid: gridFor(encoder.device, s.total),
    block: BLOCK,
    args: {
      parts: s.parts,
      // Unused pointers point at y, never read.
      c: s.c ?? s.y,
      y: s.y,
      total: s.total,
      splits: s.splits,
      alpha: s.alpha,
      beta: s.beta,
      bias: s.bias ?? s.y,
      z: s.z ?? s.y,
      n: s.n,
    },
  });
}
