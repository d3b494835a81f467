"""One bulk operation per staged dQ tile (BwdConfig.dq_swizzle), on the CPU: the staging layout
that the consumers store into (evaluated by the DSL at trace time) is a bijection whose 16-byte
chunks sit at ``chunk ^ (row % 8)`` of their own row (the rule the postprocess undoes), its
8-byte stores from the wgmma accumulator hit every bank group equally, and the config rule. The
numbers are checked on the H200 (tests/gpu/bwd_check.py with PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=1)."""
from __future__ import annotations

import collections

import pytest

import cutlass
import cutlass.cute as cute

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd

ROWS = 64
_OFFSETS: dict = {}


@cute.jit
def _probe(d: cutlass.Constexpr[int]):
    layout = bwd.dq_stage_layout(ROWS, d, True)
    for row in cutlass.range_constexpr(ROWS):
        for col in cutlass.range_constexpr(0, d, 2):  # every 8-byte store of the accumulator
            _OFFSETS[(d, row, col)] = layout((row, col))


@pytest.mark.parametrize("d", [64, 128, 256])
def test_swizzled_staging_layout(d):
    cute.compile(_probe, d)
    offsets = {(row, col): int(_OFFSETS[(d, row, col)]) for row in range(ROWS)
               for col in range(0, d, 2)}
    # a bijection onto the contiguous block, each pair of columns kept adjacent
    assert sorted(offsets.values()) == list(range(0, ROWS * d, 2))
    for (row, col), off in offsets.items():
        assert off // d == row  # the row stays in its row: one bulk op moves whole rows
        assert (off % d) // 4 == (col // 4) ^ (row % 8)  # the postprocess's rule
        assert off % 4 == col % 4
    # one warp's 8-byte store of the wgmma C fragment: 8 rows x 4 lanes x 2 columns of one
    # 8-column group -> 16 chunks, every 128-byte bank group hit exactly twice (2 wavefronts)
    for group in range(d // 8):
        for row0 in (0, 8, 16, 56):
            chunks = [offsets[(row0 + lane // 4, 8 * group + 2 * (lane % 4))] // 4
                      for lane in range(32)]
            banks = collections.Counter((chunk % 8) for chunk in set(chunks))
            assert sorted(banks.values()) == [2] * 8, (group, row0, banks)


def test_unswizzled_layout_rejects_other_head_dims():
    with pytest.raises(ValueError, match="power of two"):
        bwd.dq_stage_layout(ROWS, 96, True)


def test_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.DQ_SWIZZLE_ENV, bwd.FUSED_DQ_ENV, bwd.D256_STAGES_ENV, bwd.DQ_PER_WG_ENV,
                 bwd.DQ_UNIFORM_ROWS_ENV):
        monkeypatch.delenv(name, raising=False)
    # by default on for D = 64 only (the H200 A/B: faster there, slower at D = 128), and at D = 128
    # as the per-warpgroup blocks of causal masks (dq_per_wg, session 21)
    assert interface.backward_config("bfloat16", 64, True, 1).dq_swizzle
    assert not interface.backward_config("bfloat16", 128, True, 2).dq_swizzle
    # (D = 128 bidirectional C = 2 runs the 80-row tile since session 35, whose two dS^T
    # stages need the swizzled tile; on 64 rows it is off)
    assert interface.backward_config("bfloat16", 128, False, 2).dq_swizzle
    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    assert not interface.backward_config("bfloat16", 128, False, 2).dq_swizzle
    monkeypatch.delenv(bwd.TILE_M_ENV)
    per_wg = interface.backward_config("bfloat16", 128, True, 1)
    assert per_wg.dq_swizzle and per_wg.dq_per_wg
    assert not interface.backward_config("bfloat16", 256, True, 1).dq_swizzle
    monkeypatch.setenv(bwd.DQ_SWIZZLE_ENV, "0")
    # D = 64's default 128-row tile (FA4's form) stages dQ only in the swizzled tile; the
    # switch applies to 64-row tiles
    assert interface.backward_config("bfloat16", 64, True, 1).dq_swizzle
    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    assert not interface.backward_config("bfloat16", 64, True, 1).dq_swizzle
    monkeypatch.delenv(bwd.TILE_M_ENV)
    monkeypatch.setenv(bwd.DQ_SWIZZLE_ENV, "yes")
    with pytest.raises(ValueError, match=bwd.DQ_SWIZZLE_ENV):
        interface.backward_config("bfloat16", 64, True, 1)
    monkeypatch.setenv(bwd.DQ_SWIZZLE_ENV, "0")  # forced off: the row-wise hand-off at D = 128
    cfg = interface.backward_config("bfloat16", 128, True, 1)
    assert not cfg.dq_swizzle and not cfg.dq_per_wg and cfg.dq_uniform_rows
    monkeypatch.setenv(bwd.DQ_SWIZZLE_ENV, "1")  # forced on: one block, not per warpgroup
    for d in (64, 128, 256):
        cfg = interface.backward_config("bfloat16", d, True, 1)
        assert cfg.dq_swizzle and cfg.prepost.dq_swizzle and not cfg.dq_per_wg
    assert interface.backward_config("bfloat16", 128, True, 1, deterministic=True).dq_swizzle
    assert not interface.backward_config("bfloat16", 96, True, 1).dq_swizzle
    assert not interface.backward_config("bfloat16", 192, True, 1).dq_swizzle
    monkeypatch.setenv(bwd.FUSED_DQ_ENV, "1")  # its converter reads dq_accum row by row
    assert not interface.backward_config("bfloat16", 128, True, 1).dq_swizzle
    with pytest.raises(ValueError, match="dq_swizzle"):
        bwd.BwdConfig("bfloat16", 96, 96, True, 1, dq_swizzle=True)
    # the padded staging rows are gone: 2 KB less shared memory at D = 128
    plain = bwd.BwdConfig("bfloat16", 128, 128, True, 1)
    swizzled = bwd.BwdConfig("bfloat16", 128, 128, True, 1, dq_swizzle=True)
    assert plain._staged_bytes() - swizzled._staged_bytes() == 64 * 8 * 4
