import { broadcastPlan } from '@rayo/core';
import { type AssemblyJob, expectAllAssembleCleanly } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import {
  BINARY_OPS,
  binaryModule,
  ELEMENTWISE_KERNELS,
  MAP_DECLS,
  MAX_RANK,
  mapModule,
} from './elementwise.js';

describe('broadcasting', () => {
  it("takes core's plan, whose ranks of shapes of rank MAX_RANK fit the kernel's parameters", () => {
    const out = [2, 3, 2, 3, 2, 3];
    const a = [2, 1, 2, 1, 2, 1];
    const b = [1, 3, 1, 3, 1, 3];
    expect(broadcastPlan(out, a, b).dims).toHaveLength(MAX_RANK);
  });
});

describe('elementwise PTX', () => {
  it('implements every elementwise spec once', () => {
    const names = ELEMENTWISE_KERNELS.map((k) => k.spec.name);
    expect(new Set(names).size).toBe(names.length);
    expect(names).toEqual(
      expect.arrayContaining(['add', 'div', 'gelu', 'swigluBackward', 'biasAdd', 'clipBackward']),
    );
  });

  it('is the same text for the same configuration and claims the default target', () => {
    expect(binaryModule('add', 3).emit()).toBe(binaryModule('add', 3).emit());
    expect(binaryModule('add', 3).emit()).not.toBe(binaryModule('add', 2).emit());
    const gelu = MAP_DECLS.find((d) => d.spec.name === 'gelu')!;
    expect(mapModule(gelu).emit()).toBe(mapModule(gelu).emit());
    expect(mapModule(gelu).target).toBe(DEFAULT_TARGET);
  });

  it('passes each rank as parameters and uses IEEE division', () => {
    const text = binaryModule('div', 2).emit();
    for (const p of ['n', 'd0', 'd1', 'sa0', 'sa1', 'sb0', 'sb1'])
      expect(text).toContain(`binary_div_r2_param_${p}`);
    expect(text).not.toContain('binary_div_r2_param_d2');
    expect(text).toContain('div.rn.f32');
    expect(text).not.toMatch(/\.ftz/);
  });
});

const gate = ptxasTestGate();
const ARCHS = ['sm_90', DEFAULT_TARGET];

describe.skipIf(gate.skip)(`elementwise PTX assembles with ptxas, without spills (${gate.reason})`, () => {
  it('binary ops at every rank, and over half storage', () => {
    const jobs: AssemblyJob[] = [];
    for (const op of BINARY_OPS) {
      for (let rank = 1; rank <= MAX_RANK; rank++) {
        const ptx = binaryModule(op, rank).emit();
        for (const arch of ARCHS) jobs.push({ ptx, arch, what: `${op} rank ${rank} ${arch}` });
      }
      for (const type of ['f16', 'bf16'] as const) {
        jobs.push({ ptx: binaryModule(op, 2, type).emit(), arch: DEFAULT_TARGET, what: `${op} ${type}` });
      }
    }
    expectAllAssembleCleanly(jobs);
  }, 120_000);
  it('map ops over f32 and half storage', () => {
    const jobs: AssemblyJob[] = [];
    for (const decl of MAP_DECLS) {
      for (const type of ['f32', 'f16', 'bf16'] as const) {
        const ptx = mapModule(decl, type).emit();
        for (const arch of ARCHS) jobs.push({ ptx, arch, what: `${decl.spec.name} ${type} ${arch}` });
      }
    }
    for (const [type, out] of [
      ['f32', 'bf16'],
      ['f16', 'bf16'],
      ['bf16', 'f32'],
    ] as const) {
      const decl = MAP_DECLS.find((d) => d.spec.name === 'swiglu')!;
      jobs.push({
        ptx: mapModule(decl, type, out).emit(),
        arch: DEFAULT_TARGET,
        what: `swiglu ${type} to ${out}`,
      });
    }
    expectAllAssembleCleanly(jobs);
  }, 120_000);
});
