"""Mask builders: turn attention patterns and training-data layouts into FlashMask indices.

numpy only (DESIGN §9). Every builder returns a :class:`FlashMask` NamedTuple
``(startend_row_indices int32 [B, Hm, S, C], causal)``, so ``flashmask_attention(q, k, v,
**mask._asdict())`` and ``to_dense(*mask)`` both work. ``to_dense`` and ``validate`` are the
semantics module's, re-exported.
"""
from ..semantics import to_dense, validate
from .attention_patterns import (causal_blockwise_mask, causal_document_mask, causal_mask,
                                 document_mask, global_sliding_window_mask, prefix_lm_causal_mask,
                                 prefix_lm_document_mask, qk_sparse_mask, random_eviction_mask,
                                 shared_question_mask, sliding_window_mask, window_mask)
from .converters import from_dense
from .flashmask import FlashMask, stack
from .pictures import boundaries_of, encode_png, parse_picture, picture, render
from .training_layouts import (CONVENTIONS, LoRAPack, PreferencePack, SFTPack, pack_lora,
                               pack_preference, pack_sft, plan_rows)

__all__ = [
    "FlashMask", "to_dense", "validate", "stack",
    "causal_mask", "window_mask", "sliding_window_mask", "global_sliding_window_mask",
    "causal_document_mask", "document_mask", "causal_blockwise_mask", "shared_question_mask",
    "prefix_lm_causal_mask", "prefix_lm_document_mask", "qk_sparse_mask", "random_eviction_mask",
    "render", "picture", "parse_picture", "boundaries_of", "encode_png",
    "pack_sft", "pack_preference", "pack_lora", "plan_rows", "SFTPack", "PreferencePack", "LoRAPack",
    "CONVENTIONS", "from_dense",
]
