import type { AddressLike, Operand, Pred, R64 } from './operands.js';
import type { Requirement } from './target.js';
import { WarpgroupInstructions } from './warpgroupInstructions.js';

/** `mbarrier` on `.shared::cta` with a sink for the unused state. */
const MBARRIER: Requirement = { sm: 80, ptx: '7.8' };
/** Transaction counts, try_wait and the bulk copies that complete them came with sm_90. */
const MBARRIER_TX: Requirement = { sm: 90, ptx: '8.0' };
const TRY_WAIT: Requirement = { sm: 90, ptx: '7.8' };

export interface MbarrierArriveOptions {
  /** `.expect_tx`: this many more bytes must arrive (by `cpAsyncBulk`) before the phase completes. */
  readonly expectTx?: Operand<'u32'>;
  /** Where to put the barrier's state before the arrival; discarded (`_`) when omitted. */
  readonly state?: R64;
}

/**
 * The sm_90 asynchronous pipeline: `mbarrier` objects in shared memory
 * (8 bytes, 8-byte aligned) whose phases complete when the expected threads
 * have arrived and the expected bytes have landed, and the bulk copies
 * (`cp.async.bulk`) that report their bytes to one. A stage of a pipeline is
 * a buffer and its mbarrier; a consumer waits for the phase's parity.
 */
export abstract class PipelineInstructions extends WarpgroupInstructions {
  /** `mbarrier.init.shared::cta.b64 [bar], count`: a barrier expecting `count` arrivals a phase. */
  mbarrierInit(bar: AddressLike, count: Operand<'u32'>): void {
    const call = 'mbarrierInit';
    this.check.require(call, 'mbarrier', MBARRIER);
    if (typeof count === 'number') this.check.count(call, 'count', count, 1, 2 ** 20 - 1);
    this.emit(
      `mbarrier.init.shared::cta.b64 ${this.check.address(call, 'bar', bar, 'shared')}, ${this.check.src(call, 'count', count, 'u32')}`,
    );
  }

  /**
   * `mbarrier.arrive{.expect_tx}.shared::cta.b64 state, [bar]{, tx}`: this
   * thread's arrival, announcing `expectTx` bytes still to come.
   */
  mbarrierArrive(bar: AddressLike, opts: MbarrierArriveOptions = {}): void {
    const call = 'mbarrierArrive';
    const tx = opts.expectTx;
    this.check.require(
      call,
      tx === undefined ? 'mbarrier.arrive' : 'mbarrier.arrive.expect_tx',
      tx === undefined ? MBARRIER : MBARRIER_TX,
    );
    if (typeof tx === 'number') this.check.count(call, 'opts.expectTx', tx, 0, 2 ** 20 - 1);
    const state = opts.state === undefined ? '_' : this.check.reg(call, 'opts.state', opts.state, 'b64');
    const address = this.check.address(call, 'bar', bar, 'shared');
    this.emit(
      tx === undefined
        ? `mbarrier.arrive.shared::cta.b64 ${state}, ${address}`
        : `mbarrier.arrive.expect_tx.shared::cta.b64 ${state}, ${address}, ${this.check.src(call, 'opts.expectTx', tx, 'u32')}`,
    );
  }

  /**
   * `mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity`: `p` is
   * whether the phase of parity `parity` (0 for the first) has completed.
   * The thread may be suspended a while; loop until it has (`mbarrierWait`).
   */
  mbarrierTryWait(p: Pred, bar: AddressLike, parity: Operand<'u32'>): Pred {
    const call = 'mbarrierTryWait';
    this.check.require(call, 'mbarrier.try_wait.parity', TRY_WAIT);
    if (typeof parity === 'number') this.check.count(call, 'parity', parity, 0, 1);
    this.emit(
      `mbarrier.try_wait.parity.shared::cta.b64 ${this.check.reg(call, 'p', p, 'pred')}, ${this.check.address(call, 'bar', bar, 'shared')}, ${this.check.src(call, 'parity', parity, 'u32')}`,
    );
    return p;
  }

