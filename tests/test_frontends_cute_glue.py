"""The frontends' glue to the cute backend (ops/backend.py), checked on CPU with a stand-in kernel
interface, plus a GPU test (skipped without an SM90 GPU) comparing the real kernels to the reference.

The stand-in honours KERNELS.md's host API: it checks what the glue hands over (dtypes, shapes,
contiguity, stream handle, deterministic flag, dsink iff a sink) and writes the reference result
in place into the framework-allocated outputs.
"""
import types

import numpy as np
import pytest

from oracle import random_indices
from paddle_flashmask.ops import backend as backends
from paddle_flashmask.ops import reference

FAKE_STREAM = 1234


def _name(x):
    return str(x.dtype).split(".")[-1]


def _contiguous(x):
    return x.is_contiguous() if callable(getattr(x, "is_contiguous", None)) else True


class FakeInterface:
    def __init__(self, copy):
        self.copy = copy  # copy(dst, src): in-place write of the framework
        self.calls = []

    def flashmask_fwd(self, q, k, v, out, lse, idx, *, causal, softmax_scale, learnable_sink=None, stream):
        assert isinstance(stream, int) and stream == FAKE_STREAM
        assert all(_contiguous(t) for t in (q, k, v, out, lse))
        assert _name(out) == _name(q) and _name(lse) == "float32"
        assert list(out.shape) == [*q.shape[:3], v.shape[3]]
        assert list(lse.shape) == [q.shape[0], q.shape[2], q.shape[1]]
        assert learnable_sink is None or _name(learnable_sink) == "float32"
        o, l = reference.flashmask_fwd(q, k, v, idx, causal=causal, softmax_scale=softmax_scale,
                                       learnable_sink=learnable_sink)
        self.copy(out, o)
        self.copy(lse, l)
        self.calls.append(("fwd", None))

    def flashmask_bwd(self, q, k, v, out, dout, lse, dq, dk, dv, idx, *, causal, softmax_scale,
                      learnable_sink=None, dsink=None, deterministic=False, stream):
        assert isinstance(stream, int) and stream == FAKE_STREAM
        assert all(_contiguous(t) for t in (q, k, v, out, dout, dq, dk, dv))
        assert (dsink is None) == (learnable_sink is None)
        for g, x in ((dq, q), (dk, k), (dv, v)):
            assert list(g.shape) == list(x.shape) and _name(g) == _name(x)
        grads = reference.flashmask_bwd(dout, q, k, v, out, lse, idx, causal=causal,
                                        softmax_scale=softmax_scale, learnable_sink=learnable_sink)
        for dst, src in zip((dq, dk, dv), grads):
            self.copy(dst, src)
        if dsink is not None:
            assert _name(dsink) == "float32" and list(dsink.shape) == [q.shape[2]]
            self.copy(dsink, grads[3])
        self.calls.append(("bwd", deterministic))


def install_fake(monkeypatch, framework):
    import paddle_flashmask.ops.cute as cute_pkg
    if framework == "torch":
        copy = lambda dst, src: dst.copy_(src)  # noqa: E731
    else:
        import paddle
        copy = lambda dst, src: paddle.assign(src.astype(dst.dtype), output=dst)  # noqa: E731
    fake = FakeInterface(copy)
    monkeypatch.setattr(cute_pkg, "interface", types.SimpleNamespace(flashmask_fwd=fake.flashmask_fwd,
                                                                     flashmask_bwd=fake.flashmask_bwd),
                        raising=False)
    monkeypatch.setattr(backends, "cute_unavailable_reason", lambda *a, **k: None)
    glue = backends.glue_for(_tensor(framework, np.zeros(1, np.float32)))
    monkeypatch.setattr(type(glue), "stream", lambda self, x: FAKE_STREAM)
    return fake


def _tensor(framework, a, grad=False):
    if framework == "torch":
        import torch
        return torch.tensor(a, requires_grad=grad)
    import paddle
    return paddle.to_tensor(a, stop_gradient=not grad)


def _frontend(framework):
    if framework == "torch":
        from paddle_flashmask.torch import flashmask_attention
    else:
        from paddle_flashmask import flashmask_attention
    return flashmask_attention


def _np(x):
    return x.detach().numpy() if hasattr(x, "detach") and not hasattr(x, "place") else x.numpy()


