#!/usr/bin/env python3
"""Benchmark reduce-ops against torch eager, torch.compile and peer kernel libraries.

Every op here is memory-bound, so each timing is reported three ways: microseconds, GB/s of
the least traffic the op needs (SPEC.md, "Benchmark results format"), and that bandwidth as
a fraction of a device-to-device copy measured in the same run. Before a provider is timed
on a case its output is compared with torch's own code run in float64 on the same inputs and
rounded to the case's dtype (`reference`; torch eager is checked like the others), and a wrong
result is marked (`"ok": false`, `!` in the table): a fast wrong kernel must not look good.

Usage (from the repository root):

    python benchmarks/bench.py                          # every op, float32 + bfloat16
    python benchmarks/bench.py --ops softmax --dtypes bfloat16 --shapes full --plot out/
    python benchmarks/bench.py --json auto              # -> benchmarks/results/<gpu>.json
    python benchmarks/bench.py --dtypes bfloat16 --json auto --merge   # add to that file
    python benchmarks/bench.py --json out/ --time-budget 500   # -> out/<gpu>.json, stop in time
    python benchmarks/bench.py --json out/ --resume            # run the cases it lacks
    python benchmarks/bench.py --shapes small --graph   # launch-bound sizes, CUDA graphs too
    python benchmarks/bench.py --from-json benchmarks/results/h100.json --plot out/

Providers: `reduce_ops` (this package), `torch` (eager), `torch.compile` (the same torch
code, compiled once per case with dynamic=False, fullgraph=True), and the peers `liger`
(Liger-Kernel), `flag_gems` (FlagGems) and `quack` (quack-kernels) where they import. A
provider that cannot be imported is listed at the start and in the JSON's "unavailable";
a shape a provider does not support shows as `n/a`; an exception shows as `error` and
is kept in the JSON's "errors". The JSON's "versions" names each provider's library version
(reduce_ops' marked "(not installed)" where it was imported from a source tree), and "commit"
the git commit of the checkout bench.py ran from ("+": tracked files changed); rows a --merge
keeps carry their own run's.

Timing: on CUDA the median of single calls between CUDA events (do_bench's method), the L2
flushed before each (and its persisting lines, which no flush evicts, reset to normal before
each provider: see Timer): ops that write (softmax, reduce_scale, softmax_backward) after a flush
that zero-fills 256 MB, as `triton.testing.do_bench`; reductions (sum, amax, whatever their
output's size) after a flush that reads 256 MB, so that they are not billed for writing back
the flush's own dirty lines; after the flush the GPU sleeps ~200 us before the start event, so
that a provider's host overhead (torch.compile's wrapper: 60-85 us a call on the lent H200)
is not timed as GPU time (see Timer); with `--graph` each case is also timed inside a CUDA graph of
several calls, rotating input copies so that together they exceed the L2, to take launch
overhead out (rows with `"graph": true`). On CPU: `time.perf_counter`, median of repeats.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.metadata
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"

OPS = ("sum", "amax", "softmax", "reduce_scale", "softmax_backward")
PEERS = ("liger", "flag_gems", "quack")
PROVIDERS = ("reduce_ops", "torch", "torch.compile") + PEERS
# float64 is correct everywhere but no speed target; it is here so that A/Bs can time its paths
# (scripts/rows_ab.py), and no preset or default list takes it.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}
DTYPE_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64"}

# Loose tolerances for the correctness guard: they catch a wrong kernel, not the last ulp.
# bfloat16 keeps 8 bits of mantissa (4e-3 relative), so a rounding difference on output fits.
RTOL = {"float32": 1e-3, "float16": 5e-3, "bfloat16": 2e-2, "float64": 1e-9}


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One op on one input: `shape` of the input, `dim` reduced (an int, a tuple of dims, or
    None: every dim)."""

    op: str
    shape: tuple
    dim: Optional[int | tuple]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def reduced_len(self) -> int:
        """Length of the reduced slice: the x axis of the plots."""
        if self.dim is None:
            return self.numel
        return math.prod(self.shape[d] for d in _as_tuple(self.dim))

    @property
    def bytes(self) -> int:
        """Least traffic (SPEC.md): every input read once, every output written once."""
        elt = DTYPES[self.dtype].itemsize
        n = self.numel
        if self.op in ("sum", "amax"):
            out_numel = n // self.reduced_len
            return n * elt + out_numel * elt
        if self.op == "softmax":
            return 2 * n * elt
        if self.op == "reduce_scale":
            return 2 * n * elt + (n // self.shape[-1]) * 4  # out + float32 scale per row
        if self.op == "softmax_backward":
            return 3 * n * elt  # read grad and out, write grad_x
        raise ValueError(self.op)

    @property
    def writes(self) -> bool:
        """Whether the op leaves the L2 as dirty as do_bench's flush does (Timer): every op but
        the reductions. Until session 97 reductions of up to 8 elements an output counted too,
        but a reduction writes its output while its input streams through the L2, which evicts
        and writes back most of it within the call: 8 x 2^24 bfloat16 summed over dim 0 (a 32
        MB output) took 71.0 us a call back to back, 71.2 after the read flush and 78.2 after
        the zero-fill (h200_study/session97.txt, sections 5-6). Measured at 1/8; a reduction to
        half its input, which no preset holds, would lie nearer the ops that write (section 7:
        back to back they sit between the two flushes)."""
        return self.op not in ("sum", "amax")

    def key(self) -> tuple:
        return (self.op, tuple(self.shape), self.dim, self.dtype)


# Default 2-D shapes are about 2^26 elements (256 MB in float32, 128 MB in bfloat16): well
# above the 50-60 MB L2 of an H100/H200, from many short rows to a few very long ones.
SHAPES_2D = {
    "small": [(1024, 128), (64, 4096), (4, 65536)],
    "default": [(442368, 128), (65536, 1024), (16384, 4096), (4096, 32768),
                (1024, 262144), (8, 2**24)],
}
# Shapes that models hand these ops, row lengths the power-of-two grid above never meets, some
# of them not a whole number of 16-byte packs (the unaligned paths): attention rows of CLIP's
# text encoder (77) and ViT-B/16 (197), ImageNet logits (1000), the vocabularies of Llama 2
# (32000), GPT-2 (50257), Llama 3 (128256) and Qwen2 (151936), and an MLP width (Llama 3 8B,
# 14336: ReduceScale's per-token quantization of its activations).
SHAPES_2D["models"] = [(65536, 77), (32768, 197), (16384, 1000), (4096, 32000), (2048, 50257),
                       (4096, 128256), (2048, 151936), (8192, 14336)]
SHAPES_2D["full"] = sorted(
    set(SHAPES_2D["default"]) | {(2**26 // 2**k, 2**k) for k in range(7, 19)},
    key=lambda s: (s[1], s[0]))
# Reductions over several dims, or a middle one, as models make them (sum and amax only): a
# channel's statistics over batch and length of (N, C, L), batch norm's over (N, H, W) of NCHW
# activations (large and small images), and a sum over the sequence of (B, T, C). Their reduced
# dims are apart in memory (all but the last); two groups of them take one launch of the runs
# kernel (a channel's contiguous runs, reduce.cu's launch_two_groups_runs), a middle dim the columns.
DIMS_CASES = {
    "models": [], "small": [], "default": [], "full": [],
    "dims": [((64, 512, 2048), (0, 2)), ((128, 128, 64, 64), (0, 2, 3)), ((256, 512, 7, 7), (0, 2, 3)),
             ((16, 4096, 1024), 1)],
}
SHAPES_2D["dims"] = []
SHAPES_1D = {
    "small": [2**10, 2**20],
    "default": [2**20, 2**24, 2**28, 2**30],
    "full": [2**16, 2**18, 2**20, 2**22, 2**24, 2**26, 2**28, 2**30],
    "models": [],
    "dims": [],
}
# Softmax over a whole 1-D tensor (one row of every element), float32 only.
WHOLE_SOFTMAX = {"small": 2**20, "default": 2**30, "full": 2**30, "models": None, "dims": None}


def build_cases(preset: str, ops: list, dtypes: list) -> list:
    """The cases of a preset, ordered by op, then shape, dim and dtype."""
    cases = []
    for op in ops:
        for dtype in dtypes:
            for shape in SHAPES_2D[preset]:
                dims = (-1, 0) if op in ("sum", "amax") else (-1,)
                cases += [Case(op, shape, d, dtype) for d in dims]
            if op in ("sum", "amax"):
                cases += [Case(op, (n,), None, dtype) for n in SHAPES_1D[preset]]
                cases += [Case(op, shape, dim, dtype) for shape, dim in DIMS_CASES[preset]]
            if op == "softmax" and dtype == "float32" and WHOLE_SOFTMAX[preset]:
                cases.append(Case(op, (WHOLE_SOFTMAX[preset],), 0, dtype))
    return sorted(cases, key=case_order)


def case_order(c) -> tuple:
    """Table order: op, dtype, then rows (last dim of 2-D), columns (dim 0 of 2-D), whole
    1-D tensors and the rest (several dims, a middle dim), each by reduced length. Takes a Case
    or a row_key()."""
    op, shape, dim, dtype = (c.op, c.shape, c.dim, c.dtype) if isinstance(c, Case) else c[:4]
    kind = 2 if len(shape) == 1 else (3 if len(shape) > 2 or isinstance(dim, tuple) else (1 if dim == 0 else 0))
    length = math.prod(shape) if dim is None else math.prod(shape[d] for d in _as_tuple(dim))
    return (OPS.index(op) if op in OPS else 99, dtype, kind, length, tuple(shape))


def make_inputs(case: Case, device: str, seed: int) -> tuple:
    """Random inputs (never zeros): (x,) or, for softmax_backward, (grad, out)."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = DTYPES[case.dtype]
    if case.op == "softmax_backward":
        grad = torch.randn(case.shape, dtype=dt, device=device, generator=g)
        out = torch.softmax(torch.randn(case.shape, dtype=dt, device=device, generator=g),
                            case.dim)
        return grad, out
    return (torch.randn(case.shape, dtype=dt, device=device, generator=g),)


# --------------------------------------------------------------------------------------
# Providers
# --------------------------------------------------------------------------------------


class Unsupported(Exception):
    """The provider has no kernel for this case (shown as n/a, not an error)."""


def torch_fn(case: Case) -> Callable:
    """Torch's own code for a case: the reference, the eager provider and what
    torch.compile compiles."""
    dim = case.dim
    if case.op == "sum":
        return (lambda x: torch.sum(x)) if dim is None else (lambda x: torch.sum(x, dim))
    if case.op == "amax":
        return (lambda x: torch.amax(x)) if dim is None else (lambda x: torch.amax(x, dim))
    if case.op == "softmax":
        return lambda x: torch.softmax(x, dim)
    if case.op == "reduce_scale":
        def reduce_scale(x):
            s = x.abs().amax(-1, keepdim=True).float()
            return (x.float() / s).to(x.dtype), s
        return reduce_scale
    if case.op == "softmax_backward":
        return lambda grad, out: torch.ops.aten._softmax_backward_data(
            grad, out, dim, out.dtype)
    raise ValueError(case.op)


def _is_last_dim_2d(case: Case) -> bool:
    return len(case.shape) == 2 and case.dim in (-1, 1)


class ReduceOpsProvider:
    name = "reduce_ops"

    def __init__(self):
        import reduce_ops  # raises ImportError when not built

        self.ro = reduce_ops
        self.has_backward = hasattr(torch.ops.reduce_ops, "softmax_backward")

    def fn(self, case: Case) -> Callable:
        ro, dim = self.ro, case.dim
        if case.op == "sum":
            return lambda x: ro.sum(x, dim)
        if case.op == "amax":
            return lambda x: ro.amax(x, dim)
        if case.op == "softmax":
            return lambda x: ro.softmax(x, dim)
        if case.op == "reduce_scale":
            return lambda x: ro.reduce_scale(x)
        if case.op == "softmax_backward":
            if not self.has_backward:
                raise Unsupported("torch.ops.reduce_ops.softmax_backward is missing")
            op = torch.ops.reduce_ops.softmax_backward
            return lambda grad, out: op(grad, out, dim)
        raise Unsupported(case.op)


class TorchProvider:
    name = "torch"

    def fn(self, case: Case) -> Callable:
        return torch_fn(case)


class CompileProvider:
    """torch.compile of torch's code, compiled afresh for every case (dynamic=False), so
    no case runs into the recompile limit and silently falls back to eager."""

    name = "torch.compile"

    def fn(self, case: Case) -> Callable:
        torch._dynamo.reset()
        return torch.compile(torch_fn(case), dynamic=False, fullgraph=True)


class LigerProvider:
    """Liger-Kernel: row softmax (last dim of a 2-D tensor, rows up to 65536)."""

    name = "liger"

    def __init__(self):
        from liger_kernel.ops.softmax import LigerSoftmaxFunction, _softmax_backward
        from liger_kernel.ops.utils import calculate_settings

        self.forward = LigerSoftmaxFunction.apply
        self.backward = _softmax_backward
        self.settings = calculate_settings

    def fn(self, case: Case) -> Callable:
        if case.op not in ("softmax", "softmax_backward") or not _is_last_dim_2d(case):
            raise Unsupported(case.op)
        if case.shape[-1] > 65536:  # calculate_settings' MAX_FUSED_SIZE
            raise Unsupported("rows longer than 65536")
        if case.op == "softmax":
            return self.forward
        block, warps = self.settings(case.shape[-1])
        return lambda grad, out: self.backward(grad, out, block, warps, False)


class FlagGemsProvider:
    """FlagGems: its op functions called directly (flag_gems.enable() is never called, so
    the torch provider stays torch)."""

    name = "flag_gems"

    def __init__(self):
        import flag_gems

        self.fg = flag_gems

    def fn(self, case: Case) -> Callable:
        fg, dim = self.fg, case.dim
        dims = list(_as_tuple(dim))
        if case.op == "sum":
            return (lambda x: fg.sum(x)) if dim is None else (lambda x: fg.sum_dim(x, dims))
        if case.op == "amax":
            return (lambda x: fg.amax(x)) if dim is None else (lambda x: fg.amax(x, dims))
        if case.op == "softmax":
            return lambda x: fg.softmax(x, dim)
        if case.op == "softmax_backward":
            return lambda grad, out: fg.softmax_backward(grad, out, dim, out.dtype)
        raise Unsupported(case.op)


class QuackProvider:
    """quack-kernels (CuTe DSL): row softmax of a 2-D tensor, forward and backward."""

    name = "quack"

    def __init__(self):
        from quack.softmax import softmax_bwd, softmax_fwd

        self.forward, self.backward = softmax_fwd, softmax_bwd

    def fn(self, case: Case) -> Callable:
        if case.op not in ("softmax", "softmax_backward") or not _is_last_dim_2d(case):
            raise Unsupported(case.op)
        return self.forward if case.op == "softmax" else self.backward


PROVIDER_CLASSES = {
    "reduce_ops": ReduceOpsProvider, "torch": TorchProvider, "torch.compile": CompileProvider,
    "liger": LigerProvider, "flag_gems": FlagGemsProvider, "quack": QuackProvider,
}
DISTRIBUTIONS = {"reduce_ops": "reduce-ops", "liger": "liger-kernel",
                 "flag_gems": "flag-gems", "quack": "quack-kernels", "triton": "triton"}


def load_providers(names: list, device: str) -> tuple:
    """Instantiate the named providers; returns ({name: provider}, {name: why not})."""
    providers, unavailable = {}, {}
    for name in names:
        try:
            providers[name] = PROVIDER_CLASSES[name]()
        except Exception as e:  # ImportError, or a peer refusing a machine without GPU
            msg = " ".join(f"{type(e).__name__}: {e}".split())
            unavailable[name] = msg[:300]
            continue
        if name in PEERS and device != "cuda":
            del providers[name]
            unavailable[name] = "installed, but runs on CUDA only"
    return providers, unavailable


def versions() -> dict:
    out = {"torch": torch.__version__, "python": platform.python_version()}
    for name, dist in DISTRIBUTIONS.items():
        try:
            out[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    if "reduce_ops" not in out:  # imported from a source tree (PYTHONPATH), not installed
        try:
            out["reduce_ops"] = importlib.import_module("reduce_ops").__version__ + " (not installed)"
        except Exception:
            pass
    return out


def checkout_commit() -> Optional[str]:
    """The git commit of the checkout bench.py runs from, "+" appended where tracked files differ
    from it; None outside a git checkout. It names the source a run's reduce_ops came from only
    where reduce_ops was built from this checkout."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+" if dirty else "")


# --------------------------------------------------------------------------------------
# Correctness guard
# --------------------------------------------------------------------------------------


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def reference(case: Case, inputs: tuple):
    """What every provider's output is checked against: torch's own code for the case
    (torch_fn) run in float64 on the same inputs, rounded to the case's dtype, the dtype torch's
    own output has. Not torch eager's output itself: where an op cancels, eager's 16-bit result
    can be off by more than the check's tolerance (CUDA, bfloat16 softmax_backward of 442368 x
    128: 0.0018692 where float64 gives 0.00159454, which ours and torch.compile's give; results
    README, session 124), and the check then marked the right kernels wrong."""
    dt = DTYPES[case.dtype]
    out = torch_fn(case)(*(t.double() for t in inputs))
    return tuple(o.to(dt) for o in out) if isinstance(out, (tuple, list)) else out.to(dt)


def close(out, ref, dtype: str) -> tuple:
    """(ok, why): same shapes and dtypes, no NaN, and |out - ref| <= rtol*(|ref| +
    mean|ref|) element-wise. The mean term lets a value near zero (a sum that cancels, a
    tiny softmax probability) differ by a rounding of the typical magnitude."""
    out, ref = _as_tuple(out), _as_tuple(ref)
    if len(out) != len(ref):
        return False, f"{len(out)} outputs, the reference has {len(ref)}"
    rtol = RTOL[dtype]
    for o, r in zip(out, ref):
        if tuple(o.shape) != tuple(r.shape) or o.dtype != r.dtype:
            return False, f"{o.dtype}{list(o.shape)} vs the reference's {r.dtype}{list(r.shape)}"
        o, r = o.reshape(-1), r.reshape(-1)
        if r.numel() == 0:
            continue
        chunk = 1 << 26  # bounds the float32 temporaries on a 2^30-element output
        mean = sum(r[i:i + chunk].float().abs().sum().item()
                   for i in range(0, r.numel(), chunk)) / r.numel()
        for i in range(0, r.numel(), chunk):
            oc, rc = o[i:i + chunk].float(), r[i:i + chunk].float()
            if torch.isnan(oc).any().item():
                return False, "NaN in output"
            err = (oc - rc).abs() - rtol * (rc.abs() + mean)
            bad = (err > 0).sum().item()
            if bad:
                j = int(err.argmax())
                return False, (f"{bad} of {r.numel()} elements off (rtol={rtol}), worst: "
                               f"{oc[j].item():.6g} where float64 gives {rc[j].item():.6g}")
    return True, ""


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


class Timer:
    """Median time of one call, in microseconds, with the method named in `kind`.

    On CUDA the L2 is flushed before each timed call so that no input is found there. How it is
    flushed matters for ops that only read: triton's do_bench zero-fills a 256 MB buffer, which
    leaves the L2 full of dirty lines, and writing those back to DRAM happens inside the timed
    call. An op that writes as much as it reads (softmax) pays for them but leaves as many dirty
    lines of its own behind, so that is its steady state; a reduction writes almost nothing and
    would be billed for ~L2-size of writes that are not its own (H200: 6-10 us a call, 20% of a
    256 MB sum; scripts/flush_study.py). So ops that write get do_bench's zero-fill, and
    reductions (`writes=False`) a flush that reads 256 MB instead, leaving the L2 clean; both
    are timed as do_bench does (CUDA events around single calls, median).

    Neither flush evicts lines loaded with an L2 evict_last policy: they sit in the L2's
    persisting set-aside (11.25 MB on the lent H200), which outlives any amount of ordinary
    traffic. Our row kernels mark their loads so where the call moves at least 3 L2s, and a
    provider timed next on the same input found up to that much of it in the L2 (H200: a 128 MB
    sum after a marked ReduceScale of the same tensor 42.1 us, 44.3 after an unmarked one;
    h200_study/session104.txt). So on CUDA each time() first resets every persisting line to
    normal (the driver's cuCtxResetPersistingL2Cache, after a synchronize), and no provider
    starts with another's leftovers; `l2_reset` is False where the driver lacks the call.

    Between the flush and the start event the GPU sleeps kSleepCycles (~200 us): do_bench's
    flush alone (~60 us) hid less host time than torch.compile's wrapper takes per call on the
    lent H200 (60-85 us, scripts/diag_compile_overhead.py), so its calls were timed partly
    idle (a 2^20 float sum: 23.6 us timed, 4.8 us in a CUDA graph). The sleep lets every
    provider's launches queue up before the timed span starts.
    """

    kSleepCycles = 400_000

    def __init__(self, device: str, warmup_ms: float, rep_ms: float):
        self.device, self.warmup_ms, self.rep_ms = device, warmup_ms, rep_ms
        self._reset_l2 = None
        if device == "cuda":
            self.flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
            self._reset_l2 = _persisting_l2_reset()
            self.kind = ("CUDA events around single calls, median (do_bench's method): "
                         + ("the L2's persisting lines reset to normal before each provider, "
                            if self.l2_reset else "")
                         + "zero-fill L2 flush for ops that write, read-only flush for "
                         "reductions, then a ~200 us GPU sleep so that host overhead is not timed")
            self.flush_words = self.flush.view(torch.int32)
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            self.l2_bytes = getattr(props, "L2_cache_size", 60 << 20) or (60 << 20)
        else:
            self.kind = "time.perf_counter"
            self.l2_bytes = 0

    @property
    def l2_reset(self) -> bool:
        """Whether time() resets the L2's persisting lines first (CUDA, where the driver has the call)."""
        return self._reset_l2 is not None

    def time(self, fn: Callable, writes: bool = True) -> float:
        if self.device != "cuda":
            return self._time_cpu(fn)
        if self._reset_l2 is not None:
            torch.cuda.synchronize()
            self._reset_l2()
        if not writes:
            return self._time_events(fn, lambda: self.flush_words.amax())
        return self._time_events(fn, self.flush.zero_)

    def _time_events(self, fn: Callable, flush: Callable) -> float:
        """do_bench's method: CUDA events around single calls, flush() before each."""
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        est_ms = max((time.perf_counter() - t0) * 1e3 / 5, 1e-3)
        # At most 100 + 500 calls: each also pays the flush and the sleep (~0.3 ms).
        n_warm = max(1, min(100, int(self.warmup_ms / est_ms)))
        n_rep = max(5, min(500, int(self.rep_ms / est_ms)))
        for _ in range(n_warm):
            fn()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(n_rep)]
        for start, end in events:
            flush()
            torch.cuda._sleep(self.kSleepCycles)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return 1e3 * statistics.median(s.elapsed_time(e) for s, e in events)

    def _time_cpu(self, fn: Callable) -> float:
        t_end = time.perf_counter() + self.warmup_ms / 1e3
        while True:
            fn()
            if time.perf_counter() >= t_end:
                break
        times, t_end = [], time.perf_counter() + self.rep_ms / 1e3
        while len(times) < 5 or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 1e6 * statistics.median(times)

    def time_graph(self, fns: list, calls: int, writes: bool = True) -> float:
        """Time `calls` calls captured in one CUDA graph, cycling over `fns` (each bound to
        its own copy of the inputs); returns microseconds per call."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm up (autotuning, lazy init) outside capture
            for f in fns:
                f()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                fns[i % len(fns)]()
        try:
            return self.time(graph.replay, writes) / calls
        finally:
            del graph


def _persisting_l2_reset() -> Optional[Callable[[], None]]:
    """The driver's cuCtxResetPersistingL2Cache for the current context as a call (it
    raises on an error code), or None where the driver library or the call is missing."""
    import ctypes

    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")
    for name in names:
        try:
            fn = ctypes.CDLL(name).cuCtxResetPersistingL2Cache
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int

        def reset() -> None:
            rc = fn()
            if rc != 0:
                raise RuntimeError(f"cuCtxResetPersistingL2Cache returned CUresult {rc}")

        torch.cuda.init()  # the primary context must be current on this thread
        try:
            reset()
        except RuntimeError:
            return None
        return reset
    return None


def measure_copy(timer: Timer, device: str) -> float:
    """Copy bandwidth ceiling in GB/s: b.copy_(a), bytes read + written (1 GiB of float32 on
    CUDA, 64 MiB on CPU)."""
    n = (1 << 28) if device == "cuda" else (1 << 24)
    a = torch.randn(n, device=device)
    b = torch.empty_like(a)
    us = timer.time(lambda: b.copy_(a))
    return 2 * a.numel() * a.element_size() / us / 1e3


# --------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------


def row_key(row: dict) -> tuple:
    dim = tuple(row["dim"]) if isinstance(row["dim"], list) else row["dim"]
    return (row["op"], tuple(row["shape"]), dim, row["dtype"], row["provider"],
            bool(row.get("graph", False)))


def graph_plan(case: Case, us: float, timer: Timer) -> tuple:
    """(calls per graph, input copies): enough calls for ~200 us of work, and enough
    copies that the calls of one replay do not find their inputs in the L2."""
    calls = max(1, min(64, math.ceil(200.0 / max(us, 1e-3))))
    copies = max(1, min(calls, math.ceil(3 * timer.l2_bytes / case.bytes)))
    return calls, copies


def run_case(case, providers, timer, args, results, errors, log) -> None:
    """Check and time every provider on one case; append rows and errors."""
    device = args.device
    inputs = make_inputs(case, device, args.seed)
    ref = reference(case, inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    base = {"op": case.op, "shape": list(case.shape), "dim": case.dim, "dtype": case.dtype}

    def error(name, graph, e):
        msg = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        errors.append(dict(base, provider=name, graph=graph, error=msg))
        log(f"  {name} on {case.op} {list(case.shape)} dim={case.dim} {case.dtype}"
            f"{' (graph)' if graph else ''}: {msg}")

    extra_inputs = None
    for name, prov in providers.items():
        try:
            fn = prov.fn(case)
        except Unsupported:
            continue
        except Exception as e:
            error(name, False, e)
            continue
        try:
            out = fn(*inputs)  # also compiles / autotunes
            ok, why = close(out, ref, case.dtype)
            del out
            if not ok:
                log(f"  WRONG: {name} on {case.op} {list(case.shape)} dim={case.dim} "
                    f"{case.dtype}: {why}")
            us = timer.time(lambda fn=fn: fn(*inputs), case.writes)
        except Exception as e:
            error(name, False, e)
            continue
        row = dict(base, provider=name, us=round(us, 3), bytes=case.bytes,
                   GBps=round(case.bytes / us / 1e3, 1), ok=ok, graph=False)
        if not ok:
            row["mismatch"] = why
        results.append(row)
        if not args.graph:
            continue
        calls, copies = graph_plan(case, us, timer)
        if extra_inputs is None or len(extra_inputs) < copies - 1:
            extra_inputs = [make_inputs(case, device, args.seed + i + 1)
                            for i in range(copies - 1)]
        sets = [inputs] + extra_inputs[:copies - 1]
        try:
            gus = timer.time_graph([(lambda fn=fn, s=s: fn(*s)) for s in sets], calls,
                                   case.writes)
        except Exception as e:
            error(name, True, e)
            if device == "cuda":
                torch.cuda.synchronize()
            continue
        results.append(dict(row, us=round(gus, 3), GBps=round(case.bytes / gus / 1e3, 1),
                            graph=True, graph_calls=calls, graph_inputs=copies))


def gpu_slug(device_name: str) -> str:
    """Short file name for a device: 'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA H200' ->
    'h200', 'NVIDIA GeForce RTX 4090' -> 'rtx4090', anything else -> a cleaned name."""
    name = device_name.lower()
    for word in ("nvidia", "geforce", "tesla", "quadro"):
        name = name.replace(word, " ")
    tokens = [t for t in re.split(r"[^a-z0-9]+", name) if t]
    for i, tok in enumerate(tokens):
        if tok in ("rtx", "gtx") and i + 1 < len(tokens):
            return tok + tokens[i + 1]
        if re.fullmatch(r"[a-z]+\d+[a-z]*", tok):
            return tok
    return "-".join(tokens) or "unknown"


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"CPU ({model}, {os.cpu_count()} threads)"


def write_json(path: Path, results: dict) -> None:
    """Write atomically, so a run killed mid-way leaves the last complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    os.replace(tmp, path)


