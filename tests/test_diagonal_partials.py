"""Diagonal-only partial tiles (FwdConfig.diagonal_partials), on the CPU: the two semantics rules
the forward relies on, checked against the mask itself (``semantics.rows_masked``, the element
rule every backend shares), the config rule, and the compile check. The kernel is checked on the
H200 (tests/gpu/fwd_check.py with PADDLE_FLASHMASK_FWD_DIAGONAL_PARTIALS=1).

The forward marks a partial tile kind 2 when the tile summary says no band touches its rows
(``semantics.tile_band_touched`` false) and then masks it with one column limit per row
(``semantics.diagonal_col_limit``). So for every such tile of every mask, the limit rule must give
exactly the true mask of the tile's rows and columns (the sequence edge included).
"""
from __future__ import annotations

import numpy as np
import pytest

from paddle_flashmask import mask_builders as mb
from paddle_flashmask import semantics


def _masks(seqlen: int, rng: np.random.Generator):
    docs = list(rng.integers(40, 400, size=seqlen // 40))
    docs = [int(d) for d in np.diff(np.minimum(np.cumsum([0] + docs), seqlen)) if d > 0]
    yield "causal_document", mb.causal_document_mask(docs, seqlen)
    yield "document", mb.document_mask(docs, seqlen)
    yield "sliding_window", mb.sliding_window_mask(seqlen, int(rng.integers(50, 300)))
    yield "global_sliding_window", mb.global_sliding_window_mask(seqlen, 32, 200)
    yield "prefix_lm_causal", mb.prefix_lm_causal_mask(seqlen, seqlen // 3)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("sq,sk", [(300, 300), (200, 333), (333, 200), (1, 64)])
def test_diagonal_col_limit_is_the_element_rule_without_bands(causal, sq, sk):
    rows = np.arange(sq + 5)[:, None]  # a few padding rows past Sq too
    cols = np.arange(sk)[None, :]
    nothing = semantics.band_bounds([np.full((1, sk), sq), np.zeros((1, sk))], False)
    truth = semantics.element_masked(rows, cols, nothing, causal, sk - sq) | (cols >= sk)
    limit = semantics.diagonal_col_limit(rows, sq, sk, causal, sk - sq)
    assert np.array_equal(cols >= limit, truth)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_untouched_partial_tiles_are_masked_by_the_column_limit_alone(seed):
    rng = np.random.default_rng(seed)
    seqlen, tile_m, tile_n = 1000, 128, 128  # 1000: partial last tiles in both directions
    checked = 0
    for name, mask in _masks(seqlen, rng):
        idx, causal = mask.startend_row_indices, mask.causal
        summary = semantics.tile_summary(idx, tile_n)
        band_max, band_min = semantics.summary_bands(summary, causal)
        classes = semantics.classify_tiles(summary, causal, seqlen, tile_m)
        truth = semantics.rows_masked(idx, causal, seqlen, 0, seqlen)[0, 0]  # [Sq, Sk]
        for m in range(classes.shape[2]):
            r0, r1 = m * tile_m, min(m * tile_m + tile_m, seqlen)
            for n in range(classes.shape[3]):
                touched = semantics.tile_band_touched(
                    r0, r1, semantics.Bands(*(None if f is None else f[0, 0, n] for f in band_max)),
                    semantics.Bands(*(None if f is None else f[0, 0, n] for f in band_min)))
                if classes[0, 0, m, n] != semantics.PARTIAL or touched:
                    continue
                c0, c1 = n * tile_n, n * tile_n + tile_n
                rows = np.arange(r0, r1)[:, None]
                cols = np.arange(c0, c1)[None, :]
                limit = semantics.diagonal_col_limit(rows, seqlen, seqlen, causal, 0)
                expect = np.ones((r1 - r0, tile_n), bool)  # columns past Sk: masked
                expect[:, :max(0, min(c1, seqlen) - c0)] = truth[r0:r1, c0:min(c1, seqlen)]
                assert np.array_equal(cols >= limit, expect), (name, m, n)
                checked += 1
    assert checked > 10  # the document masks' diagonal tiles, at least


def test_config_rule_env_and_compile_check(monkeypatch):
    from paddle_flashmask.ops.cute import compile_check, interface
    from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd

    monkeypatch.delenv(fwd.DIAGONAL_PARTIALS_ENV, raising=False)
    assert not interface.forward_config("bfloat16", 128, True, 1).diagonal_partials
    monkeypatch.setenv(fwd.DIAGONAL_PARTIALS_ENV, "1")
    assert interface.forward_config("bfloat16", 128, True, 1).diagonal_partials
    assert not interface.forward_config("bfloat16", 128, True, None).diagonal_partials  # no bands
    with pytest.raises(ValueError, match="diagonal_partials"):
        fwd.FwdConfig("bfloat16", 128, 128, True, None, diagonal_partials=True)
    monkeypatch.delenv(fwd.DIAGONAL_PARTIALS_ENV)  # the compile check's list at the defaults
    labels = {v.label for v in compile_check.variants()}
    assert {"fwd bfloat16 d128 causal-C1 diagonal-partials",
            "fwd bfloat16 d128 bidir-C4 diagonal-partials"} <= labels
