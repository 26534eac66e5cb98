export type { CliIo } from './io.js';
export { main } from './main.js';
