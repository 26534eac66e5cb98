import type { Backend, Tensor } from '../backend.js';
import { CpuBackend } from '../cpu/backend.js';
import { allocHost, DTYPES, type DType, type HostArray, toHostArray } from '../dtype.js';
import {
  BackendMismatchError,
  DisposedTensorError,
  DTypeError,
  InvalidArgumentError,
  ShapeError,
} from '../errors.js';
import { type AnyKernelSpec, inputDecl, inputName, runReference, type TensorMeta } from '../kernel.js';
import { inferKernel } from '../kernelChecks.js';
import { KERNELS } from '../kernels/index.js';
import { matmul } from '../kernels/matmul.js';
import { sizeOf } from '../shape.js';
import { backendCheck, type ConformanceCheck } from './backendCheck.js';
import { ERROR_CASES, VALID_CASES } from './cases/index.js';
import type { AnyConformanceCase, AnyErrorCase, InputInit, InputSample } from './cases.js';
import { compareOutputs } from './compare.js';
import { type ErrorClass, expectRayoError, fail } from './expect.js';
import { faultContractChecks } from './faultContract.js';
import { halfVariants, mixedDtypeError, runAsDeclared, UnsupportedOnBackend } from './halfCases.js';
import { integerDataChecks } from './integerDataChecks.js';
import { hashString, Rng } from './random.js';
import { replayChecks, writeChecks } from './replay.js';
import { rejectionOf } from './thrown.js';
import { viewChecks } from './viewChecks.js';

export type { ConformanceCheck } from './backendCheck.js';

/**
 * What a valid case's check names as `kernelCase`: the kernel, the variant
 * (its inputs' dtypes, its boolean and string attributes, as the kernel sees
 * them with defaults filled in, what picks a shader, and for the unpoisoned
 * runs the mode; numbers such as shapes and scales are not in it) and the
 * elements of its inputs and outputs (a measure of its work, for a sample
 * that wants the cheapest case of a variant).
 */
