"""PaddleNLP (3.0.x) integration: make PaddleNLP's FlashMask call run paddle_flashmask.

PaddleNLP's Llama/Qwen2 ``fusion_ops.fusion_flash_attention`` looks the kernel up on
``paddle.nn.functional`` at call time::

    F.flashmask_attention(q, k, v, startend_row_indices=idx.unsqueeze(-1), causal=True)  # idx [B,1,S]
    # or, where that name is missing (older paddle):
    F.flash_attention_with_sparse_mask(q, k, v, attn_mask_start_row_indices=idx, is_causal=True)

``patch_paddlenlp()`` points both names (and ``paddle.nn.functional.flash_attention.flashmask_attention``)
at paddle_flashmask; ``unpatch_paddlenlp()`` restores exactly what was there (names that did not exist
are removed again). Both are idempotent. The patch needs only paddle: it works whether or not
PaddleNLP is importable, and PaddleNLP is imported only to install the fallback warning below.

Known silent fallback (warned once): with ``use_flash_attention=False`` PaddleNLP's eager attention
never reads ``attn_mask_startend_row_indices`` — ``LlamaModel`` then builds a plain causal mask and
packed documents attend to each other. ``patch_paddlenlp()`` wraps the module-level
``scaled_dot_product_attention`` of the Llama and Qwen2 modeling modules (layers built *after* the
patch, or passed as ``model=``) to warn when indices arrive with ``use_flash_attention`` off.

The recipe flag: :func:`apply_flash_mask_flag` reproduces what PaddleNLP's runner scripts do for
``flash_mask: true`` (force ``use_flash_attention`` and, for SFT/LoRA, ``zero_padding``) and patches.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, MutableMapping, Optional

from ._common import warn_once

_ABSENT = object()
_saved: list[tuple[Any, str, Any]] = []           # (owner, attribute, previous value or _ABSENT)
MODELING_MODULES = ("paddlenlp.transformers.llama.modeling", "paddlenlp.transformers.qwen2.modeling")


def _frontend() -> Any:
    return importlib.import_module("paddle_flashmask.paddle_frontend")


def flashmask_attention(*args, **kwargs):
    """``paddle.nn.functional.flashmask_attention`` replacement (same signature): paddle_flashmask."""
    return _frontend().flashmask_attention(*args, **kwargs)


def flash_attention_with_sparse_mask(query, key, value, attn_mask_start_row_indices=None,
                                     attn_mask_start_row: int = 0, dropout_p: float = 0.0,
                                     is_causal: bool = False, return_softmax: bool = False,
                                     return_softmax_lse: bool = False,
                                     return_seed_offset: bool = False, training: bool = True,
                                     name: Optional[str] = None):
    """The pre-3.0 Paddle name: ``attn_mask_start_row_indices`` ``[B, Hm, S]`` (LTS), causal only.

    ``attn_mask_start_row`` was a skipping hint (the smallest start row) and does not change the
    result, so it is accepted and ignored; ``return_softmax=True`` is refused (the probabilities
    are never materialised).
    """
    frontend = _frontend()
    if return_softmax:
        raise NotImplementedError("return_softmax: expected False, found True (paddle_flashmask "
                                  "never materialises the attention probabilities)")
    idx = attn_mask_start_row_indices
    if idx is None or idx.ndim != 3:
        raise ValueError("attn_mask_start_row_indices: expected an int32 [B, Hm, S] tensor, found "
                         f"{None if idx is None else list(idx.shape)}")
    idx = idx.unsqueeze(-1)
    return frontend.flashmask_attention(query, key, value, idx, dropout=dropout_p, causal=is_causal,
                                        return_softmax_lse=return_softmax_lse,
                                        return_seed_offset=return_seed_offset, training=training,
                                        name=name)


def _set(owner: Any, attr: str, value: Any) -> None:
    _saved.append((owner, attr, getattr(owner, attr, _ABSENT)))
    setattr(owner, attr, value)


def _warn_eager_fallback(original: Callable) -> Callable:
    @functools.wraps(original)
    def scaled_dot_product_attention(query_states, config, *args, **kwargs):
        indices = kwargs.get("attn_mask_startend_row_indices")
        if indices is None and len(args) >= 6:      # positional: key, value, mask, output_attn, alibi, idx
            indices = args[5]
        if indices is not None and not getattr(config, "use_flash_attention", False):
            warn_once("paddlenlp-eager-ignores-indices",
                      "PaddleNLP eager attention (use_flash_attention=False) ignores "
                      "attn_mask_startend_row_indices and applies a plain causal mask, so packed "
                      "documents attend to each other. Set use_flash_attention: true (PaddleNLP's "
                      "runners do so for flash_mask: true) with paddle_flashmask patched in.")
        return original(query_states, config, *args, **kwargs)
    scaled_dot_product_attention.__paddle_flashmask_wrapped__ = original
    return scaled_dot_product_attention


def is_patched() -> bool:
    import paddle.nn.functional as F
    return getattr(F, "flashmask_attention", None) is flashmask_attention


def patch_paddlenlp(model: Any = None, warn_fallbacks: bool = True) -> None:
    """Route PaddleNLP's FlashMask calls to paddle_flashmask (idempotent; undo with unpatch).

    ``model``: an already built PaddleNLP model whose attention layers should get the
    fallback warning too (layers built after the patch get it anyway).
    """
    import paddle.nn.functional as F
    if not is_patched():
        import paddle.nn.functional.flash_attention as fa_module
        _set(F, "flashmask_attention", flashmask_attention)
        _set(F, "flash_attention_with_sparse_mask", flash_attention_with_sparse_mask)
        _set(fa_module, "flashmask_attention", flashmask_attention)
        if warn_fallbacks:
            for name in MODELING_MODULES:
                try:
                    module = importlib.import_module(name)
                except Exception:  # PaddleNLP absent or broken: the F patch alone still works
                    continue
                sdpa = getattr(module, "scaled_dot_product_attention", None)
                if sdpa is not None and not hasattr(sdpa, "__paddle_flashmask_wrapped__"):
                    _set(module, "scaled_dot_product_attention", _warn_eager_fallback(sdpa))
    if model is not None and warn_fallbacks:
        for layer in model.sublayers(include_self=True):
            func = getattr(layer, "attn_func", None)
            target = func.func if isinstance(func, functools.partial) else func
            if target is None or hasattr(target, "__paddle_flashmask_wrapped__"):
                continue
            if getattr(target, "__name__", "") == "scaled_dot_product_attention":
                wrapped = _warn_eager_fallback(target)
                new = functools.partial(wrapped, *func.args, **func.keywords) if isinstance(func, functools.partial) else wrapped
                _set(layer, "attn_func", new)


def unpatch_paddlenlp() -> None:
    """Restore every attribute :func:`patch_paddlenlp` replaced, in reverse order (idempotent)."""
    while _saved:
        owner, attr, previous = _saved.pop()
        if previous is _ABSENT:
            if attr in vars(owner):
                delattr(owner, attr)
        else:
            setattr(owner, attr, previous)


def apply_flash_mask_flag(config: MutableMapping[str, Any], stage: str = "sft") -> MutableMapping[str, Any]:
    """Honour ``flash_mask: true`` in a trainer config dict the way PaddleNLP's runners do.

    Forces ``use_flash_attention`` (and ``zero_padding`` for ``stage`` sft/lora — DPO/RM runners
    only force the former), warns once when it had to, and calls :func:`patch_paddlenlp`.
    Returns the (mutated) config. ``flash_mask`` false/absent: only the fallback check runs.
    """
    if stage not in ("sft", "lora", "dpo", "rm"):
        raise ValueError(f"stage: expected one of 'sft', 'lora', 'dpo', 'rm', found {stage!r}")
    if config.get("flash_mask"):
        forced = [k for k in (("use_flash_attention", "zero_padding") if stage in ("sft", "lora")
                              else ("use_flash_attention",)) if not config.get(k)]
        for key in forced:
            config[key] = True
        if forced:
            warn_once(f"paddlenlp-flash-mask-forces-{'-'.join(forced)}",
                      f"flash_mask: true needs {' and '.join(forced)}: turned on (as PaddleNLP's "
                      "runner scripts do).")
        patch_paddlenlp()
    return config
