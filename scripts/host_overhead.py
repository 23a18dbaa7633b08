"""Host time per call of each op beside torch's, on a tensor small enough that the host, not the
kernel, sets the pace (what a small eager model or a Jupyter loop sees).

    PYTHONPATH=python python scripts/host_overhead.py [--device cuda] [--numel 1024]

Microseconds per call, best of 30 bursts of 200 calls; on CUDA the bursts are synchronized
between, not within, so a burst times the host's issue rate while the GPU keeps up. "grad" rows
take an input that requires grad (the call records an autograd node).
"""
import argparse
import time

import torch

import reduce_ops


def per_call_us(fn, device, bursts=30, calls=200):
    for _ in range(calls):
        fn()
    best = float("inf")
    for _ in range(bursts):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    if device == "cuda":
        torch.cuda.synchronize()
    return best * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--numel", type=int, default=1024)
    p.add_argument("--label", default="", help="a prefix for every line (to tell builds apart)")
    args = p.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(args.numel, device=args.device)
    xg = x.clone().requires_grad_(True)
    pairs = [
        ("sum", lambda t: torch.sum(t), lambda t: reduce_ops.sum(t)),
        ("amax(-1)", lambda t: torch.amax(t, -1), lambda t: reduce_ops.amax(t, -1)),
        ("softmax(-1)", lambda t: torch.softmax(t, -1), lambda t: reduce_ops.softmax(t, -1)),
        ("reduce_scale", lambda t: t / t.abs().amax(-1, keepdim=True), lambda t: reduce_ops.reduce_scale(t)),
    ]
    print(f"{args.label}{args.device}, {args.numel} float32 elements: us per call, ours / torch eager")
    for name, theirs, ours in pairs:
        for tag, t in (("", x), (" grad", xg)):
            a = per_call_us(lambda: ours(t), args.device)
            b = per_call_us(lambda: theirs(t), args.device)
            print(f"{args.label}{name + tag:<18} {a:6.2f} / {b:6.2f}")


if __name__ == "__main__":
    main()
