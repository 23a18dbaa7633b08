#!/usr/bin/env python3
"""Random differential check of every op against torch, over random layouts.

    python scripts/fuzz_ops.py --device cuda --seconds 240 --seed 11

Each case draws a dtype, a shape of rank 1-5 (sizes from 0 to 5000, the odd and the common), a
layout made of views (permuted, sliced with a step, offset by an element, a size-1 dim expanded,
channels_last), dims (none, one, several, negative), keepdim, an output dtype and special values,
and compares one op with torch:

- sum: inputs are small integers, so a float32 (or float64) accumulation is exact in any order,
  and the result must equal torch's float64 sum rounded to the output dtype, bit for bit;
- amax: equal to torch.amax, NaN where torch gives NaN, bit for bit;
- softmax (with dtype= or without) and softmax_backward (grad on the drawn view, out contiguous
  or on grad's strides): the largest error against float64 at most twice torch's own in the same
  dtype, plus a few roundings of the output;
- reduce_scale: the scale equal to max(amax(|x|), eps) in float32 (float64), bit for bit, and out
  within one rounding of x / scale (0 where the scale is 0); reduce_scale_ leaves the same values
  in x (on layouts that do not overlap) and returns the same scale.

Where torch raises (an empty reduced dim for amax), the op must raise the same exception type.
tests/test_random_layouts.py runs a fixed set of these cases (seeded) on every device.
"""
import argparse
import math
import random
import time

import torch

import reduce_ops

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
SIZES = [0, 1, 1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 31, 49, 64, 65, 100, 128, 197, 256, 257, 1000, 1024, 4096, 5000]
OPS = ["sum", "amax", "softmax", "reduce_scale", "softmax_backward"]


def rounding(dtype):
    """One rounding of `dtype`, relative (the unit roundoff: half its eps)."""
    return torch.finfo(dtype).eps / 2


class Case:
    """One drawn case: `x` (a view with the drawn layout), its description, and the op's arguments."""

    def __init__(self, rng, device, max_numel, ops=OPS):
        self.op = rng.choice(ops)
        self.dtype = rng.choice(DTYPES)
        rank = rng.choice([1, 2, 2, 3, 3, 3, 4, 4, 4, 5])
        while True:
            shape = [rng.choice(SIZES) for _ in range(rank)]
            if 8 * math.prod(max(n, 1) for n in shape) <= max_numel:  # outputs of empty inputs too, expanded
                break
        gen = torch.Generator().manual_seed(rng.randrange(1 << 62))
        base = torch.randint(-4, 5, shape, generator=gen).to(self.dtype)
        if self.op in ("softmax", "reduce_scale", "softmax_backward"):
            base = (base.double() * 0.37).to(self.dtype)  # values that are not integers
        if base.numel() > 0 and rng.random() < 0.15:  # in the storage, before the views: a view may or may not hold it
            flat = base.view(-1)
            for _ in range(rng.randint(1, 3)):
                flat[rng.randrange(flat.numel())] = rng.choice([math.nan, -math.inf, math.inf])
        x = base.to(device)
        desc = [f"{shape}"]
        if rank == 4 and rng.random() < 0.15:
            x = x.contiguous(memory_format=torch.channels_last)
            desc.append("channels_last")
        if rank > 1 and rng.random() < 0.3:
            perm = list(range(rank))
            rng.shuffle(perm)
            x = x.permute(perm)
            desc.append(f"permute{perm}")
        if rng.random() < 0.3:
            d = rng.randrange(x.dim())
            if x.shape[d] > 2:
                start, step = rng.choice([0, 1]), rng.choice([1, 2, 3])
                x = x.narrow(d, start, x.shape[d] - start)[(slice(None),) * d + (slice(None, None, step),)]
                desc.append(f"[{d}: {start}::{step}]")
        self.expanded = rng.random() < 0.15
        if self.expanded:
            d = rng.randrange(x.dim() + 1)
            x = x.unsqueeze(d).expand(*x.shape[:d], rng.choice([2, 3, 8]), *x.shape[d:])
            desc.append(f"expand({d})")
        self.x = x
        self.desc = " ".join(desc) + f" strides {x.stride()} offset {x.storage_offset()}"
        nd = x.dim()
        if rng.random() < 0.15:
            self.dim = None
        else:
            dims = sorted(rng.sample(range(nd), rng.randint(1, nd)))
            dims = [d - nd if rng.random() < 0.3 else d for d in dims]
            self.dim = dims[0] if len(dims) == 1 and rng.random() < 0.5 else tuple(dims)
        self.keepdim = rng.random() < 0.3
        self.sum_dtype = torch.float32 if self.dtype in (torch.bfloat16, torch.float16) and rng.random() < 0.3 else None
        self.softmax_dim = rng.randrange(nd) - (nd if rng.random() < 0.5 else 0)
        # (drawn for softmax only, so that the other ops' cases stay those of the first version)
        wide = self.op == "softmax" and self.dtype != torch.float64 and rng.random() < 0.2
        self.softmax_dtype = torch.float32 if wide else None
        self.eps = rng.choice([0.0, 0.0, 0.0, 0.5])
        self.on_strides = rng.random() < 0.3  # reduce_scale_'s x, softmax_backward's out on x's strides

    def __str__(self):
        strides = self.on_strides and not self.expanded
        args = {"sum": f"dim={self.dim} keepdim={self.keepdim} dtype={self.sum_dtype}",
                "amax": f"dim={self.dim} keepdim={self.keepdim}",
                "softmax": f"dim={self.softmax_dim} dtype={self.softmax_dtype}",
                "softmax_backward": f"dim={self.softmax_dim} out_on_grads_strides={strides}",
                "reduce_scale": f"eps={self.eps} in_place={strides}"}[self.op]
        return f"{self.op} {self.dtype} {self.desc} {args}"


