"""BwdConfig.interior_dkv on the CPU: the dK/dV epilogue's second store path, without row bounds,
for key tiles inside the sequence (sm_90a SASS, no GPU; its H200 oracle and A/B:
scripts/gpu_session.sh call168)."""
from __future__ import annotations

import textwrap

import pytest

from paddle_flashmask.ops.cute import bwd_rules

_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, "scripts")
    import sass_loop_mix
    from paddle_flashmask.ops.cute.compile_check import analyze_cubin, find_nvdisasm

    cubin = sass_loop_mix.compile_ours("bwd", 128, False, 2, False, False)
    (kernel,) = analyze_cubin(cubin, find_nvdisasm()).values()
    print("JSON" + json.dumps(kernel["sass"]))
""")


def test_interior_dkv_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd_rules.INTERIOR_DKV_ENV, raising=False)
    assert not interface.backward_config("bfloat16", 128, False, 2).interior_dkv
    monkeypatch.setenv(bwd_rules.INTERIOR_DKV_ENV, "1")
    for d, causal, columns, gqa, det in ((128, False, 2, False, False), (64, True, 1, False, False),
                                         (128, True, 1, True, False), (128, True, 1, True, True)):
        assert interface.backward_config("bfloat16", d, causal, columns, gqa=gqa,
                                         deterministic=det).interior_dkv, (d, gqa, det)
    monkeypatch.setenv(bwd_rules.INTERIOR_DKV_ENV, "yes")
    with pytest.raises(ValueError, match=bwd_rules.INTERIOR_DKV_ENV):
        interface.backward_config("bfloat16", 128, False, 2)


def test_interior_dkv_adds_an_unbounded_store_path():
    from sass_harness import run_sass_script

    base = run_sass_script(_SCRIPT, PADDLE_FLASHMASK_BWD_INTERIOR_DKV="0", CUTE_DSL_KEEP="cubin",
                           CUTE_DSL_DISABLE_FILE_CACHING="1", PADDLE_FLASHMASK_CACHE="0")
    interior = run_sass_script(_SCRIPT, PADDLE_FLASHMASK_BWD_INTERIOR_DKV="1",
                               CUTE_DSL_KEEP="cubin", CUTE_DSL_DISABLE_FILE_CACHING="1",
                               PADDLE_FLASHMASK_CACHE="0")
    # D = 128: 64 accumulator pairs of dK and dV per thread, one 4-byte store each, on both paths
    assert base.get("STG") == 64, base
    assert interior.get("STG") == 128, interior
    # the bounded path's per-row branch regions stay; the interior path adds none of its own
    # beyond the one branch that picks it
    assert interior.get("BSSY", 0) - base.get("BSSY", 0) <= 16, (base.get("BSSY"),
                                                                  interior.get("BSSY"))
    for op in ("HGMMA", "MUFU"):
        assert interior.get(op) == base.get(op), op
