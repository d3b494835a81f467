"""The backward's GQA-in-CTA variant (BwdConfig.gqa_in_cta), on the CPU: the config rule, the
workspace it needs and the host API up to the launches (its SASS: tests/test_bwd_kernels.py)."""
from __future__ import annotations

import pytest

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd


def test_config_rule_and_workspace(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.setenv(bwd.GQA_IN_CTA_ENV, "0")
    base = interface.backward_config("bfloat16", 128, True, 1, gqa=True)
    assert not base.gqa_in_cta and base.dkv_partials and base.prepost.gqa  # off: partials
    monkeypatch.delenv(bwd.GQA_IN_CTA_ENV, raising=False)
    on = interface.backward_config("bfloat16", 128, True, 1, gqa=True)  # the default
    assert on.gqa_in_cta and not on.dkv_partials and not on.prepost.gqa
    assert not interface.backward_config("bfloat16", 128, True, 1, gqa=False).gqa_in_cta
    # deterministic: per-query-head CTAs unless the env asks for the walk (session 16)
    det = interface.backward_config("bfloat16", 128, True, 1, gqa=True, deterministic=True)
    assert not det.gqa_in_cta and det.dkv_partials
    monkeypatch.setenv(bwd.GQA_IN_CTA_ENV, "1")
    assert interface.backward_config("bfloat16", 128, True, 1, gqa=True,
                                     deterministic=True).gqa_in_cta
    monkeypatch.setenv(bwd.GQA_IN_CTA_ENV, "yes")
    with pytest.raises(ValueError, match=bwd.GQA_IN_CTA_ENV):
        interface.backward_config("bfloat16", 128, True, 1, gqa=True)
    monkeypatch.delenv(bwd.GQA_IN_CTA_ENV)
    with pytest.raises(ValueError, match="gqa_in_cta"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, gqa=False, gqa_in_cta=True)
    # no fp32 per-query-head partials: dK/dV leave the kernel in the input dtype
    b, s, h, hk = 2, 1000, 8, 2
    assert "dk_part" in bwd.workspace_shapes(base, b, s, s, h, hk)
    shapes = bwd.workspace_shapes(on, b, s, s, h, hk)
    assert "dk_part" not in shapes and "dv_part" not in shapes
    assert shapes["dq_accum"][0] == (b, h, 1024, 128)


def test_host_api_launches_without_the_reduction(monkeypatch):
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import interface

    monkeypatch.setenv(bwd.GQA_IN_CTA_ENV, "1")
    api = HostApiHarness(monkeypatch)
    t = api.tensor
    b, s, h, hk, d = 1, 200, 4, 2, 128
    q, k, v, out, dout, lse = api.attention_tensors(b, s, h, hk, d)
    interface.flashmask_bwd(q, k, v, out, dout, lse, t(b, s, h, d), t(b, s, hk, d),
                            t(b, s, hk, d), t(b, 1, s, 1, dtype=torch.int32), causal=True,
                            softmax_scale=0.1, stream=0)
    # (2 key tiles x 2 KV heads on 132 CTAs: claims by work class, from the class-sorted list)
    assert api.launched[-4:] == ["flash_bwd_pre", "bwd_claim_list", "flash_bwd_sm90",
                                 "flash_bwd_post"]
    assert (b, s, h, d) not in api.scratch  # no per-query-head dK/dV partials
