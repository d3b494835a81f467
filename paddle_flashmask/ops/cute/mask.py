"""FlashMask masking inside CuTe DSL kernels (forward owner; backward may call it read-only).

Every rule comes from :mod:`paddle_flashmask.semantics`: this module only feeds DSL scalars into the
duck-typed predicates there (``tile_fully_masked``, ``tile_needs_mask``, ``element_masked``) and
applies their verdicts to register tiles. The one rule added here is the *sequence edge*
(``col >= seqlen_k``), which is about tensor extents, not about the mask.

Plain attention (``startend_row_indices=None``) reuses the same predicates with constant bands
that never mask a real row: causal -> the C=1 form with ``LTS = Sq``; full -> the bidirectional C=2
form with ``LTS = Sq, UTE = 0``. So causal/diagonal logic lives in one place only.
"""
from __future__ import annotations

from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from paddle_flashmask import semantics


def num_mask_columns(causal: bool, mask_columns: Optional[int]) -> int:
    """Columns the kernel carries per key: the real C, or the constant stand-in for plain masks."""
    if mask_columns is not None:
        semantics.column_names(causal, mask_columns)  # raises on an invalid (causal, C) pair
        return mask_columns
    return 1 if causal else 2


def constant_bands(causal: bool, seqlen_q: Int32) -> semantics.Bands:
    """Bands of plain attention: no real row is ever inside them (see module docstring)."""
    if causal:
        return semantics.band_bounds([seqlen_q], True)
    return semantics.band_bounds([seqlen_q, Int32(0)], False)


def bands_from_columns(values, causal: bool) -> semantics.Bands:
    """Bands from the C column values of one key (or of a tile summary)."""
    return semantics.band_bounds(list(values), causal)


def summary_tensors(col_min_ptr: cute.Pointer, col_max_ptr: cute.Pointer, mask_columns: int,
                    num_k_tiles: Int32, num_mask_heads: Int32, batch: Int32):
    """The tile summary, int32 ``[B, Hm, num_k_tiles, C]`` row-major, as the ``(C, num_k_tiles,
    Hm, B)`` views ``(col_min, col_max)`` that :func:`summary_tile_bands` reads."""
    c = mask_columns
    layout = cute.make_layout((c, num_k_tiles, num_mask_heads, batch),
                              stride=(1, c, num_k_tiles * c, num_k_tiles * num_mask_heads * c))
    return cute.make_tensor(col_min_ptr, layout), cute.make_tensor(col_max_ptr, layout)


@cute.jit
def summary_tile_bands(mColMin: Optional[cute.Tensor], mColMax: Optional[cute.Tensor],
                       n_block: Int32, mask_head: Int32, batch: Int32, seqlen_q: Int32,
                       causal: cutlass.Constexpr, mask_columns: cutlass.Constexpr):
    """(band_max, band_min) of one key tile from the tile summary, in the forward's column-major
    view ``[C, n_block, mask_head, batch]``; the constant bands for plain masks."""
    if cutlass.const_expr(mask_columns is None):
        const = constant_bands(causal, seqlen_q)
        return const, const
    col_max = [mColMax[k, n_block, mask_head, batch] for k in range(mask_columns)]
    col_min = [mColMin[k, n_block, mask_head, batch] for k in range(mask_columns)]
    return bands_from_columns(col_max, causal), bands_from_columns(col_min, causal)


@cute.jit
def classify_key_tile(
    row_begin: Int32,
    row_end: Int32,
    n_block: Int32,
    tile_n: cutlass.Constexpr[int],
    seqlen_k: Int32,
    diag_offset: Int32,
    band_max: semantics.Bands,
    band_min: semantics.Bands,
    causal: cutlass.Constexpr[bool],
):
    """(skip, needs_mask) for query rows [row_begin, row_end) x key tile ``n_block``."""
    col_begin = n_block * tile_n
    col_end = col_begin + tile_n
    skip = semantics.tile_fully_masked(row_begin, row_end, col_begin, band_max, band_min, causal,
                                       diag_offset)
    partial = semantics.tile_needs_mask(row_begin, row_end, col_begin, col_end, seqlen_k, band_max,
                                        band_min, causal, diag_offset)
    return skip, partial