def merge_results(old: dict, new: dict) -> dict:
    """New rows replace old ones of the same (op, shape, dim, dtype, provider, graph), and a
    provider this run timed leaves the old run's "unavailable"; the copy figure is the newest,
    with that of every run that still has rows in copy_GBps_runs. A kept row keeps its own
    run's copy figure (its copy_GBps, given it here if it had none), so that its "% of copy"
    stays against the run that timed it, and its run's checkout commit likewise, where that run
    recorded one; a peer library's version stays listed while rows it timed are kept, if this
    run did not load it."""
    keys = {row_key(r) for r in new["rows"] + new["errors"]}

    def keep(r):
        r = dict(r, copy_GBps=r.get("copy_GBps", old.get("copy_GBps")))
        if "commit" not in r and old.get("commit"):
            r["commit"] = old["commit"]
        return r

    kept = [keep(r) for r in old.get("rows", []) if row_key(r) not in keys]
    rows = kept + new["rows"]
    errors = [e for e in old.get("errors", []) if row_key(e) not in keys]
    merged = dict(new, rows=rows, errors=errors + new["errors"])
    # A provider that timed rows in this run is available, whatever an earlier run said.
    measured = {r["provider"] for r in new["rows"]}
    still = {name: why for name, why in old.get("unavailable", {}).items() if name not in measured}
    merged["unavailable"] = {**still, **new["unavailable"]}
    kept_providers = {r["provider"] for r in kept}
    old_versions = {name: v for name, v in old.get("versions", {}).items() if name in kept_providers}
    merged["versions"] = {**old_versions, **new.get("versions", {})}
    kept_copies = {r["copy_GBps"] for r in kept}
    merged["copy_GBps_runs"] = [c for c in old.get("copy_GBps_runs", [old.get("copy_GBps")])
                                if c in kept_copies] + [new["copy_GBps"]]
    return merged


