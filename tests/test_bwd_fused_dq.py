"""dQ converted inside the main backward kernel (BwdConfig.fused_dq), on the CPU: the config rule,
the smem budget of the conversion buffer, the workspace, the visit count's predicate, and the host
API up to the launches (real sm_90a compile; the DSL's argument packing checks the new arguments).
The numbers themselves are checked on the H200 (bench/bwd_check.py, tests/gpu)."""
from __future__ import annotations

import numpy as np
import pytest

from paddle_flashmask import mask_builders as mb
from paddle_flashmask import semantics
from paddle_flashmask.ops.cute import bwd_tiles
from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd



@pytest.fixture(autouse=True)
def _per_pass_claims(monkeypatch):
    """These tests read the per-pass path's argument lists; the class-sorted claim list (its own
    launch and last main-kernel argument) is tested in test_bwd_claim_list.py."""
    monkeypatch.setenv(bwd.CLAIM_LIST_ENV, "0")

def test_config_rule_buffer_rows_and_workspace(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd.FUSED_DQ_ENV, raising=False)
    monkeypatch.delenv(bwd.D256_STAGES_ENV, raising=False)
    monkeypatch.delenv(bwd.PERSISTENT_ENV, raising=False)
    monkeypatch.delenv(bwd.PDS_STAGES_ENV, raising=False)
    assert not interface.backward_config("bfloat16", 128, True, 1).fused_dq
    monkeypatch.setenv(bwd.FUSED_DQ_ENV, "1")
    on = interface.backward_config("bfloat16", 128, True, 1)
    # the second dS^T buffer (pds_stages 2, the default) takes 16 KB of the conversion rows
    assert on.fused_dq and on.persistent and on.pds_stages == 2 and on.conv_rows == 8
    monkeypatch.setenv(bwd.PDS_STAGES_ENV, "1")
    assert interface.backward_config("bfloat16", 128, True, 1).conv_rows == 16
    monkeypatch.delenv(bwd.PDS_STAGES_ENV)
    # one Q/dO stage at D = 256 leaves room for two buffers of 4 fp32 rows of 256
    d256 = interface.backward_config("bfloat16", 256, False, 2, gqa=True)
    assert d256.fused_dq and d256.conv_rows == 4
    # deterministic: its persistent grid orders the adds by semaphores, so no fused dQ
    det = interface.backward_config("bfloat16", 128, True, 1, deterministic=True)
    assert det.persistent and not det.fused_dq
    with pytest.raises(ValueError, match="deterministic=False"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, deterministic=True, persistent_ctas=132,
                      fused_dq=True)
    # two Q/dO stages at D = 256: dQ is added by atomics from registers, nothing to fuse into
    monkeypatch.setenv(bwd.D256_STAGES_ENV, "2")
    assert not interface.backward_config("bfloat16", 256, True, 1).fused_dq
    monkeypatch.setenv(bwd.PERSISTENT_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1).fused_dq
    with pytest.raises(ValueError, match="fused_dq"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, fused_dq=True)  # not persistent
    with pytest.raises(ValueError, match="fused_dq"):
        bwd.BwdConfig("bfloat16", 256, 256, True, 1, persistent_ctas=132, fused_dq=True)
    ws = bwd.workspace_shapes(on, 2, 300, 280, 4, 4)
    assert ws["dq_pending"] == ((2, 4, 5), "int32")
    assert "dq_pending" not in bwd.workspace_shapes(bwd.BwdConfig("bfloat16", 128, 128, True, 1),
                                                    2, 300, 280, 4, 4)
    # the preprocess counts with the main kernel's mask form and key tile; the postprocess only
    # runs for what is left (GQA partials, dsink)
    pre = on.prepost
    assert pre.fused_dq and pre.causal and pre.num_columns == 1 and pre.tile_n == on.tile_n
    assert not pre.has_post
    assert bwd.BwdConfig("bfloat16", 128, 128, True, 1, has_sink=True, persistent_ctas=132,
                         fused_dq=True).prepost.has_post
    assert bwd.BwdConfig("bfloat16", 128, 128, True, 1).prepost.has_post


