import { Template } from '@huggingface/jinja';
import { InvalidArgumentError, RayoError } from '@rayo/core';

/** One turn of a conversation, as chat templates take it. */
export interface ChatMessage {
  readonly role: 'system' | 'user' | 'assistant' | 'tool' | (string & {});
  readonly content: string;
}

export interface ChatTemplateOptions {
  /** Ends the text with the start of the assistant's turn (default true). */
  readonly addGenerationPrompt?: boolean;
  /** Which of several named templates (default `default`). */
  readonly templateName?: string;
  /** The BOS and EOS strings the template may write (default: the tokenizer's). */
  readonly bosToken?: string;
  readonly eosToken?: string;
  /** More variables for the template (e.g. `enable_thinking`, `tools`). */
  readonly variables?: Readonly<Record<string, unknown>>;
}

const KERNEL = 'applyChatTemplate';
/** The name `raise_exception` calls are renamed to, so that rayo's function (not the library's) runs. */
const RAISE = '__rayo_raise_exception';

/**
 * Renames every `raise_exception` identifier of a parsed template: the
 * library declares its own `raise_exception` (a plain Error) and refuses a
 * second declaration, so the template is pointed at ours instead.
 */
function renameRaise(node: unknown, seen = new Set<unknown>()): void {
  if (typeof node !== 'object' || node === null || seen.has(node)) return;
  seen.add(node);
  const n = node as { type?: unknown; value?: unknown };
  if (n.type === 'Identifier' && n.value === 'raise_exception') n.value = RAISE;
  for (const child of Object.values(node)) renameRaise(child, seen);
}

function checkMessages(messages: readonly ChatMessage[]): void {
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new InvalidArgumentError('messages must be a non-empty list', {
      operation: KERNEL,
      argument: 'messages',
      expected: 'a list of { role, content }',
      actual: Array.isArray(messages) ? 'an empty list' : typeof messages,
    });
  }
  messages.forEach((m, i) => {
    if (typeof m?.role !== 'string' || typeof m.content !== 'string') {
      throw new InvalidArgumentError('a message needs a string role and content', {
        operation: KERNEL,
        argument: `messages[${i}]`,
        expected: '{ role: string, content: string }',
        actual: JSON.stringify(m)?.slice(0, 80) ?? String(m),
      });
    }
  });
}

/**
 * A Jinja chat template (from `tokenizer_config.json`, `chat_template.jinja`
 * or GGUF `tokenizer.chat_template`), parsed once and rendered with
 * `@huggingface/jinja` as transformers' `apply_chat_template` renders it:
 * `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, and a
 * `raise_exception` that becomes a RayoError.
 */
export class ChatTemplate {
  readonly source: string;
  /** Where the template came from, for messages (`model/tokenizer_config.json: chat_template`). */
  readonly name: string;
  readonly #template: Template;

  constructor(source: string, name: string) {
    this.source = source;
    this.name = name;
    try {
      this.#template = new Template(source);
      renameRaise(this.#template.parsed);
    } catch (error) {
      throw new InvalidArgumentError(`${name} is not a template this Jinja can read`, {
        operation: 'ChatTemplate',
        argument: name,
        expected: 'a Jinja chat template',
        actual: error instanceof Error ? error.message : String(error),
        cause: error,
      });
    }
  }

  /** The prompt text of `messages`. */
  render(messages: readonly ChatMessage[], options: ChatTemplateOptions = {}): string {
    checkMessages(messages);
    const name = this.name;
    try {
      return this.#template.render({
        ...options.variables,
        messages: messages.map((m) => ({ ...m })),
        add_generation_prompt: options.addGenerationPrompt ?? true,
        bos_token: options.bosToken ?? '',
        eos_token: options.eosToken ?? '',
        [RAISE]: (message: unknown) => {
          throw new InvalidArgumentError(`${name} refused the messages: ${String(message)}`, {
            operation: KERNEL,
            argument: 'messages',
          });
        },
      });
    } catch (error) {
      if (error instanceof RayoError) throw error;
      throw new InvalidArgumentError(`${name} failed to render`, {
        operation: KERNEL,
        argument: name,
        expected: 'a template that renders these messages',
        actual: error instanceof Error ? error.message : String(error),
        cause: error,
      });
    }
  }
}
