"""Compile the kernels for sm_90a without a GPU and check their SASS (DESIGN §4, CPU CI).

    python -m paddle_flashmask.ops.cute.compile_check [--full] [--json PATH] [--jobs N]
                                                      [--only REGEX] [--allow-missing-fast-path]

Compiles a representative set of variants (every head dim, every (causal, C) form and plain
causal / full attention, forward and backward, deterministic, GQA, sink, fp16) or, with ``--full``,
the whole matrix; for each kernel of each variant prints registers, shared memory, local-memory
frame and spills, and the SASS instruction mix (HGMMA = wgmma, UTMALDG = TMA load, ...).
The forward and backward main kernels must contain HGMMA and UTMALDG (the SM90 fast path of the
design); a kernel that silently fell off it makes the command exit non-zero.

How: each variant is compiled in a worker process whose DSL settings are
``CUTE_DSL_ARCH=sm_90a`` (compile for Hopper on any machine), ``CUTE_DSL_KEEP=cubin`` (the compiled
function keeps its cubin: ``compiled.__cubin__``), ``CUTE_DSL_COMPILER_OPT=remarks{ptx}`` (ptxas
prints its resource report, captured from the worker's stderr for the spill counts) and the DSL file
cache off (every variant really goes through ptxas). The cubin is read as an ELF: register counts
from the ``EIATTR_REGCOUNT`` records of ``.nv.info``, static shared memory from ``.nv.shared.*``;
the SASS from ``nvdisasm`` (package ``nvidia-cuda-nvdisasm``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

FAST_PATH_OPCODES = ("HGMMA", "UTMALDG")
# opcodes shown in the instruction-mix column, in this order (everything is in the JSON)
SHOWN_OPCODES = ("HGMMA", "UTMALDG", "UTMASTG", "UBLKCP", "LDGSTS", "LDSM", "STSM", "SYNCS",
                 "BAR", "MUFU", "REDG", "RED", "ATOMG", "LDL", "STL")
HEAD_DIMS = (64, 96, 128, 192, 256)
MASK_FORMS = ((True, None), (False, None), (True, 1), (True, 2), (False, 2), (False, 4))


# --------------------------------------------------------------------------------------------------
# Variants
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Variant:
    label: str
    kind: str  # summary | work_order | fwd | bwd | bwd_pre | bwd_post | bwd_claims
    config: Any
    fast_path: bool  # must contain HGMMA and UTMALDG


def _form_label(causal: bool, c: Optional[int]) -> str:
    if c is None:
        return "causal" if causal else "full"
    return f"{'causal' if causal else 'bidir'}-C{c}"


def variants(full: bool = False) -> list[Variant]:
    """The variants to compile: configs come from ``interface``, i.e. exactly what runs."""
    from . import interface
    from .bwd_rules import (TILE_M_ENV, with_dq_frag, with_shfl_stats, with_tile_m,
                            with_two_pds_stages)
    from .summary_kernel import SummaryConfig

    out: list[Variant] = []
    seen: set = set()

    def add(label: str, kind: str, config: Any, fast_path: bool) -> None:
        if (kind, config) not in seen:
            seen.add((kind, config))
            out.append(Variant(label, kind, config, fast_path))

    def fwd(dtype, d, causal, c, sink=False, work_order=False, tile_ranges=False, dynamic=True,
            partial_overlap=False, claim_passes=1, diagonal_partials=False, uniform_q=False,
            claimed_order=False, claim_block=1,
            rescale_threshold: float = 0.0, early_scan: Optional[bool] = None,
            tile_n: Optional[int] = None, consumer_wgs: Optional[int] = None,
            edge_pass: bool = False, mask_chain: Optional[bool] = None,
            max_chains: Optional[int] = None, max_rowwise: bool = False,
            sum_chains: Optional[int] = None, stage_first: bool = False,
            pingpong: Optional[bool] = None):
        cfg = interface.forward_config(dtype, d, causal, c, sink)
        extra = " sink" if sink else ""
        if consumer_wgs is not None:  # d64: 192 rows on three WGs (default) or 128 on two (env)
            from .flash_fwd_sm90 import with_consumer_warpgroups

            cfg = with_consumer_warpgroups(cfg, consumer_wgs)
            extra += f" m{cfg.tile_m}"
        if tile_n is not None:  # another key-tile width (e.g. d256's 128x64, env D256_TILE_N)
            cfg = dataclasses.replace(cfg, tile_n=tile_n)
            extra += f" n{tile_n}"
        if rescale_threshold:  # lazy O rescale (FwdConfig.rescale_threshold)
            cfg = dataclasses.replace(cfg, rescale_threshold=rescale_threshold)
            extra += f" rescale-threshold-{rescale_threshold:g}"
        if early_scan is not None:  # the producer's scan before / after the Q wait (early_scan)
            cfg = dataclasses.replace(cfg, early_scan=early_scan)
            extra += " early-scan" if early_scan else " late-scan"
        if edge_pass:  # the sequence edge as its own pass (FwdConfig.edge_pass)
            cfg = dataclasses.replace(cfg, edge_pass=True)
            extra += " edge-pass"
        if mask_chain is not None:  # one predicate chain and select per element, or not
            cfg = dataclasses.replace(cfg, mask_pred_chain=mask_chain)
            extra += " mask-chain" if mask_chain else " no-mask-chain"
        if max_chains is not None:  # the softmax's row max as split chains (row_max_chains)
            cfg = dataclasses.replace(cfg, row_max_chains=max_chains)
            extra += f" max-chains-{max_chains}"
        if max_rowwise:  # each row's split max right before its exponentials (row_max_rowwise)
            cfg = dataclasses.replace(cfg, row_max_rowwise=True)
            extra += " max-rowwise"
        if sum_chains is not None:  # the row sum as independent add chains (row_sum_chains)
            cfg = dataclasses.replace(cfg, row_sum_chains=sum_chains)
            extra += f" sum-chains-{sum_chains}"
        if stage_first:  # each GEMM's operand stage selected once (FwdConfig.stage_first)
            cfg = dataclasses.replace(cfg, stage_first=True)
            extra += " stage-first"
        if uniform_q:  # Q descriptors from the warpgroup's uniform slice (FwdConfig.uniform_q)
            cfg = dataclasses.replace(cfg, uniform_q=True)
            extra += " uniform-q"
        if pingpong is not None:  # the consumer warpgroups' turns (FwdConfig.pingpong)
            cfg = dataclasses.replace(cfg, pingpong=pingpong)
            extra += " pingpong" if pingpong else " no-pingpong"
        if diagonal_partials:  # diagonal-only partial tiles (FwdConfig.diagonal_partials)
            cfg = dataclasses.replace(cfg, diagonal_partials=True)
            extra += " diagonal-partials"
        if claim_passes > 1:  # the dynamic schedule claims by work class (FwdConfig.claim_passes)
            cfg = dataclasses.replace(cfg, claim_passes=claim_passes, work_order=False,
                                      claim_block=claim_block)
            extra += f" claim-passes-{claim_passes}"
            extra += f" claim-block-{claim_block}" if claim_block > 1 else ""
        if partial_overlap:  # partial tiles masked with P·V in flight (FwdConfig.partial_overlap)
            cfg = dataclasses.replace(cfg, partial_overlap=True)
            extra += " partial-overlap"
        if not dynamic:  # the static persistent schedule (FwdConfig.dynamic_schedule off)
            cfg = dataclasses.replace(cfg, dynamic_schedule=False, claim_passes=1)
            extra += " static"
        if tile_ranges:  # per-query-tile key-tile ranges (FwdConfig.tile_ranges) + their kernel
            from .tile_range_kernel import TileRangeConfig

            cfg = dataclasses.replace(cfg, tile_ranges=True)
            extra += " tile-ranges"
            width = f" n{tile_n}" if tile_n else ""
            width += f" m{cfg.tile_m}" if consumer_wgs is not None else ""
            add(f"tile-ranges {_form_label(causal, c)}{width}", "tile_ranges",
                TileRangeConfig.for_forward(cfg), False)
        if work_order:  # the work-ordered scheduler (FwdConfig.work_order) + its ordering kernels
            from .work_order_kernel import WorkOrderConfig

            # claimed: the dynamic schedule's claims walk the order; else static snake slots
            cfg = dataclasses.replace(cfg, work_order=True, dynamic_schedule=claimed_order,
                                      claim_passes=1)
            extra += " claimed-work-order" if claimed_order else " work-order"
            add(f"work-order {_form_label(causal, c)}", "work_order",
                WorkOrderConfig.for_forward(cfg), False)
        add(f"fwd {dtype} d{d} {_form_label(causal, c)}{extra}", "fwd", cfg, True)

    def bwd(dtype, d, causal, c, gqa=False, sink=False, det=False, row_ranges=False,
            gqa_in_cta=False, persistent=False, two_stages=False, key_major=False,
            det_chains=1, fused_dq=False, late_loads=False, det_sync=None,
            first_store: Optional[bool] = None, swizzle: Optional[bool] = None,
            claim_passes: int = 1, pds_stages: Optional[int] = None,
            dq_early: Optional[bool] = None, prefetch_stats: Optional[bool] = None,
            stage_stats: bool = False, uniform_rows: Optional[bool] = None,
            per_wg: bool = False, one_cta: bool = False, mask_bits: Optional[bool] = None,
            class_chains: bool = False, dkv_chain: bool = False,
            claim_list: Optional[bool] = None, dkv_last: Optional[bool] = None,
            interleave: bool = False, dkv_red: bool = False, dkv_bulk: bool = False,
            dv_early: Optional[bool] = None, dk_early: bool = False, tile_m: int = 64,
            two_pds_swizzled: bool = False, dk_after_dv: bool = False,
            interior_dkv: bool = False, shfl_stats: bool = False, dq_frag: bool = False,
            dq_by_thread: bool = False, ds_query_major: bool = False,
            do_release_after_dv: bool = False, tall_first_store: bool = False,
            post_gather: bool = False):
        # first_store / swizzle: None = the host's default, True / False = forced. The base has
        # 64-row query tiles (``tile_m`` picks a taller one): the options below were built on
        # it; the host's D = 64 default without columns (128 rows in FA4's form, session 30)
        # is the ``tile_m=128, two_pds_swizzled=True`` variants
        saved = os.environ.get(TILE_M_ENV)
        os.environ[TILE_M_ENV] = "64"
        try:
            cfg = interface.backward_config(dtype, d, causal, c, gqa=gqa, has_sink=sink,
                                            deterministic=det)
        finally:
            if saved is None:
                del os.environ[TILE_M_ENV]
            else:
                os.environ[TILE_M_ENV] = saved
        # the host's dK-after-dV order (env) is set again last, where the forced options leave
        # its conditions (dv_early, dq_early, no dk_early) standing
        host_dk_after_dv = cfg.dk_after_dv
        cfg = dataclasses.replace(cfg, dk_after_dv=False)
        if two_stages or fused_dq:  # both need the zeroed, row-major dQ accumulator
            cfg = dataclasses.replace(cfg, dq_first_store=False, dq_swizzle=False,
                                      dq_uniform_rows=False, dq_per_wg=False)
        if gqa_in_cta:  # one CTA per KV head walking its query heads (BwdConfig.gqa_in_cta)
            cfg = dataclasses.replace(cfg, gqa_in_cta=True, dkv_last=False)
        if persistent:  # a persistent grid claiming tiles (BwdConfig.persistent_ctas)
            cfg = dataclasses.replace(cfg, persistent_ctas=132, key_major=key_major)
        if row_ranges:  # per-key-tile query-tile ranges (BwdConfig.row_ranges)
            cfg = dataclasses.replace(cfg, row_ranges=True)
        if two_stages:  # D = 256 with two Q/dO stages: dQ by per-thread atomics (env A/B switch)
            cfg = dataclasses.replace(cfg, qdo_stages=2, dq_early=False)  # dQ leaves smem
        if det_chains > 1:  # deterministic dQ in two chains (BwdConfig.dq_chains)
            cfg = dataclasses.replace(cfg, dq_chains=det_chains)
        if det_sync:  # the deterministic dQ writer's semaphore ordering (BwdConfig.det_sync)
            cfg = dataclasses.replace(cfg, det_sync=det_sync)
        if late_loads:  # multi-column masks: delta / column values loaded late (BwdConfig.late_loads)
            cfg = dataclasses.replace(cfg, late_loads=True, stage_stats=False)  # they exclude
        if first_store is not None:  # dQ accumulator not zeroed (BwdConfig.dq_first_store)
            cfg = dataclasses.replace(cfg, dq_first_store=first_store)
        if swizzle is not None:  # one bulk op per staged dQ tile (BwdConfig.dq_swizzle)
            cfg = dataclasses.replace(cfg, dq_swizzle=swizzle,
                                      dq_uniform_rows=cfg.dq_uniform_rows and not swizzle,
                                      dq_per_wg=cfg.dq_per_wg and swizzle)
        if claim_passes > 1:  # the persistent grid claims by work class (BwdConfig.claim_passes)
            cfg = dataclasses.replace(cfg, claim_passes=claim_passes)
        if pds_stages is not None:  # dS^T in one or two smem stages (BwdConfig.pds_stages)
            cfg = dataclasses.replace(cfg, pds_stages=pds_stages)
        if dq_early is not None:  # dQ GEMM before dK (default) or after (BwdConfig.dq_early)
            cfg = dataclasses.replace(cfg, dq_early=dq_early)
        if prefetch_stats is not None:  # next query tile's LSE / delta loaded early, or not
            cfg = dataclasses.replace(cfg, prefetch_stats=prefetch_stats)
        if stage_stats:  # LSE / delta staged in smem with Q / dO (BwdConfig.stage_stats)
            cfg = dataclasses.replace(cfg, stage_stats=True, prefetch_stats=False)
        if uniform_rows is not None:  # dQ row ops from lane 0, uniform addresses, or per lane
            cfg = dataclasses.replace(cfg, dq_swizzle=cfg.dq_swizzle and not uniform_rows,
                                      dq_uniform_rows=uniform_rows,
                                      dq_per_wg=cfg.dq_per_wg and not uniform_rows)
        if per_wg:  # the swizzled dQ tile as one block per warpgroup (BwdConfig.dq_per_wg)
            cfg = dataclasses.replace(cfg, dq_swizzle=True, dq_uniform_rows=False, dq_per_wg=True)
        if fused_dq:  # dQ converted in the main kernel (BwdConfig.fused_dq)
            cfg = dataclasses.replace(cfg, persistent_ctas=cfg.persistent_ctas or 132,
                                      fused_dq=True)
        if one_cta:  # no persistent grid: one CTA per key tile (retire launches, env switch)
            cfg = cfg.one_cta_per_tile()
        if mask_bits is not None:  # partial tiles' element mask: per-key bit masks or compares
            cfg = dataclasses.replace(cfg, mask_bits=mask_bits)
        if class_chains:  # deterministic dQ chains by work class (BwdConfig.class_chains)
            cfg = cfg.with_class_chains()
        if dkv_chain or dkv_red or dkv_bulk:  # deterministic GQA dK/dV summed in query-head order
            # (BwdConfig.dkv_chain; dkv_red: in L2, converted by the postprocess; dkv_bulk: by
            # the dQ writer's bulk ops)
            cfg = dataclasses.replace(cfg, dkv_chain=True, dkv_red=dkv_red or dkv_bulk,
                                      dkv_bulk=dkv_bulk, dkv_last=False)
        if dkv_last is not None:  # deterministic GQA dK/dV summed by the group's last CTA
            cfg = dataclasses.replace(cfg, dkv_last=dkv_last and not cfg.dkv_chain)
        if interleave:  # deterministic head walk, the group's heads per query tile
            cfg = dataclasses.replace(cfg, gqa_in_cta=True, dkv_last=False, stage_stats=True,
                                      prefetch_stats=False, late_loads=False,
                                      walk_interleave=True)
        if dv_early is not None or dk_early:  # the dV (and dK) GEMM before the dS^T rendezvous,
            # or (False) after it: the order before session 20
            early = dk_early or bool(dv_early)
            cfg = dataclasses.replace(cfg, dv_early=early and cfg.rs_dkv,
                                      dk_early=dk_early and cfg.rs_dkv)
        if dk_after_dv or (host_dk_after_dv and cfg.dk_after_dv_applies):
            # dK only once dV has completed, after dQ's issue (FA4's order)
            cfg = dataclasses.replace(cfg, dk_after_dv=True)
        if do_release_after_dv:  # ... and the dO stage released right then
            cfg = dataclasses.replace(cfg, do_release_after_dv=True)
        if claim_list is not None:  # class claims from a class-sorted list, or per pass
            cfg = dataclasses.replace(cfg, claim_list=claim_list)
        if tile_m != cfg.tile_m:  # 80-row query tiles, dQ transposed (env ..._BWD_TILE_M=80)
            cfg = with_tile_m(cfg, tile_m)
            if cfg.tile_m != tile_m:
                raise ValueError(f"compile_check bwd: tile_m={tile_m} does not apply to {cfg}")
        if two_pds_swizzled:  # FA3/FA4's form of a taller tile (two dS^T stages)
            cfg = with_two_pds_stages(cfg, staged_stats=not shfl_stats,
                                      staged_columns=stage_stats)
        if interior_dkv:  # dK/dV stored without row bounds inside the sequence (interior_dkv)
            cfg = dataclasses.replace(cfg, interior_dkv=True)
        if shfl_stats:  # LSE / delta spread over the lanes, shuffled at use (shfl_stats)
            cfg = with_shfl_stats(cfg)
            if not cfg.shfl_stats:
                raise ValueError(f"compile_check bwd: shfl_stats does not apply to {cfg}")
        if dq_frag:  # dQ staged in the accumulator's fragment order (dq_frag)
            cfg = with_dq_frag(cfg)
            if not cfg.dq_frag:
                raise ValueError(f"compile_check bwd: dq_frag does not apply to {cfg}")
        if dq_by_thread:  # 80-row two-stage tiles: dQ^T staged in thread order (dq_by_thread),
            cfg = dataclasses.replace(cfg, dq_by_thread=True, dq_per_wg=True)  # per warpgroup
        if tall_first_store:  # ... and its first writer stores (no zeroed accumulator)
            if not cfg.tall_first_store_applies:
                raise ValueError(f"compile_check bwd: tall_first_store does not apply to {cfg}")
            cfg = dataclasses.replace(cfg, dq_first_store=True)
        if post_gather:  # ... and the postprocess gathers rows by shuffles (post_gather)
            cfg = dataclasses.replace(cfg, post_gather=True)
        if ds_query_major:  # dS stored [queries x keys] (ds_query_major)
            cfg = dataclasses.replace(cfg, ds_query_major=True)
        extra = "".join([" gqa" if gqa else "", " sink" if sink else "", " det" if det else "",
                         " one-cta" if one_cta else "",
                         " row-ranges" if row_ranges else "",
                         " gqa-in-cta" if gqa_in_cta else "",
                         " persistent" if persistent else "",
                         " key-major" if key_major else "",
                         f" {det_chains}-chains" if det_chains > 1 else "",
                         " two-stages" if two_stages else "",
                         " fused-dq" if fused_dq else "",
                         " late-loads" if late_loads else "",
                         f" det-sync-{det_sync}" if det_sync else "",
                         {None: "", True: " first-store", False: " no-first-store"}[first_store],
                         {None: "", True: " dq-swizzle", False: " no-dq-swizzle"}[swizzle],
                         f" claim-passes-{claim_passes}" if claim_passes > 1 else "",
                         f" pds-{pds_stages}" if pds_stages is not None else "",
                         {None: "", True: " dq-early", False: " dq-late"}[dq_early],
                         {None: "", True: " prefetch-stats", False: " no-prefetch-stats"}[
                             prefetch_stats],
                         " stage-stats" if stage_stats else "",
                         {None: "", True: " uniform-rows", False: " no-uniform-rows"}[
                             uniform_rows],
                         " per-wg" if per_wg else "",
                         {None: "", True: " mask-bits", False: " element-compares"}[mask_bits],
                         " class-chains" if class_chains else "",
                         " dkv-chain" if dkv_chain else "",
                         " dkv-red" if dkv_red else "",
                         " dkv-bulk" if dkv_bulk else "",
                         {None: "", True: " dv-early", False: " dv-late"}[dv_early],
                         " dk-early" if dk_early else "",
                         " dk-after-dv" if dk_after_dv else "",
                         " shfl-stats" if shfl_stats else "",
                         " dq-frag" if dq_frag else "",
                         " dq-by-thread" if dq_by_thread else "",
                         " tall-first-store" if tall_first_store else "",
                         " post-gather" if post_gather else "",
                         " ds-query-major" if ds_query_major else "",
                         " do-release-after-dv" if do_release_after_dv else "",
                         {None: "", True: " claim-list", False: " claim-passes"}[claim_list],
                         {None: "", True: " dkv-last", False: " dkv-partials"}[dkv_last],
                         " walk-interleave" if interleave else "",
                         f" m{tile_m}" if tile_m != 64 else "",
                         " two-pds-swizzled" if two_pds_swizzled else "",
                         " interior-dkv" if interior_dkv else ""])
        add(f"bwd {dtype} d{d} {_form_label(causal, c)}{extra}", "bwd", cfg, True)
        if cfg.claim_list:
            add(f"bwd-claims {dtype} d{d} {_form_label(causal, c)}{extra}", "bwd_claims", cfg,
                False)
        pre = cfg.prepost
        add(f"bwd-pre {dtype} d{d}{extra}", "bwd_pre", pre, False)
        if pre.has_post:
            add(f"bwd-post {dtype} d{d}{extra}", "bwd_post", pre, False)

    for c in (1, 2, 4):
        add(f"tile-summary C{c}", "summary", SummaryConfig(128, c), False)
    if full:
        for dtype in ("bfloat16", "float16"):
            for d in HEAD_DIMS:
                for causal, c in MASK_FORMS:
                    for sink in (False, True):
                        fwd(dtype, d, causal, c, sink)
                        for gqa in (False, True):
                            for det in (False, True):
                                bwd(dtype, d, causal, c, gqa, sink, det)
        return out
    # representative: every (causal, C) form at d128, every head dim once, the options once each
    for causal, c in MASK_FORMS:
        fwd("bfloat16", 128, causal, c)
        bwd("bfloat16", 128, causal, c)
    # (d256 bidirectional C=2 is the default 128x80 tile at 231,424 B + 1 KB static: the 227 KB
    # limit; calls that only restate a default are left out: the list dedups configs anyway)
    for d, (causal, c) in zip((64, 96, 192, 256), ((True, 2), (False, 4), (True, 1), (False, 2))):
        fwd("bfloat16", d, causal, c)
        bwd("bfloat16", d, causal, c)
    # 80-row query tiles for bidirectional masks (env PADDLE_FLASHMASK_BWD_TILE_M=80): full
    # attention, documents (C=2, LSE / delta staged), the GQA head walk
    bwd("bfloat16", 128, False, None, tile_m=80)
    # 128-row query tiles at D = 64 (FA4's D = 64 tile; env PADDLE_FLASHMASK_BWD_TILE_M=128)
    bwd("bfloat16", 64, False, None, tile_m=128)
    bwd("bfloat16", 64, True, None, tile_m=128)
    bwd("bfloat16", 64, True, 1, tile_m=128)
    bwd("bfloat16", 64, True, 2, tile_m=128)
    bwd("bfloat16", 64, False, 2, tile_m=128)
    bwd("float16", 64, False, 4, tile_m=128)
    bwd("bfloat16", 64, True, 1, gqa=True, tile_m=128)
    bwd("bfloat16", 64, False, None, tile_m=128, stage_stats=True)
    bwd("bfloat16", 64, False, None, tile_m=128, two_pds_swizzled=True)  # FA4's two dS stages
    bwd("bfloat16", 64, True, 1, tile_m=128, two_pds_swizzled=True)
    # LSE / delta spread over the lanes (session 31): D = 64 at 128 and 64 rows, D = 128
    for c, causal in ((None, False), (None, True), (2, False), (1, True)):
        bwd("bfloat16", 64, causal, c, tile_m=128, two_pds_swizzled=True, shfl_stats=True)
    bwd("bfloat16", 64, True, 2, gqa=True, tile_m=128, two_pds_swizzled=True, shfl_stats=True)
    bwd("bfloat16", 64, False, 4, tile_m=128, two_pds_swizzled=True, shfl_stats=True)
    bwd("bfloat16", 64, False, 2, shfl_stats=True)
    bwd("bfloat16", 128, False, None, shfl_stats=True)
    bwd("bfloat16", 128, False, 2, shfl_stats=True)
    # the deterministic mode with 128-row tiles at D = 64 (session 32; env TILE_M=128)
    for c, causal in ((None, False), (None, True), (1, True), (2, False)):
        bwd("bfloat16", 64, causal, c, det=True, tile_m=128, two_pds_swizzled=True,
            shfl_stats=True)
    bwd("bfloat16", 64, True, 1, gqa=True, det=True, tile_m=128, two_pds_swizzled=True,
        shfl_stats=True)
    # dQ staged in the fragment order: D = 64 at 128 rows (session 31), D = 128 per-warpgroup
    # blocks at 64 rows (session 32; documents with the blocks forced)
    for c, causal in ((None, False), (2, False)):
        bwd("bfloat16", 64, causal, c, tile_m=128, two_pds_swizzled=True, shfl_stats=True,
            dq_frag=True)
    for c, causal in ((None, False), (None, True), (1, True)):
        bwd("bfloat16", 128, causal, c, dq_frag=True)
    bwd("bfloat16", 128, True, 1, gqa=True, dq_frag=True)
    bwd("bfloat16", 128, False, 2, per_wg=True, dq_frag=True)
    bwd("bfloat16", 128, False, 2, tile_m=80)
    bwd("bfloat16", 128, False, None, gqa=True, tile_m=80)
    bwd("bfloat16", 128, False, 2, gqa=True, tile_m=80)
    bwd("bfloat16", 128, False, None, tile_m=80, two_pds_swizzled=True)
    bwd("bfloat16", 128, False, 2, tile_m=80, two_pds_swizzled=True)
    bwd("bfloat16", 128, False, 2, gqa=True, tile_m=80, two_pds_swizzled=True)
    # dS stored [queries x keys] (session 32): 80 rows in FA4's form, with dQ^T staged by
    # thread too, and the 64-row default forms
    for c in (None, 2):
        bwd("bfloat16", 128, False, c, tile_m=80, two_pds_swizzled=True, ds_query_major=True)
    for c in (None, 2):  # ... FA4's whole D = 128 form: dK after dV, dO released before dK
        bwd("bfloat16", 128, False, c, tile_m=80, two_pds_swizzled=True, ds_query_major=True,
            dq_by_thread=True, dk_after_dv=True, do_release_after_dv=True)
    bwd("bfloat16", 128, False, None, tile_m=80, two_pds_swizzled=True, ds_query_major=True,
        dq_by_thread=True)
    # session 33's D = 128 full-attention default: 80 rows, two dS^T stages, dQ^T staged by
    # thread (MHA and the GQA head walk; env TALL_FIRST_STORE=0 since session 35)
    for gqa in (False, True):
        bwd("bfloat16", 128, False, None, gqa=gqa, tile_m=80, two_pds_swizzled=True,
            dq_by_thread=True)
    for c, causal in ((None, False), (1, True), (2, False)):
        bwd("bfloat16", 128, causal, c, ds_query_major=True)
    # documents on 80-row tiles (session 34), MHA and the GQA head walk: the stats shuffled
    # from the lanes, delta after the mask (env SHFL_STATS=1), or staged and read where used
    # (session 34's env TALL_STAGED_COLUMNS=1; without the first store: env
    # TALL_FIRST_STORE=0)
    for gqa in (False, True):
        bwd("bfloat16", 128, False, 2, gqa=gqa, tile_m=80, two_pds_swizzled=True,
            dq_by_thread=True, shfl_stats=True)
        bwd("bfloat16", 128, False, 2, gqa=gqa, tile_m=80, two_pds_swizzled=True,
            dq_by_thread=True, stage_stats=True)
        # ... and the first writer of a query tile storing its dQ: the host's D = 128
        # defaults since session 35 for documents / prefix-LM (C = 2) and full attention (the
        # GQA documents walk spills 12 B in the producer, within _spill_allowed's walk bound)
        bwd("bfloat16", 128, False, 2, gqa=gqa, tile_m=80, two_pds_swizzled=True,
            dq_by_thread=True, stage_stats=True, tall_first_store=True)
        bwd("bfloat16", 128, False, None, gqa=gqa, tile_m=80, two_pds_swizzled=True,
            dq_by_thread=True, tall_first_store=True)
    # the first store on D = 64's 128-row tiles (env TALL_FIRST_STORE=1, session 35): flags per
    # 128-row tile, or the deterministic chains' semaphores
    for c, causal, gqa in ((None, False, False), (1, True, False), (2, False, True)):
        bwd("bfloat16", 64, causal, c, gqa=gqa, tile_m=128, two_pds_swizzled=True,
            shfl_stats=True, tall_first_store=True)
    for c, causal, gqa in ((2, False, True), (1, True, False)):
        bwd("bfloat16", 64, causal, c, gqa=gqa, det=True, tile_m=128, two_pds_swizzled=True,
            shfl_stats=True, tall_first_store=True)
    # the deterministic mode on 80-row tiles at D = 128 (env TILE_M=80, session 35): dQ^T staged
    # by thread, each tile's two blocks added after its chain turn
    for c, gqa in ((None, False), (2, False), (2, True)):
        bwd("bfloat16", 128, False, c, gqa=gqa, det=True, tile_m=80, two_pds_swizzled=True,
            dq_by_thread=True, stage_stats=c is not None)
    # ... with the chain's first adder storing both blocks and the dQ hand-off under dK (env
    # TALL_FIRST_STORE=1, session 38: no zeroed accumulator; not yet GPU-checked)
    for c, gqa in ((None, False), (2, False), (2, True), (None, True)):
        bwd("bfloat16", 128, False, c, gqa=gqa, det=True, tile_m=80, two_pds_swizzled=True,
            dq_by_thread=True, stage_stats=c is not None, tall_first_store=True, dq_early=True)
    # the by-thread postprocess gathering rows by warp shuffles (env POST_GATHER=1, session 35)
    bwd("bfloat16", 128, False, 2, tile_m=80, two_pds_swizzled=True, dq_by_thread=True,
        stage_stats=True, tall_first_store=True, post_gather=True)
    bwd("bfloat16", 128, True, 1, dk_after_dv=True, do_release_after_dv=True)  # 64 rows
    # the deterministic mode with its dQ handed over under the dK GEMM (env DET_DQ_EARLY=1,
    # session 37): D = 128's 64-row tiles, MHA and GQA, and D = 64's 128-row tiles
    for c, causal, gqa in ((None, False, False), (2, False, True), (1, True, False)):
        bwd("bfloat16", 128, causal, c, gqa=gqa, det=True, dq_early=True)
    for c, causal, gqa in ((2, False, True), (1, True, False)):
        bwd("bfloat16", 64, causal, c, gqa=gqa, det=True, tile_m=128, two_pds_swizzled=True,
            shfl_stats=True, tall_first_store=True, dq_early=True)
    # ... and the deterministic GQA head walk on D = 128's 80-row tiles (env GQA_IN_CTA=1;
    # session 16 measured the walk slower, before the hand-off and the 80-row tiles)
    for c in (None, 2):
        bwd("bfloat16", 128, False, c, gqa=True, det=True, gqa_in_cta=True, tile_m=80,
            two_pds_swizzled=True, dq_by_thread=True, stage_stats=True, dq_early=True)
    fwd("float16", 128, True, 1, sink=True)
    fwd("bfloat16", 128, True, None, work_order=True)
    fwd("bfloat16", 128, True, 1, work_order=True)
    fwd("bfloat16", 128, False, 4, work_order=True)
    # claims over the work order: the host's pick where a GQA grid gets few query tiles per CTA
    # (flash_fwd_sm90.default_work_order, session 14), for every mask form and head-dim shape
    fwd("bfloat16", 128, True, 1, work_order=True, claimed_order=True)
    fwd("bfloat16", 128, False, 4, work_order=True, claimed_order=True)
    fwd("bfloat16", 64, True, 2, work_order=True, claimed_order=True)
    fwd("bfloat16", 256, False, 2, work_order=True, claimed_order=True)
    fwd("bfloat16", 128, True, 1, tile_ranges=True)  # (default) + the tile-range kernel
    fwd("bfloat16", 128, False, 4, tile_ranges=True)
    fwd("bfloat16", 128, True, 1, dynamic=False)
    fwd("bfloat16", 128, True, None, dynamic=False)
    fwd("bfloat16", 256, False, 2, dynamic=False)
    fwd("bfloat16", 128, True, 1, claim_passes=3)
    fwd("bfloat16", 128, True, None, claim_passes=3)
    fwd("bfloat16", 128, True, 1, claim_passes=3, claim_block=4)  # off until the H200 A/B
    fwd("bfloat16", 128, True, 1, diagonal_partials=True)
    # the producer's scan after the Q wait (the default before session 14; env EARLY_SCAN=0)
    fwd("bfloat16", 128, True, 1, early_scan=False)
    fwd("bfloat16", 128, False, 4, early_scan=False)
    fwd("bfloat16", 128, True, None, early_scan=False)
    fwd("bfloat16", 64, True, 2, early_scan=False)
    fwd("bfloat16", 128, True, None, uniform_q=True)  # Q descriptors in uniform registers
    fwd("bfloat16", 128, False, 4, sink=True, uniform_q=True)
    fwd("bfloat16", 64, True, 1, uniform_q=True)  # three consumer warpgroups
    fwd("bfloat16", 256, False, 2, uniform_q=True)
    fwd("bfloat16", 128, True, None, rescale_threshold=8.0)  # lazy O rescale
    fwd("bfloat16", 128, True, 1, uniform_q=True, rescale_threshold=8.0)
    fwd("float16", 128, False, 4, sink=True, rescale_threshold=8.0)
    fwd("bfloat16", 64, True, 2, rescale_threshold=8.0)  # three consumer warpgroups
    fwd("bfloat16", 256, True, 1, rescale_threshold=8.0)  # O rescaled before the P·V GEMM?
    # the sequence edge outside the partial tiles' element mask (env PADDLE_FLASHMASK_FWD_EDGE_PASS)
    fwd("bfloat16", 128, False, 2, edge_pass=True)
    fwd("bfloat16", 128, True, 2, edge_pass=True)
    fwd("float16", 256, False, 4, sink=True, edge_pass=True)
    # each element's mask verdict as one predicate chain (env PADDLE_FLASHMASK_FWD_MASK_CHAIN):
    # the default at every head dim, so the variants here are the other element rule
    fwd("bfloat16", 128, False, 2, mask_chain=False)
    fwd("bfloat16", 128, True, 1, mask_chain=False)
    fwd("bfloat16", 64, False, 2, mask_chain=False)  # three consumer warpgroups, edge folded in
    fwd("bfloat16", 192, True, 2, mask_chain=False)
    fwd("float16", 96, False, 4, sink=True, mask_chain=False)
    # the softmax's row max as independent chains (env PADDLE_FLASHMASK_FWD_MAX_CHAINS): 4 by
    # default at D = 64 and on D = 128's causal forms and full attention; the other counts here
    fwd("bfloat16", 128, False, None, max_chains=1, sum_chains=1)
    fwd("bfloat16", 128, False, 2, max_chains=4)
    fwd("bfloat16", 128, True, 1, max_chains=1)
    fwd("bfloat16", 128, False, 4, sink=True, max_chains=8)
    fwd("bfloat16", 64, True, 2, max_chains=1)  # three consumer warpgroups, 160 registers
    fwd("float16", 256, False, 2, max_chains=4)
    fwd("bfloat16", 192, True, None, max_chains=2)
    # each GEMM's operand stage selected once (env PADDLE_FLASHMASK_FWD_STAGE_FIRST), every
    # head dim, alone and with Q's descriptors in uniform registers
    fwd("bfloat16", 128, False, None, stage_first=True)
    fwd("bfloat16", 128, True, 1, stage_first=True, uniform_q=True)
    fwd("bfloat16", 64, False, 2, stage_first=True)  # three consumer warpgroups
    fwd("float16", 96, False, 4, sink=True, stage_first=True)
    fwd("bfloat16", 192, True, 2, stage_first=True, uniform_q=True)
    fwd("bfloat16", 256, False, 2, stage_first=True)
    # no turns between the consumer warpgroups (env PADDLE_FLASHMASK_FWD_PINGPONG=0; FA4 takes
    # turns only up to D = 128): the head dims above 128, and one at 128
    fwd("bfloat16", 256, False, None, pingpong=False)
    fwd("bfloat16", 256, True, 2, pingpong=False)
    fwd("float16", 256, False, 4, sink=True, pingpong=False)
    fwd("bfloat16", 192, True, 1, pingpong=False)
    fwd("bfloat16", 192, False, 2, pingpong=False)
    fwd("bfloat16", 128, True, 2, pingpong=False)
    fwd("bfloat16", 128, True, 2, max_rowwise=True)  # env PADDLE_FLASHMASK_FWD_MAX_ROWWISE
    fwd("bfloat16", 128, True, None, sum_chains=2)  # env PADDLE_FLASHMASK_FWD_SUM_CHAINS
    fwd("bfloat16", 64, False, 2, max_rowwise=True, sum_chains=4)
    fwd("float16", 256, True, 1, sink=True, sum_chains=2)
    fwd("bfloat16", 128, False, 4, diagonal_partials=True)
    fwd("bfloat16", 256, True, 1, tile_n=80, tile_ranges=True)  # 230,400 B of smem
    fwd("bfloat16", 256, True, 1, tile_n=64)  # the pre-session-10 shape (env D256_TILE_N=64)
    add("tile-summary C1 n80", "summary", SummaryConfig(80, 1), False)
    fwd("bfloat16", 64, True, 1, consumer_wgs=3, tile_ranges=True)  # 512 threads, 160 registers
    fwd("bfloat16", 64, False, 4, sink=True, consumer_wgs=3)
    fwd("bfloat16", 64, True, None, consumer_wgs=3)
    fwd("bfloat16", 64, True, 2, consumer_wgs=2)  # the pre-session-10 shape (env D64_TILE_M=128)
    bwd("float16", 128, True, 1, gqa=True, sink=True)
    bwd("bfloat16", 64, True, None, dq_early=True)
    bwd("bfloat16", 128, True, 1, pds_stages=1, dq_early=False)  # the pre-session-10 order
    bwd("bfloat16", 64, True, 1, det=True)  # prefetch_stats (the d64 default) with the det chain
    bwd("bfloat16", 64, True, 2, prefetch_stats=False)  # the pre-session-10 loads (env ..._STATS=0)
    bwd("bfloat16", 128, True, 1, stage_stats=True)  # LSE / delta with the Q / dO stage
    bwd("bfloat16", 128, False, None, stage_stats=True)
    bwd("bfloat16", 64, True, 2, gqa=True, sink=True, stage_stats=True)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, gqa_in_cta=True, stage_stats=True)
    bwd("bfloat16", 256, False, 2, stage_stats=True)
    # dQ row ops: from lane 0 with uniform addresses (the d128 default), or per lane
    bwd("bfloat16", 128, True, 1, uniform_rows=False)  # the pre-session-11 writer
    # one dQ block per warpgroup: the d128 full and causal defaults (sessions 21, 25) carry it
    bwd("bfloat16", 64, True, 1, per_wg=True)
    # D = 128's two-option form (staged stats + per-warpgroup dQ blocks) at D = 64, where it has
    # not been measured (env PADDLE_FLASHMASK_BWD_STAGE_STATS=1 PADDLE_FLASHMASK_BWD_DQ_PER_WG=1)
    bwd("bfloat16", 64, False, None, stage_stats=True, per_wg=True)
    bwd("bfloat16", 64, True, None, stage_stats=True, per_wg=True)
    bwd("bfloat16", 64, True, 1, stage_stats=True, per_wg=True)
    bwd("bfloat16", 64, False, 2, stage_stats=True, per_wg=True)
    bwd("bfloat16", 128, True, 1, det=True, per_wg=True)  # the deterministic chain, both blocks
    bwd("bfloat16", 128, True, 2, gqa=True, det=True, per_wg=True)
    bwd("bfloat16", 128, True, 2, sink=True, det=True)
    bwd("bfloat16", 64, True, 1, uniform_rows=True)  # instead of the d64 default dq_swizzle
    bwd("bfloat16", 256, False, 2, uniform_rows=True)
    bwd("bfloat16", 128, True, 1, gqa=True, gqa_in_cta=True)
    bwd("bfloat16", 256, False, 2, gqa=True, det=True, gqa_in_cta=True)
    bwd("bfloat16", 128, True, 1, persistent=True, key_major=True)
    bwd("bfloat16", 128, True, 1, det=True, det_chains=2)
    bwd("bfloat16", 128, False, 4, gqa=True, det=True, gqa_in_cta=True, det_chains=2)
    bwd("bfloat16", 256, False, 4, gqa=True, gqa_in_cta=True, persistent=True)
    bwd("bfloat16", 128, False, 4, det=True)
    # the deterministic mode without its persistent grid (retire launches; env
    # PADDLE_FLASHMASK_BWD_DET_PERSISTENT=0), also with the GQA head walk asked for
    bwd("bfloat16", 128, True, 1, det=True, one_cta=True)
    bwd("bfloat16", 128, False, None, det=True, one_cta=True)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, gqa_in_cta=True, one_cta=True)
    bwd("float16", 64, False, 4, det=True, one_cta=True, sink=True)
    # the per-element compare rule the bit masks replaced (env PADDLE_FLASHMASK_BWD_MASK_BITS=0),
    # every head-dim class
    bwd("bfloat16", 128, False, 2, mask_bits=False)
    bwd("bfloat16", 128, True, 1, gqa=True, mask_bits=False)
    bwd("float16", 64, False, 4, sink=True, mask_bits=False)
    bwd("bfloat16", 256, True, 2, mask_bits=False)
    bwd("bfloat16", 128, True, None, det=True, mask_bits=False)
    # deterministic dQ chains by work class (env PADDLE_FLASHMASK_BWD_DET_CLASS_CHAINS=1)
    bwd("bfloat16", 128, True, 1, det=True, class_chains=True)
    bwd("bfloat16", 128, True, 2, gqa=True, det=True, class_chains=True)
    bwd("bfloat16", 128, False, 2, det=True, class_chains=True)
    bwd("bfloat16", 128, True, None, det=True, class_chains=True)
    bwd("float16", 64, False, 4, det=True, sink=True, class_chains=True)
    # deterministic GQA dK/dV summed in query-head order (env PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN=1)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, dkv_chain=True)
    bwd("bfloat16", 128, True, None, gqa=True, det=True, class_chains=True, dkv_chain=True)
    bwd("bfloat16", 128, False, 2, gqa=True, det=True, dkv_chain=True)
    bwd("float16", 64, True, 2, gqa=True, det=True, sink=True, dkv_chain=True)
    bwd("bfloat16", 256, True, 1, gqa=True, det=True, dkv_chain=True)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, dkv_red=True)
    bwd("bfloat16", 128, False, 2, gqa=True, det=True, dkv_red=True)
    bwd("float16", 64, True, 2, gqa=True, det=True, sink=True, dkv_red=True)
    bwd("bfloat16", 256, True, 1, gqa=True, det=True, dkv_red=True)
    # the dV GEMM after the dS^T rendezvous, as before session 20 (env
    # PADDLE_FLASHMASK_BWD_DV_EARLY=0), and dK before it too (env PADDLE_FLASHMASK_BWD_DK_EARLY=1)
    bwd("bfloat16", 128, False, None, dv_early=False)
    bwd("bfloat16", 128, True, 1, dv_early=False)
    bwd("bfloat16", 128, True, 1, gqa=True, dv_early=False)
    bwd("bfloat16", 64, True, None, dv_early=False)
    bwd("bfloat16", 128, False, None, dk_early=True)
    bwd("bfloat16", 128, True, 1, dk_early=True)
    bwd("bfloat16", 128, True, 1, gqa=True, dk_early=True)
    bwd("bfloat16", 128, True, 2, gqa=True, det=True, dk_early=True)
    bwd("bfloat16", 64, False, 2, dk_early=True)
    # dK issued once dV has completed, after the dQ GEMM's issue (FA4's SM90 order; the GQA
    # head walk's default with columns since session 26, so its variants above carry it; on MHA
    # through env PADDLE_FLASHMASK_BWD_DK_AFTER_DV=1)
    bwd("bfloat16", 128, False, None, dk_after_dv=True)
    bwd("bfloat16", 128, True, 1, dk_after_dv=True)
    bwd("bfloat16", 128, False, 2, dk_after_dv=True)
    bwd("bfloat16", 64, True, 1, dk_after_dv=True)
    # the dK/dV epilogue without row bounds on key tiles inside the sequence (env
    # PADDLE_FLASHMASK_BWD_INTERIOR_DKV=1): MHA, the GQA head walk, the deterministic partials
    bwd("bfloat16", 128, False, 2, interior_dkv=True)
    bwd("bfloat16", 128, True, 1, gqa=True, gqa_in_cta=True, interior_dkv=True)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, interior_dkv=True)
    bwd("bfloat16", 64, True, 1, interior_dkv=True)
    # deterministic GQA dK/dV summed by the dQ writer's bulk ops (BwdConfig.dkv_bulk)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, dkv_bulk=True)
    bwd("bfloat16", 128, False, 2, gqa=True, det=True, dkv_bulk=True)
    bwd("bfloat16", 128, True, None, gqa=True, det=True, dkv_bulk=True)
    bwd("float16", 64, True, 2, gqa=True, det=True, sink=True, dkv_bulk=True)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, dkv_bulk=True, one_cta=True)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, one_cta=True, dkv_chain=True)
    bwd("bfloat16", 256, True, 1, two_stages=True)
    bwd("bfloat16", 256, False, 4, gqa=True, two_stages=True)
    bwd("bfloat16", 128, True, 1, fused_dq=True)
    bwd("bfloat16", 128, True, None, fused_dq=True)
    bwd("float16", 64, False, 2, gqa=True, sink=True, fused_dq=True)
    bwd("bfloat16", 256, True, 1, gqa=True, gqa_in_cta=True, fused_dq=True)
    bwd("bfloat16", 128, True, 2, late_loads=True)
    bwd("bfloat16", 128, False, 4, late_loads=True)
    bwd("bfloat16", 128, True, 1, det=True, det_sync="acquire")
    bwd("bfloat16", 128, True, 1, det=True, det_sync="fence")
    bwd("float16", 64, False, 2, gqa=True, sink=True, first_store=True)
    bwd("bfloat16", 256, True, 1, gqa=True, gqa_in_cta=True, first_store=True)
    bwd("bfloat16", 128, False, None, swizzle=True)
    bwd("bfloat16", 128, True, 1, swizzle=True, first_store=True)
    bwd("bfloat16", 128, True, 1, det=True, swizzle=True)
    bwd("bfloat16", 256, True, 1, gqa=True, gqa_in_cta=True, swizzle=True)
    bwd("bfloat16", 128, False, 4, claim_passes=3)
    bwd("bfloat16", 128, True, None, claim_passes=3)
    # claims by work class from the class-sorted list (the default, bwd_claim_list) and per pass
    # (env PADDLE_FLASHMASK_BWD_CLAIM_LIST=0); the GQA walk's key-major 3 passes is the e2e shape
    bwd("bfloat16", 128, True, 1, gqa=True, gqa_in_cta=True, persistent=True, key_major=True,
        claim_passes=3, claim_list=True)
    bwd("bfloat16", 128, True, 1, gqa=True, gqa_in_cta=True, persistent=True, key_major=True,
        claim_passes=3, claim_list=False)
    bwd("bfloat16", 128, False, 2, claim_passes=3, claim_list=True)
    bwd("float16", 64, True, None, claim_passes=2, claim_list=True)
    bwd("bfloat16", 128, True, 1, det=True, class_chains=True, claim_list=False)
    # deterministic GQA: dK/dV summed by the group's last CTA (the default) or reduced by the
    # postprocess from fp32 partials (env PADDLE_FLASHMASK_BWD_DET_DKV_LAST=0)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, dkv_last=False)
    bwd("bfloat16", 128, True, None, gqa=True, det=True, dkv_last=True)
    bwd("bfloat16", 128, False, 2, gqa=True, det=True, dkv_last=True)
    bwd("float16", 64, True, 2, gqa=True, det=True, sink=True, dkv_last=True)
    bwd("bfloat16", 256, True, 1, gqa=True, det=True, dkv_last=True)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, one_cta=True, dkv_last=True)
    # deterministic GQA through the head walk, heads interleaved per query tile (env
    # PADDLE_FLASHMASK_BWD_DET_WALK_INTERLEAVE=1; not yet measured)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, interleave=True)
    bwd("bfloat16", 128, False, 2, gqa=True, det=True, interleave=True)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, det_chains=2, interleave=True)
    bwd("bfloat16", 128, True, 1, gqa=True, det=True, one_cta=True, interleave=True)
    bwd("bfloat16", 128, True, 1, first_store=False)  # the env-off forms of the two defaults
    bwd("float16", 64, False, 2, gqa=True, sink=True, first_store=False, swizzle=False)
    return out


# compile-check kind -> the kernel's name in interface.KERNEL_BUILDERS
_KIND_KERNELS = {"summary": "tile_summary", "work_order": "fwd_work_order",
                 "tile_ranges": "fwd_tile_ranges", "fwd": "flash_fwd_sm90", "bwd": "flash_bwd_sm90",
                 "bwd_pre": "flash_bwd_pre", "bwd_post": "flash_bwd_post",
                 "bwd_claims": "bwd_claim_list"}


def _build(kind: str, config: Any) -> Any:
    """The JIT-compiled function of one variant (no cache: the check must run ptxas)."""
    from .interface import KERNEL_BUILDERS

    return KERNEL_BUILDERS[_KIND_KERNELS[kind]](config)


# --------------------------------------------------------------------------------------------------
# cubin analysis
# --------------------------------------------------------------------------------------------------

EIATTR_REGCOUNT = 0x2F
EIATTR_FRAME_SIZE = 0x11
EIATTR_FORMAT_SVAL = 0x04  # entry carries a (size, payload) value


def _elf_sections(data: bytes) -> list[tuple[str, int, int, int, int]]:
    """(name, type, offset, size, info) of each section of a 64-bit little-endian ELF."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off = raw[shstrndx][4]

    def name(offset: int) -> str:
        start = strtab_off + offset
        return data[start:data.index(b"\0", start)].decode()

    return [(name(s[0]), s[1], s[4], s[5], s[7]) for s in raw]


