import type { FakeLaunch, FakeLibCuda } from './fakeLibCuda.js';

/**
 * Executes the PTX the builder emits, thread by thread, against the fake
 * libcuda's device memory, so that kernels can be checked against the
 * reference implementations on a machine without a GPU.
 *
 * It covers the instructions rayo's kernels use; anything else throws. f32
 * arithmetic is IEEE (JS doubles rounded with Math.fround); `ex2.approx` is
 * modelled as 2^x correctly rounded, so hardware differs by up to its
 * documented 2 ulp. A block's threads run one after another up to each
 * `bar.sync`, which is exactly the ordering a barrier guarantees.
 * Warp-synchronous instructions (shfl, vote) are not supported.
 */

const EXIT = 1;
const BARRIER = 2;

interface Thread {
  pc: number;
  readonly r: Uint32Array;
  readonly f: Float32Array;
  readonly rd: bigint[];
  readonly p: Uint8Array;
  readonly tid: readonly [number, number, number];
  readonly ctaid: readonly [number, number, number];
  readonly shared: DataView;
}

type Step = (t: Thread) => number | undefined;

interface SharedDecl {
  readonly name: string;
  readonly bytes: number;
  readonly align: number;
}

interface Entry {
  readonly name: string;
  readonly params: Map<string, string>;
  readonly counts: Record<string, number>;
  readonly shared: readonly SharedDecl[];
  readonly body: readonly string[];
}

interface Module {
  readonly entries: Map<string, Entry>;
}

interface Context {
  readonly fake: FakeLibCuda;
  readonly entry: Entry;
  readonly symbols: Map<string, number>;
}

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

function bitsToF32(bits: number): number {
  u32buf[0] = bits;
  return f32buf[0]!;
}

function f32ToBits(value: number): number {
  f32buf[0] = value;
  return u32buf[0]!;
}

function fail(message: string): never {
  throw new Error(`ptx interpreter: ${message}`);
}

