"""CPU tests of the forward's per-query-tile key-tile ranges (``FwdConfig.tile_ranges``, off by
default until it has run on the GPU).

* the numpy reference (``tile_range_kernel.reference_ranges``) never leaves a visible pair outside
  its query tile's range (random masks of every form, Sq != Sk), and is exact where the tile
  predicates are (tile-aligned documents);
* the config switch and the forward wrapper's argument check;
* the host API with ranges on, up to the launches: the summary, the range kernel and the forward
  (real sm_90a compiles) accept the arguments it builds.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cutlass")
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from oracle import FORMS, random_indices  # noqa: E402
from paddle_flashmask import mask_builders as mb  # noqa: E402
from paddle_flashmask import semantics  # noqa: E402
from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd  # noqa: E402
from paddle_flashmask.ops.cute import tile_range_kernel as tr  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def _visible_tile_span(allowed: np.ndarray, sq: int, tm: int, tn: int) -> np.ndarray:
    """[B, Hm, M, 2]: first and one past the last key tile holding a visible pair (0, 0 if none)."""
    b, hm = allowed.shape[:2]
    nm = -(-sq // tm)
    out = np.zeros((b, hm, nm, 2), dtype=np.int64)
    for m in range(nm):
        cols = allowed[:, :, m * tm:(m + 1) * tm, :].any(axis=2)  # [B, Hm, Sk]
        for bi in range(b):
            for hi in range(hm):
                seen = np.flatnonzero(cols[bi, hi])
                if seen.size:
                    out[bi, hi, m] = (seen[0] // tn, seen[-1] // tn + 1)
    return out


@pytest.mark.parametrize("causal,c", FORMS)
@pytest.mark.parametrize("sq,sk", [(300, 300), (200, 520), (515, 190)])
def test_reference_ranges_cover_every_visible_pair(causal, c, sq, sk):
    rng = np.random.default_rng(sq * 7 + sk + 3 * c + causal)
    tm, tn = 64, 48
    idx = random_indices(rng, 2, 3, sq, sk, causal, c, empty_from_row=sq - 5)
    allowed = semantics.to_dense(idx, causal, sq)  # [B, Hm, Sq, Sk]
    got = tr.reference_ranges(idx, causal, sq, tm, tn)
    want = _visible_tile_span(allowed, sq, tm, tn)
    assert got.shape == want.shape
    empty = want[..., 1] == 0
    assert (got[..., 0][~empty] <= want[..., 0][~empty]).all()  # the range covers every pair
    assert (got[..., 1][~empty] >= want[..., 1][~empty]).all()
    assert (got[..., 0] <= got[..., 1]).all()


def test_reference_ranges_exact_for_tile_aligned_documents():
    tm = tn = 64
    idx = mb.causal_document_mask([128, 256, 64, 64]).startend_row_indices  # tile-aligned
    allowed = semantics.to_dense(idx, True, 512)
    np.testing.assert_array_equal(tr.reference_ranges(idx, True, 512, tm, tn),
                                  _visible_tile_span(allowed, 512, tm, tn))
    # query tile 3 (rows 192..255) lies in the second document (keys 128..383): tiles 2..3
    assert tuple(tr.reference_ranges(idx, True, 512, tm, tn)[0, 0, 3]) == (2, 4)


def test_tile_ranges_config_switch(monkeypatch):
    monkeypatch.delenv(fwd.TILE_RANGES_ENV, raising=False)
    assert fwd.default_config("bf16", 128, None, True, 1).tile_ranges  # default ON for masks
    monkeypatch.setenv(fwd.TILE_RANGES_ENV, "0")
    assert not fwd.default_config("bf16", 128, None, True, 1).tile_ranges
    monkeypatch.setenv(fwd.TILE_RANGES_ENV, "1")
    assert fwd.default_config("bf16", 128, None, True, 1).tile_ranges
    assert not fwd.default_config("bf16", 128, None, True, None).tile_ranges  # plain: no summary
    with pytest.raises(ValueError, match="tile_ranges"):
        fwd.FwdConfig("bf16", 128, 128, True, None, tile_ranges=True)
    with pytest.raises(ValueError, match="mask_columns"):
        tr.TileRangeConfig(128, 128, True, None)


def test_forward_wrapper_requires_ranges_exactly_when_configured():
    class Shape:
        def __init__(self, *shape):
            self.shape = shape

    q, k, v = Shape(1, 300, 4, 128), Shape(1, 300, 2, 128), Shape(1, 300, 2, 128)
    idx = Shape(1, 1, 300, 1)
    on = fwd.CompiledForward(fwd.default_config("bf16", 128, None, True, 1, tile_ranges=True),
                             compiled=None)
    with pytest.raises(ValueError, match="tile_ranges: expected an int32 buffer"):
        on(q, k, v, None, None, idx, None, None, None, 0.1, 0)
    off = fwd.CompiledForward(fwd.default_config("bf16", 128, None, True, 1, tile_ranges=False),
                              compiled=None)
    with pytest.raises(ValueError, match="tile_ranges: expected None"):
        off(q, k, v, None, None, idx, None, None, None, 0.1, 0, tile_ranges=Shape(1, 1, 3, 2))


def test_host_api_with_tile_ranges_packs_the_compiled_kernels_arguments(monkeypatch):
    """flashmask_fwd with tile ranges on, up to the launches (real sm_90a compiles of the summary,
    range and forward kernels; the DSL's own argument packing checks count and types)."""
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import interface

    monkeypatch.setenv(fwd.TILE_RANGES_ENV, "1")
    api = HostApiHarness(monkeypatch)
    launched, scratch, t = api.launched, api.scratch, api.tensor
    b, s, h, hk, d = 2, 300, 4, 2, 128
    q, k, v, out, _, lse = api.attention_tensors(b, s, h, hk, d)
    interface.flashmask_fwd(q, k, v, out, lse, t(b, hk, s, 1, dtype=torch.int32), causal=True,
                            softmax_scale=0.1, stream=0)
    # 24 query tiles for 132 CTAs: the work-order rule (flash_fwd_sm90.default_work_order) adds
    # the ordering kernels, which read the same summary
    assert launched == ["tile_summary", "fwd_tile_ranges", "fwd_work_order", "flash_fwd_sm90"]
    assert scratch[2] == (b, hk, 3, 2)  # [B, Hm, ceil(300 / 128), 2]


def test_gpu_checker_accepts_the_reference_and_rejects_wrong_ranges():
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "tests" / "gpu"))
    import fwd_check

    rng = np.random.default_rng(11)
    idx, causal = fwd_check.make_mask("causal_doc", rng, 2, 2, 1000, 1000)
    cfg = fwd.default_config("bf16", 128, 128, causal, 1, tile_ranges=True)
    ref = tr.reference_ranges(idx, causal, 1000, cfg.tile_m, cfg.tile_n)
    assert fwd_check.check_tile_ranges(torch.from_numpy(ref), idx, causal, cfg, 1000)["tile_ranges_ok"]
    wrong = ref.copy()
    wrong[1, 0, 3, 1] += 1
    got = fwd_check.check_tile_ranges(torch.from_numpy(wrong), idx, causal, cfg, 1000)
    assert not got["tile_ranges_ok"] and got["tile_ranges_mismatches"] == 1


