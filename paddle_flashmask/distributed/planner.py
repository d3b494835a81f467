"""Mask-aware context-parallel planner (numpy only, no framework).

The sequence (query rows) is cut into chunks of ``chunk_size`` rows. Each chunk is weighted by its
exact work -- the number of visible (query, key) pairs of its rows, from
:func:`paddle_flashmask.semantics.count_visible_pairs` summed over batch and mask heads -- and the
chunks are assigned to ranks: longest-processing-time first (LPT), then a local-improvement pass of
pairwise swaps (and moves, when chunk counts may differ) that lowers the most loaded rank.

Each rank owns the tokens of its chunks: their query rows *and* their keys/values. Its local rows are
the rows of its chunks in ascending global order. K/V are all-gathered, so every rank sees every key;
the key axis of the gathered K/V has its own order (see :class:`ContextParallelPlan`), and the local
``startend_row_indices`` are rewritten to it with :func:`rewrite_indices`.

Why the rewrite always fits in C <= 4 (the proof the tests check against ``to_dense``):
a global masked band of a key column is a half-open interval of global rows ``[s, e)``. The local
rows are a *sorted* subsequence of the global rows, so the local rows whose global row lies in
``[s, e)`` are exactly the local positions ``[L(s), L(e))`` with ``L(x)`` = number of local rows
with global row ``< x`` (a ``searchsorted``). An interval stays one interval. The causal diagonal
masks rows ``i < j - (Sk - Sq)`` of column j, i.e. the prefix ``[0, j - (Sk - Sq))`` -- one more
band starting at row 0. Local rows are no longer in diagonal order, so causal forms become
bidirectional forms whose upper band carries the diagonal:

    global (causal, C)      local (causal=False, C)
    (True, 1)  LTS          (False, 2)  LTS' = L(LTS),  UTE' = L(diag)
    (True, 2)  LTS, LTE     (False, 4)  L(LTS), L(LTE), UTS' = 0, UTE' = L(diag)
    (False, 2) LTS, UTE     (False, 2)  L(LTS), L(UTE)
    (False, 4) 4 columns    (False, 4)  each column through L

with ``diag = clip(j - (Sk - Sq), 0, Sq)``. Every form has at most two bands after the rewrite, so
no form is left out. Key columns that a rank must not see (padding of a short chunk, or its own keys
inside a gathered buffer because it already attended to them locally) get a band covering every row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

import numpy as np

from .. import semantics as sem

PAD = -1  # key position of a padding column (no global key behind it)


# --------------------------------------------------------------------------------------------------
# Plan
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class ContextParallelPlan:
    """Which chunks each rank owns, and the K/V layouts that follow from it.

    Chunk ``c`` covers global rows ``[c * chunk_size, min((c + 1) * chunk_size, seqlen))`` (chunks
    past the end are empty; they exist so that every rank can own the same number of chunks).

    K/V layout: rank r's *shard* has ``num_slots * chunk_size`` tokens; slot s holds its s-th chunk
    (ascending), zero-padded to ``chunk_size``; missing slots are all padding. The all-gather runs
    per *comm group* (a range of slots): the gathered buffer of group ``[s0, s1)`` is rank-major,
    ``[world_size, (s1 - s0) * chunk_size]``, so every collective moves equal-sized tensors.
    """
    seqlen: int
    world_size: int
    chunk_size: int
    chunk_work: np.ndarray                     # int64 [num_chunks]
    rank_chunks: tuple[tuple[int, ...], ...]   # per rank, ascending chunk ids
    comm_groups: tuple[tuple[int, int], ...]   # slot ranges [s0, s1) all-gathered together
    work_model: str = "pairs"
    contiguous_rank_work: Optional[np.ndarray] = field(default=None, compare=False)

    @property
    def num_chunks(self) -> int:
        return int(self.chunk_work.shape[0])

    @property
    def num_slots(self) -> int:
        return max(len(c) for c in self.rank_chunks)

    @property
    def shard_len(self) -> int:
        """Tokens of one rank's (padded) K/V shard."""
        return self.num_slots * self.chunk_size

    def chunk_rows(self, chunk: int) -> tuple[int, int]:
        start = min(chunk * self.chunk_size, self.seqlen)
        return start, min(start + self.chunk_size, self.seqlen)

    def local_rows(self, rank: int) -> np.ndarray:
        """int64 global rows owned by ``rank``, ascending: the order of its local Q (and K/V) rows."""
        parts = [np.arange(*self.chunk_rows(c), dtype=np.int64) for c in self.rank_chunks[rank]]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def shard_positions(self, rank: int) -> np.ndarray:
        """int64 ``[shard_len]``: global token of each position of rank's K/V shard, ``PAD`` = -1."""
        pos = np.full(self.shard_len, PAD, dtype=np.int64)
        for slot, chunk in enumerate(self.rank_chunks[rank]):
            start, end = self.chunk_rows(chunk)
            pos[slot * self.chunk_size: slot * self.chunk_size + end - start] = np.arange(start, end)
        return pos

    def shard_local_index(self, rank: int) -> np.ndarray:
        """int64 ``[shard_len]``: local row of each shard position (``PAD`` for padding).

        Used to scatter the local K/V rows into the padded shard and to read dK/dV back.
        """
        pos = self.shard_positions(rank)
        out = np.full(self.shard_len, PAD, dtype=np.int64)
        real = pos >= 0
        out[real] = np.searchsorted(self.local_rows(rank), pos[real])
        return out

    def group_positions(self, group: int) -> np.ndarray:
        """int64 ``[world_size * group_len]``: global token of each column of a gathered group."""
        s0, s1 = self.comm_groups[group]
        cs = self.chunk_size
        return np.concatenate([self.shard_positions(r)[s0 * cs: s1 * cs]
                               for r in range(self.world_size)])

    def rank_work(self) -> np.ndarray:
        return np.array([int(self.chunk_work[list(c)].sum()) if c else 0 for c in self.rank_chunks],
                        dtype=np.int64)


