"""Work order for the forward's persistent scheduler: query tiles sorted by their real work.

For every ``(batch, mask head, query tile)`` this counts the key tiles the forward's producer will
load, using the same tile summary (``col_min``/``col_max``) and the same predicates
(``semantics.tile_fully_masked`` / ``tile_needs_mask`` through :func:`.mask.classify_key_tile`),
then writes ``order``: int32 ``[B * H * ceil(Sq / tile_m)]`` work items, heaviest first, each item
``(batch * H + head) * num_m_blocks + m_block``. All on the GPU, in stream order, no host sync, and
O(S / tile) metadata only (no ``[S/tile, S/tile]`` table):

1. ``clear``: zero the weight histogram.
2. ``count``: one warp per query tile; 32 lanes classify 32 key tiles at a time, ballots give the
   visited (not skipped) and partial ones. Weight = ``WEIGHT_FULL * full + WEIGHT_PARTIAL * partial``
   (a partial tile also runs the element mask in registers and its producer stages the tile's
   column bounds in shared memory; ~1/8 more is a rough estimate of that). The warp stores the
   weight and adds ``H / Hm`` (the query heads sharing that mask head) to ``histogram[weight]``.
3. ``scan``: one warp turns the histogram into start offsets in *descending* weight order
   (exclusive scan, 32 buckets per step, carry passed by shuffles).
4. ``scatter``: one thread per work item takes ``atomicAdd(&start[weight], 1)`` as its position.
   Counting sort: exact by weight; items of equal weight land in arbitrary order (atomics), which
   does not matter to the scheduler (equal estimated work).

Workspace (int32, one buffer): ``weights [B, Hm, num_m_blocks]`` then ``histogram [num_buckets]``
with ``num_buckets = WEIGHT_PARTIAL * ceil(Sk / tile_n) + 1`` (every possible weight).

Host side: :class:`WorkOrderConfig`, :func:`compile_work_order` (-> :class:`CompiledWorkOrder`),
the buffer sizes, and :func:`reference_weights` / :func:`reference_order_weights`, the numpy
version of the same ordering computed from :func:`paddle_flashmask.semantics.classify_tiles`
(what the GPU check compares against).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32

from paddle_flashmask import semantics
from paddle_flashmask.ops.cute import mask as fm_mask
from paddle_flashmask.ops.cute.launch_args import gmem_ptr, int32_arg, launch

WEIGHT_FULL = 8
WEIGHT_PARTIAL = 9
COUNT_WARPS = 4  # query tiles per CTA of the count kernel
FLAT_THREADS = 256  # clear / scatter kernels
WARP = 32


@dataclass(frozen=True)
class WorkOrderConfig:
    """Compile-time parameters: the forward's tile shape and mask form (every extent is dynamic)."""
    tile_m: int
    tile_n: int
    causal: bool
    mask_columns: Optional[int]  # C, or None for plain causal / full attention

    def __post_init__(self) -> None:
        if self.tile_m <= 0 or self.tile_n <= 0:
            raise ValueError(f"WorkOrderConfig tile: expected positive tile_m, tile_n, found "
                             f"({self.tile_m}, {self.tile_n})")
        fm_mask.num_mask_columns(self.causal, self.mask_columns)  # validates the (causal, C) form

    @classmethod
    def for_forward(cls, fwd_config: Any) -> "WorkOrderConfig":
        return cls(fwd_config.tile_m, fwd_config.tile_n, bool(fwd_config.causal),
                   fwd_config.mask_columns)