def query_tile_geometry(m_block: Int32, tile_m: int, tile_n: int, seqlen_q: Int32,
                        seqlen_k: Int32):
    """``(row_begin, row_end, diag_offset, num_key_tiles)`` of query tile ``m_block``: its rows,
    Sk - Sq (bottom-right causal alignment) and how many key tiles the sequence has; the start of
    every per-query-tile walk over the tile summary."""
    row_begin = m_block * tile_m
    return (row_begin, cutlass.min(row_begin + tile_m, seqlen_q), seqlen_k - seqlen_q,
            (seqlen_k + tile_n - 1) // tile_n)


def key_tile_end(row_end: Int32, diag_offset: Int32, tile_n: int, num_k_tiles: Int32,
                 causal: bool) -> Int32:
    """One past the last key tile a query-row range ending at ``row_end`` can see: every tile
    under causal attention stops at the diagonal of the range's last row (``diag_offset`` =
    Sk - Sq, bottom-right alignment); otherwise all ``num_k_tiles``."""
    if cutlass.const_expr(causal):
        return cutlass.max(cutlass.min((row_end + diag_offset + tile_n - 1) // tile_n,
                                       num_k_tiles), 0)
    return num_k_tiles


@cute.jit
def chunk_visit_bits(
    mColMin: Optional[cute.Tensor],
    mColMax: Optional[cute.Tensor],
    chunk: Int32,
    lane: Int32,
    n_begin,
    n_end: Int32,
    row_begin: Int32,
    row_end: Int32,
    tile_n: cutlass.Constexpr[int],
    seqlen_q: Int32,
    seqlen_k: Int32,
    diag_offset: Int32,
    mask_head: Int32,
    batch: Int32,
    causal: cutlass.Constexpr[bool],
    mask_columns: cutlass.Constexpr,
    with_band_bits: cutlass.Constexpr[bool] = False,
):
    """Warp-wide classification of the 32 key tiles ``chunk * 32 + lane`` (one per lane).

    Returns ``(visit_bits, partial_bits)`` (Uint32, the same in every lane): bit ``i`` of
    ``visit_bits`` is set when tile ``chunk * 32 + i`` lies in ``[n_begin, n_end)`` and is not
    fully masked for query rows ``[row_begin, row_end)``; ``partial_bits`` marks the tiles that
    need the element mask. ``n_begin`` is the Python int 0 or a DSL integer (a tile range).
    ``with_band_bits``: a third ballot, the tiles whose bands touch the rows
    (``semantics.tile_band_touched``); a partial tile outside it needs only the causal diagonal
    and the sequence edge.
    """
    n_lane = chunk * 32 + lane
    n_probe = cutlass.min(n_lane, n_end - 1)
    if cutlass.const_expr(not isinstance(n_begin, int)):
        n_probe = cutlass.max(n_probe, n_begin)
    band_max, band_min = summary_tile_bands(mColMin, mColMax, n_probe, mask_head, batch, seqlen_q,
                                            causal, mask_columns)
    skip, partial = classify_key_tile(row_begin, row_end, n_probe, tile_n, seqlen_k, diag_offset,
                                      band_max, band_min, causal)
    skip = skip | (n_lane >= n_end)
    if cutlass.const_expr(not isinstance(n_begin, int)):
        skip = skip | (n_lane < n_begin)
    skip_bits = cute.arch.vote_ballot_sync(skip)
    partial_bits = cute.arch.vote_ballot_sync(partial)
    if cutlass.const_expr(with_band_bits):
        band_bits = cute.arch.vote_ballot_sync(
            semantics.tile_band_touched(row_begin, row_end, band_max, band_min))
        return Uint32(skip_bits) ^ Uint32(0xFFFFFFFF), partial_bits, band_bits
    return Uint32(skip_bits) ^ Uint32(0xFFFFFFFF), partial_bits


@cute.jit
def widen_range(lo: Int32, hi: Int32, bits: Uint32, base: Int32):
    """Fold the set bits of a 32-bit chunk (bit i = item ``base + i``) into the item range
    ``[lo, hi)``, visited in increasing ``base``; ``hi == 0`` means empty so far. Used by the range
    searches of the forward's tile ranges and the backward's row ranges."""
    if bits != Uint32(0):
        lowest = bits & (Uint32(0) - bits)
        if hi == 0:
            lo = base + Int32(31) - Int32(cute.arch.clz(lowest))
        hi = base + Int32(32) - Int32(cute.arch.clz(bits))
    return lo, hi


@cute.jit
def apply_element_mask(
    acc_s_mn: cute.Tensor,
    coords_mn: cute.Tensor,
    s_bounds: Optional[cute.Tensor],
    row_base: Int32,
    col_base: Int32,
    seqlen_q: Int32,
    seqlen_k: Int32,
    diag_offset: Int32,
    causal: cutlass.Constexpr[bool],
    num_columns: cutlass.Constexpr[int],
    diagonal_only: cutlass.Constexpr[bool] = False,
    edge_tile_n: cutlass.Constexpr[int] = 0,
    pred_chain: cutlass.Constexpr[bool] = False,
):
    """Set masked scores of one partial tile to -inf, in registers.

    ``acc_s_mn``: the thread's scores as an (M, N) view; ``coords_mn``: the matching (row, col)
    coordinates inside the tile; ``s_bounds``: the tile's column values in shared memory,
    ``(tile_n, C)`` int32, or None for plain attention (constant bands). ``diagonal_only``: a
    tile no band touches (``semantics.tile_band_touched``): the causal diagonal and the sequence
    edge alone, one column limit per row (``semantics.diagonal_col_limit``) and one compare per
    element; ``s_bounds`` is not read. ``edge_tile_n`` > 0 (the tile's width): the sequence
    edge is a separate pass over the thread's columns, run only when the tile reaches past
    ``seqlen_k``, instead of a compare and a select in every element of every partial tile
    (most partial tiles are inside the sequence: document boundaries, windows, diagonals).
    ``pred_chain``: each element's verdict is one chain of predicated compares over the key's
    masked row intervals (``semantics.masked_row_intervals``) and one select
    (:func:`select_masked`), where ptxas otherwise selects once per interval (bidirectional
    C = 2: two compares and two selects per element, three with the chain).
    """
    if cutlass.const_expr(diagonal_only):
        for r in cutlass.range_constexpr(cute.size(acc_s_mn, mode=[0])):
            limit = semantics.diagonal_col_limit(row_base + coords_mn[r, 0][0], seqlen_q,
                                                 seqlen_k, causal, diag_offset, select=_select)
            for c in cutlass.range_constexpr(cute.size(acc_s_mn, mode=[1])):
                col = col_base + coords_mn[0, c][1]
                acc_s_mn[r, c] = -Float32.inf if col >= limit else acc_s_mn[r, c]
        return
    for c in cutlass.range_constexpr(cute.size(acc_s_mn, mode=[1])):
        col_local = coords_mn[0, c][1]
        col = col_base + col_local
        bands = None
        if cutlass.const_expr(s_bounds is None):
            bands = constant_bands(causal, seqlen_q)
        else:
            bands = bands_from_columns(
                [s_bounds[col_local, k] for k in range(num_columns)], causal)
        if cutlass.const_expr(pred_chain):
            # the diagonal's bound is col - diag_offset: from one per-tile base (one add per
            # column, where col and then the difference cost two)
            intervals = semantics.masked_row_intervals(
                bands, causal, (col_base - diag_offset) + col_local, 0)
            edge = [[(col, "ge", seqlen_k)]] if cutlass.const_expr(edge_tile_n == 0) else []
            for r in cutlass.range_constexpr(cute.size(acc_s_mn, mode=[0])):
                row = row_base + coords_mn[r, 0][0]
                acc_s_mn[r, c] = select_masked(acc_s_mn[r, c],
                                               interval_clauses(row, intervals) + edge)
        else:
            # without the edge pass the edge is folded into every element's select (d64's three
            # warpgroups spill with the separate pass)
            out_of_seq = (col >= seqlen_k) if cutlass.const_expr(edge_tile_n == 0) else None
            for r in cutlass.range_constexpr(cute.size(acc_s_mn, mode=[0])):
                row = row_base + coords_mn[r, 0][0]
                masked = semantics.element_masked(row, col, bands, causal, diag_offset)
                if cutlass.const_expr(out_of_seq is not None):
                    masked = masked | out_of_seq
                acc_s_mn[r, c] = -Float32.inf if masked else acc_s_mn[r, c]
    if cutlass.const_expr(edge_tile_n > 0):
        if col_base + edge_tile_n > seqlen_k:
            mask_sequence_edge(acc_s_mn, coords_mn, col_base, seqlen_k)


@cute.jit
def mask_sequence_edge(acc_s_mn: cute.Tensor, coords_mn: cute.Tensor, col_base: Int32,
                       seqlen_k: Int32):
    """-inf at the thread's columns at or past ``seqlen_k`` (the last key tile's padding)."""
    for c in cutlass.range_constexpr(cute.size(acc_s_mn, mode=[1])):
        out_of_seq = col_base + coords_mn[0, c][1] >= seqlen_k
        for r in cutlass.range_constexpr(cute.size(acc_s_mn, mode=[0])):
            acc_s_mn[r, c] = -Float32.inf if out_of_seq else acc_s_mn[r, c]


def interval_clauses(row, intervals) -> list:
    """``row`` inside one of the half-open ``intervals`` ``(lo, hi)`` (``None``: unbounded), as
    :func:`select_masked` clauses: one conjunction of compares per interval."""
    clauses = []
    for lo, hi in intervals:
        clause = ([(row, "ge", lo)] if lo is not None else []) + \
                 ([(row, "lt", hi)] if hi is not None else [])
        if not clause:
            raise ValueError("interval_clauses: an interval without bounds masks every row")
        clauses.append(clause)
    return clauses


def predicate_chain_ptx(clauses: list, first_operand: int) -> tuple[list[str], list]:
    """PTX that leaves ``(any clause holds)`` in predicate ``m``: compares chained through
    ``setp``'s boolean operand (``setp.lt.or.s32 m, a, b, m``), so a clause of one compare costs
    one ISETP; a second clause of several compares is built in ``t`` and or-ed in. ``clauses``:
    conjunctions ``[(lhs, "ge" | "lt", rhs), ...]``; operands are numbered from
    ``first_operand``. Returns the PTX lines and the operands in order."""
    ordered = sorted(clauses, key=len, reverse=True)  # only the first may chain an AND into m
    lines, operands = [], []

    def compare(dst, lhs, op, rhs, combine: Optional[tuple[str, str]] = None):
        """``dst = lhs op rhs``, or with ``combine = (boolop, pred)``: ``dst = (...) boolop pred``."""
        k = first_operand + len(operands)
        operands.extend((lhs, rhs))
        boolop, tail = (f".{combine[0]}", f", {combine[1]}") if combine else ("", "")
        lines.append(f"setp.{op}{boolop}.s32 {dst}, ${k}, ${k + 1}{tail};")

    for i, clause in enumerate(ordered):
        if any(op not in ("ge", "lt") for _, op, _ in clause):
            raise ValueError(f"predicate_chain_ptx: compares must be 'ge' or 'lt', found {clause}")
        if i == 0:
            compare("m", *clause[0])
            for term in clause[1:]:
                compare("m", *term, combine=("and", "m"))
        elif len(clause) == 1:
            compare("m", *clause[0], combine=("or", "m"))
        else:
            compare("t", *clause[0])
            for term in clause[1:]:
                compare("t", *term, combine=("and", "t"))
            lines.append("or.pred m, m, t;")
    return lines, operands


@dsl_user_op
def select_masked(x: Float32, clauses: list, *, loc=None, ip=None) -> Float32:
    """``-inf`` where any clause holds, else ``x``: the compares of :func:`predicate_chain_ptx`
    and one ``selp`` (ptxas keeps a chain it is given; from ``a | b`` it selects twice)."""
    lines, operands = predicate_chain_ptx(clauses, first_operand=2)
    body = " ".join(["{ .reg .pred m, t;", *lines, "selp.f32 $0, 0fFF800000, $1, m; }"])
    return Float32(llvm.inline_asm(
        T.f32(),
        [Float32(x).ir_value(loc=loc, ip=ip)]
        + [Int32(v).ir_value(loc=loc, ip=ip) for v in operands],
        body, "=f,f" + ",r" * len(operands),
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT))


def pair_columns_below(limit, num_cols: int):
    """How many of a thread's ``num_cols`` accumulator columns lie below ``limit``, the columns
    being at offsets 0, 1, 8, 9, 16, 17, ... from the thread's first (wgmma's C layout: adjacent
    pairs every 8 columns). Plain arithmetic: DSL integers or Python ints (tests)."""
    clamped = cutlass.min(cutlass.max(limit, 0), 4 * num_cols)
    return (clamped >> 3) * 2 + cutlass.min(clamped & 7, 2)


def low_bits(count, num_cols: int, one=1):
    """The ``count`` lowest bits set, ``0 <= count <= num_cols``. At ``num_cols == 32`` (a thread's
    columns in a 128-column S^T tile, a whole Int32) the shift is split in two: one shift by the
    type's width is undefined in LLVM, two shifts of at most 16 are not (``1 << 16 << 16 == 0``,
    minus one: every bit)."""
    if isinstance(count, int):  # known when tracing: a constant, no shift in the kernel
        value = (1 << count) - 1
        if isinstance(one, int):
            return value
        return (one ^ one) | (value - (1 << 32) if value >= 1 << 31 else value)  # Int32's bits
    if num_cols < 32:
        return (one << count) - 1
    half = count >> 1
    return ((one << half) << (count - half)) - 1


def pair_column_bits(intervals, num_cols: int, one=1):
    """Bit ``c`` set where the thread's column ``c`` (offsets as in :func:`pair_columns_below`)
    lies in one of the half-open ``intervals`` ``(lo, hi)`` (``None``: unbounded), e.g.
    ``semantics.masked_row_intervals`` of one key, measured from the thread's first column.
    ``one``: the integer 1 of the caller's type (``Int32(1)`` in DSL code), so that the shifts
    stay in it. Per interval bound four integer ops and a shift, instead of a compare per column.
    """
    if num_cols > 32:
        raise ValueError(f"num_cols: expected at most 32 (one bit per column of an Int32), "
                         f"found {num_cols}")
    full = low_bits(num_cols, num_cols, one)
    bits = one - 1
    for lo, hi in intervals:
        below_hi = full if hi is None else low_bits(pair_columns_below(hi, num_cols), num_cols, one)
        below_lo = one - 1 if lo is None else low_bits(pair_columns_below(lo, num_cols), num_cols,
                                                       one)
        bits = bits | (below_hi & (full ^ below_lo))
    return bits


def is_pair_column_layout(offsets) -> bool:
    """Whether compile-time column offsets are the layout :func:`pair_column_bits` assumes."""
    return list(offsets) == [8 * (i // 2) + i % 2 for i in range(len(offsets))]


def _select(cond, a, b):
    """DSL ternary for ``semantics`` rules written with a ``select`` argument."""
    return cutlass.select_(cond, Int32(a), Int32(b))
