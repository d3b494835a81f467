"""Host-side argument handling shared by the compiled forward and backward variants.

The kernels take raw global-memory pointers plus runtime extents (one compile serves every shape),
so each call turns its tensors into pointers and checks that the call matches the variant.
"""
from __future__ import annotations

import functools
import os
import threading
from typing import Any, NamedTuple, Optional

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.base_dsl.typing import Numeric


def env_flag(name: str, default: str = "0") -> bool:
    """A kernel-variant switch from the environment: off for "", "0", "false", "False"."""
    return os.environ.get(name, default) not in ("", "0", "false", "False")


# the process environment as os.environ stores it (bytes on POSIX): reading many switches per call
# through os.environ.get costs a key encoding and a mapping lookup each
_ENVIRON_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None


@functools.lru_cache(maxsize=None)
def _encoded(names: tuple[str, ...]) -> tuple:
    return tuple(os.fsencode(name) for name in names)


def env_snapshot(names: tuple[str, ...]) -> tuple:
    """The values of the env switches ``names`` (None where unset), as a cache key: what decides
    a kernel variant, read on every call because a switch may flip between calls."""
    if _ENVIRON_DATA is None:
        return tuple(os.environ.get(name) for name in names)
    return tuple(map(_ENVIRON_DATA.get, _encoded(names)))


def env_choice(name: str, choices: tuple[str, ...]) -> str:
    """A valued kernel-variant switch from the environment: one of ``choices`` ("" = unset);
    anything else is an error that names the variable."""
    text = os.environ.get(name, "").strip()
    if text and text not in choices:
        raise ValueError(f"{name}: expected one of {list(choices)} or unset, found {text!r}")
    return text


def device_address(tensor: Any) -> int:
    """Device address of a tensor description: ``data_ptr`` (attribute or method) or ``ptr``."""
    address = getattr(tensor, "data_ptr", None)
    if address is None:
        address = getattr(tensor, "ptr")
    return int(address() if callable(address) else address)


class PtrArg(NamedTuple):
    """A global-memory pointer argument of a launch, before it becomes a DSL pointer: building
    the DSL object (ctypes storage) costs more than the rest of a repeated launch, so
    :class:`ReusableLaunch` builds one per remembered launch and rewrites its address in place."""
    address: int
    dtype: Any
    align: int


def gmem_ptr(tensor: Any, dtype, align: int = 16) -> Optional[PtrArg]:
    """The pointer argument of ``tensor`` (None stays None: an absent optional input)."""
    if tensor is None:
        return None
    return PtrArg(device_address(tensor), dtype, align)


@functools.lru_cache(maxsize=4096)
def int32_arg(value: int) -> cutlass.Int32:
    """A launch's Int32 scalar, one object per value: building DSL numerics costs microseconds
    each, and a call repeats the same extents every time (the objects are never mutated)."""
    return cutlass.Int32(value)


@functools.lru_cache(maxsize=256)
def float32_arg(value: float) -> cutlass.Float32:
    """A launch's Float32 scalar, one object per value (see :func:`int32_arg`)."""
    return cutlass.Float32(value)


def dsl_arg(arg: Any) -> Any:
    """``arg`` as the DSL takes it: a :class:`PtrArg` becomes a cute global-memory pointer."""
    if type(arg) is PtrArg:
        return cute.runtime.make_ptr(arg.dtype, arg.address, cute.AddressSpace.gmem,
                                     assumed_align=arg.align)
    return arg


def dsl_args(args: tuple) -> tuple:
    return tuple(dsl_arg(arg) for arg in args)


def launch(compiled: Any, *args: Any) -> Any:
    """Call a compiled kernel with launch arguments that may hold :class:`PtrArg` pointers: a
    :class:`ReusableLaunch` takes them as they are, anything else (a DSL function compiled
    outside the JIT cache, a test double) gets DSL pointers."""
    if type(compiled) is ReusableLaunch:
        return compiled(*args)
    return compiled(*dsl_args(args))


def check_variant_call(q: Any, k: Any, v: Any, startend_row_indices: Any, learnable_sink: Any, *,
                       head_dim: int, head_dim_v: int, mask_columns: Optional[int],
                       has_sink: bool) -> tuple[int, int, int, int, int, int]:
    """Check a call against the compiled variant; return ``(B, Sq, H, Sk, Hk, Hm)``.

    The host API validated the tensors themselves; this guards the variant choice (head dims,
    mask presence, sink presence), which would otherwise read memory with the wrong layout.
    """
    b, sq, h, d = (int(x) for x in q.shape)
    _, sk, hk, _ = (int(x) for x in k.shape)
    if d != head_dim or int(v.shape[3]) != head_dim_v:
        raise ValueError(f"q/v head dims: expected ({head_dim}, {head_dim_v}) for this compiled "
                         f"variant, found ({d}, {int(v.shape[3])})")
    if (startend_row_indices is None) != (mask_columns is None):
        raise ValueError(f"startend_row_indices: presence must match the variant's mask columns "
                         f"{mask_columns}, found {'None' if startend_row_indices is None else 'a tensor'}")
    if (learnable_sink is None) == has_sink:
        raise ValueError(f"learnable_sink: presence must match the variant's has_sink={has_sink}")
    hm = int(startend_row_indices.shape[1]) if startend_row_indices is not None else 1
    return b, sq, h, sk, hk, hm


