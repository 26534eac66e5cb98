import type { Backend, Tensor } from '../backend.js';
import { type DType, type HostArray, toHostArray } from '../dtype.js';
import { BackendMismatchError, DisposedTensorError, DTypeError, ShapeError } from '../errors.js';
import { type AnyKernelSpec, type AttrValues, runReference, type TensorMeta } from '../kernel.js';
import { inferKernel } from '../kernelChecks.js';
import { incrementalAttention, kvCacheScatter, ropeKvScatter } from '../kernels/decoding.js';
import { updateLossScale } from '../kernels/lossScaling.js';
import { copy } from '../kernels/memory.js';
import { adamwStep, globalNorm, multiTensorAdamw } from '../kernels/optimizer.js';
import { pagedAttention, ropePagedKvWrite } from '../kernels/pagedAttention.js';
import { rope } from '../kernels/rope.js';
import { backendCheck, type ConformanceCheck } from './backendCheck.js';
import { compareOutputs } from './compare.js';
import { expectRayoError, fail } from './expect.js';
import { distinctInts, Rng } from './random.js';
import { ropeTolerance } from './ropeInputs.js';

/** Random values in [-1, 1), never an exact zero. */
function randomF32(rng: Rng, size: number): Float32Array {
  return Float32Array.from({ length: size }, () => rng.uniform(-1, 1) || 0.375);
}

/** Two different random contents of one 67-element tensor, drawn from `seed`. */
function twoContents(seed: number): [first: Float32Array, second: Float32Array] {
  const rng = new Rng(seed);
  return [randomF32(rng, 67), randomF32(rng, 67)];
}

function reference(
  spec: AnyKernelSpec,
  data: readonly (HostArray | undefined)[],
  metas: readonly (TensorMeta | undefined)[],
  attrs: AttrValues = {},
): HostArray[] {
  const io = inferKernel(spec, metas, attrs);
  return runReference(spec, data, io.attrs, { inputs: metas, outputs: io.outputs });
}

async function expectContents(
  what: string,
  tensor: Tensor,
  expected: HostArray,
  tolerance = { rtol: 0, atol: 0 },
): Promise<void> {
  const mismatch = compareOutputs(tensor.dtype, await tensor.read(), expected, tolerance);
  if (mismatch) fail(`${what}: ${mismatch}`);
}

