import { describe, expect, it } from 'vitest';
import { createCpuBackend } from './cpu/backend.js';
import { DisposedTensorError, type RayoError, UnsubmittedWriteError } from './errors.js';
import { add, relu } from './kernels/elementwise.js';

async function rejection(submit: Promise<void>): Promise<RayoError> {
  return (await submit.then(
    () => expect.unreachable('the submit resolved'),
    (error: unknown) => error,
  )) as RayoError;
}

// A replay after a submit checks little (see BatchCalls): these are the cases it must still refuse.
describe('a batch replayed after a submit', () => {
  it('refuses a tensor disposed since, naming the first call that touches it', async () => {
    const backend = createCpuBackend();
    using a = backend.upload([-1, 2], [2]);
    const b = backend.upload([10, 20], [2]);
    const batch = backend.batch();
    const [y] = batch.run(relu, [a]);
    const [z] = batch.run(add, [y!, b]);
    await batch.submit();
    await batch.submit();
    b.dispose();
    const input = await rejection(batch.submit());
    expect(input).toBeInstanceOf(DisposedTensorError);
    expect([input.operation, input.argument]).toEqual(['add', 'b']);
    // An output only (no later call reads it) is checked too.
    const other = backend.batch();
    const [w] = other.run(relu, [a]);
    await other.submit();
    w!.dispose();
    const output = await rejection(other.submit());
    expect([output.constructor, output.operation, output.argument]).toEqual([
      DisposedTensorError,
      'relu',
      'y',
    ]);
    batch.dispose();
    other.dispose();
    y!.dispose();
    z!.dispose();
    backend.dispose();
  });

  it('checks the calls recorded since for outputs of an unsubmitted batch', async () => {
    const backend = createCpuBackend();
    using a = backend.upload([-1, 2], [2]);
    const batch = backend.batch();
    using y = batch.run(relu, [a])[0]!;
    await batch.submit();
    const writer = backend.batch();
    using p = writer.run(relu, [a])[0]!;
    using z = batch.run(add, [y, p])[0]!;
    const error = await rejection(batch.submit());
    expect([error.constructor, error.operation, error.argument]).toEqual([UnsubmittedWriteError, 'add', 'b']);
    await writer.submit();
    await batch.submit();
    expect([...(await z.read())]).toEqual([0, 4]);
    batch.dispose();
    writer.dispose();
    backend.dispose();
  });
});
