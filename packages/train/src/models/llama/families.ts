import { InvalidArgumentError } from '@rayo/core';

/** The decoder families `LlamaModel` runs. */
export type LlamaFamilyName = 'llama' | 'mistral' | 'qwen2' | 'qwen3';

/**
 * What one family of Hugging Face decoders does differently from the plain
 * Llama block, as data: the config keys that switch it, and the defaults of
 * the family's `transformers` config class.
 */
export interface LlamaFamily {
  readonly name: LlamaFamilyName;
  /** `architectures[0]` of the family's config.json. */
  readonly architecture: string;
  /** `model_type` of the family's config.json. */
  readonly modelType: string;
  /**
   * Biases of the q, k and v projections: `'always'` (the family's
   * attention hard-codes them), `'attention_bias'` (as that config key
   * says) or `'never'`.
   */
  readonly qkvBias: 'always' | 'attention_bias' | 'never';
  /** A bias of the output projection: as `attention_bias` says, or never. */
  readonly outputBias: 'attention_bias' | 'never';
  /** RMSNorm over each query and key head before RoPE (`self_attn.q_norm`, `k_norm`, [headDim]). */
  readonly qkNorm: boolean;
  /** `tie_word_embeddings` where the config leaves it out. */
  readonly tieWordEmbeddings: boolean;
  /**
   * How the config declares a sliding attention window: `'sliding_window'`
   * (the key alone; `defaultSlidingWindow` where it is absent),
   * `'use_sliding_window'` (the key applies only where `use_sliding_window`
   * is true, to the layers from `max_window_layers` on, or as
   * `layer_types` says), or `'none'` (the family has no window).
   */
  readonly slidingWindow: 'sliding_window' | 'use_sliding_window' | 'none';
  readonly defaultSlidingWindow?: number;
  /** Whether `mlp_bias` is a key of the family (it must then be false). */
  readonly mlpBiasKey: boolean;
  /** The `general.architecture` of the family's GGUF files. */
  readonly ggufArchitecture: 'llama' | 'qwen2' | 'qwen3';
}

/** Every supported family, by `architectures[0]`. TinyLlama and SmolLM2 are LlamaForCausalLM. */
export const LLAMA_FAMILIES: readonly LlamaFamily[] = [
  {
    name: 'llama',
    architecture: 'LlamaForCausalLM',
    modelType: 'llama',
    qkvBias: 'attention_bias',
    outputBias: 'attention_bias',
    qkNorm: false,
    tieWordEmbeddings: false,
    slidingWindow: 'none',
    mlpBiasKey: true,
    ggufArchitecture: 'llama',
  },
  {
    name: 'mistral',
    architecture: 'MistralForCausalLM',
    modelType: 'mistral',
    qkvBias: 'never',
    outputBias: 'never',
    qkNorm: false,
    tieWordEmbeddings: false,
    slidingWindow: 'sliding_window',
    defaultSlidingWindow: 4096,
    mlpBiasKey: false,
    ggufArchitecture: 'llama',
  },
  {
    name: 'qwen2',
    architecture: 'Qwen2ForCausalLM',
    modelType: 'qwen2',
    qkvBias: 'always',
    outputBias: 'never',
    qkNorm: false,
    tieWordEmbeddings: false,
    slidingWindow: 'use_sliding_window',
    mlpBiasKey: false,
    ggufArchitecture: 'qwen2',
  },
  {
    name: 'qwen3',
    architecture: 'Qwen3ForCausalLM',
    modelType: 'qwen3',
    qkvBias: 'attention_bias',
    outputBias: 'attention_bias',
    qkNorm: true,
    tieWordEmbeddings: false,
    slidingWindow: 'use_sliding_window',
    mlpBiasKey: false,
    ggufArchitecture: 'qwen3',
  },
];

function refuse(field: string, expected: string, actual: unknown): never {
  throw new InvalidArgumentError(`config field '${field}' names an unsupported model family`, {
    operation: 'llamaConfig',
    argument: field,
    expected,
    actual: JSON.stringify(actual),
  });
}

/** The family named `name`. */
export function llamaFamily(name: LlamaFamilyName): LlamaFamily {
  return LLAMA_FAMILIES.find((f) => f.name === name)!;
}

/**
 * The family of a config.json: by `architectures[0]`, else by `model_type`;
 * where both are given they must name one family. A config with neither is
 * a Llama (as `transformers`' LlamaConfig). Anything else is an
 * InvalidArgumentError naming the field and the supported values.
 */
export function familyOfConfig(json: Readonly<Record<string, unknown>>): LlamaFamily {
  const { architectures, model_type: modelType } = json;
  let family: LlamaFamily | undefined;
  if (architectures !== undefined && architectures !== null) {
    const first = Array.isArray(architectures) ? architectures[0] : undefined;
    family = LLAMA_FAMILIES.find((f) => f.architecture === first);
    if (!family || (architectures as unknown[]).length !== 1)
      refuse(
        'architectures',
        `one of [${LLAMA_FAMILIES.map((f) => `"${f.architecture}"`).join(', ')}]`,
        architectures,
      );
  }
  if (modelType !== undefined && modelType !== null) {
    const byType = LLAMA_FAMILIES.find((f) => f.modelType === modelType);
    if (!byType || (family && byType !== family))
      refuse(
        'model_type',
        family
          ? `"${family.modelType}" (architectures says ${family.architecture})`
          : `one of ${LLAMA_FAMILIES.map((f) => `"${f.modelType}"`).join(', ')}`,
        modelType,
      );
    family = byType;
  }
  return family ?? LLAMA_FAMILIES[0]!;
}