/** `Backend.write`: contents, ordering with the backend's work, and its errors. */
export function writeChecks(
  getBackend: () => Promise<Backend>,
  getOther: () => Promise<Backend>,
): ConformanceCheck[] {
  const check = backendCheck('api', getBackend);
  return [
    check('write replaces a tensor’s contents for every integer and float type', async (backend) => {
      for (const dtype of ['f32', 'i32', 'u32'] as DType[]) {
        using t = backend.upload(toHostArray(dtype, [9, 8, 7, 6, 5, 4, 3]), [7], dtype);
        const values = toHostArray(dtype, [1, 2, 3, 5, 7, 11, 13]);
        backend.write(t, values);
        // The data is taken at the call: changing the array afterwards changes nothing.
        values.fill(99);
        await expectContents(`${dtype} from a typed array`, t, toHostArray(dtype, [1, 2, 3, 5, 7, 11, 13]));
        backend.write(t, [2, 4, 6, 8, 10, 12, 14]);
        await expectContents(`${dtype} from numbers`, t, toHostArray(dtype, [2, 4, 6, 8, 10, 12, 14]));
      }
    }),
    check(
      'write is ordered after the work submitted before it and before the work after it',
      async (backend) => {
        const [first, second] = twoContents(23);
        using x = backend.upload(first, [67]);
        const [before] = backend.run(copy, [x]);
        backend.write(x, second);
        const [after] = backend.run(copy, [x]);
        const batch = backend.batch();
        const [replayed] = batch.run(copy, [x]);
        await batch.submit();
        backend.write(x, first);
        await batch.submit();
        backend.write(x, second);
        try {
          await expectContents('a copy run before the write', before!, first);
          await expectContents('a copy run after the write', after!, second);
          await expectContents('a batch submitted between two writes', replayed!, first);
          await expectContents('the tensor after the last write', x, second);
        } finally {
          before!.dispose();
          after!.dispose();
          replayed!.dispose();
        }
      },
    ),
    check(
      'a batch is enqueued when submit() is called: reads, writes and copies issued before it settles come after it',
      async (backend) => {
        const [first, second] = twoContents(29);
        using x = backend.upload(first, [67]);
        using y = backend.zeros([67]);
        using z = backend.zeros([67]);
        const batch = backend.batch();
        batch.run(copy, [x], {}, { out: [y] });
        try {
          // Twice: the first submit records (a CUDA graph, bind groups), the second replays.
          for (const [written, next] of [
            [first, second],
            [second, first],
          ] as const) {
            backend.write(x, written);
            const submitted = batch.submit();
            const read = y.read();
            // Both after the batch: the write must not reach the copy the batch makes.
            backend.write(x, next);
            backend.copy(y, z);
            const [, seen] = await Promise.all([submitted, read]);
            const mismatch = compareOutputs('f32', seen, written, { rtol: 0, atol: 0 });
            if (mismatch) fail(`a read issued right after submit(): ${mismatch}`);
            await expectContents('a copy issued right after submit()', z, written);
            await expectContents('a write issued right after submit()', x, next);
          }
        } finally {
          batch.dispose();
        }
      },
    ),
    check(
      'write rejects data of the wrong length or type, a disposed tensor and another backend’s',
      async (backend) => {
        using t = backend.upload([1, 2, 3, 4], [2, 2]);
        expectRayoError(() => backend.write(t, [1, 2, 3]), ShapeError, 'write', 'data');
        expectRayoError(() => backend.write(t, new Int32Array(4)), DTypeError, 'write', 'data');
        const gone = backend.upload([1, 2], [2]);
        gone.dispose();
        expectRayoError(() => backend.write(gone, [3, 4]), DisposedTensorError, 'write', 'tensor');
        using foreign = (await getOther()).upload([1, 2], [2]);
        expectRayoError(() => backend.write(foreign, [3, 4]), BackendMismatchError, 'write', 'tensor');
        await expectContents('the tensor after rejected writes', t, toHostArray('f32', [1, 2, 3, 4]));
      },
    ),
  ];
}

/**
 * The replay contract: a decode step recorded once into a batch reads its
 * position and attended length from device tensors, so after `write`s of new
 * values (and of new inputs into the same tensors) a second submit computes
 * the step for those values.
 */
export function replayChecks(getBackend: () => Promise<Backend>): ConformanceCheck[] {
  const checks: readonly [name: string, replay: (backend: Backend) => Promise<void>][] = [
    [
      'a decode step recorded once replays with new positions, lengths and inputs written between submits',
      replayDecodeStep,
    ],
    ['ropeKvScatter recorded once replays at new device positions', replayRopeKvScatter],
    [
      'a batched paged decode step recorded once replays with new slots, positions, block tables and lengths',
      replayPagedStep,
    ],
    ['adamwStep recorded once replays at new device steps and learning rates', replayAdamw],
    [
      'globalNorm and multiTensorAdamw recorded once replay at new steps, learning rates and gradients, clipped or not',
      replayMultiTensorAdamw,
    ],
    [
      'a loss-scaled update (globalNorm, multiTensorAdamw with lossScale, updateLossScale) recorded once skips and rescales on the device',
      replayLossScaledUpdate,
    ],
  ];
  return checks.map(([name, replay]) => ({
    name,
    group: 'replay',
    run: async () => replay(await getBackend()),
  }));
}

/**
 * Fresh random AdamW quads (param, grad, m, v ≥ 0) of `shapes` on `backend`,
 * their host copies, and the gradients among them.
 */
function adamwQuads(backend: Backend, rng: Rng, shapes: readonly number[][]) {
  const sizes = shapes.map((s) => s.reduce((a, b) => a * b, 1));
  const metas = shapes.map((shape): TensorMeta => ({ shape, dtype: 'f32' }));
  const host = sizes.map((n) => [
    randomF32(rng, n),
    randomF32(rng, n),
    randomF32(rng, n),
    randomF32(rng, n).map(Math.abs),
  ]);
  const tensors = host.flatMap((four, j) => four.map((data) => backend.upload(data, shapes[j]!)));
  const grads = tensors.filter((_, i) => i % 4 === 1);
  return { sizes, metas, host, tensors, grads };
}

