"""One forward and one backward of paddle_flashmask's kernels for a mask of the zoo, as a target
for Nsight Compute (a diagnostic, not the benchmark):

    ncu --clock-control none -k regex:flash_fwd_sm90 --launch-skip 1 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats python3 bench/ncu_target.py --mask full

Each kernel runs twice (the first launch is the warm-up that ``--launch-skip 1`` passes over).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from mask_zoo import make_zoo, opt_in_names  # noqa: E402


def zoo_mask(args):
    """The zoo mask ``--mask`` at the run's batch and length (opt-in masks such as
    ``sft_documents`` included)."""
    return make_zoo(args.batch, args.seqlen,
                    extra=opt_in_names([args.mask]))[args.mask]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mask", default="full")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seqlen", type=int, default=8192)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=None, help="GQA: K/V heads (default --heads)")
    p.add_argument("--head-dim", type=int, default=128, choices=[64, 128, 256])
    p.add_argument("--deterministic", action="store_true", help="the deterministic backward")
    p.add_argument("--system", default="paddle_flashmask", choices=["paddle_flashmask", "fa4"],
                   help="fa4: FlashAttention-4's kernels (native full / causal, varlen for the "
                        "document masks), to compare stall reasons with ours (ncu -k "
                        "regex:Backward for its backward)")
    args = p.parse_args()
    if args.system == "fa4":
        run_fa4(args)
        return
    from paddle_flashmask.ops.cute import interface

    B, S, H, D = args.batch, args.seqlen, args.heads, args.head_dim
    Hk = args.kv_heads or H
    q, do = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(B, S, Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(q)
    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    grads = [torch.empty_like(t) for t in (q, k, v)]
    mask = zoo_mask(args)
    idx = None if mask.indices is None else torch.from_numpy(mask.indices).cuda()
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(2):
        interface.flashmask_fwd(q, k, v, out, lse, idx, causal=mask.causal,
                                softmax_scale=D ** -0.5, stream=stream)
        interface.flashmask_bwd(q, k, v, out, do, lse, *grads, idx, causal=mask.causal,
                                softmax_scale=D ** -0.5, stream=stream,
                                deterministic=args.deterministic)
    torch.cuda.synchronize()
    print("done", args.mask)


def run_fa4(args) -> None:
    """FA4's forward and backward twice on the same shape: native full / causal, or varlen (as
    the benchmark runs it) for the zoo's document masks (``ncu -k regex:Forward`` / ``Backward``)."""
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

    B, S, H, D = args.batch, args.seqlen, args.heads, args.head_dim
    Hk = args.kv_heads or H
    mask = zoo_mask(args)
    if args.mask not in ("full", "causal") and mask.doc_lens is None:
        raise SystemExit(f"--mask: expected full, causal or a document mask with --system fa4, "
                         f"found {args.mask!r}")
    q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, S, Hk, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    do = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
    deterministic = {"deterministic": True} if args.deterministic else {}
    if mask.doc_lens is not None:  # every row's documents as one packed varlen batch
        lens = [n for row in mask.doc_lens for n in row]
        cu = torch.tensor([0] + lens, device="cuda").cumsum(0).to(torch.int32)
        flat = [t.reshape(B * S, t.shape[2], D) for t in (q, k, v)]

        def attention():
            return flash_attn_varlen_func(*flat, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                          max_seqlen_q=max(lens), max_seqlen_k=max(lens),
                                          causal=mask.causal, **deterministic)
        do = do.reshape(B * S, H, D)
    else:
        def attention():
            return flash_attn_func(q, k, v, causal=args.mask == "causal", **deterministic)
    for _ in range(2):
        out = attention()
        out = out[0] if isinstance(out, tuple) else out
        torch.autograd.backward(out, do)
    torch.cuda.synchronize()
    print("done fa4", args.mask)


if __name__ == "__main__":
    main()
