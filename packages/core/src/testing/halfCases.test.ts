import { describe, expect, it } from 'vitest';
import type { Backend } from '../backend.js';
import { UnsupportedOnBackendError } from '../errors.js';
import { matmul, rmsNorm } from '../kernels/index.js';
import { valid } from './cases.js';
import { CheckFailure } from './expect.js';
import {
  halfTolerance,
  halfVariants,
  mixedDtypeError,
  runAsDeclared,
  UnsupportedOnBackend,
} from './halfCases.js';

const matmulCase = valid(matmul, { label: '3×1031×5', inputs: [{ shape: [3, 1031] }, { shape: [1031, 5] }] });
const f32Only = { name: 'stub', supports: (_kernel: string, dtype?: string) => dtype !== 'f16' } as Backend;

describe('half conformance cases', () => {
  it('derives f16, bf16 and weight-only variants with the one tolerance rule', () => {
    const variants = halfVariants(matmulCase);
    expect(variants.map((v) => v.inputs.map((s) => s?.dtype))).toEqual([
      ['f16', 'f16'],
      ['bf16', 'bf16'],
      [undefined, 'bf16'],
    ]);
    expect(halfTolerance('f16', matmulCase).rtol).toBeCloseTo(4 * 2 ** -11 * Math.sqrt(1031));
    expect(
      halfVariants(valid(rmsNorm, { label: 'x', inputs: [{ shape: [4] }, { shape: [4] }] })),
    ).toHaveLength(2);
  });

  it('derives a mixed-dtype error naming the second input of a group', () => {
    const c = valid(rmsNorm, { label: 'x', inputs: [{ shape: [2, 4] }, { shape: [4] }] });
    expect(mixedDtypeError(c)).toMatchObject({ error: 'dtype', argument: 'weight' });
    // a and b are in different groups: nothing to mix.
    expect(mixedDtypeError(matmulCase)).toBeUndefined();
  });

  it('reports an undeclared dtype as unsupported only when the call was refused', async () => {
    const [f16] = halfVariants(matmulCase);
    const refused = () => {
      throw new UnsupportedOnBackendError('no f16', {
        operation: 'matmul',
        argument: 'a',
        expected: 'f32',
        actual: 'f16',
      });
    };
    await expect(runAsDeclared(f32Only, f16!, async () => refused())).rejects.toBeInstanceOf(
      UnsupportedOnBackend,
    );
    await expect(runAsDeclared(f32Only, f16!, async () => {})).rejects.toBeInstanceOf(CheckFailure);
    // A declared dtype runs; f32 always does.
    let ran = 0;
    await runAsDeclared(f32Only, halfVariants(matmulCase)[1]!, async () => void ran++);
    await runAsDeclared(f32Only, matmulCase, async () => void ran++);
    expect(ran).toBe(2);
  });
});
