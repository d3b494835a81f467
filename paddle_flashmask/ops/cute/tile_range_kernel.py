"""Per-query-tile key-tile ranges for the forward's producer (``FwdConfig.tile_ranges``).

For every ``(batch, mask head, query tile)``: ``[n_lo, n_hi)``, the first and one past the last
key tile the forward will load (not fully masked by the tile summary), or ``[0, 0)`` when the
query tile sees nothing. The producer then walks only the 32-tile chunks covering that range
instead of every chunk up to the causal diagonal: for a query tile inside a 2K document of a 32K
sequence that is one or two chunks instead of up to ten, each a summary load and a ballot in
front of the tile's first K load. Holes inside the range (a shared question, a global prefix)
are still skipped tile by tile.

One warp per query tile classifies 32 key tiles per step with the producer's own
:func:`.mask.chunk_visit_bits` (the same predicates from ``semantics``), so the ranges can only
be as wide as or narrower than what the producer would visit; O(S / tile_m) output, no
``[S/tile, S/tile]`` table. :func:`reference_ranges` is the numpy version from
``semantics.classify_tiles`` (what the GPU check compares against).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
from cutlass import Int32

from paddle_flashmask import semantics
from paddle_flashmask.ops.cute import mask as fm_mask
from paddle_flashmask.ops.cute.launch_args import gmem_ptr, int32_arg, launch

WARPS_PER_CTA = 4  # query tiles per CTA
WARP = 32


@dataclass(frozen=True)
class TileRangeConfig:
    """Compile-time parameters: the forward's tile shape and mask form (extents are dynamic)."""
    tile_m: int
    tile_n: int
    causal: bool
    mask_columns: int

    def __post_init__(self) -> None:
        if self.tile_m <= 0 or self.tile_n <= 0:
            raise ValueError(f"TileRangeConfig tile: expected positive tile_m, tile_n, found "
                             f"({self.tile_m}, {self.tile_n})")
        if self.mask_columns is None:
            raise ValueError("TileRangeConfig.mask_columns: expected 1, 2 or 4 (ranges need "
                             "startend_row_indices), found None")
        semantics.column_names(self.causal, self.mask_columns)  # validates the (causal, C) form

    @classmethod
    def for_forward(cls, fwd_config) -> "TileRangeConfig":
        return cls(fwd_config.tile_m, fwd_config.tile_n, bool(fwd_config.causal),
                   fwd_config.mask_columns)


