// Host latency of waiting on the device: node packages/wgpu/scripts/latency.mjs
// (after `pnpm --filter @rayo/wgpu build`). Prints the median and mean per call.
import { scale } from '@rayo/core';
import { createWgpuBackend } from '../dist/index.js';

const N = Number(process.env.N ?? 200);

async function time(label, fn) {
  for (let i = 0; i < 20; i++) await fn();
  const t = [];
  for (let i = 0; i < N; i++) {
    const s = process.hrtime.bigint();
    await fn();
    t.push(Number(process.hrtime.bigint() - s) / 1e3);
  }
  t.sort((a, b) => a - b);
  const mean = t.reduce((a, b) => a + b, 0) / N;
  console.log(
    `${label.padEnd(40)} median ${t[N >> 1].toFixed(1).padStart(7)} µs  mean ${mean.toFixed(1).padStart(7)} µs`,
  );
}

const backend = await createWgpuBackend();
const { device } = backend;
const x = backend.upload([1], [1]);
const y = backend.upload(new Float32Array(32 * 1024), [32 * 1024]);
await backend.sync();

await time('raw: empty submit + onSubmittedWorkDone', async () => {
  device.queue.submit([device.createCommandEncoder().finish()]);
  await device.queue.onSubmittedWorkDone();
});
await time('sync() after an empty submit', async () => {
  device.queue.submit([device.createCommandEncoder().finish()]);
  await backend.sync();
});
await time('sync() idle', () => backend.sync());
await time('read 4 bytes', () => backend.read(x));
await time('read 128 KiB', () => backend.read(y));
await time('run scale + read 4 bytes', async () => {
  const z = backend.run(scale, [x], { alpha: 2 })[0];
  await backend.read(z);
  z.dispose();
});

// Where the host time of a replayed batch goes: encoding D dispatches (each a
// call into dawn.node), queue.submit (Dawn records the Vulkan commands there,
// before the device starts), and the wait until completion is observed.
const D = Number(process.env.DISPATCHES ?? 200);
const module = device.createShaderModule({
  code: '@group(0) @binding(0) var<storage, read_write> v: array<f32>;\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3u) { if (i.x < arrayLength(&v)) { v[i.x] += 1.0; } }',
});
const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
const buf = device.createBuffer({ size: 256, usage: GPUBufferUsage.STORAGE });
const group = device.createBindGroup({
  layout: pipeline.getBindGroupLayout(0),
  entries: [{ binding: 0, resource: { buffer: buf } }],
});
function encode(from, to) {
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  for (let d = from; d < to; d++) {
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(1);
  }
  pass.end();
  return encoder.finish();
}
const phases = { encode: [], submit: [], wait: [] };
for (let i = 0; i < 20 + N; i++) {
  const t0 = process.hrtime.bigint();
  const commands = encode(0, D);
  const t1 = process.hrtime.bigint();
  device.queue.submit([commands]);
  const t2 = process.hrtime.bigint();
  await device.queue.onSubmittedWorkDone();
  const t3 = process.hrtime.bigint();
  if (i < 20) continue;
  phases.encode.push(Number(t1 - t0) / 1e3);
  phases.submit.push(Number(t2 - t1) / 1e3);
  phases.wait.push(Number(t3 - t2) / 1e3);
}
for (const [name, t] of Object.entries(phases)) {
  t.sort((a, b) => a - b);
  console.log(`${D} dispatches: ${name.padEnd(27)} median ${t[N >> 1].toFixed(1).padStart(7)} µs`);
}
// Submitting in parts lets the device start on the first while the host encodes the rest.
for (const chunk of [D, 100, 50, 25]) {
  await time(`${D} dispatches in submits of ${chunk}`, async () => {
    for (let d = 0; d < D; d += chunk) device.queue.submit([encode(d, Math.min(D, d + chunk))]);
    await device.queue.onSubmittedWorkDone();
  });
}
// Completion is seen within this many event-loop turns of the work finishing
// (dawn.node polls Dawn from setImmediate while a wait is pending).
let turns = 0;
let spinning = true;
const spin = () => {
  turns++;
  if (spinning) setImmediate(spin);
};
spin();
for (let i = 0; i < N; i++) {
  device.queue.submit([device.createCommandEncoder().finish()]);
  await device.queue.onSubmittedWorkDone();
}
spinning = false;
console.log(`event-loop turns per empty submit + wait: ${(turns / N).toFixed(2)}`);
buf.destroy();
x.dispose();
y.dispose();
backend.dispose();
