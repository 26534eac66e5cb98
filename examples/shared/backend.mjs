// The backend an example runs on, and its console.log. A software adapter
// (lavapipe, SwiftShader) compiles each kernel for seconds on first use: a
// progress line on stderr says so meanwhile.
import { compileProgress, createBackend, onSlowBackendCompile } from '@rayo/core';

/** Creates the backend `name`; `log` is console.log, once the progress line is off the terminal's line. */
export async function exampleBackend(name) {
  const progress = compileProgress(process.stderr);
  await onSlowBackendCompile(name, progress.onSlowCompile);
  const log = (...args) => {
    progress.settle();
    console.log(...args);
  };
  return { backend: await createBackend(name), log };
}
