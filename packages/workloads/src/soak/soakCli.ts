import { parseArgs } from 'node:util';
import { createBackendFromEnvironment } from '../backendFromEnvironment.js';
import { describeSoak, eagerSoak, replayedSoak, type SoakResult } from './callSoak.js';
import { describeCycles, memoryCycles } from './memoryCycles.js';
import { describeRequestSoak, requestSoak, requestSoakFailures } from './requestSoak.js';

export const SOAK_USAGE = `Usage: soak --backend NAME [--calls N] [--cycles N] [--requests N] [--modes eager,replayed,cycles,requests]

Leak checks of one backend. 'eager' makes N eager calls and 'replayed' N
replays of a recorded batch, sampling the JavaScript heap (after a forced
collection) and the backend's device memory (memory()); 'cycles' loads a
small Llama, generates, disposes it and empties the cache, N times;
'requests' sends N requests through the server's batched engine and
scheduler (random prompts, lengths and sampling, a third cancelled while
queued or after a few tokens, a pool small enough to preempt).

  --backend NAME   cpu, wgpu or cuda
  --calls N        calls of each soak (default 1000000)
  --cycles N       load/generate/dispose cycles (default 100)
  --requests N     requests of the 'requests' check (default 10000)
  --concurrency N  sequences the batched engine decodes at once (default 32)
  --modes LIST     which checks (default eager,replayed,cycles; 'requests' on demand)
  --config NAME    the model of the cycles and requests (default llama-tiny)
  --dtype D        f32, f16 or bf16: that model's weights (default f32)

Fails (exit 1) when the heap grows by more than HEAP_BOUND_BYTES over a soak
(default 16 MiB), when device memory or live tensors grow at all, or when
the cycles end more than 64 MiB above where they started, or when a request
does not end, a page or sequence is left held, or live tensors or allocated
bytes grow over the requests.`;

const MODES = ['eager', 'replayed', 'cycles', 'requests'] as const;
const DEFAULT_MODES = ['eager', 'replayed', 'cycles'];
const DTYPES = ['f32', 'f16', 'bf16'] as const;
type Mode = (typeof MODES)[number];
const CYCLE_BOUND = 64 * 2 ** 20;

function positive(text: string | undefined, fallback: number, flag: string): number {
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${flag} takes a whole number >= 1, got '${text}'`);
  return n;
}

function soakFailures(result: SoakResult, heapBound: number): string[] {
  const failed: string[] = [];
  if (result.heapGrowthBytes > heapBound)
    failed.push(`${result.mode}: heap grew ${result.heapGrowthBytes} bytes (bound ${heapBound})`);
  if (result.reservedGrowthBytes > 0)
    failed.push(`${result.mode}: reserved device memory grew ${result.reservedGrowthBytes} bytes`);
  if (result.liveTensorGrowth !== 0)
    failed.push(`${result.mode}: ${result.liveTensorGrowth} more live tensors`);
  return failed;
}

export async function main(argv: readonly string[]): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  let modes: Mode[];
  let calls: number;
  let cycles: number;
  let requests: number;
  let concurrency: number;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        backend: { type: 'string' },
        calls: { type: 'string' },
        cycles: { type: 'string' },
        requests: { type: 'string' },
        concurrency: { type: 'string' },
        dtype: { type: 'string' },
        modes: { type: 'string' },
        config: { type: 'string' },
        help: { type: 'boolean' },
      },
      strict: true,
    }));
    if (values.help) {
      console.log(SOAK_USAGE);
      return 0;
    }
    if (typeof values.backend !== 'string') throw new Error('--backend is required');
    calls = positive(values.calls as string | undefined, 1_000_000, '--calls');
    cycles = positive(values.cycles as string | undefined, 100, '--cycles');
    requests = positive(values.requests as string | undefined, 10_000, '--requests');
    concurrency = positive(values.concurrency as string | undefined, 32, '--concurrency');
    if (values.dtype !== undefined && !(DTYPES as readonly unknown[]).includes(values.dtype))
      throw new Error(`--dtype takes ${DTYPES.join(', ')}, got '${values.dtype}'`);
    modes = ((values.modes as string | undefined) ?? DEFAULT_MODES.join(',')).split(',').map((m) => {
      if (!(MODES as readonly string[]).includes(m))
        throw new Error(`unknown mode '${m}' (${MODES.join(', ')})`);
      return m as Mode;
    });
  } catch (error) {
    console.error(`soak: ${error instanceof Error ? error.message : String(error)}\n\n${SOAK_USAGE}`);
    return 2;
  }
  const heapBound = Number(process.env.HEAP_BOUND_BYTES ?? 16 * 2 ** 20);
  const backend = await createBackendFromEnvironment(values.backend as string);
  const failed: string[] = [];
  try {
    console.log(`soak on ${backend.name} (${backend.info.device})`);
    for (const mode of modes) {
      if (mode === 'requests') {
        const result = await requestSoak(backend, {
          requests,
          concurrency,
          onProgress: (done, seconds) => console.log(`  ${done} requests in ${seconds.toFixed(1)} s`),
          ...(typeof values.config === 'string' ? { config: values.config } : {}),
          ...(values.dtype ? { dtype: values.dtype as (typeof DTYPES)[number] } : {}),
        });
        console.log(describeRequestSoak(result));
        failed.push(...requestSoakFailures(result));
        continue;
      }
      if (mode === 'cycles') {
        const result = await memoryCycles(backend, {
          cycles,
          ...(typeof values.config === 'string' ? { config: values.config } : {}),
        });
        console.log(describeCycles(result));
        if (result.maxGrowthBytes > CYCLE_BOUND)
          failed.push(`cycles: ${result.maxGrowthBytes} bytes above the start (bound ${CYCLE_BOUND})`);
        continue;
      }
      const result = await (mode === 'eager' ? eagerSoak : replayedSoak)(backend, { calls });
      console.log(describeSoak(result));
      failed.push(...soakFailures(result, heapBound));
    }
    const m = backend.memory();
    console.log(
      `memory(): peak allocated ${m.peakAllocatedBytes}, peak reserved ${m.peakReservedBytes}, ${m.allocationRetries} allocation retries, ${m.outOfMemoryErrors} out-of-memory errors`,
    );
  } finally {
    backend.dispose();
  }
  for (const f of failed) console.log(`FAILED ${f}`);
  console.log(failed.length === 0 ? 'soak: every check held' : `soak: ${failed.length} check(s) failed`);
  return failed.length === 0 ? 0 : 1;
}
