/**
 * BPE merges of a SentencePiece vocabulary that stores scores instead of
 * merges (GGUF `tokenizer.ggml.model = llama`). SentencePiece's BPE joins,
 * at each step, the adjacent pair whose joined piece scores highest; a
 * merge list ranked by the joined piece's score does the same in a
 * tokenizers BPE model. This is how transformers builds merges for such a
 * GGUF vocabulary: every split of every mergeable piece into two pieces of
 * the vocabulary, the splits of one piece ordered by the scores of their
 * halves, all ordered by the joined piece's score (highest first).
 */
export function sentencePieceMerges(
  tokens: readonly string[],
  scores: readonly number[],
  mergeable: (id: number) => boolean,
): [string, string][] {
  const scoreOf = new Map<string, number>();
  // The first occurrence of a piece is the one SentencePiece looks up.
  tokens.forEach((t, i) => {
    if (!scoreOf.has(t)) scoreOf.set(t, scores[i]!);
  });
  const merges: { left: string; right: string; score: number; order: number }[] = [];
  tokens.forEach((piece, id) => {
    if (!mergeable(id) || scoreOf.get(piece) !== scores[id]) return;
    const chars = Array.from(piece);
    const local: { left: string; right: string }[] = [];
    for (let i = 1; i < chars.length; i++) {
      const left = chars.slice(0, i).join('');
      const right = chars.slice(i).join('');
      if (scoreOf.has(left) && scoreOf.has(right)) local.push({ left, right });
    }
    local.sort(
      (a, b) => scoreOf.get(b.left)! - scoreOf.get(a.left)! || scoreOf.get(b.right)! - scoreOf.get(a.right)!,
    );
    for (const m of local) merges.push({ ...m, score: scores[id]!, order: merges.length });
  });
  merges.sort((a, b) => b.score - a.score || a.order - b.order);
  return merges.map((m) => [m.left, m.right]);
}
