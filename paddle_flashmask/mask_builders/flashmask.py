"""The ``FlashMask`` container, argument checks shared by all builders, and ``stack``.

A builder returns ``FlashMask(startend_row_indices, causal)``; because it is a NamedTuple both
``flashmask_attention(q, k, v, **mask._asdict())`` and ``to_dense(*mask)`` work.
"""
from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Optional, Sequence

import numpy as np

from ..semantics import column_names, validate


class FlashMask(NamedTuple):
    """A FlashMask: int32 ``startend_row_indices`` ``[B, Hm, S, C]`` and the ``causal`` flag.

    See :mod:`paddle_flashmask.semantics` for what the columns mean.
    """
    startend_row_indices: np.ndarray
    causal: bool

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.startend_row_indices.shape)

    @property
    def seqlen(self) -> int:
        """Number of key columns (= query rows for the self-attention masks built here)."""
        return int(self.startend_row_indices.shape[2])


# --------------------------------------------------------------------------------------------------
# Argument checks: every message names the argument, what was expected and what was found.
# --------------------------------------------------------------------------------------------------

def check_int(name: str, value: Any, minimum: Optional[int] = None,
              maximum: Optional[int] = None) -> int:
    """Return ``value`` as int, or raise ``ValueError`` if it is not an integer in range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer, found {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, found {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}: expected an integer <= {maximum}, found {value}")
    return value


def check_lengths(name: str, lengths: Any, minimum: int = 1) -> list[int]:
    """A non-empty sequence of integers >= ``minimum`` (token counts)."""
    if isinstance(lengths, (int, np.integer, str, bytes)) or not isinstance(lengths, Iterable):
        raise ValueError(f"{name}: expected a sequence of integers, found {lengths!r}")
    out = [check_int(f"{name}[{k}]", v, minimum) for k, v in enumerate(lengths)]
    if not out:
        raise ValueError(f"{name}: expected at least one length, found an empty sequence")
    return out


def resolve_seqlen(seqlen: Optional[int], used: int, used_what: str) -> int:
    """``seqlen`` defaults to the tokens used; a shorter one is an error, a longer one pads."""
    if seqlen is None:
        return used
    seqlen = check_int("seqlen", seqlen, 1)
    if seqlen < used:
        raise ValueError(f"seqlen: expected >= {used} ({used_what}), found {seqlen}")
    return seqlen


def make_mask(columns: Sequence[np.ndarray], causal: bool) -> FlashMask:
    """Assemble 1-D per-column arrays of length S into a ``[1, 1, S, C]`` FlashMask and validate it."""
    idx = np.stack([np.asarray(c, dtype=np.int64) for c in columns], axis=-1)[None, None]
    return finish(idx, causal)


def finish(idx: np.ndarray, causal: bool, seqlen_q: Optional[int] = None) -> FlashMask:
    """Cast ``[B, Hm, S, C]`` to int32 and check it with the semantics module's ``validate``."""
    idx = np.ascontiguousarray(idx, dtype=np.int32)
    sk = idx.shape[2]
    validate(idx, causal, sk if seqlen_q is None else seqlen_q, sk)
    return FlashMask(idx, bool(causal))


# --------------------------------------------------------------------------------------------------
# stack
# --------------------------------------------------------------------------------------------------

def _promote(mask: FlashMask, num_columns: int, seqlen_q: int) -> np.ndarray:
    """Widen C without changing the dense mask: causal 1 -> 2 (LTE = Sq), bidirectional 2 -> 4."""
    idx = mask.startend_row_indices
    c = idx.shape[3]
    if c == num_columns:
        return idx
    b, hm, s, _ = idx.shape
    full = np.full((b, hm, s), seqlen_q, dtype=np.int32)
    zero = np.zeros((b, hm, s), dtype=np.int32)
    if mask.causal and c == 1 and num_columns == 2:
        return np.stack([idx[..., 0], full], axis=-1)
    if not mask.causal and c == 2 and num_columns == 4:
        # LTS, UTE -> LTS, LTE=Sq, UTS=0, UTE
        return np.stack([idx[..., 0], full, zero, idx[..., 1]], axis=-1)
    raise ValueError(f"masks: cannot widen C={c} to C={num_columns} for causal={mask.causal}")


def stack(masks: Sequence[FlashMask], promote: bool = False) -> FlashMask:
    """Batch masks of equal length, ``causal`` and C into one ``[B, Hm, S, C]`` FlashMask.

    Inputs may already have B > 1 (they are concatenated along the batch axis). Masks with Hm = 1
    are broadcast to the largest Hm when the others agree on it. With ``promote=True`` masks of a
    smaller C are widened losslessly (causal C=1 -> 2, bidirectional C=2 -> 4); by default a C
    mismatch is an error. Example (two rows)::

        row 0: causal_document_mask([2, 2])   row 1: causal_mask(4)
        x...                                  x...
        xx..                                  xx..
        ..x.                                  xxx.
        ..xx                                  xxxx
    """
    masks = list(masks)
    if not masks:
        raise ValueError("masks: expected at least one FlashMask, found an empty sequence")
    for k, m in enumerate(masks):
        if not isinstance(m, tuple) or len(m) != 2:
            raise ValueError(f"masks[{k}]: expected a FlashMask (startend_row_indices, causal), "
                             f"found {type(m).__name__}")
    masks = [FlashMask(np.asarray(m[0]), bool(m[1])) for m in masks]
    causal, seqlen = masks[0].causal, masks[0].startend_row_indices.shape[2]
    for k, m in enumerate(masks):
        s = m.startend_row_indices.shape[2]
        validate(m.startend_row_indices, m.causal, s, s)
        if m.causal != causal:
            raise ValueError(f"masks[{k}]: expected causal={causal} like masks[0], found causal={m.causal}")
        if m.startend_row_indices.shape[2] != seqlen:
            raise ValueError(f"masks[{k}]: expected sequence length {seqlen} like masks[0], "
                             f"found {m.startend_row_indices.shape[2]}")
    widths = {m.startend_row_indices.shape[3] for m in masks}
    num_columns = max(widths)
    if len(widths) > 1 and not promote:
        raise ValueError(f"masks: expected equal C (last dim), found {sorted(widths)}; "
                         f"pass promote=True to widen losslessly")
    heads = {m.startend_row_indices.shape[1] for m in masks}
    num_heads = max(heads)
    if not heads <= {1, num_heads}:
        raise ValueError(f"masks: expected mask heads Hm equal or 1, found {sorted(heads)}")
    rows = []
    for m in masks:
        idx = _promote(m, num_columns, seqlen)
        rows.append(np.broadcast_to(idx, (idx.shape[0], num_heads) + idx.shape[2:]))
    column_names(causal, num_columns)
    return finish(np.concatenate(rows, axis=0), causal)
