// What the workload programs share on their command lines: --help, and a
// refusal of bad arguments that names the program and repeats its usage.

/** The message of a thrown value, whatever was thrown. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * `parse(argv)`, or the exit code the program returns at once: 0 after
 * printing `usage` when a `helpFlags` entry is among the arguments, 2 after
 * printing what `parse` refused (prefixed with `program`) and `usage`.
 */
export function parseCommandLine<T>(
  program: string,
  usage: string,
  argv: readonly string[],
  parse: (argv: readonly string[]) => T,
  helpFlags: readonly string[] = ['--help'],
): { readonly settings: T } | { readonly exitCode: number } {
  if (argv.some((a) => helpFlags.includes(a))) {
    console.log(usage);
    return { exitCode: 0 };
  }
  try {
    return { settings: parse(argv) };
  } catch (error) {
    console.error(`${program}: ${messageOf(error)}\n\n${usage}`);
    return { exitCode: 2 };
  }
}
