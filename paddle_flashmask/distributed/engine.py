"""Context-parallel attention, written once for both frameworks.

The torch and Paddle modules supply an adapter (tensor ops + collectives, the only framework code)
and wrap :func:`cp_forward` / :func:`cp_backward` in their autograd mechanism.

Forward on rank r (local rows R, the plan's comm groups g = 0..G-1):
  1. lay the local K and V rows that other ranks need (the plan's exported chunks) out as the
     communicated prefix ``[comm_len, B, Hk, D]`` of the padded shard (a free view when that is
     every row) and launch async all-gathers of K and V per comm group (NCCL runs them on its own
     stream, in order); with no comm group (no rank sees another's keys) nothing is sent;
  2. attend R x own keys (no communication needed) while the gathers are in flight;
  3. for each group: wait for its gather, attend the rows that see the group's keys
     (``masks.remote_rows[g]``, gathered from R; all of R when None) x the group's keys (own keys
     masked there), and merge the partial result into those rows of the running output with its
     log-sum-exp;
  4. add the learnable sink (one more term of the denominator) once, at the end.
Phases whose rewritten mask has no visible pair are not computed (their gathers still complete).

Backward: every phase's gradient comes from the backend backward called with the *merged* output
and LSE (``P = exp(S - LSE)`` is then the true probability restricted to the phase's keys, and
``rowsum(dO * O)`` the true correction term), so no gradient ever flows through a partial LSE --
the kernels' backward does not take one. A remote phase runs on its row subset (dO, O, LSE and q
gathered, dq added into those rows). Each gathered group's dK/dV is reduce-scattered as soon as it
is computed, overlapping the next phase; the sink gradient is computed from the merged LSE.
"""
from __future__ import annotations

import math
import os
from typing import Any, NamedTuple, Optional

import numpy as np

from ..ops import arguments, backend as backend_ops
from .planner import ContextParallelPlan, RankMasks, local_masks, plan_context_parallel, window_indices

COMM_SMS_ENV = "PADDLE_FLASHMASK_CP_COMM_SMS"
COMM_RETIRE_ENV = "PADDLE_FLASHMASK_CP_COMM_RETIRE"
COMM_FUSE_KV_ENV = "PADDLE_FLASHMASK_CP_FUSE_KV"
# A row set of at most this many contiguous runs is read and written with slices (plain copies at
# memory bandwidth); a more fragmented one with index kernels (several times slower per byte).
MAX_SEGMENTS = 32


class RowMap(NamedTuple):
    """Rows of a local tensor (ascending positions of a compact tensor) on the device.

    ``index``: int64 device tensor of the rows, in compact order. ``segments``: the same as
    contiguous runs ``(row, compact offset, length)``, or None when there are more than
    :data:`MAX_SEGMENTS` (then the index kernels are used)."""
    index: Any
    segments: Optional[tuple[tuple[int, int, int], ...]]


def row_segments(rows: np.ndarray) -> Optional[tuple[tuple[int, int, int], ...]]:
    """Contiguous runs ``(row, offset, length)`` of ``rows`` in order; None past MAX_SEGMENTS."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size == 0:
        return ()
    starts = np.concatenate([[0], np.nonzero(np.diff(rows) != 1)[0] + 1])
    if starts.size > MAX_SEGMENTS:
        return None
    ends = np.concatenate([starts[1:], [rows.size]])
    return tuple((int(rows[a]), int(a), int(b - a)) for a, b in zip(starts, ends))


def row_map(rows: np.ndarray, to_rows) -> RowMap:
    return RowMap(to_rows(np.asarray(rows, dtype=np.int64)), row_segments(rows))


def take_rows(adapter, x, rows: RowMap, dim: int):
    """``x``'s rows ``rows`` along ``dim``, in compact order (a new tensor)."""
    if rows.segments is None:
        return adapter.index_rows(x, rows.index, dim)
    parts = [adapter.narrow(x, dim, r, n) for r, _, n in rows.segments]
    return adapter.concat(parts or [adapter.narrow(x, dim, 0, 0)], dim)


