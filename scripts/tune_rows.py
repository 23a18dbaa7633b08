"""Times every row strategy of softmax, reduce_scale and softmax_backward on the shapes that
set the dispatcher's thresholds (CUDA only; under 3 minutes on an H200).

    python scripts/tune_rows.py --json tune_h200.json

Each strategy is forced through REDUCE_OPS_STRATEGY (read by the launcher at every call), the
automatic choice runs with it unset. Only strategies that can run a shape are timed (the
predicates below mirror the `*_fits` conditions of csrc/cuda/softmax_launch.h; "cluster" may still
fall back to the automatic choice where the device cannot schedule the cluster shape).
Bandwidth counts the least traffic, as benchmarks/bench.py: softmax and reduce_scale one read
and one write (plus reduce_scale's float32 scale per row), softmax_backward two reads and one
write; "% copy" is against b.copy_(a) of 1 GiB measured in the same run. Each strategy's
result is checked against the automatic one (column "ok").
"""
import argparse
import datetime
import json
import os
import sys

import torch

import reduce_ops

SHAPES = [(442368, 128), (65536, 1024), (16384, 4096), (4096, 32768), (1024, 262144), (8, 1 << 24)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
OPS = ["softmax", "reduce_scale", "softmax_backward"]
STRATEGIES = ["warp", "block", "cluster_row", "cluster", "smem", "split"]


def runnable(op, cols, dtype, props):
    """Strategies whose shape condition in softmax_launch.h holds for rows of `cols` elements."""
    elt = torch.empty((), dtype=dtype).element_size()
    vec = 16 // elt
    aligned = cols % vec == 0
    packs = -(-cols // vec)
    smem_limit = getattr(props, "shared_memory_per_block_optin", 227 * 1024) - 1024
    rows_on_chip = 2 if op == "softmax_backward" else 1
    packs_per_thread = 4 if op == "softmax_backward" else 8  # per row (kRowPacks, kMaxRegPacks)
    # The clusters stage packs in shared memory besides the registers: the forward's 16-byte
    # packs twice kMaxRegPacks a thread, the backward kMaxRegPacks of each row (out's in shared).
    cluster_packs = 8 if op == "softmax_backward" else 16
    # The forward peels other float32 and 16-bit rows (softmax_launch.h's launch_row_norm: two packs or
    # more, float32 from 256 elements; here the output is fresh, so it lies on x's misalignment):
    # the warp, block and cluster_row kernels take them, unless REDUCE_OPS_ROW_PEEL=off (a --variant).
    shortest = 256 if elt == 4 else 2 * vec
    peeled = (not aligned and elt in (2, 4) and cols >= shortest and op != "softmax_backward"
              and os.environ.get("REDUCE_OPS_ROW_PEEL") != "off")
    if peeled:
        packs = cols // vec
    ok = {
        "warp": packs <= 32 * packs_per_thread,
        "block": (aligned or peeled) and packs <= packs_per_thread * 1024,
        # One cluster per row, 16 blocks x 256 threads x 64 values at most (the forward only).
        "cluster_row": (aligned or peeled) and props.major >= 9 and op != "softmax_backward" and cols <= 16 * 256 * 64,
        "cluster": aligned and props.major >= 9 and packs <= 16 * cluster_packs * 1024,
        "smem": rows_on_chip * cols * elt <= smem_limit,
        "split": True,
    }
    return [s for s in STRATEGIES if ok[s]]


def make_call(op, shape, dtype):
    x = torch.randn(shape, device="cuda", dtype=dtype)
    if op == "softmax":
        return (lambda: reduce_ops.softmax(x, -1)), 2 * x.numel() * x.element_size()
    if op == "reduce_scale":
        return (lambda: reduce_ops.reduce_scale(x)), 2 * x.numel() * x.element_size() + shape[0] * 4
    out = torch.softmax(x, -1)
    grad = torch.randn_like(x)
    return (lambda: reduce_ops.softmax_backward(grad, out, -1)), 3 * x.numel() * x.element_size()


def set_strategy(name):
    if name is None:
        os.environ.pop("REDUCE_OPS_STRATEGY", None)
    else:
        os.environ["REDUCE_OPS_STRATEGY"] = name


def first(result):
    return result[0] if isinstance(result, tuple) else result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", required=True, help="where to write the results")
    parser.add_argument("--rep-ms", type=float, default=40.0, help="do_bench rep (ms) per timing")
    parser.add_argument("--shapes", help="comma list of ROWSxCOLS to time (default: all six)")
    parser.add_argument("--ops", help=f"comma list from {','.join(OPS)} (default: all)")
    parser.add_argument("--strategies", help=f"comma list from {','.join(STRATEGIES)} (default: all)")
    parser.add_argument("--variant", metavar="VAR=VALUE[,VAR=VALUE]", action="append", default=[],
                        help="also time the automatic choice with these environment variables set "
                             "(developer knobs, e.g. REDUCE_OPS_AHEAD=none), in a column of that name; "
                             "repeat for more columns")
    args = parser.parse_args()
    strategies = [s for s in args.strategies.split(",") if s] if args.strategies is not None else STRATEGIES
    variants = {name: [tuple(kv.split("=", 1)) for kv in name.split(",")] for name in args.variant}
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    ops = args.ops.split(",") if args.ops else OPS
    if not torch.cuda.is_available():
        sys.exit("tune_rows.py needs a CUDA device")
    from triton.testing import do_bench

    def bench_us(fn):
        return 1e3 * do_bench(fn, warmup=10, rep=args.rep_ms, return_mode="median")

    props = torch.cuda.get_device_properties(0)
    a = torch.randn(1 << 28, device="cuda")
    b = torch.empty_like(a)
    copy_gbps = 2 * a.numel() * a.element_size() / bench_us(lambda: b.copy_(a)) / 1e3
    del a, b
    print(f"{props.name}   torch {torch.__version__}   copy {copy_gbps:.0f} GB/s")
    columns = ["auto"] + strategies + list(variants)
    header = f"{'op':<17}{'dtype':<9}{'shape':<16}" + "".join(f"{c[-15:]:>16}" for c in columns)
    print(header)
    rows = []
    for op in ops:
        for dtype_name, dtype in DTYPES.items():
            for shape in shapes:
                torch.cuda.empty_cache()
                fn, nbytes = make_call(op, shape, dtype)
                set_strategy(None)
                reference = first(fn()).float()
                cells = []
                for strategy in [None] + strategies + list(variants):
                    knobs = variants.get(strategy, [])
                    if strategy is not None and not knobs and strategy not in runnable(op, shape[-1], dtype, props):
                        cells.append(f"{'-':>16}")
                        continue
                    set_strategy(None if knobs else strategy)
                    os.environ.update(dict(knobs))
                    got = first(fn()).float()
                    ok = bool(torch.allclose(got, reference, rtol=2e-2, atol=1e-6, equal_nan=True))
                    del got
                    us = bench_us(fn)
                    gbps = nbytes / us / 1e3
                    pct = 100 * gbps / copy_gbps
                    for var, _ in knobs:
                        os.environ.pop(var)
                    if knobs:
                        strategy = "auto " + strategy
                    rows.append(dict(op=op, shape=list(shape), dtype=dtype_name, strategy=strategy or "auto",
                                     us=round(us, 3), bytes=nbytes, GBps=round(gbps, 1),
                                     pct_copy=round(pct, 1), ok=ok))
                    cells.append(f"{gbps:>8.0f} {pct:>4.0f}%{'' if ok else '!'}".rjust(16))
                set_strategy(None)
                del fn, reference
                print(f"{op:<17}{dtype_name:<9}{str(shape):<16}" + "".join(cells), flush=True)
    print("cells: GB/s and % of copy; '-' cannot run the shape; '!' differs from the automatic result")
    result = {"device": props.name, "torch": torch.__version__, "date": datetime.date.today().isoformat(),
              "copy_GBps": round(copy_gbps, 1), "rows": rows}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
