"""Claims by work class (BwdConfig.claim_passes, tile_scheduler.claim_pass), on the CPU: the
class rule, the config rule and its env switch, the compile-check variants, and the host API
(the claims need no new argument). The schedule it buys is modelled by bench/schedule_sim.py;
its speed and correctness are checked on the H200 (tests/gpu/bwd_check.py and the benchmark with
PADDLE_FLASHMASK_BWD_CLAIM_PASSES=3)."""
from __future__ import annotations

import pytest

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
from paddle_flashmask.ops.cute.tile_scheduler import FEW_ITEMS_PER_CTA, claim_pass


@pytest.fixture(autouse=True)
def _per_pass_claims(monkeypatch):
    """These tests read the per-pass path's argument lists; the class-sorted claim list (its own
    launch and last main-kernel argument) is tested in test_bwd_claim_list.py."""
    monkeypatch.setenv(bwd.CLAIM_LIST_ENV, "0")


def test_classes_split_by_quarters_and_cover_every_item():
    num = 512
    classes = [claim_pass(v, num, 3) for v in range(num + 1)]
    assert classes[num] == classes[128] == 0 and classes[127] == 1  # >= 1/4 of the tiles
    assert classes[32] == 1 and classes[31] == 2 and classes[0] == 2  # >= 1/16, the rest
    assert classes == sorted(classes, reverse=True)  # heavier never in a later pass
    assert {claim_pass(v, num, 1) for v in range(num + 1)} == {0}  # one pass: the list in order
    assert sorted({claim_pass(v, num, 4) for v in range(num + 1)}) == [0, 1, 2, 3]
    assert claim_pass(1, 1, 3) == 0  # a single query tile: the heaviest class


@pytest.mark.parametrize("side", ["backward", "forward"])
def test_config_rule_and_env_switch(monkeypatch, side):
    from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd
    from paddle_flashmask.ops.cute import interface

    if side == "backward":  # a persistent grid claims; env PERSISTENT=0 launches one CTA per tile
        module, grid_env, grid_on = bwd, bwd.PERSISTENT_ENV, "persistent"
        config = lambda: interface.backward_config("bfloat16", 128, False, 4)  # noqa: E731
        bare = lambda: bwd.BwdConfig("bfloat16", 128, 128, True, 1, claim_passes=3)  # noqa: E731
    else:  # the dynamic schedule claims; static slots do not
        module, grid_env, grid_on = fwd, fwd.DYNAMIC_SCHEDULE_ENV, "dynamic_schedule"
        config = lambda: interface.forward_config("bfloat16", 128, True, 1)  # noqa: E731
        bare = lambda: fwd.FwdConfig("bfloat16", 128, 128, True, 1, claim_passes=3)  # noqa: E731
    for name in (module.CLAIM_PASSES_ENV, grid_env):
        monkeypatch.delenv(name, raising=False)
    assert config().claim_passes == 1  # off by default
    monkeypatch.setenv(module.CLAIM_PASSES_ENV, "3")
    assert getattr(config(), grid_on) and config().claim_passes == 3
    if side == "backward":  # deterministic mode: its own passes, whatever the switch says (one
        # over the list, or two with the class chains of causal masks)
        assert interface.backward_config("bfloat16", 128, False, 2,
                                         deterministic=True).claim_passes == 1
        assert interface.backward_config("bfloat16", 128, True, 1,
                                         deterministic=True).claim_passes == 2
    monkeypatch.setenv(grid_env, "0")
    assert config().claim_passes == 1
    monkeypatch.setenv(module.CLAIM_PASSES_ENV, "5")
    with pytest.raises(ValueError, match=module.CLAIM_PASSES_ENV):
        config()
    with pytest.raises(ValueError, match="claim_passes"):
        bare()  # no claiming grid


def test_compile_check_builds_the_option():
    from paddle_flashmask.ops.cute import compile_check

    chosen = {v.label: v.config for v in compile_check.variants()}
    assert chosen["bwd bfloat16 d128 bidir-C4 claim-passes-3"].claim_passes == 3
    assert chosen["bwd bfloat16 d128 causal claim-passes-3"].claim_passes == 3


