"""Context-parallel scaling: FlashMask fwd+bwd on N GPUs (torch + NCCL) vs one GPU.

    NCCL_NVLS_ENABLE=0 torchrun --nproc_per_node 2 bench/cp_scaling.py            # 64K causal-document
    torchrun --nproc_per_node 2 bench/cp_scaling.py --smoke                      # CPU, gloo, reference

Every rank builds the same global problem (same seed), runs the single-device attention on its own
device (the 1-GPU baseline, all ranks at once), then the context-parallel attention on its shard.
A CP iteration's time is the slowest rank's; times are medians over ``--iters`` after ``--warmup``
(the first call, which JIT-compiles the kernels, is timed separately), each call synchronised
(latency); ``--pipeline N`` (default 8) also times N fwd+bwd steps back to back per
synchronisation (throughput, ``fwd_bwd_pipelined``: a training loop's host queues the next step
while the device runs this one, so host time between launches is hidden). TFLOP/s count visible pairs
only (fwd = 4·D·H·pairs, fwd+bwd = 3.5x fwd, DESIGN §7). Rank 0 writes JSON to ``$OUT`` (or
``--out``): plan balance, times, speed-up, throughput and the CP-vs-single-device error.
``--profile``: after all timed runs, one more fwd+bwd of the best configuration under
``torch.profiler`` on every rank (JSON ``profile``: device time per kernel name, busy time, wall span,
the longest gaps in the compute kernels; on GPU the profiled step is the second of two under the
profiler, both ranks released by a barrier just before it, with each gap's host launch lag and a
per-stream kernel timeline). ``--fuse-kv 0,1``: each value one more CP variant, K and V in two
collectives (0, the default) or one (1, ``comm_fuse_kv``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from typing import Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import paddle_flashmask  # noqa: E402
import paddle_flashmask.torch as pft  # noqa: E402
from paddle_flashmask import mask_builders as mb  # noqa: E402
from paddle_flashmask import semantics as sem  # noqa: E402
from paddle_flashmask.distributed import balance_report, chunk_work, torch_cp  # noqa: E402
from paddle_flashmask.ops import backend as backends  # noqa: E402
from paddle_flashmask.ops.cute.cache import source_fingerprint  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqlen", type=int, default=65536)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--doc-min", type=int, default=2048, help="document lengths ~ U[doc-min, doc-max]")
    p.add_argument("--doc-max", type=int, default=16384)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk-size", type=int, default=2048)
    p.add_argument("--comm-groups", default="1,2",
                   help="comma list: all-gathers K/V is split into (each value is one timed variant)")
    p.add_argument("--strategies", default="locality,lpt",
                   help="planner strategies to compare (plan_context_parallel strategy=)")
    p.add_argument("--work-models", default="pairs",
                   help="planner work models to compare: pairs (exact visible pairs), tiles (computed tiles)")
    p.add_argument("--remote-penalties", default="0",
                   help="comma list of planner remote_penalty values (extra weight of remote pairs)")
    p.add_argument("--balance-tolerances", default="0.02",
                   help="load slack the locality planner may spend for less communication")
    p.add_argument("--chunk-sizes", default=None,
                   help="chunk sizes to compare (default: --chunk-size)")
    p.add_argument("--equal-chunks", default="1,0",
                   help="equal chunk counts per rank to compare (1 = on, 0 = off)")
    p.add_argument("--comm-sms", default="0",
                   help="comma list: SMs the forward leaves to NCCL while a gather is in flight, "
                        "or 'retire' (those phases run one CTA per work tile instead of the "
                        "persistent grid); each value is one more CP variant, e.g. 0,16,retire")
    p.add_argument("--fuse-kv", default="0",
                   help="comma list of 0/1: K and V (dK and dV) in two collectives per comm group "
                        "(0) or one (1, context_parallel_attention(comm_fuse_kv=True)); each value "
                        "is one more CP variant, e.g. 0,1")
    p.add_argument("--nccl-high-priority", action="store_true",
                   help="NCCL's streams at high priority (ProcessGroupNCCL option): with "
                        "'retire', its kernels get the SMs the first CTAs free")
    p.add_argument("--backend", default=None, help="auto | cute | reference (default: auto)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--pipeline", type=int, default=8,
                   help="also time fwd+bwd as N steps back to back per synchronisation (steady-state "
                        "throughput, as in a training loop); 0: only per-step latency")
    p.add_argument("--out", default=None, help="JSON path (default $OUT/cp_scaling.json)")
    p.add_argument("--profile", action="store_true",
                   help="after the timed runs, profile one fwd+bwd of the best configuration on every "
                        "rank (torch.profiler, CUDA activity; CPU ops under --smoke)")
    p.add_argument("--profile-steps", type=int, default=1,
                   help="with --profile: fwd+bwd steps profiled back to back, without synchronising "
                        "between them (as --pipeline times them): the gaps then show what the device "
                        "waits for once the host runs ahead")
    p.add_argument("--smoke", action="store_true",
                   help="tiny CPU run: S=512, H=2, D=32, fp32, reference backend, gloo")
    args = p.parse_args(argv)
    if args.smoke:
        args.seqlen, args.heads, args.kv_heads, args.head_dim = 512, 2, 2, 32
        args.dtype, args.doc_min, args.doc_max, args.chunk_size = "float32", 32, 200, 32
        args.backend, args.iters, args.warmup = args.backend or "reference", 2, 1
        args.pipeline = min(args.pipeline, 2)
    return args


def document_lengths(seqlen: int, lo: int, hi: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    lens: list[int] = []
    while sum(lens) < seqlen:
        lens.append(int(rng.integers(lo, hi + 1)))
    lens[-1] -= sum(lens) - seqlen
    return [n for n in lens if n > 0]


class Clock:
    """Wall time of a callable; CUDA-synchronised on GPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def __call__(self, fn) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0


