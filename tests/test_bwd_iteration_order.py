"""FA4's backward iteration order as options (off until their H200 A/B), on the CPU: dS^T in two
smem stages (``BwdConfig.pds_stages``: no "P^T/dS^T free" rendezvous per visited query tile) and
the dQ GEMM issued before dK with its hand-off overlapping the dK GEMM (``BwdConfig.dq_early``).
The config rules, the host's choice, and a real sm_90a compile whose main loop is checked with
``scripts/sass_loop_mix.py`` (one named barrier fewer; one more wgmma wait; never serialised).
The numbers are checked on the H200 (tests/gpu/bwd_check.py, scripts/gpu_session.sh)."""
from __future__ import annotations

import dataclasses

import pytest

from paddle_flashmask.ops.cute import bwd_rules
from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd

def test_config_rules(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.PDS_STAGES_ENV, bwd.DQ_EARLY_ENV, bwd.RS_DKV_ENV, bwd.D256_STAGES_ENV):
        monkeypatch.delenv(name, raising=False)
    both = interface.backward_config("bfloat16", 128, True, 1)
    assert both.pds_stages == 2 and both.dq_early and both.dq_in_smem  # on by default
    monkeypatch.setenv(bwd.PDS_STAGES_ENV, "1")
    monkeypatch.setenv(bwd.DQ_EARLY_ENV, "0")
    base = interface.backward_config("bfloat16", 128, True, 1)
    assert base.pds_stages == 1 and not base.dq_early  # the pre-session-10 order, on request
    monkeypatch.delenv(bwd.PDS_STAGES_ENV)
    monkeypatch.delenv(bwd.DQ_EARLY_ENV)
    # the second dS^T stage is 64 x 128 x 2 bytes more shared memory
    assert both._staged_bytes() - base._staged_bytes() == 64 * 128 * 2
    d64 = interface.backward_config("bfloat16", 64, False, 2, gqa=True)
    assert d64.pds_stages == 2 and d64.dq_early
    # where they do not apply the host leaves them off instead of failing
    d256 = interface.backward_config("bfloat16", 256, True, 1)  # tile_n 64: P^T through smem
    assert d256.pds_stages == 1
    det = interface.backward_config("bfloat16", 128, True, 1, deterministic=True)
    # deterministic too at D = 64 / 128 since session 37 (the writer waits, not the WGs)
    assert det.pds_stages == 2 and det.dq_early
    for d, causal, c in ((128, False, None), (64, False, 2)):
        assert interface.backward_config("bfloat16", d, causal, c, deterministic=True).dq_early
    assert not interface.backward_config("bfloat16", 256, True, 1, deterministic=True).dq_early
    monkeypatch.setenv(bwd_rules.DET_DQ_EARLY_ENV, "1")  # every head dim, on request
    assert interface.backward_config("bfloat16", 256, True, 1, deterministic=True).dq_early
    monkeypatch.setenv(bwd_rules.DET_DQ_EARLY_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1, deterministic=True).dq_early
    assert interface.backward_config("bfloat16", 128, True, 1).dq_early  # (default mode: own env)
    monkeypatch.setenv(bwd_rules.DET_DQ_EARLY_ENV, "yes")
    with pytest.raises(ValueError, match=bwd_rules.DET_DQ_EARLY_ENV):
        interface.backward_config("bfloat16", 128, True, 1, deterministic=True)
    monkeypatch.delenv(bwd_rules.DET_DQ_EARLY_ENV)
    monkeypatch.setenv(bwd.RS_DKV_ENV, "0")
    assert interface.backward_config("bfloat16", 128, True, 1).pds_stages == 1
    # an explicit config that cannot work is an error naming the field
    with pytest.raises(ValueError, match="pds_stages"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, rs_dkv=False, pds_stages=2)
    with pytest.raises(ValueError, match="pds_stages"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, rs_dkv=True, pds_stages=3)
    with pytest.raises(ValueError, match="dq_early: expected dQ staged in smem"):
        bwd.BwdConfig("bfloat16", 256, 256, True, 1, qdo_stages=2, dq_early=True)
    monkeypatch.setenv(bwd.PDS_STAGES_ENV, "4")
    with pytest.raises(ValueError, match=bwd.PDS_STAGES_ENV):
        interface.backward_config("bfloat16", 128, False, 2)


