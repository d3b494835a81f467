"""The dQ staging tile in the accumulator's fragment order (BwdConfig.dq_frag), on the CPU: the
layout is a bijection onto the tile, every consumer thread's four values of a (row, 16-column
group) are one aligned 16-byte chunk (what lets it store with STS.128), the postprocess's
chunk -> column-pair mapping is the layout's inverse, and the config rules. Two forms: D = 64
with 128-row tiles (one swizzled block) and D = 128 with 64-row tiles (dq_per_wg's two blocks).
The GPU oracle (tests/gpu/bwd_check.py) checks the numbers."""
from __future__ import annotations

import dataclasses

import pytest

import cutlass
import cutlass.cute as cute

from paddle_flashmask.ops.cute import bwd_rules
from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
from paddle_flashmask.ops.cute import interface
from paddle_flashmask.ops.cute.bwd_layout import dq_frag_order, dq_stage_layout
from paddle_flashmask.ops.cute.flash_bwd_prepost import ROWS_PER_CTA, frag_pair_index

ROWS, D = 128, 64
FORMS = [(128, 64, False), (64, 128, True)]  # (rows, head dim, dq_per_wg): the host's forms
_OFFSETS: dict = {}
_CHUNKS: dict = {}


def _frag_config(monkeypatch, d: int = D):
    monkeypatch.setenv(bwd_rules.DQ_FRAG_ENV, "1")
    # the host's height at D = 64 (128 rows); at D = 128 the 64-row tile (full attention's
    # default is 80 rows since session 33, whose transposed dQ has no fragment-order staging)
    if d == 64:
        monkeypatch.delenv(bwd_rules.TILE_M_ENV, raising=False)
    else:
        monkeypatch.setenv(bwd_rules.TILE_M_ENV, "64")
    cfg = interface.backward_config("bfloat16", d, False, None)
    assert cfg.dq_frag
    return cfg


def _stored_column(row: int, stored: int, d: int, per_wg: bool) -> tuple:
    """The postprocess's reading of stored chunk ``stored`` of dq_accum row ``row`` (its
    per_wg / swizzle un-mapping, then frag_pair_index): the 4-float chunk's first column pair
    and the chunk index within the row, as flash_bwd_prepost computes them."""
    chunks_per_row = d // 4
    if per_wg:  # the flat chunk index of the blocked tile -> (row, chunk in the row)
        block_chunks = chunks_per_row // 2
        within = stored % (ROWS_PER_CTA * block_chunks)
        r = within // block_chunks
        col = (stored // (ROWS_PER_CTA * block_chunks)) * block_chunks + (
            (within % block_chunks) ^ (r % 8))
        return r, col
    return row, stored ^ (row % 8)


@pytest.mark.parametrize("rows,d,per_wg", FORMS)
def test_layout_is_a_bijection_and_the_postprocess_inverts_it(rows, d, per_wg):
    _OFFSETS.clear()

    @cute.jit
    def probe():
        layout = dq_stage_layout(rows, d, True, per_wg=per_wg, frag=True)
        for row in cutlass.range_constexpr(rows):
            for col in cutlass.range_constexpr(d):
                _OFFSETS[(row, col)] = layout((row, col))

    cute.compile(probe)
    offsets = {key: int(v) for key, v in _OFFSETS.items()}
    assert sorted(offsets.values()) == list(range(rows * d))
    place = {v: key for key, v in offsets.items()}
    for flat in range(rows * d // 4):  # every stored chunk, as the postprocess reads it
        row, chunk = _stored_column(flat // (d // 4), flat if per_wg else flat % (d // 4), d,
                                    per_wg)
        for half in range(2):
            for e in range(2):
                col = 2 * frag_pair_index(chunk, half) + e
                assert place[4 * flat + 2 * half + e] == (row, col), (flat, half, e)


@pytest.mark.parametrize("rows,d,per_wg", FORMS)
def test_each_thread_stores_whole_chunks(monkeypatch, rows, d, per_wg):
    cfg = _frag_config(monkeypatch, d)
    assert (cfg.tile_m, cfg.dq_per_wg) == (rows, per_wg)
    kernel = bwd.FlashMaskBwdSm90(cfg)
    _CHUNKS.clear()

    @cute.jit
    def probe():
        tiled_dq = kernel._mmas()[3]
        layout = dq_stage_layout(rows, d, True, per_wg=per_wg, frag=True)
        coords = cute.make_identity_tensor((rows, d))
        for t in cutlass.range_constexpr(256):
            part = tiled_dq.get_slice(t).partition_C(coords)
            part = cute.composition(part, dq_frag_order(cute.size(part)))
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
    assert seen == set(range(rows * d))  # the 256 threads cover the tile once


def test_config_rules(monkeypatch):
    monkeypatch.delenv(bwd_rules.DQ_FRAG_ENV, raising=False)
    monkeypatch.delenv(bwd_rules.TILE_M_ENV, raising=False)
    cfg = interface.backward_config("bfloat16", D, False, None)
    assert cfg.tile_m == ROWS and not cfg.dq_frag  # off by default
    assert not interface.backward_config("bfloat16", 128, False, None).dq_frag
    assert cfg.prepost == dataclasses.replace(cfg, dq_frag=False).prepost
    frag = _frag_config(monkeypatch)
    assert frag.prepost.dq_frag and frag.prepost != cfg.prepost
    # where it does not apply: the padded dQ rows (D = 128 documents on 64-row tiles), 80-row
    # tiles (dQ transposed); forced there, an error naming the conditions
    monkeypatch.setenv(bwd_rules.TILE_M_ENV, "64")
    padded = interface.backward_config("bfloat16", 128, False, 2)
    assert not padded.dq_swizzle and not padded.dq_frag
    with pytest.raises(ValueError, match="dq_frag: expected dq_swizzle=True"):
        dataclasses.replace(padded, dq_frag=True)
    monkeypatch.setenv(bwd_rules.TILE_M_ENV, "80")
    tall80 = interface.backward_config("bfloat16", 128, False, None)
    assert tall80.tile_m == 80 and not tall80.dq_frag
    monkeypatch.setenv(bwd_rules.DQ_FRAG_ENV, "on")
    with pytest.raises(ValueError, match=bwd_rules.DQ_FRAG_ENV):
        interface.backward_config("bfloat16", D, False, None)