def _max_over_ranks(values: list, cuda: bool) -> list:
    t = torch.tensor(values, dtype=torch.float64)
    t = t.cuda() if cuda else t
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.cpu().tolist()


def timed(fn, clock: Clock, iters: int, warmup: int, collective: bool, pipeline: int = 0) -> dict:
    """First-call time and median steady time; with ``collective``, per-iteration max over ranks.

    ``median_s`` is a step's latency: the device is synchronised before and after every call, so
    the host's work of the step (launches, autograd) is on the clock. With ``pipeline`` = N > 0
    also ``pipelined_median_s``: N calls back to back with one synchronisation after the last,
    divided by N (median of ``iters`` such runs) -- the steady-state time per step of a training
    loop, whose host queues the next step while the device runs this one."""
    first = clock(fn)
    for _ in range(warmup):
        clock(fn)
    times = []
    for _ in range(iters):
        if collective:
            dist.barrier()
        times.append(clock(fn))
    runs = []

    def back_to_back():
        for _ in range(pipeline):
            fn()  # results dropped at once: memory as in a training loop

    for _ in range(iters if pipeline > 0 else 0):
        if collective:
            dist.barrier()
        runs.append(clock(back_to_back) / pipeline)
    if collective:
        times = _max_over_ranks(times, clock.cuda)
        first = _max_over_ranks([first], clock.cuda)[0]
        runs = _max_over_ranks(runs, clock.cuda) if runs else runs
    out = {"first_s": first, "median_s": statistics.median(times), "times_s": times}
    if runs:
        out.update(pipelined_steps=pipeline, pipelined_median_s=statistics.median(runs),
                   pipelined_times_s=runs)
    return out


def speedups(single_f: dict, single_fb: dict, cp_f: dict, cp_fb: dict) -> dict:
    """One GPU's time over the CP time: per-step latency (``fwd``, ``fwd_bwd``) and, when timed,
    steady-state throughput of back-to-back steps (``fwd_bwd_pipelined``)."""
    out = {"fwd": single_f["median_s"] / cp_f["median_s"],
           "fwd_bwd": single_fb["median_s"] / cp_fb["median_s"]}
    if "pipelined_median_s" in single_fb and "pipelined_median_s" in cp_fb:
        out["fwd_bwd_pipelined"] = single_fb["pipelined_median_s"] / cp_fb["pipelined_median_s"]
    return out


