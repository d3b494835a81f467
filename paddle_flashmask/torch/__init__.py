"""PyTorch frontend: ``paddle_flashmask.torch.flashmask_attention`` (same arguments as the Paddle one).

Backed by the custom ops ``torch.ops.paddle_flashmask.fwd`` / ``.bwd`` (``torch.library``, with fake
implementations), so it works under ``torch.compile(fullgraph=True)``. See docs/api.md.
"""
from __future__ import annotations

from typing import Optional

try:
    import torch
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("paddle_flashmask.torch needs PyTorch: pip install 'paddle_flashmask[torch]'") from exc

from ..ops import arguments, backend as backends
from . import ops  # noqa: F401 - registers torch.ops.paddle_flashmask.*

__all__ = ["flashmask_attention"]


def _is_compiling() -> bool:
    return bool(getattr(torch.compiler, "is_compiling", lambda: False)())


@torch._dynamo.assume_constant_result
def _window_indices(seqlen_q: int, seqlen_k: int, left: int, right: int, causal: bool, batch: int):
    """The window shorthand's indices as a constant, so torch.compile never traces the numpy builder."""
    return torch.from_numpy(arguments.window_indices(seqlen_q, seqlen_k, left, right, causal, batch))


def flashmask_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        startend_row_indices=None, *, dropout: float = 0.0, causal: bool = False,
                        window_size=None, return_softmax_lse: bool = False,
                        return_seed_offset: bool = False, fixed_seed_offset=None, rng_name: str = "",
                        training: bool = True, name: Optional[str] = None,
                        softmax_scale: Optional[float] = None, block_mask=None,
                        learnable_sink: Optional[torch.Tensor] = None, backend: Optional[str] = None,
                        deterministic: Optional[bool] = None, validate_indices: bool = True):
    r"""FlashMask attention on torch tensors; arguments and semantics as
    :func:`paddle_flashmask.flashmask_attention` (layout ``[B, S, H, D]``).

    Returns ``out``, or the tuple ``(out, lse)`` when ``return_softmax_lse``.
    ``deterministic=None`` resolves from env ``PADDLE_FLASHMASK_DETERMINISTIC``, else
    ``torch.are_deterministic_algorithms_enabled()``. Under ``torch.compile`` the index value-range
    check (a device->host copy) is skipped; shape checks still run at trace time. Pass the indices
    as a tensor there (a numpy array breaks the graph); ``window_size`` works.
    """
    for arg, x in (("query", query), ("key", key), ("value", value), ("learnable_sink", learnable_sink)):
        if not isinstance(x, torch.Tensor) and not (arg == "learnable_sink" and x is None):
            raise ValueError(f"{arg}: expected a torch.Tensor, found {type(x).__name__}")
    arguments.check_unsupported(dropout=dropout, training=training, return_seed_offset=return_seed_offset,
                                fixed_seed_offset=fixed_seed_offset, block_mask=block_mask)
    dims = arguments.check_inputs(query, key, value, learnable_sink)
    scale = arguments.resolve_softmax_scale(softmax_scale, dims.head_dim)
    requested = backends.requested_backend(backend)
    backends.check_deterministic_request(deterministic)
    if window_size is not None and startend_row_indices is None:
        left, right = arguments.window_bounds(window_size)
        startend_row_indices = _window_indices(dims.seqlen_q, dims.seqlen_k, left, right, bool(causal),
                                               dims.batch).to(query.device)
        window_size = None
    idx = arguments.prepare_indices(
        startend_row_indices, causal=bool(causal), window_size=window_size, dims=dims,
        validate_indices=validate_indices, check_values=not _is_compiling(),
        to_tensor=lambda a: torch.as_tensor(a, device=query.device),
        is_tensor=lambda x: isinstance(x, torch.Tensor))
    if idx is not None and idx.device != query.device:  # e.g. CPU indices for CUDA tensors
        idx = idx.to(query.device)
    det = ops._DET_UNSET if deterministic is None else int(bool(deterministic))
    # An explicit backend is passed through; "auto" from the env is resolved again inside the op.
    op_backend = ops._NO_BACKEND if backend is None else requested
    op = torch.ops.paddle_flashmask.fwd if _is_compiling() else ops.EagerFlashMask.apply
    out, lse = op(query, key, value, idx, learnable_sink, bool(causal), scale, op_backend, det,
                  bool(return_softmax_lse))
    if return_softmax_lse:
        return out, lse
    return out
