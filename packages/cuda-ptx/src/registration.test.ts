import { checkRegisteredOnImport } from '@rayo/core/testing';
import { it } from 'vitest';
import { backendProvider } from './index.js';

it("importing the package registers its provider for createBackend('cuda')", () =>
  checkRegisteredOnImport(backendProvider));
