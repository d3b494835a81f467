"""GPU test suite of the ``cute`` backend: ``python3 -m pytest -q tests/gpu`` on an SM90 machine.

Everything here skips cleanly where there is no CUDA device of capability 9.x, no CUDA build of
torch, or no CuTe DSL. Results worth keeping (worst errors, timings, memory) are collected in
``gpu_report`` and written as JSON to ``$PFM_GPU_REPORT`` (or ``$OUT/gpu_report.json``) at the end.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def _gpu_skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    major, _ = torch.cuda.get_device_capability()
    if major != 9:
        return f"needs an SM90 GPU, found capability {major}.x"
    from paddle_flashmask.ops import cute as cute_backend

    if not cute_backend.is_available(torch.cuda.current_device()):
        return "paddle_flashmask.ops.cute.is_available() is False (CuTe DSL not importable?)"
    return None


_SKIP_REASON = _gpu_skip_reason()
_REPORT: dict = {}


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here:
            item.add_marker(pytest.mark.gpu)
            if _SKIP_REASON is not None:
                item.add_marker(pytest.mark.skip(reason=_SKIP_REASON))


@pytest.fixture(scope="session")
def gpu_report() -> dict:
    """A dict the tests add measured results to; dumped as JSON when the session ends."""
    return _REPORT


def pytest_sessionfinish(session, exitstatus):
    if not _REPORT:
        return
    path = os.environ.get("PFM_GPU_REPORT")
    if not path and os.environ.get("OUT"):
        path = os.path.join(os.environ["OUT"], "gpu_report.json")
    if path:
        Path(path).write_text(json.dumps(_REPORT, indent=1, sort_keys=True, default=str))
