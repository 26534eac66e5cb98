import { expectInferErrors, expectThrows, meta, random, runFirst as run, thrown } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import type { TensorMeta } from '../kernel.js';
import { inferKernel } from '../kernelChecks.js';
import { sizeOf } from '../shape.js';
import { compareOutputs } from '../testing/compare.js';
import { Rng } from '../testing/random.js';
import { incrementalAttention, kvCacheScatter, ropeKvScatter } from './decoding.js';
import { rope } from './rope.js';

describe('kvCacheScatter reference', () => {
  const [nHeads, maxSeq, headDim] = [2, 4, 3];
  // Every cache element distinct, so a write to the wrong place shows.
  const cache = Float32Array.from({ length: nHeads * maxSeq * headDim }, (_, i) => 1000 + i);

  it('writes exactly the targeted rows, head h from the slice h·headDim of each token', () => {
    const values = Float32Array.from({ length: 2 * nHeads * headDim }, (_, i) => -(i + 1)); // [2, 6]
    const cache0 = cache.slice();
    const values0 = values.slice();
    const y = run(
      kvCacheScatter,
      [
        { shape: [nHeads, maxSeq, headDim], data: cache },
        { shape: [2, nHeads * headDim], data: values },
      ],
      { position: 1 },
    );
    const expected = cache.slice();
    // token t, head h → cache[h, 1 + t, :]
    expected.set([-1, -2, -3], (0 * maxSeq + 1) * headDim);
    expected.set([-4, -5, -6], (1 * maxSeq + 1) * headDim);
    expected.set([-7, -8, -9], (0 * maxSeq + 2) * headDim);
    expected.set([-10, -11, -12], (1 * maxSeq + 2) * headDim);
    expect([...y]).toEqual([...expected]);
    // The reference returns new contents and leaves its inputs alone.
    expect(y).not.toBe(cache);
    expect(cache).toEqual(cache0);
    expect(values).toEqual(values0);
  });

  it('takes one token as a rank-1 row, at the first and the last position', () => {
    const row = Float32Array.from([1, 2, 3, 4, 5, 6]);
    for (const position of [0, maxSeq - 1]) {
      const single = run(
        kvCacheScatter,
        [
          { shape: [nHeads, maxSeq, headDim], data: cache },
          { shape: [6], data: row },
        ],
        { position },
      );
      const batched = run(
        kvCacheScatter,
        [
          { shape: [nHeads, maxSeq, headDim], data: cache },
          { shape: [1, 6], data: row },
        ],
        { position },
      );
      expect(single).toEqual(batched);
      const changed = [...single.keys()].filter((i) => single[i] !== cache[i]);
      const rows = [0, 1].flatMap((h) => [0, 1, 2].map((d) => (h * maxSeq + position) * headDim + d));
      expect(changed).toEqual(rows);
    }
  });

  it('writes the cache in place, and costs only the rows it moves', () => {
    const { outputs, attrs } = inferKernel(kvCacheScatter, [meta([2, 4, 3]), meta([6])], { position: 3 });
    expect(outputs).toEqual([{ name: 'cache', shape: [2, 4, 3], dtype: 'f32', aliasOf: 0 }]);
    expect(kvCacheScatter.cost!([meta([2, 4, 3]), meta([3, 6])], attrs)).toEqual({
      flops: 0,
      bytes: 2 * 4 * 18,
    });
  });
});

/** softmax(scale · q·Kᵀ) · V for one head, written out step by step. */
function naiveHead(q: number[], keys: number[][], values: number[][], scale: number): number[] {
  const scores = keys.map((k) => scale * k.reduce((s, kd, d) => s + kd * q[d]!, 0));
  const e = scores.map(Math.exp);
  const total = e.reduce((s, x) => s + x, 0);
  return q.map((_, d) => values.reduce((s, v, t) => s + (e[t]! / total) * v[d]!, 0));
}

function rowsOf(cache: Float32Array, head: number, maxSeq: number, headDim: number, count: number) {
  return Array.from({ length: count }, (_, t) => [
    ...cache.subarray((head * maxSeq + t) * headDim, (head * maxSeq + t + 1) * headDim),
  ]);
}

