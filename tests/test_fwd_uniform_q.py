"""Q's wgmma descriptors from the warpgroup's warp-uniform slice (FwdConfig.uniform_q), on the CPU:
the config rule, and the SASS property it exists for -- no vector-to-uniform register moves before
the Q·Kᵀ wgmmas of the main loop. The numbers are for the H200 (tests/gpu/fwd_check.py with
PADDLE_FLASHMASK_FWD_UNIFORM_Q=1, scripts/gpu_session.sh call46)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd

ROOT = Path(__file__).resolve().parents[1]


def test_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.UNIFORM_Q_ENV, raising=False)
    assert not interface.forward_config("bfloat16", 128, True, 1, False).uniform_q
    monkeypatch.setenv(fwd.UNIFORM_Q_ENV, "1")
    for d, causal, columns in ((64, True, 1), (128, True, None), (128, False, 4), (256, True, 2)):
        assert interface.forward_config("bfloat16", d, causal, columns, False).uniform_q, d
    monkeypatch.setenv(fwd.UNIFORM_Q_ENV, "on")
    with pytest.raises(ValueError, match=fwd.UNIFORM_Q_ENV):
        interface.forward_config("bfloat16", 128, True, 1, False)


def _main_loop(env: dict, tmp_path: Path) -> dict:
    """Opcode histogram of the forward's main loop (d128, causal) under ``env``."""
    from paddle_flashmask.ops.cute.compile_check import find_nvdisasm

    if find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")
    out = tmp_path / f"loops-{len(list(tmp_path.iterdir()))}.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "sass_loop_mix.py"), "fwd",
                    "--head-dim", "128", "--causal", "--json", str(out)],
                   env={**os.environ, "CUTE_DSL_ARCH": "sm_90a", **env}, check=True, timeout=600,
                   capture_output=True, text=True)
    loops = json.loads(out.read_text())
    assert len(loops) == 1, loops
    return loops[0]["histogram"]


def test_q_descriptors_stay_in_uniform_registers(tmp_path):
    pytest.importorskip("cutlass")
    base = _main_loop({fwd.UNIFORM_Q_ENV: "0"}, tmp_path)
    uniform = _main_loop({fwd.UNIFORM_Q_ENV: "1"}, tmp_path)
    # per-thread slice: each Q·Kᵀ wgmma's descriptor is moved from vector registers (R2UR)
    assert base.get("R2UR", 0) >= 8
    assert "R2UR" not in uniform
    # same wgmmas, same softmax, fewer instructions
    for op in ("HGMMA", "MUFU", "FFMA", "FMNMX", "F2FP", "BAR"):
        assert uniform.get(op) == base.get(op), op
    assert sum(uniform.values()) < sum(base.values())
