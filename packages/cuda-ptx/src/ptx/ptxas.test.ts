import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BackendUnavailableError, InvalidArgumentError, KernelCompileError } from '@rayo/core';
import { afterAll, describe, expect, it } from 'vitest';
import { PtxModule } from './module.js';
import { addr } from './operands.js';
import { assemblePtx, assemblePtxOrThrow, findPtxas, ptxasTestGate } from './ptxas.js';

const LOG2E = Math.LOG2E;

/** c = a + b over float4s with a grid-stride loop, then a scalar tail. */
function vectorAddV4(): PtxModule {
  const m = new PtxModule();
  m.entry('vec_add_v4', { a: 'ptr', b: 'ptr', c: 'ptr', n: 'u32' }, (k, p) => {
    const a = k.globalPointer(p.a);
    const b = k.globalPointer(p.b);
    const c = k.globalPointer(p.c);
    const n = k.ldParam(p.n);
    const quads = k.shr('u32', k.reg('u32'), n, 2);
    k.gridStrideLoop(quads, (i) => {
      const x = k.ldGlobal('f32', k.regs('f32', 4), k.elementAddress(a, i, 16), { nc: true });
      const y = k.ldGlobal(
        'f32',
        [k.reg('f32'), k.reg('f32'), k.reg('f32'), k.reg('f32')],
        k.elementAddress(b, i, 16),
        {
          nc: true,
          cache: 'cs',
        },
      );
      for (let j = 0; j < 4; j++) k.add('f32', x[j]!, x[j]!, y[j]!);
      k.stGlobal('f32', k.elementAddress(c, i, 16), x, { cache: 'cs' });
    });
    const tail = k.add('u32', k.reg('u32'), k.shl('b32', k.reg('u32'), quads, 2), k.globalThreadIndex());
    k.guard(tail, n, () => {
      const x = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(a, tail, 4));
      const y = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(b, tail, 4));
      k.stGlobal('f32', k.elementAddress(c, tail, 4), k.add('f32', x, x, y));
    });
  });
  return m;
}

/** Per-block sums of x, staged through a shared-memory tile one block-width at a time. */
function tiledSum(): PtxModule {
  const TILE = 256;
  const m = new PtxModule();
  m.entry(
    'tiled_sum',
    { x: 'ptr', out: 'ptr', n: 'u32' },
    (k, p) => {
      const x = k.globalPointer(p.x);
      const out = k.globalPointer(p.out);
      const n = k.ldParam(p.n);
      const tile = k.sharedArray('tile', 'f32', TILE, 16);
      const tid = k.tid();
      const slot = k.madLo('u32', k.reg('u32'), tid, 4, k.sharedAddress(tile));
      const isFirst = k.setp('eq', 'u32', k.reg('pred'), tid, 0);
      const acc = k.mov('f32', k.reg('f32'), 0);
      const base = k.reg('u32');
      k.forRange(base, 0, n, TILE, () => {
        const idx = k.add('u32', k.reg('u32'), base, tid);
        const inRange = k.setp('lt', 'u32', k.reg('pred'), idx, n);
        const v = k.mov('f32', k.reg('f32'), 0);
        k.predicated(inRange, () => k.ldGlobal('f32', v, k.elementAddress(x, idx, 4)));
        k.stShared('f32', slot, v);
        k.barSync();
        k.ifThen(isFirst, () => {
          const j = k.reg('u32');
          k.forRange(j, 0, TILE * 4, 16, () => {
            const q = k.ldShared(
              'f32',
              [k.reg('f32'), k.reg('f32'), k.reg('f32'), k.reg('f32')],
              addr(k.add('u32', k.reg('u32'), j, k.sharedAddress(tile)), 0),
            );
            for (const r of q) k.add('f32', acc, acc, r);
          });
        });
        k.barSync();
      });
      k.ifThen(isFirst, () => {
        k.stGlobal('f32', k.elementAddress(out, k.ctaid(), 4), acc);
      });
    },
    { maxThreadsPerBlock: TILE },
  );
  return m;
}

