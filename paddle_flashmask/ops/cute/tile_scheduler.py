"""Persistent tile scheduler for the SM90 forward.

A grid of ``num_ctas`` CTAs (at most one per SM) walks the linear list of work tiles
``(m_block, head, batch)`` with a static stride. The list keeps the query tiles of one
(batch, head) together, so the CTAs that run at the same time share that head's K/V in L2, and
within a head takes the *heaviest query tiles first*: ``m_block = num_m_blocks - 1 - t % M``. For
causal and bottom-right-heavy masks (causal documents, prefix-LM) the last query tiles carry the
most key tiles, so they start first and the short ones fill in behind them; for flat masks
(sliding window, documents) the order is neutral. Static: no per-tile table, nothing to allocate.

Work-ordered variant (``FwdConfig.work_order``; the host API turns it on for GQA grids with fewer
than :data:`FEW_ITEMS_PER_CTA` query tiles per CTA): the order is a list of work
items computed on the GPU from the tile summary (``work_order_kernel``: query tiles sorted by the
key tiles they really load, heaviest first, O(S/tile) per head). With the dynamic schedule (below)
the counter's claim ``t`` takes item ``order[t]`` (read once by the producer, which publishes
the item itself): the heaviest items start first and the CTAs that drew light ones take more.
Without it, the CTAs take slots ``t = cta, cta + grid, ...`` statically; slot ``t`` reads item
``order[snake(t)]``. Static striding rather than an atomic work counter: producer and consumers
of a CTA compute the same sequence with no communication (an atomic counter needs the producer
to publish each item to the consumers through shared memory and a barrier per work tile, plus a
counter reset per launch), and over a list sorted heaviest first, striding already hands every
CTA one item of each "row" of ``grid`` similar items. The snake (row r left to right when r is
even, right to left when odd) keeps CTA 0 from taking the heaviest item of every row.

Dynamic variant (``FwdConfig.dynamic_schedule``): the same linear list, but the producer warp
claims each next index from a global counter (:func:`claim_work`, one atomic add) and publishes it
to the consumers with the tile's Q stage, so CTAs that drew light tiles take more of them (query
tiles of document masks differ several-fold in work; a static stride leaves the CTA with the
heaviest share last). The host zeroes the counter before each launch (:func:`reset_counter`).

All producer and consumer roles of a CTA call the same functions, so they walk the same sequence.
Plain functions over DSL integers (not a stateful object) so they can live inside dynamic loops.
"""
from __future__ import annotations

from typing import Optional

import cuda.bindings.driver as cu
import cutlass
import cutlass.cute as cute
from cutlass import Int32

from .dlpack import check
from .launch_args import device_address


def grid_size(num_m_blocks: int, num_heads: int, batch: int, num_sms: int) -> int:
    """CTAs to launch: one per SM, fewer when there is less work."""
    return max(1, min(num_m_blocks * num_heads * batch, num_sms))


def total_work(num_m_blocks: Int32, num_heads: Int32, batch: Int32) -> Int32:
    return num_m_blocks * num_heads * batch


def first_work() -> Int32:
    return Int32(cute.arch.block_idx()[0])


def next_work(t: Int32) -> Int32:
    return t + Int32(cute.arch.grid_dim()[0])


@cute.jit
def claim_work(counter: cute.Tensor, lane: Int32, block: cutlass.Constexpr[int] = 1) -> Int32:
    """Dynamic schedule: lane 0 takes the next ``block`` linear work indices (one atomic) and
    returns the first; every lane of the warp gets it."""
    claimed = Int32(0)
    if lane == 0:
        claimed = cute.arch.atomic_add(counter.iterator, Int32(block))
    return cute.arch.shuffle_sync(claimed, 0)


def reset_counter(counter, stream, words: int = 1) -> None:
    """Host: zero a persistent kernel's work counter (or its first ``words`` int32 words) on
    ``stream`` before its launch."""
    check(cu.cuMemsetD32Async(device_address(counter), 0, words, stream), "cuMemsetD32Async")


def decode_work(t: Int32, num_m_blocks: Int32, num_heads: Int32, batch: Int32):
    """Linear work index -> (m_block, head, batch).

    The query tiles of one (batch, head) are consecutive, heaviest (last) first within it. The
    CTAs running at the same time then read the K/V of one or two heads, which stay in L2; with
    (batch, head) varying fastest (the first version), 132 CTAs streamed the K/V of up to 132
    heads at once, far more than L2 holds (Nsight Compute on the H200, full attention B=4 S=8K:
    91 % L2 and 61 % DRAM throughput, 533 TFLOP/s).
    """
    bh = t // num_m_blocks
    m_rank = t - bh * num_m_blocks
    return num_m_blocks - 1 - m_rank, bh % num_heads, bh // num_heads


