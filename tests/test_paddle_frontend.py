"""paddle_flashmask.flashmask_attention (Paddle frontend): results through autograd, conventions, errors."""
import inspect

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import paddle_flashmask  # noqa: E402
from oracle import (FORMS, dense_attention_fp64, dense_attention_grads_fp64, expand_mask_heads,  # noqa: E402
                    plain_mask, random_indices)
from paddle_flashmask import flash_attention_with_sparse_mask, flashmask_attention, to_dense  # noqa: E402
from paddle_flashmask import mask_builders as mb  # noqa: E402
from paddle_flashmask.ops import backend as backends  # noqa: E402


def leaf(a):
    return paddle.to_tensor(a, stop_gradient=False)


def inputs(rng, b, sq, sk, h, hk, d, dv=None):
    dv = d if dv is None else dv
    return (rng.standard_normal((b, sq, h, d)).astype(np.float32),
            rng.standard_normal((b, sk, hk, d)).astype(np.float32),
            rng.standard_normal((b, sk, hk, dv)).astype(np.float32))


def check_against_oracle(q, k, v, allowed, scale, *, sink=None, lse_weight=None, **kwargs):
    """Run the frontend with autograd and compare out, lse, dq, dk, dv, dsink with the fp64 oracle."""
    rng = np.random.default_rng(0)
    Q, K, V = leaf(q), leaf(k), leaf(v)
    S = None if sink is None else leaf(sink)
    out, lse = flashmask_attention(Q, K, V, return_softmax_lse=True, learnable_sink=S, **kwargs)
    dout = rng.standard_normal(out.shape).astype(np.float32)
    loss = (out * paddle.to_tensor(dout)).sum()
    if lse_weight is not None:
        finite = paddle.where(paddle.isinf(lse), paddle.zeros_like(lse), lse)
        loss = loss + (finite * paddle.to_tensor(lse_weight)).sum()
    loss.backward()
    want_out, want_lse = dense_attention_fp64(q, k, v, allowed, scale, sink)
    np.testing.assert_allclose(out.numpy(), want_out, atol=2e-5, rtol=2e-4)
    got_lse = lse.numpy()
    np.testing.assert_array_equal(np.isneginf(got_lse), np.isneginf(want_lse))
    fin = np.isfinite(want_lse)
    np.testing.assert_allclose(got_lse[fin], want_lse[fin], atol=2e-5, rtol=2e-5)
    g_lse = None
    if lse_weight is not None:
        g_lse = np.where(np.isneginf(want_lse), 0.0, lse_weight)
    grads = dense_attention_grads_fp64(q, k, v, allowed, scale, dout, sink, g_lse)
    for name, t, want in zip(("dq", "dk", "dv", "dsink"), (Q, K, V, S), grads):
        if want is None:
            continue
        got = t.grad.numpy()
        assert np.all(np.isfinite(got)), name
        np.testing.assert_allclose(got, want, atol=5e-5, rtol=5e-4, err_msg=name)
    return out, lse


def test_signature_matches_paddle():
    ours = inspect.signature(flashmask_attention).parameters
    theirs = inspect.signature(paddle.nn.functional.flashmask_attention).parameters
    for name, p in theirs.items():
        assert name in ours, name
        assert ours[name].kind == p.kind and ours[name].default == p.default, name
    assert list(ours)[: len(theirs)] == list(theirs)
    extras = list(ours)[len(theirs):]
    assert extras == ["learnable_sink", "backend", "deterministic", "validate_indices"]
    assert all(ours[n].kind == inspect.Parameter.KEYWORD_ONLY for n in extras)


@pytest.mark.parametrize("causal,c", FORMS)
@pytest.mark.parametrize("sq,sk", [(40, 40), (33, 47), (47, 33)])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (4, 1)])  # MHA, GQA, MQA
def test_forms_heads_lengths(causal, c, sq, sk, heads):
    h, hk = heads
    rng = np.random.default_rng(sq * 7 + sk + c * 3 + h * hk + causal)
    q, k, v = inputs(rng, 2, sq, sk, h, hk, 16, 8)
    hm = [1, hk, h][int(rng.integers(0, 3))]
    idx = random_indices(rng, 2, hm, sq, sk, causal, c, empty_from_row=sq - 2)
    allowed = expand_mask_heads(to_dense(idx, causal, sq), h)
    as_tensor = bool(rng.integers(0, 2))
    check_against_oracle(q, k, v, allowed, 16 ** -0.5,
                         startend_row_indices=paddle.to_tensor(idx) if as_tensor else idx, causal=causal)


