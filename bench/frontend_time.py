"""Frontend time of one call on the GPU: medians of ``triton.testing.do_bench`` of the PyTorch
frontend's forward and forward+backward, and the host time per call with the queue kept full
(a diagnostic for A/Bs of the host path; bench/profile_call.py has the full breakdown).

    python3 bench/frontend_time.py [--masks sft_documents] [--rounds 3]

Prints one JSON line per mask and round, tagged with the ``paddle_flashmask`` package path, so
two source trees can be compared in one process order (``PYTHONPATH=<tree> python3 ...``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import triton.testing as tt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from mask_zoo import make_zoo, opt_in_names  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=8192)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--masks", default="sft_documents")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    import paddle_flashmask
    import paddle_flashmask.torch as pfm

    b, s, h, hk, d = args.batch, args.seqlen, args.heads, args.kv_heads, 128
    torch.manual_seed(0)
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    zoo = make_zoo(b, s, extra=opt_in_names(args.masks.split(",")))
    for name in args.masks.split(","):
        mask = zoo[name]
        idx = None if mask.indices is None else torch.from_numpy(mask.indices).cuda()

        def fwd():
            return pfm.flashmask_attention(q, k, v, startend_row_indices=idx, causal=mask.causal)

        def fwd_bwd():
            for t in (q, k, v):
                t.grad = None
            fwd().backward(do)

        fwd_bwd()
        torch.cuda.synchronize()
        for r in range(args.rounds):
            rec = {"mask": name, "round": r, "package": os.path.dirname(paddle_flashmask.__file__),
                   "fwd_ms": tt.do_bench(fwd, return_mode="median"),
                   "fwdbwd_ms": tt.do_bench(fwd_bwd, return_mode="median")}
            for label, fn, n in (("host_fwd_us", fwd, 50), ("host_fwdbwd_us", fwd_bwd, 20)):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                rec[label] = (time.perf_counter() - t0) / n * 1e6
                torch.cuda.synchronize()
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
