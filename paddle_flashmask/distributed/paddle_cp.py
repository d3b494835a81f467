"""Context-parallel FlashMask attention on ``paddle.distributed`` (NCCL on GPU, gloo on CPU).

Same algorithm and planner as :mod:`paddle_flashmask.distributed.torch_cp` (the math lives in
``engine.py``); launch with ``python -m paddle.distributed.launch --nproc_per_node N train.py``::

    plan, masks = prepare(indices, causal)                   # numpy, host side
    q, k, v = (shard_sequence(x, plan, rank) for x in (q_g, k_g, v_g))
    out = context_parallel_attention(q, k, v, plan, masks)

Paddle's gloo process group has no ``reduce_scatter``: there the dK/dV reduction falls back to an
``all_reduce`` and each rank keeps its slice (same result, ``world_size`` times the traffic; NCCL uses
the real reduce-scatter).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import engine
from .planner import ContextParallelPlan, RankMasks


def _paddle():
    try:
        import paddle
        import paddle.distributed  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("paddle_flashmask.distributed.paddle_cp needs PaddlePaddle: "
                          "pip install 'paddle_flashmask[paddle]'") from exc
    return paddle


class PaddleAdapter:
    """Tensor ops and collectives of the engine for Paddle tensors."""

    prefer_native_reduce_scatter = True

    def __init__(self, group=None) -> None:
        paddle = _paddle()
        self.paddle, self.dist = paddle, paddle.distributed
        self.group = group
        self.world_size = self.dist.get_world_size(group) if group is not None else self.dist.get_world_size()
        self.rank = group.rank if group is not None else self.dist.get_rank()
        self.reduce_scatter_native = type(self).prefer_native_reduce_scatter

    # collectives -----------------------------------------------------------------------------------
    def all_gather(self, x) -> engine.PendingCollective:
        x = x.contiguous()
        out = self.paddle.empty([self.world_size * int(x.shape[0])] + list(x.shape[1:]), dtype=x.dtype)
        task = self.dist.stream.all_gather(out, x, group=self.group, sync_op=False)
        return engine.PendingCollective(task, out)

    def reduce_scatter(self, x) -> engine.PendingCollective:
        x = x.contiguous()
        part = int(x.shape[0]) // self.world_size
        if self.reduce_scatter_native:
            out = self.paddle.empty([part] + list(x.shape[1:]), dtype=x.dtype)
            try:
                task = self.dist.stream.reduce_scatter(out, x, group=self.group, sync_op=False)
                return engine.PendingCollective(task, out)
            except (NotImplementedError, RuntimeError, ValueError):
                self.reduce_scatter_native = False  # gloo: all-reduce + slice from now on
        task = self.dist.all_reduce(x, group=self.group, sync_op=False)
        lo = self.rank * part
        return engine.PendingCollective(task, lambda: x[lo:lo + part])

    # tensor ops ------------------------------------------------------------------------------------
    def rows(self, x, lo: int, hi: int):
        return x[lo:hi]

    def batch_first(self, x):
        return self.paddle.transpose(x, [1, 0, 2, 3]).contiguous()

    def rows_first(self, x):
        return self.paddle.transpose(x, [1, 0, 2, 3]).contiguous()

    def zeros_rows_first(self, rows: int, like):
        return self.paddle.zeros([rows, int(like.shape[0])] + list(like.shape[2:]), dtype=like.dtype)

    def concat_rows(self, parts):
        return parts[0] if len(parts) == 1 else self.paddle.concat(parts, axis=0)

    def unpack_shard(self, shard, local_to_shard):
        if local_to_shard is not None:
            shard = self.paddle.index_select(shard, local_to_shard, axis=0)
        return self.paddle.transpose(shard, [1, 0, 2, 3])

    def index_rows(self, x, index, dim: int):
        return self.paddle.index_select(x, index, axis=dim)

    def put_rows(self, x, index, dim: int, src):  # in place (set_value), returns x
        x[(slice(None),) * dim + (index,)] = src
        return x

    def add_rows(self, x, index, dim: int, src):  # in place, distinct indices, returns x
        return x.index_add_(index, dim, src)

    def narrow(self, x, dim: int, start: int, length: int):
        return self.paddle.slice(x, axes=[dim], starts=[start], ends=[start + length])

    def concat(self, parts, dim: int):
        return parts[0].contiguous() if len(parts) == 1 else self.paddle.concat(parts, axis=dim)

    def assign_slice(self, x, dim: int, start: int, src):  # in place (set_value), returns x
        x[(slice(None),) * dim + (slice(start, start + int(src.shape[dim])),)] = src
        return x

    def add_slice(self, x, dim: int, start: int, src):  # in place (set_value), returns x
        key = (slice(None),) * dim + (slice(start, start + int(src.shape[dim])),)
        x[key] = x[key] + src
        return x

    def zeros(self, shape, like):
        return self.paddle.zeros(list(shape), dtype="float32").to(like.place)

    def zeros_like(self, x):
        return self.paddle.zeros_like(x)

    def f32(self, x):
        return x.astype("float32")

    def cast(self, x, like):
        return x.astype(like.dtype)

    def lerp(self, a, b, w):
        return self.paddle.lerp(a, b, w)

    def exp(self, x):
        return self.paddle.exp(x)

    def log(self, x):
        return self.paddle.log(x)

    def maximum(self, a, b):
        return self.paddle.maximum(a, b)

    def where(self, cond, a, b):
        return self.paddle.where(cond, a, b)

    def lse_to_rows(self, w):  # [B, H, R] -> [B, R, H, 1]
        return self.paddle.transpose(w, [0, 2, 1]).unsqueeze(-1)

    def sink_like_lse(self, sink, lse):
        return sink.astype("float32").reshape([1, -1, 1])

    def sink_grad(self, sink, dout, out, lse):
        p = self.paddle
        delta = p.transpose((dout.astype("float32") * out.astype("float32")).sum(-1), [0, 2, 1])
        share = p.exp(self.sink_like_lse(sink, lse) - lse)
        return (-(share * delta).sum(axis=[0, 2])).astype(sink.dtype)


_PYLAYER = None


def _pylayer():
    global _PYLAYER
    if _PYLAYER is not None:
        return _PYLAYER
    paddle = _paddle()

    class ContextParallelFlashMask(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx, q, k, v, sink, call):
            state = engine.CPState()
            out, lse = engine.cp_forward(call["adapter"], call["plan"], call["masks"], call["phase_idx"],
                                         call["maps"], q, k, v, sink, softmax_scale=call["scale"],
                                         backend=call["backend"], state=state,
                                         reserved_sms=call["comm_sms"], retire=call["comm_retire"],
                                         fuse_kv=call["comm_fuse_kv"])
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.call, ctx.state, ctx.sink = call, state, sink
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, _dlse):
            q, k, v, out, lse = ctx.saved_tensor()
            call, sink = ctx.call, ctx.sink
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
            # PyLayer: one gradient per Tensor input (the sink only when it was given).
            return (dq, dk, dv) if sink is None else (dq, dk, dv, dsink)

    _PYLAYER = ContextParallelFlashMask
    return _PYLAYER


def prepare(startend_row_indices: Any, causal: bool, group=None, rank: Optional[int] = None,
            window_size: Any = None, **plan_kwargs) -> tuple[ContextParallelPlan, RankMasks]:
    """Plan over the ranks of ``group`` (default: all) and rewrite the indices for this rank.

    ``window_size`` (with ``startend_row_indices=None`` and ``seqlen=``): the sliding-window shorthand.
    """
    paddle = _paddle()
    world = group.nranks if group is not None else paddle.distributed.get_world_size()
    if rank is None:
        rank = group.rank if group is not None else paddle.distributed.get_rank()
    return engine.plan_for_rank(startend_row_indices, causal, world, rank, window_size, plan_kwargs)



def context_parallel_attention(query, key, value, plan: ContextParallelPlan, masks, *,
                               group=None, softmax_scale: Optional[float] = None, learnable_sink=None,
                               return_softmax_lse: bool = False, backend: Optional[str] = None,
                               deterministic: Optional[bool] = None,
                               comm_sms: Optional[int] = None,
                               comm_retire: Optional[bool] = None,
                               comm_fuse_kv: Optional[bool] = None):
    """Paddle twin of :func:`paddle_flashmask.distributed.torch_cp.context_parallel_attention`."""
    scale = engine.check_local_inputs(query, key, value, learnable_sink, softmax_scale)
    adapter = PaddleAdapter(group)
    if not isinstance(masks, engine.DeviceMasks):
        masks = device_masks(plan, masks, query.place, group)
    call = {"adapter": adapter, "plan": plan, "masks": masks.masks, "phase_idx": masks.phase_idx,
            "maps": masks.maps, "scale": scale, "backend": backend, "deterministic": deterministic,
            **engine.comm_options(comm_sms, comm_retire, comm_fuse_kv)}
    out, lse = _pylayer().apply(query, key, value, learnable_sink, call)
    return (out, lse) if return_softmax_lse else out


def device_masks(plan: ContextParallelPlan, masks: RankMasks, place=None, group=None) -> engine.DeviceMasks:
    """Upload a rank's masks once per step; pass the result as ``masks`` to every layer's call."""
    paddle = _paddle()
    rank = group.rank if group is not None else paddle.distributed.get_rank()
    return engine.device_masks(plan, masks, rank,
                               lambda a: paddle.to_tensor(a, dtype="int32", place=place),
                               lambda a: paddle.to_tensor(a, dtype="int64", place=place))


def shard_sequence(x, plan: ContextParallelPlan, rank: int, axis: int = 1):
    """The rows of ``rank`` (ascending global order) of a full-sequence tensor."""
    paddle = _paddle()
    return paddle.index_select(x, paddle.to_tensor(plan.local_rows(rank), place=x.place), axis=axis)


def gather_sequence(x, plan: ContextParallelPlan, group=None, axis: int = 1):
    """Inverse of :func:`shard_sequence` on every rank (all-gather; no gradient). For tests/eval."""
    paddle = _paddle()
    world = plan.world_size
    perm = [axis] + [i for i in range(len(x.shape)) if i != axis]
    x = paddle.transpose(x.detach(), perm)
    longest = max(plan.local_rows(r).size for r in range(world))
    pad = paddle.zeros([longest - int(x.shape[0])] + list(x.shape[1:]), dtype=x.dtype)
    parts: list = []
    paddle.distributed.all_gather(parts, paddle.concat([x, pad], axis=0), group=group)
    order = np.concatenate([plan.local_rows(r) for r in range(world)])
    stacked = paddle.concat([parts[r][: plan.local_rows(r).size] for r in range(world)], axis=0)
    full = paddle.index_select(stacked, paddle.to_tensor(np.argsort(order), place=x.place), axis=0)
    inverse = [perm.index(i) for i in range(len(perm))]
    return paddle.transpose(full, inverse)
