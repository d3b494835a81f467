#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-instruction warp-state sampling.

Input: the CSV that ``ncu -i REPORT --page source --csv --print-source sass`` writes for a report
taken with ``--set full`` (plain or gzipped; ``scripts/gpu_session.sh call144`` / ``call150``).
Output: the samples per stall reason, split by how often an instruction ran (a loop body's
instructions share one count: ``--loop-count`` picks e.g. the consumer warps' per-tile count),
and the instructions holding the most samples with their three largest reasons::

    scripts/ncu_stall_sites.py bench/results/profile/sass_bwd_full_s25.csv.gz --top 20
    scripts/ncu_stall_sites.py A.csv.gz B.csv.gz --loop-count 4194304 3375104
    scripts/ncu_stall_sites.py A.csv.gz --blocks 8     # samples per execution-count group

``--blocks N`` lists the N execution-count groups holding the most samples: the instructions that
ran equally often (a loop body, a branch's block, a prologue), with their share of the samples and
of the executed instructions, and samples per execution -- so two kernels' loops, partial-tile
blocks and prologues compare side by side (session 26: the documents forward's partial-tile mask
held 6.8 % of our samples, a block FA4 varlen does not run inside a document).

Samples are attributed to the instruction a warp is waiting to issue, so a barrier's wait shows
on the instruction after it. Samples with no named reason are kept as ``unattributed``.
"""
from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
from typing import Iterable, Optional

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_rows(path: str) -> list[dict]:
    """The CSV's instruction rows (its first line names the kernel, the second the columns)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        lines = f.read().splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if header_at is None:
        raise ValueError(f"{path}: expected a column header starting with \"Address\" "
                         "(ncu --page source --csv --print-source sass)")
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[header_at:]))))
    if not rows or SAMPLES not in rows[0]:
        raise ValueError(f"{path}: expected a column {SAMPLES!r} (a report taken with --set full)")
    return rows


def stall_columns(row: dict) -> list[str]:
    """The per-reason sample columns (all samples, not the not-issued subset)."""
    return [k for k in row if k.startswith("stall_") and "Not Issued" not in k]


def reasons(rows: Iterable[dict]) -> collections.Counter:
    """Samples per stall reason over ``rows``, plus ``total`` and ``unattributed``."""
    out: collections.Counter = collections.Counter()
    rows = list(rows)
    columns = stall_columns(rows[0]) if rows else []  # one header for every row
    for row in rows:
        total = _number(row[SAMPLES])
        named = 0.0
        for column in columns:
            value = _number(row[column])
            out[column[len("stall_"):]] += value
            named += value
        out["total"] += total
        out["unattributed"] += max(total - named, 0.0)
    return out


def top_sites(rows: list[dict], count: int) -> list[tuple[int, dict]]:
    """The ``count`` instructions with the most samples, in program order."""
    ranked = sorted(range(len(rows)), key=lambda i: -_number(rows[i][SAMPLES]))[:count]
    return [(i, rows[i]) for i in sorted(ranked)]


def count_blocks(rows: list[dict]) -> list[dict]:
    """The rows grouped by execution count, most samples first: per group its count, the number
    of instructions, their samples and executed instructions."""
    groups: dict[float, dict] = {}
    for row in rows:
        count = _number(row[EXECUTED])
        group = groups.setdefault(count, {"count": count, "instructions": 0, "samples": 0.0,
                                          "executed": 0.0})
        group["instructions"] += 1
        group["samples"] += _number(row[SAMPLES])
        group["executed"] += count
    return sorted(groups.values(), key=lambda g: (-g["samples"], -g["count"]))


def summarize(path: str, top: int, loop_count: Optional[float], blocks: int = 0) -> str:
    rows = read_rows(path)
    all_reasons = reasons(rows)
    total = all_reasons["total"] or 1.0
    out = [f"{path}: {all_reasons['total']:.0f} samples, "
           f"{sum(_number(r[EXECUTED]) for r in rows):.0f} instructions executed"]

    def line(label: str, counter: collections.Counter) -> str:
        parts = [f"{k} {v / total:.1%}" for k, v in counter.most_common()
                 if k != "total" and v >= 0.005 * total]
        return f"  {label:<12} {counter['total'] / total:6.1%}  " + ", ".join(parts)

    out.append(line("all", all_reasons))
    if loop_count is not None:
        inside = [r for r in rows if _number(r[EXECUTED]) == loop_count]
        outside = [r for r in rows if _number(r[EXECUTED]) != loop_count]
        out.append(line(f"ran {loop_count:.0f}x", reasons(inside)))
        out.append(line("the rest", reasons(outside)))
    if blocks:
        executed = sum(_number(r[EXECUTED]) for r in rows) or 1.0
        for group in count_blocks(rows)[:blocks]:
            per_run = group["samples"] / group["count"] if group["count"] else 0.0
            out.append(f"  ran {group['count']:>10.0f}x: {group['instructions']:5d} instructions, "
                       f"{group['samples'] / total:6.1%} of samples, "
                       f"{group['executed'] / executed:6.1%} of instructions executed, "
                       f"{per_run:.4f} samples per run")
    columns = stall_columns(rows[0])
    for index, row in top_sites(rows, top):
        named = sorted(((_number(row[c]), c[len("stall_"):]) for c in columns), reverse=True)[:3]
        why = " ".join(f"{name}:{value:.0f}" for value, name in named if value > 0)
        out.append(f"  {index:5d} {_number(row[SAMPLES]) / total:6.2%} "
                   f"x{_number(row[EXECUTED]):<10.0f} {row['Source'].strip()[:56]:<56} {why}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="+", help="ncu --page source --csv --print-source sass output")
    parser.add_argument("--top", type=int, default=15, help="instructions to list per kernel")
    parser.add_argument("--loop-count", type=float, nargs="*", default=None,
                        help="per file: the execution count that marks one loop's body")
    parser.add_argument("--blocks", type=int, default=0,
                        help="list the N execution-count groups holding the most samples")
    args = parser.parse_args()
    if args.blocks < 0:
        parser.error(f"--blocks: expected a count >= 0, found {args.blocks}")
    counts = args.loop_count or []
    if counts and len(counts) != len(args.csv):
        parser.error(f"--loop-count: expected one count per file ({len(args.csv)}), "
                     f"found {len(counts)}")
    for i, path in enumerate(args.csv):
        print(summarize(path, args.top, counts[i] if counts else None, args.blocks))


if __name__ == "__main__":
    main()