def _main_loop(env: dict) -> dict:
    """Opcode histogram of the backward's main loop (d128, full attention, 64-row tiles: the
    form these options were built on; full attention's default is 80 rows since session 33)
    under ``env``."""
    from sass_harness import sass_loop_mix

    loops, _ = sass_loop_mix("bwd", "--head-dim", "128", **{bwd.TILE_M_ENV: "64", **env})
    assert len(loops) == 1, loops  # the consumer's query-tile loop
    return loops[0]["histogram"]


def test_main_loop_drops_a_rendezvous_and_keeps_wgmma_async():
    pytest.importorskip("cutlass")
    base = _main_loop({bwd.PDS_STAGES_ENV: "1", bwd.DQ_EARLY_ENV: "0"})
    both = _main_loop({bwd.PDS_STAGES_ENV: "2", bwd.DQ_EARLY_ENV: "1"})
    assert both["HGMMA"] == base["HGMMA"] == 32
    assert both["BAR"] == base["BAR"] - 1  # no "P^T/dS^T free" barrier
    # one more wgmma wait (dV, dQ | dK), not one per HGMMA (ptxas serialising the chain)
    assert both["WARPGROUP"] == base["WARPGROUP"] + 1


def test_prefetch_stats_rules(monkeypatch):
    """The D=64 backward prefetches the next query tile's LSE/delta by default; other head dims
    never do, env 0 turns it off, and it excludes late_loads (which loads delta later instead)."""
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.PREFETCH_STATS_ENV, bwd.LATE_LOADS_ENV):
        monkeypatch.delenv(name, raising=False)
    # the D = 64 default (128-row tiles) shuffles its stats instead (test_bwd_tall_tiles); the
    # prefetch is the 64-row form's: the deterministic mode's, or with the height forced
    assert not interface.backward_config("bfloat16", 64, True, 2, gqa=True).prefetch_stats
    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    assert interface.backward_config("bfloat16", 64, True, 2, gqa=True).prefetch_stats
    assert interface.backward_config("bfloat16", 64, True, 1, deterministic=True).prefetch_stats
    for d in (96, 128, 192, 256):
        assert not interface.backward_config("bfloat16", d, True, 1).prefetch_stats
    monkeypatch.setenv(bwd.PREFETCH_STATS_ENV, "0")
    assert not interface.backward_config("bfloat16", 64, True, 2).prefetch_stats
    monkeypatch.delenv(bwd.PREFETCH_STATS_ENV)
    monkeypatch.setenv(bwd.LATE_LOADS_ENV, "1")  # multi-column masks load delta late instead
    late = interface.backward_config("bfloat16", 64, False, 2)
    assert late.late_loads and not late.prefetch_stats
    with pytest.raises(ValueError, match="prefetch_stats"):
        bwd.BwdConfig("bfloat16", 64, 64, True, 2, late_loads=True, prefetch_stats=True)


