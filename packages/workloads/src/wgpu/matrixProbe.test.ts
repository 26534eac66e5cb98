import { describe, expect, it } from 'vitest';
import { probeShader } from './matrixProbe.js';

// The probes compile only where an adapter has subgroup matrices (not lavapipe):
// their text is checked here, their timings on a GPU host.
describe('matrix-probe shaders', () => {
  const count = (text: string, part: string) => text.split(part).length - 1;

  it('runs FM·FN products a step on each subgroup, in every probe', () => {
    for (const probe of ['registers', 'shared', 'staged', 'rescale', 'global', 'relay'] as const) {
      const wgsl = probeShader({ probe, fm: 4, fn: 2, subgroups: 4, steps: 64 });
      expect(wgsl, probe).toContain('@compute @workgroup_size(128)');
      expect(count(wgsl, 'subgroupMatrixMultiplyAccumulate('), probe).toBe(8);
      // Every accumulator is stored, so no product is dead code.
      expect(count(wgsl, 'subgroupMatrixStore(&dst'), probe).toBe(8);
      expect(wgsl, probe).toContain('for (var s = 0u; s < 64u; s++)');
    }
  });

  it('loads from storage, workgroup memory or both as each probe says', () => {
    const text = (probe: 'registers' | 'global' | 'relay' | 'staged') =>
      probeShader({ probe, fm: 2, fn: 2, subgroups: 1, steps: 8 });
    expect(text('registers')).not.toContain('var<workgroup>');
    expect(text('global')).not.toContain('var<workgroup>');
    expect(text('global')).toMatch(/subgroupMatrixLoad<[^>]+>>\(&src, \(rowA/);
    // relay: two halves of one step of fragments (16 + 8 halves a row, 4 fragments of 16 rows).
    expect(text('relay')).toContain('var<workgroup> tile: array<f16, 3072>;');
    expect(text('relay')).toMatch(/subgroupMatrixStore\(&tile, half \+/);
    expect(count(text('staged'), 'workgroupBarrier()')).toBe(3);
  });
});
