"""Hugging Face transformers integration (torch, CPU), run in a fresh process: importing
PaddleFormers (other integration tests do) turns transformers' torch support off process-wide.
The checks live in ``tests/hf_env/checks_transformers.py``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_transformers_checks_in_a_fresh_process():
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    probe = subprocess.run([sys.executable, "-c", "import torch, transformers; from transformers import LlamaForCausalLM"],
                           env=env, capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("transformers with torch models is not importable here (installed with PaddleFormers by "
                    f"scripts/setup_integration_envs.sh): {probe.stderr.strip().splitlines()[-1:]}")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/hf_env/checks_transformers.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"transformers checks failed (rc={proc.returncode}):\n{tail}"
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], tail