def num_m_blocks(seqlen_q: int, tile_m: int) -> int:
    return -(-int(seqlen_q) // tile_m)


def num_buckets(seqlen_k: int, tile_n: int) -> int:
    """Histogram size: every weight a query tile can have, 0 .. WEIGHT_PARTIAL * key tiles."""
    return WEIGHT_PARTIAL * (-(-int(seqlen_k) // tile_n)) + 1


def workspace_elems(config: WorkOrderConfig, batch: int, mask_heads: int, seqlen_q: int,
                    seqlen_k: int) -> int:
    """int32 elements of the workspace: per-query-tile weights, then the histogram."""
    return (batch * mask_heads * num_m_blocks(seqlen_q, config.tile_m)
            + num_buckets(seqlen_k, config.tile_n))


def order_length(config: WorkOrderConfig, batch: int, num_heads: int, seqlen_q: int) -> int:
    return batch * num_heads * num_m_blocks(seqlen_q, config.tile_m)


# --------------------------------------------------------------------------------------------------
# Host reference (numpy, from semantics.classify_tiles)
# --------------------------------------------------------------------------------------------------

def _plain_indices(causal: bool, batch: int, seqlen_q: int, seqlen_k: int) -> np.ndarray:
    """The constant bands the kernels use for plain attention (see ``mask.constant_bands``)."""
    if causal:
        return np.full((batch, 1, seqlen_k, 1), seqlen_q, dtype=np.int32)
    cols = np.stack([np.full(seqlen_k, seqlen_q), np.zeros(seqlen_k)], axis=1).astype(np.int32)
    return np.broadcast_to(cols, (batch, 1, seqlen_k, 2)).copy()


def reference_weights(startend_row_indices: Optional[np.ndarray], causal: bool, batch: int,
                      seqlen_q: int, seqlen_k: int, tile_m: int, tile_n: int) -> np.ndarray:
    """int64 ``[B, Hm, num_m_blocks]``: what the count kernel writes, from ``classify_tiles``."""
    idx = (_plain_indices(causal, batch, seqlen_q, seqlen_k) if startend_row_indices is None
           else np.asarray(startend_row_indices))
    classes = semantics.classify_tiles(semantics.tile_summary(idx, tile_n), causal, seqlen_q,
                                       tile_m)
    full = (classes == semantics.FULL).sum(axis=-1, dtype=np.int64)
    partial = (classes == semantics.PARTIAL).sum(axis=-1, dtype=np.int64)
    return WEIGHT_FULL * full + WEIGHT_PARTIAL * partial


def item_weights(weights: np.ndarray, num_heads: int) -> np.ndarray:
    """Weight of every work item ``(b * H + h) * num_m_blocks + m`` (query head h uses mask head
    ``h // (H / Hm)``, as in the forward)."""
    b, hm, nm = weights.shape
    per_head = np.repeat(weights, num_heads // hm, axis=1)  # [B, H, M]
    return per_head.reshape(b * num_heads * nm)


def reference_order_weights(weights: np.ndarray, num_heads: int) -> np.ndarray:
    """The weight sequence a correct order has: every item's weight, sorted heaviest first.

    Items of equal weight may come in any order, so a GPU order is checked by being a permutation
    whose item weights, in order, equal this sequence.
    """
    return np.sort(item_weights(weights, num_heads))[::-1]


# --------------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------------

class WorkOrderKernels:
    def __init__(self, config: WorkOrderConfig) -> None:
        self.cfg = config
        self.tile_m = config.tile_m
        self.tile_n = config.tile_n
        self.causal = config.causal
        self.mask_columns = config.mask_columns

    @cute.jit
    def __call__(
        self,
        col_min_ptr: Optional[cute.Pointer],
        col_max_ptr: Optional[cute.Pointer],
        workspace_ptr: cute.Pointer,
        order_ptr: cute.Pointer,
        batch: Int32,
        seqlen_q: Int32,
        seqlen_k: Int32,
        num_heads: Int32,
        num_mask_heads: Int32,
        stream: cuda.CUstream,
    ):
        tm, tn = self.tile_m, self.tile_n
        num_m = (seqlen_q + tm - 1) // tm
        num_k = (seqlen_k + tn - 1) // tn
        mColMin, mColMax = None, None
        if cutlass.const_expr(self.mask_columns is not None):
            mColMin, mColMax = fm_mask.summary_tensors(col_min_ptr, col_max_ptr,
                                                       self.mask_columns, num_k, num_mask_heads,
                                                       batch)
        num_weights = batch * num_mask_heads * num_m
        mWeight = cute.make_tensor(workspace_ptr, cute.make_layout(
            (num_m, num_mask_heads, batch), stride=(1, num_m, num_m * num_mask_heads)))
        buckets = num_k * WEIGHT_PARTIAL + 1
        mHist = cute.make_tensor(workspace_ptr + num_weights, cute.make_layout((buckets,)))
        total = num_weights * (num_heads // num_mask_heads)
        mOrder = cute.make_tensor(order_ptr, cute.make_layout((total,)))

        self.clear_kernel(mHist).launch(
            grid=[(buckets + FLAT_THREADS - 1) // FLAT_THREADS, 1, 1], block=[FLAT_THREADS, 1, 1],
            stream=stream)
        self.count_kernel(mColMin, mColMax, mWeight, mHist, seqlen_q, seqlen_k,
                          num_heads // num_mask_heads).launch(
            grid=[(num_m + COUNT_WARPS - 1) // COUNT_WARPS, num_mask_heads, batch],
            block=[WARP * COUNT_WARPS, 1, 1], stream=stream)
        self.scan_kernel(mHist).launch(grid=[1, 1, 1], block=[WARP, 1, 1], stream=stream)
        self.scatter_kernel(mWeight, mHist, mOrder, num_heads, num_heads // num_mask_heads).launch(
            grid=[(total + FLAT_THREADS - 1) // FLAT_THREADS, 1, 1], block=[FLAT_THREADS, 1, 1],
            stream=stream)

    @cute.kernel
    def clear_kernel(self, mHist: cute.Tensor):
        i = cute.arch.block_idx()[0] * FLAT_THREADS + cute.arch.thread_idx()[0]
        if i < cute.size(mHist):
            mHist[i] = Int32(0)

    @cute.kernel
    def count_kernel(self, mColMin: Optional[cute.Tensor], mColMax: Optional[cute.Tensor],
                     mWeight: cute.Tensor, mHist: cute.Tensor, seqlen_q: Int32, seqlen_k: Int32,
                     heads_per_mask_head: Int32):
        tn = self.tile_n
        lane = cute.arch.lane_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        block_m, mask_head, batch = cute.arch.block_idx()
        m_block = block_m * COUNT_WARPS + warp
        if m_block < mWeight.shape[0]:
            row_begin, row_end, diag_offset, num_k = fm_mask.query_tile_geometry(
                m_block, self.tile_m, tn, seqlen_q, seqlen_k)
            visited = Int32(0)
            partial_visited = Int32(0)
            # Every key tile is classified (no causal clip as in the producer: the causal term of
            # tile_fully_masked already skips the tiles right of the diagonal), 32 at a time.
            for chunk in cutlass.range((num_k + WARP - 1) // WARP, unroll=1):
                visit_bits, partial_bits = fm_mask.chunk_visit_bits(
                    mColMin, mColMax, chunk, lane, 0, num_k, row_begin, row_end, tn, seqlen_q,
                    seqlen_k, diag_offset, mask_head, batch, self.causal, self.mask_columns)
                visited = visited + Int32(cute.arch.popc(visit_bits))
                partial_visited = partial_visited + Int32(
                    cute.arch.popc(visit_bits & Uint32(partial_bits)))
            weight = (WEIGHT_FULL * (visited - partial_visited)
                      + WEIGHT_PARTIAL * partial_visited)
            if lane == 0:
                mWeight[m_block, mask_head, batch] = weight
                cute.arch.atomic_add(mHist.iterator + weight, heads_per_mask_head)

    @cute.kernel
    def scan_kernel(self, mHist: cute.Tensor):
        """One warp: histogram -> start offset of each weight, heaviest weight at offset 0."""
        lane = cute.arch.lane_idx()
        buckets = cute.size(mHist)
        carry = Int32(0)  # items of all heavier weights done so far
        for chunk in cutlass.range((buckets + WARP - 1) // WARP, unroll=1):
            p = chunk * WARP + lane  # position in descending weight order
            w = buckets - 1 - p
            count = Int32(0)
            if p < buckets:
                count = mHist[w]
            inclusive = count
            for s in cutlass.range_constexpr(5):
                other = cute.arch.shuffle_sync_up(inclusive, offset=1 << s)
                if lane >= (1 << s):
                    inclusive = inclusive + other
            if p < buckets:
                mHist[w] = carry + inclusive - count
            carry = carry + cute.arch.shuffle_sync(inclusive, WARP - 1)

    @cute.kernel
    def scatter_kernel(self, mWeight: cute.Tensor, mHist: cute.Tensor, mOrder: cute.Tensor,
                       num_heads: Int32, heads_per_mask_head: Int32):
        item = cute.arch.block_idx()[0] * FLAT_THREADS + cute.arch.thread_idx()[0]
        if item < cute.size(mOrder):
            num_m = mWeight.shape[0]
            m_block = item % num_m
            rest = item // num_m
            head = rest % num_heads
            batch = rest // num_heads
            weight = mWeight[m_block, head // heads_per_mask_head, batch]
            slot = cute.arch.atomic_add(mHist.iterator + weight, Int32(1))
            mOrder[slot] = item


# --------------------------------------------------------------------------------------------------
# Host API
# --------------------------------------------------------------------------------------------------

def _placeholder_ptr(dtype=Int32, align: int = 4):
    return cute.runtime.make_ptr(dtype, 1 << 12, cute.AddressSpace.gmem, assumed_align=align)


class CompiledWorkOrder:
    """``fn(col_min, col_max, workspace, order, batch, seqlen_q, seqlen_k, num_heads,
    num_mask_heads, stream)``: tensors are anything with a device address (``data_ptr``);
    ``col_min``/``col_max`` the forward's tile summary (None for plain attention), ``workspace``
    int32 of :func:`workspace_elems` elements, ``order`` int32 of :func:`order_length`."""

    def __init__(self, config: WorkOrderConfig, compiled) -> None:
        self.config = config
        self.compiled = compiled

    def __call__(self, col_min, col_max, workspace, order, batch: int, seqlen_q: int,
                 seqlen_k: int, num_heads: int, num_mask_heads: int, stream) -> None:
        if (col_min is None) != (self.config.mask_columns is None):
            raise ValueError(f"col_min: presence must match the variant's mask columns "
                             f"{self.config.mask_columns}")
        if batch * num_heads * seqlen_q == 0 or seqlen_k == 0:
            return
        if not isinstance(stream, cuda.CUstream):
            stream = cuda.CUstream(int(stream))
        launch(self.compiled, gmem_ptr(col_min, Int32, 4), gmem_ptr(col_max, Int32, 4),
               gmem_ptr(workspace, Int32, 4), gmem_ptr(order, Int32, 4),
               int32_arg(batch), int32_arg(seqlen_q), int32_arg(seqlen_k), int32_arg(num_heads),
               int32_arg(num_mask_heads), stream)


def compile_work_order(config: WorkOrderConfig):
    """The jitted function (clear + count + scan + scatter, four launches on one stream)."""
    has_mask = config.mask_columns is not None
    return cute.compile(
        WorkOrderKernels(config),
        _placeholder_ptr() if has_mask else None, _placeholder_ptr() if has_mask else None,
        _placeholder_ptr(), _placeholder_ptr(),
        Int32(1), Int32(128), Int32(128), Int32(1), Int32(1), cuda.CUstream(0))
