// What a load's host steps cost on this host: device creation, buffer creation (staging mapped at
// creation or not, the 1B model's weight buffers), memcpy, and a worker's round trip.
import { create, globals } from 'webgpu';
import { Worker } from 'node:worker_threads';
Object.assign(globalThis, globals);
const t = () => performance.now();
let a = t();
const gpu = create(['disable-dawn-features=timestamp_quantization', 'enable-dawn-features=vulkan_enable_f16_on_nvidia']);
console.log(`instance ${(t() - a).toFixed(1)} ms`);
const sizes = [262668288, 65667072];
for (let l = 0; l < 16; l++) for (const [n, k] of [[3072, 2048], [2048, 2048], [8192, 2048], [8192, 2048], [2048, 8192]]) sizes.push(n * k / 2, n * k / 32 * 2);
for (let r = 0; r < 3; r++) {
  a = t();
  const adapter = await gpu.requestAdapter();
  const b = t();
  const device = await adapter.requestDevice({ requiredFeatures: [...adapter.features].filter((f) => f === 'shader-f16' || f === 'timestamp-query' || f === 'subgroups'), requiredLimits: { maxBufferSize: adapter.limits.maxBufferSize, maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize } });
  const c = t();
  const mapped = []; for (let i = 0; i < 8; i++) mapped.push(device.createBuffer({ size: 32 << 20, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC, mappedAtCreation: true }));
  const d = t();
  for (const m of mapped) new Uint8Array(m.getMappedRange()).fill(1);
  const d2 = t();
  const plain = []; for (let i = 0; i < 8; i++) plain.push(device.createBuffer({ size: 32 << 20, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC }));
  const e = t();
  const dsts = sizes.map((s) => device.createBuffer({ size: Math.ceil(s / 4) * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC }));
  const f = t();
  const big = device.createBuffer({ size: 800 << 20, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC });
  const g = t();
  console.log(`run ${r}: adapter ${(b - a).toFixed(1)} device ${(c - b).toFixed(1)} | 8x32MiB mappedAtCreation ${(d - c).toFixed(1)} (first write into them ${(d2 - d).toFixed(1)}) plain ${(e - d2).toFixed(1)} | ${sizes.length} weight buffers ${(f - e).toFixed(1)} | one 800 MiB ${(g - f).toFixed(1)} ms`);
  a = t(); device.destroy(); console.log(`  destroy ${(t() - a).toFixed(1)} ms`);
}
// Host: memcpy and a worker's round trip of a transferred buffer.
const src = new Uint8Array(256 << 20); for (let i = 0; i < src.length; i += 4096) src[i] = i;
const dst = new Uint8Array(256 << 20);
for (let r = 0; r < 3; r++) { a = t(); dst.set(src); console.log(`memcpy 256 MiB ${(t() - a).toFixed(1)} ms`); }
a = t();
const w = new Worker(`const { parentPort } = require('node:worker_threads'); parentPort.on('message', (m) => { let x = 0; const v = new Uint32Array(m.buffer); for (let i = 0; i < v.length; i += 1024) x ^= v[i]; parentPort.postMessage({ buffer: m.buffer, x }, [m.buffer]); });`, { eval: true });
const ready = t();
for (let r = 0; r < 3; r++) {
  const buf = new ArrayBuffer(64 << 20);
  const s = t();
  const back = await new Promise((res) => { w.once('message', res); w.postMessage({ buffer: buf }, [buf]); });
  console.log(`worker: made in ${(ready - a).toFixed(1)} ms, round trip of a transferred 64 MiB buffer ${(t() - s).toFixed(1)} ms (back ${back.buffer.byteLength})`);
}
await w.terminate();