@pytest.mark.parametrize("causal,c", FORMS)
def test_sink_and_lse_gradient(causal, c):
    rng = np.random.default_rng(c + 10 * causal)
    q, k, v = inputs(rng, 1, 30, 30, 4, 2, 8)
    idx = random_indices(rng, 1, 4, 30, 30, causal, c, empty_from_row=25)
    allowed = expand_mask_heads(to_dense(idx, causal, 30), 4)
    sink = rng.standard_normal(4).astype(np.float32)
    out, lse = check_against_oracle(q, k, v, allowed, 0.3, sink=sink,
                                    lse_weight=rng.standard_normal((1, 4, 30)).astype(np.float32),
                                    startend_row_indices=idx, causal=causal, softmax_scale=0.3)
    empty = ~allowed.any(-1)
    np.testing.assert_allclose(lse.numpy()[empty], np.broadcast_to(sink[None, :, None], empty.shape)[empty])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("sq,sk", [(25, 25), (17, 30), (30, 17)])
def test_plain_attention(causal, sq, sk):
    rng = np.random.default_rng(sq + sk)
    q, k, v = inputs(rng, 2, sq, sk, 2, 1, 8)
    check_against_oracle(q, k, v, plain_mask(2, 2, sq, sk, causal), 8 ** -0.5, causal=causal)


def window_allowed(sq, sk, left, right, causal):
    """Independent statement of the window convention: row i (at key position p = i + Sk - Sq)
    sees keys [p - left, p] (causal) or [p - left, p + right]; -1 = unbounded."""
    i = np.arange(sq)[:, None] + (sk - sq)
    j = np.arange(sk)[None, :]
    ok = np.ones((sq, sk), bool) if left < 0 else (j >= i - left)
    if causal:
        ok &= j <= i
    elif right >= 0:
        ok &= j <= i + right
    return ok


@pytest.mark.parametrize("window,causal", [(3, True), ((2, 5), True), ((2, 5), False), (4, False),
                                           ((0, 0), False), ((-1, 2), False), (0, True)])
def test_window_size(window, causal):
    rng = np.random.default_rng(5)
    s = 21
    q, k, v = inputs(rng, 2, s, s, 2, 2, 8)
    left, right = (window, window) if isinstance(window, int) else window
    allowed = np.broadcast_to(window_allowed(s, s, left, right, causal), (2, 2, s, s))
    check_against_oracle(q, k, v, allowed, 8 ** -0.5, window_size=window, causal=causal)


def test_window_size_paddle_docstring_example():
    # Paddle's docs: causal window 2 on 10 tokens = LTS [3, 4, ..., 10, 10, 10]
    mask = mb.window_mask(10, 10, 2, 2, True)
    np.testing.assert_array_equal(mask.startend_row_indices[0, 0, :, 0], [3, 4, 5, 6, 7, 8, 9, 10, 10, 10])


def test_return_convention():
    rng = np.random.default_rng(1)
    q, k, v = (paddle.to_tensor(a) for a in inputs(rng, 1, 8, 8, 2, 2, 8))
    out = flashmask_attention(q, k, v, causal=True)
    assert isinstance(out, paddle.Tensor) and out.shape == [1, 8, 2, 8] and out.is_contiguous()
    res = flashmask_attention(q, k, v, causal=True, return_softmax_lse=True)
    assert isinstance(res, list) and len(res) == 2
    assert res[1].shape == [1, 2, 8] and res[1].dtype == paddle.float32
    np.testing.assert_array_equal(res[0].numpy(), out.numpy())


def test_builder_mask_splat_and_numpy_indices():
    rng = np.random.default_rng(2)
    mask = mb.causal_document_mask([7, 9, 5], 24)  # padding rows 21..23 see nothing
    q, k, v = inputs(rng, 1, 24, 24, 2, 2, 8)
    allowed = expand_mask_heads(to_dense(*mask), 2)
    out, lse = check_against_oracle(q, k, v, allowed, 8 ** -0.5, **mask._asdict())
    assert np.all(out.numpy()[:, 21:] == 0) and np.all(np.isneginf(lse.numpy()[:, :, 21:]))


