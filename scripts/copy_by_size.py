"""Copy bandwidth by size beside the row ops (softmax, reduce_scale) of the same traffic (CUDA only).

    python scripts/copy_by_size.py

The issues measure every case against one copy, b.copy_(a) of 1 GiB of float32 (bench.py's
measure_copy). A smaller copy does not reach that figure: launch, ramp and the last wave's tail
cost a few microseconds whatever the size. This prints the copy at 32 MB - 2 GB of traffic (read +
write) and each row case's bandwidth against both the 1 GiB copy and the copy of its own traffic,
all timed with bench.py's Timer (medians of three rounds).
"""
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench  # noqa: E402

import reduce_ops  # noqa: E402

TRAFFIC_MB = [32, 64, 128, 256, 512, 1024, 2048]
SHAPES = [(442368, 128), (65536, 1024), (16384, 4096), (4096, 32768), (1024, 262144)]


def main():
    if not torch.cuda.is_available():
        sys.exit("copy_by_size.py needs a CUDA device")
    timer = bench.Timer("cuda", 25, 200)

    def median_us(fn):
        return statistics.median(timer.time(fn) for _ in range(3))

    big = bench.measure_copy(timer, "cuda")
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} copy 1 GiB -> 1 GiB: {big:.0f} GB/s")
    print("copy by traffic (read + write):")
    copy_at = {}
    for mb in TRAFFIC_MB:
        a = torch.randn(mb * 2**20 // 8, device="cuda")  # float32: half the traffic read, half written
        b = torch.empty_like(a)
        us = median_us(lambda: b.copy_(a))
        copy_at[mb] = mb * 2**20 / us / 1e3
        print(f"  {mb:5d} MB {us:9.1f} us {copy_at[mb]:7.0f} GB/s {100 * copy_at[mb] / big:6.1f}% of the 1 GiB copy")
        del a, b
    print("row ops: GB/s, % of the 1 GiB copy, % of the copy of the same traffic")
    for op in ["softmax", "reduce_scale"]:
        for dtype in [torch.bfloat16, torch.float32]:
            for shape in SHAPES:
                x = torch.randn(shape, device="cuda", dtype=dtype)
                fn = (lambda: reduce_ops.softmax(x, -1)) if op == "softmax" else (lambda: reduce_ops.reduce_scale(x))
                fn()
                us = median_us(fn)
                traffic = 2 * x.numel() * x.element_size()
                gbps = traffic / us / 1e3
                mb = traffic // 2**20
                same = f"{100 * gbps / copy_at[mb]:6.1f}%" if mb in copy_at else "   -"
                print(f"  {op:<13}{str(dtype)[6:]:<9}{str(shape):<16}{us:9.1f} us {gbps:7.0f} GB/s "
                      f"{100 * gbps / big:6.1f}% {same} (traffic {mb} MB)")
                del x


if __name__ == "__main__":
    main()
