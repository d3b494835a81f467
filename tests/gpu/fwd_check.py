"""GPU check of the SM90 FlashMask forward kernel against fp32 dense attention (torch, on the GPU).

Run on an SM90 machine: ``python3 tests/gpu/fwd_check.py [--quick] [--bench] [--fast]
[--work-order]``. Writes
``$OUT/fwd_check.json`` (or ./fwd_check.json) with per-case errors, compile times and, with
``--bench``, timings/TFLOP/s. Exit status 1 if any case fails its threshold.

Oracle: the dense mask from ``semantics.to_dense``, scores in fp32, softmax with the learnable sink
in the denominator, rows with no visible key -> O = 0, LSE = -inf (or = sink). The tile summary
is computed with ``semantics.tile_summary`` on the host, so this check does not depend on the
GPU summary kernel. Outputs are poisoned with NaN before each run.

``--work-order``: every case runs with ``FwdConfig.work_order`` (the persistent CTAs take query
tiles from the GPU-computed heaviest-first order). Each case then also checks the order itself
against the numpy reference of ``work_order_kernel`` (per-query-tile weights from
``semantics.classify_tiles`` equal the GPU's, the order is a permutation of all work items and its
item weights equal the reference sequence, heaviest first). With ``--bench``, A/B rows of the
same shapes without and with the work order (the order kernels are inside the timed call).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from paddle_flashmask import semantics  # noqa: E402


# ------------------------------------------------------------------------------------------------
# Masks: random and structured, every (causal, C) form
# ------------------------------------------------------------------------------------------------

def doc_ends(seqlen: int, doc_lens: list[int]) -> np.ndarray:
    """Per key column: the end row of its document (keys past the documents are padding: 0)."""
    ends = np.zeros(seqlen, dtype=np.int64)
    start = 0
    for n in doc_lens:
        ends[start:start + n] = start + n
        start += n
    return ends, min(start, seqlen)


def make_mask(kind: str, rng, b: int, hm: int, sq: int, sk: int):
    """(indices int32 [B,Hm,Sk,C] or None, causal)."""
    if kind in ("causal", "full"):
        return None, kind == "causal"
    cols = np.arange(sk)
    out = []
    for _ in range(b * hm):
        if kind == "causal_doc":  # C=1: documents, causal inside; padding keys never visible
            lens = list(rng.integers(1, max(2, sk // 3), size=8))
            ends, total = doc_ends(sk, lens)
            lts = np.where(cols < total, np.minimum(ends, sq), 0)
            v = lts[:, None]
        elif kind == "causal_window":  # C=2 sliding window: row i sees [i - w, i]
            w = int(rng.integers(1, max(2, sk // 4)))
            off = sk - sq
            lts = np.clip(cols - off + w + 1, 0, sq)
            v = np.stack([lts, np.full(sk, sq)], axis=1)
        elif kind == "causal_global_window":  # C=2: a few global keys, then a causal window
            g, w = int(rng.integers(1, 200)), int(rng.integers(64, 300))
            off = sk - sq
            lts = np.where(cols < g, sq, np.clip(cols - off + w + 1, 0, sq))
            v = np.stack([lts, np.full(sk, sq)], axis=1)
        elif kind == "causal_random2":  # C=2 arbitrary bands
            a = rng.integers(0, sq + 1, size=sk)
            e = np.minimum(a + rng.integers(0, sq + 1, size=sk), sq)
            v = np.stack([a, e], axis=1)
        elif kind == "doc":  # non-causal C=2 documents with padding rows/keys
            lens = list(rng.integers(1, max(2, min(sq, sk) // 3), size=6))
            ends, total = doc_ends(sk, lens)
            starts = np.zeros(sk, dtype=np.int64)
            s0 = 0
            for n in lens:
                starts[s0:s0 + n] = s0
                s0 += n
            lts = np.where(cols < total, np.minimum(ends, sq), 0)
            ute = np.where(cols < total, np.minimum(starts, sq), 0)
            v = np.stack([lts, ute], axis=1)
        elif kind == "random2":  # non-causal C=2: LTS, UTE random (UTE <= LTS)
            a = rng.integers(0, sq + 1, size=sk)
            u = rng.integers(0, a + 1)
            v = np.stack([a, u], axis=1)
        elif kind == "random4":  # non-causal C=4: two random bands
            lts = rng.integers(0, sq + 1, size=sk)
            lte = np.minimum(lts + rng.integers(0, sq // 2 + 1, size=sk), sq)
            uts = rng.integers(0, sq + 1, size=sk)
            ute = np.minimum(uts + rng.integers(0, sq // 2 + 1, size=sk), sq)
            v = np.stack([lts, lte, uts, ute], axis=1)
        elif kind == "empty_tail2":  # non-causal C=2: the rows from sq // 2 on see nothing
            v = np.stack([np.full(sk, sq // 2), np.zeros(sk, dtype=np.int64)], axis=1)
        elif kind == "empty_rows4":  # C=4 where a block of rows sees nothing
            lo, hi = sq // 3, sq // 3 + 70
            v = np.stack([np.full(sk, lo), np.full(sk, hi), np.full(sk, sq), np.full(sk, sq)], 1)
        else:
            raise ValueError(kind)
        out.append(v)
    idx = np.stack(out).reshape(b, hm, sk, -1).astype(np.int32)
    causal = kind.startswith("causal")
    return idx, causal


# ------------------------------------------------------------------------------------------------
# Reference
# ------------------------------------------------------------------------------------------------

def allowed_mask(idx, causal: bool, b: int, sq: int, sk: int) -> np.ndarray:
    """bool [B, Hm, Sq, Sk], True = may attend: ``to_dense`` of the indices, or plain attention
    (bottom-right causal / full) when there are none. Shared by the forward and backward checks."""
    if idx is not None:
        return semantics.to_dense(idx, causal, sq)
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    allowed = (j <= i + (sk - sq)) if causal else np.ones((sq, sk), bool)
    return np.broadcast_to(allowed, (b, 1, sq, sk))


def reference(torch, q, k, v, idx, causal, scale, sink):
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    allowed = allowed_mask(idx, causal, b, sq, sk)
    hm = allowed.shape[1]
    allowed = torch.from_numpy(np.ascontiguousarray(allowed)).cuda()
    allowed = allowed.repeat_interleave(h // hm, dim=1)  # [B,H,Sq,Sk]
    qf = q.float().permute(0, 2, 1, 3)
    kf = k.float().permute(0, 2, 1, 3).repeat_interleave(h // hk, dim=1)
    vf = v.float().permute(0, 2, 1, 3).repeat_interleave(h // hk, dim=1)
    s = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    if sink is not None:
        m = torch.maximum(m, sink.view(1, h, 1, 1).expand_as(m))
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m_safe)
    denom = p.sum(-1, keepdim=True)
    if sink is not None:
        denom = denom + torch.exp(sink.view(1, h, 1, 1) - m_safe)
    o = torch.matmul(p, vf) / torch.where(denom > 0, denom, torch.ones_like(denom))
    lse = (torch.log(denom) + m_safe).squeeze(-1)
    lse = torch.where(denom.squeeze(-1) > 0, lse, torch.full_like(lse, -math.inf))
    return o.permute(0, 2, 1, 3).contiguous(), lse  # [B,Sq,H,Dv], [B,H,Sq]


# ------------------------------------------------------------------------------------------------
# Runner
# ------------------------------------------------------------------------------------------------

CASES_FULL = [
    # name, dtype, d, dv, mask kind, B, Sq, Sk, H, Hk, Hm-mode, sink
    ("causal_d128", "bf16", 128, 128, "causal", 2, 1000, 1000, 4, 2, "1", False),
    ("full_d128_sq_ne_sk", "bf16", 128, 128, "full", 2, 300, 700, 4, 4, "1", False),
    ("causal_d128_sq_lt_sk", "bf16", 128, 128, "causal", 1, 333, 1000, 2, 1, "1", False),
    ("causal_d128_sq_gt_sk", "bf16", 128, 128, "causal", 1, 1000, 333, 2, 2, "1", False),
    ("causal_doc_C1", "bf16", 128, 128, "causal_doc", 2, 1024, 1024, 4, 2, "1", False),
    ("causal_doc_C1_partial", "bf16", 128, 128, "causal_doc", 1, 777, 777, 4, 4, "H", False),
    ("causal_window_C2", "bf16", 128, 128, "causal_window", 2, 900, 900, 4, 2, "Hk", False),
    ("causal_random_C2", "bf16", 128, 128, "causal_random2", 1, 600, 600, 2, 1, "H", False),
    ("causal_window_C2_sq_lt_sk", "bf16", 128, 128, "causal_window", 1, 400, 900, 2, 2, "1", False),
    ("doc_C2_padding", "bf16", 128, 128, "doc", 2, 1000, 1000, 4, 4, "1", False),
    ("random_C2", "bf16", 128, 128, "random2", 1, 640, 700, 4, 2, "Hk", False),
    ("random_C4", "bf16", 128, 128, "random4", 1, 700, 640, 4, 1, "1", False),
    ("empty_rows_C4", "bf16", 128, 128, "empty_rows4", 1, 500, 500, 2, 2, "1", False),
    ("empty_rows_C4_sink", "bf16", 128, 128, "empty_rows4", 1, 500, 500, 2, 2, "1", True),
    ("fp16_d64_causal_doc_sink", "fp16", 64, 64, "causal_doc", 2, 1000, 1000, 4, 2, "1", True),
    ("fp16_d128_random4", "fp16", 128, 128, "random4", 1, 512, 512, 2, 2, "H", False),
    ("d96_causal", "bf16", 96, 96, "causal", 1, 700, 700, 4, 4, "1", False),
    ("d96_doc", "bf16", 96, 96, "doc", 1, 700, 700, 4, 4, "1", False),
    ("d192_random2", "bf16", 192, 128, "random2", 1, 600, 600, 4, 2, "1", False),
    ("d192_causal", "bf16", 192, 128, "causal", 1, 600, 600, 4, 2, "1", False),
    ("d256_causal_window_sink", "bf16", 256, 256, "causal_window", 1, 600, 600, 4, 2, "1", True),
    ("d256_full", "bf16", 256, 256, "full", 1, 300, 500, 2, 2, "1", False),
    ("mqa_causal_doc", "bf16", 128, 128, "causal_doc", 1, 800, 800, 8, 1, "1", False),
    ("d64_full_sink", "bf16", 64, 64, "full", 1, 257, 513, 4, 2, "1", True),
]

CASES_QUICK = [c for c in CASES_FULL if c[0] in (
    "causal_d128", "causal_doc_C1", "random_C4", "empty_rows_C4_sink", "d256_causal_window_sink")]


def work_order_buffers(torch, compiled_cache, cfg, b, sq, sk, h, hm):
    """(compiled work-order kernels, workspace, order) for forward config ``cfg``; the buffers
    are poisoned with -7 so an item the kernels never write shows up."""
    from paddle_flashmask.ops.cute import work_order_kernel as wo

    wcfg = wo.WorkOrderConfig.for_forward(cfg)
    if wcfg not in compiled_cache:
        compiled_cache[wcfg] = wo.CompiledWorkOrder(wcfg, wo.compile_work_order(wcfg))
    workspace = torch.full((wo.workspace_elems(wcfg, b, hm, sq, sk),), -7, device="cuda",
                           dtype=torch.int32)
    order = torch.full((wo.order_length(wcfg, b, h, sq),), -7, device="cuda", dtype=torch.int32)
    return compiled_cache[wcfg], workspace, order


def make_work_order(torch, compiled_cache, cfg, cmin, cmax, b, sq, sk, h, hm, stream):
    """Run the work-order kernels for forward config ``cfg``; returns (workspace, order) tensors."""
    fn, workspace, order = work_order_buffers(torch, compiled_cache, cfg, b, sq, sk, h, hm)
    fn(cmin, cmax, workspace, order, b, sq, sk, h, hm, stream)
    return workspace, order


def check_work_order(workspace, order, idx, causal, cfg, b, sq, sk, h, hm) -> dict:
    """The GPU order against the numpy reference (weights from semantics.classify_tiles)."""
    from paddle_flashmask.ops.cute import work_order_kernel as wo

    ref = wo.reference_weights(idx, causal, b, sq, sk, cfg.tile_m, cfg.tile_n)  # [B, Hm, M]
    got = workspace.cpu().numpy()[:ref.size].reshape(ref.shape)
    weights_ok = bool((got == ref).all())
    order_np = order.cpu().numpy().astype(np.int64)
    total = order_np.size
    permutation = bool(np.array_equal(np.sort(order_np), np.arange(total)))
    sequence_ok = permutation and bool(np.array_equal(
        wo.item_weights(ref, h)[order_np], wo.reference_order_weights(ref, h)))
    return {"work_order_ok": weights_ok and permutation and sequence_ok,
            "work_weights_match": weights_ok, "work_order_permutation": permutation,
            "work_order_heaviest_first": sequence_ok, "work_items": int(total),
            "work_weight_max": int(ref.max()) if ref.size else 0,
            "work_weight_min": int(ref.min()) if ref.size else 0}


def device_mask(torch, idx, tile_n):
    """(indices, col_min, col_max) on the GPU, the summary from ``semantics.tile_summary`` (the
    host oracle of the summary kernel); all None for plain attention."""
    if idx is None:
        return None, None, None
    summ = semantics.tile_summary(idx, tile_n)
    return tuple(torch.from_numpy(np.ascontiguousarray(a)).cuda()
                 for a in (idx, summ.col_min, summ.col_max))


def make_tile_ranges(torch, compiled_cache, cfg, cmin, cmax, b, sq, sk, hm, stream):
    """Run the tile-range kernel for forward config ``cfg``; the int32 ``[B, Hm, M, 2]`` ranges,
    poisoned with -7 first so an entry the kernel never writes shows up."""
    from paddle_flashmask.ops.cute import tile_range_kernel as tr

    rcfg = tr.TileRangeConfig.for_forward(cfg)
    if rcfg not in compiled_cache:
        compiled_cache[rcfg] = tr.CompiledTileRanges(rcfg, tr.compile_tile_ranges(rcfg))
    ranges = torch.full(tr.ranges_shape(b, hm, sq, cfg.tile_m), -7, device="cuda",
                        dtype=torch.int32)
    compiled_cache[rcfg](cmin, cmax, ranges, b, sq, sk, hm, stream)
    return ranges


def check_tile_ranges(ranges, idx, causal, cfg, sq) -> dict:
    """The GPU ranges against the numpy reference (from semantics.classify_tiles)."""
    from paddle_flashmask.ops.cute import tile_range_kernel as tr

    ref = tr.reference_ranges(idx, causal, sq, cfg.tile_m, cfg.tile_n)
    got = ranges.cpu().numpy()
    return {"tile_ranges_ok": bool(np.array_equal(got, ref)),
            "tile_ranges_mismatches": int((got != ref).any(axis=-1).sum())}


def schedule_counter(torch, cfg):
    """The dynamic schedule's work counter (the kernel wrapper zeroes it per launch), or None."""
    return torch.zeros(1, dtype=torch.int32, device="cuda") if cfg.dynamic_schedule else None


