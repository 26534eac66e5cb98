import { PackedKeyMap } from './packedKeyMap.js';

// The keys merges are ranked under. The library asks for a pair's rank as
// `get(JSON.stringify([a, b]))`; here a merge is ranked under its own text
// where that is a plain "a b" (no string made for it), else under its
// pair's key as the library makes it.

/** A merge or token that JSON.stringify would escape (quotes, backslashes, controls, surrogates). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what JSON escapes.
export const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** A merge part keyed as itself: no space (the pair's separator) and nothing JSON escapes. */
function plainPart(part: string): boolean {
  return part.indexOf(' ') < 0 && !NEEDS_ESCAPE.test(part);
}

/** The key a pair is ranked under here: "a b" where both parts are plain, else the library's JSON key. */
function pairKey(a: string, b: string): string {
  return plainPart(a) && plainPart(b) ? `${a} ${b}` : JSON.stringify([a, b]);
}

/** The key of a merge: the merge's own text where it is a plain "a b" (no string made), else its pair's. */
export function mergeKey(merge: string | readonly string[]): string {
  if (typeof merge === 'string') {
    const space = merge.indexOf(' ');
    if (space >= 0 && merge.indexOf(' ', space + 1) < 0 && !NEEDS_ESCAPE.test(merge)) return merge;
    // The library splits at the first two spaces and keeps two parts; one without a space is itself.
    const pair = merge.split(' ', 2);
    return pair.length === 2 ? pairKey(pair[0]!, pair[1]!) : JSON.stringify(pair);
  }
  return merge.length === 2 ? pairKey(merge[0]!, merge[1]!) : JSON.stringify(merge);
}

/**
 * The merge ranks, asked as the library asks (`get(JSON.stringify([a,
 * b]))`) but keyed by the merges' own text: Llama 3's 280k merges are then
 * ranked without making a JSON string of each (several times faster), and a
 * lookup turns the library's key back into the pair's.
 */
export class MergeRanks extends Map<string, number> {
  override get(key: string): number | undefined {
    return super.get(rankedKeyOf(key));
  }
}

/** The key here of the library's `JSON.stringify([a, b])`. */
export function rankedKeyOf(key: string): string {
  // Something escaped: ranked under the JSON key itself.
  if (key.indexOf('\\') >= 0 || !key.startsWith('["') || !key.endsWith('"]')) return key;
  // Nothing escaped, so no quote in a part: '","' parts the pair unless a part starts or ends with a comma.
  const comma = key.indexOf('","', 2);
  if (comma >= 0 && key.indexOf('","', comma + 1) < 0)
    return pairKey(key.slice(2, comma), key.slice(comma + 3, -2));
  const pair: unknown = JSON.parse(key);
  return Array.isArray(pair) && pair.length === 2 ? pairKey(String(pair[0]), String(pair[1])) : key;
}

/** MergeRanks over a packed table of merges (see packedBpeTables). */
export class PackedMergeRanks extends PackedKeyMap {
  override get(key: string): number | undefined {
    return super.get(rankedKeyOf(key));
  }

  override has(key: string): boolean {
    return super.has(rankedKeyOf(key));
  }
}
