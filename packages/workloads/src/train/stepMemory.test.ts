import { type Backend, createBackend, createCpuBackend, probeBackends } from '@rayo/core';
import { AdamW, Tape, trainStep } from '@rayo/train';
import { afterAll, describe, expect, it } from 'vitest';
import { SMALL_TRANSFORMER } from './smallWorkload.js';
import { buildWorkload } from './workload.js';

const SPEC = SMALL_TRANSFORMER;
const F32 = 4;

interface StepOutcome {
  readonly loss: number;
  readonly params: Float32Array[];
  readonly peakBytes: number;
  readonly paramCount: number;
}

/**
 * One AdamW step on a fresh backend: train-bench's path (`trainStep`), or the
 * same step on a tape that keeps every tensor until it is disposed.
 */
async function step(backend: Backend, reuseMemory: boolean): Promise<StepOutcome> {
  const work = buildWorkload(backend, SPEC, 7);
  const optimizer = new AdamW(work.model.namedParameters(), { lr: 0.01 });
  let loss: number;
  if (reuseMemory) {
    loss = (await trainStep({ backend, optimizer, loss: (tape) => work.loss(tape) })).loss!;
  } else {
    const batch = backend.batch();
    const tape = new Tape(backend, { runner: batch, reuseMemory: false });
    const root = work.loss(tape);
    tape.backward(root);
    optimizer.step(batch);
    await batch.submit();
    loss = (await root.value.read())[0]!;
    tape.dispose();
    optimizer.zeroGrad();
  }
  const params = work.model.parameters();
  const outcome = {
    loss,
    params: await Promise.all(params.map(async (p) => Float32Array.from(await p.value.read()))),
    peakBytes: backend.memory().peakAllocatedBytes,
    paramCount: params.reduce((n, p) => n + p.value.size, 0),
  };
  optimizer.dispose();
  work.dispose();
  return outcome;
}

/**
 * The most a step needs, from first principles: parameters, their gradients
 * and AdamW's two moments; the activations backward reads, per block (the
 * normalised inputs, the transposed heads, the attention weights, the
 * attention output before its projection, the residual sums, the MLP's
 * gate, up and product) and around the blocks (the embedding, the final
 * norm, the logits and their gradient); one block's every tensor, the
 * working set of the block being computed or differentiated; the masks.
 */
function boundBytes(paramCount: number): number {
  const { vocab, dim, hidden, blocks, seq, batch, heads } = SPEC;
  const rows = seq * batch;
  const scores = batch * heads * seq * seq;
  const savedPerBlock = 8 * rows * dim + 3 * rows * hidden + scores;
  const wholeBlock = 16 * rows * dim + 3 * rows * hidden + 3 * scores;
  const around = 2 * rows * dim + 2 * rows * vocab;
  const masks = blocks * seq * seq;
  return F32 * (4 * paramCount + blocks * savedPerBlock + wholeBlock + around + masks);
}

async function compare(make: () => Promise<Backend>): Promise<void> {
  const kept = await step(await make(), false);
  const reused = await step(await make(), true);
  // Reused memory holds other values first: a kernel that left part of its output unwritten would show.
  expect(reused.loss).toBe(kept.loss);
  expect(reused.params).toHaveLength(kept.params.length);
  reused.params.forEach((p, i) => {
    expect(p).toEqual(kept.params[i]);
  });
  const bound = boundBytes(reused.paramCount);
  expect(reused.peakBytes).toBeLessThanOrEqual(bound);
  // The bound is tight enough to tell: keeping every tensor to the end exceeds it.
  expect(kept.peakBytes).toBeGreaterThan(bound);
}

describe('peak memory of a GPT-style training step', () => {
  it('on cpu: the same loss and update as keeping every tensor, within the first-principles bound', () =>
    compare(async () => createCpuBackend()));
});

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const runWgpu = wgpu.available || process.env.CI === 'true';

describe.skipIf(!runWgpu)('peak memory of a GPT-style training step on wgpu', () => {
  const backends: Backend[] = [];
  afterAll(() => {
    for (const b of backends) b.dispose();
  });
  it(
    'gives the same loss and update as keeping every tensor, within the first-principles bound',
    () =>
      compare(async () => {
        const b = await createBackend('wgpu');
        backends.push(b);
        return b;
      }),
    120_000,
  );
});
