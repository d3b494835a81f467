"""Mask-aware context parallelism (issue 7).

``planner`` (numpy only) balances query-row chunks over ranks by the mask's exact work and rewrites
the local ``startend_row_indices``; ``torch_cp`` / ``paddle_cp`` run the attention on
``torch.distributed`` / ``paddle.distributed`` (all-gathered K/V, reduce-scattered dK/dV). The
framework modules are imported lazily so this package stays numpy-only on import.
"""
from __future__ import annotations

import importlib
from typing import Any

from .planner import (PAD, ContextParallelPlan, RankMasks, assign_lpt, balance_report, chunk_work,
                      explicit_indices, gathered_indices, improve_assignment, local_form, local_masks,
                      plan_context_parallel, restrict_rows, rewrite_indices, rewrite_local_indices,
                      window_indices)

_LAZY = {"torch_cp": ".torch_cp", "paddle_cp": ".paddle_cp"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(_LAZY[name], __name__)
    raise AttributeError(f"module 'paddle_flashmask.distributed' has no attribute {name!r}")


__all__ = ["PAD", "ContextParallelPlan", "RankMasks", "assign_lpt", "balance_report", "chunk_work",
           "explicit_indices", "gathered_indices",
           "improve_assignment", "local_form", "local_masks", "plan_context_parallel",
           "restrict_rows", "rewrite_indices", "rewrite_local_indices", "window_indices"]
