"""Context-parallel FlashMask attention on ``torch.distributed`` (NCCL on GPU, gloo on CPU).

Typical step (every rank runs the same code; the plan is deterministic, so no rank broadcasts it)::

    plan, masks = prepare(indices, causal, group=group)          # numpy, host side
    q, k, v = (shard_sequence(x, plan, rank) for x in (q_g, k_g, v_g))  # or build them locally
    out = context_parallel_attention(q, k, v, plan, masks, group=group)
    # position ids of the local rows (e.g. for RoPE): torch.as_tensor(masks.rows)

``out`` holds the rows ``masks.rows`` of the single-device output; ``out.backward`` gives the local
rows' dq and the dK/dV of the local keys summed over every rank that attended to them.
"""
from __future__ import annotations

from typing import Any, Optional

from . import engine
from .planner import ContextParallelPlan, RankMasks


def _torch():
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("paddle_flashmask.distributed.torch_cp needs PyTorch: "
                          "pip install 'paddle_flashmask[torch]'") from exc
    return torch


class TorchAdapter:
    """Tensor ops and collectives of the engine for torch tensors."""

    # Use reduce_scatter where the backend has it (NCCL; gloo in recent torch); tests force False.
    prefer_native_reduce_scatter = True

    def __init__(self, group=None) -> None:
        torch = _torch()
        self.torch, self.dist = torch, torch.distributed
        self.group = group
        self.world_size = self.dist.get_world_size(group)
        self.rank = self.dist.get_rank(group)
        self._all_gather = getattr(self.dist, "all_gather_single", None) or self.dist.all_gather_into_tensor
        self._reduce_scatter = (getattr(self.dist, "reduce_scatter_single", None)
                                or self.dist.reduce_scatter_tensor)
        self.reduce_scatter_native = type(self).prefer_native_reduce_scatter

    # collectives -----------------------------------------------------------------------------------
    def all_gather(self, x) -> engine.PendingCollective:
        x = x.contiguous()
        out = x.new_empty((self.world_size * int(x.shape[0]),) + tuple(x.shape[1:]))
        work = self._all_gather(out, x, group=self.group, async_op=True)
        return engine.PendingCollective(work, out)

    def reduce_scatter(self, x) -> engine.PendingCollective:
        """Sum over ranks, keep this rank's slice of dim 0; all-reduce + slice if the backend lacks it."""
        x = x.contiguous()
        part = int(x.shape[0]) // self.world_size
        if self.reduce_scatter_native:
            out = x.new_empty((part,) + tuple(x.shape[1:]))
            try:
                work = self._reduce_scatter(out, x, group=self.group, async_op=True)
                return engine.PendingCollective(work, out)
            except (RuntimeError, NotImplementedError, ValueError):
                self.reduce_scatter_native = False  # e.g. an old gloo: fall back once and for all
        work = self.dist.all_reduce(x, group=self.group, async_op=True)
        lo = self.rank * part
        return engine.PendingCollective(work, lambda: x[lo:lo + part])

    # tensor ops ------------------------------------------------------------------------------------
    def rows(self, x, lo: int, hi: int):
        return x[lo:hi]

    def batch_first(self, x):  # [N, B, H, D] -> [B, N, H, D] (no copy when B == 1)
        return x.permute(1, 0, 2, 3).contiguous()

    def rows_first(self, x):  # [B, N, H, D] -> [N, B, H, D] (no copy when B == 1)
        return x.permute(1, 0, 2, 3).contiguous()

    def zeros_rows_first(self, rows: int, like):
        return like.new_zeros((rows, int(like.shape[0])) + tuple(like.shape[2:]))

    def concat_rows(self, parts):
        return parts[0] if len(parts) == 1 else self.torch.cat(parts, dim=0)

    def unpack_shard(self, shard, local_to_shard):
        """[shard_len, B, H, D] -> the local rows [B, R, H, D]."""
        if local_to_shard is not None:
            shard = shard.index_select(0, local_to_shard)
        return shard.permute(1, 0, 2, 3)

    def index_rows(self, x, index, dim: int):
        """The rows ``index`` (int64 device tensor) of dim ``dim`` (a copy)."""
        return x.index_select(dim, index)

    def put_rows(self, x, index, dim: int, src):
        """``x[..., index, ...] = src`` along ``dim``, in place; returns ``x``."""
        return x.index_copy_(dim, index, src)

    def add_rows(self, x, index, dim: int, src):
        """``x[..., index, ...] += src`` along ``dim`` (distinct indices), in place; returns ``x``."""
        return x.index_add_(dim, index, src)

    def narrow(self, x, dim: int, start: int, length: int):  # a view
        return x.narrow(dim, start, length)

    def concat(self, parts, dim: int):  # one new contiguous tensor
        return parts[0].contiguous() if len(parts) == 1 else self.torch.cat(parts, dim)

    def assign_slice(self, x, dim: int, start: int, src):  # in place, returns x
        x.narrow(dim, start, int(src.shape[dim])).copy_(src)
        return x

    def add_slice(self, x, dim: int, start: int, src):  # in place, returns x
        x.narrow(dim, start, int(src.shape[dim])).add_(src)
        return x

    def zeros(self, shape, like):
        return self.torch.zeros(tuple(shape), dtype=self.torch.float32, device=like.device)

    def zeros_like(self, x):
        return self.torch.zeros_like(x)

    def f32(self, x):
        return x.float()

    def cast(self, x, like):
        return x.to(like.dtype)

    def lerp(self, a, b, w):
        return self.torch.lerp(a, b, w)

    def exp(self, x):
        return self.torch.exp(x)

    def log(self, x):
        return self.torch.log(x)

    def maximum(self, a, b):
        return self.torch.maximum(a, b)

    def where(self, cond, a, b):
        return self.torch.where(cond, a, b)

    def lse_to_rows(self, w):  # [B, H, R] -> [B, R, H, 1]
        return w.permute(0, 2, 1).unsqueeze(-1)

    def sink_like_lse(self, sink, lse):
        return sink.float().reshape(1, -1, 1).to(lse.device)

    def sink_grad(self, sink, dout, out, lse):
        """dsink[h] = -sum_{b,i} exp(sink[h] - LSE[b,h,i]) * rowsum(dO * O)[b,i,h] (local rows)."""
        delta = (dout.float() * out.float()).sum(-1).permute(0, 2, 1)  # [B, H, R]
        share = self.torch.exp(self.sink_like_lse(sink, lse) - lse)
        return (-(share * delta).sum(dim=(0, 2))).to(sink.dtype)


