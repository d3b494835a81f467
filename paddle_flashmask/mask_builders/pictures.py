"""Pictures of a mask: ``picture`` (ASCII, for docstrings and tests) and ``render`` (PNG).

Both take a :class:`FlashMask`, a ``(startend_row_indices, causal)`` pair, or a training layout
(anything with a ``.mask`` FlashMask), and pick one batch row and one mask head.
"""
from __future__ import annotations

import os
import struct
import zlib
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..semantics import count_visible_pairs, rows_masked, validate
from .flashmask import FlashMask, check_int


def _as_mask(mask: Any) -> FlashMask:
    if hasattr(mask, "startend_row_indices") and hasattr(mask, "causal"):
        return FlashMask(np.asarray(mask.startend_row_indices), bool(mask.causal))
    if hasattr(mask, "mask") and hasattr(mask.mask, "startend_row_indices"):
        return _as_mask(mask.mask)
    if isinstance(mask, tuple) and len(mask) == 2:
        return FlashMask(np.asarray(mask[0]), bool(mask[1]))
    raise ValueError(f"mask: expected a FlashMask or (startend_row_indices, causal), "
                     f"found {type(mask).__name__}")


def _select(mask: Any, batch: int, head: int, seqlen_q: Optional[int]) -> tuple[np.ndarray, bool, int]:
    """The ``[1, 1, Sk, C]`` slice of one batch row / mask head, validated, and Sq."""
    m = _as_mask(mask)
    idx = m.startend_row_indices
    validate(idx, m.causal, idx.shape[2] if seqlen_q is None else seqlen_q, idx.shape[2])
    b, hm = idx.shape[0], idx.shape[1]
    batch = check_int("batch", batch, 0, b - 1)
    head = check_int("head", head, 0, hm - 1)
    sq = idx.shape[2] if seqlen_q is None else int(seqlen_q)
    return idx[batch:batch + 1, head:head + 1], m.causal, sq


def picture(mask: Any, batch: int = 0, head: int = 0, seqlen_q: Optional[int] = None) -> str:
    """ASCII picture of one batch row / head: one line per query row, ``x`` attend, ``.`` masked."""
    idx, causal, sq = _select(mask, batch, head, seqlen_q)
    visible = ~rows_masked(idx, causal, sq, 0, sq)[0, 0]
    return "\n".join("".join("x" if v else "." for v in row) for row in visible)


def parse_picture(text: str) -> np.ndarray:
    """Inverse of :func:`picture`: bool ``[Sq, Sk]`` from lines of ``x`` / ``.`` (blank lines and
    surrounding spaces ignored)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    widths = {len(ln) for ln in lines}
    if len(widths) != 1:
        raise ValueError(f"text: expected lines of equal width, found widths {sorted(widths)}")
    bad = set("".join(lines)) - {"x", "."}
    if bad:
        raise ValueError(f"text: expected only 'x' and '.', found {sorted(bad)}")
    return np.array([[ch == "x" for ch in ln] for ln in lines], dtype=bool)


def boundaries_of(mask: Any, batch: int = 0, head: int = 0) -> list[int]:
    """Key positions where any index column changes value: document / segment starts."""
    idx, _, _ = _select(mask, batch, head, None)
    cols = idx[0, 0]
    change = np.any(cols[1:] != cols[:-1], axis=1)
    return [int(p) + 1 for p in np.nonzero(change)[0]]


_VISIBLE = np.array([37, 99, 235], dtype=np.uint8)   # blue
_MASKED = np.array([245, 245, 245], dtype=np.uint8)  # near white
_LINE = np.array([220, 38, 38], dtype=np.uint8)      # red boundaries


def render(mask: Any, path: Union[str, os.PathLike], batch: int = 0, head: int = 0,
           seqlen_q: Optional[int] = None, boundaries: Optional[Sequence[int]] = None,
           max_pixels: int = 1024, max_boundaries: int = 64) -> str:
    """Write a PNG of one batch row / mask head: blue = may attend, white = masked.

    Red lines mark document boundaries, drawn as a vertical line at each key position and a
    horizontal one at the same query row. They are ``boundaries`` when given, otherwise the key
    positions where the indices change (:func:`boundaries_of`), skipped when there are more than
    ``max_boundaries`` of them (a sliding window changes at every column). Small masks are drawn
    with several pixels per element (at least 4, grid-free); masks longer than ``max_pixels`` are
    averaged into blocks (shade = fraction of visible pairs), computed block-row by block-row so no
    full ``[Sq, Sk]`` array is built. Returns ``path`` as a string. Needs no imaging library: the
    PNG is encoded here (numpy + zlib).
    """
    idx, causal, sq = _select(mask, batch, head, seqlen_q)
    sk = idx.shape[2]
    max_pixels = check_int("max_pixels", max_pixels, 16)
    # Pixels per element (>= 1) or elements per pixel (block), whichever fits max_pixels.
    longest = max(sq, sk)
    block = max(1, -(-longest // max_pixels))
    scale = 1 if block > 1 else max(1, min(max_pixels // longest, 16))
    rows_out, cols_out = -(-sq // block), -(-sk // block)
    shade = np.empty((rows_out, cols_out), dtype=np.float64)
    for r in range(rows_out):
        r0, r1 = r * block, min((r + 1) * block, sq)
        # exact visible pairs per key column for this block of rows, O(Sk) (interval arithmetic)
        per_col = count_visible_pairs(idx, causal, sq, r0, r1, per_column=True)[0, 0]
        counts = np.pad(per_col, (0, cols_out * block - sk)).reshape(cols_out, block).sum(axis=1)
        widths = np.minimum(np.arange(1, cols_out + 1) * block, sk) - np.arange(cols_out) * block
        shade[r] = counts / ((r1 - r0) * widths)
    rgb = (_MASKED[None, None, :] * (1 - shade[..., None]) + _VISIBLE[None, None, :] * shade[..., None])
    rgb = np.repeat(np.repeat(rgb.round().astype(np.uint8), scale, axis=0), scale, axis=1)
    if boundaries is None:
        found = boundaries_of((idx, causal), 0, 0)
        boundaries = found if len(found) <= max_boundaries else []
    for pos in boundaries:
        pos = check_int("boundaries[...]", pos, 0, sk)
        px = pos * scale // block
        if 0 < px < rgb.shape[1]:
            rgb[:, px] = _LINE
        if sq == sk and 0 < px < rgb.shape[0]:  # self-attention: the same position as a row
            rgb[px, :] = _LINE
    path = os.fspath(path)
    with open(path, "wb") as f:
        f.write(encode_png(rgb))
    return path


def encode_png(rgb: np.ndarray) -> bytes:
    """Minimal PNG encoder for an 8-bit RGB ``[H, W, 3]`` array (filter 0 on every row)."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"rgb: expected shape [H, W, 3], found {list(rgb.shape)}")
    height, width = rgb.shape[:2]
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, width * 3)], axis=1)

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit depth, colour type 2 = RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
            + chunk(b"IEND", b""))
