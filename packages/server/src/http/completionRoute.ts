import { randomInt, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TextModel } from '@rayo/text';
import { ApiError, invalidParameter } from '../api/apiError.js';
import {
  type CompletionKind,
  type CompletionRequest,
  parseCompletionRequest,
} from '../api/completionRequest.js';
import {
  type ApiFinishReason,
  type CompletionIdentity,
  chunkBody,
  completionBody,
  usage,
  usageChunkBody,
} from '../api/responses.js';
import { SequenceText } from '../api/sequenceText.js';
import type { SequenceRequest } from '../engine/decodeEngine.js';
import type { ScheduledSequence, Scheduler } from '../scheduler/scheduler.js';
import { SequenceCancelled } from '../scheduler/schedulerErrors.js';
import { toApiError } from './errorMapping.js';
import { readJsonBody, sendEvent, sendJson, startEvents } from './httpIo.js';
import type { ServerLimits } from './serverLimits.js';

/** What the completion routes need of the server. */
export interface CompletionContext {
  readonly model: TextModel;
  readonly modelId: string;
  readonly scheduler: Scheduler;
  readonly limits: ServerLimits;
}

function isTokenIds(prompt: CompletionRequest['prompt']): prompt is readonly number[] {
  return Array.isArray(prompt) && typeof prompt[0] === 'number';
}

/** The prompt's token ids: messages through the chat template, text through the tokenizer, ids as they are. */
function promptIds(model: TextModel, request: CompletionRequest, operation: string): number[] {
  const param = request.kind === 'chat' ? 'messages' : 'prompt';
  const { prompt } = request;
  if (request.kind === 'chat' && !model.tokenizer.hasChatTemplate())
    throw invalidParameter(
      operation,
      'messages',
      'a model with a chat template (or use /v1/completions)',
      'none',
    );
  const ids = isTokenIds(prompt) ? [...prompt] : model.encodePrompt(prompt);
  const vocab = Math.min(model.tokenizer.vocabSize, model.model.config.vocabSize);
  const bad = ids.findIndex((id) => id >= vocab);
  if (bad >= 0) throw invalidParameter(operation, `prompt[${bad}]`, `a token id below ${vocab}`, ids[bad]);
  if (ids.length === 0)
    throw invalidParameter(operation, param, 'a prompt of at least one token', '0 tokens');
  return ids;
}

function tooLong(operation: string, param: string, expected: string, actual: string): ApiError {
  return new ApiError(
    400,
    'invalid_request_error',
    'context_length_exceeded',
    'the request does not fit the context',
    {
      operation,
      argument: param,
      expected,
      actual,
    },
  );
}

/** The engine's request: limits checked, defaults (the model's generation config, else greedy) filled. */
function sequenceRequest(
  context: CompletionContext,
  request: CompletionRequest,
  ids: readonly number[],
  operation: string,
): SequenceRequest {
  const { limits, model } = context;
  const param = request.kind === 'chat' ? 'messages' : 'prompt';
  const maxSequence = context.scheduler.engine.maxSequence;
  if (ids.length > Math.min(limits.maxPromptTokens, maxSequence)) {
    throw tooLong(
      operation,
      param,
      `at most ${Math.min(limits.maxPromptTokens, maxSequence)} prompt tokens`,
      `${ids.length} tokens`,
    );
  }
  // The last token is never fed back, so it needs no cache row.
  const room = maxSequence - ids.length + 1;
  if (request.maxTokens !== undefined && request.maxTokens > limits.maxTokens)
    throw invalidParameter(operation, 'max_tokens', `at most ${limits.maxTokens}`, request.maxTokens);
  if (request.maxTokens !== undefined && request.maxTokens > room) {
    throw tooLong(
      operation,
      'max_tokens',
      `prompt (${ids.length}) + max_tokens − 1 <= the context (${maxSequence} tokens)`,
      String(request.maxTokens),
    );
  }
  const defaults = model.generationDefaults;
  const temperature = request.temperature ?? defaults.temperature ?? 0;
  const topK = request.topK ?? defaults.topK;
  const topP = request.topP ?? defaults.topP;
  return {
    promptIds: ids,
    maxNewTokens: request.maxTokens ?? Math.min(limits.defaultMaxTokens, limits.maxTokens, room),
    temperature,
    ...(temperature > 0 && topK !== undefined ? { topK } : {}),
    ...(temperature > 0 && topP !== undefined ? { topP } : {}),
    // Without a seed, each request samples differently, as OpenAI's do.
    seed: request.seed ?? randomInt(2 ** 31),
    stopTokenIds: [...new Set([...model.tokenizer.eosTokenIds, ...defaults.eosTokenIds])],
  };
}

