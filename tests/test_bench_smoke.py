"""CPU smoke tests of the benchmarks: the end-to-end training step (`bench/e2e_step.py`, with its
model `bench/tiny_llama.py`) and the mask zoo the attention benchmark times (`bench/mask_zoo.py`).

The GPU numbers come from the H200 (docs/gpu_session.md); here we prove the scripts run and that
their checks can fail: the packed rows, the dense/varlen forms of the same mask, the first-step
loss agreement (which a wrong mask must break), the child-process isolation and its time limit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import e2e_step  # noqa: E402
import mask_zoo  # noqa: E402
import tiny_llama  # noqa: E402
from paddle_flashmask import semantics  # noqa: E402


def test_default_model_is_about_one_billion_parameters():
    with torch.device("meta"):
        model = tiny_llama.TinyLlama(tiny_llama.LlamaConfig())
    n = model.num_parameters()
    assert n == tiny_llama.default_param_estimate()
    assert 0.9e9 <= n <= 1.1e9, n


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="num_kv_heads"):
        tiny_llama.LlamaConfig(num_heads=16, num_kv_heads=6).check()


def test_packed_rows_labels_and_masks_agree():
    b, s = 3, 1024
    batch = e2e_step.make_batch(b, s, 16, 400, vocab=1000, seed=5)
    assert batch.input_ids.shape == (b, s)
    for r in range(b):
        assert sum(batch.segments[r]) == s
        start = 0
        for n in batch.doc_lens[r]:
            doc = slice(start, start + n)
            assert 16 <= n <= 400
            assert (batch.position_ids[r, doc] == np.arange(n)).all()          # RoPE restarts
            assert (batch.labels[r, start:start + n - 1] == batch.input_ids[r, start + 1:start + n]).all()
            assert batch.labels[r, start + n - 1] == -100                      # no cross-document label
            start += n
        assert (batch.labels[r, start:] == -100).all()                         # padding
    # the dense SDPA mask equals pack_sft's indices on real rows (independent oracle: to_dense)
    allowed = e2e_step.dense_document_mask(batch, "cpu")
    oracle = semantics.to_dense(batch.indices, True, s)
    real = e2e_step._real_token_rows(batch)[:, None, :, None]
    assert np.array_equal(allowed.numpy() & real, oracle & real)
    e2e_step.check_dense_mask(batch, allowed)
    broken = allowed.clone()
    broken[0, 0, 5, 0] = ~broken[0, 0, 5, 0]
    with pytest.raises(AssertionError, match="differs"):
        e2e_step.check_dense_mask(batch, broken)
    # FA4's cu_seqlens cover every token, one segment per document (+ padding tail)
    cu, longest = e2e_step.cu_seqlens(batch, "cpu")
    assert int(cu[-1]) == b * s and longest == max(max(r) for r in batch.segments)
    assert len(cu) == 1 + sum(len(r) for r in batch.segments)


def test_document_lengths_are_fixed_by_the_seed_and_clipped():
    a = e2e_step.document_lengths(500, 100, 4000, seed=0)
    assert a == e2e_step.document_lengths(500, 100, 4000, seed=0)
    assert min(a) >= 100 and max(a) <= 4000
    assert 250 < np.median(a) < 1000   # "real-looking": mostly short, a long tail


def test_cpu_smoke_step_matches_sdpa_and_writes_report(tmp_path):
    rc = e2e_step.main(["--cpu-smoke", "--out", str(tmp_path)])
    assert rc == 0
    report = json.loads((tmp_path / "e2e_step.json").read_text())
    res = report["results"]
    assert set(res) == {"flashmask", "sdpa_dense"} and all(r["ok"] for r in res.values())
    assert res["flashmask"]["flashmask_backend_used"] == "reference"
    for r in res.values():
        assert len(r["step_times_s"]) == 2 and r["tokens_per_s"] > 0
        assert list(r["median_phase_s"]) == ["forward", "backward", "optimizer"]
        assert all(v > 0 for v in r["median_phase_s"].values())
        assert all(np.isfinite(r["losses_after_first"]))
    comp = report["comparison"]
    assert comp["loss_check_pass"]
    check = comp["loss_check"]["flashmask"]
    assert check["rel_diff"] <= 1e-5 and check["grad_norm_rel_diff"] < 1e-4
    # the control shows the comparison has teeth: a wrong mask moves documents' losses far more
    assert comp["control_wrong_mask"]["per_document_max_abs_diff"] > 100 * check["per_document_max_abs_diff"]
    # identical weights and data, so the same first-step loss to fp32 rounding; training moves it
    assert res["flashmask"]["losses_after_first"][-1] < res["flashmask"]["first_step"]["loss"]
    meta = report["meta"]
    assert meta["command"].startswith("python3 bench/e2e_step.py --cpu-smoke")
    from paddle_flashmask.ops.cute.cache import source_fingerprint
    assert meta["kernel_sources"] == source_fingerprint()  # names the kernels, whatever git says
    assert meta["model"]["parameters"] == tiny_llama.TinyLlama(e2e_step.SMOKE_CONFIG).num_parameters()
    assert "flashmask_vs_sdpa_dense" in comp["speedups"]
    assert (tmp_path / "e2e_step.png").stat().st_size > 1000


def test_plot_without_matplotlib_falls_back_to_pillow(tmp_path, monkeypatch):
    pytest.importorskip("PIL")
    assert e2e_step.main(["--cpu-smoke", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "e2e_step.json").read_text())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert e2e_step.plot(report, str(tmp_path / "pillow.png"))
    from PIL import Image
    assert Image.open(tmp_path / "pillow.png").size == (900, 360)


def test_loss_check_fails_on_a_wrong_mask(tmp_path, monkeypatch):
    real_make = e2e_step.make_attention

    def wrong_for_flashmask(impl, batch, device, args):
        if impl != "flashmask":
            return real_make(impl, batch, device, args)
        import paddle_flashmask.torch as pfm
        return lambda q, k, v: pfm.flashmask_attention(q, k, v, causal=True, backend="reference")

    monkeypatch.setattr(e2e_step, "make_attention", wrong_for_flashmask)
    rc = e2e_step.main(["--cpu-smoke", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "e2e_step.json").read_text())
    assert rc == 1 and not report["comparison"]["loss_check_pass"]
    assert not report["comparison"]["loss_check"]["flashmask"]["pass"]


def test_an_interrupt_keeps_the_finished_rows(tmp_path, monkeypatch):
    """`timeout -s INT` on the GPU: the implementations already measured stay in the JSON."""
    real_run = e2e_step.run_impl_safely

    def interrupted_second(impl, args):
        if impl == "sdpa_dense":
            raise KeyboardInterrupt
        return real_run(impl, args)

    monkeypatch.setattr(e2e_step, "run_impl_safely", interrupted_second)
    rc = e2e_step.main(["--cpu-smoke", "--impls", "flashmask,sdpa_dense", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "e2e_step.json").read_text())
    assert rc == 1
    assert report["results"]["flashmask"]["ok"]
    assert report["results"]["sdpa_dense"]["error"].startswith("interrupted")
    assert not report["comparison"]["loss_check_pass"]  # one implementation: nothing was compared


def test_isolated_children_and_their_time_limit(tmp_path):
    script = str(BENCH / "e2e_step.py")
    env = {**os.environ, "OUT": str(tmp_path / "ok")}
    run = subprocess.run([sys.executable, script, "--cpu-smoke", "--isolate"], env=env,
                         capture_output=True, text=True, timeout=170)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads((tmp_path / "ok" / "e2e_step.json").read_text())
    assert all(r["ok"] and r["process_s"] > 0 for r in report["results"].values())
    assert report["comparison"]["loss_check_pass"]
    # a child that overruns its limit is killed and reported; the run fails instead of hanging
    run = subprocess.run([sys.executable, script, "--cpu-smoke", "--isolate", "--impls", "sdpa_dense",
                          "--impl-timeout", "0.5", "--out", str(tmp_path / "slow")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    report = json.loads((tmp_path / "slow" / "e2e_step.json").read_text())
    assert report["results"]["sdpa_dense"]["error"].startswith("timed out")


def test_bad_arguments_name_the_flag():
    with pytest.raises(ValueError, match="--impls"):
        e2e_step.parse_args(["--impls", "flashmask,xformers"])
    with pytest.raises(ValueError, match="--doc-max"):
        e2e_step.make_batch(1, 512, 10, 1000, 100, 0)


def test_mask_zoo_indices_equal_the_peers_predicates_on_cpu():
    b, s = 2, 2048
    zoo = mask_zoo.make_zoo(b, s, device="cpu")
    assert len(zoo) == 8
    for mask in zoo.values():
        allowed = mask_zoo.dense_allowed(mask, b, s, device="cpu")
        mask_zoo.check_same_mask(mask, allowed, s)  # raises on any differing element
        assert mask_zoo.visible_pairs(mask, b, s) == int(allowed.sum())
    # and the check can fail: flip one element of a document mask
    doc = zoo["causal_document"]
    allowed = mask_zoo.dense_allowed(doc, b, s, device="cpu")
    allowed[1, 0, s - 1, 0] = ~allowed[1, 0, s - 1, 0]
    with pytest.raises(AssertionError, match="causal_document"):
        mask_zoo.check_same_mask(doc, allowed, s)


def test_opt_in_sft_documents_mask_is_the_e2e_steps_mask():
    """``make_zoo(extra=("sft_documents",))`` adds the end-to-end step's packed rows (bench case 5):
    on every real row the same mask as e2e_step's FlashMask indices, the padding tail a causal
    segment (as e2e_step gives it to SDPA / FA4 varlen), the predicate equal to the indices
    element by element, and FA4 varlen's segments covering every row."""
    import torch

    b, s = 2, 8192
    zoo = mask_zoo.make_zoo(b, s, device="cpu", extra=("sft_documents",))
    assert list(zoo)[-1] == "sft_documents" and len(zoo) == 9
    sft = zoo["sft_documents"]
    packed = e2e_step.make_batch(b, s, 100, 4000, 32000, 0)
    assert sft.causal and [sum(row) for row in sft.doc_lens] == [s] * b
    e2e_step.check_dense_mask(packed, mask_zoo.dense_allowed(sft, b, s, device="cpu"))
    real = torch.as_tensor(e2e_step._real_token_rows(packed))
    assert not bool(real.all())  # this batch has a padding tail, so the padding rule is exercised
    allowed = mask_zoo.dense_allowed(sft, b, s, device="cpu")
    mask_zoo.check_same_mask(sft, allowed, s)
    assert mask_zoo.visible_pairs(sft, b, s) == int(allowed.sum())
    assert "sft_documents" not in mask_zoo.make_zoo(1, 1024, device="cpu")  # opt-in only
    assert mask_zoo.opt_in_names(["causal", "sft_documents"]) == ("sft_documents",)
    with pytest.raises(ValueError, match="extra"):
        mask_zoo.make_zoo(1, 1024, device="cpu", extra=("sft",))