def test_host_api_launches_the_same_arguments(monkeypatch):
    pytest.importorskip("torch")
    from host_api_harness import HostApiHarness

    monkeypatch.setenv(bwd.CLAIM_PASSES_ENV, "3")
    monkeypatch.setenv(bwd.PERSISTENT_ENV, "1")
    monkeypatch.setenv(bwd.FIRST_STORE_ENV, "0")  # the counter alone, as test_bwd_persistent
    api = HostApiHarness(monkeypatch, num_sms=132)
    api.backward()
    assert api.launched[-3:] == ["flash_bwd_pre", "flash_bwd_sm90", "flash_bwd_post"]
    assert len(api.last_args("flash_bwd_sm90")) == 22  # the counter, no new argument
    assert len(api.counter_resets) == 1


def test_forward_host_api_and_compile_check(monkeypatch):
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import compile_check, interface
    from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd

    labels = {v.label for v in compile_check.variants()}
    assert {"fwd bfloat16 d128 causal-C1 claim-passes-3",
            "fwd bfloat16 d128 causal claim-passes-3"} <= labels
    monkeypatch.setenv(fwd.CLAIM_PASSES_ENV, "3")
    monkeypatch.delenv(fwd.DYNAMIC_SCHEDULE_ENV, raising=False)
    api = HostApiHarness(monkeypatch, num_sms=132)
    t = api.tensor
    b, s, h, d = 1, 300, 4, 128
    q, k, v, out, _, lse = api.attention_tensors(b, s, h, h, d)
    idx = t(b, 1, s, 1, dtype=torch.int32)
    interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1, stream=0)
    assert api.launched[-1] == "flash_fwd_sm90" and len(api.counter_resets) == 1
    # retire (one CTA per work tile, nothing claimed) drops the passes with the dynamic schedule
    interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1, stream=0,
                            retire=True)
    assert api.launched[-1] == "flash_fwd_sm90" and len(api.counter_resets) == 1


def test_backward_claims_by_class_where_the_grid_gets_few_items(monkeypatch):
    """The problem-size rule (flash_bwd_sm90.default_claim_passes): 3-pass claims below
    FEW_ITEMS_PER_CTA key tiles per CTA, the list once above; the env value overrides both."""
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd.CLAIM_PASSES_ENV, raising=False)
    few = FEW_ITEMS_PER_CTA
    assert bwd.default_claim_passes() == 1  # compile time: the problem is not known yet
    assert bwd.default_claim_passes(few * 132 - 1, 132) == 3
    assert bwd.default_claim_passes(few * 132, 132) == 1
    assert bwd.default_claim_passes(1024, 132) == 3  # the e2e step: B=2 S=8K, 8 KV heads
    assert bwd.default_claim_passes(4096, 132) == 1  # the benchmark: B=4 S=8K, 16 heads
    monkeypatch.setenv(bwd.CLAIM_PASSES_ENV, "1")
    assert bwd.default_claim_passes(1024, 132) == 1
    monkeypatch.setenv(bwd.CLAIM_PASSES_ENV, "2")
    assert bwd.default_claim_passes(4096, 132) == 2
    monkeypatch.delenv(bwd.CLAIM_PASSES_ENV)
    # the work list counts KV heads when the CTA walks the query heads (GQA in the CTA)
    gqa = interface.backward_config("bfloat16", 128, True, 1, gqa=True)
    mha = interface.backward_config("bfloat16", 128, True, 1)
    assert gqa.gqa_in_cta and not mha.gqa_in_cta and gqa.tile_n == mha.tile_n == 128
    assert bwd.backward_work_items(gqa, 2, 8192, 16, 8) == 64 * 8 * 2
    assert bwd.backward_work_items(mha, 2, 8000, 16, 16) == 63 * 16 * 2


