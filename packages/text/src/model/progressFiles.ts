import { type OpenFile, openNodeFile } from '@rayo/train';
import type { LoadProgress } from './loadProgress.js';
import type { TensorLayout } from './modelFiles.js';

/**
 * Files opened through Node that report loading progress as the loader reads
 * them: each read of tensor data adds its bytes, and a read that ends where
 * a tensor ends counts that tensor as loaded (the loaders read a tensor in
 * order, in pieces). Header reads count nothing: they start before the
 * data, though a chunk of one may run into it.
 */
export function progressFiles(
  layout: TensorLayout,
  totals: Pick<LoadProgress, 'tensorsTotal' | 'bytesTotal'>,
  onProgress: (progress: LoadProgress) => void,
): OpenFile {
  let tensorsLoaded = 0;
  let bytesLoaded = 0;
  return async (path) => {
    const file = await openNodeFile(path);
    const { resolve } = await import('node:path');
    const ranges = layout.get(resolve(path)) ?? [];
    const dataStart = ranges[0]?.start ?? Number.POSITIVE_INFINITY;
    return {
      name: file.name,
      size: file.size,
      close: () => file.close(),
      async read(into, position) {
        await file.read(into, position);
        if (position < dataStart) return;
        const end = position + into.length;
        bytesLoaded += into.length;
        for (const r of ranges) if (r.end > position && r.end <= end) tensorsLoaded++;
        onProgress({
          tensorsLoaded,
          tensorsTotal: totals.tensorsTotal,
          bytesLoaded,
          bytesTotal: totals.bytesTotal,
        });
      },
    };
  };
}