@pytest.mark.parametrize("causal", [True, False])
def test_visit_counts_sum_to_the_computed_tiles(causal):
    """Counting, per query tile, the key tiles that ``bwd_tiles.query_tile_skipped`` keeps (what
    the preprocess does on the GPU) gives every computed tile of ``semantics`` exactly once, on
    random documents with Sq != Sk."""
    rng = np.random.default_rng()
    sk = int(rng.integers(700, 1400))
    sq = sk - int(rng.integers(0, 200)) if causal else int(rng.integers(500, 1500))
    cuts = np.sort(rng.choice(np.arange(1, sk), size=5, replace=False))
    lengths = np.diff(np.concatenate([[0], cuts, [sk]])).tolist()
    builder = mb.causal_document_mask if causal else mb.document_mask
    idx = np.asarray(builder(lengths, sk).startend_row_indices)
    # a document mask is written for Sq = Sk: clip its row indices to Sq
    idx = np.minimum(idx, sq).astype(np.int32)
    tile_m, tile_n = 64, 128
    summary = semantics.tile_summary(idx, tile_n)
    smin, smax = summary.col_min, summary.col_max
    diag = sk - sq
    num_n = -(-sk // tile_n)
    visits = [sum(not bool(bwd_tiles.query_tile_skipped(
        m, tile_m, n * tile_n,
        *bwd_tiles.tile_bands(idx.shape[-1], causal, smin, smax, 0, 0, n, sq), sq, causal, diag))
        for n in range(num_n)) for m in range(-(-sq // tile_m))]
    counts = semantics.computed_tile_counts(idx, causal, sq, tile_m, tile_n)
    assert sum(visits) == counts["partial"] + counts["full"]
    assert 0 < sum(visits) < len(visits) * num_n


@pytest.mark.parametrize("sink", [False, True])
def test_host_api_passes_counts_and_dq_and_skips_the_postprocess(monkeypatch, sink):
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness

    monkeypatch.setenv(bwd.FUSED_DQ_ENV, "1")
    monkeypatch.delenv(bwd.PERSISTENT_ENV, raising=False)
    api = HostApiHarness(monkeypatch, num_sms=132)
    t = api.tensor
    h = 4
    extra = {}
    if sink:
        extra = dict(learnable_sink=t(h, dtype=torch.float32), dsink=t(h, dtype=torch.float32))
    api.backward(h=h, **extra)
    expected = ["flash_bwd_pre", "flash_bwd_sm90"] + (["flash_bwd_post"] if sink else [])
    assert api.launched[-len(expected):] == expected
    assert api.launched[-len(expected) - 1] != "flash_bwd_post"
    assert len(api.last_args("flash_bwd_sm90")) == 24  # the 21 + tile counter, counts, dq
    pre_args = api.last_args("flash_bwd_pre")
    assert pre_args[9] is not None and pre_args[10] is not None  # counts, dq
    assert pre_args[11] is not None and pre_args[12] is not None  # the tile summary
    assert (1, h, 5) in api.scratch  # dq_pending


def test_gpu_check_runs_the_env_chosen_variant(monkeypatch):
    """tests/gpu/bwd_check.py builds each case's variant from ``interface.backward_config``, so
    every env switch reaches it (session 6 found that the deterministic-mode switches of session
    5's A/B runs never did), and a CLI choice overrides only what it names."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent / "gpu" / "bwd_check.py"
    spec = importlib.util.spec_from_file_location("bwd_check_for_test", path)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    for name in (bwd.DET_CHAINS_ENV, bwd.LAZY_RELEASE_ENV, bwd.DET_SYNC_ENV, bwd.FUSED_DQ_ENV,
                 bwd.VECTOR_DKV_ENV):
        monkeypatch.delenv(name, raising=False)
    args = ("bfloat16", 128, True, 1, False, False)
    base = check.backward_variant(*args, True, 132)
    # causal masks: two dQ chains by work class (session 17)
    assert base.deterministic and base.class_chains and base.dq_chains == 2
    assert not base.lazy_release
    assert base.det_sync == "relaxed" and base.vector_dkv  # the measured default
    monkeypatch.setenv(bwd.DET_CHAINS_ENV, "2")
    monkeypatch.setenv(bwd.LAZY_RELEASE_ENV, "1")
    monkeypatch.setenv(bwd.DET_SYNC_ENV, "fence")
    det = check.backward_variant(*args, True, 132)
    assert det.dq_chains == 2 and det.lazy_release and det.det_sync == "fence"
    assert not det.class_chains  # a forced chain count: parity chains
    assert check.backward_variant(*args, False, 132).det_sync == "acquire"  # not deterministic
    monkeypatch.setenv(bwd.DET_SYNC_ENV, "loose")
    with pytest.raises(ValueError, match=bwd.DET_SYNC_ENV):
        check.backward_variant(*args, True, 132)
    monkeypatch.setenv(bwd.DET_SYNC_ENV, "fence")
    monkeypatch.setenv(bwd.VECTOR_DKV_ENV, "0")
    monkeypatch.setenv(bwd.FUSED_DQ_ENV, "1")
    fused = check.backward_variant(*args, False, 132)
    assert fused.persistent and fused.fused_dq and not fused.vector_dkv
    # the CLI's --no-fused-dq / --no-persistent win over the env
    assert not check.backward_variant(*args, False, 132, fused_dq=False).fused_dq
    plain = check.backward_variant(*args, False, 132, persistent=False, fused_dq=False)
    assert not plain.persistent and not plain.fused_dq
    # deterministic: --persistent keeps its persistent grid, and no fused dQ even when asked
    det_grid = check.backward_variant(*args, True, 132, persistent=True, fused_dq=True)
    assert det_grid.persistent and det_grid.claim_passes == 1 and not det_grid.fused_dq
    with pytest.raises(ValueError, match="det_sync"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, det_sync="relaxed")
    with pytest.raises(ValueError, match="det_sync"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, deterministic=True, det_sync="strict")


def test_late_loads_switch(monkeypatch):
    """env PADDLE_FLASHMASK_BWD_LATE_LOADS=1 asks for the multi-column backward's late loads
    (off until its H200 check); the compile check builds it (spill-free, see compile_check)."""
    from paddle_flashmask.ops.cute import compile_check, interface

    monkeypatch.delenv(bwd.LATE_LOADS_ENV, raising=False)
    assert not interface.backward_config("bfloat16", 128, False, 4).late_loads
    monkeypatch.setenv(bwd.LATE_LOADS_ENV, "1")
    assert interface.backward_config("bfloat16", 128, False, 4).late_loads
    monkeypatch.delenv(bwd.LATE_LOADS_ENV)  # the compile check's list at the defaults
    labels = [v.label for v in compile_check.variants()]
    assert "bwd bfloat16 d128 causal-C2 late-loads" in labels
    assert "bwd bfloat16 d128 bidir-C4 late-loads" in labels
