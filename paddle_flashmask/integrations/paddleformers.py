"""PaddleFormers (1.x) integration: a ``flashmask`` attention backend backed by paddle_flashmask.

PaddleFormers models pick their attention function with ``config._attn_implementation`` from
``paddleformers.nn.attention.interface.AttentionInterface`` (a class-wide mapping). ``register_paddleformers()``
installs our function there under ``"flashmask"`` (replacing PaddleFormers' own, which calls
``paddle.nn.functional.flashmask_attention`` and only runs on CUDA/XPU builds) and under
``"paddle_flashmask"``; ``unregister_paddleformers()`` puts the previous entries back.

Call contract (what PaddleFormers' Llama/Qwen attention layers pass):
``fn(module, query, key, value, attention_mask=None, attn_mask_startend_row_indices=None,
dropout=0.0, sink=None, scaling=None, is_causal=None, **kw) -> (out [b, l, h*d], None)`` with
q/k/v ``[b, h, l, d]`` (k/v may have fewer heads: GQA).

* indices ``[b, Hm, l]`` (3-D, promoted) or ``[b, Hm, l, C]``: width 1 -> causal, width 4 -> not
  causal, width 2 -> ``is_causal`` (default True), as PaddleFormers' own backend decides;
* indices ``None`` and ``attention_mask`` ``None``: plain attention, causal unless the layer says
  ``is_causal=False`` or there is a single query row;
* indices ``None`` and a dense ``attention_mask`` (PaddleFormers builds one for non-eager backends
  when the batch has padding): converted exactly to indices on the host (see
  :func:`paddle_flashmask.integrations._common.dense_to_startend`), else ``NotImplementedError``;
* ``sink`` ``[h]`` -> ``learnable_sink``; ``scaling`` -> ``softmax_scale``; ``dropout`` is passed
  on (the op raises ``NotImplementedError`` for dropout > 0 rather than ignoring it).

With ``warn_fallbacks=True`` the ``"sdpa"`` entry is wrapped so that it warns once when it is about
to drop the mask: on CPU, PaddleFormers' sdpa passes the rebuilt dense mask together with
``is_causal=True`` and paddle's CPU ``scaled_dot_product_attention`` then ignores the mask, so
packed documents attend to each other without any error.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ._common import additive_or_bool_to_visible, dense_to_startend, warn_once

BACKEND_NAMES = ("flashmask", "paddle_flashmask")
_saved: dict[str, Any] = {}          # name -> previous mapping entry (or _ABSENT)
_ABSENT = object()


def _interface():
    try:
        from paddleformers.nn.attention.interface import AttentionInterface
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("paddle_flashmask.integrations.paddleformers needs PaddleFormers: "
                          "pip install 'paddle_flashmask[paddleformers]' (paddleformers==1.2.0, "
                          "pyarrow==21.0.0)") from exc
    return AttentionInterface


def _op() -> Callable:
    import paddle_flashmask
    return paddle_flashmask.flashmask_attention


def _indices_from_dense_mask(attention_mask, is_causal: Optional[bool]):
    import paddle
    if attention_mask.dtype != paddle.bool:     # bf16/fp16 .numpy() would give raw bit patterns
        attention_mask = attention_mask.astype("float32")
    visible = additive_or_bool_to_visible(attention_mask.numpy())
    if visible.ndim == 2:           # [b, s] key padding: not expected here, but cheap to honour
        raise ValueError("attention_mask: expected a 4-D mask [b, 1|h, q_len, kv_len] in the "
                         f"attention backend, found shape {list(attention_mask.shape)}")
    idx, causal = dense_to_startend(visible, causal=True if is_causal is None else bool(is_causal))
    return paddle.to_tensor(idx, dtype="int32", place=attention_mask.place), causal


def flashmask_attention_forward(module, query, key, value, attention_mask=None,
                                attn_mask_startend_row_indices=None, dropout: float = 0.0,
                                sink=None, scaling: Optional[float] = None,
                                is_causal: Optional[bool] = None, **kwargs):
    """PaddleFormers ``AttentionInterface`` backend running paddle_flashmask (see module doc)."""
    import paddle
    q = query.transpose([0, 2, 1, 3])       # [b, h, l, d] -> [b, l, h, d]
    k = key.transpose([0, 2, 1, 3])
    v = value.transpose([0, 2, 1, 3])
    idx = attn_mask_startend_row_indices
    if idx is not None:
        if idx.ndim == 3:
            idx = idx.unsqueeze(-1)
        if idx.ndim != 4:
            raise ValueError("attn_mask_startend_row_indices: expected a 3-D or 4-D int32 tensor, "
                             f"found shape {list(idx.shape)}")
        width = int(idx.shape[-1])
        causal = True if width == 1 else False if width == 4 else (True if is_causal is None else bool(is_causal))
    elif attention_mask is not None:
        idx, causal = _indices_from_dense_mask(attention_mask, is_causal)
    else:
        causal = (q.shape[1] > 1 and getattr(module, "is_causal", True)) if is_causal is None else bool(is_causal)
    if idx is not None and idx.dtype != paddle.int32:
        idx = idx.astype("int32")
    out = _op()(q, k, v, idx, dropout=float(dropout or 0.0), causal=bool(causal),
                softmax_scale=scaling, learnable_sink=sink,
                training=bool(getattr(module, "training", True)))
    if isinstance(out, (tuple, list)):
        out = out[0]
    out = out.reshape([out.shape[0], out.shape[1], out.shape[2] * out.shape[3]])
    return out, None


def _sdpa_drops_mask(query, attention_mask, indices, is_causal) -> bool:
    """Would PaddleFormers 1.2 sdpa call paddle's SDPA with a mask AND is_causal=True on CPU?"""
    if indices is None and attention_mask is None:
        return False
    on_cpu = query.place.is_cpu_place()
    if indices is not None:
        width = 1 if indices.ndim == 3 else int(indices.shape[-1])
        return on_cpu and width == 1
    return on_cpu and is_causal is True


