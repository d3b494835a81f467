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
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Optional

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, Uint32, const_expr
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.experimental import primitives as prims
from cutlass.tensor_utils import LayoutEnum
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

_LOG2_E = math.log2(math.e)
_SUPPORTED_DIMS = {(64, 64), (96, 96), (128, 128), (192, 128), (256, 256)}

# named barrier ids (0 is __syncthreads)
_BAR_PDS_READY = 1  # P^T/dS^T written to smem by both consumer WGs
_BAR_PDS_FREE = 2  # all wgmma of the iteration finished reading P^T/dS^T
_BAR_DQ = 3  # dQ smem staging / deterministic ordering inside the CTA
_BAR_DQ_FULL = 4  # consumers -> dQ writer warp: dQ tile staged in smem
_BAR_DQ_EMPTY = 5  # dQ writer warp -> consumers: smem dQ buffer free again
_DQ_SYNC_THREADS = 256 + 32
_DQ_PAD = 8  # fp32 padding per dQ smem row: conflict-free 8-byte stores from the wgmma layout
# ... and for the transposed dQ's 4-byte stores down columns (lanes 2 rows and 1 column apart):
# a pitch of D + 4 floats puts a warp's 32 stores in 32 banks (D + 8 would pair them up)
_DQ_PAD_TRANSPOSED = 4
_BAR_CONV_BUF = 6  # converter warps: the queue slot / a conversion buffer was read out
_BAR_DKV_CHAIN = 9  # dkv_chain: the consumers' hand-over of a key tile's GQA-group dK/dV sum
# dkv_bulk: the dK/dV staging region (sP .. sdQ) free for the consumers (dQ writer warp ->
# consumers), and a staged dK or dV tile ready for the writer's bulk op (consumers -> writer)
_BAR_DKV_STAGE = 10
_BAR_DKV_FULL = 11
# dq_per_wg: warpgroup w's dQ block uses _BAR_DQ_FULL / _BAR_DQ_EMPTY + _BAR_DQ_WG_STEP * w
# (w = 1: ids 7 / 8), each with its 128 consumer threads and the writer warp
_BAR_DQ_WG_STEP = 3
_DQ_WG_SYNC_THREADS = 128 + 32
_CONV_THREADS = 64  # producer-group warps 2 and 3
_CONV_QUEUE = 8  # finished query tiles the dQ writer can queue for the converter warps
_SMEM_BYTES = 227 * 1024  # the H100/H200 opt-in maximum per CTA
# what the kernel's shared memory holds besides the tiles: the mbarriers (the first 1 KB, as sQ
# is 1 KB-aligned), 1 KB of static smem the DSL adds, the persistent tile slot (16 B aligned)
_SMEM_OVERHEAD = 2048 + 16
_CONV_SPARE = 4096 - _SMEM_OVERHEAD  # fused_dq's buffers were sized with a 4 KB overhead: kept
_CONV_VEC = 4  # fp32 elements per 16-byte smem read of the fused dQ conversion


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
    # Needs dQ staged in smem, not deterministic (its hand-off waits on the semaphore chain).
    # The host's choice: default_dq_early (on since session 10).
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
                self.tall_tile_applies and tall_tile_head_dim(self.tile_m) == self.head_dim):
            raise ValueError(
                f"tile_m={self.tile_m}: expected head dims ({tall_tile_head_dim(self.tile_m)}, "
                f"{tall_tile_head_dim(self.tile_m)}), tile_n=128, rs_dkv=True, "
                f"dQ staged in smem, and deterministic, has_sink, fused_dq, dq_first_store, "
                f"dq_per_wg all False, found head dims ({self.head_dim}, {self.head_dim_v}), "
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
            raise ValueError(f"dk_after_dv: expected dv_early=True, dq_early=True and "
                             f"dk_early=False, found dv_early={self.dv_early}, "
                             f"dq_early={self.dq_early}, dk_early={self.dk_early}")
        if self.dv_early and not self.rs_dkv:
            raise ValueError("dv_early: expected rs_dkv=True (P^T from registers), found "
                             "rs_dkv=False")
        if self.dq_early and (self.deterministic or not self.dq_in_smem):
            raise ValueError(f"dq_early: expected deterministic=False and dQ staged in smem, found "
                             f"deterministic={self.deterministic}, dq_in_smem={self.dq_in_smem}")
        if self.prefetch_stats and self.late_loads:
            raise ValueError("prefetch_stats: expected late_loads=False, found late_loads=True")
        if self.stage_stats and (self.prefetch_stats or self.late_loads):
            raise ValueError(f"stage_stats: expected prefetch_stats=False and late_loads=False, "
                             f"found prefetch_stats={self.prefetch_stats}, "
                             f"late_loads={self.late_loads}")
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
        blocks or that split the tile by warpgroup columns (dq_per_wg)."""
        return (self.tall_tile_form and self.dq_in_smem
                and not (self.dq_first_store or self.dq_per_wg))

    @property
    def tall_tile_form(self) -> bool:
        """The part of ``tall_tile_applies`` that ``with_tile_m`` cannot switch off: D = 64 or
        128, tile_n 128, P^T from registers, and not deterministic, with a sink or fused dQ."""
        return ((self.head_dim, self.head_dim_v) in ((64, 64), (128, 128)) and self.tile_n == 128
                and self.rs_dkv
                and not (self.deterministic or self.has_sink or self.fused_dq))

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
        (``dv_early``), dQ handed over while dK runs (``dq_early``), and dK not already issued
        with dV (``dk_early``)."""
        return self.dv_early and self.dq_early and not self.dk_early

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
        return PrePostConfig(self.dtype, self.head_dim, self.head_dim_v, self.dkv_partials,
                             self.has_sink, self.deterministic, self.dq_chains,
                             first_store=self.dq_first_store, dq_swizzle=self.dq_swizzle,
                             dq_per_wg=self.dq_per_wg, dkv_sums=self.dkv_red, **extra)


# --------------------------------------------------------------------------------------------------
# small layout helpers
# --------------------------------------------------------------------------------------------------

def dq_stage_layout(rows: int, d: int, swizzle: bool, per_wg: bool = False, pad: int = _DQ_PAD):
    """Layout of the fp32 dQ staging tile ``[rows, d]``: rows padded by ``pad`` against bank
    conflicts, or (``swizzle``, d a power of two) a contiguous block whose 16-byte chunks are
    XOR-swizzled by row (chunk ^= row % 8; the postprocess undoes it in dq_accum), or
    (``per_wg``) two such blocks of ``d / 2`` columns, one after the other: columns
    ``[w * d/2, (w + 1) * d/2)`` (consumer warpgroup w's) at offset ``w * rows * d/2``."""
    if not swizzle:
        if per_wg:
            raise ValueError("dq_stage_layout per_wg: expected swizzle=True")
        return cute.make_layout((rows, d), stride=(d + pad, 1))
    width = d // 2 if per_wg else d
    if width & (width - 1) or width < 32:
        raise ValueError(f"dq_stage_layout d: expected a power of two >= {64 if per_wg else 32}, "
                         f"found {d}")
    # offset bits [2, 5) (the chunk within 128 bytes) ^= offset bits [log2 w, log2 w + 3): the
    # row's low bits; a block's start (a multiple of rows * w) is above them
    swizzle_atom = cute.make_swizzle(3, 2, width.bit_length() - 1 - 2)
    if not per_wg:
        return cute.make_composed_layout(swizzle_atom, 0,
                                         cute.make_layout((rows, d), stride=(d, 1)))
    return cute.make_composed_layout(
        swizzle_atom, 0, cute.make_layout((rows, (width, 2)), stride=(width, (1, rows * width))))


def _smem_layout(dtype, rows: int, cols: int, swizzle_cols: int, stages: Optional[int] = None):
    """Row-major ``[rows, cols]`` (cols contiguous) wgmma-canonical smem layout whose swizzle atom is
    chosen for ``swizzle_cols`` contiguous elements (the narrowest slice any GEMM reads along cols)."""
    kind = sm90_utils.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, dtype, swizzle_cols)
    atom = warpgroup.make_smem_layout_atom(kind, dtype)
    if stages is None:
        return cute.tile_to_shape(atom, (rows, cols), order=(0, 1))
    return cute.tile_to_shape(atom, (rows, cols, stages), order=(0, 1, 2))


