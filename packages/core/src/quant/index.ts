export * from './gemvVariants.js';
export * from './int8Activations.js';
export * from './layout.js';
export * from './quantize.js';
export * from './quantizedWeight.js';
export * from './rounding.js';
