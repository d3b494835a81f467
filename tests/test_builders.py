"""Mask builders (DESIGN §5): hand-drawn pictures, an independent dense construction written
from each builder's definition (plain Python loops, no semantics module), to_dense round trips,
hypothesis properties, argument errors, render and the docstring pictures."""
from __future__ import annotations

import doctest
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import paddle_flashmask.mask_builders as mb
from paddle_flashmask.mask_builders import (FlashMask, causal_blockwise_mask, causal_document_mask,
                                            causal_mask, document_mask, global_sliding_window_mask,
                                            parse_picture, picture, prefix_lm_causal_mask,
                                            prefix_lm_document_mask, qk_sparse_mask,
                                            random_eviction_mask, render, shared_question_mask,
                                            sliding_window_mask, stack, to_dense, validate,
                                            window_mask)

FAST = settings(max_examples=60, deadline=None)


def dense(mask: FlashMask, seqlen_q=None) -> np.ndarray:
    """[Sq, Sk] of batch 0 / head 0 through the semantics module."""
    return to_dense(*mask, seqlen_q)[0, 0]


def check(mask: FlashMask, expected: np.ndarray, seqlen_q=None):
    assert mask.startend_row_indices.dtype == np.int32
    assert mask.startend_row_indices.ndim == 4
    got = dense(mask, seqlen_q)
    assert got.shape == expected.shape
    assert np.array_equal(got, expected), f"\n{picture(mask, seqlen_q=seqlen_q)}\n!=\n" + "\n".join(
        "".join("x" if v else "." for v in r) for r in expected)


# --------------------------------------------------------------------------------------------------
# Independent dense constructions (from the definitions in DESIGN §5, element by element)
# --------------------------------------------------------------------------------------------------

def doc_of(lens):
    return [d for d, n in enumerate(lens) for _ in range(n)]


def ref_causal_document(lens, s):
    docs = doc_of(lens)
    return np.array([[j < len(docs) and i < len(docs) and j <= i and docs[i] == docs[j]
                      for j in range(s)] for i in range(s)])


def ref_document(lens, s):
    docs = doc_of(lens)
    return np.array([[j < len(docs) and i < len(docs) and docs[i] == docs[j]
                      for j in range(s)] for i in range(s)])


def ref_window(sq, sk, left, right, causal):
    out = np.zeros((sq, sk), bool)
    for i in range(sq):
        p = i + sk - sq
        for j in range(sk):
            lo = -10**9 if left is None else p - left
            hi = p if causal else (10**9 if right is None else p + right)
            out[i, j] = lo <= j <= hi
    return out


def ref_shared_question(samples, s):
    out = np.zeros((s, s), bool)
    pos = 0
    for sample in samples:
        seg = []  # (start, end, is_prompt)
        p = pos
        for k, n in enumerate(sample):
            seg.append((p, p + n, k == 0))
            p += n
        for a, (s0, e0, _) in enumerate(seg):
            for i in range(s0, e0):
                for b, (s1, e1, prompt) in enumerate(seg):
                    for j in range(s1, e1):
                        out[i, j] = j <= i and (prompt or a == b)
        pos = p
    return out


def ref_prefix_document(docs, s):
    out = np.zeros((s, s), bool)
    pos = 0
    for prefix, n in docs:
        for i in range(pos, pos + n):
            for j in range(pos, pos + n):
                out[i, j] = j < pos + prefix or j <= i
        pos += n
    return out


def ref_blockwise(lens, s):
    docs = doc_of(lens)
    last = len(lens) - 1
    out = np.zeros((s, s), bool)
    for i in range(len(docs)):
        for j in range(len(docs)):
            out[i, j] = j <= i and (docs[i] == docs[j] or docs[i] == last)
    for i in range(len(docs), s):  # documented exception: padding rows keep the earlier documents
        for j in range(len(docs)):
            out[i, j] = docs[j] != last
    return out


def ref_qk_sparse(s, spans):
    out = np.tril(np.ones((s, s), bool))
    for start, n in spans:
        out[start:start + n, start:start + n] = False
    return out


