"""PaddleNLP integration, run inside the separate ``.venv-paddlenlp`` (PaddleNLP 3.0.0b4 conflicts
with PaddleFormers / transformers 5 in one environment). ``scripts/setup_integration_envs.sh``
creates that venv; without it this test is skipped with that instruction. The checks themselves
live in ``tests/paddlenlp_env/checks_paddlenlp.py``; the patch round-trip that needs no PaddleNLP
also runs here, in the main environment."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = Path(os.environ.get("PADDLE_FLASHMASK_PADDLENLP_PYTHON", ROOT / ".venv-paddlenlp" / "bin" / "python"))


def test_paddlenlp_checks_in_their_venv():
    if not VENV_PYTHON.exists():
        pytest.skip(f"{VENV_PYTHON} is absent: run scripts/setup_integration_envs.sh to create the "
                    "PaddleNLP 3.0.0b4 venv these checks need")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([str(VENV_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/paddlenlp_env/checks_paddlenlp.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"PaddleNLP checks failed (rc={proc.returncode}):\n{tail}"
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], tail


def test_patch_roundtrip_without_paddlenlp():
    paddle = pytest.importorskip("paddle")
    import paddle.nn.functional as F
    import paddle.nn.functional.flash_attention as fa
    from paddle_flashmask.integrations import paddlenlp as nlp_int
    before = (F.flashmask_attention, fa.flashmask_attention, hasattr(F, "flash_attention_with_sparse_mask"))
    nlp_int.patch_paddlenlp()
    assert F.flashmask_attention is nlp_int.flashmask_attention and nlp_int.is_patched()
    assert fa.flashmask_attention is nlp_int.flashmask_attention
    nlp_int.unpatch_paddlenlp()
    assert (F.flashmask_attention, fa.flashmask_attention, hasattr(F, "flash_attention_with_sparse_mask")) == before
    assert not nlp_int.is_patched()
    del paddle
