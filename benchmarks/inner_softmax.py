"""Softmax (and its backward) over a middle dim on CUDA: reduce_ops against torch eager and
torch.compile, with bench.py's Timer (L2 flushed before each call, median) and copy figure.

    PYTHONPATH=python python benchmarks/inner_softmax.py [--dtypes float32,bfloat16] [--out FILE]

The benchmark grid of bench.py reduces over the last dim (and dim 0 for sum and amax); these
shapes reduce over a dim with others after it, from few long columns to many short ones:
(65536, 64) over dim 0 has 64 columns of 65536 (the split kernels: a fold launch, then an apply
launch), (4096, 1024) 1024 columns of 4096 (too few tiles for the GPU: clusters on sm_90+),
(8, 2^24) 2^24 columns of 8.
Each line: us, GB/s on one read and one write (the backward: two reads, one write) and % of
copy, then the time ratios torch / ours and torch.compile / ours (above 1: ours is faster).
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Timer, measure_copy  # noqa: E402

import reduce_ops  # noqa: E402

CASES = [((4096, 1024), 0), ((16384, 256), 0), ((65536, 64), 0), ((262144, 16), 0), ((8192, 4096), 0),
         ((4, 8192, 512), 1), ((1024, 65536), 0), ((32, 1024, 1024), 1), ((64, 256, 4096), 1),
         ((16, 21, 512 * 512), 1), ((8, 1 << 24), 0), ((256, 8, 65536), 1), ((128, 128, 128, 32), 1)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--out", default=None, help="also append the lines to this file")
    args = p.parse_args()
    out = open(args.out, "a") if args.out else None

    def emit(line):
        print(line, flush=True)
        if out:
            print(line, file=out, flush=True)

    timer = Timer("cuda", warmup_ms=25, rep_ms=100)
    copy = measure_copy(timer, "cuda")
    emit(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  copy {copy:.0f} GB/s")
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        for shape, dim in CASES:
            torch.manual_seed(0)
            x = torch.randn(shape, device="cuda", dtype=dtype)
            compiled = torch.compile(lambda t, d=dim: torch.softmax(t, d), dynamic=False)
            ours = timer.time(lambda: reduce_ops.softmax(x, dim))
            eager = timer.time(lambda: torch.softmax(x, dim))
            comp = timer.time(lambda: compiled(x))
            nbytes = 2 * x.numel() * x.element_size()
            emit(f"softmax  {name:8} {str(shape):22} dim {dim}: {ours:8.1f} us {nbytes / ours / 1e3:5.0f} GB/s "
                 f"{nbytes / ours / 1e3 / copy:4.0%}  torch {eager / ours:6.2f}x  compile {comp / ours:5.2f}x")
            grad = torch.randn_like(x)
            y = torch.softmax(x.float(), dim).to(dtype)
            ours = timer.time(lambda: reduce_ops.softmax_backward(grad, y, dim))
            eager = timer.time(lambda: torch.ops.aten._softmax_backward_data(grad, y, dim, dtype))
            nbytes = 3 * x.numel() * x.element_size()
            emit(f"backward {name:8} {str(shape):22} dim {dim}: {ours:8.1f} us {nbytes / ours / 1e3:5.0f} GB/s "
                 f"{nbytes / ours / 1e3 / copy:4.0%}  torch {eager / ours:6.2f}x")
            del x, grad, y
            torch._dynamo.reset()


if __name__ == "__main__":
    main()
