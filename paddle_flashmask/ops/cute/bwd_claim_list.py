"""The persistent backward's claim list: its tile list stably partitioned by work class, on the GPU.

With ``BwdConfig.claim_passes`` = P > 1 the backward's producers used to run P times over the tile
list, each claim classifying its key tile (band loads plus a ballot per 32 query tiles) and
publishing it only in the pass of its class. Every CTA thus spent about ``P x items / CTAs``
serial claim round trips, most of them skipped, before and between real work. With
``BwdConfig.claim_list`` the classification runs once, in parallel, before the main kernel, and the
producers claim from the resulting list in one pass:

    tile list (``_tile_of`` order)   t:    0   1   2   3   4   5   6   7  ...
    work class (``_work_class``)   c[t]:   0   1   0   2   1   0   1   2  ...
    claim list (stable by class)         [ 0  2  5 | 1  4  6 | 3  7 ] ...   entry = t * 4 + c

The partition is stable, so the list is exactly the order the P passes claimed in: the
deterministic mode's argument (a key tile's dQ adds wait only on tiles earlier in the list) holds
unchanged. ``class_chains`` also gets its class records (``tile_classes``, class + 1) here, so a
dQ writer never spins on one.

Three launches on the main kernel's stream, no host sync, O(items) int32 workspace:

1. ``classify`` (one warp per list position, 4 per CTA): the main kernel's own ``_tile_of``,
   ``_tile_heads`` and ``_work_class`` (so there is one copy of the rule), the class into
   ``item_classes[t]``, one atomic into ``chunk_counts[t // CHUNK, c]``;
2. ``scatter`` (one CTA of CHUNK threads per CHUNK positions): per class, the counts of the earlier
   chunks and of all chunks (strided sums, warp reductions), the rank inside the chunk (warp
   ballots and per-warp counts in shared memory), then ``order[start[c] + rank] = t * 4 + c``.

``chunk_counts`` must be zero before ``classify`` (:func:`workspace_shapes` says which words; the
host memsets them with the tile counter).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

import numpy as np

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32, const_expr
import cuda.bindings.driver as cuda

from .flash_bwd_prepost import rowmajor

CHUNK = 1024  # list positions per scatter CTA (its threads)
_WARP = 32
_CLASSIFY_WARPS = 4
_MAX_CLASSES = 4  # BwdConfig.claim_passes <= 4: the entry's class takes two bits


def num_items(config, batch: int, seqlen_k: int, num_heads: int, num_kv_heads: int) -> int:
    """Positions in the claim list: the persistent backward's work items."""
    from .bwd_rules import backward_work_items
    return backward_work_items(config, batch, seqlen_k, num_heads, num_kv_heads)


