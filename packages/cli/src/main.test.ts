import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import {
  type Backend,
  type BackendProvider,
  createBackend,
  OutOfMemoryError,
  registerBackend,
} from '@rayo/core';
import { TextModel } from '@rayo/text';
import { writeTinyTextModel } from '@rayo/text-testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIo } from './io.js';
import { main } from './main.js';

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the CLI in this process with `input` on stdin; `onWrite` sees every stdout write. */
async function rayo(
  args: string[],
  input = '',
  onWrite?: (text: string, interrupt: () => void) => void,
): Promise<Run> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  let handler: (() => void) | undefined;
  stdout.on('data', (chunk: Buffer) => {
    out += chunk;
    onWrite?.(String(chunk), () => handler?.());
  });
  stderr.on('data', (chunk: Buffer) => {
    err += chunk;
  });
  const io: CliIo = {
    stdin: Readable.from([input]),
    stdout,
    stderr,
    onInterrupt: (h) => {
      handler = h;
      return () => {
        handler = undefined;
      };
    },
  };
  const code = await main(args, io);
  return { code, stdout: out, stderr: err };
}

let backend: Backend;
let model: string;
let reference: TextModel;
const dirs: string[] = [];

/** What the library generates for the same prompt: the CLI must print exactly this. */
async function expected(
  prompt: Parameters<TextModel['generateText']>[0],
  maxNewTokens = 16,
): Promise<string> {
  let text = '';
  for await (const delta of reference.generateText(prompt, { maxNewTokens })) text += delta;
  return text;
}

