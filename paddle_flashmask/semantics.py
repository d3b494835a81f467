"""The one definition of FlashMask semantics (DESIGN §1, §3).

Everything that needs a mask rule calls this module: builders, the reference backend, the kernels'
skip logic, the context-parallel balancer and the FLOP counter. numpy only.

``startend_row_indices`` is int32 ``[B, Hm, Sk, C]``, indexed by *key column* j; its values are
*query row* bounds of half-open bands ``[start, end)`` that may not see key j:

    causal  C  columns              element (i, j) masked iff
    True    1  LTS                  j > i + (Sk - Sq)  or  i >= LTS[j]
    True    2  LTS, LTE             j > i + (Sk - Sq)  or  LTS[j] <= i < LTE[j]
    False   2  LTS, UTE             i >= LTS[j]        or  i < UTE[j]
    False   4  LTS, LTE, UTS, UTE   LTS[j] <= i < LTE[j]  or  UTS[j] <= i < UTE[j]

The element and tile predicates below are *duck-typed*: they only use comparison operators and
``&`` / ``|``, so the same function runs on numpy arrays, torch / paddle tensors and CuTe DSL scalars
(the kernels trace them). Absent band ends are ``None`` and resolved at trace time, which keeps the
DSL code specialised per form with no runtime branch.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

SKIP, PARTIAL, FULL = 0, 1, 2
TILE_CLASS_NAMES = {SKIP: "skip", PARTIAL: "partial", FULL: "full"}


# --------------------------------------------------------------------------------------------------
# Forms and columns
# --------------------------------------------------------------------------------------------------

def column_names(causal: bool, num_columns: int) -> tuple[str, ...]:
    """Names of the index columns for a (causal, C) form; raises on an invalid pair."""
    forms = {
        (True, 1): ("LTS",),
        (True, 2): ("LTS", "LTE"),
        (False, 2): ("LTS", "UTE"),
        (False, 4): ("LTS", "LTE", "UTS", "UTE"),
    }
    key = (bool(causal), int(num_columns))
    if key not in forms:
        allowed = "1 or 2" if causal else "2 or 4"
        raise ValueError(
            f"startend_row_indices: last dimension C must be {allowed} when causal={bool(causal)}, "
            f"found C={num_columns}")
    return forms[key]


class Bands(NamedTuple):
    """The two masked bands of a column in a uniform shape.

    ``lt_start <= i < lt_end`` is the lower band, ``ut_start <= i < ut_end`` the upper band.
    ``None`` means "no bound" (lt_end: +inf, ut_start: -inf, and ut_end None means no upper band).
    """
    lt_start: Any
    lt_end: Any
    ut_start: Any
    ut_end: Any


def band_bounds(columns: Sequence[Any], causal: bool) -> Bands:
    """Map the C column values (any array type or DSL scalar) of a form onto :class:`Bands`."""
    n = len(columns)
    column_names(causal, n)
    if causal and n == 1:
        return Bands(columns[0], None, None, None)
    if causal and n == 2:
        return Bands(columns[0], columns[1], None, None)
    if n == 2:  # bidirectional LTS, UTE
        return Bands(columns[0], None, None, columns[1])
    return Bands(columns[0], columns[1], columns[2], columns[3])


def element_masked(row: Any, col: Any, bands: Bands, causal: bool, diag_offset: Any) -> Any:
    """True where query ``row`` may NOT see key ``col``; ``diag_offset = Sk - Sq`` (bottom-right).

    Works on broadcastable arrays/tensors and on DSL scalars: only comparisons and ``& |``.
    """
    masked = row >= bands.lt_start
    if bands.lt_end is not None:
        masked = masked & (row < bands.lt_end)
    if bands.ut_end is not None:
        upper = row < bands.ut_end
        if bands.ut_start is not None:
            upper = upper & (row >= bands.ut_start)
        masked = masked | upper
    if causal:
        masked = masked | (col > row + diag_offset)
    return masked


def rows_from(bands: Bands, origin: Any) -> Bands:
    """``bands`` with every row bound measured from row ``origin`` (bound - origin).

    :func:`element_masked` only compares rows with bounds and with ``col - diag_offset``, so
    ``element_masked(row - origin, col - diag_offset - origin, rows_from(bands, origin), causal, 0)``
    equals ``element_masked(row, col, bands, causal, diag_offset)``. Kernels use it to compare a
    thread's compile-time column offsets with per-row bounds (one compare per element).
    """
    return Bands(*(None if bound is None else bound - origin for bound in bands))


def masked_row_intervals(bands: Bands, causal: bool, col: Any,
                         diag_offset: Any) -> list[tuple[Any, Any]]:
    """The query rows :func:`element_masked` masks for key ``col``, as half-open row intervals
    ``(lo, hi)`` (``None``: unbounded below / above); ``element_masked(row, col, ...)`` is
    ``any(lo <= row < hi)``. The lower band, the upper band when the form has one, and under
    causal attention the rows above the diagonal (``col > row + diag_offset``, i.e. ``row <
    col - diag_offset``). For kernels that turn a key's masked rows into bit masks."""
    intervals = [(bands.lt_start, bands.lt_end)]
    if bands.ut_end is not None:
        intervals.append((bands.ut_start, bands.ut_end))
    if causal:
        intervals.append((None, col - diag_offset))
    return intervals


