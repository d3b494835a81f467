"""CPU checks of the SM90 forward kernel module (no GPU needed).

* config validation and the two invariants that hang or break the kernel on the GPU
  (setmaxnreg register split, shared-memory budget);
* a real sm_90a compile of the verified default, of the fast path and of the work-ordered
  scheduler (``FwdConfig.work_order``), with the SASS checked for
  the instructions the design relies on (HGMMA, UTMALDG), for no local-memory spills, and for an
  unserialised wgmma pipeline (ptxas falls back to one WARPGROUP.DEPBAR per HGMMA when it cannot
  keep wgmma asynchronous; the fast path's register budget is tuned so that it does not).
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("cutlass")
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _nvdisasm():
    import cutlass
    site = Path(cutlass.__file__).resolve().parents[3]
    for cand in [*glob.glob(str(site / "nvidia" / "cu*" / "bin" / "nvdisasm")),
                 "/usr/local/cuda/bin/nvdisasm"]:
        if os.path.exists(cand):
            return cand
    return None


def test_config_rejects_bad_arguments():
    with pytest.raises(ValueError, match="dtype"):
        fwd.FwdConfig("float32", 128, 128, True, None)
    with pytest.raises(NotImplementedError, match="head dims"):
        fwd.FwdConfig("bf16", 160, 160, True, None)
    with pytest.raises(ValueError, match="C must be 1 or 2"):
        fwd.FwdConfig("bf16", 128, 128, True, 4)
    with pytest.raises(ValueError, match="C must be 2 or 4"):
        fwd.FwdConfig("bf16", 128, 128, False, 1)
    with pytest.raises(ValueError, match="tile_n"):
        fwd.FwdConfig("bf16", 128, 128, False, None, tile_n=120)
    with pytest.raises(ValueError, match="pingpong"):
        fwd.FwdConfig("bf16", 128, 128, False, None, pingpong=True)


def test_register_split_must_fit_the_launch_allocation():
    # 32 / 240 passed ptxas but hung in setmaxnreg.inc on the H200: 128*(168-32) < 256*(240-168).
    with pytest.raises(ValueError, match="register split"):
        fwd.FwdConfig("bf16", 128, 128, True, 1, producer_regs=32, consumer_regs=240)
    fwd.FwdConfig("bf16", 128, 128, True, 1, producer_regs=24, consumer_regs=240)
    fwd.FwdConfig("bf16", 128, 128, True, 1, producer_regs=32, consumer_regs=232)


def test_shared_memory_budget():
    with pytest.raises(ValueError, match="shared memory"):
        fwd.FwdConfig("bf16", 256, 256, True, 2, tile_n=128, num_stages=2)
    for fast in (False, True):
        for d, dv in fwd.SUPPORTED_HEAD_DIMS:
            for causal, c in ((True, None), (True, 2), (False, 4)):
                cfg = fwd.default_config("bf16", d, dv, causal, c, True, fast=fast)
                assert fwd.fits_shared_memory(cfg.shared_memory_bytes())
                assert cfg.tile_n % 16 == 0


def test_d256_wide_key_tile_only_where_it_fits(monkeypatch):
    monkeypatch.setenv(fwd.D256_TILE_ENV, "64")  # the pre-session-10 shape, on request
    assert fwd.default_config("bf16", 256, 256, True, 1).tile_n == 64
    for value in ("80", None):  # asked for, and the default since session 10
        if value is None:
            monkeypatch.delenv(fwd.D256_TILE_ENV, raising=False)
        else:
            monkeypatch.setenv(fwd.D256_TILE_ENV, value)
        for causal, c, sink in ((True, None, False), (False, None, False), (True, 1, True),
                                (True, 2, True), (False, 2, False)):
            cfg = fwd.default_config("bf16", 256, 256, causal, c, sink)
            assert cfg.tile_n == 80 and fwd.fits_shared_memory(cfg.shared_memory_bytes())
    # four column values per key staged: 232,448 B + 1 KB static is over the limit
    wide = fwd.default_config("bf16", 256, 256, False, 4)
    assert wide.tile_n == 64
    assert not fwd.fits_shared_memory(wide.shared_memory_bytes(80))
    assert fwd.default_config("bf16", 128, 128, True, 1).tile_n == 128  # d256 only
    monkeypatch.setenv(fwd.D256_TILE_ENV, "96")
    with pytest.raises(ValueError, match=fwd.D256_TILE_ENV):
        fwd.default_config("bf16", 256, 256, True, 1)


_TRACED_SMEM = textwrap.dedent("""
    import dataclasses, sys
    sys.path.insert(0, {root!r})
    from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd
    for causal, c, sink, tile_n in {cases!r}:
        cfg = fwd.default_config("bf16", {d}, {d}, causal, c, sink)
        cfg = cfg if tile_n is None else dataclasses.replace(cfg, tile_n=tile_n)
        print(fwd.compile_forward(cfg).smem_bytes, cfg.shared_memory_bytes())
