#!/usr/bin/env python3
"""Markdown summary of a bench.py JSON: one row per case, then geometric means and the issues'
targets, for benchmarks/results/README.md.

    python benchmarks/summarize.py benchmarks/results/h200.json [--peers other_run.json]

Ratios are the other provider's time over ours (above 1: reduce_ops is faster), each taken from
one JSON, so from one run: the peers' ratios come from the same file, or from the --peers file's own reduce_ops rows.
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict

import bench  # same directory: the bench's table order (case_order)

BIG = 256 * 2**20  # bytes of least traffic from which the copy-bandwidth targets apply


def by_case(rows):
    table = defaultdict(dict)
    for r in rows:
        if not r.get("graph"):
            dim = tuple(r["dim"]) if isinstance(r["dim"], list) else r["dim"]
            table[(r["op"], tuple(r["shape"]), dim, r["dtype"])][r["provider"]] = r
    return table


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json")
    p.add_argument("--peers", help="a second bench.py JSON whose peer rows to compare with")
    args = p.parse_args()
    data = json.load(open(args.json))
    copy = data["copy_GBps"]
    cases = by_case(data["rows"])
    # Peers from the --peers file when given, else from the same run's own peer rows.
    peers = by_case(json.load(open(args.peers))["rows"]) if args.peers else cases
    runs = ", ".join(f"{c:.0f}" for c in data.get("copy_GBps_runs", [copy]))
    print(f"{data['device']}, torch {data['torch']}, {data['date']}; copy {runs} GB/s (read + write; "
          "each row against its own run's).\n")
    print("| op | shape | dim | dtype | reduce_ops GB/s | % of copy | vs torch | vs torch.compile | vs Liger |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = defaultdict(lambda: defaultdict(list))
    misses = defaultdict(list)
    for key in sorted(cases, key=bench.case_order):
        op, shape, dim, dtype = key
        c = cases[key]
        ours = c.get("reduce_ops")
        if not ours:
            continue
        vs = {name: c[name]["us"] / ours["us"] if name in c and c[name].get("ok", True) else None
              for name in ("torch", "torch.compile")}
        peer_case = peers.get(key, {})
        liger = (peer_case["liger"]["us"] / peer_case["reduce_ops"]["us"]
                 if "liger" in peer_case and "reduce_ops" in peer_case and peer_case["liger"].get("ok", True) else None)
        # A row merged from another run carries that run's copy figure.
        pct = 100 * ours["GBps"] / ours.get("copy_GBps", copy)
        fmt = lambda v: f"{v:.2f}x" if v else "-"  # noqa: E731
        mark = "" if ours.get("ok", True) else " (!)"
        print(f"| {op} | {'x'.join(map(str, shape))} | {dim} | {dtype} | {ours['GBps']:.0f} | {pct:.0f}%{mark} | "
              f"{fmt(vs['torch'])} | {fmt(vs['torch.compile'])} | {fmt(liger)} |")
        best = min((v for v in vs.values() if v), default=None)
        ratios[op]["torch"].append(vs["torch"])
        ratios[op]["torch.compile"].append(vs["torch.compile"])
        ratios[op]["faster of the two"].append(best)
        if best is not None and best < 0.97:
            misses[op].append(f"{'x'.join(map(str, shape))} dim {dim} {dtype} ({best:.2f}x)")
        if liger is not None and liger < 0.97:
            misses[op].append(f"{'x'.join(map(str, shape))} {dtype} vs Liger ({liger:.2f}x)")
        if ours["bytes"] >= BIG:
            target = 100 if op in ("sum", "amax") else (90 if op == "softmax_backward" else 95)
            if op == "softmax" and len(shape) == 1:
                target = 75  # the whole-tensor softmax of 2^30 elements
            if len(shape) == 2 and op in ("softmax", "reduce_scale") and shape[1] > 262144:
                continue  # the copy target covers rows of 128 to 262144
            if pct < target:
                misses[op].append(f"{'x'.join(map(str, shape))} dim {dim} {dtype}: {pct:.1f}% < {target}% of copy")
    print("\n| op | geomean vs torch eager | vs torch.compile | vs the faster of the two | cases |")
    print("|---|---|---|---|---|")
    for op, r in ratios.items():
        print(f"| {op} | {geomean(r['torch']):.2f}x | {geomean(r['torch.compile']):.2f}x | "
              f"{geomean(r['faster of the two']):.2f}x | {len(r['torch'])} |")
    print("\nShort of the issues' targets (>= 0.97x the faster of eager/compile and of Liger; "
          ">= 100% of copy for reductions, 95% for softmax/reduce_scale rows of 128-262144, "
          "90% for softmax_backward, 75% for the whole-tensor softmax, on >= 256 MB of traffic):\n")
    for op, items in misses.items():
        print(f"- {op}: " + "; ".join(items))


if __name__ == "__main__":
    main()