def put_rows(adapter, x, rows: RowMap, dim: int, src):
    """``x[rows] = src`` along ``dim`` (``src`` compact), in place; returns ``x``."""
    return _write_rows(adapter, x, rows, dim, src, adapter.put_rows, adapter.assign_slice)


def add_rows(adapter, x, rows: RowMap, dim: int, src):
    """``x[rows] += src`` along ``dim`` (``src`` compact), in place; returns ``x``."""
    return _write_rows(adapter, x, rows, dim, src, adapter.add_rows, adapter.add_slice)


def _write_rows(adapter, x, rows: RowMap, dim: int, src, by_index, by_slice):
    """One in-place write of ``src`` into ``x``'s rows: ``by_index(x, index, dim, src)`` for a
    fragmented set, else ``by_slice(x, dim, start, part)`` per contiguous run."""
    if rows.segments is None:
        return by_index(x, rows.index, dim, src)
    for r, o, n in rows.segments:
        x = by_slice(x, dim, r, adapter.narrow(src, dim, o, n))
    return x


class PendingCollective:
    """An async collective (torch Work / Paddle task, or None when done) and its result once waited."""

    def __init__(self, handle, result) -> None:
        self.handle, self.result = handle, result

    def wait(self):
        if self.handle is not None:
            self.handle.wait()
        return self.result() if callable(self.result) else self.result


class PendingPart:
    """The K (or V) half of a fused K/V collective (:func:`comm_fuse_kv`): waits for the one
    collective (once for both halves; ``shared`` is their common one-item cache) and returns the
    columns ``[start, start + length)`` of its last dim (a view)."""

    def __init__(self, adapter, fused: PendingCollective, shared: list, start: int, length: int) -> None:
        self.adapter, self.fused, self.shared = adapter, fused, shared
        self.start, self.length = start, length

    def wait(self):
        if not self.shared:
            self.shared.append(self.fused.wait())
        return self.adapter.narrow(self.shared[0], 3, self.start, self.length)


def _collective_pair(adapter, collective, k_part, v_part, fuse: bool):
    """``(K, V)`` pending results of ``collective`` (``adapter.all_gather`` / ``reduce_scatter``)
    on ``k_part`` and ``v_part`` (``[N, B, Hk, D(v)]``, same N): two collectives, or with ``fuse``
    one collective on their concatenation along the last dim (one NCCL kernel; its two halves
    are :class:`PendingPart` views). Both ways move and sum the same elements."""
    if not fuse:
        return collective(k_part), collective(v_part)
    dk = int(k_part.shape[3])
    fused, shared = collective(adapter.concat([k_part, v_part], 3)), []
    return (PendingPart(adapter, fused, shared, 0, dk),
            PendingPart(adapter, fused, shared, dk, int(v_part.shape[3])))


def plan_for_rank(startend_row_indices: Any, causal: bool, world_size: int, rank: int,
                  window_size: Any, plan_kwargs: dict) -> tuple[ContextParallelPlan, RankMasks]:
    """The frameworks' ``prepare``: window shorthand, plan over ``world_size`` ranks, local masks."""
    if window_size is not None:
        if startend_row_indices is not None:
            raise ValueError("window_size: expected None when startend_row_indices is given (the window "
                             f"is shorthand for building them), found {window_size!r}")
        if plan_kwargs.get("seqlen") is None:
            raise ValueError("seqlen: required with window_size")
        startend_row_indices = window_indices(int(plan_kwargs["seqlen"]), window_size, causal)
    plan = plan_context_parallel(startend_row_indices, causal, world_size, **plan_kwargs)
    return plan, local_masks(startend_row_indices, causal, plan, rank)


class PhaseIndices(NamedTuple):
    """Device tensors of a rank's rewritten indices, one per phase (None = phase skipped), and of
    each remote phase's query rows (a :class:`RowMap`; None = every row)."""
    local: Any
    remote: tuple[Any, ...]
    remote_rows: tuple[Optional[RowMap], ...] = ()

    def phase_rows(self, group: int) -> Any:
        return self.remote_rows[group] if self.remote_rows else None


