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

/** A decode step recorded once: the batch, what it allocated, and its logits [1, vocab]. */
export interface RecordedStep {
  readonly batch: CommandBatch;
  readonly made: Tensor[];
  readonly logits: Tensor;
  /** i32 [1]: the argmax of the logits, in the steps of greedy decoding on the device. */
  readonly greedy: Tensor | undefined;
}

/** Records a decode step that embeds `token`; with `chosen` it also takes the argmax of the logits into it. */
export function recordDecode(target: DecodeTarget, token: Tensor, chosen?: Tensor): RecordedStep {
  const batch = target.backend.batch();
  const made: Tensor[] = [];
  try {
    const logits = target.recordStep(batch, made, token);
    const greedy = chosen && batch.run(argmax, [logits], {}, { out: [chosen] })[0]!;
    return { batch, made, logits, greedy };
  } catch (error) {
    batch.dispose();
    for (const t of made) t.dispose();
    throw error;
  }
}

export function disposeRecorded(recorded: RecordedStep): void {
  recorded.batch.dispose();
  for (const t of recorded.made) t.dispose();
}

/** Writes where the next recorded step goes: its cache row and the rows it attends over. */
export function writePosition(target: DecodeTarget): void {
  const { backend, position } = target;
  backend.write(target.positionInput, Int32Array.of(position));
  backend.write(target.lengthInput, Int32Array.of(position + 1));
}