def test_host_api_applies_the_rule_per_problem(monkeypatch):
    """flashmask_bwd picks the passes from the problem's work items (real sm_90a compiles of
    the variants it asks for); retire launches and the env override keep one pass."""
    pytest.importorskip("torch")
    from test_cp_retire import _harness_seeing
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.CLAIM_PASSES_ENV, bwd.PERSISTENT_ENV):
        monkeypatch.delenv(name, raising=False)
    api, seen = _harness_seeing(monkeypatch, "compiled_backward")
    t = api.tensor
    b, s, h, d = 1, 256, 2, 128  # 2 key tiles x 2 heads: far below 16 per CTA
    q, k, v, out, dout, lse = api.attention_tensors(b, s, h, h, d)
    grads = [t(b, s, h, d) for _ in range(3)]
    for retire, env in ((False, None), (True, None), (False, "1")):
        if env is not None:
            monkeypatch.setenv(bwd.CLAIM_PASSES_ENV, env)
        interface.flashmask_bwd(q, k, v, out, dout, lse, *grads, None, causal=True,
                                softmax_scale=0.1, stream=0, retire=retire)
    assert [c.claim_passes for c in seen] == [3, 1, 1]
    assert seen[0].persistent and not seen[1].persistent and seen[2].persistent
    assert not any(c.key_major for c in seen)  # no mask columns: the head-major list
    # with mask columns the key-major order goes with one pass only (default_key_major)
    torch = pytest.importorskip("torch")
    idx = t(b, 1, s, 1, dtype=torch.int32)
    for env in (None, "1"):
        if env is None:
            monkeypatch.delenv(bwd.CLAIM_PASSES_ENV, raising=False)
        else:
            monkeypatch.setenv(bwd.CLAIM_PASSES_ENV, env)
        interface.flashmask_bwd(q, k, v, out, dout, lse, *grads, idx, causal=True,
                                softmax_scale=0.1, stream=0)
    assert [(c.claim_passes, c.key_major) for c in seen[3:]] == [(3, False), (1, True)]
    # the GQA head walk over a causal mask at D = 128: key-major with the claims by class
    monkeypatch.delenv(bwd.CLAIM_PASSES_ENV, raising=False)
    q, k, v, out, dout, lse = api.attention_tensors(b, s, 2 * h, h, d)
    grads = [t(b, s, 2 * h, d), t(b, s, h, d), t(b, s, h, d)]
    interface.flashmask_bwd(q, k, v, out, dout, lse, *grads, idx, causal=True,
                            softmax_scale=0.1, stream=0)
    assert seen[-1].gqa_in_cta and (seen[-1].claim_passes, seen[-1].key_major) == (3, True)


def test_forward_claim_blocks_config(monkeypatch):
    """FwdConfig.claim_block: several list items per atomic in the class passes, only with
    claim_passes > 1; env PADDLE_FLASHMASK_FWD_CLAIM_BLOCK (1 / 2 / 4 / 8), off by default."""
    from paddle_flashmask.ops.cute import compile_check
    from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd

    for name in (fwd.CLAIM_PASSES_ENV, fwd.CLAIM_BLOCK_ENV, fwd.DYNAMIC_SCHEDULE_ENV,
                 fwd.WORK_ORDER_ENV):
        monkeypatch.delenv(name, raising=False)
    assert fwd.default_config("bf16", 128, None, True, 1).claim_block == 1
    monkeypatch.setenv(fwd.CLAIM_BLOCK_ENV, "4")
    assert fwd.default_config("bf16", 128, None, True, 1).claim_block == 1  # one pass: no blocks
    monkeypatch.setenv(fwd.CLAIM_PASSES_ENV, "3")
    cfg = fwd.default_config("bf16", 128, None, True, 1)
    assert (cfg.claim_passes, cfg.claim_block) == (3, 4)
    monkeypatch.setenv(fwd.CLAIM_BLOCK_ENV, "3")
    with pytest.raises(ValueError, match=fwd.CLAIM_BLOCK_ENV):
        fwd.default_config("bf16", 128, None, True, 1)
    with pytest.raises(ValueError, match="claim_block"):
        fwd.FwdConfig("bfloat16", 128, 128, True, 1, dynamic_schedule=True, claim_block=4)
    for name in (fwd.CLAIM_PASSES_ENV, fwd.CLAIM_BLOCK_ENV):
        monkeypatch.delenv(name)
    chosen = {v.label: v.config for v in compile_check.variants()}
    blocked = chosen["fwd bfloat16 d128 causal-C1 claim-passes-3 claim-block-4"]
    assert (blocked.claim_passes, blocked.claim_block, blocked.dynamic_schedule) == (3, 4, True)
