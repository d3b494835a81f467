"""CPU tests of the cute backend's infrastructure: kernels compile for sm_90a here (no GPU), their
SASS is on the SM90 fast path, the JIT cache works across processes, the host API validates.

Nothing here skips on a CPU machine: the DSL compiles for sm_90a without a GPU
(``CUTE_DSL_ARCH=sm_90a``, set by tests/conftest.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, CUTE_DSL_ARCH="sm_90a",
           PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


# --------------------------------------------------------------------------------------------------
# The compile check: every representative variant compiles, fwd/bwd are on the fast path
# --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compile_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("cc") / "report.json"
    out = subprocess.run([sys.executable, "-m", "paddle_flashmask.ops.cute.compile_check",
                          "--json", str(path)], cwd=ROOT, env=ENV, capture_output=True, text=True,
                         timeout=1800)
    print(out.stdout[-20000:])
    return out, json.loads(path.read_text()) if path.exists() else None


def test_compile_check_passes(compile_report):
    out, report = compile_report
    assert report is not None, out.stderr[-5000:]
    assert out.returncode == 0, f"failures: {report['failures']}\n{out.stdout[-8000:]}"
    assert not report["failures"]


def test_compile_check_covers_every_form_and_head_dim(compile_report):
    _, report = compile_report
    labels = [r["label"] for r in report["results"]]
    for form in ("causal", "full", "causal-C1", "causal-C2", "bidir-C2", "bidir-C4"):
        assert any(l.startswith("fwd") and l.split()[3] == form for l in labels), form
        assert any(l.startswith("bwd ") and l.split()[3] == form for l in labels), form
    for d in (64, 96, 128, 192, 256):
        assert any(l.startswith("fwd") and f" d{d} " in l for l in labels), d
        assert any(l.startswith("bwd ") and f" d{d} " in l for l in labels), d
    assert any(l.startswith("bwd ") and l.endswith(" det") for l in labels)


def test_fwd_bwd_use_wgmma_and_tma(compile_report):
    """What the design relies on, read from the SASS of the final kernels (not relaxable here)."""
    _, report = compile_report
    main = [r for r in report["results"] if r["kind"] in ("fwd", "bwd")]
    assert main
    for r in main:
        sass = {}
        for kernel in r["kernels"].values():
            for op, n in kernel.get("sass", {}).items():
                sass[op] = sass.get(op, 0) + n
        assert sass.get("HGMMA", 0) > 0, r["label"]
        assert sass.get("UTMALDG", 0) > 0, r["label"]


def _main_kernels(report):
    """(variant label, kernel name, kernel record) of every forward / backward main kernel."""
    for r in report["results"]:
        if r["kind"] in ("fwd", "bwd"):
            for name, k in r["kernels"].items():
                yield r["label"], name, k


# The two measured exceptions to "no spills", both in the backward's producer warpgroup (24
# registers: the producer warp and the dQ writer); the bound keeps them from growing unnoticed:
# - the GQA head walk over a mask with columns, with the uniform-row dQ writer: a few bytes of
#   per-head state, and the kernel is still 2-3.5 % faster than the spill-free per-lane writer
#   (session 15, bench/results/README.md); the 80-row documents default (staged stats, first
#   store) spills 12 B there, its consumer loop clean, and measured 0.929x of the 64-row tile
#   (session 35, call 218);
# - the deterministic dQ writer with the first store (its store and add row loops side by side):
#   24 / 36 B at mask C = 1, and the deterministic backward measured with it is 1.07-1.12x of the
#   default on every MHA mask (session 18, call 95). The single-loop form without the spill was
#   9-20 % slower (call 96); at C >= 2 it would spill 52 / 76 B, so the class chains keep the
#   zeroed accumulator there (BwdConfig.with_class_chains).
SPILL_ALLOWED_BYTES = 40


def _spill_allowed(config: str) -> int:
    """Spill bytes allowed for a variant, from its config's repr in the report."""
    if not config.startswith("BwdConfig("):
        return 0
    if ("gqa_in_cta=True" in config and "num_columns=None" not in config
            and ("dq_uniform_rows=True" in config or "dq_per_wg=True" in config)):
        # the walk's state in the producer's 24 registers: 8-36 B, measured faster anyway
        # (uniform rows: session 15; per-warpgroup dQ blocks: session 21, call 118)
        return SPILL_ALLOWED_BYTES
    if "deterministic=True" in config and "dq_first_store=True" in config:
        return SPILL_ALLOWED_BYTES
    return 0