def diagonal_col_limit(row: Any, seqlen_q: Any, seqlen_k: Any, causal: bool,
                       diag_offset: Any, select: Any = None) -> Any:
    """First key column masked for ``row`` when no band touches it (a partial tile outside every
    band): ``element_masked`` with bands that mask nothing inside the sequence, plus the sequence
    edge, is ``col >= diagonal_col_limit(row)`` (one compare per element). Rows past ``seqlen_q``
    (a last query tile's padding) are fully masked: limit 0. ``select(cond, a, b)``: the caller's
    ternary (numpy ``np.where`` by default; DSL code passes its own)."""
    pick = np.where if select is None else select
    limit = seqlen_k
    if causal:
        limit = pick(row + diag_offset + 1 < seqlen_k, row + diag_offset + 1, seqlen_k)
    return pick(row >= seqlen_q, 0, limit)


def causal_first_row(col: Any, seqlen_q: int, seqlen_k: int) -> Any:
    """First query row the bottom-right causal diagonal lets see key ``col``, clipped to [0, Sq].

    Rows ``[0, causal_first_row)`` are above the diagonal: the causal rule of :func:`element_masked`
    (``col > row + Sk - Sq``) written as a row bound, for code that works with row intervals.
    """
    return np.clip(np.asarray(col) - (seqlen_k - seqlen_q), 0, seqlen_q)


def tile_fully_masked(row_begin: Any, row_end: Any, col_begin: Any, band_max: Bands,
                      band_min: Bands, causal: bool, diag_offset: Any) -> Any:
    """Conservative SKIP test for query rows ``[row_begin, row_end)`` x a key tile.

    ``band_max`` / ``band_min`` hold the tile's max / min of each column (see :func:`tile_summary`).
    True only if every element of the tile is masked: a band covers every row for every column, or
    the whole tile lies above the causal diagonal. ``row_end`` must already be clipped to Sq.
    """
    covered = band_max.lt_start <= row_begin
    if band_min.lt_end is not None:
        covered = covered & (band_min.lt_end >= row_end)
    if band_min.ut_end is not None:
        upper = band_min.ut_end >= row_end
        if band_max.ut_start is not None:
            upper = upper & (band_max.ut_start <= row_begin)
        covered = covered | upper
    if causal:
        covered = covered | (col_begin > row_end - 1 + diag_offset)
    return covered


