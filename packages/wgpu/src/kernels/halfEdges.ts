import { isHalf, UnsupportedOnBackendError } from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import { encodeCast } from './cast.js';

// Half tensors a kernel's shaders take in f32: the activations, bias and c
// of the matrix products (whose shaders read half weights natively, what a
// decode step reads most of), half outputs that invocations cannot store a
// u32 word at a time (rows whose adjacent columns belong to different
// invocations), and the backward kernels. Half inputs are widened into f32
// scratch by the cast shader first; half outputs are computed into f32
// scratch and rounded once (to nearest even) by it afterwards. For the
// products these are the small side (M·K + M·N against N·K weights).

/** An f32 scratch tensor of `like`'s shape, living until the submission finished. */
export function f32Scratch(encoder: KernelEncoder, like: Operand, kernel: string, argument: string): Operand {
  const bytes = like.size * 4;
  if (bytes > encoder.maxBindingBytes) {
    throw new UnsupportedOnBackendError(
      `${kernel}: a half '${argument}' this large cannot be widened in one piece`,
      {
        operation: kernel,
        argument,
        expected: `at most ${Math.floor(encoder.maxBindingBytes / 4)} elements in half precision`,
        actual: `${like.size} elements in ${like.dtype}`,
      },
    );
  }
  return {
    buffer: encoder.scratch(Math.max(16, bytes)),
    offset: 0,
    size: like.size,
    shape: like.shape,
    dtype: 'f32',
  };
}

/**
 * Runs `encode` with every half tensor of `widen` (named for errors) as an
 * f32 copy and every half tensor of `outputs` as f32 scratch, then rounds the
 * scratch into those outputs. Tensors already f32, and those `encode` reads
 * in half itself, are passed as they are.
 */
export function encodeWithF32Activations<
  I extends Record<string, Operand | undefined>,
  O extends Record<string, Operand | undefined>,
>(
  encoder: KernelEncoder,
  kernel: string,
  widen: I,
  outputs: O,
  encode: (inputs: I, outputs: O) => void,
): void {
  const wide = (from: Record<string, Operand | undefined>, copy: boolean) =>
    Object.fromEntries(
      Object.entries(from).map(([name, t]) => {
        if (!t || !isHalf(t.dtype)) return [name, t];
        const f32 = f32Scratch(encoder, t, kernel, name);
        if (copy) encodeCast(encoder, t, f32);
        return [name, f32];
      }),
    );
  const outs = wide(outputs, false) as O;
  encode(wide(widen, true) as I, outs);
  for (const [name, y] of Object.entries(outputs)) {
    const f32 = outs[name];
    if (y && f32 && f32 !== y) encodeCast(encoder, f32, y);
  }
}
