import { describe, expect, it } from 'vitest';
import { paramLayout } from '../params.js';
import { literal, narrow, ShaderModule, vectorOf, widen } from './module.js';

const PARAMS = paramLayout([['n', 'u32']] as const);

describe('ShaderModule', () => {
  it('numbers storage bindings in declaration order and puts the params uniform after them', () => {
    const module = new ShaderModule();
    expect(module.storage('x', 'f32', 'read')).toBe('x');
    module.storage('y', 'vec4<f32>', 'read_write');
    const code = module.build(PARAMS, 64, '  y[0] = vec4<f32>(x[0]);');
    expect(code).toContain('@group(0) @binding(0) var<storage, read> x: array<f32>;');
    expect(code).toContain('@group(0) @binding(1) var<storage, read_write> y: array<vec4<f32>>;');
    expect(code).toContain('@group(0) @binding(2) var<uniform> params: Params;');
    expect(code).toContain('struct Params {\n  n: u32,\n}');
    expect(code).toContain('@compute @workgroup_size(64)');
  });

  it('has no uniform without params, and declares each distinct text once', () => {
    const module = new ShaderModule();
    module.declare('fn one() -> f32 { return 1.0; }').declare('fn one() -> f32 { return 1.0; }');
    const code = module.build(undefined, 1, '');
    expect(code).not.toContain('var<uniform>');
    expect(code.match(/fn one/g)).toHaveLength(1);
  });

  it('enables f16 exactly when a declaration uses it', () => {
    const f32 = new ShaderModule();
    f32.storage('x', 'f32', 'read');
    f32.workgroupArray('buf', 'vec2<f32>', 256);
    expect(f32.build(PARAMS, 256, '')).not.toContain('enable f16;');

    const half = new ShaderModule();
    half.storage('x', 'vec4<f16>', 'read');
    expect(half.build(PARAMS, 256, '').startsWith('enable f16;\n')).toBe(true);

    const shared = new ShaderModule();
    shared.workgroupArray('buf', 'f16', 256);
    expect(shared.build(PARAMS, 256, '')).toContain('enable f16;');
  });
});

describe('ShaderModule declarations in binding order', () => {
  it('puts the struct where params() is called and the uniform after the storage bindings', () => {
    const module = new ShaderModule().params(PARAMS);
    module.declare('alias T = f32;');
    module.storage('x', 'f32', 'read');
    module.storage('y', 'f32', 'read_write');
    module.workgroupArray('red', 'f32', 64);
    const code = module.build(undefined, 64, '  y[0] = x[0];');
    const order = [
      'struct Params',
      'alias T = f32;',
      '@group(0) @binding(0) var<storage, read> x: array<f32>;',
      '@group(0) @binding(1) var<storage, read_write> y: array<f32>;',
      '@group(0) @binding(2) var<uniform> params: Params;',
      'var<workgroup> red: array<f32, 64>;',
      '@compute @workgroup_size(64)',
    ].map((text) => code.indexOf(text));
    expect(order.every((at) => at >= 0)).toBe(true);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(() => module.build(PARAMS, 64, '')).toThrow(/params declared twice/);
    expect(() => new ShaderModule().params(PARAMS).params(PARAMS)).toThrow(/params declared twice/);
  });

  it('writes the enables (f16 last unless asked for), diagnostics, workgroup variables and entry parameters', () => {
    const module = new ShaderModule().enable('subgroups').enable('subgroups');
    module.diagnostic('off', 'chromium.subgroup_matrix_uniformity');
    module.workgroupArray('tile', 'f16', 32);
    module.workgroupVar('flag', 'atomic<u32>');
    const code = module.build(
      undefined,
      '16, 8',
      '  let i = tid;',
      '@builtin(local_invocation_index) tid: u32',
    );
    expect(
      code.startsWith(
        'enable subgroups;\nenable f16;\ndiagnostic(off, chromium.subgroup_matrix_uniformity);\n',
      ),
    ).toBe(true);
    expect(code).toContain('var<workgroup> flag: atomic<u32>;');
    expect(code).toContain('@compute @workgroup_size(16, 8)');
    expect(code).toContain(
      'fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {',
    );
  });
});

describe('scalar types', () => {
  it('types literals through the scalar', () => {
    expect(literal('f32', 1)).toBe('1.0f');
    expect(literal('f16', 0.5)).toBe('0.5h');
    expect(literal('f32', -3)).toBe('-3.0f');
    expect(() => literal('f32', Number.POSITIVE_INFINITY)).toThrow(RangeError);
  });

  it('converts loads to f32 and stores back only for half storage', () => {
    expect(vectorOf('f16', 4)).toBe('vec4<f16>');
    expect(vectorOf('f32', 1)).toBe('f32');
    expect(widen('f32', 4, 'x[i]')).toBe('x[i]');
    expect(widen('f16', 4, 'x[i]')).toBe('vec4<f32>(x[i])');
    expect(narrow('f16', 1, 'v')).toBe('f16(v)');
    expect(narrow('f32', 1, 'v')).toBe('v');
  });
});
