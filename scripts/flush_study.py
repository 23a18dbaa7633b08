#!/usr/bin/env python3
"""How much of a memory-bound kernel's measured time is the benchmark's own L2 flush?

triton's do_bench flushes the L2 before each timed call by zero-filling a 256 MB buffer.
The last ~L2-size of those zeros sits dirty in the L2 when the timed kernel starts, and
writing them back to DRAM happens inside the timed window. This script times the same
calls four ways, so the size of that effect can be read off:

  do_bench      triton.testing.do_bench (zero-fill flush before each call), median
  read-flush    CUDA events around one call, the L2 flushed by *reading* 256 MB (clean lines)
  graph-read    a CUDA graph of k back-to-back calls over rotating input copies (together
                several times the L2), read flush before each replay; time per call
  graph-zero    the same graph, zero-fill flush before each replay

Usage on the GPU machine: python scripts/flush_study.py [--json out.json]
(benchmarks/results/h200_study/flush_study.* were taken by this script's first version, which
had its own copies of bench.py's event and graph timing loops; the methods are the same.)
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import triton.testing

import reduce_ops  # noqa: F401  (registers torch.ops.reduce_ops)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench import Timer  # noqa: E402  (the bench's events timing, with a flush of our choice)

TIMER = Timer("cuda", warmup_ms=25, rep_ms=100)


def events_time(fn, flush):
    """Median microseconds of one call of fn between CUDA events, flush() before each."""
    return TIMER._time_events(fn, flush)

ops = torch.ops.reduce_ops


def graph_time(make_call, n_inputs, calls, zero_flush):
    """Microseconds per call of `calls` back-to-back calls in one CUDA graph over n_inputs
    input copies (the bench's time_graph: zero-fill flush, or a read-only one)."""
    return TIMER.time_graph([make_call(i) for i in range(n_inputs)], calls, writes=zero_flush)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    args = p.parse_args()
    buf = torch.empty(64 << 20, dtype=torch.float32, device="cuda").normal_()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size

    def read_flush():
        buf.amax()

    f32, bf16 = torch.float32, torch.bfloat16
    cases = [
        ("copy", (1 << 22,), f32), ("copy", (1 << 24,), f32), ("copy", (1 << 28,), f32),
        ("sum", (1 << 22,), f32), ("sum", (1 << 24,), f32), ("sum", (1 << 26,), f32),
        ("sum", (1 << 28,), f32), ("sum", (1 << 28,), bf16),
        ("sum", (442368, 128), bf16), ("sum", (4096, 32768), bf16),
        ("torch.sum", (1 << 24,), f32), ("torch.sum", (442368, 128), bf16),
        ("softmax", (442368, 128), bf16), ("softmax", (65536, 1024), f32),
        ("softmax", (4096, 32768), f32), ("softmax", (1024, 262144), f32),
    ]
    rows = []
    for name, shape, dtype in cases:
        nbytes = torch.Size(shape).numel() * torch.tensor([], dtype=dtype).element_size()
        traffic = nbytes * (1 if "sum" in name else 2)
        n_inputs = max(1, -(-4 * l2 // nbytes))
        calls = max(n_inputs, min(64, -(-(1 << 30) // traffic)))
        xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(n_inputs)]
        outs = [torch.empty_like(x) for x in xs]

        def make_call(i):
            x, o = xs[i], outs[i]
            if name == "copy":
                return lambda: o.copy_(x)
            if name == "sum":
                return lambda: ops.sum(x, [-1] if x.dim() > 1 else None, False)
            if name == "torch.sum":
                return lambda: x.sum(-1)
            return lambda: ops.softmax(x, -1)

        fn = make_call(0)
        r = {"op": name, "shape": list(shape), "dtype": str(dtype).split(".")[-1],
             "MB": nbytes / 2**20, "graph_calls": calls, "graph_inputs": n_inputs}
        r["do_bench"] = 1e3 * triton.testing.do_bench(fn, warmup=25, rep=200,
                                                      return_mode="median")
        r["read-flush"] = events_time(fn, read_flush)
        r["graph-read"] = graph_time(make_call, n_inputs, calls, zero_flush=False)
        r["graph-zero"] = graph_time(make_call, n_inputs, calls, zero_flush=True)
        for k in ("do_bench", "read-flush", "graph-read", "graph-zero"):
            r[k + " GB/s"] = traffic / r[k] / 1e3
        rows.append(r)
        print(f"{name:>10} {str(shape):>16} {r['dtype']:>8} {r['MB']:8.0f} MB | " +
              " | ".join(f"{k} {r[k]:8.1f} us {r[k + ' GB/s']:6.0f}"
                         for k in ("do_bench", "read-flush", "graph-read", "graph-zero")),
              flush=True)
        del xs, outs
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "L2": l2, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
