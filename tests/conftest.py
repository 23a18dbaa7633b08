"""Shared parameters, input makers and reference comparisons for the reduce_ops tests.

Every comparison is against torch. Where the op allows it, the reference is computed in
float64 from the very same input, and the tolerance is derived from the output dtype (see
`assert_close_to_reference`); `amax` and `reduce_scale`'s scale are exact and are compared
bit for bit.
"""
import json
import math
import os
import tempfile

import pytest
import torch

import reduce_ops  # noqa: F401  (loads the library, so torch.ops.reduce_ops.* exist)

HAS_CUDA = torch.cuda.is_available()

DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
LOW_PRECISION = (torch.float16, torch.bfloat16)

# contiguous; last two dims swapped; every other column; stride 0; storage offset of one
# element (breaks 16-byte alignment for every dtype); a 3-D (rank >= 2) permutation.
LAYOUTS = ["contiguous", "transposed", "sliced", "expanded", "offset", "permuted"]

# 1, primes, lengths that are not a multiple of 4 or 8, and one of 2^20 elements.
SHAPES_1D = [(1,), (7,), (13,), (127,), (1021,), (1 << 20,)]
SHAPES_ND = [(1, 1), (7, 13), (13, 7), (3, 127), (127, 3), (2, 1021), (5, 7, 13), (2, 3, 5, 7)]

requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
requires_two_gpus = pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2,
                                       reason="needs two CUDA devices")

INT_LIKE_DTYPES = [torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64]
# The names a message may use for a dtype: torch's (`int32`) or c10's ScalarType (`Int`).
DTYPE_NAMES = {
    torch.int32: ("int32", "Int"),
    torch.int64: ("int64", "Long"),
    torch.uint8: ("uint8", "Byte"),
    torch.bool: ("bool",),
    torch.complex64: ("complex64", "ComplexFloat", "cfloat"),
}


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA device")
    config.addinivalue_line("markers", "slow: large inputs")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(params=DTYPES, ids=dtype_id)
def dtype(request):
    return request.param


@pytest.fixture(params=LAYOUTS)
def layout(request):
    return request.param


# ----------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------

def random_values(shape, dtype, device, *, scale=1.0):
    """randn * scale in `dtype` with no exact zeros (a zero would hide sign/scale bugs)."""
    gen_device = "cuda" if str(device).startswith("cuda") else "cpu"
    x = torch.randn(shape, dtype=torch.float32, device=gen_device) * scale
    x = x.to(device=device, dtype=dtype)
    return torch.where(x == 0, torch.ones((), dtype=dtype, device=x.device), x)


def make_input(shape, dtype, device, layout="contiguous", *, scale=1.0):
    """A random tensor of exactly `shape`, `dtype`, on `device`, laid out as `layout`.

    Layouts that need more dims than `shape` has fall back to what they can do (e.g. a 1-D
    "transposed" tensor is contiguous); tests that care assert on strides themselves.
    """
    shape = tuple(shape)
    rank = len(shape)
    if layout == "contiguous" or rank == 0:
        if layout == "offset":
            return random_values((2,), dtype, device, scale=scale)[1:].view(shape)
        return random_values(shape, dtype, device, scale=scale)
    if layout == "transposed":
        if rank < 2:
            return random_values(shape, dtype, device, scale=scale)
        base = random_values(shape[:-2] + (shape[-1], shape[-2]), dtype, device, scale=scale)
        return base.transpose(-1, -2)
    if layout == "sliced":
        base = random_values(shape[:-1] + (2 * shape[-1],), dtype, device, scale=scale)
        return base[..., ::2]
    if layout == "expanded":
        dim = 0 if shape[0] != 1 or rank == 1 else rank - 1
        base_shape = list(shape)
        base_shape[dim] = 1
        return random_values(tuple(base_shape), dtype, device, scale=scale).expand(shape)
    if layout == "offset":
        n = math.prod(shape)
        return random_values((n + 1,), dtype, device, scale=scale)[1:].view(shape)
    if layout == "permuted":
        if rank < 2:
            return make_input(shape, dtype, device, "sliced", scale=scale)
        perm = list(range(1, rank)) + [0]  # base dims stored in a rotated order
        inverse = [perm.index(i) for i in range(rank)]
        base = random_values(tuple(shape[p] for p in perm), dtype, device, scale=scale)
        x = base.permute(inverse)
        assert x.shape == shape
        return x
    raise ValueError(layout)


# ----------------------------------------------------------------------------------------
# Tolerances
# ----------------------------------------------------------------------------------------

# (explicit mantissa bits, smallest normal exponent) of each floating dtype.
_FLOAT_FORMAT = {
    torch.float16: (10, -14),
    torch.bfloat16: (7, -126),
    torch.float32: (23, -126),
    torch.float64: (52, -1022),
}


def unit_roundoff(dtype):
    """Largest relative error of one correctly rounded operation in `dtype` (half an ulp)."""
    return 2.0 ** -(_FLOAT_FORMAT[dtype][0] + 1)


def ulp(values, dtype):
    """Spacing of `dtype`'s representable numbers at |values| (float64), subnormals included."""
    mantissa, emin = _FLOAT_FORMAT[dtype]
    _, exponent = torch.frexp(values.abs().double())
    exponent = torch.clamp(exponent - 1, min=emin)  # floor(log2 |v|), no lower than emin
    return torch.pow(2.0, (exponent - mantissa).double())