def _busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start_us, end_us)`` intervals, in seconds."""
    busy, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return busy * 1e-6


def _kineto_kernels(prof, after_ns: int) -> Optional[list]:
    """The CUDA activities (kernels, memcpy, memset) that start after ``after_ns`` (kineto's
    clock), each with its stream and the start of the host call that launched it (the CUDA
    runtime/driver event of the same correlation id; None when the profiler did not record it).
    None when the kineto results are not readable."""
    from torch.autograd import DeviceType
    try:
        events = list(prof.profiler.kineto_results.events())
    except Exception:  # noqa: BLE001 - a torch without these bindings
        return None
    launches, device = {}, []
    for e in events:
        if e.device_type() == DeviceType.CUDA:
            device.append(e)
        elif e.name().startswith(("cuda", "cu")):
            launches.setdefault(e.correlation_id(), e.start_ns())
    rows = []
    for e in device:
        if e.start_ns() < after_ns or e.is_user_annotation():
            continue
        launch = launches.get(e.correlation_id(), launches.get(e.linked_correlation_id()))
        rows.append({"name": e.name(), "stream": e.device_resource_id(), "start_ns": e.start_ns(),
                     "end_ns": e.start_ns() + e.duration_ns(), "launch_ns": launch})
    return sorted(rows, key=lambda r: r["start_ns"])


def _barrier_end_ns(prof) -> int:
    """End of the last NCCL all-reduce kernel (the barrier before the profiled step), else 0."""
    from torch.autograd import DeviceType
    try:
        ends = [e.start_ns() + e.duration_ns() for e in prof.profiler.kineto_results.events()
                if e.device_type() == DeviceType.CUDA and "allreduce" in e.name().lower()]
    except Exception:  # noqa: BLE001
        return 0
    return max(ends, default=0)


def _timeline(rows: list, name_len: int) -> dict:
    """Gaps of the compute stream(s) with the host launch lag of the kernel after each gap
    (launch - end of the kernel before: > 0, the host had not issued it yet; <= 0, it was queued
    and held back by a stream dependency, e.g. an event wait on a collective), and the step's
    activities in start order (times in us from the first one)."""
    t0 = rows[0]["start_ns"] if rows else 0
    compute = [r for r in rows if "nccl" not in r["name"].lower()]
    gaps, reach, last = [], None, None
    for r in compute:
        if reach is not None and r["start_ns"] > reach:
            lag = None if r["launch_ns"] is None else round((r["launch_ns"] - reach) / 1e3, 1)
            gaps.append({"us": round((r["start_ns"] - reach) / 1e3, 1), "at_us": round((reach - t0) / 1e3, 1),
                         "after": last[:name_len], "before": r["name"][:name_len],
                         "launch_lag_us": lag})
        if reach is None or r["end_ns"] > reach:
            reach, last = r["end_ns"], r["name"]
    gaps.sort(key=lambda g: -g["us"])
    return {"t0_ns": t0, "gaps": gaps[:12],
            "events": [{"name": r["name"][:name_len], "stream": r["stream"],
                        "start_us": round((r["start_ns"] - t0) / 1e3, 1),
                        "us": round((r["end_ns"] - r["start_ns"]) / 1e3, 1),
                        "launch_us": None if r["launch_ns"] is None
                        else round((r["launch_ns"] - t0) / 1e3, 1)} for r in rows]}


def profile_step(fn, use_cuda: bool, top: int = 20, name_len: int = 60, barrier=None) -> dict:
    """One call of ``fn`` under ``torch.profiler``: device time summed per kernel name (the ``top``
    largest, names cut to ``name_len`` chars), device-busy time (union of the kernels' intervals:
    NCCL runs beside compute), and the call's wall span (CUDA events around it on the current
    stream). On GPU, ``fn`` runs twice under the profiler and only the second call is reported:
    the profiler's start-up (which differs between ranks) stays in the first, and ``barrier``
    (when given) releases the ranks together just before the second, as in the timed runs. On
    CPU (smoke runs) the leaf CPU ops of one call stand in for kernels."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if use_cuda else [ProfilerActivity.CPU]
    if use_cuda:
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=activities) as prof:
        if use_cuda:
            fn()  # under the profiler but not reported
            torch.cuda.synchronize()
            if barrier is not None:
                barrier()
        t0 = time.perf_counter()
        if use_cuda:
            begin.record()
        fn()
        if use_cuda:
            end.record()
            torch.cuda.synchronize()
        wall = begin.elapsed_time(end) * 1e-3 if use_cuda else time.perf_counter() - t0
    kind = DeviceType.CUDA if use_cuda else DeviceType.CPU
    rows = None
    if use_cuda:
        rows = _kineto_kernels(prof, _barrier_end_ns(prof) if barrier is not None else 0)
        if rows is not None and barrier is None:  # no marker: keep the second call's half
            rows = rows[len(rows) // 2:]
    if rows is not None:  # GPU: the profiled call's activities, from kineto
        events = [(r["start_ns"] / 1e3, r["end_ns"] / 1e3, r["name"]) for r in rows]
    else:
        events = [(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                  if e.device_type == kind and not getattr(e, "is_user_annotation", False)
                  and (use_cuda or not e.cpu_children)]
    per_name: dict[str, list] = {}
    for start, stop, name in events:
        entry = per_name.setdefault(name, [0.0, 0])
        entry[0] += (stop - start) * 1e-6
        entry[1] += 1
    ranked = sorted(per_name.items(), key=lambda kv: -kv[1][0])
    # where the compute (everything but the collectives) leaves the GPU idle, longest first
    compute = sorted(e for e in events if "nccl" not in e[2].lower())
    gaps, reach, last = [], None, None
    for start, stop, name in compute:
        if reach is not None and start > reach:
            gaps.append((start - reach, last, name))
        if reach is None or stop > reach:
            reach, last = stop, name
    gaps.sort(key=lambda g: -g[0])
    result = {"activities": [str(a).split(".")[-1].lower() for a in activities],
              "compute_idle_s": sum(g[0] for g in gaps) * 1e-6,
              "compute_idle_gaps": [{"us": round(g, 1), "after": a[:name_len], "before": b[:name_len]}
                                    for g, a, b in gaps[:8]],
              "wall_span_s": wall, "device_events": len(events),
              "device_busy_s": _busy_seconds([(a, b) for a, b, _ in events]),
              "kernel_time_sum_s": sum(t for t, _ in per_name.values()),
              "top_kernels": [{"name": name[:name_len], "time_s": t, "calls": n}
                              for name, (t, n) in ranked[:top]],
              "other_kernels_s": sum(t for _, (t, _) in ranked[top:])}
    if rows is not None:
        result["timeline"] = _timeline(rows, name_len)
    return result


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    fin = torch.isfinite(b)
    return float((a[fin] - b[fin]).abs().max() / b[fin].abs().max().clamp_min(1e-30))


def plot(result: dict, path: str) -> None:
    """Times of one device vs CP (each comm-group variant) and each rank's planned work, as a PNG."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the GPU machine may not have matplotlib; the JSON has everything
        return
    fig, (ax_t, ax_w) = plt.subplots(1, 2, figsize=(10, 3.6))
    labels = ["1 device"] + [f"CP x{result['world_size']} {v.get('strategy', '')}"
                             f"{'' if v.get('equal_chunks', True) else ' uneq'}, {v['comm_groups']} grp"
                             + (f", {v['comm_sms']} SMs to NCCL" if v.get("comm_sms") else "")
                             + (", retiring CTAs" if v.get("comm_retire") else "")
                             + (", K+V fused" if v.get("comm_fuse_kv") else "")
                             for v in result["context_parallel"]]
    runs = [result["single_device"]] + result["context_parallel"]
    for offset, phase in ((-0.2, "fwd"), (0.2, "fwd_bwd")):
        ax_t.bar([i + offset for i in range(len(runs))], [1e3 * r[phase]["median_s"] for r in runs],
                 width=0.4, label=phase)
    ax_t.set_xticks(range(len(runs)), labels, fontsize=7)
    ax_t.set_ylabel("ms (median)")
    piped = result["speedup"].get("fwd_bwd_pipelined")
    piped = "" if piped is None else f" ({piped:.2f}x back to back)"
    ax_t.set_title(f"{result['shape']['seqlen']} tokens, speed-up fwd+bwd "
                   f"{result['speedup']['fwd_bwd']:.2f}x{piped}",
                   fontsize=9)
    ax_t.legend(fontsize=7)
    work = result["plan"]["rank_work"]
    ax_w.bar(range(len(work)), work)
    ax_w.set_xticks(range(len(work)))
    ax_w.set_xlabel("rank")
    ax_w.set_ylabel("visible pairs (one head)")
    ax_w.set_title(f"plan imbalance {100 * result['plan']['imbalance']:.2f}% "
                   f"(contiguous {100 * result['plan'].get('contiguous_imbalance', float('nan')):.1f}%)",
                   fontsize=9)
    fig.suptitle(f"{result['device']}, backend {result['backend']}, {result['date']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off (issue 7)
    use_cuda = torch.cuda.is_available() and not args.smoke
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if use_cuda and args.nccl_high_priority:
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = True
        dist.init_process_group("nccl", pg_options=options)
    else:
        dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    dtype = getattr(torch, args.dtype)
    s, h, hk, d = args.seqlen, args.heads, args.kv_heads, args.head_dim

    docs = document_lengths(s, args.doc_min, args.doc_max, args.seed)
    mask = mb.causal_document_mask(docs, s)
    groups_list = [int(g) for g in str(args.comm_groups).split(",")]
    strategies = [x.strip() for x in str(args.strategies).split(",")]
    equal_list = [bool(int(x)) for x in str(args.equal_chunks).split(",")]

    work_models = [x.strip() for x in str(args.work_models).split(",")]
    tolerances = [float(x) for x in str(args.balance_tolerances).split(",")]
    penalties = [float(x) for x in str(args.remote_penalties).split(",")]
    chunk_sizes = [int(x) for x in str(args.chunk_sizes or args.chunk_size).split(",")]

    def make_plan(strategy, equal, groups, work_model="pairs", chunk_size=None, tolerance=None,
                  penalty=None):
        return torch_cp.prepare(mask.startend_row_indices, mask.causal,
                                chunk_size=chunk_size or chunk_sizes[0], comm_groups=groups,
                                strategy=strategy, equal_chunks=equal, work_model=work_model,
                                balance_tolerance=tolerances[0] if tolerance is None else tolerance,
                                remote_penalty=penalties[0] if penalty is None else penalty)

    pairs = int(sem.count_visible_pairs(*mask).sum()) * h
    fwd_flops = 4 * d * pairs  # pairs already summed over heads

    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    q, k, v, dout = (torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
                     for shape in ((1, s, h, d), (1, s, hk, d), (1, s, hk, d), (1, s, h, d)))
    idx = torch.as_tensor(mask.startend_row_indices, device=device)
    clock = Clock(device)

    def single_fwd():
        return pft.flashmask_attention(q, k, v, idx, causal=True, backend=args.backend,
                                       validate_indices=False)

    leaves = [x.clone().requires_grad_() for x in (q, k, v)]

    def single_fwd_bwd():
        out = pft.flashmask_attention(*leaves, idx, causal=True, backend=args.backend,
                                      validate_indices=False)
        return torch.autograd.grad(out, leaves, dout)

    with torch.no_grad():
        single_f = timed(single_fwd, clock, args.iters, args.warmup, collective=False)
    single_fb = timed(single_fwd_bwd, clock, args.iters, args.warmup, collective=False,
                      pipeline=args.pipeline)
    backend_used = backends.last_backend()

    peak_single = torch.cuda.max_memory_allocated(device) if use_cuda else None

    variants = []
    # each --comm-sms item: (SMs left to NCCL, retire) while a collective is in flight
    sms_list = [(0, True) if x.strip() == "retire" else (int(x), False)
                for x in str(args.comm_sms).split(",")]
    fuse_list = []
    for x in str(args.fuse_kv).split(","):
        if x.strip() not in ("0", "1"):
            raise SystemExit(f"--fuse-kv: expected a comma list of 0/1, found {args.fuse_kv!r}")
        fuse_list.append(x.strip() == "1")
    # planner strategy, equal chunk counts, all-gather granularity and SMs left to NCCL
    for strategy, equal, groups, sms, model, cs, tol, pen, fuse in (
            (st, eq, g, m, wm, c, tl, pn, fk) for st in strategies for eq in equal_list for g in groups_list
            for m in sms_list for wm in work_models for c in chunk_sizes for tl in tolerances
            for pn in penalties for fk in fuse_list):
        t0 = time.perf_counter()
        plan_g, masks_g = make_plan(strategy, equal, groups, model, cs, tol, pen)
        plan_s = time.perf_counter() - t0
        local = [torch_cp.shard_sequence(x, plan_g, rank).requires_grad_() for x in (q, k, v)]
        dout_local = torch_cp.shard_sequence(dout, plan_g, rank)
        dev_masks = torch_cp.device_masks(plan_g, masks_g, device)  # once per step, as a model would

        def cp_fwd():
            return torch_cp.context_parallel_attention(*local, plan_g, dev_masks, backend=args.backend,
                                                       comm_sms=sms[0], comm_retire=sms[1],
                                                       comm_fuse_kv=fuse)

        def cp_fwd_bwd():
            out = torch_cp.context_parallel_attention(*local, plan_g, dev_masks, backend=args.backend,
                                                      comm_sms=sms[0], comm_retire=sms[1],
                                                      comm_fuse_kv=fuse)
            return torch.autograd.grad(out, local, dout_local)

        if use_cuda:
            torch.cuda.reset_peak_memory_stats(device)
        with torch.no_grad():
            cp_f = timed(cp_fwd, clock, args.iters, args.warmup, collective=True)
        cp_fb = timed(cp_fwd_bwd, clock, args.iters, args.warmup, collective=True,
                      pipeline=args.pipeline)
        report = balance_report(plan_g)
        # this rank's compute alone (its local phase, no communication), every rank's time: shows
        # how far the kernels' time follows the planner's work model
        local_idx = torch.as_tensor(masks_g.local, device=device)
        local_leaves = [x.detach().clone().requires_grad_() for x in local]

        def local_fwd_bwd():
            out = pft.flashmask_attention(*local_leaves, local_idx, causal=masks_g.local_causal,
                                          backend=args.backend, validate_indices=False)
            return torch.autograd.grad(out, local_leaves, dout_local)

        local_t = timed(local_fwd_bwd, clock, args.iters, args.warmup, collective=False)["median_s"]
        every = [None] * world
        dist.all_gather_object(every, local_t)
        variants.append({"strategy": strategy, "equal_chunks": equal, "plan_seconds": plan_s,
                         "comm_groups_requested": groups,
                         "work_model": model, "chunk_size": cs, "balance_tolerance": tol,
                         "remote_penalty": pen,
                         "rank_local_phase_fwd_bwd_s": every,
                         "plan": {k: report[k] for k in ("rank_work", "imbalance", "rank_num_chunks",
                                                         "comm_slots", "gathered_tokens_per_rank",
                                                         "rank_needed_remote_tokens")},
                         "comm_groups": len(plan_g.comm_groups), "comm_sms": sms[0],
                         "comm_retire": sms[1], "comm_fuse_kv": fuse,
                         "fwd": cp_f, "fwd_bwd": cp_fb,
                         "phase_pairs_rank": [masks_g.local_work, *masks_g.remote_work],
                         "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if use_cuda else None,
                         "speedup": speedups(single_f, single_fb, cp_f, cp_fb)})
    best = max(variants, key=lambda x: x["speedup"]["fwd_bwd"])
    plan, masks = make_plan(best["strategy"], best["equal_chunks"], best["comm_groups_requested"],
                            best["work_model"], best["chunk_size"], best["balance_tolerance"],
                            best["remote_penalty"])
    report = balance_report(plan)
    # the best plan's assignment in the kernels' unit (pairs of computed 128x128 tiles)
    tile_work = chunk_work(*mask, s, plan.chunk_size, plan.num_chunks, work_model="tiles") \
        if plan.chunk_size % 128 == 0 else None
    tile_rank_work = None if tile_work is None else [int(tile_work[list(c)].sum()) for c in plan.rank_chunks]
    local = [torch_cp.shard_sequence(x, plan, rank).requires_grad_() for x in (q, k, v)]
    dout_local = torch_cp.shard_sequence(dout, plan, rank)

    # communication alone: one all-gather of the whole K/V shard, one reduce-scatter of its gradient
    comm_rows = plan.comm_len or plan.chunk_size  # the best plan's communicated prefix
    shard = torch.zeros((comm_rows, 1, hk, 2 * d), device=device, dtype=dtype)
    gathered = torch.empty((world * comm_rows, 1, hk, 2 * d), device=device, dtype=dtype)
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    comm_ag = timed(lambda: all_gather(gathered, shard), clock, args.iters, 1, True)
    comm_rs = timed(lambda: reduce_scatter(shard, gathered), clock, args.iters, 1, True)

    # correctness of the CP result against the single-device one (same dtype)
    out_ref = pft.flashmask_attention(*leaves, idx, causal=True, backend=args.backend)
    grads_ref = torch.autograd.grad(out_ref, leaves, dout)
    out_cp = torch_cp.context_parallel_attention(*local, plan, masks, backend=args.backend,
                                                 comm_sms=best["comm_sms"],
                                                 comm_retire=best["comm_retire"],
                                                 comm_fuse_kv=best["comm_fuse_kv"])
    grads_cp = torch.autograd.grad(out_cp, local, dout_local)
    errors = {"out": rel_err(torch_cp.gather_sequence(out_cp.detach(), plan), out_ref.detach())}
    for name, g_cp, g_ref in zip(("dq", "dk", "dv"), grads_cp, grads_ref):
        errors[name] = rel_err(torch_cp.gather_sequence(g_cp, plan), g_ref)

    profile = None
    if args.profile:  # after every timed run, so the numbers above are untouched
        dev_masks = torch_cp.device_masks(plan, masks, device)  # the best configuration's plan

        def cp_step():
            out = torch_cp.context_parallel_attention(*local, plan, dev_masks, backend=args.backend,
                                                      comm_sms=best["comm_sms"],
                                                      comm_retire=best["comm_retire"],
                                                      comm_fuse_kv=best["comm_fuse_kv"])
            return torch.autograd.grad(out, local, dout_local)

        def cp_steps():
            return [cp_step() for _ in range(max(args.profile_steps, 1))]

        cp_step()  # warm (same shapes as the timed runs: nothing to compile)
        dist.barrier()
        mine = {"rank": rank, "local_rows": int(masks.rows.size),
                "phase_pairs": [masks.local_work, *masks.remote_work],
                "remote_phase_rows": [int(masks.rows.size if r is None else r.size)
                                      for r in map(masks.phase_rows, range(len(masks.remote)))],
                "profiled_steps": args.profile_steps,
                **profile_step(cp_steps, use_cuda, barrier=dist.barrier)}
        every = [None] * world
        dist.all_gather_object(every, mine)
        profile = {"config": {k: best[k] for k in ("strategy", "equal_chunks", "comm_groups", "comm_sms",
                                                   "comm_retire", "comm_fuse_kv",
                                                   "work_model", "chunk_size", "balance_tolerance",
                                                   "remote_penalty")},
                   "ranks": every}

    result = {
        "benchmark": "context-parallel FlashMask attention, causal-document mask",
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "world_size": world,
        "device": torch.cuda.get_device_name(device) if use_cuda else platform.processor() or "cpu",
        "kernel_sources": source_fingerprint(),  # scripts/find_commit.py maps it to commits
        "versions": {"torch": torch.__version__, "paddle_flashmask": paddle_flashmask.__version__,
                     "nccl": ".".join(map(str, torch.cuda.nccl.version())) if use_cuda else None,
                     "python": platform.python_version()},
        "env": {name: os.environ.get(name) for name in ("NCCL_NVLS_ENABLE", "NCCL_MAX_CTAS",
                                                       "NCCL_MIN_CTAS", "NCCL_PROTO")},
        "backend": backend_used,
        "shape": {"seqlen": s, "heads": h, "kv_heads": hk, "head_dim": d, "dtype": args.dtype,
                  "num_documents": len(docs), "doc_len_range": [args.doc_min, args.doc_max]},
        "visible_pairs_all_heads": pairs,
        "plan": {**{k: report[k] for k in ("chunk_size", "num_chunks", "rank_work", "imbalance",
                                           "contiguous_imbalance") if k in report},
                 "strategy": best["strategy"], "equal_chunks": best["equal_chunks"],
                 "comm_slots": report["comm_slots"],
                 "rank_needed_remote_tokens": report["rank_needed_remote_tokens"],
                 "plan_seconds": best["plan_seconds"],
                 "tile_rank_work": tile_rank_work,
                 "tile_imbalance": None if tile_rank_work is None
                 else max(tile_rank_work) / (sum(tile_rank_work) / world) - 1.0},
        "single_device": {"fwd": single_f, "fwd_bwd": single_fb, "peak_memory_bytes": peak_single},
        "context_parallel": variants,
        "comm_only": {"rows_per_rank": comm_rows, "all_gather_shard": comm_ag,
                      "reduce_scatter_shard": comm_rs},
        "best_strategy": best["strategy"],
        "best_equal_chunks": best["equal_chunks"],
        "best_comm_groups": best["comm_groups"],
        "best_comm_sms": best["comm_sms"],
        "best_comm_retire": best["comm_retire"],
        "best_comm_fuse_kv": best["comm_fuse_kv"],
        "nccl_high_priority": bool(args.nccl_high_priority),
        "speedup": best["speedup"],
        "tflops": {"single_fwd_bwd": 3.5 * fwd_flops / single_fb["median_s"] / 1e12,
                   "cp_fwd_bwd_total": 3.5 * fwd_flops / best["fwd_bwd"]["median_s"] / 1e12},
        "tokens_per_s": {"single_fwd_bwd": s / single_fb["median_s"],
                         "cp_fwd_bwd": s / best["fwd_bwd"]["median_s"],
                         **({"single_fwd_bwd_pipelined": s / single_fb["pipelined_median_s"],
                             "cp_fwd_bwd_pipelined": s / best["fwd_bwd"]["pipelined_median_s"]}
                            if "pipelined_median_s" in single_fb else {})},
        "max_rel_error_vs_single_device": errors,
    }
    if profile is not None:
        result["profile"] = profile
    if rank == 0:
        out_path = args.out or os.path.join(os.environ.get("OUT", "bench/results"), "cp_scaling.json")
        os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)
        plot(result, os.path.splitext(out_path)[0] + ".png")
        print(json.dumps({k: result[k] for k in ("world_size", "backend", "best_comm_groups", "speedup", "tflops",
                                                  "max_rel_error_vs_single_device")}, indent=1))
        print(f"imbalance {report['imbalance']:.4f} (contiguous split {report.get('contiguous_imbalance')}); "
              f"wrote {out_path}")
    dist.barrier()
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
