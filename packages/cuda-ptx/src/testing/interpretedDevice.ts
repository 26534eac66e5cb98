import { afterAll } from 'vitest';
import { CudaDriver } from '../driver/driver.js';
import type { DeviceBuffer } from '../driver/pool.js';
import { CommandRecorder } from '../encoder.js';
import type { PtxModule } from '../ptx/module.js';
import { FakeLibCuda } from './fakeLibCuda.js';
import { PtxInterpreter } from './ptxInterpreter.js';

/** A fake device whose launches run in the PTX interpreter, for one test file. */
export interface InterpretedDevice {
  /** Device memory holding `words`, or `words` zeroed words. */
  buffer(words: Uint32Array | number): DeviceBuffer;
  /** Launches `entry` of the module (built on first use) and runs it to completion. */
  launch(
    module: () => PtxModule,
    entry: string,
    geometry: { readonly grid?: number; readonly block: number },
    args: Readonly<Record<string, bigint | number>>,
  ): void;
  /** `count` words of a buffer, copied. */
  read(buffer: DeviceBuffer, count: number): Uint32Array;
}

/** An interpreted device for a test suite; its buffers are freed after it. */
export function useInterpretedDevice(): InterpretedDevice {
  const fake = new FakeLibCuda();
  new PtxInterpreter(fake).attach();
  const driver = new CudaDriver(fake);
  const stream = driver.createStream();
  const buffers: DeviceBuffer[] = [];
  afterAll(() => {
    for (const b of buffers) driver.free(b);
  });
  let launches = 0;
  return {
    buffer(words) {
      const bytes = typeof words === 'number' ? words * 4 : words.byteLength;
      const buffer = driver.alloc(Math.max(bytes, 16));
      buffers.push(buffer);
      const init =
        typeof words === 'number'
          ? new Uint8Array(bytes)
          : new Uint8Array(words.buffer, words.byteOffset, bytes);
      fake.memory.write(buffer.ptr, init);
      return buffer;
    },
    launch(module, entry, geometry, args) {
      const recorder = new CommandRecorder(driver);
      recorder.launch({
        key: `test/interpreted/${launches++}`,
        module,
        entry,
        grid: geometry.grid ?? 1,
        block: geometry.block,
        args,
      });
      driver.enqueue(recorder.commands, stream);
    },
    read(buffer, count) {
      return fake.memory.u32(buffer.ptr, count).slice();
    },
  };
}
