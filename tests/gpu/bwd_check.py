"""GPU check of the SM90 FlashMask backward against torch fp32 autograd of dense masked attention.

Run on an SM90 machine: ``python3 tests/gpu/bwd_check.py [--quick] [--bench]``. Writes
``$OUT/bwd_check.json`` (or ./bwd_check.json): per case the relative errors of dq/dk/dv/dsink
(``max|x - ref| / max|ref|``), NaN flags, compile time; the deterministic-mode bit-exactness over
10 reruns; with ``--bench`` timings. Exit status 1 if any case fails.

The backward's inputs O and LSE come from the same fp32 torch oracle (not from the forward kernel),
so this check is independent of the forward. Oracle gradients: autograd through the dense masked
softmax (``semantics.to_dense``) with rows of no visible key giving P = 0, in fp32 on the GPU. The
tile summary comes from ``semantics.tile_summary`` on the host. All outputs and workspaces are
poisoned with NaN / garbage before each run.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paddle_flashmask import semantics  # noqa: E402
from fwd_check import CASES_FULL as FWD_CASES, allowed_mask, make_mask  # noqa: E402  (shared GPU case matrix and mask zoo)

GRAD_TOL = {"bf16": 2e-2, "fp16": 1e-2}


def reference(torch, q, k, v, do, idx, causal, scale, sink):
    """fp32 dense attention with autograd: returns o, lse, dq, dk, dv, dsink."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    allowed = allowed_mask(idx, causal, b, sq, sk)
    hm = allowed.shape[1]
    allowed = torch.from_numpy(np.ascontiguousarray(allowed)).cuda().repeat_interleave(h // hm, 1)
    qf = q.float().detach().requires_grad_(True)
    kf = k.float().detach().requires_grad_(True)
    vf = v.float().detach().requires_grad_(True)
    sf = sink.detach().clone().requires_grad_(True) if sink is not None else None
    qh = qf.permute(0, 2, 1, 3)
    kh = kf.permute(0, 2, 1, 3).repeat_interleave(h // hk, dim=1)
    vh = vf.permute(0, 2, 1, 3).repeat_interleave(h // hk, dim=1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, -math.inf)
    m = s.amax(dim=-1, keepdim=True).detach()
    if sf is not None:
        m = torch.maximum(m, sf.detach().view(1, h, 1, 1).expand_as(m))
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)  # masked -> exactly 0
    denom = p.sum(-1, keepdim=True)
    if sf is not None:
        denom = denom + torch.exp(sf.view(1, h, 1, 1) - m)
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    o = torch.matmul(p / safe, vh).permute(0, 2, 1, 3)
    lse = torch.where(denom > 0, torch.log(safe) + m, torch.full_like(m, -math.inf)).squeeze(-1)
    o.backward(do.float())
    return (o.detach().contiguous(), lse.detach().contiguous(), qf.grad, kf.grad, vf.grad,
            None if sf is None else sf.grad)


def rel_err(torch, x, ref):
    x, ref = x.float(), ref.float()
    denom = max(ref.abs().max().item(), 1e-6)
    return (x - ref).abs().max().item() / denom


CASES_FULL = FWD_CASES + [  # the forward check's matrix, then:
    # opt-in register-operand (RS) dV/dK path (BwdConfig.rs_dkv=True, tile_n = 128)
    ("causal_d128_rs", "bf16", 128, 128, "causal", 2, 1000, 1000, 4, 2, "1", False),
    ("random_C4_rs", "bf16", 128, 128, "random4", 1, 700, 640, 4, 1, "1", False),
    ("fp16_d64_causal_doc_sink_rs", "fp16", 64, 64, "causal_doc", 2, 1000, 1000, 4, 2, "1", True),
    # heavy global key tiles next to light window tiles: both deterministic work classes
    ("causal_global_window_C2", "bf16", 128, 128, "causal_global_window", 2, 2000, 2000, 4, 2,
     "1", False),
    # an odd GQA group (6 query / 2 KV heads): the deterministic mode's partials reduction sums
    # members in pairs plus an odd last one (flash_bwd_prepost dkv_kernel)
    ("gqa3_causal_doc", "bf16", 128, 128, "causal_doc", 2, 1000, 1000, 6, 2, "1", False),
    # bidirectional GQA with partial 80-row query tiles (BwdConfig.tile_m = 80 under
    # PADDLE_FLASHMASK_BWD_TILE_M=80): Sq > Sk, and documents with a per-head mask
    ("full_gqa_sq_gt_sk", "bf16", 128, 128, "full", 2, 1000, 600, 8, 2, "1", False),
    ("doc_C2_gqa_partial", "bf16", 128, 128, "doc", 1, 777, 777, 4, 2, "H", False),
    # whole query tiles no key visits (rows 388-776: 80-row tiles 5-9): with the first store
    # (PADDLE_FLASHMASK_BWD_TALL_FIRST_STORE=1) their accumulator is never written, so the
    # postprocess must give them zeros from their tile flags
    ("empty_tail_C2_sq_ne_sk", "bf16", 128, 128, "empty_tail2", 2, 777, 700, 4, 2, "1", False),
    # D = 64 without a sink (the sink keeps 64-row tiles), so that PADDLE_FLASHMASK_BWD_TILE_M=128
    # runs 128-row tiles: partial last tiles, Sq != Sk, GQA (the head walk), C = 4 with empty rows
    ("d64_causal_doc_gqa_partial", "bf16", 64, 64, "causal_doc", 2, 777, 777, 4, 2, "1", False),
    ("d64_doc_C2_sq_gt_sk", "bf16", 64, 64, "doc", 1, 1000, 600, 4, 4, "H", False),
    ("d64_empty_rows_C4_sq_lt_sk", "fp16", 64, 64, "empty_rows4", 1, 500, 900, 2, 2, "1", False),
    ("d64_full", "bf16", 64, 64, "full", 1, 1000, 1000, 4, 4, "1", False),
]
CASES_QUICK = [c for c in CASES_FULL if c[0] in (
    "causal_d128", "causal_doc_C1", "random_C4", "empty_rows_C4_sink", "d256_causal_window_sink",
    "d192_random2", "fp16_d64_causal_doc_sink")]
DETERMINISM_CASES = ["causal_doc_C1", "random_C4", "d256_causal_window_sink",
                     "causal_global_window_C2", "gqa3_causal_doc"]


def backward_variant(dtype: str, d: int, causal: bool, cols, gqa: bool, has_sink: bool,
                     deterministic: bool, sms: int, *, rs_dkv=None, gqa_in_cta=None,
                     persistent=None, row_ranges=None, d256_stages=None, fused_dq=None):
    """The backward variant a case runs: the product's (``interface.backward_config``, every env
    switch included, as the host API picks it), then each CLI choice that was made (None: left
    to the product). One place, so an env switch cannot be silently ignored here."""
    from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd, interface

    cfg = interface.backward_config(dtype, d, causal, cols, gqa=gqa, has_sink=has_sink,
                                    deterministic=deterministic, num_sms=sms)
    over = {}
    if rs_dkv is not None:
        over["rs_dkv"] = rs_dkv
    if gqa and gqa_in_cta is not None:  # (the walk keeps dK/dV in registers: no group sum)
        over["gqa_in_cta"] = gqa_in_cta
        over["dkv_last"] = cfg.dkv_last and not gqa_in_cta
    if persistent:  # the deterministic mode too (one claim pass, its dQ chains' order)
        over["persistent_ctas"] = sms
    elif persistent is not None:
        cfg = cfg.one_cta_per_tile()
    if row_ranges is not None:
        over["row_ranges"] = row_ranges
    if d256_stages and d == 256:
        over["qdo_stages"] = d256_stages
    # fused dQ last: it depends on the grid and the smem layout chosen above
    want_fused = cfg.fused_dq if fused_dq is None else fused_dq
    cfg = dataclasses.replace(cfg, fused_dq=False, **over)
    if (want_fused and cfg.persistent and not cfg.deterministic and cfg.dq_in_smem
            and cfg.conv_rows > 0):
        cfg = dataclasses.replace(cfg, fused_dq=True, dq_count_lag=bwd.default_dq_count_lag())
    return cfg


class Runner:
    def __init__(self, torch, bwd_mod, cute_rt, row_ranges=None, rs_dkv=None, gqa_in_cta=None,
                 persistent=None, d256_stages=None, fused_dq=None):
        self.torch = torch
        self.bwd = bwd_mod
        self.rt = cute_rt
        self.compiled = {}
        # BwdConfig.row_ranges on every case (--row-ranges / --no-row-ranges; None: the default)
        self.row_ranges = row_ranges
        self.rs_dkv = rs_dkv  # BwdConfig.rs_dkv (--rs-dkv / --no-rs-dkv; None: the default)
        self.gqa_in_cta = gqa_in_cta  # BwdConfig.gqa_in_cta on GQA cases (--gqa-in-cta)
        self.persistent = persistent  # BwdConfig.persistent_ctas = SMs (--persistent)
        self.d256_stages = d256_stages  # BwdConfig.qdo_stages of D = 256 cases (--d256-stages)
        self.fused_dq = fused_dq  # BwdConfig.fused_dq where it applies (--fused-dq)
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count

    def get(self, cfg):
        t0 = time.time()
        if cfg not in self.compiled:
            self.compiled[cfg] = self.bwd.compile_backward_all(cfg)
        return self.compiled[cfg], time.time() - t0

    def prepare(self, case, seed):
        torch = self.torch
        name, dt, d, dv, kind, b, sq, sk, h, hk, hm_mode, has_sink = case
        rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        hm = {"1": 1, "Hk": hk, "H": h}[hm_mode]
        tdt = torch.bfloat16 if dt == "bf16" else torch.float16
        idx, causal = make_mask(kind, rng, b, hm, sq, sk)
        q = torch.randn(b, sq, h, d, device="cuda", dtype=tdt)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=tdt)
        v = torch.randn(b, sk, hk, dv, device="cuda", dtype=tdt)
        do = torch.randn(b, sq, h, dv, device="cuda", dtype=tdt)
        sink = (torch.randn(h, device="cuda", dtype=torch.float32) * 2) if has_sink else None
        scale = 1.0 / math.sqrt(d)
        ref = reference(torch, q, k, v, do, idx, causal, scale, sink)
        return dict(name=name, dt=dt, d=d, dv=dv, b=b, sq=sq, sk=sk, h=h, hk=hk, idx=idx,
                    causal=causal, q=q, k=k, v=v, do=do, sink=sink, scale=scale, ref=ref,
                    out=ref[0].to(tdt), lse=ref[1])

    def run(self, p, deterministic):
        torch = self.torch
        cols = None if p["idx"] is None else p["idx"].shape[-1]
        gqa = p["h"] != p["hk"]
        cfg = backward_variant(
            p["dt"].replace("bf16", "bfloat16").replace("fp16", "float16"), p["d"], p["causal"],
            cols, gqa, p["sink"] is not None, deterministic, self.sms,
            rs_dkv=True if p["name"].endswith("_rs") else self.rs_dkv,
            gqa_in_cta=self.gqa_in_cta, persistent=self.persistent, row_ranges=self.row_ranges,
            d256_stages=self.d256_stages, fused_dq=self.fused_dq)
        fn, compile_s = self.get(cfg)
        b, sq, sk, h, hk = p["b"], p["sq"], p["sk"], p["h"], p["hk"]
        nan = float("nan")
        dq = torch.full_like(p["q"], nan)
        dk = torch.full_like(p["k"], nan)
        dv = torch.full_like(p["v"], nan)
        dsink = torch.full((h,), nan, device="cuda") if p["sink"] is not None else None
        ws = {}
        for wname, (shape, dtype) in self.bwd.workspace_shapes(cfg, b, sq, sk, h, hk).items():
            tdt = torch.float32 if dtype == "float32" else torch.int32
            t = torch.empty(shape, device="cuda", dtype=tdt)
            t.fill_(nan if tdt == torch.float32 else 12345)  # poison: kernels must initialise
            ws[wname] = t
        idx_t = cmin = cmax = None
        if p["idx"] is not None:
            summ = semantics.tile_summary(p["idx"], cfg.tile_n)
            idx_t = torch.from_numpy(p["idx"]).cuda()
            cmin = torch.from_numpy(np.ascontiguousarray(summ.col_min)).cuda()
            cmax = torch.from_numpy(np.ascontiguousarray(summ.col_max)).cuda()
        dl = lambda x: None if x is None else self.rt.from_dlpack(x, assumed_align=16)  # noqa
        stream = torch.cuda.current_stream().cuda_stream
        args = (dl(p["q"]), dl(p["k"]), dl(p["v"]), dl(p["out"]), dl(p["do"]), dl(p["lse"]),
                dl(dq), dl(dk), dl(dv), dl(idx_t), dl(cmin), dl(cmax), dl(p["sink"]), dl(dsink),
                {n: dl(t) for n, t in ws.items()}, p["scale"], stream)
        fn(*args)
        torch.cuda.synchronize()
        if cfg.claim_list:  # the class-sorted list against its host oracle
            from paddle_flashmask.ops.cute import bwd_claim_list as claims

            want = claims.reference_classes(cfg, p["idx"], b, sq, sk, h, hk)
            problems = claims.check_claim_list(ws["claim_order"].cpu().numpy(),
                                               ws["item_classes"].cpu().numpy(), want)
            if problems:
                raise AssertionError(f"{p['name']}: claim list: {'; '.join(problems)}")
        return cfg, compile_s, (dq, dk, dv, dsink), (fn, args)


def check_case(runner, case, seed, tol_scale=1.0):
    torch = runner.torch
    p = runner.prepare(case, seed)
    cfg, compile_s, (dq, dk, dv, dsink), _ = runner.run(p, deterministic=False)
    _, _, rdq, rdk, rdv, rdsink = p["ref"]
    res = {"name": p["name"], "config": repr(cfg), "compile_s": round(compile_s, 2)}
    tol = GRAD_TOL[p["dt"]] * tol_scale
    ok = True
    for nm, x, r in (("dq", dq, rdq), ("dk", dk, rdk), ("dv", dv, rdv), ("dsink", dsink, rdsink)):
        if x is None:
            continue
        nan = bool(torch.isnan(x).any().item())
        err = rel_err(torch, x, r)
        res[f"{nm}_rel_err"] = err
        res[f"{nm}_nan"] = nan
        ok = ok and not nan and err <= tol
    res["pass"] = ok
    return res


def determinism(runner, case, seed, reruns=10):
    torch = runner.torch
    p = runner.prepare(case, seed)
    outs = []
    for _ in range(reruns):
        _, _, grads, _ = runner.run(p, deterministic=True)
        outs.append([g.clone() if g is not None else None for g in grads])
    same = all(all((a is None and c is None) or torch.equal(a, c)
                   for a, c in zip(outs[0], o)) for o in outs[1:])
    _, _, rdq, rdk, rdv, rdsink = p["ref"]
    errs = {nm: rel_err(torch, x, r) for nm, x, r in zip(("dq", "dk", "dv"), outs[0][:3],
                                                          (rdq, rdk, rdv))}
    ok = same and all(e <= GRAD_TOL[p["dt"]] for e in errs.values())
    return {"name": p["name"], "reruns": reruns, "bit_identical": same, "rel_err": errs,
            "pass": ok}


def large_determinism(runner, seed, kind="causal", s=32768, h=2, d=128):
    """Deterministic mode with more key tiles per (b, h) than SMs (no deadlock, bit-exact) and
    agreement with the default mode; no dense oracle at this size."""
    torch = runner.torch
    rng = np.random.default_rng(seed)
    idx, causal = make_mask(kind, rng, 1, 1, s, s)
    q = torch.randn(1, s, h, d, device="cuda", dtype=torch.bfloat16)
    p = dict(name=f"large_det_{kind}", dt="bf16", d=d, dv=d, b=1, sq=s, sk=s, h=h, hk=h, idx=idx,
             causal=causal, q=q, k=torch.randn_like(q), v=torch.randn_like(q),
             do=torch.randn_like(q), sink=None, scale=d ** -0.5, out=torch.randn_like(q),
             lse=torch.randn(1, h, s, device="cuda") + 8)
    t0 = time.time()
    _, _, ref, _ = runner.run(p, deterministic=False)
    ref = [g.clone() for g in ref[:3]]
    runs = []
    for _ in range(2):
        _, _, g, _ = runner.run(p, deterministic=True)
        runs.append([x.clone() for x in g[:3]])
    same = all(torch.equal(a, c) for a, c in zip(*runs))
    errs = {nm: rel_err(torch, x, r) for nm, x, r in zip(("dq", "dk", "dv"), runs[0], ref)}
    ok = same and all(e <= 1e-2 for e in errs.values())
    return {"name": p["name"], "seqlen": s, "key_tiles": -(-s // 128), "bit_identical": same,
            "rel_err_vs_default": errs, "seconds": round(time.time() - t0, 1), "pass": ok}


def bench(runner, seed):
    torch = runner.torch
    rows = []
    # (mask, Hk): H = 16; the GQA row is the end-to-end model's layout (16 query / 8 KV heads)
    for kind, hk in (("full", 16), ("causal", 16), ("causal_doc", 16), ("causal_doc", 8)):
        # no dense oracle at this size: timing only, on random inputs
        rng = np.random.default_rng(seed)
        idx, causal = make_mask(kind, rng, 2, 1, 8192, 8192)
        b, s, h, d = 2, 8192, 16, 128
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
        name = f"bench_{kind}" + ("" if hk == h else f"_gqa{h}_{hk}")
        p = dict(name=name, dt="bf16", d=d, dv=d, b=b, sq=s, sk=s, h=h, hk=hk, idx=idx,
                 causal=causal, q=q, k=k, v=torch.randn_like(k),
                 do=torch.randn_like(q), sink=None, scale=d ** -0.5,
                 out=torch.randn_like(q), lse=torch.randn(b, h, s, device="cuda") + 5)
        res = {"name": name}
        for det in (False, True):
            _, _, _, (fn, args) = runner.run(p, deterministic=det)
            for _ in range(2):
                fn(*args)
            torch.cuda.synchronize()
            st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            st.record()
            n = 5
            for _ in range(n):
                fn(*args)
            en.record()
            torch.cuda.synchronize()
            ms = st.elapsed_time(en) / n
            pairs = semantics.dense_pair_count(causal, s, s) * b * h if idx is None else \
                semantics.head_pairs(semantics.count_visible_pairs(idx, causal, s), h)
            tflops = 2.5 * 4 * d * pairs / (ms * 1e-3) / 1e12
            res["det_ms" if det else "ms"] = ms
            res["det_tflops" if det else "tflops"] = tflops
        rows.append(res)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--row-ranges", action="store_true", default=None,
                    help="every case with BwdConfig.row_ranges (per-key-tile query-tile ranges)")
    ap.add_argument("--no-row-ranges", dest="row_ranges", action="store_false",
                    help="every case without BwdConfig.row_ranges")
    ap.add_argument("--rs-dkv", action="store_true", default=None,
                    help="every case with BwdConfig.rs_dkv (dV/dK wgmma from registers; tile_n 128)")
    ap.add_argument("--no-rs-dkv", dest="rs_dkv", action="store_false",
                    help="every case with the smem-operand dV/dK path")
    ap.add_argument("--persistent", action="store_true", default=None,
                    help="every case on a persistent grid (BwdConfig.persistent_ctas)")
    ap.add_argument("--gqa-in-cta", action="store_true", default=None,
                    help="GQA cases with one CTA per KV head walking its query heads "
                         "(BwdConfig.gqa_in_cta)")
    ap.add_argument("--d256-stages", type=int, choices=(1, 2), default=None,
                    help="Q/dO stages of the D = 256 cases (1: dQ by bulk reduce from smem)")
    ap.add_argument("--fused-dq", action="store_true", default=None,
                    help="BwdConfig.fused_dq where it applies (default: the product's default)")
    ap.add_argument("--no-fused-dq", dest="fused_dq", action="store_false")
    ap.add_argument("--det-cases", default="",
                    help="comma list of CASES_FULL names for the 10-rerun determinism check "
                         "(default: DETERMINISM_CASES)")
    ap.add_argument("--large-det-dim", type=int, default=128, choices=(64, 128),
                    help="head dim of the 32K-token determinism runs")
    ap.add_argument("--no-determinism", action="store_true",
                    help="skip the bit-identical rerun cases (for an --only run of a few cases)")
    ap.add_argument("--json-name", default="bwd_check.json",
                    help="file name of the JSON report under $OUT")
    args = ap.parse_args()
    import torch
    import cutlass.cute.runtime as cute_rt
    from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd_mod

    runner = Runner(torch, bwd_mod, cute_rt, row_ranges=args.row_ranges, rs_dkv=args.rs_dkv,
                    gqa_in_cta=args.gqa_in_cta, persistent=args.persistent,
                    d256_stages=args.d256_stages, fused_dq=args.fused_dq)
    cases = CASES_QUICK if args.quick else CASES_FULL
    if args.only:
        cases = [c for c in CASES_FULL if c[0] in args.only.split(",")]
    report = {"device": torch.cuda.get_device_name(), "cases": [], "determinism": []}
    t0 = time.time()
    for i, case in enumerate(cases):
        try:
            res = check_case(runner, case, seed=1000 + i)
        except Exception as e:  # keep going: one broken variant must not hide the others
            res = {"name": case[0], "pass": False, "error": f"{type(e).__name__}: {e}",
                   "trace": traceback.format_exc()[-2000:]}
        print(json.dumps(res), flush=True)
        report["cases"].append(res)
    det_cases = args.det_cases.split(",") if args.det_cases else DETERMINISM_CASES
    for name in ([] if args.no_determinism else det_cases):
        case = next(c for c in CASES_FULL if c[0] == name)
        try:
            res = determinism(runner, case, seed=7)
        except Exception as e:
            res = {"name": name, "pass": False, "error": f"{type(e).__name__}: {e}",
                   "trace": traceback.format_exc()[-2000:]}
        print(json.dumps(res), flush=True)
        report["determinism"].append(res)
    for kind in (() if args.no_determinism else ("causal", "causal_doc", "causal_global_window")):
        try:
            res = large_determinism(runner, seed=11, kind=kind, d=args.large_det_dim)
        except Exception as e:
            res = {"name": f"large_det_{kind}", "pass": False,
                   "error": f"{type(e).__name__}: {e}"}
        print(json.dumps(res), flush=True)
        report["determinism"].append(res)
    if args.bench:
        try:
            report["bench"] = bench(runner, seed=3)
        except Exception as e:
            report["bench"] = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(report["bench"]), flush=True)
    report["seconds"] = round(time.time() - t0, 1)
    report["passed"] = sum(r["pass"] for r in report["cases"])
    report["total"] = len(report["cases"])
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / args.json_name).write_text(json.dumps(report, indent=1))
    print(f"passed {report['passed']}/{report['total']}, determinism "
          f"{[r.get('bit_identical') for r in report['determinism']]}")
    ok = report["passed"] == report["total"] and all(r["pass"] for r in report["determinism"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
