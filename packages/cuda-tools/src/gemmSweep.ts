import { parseArgs } from 'node:util';
import type { MatmulTile } from '@rayo/core';
import { CommandRecorder, CudaDriver, type DeviceBuffer, type Operand } from '@rayo/cuda-ptx';
import { timeCommands, xorshiftValues } from './gemmBench.js';
import { encodeMatmul, type MatmulPlan, planMatmul, TILE_LARGE, TILE_MID, tilePlan } from './gemmKernels.js';

// Times the exact f32 tiled GEMM of given shapes under every tile and split-K
// choice, beside the plan `planMatmul` picks: the data behind its rule.

const USAGE = `Usage: node gemm-sweep.mjs [--shapes MxNxK[:tA][:tB],...] [--iters 20]

Prints, per shape, microseconds and TFLOP/s of the f32 tiled kernel with each
tile (large 128x128, mid 64x64) and split of K (1, 2, 3, 4, 6, 8, 12, 16; each
split at least 128 deep), and of the plan matmul picks ("auto"). CUDA events
around --iters back-to-back launches after two warm-ups; inputs are random.`;

/** The products of a training step of dp-bench's GPT model at 2048 tokens (one rank's batch of 8). */
const DEFAULT_SHAPES = [
  '768x768x2048:tA',
  '2048x768x2048',
  '2048x768x2048:tA',
  '2048x768x768:tB',
  '2048x768x768',
  '2048x2048x768:tB',
  '2048x768x50304',
  '768x2048x2048:tA',
  '2048x2048x768',
  '4096x768x2048',
  '768x768x4096:tA',
  '4096x768x768',
].join(',');

interface Shape {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly transA: boolean;
  readonly transB: boolean;
  readonly label: string;
}

function parseShape(text: string): Shape {
  const [dims, ...flags] = text.split(':');
  const [m, n, k] = dims!.split('x').map(Number);
  if (![m, n, k].every((v) => Number.isInteger(v) && v! > 0)) throw new Error(`bad shape ${text}`);
  return { m: m!, n: n!, k: k!, transA: flags.includes('tA'), transB: flags.includes('tB'), label: text };
}

function randomValues(count: number, seed: number): Float32Array {
  return xorshiftValues(count, seed, (word) => (word / 2 ** 32) * 2 - 1);
}

export async function main(argv: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      shapes: { type: 'string', default: DEFAULT_SHAPES },
      iters: { type: 'string', default: '20' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const shapes = values.shapes!.split(',').map(parseShape);
  const iters = Number(values.iters);
  const driver = await CudaDriver.open();
  const stream = driver.createStream();
  try {
    const d = driver.device;
    console.log(`${d.name} (sm_${d.computeCapability.join('')}, ${d.multiprocessors} SMs)`);
    for (const shape of shapes) {
      const { m, n, k, transA, transB } = shape;
      const buffers: DeviceBuffer[] = [];
      const operand = (count: number, dims: number[], seed: number): Operand => {
        const data = randomValues(count, seed);
        const buffer = driver.alloc(data.byteLength);
        buffers.push(buffer);
        driver.copyHtoD(buffer.ptr, data, data.byteLength);
        return { ptr: buffer.ptr, size: count, shape: dims, dtype: 'f32', byteLength: data.byteLength };
      };
      const a = operand(m * k, transA ? [k, m] : [m, k], 7);
      const b = operand(k * n, transB ? [n, k] : [k, n], 11);
      const y = operand(m * n, [m, n], 13);
      const call = { a, b, c: undefined, y, batch: 1, m, n, k, transA, transB, alpha: 1, beta: 0 };
      const time = (choosePlan: typeof planMatmul): number => {
        const recorder = new CommandRecorder(driver);
        try {
          encodeMatmul(recorder, { ...call, kernel: 'matmul', precision: 'f32', choosePlan });
          return timeCommands(driver, stream, recorder.commands, iters) * 1e3;
        } finally {
          for (const buffer of recorder.scratchBuffers) driver.free(buffer);
        }
      };
      const flops = 2 * m * n * k;
      const cells: string[] = [];
      let auto: MatmulPlan | undefined;
      const autoUs = time((p, dev) => {
        auto = planMatmul(p, dev);
        return auto;
      });
      const describe = (plan: MatmulPlan | undefined) =>
        plan?.kind === 'tile' ? `${plan.variant.tile === TILE_LARGE ? 'L' : 'M'}${plan.splits}` : plan?.kind;
      cells.push(`auto(${describe(auto)}) ${autoUs.toFixed(1)}us ${(flops / autoUs / 1e6).toFixed(1)}`);
      let best = { us: autoUs, what: 'auto' };
      for (const [name, tile] of [
        ['L', TILE_LARGE],
        ['M', TILE_MID],
      ] as [string, MatmulTile][]) {
        for (const splits of [1, 2, 3, 4, 6, 8, 12, 16]) {
          if (splits > 1 && k / splits < 128) continue;
          const us = time((p) => tilePlan(p, tile, splits));
          cells.push(`${name}${splits} ${us.toFixed(1)}`);
          if (us < best.us) best = { us, what: `${name}${splits}` };
        }
      }
      console.log(
        `${shape.label.padEnd(18)} best ${best.what} ${best.us.toFixed(1)}us ${(flops / best.us / 1e6).toFixed(1)} TFLOP/s | ${cells.join(' | ')}`,
      );
      for (const buffer of buffers) driver.free(buffer);
    }
    return 0;
  } finally {
    driver.destroyStream(stream);
    driver.dispose();
  }
}
