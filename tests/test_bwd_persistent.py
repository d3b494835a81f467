"""The backward's persistent grid (BwdConfig.persistent_ctas), on the CPU: the config rule, the
workspace, and the host API up to the launches (real sm_90a compile; the DSL's own argument
packing checks the extra counter argument)."""
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

    monkeypatch.setenv(bwd.PERSISTENT_ENV, "0")
    assert interface.backward_config("bfloat16", 128, True, 1, num_sms=132).persistent_ctas == 0
    monkeypatch.delenv(bwd.PERSISTENT_ENV, raising=False)  # the default: on
    on = interface.backward_config("bfloat16", 128, True, 1, num_sms=114)
    assert on.persistent and on.persistent_ctas == 114
    # the deterministic mode too, in one claim pass (test_deterministic_rules)
    assert interface.backward_config("bfloat16", 128, True, 1, deterministic=True).persistent
    with pytest.raises(ValueError, match="persistent_ctas"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, persistent_ctas=-1)
    assert bwd.workspace_shapes(on, 1, 300, 300, 4, 4)["tile_counter"] == ((1,), "int32")
    off = bwd.BwdConfig("bfloat16", 128, 128, True, 1)
    assert "tile_counter" not in bwd.workspace_shapes(off, 1, 300, 300, 4, 4)


@pytest.mark.parametrize("hk", [4, 2])
def test_host_api_resets_the_counter_and_packs_its_argument(monkeypatch, hk):
    pytest.importorskip("torch")
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import interface

    monkeypatch.setenv(bwd.PERSISTENT_ENV, "1")
    monkeypatch.setenv(bwd.GQA_IN_CTA_ENV, "1")
    # the counter alone (the first-store flags add two arguments: tests/test_bwd_first_store.py)
    monkeypatch.setenv(bwd.FIRST_STORE_ENV, "0")
    api = HostApiHarness(monkeypatch, num_sms=132)
    api.backward(h=4, hk=hk)
    assert api.launched[-3:] == ["flash_bwd_pre", "flash_bwd_sm90", "flash_bwd_post"]
    assert len(api.counter_resets) == 1  # zeroed once, before the main kernel
    # the stream's work counter, shared with the forward's dynamic schedule (not a new buffer)
    assert api.counter_resets[0] is interface.schedule_counter(0, 0)
    assert len(api.last_args("flash_bwd_sm90")) == 22  # the 21 of every variant + the counter


def test_key_major_claim_order_switch(monkeypatch):
    """The key-tile-major claim order (a compile-time field): by default for masks with columns
    (session 15's A/B), env PADDLE_FLASHMASK_BWD_KEY_MAJOR=1/0 forces it; never without a
    persistent grid."""
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd.KEY_MAJOR_ENV, raising=False)
    monkeypatch.delenv(bwd.CLAIM_PASSES_ENV, raising=False)
    assert interface.backward_config("bfloat16", 128, True, 1).key_major
    walk = interface.backward_config("bfloat16", 128, False, 4, gqa=True)
    assert walk.gqa_in_cta and not walk.key_major  # the GQA head walk stays head-major ...
    # ... except over causal masks at D = 128 with claims by work class (session 16)
    assert bwd.default_key_major(1, claim_passes=3, gqa_in_cta=True, head_dim=128, causal=True)
    for passes, d, causal in ((1, 128, True), (3, 64, True), (3, 256, True), (3, 128, False)):
        assert not bwd.default_key_major(2, passes, True, d, causal), (passes, d, causal)
    assert not bwd.default_key_major(None, 3, True, 128, True)  # no columns: never
    monkeypatch.setenv(bwd.GQA_IN_CTA_ENV, "0")  # per-query-head CTAs, as MHA
    assert interface.backward_config("bfloat16", 128, False, 4, gqa=True).key_major
    monkeypatch.delenv(bwd.GQA_IN_CTA_ENV)
    assert not interface.backward_config("bfloat16", 128, True, None).key_major
    assert not interface.backward_config("bfloat16", 128, False, None).key_major
    assert not bwd.default_key_major(2, claim_passes=3)
    monkeypatch.setenv(bwd.KEY_MAJOR_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1).key_major
    monkeypatch.setenv(bwd.KEY_MAJOR_ENV, "yes")
    with pytest.raises(ValueError, match=bwd.KEY_MAJOR_ENV):
        interface.backward_config("bfloat16", 128, True, 1)
    monkeypatch.setenv(bwd.KEY_MAJOR_ENV, "1")
    assert interface.backward_config("bfloat16", 128, True, None).key_major
    # forced, the deterministic mode's persistent grid takes it too (each head still last first)
    assert interface.backward_config("bfloat16", 128, True, 1, deterministic=True).key_major
    monkeypatch.setenv(bwd.DET_PERSISTENT_ENV, "0")  # one CTA per key tile: no claim order
    assert not interface.backward_config("bfloat16", 128, True, 1, deterministic=True).key_major
    monkeypatch.delenv(bwd.DET_PERSISTENT_ENV)
    with pytest.raises(ValueError, match="key_major"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, key_major=True)


