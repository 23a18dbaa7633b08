"""reduce_ops.sum and reduce_ops.amax, as SPEC.md states them.

sum  == torch.sum(x, dim, keepdim, dtype=dtype), float32 accumulation for half/bfloat16,
        float64 for float64, the same bits on every run.
amax == torch.amax(x, dim, keepdim), exactly; NaN propagates; the identity is -inf;
        a zero-size reduced dim raises as torch does.
"""
import functools
import math
import re

import pytest
import torch

import reduce_ops
from conftest import (
    DTYPES, INT_LIKE_DTYPES, LAYOUTS, assert_close_to_reference,
    assert_exactly_equal, assert_like_torch_result, assert_same_bits, cuda_kernel_events, cuda_kernels_run,
    cuda_launch_dims,
    dtype_id, expected_exception, launches_of, make_input, message_names_dtype, reference_sum,
    requires_cuda, rows_per_sm, template_args,
)

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

from conftest import dim_args, strided_tensors  # noqa: E402

APIS = ["python", "torch.ops"]


def op_sum(api, x, dim=None, keepdim=False, dtype=None):
    if api == "python":
        return reduce_ops.sum(x, dim, keepdim, dtype=dtype)
    return torch.ops.reduce_ops.sum(x, dim, keepdim, dtype=dtype)


def op_amax(api, x, dim=None, keepdim=False):
    if api == "python":
        return reduce_ops.amax(x, dim, keepdim)
    return torch.ops.reduce_ops.amax(x, dim, keepdim)


def torch_amax(x, dim=None, keepdim=False):
    return torch.amax(x, () if dim is None else dim, keepdim)


def check_sum(x, dim=None, keepdim=False, dtype=None, api="python"):
    out = op_sum(api, x, dim, keepdim, dtype)
    expected = torch.sum(x, dim, keepdim, dtype=dtype)
    assert_like_torch_result(out, expected, x.device)
    ref, acc_bound = reference_sum(x, dim, keepdim, dtype)
    assert_close_to_reference(out, ref, expected.dtype, ulps=1, atol=acc_bound)
    return out


def check_amax(x, dim=None, keepdim=False, api="python"):
    out = op_amax(api, x, dim, keepdim)
    expected = torch_amax(x, dim, keepdim)
    assert_like_torch_result(out, expected, x.device)
    assert_exactly_equal(out, expected)
    return out


def check_reductions(x, dim):
    """check_sum and check_amax over dim, and the sum into float32 of a 16-bit x."""
    check_sum(x, dim)
    check_amax(x, dim)
    if x.dtype in (torch.float16, torch.bfloat16):
        check_sum(x, dim, dtype=torch.float32)


# (shape, dim): None, int, negative int, list, tuple, several dims, every dim.
DIM_CASES = [
    ((1,), None), ((7,), 0), ((13,), -1), ((127,), None), ((1021,), [0]),
    ((1 << 20,), None), ((1 << 20,), 0),
    ((1, 1), 1), ((7, 13), None), ((7, 13), 0), ((7, 13), 1), ((7, 13), -1), ((7, 13), [0, 1]),
    ((127, 3), 0), ((3, 127), -1), ((2, 1021), (1,)),
    ((5, 7, 13), 1), ((5, 7, 13), (0, 2)), ((5, 7, 13), [-1, 0]), ((5, 7, 13), (0, 1, 2)),
    ((2, 3, 5, 7), (1, 3)), ((2, 3, 5, 7), (0, 1, 2)), ((2, 3, 5, 7), [-4, -2]),
]
DIM_IDS = [f"{'x'.join(map(str, s))}-dim{d}" for s, d in DIM_CASES]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("shape,dim", DIM_CASES, ids=DIM_IDS)
def test_sum_matches_torch(device, dtype, shape, dim, keepdim, api):
    x = make_input(shape, dtype, device)
    check_sum(x, dim, keepdim, api=api)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("shape,dim", DIM_CASES, ids=DIM_IDS)
def test_amax_matches_torch(device, dtype, shape, dim, keepdim, api):
    x = make_input(shape, dtype, device)
    check_amax(x, dim, keepdim, api=api)


LAYOUT_DIMS = [None, -1, 0, 1, (0, 2), [1, 2]]


@pytest.mark.parametrize("dim", LAYOUT_DIMS, ids=str)
def test_sum_layouts(device, dtype, layout, dim):
    x = make_input((5, 7, 13), dtype, device, layout)
    check_sum(x, dim)


@pytest.mark.parametrize("dim", LAYOUT_DIMS, ids=str)
def test_amax_layouts(device, dtype, layout, dim):
    x = make_input((5, 7, 13), dtype, device, layout)
    check_amax(x, dim)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [0, 1, None], ids=str)
def test_sum_and_amax_large_2d(device, layout, dim):
    # ~1M elements: long rows (dim=1), long strided columns (dim=0), everything (None).
    x = make_input((1021, 1031), torch.float32, device, layout)
    check_sum(x, dim)
    check_amax(x, dim)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape,dim", [((1 << 24,), None), ((4099, 4097), 0), ((4099, 4097), 1),
                                       ((64, 1 << 18), 1), ((1 << 18, 64), 0), ((3, 1 << 22), None),
                                       ((257, 255, 129), (0, 2)), ((1 << 22,), None), ((1 << 23,), None),
                                       (((1 << 22) + 8,), None), ((1100, 1000), -1), ((3000, 1500), -1)],
                         ids=str)
def test_sum_and_amax_large_cuda(dtype, shape, dim):
    # Whole tensors of up to 16 MB split in segments of one round: past 256 partials (2^22 float32
    # and 2^23 16-bit elements, 513 with a last segment past the packs) the last block folds them
    # as a block, up to 256 (2^22 16-bit elements) by one warp. 1100 x 1000 and 3000 x 1500: medium
    # rows past 8 an SM, a block a row by the few rows' kernel where they are whole 16-byte packs
    # (since session 108), else a warp a row (under 32 rows an SM a block a row until session 107).
    x = make_input(shape, dtype, "cuda")
    check_sum(x, dim)
    check_amax(x, dim)


# ---- dims that fit no single view: reduced in stages -----------------------------------------

# (shape, how x is laid out, dims). The binding reduces these a group of adjacent dims a stage
# (contiguous rows of 32 or more first, else the biggest group), into accumulate-type partials
# (ops.cpp's reduce_impl); on CUDA, small ones whose dims make two groups in one launch
# (reduce_two_groups_kernel: a block of 1, 4, 8 or 32 warps an output, by its values; larger ones
# whose inner group is contiguous runs of 128 bytes or more, reduce_two_groups_runs_kernel; "stages"
# runs them staged: stage_two_groups). A layout is "contiguous",
# a permutation p (x = base.permute(p) of a contiguous base), or ("cols", n): the first n columns of
# a wider 2-D tensor.
STAGED_CASES = [
    ((6, 5, 40), "contiguous", (0, 2)),        # rows of 40 first, then columns of 6
    ((40, 5, 6), "contiguous", (0, 2)),        # columns of 40 first, then rows of 6
    ((3, 4, 5, 6), "contiguous", (0, 2, 3)),   # batch-norm statistics: rows of 30, then columns
    ((2, 3, 4, 5, 6), "contiguous", [0, 2, 4]),  # three groups: two stages
    ((13, 9, 7), (2, 0, 1), (0, 1)),           # a permuted tensor: its dims 0 and 1 apart in memory
    ((17, 1021), ("cols", 1000), None),        # a column slice reduced whole
    ((257, 3, 1031), "contiguous", (0, 2)),    # rows of the split and few-rows kernels
    ((100, 3, 40), "contiguous", (0, 2)),      # rows of 40 first, though the columns are longer
    ((20, 3, 40), "contiguous", (0, 2)),       # 800 values an output: 4 warps in one launch
    ((30, 2, 50), "contiguous", (0, 2)),       # 1500: 8 warps
    ((9, 40), ("cols", 33), None),             # no kept dim
    ((3, 4, 5, 6), "contiguous", (1, 3)),      # two kept dims as well
]
# Kept dims that merge into no two views even a group at a time: one transposed copy, then rows.
COPIED_CASES = [((2, 3, 5, 4), (0, 1, 3, 2), 0), ((2, 4, 3, 5), (0, 2, 1, 3), (0, 3))]


def stage_two_groups(monkeypatch):
    """Stage every CUDA reduction whose dims make two groups: neither one-launch kernel."""
    monkeypatch.setenv("REDUCE_OPS_TWO_GROUPS_MAX", "0")
    monkeypatch.setenv("REDUCE_OPS_TWO_GROUPS_RUN_BYTES", "0")


def laid_out(shape, layout, dtype, device):
    if layout == "contiguous":
        return make_input(shape, dtype, device)
    if layout[0] == "cols":
        return make_input(shape, dtype, device)[:, :layout[1]]
    base_shape = [0] * len(shape)
    for i, p in enumerate(layout):
        base_shape[p] = shape[i]
    return make_input(base_shape, dtype, device).permute(layout)


