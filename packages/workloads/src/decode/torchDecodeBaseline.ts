import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { PythonScriptOutcome } from '@rayo/bench';
import { runCheckpointBaseline } from './checkpointBaseline.js';
import type { DecodeRun, DecodeSettings } from './decodeRun.js';

/** What the PyTorch decode baseline writes. */
export interface TorchDecodeOutput {
  readonly schema: 'rayo-decode-torch/1';
  readonly available: boolean;
  readonly reason?: string;
  readonly torch?: string;
  readonly cuda?: string | null;
  readonly device?: string;
  readonly weightBytes?: number;
  readonly results: Readonly<
    Record<
      string,
      | (Omit<DecodeRun, 'prefillMs'> & { readonly prefillMs: number; readonly meanMsPerToken: number })
      | { readonly error: string }
    >
  >;
}

/** The baseline as the report keeps it. */
export type TorchDecodeEntry = PythonScriptOutcome<TorchDecodeOutput>;

/** The baseline as it ran, with the prompt's logits it wrote. */
export type TorchDecodeOutcome =
  | { readonly status: 'ok'; readonly output: TorchDecodeOutput; readonly logits?: Float32Array }
  | { readonly status: 'unavailable'; readonly reason: string };

export const TORCH_DECODE_SCRIPT = 'torch_decode_baseline.py';

/**
 * Runs the PyTorch decode baseline on the checkpoint in `dir` (as a child
 * process) and reads what it wrote, the prompt's logits included. Never throws
 * for a missing Python, torch or GPU: the outcome says why.
 */
export async function runTorchDecode(
  dir: string,
  prompt: readonly number[],
  settings: Pick<DecodeSettings, 'out' | 'newTokens' | 'warmupTokens' | 'torchDevice' | 'dtype' | 'kvDtype'>,
): Promise<TorchDecodeOutcome> {
  const logitsFile = join(settings.out, 'torch-logits.f32');
  const outcome = await runCheckpointBaseline<TorchDecodeOutput>({
    script: TORCH_DECODE_SCRIPT,
    dir,
    out: settings.out,
    name: 'torch-decode',
    request: {
      schema: 'rayo-decode-request/1',
      prompt,
      newTokens: settings.newTokens,
      warmupTokens: settings.warmupTokens,
      dtype: settings.dtype,
      kvDtype: settings.kvDtype,
    },
    args: ['--logits', logitsFile],
    torchDevice: settings.torchDevice,
    label: 'the decode baseline',
  });
  if (outcome.status !== 'ok') return outcome;
  try {
    const bytes = await readFile(logitsFile);
    return {
      ...outcome,
      logits: new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4).slice(),
    };
  } catch {
    return outcome;
  }
}
