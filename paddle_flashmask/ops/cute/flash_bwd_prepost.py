"""Backward pre- and post-processing kernels (CuTe DSL, framework-free).

Preprocess (one CTA per 64 query rows of one (batch, head)):
  * ``delta[b, h, i] = sum_d dO[b, i, h, d] * O[b, i, h, d]`` in fp32,
  * ``lse2[b, h, i] = LSE * log2(e)``; rows with ``LSE = -inf`` (no visible key) and the padding
    rows past Sq get ``+inf`` so the main kernel's ``exp2(S * scale_log2 - lse2)`` is exactly 0 there
    (never ``exp(-inf + inf) = NaN``),
  * zeroes the fp32 dQ accumulator rows (and the deterministic-mode semaphores),
  * with a learnable sink: per-CTA partial of ``dsink[h] = -sum_i exp(sink_h - LSE_i) * delta_i``,
    written to ``dsink_part[b, h, block]`` (reduced in a fixed order by the postprocess, so dsink is
    deterministic without atomics).

Postprocess:
  * ``dq = dq_accum * softmax_scale`` cast to the input dtype,
  * GQA: ``dk[b, j, hk] = sum over the group's query heads of dk_part[b, j, h]`` (fp32 partials
    written by the main kernel) cast to the input dtype; same for dv,
  * ``dsink[h] = sum_b sum_block dsink_part[b, h, block]`` in a fixed order.

Shapes (all contiguous): q-like ``[B, Sq, H, D]``; lse / lse2 / delta ``[B, H, Sq]`` and
``[B, H, Sq_pad]`` with ``Sq_pad = ceil(Sq / 64) * 64``; dq_accum fp32 ``[B, H, Sq_pad, D]``;
semaphores int32 ``[B, H, Sq_pad / 64]``; dsink_part fp32 ``[B, H, Sq_pad / 64]``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr
import cuda.bindings.driver as cuda

ROWS_PER_CTA = 64  # must equal the main kernel's tile_m: the semaphore/dsink grids use it
_THREADS = 256
_LOG2_E = math.log2(math.e)


def rowmajor(ptr: cute.Pointer, shape: tuple) -> cute.Tensor:
    """Compact row-major tensor over ``ptr``; the outermost stride is 64-bit (large batches)."""
    strides = [1]
    for extent in reversed(shape[1:]):
        strides.insert(0, strides[0] * extent)
    if len(strides) > 1:
        strides[0] = cutlass.Int64(strides[0])
    return cute.make_tensor(ptr, cute.make_layout(shape, stride=tuple(strides)))


def _dsl_dtype(name: str):
    table = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}
    if name not in table:
        raise ValueError(f"dtype: expected one of {sorted(table)}, found {name!r}")
    return table[name]


@dataclass(frozen=True)
class PrePostConfig:
    """Compile-time parameters of the pre/post kernels (hashable cache key)."""

    dtype: str  # "bfloat16" | "float16"
    head_dim: int
    head_dim_v: int
    gqa: bool  # dk/dv arrive as fp32 per-query-head partials that must be summed per group
    has_sink: bool
    deterministic: bool


class _Preprocess:
    def __init__(self, cfg: PrePostConfig):
        self.cfg = cfg

    @cute.jit
    def __call__(self, o_ptr: cute.Pointer, do_ptr: cute.Pointer, lse_ptr: cute.Pointer,
                 lse2_ptr: cute.Pointer, delta_ptr: cute.Pointer, dqacc_ptr: cute.Pointer,
                 sink_ptr: Optional[cute.Pointer], dsink_part_ptr: Optional[cute.Pointer],
                 sem_ptr: Optional[cute.Pointer], b: Int32, sq: Int32, h: Int32, stream):
        n_blk = cute.ceil_div(sq, ROWS_PER_CTA)
        sqp = n_blk * ROWS_PER_CTA
        mO = rowmajor(o_ptr, (b, sq, h, self.cfg.head_dim_v))
        mdO = rowmajor(do_ptr, (b, sq, h, self.cfg.head_dim_v))
        mLSE = rowmajor(lse_ptr, (b, h, sq))
        mLSE2 = rowmajor(lse2_ptr, (b, h, sqp))
        mDelta = rowmajor(delta_ptr, (b, h, sqp))
        mdQacc = rowmajor(dqacc_ptr, (b, h, sqp, self.cfg.head_dim))
        mSink = mDsinkPart = mSem = None
        if const_expr(self.cfg.has_sink):
            mSink = rowmajor(sink_ptr, (h,))
            mDsinkPart = rowmajor(dsink_part_ptr, (b, h, n_blk))
        if const_expr(self.cfg.deterministic):
            mSem = rowmajor(sem_ptr, (b, h, n_blk))
        self.kernel(mO, mdO, mLSE, mLSE2, mDelta, mdQacc, mSink, mDsinkPart, mSem).launch(
            grid=[n_blk, h, b], block=[_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mO: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor, mLSE2: cute.Tensor,
               mDelta: cute.Tensor, mdQacc: cute.Tensor, mSink: Optional[cute.Tensor],
               mDsinkPart: Optional[cute.Tensor], mSem: Optional[cute.Tensor]):
        tidx, _, _ = cute.arch.thread_idx()
        blk, h, b = cute.arch.block_idx()
        warp = tidx // 32
        lane = tidx % 32
        sq = mO.shape[1]
        dv = self.cfg.head_dim_v
        d = self.cfg.head_dim
        n_warps = _THREADS // 32
        row0 = blk * ROWS_PER_CTA

        smem = cutlass.utils.SmemAllocator()
        s_part = smem.allocate_tensor(Float32, cute.make_layout(n_warps), 16)

        sink_part = Float32(0.0)
        for r in cutlass.range(warp, ROWS_PER_CTA, n_warps, unroll=1):
            i = row0 + r
            if i < sq:
                acc = Float32(0.0)
                for c in cutlass.range(lane, dv, 32, unroll=1):
                    acc += Float32(mO[b, i, h, c]) * Float32(mdO[b, i, h, c])
                acc = cute.arch.warp_reduction_sum(acc)
                lse = mLSE[b, h, i]
                lse2 = lse * Float32(_LOG2_E)
                if lse == -Float32.inf:
                    lse2 = Float32.inf
                if lane == 0:
                    mDelta[b, h, i] = acc
                    mLSE2[b, h, i] = lse2
                if const_expr(self.cfg.has_sink):
                    # exp(sink - LSE) is the sink's share of the softmax; LSE >= sink is finite.
                    p_sink = cute.math.exp2((mSink[h] - lse) * Float32(_LOG2_E))
                    sink_part -= p_sink * acc
            else:
                if lane == 0:
                    mDelta[b, h, i] = Float32(0.0)
                    mLSE2[b, h, i] = Float32.inf
            # zero this row of the fp32 dQ accumulator
            for c in cutlass.range(lane, d, 32, unroll=1):
                mdQacc[b, h, i, c] = Float32(0.0)

        if const_expr(self.cfg.deterministic):
            if tidx == 0:
                mSem[b, h, blk] = Int32(0)
        if const_expr(self.cfg.has_sink):
            if lane == 0:
                s_part[warp] = sink_part
            cute.arch.barrier()
            if tidx == 0:
                total = Float32(0.0)
                for w in cutlass.range_constexpr(n_warps):
                    total += s_part[w]
                mDsinkPart[b, h, blk] = total


class _Postprocess:
    def __init__(self, cfg: PrePostConfig):
        self.cfg = cfg

    @cute.jit
    def __call__(self, dqacc_ptr: cute.Pointer, dq_ptr: cute.Pointer,
                 dk_part_ptr: Optional[cute.Pointer], dv_part_ptr: Optional[cute.Pointer],
                 dk_ptr: Optional[cute.Pointer], dv_ptr: Optional[cute.Pointer],
                 dsink_part_ptr: Optional[cute.Pointer], dsink_ptr: Optional[cute.Pointer],
                 b: Int32, sq: Int32, sk: Int32, h: Int32, hk: Int32, softmax_scale: Float32,
                 stream):
        d, dv = self.cfg.head_dim, self.cfg.head_dim_v
        n_blk = cute.ceil_div(sq, ROWS_PER_CTA)
        sqp = n_blk * ROWS_PER_CTA
        mdQacc = rowmajor(dqacc_ptr, (b, h, sqp, d))
        mdQ = rowmajor(dq_ptr, (b, sq, h, d))
        self.dq_kernel(mdQacc, mdQ, softmax_scale).launch(
            grid=[n_blk, h, b], block=[_THREADS, 1, 1], stream=stream)
        if const_expr(self.cfg.gqa):
            mdKpart = rowmajor(dk_part_ptr, (b, sk, h, d))
            mdVpart = rowmajor(dv_part_ptr, (b, sk, h, dv))
            mdK = rowmajor(dk_ptr, (b, sk, hk, d))
            mdV = rowmajor(dv_ptr, (b, sk, hk, dv))
            # at least one CTA: Sk = 0 must not launch an empty grid (rows are bounds-checked)
            self.dkv_kernel(mdKpart, mdVpart, mdK, mdV).launch(
                grid=[cutlass.max(cute.ceil_div(sk, ROWS_PER_CTA), 1), hk, b],
                block=[_THREADS, 1, 1],
                stream=stream)
        if const_expr(self.cfg.has_sink):
            mDsinkPart = rowmajor(dsink_part_ptr, (b, h, n_blk))
            mDsink = rowmajor(dsink_ptr, (h,))
            self.dsink_kernel(mDsinkPart, mDsink).launch(grid=[h, 1, 1], block=[32, 1, 1],
                                                         stream=stream)

    @cute.kernel
    def dq_kernel(self, mdQacc: cute.Tensor, mdQ: cute.Tensor, softmax_scale: Float32):
        tidx, _, _ = cute.arch.thread_idx()
        blk, h, b = cute.arch.block_idx()
        sq = mdQ.shape[1]
        d = self.cfg.head_dim
        row0 = blk * ROWS_PER_CTA
        for e in cutlass.range(tidx, ROWS_PER_CTA * d, _THREADS, unroll=1):
            r = e // d
            c = e - r * d
            i = row0 + r
            if i < sq:
                mdQ[b, i, h, c] = (mdQacc[b, h, i, c] * softmax_scale).to(mdQ.element_type)

    @cute.kernel
    def dkv_kernel(self, mdKpart: cute.Tensor, mdVpart: cute.Tensor, mdK: cute.Tensor,
                   mdV: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        blk, hk, b = cute.arch.block_idx()
        sk = mdK.shape[1]
        group = mdKpart.shape[2] // mdK.shape[2]
        row0 = blk * ROWS_PER_CTA
        for which in cutlass.range_constexpr(2):
            src = mdKpart if const_expr(which == 0) else mdVpart
            dst = mdK if const_expr(which == 0) else mdV
            d = self.cfg.head_dim if const_expr(which == 0) else self.cfg.head_dim_v
            for e in cutlass.range(tidx, ROWS_PER_CTA * d, _THREADS, unroll=1):
                r = e // d
                c = e - r * d
                j = row0 + r
                if j < sk:
                    acc = Float32(0.0)
                    for g in cutlass.range(group, unroll=1):  # fixed order: deterministic
                        acc += src[b, j, hk * group + g, c]
                    dst[b, j, hk, c] = acc.to(dst.element_type)

    @cute.kernel
    def dsink_kernel(self, mDsinkPart: cute.Tensor, mDsink: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        h, _, _ = cute.arch.block_idx()
        nb = mDsinkPart.shape[0]
        nblk = mDsinkPart.shape[2]
        if tidx == 0:
            acc = Float32(0.0)
            for bb in cutlass.range(nb, unroll=1):
                for k in cutlass.range(nblk, unroll=1):
                    acc += mDsinkPart[bb, h, k]
            mDsink[h] = acc


def _placeholder(dtype, align: int) -> cute.Pointer:
    return cute.runtime.make_ptr(dtype, 1 << 12, cute.AddressSpace.gmem, assumed_align=align)


def compile_preprocess(cfg: PrePostConfig):
    """Compiled callable ``(o, do, lse, lse2, delta, dq_accum, sink|None, dsink_part|None,
    sem|None, B, Sq, H, stream)`` over raw device pointers (``cute.runtime.make_ptr``)."""
    dt = _dsl_dtype(cfg.dtype)
    f32 = lambda: _placeholder(Float32, 16)  # noqa: E731
    args = [_placeholder(dt, 16), _placeholder(dt, 16), f32(), f32(), f32(), f32(),
            f32() if cfg.has_sink else None, f32() if cfg.has_sink else None,
            _placeholder(Int32, 4) if cfg.deterministic else None,
            Int32(1), Int32(64), Int32(1), cuda.CUstream(0)]
    return cute.compile(_Preprocess(cfg), *args)


def compile_postprocess(cfg: PrePostConfig):
    """Compiled callable ``(dq_accum, dq, dk_part|None, dv_part|None, dk|None, dv|None,
    dsink_part|None, dsink|None, B, Sq, Sk, H, Hk, softmax_scale, stream)`` over raw pointers."""
    dt = _dsl_dtype(cfg.dtype)
    f32 = lambda: _placeholder(Float32, 16)  # noqa: E731
    g = cfg.gqa
    args = [f32(), _placeholder(dt, 16), f32() if g else None, f32() if g else None,
            _placeholder(dt, 16) if g else None, _placeholder(dt, 16) if g else None,
            f32() if cfg.has_sink else None, f32() if cfg.has_sink else None,
            Int32(1), Int32(64), Int32(64), Int32(1), Int32(1), Float32(1.0), cuda.CUstream(0)]
    return cute.compile(_Postprocess(cfg), *args)
