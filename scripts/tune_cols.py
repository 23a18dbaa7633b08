#!/usr/bin/env python3
"""Times the column reduction (sum and amax over dim 0) under developer knobs, beside
torch.compile, on the shapes that set the column launcher's constants (CUDA only); with
--dim -1, the row and whole-tensor reductions (1-D shapes) the same way.

    python scripts/tune_cols.py --variant bps8:REDUCE_OPS_COLS_BLOCKS_PER_SM=8 \
        --variant g16:REDUCE_OPS_COLS_FOLD_GROUP=16
    python scripts/tune_cols.py --dim -1 --shapes 1048576,16777216 --variant c16k:REDUCE_OPS_REDUCE_CHUNK=16384
    python scripts/tune_cols.py --shapes 131072x77,32768x1002 --variant off:REDUCE_OPS_COLS_PACKED=off \
        --variant one:REDUCE_OPS_COLS_PACKED=off,REDUCE_OPS_COLS_ROW_GROUPS=off

Each variant NAME:VAR=VALUE[,VAR=VALUE] sets environment variables that the launcher reads at
every call; "auto" runs with none. Timing is bench.py's for reductions (CUDA events after a
read-only L2 flush); "% copy" is against b.copy_(a) of 1 GiB in the same run. Each variant's
result is checked against the automatic one ('~' where its bits differ, '!' where it is off by
more than rtol 1e-5, or one step of a 16-bit result: another split of a float32 sum can round it
to the neighbouring bfloat16 or float16 value).
"""
import argparse
import json
import os
import sys
from pathlib import Path

import torch

import reduce_ops  # noqa: F401  (registers torch.ops.reduce_ops)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench import Timer  # noqa: E402

SHAPES = [(442368, 128), (65536, 1024), (16384, 4096), (4096, 32768), (1024, 262144), (8, 1 << 24)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE[,VAR=VALUE]")
    p.add_argument("--shapes", help="comma list of ROWSxCOLS (default: the bench grid's six)")
    p.add_argument("--ops", default="sum,amax")
    p.add_argument("--dim", type=int, default=0, help="the reduced dim (default 0; a 1-D shape is then whole)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    variants = [("auto", {})]
    for v in args.variant:
        name, settings = v.split(":", 1)
        variants.append((name, dict(kv.split("=", 1) for kv in settings.split(","))))
    timer = Timer("cuda", warmup_ms=10, rep_ms=50)
    a = torch.randn(1 << 28, device="cuda")
    b = torch.empty_like(a)
    copy_gbps = 2 * a.numel() * 4 / timer.time(lambda: b.copy_(a)) / 1e3
    del a, b
    print(f"{torch.cuda.get_device_name()}   torch {torch.__version__}   copy {copy_gbps:.0f} GB/s")
    names = [n for n, _ in variants] + ([] if args.no_compile else ["compile"])
    print(f"{'op':<6}{'dtype':<10}{'shape':<16}" + "".join(f"{n[-14:]:>15}" for n in names))
    rows = []
    for op in args.ops.split(","):
        ours = getattr(torch.ops.reduce_ops, op)
        for dtype_name, dtype in DTYPES.items():
            for shape in shapes:
                # Compiled afresh for every case, as bench.py does: one function would hit the
                # recompile limit and fall back to eager.
                torch._dynamo.reset()
                theirs = torch.compile(lambda t, f=getattr(torch, op): f(t, args.dim), dynamic=False, fullgraph=True)
                x = torch.randn(shape, device="cuda", dtype=dtype)
                nbytes = x.numel() * x.element_size()
                reference = ours(x, [args.dim], False).float()
                # A 16-bit result may round to either neighbour of the float32 value another split adds.
                rtol = 1e-5 if dtype == torch.float32 else torch.finfo(dtype).eps
                cells = []
                for name, env in variants + ([] if args.no_compile else [("compile", None)]):
                    if env is None:
                        fn = lambda: theirs(x)  # noqa: E731
                        ok = same = True
                    else:
                        os.environ.update(env)
                        fn = lambda: ours(x, [args.dim], False)  # noqa: E731
                        got = fn().float()
                        ok = bool(torch.allclose(got, reference, rtol=rtol, atol=1e-6))
                        same = bool(torch.equal(got, reference))
                    us = timer.time(fn, writes=False)
                    for var in env or {}:
                        os.environ.pop(var)
                    pct = 100 * nbytes / us / 1e3 / copy_gbps
                    rows.append(dict(op=op, dtype=dtype_name, shape=list(shape), variant=name, us=round(us, 2),
                                     pct_copy=round(pct, 1), ok=ok, same_bits=same))
                    cells.append(f"{us:>7.1f} {pct:>4.0f}%{'' if same else '~' if ok else '!'}".rjust(15))
                print(f"{op:<6}{dtype_name:<10}{str(shape):<16}" + "".join(cells), flush=True)
                del x, reference
    print("cells: microseconds and % of copy; '~': not the automatic result's bits but within "
          "rtol 1e-5 (16-bit results: one step), '!': off by more")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "copy_GBps": round(copy_gbps, 1), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