/**
 * Checks each quad's param, m and v on the device against `expected` (3 per
 * quad), then carries the device's state into `host` with this step's
 * gradients `g`: the next step starts from it, so that rounding does not compound.
 */
async function expectQuadsAndCarry(
  at: string,
  tensors: readonly Tensor[],
  expected: readonly HostArray[],
  tolerance: { rtol: number; atol: number },
  host: Float32Array[][],
  g: readonly Float32Array[],
): Promise<void> {
  for (let j = 0; j < host.length; j++) {
    const [param, , m, v] = tensors.slice(4 * j, 4 * j + 4);
    await expectContents(`${at}: param[${j}]`, param!, expected[3 * j]!, tolerance);
    await expectContents(`${at}: m[${j}]`, m!, expected[3 * j + 1]!, tolerance);
    await expectContents(`${at}: v[${j}]`, v!, expected[3 * j + 2]!, tolerance);
    host[j] = [await param!.read(), g[j]!, await m!.read(), await v!.read()] as Float32Array[];
  }
}

async function replayMultiTensorAdamw(backend: Backend): Promise<void> {
  const shapes = [[1031], [7, 13], [1], [4097]];
  const rng = new Rng(0x3a17);
  const { sizes, metas, host, tensors, grads } = adamwQuads(backend, rng, shapes);
  const attrs = { beta1: 0.8, beta2: 0.99, weightDecay: [0.1, 0, 0.5, 0], maxNorm: 2 };
  const stepT = backend.upload(Int32Array.of(1), [1], 'i32');
  const lrT = backend.upload(Float32Array.of(0.05), [1]);
  const owned = [...tensors, stepT, lrT];
  try {
    const batch = backend.batch();
    const [norm] = batch.run(globalNorm, grads);
    owned.push(norm!);
    batch.run(multiTensorAdamw, [stepT, lrT, norm, undefined, ...tensors], attrs);
    // The gradients' scale decides whether the clip acts: their norm is about 42·scale against maxNorm 2.
    for (const [step, lr, scale] of [
      [1, 0.05, 1],
      [2, 0.02, 0.01],
      [3, 0.003, 3],
      [1000, 0.05, 0.03],
      [4, 0, 1],
    ] as const) {
      const g = sizes.map((n) => randomF32(rng, n).map((x) => x * scale));
      for (const [j, t] of grads.entries()) backend.write(t, g[j]!);
      backend.write(stepT, [step]);
      backend.write(lrT, [lr]);
      await batch.submit();
      const at = `step ${step}, lr ${lr}, gradients ×${scale}`;
      const expectedNorm = reference(globalNorm, g, metas)[0]!;
      await expectContents(`${at}: norm`, norm!, expectedNorm, { rtol: 1e-5, atol: 1e-7 });
      const one: TensorMeta = { shape: [1], dtype: 'f32' };
      const expected = reference(
        multiTensorAdamw,
        [
          Int32Array.of(step),
          Float32Array.of(lr),
          await norm!.read(),
          undefined,
          ...host.flatMap((four, j) => [four[0]!, g[j]!, four[2]!, four[3]!]),
        ],
        [
          { shape: [1], dtype: 'i32' },
          one,
          { shape: [], dtype: 'f32' },
          undefined,
          ...metas.flatMap((m) => [m, m, m, m]),
        ],
        attrs,
      );
      const tolerance = { rtol: 1e-5, atol: 1e-6 };
      await expectQuadsAndCarry(at, tensors, expected, tolerance, host, g);
    }
  } finally {
    for (const t of owned) t.dispose();
  }
}

/**
 * One loss-scaled update recorded once and replayed with finite, inf and NaN
 * gradients: each replay must match the reference from the device's own
 * state (a skipped one leaves param, m and v bit for bit), and the scale,
 * count and step number move on the device alone.
 */
