"""Training-data layouts (pack_sft / pack_preference / pack_lora): reference vectors recorded from
the real PaddleNLP 3.0.0b4 and PaddleFormers 1.2.0 data pipelines, independent dense
constructions, and hypothesis properties of the packing."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_flashmask.mask_builders import (CONVENTIONS, pack_lora, pack_preference, pack_sft,
                                            parse_picture, picture, plan_rows, to_dense)

FAST = settings(max_examples=60, deadline=None)

# --------------------------------------------------------------------------------------------------
# Reference vectors from the real libraries
# --------------------------------------------------------------------------------------------------
# PaddleNLP 3.0.0b4 (paddlepaddle 3.3.1, CPU): per-example features as llm/utils/data.py builds them
# ([L]*L indices, range(L) positions), packed by
# paddlenlp.datasets.zero_padding_dataset.ZeroPaddingMapDataset(max_length=10, greedy_zero_padding=g),
# then padded to 10 by PretrainedTokenizerBase._pad(padding_strategy=MAX_LENGTH, padding_side=side)
# (what DataCollatorForSeq2Seq calls). Example lengths [5, 3, 6, 2, 4, 7, 1].
NLP_SFT_LENS = [5, 3, 6, 2, 4, 7, 1]
NLP_SFT = {
    (False, "right"): ([[5, 5, 5, 5, 5, 8, 8, 8, 0, 0]], [[6, 6, 6, 6, 6, 6, 8, 8, 0, 0]],
                       [[4, 4, 4, 4, 0, 0, 0, 0, 0, 0]], [[7, 7, 7, 7, 7, 7, 7, 8, 0, 0]]),
    (False, "left"): ([[0, 0, 7, 7, 7, 7, 7, 10, 10, 10]], [[0, 0, 8, 8, 8, 8, 8, 8, 10, 10]],
                      [[0, 0, 0, 0, 0, 0, 10, 10, 10, 10]], [[0, 0, 9, 9, 9, 9, 9, 9, 9, 10]]),
    (True, "right"): ([[5, 5, 5, 5, 5, 8, 8, 8, 0, 0]], [[6, 6, 6, 6, 6, 6, 8, 8, 0, 0]],
                      [[4, 4, 4, 4, 5, 0, 0, 0, 0, 0]], [[7, 7, 7, 7, 7, 7, 7, 0, 0, 0]]),
    (True, "left"): ([[0, 0, 7, 7, 7, 7, 7, 10, 10, 10]], [[0, 0, 8, 8, 8, 8, 8, 8, 10, 10]],
                     [[0, 0, 0, 0, 0, 9, 9, 9, 9, 10]], [[0, 0, 0, 10, 10, 10, 10, 10, 10, 10]]),
}
NLP_SFT_POS = {
    (False, "right"): [[0, 1, 2, 3, 4, 0, 1, 2, 0, 0], [0, 1, 2, 3, 4, 5, 0, 1, 0, 0],
                       [0, 1, 2, 3, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 4, 5, 6, 0, 0, 0]],
    (True, "left"): [[0, 0, 0, 1, 2, 3, 4, 0, 1, 2], [0, 0, 0, 1, 2, 3, 4, 5, 0, 1],
                     [0, 0, 0, 0, 0, 0, 1, 2, 3, 0], [0, 0, 0, 0, 1, 2, 3, 4, 5, 6]],
}
# Same pipeline, non-greedy, max_length=8, lengths [4, 12, 3]: the 12-token example is skipped.
NLP_SFT_SKIP = [[[4, 4, 4, 4, 7, 7, 7, 0]]]

# PaddleNLP 3.0.0b4 paddlenlp.trl.trl_data.preprocess_preference_data(flash_mask=True) on three
# examples (a stub tokenizer, no chat template), giving spans (prompt, chosen, rejected) =
# (9, 4, 3), (3, 2, 6), (5, 5, 5); ZeroPaddingMapDataset(max_length=32) (greedy or not: same rows)
# and preference_collate_fn(max_seq_len=32): int32 [2, 1, 32].
NLP_PREF_TRIPLES = [(9, 4, 3), (3, 2, 6), (5, 5, 5)]
NLP_PREF_IDX = [
    [[16] * 9 + [13] * 4 + [16] * 3 + [27] * 3 + [21] * 2 + [27] * 6 + [27] * 5],
    [[15] * 5 + [10] * 5 + [15] * 5 + [15] * 17],
]
NLP_PREF_POS = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 9, 10, 11, 0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0],
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 5, 6, 7, 8, 9] + [0] * 17,
]
NLP_PREF_RESPONSE = [[0, 9, 13, 16], [0, 19, 21, 27], [1, 5, 10, 15]]

# PaddleFormers 1.2.0: paddleformers.datasets.data_utils.generate_greedy_packs_from_sequences(10, ...)
# on lengths [5, 3, 6, 2, 4, 7, 1] -> rows [[5, 3], [6, 2], [4, 1], [7]], then
# paddleformers.datasets.collate.collate_fn(max_seq_len=10): int32 [4, 1, 10, 1].
PF_SFT_IDX = [[5, 5, 5, 5, 5, 8, 8, 8, 8, 9], [6, 6, 6, 6, 6, 6, 8, 8, 8, 9],
              [4, 4, 4, 4, 5, 5, 6, 7, 8, 9], [7, 7, 7, 7, 7, 7, 7, 7, 8, 9]]
PF_SFT_POS = [[0, 1, 2, 3, 4, 0, 1, 2, 0, 0], [0, 1, 2, 3, 4, 5, 0, 1, 0, 0],
              [0, 1, 2, 3, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 4, 5, 6, 0, 0, 0]]
# PaddleFormers 1.2.0 BaseDPODataSet._postprocess_sequence (use_filtered_label_loss=False,
# use_attn_mask_startend_row_indices=True) with (prompt, chosen, rejected) token counts (6, 3, 2),
# (3, 2, 4), (4, 4, 4), then dpo_collate_fn([[s0, s1], [s2]], max_seq_len=24).
PF_DPO_TRIPLES = [(6, 3, 2), (3, 2, 4), (4, 4, 4)]
PF_DPO_IDX = [
    [10, 10, 10, 10, 10, 10, 8, 8, 10, 10, 18, 18, 18, 14, 18, 18, 18, 18, 18, 19, 20, 21, 22, 23],
    [11, 11, 11, 11, 7, 7, 7, 11, 11, 11, 11, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23],
]
PF_DPO_POS = [[0, 1, 2, 3, 4, 5, 6, 7, 5, 6, 0, 1, 2, 3, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0],
              [0, 1, 2, 3, 4, 5, 6, 3, 4, 5, 6] + [0] * 13]
PF_DPO_RESPONSE = [[0, 5, 8, 10], [0, 12, 14, 18], [1, 3, 7, 11]]


@pytest.mark.parametrize("greedy, side", list(NLP_SFT))
def test_pack_sft_reproduces_paddlenlp(greedy, side):
    p = pack_sft(NLP_SFT_LENS, 10, greedy=greedy, convention="paddlenlp", padding_side=side)
    assert p.collated_indices.dtype == np.int32 and p.collated_indices.shape == (4, 1, 10)
    assert p.collated_indices.tolist() == [list(r) for r in NLP_SFT[(greedy, side)]]
    if (greedy, side) in NLP_SFT_POS:
        assert p.position_ids.tolist() == NLP_SFT_POS[(greedy, side)]
    assert np.array_equal(p.mask.startend_row_indices[..., 0], p.collated_indices)


def test_pack_sft_paddlenlp_skips_too_long_examples():
    p = pack_sft([4, 12, 3], 8, greedy=False, convention="paddlenlp")
    assert p.collated_indices.tolist() == NLP_SFT_SKIP
    assert p.dropped == [1] and p.spans[1].tolist() == [-1, -1, -1]
    with pytest.raises(ValueError, match=r"example_lens\[1\].*max_len=8.*12"):
        pack_sft([4, 12, 3], 8)


@pytest.mark.parametrize("greedy", [False, True])
def test_pack_preference_reproduces_paddlenlp(greedy):
    p = pack_preference(NLP_PREF_TRIPLES, 32, greedy=greedy, convention="paddlenlp")
    assert p.collated_indices.dtype == np.int32 and p.collated_indices.shape == (2, 1, 32)
    assert p.collated_indices.tolist() == NLP_PREF_IDX
    assert p.position_ids.tolist() == NLP_PREF_POS
    assert p.response_indices.tolist() == NLP_PREF_RESPONSE


def test_pack_sft_reproduces_paddleformers():
    p = pack_sft(NLP_SFT_LENS, 10, convention="paddleformers")
    assert p.rows == [[0, 1], [2, 3], [4, 6], [5]]
    assert p.collated_indices.shape == (4, 1, 10, 1) and p.collated_indices.dtype == np.int32
    assert p.collated_indices[:, 0, :, 0].tolist() == PF_SFT_IDX
    assert p.position_ids.tolist() == PF_SFT_POS


def test_pack_preference_reproduces_paddleformers():
    p = pack_preference(PF_DPO_TRIPLES, 24, greedy=False, convention="paddleformers")
    assert p.rows == [[0, 1], [2]]
    assert p.collated_indices.shape == (2, 1, 24, 1)
    assert p.collated_indices[:, 0, :, 0].tolist() == PF_DPO_IDX
    assert p.position_ids.tolist() == PF_DPO_POS
    assert p.response_indices.tolist() == PF_DPO_RESPONSE
    # the rejected span starts with the repeated last prompt token
    assert p.rejected_spans[0].tolist() == [0, 8, 10] and p.chosen_spans[0].tolist() == [0, 6, 8]


def test_paddleformers_left_padding_is_refused():
    with pytest.raises(ValueError, match="padding_side.*right.*paddleformers.*left"):
        pack_sft([3], 5, convention="paddleformers", padding_side="left")


# --------------------------------------------------------------------------------------------------
# Hand pictures of the default convention
# --------------------------------------------------------------------------------------------------

def test_pack_sft_default_picture():
    p = pack_sft([2, 3, 1], 4)   # greedy: 2 -> row0, 3 -> row1, 1 -> row0 (room 2 vs 1)
    assert p.rows == [[0, 2], [1]]
    assert np.array_equal(to_dense(*p.mask)[0, 0], parse_picture("""
        x...
        xx..
        ..x.
        ...."""))
    assert p.example_ids.tolist() == [[0, 0, 2, -1], [1, 1, 1, -1]]
    assert p.position_ids.tolist() == [[0, 1, 0, 0], [0, 1, 2, 0]]
    assert p.spans.tolist() == [[0, 0, 2], [1, 0, 3], [0, 2, 3]]


def test_pack_sft_left_padding_picture():
    p = pack_sft([2, 1], 5, padding_side="left")
    assert p.collated_indices[0, 0, :, 0].tolist() == [0, 0, 4, 4, 5]
    assert picture(p.mask) == "\n".join([".....", ".....", "..x..", "..xx.", "....x"])
    assert p.spans.tolist() == [[0, 2, 4], [0, 4, 5]]


def test_pack_preference_default_picture():
    p = pack_preference([(1, 2, 2)], 6)
    assert p.collated_indices[0, 0, :, 0].tolist() == [5, 3, 3, 5, 5, 0]
    assert np.array_equal(to_dense(*p.mask)[0, 0], parse_picture("""
        x.....
        xx....
        xxx...
        x..x..
        x..xx.
        ......"""))
    assert p.segment_ids.tolist() == [[0, 1, 1, 2, 2, -1]]
    assert p.position_ids.tolist() == [[0, 1, 2, 1, 2, 0]]


def test_pack_lora_ids():
    p = pack_lora([(3, 0), (2, 5), (4, 1)], 5)
    assert p.rows == [[0, 1], [2]]
    assert p.adapter_ids.tolist() == [[0, 0, 0, 5, 5], [1, 1, 1, 1, -1]]
    assert p.example_ids.tolist() == [[0, 0, 0, 1, 1], [2, 2, 2, 2, -1]]
    with pytest.raises(ValueError, match=r"examples\[1\]\[1\] \(adapter_id\).*>= 0.*-1"):
        pack_lora([(3, 0), (2, -1)], 5)
    with pytest.raises(ValueError, match=r"examples\[0\].*pair"):
        pack_lora([3], 5)


@pytest.mark.parametrize("call, words", [
    (lambda: pack_sft([2], 4, convention="hf"), ["convention", "paddlenlp", "'hf'"]),
    (lambda: pack_sft([2], 0), ["max_len", ">= 1", "0"]),
    (lambda: pack_sft([2, 0], 4), ["example_lens[1]", ">= 1", "0"]),
    (lambda: pack_sft([2], 4, padding_side="middle"), ["padding_side", "'middle'"]),
    (lambda: pack_sft([9], 4, convention="paddlenlp"), ["max_len=4", "none"]),
    (lambda: pack_preference([(1, 2)], 8), ["triples[0]", "rejected_len"]),
    (lambda: pack_preference([(0, 2, 2)], 8), ["prompt_len", ">= 1", "0"]),
    (lambda: pack_sft([2], 4, buffer_size=0), ["buffer_size", ">= 1", "0"]),
])
def test_invalid_arguments(call, words):
    with pytest.raises(ValueError) as err:
        call()
    for w in words:
        assert w in str(err.value), (w, str(err.value))


# --------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------

lens_st = st.lists(st.integers(1, 9), min_size=1, max_size=12)


def ref_rows_dense(sizes_per_row, max_len, left_pad=False):
    """[B, S, S] block-causal pictures from the per-row document sizes (independent of the code)."""
    out = np.zeros((len(sizes_per_row), max_len, max_len), bool)
    for b, sizes in enumerate(sizes_per_row):
        pos = max_len - sum(sizes) if left_pad else 0
        for n in sizes:
            for i in range(pos, pos + n):
                out[b, i, pos:i + 1] = True
            pos += n
    return out


@FAST
@given(lens_st, st.integers(9, 20), st.booleans(), st.sampled_from(CONVENTIONS),
       st.sampled_from(["right", "left"]))
def test_pack_sft_properties(lens, max_len, greedy, convention, side):
    if side == "left" and convention == "paddleformers":
        return
    p = pack_sft(lens, max_len, greedy=greedy, convention=convention, padding_side=side)
    placed = sorted(n for row in p.rows for n in row)
    assert placed == list(range(len(lens)))                       # every example exactly once
    assert all(sum(lens[n] for n in row) <= max_len for row in p.rows)
    if not greedy:                                                  # order preserved row by row
        assert [n for row in p.rows for n in row] == list(range(len(lens)))
    ref = ref_rows_dense([[lens[n] for n in row] for row in p.rows], max_len, side == "left")
    assert np.array_equal(to_dense(*p.mask)[:, 0], ref)            # same picture in every convention
    for n, (b, s, e) in enumerate(p.spans.tolist()):
        assert e - s == lens[n]
        assert (p.example_ids[b, s:e] == n).all()
        assert p.position_ids[b, s:e].tolist() == list(range(lens[n]))
    assert (p.example_ids == -1).sum() == len(p.rows) * max_len - sum(lens)
    if convention == "default":                                    # padding columns are exactly 0
        assert (p.mask.startend_row_indices[..., 0][p.example_ids[:, None, :] < 0] == 0).all()


@FAST
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5)), min_size=1,
                max_size=6), st.integers(15, 30), st.booleans(), st.sampled_from(CONVENTIONS))
def test_pack_preference_properties(triples, max_len, greedy, convention):
    p = pack_preference(triples, max_len, greedy=greedy, convention=convention)
    d = to_dense(*p.mask)[:, 0]
    assert sorted(n for row in p.rows for n in row) == list(range(len(triples)))
    for n in range(len(triples)):
        (b, ps, pe), (_, cs, ce), (_, rs, re) = (p.prompt_spans[n], p.chosen_spans[n], p.rejected_spans[n])
        assert ps < pe <= cs and ce == rs < re
        # independent rules: everyone in the triple sees the prompt causally; chosen never seen
        # by rejected; rejected sees itself causally; nothing outside the triple
        for i in range(ps, re):
            for j in range(max_len):
                inside = ps <= j < re and j <= i
                hidden = rs <= i and cs <= j < ce
                assert d[b, i, j] == (inside and not hidden), (n, i, j)
        seg = p.segment_ids[b]
        assert (seg[ps:pe] == 0).all() and (seg[cs:ce] == 1).all() and (seg[rs:re] == 2).all()
        pos = p.position_ids[b]
        if convention == "paddleformers":
            assert pos[rs] == pos[ps:pe].max()                     # repeated last prompt token
        else:
            assert pos[rs] == pos[cs]                              # rejected restarts where chosen did
    assert p.response_indices.shape == (len(triples), 4)
    assert sorted(p.response_indices[:, 0].tolist()) == sorted(b for b, row in enumerate(p.rows) for _ in row)
    padding = p.example_ids < 0
    assert not d[padding].any()                                    # padding rows see nothing
    assert not d.transpose(0, 2, 1)[padding].any()                 # padding keys seen by no one


@FAST
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3)), min_size=1, max_size=8),
       st.integers(6, 16), st.sampled_from(CONVENTIONS))
def test_pack_lora_matches_pack_sft(examples, max_len, convention):
    lora = pack_lora(examples, max_len, convention=convention)
    sft = pack_sft([n for n, _ in examples], max_len, convention=convention)
    assert lora.rows == sft.rows
    assert np.array_equal(lora.mask.startend_row_indices, sft.mask.startend_row_indices)
    adapters = np.array([a for _, a in examples])
    real = lora.example_ids >= 0
    assert np.array_equal(lora.adapter_ids[real], adapters[lora.example_ids[real]])
    assert (lora.adapter_ids[~real] == -1).all()


def test_greedy_buffer_sizes_follow_the_frameworks():
    lens = [6] * 3 + [4] * 3  # within one buffer the 4s fill the rows the 6s left
    assert plan_rows(lens, 10, convention="default")[0] == [[0, 3], [1, 4], [2, 5]]
    assert plan_rows(lens, 10, buffer_size=3)[0] == [[0], [1], [2], [3, 4], [5]]
    big = [6] * 500 + [4]
    assert len(plan_rows(big, 10, convention="paddlenlp")[0]) == 501       # buffer of 500
    assert len(plan_rows(big, 10, convention="paddleformers")[0]) == 500   # buffer of 1000
