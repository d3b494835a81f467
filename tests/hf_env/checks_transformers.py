"""Hugging Face transformers checks (torch, CPU). Run in their own process by
tests/test_integrations_transformers.py: importing PaddleFormers switches transformers' torch
support off process-wide, so these must not share a process with the PaddleFormers tests.

    python -m pytest -q tests/hf_env/checks_transformers.py
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from paddle_flashmask.integrations import transformers as hf_int  # noqa: E402
from paddle_flashmask.mask_builders import pack_preference, pack_sft  # noqa: E402
from paddle_flashmask.semantics import to_dense  # noqa: E402


@pytest.fixture(autouse=True)
def registered():
    hf_int.register_transformers()
    yield
    hf_int.unregister_transformers()


def tiny_model(impl: str):
    from transformers import AutoModelForCausalLM, LlamaConfig
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl, dtype=torch.float32)
    model.train()
    return model


def twin(model, impl: str):
    other = copy.deepcopy(model)
    other.config._attn_implementation = impl
    return other


def additive(visible: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.where(visible, 0.0, torch.finfo(torch.float32).min).astype(np.float32))


def step(model, **inputs):
    model.zero_grad(set_to_none=True)
    out = model(**inputs, use_cache=False)
    logits = out.logits.float()
    labels = inputs["input_ids"].roll(-1, dims=1)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    loss.backward()
    return loss.item(), {n: p.grad.detach().double().clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same(a, b, rtol=1e-5):
    (la, ga), (lb, gb) = a, b
    assert abs(la - lb) <= rtol * abs(lb), (la, lb)
    assert ga.keys() == gb.keys() and len(ga) > 10
    for n in gb:
        err = (ga[n] - gb[n]).norm() / gb[n].norm().clamp_min(1e-30)
        assert err <= rtol, (n, float(err))


def test_flash_in_name_is_refused():
    with pytest.raises(ValueError, match="flash"):
        hf_int.register_transformers("paddle_flashmask")


def test_register_roundtrip():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    assert AttentionInterface._global_mapping["paddle_fmask"] is hf_int.paddle_flashmask_attention_forward
    hf_int.register_transformers()
    hf_int.unregister_transformers()
    hf_int.unregister_transformers()
    assert "paddle_fmask" not in AttentionInterface._global_mapping
    assert "paddle_fmask" not in AttentionMaskInterface._global_mapping


def test_packed_position_ids_match_dense_eager_and_sdpa(monkeypatch):
    import paddle_flashmask.torch as pfm_torch
    calls = []
    real = pfm_torch.flashmask_attention
    monkeypatch.setattr(pfm_torch, "flashmask_attention", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    pk = pack_sft([11, 7, 17, 5, 9, 14], 40, convention="default")
    pos = torch.from_numpy(pk.position_ids)
    ids = torch.from_numpy(np.random.default_rng(0).integers(3, 96, size=pos.shape))
    ours_model = tiny_model("paddle_fmask")
    ours = step(ours_model, input_ids=ids, position_ids=pos)
    assert len(calls) == 2
    # rows end with padding (position 0 repeated): each padding token is its own 1-token document
    expect = [hf_int.startend_from_position_ids(pos)]
    np.testing.assert_array_equal(calls[0].numpy(), expect[0].numpy())
    visible = to_dense(calls[0].numpy(), True)
    dense = step(twin(ours_model, "eager"), input_ids=ids, position_ids=pos, attention_mask=additive(visible))
    assert_same(ours, dense)
    hf_sdpa = step(twin(ours_model, "sdpa"), input_ids=ids, position_ids=pos)   # transformers' own packing
    assert_same(ours, hf_sdpa)


def test_explicit_indices_kwarg_preference_mask():
    """A DPO-style mask (chosen hidden from rejected) that position_ids cannot express, passed as
    ``attn_mask_startend_row_indices=`` through the model forward; loss over real tokens only."""
    pk = pack_preference([(6, 5, 4), (9, 3, 7), (4, 8, 8)], 48)
    idx = torch.from_numpy(pk.mask.startend_row_indices)
    pos = torch.from_numpy(pk.position_ids)
    ids = torch.from_numpy(np.random.default_rng(1).integers(3, 96, size=pos.shape))
    real = torch.from_numpy(pk.example_ids >= 0).reshape(-1).float()
    visible = to_dense(pk.mask.startend_row_indices, True)
    # padding rows see nothing in the default convention (output 0); eager softmax would average
    # them instead, so let them see themselves in the eager twin: real rows are unaffected
    empty = ~visible.any(-1)
    b_i, h_i, r_i = np.nonzero(empty)
    visible[b_i, h_i, r_i, r_i] = True
    assert not visible[..., :, :][np.broadcast_to(~(pk.example_ids >= 0)[:, None, None, :], visible.shape)
                                  & np.broadcast_to((pk.example_ids >= 0)[:, None, :, None], visible.shape)].any()

    def masked_step(m, **kw):
        m.zero_grad(set_to_none=True)
        logits = m(**kw, use_cache=False).logits.float()
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.roll(-1, dims=1).reshape(-1),
                                               reduction="none")
        loss = (ce * real).sum() / real.sum()
        loss.backward()
        return loss.item(), {n: p.grad.detach().double().clone() for n, p in m.named_parameters() if p.grad is not None}

    model = tiny_model("paddle_fmask")
    ours = masked_step(model, input_ids=ids, position_ids=pos, attn_mask_startend_row_indices=idx)
    dense = masked_step(twin(model, "eager"), input_ids=ids, position_ids=pos, attention_mask=additive(visible))
    assert_same(ours, dense)
    no_mask = masked_step(model, input_ids=ids, position_ids=pos)      # packing from position_ids only
    assert abs(no_mask[0] - ours[0]) > 1e-4                            # the kwarg really took effect


def test_padding_attention_mask_matches_eager():
    ids = torch.from_numpy(np.random.default_rng(2).integers(3, 96, size=(2, 24)))
    mask2d = torch.ones(2, 24, dtype=torch.long)
    mask2d[1, 17:] = 0                                   # right padding
    model = tiny_model("paddle_fmask")
    ours = step(model, input_ids=ids, attention_mask=mask2d)
    ref = step(twin(model, "eager"), input_ids=ids, attention_mask=mask2d)
    assert_same(ours, ref)


def test_sliding_window_matches_eager_with_window_mask():
    from transformers import AutoModelForCausalLM, MistralConfig
    cfg = MistralConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, sliding_window=6, max_position_embeddings=128)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="paddle_fmask", dtype=torch.float32)
    ids = torch.from_numpy(np.random.default_rng(3).integers(3, 96, size=(1, 20)))
    ours = step(model, input_ids=ids)
    ref = step(twin(model, "eager"), input_ids=ids)
    assert_same(ours, ref)


def test_extra_mask_function_goes_through_dense_conversion():
    """With and/or mask functions transformers needs a dense mask: ours builds it with transformers'
    own sdpa_mask and the attention function converts it exactly (here a 4-token window)."""
    from transformers.masking_utils import and_masks, causal_mask_function
    window = and_masks(causal_mask_function, lambda b, h, q, kv: kv > q - 4)
    s = 14
    dense = hf_int.paddle_flashmask_mask(batch_size=2, cache_position=torch.arange(s), kv_length=s,
                                         mask_function=window, attention_mask=None, use_vmap=True)
    assert dense.shape == (2, 1, s, s) and dense.dtype == torch.bool
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, s, 8), torch.randn(2, 2, s, 8), torch.randn(2, 2, s, 8)
    layer = torch.nn.Module()
    layer.is_causal = True
    layer.eval()
    idx, causal = hf_int.resolve_flashmask(layer, q, k, dense, {})
    assert causal and idx.shape == (2, 1, s, 1)
    np.testing.assert_array_equal(to_dense(idx.numpy(), True), dense.numpy())
    out, _ = hf_int.paddle_flashmask_attention_forward(layer, q, k, v, dense, scaling=8 ** -0.5)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    ref = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=dense).transpose(1, 2)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
