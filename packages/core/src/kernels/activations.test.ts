import { describe, expect, it } from 'vitest';
import { Rng } from '../testing/random.js';
import {
  ACTIVATION_FORMULAS,
  ACTIVATION_FUNCTIONS,
  geluGrad,
  geluOf,
  gradientOfInput,
  LINEAR_ACTIVATIONS,
  outputGradientFunction,
  sigmoidOf,
  siluGrad,
  siluOf,
} from './activations.js';
import { bind, compileFormula, operationCount, substitute, variable } from './formula.js';

// The table's formulas written out by hand, in the same operation order: the
// cpu reference must evaluate to exactly these doubles.
const S = Math.sqrt(2 / Math.PI);
const C = 0.044715;
const byHand = {
  sigmoid: (x: number) => 1 / (1 + Math.exp(-x)),
  gelu: (x: number) => 0.5 * x * (1 + Math.tanh(S * (x + C * x * x * x))),
  geluGrad: (x: number) => {
    const t = Math.tanh(S * (x + C * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * S * (1 + 3 * C * x * x);
  },
  siluGrad: (x: number) => {
    const s = 1 / (1 + Math.exp(-x));
    return s * (1 + x * (1 - s));
  },
};

describe('activation table', () => {
  const rng = new Rng(27);
  const xs = [
    ...Array.from({ length: 200 }, () => (rng.next() - 0.5) * 40),
    0,
    -0,
    1e-30,
    -1e-30,
    88,
    -104,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
  ];

  it('evaluates each formula in its written order', () => {
    for (const x of xs) {
      expect(sigmoidOf(x)).toBe(byHand.sigmoid(x));
      expect(geluOf(x)).toBe(byHand.gelu(x));
      expect(geluGrad(x)).toBe(byHand.geluGrad(x));
      expect(siluOf(x)).toBe(x * byHand.sigmoid(x));
      expect(siluGrad(x)).toBe(byHand.siluGrad(x));
      expect(ACTIVATION_FUNCTIONS.tanh.f(x)).toBe(Math.tanh(x));
      expect(ACTIVATION_FUNCTIONS.relu.f(x)).toBe(Math.max(x, 0));
      expect(ACTIVATION_FUNCTIONS.relu.grad(x)).toBe(x > 0 ? 1 : 0);
      expect(ACTIVATION_FUNCTIONS.none.f(x)).toBe(x);
      expect(ACTIVATION_FUNCTIONS.none.grad(x)).toBe(1);
    }
  });

  it('propagates NaN through every activation and gradient but the step of relu', () => {
    for (const name of LINEAR_ACTIVATIONS) {
      expect(ACTIVATION_FUNCTIONS[name].f(Number.NaN), name).toBeNaN();
      if (name !== 'relu' && name !== 'none')
        expect(ACTIVATION_FUNCTIONS[name].grad(Number.NaN), name).toBeNaN();
    }
    expect(ACTIVATION_FUNCTIONS.relu.grad(Number.NaN)).toBe(0);
  });

  it('takes a gradient of the output at y = act(x)', () => {
    for (const name of ['sigmoid', 'tanh'] as const) {
      const grad = outputGradientFunction(name);
      for (const x of xs)
        expect(ACTIVATION_FUNCTIONS[name].grad(x)).toBe(grad(ACTIVATION_FUNCTIONS[name].f(x)));
    }
    expect(() => outputGradientFunction('gelu')).toThrow(/formula of x/);
    expect(gradientOfInput('gelu')).toBe(ACTIVATION_FORMULAS.gelu.gradient.formula);
  });

  it('binds, substitutes and counts', () => {
    const f = bind('t', variable('x'), (t) => ({ op: '*', a: t, b: variable('y') }));
    expect(operationCount(f)).toBe(1);
    const g = compileFormula(substitute(f, 'y', 3), 'x', () => Math.abs);
    expect(g(2)).toBe(6);
    expect(() => compileFormula(variable('z'), 'x', () => Math.abs)).toThrow(/not bound/);
  });
});
