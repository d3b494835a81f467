"""End-to-end training step: a ~1B Llama on packed SFT rows, through three attention implementations.

    python3 bench/e2e_step.py                                   # H200: all three, JSON + PNG to $OUT
    python3 bench/e2e_step.py --impls flashmask,sdpa_dense      # a subset
    python3 bench/e2e_step.py --cpu-smoke                       # CPU, tiny fp32 model, < 1 min
    python3 bench/e2e_step.py --plot-from bench/results/e2e_step.json   # redraw the PNG (no GPU)

One step = forward + backward + AdamW step of `tiny_llama.TinyLlama` (random weights from a seed,
bf16; default config 2048 hidden, 18 layers, 16 heads / 8 KV heads, head dim 128, SwiGLU 5632,
vocab 32000: 0.98 B parameters) on ``--batch`` packed rows of ``--seqlen`` tokens. The documents
have "real-looking" lengths: a fixed-seed mixture of two lognormals (70 % short, median 350
tokens; 30 % long, median 1500) clipped to [--doc-min, --doc-max] = [100, 4000], packed into rows
with `mask_builders.pack_sft` (greedy); the best-filled rows are used. Labels are the next token
inside each document (-100 on each document's last token and on padding); RoPE positions restart
in every document.

Attention implementations (``--impls``):
  flashmask   paddle_flashmask.torch.flashmask_attention(q, k, v, pack.mask indices, causal=True,
              backend=--flashmask-backend) - the mask straight from pack_sft, GQA native;
  sdpa_dense  torch SDPA with a dense bool [B, 1, S, S] document mask, K/V expanded to all heads
              (what Hugging Face's sdpa path does when a mask is given);
  fa4_varlen  flash_attn.cute.flash_attn_varlen_func (FlashAttention-4; optional import) with
              cu_seqlens = the document boundaries, causal.
Padding (the tail of a row that no document fills) is its own causal segment for sdpa_dense and
fa4_varlen (a fully masked row would make SDPA produce NaN); for flashmask it sees nothing. The
loss ignores it, and no real token can see it in any implementation, so losses are comparable.

Each implementation runs in its own child process (``--in-process`` to disable) under a time
limit (``--impl-timeout``), so a crash or hang in one cannot take the others' numbers with it.
The model is rebuilt from the same seed in each, so the first step (untimed, before any update)
sees identical weights and data: its loss, per-document losses and gradient norm are compared
against sdpa_dense. As a control for how sensitive that comparison is, the sdpa_dense run also
evaluates the loss with a wrong mask (plain causal over the whole row, documents not separated).
Then ``--warmup`` - 1 more untimed steps and ``--steps`` timed steps (CUDA-synchronised wall
time per step); tokens/s = batch x seqlen / median step time. Peak memory is torch's allocator
high-water mark over all steps (the cute kernels' small scratch comes from CUDA's stream-ordered
pool and is not in it).

Writes ``e2e_step.json`` (GPU, versions, date, command, config, data statistics, per
implementation numbers, loss checks, speed-ups and the issue-6 targets) and ``e2e_step.png`` to
``--out`` (default $OUT, else bench/results). Exit status 1 if an implementation that was asked
for failed or the first-step loss check failed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from paddle_flashmask import semantics  # noqa: E402
from paddle_flashmask.mask_builders import pack_sft  # noqa: E402
from tiny_llama import (LlamaConfig, TinyLlama, compile_non_attention, mean_loss,  # noqa: E402
                        token_losses, training_flops_per_token)

IMPLS = ("flashmask", "sdpa_dense", "fa4_varlen")
REFERENCE_IMPL = "sdpa_dense"
GPU_CONFIG = LlamaConfig()
SMOKE_CONFIG = LlamaConfig(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                           intermediate_size=128)
# document length mixture: (weight, median as a fraction of --doc-max, lognormal sigma)
LENGTH_MIXTURE = ((0.7, 350 / 4000, 0.6), (0.3, 1500 / 4000, 0.7))
# issue 6, item 4: tokens/s of flashmask >= 2x sdpa_dense and >= fa4_varlen
TARGETS = {"vs_sdpa_dense": 2.0, "vs_fa4_varlen": 1.0}


# ------------------------------------------------------------------------------------------------
# Arguments
# ------------------------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impls", default=",".join(IMPLS), help="comma list of " + ", ".join(IMPLS))
    p.add_argument("--batch", type=int, default=2, help="packed rows per step")
    p.add_argument("--seqlen", type=int, default=8192, help="tokens per packed row")
    p.add_argument("--doc-min", type=int, default=100)
    p.add_argument("--doc-max", type=int, default=4000)
    p.add_argument("--layers", type=int, default=None, help=f"override num_layers ({GPU_CONFIG.num_layers})")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps, the checked first step included")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default=None, choices=["bfloat16", "float16", "float32"],
                   help="default bfloat16 (float32 with --cpu-smoke)")
    p.add_argument("--device", default=None, help="default cuda (cpu with --cpu-smoke)")
    p.add_argument("--flashmask-backend", default=None, choices=["cute", "reference", "auto"],
                   help="default cute (reference with --cpu-smoke)")
    p.add_argument("--sdpa-backend", default="auto", choices=["auto", "efficient", "cudnn", "math"],
                   help="restrict SDPA to one backend (default: torch's choice)")
    p.add_argument("--loss-rtol", type=float, default=None,
                   help="first-step loss tolerance, relative (default 2e-3 bf16/fp16, 1e-5 fp32)")
    p.add_argument("--control-ratio", type=float, default=0.5,
                   help="max per-document loss deviation from the reference, as a fraction of the "
                        "wrong-mask control's deviation")
    p.add_argument("--impl-timeout", type=float, default=240.0, help="seconds per child process")
    p.add_argument("--in-process", action="store_true", help="run every implementation in this process")
    p.add_argument("--isolate", action="store_true", help="child processes even with --cpu-smoke")
    p.add_argument("--out", default=None, help="output folder (default $OUT, else bench/results)")
    p.add_argument("--tag", default="", help="suffix of the output file names")
    p.add_argument("--compile-model", action="store_true",
                   help="torch.compile the model's norms, RoPE, MLP and loss for every "
                        "implementation (attention stays eager); default: eager model")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny fp32 model on the CPU (S=256, batch 2, docs 8..120), flashmask on the "
                        "reference backend vs sdpa_dense, 1 + 2 steps, in one process")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="after the timed steps, profile this many forwards (+ loss) and whole steps "
                        "(torch.profiler): span, busy and idle GPU time and the heaviest kernels")
    p.add_argument("--plot-from", default=None, help="only redraw the PNG of this JSON and exit")
    p.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.impls = [s for s in args.impls.split(",") if s]
    for impl in args.impls:
        if impl not in IMPLS:
            raise ValueError(f"--impls: expected names from {list(IMPLS)}, found {impl!r}")
    if args.cpu_smoke:
        args.seqlen, args.batch, args.doc_min, args.doc_max = 256, 2, 8, 120
        args.steps, args.warmup, args.in_process = 2, 1, not args.isolate
        args.device = args.device or "cpu"
        args.dtype = args.dtype or "float32"
        args.flashmask_backend = args.flashmask_backend or "reference"
        if args.impls == list(IMPLS):
            args.impls = ["flashmask", "sdpa_dense"]
    args.device = args.device or "cuda"
    args.dtype = args.dtype or "bfloat16"
    args.flashmask_backend = args.flashmask_backend or "cute"
    if args.loss_rtol is None:
        args.loss_rtol = 1e-5 if args.dtype == "float32" else 2e-3
    if args.warmup < 1:
        raise ValueError(f"--warmup: expected >= 1 (the first step is the checked one), found {args.warmup}")
    if args.steps < 1:
        raise ValueError(f"--steps: expected >= 1, found {args.steps}")
    args.out = args.out or os.environ.get("OUT") or os.path.join(ROOT, "bench", "results")
    return args


def model_config(args) -> LlamaConfig:
    cfg = SMOKE_CONFIG if args.cpu_smoke else GPU_CONFIG
    if args.layers is not None:
        cfg = LlamaConfig(**{**cfg.__dict__, "num_layers": args.layers})
    return cfg.check()


# ------------------------------------------------------------------------------------------------
# Data: packed SFT rows
# ------------------------------------------------------------------------------------------------

def document_lengths(count: int, lo: int, hi: int, seed: int) -> list[int]:
    """``count`` lengths from the fixed two-lognormal mixture, clipped to [lo, hi]."""
    rng = np.random.default_rng(seed)
    weights = np.array([w for w, _, _ in LENGTH_MIXTURE])
    comp = rng.choice(len(LENGTH_MIXTURE), size=count, p=weights / weights.sum())
    medians = np.array([m * hi for _, m, _ in LENGTH_MIXTURE])[comp]
    sigmas = np.array([s for _, _, s in LENGTH_MIXTURE])[comp]
    lens = np.exp(np.log(medians) + sigmas * rng.standard_normal(count))
    return [int(n) for n in np.clip(np.rint(lens), lo, hi)]


@dataclass
class PackedBatch:
    input_ids: np.ndarray      # int64 [B, S]
    labels: np.ndarray         # int64 [B, S], -100 = ignored
    position_ids: np.ndarray   # int64 [B, S], restart per document
    segment_ids: np.ndarray    # int64 [B, S], document index in the row; padding = its own last segment
    indices: np.ndarray        # int32 [B, 1, S, 1], pack_sft's startend_row_indices (causal)
    segments: list             # per row: segment lengths (documents, then padding if any)
    doc_lens: list             # per row: document lengths only
    vocab_size: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.input_ids.shape

    def stats(self) -> dict:
        lens = [n for row in self.doc_lens for n in row]
        b, s = self.shape
        real = sum(lens)
        pairs = int(semantics.count_visible_pairs(self.indices, True, s).sum())
        return {"rows": b, "seqlen": s, "documents": len(lens), "real_tokens": real,
                "padding_fraction": 1.0 - real / (b * s),
                "doc_len_min": min(lens), "doc_len_median": float(np.median(lens)),
                "doc_len_mean": float(np.mean(lens)), "doc_len_max": max(lens),
                "docs_per_row": [len(r) for r in self.doc_lens],
                "visible_pairs_per_head": pairs,
                "mask_density_vs_causal": pairs / (b * semantics.dense_pair_count(True, s, s))}


def make_batch(batch: int, seqlen: int, doc_min: int, doc_max: int, vocab: int, seed: int) -> PackedBatch:
    if doc_max > seqlen:
        raise ValueError(f"--doc-max: expected <= seqlen={seqlen}, found {doc_max}")
    # enough documents for about 3x the needed rows, then keep the best-filled rows (ties: first)
    mean_len = sum(w * m * doc_max for w, m, _ in LENGTH_MIXTURE)
    count = max(8, int(3 * batch * seqlen / mean_len))
    lengths = document_lengths(count, doc_min, doc_max, seed)
    pack = pack_sft(lengths, seqlen)
    fill = [sum(lengths[n] for n in row) for row in pack.rows]
    chosen = sorted(sorted(range(len(fill)), key=lambda r: -fill[r])[:batch])
    if len(chosen) < batch:
        raise ValueError(f"--batch: expected <= {len(chosen)} packable rows, found {batch}")
    rng = np.random.default_rng(seed + 1)
    input_ids = rng.integers(0, vocab, size=(batch, seqlen), dtype=np.int64)
    labels = np.full((batch, seqlen), -100, np.int64)
    segment_ids = np.zeros((batch, seqlen), np.int64)
    segments, doc_lens = [], []
    for out_row, row in enumerate(chosen):
        docs = [int(pack.spans[n][2] - pack.spans[n][1]) for n in pack.rows[row]]
        starts = [int(pack.spans[n][1]) for n in pack.rows[row]]
        assert starts == list(np.cumsum([0] + docs[:-1])), "pack_sft places a row's documents left to right"
        for seg, (start, n) in enumerate(zip(starts, docs)):
            segment_ids[out_row, start:start + n] = seg
            # next-token labels inside the document; its last token predicts nothing
            labels[out_row, start:start + n - 1] = input_ids[out_row, start + 1:start + n]
        used = sum(docs)
        segment_ids[out_row, used:] = len(docs)
        segments.append(docs + ([seqlen - used] if used < seqlen else []))
        doc_lens.append(docs)
    return PackedBatch(input_ids, labels, pack.position_ids[chosen].astype(np.int64), segment_ids,
                       pack.mask.startend_row_indices[chosen].astype(np.int32), segments, doc_lens, vocab)


def dense_document_mask(batch: PackedBatch, device) -> torch.Tensor:
    """bool [B, 1, S, S], True = may attend: same segment and causal (padding = one segment)."""
    seg = torch.as_tensor(batch.segment_ids, device=device)
    s = seg.shape[1]
    pos = torch.arange(s, device=device)
    return ((seg[:, :, None] == seg[:, None, :]) & (pos[:, None] >= pos[None, :]))[:, None]


def check_dense_mask(batch: PackedBatch, allowed: torch.Tensor) -> None:
    """The dense mask must equal pack_sft's indices (through semantics' element rule) on every
    real query row; padding rows differ by design (see the module docstring)."""
    idx = torch.as_tensor(batch.indices, device=allowed.device)
    s = idx.shape[2]
    bands = semantics.band_bounds([idx[:, :, None, :, 0]], True)
    rows = torch.arange(s, device=allowed.device)[:, None]
    cols = torch.arange(s, device=allowed.device)[None, :]
    ours = ~semantics.element_masked(rows, cols, bands, True, 0)       # [B, 1, S, S]
    real_rows = torch.as_tensor(_real_token_rows(batch), device=allowed.device)[:, None, :, None]
    bad = int(((ours != allowed) & real_rows).sum())
    if bad:
        raise AssertionError(f"dense document mask differs from pack_sft's indices at {bad} elements")


def _real_token_rows(batch: PackedBatch) -> np.ndarray:
    b, s = batch.shape
    out = np.zeros((b, s), bool)
    for r, docs in enumerate(batch.doc_lens):
        out[r, :sum(docs)] = True
    return out


def cu_seqlens(batch: PackedBatch, device) -> tuple[torch.Tensor, int]:
    """Cumulative segment starts over the flattened batch (padding tails included), max length."""
    lens = [n for row in batch.segments for n in row]
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device=device)
    return cu, max(lens)


# ------------------------------------------------------------------------------------------------
# Attention implementations: fn(q [B,S,H,D], k [B,S,Hk,D], v) -> [B,S,H,D]
# ------------------------------------------------------------------------------------------------

def _sdpa_context(name: str):
    from contextlib import nullcontext

    if name == "auto":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel({"efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "math": SDPBackend.MATH}[name])


def _sdpa(q, k, v, sdpa_backend: str, mask: Optional[torch.Tensor] = None, causal: bool = False):
    group = q.shape[2] // k.shape[2]
    # expanded K/V: SDPA's fused kernels with an explicit mask take no GQA (as in HF's sdpa path)
    k, v = (t.repeat_interleave(group, dim=2) if group > 1 else t for t in (k, v))
    with _sdpa_context(sdpa_backend):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=mask, is_causal=causal)
    return out.transpose(1, 2)


def sdpa_choice(cfg: LlamaConfig, batch: PackedBatch, device, dtype, sdpa_backend: str) -> str:
    """Which SDPA kernel torch dispatches to for this call's kind of inputs (private torch API,
    probed on small tensors of the same dtype / head dim / mask kind; "unknown" if it changes)."""
    if sdpa_backend != "auto":
        return sdpa_backend
    try:
        from torch.nn.attention import SDPBackend

        b, s = batch.shape[0], 256
        q = torch.zeros(b, cfg.num_heads, s, cfg.head_dim, device=device, dtype=dtype)
        mask = torch.ones(b, 1, s, s, device=device, dtype=torch.bool)
        return SDPBackend(torch._fused_sdp_choice(q, q, q, mask, 0.0, False)).name
    except Exception as exc:
        return f"unknown ({type(exc).__name__})"


def make_attention(impl: str, batch: PackedBatch, device, args) -> Callable:
    b, s = batch.shape
    if impl == "flashmask":
        import paddle_flashmask.torch as pfm

        idx = torch.as_tensor(batch.indices, device=device)
        semantics.validate(batch.indices, True, s, s)  # once; the hot loop skips the value check
        return lambda q, k, v: pfm.flashmask_attention(q, k, v, startend_row_indices=idx, causal=True,
                                                       backend=args.flashmask_backend,
                                                       validate_indices=False)
    if impl == "sdpa_dense":
        allowed = dense_document_mask(batch, device)
        check_dense_mask(batch, allowed)
        return lambda q, k, v: _sdpa(q, k, v, args.sdpa_backend, mask=allowed)
    if impl == "fa4_varlen":
        from flash_attn.cute import flash_attn_varlen_func

        cu, longest = cu_seqlens(batch, device)

        def fa4(q, k, v):
            out = flash_attn_varlen_func(q.reshape(b * s, *q.shape[2:]), k.reshape(b * s, *k.shape[2:]),
                                         v.reshape(b * s, *v.shape[2:]), cu_seqlens_q=cu, cu_seqlens_k=cu,
                                         max_seqlen_q=longest, max_seqlen_k=longest, causal=True)
            out = out[0] if isinstance(out, (tuple, list)) else out
            return out.view(b, s, *out.shape[1:])
        return fa4
    raise ValueError(f"impl: expected one of {list(IMPLS)}, found {impl!r}")


# ------------------------------------------------------------------------------------------------
# One implementation: model, optimizer, checked first step, timed steps
# ------------------------------------------------------------------------------------------------

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PhaseMarks:
    """Time stamps between the phases of one step without extra synchronisation: CUDA events on
    the GPU (read after the step's final sync), wall time on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.stamps: list = []

    def mark(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.stamps.append(ev)
        else:
            self.stamps.append(time.perf_counter())

    def seconds(self) -> list[float]:
        pairs = zip(self.stamps, self.stamps[1:])
        if self.cuda:
            return [a.elapsed_time(b) / 1e3 for a, b in pairs]
        return [b - a for a, b in pairs]


def _per_document_loss(tok: torch.Tensor, batch: PackedBatch) -> list[float]:
    out = []
    for r, docs in enumerate(batch.doc_lens):
        start = 0
        for n in docs:
            if n > 1:  # a one-token document has no label
                out.append(float(tok[r, start:start + n - 1].double().mean()))
            start += n
    return out


def run_impl(impl: str, args) -> dict:
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    cfg = model_config(args)
    torch.manual_seed(args.seed)
    rec: dict = {"impl": impl}
    t_setup = time.perf_counter()
    batch = make_batch(args.batch, args.seqlen, args.doc_min, args.doc_max, cfg.vocab_size, args.seed)
    attention = make_attention(impl, batch, device, args)
    with torch.device(device):
        model = TinyLlama(cfg)
    model.to(dtype).init_weights(args.seed)
    loss_fn = mean_loss
    if args.compile_model:  # same compiled non-attention code for every implementation
        compile_non_attention(model)
        loss_fn = torch.compile(mean_loss)
    fused = {"fused": True} if device.type == "cuda" else {"foreach": True}
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, **fused)
    ids, labels, pos = (torch.as_tensor(x, device=device) for x in
                        (batch.input_ids, batch.labels, batch.position_ids))
    n_labels = int((labels != -100).sum())
    rec["setup_s"] = time.perf_counter() - t_setup

    if impl == "sdpa_dense":
        rec["sdpa_kernel_chosen"] = sdpa_choice(cfg, batch, device, dtype, args.sdpa_backend)
    if impl == REFERENCE_IMPL:  # control: how far a wrong mask moves the loss
        with torch.no_grad():
            wrong = token_losses(model(ids, pos, lambda q, k, v: _sdpa(q, k, v, args.sdpa_backend, causal=True)),
                                 labels)
        rec["control_wrong_mask"] = {"loss": float(wrong.sum() / n_labels),
                                     "per_document_loss": _per_document_loss(wrong, batch)}
        del wrong

    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        rec["memory_before_first_step_gib"] = torch.cuda.memory_allocated(device) / 2**30

    # first step: untimed (JIT compiles happen here), checked
    _sync(device)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    tok = token_losses(model(ids, pos, attention), labels)
    loss = tok.sum() / n_labels
    loss.backward()
    grad_norm = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in model.parameters()]))
    opt.step()
    _sync(device)
    rec["first_step_s"] = time.perf_counter() - t0
    rec["first_step"] = {"loss": float(loss.detach()), "grad_norm": float(grad_norm),
                         "per_document_loss": _per_document_loss(tok.detach(), batch)}
    del tok, loss
    if impl == "flashmask":
        from paddle_flashmask.ops.backend import last_backend

        rec["flashmask_backend_used"] = last_backend()

    def step(marks: Optional[PhaseMarks] = None) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(ids, pos, attention), labels)
        if marks:
            marks.mark()
        loss.backward()
        if marks:
            marks.mark()
        opt.step()
        return loss.detach()

    losses = []
    for _ in range(args.warmup - 1):
        losses.append(float(step()))
    times, phases = [], []
    for _ in range(args.steps):
        marks = PhaseMarks(device)
        _sync(device)
        t0 = time.perf_counter()
        marks.mark()
        loss = step(marks)
        marks.mark()
        _sync(device)
        times.append(time.perf_counter() - t0)
        phases.append(marks.seconds())
        losses.append(float(loss))
    if args.profile_steps > 0 and device.type == "cuda":  # after timing: never inside it
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from gpu_trace import kernel_ops, summarize

        n = args.profile_steps
        forward_only = lambda: loss_fn(model(ids, pos, attention), labels)  # noqa: E731
        rec["profile"] = {"forward": summarize(kernel_ops(forward_only, n, 80), n, top=14),
                          "step": summarize(kernel_ops(step, n, 80), n, top=14)}
    b, s = batch.shape
    med = statistics.median(times)
    # forward (+ loss), backward, optimizer: medians of the per-step splits
    rec["median_phase_s"] = {name: statistics.median(p[i] for p in phases)
                             for i, name in enumerate(("forward", "backward", "optimizer"))}
    stats = batch.stats()
    attn_flops = cfg.num_layers * 3.5 * 4 * cfg.head_dim * cfg.num_heads * stats["visible_pairs_per_head"]
    rec.update(ok=True, losses_after_first=losses, step_times_s=times, median_step_s=med,
               tokens_per_s=b * s / med, real_tokens_per_s=stats["real_tokens"] / med,
               model_tflops=(training_flops_per_token(cfg) * b * s + attn_flops) / med / 1e12)
    if device.type == "cuda":
        rec["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        rec["peak_reserved_gib"] = torch.cuda.max_memory_reserved(device) / 2**30
        free, total = torch.cuda.mem_get_info(device)
        rec["device_used_gib_at_end"] = (total - free) / 2**30
    return rec


def run_impl_isolated(impl: str, args) -> dict:
    """The same command in a child process restricted to one implementation, under a time limit."""
    with tempfile.TemporaryDirectory() as tmp:
        child_out = os.path.join(tmp, f"{impl}.json")
        argv = [sys.executable, os.path.abspath(__file__), *[a for a in args.argv if a != "--isolate"],
                "--impls", impl, "--in-process", "--child-out", child_out]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(argv, timeout=args.impl_timeout)
        except subprocess.TimeoutExpired:
            return {"impl": impl, "ok": False, "error": f"timed out after {args.impl_timeout:.0f} s"}
        if os.path.exists(child_out):
            with open(child_out) as fh:
                rec = json.load(fh)
            rec["process_s"] = time.perf_counter() - t0
            return rec
        return {"impl": impl, "ok": False, "error": f"child process exited with status {proc.returncode} "
                                                    "and wrote no result"}


def run_impl_safely(impl: str, args) -> dict:
    try:
        return run_impl(impl, args)
    except Exception as exc:  # a peer that cannot run is reported, not fatal
        traceback.print_exc()
        return {"impl": impl, "ok": False, "error": (type(exc).__name__ + ": " + str(exc))[:600]}


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------

def compare(results: dict, args) -> dict:
    """First-step loss agreement with the reference, and speed-ups of flashmask."""
    ok = {k: r for k, r in results.items() if r.get("ok")}
    ref_name = REFERENCE_IMPL if REFERENCE_IMPL in ok else next(iter(ok), None)
    out: dict = {"reference": ref_name, "loss_rtol": args.loss_rtol, "control_ratio": args.control_ratio,
                 "loss_check": {}}
    if ref_name is not None:
        ref = ok[ref_name]["first_step"]

        def doc_diff(losses) -> float:
            d = np.abs(np.array(losses) - np.array(ref["per_document_loss"]))
            return float(d.max()) if d.size else 0.0

        control = ok[ref_name].get("control_wrong_mask")
        if control is not None:
            out["control_wrong_mask"] = {"abs_diff": abs(control["loss"] - ref["loss"]),
                                         "per_document_max_abs_diff": doc_diff(control["per_document_loss"])}
            # one document per row: the wrong mask is the right one, and the control says nothing
            out["control_wrong_mask"]["informative"] = out["control_wrong_mask"]["per_document_max_abs_diff"] > 0
        for name, r in ok.items():
            first = r["first_step"]
            diff = abs(first["loss"] - ref["loss"])
            check = {"loss": first["loss"], "abs_diff": diff, "rel_diff": diff / abs(ref["loss"]),
                     "per_document_max_abs_diff": doc_diff(first["per_document_loss"]),
                     "grad_norm_rel_diff": abs(first["grad_norm"] - ref["grad_norm"]) / ref["grad_norm"]}
            passed = diff <= args.loss_rtol * abs(ref["loss"])
            if control is not None and out["control_wrong_mask"]["informative"]:
                # a wrong mask must stand out: this implementation's per-document deviation has to be
                # well below the deviation the plain-causal control produces
                check["vs_control"] = (check["per_document_max_abs_diff"]
                                       / out["control_wrong_mask"]["per_document_max_abs_diff"])
                passed = passed and check["vs_control"] <= args.control_ratio
            check["pass"] = bool(passed)
            out["loss_check"][name] = check
    # vacuous with fewer than two implementations that ran: not a pass
    out["loss_check_pass"] = len(ok) >= 2 and all(v["pass"] for v in out["loss_check"].values())
    speed = {}
    if "flashmask" in ok:
        for other, target in (("sdpa_dense", TARGETS["vs_sdpa_dense"]), ("fa4_varlen", TARGETS["vs_fa4_varlen"])):
            if other in ok:
                x = ok["flashmask"]["tokens_per_s"] / ok[other]["tokens_per_s"]
                speed[f"flashmask_vs_{other}"] = {"speedup": x, "target": target, "meets_target": x >= target}
    if "fa4_varlen" in ok and "sdpa_dense" in ok:
        speed["fa4_varlen_vs_sdpa_dense"] = {"speedup": ok["fa4_varlen"]["tokens_per_s"]
                                             / ok["sdpa_dense"]["tokens_per_s"]}
    out["speedups"] = speed
    return out


def _version(module: str, dist_name: Optional[str] = None) -> str:
    try:
        import importlib

        m = importlib.import_module(module)
        v = getattr(m, "__version__", None)
        if (not v or v == "0.0.0") and dist_name:
            from importlib.metadata import version
            v = version(dist_name)
        return str(v)
    except Exception as exc:
        return f"unavailable ({type(exc).__name__})"


def metadata(args, cfg: LlamaConfig) -> dict:
    import paddle_flashmask
    from paddle_flashmask.ops.cute.cache import source_fingerprint

    cuda = args.device.startswith("cuda") and torch.cuda.is_available()
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except Exception:
        commit = None
    env = {k: os.environ[k] for k in ("OUT", "PADDLE_FLASHMASK_BACKEND", "PADDLE_FLASHMASK_CACHE_DIR",
                                       "CUDA_VISIBLE_DEVICES") if k in os.environ}
    return {
        "benchmark": "end-to-end training step (fwd + bwd + AdamW), packed SFT rows",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in ["python3", os.path.relpath(__file__, ROOT)] + args.argv),
        # git_commit is the HEAD of this tree's git, which a copied tree may carry stale;
        # kernel_sources names the kernels (scripts/find_commit.py maps it to commits)
        "env": env, "git_commit": commit, "kernel_sources": source_fingerprint(),
        "device": torch.cuda.get_device_name() if cuda else (platform.processor() or "cpu"),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "cuda": torch.version.cuda, "triton": _version("triton"),
                     "cutlass_dsl": _version("cutlass", "nvidia-cutlass-dsl"),
                     "flash_attn_4": _version("flash_attn.cute", "flash-attn-4"),
                     "paddle_flashmask": paddle_flashmask.__version__},
        "dtype": args.dtype, "batch": args.batch, "seqlen": args.seqlen, "warmup": args.warmup,
        "steps": args.steps, "flashmask_backend": args.flashmask_backend, "sdpa_backend": args.sdpa_backend,
        "compile_model": bool(args.compile_model),
        "optimizer": {"name": "AdamW", "lr": args.lr, "betas": [0.9, 0.95], "weight_decay": 0.1,
                      "fused": cuda},
        "model": {**cfg.as_dict(), "parameters": _param_count(cfg)},
        "document_lengths": {"mixture": [{"weight": w, "median": m * args.doc_max, "sigma": s}
                                         for w, m, s in LENGTH_MIXTURE],
                             "clip": [args.doc_min, args.doc_max], "seed": args.seed},
        "targets_issue6": TARGETS,
    }


