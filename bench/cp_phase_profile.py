"""Where a context-parallel rank's time goes, one GPU, no communication (a diagnostic).

Builds cp_scaling's problem (64K causal documents, same seed and planner settings) and, on one GPU,
times the single-device attention and every rank's phases as the CP engine would run them -- the
local phase (own rows x own keys) and each remote phase (the rows that see a comm group x its
gathered keys) -- through ``ops.cute.interface`` with preallocated outputs. Per problem: visible
pairs, forward / backward / forward+backward medians (``triton.testing.do_bench``), pairs per ms,
the summed device time per kernel, the GPU span of back-to-back calls and its idle part, and the
schedule model's makespan (``bench/schedule_sim.py``: computed tiles, no clocks) so the kernels'
time can be compared with the share of work the planner gave the rank.

    python3 bench/cp_phase_profile.py [--world 2 --chunk-size 1024 --equal-chunks 0]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from cp_scaling import document_lengths  # noqa: E402
from schedule_sim import item_costs, makespan, visited_tiles  # noqa: E402

from paddle_flashmask import mask_builders as mb  # noqa: E402
from paddle_flashmask import semantics as sem  # noqa: E402
from paddle_flashmask.distributed import planner  # noqa: E402
from paddle_flashmask.ops.cute import interface  # noqa: E402


def model_makespan(indices: np.ndarray, causal: bool, seqlen_q: int, heads: int,
                   backward: bool, grid: int = 132) -> float:
    """Schedule-model makespan (in computed key tiles) of one call; ``seqlen_q`` rows, one batch."""
    tile_m, tile_n = (64, 128) if backward else (128, 128)
    if indices.shape[2] != seqlen_q:
        return float("nan")  # the model's tile classifier assumes Sq = Sk
    visited, partial = visited_tiles(indices, causal, seqlen_q, tile_m, tile_n, 1, backward)
    cost = item_costs(visited, partial)[0]
    return makespan([float(c) for _ in range(heads) for c in cost], grid)


def build_problems(args) -> tuple:
    """``(plan, [(name, indices, causal, rows, keys)])``: the single call and every rank's phases."""
    s = args.seqlen
    mask = mb.causal_document_mask(document_lengths(s, args.doc_min, args.doc_max, args.seed), s)
    glob = np.asarray(mask.startend_row_indices, dtype=np.int32)
    plan = planner.plan_context_parallel(glob, mask.causal, args.world, chunk_size=args.chunk_size,
                                         equal_chunks=bool(args.equal_chunks), comm_groups=1)
    problems = [("single", glob, mask.causal, s, s)]
    for r in range(args.world):
        rm = planner.local_masks(glob, mask.causal, plan, r)
        problems.append((f"rank{r}_local", rm.local, rm.local_causal, rm.rows.size, rm.rows.size))
        for g, phase in enumerate(rm.remote):
            rows = rm.phase_rows(g)
            n_rows = rm.rows.size if rows is None else rows.size
            if rm.remote_work[g]:
                problems.append((f"rank{r}_remote{g}", phase, False, n_rows, phase.shape[2]))
    return plan, problems


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seqlen", type=int, default=65536)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--doc-min", type=int, default=2048)
    p.add_argument("--doc-max", type=int, default=16384)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--chunk-size", type=int, default=1024)
    p.add_argument("--equal-chunks", type=int, default=0)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    import triton.testing as tt  # GPU-only imports (the problem builder runs on a CPU too)
    from profile_call import kernel_timeline, kernel_times_us
    h, d = args.heads, args.head_dim
    plan, problems = build_problems(args)
    torch.manual_seed(args.seed)
    stream = torch.cuda.current_stream().cuda_stream
    report = {"args": vars(args), "rank_work": [int(w) for w in plan.rank_work()]}
    for name, idx_np, causal, sq, sk in problems:
        q, do = (torch.randn(1, sq, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        k, v = (torch.randn(1, sk, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out, dq = torch.empty_like(q), torch.empty_like(q)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        lse = torch.empty(1, h, sq, device="cuda", dtype=torch.float32)
        idx = torch.as_tensor(np.ascontiguousarray(idx_np, dtype=np.int32), device="cuda")

        def fwd():
            interface.flashmask_fwd(q, k, v, out, lse, idx, causal=causal, softmax_scale=d ** -0.5,
                                    stream=stream)

        def bwd():
            interface.flashmask_bwd(q, k, v, out, do, lse, dq, dk, dv, idx, causal=causal,
                                    softmax_scale=d ** -0.5, stream=stream)

        def fwd_bwd():
            fwd()
            bwd()

        fwd_bwd()
        torch.cuda.synchronize()
        pairs = int(sem.count_visible_pairs(idx_np, causal, sq).sum()) * h
        rec = {"rows": sq, "keys": sk, "pairs": pairs,
               "fwd_ms": tt.do_bench(fwd, return_mode="median"),
               "bwd_ms": tt.do_bench(bwd, return_mode="median"),
               "fwd_bwd_ms": tt.do_bench(fwd_bwd, return_mode="median"),
               "model_fwd": model_makespan(idx_np, causal, sq, h, False),
               "model_bwd": model_makespan(idx_np, causal, sq, h, True),
               "kernels_fwd_us": kernel_times_us(fwd), "kernels_bwd_us": kernel_times_us(bwd),
               "timeline_fwd_bwd": kernel_timeline(fwd_bwd)}
        rec["mpairs_per_ms"] = pairs / rec["fwd_bwd_ms"] / 1e6
        report[name] = rec
        print(name, json.dumps(rec), flush=True)
        del q, k, v, do, out, dq, dk, dv, lse
        torch.cuda.empty_cache()
    single = report["single"]
    for name in report:
        if name.startswith("rank") and name.endswith("_local"):
            rec = report[name]
            print(f"{name}: fwd {rec['fwd_ms'] / single['fwd_ms']:.3f} bwd "
                  f"{rec['bwd_ms'] / single['bwd_ms']:.3f} of single; model fwd "
                  f"{rec['model_fwd'] / single['model_fwd']:.3f} bwd "
                  f"{rec['model_bwd'] / single['model_bwd']:.3f}; pairs "
                  f"{rec['pairs'] / single['pairs']:.3f}", flush=True)
    with open(os.path.join(args.out, "cp_phase_profile.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
