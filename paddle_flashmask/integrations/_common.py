"""Helpers shared by the framework integrations: warn-once, and dense mask -> startend indices.

Framework-free (numpy + the semantics module), so each integration module stays small.
"""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np

from ..semantics import to_dense

_WARNED: set[str] = set()


class SilentFallbackWarning(UserWarning):
    """A framework code path would silently drop (part of) the attention mask."""


def warn_once(key: str, message: str) -> bool:
    """Emit ``message`` as a :class:`SilentFallbackWarning` the first time ``key`` is seen.

    Returns True when the warning was emitted. ``reset_warnings()`` forgets what was warned.
    """
    if key in _WARNED:
        return False
    _WARNED.add(key)
    warnings.warn(message, SilentFallbackWarning, stacklevel=3)
    return True


def reset_warnings() -> None:
    """Forget which warnings were emitted (tests; long-lived processes that re-configure)."""
    _WARNED.clear()


def dense_to_startend(visible: np.ndarray, causal: bool = True) -> tuple[np.ndarray, bool]:
    """Convert a dense bool mask ``[B, Hm, Sq, Sk]`` (True = may attend) to ``(indices, causal)``.

    Tries, in order, the forms whose visible rows per key column are one interval:

    * causal ``C=1`` (only when ``causal``): column j is visible to rows ``[j - (Sk - Sq), LTS)``;
      this covers causal + key padding (padded key: ``LTS = 0``) and packed causal documents;
    * bidirectional ``C=2`` (LTS, UTE): column j is visible to rows ``[UTE, LTS)``.

    The result is checked by converting it back with the semantics module, so it is exact or it
    raises ``NotImplementedError`` (a mask whose columns see several separate row ranges, e.g. an
    additive bias that is not 0/-inf, cannot be expressed as one FlashMask column form here).
    Costs O(B * Hm * Sq * Sk) on the host: meant for the padding path, where the framework already
    materialised the dense mask.
    """
    vis = np.asarray(visible).astype(bool)
    if vis.ndim != 4:
        raise ValueError(f"attention_mask: expected a 4-D mask [B, H, Sq, Sk], found shape {vis.shape}")
    b, hm, sq, sk = vis.shape
    count = vis.sum(axis=2)                                          # [B, Hm, Sk]
    first = np.where(count > 0, vis.argmax(axis=2), 0)
    last_plus_one = np.where(count > 0, sq - vis[:, :, ::-1, :].argmax(axis=2), 0)
    contiguous = (count == 0) | (count == last_plus_one - first)
    candidates = []
    if causal:
        causal_start = np.clip(np.arange(sk) - (sk - sq), 0, sq)     # first row causality allows
        starts_on_diagonal = (count == 0) | (first == causal_start)
        if np.all(contiguous & starts_on_diagonal):
            lts = np.where(count > 0, last_plus_one, causal_start)
            candidates.append((lts[..., None], True))
    if np.all(contiguous):
        lts = np.where(count > 0, last_plus_one, 0)
        ute = np.where(count > 0, first, 0)
        candidates.append((np.stack([lts, ute], axis=-1), False))
    for idx, is_causal in candidates:
        idx = idx.astype(np.int32)
        if np.array_equal(to_dense(idx, is_causal, sq), vis):
            return idx, is_causal
    raise NotImplementedError(
        "attention_mask: expected a mask whose visible query rows form one interval per key column "
        "(causal/padding/document masks), found a mask that is not expressible as FlashMask "
        "startend_row_indices; use the framework's eager attention for this mask")


def additive_or_bool_to_visible(mask: np.ndarray) -> np.ndarray:
    """Dense ``attention_mask`` as frameworks pass it -> bool visible.

    bool: True = may attend. Float (additive): 0 = may attend, a large negative value (<= -1e4,
    e.g. -inf or dtype min) = masked; any other value is a bias FlashMask cannot express.
    """
    m = np.asarray(mask)
    if m.dtype == np.bool_:
        return m
    if np.issubdtype(m.dtype, np.integer):
        return m != 0
    m = m.astype(np.float32)
    visible = m == 0
    masked = m <= -1e4
    if not np.all(visible | masked):
        raise NotImplementedError(
            "attention_mask: expected an additive mask of 0 (attend) and large negative values "
            f"(masked), found other values (e.g. {m[~(visible | masked)].ravel()[:3].tolist()}); "
            "a soft bias is not expressible as a FlashMask")
    return visible

