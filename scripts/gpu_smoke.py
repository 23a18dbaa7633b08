"""Quick CUDA check of every op and strategy against torch, with rough timings.

Not the test suite (tests/ is): a one-screen report for a GPU session, run before pytest so
that a broken kernel shows up in the first lines. Usage: python scripts/gpu_smoke.py
"""
import sys

import torch

import reduce_ops

torch.manual_seed(0)
dev = "cuda"
failures = []


def check(name, got, ref, atol, rtol):
    ok = got.shape == ref.shape and got.dtype == ref.dtype and torch.allclose(
        got.double(), ref.double(), atol=atol, rtol=rtol, equal_nan=True)
    err = (got.double() - ref.double()).abs().nan_to_num(0).max().item() if got.shape == ref.shape and got.numel() else 0
    if not ok:
        failures.append(name)
    print(f"{'ok ' if ok else 'BAD'} {name:60s} maxerr={err:.3g}")


TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3),
       torch.float64: (1e-12, 1e-12)}

for dtype in [torch.float32, torch.bfloat16, torch.float16, torch.float64]:
    atol, rtol = TOL[dtype]
    for shape in [(1,), (7,), (1021,), (33, 1000), (442368 // 16, 128), (4096, 4097), (8, 1 << 20),
                  (3, 5, 7, 11), (1 << 22,)]:
        x = torch.randn(shape, device=dev, dtype=dtype)
        dims = [None] + list(range(len(shape))) + ([[0, len(shape) - 1]] if len(shape) > 2 else [])
        for d in dims:
            ref_sum = x.double().sum(d if d is not None else list(range(x.dim()))).to(dtype)
            n = x.numel() if d is None else x.numel() // ref_sum.numel()
            check(f"sum {dtype} {shape} dim={d}", reduce_ops.sum(x, d), ref_sum, atol * n ** 0.5 * 4, rtol)
            check(f"amax {dtype} {shape} dim={d}", reduce_ops.amax(x, d),
                  torch.amax(x, d if d is not None else list(range(x.dim()))), 0, 0)
    xt = torch.randn(4096, 1000, device=dev, dtype=dtype).t()
    check(f"sum {dtype} transposed dim=1", reduce_ops.sum(xt, 1), xt.double().sum(1).to(dtype), atol * 200, rtol)
    check(f"sum {dtype} transposed dim=0", reduce_ops.sum(xt, 0), xt.double().sum(0).to(dtype), atol * 200, rtol)
    xo = torch.randn(1000 * 257 + 1, device=dev, dtype=dtype)[1:].view(1000, 257)
    check(f"sum {dtype} misaligned rows", reduce_ops.sum(xo, 1), xo.double().sum(1).to(dtype), atol * 64, rtol)
    check(f"amax {dtype} misaligned rows dim0", reduce_ops.amax(xo, 0), xo.amax(0), 0, 0)
    for cols in [1, 3, 31, 128, 129, 1000, 1024, 2048, 4096, 5000, 32768, 70000, 300000]:
        rows = max(1, min(2048, (1 << 23) // cols))
        x = torch.randn(rows, cols, device=dev, dtype=dtype) * 3
        check(f"softmax {dtype} ({rows},{cols})", reduce_ops.softmax(x, -1), torch.softmax(x.double(), -1).to(dtype), atol, rtol)
        out, scale = reduce_ops.reduce_scale(x)
        sdt = torch.float64 if dtype == torch.float64 else torch.float32
        ref_scale = x.to(sdt).abs().amax(-1, keepdim=True)
        check(f"reduce_scale.scale {dtype} ({rows},{cols})", scale, ref_scale, 0, 0)
        check(f"reduce_scale.out {dtype} ({rows},{cols})", out, (x.to(sdt) / ref_scale).to(dtype), 0, 0)
        xi = x.clone()
        s2 = reduce_ops.reduce_scale_(xi)
        check(f"reduce_scale_ {dtype} ({rows},{cols})", xi, out, 0, 0)
    x = torch.randn(64, 1 << 22 // 64, device=dev, dtype=dtype)
    check(f"softmax {dtype} few long rows", reduce_ops.softmax(x, -1), torch.softmax(x.double(), -1).to(dtype), atol, rtol)
    x = torch.randn(1 << 22, device=dev, dtype=dtype)
    check(f"softmax {dtype} whole tensor", reduce_ops.softmax(x, 0), torch.softmax(x.double(), 0).to(dtype), atol, rtol)
    x = torch.randn(16, 300, 33, device=dev, dtype=dtype)
    check(f"softmax {dtype} inner dim", reduce_ops.softmax(x, 1), torch.softmax(x.double(), 1).to(dtype), atol, rtol)
    x = torch.randn(1000, 129, device=dev, dtype=dtype)[:, 1:]
    check(f"softmax {dtype} misaligned", reduce_ops.softmax(x, 1), torch.softmax(x.double(), 1).to(dtype), atol, rtol)

x = torch.randn(512, 4096, device=dev, dtype=torch.bfloat16)
check("softmax bf16->fp32", reduce_ops.softmax(x, -1, dtype=torch.float32), torch.softmax(x.double(), -1).float(), 1e-6, 1e-5)
check("sum bf16->fp32", reduce_ops.sum(x, -1, dtype=torch.float32), x.double().sum(-1).float(), 1e-3, 1e-5)
x = torch.full((4, 300), float("-inf"), device=dev)
check("softmax all -inf", reduce_ops.softmax(x, -1), torch.softmax(x, -1), 0, 0)
x = torch.randn(4, 100000, device=dev)
x[1, 5] = float("nan")
check("amax nan", reduce_ops.amax(x, -1), torch.amax(x, -1), 0, 0)
check("amax nan dim0", reduce_ops.amax(x.t().contiguous(), 0), torch.amax(x, -1), 0, 0)
x = torch.zeros(3, 1000, device=dev)
out, scale = reduce_ops.reduce_scale(x)
check("reduce_scale zero rows", out, torch.zeros_like(x), 0, 0)

# Timings (do_bench median), ours vs torch eager, large shapes.
try:
    from triton.testing import do_bench
except ImportError:
    do_bench = None
if do_bench is not None:
    a = torch.empty(1 << 28, device=dev)
    b = torch.empty_like(a)
    t = do_bench(lambda: b.copy_(a), return_mode="median")
    copy = 2 * a.numel() * 4 / t / 1e6
    print(f"copy: {copy:.0f} GB/s")
    del a, b
    cases = [
        ("sum", (442368, 128), -1), ("sum", (442368, 128), 0), ("sum", (1 << 28,), None),
        ("amax", (442368, 128), -1), ("sum", (8, 1 << 24), -1), ("sum", (16384, 4096), 0),
        ("softmax", (442368, 128), -1), ("softmax", (16384, 4096), -1), ("softmax", (4096, 32768), -1),
        ("softmax", (1024, 262144), -1), ("softmax", (8, 1 << 24), -1), ("softmax", (1 << 28,), 0),
        ("reduce_scale", (16384, 4096), -1), ("reduce_scale", (8, 1 << 24), -1),
    ]
    for dtype in [torch.float32, torch.bfloat16]:
        for op, shape, d in cases:
            x = torch.randn(shape, device=dev, dtype=dtype)
            if op in ("sum", "amax"):
                ours = lambda: getattr(reduce_ops, op)(x, d)
                theirs = lambda: getattr(torch, op)(x, d if d is not None else list(range(x.dim())))
                nbytes = x.numel() * x.element_size()
            elif op == "softmax":
                ours = lambda: reduce_ops.softmax(x, d)
                theirs = lambda: torch.softmax(x, d)
                nbytes = 2 * x.numel() * x.element_size()
            else:
                ours = lambda: reduce_ops.reduce_scale(x)
                theirs = lambda: (x.float() / x.abs().amax(-1, keepdim=True).float()).to(x.dtype)
                nbytes = 2 * x.numel() * x.element_size()
            t1 = do_bench(ours, return_mode="median")
            t2 = do_bench(theirs, return_mode="median")
            print(f"{op:13s} {str(shape):16s} dim={str(d):4s} {str(dtype)[6:]:9s} ours {t1*1e3:9.1f} us "
                  f"{nbytes/t1/1e6:7.0f} GB/s ({nbytes/t1/1e6/copy:4.0%})  torch {t2*1e3:9.1f} us  x{t2/t1:5.2f}")
            del x

print(f"\n{len(failures)} failures")
for f in failures:
    print("  ", f)
sys.exit(1 if failures else 0)
