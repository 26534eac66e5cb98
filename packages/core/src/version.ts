/**
 * This copy's version, for errors that tell two copies of core apart (kept
 * equal to package.json's by `pnpm version-packages`; a test checks).
 */
export const CORE_VERSION = '0.1.0';
