import { add, matmul, type Shape, shapesEqual, sum, type Tensor, transpose } from '@rayo/core';
import type { Tape } from './tape.js';

interface Run {
  size: number;
  reduce: boolean;
}

const product = (runs: readonly Run[]): number => runs.reduce((n, r) => n * r.size, 1);

/**
 * Sums `dy` over the axes along which `shape` was broadcast to `dy.shape`, on
 * the device: the gradient of a broadcast operand. Axes are merged into
 * alternating runs of kept and summed axes and reduced from the innermost:
 * a trailing summed run with the `sum` kernel, a summed run in front of a kept
 * one with a product against a ones vector (or a transpose and `sum` when
 * there are outer axes).
 */
export function reduceToShape(tape: Tape, dy: Tensor, shape: Shape): Tensor {
  if (shapesEqual(dy.shape, shape)) return dy;
  const out = dy.shape;
  const padded = [...new Array<number>(out.length - shape.length).fill(1), ...shape];
  const runs: Run[] = [];
  out.forEach((d, i) => {
    if (d === 1) return;
    const reduce = padded[i] === 1;
    const last = runs[runs.length - 1];
    if (last && last.reduce === reduce) last.size *= d;
    else runs.push({ size: d, reduce });
  });
  let cur = dy;
  while (runs.some((r) => r.reduce)) {
    const last = runs[runs.length - 1]!;
    if (last.reduce) {
      runs.pop();
      cur = tape.run1(sum, [tape.reshape(cur, [product(runs), last.size])], { axis: 'last' });
      continue;
    }
    const summed = runs[runs.length - 2]!;
    const outer = product(runs.slice(0, -2));
    if (outer === 1) {
      // Column sums as one GEMV: ones[1, m] · dy[m, n].
      cur = tape.run1(matmul, [tape.ones([1, summed.size]), tape.reshape(cur, [summed.size, last.size])]);
    } else {
      const t = tape.run1(transpose, [tape.reshape(cur, [outer, summed.size, last.size])]);
      cur = tape.run1(sum, [t], { axis: 'last' });
    }
    runs.splice(runs.length - 2, 1);
    const before = runs[runs.length - 2];
    if (before && !before.reduce) {
      before.size *= last.size;
      runs.pop();
    }
  }
  return tape.reshape(cur, shape);
}

/**
 * Broadcasts `t` (whose shape broadcasts to `shape`) to `shape` on the device,
 * by adding zeros of the smallest shape that gives it.
 */
export function broadcastTo(tape: Tape, t: Tensor, shape: Shape): Tensor {
  if (shapesEqual(t.shape, shape)) return t;
  // The zeros need only the axes where t has a 1 or no axis, up to the first such axis.
  const padded = [...new Array<number>(shape.length - t.shape.length).fill(1), ...t.shape];
  const first = padded.findIndex((d, i) => d === 1 && shape[i] !== 1);
  if (first === -1) return tape.reshape(t, shape);
  return tape.run1(add, [tape.reshape(t, padded), tape.zeros(shape.slice(first))]);
}
