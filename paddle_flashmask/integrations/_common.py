"""Helpers shared by the framework integrations: warn-once, and dense mask -> startend indices.

Framework-free (numpy + the semantics module), so each integration module stays small.
"""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np

from ..mask_builders import from_dense

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

    A thin wrapper over :func:`paddle_flashmask.mask_builders.from_dense` (the one converter): a
    causal layer accepts any form, a bidirectional layer only the bidirectional ones. A mask no
    FlashMask form can draw (e.g. an additive bias that is not 0/-inf) raises
    ``NotImplementedError``, so the integration falls back loudly instead of attending wrongly.
    Costs O(B * Hm * Sq * Sk) on the host: meant for the padding path, where the framework already
    materialised the dense mask.
    """
    vis = np.asarray(visible).astype(bool)
    if vis.ndim != 4:
        raise ValueError(f"attention_mask: expected a 4-D mask [B, H, Sq, Sk], found shape {vis.shape}")
    try:
        mask = from_dense(vis, causal=None if causal else False)
    except ValueError as exc:
        raise NotImplementedError(
            "attention_mask: expected a mask FlashMask startend_row_indices can express, found one "
            f"it cannot ({exc}); use the framework's eager attention for this mask") from exc
    return mask.startend_row_indices, mask.causal


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

