"""Host time of one ``ops.cute.interface`` call, measured on a CPU machine (a diagnostic).

The kernels are really compiled (``CUTE_DSL_ARCH=sm_90a``) and every host step of a call runs as
on the GPU machine: validation, variant choice, the JIT cache, argument packing, the launch
plan. Only the CUDA driver is stubbed: launches, stream-ordered allocations and memsets return
at once, and the tensors are host tensors that describe themselves as CUDA ones. So this counts
the Python side of a call, which is what decides whether a short kernel waits on the host
(bench/profile_call.py measures the same on the H200, with the driver).

    CUTE_DSL_ARCH=sm_90a python3 bench/host_time.py [--masks causal,causal_document] [--cprofile]

Prints one JSON line per mask: median microseconds per call of the forward and the backward,
each with the same output tensors every call (``same``) and with new ones (``fresh``, as the
frontends allocate them; the addresses then rotate over ``--rotate`` buffers, as a caching
allocator's do).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
import types
from typing import Any, Callable

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from mask_zoo import make_zoo, opt_in_names  # noqa: E402


class HostCudaTensor:
    """A host tensor that reports itself as a CUDA tensor of device 0 through torch-style
    attributes (the host API's fast inspection path) and DLPack (its kernels' summary inputs)."""

    _DEVICE = types.SimpleNamespace(type="cuda", index=0)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.shape = tensor.shape
        self.dtype = tensor.dtype
        self.device = self._DEVICE

    @property
    def _version(self) -> int:  # the in-place counter the index-derived caches key on
        return self.tensor._version

    def stride(self) -> tuple:
        return self.tensor.stride()

    def data_ptr(self) -> int:
        return self.tensor.data_ptr()

    def __dlpack_device__(self) -> tuple:
        return (2, 0)

    def __dlpack__(self, stream: Any = None) -> Any:
        from paddle_flashmask.ops.cute import dlpack

        capsule = self.tensor.__dlpack__()
        address = dlpack._PyCapsule_GetPointer(capsule, b"dltensor")
        dlpack._DLManagedTensor.from_address(address).dl_tensor.device.device_type = 2
        return capsule


def stub_driver() -> None:
    """Replace what reaches the CUDA driver by no-ops (for the rest of the process)."""
    from paddle_flashmask.ops.cute import dlpack, interface, tile_scheduler

    class HostBuffer:  # a DeviceBuffer without the driver: a fake address, host memory on export
        _next_address = [1 << 40]
        _free: dict = {}  # (shape, dtype) -> released addresses, reused as a memory pool does

        def __init__(self, shape, dtype, device, stream, zero=False):
            self.shape, self.dtype, self.device = tuple(int(s) for s in shape), dtype, int(device)
            free = HostBuffer._free.setdefault((self.shape, dtype), [])
            if free:
                self.ptr = free.pop()
            else:
                self.ptr = HostBuffer._next_address[0]
                HostBuffer._next_address[0] += 1 << 20
            self.data_ptr = self.ptr
            self._tensor = None

        def __dlpack__(self, stream=None):  # only the index-derived kernels' inputs get here
            if self._tensor is None:
                self._tensor = torch.zeros(self.shape, dtype=getattr(torch, self.dtype))
            return HostCudaTensor(self._tensor).__dlpack__()

        def __dlpack_device__(self):
            return (2, int(self.device))

        def release(self):
            if self.ptr is not None:
                HostBuffer._free[(self.shape, self.dtype)].append(self.ptr)
                self.ptr = None

    interface.DeviceBuffer = HostBuffer
    dlpack.DeviceBuffer = HostBuffer
    interface._check_current_device = lambda device: None
    interface.num_sms = lambda device: 132
    tile_scheduler.reset_counter = lambda counter, stream, words=1: None
    # a launch packs its arguments as on the GPU machine, then returns instead of entering the
    # compiled host function (which calls the driver)
    from cutlass.base_dsl.jit_executor import JitCompiledFunction

    import ctypes

    def packed_only(self, exe_args):  # JitExecutor's packing of the C argument array
        with self._executor_lock:
            packed = (ctypes.c_void_p * len(exe_args))()
        for i, arg in enumerate(exe_args):
            packed[i] = arg if type(arg) is ctypes.c_void_p else ctypes.c_void_p(arg).value
        return 0
    JitCompiledFunction.run_compiled_program = packed_only


def per_call_us(fn: Callable[[], None], calls: int, rounds: int = 5) -> float:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=8192)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--masks", default="causal,causal_document,sft_documents")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rotate", type=int, default=3, help="output buffers the fresh case cycles")
    p.add_argument("--cprofile", action="store_true")
    args = p.parse_args()

    stub_driver()
    from paddle_flashmask.ops.cute import interface

    b, s, h, hk, d = args.batch, args.seqlen, args.heads, args.kv_heads, 128
    cuda = HostCudaTensor

    def bf16(*shape):
        return cuda(torch.zeros(*shape, dtype=torch.bfloat16))

    q, do, out = bf16(b, s, h, d), bf16(b, s, h, d), bf16(b, s, h, d)
    k, v = bf16(b, s, hk, d), bf16(b, s, hk, d)
    lse = cuda(torch.zeros(b, h, s, dtype=torch.float32))
    grads = [bf16(b, s, h, d), bf16(b, s, hk, d), bf16(b, s, hk, d)]
    rotating = [(bf16(b, s, h, d), cuda(torch.zeros(b, h, s, dtype=torch.float32)),
                 [bf16(b, s, h, d), bf16(b, s, hk, d), bf16(b, s, hk, d)])
                for _ in range(args.rotate)]
    zoo = make_zoo(b, s, device="cpu", extra=opt_in_names(args.masks.split(",")))
    for name in args.masks.split(","):
        mask = zoo[name]
        idx = None if mask.indices is None else cuda(torch.from_numpy(mask.indices))
        turn = [0]

        def fwd(o=out, l=lse):
            interface.flashmask_fwd(q, k, v, o, l, idx, causal=mask.causal, softmax_scale=0.1,
                                    stream=0)

        def bwd(g=grads):
            interface.flashmask_bwd(q, k, v, out, do, lse, *g, idx, causal=mask.causal,
                                    softmax_scale=0.1, stream=0)

        def fresh(step):
            def call():
                turn[0] = (turn[0] + 1) % len(rotating)
                o, l, g = rotating[turn[0]]
                step(o, l) if step is fwd else step(g)
            return call

        fwd(), bwd()  # compile (or load) the variants
        report = {"fwd_same": per_call_us(fwd, args.calls),
                  "fwd_fresh": per_call_us(fresh(fwd), args.calls),
                  "bwd_same": per_call_us(bwd, args.calls),
                  "bwd_fresh": per_call_us(fresh(bwd), args.calls)}
        print(name, json.dumps({k: round(v, 1) for k, v in report.items()}), flush=True)
        if args.cprofile:
            for label, fn in (("fwd_fresh", fresh(fwd)), ("bwd_fresh", fresh(bwd))):
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.calls):
                    fn()
                prof.disable()
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
                print(f"--- cProfile {name} {label} x{args.calls}\n{text.getvalue()}", flush=True)


if __name__ == "__main__":
    main()