async function replayLossScaledUpdate(backend: Backend): Promise<void> {
  const shapes = [[1031], [7, 13]];
  const rng = new Rng(0x5ca1e);
  const { sizes, metas, host, tensors, grads } = adamwQuads(backend, rng, shapes);
  const attrs = { beta1: 0.8, beta2: 0.99, weightDecay: [0.1], maxNorm: 2 };
  const scaleAttrs = { growthFactor: 2, backoffFactor: 0.5, growthInterval: 2 };
  const stepT = backend.upload(Int32Array.of(1), [1], 'i32');
  const lrT = backend.upload(Float32Array.of(0.05), [1]);
  const scaleT = backend.upload(Float32Array.of(1024), [1]);
  const growthT = backend.upload(Int32Array.of(0), [1], 'i32');
  const owned = [...tensors, stepT, lrT, scaleT, growthT];
  try {
    const batch = backend.batch();
    const [norm] = batch.run(globalNorm, grads);
    owned.push(norm!);
    batch.run(multiTensorAdamw, [stepT, lrT, norm, scaleT, ...tensors], attrs);
    batch.run(updateLossScale, [norm!, scaleT, growthT, stepT], scaleAttrs);
    let [scale, growth, step] = [1024, 0, 1];
    const i32: TensorMeta = { shape: [1], dtype: 'i32' };
    const one: TensorMeta = { shape: [1], dtype: 'f32' };
    for (const bad of [undefined, Number.POSITIVE_INFINITY, undefined, Number.NaN, undefined, undefined]) {
      const g = sizes.map((n, j) => {
        const values = randomF32(rng, n).map((x) => x * scale);
        if (bad !== undefined && j === 1) values[n >> 1] = bad;
        return values;
      });
      for (const [j, t] of grads.entries()) backend.write(t, g[j]!);
      await batch.submit();
      const at = `step ${step}, scale ${scale}, ${bad === undefined ? 'finite' : String(bad)} gradients`;
      const normValue = await norm!.read();
      const expected = reference(
        multiTensorAdamw,
        [
          Int32Array.of(step),
          Float32Array.of(0.05),
          normValue,
          Float32Array.of(scale),
          ...host.flatMap((four, j) => [four[0]!, g[j]!, four[2]!, four[3]!]),
        ],
        [i32, one, { shape: [], dtype: 'f32' }, one, ...metas.flatMap((m) => [m, m, m, m])],
        attrs,
      );
      const tolerance = bad === undefined ? { rtol: 1e-5, atol: 1e-6 } : { rtol: 0, atol: 0 };
      await expectQuadsAndCarry(at, tensors, expected, tolerance, host, g);
      const [nextScale, nextGrowth, nextStep] = reference(
        updateLossScale,
        [normValue, Float32Array.of(scale), Int32Array.of(growth), Int32Array.of(step)],
        [{ shape: [], dtype: 'f32' }, one, i32, i32],
        scaleAttrs,
      );
      const exact = { rtol: 0, atol: 0 };
      await expectContents(`${at}: scale`, scaleT, nextScale!, exact);
      await expectContents(`${at}: growth`, growthT, nextGrowth!, exact);
      await expectContents(`${at}: step`, stepT, nextStep!, exact);
      [scale, growth, step] = [nextScale![0]!, nextGrowth![0]!, nextStep![0]!];
    }
    // inf and NaN halved 1024 twice; the two finite steps in a row at the end doubled it; four steps taken.
    if (scale !== 512 || step !== 5)
      fail(`after six replays: scale ${scale} (expected 512), step ${step} (expected 5)`);
  } finally {
    for (const t of owned) t.dispose();
  }
}

