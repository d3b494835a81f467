"""BwdConfig.interior_dkv on the CPU: the dK/dV epilogue's second store path, without row bounds,
for key tiles inside the sequence (sm_90a SASS, no GPU; its H200 oracle and A/B:
scripts/gpu_session.sh call168)."""
from __future__ import annotations

import textwrap

import pytest

from paddle_flashmask.ops.cute import bwd_rules

_SCRIPT = textwrap.dedent("""
    import json, re, sys
    sys.path.insert(0, "scripts")
    import sass_loop_mix
    from collections import Counter

    cubin = sass_loop_mix.compile_ours("bwd", 128, False, 2, False, False)
    from paddle_flashmask.ops.cute.compile_check import disassemble, find_nvdisasm
    ops = Counter()
    for line in disassemble(cubin, find_nvdisasm()).splitlines():
        m = re.match(r"^\\s*/\\*[0-9a-f]{4,}\\*/\\s+(?:@!?U?P[T0-9]+\\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops[m.group(1)] += 1
    print("JSON" + json.dumps(ops))
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
    assert base.get("STG.E") == 64, base
    assert interior.get("STG.E") == 128, interior
    # the bounded path's per-row branch regions stay; the interior path adds none of its own
    # beyond the one branch that picks it
    assert interior.get("BSSY", 0) - base.get("BSSY", 0) <= 16, (base.get("BSSY"),
                                                                  interior.get("BSSY"))
    for op in ("HGMMA.64x128x16.F32.BF16", "MUFU.EX2"):
        assert interior.get(op) == base.get(op), op
