import type { ChatMessage } from '@rayo/text';
import { ApiError, invalidParameter } from './apiError.js';

/** The two generation routes. */
export type CompletionKind = 'chat' | 'text';

/** A chat or text completion request, checked; absent options stay absent (the server fills them). */
export interface CompletionRequest {
  readonly kind: CompletionKind;
  readonly model: string;
  /** Chat messages, or a prompt as text or token ids. */
  readonly prompt: readonly ChatMessage[] | string | readonly number[];
  readonly stream: boolean;
  /** `stream_options.include_usage`: a last chunk with the usage. */
  readonly includeUsage: boolean;
  readonly maxTokens?: number;
  readonly temperature?: number;
  readonly topP?: number;
  readonly topK?: number;
  readonly seed?: number;
  readonly stop: readonly string[];
}

/** Parameters the server takes, by route. */
const COMMON = [
  'model',
  'stream',
  'stream_options',
  'max_tokens',
  'temperature',
  'top_p',
  'top_k',
  'seed',
  'stop',
  'n',
  'user',
  'presence_penalty',
  'frequency_penalty',
  'logit_bias',
  'logprobs',
];
const ACCEPTED: Record<CompletionKind, ReadonlySet<string>> = {
  chat: new Set([...COMMON, 'messages', 'max_completion_tokens', 'top_logprobs', 'response_format']),
  text: new Set([...COMMON, 'prompt', 'best_of', 'echo']),
};

/** Parameters taken only at the value that changes nothing (OpenAI's default), with that value. */
const DEFAULT_ONLY: Readonly<
  Record<string, { readonly is: (v: unknown) => boolean; readonly expected: string }>
> = {
  n: { is: (v) => v === 1, expected: '1 (one choice per request)' },
  best_of: { is: (v) => v === 1, expected: '1' },
  presence_penalty: { is: (v) => v === 0, expected: '0 (penalties are not supported)' },
  frequency_penalty: { is: (v) => v === 0, expected: '0 (penalties are not supported)' },
  logprobs: { is: (v) => v === false, expected: 'false or absent (log probabilities are not supported)' },
  top_logprobs: { is: (v) => v === 0, expected: 'absent (log probabilities are not supported)' },
  echo: { is: (v) => v === false, expected: 'false (the prompt is not echoed)' },
  logit_bias: {
    is: (v) => typeof v === 'object' && v !== null && Object.keys(v).length === 0,
    expected: 'absent or {} (logit bias is not supported)',
  },
  response_format: {
    is: (v) => typeof v === 'object' && v !== null && (v as { type?: unknown }).type === 'text',
    expected: "{ type: 'text' } or absent (structured output is not supported)",
  },
};

const ROLES = ['system', 'developer', 'user', 'assistant'];
/** OpenAI takes at most this many stop sequences. */
const MAX_STOPS = 4;

function operation(kind: CompletionKind): string {
  return kind === 'chat' ? 'POST /v1/chat/completions' : 'POST /v1/completions';
}

/** A number parameter that `ok` accepts (absent stays absent). */
function numberParam(
  op: string,
  name: string,
  value: unknown,
  ok: (n: number) => boolean,
  expected: string,
): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !ok(value)) throw invalidParameter(op, name, expected, value);
  return value;
}

function integer(op: string, name: string, value: unknown, least: number): number | undefined {
  return numberParam(op, name, value, (n) => Number.isSafeInteger(n) && n >= least, `an integer >= ${least}`);
}

function messageText(op: string, i: number, content: unknown): string {
  if (typeof content === 'string') return content;
  // Content parts: text only.
  if (Array.isArray(content)) {
    return content
      .map((part, j) => {
        const p = part as { type?: unknown; text?: unknown } | null;
        if (p?.type !== 'text' || typeof p.text !== 'string') {
          throw invalidParameter(
            op,
            `messages[${i}].content[${j}]`,
            "a text part { type: 'text', text } (this model reads text only)",
            p && typeof p === 'object' ? `a part of type ${JSON.stringify(p.type)}` : part,
          );
        }
        return p.text;
      })
      .join('');
  }
  throw invalidParameter(op, `messages[${i}].content`, 'a string or an array of text parts', content);
}

function messages(op: string, value: unknown): ChatMessage[] {
  if (!Array.isArray(value) || value.length === 0)
    throw invalidParameter(op, 'messages', 'a non-empty array of messages', value);
  return value.map((m, i) => {
    const message = m as { role?: unknown; content?: unknown } | null;
    if (message === null || typeof message !== 'object' || Array.isArray(message))
      throw invalidParameter(op, `messages[${i}]`, 'an object { role, content }', m);
    if (typeof message.role !== 'string' || !ROLES.includes(message.role))
      throw invalidParameter(op, `messages[${i}].role`, ROLES.join(' | '), message.role);
    // A developer message is the system message of newer OpenAI models.
    const role = message.role === 'developer' ? 'system' : message.role;
    return { role, content: messageText(op, i, message.content) };
  });
}

