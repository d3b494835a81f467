"""GPU: the per-key-tile summary kernel against semantics.tile_summary, and the disk JIT cache."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from paddle_flashmask import semantics

ROOT = Path(__file__).resolve().parents[2]


def _random_indices(rng, b, hm, sk, c, sq):
    return rng.integers(0, sq + 1, size=(b, hm, sk, c), dtype=np.int32)


@pytest.mark.parametrize("b,hm,sk,c,tile_n", [
    (1, 1, 1, 1, 128), (2, 3, 300, 2, 128), (1, 2, 1000, 4, 176), (3, 1, 4097, 1, 64),
    (1, 16, 777, 2, 80), (2, 1, 128, 4, 112),
])
def test_summary_matches_semantics(b, hm, sk, c, tile_n, gpu_report):
    import torch

    from paddle_flashmask.ops.cute import interface

    rng = np.random.default_rng(sk * 31 + c)
    idx = _random_indices(rng, b, hm, sk, c, sq=sk + 5)
    dev = torch.from_numpy(idx).cuda()
    stream = torch.cuda.current_stream().cuda_stream
    col_min, col_max = interface.tile_summary(dev, tile_n, stream=stream)
    got_min = torch.from_dlpack(col_min).cpu().numpy()
    got_max = torch.from_dlpack(col_max).cpu().numpy()
    want = semantics.tile_summary(idx, tile_n)
    np.testing.assert_array_equal(got_min, want.col_min)
    np.testing.assert_array_equal(got_max, want.col_max)
    gpu_report.setdefault("summary_cases", 0)
    gpu_report["summary_cases"] += 1


def test_summary_large_is_linear(gpu_report):
    """S = 128K: one launch, O(Sk) work; report its time."""
    import torch

    from paddle_flashmask.ops.cute import interface

    sk, tile_n = 128 * 1024, 128
    idx = torch.randint(0, sk + 1, (1, 1, sk, 2), dtype=torch.int32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    interface.tile_summary(idx, tile_n, stream=stream)  # warm (compile)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        col_min, col_max = interface.tile_summary(idx, tile_n, stream=stream)
    end.record()
    torch.cuda.synchronize()
    want = semantics.tile_summary(idx.cpu().numpy(), tile_n)
    np.testing.assert_array_equal(torch.from_dlpack(col_min).cpu().numpy(), want.col_min)
    gpu_report["summary_128k_us"] = start.elapsed_time(end) / 20 * 1000


_CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np, torch
    from paddle_flashmask import semantics
    from paddle_flashmask.ops.cute import cache, interface
    idx = torch.randint(0, 700, (2, 2, 650, 2), dtype=torch.int32, device="cuda")
    t0 = time.perf_counter()
    col_min, col_max = interface.tile_summary(idx, 96, stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    want = semantics.tile_summary(idx.cpu().numpy(), 96)
    ok = bool((torch.from_dlpack(col_max).cpu().numpy() == want.col_max).all())
    print(json.dumps({"stats": cache.stats(), "seconds": elapsed, "ok": ok}))
""")


def test_disk_cache_roundtrip(tmp_path, gpu_report):
    """Process 1 compiles and writes the object; process 2 loads it from disk and gets the same result."""
    import json

    env = dict(os.environ, PADDLE_FLASHMASK_CACHE_DIR=str(tmp_path), PADDLE_FLASHMASK_CACHE="1",
               PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr
        runs.append((json.loads(out.stdout.strip().splitlines()[-1]), out.stderr))
    (first, first_err), (second, second_err) = runs
    assert first["ok"] and second["ok"]
    assert first["stats"]["compiles"] == 1 and first["stats"]["disk_hits"] == 0
    assert second["stats"]["compiles"] == 0 and second["stats"]["disk_hits"] == 1
    assert "compiling tile_summary" in first_err and "compiling" not in second_err
    assert len(list(tmp_path.glob("*.o"))) == 1
    gpu_report["cache_summary_first_call_s"] = first["seconds"]
    gpu_report["cache_summary_disk_load_call_s"] = second["seconds"]
