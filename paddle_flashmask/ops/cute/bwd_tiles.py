"""Which query tiles a backward key tile visits: the one place the backward kernels ask it.

The main kernel walks, for each key tile, the query tiles this predicate keeps; the preprocess
counts, for each query tile, the key tiles that keep it (the number of dQ adds it will receive,
see ``BwdConfig.fused_dq``). Both call these functions, so the count and the walk cannot disagree.
The rules themselves are ``paddle_flashmask.semantics``'s (``band_bounds``, ``tile_fully_masked``),
traced in the DSL.
"""
from __future__ import annotations

from typing import Any, Optional

import cutlass

from paddle_flashmask import semantics


def mask_head(h: Any, num_heads: Any, num_mask_heads: Any, num_columns: Optional[int]) -> Any:
    """Mask head of query head ``h`` (Hm divides H); ``h`` itself without a mask."""
    if num_columns is None:
        return h
    return h // (num_heads // num_mask_heads)


def tile_bands(num_columns: Optional[int], causal: bool, mSumMin: Any, mSumMax: Any, b: Any,
               hm: Any, n_blk: Any, seqlen_q: Any) -> tuple:
    """``(band_max, band_min)`` of key tile ``n_blk`` from the tile summary; without a mask a band
    starting at Sq, which masks nothing inside the sequence, so the same predicates apply."""
    if num_columns is None:
        none = semantics.Bands(seqlen_q, None, None, None)
        return none, none
    bmax = semantics.band_bounds([mSumMax[b, hm, n_blk, c] for c in range(num_columns)], causal)
    bmin = semantics.band_bounds([mSumMin[b, hm, n_blk, c] for c in range(num_columns)], causal)
    return bmax, bmin


def query_tile_skipped(m_blk: Any, tile_m: int, n0: Any, bmax: Any, bmin: Any, seqlen_q: Any,
                       causal: bool, diag: Any) -> Any:
    """True when the key tile starting at key ``n0`` never sees query tile ``m_blk``."""
    row_begin = m_blk * tile_m
    row_end = cutlass.min(row_begin + tile_m, seqlen_q)
    return semantics.tile_fully_masked(row_begin, row_end, n0, bmax, bmin, causal, diag)
