// Shader texts the test suites do not compile on a software Vulkan (the
// subgroup-matrix GEMM needs an adapter that lists configurations; some
// quantized GEMV variants run only when chosen by name), and the matrix
// tiles over more variants than the suites reach: generated here, recorded,
// never compiled.
import { QGEMV_FORMATS, QGEMV_SHAPES, QUANT_FORMATS } from '@rayo/core';
import { describe, it } from 'vitest';
import { HALF_TILE_LARGE, HALF_TILE_MID, halfGemmShader } from '../../src/kernels/matmulHalf.js';
import { TILE_LARGE, TILE_MID, tileShader } from '../../src/kernels/matmulTile.js';
import type { Output } from '../../src/kernels/matmulWgsl.js';
import { multiAdamwShader } from '../../src/kernels/multiTensorAdamw.js';
import { QUANT_STREAM_MAX_ROWS, quantStreamShader, quantTileShader } from '../../src/kernels/quantized.js';
import { qgemvShader } from '../../src/kernels/quantizedGemv.js';
import { recordShader } from './record.js';

const flags = [false, true] as const;

const OUTPUTS: readonly Output[] = [
  { vec: true, c: false },
  { vec: false, c: true },
  { vec: true, c: true, epilogue: { bias: true, activation: 'gelu', z: true } },
  { vec: false, c: false, epilogue: { bias: false, activation: 'relu', z: false } },
];

/** Records a generator's text, or what it threw (a refused variant is part of the behaviour). */
function record(source: () => { key: string; code: () => string }, label: string): void {
  let key = label;
  try {
    const shader = source();
    key = shader.key;
    recordShader(`sweep:${key}`, shader.code());
  } catch (error) {
    recordShader(`sweep:${key}:throws`, String((error as Error).message));
  }
}

describe('WGSL generator sweep', () => {
  it('matrix tiles', () => {
    for (const tile of [TILE_LARGE, TILE_MID])
      for (const swap of flags)
        for (const transA of flags)
          for (const transB of flags)
            for (const vecA of flags)
              for (const vecB of flags)
                for (const b of ['f32', 'f16', 'bf16'] as const)
                  for (const [o, out] of OUTPUTS.entries())
                    record(
                      () => tileShader({ tile, swap, transA, transB, vecA, vecB, b, out }, 'matmul'),
                      `tile/${tile.bm}/${+swap}${+transA}${+transB}${+vecA}${+vecB}/${b}/${o}`,
                    );
  });

  it('half GEMM on subgroup matrices and emulated', () => {
    const shapes = [
      { m: 16, n: 16, k: 16, lanes: 32 },
      { m: 8, n: 8, k: 8, lanes: 32 },
    ];
    for (const compute of ['subgroup-matrix', 'emulated'] as const)
      for (const shape of shapes)
        for (const tile of [HALF_TILE_LARGE, HALF_TILE_MID])
          for (const transA of flags)
            for (const transB of flags)
              for (const [vecA, vecB] of [
                [true, true],
                [false, false],
                [true, false],
              ] as const)
                for (const [o, out] of OUTPUTS.entries())
                  record(
                    () => halfGemmShader({ compute, shape, tile, transA, transB, vecA, vecB, out }, 'matmul'),
                    `half/${compute}/${shape.m}/${tile.bm}/${+transA}${+transB}${+vecA}${+vecB}/${o}`,
                  );
  });

  it('quantized GEMV variants', () => {
    for (const format of QGEMV_FORMATS)
      for (const rows of [1, 4])
        for (const vecX of flags)
          for (const pair of flags)
            for (const shape of Object.values(QGEMV_SHAPES))
              record(() => qgemvShader({ format, rows, vecX, pair, ...shape }), 'qgemv');
    for (const format of QUANT_FORMATS) {
      for (const rows of [1, QUANT_STREAM_MAX_ROWS])
        for (const vecX of flags) record(() => quantStreamShader({ format, rows, vecX }), 'quant-stream');
      record(() => quantTileShader({ format }), 'quant-tile');
    }
  });

  it('multi-tensor AdamW at several binding limits', () => {
    for (const slots of [1, 2, 3, 64])
      for (const step of flags)
        for (const lr of flags)
          for (const norm of flags)
            for (const grad of ['f32', 'f16', 'bf16'] as const)
              record(() => multiAdamwShader(slots, { step, lr, norm }, grad), 'multi-adamw');
  });
});
