import type { Backend } from '@rayo/core';

/**
 * `backend` seen as a device whose largest buffer is `maxBufferBytes`,
 * counting its uploads: for the loaders' checks that a weight too large for
 * one buffer is refused before anything is uploaded.
 */
export function limitedBackend(
  backend: Backend,
  maxBufferBytes: number,
): { backend: Backend; uploads: () => number } {
  let uploads = 0;
  const limited = new Proxy(backend, {
    get(target, key) {
      if (key === 'info') return { ...target.info, limits: { ...target.info.limits, maxBufferBytes } };
      const value = Reflect.get(target, key, target);
      if (key === 'upload') {
        return (...args: Parameters<Backend['upload']>) => {
          uploads++;
          return target.upload(...args);
        };
      }
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { backend: limited, uploads: () => uploads };
}