# The relative error we accept from a kernel's float arithmetic before the final rounding
# to the output dtype. float32: the unit roundoff is 6e-8; a blocked reduction of per-thread
# sequential sums (chunks of ~100 elements) plus a log2(n)-deep tree is bounded by about
# (100 + 20) * 6e-8 ~ 7e-6, and a softmax adds a few ulps from exp() and the division, so
# 1e-5. float64: the same argument with 1.1e-16 and chunks of up to 2^22 elements summed
# with no tree at all gives < 5e-10; we ask for 1e-10 (a blocked sum is far better).
ARITHMETIC_RTOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def accumulate_dtype(dtype):
    """The accumulate type SPEC names: float32 for half/bfloat16/float32, float64 for float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def assert_close_to_reference(out, ref, dtype=None, *, ulps=1, rtol=0.0, atol=0.0):
    """`out` (of dtype `dtype`) matches the float64 reference `ref` of the same shape.

    Per element: |out - ref| <= ulps * ulp(ref in dtype) + rtol * |ref| + atol, where
    `atol` may be a tensor (e.g. an accumulation bound proportional to sum |x| of each
    slice). One ulp is what rounding an exact result, or one that is off by less than the
    rtol/atol term, to the output dtype can cost. NaN must be where the reference has NaN
    and only there; infinities must match exactly, sign included.
    """
    dtype = dtype if dtype is not None else out.dtype
    assert out.dtype == dtype, f"dtype {out.dtype}, expected {dtype}"
    assert out.shape == ref.shape, f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    ref = ref.to(device=out.device, dtype=torch.float64)
    got = out.double()
    ref_nan = torch.isnan(ref)
    got_nan = torch.isnan(got)
    if not torch.equal(ref_nan, got_nan):
        bad = (ref_nan != got_nan).nonzero()[:5].tolist()
        raise AssertionError(f"NaN mismatch at {bad}: got {got[ref_nan != got_nan][:5].tolist()}, "
                             f"expected {ref[ref_nan != got_nan][:5].tolist()}")
    ref_inf = torch.isinf(ref)
    got_inf = torch.isinf(got)
    inf_bad = (ref_inf | got_inf) & ~ref_nan & (got != ref)
    if inf_bad.any():
        raise AssertionError(f"inf mismatch at {inf_bad.nonzero()[:5].tolist()}: "
                             f"got {got[inf_bad][:5].tolist()}, expected {ref[inf_bad][:5].tolist()}")
    finite = ~(ref_nan | ref_inf)
    err = torch.where(finite, (got - ref).abs(), torch.zeros((), dtype=torch.float64, device=ref.device))
    tol = ulps * ulp(ref, dtype) + rtol * ref.abs() + atol
    bad = err > tol
    if bad.any():
        idx = bad.nonzero()[:5].tolist()
        worst = (err / tol).flatten().argmax()
        raise AssertionError(
            f"{int(bad.sum())} of {ref.numel()} elements out of tolerance (first at {idx}); worst: "
            f"got {got.flatten()[worst].item()!r}, expected {ref.flatten()[worst].item()!r}, "
            f"|diff| {err.flatten()[worst].item():.3g} > tol {tol.flatten()[worst].item():.3g} "
            f"({dtype}, ulps={ulps}, rtol={rtol})")


def assert_exactly_equal(out, ref):
    """Same dtype, shape and values; NaN where `ref` has NaN (used for max: it is exact)."""
    assert out.dtype == ref.dtype, f"dtype {out.dtype}, expected {ref.dtype}"
    assert out.shape == ref.shape, f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    torch.testing.assert_close(out, ref.to(out.device), rtol=0, atol=0, equal_nan=True)


def assert_same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    assert torch.equal(a.contiguous().view(ints), b.contiguous().view(ints)), "bits differ"


def assert_like_torch_result(out, torch_out, device):
    """Dtype, shape and device are torch's; the result is a fresh contiguous tensor."""
    assert out.dtype == torch_out.dtype, f"dtype {out.dtype}, torch gives {torch_out.dtype}"
    assert out.shape == torch_out.shape, f"shape {tuple(out.shape)}, torch gives {tuple(torch_out.shape)}"
    assert out.device == torch.device(device) or (out.device.type == torch.device(device).type == "cuda"
                                                   and torch.device(device).index is None), \
        f"device {out.device}, expected {device}"
    assert out.is_contiguous(), f"output strides {out.stride()} are not contiguous"


# ----------------------------------------------------------------------------------------
# References (float64, from the same input)
# ----------------------------------------------------------------------------------------

def _dims_for_torch(x, dim):
    if dim is None:
        return list(range(x.dim()))
    if isinstance(dim, int):
        return [dim]
    return list(dim)


def reference_sum(x, dim=None, keepdim=False, dtype=None):
    """(float64 sum of x, atol for each result element): the accumulation bound.

    The atol is ARITHMETIC_RTOL[accumulate] * sum |x| over the slice, plus, when `dtype`
    narrows the input (torch casts x to `dtype` before summing), the unit roundoff of
    `dtype` * sum |x| for that cast of the inputs.
    """
    out_dtype = dtype if dtype is not None else x.dtype
    xd = x.double()
    dims = _dims_for_torch(x, dim)
    if x.dim() == 0:
        ref, abs_sum = xd.clone(), xd.abs()
    else:
        ref = xd.sum(dims, keepdim=keepdim)  # dims == [] reduces everything, as torch.sum
        abs_sum = xd.abs().sum(dims, keepdim=keepdim)
    rel = ARITHMETIC_RTOL[accumulate_dtype(out_dtype)]
    if _FLOAT_FORMAT[out_dtype][0] < _FLOAT_FORMAT[x.dtype][0]:
        rel += unit_roundoff(out_dtype)
    return ref, rel * abs_sum


def reference_softmax(x, dim=-1, dtype=None):
    """torch.softmax in float64 of x cast to `dtype` first, as torch does with dtype=."""
    xd = x.to(dtype).double() if dtype is not None else x.double()
    return torch.softmax(xd, dim)


def softmax_tolerance(out_dtype):
    """ulps and rtol for a softmax output: the float arithmetic bound, then one rounding."""
    if out_dtype in LOW_PRECISION:
        # computed in float32 (error ~1e-5 relative, far below half an ulp of 2^-8/2^-11),
        # then rounded once: at most one ulp of the output from the exact value.
        return dict(ulps=1, rtol=ARITHMETIC_RTOL[torch.float32])
    return dict(ulps=1, rtol=ARITHMETIC_RTOL[out_dtype])


def reference_reduce_scale(x, eps=0.0):
    """SPEC's ReduceScale: (out as float64 reference, exact scale in float32/float64)."""
    acc = accumulate_dtype(x.dtype)
    if x.dim() == 0:
        amax = x.abs().to(acc)  # follows x.abs().amax(-1, keepdim=True): a 0-d scale
    else:
        amax = x.abs().amax(-1, keepdim=True).to(acc)  # exact: |x| and max do not round
    eps_t = torch.tensor(eps, dtype=acc, device=x.device)
    scale = torch.where(torch.isnan(amax), amax, torch.maximum(amax, eps_t))
    q = x.double() / scale.double()
    out = torch.where(scale.double() == 0, torch.zeros((), dtype=torch.float64, device=x.device), q)
    return out, scale


def reduce_scale_tolerance(dtype):
    """out = x / scale rounded to x.dtype.

    float16/bfloat16: the quotient in float32 is off by at most 1.5 float32 ulps (if computed
    as x * (1/scale)), then rounded once: within one ulp of x.dtype. float32/float64: the
    quotient itself is the output; x * (1/scale) rounds twice: two ulps.
    """
    return dict(ulps=1 if dtype in LOW_PRECISION else 2)


def gpu_free_bytes():
    if not HAS_CUDA:
        return 0
    free, _ = torch.cuda.mem_get_info()
    return free