def test_cp_phase_profile_builds_every_ranks_phases_from_the_plan():
    """bench/cp_phase_profile.py's problems (CPU part): the single call plus each rank's local and
    non-empty remote phases; per rank their visible pairs add up to the planner's work for it,
    and the schedule model runs on every phase with Sq = Sk."""
    import argparse

    import cp_phase_profile

    args = argparse.Namespace(seqlen=4096, doc_min=256, doc_max=1536, seed=3, world=2,
                              chunk_size=256, equal_chunks=0)
    plan, problems = cp_phase_profile.build_problems(args)
    names = [p[0] for p in problems]
    assert names[0] == "single" and "rank0_local" in names and "rank1_local" in names
    for r in range(2):
        pairs = sum(int(semantics.count_visible_pairs(idx, causal, sq).sum())
                    for name, idx, causal, sq, _ in problems if name.startswith(f"rank{r}_"))
        assert pairs == int(plan.rank_work()[r]), r
    for name, idx, causal, sq, sk in problems:
        assert idx.shape[2] == sk and idx.dtype == np.int32
        model = cp_phase_profile.model_makespan(idx, causal, sq, 2, backward=False)
        assert (model > 0) if sq == sk else np.isnan(model), name


# ------------------------------------------------------------------------------------------------
# scripts/gpu_session.sh: the next session's checklist of `run` calls
# ------------------------------------------------------------------------------------------------

