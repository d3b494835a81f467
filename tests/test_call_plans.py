"""Launch plans of the host API (ops/cute/interface.py, docs/kernels.md "Launch plans"): a call
signature is validated and planned once, a repeat reuses the plan, anything that changes the
plan's inputs makes a new one, and what the plan cannot vouch for (alignment, a scalar of another
type) still reaches the full checks. On the CPU: real sm_90a compiles, launches packed by the
DSL (tests/host_api_harness.py)."""
from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")


def _counting(monkeypatch, api, getter: str) -> list:
    """The configs ``interface.<getter>`` is asked for (once per planned call)."""
    from paddle_flashmask.ops.cute import interface

    seen, real = [], getattr(interface, getter)
    monkeypatch.setattr(interface, getter, lambda config: seen.append(config) or real(config))
    return seen


def _problem(api, b=1, s=300, h=4, hk=2, d=128):
    q, k, v, out, dout, lse = api.attention_tensors(b, s, h, hk, d)
    idx = api.tensor(b, 1, s, 1, dtype=torch.int32)
    grads = (api.tensor(b, s, h, d), api.tensor(b, s, hk, d), api.tensor(b, s, hk, d))
    return q, k, v, out, dout, lse, idx, grads


def test_a_repeated_signature_is_planned_once_and_any_change_replans(monkeypatch):
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(interface.CALL_PLANS_ENV, raising=False)
    api = HostApiHarness(monkeypatch)
    seen = _counting(monkeypatch, api, "compiled_forward")
    q, k, v, out, _, lse, idx, _ = _problem(api)
    run = lambda o=out, **kw: interface.flashmask_fwd(  # noqa: E731
        q, k, v, o, lse, kw.pop("indices", idx), causal=kw.pop("causal", True),
        softmax_scale=kw.pop("scale", 0.1), stream=0, **kw)
    run()
    run(api.tensor(1, 300, 4, 128))  # another output tensor, same layout: the plan
    assert len(seen) == 1 and api.launched.count("flash_fwd_sm90") == 2
    run(scale=0.2)
    run(indices=None)
    run(indices=None, causal=False)
    assert len(seen) == 4
    monkeypatch.setenv(interface.CALL_PLANS_ENV, "0")  # every call derives everything
    run()
    run()
    assert len(seen) == 6 and api.launched.count("flash_fwd_sm90") == 7


def test_what_a_plan_cannot_vouch_for_still_reaches_the_checks(monkeypatch):
    from host_api_harness import HostAsCuda, HostApiHarness
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(interface.CALL_PLANS_ENV, raising=False)
    api = HostApiHarness(monkeypatch)
    q, k, v, out, _, lse, idx, _ = _problem(api)
    interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1, stream=0)
    flat = torch.zeros(1 * 300 * 4 * 128 + 1, dtype=torch.bfloat16)
    misaligned = HostAsCuda(flat[1:].view(1, 300, 4, 128))  # same layout, 2 bytes off
    with pytest.raises(ValueError, match="out: expected a 16-byte aligned data pointer"):
        interface.flashmask_fwd(q, k, v, misaligned, lse, idx, causal=True, softmax_scale=0.1,
                                stream=0)
    with pytest.raises(ValueError, match="retire: expected a bool"):  # 1 == True, but not a bool
        interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1, stream=0,
                                retire=1)
    with pytest.raises(ValueError, match="softmax_scale: expected a finite float"):
        interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True,
                                softmax_scale=float("nan"), stream=0)
    with pytest.raises(ValueError, match="lse: expected shape"):  # a new signature: checked
        interface.flashmask_fwd(q, k, v, out, api.tensor(1, 4, 301, dtype=torch.float32), idx,
                                causal=True, softmax_scale=0.1, stream=0)


@pytest.mark.parametrize("one_workspace", ["1", "0"])
def test_backward_plans_its_scratch_buffers(monkeypatch, one_workspace):
    """The backward's scratch buffers, planned once per signature (the deterministic flag is part
    of it): aligned, disjoint slices of one allocation per call (the default), or with
    PADDLE_FLASHMASK_BWD_ONE_WORKSPACE=0 one allocation each."""
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(interface.CALL_PLANS_ENV, raising=False)
    monkeypatch.setenv(interface.ONE_WORKSPACE_ENV, one_workspace)
    api = HostApiHarness(monkeypatch)
    seen = _counting(monkeypatch, api, "compiled_backward")
    arenas = []
    real_arena = interface.allocate_workspace
    monkeypatch.setattr(interface, "allocate_workspace",
                        lambda n, device, stream: arenas.append(n) or real_arena(n, device, stream))
    q, k, v, out, dout, lse, idx, grads = _problem(api)
    for deterministic in (False, False, True, True):
        api.scratch.clear()
        interface.flashmask_bwd(q, k, v, out, dout, lse, *grads, idx, causal=True,
                                softmax_scale=0.1, stream=0, deterministic=deterministic)
        config = seen[-1]
        shapes = {name: shape for name, (shape, _) in
                  bwd.workspace_shapes(config, 1, 300, 300, 4, 2).items() if name != "tile_counter"}
        # every buffer, as a slice (beside them: the tile summary, on the first call)
        assert not Counter(shapes.values()) - Counter(api.scratch)
    assert len(seen) == 2 and [c.deterministic for c in seen] == [False, True]
    assert len(arenas) == (4 if one_workspace == "1" else 0)  # one allocation per call, or none


def test_workspace_layout_packs_aligned_disjoint_slices():
    from paddle_flashmask.ops.cute import interface

    shapes = {"lse2": ((2, 4, 320), "float32"), "tile_counter": ((1,), "int32"),
              "dq_accum": ((2, 4, 320, 128), "float32"), "flags": ((3,), "int32"),
              "empty": ((0, 5), "int32")}
    entries, total = interface.workspace_layout(shapes)
    assert [e[0] for e in entries] == list(shapes)
    spans = []
    for name, shape, dtype, offset in entries:
        if name == "tile_counter":
            assert offset == -1  # the stream's kept counter, not a slice
            continue
        size = interface.ITEM_SIZE[dtype] * int(torch.tensor(shape).prod())
        assert offset % interface.WORKSPACE_ALIGN == 0 and offset + size <= total
        spans.append((offset, offset + size))
    spans.sort()
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert total == sum(-(-(b - a) // 256) * 256 for a, b in spans)
