"""CPU tests of the forward's work-ordered scheduler (``FwdConfig.work_order``, off by default).

* the numpy reference of the ordering (``work_order_kernel.reference_weights`` from
  ``semantics.classify_tiles``) against a brute-force count from the dense mask, where the tile
  predicates are exact (plain causal / full attention, tile-aligned documents);
* the checker the GPU script uses (``tests/gpu/fwd_check.py --work-order``) accepts a correct order
  and rejects wrong ones;
* the snake map of the static striding is a bijection;
* the ordering kernels compile for sm_90a, and the host API, with the work order switched on,
  hands the compiled kernels (work order + forward) arguments their own packing accepts.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cutlass")
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from paddle_flashmask import semantics  # noqa: E402
from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd  # noqa: E402
from paddle_flashmask.ops.cute import tile_scheduler as sched  # noqa: E402
from paddle_flashmask.ops.cute import work_order_kernel as wo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))


def _brute_force_weights(allowed: np.ndarray, sq: int, sk: int, tm: int, tn: int) -> np.ndarray:
    """[B, Hm, M] weights from the dense mask: a tile is skipped iff nothing in it is visible,
    partial iff something in it is masked or it reaches past Sk (exact, no summary)."""
    b, hm = allowed.shape[:2]
    nm, nn = -(-sq // tm), -(-sk // tn)
    out = np.zeros((b, hm, nm), dtype=np.int64)
    for m in range(nm):
        for n in range(nn):
            block = allowed[:, :, m * tm:(m + 1) * tm, n * tn:(n + 1) * tn]
            visible = block.any(axis=(2, 3))
            partial = ~block.all(axis=(2, 3)) | ((n + 1) * tn > sk)
            out[:, :, m] += np.where(visible, np.where(partial, wo.WEIGHT_PARTIAL, wo.WEIGHT_FULL),
                                     0)
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("sq,sk", [(512, 512), (300, 700), (1000, 333), (129, 128)])
def test_reference_weights_plain_attention_match_brute_force(causal, sq, sk):
    tm, tn = 128, 64
    rows, cols = np.arange(sq)[:, None], np.arange(sk)[None, :]
    allowed = (cols <= rows + (sk - sq)) if causal else np.ones((sq, sk), bool)
    want = _brute_force_weights(np.broadcast_to(allowed, (2, 1, sq, sk)), sq, sk, tm, tn)
    got = wo.reference_weights(None, causal, 2, sq, sk, tm, tn)
    assert got.shape == (2, 1, -(-sq // tm))
    np.testing.assert_array_equal(got, want)


def test_reference_weights_causal_by_hand():
    # causal, 4 x 4 tiles of 128: query tile m loads m full tiles and its diagonal (partial) one
    got = wo.reference_weights(None, True, 1, 512, 512, 128, 128)[0, 0]
    assert got.tolist() == [wo.WEIGHT_FULL * m + wo.WEIGHT_PARTIAL for m in range(4)]


def test_reference_weights_tile_aligned_documents_match_brute_force():
    # causal documents whose boundaries are tile-aligned: the summary loses nothing, so the
    # conservative tile predicates are exact and agree with the dense mask
    sq = sk = 1024
    lens = [[256, 512, 256], [128, 128, 768], [1024]]
    idx = np.zeros((3, 1, sk, 1), dtype=np.int32)
    for b, doc in enumerate(lens):
        start = 0
        for n in doc:
            idx[b, 0, start:start + n, 0] = start + n
            start += n
    want = _brute_force_weights(semantics.to_dense(idx, True), sq, sk, 128, 128)
    got = wo.reference_weights(idx, True, 3, sq, sk, 128, 128)
    np.testing.assert_array_equal(got, want)
    assert got[1, 0].argmax() == 7  # the last tile of the long document is the heaviest


def test_item_weights_follow_the_forwards_head_mapping():
    weights = np.arange(2 * 2 * 3).reshape(2, 2, 3)  # B=2, Hm=2, M=3
    items = wo.item_weights(weights, num_heads=4)  # H=4: heads 0,1 -> mask head 0; 2,3 -> 1
    for b in range(2):
        for h in range(4):
            for m in range(3):
                assert items[(b * 4 + h) * 3 + m] == weights[b, h // 2, m]
    seq = wo.reference_order_weights(weights, 4)
    assert (np.diff(seq) <= 0).all() and sorted(seq.tolist()) == sorted(items.tolist())


def test_gpu_checker_accepts_the_reference_order_and_rejects_wrong_ones():
    torch = pytest.importorskip("torch")
    import fwd_check

    rng = np.random.default_rng(7)
    b, h, hm, sq, sk = 2, 4, 2, 1000, 1000
    idx, causal = fwd_check.make_mask("causal_doc", rng, b, hm, sq, sk)
    cfg = fwd.default_config("bf16", 128, 128, causal, 1, work_order=True)
    ref = wo.reference_weights(idx, causal, b, sq, sk, cfg.tile_m, cfg.tile_n)
    wcfg = wo.WorkOrderConfig.for_forward(cfg)
    workspace = np.full(wo.workspace_elems(wcfg, b, hm, sq, sk), -7, dtype=np.int32)
    workspace[:ref.size] = ref.ravel()
    items = wo.item_weights(ref, h)
    order = np.argsort(-items, kind="stable").astype(np.int32)
    assert len(np.unique(items)) > 3  # the case has something to sort

    def check(ws, od):
        return fwd_check.check_work_order(torch.from_numpy(ws), torch.from_numpy(od), idx, causal,
                                          cfg, b, sq, sk, h, hm)

    assert check(workspace, order)["work_order_ok"]
    swapped = order.copy()
    first_light = int(np.argmax(items[order] < items[order[0]]))
    swapped[0], swapped[first_light] = swapped[first_light], swapped[0]
    assert not check(workspace, swapped)["work_order_heaviest_first"]
    duplicated = order.copy()
    duplicated[-1] = duplicated[0]
    assert not check(workspace, duplicated)["work_order_permutation"]
    bad_weights = workspace.copy()
    bad_weights[3] += 1
    assert not check(bad_weights, order)["work_weights_match"]


def test_snake_slot_is_a_bijection():
    for total in range(1, 70):
        for grid in range(1, 17):
            slots = [sched.snake_slot(t, total, grid) for t in range(total)]
            assert sorted(slots) == list(range(total)), (total, grid)
    # rows alternate direction: CTA 0 takes the heaviest item of row 0, the lightest of row 1
    assert [sched.snake_slot(t, 10, 4) for t in range(10)] == [0, 1, 2, 3, 7, 6, 5, 4, 8, 9]


def test_work_order_config_switch(monkeypatch):
    monkeypatch.delenv(fwd.WORK_ORDER_ENV, raising=False)
    assert not fwd.default_config("bf16", 128, None, True, 1).work_order  # default OFF
    assert not fwd.default_config("bf16", 128, None, True, 1, fast=True).work_order
    monkeypatch.setenv(fwd.WORK_ORDER_ENV, "1")
    on = fwd.default_config("bf16", 128, None, True, 1)
    assert on.work_order and on != fwd.default_config("bf16", 128, None, True, 1, work_order=False)
    with pytest.raises(ValueError, match="causal"):
        wo.WorkOrderConfig(128, 128, True, 4)


def test_forward_wrapper_requires_the_order_exactly_when_configured():
    class Shape:
        def __init__(self, *shape):
            self.shape = shape

    q, k, v = Shape(1, 300, 4, 128), Shape(1, 300, 2, 128), Shape(1, 300, 2, 128)
    cfg = fwd.default_config("bf16", 128, None, True, None, work_order=True)
    wrapper = fwd.CompiledForward(cfg, compiled=None)  # the checks come before any launch
    with pytest.raises(ValueError, match="work_order: expected an int32 buffer"):
        wrapper(q, k, v, None, None, None, None, None, None, 0.1, 0)
    with pytest.raises(ValueError, match=r"work_order: expected 12 items"):
        wrapper(q, k, v, None, None, None, None, None, None, 0.1, 0, work_order=Shape(11))
    plain = fwd.CompiledForward(fwd.default_config("bf16", 128, None, True, None,
                                                   work_order=False), compiled=None)
    with pytest.raises(ValueError, match="work_order: expected None"):
        plain(q, k, v, None, None, None, None, None, None, 0.1, 0, work_order=Shape(12))


def test_host_api_with_work_order_packs_the_compiled_kernels_arguments(monkeypatch):
    """flashmask_fwd with the work order on, up to the launches: the summary, the ordering kernels
    and the forward (real sm_90a compiles) accept the arguments the host API builds, counted and
    typed by the DSL's own argument packing; both with a mask and for plain causal attention."""
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import interface

    monkeypatch.setenv(fwd.WORK_ORDER_ENV, "1")
    monkeypatch.setenv(fwd.TILE_RANGES_ENV, "0")  # only the ordering kernels besides the forward
    api = HostApiHarness(monkeypatch)
    launched, scratch, t = api.launched, api.scratch, api.tensor
    b, s, h, hk, d = 2, 300, 4, 2, 128
    q, k, v, out, _, lse = api.attention_tensors(b, s, h, hk, d)
    indices = t(b, hk, s, 2, dtype=torch.int32)
    interface.flashmask_fwd(q, k, v, out, lse, indices, causal=True, softmax_scale=0.1, stream=0)
    assert launched == ["tile_summary", "fwd_work_order", "flash_fwd_sm90"]
    m_blocks, k_tiles = 3, 3  # ceil(300 / 128)
    # summary x2, then workspace (weights [B, Hk, M] + histogram) and the order [B * H * M];
    # the dynamic schedule's counter last (the claims walk the order)
    assert scratch[2:] == [(b * hk * m_blocks + wo.WEIGHT_PARTIAL * k_tiles + 1,),
                           (b * h * m_blocks,), (1,)]
    launched.clear()
    interface.flashmask_fwd(q, k, v, out, lse, None, causal=True, softmax_scale=0.1, stream=0)
    assert launched == ["fwd_work_order", "flash_fwd_sm90"]