# --------------------------------------------------------------------------------------------------
# Hand-drawn pictures
# --------------------------------------------------------------------------------------------------

def test_causal_picture():
    check(causal_mask(3), parse_picture("""
        x..
        xx.
        xxx"""))


def test_causal_document_picture_with_padding():
    m = causal_document_mask([3, 2], seqlen=7)
    assert m.startend_row_indices[0, 0, :, 0].tolist() == [3, 3, 3, 5, 5, 0, 0]
    check(m, parse_picture("""
        x......
        xx.....
        xxx....
        ...x...
        ...xx..
        .......
        ......."""))


def test_document_picture():
    check(document_mask([2, 1, 2], seqlen=6), parse_picture("""
        xx....
        xx....
        ..x...
        ...xx.
        ...xx.
        ......"""))


def test_sliding_window_pictures():
    # causal: row i sees [i-2, i] -> 3 keys (Paddle's window_size convention)
    check(sliding_window_mask(6, 2), parse_picture("""
        x.....
        xx....
        xxx...
        .xxx..
        ..xxx.
        ...xxx"""))
    check(sliding_window_mask(5, 1, causal=False), parse_picture("""
        xx...
        xxx..
        .xxx.
        ..xxx
        ...xx"""))
    check(sliding_window_mask(4, 0), parse_picture("""
        x...
        .x..
        ..x.
        ...x"""))


def test_window_mask_asymmetric_and_unbounded():
    check(window_mask(5, 5, 0, 2, causal=False), parse_picture("""
        xxx..
        .xxx.
        ..xxx
        ...xx
        ....x"""))
    check(window_mask(4, 4, None, 1, causal=False), parse_picture("""
        xx..
        xxx.
        xxxx
        xxxx"""))
    check(window_mask(3, 3, -1, -1, causal=False), np.ones((3, 3), bool))
    check(window_mask(3, 3, None, causal=True), np.tril(np.ones((3, 3), bool)))


def test_window_mask_bottom_right_when_sq_differs():
    # Sq=3 < Sk=6: row i sits at key position i + 3
    check(window_mask(3, 6, 1, causal=True), parse_picture("""
        ..xx..
        ...xx.
        ....xx"""), seqlen_q=3)
    # Sq=4 > Sk=2: the first rows sit before key 0 and see nothing
    check(window_mask(4, 2, 1, 1, causal=False), parse_picture("""
        ..
        x.
        xx
        xx"""), seqlen_q=4)


def test_window_matches_paddle_window_size_construction():
    """Paddle 3.3.1 flashmask_attention(window_size=(l, r)) builds LTS = arange(l+1, S+l+1) and,
    non-causal, UTE = arange(-r, S-r), both clipped to [0, S] (flash_attention.py)."""
    s, left, right = 9, 3, 2
    lts = np.clip(np.arange(left + 1, s + left + 1), 0, s)
    ute = np.clip(np.arange(-right, s - right), 0, s)
    causal = window_mask(s, s, left, right, causal=True).startend_row_indices[0, 0, :, 0]
    assert causal.tolist() == lts.tolist()
    nc = window_mask(s, s, left, right, causal=False).startend_row_indices[0, 0]
    assert nc[:, 0].tolist() == lts.tolist() and nc[:, 1].tolist() == ute.tolist()


def test_shared_question_picture():
    check(shared_question_mask([[2, 2, 1]], seqlen=6), parse_picture("""
        x.....
        xx....
        xxx...
        xxxx..
        xx..x.
        ......"""))


def test_prefix_lm_pictures():
    check(prefix_lm_causal_mask(4, 3), parse_picture("""
        xxx.
        xxx.
        xxx.
        xxxx"""))
    check(prefix_lm_causal_mask(3, 0), np.tril(np.ones((3, 3), bool)))
    check(prefix_lm_document_mask([(1, 2), (2, 3)], seqlen=6), parse_picture("""
        x.....
        xx....
        ..xx..
        ..xx..
        ..xxx.
        ......"""))


def test_global_sliding_window_picture():
    check(global_sliding_window_mask(6, 2, 1), parse_picture("""
        x.....
        xx....
        xxx...
        xxxx..
        xx.xx.
        xx..xx"""))


