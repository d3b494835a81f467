"""The SM90 backward's dK/dV epilogue: a finished key tile's dK (scaled) and dV leave the
consumers' registers once, directly in the input dtype (MHA, the GQA head walk), as fp32
per-query-head partials, or summed over the GQA group in query-head order (``dkv_chain``,
``dkv_last``, ``dkv_red``, ``dkv_bulk``; ``BwdConfig``). A mixin of ``FlashMaskBwdSm90``.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

from .bwd_layout import (_BAR_DKV_CHAIN, _BAR_DKV_FULL, _BAR_DKV_STAGE, _DQ_SYNC_THREADS,
                         dq_stage_layout)


class BwdDkvStore:
    """dK/dV epilogue of the backward kernel (mixin)."""

    @cute.jit
    def _store_dkv(self, grid, acc_dK, acc_dV, th_dk, th_dv, mdK, mdV, b, h, hk, n_blk, seqlen_k,
                   softmax_scale, ctid):
        """Consumers: the finished key tile's dK (scaled) and dV, written once; with
        ``dkv_chain`` added to the GQA group's running sum in query-head order (BwdConfig)."""
        n0 = n_blk * self.tile_n
        if const_expr(self.cfg.dkv_bulk):
            self._stage_dkv(grid.storage, acc_dK, acc_dV, th_dk, th_dv, softmax_scale)
        elif const_expr(self.cfg.dkv_chain):
            group = grid.num_h // grid.mK.shape[2]
            member = h - hk * group
            flag = grid.mDkvFlags.iterator + cute.crd2idx((b, hk, n_blk), grid.mDkvFlags.layout)
            if member > 0:  # the sum over the group's earlier query heads is complete
                # (an acquire load also drops the SM's L1: the sums are read fresh)
                self._sem_wait(grid.mDkvFlags, b, hk, n_blk, member, ctid, sync="acquire")
                cute.arch.barrier(barrier_id=_BAR_DKV_CHAIN,
                                  number_of_threads=self.num_consumer_threads)
            last = member == group - 1
            if const_expr(self.cfg.dkv_red):
                self._reduce_rows(acc_dK, th_dk, grid.mdKacc, b, hk, n0, seqlen_k, self.d,
                                  softmax_scale, member)
                self._reduce_rows(acc_dV, th_dv, grid.mdVacc, b, hk, n0, seqlen_k, self.dv,
                                  Float32(1.0), member)
            else:
                self._chain_rows(acc_dK, th_dk, grid.mdKacc, mdK, b, hk, n0, seqlen_k, self.d,
                                 softmax_scale, member, last)
                self._chain_rows(acc_dV, th_dv, grid.mdVacc, mdV, b, hk, n0, seqlen_k, self.dv,
                                 Float32(1.0), member, last)
            # (the last head's adds need no flag: the postprocess runs after the kernel)
            if not last:  # every consumer's stores before the flag that hands the sum on
                cute.arch.fence_acq_rel_gpu()
                cute.arch.barrier(barrier_id=_BAR_DKV_CHAIN,
                                  number_of_threads=self.num_consumer_threads)
                if ctid == 0:
                    cute.arch.store(flag, member + 1, sem="release", scope="gpu")
        elif const_expr(self.cfg.dkv_last):
            group = grid.num_h // grid.mK.shape[2]
            self._store_rows(acc_dK, th_dk, grid.mdKacc, b, h, h, n0, seqlen_k, self.d,
                             softmax_scale)
            self._store_rows(acc_dV, th_dv, grid.mdVacc, b, h, h, n0, seqlen_k, self.dv,
                             Float32(1.0))
            # every consumer's partial stores before the count that may let another CTA read them
            cute.arch.fence_acq_rel_gpu()
            cute.arch.barrier(barrier_id=_BAR_DKV_CHAIN,
                              number_of_threads=self.num_consumer_threads)
            s_arrival = grid.s_arrival  # a local: the DSL carries what a branch writes to
            if ctid == 0:
                flag = grid.mDkvFlags.iterator + cute.crd2idx((b, hk, n_blk),
                                                              grid.mDkvFlags.layout)
                s_arrival[0] = cute.arch.atomic_add(flag, Int32(1), sem="acq_rel", scope="gpu")
            cute.arch.barrier(barrier_id=_BAR_DKV_CHAIN,
                              number_of_threads=self.num_consumer_threads)
            if s_arrival[0] == group - 1:  # the group's last: every partial is stored
                cute.arch.fence_acq_rel_gpu()
                self._sum_group_rows(acc_dK, th_dk, grid.mdKacc, mdK, b, hk * group, group, hk,
                                     n0, seqlen_k, self.d)
                self._sum_group_rows(acc_dV, th_dv, grid.mdVacc, mdV, b, hk * group, group, hk,
                                     n0, seqlen_k, self.dv)
        else:
            self._store_rows(acc_dK, th_dk, mdK, b, h, hk, n0, seqlen_k, self.d, softmax_scale)
            self._store_rows(acc_dV, th_dv, mdV, b, h, hk, n0, seqlen_k, self.dv, Float32(1.0))

    def _dkv_stage_tensor(self, storage, width: int):
        """dkv_bulk: a key tile's fp32 dK or dV ``[tile_n, width]`` in the staging region (sP on,
        ``dkv_region_bytes``), laid out as the group's sum holds it (``dq_stage_layout``'s
        swizzled block). Taken from the shared-memory base where it is used: a pointer held
        across the main loop makes the bidirectional C=2 consumers spill."""
        return cute.make_tensor(cute.recast_ptr(storage.sP.data_ptr(), dtype=Float32),
                                dq_stage_layout(self.tile_n, width, swizzle=True))

    @cute.jit
    def _stage_dkv(self, storage, acc_dK, acc_dV, th_dk, th_dv, softmax_scale):
        """dkv_bulk, consumers: the key tile's scaled dK, then its dV, staged in the region for
        the dQ writer's bulk ops; each waits until the region is free (the walk's dQ reads, then
        the previous tile's bulk read), and the epilogue ends when dV is read out (the next key
        tile's P / dS stores reuse the region)."""
        for i in cutlass.range_constexpr(cute.size(acc_dK)):
            acc_dK[i] = acc_dK[i] * softmax_scale
        for which in cutlass.range_constexpr(2):
            acc, th, width = ((acc_dK, th_dk, self.d) if const_expr(which == 0)
                              else (acc_dV, th_dv, self.dv))
            cute.arch.barrier(barrier_id=_BAR_DKV_STAGE, number_of_threads=_DQ_SYNC_THREADS)
            cute.autovec_copy(acc, th.partition_C(self._dkv_stage_tensor(storage, width)))
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.barrier_arrive(barrier_id=_BAR_DKV_FULL, number_of_threads=_DQ_SYNC_THREADS)
        cute.arch.barrier(barrier_id=_BAR_DKV_STAGE, number_of_threads=_DQ_SYNC_THREADS)

    @cute.jit
    def _add_dkv(self, grid, b, h, n_blk, lane):
        """dkv_bulk, dQ writer warp (after its walk's dQ reads): each tile the consumers stage
        goes to the group's sum with one bulk op, query head 0's a copy and the others' a
        reduce-add after the previous head's flag; then this head's flag, once its adds are
        complete at L2 (the last head's sums are read by the postprocess, after the kernel)."""
        num_hk = grid.mK.shape[2]
        group = grid.num_h // num_hk
        hk = h // group
        member = h - hk * group
        # the key tile's block in the sums, warp-uniform (uniform registers: the writer warp
        # has 24 per thread)
        tile = cute.arch.make_warp_uniform((b * num_hk + hk) * grid.mDkvFlags.shape[2] + n_blk)
        cute.arch.barrier_arrive(barrier_id=_BAR_DKV_STAGE, number_of_threads=_DQ_SYNC_THREADS)
        for which in cutlass.range_constexpr(2):
            mSum, width = ((grid.mdKacc, self.d) if const_expr(which == 0)
                           else (grid.mdVacc, self.dv))
            cute.arch.barrier(barrier_id=_BAR_DKV_FULL, number_of_threads=_DQ_SYNC_THREADS)
            if const_expr(which == 0):
                if member > 0:  # the group's sum holds heads 0 .. member - 1
                    self._sem_wait(grid.mDkvFlags, b, hk, n_blk, member, lane, sync="fence")
                    cute.arch.sync_warp()
                    cute.arch.fence_proxy("async.global")  # the flag seen before the reduce-add
            dst = mSum.iterator + cutlass.Int64(tile) * (self.tile_n * width)
            src = self._dkv_stage_tensor(grid.storage, width).iterator
            with cute.arch.elect_one():
                if member == 0:
                    self._bulk_op(dst, src, self.tile_n * width * 4, True)
                else:
                    self._bulk_op(dst, src, self.tile_n * width * 4, False)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)
            cute.arch.barrier_arrive(barrier_id=_BAR_DKV_STAGE, number_of_threads=_DQ_SYNC_THREADS)
        if member < group - 1:
            cute.arch.cp_async_bulk_wait_group(0, read=False)
            cute.arch.fence_proxy("async.global")
            cute.arch.sync_warp()
            if lane == 0:
                cute.arch.store(grid.mDkvFlags.iterator + tile, member + 1, sem="release",
                                scope="gpu")

    @cute.jit
    def _sum_group_rows(self, acc, th_mma, mParts, mOut, b, h0, group, hk, n0, seqlen_k, width):
        """dkv_last: this thread's elements of the GQA group's partials (query heads ``h0`` ..
        ``h0 + group - 1``) summed in head order into ``acc``, then converted into ``mOut``."""
        # from zero (0 + p0 == p0): the stored accumulator's old values die here
        acc.fill(0.0)
        _, tc = self._tile_rows(th_mma, mParts, b, h0, n0, width)
        for j in cutlass.range(group, unroll=1):
            tj, _ = self._tile_rows(th_mma, mParts, b, h0 + j, n0, width)
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    acc[i] = acc[i] + tj[i]
        to, _ = self._tile_rows(th_mma, mOut, b, hk, n0, width)
        for i in cutlass.range_constexpr(cute.size(acc)):
            if n0 + tc[i][0] < seqlen_k:
                to[i] = acc[i].to(mOut.element_type)

    @cute.jit
    def _chain_rows(self, acc, th_mma, mSum, mOut, b, hk, n0, seqlen_k, width, scale, member,
                    last):
        """dkv_chain: ``acc * scale`` added to the group's running fp32 sum (after it, as the
        partials' reduction adds), then the sum stored for the next query head, or (``last``)
        converted into ``mOut``."""
        ts, tc = self._tile_rows(th_mma, mSum, b, hk, n0, width)
        to, _ = self._tile_rows(th_mma, mOut, b, hk, n0, width)
        for i in cutlass.range_constexpr(cute.size(acc)):
            acc[i] = acc[i] * scale
        if member > 0:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    acc[i] = ts[i] + acc[i]
        if last:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    to[i] = acc[i].to(mOut.element_type)
        else:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    ts[i] = acc[i]

    @cute.jit
    def _reduce_rows(self, acc, th_mma, mSum, b, hk, n0, seqlen_k, width, scale, member):
        """dkv_red: ``acc * scale`` into the group's fp32 sum: stored by the group's first query
        head, reduce-added in L2 by the others (each after its predecessor's flag)."""
        ts, tc = self._tile_rows(th_mma, mSum, b, hk, n0, width)
        for i in cutlass.range_constexpr(cute.size(acc)):
            acc[i] = acc[i] * scale
        if member == 0:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    ts[i] = acc[i]
        else:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    cute.arch.red(ts.iterator + cute.crd2idx(i, ts.layout), acc[i], op="add",
                                  dtype=Float32, sem="relaxed", scope="gpu")

    def _tile_rows(self, th_mma, mRows, b, head, n0, width):
        """This thread's elements of the key tile at ``n0`` in ``mRows [B, Sk, heads, width]``,
        and their (row, column) coordinates inside the tile."""
        g = cute.local_tile(mRows[b, None, head, None], (self.tile_n, width), (n0 // self.tile_n, 0))
        return (th_mma.partition_C(g),
                th_mma.partition_C(cute.make_identity_tensor((self.tile_n, width))))

    @cute.jit
    def _store_rows(self, acc, th_mma, mOut, b, h, hk, n0, seqlen_k, width, scale):
        head = hk
        if const_expr(self.cfg.dkv_partials):
            head = h
        tg, tc = self._tile_rows(th_mma, mOut, b, head, n0, width)
        if const_expr(self.cfg.interior_dkv):
            if n0 + self.tile_n <= seqlen_k:
                for i in cutlass.range_constexpr(cute.size(acc)):
                    tg[i] = (acc[i] * scale).to(mOut.element_type)
            else:
                for i in cutlass.range_constexpr(cute.size(acc)):
                    if n0 + tc[i][0] < seqlen_k:
                        tg[i] = (acc[i] * scale).to(mOut.element_type)
        else:
            for i in cutlass.range_constexpr(cute.size(acc)):
                if n0 + tc[i][0] < seqlen_k:
                    tg[i] = (acc[i] * scale).to(mOut.element_type)
