"""CPU: reduce_ops against torch eager on a few medium and large shapes, best of 5 calls (ms).

    PYTHONPATH=python python scripts/cpu_compare.py

Each cell reads `ours/torch`. reduce_scale's torch column is the eager expression
x / x.abs().amax(-1, keepdim=True). Set ATEN_CPU_CAPABILITY=default|avx2|avx512 to pick the
instruction set of both torch's and our CPU kernels.
"""
import time

import torch

import reduce_ops  # noqa: F401  (registers torch.ops.reduce_ops)


def best_ms(fn, repeats=5):
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main():
    torch.manual_seed(0)
    ops = torch.ops.reduce_ops
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
    for shape in [(4096, 1024), (1024, 4096), (256, 65536), (1 << 24,)]:
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            x = torch.randn(shape, dtype=dtype)
            cases = [("sum(-1)", lambda: ops.sum(x, [-1]), lambda: x.sum(-1))]
            if x.dim() == 2:
                cases.append(("sum(0)", lambda: ops.sum(x, [0]), lambda: x.sum(0)))
            cases += [
                ("amax(-1)", lambda: ops.amax(x, [-1]), lambda: x.amax(-1)),
                ("softmax", lambda: ops.softmax(x, -1), lambda: torch.softmax(x, -1)),
                ("reduce_scale", lambda: ops.reduce_scale(x), lambda: x / x.abs().amax(-1, keepdim=True)),
            ]
            cells = [f"{name} {best_ms(ours):.2f}/{best_ms(theirs):.2f}" for name, ours, theirs in cases]
            print(f"{'x'.join(map(str, shape)):>10} {str(dtype)[6:]:>8}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
