"""The dQ accumulator without zeroing (BwdConfig.dq_first_store), on the CPU: the config rule, the
workspace, and the host API up to the launches (real sm_90a compile of the preprocess, main
kernel and postprocess, whose argument packing checks the flags). The numbers are checked on the
H200 (tests/gpu/bwd_check.py; on by default since session 8)."""
from __future__ import annotations

import pytest

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd



@pytest.fixture(autouse=True)
def _per_pass_claims(monkeypatch):
    """These tests read the per-pass path's argument lists; the class-sorted claim list (its own
    launch and last main-kernel argument) is tested in test_bwd_claim_list.py."""
    monkeypatch.setenv(bwd.CLAIM_LIST_ENV, "0")

def test_config_rule_and_workspace(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.FIRST_STORE_ENV, bwd.FUSED_DQ_ENV, bwd.D256_STAGES_ENV, bwd.PERSISTENT_ENV):
        monkeypatch.delenv(name, raising=False)
    assert interface.backward_config("bfloat16", 128, True, 1).dq_first_store  # on by default
    monkeypatch.setenv(bwd.FIRST_STORE_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1).dq_first_store
    monkeypatch.setenv(bwd.FIRST_STORE_ENV, "1")
    on = interface.backward_config("bfloat16", 128, True, 1)
    assert on.dq_first_store and on.prepost.first_store and on.prepost.has_post
    assert interface.backward_config("bfloat16", 256, False, 2, gqa=True).dq_first_store
    # deterministic mode: each dQ chain's first adder stores (its own switch, no flags)
    det = interface.backward_config("bfloat16", 128, True, 1, deterministic=True)
    assert det.dq_first_store and not det.first_store_flags
    # fused_dq counts adds down on a zeroed accumulator: it wins
    monkeypatch.setenv(bwd.FUSED_DQ_ENV, "1")
    assert not interface.backward_config("bfloat16", 128, True, 1).dq_first_store
    monkeypatch.delenv(bwd.FUSED_DQ_ENV)
    # two Q/dO stages at D = 256: dQ is added by atomics from registers, nothing to store first
    monkeypatch.setenv(bwd.D256_STAGES_ENV, "2")
    assert not interface.backward_config("bfloat16", 256, True, 1).dq_first_store
    with pytest.raises(ValueError, match="dq_first_store"):  # dQ by atomics from registers
        bwd.BwdConfig("bfloat16", 256, 256, True, 1, qdo_stages=2, dq_first_store=True)
    ws = bwd.workspace_shapes(on, 2, 300, 280, 4, 4)
    assert ws["dq_flags"] == ((2, 4, 5), "int32")
    assert "dq_flags" not in bwd.workspace_shapes(bwd.BwdConfig("bfloat16", 128, 128, True, 1),
                                                  2, 300, 280, 4, 4)


@pytest.mark.parametrize("persistent", ["1", "0"])
def test_host_api_passes_the_flags_to_all_three_kernels(monkeypatch, persistent):
    pytest.importorskip("torch")
    from host_api_harness import HostApiHarness

    monkeypatch.setenv(bwd.FIRST_STORE_ENV, "1")
    monkeypatch.setenv(bwd.PERSISTENT_ENV, persistent)
    monkeypatch.delenv(bwd.FUSED_DQ_ENV, raising=False)
    api = HostApiHarness(monkeypatch, num_sms=132)
    api.backward(h=4)
    assert api.launched[-3:] == ["flash_bwd_pre", "flash_bwd_sm90", "flash_bwd_post"]
    pre_args, main_args, post_args = (api.last_args(name) for name in
                                      ("flash_bwd_pre", "flash_bwd_sm90", "flash_bwd_post"))
    flags = pre_args[9]
    assert flags is not None and pre_args[10] is None  # the flags; no dq for the preprocess
    # pointers, compared by their address: (counter,) flags; no dq (main_tail drops unused ones)
    assert str(main_args[-1]) == str(flags)
    assert len(main_args) == 23  # the 21 of every variant + counter (None without), flags
    assert str(post_args[-1]) == str(flags)
    assert (1, 4, 5) in api.scratch  # dq_flags: [B, H, query tiles]
