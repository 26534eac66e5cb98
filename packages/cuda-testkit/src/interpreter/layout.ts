import { f32ToBits } from '../floatBits.js';
import type { Entry, Module } from './ptxModule.js';
import { fail } from './threads.js';

// Where an entry's registers, special registers and constants live in a thread's register file.

/** Special registers in fixed slots at the start of every register file. */
export const SPECIAL_SLOT: Readonly<Record<string, number>> = {
  '%tid.x': 0,
  '%tid.y': 1,
  '%tid.z': 2,
  '%ntid.x': 3,
  '%ntid.y': 4,
  '%ntid.z': 5,
  '%ctaid.x': 6,
  '%ctaid.y': 7,
  '%ctaid.z': 8,
  '%nctaid.x': 9,
  '%nctaid.y': 10,
  '%nctaid.z': 11,
  '%laneid': 12,
  '%warpid': 13,
  '%nwarpid': 14,
  '%smid': 15,
  '%nsmid': 16,
  '%lanemask_eq': 17,
  '%lanemask_le': 18,
  '%lanemask_lt': 19,
  '%lanemask_ge': 20,
  '%lanemask_gt': 21,
};
const SPECIALS = 22;
const SPECIAL_SLOTS: ReadonlyMap<string, number> = new Map(Object.entries(SPECIAL_SLOT));

/** `table[key]` for keys the table itself holds (not inherited ones such as `constructor`). */
export function own<V>(table: Readonly<Record<string, V>>, key: string): V | undefined {
  return Object.hasOwn(table, key) ? table[key] : undefined;
}

export type Width = 1 | 16 | 32 | 64;

export function widthOf(type: string): Width {
  switch (type) {
    case 'pred':
      return 1;
    case 'u16':
    case 's16':
    case 'b16':
    case 'f16':
    case 'bf16':
      return 16;
    case 'u32':
    case 's32':
    case 'b32':
    case 'f32':
      return 32;
    case 'u64':
    case 's64':
    case 'b64':
      return 64;
    default:
      return fail(`type .${type}`);
  }
}

const BANK_WIDTH: Readonly<Record<string, readonly Width[]>> = {
  p: [1],
  rs: [16],
  r: [32],
  f: [32],
  rd: [64],
};

const REG = /^%(rd|rs|r|f|p)(\d+)$/;

/** Where everything of one entry lives in a thread's register file. */
export class Layout {
  readonly base: Readonly<Record<string, number>>;
  readonly #counts: Readonly<Record<string, number>>;
  readonly #init: number[] = [];
  readonly #constants = new Map<string, number>();
  /** Shared variables (static, then dynamic) by name: their offsets in the block's window. */
  readonly sharedOffsets = new Map<string, number>();
  readonly staticSharedBytes: number;
  /** Offset of the dynamic shared memory (after the static variables). */
  readonly dynamicOffset: number;
  /** Tensor-map parameters by symbol: their index among the parameters. */
  readonly tensorMaps = new Map<string, number>();

  constructor(entry: Entry, module: Module) {
    entry.params.forEach((p, i) => {
      if (p.type === 'tensorMap') this.tensorMaps.set(p.name, i);
    });
    const c = entry.counts;
    this.#counts = c;
    let next = SPECIALS;
    const base: Record<string, number> = {};
    for (const [bank, words] of [
      ['r', 1],
      ['f', 1],
      ['rd', 2],
      ['rs', 1],
      ['p', 1],
    ] as const) {
      base[bank] = next;
      next += (c[bank] ?? 0) * words;
    }
    this.base = base;
    this.#init = new Array<number>(next).fill(0);
    let offset = 0;
    for (const v of entry.shared) {
      offset = Math.ceil(offset / v.align) * v.align;
      this.sharedOffsets.set(v.name, offset);
      offset += v.bytes;
    }
    this.staticSharedBytes = offset;
    const align = Math.max(16, ...module.dynamicShared.map((d) => d.align));
    this.dynamicOffset = Math.ceil(offset / align) * align;
    for (const d of module.dynamicShared) this.sharedOffsets.set(d.name, this.dynamicOffset);
  }

  get size(): number {
    return this.#init.length;
  }

  /** Initial register file: zeros and the constants. */
  template(): Uint32Array {
    return Uint32Array.from(this.#init);
  }

  /** The slot of register `op` (a register of a bank holding `width`), or undefined if `op` is no register. */
  register(op: string, width: Width, line: string): number | undefined {
    const m = REG.exec(op);
    if (!m) return undefined;
    const bank = m[1]!;
    if (!BANK_WIDTH[bank]!.includes(width)) fail(`${op} cannot hold a ${width}-bit value: ${line}`);
    const index = Number(m[2]);
    if (index >= (this.#counts[bank] ?? 0)) fail(`${op} is not declared: ${line}`);
    return this.base[bank]! + index * (bank === 'rd' ? 2 : 1);
  }

  /** A destination register's slot. */
  dest(op: string, width: Width, line: string): number {
    return this.register(op, width, line) ?? fail(`expected a register, got ${op}: ${line}`);
  }

  /** A source: a register, special register, shared variable or immediate of `type`. */
  source(op: string, type: string, line: string): number {
    const width = widthOf(type);
    const reg = this.register(op, width, line);
    if (reg !== undefined) return reg;
    const special = SPECIAL_SLOTS.get(op);
    if (special !== undefined) {
      if (width !== 32) fail(`${op} is 32 bits: ${line}`);
      return special;
    }
    const shared = this.sharedOffsets.get(op);
    if (shared !== undefined) return this.#constant(`${width}:${op}`, width, BigInt(shared));
    const map = this.tensorMaps.get(op);
    if (map !== undefined) {
      if (width !== 64) fail(`a tensor map's address is 64 bits: ${line}`);
      return this.#constant(`map:${op}`, width, TENSOR_MAP_HANDLE + BigInt(map));
    }
    if (width === 1) fail(`expected a predicate register, got ${op}: ${line}`);
    return this.#constant(`${type}:${op}`, width, parseImmediate(op, type, line));
  }

  #constant(key: string, width: Width, value: bigint): number {
    let slot = this.#constants.get(key);
    if (slot === undefined) {
      slot = this.#init.length;
      this.#constants.set(key, slot);
      const bits = BigInt.asUintN(width, value);
      this.#init.push(Number(bits & 0xffffffffn));
      if (width === 64) this.#init.push(Number(bits >> 32n));
    }
    return slot;
  }
}

/** An immediate's bits (as an unsigned integer of the type's width). */
function parseImmediate(op: string, type: string, line: string): bigint {
  const hexFloat = /^0[fF]([0-9a-fA-F]{8})$/.exec(op);
  if (hexFloat) {
    if (type !== 'f32' && type !== 'b32') fail(`an f32 literal for .${type}: ${line}`);
    return BigInt(Number.parseInt(hexFloat[1]!, 16));
  }
  if (/^-?(\d+|0[xX][0-9a-fA-F]+)U?$/.test(op)) {
    const negative = op.startsWith('-');
    const magnitude = BigInt(op.replace(/^-/, '').replace(/U$/, ''));
    if (type === 'f32') return BigInt(f32ToBits(Number(negative ? -magnitude : magnitude)));
    return negative ? -magnitude : magnitude;
  }
  if (type === 'f32' && !Number.isNaN(Number(op))) return BigInt(f32ToBits(Number(op)));
  return fail(`not an operand of .${type}: ${op} in ${line}`);
}

/** Where the interpreter's register files hold a tensor map's address: a handle, its parameter index added. */
export const TENSOR_MAP_HANDLE = 0x7e6d_0000_0000n;
