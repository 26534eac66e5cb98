import { describe, expect, it } from 'vitest';
import { paramLayout } from '../params.js';
import {
  bindingType,
  declareHalf,
  loadScalar,
  quadType,
  storageOf,
  unpackQuad,
  unpackVector,
  vectorElements,
} from './half.js';
import { ShaderModule } from './module.js';

describe('half storage in u32 words', () => {
  it('binds halves as u32 words and f32 as before', () => {
    expect(bindingType('f32', true)).toBe('vec4<f32>');
    expect(bindingType('f16', true)).toBe('vec4<u32>');
    expect(bindingType('bf16', false)).toBe('u32');
    expect(quadType('bf16')).toBe('vec2<u32>');
    expect(vectorElements('f32')).toBe(4);
    expect(vectorElements('f16')).toBe(8);
    expect(storageOf('bf16')).toBe('bf16');
    expect(() => storageOf('i32')).toThrow(RangeError);
  });

  it('reads element i from word i >> 1, the lower half first', () => {
    expect(loadScalar('f32', 'x', 'i')).toBe('x[i]');
    expect(loadScalar('f16', 'x', 'i')).toBe('unpack2x16float(x[(i) >> 1u])[(i) & 1u]');
    expect(loadScalar('bf16', 'x', 'i')).toBe('unpack2xbf16(x[(i) >> 1u])[(i) & 1u]');
  });

  it('widens a vec4<u32> into two vec4<f32> in element order', () => {
    expect(unpackVector('f32', 'w')).toEqual(['w']);
    expect(unpackVector('f16', 'w')).toEqual([
      'vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y))',
      'vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w))',
    ]);
    expect(unpackQuad('bf16', 'q')).toBe('vec4<f32>(unpack2xbf16(q.x), unpack2xbf16(q.y))');
  });

  it('declares what a half module needs, and never enables f16', () => {
    const module = new ShaderModule();
    module.storage('x', bindingType('bf16', false), 'read');
    declareHalf(module, 'bf16');
    declareHalf(module, 'bf16');
    const code = module.build(paramLayout([['n', 'u32']] as const), 64, '');
    expect(code.match(/fn unpack2xbf16/g)).toHaveLength(1);
    expect(code).toContain('fn to_bf16(v: f32) -> u32');
    expect(code).not.toContain('enable f16;');
  });
});
