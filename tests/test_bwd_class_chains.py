"""Deterministic dQ chains by work class (``BwdConfig.class_chains``): where the host turns them
on, what they require, and the workspace they add. The kernel itself is compiled by the compile
check (``class-chains`` variants) and checked on the H200 by ``tests/gpu/bwd_check.py`` (calls
87-90: oracle 28/28, bit-identical reruns 7/7 with them forced on)."""
from __future__ import annotations

import dataclasses

import pytest

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd, interface
from paddle_flashmask.ops.cute import tile_scheduler as sched


@pytest.fixture(autouse=True)
def _no_switches(monkeypatch):
    for name in (bwd.DET_CLASS_CHAINS_ENV, bwd.DET_CLASS_RATIO_ENV, bwd.DET_PERSISTENT_ENV,
                 bwd.DET_CHAINS_ENV, bwd.GQA_IN_CTA_ENV):
        monkeypatch.delenv(name, raising=False)


def config(causal, columns, gqa=False, deterministic=True):
    return interface.backward_config("bfloat16", 128, causal, columns, gqa=gqa,
                                     deterministic=deterministic)


@pytest.mark.parametrize("causal, columns, gqa, want", [
    (True, 1, False, True),     # causal documents, global + window, shared question (MHA)
    (True, 2, False, True),     # sliding window (MHA)
    (True, None, False, True),  # plain causal
    (True, None, True, True),   # plain causal, GQA
    (True, 1, True, False),     # GQA with columns: packed SFT documents were slower
    (False, 2, False, False),   # bidirectional: parity chains
    (False, None, False, False),  # full: one chain
])
def test_default_rule(causal, columns, gqa, want):
    cfg = config(causal, columns, gqa)
    assert cfg.class_chains is want
    if want:  # two chains, claimed in two passes (heavy tiles first)
        assert (cfg.dq_chains, cfg.claim_passes, cfg.class_ratio) == (2, 2, 4)
    elif not causal and columns is not None:
        assert cfg.dq_chains == 2 and cfg.claim_passes == 1  # parity chains
    else:
        assert cfg.dq_chains == 1 and cfg.claim_passes == 1


def test_only_deterministic_on_a_persistent_grid(monkeypatch):
    assert not config(True, 1, deterministic=False).class_chains
    monkeypatch.setenv(bwd.DET_PERSISTENT_ENV, "0")
    cfg = config(True, 1)
    assert not cfg.class_chains and not cfg.persistent


def test_env_forces_where_it_applies(monkeypatch):
    monkeypatch.setenv(bwd.DET_CLASS_CHAINS_ENV, "1")
    assert config(False, 2).class_chains and config(True, 1, gqa=True).class_chains
    assert not config(True, 1, deterministic=False).class_chains  # never outside the mode
    monkeypatch.setenv(bwd.DET_CLASS_CHAINS_ENV, "0")
    assert not config(True, None).class_chains
    monkeypatch.setenv(bwd.DET_CLASS_CHAINS_ENV, "yes")
    with pytest.raises(ValueError, match=bwd.DET_CLASS_CHAINS_ENV):
        config(True, None)


def test_ratio_switch(monkeypatch):
    monkeypatch.setenv(bwd.DET_CLASS_RATIO_ENV, "2")
    assert config(True, 1).class_ratio == 2
    monkeypatch.setenv(bwd.DET_CLASS_RATIO_ENV, "3")
    with pytest.raises(ValueError, match=bwd.DET_CLASS_RATIO_ENV):
        config(True, 1)


def test_claim_class_threshold_follows_the_ratio():
    # heavy (class 0) = visits at least num / ratio of the query tiles
    assert [sched.claim_pass(v, 64, 2) for v in (15, 16, 63)] == [1, 0, 0]
    assert [sched.claim_pass(v, 64, 2, ratio=2) for v in (31, 32)] == [1, 0]


def test_config_rejects_class_chains_without_their_prerequisites():
    cfg = config(True, 1)
    for bad in (dict(deterministic=False), dict(claim_passes=1), dict(dq_chains=1),
                dict(class_ratio=3)):
        with pytest.raises(ValueError, match="class_chains|claim_passes|class_ratio|dq_chains"):
            dataclasses.replace(cfg, **bad)


def test_one_cta_per_tile_drops_them():
    cfg = config(True, 1).one_cta_per_tile()
    assert (cfg.class_chains, cfg.persistent, cfg.claim_passes, cfg.dq_chains) == (False, False,
                                                                                    1, 1)


