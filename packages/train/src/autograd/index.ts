export { broadcastTo, reduceToShape } from './broadcast.js';
export { ACTIVATIONS, type ActivationName } from './ops/activation.js';
export {
  type BackwardFn,
  type BackwardOptions,
  Tape,
  type TapeOptions,
  Variable,
  type VariableInit,
} from './tape.js';
