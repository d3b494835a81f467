"""Backend choice per call and the thin glue to the CuTe DSL kernels (DESIGN §2).

Backends:
  * ``cute``      — SM90 CuTe DSL kernels (``paddle_flashmask.ops.cute``), bf16/fp16 on a CUDA
                    device of compute capability 9.x, when ``ops.cute.is_available()``.
  * ``reference`` — exact tiled attention in framework ops (``ops/reference.py``), anywhere.

Choice: the ``backend=`` argument, else env ``PADDLE_FLASHMASK_BACKEND`` (auto|reference|cute),
else ``auto`` (cute when possible, otherwise reference). Forcing ``cute`` where it cannot run raises
``RuntimeError`` saying why. The backend that ran last is :func:`last_backend` and is logged at DEBUG
level on the ``paddle_flashmask`` logger.

Deterministic backward: the ``deterministic=`` argument, else env ``PADDLE_FLASHMASK_DETERMINISTIC``,
else Paddle's ``FLAGS_cudnn_deterministic`` (read only on CUDA builds with GPU tensors: CPU builds
raise on it) or torch's ``torch.are_deterministic_algorithms_enabled()``.
"""
from __future__ import annotations

import logging
import os
import warnings
from typing import Any, Optional

from . import reference

logger = logging.getLogger("paddle_flashmask")

BACKENDS = ("auto", "reference", "cute")
BACKEND_ENV = "PADDLE_FLASHMASK_BACKEND"
DETERMINISTIC_ENV = "PADDLE_FLASHMASK_DETERMINISTIC"
# (head_dim, head_dim_v) pairs the SM90 kernels are built for (docs/kernels.md).
CUTE_HEAD_DIMS = {(64, 64), (96, 96), (128, 128), (192, 128), (256, 256)}
CUTE_DTYPES = ("float16", "bfloat16")

_last_backend: Optional[str] = None
_last_deterministic: Optional[bool] = None
_warned_fallback = False


def last_backend() -> Optional[str]:
    """Name of the backend that ran the most recent forward or backward ('cute' / 'reference')."""
    return _last_backend


def last_deterministic() -> Optional[bool]:
    """The deterministic setting resolved by the most recent backward (None before any backward)."""
    return _last_deterministic


def _record(name: str, what: str) -> None:
    global _last_backend
    _last_backend = name
    logger.debug("flashmask %s ran on backend %r", what, name)


# --------------------------------------------------------------------------------------------------
# Framework glue for the cute path: the same methods for torch and paddle.
# --------------------------------------------------------------------------------------------------

class _TorchGlue:
    def __init__(self) -> None:
        import torch
        self.fw = torch

    def on_cuda(self, x) -> bool:
        return bool(x.is_cuda)

    def capability(self, x) -> tuple[int, int]:
        return tuple(self.fw.cuda.get_device_capability(x.device))

    def device_index(self, x) -> int:
        return int(x.device.index or 0)

    def empty(self, shape, dtype: Optional[str], like):
        dt = like.dtype if dtype is None else getattr(self.fw, dtype)
        return self.fw.empty(tuple(shape), dtype=dt, device=like.device)

    def contiguous(self, x):
        return x.contiguous()

    def stream(self, x) -> int:
        return int(self.fw.cuda.current_stream(x.device).cuda_stream)

    def cast(self, x, dtype: str):
        return x.to(getattr(self.fw, dtype))


class _PaddleGlue:
    def __init__(self) -> None:
        import paddle
        self.fw = paddle

    def on_cuda(self, x) -> bool:
        return bool(x.place.is_gpu_place())

    def capability(self, x) -> tuple[int, int]:
        return tuple(self.fw.device.cuda.get_device_capability(x.place.gpu_device_id()))

    def device_index(self, x) -> int:
        return int(x.place.gpu_device_id())

    def empty(self, shape, dtype: Optional[str], like):
        return self.fw.empty(list(shape), dtype=like.dtype if dtype is None else dtype, device=like.place)

    def contiguous(self, x):
        return x.contiguous() if hasattr(x, "contiguous") else x

    def stream(self, x) -> int:
        s = self.fw.device.current_stream()
        base = getattr(s, "stream_base", s)
        return int(getattr(base, "cuda_stream", getattr(base, "raw_stream", 0)))

    def cast(self, x, dtype: str):
        return x.astype(dtype)


_GLUES: dict[str, Any] = {}


def glue_for(tensor: Any) -> Any:
    kind = "torch" if type(tensor).__module__.startswith("torch") else "paddle"
    if kind not in _GLUES:
        _GLUES[kind] = _TorchGlue() if kind == "torch" else _PaddleGlue()
    return _GLUES[kind]


def framework_of(tensor: Any) -> str:
    return "torch" if type(tensor).__module__.startswith("torch") else "paddle"