def progress(iterable, total: int):
    try:
        from tqdm import tqdm

        tty = sys.stderr.isatty()  # in a log file, a line every 30 s rather than a stream
        bar = tqdm(iterable, total=total, unit="case", dynamic_ncols=True, file=sys.stderr,
                   mininterval=0.1 if tty else 30)
        return bar, bar.write
    except ImportError:
        def plain():
            for i, item in enumerate(iterable):
                print(f"[{i + 1}/{total}]", file=sys.stderr, flush=True)
                yield item
        return plain(), print


def benchmark(args) -> dict:
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device visible")
    preset = args.shapes or ("default" if device == "cuda" else "small")
    if args.graph and device != "cuda":
        print("note: --graph needs CUDA; ignored on CPU")
        args.graph = False
    if device == "cpu" and preset != "small":
        print(f"note: preset '{preset}' on CPU allocates up to several GB and is slow")

    names = [p for p in PROVIDERS if p in args.providers]
    providers, unavailable = load_providers(names, device)
    print(f"device: {device_name(device)}   torch {torch.__version__}   preset: {preset}")
    for name, why in unavailable.items():
        print(f"unavailable: {name}: {why}")

    ops = args.ops
    try:  # whether the op exists, even when the reduce_ops provider is filtered out
        importlib.import_module("reduce_ops")
    except Exception:
        pass
    has_bwd = hasattr(torch.ops.reduce_ops, "softmax_backward")
    if "softmax_backward" in ops and not has_bwd and not args.ops_given:
        ops = [op for op in ops if op != "softmax_backward"]
        print("note: torch.ops.reduce_ops.softmax_backward does not exist: "
              "softmax_backward skipped (name it in --ops to time the others)")
    elif "softmax_backward" in ops and not has_bwd:
        print("note: torch.ops.reduce_ops.softmax_backward does not exist: "
              "timing softmax_backward for the other providers only")

    timer = Timer(device, args.warmup, args.rep)
    torch.manual_seed(args.seed)
    copy_gbps = measure_copy(timer, device)
    print(f"copy bandwidth (b.copy_(a), read + write): {copy_gbps:.0f} GB/s   "
          f"timer: {timer.kind}")

    results = {
        "device": device_name(device), "torch": torch.__version__,
        "date": datetime.date.today().isoformat(), "copy_GBps": round(copy_gbps, 1),
        "rows": [], "unavailable": unavailable, "errors": [],
        "timer": timer.kind, "preset": preset, "versions": versions(), "commit": checkout_commit(),
        "command": " ".join(sys.argv[1:]),
    }
    old = None
    if args.json_path and (args.merge or args.resume) and args.json_path.exists():
        old = json.loads(args.json_path.read_text())

    def save():
        if args.json_path:
            write_json(args.json_path, merge_results(old, results) if old else results)

    cases = build_cases(preset, ops, args.dtypes)
    if args.resume and old:
        done = {row_key(r)[:4] for r in old.get("rows", []) + old.get("errors", [])}
        skipped = [c for c in cases if c.key() in done]
        cases = [c for c in cases if c.key() not in done]
        print(f"--resume: {len(skipped)} cases already in {args.json_path}, {len(cases)} to run")
    t_start = time.perf_counter()
    bar, log = progress(cases, len(cases))
    with torch.no_grad():
        for case in bar:
            if args.time_budget and time.perf_counter() - t_start > args.time_budget:
                results["partial"] = True
                log(f"time budget of {args.time_budget:.0f} s spent: "
                    f"{len(cases) - cases.index(case)} cases not run")
                break
            run_case(case, providers, timer, args, results["rows"], results["errors"], log)
            if device == "cuda":
                torch.cuda.empty_cache()  # the case's inputs are gone: give back their memory
            save()
    save()
    return merge_results(old, results) if old else results


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def _fmt_dim(dim) -> str:
    if isinstance(dim, (tuple, list)):
        return ",".join(map(str, dim))
    return "all" if dim is None else str(dim)