@pytest.mark.parametrize("framework", ["torch", "paddle"])
@pytest.mark.parametrize("use_sink", [False, True])
def test_cute_glue_matches_reference(monkeypatch, framework, use_sink):
    rng = np.random.default_rng(1)
    shapes = ((1, 20, 4, 8), (1, 20, 2, 8), (1, 20, 2, 8))
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    sink = rng.standard_normal(4).astype(np.float32) if use_sink else None
    idx = random_indices(rng, 1, 2, 20, 20, True, 2)
    attention = _frontend(framework)

    def run(backend, deterministic=None):
        Q, K, V = (_tensor(framework, a, grad=True) for a in (q, k, v))
        S = None if sink is None else _tensor(framework, sink, grad=True)
        out = attention(Q, K, V, idx, causal=True, learnable_sink=S, backend=backend,
                        deterministic=deterministic)
        (out * out).sum().backward()
        return [_np(out)] + [_np(t.grad) for t in (Q, K, V) + ((S,) if S is not None else ())]

    want = run("reference")
    fake = install_fake(monkeypatch, framework)
    got = run("cute", deterministic=True)
    assert backends.last_backend() == "cute"
    assert fake.calls == [("fwd", None), ("bwd", True)]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-6)
    got_auto = run(None)  # auto picks cute when it is "available"
    assert backends.last_backend() == "cute" and fake.calls[-1] == ("bwd", False)
    for a, b in zip(got_auto, want):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_cute_rejects_lse_gradient(monkeypatch, framework):
    rng = np.random.default_rng(2)
    install_fake(monkeypatch, framework)
    Q = _tensor(framework, rng.standard_normal((1, 8, 1, 8)).astype(np.float32), grad=True)
    out, lse = _frontend(framework)(Q, Q, Q, causal=True, return_softmax_lse=True, backend="cute")
    with pytest.raises(Exception, match="softmax_lse gradient"):  # paddle wraps backward errors
        (out.sum() + lse.sum()).backward()


def _gpu_ready():
    try:
        import torch
        import paddle_flashmask.ops.cute as cute
        return (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
                and cute.is_available())
    except Exception:
        return False


@pytest.mark.skipif(not _gpu_ready(), reason="needs an SM90 GPU with the CuTe DSL")
@pytest.mark.parametrize("causal,c", [(True, 1), (True, 2), (False, 2), (False, 4), (True, None)])
def test_cute_backend_on_gpu_matches_reference(causal, c):
    import torch
    from paddle_flashmask.torch import flashmask_attention
    rng = np.random.default_rng(3)
    b, s, h, hk, d = 2, 300, 4, 2, 128
    idx = None if c is None else torch.tensor(random_indices(rng, b, 1, s, s, causal, c), device="cuda")
    q, k, v = (torch.randn(b, s, x, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for x in (h, hk, hk))
    results = {}
    for backend in ("reference", "cute"):
        for t in (q, k, v):
            t.grad = None
        out, lse = flashmask_attention(q, k, v, idx, causal=causal, return_softmax_lse=True, backend=backend)
        out.float().square().sum().backward()
        assert backends.last_backend() == backend
        results[backend] = [out.float(), lse] + [t.grad.float() for t in (q, k, v)]
    for name, a, r in zip(("out", "lse", "dq", "dk", "dv"), results["cute"], results["reference"]):
        finite = torch.isfinite(r)
        assert torch.equal(finite, torch.isfinite(a)), name
        err = (a[finite] - r[finite]).abs().max().item()
        assert err <= 2e-2 * max(1.0, r[finite].abs().max().item()), (name, err)


def test_workspace_keep_bytes_switch(monkeypatch):
    """env PADDLE_FLASHMASK_WORKSPACE_KEEP_BYTES: unset keeps everything the scratch pool reserved
    (a caching allocator, no re-mapping after each synchronisation); a byte count caps it; anything
    else is an error naming the variable."""
    from paddle_flashmask.ops.cute import dlpack

    monkeypatch.delenv(dlpack.KEEP_BYTES_ENV, raising=False)
    assert dlpack.workspace_keep_bytes() == 2 ** 64 - 1
    monkeypatch.setenv(dlpack.KEEP_BYTES_ENV, "1048576")
    assert dlpack.workspace_keep_bytes() == 1 << 20
    for bad in ("-1", "1GB", "0.5"):
        monkeypatch.setenv(dlpack.KEEP_BYTES_ENV, bad)
        with pytest.raises(ValueError, match=dlpack.KEEP_BYTES_ENV):
            dlpack.workspace_keep_bytes()
