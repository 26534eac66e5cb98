import { builderError, expectAssemblesCleanly } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import type { KernelBuilder } from './kernel.js';
import { MMA_SHAPES } from './mmaFragments.js';
import { PtxModule } from './module.js';
import { addr, type F32, type R32 } from './operands.js';
import { ptxasTestGate } from './ptxas.js';

/** One entry exercising every tensor-core and async-copy instruction the builder has. */
function matrixZoo(target: string): PtxModule {
  const m = new PtxModule({ target });
  m.entry('zoo', { src: 'ptr', dst: 'ptr', n: 'u32' }, (k, p) => {
    const src = k.globalPointer(p.src);
    const dst = k.globalPointer(p.dst);
    const n = k.ldParam(p.n);
    const tile = k.shared('tile', 1024, 128);
    const tid = k.tid();
    const offset = k.shl('b32', k.reg('u32'), tid, 4);
    const swizzled = k.swizzle('128B', k.reg('u32'), offset);
    const slot = k.add('u32', k.reg('u32'), k.sharedAddress(tile), swizzled);
    const from = k.elementAddress(src, tid, 16);
    k.cpAsync('cg', slot, from, 16);
    k.cpAsync('ca', addr(slot, 0), from, 8, { srcBytes: n });
    k.cpAsync('ca', slot, addr(from, 4), 4, { srcBytes: 4 });
    k.cpAsyncCommitGroup();
    k.cpAsyncWaitGroup(1);
    k.cpAsyncWaitAll();
    k.barSync();
    const a = k.ldmatrix(4, k.regs('u32', 4), slot);
    const b = k.ldmatrix(2, k.regs('u32', 2), slot, { trans: true });
    const one = k.ldmatrix(1, k.regs('u32', 1), addr(tile, 16));
    const acc = k.regs('f32', 4);
    for (const r of acc) k.mov('f32', r, 0);
    k.mmaSync('m16n8k16', 'f16', acc, a, b, acc);
    k.mmaSync('m16n8k16', 'bf16', acc, a, [b[0], one[0]], acc);
    const x = k.ldGlobal('f32', k.reg('f32'), from);
    const t = k.cvtTf32(k.reg('u32'), x);
    k.mmaSync('m16n8k8', 'tf32', acc, [t, t, t, t], [t, t], acc);
    const pair = k.cvtPack('bf16', k.reg('u32'), acc[0], acc[1]);
    const halves = k.cvtPack('f16', k.reg('u32'), acc[2], acc[3]);
    const lo = k.reg('b16');
    const hi = k.reg('b16');
    k.unpackHalves(lo, hi, pair);
    const swapped = k.packHalves(k.reg('u32'), hi, lo);
    const { groupId, threadInGroup } = k.mmaLaneCoordinates();
    const index = k.madLo('u32', k.reg('u32'), groupId, 4, threadInGroup);
    k.stGlobal('b32', k.elementAddress(dst, index, 8), [swapped, halves]);
  });
  return m;
}

function entryLines(m: PtxModule): string[] {
  return m
    .emit()
    .split('\n')
    .map((l) => l.trim());
}