/** Warp-level sum (bfly), max (down), inclusive scan (up), broadcast (idx) and ballot. */
function warpReduce(): PtxModule {
  const m = new PtxModule();
  m.entry('warp_reduce', { x: 'ptr', sums: 'ptr', maxes: 'ptr', scan: 'ptr', votes: 'ptr' }, (k, p) => {
    const x = k.globalPointer(p.x);
    const i = k.globalThreadIndex();
    const lane = k.laneid();
    const warp = k.shr('u32', k.reg('u32'), i, 5);
    const v = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(x, i, 4), { nc: true });
    const sum = k.mov('f32', k.reg('f32'), v);
    const max = k.mov('f32', k.reg('f32'), v);
    const scan = k.mov('f32', k.reg('f32'), v);
    const t = k.reg('f32');
    const valid = k.reg('pred');
    for (const offset of [16, 8, 4, 2, 1]) {
      k.shflSync('bfly', t, sum, offset);
      k.add('f32', sum, sum, t);
      k.shflSync('down', t, max, offset, { pred: valid });
      k.predicated(valid, () => k.max('f32', max, max, t));
    }
    for (const offset of [1, 2, 4, 8, 16]) {
      k.shflSync('up', t, scan, offset, { membermask: 0xffffffff });
      const take = k.setp('ge', 'u32', k.reg('pred'), lane, offset);
      k.predicated(take, () => k.add('f32', scan, scan, t));
    }
    k.shflSync('idx', max, max, 0, { c: 31 });
    const positive = k.setp('gt', 'f32', k.reg('pred'), v, 0);
    const ballot = k.voteBallot(k.reg('u32'), positive);
    const first = k.setp('eq', 'u32', k.reg('pred'), lane, 0);
    k.ifThen(first, () => {
      k.stGlobal('f32', k.elementAddress(k.globalPointer(p.sums), warp, 4), sum);
      k.stGlobal('f32', k.elementAddress(k.globalPointer(p.maxes), warp, 4), max);
      k.stGlobal('u32', k.elementAddress(k.globalPointer(p.votes), warp, 4), ballot);
    });
    k.stGlobal('f32', k.elementAddress(k.globalPointer(p.scan), i, 4), scan);
  });
  return m;
}

/** SiLU, GELU (tanh form) and other approximations, with conversions to half and integers. */
function approxAndCvt(): PtxModule {
  const m = new PtxModule();
  m.entry('approx_cvt', { x: 'ptr', y: 'ptr', h: 'ptr', q: 'ptr', n: 'u32' }, (k, p) => {
    const x = k.globalPointer(p.x);
    const y = k.globalPointer(p.y);
    const h = k.globalPointer(p.h);
    const q = k.globalPointer(p.q);
    const n = k.ldParam(p.n);
    k.gridStrideLoop(n, (i) => {
      const v = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(x, i, 4));
      // silu(v) = v / (1 + 2^(-v log2 e))
      const e = k.ex2(k.reg('f32'), k.mul('f32', k.reg('f32'), v, -LOG2E), { ftz: true });
      const silu = k.mul(
        'f32',
        k.reg('f32'),
        v,
        k.rcp(k.reg('f32'), k.add('f32', k.reg('f32'), e, 1), 'approx'),
      );
      // gelu(v) = 0.5 v (1 + tanh(0.79788456 (v + 0.044715 v^3)))
      const v3 = k.mul('f32', k.reg('f32'), k.mul('f32', k.reg('f32'), v, v), v);
      const inner = k.mul('f32', k.reg('f32'), k.fma('f32', k.reg('f32'), v3, 0.044715, v), 0.7978845608);
      const gelu = k.mul(
        'f32',
        k.reg('f32'),
        k.fma('f32', k.reg('f32'), k.tanh(k.reg('f32'), inner), 0.5, 0.5),
        v,
      );
      const mag = k.abs('f32', k.reg('f32'), v);
      const logs = k.lg2(k.reg('f32'), mag);
      const root = k.sqrt(k.reg('f32'), mag, 'rn');
      const inv = k.rsqrt(k.reg('f32'), mag);
      const exact = k.rcp(k.reg('f32'), root, 'rn');
      const fast = k.div('f32', k.reg('f32'), logs, inv, 'approx');
      const full = k.div('f32', k.reg('f32'), silu, gelu, 'full');
      const ieee = k.div('f32', k.reg('f32'), exact, fast, 'rn');
      const wave = k.add('f32', k.reg('f32'), k.sin(k.reg('f32'), v), k.cos(k.reg('f32'), v));
      const out = k.add('f32', k.reg('f32'), k.add('f32', k.reg('f32'), full, ieee), wave, { rnd: 'rn' });
      k.stGlobal('f32', k.elementAddress(y, i, 4), k.neg('f32', k.reg('f32'), out));
      const half = k.cvt('f16', 'f32', k.reg('f16'), out, { rnd: 'rn' });
      k.stGlobal('b16', k.elementAddress(h, i, 2), half);
      const back = k.cvt('f32', 'f16', k.reg('f32'), half);
      const rounded = k.cvt('f32', 'f32', k.reg('f32'), back, { rnd: 'rni' });
      const asInt = k.cvt('s32', 'f32', k.reg('s32'), rounded, { rnd: 'rzi', sat: false });
      const fromIndex = k.cvt('f32', 'u32', k.reg('f32'), i, { rnd: 'rn' });
      const clamped = k.cvt('s32', 'f32', k.reg('s32'), fromIndex, { rnd: 'rni' });
      const wide = k.cvt('s64', 's32', k.reg('s64'), k.add('s32', k.reg('s32'), asInt, clamped));
      const narrow = k.cvt('u16', 's64', k.reg('u16'), wide, { sat: true });
      k.stGlobal('u16', k.elementAddress(q, i, 2), narrow);
    });
  });
  return m;
}

