import { parseArgs } from 'node:util';
import { toHostArray } from '@rayo/core';
import {
  CommandRecorder,
  CudaDriver,
  type DeviceBuffer,
  type KernelEncoder,
  type Operand,
} from '@rayo/cuda-ptx';
import { timeCommands, xorshiftValues } from './gemmBench.js';
import { encodeMatmul, encodeTensorCore, encodeWgmma, wgmmaApplies } from './gemmKernels.js';

// Runs each matrix-product path of the cuda backend on the GPU, square
// sizes, C = A·B with A [M, K] and B [K, N] (or [N, K] with --transB), checks
// sampled outputs against f64 dot products on the host, and prints device
// TFLOP/s per path. Paths are chosen directly, not through matmul's routing:
//   wgmma  the sm_90a warpgroup-MMA kernel, bf16 and f16
//   mma    the sm_80 mma.sync kernel, bf16 and f16
//   tf32   f32 operands on the wgmma kernel as tf32
//   f32    the exact f32 tiled kernel (what precision 'f32' runs)

const USAGE = `Usage: node gemm-check.mjs [--sizes 4096,8192] [--paths wgmma,mma,tf32]
                          [--dtypes bf16,f16] [--iters 20] [--samples 256] [--transB]

Prints one line per path, dtype and size: milliseconds per product (CUDA
events around --iters back-to-back launches after two warm-up runs), TFLOP/s
(2·N³ per product) and the largest sampled error over its bound. Exits 1
when a sample is out of bounds, 2 on bad arguments.`;

export type Path = 'wgmma' | 'mma' | 'tf32' | 'f32';
export const PATHS: readonly Path[] = ['wgmma', 'mma', 'tf32', 'f32'];
type Half = 'bf16' | 'f16';

/**
 * Inputs are multiples of 1/64 in [-1, 1]: exact in bf16, f16 and tf32, so
 * every product is exact and f32 sums of them stay exact up to ~2^24/4096;
 * what is left is the output's rounding. A misplaced tile or a wrong swizzle
 * gives errors of the size of the values themselves.
 */
function randomGrid(count: number, seed: number): Float32Array {
  return xorshiftValues(count, seed, (word) => ((word % 129) - 64) / 64);
}

/** The grid values' half bits, through a table of the 129 values. */
function toHalf(values: Float32Array, dtype: Half): Uint16Array {
  const grid = Array.from({ length: 129 }, (_, i) => (i - 64) / 64);
  const table = toHostArray(dtype, grid) as Uint16Array;
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = table[Math.round(values[i]! * 64) + 64]!;
  return out;
}

interface Result {
  readonly ms: number;
  readonly tflops: number;
  /** Largest |error| / bound over the samples (≤ 1 passes). */
  readonly worst: number;
}

function halfBitsToNumber(bits: number, dtype: Half): number {
  if (dtype === 'bf16') {
    const view = new DataView(new ArrayBuffer(4));
    view.setUint32(0, bits << 16);
    return view.getFloat32(0);
  }
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >> 10) & 0x1f;
  const frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

async function runOne(
  driver: CudaDriver,
  stream: bigint,
  path: Path,
  dtype: Half | 'f32',
  size: number,
  opts: { iters: number; samples: number; transB: boolean },
): Promise<Result | string> {
  const m = size;
  const n = size;
  const k = size;
  const { transB } = opts;
  const aValues = randomGrid(m * k, 17 + size);
  const bValues = randomGrid(k * n, 91 + size);
  const buffers: DeviceBuffer[] = [];
  const upload = (data: ArrayBufferView & { length: number }, shape: number[], t: Half | 'f32'): Operand => {
    const buffer = driver.alloc(data.byteLength);
    buffers.push(buffer);
    driver.copyHtoD(buffer.ptr, data, data.byteLength);
    return { ptr: buffer.ptr, size: data.length, shape, dtype: t, byteLength: data.byteLength };
  };
  const stored = (values: Float32Array) => (dtype === 'f32' ? values : toHalf(values, dtype));
  const a = upload(stored(aValues), [m, k], dtype);
  const b = upload(stored(bValues), transB ? [n, k] : [k, n], dtype);
  const elementBytes = dtype === 'f32' ? 4 : 2;
  const yBuffer = driver.alloc(m * n * elementBytes);
  buffers.push(yBuffer);
  const y: Operand = {
    ptr: yBuffer.ptr,
    size: m * n,
    shape: [m, n],
    dtype,
    byteLength: m * n * elementBytes,
  };
  const call = { a, b, c: undefined, y, batch: 1, m, n, k, transA: false, transB, alpha: 1, beta: 0 };
  const recorder = new CommandRecorder(driver);
  try {
    const encoder: KernelEncoder = recorder;
    if (path === 'wgmma' || path === 'tf32') {
      const wanted = path === 'tf32' ? 'tf32' : (dtype as Half);
      if (!wgmmaApplies(encoder, call, wanted)) return `skipped: needs sm_90 (this is ${driver.device.arch})`;
      encodeWgmma(encoder, call, wanted);
    } else if (path === 'mma') encodeTensorCore(encoder, call, dtype as Half);
    else encodeMatmul(encoder, { ...call, kernel: 'matmul', precision: 'f32' });
    const ms = timeCommands(driver, stream, recorder.commands, opts.iters);
    const raw = dtype === 'f32' ? new Float32Array(m * n) : new Uint16Array(m * n);
    driver.copyDtoH(raw, y.ptr, raw.byteLength);
    const value = (i: number) =>
      dtype === 'f32' ? (raw as Float32Array)[i]! : halfBitsToNumber((raw as Uint16Array)[i]!, dtype);
    // Output rounding (half: 2^-8 relative for bf16, 2^-11 for f16; f32: 2^-24) and f32 sums.
    const unit = dtype === 'bf16' ? 2 ** -8 : dtype === 'f16' ? 2 ** -11 : 2 ** -24;
    let worst = 0;
    let s = 12345;
    for (let t = 0; t < opts.samples; t++) {
      s = (s * 48271) % 2147483647;
      const i = s % m;
      s = (s * 48271) % 2147483647;
      const j = s % n;
      let ref = 0;
      let scale = 0;
      for (let p = 0; p < k; p++) {
        const product = aValues[i * k + p]! * bValues[transB ? j * k + p : p * n + j]!;
        ref += product;
        scale += Math.abs(product);
      }
      const bound = 2 * unit * Math.abs(ref) + 2 ** -22 * scale + 1e-6;
      const err = Math.abs(value(i * n + j) - ref) / bound;
      worst = Math.max(worst, Number.isNaN(err) ? Number.POSITIVE_INFINITY : err);
    }
    return { ms, tflops: (2 * m * n * k) / (ms * 1e-3) / 1e12, worst };
  } finally {
    for (const buffer of [...buffers, ...recorder.scratchBuffers]) driver.free(buffer);
  }
}

