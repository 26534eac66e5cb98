import { InvalidArgumentError } from '@rayo/core';
import type { LlamaModel } from '@rayo/train';
import type { DecodeEngine, EngineUsage, SequenceRequest, StepResult } from './decodeEngine.js';

function misuse(
  call: string,
  argument: string,
  expected: string,
  { message, actual }: { message: string; actual: string },
): InvalidArgumentError {
  return new InvalidArgumentError(message, {
    operation: `ModelSlotsEngine${call}`,
    argument,
    expected,
    actual,
  });
}

/** One loaded model and the sequence it runs, if any. */
interface Slot {
  readonly model: LlamaModel;
  sequence: SlotSequence | undefined;
  /** The last sequence's generator closing: a new one starts only after it. */
  closing: Promise<unknown>;
}

/** A sequence of `ModelSlotsEngine`: its slot and its token generator. */
export interface SlotSequence {
  readonly slot: number;
  readonly request: SequenceRequest;
}

interface RunningSequence extends SlotSequence {
  readonly tokens: AsyncGenerator<number, void, undefined>;
  started: boolean;
}

/**
 * The first engine: one sequence per loaded `LlamaModel` (a slot: its own
 * KV cache of `maxSequence` rows), each stepped through
 * `LlamaModel.generate`, whose first step is the prefill. A step advances
 * the admitted sequences one after another, so N slots serve N clients at
 * once but decode no faster than one; a batched engine with a paged cache
 * is what makes them share the weight reads. The engine does not own the
 * models: whoever loaded them disposes them.
 */
export class ModelSlotsEngine implements DecodeEngine<SlotSequence> {
  readonly maxSequence: number;
  readonly #slots: Slot[];

  constructor(models: readonly LlamaModel[]) {
    const lengths = [...new Set(models.map((m) => m.maxSequence))];
    // One cache length for all: a request that fits one slot fits any.
    if (lengths.length !== 1) {
      throw misuse('', 'models', 'one LlamaModel per slot, all loaded with one maxSequence', {
        message: 'every slot needs a model, all with the same cache length',
        actual: lengths.length === 0 ? 'none' : `maxSequence ${lengths.join(', ')}`,
      });
    }
    this.maxSequence = models[0]!.maxSequence;
    this.#slots = models.map((model) => ({ model, sequence: undefined, closing: Promise.resolve() }));
  }

  admit(request: SequenceRequest): SlotSequence | undefined {
    const index = this.#slots.findIndex((s) => s.sequence === undefined);
    if (index < 0) return undefined;
    const slot = this.#slots[index]!;
    const sequence: RunningSequence = {
      slot: index,
      request,
      // A generator's body starts at its first `next()`, in `step`.
      tokens: slot.model.generate(request.promptIds, {
        maxNewTokens: request.maxNewTokens,
        temperature: request.temperature,
        ...(request.topK !== undefined ? { topK: request.topK } : {}),
        ...(request.topP !== undefined ? { topP: request.topP } : {}),
        seed: request.seed,
        stop: request.stopTokenIds,
      }),
      started: false,
    };
    slot.sequence = sequence;
    return sequence;
  }

  async step(sequences: readonly SlotSequence[]): Promise<readonly StepResult[]> {
    const results: StepResult[] = [];
    // One after another: the models share one backend, and each step waits on
    // its read-back anyway.
    for (const sequence of sequences) {
      const running = this.#running(sequence, 'step');
      if (!running.started) {
        await this.#slots[running.slot]!.closing;
        running.started = true;
      }
      const next = await running.tokens.next();
      results.push(next.done ? { ended: 'stop-token' } : { token: next.value });
    }
    return results;
  }

  release(sequence: SlotSequence): void {
    const running = this.#running(sequence, 'release');
    const slot = this.#slots[running.slot]!;
    slot.sequence = undefined;
    // Closing the generator ends the model's generation (its `finally`); the
    // slot's next sequence waits for that before its first step.
    slot.closing = running.tokens.return(undefined).catch(() => undefined);
  }

  usage(): EngineUsage {
    const sequences = this.#slots.filter((s) => s.sequence !== undefined).length;
    return {
      sequences,
      maxSequences: this.#slots.length,
      cacheRows: sequences * this.maxSequence,
      maxCacheRows: this.#slots.length * this.maxSequence,
    };
  }

  #running(sequence: SlotSequence, operation: string): RunningSequence {
    const slot = this.#slots[sequence.slot];
    if (slot?.sequence !== sequence) {
      throw misuse(`.${operation}`, 'sequence', 'a sequence admit() returned and not yet released', {
        message: 'the sequence is not admitted',
        actual: `a sequence of slot ${sequence.slot} that is not running there`,
      });
    }
    return slot.sequence as RunningSequence;
  }
}
