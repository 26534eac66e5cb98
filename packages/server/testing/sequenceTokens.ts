import type { LlamaModel } from '@rayo/train';
import type { SequenceRequest } from '../src/engine/decodeEngine.js';

/** Every token of `tokens`, in order. */
export async function collect(tokens: AsyncIterable<number>): Promise<number[]> {
  const out: number[] = [];
  for await (const t of tokens) out.push(t);
  return out;
}

/** The tokens `model.generate` gives for `request` alone: the oracle of what an engine gives it beside others. */
export function generatedAlone(model: LlamaModel, request: SequenceRequest): Promise<number[]> {
  return collect(
    model.generate(request.promptIds, {
      maxNewTokens: request.maxNewTokens,
      temperature: request.temperature,
      seed: request.seed,
      stop: request.stopTokenIds,
    }),
  );
}
