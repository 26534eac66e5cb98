import type { Backend, Communicator, DeviceStorage, ReduceOp, Tensor } from '@rayo/core';

const REDUCERS: Record<ReduceOp, (a: number, b: number) => number> = {
  sum: (a, b) => a + b,
  avg: (a, b) => a + b,
  max: Math.max,
  min: Math.min,
  prod: (a, b) => a * b,
};

/** A collective of one round, as each rank posted it. */
interface Posted {
  readonly kind: string;
  readonly inputs: readonly Tensor[];
  readonly outputs: readonly Tensor[];
  readonly op: ReduceOp;
  readonly root: number;
}

const host = (t: Tensor) => t.storage<DeviceStorage<Float32Array>>().buffer;

/** The elementwise reduction of the ranks' arrays (the average divides by the ranks). */
function reduce(datas: readonly Float32Array[], op: ReduceOp): Float32Array {
  const out = Float32Array.from(datas[0]!);
  for (const d of datas.slice(1)) for (let j = 0; j < out.length; j++) out[j] = REDUCERS[op](out[j]!, d[j]!);
  if (op === 'avg') for (let j = 0; j < out.length; j++) out[j] = out[j]! / datas.length;
  return out;
}

/** Writes every rank's results of one round, once the last rank has posted it. */
function complete(calls: readonly Posted[]): void {
  const size = calls.length;
  const kind = calls[0]!.kind;
  if (kind === 'allReduce') {
    calls[0]!.inputs.forEach((_, i) => {
      const result = reduce(
        calls.map((c) => host(c.inputs[i]!)),
        calls[0]!.op,
      );
      for (const c of calls) host(c.inputs[i]!).set(result);
    });
  } else if (kind === 'reduceScatter') {
    const whole = reduce(
      calls.map((c) => host(c.inputs[0]!)),
      calls[0]!.op,
    );
    const block = whole.length / size;
    calls.forEach((c, r) => {
      host(c.outputs[0]!).set(whole.subarray(r * block, (r + 1) * block));
    });
  } else if (kind === 'allGather') {
    const blocks = calls.map((c) => Float32Array.from(host(c.inputs[0]!)));
    for (const c of calls) {
      for (const [r, b] of blocks.entries()) host(c.outputs[0]!).set(b, r * b.length);
    }
  } else if (kind === 'broadcast') {
    const data = Float32Array.from(host(calls[calls[0]!.root]!.inputs[0]!));
    for (const c of calls) host(c.inputs[0]!).set(data);
  }
}

/**
 * Communicators of ranks in one process over cpu backends, for tests that
 * call every rank's collective in turn with no work between: a collective
 * completes, writing every rank's tensors, when the last rank calls it.
 */
export function lockstepGroup(backends: readonly Backend[]): Communicator[] {
  const rounds: Posted[][] = [];
  let next = backends.map(() => 0);
  return backends.map((backend, rank) => {
    const post = (call: Posted): void => {
      const n = next[rank]!++;
      rounds[n] ??= [];
      const calls = rounds[n];
      calls[rank] = call;
      if (calls.filter(Boolean).length === backends.length) complete(calls);
    };
    return {
      rank,
      size: backends.length,
      backend,
      failure: undefined,
      allReduce: (tensors, op = 'sum') =>
        post({ kind: 'allReduce', inputs: tensors, outputs: [], op, root: 0 }),
      reduceScatter: (input, output, op = 'sum') =>
        post({ kind: 'reduceScatter', inputs: [input], outputs: [output], op, root: 0 }),
      allGather: (input, output) =>
        post({ kind: 'allGather', inputs: [input], outputs: [output], op: 'sum', root: 0 }),
      broadcast: (tensor, root = 0) =>
        post({ kind: 'broadcast', inputs: [tensor], outputs: [], op: 'sum', root }),
      joinOverlapped() {},
      markOverlapped: () => undefined,
      barrier: async () => {},
      abort() {
        next = [];
      },
      dispose: async () => {},
    };
  });
}
