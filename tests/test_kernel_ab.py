"""bench/kernel_ab.py on the CPU: its variant syntax, that each variant's environment is set only
around its own calls, and that a pattern matching no kernel is an error (the timing itself needs
the H200: scripts/gpu_session.sh calls 70-73)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import kernel_ab  # noqa: E402


def test_variant_syntax():
    assert kernel_ab.parse_variant("base:") == ("base", {})
    assert kernel_ab.parse_variant("ur:A_ENV=1,B_ENV=8") == ("ur", {"A_ENV": "1", "B_ENV": "8"})
    for bad in ("base", ":A=1", "x:A", "x:=1"):
        with pytest.raises(ValueError, match="--variant"):
            kernel_ab.parse_variant(bad)


def test_env_set_only_around_the_variants_calls(monkeypatch):
    monkeypatch.setenv("PFM_AB_KEPT", "outer")
    monkeypatch.delenv("PFM_AB_NEW", raising=False)
    seen = []
    run = kernel_ab.with_env({"PFM_AB_KEPT": "inner", "PFM_AB_NEW": "1"},
                             lambda: seen.append((os.environ["PFM_AB_KEPT"],
                                                  os.environ["PFM_AB_NEW"])))
    run()
    assert seen == [("inner", "1")]
    assert os.environ["PFM_AB_KEPT"] == "outer" and "PFM_AB_NEW" not in os.environ

    def fails():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        kernel_ab.with_env({"PFM_AB_KEPT": "inner"}, fails)()
    assert os.environ["PFM_AB_KEPT"] == "outer"


def test_a_pattern_matching_no_kernel_is_an_error(monkeypatch):
    monkeypatch.setattr(kernel_ab, "kernel_ops",
                        lambda fn, calls: [(0.0, 5.0, "other_kernel"), (6.0, 4.0, "bwd_sm90F_x")])
    assert kernel_ab.main_kernel_us(lambda: None, 2, "bwd_sm90") == 2.0
    with pytest.raises(RuntimeError, match="fwd_sm90"):
        kernel_ab.main_kernel_us(lambda: None, 2, "fwd_sm90")


def test_per_kernel_split_of_the_matched_kernels(monkeypatch):
    ops = [(0.0, 5.0, "other_kernel"), (6.0, 4.0, "bwd_sm90_main"), (9.0, 3.0, "bwd_pre"),
           (12.0, 2.0, "bwd_sm90_main")]
    monkeypatch.setattr(kernel_ab, "kernel_ops", lambda fn, calls: ops)
    split: dict = {}
    assert kernel_ab.main_kernel_us(lambda: None, 2, "bwd", split) == 4.5
    assert kernel_ab.main_kernel_us(lambda: None, 2, "bwd", split) == 4.5
    # per call, summed over a call's launches of the same kernel; one sample per timing run
    assert split == {"bwd_sm90_main": [3.0, 3.0], "bwd_pre": [1.5, 1.5]}


def test_kernel_split_text_shortens_generated_names():
    text = kernel_ab.kernel_split_text({
        "kernel_cutlass_dq_kernel_paddle_flashmaskopscuteflash_bwd_prepost_Post": 191.46,
        "kernel_cutlass_kernel_paddle_flashmaskopscuteflash_bwd_sm90FlashMaskBwdSm90_obj": 3821.0})
    assert text == ("dq_kernel flash_bwd_prepost_Post 191.5, "
                    "kernel flash_bwd_sm90FlashMaskBwdSm90_ob 3821.0")  # 40 characters


def test_deterministic_pseudo_switch():
    env, det = kernel_ab.split_deterministic("d", {"deterministic": "1", "A_ENV": "2"}, "bwd")
    assert (env, det) == ({"A_ENV": "2"}, True)
    assert kernel_ab.split_deterministic("b", {"A_ENV": "2"}, "bwd") == ({"A_ENV": "2"}, False)
    with pytest.raises(ValueError, match="deterministic=0 or 1"):
        kernel_ab.split_deterministic("d", {"deterministic": "yes"}, "bwd")
    with pytest.raises(ValueError, match="--pass bwd"):
        kernel_ab.split_deterministic("d", {"deterministic": "1"}, "fwd")