def requires_free_gpu_memory(gib):
    return pytest.mark.skipif(gpu_free_bytes() < gib * (1 << 30),
                              reason=f"needs a CUDA device with at least {gib} GiB free")


def expected_exception(fn):
    """The exception type torch raises for `fn` (which must raise)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e)
    raise AssertionError("torch did not raise")


def message_names_dtype(message, dtype):
    import re
    return any(re.search(rf"\b{re.escape(name)}\b", message, re.IGNORECASE) for name in DTYPE_NAMES[dtype])


@pytest.fixture
def big_gpu():
    """For the > 2^31-element tests: a CUDA device with at least 40 GiB free, else skip."""
    if not HAS_CUDA:
        pytest.skip("needs a CUDA device")
    torch.cuda.empty_cache()
    free = gpu_free_bytes()
    if free < 40 * (1 << 30):
        pytest.skip(f"needs 40 GiB of free GPU memory, {free / (1 << 30):.1f} GiB free")
    yield torch.device("cuda")
    torch.cuda.empty_cache()


# Hypothesis: no deadline (the first call of an op on a device can be slow) and the autouse
# seed fixture is harmless to reuse across examples (every example seeds torch itself).
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile("reduce_ops", deadline=None,
                              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                     HealthCheck.too_slow])
    settings.load_profile("reduce_ops")
except ImportError:  # hypothesis tests are then skipped by importorskip in their modules
    pass


def make_strided(shape, dtype, device, *, perm=None, steps=None, offset=0, seed=0):
    """Random tensor of `shape` whose memory order is `perm`, every `steps[d]`-th element of
    a larger buffer along dim d, starting `offset` elements into its storage."""
    shape = tuple(shape)
    rank = len(shape)
    perm = list(perm) if perm is not None else list(range(rank))
    steps = list(steps) if steps is not None else [1] * rank
    g = torch.Generator().manual_seed(seed)
    big = [shape[d] * steps[d] for d in range(rank)]
    stored = [big[p] for p in perm]
    n = math.prod(stored)
    buf = torch.randn(n + offset, generator=g).to(dtype)
    buf = torch.where(buf == 0, torch.ones((), dtype=dtype), buf).to(device)
    x = buf[offset:].view(stored).permute([perm.index(d) for d in range(rank)])
    x = x[tuple(slice(None, None, s) for s in steps)]
    assert x.shape == shape, (x.shape, shape)
    return x


try:
    from hypothesis import strategies as st

    @st.composite
    def strided_tensors(draw, *, max_rank=4, max_size=6, min_rank=0, dtypes=tuple(DTYPES)):
        """(x, description) for a random shape (sizes 0..max_size, 0 and 1 included), dtype,
        device, memory order, slicing steps and storage offset."""
        rank = draw(st.integers(min_rank, max_rank))
        shape = tuple(draw(st.lists(st.integers(0, max_size), min_size=rank, max_size=rank)))
        dtype = draw(st.sampled_from(list(dtypes)))
        device = draw(st.sampled_from(DEVICES))
        perm = draw(st.permutations(list(range(rank))))
        steps = draw(st.lists(st.sampled_from([1, 2]), min_size=rank, max_size=rank))
        offset = draw(st.sampled_from([0, 1]))
        seed = draw(st.integers(0, 2 ** 31 - 1))
        x = make_strided(shape, dtype, device, perm=perm, steps=steps, offset=offset, seed=seed)
        return x

    @st.composite
    def dim_args(draw, rank):
        """None, an int, or a list/tuple of distinct dims (negative spellings included)."""
        if rank == 0:
            return draw(st.sampled_from([None, 0, -1, [0], (-1,)]))
        kind = draw(st.sampled_from(["none", "int", "list", "tuple"]))
        if kind == "none":
            return None
        spell = lambda d: draw(st.sampled_from([d, d - rank]))  # noqa: E731
        if kind == "int":
            return spell(draw(st.integers(0, rank - 1)))
        dims = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
        dims = [spell(d) for d in dims]
        return dims if kind == "list" else tuple(dims)
except ImportError:
    pass


# Elements per row-length test: enough rows to fill a GPU; on CPU modest, to keep the suite fast.
MANY_ROWS_BUDGET = {"cpu": 1 << 18, "cuda": 1 << 24}


def row_count(rows, cols, device):
    """Rows for a row-length test: 3 for "few", else as many as the device's budget allows
    (at least 5 on CUDA, 2 on CPU)."""
    if rows == "few":
        return 3
    n_rows = max(1, min(1 << 14, MANY_ROWS_BUDGET[device] // cols))
    if n_rows <= 3:
        n_rows = 5 if device == "cuda" else 2
    return n_rows


# The row register kernels with several rows per block (one wave of blocks,
# REDUCE_OPS_ROW_WAVES=1) or per cluster, under each way of loading the next row
# (REDUCE_OPS_AHEAD: not at all, into registers, or bulk-copied into shared memory; a kernel
# without that way loads in turn), so that the next row really is another one. Shapes: 2, 4 and 8
# packs per thread of a block; "block-staged" (half of each thread's packs in shared memory) at
# 4096 and at 20000 (where float32 takes it automatically); clusters of 4 / 8 blocks (70000) and,
# for float32, 16 (2^18).
# "cluster-staged" (the clusters with half of each block's share in shared memory) adds 2^19
# (clusters of 16 blocks in float32, 8 in bfloat16), the clusters starting in staggered phases
# (REDUCE_OPS_CLUSTER_STAGGER, which the launcher leaves off for so few rows). "warp": a lane
# group per row, several rows per group (their automatic grid of 16 waves leaves test-sized
# inputs one row a group), the next row in registers where a lane holds 1-2 packs (128 columns)
# and not at 1000; REDUCE_OPS_AHEAD does not reach them.
NEXT_ROW_CASES = [("warp", (40000, 128)), ("warp", (20000, 1000)),
                  ("block", (1500, 1000)), ("block", (300, 4096)), ("block", (150, 32768)),
                  ("block-staged", (300, 4096)), ("block-staged", (150, 20000)),
                  ("cluster", (70, 70000)), ("cluster", (20, 1 << 18)),
                  ("cluster-staged", (70, 70000)), ("cluster-staged", (20, 1 << 18)), ("cluster-staged", (9, 1 << 19))]


def next_row_cases(test):
    """Parametrizes `test` over ahead, dtype (float32, bfloat16) and (strategy, shape); CUDA only."""
    test = pytest.mark.parametrize("strategy,shape", NEXT_ROW_CASES, ids=str)(test)
    test = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)(test)
    test = pytest.mark.parametrize("ahead", ["none", "registers", "shared"])(test)
    return requires_cuda(test)


# The row dispatcher's strategies (csrc/cuda/softmax_launch.h) as the tests force them: the block and
# cluster paths twice each, "block" / "cluster" with each thread's packs in registers only
# (REDUCE_OPS_BLOCK_HOLD / REDUCE_OPS_CLUSTER_HOLD=registers) and "block-staged" /
# "cluster-staged" with half of them (softmax_backward's clusters: out's) in shared memory
# (=shared; softmax_backward has no staged blocks: its "block-staged" is "block"), and the
# forward's "cluster_row" (a cluster for every row at once; softmax_backward has none).
# A strategy that cannot run a shape falls back to the automatic choice, so every case is still
# checked.
ROW_STRATEGIES = ["warp", "block", "block-staged", "cluster_row", "cluster", "cluster-staged", "smem", "split"]


def force_row_strategy(monkeypatch, strategy):
    if strategy == "auto":  # the automatic choice
        monkeypatch.delenv("REDUCE_OPS_STRATEGY", raising=False)
        return
    name, _, staged = strategy.partition("-")
    monkeypatch.setenv("REDUCE_OPS_STRATEGY", name)
    hold = "shared" if staged else "registers"
    monkeypatch.setenv("REDUCE_OPS_BLOCK_HOLD", hold)
    monkeypatch.setenv("REDUCE_OPS_CLUSTER_HOLD", hold)


# 16-bit rows of whole 8-byte packs ("warp" on 8-byte packs, softmax_launch.h's launch_row_norm: one or
# 3-15 of them, on 8-byte boundaries) and their neighbours: 8 and 68 values (2 and 17 packs) and 22
# (not whole packs) go elsewhere, and so does a view that starts on a 4-byte boundary ("offset_2").
# Layouts: contiguous, from an 8-byte (not 16-byte) boundary ("offset_4"), and rows strided past
# their length ("row_stride").
HALF_PACK_SHAPES = [(301, 4), (301, 8), (301, 12), (300, 20), (257, 36), (300, 60), (300, 68), (300, 22)]
half_pack_cases = pytest.mark.parametrize("shape", HALF_PACK_SHAPES, ids=str)
half_pack_layouts = pytest.mark.parametrize("layout", ["contiguous", "offset_4", "row_stride", "offset_2"])


def half_pack_rows(shape, dtype, layout):
    rows, cols = shape
    if layout == "row_stride":
        return make_input((rows, cols + 4), dtype, "cuda")[:, :cols]
    offset = {"contiguous": 0, "offset_4": 4, "offset_2": 2}[layout]
    return make_input((rows * cols + offset,), dtype, "cuda")[offset:].view(rows, cols)


# Rows of 2 (softmax_launch.h's launch_row_norm: 16-bit and float32 rows on their 4- or 8-byte pack's
# boundaries go a lane a row on row_norm_rows_kernel, ReduceScale's and 16-bit softmax rows of
# contiguous tensors on 16-byte boundaries 2-4 a 16-byte pack on row_norm_packed_rows_kernel;
# packed_rows_by_default): contiguous, strided past their length, and a view one element off the
# pack's boundary ("offset_1"), which goes elsewhere; 1, 301 and 700 rows (the last block's rows end
# inside it; 301 leaves a row after the last whole 16-byte pack).
pair_row_cases = pytest.mark.parametrize(
    "rows,layout", [(r, layout) for r in (1, 301, 700) for layout in ("contiguous", "row_stride", "offset_1")],
    ids=str)


def pair_rows(rows, dtype, layout):
    if layout == "row_stride":
        return make_input((rows, 4), dtype, "cuda")[:, :2]
    offset = {"contiguous": 0, "offset_1": 1}[layout]
    return make_input((2 * rows + offset,), dtype, "cuda")[offset:].view(rows, 2)


def packed_rows_by_default(x, softmax):
    """Whether launch_row_norm takes x's rows 2-4 a 16-byte pack (row_norm_packed_rows_kernel) with
    REDUCE_OPS_PACKED_ROWS unset: rows of 4 or 8 bytes, contiguous (or one row) on 16-byte
    boundaries; every ReduceScale row, and softmax's 16-bit rows of 2."""
    rows, cols = x.shape
    row_bytes = cols * x.element_size()
    fits = cols >= 2 and row_bytes in (4, 8) and (rows == 1 or x.stride(0) == cols) and x.data_ptr() % 16 == 0
    return fits and (not softmax or (x.element_size() == 2 and cols == 2))


