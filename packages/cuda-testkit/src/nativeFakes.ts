import { fileURLToPath } from 'node:url';

/**
 * C sources of fake native libraries with the signatures the koffi bindings
 * declare, so that a test can build one with the system C compiler and check
 * the binding itself (argument marshalling, out-parameters, strings).
 */
export const NATIVE_FAKE_SOURCES = {
  libcuda: fileURLToPath(new URL('../native/libcuda_fake.c', import.meta.url)),
  libnccl: fileURLToPath(new URL('../native/libnccl_fake.c', import.meta.url)),
} as const;
