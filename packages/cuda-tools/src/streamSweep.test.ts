import { CommandRecorder, CudaDriver, ptxasTestGate } from '@rayo/cuda-ptx';
import { expectAllAssembleCleanly, FakeLibCuda, PtxInterpreter } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import {
  launchStream,
  STREAM_WARPS,
  type StreamConfig,
  streamBlocks,
  streamKey,
  streamModule,
  streamReference,
} from './streamKernel.js';
import { streamSweep } from './streamSweep.js';

function interpretedDriver(): CudaDriver {
  const fake = new FakeLibCuda();
  new PtxInterpreter(fake).attach();
  return new CudaDriver(fake);
}

describe('the weight-stream probe on an interpreted device', () => {
  // Rows past N, a row whose chunks end inside a step, steps not a multiple of the depth.
  const cases: [StreamConfig, number, number][] = [
    [{ cols: 1, depth: 1, work: 0 }, 9, 40],
    [{ cols: 2, depth: 3, work: 0 }, 19, 100],
    [{ cols: 4, depth: 2, work: 3 }, 33, 64],
    [{ cols: 8, depth: 4, work: 1 }, 70, 160],
    // The steps in flight in a shared-memory ring.
    [{ cols: 1, depth: 1, work: 0, via: 'shared' }, 9, 40],
    [{ cols: 4, depth: 3, work: 2, via: 'shared' }, 33, 100],
  ];
  for (const [config, n, rowChunks] of cases) {
    it(`${config.via ?? 'registers'}, cols ${config.cols}, depth ${config.depth}, work ${config.work}: ${n} rows of ${rowChunks} chunks, each warp's xor as on the host`, async () => {
      const driver = interpretedDriver();
      try {
        const words = new Uint32Array(n * rowChunks * 4);
        let s = 12345;
        for (let i = 0; i < words.length; i++) {
          s = (Math.imul(s, 1103515245) + 12345) >>> 0;
          words[i] = s;
        }
        const w = driver.alloc(words.byteLength);
        driver.copyHtoD(w.ptr, words, words.byteLength);
        const grid = streamBlocks(n, config.cols);
        const out = driver.alloc(grid * STREAM_WARPS * 4);
        driver.memsetD32(out.ptr, 0xdeadbeef, grid * STREAM_WARPS);
        const recorder = new CommandRecorder(driver);
        launchStream(recorder, config, { w: w.ptr, out: out.ptr, n, rowChunks });
        const stream = driver.createStream();
        driver.enqueue(recorder.commands, stream);
        driver.synchronize(stream);
        driver.destroyStream(stream);
        const got = new Uint32Array(grid * STREAM_WARPS);
        driver.copyDtoH(got, out.ptr, got.byteLength);
        const want = Array.from({ length: got.length }, (_, warp) =>
          streamReference(words, config, n, rowChunks, warp),
        );
        expect(Array.from(got)).toEqual(want);
        driver.free(w);
        driver.free(out);
      } finally {
        driver.dispose();
      }
    }, 120_000);
  }

  it('sweeps a small shape and reports every cell against a copy', () => {
    const driver = interpretedDriver();
    const lines: string[] = [];
    try {
      streamSweep(
        driver,
        {
          shapes: [{ n: 16, bytes: 1024, label: '16x1024' }],
          cols: [1, 2],
          depth: [1, 2],
          blocks: [1, 2],
          work: [0],
          via: ['registers', 'shared'],
          iters: 1,
          copyBytes: 4096,
        },
        (line) => lines.push(line),
      );
    } finally {
      driver.dispose();
    }
    expect(lines[1]).toMatch(/^device copy: \d+ GB\/s/);
    const rows = lines.filter((l) => /^(registers|shared) +\d+ +\d+ +\d+ \|/.test(l));
    expect(rows).toHaveLength(8);
    for (const row of rows) expect(row.match(/µs \d+ \d+%/g)).toHaveLength(2);
    expect(lines.at(-1)).toMatch(/^best: (registers|shared), cols \d depth \d work 0 \d blocks\/SM/);
  }, 120_000);
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(
  `the weight-stream probe assembles with ptxas, without spills (${gate.reason})`,
  () => {
    it('every via × columns × depth × work the sweep runs by default', () => {
      const jobs = (['registers', 'shared'] as const).flatMap((via) =>
        [1, 2, 4, 8].flatMap((cols) =>
          [1, 2, 3, 4].flatMap((depth) =>
            [0, 24].map((work) => {
              const config = { cols, depth, work, via };
              return { ptx: streamModule(config).emit(), arch: 'sm_90', what: streamKey(config) };
            }),
          ),
        ),
      );
      expectAllAssembleCleanly(jobs);
    }, 600_000);
  },
);
