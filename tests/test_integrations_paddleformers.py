"""PaddleFormers integration: backend registration, one SFT / DPO training step vs a dense-mask
oracle (fp32, <= 1e-5 relative), indices equal to PaddleFormers' own data pipeline, the sdpa
fallback warning, the dense-attention_mask path and the recipes end to end (a few steps)."""
from __future__ import annotations

import copy
import types
import warnings

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")
pytest.importorskip("paddleformers.nn.attention.interface",
                    reason="PaddleFormers not installed: run scripts/setup_integration_envs.sh")

from paddleformers.nn.attention.interface import AttentionInterface  # noqa: E402

import paddle_flashmask  # noqa: E402
from paddle_flashmask.integrations import paddleformers as pf_int  # noqa: E402
from paddle_flashmask.integrations._common import SilentFallbackWarning, reset_warnings  # noqa: E402
from paddle_flashmask.mask_builders import pack_preference, pack_sft  # noqa: E402

from integration_helpers import assert_grads_close, grads_of, paddle_dense_attention_backend  # noqa: E402
from examples.common import recipe  # noqa: E402
from examples.dpo import train as dpo  # noqa: E402
from examples.sft import train as sft  # noqa: E402

ORACLE = "dense_oracle_for_tests"


@pytest.fixture
def registered():
    pf_int.register_paddleformers()
    AttentionInterface._global_mapping[ORACLE] = paddle_dense_attention_backend
    yield
    AttentionInterface._global_mapping.pop(ORACLE, None)
    pf_int.unregister_paddleformers()


@pytest.fixture
def op_calls(monkeypatch):
    """Count calls of paddle_flashmask.flashmask_attention (what the backend must run)."""
    import paddle_flashmask.paddle_frontend as frontend
    calls = []
    real = frontend.flashmask_attention

    def counting(*args, **kwargs):
        calls.append(args[3] if len(args) > 3 else kwargs.get("startend_row_indices"))
        return real(*args, **kwargs)
    monkeypatch.setattr(frontend, "flashmask_attention", counting)
    return calls


def tiny_cfg(stage: str, **over) -> dict:
    cfg = recipe.load_config(recipe.ROOT / "examples" / stage / "config.yaml")
    cfg.update(max_examples=24, max_seq_len=192, device="cpu", dtype="float32", seed=3)
    cfg.update(over)
    return cfg


def test_register_unregister_roundtrip():
    mapping = AttentionInterface._global_mapping
    before = dict(mapping)
    pf_int.register_paddleformers()
    pf_int.register_paddleformers()            # idempotent
    assert mapping["flashmask"] is pf_int.flashmask_attention_forward
    assert mapping["paddle_flashmask"] is pf_int.flashmask_attention_forward
    assert mapping["sdpa"].__wrapped__ is before["sdpa"]
    assert pf_int.is_registered()
    pf_int.unregister_paddleformers()
    pf_int.unregister_paddleformers()          # idempotent
    assert dict(mapping) == before
    assert not pf_int.is_registered()


def _step(model, loss_fn, batch):
    model.clear_gradients()
    loss = loss_fn(batch)
    loss.backward()
    return float(loss), grads_of(model.parameters())


def test_sft_step_matches_dense_oracle(registered, op_calls):
    cfg = tiny_cfg("sft")
    paddle.set_device("cpu")
    tok = recipe.build_tokenizer(cfg)
    data = sft.build_data(cfg, tok)
    assert len(data["pack"].rows) >= 2 and max(len(r) for r in data["pack"].rows) >= 2  # really packed
    model = recipe.build_model(cfg, tok, "float32")
    batch = sft.batches(data, 2, 1)[0]
    loss_ours, g_ours = _step(model, lambda b: sft.loss(model, b), batch)
    assert len(op_calls) == model.config.num_hidden_layers
    np.testing.assert_array_equal(op_calls[0].numpy(), batch["attn_mask_startend_row_indices"].numpy())
    with recipe.attention_implementation(model, ORACLE):
        loss_ref, g_ref = _step(model, lambda b: sft.loss(model, b), batch)
    assert abs(loss_ours - loss_ref) <= 1e-5 * abs(loss_ref)
    assert_grads_close(g_ours, g_ref, 1e-5)
    # the mask matters: without the document mask the loss changes (the comparison can fail)
    no_doc = dict(batch, attn_mask_startend_row_indices=None)
    with paddle.no_grad():
        assert abs(float(sft.loss(model, no_doc)) - loss_ours) > 1e-4


