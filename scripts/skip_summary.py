"""One line per skipping-test report (tests/gpu/test_skipping.py's PFM_GPU_REPORT JSON): the
backward's time over tiles, full / doc16 times and the doc16 per-kernel times (A/B runs)."""
from __future__ import annotations

import json
import sys


def main(paths: list[str]) -> None:
    for path in sorted(paths):
        r = json.load(open(path))["skipping_32k"]["bwd"]
        kernels = {name[-14:]: us for name, us in r["kernels_us_doc16"].items()}
        print(path.rsplit("/", 1)[-1], f"bwd time/tiles {r['time_over_tiles']:.3f}",
              f"full {r['ms_full']:.2f} ms", f"doc16 {r['ms_doc16']:.3f} ms",
              f"full main {max(r['kernels_us_full'].values()):.0f} us", kernels)


if __name__ == "__main__":
    main(sys.argv[1:])
