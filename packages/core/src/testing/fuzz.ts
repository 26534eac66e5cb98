import type { Backend, RunOptions, Tensor } from '../backend.js';
import { CpuBackend } from '../cpu/backend.js';
import { DTYPES, type DType, type HostArray, toHostArray } from '../dtype.js';
import { RayoError } from '../errors.js';
import { type AnyKernelSpec, inputDecl } from '../kernel.js';
import { KERNELS } from '../kernels/index.js';
import { type Shape, sizeOf } from '../shape.js';
import { VALID_CASES } from './cases/index.js';
import type { AnyConformanceCase, InputSample } from './cases.js';
import { Rng } from './random.js';

export interface FuzzOptions {
  readonly calls: number;
  readonly seed: number;
}

export interface FuzzSummary {
  readonly calls: number;
  /** Calls refused with a RayoError. */
  readonly refused: number;
  /** Mutations that happened to be valid calls (they ran). */
  readonly ran: number;
  /** Kernels the calls covered. */
  readonly kernels: number;
  /** Calls that threw or rejected with anything but a RayoError: `kernel, mutation: error`. */
  readonly failures: readonly string[];
}

/** The smallest valid conformance case of each kernel: cheap calls to mutate. */
function smallestCases(): Map<AnyKernelSpec, AnyConformanceCase> {
  const size = (c: AnyConformanceCase) => c.inputs.reduce((n, s) => n + (s ? sizeOf(s.shape) : 0), 0);
  const smallest = new Map<AnyKernelSpec, AnyConformanceCase>();
  for (const c of VALID_CASES) {
    const known = smallest.get(c.spec);
    if (!known || size(c) < size(known)) smallest.set(c.spec, c);
  }
  return smallest;
}

function values(rng: Rng, sample: InputSample, dtype: DType): HostArray {
  const n = sizeOf(sample.shape);
  const init = sample.init;
  if (typeof init === 'function') return toHostArray(dtype, init(rng, n));
  const [lo, hi] = typeof init === 'object' ? init.int : dtype === 'f32' ? [-1, 1] : [0, 2];
  return toHostArray(
    dtype,
    Array.from({ length: n }, () => (dtype === 'f32' ? rng.uniform(lo, hi) : rng.int(lo, hi))),
  );
}

const BAD_VALUES: readonly unknown[] = [
  Number.NaN,
  Number.POSITIVE_INFINITY,
  -1,
  1e12,
  0.5,
  'text',
  true,
  null,
  {},
  [],
];

/** A call to mutate: the tensors it made (to dispose) and the arguments. */
interface Call {
  inputs: (Tensor | undefined)[];
  attrs: Record<string, unknown>;
  options: RunOptions | undefined;
  readonly made: Tensor[];
  mutation: string;
}

type Mutation = (call: Call, ctx: MutationContext) => void;

interface MutationContext {
  readonly rng: Rng;
  readonly spec: AnyKernelSpec;
  readonly backend: Backend;
  readonly other: Backend;
  readonly pick: <T>(items: readonly T[]) => T;
}

function upload(ctx: MutationContext, on: Backend, shape: Shape, dtype: DType, made: Tensor[]): Tensor {
  const t = on.upload(values(ctx.rng, { shape }, dtype), shape, dtype);
  made.push(t);
  return t;
}

function someInput(call: Call, ctx: MutationContext): number {
  const present = call.inputs.flatMap((t, i) => (t ? [i] : []));
  return present.length > 0 ? ctx.pick(present) : 0;
}

/** Replaces one present input by a fresh tensor of the shape and dtype `change` gives for it. */
function replaceInput(change: (t: Tensor, ctx: MutationContext) => { shape: Shape; dtype: DType }): Mutation {
  return (call, ctx) => {
    const i = someInput(call, ctx);
    const t = call.inputs[i];
    if (!t) return;
    const { shape, dtype } = change(t, ctx);
    call.inputs[i] = upload(ctx, ctx.backend, shape, dtype, call.made);
  };
}