def test_static_order_is_a_bijection_grouped_by_head_heaviest_first():
    """The default scheduler: every (m_block, head, batch) exactly once; the query tiles of one
    (batch, head) consecutive (they share K/V in L2); the last (heaviest causal) tile first."""
    from paddle_flashmask.ops.cute import tile_scheduler as sched

    m, h, b = 5, 3, 2
    items = [sched.decode_work(t, m, h, b) for t in range(sched.total_work(m, h, b))]
    assert sorted(items) == sorted((mb, hh, bb) for mb in range(m) for hh in range(h)
                                   for bb in range(b))
    for start in range(0, len(items), m):
        group = items[start:start + m]
        assert len({(hh, bb) for _, hh, bb in group}) == 1
        assert [mb for mb, _, _ in group] == list(range(m - 1, -1, -1))


def test_forward_work_order_rule_follows_items_per_cta(monkeypatch):
    """flash_fwd_sm90.default_work_order: for GQA / MQA, claims over the heaviest-first order
    below FEW_ITEMS_PER_CTA query tiles per CTA (the same bound as the backward's claim rule),
    the list in its static order above; never for MHA; env 1 / 0 forces it; anything else is an
    error naming the env."""
    from paddle_flashmask.ops.cute.tile_scheduler import FEW_ITEMS_PER_CTA

    monkeypatch.delenv(fwd.WORK_ORDER_ENV, raising=False)
    assert not fwd.default_work_order()  # compile time: the problem is not known yet
    assert fwd.default_work_order(FEW_ITEMS_PER_CTA * 132 - 1, 132, 2)
    assert not fwd.default_work_order(FEW_ITEMS_PER_CTA * 132, 132, 2)
    assert fwd.default_work_order(2 * 16 * 64, 132, 2)  # the e2e step: B=2 S=8K GQA 16/8
    assert not fwd.default_work_order(2 * 16 * 64, 132, 1)  # the same shape with MHA
    assert not fwd.default_work_order(4 * 32 * 64, 132, 4)  # the benchmark's GQA row: 62 per CTA
    assert not fwd.default_work_order(10, 0, 2)
    monkeypatch.setenv(fwd.WORK_ORDER_ENV, "0")
    assert not fwd.default_work_order(10, 132, 8)
    monkeypatch.setenv(fwd.WORK_ORDER_ENV, "1")
    assert fwd.default_work_order(10 ** 6, 132) and fwd.default_work_order()
    monkeypatch.setenv(fwd.WORK_ORDER_ENV, "yes")
    with pytest.raises(ValueError, match=fwd.WORK_ORDER_ENV):
        fwd.default_work_order(10, 132, 2)


