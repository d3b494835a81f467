"""The ``cute`` backend: CuTe DSL FlashMask kernels for Hopper (sm_90a), framework-free (DESIGN §4).

Tensors arrive through DLPack and the caller passes its CUDA stream; nothing here imports paddle or
torch. Importing this package is cheap: the DSL is imported only by the modules that need it.

- :func:`is_available` - may the ``cute`` backend run here (DSL importable, an SM 9.x device)?
- ``interface.flashmask_fwd`` / ``interface.flashmask_bwd`` - the host API the frontends call.
- ``cache`` - the JIT compile cache; ``compile_check`` - the CPU compile + SASS check.
- :func:`release_cached_memory` - give the scratch-memory pool's cached memory back.
"""
from __future__ import annotations

import functools
from typing import Optional

SUPPORTED_COMPUTE_MAJOR = 9


@functools.lru_cache(maxsize=None)
def device_capability(device: int) -> Optional[tuple[int, int]]:
    """(major, minor) of CUDA device ``device`` through the driver API, or None if there is none."""
    try:
        import cuda.bindings.driver as cu

        (err,) = cu.cuInit(0)
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
        err, count = cu.cuDeviceGetCount()
        if err != cu.CUresult.CUDA_SUCCESS or not 0 <= device < count:
            return None
        attr = cu.CUdevice_attribute
        err, major = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        err2, minor = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        if err != cu.CUresult.CUDA_SUCCESS or err2 != cu.CUresult.CUDA_SUCCESS:
            return None
        return int(major), int(minor)
    except Exception:  # no driver library, no device, no cuda-python: not available
        return None


@functools.lru_cache(maxsize=1)
def dsl_importable() -> bool:
    try:
        import cutlass.cute  # noqa: F401
    except Exception:
        return False
    return True


def device_count() -> int:
    try:
        import cuda.bindings.driver as cu

        (err,) = cu.cuInit(0)
        if err != cu.CUresult.CUDA_SUCCESS:
            return 0
        err, count = cu.cuDeviceGetCount()
        return int(count) if err == cu.CUresult.CUDA_SUCCESS else 0
    except Exception:
        return 0


def is_available(device: Optional[int] = None) -> bool:
    """True when the kernels can run: the CuTe DSL imports and a CUDA device of capability 9.x exists.

    ``device`` (a CUDA device ordinal) checks that device; ``None`` accepts any device. Uses the CUDA
    driver through cuda-python only, never torch/paddle, so the answer is the same for both
    frontends. The frontend must still check that the tensors live on such a device.
    """
    devices = range(device_count()) if device is None else [device]
    if not any((device_capability(d) or (0, 0))[0] == SUPPORTED_COMPUTE_MAJOR for d in devices):
        return False
    return dsl_importable()


def release_cached_memory() -> None:
    """Return the kernels' cached scratch memory to the driver (cf. ``torch.cuda.empty_cache``).

    Scratch buffers (dQ accumulators, tile summaries) come from a pool per device that keeps its
    reserved memory across synchronisations; env ``PADDLE_FLASHMASK_WORKSPACE_KEEP_BYTES`` caps it.
    """
    from .dlpack import release_cached_memory as release

    release()


__all__ = ["is_available", "release_cached_memory", "device_capability", "dsl_importable", "device_count"]
