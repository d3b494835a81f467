"""The exact reference backend (ops/reference.py) against the independent fp64 numpy oracle.

Both framework adapters run the same tests; small tiles force many query tiles per call (partial last
tile included), so the tiled forward/backward and the per-tile visible-column trimming are exercised.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from oracle import (FORMS, dense_attention_fp64, dense_attention_grads_fp64, expand_mask_heads,
                    plain_mask, random_indices)
from paddle_flashmask import mask_builders as mb
from paddle_flashmask import to_dense
from paddle_flashmask.ops import reference

FRAMEWORKS = ["torch", "paddle"]


def to_fw(framework, array):
    if array is None:
        return None
    if framework == "torch":
        import torch
        return torch.tensor(array)
    import paddle
    return paddle.to_tensor(array)


def to_np(x):
    if x is None:
        return None
    return x.detach().cpu().numpy() if hasattr(x, "detach") and not hasattr(x, "place") else x.numpy()


def assert_close(actual, expected, what, atol=2e-5, rtol=2e-4):
    np.testing.assert_allclose(to_np(actual).astype(np.float64), expected, atol=atol, rtol=rtol,
                               err_msg=what)


def run_case(framework, rng, *, b, sq, sk, h, hk, d, dv, idx, causal, sink=False, dlse=False,
             tile_rows=None, scale=None):
    q = rng.standard_normal((b, sq, h, d)).astype(np.float32)
    k = rng.standard_normal((b, sk, hk, d)).astype(np.float32)
    v = rng.standard_normal((b, sk, hk, dv)).astype(np.float32)
    s = rng.standard_normal(h).astype(np.float32) if sink else None
    do = rng.standard_normal((b, sq, h, dv)).astype(np.float32)
    g_lse = rng.standard_normal((b, h, sq)).astype(np.float32) if dlse else None
    scale = d ** -0.5 if scale is None else scale
    if idx is None:
        allowed = plain_mask(b, h, sq, sk, causal)
    else:
        allowed = expand_mask_heads(to_dense(idx, causal, sq), h)
    ref_out, ref_lse = dense_attention_fp64(q, k, v, allowed, scale, s)
    ref_grads = dense_attention_grads_fp64(q, k, v, allowed, scale, do, s, g_lse)

    t = {n: to_fw(framework, a) for n, a in dict(q=q, k=k, v=v, s=s, do=do, idx=idx, g=g_lse).items()}
    out, lse = reference.flashmask_fwd(t["q"], t["k"], t["v"], t["idx"], causal=causal, softmax_scale=scale,
                                       learnable_sink=t["s"], tile_rows=tile_rows)
    assert tuple(out.shape) == (b, sq, h, dv) and tuple(lse.shape) == (b, h, sq)
    assert "float32" in str(lse.dtype)
    assert_close(out, ref_out, "out")
    lse_np = to_np(lse)
    np.testing.assert_array_equal(np.isneginf(lse_np), np.isneginf(ref_lse))
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse_np[finite], ref_lse[finite], atol=2e-5, rtol=2e-5, err_msg="lse")
    grads = reference.flashmask_bwd(t["do"], t["q"], t["k"], t["v"], out, lse, t["idx"], causal=causal,
                                    softmax_scale=scale, learnable_sink=t["s"], dlse=t["g"],
                                    tile_rows=tile_rows)
    for name, got, want in zip(("dq", "dk", "dv", "dsink"), grads, ref_grads):
        if want is None:
            assert got is None
            continue
        assert np.all(np.isfinite(to_np(got))), name
        assert_close(got, want, name, atol=5e-5, rtol=5e-4)
    return allowed, out, lse, grads


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("causal,c", FORMS)
@pytest.mark.parametrize("sq,sk", [(37, 37), (29, 45), (45, 29)])
def test_every_form_fwd_bwd(framework, causal, c, sq, sk):
    rng = np.random.default_rng(sq * 1000 + sk * 10 + c + causal)
    h, hk = 4, 2
    for hm in (1, hk, h):
        idx = random_indices(rng, 2, hm, sq, sk, causal, c, empty_from_row=sq - 3)
        run_case(framework, rng, b=2, sq=sq, sk=sk, h=h, hk=hk, d=16, dv=8, idx=idx, causal=causal,
                 tile_rows=8)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("sq,sk", [(33, 33), (20, 41), (41, 20)])
def test_plain_attention_without_indices(framework, causal, sq, sk):
    rng = np.random.default_rng(sq + sk + causal)
    allowed, out, lse, grads = run_case(framework, rng, b=1, sq=sq, sk=sk, h=3, hk=1, d=8, dv=8, idx=None,
                                        causal=causal, tile_rows=16)
    if causal and sq > sk:  # bottom-right alignment: the first sq - sk rows see nothing
        assert np.all(to_np(out)[:, : sq - sk] == 0)
        assert np.all(np.isneginf(to_np(lse)[:, :, : sq - sk]))


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("causal,c", FORMS)
def test_learnable_sink_and_lse_gradient(framework, causal, c):
    rng = np.random.default_rng(7 + c)
    sq = sk = 27
    idx = random_indices(rng, 1, 2, sq, sk, causal, c, empty_from_row=20)
    allowed, out, lse, grads = run_case(framework, rng, b=1, sq=sq, sk=sk, h=4, hk=2, d=8, dv=8, idx=idx,
                                        causal=causal, sink=True, dlse=True, tile_rows=5)
    # rows with no visible key: out 0 and LSE equal to the sink of their head
    empty = ~allowed.any(-1)  # [B, H, Sq]
    assert empty.any()


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_empty_rows_give_zero_output_neg_inf_lse_and_zero_grads(framework):
    rng = np.random.default_rng(3)
    sq = sk = 19
    idx = np.full((1, 1, sk, 1), 12, dtype=np.int32)  # causal, rows >= 12 see nothing
    allowed, out, lse, (dq, dk, dv, _) = run_case(framework, rng, b=1, sq=sq, sk=sk, h=2, hk=2, d=8, dv=8,
                                                  idx=idx, causal=True, tile_rows=4)
    assert np.all(to_np(out)[:, 12:] == 0)
    assert np.all(np.isneginf(to_np(lse)[:, :, 12:]))
    assert np.all(to_np(dq)[:, 12:] == 0)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_empty_rows_with_sink_have_lse_equal_to_sink(framework):
    rng = np.random.default_rng(4)
    sq = sk = 10
    idx = np.full((1, 1, sk, 2), [0, 10], dtype=np.int32)  # non-causal LTS=0: every row masked
    q = to_fw(framework, rng.standard_normal((1, sq, 3, 8)).astype(np.float32))
    kv = to_fw(framework, rng.standard_normal((1, sk, 3, 8)).astype(np.float32))
    sink = np.array([0.5, -1.0, 2.0], np.float32)
    out, lse = reference.flashmask_fwd(q, kv, kv, to_fw(framework, idx), causal=False, softmax_scale=0.3,
                                       learnable_sink=to_fw(framework, sink))
    assert np.all(to_np(out) == 0)
    np.testing.assert_allclose(to_np(lse), np.broadcast_to(sink[None, :, None], (1, 3, sq)), rtol=1e-6)


BUILDER_MASKS = [
    lambda s: mb.causal_document_mask([s // 3, s // 4, s // 5], s),  # padding rows see nothing
    lambda s: mb.document_mask([s // 2, s - s // 2 - 3], s),
    lambda s: mb.shared_question_mask([[5, 4, 6], [4, 3, 3]], s),
    lambda s: mb.prefix_lm_causal_mask(s, 6),
    lambda s: mb.prefix_lm_document_mask([(3, 10), (4, s - 10)], s),
    lambda s: mb.global_sliding_window_mask(s, 3, 4),
    lambda s: mb.causal_blockwise_mask([10, 8, s - 18], s),
    lambda s: mb.qk_sparse_mask(s, [(4, 6), (20, 5)]),
    lambda s: mb.random_eviction_mask(s, 20, num_heads=4, seed=1),
    lambda s: mb.sliding_window_mask(s, 5, causal=False),
]


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("builder", range(len(BUILDER_MASKS)))
def test_builder_masks(framework, builder):
    s = 35
    mask = BUILDER_MASKS[builder](s)
    idx = np.repeat(mask.startend_row_indices, 2, axis=0)
    rng = np.random.default_rng(builder)
    run_case(framework, rng, b=2, sq=s, sk=s, h=4, hk=2, d=16, dv=16, idx=idx, causal=mask.causal,
             tile_rows=7)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_tile_size_does_not_change_the_result(framework):
    rng = np.random.default_rng(11)
    idx = random_indices(rng, 1, 1, 50, 50, False, 4)
    q = to_fw(framework, rng.standard_normal((1, 50, 2, 8)).astype(np.float32))
    results = [to_np(reference.flashmask_fwd(q, q, q, to_fw(framework, idx), causal=False, softmax_scale=0.2,
                                             tile_rows=t)[0]) for t in (1, 7, 50)]
    np.testing.assert_allclose(results[0], results[1], atol=1e-6)
    np.testing.assert_allclose(results[0], results[2], atol=1e-6)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_half_precision_inputs_compute_in_fp32(framework):
    rng = np.random.default_rng(12)
    sq = 24
    idx = random_indices(rng, 1, 1, sq, sq, True, 2)
    q = rng.standard_normal((1, sq, 2, 16)).astype(np.float32)
    allowed = expand_mask_heads(to_dense(idx, True, sq), 2)
    for dtype in ("float16", "bfloat16"):
        if framework == "torch":
            import torch
            t = torch.tensor(q).to(getattr(torch, dtype))
            q_rounded = t.float().numpy()
        else:
            import paddle
            t = paddle.to_tensor(q).astype(dtype)
            q_rounded = t.astype("float32").numpy()
        out, lse = reference.flashmask_fwd(t, t, t, to_fw(framework, idx), causal=True, softmax_scale=0.25)
        assert dtype in str(out.dtype) and "float32" in str(lse.dtype)
        want, _ = dense_attention_fp64(q_rounded, q_rounded, q_rounded, allowed, 0.25)
        tol = 1e-2 if dtype == "float16" else 3e-2
        out32 = to_np(out.float() if framework == "torch" else out.astype("float32"))
        np.testing.assert_allclose(out32, want, atol=tol, rtol=tol)


MEMORY_SCRIPT = textwrap.dedent("""
    import resource, sys
    import numpy as np
    framework, seqlen = sys.argv[1], int(sys.argv[2])
    from paddle_flashmask.mask_builders import causal_document_mask
    if framework == "paddle":
        import paddle
        from paddle_flashmask import flashmask_attention
        make = lambda a: paddle.to_tensor(a, stop_gradient=False)
    else:
        import torch
        from paddle_flashmask.torch import flashmask_attention
        make = lambda a: torch.tensor(a, requires_grad=True)
    rng = np.random.default_rng(0)
    q, k, v = (make(rng.standard_normal((1, seqlen, 1, 16), dtype=np.float32)) for _ in range(3))
    mask = causal_document_mask([seqlen // 2, seqlen // 3], seqlen)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = flashmask_attention(q, k, v, mask.startend_row_indices, causal=mask.causal)
    out.sum().backward()
    assert q.grad is not None and k.grad is not None and v.grad is not None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((peak - before) / 1024.0)  # MiB (ru_maxrss is KiB on Linux)
""")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_16k_forward_backward_memory_is_bounded(framework):
    """S = 16K fwd+bwd: a dense [S, S] fp32 matrix alone is 1 GiB; we must stay far below a few GB."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, framework, "16384"], capture_output=True,
                         text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    growth_mib = float(res.stdout.strip().splitlines()[-1])
    assert growth_mib < 1024, f"RSS grew by {growth_mib:.0f} MiB for S=16K fwd+bwd"


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(form=st.sampled_from(FORMS), sq=st.integers(1, 150), sk=st.integers(1, 150),
       heads=st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]), hm_pick=st.integers(0, 2),
       tile=st.sampled_from([None, 1, 13, 128]), sink=st.booleans(), framework=st.sampled_from(FRAMEWORKS),
       seed=st.integers(0, 2**31 - 1))
def test_random_shapes(form, sq, sk, heads, hm_pick, tile, sink, framework, seed):
    causal, c = form
    h, hk = heads
    hm = [1, hk, h][hm_pick]
    rng = np.random.default_rng(seed)
    idx = random_indices(rng, 1, hm, sq, sk, causal, c)
    run_case(framework, rng, b=1, sq=sq, sk=sk, h=h, hk=hk, d=8, dv=4, idx=idx, causal=causal, sink=sink,
             dlse=sink, tile_rows=tile)
