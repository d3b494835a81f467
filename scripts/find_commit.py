"""Which commits hold the kernels a benchmark result names by its ``kernel_sources`` fingerprint.

    python scripts/find_commit.py 5b08f83b451b4ccb [--max 300]

The benchmarks (``bench/bench_attention.py``, ``bench/e2e_step.py``, ``bench/cp_scaling.py``)
record ``paddle_flashmask.ops.cute.cache.source_fingerprint()``: a hash of the kernel modules and
the mask semantics, the same one that keys the JIT disk cache. The GPU machine runs a copy of the
working tree whose git HEAD can be stale, so the fingerprint is what identifies the kernels. This
prints every commit among the last ``--max`` of HEAD whose sources give that fingerprint (newest
first; consecutive commits that changed no kernel source share it).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL_DIR = "paddle_flashmask/ops/cute"
SEMANTICS = "paddle_flashmask/semantics.py"


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True).stdout


def fingerprint_at(commit: str) -> str:
    from paddle_flashmask.ops.cute.cache import fingerprint_sources

    names = _git("ls-tree", "--name-only", f"{commit}:{KERNEL_DIR}").decode().split()
    modules = {name: _git("show", f"{commit}:{KERNEL_DIR}/{name}") for name in names
               if name.endswith(".py")}
    return fingerprint_sources(modules, _git("show", f"{commit}:{SEMANTICS}"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("fingerprint", help="a result's kernel_sources value (16 hex digits)")
    p.add_argument("--max", type=int, default=300, help="commits of HEAD's history to search")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    found = []
    for line in _git("log", f"--max-count={args.max}", "--format=%h %s", "HEAD").decode().splitlines():
        commit, subject = line.split(" ", 1)
        try:
            if fingerprint_at(commit) == args.fingerprint:
                found.append(f"{commit} {subject[:100]}")
        except subprocess.CalledProcessError:  # a commit before the kernel directory existed
            continue
    print("\n".join(found) or f"no commit among the last {args.max} gives {args.fingerprint}")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
