"""Claims by work class from a class-sorted list (``BwdConfig.claim_list``, ``bwd_claim_list``)
and the deterministic dQ chains' first store (``dq_first_store`` with ``deterministic``): where the
host turns them on, what they require, the workspace they add, and the host oracle of the list.
The kernels are compiled by the compile check (``claim-list`` / ``bwd-claims`` variants) and run
on the H200 by ``tests/gpu/bwd_check.py``, which checks every built list against
:func:`reference_classes` / :func:`check_claim_list`."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from paddle_flashmask import semantics
from paddle_flashmask.ops.cute import bwd_claim_list as claims
from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd, interface
from paddle_flashmask.ops.cute import tile_scheduler as sched


@pytest.fixture(autouse=True)
def _no_switches(monkeypatch):
    for name in bwd.ENV_SWITCHES:
        monkeypatch.delenv(name, raising=False)


def config(causal, columns, gqa=False, deterministic=False):
    return interface.backward_config("bfloat16", 128, causal, columns, gqa=gqa,
                                     deterministic=deterministic)


def test_deterministic_class_chains_claim_from_the_list(monkeypatch):
    cfg = config(True, 1, deterministic=True)
    assert cfg.class_chains and cfg.claim_passes == 2 and cfg.claim_list
    monkeypatch.setenv(bwd.CLAIM_LIST_ENV, "0")
    off = config(True, 1, deterministic=True)
    assert off.class_chains and not off.claim_list
    # one claim pass (bidirectional deterministic: parity chains): nothing to sort
    assert not config(False, 2, deterministic=True).claim_list


def test_claim_list_needs_class_passes():
    cfg = config(True, 1)
    with pytest.raises(ValueError, match="claim_list: expected claim_passes > 1"):
        dataclasses.replace(cfg, claim_passes=1, claim_list=True)
    assert not dataclasses.replace(cfg, claim_passes=3, claim_list=True).one_cta_per_tile(
    ).claim_list


def test_workspace_has_the_list_and_zeroed_chunk_counts():
    cfg = dataclasses.replace(config(True, 1, gqa=True), gqa_in_cta=True, claim_passes=3,
                              claim_list=True)
    shapes = bwd.workspace_shapes(cfg, 2, 3000, 2500, 16, 8)
    items = -(-2500 // cfg.tile_n) * 8 * 2  # KV heads: the walk's items
    assert shapes["claim_order"] == ((items,), "int32")
    assert shapes["item_classes"] == ((items,), "int32")
    assert shapes["chunk_counts"] == ((-(-items // claims.CHUNK), 4), "int32")
    assert "claim_order" not in bwd.workspace_shapes(config(True, 1), 2, 3000, 2500, 16, 8)


def test_reference_list_is_the_stable_class_partition():
    rng = np.random.default_rng(7)
    classes = rng.integers(0, 3, size=2500)
    entries = claims.reference_claim_list(classes)
    positions = [claims.entry_item(e) for e in entries]
    got_classes = [claims.entry_class(e) for e in entries]
    assert sorted(positions) == list(range(classes.size))
    assert got_classes == sorted(got_classes)  # class 0 first
    for c in range(3):  # list order inside a class (the deterministic chains need it)
        inside = [p for p, k in zip(positions, got_classes) if k == c]
        assert inside == sorted(inside) and all(classes[p] == c for p in inside)
    assert claims.check_claim_list(entries, classes, classes) == []
    swapped = list(entries)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    assert any("stable" in p for p in claims.check_claim_list(swapped, classes, classes))
    wrong = classes.copy()
    wrong[5] = (wrong[5] + 1) % 3
    assert any("item_classes" in p for p in claims.check_claim_list(entries, wrong, classes))


@pytest.mark.parametrize("key_major, deterministic", [(False, False), (True, False),
                                                       (False, True)])
def test_reference_classes_follow_the_list_decode(key_major, deterministic):
    """Plain causal, Sq = Sk = 1024, tile_m 64 / tile_n 128: key tile n visits the 16 - 2n query
    tiles from its diagonal on, so its class depends on n alone; the list's decode (head-major
    or key-major, last key tile first in deterministic mode) decides where each lands."""
    if deterministic:  # class chains: two passes
        cfg = dataclasses.replace(config(True, None, deterministic=True), key_major=key_major)
    else:
        cfg = dataclasses.replace(config(True, None), persistent_ctas=132, claim_passes=3,
                                  key_major=key_major, claim_list=True)
    assert cfg.claim_list
    b, s, h = 2, 1024, 3
    num_n, num_m = s // cfg.tile_n, s // cfg.tile_m
    got = claims.reference_classes(cfg, None, b, s, s, h, h)
    for t in range(got.size):
        if key_major:
            n = (t // h) % num_n
        else:
            n = t % num_n
        if deterministic:
            n = num_n - 1 - n
        assert got[t] == sched.claim_pass(num_m - 2 * n, num_m, cfg.claim_passes), t


def test_reference_classes_use_each_heads_mask():
    """Documents differ per mask head: each list position takes its own head's visited count
    (the count is checked against semantics.classify_tiles per key tile)."""
    rng = np.random.default_rng(3)
    b, hm, h, s = 1, 2, 4, 2048
    idx = np.zeros((b, hm, s, 1), np.int32)
    for head in range(hm):
        cuts = np.sort(rng.choice(np.arange(128, s, 128), size=3 + head, replace=False))
        ends = np.r_[cuts, s]
        starts = np.r_[0, cuts]
        for lo, hi in zip(starts, ends):
            idx[0, head, lo:hi, 0] = hi  # causal documents: a key is masked from its doc's end
    cfg = dataclasses.replace(config(True, 1), claim_passes=3, claim_list=True, key_major=False)
    got = claims.reference_classes(cfg, idx, b, s, s, h, h)
    tiles = semantics.classify_tiles(semantics.tile_summary(idx, cfg.tile_n), True, s, cfg.tile_m)
    num_n, num_m = tiles.shape[3], tiles.shape[2]
    for t in range(got.size):
        n, y = t % num_n, t // num_n
        visited = int((tiles[0, y // (h // hm), :, n] != semantics.SKIP).sum())
        assert got[t] == sched.claim_pass(visited, num_m, 3)
    assert len(set(got.tolist())) > 1


def test_deterministic_first_store_uses_the_semaphores(monkeypatch):
    det = config(True, 1, deterministic=True)
    assert det.dq_first_store and not det.first_store_flags
    shapes = bwd.workspace_shapes(det, 2, 1000, 1000, 4, 4)
    assert "dq_flags" not in shapes and "semaphores" in shapes
    assert det.prepost.first_store and det.prepost.deterministic
    default = config(True, 1)
    assert default.first_store_flags and "dq_flags" in bwd.workspace_shapes(default, 2, 1000,
                                                                            1000, 4, 4)
    monkeypatch.setenv(bwd.DET_FIRST_STORE_ENV, "0")
    assert not config(True, 1, deterministic=True).dq_first_store
    assert config(True, 1).dq_first_store  # the default mode keeps its own switch


@pytest.mark.parametrize("deterministic", [False, True])
def test_host_api_builds_the_list_before_the_main_kernel(monkeypatch, deterministic):
    """The host API up to the launches (real sm_90a compiles; the DSL's argument packing counts
    and types every argument): the list builder runs between the preprocess and the main
    kernel, with its workspace, and the main kernel gets the list as its last argument."""
    pytest.importorskip("torch")
    from host_api_harness import HostApiHarness

    api = HostApiHarness(monkeypatch, num_sms=132)
    api.backward(h=4, deterministic=deterministic)  # 12 key tiles on 132 CTAs: class claims
    assert api.launched[-4:] == ["flash_bwd_pre", "bwd_claim_list", "flash_bwd_sm90",
                                 "flash_bwd_post"]
    items = -(-300 // 128) * 4
    assert (items,) in api.scratch and (-(-items // claims.CHUNK), 4) in api.scratch
    order = api.last_args("bwd_claim_list")[4]  # pointers, compared by their address
    assert str(api.last_args("flash_bwd_sm90")[-1]) == str(order)
    pre, post = api.last_args("flash_bwd_pre"), api.last_args("flash_bwd_post")
    if deterministic:  # first store: no flags; the postprocess reads the chains' semaphores
        assert pre[9] is None and pre[8] is not None and str(post[-1]) == str(pre[8])