def explicit_indices(startend_row_indices: Any, causal: bool, seqlen: int) -> tuple[np.ndarray, bool]:
    """Validated numpy int32 indices; ``None`` becomes the plain causal / full mask in explicit form."""
    if startend_row_indices is None:
        if causal:  # LTS = S: no band, only the diagonal
            return np.full((1, 1, seqlen, 1), seqlen, dtype=np.int32), True
        out = np.zeros((1, 1, seqlen, 2), dtype=np.int32)
        out[..., 0] = seqlen  # LTS = S, UTE = 0: nothing masked
        return out, False
    idx = sem._to_numpy(startend_row_indices)
    sem.validate(idx, causal, seqlen, seqlen)
    return idx, bool(causal)


def window_indices(seqlen: int, window_size: Any, causal: bool) -> np.ndarray:
    """Indices of the frontends' ``window_size`` shorthand (same builder, same convention)."""
    from ..mask_builders import window_mask
    from ..ops.arguments import window_bounds
    left, right = window_bounds(window_size)
    return np.asarray(window_mask(seqlen, seqlen, left, right, causal).startend_row_indices, dtype=np.int32)


def chunk_work(startend_row_indices: Any, causal: bool, seqlen: int, chunk_size: int,
               num_chunks: int, work_model: str = "pairs", tile: int = 128) -> np.ndarray:
    """int64 ``[num_chunks]``: work of each chunk of query rows, summed over batch and mask heads.

    ``work_model="pairs"``: exact visible pairs (:func:`semantics.count_visible_pairs`).
    ``work_model="tiles"``: pairs inside the ``tile x tile`` tiles the kernels compute (not SKIP, by
    :func:`semantics.classify_tiles`); ``chunk_size`` must be a multiple of ``tile``.
    """
    idx, causal = explicit_indices(startend_row_indices, causal, seqlen)
    bounds = [(min(c * chunk_size, seqlen), min((c + 1) * chunk_size, seqlen)) for c in range(num_chunks)]
    if work_model == "pairs":
        return np.array([int(sem.count_visible_pairs(idx, causal, seqlen, r0, r1).sum()) if r1 > r0 else 0
                         for r0, r1 in bounds], dtype=np.int64)
    if work_model != "tiles":
        raise ValueError(f"work_model: expected 'pairs' or 'tiles', found {work_model!r}")
    if chunk_size % tile != 0:
        raise ValueError(f"chunk_size: expected a multiple of tile={tile} for work_model='tiles', "
                         f"found {chunk_size}")
    classes = sem.classify_tiles(sem.tile_summary(idx, tile), causal, seqlen, tile)
    tm, tn = classes.shape[2], classes.shape[3]
    rows = np.minimum(np.arange(1, tm + 1) * tile, seqlen) - np.arange(tm) * tile
    cols = np.minimum(np.arange(1, tn + 1) * tile, seqlen) - np.arange(tn) * tile
    per_row_tile = ((classes != sem.SKIP) * cols[None, None, None, :]).sum(axis=(0, 1, 3)) * rows
    per_tile = chunk_size // tile
    out = np.zeros(num_chunks, dtype=np.int64)
    for c in range(num_chunks):
        out[c] = int(per_row_tile[c * per_tile: (c + 1) * per_tile].sum())
    return out


