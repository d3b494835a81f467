"""The staged dQ tile's per-row bulk ops issued by lane 0 from warp-uniform addresses
(BwdConfig.dq_uniform_rows), on the CPU: the config rule, and the SASS property it exists for --
no per-lane serialisation loop around the bulk reduce. The numbers are checked on the H200
(tests/gpu/bwd_check.py: 27/27 and determinism with it forced on, session 11; the 13 GQA
cases and determinism with the GQA head walk, session 12)."""
from __future__ import annotations

import pytest

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd

def test_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.DQ_UNIFORM_ROWS_ENV, bwd.DQ_SWIZZLE_ENV, bwd.FUSED_DQ_ENV,
                 bwd.GQA_IN_CTA_ENV):
        monkeypatch.delenv(name, raising=False)
    # by default on at D = 128 (the H200 A/Bs), deterministic or not, with the GQA head walk
    # too (with mask columns since session 15: faster despite the producer's few spilled bytes),
    # except where per-warpgroup blocks take the hand-off (causal masks, session 21; in the
    # deterministic mode on MHA only, session 22); not at the other head dims (not measured)
    # (on 64-row tiles: D = 128 bidirectional C = 2 runs 80 rows by default since session 35,
    # its dQ^T staged by thread, per warpgroup)
    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    for columns, det, gqa in ((1, False, False), (None, False, False), (2, True, False),
                              (None, False, True), (None, True, True), (1, False, True),
                              (2, False, True), (4, True, True), (2, False, False),
                              (None, True, False)):
        causal = columns in (None, 1)
        cfg = interface.backward_config("bfloat16", 128, causal, columns, gqa=gqa,
                                        deterministic=det)
        # (the deterministic mode walks no heads: default_gqa_in_cta)
        assert cfg.gqa_in_cta == (gqa and not det), (columns, det, gqa)
        per_wg = causal and not (det and gqa)
        assert cfg.dq_per_wg == per_wg and cfg.dq_uniform_rows == (not per_wg), (columns, det, gqa)
    monkeypatch.delenv(bwd.TILE_M_ENV)
    for d in (64, 96, 192, 256):
        assert not interface.backward_config("bfloat16", d, True, 1).dq_uniform_rows, d
    monkeypatch.setenv(bwd.DQ_UNIFORM_ROWS_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1).dq_uniform_rows
    monkeypatch.setenv(bwd.DQ_UNIFORM_ROWS_ENV, "1")  # forced: wherever it applies
    for d, columns, gqa, det in ((128, 1, False, False), (128, None, True, False),
                                 (128, 2, False, True), (256, 2, False, False)):
        cfg = interface.backward_config("bfloat16", d, True, columns, gqa=gqa, deterministic=det)
        assert cfg.dq_uniform_rows and not cfg.dq_swizzle, (d, columns, gqa, det)
    # D = 64 keeps its default one-op-per-tile swizzle unless that is switched off (on 64-row
    # tiles: the default 128-row form needs the swizzled tile)
    assert not interface.backward_config("bfloat16", 64, True, 1).dq_uniform_rows
    monkeypatch.setenv(bwd.DQ_SWIZZLE_ENV, "0")
    assert not interface.backward_config("bfloat16", 64, True, 1).dq_uniform_rows
    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    assert interface.backward_config("bfloat16", 64, True, 1).dq_uniform_rows
    monkeypatch.delenv(bwd.TILE_M_ENV)
    monkeypatch.setenv(bwd.DQ_UNIFORM_ROWS_ENV, "yes")
    with pytest.raises(ValueError, match=bwd.DQ_UNIFORM_ROWS_ENV):
        interface.backward_config("bfloat16", 128, False, 2)
    for other in ({"dq_swizzle": True}, {"fused_dq": True, "persistent_ctas": 132}):
        with pytest.raises(ValueError, match="dq_uniform_rows"):
            bwd.BwdConfig("bfloat16", 128, 128, True, 1, dq_uniform_rows=True, **other)


def _loops_with(opcode: str, env: dict) -> list[str]:
    """The loops of the d128 full-attention backward (``sass_loop_mix --all-loops``) that hold
    ``opcode``."""
    from sass_harness import sass_loop_mix

    _, report = sass_loop_mix("bwd", "--head-dim", "128", "--all-loops", **env)
    listing = report.split(": all loops", 1)[1]
    return [line for line in listing.splitlines() if f"{opcode}=" in line]


def _innermost(loops: list[str]) -> list[str]:
    """The smallest loop holding the opcode (its listing line's instruction count)."""
    return sorted(loops, key=lambda line: int(line.split("]")[1].split()[0]))[:1]


def test_no_per_lane_loop_around_the_bulk_reduce():
    pytest.importorskip("cutlass")
    # the row-wise hand-off of full attention before session 25 (now per-warpgroup blocks with
    # staged stats, pinned off here): every lane issues its rows; ptxas wraps each op in a loop
    # over the lanes that elects one, moves its addresses to uniform registers and issues (the
    # waterfall)
    rowwise = {bwd.DQ_PER_WG_ENV: "0", bwd.STAGE_STATS_ENV: "0",
               bwd.TILE_M_ENV: "64"}  # (full attention's default is 80 rows since session 33)
    [waterfall] = _innermost(_loops_with("UBLKRED", {bwd.DQ_UNIFORM_ROWS_ENV: "0", **rowwise}))
    assert "ELECT=" in waterfall and "R2UR=" in waterfall and "UBLKRED=1 " in waterfall + " "
    # uniform rows: one elected lane runs a rolled loop of 4 ops per trip, addresses already
    # uniform: no election and no register moves inside it
    [rows] = _innermost(_loops_with("UBLKRED", {bwd.DQ_UNIFORM_ROWS_ENV: "1", **rowwise}))
    assert "UBLKRED=4" in rows and "ELECT=" not in rows and "R2UR=" not in rows