beforeAll(async () => {
  backend = await createBackend('cpu');
  model = await writeTinyTextModel();
  dirs.push(model);
  reference = await TextModel.load(backend, model);
});
afterAll(async () => {
  reference.dispose();
  backend.dispose();
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

describe('rayo --help', () => {
  it('lists the commands, and each command its flags', async () => {
    const top = await rayo(['--help']);
    expect(top.code).toBe(0);
    expect(top.stdout).toMatch(/generate .*\n.*chat .*\n.*serve /);
    for (const command of ['generate', 'chat']) {
      const help = await rayo([command, '--help']);
      expect(help.code).toBe(0);
      expect(help.stdout).toMatch(new RegExp(`^Usage: rayo ${command} --model PATH`));
      expect(help.stdout).toMatch(/--backend NAME[\s\S]*--max-sequence N[\s\S]*--top-p P/);
      expect((await rayo(['help', command])).stdout).toBe(help.stdout);
    }
    expect((await rayo([])).code).toBe(2);
    const unknown = await rayo(['train']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/no command 'train'/);
  });
});

describe('rayo generate', () => {
  it('streams the text the library generates, with a progress bar and statistics on stderr', async () => {
    const run = await rayo([
      'generate',
      '--model',
      model,
      '--backend',
      'cpu',
      '--prompt',
      'Hello',
      '-n',
      '16',
    ]);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`${await expected('Hello')}\n`);
    expect(run.stderr).toMatch(/loading .* on cpu .*\[\.{24}\] 0\/21 tensors/);
    expect(run.stderr).toMatch(/\[#{24}\] 21\/21 tensors/);
    expect(run.stderr).toMatch(
      /\d+ tokens in [\d.]+ s · [\d.]+ tokens\/s · first token after \d+ ms \(prompt: 6 tokens\)/,
    );
    const quiet = await rayo(['generate', '-m', model, '-b', 'cpu', '-p', 'Hello', '-n', '16', '--quiet']);
    expect(quiet.stdout).toBe(run.stdout);
    expect(quiet.stderr).toBe('');
  });

  it('prints one JSON object with --json, reads the prompt from stdin with -p -, and renders --chat', async () => {
    const run = await rayo(
      ['generate', '-m', model, '-b', 'cpu', '-p', '-', '-n', '8', '--json', '-q'],
      'Once',
    );
    expect(run.code).toBe(0);
    const result = JSON.parse(run.stdout);
    expect(result).toMatchObject({
      backend: 'cpu',
      prompt: 'Once',
      text: await expected('Once', 8),
      promptTokens: 5,
    });
    expect(result.generatedTokens).toBeGreaterThan(0);
    expect(['eos', 'length']).toContain(result.finishReason);
    const chat = await rayo([
      'generate',
      '-m',
      model,
      '-b',
      'cpu',
      '-p',
      'Hi',
      '--chat',
      '-s',
      'Be brief.',
      '-n',
      '8',
      '-q',
    ]);
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ];
    expect(chat.stdout).toBe(`${await expected(messages, 8)}\n`);
  });

  it('names a bad flag with what it expects (exit status 2)', async () => {
    const cases: [string[], RegExp][] = [
      [['--top-k', '0'], /--top-k.*integer >= 1.*"0"/],
      [['--temperature=-1'], /--temperature.*number >= 0/],
      [['--top-p', '1.5'], /--top-p.*\(0, 1\]/],
      [['--dtype', 'f8'], /--dtype.*checkpoint \| f32 \| f16 \| bf16.*"f8"/],
      [['--quant', 'q3'], /--quant.*q8 \| q4g32/],
      [['--activations', 'int4'], /--activations.*int8 \| exact.*"int4"/],
      [['--stop', ''], /--stop \(1\).*non-empty/],
      [['--frobnicate'], /Unknown option '--frobnicate'/],
      [['extra'], /unexpected "extra"/],
    ];
    for (const [flags, message] of cases) {
      const run = await rayo(['generate', '-m', model, '-p', 'x', ...flags]);
      expect(run.code, flags.join(' ')).toBe(2);
      expect(run.stderr, flags.join(' ')).toMatch(message);
      expect(run.stderr).toMatch(/Run 'rayo generate --help'/);
    }
    expect((await rayo(['generate', '-p', 'x'])).stderr).toMatch(/--model.*model folder or a \.gguf file/);
    expect((await rayo(['generate', '-m', model])).stderr).toMatch(/--prompt/);
  });

  it('says what is missing: a tokenizer, a supported family, a backend, device memory (exit status 1)', async () => {
    const bare = await writeTinyTextModel({ withoutTokenizer: true });
    dirs.push(bare);
    const noTokenizer = await rayo(['generate', '-m', bare, '-b', 'cpu', '-p', 'x', '--json']);
    expect(noTokenizer.code).toBe(1);
    expect(noTokenizer.stderr).toMatch(/no tokenizer\.json/);
    expect(JSON.parse(noTokenizer.stdout)).toMatchObject({ error: 'InvalidArgumentError' });

    const gelu = await writeTinyTextModel();
    dirs.push(gelu);
    const config = JSON.parse(
      await (await import('node:fs/promises')).readFile(join(gelu, 'config.json'), 'utf8'),
    );
    await writeFile(
      join(gelu, 'config.json'),
      JSON.stringify({ ...config, hidden_act: 'gelu_pytorch_tanh' }),
    );
    const family = await rayo(['generate', '-m', gelu, '-b', 'cpu', '-p', 'x']);
    expect(family.code).toBe(1);
    expect(family.stderr).toMatch(/hidden_act/);

    const noBackend = await rayo(['generate', '-m', model, '-b', 'tpu', '-p', 'x']);
    expect(noBackend.code).toBe(1);
    expect(noBackend.stderr).toMatch(/backend 'tpu'/);

    // A device with 64 KiB of memory: the tiny model's 200 KiB of weights do not fit.
    const small: BackendProvider = {
      name: 'small-device',
      probe: async () => undefined,
      create: async () => {
        const cpu = await createBackend('cpu');
        let bytes = 0;
        const allocate = (n: number) => {
          bytes += n * 4;
          if (bytes > 64 * 1024) {
            throw new OutOfMemoryError('the device is out of memory', {
              operation: 'upload',
              actual: `${bytes} bytes`,
            });
          }
        };
        return new Proxy(cpu, {
          get(target, key, receiver) {
            const value = Reflect.get(target, key, receiver);
            if (key === 'name') return 'small-device';
            if (key === 'upload' || key === 'zeros' || key === 'empty') {
              return (data: unknown, shape: number[], ...rest: unknown[]) => {
                const s = key === 'upload' ? shape : (data as number[]);
                allocate(s.reduce((a, b) => a * b, 1));
                return (value as (...a: unknown[]) => unknown).call(target, data, shape, ...rest);
              };
            }
            return typeof value === 'function' ? value.bind(target) : value;
          },
        });
      },
    };
    registerBackend(small);
    const tooLarge = await rayo(['generate', '-m', model, '-b', 'small-device', '-p', 'x']);
    expect(tooLarge.code).toBe(1);
    expect(tooLarge.stderr).toMatch(
      /does not fit on .* \(the small-device backend\): its weights take 0\.3 MB as stored/,
    );
    expect(tooLarge.stderr).toMatch(/try --quant q4g32.*--max-sequence/);
  });
});

describe('rayo chat', () => {
  it('keeps the conversation, /reset starts over, /exit leaves', async () => {
    const run = await rayo(
      ['chat', '-m', model, '-b', 'cpu', '-n', '6', '-s', 'Short.'],
      'Hi\n\n/reset\nHey\n/exit\nnever read\n',
    );
    expect(run.code).toBe(0);
    const first = await expected(
      [
        { role: 'system', content: 'Short.' },
        { role: 'user', content: 'Hi' },
      ],
      6,
    );
    const second = await expected(
      [
        { role: 'system', content: 'Short.' },
        { role: 'user', content: 'Hey' },
      ],
      6,
    );
    expect(run.stdout).toBe(`${first}\n${second}\n`);
    expect(run.stderr).toMatch(/\(conversation cleared\)/);
    expect(run.stderr.match(/tokens\/s/g)).toHaveLength(2);
  });

  it('sends earlier turns with the next one', async () => {
    const run = await rayo(['chat', '-m', model, '-b', 'cpu', '-n', '4', '-q'], 'Hi\nAgain\n');
    const [reply] = run.stdout.split('\n');
    const second = await expected(
      [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: reply! },
        { role: 'user', content: 'Again' },
      ],
      4,
    );
    expect(run.stdout).toBe(`${reply}\n${second}\n`);
  });

  it('Ctrl+C stops a reply and the chat goes on', async () => {
    let stopped = false;
    const run = await rayo(
      ['chat', '-m', model, '-b', 'cpu', '-n', '16', '-q'],
      'Hi\nHey\n',
      (text, interrupt) => {
        if (!stopped && text.length > 0) {
          stopped = true;
          interrupt();
        }
      },
    );
    expect(run.code).toBe(0);
    const [cut, next] = run.stdout.split('\n');
    expect(cut).toMatch(/ …$/);
    expect(next!.length).toBeGreaterThan(0);
  });

  it('refuses a model without a chat template', async () => {
    const plain = await writeTinyTextModel({ chatTemplate: null });
    dirs.push(plain);
    const run = await rayo(['chat', '-m', plain, '-b', 'cpu', '-q'], 'Hi\n');
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/has no chat template.*rayo generate --model/);
  });
});

