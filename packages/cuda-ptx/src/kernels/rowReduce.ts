import { InvalidArgumentError } from '@rayo/core';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, R32, R64 } from '../ptx/operands.js';
import { forEachRow, type GroupPlace, GroupReducer, groupPlace, type RowGeometry } from './rowGroups.js';
import { type RowSource, RowTile } from './rowTile.js';
import type { FloatStorage } from './storage.js';

// Row kernels: a thread's part of a row (RowTile, rowTile.ts), the column
// sums of backward kernels (ColumnSums, columnSums.ts), and a whole kernel
// from a declaration (rowKernelModule, here). They and the row-group
// primitives they are built on are re-exported, so that every row kernel
// family imports from here.
export * from './columnSums.js';
export * from './rowGroups.js';
export * from './rowTile.js';

// ---- a whole row kernel -------------------------------------------------------------

/** What a row kernel's body works with. */
export interface RowKernel {
  readonly k: KernelBuilder;
  readonly place: GroupPlace;
  readonly reducer: GroupReducer;
  /** The thread's part of the current row. */
  readonly tile: RowTile;
  readonly n: R32;
  readonly pointer: (name: string) => R64;
  readonly float: (name: string) => F32;
}

export interface RowKernelDecl {
  readonly entry: string;
  readonly geometry: RowGeometry;
  /** Pointer parameters, in order; those in `sources` are read through the tile. */
  readonly pointers: readonly string[];
  /** f32 parameters after `rows` and `n`. */
  readonly floats?: readonly string[];
  readonly sources: Readonly<Record<string, Omit<RowSource, 'ptr'>>>;
  /** Storage of the tensors read and written through the tile; f32 when absent. */
  readonly type?: FloatStorage;
  /** Pointers stored otherwise than `type` (a norm's bf16 y of f32 x). */
  readonly storage?: Readonly<Record<string, FloatStorage>>;
  /** Lets the next kernel launch as soon as this one starts (EntryOptions.triggerDependents). */
  readonly triggerDependents?: boolean;
  /** Emits set-up code, and returns the code of one row (after the tile's `begin`) and of the end. */
  readonly build: (r: RowKernel) => { readonly row: () => void; readonly finish?: () => void };
}

/**
 * A module with one entry over `[rows, n]` tensors (parameters: the
 * pointers, `rows`, `n`, the floats): every row group loops over its rows.
 */
export function rowKernelModule(decl: RowKernelDecl): PtxModule {
  const params: Record<string, 'ptr' | 'u32' | 'f32'> = {};
  for (const name of decl.pointers) params[name] = 'ptr';
  params.rows = 'u32';
  params.n = 'u32';
  for (const name of decl.floats ?? []) params[name] = 'f32';
  const m = new PtxModule();
  m.entry(
    decl.entry,
    params,
    (k, p) => {
      const pointers = new Map(decl.pointers.map((name) => [name, k.globalPointer(p[name] as never)]));
      const floats = new Map((decl.floats ?? []).map((name) => [name, k.ldParam(p[name] as never) as F32]));
      const rows = k.ldParam(p.rows as never) as R32;
      const n = k.ldParam(p.n as never) as R32;
      const place = groupPlace(k, decl.geometry);
      const reducer = new GroupReducer(k, place);
      const sources: Record<string, RowSource> = {};
      for (const [name, source] of Object.entries(decl.sources)) {
        sources[name] = { ...source, ptr: pointers.get(name)! };
      }
      const storage = new Map(
        Object.entries(decl.storage ?? {}).map(([name, type]) => [pointers.get(name)!, type] as const),
      );
      const tile = new RowTile(k, place, n, sources, decl.type, storage);
      const { row, finish } = decl.build({
        k,
        place,
        reducer,
        tile,
        n,
        pointer: (name) => pointers.get(name) ?? unknownParam(decl.entry, name),
        float: (name) => floats.get(name) ?? unknownParam(decl.entry, name),
      });
      forEachRow(
        k,
        place,
        rows,
        (r, valid) => {
          tile.begin(r, valid);
          row();
        },
        reducer,
      );
      finish?.();
    },
    // Without `.minnctapersm` ptxas trades a few spills for occupancy; cached rows are better off in registers.
    {
      requiredThreadsPerBlock: [decl.geometry.block, 1, 1],
      minBlocksPerSm: 1,
      ...(decl.triggerDependents ? { triggerDependents: true } : {}),
    },
  );
  return m;
}

/** An entry name for a spec: `logSoftmax` gives `log_softmax`. */
export function entryNameOf(specName: string): string {
  return specName.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function unknownParam(entry: string, name: string): never {
  throw new InvalidArgumentError('no such parameter', { operation: entry, argument: name });
}
