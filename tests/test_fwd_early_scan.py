"""The forward producer's scan before the Q wait (FwdConfig.early_scan, the default since session
14), on the CPU: the env switch, the compile-check variants of both placements, and the host
API (no new launch argument). Correctness and speed were checked on the H200
(tests/gpu/fwd_check.py 24/24 and bench/profile_call.py, scripts/gpu_session.sh call68)."""
from __future__ import annotations

import pytest

from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd


def test_env_switch(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.EARLY_SCAN_ENV, raising=False)
    for causal, columns in ((True, 1), (False, 4), (True, None)):
        assert interface.forward_config("bfloat16", 128, causal, columns).early_scan  # default
    assert fwd.default_config("bf16", 64, None, True, 2, fast=False).early_scan  # both paths
    monkeypatch.setenv(fwd.EARLY_SCAN_ENV, "0")
    off = interface.forward_config("bfloat16", 128, True, 1)
    assert not off.early_scan
    assert off == fwd.FwdConfig(**{**off.__dict__, "early_scan": False})
    monkeypatch.setenv(fwd.EARLY_SCAN_ENV, "yes")
    with pytest.raises(ValueError, match=fwd.EARLY_SCAN_ENV):
        interface.forward_config("bfloat16", 128, True, 1)


def test_compile_check_builds_both_placements_for_every_scan_kind(monkeypatch):
    from paddle_flashmask.ops.cute import compile_check

    monkeypatch.delenv(fwd.EARLY_SCAN_ENV, raising=False)
    chosen = {v.label: v.config for v in compile_check.variants()}
    for form in ("d128 causal-C1", "d128 bidir-C4", "d128 causal", "d64 causal-C2"):
        assert chosen[f"fwd bfloat16 {form}"].early_scan, form
        assert not chosen[f"fwd bfloat16 {form} late-scan"].early_scan, form
    assert chosen["fwd bfloat16 d128 causal-C1 claimed-work-order"].early_scan
    assert chosen["fwd bfloat16 d128 causal-C1"].tile_ranges  # the scan reads the ranges


def test_host_api_launches_the_same_arguments(monkeypatch):
    """flashmask_fwd with the option on, up to the launch (real sm_90a compiles): the same
    arguments as without it, counted and typed by the DSL's own argument packing."""
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import interface

    api = HostApiHarness(monkeypatch, num_sms=132)
    t = api.tensor
    b, s, h, d = 1, 300, 2, 128
    q, k, v, out, _, lse = api.attention_tensors(b, s, h, h, d)
    idx = t(b, 1, s, 1, dtype=torch.int32)
    for value in ("0", "1"):
        monkeypatch.setenv(fwd.EARLY_SCAN_ENV, value)
        interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1, stream=0)
    first, second = [args for name, args in api.launch_args if name == "flash_fwd_sm90"]
    assert len(first) == len(second)