async function replayAdamw(backend: Backend): Promise<void> {
  // 1031: a vector body and a scalar tail on every backend.
  const n = 1031;
  const rng = new Rng(0xada3);
  const meta: TensorMeta = { shape: [n], dtype: 'f32' };
  const attrs = { beta1: 0.8, beta2: 0.99, weightDecay: 0.1 };
  let host = [randomF32(rng, n), randomF32(rng, n), randomF32(rng, n), randomF32(rng, n).map(Math.abs)];
  const tensors = host.map((data) => backend.upload(data, [n]));
  const stepT = backend.upload(Int32Array.of(1), [1], 'i32');
  const lrT = backend.upload(Float32Array.of(0.05), [1]);
  const [param, grad, m, v] = tensors as [Tensor, Tensor, Tensor, Tensor];
  try {
    const batch = backend.batch();
    batch.run(adamwStep, [param, grad, m, v, stepT, lrT], attrs);
    // Steps out of order and a schedule's learning rates: each replay reads what was written last.
    for (const [step, lr] of [
      [1, 0.05],
      [2, 0.02],
      [3, 0.003],
      [1000, 0.05],
      [4, 0],
    ] as const) {
      const g = randomF32(rng, n);
      backend.write(grad, g);
      backend.write(stepT, [step]);
      backend.write(lrT, [lr]);
      await batch.submit();
      const expected = reference(
        adamwStep,
        [host[0], g, host[2], host[3], Int32Array.of(step), Float32Array.of(lr)],
        [meta, meta, meta, meta, { shape: [1], dtype: 'i32' }, { shape: [1], dtype: 'f32' }],
        attrs,
      );
      const at = `step ${step}, lr ${lr}`;
      const tolerance = { rtol: 1e-5, atol: 1e-6 };
      await expectContents(`${at}: param`, param, expected[0]!, tolerance);
      await expectContents(`${at}: m`, m, expected[1]!, tolerance);
      await expectContents(`${at}: v`, v, expected[2]!, tolerance);
      // The next step starts from the device's state, so that rounding does not compound.
      host = [await param.read(), g, await m.read(), await v.read()] as Float32Array[];
    }
  } finally {
    for (const t of [...tensors, stepT, lrT]) t.dispose();
  }
}

const ATTENTION_TOLERANCE = { rtol: 1e-4, atol: 1e-5 } as const;

async function replayDecodeStep(backend: Backend): Promise<void> {
  // Odd sizes: 6 query heads over 2 kv heads of 10, a cache of 37 rows.
  const [nHeads, nKvHeads, headDim, maxSeq] = [6, 2, 10, 37];
  const width = nKvHeads * headDim;
  const rng = new Rng(0x5e91a7);
  const f32 = (shape: readonly number[]): TensorMeta => ({ shape, dtype: 'f32' });
  const one: TensorMeta = { shape: [1], dtype: 'i32' };
  const cacheMeta = f32([nKvHeads, maxSeq, headDim]);

  let kHost: HostArray = randomF32(rng, nKvHeads * maxSeq * headDim);
  let vHost: HostArray = randomF32(rng, nKvHeads * maxSeq * headDim);
  let qHost = randomF32(rng, nHeads * headDim);
  let kHeadsHost = randomF32(rng, width);
  let kRowHost = randomF32(rng, width);
  let vRowHost = randomF32(rng, width);
  let qAttnHost = randomF32(rng, nHeads * headDim);
  const tensors: Tensor[] = [];
  const keep = (t: Tensor) => {
    tensors.push(t);
    return t;
  };
  try {
    const kCache = keep(backend.upload(kHost, cacheMeta.shape));
    const vCache = keep(backend.upload(vHost, cacheMeta.shape));
    const q = keep(backend.upload(qHost, [1, nHeads, headDim]));
    const kHeads = keep(backend.upload(kHeadsHost, [1, nKvHeads, headDim]));
    const kRow = keep(backend.upload(kRowHost, [width]));
    const vRow = keep(backend.upload(vRowHost, [1, width]));
    const qAttn = keep(backend.upload(qAttnHost, [nHeads, headDim]));
    let position = 5;
    const positionT = keep(backend.upload(Int32Array.of(position), [1], 'i32'));
    const seqLenT = keep(backend.upload(Int32Array.of(position + 1), [1], 'i32'));

    const batch = backend.batch();
    const [qRot] = batch.run(rope, [q, positionT]);
    const [kRot] = batch.run(rope, [kHeads, positionT], { layout: 'interleaved', theta: 500000 });
    batch.run(kvCacheScatter, [kCache, kRow, positionT]);
    batch.run(kvCacheScatter, [vCache, vRow, positionT]);
    const [attention] = batch.run(incrementalAttention, [qAttn, kCache, vCache, seqLenT]);
    keep(qRot!);
    keep(kRot!);
    keep(attention!);
    if (batch.size !== 5) fail(`batch.size is ${batch.size}, expected 5`);

    // The first submit runs the recorded values; then positions move on, jump
    // back to row 0 (a length of 1) and to the last row (the full cache).
    for (const [step, next] of [5, 6, 7, 0, 36, 19, 36].entries()) {
      if (step > 0) {
        position = next;
        qHost = randomF32(rng, qHost.length);
        kHeadsHost = randomF32(rng, width);
        kRowHost = randomF32(rng, width);
        vRowHost = randomF32(rng, width);
        qAttnHost = randomF32(rng, qAttnHost.length);
        backend.write(q, qHost);
        backend.write(kHeads, kHeadsHost);
        backend.write(kRow, kRowHost);
        backend.write(vRow, vRowHost);
        backend.write(qAttn, qAttnHost);
        backend.write(positionT, [position]);
        backend.write(seqLenT, Int32Array.of(position + 1));
      }
      // Poisoned outputs: a replay that skips a kernel leaves NaN behind.
      for (const t of [qRot!, kRot!, attention!]) backend.write(t, new Float32Array(t.size).fill(Number.NaN));
      await batch.submit();

      const p = Int32Array.of(position);
      const len = Int32Array.of(position + 1);
      const qExpected = reference(rope, [qHost, p], [f32(q.shape), one])[0]!;
      const kExpected = reference(rope, [kHeadsHost, p], [f32(kHeads.shape), one], {
        layout: 'interleaved',
        theta: 500000,
      })[0]!;
      kHost = reference(kvCacheScatter, [kHost, kRowHost, p], [cacheMeta, f32(kRow.shape), one])[0]!;
      vHost = reference(kvCacheScatter, [vHost, vRowHost, p], [cacheMeta, f32(vRow.shape), one])[0]!;
      const attentionExpected = reference(
        incrementalAttention,
        [qAttnHost, kHost, vHost, len],
        [f32(qAttn.shape), cacheMeta, cacheMeta, one],
      )[0]!;
      const at = `replay ${step} (position ${position})`;
      await expectContents(`${at}: rope of q`, qRot!, qExpected, ropeTolerance(position));
      await expectContents(`${at}: rope of k`, kRot!, kExpected, ropeTolerance(position));
      await expectContents(`${at}: kCache`, kCache, kHost);
      await expectContents(`${at}: vCache`, vCache, vHost);
      await expectContents(`${at}: attention`, attention!, attentionExpected, ATTENTION_TOLERANCE);
    }
  } finally {
    for (const t of tensors) t.dispose();
  }
}

