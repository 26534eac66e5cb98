import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requestWgpuDevice, type WgpuDevice } from '../device.js';
import { backendProvider } from '../index.js';
import type { ShaderSource } from '../pipelines.js';
import type { Scalar } from '../wgsl/module.js';
import { MAX_CACHED, UNROLL } from '../wgsl/rowReduce.js';
import { WG } from './common.js';
import { lossShaders } from './loss.js';
import { normalizationShaders } from './normalization.js';
import { reductionShaders } from './reduction.js';
import { softmaxShaders } from './softmax.js';

// The row-reduction families' generated WGSL: its structure, and that every
// variant the planners can pick compiles, in f32 and in f16 storage.

const ROW_LENGTHS = [1, 3, 4, 31, 32, 8192, WG * MAX_CACHED + 1];
const FAMILIES: Record<string, (n: number, scalar: Scalar) => ShaderSource[]> = {
  reduction: reductionShaders,
  softmax: softmaxShaders,
  normalization: normalizationShaders,
  loss: lossShaders,
};

/** Every distinct shader (by pipeline key) of the families for the row lengths. */
function allShaders(scalar: Scalar): ShaderSource[] {
  const byKey = new Map<string, ShaderSource>();
  for (const shaders of Object.values(FAMILIES))
    for (const n of ROW_LENGTHS) for (const s of shaders(n, scalar)) byKey.set(s.key, s);
  return [...byKey.values()];
}

const count = (code: string, pattern: RegExp) => code.match(pattern)?.length ?? 0;

describe('generated row-reduction WGSL', () => {
  it('equal keys give equal code, and f16 storage has keys of its own', () => {
    for (const scalar of ['f32', 'f16'] as const) {
      const seen = new Map<string, string>();
      for (const shaders of Object.values(FAMILIES))
        for (const n of ROW_LENGTHS)
          for (const s of shaders(n, scalar)) {
            const code = s.code();
            expect(seen.get(s.key) ?? code).toBe(code);
            seen.set(s.key, code);
          }
    }
    const f32Keys = new Set(allShaders('f32').map((s) => s.key));
    const rowKeys = allShaders('f16')
      .map((s) => s.key)
      .filter((key) => key.includes('/f16/'));
    expect(rowKeys.length).toBeGreaterThan(0);
    for (const key of rowKeys) expect(f32Keys.has(key)).toBe(false);
  });

  it('enables f16 only where rows are stored as f16', () => {
    for (const s of allShaders('f32')) expect(s.code()).not.toContain('enable f16;');
    for (const s of allShaders('f16')) {
      const code = s.code();
      expect(code.includes('enable f16;'), s.key).toBe(s.key.includes('/f16/'));
    }
  });

  it('binds inputs, then outputs, then the parameters', () => {
    const [softmax, , softmaxBackward] = softmaxShaders(100, 'f16');
    const code = softmaxBackward!.code();
    expect(code).toContain('@binding(0) var<storage, read> dy: array<f16>;');
    expect(code).toContain('@binding(1) var<storage, read> y: array<f16>;');
    expect(code).toContain('@binding(2) var<storage, read_write> dx: array<f16>;');
    expect(code).toContain('@binding(3) var<uniform> params: Params;');
    expect(softmax!.code()).toContain('y[base + lane + k * 16u] = f16(');
    const [rms] = normalizationShaders(32, 'f32');
    expect(rms!.code()).toContain('@binding(1) var<storage, read> w: array<vec4<f32>>;');
    expect(rms!.code()).toContain('@binding(3) var<uniform> params: Params;');
  });

  it('softmax caches rows of up to WG · MAX_CACHED and streams longer ones with loads in flight together', () => {
    const cached = softmaxShaders(WG * MAX_CACHED, 'f32')[0]!.code();
    expect(cached).toContain(`const K = ${MAX_CACHED}u;`);
    expect(cached).toContain('fn reduce_max(');
    expect(cached).not.toContain('merge_online');
    const streamed = softmaxShaders(WG * MAX_CACHED + 1, 'f32')[0]!.code();
    expect(streamed).not.toContain('const K');
    expect(streamed).toContain('fn reduce_online(');
    // Two passes over x (statistics, then output), each loading UNROLL columns per step.
    expect(count(streamed, /let x_\d+ = x\[base \+ cc/g)).toBe(2 * UNROLL);
    const backward = softmaxShaders(WG * MAX_CACHED + 1, 'f32')[2]!.code();
    expect(count(backward, /let (dy|y)_\d+ = /g)).toBe(2 * 2 * UNROLL);
  });

  it('the split reduction and the mean loss reduce over a whole workgroup', () => {
    const split = reductionShaders(8192, 'f32').find((s) => s.key.startsWith('reduction/split/sum/'))!;
    expect(split.code()).toContain(`lid % ${WG}u < s`);
    const mean = lossShaders(10, 'f32').find((s) => s.key.includes('/mean/'))!;
    expect(mean.code()).toContain(`lid % ${WG}u < s`);
  });
});

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

needsAdapter('generated row-reduction WGSL compiles', () => {
  let gpu: WgpuDevice;
  beforeAll(async () => {
    gpu = await requestWgpuDevice();
  });
  afterAll(() => gpu.device.destroy());

  async function compileErrors(shaders: readonly ShaderSource[]): Promise<string[]> {
    const errors: string[] = [];
    for (const s of shaders) {
      const info = await gpu.device.createShaderModule({ label: s.key, code: s.code() }).getCompilationInfo();
      for (const m of info.messages)
        if (m.type === 'error') errors.push(`${s.key}:${m.lineNum}:${m.linePos} ${m.message}`);
    }
    return errors;
  }

  it('in f32, every planned variant', async () => {
    const shaders = allShaders('f32');
    expect(shaders.length).toBeGreaterThan(40);
    expect(await compileErrors(shaders)).toEqual([]);
  });

  it('in f16 storage, where the device has shader-f16', async () => {
    const shaders = allShaders('f16').filter((s) => s.key.includes('/f16/'));
    if (gpu.features.has('shader-f16')) {
      expect(await compileErrors(shaders)).toEqual([]);
    } else {
      // Without the feature, `enable f16;` itself must be what is refused.
      const errors = await compileErrors(shaders.slice(0, 1));
      expect(errors.join()).toMatch(/f16/);
    }
  });
});
