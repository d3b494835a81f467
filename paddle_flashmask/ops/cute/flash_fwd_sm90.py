"""FlashMask forward for Hopper (SM90a) in CuTe DSL.

Structure (one CTA = one 128-row query tile at a time -- 192 rows with three consumer
warpgroups, ``FwdConfig.tile_m`` -- persistent over work tiles):

* warp 0 of warpgroup 0 is the producer. Per work tile it TMA-loads Q, then walks the key tiles:
  32 lanes evaluate ``semantics.tile_fully_masked`` / ``tile_needs_mask`` for 32 key tiles at once
  (from the per-key-tile min/max summary), a ballot gives the non-skipped ones, and for each it
  fills one K stage (TMA) together with that tile's metadata (key-tile index, partial flag) and,
  for partial tiles, the tile's column bounds, written into shared memory *before* the K stage's
  barrier is armed, so they travel in lockstep with K. V goes through its own stage ring. A
  sentinel stage (index -1) ends the work tile. Fully masked tiles are never loaded.
* warpgroups 1 and 2 (and 3) are consumers (64 query rows each, one tiled wgmma over them):
  S = Q·Kᵀ (SS wgmma), element mask in registers from the staged bounds only for partial tiles
  (full tiles run no mask code), online softmax, P converted in registers and O += P·V
  (RS wgmma, P never touches shared memory). Epilogue writes O and the fp32 LSE.
* ``setmaxnreg`` moves registers from the producer warpgroup to the consumers.
* Persistent scheduler (``tile_scheduler.py``): a head's query tiles together, last (heaviest)
  first; by default each CTA's producer claims the next work tile from a global counter
  (``FwdConfig.dynamic_schedule``) and passes it to the consumers with the tile's Q stage. With
  ``FwdConfig.work_order`` (the host's choice for GQA grids with few query tiles per CTA,
  :func:`default_work_order`) the claims, or the static slots without the dynamic schedule, walk
  the heaviest-first order that ``work_order_kernel.py`` computes on the GPU from the tile
  summary.
* Fast path (``FwdConfig`` flags, ``default_config(fast=True)``): S_j = Q·K_jᵀ in flight with
  P_{j-1}·V_{j-1} (intra-warpgroup overlap), turns between the consumer warpgroups (ping-pong,
  round robin with three), double-buffered Q, and a stmatrix + TMA-store epilogue. The default since it was
  verified on the H200; ``PADDLE_FLASHMASK_FWD_FAST=0`` selects the simpler one-tile-at-a-time loop.

Host side: :class:`FwdConfig` (compile-time parameters) and the default rules live in
``fwd_rules`` (re-exported here); :func:`compile_forward` returns a :class:`CompiledForward`
taking cute tensors made with ``cute.runtime.from_dlpack`` plus the stream.
"""
from __future__ import annotations

import math
from typing import Optional

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, Int64, Uint32
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from paddle_flashmask.ops.cute import mask as fm_mask
from paddle_flashmask.ops.cute import softmax as fm_softmax
from paddle_flashmask.ops.cute.softmax import acc_mn_view
from paddle_flashmask.ops.cute import tile_scheduler as sched
from paddle_flashmask.ops.cute.tile_range_kernel import ranges_tensor
from paddle_flashmask.ops.cute.launch_args import (check_variant_call, float32_arg, gmem_ptr,
                                                  int32_arg, launch)

from paddle_flashmask.ops.cute.fwd_rules import (  # noqa: F401 (re-exported for callers)
    _DTYPES, SUPPORTED_HEAD_DIMS, LOG2_E, BOUNDS_BATCH, FwdConfig, FAST_ENV, WORK_ORDER_ENV,
    TILE_RANGES_ENV, DYNAMIC_SCHEDULE_ENV, PARTIAL_OVERLAP_ENV, CLAIM_PASSES_ENV, CLAIM_BLOCK_ENV,
    DIAGONAL_PARTIALS_ENV, UNIFORM_Q_ENV, RESCALE_THRESHOLD_ENV, EDGE_PASS_ENV, MASK_CHAIN_ENV,
    MAX_CHAINS_ENV, MAX_ROWWISE_ENV, SUM_CHAINS_ENV, STAGE_FIRST_ENV, PINGPONG_ENV,
    ROW_MAX_CHAIN_CHOICES, EARLY_SCAN_ENV, GRID_ENV, D128_TILE_ENV, D256_TILE_ENV, D64_TILE_M_ENV,
    SMEM_LIMIT_BYTES, STATIC_SMEM_BYTES, launch_registers, _shared_memory_bytes,
    fits_shared_memory, ENV_SWITCHES, default_one_tile_per_cta, default_work_order,
    default_rescale_threshold, default_edge_pass, default_mask_pred_chain, default_row_max_chains,
    default_row_max_rowwise, default_row_sum_chains, default_stage_first, default_uniform_q,
    default_pingpong, default_config, with_consumer_warpgroups)


def _acc_to_a_operand(acc_layout: cute.Layout) -> cute.Layout:
    """View a 16-bit wgmma accumulator ((2,2,N/8),M,N) as the A operand ((2,2,2),M,(N/16,N)).

    Both describe the same registers: two adjacent 8-column groups of C form one 16-wide K slice.
    """
    split = cute.logical_divide(acc_layout, ((None, None, 2), None, None))
    return cute.make_layout(
        ((split.shape[0][0], split.shape[0][1], split.shape[0][2][0]), split.shape[1],
         (split.shape[0][2][1], split.shape[2])),
        stride=((split.stride[0][0], split.stride[0][1], split.stride[0][2][0]), split.stride[1],
                (split.stride[0][2][1], split.stride[2])),
    )


