"""Builders for the FlashMask pattern zoo (DESIGN §5): one sequence each, ``[1, Hm, S, C]``.

Every builder returns a :class:`FlashMask` validated by :func:`paddle_flashmask.semantics.validate`.
Pictures: rows are queries i (top = 0), columns are keys j; ``x`` = may attend, ``.`` = masked.
Padding convention (``seqlen`` longer than the tokens used): padding key columns are hidden from
every row and padding query rows see nothing (their attention output is 0), except where a
builder's docstring says otherwise.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .flashmask import FlashMask, check_int, check_lengths, finish, make_mask, resolve_seqlen


def _unbounded(value: Optional[int]) -> bool:
    if value is None:
        return True
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value == -1


def _doc_bounds(doc_lens: Sequence[int], seqlen: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Per key column: start and end of its document; padding columns get (total, total)."""
    lens = np.asarray(doc_lens, dtype=np.int64)
    ends = np.cumsum(lens)
    total = int(ends[-1])
    start = np.full(seqlen, total, dtype=np.int64)
    end = np.full(seqlen, total, dtype=np.int64)
    start[:total] = np.repeat(ends - lens, lens)
    end[:total] = np.repeat(ends, lens)
    return start, end, total


# --------------------------------------------------------------------------------------------------
# Plain and windowed
# --------------------------------------------------------------------------------------------------

def causal_mask(seqlen: int) -> FlashMask:
    """Plain causal attention (C=1, ``LTS = S`` everywhere)::

        >>> print(picture(causal_mask(4)))
        x...
        xx..
        xxx.
        xxxx
    """
    seqlen = check_int("seqlen", seqlen, 1)
    return make_mask([np.full(seqlen, seqlen)], causal=True)


def window_mask(seqlen_q: int, seqlen_k: int, left: Optional[int], right: Optional[int] = None,
                causal: bool = True) -> FlashMask:
    """Local (sliding-window) attention; the indices behind the frontends' ``window_size=``.

    Convention (Paddle's ``window_size`` docs and its own index construction): query row ``i``
    sits at key position ``p = i + (seqlen_k - seqlen_q)`` (bottom-right alignment, as the causal
    diagonal) and sees keys ``[p - left, p]`` when causal, ``[p - left, p + right]`` otherwise,
    both ends inclusive — ``left + 1`` keys in a full causal window. (FlashMask's own test generator
    ``generate_sliding_window_mask(w)`` uses ``[i - w + 1, i]``, one key fewer; we follow the
    ``window_size`` argument.) ``None`` or ``-1`` means unbounded on that side. With
    ``causal=True`` keys after ``p`` are never visible, so ``right`` is ignored (as in Paddle,
    where an int ``window_size`` becomes ``(w, w)``).

    Causal: C=1, ``LTS[j] = j + left + 1 - (Sk - Sq)``; bidirectional: C=2 with
    ``UTE[j] = j - right - (Sk - Sq)``; both clipped to ``[0, Sq]``::

        >>> print(picture(window_mask(5, 5, 1, causal=True)))
        x....
        xx...
        .xx..
        ..xx.
        ...xx
        >>> print(picture(window_mask(5, 5, 1, 2, causal=False)))
        xxx..
        xxxx.
        .xxxx
        ..xxx
        ...xx
        >>> m = window_mask(2, 5, 1, causal=True)   # Sq < Sk: bottom-right aligned
        >>> print(picture(m, seqlen_q=2))
        ..xx.
        ...xx
    """
    seqlen_q = check_int("seqlen_q", seqlen_q, 1)
    seqlen_k = check_int("seqlen_k", seqlen_k, 1)
    if not _unbounded(left):
        left = check_int("left", left, 0)
    if not _unbounded(right):
        right = check_int("right", right, 0)
    offset = seqlen_k - seqlen_q
    cols = np.arange(seqlen_k, dtype=np.int64)
    lts = np.full(seqlen_k, seqlen_q) if _unbounded(left) else np.clip(cols + left + 1 - offset, 0, seqlen_q)
    if causal:
        return finish(np.stack([lts], -1)[None, None], True, seqlen_q)
    ute = np.zeros(seqlen_k) if _unbounded(right) else np.clip(cols - right - offset, 0, seqlen_q)
    return finish(np.stack([lts, ute], -1)[None, None], False, seqlen_q)


