"""Backward pre- and post-processing kernels (CuTe DSL, framework-free).

Preprocess (one CTA of 256 threads per 64 query rows of one (batch, head)):
  * ``delta[b, h, i] = sum_d dO[b, i, h, d] * O[b, i, h, d]`` in fp32,
  * ``lse2[b, h, i] = LSE * log2(e)``; rows with ``LSE = -inf`` (no visible key) and the padding
    rows past Sq get ``+inf`` so the main kernel's ``exp2(S * scale_log2 - lse2)`` is exactly 0 there
    (never ``exp(-inf + inf) = NaN``),
  * zeroes the fp32 dQ accumulator rows (and the deterministic-mode semaphores),
  * with ``fused_dq`` (``BwdConfig.fused_dq``): ``pending[b, h, blk]`` = the number of key tiles
    whose walk keeps this query tile (``bwd_tiles``, the main kernel's own predicate), one key tile
    per thread per pass, counted with warp ballots; where it is 0 the CTA zeroes the tile's dq rows,
  * with a learnable sink: per-CTA partial of ``dsink[h] = -sum_i exp(sink_h - LSE_i) * delta_i``,
    written to ``dsink_part[b, h, block]`` (reduced in a fixed order by the postprocess, so dsink is
    deterministic without atomics).
  Thread mapping: 4 threads per row (thread ``t`` takes row ``t // 4``); quad lane ``q = t % 4`` loads
  the 16-byte chunks ``q, q + 4, ...`` (8 elements each) of the O and dO rows, all before using any,
  and the quad sums its partial dots with two butterfly shuffles. The CTA's 64 dQ-accumulator rows
  are one contiguous ``64 * D`` fp32 block, zeroed with coalesced 16-byte stores.

Postprocess:
  * ``dq = dq_accum * softmax_scale`` cast to the input dtype: one CTA per 64 rows, whose accumulator
    block is contiguous; thread ``t`` takes the 4-float chunks ``t, t + 256, ...`` of it (16-byte
    loads, all issued before the first store) and writes each as one 8-byte store,
  * GQA: ``dk[b, j, hk] = sum over the group's query heads of dk_part[b, j, h]`` (fp32 partials
    written by the main kernel, head-major so a member's 64-key block is contiguous, added in
    head order, two members loaded at a time) cast to the input dtype; same for dv; the 4-float
    chunk mapping of dq over each 64-key block, the KV heads of a row block launched together,
  * ``dsink[h] = sum_b sum_block dsink_part[b, h, block]`` in a fixed order.

Vector accesses: every base pointer is 16-byte aligned (the host checks it) and D, Dv are multiples
of 32, so every row start is too; ``vector_rows`` states that to the DSL (row axis split as
``(len / vec, vec)`` with static inner strides, dynamic strides assumed multiples of the row length),
which then emits 128-bit LDG/STG.

Shapes (all contiguous): q-like ``[B, Sq, H, D]``; lse / lse2 / delta ``[B, H, Sq]`` and
``[B, H, Sq_pad]`` with ``Sq_pad = ceil(Sq / 64) * 64``; dq_accum fp32 ``[B, H, Sq_pad, D]``;
semaphores int32 ``[B, H, Sq_pad / 64]``; dsink_part fp32 ``[B, H, Sq_pad / 64]``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr
import cuda.bindings.driver as cuda

from . import bwd_tiles

ROWS_PER_CTA = 64  # rows per pre/post CTA; the semaphore/dsink/flag grids assume tile_m == 64
_THREADS = 256
_ROW_THREADS = _THREADS // ROWS_PER_CTA  # preprocess: threads sharing one O/dO row
_VEC_IN = 8  # bf16/fp16 elements per 16-byte access
_VEC_ACC = 4  # fp32 elements per 16-byte access
_LOG2_E = math.log2(math.e)


def rowmajor(ptr: cute.Pointer, shape: tuple, aligned_rows: bool = False) -> cute.Tensor:
    """Compact row-major tensor over ``ptr``; the outermost stride is 64-bit (large batches).

    ``aligned_rows``: every dynamic stride is declared a multiple of the (static) row length, so
    the DSL knows a thread's adjacent elements of a row are aligned together (vector accesses).
    """
    row = shape[-1]
    strides = [1]
    for extent in reversed(shape[1:]):
        step = strides[0] * extent
        if aligned_rows and not isinstance(step, int):
            step = cute.assume(step, divby=row)
        strides.insert(0, step)
    if len(strides) > 1:
        strides[0] = (cute.assume(cutlass.Int64(strides[1]) * shape[1], divby=row) if aligned_rows
                      else cutlass.Int64(strides[0]))
    return cute.make_tensor(ptr, cute.make_layout(shape, stride=tuple(strides)))


def column_pairs(ptr: cute.Pointer, outer: tuple, row_len, multiple: int) -> cute.Tensor:
    """Row-major fp32 ``outer + (row_len,)`` (``len(outer) >= 1``) viewed as
    ``outer + (row_len // 2, 2)``; the dynamic ``row_len`` (and so every stride) is declared a
    multiple of the even ``multiple``, so with an 8-byte aligned ``ptr`` each
    ``[..., pair, None]`` slice is one aligned 8-byte access: two adjacent columns. The
    outermost stride is 64-bit."""
    row = cute.assume(row_len, divby=multiple)
    strides = [row]
    for extent in reversed(outer[2:]):
        strides.insert(0, cute.assume(strides[0] * extent, divby=multiple))
    if len(outer) > 1:
        strides.insert(0, cute.assume(cutlass.Int64(strides[0]) * outer[1], divby=multiple))
    else:
        strides[0] = cute.assume(cutlass.Int64(row), divby=multiple)
    layout = cute.make_layout(tuple(outer) + (row // 2, 2), stride=tuple(strides) + (2, 1))
    return cute.make_tensor(ptr, layout)


def frag_pair_index(chunk, half: int):
    """``dq_frag``: the column-pair index (column // 2) of values ``2 half``, ``2 half + 1`` of
    a row's 4-float chunk ``chunk`` = 4J + q: columns 16J + 2q (+ 8 for half 1)."""
    return 8 * (chunk // 4) + chunk % 4 + 4 * half


BY_THREAD_WG_THREADS = 128  # a consumer warpgroup's threads: one dq_by_thread block each


def by_thread_chunk_origin(chunk, tile_rows: int, d: int) -> tuple:
    """``dq_by_thread``: where the four floats of a query tile's 16-byte chunk ``chunk`` (of the
    tile's ``tile_rows * d / 4``) belong, as (query row, dQ column) of the first; the others are
    (+1 row), (+8 columns), (+1 row, +8 columns).

    The consumers stage dQ^T (M = d over the two warpgroups, N = the tile's query rows) as
    warpgroup w's block of ``values / 4`` chunk rows k of its 128 threads: chunk
    ``(w * values / 4 + k) * 128 + t`` holds thread t's accumulator values 4k .. 4k + 3, which
    the wgmma C layout puts at (M row 16 (t // 32) + (t % 32) // 4 (+ 8), N column
    8k + 2 (t % 4) (+ 1)). ``chunk`` is an int (tests) or an Int32 (postprocess)."""
    values = tile_rows * (d // 2) // BY_THREAD_WG_THREADS  # fp32 per consumer thread
    per_wg = BY_THREAD_WG_THREADS * (values // 4)
    w = chunk // per_wg
    k = (chunk % per_wg) // BY_THREAD_WG_THREADS
    t = chunk % BY_THREAD_WG_THREADS
    col = w * (d // 2) + 16 * (t // 32) + (t % 32) // 4
    return 8 * k + 2 * (t % 4), col


GATHER_VEC = 4  # by_thread_gather: dQ values per lane's store (8 bytes of bf16 / fp16)


def gather_source_lane(lane, rnd: int):
    """``by_thread_gather``, round ``rnd`` (0..3) of four: the lane whose value lane ``lane``
    receives. In a warp's 32 chunks of a query tile (``by_thread_chunk_origin``) lane L holds
    rows r0 + 2 (L % 4) + {0, 1} at columns c0 + L // 4 + {0, 8} (value v: row + v % 2, column
    + 8 (v // 2)), i.e. 8 rows x 16 columns. Lane L = 4 m + a gathers row r0 + 2a + (m % 2),
    columns c0 + 8 ((m // 2) % 2) + 4 (m // 4) + j for j = 0..3, value j from lane
    4 (4 (m // 4) + j) + a. Each round the four lanes sharing (a, m // 4) read their four
    sources in a rotation (j = rnd + e, e = m % 4), so every lane is read by exactly one lane
    per round::

        lane L = 4m + a      m:  0    1    2    3    4 ...
        row offset 2a +          0    1    0    1    0
        column offset            0    0    8    8    4

    Ints (tests) or Int32 (postprocess)."""
    m, a = lane // 4, lane % 4
    return 4 * (4 * (m // 4) + (rnd + m % 4) % 4) + a


def gather_send_value(lane, rnd: int):
    """``by_thread_gather``: which of its four values (v) lane ``lane`` sends in round ``rnd``:
    the one its reader (``gather_source_lane``) wants, v = e = (j - rnd) mod 4 for the lane's
    column j = (lane // 4) % 4 within its group of four."""
    return ((lane // 4) % 4 - rnd + 4) % 4


def gather_slot(lane, rnd: int):
    """``by_thread_gather``: the column j (0..3) of its gathered four that lane ``lane``
    receives in round ``rnd``."""
    return (rnd + (lane // 4) % 4) % 4


def gather_origin(lane) -> tuple:
    """``by_thread_gather``: (row offset, column offset) of lane ``lane``'s gathered four from
    its own first value's (row, column) in ``by_thread_chunk_origin``'s terms (that value sits
    at row + 2 (lane % 4) ... of the warp's block, so the row offset is the lane's m % 2)."""
    m = lane // 4
    return m % 2, 8 * ((m // 2) % 2) + 4 * (m // 4) - m


def vector_rows(ptr: cute.Pointer, outer: tuple, row_len: int, vec: int) -> cute.Tensor:
    """Row-major ``outer + (row_len,)`` tensor viewed as ``outer + (row_len // vec, vec)``.

    ``row_len`` and ``vec`` are static and every dynamic stride is declared a multiple of
    ``row_len``, so with a 16-byte aligned ``ptr`` the DSL knows each ``[..., chunk, None]`` slice is
    ``vec`` elements aligned and moves it as one vector. The outermost stride is 64-bit.
    """
    strides = []
    step = row_len
    for extent in reversed(outer[1:]):
        strides.insert(0, cute.assume(step, divby=row_len) if not isinstance(step, int) else step)
        step = step * extent
    outermost = cutlass.Int64(row_len)
    for extent in outer[1:]:
        outermost = outermost * extent
    strides.insert(0, cute.assume(outermost, divby=row_len))
    return cute.make_tensor(ptr, cute.make_layout(tuple(outer) + (row_len // vec, vec),
                                                  stride=tuple(strides) + (vec, 1)))


def head_major(ptr: cute.Pointer, b, rows, heads, row_len: int, vec: int = 0) -> cute.Tensor:
    """fp32 GQA partials stored head-major, ``[B, heads, rows, row_len]`` in memory, indexed as
    ``(b, row, head, ...)`` like the row-major outputs they are summed into. A (b, head)'s key
    tile is then one contiguous block: the main kernel writes it whole, and the postprocess
    reads a group member's 64-row block as one contiguous run. Every dynamic stride is declared
    a multiple of ``row_len`` (vector accesses); ``vec`` > 0 views each row as
    ``(row_len // vec, vec)`` chunks (``vector_rows``' convention), else as ``row_len``."""
    head_stride = cute.assume(rows * row_len, divby=row_len)
    batch_stride = cute.assume(cutlass.Int64(heads) * rows * row_len, divby=row_len)
    if vec:
        return cute.make_tensor(ptr, cute.make_layout(
            (b, rows, heads, row_len // vec, vec),
            stride=(batch_stride, row_len, head_stride, vec, 1)))
    return cute.make_tensor(ptr, cute.make_layout((b, rows, heads, row_len),
                                                  stride=(batch_stride, row_len, head_stride, 1)))


def tile_starting_in_block(blk, grid_rows: int) -> tuple:
    """(tile, whether it starts here): the first ``grid_rows``-row tile at or after 64-row block
    ``blk``'s first row, and whether that tile's first row lies inside the block (for
    ``grid_rows`` >= 64 at most one tile does). The preprocess zeroes each deterministic-mode
    semaphore from the block where its tile starts, so every tile is zeroed exactly once.
    ``blk`` is an int (tests) or an Int32 (kernel)."""
    tile = (blk * ROWS_PER_CTA + grid_rows - 1) // grid_rows
    return tile, tile * grid_rows < (blk + 1) * ROWS_PER_CTA


def row_padding(tile_m: int) -> int:
    """The multiple the fp32 per-query-row buffers (``lse2``, ``delta``, ``dq_accum``) are padded
    to: whole main-kernel query tiles and whole 64-row pre/post blocks alike (64 at tile_m 64,
    320 at tile_m 80)."""
    return math.lcm(ROWS_PER_CTA, tile_m)


def padded_rows(seqlen_q: int, tile_m: int) -> int:
    """Rows per (batch, head) of those buffers for ``seqlen_q`` query rows (host side)."""
    pad = row_padding(tile_m)
    return -(-seqlen_q // pad) * pad


def padded_blocks(sq, row_pad: int):
    """64-row pre/post blocks per (batch, head) of the buffers padded to ``row_pad`` rows (DSL)."""
    return cute.ceil_div(sq, row_pad) * (row_pad // ROWS_PER_CTA)


def _pairwise_sum(terms: list):
    """Tree sum (trace-time Python): a dependency chain of log2(n) adds instead of n."""
    while len(terms) > 1:
        terms = [terms[e] + terms[e + 1] for e in range(0, len(terms), 2)]
    return terms[0]


def _dsl_dtype(name: str):
    table = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}
    if name not in table:
        raise ValueError(f"dtype: expected one of {sorted(table)}, found {name!r}")
    return table[name]


@dataclass(frozen=True)
class PrePostConfig:
    """Compile-time parameters of the pre/post kernels (hashable cache key)."""

    dtype: str  # "bfloat16" | "float16"
    head_dim: int
    head_dim_v: int
    gqa: bool  # dk/dv arrive as fp32 per-query-head partials that must be summed per group
    has_sink: bool
    deterministic: bool
    dq_chains: int = 1  # dQ accumulators per head (BwdConfig.dq_chains): rows h * chains + c
    # BwdConfig.fused_dq: the preprocess counts each query tile's visiting key tiles (with the
    # main kernel's mask form and key tile) and writes dq zeros where there are none; the
    # postprocess leaves dq to the main kernel.
    fused_dq: bool = False
    # BwdConfig.dq_first_store: the preprocess zeroes the per-query-tile flags instead of the
    # fp32 accumulator (the main kernel's first writer of a tile stores, the others add); the
    # postprocess writes dq zeros for tiles nobody wrote (flag 0). Deterministic: no flags; the
    # postprocess reads each chain's semaphore (0: that chain's rows were never written).
    first_store: bool = False
    # BwdConfig.dq_swizzle: dq_accum rows hold their 16-byte chunks XOR-swizzled by row
    # (chunk ^= row % 8); the postprocess undoes it.
    dq_swizzle: bool = False
    # BwdConfig.dq_per_wg: each query tile's dq_accum block is two swizzled blocks of D/2 columns
    # (dq_stage_layout), one per consumer warpgroup; the postprocess reads it that way.
    dq_per_wg: bool = False
    # BwdConfig.dq_frag: within each swizzled row, column 16J + 8h + 2q + e sits at 16J + 4q +
    # 2h + e (dq_stage_layout's frag form), so a 4-float chunk 4J + q holds the column pairs
    # 16J + 2q and 16J + 8 + 2q; the postprocess writes each pair on its own.
    dq_frag: bool = False
    # BwdConfig.dq_by_thread: the main kernel's query tiles of this many rows (0: off) staged dQ^T
    # in thread order (by_thread_chunk_origin); the postprocess scatters each chunk's four values
    dq_by_thread_rows: int = 0
    # BwdConfig.post_gather: with dq_by_thread_rows, each warp gathers every row's four adjacent
    # columns into one lane by shuffles (gather_source_lane) and stores them as one 8-byte vector
    by_thread_gather: bool = False
    causal: bool = False
    num_columns: Optional[int] = None
    tile_n: int = 0
    # BwdConfig.dkv_red: dk/dv arrive as the GQA groups' fp32 sums [B, Sk, Hk, D], which the
    # postprocess converts (the partials' kernel with one member per group)
    dkv_sums: bool = False
    # BwdConfig.dkv_bulk: the sums are head-major with rows padded to whole key tiles of tile_n
    # ([B, Hk, Sk_pad, D]), each row's 16-byte chunks swizzled by row (chunk ^= row % 8, the
    # main kernel's dq_stage_layout); the postprocess undoes it
    dkv_tiles: bool = False
    # row_padding(tile_m) of the main kernel: the buffers' rows per (batch, head) are a multiple
    # of it; the preprocess covers every padding row (LSE +inf, delta 0, dq_accum zeroed), since
    # an 80-row query tile reads past the last 64-row block
    row_pad: int = ROWS_PER_CTA
    # the main kernel's query-tile height, which the deterministic mode's semaphores
    # ([B, H * chains, Sq_pad / grid_rows]) are counted in; the preprocess zeroes each from the
    # 64-row block holding the tile's first row
    grid_rows: int = ROWS_PER_CTA

    def __post_init__(self):
        if self.by_thread_gather and not self.dq_by_thread_rows:
            raise ValueError("by_thread_gather: expected dq_by_thread_rows > 0, found 0")
        if self.row_pad % ROWS_PER_CTA or self.row_pad % self.grid_rows:
            raise ValueError(f"row_pad: expected a multiple of {ROWS_PER_CTA} and of grid_rows="
                             f"{self.grid_rows}, found {self.row_pad}")
        # the other per-query-tile grids (pending counts, sink partials) are read per 64-row
        # block, which only matches the main kernel's tiles at row_pad 64; first-store flags
        # (and the deterministic semaphores) are per main-kernel query tile of flag_rows
        tile_flags = (self.first_store and row_padding(self.flag_rows) == self.row_pad
                      and (self.dq_by_thread_rows or self.grid_rows in (ROWS_PER_CTA, 128)))
        if self.row_pad != ROWS_PER_CTA and ((self.first_store and not tile_flags)
                                              or self.fused_dq or self.has_sink):
            raise ValueError(f"row_pad={self.row_pad}: expected first_store, fused_dq and "
                             f"has_sink all False, found {self.first_store}, {self.fused_dq}, "
                             f"{self.has_sink}")

    @property
    def flag_rows(self) -> int:
        """Query rows per first-store flag (or deterministic semaphore): the main kernel's
        tile, ``dq_by_thread_rows`` or ``grid_rows``."""
        return self.dq_by_thread_rows or self.grid_rows

    @property
    def has_post(self) -> bool:
        """Whether the postprocess has anything to do (dq, GQA dk/dv partials or sums, dsink)."""
        return not self.fused_dq or self.gqa or self.dkv_sums or self.has_sink


def flag_tiles(cfg: PrePostConfig, sq):
    """``first_store``'s flags per (batch, head): one per main-kernel query tile
    (``PrePostConfig.flag_rows``). The deterministic mode's are its semaphores, counted over the
    padded rows as the main kernel and the preprocess view them (80-row tiles: 4 per 320 rows)."""
    if const_expr(cfg.deterministic):
        return padded_blocks(sq, cfg.row_pad) * ROWS_PER_CTA // cfg.flag_rows
    return cute.ceil_div(sq, cfg.flag_rows)


class _Preprocess:
    def __init__(self, cfg: PrePostConfig):
        self.cfg = cfg

    @cute.jit
    def __call__(self, o_ptr: cute.Pointer, do_ptr: cute.Pointer, lse_ptr: cute.Pointer,
                 lse2_ptr: cute.Pointer, delta_ptr: cute.Pointer, dqacc_ptr: cute.Pointer,
                 sink_ptr: Optional[cute.Pointer], dsink_part_ptr: Optional[cute.Pointer],
                 sem_ptr: Optional[cute.Pointer], pending_ptr: Optional[cute.Pointer],
                 dq_ptr: Optional[cute.Pointer], smin_ptr: Optional[cute.Pointer],
                 smax_ptr: Optional[cute.Pointer], b: Int32, sq: Int32, h: Int32, sk: Int32,
                 hm: Int32, stream):
        # every 64-row block of the padded rows (row_pad > 64: more than Sq needs)
        n_blk = padded_blocks(sq, self.cfg.row_pad)
        sqp = n_blk * ROWS_PER_CTA
        mO = vector_rows(o_ptr, (b, sq, h), self.cfg.head_dim_v, _VEC_IN)
        mdO = vector_rows(do_ptr, (b, sq, h), self.cfg.head_dim_v, _VEC_IN)
        mLSE = rowmajor(lse_ptr, (b, h, sq))
        mLSE2 = rowmajor(lse2_ptr, (b, h, sqp))
        mDelta = rowmajor(delta_ptr, (b, h, sqp))
        # one CTA's 64 accumulator rows are contiguous: viewed as one flat block of 4-float chunks
        chains = self.cfg.dq_chains
        mdQacc = vector_rows(dqacc_ptr, (b, h * chains, n_blk), ROWS_PER_CTA * self.cfg.head_dim,
                             _VEC_ACC)
        mSink = mDsinkPart = mSem = None
        if const_expr(self.cfg.has_sink):
            mSink = rowmajor(sink_ptr, (h,))
            mDsinkPart = rowmajor(dsink_part_ptr, (b, h, n_blk))
        if const_expr(self.cfg.deterministic):  # per main-kernel query tile
            mSem = rowmajor(sem_ptr, (b, h * chains, sqp // self.cfg.grid_rows))
        visits = None
        if const_expr(self.cfg.first_store and not self.cfg.deterministic):
            # per-query-tile flags, in place of the pending counts
            visits = SimpleNamespace(mFlags=rowmajor(pending_ptr,
                                                     (b, h, flag_tiles(self.cfg, sq))))
        if const_expr(self.cfg.fused_dq):
            mSumMin = mSumMax = None
            if const_expr(self.cfg.num_columns is not None):
                nt = cute.ceil_div(sk, self.cfg.tile_n)
                mSumMin = rowmajor(smin_ptr, (b, hm, nt, self.cfg.num_columns))
                mSumMax = rowmajor(smax_ptr, (b, hm, nt, self.cfg.num_columns))
            visits = SimpleNamespace(mPending=rowmajor(pending_ptr, (b, h, n_blk)),
                                     mdQ=vector_rows(dq_ptr, (b, sq, h), self.cfg.head_dim,
                                                     _VEC_ACC),
                                     mSumMin=mSumMin, mSumMax=mSumMax, sk=sk, hm=hm)
        self.kernel(mO, mdO, mLSE, mLSE2, mDelta, mdQacc, mSink, mDsinkPart, mSem, visits).launch(
            grid=[n_blk, h, b], block=[_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mO: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor, mLSE2: cute.Tensor,
               mDelta: cute.Tensor, mdQacc: cute.Tensor, mSink: Optional[cute.Tensor],
               mDsinkPart: Optional[cute.Tensor], mSem: Optional[cute.Tensor], visits):
        tidx, _, _ = cute.arch.thread_idx()
        blk, h, b = cute.arch.block_idx()
        warp = tidx // 32
        lane = tidx % 32
        sq = mO.shape[1]
        dv = self.cfg.head_dim_v
        d = self.cfg.head_dim
        n_warps = _THREADS // 32
        row = blk * ROWS_PER_CTA + tidx // _ROW_THREADS
        quad_lane = tidx % _ROW_THREADS

        smem = cutlass.utils.SmemAllocator()
        s_part = smem.allocate_tensor(Float32, cute.make_layout(n_warps), 16)
        s_count = None  # fused_dq: per-warp visitor counts
        if const_expr(self.cfg.fused_dq):
            s_count = smem.allocate_tensor(Int32, cute.make_layout(n_warps), 16)

        chains = self.cfg.dq_chains
        if const_expr(self.cfg.first_store):
            # the accumulator block is left as it is: its first writer stores, not adds
            if const_expr(not self.cfg.deterministic):  # (deterministic: the semaphores below)
                mFlags = visits.mFlags  # a local: no subscript store through a namespace in an if
                if tidx == 0:
                    if blk < mFlags.shape[2]:  # (dq_by_thread: fewer, taller tiles)
                        mFlags[b, h, blk] = Int32(0)
        else:
            # zero this CTA's dQ-accumulator block (padding rows included): 16-byte stores
            zeros = cute.full(_VEC_ACC, 0.0, Float32)
            for c in cutlass.range_constexpr(chains):
                for k in cutlass.range_constexpr(ROWS_PER_CTA * d // _VEC_ACC // _THREADS):
                    mdQacc[b, h * chains + c, blk, tidx + k * _THREADS, None].store(zeros)

        acc = Float32(0.0)
        lse = Float32(0.0)
        lse2 = Float32.inf  # padding rows: exp2(S - inf) = 0 in the main kernel
        if row < sq:
            # every load of this thread (LSE, its O and dO chunks) is issued before the first use
            lse = mLSE[b, h, row]
            o_vals, do_vals = [], []
            for k in cutlass.range_constexpr(dv // _VEC_IN // _ROW_THREADS):
                o_vals.append(mO[b, row, h, quad_lane + k * _ROW_THREADS, None].load())
                do_vals.append(mdO[b, row, h, quad_lane + k * _ROW_THREADS, None].load())
            if lse != -Float32.inf:
                lse2 = lse * Float32(_LOG2_E)
            part = o_vals[0].to(Float32) * do_vals[0].to(Float32)
            for k in cutlass.range_constexpr(1, len(o_vals)):
                part = part + o_vals[k].to(Float32) * do_vals[k].to(Float32)
            acc = _pairwise_sum([part[e] for e in range(_VEC_IN)])
        # all lanes take part in the shuffles (padding rows contribute 0)
        acc = cute.arch.warp_reduction_sum(acc, threads_in_group=_ROW_THREADS)

        sink_part = Float32(0.0)
        if const_expr(self.cfg.has_sink):
            if row < sq and quad_lane == 0:
                # exp(sink - LSE) is the sink's share of the softmax; LSE >= sink is finite.
                sink_part = -cute.math.exp2((mSink[h] - lse) * Float32(_LOG2_E)) * acc
        if quad_lane == 0:  # delta stays 0 on padding rows
            mDelta[b, h, row] = acc
            mLSE2[b, h, row] = lse2

        if const_expr(self.cfg.deterministic):
            if const_expr(self.cfg.grid_rows == ROWS_PER_CTA):
                if tidx < chains:
                    mSem[b, h * chains + tidx, blk] = Int32(0)
            else:  # the tile whose first row lies in this block, if any
                tile, starts_here = tile_starting_in_block(blk, self.cfg.grid_rows)
                if tidx < chains and starts_here:
                    mSem[b, h * chains + tidx, tile] = Int32(0)
        if const_expr(self.cfg.has_sink):
            sink_part = cute.arch.warp_reduction_sum(sink_part)
            if lane == 0:
                s_part[warp] = sink_part
            cute.arch.barrier()
            if tidx == 0:
                total = Float32(0.0)
                for w in cutlass.range_constexpr(n_warps):
                    total += s_part[w]
                mDsinkPart[b, h, blk] = total
        if const_expr(self.cfg.fused_dq):
            self._count_visits(visits, s_count, b, h, blk, sq, warp, lane, tidx)

    @cute.jit
    def _count_visits(self, visits, s_count, b, h, blk, sq, warp, lane, tidx):
        """``fused_dq``: how many key tiles will add to this query tile's dQ (the main kernel's
        walk predicate, one key tile per thread per pass), into ``pending[b, h, blk]``; a tile
        nobody visits gets its dq rows zeroed here, as nobody else writes them."""
        cfg = self.cfg
        # locals: a subscript store through the namespace inside a dynamic ``if`` would make the
        # DSL carry the namespace out of it (docs/kernels_bwd.md, session 6)
        sk, mPending, mdQ = visits.sk, visits.mPending, visits.mdQ
        n_warps = _THREADS // 32
        hm = bwd_tiles.mask_head(h, mdQ.shape[2], visits.hm, cfg.num_columns)
        diag = sk - sq
        count = Int32(0)  # the same in every lane: the warp's visitors so far
        num_n = cute.ceil_div(sk, cfg.tile_n)
        for base in cutlass.range(0, num_n, _THREADS, unroll=1):
            n = base + tidx
            visit = n < num_n
            if n < num_n:
                bmax, bmin = bwd_tiles.tile_bands(cfg.num_columns, cfg.causal, visits.mSumMin,
                                                  visits.mSumMax, b, hm, n, sq)
                skip = bwd_tiles.query_tile_skipped(blk, ROWS_PER_CTA, n * cfg.tile_n, bmax, bmin,
                                                    sq, cfg.causal, diag)
                visit = visit & (skip == False)  # noqa: E712  (DSL boolean)
            count += cute.arch.popc(cute.arch.vote_ballot_sync(visit))
        if lane == 0:
            s_count[warp] = count
        cute.arch.barrier()
        total = Int32(0)
        for w in cutlass.range_constexpr(n_warps):
            total += s_count[w]
        if tidx == 0:
            mPending[b, h, blk] = total
        if total == 0:
            chunks_per_row = cfg.head_dim // _VEC_ACC
            zeros = cute.full(_VEC_ACC, 0.0, Float32)
            for k in cutlass.range_constexpr(ROWS_PER_CTA * chunks_per_row // _THREADS):
                chunk = tidx + k * _THREADS
                i = blk * ROWS_PER_CTA + chunk // chunks_per_row
                if i < sq:
                    mdQ[b, i, h, chunk % chunks_per_row, None].store(zeros.to(mdQ.element_type))


class _Postprocess:
    def __init__(self, cfg: PrePostConfig):
        self.cfg = cfg

    @cute.jit
    def __call__(self, dqacc_ptr: cute.Pointer, dq_ptr: cute.Pointer,
                 dk_part_ptr: Optional[cute.Pointer], dv_part_ptr: Optional[cute.Pointer],
                 dk_ptr: Optional[cute.Pointer], dv_ptr: Optional[cute.Pointer],
                 dsink_part_ptr: Optional[cute.Pointer], dsink_ptr: Optional[cute.Pointer],
                 b: Int32, sq: Int32, sk: Int32, h: Int32, hk: Int32, softmax_scale: Float32,
                 stream, flags_ptr: Optional[cute.Pointer] = None):
        d, dv = self.cfg.head_dim, self.cfg.head_dim_v
        n_blk = cute.ceil_div(sq, ROWS_PER_CTA)
        # the accumulator's blocks per (batch, head): its rows are padded to row_pad
        n_blk_pad = padded_blocks(sq, self.cfg.row_pad)
        mdQacc = vector_rows(dqacc_ptr, (b, h * self.cfg.dq_chains, n_blk_pad), ROWS_PER_CTA * d,
                             _VEC_ACC)
        if const_expr(self.cfg.dq_by_thread_rows):  # every block of every query tile
            rows = self.cfg.dq_by_thread_rows
            n_blk = cute.ceil_div(cute.ceil_div(sq, rows) * rows, ROWS_PER_CTA)
        if const_expr(not self.cfg.fused_dq):  # else the main kernel wrote dq
            # (dq_frag: dq as column pairs, one 4-byte store each; dq_by_thread: single values)
            vec = _VEC_ACC
            if const_expr(self.cfg.dq_frag):
                vec = 2
            if const_expr(self.cfg.dq_by_thread_rows):
                vec = GATHER_VEC if const_expr(self.cfg.by_thread_gather) else 1
            mdQ = vector_rows(dq_ptr, (b, sq, h), d, vec)
            mFlags = None  # first_store: per query tile, or (deterministic) per chain and tile
            if const_expr(self.cfg.first_store):
                mFlags = rowmajor(flags_ptr, (b, h * (self.cfg.dq_chains
                                                      if self.cfg.deterministic else 1),
                                              flag_tiles(self.cfg, mdQ.shape[1])))
            self.dq_kernel(mdQacc, mdQ, softmax_scale, mFlags).launch(
                grid=[n_blk, h, b], block=[_THREADS, 1, 1], stream=stream)
        if const_expr(self.cfg.gqa or self.cfg.dkv_sums):
            # per query head, head-major (the kernel sums each group), or already summed per
            # KV head (dkv_red's row-major sums)
            if const_expr(self.cfg.dkv_tiles):
                skp = cute.ceil_div(sk, self.cfg.tile_n) * self.cfg.tile_n
                mdKpart = head_major(dk_part_ptr, b, skp, hk, d, _VEC_ACC)
                mdVpart = head_major(dv_part_ptr, b, skp, hk, dv, _VEC_ACC)
            elif const_expr(self.cfg.dkv_sums):
                mdKpart = vector_rows(dk_part_ptr, (b, sk, hk), d, _VEC_ACC)
                mdVpart = vector_rows(dv_part_ptr, (b, sk, hk), dv, _VEC_ACC)
            else:
                mdKpart = head_major(dk_part_ptr, b, sk, h, d, _VEC_ACC)
                mdVpart = head_major(dv_part_ptr, b, sk, h, dv, _VEC_ACC)
            mdK = vector_rows(dk_ptr, (b, sk, hk), d, _VEC_ACC)
            mdV = vector_rows(dv_ptr, (b, sk, hk), dv, _VEC_ACC)
            # at least one CTA: Sk = 0 must not launch an empty grid (rows are bounds-checked).
            # KV heads fastest: a row block's CTAs run together, so the dk / dv rows they write
            # ([B, Sk, Hk, D]) go out whole (H200 call 105: with the members loaded in pairs,
            # 362 -> 320 us at GQA 32/8 B=4)
            self.dkv_kernel(mdKpart, mdVpart, mdK, mdV).launch(
                grid=[hk, cutlass.max(cute.ceil_div(sk, ROWS_PER_CTA), 1), b],
                block=[_THREADS, 1, 1],
                stream=stream)
        if const_expr(self.cfg.has_sink):
            mDsinkPart = rowmajor(dsink_part_ptr, (b, h, n_blk))
            mDsink = rowmajor(dsink_ptr, (h,))
            self.dsink_kernel(mDsinkPart, mDsink).launch(grid=[h, 1, 1], block=[32, 1, 1],
                                                         stream=stream)

    @cute.kernel
    def dq_kernel(self, mdQacc: cute.Tensor, mdQ: cute.Tensor, softmax_scale: Float32,
                  mFlags: Optional[cute.Tensor]):
        tidx, _, _ = cute.arch.thread_idx()
        blk, h, b = cute.arch.block_idx()
        sq = mdQ.shape[1]
        d = self.cfg.head_dim
        row0 = blk * ROWS_PER_CTA
        chunks_per_row = d // _VEC_ACC  # static: the row/column split below is shifts or mul-hi
        n_chunks = ROWS_PER_CTA * chunks_per_row // _THREADS
        # the padded block is allocated, so every load is in bounds; issue all before any store
        chains = self.cfg.dq_chains
        vals = []
        for k in cutlass.range_constexpr(n_chunks):
            vals.append(mdQacc[b, h * chains, blk, tidx + k * _THREADS, None].load())
        written = Int32(1)
        # this block's first-store flag / semaphore: per main-kernel tile of flag_rows, a
        # multiple of 64 here (by-thread tiles read theirs per chunk in _store_by_thread)
        flag_blk = blk
        if const_expr(not self.cfg.dq_by_thread_rows and self.cfg.flag_rows != ROWS_PER_CTA):
            flag_blk = blk // (self.cfg.flag_rows // ROWS_PER_CTA)
        chain_vals = None  # dq_by_thread's deterministic first store: each chain's, per chunk
        if const_expr(self.cfg.first_store and self.cfg.deterministic
                      and self.cfg.dq_by_thread_rows):
            # a 64-row block spans two main-kernel tiles: each chunk's tile semaphores decide
            chain_vals = [vals] + [
                [mdQacc[b, h * chains + c, blk, tidx + k * _THREADS, None].load()
                 for k in range(n_chunks)] for c in range(1, chains)]
        elif const_expr(self.cfg.first_store and self.cfg.deterministic and chains > 1):
            # the block's semaphore per chain decides (_written_chains_sum)
            flags = [mFlags[b, h * chains + c, flag_blk] for c in range(chains)]
            written = flags[0]
            for c in cutlass.range_constexpr(1, chains):
                written = written | flags[c]
            for k in cutlass.range_constexpr(n_chunks):
                parts = [vals[k]] + [mdQacc[b, h * chains + c, blk, tidx + k * _THREADS,
                                            None].load() for c in range(1, chains)]
                vals[k] = self._written_chains_sum(parts, flags)
        else:
            for c in cutlass.range_constexpr(1, chains):  # the other chains, in a fixed order
                for k in cutlass.range_constexpr(n_chunks):
                    vals[k] = vals[k] + mdQacc[b, h * chains + c, blk, tidx + k * _THREADS,
                                               None].load()
        if const_expr(self.cfg.first_store and (chains == 1 or not self.cfg.deterministic)
                      and not self.cfg.dq_by_thread_rows):
            # flag 0: no key tile wrote this block (every row fully masked), so its accumulator
            # was never initialised and dq is zero (dq_by_thread: per chunk, its tile's flag)
            written = mFlags[b, h, flag_blk]
        if const_expr(self.cfg.dq_by_thread_rows):
            self._store_by_thread(mdQ, b, h, blk, tidx, vals, written, softmax_scale, mFlags,
                                  chain_vals)
        else:
            for k in cutlass.range_constexpr(n_chunks):
                chunk = tidx + k * _THREADS
                i = row0 + chunk // chunks_per_row
                col = chunk % chunks_per_row
                if const_expr(self.cfg.dq_per_wg):  # block w: columns [w * D/2, (w + 1) * D/2)
                    block_chunks = chunks_per_row // 2
                    within = chunk % (ROWS_PER_CTA * block_chunks)
                    r = within // block_chunks
                    i = row0 + r
                    col = ((chunk // (ROWS_PER_CTA * block_chunks)) * block_chunks
                           + ((within % block_chunks) ^ (r % 8)))
                elif const_expr(self.cfg.dq_swizzle):  # the chunk's place in the row (involution)
                    col = col ^ ((chunk // chunks_per_row) % 8)
                if const_expr(self.cfg.dq_frag):
                    if i < sq:
                        self._store_frag_chunk(mdQ, b, i, h, col, vals[k], written,
                                               softmax_scale)
                elif i < sq:
                    if written != 0:
                        mdQ[b, i, h, col, None].store(
                            (vals[k] * softmax_scale).to(mdQ.element_type))
                    else:  # (a constant made outside the branch: emitted at its first use)
                        mdQ[b, i, h, col, None].store(
                            cute.full(_VEC_ACC, 0.0, mdQ.element_type))

    @staticmethod
    def _written_chains_sum(parts: list, flags: list):
        """The deterministic first store's dQ chunk: the sum of the chains' ``parts`` whose
        semaphore in ``flags`` is set (a chain nobody added to holds garbage: it counts as
        zeros), in chain order, as the zero-initialised accumulators would add up."""
        zeros = cute.full(_VEC_ACC, 0.0, Float32)
        total = cute.where(cute.full(_VEC_ACC, flags[0], Int32) != 0, parts[0], zeros)
        for part, flag in zip(parts[1:], flags[1:]):
            total = total + cute.where(cute.full(_VEC_ACC, flag, Int32) != 0, part, zeros)
        return total

    @cute.jit
    def _store_by_thread(self, mdQ, b, h, blk, tidx, vals, written, softmax_scale, mFlags,
                         chain_vals=None):
        """``dq_by_thread``: this thread's chunks of 64-row block ``blk`` of the accumulator,
        each scattered to its four (row, column) places (``by_thread_chunk_origin``; the chunk
        index counted from the query tile holding it); with ``first_store`` zeros where that
        tile's flag says nobody wrote it, or (deterministic, ``chain_vals``: each chain's
        chunks) the sum of the chains whose semaphore for that tile is set, in chain order."""
        d, rows = self.cfg.head_dim, self.cfg.dq_by_thread_rows
        sq = mdQ.shape[1]
        tile_chunks = rows * d // _VEC_ACC
        n_chunks = ROWS_PER_CTA * (d // _VEC_ACC) // _THREADS
        for k in cutlass.range_constexpr(n_chunks):
            flat = blk * (ROWS_PER_CTA * d // _VEC_ACC) + tidx + k * _THREADS
            tile = flat // tile_chunks
            q0, col = by_thread_chunk_origin(flat % tile_chunks, rows, d)
            i0 = tile * rows + q0
            scaled = cute.make_rmem_tensor(cute.make_layout(_VEC_ACC), Float32)
            if const_expr(chain_vals is not None):
                chains = self.cfg.dq_chains
                flags = [mFlags[b, h * chains + c, tile] for c in range(chains)]
                total = self._written_chains_sum([part[k] for part in chain_vals], flags)
                scaled.store(total * softmax_scale)  # (a tile nobody wrote sums to zeros)
            else:
                scaled.store(vals[k] * softmax_scale)
                if const_expr(self.cfg.first_store):
                    written = Int32(0)
                    if tile < mFlags.shape[2]:  # (rows padded past the last tile: never stored)
                        written = mFlags[b, h, tile]
                if written == 0:
                    scaled.fill(0.0)
            if const_expr(self.cfg.by_thread_gather):
                self._gather_store(mdQ, b, h, i0, col, scaled)
            else:
                for v in cutlass.range_constexpr(_VEC_ACC):  # (e, row half) = (v % 2, v // 2)
                    i = i0 + v % 2
                    if i < sq:
                        one = cute.make_rmem_tensor(cute.make_layout(1), mdQ.element_type)
                        one[0] = scaled[v].to(mdQ.element_type)
                        mdQ[b, i, h, col + 8 * (v // 2), None].store(one.load())

    @cute.jit
    def _gather_store(self, mdQ, b, h, i0, col, scaled):
        """``by_thread_gather``: the warp's 32 chunks (8 rows x 16 columns) regrouped by four
        index shuffles so that each lane holds four adjacent columns of one row
        (``gather_source_lane``), then one 8-byte store per lane (``GATHER_VEC``)."""
        lane = cute.arch.lane_idx()
        gathered = cute.make_rmem_tensor(cute.make_layout(GATHER_VEC), Float32)
        for rnd in cutlass.range_constexpr(4):
            send_v = gather_send_value(lane, rnd)
            send = scaled[0]
            for v in cutlass.range_constexpr(1, 4):  # (selects: no local-memory indexing)
                if send_v == v:
                    send = scaled[v]
            got = cute.arch.shuffle_sync(send, gather_source_lane(lane, rnd))
            slot = gather_slot(lane, rnd)
            for j in cutlass.range_constexpr(4):
                if slot == j:
                    gathered[j] = got
        row_off, col_off = gather_origin(lane)
        i = i0 + row_off
        if i < mdQ.shape[1]:
            mdQ[b, i, h, (col + col_off) // GATHER_VEC, None].store(
                gathered.load().to(mdQ.element_type))

    @cute.jit
    def _store_frag_chunk(self, mdQ, b, i, h, chunk, vals, written, softmax_scale):
        """``dq_frag``: the 4-float chunk ``chunk`` (4J + q) of row ``i`` holds columns 16J + 2q,
        + 1 (values 0, 1) and 16J + 8 + 2q, + 1 (values 2, 3): two pair stores of ``mdQ``'s
        column-pair view (zeros where no key tile wrote the block)."""
        scaled = cute.make_rmem_tensor(cute.make_layout(_VEC_ACC), Float32)
        scaled.store(vals * softmax_scale)
        if written == 0:
            scaled.fill(0.0)
        for half in cutlass.range_constexpr(2):
            pair = cute.make_rmem_tensor(cute.make_layout(2), mdQ.element_type)
            pair[0] = scaled[2 * half].to(mdQ.element_type)
            pair[1] = scaled[2 * half + 1].to(mdQ.element_type)
            mdQ[b, i, h, frag_pair_index(chunk, half), None].store(pair.load())

    @cute.kernel
    def dkv_kernel(self, mdKpart: cute.Tensor, mdVpart: cute.Tensor, mdK: cute.Tensor,
                   mdV: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        hk, blk, b = cute.arch.block_idx()
        sk = mdK.shape[1]
        group = mdKpart.shape[2] // mdK.shape[2]
        row0 = blk * ROWS_PER_CTA
        for which in cutlass.range_constexpr(2):
            src = mdKpart if const_expr(which == 0) else mdVpart
            dst = mdK if const_expr(which == 0) else mdV
            d = self.cfg.head_dim if const_expr(which == 0) else self.cfg.head_dim_v
            chunks_per_row = d // _VEC_ACC
            n_chunks = ROWS_PER_CTA * chunks_per_row // _THREADS
            # thread t sums the 4-float chunks t, t + 256, ... of the 64-row block: one 16-byte
            # load per chunk and group member, the chunks' loads independent of each other.
            # Members go in pairs, both members' loads issued before either is added (twice the
            # bytes in flight per thread); the additions keep the member order: deterministic
            acc = cute.make_rmem_tensor((n_chunks, _VEC_ACC), Float32)
            acc.fill(0.0)
            for pair in cutlass.range(group // 2, unroll=1):
                first = self._member_chunks(src, b, hk * group + 2 * pair, row0, tidx, sk,
                                            chunks_per_row, n_chunks)
                second = self._member_chunks(src, b, hk * group + 2 * pair + 1, row0, tidx, sk,
                                             chunks_per_row, n_chunks)
                for k in cutlass.range_constexpr(n_chunks):
                    acc[k, None].store(acc[k, None].load() + first[k, None].load())
                for k in cutlass.range_constexpr(n_chunks):
                    acc[k, None].store(acc[k, None].load() + second[k, None].load())
            if group % 2 == 1:  # an odd group's last member
                last = self._member_chunks(src, b, hk * group + group - 1, row0, tidx, sk,
                                           chunks_per_row, n_chunks)
                for k in cutlass.range_constexpr(n_chunks):
                    acc[k, None].store(acc[k, None].load() + last[k, None].load())
            for k in cutlass.range_constexpr(n_chunks):
                chunk = tidx + k * _THREADS
                j = row0 + chunk // chunks_per_row
                if j < sk:
                    dst[b, j, hk, chunk % chunks_per_row, None].store(
                        acc[k, None].load().to(dst.element_type))

    @cute.jit
    def _member_chunks(self, src, b, head, row0, tidx, sk, chunks_per_row: cutlass.Constexpr[int],
                       n_chunks: cutlass.Constexpr[int]):
        """This thread's 4-float chunks of one group member's partial rows (zeros past Sk: the
        partials have exactly Sk rows), loaded into registers; ``dkv_tiles``: each from its
        swizzled place in the row."""
        vals = cute.make_rmem_tensor((n_chunks, _VEC_ACC), Float32)
        vals.fill(0.0)
        for k in cutlass.range_constexpr(n_chunks):
            chunk = tidx + k * _THREADS
            j = row0 + chunk // chunks_per_row
            col = chunk % chunks_per_row
            if const_expr(self.cfg.dkv_tiles):  # tiles start at multiples of 8 rows
                col = col ^ (j % 8)
            if j < sk:
                vals[k, None].store(src[b, j, head, col, None].load())
        return vals

    @cute.kernel
    def dsink_kernel(self, mDsinkPart: cute.Tensor, mDsink: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        h, _, _ = cute.arch.block_idx()
        nb = mDsinkPart.shape[0]
        nblk = mDsinkPart.shape[2]
        if tidx == 0:
            acc = Float32(0.0)
            for bb in cutlass.range(nb, unroll=1):
                for k in cutlass.range(nblk, unroll=1):
                    acc += mDsinkPart[bb, h, k]
            mDsink[h] = acc


def _placeholder(dtype, align: int) -> cute.Pointer:
    return cute.runtime.make_ptr(dtype, 1 << 12, cute.AddressSpace.gmem, assumed_align=align)


def compile_preprocess(cfg: PrePostConfig):
    """Compiled callable ``(o, do, lse, lse2, delta, dq_accum, sink|None, dsink_part|None,
    sem|None, pending|flags|None, dq|None, summary_min|None, summary_max|None, B, Sq, H, Sk, Hm,
    stream)`` over raw device pointers (``cute.runtime.make_ptr``)."""
    dt = _dsl_dtype(cfg.dtype)
    f32 = lambda: _placeholder(Float32, 16)  # noqa: E731
    fused = cfg.fused_dq
    summary = fused and cfg.num_columns is not None
    args = [_placeholder(dt, 16), _placeholder(dt, 16), f32(), f32(), f32(), f32(),
            f32() if cfg.has_sink else None, f32() if cfg.has_sink else None,
            _placeholder(Int32, 4) if cfg.deterministic else None,
            # pending counts, or the first store's flags (the deterministic mode has none)
            _placeholder(Int32, 4) if fused or (cfg.first_store and not cfg.deterministic)
            else None,
            _placeholder(dt, 16) if fused else None,
            _placeholder(Int32, 4) if summary else None, _placeholder(Int32, 4) if summary else None,
            Int32(1), Int32(64), Int32(1), Int32(64), Int32(1), cuda.CUstream(0)]
    return cute.compile(_Preprocess(cfg), *args)


def compile_postprocess(cfg: PrePostConfig):
    """Compiled callable ``(dq_accum, dq, dk_part|None, dv_part|None, dk|None, dv|None,
    dsink_part|None, dsink|None, B, Sq, Sk, H, Hk, softmax_scale, stream, flags|None)`` over raw
    pointers."""
    dt = _dsl_dtype(cfg.dtype)
    f32 = lambda: _placeholder(Float32, 16)  # noqa: E731
    g = cfg.gqa or cfg.dkv_sums  # fp32 dk/dv in (partials or group sums), dk/dv out
    args = [f32(), _placeholder(dt, 16), f32() if g else None, f32() if g else None,
            _placeholder(dt, 16) if g else None, _placeholder(dt, 16) if g else None,
            f32() if cfg.has_sink else None, f32() if cfg.has_sink else None,
            Int32(1), Int32(64), Int32(64), Int32(1), Int32(1), Float32(1.0), cuda.CUstream(0),
            _placeholder(Int32, 4) if cfg.first_store else None]
    return cute.compile(_Postprocess(cfg), *args)
