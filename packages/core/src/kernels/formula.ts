// A small expression language for the element formulas that every backend
// writes in its own shading language (the activations): one tree, rendered
// by the cpu reference here and by each backend's code generator, so that a
// formula, its constants and its operation order are declared once.

/** The primitives a target implements natively, each in its own robust form. */
export type FormulaPrimitive =
  /** e^a */
  | 'exp'
  /** tanh(a); a target's form must not overflow for large |a| */
  | 'tanh'
  /** max(a, 0) with NaN kept: a where a > 0 or a is NaN, else +0 (as `Math.max` does) */
  | 'relu'
  /** 1 where a > 0, else 0 (NaN gives 0) */
  | 'step';

export type Formula =
  | number
  | { readonly v: string }
  | { readonly op: '+' | '-' | '*' | '/'; readonly a: Formula; readonly b: Formula }
  | { readonly op: 'neg'; readonly a: Formula }
  | { readonly op: 'call'; readonly fn: FormulaPrimitive; readonly a: Formula }
  /** Another activation of the table applied to `a` (a target may call its helper for it). */
  | { readonly op: 'act'; readonly name: string; readonly a: Formula }
  /** `body` with `name` bound to the value of `value` (computed once). */
  | { readonly op: 'let'; readonly name: string; readonly value: Formula; readonly body: Formula };

export const variable = (v: string): Formula => ({ v });
export const add = (a: Formula, b: Formula): Formula => ({ op: '+', a, b });
export const sub = (a: Formula, b: Formula): Formula => ({ op: '-', a, b });
export const mul = (a: Formula, b: Formula): Formula => ({ op: '*', a, b });
export const div = (a: Formula, b: Formula): Formula => ({ op: '/', a, b });
export const neg = (a: Formula): Formula => ({ op: 'neg', a });
export const call = (fn: FormulaPrimitive, a: Formula): Formula => ({ op: 'call', fn, a });
export const act = (name: string, a: Formula): Formula => ({ op: 'act', name, a });
export const bind = (name: string, value: Formula, body: (v: Formula) => Formula): Formula => ({
  op: 'let',
  name,
  value,
  body: body(variable(name)),
});

/** `f` with every free `name` replaced by `by`. */
export function substitute(f: Formula, name: string, by: Formula): Formula {
  if (typeof f === 'number') return f;
  if ('v' in f) return f.v === name ? by : f;
  switch (f.op) {
    case 'neg':
    case 'call':
    case 'act':
      return { ...f, a: substitute(f.a, name, by) };
    case 'let':
      return {
        ...f,
        value: substitute(f.value, name, by),
        body: f.name === name ? f.body : substitute(f.body, name, by),
      };
    default:
      return { ...f, a: substitute(f.a, name, by), b: substitute(f.b, name, by) };
  }
}

/** How many operations `f` has (variables and numbers count none). */
export function operationCount(f: Formula): number {
  if (typeof f === 'number' || 'v' in f) return 0;
  switch (f.op) {
    case 'neg':
    case 'call':
    case 'act':
      return 1 + operationCount(f.a);
    case 'let':
      return operationCount(f.value) + operationCount(f.body);
    default:
      return 1 + operationCount(f.a) + operationCount(f.b);
  }
}

type Compiled = (slots: Float64Array) => number;

const PRIMITIVES: Readonly<Record<FormulaPrimitive, (a: number) => number>> = {
  exp: Math.exp,
  tanh: Math.tanh,
  relu: (a) => Math.max(a, 0),
  step: (a) => (a > 0 ? 1 : 0),
};

/**
 * `f` as a JavaScript function of its one free variable `parameter`, in
 * double precision and in the tree's operation order; `activation(name)`
 * gives the functions of `act` nodes.
 */
export function compileFormula(
  f: Formula,
  parameter: string,
  activation: (name: string) => (a: number) => number,
): (value: number) => number {
  // Variables live in slots fixed at compile time: a `let` costs a store, not an object.
  const names = [parameter];
  const slot = (name: string) => {
    const at = names.lastIndexOf(name);
    if (at < 0) throw new Error(`formula variable '${name}' is not bound`);
    return at;
  };
  const compile = (g: Formula): Compiled => {
    if (typeof g === 'number') return () => g;
    if ('v' in g) {
      const at = slot(g.v);
      return (s) => s[at]!;
    }
    switch (g.op) {
      case 'neg': {
        const a = compile(g.a);
        return (s) => -a(s);
      }
      case 'call': {
        const a = compile(g.a);
        const fn = PRIMITIVES[g.fn];
        return (s) => fn(a(s));
      }
      case 'act': {
        const a = compile(g.a);
        const fn = activation(g.name);
        return (s) => fn(a(s));
      }
      case 'let': {
        const value = compile(g.value);
        names.push(g.name);
        const at = names.length - 1;
        const body = compile(g.body);
        names[at] = ''; // out of scope past the body
        return (s) => {
          s[at] = value(s);
          return body(s);
        };
      }
      default: {
        const a = compile(g.a);
        const b = compile(g.b);
        switch (g.op) {
          case '+':
            return (s) => a(s) + b(s);
          case '-':
            return (s) => a(s) - b(s);
          case '*':
            return (s) => a(s) * b(s);
          case '/':
            return (s) => a(s) / b(s);
        }
      }
    }
  };
  const run = compile(f);
  const slots = new Float64Array(names.length);
  return (value) => {
    slots[0] = value;
    return run(slots);
  };
}
