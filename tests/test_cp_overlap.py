"""Context parallelism with K and V in one collective per direction (``comm_fuse_kv``), on the CPU
(gloo, reference backend): the option's rule and errors, and, on 2 processes, that it gives the
same outputs and gradients as the default (bit for bit: an all-gather copies and a 2-rank
reduce-scatter sums each element of two ranks either way) with half the collectives."""
from __future__ import annotations

import os

import numpy as np
import pytest

from paddle_flashmask import mask_builders as mb
from paddle_flashmask.distributed import engine

from test_distributed import case_inputs, run_gloo, torch_cases


def test_comm_fuse_kv_rule(monkeypatch):
    monkeypatch.delenv(engine.COMM_FUSE_KV_ENV, raising=False)
    assert engine.comm_fuse_kv(None) is False
    assert engine.comm_fuse_kv(True) is True
    monkeypatch.setenv(engine.COMM_FUSE_KV_ENV, "1")
    assert engine.comm_fuse_kv(None) is True
    assert engine.comm_fuse_kv(False) is False  # the argument wins over the env
    assert engine.comm_options(None, None, None)["comm_fuse_kv"] is True
    monkeypatch.setenv(engine.COMM_FUSE_KV_ENV, "0")
    assert engine.comm_fuse_kv(None) is False
    for bad in ("yes", "true", "2"):
        monkeypatch.setenv(engine.COMM_FUSE_KV_ENV, bad)
        with pytest.raises(ValueError, match=engine.COMM_FUSE_KV_ENV):
            engine.comm_fuse_kv(None)
    for bad in (1, 0, "1", None.__class__):
        with pytest.raises(ValueError, match="comm_fuse_kv: expected a bool"):
            engine.comm_fuse_kv(bad)


def test_frontend_rejects_bad_comm_fuse_kv(single_rank_group, monkeypatch):
    torch = single_rank_group
    from paddle_flashmask.distributed import torch_cp

    monkeypatch.delenv(engine.COMM_FUSE_KV_ENV, raising=False)
    s = 12
    mask = mb.causal_document_mask([5, 7], s)
    q, k, v = (torch.randn(1, s, 2, 8) for _ in range(3))
    plan, masks = torch_cp.prepare(*mask, chunk_size=4)
    for bad in ("yes", 1, 0.0):
        with pytest.raises(ValueError, match="comm_fuse_kv"):
            torch_cp.context_parallel_attention(q, k, v, plan, masks, backend="reference",
                                                comm_fuse_kv=bad)
    monkeypatch.setenv(engine.COMM_FUSE_KV_ENV, "on")
    with pytest.raises(ValueError, match=engine.COMM_FUSE_KV_ENV):
        torch_cp.context_parallel_attention(q, k, v, plan, masks, backend="reference")
    # one rank: nothing is communicated, the option changes nothing
    monkeypatch.setenv(engine.COMM_FUSE_KV_ENV, "1")
    out = torch_cp.context_parallel_attention(q, k, v, plan, masks, backend="reference")
    ref = torch_cp.context_parallel_attention(q, k, v, plan, masks, backend="reference",
                                              comm_fuse_kv=False)
    assert torch.equal(out, ref)


# ------------------------------------------------------------------------------------------------
# 2 processes (torch, gloo)
# ------------------------------------------------------------------------------------------------

def _count_collectives(torch_cp):
    """Counts of all-gathers and reduce-scatters issued by the engine (this process only)."""
    counts = {"gather": 0, "reduce_scatter": 0}
    adapter = torch_cp.TorchAdapter

    def counted(name, fn):
        def call(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)
        return call

    adapter.all_gather = counted("gather", adapter.all_gather)
    adapter.reduce_scatter = counted("reduce_scatter", adapter.reduce_scatter)
    return counts


def _run_case(torch, torch_cp, case, s, chunk, comm_groups, dtype, rank, fuse, use_env=False):
    """Output, LSE and local gradients of one CP fwd+bwd (``fuse`` as argument or env)."""
    q, k, v, w, sink = case_inputs(torch, case, s, dtype)
    sink = None if sink is None else sink.requires_grad_()
    plan, masks = torch_cp.prepare(case["idx"], case["causal"], seqlen=s, chunk_size=chunk,
                                   comm_groups=comm_groups, window_size=case.get("window"))
    local = [torch_cp.shard_sequence(x, plan, rank).requires_grad_() for x in (q, k, v)]
    if case["batch"] == 1:
        masks = torch_cp.device_masks(plan, masks, q.device)
    kwargs = {} if use_env else {"comm_fuse_kv": fuse}
    if use_env:
        os.environ[engine.COMM_FUSE_KV_ENV] = "1" if fuse else "0"
    try:
        out, lse = torch_cp.context_parallel_attention(*local, plan, masks, learnable_sink=sink,
                                                       return_softmax_lse=True, backend="reference",
                                                       **kwargs)
        (out * torch_cp.shard_sequence(w, plan, rank)).sum().backward()
    finally:
        os.environ.pop(engine.COMM_FUSE_KV_ENV, None)
    got = {"out": out.detach(), "lse": lse, "dq": local[0].grad, "dk": local[1].grad,
           "dv": local[2].grad}
    if sink is not None:
        got["dsink"] = sink.grad
    return got, plan, masks