def test_causal_blockwise_picture():
    check(causal_blockwise_mask([2, 2, 2]), parse_picture("""
        x.....
        xx....
        ..x...
        ..xx..
        xxxxx.
        xxxxxx"""))


def test_causal_blockwise_padding_rows_documented_exception():
    m = causal_blockwise_mask([1, 2], seqlen=5)  # the last document (keys 1-2) sees document 0
    check(m, parse_picture("""
        x....
        xx...
        xxx..
        x....
        x...."""))


def test_qk_sparse_picture():
    check(qk_sparse_mask(6, [(1, 2), (4, 1)]), parse_picture("""
        x.....
        x.....
        x.....
        xxxx..
        xxxx..
        xxxxxx"""))


# --------------------------------------------------------------------------------------------------
# Properties (hypothesis)
# --------------------------------------------------------------------------------------------------

doc_lens = st.lists(st.integers(1, 7), min_size=1, max_size=5)


@FAST
@given(doc_lens, st.integers(0, 5))
def test_document_builders_match_definitions(lens, pad):
    s = sum(lens) + pad
    for mask, ref in ((causal_document_mask(lens, s), ref_causal_document(lens, s)),
                      (document_mask(lens, s), ref_document(lens, s)),
                      (causal_blockwise_mask(lens, s), ref_blockwise(lens, s))):
        validate(mask.startend_row_indices, mask.causal, s, s)
        check(mask, ref)


@FAST
@given(st.integers(1, 12), st.integers(1, 12), st.one_of(st.none(), st.integers(0, 13)),
       st.one_of(st.none(), st.integers(0, 13)), st.booleans())
def test_window_mask_matches_definition(sq, sk, left, right, causal):
    check(window_mask(sq, sk, left, right, causal), ref_window(sq, sk, left, right, causal), seqlen_q=sq)


@FAST
@given(st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=4), min_size=1, max_size=3),
       st.integers(0, 3))
def test_shared_question_matches_definition(samples, pad):
    s = sum(map(sum, samples)) + pad
    check(shared_question_mask(samples, s), ref_shared_question(samples, s))


@FAST
@given(st.lists(st.integers(1, 6).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
                min_size=1, max_size=4), st.integers(0, 3))
def test_prefix_lm_document_matches_definition(docs, pad):
    s = sum(n for _, n in docs) + pad
    check(prefix_lm_document_mask(docs, s), ref_prefix_document(docs, s))


@FAST
@given(st.integers(1, 16).flatmap(lambda s: st.tuples(st.just(s), st.integers(0, s))))
def test_prefix_lm_causal_matches_document_version(args):
    s, prefix = args
    check(prefix_lm_causal_mask(s, prefix), ref_prefix_document([(prefix, s)], s))


@FAST
@given(st.integers(1, 16), st.integers(0, 16), st.integers(0, 16))
def test_global_sliding_window_matches_definition(s, g, w):
    g = min(g, s)
    ref = np.array([[j <= i and (j < g or i - j <= w) for j in range(s)] for i in range(s)])
    check(global_sliding_window_mask(s, g, w), ref)


@FAST
@given(st.integers(2, 16), st.data())
def test_qk_sparse_matches_definition(s, data):
    cuts = sorted(data.draw(st.sets(st.integers(0, s), min_size=2, max_size=6)))
    spans = [(a, b - a) for a, b in zip(cuts[::2], cuts[1::2])]
    check(qk_sparse_mask(s, spans), ref_qk_sparse(s, spans))


@FAST
@given(st.integers(1, 40).flatmap(lambda s: st.tuples(st.just(s), st.integers(1, s))),
       st.integers(1, 3), st.integers(0, 1000))
