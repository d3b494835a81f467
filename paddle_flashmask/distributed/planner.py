"""Mask-aware context-parallel planner (numpy only, no framework).

The sequence (query rows) is cut into chunks of ``chunk_size`` rows. Each chunk is weighted by its
exact work -- the number of visible (query, key) pairs of its rows, from
:func:`paddle_flashmask.semantics.count_visible_pairs` summed over batch and mask heads -- and the
chunks are assigned to ranks: longest-processing-time first (LPT), then a local-improvement pass of
pairwise swaps (and moves, when chunk counts may differ) that lowers the most loaded rank. The
default ``strategy="locality"`` then trades balance slack (``balance_tolerance``) for
communication: from the same chunk-pair counts it knows which key chunks each rank's rows can see,
and it moves whole groups of chunks that see each other (a document, under document masks) onto
one rank, so that they need no K/V from elsewhere.

Each rank owns the tokens of its chunks: their query rows *and* their keys/values. Its local rows are
the rows of its chunks in ascending global order. K/V are all-gathered -- but only the chunks some
other rank's rows can see (its *exported* chunks, first in the shard); the key axis of the gathered
K/V has its own order (see :class:`ContextParallelPlan`), and the local ``startend_row_indices`` are
rewritten to it with :func:`rewrite_indices`.

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

The *local* phase (local rows against the same rows as keys) keeps the causal form: for rows and
keys taken from one ascending subsequence, ``i >= j`` locally exactly when ``r_i >= r_j`` globally
(Sq = Sk), so the diagonal needs no band and every column value just goes through ``L``
(:func:`rewrite_local_indices`). The kernels then run their native causal path there.

A remote phase (local rows against a gathered group's keys) usually concerns few rows -- those of
split documents. Its indices are restricted to the local rows that see one of its keys
(:func:`restrict_rows`, the same ``L`` step once more with that row subset), so its kernels, merges
and dq updates touch only those rows.
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

    K/V layout: rank r's *shard* has ``num_slots * chunk_size`` tokens; slot s holds chunk
    ``shard_chunks[r][s]`` -- its exported chunks (seen by another rank's rows) first, then the
    others, each part ascending -- zero-padded to ``chunk_size``; missing slots are all padding.
    Only the first ``comm_slots`` slots are communicated. The all-gather runs per *comm group* (a
    range of those slots): the gathered buffer of group ``[s0, s1)`` is rank-major,
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
    shard_chunks: Optional[tuple[tuple[int, ...], ...]] = None  # slot order; None = rank_chunks
    strategy: str = "lpt"
    rank_comm_tokens: Optional[np.ndarray] = field(default=None, compare=False)  # keys each rank needs

    def slot_chunks(self, rank: int) -> tuple[int, ...]:
        """Chunk held by each slot of ``rank``'s shard (exported chunks first)."""
        return (self.shard_chunks or self.rank_chunks)[rank]

    @property
    def comm_slots(self) -> int:
        """Slots of every shard that are all-gathered (0: no rank needs another rank's keys)."""
        return self.comm_groups[-1][1] if self.comm_groups else 0

    @property
    def comm_len(self) -> int:
        """Tokens of the communicated prefix of one rank's shard."""
        return self.comm_slots * self.chunk_size

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
        for slot, chunk in enumerate(self.slot_chunks(rank)):
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
        return _loads(self.chunk_work, self.rank_chunks)


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
    if work_model == "pairs":
        return chunk_pair_work(startend_row_indices, causal, seqlen, chunk_size, num_chunks).sum(axis=1)
    idx, causal = explicit_indices(startend_row_indices, causal, seqlen)
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


