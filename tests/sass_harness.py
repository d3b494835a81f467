"""Run a compile-and-disassemble script in a fresh process compiling for sm_90a (no GPU).

Kernel SASS tests (tests/test_bwd_kernels.py, tests/test_bwd_prepost_vector.py) compile in a child
process so the DSL's environment (target arch, kept cubins, no file cache) is set before it is
imported; the script prints one line ``JSON<payload>``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_sass_script(script: str, *args: str, **extra_env: str) -> dict:
    """The JSON payload ``script`` prints; skips when the DSL or nvdisasm is missing."""
    pytest.importorskip("cutlass")
    from paddle_flashmask.ops.cute import compile_check as cc
    if cc.find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")
    # kept cubins go to a scratch folder, not into the checkout (the DSL's default is the cwd)
    with tempfile.TemporaryDirectory() as dump:
        env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", CUTE_DSL_DUMP_DIR=dump, **extra_env,
                   PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        out = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=900)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("JSON")]
    assert line, out.stderr[-4000:]
    return json.loads(line[-1][4:])


def sass_loop_mix(*args: str, **extra_env: str) -> tuple[list[dict], str]:
    """``scripts/sass_loop_mix.py ARGS`` in a fresh sm_90a process (``extra_env``: the kernel
    switches): its HGMMA loops (``--json``) and its printed report; skips like ``run_sass_script``."""
    pytest.importorskip("cutlass")
    from paddle_flashmask.ops.cute import compile_check as cc
    if cc.find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "loops.json"
        run = subprocess.run([sys.executable, str(ROOT / "scripts" / "sass_loop_mix.py"), *args,
                              "--json", str(out)], cwd=ROOT,
                             env=dict(os.environ, CUTE_DSL_ARCH="sm_90a", **extra_env),
                             capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr[-4000:]
        return json.loads(out.read_text()), run.stdout
