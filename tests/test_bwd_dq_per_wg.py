"""One staged dQ block per consumer warpgroup (BwdConfig.dq_per_wg), on the CPU: the staging
layout the consumers store into and the writer moves (evaluated by the DSL at trace time) puts
warpgroup w's columns in block w as a D/2-wide swizzled tile, the dQ MMA gives each warpgroup
exactly its block's columns (so the per-warpgroup barriers guard disjoint bytes), the
postprocess's chunk mapping is the layout's inverse, the writer issues one bulk op per block,
and the config rule. Not yet run on a GPU (off by default)."""
from __future__ import annotations

import os
from unittest import mock

import pytest

import cutlass
import cutlass.cute as cute

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd

ROWS = 64
_OFFSETS: dict = {}
_COLUMNS: dict = {}


@cute.jit
def _probe_layout(d: cutlass.Constexpr[int]):
    layout = bwd.dq_stage_layout(ROWS, d, True, per_wg=True)
    for row in cutlass.range_constexpr(ROWS):
        for col in cutlass.range_constexpr(0, d, 2):  # every 8-byte store of the accumulator
            _OFFSETS[(d, row, col)] = layout((row, col))


def _postprocess_place(chunk: int, d: int) -> tuple[int, int]:
    """(row, 4-column chunk) the postprocess (flash_bwd_prepost.dq_kernel, dq_per_wg) reads for
    16-byte chunk ``chunk`` of a query tile's dq_accum block, written out independently here."""
    block_chunks = d // 4 // 2
    block, within = divmod(chunk, ROWS * block_chunks)
    row, cc = divmod(within, block_chunks)
    return row, block * block_chunks + (cc ^ (row % 8))