describe('incrementalAttention reference', () => {
  it('weights values by the softmax of the scores (hand-computed)', () => {
    // Scores 0 and ln 3 → weights 1/4 and 3/4 → 0.25·4 + 0.75·8 = 7.
    const y = run(
      incrementalAttention,
      [
        { shape: [1, 1], data: Float32Array.from([1]) },
        { shape: [1, 2, 1], data: Float32Array.from([0, Math.log(3)]) },
        { shape: [1, 2, 1], data: Float32Array.from([4, 8]) },
      ],
      { seqLen: 2, scale: 1 },
    );
    expect(y[0]).toBeCloseTo(7, 6);
  });

  it('returns the single cached value row when seqLen = 1', () => {
    const y = run(
      incrementalAttention,
      [
        { shape: [1, 2], data: Float32Array.from([3, -1]) },
        { shape: [1, 3, 2], data: Float32Array.from([5, 6, 7, 8, 9, 10]) },
        { shape: [1, 3, 2], data: Float32Array.from([0.5, -2, 11, 12, 13, 14]) },
      ],
      { seqLen: 1 },
    );
    expect([...y]).toEqual([0.5, -2]);
  });

  it('matches a naive softmax(q·Kᵀ·scale)·V per head, ignoring rows past seqLen', () => {
    const rng = new Rng(21);
    const [nHeads, headDim, maxSeq, seqLen] = [3, 5, 9, 6];
    const q = random(rng, nHeads * headDim);
    const k = random(rng, nHeads * maxSeq * headDim);
    const v = random(rng, nHeads * maxSeq * headDim);
    // Rows past seqLen are garbage: NaN would poison any result that read them.
    for (let h = 0; h < nHeads; h++) {
      k.fill(Number.NaN, (h * maxSeq + seqLen) * headDim, (h + 1) * maxSeq * headDim);
      v.fill(Number.NaN, (h * maxSeq + seqLen) * headDim, (h + 1) * maxSeq * headDim);
    }
    const [q0, k0, v0] = [q.slice(), k.slice(), v.slice()];
    const inputs = [
      { shape: [nHeads, headDim], data: q },
      { shape: [nHeads, maxSeq, headDim], data: k },
      { shape: [nHeads, maxSeq, headDim], data: v },
    ];
    for (const scale of [0, 0.3]) {
      const y = run(incrementalAttention, inputs, { seqLen, scale });
      const s = scale === 0 ? 1 / Math.sqrt(headDim) : scale;
      const expected = Array.from({ length: nHeads }, (_, h) =>
        naiveHead(
          [...q.subarray(h * headDim, (h + 1) * headDim)],
          rowsOf(k, h, maxSeq, headDim, seqLen),
          rowsOf(v, h, maxSeq, headDim, seqLen),
          s,
        ),
      ).flat();
      expect(
        compareOutputs('f32', y, Float32Array.from(expected), { rtol: 1e-6, atol: 1e-7 }),
      ).toBeUndefined();
    }
    expect(q).toEqual(q0);
    expect(k).toEqual(k0);
    expect(v).toEqual(v0);
  });

  it('maps query head h to kv head floor(h / (nHeads / nKvHeads))', () => {
    const rng = new Rng(33);
    const [nHeads, nKvHeads, headDim, maxSeq, seqLen] = [8, 2, 4, 7, 5];
    const q = random(rng, nHeads * headDim);
    const k = random(rng, nKvHeads * maxSeq * headDim);
    const v = random(rng, nKvHeads * maxSeq * headDim);
    const grouped = run(
      incrementalAttention,
      [
        { shape: [nHeads, headDim], data: q },
        { shape: [nKvHeads, maxSeq, headDim], data: k },
        { shape: [nKvHeads, maxSeq, headDim], data: v },
      ],
      { seqLen },
    );
    // The same call with every kv head repeated for its four query heads.
    const per = maxSeq * headDim;
    const repeat = (x: Float32Array) => {
      const y = new Float32Array(nHeads * per);
      for (let h = 0; h < nHeads; h++)
        y.set(x.subarray(Math.floor(h / 4) * per, (Math.floor(h / 4) + 1) * per), h * per);
      return y;
    };
    const full = run(
      incrementalAttention,
      [
        { shape: [nHeads, headDim], data: q },
        { shape: [nHeads, maxSeq, headDim], data: repeat(k) },
        { shape: [nHeads, maxSeq, headDim], data: repeat(v) },
      ],
      { seqLen },
    );
    expect(grouped).toEqual(full);
    // Heads 0–3 read kv head 0 and heads 4–7 kv head 1.
    const head = (h: number, g: number) =>
      naiveHead(
        [...q.subarray(h * headDim, (h + 1) * headDim)],
        rowsOf(k, g, maxSeq, headDim, seqLen),
        rowsOf(v, g, maxSeq, headDim, seqLen),
        1 / Math.sqrt(headDim),
      );
    for (const [h, g] of [
      [0, 0],
      [3, 0],
      [4, 1],
      [7, 1],
    ] as const) {
      const got = [...grouped.subarray(h * headDim, (h + 1) * headDim)];
      head(h, g).forEach((x, d) => {
        expect(got[d]).toBeCloseTo(x, 6);
      });
    }
  });

  it('stays finite for scores far beyond the range of exp', () => {
    const y = run(
      incrementalAttention,
      [
        { shape: [1, 1], data: Float32Array.from([1]) },
        { shape: [1, 3, 1], data: Float32Array.from([1000, 999, -1000]) },
        { shape: [1, 3, 1], data: Float32Array.from([1, 2, 3]) },
      ],
      { seqLen: 3, scale: 1 },
    );
    const w = 1 / (1 + Math.exp(-1));
    expect(y[0]).toBeCloseTo(w * 1 + (1 - w) * 2, 6);
  });

  it('infers [nHeads, headDim] and costs q, the read cache rows and out', () => {
    const metas = [meta([8, 64]), meta([2, 100, 64]), meta([2, 100, 64])];
    const { outputs, attrs } = inferKernel(incrementalAttention, metas, { seqLen: 67 });
    expect(outputs).toEqual([{ name: 'out', shape: [8, 64], dtype: 'f32' }]);
    expect(incrementalAttention.cost!(metas, attrs).bytes).toBe(4 * (2 * 8 * 64 + 2 * 2 * 67 * 64));
  });
});

