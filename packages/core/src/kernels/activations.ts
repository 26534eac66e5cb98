// The activations, each declared once as a formula with its exact numerical
// form: the unary maps, their backward maps, `linear`'s epilogue and
// `biasActivationBackward` use them, the cpu reference evaluates them here,
// and each backend renders the same trees into its own code (WGSL in wgpu,
// PTX in cuda-ptx).
import {
  act,
  add,
  bind,
  call,
  compileFormula,
  div,
  type Formula,
  mul,
  neg,
  sub,
  substitute,
  variable,
} from './formula.js';

/** The activations a `linear` epilogue applies; `none` leaves x·wᵀ + b. */
export const LINEAR_ACTIVATIONS = ['none', 'relu', 'gelu', 'silu', 'sigmoid', 'tanh'] as const;
export type LinearActivation = (typeof LINEAR_ACTIVATIONS)[number];

export interface ActivationFormula {
  /** y as a formula of the argument `x`. */
  readonly forward: Formula;
  /** dy/dx as a formula of the argument `x`, or of the output `y` where that is how the backward map takes it. */
  readonly gradient: { readonly of: 'x' | 'y'; readonly formula: Formula };
  /** Floating-point operations per element of the forward, for cost estimates. */
  readonly flops: number;
}

const x = variable('x');
const y = variable('y');

/** √(2/π) and the cubic coefficient of GELU's tanh approximation (PyTorch `approximate='tanh'`). */
export const GELU_SQRT_2_OVER_PI = Math.sqrt(2 / Math.PI);
export const GELU_CUBIC = 0.044715;

/** u of GELU's tanh approximation 0.5·x·(1 + tanh(u)): √(2/π)·(x + 0.044715·x³). */
const geluU = mul(GELU_SQRT_2_OVER_PI, add(x, mul(mul(mul(GELU_CUBIC, x), x), x)));

/**
 * The table, in the order a backend declares helper functions for them (a
 * formula calls only the entries above it). NaN propagates through every
 * formula as IEEE arithmetic does; relu keeps it explicitly (its max would not).
 */
export const ACTIVATION_FORMULAS: Readonly<Record<LinearActivation, ActivationFormula>> = {
  none: { forward: x, gradient: { of: 'x', formula: 1 }, flops: 0 },
  relu: { forward: call('relu', x), gradient: { of: 'x', formula: call('step', x) }, flops: 1 },
  sigmoid: {
    forward: div(1, add(1, call('exp', neg(x)))),
    gradient: { of: 'y', formula: mul(y, sub(1, y)) },
    flops: 3,
  },
  tanh: { forward: call('tanh', x), gradient: { of: 'y', formula: sub(1, mul(y, y)) }, flops: 4 },
  gelu: {
    forward: mul(mul(0.5, x), add(1, call('tanh', geluU))),
    // 0.5·(1 + t) + 0.5·x·(1 − t²)·u′ with t = tanh(u), u′ = √(2/π)·(1 + 3·0.044715·x²).
    gradient: {
      of: 'x',
      formula: bind('t', call('tanh', geluU), (t) =>
        add(
          mul(0.5, add(1, t)),
          mul(
            mul(mul(mul(0.5, x), sub(1, mul(t, t))), GELU_SQRT_2_OVER_PI),
            add(1, mul(mul(mul(3, GELU_CUBIC), x), x)),
          ),
        ),
      ),
    },
    flops: 8,
  },
  silu: {
    forward: mul(x, act('sigmoid', x)),
    gradient: {
      of: 'x',
      formula: bind('s', act('sigmoid', x), (s) => mul(s, add(1, mul(x, sub(1, s))))),
    },
    flops: 4,
  },
};

/** An activation's gradient as a formula of its argument `x` (a gradient of `y` takes y = act(x)). */
export function gradientOfInput(name: LinearActivation): Formula {
  const { of, formula } = ACTIVATION_FORMULAS[name].gradient;
  return of === 'x' ? formula : substitute(formula, 'y', act(name, x));
}

const compiled = new Map<string, (v: number) => number>();
function compiledOnce(key: string, make: () => (v: number) => number): (v: number) => number {
  let fn = compiled.get(key);
  if (!fn) {
    fn = make();
    compiled.set(key, fn);
  }
  return fn;
}

const forwardFunction = (name: string): ((v: number) => number) =>
  compiledOnce(`${name}`, () =>
    compileFormula(ACTIVATION_FORMULAS[name as LinearActivation].forward, 'x', forwardFunction),
  );

/** Each activation and its derivative, both as functions of the pre-activation z: the cpu reference. */
export const ACTIVATION_FUNCTIONS: Readonly<
  Record<
    LinearActivation,
    { readonly f: (z: number) => number; readonly grad: (z: number) => number; readonly flops: number }
  >
> = Object.fromEntries(
  LINEAR_ACTIVATIONS.map((name) => [
    name,
    {
      f: forwardFunction(name),
      grad: compileFormula(gradientOfInput(name), 'x', forwardFunction),
      flops: ACTIVATION_FORMULAS[name].flops,
    },
  ]),
) as Record<LinearActivation, { f: (z: number) => number; grad: (z: number) => number; flops: number }>;

/** d act/dx from the forward output y, for the activations whose backward map takes y (sigmoid, tanh). */
export function outputGradientFunction(name: LinearActivation): (y: number) => number {
  const { of, formula } = ACTIVATION_FORMULAS[name].gradient;
  if (of !== 'y') throw new Error(`the gradient of '${name}' is a formula of x, not of y`);
  return compiledOnce(`${name}/dy`, () => compileFormula(formula, 'y', forwardFunction));
}

export const sigmoidOf = ACTIVATION_FUNCTIONS.sigmoid.f;
/** GELU, tanh approximation (PyTorch `approximate='tanh'`). */
export const geluOf = ACTIVATION_FUNCTIONS.gelu.f;
export const siluOf = ACTIVATION_FUNCTIONS.silu.f;
/** d GELU/dx of the tanh approximation. */
export const geluGrad = ACTIVATION_FUNCTIONS.gelu.grad;
/** d SiLU/dx. */
export const siluGrad = ACTIVATION_FUNCTIONS.silu.grad;