SESSION = ROOT / "scripts" / "gpu_session.sh"


def _session(*args, env=None, check=True):
    run = subprocess.run(["bash", str(SESSION), *args], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **(env or {})}, cwd=ROOT)
    if check:
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def test_gpu_session_calls_are_bounded_and_use_real_flags():
    run = _session("check")
    assert "0 problems" in run.stdout
    calls = [json.loads(line) for line in _session("all").stdout.splitlines() if line.startswith("{")]
    assert [c["kind"] for c in calls] == (["nvidia-h200"] * 9 + ["nvidia-h200-x2"] * 57
                                          + ["nvidia-h200"] * 156)
    text = "\n".join(c["command"] for c in calls)
    for needed in ("tests/gpu/precompile.py --jobs 14", "-m pytest", "tests/gpu/fwd_check.py --fast",
                   "tests/gpu/bwd_check.py --bench", "bench/bench_attention.py --cases 0",
                   "bench/e2e_step.py", "--nproc_per_node 2 bench/cp_scaling.py", "NCCL_NVLS_ENABLE=0",
                   "tests/gpu/fwd_check.py --tile-ranges", "bench/profile_call.py",
                   "tests/gpu/bwd_check.py --persistent", "tests/gpu/fwd_check.py --partial-overlap",
                   "--strategies locality,lpt", "PADDLE_FLASHMASK_FWD_D128_TILE_N=112",
                   "--balance-tolerances 0.02,0.05", "bwd_check.py --d256-stages 1"):
        assert needed in text, needed
    assert calls[0]["carry"] == [".cutedsl/a", ".devtools"] and calls[1]["carry"][0] == ".cutedsl/b"


