"""The kernels' per-tensor tile-summary cache (``ops.cute.interface.tile_summary_for``), on CPU.

The summary kernel is replaced by a stand-in that records launches and hands out buffers that
record their release; the cache's rules are what is checked: one launch per index tensor, content
(in-place version), ``tile_n`` and stream; a new launch after an in-place write; buffers freed
when the tensor dies; objects without a version counter are never cached.
"""
import gc
import types

import pytest

torch = pytest.importorskip("torch")
interface = pytest.importorskip("paddle_flashmask.ops.cute.interface")
from paddle_flashmask.ops import arguments  # noqa: E402


DEV0, DEV1 = types.SimpleNamespace(device=0), types.SimpleNamespace(device=1)  # Problem stand-ins


class FakeBuffer:
    def __init__(self, log):
        self.log, self.released = log, False

    def release(self):
        self.released = True
        self.log.append("release")


@pytest.fixture
def launches(monkeypatch):
    log = []

    def fake_launch(indices, problem, tile_n, stream):
        log.append(("launch", tile_n, stream))
        return FakeBuffer(log), FakeBuffer(log)

    monkeypatch.setattr(interface, "launch_tile_summary", fake_launch)
    monkeypatch.setattr(interface, "runtime_tensor", lambda obj: obj)
    monkeypatch.setattr(interface, "_derived",
                        arguments.TensorMemo(256, on_drop=interface._release_buffers))
    return log


def _launch_count(log):
    return sum(1 for entry in log if entry != "release")


def test_one_launch_per_tensor_tile_device_and_stream(launches):
    idx = torch.zeros(1, 1, 300, 1, dtype=torch.int32)
    first, owned = interface.tile_summary_for(idx, DEV0, 112, 7)
    assert not owned and _launch_count(launches) == 1
    again, owned = interface.tile_summary_for(idx, DEV0, 112, 7)
    assert again is first and not owned and _launch_count(launches) == 1
    interface.tile_summary_for(idx, DEV0, 128, 7)  # the backward's tile width
    interface.tile_summary_for(idx, DEV0, 112, 9)  # another stream
    interface.tile_summary_for(idx, DEV1, 112, 7)  # another device, same stream handle (0 is per device)
    assert _launch_count(launches) == 4


def test_in_place_write_recomputes_and_frees_the_stale_summary(launches):
    idx = torch.zeros(1, 1, 300, 1, dtype=torch.int32)
    old, _ = interface.tile_summary_for(idx, DEV0, 112, 7)
    idx.add_(1)
    new, _ = interface.tile_summary_for(idx, DEV0, 112, 7)
    assert new is not old and _launch_count(launches) == 2
    assert all(b.released for b in old) and not any(b.released for b in new)


def test_buffers_are_freed_with_the_tensor(launches):
    idx = torch.zeros(1, 1, 300, 1, dtype=torch.int32)
    summary, _ = interface.tile_summary_for(idx, DEV0, 112, 7)
    del idx
    gc.collect()
    assert all(b.released for b in summary) and not interface._derived


def test_objects_without_a_version_are_not_cached(launches):
    class Plain:  # a DLPack-style object with an address but no in-place version counter
        def data_ptr(self):
            return 4096

    obj = Plain()
    _, owned = interface.tile_summary_for(obj, DEV0, 112, 7)
    _, owned_again = interface.tile_summary_for(obj, DEV0, 112, 7)
    assert owned and owned_again and _launch_count(launches) == 2 and not interface._derived


def test_work_order_is_kept_with_the_tensor_and_its_workspace_freed(launches, monkeypatch):
    """The forward's work order (interface.work_order_for): computed once per index tensor and
    head count (every layer of a step passes the same tensor), the ordering kernels' workspace
    released right after they are enqueued, the order kept until the tensor changes or dies;
    without an index tensor (plain causal) a fresh order per call, owned by the caller."""
    from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd

    log = launches

    def fake_order(problem, config, summary, stream):
        log.append(("order", problem.num_heads, stream))
        return FakeBuffer(log), FakeBuffer(log)

    monkeypatch.setattr(interface, "launch_work_order", fake_order)
    config = fwd.default_config("bf16", 128, None, True, 1, work_order=True)
    problem = types.SimpleNamespace(device=0, num_heads=4, seqlen_q=300, seqlen_k=300)
    idx = torch.zeros(1, 1, 300, 1, dtype=torch.int32)
    (order,), owned = interface.work_order_for(idx, problem, config, (None, None), 7)
    assert not owned and log == [("order", 4, 7), "release"]  # the workspace, not the order
    (again,), owned = interface.work_order_for(idx, problem, config, (None, None), 7)
    assert again is order and not owned and _launch_count(log) == 1
    more_heads = types.SimpleNamespace(device=0, num_heads=8, seqlen_q=300, seqlen_k=300)
    interface.work_order_for(idx, more_heads, config, (None, None), 7)  # a longer order
    assert _launch_count(log) == 2
    idx.add_(1)
    (fresh,), _ = interface.work_order_for(idx, problem, config, (None, None), 7)
    assert fresh is not order and order.released and not fresh.released
    (plain,), owned = interface.work_order_for(None, problem, config, (None, None), 7)
    assert owned and not plain.released