def test_random_eviction_keeps_a_fixed_budget(args, heads, seed):
    s, start = args
    m = random_eviction_mask(s, start, num_heads=heads, seed=seed)
    assert m.startend_row_indices.shape == (1, heads, s, 1)
    d = to_dense(*m)[0]
    rows = np.arange(s)
    visible = d.sum(axis=2)                                   # [heads, S]
    assert np.array_equal(visible, np.broadcast_to(np.minimum(rows + 1, start), visible.shape))
    assert d[:, rows, rows].all()                             # a row always sees its own key
    assert not np.any(np.triu(d, 1))                          # causal
    # once evicted, a key stays evicted (KV-cache semantics)
    assert np.all(d[:, 1:, :] <= (d[:, :-1, :] | (rows[None, 1:, None] == rows[None, None, :])))
    again = random_eviction_mask(s, start, num_heads=heads, seed=seed)
    assert np.array_equal(again.startend_row_indices, m.startend_row_indices)


def test_random_eviction_heads_differ_and_seed_matters():
    a = random_eviction_mask(64, 8, num_heads=4, seed=3).startend_row_indices
    assert len({a[0, h].tobytes() for h in range(4)}) == 4
    b = random_eviction_mask(64, 8, num_heads=4, seed=4).startend_row_indices
    assert not np.array_equal(a, b)


# --------------------------------------------------------------------------------------------------
# FlashMask protocol, stack
# --------------------------------------------------------------------------------------------------

def test_flashmask_unpacks_into_to_dense_and_kwargs():
    m = causal_document_mask([2, 2])
    assert set(m._asdict()) == {"startend_row_indices", "causal"}
    assert to_dense(*m).shape == (1, 1, 4, 4)
    assert m.seqlen == 4 and m.shape == (1, 1, 4, 1)


def test_stack_rows_and_promotion():
    a, b = causal_document_mask([2, 2]), causal_mask(4)
    s = stack([a, b])
    assert s.startend_row_indices.shape == (2, 1, 4, 1)
    assert np.array_equal(to_dense(*s)[0], to_dense(*a)[0])
    assert np.array_equal(to_dense(*s)[1], to_dense(*b)[0])
    with pytest.raises(ValueError, match="equal C"):
        stack([a, causal_blockwise_mask([2, 2])])
    p = stack([a, causal_blockwise_mask([2, 2])], promote=True)
    assert p.startend_row_indices.shape == (2, 1, 4, 2)
    assert np.array_equal(to_dense(*p)[0], to_dense(*a)[0])
    q = stack([document_mask([1, 3]), window_mask(4, 4, 1, 1, causal=False)], promote=True)
    assert q.startend_row_indices.shape == (1 * 2, 1, 4, 2)
    full_c4 = FlashMask(np.array([[[[4, 4, 0, 0]] * 4]], np.int32), False)
    r = stack([prefix_lm_document_mask([(1, 4)]), full_c4], promote=True)
    assert r.startend_row_indices.shape == (2, 1, 4, 4)
    assert np.array_equal(to_dense(*r)[0], to_dense(*prefix_lm_document_mask([(1, 4)]))[0])


def test_stack_heads_broadcast_and_errors():
    e = random_eviction_mask(6, 2, num_heads=3)
    s = stack([causal_mask(6), e])
    assert s.startend_row_indices.shape == (2, 3, 6, 1)
    assert np.array_equal(to_dense(*s)[0, 2], to_dense(*causal_mask(6))[0, 0])
    with pytest.raises(ValueError, match="causal"):
        stack([causal_mask(4), document_mask([4])])
    with pytest.raises(ValueError, match="sequence length"):
        stack([causal_mask(4), causal_mask(5)])
    with pytest.raises(ValueError, match="Hm"):
        stack([random_eviction_mask(6, 2, num_heads=2), e])
    with pytest.raises(ValueError, match="empty"):
        stack([])