""")


@pytest.mark.parametrize("d,cases", [
    (256, ((False, 2, False, 80), (True, 1, True, 80))),  # the first: at the 227 KB limit
    (64, ((True, 2, True, None), (False, 4, False, None))),  # two Q stages, TMA-store O
], ids=["d256-n80", "d64"])
def test_shared_memory_estimate_is_the_traced_struct(d, cases):
    # FwdConfig sizes shared memory before tracing (the d256 128x80 choice depends on it); the
    # traced SharedStorage must match it exactly
    code = _TRACED_SMEM.format(root=str(ROOT), d=d, cases=cases)
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, CUTE_DSL_ARCH="sm_90a"),
                         check=True, timeout=600, capture_output=True, text=True).stdout
    pairs = [tuple(map(int, line.split())) for line in out.split("\n") if line.strip()]
    assert len(pairs) == len(cases)
    for traced, estimate in pairs:
        assert traced == estimate
    if d == 256:
        assert pairs[0][0] + fwd.STATIC_SMEM_BYTES == fwd.SMEM_LIMIT_BYTES


def test_default_config_is_hashable_and_fast_switch(monkeypatch):
    monkeypatch.delenv(fwd.FAST_ENV, raising=False)
    a = fwd.default_config("bf16", 128, None, True, 1)
    b = fwd.default_config("bfloat16", 128, 128, True, 1)
    assert a == b and hash(a) == hash(b)
    assert a.intra_wg_overlap and a.pingpong  # the fast path is the default
    monkeypatch.setenv(fwd.FAST_ENV, "0")
    simple = fwd.default_config("bf16", 128, None, True, 1)
    assert not simple.intra_wg_overlap and not simple.pingpong and simple != a


_COMPILE = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd
    cfg = fwd.default_config("bf16", 128, 128, True, 2, True, fast={fast},
                             work_order={work_order})
    fwd.compile_forward(cfg)
""")


