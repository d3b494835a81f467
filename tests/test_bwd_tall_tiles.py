"""Taller backward query tiles, on the CPU: 128 rows at D = 64 (FA4's D = 64 tile, env
PADDLE_FLASHMASK_BWD_TILE_M=128; dQ = dS K as at 64 rows, the warpgroups splitting the head dim;
at the end of this file) and 80 rows at D = 128 (env PADDLE_FLASHMASK_BWD_TILE_M=80): the transposed dQ GEMM (dQ^T = K^T dS^T) gives each consumer warpgroup 64 of the head dim's
rows and every query column, so the two warpgroups stage disjoint halves of the tile; the
transposed stores into the staging tile are bank-conflict free and land on the row-major rows
the dQ writer moves; the per-row buffers are padded to whole 80-row tiles and 64-row pre/post
blocks; the host rule and its errors. Kernel compiles (wgmma, TMA, no spills) are in
tests/test_cute_compile.py; the numerics need the H200 (tests/gpu/bwd_check.py with the env)."""
from __future__ import annotations

import dataclasses
import os
from unittest import mock

import pytest

import cutlass
import cutlass.cute as cute

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
from paddle_flashmask.ops.cute import bwd_rules
from paddle_flashmask.ops.cute import interface
from paddle_flashmask.ops.cute.flash_bwd_prepost import padded_rows, row_padding

TILE_M, D = 80, 128
_PLACES: dict = {}


def _tall_config(num_columns=None, gqa=False, first_store=False):
    """The host's 80-row config (FA4's form), with or without its first store (default since
    session 35; without it the preprocess zeroes the fp32 accumulator)."""
    env = {bwd_rules.TALL_FIRST_STORE_ENV: "1" if first_store else "0"}
    with mock.patch.dict(os.environ, env):
        cfg = interface.backward_config("bfloat16", D, False, num_columns, gqa=gqa)
    assert cfg.tile_m == TILE_M and cfg.dq_first_store == first_store
    return cfg


def _one_stage_config(num_columns=None):
    """``with_tile_m``'s one-dS^T-stage form of 80 rows, built on the 64-row config."""
    with mock.patch.dict(os.environ, {bwd.TILE_M_ENV: "64"}):
        base = interface.backward_config("bfloat16", D, False, num_columns)
    assert base.tile_m == 64
    return bwd.with_tile_m(base, TILE_M)


def _probe_dq_places(kernel) -> dict:
    """thread -> [(element index, (d, q) of the dQ^T accumulator element, staging offset)]."""
    _PLACES.clear()

    @cute.jit
    def probe():
        layout = bwd.dq_stage_layout(TILE_M, D, kernel.cfg.dq_swizzle,
                                     pad=kernel.cfg.dq_row_elems - D)
        _, _, _, tiled_dq = kernel._mmas()
        coords = cute.make_identity_tensor((D, TILE_M))
        for t in cutlass.range_constexpr(256):
            part = tiled_dq.get_slice(t).partition_C(coords)
            _PLACES[t] = [(i, (int(part[i][0]), int(part[i][1])),
                           int(layout((part[i][1], part[i][0]))))
                          for i in range(cute.size(part))]

    cute.compile(probe)
    return dict(_PLACES)


@pytest.fixture(scope="module", params=["padded", "swizzled"])
def dq_places(request):
    cfg = _tall_config()
    if request.param == "swizzled":
        cfg = bwd.with_two_pds_stages(cfg)
    assert cfg.tile_m == TILE_M and cfg.dq_transposed
    return cfg.dq_swizzle, _probe_dq_places(bwd.FlashMaskBwdSm90(cfg))


def test_transposed_dq_covers_the_tile_once_split_by_head_dim(dq_places):
    _, dq_places = dq_places
    seen = [crd for t in range(256) for _, crd, _ in dq_places[t]]
    assert sorted(seen) == [(d, q) for d in range(D) for q in range(TILE_M)]  # each once
    for wg in range(2):
        rows = {crd[0] for t in range(128 * wg, 128 * (wg + 1)) for _, crd, _ in dq_places[t]}
        assert rows == set(range(64 * wg, 64 * (wg + 1)))  # warpgroup w: head-dim rows of block w


