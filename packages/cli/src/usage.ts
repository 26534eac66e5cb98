import { DEFAULT_MAX_SEQUENCE } from '@rayo/text';
import { BACKENDS, DTYPES, KV_DTYPES, QUANTS } from './options.js';

const MODEL_HELP = `Model:
  -m, --model PATH          a Hugging Face model folder (config.json, model.safetensors,
                            tokenizer.json, tokenizer_config.json) or a .gguf file
  -b, --backend NAME        ${BACKENDS.join(' | ')} (default auto: cuda, else wgpu, else cpu,
                            whichever is installed and can run here)
      --dtype DTYPE         weights on the device: ${DTYPES.join(' | ')} (default checkpoint)
      --kv-dtype DTYPE      the KV cache: ${KV_DTYPES.join(' | ')} (default f32)
      --quant FORMAT        quantize a folder's projections on load: ${QUANTS.join(' | ')}
      --max-sequence N      KV cache rows, prompt and reply together (default: the model's
                            context, at most ${DEFAULT_MAX_SEQUENCE})

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

Run 'rayo <command> --help' for a command's flags.

  rayo generate --model ./model --prompt "Once upon a time"
  rayo chat --model ./model.gguf --backend cuda --system "You are terse."`;

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