def _wrap_sdpa(original: Callable) -> Callable:
    def sdpa_with_fallback_warning(module, query, key, value, attention_mask=None,
                                   attn_mask_startend_row_indices=None, *args, **kwargs):
        if _sdpa_drops_mask(query, attention_mask, attn_mask_startend_row_indices,
                            kwargs.get("is_causal")):
            warn_once("paddleformers-sdpa-cpu",
                      "PaddleFormers 'sdpa' attention on CPU drops the attention mask: it calls "
                      "paddle's scaled_dot_product_attention with the mask and is_causal=True, and "
                      "the CPU kernel then ignores the mask, so packed documents attend to each "
                      "other. Use _attn_implementation='flashmask' (paddle_flashmask) or 'eager'.")
        return original(module, query, key, value, attention_mask,
                        attn_mask_startend_row_indices, *args, **kwargs)
    sdpa_with_fallback_warning.__wrapped__ = original
    return sdpa_with_fallback_warning


def register_paddleformers(names: tuple[str, ...] = BACKEND_NAMES, warn_fallbacks: bool = True) -> None:
    """Install the paddle_flashmask backend under ``names`` (idempotent; undo with unregister)."""
    mapping = _interface()._global_mapping
    for name in names:
        if mapping.get(name, _ABSENT) is flashmask_attention_forward:
            continue
        _saved.setdefault(name, mapping.get(name, _ABSENT))
        mapping[name] = flashmask_attention_forward
    sdpa = mapping.get("sdpa")
    if warn_fallbacks and sdpa is not None and not hasattr(sdpa, "__wrapped__"):
        _saved.setdefault("sdpa", sdpa)
        mapping["sdpa"] = _wrap_sdpa(sdpa)


def unregister_paddleformers() -> None:
    """Restore every ``AttentionInterface`` entry :func:`register_paddleformers` replaced."""
    if not _saved:
        return
    mapping = _interface()._global_mapping
    for name, previous in list(_saved.items()):
        if previous is _ABSENT:
            mapping.pop(name, None)
        else:
            mapping[name] = previous
    _saved.clear()


def is_registered() -> bool:
    """True while our backend is installed under ``"flashmask"``."""
    return _interface()._global_mapping.get("flashmask") is flashmask_attention_forward


def configure_model_config(config, flash_mask: bool = True) -> Any:
    """Apply the recipe flag ``flash_mask`` to a PaddleFormers model config (returns it).

    ``flash_mask: true`` registers the backend and selects it (``_attn_implementation='flashmask'``);
    on CPU it also turns off ``fuse_rms_norm`` (that fused kernel has no CPU build in paddle 3.3).
    """
    import paddle
    if flash_mask:
        register_paddleformers()
        config._attn_implementation = "flashmask"
    if not paddle.is_compiled_with_cuda():
        config.fuse_rms_norm = False
    return config
