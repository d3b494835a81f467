"""PaddleNLP 3.0.0b4 checks. Run INSIDE .venv-paddlenlp (tests/test_integrations_paddlenlp.py does):

    .venv-paddlenlp/bin/python -m pytest -q tests/paddlenlp_env/checks_paddlenlp.py

(the file name does not match test_*.py so the main environment, which cannot import PaddleNLP
next to PaddleFormers, never collects it).
"""
from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

import paddle
import paddle.nn.functional as F

pytest.importorskip("paddlenlp")

from paddle_flashmask.integrations import paddlenlp as nlp_int  # noqa: E402
from paddle_flashmask.integrations._common import SilentFallbackWarning, reset_warnings  # noqa: E402
from paddle_flashmask.mask_builders import pack_preference, pack_sft  # noqa: E402
from paddle_flashmask.semantics import to_dense  # noqa: E402


def dense_flashmask_oracle(query, key, value, startend_row_indices=None, *, causal=False, **kwargs):
    """``F.flashmask_attention`` stand-in built from ``to_dense`` + plain fp32 ops ([B, S, H, D])."""
    b, sq, h, d = query.shape
    hk, sk = key.shape[2], key.shape[1]
    if startend_row_indices is not None:
        vis = to_dense(startend_row_indices.numpy().astype(np.int32), causal, sq)
    else:
        vis = np.tril(np.ones((sq, sk), bool), sk - sq)[None, None] if causal else np.ones((1, 1, sq, sk), bool)
    vis = paddle.to_tensor(np.ascontiguousarray(np.broadcast_to(vis, (b, vis.shape[1], sq, sk))))
    q = query.transpose([0, 2, 1, 3]).astype("float32")
    k = paddle.repeat_interleave(key.transpose([0, 2, 1, 3]), h // hk, axis=1).astype("float32")
    v = paddle.repeat_interleave(value.transpose([0, 2, 1, 3]), h // hk, axis=1).astype("float32")
    s = paddle.matmul(q, k, transpose_y=True) * d ** -0.5
    s = paddle.where(vis, s, paddle.full_like(s, -1e30))
    p = F.softmax(s, axis=-1) * vis.any(axis=-1, keepdim=True).astype("float32")
    return paddle.matmul(p, v).transpose([0, 2, 1, 3]).astype(query.dtype)


@pytest.fixture(autouse=True)
def clean_patch():
    nlp_int.unpatch_paddlenlp()
    reset_warnings()
    yield
    nlp_int.unpatch_paddlenlp()
    reset_warnings()


def test_patch_roundtrip():
    import paddle.nn.functional.flash_attention as fa
    import paddlenlp.transformers.llama.modeling as llama_mod
    before = (F.flashmask_attention, fa.flashmask_attention, llama_mod.scaled_dot_product_attention,
              hasattr(F, "flash_attention_with_sparse_mask"))
    nlp_int.patch_paddlenlp()
    nlp_int.patch_paddlenlp()                       # idempotent
    assert F.flashmask_attention is nlp_int.flashmask_attention
    assert fa.flashmask_attention is nlp_int.flashmask_attention
    assert F.flash_attention_with_sparse_mask is nlp_int.flash_attention_with_sparse_mask
    assert llama_mod.scaled_dot_product_attention.__paddle_flashmask_wrapped__ is before[2]
    nlp_int.unpatch_paddlenlp()
    nlp_int.unpatch_paddlenlp()
    after = (F.flashmask_attention, fa.flashmask_attention, llama_mod.scaled_dot_product_attention,
             hasattr(F, "flash_attention_with_sparse_mask"))
    assert after == before


def _tiny_llama(use_flash_attention: bool):
    from paddlenlp.transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=120, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      use_flash_attention=use_flash_attention)
    paddle.seed(5)
    return LlamaForCausalLM(cfg)


def _packed_batch():
    pk = pack_sft([13, 9, 21, 7, 16], 40, convention="paddlenlp")
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 120, size=pk.position_ids.shape)
    labels = np.where(pk.example_ids >= 0, np.roll(ids, -1, axis=1), -100)
    return {"input_ids": paddle.to_tensor(ids), "position_ids": paddle.to_tensor(pk.position_ids),
            "attn_mask_startend_row_indices": paddle.to_tensor(pk.collated_indices),   # [B, 1, S], PaddleNLP's
            "labels": paddle.to_tensor(labels)}


