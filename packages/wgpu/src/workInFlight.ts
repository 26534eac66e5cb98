// Device work in flight for a device loss to interrupt: shared by the fault
// suite's scenario and the tests.
import { add } from '@rayo/core';
import type { WgpuBackend } from './backend.js';

/**
 * Work for a device loss to interrupt: a submitted batch of `chain` adds over
 * `n` ones, and a read of its input queued behind it.
 */
export function workInFlight(backend: WgpuBackend, n: number, chain: number) {
  const x = backend.upload(new Float32Array(n).fill(1), [n]);
  const batch = backend.batch();
  let y = x;
  for (let i = 0; i < chain; i++) y = batch.run(add, [y, x])[0]!;
  return { x, submitted: batch.submit(), read: x.read() };
}
