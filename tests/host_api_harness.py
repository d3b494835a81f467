"""The cute host API (``ops.cute.interface``) up to the launches, on the CPU.

The kernels are really compiled for sm_90a; each "launch" is the DSL's own argument packing
(``generate_execution_args``), which counts and types the arguments as a real launch does first.
Host tensors stand in for CUDA tensors (:class:`HostAsCuda`) and for the scratch buffers
(:class:`DeviceBuffer` replaced by host tensors), so no GPU is needed.
"""
from __future__ import annotations


class HostAsCuda:
    """Host memory presented as a CUDA DLPack tensor (validation only reads the capsule)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        from paddle_flashmask.ops.cute import dlpack

        capsule = self.tensor.__dlpack__()
        address = dlpack._PyCapsule_GetPointer(capsule, b"dltensor")
        dlpack._DLManagedTensor.from_address(address).dl_tensor.device.device_type = 2
        return capsule


class HostApiHarness:
    """Patches ``interface`` for a CPU run; records what the host API launches and allocates.

    ``launched``: kernel names (``interface.KERNEL_BUILDERS`` keys) in launch order;
    ``launch_args``: ``(name, args)`` of every launch; ``scratch``: shapes of the scratch buffers;
    ``counter_resets``: the dynamic schedule's counter, once per forward launch that zeroes it.
    """

    def __init__(self, monkeypatch, num_sms: int = 132) -> None:
        import torch

        from paddle_flashmask.ops.cute import cache, interface

        self.torch = torch
        self.launched: list[str] = []
        self.launch_args: list[tuple] = []
        self.scratch: list[tuple] = []
        harness = self

        class Scratch(HostAsCuda):  # stands in for DeviceBuffer, in host memory
            def __init__(self, shape, dtype, device, stream, zero=False):
                super().__init__(torch.zeros(tuple(shape), dtype=getattr(torch, dtype)))
                self.shape, self.data_ptr = tuple(shape), self.tensor.data_ptr()
                harness.scratch.append(self.shape)

            def release(self):
                pass

        def compile_and_pack(name, config, build):
            compiled = build(config)

            def launch(*args):
                compiled.execution_args.generate_execution_args(args, {})
                harness.launched.append(name)
                harness.launch_args.append((name, args))
            return launch

        from paddle_flashmask.ops.cute import tile_scheduler

        # the dynamic schedule's counter: a fresh one per harness, its per-launch reset recorded
        self.counter_resets: list = []
        monkeypatch.setattr(interface, "_schedule_counters", {})
        monkeypatch.setattr(tile_scheduler, "reset_counter",
                            lambda counter, stream, words=1:
                            harness.counter_resets.append(counter))
        class RecordedView(interface.WorkspaceView):  # a backward's scratch buffer, recorded
            def __new__(cls, data_ptr, shape, dtype):
                harness.scratch.append(tuple(shape))
                return super().__new__(cls, data_ptr, shape, dtype)

        class HostArena:  # the backward's one workspace allocation, in host memory, unrecorded
            def __init__(self, nbytes, device, stream):
                self.tensor = torch.zeros(-(-nbytes // 4), dtype=torch.int32)
                self.ptr = self.tensor.data_ptr()

            def release(self):
                pass

        monkeypatch.setattr(interface, "WorkspaceView", RecordedView)
        monkeypatch.setattr(interface, "allocate_workspace", HostArena)
        monkeypatch.setattr(interface, "_call_plans", {})  # plans hold kernels made before
        monkeypatch.setattr(interface, "_check_current_device", lambda device: None)
        monkeypatch.setattr(interface, "num_sms", lambda device: num_sms)
        monkeypatch.setattr(interface, "DeviceBuffer", Scratch)
        monkeypatch.setattr(cache, "get_or_compile", compile_and_pack)

    def tensor(self, *shape, dtype=None) -> HostAsCuda:
        """Zeros of ``shape`` presented as a CUDA tensor (bf16 unless ``dtype``)."""
        torch = self.torch
        return HostAsCuda(torch.zeros(*shape, dtype=torch.bfloat16 if dtype is None else dtype))

    def attention_tensors(self, b: int, s: int, h: int, hk: int, d: int) -> tuple:
        """q, k, v, out, dout (bf16) and lse (fp32) of a [B, S, H / Hk, D] problem."""
        t = self.tensor
        return (t(b, s, h, d), t(b, s, hk, d), t(b, s, hk, d), t(b, s, h, d), t(b, s, h, d),
                t(b, h, s, dtype=self.torch.float32))

    def backward(self, b: int = 1, s: int = 300, h: int = 4, hk: int = 4, d: int = 128,
                 **kwargs) -> None:
        """``interface.flashmask_bwd`` on zeros: a causal [B, S, H / Hk, D] problem with a
        one-column mask (``kwargs`` go to the call: sink, dsink, ...)."""
        from paddle_flashmask.ops.cute import interface

        torch, t = self.torch, self.tensor
        q, k, v, out, dout, lse = self.attention_tensors(b, s, h, hk, d)
        interface.flashmask_bwd(q, k, v, out, dout, lse, t(b, s, h, d), t(b, s, hk, d),
                                t(b, s, hk, d), t(b, 1, s, 1, dtype=torch.int32), causal=True,
                                softmax_scale=0.1, stream=0, **kwargs)

    def last_args(self, name: str) -> tuple:
        """The arguments of the last launch of kernel ``name``."""
        return [args for kernel, args in self.launch_args if kernel == name][-1]


def deterministic_gqa_backward(monkeypatch, env: str, value: str) -> HostApiHarness:
    """A deterministic GQA backward (4 query / 2 KV heads, S = 300) through the host API with
    the switch ``env`` set to ``value``; checks that the postprocess ran last."""
    monkeypatch.setenv(env, value)
    api = HostApiHarness(monkeypatch, num_sms=132)
    api.backward(h=4, hk=2, deterministic=True)
    assert api.launched[-1] == "flash_bwd_post"
    return api


def check_group_sums_handed_over(api: HostApiHarness, sums_shape: tuple) -> None:
    """A deterministic GQA backward that sums each KV head's dK/dV in the main kernel
    (``dkv_red`` / ``dkv_bulk``): the main kernel got the sums and their flags as its trailing
    arguments, the postprocess converts the sums (shape ``sums_shape``) into dk / dv, and no
    per-query-head partials were allocated."""
    post = api.last_args("flash_bwd_post")
    assert all(a is not None for a in post[2:6])  # dk_sum, dv_sum in; dk, dv out
    main = api.last_args("flash_bwd_sm90")
    assert all(a is not None for a in main[-3:])  # dK sum, dV sum, flags
    assert sums_shape in api.scratch  # KV heads, not query heads
    assert (1, 300, 4, 128) not in api.scratch and (1, 4, 300, 128) not in api.scratch
