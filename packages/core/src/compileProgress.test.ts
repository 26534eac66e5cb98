import { describe, expect, it } from 'vitest';
import { compileProgress } from './compileProgress.js';

function output(isTTY: boolean) {
  const written: string[] = [];
  return { written, out: { isTTY, write: (text: string) => written.push(text) } };
}

describe('compileProgress', () => {
  it('rewrites one line in place on a terminal, behind the lead, and takes it off again', () => {
    const { written, out } = output(true);
    const progress = compileProgress(out);
    progress.settle();
    expect(written).toEqual([]);
    progress.lead('[1/3] wgpu matmul … ');
    progress.onSlowCompile({ key: 'matmul/tiled', kernel: 'matmul', milliseconds: 2500 });
    progress.onSlowCompile({ key: 'rope/rope/half', kernel: 'rope', milliseconds: 3000 });
    expect(written).toHaveLength(2);
    expect(written[1]).toBe(
      '\r\x1b[K[1/3] wgpu matmul … compiling kernels (a slow adapter compiles each once, on first use): ' +
        '2 so far, 5.5 s; last rope/rope/half (3.0 s)',
    );
    progress.settle();
    expect(written[2]).toBe('\r\x1b[K[1/3] wgpu matmul … ');
    progress.settle();
    expect(written).toHaveLength(3);
  });

  it('writes a line per compile elsewhere, keeping the lead on a line of its own', () => {
    const { written, out } = output(false);
    const progress = compileProgress(out);
    progress.onSlowCompile({ key: 'a', kernel: 'a', milliseconds: 2000 });
    progress.lead('[2/3] wgpu rope … ');
    progress.onSlowCompile({ key: 'b', kernel: 'b', milliseconds: 2000 });
    progress.settle();
    expect(written.join('')).toBe(
      'compiling kernels (a slow adapter compiles each once, on first use): 1 so far, 2.0 s; last a (2.0 s)\n' +
        '\ncompiling kernels (a slow adapter compiles each once, on first use): 2 so far, 4.0 s; last b (2.0 s)\n' +
        '[2/3] wgpu rope … ',
    );
  });
});