# Rows of 4 or 8 bytes 2-4 a 16-byte pack (row_norm_packed_rows_kernel), forced where it is not the
# default (REDUCE_OPS_PACKED_ROWS=on): 16-bit rows of 2 and 4, float32 rows of 2; 1 and 3 rows (no
# whole pack, or one: rows after the last pack only), 301 and 4099 (a row or 3 after the last pack,
# 4099 over several blocks); contiguous, or from an 8-byte (not 16-byte) boundary ("offset_8"),
# which goes a lane a row instead.
packed_row_cases = pytest.mark.parametrize(
    "dtype,cols,rows,layout",
    [(dtype, cols, rows, layout)
     for dtype, cols in ((torch.bfloat16, 2), (torch.bfloat16, 4), (torch.float16, 2), (torch.float16, 4),
                         (torch.float32, 2))
     for rows in (1, 3, 301, 4099) for layout in ("contiguous", "offset_8")],
    ids=lambda v: dtype_id(v) if isinstance(v, torch.dtype) else str(v))


def packed_rows(rows, cols, dtype, layout):
    offset = 0 if layout == "contiguous" else 64 // torch.finfo(dtype).bits
    return make_input((rows * cols + offset,), dtype, "cuda")[offset:].view(rows, cols)


def packed_rows_input(monkeypatch, dtype, cols, rows, layout, big):
    """(x, launched) for packed_row_cases with REDUCE_OPS_PACKED_ROWS=on: x of packed_rows' layout
    with peeled_edge_rows' specials (`big`); launched(fn) asserts that fn() took x's rows as packed
    rows (contiguous) or a lane a row (offset_8)."""
    clear_row_knobs(monkeypatch)
    monkeypatch.setenv("REDUCE_OPS_PACKED_ROWS", "on")
    x = peeled_edge_rows(packed_rows(rows, cols, dtype, layout), big)

    def launched(fn):
        assert_short_rows_launch(fn, "packed" if layout == "contiguous" else "lane", cols)

    return x, launched


def assert_short_rows_launch(fn, kernel, cols=2):
    """fn() runs its rows of `cols` values once on row_norm_packed_rows_kernel ("packed"), once on
    row_norm_rows_kernel a lane a row ("lane": packs of `cols` values), or on neither (None)."""
    names = cuda_kernels_run(fn)
    packed = [a[3] for a in launches_of(names, "row_norm_packed_rows_kernel")]
    lane = [(a[4], a[6]) for a in launches_of(names, "row_norm_rows_kernel")]
    assert packed == ([str(cols)] if kernel == "packed" else []), names
    assert lane == ([(str(cols), "1")] if kernel == "lane" else []), names


