"""Paddle frontend: a drop-in for ``paddle.nn.functional.flashmask_attention`` (Paddle 3.x).

Layout ``[batch, seqlen, heads, head_dim]``. Backed by a ``paddle.autograd.PyLayer`` whose forward and
backward run the backend chosen per call (``paddle_flashmask.ops.backend``): the SM90 CuTe DSL
kernels on a Hopper GPU, the exact tiled reference everywhere else. See docs/api.md.
"""
from __future__ import annotations

from typing import Any, Optional

from .ops import arguments, backend as backends


def _paddle():
    try:
        import paddle
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("paddle_flashmask.flashmask_attention needs PaddlePaddle: "
                          "pip install 'paddle_flashmask[paddle]' (or paddlepaddle-gpu from "
                          "Paddle's own index)") from exc
    return paddle


def _is_paddle_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("paddle")


_PYLAYER = None


def _pylayer():
    """The PyLayer class, built on first use so importing this module needs no paddle."""
    global _PYLAYER
    if _PYLAYER is not None:
        return _PYLAYER
    paddle = _paddle()

    class FlashMaskFunction(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx, query, key, value, startend_row_indices, learnable_sink, causal, softmax_scale,
                    backend, deterministic, lse_grad_used):
            out, lse, chosen = backends.run_fwd(backend, query, key, value, startend_row_indices,
                                                learnable_sink, causal=causal, softmax_scale=softmax_scale)
            ctx.save_for_backward(query, key, value, out, lse)
            ctx.extras = (startend_row_indices, learnable_sink, causal, softmax_scale, chosen,
                          deterministic, lse_grad_used)
            # Paddle requires None (not a gradient) for inputs with stop_gradient=True.
            ctx.needs_grad = [t is not None and not t.stop_gradient
                              for t in (query, key, value, learnable_sink)]
            return out, lse

        @staticmethod
        def backward(ctx, dout, dlse):
            query, key, value, out, lse = ctx.saved_tensor()
            idx, sink, causal, scale, chosen, deterministic, lse_grad_used = ctx.extras
            dq, dk, dv, dsink = backends.run_bwd(
                chosen, dout, query, key, value, out, lse, idx, sink,
                dlse if lse_grad_used else None, causal=causal, softmax_scale=scale,
                deterministic=deterministic)
            # PyLayer wants one gradient per Tensor input, in order (None for the int indices).
            need_q, need_k, need_v, need_sink = ctx.needs_grad
            grads = [dq if need_q else None, dk if need_k else None, dv if need_v else None]
            if idx is not None:
                grads.append(None)
            if sink is not None:
                grads.append(dsink if need_sink else None)
            return tuple(grads)

    _PYLAYER = FlashMaskFunction
    return _PYLAYER


def _to_tensor_like(query):
    paddle = _paddle()

    def to_tensor(array):
        return paddle.to_tensor(array, place=query.place)
    return to_tensor


