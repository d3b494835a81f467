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
    return forward_impl(q, k, v, startend_row_indices, learnable_sink, causal, softmax_scale, backend)


def forward_impl(q, k, v, startend_row_indices, learnable_sink, causal: bool, softmax_scale: float,
                 backend: str) -> tuple[Tensor, Tensor]:
    """The forward both paths run: the custom op (traced) and :class:`EagerFlashMask` (eager)."""
    out, lse, _ = backends.run_fwd(_backend_arg(backend), q, k, v, startend_row_indices,
                                   learnable_sink, causal=causal, softmax_scale=softmax_scale)
    return out, lse


def backward_impl(dout, q, k, v, out, lse, startend_row_indices, learnable_sink, dlse,
                  causal: bool, softmax_scale: float, backend: str, deterministic: int):
    """The backward both paths run; ``(dq, dk, dv, dsink or None)``."""
    det = None if deterministic == _DET_UNSET else bool(deterministic)
    return backends.run_bwd(_backend_arg(backend), dout, q, k, v, out, lse, startend_row_indices,
                            learnable_sink, dlse, causal=causal, softmax_scale=softmax_scale,
                            deterministic=det)


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
    dq, dk, dv, dsink = backward_impl(dout, q, k, v, out, lse, startend_row_indices, learnable_sink,
                                      dlse, causal, softmax_scale, backend, deterministic)
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


def _backward_from_context(ctx, dout, dlse, bwd):
    """The backward of both paths from what :func:`_setup_context` saved; ``bwd`` is the custom
    op (traced) or :func:`backward_impl` (eager)."""
    q, k, v, out, lse, idx, sink = ctx.saved_tensors
    causal, scale, backend, deterministic, lse_grad_used = ctx.flags
    dq, dk, dv, dsink = bwd(dout, q, k, v, out, lse, idx, sink, dlse if lse_grad_used else None,
                            causal, scale, backend, deterministic)
    return dq, dk, dv, None, (dsink if sink is not None else None), None, None, None, None, None


def _backward(ctx, dout, dlse):
    return _backward_from_context(ctx, dout, dlse, torch.ops.paddle_flashmask.bwd)


flashmask_fwd.register_autograd(_backward, setup_context=_setup_context)


class EagerFlashMask(torch.autograd.Function):
    """The eager path: the same forward/backward as the custom ops without the ``torch.library``
    dispatch (about 40 us per call on the host, which bounds short masked kernels). The frontend
    uses the custom ops whenever ``torch.compile`` traces, so graphs still see one op."""

    @staticmethod
    def forward(ctx, q, k, v, idx, sink, causal, scale, backend, deterministic, lse_grad_used):
        out, lse = forward_impl(q, k, v, idx, sink, causal, scale, backend)
        _setup_context(ctx, (q, k, v, idx, sink, causal, scale, backend, deterministic,
                             lse_grad_used), (out, lse))
        ctx.set_materialize_grads(False)  # an unused LSE gives dlse None, not a zero tensor to test
        if not lse_grad_used:
            ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        if dout is None:  # out itself reached the loss only through the LSE
            dout = torch.zeros_like(ctx.saved_tensors[3])
        return _backward_from_context(ctx, dout, dlse, backward_impl)
