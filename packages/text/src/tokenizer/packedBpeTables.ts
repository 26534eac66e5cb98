import type { PackedStrings } from '@rayo/train';
import { mergeKey, PackedMergeRanks } from './mergeKeys.js';
import { hashUnits, PackedKeyMap, PackedKeyTable } from './packedKeyMap.js';

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

/**
 * A merge whose own text is its rank's key (see `mergeKey`): one space, and
 * nothing JSON escapes (quotes, backslashes, controls, surrogates).
 */
function isPlainMerge(text: string, start: number, end: number): boolean {
  let spaces = 0;
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x20) spaces++;
    else if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return false;
  }
  return spaces === 1;
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

/** Builds the tables of `packed`, yielding after every `STEP` entries. */
export function* packedBpeTableSteps(packed: PackedBpe): Generator<void, PackedTables, undefined> {
  const { tokens, merges } = packed;
  const idTable = new PackedKeyTable(tokens, tokens.length);
  const repeated = new Uint8Array(tokens.length);
  let topId = -1;
  for (let id = 0; id < tokens.length; id++) {
    const start = tokens.start(id);
    const end = tokens.ends[id]!;
    // The first of equal tokens keeps its id.
    if (idTable.set(hashUnits(tokens.text, start, end), id, undefined, id, false)) topId = id;
    else repeated[id] = 1;
    if (id % STEP === STEP - 1) yield;
  }
  const rankTable = new PackedKeyTable(merges, merges.length);
  const text = merges.text;
  for (let rank = 0; rank < merges.length; rank++) {
    const start = merges.start(rank);
    const end = merges.ends[rank]!;
    // A later equal merge takes the rank, as in a Map built in order.
    if (isPlainMerge(text, start, end))
      rankTable.set(hashUnits(text, start, end), rank, undefined, rank, true);
    else {
      const key = mergeKey(merges.at(rank));
      rankTable.set(hashUnits(key, 0, key.length), -1, key, rank, true);
    }
    if (rank % STEP === STEP - 1) yield;
  }
  const distinct = idTable.count;
  return {
    ids: new PackedKeyMap(idTable),
    topId,
    vocab: tokensById(tokens, repeated, Math.max(distinct, topId + 1)),
    ranks: new PackedMergeRanks(rankTable),
  };
}
