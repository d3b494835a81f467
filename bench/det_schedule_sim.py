"""The deterministic backward's claim order and dQ chains as a model (not a benchmark).

What the kernel does (``flash_bwd_sm90``: ``_tile_of``, ``_dq_chain_head``, ``_sem_wait_value``,
the producer's claim passes): work items are (batch, head, key tile), each (b, h)'s key tiles
listed last first; a key tile adds its dQ to a query tile after the next higher key tile of the
same chain that visits it. Chains: ``one`` (every tile), ``parity`` (key tile % 2, the
bidirectional masks' ``dq_chains=2``), ``class`` (``BwdConfig.class_chains``: the work class of
``tile_scheduler.claim_pass`` with two passes, the list claimed once per class, heavy first).

The model replays the list on ``grid`` workers that each take the next item when free. A visited
query tile costs one unit (a partial one ``1 + partial_extra``), an item ``item_cost`` more; a
tile's add waits for its chain predecessor's add at that query tile. It checks the deadlock
argument: every predecessor a tile waits on must have been claimed before it (the lowest claimed
unfinished tile then never waits on an unclaimed one), and raises where a list breaks that.

    python3 bench/det_schedule_sim.py [--batch 2 --seqlen 8192 --heads 16 --grid 132]
"""
from __future__ import annotations

import argparse
import heapq
import os
import sys
from typing import Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from paddle_flashmask import semantics  # noqa: E402
from paddle_flashmask.ops.cute.tile_scheduler import claim_pass  # noqa: E402
from schedule_sim import tile_classes  # noqa: E402

CHAIN_RULES = ("one", "parity", "class")


class UnclaimedPredecessor(RuntimeError):
    """A tile would wait on a chain predecessor claimed after it: the list can deadlock."""


def visit_lists(indices: Optional[np.ndarray], causal: bool, seqlen: int, batch: int,
                tile_m: int = 64, tile_n: int = 128) -> list[list[np.ndarray]]:
    """Per batch row and key tile: the visited query tiles (ascending) and whether each is
    partial, from ``semantics.classify_tiles`` (mask head 0)."""
    tiles = tile_classes(indices, causal, seqlen, tile_m, tile_n, batch)
    return [[np.stack([np.flatnonzero(tiles[b, :, n] != semantics.SKIP),
                       (tiles[b, :, n] == semantics.PARTIAL)[tiles[b, :, n] != semantics.SKIP]])
             for n in range(tiles.shape[2])] for b in range(tiles.shape[0])]


def chain_of(rule: str, n: int, num_visited: int, num_m: int) -> int:
    """The dQ chain key tile ``n`` adds into (see the module docstring)."""
    if rule == "one":
        return 0
    if rule == "parity":
        return n % 2
    return claim_pass(num_visited, num_m, 2)


def claim_list(visits: list[list[np.ndarray]], heads: int, rule: str, num_m: int,
               descending: bool = True) -> list[tuple[int, int, int]]:
    """The kernel's deterministic list of (b, h, n): each (b, h)'s key tiles last first, once, or
    (``class``) once per work class, heavy class first. ``descending=False`` lists them first
    first (an order the deadlock check must reject wherever tiles share query tiles)."""
    num_n = len(visits[0])
    keys = range(num_n - 1, -1, -1) if descending else range(num_n)
    items = [(b, h, n) for b in range(len(visits)) for h in range(heads) for n in keys]
    if rule != "class":
        return items
    return sorted(items, key=lambda it: chain_of(rule, it[2], visits[it[0]][it[2]].shape[1],
                                                  num_m))  # stable: the list inside a class


def walk_steps(visit: np.ndarray, group: int, interleave: bool) -> list[tuple[int, int, bool]]:
    """(head of the group, query tile, partial) in the order a CTA walking ``group`` query heads
    takes them: each head's whole walk in turn, or (``interleave``, ``walk_interleave``) every
    head of the group per query tile."""
    tiles = list(zip(visit[0].tolist(), visit[1].tolist()))
    if interleave:
        return [(j, m, p) for m, p in tiles for j in range(group)]
    return [(j, m, p) for j in range(group) for m, p in tiles]


def replay(visits: list[list[np.ndarray]], heads: int, rule: str, grid: int, num_m: int,
           order: Optional[list] = None, item_cost: float = 2.0,
           partial_extra: float = 0.3, group: int = 1, interleave: bool = False) -> float:
    """Makespan of the deterministic schedule; raises :class:`UnclaimedPredecessor` where a tile
    would wait on a tile claimed after it. ``group`` > 1: the GQA head walk, ``heads`` KV heads
    each walking ``group`` query heads per item (``walk_steps``), one dQ chain per query head."""
    order = claim_list(visits, heads, rule, num_m) if order is None else order
    chains = {(b, n): chain_of(rule, n, v.shape[1], num_m)
              for b, row in enumerate(visits) for n, v in enumerate(row)}
    # per (b, chain, query tile): the visiting key tiles, ascending, to find each predecessor
    members: dict[tuple[int, int, int], list[int]] = {}
    for b, row in enumerate(visits):
        for n, v in enumerate(row):
            for m in v[0]:
                members.setdefault((b, chains[b, n], int(m)), []).append(n)
    # (b, head or KV head, n) -> {(head of the group, query tile): add time}
    added: dict[tuple[int, int, int], dict[tuple[int, int], float]] = {}
    free_at = [0.0] * grid
    for b, h, n in order:
        t = heapq.heappop(free_at) + item_cost
        times = {}
        for j, m, partial in walk_steps(visits[b][n], group, interleave):
            t += 1.0 + partial_extra * partial
            chain = members[b, chains[b, n], m]
            at = chain.index(n)
            if at + 1 < len(chain):  # the next higher visitor of the same chain adds first
                pred = (b, h, chain[at + 1])
                if pred not in added:
                    raise UnclaimedPredecessor(f"key tile {n} of (b={b}, h={h}) waits at query "
                                               f"tile {m} on key tile {pred[2]}, claimed "
                                               f"after it")
                t = max(t, added[pred][j, m])
            times[j, m] = t
        added[b, h, n] = times
        heapq.heappush(free_at, t)
    return max(free_at)


def main() -> None:
    from mask_zoo import make_zoo

    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=8192)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--grid", type=int, default=132)
    p.add_argument("--kv-heads", type=int, default=0,
                   help="GQA: also model the head walk (head by head, and interleaved per query "
                        "tile) against per-query-head items, one chain")
    args = p.parse_args()
    b, s = args.batch, args.seqlen
    num_m = -(-s // 64)
    print(f"deterministic backward model, B={b} S={s} H={args.heads} grid={args.grid}: "
          "makespan / total work over the grid")
    for name, mask in make_zoo(b, s, device="cpu").items():
        visits = visit_lists(mask.indices, mask.causal, s, b)
        total = sum(2.0 + v.shape[1] + 0.3 * v[1].sum() for row in visits for v in row)
        bound = total * args.heads / args.grid
        print(f"{name:22}" + "  ".join(
            f"{rule} {replay(visits, args.heads, rule, args.grid, num_m) / bound:.3f}"
            for rule in CHAIN_RULES))
        if args.kv_heads:
            group = args.heads // args.kv_heads
            walk = {mode: replay(visits, args.kv_heads, "one", args.grid, num_m, group=group,
                                 interleave=mode == "interleaved") / bound
                    for mode in ("head by head", "interleaved")}
            print(f"{'':22}walk of {group}: " + "  ".join(f"{k} {v:.3f}" for k, v in walk.items()))


if __name__ == "__main__":
    main()
