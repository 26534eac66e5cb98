import type { CUresult, HostBlock } from '@rayo/cuda-ptx';
import { expectAllAssembleCleanly, FakeLibCuda } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { cudaOptionsFromEnvironment } from '../environment.js';
import { castModule } from '../kernels/cast.js';
import { binaryModule } from '../kernels/elementwise.js';
import { flashMmaForwardModule } from '../kernels/flashAttentionMma.js';
import { DEPENDENT_LAUNCH_PROLOGUE, PtxModule } from '../ptx/module.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { CudaDriver } from './driver.js';
import {
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
  LAUNCH_CONFIG_BYTES,
} from './launchConfig.js';
import { CU_DEVICE_ATTRIBUTE } from './libcuda.js';

interface DecodedConfig {
  readonly grid: number[];
  readonly block: number[];
  readonly sharedBytes: number;
  readonly stream: bigint;
  readonly attrs: bigint;
  readonly numAttrs: number;
  readonly attributeId: number;
  readonly attributeValue: number;
}

/** The fake with `cuLaunchKernelEx`: decodes the CUlaunchConfig as cuda.h lays it out, then launches. */
class FakeWithLaunchEx extends FakeLibCuda {
  readonly blocks = new Map<bigint, HostBlock>();
  readonly configs: DecodedConfig[] = [];

  override allocHost(bytes: number): HostBlock {
    const block = super.allocHost(bytes);
    this.blocks.set(block.address, block);
    return block;
  }

  cuLaunchKernelEx(config: bigint, fn: bigint, kernelParams: bigint): CUresult {
    this.calls.push('cuLaunchKernelEx');
    const block = this.blocks.get(config)!;
    const v = new DataView(block.bytes.buffer, block.bytes.byteOffset, LAUNCH_CONFIG_BYTES);
    const u32 = (at: number) => v.getUint32(at, true);
    const attrs = v.getBigUint64(40, true);
    const at = Number(attrs - config);
    const decoded: DecodedConfig = {
      grid: [u32(0), u32(4), u32(8)],
      block: [u32(12), u32(16), u32(20)],
      sharedBytes: u32(24),
      stream: v.getBigUint64(32, true),
      attrs,
      numAttrs: u32(48),
      attributeId: u32(at),
      attributeValue: v.getInt32(at + 8, true),
    };
    this.configs.push(decoded);
    const [gx, gy, gz] = decoded.grid as [number, number, number];
    const [bx, by, bz] = decoded.block as [number, number, number];
    return this.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, decoded.sharedBytes, decoded.stream, kernelParams);
  }
}

function oneEntry(): PtxModule {
  const m = new PtxModule();
  m.entry('scale', { x: 'ptr', n: 'u32' }, (k, p) => {
    k.globalPointer(p.x);
    k.ldParam(p.n);
  });
  return m;
}