# --------------------------------------------------------------------------------------------------
# Argument errors name the argument, the expectation and what was found
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, words", [
    (lambda: causal_mask(0), ["seqlen", ">= 1", "0"]),
    (lambda: causal_mask(2.5), ["seqlen", "integer", "2.5"]),
    (lambda: causal_mask(True), ["seqlen", "integer", "True"]),
    (lambda: sliding_window_mask(4, -2), ["window", ">= 0", "-2"]),
    (lambda: window_mask(4, 4, -3, 0), ["left", ">= 0", "-3"]),
    (lambda: causal_document_mask([3, 0]), ["doc_lens[1]", ">= 1", "0"]),
    (lambda: causal_document_mask([]), ["doc_lens", "empty"]),
    (lambda: causal_document_mask(5), ["doc_lens", "sequence"]),
    (lambda: document_mask([3, 3], seqlen=5), ["seqlen", ">= 6", "5"]),
    (lambda: shared_question_mask([[2, 1], []]), ["samples[1]", "empty"]),
    (lambda: prefix_lm_causal_mask(4, 5), ["prefix_len", "<= 4", "5"]),
    (lambda: prefix_lm_document_mask([(3, 2)]), ["prefix_len", "<= 2", "3"]),
    (lambda: prefix_lm_document_mask([(1, 2, 3)]), ["docs[0]", "pair"]),
    (lambda: global_sliding_window_mask(4, 5, 1), ["global_tokens", "<= 4", "5"]),
    (lambda: qk_sparse_mask(6, [(1, 3), (2, 1)]), ["maskout_spans[1]", "overlap"]),
    (lambda: qk_sparse_mask(6, [(4, 3)]), ["maskout_spans[0][1]", "<= 2", "3"]),
    (lambda: random_eviction_mask(6, 0), ["start_row", ">= 1", "0"]),
    (lambda: random_eviction_mask(6, 2, num_heads=0), ["num_heads", ">= 1", "0"]),
])
def test_invalid_arguments(call, words):
    with pytest.raises(ValueError) as err:
        call()
    for w in words:
        assert w in str(err.value), (w, str(err.value))


# --------------------------------------------------------------------------------------------------
# Pictures and PNG
# --------------------------------------------------------------------------------------------------

