import { InvalidArgumentError } from './errors.js';
import { QGEMV_SLICES, QGEMV_VARIANTS, type QgemvSlices, type QgemvVariant } from './quant/gemvVariants.js';

// Tuning switches are typed backend options, checked once when a backend is
// created; kernels read them from their encoder, never from the environment.
// Measurement programs that take them from environment variables pass the
// variables in (`BackendProvider.optionsFromEnvironment`), so that a library
// reads no global state.

/** Environment variables as a program has them (e.g. Node's `process.env`). */
export type EnvironmentVariables = Readonly<Record<string, string | undefined>>;

/** Where an option is checked, for the error: the creating API and the option's name. */
export interface OptionSource {
  readonly operation: string;
  readonly argument: string;
}

/** `value` when it is one of `choices` (undefined stays undefined); otherwise an InvalidArgumentError. */
export function checkChoice<const C extends string | number>(
  value: unknown,
  choices: readonly C[],
  source: OptionSource,
): C | undefined {
  if (value === undefined) return undefined;
  if ((choices as readonly unknown[]).includes(value)) return value as C;
  throw new InvalidArgumentError('the tuning option names no choice', {
    ...source,
    expected: choices.map((c) => (typeof c === 'string' ? `'${c}'` : String(c))).join(' | '),
    actual: typeof value === 'string' ? `'${value}'` : String(value),
  });
}

/** The choice an environment variable names (unset or empty: undefined); a value naming none is an InvalidArgumentError. */
export function choiceFromEnvironment<const C extends string | number>(
  env: EnvironmentVariables,
  variable: string,
  choices: readonly C[],
  operation: string,
): C | undefined {
  const text = env[variable];
  if (text === undefined || text === '') return undefined;
  const match = choices.find((c) => String(c) === text);
  if (match !== undefined) return match;
  throw new InvalidArgumentError('the environment variable names no choice', {
    operation,
    argument: variable,
    expected: choices.map(String).join(' | '),
    actual: `'${text}'`,
  });
}

/** The quantized GEMV's switches, for measurements (see `QGEMV_VARIANTS`). */
export interface QgemvOptions {
  /**
   * The small-M quantized product's kernel for every format it reads
   * (`QGEMV_FORMATS`); absent, each product takes the backend's measured
   * default. The gate·up pair takes it too, `a` aside (no pair kernel).
   */
  readonly qgemvVariant?: QgemvVariant;
  /** The split of K among a block's groups; absent, chosen by `qgemvSlicesFor`. */
  readonly qgemvSlices?: QgemvSlices;
}

/** The quantized GEMV's switches, checked. */
export interface QgemvTuning {
  readonly qgemvVariant: QgemvVariant | undefined;
  readonly qgemvSlices: QgemvSlices | undefined;
}

/** Checks the quantized GEMV's options (a JavaScript caller may pass anything); `operation` is the creating API. */
export function resolveQgemvOptions(options: QgemvOptions, operation: string): QgemvTuning {
  return {
    qgemvVariant: checkChoice(options.qgemvVariant, QGEMV_VARIANTS, { operation, argument: 'qgemvVariant' }),
    qgemvSlices: checkChoice(options.qgemvSlices, QGEMV_SLICES, { operation, argument: 'qgemvSlices' }),
  };
}

/** RAYO_QGEMV_VARIANT (`a`, `b`, `c`, `d`) and RAYO_QGEMV_SLICES (1, 2, 4, 8) as options; unset or empty: absent. */
export function qgemvOptionsFromEnvironment(env: EnvironmentVariables, operation: string): QgemvOptions {
  const qgemvVariant = choiceFromEnvironment(env, 'RAYO_QGEMV_VARIANT', QGEMV_VARIANTS, operation);
  const qgemvSlices = choiceFromEnvironment(env, 'RAYO_QGEMV_SLICES', QGEMV_SLICES, operation);
  return {
    ...(qgemvVariant === undefined ? {} : { qgemvVariant }),
    ...(qgemvSlices === undefined ? {} : { qgemvSlices }),
  };
}
