import type { CompletionKind } from './completionRequest.js';

/** OpenAI's `finish_reason`s that rayo gives. */
export type ApiFinishReason = 'stop' | 'length';

export interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly total_tokens: number;
}

/** What every body of one completion shares: its id, creation time (s) and model. */
export interface CompletionIdentity {
  readonly kind: CompletionKind;
  readonly id: string;
  readonly created: number;
  readonly model: string;
}

export function usage(promptTokens: number, completionTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
  };
}

function head(who: CompletionIdentity, object: string) {
  return { id: who.id, object, created: who.created, model: who.model };
}

/** A whole (non-streamed) completion. */
export function completionBody(
  who: CompletionIdentity,
  text: string,
  finish: ApiFinishReason,
  used: Usage,
): object {
  const choice =
    who.kind === 'chat'
      ? { index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: finish }
      : { index: 0, text, logprobs: null, finish_reason: finish };
  return {
    ...head(who, who.kind === 'chat' ? 'chat.completion' : 'text_completion'),
    choices: [choice],
    usage: used,
  };
}

/**
 * One streamed chunk: text (with the assistant role on a chat's first
 * chunk), or the finish reason with no text.
 */
export function chunkBody(
  who: CompletionIdentity,
  text: string,
  finish: ApiFinishReason | null,
  first = false,
): object {
  if (who.kind === 'text') {
    return {
      ...head(who, 'text_completion'),
      choices: [{ index: 0, text, logprobs: null, finish_reason: finish }],
    };
  }
  const delta =
    finish !== null && text === '' ? {} : { ...(first ? { role: 'assistant' } : {}), content: text };
  return {
    ...head(who, 'chat.completion.chunk'),
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  };
}

/** The last chunk of a stream asked for with `stream_options.include_usage`. */
export function usageChunkBody(who: CompletionIdentity, used: Usage): object {
  return {
    ...head(who, who.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion'),
    choices: [],
    usage: used,
  };
}
