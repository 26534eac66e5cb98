import { RayoError } from '@rayo/core';
import { TextModel } from '@rayo/text';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { GatedEngine } from '../../testing/gatedEngine.js';
import { collect, generatedAlone } from '../../testing/sequenceTokens.js';
import { type TinyFixture, tinyFixture } from '../../testing/tinyFixture.js';
import { TINY_MAX_SEQUENCE } from '../../testing/tinyServer.js';
import type { SequenceRequest } from '../engine/decodeEngine.js';
import { ModelSlotsEngine } from '../engine/modelSlotsEngine.js';
import { Scheduler } from './scheduler.js';
import { SchedulerRefusal, SequenceCancelled } from './schedulerErrors.js';

// The scheduler and the slot engine on two copies of the tiny model, token
// by token: every sequence's tokens are the ones LlamaModel.generate gives
// for its request alone.

let fixture: TinyFixture;
let models: TextModel[];

beforeAll(async () => {
  fixture = await tinyFixture();
  models = [];
  for (let i = 0; i < 3; i++)
    models.push(await TextModel.load(fixture.backend, fixture.dir, { maxSequence: TINY_MAX_SEQUENCE }));
});

afterAll(async () => {
  for (const m of models ?? []) m.dispose();
  await fixture?.dispose();
});

function request(text: string, maxNewTokens: number, temperature = 0, seed = 0): SequenceRequest {
  return {
    promptIds: models[0]!.encodePrompt(text),
    maxNewTokens,
    temperature,
    seed,
    stopTokenIds: models[0]!.tokenizer.eosTokenIds,
  };
}

/** The tokens of `r` alone, from the spare model. */
const alone = (r: SequenceRequest) => generatedAlone(models[2]!.model, r);

const limits = { maxConcurrent: 8, maxQueue: 8, queueTimeoutMs: 60_000 };

describe('ModelSlotsEngine', () => {
  it('holds one sequence per model and frees a slot on release, even mid-generation', async () => {
    const engine = new ModelSlotsEngine([models[0]!.model, models[1]!.model]);
    const a = engine.admit(request('first', 20))!;
    const b = engine.admit(request('second', 20))!;
    expect(engine.admit(request('third', 20))).toBeUndefined();
    expect(engine.usage()).toEqual({
      sequences: 2,
      maxSequences: 2,
      cacheRows: 2 * TINY_MAX_SEQUENCE,
      maxCacheRows: 2 * TINY_MAX_SEQUENCE,
    });
    const steps = [await engine.step([a, b]), await engine.step([a, b])];
    expect(steps.every((s) => s.length === 2)).toBe(true);
    engine.release(a);
    expect(() => engine.release(a)).toThrow(RayoError);
    await expect(engine.step([a])).rejects.toThrow(/not admitted/);
    // The freed slot's model is mid-generation no longer: a new sequence runs there from its prompt.
    const c = engine.admit(request('third', 6))!;
    expect(c.slot).toBe(a.slot);
    const tokens: number[] = [];
    for (let i = 0; i < 6; i++) {
      const [r] = await engine.step([c]);
      if (!('token' in r!)) break;
      tokens.push(r.token);
    }
    expect(tokens).toEqual(await alone(request('third', 6)));
    engine.release(b);
    engine.release(c);
    expect(engine.usage().sequences).toBe(0);
  });

  it('refuses an engine of no models', () => {
    expect(() => new ModelSlotsEngine([])).toThrow(/every slot needs a model.*got none/);
  });
});