@pytest.mark.parametrize("path", ["auto", "stages"])
@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("shape,layout,dim", STAGED_CASES + COPIED_CASES, ids=str)
def test_dims_of_no_single_view(monkeypatch, device, dtype, shape, layout, dim, keepdim, path):
    if path == "stages":
        if device == "cpu":
            pytest.skip("the CPU always stages them")
        stage_two_groups(monkeypatch)
    x = laid_out(shape, layout, dtype, device)
    check_sum(x, dim, keepdim)
    check_amax(x, dim, keepdim)
    if dtype in (torch.float16, torch.bfloat16):
        check_sum(x, dim, keepdim, dtype=torch.float32)
    if dtype == torch.float32:
        check_sum(x, dim, keepdim, dtype=torch.bfloat16)  # float32 partials, rounded once at the end


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("op", ["sum", "amax"])
@pytest.mark.parametrize("shape,layout,dim", STAGED_CASES, ids=str)
def test_dims_of_no_single_view_read_x_without_a_copy(device, op, shape, layout, dim, dtype):
    # The stages read x where it lies: no aten op copies it (the copy a permute().contiguous()
    # would make shows as aten::clone / aten::copy_ in the profiler's CPU events), nor converts a
    # 16-bit sum's float32 result (the last stage writes the 16-bit result itself).
    x = laid_out(shape, layout, dtype, device)
    fn = getattr(reduce_ops, op)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(x, dim)
    names = {e.key for e in prof.key_averages()}
    assert not names & {"aten::clone", "aten::copy_", "aten::contiguous"}, names
    # and the binding would copy if it could not stage them: the copied cases show the clone
    y = laid_out(*COPIED_CASES[0][:2], torch.float32, device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(y, COPIED_CASES[0][2])
    assert "aten::clone" in {e.key for e in prof.key_averages()}


@requires_cuda
@pytest.mark.parametrize("shape,first", [((100, 3, 40), "rows"), ((100, 3, 32), "rows"), ((100, 3, 31), "cols"),
                                         ((6, 5, 40), "rows"), ((40, 5, 6), "cols")], ids=str)
def test_staged_rows_of_32_or_more_go_first(monkeypatch, shape, first):
    # The order of the stages (ops.cpp, kStagedRowsFirst): contiguous rows of 32 elements or more
    # first, though the other group be longer; shorter rows after the longer group (columns here).
    stage_two_groups(monkeypatch)
    x = make_input(shape, torch.float32, "cuda")
    names = [e["name"] for e in cuda_kernel_events(lambda: reduce_ops.sum(x, (0, 2)))]
    assert all("reduce_ops" in n for n in names) and first in names[0].split("<")[0], names


def assert_staged(fn):
    """fn() ran the stages: two launches or more, none of them a two-group kernel."""
    names = [e["name"] for e in cuda_kernel_events(fn)]
    assert len(names) >= 2 and not any("two_groups" in n for n in names), names


@requires_cuda
@pytest.mark.parametrize("knob", [None, "0", "3000"], ids=["auto", "off", "3000"])
@pytest.mark.parametrize("shape,layout,dim", STAGED_CASES, ids=str)
def test_small_two_group_reductions_take_one_launch(monkeypatch, shape, layout, dim, knob):
    # Dims that make exactly two groups, up to 8192 values an output and REDUCE_OPS_TWO_GROUPS_MAX
    # elements (0: never): one launch of reduce_two_groups_kernel; else, with the runs kernel off,
    # the stages (two launches or more). Three groups always stage.
    monkeypatch.setenv("REDUCE_OPS_TWO_GROUPS_RUN_BYTES", "0")
    if knob is not None:
        monkeypatch.setenv("REDUCE_OPS_TWO_GROUPS_MAX", knob)
    x = laid_out(shape, layout, torch.float32, "cuda")
    names = [e["name"].split("<")[0] for e in cuda_kernel_events(lambda: reduce_ops.amax(x, dim))]
    dims = range(x.dim()) if dim is None else [d % x.dim() for d in dim]
    per_output = math.prod(x.shape[d] for d in dims)
    two_groups = x.dim() != 5  # every case but (2, 3, 4, 5, 6) over (0, 2, 4) makes two
    fits = two_groups and per_output <= 8192 and x.numel() <= {None: 1 << 20, "0": 0, "3000": 3000}[knob]
    if fits:
        assert len(names) == 1 and "reduce_two_groups_kernel" in names[0], names
    else:
        assert_staged(lambda: reduce_ops.amax(x, dim))


@requires_cuda
@pytest.mark.parametrize("shape,kernel", [((16, 256, 256), "reduce_two_groups_kernel"), ((16, 257, 256), None),
                                          ((64, 65, 256), "reduce_two_groups_runs_kernel")], ids=str)
def test_two_group_reductions_by_the_block_an_output_up_to_2_20_elements(monkeypatch, shape, kernel):
    # kTwoGroupsMaxElements (reduce.cu): 2^20 elements take the block an output (where the short
    # kernel and the runs kernel's one round do not apply: rows of 4096 bfloat16 in 4-byte packs);
    # past them, rows of 2048 packs (one round of loads a thread) or more the runs kernel, shorter ones
    # the stages (with REDUCE_OPS_RUNS_16=0: 16-bit rows short of a round of their widest packs).
    monkeypatch.setenv("REDUCE_OPS_RUNS_16", "0")
    x = make_input(shape, torch.bfloat16, "cuda")
    if kernel is None:
        assert_staged(lambda: reduce_ops.sum(x, (0, 2)))
    else:
        names = [e["name"].split("<")[0] for e in cuda_kernel_events(lambda: reduce_ops.sum(x, (0, 2)))]
        assert len(names) == 1 and names[0].endswith(kernel), names
    check_sum(x, (0, 2))


# Past the block an output (over 2^20 elements or 8192 values an output), dims that make two
# groups whose inner one is contiguous runs of 128 bytes or more: reduce_two_groups_runs_kernel,
# one launch (shape, layout as laid_out, dims, whether every run starts on a 16-byte boundary).
# Its loads are the widest packs (16, 8 or 4 bytes) the runs hold whole, else elements, but not
# 2-byte ones, which the stages read faster (launch_two_groups_runs). The rows split over blocks
# where they are few and long: (64, 5, 4096) into 16-64 segments, folded by the last block of each.
RUNS_CASES = [
    ((64, 5, 4096), "contiguous", (0, 2), True),     # few long rows: split, last-block folds
    ((300, 7, 49), "contiguous", (0, 2), False),     # 196-byte float32 runs, element by element
    ((30, 20, 4, 512), "contiguous", (0, 2, 3), True),  # batch norm's dims
    ((3, 40, 5, 2048), "contiguous", (1, 3), True),  # two kept dims (outer 3, inner 5)
    ((40, 6, 4097), ("cut", 1), (0, 2), False),      # x[..., 1:]: runs off the 16-byte boundary
    ((2049, 3, 132), "contiguous", (0, 2), True),    # 132 elements: 8-byte packs for 16-bit
    ((300, 7, 98), "contiguous", (0, 2), True),      # 98: 4-byte packs for 16-bit, 8-byte for float32
]


def runs_kernel_loads(x, packed):
    """How the runs kernel loads x's runs (its kVec: the elements of its widest whole pack), or
    None: staged."""
    if x.shape[-1] * x.element_size() < 128:
        return None
    vec = 16 // x.element_size() if packed else 1
    while vec > 1 and x.shape[-1] % vec:
        vec //= 2
    return vec if vec * x.element_size() >= 4 else None


def runs_kernel_args(fn):
    """The one kernel fn() launches, which must be reduce_two_groups_runs_kernel: its integer template
    arguments from the profiler's demangled name, by place from the first: kVec, kUnroll,
    kMinBlocks, kAdjacent (read from the start, so that an argument added after them leaves the
    tests' reading as it was), and its launch's threads a block."""
    events = cuda_kernel_events(fn)
    names = [e["name"] for e in events]
    assert len(names) == 1 and "reduce_two_groups_runs_kernel" in names[0], names
    ints = re.search(r"((?:, -?\d+)+)>\(", names[0]).group(1)
    vec, unroll, min_blocks, adjacent = (int(v) for v in ints.split(", ")[1:5])
    block = events[0]["args"]["block"]
    return {"vec": vec, "unroll": unroll, "min_blocks": min_blocks, "adjacent": adjacent,
            "threads": block[0] * block[1] * block[2], "name": names[0]}


def check_runs_results(x, dim):
    """The runs kernel's sum and amax of x over dim against torch's, and the same bits again (its split
    rows' counters zero after each launch)."""
    check_sum(x, dim)
    check_amax(x, dim)
    first = reduce_ops.sum(x, dim)
    for _ in range(3):
        assert_same_bits(reduce_ops.sum(x, dim), first)


def runs_input(shape, layout, dtype):
    if layout == "contiguous":
        return make_input(shape, dtype, "cuda")
    return make_input(shape, dtype, "cuda")[..., layout[1]:]


@requires_cuda
@pytest.mark.parametrize("chunk", [None, "64"], ids=["auto", "chunk64"])
@pytest.mark.parametrize("shape,layout,dim,packed", RUNS_CASES, ids=str)
def test_two_group_runs_in_one_launch(monkeypatch, dtype, shape, layout, dim, packed, chunk):
    # REDUCE_OPS_REDUCE_CHUNK=64 cuts every row into the shortest segments the runs kernel takes
    # (one round of loads a thread): more splits, each row folded by its last block.
    if chunk is not None:
        monkeypatch.setenv("REDUCE_OPS_REDUCE_CHUNK", chunk)
    x = runs_input(shape, layout, dtype)
    if runs_kernel_loads(x, packed) is None:  # staged: 16-bit runs of 49, or of odd length
        assert_staged(lambda: reduce_ops.sum(x, dim))
        check_sum(x, dim)
        return
    for fn in (reduce_ops.sum, reduce_ops.amax):
        fn(x, dim)  # the stream's first split launch makes its counters (a fill kernel)
        events = cuda_kernel_events(lambda: fn(x, dim))
        assert len(events) == 1 and "reduce_two_groups_runs_kernel" in events[0]["name"], events
    check_sum(x, dim)
    check_amax(x, dim)
    check_sum(x, dim, keepdim=True)
    if dtype in (torch.float16, torch.bfloat16):
        check_sum(x, dim, dtype=torch.float32)
    first = reduce_ops.sum(x, dim)
    for _ in range(3):  # the counters are zero again after each launch: same bits
        assert_same_bits(reduce_ops.sum(x, dim), first)


@requires_cuda
def test_two_group_runs_pack_where_aligned():
    # The runs kernel loads the widest packs (16, 8 or 4 bytes: the kernel's kVec template
    # argument) every run and output starts on and holds whole, else element by element.
    for shape, layout, dim, packed in RUNS_CASES:
        for dtype in DTYPES:
            x = runs_input(shape, layout, dtype)
            vec = runs_kernel_loads(x, packed)
            if vec is None:
                continue
            reduce_ops.sum(x, dim)  # the stream's first split launch makes its counters (a fill kernel)
            k = runs_kernel_args(lambda: reduce_ops.sum(x, dim))
            assert k["vec"] == vec, (shape, dtype, k)


@requires_cuda
@pytest.mark.parametrize("knob", ["1", "0"], ids=["on", "off"])
@pytest.mark.parametrize("chunk", [None, "64"], ids=["auto", "chunk64"])
@pytest.mark.parametrize("shape,layout,few", [((300, 7, 49), "contiguous", True), ((40, 6, 4097), ("cut", 1), None),
                                              ((9, 33, 2, 37), "contiguous", True),
                                              ((250, 7, 37), "contiguous", True),
                                              ((60, 600, 37), "contiguous", False)], ids=str)
def test_two_group_runs_adjacent_elements(monkeypatch, shape, layout, few, chunk, knob):
    # Float32 runs read element by element, 4 adjacent elements a thread (REDUCE_OPS_RUNS_ADJACENT=1:
    # always; the kernel's last template argument, kAdjacent), groups crossing into the next run
    # (49, 4096 and 37 are not multiples of 4), or strided (0). Items that fit the SMs 4 at a time
    # take the kernel bounded to 4 blocks an SM (kMinBlocks 4), more (600 outputs of 2220 values,
    # unsplit) the one bounded to 8. Split rows (chunk64) start segments anywhere in a run. On the
    # 4-block kernel the whole rounds end a warp at a time: rows of 9250 (250 x 37, last round of
    # 2048 52% full) end them inside a warp, whose threads then all take the guarded round.
    if chunk is not None:
        monkeypatch.setenv("REDUCE_OPS_REDUCE_CHUNK", chunk)
    monkeypatch.setenv("REDUCE_OPS_RUNS_ADJACENT", knob)
    x = runs_input(shape, layout, torch.float32)
    dim = (0, 2) if x.dim() == 3 else (0, 1, 3)
    few_enough = 600 <= 4 * torch.cuda.get_device_properties(x.device).multi_processor_count
    for fn in (reduce_ops.sum, reduce_ops.amax):
        fn(x, dim)  # the stream's first split launch makes its counters (a fill kernel)
        k = runs_kernel_args(lambda: fn(x, dim))
        assert (k["vec"], k["adjacent"]) == (1, 4 if knob == "1" else 1), k
        if knob == "1" and few is not None:
            assert k["min_blocks"] == (4 if few or few_enough else 8), k
    check_runs_results(x, dim)


@requires_cuda
@pytest.mark.parametrize("shape,adjacent", [((60, 600, 37), True), ((64, 400, 49), False)], ids=str)
def test_two_group_runs_adjacent_unless_the_last_round_is_half_full(monkeypatch, shape, adjacent):
    # Past the one round (here left out, REDUCE_OPS_RUNS_ONCE=0, as it is where the items are many)
    # adjacency is left out where a segment's last round of 2048 elements is 45% to 7/8 full:
    # unsplit rows of 2220 values (last round 8% full) load adjacent, of 3136 (53%) strided.
    monkeypatch.setenv("REDUCE_OPS_RUNS_ONCE", "0")
    x = make_input(shape, torch.float32, "cuda")
    for fn in (reduce_ops.sum, reduce_ops.amax):
        fn(x, (0, 2))
        k = runs_kernel_args(lambda: fn(x, (0, 2)))
        assert k["adjacent"] == (4 if adjacent else 1), k
    check_sum(x, (0, 2))
    check_amax(x, (0, 2))


def check_forced_runs_kernel(monkeypatch, shape, layout, chunk, once, args):
    """With REDUCE_OPS_RUNS_ONCE=once (and REDUCE_OPS_REDUCE_CHUNK=chunk unless None), float32 runs of
    shape over (0, 2), or (0, 1, 3) where 4-D, take one launch of the runs kernel with template
    arguments args (kVec, kUnroll, kMinBlocks, kAdjacent, kThreads) for sum and amax, whose results
    check_runs_results checks."""
    if chunk is not None:
        monkeypatch.setenv("REDUCE_OPS_REDUCE_CHUNK", chunk)
    monkeypatch.setenv("REDUCE_OPS_RUNS_ONCE", once)
    x = runs_input(shape, layout, torch.float32)
    dim = (0, 2) if x.dim() == 3 else (0, 1, 3)
    for fn in (reduce_ops.sum, reduce_ops.amax):
        fn(x, dim)  # the stream's first split launch makes its counters (a fill kernel)
        k = runs_kernel_args(lambda: fn(x, dim))
        assert (k["vec"], k["unroll"], k["min_blocks"], k["adjacent"], k["threads"]) == args, k
    check_runs_results(x, dim)


@requires_cuda
@pytest.mark.parametrize("chunk", [None, "64"], ids=["auto", "chunk64"])
@pytest.mark.parametrize("shape,layout,loads", [((300, 7, 49), "contiguous", (16, 8)),
                                                ((40, 6, 4097), ("cut", 1), (16, 8)),
                                                ((9, 33, 2, 37), "contiguous", (16, 8)),
                                                ((250, 7, 37), "contiguous", (16, 8)),
                                                ((60, 600, 37), "contiguous", (12, 12)),
                                                ((96, 256, 49), "contiguous", (20, 8)),
                                                ((112, 256, 49), "contiguous", (24, 8)),
                                                ((128, 256, 49), "contiguous", (28, 8)),
                                                ((160, 256, 49), "contiguous", (32, 8)),
                                                ((1024, 64, 49), "contiguous", (28, 12))], ids=str)
def test_two_group_runs_in_one_round(monkeypatch, shape, layout, loads, chunk):
    # Float32 runs by elements whose segments hold at most 256 x 32 elements, in one round
    # (REDUCE_OPS_RUNS_ONCE=1; kAdjacent 0) of 256 threads: thread t loads the elements t, t + 256,
    # ... of its segment, counted, every load before the first fold, its place kept in 32 bits: the
    # fewest multiple of 4 loads a thread that covers the segment, 8 to 32. loads: (auto, chunk64).
    # Split rows (300 x 49 in 4 segments of 3712, 250 x 37 in 3 of 3136, 297 x 37 over (0, 1, 3) in 3
    # of 3712, 40 x 4096 off the 16-byte boundary in 40 of 4096: 16 loads; 1024 x 49 in 8 of 6272 on
    # 28; chunk64: segments of 1568-2048 on 8, 1024 x 49 in 17 of 2992 on 12) and unsplit ones (2220 on
    # 12 loads, 9 made: 600 items, more than the SMs hold at once; 4704 on 20, 18-19 made; 5488 on 24,
    # 6272 on 28 (24-25 made), 7840 on 32); runs of 37 and 49 cross into the next run. (Unsplit
    # segments of less than 2048 elements take the short kernel or the stages, not the runs kernel.)
    check_forced_runs_kernel(monkeypatch, shape, layout, chunk, "1", (1, loads[1] if chunk else loads[0], 4, 0, 256))


@requires_cuda
@pytest.mark.parametrize("chunk", [None, "64", "8192", "4352"], ids=["auto", "chunk64", "chunk8192", "chunk4352"])
@pytest.mark.parametrize("shape,layout", [((300, 7, 49), "contiguous"), ((40, 6, 4097), ("cut", 1)),
                                          ((9, 33, 2, 37), "contiguous"), ((250, 7, 37), "contiguous"),
                                          ((60, 600, 37), "contiguous"), ((160, 256, 49), "contiguous"),
                                          ((1024, 64, 49), "contiguous"), ((224, 320, 49), "contiguous"),
                                          ((442, 7, 37), "contiguous")], ids=str)
def test_two_group_runs_in_rounds_of_16(monkeypatch, shape, layout, chunk):
    # Float32 runs by elements in rounds of 256 threads x 16 loads (REDUCE_OPS_RUNS_ONCE=3; kAdjacent
    # -1), every load of a round before its fold, the place kept in 32 bits: whole rounds, then a
    # guarded one of 1-16 loads. Segments of one guarded round (300 x 49 in 4, 250 x 37 in 3, 297 x 37
    # over (0, 1, 3) in 3, 40 x 4096 off the 16-byte boundary in 40), of 2220 values unsplit (600
    # items), 7840 (a whole round, then 14-15 loads), 1024 x 49 in 8 of 6272, 224 x 49 (10976 unsplit: two
    # whole rounds, then 10-11 loads); chunk64: segments of 2048 (8 loads); chunk8192: 442 x 37 =
    # 16354 in a segment of 8192 (two whole rounds, the guarded one making all 16) and one of 8162;
    # chunk4352: 1024 x 49 in 12 of 4224 (17 loads for a block's first 128 threads, 16 for the rest).
    check_forced_runs_kernel(monkeypatch, shape, layout, chunk, "3", (1, 16, 4, -1, 256))


@requires_cuda
@pytest.mark.parametrize("shape,chunk,items", [
    ((128, 256, 49), 6272, 256), ((96, 256, 49), 4704, 256), ((80, 300, 49), 3920, 300), ((64, 512, 49), 3136, 512),
    ((64, 2048, 49), 3136, 2048), ((64, 4096, 49), 3136, 4096), ((256, 256, 49), 6272, 512),
    ((128, 512, 49), 6272, 512), ((160, 512, 49), 7840, 512), ((300, 200, 49), 4928, 600),
    ((224, 320, 49), 10976, 320), ((256, 512, 49), 12544, 512), ((120, 700, 37), 4440, 700),
    ((128, 600, 49), 6272, 600), ((168, 661, 49), 8232, 661), ((60, 600, 37), 2220, 600)], ids=str)
def test_two_group_runs_default_kernel_by_segment_and_items(shape, chunk, items):
    # By default float32 runs by elements take one round of 256 threads, the fewest multiple of 4
    # loads a thread that covers the segment (8 to 32): wherever the segments hold at most 4096
    # elements, and up to 8192 where the rows are whole or the items fit the SMs 4 at a time; past that rounds of 256 x 16 where a thread
    # makes at most 3 (kRoundsMax: segments of up to 12288) and the items fit the SMs 5 at a time
    # (kRoundsMaxItemsPerSM), else the adjacent kernels (here: 12544 values, 4 rounds; 661 outputs of
    # 8232, past 5 an SM on 132 SMs). chunk and items: launch_two_groups_runs's split plan (rows of
    # 12544 split in two segments of 6272 where 256, kept whole where 512; of 14700 in three of 4928:
    # 600 items, past 4 an SM on 132 SMs, so rounds; whole rows of 4440 and 6272 on 600-700 items
    # take 20 and 28 loads, of 2220 12; the launch's grid checks items). Smaller inputs (up to 2^20 elements and
    # 8192 an output) take the block an output, not the runs kernel.
    x = make_input(shape, torch.float32, "cuda")
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    whole = items == shape[1]
    if chunk <= 4096 or chunk <= 8192 and (whole or items <= 4 * sms):
        expected = (0, max(8, 4 * math.ceil(chunk / (4 * 256))))
    else:
        expected = (-1, 16) if chunk <= 3 * 4096 and items <= 5 * sms else (4, 8)
    for fn in (reduce_ops.sum, reduce_ops.amax):
        fn(x, (0, 2))
        k = runs_kernel_args(lambda: fn(x, (0, 2)))
        assert (k["adjacent"], k["unroll"], k["threads"]) == (*expected, 256), (k, sms)
        grids = cuda_launch_dims(lambda: fn(x, (0, 2)), "reduce_two_groups_runs_kernel")
        assert [g[0] for g, _ in grids] == [items], grids
    check_sum(x, (0, 2))
    check_amax(x, (0, 2))


def short_threads(units):
    """reduce_two_groups_short_kernel's threads an output for rows of `units` loads (elements or
    pairs): 8 loads a thread, the fewest of 32, 64, 128 or 256 threads that cover the row."""
    return 256 if units > 1024 else 128 if units > 512 else 64 if units > 256 else 32


def short_kernel_launch(fn):
    """The one launch fn() makes, which must be reduce_two_groups_short_kernel's: (kItemThreads, kVec,
    grid)."""
    events = cuda_kernel_events(fn)
    names = [e["name"] for e in events]
    assert len(names) == 1 and "reduce_two_groups_short_kernel" in names[0], names
    threads, vec = re.search(r", (\d+), (\d+)>\(", names[0]).groups()
    return int(threads), int(vec), events[0]["args"]["grid"][0]


def check_short_kernel(x, dim, vec):
    """x over dim takes the short kernel by loads of vec elements where its rule holds (the row fills
    at least half its threads' round, the blocks fit the SMs 16 at a time), else the stages; then the
    results."""
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    row = math.prod(x.shape[d] for d in dim)
    units = row // vec
    threads = short_threads(units)
    blocks = math.ceil(x.numel() // row * threads / 256)
    for fn in (reduce_ops.sum, reduce_ops.amax):
        if 2 * units >= threads * 8 and blocks <= 16 * sms:
            assert short_kernel_launch(lambda: fn(x, dim)) == (threads, vec, blocks)
        else:
            assert_staged(lambda: fn(x, dim))
    check_runs_results(x, dim)
    if x.dtype != torch.float32:
        check_sum(x, dim, dtype=torch.float32)


def one_round_16_bit(x, narrow, wide):
    """The runs kernel's one round for x's 16-bit rows by elements, as (kUnroll, threads): 512 threads x
    `wide` loads where x's outputs (dim 1) are at most 2 an SM (launch_two_groups_runs's
    kOnceWideItemsPerSM), else 256 x `narrow`."""
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    return (wide, 512) if x.shape[1] <= 2 * sms else (narrow, 256)


def assert_two_group_kernel(fn, kernel):
    """fn() launches the one kernel `kernel` names: ("short", kItemThreads, kVec) for
    reduce_two_groups_short_kernel, ("runs", kVec, kUnroll, kAdjacent) for reduce_two_groups_runs_kernel."""
    if kernel[0] == "short":
        assert short_kernel_launch(fn)[:2] == kernel[1:]
    else:
        k = runs_kernel_args(fn)
        assert (k["vec"], k["unroll"], k["adjacent"]) == kernel[1:], k


@requires_cuda
@pytest.mark.parametrize("shape,layout,dim,vec", [
    ((32, 1024, 49), "contiguous", (0, 2), 1), ((8, 1024, 14, 14), "contiguous", (0, 2, 3), 4),
    ((12, 1024, 11, 11), "contiguous", (0, 2, 3), 1), ((40, 768, 7, 7), "contiguous", (0, 2, 3), 1),
    ((16, 2048, 7, 7), "contiguous", (0, 2, 3), 1), ((20, 2049, 37), "contiguous", (0, 2), 1),
    ((22, 1500, 50), ("cut", 1), (0, 2), 1), ((4, 20, 300, 60), "contiguous", (1, 3), 4),
    ((20, 2200, 65), "contiguous", (0, 2), 1), ((4, 8192, 49), "contiguous", (0, 2), 1),
    ((8, 4096, 40), "contiguous", (0, 2), 2), ((2, 16384, 49), "contiguous", (0, 2), 1),
    ((32, 2048, 7, 7), "contiguous", (0, 2, 3), 1), ((4, 8192, 40), "contiguous", (0, 2), 1),
    ((16, 1024, 14, 14), "contiguous", (0, 2, 3), 4), ((64, 1024, 32), "contiguous", (0, 2), 4),
    ((8, 512, 28, 28), "contiguous", (0, 2, 3), 4), ((30, 1000, 42), ("cut", 2), (0, 2), 2)], ids=str)
def test_two_group_short_rows_default_kernel(shape, layout, dim, vec):
    # Float32 rows shorter than the short kernel's round of loads, past the block an output's 2^20
    # elements, take reduce_two_groups_short_kernel: 8 loads a thread, the fewest of 32, 64, 128 or 256
    # threads an output that cover the row, by the widest packs (16 or 8 bytes) the runs hold of which
    # the row holds 128-2047, else by elements where it holds less than 2048 (2049 rows of 740 on 128
    # leave the last block's second output empty); where the row fills at least half its threads'
    # round and the blocks fit the SMs 16 at a time, else the stages (on 132 SMs 20 x 2200 x 65: 2200
    # rows of 1300; 2 x 16384 x 49: rows of 98, 38% of a warp's round). 16-byte packs: rows of 1568
    # (392 on 64 threads), 1200 (4 x 300 outputs over (1, 3)), 3136, 2048 and 6272 (rows past one
    # round of elements); 8-byte: 320 (80 16-byte packs, under half a warp's round), and 1200 in runs
    # of 40 two elements past the 16-byte boundary; elements: rows of 160 (80 pairs), 1568-1960 (runs
    # of 49, 121 and 49; 32 x 2048 x 7 x 7 on 2048 blocks), 1078 off the boundary, 784 and 740 on 128
    # threads, 196 and 160 on 32 (8 outputs a block, no barrier).
    check_short_kernel(runs_input(shape, layout, torch.float32), dim, vec)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape,layout,dim,vec", [
    ((8, 1024, 14, 14), "contiguous", (0, 2, 3), 4), ((16, 1024, 14, 14), "contiguous", (0, 2, 3), 4),
    ((4, 2048, 200), "contiguous", (0, 2), 4), ((64, 1024, 32), "contiguous", (0, 2), 8),
    ((16, 512, 28, 28), "contiguous", (0, 2, 3), 8), ((24, 1024, 14, 14), "contiguous", (0, 2, 3), 4),
    ((16, 1024, 65), "contiguous", (0, 2), 1), ((32, 1024, 7, 7), "contiguous", (0, 2, 3), 1),
    ((20, 1030, 65), ("cut", 1), (0, 2), 1), ((30, 1100, 66), ("cut", 2), (0, 2), 2),
    ((10, 4100, 9, 3), "contiguous", (0, 2, 3), 1), ((3, 8000, 48), "contiguous", (0, 2), 1),
    ((3, 9000, 40), "contiguous", (0, 2), 1)], ids=str)
def test_two_group_16_bit_short_rows_take_the_short_kernel(dtype, shape, layout, dim, vec):
    # 16-bit rows shorter than the short kernel's round of loads, past 2^20 elements, take it as
    # float32's do (the stages, or 4- and 8-byte packs, before): 8-byte packs in rows of 1568 (392 on
    # 64 threads), 3136, 4704 and 800 (100 16-byte packs, under half a warp's round); 16-byte in rows of
    # 2048 and 12544; 4-byte in 1920 (runs of 64 two elements past the 4-byte boundary: on one);
    # elements in runs of odd length or start (65; 64 one element past the boundary) and of 49 (98
    # bytes: runs under 128 bytes), 189 on 32 threads (4100 outputs, the last block's past them), and
    # 144 (72 pairs); rows of 120 (60 pairs, 120 elements on 32 threads: under half their round) the
    # stages.
    check_short_kernel(runs_input(shape, layout, dtype), dim, vec)


@requires_cuda
@pytest.mark.parametrize("knob", ["0", "1"])
@pytest.mark.parametrize("shape,threads,vec", [((16, 8192, 7, 7), 128, 1), ((32, 2048, 7, 7), 256, 1),
                                               ((8, 4096, 40), 32, 2), ((2, 16384, 49), 32, 1),
                                               ((32, 1024, 49), 256, 1)], ids=str)