/** bf16 conversions and NaN-propagating min/max need sm_80. */
function bf16Module(): PtxModule {
  const m = new PtxModule({ target: 'sm_80' });
  m.entry('bf16_round_trip', { x: 'ptr', n: 'u32' }, (k, p) => {
    const x = k.globalPointer(p.x);
    const n = k.ldParam(p.n);
    k.gridStrideLoop(n, (i) => {
      const at = k.elementAddress(x, i, 4);
      const v = k.ldGlobal('f32', k.reg('f32'), at);
      const b = k.cvt('bf16', 'f32', k.reg('bf16'), v, { rnd: 'rn' });
      const back = k.cvt('f32', 'bf16', k.reg('f32'), b);
      const lo = k.min('f32', k.reg('f32'), back, v, { nan: true });
      k.stGlobal('f32', at, k.max('f32', k.reg('f32'), lo, 0, { nan: true, ftz: true }));
    });
  });
  return m;
}

/** Everything else the builder emits, so that each form is checked by ptxas at least once. */
function instructionZoo(): PtxModule {
  const m = new PtxModule();
  const dyn = m.dynamicShared('dyn_smem', 16);
  m.entry(
    'zoo',
    { p: 'ptr', count: 'u64', alpha: 'f32', bias: 's32', offset: 's64' },
    (k, prm) => {
      const g = k.globalPointer(prm.p);
      const count = k.ldParam(prm.count);
      const alpha = k.ldParam(prm.alpha);
      const bias = k.ldParam(prm.bias);
      const offset = k.ldParam(prm.offset);
      const words = k.shared('words', 512, 16);
      const tid = k.tid('x');
      const ty = k.tid('y');
      const tz = k.tid('z');
      const specials = [
        k.ntid('y'),
        k.ctaid('z'),
        k.nctaid('y'),
        k.special('%warpid'),
        k.special('%smid'),
        k.special('%lanemask_lt'),
        k.special('%clock'),
      ];
      let acc = k.add('u32', k.reg('u32'), tid, ty);
      for (const s of [tz, ...specials]) acc = k.xor('b32', k.reg('u32'), acc, s);
      const a = k.reg('u32');
      k.mulHi('u32', a, acc, 0x9e3779b9);
      k.madLo('u64', k.reg('u64'), count, 3n, k.cvt('u64', 'u32', k.reg('u64'), a));
      k.mulWide('s32', k.reg('s64'), bias, -7);
      k.madWide('s16', k.reg('s32'), k.cvt('s16', 's32', k.reg('s16'), bias), 3, bias);
      k.div('u32', a, a, 3);
      k.rem('s32', bias, bias, 5);
      k.min('s64', offset, offset, -1);
      k.max('u32', a, a, 1);
      k.neg('s32', bias, bias);
      k.abs('s64', offset, offset);
      k.sub('s64', offset, offset, 2);
      k.and('b64', offset, offset, 0xffffn);
      k.or('b32', a, a, 0x80000000);
      k.not('b32', a, a);
      k.shl('b64', offset, offset, 3);
      k.shr('s32', bias, bias, 1);
      k.shr('b64', offset, offset, a);
      const p1 = k.setp('lo', 'u32', k.reg('pred'), a, 10);
      const p2 = k.setp('hs', 'u64', k.reg('pred'), count, 1n);
      const p3 = k.setp('nan', 'f32', k.reg('pred'), alpha, alpha);
      const p4 = k.setp('ltu', 'f32', k.reg('pred'), alpha, 0.5, { ftz: true });
      const both = k.and('pred', k.reg('pred'), p1, p2);
      const either = k.or('pred', k.reg('pred'), p3, p4);
      k.not('pred', both, both);
      k.xor('pred', either, either, both);
      k.vote('any', k.reg('pred'), either);
      k.vote('all', k.reg('pred'), both, 0x0000ffff);
      const chosen = k.selp('f32', k.reg('f32'), alpha, -1.5, either);
      k.selp('u64', k.reg('u64'), count, 0n, both);
      k.mov('pred', k.reg('pred'), both);
      k.mov('b32', k.reg('u32'), chosen);
      k.mov('b16', k.reg('b16'), 0xffff);
      // Memory forms: global, shared, dynamic shared, vectors, immediates and atomics.
      const half = k.ldGlobal('u16', k.reg('u16'), addr(g, 2));
      k.stGlobal('b16', addr(g, 4), half);
      k.stGlobal('u32', addr(g, 8), 7);
      k.stGlobal('s64', addr(g, 16), offset, { cache: 'wt' });
      const pair = k.ldGlobal('u64', [k.reg('u64'), k.reg('u64')], addr(g, 32), { cache: 'cg' });
      k.stShared('u64', addr(words, 16), pair);
      k.ldShared('u32', [k.reg('u32'), k.reg('u32')], addr(words, 8));
      k.stShared('f32', addr(dyn, 4), chosen);
      const slot = k.madLo('u32', k.reg('u32'), tid, 4, k.sharedAddress(words));
      k.stShared('u32', slot, 0);
      k.barSync(1, 64);
      k.atom('shared', 'add', 'u32', k.reg('u32'), slot, 1);
      k.atom('shared', 'inc', 'u32', k.reg('u32'), words, 100);
      k.atom('global', 'add', 'f32', k.reg('f32'), addr(g, 64), alpha);
      k.atom('global', 'max', 's32', k.reg('s32'), addr(g, 68), bias);
      k.atom('global', 'exch', 'b64', k.reg('u64'), addr(g, 72), count);
      k.atomCas('global', 'b32', k.reg('u32'), addr(g, 80), 0, a);
      k.atomCas('shared', 'b64', k.reg('u64'), addr(words, 128), 0n, count);
      k.red('global', 'add', 'u64', addr(g, 88), count);
      k.red('shared', 'or', 'b32', slot, 1);
      k.membar('gl');
      k.fence('acq_rel', 'gpu');
      k.fence('sc', 'cta');
      k.warpSync();
      k.barSync();
      // 64-bit signed loop with a register bound and early exit.
      const j = k.reg('s64');
      k.forRange(
        j,
        offset,
        count,
        4,
        (loop) => {
          const stop = k.setp('eq', 's64', k.reg('pred'), j, 40);
          k.braIf(stop, loop.exit);
          const skip = k.setp('eq', 's64', k.reg('pred'), j, 8);
          k.braIf(skip, loop.next);
          k.red('global', 'add', 'u64', addr(g, 96), 1);
        },
        { signed: true },
      );
      const odd = k.setp('ne', 'b32', k.reg('pred'), k.and('b32', k.reg('u32'), tid, 1), 0);
      k.ifElse(
        odd,
        () => k.stGlobal('f32', addr(g, 100), alpha),
        () => k.stGlobal('f32', addr(g, 104), chosen),
      );
      const done = k.label('done');
      k.braIfNot(odd, done);
      k.comment('odd threads only');
      k.place(done);
      k.ret();
    },
    { maxThreadsPerBlock: [32, 4, 2], minBlocksPerSm: 1 },
  );
  return m;
}

