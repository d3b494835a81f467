"""The benchmark's mask zoo: one layout per mask, expressed two ways.

* ``startend_row_indices`` for paddle_flashmask, built with our public builders;
* a ``(b, q, k) -> bool`` predicate on torch index tensors for the peers (FlexAttention, FA4 mask_mod),
  plus the native forms FA4 understands (causal, window, varlen document lengths).

`check_same_mask` proves the two agree element by element before anything is timed. The layouts
(random document lengths 512..4096, DPO-style shared-question rows, window 1024, 64 global tokens,
prefix S/4) follow the peers' measurement in ../shared/bench/anchors.py so numbers are comparable.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from paddle_flashmask import mask_builders as mb
from paddle_flashmask import semantics

WINDOW = 1024        # sliding window: row i sees keys i - WINDOW + 1 .. i
GLOBAL_TOKENS = 64


@dataclass
class ZooMask:
    name: str
    causal: bool
    indices: Optional[np.ndarray]            # int32 [B, 1, S, C]; None = plain full / causal
    predicate: Callable                       # (b, q, k) torch tensors -> bool tensor
    doc_lens: Optional[list] = None           # per batch row, for FA4 varlen
    window: Optional[int] = None
    extras: dict = field(default_factory=dict)


def _doc_lens(rng: np.random.Generator, seqlen: int, lo: int = 512, hi: int = 4096) -> list[int]:
    lens, total = [], 0
    while total < seqlen:
        n = min(int(rng.integers(lo, hi + 1)), seqlen - total)
        lens.append(n)
        total += n
    return lens


def _shared_question_samples(rng: np.random.Generator, seqlen: int) -> list[list[int]]:
    samples, total = [], 0
    while total < seqlen:
        parts = [int(rng.integers(256, 2049))] + [int(rng.integers(128, 1025))
                                                  for _ in range(int(rng.integers(2, 5)))]
        sample = []
        for n in parts:
            n = min(n, seqlen - total)
            if n <= 0:
                break
            sample.append(n)
            total += n
        samples.append(sample)
    return samples


# masks built only when asked for by name (``make_zoo(extra=...)``): not in the default tables
OPT_IN = ("sft_documents",)


def opt_in_names(names) -> tuple:
    """The opt-in masks among the mask ``names`` a script was asked for (its ``make_zoo`` extra)."""
    return tuple(name for name in names if name in OPT_IN)


def make_zoo(batch: int, seqlen: int, device: str = "cuda", seed: int = 1234,
             extra: tuple = ()) -> dict[str, ZooMask]:
    """The benchmark's masks, in table order; ``extra`` adds opt-in masks of :data:`OPT_IN`."""
    import torch

    unknown = [name for name in extra if name not in OPT_IN]
    if unknown:
        raise ValueError(f"extra: expected names from {OPT_IN}, found {unknown}")

    rng = np.random.default_rng(seed)
    S = seqlen
    doc_lens = [_doc_lens(rng, S) for _ in range(batch)]
    sq_samples = [_shared_question_samples(rng, S) for _ in range(batch)]

    def ids(rows: list[list[int]]) -> "torch.Tensor":
        out = np.stack([np.repeat(np.arange(len(r)), r) for r in rows]).astype(np.int32)
        return torch.from_numpy(out).to(device)

    doc = ids(doc_lens)
    sq_doc = ids([[sum(s) for s in row] for row in sq_samples])
    # answer id inside each sample: 0 = prompt, 1.. = answers
    sq_ans = torch.from_numpy(np.stack([
        np.concatenate([np.repeat(np.arange(len(s)), s) for s in row]) for row in sq_samples
    ]).astype(np.int32)).to(device)
    prefix = S // 4
    W, G = WINDOW, GLOBAL_TOKENS

    def from_builder(name, build, predicate, **kw):
        """Our indices and their causal flag come from the builder, the predicate from the peers."""
        mask = mb.stack([build(b) for b in range(batch)])
        return ZooMask(name, mask.causal, mask.startend_row_indices, predicate, **kw)

    zoo = [
        ZooMask("full", False, None, lambda b, q, k: (q >= 0) & (k >= 0)),
        ZooMask("causal", True, None, lambda b, q, k: q >= k),
        from_builder("sliding_window", lambda b: mb.sliding_window_mask(S, W - 1),
                lambda b, q, k: (q >= k) & (q - k < W), window=W),
        from_builder("causal_document", lambda b: mb.causal_document_mask(doc_lens[b], S),
                lambda b, q, k: (doc[b, q] == doc[b, k]) & (q >= k), doc_lens=doc_lens,
                extras={"doc": doc}),
        from_builder("document", lambda b: mb.document_mask(doc_lens[b], S),
                lambda b, q, k: doc[b, q] == doc[b, k], doc_lens=doc_lens, extras={"doc": doc}),
        from_builder("shared_question", lambda b: mb.shared_question_mask(sq_samples[b], S),
                lambda b, q, k: (sq_doc[b, q] == sq_doc[b, k]) & (q >= k)
                & ((sq_ans[b, k] == 0) | (sq_ans[b, k] == sq_ans[b, q])),
                extras={"sq_doc": sq_doc, "sq_ans": sq_ans}),
        from_builder("prefix_lm_causal", lambda b: mb.prefix_lm_causal_mask(S, prefix),
                lambda b, q, k: (k < prefix) | (q >= k), extras={"prefix": prefix}),
        from_builder("global_sliding_window", lambda b: mb.global_sliding_window_mask(S, G, W - 1),
                lambda b, q, k: (q >= k) & ((q - k < W) | (k < G)), window=W, extras={"global": G}),
    ]
    if "sft_documents" in extra:
        zoo.append(sft_documents(batch, seqlen, device))
    return {m.name: m for m in zoo}


