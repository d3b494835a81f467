"""``BwdConfig``: the compile-time parameters of the SM90 backward main kernel.

A frozen dataclass (the compile cache's key). Its unset fields are filled by the host rules of
``bwd_rules`` (``default_*``, env switches) in ``__post_init__``; its properties derive what the
kernel, the pre/postprocess and the host need (shared-memory fit, dQ staging, dK/dV route).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from paddle_flashmask import semantics

from .bwd_layout import (_CONV_SPARE, _DQ_PAD, _DQ_PAD_TRANSPOSED, _SMEM_BYTES,
                         _SMEM_OVERHEAD)
from .bwd_rules import (DET_SYNC_MODES, TILE_M_CHOICES, default_tile_n, deterministic_has_tile_m,
                        tall_tile_head_dim)
from .flash_bwd_prepost import ROWS_PER_CTA, _dsl_dtype, row_padding

_SUPPORTED_DIMS = {(64, 64), (96, 96), (128, 128), (192, 128), (256, 256)}


@dataclass(frozen=True)
class BwdConfig:
    """Compile-time parameters of the backward main kernel (frozen, hashable: a cache key).

    ``num_columns`` is C of ``startend_row_indices`` or None for plain causal / full attention.
    ``gqa``: H != Hk, so dK/dV are written as fp32 per-query-head partials (see module doc).
    """

    dtype: str
    head_dim: int
    head_dim_v: int
    causal: bool
    num_columns: Optional[int]
    gqa: bool = False
    has_sink: bool = False
    deterministic: bool = False
    # Query rows per tile (TILE_M_CHOICES). 80 (``tall_tile_applies``): the S^T / dP^T GEMMs are
    # 64 x 80 per warpgroup, dV / dK take K = 80, and dQ is computed transposed (dQ^T = K^T dS^T,
    # M = D over the two warpgroups, N = 80) and staged transposed into the row-major dQ tile.
    # The per-row buffers are padded to row_padding(tile_m) rows. The host's choice:
    # default_tile_m.
    tile_m: int = ROWS_PER_CTA
    tile_n: int = 0  # 0 = default_tile_n(head_dim)
    # dV/dK wgmma with P^T/dS^T from registers (tile_n = 128 only); the host API turns it on
    # where it applies (default_rs_dkv).
    rs_dkv: bool = False
    # Each role walks only the query tiles [m_lo, m_hi) that the key tile's bounds allow, found by
    # one warp ballot per 32 query tiles, instead of testing every query tile of the sequence.
    # The host API turns it on for masks (default_row_ranges).
    row_ranges: bool = False
    # GQA: one CTA per (key tile, KV head) walks the query heads of its group one after the other,
    # adding into the same dK/dV registers, and writes dK/dV once in the input dtype: no fp32
    # per-query-head partials and no reduction kernel. The host's default for GQA since the H200
    # check (default_gqa_in_cta).
    gqa_in_cta: bool = False
    # Persistent grid of ``persistent_ctas`` CTAs (0: one CTA per key tile): each claims its next
    # (key tile, head, batch) from a counter, so the next tile's K/V load overlaps this tile's
    # dK/dV epilogue and no CTA is launched per tile. Not with deterministic (its ordering relies
    # on block dispatch). The host's default since the H200 check (default_persistent_ctas).
    persistent_ctas: int = 0
    # Persistent grid's claim order: False = a head's key tiles consecutive (K/V and Q/dO of one
    # head shared in L2 by the CTAs running it); True = key-tile major (tile n of every head, then
    # n + 1): with documents the list then ends on the light last tiles of the last documents of
    # *all* heads, not on the sawtooth of one head (a CPU simulation of 16 documents at 32K: 3 % of
    # tail idle -> 1 %).
    key_major: bool = False
    # Persistent grid: claims run ``claim_passes`` times over the tile list; pass p takes only the
    # key tiles of work class p (tile_scheduler.claim_pass: visiting >= 1/4 of the query tiles,
    # >= 1/16, ..., the rest), so heavy key tiles start first wherever they are in the list (the
    # global tokens' tile of every head, the first tiles of long documents) and the grid ends on
    # light ones. 1 = the list once, in order. The host's choice: default_claim_passes.
    claim_passes: int = 1
    # Deterministic mode's dQ chains: 1 = every key tile visiting a query tile adds into one fp32
    # accumulator in decreasing key-tile order (each add waits for the previous one); 2 = even and
    # odd key tiles keep separate chains and accumulators, summed in a fixed order by the
    # postprocess, so each add waits for the tile two ahead: twice the slack for the chain's
    # per-step latency (bulk-reduce completion + semaphore hand-off). Needs dQ staged in smem.
    dq_chains: int = 1
    # Deterministic mode, dQ in smem: the dQ writer publishes a query tile's add (waits for its
    # completion in global memory, then releases the semaphore) at its next tile, after freeing
    # the staging buffer, instead of before: the completion wait no longer holds the consumers.
    lazy_release: bool = False
    # Q/dO pipeline stages. 1 frees the smem that lets D = 256 stage dQ in fp32 smem and add it
    # with the bulk reduce (two stages leave it per-thread fp32 atomics); the host's default for
    # D = 256 since the H200 A/B (default_qdo_stages).
    qdo_stages: int = 2
    # dQ leaves the main kernel in the input dtype (no postprocess pass over the fp32
    # accumulator): the preprocess sets each query tile's count of key tiles that will add to it;
    # the dQ writer counts each of its adds down once it is complete in global memory, and hands
    # the tile whose count reaches 0 to the producer group's two idle warps, which bulk-copy its
    # fp32 rows into smem, scale, cast and store them while the consumers go on. Persistent grid,
    # dQ staged in smem, not deterministic. Off by default (default_fused_dq: measured slower).
    fused_dq: bool = False
    # fused_dq: an add is counted down when the dQ writer is this many tiles further (its
    # completion wait then overlaps as many consumer iterations); 1..3.
    dq_count_lag: int = 2
    # dK/dV epilogue: the output's strides are declared multiples of the row, so each thread's
    # two adjacent columns leave as one vector store (False: one 2-byte store per element, the
    # session-5 SASS, kept for the A/B; env PADDLE_FLASHMASK_BWD_VECTOR_DKV=0).
    vector_dkv: bool = True
    # dK/dV epilogue: a key tile inside the sequence (n0 + tile_n <= Sk, every tile but the
    # last) stores without the per-row bound, one branch per tile instead of a predicate and a
    # branch region per row (d128 C=2: the epilogue's BSSY / BSYNC pairs and their compares).
    # Off until the H200 A/B (env PADDLE_FLASHMASK_BWD_INTERIOR_DKV=1).
    interior_dkv: bool = False
    # Deterministic mode, dQ in smem: how the dQ writer waits for its turn on a query tile and
    # passes it on. "acquire": acquire polls (a load + CCTL.IVALL, an L1 invalidation, per poll)
    # and fence + release store (two MEMBAR.GPU) per publish. "fence": relaxed polls, one
    # acquire fence once the turn came; the publish a release store after the adds completed
    # (the PTX memory model's fence patterns). "relaxed": relaxed polls and a relaxed publish
    # after the adds completed at L2 (wait_group), where the next adder's bulk reduce lands;
    # no MEMBAR.GPU, no per-poll CCTL.IVALL. The host's choice: default_det_sync.
    det_sync: str = "acquire"
    # Multi-column masks (C >= 2), not deterministic: delta is loaded after the mask instead of
    # before the exp, and the key's column values are read per partial tile instead of held in
    # registers for the whole walk (d128: spills of 92-140 B per thread -> 0, compile_check).
    # The host's choice: default_late_loads (off until the H200 check).
    late_loads: bool = False
    # dQ accumulator without zeroing: the preprocess zeroes one flag per query tile instead of
    # the fp32 [B, H, Sq_pad, D] accumulator (a write of 4 * D bytes per query row); the dQ
    # writer that claims a tile's flag first (atomic OR) stores its rows with a bulk copy and
    # marks the flag once the copy completed, the others add after that mark; the postprocess
    # writes dq zeros where no key tile wrote. dQ staged in smem, no fused_dq. Deterministic
    # mode needs no flags: a chain's first adder (nothing to wait for) stores, and the chain's
    # semaphore (0: nobody added) tells the postprocess which chains hold rows.
    # The host's choice: default_dq_first_store (on) / default_det_first_store.
    dq_first_store: bool = False
    # dQ staged unpadded, its 16-byte chunks XOR-swizzled by row (chunk ^= row % 8: the
    # consumers' 8-byte stores stay conflict-free without the row padding), so a query tile is
    # one contiguous block and the dQ writer moves it with ONE bulk reduce (or copy) instead of a
    # per-row bulk op, whose lane-dependent addresses the compiler serialises over the 32 lanes
    # (~512 writer instructions per tile, scripts/sass_loop_mix.py). dq_accum holds the same
    # swizzle; the postprocess undoes it. D in {64, 128, 256}, no fused_dq. The host's choice:
    # default_dq_swizzle (on for D = 64).
    dq_swizzle: bool = False
    # dS^T in two smem stages, the one of the query tile's Q/dO stage (so they alternate per
    # visited query tile). The next tile's dS^T then goes to the other buffer while the dQ GEMM
    # of this one may still read it, and the "P^T/dS^T free" rendezvous of both consumer WGs at
    # the end of every iteration goes (FA4 keeps two P/dS stages for the same reason). Needs P^T
    # in registers (rs_dkv: dS^T is then the only operand in smem) and two Q/dO stages; +16 KB
    # smem at tile 64 x 128. The host's choice: default_pds_stages (2 since session 10).
    pds_stages: int = 1
    # The dQ GEMM is issued before the dK GEMM, in its own commit group, and its tile is handed
    # to the dQ writer while the dK GEMM still runs (FA4's order), instead of after all three.
    # Needs dQ staged in smem (the deterministic mode's writer warp, not the consumers, waits
    # on the semaphore chain). The host's choice: default_dq_early (on since session 10; in the
    # deterministic mode at D = 64 / 128 since session 37).
    dq_early: bool = False
    # The dV GEMM (P^T from registers, dO from smem: only this warpgroup's own keys) is issued,
    # in its own commit group, before the "P^T/dS^T ready" rendezvous of the two consumer
    # warpgroups instead of after it, so the tensor pipe has work while the first warpgroup
    # waits for the second's dS^T (only the dQ GEMM reads the other warpgroup's dS^T). Needs
    # rs_dkv. The host's choice: default_dv_early (on since session 20).
    dv_early: bool = False
    # With dv_early: the dK GEMM (dS^T of this warpgroup's own keys, from registers) goes before
    # the rendezvous too, in dV's commit group, leaving only dQ after it (whose hand-off then no
    # longer overlaps a GEMM of this tile). The host's choice: default_dk_early (off: 2-4 %
    # slower, H200 call 111).
    dk_early: bool = False
    # With dv_early and dq_early: after the rendezvous the dQ GEMM is issued, then the warpgroup
    # waits for its dV GEMM (issued before the rendezvous) and only then issues dK, then waits
    # for dQ and hands it to the writer (FA4's SM90 order). Without it dK follows dQ at once, so
    # one warpgroup's dK can enter the tensor pipe ahead of the other's dQ, whose hand-off waits
    # for it. The host's choice: default_dk_after_dv (on for the GQA head walk with columns).
    dk_after_dv: bool = False
    # Each query tile's LSE and delta are loaded once the previous tile no longer needs them (after
    # its dS^T), so the global loads run under the dV/dK/dQ GEMMs instead of stalling the exp
    # (ncu, d64 full backward: 38 % of issue cycles wait on L1TEX). A tile whose stats were not
    # prefetched (the first one, or after a skipped tile) loads them as before. Not with
    # late_loads (which moves delta's load the other way). The host's choice: default_prefetch_stats
    # (on at D = 64).
    prefetch_stats: bool = False
    # Each query tile's LSE and delta travel with its Q / dO stage: the producer bulk-copies them
    # into shared memory on the stage's barriers, and the consumers read them with LDS instead
    # of a global load (FA4's scheme; docs/kernels_bwd.md change 4: no global latency on the
    # exp path, no per-thread address arithmetic, no registers held ahead). +1 KB of smem at two
    # stages. Replaces prefetch_stats and late_loads. The host's choice: default_stage_stats.
    stage_stats: bool = False
    # Each query tile's LSE and delta held spread over the warp's lanes (lane l keeps column
    # pairs l, l + 32, ...: tile_m / 32 fp32 per statistic) and each column's value shuffled
    # from its holder where it is used (FA4's scheme; ncu, session 31, D = 64 full backward at
    # 128 rows: 16 % of the samples wait on the per-column global loads). The small footprint
    # lets every tile's stats load one tile ahead (as prefetch_stats, which spills at 128 rows).
    # Query tiles of 64 or 128 rows (the pairs fill whole lanes); replaces prefetch_stats and
    # stage_stats. The host's choice: default_shfl_stats.
    shfl_stats: bool = False
    # The staged dQ tile's per-row bulk ops issued by lane 0 alone, from addresses the compiler
    # knows are warp-uniform (the tile's index through make_warp_uniform, row offsets constant),
    # instead of by every lane for its own rows: per-lane addresses make ptxas serialise each op
    # over the 32 lanes (ELECT / R2UR / UBLKRED loop, ~512 writer instructions per tile, with
    # fixed-latency waits), which delays the buffer's release to the consumers (ncu, session 11:
    # 5 % of the D = 128 backward's stall samples on the consumers' wait for the free buffer).
    # Not with dq_swizzle (already one op per tile). The host's choice: default_dq_uniform_rows
    # (on at D = 128 without gqa_in_cta).
    dq_uniform_rows: bool = False
    # With dq_swizzle: the staged tile as two blocks, one per consumer warpgroup (its dQ columns
    # [w * D/2, (w + 1) * D/2), each block the D/2-wide swizzled tile), each with its own
    # empty / full barrier pair and ONE bulk op, so a warpgroup hands its half over without
    # waiting for the other's (FA4's per-warpgroup dQ hand-off, docs/kernels_bwd.md "Session
    # 12"). dq_accum and the postprocess use the same blocked layout. No fused_dq. In the
    # deterministic mode the writer adds both blocks of a tile before it publishes the tile to
    # the chain's next key tile, so the order of the adds per element is unchanged. The host's
    # choice: default_dq_per_wg.
    dq_per_wg: bool = False
    # The swizzled dQ tile's columns in the dQ accumulator's fragment order (dq_stage_layout's
    # frag form, one block or dq_per_wg's two): each consumer thread's four values of a row and
    # 16-column group are one 16-byte chunk, so it stages dQ with 8 STS.128 instead of 16
    # STS.64 (FA4's count; ncu, session 31: the STS.64 waited on the MIO queue; session 32, D =
    # 128 per-warpgroup blocks: the STS.64 are 2-way bank conflicted, 9 % of all wavefronts).
    # dq_accum holds the same order; the postprocess reads it back. Measured neutral (calls
    # 200, 202: D = 64 1.002-1.009x, D = 128 0.99-1.024x). The host's choice: default_dq_frag.
    dq_frag: bool = False
    # dS stored [queries x keys] (keys contiguous, the 128-byte swizzle at any tile_m; stmatrix
    # transposes the S^T accumulator on the way) instead of [keys x queries], so the dQ GEMM
    # reads it K-major (FA4's sPdS). Session 32 (call 203's SASS of the 80-row form): its
    # [keys x 80 queries] rows allow only the 32-byte swizzle. Needs P^T from registers
    # (rs_dkv: nothing else reads dS from smem). The host's choice: with_ds_query_major (env only).
    ds_query_major: bool = False
    # The transposed dQ (80-row tiles, dQ^T = K^T dS^T) staged in thread order instead of into
    # the row-major tile: each consumer thread's accumulator quads (two query rows x two D rows)
    # as 16-byte chunks, chunk row k of a warpgroup's block holding its 128 threads' k-th quads
    # side by side (FA4's dQ^T staging): 10 conflict-free STS.128 per thread instead of 40
    # scalar STS, which session 32's profile of the 80-row form found waiting on the MIO queue
    # (10 % of its samples against 2 % for FA4's). The postprocess scatters each chunk
    # (flash_bwd_prepost.by_thread_chunk_origin). Each warpgroup's quads are a contiguous
    # block, handed to the writer on its own (dq_per_wg's barriers and bulk ops, as FA4's two
    # dQ buffers): the warpgroups no longer meet at the dQ hand-off. The host's choice:
    # with_dq_by_thread (on wherever dq_by_thread_applies since session 33: with it the
    # 80-row form is 0.89-0.93x of the 64-row tile on full attention; call 204's single block
    # was no faster).
    dq_by_thread: bool = False
    # dq_by_thread's postprocess gathering each row's four adjacent columns across the warp
    # (four index shuffles per 16-byte chunk: flash_bwd_prepost.gather_source_lane) into one
    # 8-byte store per lane, instead of scattering four 2-byte stores (session 34: the 80-row
    # postprocess 198-205 us against 133 us at 64 rows, MHA B=4 S=8K H=16). Env only
    # (PADDLE_FLASHMASK_BWD_POST_GATHER=1; built in session 35, not yet measured).
    post_gather: bool = False
    # The dO stage released as soon as the dV GEMM (its last reader) has completed, before dK,
    # instead of with Q after dK (FA4's mma_one_m_block): the producer can refill it one GEMM
    # earlier. Needs dk_after_dv (whose wait establishes dV's completion there). Env only
    # (PADDLE_FLASHMASK_BWD_DO_RELEASE_AFTER_DV=1; session 33, call 208: 1.18-1.38x slower).
    do_release_after_dv: bool = False
    # Partial tiles' element mask as one bit mask per key row: the key's masked query rows
    # (semantics.masked_row_intervals, measured from the thread's first column) become bits over
    # the thread's columns (mask.pair_column_bits: a few integer ops per band bound), then one
    # bit test and select per element, instead of each element comparing its query offset with
    # every band bound (SASS, d128: the partial-tile block 153-237 instructions per warp
    # depending on the form). The host's choice: default_mask_bits (on, H200 call 86).
    mask_bits: bool = False
    # Deterministic, persistent grid: the two dQ chains by work class instead of key-tile parity.
    # The claims take two passes (sched.claim_pass: class 0 visits >= a quarter of the query
    # tiles); a key tile adds into its class's chain, after the higher key tiles of its class.
    # A heavy key tile (a global column, a shared question) then starts in the first pass and
    # waits on heavy tiles only, instead of being its head's last claim and the grid's tail; each
    # class's higher tiles are claimed earlier in its pass, so the deadlock argument holds per
    # chain. The producer records each claimed tile's class (``tile_classes``, zeroed by the
    # host) before it can block; a dQ writer reads the classes of the key tiles it may wait on.
    # The host's choice: default_class_chains (causal masks, not GQA with columns; H200 calls
    # 87-90).
    class_chains: bool = False
    # class_chains: heavy (class 0) = visits at least 1/class_ratio of the query tiles.
    class_ratio: int = 4
    # Deterministic GQA without the head walk: a key tile's dK/dV summed over its KV head's
    # query heads in order, in place of fp32 per-query-head partials and their reduction. The
    # CTA of the group's query head j waits for head j - 1's flag, adds that running fp32 sum to
    # its own and stores it (j < G - 1, then raises the flag) or writes dK/dV in the input dtype
    # (the last head): the same additions in the same order as the partials' reduction, with a
    # third of its memory traffic and no dK/dV postprocess. Head j - 1's tile is claimed before
    # head j's (the list is head-major; both visit the same query tiles, so both are in one claim
    # pass), so the waits cannot deadlock. The host's choice: default_dkv_chain (off: slower).
    dkv_chain: bool = False
    # dkv_chain through L2: query head 0 of the group stores its scaled fp32 dK/dV, head j > 0
    # (after head j - 1's flag) reduce-adds its own into that sum with ``red.global.add.f32``,
    # and the postprocess converts the group's sum [B, Sk, Hk, D]: no fp32 read on the
    # consumers' path (dkv_chain's cost) and, unlike the per-query-head partials, a group's adds
    # meet in L2 (the head-major list has its heads' tiles in flight together), so DRAM sees the
    # Hk-sized sum once instead of H-sized partials written and read back. The additions are the
    # partials' reduction's, in its order. The host's choice: default_dkv_red (off: slower,
    # H200 call 104).
    dkv_red: bool = False
    # dkv_red by bulk ops: the consumers stage the key tile's scaled fp32 dK, then dV, in shared
    # memory (the region sP .. sdQ, free once the walk's last GEMM and dQ add are done) with the
    # dQ staging swizzle, and the dQ writer warp adds each tile to the group's sum with one bulk
    # reduce-add (query head 0: a bulk copy) after head j - 1's flag, then raises head j's flag
    # once its adds are complete. The sums are head-major, rows padded to whole key tiles
    # ([B, Hk, Sk_pad, D], each tile's 16-byte chunks swizzled by row), converted by the
    # postprocess. The additions are the partials' reduction's, in its order (bit-identical
    # reruns). The host's choice: default_dkv_bulk (off: no faster, H200 call 109).
    dkv_bulk: bool = False
    # Deterministic GQA without the head walk: each query head's CTA stores its fp32 dK/dV
    # partial, then counts itself in on the key tile's flag; the CTA that arrives last (whichever
    # head it is) sums the group's partials in head order and writes dK/dV in the input dtype.
    # Nobody waits, the order of the additions is fixed, and no postprocess reduces the partials
    # (they are read back from L2, just written). The host's choice: default_dkv_last (off:
    # slower, H200 call 96).
    dkv_last: bool = False
    # GQA head walk, deterministic: the walk visits each query tile for all of its group's heads
    # before the next query tile (instead of one head's whole walk, then the next head's), so a
    # head's dQ chain waits for the tile ahead by one query tile's work, not a whole head's walk.
    # Needs the group's heads to share a mask head (the host checks Hm | Hk per call), LSE/delta
    # staged with Q/dO and dQ staged in smem. The host's choice: default_walk_interleave (off:
    # built in session 18, not yet measured).
    walk_interleave: bool = False
    # claim_passes > 1: claim from a list that a small pre-kernel builds (bwd_claim_list: the
    # tile list stably partitioned by work class, the same order the passes take) in one pass,
    # instead of every producer classifying each tile at each claim of each pass. The host's
    # choice: default_claim_list.
    claim_list: bool = False

    def __post_init__(self):
        if (self.head_dim, self.head_dim_v) not in _SUPPORTED_DIMS:
            raise ValueError(f"head_dim/head_dim_v: expected one of {sorted(_SUPPORTED_DIMS)}, "
                             f"found ({self.head_dim}, {self.head_dim_v})")
        _dsl_dtype(self.dtype)
        if self.num_columns is not None:
            semantics.column_names(self.causal, self.num_columns)
        if self.tile_m not in TILE_M_CHOICES:
            raise ValueError(f"tile_m: expected one of {TILE_M_CHOICES}, found {self.tile_m}")
        if self.tile_n == 0:
            object.__setattr__(self, "tile_n", default_tile_n(self.head_dim))
        if self.tile_n not in (64, 128):
            raise ValueError(f"tile_n: expected 64 or 128, found {self.tile_n}")
        if self.tile_m != ROWS_PER_CTA and not (
                self.tall_tile_applies and tall_tile_head_dim(self.tile_m) == self.head_dim
                and not (self.deterministic and not deterministic_has_tile_m(self.tile_m))):
            raise ValueError(
                f"tile_m={self.tile_m}: expected head dims ({tall_tile_head_dim(self.tile_m)}, "
                f"{tall_tile_head_dim(self.tile_m)}), tile_n=128, rs_dkv=True, "
                f"dQ staged in smem, deterministic only at 128 rows, and has_sink, fused_dq, "
                f"dq_per_wg (unless dq_by_thread) and dq_first_store (unless dq_by_thread or "
                f"128 rows) all False, found head dims ({self.head_dim}, {self.head_dim_v}), "
                f"tile_n={self.tile_n}, rs_dkv={self.rs_dkv}, dq_in_smem={self.dq_in_smem} "
                f"(pds_stages={self.pds_stages}, stage_stats={self.stage_stats}, dq_swizzle="
                f"{self.dq_swizzle}), deterministic={self.deterministic}, "
                f"has_sink={self.has_sink}, fused_dq={self.fused_dq}, "
                f"dq_first_store={self.dq_first_store}, dq_per_wg={self.dq_per_wg}")
        if self.gqa_in_cta and not self.gqa:
            raise ValueError("gqa_in_cta: expected gqa=True (H != Hk), found gqa=False")
        if self.qdo_stages not in (1, 2):
            raise ValueError(f"qdo_stages: expected 1 or 2, found {self.qdo_stages}")
        if self.persistent_ctas < 0 or (self.persistent_ctas and self.deterministic
                                        and self.claim_passes != (2 if self.class_chains else 1)):
            raise ValueError(f"persistent_ctas: expected 0, or > 0 (with claim_passes=1 when "
                             f"deterministic, 2 with class_chains), found {self.persistent_ctas} "
                             f"(deterministic={self.deterministic}, claim_passes="
                             f"{self.claim_passes}, class_chains={self.class_chains})")
        if self.dkv_chain and not (self.deterministic and self.gqa and not self.gqa_in_cta):
            raise ValueError(f"dkv_chain: expected deterministic=True, gqa=True and "
                             f"gqa_in_cta=False, found deterministic={self.deterministic}, "
                             f"gqa={self.gqa}, gqa_in_cta={self.gqa_in_cta}")
        if self.dkv_red and not self.dkv_chain:
            raise ValueError(f"dkv_red: expected dkv_chain=True, found dkv_chain={self.dkv_chain}")
        if self.dkv_bulk and not (self.dkv_red and self.dkv_bulk_fits):
            raise ValueError(f"dkv_bulk: expected dkv_red=True and dkv_bulk_fits (dQ staged in "
                             f"smem, fused_dq=False, head dims in (64, 128, 256), the staging "
                             f"region at least a dK / dV tile), found dkv_red={self.dkv_red}, "
                             f"dq_in_smem={self.dq_in_smem}, fused_dq={self.fused_dq}, head "
                             f"dims ({self.head_dim}, {self.head_dim_v}), region "
                             f"{self.dkv_region_bytes} B for {self.dkv_tile_bytes} B")
        if self.dkv_last and not (self.deterministic and self.gqa and not self.gqa_in_cta
                                  and not self.dkv_chain):
            raise ValueError(f"dkv_last: expected deterministic=True, gqa=True, gqa_in_cta=False "
                             f"and dkv_chain=False, found deterministic={self.deterministic}, "
                             f"gqa={self.gqa}, gqa_in_cta={self.gqa_in_cta}, "
                             f"dkv_chain={self.dkv_chain}")
        if self.dkv_chain and self.class_chains and self.num_columns is not None:
            # per-head masks could put a group's heads in different claim passes
            raise ValueError("dkv_chain: expected class_chains=False with startend_row_indices "
                             "(num_columns set)")
        if self.class_ratio not in (2, 4, 8):
            raise ValueError(f"class_ratio: expected 2, 4 or 8, found {self.class_ratio}")
        if self.class_chains and not (self.deterministic and self.persistent_ctas
                                      and self.dq_chains == 2 and not self.gqa_in_cta):
            raise ValueError(f"class_chains: expected deterministic=True, a persistent grid, "
                             f"dq_chains=2 and gqa_in_cta=False, found deterministic="
                             f"{self.deterministic}, persistent_ctas={self.persistent_ctas}, "
                             f"dq_chains={self.dq_chains}, gqa_in_cta={self.gqa_in_cta}")
        if self.walk_interleave and not self.walk_interleave_applies:
            raise ValueError(f"walk_interleave: expected gqa_in_cta=True, deterministic=True, "
                             f"stage_stats=True, dQ staged in smem and lazy_release=False, found "
                             f"gqa_in_cta={self.gqa_in_cta}, deterministic={self.deterministic}, "
                             f"stage_stats={self.stage_stats}, dq_in_smem={self.dq_in_smem}, "
                             f"lazy_release={self.lazy_release}")
        if self.claim_list and self.claim_passes == 1:
            raise ValueError("claim_list: expected claim_passes > 1 (a persistent grid claiming "
                             "by work class), found claim_passes=1")
        if self.key_major and not self.persistent_ctas:
            raise ValueError("key_major: expected only with a persistent grid (persistent_ctas > 0)")
        if self.claim_passes not in (1, 2, 3, 4) or (self.claim_passes > 1
                                                     and not self.persistent_ctas):
            raise ValueError(f"claim_passes: expected 1, or 2..4 with a persistent grid "
                             f"(persistent_ctas > 0), found {self.claim_passes} "
                             f"(persistent_ctas={self.persistent_ctas})")
        if self.lazy_release and not (self.deterministic and self.dq_in_smem):
            raise ValueError("lazy_release: expected only with deterministic=True and dQ staged in "
                             "smem")
        if self.dq_chains not in (1, 2) or (self.dq_chains == 2 and not (
                self.deterministic and self.dq_in_smem)):
            raise ValueError(f"dq_chains: expected 1, or 2 with deterministic=True and dQ staged in "
                             f"smem, found {self.dq_chains} (deterministic={self.deterministic})")
        if self.det_sync not in DET_SYNC_MODES:
            raise ValueError(f"det_sync: expected one of {list(DET_SYNC_MODES)}, found "
                             f"{self.det_sync!r}")
        if self.det_sync != "acquire" and not (self.deterministic and self.dq_in_smem):
            raise ValueError(f"det_sync: expected 'acquire' unless deterministic=True with dQ "
                             f"staged in smem, found {self.det_sync!r}")
        if self.dq_first_store and (not self.dq_in_smem or self.fused_dq):
            raise ValueError(f"dq_first_store: expected dQ staged in smem and fused_dq=False, "
                             f"found dq_in_smem={self.dq_in_smem}, fused_dq={self.fused_dq}")
        if self.dq_swizzle and (not self.dq_in_smem or self.fused_dq
                                or self.head_dim not in (64, 128, 256)):
            raise ValueError(f"dq_swizzle: expected dQ staged in smem, fused_dq=False and head_dim "
                             f"in (64, 128, 256), found dq_in_smem={self.dq_in_smem}, "
                             f"fused_dq={self.fused_dq}, head_dim={self.head_dim}")
        if self.dq_frag and not self.dq_frag_applies:
            raise ValueError(f"dq_frag: expected dq_swizzle=True, fused_dq=False and dQ not "
                             f"transposed (tile_m 64 or 128), found tile_m={self.tile_m}, "
                             f"dq_swizzle={self.dq_swizzle}, fused_dq={self.fused_dq}")
        if self.ds_query_major and not self.rs_dkv:
            raise ValueError("ds_query_major: expected rs_dkv=True (dK's GEMM then takes dS "
                             "from registers), found rs_dkv=False")
        if self.do_release_after_dv and not self.dk_after_dv:
            raise ValueError("do_release_after_dv: expected dk_after_dv=True, found "
                             "dk_after_dv=False")
        if self.post_gather and not self.dq_by_thread:
            raise ValueError("post_gather: expected dq_by_thread=True, found dq_by_thread=False")
        if self.dq_by_thread and not self.dq_by_thread_applies:
            raise ValueError(f"dq_by_thread: expected an 80-row tile (dQ transposed) with the "
                             f"swizzled single-block dQ tile, fused_dq=False and dq_frag=False, "
                             f"found tile_m={self.tile_m}, dq_swizzle={self.dq_swizzle}, "
                             f"dq_per_wg={self.dq_per_wg}, fused_dq={self.fused_dq}, "
                             f"dq_frag={self.dq_frag}")
        if self.dq_per_wg and (not self.dq_swizzle or self.fused_dq):
            raise ValueError(f"dq_per_wg: expected dq_swizzle=True and fused_dq=False, found "
                             f"dq_swizzle={self.dq_swizzle}, fused_dq={self.fused_dq}")
        if self.dq_uniform_rows and (not self.dq_in_smem or self.fused_dq or self.dq_swizzle):
            raise ValueError(f"dq_uniform_rows: expected dQ staged in smem, fused_dq=False and "
                             f"dq_swizzle=False, found dq_in_smem={self.dq_in_smem}, "
                             f"fused_dq={self.fused_dq}, dq_swizzle={self.dq_swizzle}")
        if self.pds_stages not in (1, 2) or (self.pds_stages == 2
                                              and not self.two_pds_stages_apply):
            raise ValueError(f"pds_stages: expected 1, or 2 with rs_dkv=True, qdo_stages=2 and "
                             f"tile_n=128, found {self.pds_stages} (rs_dkv={self.rs_dkv}, "
                             f"qdo_stages={self.qdo_stages}, tile_n={self.tile_n})")
        if self.dk_early and not self.dv_early:
            raise ValueError("dk_early: expected dv_early=True, found dv_early=False")
        if self.dk_after_dv and not self.dk_after_dv_applies:
            raise ValueError(f"dk_after_dv: expected dv_early=True, dq_early=True, "
                             f"dk_early=False and deterministic=False, found "
                             f"dv_early={self.dv_early}, dq_early={self.dq_early}, "
                             f"dk_early={self.dk_early}, deterministic={self.deterministic}")
        if self.dv_early and not self.rs_dkv:
            raise ValueError("dv_early: expected rs_dkv=True (P^T from registers), found "
                             "rs_dkv=False")
        if self.dq_early and not self.dq_in_smem:
            raise ValueError(f"dq_early: expected dQ staged in smem, found "
                             f"dq_in_smem={self.dq_in_smem}")
        if self.prefetch_stats and self.late_loads:
            raise ValueError("prefetch_stats: expected late_loads=False, found late_loads=True")
        if self.stage_stats and (self.prefetch_stats or self.late_loads):
            raise ValueError(f"stage_stats: expected prefetch_stats=False and late_loads=False, "
                             f"found prefetch_stats={self.prefetch_stats}, "
                             f"late_loads={self.late_loads}")
        if self.shfl_stats and (not self.shfl_stats_applies or self.prefetch_stats
                                or self.stage_stats):
            raise ValueError(f"shfl_stats: expected tile_m 64, 80 or 128, walk_interleave=False, "
                             f"prefetch_stats=False and stage_stats=False, found tile_m="
                             f"{self.tile_m}, walk_interleave={self.walk_interleave}, "
                             f"prefetch_stats={self.prefetch_stats}, "
                             f"stage_stats={self.stage_stats}")
        if self.dq_count_lag not in (1, 2, 3):
            raise ValueError(f"dq_count_lag: expected 1, 2 or 3, found {self.dq_count_lag}")
        if self.fused_dq and not (self.persistent and not self.deterministic and self.dq_in_smem
                                  and self.conv_rows):
            raise ValueError(f"fused_dq: expected only with a persistent grid (persistent_ctas > "
                             f"0), deterministic=False and dQ staged in smem with room for the "
                             f"conversion buffer, found persistent_ctas={self.persistent_ctas}, "
                             f"deterministic={self.deterministic}, "
                             f"dq_in_smem={self.dq_in_smem}, conv_rows={self.conv_rows}")

    @property
    def tall_tile_applies(self) -> bool:
        """Whether a query tile other than 64 rows can apply to this variant (80 rows at D = 128,
        128 at D = 64: ``bwd_rules.tall_tile_head_dim``): P^T from registers (its smem
        buffer is then left out), dQ staged in smem (padded rows, or the swizzled unpadded tile:
        the transposed hand-off's column stores are conflict-free in both; two dS^T stages fit
        only beside the unpadded one), and none of the paths whose per-query-tile grids
        (semaphores, first-store flags, pending counts, sink partials) are sized by 64-row
        blocks or that split the tile by warpgroup columns (dq_per_wg; except dq_by_thread's
        staging, whose warpgroup blocks are its own)."""
        first_store_ok = self.dq_by_thread or self.tile_m == 128  # flags per kernel tile
        return (self.tall_tile_form and self.dq_in_smem
                and not (self.dq_per_wg and not self.dq_by_thread)
                and not (self.dq_first_store and not first_store_ok))

    @property
    def tall_tile_form(self) -> bool:
        """The part of ``tall_tile_applies`` that ``with_tile_m`` cannot switch off: D = 64 or
        128, tile_n 128, P^T from registers, and not with a sink or fused dQ. (Deterministic:
        since session 32, its semaphores counted in the kernel's tiles, PrePostConfig.grid_rows;
        the GQA head walk's interleaved form excluded.)"""
        return ((self.head_dim, self.head_dim_v) in ((64, 64), (128, 128)) and self.tile_n == 128
                and self.rs_dkv and not self.walk_interleave
                and not (self.has_sink or self.fused_dq))

    @property
    def dq_transposed(self) -> bool:
        """dQ computed as dQ^T = K^T dS^T (query rows on wgmma's N): a query tile that is not a
        multiple of 64 rows cannot be the GEMM's M."""
        return self.tile_m % 64 != 0

    @property
    def p_in_smem(self) -> bool:
        """Whether P^T has a shared-memory buffer: without rs_dkv it feeds the dV GEMM from
        there; the 64-row variants keep the (then unused) buffer, since dkv_bulk stages in it
        and the measured smem-based choices (dq_in_smem, conv_rows) were made with it."""
        return not self.rs_dkv or self.tile_m == ROWS_PER_CTA

    @property
    def two_pds_stages_apply(self) -> bool:
        """Whether ``pds_stages=2`` can apply: P^T from registers (rs_dkv, tile_n 128, so dS^T is
        the only smem operand) and two Q/dO stages to pick the dS^T buffer by."""
        return self.rs_dkv and self.qdo_stages == 2 and self.tile_n == 128

    @property
    def dk_after_dv_applies(self) -> bool:
        """Whether ``dk_after_dv`` can apply: dV in its own commit group before the rendezvous
        (``dv_early``), dQ handed over while dK runs (``dq_early``), dK not already issued
        with dV (``dk_early``), and not the deterministic mode (whose ``dq_early`` since
        session 37 was measured without it)."""
        return self.dv_early and self.dq_early and not self.dk_early and not self.deterministic

    @property
    def shfl_stats_applies(self) -> bool:
        """Whether ``shfl_stats`` can apply (in place of the prefetched or staged stats): query
        tiles of 64, 80 or 128 rows (80: the second word pair of lanes 8-31 holds no column),
        and not the interleaved walk (whose consumers need no head: it reads staged stats)."""
        return self.tile_m in (64, 80, 128) and not self.walk_interleave

    @property
    def dq_frag_applies(self) -> bool:
        """Whether ``dq_frag`` can apply: the swizzled dQ tile (one block or ``dq_per_wg``'s
        two), converted by the postprocess (not ``fused_dq``), dQ not transposed (80 rows)."""
        return self.dq_swizzle and not self.fused_dq and not self.dq_transposed

    @property
    def dq_by_thread_applies(self) -> bool:
        """Whether ``dq_by_thread`` can apply: dQ transposed (80-row tiles) into the swizzled,
        unpadded tile (the two-dS^T-stage form; its bulk hand-offs move a block whole, whatever
        its order), converted by the postprocess."""
        return (self.dq_transposed and self.dq_swizzle and not self.fused_dq
                and not self.dq_frag)

    @property
    def tall_first_store_applies(self) -> bool:
        """Whether a taller tile's dQ can take ``dq_first_store`` (its first writer stores, no
        zeroed accumulator): with ``dq_by_thread`` (the postprocess reads each chunk's tile
        flag, or in the deterministic mode each chain's semaphore for that tile), or on 128-row
        tiles (each 64-row block's tile flag or semaphores, counted in 128-row tiles:
        ``PrePostConfig.flag_rows``)."""
        by_tile = self.dq_by_thread or self.tile_m == 128
        return (self.tile_m != ROWS_PER_CTA and by_tile and self.dq_in_smem
                and not self.fused_dq)

    @property
    def walk_interleave_applies(self) -> bool:
        """Whether ``walk_interleave`` can apply: the deterministic GQA walk with LSE / delta
        staged with Q / dO (the consumers then need no head), dQ staged in smem, no lazy
        release (a step's chain is the step's head's)."""
        return (self.gqa_in_cta and self.deterministic and self.stage_stats and self.dq_in_smem
                and not self.lazy_release)

    @property
    def first_store_flags(self) -> bool:
        """dq_first_store's per-query-tile flags (the default mode's first writer claims one);
        the deterministic mode knows its chain's first adder without them."""
        return self.dq_first_store and not self.deterministic

    @property
    def persistent(self) -> bool:
        return self.persistent_ctas > 0

    def with_class_chains(self, class_ratio: Optional[int] = None) -> "BwdConfig":
        """This deterministic variant with the dQ chains by work class (two chains, claimed in two
        passes). With two or more mask columns, or GQA with any (never the host's default
        there), it keeps the zeroed accumulator: the first store's second row loop next to the
        chain-wait ballot over two bands spills the dQ writer's 24 registers (52 B, compile
        check). The masks measured with the first store (call 95) are all C = 1 or plain."""
        columns = self.num_columns or 0
        first_store = self.dq_first_store and not (columns >= 2 or (self.gqa and columns))
        return replace(self, dq_chains=2, claim_passes=2, class_chains=True,
                       class_ratio=self.class_ratio if class_ratio is None else class_ratio,
                       dq_first_store=first_store)

    def one_cta_per_tile(self) -> "BwdConfig":
        """This variant without the persistent grid: one CTA per (key tile, head, batch), launched
        in order, so nothing of what only a persistent grid has (the claim order, claim passes,
        the fused dQ converter) is kept."""
        return replace(self, persistent_ctas=0, key_major=False, fused_dq=False, claim_passes=1,
                       claim_list=False, class_chains=False,
                       dq_chains=1 if self.class_chains else self.dq_chains)

    def _staged_bytes(self) -> int:
        """Shared memory of the operand tiles, the fp32 dQ staging buffer, the staged stats and
        ``_SMEM_OVERHEAD`` (the barriers' 1 KB-aligned head, the kernel's 1 KB of static smem,
        the small trailing fields)."""
        el = 2
        operand_bytes = (self.qdo_stages * self.tile_m * (self.head_dim + self.head_dim_v) * el
                         + self.tile_n * (self.head_dim + self.head_dim_v) * el
                         + self._pds_bytes)
        stats_bytes = 2 * self.qdo_stages * self.tile_m * 4 if self.stage_stats else 0
        return operand_bytes + self._dq_stage_bytes + stats_bytes + _SMEM_OVERHEAD

    @property
    def _pds_bytes(self) -> int:
        """P^T (one stage, where ``p_in_smem``) and dS^T (``pds_stages``) in the input dtype."""
        return (int(self.p_in_smem) + self.pds_stages) * self.tile_n * self.tile_m * 2

    @property
    def _dq_stage_bytes(self) -> int:
        """The fp32 dQ staging buffer (``dq_stage_layout``)."""
        return self.tile_m * self.dq_row_elems * 4

    @property
    def dq_row_elems(self) -> int:
        """fp32 elements per staged dQ row (``dq_stage_layout``): padded against bank conflicts,
        or (``dq_swizzle``) not, the chunk swizzle doing that job."""
        if self.dq_swizzle:
            return self.head_dim
        return self.head_dim + (_DQ_PAD_TRANSPOSED if self.dq_transposed else _DQ_PAD)

    @property
    def dq_in_smem(self) -> bool:
        """dQ goes through padded fp32 smem and the bulk reduce-add (it fits next to the operand
        tiles), else per-thread fp32 ``red.global.add`` from registers (D = 256, two stages)."""
        return self._staged_bytes() <= _SMEM_BYTES

    @property
    def conv_rows(self) -> int:
        """fp32 rows of each of the two ``fused_dq`` conversion buffers: the most of 16 / 8 / 4
        that fit next to everything else (0: none fits). A query tile is converted in
        ``tile_m / conv_rows`` bulk copies, the next one in flight while one is converted."""
        for rows in (16, 8, 4):  # (with 2 KB to spare: the measured choices were made so)
            if (self._staged_bytes() + _CONV_SPARE + 2 * rows * self.head_dim * 4
                    <= _SMEM_BYTES):
                return rows
        return 0

    @property
    def dkv_partials(self) -> bool:
        """dK/dV leave the main kernel as fp32 per-query-head partials ``[B, Sk, H, D]``."""
        return self.gqa and not self.gqa_in_cta and not self.dkv_chain and not self.dkv_last

    @property
    def dkv_region_bytes(self) -> int:
        """dkv_bulk's staging region: sP, sdS and sdQ, consecutive in the kernel's Storage (each
        a whole number of KB, so no alignment gap between them)."""
        return self._pds_bytes + self._dq_stage_bytes

    @property
    def dkv_tile_bytes(self) -> int:
        """One key tile's fp32 dK or dV, the larger: what dkv_bulk stages at a time."""
        return self.tile_n * max(self.head_dim, self.head_dim_v) * 4

    @property
    def dkv_bulk_fits(self) -> bool:
        """Whether dkv_bulk can apply to this variant (the layout of ``dq_stage_layout``'s swizzle
        needs power-of-two rows, the region a whole tile)."""
        return (self.dq_in_smem and not self.fused_dq
                and self.head_dim in (64, 128, 256) and self.head_dim_v in (64, 128, 256)
                and self.dkv_tile_bytes <= self.dkv_region_bytes)

    @property
    def dkv_group_sum(self) -> bool:
        """dK/dV of a GQA group summed in the main kernel (``dkv_chain`` or ``dkv_last``): fp32
        buffers and per-key-tile flags come as its trailing arguments."""
        return self.dkv_chain or self.dkv_last

    @property
    def prepost(self):
        from .flash_bwd_prepost import PrePostConfig
        extra = {}
        if self.fused_dq:  # the preprocess counts visits with this kernel's mask form and tile
            extra = dict(fused_dq=True, causal=self.causal, num_columns=self.num_columns,
                         tile_n=self.tile_n)
        if self.dkv_bulk:  # the sums in whole key tiles (fused_dq is off with it)
            extra = dict(dkv_tiles=True, tile_n=self.tile_n)
        if self.tile_m != ROWS_PER_CTA:  # (the default's key stays as it was)
            extra["row_pad"] = row_padding(self.tile_m)
            if self.deterministic or (self.dq_first_store and not self.dq_by_thread):
                extra["grid_rows"] = self.tile_m  # semaphores / flags count the kernel's tiles
        if self.dq_frag:  # (likewise)
            extra["dq_frag"] = True
        if self.dq_by_thread:
            extra["dq_by_thread_rows"] = self.tile_m
            if self.post_gather:  # (likewise)
                extra["by_thread_gather"] = True
        return PrePostConfig(self.dtype, self.head_dim, self.head_dim_v, self.dkv_partials,
                             self.has_sink, self.deterministic, self.dq_chains,
                             first_store=self.dq_first_store, dq_swizzle=self.dq_swizzle,
                             dq_per_wg=self.dq_per_wg, dkv_sums=self.dkv_red, **extra)

