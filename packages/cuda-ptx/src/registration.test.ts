import { createBackend, InvalidArgumentError } from '@rayo/core';
import { checkRegisteredOnImport } from '@rayo/core/testing';
import { expect, it } from 'vitest';
import { backendProvider } from './index.js';

it("importing the package registers its provider for createBackend('cuda')", () =>
  checkRegisteredOnImport(backendProvider));

it("createBackend('cuda') refuses an option CudaBackendOptions lacks, before probing the driver", async () => {
  expect([...(backendProvider.optionKeys ?? [])].sort()).toEqual([
    'attentionKernel',
    'attentionMaxSplits',
    'attentionSplitTokens',
    'attentionUnroll',
    'dependentLaunch',
    'device',
    'gemvSlices',
    'lib',
    'maxCachedBytes',
    'path',
    'qgemvActivations',
    'qgemvBlocksPerSm',
    'qgemvDepth',
    'qgemvMma',
    'qgemvPersistent',
    'qgemvSlices',
    'qgemvVariant',
    'weightPrefetch',
  ]);
  // @ts-expect-error: a misspelt option is a compile error once @rayo/cuda-ptx is imported.
  const typo = createBackend('cuda', { ordinal: 1 });
  await expect(typo).rejects.toThrow(InvalidArgumentError);
  await expect(typo).rejects.toThrow(/createBackend\('cuda'\): unknown option 'ordinal'/);
});