def _geomean(xs: list) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def print_table(results: dict, file=sys.stdout) -> None:
    """One line per case and timing mode: each provider's us, GB/s and % of the copy
    bandwidth ('!' marks a wrong result), then reduce_ops' speed-up over torch eager,
    torch.compile and the best peer (their time / reduce_ops' time)."""
    copy = results.get("copy_GBps") or float("nan")
    rows = results.get("rows", [])
    present = {r["provider"] for r in rows + results.get("errors", [])}
    provs = [p for p in PROVIDERS if p in present] + sorted(present - set(PROVIDERS))
    errs = {row_key(e) for e in results.get("errors", [])}
    cases: dict = {}
    for r in rows:
        k = row_key(r)[:4] + (bool(r.get("graph", False)),)
        cases.setdefault(k, {})[r["provider"]] = r

    print(f"\n{results.get('device', '?')}   torch {results.get('torch', '?')}   "
          f"{results.get('date', '?')}   copy {copy:.0f} GB/s   timer: "
          f"{results.get('timer', '?')}", file=file)
    for name, why in results.get("unavailable", {}).items():
        print(f"unavailable: {name}: {why}", file=file)
    cell_w = 21
    head = f"{'op':<16} {'shape':<16} {'dim':>4} {'dtype':<5}"
    sub = " " * len(head)
    for p in provs:
        head += f" | {p:^{cell_w}}"
        sub += f" | {'us':>8} {'GB/s':>6} {'copy':>5}"
    head += " | reduce_ops speed-up over"
    sub += " | " + f"{'torch':>6} {'compile':>7} {'peer':>6}"
    speedups: dict = {}
    for graph in (False, True):
        keys = sorted((k for k in cases if k[4] == graph), key=case_order)
        if not keys:
            continue
        print(f"\n{'inside CUDA graphs (us per call)' if graph else 'eager launches'}:",
              file=file)
        print(head, file=file)
        print(sub, file=file)
        print("-" * len(sub), file=file)
        for k in keys:
            op, shape, dim, dtype, _ = k
            line = (f"{op:<16} {'x'.join(map(str, shape)):<16} {_fmt_dim(dim):>4} "
                    f"{DTYPE_SHORT.get(dtype, dtype):<5}")
            by = cases[k]
            for p in provs:
                r = by.get(p)
                if r is None:
                    txt = "error" if k[:4] + (p, graph) in errs else "n/a"
                    line += f" | {txt:^{cell_w}}"
                else:
                    pct = 100 * r["GBps"] / copy
                    flag = " " if r.get("ok", True) else "!"
                    line += f" | {r['us']:>8.1f} {r['GBps']:>6.0f} {pct:>3.0f}%{flag}"
            mine = by.get("reduce_ops")
            ratios = []
            for group in (("torch",), ("torch.compile",), PEERS):
                others = [by[p]["us"] for p in group if p in by and by[p].get("ok", True)]
                if mine and mine.get("ok", True) and others:
                    ratio = min(others) / mine["us"]
                    speedups.setdefault((op, graph, group[0]), []).append(ratio)
                    ratios.append(f"{ratio:.2f}x")
                else:
                    ratios.append("-")
            line += f" | {ratios[0]:>6} {ratios[1]:>7} {ratios[2]:>6}"
            print(line, file=file)
    if speedups:
        print("\ngeometric mean speed-up of reduce_ops (their time / ours; >1: we are faster)",
              file=file)
        for (op, graph, group), xs in sorted(speedups.items()):
            label = {"torch": "torch eager", "torch.compile": "torch.compile"}.get(group,
                                                                                   "best peer")
            print(f"  {op:<16} {'graph' if graph else 'eager':<5} vs {label:<13} "
                  f"{_geomean(xs):5.2f}x  over {len(xs)} cases", file=file)
    wrong = [r for r in rows if not r.get("ok", True)]
    if wrong:
        print(f"\n{len(wrong)} rows gave a WRONG result (marked !):", file=file)
        for r in wrong:
            print(f"  {r['provider']} {r['op']} {r['shape']} dim={_fmt_dim(r['dim'])} "
                  f"{r['dtype']}{' graph' if r.get('graph') else ''}: "
                  f"{r.get('mismatch', '')}", file=file)
    if results.get("errors"):
        print(f"\n{len(results['errors'])} errors:", file=file)
        for e in results["errors"]:
            print(f"  {e['provider']} {e['op']} {e['shape']} dim={_fmt_dim(e['dim'])} "
                  f"{e['dtype']}{' graph' if e.get('graph') else ''}: {e['error']}",
                  file=file)
    if results.get("partial"):
        print("\nPARTIAL run: the time budget ran out before every case", file=file)


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def _list(choices):
    def parse(text):
        items = [s.strip() for s in text.split(",") if s.strip()]
        bad = [s for s in items if s not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {list(choices)}")
        return items
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--ops", type=_list(OPS), default=None,
                   help=f"comma list from {','.join(OPS)} (default: all; softmax_backward "
                        "only when torch.ops.reduce_ops.softmax_backward exists)")
    p.add_argument("--dtypes", type=_list(DTYPES), default=["float32", "bfloat16"],
                   help="comma list from float32,bfloat16,float16 (default float32,bfloat16)")
    p.add_argument("--shapes", choices=tuple(SHAPES_2D), default=None,
                   help="shape preset: small, default, full (default plus every power-of-two "
                        "row length from 128), models (row lengths of common models, some "
                        "unaligned), dims (sums and amaxes over several dims or a middle dim); "
                        "default: 'default' on CUDA, 'small' on CPU")
    p.add_argument("--providers", type=_list(PROVIDERS), default=list(PROVIDERS),
                   help=f"comma list from {','.join(PROVIDERS)} (default: all)")
    p.add_argument("--device", choices=("cuda", "cpu"),
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--graph", action="store_true",
                   help="also time every case inside a CUDA graph of several calls")
    p.add_argument("--json", metavar="PATH",
                   help="write results here; 'auto' means benchmarks/results/<gpu>.json, a "
                        "directory (or a path ending in /) means DIR/<gpu>.json")
    p.add_argument("--merge", action="store_true",
                   help="with --json: keep the file's rows that this run does not re-measure")
    p.add_argument("--resume", action="store_true",
                   help="with --json: like --merge, and skip the cases the file already has "
                        "(to finish a run cut by --time-budget)")
    p.add_argument("--plot", metavar="DIR", help="write PNG plots (GB/s vs reduced length)")
    p.add_argument("--from-json", metavar="PATH",
                   help="measure nothing: print the table (and --plot) of an existing JSON")
    p.add_argument("--warmup", type=float, default=25, help="warm-up, ms (default 25)")
    p.add_argument("--rep", type=float, default=100, help="timed repetitions, ms (default 100)")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="start no new case after this many seconds (results marked partial)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.ops_given = args.ops is not None
    args.ops = args.ops or list(OPS)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
    else:
        args.json_path = None
        if args.json:
            slug = gpu_slug(device_name(args.device)) if args.device == "cuda" else "cpu"
            if args.json == "auto":
                args.json_path = RESULTS_DIR / f"{slug}.json"
            elif args.json.endswith(os.sep) or Path(args.json).is_dir():
                args.json_path = Path(args.json) / f"{slug}.json"
            else:
                args.json_path = Path(args.json)
        results = benchmark(args)
        if args.json_path:
            print(f"\nwrote {args.json_path}")
    print_table(results)
    if args.plot:
        sys.path.insert(0, str(HERE))
        from plot import plot_results

        for path in plot_results(results, Path(args.plot)):
            print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
