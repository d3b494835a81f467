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


def test_blocks_group_by_execution_count(tmp_path):
    rng = random.Random()
    rows = []
    for i in range(rng.randint(30, 80)):
        count = rng.choice((3, 50, 700, 12_000))
        rows.append({"Address": hex(16 * i), "Source": f"OP{i}", nss.SAMPLES: str(rng.randint(0, 999)),
                     nss.EXECUTED: str(count), **{f"stall_{r}": "0" for r in REASONS},
                     **{f"stall_{r} (Not Issued)": "0" for r in REASONS}})
    path = str(tmp_path / "b.csv.gz")
    _write_csv(path, rows)
    groups = nss.count_blocks(nss.read_rows(path))
    expected = {}
    for row in rows:
        g = expected.setdefault(int(row[nss.EXECUTED]), [0, 0])
        g[0] += 1
        g[1] += int(row[nss.SAMPLES])
    assert {int(g["count"]): [g["instructions"], g["samples"]] for g in groups} == expected
    assert [g["samples"] for g in groups] == sorted((g["samples"] for g in groups), reverse=True)
    for g in groups:
        assert g["executed"] == g["count"] * g["instructions"]
    text = nss.summarize(path, 3, None, blocks=2)
    assert text.count(" instructions, ") == min(2, len(groups))


def test_rejects_a_csv_without_the_source_page(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text('"ID","Kernel Name"\n"1","k"\n')
    with pytest.raises(ValueError, match="Address"):
        nss.read_rows(str(path))


def test_committed_profile_parses():
    path = os.path.join(ROOT, "bench", "results", "profile", "sass_bwd_full_s25.csv.gz")
    counted = nss.reasons(nss.read_rows(path))
    assert counted["total"] > 0 and counted["barrier"] > 0


def test_documents_forward_blocks():
    """Session 26's reading of call 154: the forward's main loop (445 instructions) ran 697,600
    times (8 consumer warps x 87,200 steady-state tiles), the partial tiles' mask block in it
    78,976 times with ~5 % of the samples (its copy for a work tile's first tile: 1.6 % more)."""
    path = os.path.join(ROOT, "bench", "results", "profile", "sass_fwd_doc_s26.csv.gz")
    groups = {g["count"]: g for g in nss.count_blocks(nss.read_rows(path))}
    total = sum(g["samples"] for g in groups.values())
    assert groups[697600.0]["instructions"] == 445
    assert 0.04 < groups[78976.0]["samples"] / total < 0.06
