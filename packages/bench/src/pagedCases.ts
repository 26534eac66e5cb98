// Batched decoding over a paged KV cache: B sequences' queries, one token
// each, attending through their block tables over bf16 page pools.

import { type HostArray, pagedAttention } from '@rayo/core';
import type { Rng } from '@rayo/core/testing';
import type { BenchCase, CheckSubset } from './case.js';
import { type Modes, modes } from './caseDefaults.js';

/** Rows per page, vLLM's default block size. */
export const PAGE_SIZE = 16;
/** Sequences the reference checks: the first ones (all of a smaller batch). */
const CHECKED_SEQUENCES = 2;

/** Distinct pages of the pool in random order, so that no sequence's pages are consecutive. */
function shuffledPages(rng: Rng, size: number): number[] {
  const pages = Array.from({ length: size }, (_, i) => i);
  for (let i = size - 1; i > 0; i--) {
    const j = rng.int(0, i + 1);
    [pages[i], pages[j]] = [pages[j]!, pages[i]!];
  }
  return pages;
}

/** The first `count` sequences: their q rows, block table rows and lengths, over the same pools. */
function firstSequencesSubset(
  batch: number,
  heads: number,
  dim: number,
  maxPages: number,
  pool: readonly number[],
  count: number,
) {
  return (data: readonly (HostArray | undefined)[]): CheckSubset => {
    const [q, kPages, vPages, tables, lens] = data;
    const row = heads * dim;
    return {
      inputs: [
        { shape: [count, heads, dim], dtype: 'f32' },
        { shape: pool, dtype: 'bf16' },
        { shape: pool, dtype: 'bf16' },
        { shape: [count, maxPages], dtype: 'i32' },
        { shape: [count], dtype: 'i32' },
      ],
      data: [
        q!.slice(0, count * row),
        kPages,
        vPages,
        tables!.slice(0, count * maxPages),
        lens!.slice(0, count),
      ],
      select: (_output, actual) => actual.slice(0, Math.min(count, batch) * row),
    };
  };
}

/**
 * One decode step of `batch` sequences of `tokens` cached rows each (the
 * new token's included), `heads` query heads of `dim` over `kvHeads` kv heads
 * (Llama-3.2-1B: 32 × 64 over 8), bf16 pages of PAGE_SIZE rows, q in f32.
 * The pool holds exactly the sequences' pages, shuffled. Its x is the KV
 * bytes read; the spec's cost (the bandwidth bound) adds q, out, the block
 * tables and the lengths.
 */
export function pagedAttentionCase(
  batch: number,
  tokens: number,
  heads: number,
  kvHeads: number,
  dim: number,
  when: Modes,
): BenchCase {
  const maxPages = Math.ceil(tokens / PAGE_SIZE);
  const pool = [batch * maxPages, kvHeads, PAGE_SIZE, dim];
  const checked = Math.min(batch, CHECKED_SEQUENCES);
  return {
    id: `paged-attention/b${batch}-h${heads}-kv${kvHeads}-d${dim}-t${tokens}`,
    family: 'paged-attention',
    spec: pagedAttention,
    inputs: [
      { shape: [batch, heads, dim] },
      { shape: pool, dtype: 'bf16' },
      { shape: pool, dtype: 'bf16' },
      { shape: [batch, maxPages], fill: (rng, size) => shuffledPages(rng, size) },
      { shape: [batch], fill: (_rng, size) => new Array<number>(size).fill(tokens) },
    ],
    bound: 'bytes',
    x: 2 * 2 * batch * tokens * kvHeads * dim,
    ...modes(when),
    tolerance: { rtol: 1e-3, atol: 1e-6, relativeTo: 'max' },
    ...(batch > checked ? { subset: firstSequencesSubset(batch, heads, dim, maxPages, pool, checked) } : {}),
  };
}