def test_docstring_pictures():
    """Every docstring picture is a doctest: the docs cannot drift from the code."""
    for module in (mb.attention_patterns, mb.training_layouts, mb.flashmask, mb.pictures, mb.converters):
        result = doctest.testmod(module, extraglobs={"picture": picture, **vars(mb)},
                                 optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, module.__name__
    assert doctest.testmod(mb.attention_patterns, extraglobs={"picture": picture}).attempted >= 12


def test_every_public_builder_has_a_picture():
    for name in ("causal_mask", "window_mask", "sliding_window_mask", "global_sliding_window_mask",
                 "causal_document_mask", "document_mask", "causal_blockwise_mask",
                 "shared_question_mask", "prefix_lm_causal_mask", "prefix_lm_document_mask",
                 "qk_sparse_mask", "random_eviction_mask", "pack_sft", "pack_lora", "pack_preference"):
        doc = getattr(mb, name).__doc__
        assert "x" in doc and ".." in doc, name


def test_parse_picture_rejects_bad_text():
    with pytest.raises(ValueError, match="width"):
        parse_picture("x.\nx")
    with pytest.raises(ValueError, match="only"):
        parse_picture("xo")


def _png_chunks(data: bytes):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks.setdefault(kind, []).append(body)
        pos += 12 + n
    return chunks


def test_render_writes_png_with_boundaries(tmp_path):
    from PIL import Image
    mask = causal_document_mask([3, 5], seqlen=10)
    path = render(mask, tmp_path / "m.png")
    chunks = _png_chunks(open(path, "rb").read())
    assert b"IHDR" in chunks and b"IEND" in chunks
    img = np.asarray(Image.open(path).convert("RGB"))
    scale = img.shape[0] // 10
    assert img.shape == (10 * scale, 10 * scale, 3) and scale >= 4
    red = (img[..., 0] > 200) & (img[..., 1] < 80)
    # boundaries at keys 3 and 8 (document start, padding start) -> red columns and rows
    assert red[:, 3 * scale].all() and red[:, 8 * scale].all() and red[3 * scale, :].all()
    # an element visible in the mask is blue, a masked one near white (away from the lines)
    blue = (img[..., 2] > 200) & (img[..., 0] < 80)
    assert blue[1 * scale + 1, 0 * scale + 1] and not blue[1 * scale + 1, 2 * scale + 1]


def test_render_selects_batch_and_head(tmp_path):
    from PIL import Image
    e = random_eviction_mask(16, 4, num_heads=2, seed=7)
    s = stack([e, e])
    a = np.asarray(Image.open(render(s, tmp_path / "a.png", batch=1, head=0, boundaries=[])))
    b = np.asarray(Image.open(render(s, tmp_path / "b.png", batch=1, head=1, boundaries=[])))
    assert not np.array_equal(a, b)
    with pytest.raises(ValueError, match="head"):
        render(s, tmp_path / "c.png", head=2)
    with pytest.raises(ValueError, match="batch"):
        render(s, tmp_path / "c.png", batch=2)


def test_render_large_mask_is_downsampled(tmp_path):
    from PIL import Image
    path = render(causal_document_mask([1500, 1000, 548]), tmp_path / "big.png", max_pixels=256)
    img = Image.open(path)
    assert max(img.size) <= 256


def test_render_block_shading_is_the_visible_fraction(tmp_path):
    from PIL import Image
    img = np.asarray(Image.open(render(causal_mask(64), tmp_path / "c.png", max_pixels=32,
                                       boundaries=[])).convert("RGB")).astype(float)
    assert img.shape == (32, 32, 3)
    white, blue = np.array([245, 245, 245]), np.array([37, 99, 235])
    # a 2x2 block on the diagonal has 3 of 4 pairs visible; above it none, below it all
    assert np.allclose(img[5, 5], 0.25 * white + 0.75 * blue, atol=1)
    assert np.allclose(img[5, 6], white) and np.allclose(img[6, 5], blue)


def test_encode_png_round_trip():
    from PIL import Image
    import io
    rgb = np.random.default_rng(0).integers(0, 256, size=(7, 5, 3), dtype=np.uint8)
    data = mb.encode_png(rgb)
    _png_chunks(data)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")), rgb)


# --------------------------------------------------------------------------------------------------
# from_dense (dense -> smallest FlashMask form)
# --------------------------------------------------------------------------------------------------

FORMS = [(True, 1), (True, 2), (False, 2), (False, 4)]


@FAST
@given(st.sampled_from(FORMS), st.integers(1, 9), st.integers(1, 9), st.integers(1, 2), st.data())
def test_from_dense_round_trips_random_indices(form, sq, sk, heads, data):
    causal, c = form
    values = data.draw(st.lists(st.integers(0, sq), min_size=heads * sk * c, max_size=heads * sk * c))
    idx = np.array(values, np.int32).reshape(1, heads, sk, c)
    dense_in = to_dense(idx, causal, sq)
    for flag in (causal, None):
        out = mb.from_dense(dense_in, causal=flag)
        assert np.array_equal(to_dense(*out, sq), dense_in)
        if flag is not None:
            assert out.causal == causal and out.startend_row_indices.shape[-1] <= c


def test_from_dense_picks_the_smallest_form():
    assert mb.from_dense(to_dense(*causal_document_mask([2, 3], 7))).startend_row_indices.shape[-1] == 1
    assert mb.from_dense(to_dense(*qk_sparse_mask(6, [(1, 2)]))).startend_row_indices.shape[-1] == 2
    both = mb.from_dense(np.ones((4, 4), bool))
    assert not both.causal and both.startend_row_indices.shape[-1] == 2
    two_bands = parse_picture("""
        x...
        .x..
        x.x.
        .x.x""")
    m = mb.from_dense(two_bands)
    assert (m.causal, m.startend_row_indices.shape[-1]) == (False, 4)
    assert np.array_equal(to_dense(*m)[0, 0], two_bands)


def test_from_dense_rejects_unrepresentable_masks():
    checker = (np.add.outer(np.arange(6), np.arange(6)) % 2 == 0)
    with pytest.raises(ValueError, match="key column 0 .*more than two intervals"):
        mb.from_dense(checker)
    with pytest.raises(ValueError, match="causal form.*key column 1"):
        mb.from_dense(np.ones((3, 3), bool), causal=True)
    with pytest.raises(ValueError, match="bool"):
        mb.from_dense(np.ones((3, 3)))
    with pytest.raises(ValueError, match="shape"):
        mb.from_dense(np.ones((3,), bool))