class ShardMaps(NamedTuple):
    """Row maps between the local rows and the communicated prefix of the padded K/V shard
    (``plan.comm_len`` rows; numpy, host side).

    All are None when that prefix *is* the local rows (every chunk exported and full, equal
    counts): then packing and unpacking are free views. A local row that is not communicated (no
    other rank sees it) maps to row ``comm_len`` of the unpacked dK/dV, a zero row
    (``uncommunicated``): its gradient comes from the local phase alone.
    """
    local_to_shard: Optional[np.ndarray]  # [R] position of each local row; comm_len = not sent
    uncommunicated: bool = False
    # The communicated positions that hold a local row (not padding) and that row: the backward
    # adds the reduce-scattered dK/dV of those rows only into the local phase's, instead of
    # expanding them to every local row first.
    sent_positions: Optional[np.ndarray] = None  # [n_sent] positions in [0, comm_len)
    sent_rows: Optional[np.ndarray] = None       # [n_sent] their local rows


def shard_maps(plan: ContextParallelPlan, rank: int) -> ShardMaps:
    comm_len = plan.comm_len
    src = plan.shard_local_index(rank)[:comm_len]
    n_local = int(plan.local_rows(rank).size)
    real = src >= 0
    local_to_shard = np.full(n_local, comm_len, dtype=np.int64)
    local_to_shard[src[real]] = np.nonzero(real)[0]
    if src.size == n_local and np.array_equal(src, np.arange(n_local)):
        return ShardMaps(None)
    return ShardMaps(local_to_shard, bool((local_to_shard == comm_len).any()),
                     np.nonzero(real)[0].astype(np.int64), src[real].astype(np.int64))


class DeviceMasks(NamedTuple):
    """A rank's rewritten indices and row maps on the device.

    Uploading them costs host<->device copies that stall the host; build this once per step with
    ``torch_cp.device_masks`` / ``paddle_cp.device_masks`` and pass it to every layer.
    """
    masks: RankMasks
    phase_idx: PhaseIndices
    maps: ShardMaps  # device int64 index tensors (or None); the sent rows/positions as RowMaps


def device_masks(plan: ContextParallelPlan, masks: RankMasks, rank: int, to_indices,
                 to_rows) -> DeviceMasks:
    """Upload ``masks`` with ``to_indices`` (int32 indices) and ``to_rows`` (int64 row maps)."""
    if not np.array_equal(masks.rows, plan.local_rows(rank)):
        raise ValueError(f"masks: expected the masks of rank {rank} of this plan "
                         f"({plan.local_rows(rank).size} rows), found masks of other rows "
                         f"({masks.rows.size} rows)")
    active = [w > 0 for w in masks.remote_work]
    phase = PhaseIndices(to_indices(masks.local) if masks.local_work > 0 else None,
                         tuple(to_indices(m) if a else None for m, a in zip(masks.remote, active)),
                         tuple(row_map(masks.phase_rows(g), to_rows)
                               if a and masks.phase_rows(g) is not None else None
                               for g, a in enumerate(active)))
    host = shard_maps(plan, rank)
    maps = ShardMaps(None if host.local_to_shard is None else to_rows(host.local_to_shard),
                     host.uncommunicated,
                     *(None if a is None else row_map(a, to_rows) for a in host[2:]))
    return DeviceMasks(masks, phase, maps)


class CPState:
    """What the backward needs from the forward (kept off the autograd graph)."""

    def __init__(self) -> None:
        self.gathered: list[Any] = []  # (k, v) per comm group, None when the phase was skipped


def check_local_inputs(q, k, v, learnable_sink, softmax_scale):
    """The frontends' checks of q/k/v/sink; a rank may own no row (R = 0), which they reject."""
    if len(q.shape) == 4 and int(q.shape[1]) == 0:
        return arguments.resolve_softmax_scale(softmax_scale, int(q.shape[3]))
    dims = arguments.check_inputs(q, k, v, learnable_sink)
    return arguments.resolve_softmax_scale(softmax_scale, dims.head_dim)


