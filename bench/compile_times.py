"""First-compile time of every kernel variant a benchmark run uses, and its load time from the disk
cache in a new process (issue 5 item 4).

Each variant is compiled in its own child process against an empty cache directory (the JIT
compile plus writing the object), then loaded by another new process from that directory. Both
children time only ``interface.compiled_kernel`` (imports excluded) and report the cache counters, so
a "load" that secretly compiled is flagged. Children run ``--jobs`` at a time.

    python3 bench/compile_times.py [--forms causal,full,causal-C1,bidir-C2] [--head-dim 128]
                                   [--gqa] [--jobs 8] [--json PATH]

Works on the CPU machine too (``CUTE_DSL_ARCH=sm_90a``): compiling needs no GPU.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def parse_form(form: str) -> tuple[bool, Optional[int]]:
    """'causal' | 'full' | 'causal-C1' | 'causal-C2' | 'bidir-C2' | 'bidir-C4' -> (causal, C)."""
    if form in ("causal", "full"):
        return form == "causal", None
    kind, _, c = form.partition("-C")
    if kind not in ("causal", "bidir") or not c.isdigit():
        raise ValueError(f"--forms: expected causal, full, causal-C1/C2 or bidir-C2/C4, found {form!r}")
    return kind == "causal", int(c)


def variants_for(forms: list[tuple[bool, Optional[int]]], dtype: str, head_dim: int,
                 gqa: bool) -> list[tuple[str, Any]]:
    """(cache name, config) of every kernel the forward + backward of these mask forms launch."""
    from paddle_flashmask.ops.cute import interface
    from paddle_flashmask.ops.cute.summary_kernel import SummaryConfig

    out: list[tuple[str, Any]] = []
    for causal, c in forms:
        fwd = interface.forward_config(dtype, head_dim, causal, c)
        bwd = interface.backward_config(dtype, head_dim, causal, c, gqa=gqa)
        out += [("flash_fwd_sm90", fwd), ("flash_bwd_sm90", bwd),
                ("flash_bwd_pre", bwd.prepost), ("flash_bwd_post", bwd.prepost)]
        if c is not None:
            out += [("tile_summary", SummaryConfig(fwd.tile_n, c)),
                    ("tile_summary", SummaryConfig(bwd.tile_n, c))]
    unique: list[tuple[str, Any]] = []
    for item in out:
        if item not in unique:
            unique.append(item)
    return unique


_CHILD = r"""
import base64, json, pickle, sys, time
sys.path.insert(0, {root!r})
name, config = pickle.loads(base64.b64decode({payload!r}))
from paddle_flashmask.ops.cute import cache, interface
t = time.perf_counter()
interface.compiled_kernel(name, config)
print(json.dumps({{"seconds": time.perf_counter() - t, "stats": cache.stats()}}))
"""


def _child(name: str, config: Any, cache_dir: str, timeout: float) -> dict:
    payload = base64.b64encode(pickle.dumps((name, config))).decode()
    env = dict(os.environ, PADDLE_FLASHMASK_CACHE_DIR=cache_dir, PADDLE_FLASHMASK_CACHE="1")
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD.format(root=ROOT, payload=payload)],
                              capture_output=True, text=True, timeout=timeout, env=env)
        line = [l for l in proc.stdout.splitlines() if l.startswith("{")][-1]
        result = json.loads(line)
    except Exception as exc:  # noqa: BLE001 - one broken variant must not hide the others
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    result["process_s"] = time.perf_counter() - start
    return result


def measure(variants: list[tuple[str, Any]], jobs: int = 4, timeout: float = 300.0) -> list[dict]:
    """Per variant: compile seconds (empty cache), load seconds (new process, same cache)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="pfm-compile-times-") as root:
        dirs = [os.path.join(root, str(i)) for i in range(len(variants))]
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            compiled = list(pool.map(lambda a: _child(*a, timeout),
                                     [(n, c, d) for (n, c), d in zip(variants, dirs)]))
            loaded = list(pool.map(lambda a: _child(*a, timeout),
                                   [(n, c, d) for (n, c), d in zip(variants, dirs)]))
    for (name, config), first, again in zip(variants, compiled, loaded):
        row = {"kernel": name, "config": repr(config)}
        if "error" in first or "error" in again:
            row["error"] = first.get("error") or again.get("error")
        else:
            row.update(compile_s=round(first["seconds"], 3), load_s=round(again["seconds"], 4),
                       load_process_s=round(again["process_s"], 2),
                       loaded_from_disk=again["stats"].get("disk_hits", 0) >= 1
                       and again["stats"].get("compiles", 0) == 0)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--forms", default="causal,full,causal-C1,bidir-C2")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--gqa", action="store_true")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    forms = [parse_form(f) for f in args.forms.split(",") if f]
    rows = measure(variants_for(forms, args.dtype, args.head_dim, args.gqa), args.jobs)
    for r in rows:
        print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
