import {
  type Backend,
  cast,
  copy,
  createCpuBackend,
  fill,
  type KernelRunner,
  scale,
  type Tensor,
} from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { Rng } from '../random.js';
import { add } from './ops/elementwise.js';
import { reducedLinear } from './ops/linalg.js';
import { reshape } from './ops/shape.js';
import { Tape, type Variable } from './tape.js';

// Linear layers that share an input under a half precision (q, k and v; gate
// and up) save one half copy of it for their weight gradients, made by the
// first; a copy no longer holds once its source is written or born again.

/** The backend, counting the casts to a half dtype that go through it. */
function countingCasts(backend: Backend): { runner: KernelRunner; casts: () => number } {
  let casts = 0;
  return {
    runner: {
      run: (...call) => {
        if (call[0].name === cast.name) casts++;
        return backend.run(...call);
      },
    },
    casts: () => casts,
  };
}

function randomData(rng: Rng, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => rng.uniform(-1, 1));
}

describe('half copies shared by linear layers', () => {
  const backend = createCpuBackend();
  const [rows, dim, out] = [5, 8, 6];

  /** Three bf16 linears of x (through `source` per layer), their summed outputs' weight gradients, and the casts made. */
  async function threeLinears(source: (tape: Tape, x: Variable, layer: number) => Variable) {
    const rng = new Rng(11);
    const x = backend.upload(randomData(rng, rows * dim), [rows, dim]);
    const weights = [0, 1, 2].map(() => backend.upload(randomData(rng, out * dim), [out, dim]));
    const { runner, casts } = countingCasts(backend);
    const tape = new Tape(backend, { runner });
    try {
      // x made on the tape (as a norm's output is), so that the tape owns it.
      const xv = tape.constant(tape.run1(scale, [x], { alpha: 1 }));
      const ws = weights.map((w) => tape.variable(w));
      const ys = ws.map((w, i) => reducedLinear(tape, source(tape, xv, i), w, 'half', 'bf16'));
      const total = add(tape, add(tape, ys[0]!, ys[1]!), ys[2]!);
      tape.backward(total, tape.full(total.shape, 1));
      const grads = await Promise.all(ws.map((w) => w.grad!.read()));
      // Three weight casts, and the input's.
      return { grads, inputCasts: casts() - 3 };
    } finally {
      tape.dispose();
      for (const t of [x, ...weights]) t.dispose();
    }
  }

  it('one copy of a shared input (views of it included) serves the three layers, with the gradients of three copies', async () => {
    const shared = await threeLinears((tape, x, layer) =>
      layer === 1 ? reshape(tape, reshape(tape, x, [rows * dim]), [rows, dim]) : x,
    );
    expect(shared.inputCasts).toBe(1);
    // Three distinct inputs of the same values: a copy each.
    const apart = await threeLinears((tape, x) => tape.constant(tape.run1(copy, [x.value])));
    expect(apart.inputCasts).toBe(3);
    for (const [i, g] of shared.grads.entries()) expect(g).toEqual(apart.grads[i]);
  });

  it('a source written in place since its copy is cast again, with its new values', async () => {
    const rng = new Rng(12);
    const x = backend.upload(randomData(rng, rows * dim), [rows, dim]);
    const { runner, casts } = countingCasts(backend);
    const tape = new Tape(backend, { runner });
    try {
      const owned: Tensor = tape.run1(scale, [x], { alpha: 1 });
      const first = tape.halfCopy(owned, 'bf16');
      expect(tape.halfCopy(owned, 'bf16')).toBe(first);
      expect(casts()).toBe(1);
      // fill writes in place: its output is its input.
      tape.run(fill, [owned], { value: 0.5 });
      const second = tape.halfCopy(owned, 'bf16');
      expect(casts()).toBe(2);
      expect(second).not.toBe(first);
      expect(Array.from(await tape.run1(cast, [second], { to: 'f32' }).read())).toEqual(
        new Array(rows * dim).fill(0.5),
      );
      // A tensor the tape does not own is cast each time.
      tape.halfCopy(x, 'bf16');
      tape.halfCopy(x, 'bf16');
      expect(casts()).toBe(5);
    } finally {
      tape.dispose();
      x.dispose();
    }
  });
});