def clear_row_knobs(monkeypatch):
    for var in ("REDUCE_OPS_STRATEGY", "REDUCE_OPS_ROW_TILE", "REDUCE_OPS_HALF_PACKS", "REDUCE_OPS_WARP_ROWS",
                "REDUCE_OPS_WARP_LANES", "REDUCE_OPS_WARP_PACKS", "REDUCE_OPS_WARP_CAP", "REDUCE_OPS_PAIR_ROWS",
                "REDUCE_OPS_PACKED_ROWS", "REDUCE_OPS_BLOCK_WAVES", "REDUCE_OPS_CLUSTER_ROW_HELD",
                "REDUCE_OPS_WARP_HELD", "REDUCE_OPS_CLUSTER", "REDUCE_OPS_ELEMENT_ROWS", "REDUCE_OPS_ROW_LOAD"):
        monkeypatch.delenv(var, raising=False)


def assert_half_packs_launch(fn, x, layout, softmax):
    """fn() takes the warp kernel on 8-byte packs exactly where launch_row_norm should (not where
    it takes x's rows as packed rows, packed_rows_by_default)."""
    names = cuda_kernels_run(fn)
    packs = row_norm_warp_packs(names)
    half_packs = x.shape[1] // 4
    packed = packed_rows_by_default(x, softmax)
    takes = (half_packs == 1 or 3 <= half_packs <= 15) and x.shape[1] % 4 == 0 and x.shape[1] % 8 != 0 and \
        layout != "offset_2" and not packed
    assert (packs == ["4"]) == takes, packs
    assert bool(launches_of(names, "row_norm_packed_rows_kernel")) == packed, names


def template_args(name, kernel):
    """The template arguments of `kernel` in a profiler kernel name (split at top-level commas),
    or None where the name is not that kernel's."""
    start = name.find(kernel + "<")
    if start < 0:
        return None
    depth, args, current = 0, [], ""
    for ch in name[start + len(kernel) + 1:]:
        if ch == ">" and depth == 0:
            return args + [current.strip()]
        if ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        depth += {"<": 1, ">": -1}.get(ch, 0)
        current += ch
    return None


def launches_of(names, *kernels):
    """The template arguments (template_args) of every launch of `kernels` among the profiler
    kernel names `names`, in names' order."""
    args = [template_args(n, k) for n in names for k in kernels]
    return [a for a in args if a is not None]


def row_norm_warp_packs(names):
    """The pack widths (kVec, elements) of the warp kernels' launches among `names`
    (row_norm_warp_kernel, row_norm_warp_capped_kernel, row_norm_rows_kernel)."""
    return [a[4] for a in launches_of(names, "row_norm_warp_kernel", "row_norm_warp_capped_kernel",
                                      "row_norm_rows_kernel")]


def held_raw_launches(fn, kernel):
    """Whether each launch of `kernel` that fn() makes holds its values as raw words: its last
    template argument (row_norm_warp_kernel's kRawHeld, row_norm_cluster_row_kernel's kHeldRaw)."""
    return [a[-1] == "true" for a in launches_of(cuda_kernels_run(fn), kernel)]


# The forward warp kernel's 16-bit rows of 3-4 packs over 32 lanes or 3 over 16 (softmax_launch.h's
# launch_warp): raw words where they are peeled (777: 97 packs, 4 a lane; 555: 69, 3; 333: 41, 16
# lanes of 3), for ReduceScale where its loads are unmarked (768: 96 packs, 3 a lane; 1024: 4;
# 320: 40, 16 lanes of 3), and for softmax where they are marked (every row here but 171's); else
# floats (171: 21 packs, 8 lanes of 3). cols, softmax raw (unmarked: these small inputs), ReduceScale
# raw (unmarked), softmax raw when marked.
WARP_HELD_CASES = [(777, True, True, True), (555, True, True, True), (333, True, True, True),
                   (768, False, True, True), (1024, False, True, True), (320, False, True, True),
                   (171, False, False, False)]


# 16-bit rows of 8-byte packs, 2 a lane group at once (row_norm_rows_kernel) or one at a time
# (REDUCE_OPS_WARP_ROWS=off: the looping row_norm_warp_kernel): rows of 1, 3, 4, 5, 9 and 15 packs
# (a lane a row, lane groups of 2 with 2 packs a lane, of 4 with 2, of 8), and under
# REDUCE_OPS_WARP_LANES=4 ("lanes4") rows of 3-4 packs on lane groups of 4 with a pack a lane; 700
# rows (the last block's rows end inside it). Rows of 4 packs (16 values) are strided past their
# length, which keeps them off the 16-byte packs.
warp_rows_held = pytest.mark.parametrize("held", ["auto", "off", "lanes4"])
warp_rows_cols = pytest.mark.parametrize("cols", [4, 12, 16, 20, 36, 60], ids=lambda c: f"cols{c}")


def warp_rows_lanes(held, cols):
    """The lanes a row (kWidth) of row_norm_rows_kernel on 16-bit rows of `cols` (launch_warp)."""
    packs = cols // 4
    if packs == 1:
        return 1
    if packs <= 4 and held == "auto":
        return 2
    return 4 if packs <= 8 else 8


# 16-byte-pack rows on the warp kernel (softmax_launch.h's launch_warp): rows of a pack on one lane, of 2
# packs on 2, 16-bit rows of 9-12 on 4 lanes of 3 packs, rows of 17-24, 33-48 and 65-95 on 8, 16 and
# 32 lanes of 3 (by default), or the table before (REDUCE_OPS_WARP_PACKS=2: a pack a lane on 4 lanes
# up to 4 packs, 2 packs a lane up to 64, 4 up to 128). Rows on either side of each range; 16-bit
# rows peeled (77, 90, 100, 125, 150, 263, 383, 601; 77-125 on the capped kernel where
# warp_kernel_capped says) or not, float32 rows peeled (45, 65, 67: its unaligned
# rows of 68-255 go an element a lane) or not, float64 rows aligned (its rows are not peeled).
WARP_PACK_CASES = [(torch.bfloat16, c) for c in (8, 16, 24, 32, 64, 72, 90, 100, 128, 136, 150, 192, 200, 256, 263,
                                                 383, 384, 392, 512, 520, 601, 760, 768)] + \
    [(torch.float16, c) for c in (16, 77, 96, 125, 150, 384, 600)] + \
    [(torch.float32, c) for c in (4, 8, 12, 16, 32, 36, 45, 48, 64, 65, 67, 68, 96, 100, 128, 132, 192, 196,
                                  256, 260, 300, 380)] + \
    [(torch.float64, c) for c in (2, 4, 8, 32, 34, 40, 64, 70)]