def _raises_alike(ours, expected):
    """None if `ours()` raises `expected` (the exception type torch raised), else what it did."""
    try:
        ours()
    except expected:
        return None
    except Exception as e:  # noqa: BLE001
        return f"raised {type(e).__name__} where torch raised {expected.__name__}: {e}"
    return f"returned where torch raised {expected.__name__}"


def _on_strides(x, values):
    """A copy of `values` on x's strides and storage offset (x's elements distinct in memory)."""
    span = 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride()))
    buf = torch.empty(x.storage_offset() + span, dtype=values.dtype, device=x.device)
    y = buf.as_strided(x.shape, x.stride(), x.storage_offset())
    y.copy_(values)
    return y


def _within_torchs_error(op, got, ref, torchs, dt):
    """None if `got`'s largest error against the float64 `ref` is at most twice torch's (`torchs`)
    plus a few roundings of the output, with NaN in the same places."""
    if got.shape != ref.shape or got.dtype != torchs.dtype or not torch.equal(got.isnan(), ref.isnan()):
        return f"{op}: shape, dtype or NaNs differ"
    theirs = (torchs.double() - ref).abs().nan_to_num(0).max().item()
    ours = (got.double() - ref).abs().nan_to_num(0).max().item()
    scale = ref.abs().nan_to_num(0, 0, 0).max().item()
    if ours > 2 * theirs + 8 * rounding(dt) * max(scale, 1.0):
        return f"{op} error {ours:.3g} against torch's {theirs:.3g}"
    return None


