"""Argument checking shared by the Paddle and PyTorch frontends (framework-agnostic).

Every error names the argument, what was expected and what was found (DESIGN §1, BRIEF rules).
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional

SUPPORTED_DTYPES = ("float16", "bfloat16", "float32")


class Dims(NamedTuple):
    batch: int
    seqlen_q: int
    seqlen_k: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_v: int


def dtype_name(x: Any) -> str:
    """'float16' for torch.float16 / paddle.float16 / numpy float16."""
    return str(x.dtype).split(".")[-1]


def _shape(x: Any) -> list[int]:
    return [int(s) for s in x.shape]


def check_inputs(query: Any, key: Any, value: Any, learnable_sink: Any = None) -> Dims:
    """Validate q/k/v (and the sink) and return the problem dimensions."""
    for arg, x, layout in (("query", query, "[batch, seqlen_q, num_heads, head_dim]"),
                           ("key", key, "[batch, seqlen_k, num_kv_heads, head_dim]"),
                           ("value", value, "[batch, seqlen_k, num_kv_heads, head_dim_v]")):
        if len(x.shape) != 4:
            raise ValueError(f"{arg}: expected a 4-D tensor {layout}, found shape {_shape(x)}")
    qd = dtype_name(query)
    if qd not in SUPPORTED_DTYPES:
        raise ValueError(f"query: expected dtype in {list(SUPPORTED_DTYPES)}, found {qd}")
    for arg, x in (("key", key), ("value", value)):
        if dtype_name(x) != qd:
            raise ValueError(f"{arg}: expected dtype {qd} (same as query), found {dtype_name(x)}")
    b, sq, h, d = _shape(query)
    kb, sk, hk, kd = _shape(key)
    vb, vsk, vhk, dv = _shape(value)
    if kb != b:
        raise ValueError(f"key: expected batch size {b} (dim 0, as query), found {kb}")
    if vb != b:
        raise ValueError(f"value: expected batch size {b} (dim 0, as query), found {vb}")
    if vsk != sk:
        raise ValueError(f"value: expected seqlen_k {sk} (dim 1, as key), found {vsk}")
    if vhk != hk:
        raise ValueError(f"value: expected num_kv_heads {hk} (dim 2, as key), found {vhk}")
    if kd != d:
        raise ValueError(f"key: expected head_dim {d} (dim 3, as query), found {kd}")
    if min(b, sq, sk, h, hk, d, dv) <= 0:
        raise ValueError(f"query/key/value: expected non-empty dimensions, found query {_shape(query)}, "
                         f"key {_shape(key)}, value {_shape(value)}")
    if h % hk != 0:
        raise ValueError(f"key: expected num_kv_heads dividing num_heads={h} (GQA/MQA), found {hk}")
    if learnable_sink is not None:
        if _shape(learnable_sink) != [h]:
            raise ValueError(f"learnable_sink: expected shape [num_heads] = [{h}], "
                             f"found {_shape(learnable_sink)}")
        sd = dtype_name(learnable_sink)
        if sd not in SUPPORTED_DTYPES:
            raise ValueError(f"learnable_sink: expected dtype in {list(SUPPORTED_DTYPES)}, found {sd}")
    return Dims(b, sq, sk, h, hk, d, dv)


def resolve_softmax_scale(softmax_scale: Optional[float], head_dim: int) -> float:
    if softmax_scale is None:
        return head_dim ** -0.5
    try:
        scale = float(softmax_scale)
    except (TypeError, ValueError):
        raise ValueError(f"softmax_scale: expected a float or None, found {softmax_scale!r}") from None
    if not math.isfinite(scale):
        raise ValueError(f"softmax_scale: expected a finite float, found {softmax_scale!r}")
    return scale


def window_bounds(window_size: Any) -> tuple[int, int]:
    """``int w`` -> (w, w); ``(left, right)`` -> itself. Ints >= 0, or -1 for "unbounded on that side"."""
    if isinstance(window_size, bool):
        raise ValueError(f"window_size: expected an int or a (left, right) pair, found {window_size!r}")
    if isinstance(window_size, int):
        pair = (window_size, window_size)
    elif isinstance(window_size, (tuple, list)) and len(window_size) == 2:
        pair = tuple(window_size)
    else:
        raise ValueError(f"window_size: expected an int or a (left, right) pair, found {window_size!r}")
    for side, w in zip(("left", "right"), pair):
        if isinstance(w, bool) or not isinstance(w, int) or w < -1:
            raise ValueError(f"window_size: expected an int >= 0 (or -1 = unbounded) {side} size, "
                             f"found {w!r}")
    return int(pair[0]), int(pair[1])


def check_unsupported(*, dropout: float, training: bool, return_seed_offset: bool,
                      fixed_seed_offset: Any, block_mask: Any) -> None:
    """Reject the Paddle arguments this package does not implement (never silently ignore them).

    ``training=False`` is accepted: in Paddle it only turns dropout off, and we have no dropout.
    ``dropout > 0`` is accepted with ``training=False`` for the same reason (Paddle's ``is_test``).
    """
    try:
        p = float(dropout)
    except (TypeError, ValueError):
        raise ValueError(f"dropout: expected a float in [0, 1), found {dropout!r}") from None
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: expected a float in [0, 1), found {dropout!r}")
    if p > 0.0 and training:
        raise NotImplementedError(
            f"dropout: expected 0.0 (attention dropout is not implemented by paddle_flashmask; "
            f"modern LLM training uses none), found {dropout!r}")
    if return_seed_offset:
        raise NotImplementedError(
            "return_seed_offset: expected False (there is no dropout RNG state to return), found True")
    if fixed_seed_offset is not None:
        raise NotImplementedError(
            "fixed_seed_offset: expected None (it only seeds dropout, which is not implemented), "
            f"found {type(fixed_seed_offset).__name__}")
    if block_mask is not None:
        raise NotImplementedError(
            "block_mask: expected None (128x128 block masks are not implemented; express the mask "
            f"through startend_row_indices), found {type(block_mask).__name__}")


def window_indices(seqlen_q: int, seqlen_k: int, left: int, right: int, causal: bool, batch: int):
    """numpy int32 ``[batch, 1, Sk, C]`` for the ``window_size`` shorthand (built by mask_builders)."""
    import numpy as np

    from ..mask_builders import window_mask
    mask = window_mask(seqlen_q, seqlen_k, left, right, causal)
    idx = getattr(mask, "startend_row_indices", mask[0] if isinstance(mask, tuple) else mask)
    idx = np.asarray(idx, dtype=np.int32)
    return np.ascontiguousarray(np.broadcast_to(idx, (batch,) + idx.shape[1:]))


def prepare_indices(startend_row_indices: Any, *, causal: bool, window_size: Any, dims: Dims,
                    validate_indices: bool, to_tensor, is_tensor, check_values: bool = True) -> Any:
    """The indices the kernels get: window shorthand built, numpy converted, contract validated.

    ``to_tensor(np_array)`` makes a framework tensor on the query's device. Shape/dtype/form
    checks always run (they are free); the value range check ([0, Sq], needs a device->host copy)
    runs when ``validate_indices and check_values``.
    """
    import numpy as np

    from .. import semantics
    if window_size is not None:
        if startend_row_indices is not None:
            raise ValueError("window_size: expected None when startend_row_indices is given "
                             f"(the window is shorthand for building them), found {window_size!r}")
        left, right = window_bounds(window_size)
        startend_row_indices = to_tensor(window_indices(dims.seqlen_q, dims.seqlen_k, left, right,
                                                         causal, dims.batch))
    if startend_row_indices is None:
        return None
    if isinstance(startend_row_indices, np.ndarray) or isinstance(startend_row_indices, (list, tuple)):
        arr = np.asarray(startend_row_indices)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"startend_row_indices: expected dtype int32, found {arr.dtype}")
        if arr.size and (arr.min() < np.iinfo(np.int32).min or arr.max() > np.iinfo(np.int32).max):
            raise ValueError(f"startend_row_indices: values must fit int32, found min {arr.min()}, "
                             f"max {arr.max()}")
        startend_row_indices = to_tensor(np.ascontiguousarray(arr.astype(np.int32)))
    elif not is_tensor(startend_row_indices):
        raise ValueError("startend_row_indices: expected a tensor of the query's framework or a numpy "
                         f"array, found {type(startend_row_indices).__module__}."
                         f"{type(startend_row_indices).__name__}")
    semantics.validate(startend_row_indices, causal, dims.seqlen_q, dims.seqlen_k,
                       num_heads=dims.num_heads, num_kv_heads=dims.num_kv_heads,
                       batch_size=dims.batch, check_values=False)
    if validate_indices and check_values:
        check_values_once(startend_row_indices, dims.seqlen_q)
    return startend_row_indices


def inplace_version(x: Any) -> Optional[int]:
    """The framework's in-place modification counter (torch ``_version``, paddle
    ``_inplace_version()``), or None when the object has none."""
    version = getattr(x, "_version", None)
    if isinstance(version, int):
        return version
    getter = getattr(x, "_inplace_version", None)
    return int(getter()) if callable(getter) else None


def _min_max(x: Any) -> tuple[int, int]:
    """Minimum and maximum of a tensor with one device->host copy of two numbers."""
    module = type(x).__module__
    if module.startswith("torch"):
        import torch
        lo, hi = torch.stack([x.min(), x.max()]).tolist()
    elif module.startswith("paddle"):
        import paddle
        lo, hi = paddle.stack([x.min(), x.max()]).numpy().tolist()
    else:
        import numpy as np
        arr = np.asarray(x)
        lo, hi = arr.min(), arr.max()
    return int(lo), int(hi)


class TensorMemo:
    """Values remembered per tensor object and content.

    An entry is found again only for the same live object (held by a weak reference), the same
    in-place version (:func:`inplace_version`) and the same ``stamp`` (whatever else the value
    depends on). It is dropped, with ``on_drop(value)``, when the object is collected, when a newer
    entry takes its key, or when the memo is full. Objects without a version counter or that
    cannot be weakly referenced are never remembered.
    """

    def __init__(self, max_entries: int, on_drop: Optional[Callable[[Any], None]] = None) -> None:
        self._entries: dict[tuple, tuple] = {}  # (id(obj), *key) -> (weakref, version, stamp, value)
        self._max_entries = max_entries
        self._on_drop = on_drop

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, obj: Any, key: tuple = (), stamp: tuple = ()) -> Any:
        """The value stored for ``obj`` under ``key``, or None."""
        version = inplace_version(obj)
        entry = self._entries.get((id(obj), *key))
        if version is None or entry is None or entry[0]() is not obj \
                or entry[1:3] != (version, stamp):
            return None
        return entry[3]

    def put(self, obj: Any, key: tuple, value: Any, stamp: tuple = ()) -> bool:
        """Remember ``value`` (not None) for ``obj``; False when ``obj`` cannot be remembered."""
        import weakref

        version = inplace_version(obj)
        if version is None:
            return False
        full_key = (id(obj), *key)
        try:
            ref = weakref.ref(obj, lambda _ref, k=full_key: self._drop(k))
        except TypeError:
            return False
        self._drop(full_key)  # a stale entry: an older version, or a reused id
        if len(self._entries) >= self._max_entries:
            for old in list(self._entries):
                self._drop(old)
        self._entries[full_key] = (ref, version, stamp, value)
        return True

    def _drop(self, full_key: tuple) -> None:
        entry = self._entries.pop(full_key, None)
        if entry is not None and self._on_drop is not None:
            self._on_drop(entry[3])


# index tensors whose values passed the contract's value check, with the seqlen_q they passed for
_values_checked = TensorMemo(1024)


def check_values_once(indices: Any, seqlen_q: int) -> None:
    """The contract's value check (``[0, seqlen_q]``), done once per index tensor and content.

    The check needs a device->host copy, which stalls the CUDA queue. A model calls attention with
    the same index tensor in every layer, so the result is remembered per tensor object and
    in-place version (:class:`TensorMemo`): the 2nd..Nth layer (and a benchmark loop) pay nothing,
    while a new tensor or an in-place write is checked again. Objects without a version counter
    are always checked.
    """
    from .. import semantics
    if 0 in tuple(int(s) for s in indices.shape):
        return
    if _values_checked.get(indices, stamp=(seqlen_q,)) is not None:
        return
    semantics.check_value_range(*_min_max(indices), seqlen_q)
    _values_checked.put(indices, (), True, stamp=(seqlen_q,))
