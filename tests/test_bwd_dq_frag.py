"""The dQ staging tile in the accumulator's fragment order (BwdConfig.dq_frag), on the CPU: the
layout is a bijection onto the tile, every consumer thread's four values of a (row, 16-column
group) are one aligned 16-byte chunk (what lets it store with STS.128), the postprocess's
chunk -> column-pair mapping is the layout's inverse, and the config rules. Built in session 31,
not yet run on a GPU (off by default)."""
from __future__ import annotations

import dataclasses

import pytest

import cutlass
import cutlass.cute as cute

from paddle_flashmask.ops.cute import bwd_rules
from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
from paddle_flashmask.ops.cute import interface
from paddle_flashmask.ops.cute.bwd_layout import dq_stage_layout
from paddle_flashmask.ops.cute.flash_bwd_prepost import frag_pair_index

ROWS, D = 128, 64
_OFFSETS: dict = {}
_CHUNKS: dict = {}


def _frag_config(monkeypatch):
    monkeypatch.setenv(bwd_rules.DQ_FRAG_ENV, "1")
    monkeypatch.delenv(bwd_rules.TILE_M_ENV, raising=False)
    cfg = interface.backward_config("bfloat16", D, False, None)
    assert cfg.dq_frag and cfg.tile_m == ROWS
    return cfg


@cute.jit
def _probe_layout():
    layout = dq_stage_layout(ROWS, D, True, frag=True)
    for row in cutlass.range_constexpr(ROWS):
        for col in cutlass.range_constexpr(D):
            _OFFSETS[(row, col)] = layout((row, col))


def test_layout_is_a_bijection_and_the_postprocess_inverts_it():
    _OFFSETS.clear()
    cute.compile(_probe_layout)
    offsets = {key: int(v) for key, v in _OFFSETS.items()}
    assert sorted(offsets.values()) == list(range(ROWS * D))
    place = {v: key for key, v in offsets.items()}
    chunks_per_row = D // 4
    for row in range(ROWS):
        for stored in range(chunks_per_row):  # the postprocess: chunk ^= row % 8, then pairs
            chunk = stored ^ (row % 8)
            for half in range(2):
                for e in range(2):
                    col = 2 * frag_pair_index(chunk, half) + e
                    assert place[row * D + 4 * stored + 2 * half + e] == (row, col)


def test_each_thread_stores_whole_chunks(monkeypatch):
    kernel = bwd.FlashMaskBwdSm90(_frag_config(monkeypatch))
    _CHUNKS.clear()

    @cute.jit
    def probe():
        tiled_dq = kernel._mmas()[3]
        layout = dq_stage_layout(ROWS, D, True, frag=True)
        order = cute.make_layout((2, 2, 2, D // 16), stride=(1, 4, 2, 8))
        coords = cute.make_identity_tensor((ROWS, D))
        for t in cutlass.range_constexpr(256):
            part = cute.composition(tiled_dq.get_slice(t).partition_C(coords), order)
            _CHUNKS[t] = [layout(part[i]) for i in range(cute.size(part))]

    cute.compile(probe)
    seen = set()
    for t, offs in _CHUNKS.items():
        offs = [int(o) for o in offs]
        assert len(offs) == 32, (t, len(offs))
        for g in range(0, 32, 4):  # (e, h) fastest in the re-viewed order: one 16-byte chunk
            quad = offs[g:g + 4]
            assert quad[0] % 4 == 0 and quad == list(range(quad[0], quad[0] + 4)), (t, g, quad)
        seen.update(offs)
    assert seen == set(range(ROWS * D))  # the 256 threads cover the tile once


def test_config_rules(monkeypatch):
    monkeypatch.delenv(bwd_rules.DQ_FRAG_ENV, raising=False)
    monkeypatch.delenv(bwd_rules.TILE_M_ENV, raising=False)
    cfg = interface.backward_config("bfloat16", D, False, None)
    assert cfg.tile_m == ROWS and not cfg.dq_frag  # off by default (not yet GPU-run)
    assert cfg.prepost == dataclasses.replace(cfg, dq_frag=False).prepost
    frag = _frag_config(monkeypatch)
    assert frag.prepost.dq_frag and frag.prepost != cfg.prepost
    monkeypatch.setenv(bwd_rules.TILE_M_ENV, "64")  # 64-row tiles: does not apply
    assert not interface.backward_config("bfloat16", D, False, None).dq_frag
    with pytest.raises(ValueError, match="dq_frag: expected tile_m=128"):
        dataclasses.replace(interface.backward_config("bfloat16", D, False, None), dq_frag=True)
    monkeypatch.setenv(bwd_rules.DQ_FRAG_ENV, "on")
    with pytest.raises(ValueError, match=bwd_rules.DQ_FRAG_ENV):
        interface.backward_config("bfloat16", D, False, None)