describe('programmatic dependent launch', () => {
  it('emits the prologue first in every entry and raises the target, the plain text unchanged', () => {
    const m = new PtxModule({ target: 'sm_80', version: '7.0' });
    m.entry('a', { x: 'ptr' }, (k, p) => {
      k.ldParam(p.x);
    });
    m.entry('b', {}, () => {});
    const plain = m.emit();
    const dependent = m.emit({ dependentLaunch: true });
    expect(plain).toContain('.version 7.0\n.target sm_80');
    expect(plain).not.toContain('griddepcontrol');
    expect(dependent).toContain('.version 7.8\n.target sm_90');
    // Each entry: the prologue right after `{` and the declarations, before the first instruction.
    for (const entry of ['a', 'b']) {
      const body = dependent.slice(dependent.indexOf(`.entry ${entry}(`));
      const afterBrace = body
        .slice(body.indexOf('{') + 2)
        .split('\n')
        .filter((l) => l.trim() !== '' && !l.trim().startsWith('.reg'));
      expect(afterBrace.slice(0, DEPENDENT_LAUNCH_PROLOGUE.length).map((l) => l.trim())).toEqual(
        DEPENDENT_LAUNCH_PROLOGUE,
      );
    }
    expect(
      dependent
        .replaceAll(/ {2}griddepcontrol\.[a-z_]+;\n/g, '')
        .replace('.version 7.8\n.target sm_90', '.version 7.0\n.target sm_80'),
    ).toBe(plain);
    const hopper = new PtxModule({ target: 'sm_90a', version: '8.0' });
    hopper.entry('c', {}, () => {});
    expect(hopper.emit({ dependentLaunch: true })).toContain('.version 8.0\n.target sm_90a');
  });

  it('on sm_90 with cuLaunchKernelEx: modules carry the prologue and launches set programmatic serialization', () => {
    const fake = new FakeWithLaunchEx();
    const driver = new CudaDriver(fake);
    expect(driver.dependentLaunch).toBe(true);
    const fn = driver.loadFunction('k/dependent', 'scale', oneEntry);
    expect(fake.images.at(-1)).toContain('griddepcontrol.wait;');
    const stream = driver.createStream();
    driver.launch(fn, [7, 2, 1], [128, 1, 1], 256, stream, [0x1000n, 5]);
    driver.launch(fn, [3, 1, 1], [64, 2, 1], 0, stream, [0x2000n, 9]);
    expect(fake.configs).toHaveLength(2);
    const [first, second] = fake.configs;
    expect(first).toMatchObject({
      grid: [7, 2, 1],
      block: [128, 1, 1],
      sharedBytes: 256,
      stream,
      numAttrs: 1,
    });
    expect(second).toMatchObject({ grid: [3, 1, 1], block: [64, 2, 1], sharedBytes: 0, stream });
    expect(first!.attributeId).toBe(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
    expect(first!.attributeValue).toBe(1);
    expect(fake.launches.map((l) => l.args.n)).toEqual([5, 9]);
    // Every launch went through cuLaunchKernelEx (the fake forwards each to its cuLaunchKernel).
    expect(fake.calls.filter((c) => c === 'cuLaunchKernelEx')).toHaveLength(2);
    driver.dispose();
  });

  it('off when asked, before sm_90, or without cuLaunchKernelEx: plain text and plain launches', () => {
    const asked = new FakeWithLaunchEx();
    const older = new FakeWithLaunchEx();
    older.attributes.set(CU_DEVICE_ATTRIBUTE.COMPUTE_CAPABILITY_MAJOR, 8);
    const without = new FakeLibCuda();
    for (const [fake, driver] of [
      [asked, new CudaDriver(asked, 0, Number.POSITIVE_INFINITY, false)],
      [older, new CudaDriver(older)],
      [without, new CudaDriver(without)],
    ] as const) {
      expect(driver.dependentLaunch).toBe(false);
      const fn = driver.loadFunction('k/plain', 'scale', oneEntry);
      expect(fake.images.at(-1)).not.toContain('griddepcontrol');
      driver.launch(fn, [1, 1, 1], [32, 1, 1], 0, driver.createStream(), [0x1000n, 1]);
      expect(fake.calls).toContain('cuLaunchKernel');
      expect(fake.calls).not.toContain('cuLaunchKernelEx');
      driver.dispose();
    }
  });

  it('triggers dependents first only in entries that ask, under an early-trigger emit', () => {
    const m = new PtxModule();
    m.entry('short', { x: 'ptr' }, (k, p) => void k.ldParam(p.x), { triggerDependents: true });
    m.entry('long', { x: 'ptr' }, (k, p) => void k.ldParam(p.x));
    const entryOf = (text: string, name: string) => text.slice(text.indexOf(`.entry ${name}(`));
    const early = m.emit({ dependentLaunch: true, earlyTrigger: true });
    const short = entryOf(early, 'short');
    expect(short).toMatch(/ {2}griddepcontrol\.launch_dependents;\n {2}griddepcontrol\.wait;\n/);
    expect(short.indexOf('launch_dependents')).toBeLessThan(short.indexOf('ld.param'));
    expect(early.match(/launch_dependents/g)).toHaveLength(1);
    expect(m.emit({ dependentLaunch: true })).not.toContain('launch_dependents');
    expect(m.emit({ earlyTrigger: true })).not.toContain('griddepcontrol');
    // The driver emits with the trigger where opened with it.
    const fake = new FakeWithLaunchEx();
    const driver = new CudaDriver(fake, 0, Number.POSITIVE_INFINITY, true, true);
    driver.loadFunction('k/early', 'short', () => m);
    expect(fake.images.at(-1)).toContain('griddepcontrol.launch_dependents;');
    driver.dispose();
  });

  it('waits where a body places the wait: after what it may read early, once, at the top level', () => {
    const m = new PtxModule();
    m.entry('gemv', { w: 'ptr', x: 'ptr' }, (k, p) => {
      k.prefetchL2(k.globalPointer(p.w));
      k.dependencyWait();
      k.ldGlobal('f32', k.reg('f32'), k.globalPointer(p.x));
    });
    const dependent = m.emit({ dependentLaunch: true });
    expect(dependent.match(/griddepcontrol\.wait;/g)).toHaveLength(1);
    expect(dependent.indexOf('prefetch.global.L2 [')).toBeLessThan(dependent.indexOf('griddepcontrol.wait;'));
    expect(dependent.indexOf('griddepcontrol.wait;')).toBeLessThan(dependent.indexOf('ld.global.f32'));
    expect(m.emit()).not.toContain('griddepcontrol');
    const misplaced = (body: (k: Parameters<Parameters<PtxModule['entry']>[2]>[0]) => void) => () =>
      new PtxModule().entry('e', {}, body);
    expect(
      misplaced((k) => {
        k.dependencyWait();
        k.dependencyWait();
      }),
    ).toThrow(/once, at the top level/);
    expect(
      misplaced((k) => k.ifThen(k.setp('eq', 'u32', k.reg('pred'), k.tid(), 0), () => k.dependencyWait())),
    ).toThrow(/once, at the top level/);
  });

  it('RAYO_CUDA_DEPENDENT_LAUNCH names the option', () => {
    expect(cudaOptionsFromEnvironment({ RAYO_CUDA_DEPENDENT_LAUNCH: '0' })).toEqual({
      dependentLaunch: false,
    });
    expect(cudaOptionsFromEnvironment({ RAYO_CUDA_DEPENDENT_LAUNCH: '1' })).toEqual({
      dependentLaunch: true,
    });
    expect(cudaOptionsFromEnvironment({ RAYO_CUDA_DEPENDENT_LAUNCH: '' })).toEqual({});
    expect(() => cudaOptionsFromEnvironment({ RAYO_CUDA_DEPENDENT_LAUNCH: 'on' })).toThrow(
      /RAYO_CUDA_DEPENDENT_LAUNCH/,
    );
  });

  it('rejects a dependentLaunch that is not a boolean, naming the argument', async () => {
    await expect(
      CudaDriver.open({ lib: new FakeLibCuda(), dependentLaunch: 'yes' as unknown as boolean }),
    ).rejects.toMatchObject({ operation: 'CudaDriver.open', argument: 'dependentLaunch' });
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`dependent-launch modules assemble for sm_90 (${gate.reason})`, () => {
  it('kernels of older targets (sm_75, sm_80) and tensor-core ones, without spills', () => {
    const modules = {
      'add (sm_75)': binaryModule('add', 2),
      'cast f32 → bf16': castModule('f32', 'bf16'),
      'flash attention forward, mma, d64': flashMmaForwardModule(64),
    };
    expectAllAssembleCleanly(
      Object.entries(modules).map(([what, m]) => ({
        ptx: m.emit({ dependentLaunch: true }),
        arch: 'sm_90',
        what,
      })),
    );
  });
});