def test_no_register_spills_in_the_main_kernels(compile_report):
    """Issue 5/6: spills are reported, and none is allowed in the forward and backward kernels
    (ptxas' own report, and no local-memory LDL/STL in their SASS), except the measured GQA
    head walk with mask columns and uniform dQ rows, within a few bytes."""
    _, report = compile_report
    checked = 0
    for r in report["results"]:
        if r["kind"] not in ("fwd", "bwd"):
            continue
        allowed = _spill_allowed(r["config"])
        for name, k in r["kernels"].items():
            assert "spill_stores" in k, (r["label"], name, "no ptxas report")
            assert k["spill_stores"] <= allowed and k["spill_loads"] <= allowed, (r["label"], k)
            if not allowed:
                assert not k["sass"].get("LDL") and not k["sass"].get("STL"), (r["label"], name)
            checked += 1
    assert checked > 0


def test_per_warpgroup_dq_blocks_take_one_bulk_op_each(compile_report):
    """BwdConfig.dq_per_wg: the dQ writer moves each warpgroup's staged block with one bulk
    reduce (or, with the first store, one bulk copy for a tile's first writer): two of each in
    the kernel, plus the producer's two bulk copies of LSE / delta where they are staged
    (stage_stats). Every variant with the option counts, the d128 full and causal defaults among
    them."""
    _, report = compile_report
    checked = 0
    for r in report["results"]:
        if r["kind"] != "bwd" or "dq_per_wg=True" not in r["config"]:
            continue
        copies = (2 * ("dq_first_store=True" in r["config"])
                  + 2 * ("stage_stats=True" in r["config"]))
        for name, k in r["kernels"].items():
            assert k["sass"].get("UBLKRED", 0) == 2 and k["sass"].get("UBLKCP", 0) == copies, (
                r["label"], k["sass"])
            checked += 1
    assert checked >= 4


def test_register_counts_agree_with_ptxas(compile_report):
    """The ELF parser's register count equals ptxas' own report for every kernel."""
    _, report = compile_report
    checked = 0
    for r in report["results"]:
        for name, k in r.get("kernels", {}).items():
            assert k["registers"] is not None and k["registers"] > 0, (r["label"], name)
            if "ptxas_registers" in k:
                assert k["registers"] == k["ptxas_registers"], (r["label"], name)
                checked += 1
    assert checked > 0


def test_sass_parser_counts_opcodes():
    from paddle_flashmask.ops.cute.compile_check import _SASS_LINE

    samples = {
        "        /*0a50*/                   HGMMA.64x128x16.F32.BF16 gdesc[UR4], RZ, !UPT ;": "HGMMA",
        "        /*0a60*/              @!P0 UTMALDG.2D [UR8], [UR4] ;": "UTMALDG",
        "        /*0070*/               @P0 EXIT ;": "EXIT",
        "        /*0100*/                   IMAD R8, R8, 0x200, R3.reuse ;": "IMAD",
        "        /*0110*/              @UP0 BRA `(.L_x_1) ;": "BRA",
    }
    for line, opcode in samples.items():
        assert _SASS_LINE.match(line).group(1) == opcode


# --------------------------------------------------------------------------------------------------
# Tensor-type contract between compile time and call time
# --------------------------------------------------------------------------------------------------

def test_runtime_tensor_type_matches_fake_tensor():
    torch = pytest.importorskip("torch")
    import cutlass
    from cutlass._mlir import ir

    from paddle_flashmask.ops.cute.dlpack import fake_tensor, runtime_tensor

    cases = [((7,), torch.float32, cutlass.Float32, 4), ((3, 5), torch.int32, cutlass.Int32, 4),
             ((2, 1, 9, 4), torch.int32, cutlass.Int32, 4),
             ((2, 33, 3, 64), torch.bfloat16, cutlass.BFloat16, 16),
             ((1, 8, 2, 128), torch.float16, cutlass.Float16, 16)]
    with ir.Context():
        for shape, tdtype, cdtype, align in cases:
            got = str(runtime_tensor(torch.zeros(shape, dtype=tdtype), align).__get_mlir_types__()[0])
            want = str(fake_tensor(cdtype, len(shape), align).__get_mlir_types__()[0])
            # the address space differs in spelling only (generic vs gmem): the descriptor is the same
            assert got.replace("generic", "gmem") == want, (shape, got, want)


