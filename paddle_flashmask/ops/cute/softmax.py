"""Online softmax on SM90 wgmma accumulators (forward).

Scores stay in raw units (``Q·Kᵀ``); ``scale_log2 = softmax_scale * log2(e)`` turns them into base-2
exponents. Rows are spread over the 4 threads of a quad in the wgmma accumulator layout, so row
reductions finish with two butterfly shuffles. A row that has seen only masked scores keeps
``row_max = -inf``; its exponent offset is taken as 0 so that ``exp2(-inf) = 0`` and no NaN appears.
"""
from __future__ import annotations

import math
from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op


def acc_mn_view(acc: cute.Tensor) -> cute.Tensor:
    """((2, 2, V), MMA_M, MMA_N) accumulator -> ((2, MMA_M), (2, V, MMA_N)) row/column view."""
    lay = cute.make_layout(acc.layout.shape)  # column-major over the accumulator's own shape
    shape = (
        (lay.shape[0][1], lay.shape[1]),
        (lay.shape[0][0], *lay.shape[0][2:], lay.shape[2]),
    )
    stride = (
        (lay.stride[0][1], lay.stride[1]),
        (lay.stride[0][0], *lay.stride[0][2:], lay.stride[2]),
    )
    return cute.make_tensor(acc.iterator,
                            cute.composition(acc.layout, cute.make_layout(shape, stride=stride)))


@dsl_user_op
def _pack2(lo: Float32, hi: Float32, to_bf16: bool, *, loc=None, ip=None) -> Int32:
    """Two fp32 -> one 32-bit register of two bf16/fp16 (lo in the low half), one cvt."""
    kind = "bf16x2" if to_bf16 else "f16x2"
    return Int32(llvm.inline_asm(
        T.i32(), [Float32(lo).ir_value(loc=loc, ip=ip), Float32(hi).ir_value(loc=loc, ip=ip)],
        f"cvt.rn.{kind}.f32 $0, $2, $1;", "=r,f,f",
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT))


@cute.jit
def convert_pairs(src: cute.Tensor, dst: cute.Tensor):
    """fp32 accumulator -> 16-bit fragment, two values per instruction.

    Element-wise conversion followed by packing puts ``mov`` instructions next to the RS wgmma
    that reads the packed registers, and ptxas then injects extra warpgroup fences.
    """
    dst32 = cute.recast_tensor(dst, Int32)
    to_bf16 = dst.element_type is cutlass.BFloat16
    for i in cutlass.range_constexpr(cute.size(dst32)):
        dst32[i] = _pack2(src[2 * i], src[2 * i + 1], to_bf16)


@cute.jit
def quad_allreduce_max(x: Float32) -> Float32:
    x = cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=2))
    return cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=1))


@cute.jit
def quad_allreduce_sum(x: Float32) -> Float32:
    x = x + cute.arch.shuffle_sync_bfly(x, offset=2)
    return x + cute.arch.shuffle_sync_bfly(x, offset=1)