def _param_count(cfg: LlamaConfig) -> int:
    with torch.device("meta"):
        return TinyLlama(cfg).num_parameters()


def _plot_with_pillow(report: dict, rows: list, path: str) -> bool:
    """The same two bar panels without matplotlib (Pillow's bitmap font)."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        print("neither matplotlib nor Pillow: no PNG; redraw later with --plot-from", flush=True)
        return False
    w, h, top, base = 900, 360, 50, 320
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    meta = report["meta"]
    draw.text((10, 8), f"{meta['device']} | {meta['dtype']} | {meta['batch']}x{meta['seqlen']} packed SFT | "
                       f"{meta['date']}", fill="black")
    colors = {"flashmask": (44, 160, 44), "sdpa_dense": (127, 127, 127), "fa4_varlen": (31, 119, 180)}
    panels = (("tokens/s", [r["tokens_per_s"] for r in rows], "{:.0f}"),
              ("peak GiB", [r.get("peak_memory_gib", 0.0) for r in rows], "{:.1f}"))
    for p, (title, vals, fmt) in enumerate(panels):
        x0 = 20 + p * w // 2
        draw.text((x0, top - 20), title, fill="black")
        peak = max(vals) or 1.0
        for i, (r, v) in enumerate(zip(rows, vals)):
            bx = x0 + 20 + i * 130
            by = base - int((base - top - 20) * v / peak)
            draw.rectangle([bx, by, bx + 90, base], fill=colors.get(r["impl"], (255, 127, 14)))
            draw.text((bx, by - 14), fmt.format(v), fill="black")
            draw.text((bx, base + 8), r["impl"], fill="black")
    img.save(path)
    return True


def plot(report: dict, path: str) -> bool:
    rows = [r for r in report["results"].values() if r.get("ok")]
    if not rows:
        return False
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _plot_with_pillow(report, rows, path)
    names = [r["impl"] for r in rows]
    colors = {"flashmask": "tab:green", "sdpa_dense": "tab:gray", "fa4_varlen": "tab:blue"}
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 3.8))
    tps = [r["tokens_per_s"] / 1e3 for r in rows]
    ax_t.bar(names, tps, color=[colors.get(n, "tab:orange") for n in names])
    for i, v in enumerate(tps):
        ax_t.text(i, v, f"{v:.1f}k", ha="center", va="bottom", fontsize=8)
    ax_t.set_ylabel("tokens/s (thousands, median step)")
    sp = report["comparison"]["speedups"]
    ax_t.set_title("  ".join(f"{k.replace('flashmask_vs_', 'vs ')}: {v['speedup']:.2f}x" for k, v in sp.items()
                             if k.startswith("flashmask")) or "training step throughput", fontsize=9)
    mem = [r.get("peak_memory_gib", 0.0) for r in rows]
    ax_m.bar(names, mem, color=[colors.get(n, "tab:orange") for n in names])
    ax_m.set_ylabel("peak allocated GiB")
    ax_m.set_title("peak memory (torch allocator)", fontsize=9)
    meta = report["meta"]
    n = meta["model"]["parameters"]
    size = f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M"
    fig.suptitle(f"{meta['device']} | {size} Llama, {meta['dtype']}, "
                 f"{meta['batch']}x{meta['seqlen']} packed SFT | {meta['date']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def print_table(report: dict) -> None:
    print(f"\n{'impl':<12} {'ok':<3} {'step_ms':>9} {'fwd/bwd/opt ms':>18} {'tok/s':>10} {'TFLOP/s':>8} "
          f"{'peakGiB':>8} {'loss0':>10} {'d_loss0':>9}")
    checks = report["comparison"]["loss_check"]
    for name, r in report["results"].items():
        if not r.get("ok"):
            print(f"{name:<12} NO  {r.get('error', '')[:100]}")
            continue
        c = checks.get(name, {})
        ph = "/".join(f"{1e3 * v:.0f}" for v in r.get("median_phase_s", {}).values())
        print(f"{name:<12} yes {1e3 * r['median_step_s']:9.1f} {ph:>18} {r['tokens_per_s']:10.0f} "
              f"{r['model_tflops']:8.1f} {r.get('peak_memory_gib', float('nan')):8.2f} "
              f"{r['first_step']['loss']:10.5f} {c.get('abs_diff', float('nan')):9.2e}")
    comp = report["comparison"]
    ctl = comp.get("control_wrong_mask", {})
    verdict = "PASS" if comp["loss_check_pass"] else ("FAIL" if len(checks) >= 2 else "not done (one implementation)")
    print(f"loss check vs {comp['reference']}: {verdict} "
          f"(rtol {comp['loss_rtol']}; a wrong mask (plain causal) moves the loss by "
          f"{ctl.get('abs_diff', float('nan')):.2e}, a document's loss by up to "
          f"{ctl.get('per_document_max_abs_diff', float('nan')):.2e}; implementations by up to "
          f"{max([c['per_document_max_abs_diff'] for c in checks.values()] or [float('nan')]):.2e})")
    for k, v in comp["speedups"].items():
        tgt = f" (target >= {v['target']}x: {'met' if v['meets_target'] else 'NOT met'})" if "target" in v else ""
        print(f"{k}: {v['speedup']:.2f}x{tgt}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.plot_from:
        with open(args.plot_from) as fh:
            report = json.load(fh)
        png = os.path.splitext(args.plot_from)[0] + ".png"
        return 0 if plot(report, png) else 1
    if args.child_out:  # child of run_impl_isolated: one implementation, result to a file
        rec = run_impl_safely(args.impls[0], args)
        with open(args.child_out, "w") as fh:
            json.dump(rec, fh)
        return 0
    cfg = model_config(args)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "e2e_step" + (f"-{args.tag}" if args.tag else ""))
    meta = metadata(args, cfg)
    meta["data"] = make_batch(args.batch, args.seqlen, args.doc_min, args.doc_max, cfg.vocab_size,
                              args.seed).stats()
    print(json.dumps({k: meta[k] for k in ("device", "versions", "model", "data")}), flush=True)
    report = {"meta": meta, "results": {}, "comparison": {}}
    for impl in args.impls:
        try:
            rec = run_impl_safely(impl, args) if args.in_process else run_impl_isolated(impl, args)
        except KeyboardInterrupt:  # `timeout -s INT`: keep what was measured, write the report
            rec = {"impl": impl, "ok": False, "error": "interrupted (SIGINT: outer time limit?)"}
        report["results"][impl] = rec
        report["comparison"] = compare(report["results"], args)
        print(json.dumps({k: v for k, v in rec.items() if k not in ("first_step", "step_times_s")}), flush=True)
        with open(stem + ".json", "w") as fh:  # partial results survive a time limit
            json.dump(report, fh, indent=1)
        if rec.get("error", "").startswith("interrupted"):
            break
    plot(report, stem + ".png")
    print_table(report)
    print(f"wrote {stem}.json")
    all_ok = all(r.get("ok") for r in report["results"].values())
    compared = report["comparison"]["loss_check_pass"] or len(args.impls) < 2
    return 0 if all_ok and compared else 1


if __name__ == "__main__":
    sys.exit(main())
