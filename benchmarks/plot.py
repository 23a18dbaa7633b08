#!/usr/bin/env python3
"""Plots of a benchmark JSON (the format of SPEC.md, as bench.py writes it).

One PNG per op, dtype and kind of reduction: GB/s of the least traffic against the length of
the reduced slice (log2 axis), one line per provider (dashed: timed inside CUDA graphs),
with the copy bandwidth of the same run drawn as the ceiling. Wrong results (`"ok": false`)
are drawn as red crosses, never joined into a provider's line.

    python benchmarks/plot.py benchmarks/results/h100.json out/
    python benchmarks/bench.py --from-json benchmarks/results/h100.json --plot out/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: works on a machine without a display
import matplotlib.pyplot as plt

KINDS = {
    "rows": "2-D input, reduced over the last dim (x: row length)",
    "cols": "2-D input, reduced over dim 0 (x: column length)",
    "all": "1-D input, reduced whole (x: elements)",
    "dims": "input of 3 or more dims, reduced over several dims or a middle one (x: reduced elements)",
}
PROVIDER_ORDER = ("reduce_ops", "torch", "torch.compile", "liger", "flag_gems", "quack")
COLORS = {"reduce_ops": "tab:red", "torch": "tab:blue", "torch.compile": "tab:green",
          "liger": "tab:purple", "flag_gems": "tab:orange", "quack": "tab:brown"}


def kind_of(row: dict) -> tuple:
    """(kind, reduced length) of a row."""
    shape, dim = row["shape"], row["dim"]
    if dim is None or len(shape) == 1:
        n = 1
        for s in shape:
            n *= s
        return "all", n
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    if len(shape) > 2 or len(dims) > 1:
        n = 1
        for d in dims:
            n *= shape[d]
        return "dims", n
    dim = dims[0]
    if dim in (-1, len(shape) - 1):
        return "rows", shape[-1]
    return "cols", shape[dim]


def plot_results(results: dict, outdir: Path) -> list:
    """Write the PNGs into `outdir`; returns their paths."""
    outdir.mkdir(parents=True, exist_ok=True)
    groups: dict = {}
    for r in results.get("rows", []):
        kind, length = kind_of(r)
        groups.setdefault((r["op"], r["dtype"], kind), []).append((length, r))
    copy = results.get("copy_GBps")
    device = results.get("device", "?")
    paths = []
    for (op, dtype, kind), points in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(8, 5))
        series: dict = {}
        for length, r in points:
            series.setdefault((r["provider"], bool(r.get("graph"))), {})
            best = series[(r["provider"], bool(r.get("graph")))]
            # two shapes with the same reduced length: plot the larger (less launch-bound)
            if length not in best or r["bytes"] > best[length]["bytes"]:
                best[length] = r
        series = {k: list(v.items()) for k, v in series.items()}
        order = {p: i for i, p in enumerate(PROVIDER_ORDER)}
        wrong_label = "wrong result"
        for (prov, graph), pts in sorted(series.items(),
                                         key=lambda kv: (order.get(kv[0][0], 99), kv[0])):
            pts.sort(key=lambda lr: lr[0])
            good = [(x, r["GBps"]) for x, r in pts if r.get("ok", True)]
            bad = [(x, r["GBps"]) for x, r in pts if not r.get("ok", True)]
            style = {"color": COLORS.get(prov), "marker": "o", "markersize": 4,
                     "linestyle": "--" if graph else "-",
                     "linewidth": 2.2 if prov == "reduce_ops" else 1.4}
            if good:
                ax.plot(*zip(*good), label=prov + (" (CUDA graph)" if graph else ""), **style)
            if bad:
                ax.plot(*zip(*bad), "x", color="red", markersize=9, mew=2, label=wrong_label)
                wrong_label = None
        top = 1.15 * max(r["GBps"] for _, r in points)
        if copy and copy <= 3 * top:
            ax.axhline(copy, color="black", linestyle=":", linewidth=1.2,
                       label=f"copy ceiling {copy:.0f} GB/s")
            top = max(top, 1.08 * copy)
        elif copy:  # launch-bound sizes: a ceiling far above would flatten every line
            ax.plot([], [], " ", label=f"copy ceiling {copy:.0f} GB/s (off scale)")
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0, top=top)
        ax.set_xlabel(KINDS[kind].split("(x: ")[1].rstrip(")") + " (log2)")
        ax.set_ylabel("GB/s (least traffic / time)")
        ax.set_title(f"{op}, {dtype}: {KINDS[kind].split(' (x')[0]}\n"
                     f"{device}, torch {results.get('torch', '?')}, {results.get('date', '')}",
                     fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        path = outdir / f"{op}_{dtype}_{kind}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__)
        return 2
    for path in plot_results(json.loads(Path(argv[0]).read_text()), Path(argv[1])):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
