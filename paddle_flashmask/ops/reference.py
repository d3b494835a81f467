"""Exact reference backend: FlashMask attention in framework ops, tile by tile.

One implementation for both frameworks: every tensor operation goes through a tiny adapter
(:class:`TorchOps` / :class:`PaddleOps`), so the math below is written once.

Memory: the query rows are processed in tiles of ``tile_rows``; each tile's mask is built from the
column bounds with :func:`paddle_flashmask.semantics.element_masked` (the single mask rule), and the
backward recomputes the tile's probabilities from the saved LSE like flash attention does. No
``[Sq, Sk]`` tensor of the whole sequence ever exists, so S = 16K fwd+bwd fits in a few hundred MB.

Conventions (DESIGN §1): inputs ``[B, S, H, D]``; GQA: query head h uses kv head ``h // (H // Hk)``
and mask head ``h // (H // Hm)``; math in fp32; LSE fp32 ``[B, H, Sq]`` (natural log); a row with no
visible key -> output 0, LSE -inf (with a sink: LSE = sink[h]) and zero gradients. The learnable sink
adds ``exp(sink[h])`` to the softmax denominator only (not scaled by ``softmax_scale``).
Deterministic by construction (fixed-order reductions).
"""
from __future__ import annotations

import math
import os
from typing import Any, Optional

from .. import semantics

# Elements of one [B, H, tile_rows, Sk] fp32 score tile; a few such tensors are alive at once.
_DEFAULT_TILE_ELEMENTS = 1 << 20


# --------------------------------------------------------------------------------------------------
# Framework adapters: the only place that knows torch vs paddle op names.
# --------------------------------------------------------------------------------------------------

class _SameNameOps:
    """The ops whose name and signature torch and paddle share (``self.fw`` is the framework)."""

    def exp(self, x):
        return self.fw.exp(x)

    def log(self, x):
        return self.fw.log(x)

    def where(self, cond, a, b):
        return self.fw.where(cond, a, b)

    def maximum(self, a, b):
        return self.fw.maximum(a, b)


class TorchOps(_SameNameOps):
    name = "torch"

    def __init__(self) -> None:
        import torch
        self.fw = torch

    def compute(self, x):  # fp32 compute copy
        return x.to(self.fw.float32)

    def cast(self, x, like):  # outputs: like's dtype, dense strides (the fake impls promise them)
        return x.to(like.dtype).contiguous()

    def to_int64(self, x):
        return x.to(self.fw.int64)

    def permute(self, x, perm):
        return x.permute(*perm)

    def reshape(self, x, shape):
        return x.reshape(*shape)

    def matmul(self, a, b, transpose_a=False, transpose_b=False):
        if transpose_a:
            a = a.transpose(-1, -2)
        if transpose_b:
            b = b.transpose(-1, -2)
        return self.fw.matmul(a, b)

    def amax(self, x, axis):
        return self.fw.amax(x, dim=axis, keepdim=True)

    def sum(self, x, axis, keepdim=True):
        return self.fw.sum(x, dim=axis, keepdim=keepdim)

    def zeros(self, shape, like):
        return self.fw.zeros(tuple(shape), dtype=self.fw.float32, device=like.device)

    def arange(self, start, end, like):
        return self.fw.arange(start, end, dtype=self.fw.int64, device=like.device)

    def concat(self, xs, axis):
        return self.fw.cat(xs, dim=axis)

    def visible_range(self, masked, cols, seqlen_k):
        """(first, last + 1) of the key columns some row of ``masked`` [..., Sk] can see."""
        visible = (~masked).reshape(-1, seqlen_k).any(dim=0)
        first = int(self.fw.where(visible, cols[0], seqlen_k).min())
        last = int(self.fw.where(visible, cols[0], -1).max())
        return first, last + 1

    def add_cols(self, acc, part, c0, c1):  # acc[:, :, c0:c1] += part
        acc[:, :, c0:c1] += part
        return acc