def test_half_precision_and_bf16_sink():
    rng = np.random.default_rng(3)
    q, k, v = inputs(rng, 1, 20, 20, 2, 2, 16)
    idx = random_indices(rng, 1, 1, 20, 20, True, 1)
    allowed = expand_mask_heads(to_dense(idx, True, 20), 2)
    for dtype in ("float16", "bfloat16"):
        Q, K, V = (paddle.to_tensor(a).astype(dtype) for a in (q, k, v))
        for t in (Q, K, V):
            t.stop_gradient = False
        sink = paddle.to_tensor(np.array([0.3, -0.2], np.float32)).astype(dtype)
        sink.stop_gradient = False
        out = flashmask_attention(Q, K, V, idx, causal=True, learnable_sink=sink)
        assert out.dtype == Q.dtype
        out.astype("float32").sum().backward()
        assert Q.grad.dtype == Q.dtype and sink.grad.dtype == sink.dtype
        rq, rk, rv = (t.astype("float32").numpy() for t in (Q, K, V))
        want, _ = dense_attention_fp64(rq, rk, rv, allowed, 0.25, sink.astype("float32").numpy())
        np.testing.assert_allclose(out.astype("float32").numpy(), want, atol=3e-2, rtol=3e-2)


def test_flash_attention_with_sparse_mask_alias():
    rng = np.random.default_rng(4)
    q, k, v = (paddle.to_tensor(a) for a in inputs(rng, 2, 16, 16, 2, 2, 8))
    start_rows = rng.integers(0, 17, size=(2, 1, 16)).astype(np.int32)
    a = flash_attention_with_sparse_mask(q, k, v, paddle.to_tensor(start_rows), causal=True)
    b = flashmask_attention(q, k, v, start_rows[..., None], causal=True)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    out, lse = flash_attention_with_sparse_mask(q, k, v, start_rows, attn_mask_start_row=0, causal=True,
                                                return_softmax_lse=True)
    assert lse.shape == [2, 2, 16]
    with pytest.raises(ValueError, match="causal"):
        flash_attention_with_sparse_mask(q, k, v, start_rows, causal=False)
    with pytest.raises(ValueError, match="attn_mask_start_row"):
        flash_attention_with_sparse_mask(q, k, v, start_rows, attn_mask_start_row=-1, causal=True)
    with pytest.raises(ValueError, match="rank 3"):
        flash_attention_with_sparse_mask(q, k, v, start_rows[..., None], causal=True)
    with pytest.raises(NotImplementedError, match="return_softmax"):
        flash_attention_with_sparse_mask(q, k, v, start_rows, causal=True, return_softmax=True)


def test_backend_choice_and_observability(monkeypatch):
    rng = np.random.default_rng(6)
    q, k, v = (paddle.to_tensor(a) for a in inputs(rng, 1, 8, 8, 1, 1, 8))
    monkeypatch.delenv(backends.BACKEND_ENV, raising=False)
    flashmask_attention(q, k, v, causal=True)
    assert backends.last_backend() == "reference"  # CPU tensors
    flashmask_attention(q, k, v, causal=True, backend="reference")
    assert backends.last_backend() == "reference"
    with pytest.raises(RuntimeError, match="backend='cute'.*CUDA"):
        flashmask_attention(q, k, v, causal=True, backend="cute")
    monkeypatch.setenv(backends.BACKEND_ENV, "cute")
    with pytest.raises(RuntimeError, match="backend='cute'"):
        flashmask_attention(q, k, v, causal=True)
    flashmask_attention(q, k, v, causal=True, backend="auto")  # the argument wins over the env
    monkeypatch.setenv(backends.BACKEND_ENV, "fast")
    with pytest.raises(ValueError, match="PADDLE_FLASHMASK_BACKEND.*'fast'"):
        flashmask_attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match="backend.*'triton'"):
        flashmask_attention(q, k, v, causal=True, backend="triton")


def test_deterministic_resolution(monkeypatch):
    rng = np.random.default_rng(7)
    q, k, v = (leaf(a) for a in inputs(rng, 1, 8, 8, 1, 1, 8))
    monkeypatch.delenv(backends.DETERMINISTIC_ENV, raising=False)
    flashmask_attention(q, k, v, causal=True).sum().backward()  # CPU: FLAGS_cudnn_deterministic not read
    assert backends.last_deterministic() is False
    flashmask_attention(q, k, v, causal=True, deterministic=True).sum().backward()
    assert backends.last_deterministic() is True
    monkeypatch.setenv(backends.DETERMINISTIC_ENV, "1")
    flashmask_attention(q, k, v, causal=True).sum().backward()
    assert backends.last_deterministic() is True
    monkeypatch.setenv(backends.DETERMINISTIC_ENV, "maybe")
    with pytest.raises(ValueError, match="PADDLE_FLASHMASK_DETERMINISTIC.*'maybe'"):
        flashmask_attention(q, k, v, causal=True)


