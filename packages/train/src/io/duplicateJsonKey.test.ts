import { describe, expect, it } from 'vitest';
import { duplicateJsonKey } from './duplicateJsonKey.js';

describe('duplicateJsonKey', () => {
  it('finds none where each object names each key once, however often keys repeat across objects', () => {
    expect(
      duplicateJsonKey('{"a":{"dtype":"F32"},"b":{"dtype":"F32"},"c":[{"k":1},{"k":2}]}'),
    ).toBeUndefined();
    expect(duplicateJsonKey('[1, "a", {"a": "a"}, []]')).toBeUndefined();
  });

  it('reads strings whole: quotes, colons and brackets inside them are text', () => {
    expect(duplicateJsonKey('{"a":"x\\":\\"a\\":{[","b":"\\\\","c":"a"}')).toBeUndefined();
  });

  it('finds a key twice at the top, in a nested object, and through escapes', () => {
    expect(duplicateJsonKey('{"a":1 , "a" :2}')).toEqual({ key: 'a', path: '' });
    expect(duplicateJsonKey('{"m":{"k":"v","k":"w"}}')).toEqual({ key: 'k', path: 'm' });
    expect(duplicateJsonKey('{"a":1,"\\u0061":2}')).toEqual({ key: 'a', path: '' });
  });
});