def _loss_and_grads(model, batch):
    model.clear_gradients()
    out = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                attn_mask_startend_row_indices=batch["attn_mask_startend_row_indices"])
    logits = (out[0] if isinstance(out, (tuple, list)) else out.logits).astype("float32")
    loss = F.cross_entropy(logits, batch["labels"].unsqueeze(-1), ignore_index=-100, reduction="mean")
    loss.backward()
    return float(loss), {p.name: p.grad.numpy().astype(np.float64) for p in model.parameters() if p.grad is not None}


def test_llama_step_through_patch_matches_dense_oracle(monkeypatch):
    import paddle_flashmask.paddle_frontend as frontend
    calls = []
    real = frontend.flashmask_attention

    def counting(*a, **k):
        calls.append(k.get("startend_row_indices"))
        return real(*a, **k)
    monkeypatch.setattr(frontend, "flashmask_attention", counting)
    batch = _packed_batch()
    model = _tiny_llama(True)
    nlp_int.patch_paddlenlp()
    loss_ours, g_ours = _loss_and_grads(model, batch)
    assert len(calls) == 2 and list(calls[0].shape) == [2, 1, 40, 1]     # [B,1,S,1], causal=True
    monkeypatch.setattr(F, "flashmask_attention", dense_flashmask_oracle)
    loss_ref, g_ref = _loss_and_grads(model, batch)
    assert abs(loss_ours - loss_ref) <= 1e-5 * abs(loss_ref)
    assert g_ours.keys() == g_ref.keys() and len(g_ours) > 10
    for name in g_ref:
        err = np.linalg.norm(g_ours[name] - g_ref[name]) / max(np.linalg.norm(g_ref[name]), 1e-30)
        assert err <= 1e-5, (name, err)


def test_old_alias_matches_new_name():
    paddle.seed(2)
    q, k, v = (paddle.randn([1, 12, 2, 8]) for _ in range(3))
    idx = paddle.to_tensor(np.array([[[5] * 5 + [12] * 7]], np.int32))     # [B, Hm, S]
    nlp_int.patch_paddlenlp()
    old = F.flash_attention_with_sparse_mask(q, k, v, attn_mask_start_row_indices=idx, is_causal=True)
    new = F.flashmask_attention(q, k, v, startend_row_indices=idx.unsqueeze(-1), causal=True)
    np.testing.assert_array_equal(old.numpy(), new.numpy())
    np.testing.assert_allclose(new.numpy(), dense_flashmask_oracle(q, k, v, idx.unsqueeze(-1), causal=True).numpy(),
                               rtol=1e-5, atol=1e-6)


def test_eager_fallback_warns_once_and_really_drops_the_mask():
    batch = _packed_batch()
    nlp_int.patch_paddlenlp()                       # before building: layers bind the wrapped function
    model = _tiny_llama(False)
    with pytest.warns(SilentFallbackWarning, match="use_flash_attention"):
        loss_eager, _ = _loss_and_grads(model, batch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SilentFallbackWarning)
        _loss_and_grads(model, batch)
    model.config.use_flash_attention = True
    for layer in model.sublayers():
        if hasattr(layer, "config"):
            layer.config.use_flash_attention = True
    loss_flash, _ = _loss_and_grads(model, batch)
    assert abs(loss_eager - loss_flash) > 1e-4      # the warning is about a real difference


def test_flag_forces_flash_attention_and_patches():
    cfg = {"flash_mask": True, "use_flash_attention": False, "zero_padding": False}
    with pytest.warns(SilentFallbackWarning):
        nlp_int.apply_flash_mask_flag(cfg, "sft")
    assert cfg["use_flash_attention"] and cfg["zero_padding"] and nlp_int.is_patched()
    cfg = {"flash_mask": True}
    nlp_int.apply_flash_mask_flag(cfg, "dpo")
    assert cfg["use_flash_attention"] and "zero_padding" not in cfg
    with pytest.raises(ValueError, match="stage"):
        nlp_int.apply_flash_mask_flag({}, "pretrain")


