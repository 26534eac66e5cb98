import { fail } from './threads.js';

// Parses a module's text into its entries: parameters, register counts, shared arrays and body.

interface SharedDecl {
  readonly name: string;
  readonly bytes: number;
  readonly align: number;
}

export interface Entry {
  readonly name: string;
  readonly params: readonly { readonly name: string; readonly type: string }[];
  readonly counts: Readonly<Record<string, number>>;
  readonly shared: readonly SharedDecl[];
  readonly body: readonly string[];
}

export interface Module {
  readonly entries: Map<string, Entry>;
  /** Module-scope `.extern .shared` arrays: dynamic shared memory, sized at launch. */
  readonly dynamicShared: readonly { readonly name: string; readonly align: number }[];
}

const DECL_BYTES: Readonly<Record<string, number>> = {
  b8: 1,
  u8: 1,
  s8: 1,
  b16: 2,
  u16: 2,
  s16: 2,
  f16: 2,
  bf16: 2,
  b32: 4,
  u32: 4,
  s32: 4,
  f32: 4,
  b64: 8,
  u64: 8,
  s64: 8,
};

export function parseModule(text: string): Module {
  const entries = new Map<string, Entry>();
  const dynamicShared: { name: string; align: number }[] = [];
  const lines = text.split('\n');
  for (const line of lines) {
    const ext = /^\.extern \.shared \.align (\d+) \.\w+ (\w+)\[\];$/.exec(line.trim());
    if (ext) dynamicShared.push({ name: ext[2]!, align: Number(ext[1]) });
  }
  for (let i = 0; i < lines.length; i++) {
    const head = /^\.visible \.entry (\w+)\(/.exec(lines[i]!);
    if (!head) continue;
    const name = head[1]!;
    const params: { name: string; type: string }[] = [];
    for (i++; lines[i]!.trim() !== ')'; i++) {
      const p = /\.param (?:\.align \d+ )?\.(\w+) (\w+)(\[\d+\])?/.exec(lines[i]!);
      // A by-value byte array is a tensor map, the only one the builder declares.
      if (p) params.push({ name: p[2]!, type: p[3] ? 'tensorMap' : p[1]! });
    }
    while (lines[i]!.trim() !== '{') i++;
    const counts: Record<string, number> = { p: 0, rs: 0, r: 0, f: 0, rd: 0 };
    const shared: SharedDecl[] = [];
    const body: string[] = [];
    for (i++; lines[i]!.trim() !== '}'; i++) {
      const line = lines[i]!.trim();
      const reg = /^\.reg \.\w+ %(\w+)<(\d+)>;$/.exec(line);
      if (reg) {
        if (!(reg[1]! in counts)) fail(`register bank %${reg[1]}`);
        counts[reg[1]!] = Number(reg[2]);
        continue;
      }
      const sh = /^\.shared \.align (\d+) \.(\w+) (\w+)\[(\d+)\];$/.exec(line);
      if (sh) {
        const bytes = DECL_BYTES[sh[2]!] ?? fail(`shared type .${sh[2]}`);
        shared.push({ name: sh[3]!, bytes: bytes * Number(sh[4]), align: Number(sh[1]) });
        continue;
      }
      if (line === '' || line.startsWith('//')) continue;
      body.push(line);
    }
    entries.set(name, { name, params, counts, shared, body });
  }
  return { entries, dynamicShared };
}

/** Splits `a, [b+4], {c, d}` at top-level commas. */
export function splitOperands(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of text) {
    if (ch === '[' || ch === '{') depth++;
    if (ch === ']' || ch === '}') depth--;
    if (ch === ',' && depth === 0) {
      out.push(cur.trim());
      cur = '';
    } else cur += ch;
  }
  if (cur.trim() !== '') out.push(cur.trim());
  return out;
}