export async function main(argv: readonly string[]): Promise<number> {
  let values: ReturnType<typeof parse>['values'];
  const parse = (args: string[]) =>
    parseArgs({
      args,
      options: {
        sizes: { type: 'string', default: '4096,8192' },
        paths: { type: 'string', default: 'wgmma,mma,tf32' },
        dtypes: { type: 'string', default: 'bf16,f16' },
        iters: { type: 'string', default: '20' },
        samples: { type: 'string', default: '256' },
        transB: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    });
  try {
    ({ values } = parse([...argv]));
  } catch (error) {
    console.error(`gemm-check: ${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const sizes = values.sizes!.split(',').map(Number);
  const paths = values.paths!.split(',') as Path[];
  const dtypes = values.dtypes!.split(',') as Half[];
  const iters = Number(values.iters);
  const samples = Number(values.samples);
  const bad =
    sizes.some((s) => !Number.isInteger(s) || s < 1) ||
    paths.some((p) => !PATHS.includes(p)) ||
    dtypes.some((d) => d !== 'bf16' && d !== 'f16') ||
    !(iters >= 1) ||
    !(samples >= 1);
  if (bad) {
    console.error(
      `gemm-check: bad --sizes, --paths (${PATHS.join(', ')}), --dtypes, --iters or --samples\n\n${USAGE}`,
    );
    return 2;
  }
  let driver: CudaDriver;
  try {
    driver = await CudaDriver.open();
  } catch (error) {
    console.error(`gemm-check: no CUDA device: ${(error as Error).message}`);
    return 1;
  }
  try {
    const ok = await gemmCheck(
      driver,
      { sizes, paths, dtypes, iters, samples, transB: values.transB! },
      console.log,
    );
    return ok ? 0 : 1;
  } finally {
    driver.dispose();
  }
}

export interface GemmCheckOptions {
  readonly sizes: readonly number[];
  readonly paths: readonly Path[];
  readonly dtypes: readonly Half[];
  readonly iters: number;
  readonly samples: number;
  readonly transB: boolean;
}

/** Runs and checks every path, dtype and size on `driver`, printing a line each; true when all samples pass. */
export async function gemmCheck(
  driver: CudaDriver,
  options: GemmCheckOptions,
  print: (line: string) => void,
): Promise<boolean> {
  const { sizes, paths, dtypes, iters, samples, transB } = options;
  const stream = driver.createStream();
  const d = driver.device;
  print(`gemm-check on ${d.name} (${d.arch}, ${d.multiprocessors} SMs), C = A·B${transB ? 'ᵀ' : ''}`);
  print('path   dtype  size      ms/product   TFLOP/s   worst error/bound');
  let failed = false;
  for (const size of sizes) {
    for (const path of paths) {
      const runs: (Half | 'f32')[] = path === 'tf32' || path === 'f32' ? ['f32'] : [...dtypes];
      for (const dtype of runs) {
        const label = `${path.padEnd(6)} ${(path === 'tf32' ? 'tf32' : dtype).padEnd(6)} ${String(size).padEnd(8)}`;
        try {
          const r = await runOne(driver, stream, path, dtype, size, { iters, samples, transB });
          if (typeof r === 'string') {
            print(`${label}  ${r}`);
            continue;
          }
          const ok = r.worst <= 1;
          failed ||= !ok;
          print(
            `${label}  ${r.ms.toFixed(3).padStart(10)}   ${r.tflops.toFixed(1).padStart(7)}   ${r.worst.toFixed(3)} ${ok ? 'ok' : 'MISMATCH'}`,
          );
        } catch (error) {
          failed = true;
          print(`${label}  FAILED: ${(error as Error).message}`);
        }
      }
    }
  }
  driver.destroyStream(stream);
  return !failed;
}
