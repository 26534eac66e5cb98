import { fileURLToPath } from 'node:url';

/**
 * The rendezvous test's rank program. It is TypeScript that starts on import,
 * so a test bundles it (esbuild, with the `@rayo/source` condition) and
 * starts the bundle once per rank.
 */
export const RENDEZVOUS_RANK_PROGRAM = fileURLToPath(new URL('./rendezvousRank.ts', import.meta.url));
