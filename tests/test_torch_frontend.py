"""paddle_flashmask.torch.flashmask_attention: autograd results, custom-op registration, torch.compile."""
import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from oracle import (FORMS, dense_attention_fp64, dense_attention_grads_fp64, expand_mask_heads,  # noqa: E402
                    plain_mask, random_indices)
from paddle_flashmask import mask_builders as mb  # noqa: E402
from paddle_flashmask import to_dense  # noqa: E402
from paddle_flashmask.ops import backend as backends  # noqa: E402
from paddle_flashmask.torch import flashmask_attention  # noqa: E402


def inputs(rng, b, sq, sk, h, hk, d, dv=None):
    dv = d if dv is None else dv
    return (rng.standard_normal((b, sq, h, d)).astype(np.float32),
            rng.standard_normal((b, sk, hk, d)).astype(np.float32),
            rng.standard_normal((b, sk, hk, dv)).astype(np.float32))


def check_against_oracle(q, k, v, allowed, scale, *, sink=None, lse_weight=None, fn=None, **kwargs):
    fn = flashmask_attention if fn is None else fn
    rng = np.random.default_rng(0)
    Q, K, V = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    S = None if sink is None else torch.tensor(sink, requires_grad=True)
    out, lse = fn(Q, K, V, return_softmax_lse=True, learnable_sink=S, **kwargs)
    dout = rng.standard_normal(tuple(out.shape)).astype(np.float32)
    loss = (out * torch.tensor(dout)).sum()
    if lse_weight is not None:
        loss = loss + (torch.nan_to_num(lse, neginf=0.0) * torch.tensor(lse_weight)).sum()
    loss.backward()
    want_out, want_lse = dense_attention_fp64(q, k, v, allowed, scale, sink)
    np.testing.assert_allclose(out.detach().numpy(), want_out, atol=2e-5, rtol=2e-4)
    got_lse = lse.detach().numpy()
    np.testing.assert_array_equal(np.isneginf(got_lse), np.isneginf(want_lse))
    fin = np.isfinite(want_lse)
    np.testing.assert_allclose(got_lse[fin], want_lse[fin], atol=2e-5, rtol=2e-5)
    g_lse = None if lse_weight is None else np.where(np.isneginf(want_lse), 0.0, lse_weight)
    grads = dense_attention_grads_fp64(q, k, v, allowed, scale, dout, sink, g_lse)
    for name, t, want in zip(("dq", "dk", "dv", "dsink"), (Q, K, V, S), grads):
        if want is None:
            continue
        got = t.grad.numpy()
        assert np.all(np.isfinite(got)), name
        np.testing.assert_allclose(got, want, atol=5e-5, rtol=5e-4, err_msg=name)
    return out, lse


def test_same_arguments_as_paddle_frontend():
    from paddle_flashmask import paddle_frontend
    ours = inspect.signature(flashmask_attention).parameters
    paddles = inspect.signature(paddle_frontend.flashmask_attention).parameters
    assert list(ours) == list(paddles)
    for name in ours:
        assert ours[name].default == paddles[name].default and ours[name].kind == paddles[name].kind, name


@pytest.mark.parametrize("causal,c", FORMS)
@pytest.mark.parametrize("sq,sk", [(36, 36), (28, 43), (43, 28)])
def test_forms_gqa_mask_heads(causal, c, sq, sk):
    rng = np.random.default_rng(sq * 3 + sk + c + causal)
    h, hk = 6, [6, 3, 1][int(rng.integers(0, 3))]
    hm = [1, hk, h][int(rng.integers(0, 3))]
    q, k, v = inputs(rng, 2, sq, sk, h, hk, 16, 8)
    idx = random_indices(rng, 2, hm, sq, sk, causal, c, empty_from_row=sq - 4)
    allowed = expand_mask_heads(to_dense(idx, causal, sq), h)
    idx_arg = torch.tensor(idx) if rng.integers(0, 2) else idx
    check_against_oracle(q, k, v, allowed, 16 ** -0.5, startend_row_indices=idx_arg, causal=causal)


@pytest.mark.parametrize("causal,c", FORMS)
def test_sink_and_lse_gradient(causal, c):
    rng = np.random.default_rng(20 + c + causal)
    q, k, v = inputs(rng, 1, 26, 26, 4, 2, 8)
    idx = random_indices(rng, 1, 2, 26, 26, causal, c, empty_from_row=22)
    allowed = expand_mask_heads(to_dense(idx, causal, 26), 4)
    check_against_oracle(q, k, v, allowed, 0.4, sink=rng.standard_normal(4).astype(np.float32),
                         lse_weight=rng.standard_normal((1, 4, 26)).astype(np.float32),
                         startend_row_indices=idx, causal=causal, softmax_scale=0.4)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("sq,sk", [(19, 19), (12, 31), (31, 12)])
def test_plain_attention(causal, sq, sk):
    rng = np.random.default_rng(sq * sk)
    q, k, v = inputs(rng, 1, sq, sk, 4, 2, 8)
    check_against_oracle(q, k, v, plain_mask(1, 4, sq, sk, causal), 8 ** -0.5, causal=causal)


