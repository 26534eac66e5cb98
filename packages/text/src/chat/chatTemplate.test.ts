import { InvalidArgumentError } from '@rayo/core';
import { LLAMA3, MISTRAL, QWEN3 } from '@rayo/text-testkit';
import { describe, expect, it } from 'vitest';
import { Tokenizer } from '../tokenizer/tokenizer.js';
import { ChatTemplate } from './chatTemplate.js';

const conversation = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Hi!' },
];

describe('the templates of real models', () => {
  it("Llama 3's: headers, BOS once, trimmed content, the assistant's header to finish", async () => {
    const t = await Tokenizer.load(LLAMA3.dir);
    expect(t.applyChatTemplate(conversation)).toBe(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>' +
        '<|start_header_id|>assistant<|end_header_id|>\n\n',
    );
  });

  it("Qwen 3's: im_start/im_end turns, and enable_thinking through variables", async () => {
    const t = await Tokenizer.load(QWEN3.dir);
    const text = t.applyChatTemplate(conversation);
    expect(text).toBe(
      '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(t.applyChatTemplate(conversation, { addGenerationPrompt: false })).toBe(
      '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n',
    );
    expect(t.applyChatTemplate(conversation, { variables: { enable_thinking: false } })).toBe(
      `${text}<think>\n\n</think>\n\n`,
    );
    // The rendered text encodes its markers as single special tokens.
    const ids = t.encode(text, { addSpecialTokens: false });
    expect(ids[0]).toBe(t.tokenToId('<|im_start|>'));
    expect(ids.filter((id) => id === t.tokenToId('<|im_end|>'))).toHaveLength(2);
  });

  it('a model without a template refuses messages, saying so', async () => {
    const t = await Tokenizer.load(MISTRAL.dir);
    expect(t.hasChatTemplate()).toBe(false);
    expect(() => t.applyChatTemplate(conversation)).toThrow(InvalidArgumentError);
    expect(() => t.applyChatTemplate(conversation)).toThrow(/has no chat template.*pass a plain prompt/);
  });
});

describe('ChatTemplate', () => {
  const template = (source: string) => new ChatTemplate(source, 'test: chat_template');

  it('renders bos_token, eos_token, loops and add_generation_prompt', () => {
    const t = template(
      "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{{ eos_token }}{% endfor %}" +
        '{% if add_generation_prompt %}[assistant]{% endif %}',
    );
    expect(t.render(conversation, { bosToken: '<s>', eosToken: '</s>' })).toBe(
      '<s>[system] You are terse.</s>[user] Hi!</s>[assistant]',
    );
    expect(t.render(conversation, { addGenerationPrompt: false })).toBe('[system] You are terse.[user] Hi!');
  });

  it('turns raise_exception into a RayoError with the template message', () => {
    const t = template(
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok",
    );
    expect(t.render([{ role: 'user', content: 'x' }])).toBe('ok');
    expect(() => t.render(conversation)).toThrow(InvalidArgumentError);
    expect(() => t.render(conversation)).toThrow(
      /test: chat_template refused the messages: System role not supported/,
    );
  });

  it('names an unreadable template and bad messages', () => {
    expect(() => template('{% for m in messages %}')).toThrow(/test: chat_template is not a template/);
    const t = template('{{ messages[0].content }}');
    expect(() => t.render([])).toThrow(/messages must be a non-empty list/);
    expect(() => t.render([{ role: 'user' } as never])).toThrow(
      /messages\[0\].*role: string, content: string/,
    );
  });

  it('takes a list of named templates from tokenizer_config.json', () => {
    const t = new Tokenizer({
      name: 'x/tokenizer.json',
      tokenizer: { model: { type: 'BPE', vocab: { a: 0 }, merges: [] } },
      config: {
        chat_template: [
          { name: 'default', template: 'D{{ messages|length }}' },
          { name: 'tool_use', template: 'T{{ messages|length }}' },
        ],
      },
    });
    expect(t.applyChatTemplate(conversation)).toBe('D2');
    expect(t.applyChatTemplate(conversation, { templateName: 'tool_use' })).toBe('T2');
    expect(() => t.applyChatTemplate(conversation, { templateName: 'rag' })).toThrow(
      /no chat template named 'rag'.*'default' \| 'tool_use'/,
    );
  });
});
