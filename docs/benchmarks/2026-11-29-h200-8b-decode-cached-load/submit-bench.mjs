// Host time of encoding and submitting 100 trivial dispatches, by the size of the buffers they bind.
import { create, globals } from 'webgpu';
Object.assign(globalThis, globals);
const gpu = create(['disable-dawn-features=timestamp_quantization']);
const adapter = await gpu.requestAdapter();
const device = await adapter.requestDevice({ requiredLimits: { maxBufferSize: adapter.limits.maxBufferSize, maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize } });
console.log('maxBufferSize', adapter.limits.maxBufferSize, 'maxStorageBufferBindingSize', adapter.limits.maxStorageBufferBindingSize);
const code = `@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3u) { if (g.x == 0u) { out[0] = a[0] + a[arrayLength(&a) - 1u]; } }`;
const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code }), entryPoint: 'main' } });
const out = device.createBuffer({ size: 256, usage: GPUBufferUsage.STORAGE });
const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
const DISPATCHES = Number(process.env.DISPATCHES ?? 100);
const maxBinding = device.limits.maxStorageBufferBindingSize;
const cases = [];
for (const [label, size] of [['4 KiB', 4096], ['1 MiB', 1 << 20], ['64 MiB', 64 << 20], ['512 MiB', 512 << 20], ['1 GiB', 1 << 30]]) {
  if (size > maxBinding) continue;
  cases.push([`${label} whole`, size, 16, false]);
  if (size * 16 <= 2 ** 31) cases.push([`${label} in one`, size, 16, true]);
}
for (const [label, size, count, shared] of cases) {
  const buffers = shared
    ? [device.createBuffer({ size: size * count, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST })]
    : Array.from({ length: count }, () => device.createBuffer({ size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST }));
  const resource = (i) => (shared ? { buffer: buffers[0], offset: (i % count) * size, size } : { buffer: buffers[i % count] });
  const groups = Array.from({ length: DISPATCHES }, (_, i) => device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: resource(i) }, { binding: 1, resource: { buffer: out } }] }));
  const enc = [], sub = [];
  for (let r = 0; r < 25; r++) {
    const t0 = performance.now();
    const e = device.createCommandEncoder();
    const pass = e.beginComputePass();
    pass.setPipeline(pipeline);
    for (const g of groups) { pass.setBindGroup(0, g); pass.dispatchWorkgroups(1); }
    pass.end();
    const cb = e.finish();
    const t1 = performance.now();
    device.queue.submit([cb]);
    const t2 = performance.now();
    await device.queue.onSubmittedWorkDone();
    if (r >= 5) { enc.push(t1 - t0); sub.push(t2 - t1); }
  }
  console.log(`${label.padEnd(16)} x${count}: encode ${(median(enc) * 1000).toFixed(0)} us, submit ${(median(sub) * 1000).toFixed(0)} us for ${DISPATCHES} dispatches (${(median(sub) * 1000 / DISPATCHES).toFixed(1)} us each)`);
  for (const b of buffers) b.destroy();
}
process.exit(0);