function kernelCaseOf(c: AnyConformanceCase, mode: Mode): NonNullable<ConformanceCheck['kernelCase']> {
  const metas = c.inputs.map((s, i) =>
    s ? { shape: s.shape, dtype: s.dtype ?? inputDecl(c.spec, i)!.dtypes[0]! } : undefined,
  );
  const dtypes = metas.map((m) => m?.dtype ?? '-');
  const inferred = inferKernel(c.spec, metas, c.attrs);
  const attrs = Object.entries(inferred.attrs)
    .filter(([, v]) => typeof v === 'boolean' || typeof v === 'string')
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}=${String(v)}`);
  const elements = [...metas, ...inferred.outputs].reduce((n, m) => n + (m ? sizeOf(m.shape) : 0), 0);
  return {
    kernel: c.spec.name,
    variant: [dtypes.join(','), ...attrs, ...(mode === 'poisoned out' ? [] : [mode])].join(' '),
    elements,
  };
}

export interface ConformanceOptions {
  /** Creates the backend under test; called once, lazily. */
  readonly create: () => Backend | Promise<Backend>;
  /**
   * Creates a second backend for cross-backend checks (default: a separate
   * cpu backend instance).
   */
  readonly createOther?: () => Backend | Promise<Backend>;
  /** Seed of every random input (default 0x5eed). */
  readonly seed?: number;
}

export interface ConformanceSuite {
  readonly checks: readonly ConformanceCheck[];
  /** Disposes the backends the suite created. */
  teardown(): Promise<void>;
}

/** What a poisoned output holds before the kernel runs, as stored words: NaN for every float type. */
const POISON: Record<DType, number> = {
  f32: Number.NaN,
  f16: 0x7e00,
  bf16: 0x7fc0,
  i32: -0x7badbeef,
  u32: 0xdeadbeef,
};

function fillValues(rng: Rng, dtype: DType, size: number, init: InputInit | undefined): HostArray {
  if (typeof init === 'function') return toHostArray(dtype, init(rng, size));
  const isInt = dtype === 'i32' || dtype === 'u32';
  const spec =
    init ?? (isInt ? { int: dtype === 'u32' ? ([1, 1000] as const) : ([-100, 100] as const) } : 'uniform');
  // A typed array (`new Array(n)` past a few thousand elements is a slow
  // dictionary in V8); float values are drawn as f32s, which an f32 input
  // is as it stands and a half rounds from by its bits.
  if (typeof spec === 'object') {
    const values = new Float64Array(size);
    for (let i = 0; i < size; i++) values[i] = rng.int(spec.int[0], spec.int[1]);
    return toHostArray(dtype, values);
  }
  const [lo, hi] = spec === 'uniform' ? [-1, 1] : spec === 'positive' ? [0.5, 1.5] : [-8, 8];
  const values = isInt ? new Float64Array(size) : new Float32Array(size);
  for (let i = 0; i < size; i++) {
    const v = rng.uniform(lo, hi);
    // Never an exact zero for floats: it would hide a kernel that skips an element.
    values[i] = v === 0 && !isInt ? 0.375 : v;
  }
  return values instanceof Float32Array && dtype === 'f32' ? values : toHostArray(dtype, values);
}

interface Sampled {
  readonly metas: (TensorMeta | undefined)[];
  readonly data: (HostArray | undefined)[];
}

function sampleInputs(
  spec: AnyKernelSpec,
  samples: readonly (InputSample | undefined)[],
  seed: number,
): Sampled {
  const rng = new Rng(seed);
  const metas: (TensorMeta | undefined)[] = [];
  const data: (HostArray | undefined)[] = [];
  samples.forEach((s, i) => {
    if (!s) {
      metas.push(undefined);
      data.push(undefined);
      return;
    }
    const decl = inputDecl(spec, i)!;
    const dtype = s.dtype ?? decl.dtypes[0]!;
    metas.push({ shape: s.shape, dtype });
    data.push(fillValues(rng, dtype, sizeOf(s.shape), s.init));
  });
  return { metas, data };
}

function upload(backend: Backend, sampled: Sampled): (Tensor | undefined)[] {
  return sampled.metas.map((m, i) => (m ? backend.upload(sampled.data[i]!, m.shape, m.dtype) : undefined));
}

function disposeAll(tensors: readonly (Tensor | undefined)[]): void {
  for (const t of tensors) t?.dispose();
}

function caseName(c: { spec: AnyKernelSpec; label: string }): string {
  return `${c.spec.name} ${c.label}`;
}

type Mode = 'poisoned out' | 'fresh outputs' | 'batch';

async function runValidCase(
  backend: Backend,
  c: AnyConformanceCase,
  seed: number,
  mode: Mode,
): Promise<void> {
  const spec = c.spec;
  const sampled = sampleInputs(spec, c.inputs, seed ^ hashString(caseName(c)));
  const { attrs, outputs: metas } = inferKernel(spec, sampled.metas, c.attrs);
  const expected = runReference(spec, sampled.data, attrs, { inputs: sampled.metas, outputs: metas });
  const inputs = upload(backend, sampled);
  const out =
    mode === 'poisoned out'
      ? metas.map((m) =>
          m.aliasOf === undefined
            ? backend.upload(allocHost(m.dtype, sizeOf(m.shape)).fill(POISON[m.dtype]), m.shape, m.dtype)
            : undefined,
        )
      : undefined;
  const created: Tensor[] = [];
  try {
    let results: Tensor[];
    if (mode === 'batch') {
      const batch = backend.batch();
      results = batch.run(spec, inputs, c.attrs, {});
      await batch.submit();
    } else {
      results = backend.run(spec, inputs, c.attrs, out ? { out } : {});
    }
    if (results.length !== metas.length) fail(`returned ${results.length} outputs, expected ${metas.length}`);
    for (let i = 0; i < metas.length; i++) {
      const m = metas[i]!;
      const t = results[i]!;
      if (m.aliasOf !== undefined) {
        if (t !== inputs[m.aliasOf])
          fail(`output '${m.name}' must be input '${inputName(spec, m.aliasOf)}' (in place)`);
      } else {
        if (out && t !== out[i]) fail(`output '${m.name}' is not the preallocated out[${i}]`);
        if (!out) created.push(t);
        if (t.dtype !== m.dtype || t.shape.join() !== m.shape.join()) {
          fail(`output '${m.name}' is ${t.describe()}, expected ${m.dtype}[${m.shape.join(', ')}]`);
        }
      }
      const mismatch = compareOutputs(m.dtype, await t.read(), expected[i]!, c.tolerance);
      if (mismatch) fail(`output '${m.name}': ${mismatch}`);
    }
    // Inputs that are not written in place must come back unchanged.
    const written = new Set(metas.map((m) => m.aliasOf).filter((a) => a !== undefined));
    for (let i = 0; i < inputs.length; i++) {
      const t = inputs[i];
      if (!t || written.has(i)) continue;
      const mismatch = compareOutputs(t.dtype, await t.read(), sampled.data[i]!, { rtol: 0, atol: 0 });
      if (mismatch) fail(`input '${inputName(spec, i)}' was modified: ${mismatch}`);
    }
  } finally {
    disposeAll(inputs);
    if (out) disposeAll(out);
    disposeAll(created);
  }
}

const ERROR_CLASSES: Record<AnyErrorCase['error'], ErrorClass> = {
  shape: ShapeError,
  dtype: DTypeError,
  argument: InvalidArgumentError,
};

function runErrorCase(backend: Backend, c: AnyErrorCase, seed: number): void {
  const sampled = sampleInputs(c.spec, c.inputs, seed ^ hashString(caseName(c)));
  const inputs = upload(backend, sampled);
  try {
    expectRayoError(
      () => backend.run(c.spec, inputs, c.attrs),
      ERROR_CLASSES[c.error],
      c.spec.name,
      c.argument,
    );
  } finally {
    disposeAll(inputs);
  }
}

/** Wrong dtype, disposed tensor, tensors of two backends and a bad `out`, derived from a valid case. */
function derivedErrorChecks(
  getBackend: () => Promise<Backend>,
  getOther: () => Promise<Backend>,
  c: AnyConformanceCase,
  seed: number,
): ConformanceCheck[] {
  const spec = c.spec;
  const group = spec.family;
  const first = c.inputs.findIndex((s) => s !== undefined);
  const argument = inputName(spec, first);
  const sampledFor = () => sampleInputs(spec, c.inputs, seed ^ hashString(caseName(c)));
  const checks: ConformanceCheck[] = [];
  const decl = inputDecl(spec, first)!;
  const wrong =
    (['i32', 'f32', 'f16'] as DType[]).find((d) => !decl.dtypes.includes(d)) ??
    DTYPES.find((d) => !decl.dtypes.includes(d));
  if (wrong) {
    checks.push({
      name: `${spec.name} rejects ${wrong} '${argument}'`,
      group,
      async run() {
        const backend = await getBackend();
        const sampled = sampledFor();
        const inputs = upload(backend, sampled);
        const shape = sampled.metas[first]!.shape;
        inputs[first]?.dispose();
        inputs[first] = backend.upload(toHostArray(wrong, new Array(sizeOf(shape)).fill(1)), shape, wrong);
        try {
          expectRayoError(() => backend.run(spec, inputs, c.attrs), DTypeError, spec.name, argument);
        } finally {
          disposeAll(inputs);
        }
      },
    });
  }
  checks.push(
    {
      name: `${spec.name} rejects a disposed '${argument}'`,
      group,
      async run() {
        const backend = await getBackend();
        const inputs = upload(backend, sampledFor());
        inputs[first]!.dispose();
        try {
          expectRayoError(() => backend.run(spec, inputs, c.attrs), DisposedTensorError, spec.name, argument);
        } finally {
          disposeAll(inputs);
        }
      },
    },
    {
      name: `${spec.name} rejects '${argument}' from another backend`,
      group,
      async run() {
        const backend = await getBackend();
        const other = await getOther();
        const sampled = sampledFor();
        const inputs = upload(backend, sampled);
        const meta = sampled.metas[first]!;
        inputs[first]!.dispose();
        inputs[first] = other.upload(sampled.data[first]!, meta.shape, meta.dtype);
        try {
          expectRayoError(
            () => backend.run(spec, inputs, c.attrs),
            BackendMismatchError,
            spec.name,
            argument,
          );
        } finally {
          disposeAll(inputs);
        }
      },
    },
  );
  const sampledMetas = sampledFor().metas;
  const metas = inferKernel(spec, sampledMetas, c.attrs).outputs;
  const target = metas.findIndex((m) => m.aliasOf === undefined);
  if (target >= 0) {
    // One wrong out[target]: `wrongOut` makes it on the backend, with what the check must dispose.
    const rejectsOut = (
      what: string,
      errorClass: ErrorClass,
      wrongOut: (backend: Backend, inputs: (Tensor | undefined)[]) => { out: Tensor; owned: Tensor[] },
    ): ConformanceCheck => ({
      name: `${spec.name} rejects ${what} out[${target}]`,
      group,
      async run() {
        const backend = await getBackend();
        const inputs = upload(backend, sampledFor());
        const { out: wrong, owned } = wrongOut(backend, inputs);
        const out = metas.map((_, i) => (i === target ? wrong : undefined));
        try {
          expectRayoError(
            () => backend.run(spec, inputs, c.attrs, { out }),
            errorClass,
            spec.name,
            `out[${target}]`,
          );
        } finally {
          disposeAll([...inputs, ...owned]);
        }
      },
    });
    checks.push(
      rejectsOut('a misshapen', ShapeError, (backend) => {
        const m = metas[target]!;
        const bad = backend.empty([sizeOf(m.shape) + 1], m.dtype);
        return { out: bad, owned: [bad] };
      }),
      rejectsOut('an input passed as', InvalidArgumentError, (_backend, inputs) => ({
        out: inputs[first]!,
        owned: [],
      })),
    );
  }
  return checks;
}

function apiChecks(getBackend: () => Promise<Backend>): ConformanceCheck[] {
  const check = backendCheck('api', getBackend);
  return [
    check('upload and read round-trip every integer and float type', async (backend) => {
      for (const dtype of ['f32', 'i32', 'u32'] as DType[]) {
        const values = toHostArray(dtype, [1, 2, 3, 5, 7, 11, 13]);
        using t = backend.upload(values, [7], dtype);
        const mismatch = compareOutputs(dtype, await t.read(), values, { rtol: 0, atol: 0 });
        if (mismatch) fail(`${dtype}: ${mismatch}`);
      }
    }),
    check('upload rejects data whose length does not match the shape', async (backend) => {
      expectRayoError(() => backend.upload([1, 2, 3], [2, 2]), ShapeError, 'upload', 'data');
    }),
    check('zeros are zeros and empty has the asked shape', async (backend) => {
      using z = backend.zeros([3, 67]);
      const data = await z.read();
      if (data.length !== 201 || data.some((v) => v !== 0)) fail('zeros([3, 67]) is not 201 zeros');
      using e = backend.empty([5, 1], 'i32');
      if (e.shape.join() !== '5,1' || e.dtype !== 'i32') fail(`empty gave ${e.describe()}`);
    }),
    check('copy is a device-side copy into a new or a given tensor', async (backend) => {
      const values = toHostArray('f32', [0.5, -1.25, 3, 4.5, 9]);
      using src = backend.upload(values, [5]);
      using fresh = backend.copy(src);
      using dst = backend.zeros([5]);
      const same = backend.copy(src, dst);
      if (same !== dst) fail('copy(src, dst) did not return dst');
      for (const t of [fresh, dst]) {
        const mismatch = compareOutputs('f32', await t.read(), values, { rtol: 0, atol: 0 });
        if (mismatch) fail(mismatch);
      }
    }),
    check('read of a disposed tensor is rejected', async (backend) => {
      const t = backend.upload([1, 2], [2]);
      t.dispose();
      const caught = await rejectionOf(() => t.read());
      if (!(caught instanceof DisposedTensorError))
        fail(`expected DisposedTensorError, got ${String(caught)}`);
    }),
    check('memory statistics follow allocation and dispose', async (backend) => {
      const before = backend.memory();
      const t = backend.upload(new Float32Array(1000).fill(1), [1000]);
      const during = backend.memory();
      if (during.liveTensors !== before.liveTensors + 1)
        fail(`liveTensors ${before.liveTensors} → ${during.liveTensors}`);
      if (during.liveBytes < before.liveBytes + 4000)
        fail(`liveBytes ${before.liveBytes} → ${during.liveBytes}`);
      t.dispose();
      t.dispose(); // idempotent
      const after = backend.memory();
      if (after.liveTensors !== before.liveTensors || after.liveBytes !== before.liveBytes) {
        fail(`after dispose: ${JSON.stringify(after)}, before: ${JSON.stringify(before)}`);
      }
    }),
    check('a batch runs dependent kernels in order and replays on a second submit', async (backend) => {
      const rng = new Rng(7);
      const av = fillValues(rng, 'f32', 13 * 7, 'uniform');
      const bv = fillValues(rng, 'f32', 7 * 5, 'uniform');
      using a = backend.upload(av, [13, 7]);
      using b = backend.upload(bv, [7, 5]);
      const batch = backend.batch();
      const [ab] = batch.run(matmul, [a, b]);
      const [abb] = batch.run(matmul, [ab!, ab!], { transA: true });
      if (batch.size !== 2) fail(`batch.size is ${batch.size}, expected 2`);
      await batch.submit();
      const io = inferKernel(matmul, [
        { shape: [13, 7], dtype: 'f32' },
        { shape: [7, 5], dtype: 'f32' },
      ]);
      const ref = runReference(matmul, [av, bv], io.attrs, { inputs: [], outputs: io.outputs })[0]!;
      const io2 = inferKernel(matmul, [ab!, ab!], { transA: true });
      const ref2 = runReference(matmul, [ref, ref], io2.attrs, {
        inputs: [ab!, ab!],
        outputs: io2.outputs,
      })[0]!;
      let mismatch = compareOutputs('f32', await abb!.read(), ref2, { rtol: 1e-4, atol: 1e-4 });
      if (mismatch) fail(mismatch);
      await batch.submit();
      mismatch = compareOutputs('f32', await abb!.read(), ref2, { rtol: 1e-4, atol: 1e-4 });
      if (mismatch) fail(`after replay: ${mismatch}`);
      ab!.dispose();
      abb!.dispose();
    }),
    check('weight cache: upload once, products at M = 1, 4, 67, counts and errors', async (backend) => {
      const cache = backend.createWeightCache();
      try {
        const rng = new Rng(11);
        const [n, k] = [37, 67];
        const w = fillValues(rng, 'f32', n * k, 'uniform') as Float32Array;
        cache.upload('proj', w, [n, k]);
        cache.upload('other', fillValues(rng, 'f32', 3 * 4, 'uniform'), [3, 4]);
        if (cache.weightCount !== 2) fail(`weightCount ${cache.weightCount}, expected 2`);
        if (cache.weightBytes !== (n * k + 12) * 4)
          fail(`weightBytes ${cache.weightBytes}, expected ${(n * k + 12) * 4}`);
        for (const m of [1, 4, 67]) {
          const x = fillValues(rng, 'f32', m * k, 'uniform') as Float32Array;
          const io = inferKernel(
            matmul,
            [
              { shape: [m, k], dtype: 'f32' },
              { shape: [n, k], dtype: 'f32' },
            ],
            {
              alpha: 0.5,
              transB: true,
            },
          );
          const ref = runReference(matmul, [x, w], io.attrs, { inputs: [], outputs: io.outputs })[0]!;
          const host = await cache.matmulHost('proj', x, m, { alpha: 0.5 });
          let mismatch = compareOutputs('f32', host, ref, { rtol: 1e-4, atol: 1e-4 });
          if (mismatch) fail(`matmulHost M=${m}: ${mismatch}`);
          using xt = backend.upload(x, [m, k]);
          using y = cache.matmul('proj', xt, { alpha: 0.5 });
          mismatch = compareOutputs('f32', await y.read(), ref, { rtol: 1e-4, atol: 1e-4 });
          if (mismatch) fail(`matmul M=${m}: ${mismatch}`);
        }
        if (!cache.delete('other') || cache.has('other') || (cache.weightCount as number) !== 1)
          fail('delete did not remove the weight');
        const caught = await rejectionOf(() => cache.matmulHost('missing', new Float32Array(k), 1));
        if (!(caught instanceof InvalidArgumentError) || caught.argument !== 'name') {
          fail(`a missing weight must be an InvalidArgumentError naming 'name', got ${String(caught)}`);
        }
      } finally {
        cache.dispose();
      }
    }),
  ];
}

/**
 * The conformance suite: framework-agnostic checks that a backend implements
 * every kernel spec like the reference does, rejects bad input with the right
 * errors, and honours the Backend contract. Every backend runs the same suite.
 */
export function conformanceSuite(options: ConformanceOptions): ConformanceSuite {
  const seed = options.seed ?? 0x5eed;
  let backend: Promise<Backend> | undefined;
  let other: Promise<Backend> | undefined;
  const getBackend = () => {
    backend ??= Promise.resolve(options.create());
    return backend;
  };
  const getOther = () => {
    other ??= Promise.resolve(options.createOther ? options.createOther() : new CpuBackend());
    return other;
  };

  const checks: ConformanceCheck[] = [
    ...apiChecks(getBackend),
    ...faultContractChecks(getBackend),
    ...viewChecks(getBackend),
    ...integerDataChecks(getBackend),
    ...writeChecks(getBackend, getOther),
    ...replayChecks(getBackend),
  ];
  for (const spec of KERNELS) {
    const valid = VALID_CASES.filter((c) => c.spec === spec);
    const errors = ERROR_CASES.filter((c) => c.spec === spec);
    checks.push({
      name: `${spec.name} is implemented and has conformance cases`,
      group: 'coverage',
      async run() {
        if (!(await getBackend()).supports(spec.name))
          fail(`backend does not implement kernel '${spec.name}'`);
        if (valid.length === 0) fail(`kernel '${spec.name}' has no conformance cases`);
      },
    });
    const runCase = async (c: AnyConformanceCase, mode: Mode) => {
      const backend = await getBackend();
      await runAsDeclared(backend, c, () => runValidCase(backend, c, seed, mode));
    };
    valid.forEach((c, i) => {
      const modes: Mode[] = i === 0 ? ['poisoned out', 'fresh outputs', 'batch'] : ['poisoned out'];
      for (const mode of modes) {
        checks.push({
          name: `${caseName(c)}${mode === 'poisoned out' ? '' : ` (${mode})`}`,
          group: spec.family,
          kernelCase: kernelCaseOf(c, mode),
          run: () => runCase(c, mode),
        });
      }
    });
    for (const half of valid.flatMap(halfVariants)) {
      checks.push({
        name: caseName(half),
        group: spec.family,
        kernelCase: kernelCaseOf(half, 'poisoned out'),
        run: () => runCase(half, 'poisoned out'),
      });
    }
    const mixed = valid[0] && mixedDtypeError(valid[0]);
    for (const c of mixed ? [...errors, mixed] : errors) {
      checks.push({
        name: `${spec.name} rejects ${c.label}`,
        group: spec.family,
        run: async () => runErrorCase(await getBackend(), c, seed),
      });
    }
    if (valid[0]) checks.push(...derivedErrorChecks(getBackend, getOther, valid[0], seed));
  }
  const known = new Set(KERNELS);
  for (const c of [...VALID_CASES, ...ERROR_CASES]) {
    if (!known.has(c.spec)) {
      checks.push({
        name: `case '${caseName(c)}' belongs to a registered kernel`,
        group: 'coverage',
        run: async () => fail(`kernel '${c.spec.name}' has cases but is not in KERNELS`),
      });
    }
  }

  return {
    checks,
    async teardown() {
      if (backend) (await backend).dispose();
      if (other) (await other).dispose();
    },
  };
}

export interface RunSummary {
  readonly passed: number;
  readonly failed: number;
  /** Checks of dtypes the backend declares it does not run, whose calls it refused as declared. */
  readonly unsupported: number;
  readonly failures: readonly { readonly name: string; readonly message: string }[];
}

/** Runs checks one after another, reporting each through `onResult`. */
export async function runChecks(
  checks: readonly ConformanceCheck[],
  onResult?: (check: ConformanceCheck, error: unknown | undefined) => void,
): Promise<RunSummary> {
  let passed = 0;
  let unsupported = 0;
  const failures: { name: string; message: string }[] = [];
  for (const check of checks) {
    let error: unknown;
    try {
      await check.run();
      passed++;
    } catch (e) {
      error = e ?? new Error('failed');
      if (error instanceof UnsupportedOnBackend) unsupported++;
      else
        failures.push({ name: check.name, message: error instanceof Error ? error.message : String(error) });
    }
    onResult?.(check, error);
  }
  return { passed, failed: failures.length, unsupported, failures };
}
