// Staging buffers made plain and mapped with mapAsync: main-thread time until mapped (timer ticks meanwhile).
import { create, globals } from 'webgpu';
Object.assign(globalThis, globals);
const t = () => performance.now();
const gpu = create(['disable-dawn-features=timestamp_quantization']);
for (let r = 0; r < 3; r++) {
  const adapter = await gpu.requestAdapter();
  const device = await adapter.requestDevice();
  let a = t();
  const bufs = []; for (let i = 0; i < 8; i++) bufs.push(device.createBuffer({ size: 32 << 20, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC }));
  const b = t();
  const maps = bufs.map((x) => x.mapAsync(GPUMapMode.WRITE));
  const c = t();
  // Main-thread time while the maps resolve: count timer ticks.
  let ticks = 0; const iv = setInterval(() => ticks++, 1);
  await Promise.all(maps);
  clearInterval(iv);
  const d = t();
  for (const x of bufs) new Uint8Array(x.getMappedRange()).fill(1);
  const e = t();
  console.log(`run ${r}: create 8 plain ${(b - a).toFixed(1)} ms, mapAsync calls ${(c - b).toFixed(1)} ms, until mapped ${(d - c).toFixed(1)} ms (${ticks} timer ticks meanwhile), first write ${(e - d).toFixed(1)} ms`);
  device.destroy();
}
