"""The GPU correctness matrix (issue 3 item 5) as data, shared by the tests and by ``precompile.py``.

Not the full Cartesian product (that would be thousands of kernel variants): every factor value
appears in at least one case, with the combinations that stress each other put together:
every mask type of DESIGN §5 (each builder) and random bands for each (causal, C) form,
causal / bidirectional, C in {1, 2, 4}, GQA 16/4 and MQA 16/1, every head dim, Sq != Sk,
S not a multiple of any tile size, fully masked rows (document padding, a fully masked batch),
learnable sink, fp16 and bf16, mask heads Hm in {1, Hk, H}.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from paddle_flashmask import mask_builders as mb


@dataclass(frozen=True)
class Case:
    name: str
    head_dim: int
    causal: bool
    mask: Optional[Callable[[int, int, int], np.ndarray]]  # (seed, sq, sk) -> int32 [B, Hm, Sk, C]
    sq: int = 1000
    sk: int = 1000
    batch: int = 1
    heads: int = 16
    kv_heads: int = 4
    dtype: str = "bfloat16"
    sink: bool = False

    @property
    def head_dim_v(self) -> int:
        return 128 if self.head_dim == 192 else self.head_dim

    @property
    def num_columns(self) -> Optional[int]:
        return None if self.mask is None else int(self.indices(0).shape[-1])

    def indices(self, seed: int) -> Optional[np.ndarray]:
        if self.mask is None:
            return None
        return np.ascontiguousarray(self.mask(seed, self.sq, self.sk), dtype=np.int32)


def _builder(fn, *args, **kwargs):
    def make(seed: int, sq: int, sk: int) -> np.ndarray:
        return fn(*args, **kwargs).startend_row_indices
    return make


def _random_bands(causal: bool, c: int, hm: int = 1, batch: int = 1, masked_batch: bool = False):
    """Random band columns of one (causal, C) form: start <= end, values in [0, Sq]."""
    def make(seed: int, sq: int, sk: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        cols = np.sort(rng.integers(0, sq + 1, size=(batch, hm, sk, c)), axis=-1)
        if not causal and c == 2:  # LTS, UTE: the upper band [0, UTE) lies before the lower one
            cols = cols[..., ::-1].copy()
            cols[..., 1] = np.minimum(cols[..., 1], cols[..., 0])
        if not causal and c == 4:  # LTS <= LTE and UTS <= UTE, the two bands independent
            cols = np.concatenate([np.sort(cols[..., :2], -1), np.sort(cols[..., 2:], -1)], -1)
        if masked_batch:  # batch 0 sees nothing: every column masked for every row
            cols[0, ..., 0] = 0
            if causal and c == 2 or not causal and c == 4:
                cols[0, ..., 1] = sq
        return cols.astype(np.int32)
    return make


S = 1000  # not a multiple of 64, 80, 112 or 128

CASES = [
    # every builder of DESIGN §5 (Sq = Sk), spread over head dims / GQA / MQA / dtypes / sink
    Case("causal_mask", 128, True, _builder(mb.causal_mask, S)),
    Case("sliding_window_causal", 64, True, _builder(mb.sliding_window_mask, S, 100), kv_heads=1),
    Case("sliding_window_bidir", 96, False, _builder(mb.sliding_window_mask, S, 77, causal=False)),
    Case("causal_document_padded", 128, True,
         _builder(mb.causal_document_mask, [300, 1, 250, 331], S + 7), sq=S + 7, sk=S + 7,
         sink=True),
    Case("document_padded", 192, False, _builder(mb.document_mask, [129, 400, 300], S), kv_heads=1),
    Case("shared_question", 256, True, _builder(mb.shared_question_mask, [[200, 90, 120], [300, 250]], S),
         heads=8, kv_heads=8),
    Case("prefix_lm_causal", 128, True, _builder(mb.prefix_lm_causal_mask, S, 333), dtype="float16"),
    Case("prefix_lm_document", 64, True, _builder(mb.prefix_lm_document_mask, [(100, 400), (50, 450)], S)),
    Case("global_sliding_window", 128, True, _builder(mb.global_sliding_window_mask, S, 16, 200)),
    Case("causal_blockwise", 96, True, _builder(mb.causal_blockwise_mask, [300, 300, 400], S),
         dtype="float16", sink=True),
    Case("qk_sparse", 128, True, _builder(mb.qk_sparse_mask, S, [(100, 200), (600, 50)])),
    Case("random_eviction_hm_eq_h", 128, True, _builder(mb.random_eviction_mask, S, 300, 16, 3)),
    # random bands of every (causal, C) form with Sq != Sk, Hm in {1, Hk, H}, sink, masked batch
    Case("bands_causal_C1_sq<sk", 128, True, _random_bands(True, 1, hm=4), sq=700, sk=1000),
    Case("bands_causal_C2_sq>sk", 256, True, _random_bands(True, 2, hm=1, batch=2, masked_batch=True),
         sq=1000, sk=600, batch=2, heads=8, kv_heads=2, sink=True),
    Case("bands_bidir_C2_sq<sk", 64, False, _random_bands(False, 2, hm=16), sq=600, sk=900,
         kv_heads=1),
    Case("bands_bidir_C4_sq>sk", 192, False, _random_bands(False, 4, hm=1, batch=2, masked_batch=True),
         sq=900, sk=650, batch=2, sink=True),
    Case("bands_bidir_C4_fp16", 128, False, _random_bands(False, 4, hm=4), dtype="float16"),
    # plain causal / full attention (no indices), Sq != Sk both ways
    Case("plain_causal_sq<sk", 128, True, None, sq=700, sk=1000),
    Case("plain_causal_sq>sk", 64, True, None, sq=1000, sk=700, kv_heads=1),
    Case("plain_full", 96, False, None, sq=900, sk=1000, sink=True),
    Case("plain_full_d256", 256, False, None, sq=500, sk=777, heads=8, kv_heads=2, dtype="float16"),
]

# deterministic backward: bit-identical over 10 reruns
DETERMINISM_CASES = [
    Case("det_causal_document", 128, True, _builder(mb.causal_document_mask, [300, 200, 500], S)),
    Case("det_bands_bidir_C4_mqa", 64, False, _random_bands(False, 4, hm=1), kv_heads=1),
]
DETERMINISM_RERUNS = 10


def kernel_configs(case: Case, deterministic: bool = False):
    """(forward config, backward config) the host API picks for ``case``."""
    from paddle_flashmask.ops.cute import interface

    fwd = interface.forward_config(case.dtype, case.head_dim, case.causal, case.num_columns, case.sink)
    bwd = interface.backward_config(case.dtype, case.head_dim, case.causal, case.num_columns,
                                    gqa=case.heads != case.kv_heads, has_sink=case.sink,
                                    deterministic=deterministic)
    return fwd, bwd