def sft_documents(batch: int, seqlen: int, device: str = "cuda") -> ZooMask:
    """The end-to-end step's packed SFT rows (``bench/e2e_step.py``: its two-lognormal document
    lengths, 100-4000 tokens, medians 350 and 1,500, seed 0) as causal documents. The row's
    padding tail is one more causal segment, as e2e_step gives it to SDPA and FA4 varlen (its
    FlashMask rows leave padding fully masked instead, ~0.8 % of the tokens), so every system
    here computes the same mask."""
    import torch
    from e2e_step import make_batch

    packed = make_batch(batch, seqlen, 100, 4000, 32000, 0)
    segments = [list(row) for row in packed.segments]
    seg = torch.from_numpy(packed.segment_ids.astype(np.int32)).to(device)
    mask = mb.stack([mb.causal_document_mask(row, seqlen) for row in segments])
    return ZooMask("sft_documents", mask.causal, mask.startend_row_indices,
                   lambda b, q, k: (seg[b, q] == seg[b, k]) & (q >= k), doc_lens=segments,
                   extras={"doc": seg})


def visible_pairs(mask: ZooMask, batch: int, seqlen: int) -> int:
    """Unmasked (q, k) pairs summed over the batch for one head (semantics' exact counter)."""
    if mask.indices is None:
        return batch * semantics.dense_pair_count(mask.causal, seqlen, seqlen)
    return int(semantics.count_visible_pairs(mask.indices, mask.causal, seqlen).sum())


def dense_allowed(mask: ZooMask, batch: int, seqlen: int, device: str = "cuda"):
    """bool [B, 1, S, S] from the peers' predicate (True = may attend)."""
    import torch

    q = torch.arange(seqlen, device=device)[:, None]
    k = torch.arange(seqlen, device=device)[None, :]
    return torch.stack([mask.predicate(torch.full_like(q, b), q, k).expand(seqlen, seqlen)
                        for b in range(batch)])[:, None]


def check_same_mask(mask: ZooMask, allowed, seqlen: int) -> None:
    """Our indices, through the semantics element rule on the GPU, must equal the peers' mask."""
    import torch

    if mask.indices is None:
        return
    idx = torch.from_numpy(mask.indices).to(allowed.device)
    bands = semantics.band_bounds([idx[:, :, None, :, c] for c in range(idx.shape[3])], mask.causal)
    rows = torch.arange(seqlen, device=allowed.device)[:, None]
    cols = torch.arange(seqlen, device=allowed.device)[None, :]
    ours = ~semantics.element_masked(rows, cols, bands, mask.causal, 0)
    if not torch.equal(ours, allowed):
        bad = int((ours != allowed).sum())
        raise AssertionError(f"mask {mask.name}: our indices differ from the peers' predicate at {bad} elements")
