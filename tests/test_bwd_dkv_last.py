"""Deterministic GQA dK/dV summed by the group's last CTA (``BwdConfig.dkv_last``): where the host
turns it on, what it requires, its workspace, and the host API up to the launches (real sm_90a
compiles and argument packing). Checked on the H200 by ``tests/gpu/bwd_check.py`` (oracle and
bit-identical reruns with it on: call 96; off by default since, slower)."""
from __future__ import annotations

import dataclasses

import pytest

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd, interface


@pytest.fixture(autouse=True)
def _no_switches(monkeypatch):
    for name in bwd.ENV_SWITCHES:
        monkeypatch.delenv(name, raising=False)


def config(gqa=True, deterministic=True, columns=1):
    return interface.backward_config("bfloat16", 128, True, columns, gqa=gqa,
                                     deterministic=deterministic)


def test_default_rule(monkeypatch):
    off = config()  # off by default: slower than the partials' postprocess (H200 call 96)
    assert not off.dkv_last and off.dkv_partials and off.prepost.gqa
    monkeypatch.setenv(bwd.DET_DKV_LAST_ENV, "1")
    cfg = config()
    assert cfg.dkv_last and not cfg.dkv_partials and cfg.dkv_group_sum
    assert not cfg.prepost.gqa  # nothing left for the postprocess to reduce
    assert not config(deterministic=False).dkv_last  # the default mode walks the group
    assert not config(gqa=False).dkv_last
    monkeypatch.setenv(bwd.DET_DKV_CHAIN_ENV, "1")  # the ordered chain, when asked for, wins
    chain = config()
    assert chain.dkv_chain and not chain.dkv_last


def test_requirements(monkeypatch):
    monkeypatch.setenv(bwd.DET_DKV_LAST_ENV, "1")
    cfg = config()
    for bad in (dict(gqa_in_cta=True), dict(dkv_chain=True)):
        with pytest.raises(ValueError, match="dkv_last"):
            dataclasses.replace(cfg, **bad)
    with pytest.raises(ValueError, match="dkv_last"):
        dataclasses.replace(config(deterministic=False), dkv_last=True)


def test_workspace_has_partials_and_arrival_counts(monkeypatch):
    monkeypatch.setenv(bwd.DET_DKV_LAST_ENV, "1")
    shapes = bwd.workspace_shapes(config(), 2, 900, 700, 16, 4)
    assert shapes["dk_part"] == ((2, 700, 16, 128), "float32")
    assert shapes["dv_part"] == ((2, 700, 16, 128), "float32")
    assert shapes["dkv_flags"] == ((2, 4, -(-700 // 128)), "int32")
    assert "dk_sum" not in shapes


def test_main_tail_passes_partials_and_flags(monkeypatch):
    monkeypatch.setenv(bwd.DET_DKV_LAST_ENV, "1")
    cfg = dataclasses.replace(config(), claim_list=False)
    tail = bwd.main_tail(cfg, "counter", "pending", "dq", "classes", ("dk", "dv", "flags"),
                         "order")
    assert tail[-3:] == ["dk", "dv", "flags"]


def test_host_api_sums_in_the_main_kernel(monkeypatch):
    pytest.importorskip("torch")
    from host_api_harness import deterministic_gqa_backward

    api = deterministic_gqa_backward(monkeypatch, bwd.DET_DKV_LAST_ENV, "1")
    post = api.last_args("flash_bwd_post")
    assert post[2] is None and post[4] is None  # no partials for the postprocess to reduce
    main = api.last_args("flash_bwd_sm90")
    assert all(a is not None for a in main[-3:])  # partials, partials, arrival counts
    items = -(-300 // 128)
    assert (1, 300, 4, 128) in api.scratch and (1, 2, items) in api.scratch
