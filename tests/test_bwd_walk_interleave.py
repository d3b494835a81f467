"""The deterministic GQA head walk with its heads interleaved per query tile
(``BwdConfig.walk_interleave``, env ``PADDLE_FLASHMASK_BWD_DET_WALK_INTERLEAVE=1``, off): where the
host turns it on, what it requires, and the host API up to the launches (real sm_90a compiles
and argument packing). Built in session 18, compile-checked (``walk-interleave`` variants), not
yet run on the H200: ``scripts/gpu_session.sh call101`` is its oracle and A/B."""
from __future__ import annotations

import dataclasses

import pytest

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd, interface


@pytest.fixture(autouse=True)
def _no_switches(monkeypatch):
    for name in bwd.ENV_SWITCHES:
        monkeypatch.delenv(name, raising=False)


def config(columns=1, gqa=True, deterministic=True):
    return interface.backward_config("bfloat16", 128, True, columns, gqa=gqa,
                                     deterministic=deterministic)


def test_off_by_default_and_where_the_switch_applies(monkeypatch):
    assert not config().walk_interleave and not config().gqa_in_cta
    monkeypatch.setenv(bwd.DET_WALK_INTERLEAVE_ENV, "1")
    on = config()
    assert on.walk_interleave and on.gqa_in_cta and on.stage_stats and not on.dkv_partials
    assert not config(deterministic=False).walk_interleave  # the default mode walks as before
    assert not config(gqa=False).walk_interleave
    # LSE / delta not staged there (plain causal): no walk, as without the switch
    plain = config(columns=None)
    assert not plain.gqa_in_cta and not plain.walk_interleave


def test_requirements():
    walk = dataclasses.replace(config(), gqa_in_cta=True, stage_stats=True, dkv_last=False)
    assert dataclasses.replace(walk, walk_interleave=True).walk_interleave
    for bad in (dict(gqa_in_cta=False), dict(stage_stats=False), dict(deterministic=False,
                                                                       class_chains=False)):
        with pytest.raises(ValueError, match="walk_interleave"):
            dataclasses.replace(walk, walk_interleave=True, **bad)


@pytest.mark.parametrize("mask_heads", [1, 4])
def test_host_api_interleaves_only_when_the_group_shares_a_mask_head(monkeypatch, mask_heads):
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness

    monkeypatch.setenv(bwd.DET_WALK_INTERLEAVE_ENV, "1")
    api = HostApiHarness(monkeypatch, num_sms=132)
    used = []
    compiled_backward = interface.compiled_backward
    monkeypatch.setattr(interface, "compiled_backward",
                        lambda cfg: used.append(cfg) or compiled_backward(cfg))
    b, s, h, hk, d = 1, 300, 4, 2, 128
    q, k, v, out, dout, lse = api.attention_tensors(b, s, h, hk, d)
    t = api.tensor
    interface.flashmask_bwd(q, k, v, out, dout, lse, t(b, s, h, d), t(b, s, hk, d),
                            t(b, s, hk, d), t(b, mask_heads, s, 1, dtype=torch.int32),
                            causal=True, softmax_scale=0.1, deterministic=True, stream=0)
    assert api.launched[-2:] == ["flash_bwd_sm90", "flash_bwd_post"]
    assert (b, s, h, d) not in api.scratch  # the walk: no per-query-head dK/dV partials
    assert used[-1].gqa_in_cta and used[-1].walk_interleave is (mask_heads == 1)
