// Vitest setup file of the WGSL capture (see ../wgsl-hashes.mjs): every
// shader module a test creates on a device, and every text `sweep.capture.ts`
// asks for, is appended to this process's record in the folder that the
// script names. It patches Dawn's GPUDevice from outside, so the library
// itself carries no capture code.
//
// Unless the script is asked to compile the real texts, the device gets a
// stand-in for each: the same bindings, each used once, in an empty entry
// point. Bind groups, dispatches and copies then validate and run as before
// (the kernels just compute nothing), so every test drives its kernels as it
// would, without the minutes a software Vulkan spends compiling real shaders.
// The tests' assertions on results fail; the texts are what is wanted.
import { createHash } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';

const folder = process.env.RAYO_WGSL_CAPTURE;
if (!folder) throw new Error('record.ts runs under wgsl-hashes.mjs, which names the capture folder');
const compileReal = process.env.RAYO_WGSL_CAPTURE_COMPILE === '1';
const file = join(folder, `${process.pid}.jsonl`);

/** Appends one shader text under `key`. */
export function recordShader(key: string, code: string): void {
  const hash = createHash('sha256').update(code).digest('hex');
  appendFileSync(file, `${JSON.stringify({ key, hash, code })}\n`);
}

/** A shader with the bindings (and so the bind group layout) of `code`, and nothing else. */
export function standIn(code: string): string {
  const lines = [];
  if (/^enable f16;$/m.test(code)) lines.push('enable f16;');
  lines.push(...(code.match(/^alias \w+ = [^;]+;$/gm) ?? []));
  const struct = code.match(/^struct Params \{[^}]*\}/m);
  if (struct) lines.push(struct[0]);
  const uses = [];
  for (const [declaration, kind, name] of code.matchAll(
    /^@group\(0\) @binding\(\d+\) var<(storage|uniform)[^>]*> (\w+): [^;]+;$/gm,
  )) {
    lines.push(declaration);
    uses.push(kind === 'storage' ? `  _ = arrayLength(&${name});` : `  _ = ${name};`);
  }
  return [...lines, '@compute @workgroup_size(1)', 'fn main() {', ...uses, '}', ''].join('\n');
}

// Dawn's classes are shared by every test file of a worker: patch them once.
const PATCHED = Symbol.for('rayo.wgslCapture');
const webgpu = (await import('webgpu')) as unknown as { globals: { GPUDevice: { prototype: GPUDevice } } };
const device = webgpu.globals.GPUDevice.prototype as GPUDevice & { [PATCHED]?: boolean };
if (!device[PATCHED]) {
  const create = device.createShaderModule;
  device.createShaderModule = function (this: GPUDevice, descriptor: GPUShaderModuleDescriptor) {
    recordShader(descriptor.label ?? '(unlabelled)', descriptor.code);
    return create.call(this, compileReal ? descriptor : { ...descriptor, code: standIn(descriptor.code) });
  };
  device[PATCHED] = true;
}
