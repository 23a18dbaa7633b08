#!/usr/bin/env python3
"""Host time per call against GPU time, for reduce_ops, torch eager and torch.compile.

    python scripts/diag_compile_overhead.py

For a few benchmark cases (benchmarks/bench.py's providers and inputs) it prints the host
(CPU) time of one call in a loop of 200, the bench Timer's time of a single call, and the
time per call inside a CUDA graph (no host work). Where the host time exceeds what the
Timer's flush and sleep hide, the single-call time would include idle GPU time: this is how
torch.compile's 60-85 us wrapper showed up in the bench (see benchmarks/results/README.md),
before the Timer slept ~200 us between flush and start event; with the sleep, "timed" and
"graph" agree.
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench  # noqa: E402

CASES = [("sum", (1 << 20,), None, "float32"), ("sum", (442368, 128), -1, "bfloat16"),
         ("softmax", (65536, 1024), -1, "bfloat16"), ("amax", (65536, 1024), 0, "bfloat16")]
PROVIDERS = [("reduce_ops", bench.ReduceOpsProvider), ("torch", bench.TorchProvider),
             ("torch.compile", bench.CompileProvider)]


def main():
    timer = bench.Timer("cuda", 25, 100)
    for op, shape, dim, dtype in CASES:
        case = bench.Case(op, shape, dim, dtype)
        inputs = bench.make_inputs(case, "cuda", 0)
        for name, cls in PROVIDERS:
            fn = cls().fn(case)
            for _ in range(5):
                fn(*inputs)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                fn(*inputs)
            host_us = (time.perf_counter() - t0) / 200 * 1e6
            torch.cuda.synchronize()
            single_us = timer.time(lambda: fn(*inputs), case.writes)
            calls, copies = bench.graph_plan(case, single_us, timer)
            sets = [inputs] + [bench.make_inputs(case, "cuda", i + 1) for i in range(copies - 1)]
            graph_us = timer.time_graph([(lambda s=s: fn(*s)) for s in sets], calls, case.writes)
            print(f"{op:8s} {str(shape):16s} {dtype:9s} {name:14s} host/call {host_us:7.1f} us  "
                  f"timed {single_us:7.1f} us  graph {graph_us:7.1f} us", flush=True)


if __name__ == "__main__":
    main()
