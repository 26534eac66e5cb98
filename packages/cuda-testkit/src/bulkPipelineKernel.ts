import { addr, PtxModule, type R32 } from '@rayo/cuda-ptx';

/** Bytes of one row: 128 f32. */
export const ROW = 512;

/**
 * A two-stage pipeline over `n` rows of ROW bytes (f32, one per thread of a
 * 128-thread block): the leader thread (the first or the last) starts the
 * bulk copy of row i + 1 into one buffer while every thread adds its element
 * of row i from the other, each buffer's mbarrier saying when its bytes have
 * landed. `out[t]` is the sum of column t.
 */
export function bulkPipeline(target = 'sm_90', leader: 'first' | 'last' = 'first'): PtxModule {
  const m = new PtxModule({ target });
  m.entry('pipeline', { src: 'ptr', out: 'ptr', n: 'u32' }, (k, p) => {
    const src = k.globalPointer(p.src);
    const out = k.globalPointer(p.out);
    const n = k.ldParam(p.n);
    const buffers = k.shared('buffers', 2 * ROW, 128);
    const barriers = k.shared('barriers', 16, 8);
    const tid = k.tid();
    const leaderTid = leader === 'first' ? 0 : k.sub('u32', k.reg('u32'), k.ntid(), 1);
    const isLeader = k.setp('eq', 'u32', k.reg('pred'), tid, leaderTid);
    const start = (row: R32 | number, stage: R32 | number) => {
      const bar = k.madLo('u32', k.reg('u32'), stage, 8, k.sharedAddress(barriers));
      const buffer = k.madLo('u32', k.reg('u32'), stage, ROW, k.sharedAddress(buffers));
      k.mbarrierArrive(bar, { expectTx: ROW });
      k.cpAsyncBulk(buffer, k.elementAddress(src, row, ROW), ROW, bar);
    };
    k.predicated(isLeader, () => {
      k.mbarrierInit(barriers, 1);
      k.mbarrierInit(addr(barriers, 8), 1);
      k.fenceMbarrierInit();
    });
    k.barSync();
    k.ifThen(isLeader, () => start(0, 0));
    const sum = k.mov('f32', k.reg('f32'), 0);
    const row = k.reg('u32');
    k.forRange(row, 0, n, 1, () => {
      const stage = k.and('b32', k.reg('u32'), row, 1);
      // Stage s is used by rows s, s + 2, ...: its phase parity flips every second row.
      const parity = k.and('b32', k.reg('u32'), k.shr('u32', k.reg('u32'), row, 1), 1);
      const next = k.add('u32', k.reg('u32'), row, 1);
      const more = k.setp('lt', 'u32', k.reg('pred'), next, n);
      const issue = k.and('pred', k.reg('pred'), more, isLeader);
      k.ifThen(issue, () => start(next, k.xor('b32', k.reg('u32'), stage, 1)));
      k.mbarrierWait(k.madLo('u32', k.reg('u32'), stage, 8, k.sharedAddress(barriers)), parity);
      const buffer = k.madLo('u32', k.reg('u32'), stage, ROW, k.sharedAddress(buffers));
      const slot = k.madLo('u32', k.reg('u32'), tid, 4, buffer);
      k.add('f32', sum, sum, k.ldShared('f32', k.reg('f32'), slot));
      // Every thread has read the stage before the leader refills it.
      k.barSync();
    });
    k.stGlobal('f32', k.elementAddress(out, tid, 4), sum);
  });
  return m;
}