def sliding_window_mask(seqlen: int, window: int, causal: bool = True) -> FlashMask:
    """Row i sees keys ``[i - window, i]`` (and ``[i, i + window]`` too when not causal).

    Same convention as :func:`window_mask` (inclusive ends: ``window + 1`` keys when causal)::

        >>> print(picture(sliding_window_mask(5, 2)))
        x....
        xx...
        xxx..
        .xxx.
        ..xxx
        >>> print(picture(sliding_window_mask(5, 1, causal=False)))
        xx...
        xxx..
        .xxx.
        ..xxx
        ...xx
    """
    seqlen = check_int("seqlen", seqlen, 1)
    window = check_int("window", window, 0)
    return window_mask(seqlen, seqlen, window, window, causal=causal)


def global_sliding_window_mask(seqlen: int, global_tokens: int, window: int) -> FlashMask:
    """Causal; the first ``global_tokens`` keys are visible to every row at or after them, any other
    key only within the window (row i sees key j when ``0 <= i - j <= window``). C=1::

        >>> print(picture(global_sliding_window_mask(6, 1, 1)))
        x.....
        xx....
        xxx...
        x.xx..
        x..xx.
        x...xx
    """
    seqlen = check_int("seqlen", seqlen, 1)
    global_tokens = check_int("global_tokens", global_tokens, 0, seqlen)
    window = check_int("window", window, 0)
    cols = np.arange(seqlen, dtype=np.int64)
    lts = np.minimum(cols + window + 1, seqlen)
    lts[:global_tokens] = seqlen
    return make_mask([lts], causal=True)


# --------------------------------------------------------------------------------------------------
# Packed documents
# --------------------------------------------------------------------------------------------------

def causal_document_mask(doc_lens: Sequence[int], seqlen: Optional[int] = None) -> FlashMask:
    """Packed documents, causal inside each (C=1, ``LTS[j]`` = end of j's document).

    Keys past ``sum(doc_lens)`` are padding: ``LTS = 0`` hides them from every row, and padding
    rows see nothing::

        >>> print(picture(causal_document_mask([2, 3], seqlen=6)))
        x.....
        xx....
        ..x...
        ..xx..
        ..xxx.
        ......
    """
    lens = check_lengths("doc_lens", doc_lens)
    seqlen = resolve_seqlen(seqlen, sum(lens), "sum(doc_lens)")
    _, end, total = _doc_bounds(lens, seqlen)
    end[total:] = 0
    return make_mask([end], causal=True)


def document_mask(doc_lens: Sequence[int], seqlen: Optional[int] = None) -> FlashMask:
    """Packed documents, bidirectional inside each (C=2: ``LTS`` = document end, ``UTE`` = start).

    Padding columns get ``LTS = UTE = 0`` (hidden from every row); padding rows see nothing::

        >>> print(picture(document_mask([2, 3], seqlen=6)))
        xx....
        xx....
        ..xxx.
        ..xxx.
        ..xxx.
        ......
    """
    lens = check_lengths("doc_lens", doc_lens)
    seqlen = resolve_seqlen(seqlen, sum(lens), "sum(doc_lens)")
    start, end, total = _doc_bounds(lens, seqlen)
    start[total:] = 0
    end[total:] = 0
    return make_mask([end, start], causal=False)


def causal_blockwise_mask(doc_lens: Sequence[int], seqlen: Optional[int] = None) -> FlashMask:
    """Causal documents; the last document also sees all earlier ones (C=2 causal).

    ``LTS`` = document end, ``LTE`` = start of the last document for earlier documents, ``S`` for
    the last one; padding columns get ``LTS = 0, LTE = S``::

        >>> print(picture(causal_blockwise_mask([2, 1, 2])))
        x....
        xx...
        ..x..
        xxxx.
        xxxxx

    Exception to the padding rule: one masked band below the diagonal per column cannot hide
    an earlier document from both the rows between it and the last document *and* the padding
    rows, so with ``seqlen > sum(doc_lens)`` padding rows still see the earlier documents (never
    the last document or the padding). Exclude them from the loss.
    """
    lens = check_lengths("doc_lens", doc_lens)
    seqlen = resolve_seqlen(seqlen, sum(lens), "sum(doc_lens)")
    start, end, total = _doc_bounds(lens, seqlen)
    last_start = total - lens[-1]
    lte = np.where(start < last_start, last_start, seqlen)
    end[total:] = 0
    lte[total:] = seqlen
    return make_mask([end, lte], causal=True)


