"""The transposed dQ of 80-row tiles staged in thread order (BwdConfig.dq_by_thread), on the CPU:
for every consumer thread and accumulator value, the place the kernel's dq_by_thread_view
stores it, read back by the postprocess's by_thread_chunk_origin, is the (query row, D column)
the dQ^T GEMM's C partition gives that value (evaluated by the DSL at trace time); each stored
quad is one aligned 16-byte chunk, a warp's quads are contiguous, the tile is covered once; and
the config rules. The GPU oracle (tests/gpu/bwd_check.py) checks the numbers."""
from __future__ import annotations

import dataclasses

import pytest

import cutlass
import cutlass.cute as cute

from paddle_flashmask.ops.cute import bwd_rules
from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
from paddle_flashmask.ops.cute import interface
from paddle_flashmask.ops.cute.bwd_layout import dq_by_thread_start, dq_by_thread_view
from paddle_flashmask.ops.cute.flash_bwd_prepost import (GATHER_VEC, by_thread_chunk_origin,
                                                         gather_origin, gather_send_value,
                                                         gather_slot, gather_source_lane)

ROWS, D = 80, 128
_PLACES: dict = {}


def _config(monkeypatch, two_stages: bool = True):
    monkeypatch.setenv(bwd_rules.TILE_M_ENV, str(ROWS))
    monkeypatch.setenv(bwd_rules.TALL_TWO_PDS_ENV, "1" if two_stages else "0")
    monkeypatch.setenv(bwd_rules.DQ_BY_THREAD_ENV, "1")
    return interface.backward_config("bfloat16", D, False, None)


