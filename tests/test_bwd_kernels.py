"""CPU tests of the SM90 backward kernels: configs, workspace contract, sm_90a compile + SASS.

The GPU correctness check is ``tests/gpu/bwd_check.py`` (needs an H200); here we make sure the
variants compile without a GPU and stay on the fast path (wgmma, TMA, bulk reduce-add for dQ).
"""
from __future__ import annotations

import textwrap

import pytest



def _bwd():
    pytest.importorskip("cutlass")
    from paddle_flashmask.ops.cute import flash_bwd_sm90
    return flash_bwd_sm90


def test_config_validation_names_the_argument():
    m = _bwd()
    with pytest.raises(ValueError, match="head_dim"):
        m.BwdConfig("bfloat16", 80, 80, True, None)
    with pytest.raises(ValueError, match="dtype"):
        m.BwdConfig("float32", 128, 128, True, None)
    with pytest.raises(ValueError, match="C must be"):
        m.BwdConfig("bfloat16", 128, 128, True, 4)
    with pytest.raises(ValueError, match="C must be"):
        m.BwdConfig("bfloat16", 128, 128, False, 1)
    assert m.BwdConfig("bfloat16", 128, 128, True, 1).tile_n == 128
    assert m.BwdConfig("float16", 192, 128, False, 2).tile_n == 64
    assert m.BwdConfig("bfloat16", 256, 256, False, None).tile_n == 64
    with pytest.raises(ValueError, match="qdo_stages"):
        m.BwdConfig("bfloat16", 256, 256, False, None, qdo_stages=3)
    # frozen + hashable: usable as a cache key, equal configs hash equal
    a = m.BwdConfig("bfloat16", 64, 64, False, 4, gqa=True, deterministic=True)
    b = m.BwdConfig("bfloat16", 64, 64, False, 4, gqa=True, deterministic=True)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1


def test_workspace_shapes():
    m = _bwd()
    cfg = m.BwdConfig("bfloat16", 128, 128, True, 1, gqa=True, has_sink=True, deterministic=True)
    ws = m.workspace_shapes(cfg, batch=2, seqlen_q=130, seqlen_k=77, num_heads=4, num_kv_heads=2)
    assert ws["lse2"] == ((2, 4, 192), "float32")
    assert ws["delta"] == ((2, 4, 192), "float32")
    assert ws["dq_accum"] == ((2, 4, 192, 128), "float32")
    assert ws["dk_part"] == ((2, 4, 77, 128), "float32")  # head-major
    assert ws["dv_part"] == ((2, 4, 77, 128), "float32")
    assert ws["semaphores"] == ((2, 4, 3), "int32")
    assert ws["dsink_part"] == ((2, 4, 3), "float32")
    plain = m.workspace_shapes(m.BwdConfig("float16", 64, 64, False, None), 1, 64, 64, 2, 2)
    assert set(plain) == {"lse2", "delta", "dq_accum"}


def test_device_address_accepts_every_buffer_kind():
    from paddle_flashmask.ops.cute.launch_args import device_address

    class Info:
        data_ptr = 4096

    class Buffer:
        ptr = 8192

    class TorchLike:
        def data_ptr(self):
            return 12288

    assert device_address(Info()) == 4096
    assert device_address(Buffer()) == 8192
    assert device_address(TorchLike()) == 12288


_SASS_SCRIPT = textwrap.dedent("""
    import json, sys, tempfile
    from paddle_flashmask.ops.cute import compile_check as cc
    cc._worker_env(tempfile.mkdtemp())
    from paddle_flashmask.ops.cute.flash_bwd_sm90 import BwdConfig
    out = {}
    for name, cfg in [
        ("d128_causal_C1_det", BwdConfig("bfloat16", 128, 128, True, 1, deterministic=True)),
        ("d256_bidir_C4_gqa", BwdConfig("bfloat16", 256, 256, False, 4, gqa=True)),
        ("d128_bidir_C2_rs", BwdConfig("bfloat16", 128, 128, False, 2, rs_dkv=True)),
        ("d128_causal_C1_gqa_in_cta", BwdConfig("bfloat16", 128, 128, True, 1, gqa=True,
                                                rs_dkv=True, gqa_in_cta=True)),
        ("d128_causal_C1_persistent", BwdConfig("bfloat16", 128, 128, True, 1, rs_dkv=True,
                                                row_ranges=True, persistent_ctas=132)),
        ("d256_causal_C1_one_stage", BwdConfig("bfloat16", 256, 256, True, 1, qdo_stages=1)),
        ("d256_bidir_C2_det_one_stage", BwdConfig("bfloat16", 256, 256, False, 2, deterministic=True,
                                                  qdo_stages=1)),
        ("d128_causal_C1_det_2chains", BwdConfig("bfloat16", 128, 128, True, 1, deterministic=True,
                                                 rs_dkv=True, row_ranges=True, dq_chains=2)),
    ]:
        res = cc.compile_variant(cc.Variant(name, "bwd", cfg, True))
        if "error" in res:
            out[name] = {"error": res["error"][-2000:]}
            continue
        total = {}
        for k in res["kernels"].values():
            for op, n in k.get("sass", {}).items():
                total[op] = total.get(op, 0) + n
        out[name] = total
    print("JSON" + json.dumps(out))
""")