def test_gpu_session_check_catches_unbounded_or_wrong_calls(tmp_path):
    bad = tmp_path / "calls.txt"
    bad.write_text(json.dumps({"kind": "nvidia-h200", "timeout_s": 100, "carry": [".devtools"],
                               "command": "python3 tests/gpu/fwd_check.py --fastest\n"
                                          "timeout 200 python3 bench/e2e_step.py"}) + "\n")
    run = _session("check", str(bad), check=False)
    assert run.returncode == 1
    assert "not under timeout" in run.stdout and "has no option --fastest" in run.stdout
    assert "add up to 200 s" in run.stdout


def test_gpu_session_doc_lists_the_current_calls(tmp_path):
    doc = tmp_path / "gpu_session.md"
    original = (ROOT / "docs" / "gpu_session.md").read_text()
    doc.write_text(original)
    _session("appendix", env={"GPU_SESSION_DOC": str(doc)})
    assert doc.read_text() == original, "run scripts/gpu_session.sh appendix"


def test_gpu_session_collect_and_summary(tmp_path):
    got = tmp_path / "files_at"
    got.mkdir()
    (got / "bwd_check.json").write_text(json.dumps({
        "passed": 2, "total": 2, "determinism": [{"name": "large_det_causal", "bit_identical": True, "pass": True}],
        "bench": [{"name": "bench_causal", "ms": 2.0, "det_ms": 2.2}]}))
    (got / "fwd_check_fast.json").write_text(json.dumps({"summary": {"passed": 5, "total": 5}}))
    rows = [dict(B=4, S=8192, H=16, Hk=16, D=128, mask="causal", system=s, fwdbwd_tflops=t)
            for s, t in (("paddle_flashmask", 638.0), ("fa4", 580.0))]
    (got / "bench-cases0.json").write_text(json.dumps({"meta": {}, "results": rows}))
    (got / "e2e_step.log").write_text("log\n")
    env = {"GPU_SESSION_RESULTS": str(tmp_path / "results"), "GPU_SESSION_LOGS": str(tmp_path / "logs")}
    _session("collect", str(got), env=env)
    assert (tmp_path / "results" / "validation" / "bwd_check.json").exists()
    assert (tmp_path / "results" / "validation" / "fwd_check_fast.json").exists()
    assert (tmp_path / "results" / "bench-cases0.json").exists()
    assert (tmp_path / "logs" / "e2e_step.log").exists()
    out = _session("summary", env=env).stdout
    assert "fwd_check_fast: {'passed': 5, 'total': 5}" in out
    assert "deterministic / default = 1.100" in out
    assert "638.0   580.0 (fa4)  1.10 580.0  1.10" in out