def _worker(rank, world, errors, configs):
    import torch

    from paddle_flashmask.distributed import torch_cp

    counts = _count_collectives(torch_cp)
    for cfg in configs:
        s, chunk, groups, dtype = cfg["s"], cfg["chunk"], cfg["comm_groups"], cfg["dtype"]
        torch_cp.TorchAdapter.prefer_native_reduce_scatter = cfg["native_rs"]
        for case in torch_cases(s):
            if cfg.get("cases") and case["name"] not in cfg["cases"]:
                continue
            tag = f"[{cfg}] {case['name']} rank {rank}"
            counts.update(gather=0, reduce_scatter=0)
            want, plan, masks = _run_case(torch, torch_cp, case, s, chunk, groups, dtype, rank, False)
            default_counts = dict(counts)
            counts.update(gather=0, reduce_scatter=0)
            got, _, _ = _run_case(torch, torch_cp, case, s, chunk, groups, dtype, rank, True,
                                  use_env=cfg.get("env", False))
            n = len(plan.comm_groups)
            if default_counts != {"gather": 2 * n, "reduce_scatter": 2 * n}:
                errors.append(f"{tag}: default issued {default_counts}, expected {2 * n} of each")
            if counts != {"gather": n, "reduce_scatter": n}:
                errors.append(f"{tag}: fused issued {counts}, expected {n} of each")
            for key in want:
                a, e = got[key], want[key]
                if a.shape != e.shape or a.dtype != e.dtype:
                    errors.append(f"{tag} {key}: {a.shape} {a.dtype} vs {e.shape} {e.dtype}")
                elif not torch.equal(a, e):
                    diff = (a.double() - e.double()).abs().nan_to_num(0.0).max().item()
                    errors.append(f"{tag} {key}: differs from the default (max abs {diff:.3e})")


def test_fused_kv_equals_default_two_ranks(tmp_path):
    """Every mask of the CP zoo (GQA, a sink, batch 2, Dv != D, phases with no work, padding)
    with 2 comm groups and chunks of 4; bf16; one comm group through the all-reduce fallback and
    the env switch: outputs, LSE, dq, dk, dv, dsink equal to the default's."""
    configs = [dict(s=45, chunk=4, comm_groups=2, dtype="float32", native_rs=True),
               dict(s=40, chunk=4, comm_groups=2, dtype="bfloat16", native_rs=True,
                    cases=("causal_document", "random_bidir_c4", "document")),
               dict(s=40, chunk=5, comm_groups=1, dtype="float32", native_rs=False, env=True,
                    cases=("causal_document", "random_causal_c2", "random_bidir_c4"))]
    run_gloo(2, tmp_path, _worker, configs)


def test_pending_parts_wait_once():
    """Both halves of a fused collective wait for it once and are views of its last dim."""
    torch = pytest.importorskip("torch")
    from paddle_flashmask.distributed import torch_cp

    adapter = object.__new__(torch_cp.TorchAdapter)
    adapter.torch = torch
    waits = []

    class Handle:
        def wait(self):
            waits.append(1)

    k, v = torch.randn(6, 1, 2, 4), torch.randn(6, 1, 2, 3)
    k_part, v_part = engine._collective_pair(
        adapter, lambda x: engine.PendingCollective(Handle(), x), k, v, True)
    assert torch.equal(k_part.wait(), k) and torch.equal(v_part.wait(), v)
    assert torch.equal(v_part.wait(), v) and len(waits) == 1
    k_two, v_two = engine._collective_pair(
        adapter, lambda x: engine.PendingCollective(None, x), k, v, False)
    assert k_two.wait() is k and v_two.wait() is v
    assert np.array_equal(k_part.wait().numpy(), k.numpy())


def test_bench_cp_scaling_fuse_kv_variants(tmp_path):
    """bench/cp_scaling.py --fuse-kv 0,1 (torchrun, CPU, gloo): one CP variant per value, in
    order, both within the single-device tolerance; a bad list is refused."""
    import json
    import subprocess
    import sys
    pytest.importorskip("torch")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "cp.json"
    base = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            os.path.join(root, "bench", "cp_scaling.py"), "--smoke", "--comm-groups", "1",
            "--strategies", "locality", "--equal-chunks", "0"]
    proc = subprocess.run(base + ["--fuse-kv", "0,1", "--out", str(out)], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [v["comm_fuse_kv"] for v in result["context_parallel"]] == [False, True]
    assert isinstance(result["best_comm_fuse_kv"], bool)
    assert max(result["max_rel_error_vs_single_device"].values()) <= 1e-5
    proc = subprocess.run(base + ["--fuse-kv", "0,yes", "--out", str(out)], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "--fuse-kv" in proc.stdout + proc.stderr
