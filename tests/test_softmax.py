"""reduce_ops.softmax(x, dim=-1, *, dtype=None) == torch.softmax(x, dim, dtype=dtype).

Any row length, from 1 to the whole tensor. On CUDA the kernel changes strategy with the row
length (a warp per row in registers, a block per row cached in shared memory, rows split
over several blocks), so the row lengths below straddle every plausible threshold, for every
dtype (the thresholds depend on the element size), with few rows and with many.
"""
import pytest
import torch

import reduce_ops
from conftest import (
    _FLOAT_FORMAT, ARITHMETIC_RTOL, DTYPES, INT_LIKE_DTYPES, LAYOUTS, accumulate_dtype,
    assert_close_to_reference, assert_same_bits, assert_like_torch_result, unit_roundoff, dtype_id, make_input, message_names_dtype, reference_softmax, requires_cuda, softmax_tolerance,
)

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

from conftest import INNER_STRATEGIES, force_inner_strategy  # noqa: E402
from conftest import ROW_STRATEGIES, force_row_strategy, force_several_rows_per_block, next_row_cases  # noqa: E402
from conftest import MARKED_LOAD_CASES, force_load_marks  # noqa: E402
from conftest import (  # noqa: E402
    SMEM_48_KB_CASES,
    WARP_HELD_CASES,
    assert_half_packs_launch,
    assert_launches_on_sm90,
    assert_short_rows_launch,
    clear_row_knobs,
    cuda_kernels_run,
    cuda_launch_dims,
    element_row_cases,
    element_rows,
    element_rows_launch,
    force_tile,
    half_pack_cases,
    half_pack_layouts,
    half_pack_rows,
    launches_of,
    like_layout,
    packed_row_cases,
    packed_rows,
    packed_rows_by_default,
    packed_rows_input,
    pair_row_cases,
    held_raw_launches,
    pair_rows,
    peeled_edge_rows,
    peeled_next_row_cases,
    peeled_row_cases,
    row_count,
    rows_per_sm,
    row_norm_warp_packs,
    small_block_cases,
    small_block_rows_input,
    strided_tensors,
    tile_row_cases,
    unaligned_row_cases,
    unaligned_rows,
    warp_pack_cases,
    warp_pack_modes,
    warp_packs_input,
    warp_rows_cols,
    warp_rows_held,
    warp_rows_input,
)

ROW_LENGTHS = [1, 2, 3, 7, 31, 32, 33, 127, 128, 129, 1000, 1024, 1025, 4096, 5000,
               40000, 70000, 300007]


def check_softmax(x, dim=-1, dtype=None, api="python"):
    if api == "python":
        out = reduce_ops.softmax(x, dim, dtype=dtype)
    else:
        out = torch.ops.reduce_ops.softmax(x, dim, dtype=dtype)
    expected = torch.softmax(x, dim, dtype=dtype)
    assert_like_torch_result(out, expected, x.device)
    assert_close_to_reference(out, reference_softmax(x, dim, dtype), expected.dtype,
                              **softmax_tolerance(expected.dtype))
    return out


@pytest.mark.parametrize("rows", ["few", "many"])
@pytest.mark.parametrize("cols", ROW_LENGTHS, ids=lambda c: f"cols{c}")
def test_softmax_row_lengths(device, dtype, cols, rows):
    n_rows = row_count(rows, cols, device)
    x = make_input((n_rows, cols), dtype, device)
    check_softmax(x, -1)


@pytest.mark.parametrize("api", ["python", "torch.ops"])
@pytest.mark.parametrize("shape,dim", [
    ((5, 7, 13), -1), ((5, 7, 13), 2), ((5, 7, 13), 0), ((5, 7, 13), 1), ((5, 7, 13), -2),
    ((5, 7, 13), -3), ((33, 4, 129), 0), ((33, 4, 129), 1), ((1025, 3, 5), 0), ((3, 1025, 5), -2),
    ((5000, 33), 0), ((7, 40000), 0), ((1021,), 0), ((1021,), -1), ((2, 3, 5, 7), 1),
], ids=str)
def test_softmax_dims(device, dtype, shape, dim, api):
    x = make_input(shape, dtype, device)
    check_softmax(x, dim, api=api)


# Over a middle dim (on CUDA the tiled inner kernels): tiles 32 packs wide when there are many,
# narrower ones in 512-thread blocks when there are few, and, when too few for the GPU (sm_90+),
# each tile on a cluster of 2-8 blocks ((4096, 64), (3000, 40), (5, 9000, 8) held in
# registers; (1, 70000, 16) streamed); cols past four rows of threads (the unrolled loop) and
# not a multiple of them; inner a multiple of the 16-byte pack or not. (1100, 2048) holds its
# cols in plain blocks of 2 x 256 threads (the kernel for two such blocks an SM), their rows of
# threads in 16 warps (combine_tile's butterflies and the warps' exchange). Tiles of 64-byte rows
# (launch.h's WideRows) where those are enough for the GPU (7/8 of its SMs, up to 146 SMs here):
# float32 (2, 700, 1024) and (600, 4096) forward and backward, bfloat16/half (600, 4096) backward,
# all held; (1100, 4096) backward streamed (32-byte rows would hold it), forward held in 32-byte rows.
# (600, 1023): scalar loads (inner not a multiple of the pack), float32/float64 held 32 values a
# thread (kInnerScalarHold), 16-bit streamed. 16-bit in 8-byte packs (kInnerHalfHold; float32:
# 16-byte packs): (2, 700, 1020), (1100, 2044) held in 32-byte rows (too few tiles for 64), (600,
# 4092) held in 64-byte rows, (1100, 4092) streamed in 64-byte rows, (2100, 1020) streamed in 32.
# Scalar loads: (100, 4095) held in 64-byte rows (16-bit), (600, 4095) held (float32, float64) and
# streamed (16-bit) in 64-byte rows, (2, 3000, 1023) float64 held in 32-byte rows (64 would stream),
# 16-bit streamed, float32 split; (2100, 1843) float32 streamed in 64-byte rows (neither holds).
INNER_CASES = [((4096, 64), 0), ((3000, 40), 0), ((2, 700, 1024), 1), ((64, 21, 520), 1),
               ((8, 3, 4096), 1), ((5, 9000, 8), 1), ((1, 70000, 16), 1), ((999, 13), 0), ((1100, 2048), 0),
               ((600, 4096), 0), ((1100, 4096), 0), ((600, 1023), 0), ((2, 700, 1020), 1), ((1100, 2044), 0),
               ((600, 4092), 0), ((1100, 4092), 0), ((2100, 1020), 0), ((100, 4095), 0), ((600, 4095), 0),
               ((2, 3000, 1023), 1), ((2100, 1843), 0)]


@pytest.mark.parametrize("shape,dim", INNER_CASES, ids=str)
def test_softmax_inner_dims(device, dtype, shape, dim):
    check_softmax(make_input(shape, dtype, device), dim)


