"""ReusableLaunch (ops/cute/launch_args.py): a repeated launch reuses the packed C arguments of
an identical call and regenerates them for any difference; anything it does not recognise takes
the DSL's own call path. The fake below records what the DSL would be asked to do; the last test
checks that the real compiled kernels (fresh and loaded from the disk cache) offer the interface
the launcher relies on, so a DSL upgrade that drops it fails here instead of silently slowing."""
from __future__ import annotations

import types

import pytest

cute = pytest.importorskip("cutlass.cute")
import cuda.bindings.driver as cuda  # noqa: E402
from cutlass import Float32, Int32  # noqa: E402

from paddle_flashmask.ops.cute import launch_args  # noqa: E402
from paddle_flashmask.ops.cute.launch_args import ReusableLaunch  # noqa: E402


class FakeCompiled:
    """The DSL's compiled-function interface, recording generations, launches and plain calls."""

    def __init__(self, arg_count: int, extra_args: int = 0) -> None:
        self.generated, self.launched, self.plain_calls, self.adapted = [], [], [], []
        self.total_added_arguments = extra_args
        self._pyir_spec = None
        fake = self

        class ExecutionArgs:
            _meta = types.SimpleNamespace(arg_count=arg_count)

            def generate_execution_args(self, args, kwargs):
                exe_args = [object() for _ in args]  # stand-ins for the C argument addresses
                fake.generated.append((args, exe_args))
                fake.adapted.append(list(args))  # stand-in for the DSL's adapted objects
                return exe_args, fake.adapted[-1]

        self.execution_args = ExecutionArgs()

    def run_compiled_program(self, exe_args):
        self.launched.append(exe_args)
        return 0

    def __call__(self, *args):
        self.plain_calls.append(args)


def _args(address: int = 0x10000, extent: int = 8, scale: float = 0.5, stream: int = 7):
    """Fresh DSL argument objects (as every host call builds them) with these values."""
    ptr = cute.runtime.make_ptr(Float32, address, cute.AddressSpace.gmem, assumed_align=16)
    return ptr, None, Int32(extent), Float32(scale), cuda.CUstream(stream)


def test_calls_differing_in_addresses_reuse_the_packed_form_and_other_changes_regenerate(
        monkeypatch):
    monkeypatch.delenv(launch_args.REUSE_LAUNCH_ENV, raising=False)
    fake = FakeCompiled(arg_count=5)
    launch = ReusableLaunch(fake)
    assert launch.reuses
    launch(*_args())
    launch(*_args())  # equal values, new objects
    assert len(fake.generated) == 1 and len(fake.launched) == 2
    assert fake.launched[0] is fake.launched[1] is fake.generated[0][1]
    # another address: the remembered pointer object is rewritten, nothing regenerated
    remembered_pointer = fake.generated[0][0][0]
    launch(*_args(address=0x20000))
    assert len(fake.generated) == 1 and fake.launched[-1] is fake.generated[0][1]
    assert remembered_pointer._pointer == 0x20000 and remembered_pointer._desc.value == 0x20000
    # a lightweight pointer argument of the same type shares the form too
    launch(launch_args.PtrArg(0x30000, Float32, 16), *_args()[1:])
    assert len(fake.generated) == 1 and remembered_pointer._desc.value == 0x30000
    # each other value that changes the packed form regenerates it
    for changed in (dict(extent=9), dict(scale=0.25), dict(stream=8)):
        launch(*_args(**changed))
        assert fake.launched[-1] is fake.generated[-1][1]
    assert len(fake.generated) == 4 and not fake.plain_calls
    ptr = cute.runtime.make_ptr(Float32, 0x10000, cute.AddressSpace.gmem, assumed_align=4)
    launch(ptr, *_args()[1:])  # another alignment is another pointer type
    assert len(fake.generated) == 5
    # the remembered call's argument objects, and what the DSL adapted them to, stay alive:
    # the packed form points into their storage
    remembered_args = fake.generated[0][0]
    launch(*_args())
    assert fake.launched[-1] is fake.generated[0][1] and remembered_args[2].value == 8
    assert remembered_pointer._desc.value == 0x10000
    kept = [id(obj) for entry in launch._remembered.values() for obj in entry]
    assert id(fake.adapted[0]) in kept


def test_rewritten_arguments_pack_as_a_fresh_generation_would(monkeypatch):
    """The real DSL packing (a compiled sm_90a kernel): after a launch with other addresses
    reuses the remembered form, every C argument it points at holds the same bytes as the form
    the DSL generates from scratch for those addresses."""
    import ctypes

    from paddle_flashmask.ops.cute import interface
    from paddle_flashmask.ops.cute.tile_range_kernel import TileRangeConfig

    monkeypatch.delenv(launch_args.REUSE_LAUNCH_ENV, raising=False)
    launch = interface.compiled_kernel("fwd_tile_ranges", TileRangeConfig(128, 128, True, 1))
    assert launch.reuses
    sent = []
    monkeypatch.setattr(launch.compiled, "run_compiled_program",
                        lambda exe_args: sent.append(list(exe_args)))

    def args(base: int) -> tuple:
        return (launch_args.PtrArg(base, Int32, 4), launch_args.PtrArg(base + 0x1000, Int32, 4),
                launch_args.PtrArg(base + 0x2000, Int32, 4), Int32(2), Int32(300), Int32(300),
                Int32(1), cuda.CUstream(0))

    sizes = (8, 8, 8, 4, 4, 4, 4, 8)  # three pointers, four int32, the stream handle

    def pointed_bytes(exe_args) -> list:
        assert len(exe_args) == len(sizes)
        return [ctypes.string_at(a if isinstance(a, int) else a.value, size)
                for a, size in zip(exe_args, sizes)]

    launch(*args(0x10000))
    launch(*args(0x7f0000))
    assert len(sent) == 2 and sent[0] == sent[1]  # one packed form, rewritten in place
    fresh, _ = launch.compiled.execution_args.generate_execution_args(
        launch_args.dsl_args(args(0x7f0000)), {})
    assert pointed_bytes(sent[1]) == pointed_bytes(fresh)
    assert pointed_bytes(sent[1]) != pointed_bytes(
        launch.compiled.execution_args.generate_execution_args(
            launch_args.dsl_args(args(0x10000)), {})[0])


