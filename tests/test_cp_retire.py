"""Phases that overlap a collective with retiring CTAs instead of a persistent grid (context
parallelism's ``comm_retire``), on the CPU: the host API's grid / variant choice (real sm_90a
compile, launches packed by the DSL), the CP option's rule, and its plumbing in the engine."""
from __future__ import annotations

import pytest

from paddle_flashmask.distributed import engine


def _harness_seeing(monkeypatch, compiled: str):
    """The host API harness, and the list of kernel variants ``interface.<compiled>`` is asked
    for (one per call)."""
    from host_api_harness import HostApiHarness
    from paddle_flashmask.ops.cute import interface

    api = HostApiHarness(monkeypatch, num_sms=132)
    seen = []
    real = getattr(interface, compiled)
    monkeypatch.setattr(interface, compiled, lambda config: seen.append(config) or real(config))
    return api, seen


def _forward_problem(monkeypatch):
    """The harness (seeing the forward variants asked for), a causal C=1 problem's tensors
    (B=2 S=4000 H=4 D=128: 256 query tiles, more than the 132-SM grid) and (B*H, S)."""
    torch = pytest.importorskip("torch")
    api, seen = _harness_seeing(monkeypatch, "compiled_forward")
    b, s, h, d = 2, 4000, 4, 128
    q, k, v, out, _, lse = api.attention_tensors(b, s, h, h, d)
    idx = api.tensor(b, 1, s, 1, dtype=torch.int32)
    return api, seen, (q, k, v, out, lse, idx), (b * h, s)


def test_forward_retire_launches_one_cta_per_work_tile(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    api, seen, (q, k, v, out, lse, idx), (heads, s) = _forward_problem(monkeypatch)
    for retire in (False, True):
        interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1, stream=0,
                                retire=retire)
    grids = [int(args[-2]) for name, args in api.launch_args if name == "flash_fwd_sm90"]
    tiles = heads * -(-s // seen[1].tile_m)
    assert grids == [min(132, tiles), tiles] and tiles > 132
    assert not seen[1].dynamic_schedule and not seen[1].work_order  # static: one tile per CTA
    with pytest.raises(ValueError, match="reserved_sms"):
        interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1, stream=0,
                                retire=True, reserved_sms=8)
    with pytest.raises(ValueError, match="retire"):
        interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1, stream=0,
                                retire=1)


def test_forward_grid_env_gives_one_cta_per_work_tile(monkeypatch):
    """PADDLE_FLASHMASK_FWD_GRID=tiles: the retire launches' grid for every forward call (an A/B
    switch, flipped between calls: the plan is keyed on it); anything else names the variable."""
    from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd
    from paddle_flashmask.ops.cute import interface

    api, seen, (q, k, v, out, lse, idx), (heads, s) = _forward_problem(monkeypatch)
    for grid in ("persistent", "tiles", ""):
        monkeypatch.setenv(fwd.GRID_ENV, grid)
        interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1, stream=0)
    grids = [int(args[-2]) for name, args in api.launch_args if name == "flash_fwd_sm90"]
    tiles = heads * -(-s // seen[1].tile_m)
    assert grids == [132, tiles, 132]
    assert seen[0].dynamic_schedule and not seen[1].dynamic_schedule
    monkeypatch.setenv(fwd.GRID_ENV, "all")
    with pytest.raises(ValueError, match=fwd.GRID_ENV):
        interface.flashmask_fwd(q, k, v, out, lse, idx, causal=True, softmax_scale=0.1, stream=0)


def test_backward_retire_is_one_cta_per_key_tile(monkeypatch):
    pytest.importorskip("torch")
    from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd.PERSISTENT_ENV, raising=False)
    monkeypatch.setenv(bwd.FUSED_DQ_ENV, "1")  # persistent-only options are dropped as well
    api, seen = _harness_seeing(monkeypatch, "compiled_backward")
    t = api.tensor
    b, s, h, d = 1, 256, 2, 128
    q, k, v, out, dout, lse = api.attention_tensors(b, s, h, h, d)
    grads = [t(b, s, h, d) for _ in range(3)]
    for retire in (False, True):
        interface.flashmask_bwd(q, k, v, out, dout, lse, *grads, None, causal=True,
                                softmax_scale=0.1, stream=0, retire=retire)
    assert seen[0].persistent and seen[0].fused_dq
    assert not seen[1].persistent and not seen[1].fused_dq and not seen[1].key_major


def test_comm_retire_rule(monkeypatch):
    monkeypatch.delenv(engine.COMM_RETIRE_ENV, raising=False)
    assert engine.comm_retire(None, 0) is False
    assert engine.comm_retire(True, 0) is True
    monkeypatch.setenv(engine.COMM_RETIRE_ENV, "1")
    assert engine.comm_retire(None, 0) is True
    assert engine.comm_retire(False, 0) is False  # the argument wins over the env
    with pytest.raises(ValueError, match="comm_sms"):
        engine.comm_retire(None, 8)  # both ways at once
    monkeypatch.setenv(engine.COMM_RETIRE_ENV, "yes")
    with pytest.raises(ValueError, match=engine.COMM_RETIRE_ENV):
        engine.comm_retire(None, 0)
    with pytest.raises(ValueError, match="comm_retire"):
        engine.comm_retire(1, 0)
