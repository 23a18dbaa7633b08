#!/usr/bin/env python3
"""Which kernels one reduce_ops call launches, and how long each runs (torch.profiler, CUDA).

    python scripts/profile_kernels.py sum:442368x128:0:bfloat16 softmax:1024x262144:-1:float32

Each case is op:ROWSxCOLS[xMORE]:dim:dtype (dim "all" for a whole-tensor reduction). The
call is warmed up, then profiled over 20 calls; the table gives every kernel's name (short),
calls per op call and mean microseconds, so that a multi-launch path (column splits, split
rows) shows where its time goes. Set REDUCE_OPS_STRATEGY to profile a forced strategy.
"""
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import reduce_ops

ops = torch.ops.reduce_ops
REPS = 20


def make(spec):
    op, shape, dim, dtype = spec.split(":")
    shape = tuple(int(v) for v in shape.split("x"))
    dtype = getattr(torch, dtype)
    x = torch.randn(shape, device="cuda", dtype=dtype)
    dims = None if dim == "all" else [int(dim)]
    if op == "sum":
        return lambda: ops.sum(x, dims, False)
    if op == "amax":
        return lambda: ops.amax(x, dims, False)
    if op == "softmax":
        return lambda: ops.softmax(x, int(dim))
    if op == "reduce_scale":
        return lambda: ops.reduce_scale(x)
    if op == "softmax_backward":
        out = torch.softmax(x.float(), int(dim)).to(dtype)
        grad = torch.randn_like(x)
        return lambda: ops.softmax_backward(grad, out, int(dim))
    raise SystemExit(f"unknown op {op}")


def short(name):
    name = name.split("(")[0]
    for prefix in ("void ", "reduce_ops::cuda::"):
        name = name.replace(prefix, "")
    return name[:110]


def main():
    assert reduce_ops is not None
    for spec in sys.argv[1:]:
        fn = make(spec)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(REPS):
                fn()
            torch.cuda.synchronize()
        totals, counts = defaultdict(float), defaultdict(int)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                totals[e.name] += e.device_time
                counts[e.name] += 1
        print(f"{spec}: {sum(totals.values()) / REPS:.1f} us of kernels per call")
        for name in sorted(totals, key=lambda n: -totals[n]):
            print(f"  {counts[name] / REPS:4.1f} x {totals[name] / counts[name]:8.1f} us  {short(name)}")


if __name__ == "__main__":
    main()