def check(case):
    """None if the op agrees with torch on `case`, else what differs."""
    x, dt = case.x, case.dtype
    if case.op == "sum":
        dims = case.dim if case.dim is not None else tuple(range(x.dim()))
        got = reduce_ops.sum(x, case.dim, case.keepdim, dtype=case.sum_dtype)
        ref = torch.sum(x.double(), dims, case.keepdim).to(case.sum_dtype or dt)
        if case.dim is None and not case.keepdim:
            ref = ref.reshape(())
        ok = got.shape == ref.shape and got.dtype == ref.dtype and torch.equal(got.nan_to_num(7.0), ref.nan_to_num(7.0))
        return None if ok and torch.equal(got.isnan(), ref.isnan()) else f"sum {tuple(got.shape)} vs {tuple(ref.shape)}"
    if case.op == "amax":
        try:
            ref = torch.amax(x, case.dim if case.dim is not None else (), case.keepdim)
        except Exception as e:  # noqa: BLE001 (whatever torch raises, ours must raise too)
            return _raises_alike(lambda: reduce_ops.amax(x, case.dim, case.keepdim), type(e))
        got = reduce_ops.amax(x, case.dim, case.keepdim)
        ok = got.shape == ref.shape and torch.equal(got.nan_to_num(7.0), ref.nan_to_num(7.0))
        return None if ok and torch.equal(got.isnan(), ref.isnan()) else "amax differs"
    if case.op == "softmax":
        if x.numel() == 0:
            return None
        d, odt = case.softmax_dim, case.softmax_dtype
        got, ref = reduce_ops.softmax(x, d, dtype=odt), torch.softmax(x.double(), d)
        return _within_torchs_error("softmax", got, ref, torch.softmax(x, d, dtype=odt), odt or dt)
    if case.op == "softmax_backward":
        if x.numel() == 0:
            return None
        d = case.softmax_dim
        out = torch.softmax(x.double().flip(d) * 2, d).to(dt)  # another row's softmax, contiguous
        if case.on_strides and not case.expanded:
            out = _on_strides(x, out)  # or on grad's strides
        got = reduce_ops.softmax_backward(x, out, d)
        g, y = x.double(), out.double()
        ref = y * (g - (g * y).sum(d, keepdim=True))
        return _within_torchs_error("softmax_backward", got, ref, torch._softmax_backward_data(x, out, d, dt), dt)
    if x.numel() == 0:
        return None
    acc = torch.float64 if dt == torch.float64 else torch.float32
    rs = x.to(acc).abs().amax(-1, keepdim=True).clamp_min(case.eps)
    rs = torch.where(x.to(acc).isnan().any(-1, keepdim=True), torch.nan, rs)
    rout = torch.where(rs == 0, 0.0, x.to(acc) / rs).to(dt)
    out, scale = reduce_ops.reduce_scale(x, eps=case.eps)
    close = (out.double() - rout.double()).abs() <= rounding(dt) * 2 * rout.double().abs()
    close |= out.isnan() & rout.isnan()
    if not (torch.equal(scale.nan_to_num(7.0), rs.nan_to_num(7.0)) and close.all()):
        return "reduce_scale differs"
    if case.on_strides and not case.expanded:
        y = _on_strides(x, x)
        s = reduce_ops.reduce_scale_(y, eps=case.eps)
        if not (torch.equal(s.nan_to_num(7.0), scale.nan_to_num(7.0)) and
                torch.equal(y.nan_to_num(7.0), out.nan_to_num(7.0))):
            return "reduce_scale_ differs from reduce_scale"
    return None


def run(device, seed, count=None, seconds=None, max_numel=1 << 20, ops=OPS):
    """Draws cases of `ops` from `seed` until `count` of them or `seconds` have passed; returns
    (cases checked per op, failures as strings)."""
    rng = random.Random(seed)
    done, failures = {}, []
    end = None if seconds is None else time.time() + seconds
    while (count is None or sum(done.values()) < count) and (end is None or time.time() < end):
        case = Case(rng, device, max_numel, ops)
        try:
            problem = check(case)
        except Exception as e:  # noqa: BLE001
            problem = f"raised {type(e).__name__}: {str(e)[:200]}"
        done[case.op] = done.get(case.op, 0) + 1
        if problem is not None:
            failures.append(f"{case}: {problem}")
    return done, failures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-numel", type=int, default=1 << 20)
    a = p.parse_args()
    done, failures = run(a.device, a.seed, seconds=a.seconds, max_numel=a.max_numel)
    for f in failures[:50]:
        print("FAIL", f)
    print(f"{a.device}, seed {a.seed}: {sum(done.values())} cases {done}, {len(failures)} failures")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
