"""The forward producer's scan before the Q wait (FwdConfig.early_scan), on the CPU: the env switch,
the compile-check variants, and the host API (no new launch argument). Correctness and speed
are checked on the H200 (tests/gpu/fwd_check.py and bench/profile_call.py with
PADDLE_FLASHMASK_FWD_EARLY_SCAN=1)."""
from __future__ import annotations

import pytest

from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd


def test_env_switch(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.EARLY_SCAN_ENV, raising=False)
    for causal, columns in ((True, 1), (False, 4), (True, None)):
        assert not interface.forward_config("bfloat16", 128, causal, columns).early_scan
    monkeypatch.setenv(fwd.EARLY_SCAN_ENV, "1")
    on = interface.forward_config("bfloat16", 128, True, 1)
    assert on.early_scan
    assert on == fwd.FwdConfig(**{**on.__dict__, "early_scan": True})
    assert fwd.default_config("bf16", 64, None, True, 2, fast=False).early_scan  # both paths
    monkeypatch.setenv(fwd.EARLY_SCAN_ENV, "yes")
    with pytest.raises(ValueError, match=fwd.EARLY_SCAN_ENV):
        interface.forward_config("bfloat16", 128, True, 1)


def test_compile_check_builds_the_option_for_every_scan_kind():
    from paddle_flashmask.ops.cute import compile_check

    chosen = {v.label: v.config for v in compile_check.variants()}
    for label in ("fwd bfloat16 d128 causal-C1 early-scan", "fwd bfloat16 d128 bidir-C4 early-scan",
                  "fwd bfloat16 d128 causal early-scan", "fwd bfloat16 d64 causal-C2 early-scan",
                  "fwd bfloat16 d128 causal-C1 early-scan claimed-work-order"):
        assert chosen[label].early_scan, label
    with_ranges = chosen["fwd bfloat16 d128 causal-C1 early-scan"]
    assert with_ranges.tile_ranges and with_ranges.dynamic_schedule  # the scan reads the ranges


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