def test_dpo_step_matches_dense_oracle(registered, op_calls):
    cfg = tiny_cfg("dpo")
    paddle.set_device("cpu")
    tok = recipe.build_tokenizer(cfg)
    data = dpo.build_data(cfg, tok)
    policy = recipe.build_model(cfg, tok, "float32")
    paddle.seed(11)
    reference = recipe.build_model(dict(cfg, seed=11), tok, "float32")   # different weights: loss != log 2
    batch = dpo.batches(data, 2, 1)[0]
    ref_logps = dpo.reference_logps(reference, batch)
    fn = lambda b: dpo.dpo_loss(policy, b, ref_logps, 0.1)[0]  # noqa: E731
    op_calls.clear()
    loss_ours, g_ours = _step(policy, fn, batch)
    assert len(op_calls) == policy.config.num_hidden_layers
    assert abs(loss_ours - np.log(2)) > 1e-3
    with recipe.attention_implementation(policy, ORACLE):
        loss_ref, g_ref = _step(policy, fn, batch)
    assert abs(loss_ours - loss_ref) <= 1e-5 * abs(loss_ref)
    assert_grads_close(g_ours, g_ref, 1e-5)


def test_sft_indices_equal_paddleformers_collate_fn():
    """Same examples -> PaddleFormers' greedy packer + collate_fn give exactly our indices."""
    from paddleformers.datasets.collate import collate_fn
    from paddleformers.datasets.data_utils import generate_greedy_packs_from_sequences
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 40, size=60).tolist()
    max_len = 64
    seqs = [types.SimpleNamespace(token_ids=list(range(5, 5 + n)), labels=[1] * n, position_ids=list(range(n)), n=k)
            for k, n in enumerate(lengths)]
    packs = generate_greedy_packs_from_sequences(max_len, seqs)
    ours = pack_sft(lengths, max_len, greedy=True, convention="paddleformers", buffer_size=len(lengths))
    assert [[s.n for s in p] for p in packs] == ours.rows
    args = types.SimpleNamespace(num_nextn_predict_layers=0, context_parallel_size=1, sequence_parallel=False,
                                 tensor_model_parallel_size=1, fp8=False)
    margs = types.SimpleNamespace(use_attn_mask_startend_row_indices=True, use_global_causal_attn=False)
    out = collate_fn(packs, types.SimpleNamespace(pad_token_id=0), args, margs, max_len, False)
    assert out["attn_mask_startend_row_indices"].dtype == np.int32
    np.testing.assert_array_equal(out["attn_mask_startend_row_indices"], ours.collated_indices)
    np.testing.assert_array_equal(out["position_ids"], ours.position_ids)


def _pf_dpo_sequence(p: int, c: int, r: int):
    """Run PaddleFormers' own DPODataset._postprocess_sequence on token lists of these lengths."""
    from paddleformers.datasets.DPODataset import BaseDPODataSet
    ds = BaseDPODataSet.__new__(BaseDPODataSet)
    ds.use_attn_mask_startend_row_indices = True
    ds.use_filtered_label_loss = False
    prompt = list(range(10, 10 + p))
    chosen, rejected = list(range(100, 100 + c)), list(range(200, 200 + r))
    ds._preprocess_dpo_example = lambda ex: ex
    ds._BaseDPODataSet__postprocess_before_concat = lambda ex: (prompt, [chosen, rejected], [c, r], p + c + r, {})
    return ds._postprocess_sequence({"score_delta": 0.0, "has_mm": [False]})


