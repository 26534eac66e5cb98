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
});
