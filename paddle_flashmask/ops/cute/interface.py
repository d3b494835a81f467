"""Host API of the ``cute`` backend: ``flashmask_fwd`` / ``flashmask_bwd`` (team contract KERNELS.md).

The frontends call these with objects supporting ``__dlpack__`` (torch or paddle CUDA tensors) and
the framework's current CUDA stream (an int handle). This module

1. converts every argument with ``cute.runtime.from_dlpack`` and validates it (shape, dtype,
   contiguity, device, alignment), raising ``ValueError`` naming the argument, the expected and the
   found value;
2. runs the per-key-tile summary kernel on ``startend_row_indices`` (DESIGN §3: the attention
   kernels decide SKIP / PARTIAL / FULL from it, no ``[S/tile, S/tile]`` table), once per index
   tensor and content: the summary is kept with the tensor (:func:`derived_from_indices`);
3. picks the compile-time config (tile sizes per head dim) and gets the compiled kernels through
   the JIT cache (:mod:`.cache`);
4. allocates the scratch buffers (stream-ordered, :class:`.dlpack.DeviceBuffer`) and launches
   everything on the caller's stream. Nothing synchronises the host.
"""
from __future__ import annotations

import functools
import importlib
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, NamedTuple, Optional

import cuda.bindings.driver as cu

from paddle_flashmask import semantics

from . import cache
from ..arguments import TensorMemo
from .dlpack import ITEM_SIZE, DeviceBuffer, TensorInfo, check, inspect, runtime_tensor
from .launch_args import ReusableLaunch, env_flag, env_snapshot
from .summary_kernel import SummaryConfig, compile_summary

# head_dim -> the value head dim it is supported with (DESIGN §4: 64/96/128/192-128/256)
SUPPORTED_HEAD_DIMS = {64: 64, 96: 96, 128: 128, 192: 128, 256: 256}
INPUT_DTYPES = ("bfloat16", "float16")
TMA_ALIGN_BYTES = 16  # TMA needs 16-byte aligned base addresses and row strides


@dataclass(frozen=True)
class Problem:
    """Runtime facts of one call, after validation."""
    dtype: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_v: int
    mask_heads: int  # Hm (1 when there is no mask)
    num_columns: Optional[int]  # C, None for plain causal / full attention
    causal: bool
    has_sink: bool
    device: int


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------

def _expect(cond: bool, name: str, expected: str, found: Any) -> None:
    if not cond:
        raise ValueError(f"{name}: expected {expected}, found {found}")


def _convert(obj: Any, name: str, dtype: str | tuple[str, ...], shape: tuple[int, ...],
             device: Optional[tuple[int, int]], align: int = 1,
             info: Optional[TensorInfo] = None) -> TensorInfo:
    """Checks of one argument: dtype, exact shape, compact row-major layout, device, alignment.

    ``info`` is the argument's :func:`inspect` result when the caller already has it.
    """
    info = inspect(obj, name) if info is None else info
    dtypes = (dtype,) if isinstance(dtype, str) else dtype
    _expect(info.dtype in dtypes, name, f"dtype {' or '.join(dtypes)}", info.dtype)
    _expect(info.shape == tuple(shape), name, f"shape {list(shape)}", list(info.shape))
    _expect(info.contiguous, name, "a contiguous (row-major) tensor", f"strides {list(info.stride)}")
    _expect(info.device[0] == 2, name, "a CUDA tensor (DLPack device type 2)",
            f"device type {info.device[0]}")
    if device is not None:
        _expect(info.device == device, name, f"CUDA device {device[1]} (same as q)",
                f"device {info.device[1]}")
    _expect(info.data_ptr % align == 0, name, f"a {align}-byte aligned data pointer",
            hex(info.data_ptr))
    return info


def _rank4(obj: Any, name: str, layout: str) -> TensorInfo:
    info = inspect(obj, name)
    _expect(len(info.shape) == 4, name, f"rank 4 {layout}", f"shape {list(info.shape)}")
    return info


def _problem(q: Any, k: Any, v: Any, startend_row_indices: Any, causal: bool,
             learnable_sink: Any) -> tuple[Problem, dict]:
    """Validate the inputs shared by forward and backward; returns the problem and their infos."""
    iq = _rank4(q, "q", "[B, Sq, H, D]")
    _expect(iq.dtype in INPUT_DTYPES, "q", "dtype bfloat16 or float16", iq.dtype)
    b, sq, h, d = iq.shape
    _expect(d in SUPPORTED_HEAD_DIMS, "q", f"head dim in {sorted(SUPPORTED_HEAD_DIMS)}", d)
    dev = iq.device
    ik = _rank4(k, "k", "[B, Sk, Hk, D]")
    sk, hk = ik.shape[1], ik.shape[2]
    _expect(hk > 0 and h % hk == 0, "k", f"a number of heads (dim 2) dividing H={h}", hk)
    dv = SUPPORTED_HEAD_DIMS[d]
    hm, num_columns = 1, None
    if startend_row_indices is not None:  # the mask form first: it is a user error, not a device one
        ii = _rank4(startend_row_indices, "startend_row_indices", "[B, Hm, Sk, C]")
        hm, num_columns = ii.shape[1], ii.shape[3]
        semantics.column_names(causal, num_columns)  # ValueError for an invalid (causal, C) form
        _expect(hm in {1, hk, h}, "startend_row_indices",
                f"mask heads (dim 1) in {sorted({1, hk, h})}", hm)
    infos = {
        "q": _convert(q, "q", iq.dtype, (b, sq, h, d), dev, TMA_ALIGN_BYTES, iq),
        "k": _convert(k, "k", iq.dtype, (b, sk, hk, d), dev, TMA_ALIGN_BYTES, ik),
        "v": _convert(v, "v", iq.dtype, (b, sk, hk, dv), dev, TMA_ALIGN_BYTES),
    }
    if startend_row_indices is not None:
        infos["indices"] = _convert(startend_row_indices, "startend_row_indices", "int32",
                                    (b, hm, sk, num_columns), dev, 4, ii)
        infos["indices_object"] = startend_row_indices  # the summary kernel's input
    if learnable_sink is not None:
        infos["sink"] = _convert(learnable_sink, "learnable_sink", "float32", (h,), dev, 4)
    problem = Problem(iq.dtype, b, sq, sk, h, hk, d, dv, hm, num_columns, bool(causal),
                      learnable_sink is not None, dev[1])
    _check_current_device(problem.device)
    return problem, infos