def chunk_pair_work(startend_row_indices: Any, causal: bool, seqlen: int, chunk_size: int,
                    num_chunks: int) -> np.ndarray:
    """int64 ``[num_chunks, num_chunks]``: visible pairs of query chunk i against key chunk j, summed
    over batch and mask heads (:func:`semantics.count_visible_pairs` per column). Row sums are the
    chunks' work; the non-zero pattern says which keys a chunk's rows need."""
    idx, causal = explicit_indices(startend_row_indices, causal, seqlen)
    out = np.zeros((num_chunks, num_chunks), dtype=np.int64)
    padded = num_chunks * chunk_size
    for c in range(num_chunks):
        r0, r1 = min(c * chunk_size, seqlen), min((c + 1) * chunk_size, seqlen)
        if r1 <= r0:
            continue
        per_key = sem.count_visible_pairs(idx, causal, seqlen, r0, r1, per_column=True).sum(axis=(0, 1))
        out[c] = np.pad(per_key, (0, padded - seqlen)).reshape(num_chunks, chunk_size).sum(axis=1)
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
                          work_model: str = "pairs", improve: bool = True,
                          strategy: str = "locality",
                          balance_tolerance: float = 0.02,
                          remote_penalty: float = 0.0) -> ContextParallelPlan:
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
      strategy: ``"locality"`` (default): after LPT, swap (and, without ``equal_chunks``, move) chunks
        to cut the keys each rank needs from other ranks, as long as the most loaded rank stays
        within ``balance_tolerance`` of the mean (or of LPT's result, when that is worse); under
        document masks this keeps documents whole on one rank, so only the chunks of split
        documents are communicated. ``"lpt"``: balance only.
      balance_tolerance: the load slack ``max / mean - 1`` that ``"locality"`` may spend.
      remote_penalty: > 0 weights each rank's *remote* pairs (rows it owns against keys another
        rank owns) by ``1 + remote_penalty`` and then exchanges chunks to lower the most loaded
        rank's weighted work (:func:`balance_remote`): a remote phase runs on a gathered subset
        of rows in its own kernel calls and costs more per pair than the local phase.
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
    if strategy not in ("locality", "lpt"):
        raise ValueError(f"strategy: expected 'locality' or 'lpt', found {strategy!r}")
    if not 0.0 <= float(balance_tolerance) < 1.0:
        raise ValueError(f"balance_tolerance: expected a float in [0, 1), found {balance_tolerance!r}")
    if not 0.0 <= float(remote_penalty) <= 10.0:
        raise ValueError(f"remote_penalty: expected a float in [0, 10], found {remote_penalty!r}")
    pair_work = chunk_pair_work(startend_row_indices, causal, seqlen, chunk_size, num_chunks)
    work = pair_work.sum(axis=1) if work_model == "pairs" else \
        chunk_work(startend_row_indices, causal, seqlen, chunk_size, num_chunks, work_model)
    capacity = num_chunks // world_size if equal_chunks else None
    buckets = assign_lpt(work, world_size, capacity)
    if improve:
        buckets = improve_assignment(work, buckets, allow_moves=not equal_chunks)
    needs = pair_work > 0
    chunk_len = np.array([max(0, min((c + 1) * chunk_size, seqlen) - c * chunk_size)
                          for c in range(num_chunks)], dtype=np.int64)
    if strategy == "locality":
        peak = int(_loads(work, buckets).max())
        bound = max(peak, int(np.floor((1.0 + balance_tolerance) * work.sum() / world_size)))
        starts = [buckets, contiguous_split(work, world_size, capacity)]
        buckets = min((improve_locality(work, needs, chunk_len, start, bound, allow_moves=not equal_chunks)
                       for start in starts),
                      key=lambda b: _locality_key(work, needs, chunk_len, b, bound))
    if remote_penalty > 0:
        buckets = balance_remote(pair_work, buckets, float(remote_penalty), needs, chunk_len,
                                 allow_moves=not equal_chunks)
    rank_chunks = tuple(tuple(sorted(b)) for b in buckets)
    owner = _owners(rank_chunks, num_chunks)
    # key chunk j is exported when the rows of some chunk owned elsewhere see it
    exported = (needs & (owner[:, None] != owner[None, :])).any(axis=0)
    shard_chunks = tuple(tuple([c for c in chunks if exported[c]] + [c for c in chunks if not exported[c]])
                         for chunks in rank_chunks)
    comm_slots = max(int(exported[list(chunks)].sum()) if chunks else 0 for chunks in rank_chunks)
    groups = _split_slots(comm_slots, comm_groups) if comm_slots else ()
    per_rank = num_chunks // world_size
    contiguous = None
    if num_chunks % world_size == 0:  # the naive split, for the report
        contiguous = work.reshape(world_size, per_rank).sum(axis=1)
    return ContextParallelPlan(seqlen, world_size, int(chunk_size), work, rank_chunks, groups,
                               work_model, contiguous, shard_chunks, strategy,
                               _rank_comm(needs, owner, chunk_len, world_size))


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
        loads = _loads(w, buckets)
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


