"""paddle_flashmask vs its peers on the mask zoo, side by side in one process on one GPU.

    python3 bench/bench_attention.py [--cases 0,1,...] [--systems a,b] [--masks m1,m2] [--out DIR]

Systems: paddle_flashmask (cute backend), FlashAttention-4 (native causal / window, varlen for
documents), FA4 mask_mod + block-sparse tables, FlexAttention (compiled), SDPA cuDNN (full/causal).
Opt-in, only when --systems names it: fa4_no_pack_gqa (FA4 without its query-head packing, GQA
shapes only; a diagnostic, not a peer).
Every system's output and dQ are checked against an fp32 dense-mask reference (first heads) before
timing; a system with a wrong mask is reported with its error and left out of the table.
TFLOP/s count unmasked pairs only: fwd = 4·D·H·pairs (2·(D+Dv) in general), fwd+bwd = 3.5 x fwd.
Times are medians of triton.testing.do_bench (warm-up and JIT excluded; compile timed separately).
Writes bench-<tag>.json and bench-<tag>.png to --out (default $OUT or bench/results).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import triton.testing as tt  # noqa: E402

from mask_zoo import check_same_mask, dense_allowed, make_zoo, opt_in_names, visible_pairs  # noqa: E402
from plot_bench import plot  # noqa: E402

# (B, S, H, Hk, D): the shapes, then the extra rows (GQA 32/8, D=64, D=256)
CASES = [(4, 8192, 16, 16, 128), (1, 32768, 16, 16, 128), (4, 8192, 32, 8, 128),
         (4, 8192, 16, 16, 64), (4, 8192, 16, 16, 256),
         (2, 8192, 16, 8, 128)]  # 5: the end-to-end step's attention (with --masks sft_documents)
# systems run only when --systems names them (diagnostics, not peers)
OPT_IN_SYSTEMS = ("fa4_no_pack_gqa",)
REF_HEADS = 2  # reference check on the first query heads (fp32 dense math is O(S^2) memory)


def bench(fn) -> float:
    return tt.do_bench(fn, warmup=25, rep=100, return_mode="median")


def fp32_reference(q, k, v, do, allowed, heads):
    """fp32 dense masked attention on the first `heads` query heads: (out, dq) in BSHD."""
    group = q.shape[2] // k.shape[2]
    qh = q[:, :, :heads].float().transpose(1, 2).detach().requires_grad_()
    kh = k[:, :, [h // group for h in range(heads)]].float().transpose(1, 2).detach()
    vh = v[:, :, [h // group for h in range(heads)]].float().transpose(1, 2).detach()
    out = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed)
    # rows with no visible key: SDPA gives NaN, the contract says 0
    out = torch.nan_to_num(out, nan=0.0)
    out.backward(do[:, :, :heads].float().transpose(1, 2))
    return out.transpose(1, 2).detach(), qh.grad.transpose(1, 2).detach()


def systems_for(mask, B, S, H, Hk, D):
    """name -> builder returning (callable, differentiable inputs, layout)."""
    out = {}

    def ours():
        import paddle_flashmask.torch as pfm
        sri = None if mask.indices is None else torch.from_numpy(mask.indices).cuda()
        def f(q, k, v):
            return pfm.flashmask_attention(q, k, v, startend_row_indices=sri, causal=mask.causal,
                                           backend="cute")
        return f, "bshd"
    out["paddle_flashmask"] = ours

    def fa4(**extra):
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
        if mask.name in ("full", "causal"):
            return (lambda q, k, v: flash_attn_func(q, k, v, causal=mask.causal, **extra)), "bshd"
        if mask.name == "sliding_window":
            return (lambda q, k, v: flash_attn_func(q, k, v, causal=True,
                                                    window_size=(mask.window - 1, 0),
                                                    **extra)), "bshd"
        if mask.doc_lens is not None:
            lens = [n for row in mask.doc_lens for n in row]
            cu = torch.tensor([0] + lens, device="cuda").cumsum(0).to(torch.int32)
            mx = max(lens)
            return (lambda q, k, v: flash_attn_varlen_func(
                q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx, max_seqlen_k=mx,
                causal=mask.causal, **extra)), "packed"
        raise NotImplementedError("no native FA4 form for this mask")
    out["fa4"] = fa4
    if H != Hk:
        # FA4 packs a KV head's query heads into one M tile by default (pack_gqa); this runs
        # it with one query head per tile, as our forward does, to size what packing buys.
        # Opt-in only: a diagnostic, not a peer (OPT_IN_SYSTEMS).
        out["fa4_no_pack_gqa"] = lambda: fa4(pack_gqa=False)

    def fa4_mask_mod():
        from fa4_maskmod import build_fa4_mask_mod
        return build_fa4_mask_mod(mask, B, S), "bshd"
    if mask.name not in ("full",):
        out["fa4_mask_mod"] = fa4_mask_mod

    def flex():
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        bm = create_block_mask(lambda b, h, q, k: mask.predicate(b, q, k), B, None, S, S, device="cuda")
        compiled = torch.compile(flex_attention)
        gqa = H != Hk
        def f(q, k, v):
            return compiled(q, k, v, block_mask=bm, enable_gqa=gqa)
        return f, "bhsd"
    out["flex_attention"] = flex

    if mask.name in ("full", "causal"):
        def cudnn():
            from torch.nn.attention import SDPBackend, sdpa_kernel
            def f(q, k, v):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, is_causal=mask.causal, enable_gqa=H != Hk)
            return f, "bhsd"
        out["sdpa_cudnn"] = cudnn
    return out


def to_layout(t, layout, B, S):
    if layout == "bshd":
        return t
    if layout == "bhsd":
        return t.transpose(1, 2)
    return t.reshape(B * S, t.shape[2], t.shape[3])


def from_layout(t, layout, B, S):
    if layout == "bshd":
        return t
    if layout == "bhsd":
        return t.transpose(1, 2)
    return t.reshape(B, S, t.shape[1], t.shape[2])


def run_case(B, S, H, Hk, D, args, results, meta):
    torch.manual_seed(0)
    dt = torch.bfloat16
    q0 = torch.randn(B, S, H, D, device="cuda", dtype=dt)
    k0 = torch.randn(B, S, Hk, D, device="cuda", dtype=dt)
    v0 = torch.randn(B, S, Hk, D, device="cuda", dtype=dt)
    do0 = torch.randn(B, S, H, D, device="cuda", dtype=dt)
    zoo = make_zoo(B, S, extra=opt_in_names(args.masks))
    for name, mask in zoo.items():
        if args.masks and name not in args.masks:
            continue
        allowed = dense_allowed(mask, B, S)
        check_same_mask(mask, allowed, S)
        pairs = visible_pairs(mask, B, S) * H
        fl_f = 4 * D * pairs
        ref_o, ref_dq = fp32_reference(q0, k0, v0, do0, allowed, REF_HEADS)
        del allowed
        for sname, make in systems_for(mask, B, S, H, Hk, D).items():
            wanted = sname in args.systems if args.systems else sname not in OPT_IN_SYSTEMS
            if not wanted:
                continue
            rec = dict(B=B, S=S, H=H, Hk=Hk, D=D, mask=name, system=sname,
                       density=pairs / (B * H * S * S))
            try:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                f, lay = make()
                ins = [to_layout(t, lay, B, S).detach().clone().requires_grad_() for t in (q0, k0, v0)]
                gout = to_layout(do0, lay, B, S)
                first = lambda o: o[0] if isinstance(o, (tuple, list)) else o
                o = first(f(*ins))
                torch.cuda.synchronize()
                rec["first_call_s"] = time.perf_counter() - t0
                o = from_layout(o, lay, B, S)[:, :, :REF_HEADS].float()
                rec["rel_err_out"] = ((o - ref_o).norm() / ref_o.norm()).item()
                first(f(*ins)).backward(gout)
                dq = from_layout(ins[0].grad, lay, B, S)[:, :, :REF_HEADS].float()
                rec["rel_err_dq"] = ((dq - ref_dq).norm() / ref_dq.norm()).item()
                if not (rec["rel_err_out"] < 2e-2 and rec["rel_err_dq"] < 5e-2):
                    rec["error"] = f"wrong result: out err {rec['rel_err_out']:.3g}, dq err {rec['rel_err_dq']:.3g}"
                else:
                    def fb():
                        for t in ins:
                            t.grad = None
                        first(f(*ins)).backward(gout)
                    tf = bench(lambda: f(*ins))
                    tfb = bench(fb)
                    rec.update(fwd_ms=tf, fwdbwd_ms=tfb, fwd_tflops=fl_f / tf / 1e9,
                               fwdbwd_tflops=3.5 * fl_f / tfb / 1e9,
                               peak_mem_gb=torch.cuda.max_memory_allocated() / 2**30)
            except Exception as e:  # a peer that cannot run this mask is reported, not fatal
                rec["error"] = (type(e).__name__ + ": " + str(e))[:300]
                if args.verbose:
                    traceback.print_exc()
            results.append(rec)
            print(json.dumps(rec), flush=True)
            save(args, meta, results)  # partial results survive a time limit
        del ref_o, ref_dq


def save(args, meta, results) -> None:
    with open(os.path.join(args.out, f"bench-{args.tag}.json"), "w") as fh:
        json.dump({"meta": meta, "results": results}, fh, indent=1)


def compile_cache_times(case) -> dict:
    """First-call time in a fresh process with a warm disk cache (the compile itself is timed in-run)."""
    B, S, H, Hk, D = case
    code = (
        "import time,torch,paddle_flashmask.torch as p;"
        f"q=torch.randn({B},{S},{H},{D},device='cuda',dtype=torch.bfloat16);"
        f"k=torch.randn({B},{S},{Hk},{D},device='cuda',dtype=torch.bfloat16);"
        "t=time.perf_counter();p.flashmask_attention(q,k,k,causal=True,backend='cute');"
        "torch.cuda.synchronize();print(time.perf_counter()-t)"
    )
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        return {"fresh_process_first_call_s": float(r.stdout.strip().splitlines()[-1])}
    except Exception as e:
        return {"fresh_process_first_call_error": str(e)[:200]}


def versions() -> dict:
    v = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
         "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    from importlib import metadata
    # distribution names: FA4's package is ``flash_attn`` but its wheel is ``flash-attn-4``
    for mod, dist in (("cutlass", "nvidia-cutlass-dsl"), ("flash_attn", "flash-attn-4"),
                      ("triton", "triton"), ("paddle_flashmask", "paddle_flashmask")):
        try:
            m = __import__(mod)
            v[mod] = getattr(m, "__version__", None) or metadata.version(dist)
        except Exception as e:
            v[mod] = f"unavailable ({type(e).__name__})"
    from paddle_flashmask.ops.cute.cache import source_fingerprint
    v["kernel_sources"] = source_fingerprint()  # scripts/find_commit.py maps it to commits
    return v


def variant_compile_times(case, args) -> list:
    """Per kernel variant of this run's masks: first compile (empty cache) and load from the disk
    cache in a new process (bench/compile_times.py)."""
    import compile_times

    B, S, H, Hk, D = case
    forms = []
    opt_in = opt_in_names(args.masks)
    for name, mask in make_zoo(1, S if opt_in else 1024, device="cpu",
                               extra=opt_in).items():  # forms only: any size will do
        if args.masks and name not in args.masks:
            continue
        form = (mask.causal, None if mask.indices is None else int(mask.indices.shape[-1]))
        if form not in forms:
            forms.append(form)
    try:
        variants = compile_times.variants_for(forms, "bfloat16", D, H != Hk)
        return compile_times.measure(variants, jobs=max(1, min(8, (os.cpu_count() or 2) // 2)))
    except Exception as e:  # noqa: BLE001 - reported, never fatal to the benchmark
        return [{"error": f"{type(e).__name__}: {str(e)[:300]}"}]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="0,1", help="indices into CASES: " + str(CASES))
    ap.add_argument("--systems", default="", help="comma list (default: all)")
    ap.add_argument("--masks", default="", help="comma list (default: all)")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    args.systems = [s for s in args.systems.split(",") if s]
    args.masks = [s for s in args.masks.split(",") if s]
    os.makedirs(args.out, exist_ok=True)
    meta = versions()
    # the kernel-variant switches this run was given (A/B runs differ only in these)
    meta["env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith("PADDLE_FLASHMASK_")}
    print(json.dumps(meta), flush=True)
    results = []
    args.tag = args.tag or "cases" + args.cases.replace(",", "_")
    try:
        for i in args.cases.split(","):
            run_case(*CASES[int(i)], args, results, meta)
        if not args.systems or "paddle_flashmask" in args.systems:
            case = CASES[int(args.cases.split(",")[0])]
            meta["compile_cache"] = compile_cache_times(case)
            meta["compile_cache"]["variants"] = variant_compile_times(case, args)
    except KeyboardInterrupt:  # a time limit's SIGINT: keep what was measured, say it is partial
        meta["interrupted"] = f"SIGINT after {len(results)} rows"
        print(f"bench: interrupted after {len(results)} rows; writing them", flush=True)
    finish(args, meta, results)
    if "interrupted" in meta:
        sys.exit(130)


def finish(args, meta, results) -> None:
    """The run's JSON, plot and table (also for an interrupted run: its rows so far)."""
    save(args, meta, results)
    plot(results, os.path.join(args.out, f"bench-{args.tag}.png"))
    print_table(results)


def print_table(results):
    print("\n%-22s %-17s %6s %8s %7s %8s %7s %8s" % ("mask", "system", "S", "fwd_ms", "fwdTF", "fb_ms", "fbTF", "err"))
    for r in results:
        if "error" in r:
            print("%-22s %-17s %6d ERROR %s" % (r["mask"], r["system"], r["S"], r["error"][:70]))
        else:
            print("%-22s %-17s %6d %8.3f %7.1f %8.3f %7.1f %8.1e" % (
                r["mask"], r["system"], r["S"], r["fwd_ms"], r["fwd_tflops"], r["fwdbwd_ms"],
                r["fwdbwd_tflops"], r["rel_err_out"]))


if __name__ == "__main__":
    main()