_FUNCTION = None


def _function():
    global _FUNCTION
    if _FUNCTION is not None:
        return _FUNCTION
    torch = _torch()

    class ContextParallelFlashMask(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, sink, call):
            state = engine.CPState()
            out, lse = engine.cp_forward(call["adapter"], call["plan"], call["masks"], call["phase_idx"],
                                         call["maps"], q, k, v, sink, softmax_scale=call["scale"],
                                         backend=call["backend"], state=state,
                                         reserved_sms=call["comm_sms"], retire=call["comm_retire"],
                                         fuse_kv=call["comm_fuse_kv"])
            ctx.save_for_backward(q, k, v, out, lse, *([sink] if sink is not None else []))
            ctx.call, ctx.state = call, state
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, _dlse):
            q, k, v, out, lse, *rest = ctx.saved_tensors
            sink = rest[0] if rest else None
            call = ctx.call
            if ctx.state is None:  # the gathered K/V were released by the first backward
                raise RuntimeError("context_parallel_attention: backward through the same call twice "
                                   "(retain_graph) is not supported; run the forward again")
            dq, dk, dv, dsink = engine.cp_backward(
                call["adapter"], call["plan"], call["masks"], call["phase_idx"], call["maps"],
                ctx.state, dout.contiguous(), q, k, v, out, lse, sink, softmax_scale=call["scale"],
                backend=call["backend"], deterministic=call["deterministic"],
                reserved_sms=call["comm_sms"], retire=call["comm_retire"],
                fuse_kv=call["comm_fuse_kv"])
            ctx.state = None
            return dq, dk, dv, dsink, None

    _FUNCTION = ContextParallelFlashMask
    return _FUNCTION


def prepare(startend_row_indices: Any, causal: bool, group=None, rank: Optional[int] = None,
            window_size: Any = None, **plan_kwargs) -> tuple[ContextParallelPlan, RankMasks]:
    """Plan the split over the ranks of ``group`` and rewrite the indices for this rank.

    ``startend_row_indices``: the *global* ``[B, Hm, S, C]`` indices (numpy or tensor; ``None`` for
    plain attention, then pass ``seqlen=``). ``window_size`` (with ``startend_row_indices=None`` and
    ``seqlen=``) is the frontends' sliding-window shorthand. ``plan_kwargs`` go to
    :func:`plan_context_parallel`.
    """
    torch = _torch()
    world = torch.distributed.get_world_size(group)
    rank = torch.distributed.get_rank(group) if rank is None else rank
    return engine.plan_for_rank(startend_row_indices, causal, world, rank, window_size, plan_kwargs)



