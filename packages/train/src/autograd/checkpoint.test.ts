import { type Backend, createCpuBackend, RayoError, type Tensor } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { CausalSelfAttention } from '../nn/attention.js';
import { Parameter } from '../nn/module.js';
import { TransformerBlock } from '../nn/transformer.js';
import type { TrainPrecision } from '../precision.js';
import { Rng } from '../random.js';
import { add, exp, mul, scale, sum, sumSquares } from './ops/index.js';
import { Tape, type Variable } from './tape.js';

const read = async (t: Tensor) => Float32Array.from(await t.read());

/** A loss of `y` that weighs every element differently, so that a misplaced gradient shows. */
function weightedLoss(tape: Tape, y: Variable, seed: number): Variable {
  const weights = new Rng(seed).uniformArray(y.size, -1, 1);
  return sum(tape, mul(tape, y, tape.constant(tape.upload(weights, y.shape))));
}

interface Outcome {
  readonly loss: Float32Array;
  readonly grads: Float32Array[];
  readonly peakBytes: number;
  readonly kernels: number;
}

/**
 * One forward and backward of `build` on a fresh tape, recorded into a batch
 * (as a training step is): the loss, the gradients of `leaves`, the peak of
 * allocated bytes from the tape's start and the kernels recorded.
 */
async function differentiate(
  backend: Backend,
  leaves: readonly Variable[],
  build: (tape: Tape) => Variable,
): Promise<Outcome> {
  backend.emptyCache();
  backend.resetPeakMemory();
  const batch = backend.batch();
  const tape = new Tape(backend, { runner: batch });
  const loss = build(tape);
  tape.backward(loss);
  const kernels = batch.size;
  await batch.submit();
  const outcome = {
    loss: await read(loss.value),
    grads: await Promise.all(leaves.map((v) => read(v.grad!))),
    peakBytes: backend.memory().peakAllocatedBytes,
    kernels,
  };
  for (const v of leaves) v.zeroGrad();
  tape.dispose();
  return outcome;
}

/** Blocks of odd sizes: SwiGLU and GELU, RoPE, batched, attending through the flash kernels. */
function blocks(backend: Backend, precision: TrainPrecision): TransformerBlock[] {
  const rng = new Rng(3);
  return [
    new TransformerBlock(backend, { dim: 12, heads: 3, hidden: 20, rope: true, rng }),
    new TransformerBlock(backend, { dim: 12, heads: 2, mlp: 'gelu', rope: true, rng }),
    new TransformerBlock(backend, { dim: 12, heads: 3, hidden: 28, rng }),
  ].map((b) => b.setPrecision(precision));
}