@pytest.mark.parametrize("shape,dim", [((4096, 64), 0), ((1, 70000, 16), 1)], ids=str)
def test_softmax_inner_dims_are_deterministic(device, dtype, shape, dim):
    # The tiles' combines (and, in clusters, the blocks' in rank order) have a fixed order.
    x = make_input(shape, dtype, device)
    first = reduce_ops.softmax(x, dim)
    for _ in range(3):
        assert torch.equal(reduce_ops.softmax(x, dim), first)


@pytest.mark.parametrize("cols,inner", [(300, 64), (5000, 24), (7, 1000)], ids=str)
def test_softmax_inner_dim_special_columns(device, dtype, cols, inner):
    # Columns (softmax over dim 0): 1 all -inf (NaN), 2 with a NaN, 3 with -inf entries and +inf.
    x = make_input((cols, inner), dtype, device)
    special_rows(x.t())
    out = check_softmax(x, 0)
    assert torch.isnan(out[:, 1]).all() and torch.isnan(out[:, 2]).all()
    assert not torch.isnan(out[:, [0] + list(range(4, inner))]).any()


@requires_cuda
@pytest.mark.parametrize("strategy", INNER_STRATEGIES)
@pytest.mark.parametrize("shape,dim", INNER_CASES, ids=str)
def test_softmax_inner_dims_every_cuda_strategy(monkeypatch, strategy, dtype, shape, dim):
    force_inner_strategy(monkeypatch, strategy)
    x = make_input(shape, dtype, "cuda")
    first = check_softmax(x, dim)
    assert torch.equal(reduce_ops.softmax(x, dim), first)  # fixed fold order
    if dtype in (torch.bfloat16, torch.float16):
        check_softmax(x, dim, dtype=torch.float32)  # widened outputs
    check_softmax((1e4 + make_input(shape, torch.float32, "cuda")).to(dtype), dim)  # max subtraction


@requires_cuda
@pytest.mark.parametrize("strategy", INNER_STRATEGIES)
@pytest.mark.parametrize("cols,inner", [(300, 64), (5000, 24), (7, 1000)], ids=str)
def test_softmax_inner_dim_special_columns_every_cuda_strategy(monkeypatch, strategy, dtype, cols, inner):
    # As test_softmax_inner_dim_special_columns, forced: the split's folds of -inf and NaN pairs.
    force_inner_strategy(monkeypatch, strategy)
    x = make_input((cols, inner), dtype, "cuda")
    special_rows(x.t())
    out = check_softmax(x, 0)
    assert torch.isnan(out[:, 1]).all() and torch.isnan(out[:, 2]).all()
    assert not torch.isnan(out[:, [0] + list(range(4, inner))]).any()


def test_softmax_inner_dim_unaligned_storage(device, dtype):
    # A contiguous view one element into its storage: no 16-byte packs (the scalar kernel).
    base = make_input((1 + 256 * 64,), dtype, device)
    check_softmax(base[1:].view(256, 64), 0)


def test_softmax_default_dim_is_last(device):
    x = make_input((4, 5, 6), torch.float32, device)
    assert torch.equal(reduce_ops.softmax(x), reduce_ops.softmax(x, -1))
    assert torch.equal(torch.ops.reduce_ops.softmax(x), reduce_ops.softmax(x, 2))


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_layouts(device, dtype, layout, dim):
    x = make_input((5, 7, 129), dtype, device, layout)
    check_softmax(x, dim)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cols", [1025, 70000], ids=lambda c: f"cols{c}")
def test_softmax_layouts_long_rows(device, layout, cols):
    x = make_input((3, 2, cols), torch.bfloat16, device, layout)
    check_softmax(x, -1)


def test_softmax_whole_tensor(device, dtype):
    # softmax(x.flatten(), 0): a single row of every element (2^22 on CUDA, 2^20 on CPU).
    n = (1 << 22) if device == "cuda" else (1 << 20)
    x = make_input((n >> 10, 1 << 10), dtype, device)
    check_softmax(x.flatten(), 0)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(1, 1 << 20), (2, 3_000_017), (64, 70000), (4096, 4096), (1 << 16, 33),
                                   (1 << 20, 3)], ids=str)
def test_softmax_large_cuda(dtype, shape):
    x = make_input(shape, dtype, "cuda")
    check_softmax(x, -1)


# ---- dtype= ----------------------------------------------------------------------------------

SOFTMAX_DTYPE_PAIRS = [
    (torch.bfloat16, torch.float32), (torch.float16, torch.float32), (torch.float32, torch.float64),
    (torch.bfloat16, torch.float64), (torch.float64, torch.float32), (torch.float32, torch.bfloat16),
    (torch.float32, torch.float32),
]