def test_host_config_follows_every_env_switch(monkeypatch):
    """interface.forward_config is cached; flipping any switch default_config reads must show."""
    from paddle_flashmask.ops.cute import interface

    for name in (fwd.TILE_RANGES_ENV, fwd.WORK_ORDER_ENV, fwd.FAST_ENV, fwd.DYNAMIC_SCHEDULE_ENV,
                 fwd.PARTIAL_OVERLAP_ENV, fwd.D128_TILE_ENV):
        monkeypatch.delenv(name, raising=False)
    base = interface.forward_config("bfloat16", 128, True, 1)
    assert base.tile_ranges and not base.work_order and base.intra_wg_overlap
    assert base.dynamic_schedule and base.partial_overlap
    for name, field, value in ((fwd.TILE_RANGES_ENV, "tile_ranges", False),
                               (fwd.DYNAMIC_SCHEDULE_ENV, "dynamic_schedule", False),
                               (fwd.PARTIAL_OVERLAP_ENV, "partial_overlap", False),
                               (fwd.WORK_ORDER_ENV, "work_order", True),
                               (fwd.FAST_ENV, "intra_wg_overlap", False)):
        monkeypatch.setenv(name, "1" if value else "0")
        assert getattr(interface.forward_config("bfloat16", 128, True, 1), field) == value, name
        monkeypatch.delenv(name)
    assert (base.tile_n, base.q_stages) == (128, 1)
    monkeypatch.setenv(fwd.D128_TILE_ENV, "112")  # the session-3 tile, for A/B runs
    assert (lambda c: (c.tile_n, c.q_stages))(interface.forward_config("bfloat16", 128, True, 1)) == (112, 2)
    monkeypatch.setenv(fwd.D128_TILE_ENV, "96")  # not a tile shape: an error naming the switch
    with pytest.raises(ValueError, match=fwd.D128_TILE_ENV):
        interface.forward_config("bfloat16", 128, True, 1)
    monkeypatch.delenv(fwd.D128_TILE_ENV)
    assert interface.forward_config("bfloat16", 128, True, 1) == base


