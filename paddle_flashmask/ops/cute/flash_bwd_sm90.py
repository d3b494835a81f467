"""SM90 FlashMask backward (CuTe DSL): TMA + wgmma, warp-specialised, KV-tile-major.

One CTA owns one key tile ``[n0, n0 + tile_n)`` of one (batch, query head) and walks the query tiles
of 64 rows. Warp group 0 is the producer (one warp issues TMA loads of K, V once and of Q, dO per
visited query tile through a 2-stage mbarrier pipeline); warp groups 1 and 2 are consumers that run
the five GEMMs on wgmma with operands in shared memory:

    S^T  = K  Q^T      dP^T = V  dO^T          (keys on the M side: "swapped" S/dP)
    P^T  = exp2(S^T * scale*log2e - lse2)      dS^T = P^T * (dP^T - delta)
    dV  += P^T dO      dK  += dS^T Q           dQ   = dS K   (fp32, added to a global accumulator)

Masking (DESIGN §3/§4): the kernel reads the per-key-tile summary (``semantics.tile_summary`` layout,
int32 ``[B, Hm, ceil(Sk/tile_n), C]`` min / max) once per CTA and asks ``semantics.tile_fully_masked``
whether a query tile is skipped (never loaded, never computed) and ``semantics.tile_needs_mask``
whether the element rule is needed; only then ``semantics.element_masked`` runs per element on the
column values of the thread's own key rows (held in registers: each thread owns the same two keys
for the whole CTA). No ``[S/tile, S/tile]`` table exists anywhere.

dQ: the consumers stage each dQ tile (fp32) in padded shared memory and hand it, through two named
barriers, to a dQ-writer warp of the producer warp group, which adds it to
``dq_accum [B, H * dq_chains, Sq_pad, D]`` with ``cp.reduce.async.bulk.add.f32`` (one bulk op per row). D = 256
fits the staging buffer only with one Q/dO stage (the default there, ``qdo_stages``); with two the
consumers instead issue fp32 ``red.global.add`` from registers (about half the speed on the H200).

Deterministic mode: per ``(b, h, m_tile)`` int32 semaphore. The adds to a query tile go in
decreasing key-tile order (under causal-like masks a higher key tile starts lower in its walk and
reaches the query tile first, so that is the arrival order). The semaphore holds ``num_n - n`` of the
last adder (0 = none); key tile n first finds the next visitor nxt > n (the lowest n' > n that
``tile_fully_masked`` does not skip: one warp tests 32 candidates per ballot), waits for
``num_n - nxt`` (or 0), adds, then stores ``num_n - n``. The order is fixed, so reruns are
bit-identical; CTAs that skip a tile never touch its semaphore (no chain through skipped tiles), and
the waiting happens in the dQ-writer warp, off the consumers' critical path.

Persistent grid (``BwdConfig.persistent_ctas``, the default, H200-validated):
one CTA per SM; the producer claims each next (key tile, head, batch) from a counter and publishes it in a
shared-memory slot with the tile's K/V stage; consumers and the dQ writer read it there, the
consumers release K/V before the dK/dV epilogue so the next tile's K/V load runs under it. In
deterministic mode the list gives each (b, head)'s key tiles last first and is claimed once, in
order: a key tile waits only for higher key tiles of its head, claimed before it, so the lowest
claimed unfinished tile never waits (without the persistent grid, the launch order gives the same
guarantee: blocks are dispatched last key tile first).

dK/dV: accumulated in registers over the whole walk, scaled, then written once: directly in the input
dtype when H == Hk, else as fp32 per-query-head partials ``[B, Sk, H, D]`` that the postprocess
reduces over the GQA group (fixed order).

Modules: ``BwdConfig`` lives in ``bwd_config``, the dQ writer warp in ``bwd_dq_writer``, the dK/dV
epilogue in ``bwd_dkv_store`` (both mixins of ``FlashMaskBwdSm90``), barrier ids and layout helpers
in ``bwd_layout``, the host rules in ``bwd_rules``; this module keeps the kernel's producer,
consumers and walk, and the host wrapper.
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Optional

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, Uint32, const_expr
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.experimental import primitives as prims
import cuda.bindings.driver as cuda

from paddle_flashmask import semantics

from . import bwd_claim_list as claims
from . import bwd_tiles
from . import mask as fm_mask
from .flash_bwd_prepost import (ROWS_PER_CTA, _dsl_dtype, column_pairs, head_major, padded_rows,
                                row_padding, rowmajor, vector_rows)
from . import tile_scheduler as sched
from .launch_args import (check_variant_call, float32_arg, gmem_ptr, int32_arg,
                          launch)
# the host rules: the kernel uses DET_SYNC_MODES, TILE_M_CHOICES and default_tile_n; the other
# public names are re-exported for the tests, which read them here beside BwdConfig
from .bwd_rules import (  # noqa: F401
    backward_work_items, CLAIM_LIST_ENV,
    CLAIM_PASSES_ENV, D256_STAGES_ENV, default_claim_list, default_claim_passes,
    default_class_chains, default_class_ratio, default_det_first_store, default_det_sync,
    default_dk_after_dv, default_dk_early, default_dkv_bulk, default_dkv_chain,
    default_dkv_last, default_dkv_red, default_dq_chains, default_dq_count_lag,
    default_dq_early, default_dq_first_store, default_dq_per_wg, default_dq_swizzle,
    default_dq_uniform_rows, default_dv_early, default_fused_dq, default_gqa_in_cta,
    default_key_major, default_late_loads, default_lazy_release, default_mask_bits,
    default_pds_stages, default_persistent_ctas, default_prefetch_stats, default_qdo_stages,
    default_row_ranges, default_rs_dkv, default_stage_stats, default_tile_m, default_tile_n,
    default_vector_dkv, default_walk_interleave, DET_CHAINS_ENV, DET_CLASS_CHAINS_ENV,
    DET_CLASS_RATIO_ENV, DET_DKV_CHAIN_ENV, DET_DKV_LAST_ENV, DET_FIRST_STORE_ENV,
    DET_PERSISTENT_ENV, DET_SYNC_ENV, DET_SYNC_MODES, DET_WALK_INTERLEAVE_ENV, DK_AFTER_DV_ENV,
    DK_EARLY_ENV, DQ_COUNT_LAG_ENV, DQ_EARLY_ENV, DQ_PER_WG_ENV, DQ_SWIZZLE_ENV,
    DQ_UNIFORM_ROWS_ENV, DV_EARLY_ENV, ENV_SWITCHES, FIRST_STORE_ENV, FUSED_DQ_ENV,
    GQA_IN_CTA_ENV, KEY_MAJOR_ENV, LATE_LOADS_ENV, LAZY_RELEASE_ENV, MASK_BITS_ENV,
    PDS_STAGES_ENV, PERSISTENT_ENV, PREFETCH_STATS_ENV, ROW_RANGES_ENV, RS_DKV_ENV,
    STAGE_STATS_ENV, TALL_TWO_PDS_ENV, TILE_M_CHOICES, TILE_M_ENV, VECTOR_DKV_ENV,
    tall_tile_head_dim, with_tile_m, with_two_pds_stages)

from .bwd_config import BwdConfig
from .bwd_dkv_store import BwdDkvStore
from .bwd_dq_writer import BwdDqWriter
from .bwd_layout import (  # noqa: F401  (the tests read _DQ_PAD_TRANSPOSED and dq_stage_layout here)
    _BAR_DQ, _BAR_DQ_EMPTY, _BAR_DQ_FULL, _BAR_DQ_WG_STEP, _BAR_PDS_FREE, _BAR_PDS_READY,
    _CONV_QUEUE, _CONV_VEC, _DQ_PAD_TRANSPOSED, _DQ_SYNC_THREADS, _DQ_WG_SYNC_THREADS,
    _acc_mn, _acc_to_operand_a, _smem_layout, _transposed, dq_by_thread_view, dq_frag_order,
    dq_stage_layout, stat_holder_lane, stat_lane_word, stat_pair_step,
    stat_words)

_LOG2_E = math.log2(math.e)


# --------------------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------------------

class FlashMaskBwdSm90(BwdDqWriter, BwdDkvStore):
    def __init__(self, cfg: BwdConfig):
        self.cfg = cfg
        self.dtype = _dsl_dtype(cfg.dtype)
        self.tile_m = cfg.tile_m
        self.tile_n = cfg.tile_n
        self.d = cfg.head_dim
        self.dv = cfg.head_dim_v
        self.stages = cfg.qdo_stages
        self.num_consumer_threads = 256
        self.num_threads = 384
        # warp-group layouts of the GEMMs (two consumer WGs)
        if self.tile_n == 128:
            self.sdp_atom = (2, 1, 1)  # S^T [128 x 64]: each WG owns 64 keys
            self.dkv_atom = (2, 1, 1)  # dK/dV [128 x D]: each WG owns 64 keys
        else:
            self.sdp_atom = (1, 2, 1)  # S^T [64 x 64]: WGs split the query columns
            self.dkv_atom = (1, 2, 1)  # dK/dV [64 x D]: WGs split the head dim
        # dQ [64 x D]: the WGs split the head dim; transposed, dQ^T [D x tile_m]: each WG owns
        # 64 of the head dim's rows; [128 x D] (D = 64): each WG owns 64 query rows, so its
        # wgmmas are 64 x D (FA4's split) instead of twice 64 x D/2, each re-reading dS
        self.dq_atom = (2, 1, 1) if cfg.tile_m != ROWS_PER_CTA else (1, 2, 1)
        # tile_n = 128: each consumer WG owns the same 64 key rows in S^T/dP^T and in dK/dV, so
        # P^T and dS^T feed the dV/dK wgmma straight from registers (RS); P never touches smem
        self.rs_dkv = cfg.rs_dkv and self.sdp_atom == (2, 1, 1) and self.dkv_atom == (2, 1, 1)
        if cfg.pds_stages == 2 and not self.rs_dkv:  # BwdConfig's check should have caught it
            raise ValueError(f"pds_stages=2 needs P^T from registers, which {cfg} does not have")
        # dQ via padded fp32 smem + bulk reduce-add when it fits next to the operand tiles,
        # else fp32 red.global.add from registers (D = 256 with two Q/dO stages)
        self.dq_bulk = cfg.dq_in_smem
        self.sdq_elems = self.tile_m * cfg.dq_row_elems if self.dq_bulk else 4
        # the staged dQ tile's hand-off units, each with its empty / full barrier pair and bulk
        # op group: the whole tile (both consumer WGs and the writer), or (dq_per_wg) one block
        # per consumer WG (its 128 threads and the writer)
        self.dq_blocks = 2 if cfg.dq_per_wg else 1
        self.dq_sync_threads = _DQ_WG_SYNC_THREADS if cfg.dq_per_wg else _DQ_SYNC_THREADS
        self.conv_rows = cfg.conv_rows if cfg.fused_dq else 0
        # late_loads applies to multi-column masks outside deterministic mode (there it spilled more)
        self.late_loads = (cfg.late_loads and cfg.num_columns is not None and cfg.num_columns >= 2
                           and not cfg.deterministic)
        # delta read after the exp and the mask instead of before (late_loads; and 80-row
        # tiles, whose 20 query columns per thread of LSE and delta held across the exp spill:
        # d128 full 36 B, documents 120 B, compile_check)
        self.late_delta = self.late_loads or cfg.tile_m != ROWS_PER_CTA
        # shuffled stats on 80-row tiles with the key's columns read late (documents): delta's
        # lane share is loaded after the mask too, not beside LSE's before the exp
        self.late_shfl_delta = (cfg.shfl_stats and self.late_loads
                                and cfg.tile_m % ROWS_PER_CTA != 0)

    # ---- host side -------------------------------------------------------------------------------
    def _mmas(self):
        K, MN = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
        dt = self.dtype
        mk = sm90_utils.make_trivial_tiled_mma
        sdp = mk(dt, dt, K, K, Float32, self.sdp_atom,
                 (64, self.tile_m // self.sdp_atom[1]))
        src = warpgroup.OperandSource.RMEM if self.rs_dkv else warpgroup.OperandSource.SMEM
        dk = mk(dt, dt, K, MN, Float32, self.dkv_atom, (64, self.d // self.dkv_atom[1]), src)
        dv = mk(dt, dt, K, MN, Float32, self.dkv_atom, (64, self.dv // self.dkv_atom[1]), src)
        # dQ = dS K (A = dS, B = K^T), or transposed dQ^T = K^T dS^T (A = K^T, B = dS): both
        # operands MN-major either way
        dq_n = self.tile_m if self.cfg.dq_transposed else self.d // self.dq_atom[1]
        # (ds_query_major: dS is stored [queries x keys], so its operand is K-major)
        ds_major = K if self.cfg.ds_query_major else MN
        a_major, b_major = (MN, ds_major) if self.cfg.dq_transposed else (ds_major, MN)
        dq = mk(dt, dt, a_major, b_major, Float32, self.dq_atom, (64, dq_n))
        return sdp, dk, dv, dq

    def _layouts(self):
        dt, tm, tn = self.dtype, self.tile_m, self.tile_n
        kv_split = self.dkv_atom[1]
        self.sQ_layout = _smem_layout(dt, tm, self.d, self.d // kv_split, self.stages)
        self.sdO_layout = _smem_layout(dt, tm, self.dv, self.dv // kv_split, self.stages)
        self.sK_layout = _smem_layout(dt, tn, self.d, self.d // self.dq_atom[1])
        self.sV_layout = _smem_layout(dt, tn, self.dv, self.dv)
        self.sP_layout = _smem_layout(dt, tn, tm, tm)
        # pds_stages == 2: a stage mode, indexed by the query tile's Q/dO stage
        ds_stages = 2 if self.cfg.pds_stages == 2 else None
        if self.cfg.ds_query_major:  # [queries x keys]: 128-byte swizzle at any tile_m
            self.sdS_layout = _smem_layout(dt, tm, tn, tn // 2, ds_stages)
        else:
            self.sdS_layout = _smem_layout(dt, tn, tm, tm, ds_stages)

    @cute.jit
    def __call__(self, q_ptr: cute.Pointer, k_ptr: cute.Pointer, v_ptr: cute.Pointer,
                 do_ptr: cute.Pointer, lse2_ptr: cute.Pointer, delta_ptr: cute.Pointer,
                 dqacc_ptr: cute.Pointer, dk_ptr: cute.Pointer, dv_ptr: cute.Pointer,
                 smin_ptr: Optional[cute.Pointer], smax_ptr: Optional[cute.Pointer],
                 idx_ptr: Optional[cute.Pointer], sem_ptr: Optional[cute.Pointer],
                 b: Int32, sq: Int32, sk: Int32, h: Int32, hk: Int32, hm: Int32,
                 softmax_scale: Float32, stream, counter_ptr: Optional[cute.Pointer] = None,
                 pending_ptr: Optional[cute.Pointer] = None, dq_ptr: Optional[cute.Pointer] = None,
                 class_ptr: Optional[cute.Pointer] = None,
                 dkacc_ptr: Optional[cute.Pointer] = None,
                 dvacc_ptr: Optional[cute.Pointer] = None,
                 dkv_flag_ptr: Optional[cute.Pointer] = None,
                 order_ptr: Optional[cute.Pointer] = None):
        d, dv, tm, tn = self.d, self.dv, self.tile_m, self.tile_n
        pad = row_padding(tm)  # rows padded to whole query tiles and 64-row pre/post blocks
        sqp = cute.ceil_div(sq, pad) * pad
        mQ = rowmajor(q_ptr, (b, sq, h, d))
        mK = rowmajor(k_ptr, (b, sk, hk, d))
        mV = rowmajor(v_ptr, (b, sk, hk, dv))
        mdO = rowmajor(do_ptr, (b, sq, h, dv))
        # rows padded to the query tile, viewed as column pairs: a consumer thread's two adjacent
        # query columns load as one 8-byte access
        mLSE2 = column_pairs(lse2_ptr, (b, h), sqp, tm)
        mDelta = column_pairs(delta_ptr, (b, h), sqp, tm)
        chains = self.cfg.dq_chains  # head h's chain c accumulates at row h * chains + c
        mdQacc = rowmajor(dqacc_ptr, (b, h * chains, sqp, d))
        # vector_dkv: strides declared row multiples, so a thread's two adjacent columns of a row
        # (one predicate) go out as one vector store instead of two 2-byte stores
        if const_expr(self.cfg.dkv_partials):  # fp32 per query head, head-major (head_major)
            mdK = head_major(dk_ptr, b, sk, h, d)
            mdV = head_major(dv_ptr, b, sk, h, dv)
        else:
            mdK = rowmajor(dk_ptr, (b, sk, hk, d), aligned_rows=self.cfg.vector_dkv)
            mdV = rowmajor(dv_ptr, (b, sk, hk, dv), aligned_rows=self.cfg.vector_dkv)
        mSumMin = mSumMax = mIdx = mSem = None
        if const_expr(self.cfg.num_columns is not None):
            C = self.cfg.num_columns
            nt = cute.ceil_div(sk, tn)
            mSumMin = rowmajor(smin_ptr, (b, hm, nt, C))
            mSumMax = rowmajor(smax_ptr, (b, hm, nt, C))
            mIdx = rowmajor(idx_ptr, (b, hm, sk, C))
        if const_expr(self.cfg.deterministic):
            mSem = rowmajor(sem_ptr, (b, h * chains, sqp // tm))
        mClass = None  # class_chains: each (b, query head, key tile)'s work class + 1 (0: unknown)
        if const_expr(self.cfg.class_chains):
            mClass = rowmajor(class_ptr, (b, h, cute.ceil_div(sk, tn)))
        # dkv_chain: the group's running fp32 dK/dV sums, and per (b, KV head, key tile) how many
        # of the group's query heads have added theirs; dkv_last: the per-query-head partials
        # and how many heads have stored theirs
        mdKacc = mdVacc = mDkvFlags = None
        if const_expr(self.cfg.dkv_group_sum):
            sum_heads = h if const_expr(self.cfg.dkv_last) else hk
            if const_expr(self.cfg.dkv_bulk):  # head-major, rows padded to whole key tiles
                skp = cute.ceil_div(sk, tn) * tn
                mdKacc = rowmajor(dkacc_ptr, (b, hk, skp, d))
                mdVacc = rowmajor(dvacc_ptr, (b, hk, skp, dv))
            else:
                mdKacc = rowmajor(dkacc_ptr, (b, sk, sum_heads, d))
                mdVacc = rowmajor(dvacc_ptr, (b, sk, sum_heads, dv))
            mDkvFlags = rowmajor(dkv_flag_ptr, (b, hk, cute.ceil_div(sk, tn)))
        mCounter = None  # next (key tile, head, batch) of the persistent grid
        if const_expr(self.cfg.persistent):
            mCounter = rowmajor(counter_ptr, (1,))
        mOrder = None  # claim_list: the class-sorted tile list (bwd_claim_list entries)
        if const_expr(self.cfg.claim_list):
            mOrder = cute.make_tensor(order_ptr,
                                      cute.make_layout((self.list_length(sk, h, hk, b),)))
        # fused_dq: adds still to come per query tile, and dq itself; dq_first_store: the
        # per-query-tile flags (bit 0: claimed by its first writer, bit 1: its rows are stored)
        mPending = mdQout = None
        if const_expr(self.cfg.fused_dq or self.cfg.first_store_flags):
            mPending = rowmajor(pending_ptr, (b, h, sqp // tm))
        if const_expr(self.cfg.fused_dq):
            mdQout = vector_rows(dq_ptr, (b, sq, h), d, _CONV_VEC)
        self._layouts()
        tiled_sdp, tiled_dk, tiled_dv, tiled_dq = self._mmas()
        # [B, S, H, D] -> (S, D, H, B) views for TMA
        qv = [cute.make_tensor(t.iterator, cute.select(t.layout, mode=[1, 3, 2, 0]))
              for t in (mQ, mK, mV, mdO)]
        tma_q, tQ = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), qv[0],
                                                cute.slice_(self.sQ_layout, (None, None, 0)),
                                                (self.tile_m, self.d))
        tma_k, tK = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), qv[1],
                                                self.sK_layout, (self.tile_n, self.d))
        tma_v, tV = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), qv[2],
                                                self.sV_layout, (self.tile_n, self.dv))
        tma_do, tdO = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), qv[3],
                                                  cute.slice_(self.sdO_layout, (None, None, 0)),
                                                  (self.tile_m, self.dv))
        el = self.dtype.width // 8
        # stage_stats: a stage's barrier also counts its tile's LSE (Q) / delta (dO) bytes
        self.stats_bytes = self.tile_m * 4 if self.cfg.stage_stats else 0
        self.q_bytes = self.tile_m * self.d * el + self.stats_bytes
        self.do_bytes = self.tile_m * self.dv * el + self.stats_bytes
        self.kv_bytes = self.tile_n * (self.d + self.dv) * el

        if const_expr(self.cfg.dkv_bulk):
            # the staging region is sP, sdS and sdQ back to back (Storage's order): sP and sdS
            # end on their successors' alignment, and together they hold a dK / dV tile
            p_bytes = cute.cosize(self.sP_layout) * el
            ds_bytes = cute.cosize(self.sdS_layout) * el
            if const_expr(p_bytes % 1024 or ds_bytes % 128
                          or p_bytes + ds_bytes + self.sdq_elems * 4 < self.cfg.dkv_tile_bytes):
                raise ValueError(f"dkv_bulk: the staging region sP ({p_bytes} B) + sdS "
                                 f"({ds_bytes} B) + sdQ ({self.sdq_elems * 4} B) must be "
                                 f"contiguous and hold {self.cfg.dkv_tile_bytes} B")

        @cute.struct
        class Storage:
            mbar_q: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            mbar_do: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            mbar_kv: cute.struct.MemRange[cutlass.Int64, 2]
            sQ: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(self.sQ_layout)], 1024]
            sdO: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(self.sdO_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(self.sK_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(self.sV_layout)], 1024]
            sP: cute.struct.Align[cute.struct.MemRange[
                self.dtype, cute.cosize(self.sP_layout) if self.cfg.p_in_smem else 0], 1024]
            sdS: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(self.sdS_layout)], 1024]
            sdQ: cute.struct.Align[cute.struct.MemRange[Float32, self.sdq_elems], 128]
            tile_slot: cute.struct.MemRange[Int32, 1 if self.cfg.persistent else 0]
            # dkv_last: the key tile's flag value before this CTA counted itself in
            dkv_arrival: cute.struct.MemRange[Int32, 1 if self.cfg.dkv_last else 0]
            # fused_dq: the two conversion buffers' bulk-copy barriers, the writer -> converter
            # queue (full / empty barriers, items, the writer's next index), the buffers
            mbar_conv: cute.struct.MemRange[cutlass.Int64, 2 if self.conv_rows else 0]
            mbar_queue: cute.struct.MemRange[cutlass.Int64, 2 * _CONV_QUEUE if self.conv_rows
                                             else 0]
            conv_slot: cute.struct.MemRange[Int32, _CONV_QUEUE + 1 if self.conv_rows else 0]
            sConv: cute.struct.Align[cute.struct.MemRange[Float32, 2 * self.conv_rows * self.d],
                                     128]
            # stage_stats: LSE then delta, one tile_m run per Q/dO stage each
            sStats: cute.struct.Align[cute.struct.MemRange[
                Float32, 2 * self.stages * self.tile_m if self.stats_bytes else 0], 16]

        self.storage = Storage
        # one CTA per (key tile, query head), or per (key tile, KV head) walking its group
        grid = [cute.ceil_div(sk, self.tile_n), hk if const_expr(self.cfg.gqa_in_cta) else h, b]
        if const_expr(self.cfg.persistent):
            grid = [self.cfg.persistent_ctas, 1, 1]
        scale_log2 = softmax_scale * Float32(_LOG2_E)
        self.kernel(tQ, tK, tV, tdO, tma_q, tma_k, tma_v, tma_do, mLSE2, mDelta, mdQacc, mdK, mdV,
                    mSumMin, mSumMax, mIdx, mSem, tiled_sdp, tiled_dk, tiled_dv, tiled_dq,
                    self.sQ_layout, self.sdO_layout, self.sK_layout, self.sV_layout,
                    self.sP_layout, self.sdS_layout, scale_log2, softmax_scale, mCounter,
                    mPending, mdQout, mClass, mdKacc, mdVacc, mDkvFlags, mOrder).launch(
            grid=grid, block=[self.num_threads, 1, 1], stream=stream, min_blocks_per_mp=1)

    # ---- mask helpers (all rules come from paddle_flashmask.semantics) ---------------------------
    def _tile_bands(self, mSumMin, mSumMax, b, hm, n_blk, seqlen_q):
        """(band_max, band_min) of this CTA's key tile; plain attention uses a band starting at Sq,
        which masks nothing inside the sequence, so the same predicates apply."""
        return bwd_tiles.tile_bands(self.cfg.num_columns, self.cfg.causal, mSumMin, mSumMax, b,
                                    hm, n_blk, seqlen_q)

    def _tile_heads(self, y, num_h, mK, mIdx):
        """(h, hk, hm, group) of a CTA whose grid y coordinate is ``y``: the first query head it
        walks, its KV head, h's mask head, and how many query heads it walks from h on (one,
        or the KV head's group with ``gqa_in_cta``, where y is the KV head)."""
        h = y
        hk = h // (num_h // mK.shape[2])
        hm = self._mask_head(h, num_h, mIdx)
        group = 1
        if const_expr(self.cfg.gqa_in_cta):
            group = num_h // mK.shape[2]
            hk = h
            h = hk * group
        return h, hk, hm, group

    @cute.jit
    def _load_heads(self, state, grid, h, group, b, n_blk, n0, num_m, diag, bmax, bmin, mQ, mdO,
                    sQ, sdO, tma_q, tma_do, pipe_q, pipe_do):
        """Producer: Q/dO of every visited query tile of the CTA's query head(s)."""
        if const_expr(self.cfg.walk_interleave):  # one walk, the group's heads per query tile
            state = self._load_q_do(state, grid.stats, h, b, n0, num_m, grid.seqlen_q, diag, bmax,
                                    bmin, mQ, mdO, sQ, sdO, tma_q, tma_do, pipe_q, pipe_do, group)
        elif const_expr(self.cfg.gqa_in_cta):
            for j in cutlass.range(group, unroll=1):
                hmj = self._mask_head(h + j, grid.num_h, grid.mIdx)
                bmax, bmin = self._tile_bands(grid.mSumMin, grid.mSumMax, b, hmj, n_blk,
                                              grid.seqlen_q)
                state = self._load_q_do(state, grid.stats, h + j, b, n0, num_m, grid.seqlen_q,
                                        diag, bmax,
                                        bmin, mQ, mdO, sQ, sdO, tma_q, tma_do, pipe_q, pipe_do)
        else:
            state = self._load_q_do(state, grid.stats, h, b, n0, num_m, grid.seqlen_q, diag, bmax,
                                    bmin, mQ,
                                    mdO, sQ, sdO, tma_q, tma_do, pipe_q, pipe_do)
        return state

    @cute.jit
    def _dq_write_heads(self, grid, h, hm, group, b, n_blk, n0, num_m, seqlen_k, diag, bmax, bmin,
                        sdQ, mdQacc, mSem, tidx, p1, p2, p3):
        """dQ writer warp: the dQ tiles of the CTA's query head(s), in the consumers' order;
        ``p1..p3`` (returned advanced): ``fused_dq``'s adds not yet counted down, newest first."""
        if const_expr(self.cfg.walk_interleave):  # one walk, the group's heads per query tile
            p1, p2, p3 = self._dq_writer(grid, sdQ, mdQacc, mSem, grid.mSumMin, grid.mSumMax, b, h,
                                         hm, n_blk, n0, num_m, grid.seqlen_q, seqlen_k, diag, bmax,
                                         bmin, tidx, p1, p2, p3, group)
        elif const_expr(self.cfg.gqa_in_cta):
            for j in cutlass.range(group, unroll=1):
                hmj = self._mask_head(h + j, grid.num_h, grid.mIdx)
                bmax, bmin = self._tile_bands(grid.mSumMin, grid.mSumMax, b, hmj, n_blk,
                                              grid.seqlen_q)
                p1, p2, p3 = self._dq_writer(grid, sdQ, mdQacc, mSem, grid.mSumMin, grid.mSumMax,
                                             b, h + j, hmj, n_blk, n0, num_m, grid.seqlen_q,
                                             seqlen_k, diag, bmax, bmin, tidx, p1, p2, p3)
        else:
            p1, p2, p3 = self._dq_writer(grid, sdQ, mdQacc, mSem, grid.mSumMin, grid.mSumMax, b, h,
                                         hm, n_blk, n0, num_m, grid.seqlen_q, seqlen_k, diag, bmax,
                                         bmin, tidx, p1, p2, p3)
            if const_expr(self.cfg.dkv_bulk):  # the key tile's dK / dV, once the consumers stage
                self._add_dkv(grid, b, h, n_blk, tidx % 32)
        return p1, p2, p3

    # ---- persistent grid (BwdConfig.persistent_ctas) ------------------------------------------
    def _num_y(self, grid):
        """Extent of the tile list's head coordinate: query heads, or KV heads with gqa_in_cta."""
        return self._list_heads(grid.num_h, grid.mK.shape[2])

    def _list_heads(self, num_h, num_hk):
        return num_hk if const_expr(self.cfg.gqa_in_cta) else num_h

    def list_length(self, seqlen_k, num_h, num_hk, batch):
        """Items of the persistent grid's tile list: key tiles x listed heads x batch."""
        return cute.ceil_div(seqlen_k, self.tile_n) * self._list_heads(num_h, num_hk) * batch

    def _tile_of(self, t, grid, seqlen_k):
        """Linear tile index -> (n_blk, grid y, batch), lowest key tile (under causal masks the
        heaviest) first: a head's key tiles consecutive, or with ``key_major`` key tile n of every
        head of a batch, then n + 1; y is the query head (KV head with gqa_in_cta)."""
        num_n = cute.ceil_div(seqlen_k, self.tile_n)
        num_y = self._num_y(grid)
        if const_expr(self.cfg.key_major):
            rest = t // num_y
            n_blk, y, b = rest % num_n, t - rest * num_y, rest // num_n
        else:
            rest = t // num_n
            n_blk, y, b = t - rest * num_n, rest % num_y, rest // num_y
        if const_expr(self.cfg.deterministic):
            # a key tile's dQ adds wait for the higher key tiles of its (b, y): claimed first, so
            # the lowest claimed unfinished tile never waits on an unclaimed one (claims run in
            # list order and each CTA works through its claims in the order it took them)
            n_blk = num_n - 1 - n_blk
        return n_blk, y, b

    def _num_tiles(self, grid, seqlen_k, batch):
        return self.list_length(seqlen_k, grid.num_h, grid.mK.shape[2], batch)

    @cute.jit
    def _produce_tiles(self, grid, num_m, diag, mQ, mK, mV, mdO, sQ, sK, sV, sdO, tma_q, tma_k,
                       tma_v, tma_do, pipe_q, pipe_do, pipe_kv):
        """Producer warp of a persistent CTA: claim a tile, publish it with its K/V stage (the
        slot is written before the arrive that completes the stage with K/V's bytes), then its
        Q/dO; a claim past the end is published as the exit signal. With ``claim_passes`` > 1 the
        claims run that many times over the list and pass p publishes only work class p."""
        lane = cute.arch.lane_idx()
        seqlen_k = mK.shape[0]
        total = self._num_tiles(grid, seqlen_k, mQ.shape[3])
        # claim_list: one pass over the class-sorted list (bwd_claim_list), so nothing to classify
        passes = 1 if const_expr(self.cfg.claim_list) else self.cfg.claim_passes
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        t = sched.claim_work(grid.mCounter, lane)
        while t < total * passes:
            item = t
            if const_expr(self.cfg.claim_list):
                item = claims.entry_item(grid.mOrder[t])
            if const_expr(passes > 1):
                item = t - (t // total) * total
            n_blk, y, b = self._tile_of(item, grid, seqlen_k)
            h, hk, hm, group = self._tile_heads(y, grid.num_h, mK, grid.mIdx)
            n0 = n_blk * self.tile_n
            publish = (item, grid, b, h, hk, hm, group, n_blk, n0, num_m, diag, mQ, mK, mV, mdO,
                       sQ, sK, sV, sdO, tma_q, tma_k, tma_v, tma_do, pipe_q, pipe_do, pipe_kv)
            if const_expr(passes > 1):
                work_class = self._work_class(grid, b, hm, n0, num_m, diag, passes)
                if const_expr(self.cfg.class_chains):
                    # recorded at the first claim, before anything here can block: a dQ writer
                    # may spin on it as soon as the claim counter has passed this tile
                    if t < total:
                        self._record_class(grid.mClass, b, h, n_blk, work_class, lane)
                if work_class == t // total:
                    kv_state, state = self._publish_tile(*publish, kv_state, state)
            else:
                kv_state, state = self._publish_tile(*publish, kv_state, state)
            t = sched.claim_work(grid.mCounter, lane)
        pipe_kv.sync_object_empty.wait(kv_state.index, kv_state.phase)
        s_slot = grid.s_slot
        if lane == 0:
            s_slot[0] = total
        cute.arch.sync_warp()
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(pipe_kv.producer_get_barrier(kv_state))

    @cute.jit
    def _publish_tile(self, item, grid, b, h, hk, hm, group, n_blk, n0, num_m, diag, mQ, mK, mV,
                      mdO, sQ, sK, sV, sdO, tma_q, tma_k, tma_v, tma_do, pipe_q, pipe_do, pipe_kv,
                      kv_state, state):
        """Producer: K/V of tile ``item`` into the K/V stage, the slot written before the arrive
        that completes the stage, then the Q/dO of its query tiles (their bands read while K/V
        fly); returns the advanced K/V and Q/dO pipeline states (assigned by the caller, so a
        branch around the call carries them)."""
        lane = cute.arch.lane_idx()
        s_slot = grid.s_slot  # a local: the DSL carries what a branch writes to
        pipe_kv.sync_object_empty.wait(kv_state.index, kv_state.phase)
        kv_bar = pipe_kv.producer_get_barrier(kv_state)
        with cute.arch.elect_one():
            cute.arch.mbarrier_expect_tx(kv_bar, self.kv_bytes)
        gK = cute.local_tile(mK[None, None, hk, b], (self.tile_n, self.d), (n_blk, 0))
        gV = cute.local_tile(mV[None, None, hk, b], (self.tile_n, self.dv), (n_blk, 0))
        tKs, tKg = cpasync.tma_partition(tma_k, 0, cute.make_layout(1),
                                         cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2))
        tVs, tVg = cpasync.tma_partition(tma_v, 0, cute.make_layout(1),
                                         cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2))
        cute.copy(tma_k, tKg, tKs, tma_bar_ptr=kv_bar)
        cute.copy(tma_v, tVg, tVs, tma_bar_ptr=kv_bar)
        if lane == 0:
            s_slot[0] = item
        cute.arch.sync_warp()
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(kv_bar)
        kv_state.advance()
        bmax, bmin = self._tile_bands(grid.mSumMin, grid.mSumMax, b, hm, n_blk, grid.seqlen_q)
        state = self._load_heads(state, grid, h, group, b, n_blk, n0, num_m, diag, bmax, bmin,
                                 mQ, mdO, sQ, sdO, tma_q, tma_do, pipe_q, pipe_do)
        return kv_state, state

    @cute.jit
    def _work_class(self, grid, b, hm, n0, num_m, diag, passes: cutlass.Constexpr[int]):
        """The claim class of key tile ``n0`` (mask head ``hm``): ``sched.claim_pass`` of the
        query tiles it visits. Called by whole warps."""
        bmax, bmin = self._tile_bands(grid.mSumMin, grid.mSumMax, b, hm, n0 // self.tile_n,
                                      grid.seqlen_q)
        visited = self._visited_count(n0, bmax, bmin, grid.seqlen_q, diag, num_m)
        return sched.claim_pass(visited, num_m, passes, self.cfg.class_ratio)

    @cute.jit
    def _visited_count(self, n0, bmax, bmin, seqlen_q, diag, num_m):
        """How many query tiles ``_skipped`` keeps for this key tile (its claim class's
        measure), 32 per warp ballot; every lane gets the same value. Called by whole warps."""
        visited = Int32(0)
        for chunk in cutlass.range((num_m + 31) // 32, unroll=1):
            keep = self._kept_query_tiles(chunk, n0, bmax, bmin, seqlen_q, diag, num_m)
            visited = visited + Int32(cute.arch.popc(keep))
        return visited

    @cute.jit
    def _next_tile(self, grid, pipe_kv, kv_state):
        """Wait for the next published tile; returns its index (>= total: the end)."""
        pipe_kv.consumer_wait(kv_state)
        return grid.s_slot[0]

    @cute.jit
    def _dq_write_tiles(self, grid, pipe_kv, sdQ, mdQacc, mSem, num_m, seqlen_k, diag, tidx):
        """dQ writer warp of a persistent CTA: read each published tile (and release the slot at
        once: it needs no K/V), then write that tile's dQ as the consumers stage it."""
        total = self._num_tiles(grid, seqlen_k, mdQacc.shape[0])
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        t = self._next_tile(grid, pipe_kv, kv_state)
        # fused_dq: adds issued but not yet counted down (linear (b, h, m) items, newest first);
        # they carry over from one tile to the next, so no tile ends waiting for its last add
        p1 = p2 = p3 = Int32(-1)
        while t < total:
            pipe_kv.consumer_release(kv_state)
            kv_state.advance()
            n_blk, y, b = self._tile_of(t, grid, seqlen_k)
            h, hk, hm, group = self._tile_heads(y, grid.num_h, grid.mK, grid.mIdx)
            bmax, bmin = self._tile_bands(grid.mSumMin, grid.mSumMax, b, hm, n_blk, grid.seqlen_q)
            p1, p2, p3 = self._dq_write_heads(grid, h, hm, group, b, n_blk, n_blk * self.tile_n,
                                              num_m, seqlen_k, diag, bmax, bmin, sdQ, mdQacc,
                                              mSem, tidx, p1, p2, p3)
            t = self._next_tile(grid, pipe_kv, kv_state)
        if const_expr(self.conv_rows):
            lane = cute.arch.lane_idx()
            cute.arch.cp_async_bulk_wait_group(0, read=False)
            for pending in (p3, p2, p1):
                if pending >= 0:
                    self._count_add(grid, pending, lane)
            self._hand_over(grid, Int32(-1), lane)  # the converters exit

    @cute.jit
    def _consume_tiles(self, ops, grid, ctid, num_m, seqlen_k, diag, sdQ, pipe_q, pipe_do,
                       pipe_kv, mLSE2, mDelta, mdQacc, mdK, mdV, mSem, scale_log2, softmax_scale):
        """Consumer warpgroups of a persistent CTA: per published tile, the query tiles of its
        head(s); K/V are released before the dK/dV epilogue, so the next tile's K/V load runs
        under it."""
        total = self._num_tiles(grid, seqlen_k, mdQacc.shape[0])
        acc_dK, acc_dV = ops.acc_dK, ops.acc_dV  # zeroed in the loop: plain locals, not ops.*
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        t = self._next_tile(grid, pipe_kv, kv_state)
        while t < total:
            n_blk, y, b = self._tile_of(t, grid, seqlen_k)
            h, hk, hm, group = self._tile_heads(y, grid.num_h, grid.mK, grid.mIdx)
            n0 = n_blk * self.tile_n
            bmax, bmin = self._tile_bands(grid.mSumMin, grid.mSumMax, b, hm, n_blk, grid.seqlen_q)
            self._load_key_vals(ops.key_vals, ops.tScS, grid.mIdx, b, hm, n0, seqlen_k)
            state = self._consume_heads(state, ops, grid, ctid, b, h, hm, group, n_blk, n0, num_m,
                                        seqlen_k, diag, bmax, bmin, mdQacc[b, h, None, None], sdQ,
                                        pipe_q, pipe_do, mLSE2, mDelta, mdQacc, mSem, scale_log2)
            pipe_kv.consumer_release(kv_state)
            kv_state.advance()
            self._store_dkv(grid, acc_dK, acc_dV, ops.th_dk, ops.th_dv, mdK, mdV, b, h, hk, n_blk,
                            seqlen_k, softmax_scale, ctid)
            acc_dK.fill(0.0)
            acc_dV.fill(0.0)
            t = self._next_tile(grid, pipe_kv, kv_state)

    def _mask_head(self, h, num_h, mIdx):
        """Mask head of query head ``h`` (Hm divides H); ``h`` itself for plain attention."""
        if const_expr(self.cfg.num_columns is None):
            return h
        return bwd_tiles.mask_head(h, num_h, mIdx.shape[1], self.cfg.num_columns)

    @cute.jit
    def _load_key_vals(self, key_vals, tScS, mIdx, b, hm, n0, seqlen_k):
        """The ``C`` column values of each key row this thread holds in S^T (mask head ``hm``);
        with ``late_loads`` the mask reads them per partial tile instead."""
        if const_expr(self.cfg.num_columns is not None and not self.late_loads):
            for r in cutlass.range_constexpr(cute.size(key_vals, mode=[0])):
                key_row = cutlass.min(n0 + tScS[r, 0][0], seqlen_k - 1)
                for c in cutlass.range_constexpr(self.cfg.num_columns):
                    key_vals[r, c] = mIdx[b, hm, key_row, c]

    def _skipped(self, m_blk, n0, bmax, bmin, seqlen_q, diag):
        return bwd_tiles.query_tile_skipped(m_blk, self.tile_m, n0, bmax, bmin, seqlen_q,
                                            self.cfg.causal, diag)

    @cute.jit
    def _m_range(self, n0, bmax, bmin, seqlen_q, diag, num_m):
        """(m_lo, m_hi): the first and one past the last query tile ``_skipped`` keeps for this
        key tile (0, 0 when none), 32 query tiles per warp ballot; every lane gets the same
        values, so every role that calls it walks the same tiles. Called by whole warps."""
        m_lo = Int32(0)
        m_hi = Int32(0)
        for chunk in cutlass.range((num_m + 31) // 32, unroll=1):
            visit = self._kept_query_tiles(chunk, n0, bmax, bmin, seqlen_q, diag, num_m)
            m_lo, m_hi = fm_mask.widen_range(m_lo, m_hi, visit, chunk * 32)
        return m_lo, m_hi

    def _walk_steps(self, m_lo, m_hi, group):
        """The step range of a walk over query tiles ``[m_lo, m_hi)``: one step per tile, or
        (``walk_interleave``) one per tile and head of the group, decoded by ``_step_tile``. The
        producer, the consumers and the dQ writer all walk these steps."""
        if const_expr(self.cfg.walk_interleave):
            return m_lo * group, m_hi * group
        return m_lo, m_hi

    def _step_tile(self, it, group):
        """(query tile, head of the group counted from its first) of walk step ``it``."""
        if const_expr(self.cfg.walk_interleave):
            m_blk = it // group
            return m_blk, it - m_blk * group
        return it, 0

    @cute.jit
    def _kept_query_tiles(self, chunk, n0, bmax, bmin, seqlen_q, diag, num_m):
        """Warp ballot of the query tiles ``chunk * 32 + lane`` that ``_skipped`` keeps for
        this key tile (bit i: tile chunk * 32 + i; tiles past the end are not kept)."""
        m = chunk * 32 + cute.arch.lane_idx()
        skip = self._skipped(cutlass.min(m, num_m - 1), n0, bmax, bmin, seqlen_q, diag)
        skip = skip | (m >= num_m)
        return Uint32(cute.arch.vote_ballot_sync(skip)) ^ Uint32(0xFFFFFFFF)

    @cute.jit
    def _walk(self, n0, bmax, bmin, seqlen_q, diag, num_m):
        """The query-tile loop bounds of every role: [0, num_m), or the key tile's row range."""
        if const_expr(self.cfg.row_ranges):
            return self._m_range(n0, bmax, bmin, seqlen_q, diag, num_m)
        return 0, num_m

    def _column_offsets(self, tiled_sdp, n_cols) -> list:
        """Trace time: each accumulator column's query offset from the thread's first column,
        the same for every thread (checked on several), and the premise of
        ``_load_column_stats``: columns in adjacent pairs from even query columns (wgmma's C
        layout)."""
        offsets = None
        if n_cols % 2:
            raise ValueError(f"accumulator columns per thread: expected an even count, found "
                             f"{n_cols}")
        for t in (0, 1, 2, 3, 5, 38, 127, 255):
            coords = _acc_mn(tiled_sdp.get_slice(t).partition_C(
                cute.make_identity_tensor((self.tile_n, self.tile_m))))
            cols = [coords[0, c][1] for c in range(n_cols)]
            if not all(isinstance(col, int) for col in cols):
                raise ValueError(f"accumulator columns of thread {t}: expected static, found {cols}")
            for j in range(n_cols // 2):
                if cols[2 * j] % 2 or cols[2 * j + 1] != cols[2 * j] + 1:
                    raise ValueError(f"accumulator columns of thread {t}: expected adjacent "
                                     f"pairs from even columns, found {cols}")
            rel = [col - cols[0] for col in cols]
            if offsets is not None and rel != offsets:
                raise ValueError(f"accumulator column offsets of thread {t}: expected {offsets}, "
                                 f"found {rel}")
            offsets = rel
        if self.cfg.mask_bits and not fm_mask.is_pair_column_layout(offsets):
            raise ValueError(f"mask_bits: expected accumulator columns at offsets 0, 1, 8, 9, ...,"
                             f" found {offsets}")
        return offsets

    @cute.jit
    def _column_pairs_into(self, out, tScS, pair_at):
        """``out[c]`` = the per-query statistic (LSE*log2e or delta) of this thread's column
        ``c``. The accumulator gives each thread adjacent column pairs (c = 2j, 2j + 1), so each
        pair is one 8-byte load of ``pair_at(first column of the pair)``."""
        for j in cutlass.range_constexpr(cute.size(out) // 2):
            pair = pair_at(tScS[0, 2 * j][1]).load()
            out[2 * j] = pair[0]
            out[2 * j + 1] = pair[1]

    @cute.jit
    def _load_column_stats(self, out, mPairs, b, h, m0, tScS):
        """The statistic of query tile ``m0`` from global memory (the ``column_pairs`` view)."""
        self._column_pairs_into(out, tScS, lambda col: mPairs[b, h, (m0 + col) // 2, None])

    @cute.jit
    def _fetch_stats(self, out, mPairs, b, h, m0, tScS):
        """Query tile ``m0``'s statistic from global memory into ``out``: this thread's columns,
        or with ``shfl_stats`` this lane's share (lane l: column pairs l, l + 32, ...; 8-byte
        loads, each warp reading the tile's row once)."""
        if const_expr(self.cfg.shfl_stats):
            lane = cute.arch.lane_idx()
            for k in cutlass.range_constexpr(cute.size(out) // 2):
                at = m0 // 2 + lane + stat_pair_step(k)
                if const_expr(self.tile_m % 64 != 0):  # 80 rows: lanes past the tile's last
                    at = cutlass.min(at, m0 // 2 + self.tile_m // 2 - 1)  # pair reread it
                pair = mPairs[b, h, at, None].load()
                out[2 * k] = pair[0]
                out[2 * k + 1] = pair[1]
        else:
            self._load_column_stats(out, mPairs, b, h, m0, tScS)

    @cute.jit
    def _shuffled_stat(self, held, tScS, c):
        """Column ``c``'s statistic from the lane holding it (``shfl_stats``; the mapping:
        ``stat_lane_word``, ``stat_holder_lane``)."""
        return cute.arch.shuffle_sync(held[stat_lane_word(c)], stat_holder_lane(tScS[0, c][1]))

    @cute.jit
    def _copy_stats(self, sStat, mPairs, stage, b, h, m_blk, mbar):
        """Producer (one lane): query tile ``m_blk``'s statistic (tile_m fp32, 256 B at tile_m
        64: aligned, as the buffer's rows are padded to tile_m) into its stage, completing on
        ``mbar`` with the Q or dO tile."""
        with cute.arch.elect_one():
            prims.cp_async_bulk_shared_cluster_global(
                sStat[None, None, stage].iterator,
                mPairs[b, h, m_blk * (self.tile_m // 2), None].iterator, mbar, self.stats_bytes)

    @cute.jit
    def _staged_pair(self, sStat, stage, tScS, j):
        """The staged statistic of this thread's column pair ``j`` (columns 2j, 2j + 1): one
        8-byte LDS, loaded where it is used."""
        return sStat[tScS[0, 2 * j][1] // 2, None, stage].load()

    @cute.jit
    def _read_column_stats(self, out, sStat, stage, tScS):
        """The statistic from its Q/dO stage's shared copy (``stage_stats``): 8-byte LDS."""
        self._column_pairs_into(out, tScS, lambda col: sStat[col // 2, None, stage])

    def _needs_mask(self, m_blk, n0, bmax, bmin, seqlen_q, seqlen_k, diag):
        row_begin = m_blk * self.tile_m
        row_end = cutlass.min(row_begin + self.tile_m, seqlen_q)
        return semantics.tile_needs_mask(row_begin, row_end, n0, n0 + self.tile_n, seqlen_k, bmax,
                                         bmin, self.cfg.causal, diag)

    # ---- device side -----------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mdO: cute.Tensor,
               tma_q: cute.CopyAtom, tma_k: cute.CopyAtom, tma_v: cute.CopyAtom,
               tma_do: cute.CopyAtom, mLSE2: cute.Tensor, mDelta: cute.Tensor,
               mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor,
               mSumMin: Optional[cute.Tensor], mSumMax: Optional[cute.Tensor],
               mIdx: Optional[cute.Tensor], mSem: Optional[cute.Tensor],
               tiled_sdp: cute.TiledMma, tiled_dk: cute.TiledMma, tiled_dv: cute.TiledMma,
               tiled_dq: cute.TiledMma, sQ_layout: cute.ComposedLayout,
               sdO_layout: cute.ComposedLayout, sK_layout: cute.ComposedLayout,
               sV_layout: cute.ComposedLayout, sP_layout: cute.ComposedLayout,
               sdS_layout: cute.ComposedLayout, scale_log2: Float32, softmax_scale: Float32,
               mCounter: Optional[cute.Tensor], mPending: Optional[cute.Tensor],
               mdQout: Optional[cute.Tensor], mClass: Optional[cute.Tensor],
               mdKacc: Optional[cute.Tensor], mdVacc: Optional[cute.Tensor],
               mDkvFlags: Optional[cute.Tensor], mOrder: Optional[cute.Tensor]):
        cfg = self.cfg
        tidx, _, _ = cute.arch.thread_idx()
        bx, h, b = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())

        seqlen_q = mQ.shape[0]
        seqlen_k = mK.shape[0]
        n_blk = bx
        if const_expr(cfg.deterministic):
            # a key tile waits for higher key tiles of its (b, h): launch those first, so a
            # waited-on CTA is always resident or done (blocks are dispatched in linear order)
            n_blk = cute.ceil_div(seqlen_k, self.tile_n) - 1 - bx
        num_h = mQ.shape[2]
        h, hk, hm, group = self._tile_heads(h, num_h, mK, mIdx)
        diag = seqlen_k - seqlen_q
        n0 = n_blk * self.tile_n
        num_m = cute.ceil_div(seqlen_q, self.tile_m)

        if warp_idx == 0:
            for atom in (tma_q, tma_k, tma_v, tma_do):
                cpasync.prefetch_descriptor(atom)

        smem = cutlass.utils.SmemAllocator()
        st = smem.allocate(self.storage)
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                              self.num_consumer_threads // 32)
        pipe_q = pipeline.PipelineTmaAsync.create(
            barrier_storage=st.mbar_q.data_ptr(), num_stages=self.stages, producer_group=producer,
            consumer_group=consumers, tx_count=self.q_bytes, defer_sync=True)
        pipe_do = pipeline.PipelineTmaAsync.create(
            barrier_storage=st.mbar_do.data_ptr(), num_stages=self.stages, producer_group=producer,
            consumer_group=consumers, tx_count=self.do_bytes, defer_sync=True)
        kv_consumers = consumers
        if const_expr(cfg.persistent and self.dq_bulk):
            # the dQ writer warp reads each tile's slot too: the stage is reused only after it did
            kv_consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     self.num_consumer_threads // 32 + 1)
        pipe_kv = pipeline.PipelineTmaAsync.create(
            barrier_storage=st.mbar_kv.data_ptr(), num_stages=1, producer_group=producer,
            consumer_group=kv_consumers, tx_count=self.kv_bytes, defer_sync=True)
        conv_slot = queue = conv_mbar = None  # fused_dq: the dQ writer -> converter warps queue
        if const_expr(self.conv_rows):
            conv_slot = st.conv_slot.get_tensor(cute.make_layout((_CONV_QUEUE + 1,)))
            queue = st.mbar_queue.data_ptr()
            conv_mbar = st.mbar_conv.data_ptr()
            if tidx == 0:
                for i in cutlass.range_constexpr(2):
                    cute.arch.mbarrier_init(conv_mbar + i, 1)
                for i in cutlass.range_constexpr(2 * _CONV_QUEUE):
                    cute.arch.mbarrier_init(queue + i, 1)
            conv_slot[_CONV_QUEUE] = 0  # the writer's queue count (every thread writes 0)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        sQ = st.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sdO = st.sdO.get_tensor(sdO_layout.outer, swizzle=sdO_layout.inner)
        sK = st.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
        sV = st.sV.get_tensor(sV_layout.outer, swizzle=sV_layout.inner)
        sP = None  # P^T from registers only (BwdConfig.p_in_smem)
        if const_expr(cfg.p_in_smem):
            sP = st.sP.get_tensor(sP_layout.outer, swizzle=sP_layout.inner)
        sdS = st.sdS.get_tensor(sdS_layout.outer, swizzle=sdS_layout.inner)
        sdQ = None
        if const_expr(self.dq_bulk):
            sdQ = self._sdq_tensor(st.sdQ.data_ptr())
        s_slot = None  # the persistent grid's current tile, written by the producer
        if const_expr(cfg.persistent):
            s_slot = st.tile_slot.get_tensor(cute.make_layout((1,)))
        s_arrival = None  # dkv_last: one consumer's flag reading, for all of them
        if const_expr(cfg.dkv_last):
            s_arrival = st.dkv_arrival.get_tensor(cute.make_layout((1,)))
        stats = None  # stage_stats: LSE / delta per Q/dO stage, as (pair, 2, stage) fp32 views
        if const_expr(self.stats_bytes):
            pairs = cute.make_layout((self.tile_m // 2, 2, self.stages),
                                     stride=(2, 1, self.tile_m))
            s_lse = cute.make_tensor(st.sStats.data_ptr(), pairs)
            stats = SimpleNamespace(mLSE2=mLSE2, mDelta=mDelta, sLSE=s_lse,
                                    sDelta=cute.make_tensor(s_lse.iterator
                                                            + self.stages * self.tile_m, pairs))
        grid = SimpleNamespace(mCounter=mCounter, s_slot=s_slot, num_h=num_h, mK=mK, mIdx=mIdx,
                               mSumMin=mSumMin, mSumMax=mSumMax, seqlen_q=seqlen_q,
                               mPending=mPending, conv_slot=conv_slot, queue=queue, stats=stats,
                               mClass=mClass, mdKacc=mdKacc, mdVacc=mdVacc,
                               mDkvFlags=mDkvFlags, mOrder=mOrder, s_arrival=s_arrival,
                               storage=st)

        bmax = bmin = None  # the persistent grid's roles take each tile's bands per tile
        if const_expr(not cfg.persistent):
            bmax, bmin = self._tile_bands(mSumMin, mSumMax, b, hm, n_blk, seqlen_q)

        if warp_idx < 4:
            # ------------------------------------------------------------ producer warp group
            # exactly what the consumers' increase to 240 needs from the 168 of the launch
            # (128 x (168 - 24) = 256 x (240 - 168)): a producer keeping more registers makes
            # the consumers' setmaxnreg wait forever (the H200 hung on 32, session 11)
            cute.arch.setmaxregister_decrease(24)
            if warp_idx == 0:
                if const_expr(cfg.persistent):
                    self._produce_tiles(grid, num_m, diag, mQ, mK, mV, mdO, sQ, sK, sV, sdO,
                                        tma_q, tma_k, tma_v, tma_do, pipe_q, pipe_do, pipe_kv)
                else:
                    gK = cute.local_tile(mK[None, None, hk, b], (self.tile_n, self.d), (n_blk, 0))
                    gV = cute.local_tile(mV[None, None, hk, b], (self.tile_n, self.dv), (n_blk, 0))
                    tKs, tKg = cpasync.tma_partition(tma_k, 0, cute.make_layout(1),
                                                     cute.group_modes(sK, 0, 2),
                                                     cute.group_modes(gK, 0, 2))
                    tVs, tVg = cpasync.tma_partition(tma_v, 0, cute.make_layout(1),
                                                     cute.group_modes(sV, 0, 2),
                                                     cute.group_modes(gV, 0, 2))
                    kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
                    pipe_kv.producer_acquire(kv_state)
                    cute.copy(tma_k, tKg, tKs, tma_bar_ptr=pipe_kv.producer_get_barrier(kv_state))
                    cute.copy(tma_v, tVg, tVs, tma_bar_ptr=pipe_kv.producer_get_barrier(kv_state))
                    state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer,
                                                         self.stages)
                    state = self._load_heads(state, grid, h, group, b, n_blk, n0, num_m, diag,
                                             bmax, bmin, mQ, mdO, sQ, sdO, tma_q, tma_do, pipe_q,
                                             pipe_do)
            if const_expr(self.dq_bulk):
                if warp_idx == 1:
                    if const_expr(cfg.persistent):
                        self._dq_write_tiles(grid, pipe_kv, sdQ, mdQacc, mSem, num_m, seqlen_k,
                                             diag, tidx)
                    else:
                        none = Int32(-1)  # fused_dq (the only user of p1..p3) is persistent
                        self._dq_write_heads(grid, h, hm, group, b, n_blk, n0, num_m, seqlen_k,
                                             diag, bmax, bmin, sdQ, mdQacc, mSem, tidx, none,
                                             none, none)
            if const_expr(self.conv_rows):
                if warp_idx >= 2:
                    chunks = self.conv_rows * self.d // _CONV_VEC  # 16-byte chunks per buffer
                    sConv = cute.make_tensor(st.sConv.data_ptr(), cute.make_layout(
                        (chunks, _CONV_VEC, 2), stride=(_CONV_VEC, 1, chunks * _CONV_VEC)))
                    self._convert_tiles(sConv, conv_mbar, conv_slot, queue, mdQacc,
                                        mdQout, num_m, softmax_scale, tidx - 64)
        else:
            # ------------------------------------------------------------ consumer warp groups
            cute.arch.setmaxregister_increase(240)
            ctid = tidx - 128
            wg = cute.arch.make_warp_uniform(ctid // 128)  # uniform: operand descriptors in URs
            self._consume(grid, ctid, wg, b, h, hk, hm, group, n_blk, n0, num_m, seqlen_q,
                          seqlen_k, diag,
                          bmax, bmin, sQ, sdO, sK, sV, sP, sdS, sdQ, pipe_q, pipe_do, pipe_kv,
                          mLSE2, mDelta, mdQacc, mdK, mdV, mIdx, mSem, mSumMin, mSumMax,
                          tiled_sdp, tiled_dk,
                          tiled_dv, tiled_dq, scale_log2, softmax_scale)

    @cute.jit
    def _load_q_do(self, state, stats, h, b, n0, num_m, seqlen_q, diag, bmax, bmin, mQ, mdO, sQ,
                   sdO, tma_q, tma_do, pipe_q, pipe_do, group=1):
        """Producer: TMA Q and dO of every query tile of head ``h`` this key tile visits (with
        ``stage_stats`` also its LSE / delta, bulk-copied on the same barriers); returns the
        advanced pipeline state. With ``walk_interleave``, of heads ``h`` .. ``h + group - 1``
        for each query tile in turn."""
        interleave = const_expr(self.cfg.walk_interleave)
        tQs, tQg, tdOs, tdOg = self._q_do_tiles(h, b, mQ, mdO, sQ, sdO, tma_q, tma_do)
        m_lo, m_hi = self._walk(n0, bmax, bmin, seqlen_q, diag, num_m)
        lo, hi = self._walk_steps(m_lo, m_hi, group)
        for it in cutlass.range(lo, hi, unroll=1):
            m_blk, j = self._step_tile(it, group)
            if not self._skipped(m_blk, n0, bmax, bmin, seqlen_q, diag):
                hq, q_s, q_g, do_s, do_g = h, tQs, tQg, tdOs, tdOg
                if const_expr(interleave):  # this step's head of the group (h is its first)
                    hq = h + j
                    q_s, q_g, do_s, do_g = self._q_do_tiles(hq, b, mQ, mdO, sQ, sdO, tma_q,
                                                            tma_do)
                pipe_q.producer_acquire(state)
                cute.copy(tma_q, q_g[None, m_blk], q_s[None, state.index],
                          tma_bar_ptr=pipe_q.producer_get_barrier(state))
                if const_expr(self.stats_bytes):
                    self._copy_stats(stats.sLSE, stats.mLSE2, state.index, b, hq, m_blk,
                                     pipe_q.producer_get_barrier(state))
                pipe_do.producer_acquire(state)
                cute.copy(tma_do, do_g[None, m_blk], do_s[None, state.index],
                          tma_bar_ptr=pipe_do.producer_get_barrier(state))
                if const_expr(self.stats_bytes):
                    self._copy_stats(stats.sDelta, stats.mDelta, state.index, b, hq, m_blk,
                                     pipe_do.producer_get_barrier(state))
                state.advance()
        return state

    def _q_do_tiles(self, h, b, mQ, mdO, sQ, sdO, tma_q, tma_do):
        """Producer: the TMA partitions of head ``h``'s Q and dO query tiles and their stages."""
        gQ = cute.local_tile(mQ[None, None, h, b], (self.tile_m, self.d), (None, 0))
        gdO = cute.local_tile(mdO[None, None, h, b], (self.tile_m, self.dv), (None, 0))
        tQs, tQg = cpasync.tma_partition(tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2),
                                         cute.group_modes(gQ, 0, 2))
        tdOs, tdOg = cpasync.tma_partition(tma_do, 0, cute.make_layout(1),
                                           cute.group_modes(sdO, 0, 2), cute.group_modes(gdO, 0, 2))
        return tQs, tQg, tdOs, tdOg

    @cute.jit
    def _wgmma(self, tiled_mma: cute.TiledMma, acc: cute.Tensor, tA: cute.Tensor,
               tB: cute.Tensor, zero_init: cutlass.Constexpr[bool]):
        atom = cute.make_mma_atom(tiled_mma.op)
        atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
        for k in cutlass.range_constexpr(cute.size(tA.shape[2])):
            cute.gemm(atom, acc, tA[None, None, k], tB[None, None, k], acc)
            atom.set(warpgroup.Field.ACCUMULATE, True)

    @cute.jit
    def _consume(self, grid, ctid, wg, b, h, hk, hm, group, n_blk, n0, num_m, seqlen_q, seqlen_k,
                 diag,
                 bmax, bmin, sQ, sdO, sK, sV, sP, sdS, sdQ, pipe_q, pipe_do, pipe_kv, mLSE2, mDelta,
                 mdQacc, mdK, mdV, mIdx, mSem, mSumMin, mSumMax, tiled_sdp, tiled_dk, tiled_dv,
                 tiled_dq,
                 scale_log2, softmax_scale):
        cfg = self.cfg
        wg_first = wg * 128
        # per-WG slices (operand descriptors / accumulator shapes) and per-thread slices (coords)
        wg_sdp = tiled_sdp.get_slice(wg_first)
        wg_dk = tiled_dk.get_slice(wg_first)
        wg_dv = tiled_dv.get_slice(wg_first)
        wg_dq = tiled_dq.get_slice(wg_first)
        th_sdp = tiled_sdp.get_slice(ctid)
        th_dk = tiled_dk.get_slice(ctid)
        th_dv = tiled_dv.get_slice(ctid)
        th_dq = tiled_dq.get_slice(ctid)

        # S^T = K Q^T and dP^T = V dO^T : A = K/V (K-major), B = Q/dO (K-major)
        tSrK = wg_sdp.make_fragment_A(wg_sdp.partition_A(sK))
        tSrQ = wg_sdp.make_fragment_B(wg_sdp.partition_B(sQ))
        tPrV = wg_sdp.make_fragment_A(wg_sdp.partition_A(sV))
        tPrdO = wg_sdp.make_fragment_B(wg_sdp.partition_B(sdO))
        # dV += P^T dO : A = P^T [keys x queries] (K-major), B = dO viewed [Dv x queries] (MN-major)
        if const_expr(self.rs_dkv):
            tVrP = wg_dv.make_fragment_A(wg_dv.partition_shape_A((self.tile_n, self.tile_m)))
            tKrdS = wg_dk.make_fragment_A(wg_dk.partition_shape_A((self.tile_n, self.tile_m)))
        else:
            tVrP = wg_dv.make_fragment_A(wg_dv.partition_A(sP))
            tKrdS = wg_dk.make_fragment_A(wg_dk.partition_A(sdS))
        tVrdO = wg_dv.make_fragment_B(wg_dv.partition_B(_transposed(sdO)))
        # dK += dS^T Q
        tKrQ = wg_dk.make_fragment_B(wg_dk.partition_B(_transposed(sQ)))
        # dQ = dS K : A = dS viewed [queries x keys] (MN-major), B = K viewed [D x keys] (MN-major);
        # transposed, dQ^T = K^T dS^T: A = K viewed [D x keys], B = dS viewed [queries x keys]
        sdS_qk = sdS if const_expr(cfg.ds_query_major) else _transposed(sdS)  # [queries x keys]
        if const_expr(cfg.dq_transposed):
            tQrK = wg_dq.make_fragment_A(wg_dq.partition_A(_transposed(sK)))
            tQrdS = wg_dq.make_fragment_B(wg_dq.partition_B(sdS_qk))
        else:
            tQrdS = wg_dq.make_fragment_A(wg_dq.partition_A(sdS_qk))
            tQrK = wg_dq.make_fragment_B(wg_dq.partition_B(_transposed(sK)))

        acc_shape_s = wg_sdp.partition_shape_C((self.tile_n, self.tile_m))
        acc_dK = cute.make_rmem_tensor(wg_dk.partition_shape_C((self.tile_n, self.d)), Float32)
        acc_dV = cute.make_rmem_tensor(wg_dv.partition_shape_C((self.tile_n, self.dv)), Float32)
        acc_dK.fill(0.0)
        acc_dV.fill(0.0)

        # coordinates of this thread's S^T elements: (key row in tile, query col in tile)
        tScS = _acc_mn(th_sdp.partition_C(cute.make_identity_tensor((self.tile_n, self.tile_m))))
        n_rows = cute.size(tScS, mode=[0])
        n_cols = cute.size(tScS, mode=[1])
        col_offsets = self._column_offsets(tiled_sdp, n_cols)

        # column values of this thread's key rows: loaded per head, reused for every query tile
        C = cfg.num_columns if const_expr(cfg.num_columns is not None) else 1
        key_vals = cute.make_rmem_tensor(cute.make_layout((n_rows, C)), Int32)
        ops = SimpleNamespace(
            tSrK=tSrK, tSrQ=tSrQ, tPrV=tPrV, tPrdO=tPrdO, tVrP=tVrP, tKrdS=tKrdS, tVrdO=tVrdO,
            tKrQ=tKrQ, tQrdS=tQrdS, tQrK=tQrK, acc_shape_s=acc_shape_s, acc_dK=acc_dK,
            acc_dV=acc_dV, tScS=tScS, col_offsets=col_offsets, sP=sP, sdS=sdS, wg_dq=wg_dq,
            th_dq=th_dq,
            key_vals=key_vals, mIdx=mIdx, tiled_sdp=tiled_sdp, tiled_dk=tiled_dk, tiled_dv=tiled_dv,
            tiled_dq=tiled_dq, th_dk=th_dk, th_dv=th_dv, stats=grid.stats)
        if const_expr(cfg.persistent):
            self._consume_tiles(ops, grid, ctid, num_m, seqlen_k, diag, sdQ, pipe_q, pipe_do,
                                pipe_kv, mLSE2, mDelta, mdQacc, mdK, mdV, mSem, scale_log2,
                                softmax_scale)
        else:
            self._load_key_vals(key_vals, tScS, mIdx, b, hm, n0, seqlen_k)

            gdQacc_bh = mdQacc[b, h, None, None]

            st_kv = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            pipe_kv.consumer_wait(st_kv)
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)

            state = self._consume_heads(state, ops, grid, ctid, b, h, hm, group, n_blk, n0,
                                        num_m, seqlen_k, diag, bmax, bmin, gdQacc_bh, sdQ, pipe_q,
                                        pipe_do, mLSE2, mDelta, mdQacc, mSem, scale_log2)

            # ---- epilogue: dK (scaled) and dV, written once
            self._store_dkv(grid, acc_dK, acc_dV, th_dk, th_dv, mdK, mdV, b, h, hk, n_blk,
                            seqlen_k, softmax_scale, ctid)

    @cute.jit
    def _consume_heads(self, state, ops, grid, ctid, b, h, hm, group, n_blk, n0, num_m, seqlen_k,
                       diag, bmax, bmin, gdQacc_bh, sdQ, pipe_q, pipe_do, mLSE2, mDelta, mdQacc,
                       mSem, scale_log2):
        """Consumers: every visited query tile of the CTA's query head(s) for this key tile;
        returns the advanced Q/dO pipeline state."""
        cfg = self.cfg
        mIdx, mSumMin, mSumMax, seqlen_q = grid.mIdx, grid.mSumMin, grid.mSumMax, grid.seqlen_q
        key_vals, tScS = ops.key_vals, ops.tScS
        if const_expr(cfg.walk_interleave):
            # the group's heads share this mask head (its bands and key values): one walk, every
            # head per query tile (LSE / delta come staged with each head's Q / dO)
            state = self._consume_head(state, ops, ctid, b, h, hm, n_blk, n0, num_m, seqlen_q,
                                       seqlen_k, diag, bmax, bmin, gdQacc_bh, sdQ, pipe_q,
                                       pipe_do, mLSE2, mDelta, mSem, mSumMin, mSumMax, scale_log2,
                                       group)
        elif const_expr(cfg.gqa_in_cta):
            # the group's query heads add into the same dK/dV accumulators; the Q/dO stages
            # and the pipeline state run on across heads
            num_h = grid.num_h
            for j in cutlass.range(group, unroll=1):
                hmj = self._mask_head(h + j, num_h, mIdx)
                bmax, bmin = self._tile_bands(mSumMin, mSumMax, b, hmj, n_blk, seqlen_q)
                self._load_key_vals(key_vals, tScS, mIdx, b, hmj, n0, seqlen_k)
                state = self._consume_head(state, ops, ctid, b, h + j, hmj, n_blk, n0, num_m,
                                           seqlen_q, seqlen_k, diag, bmax, bmin,
                                           mdQacc[b, h + j, None, None], sdQ, pipe_q, pipe_do,
                                           mLSE2, mDelta, mSem, mSumMin, mSumMax, scale_log2)
        else:
            state = self._consume_head(state, ops, ctid, b, h, hm, n_blk, n0, num_m, seqlen_q,
                                       seqlen_k, diag, bmax, bmin, gdQacc_bh, sdQ, pipe_q,
                                       pipe_do, mLSE2, mDelta, mSem, mSumMin, mSumMax, scale_log2)
        return state

    @cute.jit
    def _consume_head(self, state, ops, ctid, b, h, hm, n_blk, n0, num_m, seqlen_q, seqlen_k,
                      diag, bmax, bmin, gdQacc_bh, sdQ, pipe_q, pipe_do, mLSE2, mDelta, mSem,
                      mSumMin, mSumMax, scale_log2, group=1):
        """The five GEMMs of every query tile of head ``h`` this key tile visits; returns the
        advanced pipeline state (dK/dV accumulate in ``ops.acc_dK`` / ``ops.acc_dV``). With
        ``walk_interleave`` each query tile ``group`` times, once per head of the group (the
        body needs no head: LSE / delta come staged, dQ goes to the writer)."""
        cfg = self.cfg
        tSrK, tSrQ, tPrV, tPrdO = ops.tSrK, ops.tSrQ, ops.tPrV, ops.tPrdO
        tVrP, tKrdS, tVrdO, tKrQ = ops.tVrP, ops.tKrdS, ops.tVrdO, ops.tKrQ
        tQrdS, tQrK, acc_shape_s = ops.tQrdS, ops.tQrK, ops.acc_shape_s
        acc_dK, acc_dV, tScS, col_offsets = ops.acc_dK, ops.acc_dV, ops.tScS, ops.col_offsets
        # P^T / dS^T registers -> smem with stmatrix: the accumulator's adjacent column pairs are
        # stmatrix's fragment, so 4 STSM.x4 replace 16 32-bit STS per thread. Built here, not
        # passed in: the copy object would carry values out of the GQA head loop's body
        pds_store = cute.make_tiled_copy_C(
            cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.dtype),
            ops.tiled_sdp).get_slice(ctid)
        tPsP = None if const_expr(ops.sP is None) else pds_store.partition_D(ops.sP)
        two_pds = const_expr(cfg.pds_stages == 2)
        sdS_kq = ops.sdS  # dS^T viewed [keys x queries], as the S^T accumulator
        ds_store = pds_store
        if const_expr(cfg.ds_query_major):  # stored [queries x keys]: stmatrix transposes
            sdS_kq = _transposed(ops.sdS)
            ds_store = cute.make_tiled_copy_C(
                cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(True, 4), self.dtype),
                ops.tiled_sdp).get_slice(ctid)
        # one dS^T buffer: its partition is built once, outside the query-tile loop (built per
        # tile, as the two-buffer path must, it changes every default variant's SASS)
        tPsdS = None if two_pds else ds_store.partition_D(sdS_kq)
        wg_dq, th_dq, key_vals = ops.wg_dq, ops.th_dq, ops.key_vals
        tiled_sdp, tiled_dk, tiled_dv = ops.tiled_sdp, ops.tiled_dk, ops.tiled_dv
        tiled_dq = ops.tiled_dq
        n_rows = cute.size(tScS, mode=[0])
        n_cols = cute.size(tScS, mode=[1])
        C = cfg.num_columns if const_expr(cfg.num_columns is not None) else 1
        m_lo, m_hi = self._walk(n0, bmax, bmin, seqlen_q, diag, num_m)
        # per-query statistics of this thread's columns (lse2 = LSE*log2e, +inf if empty, and
        # delta); with prefetch_stats they live across iterations and stats_m says whose they are
        prefetch = const_expr(cfg.prefetch_stats or cfg.shfl_stats)
        shfl = const_expr(cfg.shfl_stats)  # lse_c / dlt_c then hold the lane's share
        # at 80 rows the shuffled stats are loaded per tile, never prefetched: held across the
        # loop (a conditional load keeps them live) they spill there
        per_tile_shfl = const_expr(shfl and self.tile_m % ROWS_PER_CTA != 0)
        # staged stats on 80-row tiles of masks with columns: each column pair read from shared
        # memory where it is used (20 columns of LSE and delta held beside the key's column
        # values spill there)
        at_use = const_expr(self.stats_bytes and self.tile_m % ROWS_PER_CTA != 0
                            and cfg.num_columns is not None)
        held = stat_words(self.tile_m) if const_expr(shfl) else n_cols
        lse_c = cute.make_rmem_tensor(cute.make_layout(held), Float32)
        dlt_c = cute.make_rmem_tensor(cute.make_layout(held), Float32)
        stats_m = Int32(-1)
        lo, hi = self._walk_steps(m_lo, m_hi, group)
        for it in cutlass.range(lo, hi, unroll=1):
            m_blk, _ = self._step_tile(it, group)
            skipped = self._skipped(m_blk, n0, bmax, bmin, seqlen_q, diag)
            if not skipped:
                m0 = m_blk * self.tile_m
                stage = state.index
                wait_for = Int32(0)
                if const_expr(cfg.deterministic and not self.dq_bulk):
                    if ctid < 32:
                        wait_for = self._sem_wait_value(m_blk, n_blk, b, hm, mSumMin, mSumMax,
                                                        seqlen_q, seqlen_k, diag, ctid)
                pipe_q.consumer_wait(state)
                acc_S = cute.make_rmem_tensor(acc_shape_s, Float32)
                warpgroup.fence()
                self._wgmma(tiled_sdp, acc_S, tSrK, tSrQ[None, None, None, stage], True)
                warpgroup.commit_group()
                pipe_do.consumer_wait(state)
                acc_dP = cute.make_rmem_tensor(acc_shape_s, Float32)
                self._wgmma(tiled_sdp, acc_dP, tPrV, tPrdO[None, None, None, stage], True)
                warpgroup.commit_group()

                # late_loads (multi-column masks): delta is loaded after the mask and the key's
                # column values inside it, so neither is live across the exp and the element
                # rule (d128 spills: causal C=2 108 B, bidirectional C=2 92 B, C=4 120 B -> 0)
                # (self.late_delta: so is delta on 80-row tiles, staged or not)
                if const_expr(at_use):  # read below, column pair by column pair
                    pass
                elif const_expr(self.stats_bytes):  # staged with Q / dO: both waits are behind us
                    self._read_column_stats(lse_c, ops.stats.sLSE, stage, tScS)
                    if const_expr(not self.late_delta):
                        self._read_column_stats(dlt_c, ops.stats.sDelta, stage, tScS)
                elif const_expr(per_tile_shfl):  # unconditional: nothing lives across tiles
                    self._fetch_stats(lse_c, mLSE2, b, h, m0, tScS)
                    if const_expr(not self.late_shfl_delta):
                        self._fetch_stats(dlt_c, mDelta, b, h, m0, tScS)
                elif const_expr(prefetch):
                    if stats_m != m_blk:  # not prefetched: the first tile, or after a skipped one
                        self._fetch_stats(lse_c, mLSE2, b, h, m0, tScS)
                        self._fetch_stats(dlt_c, mDelta, b, h, m0, tScS)
                else:
                    self._load_column_stats(lse_c, mLSE2, b, h, m0, tScS)
                    if const_expr(not self.late_delta):
                        self._load_column_stats(dlt_c, mDelta, b, h, m0, tScS)

                warpgroup.wait_group(1)
                S = _acc_mn(acc_S)
                if const_expr(at_use):
                    for j in cutlass.range_constexpr(n_cols // 2):
                        pair = self._staged_pair(ops.stats.sLSE, stage, tScS, j)
                        for e in cutlass.range_constexpr(2):
                            for r in cutlass.range_constexpr(n_rows):
                                S[r, 2 * j + e] = cute.math.exp2(
                                    S[r, 2 * j + e] * scale_log2 - pair[e], fastmath=True)
                elif const_expr(shfl):
                    for c in cutlass.range_constexpr(n_cols):
                        lse = self._shuffled_stat(lse_c, tScS, c)
                        for r in cutlass.range_constexpr(n_rows):
                            S[r, c] = cute.math.exp2(S[r, c] * scale_log2 - lse, fastmath=True)
                else:
                    for r in cutlass.range_constexpr(n_rows):
                        for c in cutlass.range_constexpr(n_cols):
                            S[r, c] = cute.math.exp2(S[r, c] * scale_log2 - lse_c[c],
                                                     fastmath=True)
                if self._needs_mask(m_blk, n0, bmax, bmin, seqlen_q, seqlen_k, diag):
                    # rows measured from this thread's first column (semantics.rows_from): each
                    # element compares its compile-time column offset with per-key bounds, or
                    # (mask_bits) tests its bit of the key's masked-row mask
                    origin = m0 + tScS[0, 0][1]
                    for r in cutlass.range_constexpr(n_rows):
                        key = n0 + tScS[r, 0][0]
                        bands = semantics.Bands(seqlen_q, None, None, None)
                        if const_expr(cfg.num_columns is not None):
                            if const_expr(self.late_loads):  # the key's columns read per partial tile
                                key_row = cutlass.min(key, seqlen_k - 1)
                                vals = [ops.mIdx[b, hm, key_row, c] for c in range(C)]
                            else:
                                vals = [key_vals[r, c] for c in range(C)]
                            bands = semantics.band_bounds(vals, cfg.causal)
                        rel_bands = semantics.rows_from(bands, origin)
                        rel_key = key - diag - origin
                        beyond = key >= seqlen_k
                        if const_expr(cfg.mask_bits):
                            bits = fm_mask.pair_column_bits(
                                semantics.masked_row_intervals(rel_bands, cfg.causal, rel_key, 0),
                                n_cols, one=Int32(1))
                            # a key past the sequence: every column (its bits all set)
                            bits = bits | ((Int32(0) - Int32(beyond))
                                           & fm_mask.low_bits(n_cols, n_cols, Int32(1)))
                            for c in cutlass.range_constexpr(n_cols):
                                if ((bits >> c) & 1) != 0:
                                    S[r, c] = Float32(0.0)
                        else:
                            for c in cutlass.range_constexpr(n_cols):
                                dead = semantics.element_masked(col_offsets[c], rel_key,
                                                                rel_bands, cfg.causal, 0)
                                if dead | beyond:
                                    S[r, c] = Float32(0.0)
                if const_expr(self.late_delta and not at_use):
                    if const_expr(self.stats_bytes):
                        self._read_column_stats(dlt_c, ops.stats.sDelta, stage, tScS)
                    elif const_expr(self.late_shfl_delta):
                        self._fetch_stats(dlt_c, mDelta, b, h, m0, tScS)
                    elif const_expr(not prefetch):
                        self._load_column_stats(dlt_c, mDelta, b, h, m0, tScS)
                warpgroup.wait_group(0)
                dP = _acc_mn(acc_dP)
                if const_expr(at_use):
                    for j in cutlass.range_constexpr(n_cols // 2):
                        pair = self._staged_pair(ops.stats.sDelta, stage, tScS, j)
                        for e in cutlass.range_constexpr(2):
                            for r in cutlass.range_constexpr(n_rows):
                                dP[r, 2 * j + e] = S[r, 2 * j + e] * (dP[r, 2 * j + e] - pair[e])
                elif const_expr(shfl):
                    for c in cutlass.range_constexpr(n_cols):
                        dlt = self._shuffled_stat(dlt_c, tScS, c)
                        for r in cutlass.range_constexpr(n_rows):
                            dP[r, c] = S[r, c] * (dP[r, c] - dlt)
                else:
                    for r in cutlass.range_constexpr(n_rows):
                        for c in cutlass.range_constexpr(n_cols):
                            dP[r, c] = S[r, c] * (dP[r, c] - dlt_c[c])
                # the next tile's stats load under this tile's GEMMs (not at 80 rows)
                if const_expr(prefetch and not per_tile_shfl):
                    if m_blk + 1 < m_hi:
                        self._fetch_stats(lse_c, mLSE2, b, h, m0 + self.tile_m, tScS)
                        self._fetch_stats(dlt_c, mDelta, b, h, m0 + self.tile_m, tScS)
                        stats_m = m_blk + 1

                # P^T and dS^T to shared memory (input dtype) for the three remaining GEMMs
                rP = cute.make_rmem_tensor_like(acc_S, self.dtype)
                rP.store(acc_S.load().to(self.dtype))
                rdS = cute.make_rmem_tensor_like(acc_dP, self.dtype)
                rdS.store(acc_dP.load().to(self.dtype))
                if const_expr(self.rs_dkv):
                    _acc_to_operand_a(rP, tVrP)
                    _acc_to_operand_a(rdS, tKrdS)
                else:
                    cute.copy(pds_store, pds_store.retile(rP), tPsP)
                if const_expr(two_pds):  # this query tile's dS^T buffer: its Q/dO stage's
                    cute.copy(ds_store, ds_store.retile(rdS),
                              ds_store.partition_D(sdS_kq[None, None, stage]))
                else:
                    cute.copy(ds_store, ds_store.retile(rdS), tPsdS)
                dv_early = const_expr(cfg.dv_early and self.rs_dkv)
                dk_early = const_expr(dv_early and cfg.dk_early)
                if const_expr(dv_early):  # this warpgroup's own P^T: no need to wait for the other
                    warpgroup.fence()
                    self._wgmma(tiled_dv, acc_dV, tVrP, tVrdO[None, None, None, stage], False)
                    if const_expr(dk_early):  # ... nor for its own dS^T rows
                        self._wgmma(tiled_dk, acc_dK, tKrdS, tKrQ[None, None, None, stage], False)
                    warpgroup.commit_group()
                cute.arch.fence_view_async_shared()
                cute.arch.barrier(barrier_id=_BAR_PDS_READY,
                                  number_of_threads=self.num_consumer_threads)

                warpgroup.fence()
                if const_expr(not dv_early):
                    self._wgmma(tiled_dv, acc_dV, tVrP, tVrdO[None, None, None, stage], False)
                tQrdS_now = tQrdS[None, None, None, stage] if two_pds else tQrdS
                acc_dQ = cute.make_rmem_tensor(wg_dq.partition_shape_C(self._dq_tile_shape()),
                                               Float32)
                if const_expr(dk_early):  # dV, dK | rendezvous | dQ
                    self._dq_gemm(tiled_dq, acc_dQ, tQrdS_now, tQrK)
                    warpgroup.commit_group()
                    if const_expr(cfg.dq_early):
                        warpgroup.wait_group(0)
                        self._hand_dq_to_writer(acc_dQ, th_dq, sdQ, ctid)
                elif const_expr(cfg.dq_early):
                    # dV, dQ | dK: the dQ tile goes to the writer while the dK GEMM runs
                    self._dq_gemm(tiled_dq, acc_dQ, tQrdS_now, tQrK)
                    warpgroup.commit_group()
                    if const_expr(cfg.dk_after_dv):  # [dV] [dQ] outstanding: dV done first
                        warpgroup.wait_group(1)
                        warpgroup.fence()
                        if const_expr(cfg.do_release_after_dv):  # dO's last reader is done
                            pipe_do.consumer_release(state)
                    self._wgmma(tiled_dk, acc_dK, tKrdS, tKrQ[None, None, None, stage], False)
                    warpgroup.commit_group()
                    warpgroup.wait_group(1)
                    self._hand_dq_to_writer(acc_dQ, th_dq, sdQ, ctid)
                else:
                    self._wgmma(tiled_dk, acc_dK, tKrdS, tKrQ[None, None, None, stage], False)
                    self._dq_gemm(tiled_dq, acc_dQ, tQrdS_now, tQrK)
                    warpgroup.commit_group()
                warpgroup.wait_group(0)
                pipe_q.consumer_release(state)
                if const_expr(not cfg.do_release_after_dv):
                    pipe_do.consumer_release(state)
                state.advance()

                # dQ (fp32) into the global accumulator
                gdQ = cute.local_tile(gdQacc_bh, (self.tile_m, self.d), (m_blk, 0))
                if const_expr(self.dq_bulk):
                    if const_expr(not cfg.dq_early):  # (dq_early handed it over above)
                        self._hand_dq_to_writer(acc_dQ, th_dq, sdQ, ctid)
                else:
                    tdQg = th_dq.partition_C(gdQ)
                    if const_expr(cfg.deterministic):
                        self._sem_wait(mSem, b, h, m_blk, wait_for, ctid)
                        cute.arch.barrier(barrier_id=_BAR_DQ,
                                          number_of_threads=self.num_consumer_threads)
                    for i in cutlass.range_constexpr(cute.size(acc_dQ)):
                        cute.arch.red(tdQg.iterator + cute.crd2idx(i, tdQg.layout), acc_dQ[i],
                                      op="add", dtype=Float32, sem="relaxed", scope="gpu")
                    if const_expr(cfg.deterministic):
                        cute.arch.fence_acq_rel_gpu()
                        cute.arch.barrier(barrier_id=_BAR_DQ,
                                          number_of_threads=self.num_consumer_threads)
                        self._sem_release(mSem, b, h, m_blk, n_blk, seqlen_k, ctid)
                # both WGs are past their reads of P^T / dS^T before the next tile overwrites them
                # (two dS^T stages: the next tile writes the other one, and the tile after it
                # only follows the next tile's "P^T/dS^T ready" rendezvous, which both WGs reach
                # after this tile's GEMMs completed)
                if const_expr(not two_pds):
                    cute.arch.barrier(barrier_id=_BAR_PDS_FREE,
                                      number_of_threads=self.num_consumer_threads)
        return state

    def _dq_tile_shape(self) -> tuple:
        """The dQ GEMM's (M, N): (query rows, D), or transposed (D, query rows)."""
        return (self.d, self.tile_m) if self.cfg.dq_transposed else (self.tile_m, self.d)

    def _dq_gemm(self, tiled_dq: cute.TiledMma, acc_dQ: cute.Tensor, tQrdS: cute.Tensor,
                 tQrK: cute.Tensor):
        """dQ = dS K into a fresh accumulator, or dQ^T = K^T dS^T (the operands swap roles)."""
        if const_expr(self.cfg.dq_transposed):
            self._wgmma(tiled_dq, acc_dQ, tQrK, tQrdS, True)
        else:
            self._wgmma(tiled_dq, acc_dQ, tQrdS, tQrK, True)

    @cute.jit
    def _hand_dq_to_writer(self, acc_dQ: cute.Tensor, th_dq, sdQ: cute.Tensor, ctid):
        """This consumer thread's part of the fp32 dQ tile into the staging buffer, for the dQ
        writer warp (named barriers: wait until the buffer is free, then mark it full). With
        ``dq_per_wg`` each warpgroup's block has its own pair (its threads and the writer)."""
        empty, full = _BAR_DQ_EMPTY, _BAR_DQ_FULL
        if const_expr(self.dq_blocks > 1):  # this warpgroup's block and barrier pair
            step = cute.arch.make_warp_uniform(ctid // 128) * _BAR_DQ_WG_STEP
            empty, full = empty + step, full + step
        cute.arch.barrier(barrier_id=empty, number_of_threads=self.dq_sync_threads)
        # transposed: the accumulator's (D, query) elements into the row-major tile, one 4-byte
        # store each; the swizzle keeps a warp's stores in 32 banks (its lanes span 8 columns,
        # two 16-byte chunks, and 4 rows 2 apart, whose row % 8 XORs the chunk 4 ways)
        if const_expr(self.cfg.dq_frag):
            # the fragment ((e, row half, j)) viewed as (e, h, row half, J) with j = 2J + h on
            # both sides: (e, h) is one 16-byte chunk of the frag layout, one STS.128
            order = dq_frag_order(cute.size(acc_dQ))
            cute.autovec_copy(cute.composition(acc_dQ, order),
                              cute.composition(th_dq.partition_C(sdQ), order))
        elif const_expr(self.cfg.dq_by_thread):
            # the accumulator's quads in register order, quad k beside the other threads' k-th
            # (dq_by_thread_view): one conflict-free STS.128 each
            values = cute.size(acc_dQ)
            cute.autovec_copy(
                cute.make_tensor(acc_dQ.iterator, cute.make_layout((4, values // 4))),
                dq_by_thread_view(sdQ.iterator, ctid, values))
        else:
            cute.autovec_copy(acc_dQ, th_dq.partition_C(
                _transposed(sdQ) if const_expr(self.cfg.dq_transposed) else sdQ))
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier_arrive(barrier_id=full, number_of_threads=self.dq_sync_threads)


# --------------------------------------------------------------------------------------------------
# compile entry points
# --------------------------------------------------------------------------------------------------

def _placeholder(dtype, align: int) -> cute.Pointer:
    return cute.runtime.make_ptr(dtype, 1 << 12, cute.AddressSpace.gmem, assumed_align=align)


def compile_backward(cfg: BwdConfig):
    """Compile the main backward kernel for ``cfg`` (no GPU needed with ``CUTE_DSL_ARCH=sm_90a``).

    The compiled callable takes raw device pointers (``cute.runtime.make_ptr``) and sizes:
    ``(q, k, v, do, lse2, delta, dq_accum, dk, dv, summary_min|None, summary_max|None,
    startend_row_indices|None, semaphores|None, B, Sq, Sk, H, Hk, Hm, softmax_scale, stream)``.
    Use :class:`CompiledBackward` (via :func:`compile_backward_all`) to call it with cute tensors.
    """
    dt = _dsl_dtype(cfg.dtype)
    has_mask = cfg.num_columns is not None
    kv_dt = Float32 if cfg.dkv_partials else dt
    args = [_placeholder(dt, 16) for _ in range(4)]
    args += [_placeholder(Float32, 16) for _ in range(3)]
    args += [_placeholder(kv_dt, 16), _placeholder(kv_dt, 16)]
    args += [_placeholder(Int32, 4) if has_mask else None for _ in range(3)]
    args += [_placeholder(Int32, 4) if cfg.deterministic else None]
    args += [Int32(1), Int32(128), Int32(128), Int32(1), Int32(1), Int32(1), Float32(1.0),
             cuda.CUstream(0)]
    # the optional tail in the kernel's order (counter, pending, dq, classes, dK/dV sums, their
    # flags), as main_tail builds it for a call
    i32 = _placeholder(Int32, 4)
    f32 = _placeholder(Float32, 16)
    args += main_tail(cfg, i32, i32, _placeholder(dt, 16), i32, (f32, f32, i32), i32)
    return cute.compile(FlashMaskBwdSm90(cfg), *args)


def main_tail(cfg: BwdConfig, counter, pending, dq, classes, dkv_chain, order) -> list:
    """The main kernel's optional trailing arguments for ``cfg``: the persistent grid's tile
    counter, fused_dq's pending counts and dq (or dq_first_store's flags), class_chains' class
    records, dkv_chain's (dK sum, dV sum, flags), claim_list's list; None where unused, trailing
    Nones dropped."""
    tail = [counter if cfg.persistent else None, None, None,
            classes if cfg.class_chains else None]
    if cfg.fused_dq:
        tail[1:3] = [pending, dq]
    elif cfg.first_store_flags:
        tail[1] = pending
    tail += list(dkv_chain) if cfg.dkv_group_sum else [None] * 3
    tail.append(order if cfg.claim_list else None)
    while tail and tail[-1] is None:
        tail.pop()
    return tail


def workspace_shapes(cfg: BwdConfig, batch: int, seqlen_q: int, seqlen_k: int, num_heads: int,
                     num_kv_heads: int) -> dict:
    """Shapes/dtypes of the scratch tensors the host allocates for one backward call.

    ``lse2``/``delta`` fp32 ``[B, H, Sq_pad]`` (``Sq_pad``: ``padded_rows``), ``dq_accum`` fp32 ``[B, H, Sq_pad, D]`` (zeroed by the
    preprocess), ``dk_part``/``dv_part`` fp32 ``[B, H, Sk, D]`` only for GQA (per-query-head
    partials, head-major; ``dkv_last``'s are ``[B, Sk, H, D]``), ``semaphores`` int32
    ``[B, H * dq_chains, Sq_pad/tile_m]`` only when deterministic, ``tile_classes`` int32
    ``[B, H, ceil(Sk/tile_n)]`` only with ``class_chains`` (zeroed by the wrapper),
    ``dk_sum``/``dv_sum`` fp32 ``[B, Sk, Hk, D]`` (``dkv_bulk``: ``[B, Hk, Sk_pad, D]``, rows padded
    to whole key tiles) and ``dkv_flags`` int32
    ``[B, Hk, ceil(Sk/tile_n)]`` only with ``dkv_chain``, ``dq_pending`` int32 ``[B, H, Sq_pad/64]``
    only with ``fused_dq``, ``dq_flags`` int32 ``[B, H, Sq_pad/64]`` only with ``dq_first_store`` (then
    ``dq_accum`` is not zeroed), ``dsink_part`` fp32 ``[B, H, Sq_pad/64]`` only with
    a sink, summary int32 ``[B, Hm, ceil(Sk/tile_n), C]`` (from ``semantics.tile_summary`` /
    the summary kernel with ``tile_n = cfg.tile_n``).
    """
    nm = -(-seqlen_q // cfg.tile_m)
    sqp = padded_rows(seqlen_q, cfg.tile_m)
    out = {
        "lse2": ((batch, num_heads, sqp), "float32"),
        "delta": ((batch, num_heads, sqp), "float32"),
        "dq_accum": ((batch, num_heads * cfg.dq_chains, sqp, cfg.head_dim), "float32"),
    }
    if cfg.dkv_partials:  # head-major (flash_bwd_prepost.head_major)
        out["dk_part"] = ((batch, num_heads, seqlen_k, cfg.head_dim), "float32")
        out["dv_part"] = ((batch, num_heads, seqlen_k, cfg.head_dim_v), "float32")
    if cfg.deterministic:
        # one per query tile of the padded rows, as the kernels view them (80-row tiles: Sq_pad
        # = a multiple of 320, which can hold one tile more than ceil(Sq / 80))
        out["semaphores"] = ((batch, num_heads * cfg.dq_chains, sqp // cfg.tile_m), "int32")
    if cfg.has_sink:
        out["dsink_part"] = ((batch, num_heads, nm), "float32")
    if cfg.persistent:
        out["tile_counter"] = ((1,), "int32")  # zeroed by the wrapper before each launch
    if cfg.class_chains:  # each claimed tile's work class + 1, zeroed by the wrapper too
        out["tile_classes"] = ((batch, num_heads, -(-seqlen_k // cfg.tile_n)), "int32")
    if cfg.dkv_last:  # the per-query-head partials, and arrival counts zeroed by the wrapper
        out["dk_part"] = ((batch, seqlen_k, num_heads, cfg.head_dim), "float32")
        out["dv_part"] = ((batch, seqlen_k, num_heads, cfg.head_dim_v), "float32")
        out["dkv_flags"] = ((batch, num_kv_heads, -(-seqlen_k // cfg.tile_n)), "int32")
    if cfg.dkv_chain:  # the GQA group's running dK/dV sums, and flags zeroed by the wrapper
        rows = (batch, seqlen_k, num_kv_heads)
        if cfg.dkv_bulk:  # head-major, rows padded to whole key tiles (swizzled blocks)
            rows = (batch, num_kv_heads, -(-seqlen_k // cfg.tile_n) * cfg.tile_n)
        out["dk_sum"] = (rows + (cfg.head_dim,), "float32")
        out["dv_sum"] = (rows + (cfg.head_dim_v,), "float32")
        out["dkv_flags"] = ((batch, num_kv_heads, -(-seqlen_k // cfg.tile_n)), "int32")
    if cfg.claim_list:  # the class-sorted tile list and its builder's scratch (chunk_counts zeroed)
        out.update(claims.workspace_shapes(cfg, batch, seqlen_k, num_heads, num_kv_heads))
    if cfg.fused_dq:
        out["dq_pending"] = ((batch, num_heads, nm), "int32")  # set by the preprocess
    if cfg.first_store_flags:
        out["dq_flags"] = ((batch, num_heads, nm), "int32")  # zeroed by the preprocess
    return out


class CompiledBackward:
    """The three compiled backward kernels of one variant, called with cute tensors.

    ``bwd(q, k, v, out, dout, lse, dq, dk, dv, startend_row_indices, col_min, col_max,
    learnable_sink, dsink, workspace, softmax_scale, stream)``

    Tensors are ``cute.runtime.from_dlpack`` views of contiguous CUDA tensors: q ``[B,Sq,H,D]``,
    k ``[B,Sk,Hk,D]``, v ``[B,Sk,Hk,Dv]``, out/dout ``[B,Sq,H,Dv]`` and dq/dk/dv (bf16/fp16),
    lse fp32 ``[B,H,Sq]``; ``startend_row_indices`` int32 ``[B,Hm,Sk,C]`` and ``col_min``/``col_max``
    (``semantics.tile_summary`` layout with ``tile_n = config.tile_n``) or None; learnable_sink /
    dsink fp32 ``[H]`` or None; ``workspace``: dict name -> buffer (cute tensor, torch tensor or
    ``dlpack.DeviceBuffer``) with the shapes of :func:`workspace_shapes` (contents need not be
    initialised). ``stream``: CUDA stream handle.
    dq/dk/dv/dsink are written in full (zeros where no key/query is visible).
    """

    def __init__(self, config: BwdConfig):
        from .flash_bwd_prepost import compile_postprocess, compile_preprocess
        self.config = config
        self.pre = compile_preprocess(config.prepost)
        self.main = compile_backward(config)
        self.claims = claims.compile_claim_list(config) if config.claim_list else None
        self.post = compile_postprocess(config.prepost) if config.prepost.has_post else None

    def __call__(self, q, k, v, out, dout, lse, dq, dk, dv, startend_row_indices, col_min,
                 col_max, learnable_sink, dsink, workspace: dict, softmax_scale: float,
                 stream) -> None:
        cfg = self.config
        b, sq, h, sk, hk, hm = check_variant_call(
            q, k, v, startend_row_indices, learnable_sink, head_dim=cfg.head_dim,
            head_dim_v=cfg.head_dim_v, mask_columns=cfg.num_columns, has_sink=cfg.has_sink)
        if (dsink is None) == cfg.has_sink:
            raise ValueError(f"dsink: presence must match has_sink={cfg.has_sink}")
        if (h != hk) != cfg.gqa:
            raise ValueError(f"num_heads/num_kv_heads: config.gqa={cfg.gqa} but H={h}, Hk={hk}")
        if b == 0 or sq == 0 or h == 0:
            return
        dt = _dsl_dtype(cfg.dtype)
        kv_dt = Float32 if cfg.dkv_partials else dt
        if not isinstance(stream, cuda.CUstream):
            stream = cuda.CUstream(int(stream))
        ws = workspace
        ptr = gmem_ptr
        i32 = int32_arg  # one Int32 object per value (launch_args.int32_arg)

        f32 = Float32
        fused = cfg.fused_dq
        # fused_dq's pending-add counts, or dq_first_store's flags: the preprocess sets them
        pending = ptr(ws.get("dq_pending", ws.get("dq_flags")), Int32, 4)
        summary = (ptr(col_min, Int32, 4), ptr(col_max, Int32, 4)) if fused else (None, None)
        launch(self.pre, ptr(out, dt), ptr(dout, dt), ptr(lse, f32, 4), ptr(ws["lse2"], f32),
               ptr(ws["delta"], f32), ptr(ws["dq_accum"], f32),
               ptr(learnable_sink, f32, 4), ptr(ws.get("dsink_part"), f32),
               ptr(ws.get("semaphores"), Int32, 4), pending, ptr(dq, dt) if fused else None,
               *summary, i32(b), i32(sq), i32(h), i32(sk), i32(hm), stream)
        dk_main = ws["dk_part"] if cfg.dkv_partials else dk
        dv_main = ws["dv_part"] if cfg.dkv_partials else dv
        if sk > 0:
            num_n = -(-sk // cfg.tile_n)
            if cfg.persistent:  # the persistent grid claims tiles from 0
                sched.reset_counter(ws["tile_counter"], stream)
            if cfg.class_chains:
                sched.reset_counter(ws["tile_classes"], stream, words=b * h * num_n)
            dkv_chain = ()
            if cfg.dkv_group_sum:
                sched.reset_counter(ws["dkv_flags"], stream, words=b * hk * num_n)
                sums = ("dk_part", "dv_part") if cfg.dkv_last else ("dk_sum", "dv_sum")
                dkv_chain = (ptr(ws[sums[0]], f32), ptr(ws[sums[1]], f32),
                             ptr(ws["dkv_flags"], Int32, 4))
            if cfg.claim_list:  # the class-sorted list (and the class records) first
                items = claims.num_items(cfg, b, sk, h, hk)
                sched.reset_counter(ws["chunk_counts"], stream,
                                    words=claims.num_chunks(items) * 4)
                launch(self.claims, ptr(k, dt), ptr(col_min, Int32, 4), ptr(col_max, Int32, 4),
                       ptr(startend_row_indices, Int32, 4), ptr(ws["claim_order"], Int32, 4),
                       ptr(ws["item_classes"], Int32, 4), ptr(ws["chunk_counts"], Int32, 4),
                       ptr(ws.get("tile_classes"), Int32, 4), i32(b), i32(sq),
                       i32(sk), i32(h), i32(hk), i32(hm), stream)
            extra = main_tail(cfg, ptr(ws.get("tile_counter"), Int32, 4), pending,
                              ptr(dq, dt) if fused else None,
                              ptr(ws.get("tile_classes"), Int32, 4), dkv_chain,
                              ptr(ws.get("claim_order"), Int32, 4))
            launch(self.main, ptr(q, dt), ptr(k, dt), ptr(v, dt), ptr(dout, dt),
                   ptr(ws["lse2"], f32), ptr(ws["delta"], f32), ptr(ws["dq_accum"], f32),
                   ptr(dk_main, kv_dt), ptr(dv_main, kv_dt), ptr(col_min, Int32, 4),
                   ptr(col_max, Int32, 4),
                   ptr(startend_row_indices, Int32, 4), ptr(ws.get("semaphores"), Int32, 4),
                   i32(b), i32(sq), i32(sk), i32(h), i32(hk), i32(hm),
                   float32_arg(float(softmax_scale)), stream, *extra)
        if self.post is None:
            return  # dq came from the main kernel (or the preprocess): nothing left to reduce
        # fp32 dK/dV for the postprocess: per-query-head partials, or (dkv_red) the groups'
        # sums; dkv_last and dkv_chain's register path leave dk/dv written by the main kernel
        parts = cfg.dkv_partials or cfg.dkv_red
        dk_in, dv_in = ("dk_sum", "dv_sum") if cfg.dkv_red else ("dk_part", "dv_part")
        launch(self.post, ptr(ws["dq_accum"], f32), ptr(dq, dt),
               ptr(ws[dk_in], f32) if parts else None,
               ptr(ws[dv_in], f32) if parts else None, ptr(dk, dt) if parts else None,
               ptr(dv, dt) if parts else None, ptr(ws.get("dsink_part"), f32),
               ptr(dsink, f32, 4), i32(b), i32(sq), i32(sk), i32(h), i32(hk),
               float32_arg(float(softmax_scale)), stream, pending if cfg.first_store_flags else
               (ptr(ws["semaphores"], Int32, 4) if cfg.dq_first_store else None))


def compile_backward_all(config: BwdConfig) -> CompiledBackward:
    """Compile preprocess + main + postprocess of one variant (what the host API calls)."""
    return CompiledBackward(config)