def _sizes(adapter, plan: ContextParallelPlan, rank: int, q, k, v, masks: RankMasks) -> None:
    if adapter.world_size != plan.world_size:
        raise ValueError(f"group: expected {plan.world_size} ranks (the plan's world_size), found "
                         f"{adapter.world_size}")
    n_local = int(masks.rows.size)
    for name, x in (("query", q), ("key", k), ("value", v)):
        if len(x.shape) != 4 or int(x.shape[1]) != n_local:
            raise ValueError(f"{name}: expected the local rows of rank {rank} "
                             f"[batch, {n_local}, heads, dim], found shape {[int(s) for s in x.shape]}")
    b = int(masks.local.shape[0])
    if b != int(q.shape[0]):
        raise ValueError(f"startend_row_indices: expected batch size {int(q.shape[0])} (dim 0), found {b}")


def comm_sms(requested: Optional[int]) -> int:
    """SMs the forward and backward leave to the collectives while they are in flight: the
    argument, else env ``PADDLE_FLASHMASK_CP_COMM_SMS``, else 0. The cute kernels are persistent
    (one CTA per SM that stays until the end), so an all-gather or reduce-scatter launched on
    NCCL's stream may find no free SM until the phase it should overlap with is over."""
    if requested is None:
        text = os.environ.get(COMM_SMS_ENV, "").strip()
        if not text:
            return 0
        if not text.isdigit():
            raise ValueError(f"{COMM_SMS_ENV}: expected a non-negative int, found {text!r}")
        requested = int(text)
    if not isinstance(requested, int) or requested < 0:
        raise ValueError(f"comm_sms: expected a non-negative int, found {requested!r}")
    return requested


def _bool_option(requested: Optional[bool], env: str, name: str) -> bool:
    """An on/off CP option: the argument, else env ``env`` (``0`` / ``1``), else False; anything
    else is an error that names the argument or the variable."""
    if requested is None:
        text = os.environ.get(env, "").strip()
        if text not in ("", "0", "1"):
            raise ValueError(f"{env}: expected 0 or 1, found {text!r}")
        requested = text == "1"
    if not isinstance(requested, bool):
        raise ValueError(f"{name}: expected a bool, found {requested!r}")
    return requested


def comm_retire(requested: Optional[bool], sms: int) -> bool:
    """Whether the phases that run while a collective is in flight use one CTA per work tile
    (``retire`` of the kernels: CTAs end as they finish, so NCCL's kernels get SMs in between)
    instead of the persistent grid: the argument, else env ``PADDLE_FLASHMASK_CP_COMM_RETIRE``
    (``1``), else False. Excludes reserving SMs (``sms`` > 0)."""
    requested = _bool_option(requested, COMM_RETIRE_ENV, "comm_retire")
    if requested and sms:
        raise ValueError(f"comm_retire: expected False with comm_sms > 0 (found comm_sms={sms}): "
                         f"retiring CTAs and reserved SMs are two ways to the same end")
    return requested


def comm_fuse_kv(requested: Optional[bool]) -> bool:
    """Whether K and V travel in one collective per comm group and direction instead of two: the
    forward all-gathers ``[N, B, Hk, D + Dv]`` (K and V side by side in the last dim) and the
    backward reduce-scatters dK and dV the same way. The argument, else env
    ``PADDLE_FLASHMASK_CP_FUSE_KV`` (``1``), else False.

    Why: collectives on one NCCL stream run one after the other, and the second can only start
    once the first is complete on every rank; by then the rank's persistent attention kernel,
    launched after both, may hold every SM, so the second collective waits for the whole phase
    on that rank while the other rank's copy spins on its SMs. One collective is one NCCL kernel,
    launched before the phase. Costs one extra copy of the sent rows each way (the concatenation)
    and of the gathered K/V (the halves are made contiguous for the kernels); results are the
    same values (an all-gather copies; a reduce-scatter sums each element over the ranks)."""
    return _bool_option(requested, COMM_FUSE_KV_ENV, "comm_fuse_kv")