def test_compile_times_reports_compile_and_disk_load():
    """bench/compile_times.py (issue 5 item 4) on this CPU: a real sm_90a compile into an empty
    cache, then a new process that must load the object from disk instead of compiling."""
    pytest.importorskip("cutlass")
    import compile_times
    from paddle_flashmask.ops.cute.summary_kernel import SummaryConfig

    env_arch = os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    assert env_arch
    rows = compile_times.measure([("tile_summary", SummaryConfig(112, 2))], jobs=1)
    assert len(rows) == 1 and "error" not in rows[0], rows
    assert rows[0]["loaded_from_disk"] and rows[0]["compile_s"] > 0 and rows[0]["load_s"] >= 0
    forms = [compile_times.parse_form(f) for f in ("causal", "full", "causal-C1", "bidir-C4")]
    names = [n for n, _ in compile_times.variants_for(forms, "bfloat16", 128, False)]
    assert names.count("flash_fwd_sm90") == 4 and names.count("flash_bwd_sm90") == 4
    with pytest.raises(ValueError, match="--forms"):
        compile_times.parse_form("sideways-C3")


def test_find_commit_maps_a_fingerprint_to_its_commits():
    """scripts/find_commit.py: HEAD's kernel sources give the fingerprint the benchmarks record
    (when the working tree's kernel sources are HEAD's), and a fingerprint nobody has is not
    found."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import find_commit

    from paddle_flashmask.ops.cute.cache import source_fingerprint

    dirty = subprocess.run(["git", "status", "--porcelain", "--", find_commit.KERNEL_DIR,
                            find_commit.SEMANTICS], cwd=ROOT, capture_output=True, text=True)
    if dirty.returncode != 0:
        pytest.skip("not a git checkout")
    if dirty.stdout.strip():
        pytest.skip("kernel sources differ from HEAD in this working tree")
    assert find_commit.fingerprint_at("HEAD") == source_fingerprint()
    assert find_commit.main([source_fingerprint(), "--max", "3"]) == 0
    assert find_commit.main(["0" * 16, "--max", "3"]) == 1


def test_host_time_measures_a_planned_call_on_this_cpu():
    """bench/host_time.py (session 23's host-path tool) in its own process, since it stubs the
    driver module-wide: real sm_90a compiles, then host microseconds per forward and backward."""
    pytest.importorskip("cutlass")
    env = {**os.environ, "CUTE_DSL_ARCH": os.environ.get("CUTE_DSL_ARCH", "sm_90a")}
    run = subprocess.run([sys.executable, str(BENCH / "host_time.py"), "--seqlen", "1024",
                          "--masks", "causal_document", "--calls", "3"],
                         capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    line = [x for x in run.stdout.splitlines() if x.startswith("causal_document {")]
    assert len(line) == 1, run.stdout[-2000:]
    report = json.loads(line[0].split(" ", 1)[1])
    assert set(report) == {"fwd_same", "fwd_fresh", "bwd_same", "bwd_fresh"}
    assert all(0 < us < 1e6 for us in report.values())