def _symbol_names(data: bytes, sections) -> dict[int, str]:
    symtab = next((s for s in sections if s[0] == ".symtab"), None)
    strtab = next((s for s in sections if s[0] == ".strtab"), None)
    if symtab is None or strtab is None:
        return {}
    names = {}
    for i in range(symtab[3] // 24):
        (st_name,) = struct.unpack_from("<I", data, symtab[2] + 24 * i)
        start = strtab[2] + st_name
        names[i] = data[start:data.index(b"\0", start)].decode()
    return names


def _nv_info_records(data: bytes, offset: int, size: int):
    """(attribute, payload bytes) of an .nv.info section."""
    pos, end = offset, offset + size
    while pos + 4 <= end:
        fmt, attr = data[pos], data[pos + 1]
        if fmt == EIATTR_FORMAT_SVAL:
            (length,) = struct.unpack_from("<H", data, pos + 2)
            yield attr, data[pos + 4:pos + 4 + length]
            pos += 4 + length
        else:
            yield attr, data[pos + 2:pos + 4]
            pos += 4


def find_nvdisasm() -> Optional[str]:
    """nvdisasm from PATH, the nvidia-cuda-nvdisasm wheel, or CUDA_HOME."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia

        for root in getattr(nvidia, "__path__", []):
            for candidate in sorted(Path(root).glob("*/bin/nvdisasm")):
                return str(candidate)
    except ImportError:
        pass
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvdisasm").is_file():
        return str(Path(home) / "bin" / "nvdisasm")
    return None


_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?\b")
_FUNC_HEADER = re.compile(r"^\s*\.text\.(\S+):")


# setmaxnreg: a warp group giving registers back to the CTA's pool, or (waiting until it can)
# taking some from it
_SETMAXNREG = re.compile(r"USETMAXREG\.(DEALLOC|TRY_ALLOC)\.CTAPOOL\s+(?:U?P[T0-9]+\s*,\s*)?"
                         r"(0x[0-9a-fA-F]+|\d+)")
EIATTR_REQNTID = 0x10  # the block shape the kernel requires (x, y, z)


def disassemble(cubin: bytes, nvdisasm: str) -> str:
    """``nvdisasm -c`` of a cubin (also scripts/sass_loop_mix.py's)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([nvdisasm, "-c", f.name], check=True, capture_output=True,
                              text=True).stdout


def _per_kernel_lines(text: str):
    """(kernel name, SASS line) for every line inside a kernel's ``.text`` section."""
    current: Optional[str] = None
    for line in text.splitlines():
        header = _FUNC_HEADER.match(line)
        if header:
            current = header.group(1)
        elif current is not None:
            yield current, line


def sass_opcode_mix(text: str) -> dict[str, Counter]:
    """kernel name -> Counter of SASS base opcodes (``HGMMA.64x128x16.F32.BF16`` -> ``HGMMA``) of
    a disassembly (``disassemble``)."""
    mix: dict[str, Counter] = {}
    for kernel, line in _per_kernel_lines(text):
        counts = mix.setdefault(kernel, Counter())
        m = _SASS_LINE.match(line)
        if m:
            counts[m.group(1)] += 1
    return mix


def setmaxnreg_targets(text: str) -> dict[str, dict[str, list[int]]]:
    """kernel name -> {"dealloc": [...], "alloc": [...]}: the per-thread register counts its
    ``setmaxnreg`` instructions set (SASS ``USETMAXREG.DEALLOC`` / ``.TRY_ALLOC``)."""
    out: dict[str, dict[str, list[int]]] = {}
    for kernel, line in _per_kernel_lines(text):
        m = _SETMAXNREG.search(line)
        if m:
            key = "dealloc" if m.group(1) == "DEALLOC" else "alloc"
            targets = out.setdefault(kernel, {"dealloc": [], "alloc": []})[key]
            value = int(m.group(2), 0)
            if value not in targets:
                targets.append(value)
    return out


def register_pool_problem(kernel: dict, producer_threads: int = 128) -> Optional[str]:
    """Why the warp-specialised register hand-over can deadlock, or None. The CTA launches with
    ``registers`` per thread for ``block_threads`` threads; the producer warp group drops to its
    ``dealloc`` count and the others wait (``setmaxnreg.inc`` blocks) until the pool holds their
    ``alloc`` count: the producer must free at least what the consumers take. Session 11's H200
    hang: producer 168 -> 32 frees 128 x 136, the two consumer groups' 168 -> 240 need 256 x 72."""
    targets, regs, threads = kernel.get("setmaxnreg"), kernel.get("registers"), kernel.get("block_threads")
    if not targets or not targets["alloc"]:
        return None
    if not targets["dealloc"] or regs is None or threads is None:
        return (f"setmaxnreg increase to {max(targets['alloc'])} without a decrease, the launch "
                f"registers ({regs}) or the block size ({threads}) to check it against")
    freed = producer_threads * (regs - max(targets["dealloc"]))
    taken = (threads - producer_threads) * (max(targets["alloc"]) - regs)
    if taken > freed:
        return (f"setmaxnreg: the {threads - producer_threads} consumer threads take "
                f"{taken} registers ({regs} -> {max(targets['alloc'])}) but the producer group "
                f"frees {freed} ({regs} -> {max(targets['dealloc'])}): the consumers would wait "
                f"forever")
    return None


def analyze_cubin(cubin: bytes, nvdisasm: Optional[str]) -> dict[str, dict]:
    """kernel name -> {registers, static_smem, frame_bytes, sass: {opcode: count}, instructions}."""
    sections = _elf_sections(cubin)
    symbols = _symbol_names(cubin, sections)
    kernels: dict[str, dict] = {}
    for name, _, _, size, _ in sections:
        if name.startswith(".text."):
            kernels[name[len(".text."):]] = {"registers": None, "static_smem": 0, "frame_bytes": 0}
    for name, _, _, size, _ in sections:
        if name.startswith(".nv.shared.") and name[len(".nv.shared."):] in kernels:
            kernels[name[len(".nv.shared."):]]["static_smem"] = size
    for name, _, offset, size, _ in sections:
        owner = kernels.get(name[len(".nv.info."):]) if name.startswith(".nv.info.") else None
        if owner is not None:  # per-kernel attributes: the required block shape
            for attr, payload in _nv_info_records(cubin, offset, size):
                if attr == EIATTR_REQNTID and len(payload) == 12:
                    x, y, z = struct.unpack("<III", payload)
                    owner["block_threads"] = x * y * z
        if name != ".nv.info":
            continue
        for attr, payload in _nv_info_records(cubin, offset, size):
            if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and len(payload) == 8:
                sym, value = struct.unpack("<II", payload)
                kernel = kernels.get(symbols.get(sym, ""))
                if kernel is not None:
                    kernel["registers" if attr == EIATTR_REGCOUNT else "frame_bytes"] = value
    if nvdisasm:
        text = disassemble(cubin, nvdisasm)
        for kernel_name, counts in sass_opcode_mix(text).items():
            if kernel_name in kernels:
                kernels[kernel_name]["sass"] = dict(counts)
                kernels[kernel_name]["instructions"] = sum(counts.values())
        for kernel_name, targets in setmaxnreg_targets(text).items():
            if kernel_name in kernels:
                kernels[kernel_name]["setmaxnreg"] = targets
    return kernels


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
_PTXAS_REMARK = re.compile(r"\((C\d+)\) ([^']*?)(?: for)? the function '([^']+)'")


def parse_ptxas_report(text: str) -> dict[str, dict]:
    """kernel name -> {spill_stores, spill_loads, stack_frame, ptxas_registers, ptxas_remarks}.

    The DSL prints ptxas' report inside its own diagnostics, wrapped over several lines when there
    are spills, so the text is flattened first. ``ptxas_remarks`` keeps ptxas' performance notes,
    e.g. C7512 "wgmma.mma_async instructions are serialized due to insufficient register resources".
    """
    flat = re.sub(r"\s+", " ", text)
    events = []
    for kind, pattern in (("entry", _PTXAS_ENTRY), ("spill", _PTXAS_SPILL),
                          ("registers", _PTXAS_REGISTERS), ("remark", _PTXAS_REMARK)):
        events += [(m.start(), kind, m) for m in pattern.finditer(flat)]
    report: dict[str, dict] = {}
    current: Optional[str] = None
    for _, kind, m in sorted(events, key=lambda e: e[0]):
        if kind == "remark":
            code, message, kernel = m.groups()
            report.setdefault(kernel, {}).setdefault("ptxas_remarks", []).append(
                f"{code} {message.strip()}")
        elif kind == "entry":
            current = m.group(1)
        elif current is not None and kind == "registers":
            report.setdefault(current, {})["ptxas_registers"] = int(m.group(1))
        elif current is not None:
            frame, stores, loads = (int(x) for x in m.groups())
            report.setdefault(current, {}).update(
                {"stack_frame": frame, "spill_stores": stores, "spill_loads": loads})
    return report


# --------------------------------------------------------------------------------------------------
# Worker
# --------------------------------------------------------------------------------------------------

def _worker_env(dump_root: str) -> None:
    """Runs in each (spawned) worker before it imports the DSL: the settings read at DSL start."""
    dump = Path(dump_root) / f"worker-{os.getpid()}"
    dump.mkdir(parents=True, exist_ok=True)
    os.environ["CUTE_DSL_ARCH"] = "sm_90a"
    os.environ["CUTE_DSL_KEEP"] = "cubin"
    os.environ["CUTE_DSL_DUMP_DIR"] = str(dump)
    os.environ["CUTE_DSL_COMPILER_OPT"] = "remarks{ptx}"
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
    os.environ["PADDLE_FLASHMASK_CACHE"] = "0"


def compile_variant(variant: Variant) -> dict:
    """Compile one variant (in a worker) and analyse its cubin."""
    result: dict[str, Any] = {"label": variant.label, "kind": variant.kind,
                              "config": repr(variant.config), "fast_path": variant.fast_path}
    log = tempfile.TemporaryFile(mode="w+b")
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)  # ptxas' report is printed by the DSL's native code too
    start = time.perf_counter()
    try:
        compiled = _build(variant.kind, variant.config)
        error = None
    except Exception as exc:  # reported per variant; the run goes on
        compiled, error = None, f"{type(exc).__name__}: {exc}"
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
    result["compile_s"] = round(time.perf_counter() - start, 2)
    log.seek(0)
    ptxas_text = log.read().decode(errors="replace")
    log.close()
    if error is not None:
        result["error"] = error[-4000:]
        return result
    cubin = compiled.__cubin__
    if isinstance(cubin, str) and os.path.isfile(cubin):
        cubin = Path(cubin).read_bytes()
    if not isinstance(cubin, (bytes, bytearray)):
        result["error"] = f"no cubin kept by the DSL (got {type(cubin).__name__})"
        return result
    kernels = analyze_cubin(bytes(cubin), find_nvdisasm())
    for name, spills in parse_ptxas_report(ptxas_text).items():
        if name in kernels:
            kernels[name].update(spills)
    info = getattr(compiled, "kernel_info", None) or {}
    for name, attrs in info.items():
        if name in kernels and attrs:
            kernels[name]["launch_attributes"] = {str(k): v for k, v in dict(attrs).items()}
    result["kernels"] = kernels
    return result