def test_reserved_sms_shrink_the_persistent_grid(monkeypatch):
    """flashmask_fwd(reserved_sms=N) launches min(work tiles, SMs - N) persistent CTAs (context
    parallelism leaves SMs to NCCL); a bad value is an error naming the argument."""
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.TILE_RANGES_ENV, raising=False)
    api = HostApiHarness(monkeypatch)
    t = api.tensor
    b, s, h, d = 4, 512, 8, 128  # 4 * 8 * 4 = 128 query tiles of 128 rows
    q, k, v, out = t(b, s, h, d), t(b, s, h, d), t(b, s, h, d), t(b, s, h, d)
    lse = t(b, h, s, dtype=torch.float32)
    for reserved in (0, 16, 100):
        interface.flashmask_fwd(q, k, v, out, lse, None, causal=True, softmax_scale=0.1, stream=0,
                                reserved_sms=reserved)
    # (..., Int32(grid), stream) of each forward launch
    assert [int(args[-2]) for name, args in api.launch_args if name == "flash_fwd_sm90"] == [128, 116, 32]
    with pytest.raises(ValueError, match="reserved_sms"):
        interface.flashmask_fwd(q, k, v, out, lse, None, causal=True, softmax_scale=0.1, stream=0,
                                reserved_sms=132)


def test_cp_comm_sms_switch(monkeypatch):
    from paddle_flashmask.distributed import engine

    monkeypatch.delenv(engine.COMM_SMS_ENV, raising=False)
    assert engine.comm_sms(None) == 0 and engine.comm_sms(12) == 12
    monkeypatch.setenv(engine.COMM_SMS_ENV, "16")
    assert engine.comm_sms(None) == 16 and engine.comm_sms(0) == 0
    monkeypatch.setenv(engine.COMM_SMS_ENV, "many")
    with pytest.raises(ValueError, match=engine.COMM_SMS_ENV):
        engine.comm_sms(None)
    with pytest.raises(ValueError, match="comm_sms"):
        engine.comm_sms(-1)


def test_backward_row_ranges_switch(monkeypatch):
    """BwdConfig.row_ranges (on for masks, off for plain causal / full) follows env
    PADDLE_FLASHMASK_BWD_ROW_RANGES through the host API's cached config."""
    from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd.ROW_RANGES_ENV, raising=False)
    base = interface.backward_config("bfloat16", 128, True, 1)
    assert base.row_ranges
    assert not interface.backward_config("bfloat16", 128, True, None).row_ranges
    monkeypatch.setenv(bwd.ROW_RANGES_ENV, "0")
    off = interface.backward_config("bfloat16", 128, True, 1)
    assert not off.row_ranges and off != base and off.prepost == base.prepost
    monkeypatch.delenv(bwd.ROW_RANGES_ENV)
    assert interface.backward_config("bfloat16", 128, True, 1) == base


def test_reserved_sms_shrink_the_persistent_backward(monkeypatch):
    """flashmask_bwd(reserved_sms=N) compiles and launches the persistent backward with SMs - N
    CTAs; a bad value is an error naming the argument."""
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd.PERSISTENT_ENV, raising=False)
    api = HostApiHarness(monkeypatch)
    seen = []
    real = interface.compiled_backward
    monkeypatch.setattr(interface, "compiled_backward",
                        lambda config: seen.append(config.persistent_ctas) or real(config))
    t = api.tensor
    b, s, h, d = 1, 256, 2, 128
    q, k, v, out, dout, lse = api.attention_tensors(b, s, h, h, d)
    grads = [t(b, s, h, d) for _ in range(3)]
    for reserved in (0, 16):
        interface.flashmask_bwd(q, k, v, out, dout, lse, *grads, None, causal=True,
                                softmax_scale=0.1, stream=0, reserved_sms=reserved)
    assert seen == [132, 116]
    with pytest.raises(ValueError, match="reserved_sms"):
        interface.flashmask_bwd(q, k, v, out, dout, lse, *grads, None, causal=True,
                                softmax_scale=0.1, stream=0, reserved_sms=-1)
