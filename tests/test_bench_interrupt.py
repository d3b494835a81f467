"""A benchmark cut by its time limit (SIGINT) still writes the rows it measured, marked partial.

Runs ``bench/bench_attention.py``'s ``main`` on the CPU with the GPU parts replaced: ``run_case``
appends one measured row, then the limit's SIGINT arrives (as KeyboardInterrupt)."""
from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_bench(monkeypatch):
    triton = types.ModuleType("triton")
    testing = types.ModuleType("triton.testing")
    testing.do_bench = lambda fn, **kw: 0.0
    triton.testing = testing
    monkeypatch.setitem(sys.modules, "triton", triton)
    monkeypatch.setitem(sys.modules, "triton.testing", testing)
    spec = importlib.util.spec_from_file_location("bench_attention_under_test",
                                                  ROOT / "bench" / "bench_attention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_interrupted_run_keeps_its_rows(monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    bench = _load_bench(monkeypatch)
    row = {"B": 4, "S": 8192, "H": 16, "Hk": 16, "D": 128, "mask": "causal",
           "system": "paddle_flashmask", "fwd_ms": 1.0, "fwd_tflops": 500.0, "fwdbwd_ms": 4.0,
           "fwdbwd_tflops": 450.0, "rel_err_out": 2e-3}

    def run_case(B, S, H, Hk, D, args, results, meta):
        results.append(dict(row))
        raise KeyboardInterrupt  # the call's `timeout -s INT`

    monkeypatch.setattr(bench, "run_case", run_case)
    monkeypatch.setattr(bench, "versions", lambda: {"gpu": "none (test)"})
    monkeypatch.setattr(sys, "argv", ["bench_attention.py", "--cases", "0,1", "--out",
                                      str(tmp_path), "--tag", "cut"])
    with pytest.raises(SystemExit) as stop:
        bench.main()
    assert stop.value.code == 130  # the caller sees the run did not complete
    saved = json.loads((tmp_path / "bench-cut.json").read_text())
    assert saved["results"] == [row]
    assert saved["meta"]["interrupted"] == "SIGINT after 1 rows"
    assert "compile_cache" not in saved["meta"]  # never reached
    assert (tmp_path / "bench-cut.png").stat().st_size > 0


def test_unpacked_fa4_is_a_gqa_only_opt_in(monkeypatch):
    """FA4 with pack_gqa=False is a diagnostic: offered only for GQA shapes, and listed in
    OPT_IN_SYSTEMS so a run without --systems leaves it out."""
    bench = _load_bench(monkeypatch)
    mask = types.SimpleNamespace(name="causal", causal=True, doc_lens=None, indices=None)
    assert "fa4_no_pack_gqa" in bench.systems_for(mask, 4, 8192, 32, 8, 128)
    assert "fa4_no_pack_gqa" not in bench.systems_for(mask, 4, 8192, 16, 16, 128)
    assert "fa4_no_pack_gqa" in bench.OPT_IN_SYSTEMS
    assert "fa4" not in bench.OPT_IN_SYSTEMS