def row_max_split(s: cute.Tensor, r: int, chains: int):
    """The max of row ``r`` of this thread's ``s`` (row/column view) as ``chains`` independent
    ``fmax`` chains over its columns, then a pairwise combine: the same value as one chain (max
    is exact in any order), with ``chains`` times the instruction-level parallelism. Plain Python
    (unrolled while tracing), so the list may shrink as the pairs combine."""
    n = cute.size(s, mode=[1])
    k = min(chains, n)
    parts = [s[r, c] for c in range(k)]
    for c in range(k, n):
        parts[c % k] = cute.arch.fmax(parts[c % k], s[r, c])
    while len(parts) > 1:
        pairs = [cute.arch.fmax(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        parts = pairs + ([parts[-1]] if len(parts) % 2 else [])
    return parts[0]


def row_sum_split(s: cute.Tensor, r: int, chains: int):
    """The sum of row ``r`` of this thread's ``s`` as ``chains`` independent chains of adds,
    then a pairwise combine (plain Python, unrolled while tracing)."""
    n = cute.size(s, mode=[1])
    k = min(chains, n)
    parts = [s[r, c] for c in range(k)]
    for c in range(k, n):
        parts[c % k] = parts[c % k] + s[r, c]
    while len(parts) > 1:
        pairs = [parts[i] + parts[i + 1] for i in range(0, len(parts) - 1, 2)]
        parts = pairs + ([parts[-1]] if len(parts) % 2 else [])
    return parts[0]


def _all_row_maxes(s: cute.Tensor, num_rows: int, chains: int) -> list:
    """Every row's tile max over the quad: split chains per row, then the butterfly shuffles of
    all rows together (plain Python, unrolled while tracing)."""
    maxes = [row_max_split(s, r, chains) for r in range(num_rows)]
    for offset in (2, 1):
        maxes = [cute.arch.fmax(m, cute.arch.shuffle_sync_bfly(m, offset=offset)) for m in maxes]
    return maxes


@cute.jit
def online_update(acc_s: cute.Tensor, row_max: cute.Tensor, row_sum: cute.Tensor,
                  row_scale: cute.Tensor, scale_log2: Float32,
                  rescale_threshold: cutlass.Constexpr[float] = 0.0,
                  max_chains: cutlass.Constexpr[int] = 1,
                  max_rowwise: cutlass.Constexpr[bool] = False,
                  sum_chains: cutlass.Constexpr[int] = 1):
    """Exponentiate one score tile in place, update the running row max / sum (thread-partial
    sums; the quad reduction happens once in :func:`finalize`) and write each row's O rescale.

    ``rescale_threshold`` t > 0 (log2 units): a row keeps its old max unless the tile's exceeds
    it by more than t, so its rescale is exactly 1 and the caller may skip the O rescale (returns
    whether any of this thread's rows moved its max). Exact arithmetic either way -- O, the sum
    and LSE all use the same max -- only P can reach 2^t (fine for fp16 / bf16 and fp32 sums).

    ``max_chains`` > 1: every row's tile max is taken first, each as that many independent
    chains (:func:`row_max_split`), and the rows' quad shuffles are issued together, before any
    exponential; 1 keeps one serial ``fmax`` chain per row (32 dependent instructions per row at
    128-wide key tiles, which ptxas cannot reorder) with the row's exponentials right after.
    ``max_rowwise`` with ``max_chains`` > 1: each row's split max and shuffles right before its
    own exponentials (row 0's start earlier; ptxas may still overlap the next row's max).
    ``sum_chains`` > 1: the row's new exponentials summed as that many independent chains and
    a pairwise combine (:func:`row_sum_split`; another fp32 summation order, not bit-identical
    to one chain)."""
    s = acc_mn_view(acc_s)
    moved = cutlass.Boolean(False)
    num_rows = cute.size(s, mode=[0])
    all_rows_first = max_chains > 1 and not max_rowwise
    tile_maxes = _all_row_maxes(s, num_rows, max_chains) if cutlass.const_expr(
        all_rows_first) else None
    for r in cutlass.range_constexpr(num_rows):
        if cutlass.const_expr(all_rows_first):
            tile_max = tile_maxes[r]
        elif cutlass.const_expr(max_chains > 1):
            tile_max = quad_allreduce_max(row_max_split(s, r, max_chains))
        else:
            tile_max = s[r, 0]
            for c in cutlass.range_constexpr(1, cute.size(s, mode=[1])):
                tile_max = cute.arch.fmax(tile_max, s[r, c])
            tile_max = quad_allreduce_max(tile_max)
        old_max = row_max[r]
        new_max = cute.arch.fmax(old_max, tile_max)
        if cutlass.const_expr(rescale_threshold > 0.0):
            # -inf old max: the difference is +inf (moves) or NaN (still empty: stays -inf)
            if (new_max - old_max) * scale_log2 <= Float32(rescale_threshold):
                new_max = old_max
            moved = moved | (new_max != old_max)
        row_max[r] = new_max
        # -inf offsets would give (-inf) - (-inf) = NaN: use 0 while the row is still empty.
        offset = new_max * scale_log2 if new_max != -Float32.inf else Float32(0.0)
        old_offset = old_max * scale_log2 if old_max != -Float32.inf else Float32(0.0)
        rescale = cute.math.exp2(old_offset - offset, fastmath=True)
        row_scale[r] = rescale
        if cutlass.const_expr(sum_chains > 1):
            for c in cutlass.range_constexpr(cute.size(s, mode=[1])):
                s[r, c] = cute.math.exp2(s[r, c] * scale_log2 - offset, fastmath=True)
            row_sum[r] = row_sum[r] * rescale + row_sum_split(s, r, sum_chains)
        else:
            partial_sum = Float32(0.0)
            for c in cutlass.range_constexpr(cute.size(s, mode=[1])):
                p = cute.math.exp2(s[r, c] * scale_log2 - offset, fastmath=True)
                s[r, c] = p
                partial_sum += p
            row_sum[r] = row_sum[r] * rescale + partial_sum
    return moved


@cute.jit
def rescale_o(acc_o: cute.Tensor, row_scale: cute.Tensor):
    o = acc_mn_view(acc_o)
    for r in cutlass.range_constexpr(cute.size(o, mode=[0])):
        for c in cutlass.range_constexpr(cute.size(o, mode=[1])):
            o[r, c] = o[r, c] * row_scale[r]


@cute.jit
def finalize(acc_o: cute.Tensor, row_max: cute.Tensor, row_sum: cute.Tensor, lse: cute.Tensor,
             softmax_scale: Float32, sink_logit: Optional[Float32]):
    """Normalise O in place and write each row's natural-log LSE.

    Without a sink: O /= sum, LSE = max*scale + ln(sum); an empty row gets O = 0, LSE = -inf.
    With a sink s (unscaled logit): the denominator gains exp(s), so
    LSE = logaddexp(max*scale + ln(sum), s) and O *= exp(max*scale - LSE); empty row: LSE = s.
    """
    o = acc_mn_view(acc_o)
    ln2 = Float32(math.log(2.0))
    inv_ln2 = Float32(1.0 / math.log(2.0))
    for r in cutlass.range_constexpr(cute.size(o, mode=[0])):
        total = quad_allreduce_sum(row_sum[r])
        has_keys = total > Float32(0.0)
        safe_total = total if has_keys else Float32(1.0)
        row_max_scaled = row_max[r] * softmax_scale if has_keys else Float32(0.0)
        lse_keys = row_max_scaled + cute.math.log2(safe_total, fastmath=True) * ln2
        out_scale = cute.arch.rcp_approx(safe_total)
        row_lse = lse_keys if has_keys else -Float32.inf
        if cutlass.const_expr(sink_logit is not None):
            hi = cute.arch.fmax(lse_keys, sink_logit) if has_keys else sink_logit
            lo = cute.arch.fmin(lse_keys, sink_logit) if has_keys else -Float32.inf
            row_lse = hi + cute.math.log2(
                Float32(1.0) + cute.math.exp2((lo - hi) * inv_ln2, fastmath=True),
                fastmath=True) * ln2
            out_scale = cute.math.exp2((row_max_scaled - row_lse) * inv_ln2, fastmath=True)
        out_scale = out_scale if has_keys else Float32(0.0)
        lse[r] = row_lse
        for c in cutlass.range_constexpr(cute.size(o, mode=[1])):
            o[r, c] = o[r, c] * out_scale
