"""scripts/ncu_stall_sites.py on a synthetic ncu source-page CSV with random samples (totals per
reason, the unattributed rest, the loop split, the top sites) and on a committed profile."""
from __future__ import annotations

import csv
import gzip
import io
import os
import random
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import ncu_stall_sites as nss  # noqa: E402

REASONS = ("barrier", "long_sb", "mio", "wait")


def _write_csv(path: str, rows: list[dict]) -> None:
    columns = ["Address", "Source", nss.SAMPLES, nss.EXECUTED]
    columns += [f"stall_{r}" for r in REASONS] + [f"stall_{r} (Not Issued)" for r in REASONS]
    out = io.StringIO()
    out.write('"Kernel Name","kernel_x",\n')
    writer = csv.DictWriter(out, fieldnames=columns, quoting=csv.QUOTE_ALL)
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    with gzip.open(path, "wt") as f:
        f.write(out.getvalue())


def _random_rows(rng: random.Random, n: int, loop: int) -> list[dict]:
    rows = []
    for i in range(n):
        named = {r: rng.randint(0, 50) for r in REASONS}
        extra = rng.randint(0, 9)  # samples with no named reason
        rows.append({"Address": hex(16 * i), "Source": f"OP{i} R{i}",
                     nss.SAMPLES: f"{sum(named.values()) + extra:,}",
                     nss.EXECUTED: str(loop if i % 3 else 7),
                     **{f"stall_{r}": str(v) for r, v in named.items()},
                     **{f"stall_{r} (Not Issued)": str(v // 2) for r, v in named.items()}})
    return rows


def test_totals_split_and_top_sites(tmp_path):
    rng = random.Random()
    loop = rng.randint(100, 10_000)
    rows = _random_rows(rng, rng.randint(20, 60), loop)
    path = str(tmp_path / "k.csv.gz")
    _write_csv(path, rows)
    read = nss.read_rows(path)
    assert len(read) == len(rows)
    counted = nss.reasons(read)
    for r in REASONS:  # the not-issued subsets are not added a second time
        assert counted[r] == sum(int(row[f"stall_{r}"]) for row in rows)
    total = sum(int(row[nss.SAMPLES].replace(",", "")) for row in rows)
    assert counted["total"] == total
    assert counted["unattributed"] == total - sum(counted[r] for r in REASONS)
    inside = nss.reasons([row for row in read if float(row[nss.EXECUTED]) == loop])
    outside = nss.reasons([row for row in read if float(row[nss.EXECUTED]) != loop])
    assert inside["total"] + outside["total"] == total
    top = nss.top_sites(read, 5)
    best = sorted(range(len(rows)), key=lambda i: -int(rows[i][nss.SAMPLES].replace(",", "")))
    assert [i for i, _ in top] == sorted(best[:5])
    text = nss.summarize(path, 5, float(loop))
    assert f"ran {loop}x" in text and f"{total} samples" in text


def test_rejects_a_csv_without_the_source_page(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text('"ID","Kernel Name"\n"1","k"\n')
    with pytest.raises(ValueError, match="Address"):
        nss.read_rows(str(path))


def test_committed_profile_parses():
    path = os.path.join(ROOT, "bench", "results", "profile", "sass_bwd_full_s25.csv.gz")
    counted = nss.reasons(nss.read_rows(path))
    assert counted["total"] > 0 and counted["barrier"] > 0