def shared_question_mask(samples: Sequence[Sequence[int]], seqlen: Optional[int] = None) -> FlashMask:
    """Packed samples ``[prompt_len, answer_len, ...]``: each answer sees its prompt and itself
    (causal), never another answer, and samples never see each other (C=1).

    ``LTS`` = sample end on prompt columns, answer end on answer columns, 0 on padding::

        >>> print(picture(shared_question_mask([[2, 1, 2], [1, 1]])))
        x......
        xx.....
        xxx....
        xx.x...
        xx.xx..
        .....x.
        .....xx
    """
    if isinstance(samples, (str, bytes)) or not hasattr(samples, "__iter__"):
        raise ValueError(f"samples: expected a sequence of [prompt_len, answer_len, ...], found {samples!r}")
    samples = [check_lengths(f"samples[{k}]", s) for k, s in enumerate(samples)]
    if not samples:
        raise ValueError("samples: expected at least one sample, found an empty sequence")
    used = sum(sum(s) for s in samples)
    seqlen = resolve_seqlen(seqlen, used, "tokens in samples")
    lts = np.zeros(seqlen, dtype=np.int64)
    pos = 0
    for sample in samples:
        sample_end = pos + sum(sample)
        lts[pos:pos + sample[0]] = sample_end
        pos += sample[0]
        for answer in sample[1:]:
            lts[pos:pos + answer] = pos + answer
            pos += answer
    return make_mask([lts], causal=True)


def prefix_lm_causal_mask(seqlen: int, prefix_len: int) -> FlashMask:
    """Keys ``< prefix_len`` are visible to all rows (bidirectional prefix); causal after it.

    C=2 bidirectional: ``LTS = S``; ``UTE = 0`` on prefix columns, ``j`` after::

        >>> print(picture(prefix_lm_causal_mask(5, 2)))
        xx...
        xx...
        xxx..
        xxxx.
        xxxxx
    """
    seqlen = check_int("seqlen", seqlen, 1)
    prefix_len = check_int("prefix_len", prefix_len, 0, seqlen)
    cols = np.arange(seqlen, dtype=np.int64)
    ute = np.where(cols < prefix_len, 0, cols)
    return make_mask([np.full(seqlen, seqlen), ute], causal=False)


def prefix_lm_document_mask(docs: Sequence[Sequence[int]], seqlen: Optional[int] = None) -> FlashMask:
    """Packed documents ``[(prefix_len, doc_len), ...]``, prefix-LM inside each (C=2 bidirectional).

    Inside a document its prefix is visible to all its rows, the rest causally. ``LTS`` =
    document end; ``UTE`` = document start on prefix columns, ``j`` after; padding ``LTS = UTE = 0``::

        >>> print(picture(prefix_lm_document_mask([(2, 3), (1, 2)])))
        xx...
        xx...
        xxx..
        ...x.
        ...xx
    """
    if isinstance(docs, (str, bytes)) or not hasattr(docs, "__iter__"):
        raise ValueError(f"docs: expected a sequence of (prefix_len, doc_len), found {docs!r}")
    docs = list(docs)
    if not docs:
        raise ValueError("docs: expected at least one (prefix_len, doc_len), found an empty sequence")
    pairs = []
    for k, d in enumerate(docs):
        if isinstance(d, (str, bytes)) or not hasattr(d, "__len__") or len(d) != 2:
            raise ValueError(f"docs[{k}]: expected a pair (prefix_len, doc_len), found {d!r}")
        doc_len = check_int(f"docs[{k}][1] (doc_len)", d[1], 1)
        prefix = check_int(f"docs[{k}][0] (prefix_len)", d[0], 0, doc_len)
        pairs.append((prefix, doc_len))
    seqlen = resolve_seqlen(seqlen, sum(p[1] for p in pairs), "sum of doc_len")
    lts = np.zeros(seqlen, dtype=np.int64)
    ute = np.zeros(seqlen, dtype=np.int64)
    pos = 0
    for prefix, doc_len in pairs:
        end = pos + doc_len
        lts[pos:end] = end
        ute[pos:pos + prefix] = pos
        ute[pos + prefix:end] = np.arange(pos + prefix, end)
        pos = end
    return make_mask([lts, ute], causal=False)


