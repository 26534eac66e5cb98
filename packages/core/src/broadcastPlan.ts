import { UnsupportedOnBackendError } from './errors.js';
import { type Shape, stridesOf } from './shape.js';

/**
 * How a broadcasting binary kernel indexes its operands: output element i,
 * row-major over `dims` with coordinates c_k, reads a[Σ c_k·sa_k] and
 * b[Σ c_k·sb_k].
 */
export interface BroadcastPlan {
  /** Output extents, outermost first; at least one axis. */
  readonly dims: readonly number[];
  /** Element strides of `a` along each axis (0 where broadcast). */
  readonly sa: readonly number[];
  /** Element strides of `b` along each axis (0 where broadcast). */
  readonly sb: readonly number[];
}

/**
 * The strides of both operands over the output, with size-1 output axes
 * dropped (their coordinate is always 0, so they read nothing) and adjacent
 * axes merged where neither operand breaks contiguity, so that most calls
 * end up rank 1 or 2 and a kernel specialised by rank sees few ranks. A
 * scalar output is one axis of 1.
 */
export function broadcastPlan(out: Shape, a: Shape, b: Shape): BroadcastPlan {
  const stridesOver = (shape: Shape) => {
    const strides = stridesOf(shape);
    return out.map((_, i) => {
      const j = i - (out.length - shape.length);
      return j < 0 || shape[j] === 1 ? 0 : strides[j]!;
    });
  };
  const fullA = stridesOver(a);
  const fullB = stridesOver(b);
  const kept = out.flatMap((d, i) => (d === 1 ? [] : [i]));
  const dims = kept.map((i) => out[i]!);
  const sa = kept.map((i) => fullA[i]!);
  const sb = kept.map((i) => fullB[i]!);
  for (let i = dims.length - 2; i >= 0; i--) {
    const inner = dims[i + 1]!;
    if (sa[i] === sa[i + 1]! * inner && sb[i] === sb[i + 1]! * inner) {
      dims[i] = dims[i]! * inner;
      sa[i] = sa[i + 1]!;
      sb[i] = sb[i + 1]!;
      dims.splice(i + 1, 1);
      sa.splice(i + 1, 1);
      sb.splice(i + 1, 1);
    }
  }
  if (dims.length === 0) return { dims: [1], sa: [0], sb: [0] };
  return { dims, sa, sb };
}

/** The most independent axes the GPU backends' broadcasting kernels take (three parameters each). */
export const MAX_BROADCAST_RANK = 6;

/**
 * The plan of a broadcasting call `operation`, refused (not split) where it
 * has more than MAX_BROADCAST_RANK independent axes after merging.
 */
export function kernelBroadcastPlan(operation: string, out: Shape, a: Shape, b: Shape): BroadcastPlan {
  const plan = broadcastPlan(out, a, b);
  if (plan.dims.length > MAX_BROADCAST_RANK) {
    throw new UnsupportedOnBackendError('broadcast pattern has too many independent axes', {
      operation,
      argument: 'b',
      expected: `at most ${MAX_BROADCAST_RANK} after merging contiguous axes`,
      actual: String(plan.dims.length),
    });
  }
  return plan;
}