@pytest.fixture(scope="module")
def sass():
    from sass_harness import run_sass_script

    return run_sass_script(_SASS_SCRIPT)


def test_bwd_sass_fast_path(sass):
    d128 = sass["d128_causal_C1_det"]
    assert "error" not in d128, d128
    assert d128.get("HGMMA", 0) >= 32  # 5 GEMMs per query tile on wgmma
    assert d128.get("UTMALDG", 0) > 0  # K, V, Q, dO by TMA
    assert d128.get("UBLKRED", 0) > 0  # dQ by bulk reduce-add from shared memory
    d256 = sass["d256_bidir_C4_gqa"]
    assert "error" not in d256, d256
    assert d256.get("HGMMA", 0) > 0 and d256.get("UTMALDG", 0) > 0
    assert d256.get("REDG", 0) > 0  # D=256: dQ staging does not fit, fp32 red from registers


def test_bwd_register_operand_variant(sass):
    """rs_dkv: dV/dK take P^T/dS^T from registers (opt-in variant) and stays on the fast path."""
    rs = sass["d128_bidir_C2_rs"]
    assert "error" not in rs, rs
    assert rs.get("HGMMA", 0) >= 32 and rs.get("UTMALDG", 0) > 0 and rs.get("UBLKRED", 0) > 0


def test_bwd_gqa_in_cta_variant(sass):
    """One CTA per KV head walking its query heads: still the wgmma/TMA fast path, dQ still by
    bulk reduce-add, and dK/dV stored in the input dtype (no fp32 partial stores)."""
    v = sass["d128_causal_C1_gqa_in_cta"]
    assert "error" not in v, v
    assert v.get("HGMMA", 0) > 0 and v.get("UTMALDG", 0) > 0 and v.get("UBLKRED", 0) > 0


def test_bwd_d256_one_stage_variant(sass):
    """qdo_stages=1 frees the smem for D = 256 to stage dQ: the bulk reduce-add replaces the
    per-thread fp32 atomics (also in deterministic mode), still wgmma/TMA."""
    for name in ("d256_causal_C1_one_stage", "d256_bidir_C2_det_one_stage"):
        v = sass[name]
        assert "error" not in v, v
        assert v.get("HGMMA", 0) > 0 and v.get("UTMALDG", 0) > 0, name
        assert v.get("UBLKRED", 0) > 0 and v.get("REDG", 0) == 0, (name, v)


def test_bwd_persistent_variant(sass):
    """Persistent grid: still the wgmma/TMA fast path with the dQ bulk reduce, plus the tile
    counter's atomic add."""
    v = sass["d128_causal_C1_persistent"]
    assert "error" not in v, v
    assert v.get("HGMMA", 0) > 0 and v.get("UTMALDG", 0) > 0 and v.get("UBLKRED", 0) > 0
    assert v.get("ATOMG", 0) > 0


def test_d256_stages_switch(monkeypatch):
    """D = 256 runs one Q/dO stage by default (through the host API's config too), other head dims
    two; env PADDLE_FLASHMASK_BWD_D256_STAGES=2 gives D = 256 two again; a bad value names the
    switch."""
    m = _bwd()
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(m.D256_STAGES_ENV, raising=False)
    assert interface.backward_config("bfloat16", 256, True, 1).qdo_stages == 1
    assert interface.backward_config("bfloat16", 128, True, 1).qdo_stages == 2
    monkeypatch.setenv(m.D256_STAGES_ENV, "2")
    assert interface.backward_config("bfloat16", 256, True, 1).qdo_stages == 2
    monkeypatch.setenv(m.D256_STAGES_ENV, "1")
    assert interface.backward_config("bfloat16", 256, True, 1).qdo_stages == 1
    assert interface.backward_config("bfloat16", 128, True, 1).qdo_stages == 2
    monkeypatch.setenv(m.D256_STAGES_ENV, "3")
    with pytest.raises(ValueError, match=m.D256_STAGES_ENV):
        interface.backward_config("bfloat16", 256, True, 1)


def test_bwd_det_two_chains_variant(sass):
    """Deterministic dQ in two chains: still the wgmma/TMA path, dQ through the bulk reduce-add
    (no per-thread fp32 REDG), the semaphore hand-off's acquire loads / release stores."""
    v = sass["d128_causal_C1_det_2chains"]
    assert "error" not in v, v
    assert v.get("HGMMA", 0) > 0 and v.get("UTMALDG", 0) > 0 and v.get("UBLKRED", 0) > 0
    assert v.get("REDG", 0) == 0
