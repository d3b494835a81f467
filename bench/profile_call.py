"""Where the time of one paddle_flashmask call goes, on the GPU (a diagnostic, not the benchmark).

For each mask of the zoo (B=4, S=8K, H=16, D=128 by default) it prints, forward and fwd+bwd:
  * ``frontend``: median of ``triton.testing.do_bench`` through ``paddle_flashmask.torch``;
  * ``direct``: the same through ``ops.cute.interface`` with preallocated outputs (no frontend);
  * ``kernels``: the summed device time of the CUDA kernels of one call (``torch.profiler``);
  * ``host_us``: host time per call with the queue kept full (no synchronisation);
and, with ``--cprofile``, the top host functions (own and total time) of the direct forward,
the direct backward and the frontend forward+backward.

    python3 bench/profile_call.py [--masks causal_document,sliding_window] [--cprofile]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time

import torch
import triton.testing as tt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from call_buffers import call_buffers  # noqa: E402
from mask_zoo import make_zoo, opt_in_names  # noqa: E402


def kernel_times_us(fn) -> dict:
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = {}
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if t:
            out[ev.key[:60]] = round(float(t), 1)
    return out


def kernel_timeline(fn, calls: int = 5) -> dict:
    """GPU timeline of ``calls`` back-to-back calls (no synchronisation between them): per call the
    span from the first kernel's start to the last one's end, the summed kernel time and the idle
    rest, plus the three longest idle gaps with the kernels around them."""
    from gpu_trace import kernel_ops, summarize
    return summarize(kernel_ops(fn, calls), calls)


def host_us(fn, n: int = 50) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seqlen", type=int, default=8192)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=None, help="GQA: K/V heads (default --heads)")
    p.add_argument("--masks", default="full,causal,sliding_window,causal_document,shared_question",
                   help="zoo masks (bench/mask_zoo.py), opt-in ones such as sft_documents included")
    p.add_argument("--cprofile", action="store_true")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()

    import paddle_flashmask.torch as pfm
    from paddle_flashmask.ops.cute import interface

    B, S, H, D = args.batch, args.seqlen, args.heads, 128
    Hk = args.kv_heads or H
    buf = call_buffers(B, S, H, Hk, D)
    q, k, v, do, out, lse = buf.q, buf.k, buf.v, buf.do, buf.out, buf.lse
    grads, stream, scale = buf.grads, buf.stream, buf.scale
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    zoo = make_zoo(B, S, extra=opt_in_names(args.masks.split(",")))
    report = {}
    for name in args.masks.split(","):
        mask = zoo[name]
        idx = None if mask.indices is None else torch.from_numpy(mask.indices).cuda()

        def front():
            return pfm.flashmask_attention(*leaves, startend_row_indices=idx, causal=mask.causal,
                                           backend="cute")

        def front_fb():
            for t in leaves:
                t.grad = None
            front().backward(do)

        def direct():
            interface.flashmask_fwd(q, k, v, out, lse, idx, causal=mask.causal, softmax_scale=scale,
                                    stream=stream)

        def direct_bwd():
            interface.flashmask_bwd(q, k, v, out, do, lse, *grads, idx, causal=mask.causal,
                                    softmax_scale=scale, stream=stream)

        def direct_fb():
            direct()
            direct_bwd()

        front_fb()
        direct_fb()
        torch.cuda.synchronize()
        rec = {
            "fwd_ms": {"frontend": tt.do_bench(front, return_mode="median"),
                       "direct": tt.do_bench(direct, return_mode="median")},
            "fwdbwd_ms": {"frontend": tt.do_bench(front_fb, return_mode="median"),
                          "direct": tt.do_bench(direct_fb, return_mode="median")},
            "host_us": {"frontend_fwd": host_us(front), "direct_fwd": host_us(direct),
                        "direct_bwd": host_us(direct_bwd), "frontend_fwdbwd": host_us(front_fb, 20)},
            "kernels_fwd_us": kernel_times_us(direct),
            "kernels_bwd_us": kernel_times_us(direct_bwd),
        }
        report[name] = rec
        print(name, json.dumps(rec), flush=True)
        if args.cprofile:  # the host functions of each entry point: own time first, then total
            for label, fn, calls in (("direct_fwd", direct, 200), ("direct_bwd", direct_bwd, 100),
                                     ("frontend_fwdbwd", front_fb, 50)):
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(calls):
                    fn()
                prof.disable()
                torch.cuda.synchronize()
                for order in ("tottime", "cumulative"):
                    s = io.StringIO()
                    pstats.Stats(prof, stream=s).sort_stats(order).print_stats(28)
                    print(f"--- cProfile {name} {label} x{calls} by {order}", flush=True)
                    print(s.getvalue()[-7000:], flush=True)
    with open(os.path.join(args.out, "profile_call.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
