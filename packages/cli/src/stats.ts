import type { GenerationStats } from '@rayo/text';

/** One line of a generation's statistics, for stderr. */
export function formatStats(stats: GenerationStats): string {
  const parts = [
    `${stats.generatedTokens} tokens in ${(stats.totalMs / 1000).toFixed(2)} s`,
    `${stats.tokensPerSecond.toFixed(1)} tokens/s`,
    `first token after ${stats.timeToFirstTokenMs.toFixed(0)} ms (prompt: ${stats.promptTokens} tokens)`,
    `ended by ${stats.finishReason === 'length' ? 'max-new-tokens' : stats.finishReason === 'stop' ? 'a stop string' : stats.finishReason}`,
  ];
  return parts.join(' · ');
}

/** Notices of generation_config.json fields rayo does not apply. */
export function notAppliedNotices(notApplied: Readonly<Record<string, unknown>>): string[] {
  return Object.entries(notApplied).map(
    ([key, value]) =>
      `generation_config.json: ${key} = ${JSON.stringify(value)} is not applied (rayo does not implement it)`,
  );
}