function finishReason(sequence: ScheduledSequence, text: SequenceText): ApiFinishReason {
  return !text.stopped && sequence.end === 'length' ? 'length' : 'stop';
}

/** Streams the tokens of an admitted sequence as text; ends it early at a stop string. */
async function* deltas(sequence: ScheduledSequence, text: SequenceText): AsyncGenerator<string> {
  for await (const token of sequence) {
    const delta = text.push(token);
    if (delta) yield delta;
    if (text.stopped) {
      sequence.cancel('stop-string');
      return;
    }
  }
  const tail = text.finish();
  if (tail) yield tail;
}

/**
 * `POST /v1/chat/completions` and `POST /v1/completions`: checks the
 * request, queues it, and once admitted answers with the whole completion
 * or streams it as server-sent events. A client that disconnects cancels
 * its sequence, which gives its room back to the scheduler at once.
 */
export async function serveCompletion(
  context: CompletionContext,
  kind: CompletionKind,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const operation = kind === 'chat' ? 'POST /v1/chat/completions' : 'POST /v1/completions';
  const request = parseCompletionRequest(
    kind,
    await readJsonBody(req, context.limits.maxBodyBytes, operation),
  );
  if (request.model !== context.modelId) {
    throw new ApiError(
      404,
      'not_found_error',
      'model_not_found',
      `the model '${request.model}' is not served here`,
      {
        operation,
        argument: 'model',
        expected: `'${context.modelId}'`,
        actual: `'${request.model}'`,
      },
    );
  }
  const ids = promptIds(context.model, request, operation);
  const sequence = context.scheduler.submit(sequenceRequest(context, request, ids, operation));
  res.on('close', () => {
    if (!res.writableFinished) sequence.cancel();
  });
  // A client that left while its body was read has already closed.
  if (res.destroyed) sequence.cancel();
  await sequence.admitted;
  const who: CompletionIdentity = {
    kind,
    id: `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID()}`,
    created: Math.floor(Date.now() / 1000),
    model: context.modelId,
  };
  const text = new SequenceText(context.model.tokenizer, ids, request.stop);
  if (!request.stream) {
    for await (const _ of deltas(sequence, text));
    sendJson(
      res,
      200,
      completionBody(who, text.text, finishReason(sequence, text), usage(ids.length, sequence.generated)),
    );
    return;
  }
  // Headers go out once admitted, so that a refusal while queued is still an HTTP status.
  startEvents(res);
  try {
    // A chat stream opens with the assistant's role, as OpenAI's do.
    if (kind === 'chat') sendEvent(res, chunkBody(who, '', null, true));
    for await (const delta of deltas(sequence, text)) sendEvent(res, chunkBody(who, delta, null));
    sendEvent(res, chunkBody(who, '', finishReason(sequence, text)));
    if (request.includeUsage) sendEvent(res, usageChunkBody(who, usage(ids.length, sequence.generated)));
    sendEvent(res, '[DONE]');
  } catch (error) {
    // A client that left gets nothing more; anyone else hears why the stream ends.
    if (!(error instanceof SequenceCancelled && res.destroyed))
      sendEvent(res, toApiError(error, operation).body());
  } finally {
    res.end();
  }
}