async function replayRopeKvScatter(backend: Backend): Promise<void> {
  // Two tokens a step, 6 query heads over 2 kv heads of 10, a cache of 37 rows.
  const [tokens, heads, kvHeads, headDim, maxSeq] = [2, 6, 2, 10, 37];
  const shapes = [
    [tokens, heads, headDim],
    [tokens, kvHeads, headDim],
    [tokens, kvHeads * headDim],
    [kvHeads, maxSeq, headDim],
    [kvHeads, maxSeq, headDim],
  ];
  const metas: TensorMeta[] = [
    ...shapes.map((shape) => ({ shape, dtype: 'f32' as const })),
    { shape: [1], dtype: 'i32' },
  ];
  const rng = new Rng(0x90e4);
  const host = shapes.map(
    (shape) =>
      randomF32(
        rng,
        shape.reduce((a, b) => a * b, 1),
      ) as HostArray,
  );
  const tensors = host.map((data, i) => backend.upload(data, shapes[i]!));
  const positionT = backend.upload(Int32Array.of(5), [1], 'i32');
  const batch = backend.batch();
  const [qRot] = batch.run(ropeKvScatter, [...tensors, positionT], { theta: 500000 });
  try {
    for (const [step, position] of [5, 7, 0, 35, 19].entries()) {
      if (step > 0) {
        for (const i of [0, 1, 2]) {
          host[i] = randomF32(rng, host[i]!.length);
          backend.write(tensors[i]!, host[i]!);
        }
        backend.write(positionT, [position]);
      }
      // Poisoned: a replay that skips the kernel leaves NaN behind.
      backend.write(qRot!, new Float32Array(qRot!.size).fill(Number.NaN));
      await batch.submit();
      const [q, kCache, vCache] = reference(ropeKvScatter, [...host, Int32Array.of(position)], metas, {
        theta: 500000,
      });
      host[3] = kCache!;
      host[4] = vCache!;
      const at = `replay ${step} (position ${position})`;
      const tolerance = ropeTolerance(position + tokens - 1);
      await expectContents(`${at}: rope of q`, qRot!, q!, tolerance);
      await expectContents(`${at}: kCache`, tensors[3]!, kCache!, tolerance);
      await expectContents(`${at}: vCache`, tensors[4]!, vCache!);
    }
  } finally {
    for (const t of [...tensors, positionT, qRot!]) t.dispose();
  }
}