describe('kvCacheScatter argument errors', () => {
  it('names values whose row is not nHeads · headDim', () => {
    expectThrows(
      () => inferKernel(kvCacheScatter, [meta([2, 8, 4]), meta([3, 4])], { position: 0 }),
      ShapeError,
      'kvCacheScatter',
      'values',
      'dimension 1 = 8',
      '4 in [3, 4]',
    );
  });

  it('names values or cache of the wrong rank', () => {
    expectInferErrors(kvCacheScatter, [
      [
        [meta([2, 8, 4]), meta([1, 1, 8])],
        { position: 0 },
        ShapeError,
        'values',
        'rank 1 [nHeads·headDim] or rank 2 [T, nHeads·headDim]',
        'rank 3 [1, 1, 8]',
      ],
      [
        [meta([8, 4]), meta([8])],
        { position: 0 },
        ShapeError,
        'cache',
        'rank 3 [nHeads, maxSeq, headDim]',
        'rank 2 [8, 4]',
      ],
    ]);
  });

  it('names attrs.position when the rows do not fit', () => {
    const e = thrown(() => inferKernel(kvCacheScatter, [meta([2, 8, 4]), meta([3, 8])], { position: 6 }));
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect([e.operation, e.argument]).toEqual(['kvCacheScatter', 'attrs.position']);
    expect(e.expected).toBe('<= maxSeq − T = 5');
    expect(e.message).toContain('<= maxSeq − T = 5');
    expect(e.message).toContain('got 6');
    // The last row itself is fine.
    expect(() => inferKernel(kvCacheScatter, [meta([2, 8, 4]), meta([3, 8])], { position: 5 })).not.toThrow();
  });

  it('requires a non-negative integer position', () => {
    for (const position of [undefined, -1, 0.5]) {
      const e = thrown(() => inferKernel(kvCacheScatter, [meta([2, 8, 4]), meta([8])], { position }));
      expect(e).toBeInstanceOf(InvalidArgumentError);
      expect(e.argument).toBe('attrs.position');
    }
  });
});

