import { describe, expect, it } from 'vitest';
import { flashAttentionBackwardCase } from './attentionBackwardCases.js';
import { QUICK } from './caseDefaults.js';
import { expectedOutputs, makeInputs } from './verify.js';

describe('flashAttentionBackward bench cases', () => {
  it("check one kv head's group of batch item 0: the subset's reference is that part of the full one", () => {
    const full = flashAttentionBackwardCase(2, 6, 2, 5, 9, QUICK);
    const data = makeInputs(full);
    const whole = expectedOutputs({ ...full, subset: undefined }, data);
    const part = expectedOutputs(full, data);
    whole.outputs.forEach((output, i) => {
      const picked = part.select(i, output);
      expect(picked.length).toBe(part.outputs[i]!.length);
      // Bitwise: the same sums in the same order.
      expect([...picked]).toEqual([...part.outputs[i]!]);
    });
  });

  it("names precision 'half' as bf16 and passes it to the kernel", () => {
    const half = flashAttentionBackwardCase(1, 4, 1, 64, 128, QUICK, 'half');
    expect(half.id).toBe('flash-attention-backward/bf16-b1-h4-kv1-d64-t128');
    expect(half.attrs).toEqual({ precision: 'half' });
    expect(flashAttentionBackwardCase(1, 4, 1, 64, 128, QUICK).attrs).toEqual({});
  });
});