def test_det_dq_chains_switch_and_workspace(monkeypatch):
    """env PADDLE_FLASHMASK_BWD_DET_CHAINS=2 gives the deterministic backward two dQ chains where
    dQ is staged in smem (not D = 256 with two Q/dO stages, not without determinism); the dQ
    accumulator and the semaphores get one row block per chain; bad values name the switch."""
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd.DET_CHAINS_ENV, raising=False)
    monkeypatch.delenv(bwd.DET_CLASS_CHAINS_ENV, raising=False)
    assert interface.backward_config("bfloat16", 128, False, None, deterministic=True
                                     ).dq_chains == 1
    monkeypatch.setenv(bwd.DET_CHAINS_ENV, "2")
    two = interface.backward_config("bfloat16", 128, True, 1, deterministic=True)
    assert two.dq_chains == 2 and not two.class_chains  # parity chains, as forced
    assert interface.backward_config("bfloat16", 128, True, 1).dq_chains == 1
    monkeypatch.setenv(bwd.D256_STAGES_ENV, "2")  # dQ by atomics: one chain
    assert interface.backward_config("bfloat16", 256, True, 1, deterministic=True).dq_chains == 1
    monkeypatch.delenv(bwd.D256_STAGES_ENV)
    assert interface.backward_config("bfloat16", 256, True, 1, deterministic=True).dq_chains == 2
    ws = bwd.workspace_shapes(two, 2, 300, 300, 4, 4)
    assert ws["dq_accum"] == ((2, 8, 320, 128), "float32")
    assert ws["semaphores"] == ((2, 8, 5), "int32")
    assert two.prepost.dq_chains == 2
    with pytest.raises(ValueError, match="dq_chains"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, dq_chains=2)  # not deterministic
    with pytest.raises(ValueError, match="dq_chains"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, deterministic=True, dq_chains=3)
    monkeypatch.setenv(bwd.DET_CHAINS_ENV, "4")
    with pytest.raises(ValueError, match=bwd.DET_CHAINS_ENV):
        interface.backward_config("bfloat16", 128, True, 1, deterministic=True)
    monkeypatch.setenv(bwd.DET_CHAINS_ENV, "1")  # one chain cannot hold two classes
    monkeypatch.setenv(bwd.DET_CLASS_CHAINS_ENV, "1")
    with pytest.raises(ValueError, match=bwd.DET_CLASS_CHAINS_ENV):
        interface.backward_config("bfloat16", 128, True, 1, deterministic=True)


def test_det_lazy_release_switch(monkeypatch):
    """env PADDLE_FLASHMASK_BWD_DET_LAZY_RELEASE=1: the deterministic backward publishes each
    dQ add at the writer's next tile (dQ staged in smem only); never without determinism."""
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd.LAZY_RELEASE_ENV, raising=False)
    assert not interface.backward_config("bfloat16", 128, True, 1, deterministic=True).lazy_release
    monkeypatch.setenv(bwd.LAZY_RELEASE_ENV, "1")
    assert interface.backward_config("bfloat16", 128, True, 1, deterministic=True).lazy_release
    assert not interface.backward_config("bfloat16", 128, True, 1).lazy_release
    with pytest.raises(ValueError, match="lazy_release"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, lazy_release=True)


def test_deterministic_rules(monkeypatch):
    """Deterministic mode: the persistent grid in one claim pass (each head's key tiles last
    first, head-major unless forced), one CTA per key tile with
    PADDLE_FLASHMASK_BWD_DET_PERSISTENT=0; two dQ chains for bidirectional masks with columns
    (session 16)."""
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.DET_PERSISTENT_ENV, bwd.PERSISTENT_ENV, bwd.KEY_MAJOR_ENV,
                 bwd.CLAIM_PASSES_ENV, bwd.DET_CHAINS_ENV, bwd.DET_CLASS_CHAINS_ENV):
        monkeypatch.delenv(name, raising=False)
    det = interface.backward_config("bfloat16", 128, False, None, deterministic=True)
    assert det.persistent and det.claim_passes == 1 and det.dq_chains == 1
    det = interface.backward_config("bfloat16", 128, True, 1, deterministic=True)  # session 17:
    assert det.persistent and det.class_chains and (det.claim_passes, det.dq_chains) == (2, 2)
    monkeypatch.setenv(bwd.DET_PERSISTENT_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1, deterministic=True).persistent
    assert interface.backward_config("bfloat16", 128, True, 1).persistent  # the default's own
    assert interface.backward_config("bfloat16", 128, False, 2, deterministic=True).dq_chains == 2
    assert interface.backward_config("bfloat16", 128, False, None, deterministic=True).dq_chains == 1
    assert interface.backward_config("bfloat16", 128, False, 2).dq_chains == 1  # not deterministic
    monkeypatch.setenv(bwd.DET_CHAINS_ENV, "1")
    assert interface.backward_config("bfloat16", 128, False, 2, deterministic=True).dq_chains == 1
    monkeypatch.setenv(bwd.DET_PERSISTENT_ENV, "1")
    monkeypatch.setenv(bwd.CLAIM_PASSES_ENV, "3")  # the chain's order: one pass regardless
    det = interface.backward_config("bfloat16", 128, True, 1, deterministic=True)
    assert det.persistent and det.claim_passes == 1 and not det.key_major
    monkeypatch.setenv(bwd.KEY_MAJOR_ENV, "1")
    assert interface.backward_config("bfloat16", 128, True, 1, deterministic=True).key_major
    monkeypatch.setenv(bwd.PERSISTENT_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1, deterministic=True).persistent
    with pytest.raises(ValueError, match="claim_passes=1 when deterministic"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, deterministic=True, persistent_ctas=132,
                      claim_passes=3)
