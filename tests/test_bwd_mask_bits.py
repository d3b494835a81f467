"""The backward's bit-mask element rule (``BwdConfig.mask_bits``) on the CPU: the bit helpers
against brute force, the kernel's whole chain (relative bands -> masked-row intervals -> the
thread's column bits) against ``semantics.element_masked``, the config switch, and the SASS of
the partial-tile block (its H200 A/B is still to come: docs/kernels_bwd.md, "Session 16")."""
from __future__ import annotations

import numpy as np
import pytest

from paddle_flashmask import semantics as sem
from paddle_flashmask.ops.cute import flash_bwd_sm90 as bwd
from paddle_flashmask.ops.cute import mask as fm_mask

FORMS = [(True, 1), (True, 2), (False, 2), (False, 4)]


def _offsets(num_cols):
    return [8 * (i // 2) + i % 2 for i in range(num_cols)]


@pytest.mark.parametrize("num_cols", [8, 16])
def test_pair_columns_below_counts_the_offsets(num_cols):
    offsets = np.array(_offsets(num_cols))
    for limit in range(-10, 4 * num_cols + 10):
        assert fm_mask.pair_columns_below(limit, num_cols) == int((offsets < limit).sum()), limit


class _Int32:
    """A 32-bit two's-complement integer as the kernel's ``Int32`` behaves, except that a shift
    by 32 or more fails here (LLVM makes it poison, so the kernel must never issue one)."""

    def __init__(self, value: int):
        value &= 0xFFFFFFFF
        self.value = value - (1 << 32) if value >= 1 << 31 else value

    @staticmethod
    def _int(x) -> int:
        return x.value if isinstance(x, _Int32) else int(x)

    def __lshift__(self, n):
        n = self._int(n)
        assert 0 <= n < 32, f"shift by {n}"
        return _Int32(self.value << n)

    def __rshift__(self, n):
        n = self._int(n)
        assert 0 <= n < 32, f"shift by {n}"
        return _Int32(self.value >> n)

    def __sub__(self, x):
        return _Int32(self.value - self._int(x))

    def __and__(self, x):
        return _Int32(self.value & self._int(x))

    def __or__(self, x):
        return _Int32(self.value | self._int(x))

    def __xor__(self, x):
        return _Int32(self.value ^ self._int(x))


@pytest.mark.parametrize("num_cols", [8, 16, 20, 32])
@pytest.mark.parametrize("width", ["python", "int32"])
def test_pair_column_bits_is_interval_membership(num_cols, width):
    """Every thread column count the tiles give (64-row tiles 16, 80-row 20, 128-row 32), in
    Python ints and in 32-bit arithmetic that refuses the undefined shift by 32."""
    rng = np.random.default_rng(num_cols)
    offsets = _offsets(num_cols)
    bounds = [None, *range(-3, 4 * num_cols + 3)]
    one = 1 if width == "python" else _Int32(1)
    for _ in range(1000):
        intervals = [(bounds[rng.integers(len(bounds))], bounds[rng.integers(len(bounds))])
                     for _ in range(rng.integers(1, 4))]
        bits = fm_mask.pair_column_bits(intervals, num_cols, one=one)
        bits = bits if width == "python" else bits.value & 0xFFFFFFFF
        for c, off in enumerate(offsets):
            want = any((lo is None or off >= lo) and (hi is None or off < hi)
                       for lo, hi in intervals)
            assert bool((bits >> c) & 1) == want, (intervals, c)
        assert bits >> num_cols == 0  # no bit beyond the thread's columns


def test_low_bits_at_every_count():
    for num_cols in (16, 20, 32):
        for count in range(num_cols + 1):
            assert fm_mask.low_bits(count, num_cols) == (1 << count) - 1
            got = fm_mask.low_bits(count, num_cols, _Int32(1)).value & 0xFFFFFFFF
            assert got == (1 << count) - 1, (num_cols, count)
    with pytest.raises(ValueError, match="num_cols"):
        fm_mask.pair_column_bits([(0, 4)], 40)


def test_pair_column_layout_check():
    assert fm_mask.is_pair_column_layout(_offsets(16))
    assert not fm_mask.is_pair_column_layout(list(range(16)))


@pytest.mark.parametrize("causal,c", FORMS + [(True, None), (False, None)])
def test_the_kernels_chain_decides_every_element_as_the_rule(causal, c):
    """What a thread computes per key row with ``mask_bits`` (``_consume_head``): bands measured
    from its first column, ``masked_row_intervals`` at the relative key, the column bits; bit c
    must equal ``element_masked`` at query ``origin + offset[c]`` for random bands, origins,
    keys and Sq != Sk."""
    rng = np.random.default_rng(3 + (c or 0) + 10 * causal)
    num_cols = 32  # a 128-row tile's (the 64-row tile's 16 are its first half)
    offsets = _offsets(num_cols)
    for sq, sk in ((300, 200), (200, 300), (256, 256)):
        diag = sk - sq
        for _ in range(400):
            if c is None:
                vals = [sq] if causal else [sq, 0]
            else:
                vals = list(rng.integers(0, sq + 1, size=c))
                if rng.random() < 0.5 and c >= 2:
                    vals[0], vals[1] = sorted(vals[:2])
            bands = sem.band_bounds(vals, causal)
            key = int(rng.integers(0, sk))
            origin = int(rng.integers(-70, sq + 10))
            rel = sem.rows_from(bands, origin)
            bits = fm_mask.pair_column_bits(
                sem.masked_row_intervals(rel, causal, key - diag - origin, 0), num_cols)
            for i, off in enumerate(offsets):
                want = bool(sem.element_masked(origin + off, key, bands, causal, diag))
                assert bool((bits >> i) & 1) == want, (sq, sk, vals, key, origin, off)


def test_config_switch(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(bwd.MASK_BITS_ENV, raising=False)
    for d, causal, c in ((128, True, 1), (64, False, 2), (256, True, None)):
        assert interface.backward_config("bfloat16", d, causal, c).mask_bits  # on by default
    monkeypatch.setenv(bwd.MASK_BITS_ENV, "0")
    assert not interface.backward_config("bfloat16", 128, True, 1).mask_bits
    monkeypatch.setenv(bwd.MASK_BITS_ENV, "1")
    assert interface.backward_config("bfloat16", 128, True, 1, deterministic=True).mask_bits
    monkeypatch.setenv(bwd.MASK_BITS_ENV, "yes")
    with pytest.raises(ValueError, match=bwd.MASK_BITS_ENV):
        interface.backward_config("bfloat16", 128, True, 1)


@pytest.mark.parametrize("form", ["--causal", "--columns 2", "--columns 4"])
def test_partial_tile_block_halves(form):
    """SASS of the consumers' main loop, d128: the partial-tile block (the loop's forward branch
    over the element mask) with the bit rule against the per-element compares: about half the
    instructions, R2P moving the bits to predicates, no longer longer on full tiles."""
    from sass_harness import sass_loop_mix

    def block_and_path(**env):
        loops, _ = sass_loop_mix("bwd", "--head-dim", "128", *form.split(), **env)
        loop = max(loops, key=lambda lp: lp["instructions"])
        mask_block = min((blk for blk in loop["skip_blocks"] if blk["instructions"] > 50),
                         key=lambda blk: blk["instructions"])
        return mask_block, loop["instructions"] - mask_block["instructions"]

    base, base_path = block_and_path(PADDLE_FLASHMASK_BWD_MASK_BITS="0")
    bits, bits_path = block_and_path(PADDLE_FLASHMASK_BWD_MASK_BITS="1")
    assert bits["instructions"] <= 0.6 * base["instructions"], (base, bits)
    assert bits["mix"].get("R2P", 0) > 0, bits
    assert bits_path <= base_path, (base_path, bits_path)
