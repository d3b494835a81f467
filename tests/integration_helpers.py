"""Shared by the integration tests: a dense-mask eager attention oracle and gradient comparison.

The oracle is deliberately independent of paddle_flashmask's ops: it expands the indices with the
semantics module's ``to_dense`` and runs plain matmul / softmax in fp32 (rows that see no key
give 0, the FlashMask convention).
"""
from __future__ import annotations

import numpy as np


def paddle_dense_attention_backend(module, query, key, value, attention_mask=None,
                                   attn_mask_startend_row_indices=None, dropout=0.0, sink=None,
                                   scaling=None, is_causal=None, **kwargs):
    """PaddleFormers AttentionInterface-compatible dense oracle: q/k/v [b, h, l, d] -> [b, l, h*d]."""
    import paddle
    import paddle.nn.functional as F
    from paddle_flashmask.semantics import to_dense
    b, h, sq, d = query.shape
    hk, sk = key.shape[1], key.shape[2]
    idx = attn_mask_startend_row_indices
    if idx is not None:
        idx = idx.numpy()
        if idx.ndim == 3:
            idx = idx[..., None]
        causal = idx.shape[-1] == 1 if is_causal is None else bool(is_causal)
        visible = to_dense(idx.astype(np.int32), causal, sq)
    else:
        visible = np.tril(np.ones((sq, sk), bool), sk - sq)[None, None]
    visible = np.broadcast_to(visible, (b, visible.shape[1], sq, sk))
    if visible.shape[1] not in (1, h):      # per-kv-head mask -> per query head
        visible = np.repeat(visible, h // visible.shape[1], axis=1)
    vis = paddle.to_tensor(np.ascontiguousarray(visible))
    k = paddle.repeat_interleave(key, h // hk, axis=1).astype("float32")
    v = paddle.repeat_interleave(value, h // hk, axis=1).astype("float32")
    scale = scaling if scaling is not None else d ** -0.5
    scores = paddle.matmul(query.astype("float32"), k, transpose_y=True) * scale
    scores = paddle.where(vis, scores, paddle.full_like(scores, -1e30))
    probs = F.softmax(scores, axis=-1) * vis.any(axis=-1, keepdim=True).astype("float32")
    out = paddle.matmul(probs, v).astype(query.dtype).transpose([0, 2, 1, 3])
    return out.reshape([b, sq, h * v.shape[-1]]), None


def grads_of(params) -> dict:
    return {p.name: p.grad.numpy().astype(np.float64).copy() for p in params if p.grad is not None}


def assert_grads_close(ours: dict, ref: dict, rtol: float = 1e-5) -> float:
    """Every parameter's gradient matches in relative norm; returns the worst relative error."""
    assert ours.keys() == ref.keys() and ours, (sorted(ours), sorted(ref))
    worst = 0.0
    for name in ref:
        denom = max(np.linalg.norm(ref[name]), 1e-30)
        err = np.linalg.norm(ours[name] - ref[name]) / denom
        worst = max(worst, err)
        assert err <= rtol, f"grad of {name}: relative error {err:.2e} > {rtol:.0e}"
    return worst
