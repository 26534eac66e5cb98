export { memoryDirectory } from './memoryDirectory.js';
