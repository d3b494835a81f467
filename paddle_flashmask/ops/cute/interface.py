"""Host API of the ``cute`` backend: ``flashmask_fwd`` / ``flashmask_bwd`` (team contract KERNELS.md).

The frontends call these with objects supporting ``__dlpack__`` (torch or paddle CUDA tensors) and
the framework's current CUDA stream (an int handle). This module

1. converts every argument with ``cute.runtime.from_dlpack`` and validates it (shape, dtype,
   contiguity, device, alignment), raising ``ValueError`` naming the argument, the expected and the
   found value;
2. runs the per-key-tile summary kernel on ``startend_row_indices`` (DESIGN §3: the attention
   kernels decide SKIP / PARTIAL / FULL from it, no ``[S/tile, S/tile]`` table);
3. picks the compile-time config (tile sizes per head dim) and gets the compiled kernels through
   the JIT cache (:mod:`.cache`);
4. allocates the scratch buffers (stream-ordered, :class:`.dlpack.DeviceBuffer`) and launches
   everything on the caller's stream. Nothing synchronises the host.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import cuda.bindings.driver as cu

from paddle_flashmask import semantics

from . import cache
from .dlpack import DeviceBuffer, TensorInfo, runtime_tensor, to_cute
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


def _data_ptr(tensor: Any) -> int:
    # the runtime pointer of a from_dlpack tensor (created with the default element alignment,
    # so building it never asserts)
    return int(tensor.iterator._pointer)


def _convert(obj: Any, name: str, dtype: str | tuple[str, ...], shape: tuple[int, ...],
             device: Optional[tuple[int, int]], align: int = 1) -> tuple[Any, TensorInfo]:
    """from_dlpack + checks: dtype, exact shape, compact row-major layout, device, alignment."""
    tensor, info = to_cute(obj, name)
    dtypes = (dtype,) if isinstance(dtype, str) else dtype
    _expect(info.dtype in dtypes, name, f"dtype {' or '.join(dtypes)}", info.dtype)
    _expect(info.shape == tuple(shape), name, f"shape {list(shape)}", list(info.shape))
    _expect(info.contiguous, name, "a contiguous (row-major) tensor", f"strides {list(info.stride)}")
    _expect(info.device[0] == 2, name, "a CUDA tensor (DLPack device type 2)",
            f"device type {info.device[0]}")
    if device is not None:
        _expect(info.device == device, name, f"CUDA device {device[1]} (same as q)",
                f"device {info.device[1]}")
    if align > 1:
        ptr = _data_ptr(tensor)
        _expect(ptr % align == 0, name, f"a {align}-byte aligned data pointer", hex(ptr))
    if align > 1:  # re-wrap so the kernel may assume the alignment that was just checked
        tensor, _ = to_cute(obj, name, assumed_align=align)
    return tensor, info


def _problem(q: Any, k: Any, v: Any, startend_row_indices: Any, causal: bool,
             learnable_sink: Any) -> tuple[Problem, dict]:
    tq, iq = to_cute(q, "q")
    _expect(len(iq.shape) == 4, "q", "rank 4 [B, Sq, H, D]", f"shape {list(iq.shape)}")
    _expect(iq.dtype in INPUT_DTYPES, "q", "dtype bfloat16 or float16", iq.dtype)
    b, sq, h, d = iq.shape
    _expect(d in SUPPORTED_HEAD_DIMS, "q", f"head dim in {sorted(SUPPORTED_HEAD_DIMS)}", d)
    dev = iq.device
    _, ik = to_cute(k, "k")
    _expect(len(ik.shape) == 4, "k", "rank 4 [B, Sk, Hk, D]", f"shape {list(ik.shape)}")
    sk, hk = ik.shape[1], ik.shape[2]
    _expect(hk > 0 and h % hk == 0, "k", f"a number of heads dividing H={h}", hk)
    dv = SUPPORTED_HEAD_DIMS[d]
    tensors = {
        "q": _convert(q, "q", iq.dtype, (b, sq, h, d), dev, TMA_ALIGN_BYTES)[0],
        "k": _convert(k, "k", iq.dtype, (b, sk, hk, d), dev, TMA_ALIGN_BYTES)[0],
        "v": _convert(v, "v", iq.dtype, (b, sk, hk, dv), dev, TMA_ALIGN_BYTES)[0],
    }
    del tq
    hm, num_columns = 1, None
    if startend_row_indices is not None:
        _, ii = to_cute(startend_row_indices, "startend_row_indices")
        _expect(len(ii.shape) == 4, "startend_row_indices", "rank 4 [B, Hm, Sk, C]",
                f"shape {list(ii.shape)}")
        hm, num_columns = ii.shape[1], ii.shape[3]
        semantics.column_names(causal, num_columns)  # ValueError for an invalid (causal, C) form
        _expect(hm in {1, hk, h}, "startend_row_indices", f"mask heads (dim 1) in {sorted({1, hk, h})}",
                hm)
        tensors["indices"] = _convert(startend_row_indices, "startend_row_indices", "int32",
                                      (b, hm, sk, num_columns), dev)[0]
    if learnable_sink is not None:
        tensors["sink"] = _convert(learnable_sink, "learnable_sink", "float32", (h,), dev)[0]
    problem = Problem(iq.dtype, b, sq, sk, h, hk, d, dv, hm, num_columns, bool(causal),
                      learnable_sink is not None, dev[1])
    return problem, tensors


# --------------------------------------------------------------------------------------------------
# Tile summary
# --------------------------------------------------------------------------------------------------

def launch_tile_summary(indices: Any, problem: Problem, tile_n: int, stream: int
                        ) -> tuple[DeviceBuffer, DeviceBuffer]:
    """Per-key-tile min/max of ``indices`` (a cute tensor ``[B, Hm, Sk, C]``) on ``stream``.

    Returns the ``col_min``, ``col_max`` buffers, int32 ``[B, Hm, ceil(Sk/tile_n), C]``; keep them
    alive until the kernels reading them are enqueued.
    """
    c = problem.num_columns
    shape = (problem.batch, problem.mask_heads, -(-problem.seqlen_k // tile_n), c)
    col_min = DeviceBuffer(shape, "int32", problem.device, stream)
    col_max = DeviceBuffer(shape, "int32", problem.device, stream)
    if problem.seqlen_k > 0:
        kernel = cache.get_or_compile("tile_summary", SummaryConfig(tile_n, c), compile_summary)
        kernel(indices, runtime_tensor(col_min), runtime_tensor(col_max), cu.CUstream(stream))
    return col_min, col_max


def tile_summary(startend_row_indices: Any, tile_n: int, *, stream: int
                 ) -> tuple[DeviceBuffer, DeviceBuffer]:
    """Standalone GPU version of :func:`paddle_flashmask.semantics.tile_summary` (tests, tools)."""
    _, info = to_cute(startend_row_indices, "startend_row_indices")
    _expect(len(info.shape) == 4, "startend_row_indices", "rank 4 [B, Hm, Sk, C]",
            f"shape {list(info.shape)}")
    tensor, _ = _convert(startend_row_indices, "startend_row_indices", "int32", info.shape, None)
    b, hm, sk, c = info.shape
    problem = Problem("int32", b, 0, sk, hm, hm, 0, 0, hm, c, False, False, info.device[1])
    return launch_tile_summary(tensor, problem, tile_n, stream)
