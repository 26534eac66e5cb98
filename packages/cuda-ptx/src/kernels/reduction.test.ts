import { argmax } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import {
  type AssemblyJob,
  archJobs,
  expectAllAssembleCleanly,
  recordingEncoder,
  seededUniform,
  useEmulatedGpu,
} from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import type { DeviceProperties } from '../driver/driver.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import {
  ARGMAX_PAIRS_KEY,
  argmaxKey,
  argmaxModule,
  argmaxPairsModule,
  launchReduction,
  planArgmax,
  planArgmaxParts,
  planReduction,
  type ReduceKind,
  reductionKey,
  reductionModule,
} from './reduction.js';
import type { RowGeometry } from './rowReduce.js';

/** What the planners read of an H100. */
const H100 = { multiprocessors: 132, maxThreadsPerMultiprocessor: 2048 } as DeviceProperties;

/** Records launches and scratch allocations instead of running them. */
const recorder = () => recordingEncoder(H100, 1n << 20n);

const SUM: ReduceKind = { op: 'sum', square: false };

describe('reduction planning', () => {
  it('gives short runs to groups within a warp, sized to the run', () => {
    expect(planReduction(H100, 1031, 3, 1)).toEqual({
      geometry: { threads: 4, block: 128, width: 1, slots: 0 },
      splits: 1,
      chunk: 3,
    });
    expect(planReduction(H100, 7, 13, 1).geometry.threads).toBe(16);
    expect(planReduction(H100, 7, 512, 4).geometry.threads).toBe(32);
    expect(planReduction(H100, 65537, 1, 1).geometry.threads).toBe(1);
  });

  it('gives long runs to blocks and splits them when the runs alone leave SMs idle', () => {
    const one = planReduction(H100, 1, 1_000_003, 4);
    expect(one.geometry).toEqual({ threads: 256, block: 256, width: 4, slots: 0 });
    expect(one.splits).toBeGreaterThan(100);
    expect(one.chunk % 4).toBe(0);
    expect(one.chunk * one.splits).toBeGreaterThanOrEqual(1_000_003);
    expect(one.chunk * (one.splits - 1)).toBeLessThan(1_000_003);
    // Enough runs to fill the device: no split.
    expect(planReduction(H100, 100_000, 4099, 1).splits).toBe(1);
    // A second pass never splits again.
    expect(planReduction(H100, 1, 1_000_003, 4, false).splits).toBe(1);
  });

  it('reduces split segments in a second pass without squaring again', () => {
    const { encoder, launches } = recorder();
    launchReduction(encoder, { op: 'sum', square: true }, 1n << 30n, 2n << 30n, 1, 1_000_003);
    expect(launches).toHaveLength(2);
    expect(launches[0]!.key).toMatch(/^reduction\/sumSquares\/t256b256w4stream\/split$/);
    expect(launches[1]!.key).toMatch(/^reduction\/sum\//);
    const segments = launches[0]!.args.segments as number;
    expect(launches[1]!.args).toMatchObject({ n: segments, segments: 1, y: 2n << 30n });
  });

  it('reads .v4 only where every run starts 16-byte aligned', () => {
    const { encoder, launches } = recorder();
    launchReduction(encoder, SUM, 1n << 30n, 0n, 7, 13);
    launchReduction(encoder, SUM, 1n << 30n, 0n, 7, 16);
    launchReduction(encoder, SUM, (1n << 30n) + 8n, 0n, 7, 16);
    launchReduction(encoder, SUM, 1n << 30n, 0n, 1, 13);
    expect(launches.map((l) => /w(\d)/.exec(l.key)![1])).toEqual(['1', '4', '2', '4']);
  });

  it('keeps NaN in max without sm_80 instructions, and never uses float atomics', () => {
    const g: RowGeometry = { threads: 256, block: 256, width: 4, slots: 0 };
    const text = reductionModule({ op: 'max', square: false }, g, true).emit();
    expect(text).toContain('setp.nan.f32');
    expect(text).not.toContain('max.NaN');
    expect(text).not.toMatch(/\b(atom|red)\./);
    expect(text).toContain('ld.global.nc.v4.f32');
    expect(text).toContain('shfl.sync.bfly.b32');
    expect(text).toContain('bar.sync 0');
    expect(reductionModule(SUM, g, false).emit()).toBe(reductionModule(SUM, g, false).emit());
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`reduction PTX assembles with ptxas (${gate.reason})`, () => {
  const geometries: RowGeometry[] = [
    { threads: 1, block: 128, width: 1, slots: 0 },
    { threads: 8, block: 128, width: 2, slots: 0 },
    { threads: 32, block: 128, width: 4, slots: 0 },
    { threads: 256, block: 256, width: 4, slots: 0 },
    { threads: 256, block: 256, width: 1, slots: 0 },
  ];
  const kinds: ReduceKind[] = [SUM, { op: 'max', square: false }, { op: 'sum', square: true }];
  it('sums and maxima of half inputs into half outputs, split and not', () => {
    const jobs: AssemblyJob[] = [];
    for (const [x, y] of [
      ['bf16', 'bf16'],
      ['f16', 'f16'],
      ['f32', 'bf16'],
    ] as const) {
      for (const g of [geometries[1]!, geometries[3]!]) {
        for (const split of [false, true]) {
          const v = reductionModule(kinds[2]!, g, split, { x, y }).emit();
          jobs.push({ ptx: v, arch: 'sm_90', what: reductionKey(kinds[2]!, g, split, { x, y }) });
        }
      }
    }
    expectAllAssembleCleanly(jobs);
  }, 120_000);
  for (const kind of kinds) {
    it(`${reductionKey(kind, geometries[0]!, false).split('/')[1]} at several geometries`, () => {
      const jobs: AssemblyJob[] = [];
      for (const g of geometries) {
        for (const split of [false, true]) {
          jobs.push(...archJobs(reductionModule(kind, g, split).emit(), reductionKey(kind, g, split)));
        }
      }
      expectAllAssembleCleanly(jobs);
    }, 120_000);
  }
});

describe('argmax planning and PTX', () => {
  it('gives short rows to groups within a warp and long rows a block each', () => {
    expect(planArgmax(1, 1)).toEqual({ threads: 1, block: 128, width: 1, slots: 0 });
    expect(planArgmax(31, 1).threads).toBe(4);
    expect(planArgmax(1024, 4).threads).toBe(32);
    expect(planArgmax(32000, 4)).toEqual({ threads: 512, block: 512, width: 4, slots: 0 });
    expect(argmaxKey(planArgmax(32001, 1))).toBe('reduction/argmax/t512b512w1stream');
  });

  it('cuts few long rows into parts over the SMs, and leaves many rows or short ones whole', () => {
    // Decoding's one row of Llama 3's logits: 32 parts of 4,008 (256 threads, 4 vec4 loads each).
    expect(planArgmaxParts(H100, 1, 128256, 4)).toEqual({ splits: 32, chunk: 4008 });
    expect(planArgmaxParts(H100, 1, 32000, 4)).toEqual({ splits: 8, chunk: 4000 });
    // Parts start on access boundaries; the last is shorter.
    const odd = planArgmaxParts(H100, 3, 100002, 2);
    expect(odd.chunk % 2).toBe(0);
    expect((odd.splits - 1) * odd.chunk).toBeLessThan(100002);
    expect(odd.splits * odd.chunk).toBeGreaterThanOrEqual(100002);
    expect(planArgmaxParts(H100, 2000, 32000, 4)).toEqual({ splits: 1, chunk: 32000 });
    expect(planArgmaxParts(H100, 1, 1024, 4)).toEqual({ splits: 1, chunk: 1024 });
    expect(argmaxKey({ threads: 256, block: 256, width: 4, slots: 0 }, 'bf16', true)).toContain('/split');
  });

  it('writes a part its (key, index) pair, and reduces the pairs a warp a row', () => {
    const part = argmaxModule({ threads: 256, block: 256, width: 4, slots: 0 }, 'f32', true).emit();
    expect(part).toContain('st.global.v2.u32');
    expect(part).toContain('div.u32');
    const pairs = argmaxPairsModule().emit();
    expect(pairs).toContain('ld.global.v2.u32');
    expect(pairs).toContain('shfl.sync.bfly.b32');
    expect(pairs).not.toContain('bar.sync');
    expect(ARGMAX_PAIRS_KEY).toBe('reduction/argmax/pairs/t32b128w1stream');
  });

  it('compares integer keys only, through shuffles and, for a block, shared memory', () => {
    const text = argmaxModule(planArgmax(32000, 4)).emit();
    expect(text).not.toMatch(/setp\.\w+\.f32/);
    expect(text).toContain('ld.global.nc.v4.f32');
    expect(text).toContain('shfl.sync.bfly.b32');
    expect(text).toContain('bar.sync 0');
    expect(argmaxModule(planArgmax(31, 1)).emit()).not.toContain('bar.sync');
  });
});

describe.skipIf(gate.skip)(`argmax PTX assembles with ptxas (${gate.reason})`, () => {
  it('at every kind of planned geometry', () => {
    const jobs: AssemblyJob[] = [];
    for (const [n, width] of [
      [1, 1],
      [31, 1],
      [64, 2],
      [1024, 4],
      [32001, 1],
      [32000, 4],
      [100002, 2],
    ] as const) {
      const g = planArgmax(n, width);
      for (const type of ['f32', 'f16', 'bf16'] as const) {
        jobs.push(...archJobs(argmaxModule(g, type).emit(), argmaxKey(g, type)));
      }
      const part = { threads: 256, block: 256, width, slots: 0 };
      jobs.push(...archJobs(argmaxModule(part, 'bf16', true).emit(), argmaxKey(part, 'bf16', true)));
    }
    jobs.push(...archJobs(argmaxPairsModule().emit(), ARGMAX_PAIRS_KEY));
    expectAllAssembleCleanly(jobs);
  }, 120_000);
});

// With one SM the grid is a few blocks, so every group loops over many rows.
describe('argmax on a one-SM emulated device', () => {
  const { gpu, cpu, fake } = useEmulatedGpu({ multiprocessors: 1 });

  const uniform = seededUniform(11, -1, 1);

  async function check(shape: number[], special?: (x: Float32Array, bits: Uint32Array) => void) {
    const x = Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, uniform);
    special?.(x, new Uint32Array(x.buffer));
    const run = (b: typeof gpu | typeof cpu) => b.run(argmax, [b.upload(x, shape)], {})[0]!.read();
    expect(compareOutputs('i32', await run(gpu), await run(cpu))).toBeUndefined();
  }

  it('no rows: nothing to launch', () => check([0, 13]));
  it('many short rows per warp', () => check([700, 13]));
  it('many block-wide rows', () => check([40, 4099]));
  it('rows of width-2 accesses with late ties', () =>
    check([9, 2050], (x) => {
      for (let r = 0; r < 9; r++) for (const j of [2049 - r, 1500 + 37 * r, 1400 + r]) x[r * 2050 + j] = 3;
    }));
  // One SM holds 8 blocks of 256: a row of 20,011 goes in 8 parts of 2,502 (3 rows in 3 parts each).
  it('one long row in parts, the maximum tied across parts', async () => {
    const before = fake.launches.length;
    await check([1, 20011], (x) => {
      for (const j of [19999, 2502 * 5 + 1, 2502 * 3 - 1, 2502 * 3 + 7]) x[j] = 5;
    });
    // The parts, then their pairs (the cpu run launches nothing).
    const launches = fake.launches.slice(before);
    expect(launches.map((l) => l.entry)).toEqual(['argmax', 'argmax_pairs']);
    expect(launches[0]!.args.splits).toBe(8);
    expect(launches[0]!.args.chunk).toBe(2502);
  });
  it('three long rows in parts, with NaN and infinities in later parts', () =>
    check([3, 20011], (x, bits) => {
      x[20000] = Number.POSITIVE_INFINITY;
      x[20011 + 5000] = Number.POSITIVE_INFINITY;
      bits[20011 + 15000] = 0xffc00000;
      x[2 * 20011 + 20010] = 7;
    }));
  it('NaN with its sign bit set counts as NaN', () =>
    check([3, 517], (x, bits) => {
      x[5] = Number.POSITIVE_INFINITY;
      bits[300] = 0xffc00000;
      bits[517 + 400] = 0xff800001;
      x[517 + 401] = Number.NaN;
      x[2 * 517 + 7] = -0;
    }));
});
