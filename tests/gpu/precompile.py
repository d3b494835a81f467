"""Compile every kernel variant the GPU tests use, in parallel, into the disk JIT cache.

    python3 tests/gpu/precompile.py [--jobs N]

Run before ``pytest tests/gpu`` on a many-core GPU host (or on any machine with the same CPU, since
the cached objects' host code is compiled for the build CPU): the tests then load every kernel from
``PADDLE_FLASHMASK_CACHE_DIR`` instead of compiling one variant after another on the clock.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))


def jobs_list():
    from cases import CASES, DETERMINISM_CASES, kernel_configs

    from paddle_flashmask.ops.cute.summary_kernel import SummaryConfig

    todo = []
    for case in CASES + DETERMINISM_CASES:
        fwd, bwd = kernel_configs(case, deterministic=case in DETERMINISM_CASES)
        todo += [("fwd", fwd), ("bwd", bwd)]
        if case.num_columns is not None:
            todo += [("summary", SummaryConfig(fwd.tile_n, case.num_columns)),
                     ("summary", SummaryConfig(bwd.tile_n, case.num_columns))]
    from test_skipping import skipping_configs

    todo += skipping_configs()
    return list(dict.fromkeys(todo))  # unique, in order


def build(job) -> tuple[str, float]:
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    from paddle_flashmask.ops.cute import interface

    kind, config = job
    start = time.perf_counter()
    try:
        if kind == "fwd":
            interface.compiled_forward(config)
        elif kind == "bwd":
            interface.compiled_backward(config)
        else:
            interface.compiled_kernel("tile_summary", config)
    except Exception as exc:  # the test that needs it will report the failure
        return f"FAILED {kind} {config}: {type(exc).__name__}", time.perf_counter() - start
    return f"{kind} {config}", time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    args = parser.parse_args()
    todo = jobs_list()
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for label, seconds in pool.imap_unordered(build, todo):
            print(f"  {seconds:6.1f} s  {label[:150]}", flush=True)
    print(f"precompile: {len(todo)} variants in {time.perf_counter() - start:.0f} s with {args.jobs} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
