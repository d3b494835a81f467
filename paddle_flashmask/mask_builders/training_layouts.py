"""Training-data layouts: pack examples into rows and build the FlashMask plus what a data
pipeline needs next to it (row membership, position ids, spans, adapter ids).

``convention`` picks the padding and offset rules:

* ``"default"`` — clean: padding key columns get ``LTS = 0`` (hidden from every row), padding query
  rows see nothing (attention output 0). Greedy packing looks at all examples at once.
* ``"paddlenlp"`` — PaddleNLP 3.0 (``ZeroPaddingMapDataset`` + ``DataCollatorForSeq2Seq`` /
  ``tokenizer._pad`` for SFT and LoRA, ``preprocess_preference_data`` + ``preference_collate_fn``
  for DPO/RM): right padding appends 0, left padding prepends 0 and adds the pad count to every
  real value; preference collation repeats the row's last value; greedy packing runs over buffers
  of 500 examples; examples longer than ``max_len`` are skipped (listed in ``dropped``). The
  collator emits ``int32 [B, 1, S]`` (the model adds the last axis) — see ``collated_indices``.
* ``"paddleformers"`` — PaddleFormers 1.x (``gen_attn_mask_startend_row_indices`` /
  ``dpo_collate_fn``): padding columns get ``range(used, S)``, right padding only, ``int32
  [B, 1, S, 1]``, greedy buffers of 1000 (``packing_interval``); DPO sequences use PaddleFormers'
  own layout (see :func:`pack_preference`); too-long examples are skipped.

All three conventions give the same dense picture for SFT (every padding column is masked for
every row either way: ``0`` by the band, ``range(used, S)`` by band + causality); they differ in
the integer values, which tile skipping, equality tests and framework interop care about.

Greedy packing (both frameworks' ``generate_greedy_packs``): walk the examples in order and put
each one in the open row with the most room left (the first such row on ties); open a new row
when it fits nowhere. Non-greedy: fill the current row until the next example does not fit.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np

from .flashmask import FlashMask, check_int, check_lengths, finish

CONVENTIONS = ("default", "paddlenlp", "paddleformers")
_GREEDY_BUFFER = {"default": None, "paddlenlp": 500, "paddleformers": 1000}


class SFTPack(NamedTuple):
    """Result of :func:`pack_sft`. ``B`` rows of ``S = max_len`` tokens.

    * ``mask``: causal :class:`FlashMask` ``[B, 1, S, 1]`` (one causal document per example).
    * ``rows``: ``rows[b]`` = indices into ``example_lens`` placed in row ``b``, left to right.
    * ``spans``: int64 ``[N, 3]`` = ``(row, start, end)`` of example ``n`` (``-1, -1, -1`` if dropped).
    * ``example_ids``: int32 ``[B, S]``, example index per token, ``-1`` on padding.
    * ``position_ids``: int64 ``[B, S]``, restart at 0 for each example, 0 on padding.
    * ``dropped``: examples skipped because they exceed ``max_len`` (framework conventions only).
    * ``collated_indices``: the indices exactly as the convention's collator emits them
      (PaddleNLP ``int32 [B, 1, S]``; otherwise ``[B, 1, S, 1]``, equal to ``mask``'s).
    """
    mask: FlashMask
    rows: list
    spans: np.ndarray
    example_ids: np.ndarray
    position_ids: np.ndarray
    dropped: list
    collated_indices: np.ndarray


class LoRAPack(NamedTuple):
    """Result of :func:`pack_lora`: :class:`SFTPack`'s fields plus ``adapter_ids`` int32 ``[B, S]``
    (the adapter of each token, ``-1`` on padding)."""
    mask: FlashMask
    rows: list
    spans: np.ndarray
    example_ids: np.ndarray
    adapter_ids: np.ndarray
    position_ids: np.ndarray
    dropped: list
    collated_indices: np.ndarray


class PreferencePack(NamedTuple):
    """Result of :func:`pack_preference`. ``B`` rows of ``S = max_len`` tokens.

    * ``mask``: causal :class:`FlashMask` ``[B, 1, S, 1]``: prompt columns visible to the rest of
      their triple, chosen columns hidden from the rejected response on, rejected causal.
    * ``rows``: triple indices per row.
    * ``prompt_spans``, ``chosen_spans``, ``rejected_spans``: int64 ``[N, 3]`` ``(row, start, end)``
      token spans in the row (``-1`` rows for dropped triples).
    * ``response_indices``: int64 ``[N_kept, 4]`` in the convention's collator format:
      default / PaddleNLP ``[row, chosen_start, rejected_start, rejected_end]`` (token positions);
      PaddleFormers ``[row, p - 1, p - 1 + c, p - 1 + c + r]`` + offset (label positions, its
      ``use_filtered_label_loss=False`` form).
    * ``example_ids``: int32 ``[B, S]`` triple index per token (-1 padding);
      ``segment_ids``: int8 ``[B, S]``: 0 prompt, 1 chosen, 2 rejected, -1 padding.
    * ``position_ids``: int64 ``[B, S]``: the rejected response restarts where the chosen one
      started (PaddleFormers: one earlier, at its repeated last prompt token); 0 on padding.
    * ``dropped``, ``collated_indices``: as in :class:`SFTPack`.
    """
    mask: FlashMask
    rows: list
    prompt_spans: np.ndarray
    chosen_spans: np.ndarray
    rejected_spans: np.ndarray
    response_indices: np.ndarray
    example_ids: np.ndarray
    segment_ids: np.ndarray
    position_ids: np.ndarray
    dropped: list
    collated_indices: np.ndarray


# --------------------------------------------------------------------------------------------------
# Packing plans
# --------------------------------------------------------------------------------------------------

def _check_convention(convention: str) -> str:
    if convention not in CONVENTIONS:
        raise ValueError(f"convention: expected one of {list(CONVENTIONS)}, found {convention!r}")
    return convention


def _check_padding_side(padding_side: str, convention: str) -> str:
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side: expected 'right' or 'left', found {padding_side!r}")
    if padding_side == "left" and convention == "paddleformers":
        raise ValueError("padding_side: expected 'right' with convention='paddleformers' "
                         "(PaddleFormers pads on the right only), found 'left'")
    return padding_side


def _greedy_rows(lengths: Sequence[int], order: Sequence[int], max_len: int) -> list[list[int]]:
    """Largest-room-first packing of ``order`` (indices into ``lengths``) into rows."""
    rows: list[list[int]] = []
    room: list[int] = []
    for n in order:
        best = int(np.argmax(room)) if room else -1
        if best < 0 or lengths[n] > room[best]:
            rows.append([])
            room.append(max_len)
            best = len(rows) - 1
        rows[best].append(n)
        room[best] -= lengths[n]
    return rows


def plan_rows(lengths: Sequence[int], max_len: int, greedy: bool = True,
              convention: str = "default", buffer_size: Optional[int] = None
              ) -> tuple[list[list[int]], list[int]]:
    """Assign items of the given token ``lengths`` to rows of ``max_len``: ``(rows, dropped)``.

    Too-long items raise ``ValueError`` in the default convention and are dropped (as the
    frameworks do) otherwise. ``buffer_size`` (greedy only) defaults to the convention's.
    """
    _check_convention(convention)
    kept = []
    dropped = []
    for n, length in enumerate(lengths):
        if length > max_len:
            if convention == "default":
                raise ValueError(f"example_lens[{n}]: expected a length <= max_len={max_len}, found {length}")
            dropped.append(n)
        else:
            kept.append(n)
    if not kept:
        raise ValueError(f"example_lens: expected at least one example of length <= max_len={max_len}, "
                         f"found none")
    if not greedy:
        rows, used = [[]], 0
        for n in kept:
            if used + lengths[n] > max_len:
                rows.append([])
                used = 0
            rows[-1].append(n)
            used += lengths[n]
        return rows, dropped
    if buffer_size is None:
        buffer_size = _GREEDY_BUFFER[convention]
    if buffer_size is None:
        buffer_size = len(kept)
    buffer_size = check_int("buffer_size", buffer_size, 1)
    rows = []
    for b0 in range(0, len(kept), buffer_size):
        rows.extend(_greedy_rows(lengths, kept[b0:b0 + buffer_size], max_len))
    return rows, dropped


# --------------------------------------------------------------------------------------------------
# Row assembly
# --------------------------------------------------------------------------------------------------

def _pad_row(values: np.ndarray, max_len: int, convention: str, padding_side: str,
             preference: bool) -> tuple[np.ndarray, int]:
    """Pad one row's index values (length ``used``) to ``max_len``; returns (row, left shift)."""
    used = len(values)
    pad = max_len - used
    if padding_side == "left":
        return np.concatenate([np.zeros(pad, np.int64), values + pad]), pad
    if convention == "paddleformers":
        tail = np.arange(int(values[-1]), int(values[-1]) + pad)  # range(last, S); last == used
    elif convention == "paddlenlp" and preference:
        tail = np.full(pad, values[-1])                          # repeat the last value
    else:
        tail = np.zeros(pad, np.int64)                           # hidden from every row
    return np.concatenate([values, tail]), 0


def _collated(idx: np.ndarray, convention: str) -> np.ndarray:
    return idx[..., 0].copy() if convention == "paddlenlp" else idx.copy()


def _check_max_len(max_len: int) -> int:
    return check_int("max_len", max_len, 1)


def _pack_documents(lengths: list[int], max_len: int, greedy: bool, convention: str,
                    padding_side: str, buffer_size: Optional[int]):
    """Shared SFT / LoRA body: one causal document per example."""
    rows, dropped = plan_rows(lengths, max_len, greedy, convention, buffer_size)
    b = len(rows)
    idx = np.zeros((b, 1, max_len, 1), np.int64)
    example_ids = np.full((b, max_len), -1, np.int32)
    position_ids = np.zeros((b, max_len), np.int64)
    spans = np.full((len(lengths), 3), -1, np.int64)
    for r, members in enumerate(rows):
        values, owners, positions, starts = [], [], [], []
        pos = 0
        for n in members:
            values.append(np.full(lengths[n], pos + lengths[n]))
            owners.append(np.full(lengths[n], n))
            positions.append(np.arange(lengths[n]))
            starts.append(pos)
            pos += lengths[n]
        row, shift = _pad_row(np.concatenate(values), max_len, convention, padding_side, False)
        idx[r, 0, :, 0] = row
        sl = slice(shift, shift + pos)
        example_ids[r, sl] = np.concatenate(owners)
        position_ids[r, sl] = np.concatenate(positions)
        for n, s in zip(members, starts):
            spans[n] = (r, shift + s, shift + s + lengths[n])
    mask = finish(idx, True)
    collated = _collated(mask.startend_row_indices, convention)
    return mask, rows, spans, example_ids, position_ids, dropped, collated


def pack_sft(example_lens: Sequence[int], max_len: int, greedy: bool = True,
             convention: str = "default", padding_side: str = "right",
             buffer_size: Optional[int] = None) -> SFTPack:
    """Pack SFT examples (token counts as they sit in the row, i.e. after the input/label shift)
    into rows of ``max_len`` tokens, one causal document each. Returns :class:`SFTPack`.

    ``pack_sft([3, 2, 2], 4, greedy=False)`` → rows ``[[0], [1, 2]]``; row 0 (``[3,3,3,0]``)::

        >>> print(picture(pack_sft([3, 2, 2], 4, greedy=False).mask, batch=0))
        x...
        xx..
        xxx.
        ....
        >>> print(picture(pack_sft([3, 2, 2], 4, greedy=False).mask, batch=1))
        x...
        xx..
        ..x.
        ..xx

    ``padding_side="left"`` puts the padding first and shifts real values by the pad count (PaddleNLP's
    left-padding tokenizers, e.g. Llama); PaddleFormers pads on the right only.
    """
    convention = _check_convention(convention)
    padding_side = _check_padding_side(padding_side, convention)
    max_len = _check_max_len(max_len)
    lengths = check_lengths("example_lens", example_lens)
    return SFTPack(*_pack_documents(lengths, max_len, greedy, convention, padding_side, buffer_size))


def pack_lora(examples: Sequence[Sequence[int]], max_len: int, greedy: bool = True,
              convention: str = "default", padding_side: str = "right",
              buffer_size: Optional[int] = None) -> LoRAPack:
    """Multi-adapter LoRA batches: ``examples = [(length, adapter_id), ...]`` packed exactly like
    :func:`pack_sft` (rows may mix adapters); returns :class:`LoRAPack` with per-token
    ``example_ids`` and ``adapter_ids`` so the model can route each token to its adapter::

        >>> p = pack_lora([(2, 7), (2, 3)], 5)
        >>> print(picture(p.mask))
        x....
        xx...
        ..x..
        ..xx.
        .....
        >>> p.adapter_ids.tolist()
        [[7, 7, 3, 3, -1]]
    """
    convention = _check_convention(convention)
    padding_side = _check_padding_side(padding_side, convention)
    max_len = _check_max_len(max_len)
    if isinstance(examples, (str, bytes)) or not hasattr(examples, "__iter__"):
        raise ValueError(f"examples: expected a sequence of (length, adapter_id), found {examples!r}")
    examples = list(examples)
    if not examples:
        raise ValueError("examples: expected at least one (length, adapter_id), found an empty sequence")
    lengths, adapters = [], []
    for k, ex in enumerate(examples):
        if isinstance(ex, (str, bytes)) or not hasattr(ex, "__len__") or len(ex) != 2:
            raise ValueError(f"examples[{k}]: expected a pair (length, adapter_id), found {ex!r}")
        lengths.append(check_int(f"examples[{k}][0] (length)", ex[0], 1))
        adapters.append(check_int(f"examples[{k}][1] (adapter_id)", ex[1], 0))
    mask, rows, spans, example_ids, position_ids, dropped, collated = _pack_documents(
        lengths, max_len, greedy, convention, padding_side, buffer_size)
    adapter_ids = np.where(example_ids >= 0, np.asarray(adapters, np.int32)[np.maximum(example_ids, 0)], -1)
    return LoRAPack(mask, rows, spans, example_ids, adapter_ids.astype(np.int32), position_ids,
                    dropped, collated)


def _triple_layout(p: int, c: int, r: int, convention: str):
    """One triple's (indices, positions, segment ids, prompt/chosen/rejected spans, response index)."""
    if convention == "paddleformers":
        # prompt + chosen[:-1] + last prompt token + rejected[:-1]   (PaddleFormers DPODataset)
        n = p + c + r - 1
        spans = ((0, p), (p, p + c - 1), (p + c - 1, n))
        positions = np.concatenate([np.arange(p), np.arange(p, p + c - 1), [p - 1], np.arange(p, p + r - 1)])
        response = (p - 1, p - 1 + c, p - 1 + c + r)
    else:
        # prompt + chosen + rejected, rejected positions restart at p   (PaddleNLP trl_data)
        n = p + c + r
        spans = ((0, p), (p, p + c), (p + c, n))
        positions = np.concatenate([np.arange(p), np.arange(p, p + c), np.arange(p, p + r)])
        response = (p, p + c, n)
    chosen_end = spans[1][1]
    values = np.full(n, n, np.int64)
    values[spans[1][0]:chosen_end] = chosen_end  # chosen hidden from the rejected response on
    segments = np.concatenate([np.full(e - s, k, np.int8) for k, (s, e) in enumerate(spans)])
    return values, positions, segments, spans, response


def pack_preference(triples: Sequence[Sequence[int]], max_len: int, greedy: bool = True,
                    convention: str = "default", buffer_size: Optional[int] = None) -> PreferencePack:
    """DPO / reward-model batches: ``triples = [(prompt_len, chosen_len, rejected_len), ...]``.

    Each triple is laid out ``prompt + chosen + rejected``: both responses see the prompt, the
    rejected response never sees the chosen one (C=1 causal: prompt and rejected columns get the
    triple's end, chosen columns the rejected start). Triples are packed like :func:`pack_sft`.
    Returns :class:`PreferencePack`::

        >>> print(picture(pack_preference([(2, 2, 1)], 6).mask))
        x.....
        xx....
        xxx...
        xxxx..
        xx..x.
        ......

    With ``convention="paddleformers"`` the lengths are PaddleFormers' (prompt tokens, chosen and
    rejected response tokens each ending in EOS) and the triple takes ``p + c + r - 1`` tokens:
    ``prompt + chosen[:-1] + prompt[-1] + rejected[:-1]`` — the rejected span starts with a copy
    of the last prompt token (position ``p - 1``). Its index values follow PaddleFormers' sparse
    path, which leaves column ``p - 1`` visible to the rejected response (its dense
    ``attention_mask`` path hides it; only the sparse path is reproduced).
    """
    convention = _check_convention(convention)
    max_len = _check_max_len(max_len)
    if isinstance(triples, (str, bytes)) or not hasattr(triples, "__iter__"):
        raise ValueError(f"triples: expected a sequence of (prompt_len, chosen_len, rejected_len), "
                         f"found {triples!r}")
    triples = list(triples)
    if not triples:
        raise ValueError("triples: expected at least one (prompt_len, chosen_len, rejected_len), "
                         "found an empty sequence")
    layouts = []
    for k, t in enumerate(triples):
        if isinstance(t, (str, bytes)) or not hasattr(t, "__len__") or len(t) != 3:
            raise ValueError(f"triples[{k}]: expected (prompt_len, chosen_len, rejected_len), found {t!r}")
        p = check_int(f"triples[{k}][0] (prompt_len)", t[0], 1)
        c = check_int(f"triples[{k}][1] (chosen_len)", t[1], 1)
        r = check_int(f"triples[{k}][2] (rejected_len)", t[2], 1)
        layouts.append(_triple_layout(p, c, r, convention))
    lengths = [len(lay[0]) for lay in layouts]
    rows, dropped = plan_rows(lengths, max_len, greedy, convention, buffer_size)
    b = len(rows)
    idx = np.zeros((b, 1, max_len, 1), np.int64)
    example_ids = np.full((b, max_len), -1, np.int32)
    segment_ids = np.full((b, max_len), -1, np.int8)
    position_ids = np.zeros((b, max_len), np.int64)
    span_arrays = [np.full((len(triples), 3), -1, np.int64) for _ in range(3)]
    response = []
    for r_, members in enumerate(rows):
        pos = 0
        values = []
        for n in members:
            vals, positions, segments, spans, resp = layouts[n]
            size = len(vals)
            values.append(vals + pos)
            example_ids[r_, pos:pos + size] = n
            segment_ids[r_, pos:pos + size] = segments
            position_ids[r_, pos:pos + size] = positions
            for arr, (s, e) in zip(span_arrays, spans):
                arr[n] = (r_, pos + s, pos + e)
            response.append((r_,) + tuple(pos + v for v in resp))
            pos += size
        idx[r_, 0, :, 0], _ = _pad_row(np.concatenate(values), max_len, convention, "right", True)
    mask = finish(idx, True)
    return PreferencePack(mask, rows, *span_arrays, np.asarray(response, np.int64).reshape(-1, 4),
                          example_ids, segment_ids, position_ids, dropped,
                          _collated(mask.startend_row_indices, convention))