describe('incrementalAttention argument errors', () => {
  const q = meta([8, 4]);
  const kv = meta([2, 5, 4]);

  it('names kCache when its headDim differs from q', () => {
    const e = thrown(() =>
      inferKernel(incrementalAttention, [q, meta([2, 5, 3]), meta([2, 5, 3])], { seqLen: 2 }),
    );
    expect(e).toBeInstanceOf(ShapeError);
    expect([e.operation, e.argument]).toEqual(['incrementalAttention', 'kCache']);
    expect(e.message).toContain("headDim of 'q'");
    expect(e.message).toContain('dimension 2 = 4');
    expect(e.message).toContain('3 in [2, 5, 3]');
  });

  it('names kCache when its heads do not divide the query heads', () => {
    const e = thrown(() =>
      inferKernel(incrementalAttention, [q, meta([3, 5, 4]), meta([3, 5, 4])], { seqLen: 2 }),
    );
    expect(e).toBeInstanceOf(ShapeError);
    expect(e.argument).toBe('kCache');
    expect(e.message).toContain('dimension 0 dividing 8');
    expect(e.message).toContain('3 in [3, 5, 4]');
  });

  it('names vCache when it differs from kCache', () => {
    expectThrows(
      () => inferKernel(incrementalAttention, [q, kv, meta([2, 6, 4])], { seqLen: 2 }),
      ShapeError,
      'incrementalAttention',
      'vCache',
      'expected [2, 5, 4]',
      'got [2, 6, 4]',
    );
  });

  it('names q or kCache of the wrong rank', () => {
    const e = thrown(() => inferKernel(incrementalAttention, [meta([32]), kv, kv], { seqLen: 2 }));
    expect(e).toBeInstanceOf(ShapeError);
    expect(e.argument).toBe('q');
    expect(e.message).toContain('rank 2 [nHeads, headDim]');
    const k = thrown(() => inferKernel(incrementalAttention, [q, meta([5, 4]), meta([5, 4])], { seqLen: 2 }));
    expect(k).toBeInstanceOf(ShapeError);
    expect(k.argument).toBe('kCache');
    expect(k.message).toContain('rank 2 [5, 4]');
  });

  it('names attrs.seqLen past the cache, below 1 or missing, and attrs.scale below 0', () => {
    expectThrows(
      () => inferKernel(incrementalAttention, [q, kv, kv], { seqLen: 6 }),
      InvalidArgumentError,
      'incrementalAttention',
      'attrs.seqLen',
      '<= maxSeq = 5',
      'got 6',
    );
    expect(() => inferKernel(incrementalAttention, [q, kv, kv], { seqLen: 5 })).not.toThrow();
    for (const seqLen of [0, undefined]) {
      const e = thrown(() => inferKernel(incrementalAttention, [q, kv, kv], { seqLen }));
      expect(e).toBeInstanceOf(InvalidArgumentError);
      expect(e.argument).toBe('attrs.seqLen');
    }
    expectThrows(
      () => inferKernel(incrementalAttention, [q, kv, kv], { seqLen: 2, scale: -0.5 }),
      InvalidArgumentError,
      'incrementalAttention',
      'attrs.scale',
      '>= 0',
      '-0.5',
    );
  });
});