def test_device_buffer_dlpack_roundtrip():
    """DeviceBuffer's capsule is a valid DLPack tensor (checked with CPU memory and torch)."""
    torch = pytest.importorskip("torch")
    import ctypes

    import numpy as np

    from paddle_flashmask.ops.cute import dlpack

    host = np.arange(24, dtype=np.int32)
    buf = dlpack.DeviceBuffer.__new__(dlpack.DeviceBuffer)  # no CUDA here: describe host memory
    buf.shape, buf.dtype, buf.device, buf.ptr = (2, 3, 4), "int32", 0, host.ctypes.data
    buf._shape = (ctypes.c_int64 * 3)(2, 3, 4)
    buf._strides = (ctypes.c_int64 * 3)(12, 4, 1)
    buf._managed = dlpack._DLManagedTensor()
    buf._managed.dl_tensor = dlpack._DLTensor(
        ctypes.c_void_p(buf.ptr), dlpack._DLDevice(1, 0), 3, dlpack._DLDataType(0, 32, 1),
        buf._shape, buf._strides, 0)
    view = torch.from_dlpack(buf.__dlpack__())
    assert view.tolist() == host.reshape(2, 3, 4).tolist()
    buf.ptr = None  # not ours to free


# --------------------------------------------------------------------------------------------------
# JIT cache
# --------------------------------------------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import json, sys, time
    from paddle_flashmask.ops.cute import cache
    from paddle_flashmask.ops.cute.summary_kernel import SummaryConfig, compile_summary
    t0 = time.perf_counter()
    fn = cache.get_or_compile("tile_summary", SummaryConfig(int(sys.argv[1]), 2), compile_summary)
    seconds = time.perf_counter() - t0
    print(json.dumps({"stats": cache.stats(), "seconds": seconds, "type": type(fn).__name__}))
