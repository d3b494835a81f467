"""Independent fp64 numpy oracle for attention with a dense boolean mask (tests only).

Deliberately naive: dense [B, H, Sq, Sk] scores, explicit softmax, explicit analytic backward. It
shares no code with the backends; the only shared piece is the mask, which callers build with
``paddle_flashmask.to_dense`` (the single semantics module).

API (layout ``[B, S, H, D]`` like the frontends):
    allowed = expand_mask_heads(to_dense(idx, causal, Sq), H)          # bool [B, H, Sq, Sk]
    out, lse = dense_attention_fp64(q, k, v, allowed, scale, sink=None)
    dq, dk, dv, dsink = dense_attention_grads_fp64(q, k, v, allowed, scale, dout, sink=None, dlse=None)
    allowed = plain_mask(B, H, Sq, Sk, causal)                         # startend_row_indices=None
    idx = random_indices(rng, B, Hm, Sq, Sk, causal, C, empty_from_row=None)   # random valid mask
    FORMS = [(True, 1), (True, 2), (False, 2), (False, 4)]
"""
from __future__ import annotations

from typing import Optional

import numpy as np


def expand_mask_heads(dense_mask: np.ndarray, num_heads: int) -> np.ndarray:
    """[B, Hm, Sq, Sk] -> [B, H, Sq, Sk]: query head h uses mask head h // (H // Hm)."""
    hm = dense_mask.shape[1]
    assert num_heads % hm == 0
    return np.repeat(dense_mask, num_heads // hm, axis=1)


def plain_mask(batch: int, num_heads: int, seqlen_q: int, seqlen_k: int, causal: bool) -> np.ndarray:
    """bool [B, H, Sq, Sk] of plain attention; causal is bottom-right aligned."""
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    allowed = (j <= i + (seqlen_k - seqlen_q)) if causal else np.ones((seqlen_q, seqlen_k), bool)
    return np.broadcast_to(allowed, (batch, num_heads, seqlen_q, seqlen_k)).copy()


def _bhsd(x: np.ndarray, num_heads: int) -> np.ndarray:
    """[B, S, Hx, D] -> fp64 [B, H, S, D], repeating kv heads for GQA (head h uses h // (H // Hx))."""
    x = np.asarray(x, dtype=np.float64).transpose(0, 2, 1, 3)
    return np.repeat(x, num_heads // x.shape[1], axis=1)


def _probs(q, k, allowed, scale, sink):
    """fp64 P [B, H, Sq, Sk], sink share [B, H, Sq] (or None), lse [B, H, Sq]."""
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1)
    if sink is not None:
        m = np.maximum(m, sink[None, :, None])
    m = np.where(np.isneginf(m), 0.0, m)
    e = np.where(allowed, np.exp(s - m[..., None]), 0.0)
    denom = e.sum(axis=-1)
    sink_e = None
    if sink is not None:
        sink_e = np.exp(sink[None, :, None] - m)
        denom = denom + sink_e
    with np.errstate(divide="ignore"):
        lse = m + np.log(denom)
    safe = np.where(denom == 0, 1.0, denom)
    p = e / safe[..., None]
    p_sink = None if sink is None else sink_e / safe
    return p, p_sink, lse


def dense_attention_fp64(q, k, v, allowed_mask_bhqk, scale: float, sink=None):
    """Returns ``out`` fp64 [B, Sq, H, Dv] and ``lse`` fp64 [B, H, Sq] (-inf on empty rows w/o sink)."""
    h = q.shape[2]
    qh, kh, vh = _bhsd(q, h), _bhsd(k, h), _bhsd(v, h)
    sink64 = None if sink is None else np.asarray(sink, np.float64)
    p, _, lse = _probs(qh, kh, allowed_mask_bhqk, scale, sink64)
    out = np.einsum("bhij,bhjd->bhid", p, vh).transpose(0, 2, 1, 3)
    return out, lse


def _fold_heads(g: np.ndarray, num_kv_heads: int) -> np.ndarray:
    """[B, H, S, D] grads of repeated kv heads -> [B, S, Hk, D] (sum over each group)."""
    b, h, s, d = g.shape
    return g.reshape(b, num_kv_heads, h // num_kv_heads, s, d).sum(axis=2).transpose(0, 2, 1, 3)


def dense_attention_grads_fp64(q, k, v, allowed_mask_bhqk, scale: float, dout,
                               sink=None, dlse: Optional[np.ndarray] = None):
    """Analytic fp64 gradients of ``sum(out * dout) + sum(lse * dlse)``.

    Returns ``dq [B,Sq,H,D], dk [B,Sk,Hk,D], dv [B,Sk,Hk,Dv], dsink [H] (or None)``.
    Softmax backward: dS = P ∘ (dP − rowsum(dP ∘ P)) with dP = dO Vᵀ, plus P ∘ dLSE; the sink is a
    column with score sink[h] and no value row.
    """
    h, hk = q.shape[2], k.shape[2]
    qh, kh, vh = _bhsd(q, h), _bhsd(k, h), _bhsd(v, h)
    sink64 = None if sink is None else np.asarray(sink, np.float64)
    p, p_sink, _ = _probs(qh, kh, allowed_mask_bhqk, scale, sink64)
    do = np.asarray(dout, np.float64).transpose(0, 2, 1, 3)
    dp = np.einsum("bhid,bhjd->bhij", do, vh)
    row = (dp * p).sum(axis=-1)  # dP·P over the keys (the sink contributes dP = 0)
    g_lse = np.zeros_like(row) if dlse is None else np.asarray(dlse, np.float64)
    ds = p * (dp - row[..., None] + g_lse[..., None])
    dq = np.einsum("bhij,bhjd->bhid", ds, kh) * scale
    dk = np.einsum("bhij,bhid->bhjd", ds, qh) * scale
    dv = np.einsum("bhij,bhid->bhjd", p, do)
    dsink = None
    if sink is not None:
        dsink = (p_sink * (0.0 - row + g_lse)).sum(axis=(0, 2))
    return dq.transpose(0, 2, 1, 3), _fold_heads(dk, hk), _fold_heads(dv, hk), dsink


FORMS = [(True, 1), (True, 2), (False, 2), (False, 4)]


def random_indices(rng: np.random.Generator, batch: int, mask_heads: int, seqlen_q: int,
                   seqlen_k: int, causal: bool, num_columns: int,
                   empty_from_row: Optional[int] = None) -> np.ndarray:
    """Random valid int32 ``[B, Hm, Sk, C]`` for a (causal, C) form; mostly well-formed bands.

    ``empty_from_row``: additionally make every row >= it see no key (padding rows), by pulling the
    lower band start of every column up to it (and its end, when present, past the last row).
    """
    vals = rng.integers(0, seqlen_q + 1, size=(batch, mask_heads, seqlen_k, num_columns))
    for lo, hi in ((0, 1), (2, 3)):
        if hi < num_columns and not (num_columns == 2 and not causal):
            vals[..., [lo, hi]] = np.sort(vals[..., [lo, hi]], axis=-1)
    if empty_from_row is not None:
        vals[..., 0] = np.minimum(vals[..., 0], empty_from_row)
        if num_columns == 4 or (causal and num_columns == 2):
            vals[..., 1] = seqlen_q
    return vals.astype(np.int32)