class PaddleOps(_SameNameOps):
    name = "paddle"

    def __init__(self) -> None:
        import paddle
        self.fw = paddle

    def compute(self, x):
        return x.astype("float32")

    def cast(self, x, like):  # outputs: like's dtype, dense strides (Paddle 3 transposes are views)
        return x.astype(like.dtype).contiguous()

    def to_int64(self, x):
        return x.astype("int64")

    def permute(self, x, perm):
        return self.fw.transpose(x, list(perm))

    def reshape(self, x, shape):
        return self.fw.reshape(x, list(shape))

    def matmul(self, a, b, transpose_a=False, transpose_b=False):
        return self.fw.matmul(a, b, transpose_x=transpose_a, transpose_y=transpose_b)

    def amax(self, x, axis):
        return self.fw.max(x, axis=axis, keepdim=True)

    def sum(self, x, axis, keepdim=True):
        return self.fw.sum(x, axis=axis, keepdim=keepdim)

    def zeros(self, shape, like):
        return self.fw.zeros(list(shape), dtype="float32", device=like.place)

    def arange(self, start, end, like):
        return self.fw.arange(start, end, dtype="int64", device=like.place)

    def concat(self, xs, axis):
        return self.fw.concat(xs, axis=axis)

    def visible_range(self, masked, cols, seqlen_k):
        visible = self.fw.any(self.fw.reshape(~masked, [-1, seqlen_k]), axis=0)
        first = int(self.fw.where(visible, cols[0], self.fw.full_like(cols[0], seqlen_k)).min())
        last = int(self.fw.where(visible, cols[0], self.fw.full_like(cols[0], -1)).max())
        return first, last + 1

    def add_cols(self, acc, part, c0, c1):
        acc[:, :, c0:c1] = acc[:, :, c0:c1] + part
        return acc


_ADAPTERS: dict[str, Any] = {}


def ops_for(tensor: Any) -> Any:
    """The adapter for the framework ``tensor`` belongs to."""
    kind = "torch" if type(tensor).__module__.startswith("torch") else "paddle"
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TorchOps() if kind == "torch" else PaddleOps()
    return _ADAPTERS[kind]


# --------------------------------------------------------------------------------------------------
# Shared layout helpers
# --------------------------------------------------------------------------------------------------

def default_tile_rows(batch: int, heads: int, seqlen_q: int, seqlen_k: int) -> int:
    """Query rows per tile so one score tile holds about ``PADDLE_FLASHMASK_REF_TILE_ELEMENTS``."""
    budget = int(os.environ.get("PADDLE_FLASHMASK_REF_TILE_ELEMENTS", _DEFAULT_TILE_ELEMENTS))
    rows = budget // max(1, batch * heads * max(seqlen_k, 1))
    return max(1, min(seqlen_q, rows))