warp_pack_cases = pytest.mark.parametrize("dtype,cols", WARP_PACK_CASES, ids=lambda v: str(v).replace("torch.", ""))
warp_pack_modes = pytest.mark.parametrize("mode", ["auto", "2"])


def warp_lane_packs(dtype, cols, mode):
    """(packs a lane, lanes a row) of row_norm_warp_kernel on rows of `cols` (launch_warp's table)
    under REDUCE_OPS_WARP_PACKS=`mode` ("auto": unset)."""
    element = torch.empty((), dtype=dtype).element_size()
    packs = -(-cols // (16 // element))
    if mode != "2":
        ranges = ((0, 1, (1, 1)), (1, 2, (1, 2)), (16, 24, (3, 8)), (32, 48, (3, 16)), (64, 95, (3, 32)))
        for low, high, mapping in ranges:
            if low < packs <= high:
                return mapping
        if element == 2 and 8 < packs <= 12:
            return 3, 4
    for most, mapping in ((4, (1, 4)), (8, (2, 4)), (16, (2, 8)), (32, (2, 16)), (64, (2, 32)), (128, (4, 32))):
        if packs <= most:
            return mapping
    raise ValueError(f"{cols} values: past the warp cases")


def warp_kernel_capped(dtype, cols, mapping, softmax):
    """Whether launch_warp takes row_norm_warp_capped_kernel (registers capped at 64) for rows of
    `cols` on `mapping` (packs a lane, lanes a row): peeled bfloat16 rows on 8 lanes of 2 packs,
    and peeled 16-bit softmax rows on 4 lanes of 3."""
    element = torch.empty((), dtype=dtype).element_size()
    peeled = cols * element % 16 != 0
    return element == 2 and peeled and ((mapping == (2, 8) and dtype == torch.bfloat16) or
                                        (softmax and mapping == (3, 4)))


def warp_packs_input(monkeypatch, mode, dtype, cols, big):
    """(x, kernels) where x is 300 rows of `cols` (peeled_edge_rows specials), REDUCE_OPS_WARP_PACKS
    set to `mode` unless "auto"; kernels(fn, softmax) asserts that fn() ran one warp kernel, with
    warp_lane_packs' packs a lane and lanes a row, the capped one where warp_kernel_capped says."""
    clear_row_knobs(monkeypatch)
    if mode != "auto":
        monkeypatch.setenv("REDUCE_OPS_WARP_PACKS", mode)
    x = peeled_edge_rows(make_input((300, cols), dtype, "cuda"), big)

    def kernels(fn, softmax):
        names = cuda_kernels_run(fn)
        mapping = warp_lane_packs(dtype, cols, mode)
        capped = warp_kernel_capped(dtype, cols, mapping, softmax)
        kernel = "row_norm_warp_capped_kernel" if capped else "row_norm_warp_kernel"
        launches = [(k, a[5], a[6]) for k in ("row_norm_warp_kernel", "row_norm_warp_capped_kernel")
                    for a in launches_of(names, k)]
        assert launches == [(kernel, *(str(v) for v in mapping))], names

    return x, kernels


# The forward's block rows of at most 4.5 KB of traffic (softmax_launch.h's kSmallBlockRowBytes: bfloat16
# rows of up to 1152 values) run on 16 waves of resident blocks, each looping over rows: 70000 rows are
# past 16 waves of 96-thread blocks on 132 SMs. REDUCE_OPS_BLOCK_WAVES=1 makes every block run several
# rows, off a block a row.
small_block_cases = pytest.mark.parametrize("waves,cols", [(w, c) for w in ("auto", "1", "off") for c in (1100, 1101)],
                                            ids=str)


def small_block_rows_input(monkeypatch, waves, cols, specials):
    """(x, launched) where x is specials(70000 bfloat16 rows of `cols`), REDUCE_OPS_BLOCK_WAVES set to
    `waves` unless "auto"; launched(fn) asserts that fn() ran the register block, once."""
    clear_row_knobs(monkeypatch)
    if waves != "auto":
        monkeypatch.setenv("REDUCE_OPS_BLOCK_WAVES", waves)
    x = specials(make_input((70000, cols), torch.bfloat16, "cuda"))

    def launched(fn):
        names = cuda_kernels_run(fn)
        assert len(launches_of(names, "row_norm_regs_kernel")) == 1, names

    return x, launched


def off_16_bytes(t):
    """t's values in a tensor that starts one element past a 16-byte boundary."""
    v = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:].view(t.shape).copy_(t)
    assert v.data_ptr() % 16 != 0
    return v


def like_layout(x):
    """A tensor of x's shape, strides, dtype and device, in fresh storage (values unset)."""
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)


def warp_rows_input(monkeypatch, held, cols, dtype, big):
    """(x, kernels) where x is 700 rows of `cols` (peeled_edge_rows specials), REDUCE_OPS_WARP_ROWS
    unset ("auto", "lanes4") or "off", REDUCE_OPS_WARP_LANES=4 under "lanes4"; kernels(fn) asserts
    that fn() ran row_norm_rows_kernel, with warp_rows_lanes' lanes a row, exactly where held is
    not "off". REDUCE_OPS_PACKED_ROWS=off keeps ReduceScale's contiguous rows of 4 off packed rows
    (packed_rows_by_default)."""
    clear_row_knobs(monkeypatch)
    monkeypatch.setenv("REDUCE_OPS_PACKED_ROWS", "off")
    if held == "off":
        monkeypatch.setenv("REDUCE_OPS_WARP_ROWS", held)
    elif held == "lanes4":
        monkeypatch.setenv("REDUCE_OPS_WARP_LANES", "4")
    layout = "row_stride" if cols % 8 == 0 else "contiguous"
    x = peeled_edge_rows(half_pack_rows((700, cols), dtype, layout), big)

    def kernels(fn):
        names = cuda_kernels_run(fn)
        expected = [] if held == "off" else [str(warp_rows_lanes(held, cols))]
        assert [a[6] for a in launches_of(names, "row_norm_rows_kernel")] == expected, names

    return x, kernels