@pytest.mark.parametrize("window,causal", [(2, True), ((3, 1), False), ((1, 4), True)])
def test_window_size(window, causal):
    rng = np.random.default_rng(3)
    s = 18
    q, k, v = inputs(rng, 2, s, s, 2, 1, 8)
    left, right = (window, window) if isinstance(window, int) else window
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    ok = (j >= i - left) & ((j <= i) if causal else (j <= i + right))
    check_against_oracle(q, k, v, np.broadcast_to(ok, (2, 2, s, s)), 8 ** -0.5, window_size=window,
                         causal=causal)


def test_return_convention_and_dtypes():
    rng = np.random.default_rng(4)
    q, k, v = (torch.tensor(a) for a in inputs(rng, 1, 8, 8, 2, 2, 8))
    out = flashmask_attention(q, k, v, causal=True)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 8, 2, 8)
    res = flashmask_attention(q, k, v, causal=True, return_softmax_lse=True)
    assert isinstance(res, tuple) and len(res) == 2 and res[1].dtype == torch.float32
    for dtype in (torch.float16, torch.bfloat16):
        out = flashmask_attention(q.to(dtype), k.to(dtype), v.to(dtype), causal=True)
        assert out.dtype == dtype and out.is_contiguous()


def test_custom_ops_registered_with_fake_impls():
    rng = np.random.default_rng(5)
    q, k, v = (torch.tensor(a, requires_grad=True) for a in inputs(rng, 1, 9, 9, 2, 1, 8))
    idx = torch.tensor(random_indices(rng, 1, 1, 9, 9, False, 4))
    sink = torch.randn(2, requires_grad=True)
    assert hasattr(torch.ops.paddle_flashmask, "fwd") and hasattr(torch.ops.paddle_flashmask, "bwd")
    torch.library.opcheck(torch.ops.paddle_flashmask.fwd.default,
                          (q, k, v, idx, sink, False, 0.3, "reference", -1, True))
    torch.library.opcheck(torch.ops.paddle_flashmask.fwd.default,
                          (q, k, v, None, None, True, 0.3, "", -1, False))


@pytest.mark.parametrize("use_sink", [False, True])
def test_torch_compile_fullgraph(use_sink):
    rng = np.random.default_rng(6)
    mask = mb.shared_question_mask([[5, 3, 4], [4, 4]], 24)
    idx = torch.tensor(mask.startend_row_indices)
    q, k, v = inputs(rng, 1, 24, 24, 4, 2, 8)
    sink = rng.standard_normal(4).astype(np.float32) if use_sink else None
    allowed = expand_mask_heads(to_dense(*mask), 4)

    def attention(Q, K, V, **kw):
        kw.pop("startend_row_indices")
        return flashmask_attention(Q, K, V, idx, **kw)

    torch._dynamo.reset()
    compiled = torch.compile(attention, fullgraph=True, backend="aot_eager")
    check_against_oracle(q, k, v, allowed, 8 ** -0.5, sink=sink, fn=compiled, startend_row_indices=idx,
                         causal=mask.causal)
    compiled_inductor = torch.compile(attention, fullgraph=True)
    check_against_oracle(q, k, v, allowed, 8 ** -0.5, sink=sink, fn=compiled_inductor,
                         startend_row_indices=idx, causal=mask.causal)


def test_backend_switches(monkeypatch):
    rng = np.random.default_rng(7)
    q, k, v = (torch.tensor(a) for a in inputs(rng, 1, 8, 8, 1, 1, 8))
    monkeypatch.delenv(backends.BACKEND_ENV, raising=False)
    flashmask_attention(q, k, v, causal=True)
    assert backends.last_backend() == "reference"
    with pytest.raises(RuntimeError, match="backend='cute'.*CUDA"):
        flashmask_attention(q, k, v, causal=True, backend="cute")
    monkeypatch.setenv(backends.BACKEND_ENV, "reference")
    flashmask_attention(q, k, v, causal=True)
    assert backends.last_backend() == "reference"
    monkeypatch.setenv(backends.BACKEND_ENV, "nope")
    with pytest.raises(ValueError, match="PADDLE_FLASHMASK_BACKEND"):
        flashmask_attention(q, k, v, causal=True)


def test_deterministic_follows_torch_flag(monkeypatch):
    rng = np.random.default_rng(8)
    q, k, v = (torch.tensor(a, requires_grad=True) for a in inputs(rng, 1, 8, 8, 1, 1, 8))
    monkeypatch.delenv(backends.DETERMINISTIC_ENV, raising=False)
    flashmask_attention(q, k, v, causal=True).sum().backward()
    assert backends.last_deterministic() is False
    prev = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        flashmask_attention(q, k, v, causal=True).sum().backward()
        assert backends.last_deterministic() is True
    finally:
        torch.use_deterministic_algorithms(prev)
    flashmask_attention(q, k, v, causal=True, deterministic=True).sum().backward()
    assert backends.last_deterministic() is True
    monkeypatch.setenv(backends.DETERMINISTIC_ENV, "off")
    flashmask_attention(q, k, v, causal=True, deterministic=None).sum().backward()
    assert backends.last_deterministic() is False