def _transposed(t: cute.Tensor) -> cute.Tensor:
    """View of an smem tensor with its first two modes swapped (same bytes)."""
    rank = cute.rank(t)
    shape = (t.shape[1], t.shape[0], *t.shape[2:])
    order = (1, 0, *range(2, rank))
    return cute.composition(t, cute.make_ordered_layout(shape, order=order))


@cute.jit
def _acc_to_operand_a(acc: cute.Tensor, frag_a: cute.Tensor):
    """Copy a 16-bit wgmma accumulator-layout tensor ((2, 2, V), 1, 1) (rows = M, cols = K of the
    next GEMM) into the RS A fragment ((2, 2, 2), 1, V / 2): A k-block kb holds the accumulator's
    column groups 2kb and 2kb + 1, same thread, same register order."""
    for kb in cutlass.range_constexpr(cute.size(frag_a, mode=[2])):
        for g in cutlass.range_constexpr(2):
            for hh in cutlass.range_constexpr(2):
                for c in cutlass.range_constexpr(2):
                    frag_a[(c, hh, g), 0, kb] = acc[(c, hh, 2 * kb + g), 0, 0]


def _acc_mn(t: cute.Tensor) -> cute.Tensor:
    """(rows, cols) view of a wgmma accumulator-shaped partition ((2, 2, V), M, N):
    value mode 0 = two adjacent columns, 1 = rows r and r + 8, 2 = column groups of 8."""
    flat = cute.make_layout(t.layout.shape)
    s, d = flat.shape, flat.stride
    mn = cute.make_layout(((s[0][1], s[1]), (s[0][0], s[0][2], s[2])),
                          stride=((d[0][1], d[1]), (d[0][0], d[0][2], d[2])))
    return cute.make_tensor(t.iterator, cute.composition(t.layout, mn))


# --------------------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------------------