def test_dpo_indices_equal_paddleformers_dataset_and_collate():
    from paddleformers.datasets.collate import dpo_collate_fn
    from paddleformers.datasets.data_utils import generate_greedy_packs_from_sequences
    rng = np.random.default_rng(1)
    triples = [tuple(int(x) for x in rng.integers(2, 12, size=3)) for _ in range(25)]
    max_len = 64
    seqs = [_pf_dpo_sequence(*t) for t in triples]
    for k, s in enumerate(seqs):
        s.n = k
    packs = generate_greedy_packs_from_sequences(max_len, seqs)
    ours = pack_preference(triples, max_len, greedy=True, convention="paddleformers", buffer_size=len(triples))
    assert [[s.n for s in p] for p in packs] == ours.rows
    args = types.SimpleNamespace(context_parallel_size=1, sequence_parallel=False, tensor_model_parallel_size=1, fp8=False)
    out = dpo_collate_fn(packs, None, args, max_seq_len=max_len, use_filtered_label_loss=False)
    np.testing.assert_array_equal(out["attn_mask_startend_row_indices"], ours.collated_indices)
    np.testing.assert_array_equal(out["position_ids"], ours.position_ids)
    np.testing.assert_array_equal(out["response_indexs"], ours.response_indices)


def test_sdpa_cpu_fallback_warns_once(registered):
    reset_warnings()
    cfg = tiny_cfg("sft", max_examples=6)
    tok = recipe.build_tokenizer(cfg)
    data = sft.build_data(cfg, tok)
    model = recipe.build_model(cfg, tok, "float32")
    batch = sft.batches(data, 1, 1)[0]
    with recipe.attention_implementation(model, "sdpa"), paddle.no_grad():
        with pytest.warns(SilentFallbackWarning, match="sdpa"):
            sft.loss(model, batch)
        with warnings.catch_warnings():
            warnings.simplefilter("error", SilentFallbackWarning)
            sft.loss(model, batch)                      # once only
    reset_warnings()


def test_backend_dense_attention_mask_path_matches_indices():
    """Padding batches reach the backend as a dense additive mask: converted exactly."""
    paddle.seed(0)
    b, h, hk, s, d = 2, 4, 2, 24, 16
    q = paddle.randn([b, h, s, d])
    k = paddle.randn([b, hk, s, d])
    v = paddle.randn([b, hk, s, d])
    layer = types.SimpleNamespace(is_causal=True, training=False)
    valid = np.ones((b, s), bool)
    valid[0, :5] = False                                # left padding in row 0
    visible = np.tril(np.ones((s, s), bool))[None, None] & valid[:, None, None, :]
    additive = np.where(visible, 0.0, np.finfo(np.float32).min).astype(np.float32)
    out_mask, _ = pf_int.flashmask_attention_forward(layer, q, k, v, attention_mask=paddle.to_tensor(additive))
    idx = np.where(valid, s, 0).astype(np.int32)[:, None, :, None]
    idx[0, 0, :5, 0] = np.arange(5)                     # what the converter must produce for pad columns
    out_idx, _ = pf_int.flashmask_attention_forward(layer, q, k, v, attn_mask_startend_row_indices=paddle.to_tensor(idx))
    ref, _ = paddle_dense_attention_backend(layer, q, k, v, attn_mask_startend_row_indices=paddle.to_tensor(idx))
    np.testing.assert_allclose(out_mask.numpy(), out_idx.numpy(), rtol=0, atol=0)
    np.testing.assert_allclose(out_idx.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="attention_mask"):
        soft = additive.copy()
        soft[..., 0] = -0.5                             # a soft bias: not a FlashMask
        pf_int.flashmask_attention_forward(layer, q, k, v, attention_mask=paddle.to_tensor(soft))