def ranges_shape(batch: int, mask_heads: int, seqlen_q: int, tile_m: int) -> tuple[int, ...]:
    """int32 ``[B, Hm, ceil(Sq / tile_m), 2]``."""
    return (batch, mask_heads, -(-int(seqlen_q) // tile_m), 2)


def ranges_tensor(ranges_ptr: cute.Pointer, num_m: Int32, num_mask_heads: Int32, batch: Int32):
    """The ranges, int32 ``[B, Hm, num_m, 2]`` row-major, as the ``(2, num_m, Hm, B)`` view the
    range kernel writes and the forward's producer reads."""
    return cute.make_tensor(ranges_ptr, cute.make_layout(
        (2, num_m, num_mask_heads, batch), stride=(1, 2, 2 * num_m, 2 * num_m * num_mask_heads)))


def reference_ranges(startend_row_indices: np.ndarray, causal: bool, seqlen_q: int, tile_m: int,
                     tile_n: int) -> np.ndarray:
    """int32 ``[B, Hm, num_m, 2]``: what the kernel writes, from ``semantics.classify_tiles``."""
    summary = semantics.tile_summary(np.asarray(startend_row_indices), tile_n)
    visited = semantics.classify_tiles(summary, causal, seqlen_q, tile_m) != semantics.SKIP
    b, hm, num_m, num_k = visited.shape
    out = np.zeros((b, hm, num_m, 2), dtype=np.int32)
    any_visit = visited.any(axis=-1)
    first = np.argmax(visited, axis=-1)
    last = num_k - 1 - np.argmax(visited[..., ::-1], axis=-1)
    out[..., 0] = np.where(any_visit, first, 0)
    out[..., 1] = np.where(any_visit, last + 1, 0)
    return out


class TileRangeKernel:
    def __init__(self, config: TileRangeConfig) -> None:
        self.cfg = config
        self.tile_m = config.tile_m
        self.tile_n = config.tile_n
        self.causal = config.causal
        self.mask_columns = config.mask_columns

    @cute.jit
    def __call__(self, col_min_ptr: cute.Pointer, col_max_ptr: cute.Pointer,
                 ranges_ptr: cute.Pointer, batch: Int32, seqlen_q: Int32, seqlen_k: Int32,
                 num_mask_heads: Int32, stream: cuda.CUstream):
        tm, tn, c = self.tile_m, self.tile_n, self.mask_columns
        num_m = (seqlen_q + tm - 1) // tm
        num_k = (seqlen_k + tn - 1) // tn
        mColMin, mColMax = fm_mask.summary_tensors(col_min_ptr, col_max_ptr, c, num_k,
                                                   num_mask_heads, batch)
        mRanges = ranges_tensor(ranges_ptr, num_m, num_mask_heads, batch)
        self.kernel(mColMin, mColMax, mRanges, seqlen_q, seqlen_k).launch(
            grid=[(num_m + WARPS_PER_CTA - 1) // WARPS_PER_CTA, num_mask_heads, batch],
            block=[WARP * WARPS_PER_CTA, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mColMin: cute.Tensor, mColMax: cute.Tensor, mRanges: cute.Tensor,
               seqlen_q: Int32, seqlen_k: Int32):
        tn = self.tile_n
        lane = cute.arch.lane_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        block_m, mask_head, batch = cute.arch.block_idx()
        m_block = block_m * WARPS_PER_CTA + warp
        if m_block < mRanges.shape[1]:
            row_begin, row_end, diag_offset, num_k = fm_mask.query_tile_geometry(
                m_block, self.tile_m, tn, seqlen_q, seqlen_k)
            n_end = fm_mask.key_tile_end(row_end, diag_offset, tn, num_k, self.causal)
            n_lo = Int32(0)
            n_hi = Int32(0)
            for chunk in cutlass.range((n_end + WARP - 1) // WARP, unroll=1):
                visit, _ = fm_mask.chunk_visit_bits(
                    mColMin, mColMax, chunk, lane, 0, n_end, row_begin, row_end, tn, seqlen_q,
                    seqlen_k, diag_offset, mask_head, batch, self.causal, self.mask_columns)
                n_lo, n_hi = fm_mask.widen_range(n_lo, n_hi, visit, chunk * WARP)
            if lane == 0:
                mRanges[0, m_block, mask_head, batch] = n_lo
                mRanges[1, m_block, mask_head, batch] = n_hi


class CompiledTileRanges:
    """``fn(col_min, col_max, ranges, batch, seqlen_q, seqlen_k, num_mask_heads, stream)``: objects
    with a device address (``data_ptr``); ``col_min``/``col_max`` the forward's tile summary,
    ``ranges`` int32 of :func:`ranges_shape`."""

    def __init__(self, config: TileRangeConfig, compiled) -> None:
        self.config = config
        self.compiled = compiled

    def __call__(self, col_min, col_max, ranges, batch: int, seqlen_q: int, seqlen_k: int,
                 num_mask_heads: int, stream) -> None:
        if batch * num_mask_heads * seqlen_q == 0 or seqlen_k == 0:
            return
        if not isinstance(stream, cuda.CUstream):
            stream = cuda.CUstream(int(stream))
        launch(self.compiled, gmem_ptr(col_min, Int32, 4), gmem_ptr(col_max, Int32, 4),
               gmem_ptr(ranges, Int32, 4), int32_arg(batch), int32_arg(seqlen_q), int32_arg(seqlen_k),
               int32_arg(num_mask_heads), stream)


def compile_tile_ranges(config: TileRangeConfig):
    """The jitted function (one launch); cached on disk by ``cache.get_or_compile``."""
    def placeholder():
        return cute.runtime.make_ptr(Int32, 1 << 12, cute.AddressSpace.gmem, assumed_align=4)

    return cute.compile(TileRangeKernel(config), placeholder(), placeholder(), placeholder(),
                        Int32(1), Int32(128), Int32(128), Int32(1), cuda.CUstream(0))
