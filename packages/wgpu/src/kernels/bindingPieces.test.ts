import {
  type Backend,
  createCpuBackend,
  type DType,
  embedding,
  type HostArray,
  linear,
  matmul,
  QUANT_FORMATS,
  type QuantFormat,
  quantizedEmbedding,
  quantizedGateUpSwiglu,
  quantizedMatmul,
  quantizeRows,
  quantLayout,
  type Tensor,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { compareOutputs, quantOffsetLimit, quantScaleRange, Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from '../backend.js';
import { backendProvider } from '../index.js';

// Weights and tables larger than one storage binding, bound in pieces of whole rows: quantized
// weights of every format, then a dense model's embedding table and head.

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

/**
 * A wgpu backend whose storage bindings are forced down to `limit` bytes,
 * noting the shader key of every pipeline its dispatches take and the
 * largest range any bind group binds: what the tests of weights split into
 * binding-sized pieces check.
 */
class BindingProbe {
  readonly dispatched: string[] = [];
  largestBinding = 0;

  private constructor(readonly gpu: WgpuBackend) {
    const get = gpu.pipelines.get.bind(gpu.pipelines);
    gpu.pipelines.get = (source) => {
      this.dispatched.push(source.key);
      return get(source);
    };
    const createBindGroup = gpu.device.createBindGroup.bind(gpu.device);
    gpu.device.createBindGroup = (descriptor) => {
      for (const entry of descriptor.entries) {
        const size = (entry.resource as { size?: number }).size ?? 0;
        this.largestBinding = Math.max(this.largestBinding, size);
      }
      return createBindGroup(descriptor);
    };
  }

  static async create(limit: number): Promise<BindingProbe> {
    return new BindingProbe(await WgpuBackend.create({ maxBindingBytes: limit }));
  }

  /** Forgets the dispatches and bindings seen so far. */
  reset(): void {
    this.dispatched.length = 0;
    this.largestBinding = 0;
  }
}

/** The forced binding limit: every weight below takes 2–5 pieces of whole rows. */
const QUANTIZED_LIMIT = 64 * 1024;

/** A quantized weight's parts as host arrays: random codes (padding included), scales, zero points, offsets. */
interface HostWeight {
  readonly format: QuantFormat;
  readonly n: number;
  readonly k: number;
  readonly packed: Uint32Array;
  readonly scales: Float32Array;
  readonly scaleDtype: DType;
  readonly zeros: Uint32Array | undefined;
  readonly offsets: Float32Array | undefined;
}

function randomWeight(rng: Rng, format: QuantFormat, n: number, k: number, scaleDtype: DType): HostWeight {
  const layout = quantLayout(format, k);
  const words = (count: number) => Uint32Array.from({ length: count }, () => rng.int(0, 2 ** 32));
  // |w| within about 1, as the conformance cases keep it.
  const [lo, hi] = quantScaleRange(format);
  const floats = (count: number, a: number, b: number) =>
    Float32Array.from({ length: count }, () => rng.uniform(a, b));
  const zeros = layout.zeroPoints || layout.subBlockScales;
  return {
    format,
    n,
    k,
    packed: words(n * layout.rowWords),
    scales: floats(n * layout.groups, lo, hi),
    scaleDtype,
    zeros: zeros ? words(n * layout.zeroWords) : undefined,
    offsets: layout.offsets ? floats(n * layout.groups, 0, quantOffsetLimit(format)) : undefined,
  };
}

function upload(b: Backend, w: HostWeight): [Tensor, Tensor, Tensor | undefined, Tensor | undefined] {
  const layout = quantLayout(w.format, w.k);
  return [
    b.upload(w.packed, [w.n, layout.rowWords], 'u32'),
    b.upload([...w.scales], [w.n, layout.groups], w.scaleDtype),
    w.zeros && b.upload(w.zeros, [w.n, layout.zeroWords], 'u32'),
    w.offsets && b.upload([...w.offsets], [w.n, layout.groups], w.scaleDtype),
  ];
}

/** Rows of the weight whose packed codes take about 3.5 bindings, odd. */
function rowsFor(format: QuantFormat, k: number): number {
  const rowBytes = quantLayout(format, k).rowWords * 4;
  return Math.ceil((3.5 * QUANTIZED_LIMIT) / rowBytes) | 1;
}

/** K of every format's cases: odd (x read element by element), q4k's whole super-blocks. */
const depthOf = (format: QuantFormat) => (quantLayout(format, 1).subBlockScales ? 512 : 99);
/** f16 scales where the files store them (q4's, q6k's d), f32 for the rest. */
const scaleDtypeOf = (format: QuantFormat): DType => {
  const layout = quantLayout(format, 1);
  return layout.bits === 6 || (layout.bits === 4 && !layout.subBlockScales) ? 'f16' : 'f32';
};

const tolerance = (k: number) => ({ rtol: 1e-4, atol: 4e-5 * Math.sqrt(k) });

// A 64 KiB binding limit splits each weight into pieces of whole rows, at offsets aligned in every
// part at once; each product and lookup is compared against the cpu backend, its outputs poisoned first.
needsAdapter('quantized weights larger than one storage binding', () => {
  let gpu: WgpuBackend;
  const cpu = createCpuBackend();
  /** Dispatches by shader key since the last reset, and the largest storage range bound. */
  let probe: BindingProbe;
  beforeAll(async () => {
    probe = await BindingProbe.create(QUANTIZED_LIMIT);
    gpu = probe.gpu;
  }, 120_000);
  afterAll(() => {
    gpu.dispose();
    cpu.dispose();
  });

  /** Runs `f` on both backends (gpu outputs poisoned with NaN first) and compares the outputs. */
  async function compare(
    label: string,
    f: (b: Backend, out: Tensor | undefined) => Tensor,
    like: { shape: number[]; dtype: DType },
    tol: { rtol: number; atol: number },
  ): Promise<string[]> {
    probe.reset();
    const poisoned =
      like.dtype === 'f32'
        ? gpu.upload(new Float32Array(like.shape.reduce((a, b) => a * b, 1)).fill(Number.NaN), like.shape)
        : undefined;
    const got = f(gpu, poisoned);
    const keys = [...probe.dispatched];
    expect(probe.largestBinding, `${label}: a binding over the limit`).toBeLessThanOrEqual(QUANTIZED_LIMIT);
    const want = f(cpu, undefined);
    const mismatch = compareOutputs(
      like.dtype,
      (await got.read()) as HostArray,
      (await want.read()) as HostArray,
      tol,
    );
    expect(mismatch, label).toBeUndefined();
    return keys;
  }

  const piecesOf = (keys: readonly string[], prefix: string) =>
    keys.filter((k) => k.startsWith(prefix)).length;

  for (const format of QUANT_FORMATS) {
    const k = depthOf(format);
    const n = rowsFor(format, k);
    // One and three rows of x through the streaming shaders (K odd: x read element by element), 37
    // through the tiled one; its y [37, N] is larger than a binding too, so its rows go in pieces as
    // well (K and N multiples of 64 keep every row of x, c and y at an aligned offset).
    for (const m of [1, 3, 37]) {
      const kd = m > 4 ? Math.max(k, 128) : k;
      const nd = m > 4 ? Math.ceil(rowsFor(format, kd) / 64) * 64 : n;
      it(`quantizedMatmul ${format} ${m}×${kd}→${nd} matches the cpu backend, in 2–5 pieces of the weight`, async () => {
        const rng = new Rng(0x5eed + m * 31 + nd);
        const w = randomWeight(rng, format, nd, kd, scaleDtypeOf(format));
        const x = Float32Array.from({ length: m * kd }, () => rng.uniform(-1, 1));
        const c = Float32Array.from({ length: m * nd }, () => rng.uniform(-1, 1));
        const keys = await compare(
          `${format} ${m}×${kd}→${nd}`,
          (b, out) => {
            const [packed, scales, zeros, offsets] = upload(b, w);
            expect(packed.byteLength).toBeGreaterThan(QUANTIZED_LIMIT);
            return b.run(
              quantizedMatmul,
              [b.upload(x, [m, kd]), packed, scales, zeros, b.upload(c, [m, nd]), offsets],
              { format, beta: 0.5 },
              out ? { out: [out] } : undefined,
            )[0]!;
          },
          { shape: [m, nd], dtype: 'f32' },
          tolerance(kd),
        );
        // Pieces of the weight, times pieces of y's rows where y is larger than a binding.
        const rowPieces = Math.ceil((m * nd * 4) / (Math.floor(QUANTIZED_LIMIT / (nd * 4)) * nd * 4));
        const pieces = piecesOf(keys, 'quantized/') / rowPieces;
        expect(Number.isInteger(pieces)).toBe(true);
        expect(pieces).toBeGreaterThanOrEqual(2);
        expect(pieces).toBeLessThanOrEqual(5);
      }, 300_000);
    }

    for (const to of ['f32', 'bf16'] as const) {
      it(`quantizedEmbedding ${format} [${n}, ${k}] to ${to} matches the cpu backend, ids in every piece and outside`, async () => {
        const rng = new Rng(0xe4b + n);
        const w = randomWeight(rng, format, n, k, scaleDtypeOf(format));
        // Ids from every part of the table (piece boundaries included), repeated, and outside [0, V).
        const ids = Int32Array.from([0, n - 1, -1, n, ...Array.from({ length: 21 }, () => rng.int(0, n))]);
        const keys = await compare(
          `${format} embedding to ${to}`,
          (b, out) => {
            const table = upload(b, w);
            return b.run(
              quantizedEmbedding,
              [b.upload(ids, [ids.length], 'i32'), ...table],
              { format, dim: k, to },
              out ? { out: [out] } : undefined,
            )[0]!;
          },
          { shape: [ids.length, k], dtype: to },
          { rtol: 1e-6, atol: 1e-7 },
        );
        const pieces = piecesOf(keys, 'quantized/embedding');
        expect(pieces).toBeGreaterThanOrEqual(2);
        expect(pieces).toBeLessThanOrEqual(5);
      }, 300_000);
    }
  }

  it('quantizedEmbedding splits the lookups too where y is larger than one binding (a dequantized weight)', async () => {
    const format = 'q4g32';
    const k = 128;
    const n = rowsFor(format, k);
    const rng = new Rng(0xdeb);
    const w = randomWeight(rng, format, n, k, 'f16');
    const ids = Int32Array.from({ length: n }, (_, i) => i);
    const keys = await compare(
      'every row, to bf16',
      (b) => {
        const table = upload(b, w);
        const y = b.run(quantizedEmbedding, [b.upload(ids, [n], 'i32'), ...table], {
          format,
          dim: k,
          to: 'bf16',
        })[0]!;
        expect(y.byteLength).toBeGreaterThan(QUANTIZED_LIMIT);
        return y;
      },
      { shape: [n, k], dtype: 'bf16' },
      { rtol: 0, atol: 0 },
    );
    // Pieces of the lookups × pieces of the table.
    expect(piecesOf(keys, 'quantized/embedding')).toBeGreaterThan(4);
  }, 300_000);

  it('quantizedMatmul splits x, c and y into rows too where they are larger than one binding', async () => {
    const [format, m, k, n] = ['q8', 37, 128, 2000] as const;
    const rng = new Rng(0x3b);
    const w = randomWeight(rng, format, n, k, 'f32');
    const x = Float32Array.from({ length: m * k }, () => rng.uniform(-1, 1));
    const c = Float32Array.from({ length: m * n }, () => rng.uniform(-1, 1));
    const keys = await compare(
      `${format} ${m}×${k}→${n}`,
      (b) => {
        const [packed, scales] = upload(b, w);
        const ct = b.upload(c, [m, n]);
        expect(ct.byteLength).toBeGreaterThan(QUANTIZED_LIMIT);
        return b.run(quantizedMatmul, [b.upload(x, [m, k]), packed, scales, undefined, ct], {
          format,
          beta: -1,
        })[0]!;
      },
      { shape: [m, n], dtype: 'f32' },
      tolerance(k),
    );
    expect(piecesOf(keys, 'quantized/')).toBeGreaterThan(5);
  }, 300_000);

  for (const [format, m] of [
    ['q4g32', 1],
    ['q4g32', 3],
    ['q4g128', 1],
    ['q8', 1],
  ] as const) {
    it(`quantizedGateUpSwiglu ${format} ${m} rows binds both weights in step`, async () => {
      const k = 256;
      const n = rowsFor(format, k);
      const rng = new Rng(0x6a7e + m);
      const gate = randomWeight(rng, format, n, k, format === 'q8' ? 'f32' : 'f16');
      const up = randomWeight(rng, format, n, k, format === 'q8' ? 'f32' : 'f16');
      const x = Float32Array.from({ length: m * k }, () => rng.uniform(-1, 1));
      const keys = await compare(
        `${format} gate·up ${m}×${k}→${n}`,
        (b, out) => {
          const [gp, gs, gz] = upload(b, gate);
          const [up2, us, uz] = upload(b, up);
          return b.run(
            quantizedGateUpSwiglu,
            [b.upload(x, [m, k]), gp, gs, up2, us, gz, uz],
            { format },
            out ? { out: [out] } : undefined,
          )[0]!;
        },
        { shape: [m, n], dtype: 'f32' },
        tolerance(k),
      );
      const pieces = piecesOf(keys, 'quantized/gemv');
      expect(pieces).toBeGreaterThanOrEqual(2);
      expect(pieces).toBeLessThanOrEqual(5);
    }, 300_000);
  }

  it('quantizedMatmul through the GEMV variants (qgemvVariant) writes each piece at its column offset', async () => {
    const variantGpu = await WgpuBackend.create({ maxBindingBytes: QUANTIZED_LIMIT, qgemvVariant: 'b' });
    try {
      for (const format of ['q4g32', 'q8'] as const) {
        const [m, k] = [2, 256];
        const n = rowsFor(format, k);
        const rng = new Rng(0x9e7 + n);
        const w = randomWeight(rng, format, n, k, format === 'q8' ? 'f32' : 'f16');
        const x = Float32Array.from({ length: m * k }, () => rng.uniform(-1, 1));
        const c = Float32Array.from({ length: m * n }, () => rng.uniform(-1, 1));
        const run = (b: Backend) => {
          const [packed, scales, zeros] = upload(b, w);
          expect(packed.byteLength).toBeGreaterThan(QUANTIZED_LIMIT);
          const inputs = [b.upload(x, [m, k]), packed, scales, zeros, b.upload(c, [m, n])];
          return b.run(quantizedMatmul, inputs, { format, beta: 2 })[0]!;
        };
        const mismatch = compareOutputs(
          'f32',
          (await run(variantGpu).read()) as HostArray,
          (await run(cpu).read()) as HostArray,
          tolerance(k),
        );
        expect(mismatch, format).toBeUndefined();
      }
    } finally {
      variantGpu.dispose();
    }
  }, 300_000);

  // Quantizing on the device (a dense checkpoint loaded quantized): the dense rows and every output
  // part in step, bit for bit as the host quantizer.
  for (const [format, zeroPoints, dtype, scaleDType] of [
    ['q8', false, 'f32', 'f32'],
    ['q4g32', true, 'bf16', 'f16'],
    ['q4g128', false, 'f32', 'bf16'],
    ['q8g16', false, 'f16', 'f32'],
    ['q4g32a', false, 'f32', 'f16'],
    ['q8g32a', false, 'bf16', 'f32'],
  ] as const) {
    it(`quantizeRows ${format}${zeroPoints ? ' zero points' : ''} of a ${dtype} weight matches the cpu backend bit for bit`, async () => {
      const k = 99;
      const n = Math.ceil((1.5 * QUANTIZED_LIMIT) / (k * (dtype === 'f32' ? 4 : 2))) | 1;
      const rng = new Rng(0x9a + n);
      const w = Array.from({ length: n * k }, () => rng.uniform(-1, 1));
      const run = (b: Backend) => {
        const wt = b.upload(w, [n, k], dtype);
        expect(wt.byteLength).toBeGreaterThan(QUANTIZED_LIMIT);
        return b.run(quantizeRows, [wt], { format, scaleDType, zeroPoints });
      };
      probe.reset();
      const got = run(gpu);
      expect(probe.largestBinding).toBeLessThanOrEqual(QUANTIZED_LIMIT);
      const pieces = piecesOf(probe.dispatched, 'quantizeRows/');
      expect(pieces).toBeGreaterThanOrEqual(2);
      expect(pieces).toBeLessThanOrEqual(5);
      const want = run(cpu);
      expect(got).toHaveLength(want.length);
      // Exact, as the conformance cases compare it (a zero's sign aside).
      for (const [i, t] of got.entries()) {
        const mismatch = compareOutputs(t.dtype, (await t.read()) as HostArray, await want[i]!.read(), {
          rtol: 0,
          atol: 0,
        });
        expect(mismatch, `output ${i}`).toBeUndefined();
      }
    }, 300_000);
  }

  it('refuses a weight whose single row is larger than one binding, naming the kernel and argument', () => {
    const k = QUANTIZED_LIMIT + 64;
    const x = gpu.upload(new Float32Array(k).fill(0.5), [1, k]);
    const packed = gpu.upload(new Uint32Array(2 * (k / 4)), [2, k / 4], 'u32');
    const scales = gpu.upload(new Float32Array(2).fill(1), [2, 1]);
    const run = () => gpu.run(quantizedMatmul, [x, packed, scales], { format: 'q8' });
    expect(run).toThrow(UnsupportedOnBackendError);
    expect(run).toThrow(/quantizedMatmul.*'packed'.*rows of at most 65536 bytes.*65600 bytes per row/);
  });
});

/** The forced binding limit: every table and weight below takes 2–5 pieces of whole rows. */
const DENSE_LIMIT = 16 * 1024;

// A dense model's embedding table and head (b stored [N, K]) larger than one binding: the gather and
// the product bind them in pieces of whole rows; compared against the cpu backend, outputs poisoned.
needsAdapter('dense tables and weights larger than one storage binding', () => {
  let gpu: WgpuBackend;
  const cpu = createCpuBackend();
  /** Dispatches by shader key since the last reset, and the largest storage range bound. */
  let probe: BindingProbe;
  beforeAll(async () => {
    probe = await BindingProbe.create(DENSE_LIMIT);
    gpu = probe.gpu;
  }, 120_000);
  afterAll(() => {
    gpu.dispose();
    cpu.dispose();
  });

  const random = (rng: Rng, n: number) => Array.from({ length: n }, () => rng.uniform(-1, 1));

  /** Runs `f` on both backends and compares; returns the gpu's dispatched shader keys. */
  async function compare(
    label: string,
    f: (b: Backend) => Tensor,
    dtype: DType,
    tol: { rtol: number; atol: number },
  ): Promise<string[]> {
    probe.reset();
    const got = f(gpu);
    const keys = [...probe.dispatched];
    expect(probe.largestBinding, `${label}: a binding over the limit`).toBeLessThanOrEqual(DENSE_LIMIT);
    const mismatch = compareOutputs(
      dtype,
      (await got.read()) as HostArray,
      (await f(cpu).read()) as HostArray,
      tol,
    );
    expect(mismatch, label).toBeUndefined();
    return keys;
  }

  // [V, D] of f32, f16 and bf16 tables: rows of vec4 / 8 halves and odd rows (u32 words of two halves).
  const tables: [DType, number, number][] = [
    ['f32', 257, 48],
    ['f32', 203, 37],
    ['f16', 403, 32],
    ['bf16', 291, 45],
  ];
  for (const [dtype, vocab, dim] of tables) {
    it(`embedding of a ${dtype} [${vocab}, ${dim}] table matches the cpu backend, ids in every piece and outside`, async () => {
      const rng = new Rng(vocab * 7 + dim);
      const table = random(rng, vocab * dim);
      const ids = [0, vocab - 1, -3, vocab, ...Array.from({ length: 23 }, () => rng.int(0, vocab))];
      const keys = await compare(
        `${dtype} embedding`,
        (b) => {
          const t = b.upload(table, [vocab, dim], dtype);
          expect(t.byteLength).toBeGreaterThan(DENSE_LIMIT);
          const out = b.upload(new Array(ids.length * dim).fill(Number.NaN), [ids.length, dim], dtype);
          return b.run(embedding, [t, b.upload(ids, [ids.length], 'i32')], {}, { out: [out] })[0]!;
        },
        dtype,
        { rtol: 0, atol: 0 },
      );
      const pieces = keys.filter((k) => k.startsWith('embedding/embedding/')).length;
      expect(pieces).toBeGreaterThanOrEqual(2);
      expect(pieces).toBeLessThanOrEqual(5);
    }, 300_000);
  }

  // b [N, K] stored as a head is: one row of a (columns of y in place), and more rows (through scratch).
  const products: [DType, number, number, number, boolean][] = [
    ['f32', 1, 64, 199, false],
    ['bf16', 1, 96, 301, false],
    ['f16', 1, 64, 403, false],
    ['f32', 3, 40, 331, true],
    ['bf16', 5, 64, 258, true],
  ];
  for (const [dtype, m, k, n, withC] of products) {
    it(`matmul ${m}×${k} · (${dtype} [${n}, ${k}])ᵀ${withC ? ' + c' : ''} matches the cpu backend`, async () => {
      const rng = new Rng(m * 1000 + k + n);
      const a = random(rng, m * k);
      const w = random(rng, n * k);
      const c = random(rng, m * n);
      const keys = await compare(
        `${dtype} head ${m}×${k}→${n}`,
        (b) => {
          const wt = b.upload(w, [n, k], dtype);
          expect(wt.byteLength).toBeGreaterThan(DENSE_LIMIT);
          const out = b.upload(new Array(m * n).fill(Number.NaN), [m, n]);
          return b.run(
            matmul,
            [b.upload(a, [m, k]), wt, withC ? b.upload(c, [m, n]) : undefined],
            { transB: true, ...(withC ? { beta: -0.5 } : {}) },
            { out: [out] },
          )[0]!;
        },
        'f32',
        { rtol: 1e-4, atol: 2e-5 * Math.sqrt(k) },
      );
      expect(keys.length).toBeGreaterThanOrEqual(2);
    }, 300_000);
  }

  it('linear with a bias, an activation and its pre-activation splits the weight and every column', async () => {
    const [m, k, n] = [2, 64, 197];
    const rng = new Rng(0x11e);
    const [x, w, bias] = [random(rng, m * k), random(rng, n * k), random(rng, n)];
    for (const output of [0, 1]) {
      await compare(
        `linear output ${output}`,
        (b) =>
          b.run(linear, [b.upload(x, [m, k]), b.upload(w, [n, k]), b.upload(bias, [n])], {
            activation: 'gelu',
            preActivation: true,
          })[output]!,
        'f32',
        { rtol: 1e-4, atol: 2e-5 * Math.sqrt(k) },
      );
    }
  }, 300_000);

  it('refuses b larger than one binding when it is not stored [N, K], naming the argument', () => {
    const [k, n] = [64, 199];
    const a = gpu.upload(new Array(k).fill(0.5), [1, k]);
    const w = gpu.upload(new Array(n * k).fill(0.25), [k, n]);
    const run = () => gpu.run(matmul, [a, w], {});
    expect(run).toThrow(UnsupportedOnBackendError);
    expect(run).toThrow(/matmul.*'b'.*only b stored \[N, K\] is split.*<= 16384 bytes.*50944 bytes/);
  });
});
