"""LSE / delta spread over a warp's lanes and shuffled to the columns (BwdConfig.shfl_stats), on
the CPU: for every consumer thread and accumulator column, the lane and word the kernel's
``_shuffled_stat`` reads hold that column's statistic (the lane-share layout of ``_fetch_stats``
against the S^T GEMM's C partition, evaluated by the DSL at trace time), and the config's rules.
The GPU oracle (tests/gpu/bwd_check.py) checks the numbers."""
from __future__ import annotations

import dataclasses

import pytest

import cutlass
import cutlass.cute as cute

from paddle_flashmask.ops.cute import bwd_rules
from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
from paddle_flashmask.ops.cute import interface
from paddle_flashmask.ops.cute.bwd_layout import (_acc_mn, stat_holder_lane, stat_lane_word,
                                                  stat_pair_step, stat_words)

_COLUMNS: dict = {}


def _columns_by_thread(kernel) -> dict:
    """consumer thread -> [query column of accumulator column c, for every row]."""
    _COLUMNS.clear()

    @cute.jit
    def probe():
        tiled_sdp = kernel._mmas()[0]
        coords = cute.make_identity_tensor((kernel.tile_n, kernel.tile_m))
        for t in cutlass.range_constexpr(256):
            part = _acc_mn(tiled_sdp.get_slice(t).partition_C(coords))
            _COLUMNS[t] = [[int(part[r, c][1]) for r in range(cute.size(part, mode=[0]))]
                           for c in range(cute.size(part, mode=[1]))]

    cute.compile(probe)
    return dict(_COLUMNS)


def _lane_share(lane: int, word: int) -> int:
    """The query column whose statistic lane ``lane`` holds in ``word`` (``_fetch_stats`` loads
    pair ``lane + stat_pair_step(k)`` into words 2k, 2k + 1)."""
    return 2 * (lane + stat_pair_step(word // 2)) + word % 2


@pytest.mark.parametrize("head_dim,tile_m,columns", [(64, 128, None), (64, 64, None),
                                                     (128, 64, None), (256, 64, None),
                                                     (128, 80, None), (128, 80, 2)])
def test_each_column_is_shuffled_from_its_holder(monkeypatch, head_dim, tile_m, columns):
    monkeypatch.setenv(bwd_rules.TILE_M_ENV, str(tile_m))
    monkeypatch.setenv(bwd_rules.SHFL_STATS_ENV, "1")
    cfg = interface.backward_config("bfloat16", head_dim, False, columns)
    assert cfg.shfl_stats and cfg.tile_m == tile_m
    columns = _columns_by_thread(bwd.FlashMaskBwdSm90(cfg))
    held = stat_words(tile_m)  # words per lane and statistic
    assert held == -(-tile_m // 64) * 2
    for t, cols in columns.items():
        for c, per_row in enumerate(cols):
            assert len(set(per_row)) == 1, (t, c, per_row)  # every row of the thread: one column
            col = per_row[0]
            # _shuffled_stat reads lane stat_holder_lane(col)'s word stat_lane_word(c)
            word = stat_lane_word(c)
            assert word < held, (t, c)
            assert _lane_share(stat_holder_lane(col), word) == col, (head_dim, tile_m, t, c, col)
    # the warp's lanes together hold every column of the tile, each once (at 80 rows the
    # second word pair of lanes 8-31 would be columns 80-127: _fetch_stats rereads the last)
    shares = [_lane_share(lane, w) for lane in range(32) for w in range(held)]
    assert sorted(s for s in shares if s < tile_m) == list(range(tile_m))


def test_config_rules(monkeypatch):
    for name in (bwd_rules.SHFL_STATS_ENV, bwd_rules.TILE_M_ENV):
        monkeypatch.delenv(name, raising=False)
    assert interface.backward_config("bfloat16", 64, True, 2).shfl_stats
    cfg = interface.backward_config("bfloat16", 64, True, None)
    assert cfg.tile_m == 128 and cfg.shfl_stats
    assert dataclasses.replace(cfg, shfl_stats=False) != cfg
    with pytest.raises(ValueError, match="shfl_stats"):
        dataclasses.replace(cfg, prefetch_stats=True)
    with pytest.raises(ValueError, match="shfl_stats"):
        dataclasses.replace(cfg, stage_stats=True, pds_stages=1, dq_swizzle=False)
    # 80 rows (session 33): in place of the staged stats, off by default
    tall80 = interface.backward_config("bfloat16", 128, False, None)
    assert tall80.tile_m == 80 and tall80.stage_stats and not tall80.shfl_stats
    shuffled = bwd_rules.with_shfl_stats(tall80)
    assert shuffled.shfl_stats and not shuffled.stage_stats
    with pytest.raises(ValueError, match="shfl_stats: expected tile_m 64, 80 or 128"):
        dataclasses.replace(shuffled, stage_stats=True)
    assert bwd_rules.default_shfl_stats(128) and not bwd_rules.default_shfl_stats(64)
    monkeypatch.setenv(bwd_rules.SHFL_STATS_ENV, "1")
    assert bwd_rules.default_shfl_stats(64)
    monkeypatch.setenv(bwd_rules.SHFL_STATS_ENV, "0")
    assert not bwd_rules.default_shfl_stats(128)
