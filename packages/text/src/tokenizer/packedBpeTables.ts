import type { PackedStrings } from '@rayo/train';
import { mergeKey, PackedMergeRanks } from './mergeKeys.js';
import { PackedKeyMap, PackedKeyTable } from './packedKeyMap.js';

// The BPE tables of a vocabulary and merges kept packed (a GGUF file's):
// the same tables the library would build (see bpeTables), as a Map from
// tokens to ids, an array of tokens by id and the merges' ranks, but indexed
// in place in the packed text. A token string is made only when the
// tokenizer asks for one (a lookup's key is the caller's own string).

/** A vocabulary (tokens by id) and merges, packed. */
export interface PackedBpe {
  readonly tokens: PackedStrings;
  readonly merges: PackedStrings;
}

/** The tables of a packed BPE, as `BpeTables` holds them. */
export interface PackedTables {
  readonly ids: PackedKeyMap;
  readonly topId: number;
  readonly vocab: string[];
  readonly ranks: PackedMergeRanks;
}

/** Entries handled between two yields: a few ms of work. */
const STEP = 32768;

/** A character JSON.stringify escapes (quotes, backslashes, controls, surrogates), found anywhere. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what JSON escapes.
const ESCAPED = /["\\\u0000-\u001f\ud800-\udfff]/g;

/**
 * Which merges are their own rank's key (see `mergeKey`): one space, and
 * nothing JSON escapes. Found with the text's own searches, each space and
 * each escaped character once, in order (linear in the text whatever the
 * merges hold), not character by character.
 */
function plainMerges(merges: PackedStrings): Uint8Array {
  const { text, ends } = merges;
  const spaces = new Uint8Array(merges.length);
  let item = 0;
  for (let at = text.indexOf(' '); at >= 0; at = text.indexOf(' ', at + 1)) {
    while (ends[item]! <= at) item++;
    if (spaces[item]! < 2) spaces[item]!++;
  }
  const plain = new Uint8Array(merges.length);
  for (let i = 0; i < plain.length; i++) plain[i] = spaces[i] === 1 ? 1 : 0;
  ESCAPED.lastIndex = 0;
  item = 0;
  for (let found = ESCAPED.exec(text); found; found = ESCAPED.exec(text)) {
    while (ends[item]! <= found.index) item++;
    plain[item] = 0;
  }
  return plain;
}

/** The index of an array index property (a canonical non-negative integer), or -1. */
function indexOf(property: string | symbol): number {
  if (typeof property !== 'string' || property.length === 0) return -1;
  const first = property.charCodeAt(0);
  if (first < 0x30 || first > 0x39) return -1;
  const index = Number(property);
  return Number.isInteger(index) && String(index) === property ? index : -1;
}

/**
 * The tokens by id as an array: an id's token is made when first read. An
 * id whose token repeats an earlier one has none, as in the array the
 * library builds from its Map. Walking the array's keys makes every token.
 */
function tokensById(tokens: PackedStrings, repeated: Uint8Array, length: number): string[] {
  const made: string[] = new Array(length);
  const fill = (index: number) => {
    if (index >= 0 && index < tokens.length && repeated[index] === 0 && !(index in made)) {
      made[index] = tokens.at(index);
    }
  };
  return new Proxy(made, {
    get(target, property, receiver) {
      fill(indexOf(property));
      return Reflect.get(target, property, receiver);
    },
    has(target, property) {
      fill(indexOf(property));
      return Reflect.has(target, property);
    },
    getOwnPropertyDescriptor(target, property) {
      fill(indexOf(property));
      return Reflect.getOwnPropertyDescriptor(target, property);
    },
    ownKeys(target) {
      for (let id = 0; id < tokens.length; id++) fill(id);
      return Reflect.ownKeys(target);
    },
  });
}

/** Indexes tokens `[from, to)`: the first of equal tokens keeps its id, a later one is marked repeated. */
function indexTokens(
  table: PackedKeyTable,
  repeated: Uint8Array,
  from: number,
  to: number,
  topId: number,
): number {
  for (let id = from; id < to; id++) {
    if (table.setItem(id, false)) topId = id;
    else repeated[id] = 1;
  }
  return topId;
}

/** Ranks merges `[from, to)`: a later equal merge takes the rank, as in a Map built in order. */
function rankMerges(
  table: PackedKeyTable,
  merges: PackedStrings,
  plain: Uint8Array,
  from: number,
  to: number,
): void {
  for (let rank = from; rank < to; rank++) {
    if (plain[rank] === 1) table.setItem(rank, true);
    else table.setString(mergeKey(merges.at(rank)), rank, true);
  }
}

/**
 * Builds the tables of `packed`, yielding after every `STEP` entries (the
 * loops are functions of their own: a generator's loop is not optimised
 * while it runs).
 */
export function* packedBpeTableSteps(packed: PackedBpe): Generator<void, PackedTables, undefined> {
  const { tokens, merges } = packed;
  const idTable = new PackedKeyTable(tokens, tokens.length);
  const repeated = new Uint8Array(tokens.length);
  let topId = -1;
  for (let from = 0; from < tokens.length; from += STEP) {
    topId = indexTokens(idTable, repeated, from, Math.min(tokens.length, from + STEP), topId);
    yield;
  }
  const rankTable = new PackedKeyTable(merges, merges.length);
  const plain = plainMerges(merges);
  yield;
  for (let from = 0; from < merges.length; from += STEP) {
    rankMerges(rankTable, merges, plain, from, Math.min(merges.length, from + STEP));
    yield;
  }
  return {
    ids: new PackedKeyMap(idTable),
    topId,
    vocab: tokensById(tokens, repeated, Math.max(idTable.count, topId + 1)),
    ranks: new PackedMergeRanks(rankTable),
  };
}