def test_stage_stats_rules(monkeypatch):
    """LSE/delta staged with Q/dO: by default at D = 128 for causal masks with at most one column
    (session 21's A/B at dv_early) and full attention (session 25, with dq_per_wg), masks with
    columns under the GQA head walk (session 15) or bidirectional C = 2 with per-query-head CTAs
    (session 16); off for causal C = 2 and bidirectional C = 4 without the walk; at D = 64 for MHA
    causal masks with columns (session 30); on through the env for every head dim, where
    it replaces the D=64 prefetch and late_loads; shared memory grows by the two staged runs."""
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.STAGE_STATS_ENV, bwd.PREFETCH_STATS_ENV, bwd.LATE_LOADS_ENV,
                 bwd.GQA_IN_CTA_ENV):
        monkeypatch.delenv(name, raising=False)
    for causal, columns in ((True, None), (True, 1), (False, None)):  # causal C <= 1, full
        for gqa in (False, True):
            cfg = interface.backward_config("bfloat16", 128, causal, columns, gqa=gqa)
            assert cfg.stage_stats, (causal, columns, gqa)
    assert not interface.backward_config("bfloat16", 128, True, 2).stage_stats  # not measured
    for causal, columns in ((True, 1), (False, 2), (False, 4)):
        cfg = interface.backward_config("bfloat16", 128, causal, columns, gqa=True)
        assert cfg.gqa_in_cta and cfg.stage_stats, (causal, columns)
    monkeypatch.setenv(bwd.GQA_IN_CTA_ENV, "1")  # the deterministic mode walks only when asked
    cfg = interface.backward_config("bfloat16", 128, False, 4, gqa=True, deterministic=True)
    assert cfg.gqa_in_cta and cfg.stage_stats
    monkeypatch.delenv(bwd.GQA_IN_CTA_ENV)
    assert interface.backward_config("bfloat16", 128, False, 2).stage_stats  # MHA documents
    # D = 64 (session 30): MHA causal masks with columns on 64-row tiles, not in the
    # deterministic mode (the default 128-row tiles shuffle their stats: test_bwd_tall_tiles)
    for columns in (1, 2):
        assert not interface.backward_config("bfloat16", 64, True, columns).stage_stats, columns
    monkeypatch.setenv(bwd.TILE_M_ENV, "64")
    for columns in (1, 2):
        assert interface.backward_config("bfloat16", 64, True, columns).stage_stats, columns
    assert not interface.backward_config("bfloat16", 64, True, 1, deterministic=True).stage_stats
    for d, causal, columns, gqa in ((64, False, None, True), (256, False, None, False),
                                    (64, True, 1, True), (64, True, None, True),
                                    (64, False, 2, True), (64, False, 2, False),
                                    (256, True, 1, True), (256, False, 4, False),
                                    (128, False, 4, False)):
        cfg = interface.backward_config("bfloat16", d, causal, columns, gqa=gqa)
        assert not cfg.stage_stats, (d, causal, columns, gqa)
    monkeypatch.setenv(bwd.GQA_IN_CTA_ENV, "0")  # no head walk: per-query-head CTAs, as MHA
    assert interface.backward_config("bfloat16", 128, True, 1, gqa=True).stage_stats
    assert interface.backward_config("bfloat16", 128, False, 2, gqa=True).stage_stats
    assert not interface.backward_config("bfloat16", 128, False, 4, gqa=True).stage_stats
    monkeypatch.setenv(bwd.STAGE_STATS_ENV, "0")
    monkeypatch.delenv(bwd.GQA_IN_CTA_ENV)
    assert not interface.backward_config("bfloat16", 128, True, 1, gqa=True).stage_stats
    monkeypatch.setenv(bwd.STAGE_STATS_ENV, "on")
    with pytest.raises(ValueError, match=bwd.STAGE_STATS_ENV):
        interface.backward_config("bfloat16", 128, True, 2)
    monkeypatch.setenv(bwd.STAGE_STATS_ENV, "1")
    monkeypatch.setenv(bwd.LATE_LOADS_ENV, "1")
    for d in (64, 128, 256):
        cfg = interface.backward_config("bfloat16", d, False, 2, gqa=True)
        assert cfg.stage_stats and not cfg.prefetch_stats and not cfg.late_loads
    staged = interface.backward_config("bfloat16", 128, False, None)
    unstaged = dataclasses.replace(staged, stage_stats=False)
    assert staged._staged_bytes() - unstaged._staged_bytes() == 2 * staged.qdo_stages * 64 * 4
    for other in ({"prefetch_stats": True}, {"late_loads": True}):
        with pytest.raises(ValueError, match="stage_stats"):
            bwd.BwdConfig("bfloat16", 64, 64, True, 2, stage_stats=True, **other)