class _Layout:
    """Shapes and the tile-local mask of one call; tensors are kept as [B, Hk, G, S, D]."""

    def __init__(self, ops, q, k, startend_row_indices, causal: bool, softmax_scale: float,
                 tile_rows: Optional[int]):
        self.ops = ops
        self.batch, self.seqlen_q, self.heads, self.head_dim = (int(s) for s in q.shape)
        self.seqlen_k, self.kv_heads = int(k.shape[1]), int(k.shape[2])
        self.group = self.heads // self.kv_heads
        self.causal = bool(causal)
        self.scale = float(softmax_scale)
        self.tile_rows = tile_rows or default_tile_rows(self.batch, self.heads, self.seqlen_q,
                                                        self.seqlen_k)
        self.cols = ops.reshape(ops.arange(0, self.seqlen_k, q), (1, self.seqlen_k))
        self.bands = None
        self.mask_heads = 1
        if startend_row_indices is not None:
            idx = ops.to_int64(startend_row_indices)  # [B, Hm, Sk, C]
            self.mask_heads = int(idx.shape[1])
            cols = [idx[:, :, :, c:c + 1] for c in range(int(idx.shape[3]))]
            # [B, Hm, Sk, 1] -> [B, Hm, 1, Sk] so the rows of a tile broadcast against key columns
            self.bands = semantics.band_bounds([ops.permute(c, (0, 1, 3, 2)) for c in cols], causal)

    def heads_5d(self, x, seqlen):  # [B, S, Hx, D] -> fp32 [B, Hk, Hx/Hk, S, D]
        ops = self.ops
        d = int(x.shape[3])
        x = ops.permute(ops.compute(x), (0, 2, 1, 3))
        return ops.reshape(x, (self.batch, self.kv_heads, int(x.shape[1]) // self.kv_heads, seqlen, d))

    def from_heads_5d(self, x, like):  # fp32 [B, Hk, G, S, D] -> [B, S, H', D] in like's dtype
        ops = self.ops
        b, hk, g, s, d = (int(v) for v in x.shape)
        return ops.cast(ops.permute(ops.reshape(x, (b, hk * g, s, d)), (0, 2, 1, 3)), like)

    def tile_masked(self, r0: int, r1: int):
        """bool [B, Hm, 1, t, Sk] (or [t, Sk]) True = masked, for query rows [r0, r1); None = none."""
        ops = self.ops
        offset = self.seqlen_k - self.seqlen_q
        rows = ops.reshape(ops.arange(r0, r1, self.cols), (r1 - r0, 1))
        if self.bands is None:
            if not self.causal:
                return None
            # Plain causal == the C=1 form with no lower band (LTS = Sq never reached).
            return semantics.element_masked(rows, self.cols, semantics.Bands(self.seqlen_q, None, None, None),
                                            True, offset)
        masked = semantics.element_masked(rows, self.cols, self.bands, self.causal, offset)
        b, hm = self.batch, self.mask_heads
        return ops.reshape(masked, (b, hm, 1, r1 - r0, self.seqlen_k))

    def tile(self, r0: int, r1: int):
        """(mask, c0, c1): the tile's mask restricted to the key columns [c0, c1) outside of which
        every element of the tile is masked (so the tile's matmuls skip them). c1 > c0 always."""
        masked = self.tile_masked(r0, r1)
        if masked is None:
            return None, 0, self.seqlen_k
        c0, c1 = self.ops.visible_range(masked, self.cols, self.seqlen_k)
        if c1 <= c0:  # nothing visible: keep one (masked) column so the math stays uniform
            c0, c1 = 0, 1
        return masked[..., c0:c1], c0, c1

    def apply_mask(self, scores, masked):
        """scores [B, Hk, G, t, Sk] with masked elements set to -inf (mask head h // (H // Hm))."""
        if masked is None:
            return scores
        ops = self.ops
        t = int(scores.shape[3])
        if len(masked.shape) == 2:
            return ops.where(masked, _neg_inf(ops, scores), scores)
        hm = self.mask_heads
        n = int(scores.shape[4])
        view = ops.reshape(scores, (self.batch, hm, self.heads // hm, t, n))
        view = ops.where(masked, _neg_inf(ops, view), view)
        return ops.reshape(view, (self.batch, self.kv_heads, self.group, t, n))

    def sink_5d(self, learnable_sink):  # [H] -> fp32 [1, Hk, G, 1, 1]
        if learnable_sink is None:
            return None
        ops = self.ops
        return ops.reshape(ops.compute(learnable_sink), (1, self.kv_heads, self.group, 1, 1))


def _neg_inf(ops, like):
    return ops.zeros((1,), like) - math.inf


def _exp_masked(ops, scores, shift):
    """exp(scores - shift) with exact zeros where scores is -inf (Paddle's CPU exp(-inf) returns a
    denormal, not 0, which would leak into the output of rows that see nothing)."""
    return ops.where(scores == -math.inf, ops.zeros((1,), scores), ops.exp(scores - shift))


# --------------------------------------------------------------------------------------------------
# Forward and backward
# --------------------------------------------------------------------------------------------------

def flashmask_fwd(q, k, v, startend_row_indices=None, *, causal: bool, softmax_scale: float,
                  learnable_sink=None, tile_rows: Optional[int] = None):
    """Exact attention forward. Returns ``(out [B, Sq, H, Dv] in q's dtype, lse fp32 [B, H, Sq])``.

    Shapes are assumed checked by the frontend (see ``paddle_flashmask.ops.arguments``).
    """
    ops = ops_for(q)
    lay = _Layout(ops, q, k, startend_row_indices, causal, softmax_scale, tile_rows)
    q5 = lay.heads_5d(q, lay.seqlen_q)
    k5 = lay.heads_5d(k, lay.seqlen_k)
    v5 = lay.heads_5d(v, lay.seqlen_k)
    sink = lay.sink_5d(learnable_sink)
    outs, lses = [], []
    for r0 in range(0, lay.seqlen_q, lay.tile_rows):
        r1 = min(r0 + lay.tile_rows, lay.seqlen_q)
        masked, c0, c1 = lay.tile(r0, r1)
        scores = ops.matmul(q5[:, :, :, r0:r1], k5[:, :, :, c0:c1], transpose_b=True) * lay.scale
        scores = lay.apply_mask(scores, masked)
        row_max = ops.amax(scores, -1)
        if sink is not None:
            row_max = ops.maximum(row_max, sink)
        # An empty row has max -inf: shift by 0 so exp() gives exact zeros, not NaN.
        shift = ops.where(row_max == -math.inf, ops.zeros((1,), q5), row_max)
        probs = _exp_masked(ops, scores, shift)
        denom = ops.sum(probs, -1)
        if sink is not None:
            denom = denom + ops.exp(sink - shift)
        # An empty row without a sink has denom 0: LSE -inf, set explicitly (Paddle's CPU log(0)
        # returns about -87, not -inf).
        empty = denom == 0
        safe_denom = ops.where(empty, ops.zeros((1,), q5) + 1.0, denom)
        lses.append(ops.where(empty, _neg_inf(ops, q5), shift + ops.log(safe_denom)))
        outs.append(ops.matmul(probs, v5[:, :, :, c0:c1]) / safe_denom)
    out = lay.from_heads_5d(ops.concat(outs, 3), q)
    lse = ops.concat(lses, 3)  # [B, Hk, G, Sq, 1]
    lse = ops.reshape(lse, (lay.batch, lay.heads, lay.seqlen_q))
    return out, lse


def flashmask_bwd(dout, q, k, v, out, lse, startend_row_indices=None, *, causal: bool,
                  softmax_scale: float, learnable_sink=None, dlse=None,
                  tile_rows: Optional[int] = None):
    """Exact backward, recomputing each tile's probabilities from ``lse``.

    ``dlse`` (optional, ``[B, H, Sq]``) is the gradient flowing into the returned LSE.
    Returns ``(dq, dk, dv, dsink)`` in the dtypes of q, k, v, sink (``dsink`` None without a sink).
    """
    ops = ops_for(q)
    lay = _Layout(ops, q, k, startend_row_indices, causal, softmax_scale, tile_rows)
    b, hk, g = lay.batch, lay.kv_heads, lay.group
    q5 = lay.heads_5d(q, lay.seqlen_q)
    k5 = lay.heads_5d(k, lay.seqlen_k)
    v5 = lay.heads_5d(v, lay.seqlen_k)
    do5 = lay.heads_5d(dout, lay.seqlen_q)
    o5 = lay.heads_5d(out, lay.seqlen_q)
    lse5 = ops.reshape(ops.compute(lse), (b, hk, g, lay.seqlen_q, 1))
    dlse5 = None if dlse is None else ops.reshape(ops.compute(dlse), (b, hk, g, lay.seqlen_q, 1))
    sink = lay.sink_5d(learnable_sink)
    zero = ops.zeros((1,), q5)
    d, dv_dim = lay.head_dim, int(v.shape[3])
    dk = ops.zeros((b, hk, lay.seqlen_k, d), q5)
    dv = ops.zeros((b, hk, lay.seqlen_k, dv_dim), q5)
    dsink = None if sink is None else ops.zeros(sink.shape, q5)
    dqs = []
    for r0 in range(0, lay.seqlen_q, lay.tile_rows):
        r1 = min(r0 + lay.tile_rows, lay.seqlen_q)
        t = r1 - r0
        q_t, do_t = q5[:, :, :, r0:r1], do5[:, :, :, r0:r1]
        lse_t = lse5[:, :, :, r0:r1]
        # Empty rows (LSE -inf) have only -inf scores: exp(-inf - 0) = 0 gives zero gradients.
        lse_t = ops.where(lse_t == -math.inf, zero, lse_t)
        masked, c0, c1 = lay.tile(r0, r1)
        n = c1 - c0
        k_t, v_t = k5[:, :, :, c0:c1], v5[:, :, :, c0:c1]
        scores = ops.matmul(q_t, k_t, transpose_b=True) * lay.scale
        scores = lay.apply_mask(scores, masked)
        probs = _exp_masked(ops, scores, lse_t)  # [B, Hk, G, t, n]
        delta = ops.sum(do_t * o5[:, :, :, r0:r1], -1)  # rowsum(dO * O)
        if dlse5 is not None:
            delta = delta - dlse5[:, :, :, r0:r1]
        dprobs = ops.matmul(do_t, v_t, transpose_b=True)
        dscores = probs * (dprobs - delta)
        dqs.append(ops.matmul(dscores, k_t) * lay.scale)
        # Sum the G query heads sharing a kv head inside the matmul: [B, Hk, G*t, n].
        probs_g = ops.reshape(probs, (b, hk, g * t, n))
        dscores_g = ops.reshape(dscores, (b, hk, g * t, n))
        dv = ops.add_cols(dv, ops.matmul(probs_g, ops.reshape(do_t, (b, hk, g * t, dv_dim)),
                                         transpose_a=True), c0, c1)
        dk = ops.add_cols(dk, ops.matmul(dscores_g, ops.reshape(q_t, (b, hk, g * t, d)),
                                         transpose_a=True) * lay.scale, c0, c1)
        if sink is not None:
            sink_prob = ops.exp(sink - lse_t)  # share of the denominator taken by the sink
            dsink = dsink + ops.sum(ops.sum(-sink_prob * delta, 3), 0)
    dq = lay.from_heads_5d(ops.concat(dqs, 3), q)
    dk = ops.cast(ops.permute(dk, (0, 2, 1, 3)), k)
    dv = ops.cast(ops.permute(dv, (0, 2, 1, 3)), v)
    if sink is not None:
        dsink = ops.cast(ops.reshape(dsink, (lay.heads,)), learnable_sink)
    return dq, dk, dv, dsink
