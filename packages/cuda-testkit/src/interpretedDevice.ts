import { CommandRecorder, CudaDriver, type DeviceBuffer, type PtxModule } from '@rayo/cuda-ptx';
import { afterAll } from 'vitest';
import { FakeLibCuda } from './fakeLibCuda.js';
import { PtxInterpreter } from './ptxInterpreter.js';

/** Buffers and launches on one driver (a real device or the interpreted fake), for tests. */
export interface TestDevice {
  /** Device memory holding `words`, or `words` zeroed words. */
  buffer(words: Uint32Array | number): DeviceBuffer;
  /** Launches `entry` of the module (built on first use) and waits for it. */
  launch(
    module: () => PtxModule,
    entry: string,
    geometry: { readonly grid?: number; readonly block: number },
    args: Readonly<Record<string, bigint | number>>,
  ): void;
  /** `count` words of a buffer, copied. */
  read(buffer: DeviceBuffer, count: number): Uint32Array;
  /** Frees the buffers. */
  dispose(): void;
}

/** A TestDevice on `driver`; `name` keeps its module keys apart from other devices'. */
export function testDevice(driver: CudaDriver, name: string): TestDevice {
  const stream = driver.createStream();
  const buffers: DeviceBuffer[] = [];
  let launches = 0;
  return {
    buffer(words) {
      const data = typeof words === 'number' ? new Uint32Array(words) : words;
      const buffer = driver.alloc(Math.max(data.byteLength, 16));
      buffers.push(buffer);
      driver.copyHtoD(buffer.ptr, data, data.byteLength);
      return buffer;
    },
    launch(module, entry, geometry, args) {
      const recorder = new CommandRecorder(driver);
      recorder.launch({
        key: `test/${name}/${launches++}`,
        module,
        entry,
        grid: geometry.grid ?? 1,
        block: geometry.block,
        args,
      });
      driver.enqueue(recorder.commands, stream);
      driver.synchronize(stream);
    },
    read(buffer, count) {
      const out = new Uint32Array(count);
      driver.copyDtoH(out, buffer.ptr, count * 4);
      return out;
    },
    dispose() {
      for (const b of buffers.splice(0)) driver.free(b);
    },
  };
}

/** A fake device whose launches run in the PTX interpreter. */
export function interpretedDevice(): TestDevice {
  const fake = new FakeLibCuda();
  new PtxInterpreter(fake).attach();
  return testDevice(new CudaDriver(fake), 'interpreted');
}

/** An interpreted device for a test suite; its buffers are freed after it. */
export function useInterpretedDevice(): TestDevice {
  const device = interpretedDevice();
  afterAll(() => device.dispose());
  return device;
}
