"""Shared-memory budget, named barrier ids and small layout helpers of the SM90 backward.

Read by ``bwd_config`` (the shared-memory budget decides ``dq_in_smem``, ``conv_rows``, ...) and by
the kernel's pieces (``flash_bwd_sm90``, ``bwd_dq_writer``, ``bwd_dkv_store``), which must agree on
the barrier ids and thread counts they synchronise with.
"""
from __future__ import annotations

from typing import Optional

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass.tensor_utils import LayoutEnum

from .flash_bwd_prepost import BY_THREAD_WG_THREADS

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
# is 1 KB-aligned) and the persistent tile slot (16 B aligned). The 1 KB .nv.shared section of
# every DSL cubin is the driver's reserved smem, outside the 227 KB (ncu, session 32: static 0,
# driver 1.02 KB; FA4's backward launches with 232,448 B dynamic beside the same section)
_SMEM_OVERHEAD = 1024 + 16
_CONV_SPARE = 4096 - _SMEM_OVERHEAD  # fused_dq's buffers were sized with a 4 KB overhead: kept
_CONV_VEC = 4  # fp32 elements per 16-byte smem read of the fused dQ conversion


def dq_stage_layout(rows: int, d: int, swizzle: bool, per_wg: bool = False, pad: int = _DQ_PAD,
                    frag: bool = False):
    """Layout of the fp32 dQ staging tile ``[rows, d]``: rows padded by ``pad`` against bank
    conflicts, or (``swizzle``, d a power of two) a contiguous block whose 16-byte chunks are
    XOR-swizzled by row (chunk ^= row % 8; the postprocess undoes it in dq_accum), or
    (``per_wg``) two such blocks of ``d / 2`` columns, one after the other: columns
    ``[w * d/2, (w + 1) * d/2)`` (consumer warpgroup w's) at offset ``w * rows * d/2``.
    ``frag`` (swizzled forms): within each block's rows, column 16J + 8h + 2q + e sits at
    16J + 4q + 2h + e, so a consumer thread's four values of a 16-column group are one
    16-byte chunk."""
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
    if frag:  # (frag) column 16J + 8h + 2q + e at 16J + 4q + 2h + e: a thread's (e, h) in a chunk
        in_block = ((2, 4, 2, width // 16), (1, 4, 2, 16))
        if not per_wg:
            return cute.make_composed_layout(swizzle_atom, 0, cute.make_layout(
                (rows, in_block[0]), stride=(d, in_block[1])))
        return cute.make_composed_layout(swizzle_atom, 0, cute.make_layout(
            (rows, (in_block[0], 2)), stride=(width, (in_block[1], rows * width))))
    if not per_wg:
        return cute.make_composed_layout(swizzle_atom, 0,
                                         cute.make_layout((rows, d), stride=(d, 1)))
    return cute.make_composed_layout(
        swizzle_atom, 0, cute.make_layout((rows, (width, 2)), stride=(width, (1, rows * width))))


def dq_frag_order(values: int):
    """``dq_frag``: a consumer thread's dQ accumulator fragment ((e, row half, j), ``values``
    fp32, j = 2J + h over its 16-column groups J) re-viewed as (e, h, row half, J), so that
    (e, h) -- one 16-byte chunk of the frag layout -- comes first: one STS.128 each."""
    return cute.make_layout((2, 2, 2, values // 8), stride=(1, 4, 2, 8))


def dq_by_thread_view(base, thread, values: int) -> cute.Tensor:
    """``dq_by_thread``: consumer thread ``thread``'s ``values`` fp32 of the staged dQ tile as
    (4, values / 4): its quad k at float ``(w * values / 4 + k) * 512 + 4 t`` of the tile
    (warpgroup w = thread // 128, t = thread % 128), so a warp's k-th quads are 512 contiguous
    bytes (flash_bwd_prepost.by_thread_chunk_origin reads them back)."""
    return cute.make_tensor(base + dq_by_thread_start(thread, values), cute.make_layout(
        (4, values // 4), stride=(1, 4 * BY_THREAD_WG_THREADS)))


def dq_by_thread_start(thread, values: int):
    """``dq_by_thread``: the float offset of consumer thread ``thread``'s first quad."""
    wg_threads = BY_THREAD_WG_THREADS
    return (thread // wg_threads) * wg_threads * values + (thread % wg_threads) * 4


def stat_pair_step(word_pair: int) -> int:
    """``shfl_stats``: lane l holds column pair l + ``stat_pair_step(k)`` in its words 2k,
    2k + 1 (``_fetch_stats``'s loads; ``stat_holder_lane`` / ``stat_lane_word`` find it
    again)."""
    return 32 * word_pair


def stat_words(tile_m: int) -> int:
    """``shfl_stats``: words per lane and statistic: whole word pairs of 32 column pairs each
    (2 at 64 rows, 4 at 80 and 128; at 80 rows lanes 8-31 hold no column in their second pair)."""
    return 2 * -(-tile_m // 64)


def stat_lane_word(c: int) -> int:
    """``shfl_stats``: the word (of a lane's ``stat_words``) holding accumulator column ``c``'s
    statistic. The wgmma accumulator gives thread t the columns 8j + 2(t % 4) + {0, 1}
    (j = c // 2), i.e. column pair 4j + t % 4; lane l holds pairs l, l + 32, ... in word pairs
    0, 1, ..., so pair 4j + t % 4 sits in word pair j // 8 for every t: one shuffle source word
    per column (tests/test_bwd_shfl_stats.py checks it against the MMA's C partition)."""
    return 2 * (c // 16) + c % 2


def stat_holder_lane(col):
    """``shfl_stats``: the lane holding query column ``col``'s statistic (pair col // 2 in lane
    pair % 32); an Int32 in the kernel, an int in the tests."""
    return (col // 2) % 32


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