""")


def _child(tmp_path, tile_n=96, extra_env=None):
    env = dict(ENV, PADDLE_FLASHMASK_CACHE_DIR=str(tmp_path), **(extra_env or {}))
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(tile_n)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def test_disk_cache_second_process_loads(tmp_path):
    first, first_err = _result(_child(tmp_path))
    second, second_err = _result(_child(tmp_path))
    assert first["stats"] == {"memory_hits": 0, "disk_hits": 0, "compiles": 1}
    assert second["stats"] == {"memory_hits": 0, "disk_hits": 1, "compiles": 0}
    assert "paddle_flashmask: compiling tile_summary" in first_err
    assert "compiling" not in second_err
    assert second["type"] == first["type"]
    objects = list(tmp_path.glob("*.o"))
    assert len(objects) == 1 and objects[0].stat().st_size > 0
    assert not list(tmp_path.glob("*.tmp"))


def test_disk_cache_concurrent_processes_compile_once(tmp_path):
    procs = [_child(tmp_path, tile_n=112) for _ in range(3)]
    results = [_result(p)[0] for p in procs]
    assert sum(r["stats"]["compiles"] for r in results) == 1
    assert sum(r["stats"]["disk_hits"] for r in results) == 2
    assert len(list(tmp_path.glob("*.o"))) == 1


def test_disk_cache_key_separates_variants_and_settings(tmp_path):
    _result(_child(tmp_path, tile_n=64))
    other_tile, _ = _result(_child(tmp_path, tile_n=80))
    assert other_tile["stats"]["compiles"] == 1  # a different compile-time parameter
    lineinfo, _ = _result(_child(tmp_path, tile_n=64, extra_env={"CUTE_DSL_LINEINFO": "1"}))
    assert lineinfo["stats"]["compiles"] == 1  # a DSL setting that changes code generation
    assert len(list(tmp_path.glob("*.o"))) == 3


def test_disk_cache_can_be_disabled(tmp_path):
    result, _ = _result(_child(tmp_path, extra_env={"PADDLE_FLASHMASK_CACHE": "0"}))
    assert result["stats"]["compiles"] == 1
    assert not list(tmp_path.glob("*.o"))


def test_corrupt_cache_entry_is_rebuilt(tmp_path):
    _result(_child(tmp_path))
    (obj,) = tmp_path.glob("*.o")
    obj.write_bytes(b"not an object file")
    result, err = _result(_child(tmp_path))
    assert result["stats"]["compiles"] == 1 and "discarding unreadable cached kernel" in err
    assert obj.stat().st_size > 100


def test_memory_cache_and_key(tmp_path, monkeypatch):
    from paddle_flashmask.ops.cute import cache

    monkeypatch.setenv("PADDLE_FLASHMASK_CACHE", "0")
    calls = []

    def build(config):
        calls.append(config)
        return object()

    a = cache.get_or_compile("unit-test", ("cfg", 1), build)
    assert cache.get_or_compile("unit-test", ("cfg", 1), build) is a
    assert cache.get_or_compile("unit-test", ("cfg", 2), build) is not a
    assert calls == [("cfg", 1), ("cfg", 2)]
    assert cache.variant_key("x", ("cfg", 1)) != cache.variant_key("x", ("cfg", 2))
    assert cache.variant_key("x", ("cfg", 1)) != cache.variant_key("y", ("cfg", 1))


# --------------------------------------------------------------------------------------------------
# Host API validation (runs before anything touches a GPU)
# --------------------------------------------------------------------------------------------------

def _qkv(torch, d=128, dtype=None, b=1, s=16, h=4, hk=2):
    dtype = dtype or torch.bfloat16
    q = torch.zeros(b, s, h, d, dtype=dtype)
    k = torch.zeros(b, s, hk, d, dtype=dtype)
    v = torch.zeros(b, s, hk, 128 if d == 192 else d, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("case,message", [
    ("head_dim", "q: expected head dim in [64, 96, 128, 192, 256], found 80"),
    ("dtype", "q: expected dtype bfloat16 or float16, found float32"),
    ("rank", "q: expected rank 4 [B, Sq, H, D], found shape [16, 4, 128]"),
    ("heads", "k: expected a number of heads (dim 2) dividing H=4, found 3"),
    ("cpu", "q: expected a CUDA tensor (DLPack device type 2), found device type 1"),
])
def test_host_api_errors_name_the_argument(case, message):
    torch = pytest.importorskip("torch")
    from paddle_flashmask.ops.cute import interface

    q, k, v = _qkv(torch)
    if case == "head_dim":
        q, k, v = _qkv(torch, d=80)
    elif case == "dtype":
        q = q.float()
    elif case == "rank":
        q = q[0]
    elif case == "heads":
        q, k, v = _qkv(torch, hk=3)
    out = torch.zeros_like(q)
    lse = torch.zeros(1, 4, 16)
    with pytest.raises(ValueError) as err:
        interface.flashmask_fwd(q, k, v, out, lse, None, causal=True, softmax_scale=0.1, stream=0)
    assert message in str(err.value)


def test_host_api_rejects_invalid_mask_form():
    torch = pytest.importorskip("torch")
    from paddle_flashmask.ops.cute import interface

    q, k, v = _qkv(torch)
    idx = torch.zeros(1, 1, 16, 4, dtype=torch.int32)
    with pytest.raises(ValueError, match="C must be 1 or 2 when causal=True, found C=4"):
        interface.flashmask_fwd(q, k, v, torch.zeros_like(q), torch.zeros(1, 4, 16), idx,
                                causal=True, softmax_scale=0.1, stream=0)


def test_is_available_is_false_without_a_gpu():
    from paddle_flashmask.ops import cute

    if cute.device_count() == 0:
        assert cute.is_available() is False
        assert cute.device_capability(0) is None
    assert cute.dsl_importable() is True


def test_inspect_reads_dlpack_like_torch():
    torch = pytest.importorskip("torch")
    from paddle_flashmask.ops.cute.dlpack import inspect

    base = torch.zeros(3, 5, 4, 8, dtype=torch.bfloat16)
    for t in (base, base[:, 1:], base.transpose(1, 2), base[1, 2], torch.zeros(7, dtype=torch.int32),
              torch.zeros((), dtype=torch.float32), torch.zeros(2, 0, 3, dtype=torch.float16)):
        info = inspect(t, "t")
        assert info.shape == tuple(t.shape) and info.data_ptr == t.data_ptr()
        if t.numel():
            assert info.stride == tuple(t.stride())
        assert info.dtype == str(t.dtype).split(".")[-1] and info.device == (1, 0)
        assert info.contiguous == t.is_contiguous()


def test_inspect_accepts_tensors_that_require_grad():
    """torch refuses DLPack export of a tensor requiring grad (what the autograd op hands over);
    found on the H200: every cute call through the torch frontend failed before this."""
    torch = pytest.importorskip("torch")
    from paddle_flashmask.ops.cute.dlpack import inspect, runtime_tensor

    x = torch.zeros(2, 3, 4, dtype=torch.bfloat16, requires_grad=True)
    assert inspect(x, "x").data_ptr == x.data_ptr()
    assert tuple(runtime_tensor(x).shape) == (2, 3, 4)
    paddle = pytest.importorskip("paddle")
    p = paddle.zeros([2, 3], dtype="float32")
    p.stop_gradient = False
    assert inspect(p, "p").shape == (2, 3)


def test_ptxas_report_parser_handles_wrapped_spill_report():
    from paddle_flashmask.ops.cute.compile_check import parse_ptxas_report

    text = """remark[ptxas]: ptxas detected register spills
          ptxas output:
          ptxas info    : Compiling entry function
          'kernel_a'
          for 'sm_90a'
          ptxas info    : Function properties for
          kernel_a
          ptxas         .     80 bytes stack frame, 76 bytes spill stores, 72 bytes spill loads
          ptxas info    : Used 168 registers, used 4 barriers, 80 bytes cumulative stack size
    remark[ptxas info]: ptxas output: ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async
    instructions are serialized due to insufficient register resources for the function 'kernel_b'
    ptxas info    : Compiling entry function 'kernel_b' for 'sm_90a'
    ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 40 registers, used 1 barriers"""
    report = parse_ptxas_report(text)
    assert report["kernel_a"] == {"stack_frame": 80, "spill_stores": 76, "spill_loads": 72,
                                  "ptxas_registers": 168}
    assert report["kernel_b"]["ptxas_registers"] == 40 and report["kernel_b"]["spill_stores"] == 0
    assert report["kernel_b"]["ptxas_remarks"][0].startswith("C7512 Potential Performance Loss")


def test_host_api_arguments_match_the_compiled_kernels(monkeypatch):
    """flashmask_fwd / flashmask_bwd up to the launch, on the CPU: every compiled kernel (real,
    compiled for sm_90a) accepts the arguments the host API builds - counted and typed by the DSL's
    own argument packing, which is what a launch does first."""
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import interface

    api = HostApiHarness(monkeypatch)
    launched, t = api.launched, api.tensor
    b, s, h, hk, d = 1, 100, 4, 2, 128
    q, k, v, out, dout = t(b, s, h, d), t(b, s, hk, d), t(b, s, hk, d), t(b, s, h, d), t(b, s, h, d)
    lse, sink, dsink = t(b, h, s, dtype=torch.float32), t(h, dtype=torch.float32), t(h, dtype=torch.float32)
    idx = t(b, 1, s, 2, dtype=torch.int32)
    interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1,
                            learnable_sink=sink, stream=0)
    interface.flashmask_bwd(q, k, v, out, dout, lse, t(b, s, h, d), t(b, s, hk, d), t(b, s, hk, d),
                            idx, causal=True, softmax_scale=0.1, learnable_sink=sink, dsink=dsink,
                            stream=0)
    # GQA 4/2 with one query tile per head: the forward's work-order rule adds the ordering
    # kernels (flash_fwd_sm90.default_work_order), which read the same summary; the backward's
    # few key tiles are claimed by work class, from the class-sorted list (bwd_claim_list)
    assert launched == ["tile_summary", "fwd_tile_ranges", "fwd_work_order", "flash_fwd_sm90",
                        "tile_summary", "flash_bwd_pre", "bwd_claim_list", "flash_bwd_sm90",
                        "flash_bwd_post"]


def test_register_pool_rule():
    """The producer warp group must free at least the registers the consumer groups then take
    (setmaxnreg.inc waits until the CTA's pool holds them): the backward's 24 / 240 at 168 x 384
    is exact; 32 / 240 -- what hung the H200 in session 11 -- is refused."""
    from paddle_flashmask.ops.cute.compile_check import register_pool_problem

    def kernel(dealloc, alloc, regs=168, threads=384):
        return {"registers": regs, "block_threads": threads,
                "setmaxnreg": {"dealloc": dealloc, "alloc": alloc}}

    assert register_pool_problem(kernel([24], [240])) is None
    assert register_pool_problem(kernel([32], [232])) is None  # the forward at D = 128
    assert register_pool_problem(kernel([24], [160], regs=128, threads=512)) is None
    why = register_pool_problem(kernel([32], [240]))
    assert why and "18432" in why and "17408" in why and "forever" in why
    assert register_pool_problem(kernel([], [240]))  # an increase nobody pays for
    assert register_pool_problem({"registers": 24, "block_threads": 128}) is None  # no setmaxnreg


def test_main_kernels_hand_registers_over_within_the_pool(compile_report):
    """Every warp-specialised forward / backward kernel's setmaxnreg pair was read from its SASS
    and checked against its launch registers and block size (not vacuous: the rule ran)."""
    from paddle_flashmask.ops.cute.compile_check import register_pool_problem

    _, report = compile_report
    checked = 0
    for label, name, k in _main_kernels(report):
        if k.get("setmaxnreg"):
            assert k["block_threads"] in (256, 384, 512), (label, name, k)
            assert register_pool_problem(k) is None, (label, name)
            checked += 1
    assert checked >= 40