/** Splits `a, [b+4], {c, d}` at top-level commas. */
function splitOperands(text: string): string[] {
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

const REG = /^%(rd|rs|r|f|p)(\d+)$/;
const SPECIAL = /^%(tid|ntid|ctaid|nctaid)\.([xyz])$/;

type Bank = 'r' | 'f' | 'rd' | 'p';

function parseReg(op: string): { bank: Bank; index: number } | undefined {
  const m = REG.exec(op);
  if (!m) return undefined;
  if (m[1] === 'rs') fail(`16-bit registers are not supported (${op})`);
  return { bank: m[1] as Bank, index: Number(m[2]) };
}

function parseModule(text: string): Module {
  const entries = new Map<string, Entry>();
  const lines = text.split('\n');
  let dynamicShared = false;
  for (const line of lines) if (/^\.extern \.shared/.test(line.trim())) dynamicShared = true;
  for (let i = 0; i < lines.length; i++) {
    const head = /^\.visible \.entry (\w+)\(/.exec(lines[i]!);
    if (!head) continue;
    const name = head[1]!;
    const params = new Map<string, string>();
    for (i++; lines[i]!.trim() !== ')'; i++) {
      const p = /\.param \.(\w+) (\w+)/.exec(lines[i]!);
      if (p) params.set(p[2]!, p[1]!);
    }
    while (lines[i]!.trim() !== '{') i++;
    const counts: Record<string, number> = { r: 0, f: 0, rd: 0, p: 0 };
    const shared: SharedDecl[] = [];
    const body: string[] = [];
    for (i++; lines[i]!.trim() !== '}'; i++) {
      const line = lines[i]!.trim();
      const reg = /^\.reg \.(\w+) %(\w+)<(\d+)>;$/.exec(line);
      if (reg) {
        const bank = reg[2] === 'rd' ? 'rd' : reg[2] === 'rs' ? 'rs' : reg[2] === 'r' ? 'r' : reg[2]!;
        counts[bank] = Number(reg[3]);
        continue;
      }
      const sh = /^\.shared \.align (\d+) \.(\w+) (\w+)\[(\d+)\];$/.exec(line);
      if (sh) {
        const bytes = {
          b8: 1,
          u8: 1,
          b16: 2,
          u16: 2,
          f16: 2,
          b32: 4,
          u32: 4,
          s32: 4,
          f32: 4,
          b64: 8,
          u64: 8,
        }[sh[2]!];
        if (!bytes) fail(`shared type .${sh[2]}`);
        shared.push({ name: sh[3]!, bytes: bytes * Number(sh[4]), align: Number(sh[1]) });
        continue;
      }
      if (line === '' || line.startsWith('//')) continue;
      body.push(line);
    }
    entries.set(name, { name, params, counts, shared, body });
  }
  if (dynamicShared) fail('dynamic shared memory is not supported yet');
  return { entries };
}

/** Compiles an entry's body into steps, resolving labels and shared symbols. */
function compile(entry: Entry) {
  const symbols = new Map<string, number>();
  let offset = 0;
  for (const v of entry.shared) {
    offset = Math.ceil(offset / v.align) * v.align;
    symbols.set(v.name, offset);
    offset += v.bytes;
  }
  const labels = new Map<string, number>();
  const lines: string[] = [];
  for (const line of entry.body) {
    const label = /^(\$?[\w$]+):$/.exec(line);
    if (label) labels.set(label[1]!, lines.length);
    else lines.push(line);
  }
  return { symbols, labels, lines, sharedBytes: offset };
}

export class PtxInterpreter {
  readonly #modules = new Map<string, Module>();
  readonly #compiled = new Map<string, { code: Step[]; sharedBytes: number; symbols: Map<string, number> }>();
  /** Instructions executed, summed over threads. */
  executed = 0;

  constructor(private readonly fake: FakeLibCuda) {}

  /** Makes the fake run every launch without a JS stand-in through this interpreter. */
  attach(): this {
    this.fake.executor = (image, launch) => this.run(image, launch);
    return this;
  }

  run(image: string, launch: FakeLaunch): void {
    let module = this.#modules.get(image);
    if (!module) {
      module = parseModule(image);
      this.#modules.set(image, module);
    }
    const entry = module.entries.get(launch.entry) ?? fail(`no entry ${launch.entry}`);
    const cacheKey = `${image}\0${launch.entry}`;
    let compiled = this.#compiled.get(cacheKey);
    if (!compiled) {
      const c = compile(entry);
      const symbols = new Map(c.symbols);
      compiled = { code: [], sharedBytes: c.sharedBytes, symbols };
      this.#compiled.set(cacheKey, compiled);
      const ctx = { fake: this.fake, entry, symbols };
      // The steps read launch values through `args`, which is swapped per launch below.
      for (const line of c.lines) compiled.code.push(compileLine(line, c.labels, ctx, this.#args));
    }
    this.#args.current = launch;
    const [gx, gy, gz] = launch.grid;
    const [bx, by, bz] = launch.block;
    const counts = entry.counts;
    for (let cz = 0; cz < gz; cz++) {
      for (let cy = 0; cy < gy; cy++) {
        for (let cx = 0; cx < gx; cx++) {
          const shared = new DataView(new ArrayBuffer(Math.max(compiled.sharedBytes, 4)));
          let live: Thread[] = [];
          for (let tz = 0; tz < bz; tz++) {
            for (let ty = 0; ty < by; ty++) {
              for (let tx = 0; tx < bx; tx++) {
                live.push({
                  pc: 0,
                  r: new Uint32Array(counts.r ?? 0),
                  f: new Float32Array(counts.f ?? 0),
                  rd: new Array<bigint>(counts.rd ?? 0).fill(0n),
                  p: new Uint8Array(counts.p ?? 0),
                  tid: [tx, ty, tz],
                  ctaid: [cx, cy, cz],
                  shared,
                });
              }
            }
          }
          while (live.length > 0) {
            const waiting: Thread[] = [];
            for (const t of live) {
              if (this.#step(compiled.code, t) === BARRIER) waiting.push(t);
            }
            if (waiting.length > 0 && waiting.length !== live.length) {
              fail(
                `${launch.entry}: ${live.length - waiting.length} threads exited while others wait at a barrier`,
              );
            }
            live = waiting;
          }
        }
      }
    }
  }

  readonly #args: { current: FakeLaunch | undefined } = { current: undefined };

  #step(code: Step[], t: Thread): number {
    let n = 0;
    for (;;) {
      const step = code[t.pc++] ?? fail('ran past the end of the entry');
      n++;
      const r = step(t);
      if (r !== undefined) {
        this.executed += n;
        return r;
      }
    }
  }
}

function compileLine(
  line: string,
  labels: Map<string, number>,
  ctx: Context,
  args: { current: FakeLaunch | undefined },
): Step {
  if (!line.endsWith(';')) fail(`unterminated instruction: ${line}`);
  let text = line.slice(0, -1).trim();
  let guard: { index: number; negate: boolean } | undefined;
  const g = /^@(!?)%p(\d+)\s+/.exec(text);
  if (g) {
    guard = { index: Number(g[2]), negate: g[1] === '!' };
    text = text.slice(g[0].length);
  }
  const space = text.indexOf(' ');
  const opcode = space === -1 ? text : text.slice(0, space);
  const ops = space === -1 ? [] : splitOperands(text.slice(space + 1));
  const step = compileInstruction(opcode, ops, labels, ctx, args, line);
  if (!guard) return step;
  const { index, negate } = guard;
  return (t) => ((t.p[index] !== 0) !== negate ? step(t) : undefined);
}

function compileInstruction(
  opcode: string,
  ops: string[],
  labels: Map<string, number>,
  ctx: Context,
  args: { current: FakeLaunch | undefined },
  line: string,
): Step {
  const parts = opcode.split('.');
  const base = parts[0]!;
  const type = parts[parts.length - 1]!;
  const mods = new Set(parts.slice(1, -1));

  const u32 = (op: string): ((t: Thread) => number) => {
    const r = parseReg(op);
    if (r?.bank === 'r') return (t) => t.r[r.index]!;
    if (r?.bank === 'f') return (t) => f32ToBits(t.f[r.index]!);
    const s = SPECIAL.exec(op);
    if (s) {
      const axis = 'xyz'.indexOf(s[2]!);
      switch (s[1]) {
        case 'tid':
          return (t) => t.tid[axis]!;
        case 'ctaid':
          return (t) => t.ctaid[axis]!;
        case 'ntid':
          return () => args.current!.block[axis]!;
        case 'nctaid':
          return () => args.current!.grid[axis]!;
      }
    }
    const sym = ctx.symbols.get(op);
    if (sym !== undefined) return () => sym;
    const v = parseInt32(op);
    return () => v;
  };
  const s32 = (op: string): ((t: Thread) => number) => {
    const get = u32(op);
    return (t) => get(t) | 0;
  };
  const f32 = (op: string): ((t: Thread) => number) => {
    const r = parseReg(op);
    if (r?.bank === 'f') return (t) => t.f[r.index]!;
    if (r?.bank === 'r') return (t) => bitsToF32(t.r[r.index]!);
    const v = parseF32(op);
    return () => v;
  };
  const u64 = (op: string): ((t: Thread) => bigint) => {
    const r = parseReg(op);
    if (r?.bank === 'rd') return (t) => t.rd[r.index]!;
    const v = BigInt.asUintN(64, BigInt(op.replace(/U$/, '')));
    return () => v;
  };
  const pred = (op: string): ((t: Thread) => boolean) => {
    const r = parseReg(op);
    if (r?.bank !== 'p') fail(`expected a predicate: ${op} in ${line}`);
    return (t) => t.p[r.index] !== 0;
  };
  const dest = (op: string): { bank: Bank; index: number } =>
    parseReg(op) ?? fail(`expected a register: ${line}`);

  const is32 = (ty: string) => ['u32', 's32', 'b32'].includes(ty);
  const is64 = (ty: string) => ['u64', 's64', 'b64'].includes(ty);

  type Setter = (t: Thread, v: number | bigint | boolean) => void;
  /** A setter for a result of PTX type `ty` into register `op`. */
  const set = (op: string, ty: string): Setter => {
    const { bank, index } = dest(op);
    if (ty === 'f32' && bank === 'f') {
      return (t, v) => {
        t.f[index] = v as number;
      };
    }
    if (ty === 'f32' && bank === 'r') {
      return (t, v) => {
        t.r[index] = f32ToBits(v as number);
      };
    }
    if (is32(ty) && bank === 'r') {
      return (t, v) => {
        t.r[index] = Number(v) >>> 0;
      };
    }
    if (is32(ty) && bank === 'f') {
      return (t, v) => {
        t.f[index] = bitsToF32(Number(v) >>> 0);
      };
    }
    if (is64(ty) && bank === 'rd') {
      return (t, v) => {
        t.rd[index] = BigInt.asUintN(64, BigInt(v as bigint));
      };
    }
    if (ty === 'pred' && bank === 'p') {
      return (t, v) => {
        t.p[index] = v ? 1 : 0;
      };
    }
    return fail(`cannot write .${ty} into ${op}: ${line}`);
  };
  const getter = (op: string, ty: string): ((t: Thread) => number | bigint | boolean) => {
    if (ty === 'f32') return f32(op);
    if (ty === 'u32' || ty === 'b32') return u32(op);
    if (ty === 's32') return s32(op);
    if (is64(ty)) return u64(op);
    if (ty === 'pred') return pred(op);
    return fail(`unsupported type .${ty}: ${line}`);
  };

  switch (base) {
    case 'ret':
    case 'exit':
      return () => EXIT;
    case 'bar':
      if (!(mods.has('sync') || type === 'sync')) fail(line);
      return () => BARRIER;
    case 'bra': {
      const target = labels.get(ops[0]!) ?? fail(`unknown label in ${line}`);
      return (t) => {
        t.pc = target;
        return undefined;
      };
    }
    case 'ld':
    case 'st': {
      const spaceName = parts[1]!;
      const [dataOp, addrOp] = base === 'ld' ? [ops[0]!, ops[1]!] : [ops[1]!, ops[0]!];
      if (dataOp.startsWith('{')) fail(`vector accesses are not supported: ${line}`);
      const m = /^\[([^\]+]+)(?:\+(\d+))?\]$/.exec(addrOp) ?? fail(`address ${addrOp}`);
      const baseOp = m[1]!;
      const offset = Number(m[2] ?? 0);
      const size = type === 'f32' || is32(type) ? 4 : is64(type) ? 8 : fail(`type .${type}`);
      if (spaceName === 'param') {
        const prefix = `${ctx.entry.name}_param_`;
        const name = baseOp.startsWith(prefix) ? baseOp.slice(prefix.length) : fail(line);
        const write = set(dataOp, type);
        return (t) => {
          const v = args.current!.args[name];
          if (v === undefined) fail(`no value for parameter ${name}`);
          write(t, type === 'f32' ? Math.fround(v as number) : v);
          return undefined;
        };
      }
      if (spaceName === 'global') {
        const address = u64(baseOp);
        const at = (t: Thread) => {
          const a = address(t) + BigInt(offset);
          const region =
            ctx.fake.deviceView(a, size) ??
            fail(`${line}: ${size} bytes at 0x${a.toString(16)} outside device memory`);
          return region;
        };
        if (base === 'ld') {
          const write = set(dataOp, type);
          return (t) => {
            const { view, offset: o } = at(t);
            write(t, readView(view, o, type));
            return undefined;
          };
        }
        const read = getter(dataOp, type);
        return (t) => {
          const { view, offset: o } = at(t);
          writeView(view, o, type, read(t));
          return undefined;
        };
      }
      if (spaceName === 'shared') {
        const address = u32(baseOp);
        if (base === 'ld') {
          const write = set(dataOp, type);
          return (t) => {
            write(t, readView(t.shared, address(t) + offset, type));
            return undefined;
          };
        }
        const read = getter(dataOp, type);
        return (t) => {
          writeView(t.shared, address(t) + offset, type, read(t));
          return undefined;
        };
      }
      return fail(`state space .${spaceName}: ${line}`);
    }
    case 'cvta': {
      const write = set(ops[0]!, 'u64');
      const read = u64(ops[1]!);
      return (t) => {
        write(t, read(t));
        return undefined;
      };
    }
    case 'mov': {
      const write = set(ops[0]!, type);
      const read = getter(ops[1]!, type);
      return (t) => {
        write(t, read(t));
        return undefined;
      };
    }
    case 'setp': {
      const cmp = parts[1]!;
      const write = set(ops[0]!, 'pred');
      const a = getter(ops[1]!, type);
      const b = getter(ops[2]!, type);
      const test = comparison(cmp, type, line);
      return (t) => {
        write(t, test(a(t) as number | bigint, b(t) as number | bigint));
        return undefined;
      };
    }
    case 'selp': {
      const write = set(ops[0]!, type);
      const a = getter(ops[1]!, type);
      const b = getter(ops[2]!, type);
      const c = pred(ops[3]!);
      return (t) => {
        write(t, c(t) ? a(t) : b(t));
        return undefined;
      };
    }
    case 'and':
    case 'or':
    case 'xor': {
      const write = set(ops[0]!, type);
      const a = getter(ops[1]!, type);
      const b = getter(ops[2]!, type);
      if (type === 'pred') {
        const f =
          base === 'and'
            ? (x: boolean, y: boolean) => x && y
            : base === 'or'
              ? (x: boolean, y: boolean) => x || y
              : (x: boolean, y: boolean) => x !== y;
        return (t) => {
          write(t, f(a(t) as boolean, b(t) as boolean));
          return undefined;
        };
      }
      if (!is32(type)) fail(line);
      const f =
        base === 'and'
          ? (x: number, y: number) => x & y
          : base === 'or'
            ? (x: number, y: number) => x | y
            : (x: number, y: number) => x ^ y;
      return (t) => {
        write(t, f(a(t) as number, b(t) as number) >>> 0);
        return undefined;
      };
    }
    case 'shl':
    case 'shr': {
      const write = set(ops[0]!, type);
      const a = getter(ops[1]!, type);
      const b = u32(ops[2]!);
      if (is64(type)) {
        return (t) => {
          const v = a(t) as bigint;
          const s = BigInt(Math.min(b(t), 64));
          write(t, base === 'shl' ? v << s : type === 's64' ? BigInt.asIntN(64, v) >> s : v >> s);
          return undefined;
        };
      }
      return (t) => {
        const s = b(t);
        const v = a(t) as number;
        const r =
          s >= 32
            ? base === 'shr' && type === 's32' && v < 0
              ? -1
              : 0
            : base === 'shl'
              ? v << s
              : type === 's32'
                ? v >> s
                : v >>> s;
        write(t, r);
        return undefined;
      };
    }
    case 'add':
    case 'sub':
    case 'min':
    case 'max':
    case 'div':
    case 'rem':
      return binaryArith(base, parts, type, ops, set, getter, line);
    case 'mul':
    case 'mad': {
      const write = set(ops[0]!, parts[1] === 'wide' ? (type === 's32' ? 's64' : 'u64') : type);
      const a = getter(ops[1]!, type);
      const b = getter(ops[2]!, type);
      const c =
        base === 'mad'
          ? getter(ops[3]!, parts[1] === 'wide' ? (type === 's32' ? 's64' : 'u64') : type)
          : undefined;
      if (type === 'f32') {
        if (base === 'mad') fail(line);
        return (t) => {
          write(t, Math.fround((a(t) as number) * (b(t) as number)));
          return undefined;
        };
      }
      if (parts[1] === 'wide') {
        return (t) => {
          const p = BigInt(a(t) as number) * BigInt(b(t) as number);
          write(t, c ? p + (c(t) as bigint) : p);
          return undefined;
        };
      }
      if (parts[1] === 'lo' && is32(type)) {
        return (t) => {
          const p = Math.imul(a(t) as number, b(t) as number);
          write(t, c ? (p + (c(t) as number)) | 0 : p);
          return undefined;
        };
      }
      if (parts[1] === 'lo' && is64(type)) {
        return (t) => {
          const p = (a(t) as bigint) * (b(t) as bigint);
          write(t, c ? p + (c(t) as bigint) : p);
          return undefined;
        };
      }
      return fail(line);
    }
    case 'fma': {
      if (type !== 'f32') fail(line);
      const write = set(ops[0]!, 'f32');
      const a = f32(ops[1]!);
      const b = f32(ops[2]!);
      const c = f32(ops[3]!);
      const ftz = mods.has('ftz');
      return (t) => {
        // The product of two f32 is exact in a double; the sum is rounded twice at most.
        write(t, flush(Math.fround(a(t) * b(t) + c(t)), ftz));
        return undefined;
      };
    }
    case 'neg':
    case 'abs': {
      const write = set(ops[0]!, type);
      const a = getter(ops[1]!, type);
      if (type === 'f32') {
        return (t) => {
          const bits = f32ToBits(a(t) as number);
          write(t, bitsToF32(base === 'neg' ? (bits ^ 0x80000000) >>> 0 : (bits & 0x7fffffff) >>> 0));
          return undefined;
        };
      }
      return (t) => {
        const v = a(t) as number;
        write(t, base === 'neg' ? -v : Math.abs(v));
        return undefined;
      };
    }
    case 'rcp':
    case 'sqrt':
    case 'rsqrt':
    case 'ex2':
    case 'lg2': {
      if (type !== 'f32') fail(line);
      const write = set(ops[0]!, 'f32');
      const a = f32(ops[1]!);
      const ftz = mods.has('ftz');
      const fn =
        base === 'rcp'
          ? (x: number) => 1 / x
          : base === 'sqrt'
            ? Math.sqrt
            : base === 'rsqrt'
              ? (x: number) => 1 / Math.sqrt(x)
              : base === 'ex2'
                ? (x: number) => 2 ** x
                : Math.log2;
      return (t) => {
        write(t, flush(Math.fround(fn(flush(a(t), ftz))), ftz));
        return undefined;
      };
    }
    default:
      return fail(`unsupported instruction: ${line}`);
  }
}

function flush(x: number, ftz: boolean): number {
  return ftz && x !== 0 && Math.abs(x) < 2 ** -126 ? (x < 0 ? -0 : 0) : x;
}

function binaryArith(
  base: string,
  parts: string[],
  type: string,
  ops: string[],
  set: (op: string, ty: string) => (t: Thread, v: number | bigint | boolean) => void,
  getter: (op: string, ty: string) => (t: Thread) => number | bigint | boolean,
  line: string,
): Step {
  const write = set(ops[0]!, type);
  const a = getter(ops[1]!, type);
  const b = getter(ops[2]!, type);
  const ftz = parts.includes('ftz');
  if (type === 'f32') {
    const fn =
      base === 'add'
        ? (x: number, y: number) => x + y
        : base === 'sub'
          ? (x: number, y: number) => x - y
          : base === 'div'
            ? (x: number, y: number) => x / y
            : base === 'min'
              ? (x: number, y: number) => (Number.isNaN(x) ? y : Number.isNaN(y) ? x : Math.min(x, y))
              : base === 'max'
                ? (x: number, y: number) => (Number.isNaN(x) ? y : Number.isNaN(y) ? x : Math.max(x, y))
                : fail(line);
    return (t) => {
      write(t, flush(Math.fround(fn(a(t) as number, b(t) as number)), ftz));
      return undefined;
    };
  }
  if (type === 'u32' || type === 's32') {
    const signed = type === 's32';
    return (t) => {
      let x = a(t) as number;
      let y = b(t) as number;
      if (signed) {
        x |= 0;
        y |= 0;
      }
      let r: number;
      switch (base) {
        case 'add':
          r = x + y;
          break;
        case 'sub':
          r = x - y;
          break;
        case 'min':
          r = Math.min(x, y);
          break;
        case 'max':
          r = Math.max(x, y);
          break;
        case 'div':
          if (y === 0) fail(`division by zero: ${line}`);
          r = Math.trunc(x / y);
          break;
        default:
          if (y === 0) fail(`remainder by zero: ${line}`);
          r = x % y;
      }
      write(t, r | 0);
      return undefined;
    };
  }
  if (type === 'u64' || type === 's64') {
    return (t) => {
      const x = a(t) as bigint;
      const y = b(t) as bigint;
      let r: bigint;
      switch (base) {
        case 'add':
          r = x + y;
          break;
        case 'sub':
          r = x - y;
          break;
        case 'div':
          r = x / y;
          break;
        case 'rem':
          r = x % y;
          break;
        default:
          r = (base === 'min' ? x < y : x > y) ? x : y;
      }
      write(t, r);
      return undefined;
    };
  }
  return fail(line);
}

function comparison(
  cmp: string,
  type: string,
  line: string,
): (a: number | bigint, b: number | bigint) => boolean {
  if (type === 'f32') {
    const unordered = (a: number, b: number) => Number.isNaN(a) || Number.isNaN(b);
    const base = cmp.endsWith('u') && cmp !== 'nan' && cmp !== 'num' ? cmp.slice(0, -1) : cmp;
    const ordered: Record<string, (a: number, b: number) => boolean> = {
      eq: (a, b) => a === b,
      ne: (a, b) => a !== b,
      lt: (a, b) => a < b,
      le: (a, b) => a <= b,
      gt: (a, b) => a > b,
      ge: (a, b) => a >= b,
    };
    if (cmp === 'nan') return (a, b) => unordered(a as number, b as number);
    if (cmp === 'num') return (a, b) => !unordered(a as number, b as number);
    const f = ordered[base] ?? fail(`comparison ${cmp}: ${line}`);
    if (base !== cmp) return (a, b) => unordered(a as number, b as number) || f(a as number, b as number);
    return (a, b) => !unordered(a as number, b as number) && f(a as number, b as number);
  }
  const signed = type.startsWith('s');
  const norm = (v: number | bigint): number | bigint =>
    typeof v === 'bigint' ? (signed ? BigInt.asIntN(64, v) : v) : signed ? v | 0 : v >>> 0;
  const table: Record<string, (a: number | bigint, b: number | bigint) => boolean> = {
    eq: (a, b) => a === b,
    ne: (a, b) => a !== b,
    lt: (a, b) => a < b,
    le: (a, b) => a <= b,
    gt: (a, b) => a > b,
    ge: (a, b) => a >= b,
    lo: (a, b) => a < b,
    ls: (a, b) => a <= b,
    hi: (a, b) => a > b,
    hs: (a, b) => a >= b,
  };
  const f = table[cmp] ?? fail(`comparison ${cmp}: ${line}`);
  return (a, b) => f(norm(a), norm(b));
}

function readView(view: DataView, offset: number, type: string): number | bigint {
  switch (type) {
    case 'f32':
      return view.getFloat32(offset, true);
    case 's32':
      return view.getInt32(offset, true);
    case 'u32':
    case 'b32':
      return view.getUint32(offset, true);
    default:
      return view.getBigUint64(offset, true);
  }
}

function writeView(view: DataView, offset: number, type: string, value: number | bigint | boolean): void {
  switch (type) {
    case 'f32':
      view.setFloat32(offset, value as number, true);
      return;
    case 's32':
    case 'u32':
    case 'b32':
      view.setUint32(offset, Number(value) >>> 0, true);
      return;
    default:
      view.setBigUint64(offset, BigInt.asUintN(64, value as bigint), true);
  }
}

function parseInt32(op: string): number {
  if (!/^-?(\d+|0x[0-9a-fA-F]+U?)$/.test(op)) fail(`not an integer operand: ${op}`);
  return Number(BigInt.asUintN(32, BigInt(op.replace(/U$/, ''))));
}

function parseF32(op: string): number {
  const hex = /^0[fF]([0-9a-fA-F]{8})$/.exec(op);
  if (hex) return bitsToF32(Number.parseInt(hex[1]!, 16));
  const v = Number(op);
  if (Number.isNaN(v)) fail(`not an f32 operand: ${op}`);
  return Math.fround(v);
}
