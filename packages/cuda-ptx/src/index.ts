export * from './ptx/index.js';
