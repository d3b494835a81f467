"""A compact Llama-style decoder for benchmarks: RMSNorm, RoPE, GQA attention, SwiGLU MLP.

Self-contained (torch only, no transformers, no downloads): the GPU host has torch + triton and
nothing else. Weights are random, drawn from one seeded generator, so two processes that build the
same config with the same seed on the same kind of device hold identical models (the end-to-end
benchmark compares first-step losses across attention implementations that way).

The attention itself is pluggable: ``forward(..., attention=fn)`` calls
``fn(q, k, v) -> out`` with ``q [B, S, H, D]``, ``k, v [B, S, Hk, D]`` (RoPE applied, GQA not
expanded) and expects ``out [B, S, H, D]``; the mask lives in the closure.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 32000
    hidden_size: int = 2048
    num_layers: int = 18
    num_heads: int = 16
    num_kv_heads: int = 8
    intermediate_size: int = 5632
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    init_std: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def check(self) -> "LlamaConfig":
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size: expected a multiple of num_heads={self.num_heads}, "
                             f"found {self.hidden_size}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: expected a divisor of num_heads={self.num_heads}, "
                             f"found {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim: expected an even size for RoPE, found {self.head_dim}")
        return self

    def as_dict(self) -> dict:
        return {**asdict(self), "head_dim": self.head_dim}


class RMSNorm(nn.Module):
    """Normalised in fp32 and cast back (as Llama does), then scaled."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)
        return normed * self.weight


def rope_tables(position_ids: torch.Tensor, head_dim: int, theta: float,
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin ``[B, S, 1, head_dim]`` for per-token positions (they restart in every document)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=position_ids.device,
                                             dtype=torch.float32) / head_dim))
    angles = position_ids.float()[..., None] * inv_freq          # [B, S, D/2]
    angles = torch.cat([angles, angles], dim=-1)[:, :, None, :]  # rotate-half layout
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * d, cfg.hidden_size, bias=False)
        self.rope = apply_rope  # compile_non_attention swaps in a compiled version

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attention: AttentionFn) -> torch.Tensor:
        b, s, _ = x.shape
        d = self.cfg.head_dim
        q = self.rope(self.q_proj(x).view(b, s, self.cfg.num_heads, d), cos, sin)
        k = self.rope(self.k_proj(x).view(b, s, self.cfg.num_kv_heads, d), cos, sin)
        v = self.v_proj(x).view(b, s, self.cfg.num_kv_heads, d)
        out = attention(q, k, v)
        return self.o_proj(out.reshape(b, s, self.cfg.num_heads * d))


class SwiGLU(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x, cos, sin, attention: AttentionFn):
        x = x + self.attn(self.attn_norm(x), cos, sin, attention)
        return x + self.mlp(self.mlp_norm(x))


class TinyLlama(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg.check()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @torch.no_grad()
    def init_weights(self, seed: int) -> "TinyLlama":
        """N(0, init_std) for every matrix, ones for the norms, drawn in a fixed order from one
        generator on the model's device (same seed + same device kind -> same weights)."""
        device = self.embed.weight.device
        gen = torch.Generator(device=device).manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, self.cfg.init_std, generator=gen)
        return self

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                attention: AttentionFn) -> torch.Tensor:
        """Logits ``[B, S, vocab]`` in the model dtype."""
        x = self.embed(input_ids)
        cos, sin = rope_tables(position_ids, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, attention)
        return self.lm_head(self.norm(x))


def compile_non_attention(model: TinyLlama) -> None:
    """``torch.compile`` the norms, RoPE and the SwiGLU MLP of ``model`` in place (as production
    trainers fuse them); the attention call stays eager, so every attention implementation runs
    between the same compiled code. Identical modules share one compiled graph."""
    rope = torch.compile(apply_rope)
    for module in model.modules():
        if isinstance(module, (RMSNorm, SwiGLU)):
            module.compile()
        elif isinstance(module, Attention):
            module.rope = rope


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token cross entropy in fp32 ``[B, S]``; 0 where ``labels == -100``."""
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100,
                           reduction="none").view(labels.shape)


def mean_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)


def training_flops_per_token(cfg: LlamaConfig) -> float:
    """6 x (matmul parameters) per token: the dense part of a training step, attention excluded."""
    d, hd = cfg.hidden_size, cfg.head_dim
    per_layer = d * hd * (2 * cfg.num_heads + 2 * cfg.num_kv_heads) + 3 * d * cfg.intermediate_size
    return 6.0 * (cfg.num_layers * per_layer + d * cfg.vocab_size)


def default_param_estimate(cfg: Optional[LlamaConfig] = None) -> float:
    """Parameter count from the config alone (embedding + lm_head + layers + norms)."""
    cfg = cfg or LlamaConfig()
    d, hd = cfg.hidden_size, cfg.head_dim
    per_layer = (d * hd * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
                 + 3 * d * cfg.intermediate_size + 2 * d)
    return cfg.num_layers * per_layer + 2 * cfg.vocab_size * d + d


__all__ = ["LlamaConfig", "TinyLlama", "token_losses", "mean_loss", "training_flops_per_token",
           "compile_non_attention",
           "default_param_estimate", "rope_tables", "apply_rope"]
