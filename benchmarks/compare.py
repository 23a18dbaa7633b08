#!/usr/bin/env python3
"""A/B of two bench.py runs of reduce_ops: per case, the reference's time over the candidate's
(above 1: the candidate is faster), and each run's fraction of its own copy bandwidth.

    python benchmarks/compare.py ref.json new.json [--peer torch.compile]

With --peer, a provider of the candidate's run to compare against as well (its time over the
candidate's). Only cases that both runs measured are listed.
"""
from __future__ import annotations

import argparse
import json

import bench  # same directory: the bench's table order (case_order)
from summarize import by_case, geomean


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ref")
    p.add_argument("new")
    p.add_argument("--peer", action="append", default=[], help="a provider of the new run to compare with")
    args = p.parse_args()
    ref, new = json.load(open(args.ref)), json.load(open(args.new))
    ref_cases, new_cases = by_case(ref["rows"]), by_case(new["rows"])
    print(f"ref: copy {ref['copy_GBps']:.0f} GB/s; new: copy {new['copy_GBps']:.0f} GB/s ({new['device']})")
    head = f"{'op':<17}{'shape':<22}{'dim':>5} {'dtype':<9}{'ref us':>10}{'new us':>10}{'ref/new':>8}{'ref %':>7}{'new %':>7}"
    print(head + "".join(f"{'vs ' + peer:>18}" for peer in args.peer))
    speedups = []
    for key in sorted(set(ref_cases) & set(new_cases), key=bench.case_order):
        a, b = ref_cases[key].get("reduce_ops"), new_cases[key].get("reduce_ops")
        if not a or not b:
            continue
        op, shape, dim, dtype = key
        speedups.append(a["us"] / b["us"])
        line = (f"{op:<17}{'x'.join(map(str, shape)):<22}{str(dim):>5} {dtype:<9}{a['us']:>10.1f}{b['us']:>10.1f}"
                f"{a['us'] / b['us']:>8.2f}{100 * a['GBps'] / ref['copy_GBps']:>6.1f}%"
                f"{100 * b['GBps'] / new['copy_GBps']:>6.1f}%")
        for peer in args.peer:
            other = new_cases[key].get(peer)
            line += f"{other['us'] / b['us']:>18.2f}" if other and other.get("ok", True) else f"{'-':>18}"
        print(line)
    print(f"geomean ref/new over {len(speedups)} cases: {geomean(speedups):.3f}")


if __name__ == "__main__":
    main()