describe('tensor-core and async-copy instructions', () => {
  it('emits each instruction in PTX syntax', () => {
    const lines = entryLines(matrixZoo('sm_80'));
    for (const expected of [
      'cp.async.cg.shared.global [%r6], [%rd4], 16;',
      'cp.async.ca.shared.global [%r6], [%rd4], 8, %r0;',
      'cp.async.ca.shared.global [%r6], [%rd4+4], 4, 4;',
      'cp.async.commit_group;',
      'cp.async.wait_group 1;',
      'cp.async.wait_all;',
      'ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r8, %r9, %r10, %r11}, [%r6];',
      'ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r12, %r13}, [%r6];',
      'ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r14}, [tile+16];',
      'mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0, %f1, %f2, %f3}, {%r8, %r9, %r10, %r11}, {%r12, %r13}, {%f0, %f1, %f2, %f3};',
      'mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f0, %f1, %f2, %f3}, {%r8, %r9, %r10, %r11}, {%r12, %r14}, {%f0, %f1, %f2, %f3};',
      'cvt.rna.tf32.f32 %r15, %f4;',
      'mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%f0, %f1, %f2, %f3}, {%r15, %r15, %r15, %r15}, {%r15, %r15}, {%f0, %f1, %f2, %f3};',
      // The first source of cvt.rn.*x2 is the upper half.
      'cvt.rn.bf16x2.f32 %r16, %f1, %f0;',
      'cvt.rn.f16x2.f32 %r17, %f3, %f2;',
      'mov.b32 {%rs0, %rs1}, %r16;',
      'mov.b32 %r18, {%rs1, %rs0};',
      'mov.u32 %r19, %laneid;',
      'shr.u32 %r20, %r19, 2;',
      'and.b32 %r21, %r19, 3;',
    ]) {
      expect(lines).toContain(expected);
    }
  });

  it('emits the swizzle as shift, mask and xor, and a move for none', () => {
    const m = new PtxModule();
    m.entry('s', { n: 'u32' }, (k, p) => {
      const n = k.ldParam(p.n);
      k.swizzle('64B', k.reg('u32'), n);
      k.swizzle('none', k.reg('u32'), n);
    });
    const lines = entryLines(m);
    const body = lines.slice(lines.indexOf('shr.u32 %r3, %r0, 3;'), lines.indexOf('ret;'));
    expect(body).toEqual([
      'shr.u32 %r3, %r0, 3;',
      'and.b32 %r2, %r3, 48;',
      'xor.b32 %r1, %r0, %r2;',
      'mov.u32 %r4, %r0;',
    ]);
  });
});

const misuse = (body: (k: KernelBuilder) => void, target = 'sm_80') => builderError(body, { target });

describe('fragment element offsets', () => {
  it('emits row · rowBytes + col · elementBytes from groupID and threadInGroup', () => {
    const m = new PtxModule({ target: 'sm_80' });
    m.entry('offsets', {}, (k) => {
      // Element 2 of the accumulator: row groupID + 8, column 2 · threadInGroup.
      k.mmaElementOffset(k.mmaLaneCoordinates(), MMA_SHAPES.m16n8k16.c[2]!, 32, 4);
    });
    const body = entryLines(m);
    const start = body.indexOf('mov.u32 %r0, %laneid;');
    expect(body.slice(start, body.indexOf('ret;'))).toEqual([
      'mov.u32 %r0, %laneid;',
      'shr.u32 %r1, %r0, 2;',
      'and.b32 %r2, %r0, 3;',
      'mad.lo.u32 %r3, %r1, 1, 8;',
      'mad.lo.u32 %r4, %r2, 2, 0;',
      'mul.lo.u32 %r4, %r4, 4;',
      'mad.lo.u32 %r5, %r3, 32, %r4;',
    ]);
  });
});