class FlashFwdSm90:
    threads_per_wg = 128
    sched_barrier_base = 1  # named barriers 1.. one per consumer warpgroup (0 is __syncthreads)

    def __init__(self, config: FwdConfig):
        self.cfg = config
        self.dtype = _DTYPES[config.dtype]
        self.d = config.head_dim
        self.dv = config.head_dim_v
        self.tile_m = config.tile_m
        self.tile_n = config.tile_n
        self.stages = config.num_stages
        self.q_stages = config.q_stages
        self.pingpong = config.pingpong
        self.overlap = config.intra_wg_overlap
        self.producer_regs = config.producer_regs
        self.consumer_regs = config.consumer_regs
        self.tma_store_o = config.tma_store_o
        self.work_order = config.work_order
        self.tile_ranges = config.tile_ranges
        self.dynamic = config.dynamic_schedule
        self.claim_passes = config.claim_passes
        self.claim_block = config.claim_block
        self.causal = config.causal
        self.mask_columns = config.mask_columns
        self.ncols = fm_mask.num_mask_columns(config.causal, config.mask_columns)
        self.edge_tile_n = config.tile_n if config.edge_pass else 0  # mask.apply_element_mask
        self.mask_pred_chain = config.mask_pred_chain  # mask.apply_element_mask's pred_chain
        self.has_sink = config.has_sink
        self.num_consumer_wg = config.tile_m // 64
        self.num_threads = self.threads_per_wg * (1 + self.num_consumer_wg)
        # per-warpgroup epilogue barriers follow the turn barriers (3, 4 with two warpgroups)
        self.epi_barrier_base = self.sched_barrier_base + self.num_consumer_wg

    # ------------------------------------------------------------------------------------------
    # Host-side trace: tensor views, TMA descriptors, launch
    # ------------------------------------------------------------------------------------------
    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        o_ptr: cute.Pointer,
        lse_ptr: cute.Pointer,
        idx_ptr: Optional[cute.Pointer],
        col_min_ptr: Optional[cute.Pointer],
        col_max_ptr: Optional[cute.Pointer],
        sink_ptr: Optional[cute.Pointer],
        order_ptr: Optional[cute.Pointer],
        ranges_ptr: Optional[cute.Pointer],
        counter_ptr: Optional[cute.Pointer],
        batch: Int32,
        seqlen_q: Int32,
        seqlen_k: Int32,
        num_heads: Int32,
        num_kv_heads: Int32,
        num_mask_heads: Int32,
        softmax_scale: Float32,
        num_ctas: Int32,
        stream: cuda.CUstream,
    ):
        d, dv, tm, tn = self.d, self.dv, self.tile_m, self.tile_n
        # [B, S, H, D] contiguous -> (S, D, H, B) views; batch strides in 64 bit.
        mQ = cute.make_tensor(q_ptr, cute.make_layout(
            (seqlen_q, d, num_heads, batch),
            stride=(num_heads * d, 1, d, Int64(seqlen_q) * num_heads * d)))
        mK = cute.make_tensor(k_ptr, cute.make_layout(
            (seqlen_k, d, num_kv_heads, batch),
            stride=(num_kv_heads * d, 1, d, Int64(seqlen_k) * num_kv_heads * d)))
        # V as the B operand of O = P·V: (Dv, Sk) with Dv contiguous (MN-major).
        mVt = cute.make_tensor(v_ptr, cute.make_layout(
            (dv, seqlen_k, num_kv_heads, batch),
            stride=(1, num_kv_heads * dv, dv, Int64(seqlen_k) * num_kv_heads * dv)))
        # Row stride in 64 bit too: the direct-store epilogue computes row * H * Dv, which passes
        # 2^31 at S = 128K, H = 64, Dv = 256 (TMA addresses by coordinates and needs no such care).
        mO = cute.make_tensor(o_ptr, cute.make_layout(
            (seqlen_q, dv, num_heads, batch),
            stride=(Int64(num_heads) * dv, 1, dv, Int64(seqlen_q) * num_heads * dv)))
        mLSE = cute.make_tensor(lse_ptr, cute.make_layout(
            (seqlen_q, num_heads, batch), stride=(1, seqlen_q, Int64(seqlen_q) * num_heads)))
        num_k_tiles = (seqlen_k + tn - 1) // tn
        mIdx, mColMin, mColMax = None, None, None
        if cutlass.const_expr(self.mask_columns is not None):
            c = self.mask_columns
            mIdx = cute.make_tensor(idx_ptr, cute.make_layout(
                (c, seqlen_k, num_mask_heads, batch),
                stride=(1, c, seqlen_k * c, Int64(seqlen_k) * num_mask_heads * c)))
            mColMin, mColMax = fm_mask.summary_tensors(col_min_ptr, col_max_ptr, c, num_k_tiles,
                                                       num_mask_heads, batch)
        mSink = None
        if cutlass.const_expr(self.has_sink):
            mSink = cute.make_tensor(sink_ptr, cute.make_layout((num_heads,)))
        mRanges = None  # per query tile [n_lo, n_hi) (tile_range_kernel.ranges_tensor)
        if cutlass.const_expr(self.tile_ranges):
            mRanges = ranges_tensor(ranges_ptr, (seqlen_q + tm - 1) // tm, num_mask_heads, batch)
        mCounter = None  # next work tile of the dynamic schedule (zeroed by the host per launch)
        if cutlass.const_expr(self.dynamic):
            mCounter = cute.make_tensor(counter_ptr, cute.make_layout((1,)))
        mOrder = None  # work items, heaviest first (tile_scheduler.work_tile)
        if cutlass.const_expr(self.work_order):
            mOrder = cute.make_tensor(order_ptr, cute.make_layout(
                (((seqlen_q + tm - 1) // tm) * num_heads * batch,)))

        tiled_mma_qk = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K,
            Float32, atom_layout_mnk=(self.num_consumer_wg, 1, 1), tiler_mn=(64, tn))
        tiled_mma_pv = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN,
            Float32, atom_layout_mnk=(self.num_consumer_wg, 1, 1), tiler_mn=(64, dv),
            a_source=warpgroup.OperandSource.RMEM)

        sQ_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (tm, tn, d), self.dtype,
                                                  self.q_stages)
        sK_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (tm, tn, d), self.dtype,
                                                  self.stages)
        sVt_layout = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (tm, dv, tn), self.dtype,
                                                   self.stages)
        sQ_one = cute.slice_(sQ_layout, (None, None, 0))
        sK_one = cute.slice_(sK_layout, (None, None, 0))
        sVt_one = cute.slice_(sVt_layout, (None, None, 0))
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tma_q, tma_mQ = cpasync.make_tiled_tma_atom(g2s, mQ, sQ_one, (tm, d))
        tma_k, tma_mK = cpasync.make_tiled_tma_atom(g2s, mK, sK_one, (tn, d))
        tma_v, tma_mVt = cpasync.make_tiled_tma_atom(g2s, mVt, sVt_one, (dv, tn))
        self.q_bytes = cute.size_in_bytes(self.dtype, sQ_one)
        self.k_bytes = cute.size_in_bytes(self.dtype, sK_one)
        self.v_bytes = cute.size_in_bytes(self.dtype, sVt_one)
        # O epilogue: each consumer warpgroup owns a 64-row slab, stored by TMA (rows >= Sq are
        # clipped by the TMA unit).
        sO_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (64, tn, dv), self.dtype,
                                                  self.num_consumer_wg)
        tma_o, tma_mO = None, None
        o_elems = 0
        if cutlass.const_expr(self.tma_store_o):
            tma_o, tma_mO = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(), mO, cute.slice_(sO_layout, (None, None, 0)),
                (64, dv))
            o_elems = cute.cosize(sO_layout)

        stages, ncols, q_stages = self.stages, self.ncols, self.q_stages

        @cute.struct
        class SharedStorage:
            mbar_q: cute.struct.MemRange[Int64, q_stages * 2]
            mbar_k: cute.struct.MemRange[Int64, stages * 2]
            mbar_v: cute.struct.MemRange[Int64, stages * 2]
            meta: cute.struct.MemRange[Int32, stages * 2]
            work: cute.struct.MemRange[Int32, q_stages]  # work tile of each Q stage (dynamic)
            bounds: cute.struct.Align[cute.struct.MemRange[Int32, stages * tn * ncols], 16]
            sQ: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sQ_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sK_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sVt_layout)], 1024]
            sO: cute.struct.Align[cute.struct.MemRange[self.dtype, o_elems], 1024]

        self.shared_storage = SharedStorage
        self.smem_bytes = SharedStorage.size_in_bytes()
        num_m_blocks = (seqlen_q + tm - 1) // tm
        self.kernel(
            tiled_mma_qk, tiled_mma_pv, tma_q, tma_mQ, tma_k, tma_mK, tma_v, tma_mVt,
            mO, tma_o, tma_mO, mLSE, mIdx, mColMin, mColMax, mSink, mOrder, mRanges, mCounter,
            sQ_layout, sK_layout, sVt_layout, sO_layout,
            seqlen_q, seqlen_k, num_heads, num_kv_heads, num_mask_heads,
            softmax_scale, num_m_blocks, batch,
        ).launch(
            grid=[num_ctas, 1, 1],
            block=[self.num_threads, 1, 1],
            smem=SharedStorage.size_in_bytes(),
            stream=stream,
            min_blocks_per_mp=1,
        )

    # ------------------------------------------------------------------------------------------
    # Device
    # ------------------------------------------------------------------------------------------
    @cute.kernel
    def kernel(
        self,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        tma_q: cute.CopyAtom,
        mQ: cute.Tensor,
        tma_k: cute.CopyAtom,
        mK: cute.Tensor,
        tma_v: cute.CopyAtom,
        mVt: cute.Tensor,
        mO: cute.Tensor,
        tma_o: Optional[cute.CopyAtom],
        tma_mO: Optional[cute.Tensor],
        mLSE: cute.Tensor,
        mIdx: Optional[cute.Tensor],
        mColMin: Optional[cute.Tensor],
        mColMax: Optional[cute.Tensor],
        mSink: Optional[cute.Tensor],
        mOrder: Optional[cute.Tensor],
        mRanges: Optional[cute.Tensor],
        mCounter: Optional[cute.Tensor],
        sQ_layout: cute.ComposedLayout,
        sK_layout: cute.ComposedLayout,
        sVt_layout: cute.ComposedLayout,
        sO_layout: cute.ComposedLayout,
        seqlen_q: Int32,
        seqlen_k: Int32,
        num_heads: Int32,
        num_kv_heads: Int32,
        num_mask_heads: Int32,
        softmax_scale: Float32,
        num_m_blocks: Int32,
        batch: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        num_consumer_warps = self.num_consumer_wg * 4
        producer_group = pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)
        consumer_group = pipeline.CooperativeGroup(pipeline.Agent.Thread, num_consumer_warps)
        pipe_q = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_q.data_ptr(), num_stages=self.q_stages,
            producer_group=producer_group, consumer_group=consumer_group,
            tx_count=self.q_bytes, defer_sync=True)
        pipe_k = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_k.data_ptr(), num_stages=self.stages,
            producer_group=producer_group, consumer_group=consumer_group,
            tx_count=self.k_bytes, defer_sync=True)
        pipe_v = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_v.data_ptr(), num_stages=self.stages,
            producer_group=producer_group, consumer_group=consumer_group,
            tx_count=self.v_bytes, defer_sync=True)

        sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
        sVt = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)
        sO = None
        if cutlass.const_expr(self.tma_store_o):
            sO = storage.sO.get_tensor(sO_layout.outer, swizzle=sO_layout.inner)
        s_meta = storage.meta.get_tensor(cute.make_layout((2, self.stages)))
        s_work = storage.work.get_tensor(cute.make_layout((self.q_stages,)))
        s_bounds = storage.bounds.get_tensor(cute.make_layout(
            (self.tile_n, self.ncols, self.stages),
            stride=(self.ncols, 1, self.tile_n * self.ncols)))

        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_q)
            cpasync.prefetch_descriptor(tma_k)
            cpasync.prefetch_descriptor(tma_v)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        diag_offset = seqlen_k - seqlen_q
        if wg_idx == 0:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == 0:
                self.producer(tma_q, mQ, tma_k, mK, tma_v, mVt, sQ, sK, sVt, s_meta, s_bounds,
                              mIdx, mColMin, mColMax, pipe_q, pipe_k, pipe_v, seqlen_q,
                              seqlen_k, diag_offset, num_heads, num_kv_heads, num_mask_heads,
                              num_m_blocks, batch, mOrder, mRanges, mCounter, s_work)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            self.consumer(tiled_mma_qk, tiled_mma_pv, sQ, sK, sVt, sO, s_meta, s_bounds, mO,
                          tma_o, tma_mO, mLSE,
                          mSink, pipe_q, pipe_k, pipe_v, tidx - self.threads_per_wg, seqlen_q,
                          seqlen_k, diag_offset, softmax_scale, num_heads, num_m_blocks, batch,
                          mOrder, s_work)

    @cute.jit
    def producer(self, tma_q, mQ, tma_k, mK, tma_v, mVt, sQ, sK, sVt, s_meta, s_bounds,
                 mIdx, mColMin, mColMax, pipe_q, pipe_k, pipe_v, seqlen_q, seqlen_k, diag_offset,
                 num_heads, num_kv_heads, num_mask_heads, num_m_blocks: Int32, num_batch: Int32,
                 mOrder: Optional[cute.Tensor], mRanges: Optional[cute.Tensor],
                 mCounter: Optional[cute.Tensor], s_work: cute.Tensor):
        tn = self.tile_n
        lane = cute.arch.lane_idx()
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.q_stages)
        k_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        num_k_tiles = (seqlen_k + tn - 1) // tn
        total = sched.total_work(num_m_blocks, num_heads, num_batch)
        t = sched.first_work()
        block = self.claim_block
        if cutlass.const_expr(self.dynamic):
            t = sched.claim_work(mCounter, lane, block)
        passes = self.claim_passes
        # loop-invariant arguments: of produce_work_tile after the item, of visited_key_tiles
        tile_args = (total, tma_q, mQ, tma_k, mK, tma_v, mVt, sQ, sK, sVt, s_meta, s_bounds,
                     mIdx, mColMin, mColMax, pipe_q, pipe_k, pipe_v, seqlen_q, seqlen_k,
                     diag_offset, num_heads, num_kv_heads, num_mask_heads, num_m_blocks,
                     num_batch, mOrder, mRanges, s_work, num_k_tiles, lane)
        scan_args = (total, mOrder, mRanges, seqlen_q, diag_offset, num_heads, num_mask_heads,
                     num_m_blocks, num_batch, num_k_tiles)
        while t < total * passes:
            if cutlass.const_expr(block > 1):
                # The block's classes first (range reads with no production between them, one
                # bit per item), then its items of this pass (one copy of the producer code
                # each loop); claims past the list end are nobody's pass (t // total >= passes).
                takes = Int32(0)
                for j in cutlass.range(block, unroll=1):
                    tj = t + j
                    visited = self.visited_key_tiles(tj - (tj // total) * total, *scan_args)
                    if sched.claim_pass(visited, num_k_tiles, passes) == tj // total:
                        takes = takes | (Int32(1) << j)
                for j in cutlass.range(block, unroll=1):
                    if (takes >> j) & 1 != 0:
                        tj = t + j
                        q_state, k_state, v_state = self.produce_work_tile(
                            tj - (tj // total) * total, *tile_args, q_state, k_state, v_state)
            else:
                item = t
                if cutlass.const_expr(passes > 1):
                    item = t - (t // total) * total
                if cutlass.const_expr(self.dynamic and self.work_order):
                    item = sched.claimed_item(mOrder, t)  # the item itself is published
                if cutlass.const_expr(passes > 1):
                    if sched.claim_pass(self.visited_key_tiles(item, *scan_args), num_k_tiles,
                                        passes) == t // total:
                        q_state, k_state, v_state = self.produce_work_tile(
                            item, *tile_args, q_state, k_state, v_state)
                else:
                    q_state, k_state, v_state = self.produce_work_tile(
                        item, *tile_args, q_state, k_state, v_state)
            if cutlass.const_expr(self.dynamic):
                t = sched.claim_work(mCounter, lane, block)
            else:
                t = sched.next_work(t)
        if cutlass.const_expr(self.dynamic):
            # End of the schedule: a Q stage with no data whose work tile is past the end.
            pipe_q.sync_object_empty.wait(q_state.index, q_state.phase)
            if lane == 0:
                s_work[q_state.index] = total
            cute.arch.sync_warp()
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive(pipe_q.producer_get_barrier(q_state))

    @cute.jit
    def produce_work_tile(self, item, total, tma_q, mQ, tma_k, mK, tma_v, mVt, sQ, sK, sVt,
                          s_meta, s_bounds, mIdx, mColMin, mColMax, pipe_q, pipe_k, pipe_v,
                          seqlen_q, seqlen_k, diag_offset, num_heads, num_kv_heads,
                          num_mask_heads, num_m_blocks, num_batch, mOrder, mRanges, s_work,
                          num_k_tiles, lane, q_state, k_state, v_state):
        """Producer: Q and the visited K/V tiles of work tile ``item`` (its index published with
        the Q stage under the dynamic schedule), then the end-of-tile sentinel; returns the
        advanced Q, K and V pipeline states (assigned by the caller, so a branch carries them)."""
        tm, tn = self.tile_m, self.tile_n
        m_block, head, batch = sched.work_tile(mOrder, item, total, num_m_blocks, num_heads,
                                               num_batch, self.dynamic)
        kv_head = head // (num_heads // num_kv_heads)
        mask_head = head // (num_heads // num_mask_heads)
        row_begin = m_block * tm
        row_end = cutlass.min(row_begin + tm, seqlen_q)

        gQ = cute.local_tile(mQ[None, None, head, batch], (tm, self.d), (m_block, 0))
        tQsQ, tQgQ = cpasync.tma_partition(tma_q, 0, cute.make_layout(1),
                                           cute.group_modes(sQ, 0, 2),
                                           cute.group_modes(gQ, 0, 2))
        gK = cute.local_tile(mK[None, None, kv_head, batch], (tn, self.d), (None, 0))
        tKsK, tKgK = cpasync.tma_partition(tma_k, 0, cute.make_layout(1),
                                           cute.group_modes(sK, 0, 2),
                                           cute.group_modes(gK, 0, 2))
        gVt = cute.local_tile(mVt[None, None, kv_head, batch], (self.dv, tn), (0, None))
        tVsV, tVgV = cpasync.tma_partition(tma_v, 0, cute.make_layout(1),
                                           cute.group_modes(sVt, 0, 2),
                                           cute.group_modes(gVt, 0, 2))

        scan_args = (m_block, mask_head, batch, row_begin, row_end, mRanges, mColMin, mColMax,
                     seqlen_q, seqlen_k, diag_offset, num_k_tiles, lane)
        if cutlass.const_expr(self.cfg.early_scan):
            # before the wait for a free Q stage, which ends only when the consumers finish the
            # previous work tile: the scan's global loads then no longer delay this tile's first
            # K/V load behind it
            n_begin, n_end, todo, partial_bits, band_bits = self.start_scan(*scan_args)

        if cutlass.const_expr(self.dynamic):
            # The work tile travels with its Q stage: written before the producer's arrive,
            # which completes the stage's barrier together with Q's bytes.
            pipe_q.sync_object_empty.wait(q_state.index, q_state.phase)
            q_bar = pipe_q.producer_get_barrier(q_state)
            with cute.arch.elect_one():
                cute.arch.mbarrier_expect_tx(q_bar, self.q_bytes)
            cute.copy(tma_q, tQgQ, tQsQ[None, q_state.index], tma_bar_ptr=q_bar)
            if lane == 0:
                s_work[q_state.index] = item
            cute.arch.sync_warp()
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive(q_bar)
        else:
            pipe_q.producer_acquire(q_state)
            cute.copy(tma_q, tQgQ, tQsQ[None, q_state.index],
                      tma_bar_ptr=pipe_q.producer_get_barrier(q_state))
        q_state.advance()

        if cutlass.const_expr(not self.cfg.early_scan):
            n_begin, n_end, todo, partial_bits, band_bits = self.start_scan(*scan_args)
        for chunk in cutlass.range(n_begin // 32, (n_end + 31) // 32, unroll=1):
            # Visit only the set bits of the chunk, lowest first: a chunk of skipped tiles
            # (most chunks of a document mask) costs one ballot, not 32 loop trips.
            while todo != Uint32(0):
                lowest = todo & (Uint32(0) - todo)
                todo = todo ^ lowest
                bit = Int32(31) - Int32(cute.arch.clz(lowest))
                n_block = chunk * 32 + bit
                is_partial = (partial_bits >> bit) & 1
                if cutlass.const_expr(self.cfg.diagonal_partials):
                    # kind 2: partial, but the bands touch no row: diagonal and edge only
                    is_partial = is_partial * (Int32(2) - Int32((Uint32(band_bits) >> bit) & 1))
                # K and V loads start first; the tile's metadata and bounds are staged
                # while they fly. The K stage's full barrier completes only after both
                # the TMA bytes and the arrive below, which follows the staging, so the
                # bounds still travel in lockstep with K.
                pipe_k.sync_object_empty.wait(k_state.index, k_state.phase)
                k_bar = pipe_k.producer_get_barrier(k_state)
                with cute.arch.elect_one():
                    cute.arch.mbarrier_expect_tx(k_bar, self.k_bytes)
                cute.copy(tma_k, tKgK[None, n_block], tKsK[None, k_state.index],
                          tma_bar_ptr=k_bar)
                pipe_v.producer_acquire(v_state)
                cute.copy(tma_v, tVgV[None, n_block], tVsV[None, v_state.index],
                          tma_bar_ptr=pipe_v.producer_get_barrier(v_state))
                if lane == 0:
                    s_meta[0, k_state.index] = n_block
                    s_meta[1, k_state.index] = is_partial
                if cutlass.const_expr(self.mask_columns is not None):
                    if is_partial == 1:  # kind 2 needs no column values
                        self.stage_bounds(mIdx, s_bounds, k_state.index, n_block,
                                          mask_head, batch, seqlen_k, lane)
                cute.arch.sync_warp()
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive(k_bar)
                k_state.advance()
                v_state.advance()
            # the next chunk's classification; none after the last chunk, whose summary read
            # and ballots would only delay the sentinel
            if chunk + 1 < (n_end + 31) // 32:
                todo, partial_bits, band_bits = self.classify_chunk(
                    mColMin, mColMax, chunk + 1, lane, n_begin, n_end, row_begin, row_end,
                    seqlen_q, seqlen_k, diag_offset, mask_head, batch)
        # Sentinel: a K stage with no data and key-tile index -1 ends this work tile.
        pipe_k.sync_object_empty.wait(k_state.index, k_state.phase)
        if lane == 0:
            s_meta[0, k_state.index] = -1
            s_meta[1, k_state.index] = 0
        cute.arch.sync_warp()
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(pipe_k.producer_get_barrier(k_state))
        k_state.advance()
        return q_state, k_state, v_state

    @cute.jit
    def start_scan(self, m_block, mask_head, batch, row_begin, row_end, mRanges, mColMin, mColMax,
                   seqlen_q, seqlen_k, diag_offset, num_k_tiles, lane):
        """The producer's key-tile scan of a query tile and its first chunk's classification:
        ``(n_begin, n_end, visit_bits, partial_bits, band_bits)`` (:meth:`key_tile_scan`,
        :meth:`classify_chunk`); the scan loop classifies each next chunk at the end of the one
        before."""
        n_begin, n_end = self.key_tile_scan(m_block, mask_head, batch, row_end, mRanges,
                                            diag_offset, num_k_tiles)
        todo, partial_bits, band_bits = Uint32(0), Int32(0), Int32(-1)
        if n_end > n_begin:  # an empty scan reads no summary (its probe would be out of range)
            todo, partial_bits, band_bits = self.classify_chunk(
                mColMin, mColMax, n_begin // 32, lane, n_begin, n_end, row_begin, row_end,
                seqlen_q, seqlen_k, diag_offset, mask_head, batch)
        return n_begin, n_end, todo, partial_bits, band_bits

    def classify_chunk(self, mColMin, mColMax, chunk, lane, n_begin, n_end, row_begin, row_end,
                       seqlen_q, seqlen_k, diag_offset, mask_head, batch):
        """``(visit_bits, partial_bits, band_bits)`` of key-tile chunk ``chunk`` of the producer's
        scan (``fm_mask.chunk_visit_bits``); ``band_bits`` only with ``diagonal_partials``, else
        all set (every partial tile needs its column values); typed as the scan's loop carries them."""
        if cutlass.const_expr(self.cfg.diagonal_partials):
            todo, partial_bits, band_bits = fm_mask.chunk_visit_bits(
                mColMin, mColMax, chunk, lane, n_begin, n_end, row_begin, row_end, self.tile_n,
                seqlen_q, seqlen_k, diag_offset, mask_head, batch, self.causal,
                self.mask_columns, True)
            return Uint32(todo), Int32(partial_bits), Int32(band_bits)
        todo, partial_bits = fm_mask.chunk_visit_bits(
            mColMin, mColMax, chunk, lane, n_begin, n_end, row_begin, row_end, self.tile_n,
            seqlen_q, seqlen_k, diag_offset, mask_head, batch, self.causal, self.mask_columns)
        return Uint32(todo), Int32(partial_bits), Int32(-1)

    def key_tile_scan(self, m_block, mask_head, batch, row_end, mRanges, diag_offset,
                      num_k_tiles):
        """``(n_begin, n_end)``: the key tiles the producer scans for a query tile. Those right of
        the causal diagonal of its last row are never visited; with tile ranges, neither are
        those outside the query tile's [n_lo, n_hi). ``n_begin`` is the Python int 0 without
        tile ranges (``chunk_visit_bits`` then traces no lower bound)."""
        n_end = fm_mask.key_tile_end(row_end, diag_offset, self.tile_n, num_k_tiles, self.causal)
        n_begin = 0
        if cutlass.const_expr(self.tile_ranges):
            n_begin = mRanges[0, m_block, mask_head, batch]
            n_end = cutlass.min(n_end, mRanges[1, m_block, mask_head, batch])
        return n_begin, n_end

    @cute.jit
    def visited_key_tiles(self, item, total, mOrder, mRanges, seqlen_q, diag_offset, num_heads,
                          num_mask_heads, num_m_blocks, num_batch, num_k_tiles):
        """The length of the key-tile scan of work tile ``item`` (:meth:`key_tile_scan`), the
        measure of its claim class (``claim_passes``)."""
        m_block, head, batch = sched.work_tile(mOrder, item, total, num_m_blocks, num_heads,
                                               num_batch, self.dynamic)
        row_end = cutlass.min(m_block * self.tile_m + self.tile_m, seqlen_q)
        n_begin, n_end = self.key_tile_scan(m_block, head // (num_heads // num_mask_heads),
                                            batch, row_end, mRanges, diag_offset, num_k_tiles)
        return cutlass.max(n_end - n_begin, Int32(0))

    @cute.jit
    def stage_bounds(self, mIdx: cute.Tensor, s_bounds: cute.Tensor, stage: Int32,
                     n_block: Int32, mask_head: Int32, batch: Int32, seqlen_k: Int32, lane: Int32):
        """Copy one key tile's ``tile_n * C`` column values into its shared-memory stage (one warp).

        Loads go out in batches of ``BOUNDS_BATCH`` independent loads per lane before their stores,
        so a tile costs ``ceil(tile_n * C / (32 * BOUNDS_BATCH))`` memory round trips rather than
        one per value (few live registers: the producer runs on ``producer_regs``). The last batch
        is guarded when ``tile_n * C`` is not a multiple of 32 (e.g. tile_n 112 with C = 1).
        """
        c = self.mask_columns
        total = self.tile_n * c
        col0 = n_block * self.tile_n
        per_batch = 32 * BOUNDS_BATCH
        num_batches = (total + per_batch - 1) // per_batch
        guarded = num_batches * per_batch != total
        for batch_idx in cutlass.range(num_batches, unroll=1):
            values = []
            for j in cutlass.range_constexpr(BOUNDS_BATCH):
                flat = batch_idx * per_batch + j * 32 + lane
                col = flat // c
                k = flat - col * c
                # a column past Sk (or past the tile) reads an in-bounds key; its store is
                # dropped or zeroed below (the sequence-edge rule masks such columns anyway)
                key = cutlass.min(col0 + col, seqlen_k - 1)
                values.append(mIdx[k, key, mask_head, batch])
            for j in cutlass.range_constexpr(BOUNDS_BATCH):
                flat = batch_idx * per_batch + j * 32 + lane
                col = flat // c
                k = flat - col * c
                value = values[j]
                if col0 + col >= seqlen_k:
                    value = Int32(0)
                if cutlass.const_expr(guarded):
                    if flat < total:
                        s_bounds[col, k, stage] = value
                else:
                    s_bounds[col, k, stage] = value

    @cute.jit
    def consumer(self, tiled_mma_qk, tiled_mma_pv, sQ, sK, sVt, sO, s_meta, s_bounds, mO,
                 tma_o, tma_mO, mLSE,
                 mSink, pipe_q, pipe_k, pipe_v, ctidx: Int32, seqlen_q, seqlen_k, diag_offset,
                 softmax_scale: Float32, num_heads: Int32, num_m_blocks: Int32, num_batch: Int32,
                 mOrder: Optional[cute.Tensor], s_work: cute.Tensor):
        tm, tn = self.tile_m, self.tile_n
        thr_qk = tiled_mma_qk.get_slice(ctidx)
        thr_pv = tiled_mma_pv.get_slice(ctidx)
        thr_q = thr_qk
        if cutlass.const_expr(self.cfg.uniform_q):  # Q's descriptors depend on the WG only
            thr_q = tiled_mma_qk.get_slice(
                cute.arch.make_warp_uniform(ctidx // self.threads_per_wg) * self.threads_per_wg)
        tSrQ = thr_q.make_fragment_A(thr_q.partition_A(sQ))
        tSrK = thr_qk.make_fragment_B(thr_qk.partition_B(sK))
        tOrVt = thr_pv.make_fragment_B(thr_pv.partition_B(sVt))
        acc_S = thr_qk.make_fragment_C(thr_qk.partition_shape_C((tm, tn)))
        acc_O = thr_pv.make_fragment_C(thr_pv.partition_shape_C((tm, self.dv)))
        tOrP = cute.make_rmem_tensor(_acc_to_a_operand(acc_S.layout), self.dtype)
        tOrP_as_acc = cute.make_tensor(tOrP.iterator, acc_S.layout)
        tScS_mn = acc_mn_view(thr_qk.partition_C(cute.make_identity_tensor((tm, tn))))
        tOcO = thr_pv.partition_C(cute.make_identity_tensor((tm, self.dv)))
        tOcO_mn = acc_mn_view(tOcO)
        num_rows = cute.size(tScS_mn, mode=[0])
        scale_log2 = softmax_scale * Float32(LOG2_E)
        row_max = cute.make_rmem_tensor(cute.make_layout(num_rows), Float32)
        row_sum = cute.make_rmem_tensor(cute.make_layout(num_rows), Float32)
        row_scale = cute.make_rmem_tensor(cute.make_layout(num_rows), Float32)
        lse = cute.make_rmem_tensor(cute.make_layout(num_rows), Float32)

        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.q_stages)
        k_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        mma_qk = cute.make_mma_atom(tiled_mma_qk.op)
        mma_pv = cute.make_mma_atom(tiled_mma_pv.op)
        mma_pv.set(warpgroup.Field.ACCUMULATE, True)

        total = sched.total_work(num_m_blocks, num_heads, num_batch)
        cwg = ctidx // self.threads_per_wg
        # three warpgroups: the one this one hands the turn to, computed once here (computed per
        # turn it costs the loop a register, and at 160 the d64 C=2 + sink variant spills)
        next_wg = cwg
        if cutlass.const_expr(self.pingpong and self.num_consumer_wg > 2):
            next_wg = cute.arch.make_warp_uniform((cwg + 1) % self.num_consumer_wg)
        # Same per-thread C fragment as thr_pv, but over this warpgroup's own 64-row slab.
        thr_pv_wg = None
        if cutlass.const_expr(self.tma_store_o):
            tiled_mma_pv_wg = sm90_utils.make_trivial_tiled_mma(
                self.dtype, self.dtype, warpgroup.OperandMajorMode.K,
                warpgroup.OperandMajorMode.MN, Float32, atom_layout_mnk=(1, 1, 1),
                tiler_mn=(64, self.dv), a_source=warpgroup.OperandSource.RMEM)
            # stmatrix: one 16-byte smem address per 8x8 block pair instead of one per element.
            store_atom = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4),
                                             self.dtype)
            thr_pv_wg = cute.make_tiled_copy_C(store_atom, tiled_mma_pv_wg).get_slice(
                ctidx % self.threads_per_wg)
        if cutlass.const_expr(self.pingpong):
            if cwg == 0:  # the first consumer warpgroup takes the first turn
                cute.arch.barrier_arrive(barrier_id=self.sched_barrier_base,
                                         number_of_threads=2 * self.threads_per_wg)
        t = sched.first_work()
        if cutlass.const_expr(self.dynamic):
            pipe_q.consumer_wait(q_state)  # the work tile arrives with its Q stage
            t = s_work[q_state.index]
        while t < total:
            m_block, head, batch = sched.work_tile(mOrder, t, total, num_m_blocks, num_heads,
                                                   num_batch, self.dynamic)
            row_base = m_block * tm
            row_max.fill(-Float32.inf)
            row_sum.fill(0.0)
            acc_O.fill(0.0)
            if cutlass.const_expr(not self.dynamic):
                pipe_q.consumer_wait(q_state)
            q_idx = q_state.index
            pipe_k.consumer_wait(k_state)
            n_block = s_meta[0, k_state.index]
            is_partial = s_meta[1, k_state.index]
            if cutlass.const_expr(not self.overlap):
                while n_block >= 0:
                    # One key tile at a time: S, mask (partial only), softmax, O += P·V.
                    self.issue_qk(mma_qk, acc_S, tSrQ, tSrK, q_idx, k_state.index)
                    warpgroup.wait_group(0)
                    self.mask_scores(acc_S, tScS_mn, s_bounds, k_state.index, is_partial,
                                     row_base, n_block, seqlen_q, seqlen_k, diag_offset)
                    pipe_k.consumer_release(k_state)
                    k_state.advance()
                    moved = fm_softmax.online_update(acc_S, row_max, row_sum, row_scale,
                                                     scale_log2, self.cfg.rescale_threshold,
                                                     self.cfg.row_max_chains,
                                                     self.cfg.row_max_rowwise,
                                                     self.cfg.row_sum_chains)
                    self.rescale_o(acc_O, row_scale, moved)
                    tOrP_as_acc.store(acc_S.load().to(self.dtype))
                    pipe_v.consumer_wait(v_state)
                    self.issue_pv(mma_pv, acc_O, tOrP, tOrVt, v_state.index)
                    warpgroup.wait_group(0)
                    pipe_v.consumer_release(v_state)
                    v_state.advance()
                    pipe_k.consumer_wait(k_state)
                    n_block = s_meta[0, k_state.index]
                    is_partial = s_meta[1, k_state.index]
            else:
                if n_block >= 0:
                    # First key tile: S, mask, softmax; its P·V is issued with the next tile's S.
                    self.issue_qk(mma_qk, acc_S, tSrQ, tSrK, q_idx, k_state.index)
                    warpgroup.wait_group(0)
                    self.mask_scores(acc_S, tScS_mn, s_bounds, k_state.index, is_partial, row_base,
                                     n_block, seqlen_q, seqlen_k, diag_offset)
                    pipe_k.consumer_release(k_state)
                    k_state.advance()
                    fm_softmax.online_update(acc_S, row_max, row_sum, row_scale, scale_log2,
                                             self.cfg.rescale_threshold, self.cfg.row_max_chains,
                                             self.cfg.row_max_rowwise, self.cfg.row_sum_chains)
                    fm_softmax.convert_pairs(acc_S, tOrP_as_acc)
                    pipe_k.consumer_wait(k_state)
                    n_block = s_meta[0, k_state.index]
                    is_partial = s_meta[1, k_state.index]
                    while n_block >= 0:
                        # Overlap: the tensor cores run S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1}
                        # while this warpgroup masks and exponentiates S_j.
                        self.turn_wait(cwg)
                        self.issue_qk(mma_qk, acc_S, tSrQ, tSrK, q_idx, k_state.index)
                        pipe_v.consumer_wait(v_state)
                        self.issue_pv(mma_pv, acc_O, tOrP, tOrVt, v_state.index)
                        self.turn_pass(cwg, next_wg)
                        if cutlass.const_expr(self.cfg.partial_overlap):
                            # S_j's group is the older one: complete after wait_group(1), while
                            # P_{j-1}·V_{j-1} still runs under the mask code
                            warpgroup.wait_group(1)
                            self.mask_scores(acc_S, tScS_mn, s_bounds, k_state.index, is_partial,
                                             row_base, n_block, seqlen_q, seqlen_k, diag_offset)
                        elif is_partial != 0:
                            # Partial tile: let P·V drain first so the mask code does not compete
                            # with the registers pinned by an in-flight wgmma.
                            warpgroup.wait_group(0)
                            self.mask_scores(acc_S, tScS_mn, s_bounds, k_state.index, is_partial,
                                             row_base, n_block, seqlen_q, seqlen_k, diag_offset)
                        else:
                            warpgroup.wait_group(1)
                        pipe_k.consumer_release(k_state)
                        k_state.advance()
                        moved = fm_softmax.online_update(acc_S, row_max, row_sum, row_scale,
                                                         scale_log2, self.cfg.rescale_threshold,
                                                         self.cfg.row_max_chains,
                                                     self.cfg.row_max_rowwise,
                                                     self.cfg.row_sum_chains)
                        # ptxas hoists this wait (with K's release) to the start of the row max
                        # when the lazy rescale's branch is the first reader of O. Keeping both
                        # behind the exponentials (K's release made data-dependent on the sum)
                        # was 6-11 % slower on every mask (H200 call 155): keep the early wait.
                        warpgroup.wait_group(0)
                        pipe_v.consumer_release(v_state)
                        v_state.advance()
                        self.rescale_o(acc_O, row_scale, moved)
                        fm_softmax.convert_pairs(acc_S, tOrP_as_acc)
                        pipe_k.consumer_wait(k_state)
                        n_block = s_meta[0, k_state.index]
                        is_partial = s_meta[1, k_state.index]
                    pipe_v.consumer_wait(v_state)
                    self.issue_pv(mma_pv, acc_O, tOrP, tOrVt, v_state.index)
                    warpgroup.wait_group(0)
                    pipe_v.consumer_release(v_state)
                    v_state.advance()
            pipe_k.consumer_release(k_state)  # the sentinel stage
            k_state.advance()
            pipe_q.consumer_release(q_state)
            q_state.advance()

            sink = None
            if cutlass.const_expr(self.has_sink):
                sink = Float32(mSink[head])
            fm_softmax.finalize(acc_O, row_max, row_sum, lse, softmax_scale, sink)
            if cutlass.const_expr(self.tma_store_o):
                self.store_output_tma(acc_O, thr_pv_wg, sO, tma_o, tma_mO, cwg, m_block, head,
                                      batch)
                self.store_lse(tOcO_mn, lse, mLSE, row_base, head, batch, seqlen_q)
            else:
                self.store_output(acc_O, tOcO, tOcO_mn, lse, mO, mLSE, row_base, head, batch,
                                  seqlen_q)
            if cutlass.const_expr(self.dynamic):
                pipe_q.consumer_wait(q_state)
                t = s_work[q_state.index]
            else:
                t = sched.next_work(t)
        if cutlass.const_expr(self.tma_store_o):
            if ctidx % self.threads_per_wg == 0:
                cute.arch.cp_async_bulk_wait_group(0)  # stores must land before the CTA exits

    @cute.jit
    def rescale_o(self, acc_O, row_scale, moved):
        """O *= each row's rescale; with a rescale threshold only where a row of this warp moved
        its max (otherwise every rescale is exactly 1)."""
        if cutlass.const_expr(self.cfg.rescale_threshold > 0.0):
            if cute.arch.vote_any_sync(moved):
                fm_softmax.rescale_o(acc_O, row_scale)
        else:
            fm_softmax.rescale_o(acc_O, row_scale)

    @cute.jit
    def turn_wait(self, cwg: Int32):
        """Ping-pong: wait until it is this warpgroup's turn to issue GEMMs (its softmax then
        overlaps the other warpgroup's GEMMs)."""
        if cutlass.const_expr(self.pingpong):
            cute.arch.barrier(barrier_id=self.sched_barrier_base + cwg,
                              number_of_threads=2 * self.threads_per_wg)

    @cute.jit
    def turn_pass(self, cwg: Int32, next_wg: Int32):
        """Hand the turn to the next consumer warpgroup (round robin; ``next_wg`` is used with
        three warpgroups)."""
        if cutlass.const_expr(self.pingpong):
            if cutlass.const_expr(self.num_consumer_wg == 2):
                cute.arch.barrier_arrive(barrier_id=self.sched_barrier_base + 1 - cwg,
                                         number_of_threads=2 * self.threads_per_wg)
            else:
                cute.arch.barrier_arrive(barrier_id=self.sched_barrier_base + next_wg,
                                         number_of_threads=2 * self.threads_per_wg)

    @cute.jit
    def issue_qk(self, mma_qk, acc_S, tSrQ, tSrK, q_idx, k_idx):
        warpgroup.fence()
        mma_qk.set(warpgroup.Field.ACCUMULATE, False)
        if cutlass.const_expr(self.cfg.stage_first):
            rQ, rK = tSrQ[None, None, None, q_idx], tSrK[None, None, None, k_idx]
        for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
            if cutlass.const_expr(self.cfg.stage_first):
                cute.gemm(mma_qk, acc_S, rQ[None, None, kb], rK[None, None, kb], acc_S)
            else:
                cute.gemm(mma_qk, acc_S, tSrQ[None, None, kb, q_idx],
                          tSrK[None, None, kb, k_idx], acc_S)
            mma_qk.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.commit_group()

    @cute.jit
    def issue_pv(self, mma_pv, acc_O, tOrP, tOrVt, v_idx):
        warpgroup.fence()
        if cutlass.const_expr(self.cfg.stage_first):
            rVt = tOrVt[None, None, None, v_idx]
        for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
            if cutlass.const_expr(self.cfg.stage_first):
                cute.gemm(mma_pv, acc_O, tOrP[None, None, kb], rVt[None, None, kb], acc_O)
            else:
                cute.gemm(mma_pv, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb, v_idx],
                          acc_O)
        warpgroup.commit_group()

    @cute.jit
    def mask_scores(self, acc_S, tScS_mn, s_bounds, stage, is_partial, row_base, n_block,
                    seqlen_q, seqlen_k, diag_offset):
        """Element mask for partial tiles only; full tiles skip this code at run time. With
        ``diagonal_partials`` a kind-2 tile (bands touch none of its rows) is masked by the
        causal diagonal and the sequence edge only, without its column values."""
        if cutlass.const_expr(self.cfg.diagonal_partials):
            col_base = n_block * self.tile_n
            if is_partial == 1:
                fm_mask.apply_element_mask(acc_mn_view(acc_S), tScS_mn,
                                           s_bounds[None, None, stage], row_base, col_base,
                                           seqlen_q, seqlen_k, diag_offset, self.causal,
                                           self.ncols, False, self.edge_tile_n,
                                           self.mask_pred_chain)
            elif is_partial == 2:  # no column values: one column limit per row
                fm_mask.apply_element_mask(acc_mn_view(acc_S), tScS_mn, None, row_base,
                                           col_base, seqlen_q, seqlen_k, diag_offset, self.causal,
                                           self.ncols, True)
        elif is_partial != 0:
            bounds = None
            if cutlass.const_expr(self.mask_columns is not None):
                bounds = s_bounds[None, None, stage]
            fm_mask.apply_element_mask(
                acc_mn_view(acc_S), tScS_mn, bounds, row_base, n_block * self.tile_n, seqlen_q,
                seqlen_k, diag_offset, self.causal, self.ncols, False, self.edge_tile_n,
                self.mask_pred_chain)

    @cute.jit
    def store_output_tma(self, acc_O, thr_pv_wg, sO, tma_o, tma_mO, cwg, m_block, head, batch):
        """Registers -> this warpgroup's smem slab -> TMA store of 64 rows x Dv."""
        wg_barrier = self.epi_barrier_base + cwg
        leader = (cute.arch.thread_idx()[0] % self.threads_per_wg) == 0
        sO_wg = sO[None, None, cwg]
        if leader:
            cute.arch.cp_async_bulk_wait_group(0, read=True)  # previous store done reading
        cute.arch.barrier(barrier_id=wg_barrier, number_of_threads=self.threads_per_wg)
        rO = cute.make_rmem_tensor(acc_O.layout, self.dtype)
        rO.store(acc_O.load().to(self.dtype))
        cute.copy(thr_pv_wg, thr_pv_wg.retile(rO), thr_pv_wg.partition_D(sO_wg))
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=wg_barrier, number_of_threads=self.threads_per_wg)
        if leader:
            gO = cute.local_tile(tma_mO[None, None, head, batch], (64, self.dv),
                                 (m_block * self.num_consumer_wg + cwg, 0))
            tOsO_tma, tOgO_tma = cpasync.tma_partition(
                tma_o, 0, cute.make_layout(1), cute.group_modes(sO_wg, 0, 2),
                cute.group_modes(gO, 0, 2))
            cute.copy(tma_o, tOsO_tma, tOgO_tma)
            cute.arch.cp_async_bulk_commit_group()

    @cute.jit
    def store_lse(self, tOcO_mn, lse, mLSE, row_base, head, batch, seqlen_q):
        if tOcO_mn[0, 0][1] == 0:
            for r in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[0])):
                row = row_base + tOcO_mn[r, 0][0]
                if row < seqlen_q:
                    mLSE[row, head, batch] = lse[r]

    @cute.jit
    def store_output(self, acc_O, tOcO, tOcO_mn, lse, mO, mLSE, row_base, head, batch,
                     seqlen_q):
        rO = cute.make_rmem_tensor(acc_O.layout, self.dtype)
        rO.store(acc_O.load().to(self.dtype))
        gO = mO[None, None, head, batch]
        for i in cutlass.range_constexpr(cute.size(rO)):
            row = row_base + tOcO[i][0]
            if row < seqlen_q:
                gO[row, tOcO[i][1]] = rO[i]
        if tOcO_mn[0, 0][1] == 0:
            for r in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[0])):
                row = row_base + tOcO_mn[r, 0][0]
                if row < seqlen_q:
                    mLSE[row, head, batch] = lse[r]


