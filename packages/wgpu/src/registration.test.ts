import { createBackend, InvalidArgumentError } from '@rayo/core';
import { checkRegisteredOnImport } from '@rayo/core/testing';
import { expect, it } from 'vitest';
import { backendProvider } from './index.js';

it("importing the package registers its provider for createBackend('wgpu')", () =>
  checkRegisteredOnImport(backendProvider));

it("createBackend('wgpu') refuses an option WgpuBackendOptions lacks, before asking for a device", async () => {
  expect(backendProvider.optionKeys).toEqual(
    expect.arrayContaining(['memoryBudgetBytes', 'adapter', 'f16Gemm']),
  );
  // @ts-expect-error: a misspelt option is a compile error once @rayo/wgpu is imported.
  const typo = createBackend('wgpu', { memoryBudget: 1 });
  await expect(typo).rejects.toThrow(InvalidArgumentError);
  await expect(typo).rejects.toThrow(
    /createBackend\('wgpu'\): unknown option 'memoryBudget' \(expected options among .*memoryBudgetBytes/,
  );
});