def test_every_value_reaches_its_row_and_column(monkeypatch):
    cfg = _config(monkeypatch)
    assert cfg.tile_m == ROWS and cfg.dq_transposed and cfg.dq_by_thread
    assert cfg.prepost.dq_by_thread_rows == ROWS
    kernel = bwd.FlashMaskBwdSm90(cfg)
    _PLACES.clear()

    @cute.jit
    def probe():
        tiled_dq = kernel._mmas()[3]
        coords = cute.make_identity_tensor(kernel._dq_tile_shape())  # (D, query rows)
        base = cute.make_ptr(cutlass.Float32, 0, cute.AddressSpace.smem, assumed_align=16)
        for t in cutlass.range_constexpr(256):
            part = tiled_dq.get_slice(t).partition_C(coords)
            values = cute.size(part)
            view = dq_by_thread_view(base, t, values)
            for v in cutlass.range_constexpr(values):
                _PLACES[(t, v)] = (part[v], view.layout((v % 4, v // 4)))

    cute.compile(probe)
    stored = {}
    for (t, v), (coord, offset) in _PLACES.items():
        d_col, q_row = int(coord[0]), int(coord[1])
        offset = int(offset) + dq_by_thread_start(t, ROWS * D // 256)
        assert offset % 4 == v % 4, (t, v)  # the quad's values in order inside one chunk
        q0, col0 = by_thread_chunk_origin(offset // 4, ROWS, D)
        # the postprocess: value e + 2 * (row half) of a chunk at (+e rows, +8 * half columns)
        assert (q0 + v % 2, col0 + 8 * ((v % 4) // 2)) == (q_row, d_col), (t, v)
        stored[offset] = (t, v)
    assert sorted(stored) == list(range(ROWS * D))  # every float of the tile once
    for t in range(0, 256, 32):  # a warp's k-th quads: 32 consecutive 16-byte chunks
        for k in range(10):
            firsts = sorted(off for off, (tt, v) in stored.items()
                            if t <= tt < t + 32 and v == 4 * k)
            assert firsts == list(range(firsts[0], firsts[0] + 128, 4)), (t, k)


def test_config_rules(monkeypatch):
    cfg = _config(monkeypatch)
    # each warpgroup's block handed to the writer on its own (FA4's two dQ buffers)
    assert cfg.dq_by_thread and cfg.dq_per_wg and cfg.tall_tile_applies
    with pytest.raises(ValueError, match="tile_m=80: expected"):  # per-warpgroup blocks alone
        dataclasses.replace(cfg, dq_by_thread=False)
    # FA4's order on top: dK after dV, then the dO stage released as soon as dV completed
    assert not cfg.do_release_after_dv
    monkeypatch.setenv(bwd_rules.DK_AFTER_DV_ENV, "1")
    monkeypatch.setenv(bwd_rules.DO_RELEASE_AFTER_DV_ENV, "1")
    fa4_form = interface.backward_config("bfloat16", D, False, None)
    assert fa4_form.dk_after_dv and fa4_form.do_release_after_dv
    with pytest.raises(ValueError, match="do_release_after_dv: expected dk_after_dv=True"):
        dataclasses.replace(fa4_form, dk_after_dv=False)
    monkeypatch.delenv(bwd_rules.DK_AFTER_DV_ENV)  # without dK after dV: no early release
    assert not interface.backward_config("bfloat16", D, False, None).do_release_after_dv
    monkeypatch.delenv(bwd_rules.DO_RELEASE_AFTER_DV_ENV)
    assert not _config(monkeypatch, two_stages=False).dq_by_thread  # padded rows: no
    monkeypatch.setenv(bwd_rules.DQ_BY_THREAD_ENV, "0")  # turned off when asked
    assert not interface.backward_config("bfloat16", D, False, None).dq_by_thread
    for name in (bwd_rules.DQ_BY_THREAD_ENV, bwd_rules.TILE_M_ENV, bwd_rules.TALL_TWO_PDS_ENV):
        monkeypatch.delenv(name)
    # the default on full attention at D = 128 (session 33): FA4's 80-row form with it
    default = interface.backward_config("bfloat16", D, False, None)
    assert default.tile_m == ROWS and default.dq_by_thread and default.dq_per_wg
    assert default.pds_stages == 2 and default.stage_stats
    assert not (default.ds_query_major or default.dk_after_dv or default.do_release_after_dv)
    assert default.dq_first_store  # its first writer stores (session 35)
    # documents / prefix-LM (two columns) take the same form since session 35; causal masks
    # stay on 64 rows
    documents = interface.backward_config("bfloat16", D, False, 2)
    assert documents.tile_m == ROWS and documents.dq_by_thread and documents.dq_first_store
    causal = interface.backward_config("bfloat16", D, True, 2)
    assert causal.tile_m == 64 and not causal.dq_by_thread
    with pytest.raises(ValueError, match="dq_by_thread: expected an 80-row tile"):
        dataclasses.replace(causal, dq_by_thread=True)
    _config(monkeypatch)
    monkeypatch.setenv(bwd_rules.DQ_BY_THREAD_ENV, "yes")  # checked, not ignored
    with pytest.raises(ValueError, match=bwd_rules.DQ_BY_THREAD_ENV):
        interface.backward_config("bfloat16", D, False, None)


@pytest.mark.parametrize("rows, d", [(80, 128)])
def test_post_gather_regroups_each_warp_into_row_vectors(rows, d):
    """BwdConfig.post_gather: in each of the four shuffle rounds every lane is read by exactly
    one lane, and after them lane L holds GATHER_VEC adjacent columns of one row, each value the
    one by_thread_chunk_origin placed there; the warp's 128 values land once each."""
    tile_chunks = rows * d // 4
    for base in range(0, tile_chunks, 32):  # a warp's 32 consecutive chunks of one tile
        held = {}  # lane -> its four values' (row, column), value v: (+v % 2, +8 (v // 2))
        for lane in range(32):
            q0, col = by_thread_chunk_origin(base + lane, rows, d)
            held[lane] = [(q0 + v % 2, col + 8 * (v // 2)) for v in range(4)]
        gathered = {lane: [None] * GATHER_VEC for lane in range(32)}
        for rnd in range(4):
            sources = [gather_source_lane(lane, rnd) for lane in range(32)]
            assert sorted(sources) == list(range(32)), (base, rnd)
            for lane, src in enumerate(sources):
                slot = gather_slot(lane, rnd)
                assert gathered[lane][slot] is None
                gathered[lane][slot] = held[src][gather_send_value(src, rnd)]
        seen = set()
        for lane in range(32):
            row_off, col_off = gather_origin(lane)
            q0, col = held[lane][0]
            want = [(q0 + row_off, col + col_off + j) for j in range(GATHER_VEC)]
            assert gathered[lane] == want, (base, lane)
            assert (col + col_off) % GATHER_VEC == 0  # an aligned 8-byte store
            seen.update(want)
        assert seen == {p for lane in range(32) for p in held[lane]}, base


def test_post_gather_config(monkeypatch):
    monkeypatch.delenv(bwd_rules.POST_GATHER_ENV, raising=False)
    default = interface.backward_config("bfloat16", 128, False, 2)
    assert default.dq_by_thread and not default.post_gather  # env only
    monkeypatch.setenv(bwd_rules.POST_GATHER_ENV, "1")
    cfg = interface.backward_config("bfloat16", 128, False, 2)
    assert cfg.post_gather and cfg.prepost.by_thread_gather
    assert cfg.prepost != default.prepost
    # where dQ^T is not staged by thread it does not apply
    assert not interface.backward_config("bfloat16", 128, True, 1).post_gather
    with pytest.raises(ValueError, match="post_gather: expected dq_by_thread=True"):
        dataclasses.replace(interface.backward_config("bfloat16", 128, True, 1),
                            post_gather=True)
    monkeypatch.setenv(bwd_rules.POST_GATHER_ENV, "yes")
    with pytest.raises(ValueError, match=bwd_rules.POST_GATHER_ENV):
        interface.backward_config("bfloat16", 128, False, 2)
