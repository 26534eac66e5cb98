import { describe, expect, it } from 'vitest';
import { OutOfMemoryError, RayoError, ShapeError } from './errors.js';

describe('RayoError', () => {
  it('names the operation and the argument in its message, with expected against actual', () => {
    const e = new ShapeError('dimension 0 must match K', {
      operation: 'matmul',
      argument: 'b',
      expected: '7',
      actual: '5',
    });
    expect(e.message).toBe("matmul: argument 'b': dimension 0 must match K (expected 7, got 5)");
    expect([e.name, e.operation, e.argument, e.expected, e.actual]).toEqual([
      'ShapeError',
      'matmul',
      'b',
      '7',
      '5',
    ]);
  });

  it('holds API names as operations too, and no operation when none is given', () => {
    expect(new RayoError('the model is disposed', { operation: 'generate' }).message).toBe(
      'generate: the model is disposed',
    );
    const bare = new RayoError('something failed');
    expect([bare.message, bare.operation]).toEqual(['something failed', undefined]);
  });

  it('still takes and gives the deprecated `kernel` name of the operation', () => {
    const old = new OutOfMemoryError('the device refused', { kernel: 'zeros' });
    expect(old.operation).toBe('zeros');
    expect(old.kernel).toBe('zeros');
    expect(old.message).toBe('zeros: the device refused');
    // Both given: the new name wins.
    expect(new RayoError('x', { operation: 'upload', kernel: 'zeros' }).kernel).toBe('upload');
  });

  it('keeps the cause', () => {
    const cause = new Error('inner');
    expect(new RayoError('outer', { operation: 'read', cause }).cause).toBe(cause);
  });
});