def remote_weighted_loads(pair_work: np.ndarray, owner: np.ndarray, world_size: int,
                          penalty: float) -> np.ndarray:
    """float64 ``[world_size]``: each rank's pairs, those against another rank's keys counted
    ``1 + penalty`` times (``pair_work[i, j]``: pairs of row chunk i against key chunk j)."""
    remote = owner[:, None] != owner[None, :]
    per_chunk = (np.asarray(pair_work, dtype=np.float64) * (1.0 + penalty * remote)).sum(axis=1)
    return np.bincount(owner, weights=per_chunk, minlength=world_size)


def balance_remote(pair_work: np.ndarray, buckets: list[list[int]], penalty: float,
                   needs: np.ndarray, chunk_len: np.ndarray, allow_moves: bool = False,
                   max_rounds: Optional[int] = None) -> list[list[int]]:
    """Local search on :func:`remote_weighted_loads`: each round applies the swap (or move) of
    chunks between the most loaded rank and another one that lowers the most loaded rank's
    weighted work the most (ties: less communication); stops when none does. Deterministic."""
    n, world = int(pair_work.shape[0]), len(buckets)
    buckets = [list(b) for b in buckets]
    length = np.asarray(chunk_len, dtype=np.int64)

    def key_of(owner):
        loads = remote_weighted_loads(pair_work, owner, world, penalty)
        return float(loads.max()), int(_rank_comm(needs, owner, length, world).sum())

    owner = _owners(buckets, n)
    key = key_of(owner)
    for _ in range(max_rounds or 2 * n):
        loads = remote_weighted_loads(pair_work, owner, world, penalty)
        a = int(np.argmax(loads))
        best = None
        for b in range(world):
            if b == a:
                continue
            candidates = [(i, j) for i in buckets[a] for j in buckets[b]]
            if allow_moves and len(buckets[a]) > 1:
                candidates += [(i, None) for i in buckets[a]]
            for i, j in candidates:
                trial = owner.copy()
                trial[i] = b
                if j is not None:
                    trial[j] = a
                k = key_of(trial)
                if k < key and (best is None or k < best[0]):
                    best = (k, b, i, j)
        if best is None:
            break
        key, b, i, j = best
        owner[i] = b
        buckets[a].remove(i)
        buckets[b].append(i)
        if j is not None:
            owner[j] = a
            buckets[b].remove(j)
            buckets[a].append(j)
    return buckets


def _loads(work: np.ndarray, buckets) -> np.ndarray:
    """int64 ``[len(buckets)]``: the summed work of each rank's chunks."""
    work = np.asarray(work, dtype=np.int64)
    return np.array([int(work[list(b)].sum()) if len(b) else 0 for b in buckets], dtype=np.int64)


def _owners(buckets, num_chunks: int) -> np.ndarray:
    owner = np.zeros(num_chunks, dtype=np.int64)
    for r, chunks in enumerate(buckets):
        owner[list(chunks)] = r
    return owner


def _seen_by_rank(needs: np.ndarray, owner: np.ndarray, world_size: int) -> np.ndarray:
    """int64 ``[num_chunks, world_size]``: how many of rank r's chunks have rows that see key
    chunk j (counts, so the local search can move one chunk by adding or subtracting its row)."""
    return needs.astype(np.int64).T @ (owner[:, None] == np.arange(world_size)[None, :]).astype(np.int64)


def _needed_tokens(seen_r: np.ndarray, own_r: np.ndarray, chunk_len: np.ndarray) -> np.ndarray:
    """Tokens of other ranks' chunks that a rank's rows see: ``seen_r`` / ``own_r`` are its column
    of :func:`_seen_by_rank` and its ownership mask, or stacks of candidates (last axis = chunks)."""
    return (chunk_len * ((seen_r > 0) & ~own_r)).sum(axis=-1)