def test_unrecognised_arguments_and_count_mismatches_take_the_dsl_path(monkeypatch):
    monkeypatch.delenv(launch_args.REUSE_LAUNCH_ENV, raising=False)
    fake = FakeCompiled(arg_count=5)
    launch = ReusableLaunch(fake)
    launch(*_args()[:4], 7)  # a plain int where the stream goes: not recognised
    assert len(fake.plain_calls) == 1 and not fake.generated
    launch(*_args(), Int32(1))  # one argument too many for a kernel without workspace args
    assert len(fake.plain_calls) == 2 and not fake.generated
    extra = FakeCompiled(arg_count=5, extra_args=1)
    ReusableLaunch(extra)(*_args(), Int32(1))
    assert len(extra.generated) == 1 and not extra.plain_calls


def test_switched_off_or_without_the_interface_every_call_is_the_dsls(monkeypatch):
    monkeypatch.setenv(launch_args.REUSE_LAUNCH_ENV, "0")
    fake = FakeCompiled(arg_count=5)
    launch = ReusableLaunch(fake)
    launch(*_args())
    launch(*_args())
    assert not launch.reuses and len(fake.plain_calls) == 2 and not fake.generated
    monkeypatch.delenv(launch_args.REUSE_LAUNCH_ENV)
    calls = []
    plain = ReusableLaunch(lambda *args: calls.append(args))  # a test double, as in the harness
    plain(*_args())
    assert not plain.reuses and len(calls) == 1
    spec = FakeCompiled(arg_count=5)
    spec._pyir_spec = ("re-entry check",)  # calls the DSL validates on re-entry are left to it
    assert not ReusableLaunch(spec).reuses


def test_the_remembered_sets_are_bounded(monkeypatch):
    monkeypatch.delenv(launch_args.REUSE_LAUNCH_ENV, raising=False)
    fake = FakeCompiled(arg_count=5)
    launch = ReusableLaunch(fake)
    for i in range(ReusableLaunch.MAX_REMEMBERED + 3):
        launch(*_args(extent=10 + i))
    assert len(launch._remembered) <= ReusableLaunch.MAX_REMEMBERED
    assert len(fake.launched) == ReusableLaunch.MAX_REMEMBERED + 3


def test_real_compiled_kernels_offer_the_interface(monkeypatch, tmp_path):
    """Freshly compiled and disk-loaded kernels both reuse (sm_90a compile on the CPU)."""
    from paddle_flashmask.ops.cute import cache, interface
    from paddle_flashmask.ops.cute.summary_kernel import SummaryConfig

    monkeypatch.delenv(launch_args.REUSE_LAUNCH_ENV, raising=False)
    monkeypatch.setenv("PADDLE_FLASHMASK_CACHE", "1")
    monkeypatch.setenv("PADDLE_FLASHMASK_CACHE_DIR", str(tmp_path))
    config = SummaryConfig(128, 2)
    cache.clear_memory()
    fresh = interface.compiled_kernel("tile_summary", config)
    assert fresh.reuses and fresh._arg_count == 4
    assert interface.compiled_kernel("tile_summary", config) is fresh  # one launcher per kernel
    cache.clear_memory()
    loaded = interface.compiled_kernel("tile_summary", config)
    assert loaded.compiled is not fresh.compiled and loaded.reuses
    cache.clear_memory()


def test_backward_variant_cache_is_keyed_on_every_switch_the_defaults_read(monkeypatch):
    """interface.backward_config caches its choice per env snapshot (host time per call): every
    env switch a backward default reads must be in that snapshot, or flipping it would be missed."""
    import inspect
    import re

    from paddle_flashmask.ops.cute import bwd_rules
    from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
    from paddle_flashmask.ops.cute import interface

    # the rules live in bwd_rules; the kernel module must not read a switch of its own
    assert not re.findall(r"env_(?:flag|choice)\(", inspect.getsource(bwd))
    read = set(re.findall(r"env_(?:flag|choice)\((\w+_ENV)", inspect.getsource(bwd_rules)))
    # interface keys its cache on bwd_rules.ENV_SWITCHES, the owner's list
    assert read and {getattr(bwd_rules, name) for name in read} <= set(bwd_rules.ENV_SWITCHES)
    monkeypatch.delenv(bwd.FIRST_STORE_ENV, raising=False)
    assert interface.backward_config("bfloat16", 128, True, 1).dq_first_store
    monkeypatch.setenv(bwd.FIRST_STORE_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1).dq_first_store
    monkeypatch.setenv(bwd.DET_SYNC_ENV, "bogus")  # a bad value is reported on every call
    for _ in range(2):
        with pytest.raises(ValueError, match=bwd.DET_SYNC_ENV):
            interface.backward_config("bfloat16", 128, True, 1, deterministic=True)