def test_stage_stats_reads_shared_memory_in_the_main_loop():
    pytest.importorskip("cutlass")
    base = _main_loop({bwd.STAGE_STATS_ENV: "0"})
    staged = _main_loop({bwd.STAGE_STATS_ENV: "1"})
    # the 16 8-byte global loads of LSE/delta become 8-byte shared loads, and their 64-bit
    # address arithmetic goes: fewer instructions per query tile, same GEMMs and barriers
    assert base.get("LDG", 0) == 16 and "LDS" not in base
    assert staged.get("LDS", 0) == 16 and "LDG" not in staged
    assert staged["HGMMA"] == base["HGMMA"] and staged["BAR"] == base["BAR"]
    assert sum(staged.values()) < sum(base.values())


def test_dv_early_rules(monkeypatch):
    """The dV GEMM before the dS^T rendezvous (BwdConfig.dv_early): on by default since the
    H200 A/B of session 20 where P^T comes from registers (rs_dkv), never where it does not; env 0
    gives the old order. dk_early (dK before it too) only with it, off by default."""
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.DV_EARLY_ENV, bwd.RS_DKV_ENV, bwd.DK_EARLY_ENV):
        monkeypatch.delenv(name, raising=False)
    cfg = interface.backward_config("bfloat16", 128, True, 1)
    assert cfg.dv_early and not cfg.dk_early
    monkeypatch.setenv(bwd.DV_EARLY_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1).dv_early
    monkeypatch.setenv(bwd.DK_EARLY_ENV, "1")  # nothing to join
    assert not interface.backward_config("bfloat16", 128, True, 1).dk_early
    monkeypatch.setenv(bwd.DV_EARLY_ENV, "1")
    assert interface.backward_config("bfloat16", 128, True, 1).dk_early
    monkeypatch.delenv(bwd.DK_EARLY_ENV)
    for d, causal, columns, gqa, det in ((128, True, 1, False, False), (128, False, None, False,
                                          False), (64, False, 2, True, False),
                                         (128, True, 1, True, True)):
        assert interface.backward_config("bfloat16", d, causal, columns, gqa=gqa,
                                         deterministic=det).dv_early
    assert not interface.backward_config("bfloat16", 256, True, 1).dv_early  # P^T through smem
    monkeypatch.setenv(bwd.RS_DKV_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1).dv_early
    with pytest.raises(ValueError, match="dv_early"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, rs_dkv=False, dv_early=True)
    with pytest.raises(ValueError, match="dk_early"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, rs_dkv=True, dk_early=True)


def test_dv_early_loop_keeps_its_gemms_and_adds_one_commit():
    """Same 32 HGMMA and barriers per iteration; the dV GEMM's own commit group is one
    WARPGROUP.ARRIVE more (its fence before the rendezvous), and no extra wait."""
    base = _main_loop({bwd.DV_EARLY_ENV: "0"})
    early = _main_loop({bwd.DV_EARLY_ENV: "1"})
    assert early["HGMMA"] == base["HGMMA"] == 32
    assert early["BAR"] == base["BAR"]
    assert early.get("WARPGROUP", 0) >= base.get("WARPGROUP", 0)
    assert early.get("WARPSYNC", 0) == base.get("WARPSYNC", 0)


