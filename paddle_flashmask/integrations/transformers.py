"""Hugging Face ``transformers`` (PyTorch) integration: ``attn_implementation="paddle_fmask"``.

``register_transformers()`` adds our torch op (``paddle_flashmask.torch.flashmask_attention``) to
``transformers.AttentionInterface`` and a matching mask function to
``transformers.masking_utils.AttentionMaskInterface`` under the name ``"paddle_fmask"``, so::

    register_transformers()
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="paddle_fmask")

Why not ``"paddle_flashmask"``: transformers 5 treats every implementation name containing
``"flash"`` as a FlashAttention variant (``utils.generic.is_flash_attention_requested`` is a
substring test used in ~100 places) and tries to import ``flash_attn`` or a Hub kernel for it at
model construction, which fails. ``register_transformers(name=...)`` takes any other name; the
name is also accepted by transformers 4.x, where that rule does not exist.

How the FlashMask reaches the op (first match wins; q/k/v arrive ``[b, h, l, d]``):

1. ``attn_mask_startend_row_indices=`` passed to the model's forward (any FlashMask: int32
   ``[B, Hm, S, C]``, ``[B, Hm, S]`` or ``[B, S]``; width 1 -> causal, 4 -> bidirectional, 2 ->
   the layer's ``is_causal``). transformers forwards unknown keyword arguments of
   ``model(...)`` down to the attention function, so a packed batch built with
   ``paddle_flashmask.mask_builders`` goes in unchanged.
2. packed sequences described by ``position_ids`` (the convention of transformers'
   ``DataCollatorWithFlattening``: a new document starts wherever ``position_ids`` does not
   increase by exactly 1): document ``k`` covering tokens ``[s_k, e_k)`` becomes ``LTS = e_k`` on
   its columns — a causal document mask, O(S) to build, no dense mask. Used when there is no KV
   cache (q_len == kv_len), as transformers itself does.
3. a 2-D padding ``attention_mask`` (``[B, kv_len]``, 1 = token): padded key columns get
   ``LTS = 0`` (hidden from every row), i.e. exactly causal AND key-not-padded, as transformers'
   sdpa/eager masks.
4. a 4-D mask (a model or user supplied one, or extra ``or/and_mask_function``s): converted exactly
   to indices on the host when it has a column-interval form, else ``NotImplementedError``.
5. nothing: plain (causal) attention.

``sliding_window`` (Mistral/Gemma-style layers) becomes ``LTS = min(LTS, j + window)`` on a causal
one-column mask (row i sees key j iff i - j < window, transformers' rule). ``softcap`` is refused.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ._common import additive_or_bool_to_visible, dense_to_startend

NAME = "paddle_fmask"
_registered: dict[str, bool] = {}


def _torch_op() -> Callable:
    from paddle_flashmask.torch import flashmask_attention
    return flashmask_attention


def startend_from_position_ids(position_ids):
    """int32 ``[B, 1, S, 1]`` causal document mask from packed ``position_ids`` ``[B, S]``."""
    import torch
    b, s = position_ids.shape
    new_doc = torch.ones((b, s), dtype=torch.bool, device=position_ids.device)
    new_doc[:, 1:] = (position_ids[:, 1:] - position_ids[:, :-1]) != 1
    cols = torch.arange(s, device=position_ids.device).expand(b, s)
    starts = torch.where(new_doc, cols, torch.full_like(cols, s))
    next_start = torch.full_like(starts, s)
    next_start[:, :-1] = starts[:, 1:]
    # end of the document holding column j = first document start after j (suffix minimum)
    ends = torch.flip(torch.cummin(torch.flip(next_start, [1]), dim=1).values, [1])
    return ends.to(torch.int32)[:, None, :, None]


def _as_4d(idx):
    if idx.dim() == 2:
        idx = idx[:, None, :]
    if idx.dim() == 3:
        idx = idx[..., None]
    if idx.dim() != 4:
        raise ValueError("attn_mask_startend_row_indices: expected [B, S], [B, Hm, S] or "
                         f"[B, Hm, S, C], found shape {tuple(idx.shape)}")
    import torch
    return idx.to(dtype=torch.int32)


def resolve_flashmask(module, query, key, attention_mask, kwargs: dict) -> tuple[Any, bool]:
    """The ``(startend_row_indices or None, causal)`` the op gets (rules 1-5 of the module doc)."""
    import torch
    layer_causal = bool(getattr(module, "is_causal", True))
    q_len, kv_len = query.shape[2], key.shape[2]
    idx = kwargs.get("attn_mask_startend_row_indices")
    if idx is not None:
        idx = _as_4d(torch.as_tensor(idx, device=query.device))
        width = idx.shape[-1]
        return idx, True if width == 1 else False if width == 4 else layer_causal
    position_ids = kwargs.get("position_ids")
    if position_ids is not None and attention_mask is None and q_len == kv_len and q_len > 1:
        if position_ids.shape[0] != query.shape[0]:
            position_ids = position_ids.expand(query.shape[0], -1)
        return startend_from_position_ids(position_ids), True
    if attention_mask is not None and attention_mask.dim() == 2:
        valid = attention_mask[:, -kv_len:].to(torch.bool)
        lts = torch.where(valid, torch.full_like(valid, q_len, dtype=torch.int32),
                          torch.zeros_like(valid, dtype=torch.int32))
        if layer_causal:
            return lts[:, None, :, None], True
        return torch.stack([lts, torch.zeros_like(lts)], dim=-1)[:, None], False
    if attention_mask is not None:
        mask = attention_mask.detach()
        mask = mask if mask.dtype == torch.bool else mask.float()    # numpy has no bf16
        visible = additive_or_bool_to_visible(mask.cpu().numpy())
        idx_np, causal = dense_to_startend(visible, causal=layer_causal)
        return torch.from_numpy(np.ascontiguousarray(idx_np)).to(query.device), causal
    return None, layer_causal and q_len > 1


def _apply_sliding_window(idx, causal: bool, window: int, seqlen: int):
    import torch
    if not causal:
        raise NotImplementedError("sliding_window: expected a causal layer, found a bidirectional one")
    if idx is None:
        idx = torch.full((1, 1, seqlen, 1), seqlen, dtype=torch.int32)
    if idx.shape[-1] != 1:
        raise NotImplementedError("sliding_window: expected a one-column causal FlashMask to combine "
                                  f"with, found {idx.shape[-1]} columns")
    limit = torch.arange(seqlen, device=idx.device, dtype=torch.int32).view(1, 1, seqlen, 1) + int(window)
    return torch.minimum(idx, limit)


def paddle_flashmask_attention_forward(module, query, key, value, attention_mask,
                                       dropout: float = 0.0, scaling: Optional[float] = None,
                                       sliding_window: Optional[int] = None,
                                       softcap: Optional[float] = None, **kwargs):
    """transformers attention function: q/k/v ``[b, h, l, d]`` -> (``[b, l, h, d]``, None)."""
    if softcap is not None:
        raise NotImplementedError(f"softcap: expected None, found {softcap} (logit soft-capping is "
                                  "not part of FlashMask)")
    idx, causal = resolve_flashmask(module, query, key, attention_mask, kwargs)
    if sliding_window is not None:
        idx = _apply_sliding_window(idx, causal, sliding_window, key.shape[2])
    out = _torch_op()(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), idx,
                      dropout=float(dropout or 0.0), causal=causal, softmax_scale=scaling,
                      learnable_sink=kwargs.get("s_aux"), training=bool(module.training))
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out, None


def paddle_flashmask_mask(batch_size: int, cache_position, kv_length: int, kv_offset: int = 0,
                          mask_function: Optional[Callable] = None, attention_mask=None,
                          use_vmap: bool = False, **kwargs):
    """transformers mask-interface entry: keep the mask O(S) whenever the pattern allows.

    No padding and no extra mask functions -> ``None`` (packing is read from ``position_ids``
    in the attention function); padding only -> the 2-D bool padding mask; extra
    ``or/and_mask_function``s -> transformers' own dense bool mask (converted exactly later).
    """
    from transformers.masking_utils import sdpa_mask
    if use_vmap:
        return sdpa_mask(batch_size=batch_size, cache_position=cache_position, kv_length=kv_length,
                         kv_offset=kv_offset, mask_function=mask_function,
                         attention_mask=attention_mask, allow_is_causal_skip=False,
                         allow_torch_fix=False, use_vmap=True)
    if attention_mask is None or bool(attention_mask.all()):
        return None
    import torch
    return attention_mask[:, kv_offset:kv_offset + kv_length].to(torch.bool)


def register_transformers(name: str = NAME) -> None:
    """Register the attention and mask functions under ``name`` (idempotent)."""
    if "flash" in name:
        raise ValueError(f"name: expected an attention name without 'flash' (transformers treats those as "
                         f"FlashAttention kernels to import), found {name!r}")
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(name, paddle_flashmask_attention_forward)
    AttentionMaskInterface.register(name, paddle_flashmask_mask)
    _registered[name] = True


def unregister_transformers(name: str = NAME) -> None:
    """Remove what :func:`register_transformers` added (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    if AttentionInterface._global_mapping.get(name) is paddle_flashmask_attention_forward:
        del AttentionInterface._global_mapping[name]
    if AttentionMaskInterface._global_mapping.get(name) is paddle_flashmask_mask:
        del AttentionMaskInterface._global_mapping[name]
    _registered.pop(name, None)