class FlashMaskBwdSm90:
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
        dq = mk(dt, dt, MN, MN, Float32, self.dq_atom, (64, dq_n))
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
        self.sdS_layout = _smem_layout(dt, tn, tm, tm,
                                       2 if self.cfg.pds_stages == 2 else None)

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
    def _copy_stats(self, sStat, mPairs, stage, b, h, m_blk, mbar):
        """Producer (one lane): query tile ``m_blk``'s statistic (tile_m fp32, 256 B at tile_m
        64: aligned, as the buffer's rows are padded to tile_m) into its stage, completing on
        ``mbar`` with the Q or dO tile."""
        with cute.arch.elect_one():
            prims.cp_async_bulk_shared_cluster_global(
                sStat[None, None, stage].iterator,
                mPairs[b, h, m_blk * (self.tile_m // 2), None].iterator, mbar, self.stats_bytes)

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
        if const_expr(cfg.dq_transposed):
            tQrK = wg_dq.make_fragment_A(wg_dq.partition_A(_transposed(sK)))
            tQrdS = wg_dq.make_fragment_B(wg_dq.partition_B(_transposed(sdS)))
        else:
            tQrdS = wg_dq.make_fragment_A(wg_dq.partition_A(_transposed(sdS)))
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
        # one dS^T buffer: its partition is built once, outside the query-tile loop (built per
        # tile, as the two-buffer path must, it changes every default variant's SASS)
        tPsdS = None if two_pds else pds_store.partition_D(ops.sdS)
        wg_dq, th_dq, key_vals = ops.wg_dq, ops.th_dq, ops.key_vals
        tiled_sdp, tiled_dk, tiled_dv = ops.tiled_sdp, ops.tiled_dk, ops.tiled_dv
        tiled_dq = ops.tiled_dq
        n_rows = cute.size(tScS, mode=[0])
        n_cols = cute.size(tScS, mode=[1])
        C = cfg.num_columns if const_expr(cfg.num_columns is not None) else 1
        m_lo, m_hi = self._walk(n0, bmax, bmin, seqlen_q, diag, num_m)
        # per-query statistics of this thread's columns (lse2 = LSE*log2e, +inf if empty, and
        # delta); with prefetch_stats they live across iterations and stats_m says whose they are
        prefetch = const_expr(cfg.prefetch_stats)
        lse_c = cute.make_rmem_tensor(cute.make_layout(n_cols), Float32)
        dlt_c = cute.make_rmem_tensor(cute.make_layout(n_cols), Float32)
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
                if const_expr(self.stats_bytes):  # staged with Q / dO: both waits are behind us
                    self._read_column_stats(lse_c, ops.stats.sLSE, stage, tScS)
                    if const_expr(not self.late_delta):
                        self._read_column_stats(dlt_c, ops.stats.sDelta, stage, tScS)
                elif const_expr(prefetch):
                    if stats_m != m_blk:  # not prefetched: the first tile, or after a skipped one
                        self._load_column_stats(lse_c, mLSE2, b, h, m0, tScS)
                        self._load_column_stats(dlt_c, mDelta, b, h, m0, tScS)
                else:
                    self._load_column_stats(lse_c, mLSE2, b, h, m0, tScS)
                    if const_expr(not self.late_delta):
                        self._load_column_stats(dlt_c, mDelta, b, h, m0, tScS)

                warpgroup.wait_group(1)
                S = _acc_mn(acc_S)
                for r in cutlass.range_constexpr(n_rows):
                    for c in cutlass.range_constexpr(n_cols):
                        S[r, c] = cute.math.exp2(S[r, c] * scale_log2 - lse_c[c], fastmath=True)
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
                if const_expr(self.late_delta):
                    if const_expr(self.stats_bytes):
                        self._read_column_stats(dlt_c, ops.stats.sDelta, stage, tScS)
                    elif const_expr(not prefetch):
                        self._load_column_stats(dlt_c, mDelta, b, h, m0, tScS)
                warpgroup.wait_group(0)
                dP = _acc_mn(acc_dP)
                for r in cutlass.range_constexpr(n_rows):
                    for c in cutlass.range_constexpr(n_cols):
                        dP[r, c] = S[r, c] * (dP[r, c] - dlt_c[c])
                if const_expr(prefetch):  # the next tile's stats load under this tile's GEMMs
                    if m_blk + 1 < m_hi:
                        self._load_column_stats(lse_c, mLSE2, b, h, m0 + self.tile_m, tScS)
                        self._load_column_stats(dlt_c, mDelta, b, h, m0 + self.tile_m, tScS)
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
                    cute.copy(pds_store, pds_store.retile(rdS),
                              pds_store.partition_D(ops.sdS[None, None, stage]))
                else:
                    cute.copy(pds_store, pds_store.retile(rdS), tPsdS)
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
        cute.autovec_copy(acc_dQ, th_dq.partition_C(
            _transposed(sdQ) if const_expr(self.cfg.dq_transposed) else sdQ))
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier_arrive(barrier_id=full, number_of_threads=self.dq_sync_threads)

    @cute.jit
    def _dq_writer(self, grid, sdQ, mdQacc, mSem, mSumMin, mSumMax, b, h, hm, n_blk, n0, num_m,
                   seqlen_q, seqlen_k, diag, bmax, bmin, tidx, p1, p2, p3, group=1):
        """Producer-WG warp 1: for each visited query tile, take the dQ tile the consumers staged
        in fp32 smem and add it to ``dq_accum`` with ``cp.reduce.async.bulk .add.f32``
        (``_bulk_rows``: one per row, or one per tile with ``dq_swizzle``). Deterministic mode orders the adds with the semaphore here,
        off the consumers' critical path. ``fused_dq``: ``p1..p3`` are the adds not yet counted
        down (newest first; returned advanced); each is counted down ``dq_count_lag`` tiles after
        its issue, so its completion wait overlaps that many consumer iterations.
        ``walk_interleave``: each query tile once per head ``h`` .. ``h + group - 1``, each
        head's tile into its own chain."""
        lane = tidx % 32
        work_class = Int32(0)
        if const_expr(self.cfg.class_chains):
            work_class = self._tile_class(grid.mClass, b, h, n_blk)
        hc = self._dq_chain_head(h, n_blk, work_class)
        gdQacc_bh = mdQacc[b, hc, None, None]
        m_lo, m_hi = self._walk(n0, bmax, bmin, seqlen_q, diag, num_m)
        released = Int32(-1)  # lazy release: the query tile whose add is still to be published
        tile_wait = Int32(0)  # walk_interleave: the query tile's wait value, for all its heads
        lo, hi = self._walk_steps(m_lo, m_hi, group)
        for it in cutlass.range(lo, hi, unroll=1):
            m_blk, j = self._step_tile(it, group)
            if not self._skipped(m_blk, n0, bmax, bmin, seqlen_q, diag):
                hc_it, gdq_it = hc, gdQacc_bh  # this step's chain
                if const_expr(self.cfg.walk_interleave):  # this step's head (h is the first)
                    hc_it = self._dq_chain_head(h + j, n_blk, work_class)
                    gdq_it = mdQacc[b, hc_it, None, None]
                wait_for = Int32(0)
                if const_expr(self.cfg.walk_interleave):
                    # the group's heads share the mask: one ballot walk per query tile, at its
                    # first head's step (steps of a tile are consecutive, the first one first)
                    if j == 0:
                        tile_wait = self._sem_wait_value(m_blk, n_blk, b, hm, mSumMin, mSumMax,
                                                         seqlen_q, seqlen_k, diag, lane)
                    wait_for = tile_wait
                elif const_expr(self.cfg.deterministic):
                    wait_for = self._sem_wait_value(m_blk, n_blk, b, hm, mSumMin, mSumMax,
                                                    seqlen_q, seqlen_k, diag, lane, h=h,
                                                    work_class=work_class, mClass=grid.mClass)
                if const_expr(self.cfg.first_store_flags):
                    # mark our previous first store (p1) once complete, before this tile can
                    # wait on another CTA: no writer ever waits while holding an unmarked tile
                    if p1 >= 0:
                        self._mark_stored(grid, p1, lane)
                        p1 = Int32(-1)
                for w in cutlass.range_constexpr(self.dq_blocks):
                    # block w free once its previous bulk op read it (the previous tile's groups
                    # come block by block: at most dq_blocks - 1 - w may stay pending)
                    cute.arch.cp_async_bulk_wait_group(self.dq_blocks - 1 - w, read=True)
                    cute.arch.barrier_arrive(barrier_id=_BAR_DQ_EMPTY + _BAR_DQ_WG_STEP * w,
                                             number_of_threads=self.dq_sync_threads)
                claim = Int32(0)
                item = (b * grid.num_h + hc_it) * num_m + m_blk
                if const_expr(self.cfg.first_store_flags):
                    # while the consumers compute: first writer of this query tile, or wait
                    # until the first one's rows are stored
                    claim = self._claim_tile(grid, item, lane)
                    if claim != 0:
                        if (claim & 2) == 0:
                            self._wait_stored(grid, item, lane)
                if const_expr(self.cfg.deterministic and self.cfg.lazy_release):
                    # publish the previous tile's add only now: its completion wait ran while
                    # the consumers computed this tile, never between them and the free buffer
                    if released >= 0:
                        self._publish_add(mSem, b, hc_it, released, n_blk, seqlen_k, lane)
                if const_expr(self.conv_rows):
                    # the add issued dq_count_lag tiles ago is complete by now (or soon)
                    lag = self.cfg.dq_count_lag
                    oldest = p1 if const_expr(lag == 1) else (p2 if const_expr(lag == 2) else p3)
                    if oldest >= 0:
                        cute.arch.cp_async_bulk_wait_group(lag - 1, read=False)
                        self._count_add(grid, oldest, lane)
                if const_expr(self.cfg.deterministic):
                    # wait for our turn while the consumers are still computing this tile
                    self._sem_wait(mSem, b, hc_it, m_blk, wait_for, lane, sync=self.cfg.det_sync)
                    cute.arch.sync_warp()
                    if const_expr(self.cfg.det_sync != "acquire"):  # flag seen before every add
                        cute.arch.fence_proxy("async.global")
                gdQ = cute.local_tile(gdq_it, (self.tile_m, self.d), (m_blk, 0))
                tile = None
                if const_expr(self.cfg.dq_uniform_rows or self.cfg.dq_per_wg):
                    # its index in dq_accum's tile order, warp-uniform: the bulk ops' addresses
                    # stay in uniform registers
                    tiles_per_head = num_m  # (64-row tiles: the padded rows are whole tiles)
                    if const_expr(self.tile_m != ROWS_PER_CTA):  # rows padded beyond the last
                        tiles_per_head = mdQacc.shape[2] // self.tile_m
                    tile = cute.arch.make_warp_uniform((b * mdQacc.shape[1] + hc_it)
                                                       * tiles_per_head + m_blk)
                for w in cutlass.range_constexpr(self.dq_blocks):
                    # each block as soon as its warpgroup(s) staged it
                    cute.arch.barrier(barrier_id=_BAR_DQ_FULL + _BAR_DQ_WG_STEP * w,
                                      number_of_threads=self.dq_sync_threads)
                    if const_expr(self.cfg.first_store_flags):
                        if claim == 0:
                            self._bulk_rows(gdQ, sdQ, lane, mdQacc, tile, w, store=True)
                        else:
                            self._bulk_rows(gdQ, sdQ, lane, mdQacc, tile, w, store=False)
                    elif const_expr(self.cfg.deterministic and self.cfg.dq_first_store):
                        # the chain's first adder (no earlier one to wait for) stores. Two copies
                        # of the row loop: choosing per bulk op instead made the deterministic
                        # backward 9-20 % slower (H200 call 96)
                        if wait_for == 0:
                            self._bulk_rows(gdQ, sdQ, lane, mdQacc, tile, w, store=True)
                        else:
                            self._bulk_rows(gdQ, sdQ, lane, mdQacc, tile, w, store=False)
                    else:
                        self._bulk_rows(gdQ, sdQ, lane, mdQacc, tile, w, store=False)
                    cute.arch.cp_async_bulk_commit_group()
                if const_expr(self.cfg.first_store_flags):
                    if claim == 0:
                        p1 = item
                if const_expr(self.cfg.deterministic and self.cfg.lazy_release):
                    released = m_blk
                elif const_expr(self.cfg.deterministic):
                    self._publish_add(mSem, b, hc_it, m_blk, n_blk, seqlen_k, lane)
                if const_expr(self.conv_rows):
                    lag = self.cfg.dq_count_lag
                    if const_expr(lag >= 3):
                        p3 = p2
                    if const_expr(lag >= 2):
                        p2 = p1
                    p1 = item
        if const_expr(self.cfg.deterministic and self.cfg.lazy_release):
            if released >= 0:
                self._publish_add(mSem, b, hc, released, n_blk, seqlen_k, lane)
        if const_expr(self.cfg.first_store_flags):
            # the walk's last first store: marked now, not at the next tile's first visit (its
            # completion wait overlaps the next tile's K/V load; nobody waits a tile change)
            if p1 >= 0:
                self._mark_stored(grid, p1, lane)
                p1 = Int32(-1)
        cute.arch.cp_async_bulk_wait_group(0, read=True)  # smem outlives the last reads
        return p1, p2, p3

    def _sdq_tensor(self, ptr):
        """The staged dQ tile ``[tile_m, d]`` fp32 in smem (``dq_stage_layout``)."""
        return cute.make_tensor(ptr, dq_stage_layout(
            self.tile_m, self.d, self.cfg.dq_swizzle, self.cfg.dq_per_wg,
            pad=self.cfg.dq_row_elems - self.d))

    @cute.jit
    def _bulk_rows(self, gdQ, sdQ, lane, mdQacc, tile, block: cutlass.Constexpr[int],
                   store: cutlass.Constexpr[bool]):
        """Hand-off unit ``block`` of the staged dQ tile (``dq_blocks``) to global: bulk
        reduce-adds, or (``store``, the tile's first writer with ``dq_first_store``) plain bulk
        copies; one per row, 2 rows per lane, or (``dq_swizzle``) one for the whole contiguous
        tile from lane 0, or (``dq_per_wg``) one for warpgroup ``block``'s block (they lie one
        after the other, in smem and in dq_accum alike), or (``dq_uniform_rows``) one per row
        from lane 0. The last two are addressed from ``tile`` (warp-uniform index of the tile in
        ``mdQacc``, whose rows are padded to whole tiles) by one elected lane."""
        if const_expr(self.cfg.dq_per_wg):
            elems = self.tile_m * self.d // 2
            with cute.arch.elect_one():
                base = mdQacc.iterator + cutlass.Int64(tile) * (self.tile_m * self.d)
                self._bulk_op(base + block * elems, sdQ.iterator + block * elems, elems * 4,
                              store)
        elif const_expr(self.cfg.dq_uniform_rows):
            with cute.arch.elect_one():
                tile_base = mdQacc.iterator + cutlass.Int64(tile) * (self.tile_m * self.d)
                # rolled, 4 ops per trip (24 instructions): fully unrolled, ptxas hoists all
                # 64 address pairs and the GQA head walk spills; at 16 per trip the consumers'
                # main loop gains an R2UR
                for r in cutlass.range(self.tile_m, unroll=4):
                    self._bulk_op(tile_base + cutlass.Int64(r) * self.d,
                                  sdQ.iterator + cute.crd2idx((r, 0), sdQ.layout), self.d * 4,
                                  store)
        elif const_expr(self.cfg.dq_swizzle):
            if lane == 0:
                self._bulk_op(gdQ.iterator, sdQ.iterator, self.tile_m * self.d * 4, store)
        else:
            row_op = lambda row: self._bulk_op(  # noqa: E731
                gdQ.iterator + cute.crd2idx((row, 0), gdQ.layout),
                sdQ.iterator + cute.crd2idx((row, 0), sdQ.layout), self.d * 4, store)
            for r in cutlass.range_constexpr(-(-self.tile_m // 32)):
                row = lane + 32 * r
                if const_expr(32 * (r + 1) <= self.tile_m):
                    row_op(row)
                elif row < self.tile_m:  # 80 rows: the third trip's first 16 lanes
                    row_op(row)

    @staticmethod
    def _bulk_op(dst, src, nbytes: int, store: bool):
        """One bulk smem -> global transfer of ``nbytes`` fp32: a plain copy (``store``) or a
        reduce-add."""
        if const_expr(store):
            prims.cp_async_bulk_global_shared_cta(dst, src, nbytes)
        else:
            prims.cp_reduce_async_bulk_global_shared_cta(
                dst, src, nbytes, op=prims.CpReduceOp.ADD, type=prims.CpReduceType.F32)

    @cute.jit
    def _claim_tile(self, grid, item, lane):
        """``dq_first_store``: set bit 0 of query tile ``item``'s flag; returns the old flag to
        every lane (0: this writer is the tile's first and stores its rows)."""
        old = Int32(0)
        if lane == 0:
            old = cute.arch.atomic_or(grid.mPending.iterator + item, Int32(1), sem="relaxed",
                                      scope="gpu")
        return cute.arch.shuffle_sync(old, 0)

    @cute.jit
    def _wait_stored(self, grid, item, lane):
        """``dq_first_store``: spin until the first writer marked ``item`` stored (bit 1); then
        every lane orders its bulk adds after the flag (as ``det_sync="relaxed"``)."""
        if lane == 0:
            ptr = grid.mPending.iterator + item
            seen = cute.arch.load(ptr, Int32, sem="relaxed", scope="gpu")
            while (seen & 2) == 0:
                seen = cute.arch.load(ptr, Int32, sem="relaxed", scope="gpu")
        cute.arch.sync_warp()
        cute.arch.fence_proxy("async.global")

    @cute.jit
    def _mark_stored(self, grid, item, lane):
        """``dq_first_store``: once this warp's bulk copies are complete (at L2, where the others'
        reduce-adds land), set bit 1 of ``item``'s flag."""
        cute.arch.cp_async_bulk_wait_group(0, read=False)
        cute.arch.fence_proxy("async.global")
        cute.arch.sync_warp()
        if lane == 0:
            cute.arch.atomic_or(grid.mPending.iterator + item, Int32(2), sem="relaxed",
                                scope="gpu")

    @cute.jit
    def _publish_add(self, mSem, b, hc, m_blk, n_blk, seqlen_k, lane):
        """Deterministic mode: wait until this warp's bulk adds are complete in global memory,
        then release query tile ``m_blk`` to the next key tile of the chain."""
        cute.arch.cp_async_bulk_wait_group(0, read=False)
        if const_expr(self.cfg.det_sync == "acquire"):
            cute.arch.fence_acq_rel_gpu()
        else:
            # the adds are complete (at L2, where the next adder's bulk reduce lands); order them
            # (async proxy) before the flag store. "relaxed" trusts that completion alone; fence +
            # release store compile to two MEMBAR.GPU
            cute.arch.fence_proxy("async.global")
        cute.arch.sync_warp()
        self._sem_release(mSem, b, hc, m_blk, n_blk, seqlen_k, lane,
                          sem="relaxed" if const_expr(self.cfg.det_sync == "relaxed")
                          else "release")

    @cute.jit
    def _count_add(self, grid, item, lane):
        """``fused_dq``: count the pending adds of query tile ``item`` (linear (b, h, m) index of
        the ``[B, H, Sq_pad / tile_m]`` counts) down by one, once the caller waited for this
        add's completion in global memory; the add that reaches 0 was the last, and the tile
        goes to the converter warps."""
        # Relaxed: the caller's wait_group (without .read) returned, so these adds are complete
        # at L2, where the converter's bulk copy reads them. An acq_rel atomic is a MEMBAR.GPU,
        # which also waits for this warp's newest adds still in flight (H200: full attention
        # 44.5 -> 48.4 ms at 32K).
        cute.arch.fence_proxy("async.global")
        cute.arch.sync_warp()  # every lane waited for its own rows' adds
        left = Int32(0)
        if lane == 0:
            left = cute.arch.atomic_add(grid.mPending.iterator + item, Int32(-1), sem="relaxed",
                                        scope="gpu")
        left = cute.arch.shuffle_sync(left, 0)
        if left == 1:
            self._hand_over(grid, item, lane)

    @cute.jit
    def _hand_over(self, grid, item, lane):
        """dQ writer -> converter warps: one finished query tile (linear (b, h, m) index), or -1
        for the end, through a queue of ``_CONV_QUEUE`` slots (full / empty mbarriers); the
        writer waits only when that many tiles wait for conversion."""
        # locals: a subscript store through ``grid`` inside the ``if`` below would make the DSL
        # carry the namespace out of it
        conv_slot, queue = grid.conv_slot, grid.queue
        count = conv_slot[_CONV_QUEUE]  # items handed over so far (only this warp writes it)
        slot = count % _CONV_QUEUE
        cute.arch.mbarrier_wait(queue + (slot + _CONV_QUEUE), ((count // _CONV_QUEUE) & 1) ^ 1)
        if lane == 0:
            conv_slot[slot] = item
            conv_slot[_CONV_QUEUE] = count + 1
            cute.arch.mbarrier_arrive(queue + slot)
        cute.arch.sync_warp()

    @cute.jit
    def _convert_tiles(self, sConv, mbar, conv_slot, queue, mdQacc, mdQout, num_m, softmax_scale,
                       ctid):
        """``fused_dq`` converter warps (producer group warps 2 and 3, ``ctid`` 0..63): for each
        finished query tile the dQ writer queues, bulk-copy its fp32 accumulator rows into smem
        ``conv_rows`` at a time (two buffers: the next copy is in flight while one is converted)
        and store them scaled, in the input dtype, into dq. The tile is final: every add to it
        completed before its count reached 0."""
        rows = self.conv_rows
        parts = self.tile_m // rows
        part_bytes = rows * self.d * 4
        chunks_per_row = self.d // _CONV_VEC
        num_h = mdQout.shape[2]
        seqlen_q = mdQout.shape[1]
        phase0 = Int32(0)  # the two buffers' bulk-copy barrier phases
        phase1 = Int32(0)
        count = Int32(0)  # queue items taken
        item = Int32(0)
        while item >= 0:
            slot = count % _CONV_QUEUE
            cute.arch.mbarrier_wait(queue + slot, (count // _CONV_QUEUE) & 1)
            item = conv_slot[slot]
            cute.arch.barrier(barrier_id=_BAR_CONV_BUF, number_of_threads=_CONV_THREADS)
            if ctid == 0:  # every converter thread read the slot: free it
                cute.arch.mbarrier_arrive(queue + (slot + _CONV_QUEUE))
            count += 1
            if item >= 0:
                m_blk = item % num_m
                rest = item // num_m
                h = rest % num_h
                b = rest // num_h
                gdQ = mdQacc[b, h, None, None]
                row0 = m_blk * self.tile_m
                if ctid == 0:
                    cute.arch.fence_proxy("async.global")  # the count-down before the copies
                    self._conv_load(sConv, mbar, gdQ, row0, 0, part_bytes)
                for part in cutlass.range_constexpr(parts):
                    buf = part % 2
                    if const_expr(part + 1 < parts):
                        if ctid == 0:  # buffer (part + 1) % 2 was read out before the last barrier
                            self._conv_load(sConv, mbar, gdQ, row0 + (part + 1) * rows,
                                            (part + 1) % 2, part_bytes)
                    if const_expr(buf == 0):
                        cute.arch.mbarrier_wait(mbar, phase0)
                        phase0 = phase0 ^ 1
                    else:
                        cute.arch.mbarrier_wait(mbar + 1, phase1)
                        phase1 = phase1 ^ 1
                    r0 = row0 + part * rows
                    for k in cutlass.range(rows * chunks_per_row // _CONV_THREADS, unroll=1):
                        chunk = ctid + k * _CONV_THREADS
                        row = r0 + chunk // chunks_per_row
                        if row < seqlen_q:
                            mdQout[b, row, h, chunk % chunks_per_row, None].store(
                                (sConv[chunk, None, buf].load() * softmax_scale).to(
                                    mdQout.element_type))
                    # the buffer is read out before a later bulk copy overwrites it
                    cute.arch.barrier(barrier_id=_BAR_CONV_BUF, number_of_threads=_CONV_THREADS)

    @cute.jit
    def _conv_load(self, sConv, mbar, gdQ, row, buf, part_bytes):
        """One bulk copy of ``conv_rows`` fp32 accumulator rows into conversion buffer ``buf``."""
        cute.arch.fence_proxy("async.shared", space="cta")  # its generic reads before the copy
        cute.arch.mbarrier_arrive_and_expect_tx(mbar + buf, part_bytes)
        prims.cp_async_bulk_shared_cluster_global(
            sConv[None, None, buf].iterator, gdQ.iterator + cute.crd2idx((row, 0), gdQ.layout),
            mbar + buf, part_bytes)

    @cute.jit
    def _sem_wait_value(self, m_blk, n_blk, b, hm, mSumMin, mSumMax, seqlen_q, seqlen_k, diag,
                        lane, h=None, work_class=None, mClass=None):
        """Semaphore value that allows key tile ``n_blk`` to add its dQ for query tile ``m_blk``.

        Adds go in *decreasing* key-tile order (under causal-like masks higher key tiles start
        lower in the walk and reach a query tile first). The semaphore holds ``num_n - n`` of
        the last adder (0: none yet), so we wait for ``num_n - nxt`` where nxt is the lowest
        n' > n_blk that visits m_blk (same ``tile_fully_masked`` predicate as every CTA), or 0.
        One warp tests 32 candidates per ballot. With two chains only n' of the same chain count:
        the same key-tile parity, or (``class_chains``) the same recorded ``work_class`` of
        query head ``h``.
        """
        num_n = cute.ceil_div(seqlen_k, self.tile_n)
        value = Int32(0)
        base = n_blk + 1
        while base < num_n:
            cand = base + lane
            visits = cand < num_n
            if const_expr(self.cfg.dq_chains == 2 and not self.cfg.class_chains):
                visits = visits & ((cand - n_blk) % 2 == 0)  # the next visitor of the same chain
            if cand < num_n:
                bmax, bmin = self._tile_bands(mSumMin, mSumMax, b, hm, cand, seqlen_q)
                skip = self._skipped(m_blk, cand * self.tile_n, bmax, bmin, seqlen_q, diag)
                visits = visits & (skip == False)  # noqa: E712  (DSL boolean)
                if const_expr(self.cfg.class_chains):
                    if not skip:  # a higher key tile of this head: claimed, so its class comes
                        visits = visits & (self._tile_class(mClass, b, h, cand) == work_class)
            ballot = cute.arch.vote_ballot_sync(visits)
            if ballot != 0:
                lowest = cute.arch.popc((ballot & (Int32(0) - ballot)) - Int32(1))
                value = num_n - (base + lowest)
                base = num_n
            else:
                base = base + 32
        return value

    def _dq_chain_head(self, h, n_blk, work_class=None):
        """Row of ``dq_accum`` / the semaphores holding key tile ``n_blk``'s chain of head ``h``:
        by key-tile parity, or (``class_chains``) by the tile's ``work_class``."""
        if const_expr(self.cfg.dq_chains == 1):
            return h
        if const_expr(self.cfg.class_chains):
            return h * self.cfg.dq_chains + work_class
        return h * self.cfg.dq_chains + n_blk % self.cfg.dq_chains

    @cute.jit
    def _record_class(self, mClass, b, h, n_blk, work_class, lane):
        """class_chains: publish a claimed tile's work class (stored + 1; 0 means not yet)."""
        if lane == 0:
            ptr = mClass.iterator + cute.crd2idx((b, h, n_blk), mClass.layout)
            cute.arch.store(ptr, work_class + 1, sem="relaxed", scope="gpu")

    @cute.jit
    def _tile_class(self, mClass, b, h, n_blk):
        """class_chains: the work class of a claimed tile, waiting for its claimer's record (it
        comes right after the claim, before that producer can block)."""
        ptr = mClass.iterator + cute.crd2idx((b, h, n_blk), mClass.layout)
        seen = cute.arch.load(ptr, Int32, sem="relaxed", scope="gpu")
        while seen == 0:
            seen = cute.arch.load(ptr, Int32, sem="relaxed", scope="gpu")
        return seen - 1

    @cute.jit
    def _sem_wait(self, mSem, b, h, m_blk, target, ctid, sync: str = "acquire"):
        """Spin until the semaphore of (b, h, m_blk) holds ``target``. ``sync`` (the dQ writer's
        ``det_sync``; its lanes then fence the async proxy before their bulk adds): "acquire"
        polls with acquire loads, each a load plus ``CCTL.IVALL`` that invalidates the SM's
        whole L1 (the consumers' LSE / delta / column loads included); "fence" polls relaxed
        and fences once (acquire) when the value came; "relaxed" only polls relaxed."""
        if ctid == 0:
            ptr = mSem.iterator + cute.crd2idx((b, h, m_blk), mSem.layout)
            sem = "acquire" if const_expr(sync == "acquire") else "relaxed"
            seen = cute.arch.load(ptr, Int32, sem=sem, scope="gpu")
            while seen != target:
                seen = cute.arch.load(ptr, Int32, sem=sem, scope="gpu")
            if const_expr(sync == "fence"):
                cute.arch.fence_acq_rel_gpu()

    @cute.jit
    def _sem_release(self, mSem, b, h, m_blk, n_blk, seqlen_k, ctid, sem: str = "release"):
        if ctid == 0:
            ptr = mSem.iterator + cute.crd2idx((b, h, m_blk), mSem.layout)
            num_n = cute.ceil_div(seqlen_k, self.tile_n)
            cute.arch.store(ptr, Int32(num_n - n_blk), sem=sem, scope="gpu")

    @cute.jit
    def _store_dkv(self, grid, acc_dK, acc_dV, th_dk, th_dv, mdK, mdV, b, h, hk, n_blk, seqlen_k,
                   softmax_scale, ctid):
        """Consumers: the finished key tile's dK (scaled) and dV, written once; with
        ``dkv_chain`` added to the GQA group's running sum in query-head order (BwdConfig)."""
        n0 = n_blk * self.tile_n
        if const_expr(self.cfg.dkv_bulk):
            self._stage_dkv(grid.storage, acc_dK, acc_dV, th_dk, th_dv, softmax_scale)
        elif const_expr(self.cfg.dkv_chain):
            group = grid.num_h // grid.mK.shape[2]
            member = h - hk * group
            flag = grid.mDkvFlags.iterator + cute.crd2idx((b, hk, n_blk), grid.mDkvFlags.layout)
            if member > 0:  # the sum over the group's earlier query heads is complete
                # (an acquire load also drops the SM's L1: the sums are read fresh)
                self._sem_wait(grid.mDkvFlags, b, hk, n_blk, member, ctid, sync="acquire")
                cute.arch.barrier(barrier_id=_BAR_DKV_CHAIN,
                                  number_of_threads=self.num_consumer_threads)
            last = member == group - 1
            if const_expr(self.cfg.dkv_red):
                self._reduce_rows(acc_dK, th_dk, grid.mdKacc, b, hk, n0, seqlen_k, self.d,
                                  softmax_scale, member)
                self._reduce_rows(acc_dV, th_dv, grid.mdVacc, b, hk, n0, seqlen_k, self.dv,
                                  Float32(1.0), member)
            else:
                self._chain_rows(acc_dK, th_dk, grid.mdKacc, mdK, b, hk, n0, seqlen_k, self.d,
                                 softmax_scale, member, last)
                self._chain_rows(acc_dV, th_dv, grid.mdVacc, mdV, b, hk, n0, seqlen_k, self.dv,
                                 Float32(1.0), member, last)
            # (the last head's adds need no flag: the postprocess runs after the kernel)
            if not last:  # every consumer's stores before the flag that hands the sum on
                cute.arch.fence_acq_rel_gpu()
                cute.arch.barrier(barrier_id=_BAR_DKV_CHAIN,
                                  number_of_threads=self.num_consumer_threads)
                if ctid == 0:
                    cute.arch.store(flag, member + 1, sem="release", scope="gpu")
        elif const_expr(self.cfg.dkv_last):
            group = grid.num_h // grid.mK.shape[2]
            self._store_rows(acc_dK, th_dk, grid.mdKacc, b, h, h, n0, seqlen_k, self.d,
                             softmax_scale)
            self._store_rows(acc_dV, th_dv, grid.mdVacc, b, h, h, n0, seqlen_k, self.dv,
                             Float32(1.0))
            # every consumer's partial stores before the count that may let another CTA read them
            cute.arch.fence_acq_rel_gpu()
            cute.arch.barrier(barrier_id=_BAR_DKV_CHAIN,
                              number_of_threads=self.num_consumer_threads)
            s_arrival = grid.s_arrival  # a local: the DSL carries what a branch writes to
            if ctid == 0:
                flag = grid.mDkvFlags.iterator + cute.crd2idx((b, hk, n_blk),
                                                              grid.mDkvFlags.layout)
                s_arrival[0] = cute.arch.atomic_add(flag, Int32(1), sem="acq_rel", scope="gpu")
            cute.arch.barrier(barrier_id=_BAR_DKV_CHAIN,
                              number_of_threads=self.num_consumer_threads)
            if s_arrival[0] == group - 1:  # the group's last: every partial is stored
                cute.arch.fence_acq_rel_gpu()
                self._sum_group_rows(acc_dK, th_dk, grid.mdKacc, mdK, b, hk * group, group, hk,
                                     n0, seqlen_k, self.d)
                self._sum_group_rows(acc_dV, th_dv, grid.mdVacc, mdV, b, hk * group, group, hk,
                                     n0, seqlen_k, self.dv)
        else:
            self._store_rows(acc_dK, th_dk, mdK, b, h, hk, n0, seqlen_k, self.d, softmax_scale)
            self._store_rows(acc_dV, th_dv, mdV, b, h, hk, n0, seqlen_k, self.dv, Float32(1.0))

    def _dkv_stage_tensor(self, storage, width: int):
        """dkv_bulk: a key tile's fp32 dK or dV ``[tile_n, width]`` in the staging region (sP on,
        ``dkv_region_bytes``), laid out as the group's sum holds it (``dq_stage_layout``'s
        swizzled block). Taken from the shared-memory base where it is used: a pointer held
        across the main loop makes the bidirectional C=2 consumers spill."""
        return cute.make_tensor(cute.recast_ptr(storage.sP.data_ptr(), dtype=Float32),
                                dq_stage_layout(self.tile_n, width, swizzle=True))

    @cute.jit
    def _stage_dkv(self, storage, acc_dK, acc_dV, th_dk, th_dv, softmax_scale):
        """dkv_bulk, consumers: the key tile's scaled dK, then its dV, staged in the region for
        the dQ writer's bulk ops; each waits until the region is free (the walk's dQ reads, then
        the previous tile's bulk read), and the epilogue ends when dV is read out (the next key
        tile's P / dS stores reuse the region)."""
        for i in cutlass.range_constexpr(cute.size(acc_dK)):
            acc_dK[i] = acc_dK[i] * softmax_scale
        for which in cutlass.range_constexpr(2):
            acc, th, width = ((acc_dK, th_dk, self.d) if const_expr(which == 0)
                              else (acc_dV, th_dv, self.dv))
            cute.arch.barrier(barrier_id=_BAR_DKV_STAGE, number_of_threads=_DQ_SYNC_THREADS)
            cute.autovec_copy(acc, th.partition_C(self._dkv_stage_tensor(storage, width)))
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.barrier_arrive(barrier_id=_BAR_DKV_FULL, number_of_threads=_DQ_SYNC_THREADS)
        cute.arch.barrier(barrier_id=_BAR_DKV_STAGE, number_of_threads=_DQ_SYNC_THREADS)

    @cute.jit
    def _add_dkv(self, grid, b, h, n_blk, lane):
        """dkv_bulk, dQ writer warp (after its walk's dQ reads): each tile the consumers stage
        goes to the group's sum with one bulk op, query head 0's a copy and the others' a
        reduce-add after the previous head's flag; then this head's flag, once its adds are
        complete at L2 (the last head's sums are read by the postprocess, after the kernel)."""
        num_hk = grid.mK.shape[2]
        group = grid.num_h // num_hk
        hk = h // group
        member = h - hk * group
        # the key tile's block in the sums, warp-uniform (uniform registers: the writer warp
        # has 24 per thread)
        tile = cute.arch.make_warp_uniform((b * num_hk + hk) * grid.mDkvFlags.shape[2] + n_blk)
        cute.arch.barrier_arrive(barrier_id=_BAR_DKV_STAGE, number_of_threads=_DQ_SYNC_THREADS)
        for which in cutlass.range_constexpr(2):
            mSum, width = ((grid.mdKacc, self.d) if const_expr(which == 0)
                           else (grid.mdVacc, self.dv))
            cute.arch.barrier(barrier_id=_BAR_DKV_FULL, number_of_threads=_DQ_SYNC_THREADS)
            if const_expr(which == 0):
                if member > 0:  # the group's sum holds heads 0 .. member - 1
                    self._sem_wait(grid.mDkvFlags, b, hk, n_blk, member, lane, sync="fence")
                    cute.arch.sync_warp()
                    cute.arch.fence_proxy("async.global")  # the flag seen before the reduce-add
            dst = mSum.iterator + cutlass.Int64(tile) * (self.tile_n * width)
            src = self._dkv_stage_tensor(grid.storage, width).iterator
            with cute.arch.elect_one():
                if member == 0:
                    self._bulk_op(dst, src, self.tile_n * width * 4, True)
                else:
                    self._bulk_op(dst, src, self.tile_n * width * 4, False)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)
            cute.arch.barrier_arrive(barrier_id=_BAR_DKV_STAGE, number_of_threads=_DQ_SYNC_THREADS)
        if member < group - 1:
            cute.arch.cp_async_bulk_wait_group(0, read=False)
            cute.arch.fence_proxy("async.global")
            cute.arch.sync_warp()
            if lane == 0:
                cute.arch.store(grid.mDkvFlags.iterator + tile, member + 1, sem="release",
                                scope="gpu")

    @cute.jit
    def _sum_group_rows(self, acc, th_mma, mParts, mOut, b, h0, group, hk, n0, seqlen_k, width):
        """dkv_last: this thread's elements of the GQA group's partials (query heads ``h0`` ..
        ``h0 + group - 1``) summed in head order into ``acc``, then converted into ``mOut``."""
        # from zero (0 + p0 == p0): the stored accumulator's old values die here
        acc.fill(0.0)
        _, tc = self._tile_rows(th_mma, mParts, b, h0, n0, width)
        for j in cutlass.range(group, unroll=1):
            tj, _ = self._tile_rows(th_mma, mParts, b, h0 + j, n0, width)
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    acc[i] = acc[i] + tj[i]
        to, _ = self._tile_rows(th_mma, mOut, b, hk, n0, width)
        for i in cutlass.range_constexpr(cute.size(acc)):
            if n0 + tc[i][0] < seqlen_k:
                to[i] = acc[i].to(mOut.element_type)

    @cute.jit
    def _chain_rows(self, acc, th_mma, mSum, mOut, b, hk, n0, seqlen_k, width, scale, member,
                    last):
        """dkv_chain: ``acc * scale`` added to the group's running fp32 sum (after it, as the
        partials' reduction adds), then the sum stored for the next query head, or (``last``)
        converted into ``mOut``."""
        ts, tc = self._tile_rows(th_mma, mSum, b, hk, n0, width)
        to, _ = self._tile_rows(th_mma, mOut, b, hk, n0, width)
        for i in cutlass.range_constexpr(cute.size(acc)):
            acc[i] = acc[i] * scale
        if member > 0:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    acc[i] = ts[i] + acc[i]
        if last:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    to[i] = acc[i].to(mOut.element_type)
        else:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    ts[i] = acc[i]

    @cute.jit
    def _reduce_rows(self, acc, th_mma, mSum, b, hk, n0, seqlen_k, width, scale, member):
        """dkv_red: ``acc * scale`` into the group's fp32 sum: stored by the group's first query
        head, reduce-added in L2 by the others (each after its predecessor's flag)."""
        ts, tc = self._tile_rows(th_mma, mSum, b, hk, n0, width)
        for i in cutlass.range_constexpr(cute.size(acc)):
            acc[i] = acc[i] * scale
        if member == 0:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    ts[i] = acc[i]
        else:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    cute.arch.red(ts.iterator + cute.crd2idx(i, ts.layout), acc[i], op="add",
                                  dtype=Float32, sem="relaxed", scope="gpu")

    def _tile_rows(self, th_mma, mRows, b, head, n0, width):
        """This thread's elements of the key tile at ``n0`` in ``mRows [B, Sk, heads, width]``,
        and their (row, column) coordinates inside the tile."""
        g = cute.local_tile(mRows[b, None, head, None], (self.tile_n, width), (n0 // self.tile_n, 0))
        return (th_mma.partition_C(g),
                th_mma.partition_C(cute.make_identity_tensor((self.tile_n, width))))

    @cute.jit
    def _store_rows(self, acc, th_mma, mOut, b, h, hk, n0, seqlen_k, width, scale):
        head = hk
        if const_expr(self.cfg.dkv_partials):
            head = h
        tg, tc = self._tile_rows(th_mma, mOut, b, head, n0, width)
        if const_expr(self.cfg.interior_dkv):
            if n0 + self.tile_n <= seqlen_k:
                for i in cutlass.range_constexpr(cute.size(acc)):
                    tg[i] = (acc[i] * scale).to(mOut.element_type)
            else:
                for i in cutlass.range_constexpr(cute.size(acc)):
                    if n0 + tc[i][0] < seqlen_k:
                        tg[i] = (acc[i] * scale).to(mOut.element_type)
        else:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    tg[i] = (acc[i] * scale).to(mOut.element_type)


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
    ``[B, H, Sq_pad/64]`` only when deterministic, ``tile_classes`` int32
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
        out["semaphores"] = ((batch, num_heads * cfg.dq_chains, nm), "int32")
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