def test_host_api_applies_the_work_order_rule_per_problem(monkeypatch):
    """flashmask_fwd turns the order on for a GQA mask with columns on a grid with few items per
    CTA (real sm_90a compiles of the variants it asks for), and leaves it off for plain masks
    (nothing to key the cached order on), MHA, retire launches, the static schedule, many items
    per CTA (a grid of 1 CTA here) and the env's 0."""
    torch = pytest.importorskip("torch")
    from test_cp_retire import _harness_seeing
    from paddle_flashmask.ops.cute import interface

    for name in (fwd.WORK_ORDER_ENV, fwd.DYNAMIC_SCHEDULE_ENV, fwd.CLAIM_PASSES_ENV):
        monkeypatch.delenv(name, raising=False)
    api, seen = _harness_seeing(monkeypatch, "compiled_forward")
    t = api.tensor
    b, s, h, hk, d = 1, 300, 8, 4, 128  # 3 query tiles x 8 heads for 132 CTAs, GQA 8/4
    q, k, v, out, _, lse = api.attention_tensors(b, s, h, hk, d)
    k_mha, v_mha = t(b, s, h, d), t(b, s, h, d)
    idx = t(b, 1, s, 1, dtype=torch.int32)
    run = lambda indices, keys=k, values=v, **kw: interface.flashmask_fwd(  # noqa: E731
        q, keys, values, out, lse, indices, causal=True, softmax_scale=0.1, stream=0, **kw)
    run(idx)
    run(None)
    run(idx, k_mha, v_mha)
    run(idx, retire=True)
    monkeypatch.setattr(interface, "num_sms", lambda device: 1)  # 24 items for 1 CTA: many
    interface.clear_call_plans()  # a device's SM count is fixed: the launch plans assume it
    run(idx)
    monkeypatch.setattr(interface, "num_sms", lambda device: 132)
    interface.clear_call_plans()
    monkeypatch.setenv(fwd.DYNAMIC_SCHEDULE_ENV, "0")
    run(idx)
    monkeypatch.setenv(fwd.DYNAMIC_SCHEDULE_ENV, "1")
    monkeypatch.setenv(fwd.WORK_ORDER_ENV, "0")
    run(idx)
    assert [c.work_order for c in seen] == [True, False, False, False, False, False, False]
    assert seen[0].dynamic_schedule and seen[0].claim_passes == 1
    assert seen[0] == dataclasses.replace(seen[4], work_order=True)  # only the order differs
