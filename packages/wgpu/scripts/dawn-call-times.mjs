// Host time of Dawn's calls by kind, as a preload: `node --import
// ./dawn-call-times.mjs decode-bench.mjs …` (beside a bundled program, or
// from this folder). Every method a replayed step calls is timed; the times
// are summed per command buffer (a window ends at `queue.submit`). At exit it
// prints, to stderr, the median time of each kind of call, and the medians of
// a whole window for the windows with the most dispatches that repeat at
// least 8 times: a replayed decode step's. The wrapping itself adds about
// 0.1–0.2 µs a call, and slows a host-bound program.
import { createRequire } from 'node:module';

const { globals } = createRequire(import.meta.url)('webgpu');
const DISPATCH = 'GPUComputePassEncoder.dispatchWorkgroups';
const MIN_REPEATS = 8;

/** Per kind of call, [calls, ms] since the last submit. */
let window = new Map();
const windows = [];
/** Every call's ms, per kind. */
const calls = new Map();

function wrap(className, method) {
  const proto = globals[className]?.prototype;
  const original = proto?.[method];
  if (typeof original !== 'function') return;
  const kind = `${className}.${method}`;
  proto[method] = function (...args) {
    const start = performance.now();
    try {
      return original.apply(this, args);
    } finally {
      const ms = performance.now() - start;
      const sum = window.get(kind) ?? [0, 0];
      sum[0]++;
      sum[1] += ms;
      window.set(kind, sum);
      const all = calls.get(kind) ?? [];
      all.push(ms);
      calls.set(kind, all);
      if (kind === 'GPUQueue.submit') {
        windows.push(window);
        window = new Map();
      }
    }
  };
}

for (const m of ['submit', 'onSubmittedWorkDone', 'writeBuffer']) wrap('GPUQueue', m);
for (const m of ['beginComputePass', 'finish', 'copyBufferToBuffer', 'resolveQuerySet', 'clearBuffer'])
  wrap('GPUCommandEncoder', m);
for (const m of ['setPipeline', 'setBindGroup', 'dispatchWorkgroups', 'end'])
  wrap('GPUComputePassEncoder', m);
for (const m of ['pushErrorScope', 'popErrorScope', 'createCommandEncoder', 'createBindGroup'])
  wrap('GPUDevice', m);

const median = (values) => [...values].sort((a, b) => a - b)[values.length >> 1];
const us = (ms) => (ms * 1000).toFixed(1).padStart(9);

process.on('exit', () => {
  const lines = ['', 'Dawn calls on the host (dawn-call-times)', 'per call, all windows:'];
  for (const [kind, all] of [...calls].sort()) {
    lines.push(`  ${kind.padEnd(42)} ${String(all.length).padStart(8)} calls  median ${us(median(all))} µs`);
  }
  const byDispatches = new Map();
  for (const w of windows) {
    const d = w.get(DISPATCH)?.[0] ?? 0;
    byDispatches.set(d, [...(byDispatches.get(d) ?? []), w]);
  }
  const repeated = [...byDispatches].filter(([, ws]) => ws.length >= MIN_REPEATS);
  const step = repeated.sort((a, b) => b[0] - a[0])[0];
  if (step) {
    const [dispatches, ws] = step;
    lines.push(`per window of ${dispatches} dispatches (${ws.length} windows), medians:`);
    const kinds = new Set(ws.flatMap((w) => [...w.keys()]));
    for (const kind of [...kinds].sort()) {
      const n = median(ws.map((w) => w.get(kind)?.[0] ?? 0));
      const ms = median(ws.map((w) => w.get(kind)?.[1] ?? 0));
      lines.push(`  ${kind.padEnd(42)} ${String(n).padStart(8)} calls  ${us(ms)} µs`);
    }
    const total = median(ws.map((w) => [...w.values()].reduce((s, [, ms]) => s + ms, 0)));
    lines.push(`  all timed calls of a window: ${us(total).trim()} µs`);
  }
  process.stderr.write(`${lines.join('\n')}\n`);
});