def _compiled_sass(nvdisasm: str, tmp_path: Path, code: str, **env_vars: str) -> str:
    """Run ``code`` (which compiles one forward variant) in a fresh process that keeps the
    cubin, and return its SASS."""
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="cubin",
               CUTE_DSL_DUMP_DIR=str(tmp_path), **env_vars)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=600,
                   capture_output=True)
    cubins = glob.glob(str(tmp_path / "*.cubin"))
    assert cubins, "the DSL wrote no cubin"
    return subprocess.run([nvdisasm, "-c", cubins[0]], check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.parametrize("fast,work_order", [(False, False), (True, False), (False, True),
                                             (True, True)],
                         ids=["verified", "fast", "work-order", "fast-claimed-work-order"])
def test_sm90a_sass_has_tma_and_async_wgmma(tmp_path, fast, work_order):
    nvdisasm = _nvdisasm()
    if nvdisasm is None:
        pytest.skip("nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
    sass = _compiled_sass(nvdisasm, tmp_path,
                          _COMPILE.format(root=str(ROOT), fast=fast, work_order=work_order))
    hgmma = len(re.findall(r"\bHGMMA\.", sass))
    depbar = len(re.findall(r"WARPGROUP\.DEPBAR", sass))
    assert hgmma >= 16, "tensor-core wgmma (HGMMA) missing"
    assert "UTMALDG" in sass, "TMA loads (UTMALDG) missing"
    assert not re.search(r"\b(LDL|STL)\b", sass), "local-memory spills in the kernel"
    assert depbar <= 8, f"wgmma serialised by ptxas: {depbar} DEPBAR for {hgmma} HGMMA"
    if fast:
        assert "UTMASTG" in sass, "fast path: TMA store of O missing"


def test_three_consumer_warpgroups_config(monkeypatch):
    assert fwd.launch_registers(128) == 168 and fwd.launch_registers(192) == 128
    monkeypatch.setenv(fwd.D64_TILE_M_ENV, "128")  # the pre-session-10 shape, on request
    base = fwd.default_config("bf16", 64, 64, True, 2, True)
    assert (base.tile_m, base.producer_regs, base.consumer_regs) == (128, 32, 232)
    three = fwd.with_consumer_warpgroups(base, 3)
    assert (three.tile_m, three.producer_regs, three.consumer_regs) == (192, 32, 160)
    assert fwd.with_consumer_warpgroups(three, 2) == base  # the default split comes back
    # 512 threads launch with 128 registers: 232 per consumer thread cannot be handed over
    with pytest.raises(ValueError, match="register split"):
        fwd.FwdConfig("bf16", 64, 64, True, 1, tile_m=192, producer_regs=32, consumer_regs=232)
    with pytest.raises(NotImplementedError, match="tile_m"):
        fwd.FwdConfig("bf16", 64, 64, True, 1, tile_m=256)
    with pytest.raises(ValueError, match="count"):
        fwd.with_consumer_warpgroups(base, 4)
    for value in ("192", None):  # asked for, and the default since session 10
        if value is None:
            monkeypatch.delenv(fwd.D64_TILE_M_ENV, raising=False)
        else:
            monkeypatch.setenv(fwd.D64_TILE_M_ENV, value)
        for causal, c, sink in ((True, None, False), (True, 1, False), (False, 4, True)):
            cfg = fwd.default_config("bf16", 64, 64, causal, c, sink)
            assert cfg.tile_m == 192 and fwd.fits_shared_memory(cfg.shared_memory_bytes())
    assert fwd.default_config("bf16", 128, 128, True, 1).tile_m == 128  # d64 only
    monkeypatch.setenv(fwd.D64_TILE_M_ENV, "256")
    with pytest.raises(ValueError, match=fwd.D64_TILE_M_ENV):
        fwd.default_config("bf16", 64, 64, True, 1)


def test_three_consumer_warpgroups_sass(tmp_path):
    # d64, 192 x 128 over three consumer warpgroups: wgmma + TMA, no spills at 160 registers,
    # the wgmma chain not serialised, and setmaxnreg moving registers to the consumers
    nvdisasm = _nvdisasm()
    if nvdisasm is None:
        pytest.skip("nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd
        cfg = fwd.default_config("bf16", 64, 64, True, 2, True)
        assert cfg.tile_m == 192, cfg
        fwd.compile_forward(cfg)
    """)
    sass = _compiled_sass(nvdisasm, tmp_path, code, PADDLE_FLASHMASK_FWD_D64_TILE_M="192")
    hgmma = len(re.findall(r"\bHGMMA\.", sass))
    depbar = len(re.findall(r"WARPGROUP\.DEPBAR", sass))
    assert hgmma >= 12 and "UTMALDG" in sass and "UTMASTG" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass), "local-memory spills in the kernel"
    assert depbar <= 8, f"wgmma serialised by ptxas: {depbar} DEPBAR for {hgmma} HGMMA"
    assert "USETMAXREG" in sass
