// The model worker: a dedicated Web Worker's script that serves one text
// model on the worker's WebGPU device (`navigator.gpu`, which workers have).
// Start it from the page as `new Worker(url, { type: 'module' })` on a bundle
// of `@rayo/web/worker`, and drive it with `TextModelWorker`.
import { createWgpuBackend } from '@rayo/wgpu';
import type { MessageEndpoint } from './protocol.js';
import { serveTextModel } from './server.js';

serveTextModel(globalThis as unknown as MessageEndpoint, { createBackend: () => createWgpuBackend() });
