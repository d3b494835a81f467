"""DLPack glue for the framework-free kernels: inspect caller tensors, allocate scratch buffers.

The frontends hand ``flashmask_fwd`` / ``flashmask_bwd`` objects supporting ``__dlpack__`` (torch or
paddle CUDA tensors). This module reads their DLPack capsules (:func:`inspect`: shape,
strides, dtype, device, address) and makes CuTe tensors of them (:func:`runtime_tensor`). Kernels also need scratch memory the frontends do not pass
(the per-key-tile summary, fp32 dQ accumulators...): :class:`DeviceBuffer` allocates it with the
CUDA driver's stream-ordered allocator on the caller's stream, from a pool that keeps its memory
(:func:`workspace_pool`), and exposes it through DLPack too, so every kernel argument is made the
same way.
"""
from __future__ import annotations

import ctypes
import os
import struct
from typing import Any, NamedTuple, Optional, Sequence

import cuda.bindings.driver as cu

KDL_CUDA = 2
# DLPack (code, bits) for the element types the kernels use.
_DL_TYPES = {"int32": (0, 32), "float32": (2, 32), "float16": (2, 16), "bfloat16": (4, 16)}
ITEM_SIZE = {name: bits // 8 for name, (_, bits) in _DL_TYPES.items()}  # bytes per element


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor)))]

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_DTYPE_NAMES = {code_bits: name for name, code_bits in _DL_TYPES.items()}
_DLTENSOR = struct.Struct("<Q ii i BBH Q Q Q")  # the DLTensor header, 64-bit little endian