# --------------------------------------------------------------------------------------------------
# Sparse / eviction
# --------------------------------------------------------------------------------------------------

def qk_sparse_mask(seqlen: int, maskout_spans: Sequence[Sequence[int]]) -> FlashMask:
    """Causal; ``maskout_spans = [(start, length), ...]``: rows inside a span see no key of that
    span (their own key included) — only what came before; later rows see everything (C=2 causal,
    ``LTS, LTE = start, start + length`` on span columns, ``S, S`` elsewhere). Spans may not
    overlap. A span starting at 0 leaves its rows with no visible key::

        >>> print(picture(qk_sparse_mask(6, [(2, 2)])))
        x.....
        xx....
        xx....
        xx....
        xxxxx.
        xxxxxx
    """
    seqlen = check_int("seqlen", seqlen, 1)
    if isinstance(maskout_spans, (str, bytes)) or not hasattr(maskout_spans, "__iter__"):
        raise ValueError(f"maskout_spans: expected a sequence of (start, length), found {maskout_spans!r}")
    lts = np.full(seqlen, seqlen, dtype=np.int64)
    lte = np.full(seqlen, seqlen, dtype=np.int64)
    taken = np.zeros(seqlen, dtype=bool)
    for k, span in enumerate(maskout_spans):
        if isinstance(span, (str, bytes)) or not hasattr(span, "__len__") or len(span) != 2:
            raise ValueError(f"maskout_spans[{k}]: expected a pair (start, length), found {span!r}")
        start = check_int(f"maskout_spans[{k}][0] (start)", span[0], 0, seqlen - 1)
        length = check_int(f"maskout_spans[{k}][1] (length)", span[1], 1, seqlen - start)
        if taken[start:start + length].any():
            raise ValueError(f"maskout_spans[{k}]: expected spans that do not overlap, found "
                             f"({start}, {length}) overlapping an earlier span")
        taken[start:start + length] = True
        lts[start:start + length] = start
        lte[start:start + length] = start + length
    return make_mask([lts, lte], causal=True)


def random_eviction_mask(seqlen: int, start_row: int, num_heads: int = 1, seed: int = 0) -> FlashMask:
    """Causal; a KV cache of ``start_row`` slots per head: from row ``start_row`` on, each row
    evicts one random older key for good (C=1, ``Hm = num_heads``, ``LTS[j]`` = eviction row).

    Row ``r >= start_row`` therefore sees exactly ``start_row`` keys (its own among them); rows
    before ``start_row`` are plain causal. Deterministic for a given ``seed``; heads differ::

        >>> print(picture(random_eviction_mask(6, 2, seed=1)))
        x.....
        xx....
        .xx...
        ..xx..
        ..x.x.
        ..x..x
    """
    seqlen = check_int("seqlen", seqlen, 1)
    start_row = check_int("start_row", start_row, 1, seqlen)
    num_heads = check_int("num_heads", num_heads, 1)
    seed = check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    steps = seqlen - start_row
    out = np.full((num_heads, seqlen), seqlen, dtype=np.int64)
    rows = np.arange(start_row, seqlen, dtype=np.int64)
    for h in range(num_heads):
        # Row r picks a cache slot; the key in it (the slot's initial key, or the row that last
        # took the slot) is evicted at r and key r takes its place. Sorting the picks per slot
        # gives each evicted key in one vectorised pass.
        slots = rng.integers(0, start_row, size=steps)
        order = np.lexsort((rows, slots))
        s_slots, s_rows = slots[order], rows[order]
        first = np.ones(steps, dtype=bool)
        first[1:] = s_slots[1:] != s_slots[:-1]
        previous = np.where(first, s_slots, np.concatenate([[0], s_rows[:-1]]))
        out[h, previous] = s_rows
    return finish(out[None, :, :, None], True)
