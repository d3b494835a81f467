"""``torch.library`` custom ops ``paddle_flashmask::fwd`` / ``paddle_flashmask::bwd``.

Registered with fake (meta) implementations and ``register_autograd`` so ``torch.compile``
(``fullgraph=True``) traces them as single graph nodes. The backend is resolved inside the op, on
the real tensors, so a compiled graph is backend-agnostic.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..ops import backend as backends

_NO_BACKEND = ""  # None is not a schema type for str: "" means "auto / env"
_DET_UNSET = -1  # deterministic: -1 = resolve from env / torch flags, 0 = False, 1 = True


def _backend_arg(backend: str) -> Optional[str]:
    return None if backend == _NO_BACKEND else backend


@torch.library.custom_op("paddle_flashmask::fwd", mutates_args=())
def flashmask_fwd(q: Tensor, k: Tensor, v: Tensor, startend_row_indices: Optional[Tensor],
                  learnable_sink: Optional[Tensor], causal: bool, softmax_scale: float, backend: str,
                  deterministic: int, lse_grad_used: bool) -> tuple[Tensor, Tensor]:
    """``(out [B, Sq, H, Dv], lse fp32 [B, H, Sq])``. ``deterministic``/``lse_grad_used`` are only
    carried to the backward."""
    out, lse, _ = backends.run_fwd(_backend_arg(backend), q, k, v, startend_row_indices,
                                   learnable_sink, causal=causal, softmax_scale=softmax_scale)
    return out, lse


@flashmask_fwd.register_fake
def _flashmask_fwd_fake(q, k, v, startend_row_indices, learnable_sink, causal, softmax_scale, backend,
                        deterministic, lse_grad_used):
    b, sq, h, _ = q.shape
    out = q.new_empty((b, sq, h, v.shape[3]))
    lse = q.new_empty((b, h, sq), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("paddle_flashmask::bwd", mutates_args=())
def flashmask_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                  startend_row_indices: Optional[Tensor], learnable_sink: Optional[Tensor],
                  dlse: Optional[Tensor], causal: bool, softmax_scale: float, backend: str,
                  deterministic: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(dq, dk, dv, dsink)``; ``dsink`` is an empty ``[0]`` tensor when there is no sink."""
    det = None if deterministic == _DET_UNSET else bool(deterministic)
    dq, dk, dv, dsink = backends.run_bwd(_backend_arg(backend), dout, q, k, v, out, lse,
                                         startend_row_indices, learnable_sink, dlse, causal=causal,
                                         softmax_scale=softmax_scale, deterministic=det)
    if dsink is None:
        dsink = q.new_empty((0,))
    return dq, dk, dv, dsink


@flashmask_bwd.register_fake
def _flashmask_bwd_fake(dout, q, k, v, out, lse, startend_row_indices, learnable_sink, dlse, causal,
                        softmax_scale, backend, deterministic):
    dsink = q.new_empty((0,)) if learnable_sink is None else torch.empty_like(learnable_sink)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsink


def _setup_context(ctx, inputs, output):
    q, k, v, idx, sink, causal, scale, backend, deterministic, lse_grad_used = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, idx, sink)
    ctx.flags = (causal, scale, backend, deterministic, lse_grad_used)


def _backward(ctx, dout, dlse):
    q, k, v, out, lse, idx, sink = ctx.saved_tensors
    causal, scale, backend, deterministic, lse_grad_used = ctx.flags
    dq, dk, dv, dsink = torch.ops.paddle_flashmask.bwd(
        dout, q, k, v, out, lse, idx, sink, dlse if lse_grad_used else None, causal, scale, backend,
        deterministic)
    return dq, dk, dv, None, (dsink if sink is not None else None), None, None, None, None, None


flashmask_fwd.register_autograd(_backward, setup_context=_setup_context)