def comm_options(sms: Optional[int], retire: Optional[bool], fuse_kv: Optional[bool] = None) -> dict:
    """``{"comm_sms": ..., "comm_retire": ..., "comm_fuse_kv": ...}`` resolved from the frontends'
    arguments (None: env or default; :func:`comm_sms`, :func:`comm_retire`, :func:`comm_fuse_kv`)."""
    sms = comm_sms(sms)
    return {"comm_sms": sms, "comm_retire": comm_retire(retire, sms),
            "comm_fuse_kv": comm_fuse_kv(fuse_kv)}


def _overlap(reserved_sms: int, retire: bool, in_flight: bool) -> dict:
    """Grid arguments of a phase: the SMs left free / retiring CTAs only while a collective is
    in flight, the persistent grid otherwise."""
    return {"reserved_sms": reserved_sms if in_flight else 0, "retire": retire and in_flight}


def cp_forward(adapter, plan: ContextParallelPlan, masks: RankMasks, phase_idx: PhaseIndices,
               maps: ShardMaps, q, k, v, learnable_sink, *, softmax_scale: float,
               backend: Optional[str], state: CPState, reserved_sms: int = 0,
               retire: bool = False, fuse_kv: bool = False):
    """Returns ``(out [B, R, H, Dv] in q's dtype, lse fp32 [B, H, R])``. ``reserved_sms``
    (:func:`comm_sms`) or ``retire`` (:func:`comm_retire`) goes to every phase that runs while a
    gather is still in flight. ``fuse_kv`` (:func:`comm_fuse_kv`): one all-gather of K and V
    together per comm group."""
    rank = adapter.rank
    _sizes(adapter, plan, rank, q, k, v, masks)
    pending = []
    if plan.comm_groups:  # the exported prefix [comm_len, B, Hk, D], a view when it is every row
        k_shard = _pack_shard(adapter, k, maps, plan.comm_len)
        v_shard = _pack_shard(adapter, v, maps, plan.comm_len)
        cs = plan.chunk_size
        pending = [_collective_pair(adapter, adapter.all_gather, adapter.rows(k_shard, s0 * cs, s1 * cs),
                                    adapter.rows(v_shard, s0 * cs, s1 * cs), fuse_kv)
                   for s0, s1 in plan.comm_groups]

    acc = _Merge(adapter, q, int(v.shape[3]))
    if masks.local_work > 0:
        out, lse, _ = backend_ops.run_fwd(backend, q, k, v, phase_idx.local, None, causal=masks.local_causal,
                                          softmax_scale=softmax_scale,
                                          **_overlap(reserved_sms, retire, bool(pending)))
        acc.add(out, lse)
    for g, (k_work, v_work) in enumerate(pending):
        k_gathered, v_gathered = k_work.wait(), v_work.wait()  # [world * group_len, B, Hk, D]
        if masks.remote_work[g] == 0:
            state.gathered.append(None)
            continue
        kg, vg = adapter.batch_first(k_gathered), adapter.batch_first(v_gathered)
        state.gathered.append((kg, vg))
        later_in_flight = g + 1 < len(pending)
        rows = phase_idx.phase_rows(g)
        q_g = q if rows is None else take_rows(adapter, q, rows, 1)
        out, lse, _ = backend_ops.run_fwd(backend, q_g, kg, vg, phase_idx.remote[g], None, causal=False,
                                          softmax_scale=softmax_scale,
                                          **_overlap(reserved_sms, retire, later_in_flight))
        acc.add(out, lse, rows)
    if learnable_sink is not None:
        acc.add_sink(learnable_sink)
    out, lse = acc.result()
    return adapter.cast(out, q), lse


def _pack_shard(adapter, x, maps: ShardMaps, comm_len: int):
    """The communicated prefix ``[comm_len, B, Hk, D]`` of the local rows ``x [B, R, Hk, D]``:
    the sent rows at their positions, zeros at padding positions."""
    if maps.sent_rows is None:  # the prefix is every local row, in order
        return adapter.rows_first(x)
    sent = adapter.rows_first(take_rows(adapter, x, maps.sent_rows, 1))
    return put_rows(adapter, adapter.zeros_rows_first(comm_len, x), maps.sent_positions, 0, sent)