def test_transposed_staging_lands_on_row_major_rows_without_bank_conflicts(dq_places):
    swizzled, dq_places = dq_places
    for t in range(256):
        for _, (d, q), offset in dq_places[t]:
            if swizzled:  # query row q, its 16-byte chunk d // 4 XOR-swizzled by q % 8: what the
                # writer's one bulk op copies as is and the postprocess un-swizzles per row
                assert offset == q * D + 4 * ((d // 4) ^ (q % 8)) + d % 4
            else:  # query row q, column d, rows D + 4 floats apart: what the row ops read
                assert offset == q * (D + bwd._DQ_PAD_TRANSPOSED) + d
    # one store instruction = element i of the 32 lanes of a warp: 32 different banks
    for warp in range(8):
        lanes = range(32 * warp, 32 * warp + 32)
        for i in range(len(dq_places[32 * warp])):
            banks = {dq_places[t][i][2] % 32 for t in lanes}
            assert len(banks) == 32, (warp, i, sorted(banks))


@pytest.mark.parametrize("sq, want", [(1, 320), (320, 320), (321, 640), (8192, 8320)])
def test_rows_padded_to_tiles_and_blocks(sq, want):
    assert row_padding(TILE_M) == 320 and row_padding(64) == 64
    assert padded_rows(sq, TILE_M) == want
    assert padded_rows(sq, 64) == -(-sq // 64) * 64
    cfg = _tall_config()
    shapes = bwd.workspace_shapes(cfg, 2, sq, sq, 4, 4)
    assert shapes["lse2"][0] == (2, 4, want) and shapes["delta"][0] == (2, 4, want)
    assert shapes["dq_accum"][0] == (2, 4, want, D)
    assert cfg.prepost.row_pad == 320
    assert "dq_flags" not in shapes and "semaphores" not in shapes
    # the first store (default since session 35): one flag per main-kernel query tile
    flagged = bwd.workspace_shapes(_tall_config(first_store=True), 2, sq, sq, 4, 4)
    assert flagged["dq_accum"][0] == (2, 4, want, D) and "semaphores" not in flagged
    assert flagged["dq_flags"][0] == (2, 4, -(-sq // TILE_M))  # the tiles the main kernel has


def test_host_rule(monkeypatch):
    monkeypatch.delenv(bwd.TILE_M_ENV, raising=False)
    # by default: full attention at D = 128 (session 33) and documents / prefix-LM (two
    # columns, session 35), MHA and GQA, deterministic too (session 37); not causal masks,
    # four columns or a sink
    for det in (False, True):
        assert bwd.default_tile_m(128, False, None, det, False) == 80
        assert bwd.default_tile_m(128, False, 2, det, False) == 80
    for args in ((128, False, 4, False, False), (128, True, None, False, False),
                 (128, True, 2, False, False), (128, True, 1, True, False),
                 (128, False, 4, True, False), (128, False, None, False, True),
                 (128, False, None, True, True),
                 (256, False, None, False, False), (96, False, None, False, False)):
        assert bwd.default_tile_m(*args) == 64, args
    for gqa in (False, True):  # documents: FA4's form, stats staged and read where used,
        cfg = interface.backward_config("bfloat16", 128, False, 2, gqa=gqa)  # first store
        assert cfg.tile_m == 80 and cfg.pds_stages == 2 and cfg.stage_stats
        assert cfg.dq_by_thread and cfg.dq_first_store and not cfg.late_loads
        full = interface.backward_config("bfloat16", 128, False, None, gqa=gqa)
        assert full.tile_m == 80 and full.stage_stats and full.dq_first_store
    monkeypatch.setenv(bwd.TILE_M_ENV, "80")
    assert bwd.default_tile_m(128, False, None, False, False) == 80  # full attention
    assert bwd.default_tile_m(128, False, 2, False, False) == 80  # documents
    for args in ((128, True, None, False, False), (128, False, 4, False, False),
                 (64, False, None, False, False), (128, False, None, False, True)):
        assert bwd.default_tile_m(*args) == 64, args
    assert bwd.default_tile_m(128, False, None, True, False) == 80  # deterministic
    monkeypatch.setenv(bwd_rules.TALL_STAGED_COLUMNS_ENV, "0")
    cfg = interface.backward_config("bfloat16", 128, False, 2, gqa=True)
    # documents on 80 rows without the staged stats (session 34's default): FA4's form with
    # the stats from global, delta after the mask
    assert cfg.tile_m == 80 and cfg.pds_stages == 2 and cfg.dq_swizzle and not cfg.stage_stats
    assert cfg.dq_by_thread and cfg.dq_per_wg and cfg.late_loads
    monkeypatch.delenv(bwd_rules.TALL_STAGED_COLUMNS_ENV)
    monkeypatch.setenv(bwd_rules.TALL_STAGED_COLUMNS_ENV, "2")
    with pytest.raises(ValueError, match=bwd_rules.TALL_STAGED_COLUMNS_ENV):
        interface.backward_config("bfloat16", 128, False, 2, gqa=True)
    monkeypatch.delenv(bwd_rules.TALL_STAGED_COLUMNS_ENV)
    monkeypatch.setenv(bwd.TALL_TWO_PDS_ENV, "0")  # with_tile_m's one-stage form on request
    cfg = interface.backward_config("bfloat16", 128, False, 2, gqa=True)
    # documents: one dS^T stage, padded dQ rows, LSE / delta staged
    assert cfg.tile_m == 80 and cfg.pds_stages == 1 and not cfg.p_in_smem and cfg.stage_stats
    assert not (cfg.dq_first_store or cfg.dq_per_wg or cfg.dq_swizzle or cfg.dq_by_thread)
    assert bwd.with_two_pds_stages(cfg).dq_in_smem  # FA3/FA4's form fits, without the staged stats
    monkeypatch.delenv(bwd.TALL_TWO_PDS_ENV)
    assert interface.backward_config("bfloat16", 128, True, 1).tile_m == 64
    det80 = interface.backward_config("bfloat16", 128, False, 2, deterministic=True)
    # ... its chain's first adder stores only on request (session 38: built, not GPU-checked):
    # each chain's semaphore per tile then tells the postprocess which chains hold rows
    assert det80.tile_m == 80 and det80.dq_by_thread and not det80.dq_first_store
    assert det80.prepost.grid_rows == 80 and det80.prepost.row_pad == 320
    monkeypatch.setenv(bwd_rules.TALL_FIRST_STORE_ENV, "1")
    det80_fs = interface.backward_config("bfloat16", 128, False, 2, deterministic=True)
    assert det80_fs.dq_first_store and det80_fs.prepost.first_store
    assert det80_fs.prepost.flag_rows == 80 and det80_fs.prepost.deterministic
    monkeypatch.delenv(bwd_rules.TALL_FIRST_STORE_ENV)
    # one per 80-row tile of the 1,280 padded rows and chain, as the kernels index them
    # (ceil(1000 / 80) = 13 allocated the last heads' semaphores past the buffer's end)
    assert bwd.workspace_shapes(det80, 2, 1000, 1000, 4, 4)["semaphores"][0] == (
        2, 4 * det80.dq_chains, 16)
    from paddle_flashmask.ops.cute.flash_bwd_prepost import flag_tiles
    assert flag_tiles(det80_fs.prepost, 1000) == 16  # the postprocess's view of them
    # (the default mode's first-store flags: one per tile of the rows themselves)
    assert flag_tiles(interface.backward_config("bfloat16", 128, False, 2).prepost, 1000) == 13

    monkeypatch.setenv(bwd.TILE_M_ENV, "96")
    with pytest.raises(ValueError, match=bwd.TILE_M_ENV):
        bwd.default_tile_m(128, False, None, False, False)


def test_with_tile_m_leaves_what_it_cannot_serve():
    for cfg in (interface.backward_config("bfloat16", 64, False, None),
                interface.backward_config("bfloat16", 128, False, None, has_sink=True)):
        assert bwd.with_tile_m(cfg, TILE_M) is cfg
    # the deterministic mode: 80 rows serve it since session 35, by default since 37; its
    # causal masks keep 64 by default (with_tile_m serves them on request)
    det = interface.backward_config("bfloat16", 128, False, 2, deterministic=True)
    assert det.tile_m == TILE_M and det.dq_early and not det.dq_first_store
    causal_det = interface.backward_config("bfloat16", 128, True, 1, deterministic=True)
    assert causal_det.tile_m == 64 and bwd.with_tile_m(causal_det, TILE_M).tile_m == TILE_M


@pytest.mark.parametrize("field, value", [("dq_first_store", True), ("pds_stages", 2),
                                          ("dq_per_wg", True), ("has_sink", True),
                                          ("tile_n", 64)])
def test_invalid_tall_variants_name_tile_m(field, value):
    cfg = _one_stage_config(num_columns=2)
    with pytest.raises(ValueError, match="tile_m=80"):  # (pds_stages: smem no longer fits)
        dataclasses.replace(cfg, **{field: value})
    with pytest.raises(ValueError, match="tile_m: expected one of"):
        dataclasses.replace(cfg, tile_m=96)


@pytest.mark.parametrize("grid_rows", [64, 80, 128])
def test_each_tile_semaphore_is_zeroed_by_one_block(grid_rows):
    from paddle_flashmask.ops.cute.flash_bwd_prepost import (ROWS_PER_CTA, padded_rows,
                                                             tile_starting_in_block)

    for seqlen in (1, 63, 64, 65, 300, 1000, 8192):
        rows = padded_rows(seqlen, grid_rows)  # the preprocess's blocks cover these rows
        zeroed = [tile for blk in range(rows // ROWS_PER_CTA)
                  for tile, here in [tile_starting_in_block(blk, grid_rows)] if here]
        assert zeroed == list(range(rows // grid_rows)), (grid_rows, seqlen)


def test_prepost_rejects_64_row_grids_with_other_padding():
    from paddle_flashmask.ops.cute.flash_bwd_prepost import PrePostConfig

    base = _tall_config().prepost
    assert base.row_pad == 320
    assert base.dq_by_thread_rows == 80
    plain = dataclasses.replace(base, dq_by_thread_rows=0)
    for cfg, field in ((plain, "first_store"), (base, "has_sink"), (plain, "has_sink")):
        with pytest.raises(ValueError, match="row_pad=320"):
            dataclasses.replace(cfg, **{field: True})
    # dq_by_thread's first-store flags are per main-kernel query tile (flag_tiles)
    assert dataclasses.replace(base, first_store=True).first_store
    # the deterministic mode's semaphores are counted in grid_rows (the main kernel's tiles)
    assert dataclasses.replace(base, deterministic=True, grid_rows=80).grid_rows == 80
    with pytest.raises(ValueError, match="row_pad: expected a multiple of 64"):
        PrePostConfig("bfloat16", 128, 128, False, False, False, row_pad=80)
    with pytest.raises(ValueError, match="and of grid_rows=128"):
        dataclasses.replace(base, deterministic=True, grid_rows=128)



# ---- 128 rows at D = 64 ----------------------------------------------------------------------------

_PLACES_128: dict = {}


def _config_128(causal=False, num_columns=None, gqa=False):
    """``with_tile_m``'s 128-row form (one dS^T stage, padded dQ rows), built from the 64-row
    config (the default takes FA4's form where it has 128 rows: ``default_tall_two_pds``)."""
    with mock.patch.dict(os.environ, {bwd.TILE_M_ENV: "64"}):
        base = interface.backward_config("bfloat16", 64, causal, num_columns, gqa=gqa)
    return bwd.with_tile_m(base, 128)


def test_128_row_dq_covers_the_tile_once_on_row_major_rows():
    """dQ = dS K over 128 x 64: each element once, warpgroup w the query rows of half w (every
    head-dim column: 64 x 64 wgmmas, FA4's split), staged at row q, column d of the padded
    row-major tile the writer reads."""
    cfg = _config_128()
    assert cfg.tile_m == 128 and not cfg.dq_transposed and not cfg.dq_swizzle
    kernel = bwd.FlashMaskBwdSm90(cfg)
    _PLACES_128.clear()

    @cute.jit
    def probe():
        layout = bwd.dq_stage_layout(128, 64, False, pad=cfg.dq_row_elems - 64)
        _, _, _, tiled_dq = kernel._mmas()
        coords = cute.make_identity_tensor((128, 64))
        for t in cutlass.range_constexpr(256):
            part = tiled_dq.get_slice(t).partition_C(coords)
            _PLACES_128[t] = [((int(part[i][0]), int(part[i][1])),
                               int(layout((part[i][0], part[i][1]))))
                              for i in range(cute.size(part))]

    cute.compile(probe)
    seen = [crd for t in range(256) for crd, _ in _PLACES_128[t]]
    assert sorted(seen) == [(q, d) for q in range(128) for d in range(64)]
    for wg in range(2):
        crds = [crd for t in range(128 * wg, 128 * (wg + 1)) for crd, _ in _PLACES_128[t]]
        assert {q for q, _ in crds} == set(range(64 * wg, 64 * (wg + 1)))
        assert {d for _, d in crds} == set(range(64))
    for t in range(256):
        for (q, d), offset in _PLACES_128[t]:
            assert offset == q * cfg.dq_row_elems + d


def test_128_row_host_rule_and_form(monkeypatch):
    monkeypatch.delenv(bwd.TILE_M_ENV, raising=False)
    monkeypatch.delenv(bwd.TALL_TWO_PDS_ENV, raising=False)
    monkeypatch.delenv(bwd_rules.SHFL_STATS_ENV, raising=False)
    # by default (session 31): D = 64, every mask, MHA and GQA; deterministic too since
    # session 33; never with a sink
    for causal, c in ((False, None), (True, None), (True, 1), (True, 2), (False, 2), (False, 4)):
        assert bwd.default_tile_m(64, causal, c, False, False) == 128, (causal, c)
        assert bwd.default_tile_m(64, causal, c, True, False) == 128, (causal, c)
    assert bwd.default_tile_m(64, True, None, False, True) == 64  # sink
    assert bwd.default_tile_m(128, False, None, False, False) == 80  # (D = 128: full attention)
    for causal, c, gqa in ((False, None, False), (True, None, True), (True, 1, False),
                           (False, 2, True)):
        # ... in FA4's form: two dS^T stages, the swizzled dQ tile, stats shuffled from lanes
        cfg = interface.backward_config("bfloat16", 64, causal, c, gqa=gqa)
        assert cfg.tile_m == 128 and cfg.pds_stages == 2 and cfg.dq_swizzle, (causal, c)
        assert cfg.shfl_stats and not cfg.stage_stats and not cfg.prefetch_stats, (causal, c)
    # ... the deterministic mode's 128-row tiles too (session 33)
    cfg = interface.backward_config("bfloat16", 64, True, 1, deterministic=True)
    assert cfg.tile_m == 128 and cfg.shfl_stats and not cfg.prefetch_stats
    assert cfg.prepost.grid_rows == 128
    # other forms keep their stats path (D = 128's staged stats; 64 rows with a sink)
    cfg = interface.backward_config("bfloat16", 64, True, 1, has_sink=True)
    assert cfg.tile_m == 64 and not cfg.shfl_stats
    cfg = interface.backward_config("bfloat16", 128, False, None)
    assert not cfg.shfl_stats and cfg.stage_stats
    monkeypatch.setenv(bwd_rules.SHFL_STATS_ENV, "0")
    assert not interface.backward_config("bfloat16", 64, False, None).shfl_stats
    monkeypatch.setenv(bwd_rules.SHFL_STATS_ENV, "1")  # forced: replaces the staged stats too
    cfg = interface.backward_config("bfloat16", 128, True, None)
    assert cfg.shfl_stats and not cfg.stage_stats and not cfg.prefetch_stats
    monkeypatch.setenv(bwd_rules.SHFL_STATS_ENV, "yes")
    with pytest.raises(ValueError, match=bwd_rules.SHFL_STATS_ENV):
        interface.backward_config("bfloat16", 64, False, None)
    monkeypatch.delenv(bwd_rules.SHFL_STATS_ENV)
    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    assert interface.backward_config("bfloat16", 64, True, None).tile_m == 64
    assert interface.backward_config("bfloat16", 64, True, 1, deterministic=True).tile_m == 64
    assert interface.backward_config("bfloat16", 128, False, None).tile_m == 64
    monkeypatch.setenv(bwd.TILE_M_ENV, "128")
    monkeypatch.setenv(bwd.TALL_TWO_PDS_ENV, "0")  # with_tile_m's form
    for causal, c in ((False, None), (True, None), (True, 1), (True, 2), (False, 2), (False, 4)):
        assert bwd.default_tile_m(64, causal, c, False, False) == 128, (causal, c)
        cfg = interface.backward_config("bfloat16", 64, causal, c)
        # one dS^T stage, padded dQ rows, no stats prefetch (it spills at 32 columns a thread)
        assert cfg.tile_m == 128 and cfg.pds_stages == 1 and not cfg.prefetch_stats
        assert not (cfg.dq_first_store or cfg.dq_per_wg or cfg.dq_swizzle or cfg.p_in_smem)
    for args in ((128, False, None, False, False), (256, True, 1, False, False),
                 (64, False, None, False, True)):
        assert bwd.default_tile_m(*args) == 64, args
    # the deterministic mode takes 128 rows when asked (session 32): semaphores per 128-row tile
    assert bwd.default_tile_m(64, True, 1, True, False) == 128
    det = interface.backward_config("bfloat16", 64, True, 1, deterministic=True)
    assert det.tile_m == 128 and det.prepost.grid_rows == 128 and det.prepost.row_pad == 128
    assert bwd.workspace_shapes(det, 2, 300, 300, 4, 4)["semaphores"][0] == (
        2, 4 * det.dq_chains, 3)  # ceil(300 / 128) tiles
    # ... and 80 at D = 128 (forced since session 35, by default since 37); 64 when forced
    monkeypatch.delenv(bwd.TILE_M_ENV)
    assert bwd.default_tile_m(128, False, None, True, False) == 80
    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    assert bwd.default_tile_m(128, False, None, True, False) == 64
    monkeypatch.setenv(bwd.TILE_M_ENV, "128")
    assert interface.backward_config("bfloat16", 128, False, None).tile_m == 64
    assert row_padding(128) == 128 and padded_rows(8193, 128) == 8320
    shapes = bwd.workspace_shapes(_config_128(), 2, 300, 300, 4, 4)
    assert shapes["lse2"][0] == (2, 4, 384) and shapes["dq_accum"][0] == (2, 4, 384, 64)


def test_128_rows_only_at_d64_and_80_only_at_d128():
    assert bwd.with_tile_m(interface.backward_config("bfloat16", 128, True, None), 128).tile_m == 64
    assert bwd.with_tile_m(interface.backward_config("bfloat16", 64, False, 2), 80).tile_m != 80
    with pytest.raises(ValueError, match=r"tile_m=128: expected head dims \(64, 64\)"):
        dataclasses.replace(_tall_config(), tile_m=128)
    with pytest.raises(ValueError, match=r"tile_m=80: expected head dims \(128, 128\)"):
        dataclasses.replace(_config_128(), tile_m=80)
    with pytest.raises(ValueError, match="tile_m=128"):
        dataclasses.replace(_config_128(True, 1), dq_per_wg=True)
    # the first store has flags per 128-row tile (session 35; the D = 64 default since 37)
    assert dataclasses.replace(_config_128(True, 1), dq_first_store=True).prepost.flag_rows == 128


def test_tall_two_pds_env(monkeypatch):
    """PADDLE_FLASHMASK_BWD_TALL_TWO_PDS=1 gives a taller tile FA3/FA4's form (two dS^T stages,
    the swizzled unpadded dQ tile); 64-row tiles ignore it; other values are an error."""
    monkeypatch.setenv(bwd.TILE_M_ENV, "128")
    monkeypatch.setenv(bwd.TALL_TWO_PDS_ENV, "1")
    cfg = interface.backward_config("bfloat16", 64, True, 1)
    assert cfg.tile_m == 128 and cfg.pds_stages == 2 and cfg.dq_swizzle and not cfg.stage_stats
    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    plain = interface.backward_config("bfloat16", 64, True, 1)
    assert plain.tile_m == 64 and plain == bwd.FlashMaskBwdSm90(plain).cfg
    monkeypatch.setenv(bwd.TALL_TWO_PDS_ENV, "2")
    with pytest.raises(ValueError, match=bwd.TALL_TWO_PDS_ENV):
        interface.backward_config("bfloat16", 64, True, 1)


def test_128_row_first_store_by_default(monkeypatch):
    """D = 64's 128-row tiles take the first store by default since session 37 (call 223), its
    flags (or, deterministic, the chains' semaphores) per 128-row tile; env TALL_FIRST_STORE=0
    gives them the zeroed accumulator back, and the 80-row by-thread tiles keep it on unless
    the env turns it off."""
    from paddle_flashmask.ops.cute.flash_bwd_prepost import PrePostConfig

    monkeypatch.setenv(bwd_rules.TALL_FIRST_STORE_ENV, "0")
    for det in (False, True):
        assert not interface.backward_config("bfloat16", 64, False, 2, gqa=True,
                                             deterministic=det).dq_first_store
    assert not interface.backward_config("bfloat16", 128, False, 2).dq_first_store
    monkeypatch.delenv(bwd_rules.TALL_FIRST_STORE_ENV, raising=False)
    for det, causal, c in ((False, False, None), (False, True, 1), (True, False, 2),
                           (True, True, 1)):
        cfg = interface.backward_config("bfloat16", 64, causal, c, gqa=True, deterministic=det)
        assert cfg.tile_m == 128 and cfg.dq_first_store, (det, causal, c)
        pre = cfg.prepost
        assert pre.first_store and pre.flag_rows == 128 and pre.row_pad == 128
        shapes = bwd.workspace_shapes(cfg, 2, 1000, 1000, 4, 2)
        if det:  # the postprocess reads the chains' semaphores, one per 128-row tile
            assert shapes["semaphores"][0] == (2, 4 * cfg.dq_chains, 8)
            assert "dq_flags" not in shapes
        else:
            assert shapes["dq_flags"][0] == (2, 4, 8)
    assert interface.backward_config("bfloat16", 128, False, 2).dq_first_store  # 80 rows
    monkeypatch.setenv(bwd_rules.TALL_FIRST_STORE_ENV, "1")  # (the default spelled out)
    assert interface.backward_config("bfloat16", 64, True, 1, deterministic=True).dq_first_store
    # flags counted in 64-row blocks cannot serve 128-row padding, nor 128-row flags 320
    plain = PrePostConfig("bfloat16", 64, 64, False, False, False, row_pad=128, grid_rows=128)
    assert dataclasses.replace(plain, first_store=True).flag_rows == 128
    with pytest.raises(ValueError, match="row_pad=128"):
        dataclasses.replace(plain, first_store=True, grid_rows=64)
    with pytest.raises(ValueError, match="row_pad=320"):
        PrePostConfig("bfloat16", 128, 128, False, False, False, row_pad=320, grid_rows=64,
                      first_store=True)
    monkeypatch.setenv(bwd_rules.TALL_FIRST_STORE_ENV, "on")
    with pytest.raises(ValueError, match=bwd_rules.TALL_FIRST_STORE_ENV):
        interface.backward_config("bfloat16", 64, False, None)
