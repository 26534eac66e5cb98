// Upload strategies on a fresh device each: host loop time and time until the GPU has it all.
import { create, globals } from 'webgpu';
Object.assign(globalThis, globals);
const gpu = create(['disable-dawn-features=timestamp_quantization']);
const MB = 1 << 20;
// Sizes like the 1B Q4_0 prepared tensors: embedding packed+scales, then 16 layers of 7 projections (packed, scales).
const sizes = [262668288, 65667072];
for (let l = 0; l < 16; l++) for (const [n, k] of [[3072, 2048], [2048, 2048], [8192, 2048], [8192, 2048], [2048, 8192]]) { sizes.push(n * k / 2, n * k / 32 * 2); }
const total = sizes.reduce((a, b) => a + b, 0);
const host = new Uint8Array(Math.max(...sizes)); for (let i = 0; i < host.length; i += 4096) host[i] = i & 255;
async function run(name, upload) {
  const adapter = await gpu.requestAdapter();
  const t0 = performance.now();
  const device = await adapter.requestDevice({ requiredLimits: { maxBufferSize: adapter.limits.maxBufferSize, maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize } });
  const t1 = performance.now();
  const dsts = sizes.map((s) => device.createBuffer({ size: Math.ceil(s / 4) * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST }));
  const t2 = performance.now();
  const ctx = { device, pending: [] };
  for (let i = 0; i < sizes.length; i++) { await upload(ctx, dsts[i], host.subarray(0, sizes[i])); if (i % 4 === 3) await new Promise((r) => setImmediate(r)); }
  const t3 = performance.now();
  await device.queue.onSubmittedWorkDone();
  const t4 = performance.now();
  console.log(`${name.padEnd(28)} device ${(t1 - t0).toFixed(0)} ms, dst alloc ${(t2 - t1).toFixed(0)} ms, host loop ${(t3 - t2).toFixed(0)} ms, all on GPU ${(t4 - t2).toFixed(0)} ms = ${(total / 1e6 / (t4 - t2)).toFixed(2)} GB/s`);
  device.destroy();
}
const writeWhole = async ({ device }, dst, data) => device.queue.writeBuffer(dst, 0, data);
const pieces = (piece) => async ({ device }, dst, data) => { for (let o = 0; o < data.length; o += piece) device.queue.writeBuffer(dst, o, data, o, Math.min(piece, data.length - o)); };
// Pooled mappedAtCreation staging of one size; falls back to writeBuffer pieces when none is ready.
function ring(piece, count) {
  return async (ctx, dst, data) => {
    const { device } = ctx; ctx.ready ??= []; ctx.made ??= 0;
    for (let o = 0; o < data.length; o += piece) {
      const n = Math.min(piece, data.length - o);
      let b = ctx.ready.pop();
      if (!b && ctx.made < count) { b = device.createBuffer({ size: piece, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC, mappedAtCreation: true }); ctx.made++; }
      if (!b) { device.queue.writeBuffer(dst, o, data, o, n); ctx.fallback = (ctx.fallback ?? 0) + 1; continue; }
      new Uint8Array(b.getMappedRange(0, Math.ceil(n / 4) * 4)).set(data.subarray(o, o + n));
      b.unmap();
      const e = device.createCommandEncoder(); e.copyBufferToBuffer(b, 0, dst, o, Math.ceil(n / 4) * 4); device.queue.submit([e.finish()]);
      b.mapAsync(GPUMapMode.WRITE).then(() => ctx.ready.push(b));
    }
  };
}
// Like rayo's UploadStaging: a mapped buffer per size bucket (powers of two), fresh on a new device, 256 MiB budget.
function buckets(budget) {
  return async (ctx, dst, data) => {
    const { device } = ctx; ctx.ready ??= new Map(); ctx.bytes ??= 0;
    if (data.length < MB) return device.queue.writeBuffer(dst, 0, data);
    const size = 2 ** Math.ceil(Math.log2(data.length));
    let b = ctx.ready.get(size)?.pop();
    if (!b && ctx.bytes + size <= budget) { b = device.createBuffer({ size, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC, mappedAtCreation: true }); ctx.bytes += size; }
    if (!b) return device.queue.writeBuffer(dst, 0, data);
    new Uint8Array(b.getMappedRange(0, data.length)).set(data); b.unmap();
    const e = device.createCommandEncoder(); e.copyBufferToBuffer(b, 0, dst, 0, data.length); device.queue.submit([e.finish()]);
    b.mapAsync(GPUMapMode.WRITE).then(() => { const l = ctx.ready.get(size) ?? []; l.push(b); ctx.ready.set(size, l); });
  };
}
console.log(`${sizes.length} tensors, ${(total / 1e6).toFixed(0)} MB`);
for (let rep = 0; rep < 2; rep++) {
  await run('buckets 256 MiB (as now)', buckets(256 * MB));
  await run('writeBuffer whole', writeWhole);
  await run('writeBuffer 4 MiB pieces', pieces(4 * MB));
  await run('writeBuffer 1 MiB pieces', pieces(MB));
  await run('writeBuffer 16 MiB pieces', pieces(16 * MB));
  await run('ring 8 x 16 MiB', ring(16 * MB, 8));
  await run('ring 4 x 32 MiB', ring(32 * MB, 4));
  await run('ring 16 x 8 MiB', ring(8 * MB, 16));
}
process.exit(0);