class _Merge:
    """Running (O, LSE) over phases: O = sum_s exp(lse_s - LSE) o_s, LSE = logsumexp_s lse_s.

    The weights are computed on the small ``[B, H, R]`` LSE tensors in fp32; the output is updated
    with one ``lerp`` per phase (``O + w (o - O)`` with ``w`` the new phase's share), so merging
    costs one pass over the output in its own dtype (fp32 math inside, one rounding). A phase on a
    row subset reads and writes back only those rows (in place).
    """

    def __init__(self, adapter, q, head_dim_v: int) -> None:
        self.a = adapter
        self.shape = tuple(int(s) for s in q.shape[:3]) + (head_dim_v,)
        self.like = q
        self.out = self.lse = None  # nothing merged yet

    def result(self):
        """(out, lse fp32); zeros / -inf when no phase ran."""
        if self.out is None:
            b, r, h, _ = self.shape
            self.out = self.a.cast(self.a.zeros(self.shape, self.like), self.like)
            self.lse = self.a.zeros((b, h, r), self.like) - math.inf
        return self.out, self.lse

    def _logaddexp(self, x, y):
        a = self.a
        m = a.maximum(x, y)
        m = a.where(m == -math.inf, a.zeros_like(m), m)  # two empty rows: shift by 0, not -inf
        return m + a.log(a.exp(x - m) + a.exp(y - m))

    def _merged(self, old_out, old_lse, out, lse):
        a = self.a
        new_lse = self._logaddexp(old_lse, lse)
        shift = a.where(new_lse == -math.inf, a.zeros_like(new_lse), new_lse)
        share = a.exp(lse - shift)  # the new phase's share of every row; 0 for an empty row
        return a.lerp(old_out, out, a.cast(a.lse_to_rows(share), out)), new_lse

    def add(self, out, lse, rows=None) -> None:
        """Merge a phase's ``(out [B, n, H, Dv], lse [B, H, n])`` of the local rows ``rows``
        (:class:`RowMap`; None = every row)."""
        a = self.a
        if rows is None:
            if self.out is None:  # first phase: taken as is
                self.out, self.lse = out, lse
            else:
                self.out, self.lse = self._merged(self.out, self.lse, out, lse)
            return
        if self.out is None:  # first phase: the other rows have seen nothing yet
            self.result()
            new_out, new_lse = out, lse
        else:
            new_out, new_lse = self._merged(take_rows(a, self.out, rows, 1),
                                            take_rows(a, self.lse, rows, 2), out, lse)
        self.out = put_rows(a, self.out, rows, 1, a.cast(new_out, self.out))
        self.lse = put_rows(a, self.lse, rows, 2, new_lse)

    def add_sink(self, sink) -> None:
        a = self.a
        self.result()
        s = a.sink_like_lse(sink, self.lse)  # [1, H, 1] fp32
        new_lse = self._logaddexp(self.lse, s + a.zeros_like(self.lse))
        keep = a.exp(self.lse - new_lse)  # the sink takes the rest of the denominator
        self.out = self.out * a.cast(a.lse_to_rows(keep), self.out)
        self.lse = new_lse


