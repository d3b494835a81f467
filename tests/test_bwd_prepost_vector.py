"""CPU tests of the backward pre/post kernels' memory access widths (sm_90a SASS, no GPU).

The pre/post kernels are bandwidth bound: O/dO loads, dq_accum zeroing and reading, dq / dk / dv
stores must be vector accesses (``LDG.E.128`` / ``STG.E.128`` / ``STG.E.64``), never per-element
16-bit ones. Correctness on the GPU is ``tests/gpu/bwd_check.py``.
"""
from __future__ import annotations

import json
import textwrap

import pytest


# (dtype, D, Dv, gqa, sink, deterministic)
CASES = [("bfloat16", 128, 128, False, False, False), ("bfloat16", 64, 64, False, True, True),
         ("float16", 96, 96, True, False, False), ("bfloat16", 192, 128, True, True, False),
         ("float16", 256, 256, False, False, True)]

_SCRIPT = textwrap.dedent("""
    import json, re, subprocess, sys, tempfile
    from collections import Counter
    from pathlib import Path
    from paddle_flashmask.ops.cute.compile_check import find_nvdisasm
    from paddle_flashmask.ops.cute.flash_bwd_prepost import (PrePostConfig, compile_postprocess,
                                                             compile_preprocess)

    def widths(compiled):
        cubin = compiled.__cubin__
        if isinstance(cubin, str):
            cubin = Path(cubin).read_bytes()
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            text = subprocess.run([find_nvdisasm(), "-c", f.name], check=True,
                                  capture_output=True, text=True).stdout
        out, cur = {}, None
        for line in text.splitlines():
            m = re.match(r"^\\s*\\.text\\.(\\S+):", line)
            if m:
                name = m.group(1)
                kind = next(k for k in ("dq_kernel", "dkv_kernel", "dsink_kernel", "kernel")
                            if k in name)
                cur = out.setdefault(kind, Counter())
                continue
            m = re.match(r"^\\s*/\\*[0-9a-f]{4,}\\*/\\s+(?:@!?U?P[T0-9]+\\s+)?([A-Z][A-Z0-9_.]*)", line)
            if cur is not None and m and m.group(1).split(".")[0] in ("LDG", "STG", "I2F", "F2I"):
                cur[m.group(1)] += 1
        return out

    res = {}
    for case in json.loads(sys.argv[1]):
        cfg = PrePostConfig(*case)
        res["|".join(map(str, case))] = {"pre": widths(compile_preprocess(cfg)),
                           "post": widths(compile_postprocess(cfg))}
    print("JSON" + json.dumps(res))
""")


@pytest.fixture(scope="module")
def sass():
    from sass_harness import run_sass_script

    return run_sass_script(_SCRIPT, json.dumps(CASES), CUTE_DSL_KEEP="cubin",
                           CUTE_DSL_DISABLE_FILE_CACHING="1")


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-d{c[1]}-dv{c[2]}-g{int(c[3])}"
                                                      f"s{int(c[4])}d{int(c[5])}")
def test_prepost_accesses_are_vectors(sass, case):
    _, d, dv, gqa, _, _ = case
    got = sass["|".join(map(str, case))]
    pre, post = got["pre"]["kernel"], got["post"]
    # per thread: Dv/32 chunks of O and of dO, D/16 zeroing chunks of the dq_accum block
    assert pre.get("LDG.E.128") == 2 * dv // 32, pre
    assert pre.get("STG.E.128") == d // 16, pre
    # the dq block is read in D/16 16-byte chunks per thread, each stored as 4 x 16-bit = 8 bytes
    dq = post["dq_kernel"]
    assert dq.get("LDG.E.128") == d // 16 and dq.get("STG.E.64") == d // 16, dq
    kernels = [pre, dq] + ([post["dkv_kernel"]] if gqa else [])
    for k in kernels:
        assert not any(op.endswith((".U16", ".S16")) for op in k), k  # no per-element 2-byte access
    # no run-time integer division (the I2F.RP / F2I reciprocal sequence) in the pre/dq kernels
    for k in (pre, dq):
        assert not any(op.startswith(("I2F", "F2I")) for op in k), k
    if gqa:
        dkv = post["dkv_kernel"]
        # the group's members summed in pairs (both loaded, then added) plus an odd last one:
        # three copies of the per-member 16-byte loads, one of the 8-byte stores
        assert dkv.get("LDG.E.128") == 3 * (d + dv) // 16, dkv
        assert dkv.get("STG.E.64") == (d + dv) // 16, dkv


def test_thread_mapping_tiles_every_head_dim():
    """The static per-thread chunk counts divide exactly for every supported head dim."""
    pytest.importorskip("cutlass")
    from paddle_flashmask.ops.cute import flash_bwd_prepost as pp
    for d in (64, 96, 128, 192, 256):
        assert d % (pp._VEC_IN * pp._ROW_THREADS) == 0  # O/dO row split over its quad
        assert (pp.ROWS_PER_CTA * d) % (pp._VEC_ACC * pp._THREADS) == 0  # dq_accum block
    assert pp._ROW_THREADS * pp.ROWS_PER_CTA == pp._THREADS  # one row per quad, one pass