def check_fast_path(result: dict) -> list[str]:
    """Problems with a compiled variant: compile errors, register hand-overs between warp groups
    that would deadlock (``register_pool_problem``), and missing fast-path opcodes."""
    if "error" in result:
        return [f"{result['label']}: compile failed: {result['error'].splitlines()[-1][:300]}"]
    problems = [f"{result['label']}: {name[:60]}: {why}" for name, kernel in result["kernels"].items()
                if (why := register_pool_problem(kernel))]
    if not result["fast_path"]:
        return problems
    for opcode in FAST_PATH_OPCODES:
        total = sum(k.get("sass", {}).get(opcode, 0) for k in result["kernels"].values())
        if total == 0:
            problems.append(f"{result['label']}: no {opcode} in the SASS (fell off the SM90 fast path)")
    return problems


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------

def _short(name: str, width: int = 34) -> str:
    name = re.sub(r"^kernel_cutlass_", "", name)
    name = re.sub(r"_(tensor|ptr|object_at).*$", "", name)
    return name if len(name) <= width else name[:width - 1] + "~"


def format_table(results: list[dict]) -> str:
    head = (f"{'variant':<36} {'kernel':<34} {'regs':>4} {'smem':>6} {'frame':>5} {'spill':>9} "
            f"{'compile':>7}  SASS mix")
    lines = [head, "-" * len(head)]
    for r in results:
        if "error" in r:
            lines.append(f"{r['label']:<36} COMPILE ERROR: {r['error'].splitlines()[-1][:120]}")
            continue
        for i, (name, k) in enumerate(r["kernels"].items()):
            sass = k.get("sass", {})
            mix = " ".join(f"{op}={sass[op]}" for op in SHOWN_OPCODES if sass.get(op))
            spill = (f"{k.get('spill_stores', '?')}/{k.get('spill_loads', '?')}")
            lines.append(
                f"{r['label'] if i == 0 else '':<36} {_short(name):<34} {k['registers'] or '?':>4} "
                f"{k['static_smem']:>6} {k['frame_bytes']:>5} {spill:>9} "
                f"{(str(r['compile_s']) + 's') if i == 0 else '':>7}  "
                f"{mix} (total {k.get('instructions', '?')})")
            for remark in k.get("ptxas_remarks", []):
                lines.append(f"{'':<36} ptxas: {remark[:150]}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m paddle_flashmask.ops.cute.compile_check",
        description="Compile the CuTe DSL kernels for sm_90a (no GPU needed) and check their SASS.")
    parser.add_argument("--full", action="store_true", help="the whole variant matrix")
    parser.add_argument("--json", metavar="PATH", help="write all results as JSON")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="parallel compile processes (default: min(2, cores))")
    parser.add_argument("--only", metavar="REGEX", help="compile only variants whose label matches")
    parser.add_argument("--list", action="store_true", help="list the variants and exit")
    parser.add_argument("--allow-missing-fast-path", action="store_true",
                        help="report but do not fail on fwd/bwd kernels without HGMMA/UTMALDG "
                             "(kernels in progress); compile errors still fail")
    args = parser.parse_args(argv)

    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        print("compile_check: nvdisasm not found (pip install nvidia-cuda-nvdisasm)", file=sys.stderr)
        return 2
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    todo = variants(args.full)
    if args.only:
        todo = [v for v in todo if re.search(args.only, v.label)]
    if args.list:
        print("\n".join(v.label for v in todo))
        return 0
    print(f"compile_check: {len(todo)} variants for sm_90a, {args.jobs} processes, nvdisasm {nvdisasm}",
          flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pfm-compile-check-") as dump_root:
        context = multiprocessing.get_context("spawn")
        with context.Pool(max(1, args.jobs), initializer=_worker_env, initargs=(dump_root,),
                          maxtasksperchild=8) as pool:
            results = []
            for result in pool.imap(compile_variant, todo):
                results.append(result)
                status = "error" if "error" in result else f"{result['compile_s']}s"
                print(f"  [{len(results)}/{len(todo)}] {result['label']}: {status}", flush=True)
    elapsed = time.perf_counter() - start
    print(format_table(results))
    problems = [p for r in results for p in check_fast_path(r)]
    fast_path_problems = [p for p in problems if "fast path" in p]
    hard = [p for p in problems if p not in fast_path_problems or not args.allow_missing_fast_path]
    for p in problems:
        print(("FAIL " if p in hard else "WARN ") + p)
    summary = {"variants": len(results), "seconds": round(elapsed, 1), "failures": hard,
               "warnings": [p for p in problems if p not in hard], "arch": "sm_90a",
               "results": results}
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
    print(f"compile_check: {len(results)} variants in {elapsed:.0f} s, {len(hard)} failures")
    return 1 if hard else 0


if __name__ == "__main__":
    sys.exit(main())
