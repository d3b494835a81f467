"""dS stored [queries x keys] (BwdConfig.ds_query_major), on the CPU: the config rules, and the
shared-memory layout the DSL builds for it -- keys contiguous with the 128-byte swizzle at 80
query rows, where the [keys x queries] default gets only the 32-byte one (the reason it was
built). The GPU oracle (tests/gpu/bwd_check.py) checks the numbers."""
from __future__ import annotations

import dataclasses

import pytest

import cutlass.cute as cute

from paddle_flashmask.ops.cute import bwd_rules
from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
from paddle_flashmask.ops.cute import interface

_LAYOUTS: dict = {}


def _sds_layouts(cfg) -> dict:
    """ds_query_major -> (the dS smem layout's shape, its swizzle's bit count B of S<B, M, S>)."""
    _LAYOUTS.clear()
    for query_major in (False, True):
        kernel = bwd.FlashMaskBwdSm90(dataclasses.replace(cfg, ds_query_major=query_major))

        @cute.jit
        def probe():
            kernel._layouts()
            layout = kernel.sdS_layout
            _LAYOUTS[query_major] = (cute.product_each(layout.outer.shape),
                                     str(layout.inner))

        cute.compile(probe)
    return dict(_LAYOUTS)


def test_80_row_tiles_get_the_128_byte_swizzle(monkeypatch):
    monkeypatch.setenv(bwd_rules.TILE_M_ENV, "80")
    monkeypatch.setenv(bwd_rules.TALL_TWO_PDS_ENV, "1")
    cfg = interface.backward_config("bfloat16", 128, False, None)
    assert cfg.tile_m == 80 and cfg.pds_stages == 2
    layouts = _sds_layouts(cfg)
    (keys_first, swizzle_default), (queries_first, swizzle_qm) = layouts[False], layouts[True]
    assert tuple(int(x) for x in keys_first) == (128, 80, 2)  # [keys x queries x stage]
    assert tuple(int(x) for x in queries_first) == (80, 128, 2)  # [queries x keys x stage]
    assert swizzle_default.startswith("S<1,") and swizzle_qm.startswith("S<3,")


def test_config_rules(monkeypatch):
    monkeypatch.delenv(bwd_rules.DS_QUERY_MAJOR_ENV, raising=False)
    default = interface.backward_config("bfloat16", 128, True, None)  # 64 rows
    assert not default.ds_query_major  # off by default
    assert not interface.backward_config("bfloat16", 128, False, None).ds_query_major  # 80
    monkeypatch.setenv(bwd_rules.DS_QUERY_MAJOR_ENV, "1")
    assert interface.backward_config("bfloat16", 128, True, 1).ds_query_major
    with pytest.raises(ValueError, match="ds_query_major: expected rs_dkv=True"):
        dataclasses.replace(default, rs_dkv=False, ds_query_major=True)
    monkeypatch.setenv(bwd_rules.DS_QUERY_MAJOR_ENV, "on")
    with pytest.raises(ValueError, match=bwd_rules.DS_QUERY_MAJOR_ENV):
        interface.backward_config("bfloat16", 128, False, None)