def test_workspace_holds_the_class_records():
    cfg = config(True, 1)
    shapes = bwd.workspace_shapes(cfg, 2, 1000, 1000, 4, 4)
    assert shapes["tile_classes"] == ((2, 4, -(-1000 // cfg.tile_n)), "int32")
    assert shapes["semaphores"][0] == (2, 8, -(-1000 // cfg.tile_m))  # both chains
    assert "tile_classes" not in bwd.workspace_shapes(config(False, 2), 2, 1000, 1000, 4, 4)


def test_dkv_chain_switch_and_workspace(monkeypatch):
    """Deterministic GQA's ordered group dK/dV sum (BwdConfig.dkv_chain): off by default (slower
    on the H200), env-switched where it applies; it replaces the fp32 per-query-head partials."""
    monkeypatch.delenv(bwd.DET_DKV_CHAIN_ENV, raising=False)
    assert not config(True, 1, gqa=True).dkv_chain
    monkeypatch.setenv(bwd.DET_DKV_CHAIN_ENV, "1")
    cfg = config(True, 1, gqa=True)
    assert cfg.dkv_chain and not cfg.dkv_partials and not cfg.prepost.gqa  # no reduction
    assert not config(True, 1).dkv_chain  # MHA: nothing to sum
    assert not config(True, 1, gqa=True, deterministic=False).dkv_chain
    # GQA with columns and class chains forced: a per-head mask could split a group over the
    # claim passes, so the class chains give way
    monkeypatch.setenv(bwd.DET_CLASS_CHAINS_ENV, "1")
    cfg = config(True, 1, gqa=True)
    assert cfg.dkv_chain and not cfg.class_chains
    assert config(True, None, gqa=True).class_chains  # no mask: both
    with pytest.raises(ValueError, match="dkv_chain"):
        dataclasses.replace(cfg, class_chains=True, dq_chains=2, claim_passes=2)
    shapes = bwd.workspace_shapes(cfg, 2, 1000, 900, 8, 2)
    assert shapes["dk_sum"] == ((2, 900, 2, 128), "float32")
    assert shapes["dkv_flags"] == ((2, 2, -(-900 // cfg.tile_n)), "int32")
    assert "dk_part" not in shapes
    with pytest.raises(ValueError, match="dkv_chain"):
        dataclasses.replace(config(True, 1), dkv_chain=True)  # MHA


def test_dkv_red_switch_and_postprocess(monkeypatch):
    """dkv_chain through L2 reduce-adds (BwdConfig.dkv_red, env value ``red``): the group sums
    replace the partials, and the postprocess converts them (one member per group) where the
    register chain's last head wrote dK/dV itself."""
    monkeypatch.setenv(bwd.DET_DKV_CHAIN_ENV, "1")
    chain = config(True, 1, gqa=True)
    assert chain.dkv_chain and not chain.dkv_red and not chain.prepost.dkv_sums
    monkeypatch.setenv(bwd.DET_DKV_CHAIN_ENV, "red")
    cfg = config(True, 1, gqa=True)
    assert cfg.dkv_chain and cfg.dkv_red and not cfg.dkv_partials
    post = cfg.prepost
    assert post.dkv_sums and not post.gqa and post.has_post
    assert bwd.workspace_shapes(cfg, 2, 1000, 900, 8, 2)["dk_sum"] == ((2, 900, 2, 128), "float32")
    assert not config(True, 1, gqa=True, deterministic=False).dkv_red
    assert not config(True, 1).dkv_red  # MHA
    with pytest.raises(ValueError, match="dkv_red"):
        dataclasses.replace(chain, dkv_chain=False, dkv_red=True)
    monkeypatch.setenv(bwd.DET_DKV_CHAIN_ENV, "yes")
    with pytest.raises(ValueError, match=bwd.DET_DKV_CHAIN_ENV):
        config(True, 1, gqa=True)


def test_main_tail_leaves_out_unused_trailing_arguments():
    det = config(True, 1)  # persistent, class chains
    det = dataclasses.replace(det, claim_list=False)
    assert bwd.main_tail(det, "counter", "pending", "dq", "classes", ("dk", "dv", "f"),
                         "order") == ["counter", None, None, "classes"]
    listed = dataclasses.replace(det, claim_list=True)  # the list comes last, after dK/dV's
    assert bwd.main_tail(listed, "counter", "pending", "dq", "classes", ("dk", "dv", "f"),
                         "order") == ["counter", None, None, "classes", None, None, None, "order"]
    plain = config(True, 1, deterministic=False).one_cta_per_tile()
    want = [None, "pending"] if plain.first_store_flags else []  # no counter without the grid
    assert bwd.main_tail(plain, "counter", "pending", "dq", "classes", (), "order") == want


def test_host_api_dkv_red_hands_the_sums_to_the_postprocess(monkeypatch):
    """dkv_red through the host API: the main kernel gets the sums and flags as its dK/dV
    trailing arguments, and the postprocess converts the sums ([B, Sk, Hk, D]) into dk / dv."""
    pytest.importorskip("torch")
    from host_api_harness import check_group_sums_handed_over, deterministic_gqa_backward

    api = deterministic_gqa_backward(monkeypatch, bwd.DET_DKV_CHAIN_ENV, "red")
    check_group_sums_handed_over(api, (1, 300, 2, 128))  # [B, Sk, Hk, D]
