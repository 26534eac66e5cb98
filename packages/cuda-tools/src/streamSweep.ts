import { parseArgs } from 'node:util';
import { CommandRecorder, CudaDriver, type DeviceBuffer } from '@rayo/cuda-ptx';
import { timeCommands } from './gemmBench.js';
import {
  launchStream,
  STREAM_WARPS,
  type StreamConfig,
  streamBlocks,
  streamRingBytes,
} from './streamKernel.js';

// How much of the memory bandwidth a GEMV-shaped read of the weights reaches
// for a given number of columns a warp, steps of loads in flight and blocks
// an SM, with and without arithmetic per word: the question under the int8
// GEMV's 44–65% of the bandwidth (streamKernel.ts says what is read).

const USAGE = `Usage: node stream-sweep.mjs [--shapes NxBYTES,...] [--cols 1,2,4,8] [--depth 1,2,3,4]
                              [--blocks 1,2,4,8] [--work 0,24]
                              [--via registers,shared] [--iters 20]

Per shape (N rows of BYTES bytes, a product's codes), prints GB/s and the share
of a device-to-device copy's for every via × columns × depth × work (the steps
in flight held in registers or in a shared-memory ring), at each number of
resident blocks an SM (held there by dynamic shared memory). CUDA events around
--iters back-to-back launches after two warm-ups.`;

/** Llama-3.1-8B's Q4_K codes: o, q·k·v, down, and gate·up's two weights as one. */
const DEFAULT_SHAPES = '4096x2048,6144x2048,4096x7168,28672x2048';

function list(text: string): number[] {
  const values = text.split(',').map(Number);
  if (!values.every((v) => Number.isInteger(v) && v >= 0)) throw new Error(`bad list ${text}`);
  return values;
}

export interface StreamSweepOptions {
  readonly shapes: readonly { readonly n: number; readonly bytes: number; readonly label: string }[];
  readonly cols: readonly number[];
  readonly depth: readonly number[];
  readonly blocks: readonly number[];
  readonly work: readonly number[];
  /** Where the steps in flight land. */
  readonly via: readonly ('registers' | 'shared')[];
  readonly iters: number;
  /** Bytes of the device copy the figures are set against. */
  readonly copyBytes: number;
}

function parseShapes(text: string): StreamSweepOptions['shapes'] {
  return text.split(',').map((s) => {
    const [n, bytes] = s.split('x').map(Number);
    if (!Number.isInteger(n) || !Number.isInteger(bytes) || n! < 1 || bytes! % 16 !== 0 || bytes! < 16)
      throw new Error(`bad shape ${s}: N rows x BYTES (a multiple of 16)`);
    return { n: n!, bytes: bytes!, label: s };
  });
}

/** Runs the sweep on `driver`, printing a table per shape. */
export function streamSweep(driver: CudaDriver, o: StreamSweepOptions, print: (line: string) => void): void {
  const stream = driver.createStream();
  const buffers: DeviceBuffer[] = [];
  try {
    const d = driver.device;
    print(`${d.name} (sm_${d.computeCapability.join('')}, ${d.multiprocessors} SMs)`);
    const { copyBytes } = o;
    const src = driver.alloc(copyBytes);
    const dst = driver.alloc(copyBytes);
    buffers.push(src, dst);
    driver.memsetD32(src.ptr, 0x3c003c00, copyBytes / 4);
    const copyMs = timeCommands(
      driver,
      stream,
      [{ kind: 'copy', src: src.ptr, dst: dst.ptr, bytes: copyBytes }],
      o.iters,
    );
    // A copy reads and writes each byte.
    const copyGBs = (2 * copyBytes) / copyMs / 1e6;
    print(
      `device copy: ${copyGBs.toFixed(0)} GB/s (${(copyBytes / 2 ** 20).toFixed(0)} MiB read and written)`,
    );
    for (const shape of o.shapes) {
      const bytes = shape.n * shape.bytes;
      const w = driver.alloc(bytes);
      buffers.push(w);
      driver.memsetD32(w.ptr, 0x9e3779b9, bytes / 4);
      print(`\n${shape.label}: ${shape.n} rows of ${shape.bytes} bytes (${(bytes / 1e6).toFixed(1)} MB)`);
      print(`via       cols depth work | ${o.blocks.map((b) => `${b} blocks/SM`.padStart(18)).join(' ')}`);
      let best = { gbs: 0, what: '' };
      for (const via of o.via)
        for (const cols of o.cols)
          for (const depth of o.depth)
            for (const work of o.work) {
              const config: StreamConfig = { cols, depth, work, via };
              const grid = streamBlocks(shape.n, cols);
              const out = driver.alloc(grid * STREAM_WARPS * 4);
              const cells = o.blocks.map((perSm) => {
                // An SM's shared memory is a block's most plus the 1 KiB each resident block reserves.
                const sharedBytes = Math.floor((d.sharedMemoryPerBlockOptin + 1024) / perSm) - 1024;
                // The shared ring must fit the block's share.
                if (streamRingBytes(config) > sharedBytes) return 'n/a'.padStart(18);
                const recorder = new CommandRecorder(driver);
                launchStream(
                  recorder,
                  config,
                  { w: w.ptr, out: out.ptr, n: shape.n, rowChunks: shape.bytes / 16 },
                  Math.max(0, sharedBytes),
                );
                const ms = timeCommands(driver, stream, recorder.commands, o.iters);
                const gbs = bytes / ms / 1e6;
                if (gbs > best.gbs)
                  best = { gbs, what: `${via}, cols ${cols} depth ${depth} work ${work} ${perSm} blocks/SM` };
                return `${(ms * 1e3).toFixed(1)}µs ${gbs.toFixed(0)} ${((100 * gbs) / copyGBs).toFixed(0)}%`.padStart(
                  18,
                );
              });
              driver.free(out);
              print(
                `${via.padEnd(9)} ${String(cols).padStart(4)} ${String(depth).padStart(5)} ${String(work).padStart(4)} | ${cells.join(' ')}`,
              );
            }
      print(
        `best: ${best.what}, ${best.gbs.toFixed(0)} GB/s (${((100 * best.gbs) / copyGBs).toFixed(0)}% of the copy)`,
      );
    }
  } finally {
    for (const buffer of buffers) driver.free(buffer);
    driver.destroyStream(stream);
  }
}

export async function main(argv: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      shapes: { type: 'string', default: DEFAULT_SHAPES },
      cols: { type: 'string', default: '1,2,4,8' },
      depth: { type: 'string', default: '1,2,3,4' },
      blocks: { type: 'string', default: '1,2,4,8' },
      work: { type: 'string', default: '0,24' },
      via: { type: 'string', default: 'registers,shared' },
      iters: { type: 'string', default: '20' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const driver = await CudaDriver.open();
  try {
    streamSweep(
      driver,
      {
        shapes: parseShapes(values.shapes!),
        cols: list(values.cols!),
        depth: list(values.depth!),
        blocks: list(values.blocks!),
        work: list(values.work!),
        via: values.via!.split(',').map((v) => {
          if (v !== 'registers' && v !== 'shared') throw new Error(`--via takes registers, shared; got ${v}`);
          return v;
        }),
        iters: Number(values.iters),
        copyBytes: 256 * 2 ** 20,
      },
      (line) => console.log(line),
    );
    return 0;
  } finally {
    driver.dispose();
  }
}
