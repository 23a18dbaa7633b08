"""Accuracy and cost of the compensated CUDA sum (issue: "Report, for a few hard inputs, the error
against float64 for ours and for torch.sum, and the speed with and without compensation").

    python scripts/accuracy_report.py --json out/accuracy.json

Errors are |sum - float64 sum|, shown relative to the true sum and in units of u * sum|x|
(u = 2^-24, float32's unit roundoff): the bound a summation algorithm guarantees is a multiple
of the latter. The sums are into float32 results (dtype=torch.float32), which reduce_ops
compensates; "plain" is this package with REDUCE_OPS_SUM=plain (no compensation), as its sums
into float16/bfloat16 results run by default.
Speeds: the same calls (default result dtype) with compensation forced on
(REDUCE_OPS_SUM=compensated) and off, timed by benchmarks/bench.py's timer for reductions (a
read-only L2 flush before each call, the median of single calls), in alternating rounds.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path

import torch

import reduce_ops

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench  # noqa: E402


def hard_inputs(n):
    gen = torch.Generator().manual_seed(7)
    normal = lambda: torch.randn(n, generator=gen, dtype=torch.float64)  # noqa: E731
    v = torch.randn(n // 2, generator=gen, dtype=torch.float64) * 1e3
    cancel = torch.cat([v, -v + 1e-3 * torch.randn(n // 2, generator=gen, dtype=torch.float64)])
    return {
        "offset 1e6 + N(0, 1e4)": normal() * 1e4 + 1e6,
        "mixed magnitudes 1e-6..1e6": normal() * torch.pow(10.0, torch.randint(-6, 7, (n,), generator=gen).double()),
        "cancellation v, -v + 1e-3 noise": cancel[torch.randperm(n, generator=gen)],
        "constant 0.1": torch.full((n,), 0.1, dtype=torch.float64),
        "uniform [0, 1)": torch.rand(n, generator=gen, dtype=torch.float64),
    }


@contextlib.contextmanager
def sum_mode(plain):
    """This package's sums without (REDUCE_OPS_SUM=plain) or with (=compensated) compensation inside
    the block, whatever the result's dtype (by default sums into 16-bit results are plain)."""
    os.environ["REDUCE_OPS_SUM"] = "plain" if plain else "compensated"
    try:
        yield
    finally:
        os.environ.pop("REDUCE_OPS_SUM", None)


def ours(x, dim, plain):
    with sum_mode(plain):
        return reduce_ops.sum(x, dim, dtype=torch.float32)


def accuracy(n):
    rows = []
    for name, x64 in hard_inputs(n).items():
        for dtype in (torch.float32, torch.bfloat16):
            x = x64.to(dtype).cuda()
            for view, dim in (("flat", None), ("16 rows", 1), ("16 cols", 0)):
                xv = {"flat": x, "16 rows": x.view(16, -1), "16 cols": x.view(-1, 16)}[view]
                d = () if dim is None else dim
                ref = xv.double().sum(d)
                unit = 2.0 ** -24 * xv.double().abs().sum(d)
                row = {"input": name, "dtype": str(dtype).split(".")[1], "view": view, "n": n}
                for label, out in (("reduce_ops", ours(xv, dim, False)), ("reduce_ops plain", ours(xv, dim, True)),
                                   ("torch.sum", torch.sum(xv, d, dtype=torch.float32))):
                    err = (out.double() - ref).abs()
                    row[label] = {"max_err_in_u_abs_sum": (err / unit).max().item(),
                                  "max_rel_err": (err / ref.abs()).max().item()}
                rows.append(row)
    return rows


def speed(rounds=3):
    cases = [((1 << 30,), None), ((1 << 28,), None), ((1 << 24,), None), ((442368, 128), -1),
             ((16384, 4096), -1), ((4096, 32768), -1), ((32768, 2048), -1), ((65536, 1024), 0),
             ((8, 1 << 24), -1), ((4096, 32768), 0)]
    timer = bench.Timer("cuda", warmup_ms=10, rep_ms=40)
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for shape, dim in cases:
            x = torch.randn(shape, device="cuda", dtype=dtype)
            t = {"compensated": [], "plain": []}
            for _ in range(rounds):
                for label, plain in (("compensated", False), ("plain", True)):
                    with sum_mode(plain):
                        t[label].append(timer.time(lambda: reduce_ops.sum(x, dim), writes=False))
            t = {k: statistics.median(v) for k, v in t.items()}
            gbps = x.numel() * x.element_size() / t["compensated"] / 1e3
            rows.append({"shape": list(shape), "dim": dim, "dtype": str(dtype).split(".")[1],
                         "compensated_us": t["compensated"], "plain_us": t["plain"],
                         "cost": t["compensated"] / t["plain"] - 1, "compensated_GBps": gbps})
            del x
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--n", type=int, default=1 << 24)
    args = p.parse_args()
    acc, spd = accuracy(args.n), speed()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; errors in u*sum|x| (max over outputs)")
    print("| input | dtype | view | reduce_ops | reduce_ops plain | torch.sum | rel. err ours / torch |")
    print("|---|---|---|---|---|---|---|")
    for r in acc:
        print(f"| {r['input']} | {r['dtype']} | {r['view']} | {r['reduce_ops']['max_err_in_u_abs_sum']:.3g} | "
              f"{r['reduce_ops plain']['max_err_in_u_abs_sum']:.3g} | {r['torch.sum']['max_err_in_u_abs_sum']:.3g} | "
              f"{r['reduce_ops']['max_rel_err']:.2g} / {r['torch.sum']['max_rel_err']:.2g} |")
    print("\n| shape | dim | dtype | compensated us | plain us | cost | GB/s |")
    print("|---|---|---|---|---|---|---|")
    for r in spd:
        print(f"| {'x'.join(map(str, r['shape']))} | {r['dim']} | {r['dtype']} | {r['compensated_us']:.1f} | "
              f"{r['plain_us']:.1f} | {r['cost'] * 100:+.1f}% | {r['compensated_GBps']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "accuracy": acc,
                       "speed": spd}, f, indent=1)


if __name__ == "__main__":
    main()
