import { Rng } from '@rayo/train';

/**
 * Strings for tokenizer parity, generated from a seed (the same seed gives
 * the same strings on every machine): prose in many scripts and languages,
 * code, numbers, emoji (skin tones, ZWJ sequences, flags), whitespace runs
 * (spaces, tabs, newlines, CRLF, no-break and ideographic spaces), combining
 * marks, mixtures of all of these, and the vocabulary's special tokens
 * inside text. No lone surrogates: every string is valid UTF-16, so that it
 * is valid UTF-8 for the Rust tokenizers too.
 */

/** Words per script, each a real word of its language. */
const WORDS: Readonly<Record<string, readonly string[]>> = {
  english: [
    'the',
    'quick',
    'brown',
    'fox',
    'jumps',
    'over',
    'lazy',
    'dog',
    "don't",
    "it's",
    "we'll",
    'Hello',
    'World',
    'tokenizer',
    'GPU',
    'kernel',
    'matrix',
  ],
  french: ['élève', 'garçon', 'où', 'déjà', 'naïve', 'Noël', "l'été", 'cœur', 'français'],
  german: ['Straße', 'Grüße', 'Mädchen', 'Äpfel', 'übermäßig', 'Fußgängerübergänge'],
  spanish: ['niño', 'mañana', '¿Qué?', '¡Hola!', 'corazón', 'pingüino'],
  russian: ['привет', 'мир', 'Москва', 'съешь', 'ещё', 'этих', 'мягких', 'булок'],
  greek: ['Καλημέρα', 'κόσμε', 'ψυχή', 'Ελλάδα'],
  arabic: ['مرحبا', 'بالعالم', 'اللغة', 'العربية', 'كتاب'],
  hebrew: ['שלום', 'עולם', 'עברית'],
  hindi: ['नमस्ते', 'दुनिया', 'हिन्दी', 'भाषा'],
  thai: ['สวัสดี', 'ภาษาไทย', 'ครับ'],
  chinese: ['你好', '世界', '中文', '机器学习', '模型', '龘'],
  japanese: ['こんにちは', '世界', 'カタカナ', 'ひらがな', '東京', 'ｶﾀｶﾅ'],
  korean: ['안녕하세요', '세계', '한국어', '토크나이저'],
  vietnamese: ['Tiếng', 'Việt', 'người', 'nước'],
  turkish: ['İstanbul', 'ığdır', 'Şişli', 'çok'],
  armenian: ['Բարեւ', 'աշխարհ'],
  georgian: ['გამარჯობა', 'მსოფლიო'],
  amharic: ['ሰላም', 'ዓለም'],
  tamil: ['வணக்கம்', 'உலகம்'],
  math: ['∑', '∫', '√2', '≤', '≠', 'π', '∞', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '𝕏', 'x²', '½'],
};

const EMOJI = ['😀', '👍', '👍🏽', '👨‍👩‍👧‍👦', '🇫🇷', '🇯🇵', '❤️', '🏳️‍🌈', '🤖', '🔥', '👩🏿‍💻', '✨', '🫠'];

const WHITESPACE = [
  ' ',
  '  ',
  '   ',
  '    ',
  '\t',
  '\t\t',
  '\n',
  '\n\n',
  '\r\n',
  ' \n ',
  '\u00a0',
  '\u3000',
  '\u2009',
  '        ',
];

const PUNCTUATION = [
  '.',
  ',',
  '!',
  '?',
  ';',
  ':',
  '...',
  '—',
  '–',
  '"',
  "'",
  '(',
  ')',
  '[',
  ']',
  '{',
  '}',
  '«',
  '»',
  '“',
  '”',
  '…',
  '、',
  '。',
];

const CODE = [
  'def add(a, b):\n    return a + b\n',
  'for (let i = 0; i < n; i++) {\n\tsum += x[i] * y[i];\n}',
  'fn main() {\n    println!("{}", 42);\n}',
  '#include <stdio.h>\nint main(void) { printf("hi\\n"); return 0; }',
  '{"name": "rayo", "version": "0.1.0", "private": true}',
  'SELECT id, name FROM users WHERE age >= 21 ORDER BY name;',
  '<div class="x">&amp; &lt;tag&gt;</div>',
  'const f = async (x) => await g(x?.y ?? 0);',
  'if x==1:\n\tpass\nelif x!=2:\n\t\tprint(x)',
  '$ npm install --save-dev @rayo/text && echo "ok" | grep -c ok',
  'x = [i**2 for i in range(10) if i % 2 == 0]  # squares',
  'matrix[0][1] += 0x1F & ~0b1010 << 3;',
];

