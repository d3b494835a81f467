"""Shared test setup: kernels compile for sm_90a on machines without a GPU."""
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = Path(__file__).resolve().parents[1]
# tests import helpers such as tests/oracle.py as top-level modules
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))


@pytest.fixture
def single_rank_group():
    """A 1-rank gloo process group in this process (argument checks of the CP frontends)."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield torch
    finally:
        dist.destroy_process_group()


@pytest.fixture(autouse=True)
def fresh_call_plans():
    """The host API keeps a launch plan per call signature (ops/cute/interface.py), holding the
    compiled kernels, grid and variant of that signature. Tests swap the kernel getters, the SM
    count or the scratch allocator, so each starts without plans made under another test's."""
    interface = sys.modules.get("paddle_flashmask.ops.cute.interface")
    if interface is not None:
        interface.clear_call_plans()
    yield