describe('positions and lengths held in device tensors', () => {
  const deviceValue: TensorMeta = { shape: [1], dtype: 'i32' };
  const i32 = (value: number) => ({ ...deviceValue, data: Int32Array.of(value) });
  const rng = new Rng(41);
  const f = (shape: number[]) => ({ shape, data: random(rng, sizeOf(shape)) });

  it('the device position writes where the attribute would', () => {
    const cache = f([3, 9, 5]);
    const values = f([2, 15]);
    const expected = run(kvCacheScatter, [cache, values], { position: 6 });
    expect(run(kvCacheScatter, [cache, values, i32(6)])).toEqual(expected);
  });

  it('the device length attends where the attribute would', () => {
    const [q, k, v] = [f([4, 6]), f([2, 11, 6]), f([2, 11, 6])];
    const expected = run(incrementalAttention, [q, k, v], { seqLen: 7 });
    expect(run(incrementalAttention, [q, k, v, i32(7)])).toEqual(expected);
  });

  it('the reference rejects device values outside the capacity, naming the input', () => {
    const cache = f([3, 9, 5]);
    for (const position of [-1, 8, 9]) {
      const e = thrown(() => run(kvCacheScatter, [cache, f([2, 15]), i32(position)]));
      expect(e).toBeInstanceOf(InvalidArgumentError);
      expect([e.operation, e.argument, e.expected]).toEqual(['kvCacheScatter', 'position', '0 … 7']);
    }
    const [q, k] = [f([4, 6]), f([2, 11, 6])];
    for (const seqLen of [0, -3, 12]) {
      const e = thrown(() => run(incrementalAttention, [q, k, k, i32(seqLen)]));
      expect([e.operation, e.argument, e.expected]).toEqual(['incrementalAttention', 'seqLen', '1 … 11']);
    }
  });

  it('static bounds still hold with a device value', () => {
    const e = thrown(() => inferKernel(kvCacheScatter, [meta([2, 4, 3]), meta([5, 6]), deviceValue]));
    expect(e).toBeInstanceOf(ShapeError);
    expect(e.argument).toBe('values');
    expect(inferKernel(kvCacheScatter, [meta([2, 4, 3]), meta([4, 6]), deviceValue]).attrs.position).toBe(0);
  });

  it('a device value and its attribute together are refused', () => {
    const e = thrown(() =>
      inferKernel(incrementalAttention, [meta([2, 4]), meta([2, 5, 4]), meta([2, 5, 4]), deviceValue], {
        seqLen: 1,
      }),
    );
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect([e.operation, e.argument]).toEqual(['incrementalAttention', 'attrs.seqLen']);
    expect(e.message).toContain("input 'seqLen'");
  });
});

