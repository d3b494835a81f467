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
    """Random inputs ``[B, S, H(k), D]`` drawn in a fixed order (q, dO, k, v) from ``seed``."""
    torch.manual_seed(seed)
    shape_q = (batch, seqlen, heads, head_dim)
    shape_k = (batch, seqlen, kv_heads, head_dim)
    q, do = (torch.randn(*shape_q, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(*shape_k, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return CallBuffers(q, k, v, do, torch.empty_like(q),
                       torch.empty(batch, heads, seqlen, device="cuda", dtype=torch.float32),
                       [torch.empty_like(t) for t in (q, k, v)],
                       torch.cuda.current_stream().cuda_stream, head_dim ** -0.5)