@pytest.mark.parametrize("d", [64, 128, 256])
def test_per_warpgroup_blocks(d):
    cute.compile(_probe_layout, d)
    width = d // 2
    offsets = {(row, col): int(_OFFSETS[(d, row, col)]) for row in range(ROWS)
               for col in range(0, d, 2)}
    assert sorted(offsets.values()) == list(range(0, ROWS * d, 2))  # a bijection, pairs kept
    for (row, col), off in offsets.items():
        block, within = divmod(off, ROWS * width)
        assert block == col // width  # warpgroup w's columns in block w: one bulk op each
        assert within // width == row
        assert (within % width) // 4 == ((col % width) // 4) ^ (row % 8)
        assert off % 4 == col % 4
        # the postprocess reads this chunk back into (row, col)
        assert _postprocess_place(off // 4, d) == (row, col // 4)


def test_dq_mma_gives_each_warpgroup_its_block(monkeypatch):
    """The per-warpgroup barriers are only race-free if warpgroup w's dQ accumulator covers
    exactly the columns of block w: probe the dQ tiled MMA's C partition per consumer thread
    (64-row tiles: D = 64's default 128-row tile splits dQ by rows, test_bwd_tall_tiles)."""
    from paddle_flashmask.ops.cute import interface

    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    for d in (64, 128, 256):
        cfg = interface.backward_config("bfloat16", d, True, 1)
        kernel = bwd.FlashMaskBwdSm90(cfg)
        columns = _dq_columns(kernel, d)
        for wg in range(2):
            cols = set().union(*(columns[t] for t in range(128 * wg, 128 * wg + 128)))
            assert cols == set(range(wg * d // 2, (wg + 1) * d // 2)), (d, wg)


def _dq_columns(kernel, d: int) -> dict:
    _COLUMNS.clear()

    @cute.jit
    def probe():
        _, _, _, tiled_dq = kernel._mmas()
        coords = cute.make_identity_tensor((ROWS, d))
        for t in cutlass.range_constexpr(256):
            part = tiled_dq.get_slice(t).partition_C(coords)
            _COLUMNS[t] = set(int(part[i][1]) for i in range(cute.size(part)))

    cute.compile(probe)
    return dict(_COLUMNS)


def test_no_loop_around_the_bulk_ops():
    """d128 full attention on 64-row tiles with it on: no loop holds a bulk reduce or copy (one elected lane,
    addresses from the tile's warp-uniform index: no per-lane ELECT / R2UR loop, no per-row
    ops). tests/test_cute_compile.py checks that the kernel has exactly two of each. Staged
    stats (on with it for full attention since session 25) are pinned off: their producer-side
    bulk copies of LSE / delta belong in the producer's query-tile loop."""
    from sass_harness import sass_loop_mix

    _, report = sass_loop_mix("bwd", "--head-dim", "128", "--all-loops",
                              **{bwd.DQ_PER_WG_ENV: "1", bwd.STAGE_STATS_ENV: "0",
                                 bwd.TILE_M_ENV: "64"})
    listing = report.split(": all loops", 1)[1]
    assert listing.strip(), report[-2000:]
    assert not [line for line in listing.splitlines() if "UBLK" in line], listing


def test_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.DQ_PER_WG_ENV, bwd.DQ_SWIZZLE_ENV, bwd.FUSED_DQ_ENV,
                 bwd.DQ_UNIFORM_ROWS_ENV):
        monkeypatch.delenv(name, raising=False)
    for d, causal, columns, gqa in ((64, True, 1, True), (64, False, 2, False),
                                    (256, True, None, True), (64, False, None, False),
                                    (128, True, 2, False), (128, True, 2, True)):
        cfg = interface.backward_config("bfloat16", d, causal, columns, gqa=gqa)
        # off: D = 64 / 256 but D = 64's MHA causal masks with columns, or causal C = 2 at
        # D = 128 (not measured)
        assert not cfg.dq_per_wg, (d, causal, columns, gqa)
    for gqa in (False, True):  # D = 128 bidirectional C = 2: the 80-row tile's by-thread
        cfg = interface.backward_config("bfloat16", 128, False, 2, gqa=gqa)  # blocks (s35)
        assert cfg.tile_m == 80 and cfg.dq_per_wg and cfg.dq_by_thread, gqa
        with mock.patch.dict(os.environ, {bwd.TILE_M_ENV: "64"}):  # on 64 rows: off
            assert not interface.backward_config("bfloat16", 128, False, 2, gqa=gqa).dq_per_wg
    # D = 64 (session 30): MHA causal masks with columns on 64-row tiles (the default 128-row
    # tiles hand dQ over by query rows: test_bwd_tall_tiles), outside the deterministic mode
    assert not interface.backward_config("bfloat16", 64, True, 1).dq_per_wg
    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    for columns in (1, 2):
        cfg = interface.backward_config("bfloat16", 64, True, columns)
        assert cfg.dq_per_wg and cfg.stage_stats and not cfg.prefetch_stats, columns
        assert cfg.tile_m == 64, columns
        det = interface.backward_config("bfloat16", 64, True, columns, deterministic=True)
        assert not det.dq_per_wg and not det.stage_stats, columns
    # on at D = 128, with staged stats, for causal masks without columns or with one and for
    # full attention (session 25), MHA and the GQA head walk
    for causal, columns in ((True, None), (True, 1), (False, None)):
        for gqa in (False, True):
            cfg = interface.backward_config("bfloat16", 128, causal, columns, gqa=gqa)
            assert cfg.dq_per_wg and cfg.dq_swizzle and cfg.prepost.dq_per_wg, (columns, gqa)
            assert cfg.stage_stats, (causal, columns, gqa)
    # deterministic: on for MHA (call 124: -4 %), off for GQA (+1..2 % on three of four masks)
    assert not interface.backward_config("bfloat16", 128, True, 1, gqa=True,
                                         deterministic=True).dq_per_wg
    for columns in (None, 1):
        cfg = interface.backward_config("bfloat16", 128, True, columns, deterministic=True)
        assert cfg.dq_per_wg and cfg.deterministic and cfg.prepost.dq_per_wg, columns
    assert not interface.backward_config("bfloat16", 128, False, 2, deterministic=True).dq_per_wg
    monkeypatch.setenv(bwd.DQ_PER_WG_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1, gqa=True).dq_per_wg
    assert not interface.backward_config("bfloat16", 128, True, 1).dq_per_wg
    monkeypatch.setenv(bwd.DQ_PER_WG_ENV, "1")
    for d in (64, 128, 256):
        cfg = interface.backward_config("bfloat16", d, True, 1)
        assert cfg.dq_per_wg and cfg.dq_swizzle and not cfg.dq_uniform_rows, d
        assert cfg.prepost.dq_per_wg
    # forced, deterministic GQA takes it too (its writer adds both blocks before publishing)
    cfg = interface.backward_config("bfloat16", 128, True, 1, gqa=True, deterministic=True)
    assert cfg.dq_per_wg and cfg.deterministic and cfg.prepost.dq_per_wg
    monkeypatch.setenv(bwd.FUSED_DQ_ENV, "1")  # its converter reads dq_accum row by row
    assert not interface.backward_config("bfloat16", 128, True, 1).dq_per_wg
    monkeypatch.delenv(bwd.FUSED_DQ_ENV)
    monkeypatch.setenv(bwd.DQ_PER_WG_ENV, "yes")
    with pytest.raises(ValueError, match=bwd.DQ_PER_WG_ENV):
        interface.backward_config("bfloat16", 128, True, 1)
    with pytest.raises(ValueError, match="dq_per_wg"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, dq_per_wg=True)  # needs dq_swizzle
    with pytest.raises(ValueError, match="per_wg"):
        bwd.dq_stage_layout(ROWS, 128, False, per_wg=True)
