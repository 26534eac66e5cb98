import { afterEach, expect, it, vi } from 'vitest';
import {
  compiled,
  forgetSlowCompileWarning,
  onSlowPipelineCompile,
  SLOW_PIPELINE_COMPILE_MS,
  type SlowPipelineCompile,
  warnOnceOfSlowCompiles,
} from './slowCompiles.js';

afterEach(() => {
  onSlowPipelineCompile(warnOnceOfSlowCompiles);
  vi.restoreAllMocks();
});

it('by default says once, on stderr, why the first run is slow and how to silence it', () => {
  // A real slow compile in another test file may have said it already.
  forgetSlowCompileWarning();
  const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
  compiled('softmax/row/wg256', 'softmax', SLOW_PIPELINE_COMPILE_MS - 1);
  expect(warn).not.toHaveBeenCalled();
  compiled('matmul/tiled/64x64', 'matmul', 3200);
  compiled('matmul/tiled/32x32', 'matmul', 4000);
  expect(warn).toHaveBeenCalledTimes(1);
  expect(warn.mock.calls[0]![0]).toMatch(
    /^@rayo\/wgpu: compiling the pipeline 'matmul\/tiled\/64x64' took 3\.2 s\. .*lavapipe.*onSlowPipelineCompile\(undefined\) silences this/,
  );
});

it('calls a handler of its own for each slow compile, and nothing once silenced', () => {
  const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
  const seen: SlowPipelineCompile[] = [];
  onSlowPipelineCompile((compile) => seen.push(compile));
  compiled('a', 'add', 2500);
  compiled('b', 'add', 10);
  compiled('c', 'mul', 2000);
  expect(seen).toEqual([
    { key: 'a', kernel: 'add', milliseconds: 2500 },
    { key: 'c', kernel: 'mul', milliseconds: 2000 },
  ]);
  onSlowPipelineCompile(undefined);
  compiled('d', 'add', 9000);
  expect(seen).toHaveLength(2);
  expect(warn).not.toHaveBeenCalled();
});

it("is what the backend provider's onSlowCompile sets, for programs that open backends by name", async () => {
  const { backendProvider } = await import('./index.js');
  expect(backendProvider.onSlowCompile).toBe(onSlowPipelineCompile);
});
