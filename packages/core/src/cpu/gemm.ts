/**
 * Cache-blocked f32 GEMM for the cpu backend:
 * y = alpha · op(a) · op(b) (+ beta · c), op = optional transpose.
 * op(b) is packed once into a dense row-major [K, N] panel of doubles so the
 * inner loop is monomorphic and streams rows; four depth steps are fused per
 * pass over an accumulator row to cut its loads and stores.
 */
export interface GemmArgs {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly a: ArrayLike<number>;
  readonly b: ArrayLike<number>;
  readonly c?: ArrayLike<number> | undefined;
  readonly alpha: number;
  readonly beta: number;
  readonly transA: boolean;
  readonly transB: boolean;
}

const DEPTH_BLOCK = 256;
const COL_BLOCK = 512;

function packB(b: ArrayLike<number>, k: number, n: number, transB: boolean): Float64Array {
  const panel = new Float64Array(k * n);
  if (transB) {
    for (let j = 0; j < n; j++) for (let p = 0; p < k; p++) panel[p * n + j] = b[j * k + p]!;
  } else {
    for (let i = 0; i < k * n; i++) panel[i] = b[i]!;
  }
  return panel;
}

function rowOfA(
  a: ArrayLike<number>,
  i: number,
  m: number,
  k: number,
  transA: boolean,
  into: Float64Array,
): void {
  if (transA) for (let p = 0; p < k; p++) into[p] = a[p * m + i]!;
  else for (let p = 0; p < k; p++) into[p] = a[i * k + p]!;
}

export function gemm(args: GemmArgs, out: Float32Array = new Float32Array(args.m * args.n)): Float32Array {
  const { m, n, k, a, c, alpha, beta, transA } = args;
  const panel = packB(args.b, k, n, args.transB);
  const aRow = new Float64Array(k);
  const acc = new Float64Array(n);
  for (let i = 0; i < m; i++) {
    rowOfA(a, i, m, k, transA, aRow);
    acc.fill(0);
    for (let j0 = 0; j0 < n; j0 += COL_BLOCK) {
      const jEnd = Math.min(j0 + COL_BLOCK, n);
      for (let p0 = 0; p0 < k; p0 += DEPTH_BLOCK) {
        const pEnd = Math.min(p0 + DEPTH_BLOCK, k);
        let p = p0;
        for (; p + 3 < pEnd; p += 4) {
          const a0 = aRow[p]!;
          const a1 = aRow[p + 1]!;
          const a2 = aRow[p + 2]!;
          const a3 = aRow[p + 3]!;
          const r0 = p * n;
          const r1 = r0 + n;
          const r2 = r1 + n;
          const r3 = r2 + n;
          for (let j = j0; j < jEnd; j++) {
            acc[j]! += a0 * panel[r0 + j]! + a1 * panel[r1 + j]! + a2 * panel[r2 + j]! + a3 * panel[r3 + j]!;
          }
        }
        for (; p < pEnd; p++) {
          const ap = aRow[p]!;
          const r = p * n;
          for (let j = j0; j < jEnd; j++) acc[j]! += ap * panel[r + j]!;
        }
      }
    }
    const base = i * n;
    if (c) for (let j = 0; j < n; j++) out[base + j] = alpha * acc[j]! + beta * c[base + j]!;
    else for (let j = 0; j < n; j++) out[base + j] = alpha * acc[j]!;
  }
  return out;
}