def context_parallel_attention(query, key, value, plan: ContextParallelPlan, masks, *,
                               group=None, softmax_scale: Optional[float] = None, learnable_sink=None,
                               return_softmax_lse: bool = False, backend: Optional[str] = None,
                               deterministic: Optional[bool] = None,
                               comm_sms: Optional[int] = None,
                               comm_retire: Optional[bool] = None,
                               comm_fuse_kv: Optional[bool] = None):
    """FlashMask attention of this rank's query rows against the keys of all ranks.

    ``query`` ``[B, R, H, D]``, ``key``/``value`` ``[B, R, Hk, D(v)]``: the local rows ``masks.rows``
    (see :func:`shard_sequence`). ``masks``: this rank's :class:`RankMasks` from :func:`prepare`, or
    better their :func:`device_masks` (uploaded once, reused by every layer). Returns the local rows
    of the single-device output (and the LSE ``[B, H, R]`` with ``return_softmax_lse``).
    ``backend`` / ``deterministic`` as in ``paddle_flashmask.torch.flashmask_attention``.
    ``comm_sms``: SMs the forward (backward) leaves free while K/V gathers (dK/dV reduce-scatters)
    are in flight (default: env
    ``PADDLE_FLASHMASK_CP_COMM_SMS``, else 0); see :func:`engine.comm_sms`. ``comm_retire``: those
    phases run one CTA per work tile instead of the persistent grid, so the collectives get SMs
    as CTAs end (default: env ``PADDLE_FLASHMASK_CP_COMM_RETIRE=1``, else False); see
    :func:`engine.comm_retire`. ``comm_fuse_kv``: K and V (dK and dV) travel in one all-gather
    (reduce-scatter) per comm group instead of two, so each direction is one NCCL kernel
    launched before the phase it overlaps (default: env ``PADDLE_FLASHMASK_CP_FUSE_KV=1``, else
    False); see :func:`engine.comm_fuse_kv`.
    ``learnable_sink``'s gradient is this rank's share: sum it over the context-parallel ranks like
    any replicated parameter (DDP over the data x context group does).
    """
    scale = engine.check_local_inputs(query, key, value, learnable_sink, softmax_scale)
    adapter = TorchAdapter(group)
    if not isinstance(masks, engine.DeviceMasks):
        masks = device_masks(plan, masks, query.device, group)
    call = {"adapter": adapter, "plan": plan, "masks": masks.masks, "phase_idx": masks.phase_idx,
            "maps": masks.maps, "scale": scale, "backend": backend, "deterministic": deterministic,
            **engine.comm_options(comm_sms, comm_retire, comm_fuse_kv)}
    out, lse = _function().apply(query, key, value, learnable_sink, call)
    return (out, lse) if return_softmax_lse else out


def device_masks(plan: ContextParallelPlan, masks: RankMasks, device, group=None) -> engine.DeviceMasks:
    """Upload a rank's masks once per step; pass the result as ``masks`` to every layer's call."""
    torch = _torch()
    return engine.device_masks(
        plan, masks, torch.distributed.get_rank(group),
        lambda a: torch.as_tensor(a, dtype=torch.int32, device=device),
        lambda a: torch.as_tensor(a, dtype=torch.int64, device=device))


def shard_sequence(x, plan: ContextParallelPlan, rank: int, dim: int = 1):
    """The rows of ``rank`` (ascending global order) of a full-sequence tensor."""
    torch = _torch()
    return x.index_select(dim, torch.as_tensor(plan.local_rows(rank), device=x.device))


def gather_sequence(x, plan: ContextParallelPlan, group=None, dim: int = 1):
    """Inverse of :func:`shard_sequence` on every rank (all-gather; no gradient). For tests/eval."""
    torch = _torch()
    world = plan.world_size
    x = x.movedim(dim, 0).contiguous()
    longest = max(plan.local_rows(r).size for r in range(world))
    padded = x.new_zeros((longest,) + tuple(x.shape[1:]))
    padded[: x.shape[0]] = x
    parts = [torch.empty_like(padded) for _ in range(world)]
    torch.distributed.all_gather(parts, padded, group=group)
    full = x.new_empty((plan.seqlen,) + tuple(x.shape[1:]))
    for r in range(world):
        rows = plan.local_rows(r)
        full[torch.as_tensor(rows, device=x.device)] = parts[r][: rows.size]
    return full.movedim(0, dim)
