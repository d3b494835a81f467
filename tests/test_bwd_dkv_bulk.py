"""Deterministic GQA dK/dV summed by the dQ writer's bulk ops (BwdConfig.dkv_bulk, env
``PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN=bulk``), on the CPU: the config rule and its fallback, the
sums' workspace, the layout the consumers stage a key tile in (the same swizzled block the
postprocess reads back), and the host API's hand-over. Numbers: tests/gpu/bwd_check.py with the
env set, on the H200."""
from __future__ import annotations

import dataclasses

import pytest

import cutlass
import cutlass.cute as cute

from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd, interface


def config(head_dim=128, causal=True, columns=1, gqa=True, deterministic=True):
    return interface.backward_config("bfloat16", head_dim, causal, columns, gqa=gqa,
                                     deterministic=deterministic)


def test_switch_applies_to_deterministic_gqa_only(monkeypatch):
    monkeypatch.delenv(bwd.DET_DKV_CHAIN_ENV, raising=False)
    assert not config().dkv_bulk  # off by default
    monkeypatch.setenv(bwd.DET_DKV_CHAIN_ENV, "bulk")
    cfg = config()
    assert cfg.dkv_bulk and cfg.dkv_red and cfg.dkv_chain and not cfg.dkv_partials
    assert not config(gqa=False).dkv_bulk  # MHA: nothing to sum
    assert not config(deterministic=False).dkv_bulk
    for causal, columns in ((False, 2), (True, None), (True, 2)):
        assert config(causal=causal, columns=columns).dkv_bulk
    assert config(head_dim=64).dkv_bulk and config(head_dim=256).dkv_bulk


def test_falls_back_to_the_partials_where_it_does_not_fit(monkeypatch):
    """Head dims 96 and 192 have no swizzled block (not powers of two): the host keeps the
    per-query-head partials there, not the slower scalar reduce-adds of dkv_red."""
    monkeypatch.setenv(bwd.DET_DKV_CHAIN_ENV, "bulk")
    for d in (96, 192):
        cfg = config(head_dim=d)
        assert not cfg.dkv_bulk_fits
        assert not cfg.dkv_chain and cfg.dkv_partials
    with pytest.raises(ValueError, match="dkv_bulk"):
        dataclasses.replace(cfg, dkv_chain=True, dkv_red=True, dkv_bulk=True)
    with pytest.raises(ValueError, match="dkv_bulk: expected dkv_red=True"):
        dataclasses.replace(config(), dkv_chain=False, dkv_red=False, dkv_bulk=True)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_staging_region_holds_a_tile(monkeypatch, head_dim):
    monkeypatch.setenv(bwd.DET_DKV_CHAIN_ENV, "bulk")
    cfg = config(head_dim=head_dim)
    assert cfg.dkv_tile_bytes == cfg.tile_n * head_dim * 4
    assert cfg.dkv_tile_bytes <= cfg.dkv_region_bytes


def test_workspace_and_postprocess(monkeypatch):
    monkeypatch.setenv(bwd.DET_DKV_CHAIN_ENV, "bulk")
    cfg = config()
    shapes = bwd.workspace_shapes(cfg, 2, 1000, 900, 8, 2)
    padded = -(-900 // cfg.tile_n) * cfg.tile_n  # whole key tiles: one bulk op each
    assert shapes["dk_sum"] == ((2, 2, padded, 128), "float32")
    assert shapes["dv_sum"] == ((2, 2, padded, 128), "float32")
    assert shapes["dkv_flags"] == ((2, 2, padded // cfg.tile_n), "int32")
    assert "dk_part" not in shapes
    post = cfg.prepost
    assert post.dkv_sums and post.dkv_tiles and post.tile_n == cfg.tile_n
    assert not post.gqa and post.has_post


_OFFSETS: dict = {}


@cute.jit
def _probe(rows: cutlass.Constexpr[int], d: cutlass.Constexpr[int]):
    layout = bwd.dq_stage_layout(rows, d, True)
    for row in cutlass.range_constexpr(rows):
        for chunk in cutlass.range_constexpr(d // 4):
            _OFFSETS[(rows, d, row, chunk)] = layout((row, 4 * chunk))


@pytest.mark.parametrize("rows, d", [(128, 64), (128, 128), (64, 256)])
def test_staged_tile_is_the_block_the_postprocess_reads(rows, d):
    """A key tile's staged dK / dV (``dq_stage_layout(tile_n, D)``) goes to the sums as one
    contiguous block; the postprocess finds chunk c of row j at ``c ^ (j % 8)`` of row j (the
    tile starts on a multiple of 8 rows, so the row within the tile and in the sums agree)."""
    cute.compile(_probe, rows, d)
    for row in range(rows):
        for chunk in range(d // 4):
            offset = int(_OFFSETS[(rows, d, row, chunk)])
            assert offset == row * d + 4 * (chunk ^ (row % 8))


def test_host_api_hands_the_tiled_sums_to_the_postprocess(monkeypatch):
    pytest.importorskip("torch")
    from host_api_harness import check_group_sums_handed_over, deterministic_gqa_backward

    api = deterministic_gqa_backward(monkeypatch, bwd.DET_DKV_CHAIN_ENV, "bulk")
    # [B, Hk, Sk_pad, D]: 300 keys padded to 3 tiles of 128
    check_group_sums_handed_over(api, (1, 2, 384, 128))
