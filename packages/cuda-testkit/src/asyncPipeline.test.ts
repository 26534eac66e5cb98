import { PtxModule } from '@rayo/cuda-ptx';
import { describe, expect, it } from 'vitest';
import { bulkPipeline, ROW } from './bulkPipelineKernel.js';
import { useInterpretedDevice } from './interpretedDevice.js';

const device = useInterpretedDevice();
const THREADS = ROW / 4;

/** Runs the two-stage bulk-copy pipeline over `rows` rows; returns each column's sum and the expected sums. */
function runPipeline(rows: number, leader: 'first' | 'last') {
  const values = Float32Array.from({ length: rows * THREADS }, (_, i) => ((i * 37) % 101) - 50);
  const src = device.buffer(new Uint32Array(values.buffer));
  const out = device.buffer(THREADS);
  device.launch(
    () => bulkPipeline('sm_90', leader),
    'pipeline',
    { block: THREADS },
    { src: src.ptr, out: out.ptr, n: rows },
  );
  const got = new Float32Array(device.read(out, THREADS).buffer);
  const want = Float32Array.from({ length: THREADS }, (_, t) => {
    let sum = 0;
    for (let r = 0; r < rows; r++) sum = Math.fround(sum + values[r * THREADS + t]!);
    return sum;
  });
  return { got: Array.from(got), want: Array.from(want) };
}

/** A module whose single entry runs `body` in a 64-thread block. */
function entry(body: Parameters<PtxModule['entry']>[2]): () => PtxModule {
  return () => {
    const m = new PtxModule({ target: 'sm_90' });
    m.entry('k', {}, body);
    return m;
  };
}

describe('mbarrier pipelines in the PTX interpreter', () => {
  for (const leader of ['first', 'last'] as const) {
    it(`streams rows through two stages with bulk copies (the ${leader} thread producing)`, () => {
      for (const rows of [1, 2, 5]) {
        const { got, want } = runPipeline(rows, leader);
        expect(got).toEqual(want);
      }
    });
  }

  it('reports threads waiting for a phase that nobody completes', () => {
    const waitForever = entry((k) => {
      const bar = k.shared('bar', 8, 8);
      const leader = k.setp('eq', 'u32', k.reg('pred'), k.tid(), 0);
      k.predicated(leader, () => k.mbarrierInit(bar, 2));
      k.barSync();
      // Only thread 0 arrives: the phase needs two arrivals.
      k.predicated(leader, () => k.mbarrierArrive(bar));
      k.mbarrierWait(bar, 0);
    });
    expect(() => device.launch(waitForever, 'k', { block: 64 }, {})).toThrow(
      'ptx interpreter: k: threads wait for mbarrier phases that can never complete',
    );
  });

  it('completes a phase by arrivals alone: what a thread stored before arriving is there after the wait', () => {
    const out = device.buffer(64);
    const exchange = () => {
      const m = new PtxModule({ target: 'sm_90' });
      m.entry('k', { out: 'ptr' }, (k, p) => {
        const bar = k.shared('bar', 8, 8);
        const slots = k.sharedArray('slots', 'u32', 64);
        const tid = k.tid();
        k.predicated(k.setp('eq', 'u32', k.reg('pred'), tid, 0), () => k.mbarrierInit(bar, 64));
        k.barSync();
        k.stShared(
          'u32',
          k.madLo('u32', k.reg('u32'), tid, 4, k.sharedAddress(slots)),
          k.add('u32', k.reg('u32'), tid, 100),
        );
        k.mbarrierArrive(bar);
        k.mbarrierWait(bar, 0);
        const neighbour = k.and('b32', k.reg('u32'), k.add('u32', k.reg('u32'), tid, 1), 63);
        const value = k.ldShared(
          'u32',
          k.reg('u32'),
          k.madLo('u32', k.reg('u32'), neighbour, 4, k.sharedAddress(slots)),
        );
        k.stGlobal('u32', k.elementAddress(k.globalPointer(p.out), tid, 4), value);
        // The second phase has begun: parity 1 completes only when all 64 arrive again.
        k.mbarrierArrive(bar);
        k.mbarrierWait(bar, 1);
      });
      return m;
    };
    device.launch(exchange, 'k', { block: 64 }, { out: out.ptr });
    expect(Array.from(device.read(out, 64))).toEqual(
      Array.from({ length: 64 }, (_, t) => 100 + ((t + 1) % 64)),
    );
  });

  it('rejects an uninitialised mbarrier', () => {
    const uninitialised = entry((k) => {
      k.mbarrierArrive(k.shared('bar', 8, 8));
    });
    expect(() => device.launch(uninitialised, 'k', { block: 64 }, {})).toThrow(
      /no mbarrier initialised at shared address 0/,
    );
  });
});
