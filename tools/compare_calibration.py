"""Per-FFN simulator cosine of two INT8 builds side by side (run by hand; docs/precision.md records it).

Each input is the accuracy.json of `harness accuracy --backend rknn-sim --partition CONVERTED` for a
w8a8-ffn conversion calibrated one way (e.g. `capture-calibration --preset board-112` and
`--preset full-schedule`). Prints every FFN's worst cosine over the steps for each build, and the
worst FFN cosine at each step (where in the schedule the INT8 ranges do not reach).

    .venv/bin/python tools/compare_calibration.py board-112=out/acc-board/accuracy.json \\
        full-schedule=out/acc-full/accuracy.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def ffn_cosines(path: Path) -> dict[int, dict[int, float]]:
    """{subgraph: {step: cosine}} of the FFN rows of an accuracy.json."""
    rows = json.loads(Path(path).read_text())["rows"]
    out: dict[int, dict[int, float]] = {}
    for r in rows:
        if r["branch"] == "ffn":
            out.setdefault(r["subgraph"], {})[r["step"]] = r["cosine"]
    return out


def main(argv=None) -> int:
    pairs = [a.split("=", 1) for a in (argv if argv is not None else sys.argv[1:])]
    if len(pairs) < 2 or any(len(p) != 2 for p in pairs):
        print(__doc__, file=sys.stderr)
        return 2
    builds = {name: ffn_cosines(Path(path)) for name, path in pairs}
    names = list(builds)
    print("per-FFN worst cosine over the steps (step of the worst in brackets)")
    print(f"{'FFN':>10s}  " + "  ".join(f"{n:>22s}" for n in names))
    for sub in sorted(builds[names[0]]):
        cells = []
        for n in names:
            steps = builds[n][sub]
            worst = min(steps, key=steps.get)
            cells.append(f"{steps[worst]:.7f} (step {worst:2d})")
        print(f"{'subgraph ' + str(sub):>10s}  " + "  ".join(f"{c:>22s}" for c in cells))
    for n in names:
        worst = [min(s.values()) for s in builds[n].values()]
        print(f"{n}: lowest {min(worst):.7f}, median of the per-FFN worst {sorted(worst)[len(worst) // 2]:.7f}, "
              f"{sum(w < 0.9999 for w in worst)} of {len(worst)} FFNs below 0.9999")
    print("\nworst FFN cosine at each step")
    steps = sorted(next(iter(builds[names[0]].values())))
    for n in names:
        print(f"{n:>14s}: " + " ".join(f"{min(c[s] for c in builds[n].values()):.5f}" for s in steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
