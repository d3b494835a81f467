"""Host-side argument handling shared by the compiled forward and backward variants.

The kernels take raw global-memory pointers plus runtime extents (one compile serves every shape),
so each call turns its tensors into pointers and checks that the call matches the variant.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import cutlass.cute as cute


def env_flag(name: str, default: str = "0") -> bool:
    """A kernel-variant switch from the environment: off for "", "0", "false", "False"."""
    return os.environ.get(name, default) not in ("", "0", "false", "False")


def env_choice(name: str, choices: tuple[str, ...]) -> str:
    """A valued kernel-variant switch from the environment: one of ``choices`` ("" = unset);
    anything else is an error that names the variable."""
    text = os.environ.get(name, "").strip()
    if text and text not in choices:
        raise ValueError(f"{name}: expected one of {list(choices)} or unset, found {text!r}")
    return text


def device_address(tensor: Any) -> int:
    """Device address of a tensor description: ``data_ptr`` (attribute or method) or ``ptr``."""
    address = getattr(tensor, "data_ptr", None)
    if address is None:
        address = getattr(tensor, "ptr")
    return int(address() if callable(address) else address)


def gmem_ptr(tensor: Any, dtype, align: int = 16):
    """A cute global-memory pointer to ``tensor`` (None stays None: an absent optional input)."""
    if tensor is None:
        return None
    return cute.runtime.make_ptr(dtype, device_address(tensor), cute.AddressSpace.gmem,
                                 assumed_align=align)


def check_variant_call(q: Any, k: Any, v: Any, startend_row_indices: Any, learnable_sink: Any, *,
                       head_dim: int, head_dim_v: int, mask_columns: Optional[int],
                       has_sink: bool) -> tuple[int, int, int, int, int, int]:
    """Check a call against the compiled variant; return ``(B, Sq, H, Sk, Hk, Hm)``.

    The host API validated the tensors themselves; this guards the variant choice (head dims,
    mask presence, sink presence), which would otherwise read memory with the wrong layout.
    """
    b, sq, h, d = (int(x) for x in q.shape)
    _, sk, hk, _ = (int(x) for x in k.shape)
    if d != head_dim or int(v.shape[3]) != head_dim_v:
        raise ValueError(f"q/v head dims: expected ({head_dim}, {head_dim_v}) for this compiled "
                         f"variant, found ({d}, {int(v.shape[3])})")
    if (startend_row_indices is None) != (mask_columns is None):
        raise ValueError(f"startend_row_indices: presence must match the variant's mask columns "
                         f"{mask_columns}, found {'None' if startend_row_indices is None else 'a tensor'}")
    if (learnable_sink is None) == has_sink:
        raise ValueError(f"learnable_sink: presence must match the variant's has_sink={has_sink}")
    hm = int(startend_row_indices.shape[1]) if startend_row_indices is not None else 1
    return b, sq, h, sk, hk, hm