def snake_slot(t: Int32, total: Int32, grid: Int32) -> Int32:
    """Slot ``t`` of the static striding -> the index it reads in a heaviest-first list.

    Row ``r = t // grid`` is read left to right when even and right to left when odd; the last,
    possibly short, row is reversed within its own length, so the map stays a bijection of
    ``[0, total)``. Plain arithmetic: runs on DSL integers and on Python ints (tests).
    """
    row = t // grid
    col = t - row * grid
    row_start = row * grid
    row_len = cutlass.min(grid, total - row_start)
    odd = row & 1
    return row_start + col + odd * (row_len - 1 - 2 * col)


def decode_item(item: Int32, num_m_blocks: Int32, num_heads: Int32):
    """Work item ``(batch * H + head) * num_m_blocks + m_block`` -> (m_block, head, batch)."""
    rest = item // num_m_blocks
    return item - rest * num_m_blocks, rest % num_heads, rest // num_heads


def work_tile(order: Optional[cute.Tensor], t: Int32, total: Int32, num_m_blocks: Int32,
              num_heads: Int32, batch: Int32, claimed: bool = False):
    """(m_block, head, batch) of slot ``t``: the static order, or the GPU-computed work order.

    ``order`` is None (trace-time constant) for the default scheduler, which then traces exactly
    :func:`decode_work`. With an order, ``claimed`` (trace-time constant) says what ``t`` is:
    under the dynamic schedule the order's entry itself (the producer reads ``order[claim]``
    once, :func:`claimed_item`, and publishes the item, so the consumers decode it without a
    global load of their own), under the static striding a slot read through the snake.
    """
    if order is None:
        return decode_work(t, num_m_blocks, num_heads, batch)
    if claimed:
        return decode_item(t, num_m_blocks, num_heads)
    grid = Int32(cute.arch.grid_dim()[0])
    return decode_item(order[snake_slot(t, total, grid)], num_m_blocks, num_heads)


def claimed_item(order: Optional[cute.Tensor], claim: Int32) -> Int32:
    """Dynamic schedule: the work item of claim ``claim`` (< the item count: past the end the
    producer publishes the sentinel instead) -- the list index itself, or with a work order its
    entry ``order[claim]``."""
    return claim if order is None else order[claim]


# Below this many work items per CTA a persistent grid's tail dominates: the last items claimed
# finish alone while the other CTAs idle, so the schedules that start heavy items first pay for
# their extra cost (the backward's claims by work class, the forward's claimed work order). At
# more items per CTA the tail is short and their cost (extra claims, heads interleaved in L2)
# makes them slower (H200, sessions 10, 13 and 14: flash_bwd_sm90.default_claim_passes,
# flash_fwd_sm90.default_work_order).
FEW_ITEMS_PER_CTA = 16


def few_items_per_cta(work_items: int, grid_ctas: int) -> bool:
    """True when a persistent grid of ``grid_ctas`` CTAs gets fewer than
    :data:`FEW_ITEMS_PER_CTA` of ``work_items`` each."""
    return grid_ctas > 0 and work_items < FEW_ITEMS_PER_CTA * grid_ctas


CLAIM_CLASS_RATIO = 4  # work classes of a multi-pass claim: each 4x lighter than the one before


def claim_pass(visited, num_tiles, passes: int, ratio: int = CLAIM_CLASS_RATIO):
    """The claim pass (work class) of an item visiting ``visited`` of ``num_tiles`` tiles.

    A persistent grid that claims over ``passes`` passes of its work list takes in pass ``p``
    only the items of class ``p``: class 0 visits at least ``num_tiles / 4``, class 1 at least
    ``num_tiles / 16``, ..., the last class the rest (4: ``ratio``, the default). The heaviest items then start first wherever
    they sit in the list, and the list's order (a head's tiles together, for L2) holds inside a
    class; the last items claimed are the lightest, so the grid's tail stays short
    (``bench/schedule_sim.py``). Plain arithmetic: runs on DSL integers and on Python ints.
    """
    lighter_thresholds_met = 0
    for q in range(passes - 1):
        met = visited * (ratio ** (q + 1)) >= num_tiles
        lighter_thresholds_met = lighter_thresholds_met + (int(met) if isinstance(met, bool)
                                                           else Int32(met))
    return (passes - 1) - lighter_thresholds_met