const KERNELS: readonly (readonly [string, () => PtxModule])[] = [
  ['vector add with v4 loads', vectorAddV4],
  ['shared-memory tiled loop', tiledSum],
  ['warp reduction with shfl.sync', warpReduce],
  ['ex2/rcp/tanh approximations and cvt', approxAndCvt],
  ['bf16 conversions (sm_80)', bf16Module],
  ['instruction zoo', instructionZoo],
];

const gate = ptxasTestGate();
if (gate.skip) console.warn(`ptxas tests skipped: ${gate.reason}`);

describe.skipIf(gate.skip)(`kernels assemble with ptxas (${gate.reason})`, () => {
  for (const [name, build] of KERNELS) {
    const claimed = build().target;
    for (const arch of [...new Set([claimed, 'sm_90'])]) {
      it(`${name}: -arch=${arch}`, () => {
        const result = assemblePtx(build().emit(), arch);
        expect(result.log).toBe('');
        expect(result.ok).toBe(true);
        expect(result.exitCode).toBe(0);
      });
    }
  }

  it('reports resource usage with verbose', () => {
    const result = assemblePtx(tiledSum().emit(), 'sm_90', { verbose: true });
    expect(result.ok).toBe(true);
    expect(result.log).toMatch(/Used \d+ registers/);
  });

  it('returns the log of a failed assembly without the temporary path', () => {
    const bad = `${new PtxModule().emit()}\n.visible .entry broken()\n{\n  add.u32 %r0, %r1, 1;\n}\n`;
    const result = assemblePtx(bad, 'sm_90');
    expect(result.ok).toBe(false);
    expect(result.log).toContain('<ptx>');
    expect(result.log).toMatch(/error/);
    expect(() => assemblePtxOrThrow(bad, 'sm_90', { kernel: 'broken' })).toThrow(KernelCompileError);
  });

  it('finds ptxas and reads its version', () => {
    const status = findPtxas();
    expect(status.available).toBe(true);
    if (status.available) expect(status.version).toMatch(/^\d+\.\d+/);
  });
});