# ---- data pipelines: PaddleNLP's own packer / collators vs our builders --------------------------

def _bert_tokenizer(tmp_path, padding_side: str):
    from paddlenlp.transformers import BertTokenizer
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(50)]))
    tok = BertTokenizer(str(vocab))
    tok.padding_side = padding_side
    return tok


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("greedy", [True, False])
def test_sft_indices_equal_paddlenlp_zero_padding_and_collator(tmp_path, padding_side, greedy):
    from paddlenlp.data import DataCollatorForSeq2Seq
    from paddlenlp.datasets.zero_padding_dataset import ZeroPaddingMapDataset
    rng = np.random.default_rng(3)
    lengths = rng.integers(2, 30, size=40).tolist() + [70]          # the last one is too long: skipped
    max_len = 48
    # one feature per example as llm/utils/data.py builds it with zero_padding + flash_mask
    records = [{"input_ids": list(range(5, 5 + n)), "labels": list(range(5, 5 + n)), "position_ids": list(range(n)),
                "attn_mask_startend_row_indices": [n] * n} for n in lengths]
    packed = ZeroPaddingMapDataset(records, tokenizer=None, max_length=max_len, greedy_zero_padding=greedy)
    collate = DataCollatorForSeq2Seq(tokenizer=_bert_tokenizer(tmp_path, padding_side), padding="max_length",
                                     max_length=max_len, return_tensors="np", return_attention_mask=False)
    theirs = collate([packed[i] for i in range(len(packed))])
    ours = pack_sft(lengths, max_len, greedy=greedy, convention="paddlenlp", padding_side=padding_side)
    assert ours.dropped == [len(lengths) - 1]
    assert theirs["attn_mask_startend_row_indices"].dtype == np.int32
    np.testing.assert_array_equal(theirs["attn_mask_startend_row_indices"], ours.collated_indices)


def _fake_plain_tokenizer():
    """What preprocess_preference_data needs from a tokenizer without a chat template."""
    def encode(text, add_special_tokens=True):
        ids = [10 + int(w) for w in text.split()]
        return {"input_ids": ([1] if add_special_tokens else []) + ids}
    return types.SimpleNamespace(chat_template=None, eos_token_id=2, encode=encode)


def test_dpo_indices_equal_paddlenlp_preprocess_and_collate():
    from paddlenlp.datasets.zero_padding_dataset import ZeroPaddingMapDataset
    from paddlenlp.trl.trl_data import preference_collate_fn, preprocess_preference_data
    rng = np.random.default_rng(4)
    tok = _fake_plain_tokenizer()
    args = types.SimpleNamespace(max_seq_len=512, max_prompt_len=256)
    margs = types.SimpleNamespace(flash_mask=True)
    records, triples = [], []
    for _ in range(30):
        n_src, n0, n1 = (int(x) for x in rng.integers(1, 9, size=3))
        ex = {"src": " ".join(map(str, range(n_src))), "tgt": [],
              "response": [" ".join(["7"] * n0), " ".join(["8"] * n1)], "sort": [1, 0]}
        rec = preprocess_preference_data(ex, tok, args, margs)
        records.append(rec)
        p = rec["response_indexs"][0]
        triples.append((p, rec["response_indexs"][1] - p, rec["response_indexs"][2] - rec["response_indexs"][1]))
    max_len = 40
    packed = ZeroPaddingMapDataset(records, tokenizer=None, max_length=max_len, greedy_zero_padding=True)
    theirs = preference_collate_fn([packed[i] for i in range(len(packed))], max_seq_len=max_len)
    ours = pack_preference(triples, max_len, greedy=True, convention="paddlenlp")
    np.testing.assert_array_equal(theirs["attn_mask_startend_row_indices"], ours.collated_indices)
    np.testing.assert_array_equal(theirs["position_ids"], ours.position_ids)
    np.testing.assert_array_equal(theirs["response_indexs"], ours.response_indices)