def run_case(torch, cute_rt, fwd_mod, compiled_cache, case, rng, num_sms, fast=False,
             work_order=False, tile_ranges=None, dynamic=None, partial_overlap=None,
             d128_override=None):
    name, dt, d, dv, kind, b, sq, sk, h, hk, hm_mode, has_sink = case
    hm = {"1": 1, "Hk": hk, "H": h}[hm_mode]
    tdt = torch.bfloat16 if dt == "bf16" else torch.float16
    idx, causal = make_mask(kind, rng, b, hm, sq, sk)
    cols = None if idx is None else idx.shape[-1]
    cfg = fwd_mod.default_config(dt, d, dv, causal, cols, has_sink, fast=fast,
                                 work_order=work_order, tile_ranges=tile_ranges,
                                 dynamic_schedule=dynamic, partial_overlap=partial_overlap)
    if d128_override and d == 128 and cfg.intra_wg_overlap:  # --d128-override: tile-shape A/B
        import dataclasses
        cfg = dataclasses.replace(cfg, **d128_override)
    t0 = time.time()
    if cfg not in compiled_cache:
        compiled_cache[cfg] = fwd_mod.compile_forward(cfg)
    compile_s = time.time() - t0
    fn = compiled_cache[cfg]
    q = torch.randn(b, sq, h, d, device="cuda", dtype=tdt)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=tdt)
    v = torch.randn(b, sk, hk, dv, device="cuda", dtype=tdt)
    sink = (torch.randn(h, device="cuda", dtype=torch.float32) * 2) if has_sink else None
    out = torch.full((b, sq, h, dv), float("nan"), device="cuda", dtype=tdt)
    lse = torch.full((b, h, sq), float("nan"), device="cuda", dtype=torch.float32)
    scale = 1.0 / math.sqrt(d)
    idx_t, cmin, cmax = device_mask(torch, idx, cfg.tile_n)
    dl = lambda x: None if x is None else cute_rt.from_dlpack(x, assumed_align=16)  # noqa: E731
    stream = torch.cuda.current_stream().cuda_stream
    order_info, order = {}, None
    if work_order:
        workspace, order = make_work_order(torch, compiled_cache, cfg, cmin, cmax, b, sq, sk, h,
                                           hm, stream)
    ranges = None
    if cfg.tile_ranges:
        ranges = make_tile_ranges(torch, compiled_cache, cfg, cmin, cmax, b, sq, sk, hm, stream)
    counter = schedule_counter(torch, cfg)
    fn(dl(q), dl(k), dl(v), dl(out), dl(lse), dl(idx_t), dl(cmin), dl(cmax), dl(sink), scale,
       stream, num_sms, work_order=order, tile_ranges=ranges, schedule_counter=counter)
    torch.cuda.synchronize()
    if cfg.tile_ranges:
        order_info.update(check_tile_ranges(ranges, idx, causal, cfg, sq))
    if work_order:
        # update, not replace: the tile-range check above wrote its verdict here too
        order_info.update(check_work_order(workspace, order, idx, causal, cfg, b, sq, sk, h, hm))
        # Each work tile runs the same code whatever its place in the order, so the default
        # scheduler should give the same bits (reported, not a pass criterion).
        import dataclasses
        base_cfg = dataclasses.replace(cfg, work_order=False)
        if base_cfg not in compiled_cache:
            compiled_cache[base_cfg] = fwd_mod.compile_forward(base_cfg)
        out_base, lse_base = torch.full_like(out, float("nan")), torch.full_like(lse, float("nan"))
        compiled_cache[base_cfg](dl(q), dl(k), dl(v), dl(out_base), dl(lse_base), dl(idx_t),
                                 dl(cmin), dl(cmax), dl(sink), scale, stream, num_sms,
                                 tile_ranges=ranges,
                                 schedule_counter=schedule_counter(torch, base_cfg))
        torch.cuda.synchronize()
        order_info["bitwise_equal_to_default"] = bool(
            torch.equal(out.view(torch.int16), out_base.view(torch.int16))
            and torch.equal(lse.view(torch.int32), lse_base.view(torch.int32)))
    ref_o, ref_lse = reference(torch, q, k, v, idx, causal, scale, sink)
    o = out.float()
    nan_out = bool(torch.isnan(o).any())
    err_o = float((o - ref_o).abs().max())
    ref_scale = float(ref_o.abs().max().clamp_min(1e-6))
    rel_o = err_o / ref_scale
    fin = torch.isfinite(ref_lse)
    inf_match = bool(((~fin) == (lse == -math.inf)).all()) if not has_sink else bool(
        torch.isfinite(lse).all())
    err_lse = float((lse[fin] - ref_lse[fin]).abs().max()) if bool(fin.any()) else 0.0
    empty_rows = int((~fin).sum()) if not has_sink else int(
        (ref_o.abs().amax(-1) == 0).sum())
    # skipping stats from the host-side classifier (same predicates as the kernel)
    stats = None
    if idx is not None:
        stats = semantics.computed_tile_counts(idx, causal, sq, cfg.tile_m, cfg.tile_n)
    ok = (not nan_out) and rel_o <= 1e-2 and err_lse <= 1e-2 and inf_match
    if work_order:
        ok = ok and order_info["work_order_ok"]
    if cfg.tile_ranges:
        ok = ok and order_info["tile_ranges_ok"]
    return {**order_info,
        "name": name, "ok": ok, "dtype": dt, "d": d, "dv": dv, "mask": kind, "causal": causal,
        "C": cols, "B": b, "Sq": sq, "Sk": sk, "H": h, "Hk": hk, "Hm": hm, "sink": has_sink,
        "tile_n": cfg.tile_n, "config": repr(cfg), "max_abs_err_o": err_o, "rel_err_o": rel_o, "max_abs_err_lse": err_lse,
        "nan_in_out": nan_out, "neg_inf_lse_match": inf_match, "empty_rows": empty_rows,
        "compile_s": round(compile_s, 2), "tiles": stats, "work_order": work_order,
        "tile_ranges": cfg.tile_ranges, "dynamic_schedule": cfg.dynamic_schedule,
        "partial_overlap": cfg.partial_overlap,
    }


