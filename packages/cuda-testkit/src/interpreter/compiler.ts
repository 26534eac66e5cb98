import { F16_VALUES } from '../floatBits.js';
import { flush, fmaTie } from './floatMath.js';
import { compare64, mulWideS32, mulWideU32 } from './intMath.js';
import { Layout } from './layout.js';
import { lowerBinary, lowerMultiplyAdd, lowerUnary } from './lowerArithmetic.js';
import { lowerBulkCopy, lowerCpAsync, lowerMbarrier, lowerTensorCopy } from './lowerAsyncCopies.js';
import {
  lowerBits,
  lowerDp4a,
  lowerLogic,
  lowerPrmt,
  lowerSelp,
  lowerSetp,
  lowerShift,
} from './lowerBitwise.js';
import { lowerCvt } from './lowerConversions.js';
import {
  type Action,
  type Context,
  type Instruction,
  inline,
  type Lowered,
  type Lowering,
  type Stop,
  stop,
  unsupported,
} from './lowering.js';
import { lowerAtomic, lowerMemory, lowerPrefetch } from './lowerMemory.js';
import { lowerBarrier, lowerMove, lowerParam } from './lowerMoves.js';
import { lowerLdmatrix, lowerMma, lowerWgmma } from './lowerTensorCores.js';
import { lowerShfl, lowerVote, lowerWarpSync } from './lowerWarp.js';
import { type LaunchState, misaligned, outsideShared, Window } from './memory.js';
import { type Entry, type Module, splitOperands } from './ptxModule.js';
import { EXIT, fail, type Thread, TWO32 } from './threads.js';

// Compiles an entry: lowers each instruction and turns each basic block into one JavaScript function.

/** A compiled basic block: runs it, returns the next pc or a stop signal (having set `t.pc`). */
type BlockCode = (u: Uint32Array, f: Float32Array, t: Thread) => number;
export interface Compiled {
  /** Block code by the pc it starts at (undefined elsewhere). */
  readonly blocks: readonly (BlockCode | undefined)[];
  /** Instructions in each block, by the pc it starts at. */
  readonly lengths: Int32Array;
  readonly layout: Layout;
  readonly template: Uint32Array;
}

/**
 * Longest run of instructions in one block function (longer blocks are
 * split). Most kernels here run briefly, so V8's optimizing compiler, whose
 * time grows faster than a function's size, costs more than it saves on long
 * blocks: at 160 a run of the emulated conformance spent most of its time
 * compiling; 16 keeps each compile short and still amortizes the call.
 */
const MAX_BLOCK = 16;

/** What block code may name besides u, f and t. */
const BLOCK_HELPERS = {
  TWO32,
  compare64,
  flush,
  fmaTie,
  misaligned,
  mulWideS32,
  mulWideU32,
  outsideShared,
  F16_VALUES,
};

export function compileEntry(entry: Entry, module: Module, state: LaunchState): Compiled {
  const layout = new Layout(entry, module);
  const labels = new Map<string, number>();
  const lines: string[] = [];
  for (const line of entry.body) {
    const label = /^(\$?[\w$]+):$/.exec(line);
    if (label) labels.set(label[1]!, lines.length);
    else lines.push(line);
  }
  const instructions = lines.map((line) => parseInstruction(line, layout));
  const lowered = instructions.map((ins, pc) => lower({ ins, layout, labels, entry, state, pc }));
  // Blocks start at 0, at branch targets and after anything that leaves the block.
  const leaders = new Set<number>([0, ...labels.values()]);
  lowered.forEach((l, pc) => {
    if (l.kind === 'stop' || l.kind === 'branch') leaders.add(pc + 1);
  });
  const windows = lowered.map(() => new Window());
  const env = { ...BLOCK_HELPERS, S: state, L: lines, W: windows, A: lowered.map(actionOf) };
  const lengths = new Int32Array(lines.length + 1);
  const starts: number[] = [];
  const sources: string[] = [];
  const used = new Set<number>();
  let start = 0;
  for (let pc = 1; pc <= lines.length; pc++) {
    if (pc === lines.length || leaders.has(pc) || pc - start === MAX_BLOCK) {
      sources.push(blockSource(instructions, lowered, start, pc, used));
      starts.push(start);
      lengths[start] = pc - start;
      start = pc;
    }
  }
  // One Function for the whole entry: its blocks share the prelude and are parsed at once.
  const prelude = [
    `const { ${Object.keys(env).join(', ')} } = env;`,
    ...[...used].map((pc) => `const w${pc} = W[${pc}];`),
  ];
  const source = `'use strict';\n${prelude.join('\n')}\nreturn [\n${sources.join(',\n')}\n];`;
  const made = new Function('env', source)(env) as BlockCode[];
  const blocks: (BlockCode | undefined)[] = new Array(lines.length);
  starts.forEach((pc, i) => {
    blocks[pc] = made[i];
  });
  return { blocks, lengths, layout, template: layout.template() };
}

function actionOf(l: Lowered): Action | Stop | undefined {
  return l.kind === 'call' || l.kind === 'stop' ? l.action : undefined;
}