async function replayPagedStep(backend: Backend): Promise<void> {
  // 3 sequences, 4 query heads over 2 kv heads of 8, pools of 16 pages of 4 rows, 5 pages a sequence.
  const [batchSize, heads, kvHeads, headDim, pageSize, maxPages, numPages] = [3, 4, 2, 8, 4, 5, 16];
  const pool = [numPages, kvHeads, pageSize, headDim];
  const shapes = [
    [batchSize, heads, headDim],
    [batchSize, kvHeads * headDim],
    [batchSize, kvHeads * headDim],
    pool,
    pool,
  ];
  const intShapes = [[batchSize], [batchSize], [batchSize, maxPages], [batchSize]];
  const f32 = (shape: number[]): TensorMeta => ({ shape, dtype: 'f32' });
  const i32 = (shape: number[]): TensorMeta => ({ shape, dtype: 'i32' });
  const rng = new Rng(0x9a6e);
  const host: HostArray[] = shapes.map((shape) =>
    randomF32(
      rng,
      shape.reduce((a, b) => a * b, 1),
    ),
  );
  // Each step: new slots (one idle, −1), positions, shuffled block tables and lengths (0 … capacity).
  const ints = (step: number) => [
    distinctInts(rng, numPages * pageSize, batchSize).map((s, b) => (b === step % batchSize ? -1 : s)),
    distinctInts(rng, 5000, batchSize),
    distinctInts(rng, numPages, batchSize * maxPages),
    Array.from({ length: batchSize }, (_, b) =>
      b === (step + 1) % batchSize ? 0 : rng.int(1, maxPages * pageSize + 1),
    ),
  ];
  let values = ints(0);
  const tensors = host.map((data, i) => backend.upload(data, shapes[i]!));
  const intTensors = values.map((data, i) => backend.upload(Int32Array.from(data), intShapes[i]!, 'i32'));
  const [slots, positions, tables, lens] = intTensors as [Tensor, Tensor, Tensor, Tensor];
  const batch = backend.batch();
  const [qRot] = batch.run(ropePagedKvWrite, [...tensors, slots, positions]);
  const [out] = batch.run(pagedAttention, [qRot!, tensors[3]!, tensors[4]!, tables, lens]);
  try {
    for (let step = 0; step < 4; step++) {
      if (step > 0) {
        for (const i of [0, 1, 2]) {
          host[i] = randomF32(rng, host[i]!.length);
          backend.write(tensors[i]!, host[i]!);
        }
        values = ints(step);
        values.forEach((data, i) => {
          backend.write(intTensors[i]!, data);
        });
      }
      // Poisoned: a replay that skips a kernel leaves NaN behind.
      backend.write(qRot!, new Float32Array(qRot!.size).fill(Number.NaN));
      backend.write(out!, new Float32Array(out!.size).fill(Number.NaN));
      await batch.submit();
      const [slotsH, positionsH, tablesH, lensH] = values.map((v) => Int32Array.from(v));
      const [q, kPages, vPages] = reference(
        ropePagedKvWrite,
        [...host, slotsH, positionsH],
        [...shapes.map(f32), i32([batchSize]), i32([batchSize])],
      );
      host[3] = kPages!;
      host[4] = vPages!;
      const [expected] = reference(
        pagedAttention,
        [q, kPages, vPages, tablesH, lensH],
        [f32(shapes[0]!), f32(pool), f32(pool), i32([batchSize, maxPages]), i32([batchSize])],
      );
      const at = `replay ${step} (lengths ${values[3]!.join(', ')})`;
      const tolerance = ropeTolerance(5000);
      await expectContents(`${at}: rope of q`, qRot!, q!, tolerance);
      await expectContents(`${at}: kPages`, tensors[3]!, kPages!, tolerance);
      await expectContents(`${at}: vPages`, tensors[4]!, vPages!);
      await expectContents(`${at}: attention`, out!, expected!, { rtol: 1e-4, atol: 2e-5 });
    }
  } finally {
    for (const t of [...tensors, ...intTensors, qRot!, out!]) t.dispose();
  }
}