# ----------------------------------------------------------------------------------------------
# Host API
# ----------------------------------------------------------------------------------------------

def _placeholder_ptr(dtype, align: int):
    return cute.runtime.make_ptr(dtype, 1 << 12, cute.AddressSpace.gmem, assumed_align=align)


class CompiledForward:
    """A compiled forward variant. Call it with cute tensors (``cute.runtime.from_dlpack``):

    ``fwd(q, k, v, out, lse, startend_row_indices, col_min, col_max, learnable_sink,
    softmax_scale, stream, num_sms)``

    q ``[B,Sq,H,D]``, k ``[B,Sk,Hk,D]``, v ``[B,Sk,Hk,Dv]``, out ``[B,Sq,H,Dv]`` (bf16/fp16,
    contiguous, 16-byte aligned), lse fp32 ``[B,H,Sq]``; ``startend_row_indices`` int32
    ``[B,Hm,Sk,C]`` and ``col_min``/``col_max`` int32 ``[B,Hm,ceil(Sk/tile_n),C]`` (the tile
    summary with ``tile_n = config.tile_n``), or None for plain attention; learnable_sink fp32
    ``[H]`` or None. ``stream`` is a CUDA stream handle (int or ``CUstream``); ``num_sms`` sizes
    the persistent grid. ``work_order`` (only with ``config.work_order``): int32
    ``[B * H * ceil(Sq / tile_m)]`` from ``work_order_kernel`` on the same stream.
    """

    def __init__(self, config: FwdConfig, compiled):
        self.config = config
        self.compiled = compiled

    def __call__(self, q, k, v, out, lse, startend_row_indices, col_min, col_max,
                 learnable_sink, softmax_scale: float, stream, num_sms: int = 132,
                 work_order=None, tile_ranges=None, schedule_counter=None) -> None:
        cfg = self.config
        b, sq, h, sk, hk, hm = check_variant_call(
            q, k, v, startend_row_indices, learnable_sink, head_dim=cfg.head_dim,
            head_dim_v=cfg.head_dim_v, mask_columns=cfg.mask_columns, has_sink=cfg.has_sink)
        if sq == 0 or b == 0 or h == 0:
            return
        if sk == 0:  # a TMA descriptor cannot describe an empty K/V; the answer needs no kernel
            raise ValueError("seqlen_k: expected >= 1 for the cute forward kernel, found 0 (the "
                             "caller fills out = 0 and lse = -inf, or = sink, for Sk == 0)")
        dt = _DTYPES[cfg.dtype]
        ptr = gmem_ptr
        i32 = int32_arg  # one Int32 object per value (launch_args.int32_arg)

        num_m_blocks = -(-sq // cfg.tile_m)
        if (work_order is None) == cfg.work_order:
            raise ValueError(f"work_order: expected {'an int32 buffer' if cfg.work_order else 'None'}"
                             f" for this variant (work_order={cfg.work_order}), found "
                             f"{type(work_order).__name__}")
        if work_order is not None and hasattr(work_order, "shape"):
            length = math.prod(int(x) for x in work_order.shape)
            if length != b * h * num_m_blocks:
                raise ValueError(f"work_order: expected {b * h * num_m_blocks} items "
                                 f"(B * H * ceil(Sq / tile_m)), found {length}")
        if (tile_ranges is None) == cfg.tile_ranges:
            raise ValueError(f"tile_ranges: expected {'an int32 buffer' if cfg.tile_ranges else 'None'}"
                             f" for this variant (tile_ranges={cfg.tile_ranges}), found "
                             f"{type(tile_ranges).__name__}")
        if (schedule_counter is None) == cfg.dynamic_schedule:
            raise ValueError(f"schedule_counter: expected "
                             f"{'an int32 buffer of >= 1 element' if cfg.dynamic_schedule else 'None'}"
                             f" for this variant (dynamic_schedule={cfg.dynamic_schedule}), found "
                             f"{type(schedule_counter).__name__}")
        grid = sched.grid_size(num_m_blocks, h, b, num_sms)
        if not isinstance(stream, cuda.CUstream):
            stream = cuda.CUstream(int(stream))
        if schedule_counter is not None:  # the dynamic schedule starts at work tile 0
            sched.reset_counter(schedule_counter, stream)
        launch(
            self.compiled,
            ptr(q, dt, 16), ptr(k, dt, 16), ptr(v, dt, 16), ptr(out, dt, 16),
            ptr(lse, Float32, 4), ptr(startend_row_indices, Int32, 4), ptr(col_min, Int32, 4),
            ptr(col_max, Int32, 4), ptr(learnable_sink, Float32, 4), ptr(work_order, Int32, 4),
            ptr(tile_ranges, Int32, 4), ptr(schedule_counter, Int32, 4), i32(b),
            i32(sq), i32(sk), i32(h), i32(hk), i32(hm),
            float32_arg(float(softmax_scale)), i32(grid), stream)


def compile_forward(config: FwdConfig) -> CompiledForward:
    """Compile one forward variant (no GPU needed with ``CUTE_DSL_ARCH=sm_90a``)."""
    dt = _DTYPES[config.dtype]
    has_mask = config.mask_columns is not None
    kernel = FlashFwdSm90(config)
    args = (
        _placeholder_ptr(dt, 16), _placeholder_ptr(dt, 16), _placeholder_ptr(dt, 16),
        _placeholder_ptr(dt, 16), _placeholder_ptr(Float32, 4),
        _placeholder_ptr(Int32, 4) if has_mask else None,
        _placeholder_ptr(Int32, 4) if has_mask else None,
        _placeholder_ptr(Int32, 4) if has_mask else None,
        _placeholder_ptr(Float32, 4) if config.has_sink else None,
        _placeholder_ptr(Int32, 4) if config.work_order else None,
        _placeholder_ptr(Int32, 4) if config.tile_ranges else None,
        _placeholder_ptr(Int32, 4) if config.dynamic_schedule else None,
        Int32(1), Int32(128), Int32(128), Int32(1), Int32(1), Int32(1), Float32(1.0), Int32(1),
        cuda.CUstream(0),
    )
    compiled = cute.compile(kernel, *args)
    if kernel.smem_bytes > config.shared_memory_bytes():  # FwdConfig's check relies on it
        raise RuntimeError(f"compile_forward: {config} traced {kernel.smem_bytes} B of shared "
                           f"memory, more than FwdConfig.shared_memory_bytes() "
                           f"{config.shared_memory_bytes()} B: update _shared_memory_bytes")
    result = CompiledForward(config, compiled)
    result.smem_bytes = kernel.smem_bytes
    return result
