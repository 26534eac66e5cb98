import { DEFAULT_MAX_SEQUENCE } from '@rayo/text';
import { ACTIVATIONS, BACKENDS, DTYPES, KV_DTYPES, QUANTS } from './options.js';

const LOAD_HELP = `Model:
  -m, --model PATH          a Hugging Face model folder (config.json, model.safetensors,
                            tokenizer.json, tokenizer_config.json) or a .gguf file
  -b, --backend NAME        ${BACKENDS.join(' | ')} (default auto: cuda, else wgpu, else cpu,
                            whichever is installed and can run here)
      --dtype DTYPE         weights on the device: ${DTYPES.join(' | ')} (default checkpoint)
      --kv-dtype DTYPE      the KV cache: ${KV_DTYPES.join(' | ')} (default: the weights'
                            dtype where half, f16 for an all-quantized GGUF
                            file, else f32)
      --quant FORMAT        quantize a folder's projections on load: ${QUANTS.join(' | ')}
      --activations KIND    quantized projections' x: ${ACTIVATIONS.join(' | ')} (default int8:
                            int8 blocks where the backend has such kernels, as llama.cpp)
      --max-sequence N      KV cache rows, prompt and reply together (default: the model's
                            context, at most ${DEFAULT_MAX_SEQUENCE})`;

const MODEL_HELP = `${LOAD_HELP}

Sampling (defaults: the model's generation_config.json, else greedy):
  -n, --max-new-tokens N    most tokens per reply (default 256, within --max-sequence)
  -t, --temperature T       0 is greedy
      --top-k K             sample among the K most likely tokens
      --top-p P             sample among the most likely tokens that make up P
      --seed N              seed of the sampler (default 0; in chat, each reply the next)
      --stop TEXT           end the reply before TEXT (repeatable)

Output:
  -q, --quiet               no progress bar or statistics on stderr
  -h, --help                this help`;

export const MAIN_USAGE = `Usage: rayo <command> [flags]

Text generation with rayo's Llama-family decoder on the cpu, WebGPU or CUDA backend.

Commands:
  generate    continue a prompt and print the text as it comes
  chat        talk with a model, one reply per line you type
  serve       answer OpenAI-style chat and text completions over HTTP

Run 'rayo <command> --help' for a command's flags.

  rayo generate --model ./model --prompt "Once upon a time"
  rayo chat --model ./model.gguf --backend cuda --system "You are terse."
  rayo serve --model ./model --port 8080`;

export const GENERATE_USAGE = `Usage: rayo generate --model PATH --prompt TEXT [flags]

Continues the prompt and streams the text to stdout; statistics (time to the
first token, tokens per second) go to stderr.

Prompt:
  -p, --prompt TEXT         the prompt ('-' reads it from stdin)
      --chat                send the prompt as a user message through the model's chat
                            template (with --system as the system message)
  -s, --system TEXT         the system message of --chat
      --json                print one JSON object (text, statistics) instead of streaming

${MODEL_HELP}`;

export const CHAT_USAGE = `Usage: rayo chat --model PATH [flags]

Reads a line, streams the model's reply, and keeps the conversation, rendered
by the model's chat template. Type /reset to start over, /exit (or Ctrl+D) to
leave; Ctrl+C stops a reply.

  -s, --system TEXT         the system message

${MODEL_HELP}`;

export const SERVE_USAGE = `Usage: rayo serve --model PATH [flags]

Serves the model over HTTP with OpenAI's API until Ctrl+C: POST /v1/chat/completions,
POST /v1/completions (streamed as server-sent events with "stream": true),
GET /v1/models, GET /health and GET /metrics (Prometheus). Sampling is per
request (temperature, top_p, seed, max_tokens, stop).

Server:
      --host HOST           the address to listen on (default 127.0.0.1; 0.0.0.0 for every
                            interface: the server has no authentication)
      --port N              the port (default 8080; 0 picks a free one)
      --model-name NAME     the id clients pass as "model" (default: the folder or file name)
      --slots N             sequences decoded at once, each a copy of the model with its own
                            KV cache (default 1; N copies take N times the memory)
      --batch N             decode up to N sequences (1 … 256) in one step over one copy of the
                            model, their KV caches in pages of a shared pool (instead of --slots)
      --kv-pages N          pages of the pool (default: every sequence at --max-sequence); fewer
                            admit sequences by free pages and preempt the newest when it runs out
      --page-size N         rows of a page (default 16)
      --max-concurrent N    sequences admitted at once (default: --slots or --batch)
      --max-queue N         requests waiting for a slot; more get 429 (default 64)
      --queue-timeout S     seconds a request may wait; then 503 (default 30)
      --max-prompt-tokens N longest prompt; longer is a 400 (default: --max-sequence)
      --max-tokens N        most max_tokens a request may ask (default: --max-sequence)
  -n, --max-new-tokens N    max_tokens of a request that sets none (default 256)

${LOAD_HELP}

  -q, --quiet               no progress bar on stderr (the address is always printed)
  -h, --help                this help`;
