"""Packaging: every source folder ships, and importing the package needs only numpy."""
import subprocess
import sys
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_every_source_folder_is_a_package():
    folders = {p.parent.relative_to(ROOT).as_posix().replace("/", ".")
               for p in (ROOT / "paddle_flashmask").rglob("*.py")}
    packages = set(find_packages(str(ROOT), include=["paddle_flashmask", "paddle_flashmask.*"]))
    assert folders <= packages, f"folders without __init__.py (left out of the wheel): {folders - packages}"


def test_import_needs_no_framework():
    code = ("import sys, paddle_flashmask, paddle_flashmask.mask_builders, paddle_flashmask.semantics;"
            "bad = [m for m in ('paddle', 'torch', 'cutlass') if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