describe('rayo serve', () => {
  it.each([
    ['2 slots', ['--slots', '2'], /\(2 slots\)/],
    ['a batched engine', ['--batch', '4', '--kv-pages', '20'], /\(batches of up to 4, 20 pages of 16 rows\)/],
  ])(
    'answers OpenAI-style requests until Ctrl+C, then stops listening (exit status 0; %s)',
    async (_label, engine, shown) => {
      const stderr = new PassThrough();
      let err = '';
      let interrupt: (() => void) | undefined;
      const listening = new Promise<string>((resolve) => {
        stderr.on('data', (chunk: Buffer) => {
          err += chunk;
          const url = /at (http:\/\/\S+\/v1)\n/.exec(err)?.[1];
          if (url) resolve(url);
        });
      });
      const io: CliIo = {
        stdin: Readable.from([]),
        stdout: new PassThrough(),
        stderr,
        onInterrupt: (h) => {
          interrupt = h;
          return () => {
            interrupt = undefined;
          };
        },
      };
      const args = [
        'serve',
        '-m',
        model,
        '-b',
        'cpu',
        '--port',
        '0',
        ...engine,
        '--model-name',
        'tiny',
        '-q',
      ];
      const exit = main(args, io);
      const url = await listening;
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
      expect(err).toMatch(/serving 'tiny' on cpu/);
      expect(err).toMatch(shown);
      const messages = [{ role: 'user' as const, content: 'Hi' }];
      const response = await fetch(`${url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', messages, max_tokens: 12 }),
      });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { choices: { message: { content: string } }[] };
      expect(body.choices[0]!.message.content).toBe(await expected(messages, 12));
      interrupt!();
      expect(await exit).toBe(0);
      await expect(fetch(`${url}/models`)).rejects.toThrow();
    },
  );

  it('refuses per-request flags and a bad port (exit status 2)', async () => {
    const sampled = await rayo(['serve', '-m', model, '--temperature', '0.7']);
    expect(sampled.code).toBe(2);
    expect(sampled.stderr).toMatch(/--temperature.*per request/);
    const port = await rayo(['serve', '-m', model, '--port', '70000']);
    expect(port.code).toBe(2);
    expect(port.stderr).toMatch(/--port/);
    for (const [flags, named] of [
      [['--kv-pages', '8'], /--kv-pages.*without --batch/],
      [['--batch', '300'], /--batch.*at most 256/],
      [['--batch', '2', '--slots', '2'], /--slots.*absent with --batch/],
    ] as const) {
      const refused = await rayo(['serve', '-m', model, ...flags]);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(named);
    }
    const help = await rayo(['serve', '--help']);
    expect(help.stdout).toMatch(
      /^Usage: rayo serve --model PATH[\s\S]*--slots N[\s\S]*--batch N[\s\S]*--max-queue N/,
    );
  });
});