def _rank_comm(needs: np.ndarray, owner: np.ndarray, chunk_len: np.ndarray, world_size: int) -> np.ndarray:
    """int64 ``[world_size]``: tokens of other ranks' chunks that each rank's rows can see."""
    seen = _seen_by_rank(needs, owner, world_size)
    return np.array([int(_needed_tokens(seen[:, r], owner == r, chunk_len)) for r in range(world_size)],
                    dtype=np.int64)


def contiguous_split(work: np.ndarray, world_size: int, capacity: Optional[int] = None) -> list[list[int]]:
    """Consecutive chunks per rank: ``capacity`` each, else cut where the running work crosses
    ``r * total / world_size`` (the split that keeps neighbouring tokens -- documents -- together)."""
    n = len(work)
    if capacity is not None:
        return [list(range(r * capacity, min((r + 1) * capacity, n))) for r in range(world_size)]
    prefix = np.cumsum(np.asarray(work, dtype=np.float64))
    targets = prefix[-1] * np.arange(1, world_size) / world_size if n else np.zeros(0)
    cuts = np.searchsorted(prefix, targets, side="left") + 1  # the chunk crossing a target stays left
    edges = [0] + [int(min(c, n)) for c in cuts] + [n]
    edges = np.maximum.accumulate(edges)
    return [list(range(edges[r], edges[r + 1])) for r in range(world_size)]


def _locality_key(work, needs, chunk_len, buckets, bound: int) -> tuple[int, int, int]:
    owner = _owners(buckets, len(work))
    peak = int(_loads(work, buckets).max())
    return max(peak, bound), int(_rank_comm(needs, owner, chunk_len, len(buckets)).sum()), peak


def improve_locality(work: np.ndarray, needs: np.ndarray, chunk_len: np.ndarray,
                     buckets: list[list[int]], bound: int, allow_moves: bool = False,
                     max_rounds: Optional[int] = None) -> list[list[int]]:
    """Local search for less communication within a load bound.

    ``needs[i, j]``: rows of chunk i see keys of chunk j. Communication = sum over ranks of the
    tokens of other ranks' chunks its rows need. Each round applies the single swap (or move) of
    chunks between two ranks with the smallest key ``(max(peak, bound), communication, peak)``,
    where ``peak`` is the most loaded rank's work: first down to ``bound``, then less
    communication without going over it; it stops when no exchange lowers the key. Deterministic
    (ties go to the first candidate), so every rank computes the same plan.
    """
    w = np.asarray(work, dtype=np.int64)
    n, world = w.size, len(buckets)
    owner = _owners(buckets, n)
    need = needs.astype(np.int64)
    one_hot = np.eye(n, dtype=bool)
    length = np.asarray(chunk_len, dtype=np.int64)
    loads = _loads(w, buckets)
    bound = int(bound)
    seen = _seen_by_rank(needs, owner, world)

    def rank_comm(seen_r, own_r):
        return _needed_tokens(seen_r, own_r, length)

    comm = int(sum(rank_comm(seen[:, r], owner == r) for r in range(world)))
    key = (max(int(loads.max()), bound), comm, int(loads.max()))
    for _ in range(max_rounds or 2 * n + 16):
        best = None
        peak_ranks = set(np.nonzero(loads == loads.max())[0].tolist())
        for a in range(world):
            for b in range(a + 1, world):
                if key[0] > bound and a not in peak_ranks and b not in peak_ranks:
                    continue  # over the bound only an exchange with a most loaded rank can help
                ca, cb = np.nonzero(owner == a)[0], np.nonzero(owner == b)[0]
                # candidates (c from a to b, d from b to a); -1 = nothing (a move), not both
                c = np.repeat(np.concatenate([ca, [-1]] if allow_moves else [ca]), cb.size + allow_moves)
                d = np.tile(np.concatenate([cb, [-1]] if allow_moves else [cb]), ca.size + allow_moves)
                keep = (c >= 0) | (d >= 0)
                c, d = c[keep], d[keep]
                if c.size == 0:
                    continue
                has_c, has_d = c >= 0, d >= 0
                cc, dd = np.where(has_c, c, 0), np.where(has_d, d, 0)
                need_c, need_d = need[cc] * has_c[:, None], need[dd] * has_d[:, None]
                hot_c, hot_d = one_hot[cc] & has_c[:, None], one_hot[dd] & has_d[:, None]
                seen_a = seen[:, a][None, :] - need_c + need_d
                seen_b = seen[:, b][None, :] + need_c - need_d
                own_a = ((owner == a)[None, :] & ~hot_c) | hot_d
                own_b = ((owner == b)[None, :] & ~hot_d) | hot_c
                base = comm - int(rank_comm(seen[:, a], owner == a)) - int(rank_comm(seen[:, b], owner == b))
                new_comm = base + rank_comm(seen_a, own_a) + rank_comm(seen_b, own_b)
                shift = np.where(has_c, w[cc], 0) - np.where(has_d, w[dd], 0)  # load a -> b
                others = np.delete(loads, [a, b]).max(initial=0)
                peak = np.maximum(np.maximum(loads[a] - shift, loads[b] + shift), others)
                i = int(np.lexsort((peak, new_comm, np.maximum(peak, bound)))[0])
                cand = (max(int(peak[i]), bound), int(new_comm[i]), int(peak[i]))
                if cand < key and (best is None or cand < best[0]):
                    best = (cand, a, b, int(c[i]), int(d[i]))
        if best is None:
            break
        key, a, b, c, d = best
        for chunk, src, dst in ((c, a, b), (d, b, a)):
            if chunk < 0:
                continue
            owner[chunk] = dst
            seen[:, src] -= need[chunk]
            seen[:, dst] += need[chunk]
            loads[src] -= w[chunk]
            loads[dst] += w[chunk]
        comm = key[1]
    return [sorted(np.nonzero(owner == r)[0].tolist()) for r in range(world)]


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
        "strategy": plan.strategy,
        "comm_slots": plan.comm_slots,
        "gathered_tokens_per_rank": (plan.world_size - 1) * plan.comm_len,
    }
    if plan.rank_comm_tokens is not None:
        report["rank_needed_remote_tokens"] = [int(x) for x in plan.rank_comm_tokens]
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


