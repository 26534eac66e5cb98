import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ptxasTestGate } from '@rayo/cuda-ptx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assemblesCleanlyTogether,
  expectAllAssembleCleanly,
  expectAssemblesCleanly,
} from './expectAssembles.js';
import { cachedPtxasLog, keepPtxasLog } from './ptxasCache.js';

/**
 * A kernel that keeps `n` values live at once (a chain computed forwards,
 * multiplied backwards) while `.minnctapersm 2` at 1024 threads leaves 32
 * registers a thread: ptxas must spill.
 */
function spillingPtx(n: number): string {
  const lines = [
    '.version 8.0',
    '.target sm_75',
    '.address_size 64',
    '.visible .entry spills(.param .u64 y, .param .f32 a)',
    '.maxntid 1024, 1, 1',
    '.minnctapersm 2',
    '{',
    `  .reg .f32 %v<${n + 1}>;`,
    '  .reg .f32 %a;',
    '  .reg .u64 %y;',
    '  ld.param.u64 %y, [y];',
    '  cvta.to.global.u64 %y, %y;',
    '  ld.param.f32 %a, [a];',
    '  mov.f32 %v0, %a;',
  ];
  for (let i = 1; i < n; i++) lines.push(`  fma.rn.f32 %v${i}, %v${i - 1}, %a, %v${i - 1};`);
  lines.push(`  mov.f32 %v${n}, %v${n - 1};`);
  for (let i = n - 2; i >= 0; i--) lines.push(`  mul.rn.f32 %v${n}, %v${n}, %v${i};`);
  lines.push(`  st.global.f32 [%y], %v${n};`, '  ret;', '}');
  return lines.join('\n');
}

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`expectAssemblesCleanly (${gate.reason})`, () => {
  it('passes a kernel that fits its registers', () => {
    const result = expectAssemblesCleanly(spillingPtx(8), 'sm_90');
    expect(result.log).toMatch(/ 0 bytes spill stores, 0 bytes spill loads/);
  });

  it('fails on a kernel that spills', () => {
    expect(() => expectAssemblesCleanly(spillingPtx(96), 'sm_90', 'the spilling kernel')).toThrow(
      /the spilling kernel: the kernel spills registers/,
    );
  });

  it('fails on PTX that does not assemble', () => {
    expect(() => expectAssemblesCleanly('.version 8.0\n.target sm_90\nnonsense', 'sm_90')).toThrow(
      /ptxas failed/,
    );
  });

  it('assembles modules of the same entry name in one ptxas run, and refuses a batch with a spill', () => {
    const clean = [spillingPtx(4), spillingPtx(8), spillingPtx(12)];
    expect(assemblesCleanlyTogether(clean, 'sm_90')).toBe(true);
    expect(assemblesCleanlyTogether([...clean, spillingPtx(96)], 'sm_90')).toBe(false);
    expect(assemblesCleanlyTogether([...clean, '.version 8.0\n.target sm_90\nnonsense'], 'sm_90')).toBe(
      false,
    );
  });

  it('names the module that spills when a batch is not clean', () => {
    const jobs = [4, 8, 96, 12].map((n) => ({ ptx: spillingPtx(n), arch: 'sm_90', what: `chain of ${n}` }));
    expect(() => expectAllAssembleCleanly(jobs)).toThrow(/chain of 96: the kernel spills registers/);
    expectAllAssembleCleanly(jobs.filter((j) => !j.what.endsWith('96')));
  });
});

describe.skipIf(gate.skip)(`the ptxas logs kept between runs (${gate.reason})`, () => {
  let dir: string;
  const before = process.env.RAYO_PTXAS_CACHE;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'rayo-ptxas-kept-'));
    process.env.RAYO_PTXAS_CACHE = dir;
  });
  afterAll(() => {
    if (before === undefined) delete process.env.RAYO_PTXAS_CACHE;
    else process.env.RAYO_PTXAS_CACHE = before;
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps a clean log and gives it back for the same text and arch only', () => {
    const ptx = spillingPtx(6);
    expect(cachedPtxasLog(ptx, 'sm_90', '-v')).toBeUndefined();
    const fresh = expectAssemblesCleanly(ptx, 'sm_90');
    expect(cachedPtxasLog(ptx, 'sm_90', '-v')).toBe(fresh.log);
    expect(cachedPtxasLog(ptx, 'sm_80', '-v')).toBeUndefined();
    expect(cachedPtxasLog(`${ptx}\n`, 'sm_90', '-v')).toBeUndefined();
    const batched = spillingPtx(5);
    expectAllAssembleCleanly([{ ptx: batched, arch: 'sm_90' }]);
    expect(cachedPtxasLog(batched, 'sm_90', '-v')).toMatch(/ 0 bytes spill stores, 0 bytes spill loads/);
  });

  it('keeps nothing of a module ptxas refuses', () => {
    const bad = '.version 8.0\n.target sm_90\nnot ptx';
    expect(() => expectAssemblesCleanly(bad, 'sm_90')).toThrow(/ptxas failed/);
    expect(cachedPtxasLog(bad, 'sm_90', '-v')).toBeUndefined();
  });

  it('checks a kept log as it checks a fresh one', () => {
    const ptx = spillingPtx(7);
    keepPtxasLog(
      ptx,
      'sm_90',
      '-v',
      "ptxas info    : Compiling entry function 'spills' for 'sm_90'\nptxas info    : Used 32 registers, 40 bytes spill stores, 40 bytes spill loads\n",
    );
    expect(() => expectAllAssembleCleanly([{ ptx, arch: 'sm_90', what: 'planted' }])).toThrow(
      /planted: the kernel spills registers/,
    );
    expect(() => expectAssemblesCleanly(ptx, 'sm_90', 'planted')).toThrow(
      /planted: the kernel spills registers/,
    );
  });

  it('RAYO_PTXAS_CACHE=0 keeps nothing', () => {
    process.env.RAYO_PTXAS_CACHE = '0';
    try {
      expectAssemblesCleanly(spillingPtx(9), 'sm_90');
    } finally {
      process.env.RAYO_PTXAS_CACHE = dir;
    }
    expect(cachedPtxasLog(spillingPtx(9), 'sm_90', '-v')).toBeUndefined();
    expect(readdirSync(dir).length).toBeGreaterThan(0);
  });
});