def tile_band_touched(row_begin: Any, row_end: Any, band_max: Bands, band_min: Bands) -> Any:
    """Conservative test of the bands alone: False only if no band of any of the tile's columns
    masks a row of ``[row_begin, row_end)`` (``band_max`` / ``band_min``: the tile's column max /
    min). A partial tile the bands do not touch is masked by the causal diagonal and the sequence
    edge only, which need no column values."""
    touched = band_min.lt_start < row_end
    if band_max.lt_end is not None:
        touched = touched & (band_max.lt_end > row_begin)
    if band_max.ut_end is not None:
        upper = band_max.ut_end > row_begin
        if band_min.ut_start is not None:
            upper = upper & (band_min.ut_start < row_end)
        touched = touched | upper
    return touched


def tile_needs_mask(row_begin: Any, row_end: Any, col_begin: Any, col_end: Any, seqlen_k: Any,
                    band_max: Bands, band_min: Bands, causal: bool, diag_offset: Any) -> Any:
    """Conservative PARTIAL test: False only if no element of the tile is masked.

    ``col_end`` is the unclipped end of the key tile, so a tile reaching past ``seqlen_k`` (the
    sequence edge) always needs the element mask.
    """
    touched = tile_band_touched(row_begin, row_end, band_max, band_min)
    if causal:
        touched = touched | (col_end - 1 > row_begin + diag_offset)
    return touched | (col_end > seqlen_k)


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------

def validate(startend_row_indices: Any, causal: bool, seqlen_q: int, seqlen_k: int,
             num_heads: Optional[int] = None, num_kv_heads: Optional[int] = None,
             batch_size: Optional[int] = None, check_values: bool = True) -> None:
    """Raise ``ValueError`` naming the problem if the indices do not fit the contract.

    Checks dtype int32, rank 4, ``[B, Hm, Sk, C]`` with ``Hm in {1, Hk, H}``, the (causal, C) form and
    (``check_values``) that every value lies in ``[0, seqlen_q]``. Accepts anything ``np.asarray``
    understands; a tensor on a device is only copied when ``check_values`` is set.
    """
    shape = tuple(int(s) for s in getattr(startend_row_indices, "shape", np.shape(startend_row_indices)))
    dtype = str(getattr(startend_row_indices, "dtype", "unknown"))
    if "int32" not in dtype:
        raise ValueError(f"startend_row_indices: expected dtype int32, found {dtype}")
    if len(shape) != 4:
        raise ValueError(f"startend_row_indices: expected rank 4 [B, Hm, Sk, C], found shape {list(shape)}")
    b, hm, sk, c = shape
    column_names(causal, c)
    if batch_size is not None and b != batch_size:
        raise ValueError(f"startend_row_indices: expected batch size {batch_size} (dim 0), found {b}")
    if sk != seqlen_k:
        raise ValueError(f"startend_row_indices: expected Sk={seqlen_k} key columns (dim 2), found {sk}")
    allowed = sorted({1} | {h for h in (num_kv_heads, num_heads) if h is not None})
    if num_heads is not None and hm not in allowed:
        raise ValueError(f"startend_row_indices: expected mask heads (dim 1) in {allowed}, found {hm}")
    if num_heads is not None and num_heads % hm != 0:
        raise ValueError(f"startend_row_indices: num_heads={num_heads} is not a multiple of mask heads {hm}")
    if check_values and sk > 0:
        values = _to_numpy(startend_row_indices)
        check_value_range(int(values.min()), int(values.max()), seqlen_q)


def check_value_range(lo: int, hi: int, seqlen_q: int) -> None:
    """The value rule of the contract, given the indices' minimum and maximum: ``[0, seqlen_q]``."""
    if lo < 0 or hi > seqlen_q:
        raise ValueError(
            f"startend_row_indices: values must lie in [0, seqlen_q={seqlen_q}], found min {lo}, max {hi}")


def _to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):  # torch
        return x.detach().cpu().numpy()
    if hasattr(x, "numpy"):  # paddle
        return x.numpy()
    return np.asarray(x)


# --------------------------------------------------------------------------------------------------
# Dense view and exact counts
# --------------------------------------------------------------------------------------------------

