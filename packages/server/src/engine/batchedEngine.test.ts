import { RayoError } from '@rayo/core';
import { TextModel } from '@rayo/text';
import type { PagedCacheOptions, PagedLlama } from '@rayo/train';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatedEngine } from '../../testing/gatedEngine.js';
import { collect, generatedAlone } from '../../testing/sequenceTokens.js';
import { type TinyFixture, tinyFixture } from '../../testing/tinyFixture.js';
import { TINY_MAX_SEQUENCE } from '../../testing/tinyServer.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { SequenceCancelled } from '../scheduler/schedulerErrors.js';
import { BatchedEngine, type BatchedSequence } from './batchedEngine.js';
import type { SequenceRequest } from './decodeEngine.js';

// The batched engine on one copy of the tiny model, through the scheduler:
// every sequence's tokens are the ones LlamaModel.generate gives for its
// request alone (on a second copy), whoever runs beside it, whenever it
// joins, and however often its pages are taken.

let fixture: TinyFixture;
let served: TextModel;
let spare: TextModel;
const made: PagedLlama[] = [];

beforeAll(async () => {
  fixture = await tinyFixture();
  served = await TextModel.load(fixture.backend, fixture.dir, { maxSequence: TINY_MAX_SEQUENCE });
  spare = await TextModel.load(fixture.backend, fixture.dir, { maxSequence: TINY_MAX_SEQUENCE });
});

afterAll(async () => {
  for (const p of made) p.dispose();
  served?.dispose();
  spare?.dispose();
  await fixture?.dispose();
});

function paged(options: PagedCacheOptions): PagedLlama {
  const p = served.model.pagedCache(options);
  made.push(p);
  return p;
}

function request(text: string, maxNewTokens: number, temperature = 0, seed = 0): SequenceRequest {
  return {
    promptIds: served.encodePrompt(text),
    maxNewTokens,
    temperature,
    seed,
    stopTokenIds: served.tokenizer.eosTokenIds,
  };
}

const alone = (r: SequenceRequest) => generatedAlone(spare.model, r);

const limits = { maxConcurrent: 8, maxQueue: 300, queueTimeoutMs: 60_000 };

