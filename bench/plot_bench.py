"""The benchmark's plot: fwd and fwd+bwd TFLOP/s (unmasked pairs) per mask and system, one row
per shape. ``bench_attention.py`` draws it after each run; this CLI redraws saved runs on any
machine (no GPU, no triton)::

    python bench/plot_bench.py bench/results/bench-s31_cases0.json   # -> bench-s31_cases0.png
"""
from __future__ import annotations

import argparse
import json
import os


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "fwd_tflops" in r]
    cases = sorted({(r["B"], r["S"], r["H"], r["Hk"], r["D"]) for r in ok})
    if not ok:
        return
    fig, axes = plt.subplots(len(cases), 2, figsize=(16, 4 * len(cases)), squeeze=False)
    systems = sorted({r["system"] for r in ok})
    for row, case in enumerate(cases):
        rs = [r for r in ok if (r["B"], r["S"], r["H"], r["Hk"], r["D"]) == case]
        masks = list(dict.fromkeys(r["mask"] for r in rs))
        for col, key in enumerate(("fwd_tflops", "fwdbwd_tflops")):
            ax = axes[row][col]
            width = 0.8 / len(systems)
            for i, s in enumerate(systems):
                vals = [next((r[key] for r in rs if r["mask"] == m and r["system"] == s), 0) for m in masks]
                ax.bar([x + i * width for x in range(len(masks))], vals, width, label=s)
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(masks))])
            ax.set_xticklabels(masks, rotation=25, ha="right", fontsize=8)
            ax.set_ylabel("TFLOP/s (unmasked pairs)")
            ax.set_title(f"{'fwd' if col == 0 else 'fwd+bwd'}  B={case[0]} S={case[1]} H={case[2]}/{case[3]} D={case[4]}")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="bench-TAG.json files; each plot is written beside it")
    for path in ap.parse_args().json:
        with open(path) as f:
            plot(json.load(f)["results"], os.path.splitext(path)[0] + ".png")


if __name__ == "__main__":
    main()