const MUTATIONS: readonly [string, Mutation][] = [
  [
    'a dimension changed',
    replaceInput((t, ctx) => {
      const shape = [...t.shape];
      if (shape.length === 0) shape.push(2);
      else {
        const d = ctx.rng.int(0, shape.length);
        shape[d] = ctx.pick([0, 1, shape[d]! + 1, shape[d]! * 2 + 3]);
      }
      return { shape, dtype: t.dtype };
    }),
  ],
  [
    'the rank changed',
    replaceInput((t, ctx) => ({
      shape: ctx.rng.next() < 0.5 ? [...t.shape, 2] : t.shape.slice(1),
      dtype: t.dtype,
    })),
  ],
  [
    'another dtype',
    replaceInput((t, ctx) => ({ shape: t.shape, dtype: ctx.pick(DTYPES.filter((d) => d !== t.dtype)) })),
  ],
  [
    'a required input missing',
    (call, ctx) => {
      call.inputs[ctx.rng.int(0, Math.max(1, call.inputs.length))] = undefined;
    },
  ],
  [
    'an extra input',
    (call, ctx) => {
      call.inputs.push(upload(ctx, ctx.backend, [3], 'f32', call.made));
    },
  ],
  [
    'a disposed input',
    (call, ctx) => {
      call.inputs[someInput(call, ctx)]?.dispose();
    },
  ],
  [
    "another backend's input",
    (call, ctx) => {
      const i = someInput(call, ctx);
      const t = call.inputs[i];
      if (t) call.inputs[i] = upload(ctx, ctx.other, t.shape, t.dtype, call.made);
    },
  ],
  [
    'not a tensor',
    (call, ctx) => {
      (call.inputs as unknown[])[someInput(call, ctx)] = ctx.pick(BAD_VALUES);
    },
  ],
  [
    'a bad attribute value',
    (call, ctx) => {
      const names = Object.keys(ctx.spec.attributes);
      if (names.length === 0) call.attrs.unknown = 1;
      else call.attrs[ctx.pick(names)] = ctx.pick(BAD_VALUES);
    },
  ],
  [
    'an unknown attribute',
    (call) => {
      call.attrs.notAnAttribute = 1;
    },
  ],
  [
    'a misshapen out',
    (call, ctx) => {
      call.options = { out: [upload(ctx, ctx.backend, [5, 3], 'f32', call.made)] };
    },
  ],
  [
    'an input passed as out',
    (call, ctx) => {
      call.options = { out: [call.inputs[someInput(call, ctx)]] };
    },
  ],
  [
    'a disposed out',
    (call, ctx) => {
      const t = upload(ctx, ctx.backend, [4], 'f32', call.made);
      t.dispose();
      call.options = { out: [t] };
    },
  ],
];

/**
 * Calls every kernel of the backend with random bad arguments — misshapen,
 * mistyped, missing, extra, disposed or foreign tensors, bad attributes, bad
 * outputs — and collects every error that is not a RayoError. The same seed
 * makes the same calls.
 */
export async function fuzzBadCalls(backend: Backend, options: FuzzOptions): Promise<FuzzSummary> {
  const rng = new Rng(options.seed);
  const pick = <T>(items: readonly T[]): T => items[rng.int(0, items.length)]!;
  const other = new CpuBackend();
  const cases = smallestCases();
  const specs = KERNELS.filter((s) => cases.has(s) && backend.supports(s.name));
  const failures: string[] = [];
  const covered = new Set<string>();
  let refused = 0;
  let ran = 0;
  const outcome = (what: string, error: unknown) => {
    if (error instanceof RayoError) refused++;
    else
      failures.push(`${what}: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
  };
  try {
    for (let n = 0; n < options.calls; n++) {
      const spec = specs[n % specs.length]!;
      const c = cases.get(spec)!;
      covered.add(spec.name);
      const ctx: MutationContext = { rng, spec, backend, other, pick };
      const made: Tensor[] = [];
      const call: Call = {
        inputs: c.inputs.map((s, i) => {
          if (!s) return undefined;
          const decl = inputDecl(spec, i)!;
          const dtype = s.dtype ?? decl.dtypes[0]!;
          const t = backend.upload(values(rng, s, dtype), s.shape, dtype);
          made.push(t);
          return t;
        }),
        attrs: { ...(c.attrs ?? {}) },
        options: undefined,
        made,
        mutation: '',
      };
      const [name, mutate] = pick(MUTATIONS);
      const what = `${spec.name} with ${name} (call ${n})`;
      try {
        mutate(call, ctx);
        const outputs = backend.run(spec, call.inputs, call.attrs, call.options);
        ran++;
        // A call that ran must also read back without a foreign error.
        for (const t of outputs)
          if (!call.inputs.includes(t) && !call.options?.out?.includes(t)) made.push(t);
        if (outputs[0]) await outputs[0].read();
      } catch (error) {
        outcome(what, error);
      }
      for (const t of made) t.dispose();
      // Errors the device reports later surface at sync: they must be RayoErrors too.
      if (n % 100 === 99) {
        try {
          await backend.sync();
        } catch (error) {
          outcome(`sync after call ${n}`, error);
        }
      }
    }
  } finally {
    other.dispose();
  }
  return { calls: options.calls, refused, ran, kernels: covered.size, failures };
}