# --------------------------------------------------------------------------------------------------
# Choice
# --------------------------------------------------------------------------------------------------

def _cute_module():
    """``paddle_flashmask.ops.cute`` or None; the kernels are optional (gpu extra)."""
    try:
        from . import cute
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        logger.debug("paddle_flashmask.ops.cute not importable: %s", exc)
        return None
    return cute


def cute_unavailable_reason(query: Any, head_dim: int, head_dim_v: int) -> Optional[str]:
    """None if the cute kernels can run this call, else the reason they cannot."""
    glue = glue_for(query)
    if not glue.on_cuda(query):
        return "tensors are not on a CUDA device"
    # the rest depends on the device, dtype and head dims only: found once per process (the
    # driver queries behind it cost more host time than a short kernel's launch)
    key = (type(glue), glue.device_index(query), str(query.dtype), head_dim, head_dim_v)
    if key not in _device_reasons:
        _device_reasons[key] = _device_unavailable_reason(glue, query, head_dim, head_dim_v)
    return _device_reasons[key]


_device_reasons: dict[tuple, Optional[str]] = {}


def _device_unavailable_reason(glue: Any, query: Any, head_dim: int, head_dim_v: int
                               ) -> Optional[str]:
    cute = _cute_module()
    if cute is None or not hasattr(cute, "is_available"):
        return "paddle_flashmask.ops.cute is not installed (pip install 'paddle_flashmask[gpu]')"
    major, _ = glue.capability(query)
    if major != 9:
        return f"the kernels target SM90 (compute capability 9.x); the tensors' device has {major}.x"
    try:
        available = bool(cute.is_available(glue.device_index(query)))
    except Exception as exc:  # noqa: BLE001
        return f"paddle_flashmask.ops.cute.is_available() failed: {exc}"
    if not available:
        return "the CuTe DSL is not importable (ops.cute.is_available() is False)"
    dtype = str(query.dtype).split(".")[-1]
    if dtype not in CUTE_DTYPES:
        return f"the kernels take {list(CUTE_DTYPES)}; query dtype is {dtype}"
    head_dims = CUTE_HEAD_DIMS
    try:  # the kernels' own table when it is importable
        from .cute import interface
        head_dims = set(interface.SUPPORTED_HEAD_DIMS.items())
    except Exception:  # noqa: BLE001
        pass
    if (head_dim, head_dim_v) not in head_dims:
        return (f"the kernels support (head_dim, head_dim_v) in {sorted(head_dims)}; "
                f"found ({head_dim}, {head_dim_v})")
    return None


def requested_backend(backend: Optional[str]) -> str:
    name = backend if backend is not None else os.environ.get(BACKEND_ENV, "") or "auto"
    name = str(name).strip().lower()
    if name not in BACKENDS:
        source = "backend" if backend is not None else BACKEND_ENV
        raise ValueError(f"{source}: expected one of {list(BACKENDS)}, found {name!r}")
    return name


def choose_backend(backend: Optional[str], query: Any, head_dim: int, head_dim_v: int) -> str:
    """Resolve 'auto' | 'reference' | 'cute' to the backend that will run this call (no side effects
    besides one warning the first time a CUDA call falls back to the reference)."""
    global _warned_fallback
    name = requested_backend(backend)
    if name == "reference":
        return name
    reason = cute_unavailable_reason(query, head_dim, head_dim_v)
    if name == "cute":
        if reason is not None:
            raise RuntimeError(f"backend='cute' was requested but cannot run this call: {reason}")
        return "cute"
    if reason is None:
        return "cute"
    if glue_for(query).on_cuda(query) and not _warned_fallback:
        _warned_fallback = True
        warnings.warn(f"paddle_flashmask: using the slow exact reference backend on CUDA because {reason}",
                      RuntimeWarning, stacklevel=3)
    return "reference"


def _parse_bool_env(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}: expected one of 1/0/true/false/yes/no/on/off, found {value!r}")


def check_deterministic_request(deterministic: Optional[bool]) -> None:
    """Reject a malformed env switch at call time (the backward may run much later)."""
    if deterministic is None:
        env = os.environ.get(DETERMINISTIC_ENV, "")
        if env.strip():
            _parse_bool_env(DETERMINISTIC_ENV, env)


def resolve_deterministic(deterministic: Optional[bool], query: Any) -> bool:
    if deterministic is not None:
        return bool(deterministic)
    env = os.environ.get(DETERMINISTIC_ENV, "")
    if env.strip():
        return _parse_bool_env(DETERMINISTIC_ENV, env)
    if framework_of(query) == "torch":
        import torch
        return bool(torch.are_deterministic_algorithms_enabled())
    import paddle
    # FLAGS_cudnn_deterministic does not exist on CPU builds (get_flags raises there).
    if paddle.is_compiled_with_cuda() and glue_for(query).on_cuda(query):
        return bool(paddle.get_flags(["FLAGS_cudnn_deterministic"])["FLAGS_cudnn_deterministic"])
    return False


