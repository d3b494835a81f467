"""paddle_flashmask: FlashMask attention (column-wise sparse masks) for PaddlePaddle and PyTorch.

Importing the package needs neither framework: the Paddle frontend (``flashmask_attention``) and
the builders are loaded on first use; ``paddle_flashmask.torch`` is the PyTorch frontend.
"""
from __future__ import annotations

import importlib
from typing import Any

from .semantics import (FULL, PARTIAL, SKIP, TileSummary, attention_flops, classify_tiles,
                        count_visible_pairs, tile_summary, to_dense, validate)

__version__ = "0.1.0"

# name -> module that defines it; resolved lazily so `import paddle_flashmask` stays numpy-only.
_LAZY = {
    "flashmask_attention": ".paddle_frontend",
    "flash_attention_with_sparse_mask": ".paddle_frontend",
    "mask_builders": ".mask_builders",
    "FlashMask": ".mask_builders",
    "last_backend": ".ops.backend",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name], __name__)
        return module if name == "mask_builders" else getattr(module, name)
    raise AttributeError(f"module 'paddle_flashmask' has no attribute {name!r}")


__all__ = ["FULL", "PARTIAL", "SKIP", "TileSummary", "attention_flops", "classify_tiles",
           "count_visible_pairs", "tile_summary", "to_dense", "validate", *_LAZY]
