import {
  argmax,
  type Backend,
  type CommandBatch,
  increment,
  type KernelRunner,
  type Tensor,
} from '@rayo/core';

/** The model as a decode strategy drives it: its steps, its step inputs and the position of the next token. */
export interface DecodeTarget {
  readonly backend: Backend;
  readonly vocabSize: number;
  /** i32 [1] each: what a recorded step reads on the device (see `LlamaModel`). */
  readonly tokenInput: Tensor;
  readonly positionInput: Tensor;
  readonly lengthInput: Tensor;
  /** The cache row of the next token. */
  readonly position: number;
  /**
   * The position `positionInput` will hold once the queued steps are done,
   * where a recorded step advanced it on the device; `undefined` when not
   * known (a generation starts unknown, so that nothing written between two
   * relies on it).
   */
  positionOnDevice: number | undefined;
  /** Moves the position by `rows`; negative takes rows back from the context. */
  advance(rows: number): void;
  /** Checks a token id, and that one more row fits in the cache (as `decode` does). */
  checkNext(token: number): void;
  writeToken(token: number): void;
  /** `LlamaModel.recordStep`. */
  recordStep(runner: KernelRunner, made: Tensor[], token: Tensor): Tensor;
  /** `LlamaModel.decode`: one eager step at the position, which it advances. */
  decode(token: number): Tensor;
}

/**
 * A decode step recorded once into a batch, replayed at the target's
 * position by `submit`. Where the backend runs `increment`, the step ends by
 * advancing its position and length on the device, so that the next step
 * replayed in a row needs no write from the host.
 */
export class RecordedStep {
  readonly #target: DecodeTarget;
  readonly #batch: CommandBatch;
  /** What the step allocated, freed with it. */
  readonly #made: Tensor[];
  /** Whether the step advances the position and length itself. */
  readonly #advances: boolean;
  /** [1, vocab]. */
  readonly logits: Tensor;

  private constructor(
    target: DecodeTarget,
    batch: CommandBatch,
    made: Tensor[],
    logits: Tensor,
    advances: boolean,
  ) {
    this.#target = target;
    this.#batch = batch;
    this.#made = made;
    this.#advances = advances;
    this.logits = logits;
  }

  /** Records a step that embeds `token`; with `chosen` it also takes the argmax of the logits into it. */
  static record(target: DecodeTarget, token: Tensor, chosen?: Tensor): RecordedStep {
    const batch = target.backend.batch();
    const made: Tensor[] = [];
    try {
      const logits = target.recordStep(batch, made, token);
      if (chosen) batch.run(argmax, [logits], {}, { out: [chosen] });
      const advances = target.backend.supports(increment.name);
      if (advances) batch.run(increment, [target.positionInput, target.lengthInput], { by: 1 });
      return new RecordedStep(target, batch, made, logits, advances);
    } catch (error) {
      batch.dispose();
      for (const t of made) t.dispose();
      throw error;
    }
  }

  /**
   * Submits the step at the target's position; the token must be on the
   * device. The position (the cache row) and the rows the step attends over
   * are written first unless the device already holds them.
   */
  submit(): Promise<void> {
    const target = this.#target;
    const { backend, position } = target;
    if (target.positionOnDevice !== position) {
      backend.write(target.positionInput, Int32Array.of(position));
      backend.write(target.lengthInput, Int32Array.of(position + 1));
    }
    target.positionOnDevice = undefined;
    const done = this.#batch.submit();
    if (this.#advances) {
      target.positionOnDevice = position + 1;
      // A step that failed may not have advanced them: write them again next time.
      done.catch(() => {
        target.positionOnDevice = undefined;
      });
    }
    return done;
  }

  dispose(): void {
    this.#batch.dispose();
    for (const t of this.#made) t.dispose();
  }
}
