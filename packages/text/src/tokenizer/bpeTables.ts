import type { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { PACKED_BPE, TOKENS_BY_ID } from './bpeModel.js';
import { MergeRanks, mergeKey } from './mergeKeys.js';
import { type PackedBpe, packedBpeTableSteps } from './packedBpeTables.js';
import type { TokenizerJson } from './tokenizerSource.js';

// `@huggingface/tokenizers` builds a BPE model's lookup tables in one go,
// through intermediate objects: the vocabulary's entries, every merge split
// into a pair and each pair JSON-stringified into its rank's key. For Llama
// 3's 128k tokens and 280k merges that is most of a tokenizer's
// construction (about a second). Here the library is given an empty
// vocabulary and no merges, and the same tables are built in single passes
// (a key written directly where no character needs escaping), in steps
// that can yield to the event loop so that a model's reads and uploads go
// on between them, then put in place with the added tokens applied over
// them as the library applies them. A vocabulary and merges kept packed (a
// GGUF file's) are indexed in place instead (packedBpeTables), and read
// as `vocab` and `merges` only where something asks for them. Where the model is not the plain BPE
// this knows, or the library's model lacks the tables named here, the
// library builds everything itself.

/** The members of the library's BPE model that hold its tables. */
interface LibraryBpeModel {
  tokens_to_ids: Map<string, number>;
  vocab: string[];
  unk_token_id: number | undefined;
  bpe_ranks: Map<string, number>;
}

/** A tokenizer.json BPE model whose tables are built here. */
export interface BpeModelJson {
  readonly type: 'BPE';
  readonly vocab: Readonly<Record<string, number>>;
  readonly merges: readonly (string | readonly string[])[];
  readonly unk_token?: string | null;
  readonly [TOKENS_BY_ID]?: readonly string[];
  /** Where set, `vocab` and `merges` are made from these when read: the tables are built from these. */
  readonly [PACKED_BPE]?: PackedBpe;
}

/**
 * A BPE model's tables, built from its vocabulary and merges (the added
 * tokens not yet applied); installed into one tokenizer, which then owns them.
 */
export interface BpeTables {
  /** What they were built from: used only for a model with these very vocabulary and merges. */
  readonly from: BpeModelJson;
  readonly ids: Map<string, number>;
  /** The vocabulary's largest id (-1 for none), added tokens aside. */
  readonly topId: number;
  /** Token strings by id. */
  readonly vocab: string[];
  readonly unkId: number | undefined;
  readonly ranks: Map<string, number>;
}

interface AddedTokenJson {
  readonly id: number;
  readonly content: string;
}

/** Entries handled between two yields: a few ms of work. */
const STEP = 8192;

/** The BPE model of a tokenizer.json whose tables can be built here, or undefined. */
export function plainBpeModel(json: TokenizerJson): BpeModelJson | undefined {
  const model = json.model as Partial<BpeModelJson> | undefined;
  if (model?.type === 'BPE' && model[PACKED_BPE]) return model as BpeModelJson;
  if (model?.type !== 'BPE' || typeof model.vocab !== 'object' || model.vocab === null) return undefined;
  if (Array.isArray(model.vocab) || !Array.isArray(model.merges)) return undefined;
  return model as BpeModelJson;
}

/** The tokenizer.json with its BPE model's vocabulary and merges left out, for the library to construct. */
export function withoutBpeTables(json: TokenizerJson, model: BpeModelJson): TokenizerJson {
  // Copied key by key: a packed model's vocabulary and merges are not made for it.
  const rest: Record<string, unknown> = {};
  for (const key of Object.keys(model))
    if (key !== 'vocab' && key !== 'merges') rest[key] = model[key as keyof BpeModelJson];
  return { ...json, model: { ...rest, vocab: {}, merges: [] } };
}

/** Whether tables built from `from` are those of `model`: the same packed items, or vocabulary and merges. */
export function builtFrom(from: BpeModelJson, model: BpeModelJson): boolean {
  const packed = from[PACKED_BPE];
  if (packed || model[PACKED_BPE]) return packed === model[PACKED_BPE];
  return from.vocab === model.vocab && from.merges === model.merges;
}

/** Builds the tables of `model`, yielding after every `STEP` entries. */
function* bpeTableSteps(model: BpeModelJson): Generator<void, BpeTables, undefined> {
  const packed = model[PACKED_BPE];
  if (packed) {
    const tables = yield* packedBpeTableSteps(packed);
    const unkId = model.unk_token == null ? undefined : tables.ids.get(model.unk_token);
    return { from: model, ...tables, unkId };
  }
  const ids = new Map<string, number>();
  let topId = -1;
  const byId = model[TOKENS_BY_ID];
  if (byId) {
    // The first of equal tokens keeps its id, as in the vocabulary object.
    for (let id = 0; id < byId.length; id++) {
      if (!ids.has(byId[id]!)) {
        ids.set(byId[id]!, id);
        topId = id;
      }
      if (id % STEP === STEP - 1) yield;
    }
  } else {
    // Object.keys gives Object.entries' order (the library's) without making the entries.
    const tokens = Object.keys(model.vocab);
    for (let i = 0; i < tokens.length; i++) {
      const id = model.vocab[tokens[i]!]!;
      ids.set(tokens[i]!, id);
      topId = Math.max(topId, id);
      if (i % STEP === STEP - 1) yield;
    }
  }
  const unkId = model.unk_token == null ? undefined : ids.get(model.unk_token);
  const vocab = new Array<string>(ids.size);
  for (const [token, id] of ids) vocab[id] = token;
  yield;
  const ranks = new MergeRanks();
  const merges = model.merges;
  for (let rank = 0; rank < merges.length; rank++) {
    ranks.set(mergeKey(merges[rank]!), rank);
    if (rank % STEP === STEP - 1) yield;
  }
  return { from: model, ids, topId, vocab, unkId, ranks };
}

/** The tables of `model`, built at once. */
export function buildBpeTables(model: BpeModelJson): BpeTables {
  const steps = bpeTableSteps(model);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/** A browser's MessageChannel, as far as `nextTask` uses it (the package builds without the DOM library). */
interface BrowserMessageChannel {
  readonly port1: { onmessage: (() => void) | null; close(): void };
  readonly port2: { postMessage(message: unknown): void };
}

/** Resolves after other tasks waiting on the event loop (I/O callbacks, timers) have had their turn. */
function nextTask(): Promise<void> {
  const immediate = (globalThis as { setImmediate?: (callback: () => void) => void }).setImmediate;
  if (immediate) return new Promise((resolve) => immediate(resolve));
  // A browser (a worker) has no setImmediate, and nested timeouts wait at least 4 ms: a message is next.
  return new Promise((resolve) => {
    const { port1, port2 } = new MessageChannel() as unknown as BrowserMessageChannel;
    port1.onmessage = () => {
      port1.close();
      resolve();
    };
    port2.postMessage(undefined);
  });
}

/** The tables of `model`, built in steps with the event loop's other tasks run between them. */
export async function buildBpeTablesInSteps(model: BpeModelJson): Promise<BpeTables> {
  const steps = bpeTableSteps(model);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
    await nextTask();
  }
}

function isLibraryBpeModel(model: unknown): model is LibraryBpeModel {
  const m = model as Partial<LibraryBpeModel> | undefined;
  return m?.tokens_to_ids instanceof Map && Array.isArray(m.vocab) && m.bpe_ranks instanceof Map;
}

/**
 * Puts `tables` into `hf`'s BPE model (constructed by the library from
 * `withoutBpeTables`), with `added` applied over them in order, as the
 * library's constructor leaves them. False, with nothing changed, where the
 * library's model has no such tables (the caller then constructs it whole).
 */
export function installBpeTables(
  hf: HfTokenizer,
  tables: BpeTables,
  added: readonly AddedTokenJson[],
): boolean {
  const target = (hf as unknown as { model?: unknown }).model;
  if (!isLibraryBpeModel(target)) return false;
  const { ids, vocab } = tables;
  for (const { id, content } of added) {
    ids.set(content, id);
    vocab[id] = content;
  }
  target.tokens_to_ids = ids;
  target.vocab = vocab;
  target.unk_token_id = tables.unkId;
  target.bpe_ranks = tables.ranks;
  return true;
}