# --------------------------------------------------------------------------------------------------
# Running a backend
# --------------------------------------------------------------------------------------------------

def _grid_options(reserved_sms: int, retire: bool) -> dict:
    """The cute host API's grid arguments, only those that differ from its defaults."""
    return {**({"reserved_sms": reserved_sms} if reserved_sms else {}),
            **({"retire": True} if retire else {})}


def run_fwd(requested: Optional[str], q, k, v, startend_row_indices, learnable_sink, *, causal: bool,
            softmax_scale: float, reserved_sms: int = 0, retire: bool = False):
    """Forward on the backend chosen for ``requested`` (see :func:`choose_backend`).

    ``reserved_sms``: SMs the cute forward's persistent grid leaves to concurrent kernels on other
    streams (context parallelism's collectives); ``retire``: one CTA per work tile instead (see
    ``interface.flashmask_fwd``); both ignored by the reference backend.

    Returns ``(out, lse, backend_name)``. The choice happens here, on real tensors, so a traced
    caller (``torch.compile``) stays backend-agnostic.
    """
    backend = choose_backend(requested, q, int(q.shape[3]), int(v.shape[3]))
    _record(backend, "forward")
    if backend == "reference":
        out, lse = reference.flashmask_fwd(q, k, v, startend_row_indices, causal=causal,
                                           softmax_scale=softmax_scale, learnable_sink=learnable_sink)
        return out, lse, backend
    from .cute import interface
    glue = glue_for(q)
    q, k, v = glue.contiguous(q), glue.contiguous(k), glue.contiguous(v)
    b, sq, h, _ = (int(s) for s in q.shape)
    out = glue.empty((b, sq, h, int(v.shape[3])), None, q)
    lse = glue.empty((b, h, sq), "float32", q)
    idx = None if startend_row_indices is None else glue.contiguous(startend_row_indices)
    sink = None if learnable_sink is None else glue.contiguous(glue.cast(learnable_sink, "float32"))
    interface.flashmask_fwd(q, k, v, out, lse, idx, causal=causal, softmax_scale=softmax_scale,
                            learnable_sink=sink, stream=glue.stream(q),
                            **_grid_options(reserved_sms, retire))
    return out, lse, backend


def run_bwd(requested: Optional[str], dout, q, k, v, out, lse, startend_row_indices, learnable_sink,
            dlse, *, causal: bool, softmax_scale: float, deterministic: Optional[bool],
            reserved_sms: int = 0, retire: bool = False):
    """Backward on the backend chosen for ``requested``; returns ``(dq, dk, dv, dsink or None)``.

    ``dlse`` is the gradient reaching the returned LSE (None when the LSE was not returned);
    ``deterministic`` None means "resolve from env / framework flags" (:func:`resolve_deterministic`).
    The reference backend is deterministic whatever is asked. ``reserved_sms`` / ``retire``: as
    in :func:`run_fwd` (the cute backward's persistent grid).
    """
    global _last_deterministic
    backend = choose_backend(requested, q, int(q.shape[3]), int(v.shape[3]))
    _last_deterministic = resolve_deterministic(deterministic, q)
    _record(backend, "backward")
    if backend == "reference":
        return reference.flashmask_bwd(dout, q, k, v, out, lse, startend_row_indices, causal=causal,
                                       softmax_scale=softmax_scale, learnable_sink=learnable_sink,
                                       dlse=dlse)
    if dlse is not None and bool((dlse != 0).any()):
        raise NotImplementedError(
            "softmax_lse gradient: the cute backend's backward takes no gradient through the returned "
            "LSE; found a non-zero one. Use backend='reference' or stop the gradient of the LSE.")
    from .cute import interface
    glue = glue_for(q)
    dout = glue.contiguous(dout)
    dq, dk, dv = glue.empty(q.shape, None, q), glue.empty(k.shape, None, k), glue.empty(v.shape, None, v)
    sink = dsink = None
    if learnable_sink is not None:
        sink = glue.contiguous(glue.cast(learnable_sink, "float32"))
        dsink = glue.empty((int(learnable_sink.shape[0]),), "float32", q)
    idx = None if startend_row_indices is None else glue.contiguous(startend_row_indices)
    interface.flashmask_bwd(glue.contiguous(q), glue.contiguous(k), glue.contiguous(v),
                            glue.contiguous(out), dout, lse, dq, dk, dv, idx, causal=causal,
                            softmax_scale=softmax_scale, learnable_sink=sink, dsink=dsink,
                            deterministic=_last_deterministic,
                            stream=glue.stream(q), **_grid_options(reserved_sms, retire))
    if dsink is not None:
        dsink = glue.cast(dsink, str(learnable_sink.dtype).split(".")[-1])
    return dq, dk, dv, dsink
