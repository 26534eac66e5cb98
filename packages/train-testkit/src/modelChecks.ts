// What the model tests share: the backends they run on and how far their
// logits are from the reference's.
import { type Backend, createBackend, createCpuBackend, probeBackends } from '@rayo/core';

/**
 * cpu, and wgpu where an adapter is, each with a function that creates it.
 * Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter
 * fails its tests rather than leaving them out.
 */
export async function modelTestBackends(): Promise<[string, () => Promise<Backend>][]> {
  const wgpu = (await probeBackends(['wgpu']))[0]!;
  const backends: [string, () => Promise<Backend>][] = [['cpu', async () => createCpuBackend()]];
  if (wgpu.available || process.env.CI === 'true') backends.push(['wgpu', () => createBackend('wgpu')]);
  return backends;
}

/**
 * A describe block's backend, created on first use, and the models its tests
 * load; `dispose` (for `afterAll`) releases the models, then the backend.
 */
export class ModelScope {
  #backend: Backend | undefined;
  readonly #models: { dispose(): void }[] = [];

  constructor(private readonly create: () => Promise<Backend>) {}

  async backend(): Promise<Backend> {
    this.#backend ??= await this.create();
    return this.#backend;
  }

  /** Disposes `models` with the scope. */
  keep(...models: { dispose(): void }[]): void {
    this.#models.push(...models);
  }

  readonly dispose = (): void => {
    for (const m of this.#models) m.dispose();
    this.#backend?.dispose();
  };
}

/** The largest |got[i] − want[i]|; arrays of different lengths are an error. */
export function maxAbsDiff(got: ArrayLike<number>, want: ArrayLike<number>): number {
  if (got.length !== want.length) throw new Error(`maxAbsDiff: ${got.length} values against ${want.length}`);
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
  return worst;
}