function textPrompt(op: string, value: unknown): string | number[] {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    if (value.length > 0 && value.every((v) => typeof v === 'number')) {
      value.forEach((id, i) => {
        integer(op, `prompt[${i}]`, id, 0);
      });
      return value as number[];
    }
    if (value.length === 1) return textPrompt(op, value[0]);
  }
  throw invalidParameter(
    op,
    'prompt',
    'a string, an array of token ids, or an array of one of those (one prompt per request)',
    value,
  );
}

function stops(op: string, value: unknown): string[] {
  if (value === undefined) return [];
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || list.length > MAX_STOPS)
    throw invalidParameter(op, 'stop', `a string or an array of at most ${MAX_STOPS} strings`, value);
  return list.map((s, i) => {
    if (typeof s !== 'string' || s === '') throw invalidParameter(op, `stop[${i}]`, 'a non-empty string', s);
    return s;
  });
}

/**
 * Checks a request body of `kind` against what the server supports: an
 * unknown parameter, a supported one out of range, or one it cannot honour
 * (`n` > 1, penalties, log probabilities) is a 400 naming the parameter.
 * `null` counts as absent, as in OpenAI's API.
 */
export function parseCompletionRequest(kind: CompletionKind, body: unknown): CompletionRequest {
  const op = operation(kind);
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw invalidParameter(op, 'body', 'a JSON object', body, 'invalid_json');
  const fields = Object.fromEntries(Object.entries(body).filter(([, v]) => v !== null));
  for (const [name, value] of Object.entries(fields)) {
    if (!ACCEPTED[kind].has(name)) {
      throw new ApiError(
        400,
        'invalid_request_error',
        'unsupported_parameter',
        `unsupported parameter '${name}'`,
        {
          operation: op,
          argument: name,
          expected: `one of ${[...ACCEPTED[kind]].join(', ')}`,
          actual: `'${name}'`,
        },
      );
    }
    const only = DEFAULT_ONLY[name];
    if (only && !only.is(value)) throw invalidParameter(op, name, only.expected, value, 'unsupported_value');
  }
  if (typeof fields.model !== 'string' || fields.model === '')
    throw invalidParameter(
      op,
      'model',
      "the served model's id (GET /v1/models)",
      fields.model,
      'missing_parameter',
    );
  if (fields.stream !== undefined && typeof fields.stream !== 'boolean')
    throw invalidParameter(op, 'stream', 'a boolean', fields.stream);
  const stream = fields.stream === true;
  const options = fields.stream_options as { include_usage?: unknown } | undefined;
  if (options !== undefined) {
    if (!stream) throw invalidParameter(op, 'stream_options', 'absent unless stream is true', options);
    if (typeof options !== 'object' || Object.keys(options).some((k) => k !== 'include_usage'))
      throw invalidParameter(op, 'stream_options', '{ include_usage: boolean }', options);
    if (options.include_usage !== undefined && typeof options.include_usage !== 'boolean')
      throw invalidParameter(op, 'stream_options.include_usage', 'a boolean', options.include_usage);
  }
  if (fields.user !== undefined && typeof fields.user !== 'string')
    throw invalidParameter(op, 'user', 'a string', fields.user);
  const maxTokens = integer(op, 'max_tokens', fields.max_tokens, 1);
  const maxCompletionTokens = integer(op, 'max_completion_tokens', fields.max_completion_tokens, 1);
  if (maxTokens !== undefined && maxCompletionTokens !== undefined && maxTokens !== maxCompletionTokens)
    throw invalidParameter(
      op,
      'max_completion_tokens',
      `absent, or max_tokens' value (${maxTokens})`,
      maxCompletionTokens,
    );
  if (kind === 'text' && fields.prompt === undefined)
    throw invalidParameter(op, 'prompt', 'a prompt', undefined, 'missing_parameter');
  const prompt = kind === 'chat' ? messages(op, fields.messages) : textPrompt(op, fields.prompt);
  const limit = maxTokens ?? maxCompletionTokens;
  const temperature = numberParam(
    op,
    'temperature',
    fields.temperature,
    (n) => n >= 0 && n <= 2,
    'a number in [0, 2]',
  );
  const topP = numberParam(op, 'top_p', fields.top_p, (n) => n > 0 && n <= 1, 'a number in (0, 1]');
  const topK = integer(op, 'top_k', fields.top_k, 1);
  const seed = integer(op, 'seed', fields.seed, 0);
  return {
    kind,
    model: fields.model,
    prompt,
    stream,
    includeUsage: options?.include_usage === true,
    ...(limit !== undefined ? { maxTokens: limit } : {}),
    ...(temperature !== undefined ? { temperature } : {}),
    ...(topP !== undefined ? { topP } : {}),
    ...(topK !== undefined ? { topK } : {}),
    ...(seed !== undefined ? { seed } : {}),
    stop: stops(op, fields.stop),
  };
}