def rows_masked(startend_row_indices: np.ndarray, causal: bool, seqlen_q: int,
                row_begin: int, row_end: int) -> np.ndarray:
    """bool ``[B, Hm, row_end - row_begin, Sk]``, True = masked, for one block of query rows.

    The reference backend builds its mask tile by tile through this, so no ``[Sq, Sk]`` mask of the
    whole sequence exists at once.
    """
    idx = np.asarray(startend_row_indices)
    sk = idx.shape[2]
    rows = np.arange(row_begin, row_end, dtype=np.int64)[:, None]
    cols = np.arange(sk, dtype=np.int64)[None, :]
    bands = band_bounds([idx[:, :, None, :, c] for c in range(idx.shape[3])], causal)
    return element_masked(rows, cols, bands, causal, sk - seqlen_q)


def to_dense(startend_row_indices: Any, causal: bool, seqlen_q: Optional[int] = None) -> np.ndarray:
    """bool ``[B, Hm, Sq, Sk]``, True = may attend. ``seqlen_q`` defaults to Sk."""
    idx = _to_numpy(startend_row_indices)
    sq = idx.shape[2] if seqlen_q is None else int(seqlen_q)
    validate(idx, causal, sq, idx.shape[2])
    return ~rows_masked(idx, causal, sq, 0, sq)


