// WGSL of core's activation table: the helper functions every activation
// kernel declares, and expressions of an activation, its gradient, or a
// formula over them, rendered from the table's trees in their operation order.
import {
  ACTIVATION_FORMULAS,
  type Formula,
  formulas,
  gradientOfInput,
  type LinearActivation,
} from '@rayo/core';

const { operationCount, substitute, variable } = formulas;

/** WGSL: whether f32 `x` is NaN, from its bits (a compiler may fold `x != x` away). */
export const IS_NAN = (x: string) => `(bitcast<u32>(${x}) & 0x7fffffffu) > 0x7f800000u`;

/** tanh as sign(x)·(1 − e^−2|x|)/(1 + e^−2|x|), which never overflows (WGSL's own may). */
const TANH_F =
  'fn tanh_f(x: f32) -> f32 { let t = exp(-2.0 * abs(x)); return sign(x) * (1.0 - t) / (1.0 + t); }';

/** A helper function stands for a formula of more than one operation; one operation is written inline. */
const hasHelper = (f: Formula) => operationCount(f) > 1;
const forwardHelper = (name: LinearActivation) => hasHelper(ACTIVATION_FORMULAS[name].forward);
const gradientHelper = (name: LinearActivation) =>
  ACTIVATION_FORMULAS[name].gradient.of === 'x' && hasHelper(ACTIVATION_FORMULAS[name].gradient.formula);

const PRECEDENCE = { '+': 1, '-': 1, '*': 2, '/': 2 } as const;
const ATOM = 4;

function numberWgsl(n: number): string {
  return Number.isInteger(n) ? `${n}.0` : String(n);
}

/** `f` as a WGSL f32 expression, with the precedence of its outermost operator. */
function render(f: Formula): { code: string; precedence: number } {
  if (typeof f === 'number') return { code: numberWgsl(f), precedence: f < 0 ? 3 : ATOM };
  if ('v' in f) return { code: f.v, precedence: ATOM };
  switch (f.op) {
    case 'neg':
      return { code: `-${operand(f.a, 3)}`, precedence: 3 };
    case 'call': {
      const a = render(f.a).code;
      switch (f.fn) {
        case 'exp':
          return { code: `exp(${a})`, precedence: ATOM };
        case 'tanh':
          return { code: `tanh_f(${a})`, precedence: ATOM };
        case 'relu':
          // NaN kept as in the reference: WGSL's max need not, and a compiler may assume no NaN.
          return { code: `select(max(${a}, 0.0), ${a}, ${IS_NAN(a)})`, precedence: ATOM };
        case 'step':
          return { code: `select(0.0, 1.0, ${a} > 0.0)`, precedence: ATOM };
      }
      break;
    }
    case 'act': {
      const name = f.name as LinearActivation;
      if (forwardHelper(name)) return { code: `${name}_f(${render(f.a).code})`, precedence: ATOM };
      return render(substitute(ACTIVATION_FORMULAS[name].forward, 'x', f.a));
    }
    case 'let':
      throw new Error('a WGSL expression cannot bind a value: the formula needs a helper function');
    default: {
      const p = PRECEDENCE[f.op];
      // Left-associative: the right operand of an equal precedence is parenthesised (a − (b − c)).
      return { code: `${operand(f.a, p)} ${f.op} ${operand(f.b, p + 1)}`, precedence: p };
    }
  }
}

function operand(f: Formula, atLeast: number): string {
  const { code, precedence } = render(f);
  return precedence < atLeast ? `(${code})` : code;
}

/** WGSL of a formula whose free variables are WGSL values (identifiers) of the same names. */
export function formulaWgsl(f: Formula): string {
  return render(f).code;
}

/** A WGSL argument as a formula: an identifier as it is, an expression parenthesised. */
const argument = (code: string): Formula => variable(/^\w+$/.test(code) ? code : `(${code})`);

/** WGSL of act(`arg`), `arg` a WGSL f32 expression. */
export function activationWgsl(name: LinearActivation, arg: string): string {
  if (forwardHelper(name)) return `${name}_f(${arg})`;
  return formulaWgsl(substitute(ACTIVATION_FORMULAS[name].forward, 'x', argument(arg)));
}

/** WGSL of act′(`arg`) from the pre-activation `arg`. */
export function activationGradientWgsl(name: LinearActivation, arg: string): string {
  if (gradientHelper(name)) return `${name}_grad(${arg})`;
  return formulaWgsl(substitute(gradientOfInput(name), 'x', argument(arg)));
}

function helperWgsl(fn: string, f: Formula): string {
  const statements: string[] = [];
  let body = f;
  while (typeof body !== 'number' && 'op' in body && body.op === 'let') {
    statements.push(`let ${body.name} = ${formulaWgsl(body.value)};`);
    body = body.body;
  }
  statements.push(`return ${formulaWgsl(body)};`);
  const head = `fn ${fn}(x: f32) -> f32 {`;
  const line = `${head} ${statements.join(' ')} }`;
  return line.length <= 120 ? line : `${head}\n${statements.map((s) => `  ${s}`).join('\n')}\n}`;
}

const usesTanh = (f: Formula): boolean =>
  typeof f !== 'number' &&
  !('v' in f) &&
  ((f.op === 'call' && f.fn === 'tanh') ||
    (f.op === 'let'
      ? usesTanh(f.value) || usesTanh(f.body)
      : 'b' in f
        ? usesTanh(f.a) || usesTanh(f.b)
        : usesTanh(f.a)));

/**
 * The helper functions of every activation, in the table's order (tanh_f
 * where it is first used): what a kernel that applies activations declares.
 */
export const ACTIVATION_FUNCTIONS_WGSL = (() => {
  const lines: string[] = [];
  let tanhDeclared = false;
  for (const name of Object.keys(ACTIVATION_FORMULAS) as LinearActivation[]) {
    const { forward, gradient } = ACTIVATION_FORMULAS[name];
    if (!tanhDeclared && (usesTanh(forward) || usesTanh(gradient.formula))) {
      lines.push(TANH_F);
      tanhDeclared = true;
    }
    if (forwardHelper(name)) lines.push(helperWgsl(`${name}_f`, forward));
    if (gradientHelper(name)) lines.push(helperWgsl(`${name}_grad`, gradient.formula));
  }
  return `\n${lines.join('\n')}\n`;
})();
