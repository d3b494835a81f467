"""Inputs and preallocated outputs for timing ``ops.cute.interface`` calls directly, without a
frontend (shared by the diagnostics ``profile_call.py`` and ``kernel_ab.py``)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class CallBuffers:
    """bf16 q/k/v/dO of one problem (seeded), outputs, LSE, gradients, the current stream."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    do: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor
    grads: list
    stream: int
    scale: float


def call_buffers(batch: int, seqlen: int, heads: int, kv_heads: int, head_dim: int,
                 seed: int = 0) -> CallBuffers:
    """Random inputs drawn in a fixed order (q, dO, k, v) from ``seed``: q ``[B, S, H, D]``,
    k ``[B, S, Hk, D]``, v ``[B, S, Hk, Dv]`` and dO / out ``[B, S, H, Dv]``, where Dv is the
    value head dim the kernels pair with D (128 for D = 192, else D)."""
    from paddle_flashmask.ops.cute.interface import SUPPORTED_HEAD_DIMS

    head_dim_v = SUPPORTED_HEAD_DIMS[head_dim]
    torch.manual_seed(seed)
    q = torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16)
    do = torch.randn(batch, seqlen, heads, head_dim_v, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, seqlen, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(batch, seqlen, kv_heads, head_dim_v, device="cuda", dtype=torch.bfloat16)
    return CallBuffers(q, k, v, do, torch.empty_like(do),
                       torch.empty(batch, heads, seqlen, device="cuda", dtype=torch.float32),
                       [torch.empty_like(t) for t in (q, k, v)],
                       torch.cuda.current_stream().cuda_stream, head_dim ** -0.5)
