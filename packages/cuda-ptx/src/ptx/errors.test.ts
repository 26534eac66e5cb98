import { InvalidArgumentError, RayoError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import type { KernelBuilder } from './kernel.js';
import { PtxModule } from './module.js';
import { addr, type F32, type Label, type R32 } from './operands.js';

/** Runs `body` in a fresh entry and returns what it threw. */
function thrown(body: (k: KernelBuilder) => void, module = new PtxModule()): InvalidArgumentError {
  try {
    module.entry('k', { n: 'u32' }, (k) => body(k));
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect(e).toBeInstanceOf(RayoError);
    return e as InvalidArgumentError;
  }
  throw new Error('expected the builder to throw');
}

describe('builder misuse', () => {
  it('rejects a register of the wrong type, naming the call and both types', () => {
    const e = thrown((k) => {
      const f = k.reg('f32');
      k.add('u32', f as unknown as R32, 1, 2);
    });
    expect(e.operation).toBe('KernelBuilder.add');
    expect(e.argument).toBe('d');
    expect(e.expected).toBe('.b32 register for .u32');
    expect(e.actual).toBe('.f32 register %f0');
    expect(e.message).toBe(
      "KernelBuilder.add: argument 'd': register of the wrong type in entry 'k' (expected .b32 register for .u32, got .f32 register %f0)",
    );
  });

  it('rejects a wrong-type source operand and a non-register destination', () => {
    const e = thrown((k) => k.fma('f32', k.reg('f32'), k.reg('u32') as unknown as F32, 1, 2));
    expect([e.operation, e.argument, e.actual]).toEqual(['KernelBuilder.fma', 'a', '.b32 register %r0']);
    const d = thrown((k) => k.mov('u32', 3 as unknown as R32, 1));
    expect([d.operation, d.argument, d.actual]).toEqual(['KernelBuilder.mov', 'd', 'number 3']);
  });

  it('rejects a prmt selector outside four nibbles of 0 to 7 and a dp4a byte type other than u32 or s32', () => {
    const p = thrown((k) => k.prmt(k.reg('u32'), 1, 2, 0x8000));
    expect([p.operation, p.argument, p.actual]).toEqual(['KernelBuilder.prmt', 'selector', String(0x8000)]);
    const d = thrown((k) => k.dp4a('u16' as 'u32', 's32', k.reg('u32'), 1, 2, 0));
    expect([d.operation, d.argument]).toEqual(['KernelBuilder.dp4a', 'atype']);
    const module = new PtxModule();
    module.entry('ok', {}, (k) => {
      const r = k.reg('u32');
      k.prmt(r, r, r, 0x5410);
      k.dp4a('u32', 's32', r, r, r, r);
    });
    const text = module.emit();
    expect(text).toContain('prmt.b32 %r0, %r0, %r0, 0x5410;');
    expect(text).toContain('dp4a.u32.s32 %r0, %r0, %r0, %r0;');
  });

  it('rejects a duplicate entry name', () => {
    const m = new PtxModule();
    m.entry('dup', {}, () => {});
    expect(() => m.entry('dup', {}, () => {})).toThrow(InvalidArgumentError);
    expect(() => m.entry('dup', {}, () => {})).toThrow(
      "PtxModule.entry: argument 'name': duplicate name in module (expected a name not yet used by an entry or shared variable of the module, got 'dup')",
    );
  });

  it('rejects a branch to a label that is never placed', () => {
    const e = thrown((k) => k.bra(k.label('done')));
    expect(e.operation).toBe('KernelBuilder.bra');
    expect(e.message).toContain('never placed');
    expect(e.expected).toBe('$L__done0 placed with place()');
    const pred = thrown((k) => k.braIfNot(k.reg('pred'), k.label()));
    expect(pred.actual).toBe('$L__L0 never placed');
  });

  it('rejects placing a label twice and labels of another entry', () => {
    expect(
      thrown((k) => {
        const l = k.label();
        k.place(l);
        k.place(l);
      }).operation,
    ).toBe('KernelBuilder.place');
    const m = new PtxModule();
    let foreign: Label | undefined;
    m.entry('a', {}, (k) => {
      foreign = k.label();
      k.place(foreign);
    });
    const e = thrown((k) => k.bra(foreign!), m);
    expect(e.expected).toBe("a label made by label() in entry 'k'");
  });

  it('rejects registers, parameters and shared memory of another entry', () => {
    const m = new PtxModule();
    let r: R32 | undefined;
    m.entry('first', { x: 'u32' }, (k) => {
      r = k.reg('u32');
    });
    const e = thrown((k) => k.add('u32', k.reg('u32'), r!, 1), m);
    expect(e.actual).toBe(".b32 register %r0 of entry 'first'");
    expect(e.expected).toBe("a register of entry 'k'");
  });

  it('rejects use of a builder after its entry is finished', () => {
    const m = new PtxModule();
    let saved: KernelBuilder | undefined;
    m.entry('once', {}, (k) => {
      saved = k;
    });
    expect(() => saved!.ret()).toThrow(/entry 'once' is finished/);
    expect(() => saved!.reg('u32')).toThrow(/KernelBuilder\.reg/);
  });

  it('rejects immediates out of range or of the wrong kind', () => {
    const big = thrown((k) => k.mov('u32', k.reg('u32'), 2 ** 32));
    expect([big.argument, big.expected, big.actual]).toEqual(['a', '0 .. 4294967295', '4294967296']);
    expect(thrown((k) => k.mov('s32', k.reg('s32'), 1.5)).message).toContain('exact integer');
    expect(thrown((k) => k.mov('f32', k.reg('f32'), 1n as unknown as number)).expected).toBe('number');
    expect(thrown((k) => k.mov('u64', k.reg('u64'), -1)).expected).toBe('0 .. 18446744073709551615');
  });

  it('enforces cvt rounding rules', () => {
    const none = thrown((k) => k.cvt('s32', 'f32', k.reg('s32'), k.reg('f32')));
    expect([none.operation, none.argument, none.actual]).toEqual(['KernelBuilder.cvt', 'opts.rnd', 'none']);
    expect(none.expected).toBe('an integer rounding: rni, rzi, rmi or rpi');
    const wrong = thrown((k) => k.cvt('f32', 'u32', k.reg('f32'), k.reg('u32'), { rnd: 'rzi' }));
    expect(wrong.expected).toBe('a float rounding: rn, rz, rm or rp');
    const extra = thrown((k) => k.cvt('u64', 'u32', k.reg('u64'), k.reg('u32'), { rnd: 'rn' }));
    expect(extra.expected).toBe('no rounding');
  });

  it('rejects instructions the target or PTX version lacks', () => {
    const bf16 = thrown((k) => k.cvt('bf16', 'f32', k.reg('bf16'), k.reg('f32'), { rnd: 'rn' }));
    expect(bf16.expected).toBe('.target >= sm_80 and .version >= 7.0');
    expect(bf16.actual).toBe('.target sm_75, .version 8.0');
    const nan = thrown((k) => k.min('f32', k.reg('f32'), 1, 2, { nan: true }));
    expect(nan.operation).toBe('KernelBuilder.min');
    const tanh = thrown((k) => k.tanh(k.reg('f32'), 1), new PtxModule({ version: '6.5', target: 'sm_75' }));
    expect(tanh.expected).toBe('.target >= sm_75 and .version >= 7.0');
  });

  it('rejects unknown or unsupported types, modes and comparisons', () => {
    expect(thrown((k) => k.add('b32' as 'u32', k.reg('u32'), 1, 2)).argument).toBe('type');
    expect(thrown((k) => k.setp('lo', 's32', k.reg('pred'), k.reg('s32'), 0)).expected).toBe(
      'one of eq, ne, lt, le, gt, ge',
    );
    expect(thrown((k) => k.setp('lt', 'b32', k.reg('pred'), k.reg('u32'), 0)).expected).toBe('one of eq, ne');
    expect(thrown((k) => k.div('f32', k.reg('f32'), 1, 2, undefined as never)).argument).toBe('mode');
    expect(thrown((k) => k.add('u32', k.reg('u32'), 1, 2, { rnd: 'rn' })).argument).toBe('opts');
    expect(thrown((k) => k.atom('global', 'inc', 'f32', k.reg('f32'), k.reg('u64'), 1)).expected).toBe(
      'one of u32',
    );
    expect(thrown((k) => k.red('global', 'exch', 'b32', k.reg('u64'), 1)).argument).toBe('op');
    expect(thrown((k) => k.shflSync('xor' as 'bfly', k.reg('u32'), k.reg('u32'), 1)).argument).toBe('mode');
  });

  it('rejects malformed addresses and vectors', () => {
    const shared = thrown((k) => k.ldGlobal('f32', k.reg('f32'), k.shared('s', 64)));
    expect(shared.actual).toBe("shared variable 's'");
    const narrow = thrown((k) => k.ldGlobal('f32', k.reg('f32'), k.reg('u32')));
    expect([narrow.argument, narrow.actual]).toEqual(['a.base', '.b32 register %r0']);
    const v3 = thrown((k) => {
      const r = k.regs('f32', 3);
      k.ldGlobal('f32', r as unknown as [F32, F32], k.reg('u64'));
    });
    expect(v3.actual).toBe('3 registers (12 bytes)');
    const v4x64 = thrown((k) => k.ldShared('u64', k.regs('u64', 4) as never, addr(k.reg('u32'))));
    expect(v4x64.actual).toBe('4 registers (32 bytes)');
    const ncCache = thrown((k) => k.ldGlobal('f32', k.reg('f32'), k.reg('u64'), { nc: true, cache: 'lu' }));
    expect(ncCache.expected).toBe('one of ca, cg, cs');
    // L2 prefetch sizes: 256 bytes needs sm_80, and PTX 7.4 for any.
    const at = (k: KernelBuilder) => k.reg('u64');
    const big = thrown((k) => k.ldGlobal('f32', k.reg('f32'), at(k), { nc: true, prefetch: 256 }));
    expect(big.expected).toBe('.target >= sm_80 and .version >= 7.4');
    const old = new PtxModule({ version: '7.3', target: 'sm_75' });
    expect(thrown((k) => k.ldGlobal('f32', k.reg('f32'), at(k), { prefetch: 128 }), old).expected).toBe(
      '.target >= sm_75 and .version >= 7.4',
    );
    expect(thrown((k) => k.ldGlobal('f32', k.reg('f32'), at(k), { prefetch: 32 as 64 })).expected).toBe(
      'one of 64, 128, 256',
    );
    const ok = new PtxModule({ target: 'sm_80' });
    ok.entry('k', { p: 'ptr' }, (k, p) => {
      k.ldGlobal('f32', k.regs('f32', 4), k.globalPointer(p.p), { nc: true, prefetch: 256 });
      k.ldGlobal('f32', k.reg('f32'), k.globalPointer(p.p), { prefetch: 64 });
    });
    expect(ok.emit()).toMatch(/ld\.global\.nc\.L2::256B\.v4\.f32 \{/);
    expect(ok.emit()).toMatch(/ld\.global\.L2::64B\.f32 /);
  });

  it('rejects bad structured-helper arguments', () => {
    expect(thrown((k) => k.forRange(k.reg('u32'), 0, 10, 0, () => {})).expected).toBe('a positive step');
    expect(thrown((k) => k.forRange(k.reg('f32') as unknown as R32, 0, 10, 1, () => {})).argument).toBe(
      'counter',
    );
    const nested = thrown((k) => {
      const p = k.reg('pred');
      k.predicated(p, () => k.ifThen(p, () => {}));
    });
    expect(nested.operation).toBe('KernelBuilder.ifThen');
    expect(thrown((k) => k.barSync(0, 48)).expected).toBe('a multiple of 32');
  });

  it('rejects bad names, parameters, shared declarations and module options', () => {
    const m = new PtxModule();
    expect(() => m.entry('1bad', {}, () => {})).toThrow(/invalid name/);
    expect(() => m.entry('k', { 'a-b': 'u32' }, () => {})).toThrow(/invalid parameter name/);
    expect(() => m.entry('k', { a: 'f16' as 'u32' }, () => {})).toThrow(/unsupported parameter type/);
    expect(thrown((k) => k.shared('k', 16)).message).toContain('duplicate name');
    expect(
      thrown((k) => {
        k.shared('t', 16);
        k.sharedArray('t', 'f32', 4);
      }).operation,
    ).toBe('KernelBuilder.sharedArray');
    expect(thrown((k) => k.shared('t', 16, 3)).argument).toBe('align');
    expect(() => new PtxModule({ target: 'sm_70' })).toThrow(/unknown target architecture/);
    expect(() => new PtxModule({ target: 'sm_90a', version: '7.8' })).toThrow(
      "PtxModule: argument 'version': target sm_90a needs a newer PTX ISA version (expected >= 8.0, got 7.8)",
    );
    expect(() => new PtxModule({ version: '8' })).toThrow(/malformed PTX ISA version/);
    expect(() => new PtxModule({ addressSize: 32 as 64 })).toThrow(/unsupported address size/);
    expect(() => m.entry('launch', {}, () => {}, { maxThreadsPerBlock: 0 })).toThrow(/invalid block size/);
  });

  it('leaves the module unchanged when an entry body throws', () => {
    const m = new PtxModule();
    expect(() =>
      m.entry('broken', {}, () => {
        throw new Error('boom');
      }),
    ).toThrow('boom');
    m.entry('broken', {}, () => {});
    expect(m.entries.map((e) => e.name)).toEqual(['broken']);
  });
});
