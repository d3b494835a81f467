"""The forward's dynamic persistent schedule (FwdConfig.dynamic_schedule), on the CPU: the config
switch, the wrapper's argument rule, and the host API up to the launch (real sm_90a compile)."""
from __future__ import annotations

import pytest

from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd


def test_dynamic_schedule_config(monkeypatch):
    monkeypatch.delenv(fwd.DYNAMIC_SCHEDULE_ENV, raising=False)
    monkeypatch.delenv(fwd.WORK_ORDER_ENV, raising=False)
    assert fwd.default_config("bf16", 128, None, True, 1).dynamic_schedule  # default ON
    monkeypatch.setenv(fwd.DYNAMIC_SCHEDULE_ENV, "0")
    assert not fwd.default_config("bf16", 128, None, True, 1).dynamic_schedule
    monkeypatch.setenv(fwd.DYNAMIC_SCHEDULE_ENV, "1")
    assert fwd.default_config("bf16", 128, None, True, 1).dynamic_schedule
    assert fwd.default_config("bf16", 128, None, False, None).dynamic_schedule
    # with the work order the claims walk it (claim t takes order[t]); the static slots walk it
    # through the snake when the dynamic schedule is off; claims by class would be redundant
    ordered = fwd.default_config("bf16", 128, None, True, 1, work_order=True)
    assert ordered.dynamic_schedule and ordered.work_order and ordered.claim_passes == 1
    monkeypatch.setenv(fwd.CLAIM_PASSES_ENV, "3")
    assert fwd.default_config("bf16", 128, None, True, 1, work_order=True).claim_passes == 1
    assert fwd.default_config("bf16", 128, None, True, 1).claim_passes == 3
    with pytest.raises(ValueError, match="claim_passes: expected 1 with work_order=True"):
        fwd.FwdConfig("bf16", 128, 128, True, 1, dynamic_schedule=True, work_order=True,
                      claim_passes=3)
    monkeypatch.setenv(fwd.DYNAMIC_SCHEDULE_ENV, "0")
    static = fwd.default_config("bf16", 128, None, True, 1, work_order=True)
    assert static.work_order and not static.dynamic_schedule and static.claim_passes == 1


def test_claims_publish_the_order_items():
    """Claims hand out the order's items one after the other: the producer reads order[claim]
    once and publishes the item, which producer and consumers decode alike
    (tile_scheduler.claimed_item / work_tile, plain arithmetic on Python ints; the static
    slots' snake is tests/test_work_order.py's)."""
    from paddle_flashmask.ops.cute import tile_scheduler as sched

    m_blocks, heads, batch = 3, 2, 2
    total = m_blocks * heads * batch
    order = [(7 * i + 5) % total for i in range(total)]  # a permutation of the items
    assert sorted(order) == list(range(total))
    # the producer turns claim t into the order's item once; the item is what travels
    items = [sched.claimed_item(order, t) for t in range(total)]
    assert items == order and [sched.claimed_item(None, t) for t in range(3)] == [0, 1, 2]
    claimed = [sched.work_tile(order, item, total, m_blocks, heads, batch, claimed=True)
               for item in items]
    assert claimed == [sched.decode_item(order[t], m_blocks, heads) for t in range(total)]
    assert len(set(claimed)) == total  # every (m_block, head, batch) exactly once
    assert claimed[0] == (order[0] % m_blocks, (order[0] // m_blocks) % heads,
                          order[0] // (m_blocks * heads))


def test_backward_register_operand_switch(monkeypatch):
    """BwdConfig.rs_dkv: on where the tile allows it (tile_n 128, D <= 128), env switch off."""
    from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd.RS_DKV_ENV, raising=False)
    assert interface.backward_config("bfloat16", 128, True, 1).rs_dkv
    assert interface.backward_config("bfloat16", 64, False, None).rs_dkv
    assert not interface.backward_config("bfloat16", 256, True, 1).rs_dkv  # tile_n 64
    monkeypatch.setenv(bwd.RS_DKV_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1).rs_dkv


def test_wrapper_requires_the_counter_exactly_when_dynamic():
    class Shape:
        def __init__(self, *shape):
            self.shape = shape

    q, k, v = Shape(1, 300, 4, 128), Shape(1, 300, 2, 128), Shape(1, 300, 2, 128)
    on = fwd.CompiledForward(fwd.default_config("bf16", 128, None, True, None,
                                                dynamic_schedule=True), compiled=None)
    with pytest.raises(ValueError, match="schedule_counter: expected an int32 buffer"):
        on(q, k, v, None, None, None, None, None, None, 0.1, 0)
    off = fwd.CompiledForward(fwd.default_config("bf16", 128, None, True, None,
                                                 dynamic_schedule=False), compiled=None)
    with pytest.raises(ValueError, match="schedule_counter: expected None"):
        off(q, k, v, None, None, None, None, None, None, 0.1, 0, schedule_counter=Shape(1))


def test_host_api_passes_and_resets_one_counter_per_stream(monkeypatch):
    torch = pytest.importorskip("torch")
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import interface

    monkeypatch.setenv(fwd.DYNAMIC_SCHEDULE_ENV, "1")
    api = HostApiHarness(monkeypatch)
    b, s, h, hk, d = 2, 300, 4, 2, 128
    q, k, v, out, _, lse = api.attention_tensors(b, s, h, hk, d)
    idx = api.tensor(b, hk, s, 1, dtype=torch.int32)
    for stream in (0, 0, 7):
        interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1,
                                stream=stream)
    assert api.launched.count("flash_fwd_sm90") == 3
    # every launch zeroes its stream's counter first; one counter per stream, reused
    assert len(api.counter_resets) == 3
    assert api.counter_resets[0] is api.counter_resets[1] is not api.counter_resets[2]
    assert api.scratch.count((1,)) == 2
