import { describe, expect, it } from 'vitest';
import { gateUpSwigluLaunch, rmsNormMatmul3Launch, rmsNormMatmulLaunch } from './fusedLaunch.js';
import { batchedMatmulLaunch, linearLaunch, matmulLaunch } from './matmulLaunch.js';

/** An operand of a backend, as the unpacking sees it: a shape and a name to follow it by. */
const op = (name: string, ...shape: number[]) => ({ name, shape });

describe('launch descriptions from spec calls', () => {
  it('read M, N and K of matmul from its stored layouts', () => {
    const attrs = {
      alpha: 2,
      beta: 0.5,
      transA: true,
      transB: false,
      precision: 'f32',
      out: 'auto',
    } as const;
    const [a, b, c, y] = [op('a', 7, 3), op('b', 7, 5), op('c', 3, 5), op('y', 3, 5)];
    expect(matmulLaunch({ inputs: [a, b, c], outputs: [y], attrs })).toEqual({
      a,
      b,
      c,
      y,
      batch: 1,
      m: 3,
      n: 5,
      k: 7,
      ...attrs,
    });
  });

  it('give batchedMatmul its batch, no c and beta 0', () => {
    const attrs = { alpha: 1, transA: false, transB: true, precision: 'tf32' } as const;
    const [a, b, y] = [op('a', 4, 3, 9), op('b', 4, 5, 9), op('y', 4, 3, 5)];
    const launch = batchedMatmulLaunch({ inputs: [a, b], outputs: [y], attrs });
    expect(launch).toMatchObject({
      a,
      b,
      y,
      batch: 4,
      m: 3,
      n: 5,
      k: 9,
      beta: 0,
      transB: true,
      precision: 'tf32',
    });
    expect(launch.c).toBeUndefined();
  });

  it('make linear a product with w stored [N, K] and its epilogue', () => {
    const [x, w, bias, y, z] = [
      op('x', 2, 6),
      op('w', 11, 6),
      op('bias', 11),
      op('y', 2, 11),
      op('z', 2, 11),
    ];
    const launch = linearLaunch({
      inputs: [x, w, bias],
      outputs: [y, z],
      attrs: { activation: 'gelu', preActivation: true },
    });
    expect(launch).toEqual({
      a: x,
      b: w,
      c: undefined,
      y,
      bias,
      z,
      activation: 'gelu',
      batch: 1,
      m: 2,
      n: 11,
      k: 6,
      alpha: 1,
      beta: 0,
      transA: false,
      transB: true,
    });
  });

  it('give the fused products their weights and outputs in order', () => {
    const [x, g, u, nw] = [op('x', 1, 8), op('g', 5, 8), op('u', 5, 8), op('nw', 8)];
    expect(
      gateUpSwigluLaunch({ inputs: [x, g, u, undefined], outputs: [op('y', 1, 5)], attrs: { eps: 1e-5 } }),
    ).toEqual({ x, w: [g], wUp: u, normWeight: undefined, y: [op('y', 1, 5)], eps: 1e-5 });
    expect(
      rmsNormMatmulLaunch({ inputs: [x, nw, g], outputs: [op('y', 1, 5)], attrs: { eps: 1e-6 } }),
    ).toMatchObject({ x, w: [g], wUp: undefined, normWeight: nw });
    const ys = [op('y0', 1, 5), op('y1', 1, 5)];
    expect(
      rmsNormMatmul3Launch({ inputs: [x, nw, g, u, undefined], outputs: ys, attrs: { eps: 1e-6 } }),
    ).toEqual({
      x,
      w: [g, u],
      wUp: undefined,
      normWeight: nw,
      y: ys,
      eps: 1e-6,
    });
  });
});
