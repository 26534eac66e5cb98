import type { LlamaPrefillPrecision, LlamaWeightDType, LlamaWeightFormat } from '@rayo/train';

// What a decode benchmark is asked to do, and what one run of it measured:
// shared by the rayo runs and the PyTorch baseline.

export interface DecodeRun {
  /** Milliseconds between consecutive tokens (the first, from the prompt, excluded). */
  readonly msPerToken: number;
  readonly p10Ms: number;
  readonly p90Ms: number;
  /** Every interval after the warm-up, in order (to see a pattern the percentiles hide). */
  readonly intervalsMs: readonly number[];
  readonly tokensPerSecond: number;
  readonly prefillMs: number;
  readonly tokens: readonly number[];
}

export interface DecodeSettings {
  readonly config: string;
  /** The dtype of the checkpoint and of the model's matrix weights and embedding (norm weights are f32). */
  readonly dtype: LlamaWeightDType;
  /** The dtype of the KV cache. */
  readonly kvDtype: LlamaWeightDType;
  readonly backends: readonly string[];
  readonly promptTokens: number;
  readonly newTokens: number;
  /** KV cache rows of rayo's models (the CLI's `--max-sequence`); absent: prompt and new tokens, no more. */
  readonly maxSequence?: number;
  /** Tokens not timed at the start of each run. */
  readonly warmupTokens: number;
  readonly seed: number;
  readonly baseline: 'torch' | 'none';
  /** The PyTorch device (cuda; cpu only checks the script). */
  readonly torchDevice: string;
  readonly weights: string;
  readonly out: string;
  /** Time every group of identical kernel calls of the step (the breakdown); the whole step is always timed. */
  readonly profile: boolean;
  /** Back-to-back repetitions of a kernel group per timing. */
  readonly profileRepetitions: number;
  /** Replayed tokens whose host phases are timed. */
  readonly hostTokens: number;
  /** The projections' format: quantized on load, or `none` (dense, in `dtype`). */
  readonly quant: LlamaWeightFormat | 'none';
  /** With `quant`: the LM head quantized in the same format too. */
  readonly quantHead?: boolean;
  /** With quant: where to quantize (default: the device where the backend can). */
  readonly quantOn?: 'device' | 'host';
  /** Prompt lengths whose time to first token is measured (--prefill); absent: none. */
  readonly prefillLengths?: readonly number[];
  /** Timed runs of each prefill length (the median is reported; default 3). */
  readonly prefillRepeats?: number;
  /** Measure the prefill only, no decoding (--prefill-only). */
  readonly prefillOnly?: boolean;
  /** The model's `prefillPrecision` (f32 checkpoints). */
  readonly prefillPrecision?: LlamaPrefillPrecision;
  /** The model's `prefillChunk`: prompt tokens per forward pass (absent: its default). */
  readonly prefillChunk?: number;
}