REUSE_LAUNCH_ENV = "PADDLE_FLASHMASK_REUSE_LAUNCH"


class ReusableLaunch:
    """A compiled CuTe function whose repeated calls reuse their packed C arguments.

    On every call the DSL turns each argument into its C form again (pointer objects, adapter
    lookup, ctypes storage): on the H200 host most of a short call's host time, which context
    parallelism and short kernels wait on. The packed form is a list of addresses of per-argument
    storage, and a pointer argument's storage holds just its address. So calls that differ only in
    their pointers' addresses (a training step's fresh outputs and gradients) share one packed
    form: the first builds it, the later ones write their addresses into the remembered pointer
    objects and launch. Everything else -- element types, alignments, which optional pointers are
    None, the scalar values, the stream -- is part of the key. The launch is synchronous for its
    arguments (the driver copies them), so the next call may rewrite them at once; a lock keeps
    two threads from interleaving a rewrite and a launch.

    Anything this does not recognise -- a callable without the DSL's execution interface (a test
    double), an argument of another kind, a DSL without these internals -- takes the DSL's own
    call path, unchanged; so does every call with env ``PADDLE_FLASHMASK_REUSE_LAUNCH=0``.
    """

    MAX_REMEMBERED = 64  # distinct argument forms per kernel variant (per layer/phase shapes)

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        execution_args = getattr(compiled, "execution_args", None)
        meta = getattr(execution_args, "_meta", None)
        self.reuses = (env_flag(REUSE_LAUNCH_ENV, default="1") and meta is not None
                       and hasattr(execution_args, "generate_execution_args")
                       and callable(getattr(compiled, "run_compiled_program", None))
                       and getattr(compiled, "_pyir_spec", None) is None)
        self._arg_count = getattr(meta, "arg_count", 0)
        self._extra_args = getattr(compiled, "total_added_arguments", 0)
        self._remembered: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        key = self._key(args) if self.reuses else None
        if key is None:
            return self.compiled(*dsl_args(args))
        with self._lock:
            entry = self._remembered.get(key)
            if entry is None:
                if max(0, len(args) - self._arg_count) != self._extra_args:
                    return self.compiled(*dsl_args(args))  # the DSL reports the count mismatch
                dsl = dsl_args(args)
                exe_args, adapted = self.compiled.execution_args.generate_execution_args(dsl, {})
                pointers = tuple((i, arg) for i, arg in enumerate(dsl) if type(arg) is _POINTER)
                # the packed form points into the storage of the argument objects and of what
                # the DSL adapted them to (the stream's handle): all kept with it
                entry = (exe_args, pointers, dsl, adapted)
                if len(self._remembered) >= self.MAX_REMEMBERED:
                    self._remembered = {}
                self._remembered[key] = entry
            else:
                for i, pointer in entry[1]:  # the packed form points at these pointers' storage
                    address = _address_of(args[i])
                    if pointer._pointer != address:
                        pointer._pointer = address
                        pointer._desc.value = address
            return self.compiled.run_compiled_program(entry[0])

    @staticmethod
    def _key(args: tuple) -> Optional[tuple]:
        """What decides the packed form apart from pointer addresses, or None when an argument
        is not recognised."""
        key = []
        for arg in args:
            kind = type(arg)
            if arg is None:
                key.append(None)
            elif kind is PtrArg:
                key.append((arg.dtype, arg.align, cute.AddressSpace.gmem))
            elif kind is _POINTER:
                key.append((arg._dtype, arg._assumed_align, arg._addr_space))
            elif kind is cuda.CUstream:
                key.append(("stream", int(arg)))
            elif isinstance(arg, Numeric) and isinstance(arg.value, (int, float)):
                key.append((kind, arg.value))
            else:
                return None
        return tuple(key)


def _address_of(arg: Any) -> int:
    return arg.address if type(arg) is PtrArg else int(arg._pointer)


# the concrete class make_ptr returns (dsl_arg's pointers), whose fields the key reads
_POINTER = type(cute.runtime.make_ptr(cutlass.Int32, 0, cute.AddressSpace.gmem))