def test_validate_indices_switch():
    rng = np.random.default_rng(8)
    q, k, v = (paddle.to_tensor(a) for a in inputs(rng, 1, 8, 8, 1, 1, 8))
    bad = np.full((1, 1, 8, 1), 9, np.int32)  # > Sq
    with pytest.raises(ValueError, match=r"\[0, seqlen_q=8\].*max 9"):
        flashmask_attention(q, k, v, bad, causal=True)
    flashmask_attention(q, k, v, bad, causal=True, validate_indices=False)  # values past Sq act as Sq
    with pytest.raises(ValueError, match="rank 4"):  # shape checks run even with validation off
        flashmask_attention(q, k, v, bad[0], causal=True, validate_indices=False)


def test_accepted_paddle_arguments_without_effect():
    rng = np.random.default_rng(9)
    q, k, v = (paddle.to_tensor(a) for a in inputs(rng, 1, 8, 8, 1, 1, 8))
    ref = flashmask_attention(q, k, v, causal=True).numpy()
    for kw in (dict(training=False), dict(dropout=0.5, training=False), dict(rng_name="local_seed"),
               dict(name="attn")):
        np.testing.assert_array_equal(flashmask_attention(q, k, v, causal=True, **kw).numpy(), ref)


ERROR_CASES = [
    # (description, kwargs builder, exception, message regex)
    ("dropout", lambda t: dict(dropout=0.1), NotImplementedError, r"dropout: expected 0\.0.*0\.1"),
    ("dropout range", lambda t: dict(dropout=1.5), ValueError, r"dropout: expected a float in \[0, 1\)"),
    ("seed offset", lambda t: dict(return_seed_offset=True), NotImplementedError, "return_seed_offset"),
    ("fixed seed", lambda t: dict(fixed_seed_offset=paddle.to_tensor([1, 2])), NotImplementedError,
     "fixed_seed_offset"),
    ("block mask", lambda t: dict(block_mask=paddle.ones([1, 1, 1, 1], "int32")), NotImplementedError,
     "block_mask"),
    ("query rank", lambda t: dict(query=t["q"][0]), ValueError,
     r"query: expected a 4-D.*found shape \[8, 2, 8\]"),
    ("dtype", lambda t: dict(query=t["q"].astype("float64")), ValueError, "query: expected dtype.*float64"),
    ("dtype mix", lambda t: dict(key=t["k"].astype("float16")), ValueError,
     "key: expected dtype float32.*found float16"),
    ("batch", lambda t: dict(key=paddle.concat([t["k"], t["k"]])), ValueError, "key: expected batch size 1"),
    ("seqlen v", lambda t: dict(value=t["v"][:, :5]), ValueError, "value: expected seqlen_k 8.*found 5"),
    ("head dim", lambda t: dict(key=t["k"][..., :4], value=t["v"][..., :4]), ValueError,
     "key: expected head_dim 8.*found 4"),
    ("heads", lambda t: dict(key=paddle.concat([t["k"]] * 3, axis=2),
                             value=paddle.concat([t["v"]] * 3, axis=2)),
     ValueError, "num_kv_heads dividing num_heads=2.*found 3"),
    ("sink shape", lambda t: dict(learnable_sink=paddle.zeros([3])), ValueError,
     r"learnable_sink: expected shape \[num_heads\] = \[2\], found \[3\]"),
    ("indices dtype", lambda t: dict(startend_row_indices=paddle.zeros([1, 1, 8, 1], "int64")), ValueError,
     "startend_row_indices: expected dtype int32, found .*int64"),
    ("indices rank", lambda t: dict(startend_row_indices=np.zeros((1, 8, 1), np.int32)), ValueError,
     "startend_row_indices: expected rank 4"),
    ("indices sk", lambda t: dict(startend_row_indices=np.zeros((1, 1, 7, 1), np.int32)), ValueError,
     "startend_row_indices: expected Sk=8.*found 7"),
    ("indices heads", lambda t: dict(startend_row_indices=np.zeros((1, 3, 8, 1), np.int32)), ValueError,
     r"mask heads \(dim 1\) in \[1, 2\], found 3"),
    ("indices batch", lambda t: dict(startend_row_indices=np.zeros((2, 1, 8, 1), np.int32)), ValueError,
     "expected batch size 1"),
    ("C vs causal", lambda t: dict(startend_row_indices=np.zeros((1, 1, 8, 4), np.int32), causal=True),
     ValueError, "C must be 1 or 2 when causal=True, found C=4"),
    ("C=1 non-causal", lambda t: dict(startend_row_indices=np.zeros((1, 1, 8, 1), np.int32), causal=False),
     ValueError, "C must be 2 or 4 when causal=False, found C=1"),
    ("negative", lambda t: dict(startend_row_indices=np.full((1, 1, 8, 1), -1, np.int32)), ValueError,
     "min -1"),
    ("window+indices", lambda t: dict(window_size=2, startend_row_indices=np.zeros((1, 1, 8, 1), np.int32)),
     ValueError, "window_size: expected None when startend_row_indices"),
    ("window bad", lambda t: dict(window_size=(1, 2, 3)), ValueError, "window_size: expected an int or"),
    ("window neg", lambda t: dict(window_size=-3), ValueError, r"window_size: expected an int >= 0"),
    ("scale", lambda t: dict(softmax_scale=float("nan")), ValueError, "softmax_scale: expected a finite"),
    ("not a tensor", lambda t: dict(query=np.zeros((1, 8, 2, 8), np.float32)), ValueError,
     "query: expected a paddle.Tensor"),
    ("sink not a tensor", lambda t: dict(learnable_sink=np.zeros(2, np.float32)), ValueError,
     "learnable_sink: expected a paddle.Tensor"),
    ("indices foreign", lambda t: dict(startend_row_indices=object()), ValueError,
     "startend_row_indices: expected a tensor of the query's framework or a numpy array"),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_errors(case):
    _, make, exc, msg = case
    rng = np.random.default_rng(0)
    t = dict(zip("qkv", (paddle.to_tensor(a) for a in inputs(rng, 1, 8, 8, 2, 1, 8))))
    kwargs = dict(query=t["q"], key=t["k"], value=t["v"], causal=True)
    kwargs.update(make(t))
    args = [kwargs.pop("query"), kwargs.pop("key"), kwargs.pop("value")]
    with pytest.raises(exc, match=msg):
        flashmask_attention(*args, **kwargs)


def test_package_level_name():
    assert paddle_flashmask.flashmask_attention is flashmask_attention


def test_gradients_only_for_inputs_that_want_them():
    rng = np.random.default_rng(10)
    q, k, v = inputs(rng, 1, 12, 12, 2, 1, 8)
    full = [leaf(a) for a in (q, k, v)] + [leaf(np.zeros(2, np.float32))]
    flashmask_attention(*full[:3], causal=True, learnable_sink=full[3]).sum().backward()
    for wanted in range(4):
        ts = [paddle.to_tensor(a) for a in (q, k, v, np.zeros(2, np.float32))]
        ts[wanted].stop_gradient = False
        flashmask_attention(*ts[:3], causal=True, learnable_sink=ts[3]).sum().backward()
        for i, t in enumerate(ts):
            if i == wanted:
                np.testing.assert_allclose(t.grad.numpy(), full[i].grad.numpy(), atol=1e-6)
            else:
                assert t.grad is None
    with paddle.no_grad():
        out = flashmask_attention(*full[:3], causal=True)
    assert out.stop_gradient


@pytest.mark.parametrize("sq,sk", [(15, 21), (21, 15)])
@pytest.mark.parametrize("window,causal", [((3, 2), True), ((3, 2), False)])
def test_window_size_unequal_lengths(sq, sk, window, causal):
    rng = np.random.default_rng(sq + sk)
    q, k, v = inputs(rng, 1, sq, sk, 2, 1, 8)
    allowed = np.broadcast_to(window_allowed(sq, sk, *window, causal), (1, 2, sq, sk))
    check_against_oracle(q, k, v, allowed, 8 ** -0.5, window_size=window, causal=causal)


def test_cudnn_deterministic_flag_read_only_for_gpu_tensors_on_cuda_builds(monkeypatch):
    q = paddle.zeros([1, 4, 1, 8])
    monkeypatch.delenv(backends.DETERMINISTIC_ENV, raising=False)
    reads = []

    def fake_get_flags(names):
        reads.append(names)
        return {"FLAGS_cudnn_deterministic": True}

    monkeypatch.setattr(paddle, "get_flags", fake_get_flags)
    monkeypatch.setattr(paddle, "is_compiled_with_cuda", lambda: True)
    assert backends.resolve_deterministic(None, q) is False and reads == []  # CPU tensor: never read
    glue = backends.glue_for(q)
    monkeypatch.setattr(type(glue), "on_cuda", lambda self, x: True)
    assert backends.resolve_deterministic(None, q) is True and reads == [["FLAGS_cudnn_deterministic"]]
    assert backends.resolve_deterministic(False, q) is False  # the argument wins
    monkeypatch.setattr(paddle, "is_compiled_with_cuda", lambda: False)
    assert backends.resolve_deterministic(None, q) is False and len(reads) == 1
