"""How close a persistent grid's claim order comes to the best makespan (a model, not a benchmark).

Each forward work item is one query tile of one (batch, head); its cost is modelled as the key
tiles it visits (``semantics.classify_tiles``: partial tiles weigh ``1 + partial_extra``) plus a
fixed per-item cost ``item_cost`` (Q load, epilogue). ``grid`` workers take the next item of a
list as soon as they are free (the forward's dynamic schedule). Printed per mask of the benchmark
zoo: makespan / max(total / grid, heaviest item) for

* ``current``: the kernel's list, (batch, head) groups in order, last query tile first inside one
  (``--backward``: key tiles, first one first);
* ``classes``: work classes ``floor(log2(key tiles))``, heaviest class first, the current order
  inside a class (heads stay together, so K/V stay in L2 as in ``current``);
* ``global-LPT``: every item heaviest first (heads interleaved; the work-ordered scheduler's goal);
* ``key-major`` (``--backward``): ``BwdConfig.key_major``, key tile n of every head, then n + 1;
* ``3-pass``: ``BwdConfig.claim_passes = 3``, the list claimed three times, pass p taking work
  class p of ``tile_scheduler.claim_pass`` (>= 1/4 of the tiles, >= 1/16, the rest).

    python3 bench/schedule_sim.py [--batch 4 --seqlen 8192 --heads 16 --grid 132] [--backward]
"""
from __future__ import annotations

import argparse
import heapq
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from mask_zoo import make_zoo  # noqa: E402
from paddle_flashmask import semantics  # noqa: E402
from paddle_flashmask.ops.cute.tile_scheduler import claim_pass  # noqa: E402


def makespan(costs: list[float], grid: int) -> float:
    """Finish time of ``grid`` workers each taking the next cost of the list when free."""
    free_at = [0.0] * grid
    for cost in costs:
        heapq.heappush(free_at, heapq.heappop(free_at) + cost)
    return max(free_at)


def item_costs(visited: np.ndarray, partial: np.ndarray, item_cost: float = 2.0,
               partial_extra: float = 0.3) -> np.ndarray:
    """The model's cost of each work item, in key tiles: its visited tiles, partial ones weighing
    ``1 + partial_extra``, plus ``item_cost`` (Q load, epilogue); 0 for an item with no tile."""
    return np.where(visited > 0, visited + partial_extra * partial + item_cost, 0.0)


def tile_classes(indices, causal: bool, seqlen: int, tile_m: int, tile_n: int,
                 batch: int) -> np.ndarray:
    """``semantics.classify_tiles`` of mask head 0, ``[batch, query tiles, key tiles]``; plain
    causal / full (``indices`` None) as columns whose bands mask nothing (LTS = Sq, UTE = 0)."""
    if indices is None:
        nothing = [seqlen] if causal else [seqlen, 0]
        indices = np.broadcast_to(np.array(nothing, np.int32), (batch, 1, seqlen, len(nothing)))
    return semantics.classify_tiles(semantics.tile_summary(indices, tile_n), causal, seqlen,
                                    tile_m)[:, 0]


def visited_tiles(indices, causal: bool, seqlen: int, tile_m: int, tile_n: int, batch: int,
                  backward: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(visited, partial) tiles per [batch, work item] (mask head 0): key tiles per query tile
    (forward items), or with ``backward`` query tiles per key tile (backward items)."""
    tiles = tile_classes(indices, causal, seqlen, tile_m, tile_n, batch)
    axis = -2 if backward else -1
    return (tiles != semantics.SKIP).sum(axis), (tiles == semantics.PARTIAL).sum(axis)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seqlen", type=int, default=8192)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--grid", type=int, default=132)
    p.add_argument("--tile", type=int, default=128)
    p.add_argument("--item-cost", type=float, default=2.0, help="per-item cost in key tiles")
    p.add_argument("--partial-extra", type=float, default=0.3)
    p.add_argument("--backward", action="store_true",
                   help="backward items: key tiles (tile_n) visiting 64-row query tiles; the "
                        "current list is a head's key tiles in ascending order")
    args = p.parse_args()
    b, s, h, grid, tile = args.batch, args.seqlen, args.heads, args.grid, args.tile
    tile_m, tile_n = (64, tile) if args.backward else (tile, tile)
    zoo = make_zoo(b, s, device="cpu")
    print(f"{'backward' if args.backward else 'forward'} B={b} S={s} H={h} grid={grid} tile "
          f"{tile_m}x{tile_n}; makespan / lower bound")
    for name, mask in zoo.items():
        visited, partial = visited_tiles(mask.indices, mask.causal, s, tile_m, tile_n, b,
                                         args.backward)
        cost = item_costs(visited, partial, args.item_cost, args.partial_extra)
        nm = cost.shape[1]
        items = [(bi, hi, r if args.backward else nm - 1 - r)
                 for bi in range(b) for hi in range(h) for r in range(nm)]
        work_class = {it: int(np.log2(max(visited[it[0], it[2]], 1))) for it in items}
        orders = {
            "current": items,
            "classes": sorted(items, key=lambda it: -work_class[it]),  # stable: current inside
            "global-LPT": sorted(items, key=lambda it: -cost[it[0], it[2]]),
        }
        if args.backward:  # BwdConfig.key_major: key tile n of every head of a batch, then n + 1
            orders["key-major"] = sorted(items, key=lambda it: (it[0], it[2], it[1]))
        # BwdConfig.claim_passes = 3: the kernel's own rule (tile_scheduler.claim_pass)
        visitable = -(-s // (tile_m if args.backward else tile_n))  # the other side's tiles
        orders["3-pass"] = sorted(items, key=lambda it: claim_pass(int(visited[it[0], it[2]]),
                                                                   visitable, 3))
        costs = [cost[it[0], it[2]] for it in items]
        bound = max(sum(costs) / grid, max(costs))
        print(f"{name:22}" + "  ".join(
            f"{label} {makespan([cost[it[0], it[2]] for it in order], grid) / bound:.3f}"
            for label, order in orders.items()))


if __name__ == "__main__":
    main()