def test_backend_none_indices_is_causal_and_3d_indices():
    paddle.seed(1)
    q, k, v = (paddle.randn([1, 2, 10, 8]) for _ in range(3))
    layer = types.SimpleNamespace(is_causal=True, training=False)
    out_none, _ = pf_int.flashmask_attention_forward(layer, q, k, v)
    full = paddle.to_tensor(np.full((1, 1, 10), 10, np.int32))          # 3-D: promoted, causal
    out_3d, _ = pf_int.flashmask_attention_forward(layer, q, k, v, attn_mask_startend_row_indices=full)
    ref, _ = paddle_dense_attention_backend(layer, q, k, v)
    np.testing.assert_allclose(out_none.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out_3d.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stage", ["sft", "dpo", "rm", "lora"])
def test_recipe_runs_and_learns(stage, tmp_path):
    import importlib
    mod = importlib.import_module(f"examples.{stage}.train")
    # every step sees all rows (the batch wraps around them), so the loss must go down
    summary = mod.main(["--max_steps", "6", "--output_dir", str(tmp_path), "--set", "max_examples=24",
                        "--set", "max_seq_len=256", "--set", "per_device_train_batch_size=16", "--device", "cpu"])
    assert summary["flash_mask"] and summary["steps"] == 6
    assert summary["last_loss"] < summary["first_loss"]
    assert (tmp_path / "mask_row0.png").stat().st_size > 100
    pf_int.unregister_paddleformers()


def test_recipe_flag_off_uses_eager_dense(tmp_path, op_calls):
    from examples.sft import train as sft_main
    summary = sft_main.main(["--max_steps", "2", "--output_dir", str(tmp_path), "--set", "max_examples=20",
                             "--set", "max_seq_len=256", "--device", "cpu", "--flash_mask", "false"])
    assert not summary["flash_mask"] and summary["attention_backend"] == "eager"
    assert op_calls == []                      # paddle_flashmask never ran
    pf_int.unregister_paddleformers()


def test_recipe_takes_a_checkpoint_path(tmp_path):
    """The real-model branch: from_pretrained(model_name_or_path) gives the same first loss as the
    tiny model it was saved from (weights really loaded), then trains through our backend."""
    from examples.sft import train as sft_main
    cfg = tiny_cfg("sft")
    tok = recipe.build_tokenizer(cfg)
    recipe.build_model(cfg, tok, "float32").save_pretrained(str(tmp_path / "ckpt"))
    common = ["--max_steps", "2", "--set", "max_examples=24", "--set", "max_seq_len=192", "--set", "seed=3",
              "--device", "cpu"]
    fresh = sft_main.main(common + ["--output_dir", str(tmp_path / "a")])
    loaded = sft_main.main(common + ["--output_dir", str(tmp_path / "b"), "--model_name_or_path",
                                     str(tmp_path / "ckpt"), "--set", "tokenizer_name_or_path=byte"])
    assert loaded["first_loss"] == pytest.approx(fresh["first_loss"], rel=1e-6)
    assert loaded["attention_backend"] == "reference"
    pf_int.unregister_paddleformers()


def test_backend_dense_mask_in_bfloat16_is_read_as_values():
    """A bf16 additive mask must be read by value (paddle's bf16 .numpy() gives raw bits)."""
    paddle.seed(4)
    s = 12
    q, k, v = (paddle.randn([1, 2, s, 8]) for _ in range(3))
    layer = types.SimpleNamespace(is_causal=True, training=False)
    visible = np.tril(np.ones((s, s), bool))
    visible[:, :3] = False
    additive = paddle.to_tensor(np.where(visible, 0.0, -1e9).astype(np.float32)[None, None]).astype("bfloat16")
    out, _ = pf_int.flashmask_attention_forward(layer, q, k, v, attention_mask=additive)
    idx = np.where(np.arange(s) < 3, np.arange(s), s).astype(np.int32)[None, None, :, None]
    ref, _ = paddle_dense_attention_backend(layer, q, k, v, attn_mask_startend_row_indices=paddle.to_tensor(idx))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