describe('ropeKvScatter reference', () => {
  const rng = new Rng(12);
  const [tokens, heads, kvHeads, headDim, maxSeq] = [3, 4, 2, 6, 9];
  const width = kvHeads * headDim;
  const q = random(rng, tokens * heads * headDim);
  const k = random(rng, tokens * width);
  const v = random(rng, tokens * width);
  const kCache = random(rng, kvHeads * maxSeq * headDim);
  const vCache = random(rng, kvHeads * maxSeq * headDim);

  function fused(attrs: Record<string, unknown>, position?: number): Float32Array[] {
    const inputs = [
      [tokens, heads, headDim],
      [tokens, width],
      [tokens, width],
      [kvHeads, maxSeq, headDim],
      [kvHeads, maxSeq, headDim],
    ].map((shape) => meta(shape));
    const metas = position === undefined ? inputs : [...inputs, { shape: [1], dtype: 'i32' as const }];
    const io = inferKernel(ropeKvScatter, metas, attrs);
    const data = [q, k, v, kCache, vCache, ...(position === undefined ? [] : [Int32Array.of(position)])];
    return ropeKvScatter.reference(data, io.attrs, { inputs: metas, outputs: io.outputs }) as Float32Array[];
  }

  for (const layout of ['half', 'interleaved'] as const) {
    it(`equals rope of q and k then kvCacheScatter of k and v (${layout})`, () => {
      const position = 5;
      const attrs = { position, theta: 500, layout };
      const ropeOf = (x: Float32Array, shape: number[]) =>
        run(rope, [{ shape, data: x }], { positionOffset: position, theta: 500, layout });
      const qRot = ropeOf(q, [tokens, heads, headDim]);
      const kRot = ropeOf(k, [tokens, kvHeads, headDim]);
      const scatter = (cache: Float32Array, values: Float32Array) =>
        run(
          kvCacheScatter,
          [
            { shape: [kvHeads, maxSeq, headDim], data: cache },
            { shape: [tokens, width], data: values },
          ],
          { position },
        );
      const [qOut, kOut, vOut] = fused(attrs) as [Float32Array, Float32Array, Float32Array];
      expect(qOut).toEqual(qRot);
      expect(kOut).toEqual(scatter(kCache, kRot));
      expect(vOut).toEqual(scatter(vCache, v));
      // The device position gives the same result as the attribute.
      expect(fused({ theta: 500, layout }, position)).toEqual([qOut, kOut, vOut]);
      // Rows outside position … position + T − 1 keep the old cache.
      expect(kOut.subarray(0, position * headDim)).toEqual(kCache.subarray(0, position * headDim));
    });
  }

  it('reads q, k and v fused in one [T, heads + 2·kvHeads, headDim] input as the three apart', () => {
    const row = (heads + 2 * kvHeads) * headDim;
    const qkv = new Float32Array(tokens * row);
    for (let t = 0; t < tokens; t++) {
      qkv.set(q.subarray(t * heads * headDim, (t + 1) * heads * headDim), t * row);
      qkv.set(k.subarray(t * width, (t + 1) * width), t * row + heads * headDim);
      qkv.set(v.subarray(t * width, (t + 1) * width), t * row + heads * headDim + width);
    }
    const cache = meta([kvHeads, maxSeq, headDim]);
    const metas = [meta([tokens, heads + 2 * kvHeads, headDim]), undefined, undefined, cache, cache];
    const io = inferKernel(ropeKvScatter, metas, { position: 2 });
    expect(io.outputs[0]!.shape).toEqual([tokens, heads, headDim]);
    const outs = ropeKvScatter.reference([qkv, undefined, undefined, kCache, vCache], io.attrs, {
      inputs: metas,
      outputs: io.outputs,
    });
    expect(outs).toEqual(fused({ position: 2 }));
  });

  it('rejects a device position whose rows do not fit, naming it', () => {
    const e = thrown(() => fused({}, maxSeq - tokens + 1));
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect([e.operation, e.argument, e.expected]).toEqual([
      'ropeKvScatter',
      'position',
      `0 … ${maxSeq - tokens}`,
    ]);
  });

  it('infers q and the two caches in place, and costs the rows it moves', () => {
    const metas = [
      [1, 32, 64],
      [1, 512],
      [1, 512],
      [8, 2048, 64],
      [8, 2048, 64],
    ].map((s) => meta(s));
    const io = inferKernel(ropeKvScatter, metas, { position: 0 });
    expect(io.outputs.map((o) => [o.name, o.aliasOf])).toEqual([
      ['q', undefined],
      ['kCache', 3],
      ['vCache', 4],
    ]);
    expect(ropeKvScatter.cost!(metas, io.attrs)).toEqual({
      flops: 3 * (2048 + 512),
      bytes: 4 * 2 * (2048 + 512 + 512),
    });
  });
});

describe('ropeKvScatter argument errors', () => {
  const cache = meta([2, 8, 6]);
  it('names k whose shape is neither [T, kvHeads, headDim] nor [T, kvHeads·headDim]', () => {
    const e = thrown(() =>
      inferKernel(ropeKvScatter, [meta([2, 4, 6]), meta([2, 3, 6]), meta([2, 12]), cache, cache], {
        position: 0,
      }),
    );
    expect(e).toBeInstanceOf(ShapeError);
    expect([e.operation, e.argument]).toEqual(['ropeKvScatter', 'k']);
    expect(e.message).toContain('[2, 2, 6] or [2, 12]');
    expect(e.message).toContain('[2, 3, 6]');
  });

  it('names q for an odd headDim and attrs.position when the rows do not fit', () => {
    const odd = meta([2, 8, 5]);
    const e = thrown(() =>
      inferKernel(ropeKvScatter, [meta([2, 4, 5]), meta([2, 10]), meta([2, 10]), odd, odd], { position: 0 }),
    );
    expect([e.argument, e.expected]).toEqual(['q', 'an even last dimension']);
    const rows = [meta([2, 4, 6]), meta([2, 12]), meta([2, 12]), cache, cache];
    const late = thrown(() => inferKernel(ropeKvScatter, rows, { position: 7 }));
    expect([late.argument, late.expected]).toEqual(['attrs.position', '<= maxSeq − T = 6']);
    expect(() => inferKernel(ropeKvScatter, rows, { position: 6 })).not.toThrow();
  });
});
