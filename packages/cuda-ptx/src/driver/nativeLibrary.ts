import { BackendUnavailableError } from '@rayo/core';

// koffi is imported here and only here, on first use, so that everything
// else in the package (PTX generation, the fakes) works without it.

export type Koffi = typeof import('koffi').default;
export type NativeLibrary = ReturnType<Koffi['load']>;
export type NativeFn = (...args: unknown[]) => unknown;
/** A koffi type: a name or a declared type. */
export type TypeSpec = Parameters<Koffi['out']>[0];

/** The first line of an error's message: koffi's and dlopen's run on. */
export function firstLine(error: unknown): string {
  return String((error as Error)?.message ?? error).split('\n')[0]!;
}

/**
 * koffi and the shared library at `path`, or a BackendUnavailableError
 * naming `operation` (the loader) and, when the library is missing, `hint`
 * (what to install).
 */
export async function openNativeLibrary(
  path: string,
  operation: string,
  hint: string,
): Promise<{ koffi: Koffi; library: NativeLibrary }> {
  let koffi: Koffi;
  try {
    koffi = (await import('koffi')).default;
  } catch (error) {
    throw new BackendUnavailableError(`the koffi package could not be loaded: ${firstLine(error)}`, {
      operation,
      cause: error,
    });
  }
  try {
    return { koffi, library: koffi.load(path) };
  } catch (error) {
    throw new BackendUnavailableError(`could not load ${path} (${hint}): ${firstLine(error)}`, {
      operation,
      cause: error,
    });
  }
}

/** `load` run once per process and shared; a failure is forgotten, so the next call tries again. */
export function loadedOnce<T>(load: () => Promise<T>): () => Promise<T> {
  let shared: Promise<T> | undefined;
  return () => {
    shared ??= load().catch((error: unknown) => {
      shared = undefined;
      throw error;
    });
    return shared;
  };
}
