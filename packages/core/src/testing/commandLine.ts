/**
 * A runner's command line as `parse` reads it, or the exit code once the
 * usage is printed: 2 after bad arguments (to stderr, with the reason), 0
 * for `--help`.
 */
export function parseCommandLine<T extends { readonly values: { readonly help?: boolean } }>(
  parse: () => T,
  usage: string,
): T | number {
  let args: T;
  try {
    args = parse();
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n\n${usage}\n`);
    return 2;
  }
  if (args.values.help) {
    process.stdout.write(`${usage}\n`);
    return 0;
  }
  return args;
}