@pytest.mark.parametrize("api", ["python", "torch.ops"])
@pytest.mark.parametrize("cols", [7, 1025, 70000], ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("in_dtype,out_dtype", SOFTMAX_DTYPE_PAIRS,
                         ids=[f"{dtype_id(a)}->{dtype_id(b)}" for a, b in SOFTMAX_DTYPE_PAIRS])
def test_softmax_dtype_argument(device, in_dtype, out_dtype, cols, api):
    x = make_input((3, cols), in_dtype, device)
    out = check_softmax(x, -1, dtype=out_dtype, api=api)
    assert out.dtype == out_dtype


def test_softmax_bfloat16_in_float32_out_is_float32_accurate(device):
    # The float32 result must not have been rounded through bfloat16 on the way.
    x = make_input((4, 1000), torch.bfloat16, device)
    out = reduce_ops.softmax(x, -1, dtype=torch.float32)
    assert_close_to_reference(out, reference_softmax(x, -1), torch.float32, **softmax_tolerance(torch.float32))


@pytest.mark.parametrize("bad_dtype", [torch.int32, torch.int64, torch.bool], ids=dtype_id)
def test_softmax_non_floating_dtype_argument_raises(device, bad_dtype):
    x = make_input((3, 4), torch.float32, device)
    with pytest.raises(RuntimeError) as info:
        reduce_ops.softmax(x, -1, dtype=bad_dtype)
    assert "softmax" in str(info.value) and message_names_dtype(str(info.value), bad_dtype), str(info.value)


@pytest.mark.parametrize("bad_dtype", INT_LIKE_DTYPES, ids=dtype_id)
def test_softmax_unsupported_input_dtype_raises_naming_op_and_dtype(device, bad_dtype):
    x = torch.ones(3, 4, device=device).to(bad_dtype)
    for fn in (reduce_ops.softmax, torch.ops.reduce_ops.softmax):
        with pytest.raises(RuntimeError) as info:
            fn(x, -1)
        message = str(info.value)
        assert "softmax" in message and message_names_dtype(message, bad_dtype), message


# ---- special values --------------------------------------------------------------------------

SPECIAL_COLS = [1, 7, 1025, 5000, 70000, 300007]


@pytest.mark.parametrize("cols", SPECIAL_COLS, ids=lambda c: f"cols{c}")
def test_softmax_all_neg_inf_row_gives_nan(device, dtype, cols):
    x = make_input((3, cols), dtype, device)
    x[1] = float("-inf")
    out = check_softmax(x, -1)
    assert torch.isnan(out[1]).all()
    assert not torch.isnan(out[[0, 2]]).any()


@pytest.mark.parametrize("cols", SPECIAL_COLS[1:], ids=lambda c: f"cols{c}")
def test_softmax_neg_inf_entries_give_zero(device, dtype, cols):
    x = make_input((3, cols), dtype, device)
    x[1, ::2] = float("-inf")
    x[2, :-1] = float("-inf")  # one finite entry left: it gets probability 1
    out = check_softmax(x, -1)
    assert (out[1, ::2] == 0).all()
    assert out[2, -1].item() == 1.0 and (out[2, :-1] == 0).all()


@pytest.mark.parametrize("cols", SPECIAL_COLS, ids=lambda c: f"cols{c}")
def test_softmax_nan_in_row_makes_row_nan(device, dtype, cols):
    x = make_input((3, cols), dtype, device)
    x[1, cols // 2] = float("nan")
    out = check_softmax(x, -1)
    assert torch.isnan(out[1]).all()
    assert not torch.isnan(out[[0, 2]]).any()


@pytest.mark.parametrize("cols", SPECIAL_COLS[1:], ids=lambda c: f"cols{c}")
def test_softmax_pos_inf_in_row_follows_torch(device, dtype, cols):
    # SPEC is silent; torch gives NaN for the whole row (inf - inf).
    x = make_input((3, cols), dtype, device)
    x[1, cols // 3] = float("inf")
    check_softmax(x, -1)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("cols", [7, 1025, 5000, 70000, 300007], ids=lambda c: f"cols{c}")
def test_softmax_large_values_do_not_overflow(device, dtype, cols):
    # exp(1e4) overflows every float type: only max subtraction gets these right.
    x = 1e4 + make_input((2, cols), torch.float32, device)
    x[1] = -x[1]  # large negative values: exp underflows without max subtraction
    x = x.to(dtype)
    out = check_softmax(x, -1)
    assert torch.isfinite(out).all()


def test_softmax_wide_spread_values(device, dtype):
    # scale 1e4: most probabilities underflow to 0, a few are O(1) - still torch's answer.
    x = make_input((4, 1025), torch.float32, device, scale=1e4).to(dtype)
    check_softmax(x, -1)


def test_softmax_rows_sum_to_one(device, dtype):
    x = make_input((64, 1000), dtype, device, scale=3.0)
    out = reduce_ops.softmax(x, -1).double()
    # each output is within an ulp (of its own binade, at most 2 * unit roundoff relative,
    # or one subnormal spacing absolute) of the exact probability, and those sum to 1.
    _, emin = _FLOAT_FORMAT[dtype]
    rel = max(2 * unit_roundoff(dtype), ARITHMETIC_RTOL[accumulate_dtype(dtype)])
    tol = rel + x.shape[-1] * 2.0 ** (emin - _FLOAT_FORMAT[dtype][0])
    assert ((out.sum(-1) - 1).abs() <= tol).all(), (out.sum(-1) - 1).abs().max()
    assert (out >= 0).all() and (out <= 1).all()


# ---- 0-d, empty, bad dims --------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, -1])
def test_softmax_0d(device, dtype, dim):
    x = make_input((), dtype, device)
    out = check_softmax(x, dim)
    assert out.item() == 1.0
    assert out.data_ptr() != x.data_ptr()


@pytest.mark.parametrize("shape,dim", [((3, 0), -1), ((0, 5), -1), ((0, 5), 0), ((0,), 0), ((2, 0, 3), 1),
                                       ((2, 0, 3), 2)], ids=str)
def test_softmax_empty(device, dtype, shape, dim):
    x = make_input(shape, dtype, device)
    out = check_softmax(x, dim)
    assert out.numel() == 0


@pytest.mark.parametrize("shape,dim", [((3, 4), 2), ((3, 4), -3), ((), 1), ((), -2), ((5,), 1)], ids=str)
def test_softmax_dim_out_of_range_raises_index_error(device, shape, dim):
    x = make_input(shape, torch.float32, device)
    with pytest.raises(IndexError):
        reduce_ops.softmax(x, dim)
    with pytest.raises(IndexError):
        torch.ops.reduce_ops.softmax(x, dim)


def test_softmax_does_not_modify_input(device, layout):
    x = make_input((5, 7, 129), torch.float32, device, layout)
    before = x.clone()
    reduce_ops.softmax(x, -1)
    reduce_ops.softmax(x, 0)
    assert torch.equal(x, before)


# ---- > 2^31 (CUDA, slow) ---------------------------------------------------------------------

def _check_long_row_softmax(x, out, chunk=1 << 26):
    """Compare softmax of the 1-D `x` with a float64 reference computed chunk by chunk."""
    n = x.numel()
    row_max = torch.amax(x).double()
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    for s in range(0, n, chunk):
        total += torch.exp(x[s:s + chunk].double() - row_max).sum()
    for s in range(0, n, chunk):
        ref = torch.exp(x[s:s + chunk].double() - row_max) / total
        assert_close_to_reference(out[s:s + chunk], ref, out.dtype, **softmax_tolerance(out.dtype))


@pytest.mark.slow
def test_softmax_row_longer_than_2_31(big_gpu):
    n = (1 << 31) + 17
    x = torch.randn(n, dtype=torch.bfloat16, device=big_gpu)
    x[(1 << 31) + 3] = 12.0  # the row's maximum lies past 2^31
    out = reduce_ops.softmax(x, 0)
    assert out.shape == (n,) and out.dtype == torch.bfloat16
    _check_long_row_softmax(x, out)


@pytest.mark.slow
def test_softmax_whole_tensor_of_2_30_elements(big_gpu):
    # SPEC names it: softmax(x.flatten(), 0) on 2^30 elements.
    x = torch.randn(1 << 15, 1 << 15, dtype=torch.float32, device=big_gpu)
    out = reduce_ops.softmax(x.flatten(), 0)
    _check_long_row_softmax(x.flatten(), out)


@pytest.mark.slow
def test_softmax_more_than_2_31_elements_in_many_rows(big_gpu):
    rows, cols = 4099, (1 << 19) + 1  # 2.15e9 elements
    x = torch.randn(rows, cols, dtype=torch.bfloat16, device=big_gpu)
    out = reduce_ops.softmax(x, -1)
    for r in (0, rows // 2, rows - 2, rows - 1):
        _check_long_row_softmax(x[r], out[r])


# ---- properties ------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_softmax_property(data):
    x = data.draw(strided_tensors())
    dim = data.draw(st.integers(-max(x.dim(), 1), max(x.dim(), 1) - 1))
    dtype = data.draw(st.sampled_from([None, torch.float32]))
    check_softmax(x, dim, dtype)


# ---- every CUDA strategy, forced (REDUCE_OPS_STRATEGY) -----------------------------------------

# The dispatcher's strategies (conftest.ROW_STRATEGIES). A name that cannot run a shape (e.g.
# "block" on an unaligned row) falls back to the automatic choice, so every case is still checked.
# Small rows reach every strategy; 1021 and 4099 are not a multiple of any pack (scalar paths);
# 70000 gives clusters of 4 (bfloat16) and 8 (float32) blocks, 2^18 float32 one of 16.
STRATEGY_SHAPES = [(33, 100), (9, 1000), (5, 4096), (3, 1021), (4, 4099), (3, 70000), (3, 1 << 18)]


def special_rows(x):
    """Row 0 random, row 1 all -inf, row 2 a NaN, row 3 -inf entries and a +inf, if present."""
    cols = x.shape[-1]
    x[1 % x.shape[0]] = float("-inf")
    if x.shape[0] > 2:
        x[2, cols // 2] = float("nan")
    if x.shape[0] > 3:
        x[3, ::3] = float("-inf")
        x[3, cols - 1] = float("inf")
    return x


@requires_cuda
@pytest.mark.parametrize("strategy,shape", MARKED_LOAD_CASES, ids=str)
def test_softmax_rows_loaded_marked_or_plain(monkeypatch, dtype, strategy, shape):
    # Loads marked evict_last in the L2 (conftest.MARKED_LOAD_CASES) or plain: each as torch's,
    # the same bits either way. The block takes 4- and 8-byte rows of 512-1024 16-byte packs at 4
    # packs a thread where unmarked, 2 where marked (softmax_launch.h's launch_block), which sums in
    # another order: both at 2 here (float32 4099), so that only the marks differ.
    packs = shape[1] * dtype.itemsize // 16
    if strategy == "block" and dtype.itemsize >= 4 and 512 <= packs <= 1024:
        monkeypatch.setenv("REDUCE_OPS_BLOCK_PACKS", "2")
    x = special_rows(make_input(shape, dtype, "cuda"))
    force_load_marks(monkeypatch, strategy, "marked")
    marked = check_softmax(x, -1)
    force_load_marks(monkeypatch, strategy, "plain")
    assert_same_bits(check_softmax(x, -1), marked)


@requires_cuda
@pytest.mark.parametrize("strategy", ROW_STRATEGIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", STRATEGY_SHAPES, ids=str)
def test_softmax_every_cuda_strategy(monkeypatch, strategy, dtype, shape):
    force_row_strategy(monkeypatch, strategy)
    check_softmax(make_input(shape, dtype, "cuda"), -1)
    check_softmax(special_rows(make_input(shape, dtype, "cuda")), -1)
    x = 1e4 + make_input(shape, torch.float32, "cuda")  # max subtraction in every strategy
    check_softmax(x.to(dtype), -1)
    # exp(x - max) down to e^-100 (subnormal outputs: exp2f's fix-up) and rows spanning just
    # under 87 (the kernels' plain ex2 path, smallest exp e^-86 still normal)
    u = torch.rand(shape, device="cuda")
    check_softmax((-100.0 * u).to(dtype), -1)
    check_softmax((-86.0 * u).to(dtype), -1)


@requires_cuda
@pytest.mark.parametrize("strategy", ROW_STRATEGIES)
@pytest.mark.parametrize("shape", [(9, 1000), (3, 70000)], ids=str)
def test_softmax_every_cuda_strategy_widening(monkeypatch, strategy, shape):
    # bfloat16 / half in, float32 out: the kernels that widen in registers.
    force_row_strategy(monkeypatch, strategy)
    for in_dtype in (torch.bfloat16, torch.float16):
        x = special_rows(make_input(shape, in_dtype, "cuda"))
        check_softmax(x, -1, dtype=torch.float32)


@requires_cuda
@pytest.mark.parametrize("strategy", ROW_STRATEGIES)
def test_softmax_every_cuda_strategy_strided_rows(monkeypatch, strategy):
    # Rows of a larger tensor (row stride != cols) and many rows (grid-stride loops).
    force_row_strategy(monkeypatch, strategy)
    base = make_input((600, 2056), torch.float32, "cuda")
    check_softmax(base[:, 8:2056], -1)
    check_softmax(make_input((5000, 1024), torch.bfloat16, "cuda"), -1)


@unaligned_row_cases
def test_softmax_unaligned_rows_in_shared_memory(smem_load, dtype, case):
    # conftest.unaligned_rows; special rows, and bfloat16 / half widened to float32 (the output
    # misaligned otherwise than x whatever the layout).
    for x in unaligned_rows(case, dtype):
        check_softmax(x, -1)
        check_softmax(special_rows(x), -1)  # in x itself: a copy would be laid out afresh
        if dtype in (torch.bfloat16, torch.float16):
            check_softmax(x, -1, dtype=torch.float32)


@peeled_row_cases
def test_softmax_peeled_rows(monkeypatch, dtype, strategy, shape):
    # conftest.PEELED_ROW_CASES: unaligned rows in the register kernels, special values in their
    # heads and tails, the max subtracted, exps down to subnormals.
    force_row_strategy(monkeypatch, strategy)
    check_softmax(make_input(shape, dtype, "cuda"), -1)
    check_softmax(peeled_edge_rows(make_input(shape, dtype, "cuda"), 30.0), -1)
    check_softmax((1e4 + make_input(shape, torch.float32, "cuda")).to(dtype), -1)
    check_softmax((-100.0 * torch.rand(shape, device="cuda")).to(dtype), -1)
    # A row whose only values above e^-100 of its max are its edges.
    x = (-100.0 * torch.rand(shape, device="cuda")).to(dtype)
    x[:, 0] = 0.0
    x[:, -1] = -1.0
    check_softmax(x, -1)


@peeled_next_row_cases
def test_softmax_peeled_rows_load_the_next_row_ahead(monkeypatch, ahead, dtype, strategy, shape):
    force_several_rows_per_block(monkeypatch, strategy, ahead)
    monkeypatch.setenv("REDUCE_OPS_BLOCK_PACKS", "2")
    check_softmax(peeled_edge_rows(make_input(shape, dtype, "cuda"), 30.0), -1)


# 16-bit rows of up to 2048 16-byte packs in the block per row (softmax_launch.h's launch_block): 4
# packs a thread where that keeps more warps resident on an SM than 8, else 8. With sm_90's register
# counts (4 packs: 50 a thread, 56 peeled, 36 warps an SM; 8 packs: 63, 32 warps) 4 packs hold
# more at 1728-6144 and 12288 values and on the peeled 4099, as many at 8192 and 16384 (8 packs
# take the ties); rows under 1728 (1664) and past 16384 (32768) stay on 8. Special values in the
# peeled edges; the other pack count (REDUCE_OPS_BLOCK_PACKS) checked too.
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
@pytest.mark.parametrize("cols,packs", [(1664, "8"), (1728, "4"), (2048, "4"), (4096, "4"), (4099, "4"),
                                        (12288, "4"), (8192, "8"), (16384, "8"), (32768, "8")], ids=lambda v: str(v))
def test_softmax_16_bit_block_rows_on_4_or_8_packs(monkeypatch, dtype, cols, packs):
    force_row_strategy(monkeypatch, "block")
    x = peeled_edge_rows(make_input((40, cols), dtype, "cuda"), 30.0)
    if torch.cuda.get_device_capability() == (9, 0):
        names = cuda_kernels_run(lambda: reduce_ops.softmax(x, -1))
        assert [a[5] for a in launches_of(names, "row_norm_regs_kernel")] == [packs], names
    check_softmax(x, -1)
    monkeypatch.setenv("REDUCE_OPS_BLOCK_PACKS", "8" if packs == "4" else "4")
    check_softmax(x, -1)


# 4- and 8-byte rows in the block per row (softmax_launch.h's launch_block): rows of 512-1024
# 16-byte packs (float32 2048-4096 values, peeled ones too; float64 1024-2048) at 4 packs a thread
# where their loads are not marked, else 2 (REDUCE_OPS_ROW_LOAD=marked); float32 rows of 256-511
# packs (1024-2044 values, the peeled 1025) at 4 only past a wave of their 2-pack blocks and 2
# rows an SM more: 2 on a row an SM, 4 on 64 (at most 64 warps of blocks an SM: 16 of 1024 values,
# 8 of 2044). No block loads its next row ahead (kAhead none).
@requires_cuda
@pytest.mark.parametrize("dtype,cols,per_sm,marks,packs", [
    (torch.float32, 2048, 1, "auto", "4"), (torch.float32, 4096, 1, "auto", "4"), (torch.float32, 2049, 1, "auto", "4"),
    (torch.float32, 4095, 1, "auto", "4"), (torch.float32, 4096, 1, "marked", "2"), (torch.float32, 2049, 1, "marked", "2"),
    (torch.float64, 1024, 1, "auto", "4"), (torch.float64, 2048, 1, "auto", "4"), (torch.float64, 1024, 1, "marked", "2"),
    (torch.float32, 1024, 1, "auto", "2"), (torch.float32, 2044, 1, "auto", "2"), (torch.float32, 1024, 64, "auto", "4"),
    (torch.float32, 1024, 64, "marked", "4"), (torch.float32, 2044, 64, "auto", "4"), (torch.float32, 1025, 64, "auto", "4"),
    (torch.float32, 4096, 64, "marked", "2")], ids=str)
def test_softmax_wide_value_block_rows_on_2_or_4_packs(monkeypatch, dtype, cols, per_sm, marks, packs):
    clear_row_knobs(monkeypatch)
    force_row_strategy(monkeypatch, "block")
    if marks == "marked":
        monkeypatch.setenv("REDUCE_OPS_ROW_LOAD", "marked")
    x = peeled_edge_rows(make_input((rows_per_sm(per_sm, False), cols), dtype, "cuda"), 30.0)
    if torch.cuda.get_device_capability() == (9, 0):
        blocks = launches_of(cuda_kernels_run(lambda: reduce_ops.softmax(x, -1)), "row_norm_regs_kernel")
        assert [a[5] for a in blocks] == [packs] and all(a[7].endswith(")0") for a in blocks), blocks
    check_softmax(x, -1)


# The "tile" kernel (REDUCE_OPS_ROW_TILE=on; automatic for rows under two 16-byte packs and 16-bit
# rows of up to 32; conftest.TILE_ROW_SHAPES): lane mappings (REDUCE_OPS_TILE_LANES; 1 and 4 are too
# narrow past 8 and 32 elements and fall back to the automatic one) and tile sizes
# (REDUCE_OPS_TILE_BYTES: one unit of rows, several tiles a block, a partial last one), special
# values anywhere in a row, exps down to subnormals; a tensor one element off a 16-byte boundary
# does not take it.
@requires_cuda
@pytest.mark.parametrize("lanes", ["auto", "1", "4", "32"])
@pytest.mark.parametrize("tile_bytes", ["auto", "16", "3000"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@tile_row_cases
def test_softmax_tile_rows(monkeypatch, lanes, tile_bytes, dtype, shape):
    force_tile(monkeypatch, "REDUCE_OPS_ROW_TILE", dtype, shape, lanes, tile_bytes)
    x = make_input(shape, dtype, "cuda")
    if lanes == "auto" and tile_bytes == "auto":  # once a shape and dtype: the tile kernel ran
        names = cuda_kernels_run(lambda: reduce_ops.softmax(x, -1))
        assert any("row_norm_tile_kernel" in n for n in names), names
    check_softmax(x, -1)
    check_softmax(peeled_edge_rows(make_input(shape, dtype, "cuda"), 30.0), -1)
    check_softmax((-100.0 * torch.rand(shape, device="cuda")).to(dtype), -1)
    off = torch.empty(x.numel() + 1, dtype=dtype, device="cuda")[1:].view(shape).copy_(x)
    check_softmax(off, -1)


# Where the dispatcher takes the tile kernel by itself (no knob): rows under two 16-byte packs
# (float64 rows of 3), 16-bit and float32 rows of up to 32; the peeled kernels keep longer rows.
# ReduceScale shares the dispatcher.
TILE_AUTOMATIC = [
    (torch.float32, 3, True), (torch.float32, 10, True), (torch.float32, 31, True), (torch.float32, 33, False),
    (torch.bfloat16, 10, True), (torch.float16, 31, True), (torch.bfloat16, 33, False), (torch.bfloat16, 150, False),
    (torch.float64, 3, True), (torch.float64, 7, False),
]


@requires_cuda
@pytest.mark.parametrize("dtype,cols,tile", TILE_AUTOMATIC, ids=str)
def test_softmax_tile_rows_automatic(monkeypatch, dtype, cols, tile):
    for var in ("REDUCE_OPS_STRATEGY", "REDUCE_OPS_ROW_TILE", "REDUCE_OPS_TILE_BYTES", "REDUCE_OPS_TILE_LANES"):
        monkeypatch.delenv(var, raising=False)
    x = make_input((301, cols), dtype, "cuda")
    for fn in (lambda: reduce_ops.softmax(x, -1), lambda: reduce_ops.reduce_scale(x)):
        names = cuda_kernels_run(fn)
        assert any("row_norm_tile_kernel" in n for n in names) == tile, names
    check_softmax(x, -1)


# Rows of 2 (conftest.pair_rows): 16-bit rows of contiguous tensors 4 a 16-byte pack, other rows on
# their packs' boundaries a lane a row, the rest elsewhere; REDUCE_OPS_PACKED_ROWS=off takes the
# packed ones a lane a row, and REDUCE_OPS_PAIR_ROWS=off as well takes every one elsewhere. Big, NaN
# and infinite values at the rows' ends (peeled_edge_rows), exps down to subnormals.
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=dtype_id)
@pair_row_cases
def test_softmax_rows_of_two(monkeypatch, dtype, rows, layout):
    clear_row_knobs(monkeypatch)
    x = peeled_edge_rows(pair_rows(rows, dtype, layout), 30.0)
    lane = "lane" if layout != "offset_1" else None
    assert_short_rows_launch(lambda: reduce_ops.softmax(x, -1), "packed" if packed_rows_by_default(x, True) else lane)
    check_softmax(x, -1)
    check_softmax(pair_rows(rows, dtype, layout).copy_(-100.0 * torch.rand(rows, 2, device="cuda")), -1)
    monkeypatch.setenv("REDUCE_OPS_PACKED_ROWS", "off")
    assert_short_rows_launch(lambda: reduce_ops.softmax(x, -1), lane)
    check_softmax(x, -1)
    monkeypatch.setenv("REDUCE_OPS_PAIR_ROWS", "off")
    assert_short_rows_launch(lambda: reduce_ops.softmax(x, -1), None)
    check_softmax(x, -1)


# Rows of 4 or 8 bytes 2-4 a 16-byte pack, forced (conftest.packed_row_cases; 16-bit rows of 2 take it
# by default, test_softmax_rows_of_two): specials at the rows' ends, exps down to subnormals.
@requires_cuda
@packed_row_cases
def test_softmax_packed_rows(monkeypatch, dtype, cols, rows, layout):
    x, launched = packed_rows_input(monkeypatch, dtype, cols, rows, layout, 30.0)
    launched(lambda: reduce_ops.softmax(x, -1))
    check_softmax(x, -1)
    check_softmax(packed_rows(rows, cols, dtype, layout).copy_(-100.0 * torch.rand(rows, cols, device="cuda")), -1)


# 16-bit rows of one or 3-15 whole 8-byte packs (conftest.HALF_PACK_SHAPES) take the warp kernel on 8-byte
# packs automatically, and their neighbours do not; REDUCE_OPS_HALF_PACKS=off takes the tile or the
# peeled warp. Specials at the rows' edges (peeled_edge_rows: big, NaN, -inf rows).
@requires_cuda
@half_pack_layouts
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
@half_pack_cases
def test_softmax_half_packs_rows(monkeypatch, shape, dtype, layout):
    clear_row_knobs(monkeypatch)
    x = peeled_edge_rows(half_pack_rows(shape, dtype, layout), 30.0)
    assert_half_packs_launch(lambda: reduce_ops.softmax(x, -1), x, layout, softmax=True)
    check_softmax(x, -1)
    monkeypatch.setenv("REDUCE_OPS_HALF_PACKS", "off")
    assert "4" not in row_norm_warp_packs(cuda_kernels_run(lambda: reduce_ops.softmax(x, -1)))
    check_softmax(x, -1)


# 16-bit rows of 8-byte packs, 2 a lane group at once (row_norm_rows_kernel, on 2 or 4 lanes a row
# for rows of 3-4 packs) or one at a time (REDUCE_OPS_WARP_ROWS=off): big, NaN and -inf rows
# (peeled_edge_rows), exps that go subnormal (the exp mode of a thread's rows), one row, rows
# strided past their length.
@requires_cuda
@warp_rows_held
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
@warp_rows_cols
def test_softmax_rows_held_at_once(monkeypatch, held, dtype, cols):
    x, kernels = warp_rows_input(monkeypatch, held, cols, dtype, 30.0)
    kernels(lambda: reduce_ops.softmax(x, -1))
    check_softmax(x, -1)
    check_softmax(x[:1], -1)
    check_softmax(like_layout(x).copy_(-100.0 * torch.rand(x.shape, device="cuda")), -1)
    check_softmax(half_pack_rows((700, cols), dtype, "row_stride"), -1)


# Float32 element rows on row_norm_rows_kernel (conftest.element_row_cases): big, NaN, -inf and +inf
# at the rows' ends (the last element is the one a slot past the end repeats, which the sum must
# skip), exps that go subnormal, one row; the looping warp kernel (REDUCE_OPS_ELEMENT_ROWS=off)
# within the same tolerance.
@requires_cuda
@element_row_cases
def test_softmax_element_rows(monkeypatch, cols):
    clear_row_knobs(monkeypatch)
    x = peeled_edge_rows(element_rows(cols), 30.0)
    element_rows_launch(lambda: reduce_ops.softmax(x, -1), cols)
    out = check_softmax(x, -1)
    check_softmax(x[:1], -1)
    check_softmax(element_rows(cols).copy_(-100.0 * torch.rand(x.shape, device="cuda")), -1)
    monkeypatch.setenv("REDUCE_OPS_ELEMENT_ROWS", "off")
    element_rows_launch(lambda: reduce_ops.softmax(x, -1), cols, taken=False)
    assert_close_to_reference(reduce_ops.softmax(x, -1), out, torch.float32, **softmax_tolerance(torch.float32))


# 16-byte-pack rows on the warp kernel's lanes a row and packs a lane (conftest.WARP_PACK_CASES):
# big, NaN and -inf at the rows' ends (a peeled row's edges), one row, rows strided past their
# length.
@requires_cuda
@warp_pack_modes
@warp_pack_cases
def test_softmax_warp_rows_lanes_a_row_and_packs_a_lane(monkeypatch, mode, dtype, cols):
    x, kernels = warp_packs_input(monkeypatch, mode, dtype, cols, 30.0)
    kernels(lambda: reduce_ops.softmax(x, -1), softmax=True)
    check_softmax(x, -1)
    check_softmax(x[:1], -1)
    check_softmax(make_input((300, cols + 8), dtype, "cuda")[:, :cols], -1)


@requires_cuda
@pytest.mark.parametrize("peel", ["auto", "off"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_softmax_unaligned_rows_peeled_or_not(monkeypatch, peel, dtype):
    # The automatic choice on rows of every length class, peeled or (REDUCE_OPS_ROW_PEEL=off) by
    # the element kernels as before.
    monkeypatch.setenv("REDUCE_OPS_ROW_PEEL", peel)
    for shape in [(48, 17), (48, 197), (48, 4099), (48, 50257), (4, 262147)]:
        check_softmax(peeled_edge_rows(make_input(shape, dtype, "cuda"), 30.0), -1)


# Block rows of at most 4.5 KB on waves of looping blocks (conftest.small_block_cases), specials among
# them.
@requires_cuda
@small_block_cases
def test_softmax_small_block_rows_loop(monkeypatch, waves, cols):
    x, launched = small_block_rows_input(monkeypatch, waves, cols, special_rows)
    launched(lambda: reduce_ops.softmax(x, -1))
    check_softmax(x, -1)


# "cluster_row" on more blocks than the row needs (REDUCE_OPS_CLUSTER): each block's share over
# fewer warps, and the last blocks of each cluster with no values at all (5 x 70000: 12 of 16
# blocks hold values, 7 of 8 for float32), whose partials must leave the row's (max, sum) as is.
@requires_cuda
@pytest.mark.parametrize("blocks", ["8", "16"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_softmax_cluster_row_on_more_blocks_than_the_row_needs(monkeypatch, blocks, dtype):
    force_row_strategy(monkeypatch, "cluster_row")
    monkeypatch.setenv("REDUCE_OPS_CLUSTER", blocks)
    shape = (5, 70000)
    check_softmax(special_rows(make_input(shape, dtype, "cuda")), -1)
    check_softmax((1e4 + make_input(shape, torch.float32, "cuda")).to(dtype), -1)
    check_softmax((-100.0 * torch.rand(shape, device="cuda")).to(dtype), -1)


# Softmax's cluster_row blocks a row (softmax_launch.h's softmax_cluster_row_blocks): the count
# that keeps the most rows on an SM, ties to more blocks of at least 3 warps, not the fewest that
# hold the row (262144: 16 either way). On sm_90 (80 registers a thread: 24 warps an SM) the
# launch's grid and block; the results on that count and on the fewest (REDUCE_OPS_CLUSTER).
# cols, blocks, threads, fewest blocks
SOFTMAX_CLUSTER_ROW_BLOCKS = [(40968, 7, 96, 3), (65536, 8, 128, 4), (100000, 13, 128, 7), (151936, 13, 192, 10),
                              (262144, 16, 256, 16)]


@requires_cuda
@pytest.mark.parametrize("cols,blocks,threads,fewest", SOFTMAX_CLUSTER_ROW_BLOCKS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=dtype_id)
def test_softmax_cluster_row_blocks_a_row(monkeypatch, dtype, cols, blocks, threads, fewest):
    clear_row_knobs(monkeypatch)
    x = special_rows(make_input((4, cols), dtype, "cuda"))
    if torch.cuda.get_device_capability() == (9, 0):
        dims = cuda_launch_dims(lambda: reduce_ops.softmax(x, -1), "row_norm_cluster_row_kernel")
        assert dims == [((4 * blocks, 1, 1), (threads, 1, 1))], dims
    check_softmax(x, -1)
    monkeypatch.setenv("REDUCE_OPS_CLUSTER", str(fewest))
    check_softmax(x, -1)


# The warp kernel's 16-bit rows of 3-4 packs over 32 lanes held as raw words (exp taken again at
# the write) where launch_warp says, else as exps, and as exps everywhere with
# REDUCE_OPS_WARP_HELD=float: each on special values, rows whose exps reach subnormals (-100 x
# rand: the write's exps off the ex2-only path) and large offsets; rows starting off 16 bytes too.
# "marked": the loads marked evict_last (REDUCE_OPS_ROW_LOAD=marked, as calls of 3 L2s or more
# are), which holds every such row as raw words; "float+marked": exps, their loads marked too. On
# sm_90 the kernel launched, and whether its loads were marked.
@requires_cuda
@pytest.mark.parametrize("held", ["auto", "float", "marked", "float+marked"])
@pytest.mark.parametrize("cols,raw,_,raw_marked", WARP_HELD_CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
def test_softmax_warp_rows_held_as_raw_words(monkeypatch, dtype, cols, raw, _, raw_marked, held):
    clear_row_knobs(monkeypatch)
    monkeypatch.delenv("REDUCE_OPS_WARP_HELD", raising=False)
    if "float" in held:
        monkeypatch.setenv("REDUCE_OPS_WARP_HELD", "float")
    if "marked" in held:
        monkeypatch.setenv("REDUCE_OPS_ROW_LOAD", "marked")
    shape = (300, cols)
    x = special_rows(make_input(shape, dtype, "cuda"))
    if torch.cuda.get_device_capability() == (9, 0):
        expected = {"auto": raw, "marked": raw_marked}.get(held, False)
        run = lambda: reduce_ops.softmax(x, -1)  # noqa: E731
        assert held_raw_launches(run, "row_norm_warp_kernel") == [expected]
        marked = [a[-2] == "true" for a in launches_of(cuda_kernels_run(run), "row_norm_warp_kernel")]
        assert marked == ["marked" in held], marked
    check_softmax(x, -1)
    check_softmax((-100.0 * torch.rand(shape, device="cuda")).to(dtype), -1)
    check_softmax((1e4 + make_input(shape, torch.float32, "cuda")).to(dtype), -1)
    check_softmax(make_input((300, cols + 1), dtype, "cuda")[:, 1:], -1)


# By default the warp kernel's 16-bit softmax rows load marked where the call moves at least 3 L2s
# (read and write counted; row_loads_marked), plainly just under it, and rows of 3-4 packs a lane
# (1024 values) are then held as raw words, other rows (128 values: 2 packs on 8 lanes, the next
# row ahead) as floats. On sm_90 the kernel's template arguments; the results on every GPU.
@requires_cuda
@pytest.mark.parametrize("cols,raw", [(1024, True), (128, False)])
@pytest.mark.parametrize("over", [True, False], ids=["3-L2s", "under"])
def test_softmax_16_bit_warp_rows_marked_by_size(monkeypatch, cols, raw, over):
    clear_row_knobs(monkeypatch)
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    rows = 3 * l2 // (cols * 4) + (1 if over else -1)
    x = make_input((rows, cols), torch.bfloat16, "cuda")
    if torch.cuda.get_device_capability() == (9, 0):
        launches = launches_of(cuda_kernels_run(lambda: reduce_ops.softmax(x, -1)), "row_norm_warp_kernel")
        assert [(a[-2], a[-1]) for a in launches] == [("true" if over else "false", "true" if raw and over else "false")]
    check_softmax(x, -1)


# cluster_row's 16-bit softmax rows held as raw words (exp taken again at the write) or as exps
# (softmax_launch.h's cluster_row_choice; REDUCE_OPS_CLUSTER_ROW_HELD forces one): each on special
# values, on rows whose exps reach subnormals (-100 x rand: the write's exps off the ex2-only
# path) and large offsets, aligned rows whole (262144: every block's share full) and not (70000),
# and peeled rows (100003). On sm_90 the kernel launched, by its last template argument.
@requires_cuda
@pytest.mark.parametrize("shape", [(5, 70000), (3, 100003), (2, 262144)], ids=str)
@pytest.mark.parametrize("held", ["raw", "float"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
def test_softmax_cluster_row_16_bit_held_values(monkeypatch, dtype, held, shape):
    force_row_strategy(monkeypatch, "cluster_row")
    monkeypatch.setenv("REDUCE_OPS_CLUSTER_ROW_HELD", held)
    x = special_rows(make_input(shape, dtype, "cuda"))
    if torch.cuda.get_device_capability() == (9, 0):
        assert held_raw_launches(lambda: reduce_ops.softmax(x, -1), "row_norm_cluster_row_kernel") == [held == "raw"]
    check_softmax(x, -1)
    check_softmax((-100.0 * torch.rand(shape, device="cuda")).to(dtype), -1)
    check_softmax((1e4 + make_input(shape, torch.float32, "cuda")).to(dtype), -1)


# By default the raw words where the rows take more than one wave of the float kernel's clusters:
# 48 rows of 151936 (13 blocks of 192 threads a row: 624 blocks, against 4 an SM x 132 SMs), not 4
# (52 blocks). H200: 32 rows (416 blocks) stay on floats, 12.4 against 13.1 us on raw words.
@requires_cuda
@pytest.mark.parametrize("rows,raw", [(4, False), (48, True)])
def test_softmax_cluster_row_holds_raw_words_past_one_wave(monkeypatch, rows, raw):
    clear_row_knobs(monkeypatch)
    x = special_rows(make_input((rows, 151936), torch.bfloat16, "cuda"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if torch.cuda.get_device_capability() == (9, 0) and sms <= 132:
        assert held_raw_launches(lambda: reduce_ops.softmax(x, -1), "row_norm_cluster_row_kernel") == [raw]
    check_softmax(x, -1)


# Aligned 16-bit rows of up to 43008 values keep floats on cluster_row however many their rows
# (softmax_launch.h's kClusterRowFloatCols); past that, rows past one wave hold raw words. 512
# rows: past one wave of any of these row lengths' clusters.
@requires_cuda
@pytest.mark.parametrize("cols,raw", [(40968, False), (43008, False), (43016, True), (44032, True)])
def test_softmax_cluster_row_aligned_rows_hold_floats_up_to_43008(monkeypatch, cols, raw):
    clear_row_knobs(monkeypatch)
    x = special_rows(make_input((512, cols), torch.bfloat16, "cuda"))
    if torch.cuda.get_device_capability() == (9, 0):
        assert held_raw_launches(lambda: reduce_ops.softmax(x, -1), "row_norm_cluster_row_kernel") == [raw]
    check_softmax(x, -1)


# Aligned softmax rows that fit a block take cluster_row where they are few (softmax_launch.h's
# cluster_row_before_block), else a block: 16-bit rows from 24576 values under 8 rows an SM, or
# under 16 where cluster_row's shares are whole (32768: 4 blocks of 128 threads x 8 packs; 34816's
# are not); float32 rows from 12288 under 8 where the shares are whole (16384: 2 of 128 x 16;
# 20000's are not); shorter rows a block. On sm_90 the kernel the call launches.
@requires_cuda
@pytest.mark.parametrize("dtype,cols,per_sm,few,kernel", [
    (torch.bfloat16, 32768, 16, True, "row_norm_cluster_row_kernel"),
    (torch.bfloat16, 32768, 16, False, "row_norm_regs_kernel"),
    (torch.bfloat16, 34816, 16, True, "row_norm_regs_kernel"),
    (torch.bfloat16, 34816, 8, True, "row_norm_cluster_row_kernel"),
    (torch.bfloat16, 20480, 16, True, "row_norm_regs_kernel"),
    (torch.float32, 16384, 8, True, "row_norm_cluster_row_kernel"),
    (torch.float32, 16384, 8, False, "row_norm_regs_kernel"),
    (torch.float32, 20000, 8, True, "row_norm_regs_kernel"),
    (torch.float32, 8192, 8, True, "row_norm_regs_kernel")], ids=str)
def test_softmax_few_rows_take_cluster_row(monkeypatch, dtype, cols, per_sm, few, kernel):
    clear_row_knobs(monkeypatch)
    x = special_rows(make_input((rows_per_sm(per_sm, few), cols), dtype, "cuda"))
    assert_launches_on_sm90(lambda: reduce_ops.softmax(x, -1), kernel)
    check_softmax(x, -1)


# Peeled 16-bit softmax rows past 40960 values: cluster_row where they are fewer than 8 an SM or
# the block would take 1024 threads (8161-8192 packs: 65537), else a block (softmax_launch.h's
# cluster_row_before_block). On sm_90 the kernel the call launches.
@requires_cuda
@pytest.mark.parametrize("cols,few,kernel", [(50257, True, "row_norm_cluster_row_kernel"),
                                             (50257, False, "row_norm_regs_kernel"),
                                             (65537, False, "row_norm_cluster_row_kernel")])
def test_softmax_peeled_16_bit_rows_past_40960(monkeypatch, cols, few, kernel):
    clear_row_knobs(monkeypatch)
    x = peeled_edge_rows(special_rows(make_input((rows_per_sm(8, few), cols), torch.float16, "cuda")), 30.0)
    assert_launches_on_sm90(lambda: reduce_ops.softmax(x, -1), kernel)
    check_softmax(x, -1)


# Float32 softmax rows that are not whole 16-byte packs, past a block (32768) and within shared
# memory: cluster_row on softmax's count where it holds at least as many rows on an SM as "smem"
# does (one: 36001 on 6 blocks of 8 an SM, 45001 on 8 of 8), else "smem" (50257: 9 blocks of 8 an
# SM); softmax_launch.h's cluster_row_holds_as_many_rows_as_smem. 80 rows: enough for the
# block-per-row strategies (too_few_blocks). On sm_90 the kernel the call launches.
@requires_cuda
@pytest.mark.parametrize("cols,kernel", [(36001, "row_norm_cluster_row_kernel"), (45001, "row_norm_cluster_row_kernel"),
                                         (50257, "row_norm_smem_peeled_kernel")])
def test_softmax_float32_peeled_rows_past_a_block(monkeypatch, cols, kernel):
    clear_row_knobs(monkeypatch)
    x = peeled_edge_rows(special_rows(make_input((80, cols), torch.float32, "cuda")), 30.0)
    if torch.cuda.get_device_capability() == (9, 0):
        names = cuda_kernels_run(lambda: reduce_ops.softmax(x, -1))
        assert any(kernel in n for n in names), names
    check_softmax(x, -1)
    check_softmax(x[:, 1:], -1)  # rows starting off 16 bytes


# The register kernels load each block's (or cluster's) next row while they reduce and write the
# current one (conftest.next_row_cases); the last row loads nothing ahead.
@next_row_cases
def test_softmax_register_kernels_load_the_next_row_ahead(monkeypatch, ahead, dtype, strategy, shape):
    force_several_rows_per_block(monkeypatch, strategy, ahead)
    check_softmax(special_rows(make_input(shape, dtype, "cuda")), -1)
    if dtype == torch.bfloat16:
        check_softmax(make_input(shape, dtype, "cuda"), -1, dtype=torch.float32)


@requires_cuda
@pytest.mark.parametrize("strategy,dtype,shape", SMEM_48_KB_CASES, ids=str)
def test_softmax_48_kb_of_dynamic_shared_memory(monkeypatch, strategy, dtype, shape):
    force_row_strategy(monkeypatch, strategy)
    check_softmax(special_rows(make_input(shape, dtype, "cuda")), -1)