@pytest.mark.parametrize("kwargs,exc,msg", [
    (dict(dropout=0.2), NotImplementedError, "dropout"),
    (dict(return_seed_offset=True), NotImplementedError, "return_seed_offset"),
    (dict(block_mask=torch.ones(1, 1, 1, 1, dtype=torch.int32)), NotImplementedError, "block_mask"),
    (dict(startend_row_indices=torch.zeros(1, 1, 8, 1, dtype=torch.int64)), ValueError, "int32"),
    (dict(startend_row_indices=np.full((1, 1, 8, 1), 11, np.int32)), ValueError, "max 11"),
    (dict(learnable_sink=torch.zeros(5)), ValueError, "learnable_sink"),
    (dict(window_size=2, startend_row_indices=np.zeros((1, 1, 8, 1), np.int32)), ValueError, "window_size"),
])
def test_errors(kwargs, exc, msg):
    rng = np.random.default_rng(9)
    q, k, v = (torch.tensor(a) for a in inputs(rng, 1, 8, 8, 2, 2, 8))
    with pytest.raises(exc, match=msg):
        flashmask_attention(q, k, v, causal=True, **kwargs)
    with pytest.raises(ValueError, match="query: expected a torch.Tensor"):
        flashmask_attention(q.numpy(), k, v, causal=True)
    with pytest.raises(ValueError, match="value: expected num_kv_heads 2"):
        flashmask_attention(q, k, v[:, :, :1], causal=True)


def test_torch_compile_window_size():
    rng = np.random.default_rng(10)
    s = 20
    q, k, v = inputs(rng, 1, s, s, 2, 2, 8)
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    ok = (j >= i - 3) & (j <= i)
    torch._dynamo.reset()
    compiled = torch.compile(flashmask_attention, fullgraph=True, backend="aot_eager")
    check_against_oracle(q, k, v, np.broadcast_to(ok, (1, 2, s, s)), 8 ** -0.5, fn=compiled, window_size=3,
                         causal=True)


def test_gradients_only_for_inputs_that_want_them():
    rng = np.random.default_rng(11)
    arrays = list(inputs(rng, 1, 12, 12, 2, 1, 8)) + [np.zeros(2, np.float32)]
    full = [torch.tensor(a, requires_grad=True) for a in arrays]
    flashmask_attention(*full[:3], causal=True, learnable_sink=full[3]).sum().backward()
    for wanted in range(4):
        ts = [torch.tensor(a, requires_grad=(i == wanted)) for i, a in enumerate(arrays)]
        flashmask_attention(*ts[:3], causal=True, learnable_sink=ts[3]).sum().backward()
        for i, t in enumerate(ts):
            if i == wanted:
                np.testing.assert_allclose(t.grad.numpy(), full[i].grad.numpy(), atol=1e-6)
            else:
                assert t.grad is None
    with torch.no_grad():
        assert not flashmask_attention(*full[:3], causal=True).requires_grad


def test_eager_function_and_custom_op_agree():
    """Eager calls skip the torch.library dispatch (ops.EagerFlashMask); traced calls use the
    custom op. Both must give the same outputs and gradients (sink and LSE gradient included)."""
    from paddle_flashmask.torch import ops

    rng = np.random.default_rng(7)
    q, k, v = inputs(rng, 1, 21, 21, 4, 2, 8)
    idx = torch.tensor(random_indices(rng, 1, 1, 21, 21, True, 2, empty_from_row=18))
    sink = rng.standard_normal(4).astype(np.float32)
    lse_w = torch.tensor(rng.standard_normal((1, 4, 21)).astype(np.float32))
    results = []
    for op in (ops.EagerFlashMask.apply, torch.ops.paddle_flashmask.fwd):
        Q, K, V, S = (torch.tensor(a, requires_grad=True) for a in (q, k, v, sink))
        out, lse = op(Q, K, V, idx, S, True, 0.3, "reference", -1, True)
        ((out ** 2).sum() + (torch.nan_to_num(lse, neginf=0.0) * lse_w).sum()).backward()
        results.append([t.detach().clone() for t in (out, lse, Q.grad, K.grad, V.grad, S.grad)])
    for eager, traced in zip(*results):
        torch.testing.assert_close(eager, traced, rtol=0, atol=0)


def test_eager_path_used_outside_compile(monkeypatch):
    from paddle_flashmask.torch import ops

    calls = []
    original = ops.EagerFlashMask.apply
    monkeypatch.setattr(ops.EagerFlashMask, "apply", lambda *a: calls.append(1) or original(*a))
    rng = np.random.default_rng(8)
    q, k, v = (torch.tensor(a) for a in inputs(rng, 1, 9, 9, 2, 2, 8))
    flashmask_attention(q, k, v, causal=True)
    assert calls == [1]
