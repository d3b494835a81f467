"""Persistent tile scheduler for the SM90 forward.

A grid of ``num_ctas`` CTAs (at most one per SM) walks the linear list of work tiles
``(m_block, head, batch)`` with a static stride. The list is ordered *heaviest query tiles first*:
tile index ``t`` maps to ``m_block = num_m_blocks - 1 - t // (H * B)``. For causal and
bottom-right-heavy masks (causal documents, prefix-LM) the last query tiles carry the most key
tiles, so they start first and the short ones fill the tail (LPT order); for flat masks (sliding
window, documents) the order is neutral. Static: no per-tile table, nothing to allocate.

All producer and consumer roles of a CTA call the same functions, so they walk the same sequence.
Plain functions over DSL integers (not a stateful object) so they can live inside dynamic loops.
"""
from __future__ import annotations

import cutlass.cute as cute
from cutlass import Int32


def grid_size(num_m_blocks: int, num_heads: int, batch: int, num_sms: int) -> int:
    """CTAs to launch: one per SM, fewer when there is less work."""
    return max(1, min(num_m_blocks * num_heads * batch, num_sms))


def total_work(num_m_blocks: Int32, num_heads: Int32, batch: Int32) -> Int32:
    return num_m_blocks * num_heads * batch


def first_work() -> Int32:
    return Int32(cute.arch.block_idx()[0])


def next_work(t: Int32) -> Int32:
    return t + Int32(cute.arch.grid_dim()[0])


def decode_work(t: Int32, num_m_blocks: Int32, num_heads: Int32, batch: Int32):
    """Linear work index -> (m_block, head, batch), heaviest (last) query tiles first."""
    hb = num_heads * batch
    m_rank = t // hb
    rest = t - m_rank * hb
    return num_m_blocks - 1 - m_rank, rest % num_heads, rest // num_heads