describe('tensor-core builder misuse', () => {
  const fragments = (k: KernelBuilder) => ({
    d: k.regs('f32', 4),
    a: k.regs('u32', 4),
    b: k.regs('u32', 2),
  });

  it('needs sm_80 for mma.sync, cp.async and the packed conversions', () => {
    const e = misuse((k) => {
      const { d, a, b } = fragments(k);
      k.mmaSync('m16n8k16', 'bf16', d, a, b, d);
    }, 'sm_75');
    expect(e.operation).toBe('KernelBuilder.mmaSync');
    expect(e.expected).toBe('.target >= sm_80 and .version >= 7.0');
    expect(e.actual).toBe('.target sm_75, .version 8.0');
    expect(misuse((k) => k.cpAsyncCommitGroup(), 'sm_75').operation).toBe('KernelBuilder.cpAsyncCommitGroup');
    expect(misuse((k) => k.cvtTf32(k.reg('u32'), k.reg('f32')), 'sm_75').operation).toBe(
      'KernelBuilder.cvtTf32',
    );
    expect(misuse((k) => k.cvtPack('f16', k.reg('u32'), k.reg('f32'), k.reg('f32')), 'sm_75').operation).toBe(
      'KernelBuilder.cvtPack',
    );
    // ldmatrix is a Turing instruction.
    expect(() =>
      new PtxModule({ target: 'sm_75' }).entry('k', {}, (k) => {
        k.ldmatrix(1, k.regs('u32', 1), k.reg('u32'));
      }),
    ).not.toThrow();
  });

  it('rejects input types a shape does not take', () => {
    const e = misuse((k) => {
      const { d, a, b } = fragments(k);
      k.mmaSync('m16n8k8', 'bf16', d, a, b, d);
    });
    expect([e.argument, e.expected, e.actual]).toEqual(['type', 'one of tf32', "'bf16'"]);
    const shape = misuse((k) => {
      const { d, a, b } = fragments(k);
      k.mmaSync('m16n16k16' as 'm16n8k16', 'f16', d, a, b, d);
    });
    expect(shape.argument).toBe('shape');
  });

  it('rejects fragments of the wrong register count or type', () => {
    const count = misuse((k) => {
      const { d, a } = fragments(k);
      k.mmaSync('m16n8k16', 'f16', d, a, k.regs('u32', 4) as unknown as [R32, R32], d);
    });
    expect(count.message).toContain('wrong fragment register count');
    expect([count.argument, count.expected, count.actual]).toEqual(['b', '2 registers', '4 registers']);
    const type = misuse((k) => {
      const { d, b } = fragments(k);
      k.mmaSync('m16n8k16', 'f16', d, k.regs('f32', 4) as unknown as [R32, R32, R32, R32], b, d);
    });
    expect([type.argument, type.actual]).toEqual(['a[0]', '.f32 register %f4']);
    const acc = misuse((k) => {
      const { a, b } = fragments(k);
      const c = k.regs('u32', 4) as unknown as [F32, F32, F32, F32];
      k.mmaSync('m16n8k16', 'f16', c, a, b, c);
    });
    expect(acc.argument).toBe('d[0]');
    const ld = misuse((k) =>
      k.ldmatrix(4, k.regs('u32', 2) as unknown as [R32, R32, R32, R32], k.reg('u32')),
    );
    expect([ld.operation, ld.argument, ld.actual]).toEqual(['KernelBuilder.ldmatrix', 'd', '2 registers']);
    expect(misuse((k) => k.ldmatrix(3 as 4, k.regs('u32', 4), k.reg('u32'))).argument).toBe('count');
  });

  it('rejects cp.async sizes, caches and source sizes PTX does not have', () => {
    const cg = misuse((k) => k.cpAsync('cg', k.reg('u32'), k.reg('u64'), 8));
    expect([cg.argument, cg.expected]).toEqual(['bytes', 'one of 16']);
    expect(misuse((k) => k.cpAsync('cs' as 'ca', k.reg('u32'), k.reg('u64'), 4)).argument).toBe('cache');
    const src = misuse((k) => k.cpAsync('ca', k.reg('u32'), k.reg('u64'), 8, { srcBytes: 9 }));
    expect([src.argument, src.expected]).toEqual(['opts.srcBytes', 'an integer in 0 .. 8']);
    const space = misuse((k) => k.cpAsync('cg', k.reg('u32'), k.shared('s', 16), 16));
    expect(space.argument).toBe('src');
    expect(misuse((k) => k.cpAsyncWaitGroup(-1)).argument).toBe('n');
  });

  it('rejects element sizes of zero', () => {
    const e = misuse((k) => k.mmaElementOffset(k.mmaLaneCoordinates(), MMA_SHAPES.m16n8k8.a[0]!, 32, 0));
    expect([e.operation, e.argument]).toEqual(['KernelBuilder.mmaElementOffset', 'elementBytes']);
  });

  it('rejects an unknown swizzle', () => {
    const e = misuse((k) => k.swizzle('256B' as '128B', k.reg('u32'), k.reg('u32')));
    expect([e.operation, e.argument]).toEqual(['KernelBuilder.swizzle', 'swizzle']);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`tensor-core instructions assemble with ptxas (${gate.reason})`, () => {
  for (const arch of ['sm_80', 'sm_90']) {
    it(`-arch=${arch}`, () => {
      expectAssemblesCleanly(matrixZoo(arch).emit(), arch);
    });
  }
});