def cp_backward(adapter, plan: ContextParallelPlan, masks: RankMasks, phase_idx: PhaseIndices,
                maps: ShardMaps, state: CPState, dout, q, k, v, out, lse, learnable_sink, *,
                softmax_scale: float, backend: Optional[str], deterministic: Optional[bool],
                reserved_sms: int = 0, retire: bool = False, fuse_kv: bool = False):
    """Returns ``(dq, dk, dv, dsink)``; dk/dv are summed over every rank's use of the local keys.
    ``reserved_sms`` or ``retire`` goes to every phase that runs while a reduce-scatter is in
    flight (the persistent backward would otherwise hold every SM until it ends). ``fuse_kv``:
    one reduce-scatter of dK and dV together per comm group (:func:`comm_fuse_kv`)."""
    cs = plan.chunk_size
    dq = None  # sum over phases

    def accumulate(total, part):  # in the tensors' dtype: one rounding per phase, one pass
        return part if total is None else total + part

    pending, dq_rows = [], []  # dq of phases on row subsets: (rows, dq_g), added last
    # Remote groups first: each reduce-scatter overlaps the phases computed after it.
    for g, (s0, s1) in enumerate(plan.comm_groups):
        if masks.remote_work[g] == 0:  # nothing to send, but the collective must still run
            rows = plan.world_size * (s1 - s0) * cs
            dk_g = adapter.zeros_rows_first(rows, k)
            dv_g = adapter.zeros_rows_first(rows, v)
        else:
            kg, vg = state.gathered[g]
            state.gathered[g] = None  # free this group's K/V as soon as its backward is queued
            rows = phase_idx.phase_rows(g)
            dout_g, q_g, out_g, lse_g = (dout, q, out, lse) if rows is None else (
                take_rows(adapter, dout, rows, 1), take_rows(adapter, q, rows, 1),
                take_rows(adapter, out, rows, 1), take_rows(adapter, lse, rows, 2))
            dq_g, dk_g, dv_g, _ = backend_ops.run_bwd(backend, dout_g, q_g, kg, vg, out_g, lse_g,
                                                      phase_idx.remote[g], None, None, causal=False,
                                                      softmax_scale=softmax_scale, deterministic=deterministic,
                                                      **_overlap(reserved_sms, retire, bool(pending)))
            if rows is None:
                dq = accumulate(dq, dq_g)
            else:  # only the phase's rows change: added into the full dq at the end
                dq_rows.append((rows, dq_g))
            dk_g, dv_g = adapter.rows_first(dk_g), adapter.rows_first(dv_g)
        pending.append(_collective_pair(adapter, adapter.reduce_scatter, dk_g, dv_g, fuse_kv))
    dk_local = dv_local = None
    if masks.local_work > 0:
        dq_l, dk_local, dv_local, _ = backend_ops.run_bwd(backend, dout, q, k, v, out, lse, phase_idx.local,
                                                          None, None, causal=masks.local_causal,
                                                          softmax_scale=softmax_scale,
                                                          deterministic=deterministic,
                                                          **_overlap(reserved_sms, retire, bool(pending)))
        dq = accumulate(dq, dq_l)
    for rows, dq_g in dq_rows:
        if dq is None:
            dq = adapter.cast(adapter.zeros(tuple(int(x) for x in q.shape), q), dq_g)
        dq = add_rows(adapter, dq, rows, 1, dq_g)

    def key_grad(which: int, local, like):
        """dK (which = 0) or dV (1) of the local rows: the reduce-scattered part of the
        communicated rows ([comm_len (+ 1 zero row), B, Hk, D] -> [B, R, Hk, D]) plus the local
        phase's; zeros when no row sees this rank's keys."""
        if pending:
            parts = [w[which].wait() for w in pending]
            if local is not None and maps.sent_rows is not None:  # only the sent rows change
                sent = take_rows(adapter, adapter.concat_rows(parts), maps.sent_positions, 0)
                return add_rows(adapter, local, maps.sent_rows, 1, adapter.batch_first(sent))
            pad = [adapter.zeros_rows_first(1, like)] if maps.uncommunicated else []
            sent = adapter.unpack_shard(adapter.concat_rows(parts + pad), maps.local_to_shard)
            return sent if local is None else local + sent
        return adapter.zeros(tuple(int(x) for x in like.shape), like) if local is None else local

    dk, dv = key_grad(0, dk_local, k), key_grad(1, dv_local, v)
    if dq is None:  # no phase had a visible pair: every local row is fully masked
        dq = adapter.zeros(tuple(int(s) for s in q.shape), q)
    dsink = None
    if learnable_sink is not None:
        dsink = adapter.sink_grad(learnable_sink, dout, out, lse)
    return adapter.cast(dq, q), adapter.cast(dk, k), adapter.cast(dv, v), dsink