# Float32 element rows (softmax_launch.h's launch_element_rows: unaligned rows that launch_row_norm
# does not peel) of 33-256 values go a lane group a row on row_norm_rows_kernel, every slot loaded
# (a slot past the row's end repeats its last element): 16 lanes a row up to 128 values, 32 past,
# ceil(cols / lanes) values a lane, 3-8 (row_norm_warp_kernel, looping, under a forced strategy
# or REDUCE_OPS_ELEMENT_ROWS=off). Each bound's sides (32 and 257 take other kernels) and every
# count of values a lane; 300 rows end inside the last block (16 or 8 rows a block).
element_row_cases = pytest.mark.parametrize(
    "cols", [32, 33, 48, 49, 77, 90, 100, 127, 128, 129, 161, 197, 225, 255, 256, 257], ids=lambda c: f"cols{c}")


def element_rows(cols, rows=300):
    """rows x cols float32 that launch_row_norm takes as element rows: contiguous where the rows are
    unaligned and too long to peel (68-255 values, not a multiple of 4), else strided by cols + 1
    (so that a fresh output's rows lie off x's misalignment)."""
    if 68 <= cols < 256 and cols % 4:
        return make_input((rows, cols), torch.float32, "cuda")
    return make_input((rows, cols + 1), torch.float32, "cuda")[:, :cols]


