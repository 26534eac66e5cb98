// WebGPU's global types (GPUDevice, GPUBuffer, …) for a program that uses
// the WebGPU objects this package exposes: `import type {} from
// '@rayo/wgpu/webgpu-types'`. They name DOM types, so a Node-only tsconfig
// also needs `DOM` in `lib` (or skipLibCheck) once it imports this.
/// <reference types="@webgpu/types" preserve="true" />
export {};