def test_two_group_short_rows_forced(monkeypatch, shape, threads, vec, knob):
    # REDUCE_OPS_RUNS_SHORT=1 takes the short kernel wherever the rows are shorter than its round,
    # past the rule's bounds too (8192 rows of 784 on 4096 blocks, past 16 an SM on 132 SMs; rows of
    # 98, 38% of a warp's round), as inside them (rows of 160 pairs on 32 threads, 1568), and 0 never
    # (the stages: these rows are shorter than a round of elements).
    monkeypatch.setenv("REDUCE_OPS_RUNS_SHORT", knob)
    x = make_input(shape, torch.float32, "cuda")
    dim = (0, 2) if x.dim() == 3 else (0, 2, 3)
    rows = shape[1]
    for fn in (reduce_ops.sum, reduce_ops.amax):
        if knob == "1":
            assert short_kernel_launch(lambda: fn(x, dim)) == (threads, vec, math.ceil(rows * threads / 256))
        else:
            assert_staged(lambda: fn(x, dim))
    check_runs_results(x, dim)


@requires_cuda
@pytest.mark.parametrize("pack", ["1", "2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape,dim", [((8, 1024, 14, 14), (0, 2, 3)), ((16, 1024, 14, 14), (0, 2, 3)),
                                       ((64, 1024, 32), (0, 2)), ((8, 4096, 40), (0, 2))], ids=str)
def test_two_group_short_rows_by_narrower_loads(monkeypatch, pack, dtype, shape, dim):
    # REDUCE_OPS_RUNS_SHORT_PACK caps the short kernel's loads: 1, elements, so rows of 2048 elements
    # or more take the runs kernel's one round by elements (float32; 16-bit ones where the rows fit
    # the SMs 4 at a time, else the stages), shorter ones the short kernel by elements; 2, pairs, rows
    # of 128-2047 pairs (8 x 4096 x 40's 320 elements too: its 16-byte packs were under 128).
    monkeypatch.setenv("REDUCE_OPS_RUNS_SHORT_PACK", pack)
    x = make_input(shape, dtype, "cuda")
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    row = math.prod(x.shape[d] for d in dim)
    rows = x.numel() // row
    for fn in (reduce_ops.sum, reduce_ops.amax):
        if pack == "2":
            assert short_kernel_launch(lambda: fn(x, dim))[:2] == (short_threads(row // 2), 2)
        elif row < 2048:
            assert short_kernel_launch(lambda: fn(x, dim))[:2] == (short_threads(row), 1)
        elif dtype == torch.float32 or rows <= 4 * sms:
            k = runs_kernel_args(lambda: fn(x, dim))
            assert (k["vec"], k["adjacent"]) == (1, 0), k
        else:
            assert_staged(lambda: fn(x, dim))
    check_runs_results(x, dim)


@requires_cuda
@pytest.mark.parametrize("shape,dim,loads,env", [
    ((8, 4096, 28, 28), (0, 2, 3), 28, {}), ((8, 512, 28, 28), (0, 2, 3), 28, {"REDUCE_OPS_RUNS_SHORT_PACK": "1"}),
    ((24, 1024, 14, 14), (0, 2, 3), 20, {"REDUCE_OPS_RUNS_SHORT_PACK": "1"}),
    ((400, 512, 20), (0, 2), 32, {"REDUCE_OPS_RUNS_SHORT": "0"}),
    ((8, 4096, 28, 28), (0, 2, 3), None, {"REDUCE_OPS_RUNS_ELEMENTS": "0"}),
    ((8, 512, 28, 28), (0, 2, 3), None, {"REDUCE_OPS_RUNS_ELEMENTS": "0", "REDUCE_OPS_RUNS_SHORT": "0"})], ids=str)
def test_two_group_runs_by_elements_where_packs_fall_short_of_a_round(monkeypatch, shape, dim, loads, env):
    # Float32 rows of 16-byte packs shorter than the runs kernel's round of 256 x 8 packs that the
    # short kernel does not take (its rule: 4096 outputs of 256 threads, past 16 blocks an SM on 132
    # SMs; or by the knobs) take the runs kernel by elements, the one round's fewest multiple of 4
    # loads that covers the row (6272, 4704 and 8000 elements, the last in runs of 80 bytes), a
    # block an output; with REDUCE_OPS_RUNS_ELEMENTS=0 the stages (loads None).
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    x = make_input(shape, torch.float32, "cuda")
    for fn in (reduce_ops.sum, reduce_ops.amax):
        if loads is not None:
            k = runs_kernel_args(lambda: fn(x, dim))
            assert (k["vec"], k["unroll"], k["adjacent"], k["threads"]) == (1, loads, 0, 256), k
            grids = cuda_launch_dims(lambda: fn(x, dim), "reduce_two_groups_runs_kernel")
            assert [g[0] for g, _ in grids] == [shape[1]], grids
        else:
            assert_staged(lambda: fn(x, dim))
    check_runs_results(x, dim)


@requires_cuda
@pytest.mark.parametrize("knob", [None, "0"], ids=["auto", "knob0"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape,layout,dim,kernel,env", [
    ((32, 1024, 16, 16), "contiguous", (0, 2, 3), ("short", 128, 8), {}),
    ((32, 512, 14, 14), "contiguous", (0, 2, 3), ("short", 256, 4), {}),
    ((16, 4096, 28, 28), "contiguous", (0, 2, 3), ("runs", 4, 8, 1), {}),
    ((16, 512, 28, 28), "contiguous", (0, 2, 3), ("runs", 4, 8, 1), {"REDUCE_OPS_RUNS_SHORT_PACK": "2"}),
    ((32, 512, 14, 14), "contiguous", (0, 2, 3), ("runs", 2, 8, 1), {"REDUCE_OPS_RUNS_SHORT_PACK": "2"}),
    ((24, 1024, 14, 14), "contiguous", (0, 2, 3), None, {"REDUCE_OPS_RUNS_SHORT_PACK": "2"}),
    ((64, 512, 65), "contiguous", (0, 2), ("runs", 1, 20, 0), {}),
    ((120, 300, 67), "contiguous", (0, 2), ("runs", 1, 32, 0), {}),
    ((124, 300, 67), "contiguous", (0, 2), None, {}), ((64, 1024, 65), "contiguous", (0, 2), None, {}),
    ((64, 512, 7, 7), "contiguous", (0, 2, 3), ("runs", 1, 16, 0), {}),
    ((40, 500, 70), ("cut", 1), (0, 2), ("runs", 1, 12, 0), {})], ids=str)
def test_two_group_16_bit_rows_short_of_a_round_of_packs(monkeypatch, knob, dtype, shape, layout, dim, kernel, env):
    # 16-bit rows shorter than a round of their widest packs (256 x 8): the short kernel's packs of up
    # to 16 bytes (rows of 8192 and 6272); where it does not take them (4096 outputs of 256 threads,
    # past 16 blocks an SM; or REDUCE_OPS_RUNS_SHORT_PACK=2, pairs, which these rows hold too many
    # of), narrower packs where a round of those fits the row (8-byte ones for rows of 12544; 4-byte
    # ones for 6272 on 512 outputs, not on 1024, past 4 an SM on 132 SMs: the stages); by elements
    # where no pack fits (runs of odd length or start, or of 98 bytes), in the one round of 256 threads
    # x the fewest multiple of 4 loads that cover the row, where it holds 2048-8192 elements and the
    # rows fit the SMs 4 at a time (4160, 8040, 3136 and 2760 on 300-512 outputs, more than 2 an SM:
    # fewer take 512 threads, test_two_group_16_bit_one_round_on_wide_blocks; 8308 and 1024
    # outputs: the stages). kernel: as assert_two_group_kernel takes it, None: the stages;
    # REDUCE_OPS_RUNS_16=0: the stages for all. The bounds are for 128-255 SMs (H100, H200).
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if knob is not None:
        monkeypatch.setenv("REDUCE_OPS_RUNS_16", knob)
    x = runs_input(shape, layout, dtype)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    assert 128 <= sms < 256
    if shape == (120, 300, 67):  # 512 threads x 16 loads where its 300 outputs are at most 2 an SM
        kernel = ("runs", 1, one_round_16_bit(x, 32, 16)[0], 0)
    for fn in (reduce_ops.sum, reduce_ops.amax):
        if knob is not None or kernel is None:
            assert_staged(lambda: fn(x, dim))
        else:
            assert_two_group_kernel(lambda: fn(x, dim), kernel)
    check_runs_results(x, dim)
    check_sum(x, dim, dtype=torch.float32)


@requires_cuda
@pytest.mark.parametrize("knob", [None, "0"], ids=["auto", "knob0"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape,layout,dim,wide,narrow", [
    ((128, 256, 7, 7), "contiguous", (0, 2, 3), 16, 28), ((64, 256, 7, 7), "contiguous", (0, 2, 3), 8, 16),
    ((120, 300, 67), "contiguous", (0, 2), 16, 32), ((512, 256, 3, 3), "contiguous", (0, 2, 3), 12, 20),
    ((64, 512, 7, 7), "contiguous", (0, 2, 3), 8, 16), ((40, 500, 70), ("cut", 1), (0, 2), 8, 12)], ids=str)
def test_two_group_16_bit_one_round_on_wide_blocks(monkeypatch, knob, dtype, shape, layout, dim, wide, narrow):
    # 16-bit rows by elements in the one round (rows of 6272, 3136, 8040, 4608 in runs of 9, 3136, and
    # 2760 off the boundary) take 512 threads an output x the fewest multiple of 4 loads that covers
    # the row (wide) where the outputs are at most 2 an SM (the 256 here on 128 SMs or more; 300, 500
    # and 512 on fewer than 150), else 256 threads (narrow); REDUCE_OPS_RUNS_16_WIDE=0: 256 for all.
    if knob is not None:
        monkeypatch.setenv("REDUCE_OPS_RUNS_16_WIDE", knob)
    x = runs_input(shape, layout, dtype)
    expected = one_round_16_bit(x, narrow, wide) if knob is None else (narrow, 256)
    for fn in (reduce_ops.sum, reduce_ops.amax):
        k = runs_kernel_args(lambda: fn(x, dim))
        assert (k["vec"], k["unroll"], k["adjacent"], k["threads"]) == (1, expected[0], 0, expected[1]), k
    check_runs_results(x, dim)
    check_sum(x, dim, dtype=torch.float32)


@requires_cuda
@pytest.mark.parametrize("knob", [None, "0"], ids=["auto", "knob0"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape,layout,dim,kernel", [
    ((64, 1024, 5, 5), "contiguous", (0, 2, 3), ("short", 256, 1)),
    ((128, 1024, 3, 3), "contiguous", (0, 2, 3), ("short", 256, 1)),
    ((256, 1024, 5, 5), "contiguous", (0, 2, 3), ("runs", 1, 28, 0)),
    ((512, 256, 3, 3), "contiguous", (0, 2, 3), ("runs", 1, 20, 0)),
    ((300, 512, 22), ("cut", 1), (0, 2), ("runs", 1, 28, 0)), ((1024, 512, 3), "contiguous", (0, 2), None),
    ((400, 512, 5, 5), "contiguous", (0, 2, 3), None)], ids=str)
def test_two_group_short_runs(monkeypatch, knob, dtype, shape, layout, dim, kernel):
    # Runs under 128 bytes (5 x 5, 3 x 3 and 7 x 7 maps) of at least 4 elements, in rows of at most 256 x
    # 32 elements, take the short kernel (rows of 1600 and 1152) or the runs kernel's one round by
    # elements (6400, 4608, 6300 in runs of 21 off the boundary), as longer runs do; runs of 3 elements
    # and rows of 10000 the stages (16-bit rows of 2048 or more only where the rows fit the SMs 4 at a
    # time: the 1024 outputs here the stages; the 256 of 4608, at most 2 an SM, take 512 threads x 12
    # loads, test_two_group_16_bit_one_round_on_wide_blocks). REDUCE_OPS_TWO_GROUPS_SHORT_RUNS=0: the
    # stages.
    if knob is not None:
        monkeypatch.setenv("REDUCE_OPS_TWO_GROUPS_SHORT_RUNS", knob)
    x = runs_input(shape, layout, dtype)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    wide16 = dtype != torch.float32 and x.shape[1] > 4 * sms
    if dtype != torch.float32 and shape == (512, 256, 3, 3):
        kernel = ("runs", 1, one_round_16_bit(x, 20, 12)[0], 0)
    for fn in (reduce_ops.sum, reduce_ops.amax):
        if knob is not None or kernel is None or (kernel[0] == "runs" and wide16):
            assert_staged(lambda: fn(x, dim))
        else:
            assert_two_group_kernel(lambda: fn(x, dim), kernel)
    check_runs_results(x, dim)


@requires_cuda
@pytest.mark.parametrize("knob", [None, "0"], ids=["auto", "knob0"])
@pytest.mark.parametrize("dtype,shape,layout,dim,kernel", [
    (torch.float32, (32, 2048, 4, 4), "contiguous", (0, 2, 3), ("short", 32, 4)),
    (torch.float32, (8, 2048, 49), "contiguous", (0, 2), ("short", 64, 1)),
    (torch.float32, (60, 700, 6), ("cut", 1), (0, 2), ("short", 64, 1)),
    (torch.float32, (64, 256, 8, 8), "contiguous", (0, 2, 3), ("short", 128, 4)),
    (torch.float32, (64, 256, 7, 7), "contiguous", (0, 2, 3), ("runs", 1, 16, 0)),
    (torch.float32, (128, 64, 8, 8), "contiguous", (0, 2, 3), None),
    (torch.bfloat16, (8, 512, 14, 14), "contiguous", (0, 2, 3), ("short", 64, 4)),
    (torch.bfloat16, (30, 500, 70), ("cut", 1), (0, 2), ("runs", 1, 12, 0)),
    (torch.bfloat16, (16, 256, 256), "contiguous", (0, 2), ("short", 64, 8)),
    (torch.bfloat16, (2, 8000, 49), "contiguous", (0, 2), None)], ids=str)
def test_small_two_group_reductions_take_the_short_kernel_or_one_round(monkeypatch, knob, dtype, shape, layout, dim,
                                                                       kernel):
    # Inputs of up to 2^20 elements take the short kernel or the runs kernel's one round where those
    # apply, as larger ones do, else the block an output (float32 rows of 8192 in 16-byte packs, a
    # round of them; rows of 98 elements, under half a warp's round); REDUCE_OPS_TWO_GROUPS_SMALL_RUNS=0
    # the block an output for all.
    if knob is not None:
        monkeypatch.setenv("REDUCE_OPS_TWO_GROUPS_SMALL_RUNS", knob)
    x = runs_input(shape, layout, dtype)
    assert x.numel() <= 1 << 20
    for fn in (reduce_ops.sum, reduce_ops.amax):
        if knob is not None or kernel is None:
            names = [e["name"] for e in cuda_kernel_events(lambda: fn(x, dim))]
            assert len(names) == 1 and "reduce_two_groups_kernel" in names[0], names
        else:
            assert_two_group_kernel(lambda: fn(x, dim), kernel)
    check_runs_results(x, dim)


# ---- dtype= --------------------------------------------------------------------------------

SUM_DTYPE_PAIRS = [
    (torch.bfloat16, torch.float32), (torch.float16, torch.float32), (torch.float32, torch.float64),
    (torch.bfloat16, torch.float64), (torch.float64, torch.float32), (torch.float32, torch.bfloat16),
    (torch.float32, torch.float16), (torch.float16, torch.float16), (torch.float32, torch.float32),
]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("dim", [None, -1, (0, 2)], ids=str)
@pytest.mark.parametrize("in_dtype,out_dtype", SUM_DTYPE_PAIRS,
                         ids=[f"{dtype_id(a)}->{dtype_id(b)}" for a, b in SUM_DTYPE_PAIRS])
def test_sum_dtype_argument(device, in_dtype, out_dtype, dim, api):
    x = make_input((5, 7, 1021), in_dtype, device)
    out = check_sum(x, dim, dtype=out_dtype, api=api)
    assert out.dtype == out_dtype


def test_sum_dtype_float32_of_bfloat16_keeps_float32_precision(device):
    # 4096 values of 1 + 2^-7 (exact in bfloat16): a bfloat16 running sum stalls near 256;
    # a float32 one is exact (4128).
    x = torch.full((4096,), 1 + 1 / 128, dtype=torch.bfloat16, device=device)
    out = reduce_ops.sum(x, dtype=torch.float32)
    assert out.item() == 4096 * (1 + 1 / 128)


def test_sum_half_accumulates_in_float32(device):
    # 2^16 values of 1.0: a float16 accumulator overflows at 65504 / stalls at 2048.
    x = torch.ones(1 << 16, dtype=torch.float16, device=device)
    out = reduce_ops.sum(x, dtype=torch.float32)
    assert out.item() == float(1 << 16)
    # and rows of 3000 ones summed to float16: 3000 is exact in float16, 2048 + 1 is not.
    rows = torch.ones(4, 3000, dtype=torch.float16, device=device)
    assert torch.equal(reduce_ops.sum(rows, -1), torch.full((4,), 3000.0, dtype=torch.float16, device=device))


@pytest.mark.parametrize("dim", [1, 0], ids=["rows", "columns"])
def test_every_float16_value_is_widened_exactly(device, dim):
    # Each of the 65536 float16 bit patterns alone among zeros, in rows (and columns) of 32 and
    # 64, summed to float32: the exact value (NaN stays NaN, -0 sums to +0 as torch's).
    for width in (32, 64):
        values = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.float16)
        x = torch.zeros(1 << 16, width, dtype=torch.float16)
        x[torch.arange(1 << 16), torch.arange(1 << 16) % width] = values
        x = x.to(device)
        x = x if dim == 1 else x.t().contiguous()
        assert_exactly_equal(reduce_ops.sum(x, dim, dtype=torch.float32), torch.sum(x, dim, dtype=torch.float32))
        assert_exactly_equal(reduce_ops.amax(x.abs(), dim), torch.amax(x.abs(), dim))


def test_sum_float64_accumulates_in_float64(device):
    # 1 + 2^-30 is 1.0 in float32; every partial sum k * (1 + 2^-30), k <= 1000, is exact in
    # float64 (40 significant bits), so a float64 accumulation gives exactly this, in any order.
    x = torch.full((1000,), 1 + 2 ** -30, dtype=torch.float64, device=device)
    assert reduce_ops.sum(x).item() == 1000 * (1 + 2 ** -30)
    assert reduce_ops.sum(x.view(8, 125), 1).eq(125 * (1 + 2 ** -30)).all()


CONSTANT_CASES = [((1 << 20,), None), ((1 << 18, 3), 0), ((3, 1 << 18), 1), ((8192, 64), 0),
                  ((64, 64, 256), (0, 1)), ((1021, 1031), 0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("shape,dim", CONSTANT_CASES, ids=str)
def test_sum_of_constant_input_is_accurate(device, dtype, shape, dim):
    # Equal addends round the same way step after step, so a long sequential float32 sum drifts
    # like n * u instead of a random walk; the float32 accumulation bound must hold anyway.
    x = torch.full(shape, 0.1, dtype=dtype, device=device)
    check_sum(x, dim, dtype=torch.float32)
    check_sum(x, dim)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=dtype_id)
@pytest.mark.parametrize("shape,dim", [((1 << 26,), None), ((1 << 22, 4), 0), ((4, 1 << 22), 1),
                                       ((1 << 16, 1024), 0), ((256, 256, 256), (0, 2))], ids=str)
def test_sum_of_constant_input_is_accurate_large_cuda(dtype, shape, dim):
    x = torch.full(shape, 0.1, dtype=dtype, device="cuda")
    check_sum(x, dim, dtype=torch.float32)


@pytest.mark.parametrize("in_dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("out_dtype", [torch.int64, torch.int32, torch.bool, torch.complex64], ids=dtype_id)
def test_sum_non_floating_dtype_argument_raises(device, in_dtype, out_dtype):
    # SPEC: "Any other dtype raises a RuntimeError naming the op and the dtype" (torch itself
    # would sum into an int64/complex output; our op supports floating outputs only).
    x = make_input((3, 4), in_dtype, device)
    with pytest.raises(RuntimeError) as info:
        reduce_ops.sum(x, dtype=out_dtype)
    assert "sum" in str(info.value) and message_names_dtype(str(info.value), out_dtype), str(info.value)


# ---- 0-d and empty ---------------------------------------------------------------------------

ZERO_D_DIMS = [None, 0, -1, [0], (-1,)]


@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("dim", ZERO_D_DIMS, ids=str)
def test_sum_0d(device, dtype, dim, keepdim):
    x = make_input((), dtype, device)
    out = check_sum(x, dim, keepdim)
    assert out.dim() == 0
    assert out.data_ptr() != x.data_ptr(), "a 0-d sum must be a fresh tensor"


@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("dim", ZERO_D_DIMS, ids=str)
def test_amax_0d(device, dtype, dim, keepdim):
    x = make_input((), dtype, device)
    out = check_amax(x, dim, keepdim)
    assert out.data_ptr() != x.data_ptr(), "a 0-d amax must be a fresh tensor"


@pytest.mark.parametrize("op", ["sum", "amax"])
@pytest.mark.parametrize("dim", [1, -2, [1]], ids=str)
def test_0d_dim_out_of_range_raises_index_error(device, op, dim):
    x = make_input((), torch.float32, device)
    with pytest.raises(IndexError):
        getattr(reduce_ops, op)(x, dim)


EMPTY_CASES = [((0,), None), ((0,), 0), ((3, 0, 4), None), ((3, 0, 4), 1), ((3, 0, 4), (0, 1)),
               ((3, 0, 4), 2), ((3, 0, 4), (0, 2)), ((0, 5), -1), ((0, 5), 0)]


@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("shape,dim", EMPTY_CASES, ids=str)
def test_sum_of_empty_tensor_is_zero(device, dtype, shape, dim, keepdim):
    x = make_input(shape, dtype, device)
    out = check_sum(x, dim, keepdim)
    assert (out == 0).all()


@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("shape,dim", [((3, 0, 4), 0), ((3, 0, 4), 2), ((3, 0, 4), (0, 2)), ((0, 5), -1)],
                         ids=str)
def test_amax_of_empty_tensor_over_nonzero_dims_is_empty(device, dtype, shape, dim, keepdim):
    x = make_input(shape, dtype, device)
    out = check_amax(x, dim, keepdim)
    assert out.numel() == 0


@pytest.mark.parametrize("shape,dim", [((3, 0, 4), 1), ((3, 0, 4), (0, 1)), ((3, 0, 4), None),
                                       ((0,), None), ((0,), 0), ((5, 0), -1)], ids=str)
def test_amax_over_zero_size_dim_raises_like_torch(device, dtype, shape, dim):
    x = make_input(shape, dtype, device)
    exc = expected_exception(lambda: torch_amax(x, dim))
    with pytest.raises(exc):
        reduce_ops.amax(x, dim)
    with pytest.raises(exc):
        torch.ops.reduce_ops.amax(x, dim)


# ---- amax special values ---------------------------------------------------------------------

@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("cols", [7, 1021, 70000], ids=lambda c: f"cols{c}")
def test_amax_nan_propagates(device, dtype, where, cols):
    x = make_input((5, cols), dtype, device)
    col = {"first": 0, "middle": cols // 2, "last": cols - 1}[where]
    x[1, col] = float("nan")
    x[3, :] = float("-inf")
    x[3, col] = float("nan")  # NaN beats -inf
    x[4, col] = float("nan")
    x[4, (col + 1) % cols] = float("inf")  # NaN beats +inf, in either order
    out = check_amax(x, -1)
    assert torch.isnan(out[[1, 3, 4]]).all() and not torch.isnan(out[[0, 2]]).any()
    out_cols = check_amax(x, 0)  # the same NaNs seen down the columns
    assert torch.isnan(out_cols[col])
    assert torch.isnan(check_amax(x))  # and over everything


def test_amax_nan_propagates_in_a_large_flat_reduction(device, dtype):
    n = (1 << 20) + 3
    for index in (0, n // 3, n - 1):
        x = make_input((n,), dtype, device)
        x[index] = float("nan")
        assert torch.isnan(reduce_ops.amax(x)), f"NaN at {index} of {n} was lost"


def test_amax_all_neg_inf_gives_neg_inf(device, dtype):
    x = torch.full((4, 1021), float("-inf"), dtype=dtype, device=device)
    out = check_amax(x, -1)
    assert (out == float("-inf")).all()
    assert check_amax(x).item() == float("-inf")


@pytest.mark.parametrize("cols", [1, 7, 1021, 70000], ids=lambda c: f"cols{c}")
def test_amax_all_negative_inputs(device, dtype, cols):
    # An identity of 0 or FLT_MIN (the smallest *positive* float) would win over these.
    x = -(make_input((3, cols), dtype, device).abs() + 1)
    x[1] = -torch.finfo(dtype).max  # the most negative finite value
    x[2] = -torch.finfo(dtype).tiny  # negative, but closer to 0 than any identity but -inf
    out = check_amax(x, -1)
    assert (out < 0).all()
    check_amax(x, 0)
    check_amax(x)


def test_amax_pos_inf_wins(device, dtype):
    x = make_input((3, 1021), dtype, device)
    x[1, 500] = float("inf")
    out = check_amax(x, -1)
    assert out[1].item() == float("inf")


def test_amax_of_signed_zeros_is_zero(device, dtype):
    x = torch.tensor([[-0.0, 0.0, -0.0], [-0.0, -0.0, -0.0]], dtype=dtype, device=device)
    out = check_amax(x, -1)
    assert (out == 0).all()


# ---- sum special values ----------------------------------------------------------------------

def test_sum_nan_and_inf_follow_torch(device, dtype):
    x = make_input((4, 1021), dtype, device)
    x[0, 3] = float("nan")
    x[1, 7] = float("inf")
    x[2, 8] = float("inf")
    x[2, 9] = float("-inf")
    x[3, 10] = float("-inf")
    check_sum(x, -1)
    check_sum(x)


# ---- dims ------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["sum", "amax"])
@pytest.mark.parametrize("dim", [2, -3, [0, 2], (5,), [-4]], ids=str)
def test_dim_out_of_range_raises_index_error(device, op, dim):
    x = make_input((3, 4), torch.float32, device)
    with pytest.raises(IndexError):
        getattr(reduce_ops, op)(x, dim)
    with pytest.raises(IndexError):
        getattr(torch.ops.reduce_ops, op)(x, dim)


@pytest.mark.parametrize("op", ["sum", "amax"])
@pytest.mark.parametrize("dim", [(0, 0), [1, -1], (0, 1, 0), [-2, 0]], ids=str)
def test_duplicate_dims_raise_runtime_error(device, op, dim):
    x = make_input((3, 4), torch.float32, device)
    with pytest.raises(RuntimeError):
        getattr(reduce_ops, op)(x, dim)
    with pytest.raises(RuntimeError):
        getattr(torch.ops.reduce_ops, op)(x, dim)


@pytest.mark.parametrize("op", ["sum", "amax"])
@pytest.mark.parametrize("dim", [[], ()], ids=["list", "tuple"])
def test_empty_dim_list_reduces_all_like_torch(device, op, dim):
    # SPEC is silent on dim=[]; torch.sum and torch.amax reduce every dim for it.
    x = make_input((3, 4, 5), torch.float32, device)
    if op == "sum":
        check_sum(x, dim)
        check_sum(x, dim, keepdim=True)
    else:
        check_amax(x, dim)
        check_amax(x, dim, keepdim=True)


@pytest.mark.parametrize("op", ["sum", "amax"])
def test_dim_accepts_int_list_tuple_and_none(device, op):
    x = make_input((3, 4, 5), torch.float32, device)
    fn = getattr(reduce_ops, op)
    by_int = fn(x, 1)
    assert torch.equal(by_int, fn(x, [1])) and torch.equal(by_int, fn(x, (1,))) and torch.equal(by_int, fn(x, -2))
    assert torch.equal(fn(x, (0, 2)), fn(x, [2, 0]))
    assert torch.equal(fn(x, None), fn(x, (0, 1, 2)))
    assert torch.equal(fn(x), fn(x, None))


def test_keyword_arguments(device):
    x = make_input((3, 4, 5), torch.bfloat16, device)
    out = reduce_ops.sum(x, dim=(0, 2), keepdim=True, dtype=torch.float32)
    assert out.shape == (1, 4, 1) and out.dtype == torch.float32
    out = reduce_ops.amax(x, dim=[1], keepdim=True)
    assert out.shape == (3, 1, 5) and out.dtype == torch.bfloat16


# ---- dtypes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["sum", "amax"])
@pytest.mark.parametrize("bad_dtype", INT_LIKE_DTYPES, ids=dtype_id)
def test_unsupported_input_dtype_raises_naming_op_and_dtype(device, op, bad_dtype):
    x = torch.ones(3, 4, device=device).to(bad_dtype)
    for fn in (getattr(reduce_ops, op), getattr(torch.ops.reduce_ops, op)):
        with pytest.raises(RuntimeError) as info:
            fn(x, -1)
        message = str(info.value)
        assert op in message and message_names_dtype(message, bad_dtype), message


# ---- determinism -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("shape,dim", [((1 << 20,), None), ((1021, 1031), 0), ((1021, 1031), 1),
                                       ((64, 128, 129), (0, 2)), ((1000, 96), 0), ((64, 4096), 1)], ids=str)
def test_sum_is_deterministic(device, dtype, shape, dim):
    x = make_input(shape, dtype, device, scale=100.0)
    first = reduce_ops.sum(x, dim)
    for _ in range(3):
        assert_same_bits(reduce_ops.sum(x, dim), first)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=dtype_id)
@pytest.mark.parametrize("shape,dim", [((1 << 26,), None), ((1 << 26,), 0), ((1 << 13, 1 << 13), 0),
                                       ((8, 1 << 23), 1), ((1 << 23, 8), 0), ((512, 512, 256), (0, 2))],
                         ids=str)
def test_sum_is_deterministic_on_large_cuda_inputs(dtype, shape, dim):
    # Float atomics or a launch-dependent split would change the low bits between runs.
    x = make_input(shape, dtype, "cuda", scale=100.0)
    first = reduce_ops.sum(x, dim, dtype=torch.float32)
    other = torch.empty(1 << 20, device="cuda")  # disturb the allocator and the SMs in between
    for _ in range(5):
        other.uniform_()
        assert_same_bits(reduce_ops.sum(x, dim, dtype=torch.float32), first)
        assert_same_bits(reduce_ops.sum(x, dim), reduce_ops.sum(x, dim))


# ---- every CUDA strategy, forced on small shapes -----------------------------------------------

# Each shape is run under the automatic choice (aligned short rows: several rows per lane group;
# columns of small inputs: one round of loads a thread, "wave") and every strategy the launcher
# can be forced into (REDUCE_OPS_STRATEGY): lanes per row, a warp per row, a block per row, split
# rows with the last-block combine, columns streamed by few threads ("stream") and split columns;
# a launcher ignores a strategy that does not apply to its layout.
# Dims (0, 2) of 3-D shapes fit no single view: each of their stages runs under the strategy, the
# last one, for 16-bit sums, adding float32 partials into the 16-bit result: columns of 9, rows of
# 3 and of 5 (the tiny and staged or narrow rows), columns of 2000 (one-round rows of 50 before).
STRATEGY_CASES = [((64, 13), -1), ((64, 100), -1), ((1001, 128), -1), ((77, 32), 1), ((9, 8), -1), ((33, 500), -1), ((9, 3000), -1), ((3, 70001), -1),
                  ((140003,), None), ((1 << 20,), None), ((5, 7, 13), (0, 2)), ((300, 64), 0),
                  ((5000, 8), 0), ((40, 7, 9), (0, 2)), ((16, 12), 0), ((64, 9, 4096), (0, 2)),
                  ((50, 2000, 3), (0, 2)), ((20, 3000, 5), (0, 2)), ((3, 2000, 50), (0, 2))]


@requires_cuda
@pytest.mark.parametrize("strategy", ["auto", "group", "warp", "block", "split", "stream"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", ["contiguous", "offset", "transposed"])
@pytest.mark.parametrize("shape,dim", STRATEGY_CASES, ids=str)
def test_every_cuda_strategy_matches_torch(monkeypatch, strategy, dtype, layout, shape, dim):
    if strategy != "auto":
        monkeypatch.setenv("REDUCE_OPS_STRATEGY", strategy)
    x = make_input(shape, dtype, "cuda", layout)
    check_reductions(x, dim)


# Rows the lanes of a group share (reduce_rows_group_kernel; REDUCE_OPS_STRATEGY=warp takes it at
# any row count, a warp of 8 packs a lane past 128 packs): rows whose packs end the group's rounds
# part way (its last round's packs past the row are the identity: 1000 float32 is 250 packs of a
# round of 256, 1100 one whole round and 19 packs more), rows that start anywhere in a 16-byte
# pack (their head and tail elements loaded apart from the packs), every value negative (a pack
# of zeros in the last round would win the max), and a NaN in a row's first or last element.
@requires_cuda
@pytest.mark.parametrize("cols", [13, 77, 197, 1000, 1021, 1100, 2050])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_group_rows_last_round_and_edges(monkeypatch, dtype, cols, offset):
    monkeypatch.setenv("REDUCE_OPS_STRATEGY", "warp")
    rows = 37
    storage = make_input((rows * cols + offset,), dtype, "cuda")
    x = storage[offset:].view(rows, cols)  # row r starts at element offset + r * cols
    check_sum(x, -1)
    check_amax(x, -1)
    storage.copy_(-storage.abs() - 1)  # in place: x keeps its offsets
    check_amax(x, -1)
    x[3, 0] = float("nan")
    x[5, -1] = float("nan")
    check_sum(x, -1)
    check_amax(x, -1)


# Short aligned rows (reduce_short_rows_kernel: a group of 1-32 lanes takes several rows at once)
# whose packs leave lanes of the group idle, and row counts that leave a group's last rows past
# the end: those lanes and rows must fold the identity, not a pack of zeros or a copy of another
# pack. Rows of 1 and 2 packs take groups of 1 and 2 lanes.
@pytest.mark.parametrize("packs", [1, 2, 3, 5, 12, 24, 31])
@pytest.mark.parametrize("rows", [1001, 4099])
def test_short_rows_idle_lanes_and_rows(device, dtype, packs, rows):
    x = make_input((rows, packs * (16 // dtype.itemsize)), dtype, device)
    check_sum(x, -1)
    check_amax(x, -1)
    y = -x.abs() - 1  # every value negative: a pack of zeros folded in would win the max
    check_amax(y, -1)


# Dense rows shorter than a 16-byte pack (reduce_tiny_rows_kernel on CUDA: a thread takes a pack's
# worth of rows, the last ones under a pack element by element; rows of 4 values or more loaded as a
# stream, kStream): every such length, row counts around a thread's share and past a block's, the
# same rows from a start off 16 bytes and as a slice with a longer row stride (the other kernels'
# paths), and the values a fold must keep.
@pytest.mark.parametrize("rows", [1, 7, 8, 9, 1001, 4099, 65537])
def test_tiny_rows(device, dtype, rows):
    per_pack = 16 // dtype.itemsize
    for cols in range(1, per_pack):  # 1: a dim reduce_geometry drops (no row), for the other paths
        x = make_input((rows, cols), dtype, device)
        if device == "cuda" and cols > 1:
            tiny = launches_of(cuda_kernels_run(lambda: reduce_ops.sum(x, -1)), "reduce_tiny_rows_kernel")
            assert [a[3:] for a in tiny] == [[str(cols), "true" if cols >= 4 else "false"]], cols
        check_reductions(x, -1)
        check_amax(-x.abs() - 1, -1)  # every value negative: a pad of zeros folded in would win the max
        check_sum(x.view(1, rows, cols), 2, keepdim=True)
        flat = make_input((rows * cols + 1,), dtype, device)
        check_reductions(flat[1:].view(rows, cols), -1)
        check_reductions(make_input((rows, cols + 1), dtype, device)[:, :cols], -1)
        y = x.clone()
        y[rows // 2, cols - 1] = float("nan")
        y[rows - 1, 0] = float("-inf")
        check_sum(y, -1)
        check_amax(y, -1)


# Dense rows of up to 128 bytes that are not whole 16-byte packs (reduce_staged_rows_kernel on CUDA,
# from 32 KB-4 MB, any size past 64 bytes a row: a block stages its rows in shared memory by whole
# packs, then a thread folds a row, rows of whole 8-byte words by 8-byte words (kWide), rows of 4
# values or more loaded as a stream (kStream); REDUCE_OPS_STAGED_MIN=1 takes it for these small
# inputs): every such length, one row, a block's rows and several blocks with a partial last one,
# the values a fold must keep. Blocks of 256 or 512 rows up to 64 bytes, 128 past; rows of up to 24
# bytes take 256 while those blocks fit 8 an SM; halved to 128 rows while they are fewer than the
# SMs. CUDA only: "mid" is 512 rows an SM and one more (whole blocks of 256 rows of up to 64 bytes,
# of 128 past), "full" 2048 rows an SM and one more (whole blocks of 512 rows of up to 24 bytes).
# 16-bit rows are read by 32-bit words, and an odd length shares a word between rows 0 and 1 and
# between rows 2 and 3: a NaN or inf at those rows' shared ends must stay in its own row.
@pytest.mark.parametrize("rows", [1, 257, 3001, "mid", "full"])
def test_staged_rows(device, dtype, rows, monkeypatch):
    if rows in ("mid", "full"):
        if device != "cuda":
            pytest.skip("the blocks' size is the CUDA kernel's")
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        rows = (512 if rows == "mid" else 2048) * sms + 1
    monkeypatch.setenv("REDUCE_OPS_STAGED_MIN", "1")
    item = dtype.itemsize
    for cols in range(16 // item + 1, 128 // item + 1):
        x = make_input((rows, cols), dtype, device)
        if device == "cuda":
            staged = launches_of(cuda_kernels_run(lambda: reduce_ops.amax(x, -1)), "reduce_staged_rows_kernel")
            wide = "true" if cols * item % 8 == 0 and item < 8 else "false"
            streamed = "true" if cols >= 4 else "false"  # kStreamMinCols: float64 rows of 3 load plainly
            expected = [] if cols * item % 16 == 0 else [[wide, streamed]]
            assert [a[3:] for a in staged] == expected, cols
        check_reductions(x, -1)
        check_amax(-x.abs() - 1, -1)
        y = x.clone()
        y[rows // 2, cols - 1] = float("nan")
        y[0, cols // 2] = float("inf")
        check_sum(y, -1)
        check_amax(y, -1)
        if rows >= 4:
            z = -x.abs() - 1
            z[1, 0] = float("nan")
            z[2, cols - 1] = float("inf")
            check_sum(z, -1)
            check_amax(z, -1)


# The staged and tiny rows load as a stream only where their output fits in the L2 (reduce.cu's
# stream_rows): rows a few packs' worth either side of an output of the L2's size, float64 rows of
# 5 (staged) and bfloat16 rows of 4 (tiny; 4 times the L2 of input).
@requires_cuda
@pytest.mark.parametrize("dtype,cols,kernel", [(torch.float64, 5, "reduce_staged_rows_kernel"),
                                               (torch.bfloat16, 4, "reduce_tiny_rows_kernel")])
def test_streamed_rows_by_output(dtype, cols, kernel):
    l2_rows = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size // dtype.itemsize
    for rows, streamed in ((l2_rows - 16, "true"), (l2_rows + 16, "false")):
        x = make_input((rows, cols), dtype, "cuda")
        launches = launches_of(cuda_kernels_run(lambda: reduce_ops.amax(x, -1)), kernel)
        assert [a[-1] for a in launches] == [streamed], rows
        check_amax(x, -1)
        del x


# Without the knob, dense rows are staged from 32 KB of them where the narrow packs would be 2 or 4
# bytes and the rows are up to 64 bytes long (STAGED_LEAST), at any size where they are 65-128 bytes
# long (the group kernel's otherwise), and from 4 MB where the packs would be 8 bytes: the fewest
# rows that reach the size are staged, one row fewer (where there is one) are not (test_narrow_rows).
STAGED_LEAST = 32 << 10


@requires_cuda
@pytest.mark.parametrize("dtype,cols,least", [(torch.bfloat16, 9, STAGED_LEAST), (torch.float32, 9, STAGED_LEAST),
                                              (torch.float16, 10, STAGED_LEAST), (torch.bfloat16, 12, 4 << 20),
                                              (torch.float32, 31, 0), (torch.bfloat16, 63, 0)])
def test_staged_rows_by_default(dtype, cols, least):
    first = max(1, -(-least // (cols * dtype.itemsize)))
    for n, staged in ((first, True), (first - 1, False)):
        if n == 0:
            continue
        x = make_input((n, cols), dtype, "cuda")
        assert bool(launches_of(cuda_kernels_run(lambda: reduce_ops.sum(x, -1)), "reduce_staged_rows_kernel")) == staged
        check_reductions(x, -1)


# Short rows that are not whole 16-byte packs, by their length, their start or their row stride
# (reduce_short_rows_kernel on CUDA over narrower packs: the widest of 8, 4 or 2 bytes that divides
# all three): rows up to 64 bytes, or up to 128 of 8-byte packs. Every length up to 4 packs and a
# few longer ones (past those bounds the group kernel's), from a start on 16 bytes and off it,
# dense and as a slice of wider rows, and the values a fold must keep.
@pytest.mark.parametrize("rows", [1, 3, 257, 1001, 4099])
def test_narrow_rows(device, dtype, rows):
    item = dtype.itemsize
    per_pack = 16 // item
    for cols in list(range(2, 4 * per_pack + 2)) + [30, 31, 62, 66, 100]:
        dense = make_input((rows * cols + 1,), dtype, device)
        wide = make_input((rows, cols + 2), dtype, device)
        for x in (dense[:-1].view(rows, cols), dense[1:].view(rows, cols), wide[:, 1:cols + 1], wide[:, :cols]):
            if device == "cuda":
                stride = x.stride(0) * item if rows > 1 else 0
                bits = cols * item | x.data_ptr() | stride | 16
                pack = bits & -bits  # the widest pack dividing the row, its start and its stride
                packed = x.data_ptr() % 16 == 0 and x.is_contiguous()  # dense rows from a 16-byte start
                tiny = cols < per_pack and packed
                narrow = cols * item <= 64 or (pack == 8 and cols * item <= 128)
                # test_staged_rows_by_default: dense rows of 2- or 4-byte packs from 32 KB of them
                staged = packed and pack in (2, 4) and cols * item <= 128 and rows * cols * item >= STAGED_LEAST
                if pack < 16 and not tiny and narrow and not staged:
                    short = launches_of(cuda_kernels_run(lambda: reduce_ops.sum(x, -1)), "reduce_short_rows_kernel")
                    assert [a[4] for a in short] == [str(pack // item)], (cols, x.stride(), x.data_ptr() % 16)
            check_reductions(x, -1)
            check_amax(-x.abs() - 1, -1)  # every value negative: a pad of zeros folded in would win the max
        y = dense[1:].view(rows, cols).clone()
        y[rows // 2, cols - 1] = float("nan")
        y[0, cols // 2] = float("inf")
        check_sum(y, -1)
        check_amax(y, -1)


# Narrow short rows that fill every SM's blocks take 16 rows a lane where they would take 4 (as many
# bytes in flight as 16-byte packs): 9 of 11 bfloat16 values a row from the second (2-byte packs,
# groups of 16 lanes), just that many rows and one fewer.
@requires_cuda
def test_narrow_rows_many():
    for few in (False, True):
        rows = rows_per_sm(16 * 16 * 8, few)  # 16 rows a lane x 16 groups x 8 blocks an SM
        x = make_input((rows, 11), torch.bfloat16, "cuda")[:, 1:10]
        short = launches_of(cuda_kernels_run(lambda: reduce_ops.sum(x, -1)), "reduce_short_rows_kernel")
        assert [(a[3], a[4], a[5]) for a in short] == [("16", "1", "4" if few else "16")]
        check_reductions(x, -1)
        check_amax(-x.abs() - 1, -1)


# Few short rows of whole 16-byte packs (a small tensor reduced whole, typically) take a block per
# row on CUDA (reduce_few_rows_kernel): one warp at 1, 2, 4 or 8 packs a lane up to 256 packs, then
# 4 or 8 warps of 4 packs a lane up to 1024: every count of packs around those steps, each dtype's
# pack width, one row and several, and the values that must survive a fold (NaN and infinities
# anywhere, -inf rows, cancelling sums).
FEW_ROW_PACKS = [1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025]


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("packs", FEW_ROW_PACKS)
def test_few_short_aligned_rows(device, dtype, packs, rows):
    cols = packs * (16 // dtype.itemsize)
    x = make_input((rows, cols), dtype, device)
    check_sum(x, -1)
    check_amax(x, -1)
    if dtype in (torch.float16, torch.bfloat16):
        check_sum(x, -1, dtype=torch.float32)
    check_sum(x[0])
    check_amax(x[0])


@pytest.mark.parametrize("packs", [1, 33, 64, 129, 256, 300, 1024])
def test_few_short_aligned_rows_special_values(device, dtype, packs):
    cols = packs * (16 // dtype.itemsize)
    x = make_input((4, cols), dtype, device)
    x[0, cols - 1] = float("nan")  # the last lane's last pack
    x[1] = float("-inf")
    x[2, cols // 2] = float("inf")
    x[3, 0] = float("inf")
    x[3, cols - 1] = float("-inf")  # inf - inf: NaN
    for row in x:
        check_amax(row)
        check_sum(row)
    assert torch.isnan(reduce_ops.amax(x[0])) and reduce_ops.amax(x[1]).item() == float("-inf")
    negative = -(make_input((cols,), dtype, device).abs() + 1)
    assert check_amax(negative).item() < 0


# Small column reductions whose reduced dim one block loads at once (CUDA: reduce_cols_few_kernel,
# up to 2048 rows): every step of its block shapes (4, 8, 16, ..., 256, 1024 and 2048 rows; one
# warp of 32 / 2^k columns up to 256 rows, then one column a block of 4 or 8 warps), column counts
# that leave a block's last lanes past the end, and a middle dim (outer index > 1).
FEW_COLS_ROWS = [1, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129, 256, 257, 1024, 1025, 2048, 2049]


@pytest.mark.parametrize("packs", [1, 5, 40])
@pytest.mark.parametrize("rows", FEW_COLS_ROWS)
def test_few_columns(device, dtype, rows, packs):
    cols = packs * (16 // dtype.itemsize)
    x = make_input((rows, cols), dtype, device)
    check_reductions(x, 0)
    y = make_input((3, rows, cols), dtype, device)
    check_sum(y, 1)
    check_amax(y, 1)


@pytest.mark.parametrize("rows", [4, 33, 300, 2048])
def test_few_columns_special_values(device, dtype, rows):
    cols = 6 * (16 // dtype.itemsize)
    x = make_input((rows, cols), dtype, device)
    x[rows - 1, 0] = float("nan")  # the last row: the last of a thread's loads
    x[:, 1] = float("-inf")
    x[rows // 2, 2] = float("inf")
    x[0, 3] = float("inf")
    x[rows - 1, 3] = float("-inf")  # inf - inf: NaN
    out = check_amax(x, 0)
    check_sum(x, 0)
    assert torch.isnan(out[0]) and out[1].item() == float("-inf")
    negative = -(make_input((rows, cols), dtype, device).abs() + 1)
    assert (check_amax(negative, 0) < 0).all()


# Split rows of one round of loads a segment (CUDA: reduce_split_few_kernel, whole tensors up to
# 16 MB and few long rows): segments of 1024 or 2048 packs, a last segment of any length, rows
# whose stride is not their length, and a NaN in the last segment's last pack. 16-bit rows split
# from 16384 elements, 4- and 8-byte ones from 8192 and 4096 (the shorter ones here take the
# block kernel in 16 bits); float64 past 16 MB (3 << 20) takes the streaming split.
@requires_cuda
@pytest.mark.parametrize("shape,dim", [((8192,), None), ((8192 + 8,), None), ((16384 + 8,), None), ((40000,), None),
                                       ((1 << 18,), None), ((3 << 20,), None), ((4, 65536 + 24), -1), ((2, 9000), -1),
                                       ((2, 20000), -1), ((16, 1 << 16), -1)], ids=str)
def test_split_rows_of_one_round(dtype, shape, dim):
    x = make_input(shape, dtype, "cuda")
    check_reductions(x, dim)
    if len(shape) == 2:
        wide = make_input((shape[0], shape[1] + 16 // dtype.itemsize), dtype, "cuda")[:, :shape[1]]
        check_sum(wide, dim)
        check_amax(wide, dim)
    x.view(-1)[-1] = float("nan")
    assert torch.isnan(check_amax(x, dim)).any() and torch.isnan(check_sum(x, dim)).any()


@requires_cuda
@pytest.mark.parametrize("shape,dim", [((3, 70001), -1), ((1 << 20,), None), ((5000, 8), 0), ((4, 65536), -1)],
                         ids=str)
def test_split_counters_reset_between_calls_and_streams(shape, dim):
    # The split kernel's last block resets its row counters; a stale count would pick the wrong
    # "last" block on the next call (a row folded before all its partials arrived).
    x = make_input(shape, torch.float32, "cuda")
    first = reduce_ops.sum(x, dim)
    side = torch.cuda.Stream()
    for stream in (torch.cuda.current_stream(), side, torch.cuda.current_stream()):
        with torch.cuda.stream(stream):
            for _ in range(3):
                assert_same_bits(reduce_ops.sum(x, dim), first)
                check_amax(x, dim)
        stream.synchronize()


# How a split column launch folds its segments' partials: in the same launch (the last block of
# each group of REDUCE_OPS_COLS_FOLD_GROUP segments, then the last group: two levels when there
# are several), or by a second launch (fold_partial_words_kernel: a warp a word of columns up to
# 128 segments where the words are at least 2 an SM, else a block a word), which
# REDUCE_OPS_COLS_FOLD_LAUNCH=<n> takes from n segments (reduce.cu's launch_cols_plan; 16 by
# default).
_NEVER = "1000000"
COLUMN_FOLDS = {"group1": {"REDUCE_OPS_COLS_FOLD_LAUNCH": _NEVER, "REDUCE_OPS_COLS_FOLD_GROUP": "1"},
                "group3": {"REDUCE_OPS_COLS_FOLD_LAUNCH": _NEVER, "REDUCE_OPS_COLS_FOLD_GROUP": "3"},
                "in_launch": {"REDUCE_OPS_COLS_FOLD_LAUNCH": _NEVER},
                "second_launch": {"REDUCE_OPS_COLS_FOLD_LAUNCH": "2"},
                "auto": {}}


@requires_cuda
@pytest.mark.parametrize("plan", ["auto", "stream"])
@pytest.mark.parametrize("fold", list(COLUMN_FOLDS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=dtype_id)
@pytest.mark.parametrize("shape", [(5000, 8), (20000, 24), (4000, 300), (3, 3000, 16), (300000, 8), (4096, 2048)],
                         ids=str)
def test_split_columns_fold_in_one_or_two_levels_or_a_second_launch(monkeypatch, plan, fold, dtype, shape):
    # Every fold must give torch's answer, the same bits on every call, in either column plan
    # (these small shapes split in 8-157 one-round segments automatically, "wave"; "stream" splits
    # them in segments of 128 rows or more; (300000, 8) streams in more than 128 segments, the
    # second launch's block a word; (4096, 2048) has 512-1024 words of partials, a warp a word).
    # group3 leaves a last group short; (3, 3000, 16) has 3 outer indices, (4000, 300) bfloat16 is
    # not whole packs (not a split launch of this kind).
    if plan != "auto":
        monkeypatch.setenv("REDUCE_OPS_STRATEGY", plan)
    for name, value in COLUMN_FOLDS[fold].items():
        monkeypatch.setenv(name, value)
    x = make_input(shape, dtype, "cuda")
    dim = 0 if len(shape) == 2 else 1
    check_reductions(x, dim)
    assert_same_bits(reduce_ops.sum(x, dim), reduce_ops.sum(x, dim))
    assert_same_bits(reduce_ops.amax(x, dim), reduce_ops.amax(x, dim))


@requires_cuda
@pytest.mark.parametrize("plan", ["stream", "split"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("cols", [8, 136, 7, 133])
@pytest.mark.parametrize("reduced", [1, 2, 3, 5, 63, 65, 71, 127, 1000, 1031, 4103])
def test_streamed_columns_take_every_partial_round(monkeypatch, plan, dtype, cols, reduced):
    # The streaming plan's threads read 4 rows a round (kColsRound; 16 where the columns are not
    # whole 16-byte packs, 7 and 133 here, loaded an element at a time) and end a segment on a
    # partial round of up to 3 (15) rows, loaded together, rows past the end reloading one inside
    # it: each row must be added once and the reloads never. These row counts leave the threads
    # every partial length, over 8 or 7 columns (many rows of threads a block) and 136 or 133 (a
    # row of threads across the tile), whole and split in two.
    monkeypatch.setenv("REDUCE_OPS_STRATEGY", plan)
    x = make_input((reduced, cols), dtype, "cuda")
    check_reductions(x, 0)


# The streaming plan's lanes across the columns (32 of 16-byte packs by default): capped at 16 or 8
# (REDUCE_OPS_COLS_LANES), whole and split, the block's rows of threads taking the rest; and the
# shapes whose unsplit tiles past one wave take 16 lanes by default on a 132-SM GPU (reduce.cu's
# stream_plan: float32 256 x 131072, 1024 tiles of 32 lanes in waves of 792; bfloat16 256 x 229376,
# 896 in waves of 660). Each as torch's.
@requires_cuda
@pytest.mark.parametrize("lanes", ["auto", "8", "16"])
@pytest.mark.parametrize("plan", ["auto", "stream", "split"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(1031, 136), (4103, 520), (3, 600, 264), (700, 1000)], ids=str)
def test_streamed_columns_on_fewer_lanes(monkeypatch, lanes, plan, dtype, shape):
    if plan != "auto":
        monkeypatch.setenv("REDUCE_OPS_STRATEGY", plan)
    if lanes != "auto":
        monkeypatch.setenv("REDUCE_OPS_COLS_LANES", lanes)
    x = make_input(shape, dtype, "cuda")
    dim = 0 if len(shape) == 2 else 1
    check_reductions(x, dim)


@requires_cuda
@pytest.mark.parametrize("dtype,shape", [(torch.float32, (256, 131072)), (torch.bfloat16, (256, 229376))], ids=str)
def test_streamed_columns_past_one_wave(monkeypatch, dtype, shape):
    monkeypatch.delenv("REDUCE_OPS_COLS_LANES", raising=False)
    x = make_input(shape, dtype, "cuda")
    check_sum(x, 0)
    check_amax(x, 0)
    assert_same_bits(reduce_ops.sum(x, 0), reduce_ops.sum(x, 0))
    monkeypatch.setenv("REDUCE_OPS_COLS_LANES", "32")
    check_sum(x, 0)


# Column tiles that 32 lanes would split in 2 or 4 take 16 or 8 lanes unsplit (reduce.cu's
# stream_plan): 2 x SMs or SMs tiles of 32 lanes against the streaming plan's 4 blocks an SM, 512 or
# 1024 rows (the least that give the narrow block its 16 or 32 rows of threads). On sm_90 (where
# the wave plan, 8 lanes of 32 rows, needs more blocks than the SMs hold) the launch is checked: the
# narrow lanes x the rest of 256 threads, 4 x SMs blocks, no fold; REDUCE_OPS_COLS_LANES=32 keeps
# the split (32 x 8 threads, folded in the launch).
@requires_cuda
@pytest.mark.parametrize("splits,lanes,rows", [(2, 16, 512), (4, 8, 1024)], ids=["in2", "in4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_streamed_columns_split_in_few_take_fewer_lanes(monkeypatch, splits, lanes, rows, dtype):
    for name in ("REDUCE_OPS_COLS_LANES", "REDUCE_OPS_COLS_BLOCKS_PER_SM", "REDUCE_OPS_STRATEGY"):
        monkeypatch.delenv(name, raising=False)
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    vec = 16 // torch.tensor([], dtype=dtype).element_size()
    x = make_input((rows, 4 * sms // splits * 32 * vec), dtype, "cuda")
    check_sum(x, 0)
    check_amax(x, 0)
    assert_same_bits(reduce_ops.sum(x, 0), reduce_ops.sum(x, 0))
    if torch.cuda.get_device_capability() == (9, 0):
        events = [e["name"] for e in cuda_kernel_events(lambda: reduce_ops.sum(x, 0))]
        assert len(events) == 1, events
        launches = cuda_launch_dims(lambda: reduce_ops.sum(x, 0), "reduce_cols_kernel")
        assert launches == [((4 * sms, 1, 1), (lanes, 256 // lanes, 1))]
    monkeypatch.setenv("REDUCE_OPS_COLS_LANES", "32")
    check_sum(x, 0)
    check_amax(x, 0)
    if torch.cuda.get_device_capability() == (9, 0):
        assert cuda_launch_dims(lambda: reduce_ops.sum(x, 0), "reduce_cols_kernel") == [((4 * sms, 1, 1), (32, 8, 1))]


# Tiles of an element a thread (columns not whole packs: 32 x SMs - 31 and 64 x SMs - 31 of them,
# SMs and 2 x SMs tiles of 32 lanes) keep 32 lanes where those split in 4 (reduce.cu's stream_plan:
# 8 lanes read 4 rows of 16 or 32 bytes a load), and take 16 lanes unsplit where they split in 2,
# as whole packs do. Checked on sm_90 by the launch: 32 x 8 threads in 4 x SMs blocks, or 16 x 16
# in as many blocks as 16-lane tiles. 16-bit ones and float32 (compensated) sums take 64 lanes of
# 4 rows of threads (kElementThreadRows), which split both widths in 4 x SMs blocks; float32
# amaxes keep 8 rows. Each as torch's.
@requires_cuda
@pytest.mark.parametrize("splits", [2, 4], ids=["in2", "in4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_streamed_element_columns_split_in_4_keep_32_lanes(monkeypatch, splits, dtype):
    clear_column_knobs(monkeypatch)
    for name in ("REDUCE_OPS_COLS_LANES", "REDUCE_OPS_COLS_BLOCKS_PER_SM", "REDUCE_OPS_STRATEGY"):
        monkeypatch.delenv(name, raising=False)
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    cols = 4 * sms // splits * 32 - 31
    x = make_input((1024, cols), dtype, "cuda")
    check_sum(x, 0)
    check_amax(x, 0)
    assert_same_bits(reduce_ops.sum(x, 0), reduce_ops.sum(x, 0))
    if torch.cuda.get_device_capability() == (9, 0):
        amax = ((4 * sms, 1, 1), (32, 8, 1)) if splits == 4 else (((cols + 15) // 16, 1, 1), (16, 16, 1))
        if dtype != torch.float32:
            amax = ((4 * sms, 1, 1), (64, 4, 1))
        assert cuda_launch_dims(lambda: reduce_ops.sum(x, 0), "reduce_cols_kernel") == [((4 * sms, 1, 1), (64, 4, 1))]
        assert cuda_launch_dims(lambda: reduce_ops.amax(x, 0), "reduce_cols_kernel") == [amax]


# 16-bit tiles of an element a thread that 32 lanes split in 2 (64 x SMs - 31 columns, 2 x SMs
# tiles) keep 32 lanes from 27 MiB (reduce.cu's kWideElementTiles16BitBytes) and take 16 lanes
# unsplit under it; float32 ones take 16 lanes at the larger count too. 16-bit tiles are 32 lanes
# wide only with 8 rows of threads (REDUCE_OPS_COLS_THREAD_ROWS=8, set here; by default they take
# 4, and 64 lanes split this width in 4). Odd row counts, which no row group divides. Checked on
# sm_90 by the launch, as above; each as torch's, with the plain and the compensated (float32) sums.
@requires_cuda
@pytest.mark.parametrize("side", ["under", "from"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=dtype_id)
def test_streamed_16_bit_element_columns_split_in_2_keep_32_lanes_from_27_mib(monkeypatch, dtype, side):
    clear_column_knobs(monkeypatch)
    for name in ("REDUCE_OPS_COLS_LANES", "REDUCE_OPS_COLS_BLOCKS_PER_SM", "REDUCE_OPS_STRATEGY", "REDUCE_OPS_SUM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDUCE_OPS_COLS_THREAD_ROWS", "8")
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    cols = 64 * sms - 31
    rows = -(-(27 << 20) // (2 * cols)) | 1  # the first odd count whose 16-bit bytes reach 27 MiB
    if side == "under":
        rows -= 2
    x = make_input((rows, cols), dtype, "cuda")
    check_reductions(x, 0)
    if torch.cuda.get_device_capability() == (9, 0):
        wide = dtype != torch.float32 and side == "from"
        expected = ((4 * sms, 1, 1), (32, 8, 1)) if wide else (((cols + 15) // 16, 1, 1), (16, 16, 1))
        assert cuda_launch_dims(lambda: reduce_ops.sum(x, 0), "reduce_cols_kernel") == [expected]
        assert cuda_launch_dims(lambda: reduce_ops.amax(x, 0), "reduce_cols_kernel") == [expected]


# Streamed 16-bit tiles of an element a thread, and float32 ones of compensated sums, take 64
# lanes of 4 rows of threads (kElementThreadRows) where those tiles split in 4 or more; float32
# amaxes and plain sums 32 of 8, as REDUCE_OPS_COLS_THREAD_ROWS=8 makes every one: 8373 x 1002 (16
# MiB in 16 bits, 16 tiles of 64 lanes). 128 x SMs - 63 columns (2 x SMs tiles of 64 lanes, which
# would split in 2) keep 32 x 8 in every dtype. Odd row counts, no row group. Each as torch's, the
# plain and compensated sums and the amax; the launch's block checked on sm_90.
@requires_cuda
@pytest.mark.parametrize("knob", [None, "8"], ids=["auto", "rows8"])
@pytest.mark.parametrize("width", ["1002", "split_in_2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=dtype_id)
def test_streamed_16_bit_element_columns_take_4_rows_of_64_lanes(monkeypatch, dtype, width, knob):
    clear_column_knobs(monkeypatch)
    for name in ("REDUCE_OPS_COLS_LANES", "REDUCE_OPS_COLS_BLOCKS_PER_SM", "REDUCE_OPS_STRATEGY", "REDUCE_OPS_SUM",
                 "REDUCE_OPS_COLS_THREAD_ROWS"):
        monkeypatch.delenv(name, raising=False)
    if knob:
        monkeypatch.setenv("REDUCE_OPS_COLS_THREAD_ROWS", knob)
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    shape = (8373, 1002) if width == "1002" else (1201, 128 * sms - 63)
    x = make_input(shape, dtype, "cuda")
    check_reductions(x, 0)
    if torch.cuda.get_device_capability() == (9, 0):
        four_rows = knob is None and width == "1002"
        for op in (reduce_ops.sum, reduce_ops.amax):
            wide = four_rows and (dtype != torch.float32 or op is reduce_ops.sum)
            launches = cuda_launch_dims(lambda: op(x, 0), "reduce_cols_kernel")
            assert [b for _, b in launches] == [(64, 4, 1) if wide else (32, 8, 1)], launches
        monkeypatch.setenv("REDUCE_OPS_SUM", "plain")  # float32's plain sums keep 8 rows
        launches = cuda_launch_dims(lambda: reduce_ops.sum(x, 0), "reduce_cols_kernel")
        wide = four_rows and dtype != torch.float32
        assert [b for _, b in launches] == [(64, 4, 1) if wide else (32, 8, 1)], launches


# Columns of an element a thread (not whole 16-byte packs) keep the one-round wave plan (8 lanes
# of 32 rows of threads here) only unsplit in at most 3 blocks an SM (reduce.cu's
# element_wave_plan_kept): float32 127 x 514 (65 tiles) and bfloat16 85 x 1538 (193) keep it;
# 523 x 1002 (126 tiles in 5 segments) and float32 74 x 7001 (876 tiles) take the streaming plan,
# and REDUCE_OPS_COLS_WAVE_ELEMENTS=all gives 523 x 1002 the wave plan again. Each as torch's,
# the plain and compensated sums and the amax; the launch's block checked on sm_90.
@requires_cuda
@pytest.mark.parametrize("dtype,shape,kept", [(torch.float32, (127, 514), True), (torch.bfloat16, (85, 1538), True),
                                              (torch.float32, (523, 1002), False),
                                              (torch.bfloat16, (523, 1002), False),
                                              (torch.float32, (74, 7001), False)], ids=str)
def test_element_columns_keep_the_wave_plan_unsplit_in_few_blocks(monkeypatch, dtype, shape, kept):
    clear_column_knobs(monkeypatch)
    for name in ("REDUCE_OPS_COLS_LANES", "REDUCE_OPS_COLS_BLOCKS_PER_SM", "REDUCE_OPS_STRATEGY", "REDUCE_OPS_SUM",
                 "REDUCE_OPS_COLS_THREAD_ROWS", "REDUCE_OPS_COLS_WAVE_ELEMENTS"):
        monkeypatch.delenv(name, raising=False)
    x = make_input(shape, dtype, "cuda")
    sm90 = torch.cuda.get_device_capability() == (9, 0)
    wave = (8, 32, 1)

    def check_blocks(want_wave):
        check_reductions(x, 0)
        assert_same_bits(reduce_ops.sum(x, 0), reduce_ops.sum(x, 0))
        if sm90:
            for op in (reduce_ops.sum, reduce_ops.amax):
                launches = cuda_launch_dims(lambda: op(x, 0), "reduce_cols_kernel")
                assert [b == wave for _, b in launches] == [want_wave], launches

    check_blocks(kept)
    monkeypatch.setenv("REDUCE_OPS_SUM", "plain")
    check_blocks(kept)
    if shape == (523, 1002):
        monkeypatch.setenv("REDUCE_OPS_COLS_WAVE_ELEMENTS", "all")
        check_blocks(True)


# The unaligned-column paths, forced by mode (reduce.cu's launch_cols_*; described below).
_COLUMN_PATHS_OFF = {"REDUCE_OPS_COLS_PACKED": "off", "REDUCE_OPS_COLS_ROW_GROUPS": "off"}
_FULL_WIDTH = {**_COLUMN_PATHS_OFF, "REDUCE_OPS_COLS_FULL_WIDTH": "on"}
UNALIGNED_COLUMN_MODES = {
    "auto": {},
    "on": {"REDUCE_OPS_COLS_PACKED": "off", "REDUCE_OPS_COLS_ROW_GROUPS": "on"},
    "full": _FULL_WIDTH,
    "fold3": {**_FULL_WIDTH, "REDUCE_OPS_COLS_FOLD_GROUP": "3", "REDUCE_OPS_COLS_FOLD_LAUNCH": _NEVER},
    "full_launch": {**_FULL_WIDTH, "REDUCE_OPS_COLS_FOLD_LAUNCH": "2"},
    "one": {**_COLUMN_PATHS_OFF, "REDUCE_OPS_COLS_FULL_WIDTH": "off"},
    "one_launch": {**_COLUMN_PATHS_OFF, "REDUCE_OPS_COLS_FULL_WIDTH": "off", "REDUCE_OPS_COLS_FOLD_LAUNCH": "2"},
    "one_wave": {**_COLUMN_PATHS_OFF, "REDUCE_OPS_COLS_FULL_WIDTH": "off", "REDUCE_OPS_COLS_WAVE_ELEMENTS": "all"},
    "packed": {"REDUCE_OPS_COLS_PACKED": "on"},
    "packed8": {"REDUCE_OPS_COLS_PACKED": "on", "REDUCE_OPS_COLS_BLOCKS_PER_SM": "8"},
}


def force_column_path(monkeypatch, mode):
    for name, value in UNALIGNED_COLUMN_MODES[mode].items():
        monkeypatch.setenv(name, value)


def clear_column_knobs(monkeypatch):
    """The automatic unaligned-column rule: no knob of UNALIGNED_COLUMN_MODES set."""
    for name in {name for mode in UNALIGNED_COLUMN_MODES.values() for name in mode}:
        monkeypatch.delenv(name, raising=False)


# Columns that are not whole 16-byte packs (CUDA). Row groups (reduce.cu's
# launch_cols_row_groups): groups of kVec / gcd(cols, kVec) rows (kVec = 16 / itemsize) make whole
# packs, the vectorized kernels reduce the (rows / groups, groups * cols) view, and a second
# launch folds each column's partials in order; automatic at some sizes, at every size with
# REDUCE_OPS_COLS_ROW_GROUPS=on ("on"). Elsewhere blocks as wide as the columns, one element a
# thread (launch_cols_full_width; automatic up to 128 columns and 16 MB; "full": at every size up
# to 1024 columns, row groups off; "fold3": their splits folded in the launch, in groups of 3
# segments; "full_launch": by a second launch wherever the columns are whole words of partials),
# and past that, or with both off ("one"; "one_launch": its splits folded by a second launch),
# the one-element kernel's 32-lane tiles ("one_wave": its one-round wave plan wherever that fits,
# split or not, which by default it takes only unsplit in few blocks). Packed row groups
# (launch_cols_packed: the same view in one column tile, a block as wide as a group's packs, each
# block folding its columns' group values in shared memory before its partial goes out, a second
# launch folding the partials, a block (or a warp) a 16-byte word of columns; "packed": wherever
# it applies, up to 544-1024 packs (the kernel's registers),
# groups dividing the rows, x on 16 bytes; "packed8": 8 blocks an SM, more segments to fold).
# Odd and even column
# counts (groups of 8, 4 and 2 in 16-bit types), a middle dim (an outer index > 1; 5000 of them:
# blocks that take several work items), few and many reduced rows (no split; one block's reach,
# the wave and streaming plans), a row count no group size divides and a start off 16 bytes; NaN
# and infinities in the first and last rows (the first and last group), negative columns, and
# the same bits on every call.
@requires_cuda
@pytest.mark.parametrize("mode", list(UNALIGNED_COLUMN_MODES))
@pytest.mark.parametrize("shape,dim", [((8192, 77), 0), ((4096, 197), 0), ((1024, 1002), 0), ((1024, 2052), 0),
                                       ((3, 4096, 77), 1), ((64, 50257), 0), ((65536, 77), 0), ((8193, 77), 0),
                                       ((16, 77), 0), ((2, 64, 197), 1), ((2048, 197), 0), ((5000, 8, 77), 1)],
                         ids=str)
def test_unaligned_columns_in_row_groups(monkeypatch, mode, dtype, shape, dim):
    force_column_path(monkeypatch, mode)
    x = make_input(shape, dtype, "cuda")
    check_reductions(x, dim)
    assert_same_bits(reduce_ops.sum(x, dim), reduce_ops.sum(x, dim))
    shifted = make_input((x.numel() + 1,), dtype, "cuda")[1:].view(shape)
    check_sum(shifted, dim)
    check_amax(shifted, dim)
    first, last = x.select(dim, 0), x.select(dim, -1)
    last[..., 0] = float("nan")
    first[..., 1] = float("inf")
    last[..., 2] = float("-inf")
    first[..., 3] = float("inf")
    check_sum(x, dim)
    out = check_amax(x, dim)
    assert torch.isnan(out[..., 0]).all() and (out[..., 1] == float("inf")).all()
    negative = -(make_input(shape, dtype, "cuda").abs() + 1)
    assert (check_amax(negative, dim) < 0).all()


# Outer slabs apart in memory: x[:, :4096] of (3, 5000, 77) reduced over dim 1 (rows dense within
# a slab, slabs 5000 rows apart: whole packs for every dtype), under each forced unaligned-column
# path; the packed and row-group kernels step from slab to slab by the outer stride.
@requires_cuda
@pytest.mark.parametrize("mode", ["auto", "packed", "on", "full"])
def test_unaligned_columns_of_a_slice(monkeypatch, mode, dtype):
    force_column_path(monkeypatch, mode)
    x = make_input((3, 5000, 77), dtype, "cuda")[:, :4096]
    check_sum(x, 1)
    check_amax(x, 1)
    assert_same_bits(reduce_ops.sum(x, 1), reduce_ops.sum(x, 1))


# The automatic rule past the sizes above: packed row groups for 2- and 4-byte inputs from 3 MB
# (groups of at most 256 packs: 77 columns; 49152 x 77 is 7.6 MB in 16 bits, 131072 x 77 20 MB),
# row groups (two launches) for wider 16-bit groups from 27 MiB (1002 columns: 501 packs; in
# float32 the one-element kernel); "off" turns both off (the one-element kernel), for the same
# answer.
@requires_cuda
@pytest.mark.parametrize("mode", ["auto", "off"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=dtype_id)
@pytest.mark.parametrize("shape", [(49152, 77), (131072, 77), (32768, 1002)], ids=str)
def test_unaligned_columns_large_automatic(monkeypatch, mode, dtype, shape):
    if mode == "off":
        for name, value in _COLUMN_PATHS_OFF.items():
            monkeypatch.setenv(name, value)
    x = make_input(shape, dtype, "cuda")
    check_sum(x, 0)
    check_sum(x, 0, dtype=torch.float32)
    check_amax(x, 0)
    assert_same_bits(reduce_ops.sum(x, 0), reduce_ops.sum(x, 0))


# The packed kernels' block (reduce.cu's packed_block) is the fewest rows of threads that make 128
# threads: 64 rows at 3 packs a row group (3 float32 columns, 6 in 16 bits; in reduce_cols_kernel
# rows of threads past 8 fold as a tree, column_fold.cuh's fold_thread_rows), 16 at 13 packs, 2 at
# 77 and 1 at 197. Every shape here is past the automatic rule's 3 MB in every dtype and past
# reduce_cols_few_kernel's reach, so the one packed launch must be reduce_cols_packed_small_kernel
# (rounds of 4 rows of packs) under 32 MiB (kPackedSmallMaxBytes: the first five shapes in every
# dtype, the last four in none) and reduce_cols_kernel's rounds of 16 (its last template argument)
# from it, and match the reference.
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=dtype_id)
@pytest.mark.parametrize("shape", [(1048576, 3), (1048576, 6), (262144, 13), (49152, 77), (24576, 197),
                                   (8388608, 3), (2097152, 13), (262144, 77), (131072, 197)], ids=str)
def test_packed_columns_block_shapes(monkeypatch, dtype, shape):
    clear_column_knobs(monkeypatch)
    x = make_input(shape, dtype, "cuda")
    rounds = packed_launches(cuda_kernels_run(lambda: reduce_ops.sum(x, 0)))
    assert rounds == (["small"] if x.numel() * x.element_size() < 32 << 20 else ["16"]), rounds
    check_sum(x, 0)
    check_amax(x, 0)
    assert_same_bits(reduce_ops.sum(x, 0), reduce_ops.sum(x, 0))


def packed_launches(names):
    """The packed column launches among profiler kernel names, in order: "small" for
    reduce_cols_packed_small_kernel (launch_cols_packed's short rounds, 4 rows of packs), "16" for
    reduce_cols_kernel's packed rounds (its last template argument), and "4" for a
    reduce_cols_kernel launch whose last template argument is 4 (its short-round packed launch
    until session 120), so that one coming back fails the tests that expect none."""
    out = []
    for name in names:
        if template_args(name, "reduce_cols_packed_small_kernel") is not None:
            out.append("small")
        else:
            args = template_args(name, "reduce_cols_kernel")
            if args is not None and args[-1] in ("4", "16"):
                out.append(args[-1])
    return out


# The packed kernel's round, 16 rows of packs a thread from 32 MiB of input (reduce.cu's
# kPackedSmallMaxBytes; 3 MiB until session 121), 4 under it (reduce_cols_packed_small_kernel): 77
# columns of 4 or 8 rows a group (float32, 16-bit) on either side of it by one group, whose row
# groups' wide view (27235-27236 rows) is past reduce_cols_few_kernel's 2048, so that the packed
# kernel takes them on both sides, never the row groups' three launches (fold_row_groups_kernel
# last).
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=dtype_id)
@pytest.mark.parametrize("above", [False, True])
def test_packed_columns_from_32_mib(monkeypatch, dtype, above):
    clear_column_knobs(monkeypatch)
    itemsize = torch.empty((), dtype=dtype).element_size()
    groups = 16 // itemsize
    row_bytes = 77 * itemsize * groups
    rows = ((32 << 20) // row_bytes + (1 if above else 0)) * groups
    assert (rows * 77 * itemsize >= 32 << 20) == above
    x = make_input((rows, 77), dtype, "cuda")
    names = cuda_kernels_run(lambda: reduce_ops.sum(x, 0))
    rounds = packed_launches(names)
    assert rounds == (["16"] if above else ["small"]) and not launches_of(names, "fold_row_groups_kernel"), names
    check_sum(x, 0)
    check_amax(x, 0)


# Row groups of at most 256 packs (2- and 4-byte types) follow their launches (reduce.cu's
# row_groups_keep_two_launches): where their wide view (rows / groups) is in reduce_cols_few_kernel's
# reach (2048 rows, 8 MiB) they keep their two launches up to 4 MiB for float32 sums and 3.5 MiB
# for amaxes and 16-bit sums (kRowGroupsFewSmallMax), and past the bound the packed kernel takes
# them on its short rounds (reduce_cols_packed_small_kernel, 4 rows of packs a round; float32 sums
# on 16 rows of packs before session 123): 197 columns of 4656 float32 rows and 9312
# 16-bit ones (3.5 MiB or less) against a group more; 5320 float32 rows (4 MiB or less) against a
# group more; 7988 float32 rows and 15976 16-bit ones (6.3 MB, 1997 rows of the wide view). Past
# the reach the packed kernel takes them at any size, under 32 MiB on its short rounds: 13 columns
# of 16384 float32 rows (0.8 MiB, 4096 wide rows) and of 16388 (a last partial round), 3 columns of
# 16384 (192 KiB), a middle dim of 2, 50 and 6 16-bit columns (groups of 4). Each as torch's, NaN
# in the first and last rows, the same bits on every call.
@requires_cuda
@pytest.mark.parametrize("dtype,shape,dim,sum_rounds,amax_rounds", [
    (torch.float32, (4096, 197), 0, [], []), (torch.float32, (4656, 197), 0, [], []),
    (torch.float32, (4660, 197), 0, [], ["small"]), (torch.float32, (5320, 197), 0, [], ["small"]),
    (torch.float32, (5324, 197), 0, ["small"], ["small"]), (torch.float32, (7988, 197), 0, ["small"], ["small"]),
    (torch.bfloat16, (9312, 197), 0, [], []), (torch.bfloat16, (9320, 197), 0, ["small"], ["small"]),
    (torch.bfloat16, (15976, 197), 0, ["small"], ["small"]), (torch.float16, (9312, 197), 0, [], []),
    (torch.float16, (9320, 197), 0, ["small"], ["small"]), (torch.float16, (15976, 197), 0, ["small"], ["small"]),
    (torch.float32, (16384, 13), 0, ["small"], ["small"]), (torch.float32, (16388, 13), 0, ["small"], ["small"]),
    (torch.float32, (16384, 3), 0, ["small"], ["small"]), (torch.float32, (2, 16384, 13), 1, ["small"], ["small"]),
    (torch.bfloat16, (16384, 50), 0, ["small"], ["small"]), (torch.float16, (16384, 50), 0, ["small"], ["small"]),
    (torch.bfloat16, (131072, 6), 0, ["small"], ["small"])], ids=str)
def test_row_groups_follow_their_launches(monkeypatch, dtype, shape, dim, sum_rounds, amax_rounds):
    clear_column_knobs(monkeypatch)
    x = make_input(shape, dtype, "cuda")
    for call, rounds in [(lambda: reduce_ops.sum(x, dim), sum_rounds), (lambda: reduce_ops.amax(x, dim), amax_rounds)]:
        names = cuda_kernels_run(call)
        assert packed_launches(names) == rounds, names
        assert bool(launches_of(names, "fold_row_groups_kernel")) == (not rounds), names
    check_sum(x, dim)
    check_amax(x, dim)
    assert_same_bits(reduce_ops.sum(x, dim), reduce_ops.sum(x, dim))
    x.select(dim, 0)[..., 0] = float("nan")
    x.select(dim, -1)[..., 1] = float("nan")
    out = check_amax(x, dim)
    assert torch.isnan(out[..., :2]).all()
    check_sum(x, dim)


# The packed kernel's short rounds under 32 MiB (reduce.cu's launch_cols_packed_small, forced with
# REDUCE_OPS_COLS_PACKED=on): one barrier, then a group of lanes a column folds its values and a
# butterfly joins the lanes. 32 lanes a column (3 float32 columns, 64 rows of threads; 6 bfloat16
# columns: 32 for sums, 16 for amaxes, whose partials pad to 8), 8 with a last partial round (13
# columns of 16388 rows), 4 (50 bfloat16 columns), 2 (37 float32 columns), 1 (77 columns, 2 rows
# of threads, 2050 rows of the view: just past reduce_cols_few_kernel's reach; 130 float32
# columns, groups of 2 rows), more columns than threads (260 float16 columns, groups of 2 rows:
# two columns a lane), 2 outer indices. Each as torch's, NaN and infinities in the first and last
# rows, the same bits on every call.
@requires_cuda
@pytest.mark.parametrize("dtype,shape,dim", [
    (torch.float32, (16384, 3), 0), (torch.bfloat16, (131072, 6), 0), (torch.float32, (16388, 13), 0),
    (torch.bfloat16, (16384, 50), 0), (torch.float32, (16384, 37), 0), (torch.float32, (8200, 77), 0),
    (torch.float32, (4098, 130), 0), (torch.float16, (4098, 260), 0), (torch.float32, (2, 16384, 13), 1)],
    ids=str)
def test_packed_small_kernel(monkeypatch, dtype, shape, dim):
    clear_column_knobs(monkeypatch)
    monkeypatch.setenv("REDUCE_OPS_COLS_PACKED", "on")
    x = make_input(shape, dtype, "cuda")
    assert x.numel() * x.element_size() < 32 << 20
    for op in (reduce_ops.sum, reduce_ops.amax):
        names = cuda_kernels_run(lambda: op(x, dim))
        assert packed_launches(names) == ["small"], names
    check_sum(x, dim)
    check_amax(x, dim)
    assert_same_bits(reduce_ops.sum(x, dim), reduce_ops.sum(x, dim))
    first, last = x.select(dim, 0), x.select(dim, -1)
    last[..., 0] = float("nan")
    first[..., 1] = float("inf")
    last[..., -1] = float("-inf")
    out = check_amax(x, dim)
    assert torch.isnan(out[..., 0]).all() and (out[..., 1] == float("inf")).all()
    check_sum(x, dim)


# The small packed kernel's partials are folded a warp a 16-byte word of columns where they are at
# most 3 words (reduce.cu's kFoldFewWords; a block a word otherwise, as for every other caller
# under 2 words an SM). A word holds 4 floats, a compensated float32 sum's finished partials too:
# float32 columns of 3 (1 word), 5 (2), 7 (2), 9 (3) and 13 (4), bfloat16 ones of 6 (2) and 14 (4),
# each in 16-94 segments (up to 128 for a warp's loads). The fold kernel's third template argument
# is its threads a word.
@requires_cuda
@pytest.mark.parametrize("dtype,shape", [
    (torch.float32, (16384, 3)), (torch.float32, (20000, 5)), (torch.float32, (20000, 7)),
    (torch.float32, (24000, 9)), (torch.float32, (16384, 13)), (torch.bfloat16, (65536, 6)),
    (torch.bfloat16, (16384, 14))], ids=str)
def test_packed_small_partials_fold_a_warp_a_word_up_to_3_words(monkeypatch, dtype, shape):
    clear_column_knobs(monkeypatch)
    x = make_input(shape, dtype, "cuda")
    for op in (reduce_ops.sum, reduce_ops.amax):
        names = cuda_kernels_run(lambda: op(x, 0))
        assert packed_launches(names) == ["small"], names
        words = -(-shape[1] // 4)
        folds = [a[2] for a in launches_of(names, "fold_partial_words_kernel")]
        assert folds == (["32"] if words <= 3 else ["256"]), (words, names)
    check_sum(x, 0)
    check_amax(x, 0)
    assert_same_bits(reduce_ops.sum(x, 0), reduce_ops.sum(x, 0))


# Under 256 KB (reduce.cu's kRowGroupsMinBytes) row groups are taken where the reduced dim is
# more than 128 rows (kRowGroupsSmallMinReduced) and not up to it: 77, 197 and 239 columns of 256
# and 136 rows against 128 and 64, a middle dim of 2 outer indices, every dtype (float64: groups
# of 2 rows).
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=dtype_id)
@pytest.mark.parametrize("shape,dim", [((256, 77), 0), ((136, 77), 0), ((128, 77), 0), ((136, 197), 0),
                                       ((64, 197), 0), ((136, 239), 0), ((128, 239), 0), ((2, 136, 77), 1),
                                       ((2, 128, 77), 1)], ids=str)
def test_small_row_groups_past_128_rows(monkeypatch, dtype, shape, dim):
    clear_column_knobs(monkeypatch)
    x = make_input(shape, dtype, "cuda")
    assert x.numel() * x.element_size() < 1 << 18
    names = cuda_kernels_run(lambda: reduce_ops.sum(x, dim))
    assert bool(launches_of(names, "fold_row_groups_kernel")) == (shape[dim] > 128), names
    assert bool(launches_of(cuda_kernels_run(lambda: reduce_ops.amax(x, dim)), "fold_row_groups_kernel")) == (
        shape[dim] > 128)
    check_sum(x, dim)
    check_amax(x, dim)
    assert_same_bits(reduce_ops.sum(x, dim), reduce_ops.sum(x, dim))


# float32 columns whose row group is 257-1024 packs take row groups past 3.5 MiB too (reduce.cu's
# kRowGroupsSmallFloatSumMaxBytes and kRowGroupsSmallFloatMaxMaxBytes): sums (compensated or plain)
# up to 5.75 MiB, amaxes up to 8 MiB. 1002 columns (2 rows a group, 501 packs) of 900 rows (3.4
# MiB), 1504 (the most groups within 5.75 MiB) and 1506, 2092 (within 8 MiB) and 2094; 1025
# columns (1025 packs) of 1200 rows (4.7 MiB) and bfloat16 1002 columns of 2496 (4.8 MiB) keep the
# 3.5 MiB bound (none). Each as torch's.
@requires_cuda
@pytest.mark.parametrize("dtype,shape", [(torch.float32, (900, 1002)), (torch.float32, (1504, 1002)),
                                         (torch.float32, (1506, 1002)), (torch.float32, (2092, 1002)),
                                         (torch.float32, (2094, 1002)), (torch.float32, (1200, 1025)),
                                         (torch.bfloat16, (2496, 1002))], ids=str)
def test_float32_row_groups_sums_to_5_75_mib_amaxes_to_8(monkeypatch, dtype, shape):
    clear_column_knobs(monkeypatch)
    monkeypatch.delenv("REDUCE_OPS_SUM", raising=False)
    x = make_input(shape, dtype, "cuda")
    bytes_ = x.numel() * x.element_size()
    wide_float = dtype == torch.float32 and shape[1] <= 1024
    sums = bytes_ <= (23 << 18 if wide_float else 7 << 19)
    amaxes = bytes_ <= (8 << 20 if wide_float else 7 << 19)
    for call, groups in [(lambda: reduce_ops.sum(x, 0), sums), (lambda: reduce_ops.amax(x, 0), amaxes)]:
        assert bool(launches_of(cuda_kernels_run(call), "fold_row_groups_kernel")) == groups, (bytes_, groups)
    monkeypatch.setenv("REDUCE_OPS_SUM", "plain")
    assert bool(launches_of(cuda_kernels_run(lambda: reduce_ops.sum(x, 0)), "fold_row_groups_kernel")) == sums
    monkeypatch.delenv("REDUCE_OPS_SUM")
    check_sum(x, 0)
    check_amax(x, 0)
    assert_same_bits(reduce_ops.sum(x, 0), reduce_ops.sum(x, 0))


# 16-bit columns whose row group is more than 256 packs (reduce.cu's kRowGroupsWide16BitBytes and
# kRowGroupsWide16BitCompensatedBytes): row groups (their second launch, fold_row_groups_kernel)
# from 27 MiB of input for plain sums and amaxes, from 80 MiB for sums into float32, the
# one-element kernel below: 1002 columns (4 rows a group, 501 packs) of 41860 rows (the fewest
# groups at 80 MiB or more) and 41856 (one group fewer), of 14336 (28.7 MB), of 14128 (the fewest
# groups at 27 MiB or more) and 14124, of 12288 (24.6 MB), and of 10596 (20.25 MiB, the plain
# sums' bound before session 112) and 10592.
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("rows", [41860, 41856, 14336, 14128, 14124, 12288, 10596, 10592], ids=str)
def test_wide_16_bit_row_groups_sums_and_amaxes_from_27_mib_float32_sums_80(monkeypatch, dtype, rows):
    clear_column_knobs(monkeypatch)
    x = make_input((rows, 1002), dtype, "cuda")
    bytes_ = x.numel() * 2
    cases = [(lambda: reduce_ops.sum(x, 0), bytes_ >= 27 << 20),
             (lambda: reduce_ops.sum(x, 0, dtype=torch.float32), bytes_ >= 80 << 20),
             (lambda: reduce_ops.amax(x, 0), bytes_ >= 27 << 20)]
    for call, groups in cases:
        assert bool(launches_of(cuda_kernels_run(call), "fold_row_groups_kernel")) == groups
    check_sum(x, 0)
    check_sum(x, 0, dtype=torch.float32)
    check_amax(x, 0)


# ---- compensated CUDA sums -------------------------------------------------------------------

@functools.lru_cache(maxsize=2)  # built on the CPU in float64 (seconds at 2^24): once per session
def _hard_sum_inputs(n, device):
    gen = torch.Generator(device="cpu").manual_seed(7)
    big = torch.randn(n, generator=gen, dtype=torch.float64) * 1e4
    mixed = torch.randn(n, generator=gen, dtype=torch.float64) * torch.pow(
        10.0, torch.randint(-6, 7, (n,), generator=gen).double())
    # Cancellation: pairs v, -v with small noise, shuffled, so the true sum is tiny next to sum |x|.
    v = torch.randn(n // 2, generator=gen, dtype=torch.float64) * 1e3
    cancel = torch.cat([v, -v + 1e-3 * torch.randn(n // 2, generator=gen, dtype=torch.float64)])
    cancel = cancel[torch.randperm(cancel.numel(), generator=gen)]
    return {"offset": (big + 1e6).float().to(device), "mixed": mixed.float().to(device),
            "cancel": cancel.float().to(device), "constant": torch.full((n,), 0.1, device=device)}


def assert_float32_sum_within(x, dim, ulps):
    """reduce_ops.sum(x, dim, dtype=float32) is within ulps * u * sum|x| (u = 2^-24) of the float64
    sum, for every result."""
    dims = dim if dim is not None else ()
    ref = x.double().sum(dims)
    bound = ulps * 2.0 ** -24 * x.double().abs().sum(dims)
    err = (reduce_ops.sum(x, dim, dtype=torch.float32).double() - ref).abs()
    assert (err <= bound).all(), f"error {err.max().item():.3g} > {bound.min().item():.3g}"


@requires_cuda
@pytest.mark.parametrize("kind", ["offset", "mixed", "cancel", "constant"])
@pytest.mark.parametrize("view", ["flat", "rows", "cols"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_compensated_cuda_sum_error_is_a_few_ulps_of_abs_sum(kind, view, dtype):
    # Compensated: each thread adds one round's pairwise sum (<= 64 elements: 6 roundings) with
    # Neumaier's correction, and partials merge compensated, so |error| <= ~8 u sum|x| (u = 2^-24)
    # whatever the length (a plain float32 sum's bound grows with the length each thread adds).
    # Sums into a float32 result that no thread reads in one round are compensated, bfloat16
    # inputs with dtype=torch.float32 too.
    x = _hard_sum_inputs(1 << 24, "cuda")[kind].to(dtype)
    x, dim = {"flat": (x, None), "rows": (x.view(16, -1), 1), "cols": (x.view(-1, 16), 0)}[view]
    assert_float32_sum_within(x, dim, 8)


# Unaligned columns on the small packed kernel (reduce_cols_packed_small_kernel, under 32 MiB) sum
# into float32 compensated in each thread (rounds of 4 rows pairwise: <= 4 u of its sum|x|), finish
# (1 rounding), then fold the block's floats plain: m - 1 adds in a lane (m = values / lanes),
# log2(lanes) butterfly levels; the second launch adds those partials a pairwise batch of 4 (2)
# with a compensated step (2), finishes (1), and joins a warp's lanes plain (5) and a block's warps
# compensated (2): |error| <= (16 + m - 1 + log2(lanes)) u sum|x|. Bounds, (values, lanes): float32
# 16384 x 3 (256, 32), 50000 x 11 (64, 8), 20000 x 77 (8, 1), 8192 x 197 (4, 1, in
# reduce_cols_few_kernel's reach); bfloat16 65536 x 6 (256, 16: its 8 partials a row of 192 threads).
@requires_cuda
@pytest.mark.parametrize("kind", ["offset", "mixed", "cancel", "constant"])
@pytest.mark.parametrize("dtype,shape,ulps", [
    (torch.float32, (16384, 3), 28), (torch.float32, (50000, 11), 26), (torch.float32, (20000, 77), 23),
    (torch.float32, (8192, 197), 19), (torch.bfloat16, (65536, 6), 35)], ids=str)
def test_packed_small_cuda_sum_error_is_within_its_folds(kind, dtype, shape, ulps):
    x = _hard_sum_inputs(1 << 24, "cuda")[kind].to(dtype)[: math.prod(shape)].view(shape)
    names = cuda_kernels_run(lambda: reduce_ops.sum(x, 0, dtype=torch.float32))
    assert packed_launches(names) == ["small"], names
    assert_float32_sum_within(x, 0, ulps)


@requires_cuda
@pytest.mark.parametrize("kind", ["offset", "mixed", "cancel", "constant"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_staged_cuda_sum_error_is_a_few_ulps_of_abs_sum(kind, dtype):
    # Dims (0, 2) fit no single view, so they are summed in two stages: compensated rows of 65536
    # into float32 partials (<= 8 u of each row's sum|x|, then one rounding), then 16 partials to
    # each result (<= 8 u of their sum|.|, the first test's bound): <= 17 u sum|x| in all.
    x = _hard_sum_inputs(1 << 24, "cuda")[kind].to(dtype).view(16, 16, -1)
    assert_float32_sum_within(x, (0, 2), 17)


@requires_cuda
@pytest.mark.parametrize("kind", ["offset", "mixed", "cancel", "constant"])
@pytest.mark.parametrize("cols", [77, 197, 1000, 1021, 4096])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_short_row_cuda_sum_error_is_within_its_tree_depth(kind, cols, dtype):
    # Rows a group's lanes read in one round of loads (up to 256 packs: 1024 float32 or 2048
    # bfloat16 columns, 16384-21790 rows here), and rows the few rows' kernel reads in one round
    # (aligned, up to 1024 packs: 4096 float32 or 8192 bfloat16 columns, 4096 rows here), are
    # summed plain, not compensated (reduce.cu's launch_rows_unsplit): a pairwise tree over the
    # threads' packs with an add or two for the unaligned edges, so |error| <= depth * u *
    # sum|x| a row, depth <= ceil(log2(cols)) + 4.
    x = _hard_sum_inputs(1 << 24, "cuda")[kind].to(dtype)
    x = x[: x.numel() // cols * cols].view(-1, cols)
    assert_float32_sum_within(x, 1, math.ceil(math.log2(cols)) + 4)


# How many rows take the few rows' kernel, by their packs (reduce.cu's one_round_rows_bound): up to
# 32 packs 2 rows an SM, up to 128 packs 16, up to 256 packs 64; one row more takes another kernel.
@requires_cuda
@pytest.mark.parametrize("packs,per_sm", [(32, 2), (33, 16), (128, 16), (129, 64), (256, 64)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_few_rows_kernel_takes_rows_up_to_its_bound(packs, per_sm, dtype):
    cols = packs * (16 // dtype.itemsize)
    for rows, few in ((rows_per_sm(per_sm, False), True), (rows_per_sm(per_sm, False) + 1, False)):
        x = make_input((rows, cols), dtype, "cuda")
        for op in (reduce_ops.sum, reduce_ops.amax):
            names = cuda_kernels_run(lambda: op(x, 1))
            assert bool(launches_of(names, "reduce_few_rows_kernel")) == few, (rows, names)
        check_reductions(x, 1)


# Past 256 packs (blocks of 4 or 8 warps) the few rows' kernel takes aligned rows at any count: 65
# rows an SM of 257, 512, 513 and 1024 packs; 1025 packs and unaligned rows take other kernels.
@requires_cuda
@pytest.mark.parametrize("packs,few", [(257, True), (512, True), (513, True), (1024, True), (1025, False),
                                       (512.5, False)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_few_rows_kernel_takes_rows_of_several_warps_at_any_count(packs, few, dtype):
    cols = int(packs * (16 // dtype.itemsize))
    x = make_input((rows_per_sm(65, False), cols), dtype, "cuda")
    for op in (reduce_ops.sum, reduce_ops.amax):
        names = cuda_kernels_run(lambda: op(x, 1))
        assert bool(launches_of(names, "reduce_few_rows_kernel")) == few, names
    check_reductions(x, 1)


def unmerged_rows(rows, cols, dtype):
    """(rows, 2, cols) sliced from (rows, 3, cols) on CUDA: reduced over its last dim, aligned rows
    whose two kept dims do not merge into one (reduce.cu's RowsArgs.inner is 2), which the few
    rows' kernel leaves to the others."""
    return make_input((rows, 3, cols), dtype, "cuda")[:, :2]


# Few long rows split over blocks (reduce.cu's launch_rows, split_pays) where a block a row would
# leave half the SMs idle, or some on 32 MB or more, or where the rows are 2 MB or longer; else a
# block a row. Float32 rows: half the SMs' rows of 128 KB (split) and one more (under 32 MB: not);
# one row short of the SMs of 512 KB (over 32 MB on 64 SMs or more: split) and the SMs' count (not);
# 8 rows past the SMs of 2 MB (split) and of 1 MB (not).
@requires_cuda
@pytest.mark.parametrize("rows,cols,split", [("sms/2", 1 << 15, True), ("sms/2", (1 << 15) + 64, True),
                                             ("sms/2+1", 1 << 15, False), ("sms-1", 1 << 17, True),
                                             ("sms", 1 << 17, False), ("sms+8", 1 << 19, True),
                                             ("sms+8", 1 << 18, False)], ids=str)
def test_few_long_rows_split_where_a_block_a_row_leaves_sms_idle(rows, cols, split):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = {"sms/2": sms // 2, "sms/2+1": sms // 2 + 1, "sms-1": sms - 1, "sms": sms, "sms+8": sms + 8}[rows]
    x = make_input((rows, cols), torch.float32, "cuda")
    names = cuda_kernels_run(lambda: reduce_ops.sum(x, 1))
    split_kernels = launches_of(names, "reduce_split_few_kernel", "reduce_rows_split_kernel")
    assert bool(split_kernels) == split, (rows, cols, names)
    if not split:
        assert launches_of(names, "reduce_rows_block_kernel"), names
    check_reductions(x, 1)


@requires_cuda
@pytest.mark.parametrize("kind", ["offset", "mixed", "cancel", "constant"])
@pytest.mark.parametrize("view", ["short1024", "short2048", "rows64", "flat2^14", "flat2^20", "cols1024", "cols64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_few_row_and_one_round_split_sums_are_within_their_tree_depth(kind, view, dtype):
    # Few short rows (reduce_few_rows_kernel: up to two an SM of at most 1024 packs, here a whole
    # 1024 or 2048 elements and 64 rows of 4096) and small columns (reduce_cols_few_kernel: up to
    # 2048 rows and 8 MB, here 1024 x 128 and 64 x 4096 over dim 0) are read in one round and
    # summed as one pairwise tree, plain: |error| <= depth * u * sum|x| a row, depth <=
    # ceil(log2(n)) + 4, as test_short_row_cuda_sum_error_is_within_its_tree_depth's rows. Whole
    # tensors of one-round segments (reduce_split_few_kernel, up to 16 MB) add each segment of at
    # most 2048 packs (8192 float32 or 16384 16-bit values) so and fold the segments' partials
    # compensated: the bound is the segment's depth plus the fold's two roundings, whatever the
    # length.
    x = _hard_sum_inputs(1 << 20, "cuda")[kind].to(dtype)
    x, dim = {"short1024": (x[:1024], None), "short2048": (x[:2048], None),
              "rows64": (x[:1 << 18].view(64, -1), 1), "flat2^14": (x[:1 << 14], None),
              "flat2^20": (x[:1 << 20], None), "cols1024": (x[:1 << 17].view(1024, -1), 0),
              "cols64": (x[:1 << 18].view(64, -1), 0)}[view]
    n = x.numel() if dim is None else x.shape[dim]  # the values summed into one result
    segment = min(n, 2048 * (16 // x.element_size()))
    assert_float32_sum_within(x, dim, math.ceil(math.log2(segment)) + 4 + (2 if n > segment else 0))


RUNS_SUM_CASES = {  # shape over (0, 2), REDUCE_OPS_RUNS_ONCE, kAdjacent, plain, the error bound in ulps of sum|x|
    "once12": ((60, 600, 37), "1", 0, True, math.ceil(math.log2(2220)) + 4),
    "once16": ((64, 512, 49), "1", 0, True, math.ceil(math.log2(3136)) + 4),
    "once20": ((96, 256, 49), "1", 0, True, math.ceil(math.log2(4704)) + 4),
    "once24": ((112, 256, 49), "1", 0, True, math.ceil(math.log2(5488)) + 4),
    "once28": ((128, 256, 49), "1", 0, True, math.ceil(math.log2(6272)) + 4),
    "once32": ((160, 256, 49), "1", 0, True, math.ceil(math.log2(7840)) + 4),
    "once_split": ((300, 7, 49), "1", 0, False, math.ceil(math.log2(4096)) + 4 + 2),
    "rounds": ((224, 320, 49), "3", -1, False, 8),
    "rounds_split": ((1024, 64, 49), "3", -1, False, 8),
}


@requires_cuda
@pytest.mark.parametrize("kind", ["offset", "mixed", "cancel", "constant"])
@pytest.mark.parametrize("case", list(RUNS_SUM_CASES))
def test_runs_by_elements_sums_are_within_their_bounds(monkeypatch, kind, case):
    # Float32 runs by elements (reduce_two_groups_runs_kernel, 8-32 loads a round): an unsplit one round
    # (2220 values on 12 loads a thread, 3136 on 16, 4704 on 20, 5488 on 24, 6272 on 28, 7840 on 32) is
    # summed as one
    # pairwise tree, plain (launch_two_groups_runs launches it with PlainReducer): |error| <= depth *
    # u * sum|x|, depth <= ceil(log2(n)) + 4. Split, each segment (here of at most 4096) so and the
    # partials folded compensated: two roundings more. Rounds of 16 (10976 values unsplit, 1024 x 49
    # in 8 segments) add each round's tree of 16 compensated (NeumaierReducer), as
    # test_compensated_cuda_sum_error_is_a_few_ulps_of_abs_sum's sums: <= 8 u sum|x|.
    shape, once, adjacent, plain, ulps = RUNS_SUM_CASES[case]
    monkeypatch.setenv("REDUCE_OPS_RUNS_ONCE", once)
    x = _hard_sum_inputs(1 << 24, "cuda")[kind][: math.prod(shape)].view(shape)
    reduce_ops.sum(x, (0, 2))  # the stream's first split launch makes its counters (a fill kernel)
    k = runs_kernel_args(lambda: reduce_ops.sum(x, (0, 2)))
    assert k["adjacent"] == adjacent and ("PlainReducer" in k["name"]) == plain, k
    assert_float32_sum_within(x, (0, 2), ulps)


@requires_cuda
@pytest.mark.parametrize("shape,dim,kernel,plain", [
    ((1024,), None, "reduce_few_rows_kernel", True), ((64, 4096), 1, "reduce_few_rows_kernel", True),
    ((1024, 128), 0, "reduce_cols_few_kernel", True), ((64, 4096), 0, "reduce_cols_few_kernel", True),
    ((1 << 20,), None, "reduce_split_few_kernel", False)], ids=str)
def test_few_row_kernels_sum_float32_plain_within_one_round(shape, dim, kernel, plain):
    # reduce.cu: the few short rows' and the small columns' kernels are launched with the tree's
    # reducer (PlainReducer) for a compensated float32 sum; the one-round split keeps the
    # compensated reducer (NeumaierReducer) for its partials' fold and adds each segment plain inside.
    x = make_input(shape, torch.float32, "cuda")
    names = cuda_kernels_run(lambda: reduce_ops.sum(x, dim))
    reducers = [a[2] for a in launches_of(names, kernel)]
    assert reducers and all(("PlainReducer" in r) == plain for r in reducers), names
    check_sum(x, dim)


@requires_cuda
@pytest.mark.parametrize("cols,plain", [(4096, True), (4100, False), (8192, False)])
def test_block_row_sums_of_one_round_add_plain(cols, plain):
    # reduce.cu's launch_rows_unsplit: float32 rows the block kernel's 256 threads read in one
    # round of 4 packs (up to 4096 values) are one pairwise tree, added plain (the bound of
    # test_short_row_cuda_sum_error_is_within_its_tree_depth); longer rows stay compensated.
    # Many rows whose kept dims do not merge (the few rows' kernel takes plain rows of up to 1024
    # packs): a block a row by the block kernel.
    x = unmerged_rows(rows_per_sm(33, False), cols, torch.float32)
    names = cuda_kernels_run(lambda: reduce_ops.sum(x, -1))
    reducers = [a[2] for a in launches_of(names, "reduce_rows_block_kernel")]
    assert reducers and all(("PlainReducer" in r) == plain for r in reducers), names
    check_sum(x, -1)


BLOCK, WARP = "reduce_rows_block_kernel", "reduce_rows_group_kernel"


@requires_cuda
@pytest.mark.parametrize("cols,dtype,kernel", [
    (2048, torch.float32, BLOCK), (2080, torch.float32, BLOCK), (3200, torch.float32, BLOCK),
    (3968, torch.float32, BLOCK), (4608, torch.bfloat16, BLOCK), (6400, torch.bfloat16, BLOCK),
    (7424, torch.float16, BLOCK),
    (2044, torch.float32, WARP), (3300, torch.float32, WARP), (4000, torch.float32, WARP),
    (2050, torch.float32, WARP), (4096, torch.bfloat16, WARP), (4104, torch.bfloat16, WARP),
    (8000, torch.bfloat16, WARP), (6501, torch.bfloat16, WARP)], ids=str)
def test_many_rows_of_one_block_round_take_the_block(cols, dtype, kernel):
    # reduce.cu's launch_rows_unsplit (block_round): many aligned rows of 512-1023 float32 packs,
    # or 576-1023 16-bit packs, go a block a row (256 threads, one round of 2-4 packs a thread),
    # unless the threads with a 4th pack end inside a warp (3300 float32 values: 825 packs, 57
    # threads; 4000: 232; bfloat16 8000: 232). Fewer packs (2044 float32 values: 511; bfloat16
    # 4096 and 4104: 512 and 513) and unaligned rows (2050, 6501) stay on the warp kernel. Since
    # the few rows' kernel takes plain aligned rows of these lengths at any count, the rule acts on
    # rows whose kept dims do not merge (unmerged_rows); the plain ones take the few rows' kernel.
    aligned = cols * dtype.itemsize % 16 == 0
    plain = make_input((rows_per_sm(65, False), cols), dtype, "cuda")
    x = unmerged_rows(rows_per_sm(33, False), cols, dtype)
    for op in (reduce_ops.sum, reduce_ops.amax):
        names = cuda_kernels_run(lambda: op(x, -1))
        assert launches_of(names, kernel) and not launches_of(names, "reduce_few_rows_kernel"), names
        if kernel == BLOCK:
            assert {block for _, block in cuda_launch_dims(lambda: op(x, -1), BLOCK)} == {(256, 1, 1)}
        assert bool(launches_of(cuda_kernels_run(lambda: op(plain, 1)), "reduce_few_rows_kernel")) == aligned
    check_reductions(x, -1)
    check_reductions(plain, 1)


# Medium rows the few rows' kernel does not take (unaligned here) go a warp a row from 8 rows an
# SM, or from 2 where they are at most 256 packs (the warp's one round of 8 packs a lane; reduce.cu's
# many_rows), else a block a row: float32 rows of 1001 values (251 packs) at 2 rows an SM and one
# fewer; of 1025 (257 packs) and 2050 at 2 an SM.
@requires_cuda
@pytest.mark.parametrize("cols,per_sm,few,kernel", [(1001, 2, False, WARP), (1001, 2, True, BLOCK),
                                                    (1025, 2, False, BLOCK), (2050, 2, False, BLOCK)], ids=str)
def test_medium_rows_take_the_warp_from_2_or_8_rows_an_sm(cols, per_sm, few, kernel):
    x = make_input((rows_per_sm(per_sm, few), cols), torch.float32, "cuda")
    for op in (reduce_ops.sum, reduce_ops.amax):
        names = cuda_kernels_run(lambda: op(x, 1))
        assert launches_of(names, kernel) and not launches_of(names, BLOCK if kernel == WARP else WARP), names
        if kernel == WARP:
            assert [a[3:5] for a in launches_of(names, WARP)] == [["32", "8"]], names
    check_reductions(x, 1)


@requires_cuda
@pytest.mark.parametrize("cols,dtype,threads", [
    (12288, torch.float32, 512), (13001 * 4, torch.float32, 512), (24576, torch.bfloat16, 512),
    (30000, torch.float16, 512), (12284, torch.float32, 256), (12289, torch.float32, 256),
    (24568, torch.bfloat16, 256)], ids=str)
def test_long_aligned_rows_take_blocks_of_512_threads(cols, dtype, threads):
    # launch_rows_unsplit's wide_block: aligned rows of 3072 packs or more (12288 float32 values,
    # 24576 16-bit) run the block kernel in blocks of 512 threads, rows of fewer packs (12284
    # float32 values, 24568 bfloat16) and unaligned rows (12289) in blocks of 256. Enough rows
    # that they are not split over blocks; the last rounds of 13001 x 4 and 30000 are partial.
    x = make_input((rows_per_sm(8, False), cols), dtype, "cuda")
    for op in (reduce_ops.sum, reduce_ops.amax):
        assert {block for _, block in cuda_launch_dims(lambda: op(x, 1), BLOCK)} == {(threads, 1, 1)}
    check_reductions(x, 1)


@requires_cuda
@pytest.mark.parametrize("knob", ["plain", "compensated"])
@pytest.mark.parametrize("shape,dim", [((1 << 20,), None), ((1021, 1031), 0), ((1021, 1031), 1)], ids=str)
def test_cuda_sum_knob_still_meets_the_accumulation_bound(monkeypatch, knob, shape, dim):
    # REDUCE_OPS_SUM=plain|compensated (for measuring what compensation costs) must still be a
    # correct sum, into either result dtype.
    monkeypatch.setenv("REDUCE_OPS_SUM", knob)
    for dtype in (torch.float32, torch.bfloat16):
        check_sum(make_input(shape, dtype, "cuda"), dim)


# ---- > 2^31 elements (CUDA, slow) ------------------------------------------------------------

def _chunked_float64_sum(x, chunk=1 << 26):
    flat = x.reshape(-1)
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    for start in range(0, flat.numel(), chunk):
        total += flat[start:start + chunk].double().sum()
    return total


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
def test_sum_and_amax_over_more_than_2_31_elements(big_gpu, dtype):
    n = (1 << 31) + (1 << 20) + 3
    # Positive values, so a skipped or twice-read block moves the sum by far more than the
    # float32 accumulation bound (|x| sums to the sum itself here).
    x = torch.empty(n, dtype=dtype, device=big_gpu).uniform_(0.5, 1.5)
    ref = _chunked_float64_sum(x)
    out = reduce_ops.sum(x, dtype=torch.float32)
    assert abs(out.double() - ref) <= 1e-5 * ref + 1, (out.item(), ref.item())
    out_lowp = reduce_ops.sum(x)
    assert out_lowp.dtype == dtype
    # float16 overflows at 65504: the sum is +inf, as torch.sum gives; bfloat16 within 1 ulp.
    if dtype == torch.float16:
        assert out_lowp.item() == float("inf")
    else:
        assert abs(out_lowp.double() - ref) <= 2 ** -7 * ref
    # The unique maximum lives past index 2^31, then at the very end.
    for index in ((1 << 31) + 5, n - 1):
        x[index] = 2.0
        assert reduce_ops.amax(x).item() == 2.0, f"max at {index} missed"
        x[index] = 1.0
    x[(1 << 31) + 17] = float("nan")
    assert torch.isnan(reduce_ops.amax(x))


@pytest.mark.slow
@pytest.mark.parametrize("dim", [0, 1], ids=str)
def test_sum_and_amax_2d_with_more_than_2_31_elements(big_gpu, dim):
    rows, cols = (1 << 20) + 3, 2049  # 2.15e9 elements: the offsets of the last rows pass 2^31
    x = torch.empty(rows, cols, dtype=torch.bfloat16, device=big_gpu).uniform_(0.5, 1.5)
    out = reduce_ops.sum(x, dim, dtype=torch.float32)
    chunk = 1 << 16
    parts = [x[s:s + chunk].double().sum(dim) for s in range(0, rows, chunk)]
    ref = torch.stack(parts).sum(0) if dim == 0 else torch.cat(parts)
    err = (out.double() - ref).abs()
    assert (err <= 1e-5 * ref).all(), f"max error {err.max().item()} at {err.argmax().item()}"
    x[rows - 1, cols - 1] = 2.0
    x[rows - 2, 3] = float("nan")
    am = reduce_ops.amax(x, dim)
    ref_am = torch.amax(x, dim)
    assert_exactly_equal(am, ref_am)
    x[rows - 2, 3] = 1.0
    assert reduce_ops.amax(x).item() == 2.0


# ---- properties ------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_sum_property(data):
    x = data.draw(strided_tensors())
    dim = data.draw(dim_args(x.dim()))
    keepdim = data.draw(st.booleans())
    dtype = data.draw(st.sampled_from([None, torch.float32, torch.float64]))
    check_sum(x, dim, keepdim, dtype)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_amax_property(data):
    x = data.draw(strided_tensors())
    dim = data.draw(dim_args(x.dim()))
    keepdim = data.draw(st.booleans())
    if x.numel() > 0 and data.draw(st.booleans()):
        flat_index = data.draw(st.integers(0, x.numel() - 1))
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), x.shape))
        x[index] = float("nan")  # x is a view with no self-overlap: this writes one element
    try:
        expected = torch_amax(x, dim, keepdim)
    except (IndexError, RuntimeError) as e:
        with pytest.raises(type(e)):
            reduce_ops.amax(x, dim, keepdim)
        return
    out = reduce_ops.amax(x, dim, keepdim)
    assert_like_torch_result(out, expected, x.device)
    assert_exactly_equal(out, expected)
