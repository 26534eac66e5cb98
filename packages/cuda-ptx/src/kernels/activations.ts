// PTX of core's activation table: each formula rendered into instruction
// builders, in the tree's operation order, with the f32 functions of math.ts
// for its primitives. Where a formula evaluated as written would cancel or
// overflow in f32, a device form of the same function stands for it
// (math.test.ts checks each against the table's reference).
import { ACTIVATION_FORMULAS, type Formula, type LinearActivation } from '@rayo/core';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { F32 } from '../ptx/operands.js';
import {
  arithmeticF32,
  expF32,
  geluF32,
  geluGradF32,
  sigmoidF32,
  sigmoidParts,
  siluF32,
  siluGradF32,
  tanhF32,
} from './math.js';

type Rendered = (k: KernelBuilder, x: F32) => F32;

function f32(k: KernelBuilder): F32 {
  return k.reg('f32');
}

/**
 * Device forms: sigmoid with an IEEE reciprocal and 1 − s without
 * cancelling, GELU as x·sigmoid(2u) (0.5·x·(1 + tanh u) cancels for x < 0),
 * SiLU and the gradients of all three through the same parts.
 */
const DEVICE_FORMS: Partial<
  Record<LinearActivation, { readonly forward: Rendered; readonly gradient: Rendered }>
> = {
  sigmoid: {
    forward: sigmoidF32,
    gradient: (k, z) => {
      const { s, oneMinusS } = sigmoidParts(k, z);
      return k.mul('f32', f32(k), s, oneMinusS, { rnd: 'rn' });
    },
  },
  gelu: { forward: geluF32, gradient: geluGradF32 },
  silu: { forward: siluF32, gradient: siluGradF32 },
};

type Operand = F32 | number;

type Product = { readonly op: '*'; readonly a: Formula; readonly b: Formula };
const isProduct = (f: Formula): f is Product => typeof f !== 'number' && 'op' in f && f.op === '*';

/**
 * `f` as an operand: a number stays an immediate, a variable its register;
 * anything else gets its destination register before its operands are
 * rendered. c ± a·b is contracted into one fma (one rounding, as nvcc does).
 */
function operand(k: KernelBuilder, f: Formula, env: Readonly<Record<string, F32>>): Operand {
  if (typeof f === 'number') return f;
  if ('v' in f) {
    const r = env[f.v];
    if (!r) throw new Error(`formula variable '${f.v}' is not bound`);
    return r;
  }
  switch (f.op) {
    case 'neg': {
      const d = f32(k);
      return k.neg('f32', d, operand(k, f.a, env));
    }
    case 'call': {
      if (f.fn === 'relu' || f.fn === 'step') {
        const d = f32(k);
        const a = operand(k, f.a, env) as F32;
        // relu: a where a > 0 or a is NaN (as Math.max does), else +0; step: 1 where a > 0.
        return f.fn === 'relu'
          ? k.selp('f32', d, a, 0, k.setp('gtu', 'f32', k.reg('pred'), a, 0))
          : k.selp('f32', d, 1, 0, k.setp('gt', 'f32', k.reg('pred'), a, 0));
      }
      const a = registerOf(k, f.a, env);
      return f.fn === 'exp' ? expF32(k, a) : tanhF32(k, a);
    }
    case 'act':
      return activationF32(k, f.name as LinearActivation, registerOf(k, f.a, env));
    case 'let':
      return operand(k, f.body, { ...env, [f.name]: registerOf(k, f.value, env) });
    default: {
      const d = f32(k);
      if (f.op === '-' && isProduct(f.b)) {
        const na = k.neg('f32', f32(k), operand(k, f.b.a, env));
        return k.fma('f32', d, na, operand(k, f.b.b, env), operand(k, f.a, env));
      }
      if (f.op === '+' && (isProduct(f.a) || isProduct(f.b))) {
        const [product, addend] = isProduct(f.a) ? [f.a, f.b] : [f.b as Product, f.a];
        return k.fma(
          'f32',
          d,
          operand(k, product.a, env),
          operand(k, product.b, env),
          operand(k, addend, env),
        );
      }
      return arithmeticF32(k, f.op, d, operand(k, f.a, env), operand(k, f.b, env));
    }
  }
}

/** `f` in a register (a number is moved into one). */
function registerOf(k: KernelBuilder, f: Formula, env: Readonly<Record<string, F32>>): F32 {
  const r = operand(k, f, env);
  return typeof r === 'number' ? k.mov('f32', f32(k), r) : r;
}

/** An activation of the table applied to z. */
export function activationF32(k: KernelBuilder, name: LinearActivation, z: F32): F32 {
  const device = DEVICE_FORMS[name];
  return device ? device.forward(k, z) : registerOf(k, ACTIVATION_FORMULAS[name].forward, { x: z });
}

/** act′(z) from the pre-activation z (a gradient of the output takes y = act(z), computed first). */
export function activationGradF32(k: KernelBuilder, name: LinearActivation, z: F32): F32 {
  const device = DEVICE_FORMS[name];
  if (device) return device.gradient(k, z);
  const { of, formula } = ACTIVATION_FORMULAS[name].gradient;
  return registerOf(k, formula, of === 'x' ? { x: z } : { y: activationF32(k, name, z) });
}

/** act′ from the forward output y, for the activations whose backward map takes y (sigmoid, tanh). */
export function outputGradientF32(k: KernelBuilder, name: LinearActivation, y: F32): F32 {
  const { of, formula } = ACTIVATION_FORMULAS[name].gradient;
  if (of !== 'y') throw new Error(`the gradient of '${name}' is a formula of x, not of y`);
  return registerOf(k, formula, { y });
}
