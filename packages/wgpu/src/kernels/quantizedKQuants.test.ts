import { type Backend, createCpuBackend, quantizedMatmul, quantLayout, type Tensor } from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { afterAll, describe, expect, it } from 'vitest';
import { backendProvider, createWgpuBackend } from '../index.js';
import { quantStreamShader } from './quantized.js';

// q4k's and q6k's rows through the streaming shader over several 32-word tiles (the conformance cases
// reach two at most): the shader loads each tile's words and scales two tiles ahead and its x one
// ahead, so K of 3 to 17 tiles, a last tile partly past the row, M of 1 to 4 and odd N check that
// every tile meets its own words, scales and x.

describe('the K-quant streaming shader', () => {
  it('loads words and scales two tiles ahead and stages x from registers loaded a tile ahead', () => {
    for (const format of ['q4k', 'q6k'] as const) {
      const code = quantStreamShader({ format, rows: 4, vecX: true }).code();
      const loop = code.slice(code.indexOf('for (var first'));
      expect(code).toContain('var wv1 = word_of(wRow, chunks, lane + 32u);');
      expect(loop).toContain('let next = first + 64u + lane;');
      // x is read before the first barrier of a step, none between its two barriers.
      const between = loop.slice(loop.indexOf('workgroupBarrier()'), loop.indexOf('var part0'));
      expect(between).toContain('xt[768u + stagePos] = xq3;');
      expect(between).not.toContain('x_quad');
      // One read of each sub-block's scales per word, and codes without an int-to-float convert.
      expect(loop.match(/group_scale\(/g)).toHaveLength(1);
      expect(code).not.toContain('vec4<f32>(vec4<u32>');
      expect(code).toContain('bitcast<vec4<f32>>');
    }
  });
});

const unavailable = await backendProvider.probe();

describe.skipIf(unavailable !== undefined)('K-quant products over many tiles on the device', () => {
  const cpu = createCpuBackend();
  afterAll(() => cpu.dispose());
  const rng = new Rng(0x6b);
  const words = (n: number) => Array.from({ length: n }, () => rng.int(0, 2 ** 32));
  const uniform = (n: number, lo: number, hi: number) => Array.from({ length: n }, () => rng.uniform(lo, hi));
  // [M, K, N]: 4 whole tiles; 17 super-blocks (5 tiles, the last 1/4 full); 3 and 2 tiles, the last partial.
  const shapes = [
    [1, 4096, 13],
    [1, 4352, 9],
    [3, 2304, 11],
    [4, 1792, 5],
    [2, 2560, 7],
  ] as const;
  for (const format of ['q4k', 'q6k'] as const) {
    it(`${format}, scales in f32 and f16`, async () => {
      const gpu = await createWgpuBackend();
      try {
        for (const [m, k, n] of shapes) {
          const layout = quantLayout(format, k);
          // d (and q4k's dmin) as quantizedInputs' ranges: |w| within about 1; random words make every code and sub-block scale.
          const d =
            format === 'q4k'
              ? uniform(n * layout.groups, 0.0002, 0.001)
              : uniform(n * layout.groups, 0.0001, 0.00024);
          const dmin = uniform(n * layout.groups, 0, 1 / 63);
          const packed = words(n * layout.rowWords);
          const zeros = words(n * layout.zeroWords);
          const x = uniform(m * k, -1, 1);
          for (const dtype of ['f32', 'f16'] as const) {
            const run = (b: Backend) => {
              const scales = b.upload(d, [n, layout.groups], dtype);
              const inputs = [
                b.upload(x, [m, k]),
                b.upload(packed, [n, layout.rowWords], 'u32'),
                scales,
                b.upload(zeros, [n, layout.zeroWords], 'u32'),
                ...(layout.offsets ? [undefined, b.upload(dmin, [n, layout.groups], dtype)] : []),
              ];
              return (b.run(quantizedMatmul, inputs, { format }) as Tensor[])[0]!;
            };
            const mismatch = compareOutputs('f32', await run(gpu).read(), await run(cpu).read(), {
              rtol: 1e-4,
              atol: 4e-5 * Math.sqrt(k),
            });
            expect(mismatch, `${format} ${m}×${k}→${n} ${dtype} scales`).toBeUndefined();
          }
        }
      } finally {
        gpu.dispose();
      }
    }, 600_000);
  }
});
