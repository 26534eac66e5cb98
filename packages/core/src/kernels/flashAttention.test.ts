import { expectInferErrors, meta, numericGradient, random, run } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { roundedToHalf } from '../dtype.js';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { inferKernel } from '../kernelChecks.js';
import { Rng } from '../testing/random.js';
import { causalAttention } from './causalAttention.js';
import { flashAttention, flashAttentionBackward } from './flashAttention.js';

const [T, B, H, KV, HD] = [5, 2, 4, 2, 3];
const qShape = [T, B, H, HD];
const kvShape = [T, B, KV, HD];

function inputs(seed: number) {
  const rng = new Rng(seed);
  return {
    q: random(rng, T * B * H * HD, -1.5, 1.5),
    k: random(rng, T * B * KV * HD, -1.5, 1.5),
    v: random(rng, T * B * KV * HD),
    g: random(rng, T * B * H * HD),
  };
}

function forward(q: Float32Array, k: Float32Array, v: Float32Array, scale = 0.7) {
  const { values } = run(
    flashAttention,
    [
      { shape: qShape, data: q },
      { shape: kvShape, data: k },
      { shape: kvShape, data: v },
    ],
    { scale },
  );
  return { out: values[0] as Float32Array, lse: values[1] as Float32Array };
}

describe('flashAttention reference', () => {
  it('is causalAttention at position 0 for each batch item, with lse the log of the softmax denominator', () => {
    const { q, k, v } = inputs(3);
    const { out, lse } = forward(q, k, v);
    for (let b = 0; b < B; b++) {
      // The batch item's q [T, H, HD] and head-first caches [KV, T, HD].
      const qb = new Float32Array(T * H * HD);
      const kc = new Float32Array(KV * T * HD);
      const vc = new Float32Array(KV * T * HD);
      for (let t = 0; t < T; t++) {
        qb.set(q.subarray((t * B + b) * H * HD, (t * B + b + 1) * H * HD), t * H * HD);
        for (let g = 0; g < KV; g++) {
          const at = ((t * B + b) * KV + g) * HD;
          kc.set(k.subarray(at, at + HD), (g * T + t) * HD);
          vc.set(v.subarray(at, at + HD), (g * T + t) * HD);
        }
      }
      const { values } = run(
        causalAttention,
        [
          { shape: [T, H, HD], data: qb },
          { shape: [KV, T, HD], data: kc },
          { shape: [KV, T, HD], data: vc },
        ],
        { position: 0, scale: 0.7 },
      );
      for (let t = 0; t < T; t++) {
        const mine = out.subarray((t * B + b) * H * HD, (t * B + b + 1) * H * HD);
        expect([...mine]).toEqual([...values[0]!.subarray(t * H * HD, (t + 1) * H * HD)]);
      }
    }
    // Token 0 sees only key 0: its lse is its one score.
    for (let h = 0; h < H; h++) {
      let s = 0;
      for (let d = 0; d < HD; d++) s += q[h * HD + d]! * k[Math.floor(h / 2) * HD + d]!;
      expect(lse[h]).toBeCloseTo(0.7 * s, 6);
    }
  });

  it('backward matches finite differences of the f32 forward (grouped heads, batch 2)', () => {
    const { q, k, v, g } = inputs(11);
    const { out, lse } = forward(q, k, v);
    const { values } = run(
      flashAttentionBackward,
      [
        { shape: qShape, data: q },
        { shape: kvShape, data: k },
        { shape: kvShape, data: v },
        { shape: qShape, data: out },
        { shape: qShape, data: g },
        { shape: [T, B, H], data: lse },
      ],
      { scale: 0.7 },
    );
    // loss = Σ out ∘ g, so d loss / d out = g.
    const loss = () => {
      const y = forward(q, k, v).out;
      let total = 0;
      for (let i = 0; i < y.length; i++) total += y[i]! * g[i]!;
      return total;
    };
    [q, k, v].forEach((x, i) => {
      const numeric = numericGradient(loss, x, 1e-2);
      const analytic = values[i]!;
      for (let e = 0; e < x.length; e++) expect(Math.abs(analytic[e]! - numeric[e]!)).toBeLessThan(2e-3);
    });
  });

  it("under precision 'half' is the f32 form of q, k, v (and dOut) rounded to bf16", () => {
    const { q, k, v, g } = inputs(5);
    const [qh, kh, vh, gh] = [q, k, v, g].map((x) => roundedToHalf('bf16', x)) as Float32Array[];
    const half = run(
      flashAttention,
      [
        { shape: qShape, data: q },
        { shape: kvShape, data: k },
        { shape: kvShape, data: v },
      ],
      { scale: 0.7, precision: 'half' },
    ).values;
    const rounded = forward(qh!, kh!, vh!);
    expect([...half[0]!]).toEqual([...rounded.out]);
    expect([...half[1]!]).toEqual([...rounded.lse]);
    expect([...half[0]!]).not.toEqual([...forward(q, k, v).out]);
    const backward = (x: Float32Array[], dOut: Float32Array, precision: 'f32' | 'half') =>
      run(
        flashAttentionBackward,
        [
          { shape: qShape, data: x[0]! },
          { shape: kvShape, data: x[1]! },
          { shape: kvShape, data: x[2]! },
          { shape: qShape, data: rounded.out },
          { shape: qShape, data: dOut },
          { shape: [T, B, H], data: rounded.lse },
        ],
        { scale: 0.7, precision },
      ).values;
    // D = rowsum(dOut ∘ out) reads dOut as given; the products read it rounded.
    const [dq, dk, dv] = backward([q, k, v], g, 'half');
    const [dqR, dkR, dvR] = backward([qh!, kh!, vh!], gh!, 'f32');
    expect([...dv!]).toEqual([...dvR!]);
    for (const [got, want] of [
      [dq!, dqR!],
      [dk!, dkR!],
    ] as const)
      for (let e = 0; e < got.length; e++) expect(got[e]).toBeCloseTo(want[e]!, 2);
  });

  it('counts the causal scores in its cost', () => {
    const metas = [meta([4, 2, 6, 8]), meta([4, 2, 3, 8]), meta([4, 2, 3, 8])];
    const { attrs } = inferKernel(flashAttention, metas, {});
    // 1 + 2 + 3 + 4 = 10 scores per (batch, head).
    expect(flashAttention.cost!(metas, attrs).flops).toBe(2 * 6 * 10 * (4 * 8 + 3));
    const back = [...metas, meta([4, 2, 6, 8]), meta([4, 2, 6, 8]), meta([4, 2, 6])];
    expect(flashAttentionBackward.cost!(back, attrs).flops).toBe(2 * 6 * 10 * (10 * 8 + 4));
  });

  it('refuses bad shapes naming the argument', () => {
    expectInferErrors(flashAttention, [
      [[meta([4, 6, 8]), meta([4, 1, 3, 8]), meta([4, 1, 3, 8])], {}, ShapeError, 'q', 'rank 4', 'rank 3'],
      [[meta([4, 1, 6, 8]), meta([4, 1, 4, 8]), meta([4, 1, 4, 8])], {}, ShapeError, 'k', 'dividing 6', '4'],
      [
        [meta([4, 1, 6, 8]), meta([3, 1, 3, 8]), meta([3, 1, 3, 8])],
        {},
        ShapeError,
        'k',
        'dimension 0 = 4',
        '3',
      ],
      [
        [meta([4, 1, 6, 8]), meta([4, 1, 3, 8]), meta([4, 1, 3, 7])],
        {},
        ShapeError,
        'v',
        '[4, 1, 3, 8]',
        '7',
      ],
      [
        [meta([4, 1, 6, 8]), meta([4, 1, 3, 8]), meta([4, 1, 3, 8])],
        { scale: -1 },
        InvalidArgumentError,
        'attrs.scale',
        '>= 0',
        '-1',
      ],
      [
        [meta([4, 1, 6, 8]), meta([4, 1, 3, 8]), meta([4, 1, 3, 8])],
        { precision: 'tf32' as unknown as 'half' },
        InvalidArgumentError,
        'attrs.precision',
        '"f32" | "half"',
        'tf32',
      ],
    ]);
    const qkv = [meta([4, 1, 6, 8]), meta([4, 1, 3, 8]), meta([4, 1, 3, 8])];
    expectInferErrors(flashAttentionBackward, [
      [
        [...qkv, meta([4, 1, 6, 8]), meta([4, 1, 6, 8]), meta([4, 6])],
        {},
        ShapeError,
        'lse',
        '[4, 1, 6]',
        '[4, 6]',
      ],
      [
        [...qkv, meta([4, 1, 6, 8]), meta([4, 6, 8]), meta([4, 1, 6])],
        {},
        ShapeError,
        'dOut',
        '[4, 1, 6, 8]',
        '[4, 6, 8]',
      ],
    ]);
  });
});
