#!/usr/bin/env python3
"""Seed a fresh venv with hard links to distributions another venv already has at the same version.

Usage: seed_venv.py REPORT.json SOURCE_SITE_PACKAGES TARGET_SITE_PACKAGES

REPORT.json is what ``pip install --dry-run --report`` wrote for the target venv: the distributions
pip would install there. Each one the source venv holds at the same version is linked in file by
file (its RECORD, site-packages entries only; console scripts are left out since their shebangs
name the source interpreter), so the pip install that follows finds it satisfied and only installs
the rest. Why: .venv-paddlenlp repeats ~1.3 GB of .venv (paddlepaddle, numpy, scipy, pyarrow, ...)
and CI machines share a disk that is sometimes nearly full.

Hard links are safe here: pip unlinks a file before writing a new one and Python writes bytecode
by atomic rename, so neither venv can change the other's files. Where linking fails (another file
system), the file is copied.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sys
from importlib import metadata
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def planned_installs(report_path: Path) -> dict[str, str]:
    """{canonical name: version} of what the pip report says it would install."""
    report = json.loads(report_path.read_text())
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"]
            for item in report.get("install", [])}


def link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def seed(report_path: Path, source: Path, target: Path) -> list[str]:
    wanted = planned_installs(report_path)
    seeded = []
    for dist in metadata.distributions(path=[str(source)]):
        name = canonical(dist.metadata["Name"])
        if wanted.get(name) != dist.version:
            continue
        record = dist.read_text("RECORD")
        if record is None:
            continue
        for row in csv.reader(record.splitlines()):
            rel = row[0] if row else ""
            if not rel or rel.startswith(("..", "/")):
                continue
            src = source / rel
            if src.is_file():
                link_or_copy(src, target / rel)
        seeded.append(f"{name}=={dist.version}")
    return seeded


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    report, source, target = (Path(a) for a in argv[1:])
    for label, path in (("SOURCE_SITE_PACKAGES", source), ("TARGET_SITE_PACKAGES", target)):
        if not path.is_dir():
            print(f"seed_venv.py: {label} {path} is not a directory", file=sys.stderr)
            return 2
    seeded = sorted(seed(report, source, target))
    shown = ", ".join(seeded[:6]) + (" ..." if len(seeded) > 6 else "") if seeded else "none"
    print(f"[setup] linked {len(seeded)} distributions from {source.parent.parent.parent.name}: "
          f"{shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