  /** Waits until the phase of parity `parity` of `bar` has completed: `mbarrierTryWait` in a loop. */
  mbarrierWait(bar: AddressLike, parity: Operand<'u32'>): void {
    const call = 'mbarrierWait';
    this.structured(call);
    const retry = this.newLabel(`mbarrier${this.state.nextLabelId++}_wait`);
    retry.placed = true;
    this.state.lines.push(`${retry.name}:`);
    const done = this.mbarrierTryWait(this.reg('pred'), bar, parity);
    this.predBra(call, done, retry, true);
  }

  /**
   * `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], bytes, [bar]`:
   * copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from
   * global to shared memory and reports them to `bar`'s transaction count.
   */
  cpAsyncBulk(dst: AddressLike, src: AddressLike, bytes: Operand<'u32'>, bar: AddressLike): void {
    const call = 'cpAsyncBulk';
    this.check.require(call, 'cp.async.bulk', MBARRIER_TX);
    if (typeof bytes === 'number') {
      this.check.count(call, 'bytes', bytes, 16);
      if (bytes % 16 !== 0) {
        throw this.check.error(call, 'bulk copies move whole 16-byte units', {
          argument: 'bytes',
          expected: 'a multiple of 16',
          actual: String(bytes),
        });
      }
    }
    this.emit(
      `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes ${this.check.address(call, 'dst', dst, 'shared')}, ${this.check.address(call, 'src', src, 'global')}, ${this.check.src(call, 'bytes', bytes, 'u32')}, ${this.check.address(call, 'bar', bar, 'shared')}`,
    );
  }

  /**
   * `cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst], [map, {c0, …}], [bar]`:
   * copies the box of the tensor map `map` (a generic address, from
   * `tensorMapAddress`) whose first element is at coordinates `coords`
   * (innermost first, in elements) into shared memory at `dst` (128-byte
   * aligned; 1024 for the 128-byte swizzle), laid out and swizzled as the
   * map says. Elements outside the tensor are filled with zeros; the whole
   * box's bytes are reported to `bar`.
   */
  cpAsyncBulkTensor(dst: AddressLike, map: R64, coords: readonly Operand<'s32'>[], bar: AddressLike): void {
    const call = 'cpAsyncBulkTensor';
    this.check.require(call, 'cp.async.bulk.tensor', MBARRIER_TX);
    if (!Array.isArray(coords) || coords.length < 1 || coords.length > 5) {
      throw this.check.error(call, 'a tensor copy takes 1 to 5 coordinates', {
        argument: 'coords',
        expected: '1 .. 5 coordinates, innermost first',
        actual: Array.isArray(coords) ? `${coords.length} coordinates` : String(coords),
      });
    }
    const c = coords.map((x, i) => this.check.src(call, `coords[${i}]`, x, 's32')).join(', ');
    this.emit(
      `cp.async.bulk.tensor.${coords.length}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes ${this.check.address(call, 'dst', dst, 'shared')}, [${this.check.reg(call, 'map', map, 'u64')}, {${c}}], ${this.check.address(call, 'bar', bar, 'shared')}`,
    );
  }

  /**
   * `setmaxnreg.{inc,dec}.sync.aligned.u32 count`: every thread of the
   * warpgroup moves to `count` registers (24 … 256, a multiple of 8), so
   * that producer warpgroups give theirs to the consumers.
   */
  setmaxnreg(action: 'inc' | 'dec', count: number): void {
    const call = 'setmaxnreg';
    this.check.require(call, 'setmaxnreg', { sm: 90, ptx: '8.0' });
    if (this.target !== 'sm_90a') {
      throw this.check.error(call, 'setmaxnreg needs the sm_90a target', {
        expected: '.target sm_90a',
        actual: `.target ${this.target}`,
      });
    }
    this.check.oneOf(call, 'action', action, ['inc', 'dec']);
    this.check.count(call, 'count', count, 24, 256);
    if (count % 8 !== 0) {
      throw this.check.error(call, 'register counts come in multiples of 8', {
        argument: 'count',
        expected: 'a multiple of 8 in 24 .. 256',
        actual: String(count),
      });
    }
    this.emit(`setmaxnreg.${action}.sync.aligned.u32 ${count}`);
  }

  /** `fence.mbarrier_init.release.cluster`: makes initialised mbarriers visible to the async proxy (bulk copies). */
  fenceMbarrierInit(): void {
    this.check.require('fenceMbarrierInit', 'fence.mbarrier_init', MBARRIER_TX);
    this.emit('fence.mbarrier_init.release.cluster');
  }
}
