"""Per-key-tile summary of ``startend_row_indices`` on the GPU (DESIGN §3, §4).

For every key tile of ``tile_n`` columns, the min and the max of each index column:
``indices`` int32 ``[B, Hm, Sk, C]`` -> ``col_min``, ``col_max`` int32 ``[B, Hm, ceil(Sk/tile_n), C]``,
exactly what :func:`paddle_flashmask.semantics.tile_summary` computes on the host (a partial last
tile reduces over its real columns only). The attention kernels read these bounds to decide
SKIP / PARTIAL / FULL per tile, so no ``[S/tile, S/tile]`` table is ever built.

Work is O(B * Hm * Sk * C): one warp per key tile, lanes stride over the tile's rows (the C values
of a row are contiguous, so a warp reads one contiguous span), then ``redux.sync`` min/max.
Only ``tile_n`` and ``C`` are compile-time; every extent is dynamic, so one compiled variant
serves all shapes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32

from .dlpack import fake_tensor

WARPS_PER_BLOCK = 4
WARP_SIZE = 32
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


@dataclass(frozen=True)
class SummaryConfig:
    """Compile-time parameters of the summary kernel."""
    tile_n: int
    num_columns: int

    def __post_init__(self) -> None:
        if self.tile_n <= 0:
            raise ValueError(f"tile_n: expected a positive int, found {self.tile_n}")
        if self.num_columns not in (1, 2, 4):
            raise ValueError(f"num_columns: expected 1, 2 or 4, found {self.num_columns}")


class TileSummaryKernel:
    """Min/max of each index column over each key tile; compiled once per :class:`SummaryConfig`."""

    def __init__(self, config: SummaryConfig) -> None:
        self.tile_n = config.tile_n
        self.num_columns = config.num_columns

    @cute.kernel
    def kernel(self, m_indices: cute.Tensor, m_min: cute.Tensor, m_max: cute.Tensor):
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        block_tile, head, batch = cute.arch.block_idx()
        tile = block_tile * WARPS_PER_BLOCK + warp
        seqlen_k = m_indices.shape[2]
        if tile < m_min.shape[2]:
            first_key = tile * self.tile_n
            for c in cutlass.range_constexpr(self.num_columns):
                lo = Int32(INT32_MAX)
                hi = Int32(INT32_MIN)
                for k in cutlass.range(lane, self.tile_n, WARP_SIZE):
                    key = first_key + k
                    if key < seqlen_k:
                        value = m_indices[batch, head, key, c]
                        lo = cutlass.min(lo, value)
                        hi = cutlass.max(hi, value)
                lo = cute.arch.warp_redux_sync(lo, "min")
                hi = cute.arch.warp_redux_sync(hi, "max")
                if lane == 0:
                    m_min[batch, head, tile, c] = lo
                    m_max[batch, head, tile, c] = hi

    @cute.jit
    def __call__(self, m_indices: cute.Tensor, m_min: cute.Tensor, m_max: cute.Tensor,
                 stream: cuda.CUstream):
        num_tiles = m_min.shape[2]
        self.kernel(m_indices, m_min, m_max).launch(
            grid=[(num_tiles + WARPS_PER_BLOCK - 1) // WARPS_PER_BLOCK, m_indices.shape[1],
                  m_indices.shape[0]],
            block=[WARP_SIZE * WARPS_PER_BLOCK, 1, 1],
            stream=stream,
        )


def compile_summary(config: SummaryConfig) -> Callable:
    """Compile the summary kernel for ``config``.

    Returns a callable ``fn(indices, col_min, col_max, stream)`` taking
    :func:`~paddle_flashmask.ops.cute.dlpack.runtime_tensor` tensors of compact int32
    ``[B, Hm, Sk, C]`` / ``[B, Hm, Tn, C]`` and a ``cuda.CUstream``.
    """
    return cute.compile(TileSummaryKernel(config), fake_tensor(Int32, 4), fake_tensor(Int32, 4),
                        fake_tensor(Int32, 4), cute.runtime.make_fake_stream())