describe('Tape.checkpoint', () => {
  for (const precision of ['f32', 'bf16'] as const) {
    it(`gives a stack of ${precision} blocks the gradients of keeping their activations, bit for bit, in less memory`, async () => {
      const backend = createCpuBackend();
      const stack = blocks(backend, precision);
      const x = new Parameter(backend.upload(new Rng(5).normalArray(7 * 2 * 12), [7, 2, 12]), 'x');
      const leaves = [x, ...stack.flatMap((b) => b.parameters())];
      const run = (checkpoint: boolean) =>
        differentiate(backend, leaves, (tape) => {
          let h: Variable = x;
          for (const block of stack) {
            const input = h;
            h = checkpoint ? tape.checkpoint(() => block.forward(tape, input)) : block.forward(tape, input);
          }
          return weightedLoss(tape, h, 9);
        });
      const kept = await run(false);
      const recomputed = await run(true);
      expect(recomputed.loss).toEqual(kept.loss);
      recomputed.grads.forEach((g, i) => {
        expect(g, `gradient ${i}`).toEqual(kept.grads[i]);
      });
      expect(recomputed.grads.every((g) => g.some((v) => v !== 0))).toBe(true);
      // Each block's forward runs again in backward.
      expect(recomputed.kernels).toBeGreaterThan(kept.kernels);
      expect(recomputed.peakBytes).toBeLessThan(kept.peakBytes);
      for (const b of stack) b.dispose();
      x.value.dispose();
    });
  }

  it('differentiates attention composed from batched products and softmax (no flash kernels)', async () => {
    const backend = createCpuBackend();
    const attn = new CausalSelfAttention(backend, { dim: 8, heads: 2, rope: true, flash: false, seed: 4 });
    const x = new Parameter(backend.upload(new Rng(6).normalArray(5 * 3 * 8), [5, 3, 8]), 'x');
    const leaves = [x, ...attn.parameters()];
    const run = (checkpoint: boolean) =>
      differentiate(backend, leaves, (tape) => {
        const forward = () => tape.scope(() => attn.forward(tape, x));
        return weightedLoss(tape, checkpoint ? tape.checkpoint(forward) : forward(), 2);
      });
    const kept = await run(false);
    const recomputed = await run(true);
    expect(recomputed.loss).toEqual(kept.loss);
    recomputed.grads.forEach((g, i) => {
      expect(g, `gradient ${i}`).toEqual(kept.grads[i]);
    });
    attn.dispose();
    x.value.dispose();
  });

  it('carries gradients to what a segment shares with the rest: its input, a parameter, a tape tensor', async () => {
    const backend = createCpuBackend();
    const rng = new Rng(8);
    const w = new Parameter(backend.upload(rng.uniformArray(9, -1, 1), [9]), 'w');
    const v = new Parameter(backend.upload(rng.uniformArray(9, -1, 1), [9]), 'v');
    const cData = rng.uniformArray(9, -1, 1);
    const leaves = [w, v];
    const run = (checkpoint: boolean) =>
      differentiate(backend, leaves, (tape) => {
        // `h` is the segment's input and is used after it; `w` inside and outside; `c` a tape tensor it reads.
        // (Each is used once inside: contributions from several uses inside and one outside are summed
        // in another order than without the segment, the same up to rounding.)
        const h = exp(tape, scale(tape, v, 0.5));
        const c = tape.constant(tape.upload(cData, [9]));
        const forward = () => tape.scope(() => mul(tape, exp(tape, mul(tape, h, w)), c));
        const y = checkpoint ? tape.checkpoint(forward) : forward();
        return add(tape, sumSquares(tape, y), sum(tape, mul(tape, h, w)));
      });
    const kept = await run(false);
    const recomputed = await run(true);
    expect(recomputed.loss).toEqual(kept.loss);
    expect(recomputed.grads).toEqual(kept.grads);
    w.value.dispose();
    v.value.dispose();
  });

  it('nests: a segment inside a segment', async () => {
    const backend = createCpuBackend();
    const stack = blocks(backend, 'f32');
    const x = new Parameter(backend.upload(new Rng(1).normalArray(6 * 12), [6, 12]), 'x');
    const leaves = [x, ...stack.flatMap((b) => b.parameters())];
    const [a, b, c] = stack as [TransformerBlock, TransformerBlock, TransformerBlock];
    const run = (checkpoint: boolean) =>
      differentiate(backend, leaves, (tape) => {
        const pair = (h: Variable) => {
          const inner = checkpoint ? tape.checkpoint(() => a.forward(tape, h)) : a.forward(tape, h);
          return b.forward(tape, inner);
        };
        const h = checkpoint ? tape.checkpoint(() => pair(x)) : pair(x);
        return weightedLoss(tape, c.forward(tape, h), 3);
      });
    const kept = await run(false);
    const recomputed = await run(true);
    expect(recomputed.grads).toEqual(kept.grads);
    for (const m of stack) m.dispose();
    x.value.dispose();
  });

  it('is its forward on an evaluation tape, and records nothing where no gradient is needed', async () => {
    const backend = createCpuBackend();
    const block = blocks(backend, 'f32')[0]!;
    const data = backend.upload(new Rng(2).normalArray(4 * 12), [4, 12]);
    const plain = async (tape: Tape) => read(block.forward(tape, tape.constant(data)).value);
    using reference = new Tape(backend, { grad: false });
    const want = await plain(reference);
    using evaluation = new Tape(backend, { grad: false });
    const y = evaluation.checkpoint(() => block.forward(evaluation, evaluation.constant(data)));
    expect(y.requiresGrad).toBe(false);
    expect(await read(y.value)).toEqual(want);
    // A segment whose inputs need no gradient (frozen parameters aside, here a constant and a scale).
    using tape = new Tape(backend);
    const z = tape.checkpoint(() => scale(tape, tape.constant(data), 2));
    expect(z.isLeaf).toBe(true);
    expect(Array.from(await read(z.value))).toEqual(Array.from(await read(data)).map((v) => 2 * v));
    block.dispose();
    data.dispose();
  });

  it('differentiates a segment only within backward', () => {
    const backend = createCpuBackend();
    const w = new Parameter(backend.upload([1, 2], [2]), 'w');
    using tape = new Tape(backend);
    const y = tape.checkpoint(() => exp(tape, w));
    expect(y.inputs).toHaveLength(1);
    expect(y.inputs[0]).toBe(w);
    expect(() => y.backwardFn!(tape.ones([2]), [true])).toThrow(
      /a checkpointed segment is differentiated only by backward/,
    );
    expect(() => y.backwardFn!(tape.ones([2]), [true])).toThrow(RayoError);
    w.value.dispose();
  });

  it('frees a segment’s intermediates when its first pass ends', () => {
    const backend = createCpuBackend();
    const w = new Parameter(backend.upload(new Rng(7).uniformArray(16, -1, 1), [16]), 'w');
    using tape = new Tape(backend);
    const before = tape.ownedTensors;
    const live = backend.memory().liveTensors;
    const y = tape.checkpoint(() => exp(tape, exp(tape, exp(tape, w))));
    // Only the result is new and alive; the two inner values went to the tape's pool.
    expect(tape.ownedTensors).toBe(before + 3);
    expect(backend.memory().liveTensors).toBe(live + 3);
    // A later kernel of that shape takes pooled memory instead of allocating.
    scale(tape, y, 2);
    expect(backend.memory().liveTensors).toBe(live + 3);
    w.zeroGrad();
  });
});

describe('Tape.checkpoint under onGradientsFinal', () => {
  it('reports a segment’s parameters once, right after its rule, with their final gradients', async () => {
    const backend = createCpuBackend();
    const stack = blocks(backend, 'f32');
    const x = new Parameter(backend.upload(new Rng(12).normalArray(5 * 12), [5, 12]), 'x');
    const reported: Parameter[][] = [];
    using tape = new Tape(backend);
    let h: Variable = x;
    for (const block of stack) {
      const input = h;
      h = tape.checkpoint(() => block.forward(tape, input));
    }
    tape.backward(weightedLoss(tape, h, 4), {
      onGradientsFinal: (leaves) => reported.push(leaves as Parameter[]),
    });
    // Backward reaches the last block first; x, the first block's input, comes with the first block.
    const all: Variable[] = [x, ...stack.flatMap((b) => b.parameters())];
    const indices = (leaves: readonly Variable[]) => leaves.map((v) => all.indexOf(v)).sort((a, b) => a - b);
    const [first, second, third] = stack.map((b) => b.parameters()) as [
      Parameter[],
      Parameter[],
      Parameter[],
    ];
    expect(reported.map(indices)).toEqual([indices(third), indices(second), indices([x, ...first])]);
    for (const b of stack) b.dispose();
    x.zeroGrad();
    x.value.dispose();
  });
});