def _bench_one(torch, cute_rt, fwd_mod, compiled_cache, num_sms, cfg, b, s, h, hk, d, dv,
               idx, causal, iters=20):
    if cfg not in compiled_cache:
        t0 = time.time()
        compiled_cache[cfg] = fwd_mod.compile_forward(cfg)
        compile_s = time.time() - t0
    else:
        compile_s = 0.0
    fn = compiled_cache[cfg]
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, hk, dv, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(b, s, h, dv, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    idx_t, cmin, cmax = device_mask(torch, idx, cfg.tile_n)
    dl = lambda x: None if x is None else cute_rt.from_dlpack(x, assumed_align=16)  # noqa
    args = [dl(x) for x in (q, k, v, out, lse, idx_t, cmin, cmax)] + [None]
    stream = torch.cuda.current_stream().cuda_stream
    hm = 1 if idx is None else idx.shape[1]
    order_fn = workspace = order = None
    if cfg.work_order:
        order_fn, workspace, order = work_order_buffers(torch, compiled_cache, cfg, b, s, s, h, hm)
    ranges = None  # computed once, as the host API caches them with the index tensor
    if cfg.tile_ranges:
        ranges = make_tile_ranges(torch, compiled_cache, cfg, cmin, cmax, b, s, s, hm, stream)
    counter = schedule_counter(torch, cfg)

    def call():
        if order_fn is not None:  # the ordering kernels are part of what is timed
            order_fn(cmin, cmax, workspace, order, b, s, s, h, hm, stream)
        fn(*args, 1.0 / math.sqrt(d), stream, num_sms, work_order=order, tile_ranges=ranges,
           schedule_counter=counter)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        call()
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / iters
    flops = semantics.attention_flops(idx, causal, s, s, b, h, d, dv)
    return ms, flops / ms / 1e9, compile_s


def bench_mask(kind: str, b: int, s: int):
    """Benchmark masks (Hm = 1): plain causal/full, causal documents of 1K, sliding window 1K."""
    if kind in ("causal", "full"):
        return None, kind == "causal"
    if kind == "causal_doc":
        ends, _ = doc_ends(s, [1024] * (s // 1024))
        return np.broadcast_to(ends[None, None, :, None], (b, 1, s, 1)).astype(np.int32).copy(), True
    if kind == "window":
        cols = np.arange(s)
        lts = np.clip(cols + 1024 + 1, 0, s)
        v = np.stack([lts, np.full(s, s)], axis=1)
        return np.broadcast_to(v[None, None], (b, 1, s, 2)).astype(np.int32).copy(), True
    raise ValueError(kind)


BENCH_ROWS = [
    # mask, B, S, H, Hk, D, Dv, fast path?, FwdConfig overrides
    # verified default first, so its numbers are printed even if a fast-path variant misbehaves
    ("causal", 2, 8192, 16, 16, 128, 128, False, {}),
    ("full", 2, 8192, 16, 16, 128, 128, False, {}),
    ("causal_doc", 2, 8192, 16, 16, 128, 128, False, {}),
    ("window", 2, 8192, 16, 16, 128, 128, False, {}),
    ("causal", 2, 8192, 16, 16, 64, 64, False, {}),
    ("causal", 2, 8192, 16, 16, 256, 256, False, {}),
    ("causal", 2, 8192, 16, 16, 128, 128, True, {}),
    ("causal", 2, 8192, 16, 16, 128, 128, True, {"pingpong": False}),
    ("causal", 2, 8192, 16, 16, 128, 128, True, {"tma_store_o": False}),
    ("full", 2, 8192, 16, 16, 128, 128, True, {}),
    ("causal_doc", 2, 8192, 16, 16, 128, 128, True, {}),
    ("window", 2, 8192, 16, 16, 128, 128, True, {}),
    ("causal", 2, 8192, 16, 16, 64, 64, True, {}),
    ("causal", 2, 8192, 16, 16, 256, 256, True, {}),
]


# A/B of the work-ordered scheduler (--work-order --bench): same shapes, off then on.
WORK_ORDER_BENCH_ROWS = [
    row for kind in ("causal", "causal_doc", "window", "full")
    for fast in (False, True)
    for row in ((kind, 2, 8192, 16, 16, 128, 128, fast, {}),
                (kind, 2, 8192, 16, 16, 128, 128, fast, {"work_order": True}))
]


# A/B of the per-query-tile key-tile ranges (--tile-ranges --bench): masked rows, off then on.
TILE_RANGES_BENCH_ROWS = [
    row for kind in ("causal_doc", "window")
    for row in ((kind, 2, 8192, 16, 16, 128, 128, True, {}),
                (kind, 2, 8192, 16, 16, 128, 128, True, {"tile_ranges": True}),
                (kind, 1, 32768, 16, 16, 128, 128, True, {}),
                (kind, 1, 32768, 16, 16, 128, 128, True, {"tile_ranges": True}))
]


# A/B of the dynamic persistent schedule (--dynamic --bench): off then on, masks and plain.
DYNAMIC_BENCH_ROWS = [
    row for kind, b, s in (("causal_doc", 2, 8192), ("window", 2, 8192), ("causal_doc", 1, 32768),
                           ("causal", 2, 8192), ("full", 2, 8192))
    for row in ((kind, b, s, 16, 16, 128, 128, True, {"dynamic_schedule": False}),
                (kind, b, s, 16, 16, 128, 128, True, {"dynamic_schedule": True}))
]


# A/B of masking partial tiles with P·V in flight (--partial-overlap --bench): off then on.
PARTIAL_OVERLAP_BENCH_ROWS = [
    row for kind, b, s in (("causal_doc", 2, 8192), ("window", 2, 8192), ("causal_doc", 1, 32768))
    for row in ((kind, b, s, 16, 16, 128, 128, True, {"partial_overlap": False}),
                (kind, b, s, 16, 16, 128, 128, True, {"partial_overlap": True}))
]


# A/B of the d128 fast path's tile shape (--tile-shapes --bench): 128x112 with a double-buffered Q
# (the default) vs 128x128 with one Q buffer (smem), with the default and the 24/240 register split.
TILE_SHAPE_BENCH_ROWS = [
    row for kind in ("full", "causal", "causal_doc")
    for row in ((kind, 2, 8192, 16, 16, 128, 128, True, {}),
                (kind, 2, 8192, 16, 16, 128, 128, True, {"tile_n": 128, "q_stages": 1}),
                (kind, 2, 8192, 16, 16, 128, 128, True,
                 {"tile_n": 128, "q_stages": 1, "producer_regs": 24, "consumer_regs": 240}))
]


def bench(torch, cute_rt, fwd_mod, compiled_cache, num_sms, rng, rows=BENCH_ROWS):
    import dataclasses
    results = []
    for kind, b, s, h, hk, d, dv, fast, over in rows:
        idx, causal = bench_mask(kind, b, s)
        cols = None if idx is None else idx.shape[-1]
        cfg = dataclasses.replace(
            fwd_mod.default_config("bf16", d, dv, causal, cols, False, fast=fast), **over)
        ms, tflops, compile_s = _bench_one(torch, cute_rt, fwd_mod, compiled_cache, num_sms, cfg,
                                           b, s, h, hk, d, dv, idx, causal)
        row = {"mask": kind, "B": b, "S": s, "H": h, "Hk": hk, "D": d, "Dv": dv,
               "fast": fast, "variant": over, "tile_n": cfg.tile_n, "ms": round(ms, 4),
               "tflops": round(tflops, 1), "compile_s": round(compile_s, 2)}
        results.append(row)
        print(json.dumps(row), flush=True)
    return results


def _write(report: dict, name: str = "fwd_check.json") -> None:
    out_dir = Path(os.environ.get("OUT", "."))
    (out_dir / name).write_text(json.dumps(report, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--bench-verified-only", action="store_true",
                    help="bench rows of the verified default only")
    ap.add_argument("--only", default="")
    ap.add_argument("--fast", action="store_true", help="force the fast-path configurations")
    ap.add_argument("--simple", action="store_true",
                    help="force the simple one-tile-at-a-time configurations (default: "
                         "what default_config picks, the fast path unless PADDLE_FLASHMASK_FWD_FAST=0)")
    ap.add_argument("--tile-ranges", action="store_true", default=None,
                    help="run every masked case with per-query-tile key-tile ranges and check them "
                         "(default: the product's default, on)")
    ap.add_argument("--no-tile-ranges", dest="tile_ranges", action="store_false",
                    help="run every case without tile ranges")
    ap.add_argument("--tile-shapes", action="store_true",
                    help="with --bench: the d128 tile-shape A/B rows")
    ap.add_argument("--d128-override", default="",
                    help='JSON FwdConfig overrides for the d128 fast-path cases, e.g. '
                         '\'{"tile_n": 128, "q_stages": 1}\'')
    ap.add_argument("--partial-overlap", action="store_true", default=None,
                    help="run every fast-path case masking partial tiles with P·V in flight; "
                         "with --bench, the partial-overlap A/B rows")
    ap.add_argument("--dynamic", action="store_true", default=None,
                    help="run every case with the dynamic persistent schedule; with --bench, "
                         "the dynamic-schedule A/B rows")
    ap.add_argument("--work-order", action="store_true",
                    help="run every case with the work-ordered scheduler and check the order")
    ap.add_argument("--json-name", default="fwd_check.json",
                    help="file name of the JSON report under $OUT (several runs in one call)")
    args = ap.parse_args()
    args.fast = True if args.fast else (False if args.simple else None)
    import torch
    import cutlass.cute.runtime as cute_rt
    from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd_mod

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    rng = np.random.default_rng(1234)
    torch.manual_seed(1234)
    cases = CASES_QUICK if args.quick else CASES_FULL
    if args.only:
        cases = [c for c in CASES_FULL if c[0] in args.only.split(",")]
    compiled = {}
    report = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "fast_path": args.fast, "work_order": args.work_order, "cases": []}
    for case in cases:
        try:
            r = run_case(torch, cute_rt, fwd_mod, compiled, case, rng, num_sms, fast=args.fast,
                         work_order=args.work_order, tile_ranges=args.tile_ranges,
                         dynamic=args.dynamic, partial_overlap=args.partial_overlap,
                         d128_override=json.loads(args.d128_override or "{}"))
        except Exception as exc:  # record and continue: one broken variant must not hide others
            r = {"name": case[0], "ok": False, "error": repr(exc)[:1500],
                 "trace": traceback.format_exc()[-3000:]}
        report["cases"].append(r)
        _write(report, args.json_name)  # incremental: a hung variant (killed by `timeout`) keeps earlier results
        print(json.dumps({k: r.get(k) for k in ("name", "ok", "rel_err_o", "max_abs_err_lse",
                                                  "empty_rows", "compile_s", "work_order_ok",
                                                  "tile_ranges_ok", "bitwise_equal_to_default",
                                                  "error")}),
              flush=True)
    if args.bench:
        try:
            rows = (WORK_ORDER_BENCH_ROWS if args.work_order else
                    DYNAMIC_BENCH_ROWS if args.dynamic else
                    PARTIAL_OVERLAP_BENCH_ROWS if args.partial_overlap else
                    TILE_SHAPE_BENCH_ROWS if args.tile_shapes else
                    TILE_RANGES_BENCH_ROWS if args.tile_ranges else BENCH_ROWS)
            rows = [r for r in rows if not (args.bench_verified_only and r[7])]
            report["bench"] = bench(torch, cute_rt, fwd_mod, compiled, num_sms, rng, rows)
        except Exception as exc:
            report["bench_error"] = traceback.format_exc()[-3000:]
            print(report["bench_error"], flush=True)
    n_ok = sum(1 for r in report["cases"] if r.get("ok"))
    report["summary"] = {"passed": n_ok, "total": len(report["cases"])}
    print(json.dumps(report["summary"]), flush=True)
    _write(report, args.json_name)
    return 0 if n_ok == len(report["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
