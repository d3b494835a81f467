"""Dense -> FlashMask: find the smallest ``startend_row_indices`` form that draws a given bool mask.

Useful where a framework hands over a dense ``attention_mask`` (e.g. PaddleFormers' non-eager
backends) and for checking that a pattern is representable at all. The inverse is
:func:`paddle_flashmask.semantics.to_dense`; ``to_dense(*from_dense(m), Sq)`` equals ``m``.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..semantics import causal_first_row
from .flashmask import FlashMask, finish


def _runs(masked: np.ndarray):
    """Per column of ``masked`` ``[..., Sq, Sk]``: number of masked row runs and the first two
    runs' ``[start, end)`` (``Sq`` where absent)."""
    sq = masked.shape[-2]
    prev = np.zeros_like(masked)
    prev[..., 1:, :] = masked[..., :-1, :]
    nxt = np.zeros_like(masked)
    nxt[..., :-1, :] = masked[..., 1:, :]
    starts = masked & ~prev
    ends = masked & ~nxt
    count = starts.sum(axis=-2)
    rank_s = np.cumsum(starts, axis=-2)
    rank_e = np.cumsum(ends, axis=-2)

    def nth(flags: np.ndarray, rank: np.ndarray, n: int, shift: int) -> np.ndarray:
        hit = flags & (rank == n)
        return np.where(hit.any(axis=-2), hit.argmax(axis=-2) + shift, sq)

    return (count, nth(starts, rank_s, 1, 0), nth(ends, rank_e, 1, 1),
            nth(starts, rank_s, 2, 0), nth(ends, rank_e, 2, 1))


def from_dense(allowed: Any, causal: Optional[bool] = None) -> FlashMask:
    """The FlashMask with the fewest columns whose dense view equals ``allowed``.

    ``allowed``: bool ``[Sq, Sk]`` or ``[B, Hm, Sq, Sk]``, True = may attend. ``causal=None`` tries
    causal C=1, causal C=2, bidirectional C=2, bidirectional C=4 in that order; ``True`` / ``False``
    restricts to that flag. Causal forms use the bottom-right diagonal (``Sk - Sq`` offset). Every
    batch row and head share one form. A fully masked column gets ``LTS = 0`` (as the builders'
    padding). Raises ``ValueError`` naming the first column that no allowed form can draw (a key
    whose masked rows form more than two intervals, say)::

        >>> m = from_dense(parse_picture('''
        ...     x...
        ...     xx..
        ...     ..x.
        ...     ..xx'''))
        >>> m.causal, m.startend_row_indices[0, 0, :, 0].tolist()
        (True, [2, 2, 4, 4])
    """
    arr = np.asarray(allowed)
    if arr.dtype != np.bool_:
        raise ValueError(f"allowed: expected a bool array (True = may attend), found dtype {arr.dtype}")
    if arr.ndim == 2:
        arr = arr[None, None]
    if arr.ndim != 4:
        raise ValueError(f"allowed: expected shape [Sq, Sk] or [B, Hm, Sq, Sk], "
                         f"found {list(np.shape(allowed))}")
    if causal not in (None, True, False):
        raise ValueError(f"causal: expected None, True or False, found {causal!r}")
    sq, sk = arr.shape[-2:]
    masked = ~arr
    rows = np.arange(sq)[:, None]
    diag_rows = causal_first_row(np.arange(sk), sq, sk)              # rows < this are above the diagonal
    below = rows >= diag_rows[None, :]                                # [Sq, Sk]
    full_col = masked.all(axis=-2)
    failures = []

    if causal in (None, True):
        above_ok = (masked | below).all(axis=(-2))                    # causal part must be masked
        count, s1, e1, _, _ = _runs(masked & below)
        suffix = (count == 0) | ((count == 1) & (e1 == sq))
        single = count <= 1
        lts = np.where(count == 0, sq, s1)
        if np.all(above_ok & suffix):
            return finish(np.where(full_col, 0, lts)[..., None], True, sq)
        if np.all(above_ok & single):
            lte = np.where(count == 0, sq, e1)
            return finish(np.stack([np.where(full_col, 0, lts), np.where(full_col, sq, lte)], -1), True, sq)
        failures.append(("causal", above_ok & single))
    if causal in (None, False):
        count, s1, e1, s2, e2 = _runs(masked)
        lead = np.where(masked[..., 0, :], e1, 0)                     # [0, UTE)
        trail = np.where(count == 0, sq, np.where(count == 1, np.where(e1 == sq, s1, sq),
                                                  np.where(e2 == sq, s2, sq)))
        expected = lead + (sq - trail)
        two_ok = (masked.sum(axis=-2) == np.where(full_col, sq, expected)) & (count <= 2)
        if np.all(two_ok):
            lts = np.where(full_col, 0, trail)
            ute = np.where(full_col, 0, lead)
            return finish(np.stack([lts, ute], -1), False, sq)
        if np.all(count <= 2):
            lt_s = np.where(count == 0, sq, np.where(count == 1, s1, s2))
            lt_e = np.where(count == 0, sq, np.where(count == 1, e1, e2))
            ut_s = np.where(count == 2, s1, 0)
            ut_e = np.where(count == 2, e1, 0)
            return finish(np.stack([lt_s, lt_e, ut_s, ut_e], -1), False, sq)
        failures.append(("bidirectional", count <= 2))
    form, ok = failures[-1]
    b, h, j = (int(v[0]) for v in np.nonzero(~ok))
    reason = ("its masked rows form more than two intervals" if form == "bidirectional" else
              "its visible rows below the diagonal are not one interval, or a key above the "
              "diagonal is visible")
    raise ValueError(f"allowed: expected a mask FlashMask can represent ({form} form), found key column "
                     f"{j} (batch {b}, head {h}) where {reason}")