def _interval_len(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.maximum(hi - lo, 0)


def count_visible_pairs(startend_row_indices: Any, causal: bool, seqlen_q: Optional[int] = None,
                        row_begin: int = 0, row_end: Optional[int] = None,
                        per_column: bool = False) -> np.ndarray:
    """Exact number of visible (query, key) pairs with query rows in ``[row_begin, row_end)``.

    Interval arithmetic per key column, O(Sk): visible = |R| - |R ∩ LT| - |R ∩ UT| + |R ∩ LT ∩ UT|
    with R the rows the column can see before the bands. Returns int64 ``[B, Hm]`` (or
    ``[B, Hm, Sk]`` with ``per_column``).
    """
    idx = _to_numpy(startend_row_indices).astype(np.int64)
    b, hm, sk, c = idx.shape
    sq = sk if seqlen_q is None else int(seqlen_q)
    r1 = sq if row_end is None else min(int(row_end), sq)
    r0 = max(int(row_begin), 0)
    bands = band_bounds([idx[..., k] for k in range(c)], causal)
    cols = np.arange(sk, dtype=np.int64)
    lo = np.full((b, hm, sk), r0, dtype=np.int64)
    if causal:
        lo = np.maximum(lo, causal_first_row(cols, sq, sk))
    hi = np.full((b, hm, sk), r1, dtype=np.int64)
    lt_lo = np.maximum(lo, bands.lt_start)
    lt_hi = hi if bands.lt_end is None else np.minimum(hi, bands.lt_end)
    visible = _interval_len(lo, hi) - _interval_len(lt_lo, lt_hi)
    if bands.ut_end is not None:
        ut_lo = lo if bands.ut_start is None else np.maximum(lo, bands.ut_start)
        ut_hi = np.minimum(hi, bands.ut_end)
        both_lo, both_hi = np.maximum(lt_lo, ut_lo), np.minimum(lt_hi, ut_hi)
        visible = visible - _interval_len(ut_lo, ut_hi) + _interval_len(both_lo, both_hi)
    return visible if per_column else visible.sum(axis=2)


def rows_with_visible_keys(startend_row_indices: Any, causal: bool,
                           seqlen_q: Optional[int] = None) -> np.ndarray:
    """bool ``[B, Hm, Sq]``: True where query row i sees at least one key. ``seqlen_q`` defaults to Sk.

    O(Sq + Sk) per (b, hm), no dense mask: every threshold of :func:`element_masked` on the row of
    column j (the band ends and :func:`causal_first_row`) cuts ``[0, Sq)`` into at most 5 runs on
    which the column's visibility is constant; each visible run adds +1 / -1 to a difference array
    over the rows, whose running sum counts the keys a row sees.
    """
    idx = _to_numpy(startend_row_indices).astype(np.int64)
    b, hm, sk, c = idx.shape
    sq = sk if seqlen_q is None else int(seqlen_q)
    bands = band_bounds([idx[..., k] for k in range(c)], causal)
    cols = np.broadcast_to(np.arange(sk, dtype=np.int64), (b, hm, sk))
    cuts = [np.zeros_like(cols), np.full_like(cols, sq)]
    cuts += [np.broadcast_to(x, cols.shape) for x in bands if x is not None]
    if causal:
        cuts.append(np.broadcast_to(causal_first_row(cols, sq, sk), cols.shape))
    cuts = np.sort(np.clip(np.stack(cuts, axis=-1), 0, sq), axis=-1)  # [B, Hm, Sk, P]
    lo, hi = cuts[..., :-1], cuts[..., 1:]
    per_run = Bands(*(None if x is None else x[..., None] for x in bands))
    visible = (lo < hi) & ~element_masked(lo, cols[..., None], per_run, causal, sk - sq)
    flat = np.arange(b * hm, dtype=np.int64).reshape(b, hm, 1, 1) * (sq + 1)
    size, weight = b * hm * (sq + 1), visible.ravel().astype(np.float64)
    diff = (np.bincount((flat + lo).ravel(), weight, size)
            - np.bincount((flat + hi).ravel(), weight, size)).astype(np.int64)  # exact integers
    return np.cumsum(diff.reshape(b, hm, sq + 1)[..., :sq], axis=-1) > 0


def head_pairs(pairs_per_mask_head: np.ndarray, num_heads: int) -> int:
    """Sum ``[B, Hm]`` pair counts over the ``num_heads`` query heads that use them."""
    hm = pairs_per_mask_head.shape[1]
    if num_heads % hm != 0:
        raise ValueError(f"num_heads={num_heads} is not a multiple of mask heads {hm}")
    return int(pairs_per_mask_head.sum()) * (num_heads // hm)


def attention_flops(startend_row_indices: Any, causal: bool, seqlen_q: int, seqlen_k: int,
                    batch_size: int, num_heads: int, head_dim: int,
                    head_dim_v: Optional[int] = None) -> int:
    """Forward FLOPs counting unmasked pairs only: ``2 * (D + Dv) * pairs`` (= 4·D·pairs for D = Dv).

    ``startend_row_indices=None`` means plain attention (``causal`` decides full or causal).
    Backward is 2.5x this by convention (DESIGN §7).
    """
    dv = head_dim if head_dim_v is None else head_dim_v
    if startend_row_indices is None:
        pairs = batch_size * num_heads * dense_pair_count(causal, seqlen_q, seqlen_k)
    else:
        pairs = head_pairs(count_visible_pairs(startend_row_indices, causal, seqlen_q), num_heads)
    return 2 * (head_dim + dv) * pairs


def dense_pair_count(causal: bool, seqlen_q: int, seqlen_k: int) -> int:
    """Visible pairs of plain (unmasked) attention, causal bottom-right aligned or full."""
    if not causal:
        return seqlen_q * seqlen_k
    rows = np.arange(seqlen_q, dtype=np.int64)
    return int(np.clip(rows + (seqlen_k - seqlen_q) + 1, 0, seqlen_k).sum())


# --------------------------------------------------------------------------------------------------
# Tile summary and classification
# --------------------------------------------------------------------------------------------------

class TileSummary(NamedTuple):
    """Per key tile of ``tile_n`` columns: min and max of every index column.

    ``col_min``, ``col_max``: int32 ``[B, Hm, ceil(Sk / tile_n), C]``. O(Sk / tile_n) memory.
    """
    col_min: np.ndarray
    col_max: np.ndarray
    tile_n: int
    seqlen_k: int


def tile_summary(startend_row_indices: Any, tile_n: int) -> TileSummary:
    """Min/max of each column over each key tile; a partial last tile uses its real columns only."""
    idx = _to_numpy(startend_row_indices)
    b, hm, sk, c = idx.shape
    tiles = -(-sk // tile_n)
    pad = tiles * tile_n - sk
    info = np.iinfo(np.int32)
    lo = np.pad(idx, ((0, 0), (0, 0), (0, pad), (0, 0)), constant_values=info.max)
    hi = np.pad(idx, ((0, 0), (0, 0), (0, pad), (0, 0)), constant_values=info.min)
    col_min = lo.reshape(b, hm, tiles, tile_n, c).min(axis=3).astype(np.int32)
    col_max = hi.reshape(b, hm, tiles, tile_n, c).max(axis=3).astype(np.int32)
    return TileSummary(col_min, col_max, tile_n, sk)


def summary_bands(summary: TileSummary, causal: bool) -> tuple[Bands, Bands]:
    """(band_max, band_min) views of a summary, each field ``[B, Hm, Tn]``."""
    c = summary.col_min.shape[-1]
    band_max = band_bounds([summary.col_max[..., k] for k in range(c)], causal)
    band_min = band_bounds([summary.col_min[..., k] for k in range(c)], causal)
    return band_max, band_min


def classify_tiles(summary: TileSummary, causal: bool, seqlen_q: int, tile_m: int) -> np.ndarray:
    """int8 ``[B, Hm, ceil(Sq/tile_m), Tn]`` of SKIP / PARTIAL / FULL.

    A host-side view for tools (FLOP counter, balancer, tests). The kernels evaluate the same two
    predicates per tile on the fly and never build this table.
    """
    band_max, band_min = summary_bands(summary, causal)
    tiles_n = summary.col_min.shape[2]
    tiles_m = -(-seqlen_q // tile_m)
    rb = (np.arange(tiles_m, dtype=np.int64) * tile_m)[:, None]
    re = np.minimum(rb + tile_m, seqlen_q)
    cb = (np.arange(tiles_n, dtype=np.int64) * summary.tile_n)[None, :]
    ce = cb + summary.tile_n

    def per_tile(bands: Bands) -> Bands:  # [B, Hm, Tn] -> [B, Hm, 1, Tn]
        return Bands(*(None if f is None else f[:, :, None, :].astype(np.int64) for f in bands))

    bmax, bmin = per_tile(band_max), per_tile(band_min)
    offset = summary.seqlen_k - seqlen_q
    skip = tile_fully_masked(rb, re, cb, bmax, bmin, causal, offset)
    partial = tile_needs_mask(rb, re, cb, ce, summary.seqlen_k, bmax, bmin, causal, offset)
    skip, partial = np.broadcast_arrays(skip, partial)
    out = np.where(skip, SKIP, np.where(partial, PARTIAL, FULL)).astype(np.int8)
    return out


def computed_tile_counts(startend_row_indices: Any, causal: bool, seqlen_q: int, tile_m: int,
                         tile_n: int) -> dict:
    """Counts of SKIP/PARTIAL/FULL tiles and the (q, k) pairs inside computed tiles (edge-clipped)."""
    idx = _to_numpy(startend_row_indices)
    summary = tile_summary(idx, tile_n)
    classes = classify_tiles(summary, causal, seqlen_q, tile_m)
    tm, tn = classes.shape[2], classes.shape[3]
    rows = np.minimum(np.arange(1, tm + 1) * tile_m, seqlen_q) - np.arange(tm) * tile_m
    cols = np.minimum(np.arange(1, tn + 1) * tile_n, summary.seqlen_k) - np.arange(tn) * tile_n
    area = rows[:, None].astype(np.int64) * cols[None, :]
    computed = classes != SKIP
    return {
        "skip": int((classes == SKIP).sum()),
        "partial": int((classes == PARTIAL).sum()),
        "full": int((classes == FULL).sum()),
        "computed_pairs": int((computed * area).sum()),
    }
