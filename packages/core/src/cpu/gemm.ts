/**
 * Cache-blocked f32 GEMM for the cpu backend:
 * y = alpha · op(a) · op(b) (+ beta · c), op = optional transpose.
 * op(b) is packed once into a contiguous [K, N] panel so the inner loop
 * streams rows; accumulation is in doubles.
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

const ROW_BLOCK = 32;
const DEPTH_BLOCK = 128;
const COL_BLOCK = 1024;

export function gemm(args: GemmArgs, out: Float32Array = new Float32Array(args.m * args.n)): Float32Array {
  const { m, n, k, a, b, c, alpha, beta, transA, transB } = args;
  // op(b) as a dense row-major [k, n] panel.
  let panel: ArrayLike<number> = b;
  if (transB) {
    const packed = new Float64Array(k * n);
    for (let j = 0; j < n; j++) for (let p = 0; p < k; p++) packed[p * n + j] = b[j * k + p]!;
    panel = packed;
  }
  const acc = new Float64Array(ROW_BLOCK * n);
  for (let i0 = 0; i0 < m; i0 += ROW_BLOCK) {
    const rows = Math.min(ROW_BLOCK, m - i0);
    acc.fill(0, 0, rows * n);
    for (let p0 = 0; p0 < k; p0 += DEPTH_BLOCK) {
      const pEnd = Math.min(p0 + DEPTH_BLOCK, k);
      for (let j0 = 0; j0 < n; j0 += COL_BLOCK) {
        const jEnd = Math.min(j0 + COL_BLOCK, n);
        for (let r = 0; r < rows; r++) {
          const i = i0 + r;
          const accRow = r * n;
          for (let p = p0; p < pEnd; p++) {
            const aip = transA ? a[p * m + i]! : a[i * k + p]!;
            const bRow = p * n;
            for (let j = j0; j < jEnd; j++) acc[accRow + j]! += aip * panel[bRow + j]!;
          }
        }
      }
    }
    for (let r = 0; r < rows; r++) {
      const base = (i0 + r) * n;
      for (let j = 0; j < n; j++) {
        out[base + j] = alpha * acc[r * n + j]! + (c ? beta * c[base + j]! : 0);
      }
    }
  }
  return out;
}