function parseInstruction(line: string, layout: Layout): Instruction {
  if (!line.endsWith(';')) fail(`unterminated instruction: ${line}`);
  let text = line.slice(0, -1).trim();
  let guard: Instruction['guard'];
  const g = /^@(!?)(%p\d+)\s+/.exec(text);
  if (g) {
    guard = { slot: layout.dest(g[2]!, 1, line), negate: g[1] === '!' };
    text = text.slice(g[0].length);
  }
  const space = text.indexOf(' ');
  const opcode = space === -1 ? text : text.slice(0, space);
  const ops = space === -1 ? [] : splitOperands(text.slice(space + 1));
  return { line, guard, parts: opcode.split('.'), ops };
}

/** The source of the function running instructions [start, end) of an entry; adds the windows it names to `used`. */
function blockSource(
  instructions: readonly Instruction[],
  lowered: readonly Lowered[],
  start: number,
  end: number,
  used: Set<number>,
): string {
  const body: string[] = [];
  let open = true;
  for (let pc = start; pc < end; pc++) {
    const { guard } = instructions[pc]!;
    const l = lowered[pc]!;
    const test = guard ? `u[${guard.slot}] ${guard.negate ? '===' : '!=='} 0` : undefined;
    let code: string;
    switch (l.kind) {
      case 'js':
        if (l.js.includes(`w${pc}.`)) used.add(pc);
        code = l.js;
        break;
      case 'call':
        code = `A[${pc}](u, f, t);`;
        break;
      case 'stop':
        code = `{ t.pc = ${pc + 1}; return A[${pc}](u, f, t); }`;
        break;
      default:
        code = `return ${l.target};`;
    }
    if (test) body.push(`if (${test}) { ${code} }`);
    else {
      body.push(code);
      if (l.kind === 'stop' || l.kind === 'branch') open = false;
    }
  }
  if (open) body.push(`return ${end};`);
  return `function block${start}(u, f, t) {\n${body.join('\n')}\n}`;
}

/** The opcodes whose lowering is chosen by the opcode alone, grouped by the function that lowers them. */
const LOWERING_GROUPS: readonly (readonly [readonly string[], Lowering])[] = [
  [['atom', 'red'], lowerAtomic],
  [['mov', 'cvta'], lowerMove],
  [['add', 'sub', 'mul', 'div', 'rem', 'min', 'max'], lowerBinary],
  [['mad', 'fma'], lowerMultiplyAdd],
  [['neg', 'abs', 'sqrt', 'rcp', 'rsqrt', 'ex2', 'lg2', 'sin', 'cos', 'tanh'], lowerUnary],
  [['and', 'or', 'xor', 'not'], lowerLogic],
  [['shl', 'shr'], lowerShift],
  [['popc', 'clz', 'brev', 'bfe', 'bfi'], lowerBits],
  [['prmt'], lowerPrmt],
  [['dp4a'], lowerDp4a],
  [['setp'], lowerSetp],
  [['selp'], lowerSelp],
  [['cvt'], lowerCvt],
  [['shfl'], lowerShfl],
  [['vote'], lowerVote],
  [['mma'], lowerMma],
  [['ldmatrix'], lowerLdmatrix],
  [['mbarrier'], lowerMbarrier],
  [['wgmma'], lowerWgmma],
];

const LOWERING_OF: ReadonlyMap<string, Lowering> = new Map(
  LOWERING_GROUPS.flatMap(([opcodes, lowering]) => opcodes.map((opcode) => [opcode, lowering] as const)),
);

function lower(ctx: Context): Lowered {
  const { parts } = ctx.ins;
  switch (parts[0]) {
    case 'ret':
    case 'exit':
      return stop(() => EXIT);
    case 'bra':
      return {
        kind: 'branch',
        target: ctx.labels.get(ctx.ins.ops[0]!) ?? fail(`unknown label: ${ctx.ins.line}`),
      };
    case 'bar':
      return parts[1] === 'warp' ? lowerWarpSync(ctx) : lowerBarrier(ctx);
    case 'prefetch':
      return lowerPrefetch(ctx);
    case 'membar':
    case 'fence':
      // Threads run one at a time: every access is already visible to the others.
      return inline('');
    case 'ld':
    case 'st':
      return parts[1] === 'param' ? lowerParam(ctx) : lowerMemory(ctx);
    case 'cp':
      return ctx.ins.parts[2] !== 'bulk'
        ? lowerCpAsync(ctx)
        : ctx.ins.parts[3] === 'tensor'
          ? lowerTensorCopy(ctx)
          : lowerBulkCopy(ctx);
    case 'setmaxnreg':
      // Register budgets change nothing a thread computes.
      if (!/^setmaxnreg\.(inc|dec)\.sync\.aligned\.u32$/.test(ctx.ins.parts.join('.'))) unsupported(ctx);
      return inline('');
    default: {
      const lowering = LOWERING_OF.get(parts[0]!) ?? unsupported;
      return lowering(ctx);
    }
  }
}
