import { argmax, type Backend, type CommandBatch, type KernelRunner, type Tensor } from '@rayo/core';

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

/** A decode step recorded once into a batch, replayed at the target's position by `submit`. */
export class RecordedStep {
  readonly #target: DecodeTarget;
  readonly #batch: CommandBatch;
  /** What the step allocated, freed with it. */
  readonly #made: Tensor[];
  /** [1, vocab]. */
  readonly logits: Tensor;

  private constructor(target: DecodeTarget, batch: CommandBatch, made: Tensor[], logits: Tensor) {
    this.#target = target;
    this.#batch = batch;
    this.#made = made;
    this.logits = logits;
  }

  /** Records a step that embeds `token`; with `chosen` it also takes the argmax of the logits into it. */
  static record(target: DecodeTarget, token: Tensor, chosen?: Tensor): RecordedStep {
    const batch = target.backend.batch();
    const made: Tensor[] = [];
    try {
      const logits = target.recordStep(batch, made, token);
      if (chosen) batch.run(argmax, [logits], {}, { out: [chosen] });
      return new RecordedStep(target, batch, made, logits);
    } catch (error) {
      batch.dispose();
      for (const t of made) t.dispose();
      throw error;
    }
  }

  /**
   * Writes the target's position (the cache row) and the rows the step
   * attends over, and submits the step; the token must be on the device.
   */
  submit(): Promise<void> {
    const { backend, position } = this.#target;
    backend.write(this.#target.positionInput, Int32Array.of(position));
    backend.write(this.#target.lengthInput, Int32Array.of(position + 1));
    return this.#batch.submit();
  }

  dispose(): void {
    this.#batch.dispose();
    for (const t of this.#made) t.dispose();
  }
}