def _default_chunk_size(seqlen: int, world_size: int) -> int:
    """About 8 chunks per rank; a multiple of 128 (the kernels' tile) when the sequence allows."""
    target = -(-seqlen // (8 * world_size))
    if seqlen >= 128 * 8 * world_size:
        return -(-target // 128) * 128
    return max(target, 1)


def plan_context_parallel(startend_row_indices: Any, causal: bool, world_size: int,
                          seqlen: Optional[int] = None, chunk_size: Optional[int] = None,
                          equal_chunks: bool = True, comm_groups: int = 2,
                          work_model: str = "pairs", improve: bool = True) -> ContextParallelPlan:
    """Balance the query rows of one sequence over ``world_size`` ranks by the mask's exact work.

    Args:
      startend_row_indices: global ``[B, Hm, S, C]`` indices (numpy or tensor), or ``None`` for plain
        causal / full attention (``seqlen`` then required).
      causal: the form of the indices, as for ``flashmask_attention``.
      world_size: number of context-parallel ranks.
      chunk_size: rows per chunk; default about 8 chunks per rank, a multiple of 128 when possible.
        Smaller chunks balance better; each chunk must stay big enough for the kernel's tiles.
      equal_chunks: every rank owns the same number of chunks (like MARCO), so the K/V shards have no
        padding besides a short last chunk. ``False`` lets LPT give a rank more, smaller chunks (better
        balance when a few chunks dominate); shards are then padded to the largest count.
      comm_groups: number of all-gathers K/V is split into (overlap granularity); clipped to the slots.
      work_model: ``"pairs"`` (exact visible pairs, default) or ``"tiles"`` (computed-tile pairs).
      improve: run the local-improvement pass after LPT.
    """
    if startend_row_indices is None and seqlen is None:
        raise ValueError("seqlen: required when startend_row_indices is None")
    if startend_row_indices is not None:
        sk = int(startend_row_indices.shape[2])
        if seqlen is not None and int(seqlen) != sk:
            raise NotImplementedError(
                f"seqlen: context parallelism shards one self-attention sequence, so Sq must equal "
                f"Sk={sk}; found seqlen={seqlen}")
        seqlen = sk
    seqlen = int(seqlen)
    if world_size < 1:
        raise ValueError(f"world_size: expected >= 1, found {world_size}")
    if chunk_size is None:
        chunk_size = _default_chunk_size(seqlen, world_size)
    if chunk_size < 1:
        raise ValueError(f"chunk_size: expected >= 1, found {chunk_size}")
    num_chunks = -(-seqlen // chunk_size)
    if equal_chunks:  # pad with empty chunks so that world_size divides the count
        num_chunks = -(-num_chunks // world_size) * world_size
    if num_chunks < world_size:
        raise ValueError(f"chunk_size: {chunk_size} gives {num_chunks} chunks for seqlen={seqlen}, "
                         f"fewer than world_size={world_size}; use a smaller chunk_size")
    work = chunk_work(startend_row_indices, causal, seqlen, chunk_size, num_chunks, work_model)
    capacity = num_chunks // world_size if equal_chunks else None
    buckets = assign_lpt(work, world_size, capacity)
    if improve:
        buckets = improve_assignment(work, buckets, allow_moves=not equal_chunks)
    rank_chunks = tuple(tuple(sorted(b)) for b in buckets)
    slots = max(len(c) for c in rank_chunks)
    groups = _split_slots(slots, comm_groups)
    per_rank = num_chunks // world_size
    contiguous = None
    if num_chunks % world_size == 0:  # the naive split, for the report
        contiguous = work.reshape(world_size, per_rank).sum(axis=1)
    return ContextParallelPlan(seqlen, world_size, int(chunk_size), work, rank_chunks, groups,
                               work_model, contiguous)


def _split_slots(num_slots: int, comm_groups: int) -> tuple[tuple[int, int], ...]:
    g = max(1, min(int(comm_groups), num_slots))
    edges = np.linspace(0, num_slots, g + 1).round().astype(int)
    return tuple((int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a)


# --------------------------------------------------------------------------------------------------
# Assignment
# --------------------------------------------------------------------------------------------------

def assign_lpt(work: np.ndarray, world_size: int, capacity: Optional[int] = None) -> list[list[int]]:
    """Longest processing time first: heaviest chunk to the least loaded rank that has room.

    Ties go to the lower chunk id / lower rank, so the plan is deterministic (every rank computes
    the same plan independently, no communication needed).
    """
    order = sorted(range(len(work)), key=lambda c: (-int(work[c]), c))
    loads = [0] * world_size
    buckets: list[list[int]] = [[] for _ in range(world_size)]
    for c in order:
        open_ranks = [r for r in range(world_size) if capacity is None or len(buckets[r]) < capacity]
        r = min(open_ranks, key=lambda r: (loads[r], len(buckets[r]), r))
        buckets[r].append(c)
        loads[r] += int(work[c])
    return buckets


def improve_assignment(work: np.ndarray, buckets: list[list[int]], allow_moves: bool = False,
                       max_rounds: int = 1000) -> list[list[int]]:
    """Local search: swap (or move) chunks between the most loaded rank and another one.

    Each round takes the single exchange that lowers ``max(load_a, load_b)`` the most, where ``a``
    is the most loaded rank; stops when no exchange lowers it. Swaps keep chunk counts, so the
    equal-count constraint holds.
    """
    w = np.asarray(work, dtype=np.int64)
    buckets = [list(b) for b in buckets]
    for _ in range(max_rounds):
        loads = np.array([int(w[b].sum()) if b else 0 for b in buckets])
        a = int(np.argmax(loads))
        best = (loads[a], None)
        for b in range(len(buckets)):
            if b == a:
                continue
            wa = w[buckets[a]]
            wb = w[buckets[b]] if buckets[b] else np.zeros(0, dtype=np.int64)
            if wa.size and wb.size:  # swap x in a with y in b
                delta = wa[:, None] - wb[None, :]  # load moved from a to b
                peak = np.maximum(loads[a] - delta, loads[b] + delta)
                i, j = np.unravel_index(int(np.argmin(peak)), peak.shape)
                if peak[i, j] < best[0]:
                    best = (peak[i, j], ("swap", b, int(i), int(j)))
            if allow_moves and wa.size > 1:
                peak = np.maximum(loads[a] - wa, loads[b] + wa)
                i = int(np.argmin(peak))
                if peak[i] < best[0]:
                    best = (peak[i], ("move", b, i, None))
        if best[1] is None:
            break
        kind, b, i, j = best[1]
        if kind == "swap":
            buckets[a][i], buckets[b][j] = buckets[b][j], buckets[a][i]
        else:
            buckets[b].append(buckets[a].pop(i))
    return buckets


def balance_report(plan: ContextParallelPlan) -> dict:
    """Per-rank work and imbalance ``max / mean - 1`` (0 = perfect), also for the naive split."""
    work = plan.rank_work()
    mean = float(work.mean())
    imbalance = float(work.max() / mean - 1.0) if mean > 0 else 0.0
    report = {
        "world_size": plan.world_size,
        "seqlen": plan.seqlen,
        "chunk_size": plan.chunk_size,
        "num_chunks": plan.num_chunks,
        "work_model": plan.work_model,
        "rank_work": [int(x) for x in work],
        "rank_num_chunks": [len(c) for c in plan.rank_chunks],
        "rank_chunks": [list(c) for c in plan.rank_chunks],
        "total_work": int(work.sum()),
        "max_work": int(work.max()),
        "mean_work": mean,
        "imbalance": imbalance,
    }
    if plan.contiguous_rank_work is not None:
        cw = plan.contiguous_rank_work
        report["contiguous_imbalance"] = float(cw.max() / cw.mean() - 1.0) if cw.mean() > 0 else 0.0
    return report


# --------------------------------------------------------------------------------------------------
# Local masks
# --------------------------------------------------------------------------------------------------

def local_form(causal: bool, num_columns: int) -> int:
    """C of the rewritten (bidirectional) local indices for a global (causal, C) form."""
    sem.column_names(causal, num_columns)
    return 2 if (causal and num_columns == 1) or (not causal and num_columns == 2) else 4


def rewrite_indices(startend_row_indices: Any, causal: bool, local_rows: np.ndarray,
                    key_positions: np.ndarray, seqlen_q: Optional[int] = None) -> np.ndarray:
    """Local bidirectional indices ``[B, Hm, len(key_positions), C']`` (see module docstring).

    ``local_rows``: ascending global query rows of the local rows. ``key_positions``: the global key
    behind each local key column, ``PAD`` (-1) for a column every local row must ignore. The result,
    used with ``causal=False`` and ``seqlen_q=len(local_rows)``, gives for every (local row, column)
    the global mask element (global row, global key) -- the tests check this with ``to_dense``.
    """
    idx = sem._to_numpy(startend_row_indices).astype(np.int64)
    b, hm, sk, c = idx.shape
    sq = sk if seqlen_q is None else int(seqlen_q)
    rows = np.asarray(local_rows, dtype=np.int64)
    if rows.size > 1 and np.any(np.diff(rows) <= 0):
        raise ValueError("local_rows: expected strictly ascending global rows")
    keys = np.asarray(key_positions, dtype=np.int64)
    real = keys >= 0
    if np.any(keys >= sk):
        raise ValueError(f"key_positions: expected values in [-1, {sk}), found max {int(keys.max())}")
    n_local = rows.size

    def to_local(x: np.ndarray) -> np.ndarray:  # L(x): local rows with global row < x
        return np.searchsorted(rows, x, side="left")

    cols = idx[:, :, np.where(real, keys, 0), :]  # [B, Hm, K, C] global columns
    bands = sem.band_bounds([cols[..., k] for k in range(c)], causal)
    diag = sem.causal_first_row(np.where(real, keys, 0), sq, sk)  # causal prefix [0, diag)
    lts = to_local(bands.lt_start)
    if causal and c == 1:
        out = [lts, np.broadcast_to(to_local(diag), lts.shape)]
    elif causal:
        zero = np.zeros_like(lts)
        out = [lts, to_local(bands.lt_end), zero, np.broadcast_to(to_local(diag), lts.shape)]
    elif c == 2:
        out = [lts, to_local(bands.ut_end)]
    else:
        out = [lts, to_local(bands.lt_end), to_local(bands.ut_start), to_local(bands.ut_end)]
    local = np.stack(out, axis=-1)
    # Columns without a key: the lower band covers every row.
    pad_value = [0, 0] if local.shape[-1] == 2 else [0, n_local, 0, 0]
    local[:, :, ~real, :] = np.asarray(pad_value, dtype=np.int64)
    return np.ascontiguousarray(local.astype(np.int32))


class RankMasks(NamedTuple):
    """Everything one rank needs to run its attention, from :func:`local_masks`.

    ``local``: indices for local Q x local K (columns = ``rows``: a rank first attends to its own
    tokens, which need no communication).
    ``remote[g]``: indices for local Q x gathered group g (columns = ``plan.group_positions(g)``,
    own columns masked because the local phase already covered them).
    ``local_work`` / ``remote_work[g]``: visible pairs of each phase (0 = the phase can be skipped).
    """
    rows: np.ndarray
    local: np.ndarray
    remote: tuple[np.ndarray, ...]
    local_work: int
    remote_work: tuple[int, ...]
    num_columns: int


def local_masks(startend_row_indices: Any, causal: bool, plan: ContextParallelPlan,
                rank: int) -> RankMasks:
    """Rewrite the global indices for ``rank``: one local phase plus one per comm group."""
    idx, causal = explicit_indices(startend_row_indices, causal, plan.seqlen)
    if not 0 <= rank < plan.world_size:
        raise ValueError(f"rank: expected in [0, {plan.world_size}), found {rank}")
    rows = plan.local_rows(rank)
    local = rewrite_indices(idx, causal, rows, rows, plan.seqlen)
    own_set = np.zeros(plan.seqlen, dtype=bool)
    own_set[rows] = True
    remote, remote_work = [], []
    for g in range(len(plan.comm_groups)):
        pos = plan.group_positions(g)
        pos = np.where((pos >= 0) & own_set[np.maximum(pos, 0)], PAD, pos)
        remote.append(rewrite_indices(idx, causal, rows, pos, plan.seqlen))
        remote_work.append(_pairs(remote[-1], rows.size))
    return RankMasks(rows, local, tuple(remote), _pairs(local, rows.size), tuple(remote_work),
                     local_form(causal, idx.shape[3]))


def gathered_indices(startend_row_indices: Any, causal: bool, plan: ContextParallelPlan,
                     rank: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, key_positions)`` for one attention of the local rows against *all* gathered keys.

    Columns follow the gathered order of every comm group, one after the other (own keys included,
    padding masked) -- for a caller that gathers K/V in one go and runs a single attention call
    instead of the overlapped phases of :func:`local_masks`.
    """
    idx, causal = explicit_indices(startend_row_indices, causal, plan.seqlen)
    keys = np.concatenate([plan.group_positions(g) for g in range(len(plan.comm_groups))])
    return rewrite_indices(idx, causal, plan.local_rows(rank), keys, plan.seqlen), keys


def _pairs(local_indices: np.ndarray, n_local: int) -> int:
    if n_local == 0:
        return 0
    return int(sem.count_visible_pairs(local_indices, False, n_local).sum())