def num_chunks(items: int) -> int:
    return -(-items // CHUNK)


def workspace_shapes(config, batch: int, seqlen_k: int, num_heads: int,
                     num_kv_heads: int) -> dict:
    """int32 buffers: ``claim_order [items]``, ``item_classes [items]`` and ``chunk_counts
    [chunks, 4]`` (zeroed by the host before each call)."""
    items = num_items(config, batch, seqlen_k, num_heads, num_kv_heads)
    return {"claim_order": ((items,), "int32"), "item_classes": ((items,), "int32"),
            "chunk_counts": ((num_chunks(items), _MAX_CLASSES), "int32")}


def entry_item(entry):
    """List position (``_tile_of`` index) of a claim-list entry."""
    return entry >> 2


def entry_class(entry):
    """Work class of a claim-list entry."""
    return entry & 3


def reference_claim_list(classes) -> list:
    """What the kernels write for per-position classes ``classes`` (host check): positions in
    class order, each class in list order, as entries ``t * 4 + c``."""
    return [t * 4 + c for c in range(_MAX_CLASSES) for t, ct in enumerate(classes) if ct == c]


def reference_classes(config, startend_row_indices, batch: int, seqlen_q: int, seqlen_k: int,
                      num_heads: int, num_kv_heads: int) -> np.ndarray:
    """Host oracle of ``item_classes``: each list position's work class, decoded and counted
    independently of the kernels (numpy, ``semantics.classify_tiles`` of the tile summary)."""
    from paddle_flashmask import semantics
    from . import tile_scheduler as sched
    from .work_order_kernel import _plain_indices

    idx = (_plain_indices(config.causal, batch, seqlen_q, seqlen_k) if startend_row_indices is None
           else np.asarray(startend_row_indices))
    tiles = semantics.classify_tiles(semantics.tile_summary(idx, config.tile_n), config.causal,
                                     seqlen_q, config.tile_m)  # [B, Hm, num_m, num_n]
    visited = (tiles != semantics.SKIP).sum(axis=2)
    num_m, num_n = tiles.shape[2], tiles.shape[3]
    num_y = num_kv_heads if config.gqa_in_cta else num_heads
    group = num_heads // num_kv_heads if config.gqa_in_cta else 1
    heads_per_mask_head = num_heads // idx.shape[1]
    out = np.empty(num_n * num_y * batch, dtype=np.int64)
    for t in range(out.size):
        if config.key_major:  # key tile n of every head of a batch, then n + 1
            y, n, b = t % num_y, (t // num_y) % num_n, t // (num_y * num_n)
        else:  # a head's key tiles consecutive
            n, y, b = t % num_n, (t // num_n) % num_y, t // (num_n * num_y)
        if config.deterministic:  # a head's key tiles last first
            n = num_n - 1 - n
        hm = (y * group) // heads_per_mask_head
        out[t] = sched.claim_pass(int(visited[b, hm, n]), num_m, config.claim_passes,
                                  config.class_ratio)
    return out


def check_claim_list(order, item_classes, want_classes) -> list:
    """What is wrong with a built list (empty: nothing): the classes against the oracle's, and
    the list against the stable partition of the oracle's classes."""
    order, item_classes = np.asarray(order).ravel(), np.asarray(item_classes).ravel()
    problems = []
    bad = np.flatnonzero(item_classes != want_classes)
    if bad.size:
        problems.append(f"item_classes differ at {bad.size} positions, first {int(bad[0])}: "
                        f"{int(item_classes[bad[0]])} != {int(want_classes[bad[0]])}")
    want = np.array(reference_claim_list(want_classes))
    if not np.array_equal(order, want):
        first = int(np.flatnonzero(order != want)[0]) if order.shape == want.shape else -1
        problems.append(f"claim_order is not the stable class partition (first difference at "
                        f"{first})")
    return problems


class BwdClaimList:
    """The two kernels of one backward variant (``config.claim_list``), sharing its tile rules."""

    def __init__(self, config) -> None:
        from .flash_bwd_sm90 import FlashMaskBwdSm90
        if not config.claim_list:
            raise ValueError(f"BwdClaimList: expected a config with claim_list=True, found "
                             f"claim_list={config.claim_list}")
        self.cfg = config
        self.bwd = FlashMaskBwdSm90(config)  # the main kernel's list decode and work classes

    @cute.jit
    def __call__(self, k_ptr: cute.Pointer, smin_ptr: Optional[cute.Pointer],
                 smax_ptr: Optional[cute.Pointer], idx_ptr: Optional[cute.Pointer],
                 order_ptr: cute.Pointer, item_class_ptr: cute.Pointer, counts_ptr: cute.Pointer,
                 class_ptr: Optional[cute.Pointer], b: Int32, sq: Int32, sk: Int32, h: Int32,
                 hk: Int32, hm: Int32, stream: cuda.CUstream):
        cfg = self.cfg
        tn = self.bwd.tile_n
        nt = cute.ceil_div(sk, tn)
        mK = rowmajor(k_ptr, (b, sk, hk, cfg.head_dim))  # its extents only
        mSumMin = mSumMax = mIdx = None
        if const_expr(cfg.num_columns is not None):
            mSumMin = rowmajor(smin_ptr, (b, hm, nt, cfg.num_columns))
            mSumMax = rowmajor(smax_ptr, (b, hm, nt, cfg.num_columns))
            mIdx = rowmajor(idx_ptr, (b, hm, sk, cfg.num_columns))
        total = self.bwd.list_length(sk, h, hk, b)
        mOrder = cute.make_tensor(order_ptr, cute.make_layout((total,)))
        mItemClass = cute.make_tensor(item_class_ptr, cute.make_layout((total,)))
        chunks = cute.ceil_div(total, CHUNK)
        mCounts = cute.make_tensor(counts_ptr, cute.make_layout((chunks, _MAX_CLASSES),
                                                                stride=(_MAX_CLASSES, 1)))
        mClass = None
        if const_expr(cfg.class_chains):
            mClass = rowmajor(class_ptr, (b, h, nt))
        self.classify_kernel(mK, mSumMin, mSumMax, mIdx, mItemClass, mCounts, mClass, sq, sk,
                             h, total).launch(
            grid=[cute.ceil_div(total, _CLASSIFY_WARPS), 1, 1],
            block=[_WARP * _CLASSIFY_WARPS, 1, 1], stream=stream)
        self.scatter_kernel(mItemClass, mCounts, mOrder, total).launch(
            grid=[chunks, 1, 1], block=[CHUNK, 1, 1], stream=stream)

    @cute.kernel
    def classify_kernel(self, mK: cute.Tensor, mSumMin: Optional[cute.Tensor],
                        mSumMax: Optional[cute.Tensor], mIdx: Optional[cute.Tensor],
                        mItemClass: cute.Tensor, mCounts: cute.Tensor,
                        mClass: Optional[cute.Tensor], seqlen_q: Int32, seqlen_k: Int32,
                        num_h: Int32, total: Int32):
        lane = cute.arch.lane_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        t = cute.arch.block_idx()[0] * _CLASSIFY_WARPS + warp
        if t < total:
            grid = SimpleNamespace(num_h=num_h, mK=mK, mIdx=mIdx, mSumMin=mSumMin,
                                   mSumMax=mSumMax, seqlen_q=seqlen_q)
            n_blk, y, b = self.bwd._tile_of(t, grid, seqlen_k)
            h, _hk, hm, _group = self.bwd._tile_heads(y, num_h, mK, mIdx)
            num_m = cute.ceil_div(seqlen_q, self.bwd.tile_m)
            work_class = self.bwd._work_class(grid, b, hm, n_blk * self.bwd.tile_n, num_m,
                                              seqlen_k - seqlen_q, self.cfg.claim_passes)
            if lane == 0:
                mItemClass[t] = work_class
                cute.arch.atomic_add(mCounts.iterator + cute.crd2idx((t // CHUNK, work_class),
                                                                     mCounts.layout), Int32(1))
                if const_expr(self.cfg.class_chains):
                    mClass[b, h, n_blk] = work_class + 1

    @cute.kernel
    def scatter_kernel(self, mItemClass: cute.Tensor, mCounts: cute.Tensor, mOrder: cute.Tensor,
                       total: Int32):
        passes = self.cfg.claim_passes
        tid = cute.arch.thread_idx()[0]
        lane = cute.arch.lane_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        chunk = cute.arch.block_idx()[0]
        chunks = mCounts.shape[0]
        t = chunk * CHUNK + tid
        work_class = Int32(_MAX_CLASSES)  # past the list: in no class
        if t < total:
            work_class = mItemClass[t]
        smem = cutlass.utils.SmemAllocator()
        # per class and warp: earlier chunks' count, all chunks' count, this warp's count
        s_sums = smem.allocate_tensor(Int32, cute.make_layout((_WARP, passes, 3)), 16)
        below = (Uint32(1) << Uint32(lane)) - Uint32(1)
        rank = Int32(0)
        for c in cutlass.range_constexpr(passes):
            before = Int32(0)
            everywhere = Int32(0)
            for j in cutlass.range(tid, chunks, CHUNK, unroll=1):
                n = mCounts[j, c]
                everywhere = everywhere + n
                if j < chunk:
                    before = before + n
            before = cute.arch.warp_reduction_sum(before)
            everywhere = cute.arch.warp_reduction_sum(everywhere)
            mine = Uint32(cute.arch.vote_ballot_sync(work_class == c))
            if work_class == c:
                rank = Int32(cute.arch.popc(mine & below))
            if lane == 0:
                s_sums[warp, c, 0] = before
                s_sums[warp, c, 1] = everywhere
                s_sums[warp, c, 2] = Int32(cute.arch.popc(mine))
        cute.arch.barrier()
        if work_class < passes:
            pos = rank
            for c in cutlass.range_constexpr(passes):
                for w in cutlass.range(_WARP, unroll_full=True):
                    if c < work_class:  # every item of a lighter-numbered class comes first
                        pos = pos + s_sums[w, c, 1]
                    if c == work_class:  # this class: earlier chunks, then earlier warps
                        pos = pos + s_sums[w, c, 0]
                        if w < warp:
                            pos = pos + s_sums[w, c, 2]
            mOrder[pos] = t * 4 + work_class


def _placeholder(align: int = 4) -> cute.Pointer:
    return cute.runtime.make_ptr(Int32, 1 << 12, cute.AddressSpace.gmem, assumed_align=align)


def compile_claim_list(config):
    """The jitted claim-list builder of backward variant ``config`` (``claim_list`` on):
    ``fn(k, col_min|None, col_max|None, startend_row_indices|None, claim_order, item_classes,
    chunk_counts, tile_classes|None, B, Sq, Sk, H, Hk, Hm, stream)``, raw device pointers."""
    from .flash_bwd_prepost import _dsl_dtype
    has_mask = config.num_columns is not None
    k = cute.runtime.make_ptr(_dsl_dtype(config.dtype), 1 << 12, cute.AddressSpace.gmem,
                              assumed_align=16)
    masks = [_placeholder() if has_mask else None for _ in range(3)]
    return cute.compile(BwdClaimList(config), k, *masks, _placeholder(), _placeholder(),
                        _placeholder(), _placeholder() if config.class_chains else None,
                        Int32(1), Int32(128), Int32(128), Int32(1), Int32(1), Int32(1),
                        cuda.CUstream(0))
