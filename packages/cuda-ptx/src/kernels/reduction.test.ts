import { describe, expect, it } from 'vitest';
import type { DeviceProperties } from '../driver/driver.js';
import type { Launch } from '../kernel.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { expectAssemblesCleanly } from '../testing/expectAssembles.js';
import {
  launchReduction,
  planReduction,
  REDUCTION_KERNELS,
  type ReduceKind,
  reductionKey,
  reductionModule,
} from './reduction.js';
import type { RowGeometry } from './rowReduce.js';

/** What the planners read of an H100. */
const H100 = { multiprocessors: 132, maxThreadsPerMultiprocessor: 2048 } as DeviceProperties;

/** Records launches and scratch allocations instead of running them. */
function recorder() {
  const launches: Launch[] = [];
  let next = 1n << 20n;
  const encoder = {
    device: H100,
    launch: (l: Launch) => launches.push(l),
    copy: () => {},
    fill32: () => {},
    scratch: (bytes: number) => {
      const ptr = next;
      next += BigInt(Math.ceil(bytes / 256) * 256);
      return ptr;
    },
  };
  return { encoder, launches };
}

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

  it('implements sum, max and sumSquares', () => {
    expect(REDUCTION_KERNELS.map((k) => k.spec.name)).toEqual(['sum', 'max', 'sumSquares']);
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
  for (const kind of kinds) {
    it(`${reductionKey(kind, geometries[0]!, false).split('/')[1]} at several geometries`, () => {
      for (const g of geometries) {
        for (const split of [false, true]) {
          for (const arch of ['sm_90', DEFAULT_TARGET]) {
            expectAssemblesCleanly(
              reductionModule(kind, g, split).emit(),
              arch,
              `${reductionKey(kind, g, split)} ${arch}`,
            );
          }
        }
      }
    }, 120_000);
  }
});