def _check_retire(retire: Any, reserved_sms: int) -> None:
    _expect(isinstance(retire, bool), "retire", "a bool", retire)
    _expect(not (retire and reserved_sms), "reserved_sms",
            "0 with retire=True (every CTA then ends after its tile)", reserved_sms)


def _check_current_device(device: int) -> None:
    # Kernels launch into the calling thread's current CUDA context; it must be the tensors' device.
    current = check(cu.cuCtxGetDevice(), "cuCtxGetDevice")
    _expect(int(current) == device, "q", f"tensors on the current CUDA device {int(current)}",
            f"device {device} (make it current, e.g. torch.cuda.set_device / paddle.set_device)")


@functools.lru_cache(maxsize=None)
def num_sms(device: int) -> int:
    attr = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    return int(check(cu.cuDeviceGetAttribute(attr, device), "cuDeviceGetAttribute"))


# --------------------------------------------------------------------------------------------------
# Tile summary
# --------------------------------------------------------------------------------------------------

def launch_tile_summary(indices: Any, problem: Problem, tile_n: int, stream: int
                        ) -> tuple[DeviceBuffer, DeviceBuffer]:
    """Per-key-tile min/max of ``indices`` (a :func:`runtime_tensor` ``[B, Hm, Sk, C]``) on ``stream``.

    Returns the ``col_min``, ``col_max`` buffers, int32 ``[B, Hm, ceil(Sk/tile_n), C]``; keep them
    alive until the kernels reading them are enqueued.
    """
    c = problem.num_columns
    shape = (problem.batch, problem.mask_heads, -(-problem.seqlen_k // tile_n), c)
    col_min = DeviceBuffer(shape, "int32", problem.device, stream)
    col_max = DeviceBuffer(shape, "int32", problem.device, stream)
    if problem.seqlen_k > 0 and problem.batch * problem.mask_heads > 0:
        kernel = compiled_kernel("tile_summary", SummaryConfig(tile_n, c))
        kernel(indices, runtime_tensor(col_min), runtime_tensor(col_max), cu.CUstream(stream))
    return col_min, col_max


def _release_buffers(buffers: tuple) -> None:
    for buffer in buffers:
        try:
            buffer.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown, context gone
            pass


# buffers derived from index tensors (summary, tile ranges), freed with their tensor
_derived = TensorMemo(256, on_drop=_release_buffers)


def derived_from_indices(indices: Any, what: tuple, compute: Callable[[], tuple]
                         ) -> tuple[tuple, bool]:
    """Device buffers computed from ``indices`` (``compute()`` -> a tuple of DeviceBuffers), once
    per index tensor and content.

    A model passes the same index tensor to every layer's forward and backward, so what the
    kernels derive from it (the tile summary, the forward's tile ranges) and the host work of
    launching those kernels, which costs more than the kernels, is kept with the tensor
    (:class:`~paddle_flashmask.ops.arguments.TensorMemo`): keyed by the object, ``what`` (kind,
    tile sizes, device, stream...), its in-place version and its address, and freed when the
    tensor is garbage collected. Objects without a version counter get fresh buffers every call.
    Returns ``(buffers, owned)``: ``owned`` buffers belong to the caller, who releases them.
    """
    stamp = (device_address_of(indices),)
    buffers = _derived.get(indices, what, stamp)
    if buffers is not None:
        return buffers, False
    buffers = compute()
    return buffers, not _derived.put(indices, what, buffers, stamp)


def tile_summary_for(indices: Any, problem: Problem, tile_n: int, stream: int
                     ) -> tuple[tuple[DeviceBuffer, DeviceBuffer], bool]:
    """The tile summary ``(col_min, col_max)`` of ``indices`` for ``tile_n``, cached with the
    tensor (:func:`derived_from_indices`)."""
    return derived_from_indices(
        indices, ("summary", tile_n, problem.device, int(stream)),
        lambda: launch_tile_summary(runtime_tensor(indices), problem, tile_n, stream))


def tile_ranges_for(indices: Any, problem: Problem, config: Any, summary: tuple, stream: int
                    ) -> tuple[tuple[DeviceBuffer], bool]:
    """The forward's per-query-tile key-tile ranges (``FwdConfig.tile_ranges``), cached with the
    tensor; computed from ``summary`` on ``stream``."""
    from .tile_range_kernel import CompiledTileRanges, TileRangeConfig, ranges_shape

    rcfg = TileRangeConfig.for_forward(config)

    def compute():
        ranges = DeviceBuffer(ranges_shape(problem.batch, problem.mask_heads, problem.seqlen_q,
                                           rcfg.tile_m), "int32", problem.device, stream)
        kernel = CompiledTileRanges(rcfg, compiled_kernel("fwd_tile_ranges", rcfg))
        kernel(summary[0], summary[1], ranges, problem.batch, problem.seqlen_q, problem.seqlen_k,
               problem.mask_heads, stream)
        return (ranges,)

    what = ("ranges", rcfg, problem.seqlen_q, problem.device, int(stream))
    return derived_from_indices(indices, what, compute)


def device_address_of(obj: Any) -> int:
    """Data address of a tensor (torch-style ``data_ptr()``, else its DLPack capsule)."""
    getter = getattr(obj, "data_ptr", None)
    if callable(getter):
        return int(getter())
    return inspect(obj, "startend_row_indices").data_ptr


def tile_summary(startend_row_indices: Any, tile_n: int, *, stream: int
                 ) -> tuple[DeviceBuffer, DeviceBuffer]:
    """Standalone GPU version of :func:`paddle_flashmask.semantics.tile_summary` (tests, tools)."""
    info = _rank4(startend_row_indices, "startend_row_indices", "[B, Hm, Sk, C]")
    _convert(startend_row_indices, "startend_row_indices", "int32", info.shape, None, 4, info)
    tensor = runtime_tensor(startend_row_indices)
    b, hm, sk, c = info.shape
    problem = Problem("int32", b, 0, sk, hm, hm, 0, 0, hm, c, False, False, info.device[1])
    return launch_tile_summary(tensor, problem, tile_n, stream)


# one work counter per (device, stream) for the forward's dynamic schedule and the backward's
# persistent grid: launches on one stream run one after the other, so they can share it (each
# launch zeroes it first, in stream order)
_schedule_counters: dict[tuple[int, int], DeviceBuffer] = {}


def schedule_counter(device: int, stream: int) -> DeviceBuffer:
    """The int32 work counter of the persistent kernels (dynamic schedules) on ``stream``."""
    key = (int(device), int(stream))
    counter = _schedule_counters.get(key)
    if counter is None:
        counter = _schedule_counters[key] = DeviceBuffer((1,), "int32", device, stream, zero=True)
    return counter


def work_order_for(indices: Any, problem: Problem, config: Any, summary: tuple, stream: int
                   ) -> tuple[tuple, bool]:
    """The forward's work order (``FwdConfig.work_order``) as ``((order,), owned)``: cached with
    the index tensor when there is one (every layer of a step passes the same tensor, so the four
    ordering kernels run once per step, not once per layer), else computed for this call."""
    def compute() -> tuple:
        workspace, order = launch_work_order(problem, config, summary, stream)
        workspace.release()  # stream-ordered: freed after the ordering kernels that use it
        return (order,)

    if indices is None:  # plain causal / full attention: nothing to key a cache on
        return compute(), True
    from .work_order_kernel import WorkOrderConfig

    what = ("work_order", WorkOrderConfig.for_forward(config), problem.num_heads,
            problem.seqlen_q, problem.seqlen_k, problem.device, int(stream))
    return derived_from_indices(indices, what, compute)


def launch_work_order(problem: Problem, config: Any, summary: tuple, stream: int
                      ) -> tuple[DeviceBuffer, DeviceBuffer]:
    """The forward's work order (``FwdConfig.work_order``): its query tiles, heaviest first,
    computed on ``stream`` from the tile summary (``work_order_kernel``). Returns the workspace and
    the order buffer; keep them alive until the forward is enqueued."""
    from .work_order_kernel import CompiledWorkOrder, WorkOrderConfig, order_length, workspace_elems

    wcfg = WorkOrderConfig.for_forward(config)
    b, sq, sk, h, hm = (problem.batch, problem.seqlen_q, problem.seqlen_k, problem.num_heads,
                        problem.mask_heads)
    workspace = DeviceBuffer((workspace_elems(wcfg, b, hm, sq, sk),), "int32", problem.device,
                             stream)
    order = DeviceBuffer((order_length(wcfg, b, h, sq),), "int32", problem.device, stream)
    kernel = CompiledWorkOrder(wcfg, compiled_kernel("fwd_work_order", wcfg))
    kernel(summary[0], summary[1], workspace, order, b, sq, sk, h, hm, stream)
    return workspace, order


# --------------------------------------------------------------------------------------------------
# Configs (what compile_check compiles is exactly what these return)
# --------------------------------------------------------------------------------------------------

def forward_config(dtype: str, head_dim: int, causal: bool, num_columns: Optional[int],
                   has_sink: bool = False):
    """The forward kernel variant used for these compile-time facts (tile sizes per head dim)."""
    from .flash_fwd_sm90 import ENV_SWITCHES

    # every env switch default_config reads is part of the key: they may flip between calls
    switches = env_snapshot(ENV_SWITCHES)
    return _forward_config(dtype, head_dim, bool(causal), num_columns, bool(has_sink), switches)


@functools.lru_cache(maxsize=256)
def _forward_config(dtype, head_dim, causal, num_columns, has_sink, _env_switches):
    from .flash_fwd_sm90 import default_config

    return default_config(dtype, head_dim, SUPPORTED_HEAD_DIMS[head_dim], causal, num_columns,
                          has_sink)


def backward_config(dtype: str, head_dim: int, causal: bool, num_columns: Optional[int],
                    gqa: bool = False, has_sink: bool = False, deterministic: bool = False,
                    num_sms: int = 132):
    """The backward kernel variant used for these compile-time facts (per-key-tile query-tile
    ranges for masks unless env ``PADDLE_FLASHMASK_BWD_ROW_RANGES=0``)."""
    from .bwd_rules import ENV_SWITCHES

    # every env switch the defaults read is part of the key: they may flip between calls
    switches = env_snapshot(ENV_SWITCHES)
    return _backward_variant(dtype, head_dim, bool(causal), num_columns, bool(gqa),
                             bool(has_sink), bool(deterministic), int(num_sms), switches)


@functools.lru_cache(maxsize=256)
def _backward_variant(dtype, head_dim, causal, num_columns, gqa, has_sink, deterministic, num_sms,
                      _env_switches):
    from .bwd_rules import (default_claim_passes, default_det_sync, default_dq_chains,
                            default_dq_count_lag, default_dq_early, default_dq_first_store,
                            default_dq_per_wg, default_dq_swizzle, default_dq_uniform_rows,
                            default_fused_dq,
                            default_gqa_in_cta,
                            default_key_major, default_late_loads, default_lazy_release,
                            default_pds_stages, default_persistent_ctas,
                            default_prefetch_stats, default_qdo_stages, default_row_ranges,
                            default_mask_bits, default_rs_dkv, default_stage_stats,
                            default_vector_dkv, default_class_chains, default_class_ratio,
                            default_dkv_chain, default_claim_list,
                            default_det_first_store, default_dkv_last,
                            default_dkv_red, default_walk_interleave,
                            default_dkv_bulk, default_dv_early, default_dk_early,
                            default_dk_after_dv, default_interior_dkv,
                            default_tall_two_pds, default_tile_m, with_tall_first_store,
                            with_two_pds_stages,
                            default_shfl_stats, with_shfl_stats, default_dq_frag,
                            with_do_release_after_dv, with_dq_by_thread, with_dq_frag,
                            with_ds_query_major, with_post_gather)

    row_ranges = default_row_ranges(num_columns)
    # the interleaved walk (the deterministic mode's way through the head walk) needs LSE / delta
    # staged with Q / dO, which the walk's own rule gives at D = 128; built for masks with columns
    walk_interleave = (default_walk_interleave(deterministic, gqa) and num_columns is not None
                       and default_stage_stats(head_dim, True, num_columns, causal, gqa,
                                               deterministic))
    gqa_in_cta = default_gqa_in_cta(gqa, deterministic) or walk_interleave
    persistent_ctas = default_persistent_ctas(deterministic, num_sms)
    claim_passes = default_claim_passes()  # read (and checked) even where nothing is claimed
    if deterministic:  # the dQ chain's order: one pass over the list
        claim_passes = 1
    cfg = _backward_config(dtype, head_dim, causal, num_columns, gqa, has_sink,
                            deterministic, row_ranges, default_rs_dkv(head_dim),
                            gqa_in_cta, persistent_ctas,
                            default_qdo_stages(head_dim),
                            persistent_ctas > 0 and default_key_major(
                                num_columns, claim_passes, gqa_in_cta, head_dim, causal,
                                deterministic),
                            default_dq_chains(deterministic, causal, num_columns),
                            default_lazy_release(deterministic),
                            persistent_ctas > 0 and not deterministic and default_fused_dq(),
                            default_dq_count_lag(),
                            default_vector_dkv(), default_det_sync(deterministic),
                            default_late_loads(),
                            default_det_first_store() if deterministic
                            else default_dq_first_store(),
                            default_dq_swizzle(head_dim),
                            claim_passes if persistent_ctas > 0 else 1, default_pds_stages(),
                            default_dq_early(head_dim, deterministic),
                            default_prefetch_stats(head_dim),
                            default_stage_stats(head_dim, gqa_in_cta, num_columns, causal,
                                                gqa, deterministic),
                            default_dq_uniform_rows(head_dim, gqa_in_cta, num_columns),
                            default_dq_per_wg(head_dim, causal, num_columns, deterministic, gqa),
                            default_mask_bits(),
                            default_class_chains(deterministic, persistent_ctas > 0, gqa_in_cta,
                                                 causal, num_columns, gqa),
                            default_class_ratio(),
                            default_dkv_chain(deterministic, gqa, gqa_in_cta),
                            default_claim_list(),
                            default_dkv_last(deterministic, gqa, gqa_in_cta), walk_interleave,
                            default_dkv_red(deterministic, gqa, gqa_in_cta),
                            default_dkv_bulk(deterministic, gqa, gqa_in_cta),
                            default_dv_early(), default_dk_early(),
                            default_dk_after_dv(head_dim, gqa_in_cta, num_columns),
                            default_tile_m(head_dim, causal, num_columns, deterministic,
                                           has_sink))
    if default_interior_dkv():  # BwdConfig.interior_dkv, every path through _store_rows
        cfg = replace(cfg, interior_dkv=True)
    two_pds = default_tall_two_pds(cfg.tile_m)  # (read, and checked, on every call)
    shfl = default_shfl_stats(cfg.tile_m)
    if cfg.tile_m != 64 and two_pds:  # a taller tile in FA3/FA4's form
        cfg = with_two_pds_stages(cfg, staged_stats=not shfl)
    if shfl:  # LSE / delta spread over the lanes, shuffled at use
        cfg = with_shfl_stats(cfg)
    if default_dq_frag():  # dQ staged in the accumulator's fragment order (STS.128)
        cfg = with_dq_frag(cfg)
    cfg = with_dq_by_thread(cfg)  # (80-row tiles: dQ^T staged in thread order)
    cfg = with_tall_first_store(cfg)  # (... and its first writer stores)
    cfg = with_post_gather(cfg)  # (env only: ... and the postprocess gathers rows by shuffles)
    cfg = with_do_release_after_dv(cfg)  # (env only: dO released before dK)
    return with_ds_query_major(cfg)  # (env only: dS stored [queries x keys])


@functools.lru_cache(maxsize=256)
def _backward_config(dtype, head_dim, causal, num_columns, gqa, has_sink, deterministic,
                     row_ranges, rs_dkv, gqa_in_cta, persistent_ctas, qdo_stages, key_major,
                     dq_chains, lazy_release, fused_dq, dq_count_lag, vector_dkv, det_sync,
                     late_loads, dq_first_store, dq_swizzle, claim_passes, pds_stages,
                     dq_early, prefetch_stats, stage_stats, dq_uniform_rows=False,
                     dq_per_wg=False, mask_bits=False, class_chains=False, class_ratio=4,
                     dkv_chain=False, claim_list=False, dkv_last=False, walk_interleave=False,
                     dkv_red=False, dkv_bulk=False, dv_early=False, dk_early=False,
                     dk_after_dv=False, tile_m=64):
    from .bwd_rules import with_tile_m
    from .flash_bwd_sm90 import BwdConfig

    cfg = BwdConfig(dtype, head_dim, SUPPORTED_HEAD_DIMS[head_dim], causal, num_columns, gqa=gqa,
                    has_sink=has_sink, deterministic=deterministic, row_ranges=row_ranges,
                    rs_dkv=rs_dkv, gqa_in_cta=gqa_in_cta, persistent_ctas=persistent_ctas,
                    qdo_stages=qdo_stages, key_major=key_major, vector_dkv=vector_dkv,
                    late_loads=late_loads, claim_passes=claim_passes, mask_bits=mask_bits)
    if pds_stages == 2 and cfg.two_pds_stages_apply:
        two = replace(cfg, pds_stages=2)
        if two.dq_in_smem or not cfg.dq_in_smem:  # only where dQ keeps its staging path
            cfg = two
    if cfg.dq_in_smem:  # chains and the lazy release live in the smem-staged dQ path
        cfg = replace(cfg, dq_chains=dq_chains, lazy_release=lazy_release,
                      det_sync=det_sync)
    if fused_dq and cfg.dq_in_smem and cfg.conv_rows:  # where the conversion buffer fits
        cfg = replace(cfg, fused_dq=True, dq_count_lag=dq_count_lag)
    if dq_first_store and cfg.dq_in_smem and not cfg.fused_dq:
        cfg = replace(cfg, dq_first_store=True)
    if dq_swizzle and cfg.dq_in_smem and not cfg.fused_dq and head_dim in (64, 128, 256):
        cfg = replace(cfg, dq_swizzle=True)
    if (dq_per_wg and cfg.dq_in_smem and not cfg.fused_dq
            and head_dim in (64, 128, 256)):  # the swizzled tile, one block per warpgroup
        cfg = replace(cfg, dq_swizzle=True, dq_per_wg=True)
    if dq_early and cfg.dq_in_smem:
        cfg = replace(cfg, dq_early=True)
    if dv_early and cfg.rs_dkv:  # the dV GEMM (dk_early: and dK) before the dS^T rendezvous
        cfg = replace(cfg, dv_early=True, dk_early=dk_early)
    if dk_after_dv and cfg.dk_after_dv_applies:  # FA4's order: dK once dV has completed
        cfg = replace(cfg, dk_after_dv=True)
    if prefetch_stats and not cfg.late_loads:
        cfg = replace(cfg, prefetch_stats=True)
    if stage_stats:  # the stats come with Q / dO: neither prefetched nor loaded late
        cfg = replace(cfg, stage_stats=True, prefetch_stats=False, late_loads=False)
    if dq_uniform_rows and cfg.dq_in_smem and not cfg.fused_dq and not cfg.dq_swizzle:
        cfg = replace(cfg, dq_uniform_rows=True)
    if dkv_chain:  # a GQA group's dK/dV summed in order by its query heads' CTAs
        # (dkv_red: in L2, converted by the postprocess; dkv_bulk: by bulk ops, only where its
        # staging region fits, else the per-query-head partials stay)
        chained = replace(cfg, dkv_chain=True, dkv_red=dkv_red)
        if not dkv_bulk:
            cfg = chained
        elif chained.dkv_bulk_fits:
            cfg = replace(chained, dkv_bulk=True)
    elif dkv_last:  # ... or by the group's last CTA to finish the key tile
        cfg = replace(cfg, dkv_last=True)
    # two dQ chains by work class, claimed in two passes (with dkv_chain only where no per-head
    # mask can put a group's heads in different passes)
    if class_chains and cfg.dq_in_smem and not (dkv_chain and num_columns is not None):
        cfg = cfg.with_class_chains(class_ratio)
    if claim_list and cfg.claim_passes > 1:  # claims by work class from a class-sorted list
        cfg = replace(cfg, claim_list=True)
    if walk_interleave and cfg.walk_interleave_applies:
        cfg = replace(cfg, walk_interleave=True)
    return with_tile_m(cfg, tile_m)


def _lazy_builder(module: str, function: str) -> Callable[[Any], Any]:
    """A builder that imports its compile function on first use (the kernel modules import the
    whole DSL, which a host-API import should not pay for)."""
    def build(config: Any) -> Any:
        return getattr(importlib.import_module(module, __package__), function)(config)
    return build


def _build_forward(config: Any) -> Any:
    from .flash_fwd_sm90 import compile_forward

    return compile_forward(config).compiled  # the jitted function is what the cache stores


# Every kernel of the package by its JIT-cache name: the host API, the compile check, the GPU
# precompile and bench/compile_times.py all build kernels through this one table.
KERNEL_BUILDERS: dict[str, Callable[[Any], Any]] = {
    "tile_summary": compile_summary,
    "flash_fwd_sm90": _build_forward,
    "flash_bwd_sm90": _lazy_builder(".flash_bwd_sm90", "compile_backward"),
    "flash_bwd_pre": _lazy_builder(".flash_bwd_prepost", "compile_preprocess"),
    "flash_bwd_post": _lazy_builder(".flash_bwd_prepost", "compile_postprocess"),
    "bwd_claim_list": _lazy_builder(".bwd_claim_list", "compile_claim_list"),
    "fwd_work_order": _lazy_builder(".work_order_kernel", "compile_work_order"),
    "fwd_tile_ranges": _lazy_builder(".tile_range_kernel", "compile_tile_ranges"),
}


# one launcher per compiled kernel, so its remembered argument sets live as long as the kernel
_launchers: dict[tuple[str, Any], ReusableLaunch] = {}


def compiled_kernel(name: str, config: Any) -> ReusableLaunch:
    """The jitted kernel ``name`` (a key of :data:`KERNEL_BUILDERS`) for ``config``, through the
    JIT cache (memory, then disk, then a compile), as a :class:`ReusableLaunch` (a repeated call
    reuses its packed arguments)."""
    compiled = cache.get_or_compile(name, config, KERNEL_BUILDERS[name])
    launcher = _launchers.get((name, config))
    if launcher is None or launcher.compiled is not compiled:
        launcher = _launchers[(name, config)] = ReusableLaunch(compiled)
    return launcher


def compiled_forward(config):
    """The forward variant through the cache (the jitted function is what is cached on disk)."""
    from .flash_fwd_sm90 import CompiledForward

    return CompiledForward(config, compiled_kernel("flash_fwd_sm90", config))


def compiled_backward(config):
    """Preprocess + main + postprocess of a backward variant, each through the cache."""
    from .flash_bwd_sm90 import CompiledBackward

    bundle = CompiledBackward.__new__(CompiledBackward)  # its __init__ compiles without a cache
    bundle.config = config
    bundle.pre = compiled_kernel("flash_bwd_pre", config.prepost)
    bundle.main = compiled_kernel("flash_bwd_sm90", config)
    bundle.claims = compiled_kernel("bwd_claim_list", config) if config.claim_list else None
    bundle.post = (compiled_kernel("flash_bwd_post", config.prepost) if config.prepost.has_post
                   else None)
    return bundle


# --------------------------------------------------------------------------------------------------
# Host API
# --------------------------------------------------------------------------------------------------

# A model calls the kernels with the same shapes in every layer and step, so what a call derives
# from its arguments' layouts (validation, the variant, the compiled kernels, the grid, the
# workspace) is kept per call signature: the layouts of its tensors, its scalar arguments and the
# env switches the variant choice reads. A repeated call then only checks the pointer alignments
# and the current device before launching. Env PADDLE_FLASHMASK_CALL_PLANS=0 derives everything
# on every call. Whatever swaps the kernel getters below (a test double) must clear the plans.
CALL_PLANS_ENV = "PADDLE_FLASHMASK_CALL_PLANS"
MAX_CALL_PLANS = 256
_call_plans: dict[tuple, "CallPlan"] = {}

_FWD_TENSORS = ("q", "k", "v", "out", "lse", "startend_row_indices", "learnable_sink")
_BWD_TENSORS = ("q", "k", "v", "out", "dout", "lse", "dq", "dk", "dv", "startend_row_indices",
                "learnable_sink", "dsink")
# the key under which _problem / the plan functions keep an argument's info, where it differs
_INFO_KEY = {"startend_row_indices": "indices", "learnable_sink": "sink"}
# the alignment each tensor's address must have (TMA: 16 bytes; the rest 4)
_ALIGN = {"q": TMA_ALIGN_BYTES, "k": TMA_ALIGN_BYTES, "v": TMA_ALIGN_BYTES,
          "out": TMA_ALIGN_BYTES, "dout": TMA_ALIGN_BYTES, "dq": TMA_ALIGN_BYTES,
          "dk": TMA_ALIGN_BYTES, "dv": TMA_ALIGN_BYTES}


@dataclass(frozen=True)
class CallPlan:
    """What one call signature needs to launch: the validated problem, the variant, its kernels,
    the forward's grid or the backward's scratch buffers, and each tensor's required alignment."""
    problem: Problem
    config: Any
    kernel: Any
    grid_ctas: int = 0
    workspace: tuple = ()  # ((name, shape, dtype, offset), ...): the backward's scratch buffers
    workspace_bytes: int = 0  # their one allocation (workspace_layout), 0: one per buffer
    aligns: tuple = ()


class WorkspaceView(NamedTuple):
    """One scratch buffer of a backward call: a slice of the call's single workspace allocation
    (what the kernels' launchers read: the address, and the shape and dtype it was laid out for)."""
    data_ptr: int
    shape: tuple
    dtype: str


WORKSPACE_ALIGN = 256  # bytes; above every alignment the kernels assume (TMA: 16)
# The backward's scratch buffers as slices of one allocation: the default since the whole GPU suite
# passed with it (session 24, call 139: 34/34; env PADDLE_FLASHMASK_BWD_ONE_WORKSPACE=0: one
# allocation per buffer). Slices are neighbours, so a kernel writing past a buffer's declared
# shape would corrupt the next one instead of pool memory: the suite's oracles would see it.
ONE_WORKSPACE_ENV = "PADDLE_FLASHMASK_BWD_ONE_WORKSPACE"


def workspace_layout(shapes: dict) -> tuple[tuple, int]:
    """The backward's scratch buffers (``workspace_shapes``: name -> (shape, dtype)) packed into
    one allocation: ``((name, shape, dtype, byte offset), ...)`` and the total bytes. One
    stream-ordered allocation and free per call instead of one per buffer (each a driver call);
    the persistent grid's ``tile_counter`` is the stream's kept counter and gets no space."""
    entries, offset = [], 0
    for name, (shape, dtype) in shapes.items():
        if name == "tile_counter":
            entries.append((name, shape, dtype, -1))
            continue
        entries.append((name, shape, dtype, offset))
        nbytes = ITEM_SIZE[dtype] * math.prod(shape)
        offset += -(-nbytes // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
    return tuple(entries), offset


def allocate_workspace(nbytes: int, device: int, stream: int) -> DeviceBuffer:
    """The stream-ordered allocation the backward's scratch buffers are slices of."""
    return DeviceBuffer((-(-nbytes // 4),), "int32", device, stream)


def clear_call_plans() -> None:
    _call_plans.clear()


def _plan_lookup(kind: str, names: tuple, tensors: tuple, scalars: tuple, switches: tuple
                 ) -> tuple[Optional[tuple], Optional[list], Optional[CallPlan]]:
    """``(key, infos, plan)`` of a call: the plan when this signature was seen and the call's
    addresses keep its alignments, else None; key None when the call cannot be keyed (an
    argument that is not a DLPack tensor: the full path reports it)."""
    if not env_flag(CALL_PLANS_ENV, "1"):
        return None, None, None
    try:
        infos = [None if t is None else inspect(t, name) for t, name in zip(tensors, names)]
        # typed scalars: retire=1 is not retire=True (the full path rejects the former)
        key = (kind, tuple((type(x), x) for x in scalars), env_snapshot(switches),
               tuple(None if i is None else (i.shape, i.stride, i.dtype, i.device)
                     for i in infos))
        plan = _call_plans.get(key)
    except Exception:  # noqa: BLE001 - unhashable scalars, no __dlpack__: the full path decides
        return None, None, None
    if plan is not None:
        for info, align in zip(infos, plan.aligns):
            if info is not None and info.data_ptr % align:
                return key, infos, None  # the full path reports the misaligned argument
        _check_current_device(plan.problem.device)
    return key, infos, plan


def _remember_plan(key: Optional[tuple], plan: CallPlan) -> None:
    if key is None:
        return
    if len(_call_plans) >= MAX_CALL_PLANS:
        _call_plans.clear()
    _call_plans[key] = plan


def _aligns(names: tuple) -> tuple:
    return tuple(_ALIGN.get(name, 4) for name in names)


def _infos_in_order(names: tuple, checked: dict) -> list:
    """The full path's infos (a dict) in the argument order ``names`` the launch unpacks."""
    return [checked.get(_INFO_KEY.get(name, name)) for name in names]


def flashmask_fwd(q: Any, k: Any, v: Any, out: Any, lse: Any, startend_row_indices: Any, *,
                  causal: bool, softmax_scale: float, learnable_sink: Any = None,
                  stream: int, reserved_sms: int = 0, retire: bool = False) -> None:
    """FlashMask forward, written in place into ``out`` [B,Sq,H,Dv] and ``lse`` fp32 [B,H,Sq].

    q [B,Sq,H,D], k [B,Sk,Hk,D], v [B,Sk,Hk,Dv] bf16/fp16 contiguous; ``startend_row_indices``
    int32 [B,Hm,Sk,C] or None; ``learnable_sink`` fp32 [H] or None; all ``__dlpack__`` objects on
    the current CUDA device; ``stream`` a CUDA stream handle. Enqueues work, never synchronises.
    ``reserved_sms``: SMs the persistent grid leaves free, for kernels that must run at the same
    time on other streams (NCCL collectives of context parallelism); 0 = one CTA per SM.
    ``retire``: one CTA per work tile (static schedule) instead of the persistent grid, so CTAs
    retire as they finish and kernels queued on other streams get SMs in between (the other way
    to let a collective overlap; then ``reserved_sms`` must be 0).
    """
    from .flash_fwd_sm90 import ENV_SWITCHES

    tensors = (q, k, v, out, lse, startend_row_indices, learnable_sink)
    key, infos, plan = _plan_lookup("fwd", _FWD_TENSORS, tensors,
                                    (bool(causal), softmax_scale, reserved_sms, retire),
                                    ENV_SWITCHES)
    if plan is None:
        plan, checked = _forward_plan(q, k, v, out, lse, startend_row_indices, causal,
                                      softmax_scale, learnable_sink, reserved_sms, retire)
        _remember_plan(key, plan)
        infos = _infos_in_order(_FWD_TENSORS, checked)
    _launch_forward(plan, infos, startend_row_indices, softmax_scale, stream)


def _forward_plan(q, k, v, out, lse, startend_row_indices, causal, softmax_scale,
                  learnable_sink, reserved_sms, retire) -> tuple[CallPlan, dict]:
    """Validate a forward call and choose its variant and grid; returns the plan and the infos."""
    problem, infos = _problem(q, k, v, startend_row_indices, causal, learnable_sink)
    dev = (2, problem.device)
    b, sq, h, dv = problem.batch, problem.seqlen_q, problem.num_heads, problem.head_dim_v
    infos["out"] = _convert(out, "out", problem.dtype, (b, sq, h, dv), dev, TMA_ALIGN_BYTES)
    infos["lse"] = _convert(lse, "lse", "float32", (b, h, sq), dev, 4)
    _expect(math.isfinite(softmax_scale), "softmax_scale", "a finite float", softmax_scale)
    sms = num_sms(problem.device)
    _expect(isinstance(reserved_sms, int) and 0 <= reserved_sms < sms, "reserved_sms",
            f"an int in [0, {sms})", reserved_sms)
    _check_retire(retire, reserved_sms)
    config = forward_config(problem.dtype, problem.head_dim, problem.causal, problem.num_columns,
                            problem.has_sink)
    grid_ctas = sms - reserved_sms
    work_items = b * h * -(-sq // config.tile_m)
    from .flash_fwd_sm90 import default_one_tile_per_cta

    if retire or default_one_tile_per_cta():
        # static schedule over a grid of every work tile: each CTA takes one and ends
        config = replace(config, dynamic_schedule=False, work_order=False, claim_passes=1)
        grid_ctas = work_items
    elif (config.dynamic_schedule and config.claim_passes == 1
          and problem.num_columns is not None):
        # claims over the heaviest-first order where a GQA grid gets few items per CTA (a
        # problem-size rule, flash_fwd_sm90.default_work_order)
        from .flash_fwd_sm90 import default_work_order

        ordered = default_work_order(work_items, grid_ctas, h // problem.num_kv_heads)
        if ordered != config.work_order:
            config = replace(config, work_order=ordered)
    plan = CallPlan(problem, config, compiled_forward(config), grid_ctas=grid_ctas,
                    aligns=_aligns(_FWD_TENSORS))
    return plan, infos


def _launch_forward(plan: CallPlan, infos: list, indices: Any, softmax_scale: float,
                    stream: int) -> None:
    """Enqueue a planned forward: the index-derived buffers (cached with the index tensor), then
    the kernel."""
    problem, config = plan.problem, plan.config
    q, k, v, out, lse, indices_info, sink = infos
    summary, owned = (None, None), False
    if problem.num_columns is not None:
        summary, owned = tile_summary_for(indices, problem, config.tile_n, stream)
    ranges, ranges_owned = (None,), False
    if config.tile_ranges:
        ranges, ranges_owned = tile_ranges_for(indices, problem, config, summary, stream)
    ordering, ordering_owned = (None,), False  # only when the config asks for the work order
    if getattr(config, "work_order", False):
        ordering, ordering_owned = work_order_for(indices, problem, config, summary, stream)
    counter = schedule_counter(problem.device, stream) if config.dynamic_schedule else None
    plan.kernel(q, k, v, out, lse, indices_info, summary[0], summary[1], sink,
                float(softmax_scale), stream, plan.grid_ctas, work_order=ordering[0],
                tile_ranges=ranges[0], schedule_counter=counter)
    # freed in stream order, after the kernel that reads them (cached buffers stay)
    for buffer in (*(summary if owned else ()), *(ranges if ranges_owned else ()),
                   *(ordering if ordering_owned else ())):
        if buffer is not None:
            buffer.release()


def flashmask_bwd(q: Any, k: Any, v: Any, out: Any, dout: Any, lse: Any, dq: Any, dk: Any,
                  dv: Any, startend_row_indices: Any, *, causal: bool, softmax_scale: float,
                  learnable_sink: Any = None, dsink: Any = None, deterministic: bool = False,
                  stream: int, reserved_sms: int = 0, retire: bool = False) -> None:
    """FlashMask backward: dq/dk/dv (like q/k/v) and dsink (fp32 [H], iff a sink) in place.

    ``out``/``lse`` are the forward's outputs, ``dout`` like ``out``. ``deterministic=True`` orders
    the dQ accumulation so reruns are bit-identical. Zeros where nothing is visible.
    ``reserved_sms``: SMs the persistent grid leaves free for kernels on other streams (context
    parallelism's reduce-scatters), as in :func:`flashmask_fwd`; ``retire``: one CTA per key
    tile instead of the persistent grid, as in :func:`flashmask_fwd`.
    """
    from .bwd_rules import ENV_SWITCHES

    tensors = (q, k, v, out, dout, lse, dq, dk, dv, startend_row_indices, learnable_sink, dsink)
    key, infos, plan = _plan_lookup("bwd", _BWD_TENSORS, tensors,
                                    (bool(causal), softmax_scale, bool(deterministic),
                                     reserved_sms, retire), ENV_SWITCHES + (ONE_WORKSPACE_ENV,))
    if plan is None:
        plan, checked = _backward_plan(q, k, v, out, dout, lse, dq, dk, dv, startend_row_indices,
                                       causal, softmax_scale, learnable_sink, dsink,
                                       deterministic, reserved_sms, retire)
        _remember_plan(key, plan)
        infos = _infos_in_order(_BWD_TENSORS, checked)
    _launch_backward(plan, infos, startend_row_indices, softmax_scale, stream)


def _backward_plan(q, k, v, out, dout, lse, dq, dk, dv, startend_row_indices, causal,
                   softmax_scale, learnable_sink, dsink, deterministic, reserved_sms, retire
                   ) -> tuple[CallPlan, dict]:
    """Validate a backward call and choose its variant and scratch buffers; returns the plan and
    the infos."""
    problem, infos = _problem(q, k, v, startend_row_indices, causal, learnable_sink)
    dev = (2, problem.device)
    b, sq, sk = problem.batch, problem.seqlen_q, problem.seqlen_k
    h, hk, d, dvd = problem.num_heads, problem.num_kv_heads, problem.head_dim, problem.head_dim_v
    a16 = TMA_ALIGN_BYTES
    infos["out"] = _convert(out, "out", problem.dtype, (b, sq, h, dvd), dev, a16)
    infos["dout"] = _convert(dout, "dout", problem.dtype, (b, sq, h, dvd), dev, a16)
    infos["lse"] = _convert(lse, "lse", "float32", (b, h, sq), dev, 4)
    infos["dq"] = _convert(dq, "dq", problem.dtype, (b, sq, h, d), dev, a16)
    infos["dk"] = _convert(dk, "dk", problem.dtype, (b, sk, hk, d), dev, a16)
    infos["dv"] = _convert(dv, "dv", problem.dtype, (b, sk, hk, dvd), dev, a16)
    _expect((dsink is None) == (learnable_sink is None), "dsink",
            "a tensor exactly when learnable_sink is given", type(dsink).__name__)
    if dsink is not None:
        infos["dsink"] = _convert(dsink, "dsink", "float32", (h,), dev, 4)
    _expect(math.isfinite(softmax_scale), "softmax_scale", "a finite float", softmax_scale)
    sms = num_sms(problem.device)
    _expect(isinstance(reserved_sms, int) and 0 <= reserved_sms < sms, "reserved_sms",
            f"an int in [0, {sms})", reserved_sms)
    _check_retire(retire, reserved_sms)
    config = backward_config(problem.dtype, d, problem.causal, problem.num_columns, gqa=h != hk,
                             has_sink=problem.has_sink, deterministic=deterministic,
                             num_sms=sms - reserved_sms)
    if config.walk_interleave and hk % problem.mask_heads:
        # one mask head per query head: a group's heads do not share bands, so each walks alone
        config = replace(config, walk_interleave=False)
    if retire and config.persistent:  # one CTA per (key tile, head, batch), launched in order
        config = config.one_cta_per_tile()
    elif config.persistent and not config.deterministic:
        # claims by work class where the grid gets few items per CTA (a problem-size rule); the
        # key-major order depends on the passes (default_key_major)
        from .bwd_rules import (backward_work_items, default_claim_list, default_claim_passes,
                                default_key_major)

        passes = default_claim_passes(backward_work_items(config, b, sk, h, hk),
                                      config.persistent_ctas)
        key_major = default_key_major(config.num_columns, passes, config.gqa_in_cta,
                                      config.head_dim, config.causal)
        claim_list = passes > 1 and default_claim_list()
        if (passes, key_major, claim_list) != (config.claim_passes, config.key_major,
                                               config.claim_list):
            config = replace(config, claim_passes=passes, key_major=key_major,
                             claim_list=claim_list)
    from .flash_bwd_sm90 import workspace_shapes

    workspace, workspace_bytes = workspace_layout(workspace_shapes(config, b, sq, sk, h, hk))
    if not env_flag(ONE_WORKSPACE_ENV, "1"):
        workspace_bytes = 0  # one stream-ordered allocation per buffer
    plan = CallPlan(problem, config, compiled_backward(config), workspace=workspace,
                    workspace_bytes=workspace_bytes, aligns=_aligns(_BWD_TENSORS))
    return plan, infos


def _launch_backward(plan: CallPlan, infos: list, indices: Any, softmax_scale: float,
                     stream: int) -> None:
    """Enqueue a planned backward: its scratch buffers (one stream-ordered allocation for all, or
    with ``PADDLE_FLASHMASK_BWD_ONE_WORKSPACE=0`` one per buffer), the tile summary (cached with
    the index tensor), the kernels, then the scratch buffers' release."""
    problem, config = plan.problem, plan.config
    q, k, v, out, dout, lse, dq, dk, dv, indices_info, sink, dsink = infos
    arena, buffers = None, []
    if plan.workspace_bytes:
        arena = allocate_workspace(plan.workspace_bytes, problem.device, stream)
        buffers.append(arena)
    workspace = {}
    for name, shape, dtype, offset in plan.workspace:
        if offset < 0:  # the persistent grid's tile counter: the stream's work counter, kept
            workspace[name] = schedule_counter(problem.device, stream)
        elif arena is not None:
            workspace[name] = WorkspaceView(arena.ptr + offset, shape, dtype)
        else:
            workspace[name] = DeviceBuffer(shape, dtype, problem.device, stream)
            buffers.append(workspace[name])
    summary, owned = (None, None), False
    if problem.num_columns is not None:
        summary, owned = tile_summary_for(indices, problem, config.tile_n, stream)
    plan.kernel(q, k, v, out, dout, lse, dq, dk, dv, indices_info, summary[0], summary[1],
                sink, dsink, workspace, float(softmax_scale), stream)
    for buffer in (*buffers, *(summary if owned else ())):  # stream order, after the kernels
        if buffer is not None:
            buffer.release()