describe('BatchedEngine', () => {
  it('decodes sequences joining and leaving at different steps as each alone, in one step for all', async () => {
    const engine = new GatedEngine(
      new BatchedEngine(paged({ pages: 64, pageSize: 4, maxBatch: 4 }), { prefillTokens: 5 }),
    );
    const scheduler = new Scheduler(engine, limits);
    const first = [
      request('a', 9),
      request('a much longer prompt than the others', 14),
      request('mid size', 6, 0.9, 3),
    ];
    const later = [request('late', 11), request('later still, sampled', 8, 1.2, 11), request('z', 4)];
    const running = first.map((r) => collect(scheduler.submit(r)));
    // The rest join once the first have run a few steps (and the first of them have left).
    while (engine.steps < 6) await new Promise((resolve) => setImmediate(resolve));
    const joined = later.map((r) => collect(scheduler.submit(r)));
    const got = await Promise.all([...running, ...joined]);
    for (const [i, r] of [...first, ...later].entries()) expect(got[i]).toEqual(await alone(r));
    expect(engine.widest).toBe(4);
    await scheduler.idle();
    expect(engine.usage()).toMatchObject({ sequences: 0, cacheRows: 0, pages: { inUse: 0, free: 64 } });
  });

  it('preempts the newest sequence when the pool runs out, and it recomputes to the same tokens', async () => {
    // 12 pages of 4 rows: three sequences of up to 31 rows cannot all grow.
    const engine = new BatchedEngine(paged({ pages: 12, pageSize: 4, maxBatch: 3 }), { prefillTokens: 6 });
    const scheduler = new Scheduler(engine, limits);
    const requests = [request('first one', 22), request('second', 24, 0.7, 5), request('third seq', 20)];
    const got = await Promise.all(requests.map((r) => collect(scheduler.submit(r))));
    for (const [i, r] of requests.entries()) expect(got[i]).toEqual(await alone(r));
    expect(engine.usage().pages!.preemptions).toBeGreaterThan(0);
    await scheduler.idle();
    expect(engine.usage().pages).toMatchObject({ inUse: 0, free: 12 });
  });

  it('gives back the pages of a sequence cancelled mid-stream; the others run on', async () => {
    const engine = new BatchedEngine(paged({ pages: 32, pageSize: 4, maxBatch: 4 }));
    const scheduler = new Scheduler(engine, limits);
    const kept = request('kept', 12);
    const leaving = scheduler.submit(request('leaves early', 40));
    const keeping = collect(scheduler.submit(kept));
    const seen: number[] = [];
    for await (const t of leaving) {
      seen.push(t);
      if (seen.length === 3) break;
    }
    expect(leaving.end).toBe('cancelled');
    expect(await keeping).toEqual(await alone(kept));
    await scheduler.idle();
    expect(engine.usage().pages).toMatchObject({ inUse: 0, free: 32 });
  });

  it('queues what the pool cannot take now, refuses what it never could, and checks its sequences', async () => {
    const engine = new BatchedEngine(paged({ pages: 6, pageSize: 4, maxBatch: 2 }));
    expect(engine.maxSequence).toBe(24);
    expect(() => engine.admit(request('x', 40))).toThrow(/does not fit the cache/);
    expect(() => engine.admit({ ...request('x', 2), promptIds: [1e6] })).toThrow(/1000000 at index 0/);
    expect(() => engine.admit({ ...request('x', 2), temperature: -1 })).toThrow(/temperature/);
    const a = engine.admit(request('a prompt of 16 ', 2))!;
    // a's prompt is promised 5 of the 6 pages: no room for another prompt until it ends.
    expect(engine.admit(request('b prompt', 2))).toBeUndefined();
    const results = [];
    while (results.length === 0 || 'pending' in results.at(-1)!) results.push((await engine.step([a]))[0]!);
    expect(results.at(-1)).toHaveProperty('token');
    engine.release(a);
    expect(() => engine.release(a)).toThrow(RayoError);
    await expect(engine.step([a])).rejects.toThrow(/not admitted/);
    const b = engine.admit(request('b prompt', 2)) as BatchedSequence;
    expect(b.id).toBeGreaterThan(a.id);
    engine.release(b);
    expect(() => new BatchedEngine(made[0]!, { prefillTokens: 0 })).toThrow(/prefillTokens/);
  });

  it('serves a bounded load with random cancellations: every request ends, no page is left held', async () => {
    const engine = new BatchedEngine(paged({ pages: 40, pageSize: 4, maxBatch: 8 }), { prefillTokens: 8 });
    const scheduler = new Scheduler(engine, limits);
    let seed = 5;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const outcomes = await Promise.all(
      Array.from({ length: 200 }, async (_, i) => {
        const r = request(`load ${i} ${'x'.repeat(Math.floor(random() * 6))}`, 1 + Math.floor(random() * 5));
        const draw = random();
        // Some leave at once (queued, or before their prompt ran), some after a few tokens.
        const leaveAfter =
          draw < 0.15 ? 0 : draw < 0.35 ? 1 + Math.floor(random() * 3) : Number.POSITIVE_INFINITY;
        const sequence = scheduler.submit(r);
        if (leaveAfter === 0) sequence.cancel();
        let n = 0;
        try {
          for await (const _ of sequence) if (++n >= leaveAfter) break;
        } catch (error) {
          expect(error).toBeInstanceOf(SequenceCancelled);
        }
        return sequence.end;
      }),
    );
    await scheduler.idle();
    expect(outcomes.every((end) => end === 'length' || end === 'stop-token' || end === 'cancelled')).toBe(
      true,
    );
    expect(outcomes.filter((end) => end === 'cancelled').length).toBeGreaterThan(10);
    expect(scheduler.active + scheduler.queued).toBe(0);
    expect(engine.usage()).toMatchObject({ sequences: 0, pages: { inUse: 0, free: 40 } });
  }, 60_000);
});
