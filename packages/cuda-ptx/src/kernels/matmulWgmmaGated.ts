import type { FusedLaunch } from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import { checkElementCount, type HalfDType } from './common.js';
import {
  operandMap,
  shapeOf,
  WG_BM,
  WG_BN,
  WG_ENTRY,
  WG_THREADS,
  type WgmmaVariant,
  wgmmaKey,
  wgmmaModule,
  wgmmaTileN,
  wgSharedBytes,
} from './matmulWgmma.js';

// gateUpSwiglu of a prompt's chunk on the wgmma kernel: the gate and up
// products share each tile (half its b rows from each weight) and the
// epilogue writes silu(gate) · up, so neither product is ever stored and no
// swiglu pass reads them back.

/** Rows from which a gated call takes the tensor-core tiles: fewer stream the weights (fused.ts). */
export const GATED_TILE_MIN_ROWS = 32;

/**
 * Whether gateUpSwiglu's call runs on the gated wgmma kernel: sm_90, at least
 * GATED_TILE_MIN_ROWS rows, no norm folded in, x, both weights and y in one
 * half dtype, K a whole number of 16-byte rows, x and the weights 16-byte
 * aligned (y may start at any element: the epilogue stores pairs only where
 * they are aligned).
 */
export function gatedWgmmaApplies(encoder: KernelEncoder, call: FusedLaunch<Operand>): boolean {
  const { x, w, wUp, normWeight, y } = call;
  const [major, minor] = encoder.device.computeCapability;
  if (major !== 9 || minor !== 0 || !wUp || normWeight || w.length !== 1) return false;
  const [m, k] = x.shape as [number, number];
  const dtype = x.dtype;
  const operands = [x, w[0]!, wUp, y[0]!];
  return (
    m >= GATED_TILE_MIN_ROWS &&
    k > 0 &&
    k % 8 === 0 &&
    (dtype === 'bf16' || dtype === 'f16') &&
    operands.every((o) => o.dtype === dtype) &&
    [x, w[0]!, wUp].every((o) => o.ptr % 16n === 0n)
  );
}

/** Launches a call `gatedWgmmaApplies` accepted: y [M, N] = silu(x·gateᵀ) ⊙ (x·upᵀ). */
export function encodeGatedWgmma(encoder: KernelEncoder, call: FusedLaunch<Operand>): void {
  const { x, wUp } = call;
  const gate = call.w[0]!;
  const y = call.y[0]!;
  const [m, k] = x.shape as [number, number];
  const n = gate.shape[0]!;
  const dtype = x.dtype as HalfDType;
  const { bk } = shapeOf(dtype);
  checkElementCount('gateUpSwiglu', 'y', y.size);
  checkElementCount('gateUpSwiglu', 'x', x.size);
  const sms = encoder.device.multiprocessors;
  // A tile's b rows are the gate's and the up's: as many tiles as a 2N-wide product.
  const bn = wgmmaTileN(m, 2 * n, 1, sms);
  const tileCols = bn / 2;
  const tilesM = Math.ceil(m / WG_BM);
  const tilesN = Math.ceil(n / tileCols);
  const v: WgmmaVariant = {
    dtype,
    transA: false,
    transB: true,
    withC: false,
    gated: true,
    ...(bn === WG_BN ? {} : { bn }),
  };
  const weightMap = (weight: Operand) => operandMap(dtype, weight.ptr, k, n, 1, [bk, tileCols]);
  encoder.launch({
    key: wgmmaKey(v),
    module: () => wgmmaModule(v),
    entry: WG_ENTRY,
    grid: Math.min(tilesM * tilesN, sms),
    block: WG_THREADS,
    sharedBytes: wgSharedBytes(bn),
    args: {
      batches: 1,
      splits: 1,
      kSplitSteps: Math.ceil(k / bk),
      mapA: encoder.tensorMap(operandMap(dtype, x.ptr, k, m, 1, [bk, WG_BM])),
      mapB: encoder.tensorMap(weightMap(gate)),
      mapUp: encoder.tensorMap(weightMap(wUp!)),
      // No c: its pointer is y's, never read.
      c: y,
      y,
      m,
      n,
      k,
      alpha: 1,
      beta: 0,
      strideY: m * n,
      tilesM,
      tilesN,
    },
  });
}
