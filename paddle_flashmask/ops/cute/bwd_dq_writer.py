"""The SM90 backward's dQ writer warp (producer warpgroup, warp 1) and the converter warps.

The consumers stage each fp32 dQ tile in shared memory; the writer adds it to ``dq_accum`` with
bulk reduce-adds (or a first store), in the deterministic mode after the tile's previous adder in
its chain (per ``(b, h, m_tile)`` semaphores, ``flash_bwd_sm90``'s module doc), and with
``fused_dq`` hands finished query tiles to the converter warps. A mixin of ``FlashMaskBwdSm90``:
the methods read the kernel's ``cfg`` and tile attributes through ``self``.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr
from cutlass.experimental import primitives as prims

from .bwd_layout import (_BAR_CONV_BUF, _BAR_DQ_EMPTY, _BAR_DQ_FULL, _BAR_DQ_WG_STEP, _CONV_QUEUE,
                         _CONV_THREADS, _CONV_VEC, dq_stage_layout)
from .flash_bwd_prepost import ROWS_PER_CTA


class BwdDqWriter:
    """dQ writer and converter warps of the backward kernel (mixin)."""

    @cute.jit
    def _dq_writer(self, grid, sdQ, mdQacc, mSem, mSumMin, mSumMax, b, h, hm, n_blk, n0, num_m,
                   seqlen_q, seqlen_k, diag, bmax, bmin, tidx, p1, p2, p3, group=1):
        """Producer-WG warp 1: for each visited query tile, take the dQ tile the consumers staged
        in fp32 smem and add it to ``dq_accum`` with ``cp.reduce.async.bulk .add.f32``
        (``_bulk_rows``: one per row, or one per tile with ``dq_swizzle``). Deterministic mode orders the adds with the semaphore here,
        off the consumers' critical path. ``fused_dq``: ``p1..p3`` are the adds not yet counted
        down (newest first; returned advanced); each is counted down ``dq_count_lag`` tiles after
        its issue, so its completion wait overlaps that many consumer iterations.
        ``walk_interleave``: each query tile once per head ``h`` .. ``h + group - 1``, each
        head's tile into its own chain."""
        lane = tidx % 32
        work_class = Int32(0)
        if const_expr(self.cfg.class_chains):
            work_class = self._tile_class(grid.mClass, b, h, n_blk)
        hc = self._dq_chain_head(h, n_blk, work_class)
        gdQacc_bh = mdQacc[b, hc, None, None]
        m_lo, m_hi = self._walk(n0, bmax, bmin, seqlen_q, diag, num_m)
        released = Int32(-1)  # lazy release: the query tile whose add is still to be published
        tile_wait = Int32(0)  # walk_interleave: the query tile's wait value, for all its heads
        lo, hi = self._walk_steps(m_lo, m_hi, group)
        for it in cutlass.range(lo, hi, unroll=1):
            m_blk, j = self._step_tile(it, group)
            if not self._skipped(m_blk, n0, bmax, bmin, seqlen_q, diag):
                hc_it, gdq_it = hc, gdQacc_bh  # this step's chain
                if const_expr(self.cfg.walk_interleave):  # this step's head (h is the first)
                    hc_it = self._dq_chain_head(h + j, n_blk, work_class)
                    gdq_it = mdQacc[b, hc_it, None, None]
                wait_for = Int32(0)
                if const_expr(self.cfg.walk_interleave):
                    # the group's heads share the mask: one ballot walk per query tile, at its
                    # first head's step (steps of a tile are consecutive, the first one first)
                    if j == 0:
                        tile_wait = self._sem_wait_value(m_blk, n_blk, b, hm, mSumMin, mSumMax,
                                                         seqlen_q, seqlen_k, diag, lane)
                    wait_for = tile_wait
                elif const_expr(self.cfg.deterministic):
                    wait_for = self._sem_wait_value(m_blk, n_blk, b, hm, mSumMin, mSumMax,
                                                    seqlen_q, seqlen_k, diag, lane, h=h,
                                                    work_class=work_class, mClass=grid.mClass)
                if const_expr(self.cfg.first_store_flags):
                    # mark our previous first store (p1) once complete, before this tile can
                    # wait on another CTA: no writer ever waits while holding an unmarked tile
                    if p1 >= 0:
                        self._mark_stored(grid, p1, lane)
                        p1 = Int32(-1)
                for w in cutlass.range_constexpr(self.dq_blocks):
                    # block w free once its previous bulk op read it (the previous tile's groups
                    # come block by block: at most dq_blocks - 1 - w may stay pending)
                    cute.arch.cp_async_bulk_wait_group(self.dq_blocks - 1 - w, read=True)
                    cute.arch.barrier_arrive(barrier_id=_BAR_DQ_EMPTY + _BAR_DQ_WG_STEP * w,
                                             number_of_threads=self.dq_sync_threads)
                claim = Int32(0)
                item = (b * grid.num_h + hc_it) * num_m + m_blk
                if const_expr(self.cfg.first_store_flags):
                    # while the consumers compute: first writer of this query tile, or wait
                    # until the first one's rows are stored
                    claim = self._claim_tile(grid, item, lane)
                    if claim != 0:
                        if (claim & 2) == 0:
                            self._wait_stored(grid, item, lane)
                if const_expr(self.cfg.deterministic and self.cfg.lazy_release):
                    # publish the previous tile's add only now: its completion wait ran while
                    # the consumers computed this tile, never between them and the free buffer
                    if released >= 0:
                        self._publish_add(mSem, b, hc_it, released, n_blk, seqlen_k, lane)
                if const_expr(self.conv_rows):
                    # the add issued dq_count_lag tiles ago is complete by now (or soon)
                    lag = self.cfg.dq_count_lag
                    oldest = p1 if const_expr(lag == 1) else (p2 if const_expr(lag == 2) else p3)
                    if oldest >= 0:
                        cute.arch.cp_async_bulk_wait_group(lag - 1, read=False)
                        self._count_add(grid, oldest, lane)
                if const_expr(self.cfg.deterministic):
                    # wait for our turn while the consumers are still computing this tile
                    self._sem_wait(mSem, b, hc_it, m_blk, wait_for, lane, sync=self.cfg.det_sync)
                    cute.arch.sync_warp()
                    if const_expr(self.cfg.det_sync != "acquire"):  # flag seen before every add
                        cute.arch.fence_proxy("async.global")
                gdQ = cute.local_tile(gdq_it, (self.tile_m, self.d), (m_blk, 0))
                tile = None
                if const_expr(self.cfg.dq_uniform_rows or self.cfg.dq_per_wg):
                    # its index in dq_accum's tile order, warp-uniform: the bulk ops' addresses
                    # stay in uniform registers
                    tiles_per_head = num_m  # (64-row tiles: the padded rows are whole tiles)
                    if const_expr(self.tile_m != ROWS_PER_CTA):  # rows padded beyond the last
                        tiles_per_head = mdQacc.shape[2] // self.tile_m
                    tile = cute.arch.make_warp_uniform((b * mdQacc.shape[1] + hc_it)
                                                       * tiles_per_head + m_blk)
                for w in cutlass.range_constexpr(self.dq_blocks):
                    # each block as soon as its warpgroup(s) staged it
                    cute.arch.barrier(barrier_id=_BAR_DQ_FULL + _BAR_DQ_WG_STEP * w,
                                      number_of_threads=self.dq_sync_threads)
                    if const_expr(self.cfg.first_store_flags):
                        if claim == 0:
                            self._bulk_rows(gdQ, sdQ, lane, mdQacc, tile, w, store=True)
                        else:
                            self._bulk_rows(gdQ, sdQ, lane, mdQacc, tile, w, store=False)
                    elif const_expr(self.cfg.deterministic and self.cfg.dq_first_store):
                        # the chain's first adder (no earlier one to wait for) stores. Two copies
                        # of the row loop: choosing per bulk op instead made the deterministic
                        # backward 9-20 % slower (H200 call 96)
                        if wait_for == 0:
                            self._bulk_rows(gdQ, sdQ, lane, mdQacc, tile, w, store=True)
                        else:
                            self._bulk_rows(gdQ, sdQ, lane, mdQacc, tile, w, store=False)
                    else:
                        self._bulk_rows(gdQ, sdQ, lane, mdQacc, tile, w, store=False)
                    cute.arch.cp_async_bulk_commit_group()
                if const_expr(self.cfg.first_store_flags):
                    if claim == 0:
                        p1 = item
                if const_expr(self.cfg.deterministic and self.cfg.lazy_release):
                    released = m_blk
                elif const_expr(self.cfg.deterministic):
                    self._publish_add(mSem, b, hc_it, m_blk, n_blk, seqlen_k, lane)
                if const_expr(self.conv_rows):
                    lag = self.cfg.dq_count_lag
                    if const_expr(lag >= 3):
                        p3 = p2
                    if const_expr(lag >= 2):
                        p2 = p1
                    p1 = item
        if const_expr(self.cfg.deterministic and self.cfg.lazy_release):
            if released >= 0:
                self._publish_add(mSem, b, hc, released, n_blk, seqlen_k, lane)
        if const_expr(self.cfg.first_store_flags):
            # the walk's last first store: marked now, not at the next tile's first visit (its
            # completion wait overlaps the next tile's K/V load; nobody waits a tile change)
            if p1 >= 0:
                self._mark_stored(grid, p1, lane)
                p1 = Int32(-1)
        cute.arch.cp_async_bulk_wait_group(0, read=True)  # smem outlives the last reads
        return p1, p2, p3

    def _sdq_tensor(self, ptr):
        """The staged dQ tile ``[tile_m, d]`` fp32 in smem (``dq_stage_layout``)."""
        return cute.make_tensor(ptr, dq_stage_layout(
            self.tile_m, self.d, self.cfg.dq_swizzle, self.cfg.dq_per_wg,
            pad=self.cfg.dq_row_elems - self.d, frag=self.cfg.dq_frag))

    @cute.jit
    def _bulk_rows(self, gdQ, sdQ, lane, mdQacc, tile, block: cutlass.Constexpr[int],
                   store: cutlass.Constexpr[bool]):
        """Hand-off unit ``block`` of the staged dQ tile (``dq_blocks``) to global: bulk
        reduce-adds, or (``store``, the tile's first writer with ``dq_first_store``) plain bulk
        copies; one per row, 2 rows per lane, or (``dq_swizzle``) one for the whole contiguous
        tile from lane 0, or (``dq_per_wg``) one for warpgroup ``block``'s block (they lie one
        after the other, in smem and in dq_accum alike), or (``dq_uniform_rows``) one per row
        from lane 0. The last two are addressed from ``tile`` (warp-uniform index of the tile in
        ``mdQacc``, whose rows are padded to whole tiles) by one elected lane."""
        if const_expr(self.cfg.dq_per_wg):
            elems = self.tile_m * self.d // 2
            with cute.arch.elect_one():
                base = mdQacc.iterator + cutlass.Int64(tile) * (self.tile_m * self.d)
                self._bulk_op(base + block * elems, sdQ.iterator + block * elems, elems * 4,
                              store)
        elif const_expr(self.cfg.dq_uniform_rows):
            with cute.arch.elect_one():
                tile_base = mdQacc.iterator + cutlass.Int64(tile) * (self.tile_m * self.d)
                # rolled, 4 ops per trip (24 instructions): fully unrolled, ptxas hoists all
                # 64 address pairs and the GQA head walk spills; at 16 per trip the consumers'
                # main loop gains an R2UR
                for r in cutlass.range(self.tile_m, unroll=4):
                    self._bulk_op(tile_base + cutlass.Int64(r) * self.d,
                                  sdQ.iterator + cute.crd2idx((r, 0), sdQ.layout), self.d * 4,
                                  store)
        elif const_expr(self.cfg.dq_swizzle):
            if lane == 0:
                self._bulk_op(gdQ.iterator, sdQ.iterator, self.tile_m * self.d * 4, store)
        else:
            row_op = lambda row: self._bulk_op(  # noqa: E731
                gdQ.iterator + cute.crd2idx((row, 0), gdQ.layout),
                sdQ.iterator + cute.crd2idx((row, 0), sdQ.layout), self.d * 4, store)
            for r in cutlass.range_constexpr(-(-self.tile_m // 32)):
                row = lane + 32 * r
                if const_expr(32 * (r + 1) <= self.tile_m):
                    row_op(row)
                elif row < self.tile_m:  # 80 rows: the third trip's first 16 lanes
                    row_op(row)

    @staticmethod
    def _bulk_op(dst, src, nbytes: int, store: bool):
        """One bulk smem -> global transfer of ``nbytes`` fp32: a plain copy (``store``) or a
        reduce-add."""
        if const_expr(store):
            prims.cp_async_bulk_global_shared_cta(dst, src, nbytes)
        else:
            prims.cp_reduce_async_bulk_global_shared_cta(
                dst, src, nbytes, op=prims.CpReduceOp.ADD, type=prims.CpReduceType.F32)

    @cute.jit
    def _claim_tile(self, grid, item, lane):
        """``dq_first_store``: set bit 0 of query tile ``item``'s flag; returns the old flag to
        every lane (0: this writer is the tile's first and stores its rows)."""
        old = Int32(0)
        if lane == 0:
            old = cute.arch.atomic_or(grid.mPending.iterator + item, Int32(1), sem="relaxed",
                                      scope="gpu")
        return cute.arch.shuffle_sync(old, 0)

    @cute.jit
    def _wait_stored(self, grid, item, lane):
        """``dq_first_store``: spin until the first writer marked ``item`` stored (bit 1); then
        every lane orders its bulk adds after the flag (as ``det_sync="relaxed"``)."""
        if lane == 0:
            ptr = grid.mPending.iterator + item
            seen = cute.arch.load(ptr, Int32, sem="relaxed", scope="gpu")
            while (seen & 2) == 0:
                seen = cute.arch.load(ptr, Int32, sem="relaxed", scope="gpu")
        cute.arch.sync_warp()
        cute.arch.fence_proxy("async.global")

    @cute.jit
    def _mark_stored(self, grid, item, lane):
        """``dq_first_store``: once this warp's bulk copies are complete (at L2, where the others'
        reduce-adds land), set bit 1 of ``item``'s flag."""
        cute.arch.cp_async_bulk_wait_group(0, read=False)
        cute.arch.fence_proxy("async.global")
        cute.arch.sync_warp()
        if lane == 0:
            cute.arch.atomic_or(grid.mPending.iterator + item, Int32(2), sem="relaxed",
                                scope="gpu")

    @cute.jit
    def _publish_add(self, mSem, b, hc, m_blk, n_blk, seqlen_k, lane):
        """Deterministic mode: wait until this warp's bulk adds are complete in global memory,
        then release query tile ``m_blk`` to the next key tile of the chain."""
        cute.arch.cp_async_bulk_wait_group(0, read=False)
        if const_expr(self.cfg.det_sync == "acquire"):
            cute.arch.fence_acq_rel_gpu()
        else:
            # the adds are complete (at L2, where the next adder's bulk reduce lands); order them
            # (async proxy) before the flag store. "relaxed" trusts that completion alone; fence +
            # release store compile to two MEMBAR.GPU
            cute.arch.fence_proxy("async.global")
        cute.arch.sync_warp()
        self._sem_release(mSem, b, hc, m_blk, n_blk, seqlen_k, lane,
                          sem="relaxed" if const_expr(self.cfg.det_sync == "relaxed")
                          else "release")

    @cute.jit
    def _count_add(self, grid, item, lane):
        """``fused_dq``: count the pending adds of query tile ``item`` (linear (b, h, m) index of
        the ``[B, H, Sq_pad / tile_m]`` counts) down by one, once the caller waited for this
        add's completion in global memory; the add that reaches 0 was the last, and the tile
        goes to the converter warps."""
        # Relaxed: the caller's wait_group (without .read) returned, so these adds are complete
        # at L2, where the converter's bulk copy reads them. An acq_rel atomic is a MEMBAR.GPU,
        # which also waits for this warp's newest adds still in flight (H200: full attention
        # 44.5 -> 48.4 ms at 32K).
        cute.arch.fence_proxy("async.global")
        cute.arch.sync_warp()  # every lane waited for its own rows' adds
        left = Int32(0)
        if lane == 0:
            left = cute.arch.atomic_add(grid.mPending.iterator + item, Int32(-1), sem="relaxed",
                                        scope="gpu")
        left = cute.arch.shuffle_sync(left, 0)
        if left == 1:
            self._hand_over(grid, item, lane)

    @cute.jit
    def _hand_over(self, grid, item, lane):
        """dQ writer -> converter warps: one finished query tile (linear (b, h, m) index), or -1
        for the end, through a queue of ``_CONV_QUEUE`` slots (full / empty mbarriers); the
        writer waits only when that many tiles wait for conversion."""
        # locals: a subscript store through ``grid`` inside the ``if`` below would make the DSL
        # carry the namespace out of it
        conv_slot, queue = grid.conv_slot, grid.queue
        count = conv_slot[_CONV_QUEUE]  # items handed over so far (only this warp writes it)
        slot = count % _CONV_QUEUE
        cute.arch.mbarrier_wait(queue + (slot + _CONV_QUEUE), ((count // _CONV_QUEUE) & 1) ^ 1)
        if lane == 0:
            conv_slot[slot] = item
            conv_slot[_CONV_QUEUE] = count + 1
            cute.arch.mbarrier_arrive(queue + slot)
        cute.arch.sync_warp()

    @cute.jit
    def _convert_tiles(self, sConv, mbar, conv_slot, queue, mdQacc, mdQout, num_m, softmax_scale,
                       ctid):
        """``fused_dq`` converter warps (producer group warps 2 and 3, ``ctid`` 0..63): for each
        finished query tile the dQ writer queues, bulk-copy its fp32 accumulator rows into smem
        ``conv_rows`` at a time (two buffers: the next copy is in flight while one is converted)
        and store them scaled, in the input dtype, into dq. The tile is final: every add to it
        completed before its count reached 0."""
        rows = self.conv_rows
        parts = self.tile_m // rows
        part_bytes = rows * self.d * 4
        chunks_per_row = self.d // _CONV_VEC
        num_h = mdQout.shape[2]
        seqlen_q = mdQout.shape[1]
        phase0 = Int32(0)  # the two buffers' bulk-copy barrier phases
        phase1 = Int32(0)
        count = Int32(0)  # queue items taken
        item = Int32(0)
        while item >= 0:
            slot = count % _CONV_QUEUE
            cute.arch.mbarrier_wait(queue + slot, (count // _CONV_QUEUE) & 1)
            item = conv_slot[slot]
            cute.arch.barrier(barrier_id=_BAR_CONV_BUF, number_of_threads=_CONV_THREADS)
            if ctid == 0:  # every converter thread read the slot: free it
                cute.arch.mbarrier_arrive(queue + (slot + _CONV_QUEUE))
            count += 1
            if item >= 0:
                m_blk = item % num_m
                rest = item // num_m
                h = rest % num_h
                b = rest // num_h
                gdQ = mdQacc[b, h, None, None]
                row0 = m_blk * self.tile_m
                if ctid == 0:
                    cute.arch.fence_proxy("async.global")  # the count-down before the copies
                    self._conv_load(sConv, mbar, gdQ, row0, 0, part_bytes)
                for part in cutlass.range_constexpr(parts):
                    buf = part % 2
                    if const_expr(part + 1 < parts):
                        if ctid == 0:  # buffer (part + 1) % 2 was read out before the last barrier
                            self._conv_load(sConv, mbar, gdQ, row0 + (part + 1) * rows,
                                            (part + 1) % 2, part_bytes)
                    if const_expr(buf == 0):
                        cute.arch.mbarrier_wait(mbar, phase0)
                        phase0 = phase0 ^ 1
                    else:
                        cute.arch.mbarrier_wait(mbar + 1, phase1)
                        phase1 = phase1 ^ 1
                    r0 = row0 + part * rows
                    for k in cutlass.range(rows * chunks_per_row // _CONV_THREADS, unroll=1):
                        chunk = ctid + k * _CONV_THREADS
                        row = r0 + chunk // chunks_per_row
                        if row < seqlen_q:
                            mdQout[b, row, h, chunk % chunks_per_row, None].store(
                                (sConv[chunk, None, buf].load() * softmax_scale).to(
                                    mdQout.element_type))
                    # the buffer is read out before a later bulk copy overwrites it
                    cute.arch.barrier(barrier_id=_BAR_CONV_BUF, number_of_threads=_CONV_THREADS)

    @cute.jit
    def _conv_load(self, sConv, mbar, gdQ, row, buf, part_bytes):
        """One bulk copy of ``conv_rows`` fp32 accumulator rows into conversion buffer ``buf``."""
        cute.arch.fence_proxy("async.shared", space="cta")  # its generic reads before the copy
        cute.arch.mbarrier_arrive_and_expect_tx(mbar + buf, part_bytes)
        prims.cp_async_bulk_shared_cluster_global(
            sConv[None, None, buf].iterator, gdQ.iterator + cute.crd2idx((row, 0), gdQ.layout),
            mbar + buf, part_bytes)

    @cute.jit
    def _sem_wait_value(self, m_blk, n_blk, b, hm, mSumMin, mSumMax, seqlen_q, seqlen_k, diag,
                        lane, h=None, work_class=None, mClass=None):
        """Semaphore value that allows key tile ``n_blk`` to add its dQ for query tile ``m_blk``.

        Adds go in *decreasing* key-tile order (under causal-like masks higher key tiles start
        lower in the walk and reach a query tile first). The semaphore holds ``num_n - n`` of
        the last adder (0: none yet), so we wait for ``num_n - nxt`` where nxt is the lowest
        n' > n_blk that visits m_blk (same ``tile_fully_masked`` predicate as every CTA), or 0.
        One warp tests 32 candidates per ballot. With two chains only n' of the same chain count:
        the same key-tile parity, or (``class_chains``) the same recorded ``work_class`` of
        query head ``h``.
        """
        num_n = cute.ceil_div(seqlen_k, self.tile_n)
        value = Int32(0)
        base = n_blk + 1
        while base < num_n:
            cand = base + lane
            visits = cand < num_n
            if const_expr(self.cfg.dq_chains == 2 and not self.cfg.class_chains):
                visits = visits & ((cand - n_blk) % 2 == 0)  # the next visitor of the same chain
            if cand < num_n:
                bmax, bmin = self._tile_bands(mSumMin, mSumMax, b, hm, cand, seqlen_q)
                skip = self._skipped(m_blk, cand * self.tile_n, bmax, bmin, seqlen_q, diag)
                visits = visits & (skip == False)  # noqa: E712  (DSL boolean)
                if const_expr(self.cfg.class_chains):
                    if not skip:  # a higher key tile of this head: claimed, so its class comes
                        visits = visits & (self._tile_class(mClass, b, h, cand) == work_class)
            ballot = cute.arch.vote_ballot_sync(visits)
            if ballot != 0:
                lowest = cute.arch.popc((ballot & (Int32(0) - ballot)) - Int32(1))
                value = num_n - (base + lowest)
                base = num_n
            else:
                base = base + 32
        return value

    def _dq_chain_head(self, h, n_blk, work_class=None):
        """Row of ``dq_accum`` / the semaphores holding key tile ``n_blk``'s chain of head ``h``:
        by key-tile parity, or (``class_chains``) by the tile's ``work_class``."""
        if const_expr(self.cfg.dq_chains == 1):
            return h
        if const_expr(self.cfg.class_chains):
            return h * self.cfg.dq_chains + work_class
        return h * self.cfg.dq_chains + n_blk % self.cfg.dq_chains

    @cute.jit
    def _record_class(self, mClass, b, h, n_blk, work_class, lane):
        """class_chains: publish a claimed tile's work class (stored + 1; 0 means not yet)."""
        if lane == 0:
            ptr = mClass.iterator + cute.crd2idx((b, h, n_blk), mClass.layout)
            cute.arch.store(ptr, work_class + 1, sem="relaxed", scope="gpu")

    @cute.jit
    def _tile_class(self, mClass, b, h, n_blk):
        """class_chains: the work class of a claimed tile, waiting for its claimer's record (it
        comes right after the claim, before that producer can block)."""
        ptr = mClass.iterator + cute.crd2idx((b, h, n_blk), mClass.layout)
        seen = cute.arch.load(ptr, Int32, sem="relaxed", scope="gpu")
        while seen == 0:
            seen = cute.arch.load(ptr, Int32, sem="relaxed", scope="gpu")
        return seen - 1

    @cute.jit
    def _sem_wait(self, mSem, b, h, m_blk, target, ctid, sync: str = "acquire"):
        """Spin until the semaphore of (b, h, m_blk) holds ``target``. ``sync`` (the dQ writer's
        ``det_sync``; its lanes then fence the async proxy before their bulk adds): "acquire"
        polls with acquire loads, each a load plus ``CCTL.IVALL`` that invalidates the SM's
        whole L1 (the consumers' LSE / delta / column loads included); "fence" polls relaxed
        and fences once (acquire) when the value came; "relaxed" only polls relaxed."""
        if ctid == 0:
            ptr = mSem.iterator + cute.crd2idx((b, h, m_blk), mSem.layout)
            sem = "acquire" if const_expr(sync == "acquire") else "relaxed"
            seen = cute.arch.load(ptr, Int32, sem=sem, scope="gpu")
            while seen != target:
                seen = cute.arch.load(ptr, Int32, sem=sem, scope="gpu")
            if const_expr(sync == "fence"):
                cute.arch.fence_acq_rel_gpu()

    @cute.jit
    def _sem_release(self, mSem, b, h, m_blk, n_blk, seqlen_k, ctid, sem: str = "release"):
        if ctid == 0:
            ptr = mSem.iterator + cute.crd2idx((b, h, m_blk), mSem.layout)
            num_n = cute.ceil_div(seqlen_k, self.tile_n)
            cute.arch.store(ptr, Int32(num_n - n_blk), sem=sem, scope="gpu")