def _ascending_rows(local_rows: Any) -> np.ndarray:
    rows = np.asarray(local_rows, dtype=np.int64)
    if rows.size > 1 and np.any(np.diff(rows) <= 0):
        raise ValueError("local_rows: expected strictly ascending global rows")
    return rows


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
    rows = _ascending_rows(local_rows)
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
    tokens, which need no communication), in the global (causal, C) form (``local_causal``).
    ``remote[g]``: indices for the query rows ``remote_rows[g]`` x gathered group g (columns =
    ``plan.group_positions(g)``, own columns masked because the local phase already covered them).
    ``remote_rows[g]``: ascending local rows that see at least one key of group g (in any batch or
    mask head); ``remote[g]`` is written in their coordinates (``seqlen_q = len(remote_rows[g])``),
    the other local rows see nothing there. ``None`` = every local row (no gather needed); an empty
    tuple (masks built by hand) means ``None`` for every group.
    ``local_work`` / ``remote_work[g]``: visible pairs of each phase (0 = the phase can be skipped).
    """
    rows: np.ndarray
    local: np.ndarray
    remote: tuple[np.ndarray, ...]
    local_work: int
    remote_work: tuple[int, ...]
    num_columns: int          # C of the remote phases' (bidirectional) indices
    local_causal: bool = False  # the local phase's form (the global one; see the module docstring)
    remote_rows: tuple[Optional[np.ndarray], ...] = ()

    def phase_rows(self, group: int) -> Optional[np.ndarray]:
        """``remote_rows[group]`` (``None`` = every local row)."""
        return self.remote_rows[group] if self.remote_rows else None


def restrict_rows(indices: np.ndarray, seqlen_q: int) -> tuple[Optional[np.ndarray], np.ndarray]:
    """Drop the query rows that see no key from bidirectional (``causal=False``) indices.

    Returns ``(rows, indices')``: ``rows`` = ascending rows that see a key in any batch or mask head
    (:func:`semantics.rows_with_visible_keys`), ``indices'`` the same mask in their coordinates
    (value ``x`` -> number of kept rows ``< x``: exact, as in :func:`rewrite_indices`, since a
    sorted subsequence meets a band in one run and dropped rows see nothing). ``(None, indices)``
    when every row is kept; a column masked for every row stays masked for every kept row.
    """
    keep = sem.rows_with_visible_keys(indices, False, seqlen_q).any(axis=(0, 1))
    if keep.all():
        return None, indices
    rows = np.nonzero(keep)[0].astype(np.int64)
    out = np.searchsorted(rows, np.asarray(indices, dtype=np.int64), side="left")
    return rows, np.ascontiguousarray(out.astype(np.int32))


def rewrite_local_indices(startend_row_indices: Any, causal: bool, local_rows: np.ndarray) -> np.ndarray:
    """Indices ``[B, Hm, R, C]`` of the local rows against themselves as keys, in the global
    ``(causal, C)`` form (self-attention, Sq = Sk): every column value ``x`` of a local key becomes
    ``L(x)``, the number of local rows with global row ``< x``. A band ``[s, e)`` of global rows
    is the local run ``[L(s), L(e))``, and the causal diagonal is kept by the ascending order."""
    idx = sem._to_numpy(startend_row_indices)
    if not causal:  # the bidirectional rewrite keeps the form already
        return rewrite_indices(idx, causal, local_rows, local_rows, idx.shape[2])
    rows = _ascending_rows(local_rows)
    local = np.searchsorted(rows, idx[:, :, rows, :].astype(np.int64), side="left")
    return np.ascontiguousarray(local.astype(np.int32))


def remote_positions(plan: ContextParallelPlan, rank: int) -> list[np.ndarray]:
    """Per comm group, the global key of each gathered column as ``rank`` uses it: its own keys
    (already attended in the local phase) and padding become ``PAD``."""
    own = np.zeros(plan.seqlen, dtype=bool)
    own[plan.local_rows(rank)] = True
    out = []
    for g in range(len(plan.comm_groups)):
        pos = plan.group_positions(g)
        out.append(np.where((pos >= 0) & own[np.maximum(pos, 0)], PAD, pos))
    return out


def local_masks(startend_row_indices: Any, causal: bool, plan: ContextParallelPlan,
                rank: int) -> RankMasks:
    """Rewrite the global indices for ``rank``: one local phase plus one per comm group, each
    remote phase restricted to the local rows that see its keys (:func:`restrict_rows`)."""
    idx, causal = explicit_indices(startend_row_indices, causal, plan.seqlen)
    if not 0 <= rank < plan.world_size:
        raise ValueError(f"rank: expected in [0, {plan.world_size}), found {rank}")
    rows = plan.local_rows(rank)
    local = rewrite_local_indices(idx, causal, rows)
    remote, remote_rows, remote_work = [], [], []
    for pos in remote_positions(plan, rank):
        subset, phase = restrict_rows(rewrite_indices(idx, causal, rows, pos, plan.seqlen), rows.size)
        remote.append(phase)
        remote_rows.append(subset)
        remote_work.append(_pairs(phase, rows.size if subset is None else subset.size))
    return RankMasks(rows, local, tuple(remote), _pairs(local, rows.size, causal), tuple(remote_work),
                     local_form(causal, idx.shape[3]), causal, tuple(remote_rows))


def gathered_indices(startend_row_indices: Any, causal: bool, plan: ContextParallelPlan,
                     rank: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, key_positions)`` for one attention of the local rows against *all* gathered keys.

    Columns: the local keys (the local rows), then the gathered order of every comm group, one
    after the other, with own keys and padding masked there -- for a caller that gathers K/V in one
    go and runs a single attention call instead of the overlapped phases of :func:`local_masks`.
    Keys that are neither local nor gathered are masked for every local row by construction.
    """
    idx, causal = explicit_indices(startend_row_indices, causal, plan.seqlen)
    rows = plan.local_rows(rank)
    keys = np.concatenate([rows] + remote_positions(plan, rank))
    return rewrite_indices(idx, causal, plan.local_rows(rank), keys, plan.seqlen), keys


def _pairs(local_indices: np.ndarray, n_local: int, causal: bool = False) -> int:
    if n_local == 0:
        return 0
    return int(sem.count_visible_pairs(local_indices, causal, n_local).sum())