def element_rows_launch(fn, cols, taken=True):
    """Asserts that fn() ran row_norm_rows_kernel once on element rows of `cols`, with
    launch_element_rows' values a lane and lanes a row, where `taken` and 32 < cols <= 256; else
    not at all."""
    names = cuda_kernels_run(fn)
    launches = [(a[4], a[5], a[6], a[7]) for a in launches_of(names, "row_norm_rows_kernel")]
    lanes = 16 if cols <= 128 else 32
    expected = [("1", str(-(-cols // lanes)), str(lanes), "1")] if taken and 32 < cols <= 256 else []
    assert launches == expected, names


# The "tile" kernels (softmax_launch.h's tile_plan: a tile of consecutive rows a block, through shared
# memory by 16-byte packs): unaligned rows of 3-251 elements, up to their 256-element bound, one
# total ending inside a 16-byte pack (301 x 37 bfloat16), several tiles a block.
TILE_ROW_SHAPES = [(300, 3), (301, 7), (301, 10), (301, 37), (300, 77), (257, 150), (300, 197), (100, 251)]
tile_row_cases = pytest.mark.parametrize("shape", TILE_ROW_SHAPES, ids=str)


def force_tile(monkeypatch, knob, dtype, shape, lanes, tile_bytes):
    """Turns a tile kernel on (`knob`: REDUCE_OPS_ROW_TILE or REDUCE_OPS_BACKWARD_TILE), with
    REDUCE_OPS_TILE_LANES and REDUCE_OPS_TILE_BYTES unless "auto"; skips rows of whole 16-byte
    packs (the aligned kernels take them)."""
    if shape[-1] * dtype.itemsize % 16 == 0:
        pytest.skip("whole 16-byte packs: the aligned kernels")
    monkeypatch.delenv("REDUCE_OPS_STRATEGY", raising=False)
    monkeypatch.setenv(knob, "on")
    for var, value in (("REDUCE_OPS_TILE_LANES", lanes), ("REDUCE_OPS_TILE_BYTES", tile_bytes)):
        if value == "auto":
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)


def cuda_kernels_run(fn):
    """The names of the CUDA kernels fn() launches (torch.profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.key for e in prof.key_averages()]


def rows_per_sm(per_sm, few):
    """`per_sm` rows for each SM of the GPU, less one where `few` (just under a per-SM bound)."""
    return per_sm * torch.cuda.get_device_properties(0).multi_processor_count - (1 if few else 0)


def assert_launches_on_sm90(fn, kernel):
    """fn() launches `kernel`, checked on sm_90, where the dispatcher's bounds were measured."""
    if torch.cuda.get_device_capability() == (9, 0):
        names = cuda_kernels_run(fn)
        assert any(kernel in n for n in names), names


def cuda_kernel_events(fn):
    """The kernel events of torch.profiler's trace of fn(), in launch order."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    return sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])


def cuda_launch_dims(fn, kernel):
    """(grid, block) of each launch fn() makes of a kernel whose name holds `kernel`, in order
    (each kernel event's "grid" and "block", 3 ints each)."""
    return [(tuple(e["args"]["grid"]), tuple(e["args"]["block"]))
            for e in cuda_kernel_events(fn) if kernel in e.get("name", "")]


# The inner-dim (softmax over a middle dim) dispatcher's two ways, forced (REDUCE_OPS_STRATEGY):
# "tiles" (a block or a cluster per tile, one launch) and "split" (a fold launch, then an apply
# launch; small shapes get a segment per round of rows: (4096, 64) folds 32-64 segments,
# (1, 70000, 16) 137-547, (5, 9000, 8) 9 of one-pack tiles), in one level of last-block folds
# or, "split-2-levels", two (groups of 4 segments, REDUCE_OPS_COLS_FOLD_GROUP).
INNER_STRATEGIES = ["tiles", "split", "split-2-levels"]


def force_inner_strategy(monkeypatch, strategy):
    name, _, levels = strategy.partition("-")
    monkeypatch.setenv("REDUCE_OPS_STRATEGY", name)
    if levels:
        monkeypatch.setenv("REDUCE_OPS_COLS_FOLD_GROUP", "4")


# Launches of exactly 48 KB of dynamic shared memory beside the kernels' static shared memory,
# which must ask for more than the default 48 KB in all (launch.h's allow_smem): staged blocks of
# 384 threads x 8 packs of 16 bytes (6000 packs: float32 24000, bfloat16 48000 columns), staged
# clusters of such blocks (float32 48000: 2 blocks forward, 4 backward; these passed before the
# fix too: the occupancy query presumably refused the size, and the launcher took another), and
# the "smem" row of 24575 bfloat16 elements (unaligned: 49168 bytes with the pack the unaligned
# kernel adds), which had failed to launch ("invalid argument").
SMEM_48_KB_CASES = [("block-staged", torch.float32, (3, 24000)), ("block-staged", torch.bfloat16, (3, 48000)),
                    ("cluster-staged", torch.float32, (3, 48000)), ("smem", torch.bfloat16, (3, 24575))]


def unaligned_rows(case, dtype):
    """Rows for the "smem" strategy's unaligned kernel (row_norm_smem_peeled_kernel), which moves
    each row's 16-byte-aligned middle by packs and its head and tail an element at a time:
    "short" rows under one pack (all head); "odd" lengths (each row misaligned otherwise, as the
    fresh output's rows: packs read back from shared memory); "offset" rows of a larger tensor
    and a storage offset of one element (x misaligned otherwise than the output: elements read
    back); "many" rows (each block runs several rows one after another in its shared memory)."""
    if case == "short":
        return [make_input((7, 5), dtype, "cuda"), make_input((9, 13), dtype, "cuda")]
    if case == "odd":
        return [make_input((6, 1021), dtype, "cuda"), make_input((4, 50257), dtype, "cuda")]
    if case == "offset":
        base = make_input((6, 1030), dtype, "cuda")
        flat = make_input((6 * 1021 + 1,), dtype, "cuda")
        return [base[:, 3:1027], flat[1:].view(6, 1021)]
    assert case == "many"
    return [make_input((20000, 257), dtype, "cuda")]


UNALIGNED_ROW_CASES = ["short", "odd", "offset", "many"]


def unaligned_row_cases(test):
    """Parametrizes `test` over dtype and UNALIGNED_ROW_CASES (`case`) in the "smem" strategy,
    the rows' middles by one bulk copy (sm_90+; `load` "auto") or by loads of packs ("packs");
    CUDA only. The test takes the `smem_load` fixture, which forces both."""
    test = pytest.mark.parametrize("case", UNALIGNED_ROW_CASES)(test)
    test = pytest.mark.parametrize("load", ["auto", "packs"])(test)
    test = pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)(test)
    return requires_cuda(test)


@pytest.fixture
def smem_load(monkeypatch, load):
    """unaligned_row_cases' strategy and load, forced for the test."""
    force_row_strategy(monkeypatch, "smem")
    if load == "packs":
        monkeypatch.setenv("REDUCE_OPS_SMEM_LOAD", "packs")


# Rows that are not whole 16-byte packs but lie in y as in x (a fresh output of x's shape, or x
# itself): the register kernels take them "peeled", their 16-byte-aligned middles by packs and
# their heads and tails an element a thread (row_norm.cuh's RowPacks / RowEdges). Every length is
# odd, so consecutive rows start at every misalignment (48 rows: every misalignment with each of
# peeled_edge_rows' six kinds); (strategy, shape) pairs reach each register kernel: the warp
# kernel at 2 packs and from 16 lanes down to 4 (float32 rows of 68-255 elements are not peeled:
# 77 goes an element a lane), blocks in registers and staged, cluster_row on rows a few warps
# long (blocks holding nothing) and at 16 blocks. "auto" forces nothing (float32 37 and 263: the
# peeled warp).
PEELED_ROW_CASES = [("warp", (48, 17)), ("warp", (48, 33)), ("warp", (48, 77)), ("warp", (48, 257)),
                    ("warp", (48, 1021)),
                    ("block", (48, 1021)), ("block", (48, 4099)), ("block-staged", (48, 4099)),
                    ("block", (48, 50257)), ("block-staged", (48, 50257)),
                    ("cluster_row", (48, 77)), ("cluster_row", (48, 4099)), ("cluster_row", (48, 70001)),
                    ("auto", (48, 37)), ("auto", (48, 197)), ("auto", (48, 263)), ("auto", (48, 70001)),
                    ("auto", (8, 262147))]


def peeled_edge_rows(x, big):
    """x with each row's first or last element (its head or tail, where the row is misaligned)
    made special, by row % 6: `big` first, -`big` last, NaN first, NaN last, every other element
    -inf but the first (0), +inf last."""
    for r in range(x.shape[0]):
        kind = r % 6
        if kind == 0:
            x[r, 0] = big
        elif kind == 1:
            x[r, -1] = -big
        elif kind == 2:
            x[r, 0] = float("nan")
        elif kind == 3:
            x[r, -1] = float("nan")
        elif kind == 4:
            x[r] = float("-inf")
            x[r, 0] = 0.0
        else:
            x[r, -1] = float("inf")
    return x


# The peeled rows' next row loaded ahead (REDUCE_OPS_AHEAD, conftest.force_several_rows_per_block),
# its edges with it: the warp kernel at 1-2 packs a lane, blocks forced to 2 packs a thread
# (REDUCE_OPS_BLOCK_PACKS); many rows a group or block.
PEELED_NEXT_ROW_CASES = [("warp", (20000, 37)), ("warp", (20000, 77)), ("warp", (5000, 257)), ("warp", (5000, 301)),
                         ("block", (1500, 4099))]


def peeled_row_cases(test):
    """Parametrizes `test` over dtype and PEELED_ROW_CASES' (strategy, shape); CUDA only."""
    test = pytest.mark.parametrize("strategy,shape", PEELED_ROW_CASES, ids=str)(test)
    test = pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)(test)
    return requires_cuda(test)


def peeled_next_row_cases(test):
    """Parametrizes `test` over ahead (none, registers), dtype (float32, bfloat16) and
    PEELED_NEXT_ROW_CASES' (strategy, shape), with each strategy forced to several rows a group or
    block and blocks to 2 packs a thread; CUDA only."""
    test = pytest.mark.parametrize("strategy,shape", PEELED_NEXT_ROW_CASES, ids=str)(test)
    test = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)(test)
    test = pytest.mark.parametrize("ahead", ["none", "registers"])(test)
    return requires_cuda(test)


# The row kernels whose 16-byte loads softmax_launch.h's row_loads_marked marks evict_last (by default
# only in calls that move 3 L2s or more; REDUCE_OPS_ROW_LOAD=marked|plain forces either), one
# wave of blocks so that each group or block runs several rows: the warp kernel with its next row
# in registers (128 columns), loading 8 packs a lane in turn (1000), on peeled rows (197, 100:
# 16-bit rows of 100 are not whole packs); the block kernel at 2, 4 and 8 packs a thread and
# peeled (4099); the staged block, half of each thread's packs brought by a marked bulk copy.
MARKED_LOAD_CASES = [("warp", (40000, 128)), ("warp", (20000, 1000)), ("warp", (9000, 197)), ("warp", (9000, 100)),
                     ("block", (1500, 1000)), ("block", (300, 6000)), ("block", (150, 16384)), ("block", (300, 4099)),
                     ("block-staged", (300, 4096)), ("block-staged", (150, 20000))]


def force_load_marks(monkeypatch, strategy, marks):
    """Forces `strategy` over one wave of blocks, its loads marked or plain (REDUCE_OPS_ROW_LOAD)."""
    force_row_strategy(monkeypatch, strategy)
    monkeypatch.setenv("REDUCE_OPS_ROW_WAVES", "1")
    monkeypatch.setenv("REDUCE_OPS_ROW_LOAD", marks)


def force_several_rows_per_block(monkeypatch, strategy, ahead):
    force_row_strategy(monkeypatch, strategy)
    monkeypatch.setenv("REDUCE_OPS_AHEAD", ahead)
    monkeypatch.setenv("REDUCE_OPS_ROW_WAVES", "1")
    # Clusters start in staggered phases (a sleep) even on these few rows, as on long inputs.
    monkeypatch.setenv("REDUCE_OPS_CLUSTER_STAGGER", "2000")
