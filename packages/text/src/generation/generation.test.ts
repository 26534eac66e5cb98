import { InvalidArgumentError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { parseGenerationConfig } from './generationConfig.js';
import { StopStrings } from './stopStrings.js';

describe('parseGenerationConfig', () => {
  it('reads EOS ids as a number or a list', () => {
    expect(parseGenerationConfig('g', { eos_token_id: 2 }).eosTokenIds).toEqual([2]);
    expect(parseGenerationConfig('g', { eos_token_id: [128001, 128008, 128009] }).eosTokenIds).toEqual([
      128001, 128008, 128009,
    ]);
    expect(parseGenerationConfig('g', {}).eosTokenIds).toEqual([]);
  });

  it('is greedy unless do_sample, then takes transformers defaults for what is not set', () => {
    expect(parseGenerationConfig('g', { temperature: 0.6, top_p: 0.9 })).toMatchObject({ temperature: 0 });
    expect(parseGenerationConfig('g', { do_sample: true, temperature: 0.6, top_p: 0.9 })).toMatchObject({
      temperature: 0.6,
      topK: 50,
      topP: 0.9,
    });
    const all = parseGenerationConfig('g', { do_sample: true, top_k: 0 });
    expect(all).toMatchObject({ temperature: 1, topP: 1 });
    expect(all.topK).toBeUndefined();
    expect(parseGenerationConfig('g', { max_new_tokens: 64, max_length: 100 })).toMatchObject({
      maxNewTokens: 64,
      maxLength: 100,
    });
  });

  it('lists what it does not apply, unless it holds the neutral value', () => {
    const config = parseGenerationConfig('g', { repetition_penalty: 1.1, length_penalty: 1, min_p: 0.05 });
    expect(config.notApplied).toEqual({ repetition_penalty: 1.1, min_p: 0.05 });
  });

  it('names a field it cannot read', () => {
    expect(() => parseGenerationConfig('m/generation_config.json', { eos_token_id: [2, 'x'] })).toThrow(
      InvalidArgumentError,
    );
    expect(() => parseGenerationConfig('m/generation_config.json', { eos_token_id: [2, 'x'] })).toThrow(
      /m\/generation_config\.json: eos_token_id\[1\]/,
    );
    expect(() => parseGenerationConfig('g', { do_sample: 'yes' })).toThrow(/do_sample.*true or false/);
    expect(() => parseGenerationConfig('g', { top_k: -1 })).toThrow(/top_k.*integer >= 0/);
  });
});

describe('StopStrings', () => {
  it('holds a tail that may begin a stop string, and cuts at the first stop', () => {
    const stops = new StopStrings(['\n\nUser:', 'END']);
    expect(stops.push('Hello')).toBe('Hello');
    expect(stops.push(' there\n')).toBe(' there');
    expect(stops.push('\nUs')).toBe('');
    expect(stops.push('e')).toBe('');
    expect(stops.push('d to it. EN')).toBe('\n\nUsed to it. ');
    expect(stops.stopped).toBe(false);
    expect(stops.push('D and more')).toBe('');
    expect(stops.stopped).toBe(true);
    expect(stops.push('later')).toBe('');
    expect(stops.flush()).toBe('');
  });

  it('finds a stop string inside one delta, and flushes a held tail when none came', () => {
    const inside = new StopStrings(['###']);
    expect(inside.push('a ### b')).toBe('a ');
    expect(inside.stopped).toBe(true);
    const held = new StopStrings(['###']);
    expect(held.push('a #')).toBe('a ');
    expect(held.flush()).toBe('#');
  });

  it('refuses an empty stop string', () => {
    expect(() => new StopStrings(['ok', ''])).toThrow(/stop\[1\].*non-empty string/);
  });
});
