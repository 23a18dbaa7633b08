#!/usr/bin/env python3
"""One benchmark case's call, fenced for Nsight Compute: the kernels of one call only.

    ncu --profile-from-start off --clock-control none --section SpeedOfLight ... \
        python3 scripts/ncu_case.py torch.compile softmax 65536x1024 -1 bfloat16

The provider, op, shape, dim and dtype are those of benchmarks/bench.py (its providers and
inputs), so the profile is of the very call the benchmark times. The call runs a few times
first (torch.compile compiles, Triton autotunes), then once between cudaProfilerStart/Stop.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench  # noqa: E402


def main():
    provider, op, shape, dim, dtype = sys.argv[1:6]
    shape = tuple(int(v) for v in shape.split("x"))
    case = bench.Case(op, shape, None if dim == "None" else int(dim), dtype)
    providers, unavailable = bench.load_providers([provider], "cuda")
    if provider not in providers:
        raise SystemExit(f"{provider}: {unavailable.get(provider)}")
    fn = providers[provider].fn(case)
    inputs = bench.make_inputs(case, "cuda", seed=0)
    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
