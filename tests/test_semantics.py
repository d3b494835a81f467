"""The semantics module against brute force: dense view, exact pair counts, tile classes."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from paddle_flashmask import semantics as sem

FORMS = [(True, 1), (True, 2), (False, 2), (False, 4)]


def random_indices(rng, b, hm, sq, sk, causal, c):
    """Random valid bands: sorted pairs so that start <= end within a band (and unsorted too)."""
    vals = rng.integers(0, sq + 1, size=(b, hm, sk, c)).astype(np.int32)
    if rng.random() < 0.5:  # make well-formed bands most of the time
        for lo, hi in ((0, 1), (2, 3)):
            if hi < c:
                pair = np.sort(vals[..., [lo, hi]], axis=-1)
                vals[..., lo], vals[..., hi] = pair[..., 0], pair[..., 1]
    return vals


def brute_dense(idx, causal, sq):
    """Element rule written out loop by loop from the DESIGN §1 table (independent of the module)."""
    b, hm, sk, c = idx.shape
    out = np.zeros((b, hm, sq, sk), dtype=bool)
    for bi in range(b):
        for h in range(hm):
            for j in range(sk):
                col = idx[bi, h, j]
                for i in range(sq):
                    if causal and c == 1:
                        m = j > i + (sk - sq) or i >= col[0]
                    elif causal:
                        m = j > i + (sk - sq) or col[0] <= i < col[1]
                    elif c == 2:
                        m = i >= col[0] or i < col[1]
                    else:
                        m = col[0] <= i < col[1] or col[2] <= i < col[3]
                    out[bi, h, i, j] = not m
    return out


@pytest.mark.parametrize("causal,c", FORMS)
@pytest.mark.parametrize("sq,sk", [(7, 7), (5, 9), (9, 5), (1, 4)])
def test_to_dense_matches_table(causal, c, sq, sk):
    rng = np.random.default_rng(sq * 100 + sk + c)
    idx = random_indices(rng, 2, 3, sq, sk, causal, c)
    np.testing.assert_array_equal(sem.to_dense(idx, causal, sq), brute_dense(idx, causal, sq))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(FORMS), st.integers(1, 40), st.integers(1, 40), st.integers(0, 2**31 - 1),
       st.sampled_from([4, 8, 16]), st.sampled_from([4, 8, 16]))
def test_counts_and_tile_classes_agree_with_dense(form, sq, sk, seed, tile_m, tile_n):
    causal, c = form
    rng = np.random.default_rng(seed)
    idx = random_indices(rng, 2, 2, sq, sk, causal, c)
    dense = sem.to_dense(idx, causal, sq)
    np.testing.assert_array_equal(sem.count_visible_pairs(idx, causal, sq), dense.sum(axis=(2, 3)))
    r0 = int(rng.integers(0, sq)); r1 = int(rng.integers(r0, sq + 1))
    np.testing.assert_array_equal(sem.count_visible_pairs(idx, causal, sq, r0, r1),
                                  dense[:, :, r0:r1].sum(axis=(2, 3)))
    np.testing.assert_array_equal(sem.count_visible_pairs(idx, causal, sq, per_column=True),
                                  dense.sum(axis=2))
    classes = sem.classify_tiles(sem.tile_summary(idx, tile_n), causal, sq, tile_m)
    for mt in range(classes.shape[2]):
        for nt in range(classes.shape[3]):
            block = dense[:, :, mt * tile_m:(mt + 1) * tile_m, nt * tile_n:(nt + 1) * tile_n]
            cls = classes[:, :, mt, nt]
            # conservative: SKIP only if all masked; FULL only if nothing masked (and inside Sk)
            assert not (block.any(axis=(2, 3)) & (cls == sem.SKIP)).any()
            full_ok = block.all(axis=(2, 3)) & ((nt + 1) * tile_n <= sk)
            assert not (~full_ok & (cls == sem.FULL)).any()


def test_tile_classes_are_tight_on_causal_document():
    # docs [6, 10] in S=16, tiles of 4: tiles inside one doc below the diagonal are FULL
    lts = np.repeat([6, 16], [6, 10]).astype(np.int32).reshape(1, 1, 16, 1)
    cls = sem.classify_tiles(sem.tile_summary(lts, 4), True, 16, 4)[0, 0]
    expected = np.array([
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [0, 1, 1, 0],
        [0, 1, 2, 1],
    ])
    np.testing.assert_array_equal(cls, expected)


def test_flops_and_dense_pairs():
    assert sem.dense_pair_count(True, 4, 4) == 10
    assert sem.dense_pair_count(True, 2, 4) == 7  # bottom-right: rows see 3 and 4 keys
    assert sem.dense_pair_count(True, 4, 2) == 3  # rows 0, 1 see nothing
    lts = np.full((2, 1, 8, 1), 8, dtype=np.int32)
    assert sem.attention_flops(lts, True, 8, 8, 2, 4, 16) == 4 * 16 * 4 * 2 * 36
    assert sem.attention_flops(None, True, 8, 8, 2, 4, 16) == 4 * 16 * 4 * 2 * 36


@pytest.mark.parametrize("bad,msg", [
    (np.zeros((1, 1, 8, 1), dtype=np.int64), "int32"),
    (np.zeros((1, 8, 1), dtype=np.int32), "rank 4"),
    (np.zeros((1, 1, 7, 1), dtype=np.int32), "Sk=8"),
    (np.full((1, 1, 8, 1), -1, dtype=np.int32), "found min -1"),
    (np.full((1, 1, 8, 1), 9, dtype=np.int32), "max 9"),
    (np.zeros((1, 1, 8, 4), dtype=np.int32), "C must be 1 or 2"),
    (np.zeros((1, 3, 8, 1), dtype=np.int32), "mask heads"),
])
def test_validate_names_the_problem(bad, msg):
    with pytest.raises(ValueError, match=msg):
        sem.validate(bad, True, 8, 8, num_heads=4, num_kv_heads=2)


def test_validate_bidirectional_rejects_c1():
    with pytest.raises(ValueError, match="C must be 2 or 4 when causal=False, found C=1"):
        sem.validate(np.zeros((1, 1, 8, 1), dtype=np.int32), False, 8, 8)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 30), st.integers(1, 30), st.integers(-3, 40), st.sampled_from(FORMS))
def test_validate_property(sq, sk, value, form):
    causal, c = form
    idx = np.full((1, 1, sk, c), value, dtype=np.int32)
    if 0 <= value <= sq:
        sem.validate(idx, causal, sq, sk)
    else:
        with pytest.raises(ValueError, match="startend_row_indices"):
            sem.validate(idx, causal, sq, sk)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(FORMS), st.integers(0, 40), st.integers(0, 40), st.integers(0, 2**31 - 1))
def test_rows_with_visible_keys_matches_dense(form, sq, sk, seed):
    """Every (causal, C) form, Sq != Sk, fully masked rows (bands covering many columns)."""
    causal, c = form
    rng = np.random.default_rng(seed)
    idx = random_indices(rng, 2, 3, sq, sk, causal, c)
    if sk and rng.random() < 0.5:  # mask every column for a run of rows: fully masked rows
        r0 = int(rng.integers(0, sq + 1)); r1 = int(rng.integers(r0, sq + 1))
        if causal:
            idx[..., 0] = np.minimum(idx[..., 0], r0) if c == 1 else r0
            if c == 2:
                idx[..., 1] = r1
        else:
            idx[..., 0] = r0 if c == 4 else np.minimum(idx[..., 0], r0)
            if c == 4:
                idx[..., 1] = r1
    got = sem.rows_with_visible_keys(idx, causal, sq)
    assert got.dtype == bool and got.shape == (2, 3, sq)
    want = sem.to_dense(idx, causal, sq).any(axis=3) if sk else np.zeros((2, 3, sq), dtype=bool)
    np.testing.assert_array_equal(got, want)


def test_rows_with_visible_keys_examples():
    # causal documents [3, 5] and a padding tail of 2 in S = 10: the padding rows see nothing
    lts = np.array([3, 3, 3, 8, 8, 8, 8, 8, 8, 8], dtype=np.int32).reshape(1, 1, 10, 1)
    lts[..., 8:, :] = 0  # padding keys masked for every row
    got = sem.rows_with_visible_keys(lts, True)[0, 0]
    np.testing.assert_array_equal(got, [True] * 8 + [False] * 2)
    # bidirectional LTS = 0 everywhere: nothing visible; Sq > Sk causal: the top rows see nothing
    assert not sem.rows_with_visible_keys(np.zeros((1, 1, 4, 2), np.int32), False, 6).any()
    top = sem.rows_with_visible_keys(np.full((1, 1, 3, 1), 5, np.int32), True, 5)[0, 0]
    np.testing.assert_array_equal(top, [False, False, True, True, True])


@pytest.mark.parametrize("causal,c", FORMS)
def test_rows_from_translates_the_element_rule(causal, c):
    """The kernels' relative form (rows measured from a thread's first column) decides every
    element as the absolute rule does, against the brute-force table, for random origins."""
    rng = np.random.default_rng(7 + c)
    sq, sk = 23, 19
    idx = random_indices(rng, 1, 1, sq, sk, causal, c)
    want_visible = brute_dense(idx, causal, sq)[0, 0]
    diag = sk - sq
    rows = np.arange(sq)[:, None]
    for origin in (0, 5, -3, sq, int(rng.integers(-40, 40))):
        for j in range(sk):
            bands = sem.band_bounds(list(idx[0, 0, j]), causal)
            rel = sem.rows_from(bands, origin)
            masked = sem.element_masked(rows - origin, j - diag - origin, rel, causal, 0)
            assert np.array_equal(~np.asarray(masked).ravel(), want_visible[:, j]), (origin, j)


@pytest.mark.parametrize("causal,c", FORMS + [(True, None), (False, None)])
@pytest.mark.parametrize("sq,sk", [(23, 19), (19, 23), (40, 40)])
def test_masked_row_intervals_match_the_element_rule(causal, c, sq, sk):
    """``masked_row_intervals`` of a key holds exactly the rows ``element_masked`` masks, for
    every form (plain masks through their constant bands), Sq != Sk and unsorted bands."""
    rng = np.random.default_rng(11 + sq + (c or 0))
    diag = sk - sq
    rows = np.arange(-5, sq + 5)
    if c is None:  # the kernels' stand-in bands for plain causal / full attention
        idx = np.full((1, 1, sk, 1 if causal else 2), sq, np.int32)
        if not causal:
            idx[..., 1] = 0
    else:
        idx = random_indices(rng, 1, 1, sq, sk, causal, c)
    for j in range(sk):
        bands = sem.band_bounds(list(idx[0, 0, j]), causal)
        want = np.asarray(sem.element_masked(rows, j, bands, causal, diag)).ravel()
        got = np.zeros_like(want)
        for lo, hi in sem.masked_row_intervals(bands, causal, j, diag):
            inside = np.ones_like(want)
            if lo is not None:
                inside &= rows >= lo
            if hi is not None:
                inside &= rows < hi
            got |= inside
        assert np.array_equal(got, want), (j, idx[0, 0, j])