def check(result: Any, what: str) -> Any:
    """Unpack a cuda-python ``(CUresult, *values)`` tuple, raising on an error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")
    return values[0] if len(values) == 1 else tuple(values)


# Scratch memory comes from one stream-ordered pool per device that keeps what it has reserved, like
# the frameworks' caching allocators. The device's default pool (release threshold 0) hands its
# memory back to the driver at every host synchronisation, so the first backward after each one
# mapped its whole fp32 dQ accumulator again (hundreds of MB at long S).
KEEP_BYTES_ENV = "PADDLE_FLASHMASK_WORKSPACE_KEEP_BYTES"
_POOLS: dict[int, Any] = {}


def workspace_keep_bytes() -> int:
    """Bytes the workspace pool keeps reserved across synchronisations (env
    ``PADDLE_FLASHMASK_WORKSPACE_KEEP_BYTES``; unset: everything it has reserved)."""
    text = os.environ.get(KEEP_BYTES_ENV, "").strip()
    if not text:
        return 2 ** 64 - 1
    if not text.isdigit():
        raise ValueError(f"{KEEP_BYTES_ENV}: expected a non-negative integer number of bytes or "
                         f"unset, found {text!r}")
    return int(text)


def workspace_pool(device: int) -> Any:
    """The stream-ordered memory pool of device ``device`` that every :class:`DeviceBuffer` uses."""
    pool = _POOLS.get(device)
    if pool is None:
        props = cu.CUmemPoolProps()
        props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = int(device)
        pool = check(cu.cuMemPoolCreate(props), "cuMemPoolCreate")
        check(cu.cuMemPoolSetAttribute(pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                       cu.cuuint64_t(workspace_keep_bytes())), "cuMemPoolSetAttribute")
        _POOLS[device] = pool
    return pool


def release_cached_memory() -> None:
    """Give the workspace pools' unused reserved memory back to the driver (cf.
    ``torch.cuda.empty_cache``); memory of buffers still in use, or freed on a stream that has not
    reached the free yet, stays."""
    for pool in _POOLS.values():
        check(cu.cuMemPoolTrimTo(pool, 0), "cuMemPoolTrimTo")


class DeviceBuffer:
    """A compact CUDA array owned by this object, allocated and freed in stream order.

    ``__dlpack__`` exports it (the capsule has no destructor: this object owns the memory), so keep
    the buffer referenced until the work that uses it is enqueued. ``release()`` (or garbage
    collection) frees it on the same stream, after that work.
    """

    def __init__(self, shape: Sequence[int], dtype: str, device: int, stream: int,
                 zero: bool = False) -> None:
        if dtype not in _DL_TYPES:
            raise ValueError(f"dtype: expected one of {sorted(_DL_TYPES)}, found {dtype!r}")
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.device = int(device)
        self.stream = cu.CUstream(stream)
        self.nbytes = ITEM_SIZE[dtype] * _product(self.shape)
        self.ptr = int(check(cu.cuMemAllocFromPoolAsync(max(self.nbytes, 1), workspace_pool(device),
                                                        self.stream), "cuMemAllocFromPoolAsync"))
        if zero and self.nbytes:
            check(cu.cuMemsetD8Async(self.ptr, 0, self.nbytes, self.stream), "cuMemsetD8Async")
        ndim = len(self.shape)
        self._shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        strides, running = [], 1
        for extent in reversed(self.shape):
            strides.append(running)
            running *= extent
        self._strides = (ctypes.c_int64 * max(ndim, 1))(*reversed(strides))
        code, bits = _DL_TYPES[dtype]
        self._managed = _DLManagedTensor()
        self._managed.dl_tensor = _DLTensor(
            ctypes.c_void_p(self.ptr), _DLDevice(KDL_CUDA, self.device), ndim,
            _DLDataType(code, bits, 1), self._shape, self._strides, 0)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device)

    @property
    def data_ptr(self) -> int:
        return self.ptr

    def __dlpack__(self, stream: Any = None) -> Any:
        if self.ptr is None:
            raise RuntimeError("DeviceBuffer was released")
        return _PyCapsule_New(ctypes.addressof(self._managed), b"dltensor", None)

    def release(self) -> None:
        if self.ptr is not None:
            cu.cuMemFreeAsync(self.ptr, self.stream)
            self.ptr = None

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


def _product(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


class TensorInfo(NamedTuple):
    """What the host API checks about one argument, and what the kernels' launchers read
    (``shape`` and the raw device address ``data_ptr``). A named tuple: every call builds one
    per tensor argument, and a frozen dataclass costs several times more to build."""
    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    device: tuple[int, int]
    data_ptr: int

    @property
    def contiguous(self) -> bool:
        if 0 in self.shape:  # an empty tensor has no layout to speak of
            return True
        running = 1
        for extent, stride in zip(reversed(self.shape), reversed(self.stride)):
            if extent != 1 and stride != running:
                return False
            running *= extent
        return True


# cutlass element type name -> the dtype names used in messages and configs
_ELEMENT_NAMES = {"BFloat16": "bfloat16", "Float16": "float16", "Float32": "float32",
                  "Int32": "int32"}


# --------------------------------------------------------------------------------------------------
# The tensor-type contract between compile time and run time
# --------------------------------------------------------------------------------------------------
# A compiled CuTe function reads each tensor argument as a descriptor holding exactly the DYNAMIC
# extents and strides of the type it was compiled for. Nothing checks at call time that the
# runtime tensor has the same static/dynamic pattern: a mismatch silently reads garbage extents
# (measured on the H200: a grid computed from such an extent fails with cudaErrorInvalidValue).
# So every kernel of this package is compiled with ``fake_tensor`` arguments and called with
# ``runtime_tensor`` arguments, which produce the same type: every extent dynamic (Int32), every
# stride dynamic (Int64) except the innermost, which is the static 1 (row-major, innermost
# contiguous). Compile-time sizes (head dims, C) come from the kernel config, never from a type.

def runtime_tensor(obj: Any, assumed_align: Optional[int] = None) -> Any:
    """CuTe tensor of a DLPack object, typed as :func:`fake_tensor` of the same rank."""
    import cutlass.cute as cute

    tensor = cute.runtime.from_dlpack(exportable(obj), assumed_align=assumed_align)
    ndim = len(tensor.shape)
    return tensor.mark_layout_dynamic(leading_dim=ndim - 1) if ndim > 0 else tensor


def fake_tensor(dtype: Any, ndim: int, assumed_align: Optional[int] = None) -> Any:
    """Compile-time stand-in for a row-major tensor of rank ``ndim`` (see the contract above)."""
    import cutlass.cute as cute

    shape = tuple(cute.sym_int32() for _ in range(ndim))
    stride = tuple(cute.sym_int64() for _ in range(ndim - 1)) + (1,)
    return cute.runtime.make_fake_tensor(dtype, shape, stride, assumed_align=assumed_align)


def exportable(obj: Any) -> Any:
    """``obj`` itself, or a detached view sharing its memory when it requires grad (torch refuses
    to export such a tensor through DLPack; the kernels only read or overwrite the data)."""
    if getattr(obj, "requires_grad", False) is True and hasattr(obj, "detach"):
        return obj.detach()
    return obj


def inspect(obj: Any, name: str) -> TensorInfo:
    """Shape, strides, dtype, device and address of a DLPack object, read from its capsule.

    Reading the capsule does not consume it (its name stays "dltensor"), so when it is released the
    producer's deleter runs as usual. ~10x cheaper than building a CuTe tensor, which the kernels
    taking raw pointers do not need.
    """
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"{name}: expected an object supporting __dlpack__ (a CUDA tensor), "
                        f"found {type(obj).__name__}")
    info = _inspect_by_attributes(obj, name)
    if info is not None:
        return info
    obj = exportable(obj)
    try:
        capsule = obj.__dlpack__(stream=-1)  # -1: the producer must not synchronise streams
    except Exception:  # no stream keyword, or a host tensor refusing one (paddle)
        capsule = obj.__dlpack__()
    # DLTensor header: data, device (type, id), ndim, dtype (code, bits, lanes), shape*, strides*,
    # byte_offset - unpacked in one go (field-by-field ctypes access costs ~4x more).
    address = _PyCapsule_GetPointer(capsule, b"dltensor")
    data, dev_type, dev_id, ndim, code, bits, lanes, shape_p, strides_p, offset = _DLTENSOR.unpack(
        ctypes.string_at(address, _DLTENSOR.size))
    shape = struct.unpack(f"<{ndim}q", ctypes.string_at(shape_p, 8 * ndim)) if ndim else ()
    if strides_p:
        stride = struct.unpack(f"<{ndim}q", ctypes.string_at(strides_p, 8 * ndim)) if ndim else ()
    else:  # NULL strides mean compact row-major
        running, rev = 1, []
        for extent in reversed(shape):
            rev.append(running)
            running *= extent
        stride = tuple(reversed(rev))
    dtype = _DTYPE_NAMES.get((code, bits), f"dlpack{(code, bits)}") if lanes == 1 else "vector"
    device = (dev_type, dev_id)
    data_ptr = (data or 0) + offset
    return TensorInfo(name, shape, stride, dtype, device, data_ptr)


# torch-style attribute names -> the dtype names used here (the framework is never imported)
_ATTR_DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float32": "float32",
                "torch.int32": "int32"}


def _inspect_by_attributes(obj: Any, name: str) -> Optional[TensorInfo]:
    """The same facts as the DLPack capsule gives, read from torch-style attributes
    (``shape``, ``stride()``, ``dtype``, ``device.type/index``, ``data_ptr()``, ``storage_offset``
    folded into ``data_ptr``): about 10x cheaper than exporting a capsule on every call. None when
    the object does not look like that (paddle tensors, other DLPack producers)."""
    dtype = _ATTR_DTYPES.get(str(getattr(obj, "dtype", "")))
    device = getattr(obj, "device", None)
    if dtype is None or getattr(device, "type", None) != "cuda" or not callable(
            getattr(obj, "stride", None)) or not callable(getattr(obj, "data_ptr", None)):
        return None
    return TensorInfo(name, tuple(obj.shape), tuple(obj.stride()), dtype,
                      (KDL_CUDA, int(device.index or 0)), int(obj.data_ptr()))
