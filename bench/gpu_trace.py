"""GPU kernel timelines from ``torch.profiler`` (shared by the diagnostics, not the benchmark).

:func:`kernel_ops` runs a function under the profiler (CUDA activity only) and returns the device
operations it launched as ``(start_us, duration_us, name)``, sorted by start; :func:`summarize`
turns such a list into span, busy and idle time per call plus the heaviest kernels by name.
"""
from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from typing import Callable

import torch

DEVICE_CATEGORIES = ("kernel", "gpu_memset", "gpu_memcpy")


def kernel_ops(fn: Callable[[], object], calls: int = 1, name_width: int = 60) -> list:
    """Device operations of ``calls`` back-to-back calls of ``fn`` (warmed up once, no
    synchronisation between the calls)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    return sorted((float(e["ts"]), float(e["dur"]), e["name"][:name_width])
                  for e in trace.get("traceEvents", [])
                  if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES)


def summarize(ops: list, calls: int, top: int = 0, gaps: int = 3) -> dict:
    """Per call: the span from the first operation's start to the last one's end, the summed
    operation time and the idle rest; the ``gaps`` longest idle gaps with the operations around
    them; with ``top``, the ``top`` names with the most time (us per call, launches per call)."""
    if not ops:
        return {}
    busy = sum(d for _, d, _ in ops)
    span = ops[-1][0] + ops[-1][1] - ops[0][0]
    idle = sorted(((b[0] - (a[0] + a[1]), a[2], b[2]) for a, b in zip(ops, ops[1:])), reverse=True)
    out = {"calls": calls, "span_us_per_call": round(span / calls, 1),
           "busy_us_per_call": round(busy / calls, 1), "idle_us_per_call": round((span - busy) / calls, 1),
           "longest_gaps_us": [[round(g, 1), before, after] for g, before, after in idle[:gaps]]}
    if top:
        by_name: dict = defaultdict(lambda: [0.0, 0])
        for _, dur, name in ops:
            by_name[name][0] += dur
            by_name[name][1] += 1
        ranked = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
        out["top_us_per_call"] = [[name, round(t / calls, 1), n // calls] for name, (t, n) in ranked]
    return out