def test_dk_after_dv_rules(monkeypatch):
    """dK issued only once dV has completed (BwdConfig.dk_after_dv, FA4's order; session 25): by
    default on the GQA head walk at D = 128 for masks with columns only (the H200 A/B of session 26), on
    through the env where dv_early and dq_early hold and dK is not already early (MHA and the
    GQA head walk), off through it everywhere, never in the deterministic mode; errors name
    the field."""
    from paddle_flashmask.ops.cute import interface

    for name in (bwd.DK_AFTER_DV_ENV, bwd.DK_EARLY_ENV, bwd.DV_EARLY_ENV, bwd.DQ_EARLY_ENV):
        monkeypatch.delenv(name, raising=False)
    for d, causal, columns in ((128, False, None), (128, True, 1), (128, False, 2)):
        assert not interface.backward_config("bfloat16", d, causal, columns).dk_after_dv
    for causal, columns in ((True, 1), (True, 2), (False, 2)):
        cfg = interface.backward_config("bfloat16", 128, causal, columns, gqa=True)
        assert cfg.gqa_in_cta and cfg.dk_after_dv, (causal, columns)
    assert not interface.backward_config("bfloat16", 128, True, None, gqa=True).dk_after_dv
    assert not interface.backward_config("bfloat16", 64, True, 1, gqa=True).dk_after_dv
    assert not interface.backward_config("bfloat16", 128, True, 1, gqa=True,
                                         deterministic=True).dk_after_dv
    monkeypatch.setenv(bwd.DK_AFTER_DV_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1, gqa=True).dk_after_dv
    monkeypatch.setenv(bwd.DK_AFTER_DV_ENV, "1")
    for d, causal, columns in ((128, False, None), (128, True, 1), (128, False, 2), (64, True, 1)):
        cfg = interface.backward_config("bfloat16", d, causal, columns)
        assert cfg.dk_after_dv and cfg.dv_early and cfg.dq_early, (d, causal, columns)
    cfg = interface.backward_config("bfloat16", 128, True, 1, gqa=True)
    assert cfg.dk_after_dv and cfg.gqa_in_cta
    assert not interface.backward_config("bfloat16", 128, True, 1, deterministic=True).dk_after_dv
    monkeypatch.setenv(bwd.DK_EARLY_ENV, "1")  # dK before the rendezvous: nothing to order
    assert not interface.backward_config("bfloat16", 128, True, 1).dk_after_dv
    monkeypatch.setenv(bwd.DK_EARLY_ENV, "0")
    monkeypatch.setenv(bwd.DV_EARLY_ENV, "0")  # dV not in its own earlier group
    assert not interface.backward_config("bfloat16", 128, True, 1).dk_after_dv
    with pytest.raises(ValueError, match="dk_after_dv"):
        bwd.BwdConfig("bfloat16", 128, 128, True, 1, rs_dkv=True, dk_after_dv=True)
    monkeypatch.setenv(bwd.DK_AFTER_DV_ENV, "yes")
    monkeypatch.delenv(bwd.DV_EARLY_ENV)
    with pytest.raises(ValueError, match=bwd.DK_AFTER_DV_ENV):
        interface.backward_config("bfloat16", 128, True, 1)


def _dq_to_dk(sequence: list[str]) -> list[str]:
    """The instructions between the dQ GEMM's last HGMMA (both operands transposed from shared
    memory) and the dK GEMM's first (A from registers, N = 128) in the main loop."""
    dq_last = max(i for i, t in enumerate(sequence) if "HGMMA" in t and "tnspA.tnspB" in t)
    dk_first = next(i for i, t in enumerate(sequence)
                    if i > dq_last and "HGMMA.64x128x16" in t)
    return sequence[dq_last + 1:dk_first]


def test_dk_after_dv_waits_between_the_dq_and_dk_gemms():
    """SASS (d128 full attention, 64-row tiles): the same 32 HGMMA; with the option a wgmma wait sits between
    dQ's last HGMMA and dK's first (the dV group), without it dK follows dQ with no wait."""
    from sass_harness import sass_loop_mix

    pytest.importorskip("cutlass")
    runs = {}
    for value in ("0", "1"):
        loops, _ = sass_loop_mix("bwd", "--head-dim", "128",
                                 **{bwd.DK_AFTER_DV_ENV: value, bwd.TILE_M_ENV: "64"})
        assert len(loops) == 1, loops
        runs[value] = loops[0]
    assert runs["0"]["histogram"]["HGMMA"] == runs["1"]["histogram"]["HGMMA"] == 32
    assert not [t for t in _dq_to_dk(runs["0"]["sequence"]) if "WARPGROUP.DEPBAR" in t]
    assert [t for t in _dq_to_dk(runs["1"]["sequence"]) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in t]
