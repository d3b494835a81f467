"""Interleaved A/B of kernel variants in one process (a diagnostic, not the benchmark).

Each variant is a set of environment switches (the host API keys its configs on them, so they may
flip between calls). Rounds run every variant in turn, ``--calls`` back-to-back calls each under
``torch.profiler``; the device time of the main kernel (names matching ``--kernel``) per call is
recorded per round, and the medians and spreads per variant are printed and written as JSON.
Interleaving keeps clock and thermal drift out of the comparison, which separate processes,
run one after another, do not.

    python3 bench/kernel_ab.py --pass bwd --masks sft_documents --batch 2 --kv-heads 8 \\
        --variant base: --variant ur:PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=1 --rounds 5

The pseudo-switch ``deterministic=1`` in a backward variant calls the deterministic backward
(``--kernel bwd`` then times the pre- and postprocess kernels too, as the deterministic mode's
bound compares whole backward passes).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Callable, Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from call_buffers import call_buffers  # noqa: E402
from gpu_trace import kernel_ops  # noqa: E402
from mask_zoo import make_zoo, opt_in_names  # noqa: E402

MAIN_KERNEL = {"fwd": "fwd_sm90", "bwd": "bwd_sm90"}


def parse_variant(text: str) -> tuple[str, dict]:
    """``label:NAME=VALUE,NAME=VALUE`` (no assignments: the defaults) -> (label, env)."""
    label, sep, assignments = text.partition(":")
    if not sep or not label:
        raise ValueError(f"--variant: expected 'label:NAME=VALUE,...', found {text!r}")
    env = {}
    for item in filter(None, assignments.split(",")):
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise ValueError(f"--variant {label}: expected NAME=VALUE, found {item!r}")
        env[name] = value
    return label, env


DETERMINISTIC = "deterministic"  # the variant pseudo-switch: not an environment variable


def split_deterministic(label: str, env: dict, which: str) -> tuple[dict, bool]:
    """A variant's environment without the ``deterministic`` pseudo-switch, and its value."""
    env = dict(env)
    value = env.pop(DETERMINISTIC, "0")
    if value not in ("0", "1"):
        raise ValueError(f"--variant {label}: expected {DETERMINISTIC}=0 or 1, found {value!r}")
    if value == "1" and which != "bwd":
        raise ValueError(f"--variant {label}: {DETERMINISTIC}=1 expected with --pass bwd, found "
                         f"--pass {which}")
    return env, value == "1"


def with_env(env: dict, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with ``env`` set (previous values restored afterwards)."""
    def run():
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            return fn()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    return run


def main_kernel_us(fn: Callable[[], object], calls: int, pattern: str,
                   per_kernel: Optional[dict] = None) -> float:
    """Device time per call of the kernels whose names contain ``pattern``; with ``per_kernel``,
    each of those kernels' time per call is appended there under its name (the split of a whole
    backward into pre-, main and postprocess kernels, from the same runs)."""
    ops = kernel_ops(fn, calls)
    matched = [(dur, name) for _, dur, name in ops if pattern in name]
    if not matched:
        raise RuntimeError(f"no kernel named like {pattern!r} ran; saw {sorted({n for *_, n in ops})}")
    if per_kernel is not None:
        by_name: dict = {}
        for dur, name in matched:
            by_name[name] = by_name.get(name, 0.0) + dur
        for name, dur in by_name.items():
            per_kernel.setdefault(name, []).append(round(dur / calls, 1))
    return sum(dur for dur, _ in matched) / calls


def kernel_split_text(kernels_us: dict) -> str:
    """``name us`` per kernel, the DSL's generated names without their common parts
    (``kernel_cutlass_dq_kernel_paddle_flashmaskopscuteflash_bwd_prepost...`` ->
    ``dq_kernel flash_bwd_prepost...``, at most 40 characters)."""
    def short(name: str) -> str:
        name = name.removeprefix("kernel_cutlass_").replace("_paddle_flashmaskopscute", " ")
        return name[:40]
    return ", ".join(f"{short(n)} {us:.1f}" for n, us in kernels_us.items())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pass", dest="which", choices=("fwd", "bwd"), default="bwd")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=8192)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=None)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--masks", default="sft_documents")
    p.add_argument("--variant", action="append", required=True,
                   help="label:NAME=VALUE,... (repeatable; 'base:' = the defaults)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--kernel", default=None, help="kernel-name substring (default by --pass)")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--tag", default="kernel_ab")
    args = p.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    pattern = args.kernel or MAIN_KERNEL[args.which]

    from paddle_flashmask.ops.cute import interface

    B, S, H, D = args.batch, args.seqlen, args.heads, args.head_dim
    Hk = args.kv_heads or H
    buf = call_buffers(B, S, H, Hk, D)
    q, k, v, do, out, lse = buf.q, buf.k, buf.v, buf.do, buf.out, buf.lse
    grads, stream, scale = buf.grads, buf.stream, buf.scale
    zoo = make_zoo(B, S, extra=opt_in_names(args.masks.split(",")))
    report = {"shape": {"B": B, "S": S, "H": H, "Hk": Hk, "D": D}, "pass": args.which,
              "calls": args.calls, "rounds": args.rounds, "kernel": pattern,
              "variants": {label: env for label, env in variants}, "masks": {}}
    for name in args.masks.split(","):
        mask = zoo[name]
        idx = None if mask.indices is None else torch.from_numpy(mask.indices).cuda()

        def fwd():
            interface.flashmask_fwd(q, k, v, out, lse, idx, causal=mask.causal,
                                    softmax_scale=scale, stream=stream)

        def bwd(deterministic: bool = False):
            interface.flashmask_bwd(q, k, v, out, do, lse, *grads, idx, causal=mask.causal,
                                    softmax_scale=scale, stream=stream,
                                    deterministic=deterministic)

        def target_of(label: str, env: dict):
            env, deterministic = split_deterministic(label, env, args.which)
            if args.which == "fwd":
                return with_env(env, fwd)
            return with_env(env, lambda: bwd(deterministic))

        fwd()  # out and lse for the backward, from the default forward
        runs = {label: target_of(label, env) for label, env in variants}
        for run in runs.values():  # compile every variant before timing any
            run()
        torch.cuda.synchronize()
        samples: dict = {label: [] for label in runs}
        kernels: dict = {label: {} for label in runs}  # label -> kernel name -> samples
        for _ in range(args.rounds):
            for label, run in runs.items():
                samples[label].append(round(main_kernel_us(run, args.calls, pattern,
                                                           kernels[label]), 1))
        base = statistics.median(samples[variants[0][0]])
        rec = {label: {"median_us": statistics.median(s), "min_us": min(s), "max_us": max(s),
                       "vs_first": round(statistics.median(s) / base, 4), "samples_us": s,
                       "kernels_median_us": {name: statistics.median(k)
                                             for name, k in kernels[label].items()}}
               for label, s in samples.items()}
        report["masks"][name] = rec
        print(name, " ".join(f"{label} {r['median_us']:.1f} ({r['min_us']:.1f}-{r['max_us']:.1f}, "
                             f"{r['vs_first']:.3f}x)" for label, r in rec.items()), flush=True)
        for label, r in rec.items():  # the split, where more than one kernel matched
            if len(r["kernels_median_us"]) > 1:
                print(f"  {label}:", kernel_split_text(r["kernels_median_us"]), flush=True)
    path = os.path.join(args.out, f"{args.tag}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