def flashmask_attention(query, key, value, startend_row_indices=None, *, dropout: float = 0.0,
                        causal: bool = False, window_size=None, return_softmax_lse: bool = False,
                        return_seed_offset: bool = False, fixed_seed_offset=None, rng_name: str = "",
                        training: bool = True, name: Optional[str] = None,
                        softmax_scale: Optional[float] = None, block_mask=None, learnable_sink=None,
                        backend: Optional[str] = None, deterministic: Optional[bool] = None,
                        validate_indices: bool = True):
    r"""FlashMask attention: ``softmax(Q Kᵀ · scale + M) V`` with a column-wise sparse mask M.

    Same signature, defaults and return convention as ``paddle.nn.functional.flashmask_attention``
    (Paddle 3.x) plus ``learnable_sink`` and the keyword-only extras ``backend``, ``deterministic``,
    ``validate_indices``.

    Args:
        query: ``[B, Sq, H, D]`` float16 / bfloat16 (float32 too on the reference backend).
        key: ``[B, Sk, Hk, D]``, ``H % Hk == 0`` (GQA/MQA: query head h uses kv head ``h // (H // Hk)``).
        value: ``[B, Sk, Hk, Dv]``.
        startend_row_indices: int32 ``[B, Hm, Sk, C]`` (tensor or numpy), ``Hm in {1, Hk, H}``;
            the column-wise mask of DESIGN §1 (causal C in {1, 2}; non-causal C in {2, 4}).
            ``None``: plain causal or full attention.
        causal: causal masking, bottom-right aligned when Sq != Sk.
        window_size: ``int`` or ``(left, right)``, only with ``startend_row_indices=None``: builds the
            indices. Causal: row i sees keys ``[i - left, i]``; non-causal ``[i - left, i + right]``
            (Paddle's documented convention, ``left + 1`` keys when causal).
        return_softmax_lse: also return the LSE, fp32 ``[B, H, Sq]`` (natural log; -inf on rows that
            see no key, or ``learnable_sink[h]`` with a sink).
        softmax_scale: defaults to ``D ** -0.5``.
        learnable_sink: ``[H]``, one logit per query head added to the softmax denominator
            (``exp(sink[h])``, not scaled). Differentiable.
        dropout, training, rng_name, name: Paddle's. ``dropout > 0`` with ``training=True`` raises
            NotImplementedError; ``training=False`` disables dropout as in Paddle; ``rng_name`` and
            ``name`` have no effect without dropout / outside static graphs.
        return_seed_offset, fixed_seed_offset, block_mask: NotImplementedError (see docs/api.md).
        backend: ``'auto'`` (default, or env ``PADDLE_FLASHMASK_BACKEND``), ``'cute'`` or
            ``'reference'``. ``paddle_flashmask.ops.backend.last_backend()`` tells which one ran.
        deterministic: deterministic backward; default from env ``PADDLE_FLASHMASK_DETERMINISTIC``,
            else ``FLAGS_cudnn_deterministic`` on GPU builds.
        validate_indices: check the index values lie in ``[0, Sq]`` (one device->host copy);
            set False in hot loops once the mask is known good. Shape checks always run.

    Returns:
        ``out`` ``[B, Sq, H, Dv]`` when ``return_softmax_lse`` is False, else the list ``[out, lse]``.
    """
    _paddle()
    for arg, x in (("query", query), ("key", key), ("value", value), ("learnable_sink", learnable_sink)):
        if not _is_paddle_tensor(x) and not (arg == "learnable_sink" and x is None):
            raise ValueError(f"{arg}: expected a paddle.Tensor, found {type(x).__name__}")
    arguments.check_unsupported(dropout=dropout, training=training, return_seed_offset=return_seed_offset,
                                fixed_seed_offset=fixed_seed_offset, block_mask=block_mask)
    dims = arguments.check_inputs(query, key, value, learnable_sink)
    scale = arguments.resolve_softmax_scale(softmax_scale, dims.head_dim)
    backends.requested_backend(backend)  # reject a bad name / env value before any work
    backends.check_deterministic_request(deterministic)
    idx = arguments.prepare_indices(startend_row_indices, causal=bool(causal), window_size=window_size,
                                    dims=dims, validate_indices=validate_indices,
                                    to_tensor=_to_tensor_like(query), is_tensor=_is_paddle_tensor)
    if idx is not None and str(idx.place) != str(query.place):  # e.g. CPU indices for GPU tensors
        idx = idx.to(query.place)
    out, lse = _pylayer().apply(query, key, value, idx, learnable_sink, bool(causal), scale, backend,
                                deterministic, bool(return_softmax_lse))
    if return_softmax_lse:
        return [out, lse]
    return out


def flash_attention_with_sparse_mask(query, key, value, attn_mask_start_row_indices,
                                     attn_mask_start_row: int = 0, dropout: float = 0.0,
                                     causal: bool = False, return_softmax: bool = False,
                                     return_softmax_lse: bool = False, return_seed_offset: bool = False,
                                     training: bool = True, name: Optional[str] = None):
    """The older Paddle API (``paddle.nn.functional.flash_attention.flash_attention_with_sparse_mask``).

    ``attn_mask_start_row_indices`` int32 ``[B, Hm, Sk]``: the row where the causal lower mask of
    each key column starts (the C=1 causal form); ``causal`` must be True, as in Paddle.
    ``attn_mask_start_row`` is Paddle's performance hint (all start rows are >= it); it must be a
    non-negative int and does not change the exact result. ``return_softmax=True`` raises
    NotImplementedError (it would need the whole [Sq, Sk] probability matrix).
    """
    if attn_mask_start_row_indices is None:
        raise ValueError("attn_mask_start_row_indices: expected an int32 [B, Hm, Sk] tensor, found None")
    if not causal:
        raise ValueError("causal: expected True (flash_attention_with_sparse_mask is causal-only), "
                         f"found {causal!r}")
    if isinstance(attn_mask_start_row, bool) or not isinstance(attn_mask_start_row, int) \
            or attn_mask_start_row < 0:
        raise ValueError(f"attn_mask_start_row: expected a non-negative int, found {attn_mask_start_row!r}")
    if return_softmax:
        raise NotImplementedError("return_softmax: expected False (the dense softmax matrix is never "
                                  "materialised), found True")
    shape = list(attn_mask_start_row_indices.shape)
    if len(shape) != 3:
        raise ValueError(f"attn_mask_start_row_indices: expected rank 3 [B, Hm, Sk], found shape {shape}")
    if _is_paddle_tensor(attn_mask_start_row_indices):
        idx = attn_mask_start_row_indices.unsqueeze(-1)
    else:
        import numpy as np
        idx = np.asarray(attn_mask_start_row_indices)[..., None]
    return flashmask_attention(query, key, value, idx, dropout=dropout, causal=True,
                               return_softmax_lse=return_softmax_lse,
                               return_seed_offset=return_seed_offset, training=training, name=name)