/** A few fixed strings that have tripped tokenizers. */
const FIXED = [
  '',
  ' ',
  'Hello world',
  ' Hello world',
  'Hello  world',
  'Hello world ',
  '\n',
  'a\n\nb',
  '   leading spaces',
  'trailing spaces   ',
  "I'm can't won't they've we'll she'd IT'S",
  '12345678901234567890',
  '3.14159 -2.5e-10 1,000,000 0xFF',
  'café naïve résumé',
  'e\u0301 (e and a combining acute)',
  'zero\u200bwidth\u200djoiner',
  'Ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３',
  'ﬁ ligature ﬀ',
  '\u0000 nul and \u0007 bell',
];

function pick<T>(rng: Rng, list: readonly T[]): T {
  return list[Math.min(list.length - 1, Math.floor(rng.next() * list.length))]!;
}

function count(rng: Rng, least: number, most: number): number {
  return least + Math.floor(rng.next() * (most - least + 1));
}

function number(rng: Rng): string {
  const digits = count(rng, 1, 12);
  let s = String(count(rng, 1, 9));
  for (let i = 1; i < digits; i++) s += String(count(rng, 0, 9));
  return rng.next() < 0.3 ? `${s}.${count(rng, 0, 999)}` : s;
}

const SCRIPTS = Object.keys(WORDS);

function sentence(rng: Rng, scripts: readonly string[], specials: readonly string[]): string {
  const parts: string[] = [];
  const n = count(rng, 1, 14);
  for (let i = 0; i < n; i++) {
    const r = rng.next();
    if (r < 0.55) parts.push(pick(rng, WORDS[pick(rng, scripts)]!));
    else if (r < 0.65) parts.push(pick(rng, EMOJI));
    else if (r < 0.75) parts.push(number(rng));
    else if (r < 0.85) parts.push(pick(rng, PUNCTUATION));
    else if (r < 0.93 || specials.length === 0) parts.push(pick(rng, CODE).slice(0, count(rng, 3, 40)));
    else parts.push(pick(rng, specials));
    parts.push(rng.next() < 0.75 ? ' ' : pick(rng, WHITESPACE));
  }
  const text = parts.join('');
  return rng.next() < 0.7 ? text.trimEnd() : text;
}

/** Characters drawn from whole Unicode blocks (letters, symbols, CJK, emoji), not just known words. */
const BLOCKS: readonly [number, number][] = [
  [0x20, 0x7e],
  [0xa1, 0x24f],
  [0x370, 0x3ff],
  [0x400, 0x4ff],
  [0x590, 0x5ff],
  [0x600, 0x6ff],
  [0x900, 0x97f],
  [0xe00, 0xe7f],
  [0x1100, 0x11ff],
  [0x2000, 0x206f],
  [0x2190, 0x22ff],
  [0x3040, 0x30ff],
  [0x4e00, 0x9fff],
  [0xac00, 0xd7a3],
  [0x1f300, 0x1f64f],
  [0x1d400, 0x1d7ff],
  [0x20000, 0x2a6df],
];

function randomCodePoints(rng: Rng): string {
  const n = count(rng, 1, 24);
  let s = '';
  for (let i = 0; i < n; i++) {
    const [lo, hi] = pick(rng, BLOCKS);
    s += String.fromCodePoint(count(rng, lo, hi));
  }
  return s;
}

/** At least `size` strings from `seed`, with `specials` (the vocabulary's special tokens) mixed in. */
export function tokenizerCorpus(seed: number, size: number, specials: readonly string[] = []): string[] {
  const rng = new Rng(seed);
  const out: string[] = [...FIXED, ...CODE];
  for (const script of SCRIPTS) out.push(WORDS[script]!.join(' '));
  out.push(EMOJI.join(''), EMOJI.join(' '), WHITESPACE.join('x'), PUNCTUATION.join(''));
  for (const special of specials.slice(0, 8))
    out.push(special, `${special}Hello${special}`, `a ${special} b`);
  while (out.length < size) {
    const kind = rng.next();
    if (kind < 0.5) out.push(sentence(rng, SCRIPTS, specials));
    else if (kind < 0.65) out.push(sentence(rng, [pick(rng, SCRIPTS)], []));
    else if (kind < 0.75) out.push(randomCodePoints(rng));
    else if (kind < 0.85) {
      let s = '';
      const n = count(rng, 1, 8);
      for (let i = 0; i < n; i++)
        s += pick(rng, WHITESPACE) + (rng.next() < 0.5 ? pick(rng, WORDS.english!) : '');
      out.push(s);
    } else if (kind < 0.95) out.push(pick(rng, CODE) + sentence(rng, ['english'], []));
    else
      out.push(
        Array.from({ length: count(rng, 1, 6) }, () => number(rng)).join(pick(rng, [' ', ',', '', '\n'])),
      );
  }
  return out;
}