describe('ptxas discovery', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('reports a missing ptxas with a reason', () => {
    const status = findPtxas({ PATH: '' });
    expect(status).toEqual({
      available: false,
      reason: 'ptxas not found on PATH, under $CUDA_HOME/bin or $CUDA_PATH/bin (install the CUDA toolkit)',
    });
  });

  it.skipIf(process.platform === 'win32')('finds ptxas under $CUDA_HOME/bin', () => {
    const home = mkdtempSync(join(tmpdir(), 'rayo-cuda-home-'));
    dirs.push(home);
    mkdirSync(join(home, 'bin'));
    const exe = join(home, 'bin', 'ptxas');
    writeFileSync(exe, '#!/bin/sh\necho "Cuda compilation tools, release 12.4, V12.4.131"\n');
    chmodSync(exe, 0o755);
    expect(findPtxas({ PATH: '', CUDA_HOME: home })).toEqual({ available: true, path: exe, version: '12.4' });
  });

  it('fails rather than skips under CI=true when ptxas is missing', () => {
    expect(ptxasTestGate({ PATH: '', CI: 'true' })).toMatchObject({ required: true, skip: false });
    expect(ptxasTestGate({ PATH: '' })).toMatchObject({ required: false, skip: true });
  });

  it('rejects an invalid architecture before running anything', () => {
    expect(() => assemblePtx('', 'sm90')).toThrow(InvalidArgumentError);
  });

  it('throws BackendUnavailableError when the ptxas binary cannot run', () => {
    const missing = join(tmpdir(), 'rayo-no-such-dir', 'ptxas');
    expect(() => assemblePtx(new PtxModule().emit(), 'sm_90', { ptxas: missing })).toThrow(
      BackendUnavailableError,
    );
  });
});