describe('Scheduler', () => {
  it('runs sequences of different lengths together, each with the tokens it gets alone', async () => {
    const engine = new GatedEngine(new ModelSlotsEngine([models[0]!.model, models[1]!.model]));
    const scheduler = new Scheduler(engine, limits);
    const requests = [
      request('one', 3),
      request('two', 17),
      request('three', 9, 0.8, 4),
      request('four', 12),
      request('five', 5, 1.1, 9),
    ];
    const got = await Promise.all(requests.map((r) => collect(scheduler.submit(r))));
    for (const [i, r] of requests.entries()) expect(got[i]).toEqual(await alone(r));
    expect(engine.widest).toBe(2);
    await scheduler.idle();
    expect(scheduler.active).toBe(0);
    expect(engine.usage().sequences).toBe(0);
  });

  it('admits in submission order (FIFO) as slots free', async () => {
    const engine = new GatedEngine(new ModelSlotsEngine([models[0]!.model]));
    const scheduler = new Scheduler(engine, limits);
    engine.hold();
    const order: string[] = [];
    const sequences = ['a', 'b', 'c', 'd'].map((name) => {
      const s = scheduler.submit(request(name, 2));
      void s.admitted.then(() => order.push(name));
      return s;
    });
    await vi.waitFor(() => expect(order).toEqual(['a']));
    expect(scheduler.queued).toBe(3);
    engine.allow();
    await Promise.all(sequences.map(collect));
    expect(order).toEqual(['a', 'b', 'c', 'd']);
  });

  it('refuses when the queue is full, and times out a request left waiting', async () => {
    const engine = new GatedEngine(new ModelSlotsEngine([models[0]!.model]));
    const scheduler = new Scheduler(engine, { maxConcurrent: 1, maxQueue: 1, queueTimeoutMs: 10 });
    engine.hold();
    const running = scheduler.submit(request('runs', 2));
    const waiting = scheduler.submit(request('waits', 2));
    await running.admitted;
    const refusal = (() => {
      try {
        scheduler.submit(request('refused', 2));
      } catch (error) {
        return error;
      }
    })();
    expect(refusal).toBeInstanceOf(SchedulerRefusal);
    expect((refusal as SchedulerRefusal).reason).toBe('queue-full');
    await expect(waiting.admitted).rejects.toMatchObject({ reason: 'queue-timeout' });
    await expect(collect(waiting)).rejects.toBeInstanceOf(SchedulerRefusal);
    engine.allow();
    expect(await collect(running)).toEqual(await alone(request('runs', 2)));
  });

  it('with maxQueue 0, refuses what the engine cannot take now, even under maxConcurrent', async () => {
    const engine = new ModelSlotsEngine([models[0]!.model]);
    const scheduler = new Scheduler(engine, { maxConcurrent: 4, maxQueue: 0, queueTimeoutMs: 60_000 });
    const running = scheduler.submit(request('runs', 3));
    expect(() => scheduler.submit(request('no room', 3))).toThrow(/too many requests are waiting/);
    expect(await collect(running)).toEqual(await alone(request('runs', 3)));
    expect(await collect(scheduler.submit(request('room again', 3)))).toEqual(
      await alone(request('room again', 3)),
    );
  });

  it('fails a queued request the engine refuses outright, and goes on with the next', async () => {
    /** Refuses a request of 13 tokens once it has room for it. */
    class Refusing<S> extends GatedEngine<S> {
      override admit(r: SequenceRequest): S | undefined {
        const sequence = super.admit(r);
        if (sequence === undefined || r.maxNewTokens !== 13) return sequence;
        this.release(sequence);
        throw new RayoError('refused', { operation: 'Refusing.admit' });
      }
    }
    const engine = new Refusing(new ModelSlotsEngine([models[0]!.model]));
    const scheduler = new Scheduler(engine, limits);
    engine.hold();
    const first = scheduler.submit(request('first', 4));
    const refused = scheduler.submit(request('refused', 13));
    const third = scheduler.submit(request('third', 5));
    await first.admitted;
    engine.allow();
    await expect(refused.admitted).rejects.toThrow(/refused/);
    expect(refused.end).toBe('failed');
    expect(await collect(first)).toEqual(await alone(request('first', 4)));
    expect(await collect(third)).toEqual(await alone(request('third', 5)));
    await scheduler.idle();
    expect(engine.usage().sequences).toBe(0);
  });

  it('close refuses the queued, cancels the running and leaves the engine empty', async () => {
    const engine = new GatedEngine(new ModelSlotsEngine([models[0]!.model]));
    const scheduler = new Scheduler(engine, limits);
    engine.hold();
    engine.allow(2);
    const running = scheduler.submit(request('running', 50));
    const queued = scheduler.submit(request('queued', 5));
    const reading = collect(running).catch((e: unknown) => e);
    await vi.waitFor(() => expect(engine.steps).toBe(2));
    const closed = scheduler.close();
    engine.allow();
    await closed;
    expect(await reading).toBeInstanceOf(SequenceCancelled);
    await expect(queued.admitted).rejects.toMatchObject({ reason: 'shutting-down' });
    expect(running.end).toBe('cancelled');
    expect(running.generated).toBeLessThan(50);
    expect(engine.usage().sequences).toBe(0);
    expect(() => scheduler.submit(request('late', 1))).toThrow(SchedulerRefusal);
  });

  it('refuses limits that are not integers in range', () => {
    const engine = new ModelSlotsEngine([models[0]!.model]);
    expect(() => new Scheduler(engine, { ...limits, maxConcurrent: 0 })).toThrow(/maxConcurrent/);
    expect(() => new Scheduler(engine, { ...limits, queueTimeoutMs: 1.5 })).toThrow(/queueTimeoutMs/);
  });
});
