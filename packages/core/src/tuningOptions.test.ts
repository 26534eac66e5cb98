import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from './errors.js';
import {
  checkChoice,
  choiceFromEnvironment,
  qgemvOptionsFromEnvironment,
  resolveQgemvOptions,
} from './tuningOptions.js';

describe('tuning options', () => {
  it('check the quantized GEMV options and name the option and its choices when one is wrong', () => {
    expect(resolveQgemvOptions({}, 'Test.create')).toEqual({
      qgemvVariant: undefined,
      qgemvSlices: undefined,
    });
    expect(resolveQgemvOptions({ qgemvVariant: 'b', qgemvSlices: 4 }, 'Test.create')).toEqual({
      qgemvVariant: 'b',
      qgemvSlices: 4,
    });
    const bad = { qgemvVariant: 'z' } as unknown as Parameters<typeof resolveQgemvOptions>[0];
    expect(() => resolveQgemvOptions(bad, 'Test.create')).toThrow(InvalidArgumentError);
    expect(() => resolveQgemvOptions(bad, 'Test.create')).toThrow(
      "Test.create: argument 'qgemvVariant': the tuning option names no choice (expected 'a' | 'b' | 'c' | 'd', got 'z')",
    );
    const slices = { qgemvSlices: 3 } as unknown as Parameters<typeof resolveQgemvOptions>[0];
    expect(() => resolveQgemvOptions(slices, 'Test.create')).toThrow(
      /'qgemvSlices'.*expected 1 \| 2 \| 4 \| 8, got 3/,
    );
    // A number's text is no number.
    expect(() => checkChoice('4', [1, 2, 4, 8], { operation: 'k', argument: 'x' })).toThrow(/got '4'/);
  });

  it('read RAYO_QGEMV_VARIANT and RAYO_QGEMV_SLICES from the variables given, unset or empty as absent', () => {
    expect(qgemvOptionsFromEnvironment({}, 'test')).toEqual({});
    expect(qgemvOptionsFromEnvironment({ RAYO_QGEMV_VARIANT: '', RAYO_QGEMV_SLICES: '' }, 'test')).toEqual(
      {},
    );
    expect(qgemvOptionsFromEnvironment({ RAYO_QGEMV_VARIANT: 'a', RAYO_QGEMV_SLICES: '8' }, 'test')).toEqual({
      qgemvVariant: 'a',
      qgemvSlices: 8,
    });
    expect(() => qgemvOptionsFromEnvironment({ RAYO_QGEMV_VARIANT: 'q' }, 'test')).toThrow(
      "test: argument 'RAYO_QGEMV_VARIANT': the environment variable names no choice (expected a | b | c | d, got 'q')",
    );
    expect(() => qgemvOptionsFromEnvironment({ RAYO_QGEMV_SLICES: '16' }, 'test')).toThrow(
      /RAYO_QGEMV_SLICES.*expected 1 \| 2 \| 4 \| 8, got '16'/,
    );
    expect(choiceFromEnvironment({ MODE: 'widen' }, 'MODE', ['widen', 'emulated'], 'test')).toBe('widen');
  });
});
