"""reduce_ops.reduce_scale / reduce_scale_: row-wise absmax scaling over the last dim.

scale = max(amax(|x|, -1, keepdim=True), eps) in float32 (float64 for float64 inputs),
returned in that type; out = x / scale cast to x.dtype, except that a row whose scale is 0
gives 0; a NaN in a row makes that row's scale and out NaN. reduce_scale_ writes out into x
and returns scale.
"""
import pytest
import torch

import reduce_ops
from conftest import (
    DTYPES, INT_LIKE_DTYPES, LAYOUTS, accumulate_dtype, assert_close_to_reference,
    assert_exactly_equal, assert_like_torch_result, assert_same_bits, dtype_id, expected_exception, make_input,
    message_names_dtype, reduce_scale_tolerance, reference_reduce_scale,
)

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

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
    off_16_bytes,
    peeled_edge_rows,
    peeled_next_row_cases,
    peeled_row_cases,
    requires_cuda,
    row_count,
    rows_per_sm,
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


def call_reduce_scale(x, eps=0.0, api="python"):
    if api == "python":
        return reduce_ops.reduce_scale(x, eps=eps)
    return torch.ops.reduce_ops.reduce_scale(x, eps=eps)


def check_reduce_scale(x, eps=0.0, api="python"):
    out, scale = call_reduce_scale(x, eps, api)
    ref_out, ref_scale = reference_reduce_scale(x, eps)
    assert_like_torch_result(out, torch.empty_like(x, memory_format=torch.contiguous_format), x.device)
    assert_like_torch_result(scale, ref_scale, x.device)
    assert scale.dtype == accumulate_dtype(x.dtype)
    assert_exactly_equal(scale, ref_scale)  # |x| and max are exact, so is the scale
    assert_close_to_reference(out, ref_out, x.dtype, **reduce_scale_tolerance(x.dtype))
    return out, scale


def check_reduce_scale_(x, eps=0.0, api="python"):
    """In place on x; returns the same scale as reduce_scale and leaves out in x."""
    expected_out, expected_scale = reduce_ops.reduce_scale(x, eps=eps)
    ref_out, ref_scale = reference_reduce_scale(x, eps)
    ptr, stride, offset = x.data_ptr(), x.stride(), x.storage_offset()
    fn = reduce_ops.reduce_scale_ if api == "python" else torch.ops.reduce_ops.reduce_scale_
    scale = fn(x, eps=eps)
    assert (x.data_ptr(), x.stride(), x.storage_offset()) == (ptr, stride, offset)
    assert_like_torch_result(scale, ref_scale, x.device)
    assert_exactly_equal(scale, expected_scale)
    assert_exactly_equal(x, expected_out)  # the very same out as the out-of-place op
    assert_close_to_reference(x, ref_out, x.dtype, **reduce_scale_tolerance(x.dtype))
    return scale


def check_same_bits_without(monkeypatch, knob, x, inplace):
    """ReduceScale of x (plain and with eps) and in place on `inplace` (a copy of x) checked, then
    the same bits with `knob` off: one max, one scaling per value whichever kernel runs."""
    out, scale = check_reduce_scale(x)
    check_reduce_scale(x, eps=1e-3)
    inplace_scale = check_reduce_scale_(inplace)
    monkeypatch.setenv(knob, "off")
    other_out, other_scale = reduce_ops.reduce_scale(x)
    assert_exactly_equal(out, other_out)
    assert_exactly_equal(scale, other_scale)
    assert_exactly_equal(inplace, other_out)
    assert_exactly_equal(inplace_scale, other_scale)


# ---- values ----------------------------------------------------------------------------------

@pytest.mark.parametrize("rows", ["few", "many"])
@pytest.mark.parametrize("cols", ROW_LENGTHS, ids=lambda c: f"cols{c}")
def test_reduce_scale_row_lengths(device, dtype, cols, rows):
    n_rows = row_count(rows, cols, device)
    x = make_input((n_rows, cols), dtype, device)
    check_reduce_scale(x)


@pytest.mark.parametrize("cols", [1, 7, 129, 1025, 5000, 70000, 300007], ids=lambda c: f"cols{c}")
def test_reduce_scale__row_lengths(device, dtype, cols):
    x = make_input((3, cols), dtype, device)
    check_reduce_scale_(x)


@pytest.mark.parametrize("api", ["python", "torch.ops"])
@pytest.mark.parametrize("shape", [(1,), (7,), (1021,), (1, 1), (5, 7, 13), (2, 3, 5, 7), (1 << 20,),
                                   (1021, 1031)], ids=str)
def test_reduce_scale_shapes(device, dtype, shape, api):
    x = make_input(shape, dtype, device)
    out, scale = check_reduce_scale(x, api=api)
    assert scale.shape == x.shape[:-1] + (1,)
    check_reduce_scale_(x.clone(), api=api)


def test_reduce_scale_layouts(device, dtype, layout):
    x = make_input((5, 7, 129), dtype, device, layout)
    check_reduce_scale(x)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cols", [1025, 70000], ids=lambda c: f"cols{c}")
def test_reduce_scale_layouts_long_rows(device, layout, cols):
    x = make_input((3, 2, cols), torch.bfloat16, device, layout)
    check_reduce_scale(x)


def test_reduce_scale_scale_shape_and_dtype(device, dtype):
    x = make_input((2, 3, 5), dtype, device)
    out, scale = reduce_ops.reduce_scale(x)
    assert out.shape == x.shape and out.dtype == dtype
    assert scale.shape == (2, 3, 1)
    assert scale.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert out.device == x.device and scale.device == x.device


def test_reduce_scale_does_not_modify_input(device, layout):
    x = make_input((5, 7, 129), torch.float32, device, layout)
    before = x.clone()
    reduce_ops.reduce_scale(x, eps=0.5)
    assert torch.equal(x, before)


def test_reduce_scale_output_is_within_unit_range(device, dtype):
    x = make_input((64, 1000), dtype, device, scale=50.0)
    out, scale = reduce_ops.reduce_scale(x)
    assert (out.abs() <= 1).all()
    assert (scale > 0).all()


@pytest.mark.parametrize("scale", [65504.0, 3.0, 2.0 ** -10], ids=["max", "3", "2^-10"])
def test_reduce_scale_every_float16_value_rounds_like_torch_cpu(scale):
    # Every finite float16 x with |x| <= scale, in rows led by the scale itself: out = x / scale
    # rounded to float16 bit for bit as torch's (x.float() / scale).half(). It covers the CPU
    # kernels' float16 conversions (one instruction a vector on AVX2 and AVX-512, integer code
    # on the baseline and in the tails): rounding to nearest even, subnormals, signed zeros.
    values = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.float16)
    values = values[values.isfinite() & (values.abs() <= scale)]
    cols = 1000
    rows = -(-values.numel() // (cols - 1))
    body = torch.zeros(rows * (cols - 1), dtype=torch.float16)
    body[: values.numel()] = values
    x = torch.cat([torch.full((rows, 1), scale, dtype=torch.float16), body.view(rows, cols - 1)], 1)
    out, s = reduce_ops.reduce_scale(x)
    assert torch.equal(s, torch.full_like(s, scale))
    assert_same_bits(out, (x.float() / scale).half())


# ---- special cases ---------------------------------------------------------------------------

@pytest.mark.parametrize("cols", [1, 7, 1025, 70000], ids=lambda c: f"cols{c}")
def test_reduce_scale_zero_row_gives_zero_not_nan(device, dtype, cols):
    x = make_input((4, cols), dtype, device)
    x[1] = 0
    x[2, ::2] = -0.0
    x[2, 1::2] = 0.0
    x[3] = -0.0
    out, scale = check_reduce_scale(x)
    assert scale[1].item() == 0 and scale[2].item() == 0
    # +0, as torch's x.abs().amax(): |-0| is +0 (a compare-and-negate absolute value keeps -0)
    assert not torch.signbit(scale[1:]).any()
    assert (out[1:] == 0).all() and not torch.isnan(out).any()
    y = x.clone()
    scale_ = check_reduce_scale_(y)
    assert (y[1:] == 0).all() and scale_[1].item() == 0


@pytest.mark.parametrize("eps", [1e-3, 1.0])
def test_reduce_scale_eps_applies_to_tiny_row(device, dtype, eps):
    x = make_input((3, 1025), dtype, device)
    x[1] = (make_input((1025,), torch.float32, device).clamp(-1, 1) * 1e-4).to(dtype)  # amax |x| < eps
    out, scale = check_reduce_scale(x, eps=eps)
    acc = accumulate_dtype(dtype)
    assert scale[1].item() == torch.tensor(eps, dtype=acc).item()  # the row's scale is eps
    assert scale[0].item() == x[0].abs().max().to(acc).item() or x[0].abs().max() < eps
    check_reduce_scale_(x.clone(), eps=eps)


def test_reduce_scale_eps_on_zero_row_gives_zero(device, dtype):
    x = make_input((2, 33), dtype, device)
    x[0] = 0
    out, scale = check_reduce_scale(x, eps=1e-6)
    assert scale[0].item() == torch.tensor(1e-6, dtype=accumulate_dtype(dtype)).item()
    assert (out[0] == 0).all()


def test_reduce_scale_eps_below_amax_has_no_effect(device, dtype):
    x = make_input((4, 129), dtype, device)
    out0, scale0 = reduce_ops.reduce_scale(x)
    out1, scale1 = reduce_ops.reduce_scale(x, eps=1e-6)
    assert_exactly_equal(scale1, scale0)
    assert_exactly_equal(out1, out0)


@pytest.mark.parametrize("eps", [0.0, 1e-3])
@pytest.mark.parametrize("cols", [1, 7, 1025, 70000, 300007], ids=lambda c: f"cols{c}")
def test_reduce_scale_nan_in_row_makes_row_nan(device, dtype, cols, eps):
    x = make_input((3, cols), dtype, device)
    x[1, cols // 2] = float("nan")
    out, scale = check_reduce_scale(x, eps=eps)
    assert torch.isnan(scale[1]).all() and torch.isnan(out[1]).all()
    assert not torch.isnan(scale[[0, 2]]).any() and not torch.isnan(out[[0, 2]]).any()
    y = x.clone()
    check_reduce_scale_(y, eps=eps)
    assert torch.isnan(y[1]).all()


def test_reduce_scale_nan_in_zero_row_is_nan(device, dtype):
    # NaN wins over the zero-row rule: max(|x|) is NaN, not 0.
    x = torch.zeros(2, 64, dtype=dtype, device=device)
    x[0, 5] = float("nan")
    out, scale = check_reduce_scale(x)
    assert torch.isnan(scale[0]) and torch.isnan(out[0]).all() and (out[1] == 0).all()


def test_reduce_scale_inf_in_row_follows_formula(device, dtype):
    # SPEC does not name it; its formula gives scale = inf, out = x / inf = 0, and inf / inf = NaN.
    x = make_input((2, 129), dtype, device)
    x[0, 7] = float("-inf")
    out, scale = check_reduce_scale(x)
    assert scale[0].item() == float("inf") and torch.isnan(out[0, 7])


def test_reduce_scale_all_negative_row(device, dtype):
    x = -(make_input((2, 129), dtype, device).abs())
    out, scale = check_reduce_scale(x)
    assert (scale > 0).all() and (out < 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_id)
def test_reduce_scale_extreme_magnitudes(device, dtype):
    fi = torch.finfo(dtype)
    x = make_input((3, 257), dtype, device)
    x[0] = (fi.max * torch.linspace(-1, 1, 257, device=device)).to(dtype)  # scale = max finite
    x[1] = (x[1].float().clamp(-1, 1) * fi.tiny).to(dtype)  # tiny and subnormal values
    out, scale = check_reduce_scale(x)


# ---- 0-d and empty ---------------------------------------------------------------------------

def test_reduce_scale_0d_follows_torch(device, dtype):
    # x.shape[:-1] + (1,) is undefined for 0-d x; x.abs().amax(-1, keepdim=True) is 0-d.
    x = make_input((), dtype, device)
    expected_scale_shape = x.abs().amax(-1, keepdim=True).shape
    out, scale = check_reduce_scale(x)
    assert scale.shape == expected_scale_shape == ()
    assert out.shape == ()
    y = x.clone()
    scale_ = check_reduce_scale_(y)
    assert scale_.shape == ()


@pytest.mark.parametrize("shape", [(0, 5), (0, 7), (2, 0, 3)], ids=str)
def test_reduce_scale_empty_rows_dimension(device, dtype, shape):
    x = make_input(shape, dtype, device)
    out, scale = check_reduce_scale(x)
    assert out.shape == shape and scale.shape == shape[:-1] + (1,)
    check_reduce_scale_(x.clone())


@pytest.mark.parametrize("shape", [(3, 0), (0,), (2, 3, 0)], ids=str)
def test_reduce_scale_zero_length_rows_raise_like_amax(device, dtype, shape):
    # scale is amax(|x|, -1) and torch's amax over a zero-size dim raises (SPEC: "amax over an
    # empty dim raises"); reduce_scale does the same.
    x = make_input(shape, dtype, device)
    exc = expected_exception(lambda: x.abs().amax(-1, keepdim=True))
    with pytest.raises(exc):
        reduce_ops.reduce_scale(x)
    with pytest.raises(exc):
        reduce_ops.reduce_scale_(x)


# ---- in place --------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["transposed", "sliced", "offset", "permuted"])
def test_reduce_scale__on_noncontiguous_view_writes_only_the_view(device, dtype, layout):
    x = make_input((5, 7, 129), dtype, device, layout)
    assert x._base is not None or x.storage_offset() > 0 or not x.is_contiguous()
    base = x._base if x._base is not None else x
    base_before = base.clone()
    expected_out, expected_scale = reduce_ops.reduce_scale(x)
    # which storage elements the view covers
    marker = torch.zeros_like(base, dtype=torch.float32)
    marker_view = marker.as_strided(x.shape, x.stride(), x.storage_offset() - base.storage_offset())
    marker_view.fill_(1)
    scale = reduce_ops.reduce_scale_(x)
    assert_exactly_equal(scale, expected_scale)
    assert_exactly_equal(x, expected_out)
    outside = marker == 0
    assert torch.equal(base[outside], base_before[outside]), "reduce_scale_ wrote outside its view"
    inside_view = base.as_strided(x.shape, x.stride(), x.storage_offset() - base.storage_offset())
    assert_exactly_equal(inside_view, expected_out)


def test_reduce_scale__view_of_rows_in_a_larger_tensor(device, dtype):
    base = make_input((8, 300), dtype, device)
    before = base.clone()
    view = base[2:6, 10:139]  # an interior block: offset, row stride 300, length 129
    expected_out, expected_scale = reduce_ops.reduce_scale(view)
    scale = reduce_ops.reduce_scale_(view)
    assert_exactly_equal(scale, expected_scale)
    assert_exactly_equal(base[2:6, 10:139], expected_out)
    mask = torch.ones_like(base, dtype=torch.bool)
    mask[2:6, 10:139] = False
    assert torch.equal(base[mask], before[mask])


def test_reduce_scale__returns_scale_not_x(device, dtype):
    x = make_input((4, 33), dtype, device)
    scale = reduce_ops.reduce_scale_(x)
    assert scale.data_ptr() != x.data_ptr() and scale.shape == (4, 1)
    assert scale.dtype == accumulate_dtype(dtype)


def test_reduce_scale__expanded_input_raises_like_torch_inplace_ops(device):
    # Rows that share memory cannot each be written: torch's in-place ops raise RuntimeError
    # ("more than one element of the written-to tensor refers to a single memory location").
    x = make_input((1, 129), torch.float32, device).expand(4, 129)
    exc = expected_exception(lambda: x.div_(2))
    before = x.clone()
    with pytest.raises(exc):
        reduce_ops.reduce_scale_(x)
    assert torch.equal(x, before)


# ---- dtypes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["reduce_scale", "reduce_scale_"])
@pytest.mark.parametrize("bad_dtype", INT_LIKE_DTYPES, ids=dtype_id)
def test_reduce_scale_unsupported_dtype_raises_naming_op_and_dtype(device, op, bad_dtype):
    x = torch.ones(3, 4, device=device).to(bad_dtype)
    for fn in (getattr(reduce_ops, op), getattr(torch.ops.reduce_ops, op)):
        with pytest.raises(RuntimeError) as info:
            fn(x)
        message = str(info.value)
        assert "reduce_scale" in message and message_names_dtype(message, bad_dtype), message


# ---- > 2^31 (CUDA, slow) ---------------------------------------------------------------------

@pytest.mark.slow
def test_reduce_scale_row_longer_than_2_31(big_gpu):
    n = (1 << 31) + 17
    x = torch.empty(1, n, dtype=torch.bfloat16, device=big_gpu).uniform_(-1, 1)
    x[0, (1 << 31) + 3] = -3.0  # the row's absmax lies past 2^31
    out, scale = reduce_ops.reduce_scale(x)
    assert scale.shape == (1, 1) and scale.item() == 3.0
    chunk = 1 << 26
    for s in range(0, n, chunk):
        ref = x[0, s:s + chunk].double() / 3.0
        assert_close_to_reference(out[0, s:s + chunk], ref, torch.bfloat16, **reduce_scale_tolerance(torch.bfloat16))
    del out
    x[0, n - 1] = 4.0  # now at the very end, in place this time
    scale_ = reduce_ops.reduce_scale_(x)
    assert scale_.item() == 4.0
    assert x[0, n - 1].item() == 1.0 and x[0, (1 << 31) + 3].item() == -0.75


@pytest.mark.slow
def test_reduce_scale_more_than_2_31_elements_in_many_rows(big_gpu):
    rows, cols = 4099, (1 << 19) + 1
    x = torch.empty(rows, cols, dtype=torch.bfloat16, device=big_gpu).uniform_(-1, 1)
    x[rows - 1, cols - 1] = 5.0
    out, scale = reduce_ops.reduce_scale(x)
    ref_scale = x.abs().amax(-1, keepdim=True).float()
    assert_exactly_equal(scale, ref_scale)
    for r in (0, rows // 2, rows - 1):
        assert_close_to_reference(out[r], x[r].double() / ref_scale[r].double(), torch.bfloat16,
                                  **reduce_scale_tolerance(torch.bfloat16))


# ---- properties ------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_reduce_scale_property(data):
    x = data.draw(strided_tensors())
    eps = data.draw(st.sampled_from([0.0, 1e-6, 0.5]))
    if x.dim() > 0 and x.shape[-1] == 0:
        exc = expected_exception(lambda: x.abs().amax(-1, keepdim=True))
        with pytest.raises(exc):
            reduce_ops.reduce_scale(x, eps=eps)
        return
    if x.numel() > 0 and data.draw(st.booleans()):
        x[(0,) * x.dim()] = 0.0 if data.draw(st.booleans()) else float("nan")
    check_reduce_scale(x, eps)
    check_reduce_scale_(x, eps)  # x has no self-overlap: in place is allowed


# ---- every CUDA strategy, forced (REDUCE_OPS_STRATEGY) -----------------------------------------


# See test_softmax.py: the dispatcher's strategies; unrunnable ones fall back to automatic.
STRATEGY_SHAPES = [(33, 100), (9, 1000), (5, 4096), (6, 1021), (6, 4099), (6, 70000), (6, 1 << 18)]


def special_rows(x, dtype):
    """Row 1 zeros (+-0), row 2 a NaN, row 3 an -inf, row 4 tiny (scale below eps and, for
    float32/bfloat16, subnormal), row 5 huge (near the dtype's max)."""
    cols = x.shape[-1]
    fi = torch.finfo(dtype)
    x[1, ::2] = 0.0
    x[1, 1::2] = -0.0
    x[2, cols // 2] = float("nan")
    x[3, cols // 3] = float("-inf")
    x[4] = (x[4].double().clamp(-1, 1) * fi.tiny * 0.5).to(dtype)
    x[5] = (x[5].double().clamp(-1, 1) * fi.max).to(dtype)
    return x


@requires_cuda
@pytest.mark.parametrize("strategy", ROW_STRATEGIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", STRATEGY_SHAPES, ids=str)
def test_reduce_scale_every_cuda_strategy(monkeypatch, strategy, dtype, shape):
    force_row_strategy(monkeypatch, strategy)
    check_reduce_scale(make_input(shape, dtype, "cuda"))
    if shape[0] >= 6:
        x = special_rows(make_input(shape, dtype, "cuda"), dtype)
        out, scale = check_reduce_scale(x)
        assert scale[1].item() == 0 and (out[1] == 0).all() and not torch.isnan(out[1]).any()
        assert torch.isnan(out[2]).all() and scale[3].item() == float("inf")
        for eps in (1e-3, 1.0):  # eps replaces the tiny row's scale; the zero row's too
            out, scale = check_reduce_scale(x, eps=eps)
            assert scale[4].item() == torch.tensor(eps, dtype=accumulate_dtype(dtype)).item()
            assert (out[1] == 0).all()
        check_reduce_scale_(x.clone(), eps=1e-3)


@requires_cuda
@pytest.mark.parametrize("strategy", ROW_STRATEGIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reduce_scale_scale_stored_with_or_without_the_l2_policy(monkeypatch, strategy, dtype):
    # The scale is stored under an L2 evict_last policy (a 32-bit store, 64-bit for float64), or
    # plainly with REDUCE_OPS_SCALE_STORE=plain: each as torch's, the same bits either way.
    force_row_strategy(monkeypatch, strategy)
    x = special_rows(make_input((9, 1000), dtype, "cuda"), dtype)
    out, scale = check_reduce_scale(x)
    monkeypatch.setenv("REDUCE_OPS_SCALE_STORE", "plain")
    plain_out, plain_scale = check_reduce_scale(x)
    assert_exactly_equal(scale, plain_scale)
    assert_exactly_equal(out, plain_out)


# 4194304 rows and more of up to 16 bytes store their scale plainly by default (reduce_scale.cu):
# as torch's, in place too, and the same bits as under the L2 policy (REDUCE_OPS_SCALE_STORE=marked).
@requires_cuda
@pytest.mark.parametrize("dtype,cols", [(torch.bfloat16, 2), (torch.float16, 8), (torch.float32, 4)], ids=str)
def test_reduce_scale_many_short_rows_store_the_scale_plainly(monkeypatch, dtype, cols):
    monkeypatch.delenv("REDUCE_OPS_SCALE_STORE", raising=False)
    x = make_input((1 << 22, cols), dtype, "cuda")
    x[5] = 0.0
    out, scale = check_reduce_scale(x)
    inplace = x.clone()
    inplace_scale = check_reduce_scale_(inplace)
    monkeypatch.setenv("REDUCE_OPS_SCALE_STORE", "marked")
    marked_out, marked_scale = reduce_ops.reduce_scale(x)
    assert_exactly_equal(scale, marked_scale)
    assert_exactly_equal(out, marked_out)
    assert_exactly_equal(inplace_scale, marked_scale)
    assert_exactly_equal(inplace, marked_out)


@requires_cuda
@pytest.mark.parametrize("strategy,shape", MARKED_LOAD_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reduce_scale_rows_loaded_marked_or_plain(monkeypatch, strategy, shape, dtype):
    # Loads marked evict_last in the L2 (conftest.MARKED_LOAD_CASES) or plain: each as torch's,
    # the same bits either way, in place too.
    x = special_rows(make_input(shape, dtype, "cuda"), dtype)
    force_load_marks(monkeypatch, strategy, "marked")
    out, scale = check_reduce_scale(x)
    check_reduce_scale_(x.clone())
    force_load_marks(monkeypatch, strategy, "plain")
    plain_out, plain_scale = check_reduce_scale(x)
    assert_exactly_equal(scale, plain_scale)
    assert_exactly_equal(out, plain_out)


@unaligned_row_cases
def test_reduce_scale_unaligned_rows_in_shared_memory(smem_load, dtype, case):
    # conftest.unaligned_rows, out of place and in place (x's rows written back at their own
    # misalignment).
    for x in unaligned_rows(case, dtype):
        check_reduce_scale(x)
        check_reduce_scale(x, eps=1e-3)
        check_reduce_scale_(x)  # x itself: a copy would be laid out afresh


@peeled_row_cases
def test_reduce_scale_peeled_rows(monkeypatch, dtype, strategy, shape):
    # conftest.PEELED_ROW_CASES: unaligned rows in the register kernels, the absmax or a NaN in
    # their heads and tails; in place too, where x's rows are their own output.
    force_row_strategy(monkeypatch, strategy)
    x = make_input(shape, dtype, "cuda")
    check_reduce_scale(x)
    check_reduce_scale_(x.clone())
    x = peeled_edge_rows(make_input(shape, dtype, "cuda"), 1000.0)
    check_reduce_scale(x, eps=1e-3)
    check_reduce_scale_(x.clone(), eps=1e-3)
    # In place on rows that start off 16 bytes in their storage: peeled, where the out-of-place
    # op's fresh output lies otherwise than x and takes the element kernels.
    flat = make_input((shape[0] * shape[1] + 3,), dtype, "cuda")
    check_reduce_scale_(flat[3:].view(shape))
    base = make_input((shape[0], shape[1] + 5), dtype, "cuda")
    check_reduce_scale_(base[:, 1 : shape[1] + 1])


# 16-bit rows of 1025-2048 16-byte packs in the block per row (softmax_launch.h's launch_block):
# 4 packs a thread where that keeps more warps resident on an SM than 8, else 8. With sm_90's
# register counts (4 packs: 42 a thread, 40 peeled; 8 packs: 57-60) the 4-pack block fits 3 blocks
# an SM up to 13 warps (rows of 13312), 2 from 14 (13824) unless peeled (14001: 3). The same bits
# as the other pack count (REDUCE_OPS_BLOCK_PACKS); the absmax or a NaN in the peeled edges.
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
@pytest.mark.parametrize("cols,packs", [(8200, "4"), (13312, "4"), (13824, "8"), (14336, "8"), (14001, "4")],
                         ids=lambda v: str(v))
def test_reduce_scale_16_bit_block_rows_on_4_or_8_packs(monkeypatch, dtype, cols, packs):
    force_row_strategy(monkeypatch, "block")
    x = peeled_edge_rows(make_input((40, cols), dtype, "cuda"), 1000.0)
    if torch.cuda.get_device_capability() == (9, 0):
        names = cuda_kernels_run(lambda: reduce_ops.reduce_scale(x))
        assert [a[5] for a in launches_of(names, "row_norm_regs_kernel")] == [packs], names
    out, scale = check_reduce_scale(x, eps=1e-3)
    check_reduce_scale_(x.clone(), eps=1e-3)
    monkeypatch.setenv("REDUCE_OPS_BLOCK_PACKS", "8" if packs == "4" else "4")
    other_out, other_scale = reduce_ops.reduce_scale(x, eps=1e-3)
    assert_exactly_equal(scale, other_scale)
    assert_exactly_equal(out, other_out)


# ReduceScale's shorter block rows (softmax_launch.h's launch_block): 16-bit rows of 256-1024
# 16-byte packs (2048-8192 values, the peeled 4099 too) and float32 rows of 256-511 (1024-2044
# values, at any count: softmax's 4-pack rule past a wave is not ReduceScale's) at 2 packs a thread,
# float32 rows of 512-1024 packs (2048-4096 values) at 4 where their loads are not marked. No block
# loads its next row ahead (kAhead none). The absmax or a NaN in the peeled edges.
@requires_cuda
@pytest.mark.parametrize("dtype,cols,per_sm,packs", [
    (torch.bfloat16, 2048, 1, "2"), (torch.bfloat16, 4096, 1, "2"), (torch.bfloat16, 4099, 1, "2"),
    (torch.bfloat16, 8192, 1, "2"), (torch.float16, 6144, 1, "2"), (torch.float32, 1024, 64, "2"),
    (torch.float32, 2044, 64, "2"), (torch.float32, 2048, 1, "4"), (torch.float32, 4095, 1, "4")], ids=str)
def test_reduce_scale_short_block_rows_on_2_or_4_packs(monkeypatch, dtype, cols, per_sm, packs):
    clear_row_knobs(monkeypatch)
    force_row_strategy(monkeypatch, "block")
    x = peeled_edge_rows(make_input((rows_per_sm(per_sm, False), cols), dtype, "cuda"), 1000.0)
    if torch.cuda.get_device_capability() == (9, 0):
        blocks = launches_of(cuda_kernels_run(lambda: reduce_ops.reduce_scale(x)), "row_norm_regs_kernel")
        assert [a[5] for a in blocks] == [packs] and all(a[7].endswith(")0") for a in blocks), blocks
    check_reduce_scale(x, eps=1e-3)
    check_reduce_scale_(x.clone(), eps=1e-3)


# Rows that fit a block take cluster_row where they are few (softmax_launch.h's
# cluster_row_before_block), else a block: 16-bit rows from 12288 values under 24 rows an SM
# (aligned or peeled), aligned float32 rows from 12288 under 8; shorter rows a block, and peeled
# float32 rows. On sm_90 the kernel the call launches; the absmax or a NaN in the peeled edges.
@requires_cuda
@pytest.mark.parametrize("dtype,cols,per_sm,few,kernel", [
    (torch.float16, 16384, 24, True, "row_norm_cluster_row_kernel"),
    (torch.float16, 16384, 24, False, "row_norm_regs_kernel"),
    (torch.float16, 33001, 24, True, "row_norm_cluster_row_kernel"),
    (torch.float16, 8200, 24, True, "row_norm_regs_kernel"),
    (torch.float32, 16384, 8, True, "row_norm_cluster_row_kernel"),
    (torch.float32, 16384, 8, False, "row_norm_regs_kernel"),
    (torch.float32, 16385, 8, True, "row_norm_regs_kernel")], ids=str)
def test_reduce_scale_few_rows_take_cluster_row(monkeypatch, dtype, cols, per_sm, few, kernel):
    clear_row_knobs(monkeypatch)
    x = peeled_edge_rows(make_input((rows_per_sm(per_sm, few), cols), dtype, "cuda"), 1000.0)
    assert_launches_on_sm90(lambda: reduce_ops.reduce_scale(x), kernel)
    check_reduce_scale(x, eps=1e-3)
    check_reduce_scale_(x.clone(), eps=1e-3)


@peeled_next_row_cases
def test_reduce_scale_peeled_rows_load_the_next_row_ahead(monkeypatch, ahead, dtype, strategy, shape):
    force_several_rows_per_block(monkeypatch, strategy, ahead)
    monkeypatch.setenv("REDUCE_OPS_BLOCK_PACKS", "2")
    x = peeled_edge_rows(make_input(shape, dtype, "cuda"), 1000.0)
    check_reduce_scale(x, eps=1e-3)
    check_reduce_scale_(x.clone())


# The "tile" kernel (REDUCE_OPS_ROW_TILE=on; automatic for rows under two 16-byte packs and 16-bit
# rows of up to 32; conftest.TILE_ROW_SHAPES): lane mappings and tile sizes as
# test_softmax_tile_rows, the absmax, a NaN or a zero row anywhere, eps, in place; the same bits
# as without the tile (REDUCE_OPS_ROW_TILE=off: one max, one scaling per value either way).
@requires_cuda
@pytest.mark.parametrize("lanes", ["auto", "1", "4", "32"])
@pytest.mark.parametrize("tile_bytes", ["auto", "16", "3000"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@tile_row_cases
def test_reduce_scale_tile_rows(monkeypatch, lanes, tile_bytes, dtype, shape):
    force_tile(monkeypatch, "REDUCE_OPS_ROW_TILE", dtype, shape, lanes, tile_bytes)
    x = peeled_edge_rows(make_input(shape, dtype, "cuda"), 1000.0)
    x[7] = 0.0
    if lanes == "auto" and tile_bytes == "auto":  # once a shape and dtype: the tile kernel ran
        names = cuda_kernels_run(lambda: reduce_ops.reduce_scale(x))
        assert any("row_norm_tile_kernel" in n for n in names), names
    check_reduce_scale_(x.clone(), eps=1e-3)
    check_same_bits_without(monkeypatch, "REDUCE_OPS_ROW_TILE", x, x.clone())


# Rows of 2 (as test_softmax_rows_of_two): contiguous tensors' rows 2-4 a 16-byte pack, other rows on
# their packs' boundaries a lane a row, the rest elsewhere: a zero row, eps, in place in the same
# layout; a lane a row (REDUCE_OPS_PACKED_ROWS=off), the same bits as without it
# (REDUCE_OPS_PAIR_ROWS=off: one max, one scaling per value either way).
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=dtype_id)
@pair_row_cases
def test_reduce_scale_rows_of_two(monkeypatch, dtype, rows, layout):
    clear_row_knobs(monkeypatch)
    x = peeled_edge_rows(pair_rows(rows, dtype, layout), 1000.0)
    x[-1] = 0.0
    lane = "lane" if layout != "offset_1" else None
    assert_short_rows_launch(lambda: reduce_ops.reduce_scale(x), "packed" if packed_rows_by_default(x, False) else lane)
    monkeypatch.setenv("REDUCE_OPS_PACKED_ROWS", "off")
    assert_short_rows_launch(lambda: reduce_ops.reduce_scale(x), lane)
    check_same_bits_without(monkeypatch, "REDUCE_OPS_PAIR_ROWS", x, pair_rows(rows, dtype, layout).copy_(x))


# Rows of 4 or 8 bytes 2-4 a 16-byte pack (conftest.packed_row_cases; ReduceScale's default, forced
# here all the same), their scales 2 or 4 a store: a zero row, eps, in place; the same bits as a lane
# a row (REDUCE_OPS_PACKED_ROWS=off).
@requires_cuda
@packed_row_cases
def test_reduce_scale_packed_rows(monkeypatch, dtype, cols, rows, layout):
    x, launched = packed_rows_input(monkeypatch, dtype, cols, rows, layout, 1000.0)
    x[-1] = 0.0
    launched(lambda: reduce_ops.reduce_scale(x))
    check_same_bits_without(monkeypatch, "REDUCE_OPS_PACKED_ROWS", x, packed_rows(rows, cols, dtype, layout).copy_(x))


# 16-bit rows of one or 3-15 whole 8-byte packs on the warp kernel by 8-byte packs (as
# test_softmax_half_packs_rows): a zero row, eps, in place; the same bits as without it
# (REDUCE_OPS_HALF_PACKS=off: one max, one scaling per value either way).
@requires_cuda
@half_pack_layouts
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
@half_pack_cases
def test_reduce_scale_half_packs_rows(monkeypatch, shape, dtype, layout):
    clear_row_knobs(monkeypatch)
    x = peeled_edge_rows(half_pack_rows(shape, dtype, layout), 1000.0)
    x[7] = 0.0
    assert_half_packs_launch(lambda: reduce_ops.reduce_scale(x), x, layout, softmax=False)
    check_same_bits_without(monkeypatch, "REDUCE_OPS_HALF_PACKS", x, half_pack_rows(shape, dtype, layout).copy_(x))


# 16-bit rows of 8-byte packs, 2 a lane group at once (row_norm_rows_kernel, as
# test_softmax_rows_held_at_once): big, NaN, -inf and zero rows, eps, in place, one row, strided
# rows; the same bits as one row at a time (REDUCE_OPS_WARP_ROWS=off), on either lane mapping.
@requires_cuda
@warp_rows_held
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
@warp_rows_cols
def test_reduce_scale_rows_held_at_once(monkeypatch, held, dtype, cols):
    x, kernels = warp_rows_input(monkeypatch, held, cols, dtype, 1000.0)
    x[7] = 0.0
    kernels(lambda: reduce_ops.reduce_scale(x))
    check_reduce_scale(x[:1])
    check_reduce_scale(half_pack_rows((700, cols), dtype, "row_stride"))
    check_same_bits_without(monkeypatch, "REDUCE_OPS_WARP_ROWS", x, like_layout(x).copy_(x))


# Float32 element rows on row_norm_rows_kernel (conftest.element_row_cases): big, NaN, -inf and +inf
# at the rows' ends (the last element is the one a slot past the end repeats), a zero row, eps, one
# row, in place (contiguous rows stay element rows in place); the same bits as the looping warp
# kernel (REDUCE_OPS_ELEMENT_ROWS=off), which a forced "warp" takes too.
@requires_cuda
@element_row_cases
def test_reduce_scale_element_rows(monkeypatch, cols):
    clear_row_knobs(monkeypatch)
    x = peeled_edge_rows(element_rows(cols), 1000.0)
    x[7] = 0.0
    element_rows_launch(lambda: reduce_ops.reduce_scale(x), cols)
    check_reduce_scale(x[:1])
    check_same_bits_without(monkeypatch, "REDUCE_OPS_ELEMENT_ROWS", x, like_layout(x).copy_(x))
    element_rows_launch(lambda: reduce_ops.reduce_scale(x), cols, taken=False)
    monkeypatch.delenv("REDUCE_OPS_ELEMENT_ROWS")
    force_row_strategy(monkeypatch, "warp")
    element_rows_launch(lambda: reduce_ops.reduce_scale(x), cols, taken=False)


# 16-byte-pack rows on the warp kernel's lanes a row and packs a lane (conftest.WARP_PACK_CASES):
# big, NaN, -inf and zero rows, eps, in place (on x's copy one element off 16 bytes too: peeled in
# place, elements out of place), rows strided past their length; the same bits on the uncapped
# kernel (REDUCE_OPS_WARP_CAP=off) and on the table before (REDUCE_OPS_WARP_PACKS=off).
@requires_cuda
@warp_pack_modes
@warp_pack_cases
def test_reduce_scale_warp_rows_lanes_a_row_and_packs_a_lane(monkeypatch, mode, dtype, cols):
    x, kernels = warp_packs_input(monkeypatch, mode, dtype, cols, 1000.0)
    x[7] = 0.0
    kernels(lambda: reduce_ops.reduce_scale(x), softmax=False)
    check_reduce_scale(make_input((300, cols + 8), dtype, "cuda")[:, :cols])
    check_reduce_scale_(off_16_bytes(x))
    check_same_bits_without(monkeypatch, "REDUCE_OPS_WARP_CAP", x, x.clone())
    check_same_bits_without(monkeypatch, "REDUCE_OPS_WARP_PACKS", x, x.clone())


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reduce_scale_peeled_rows_match_the_element_kernels(monkeypatch, dtype):
    # Peeled and not (REDUCE_OPS_ROW_PEEL=off): the same bits (one max, one scaling per value).
    x = peeled_edge_rows(make_input((48, 4099), dtype, "cuda"), 1000.0)
    out, scale = reduce_ops.reduce_scale(x)
    monkeypatch.setenv("REDUCE_OPS_ROW_PEEL", "off")
    ref_out, ref_scale = reduce_ops.reduce_scale(x)
    assert_exactly_equal(out, ref_out)
    assert_exactly_equal(scale, ref_scale)


# "cluster_row" on more blocks than the row needs (test_softmax.py's case): blocks with no values.
@requires_cuda
@pytest.mark.parametrize("blocks", ["8", "16"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reduce_scale_cluster_row_on_more_blocks_than_the_row_needs(monkeypatch, blocks, dtype):
    force_row_strategy(monkeypatch, "cluster_row")
    monkeypatch.setenv("REDUCE_OPS_CLUSTER", blocks)
    x = special_rows(make_input((6, 70000), dtype, "cuda"), dtype)
    check_reduce_scale(x, eps=1e-3)
    check_reduce_scale_(x.clone())


# Block rows of at most 4.5 KB on waves of looping blocks (conftest.small_block_cases), special rows
# among them, out of place and in place, to the bit against a block a row.
@requires_cuda
@small_block_cases
def test_reduce_scale_small_block_rows_loop(monkeypatch, waves, cols):
    x, launched = small_block_rows_input(monkeypatch, waves, cols, lambda t: special_rows(t, torch.bfloat16))
    launched(lambda: reduce_ops.reduce_scale(x))
    check_same_bits_without(monkeypatch, "REDUCE_OPS_BLOCK_WAVES", x, x.clone())


# ReduceScale's cluster_row keeps the fewest blocks that hold the row (softmax's count,
# test_softmax.py's test_softmax_cluster_row_blocks_a_row, moved it by 1% or less): on sm_90 the
# launch's grid and block.
@requires_cuda
@pytest.mark.parametrize("cols,blocks,threads", [(100000, 7, 224), (151936, 10, 256)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=dtype_id)
def test_reduce_scale_cluster_row_on_the_fewest_blocks(monkeypatch, dtype, cols, blocks, threads):
    clear_row_knobs(monkeypatch)
    x = special_rows(make_input((6, cols), dtype, "cuda"), dtype)
    if torch.cuda.get_device_capability() == (9, 0):
        dims = cuda_launch_dims(lambda: reduce_ops.reduce_scale(x), "row_norm_cluster_row_kernel")
        assert dims == [((6 * blocks, 1, 1), (threads, 1, 1))], dims
    check_reduce_scale(x, eps=1e-3)


# The warp kernel's 16-bit rows of 3-4 packs over 32 lanes held as raw words where launch_warp says
# (conftest.WARP_HELD_CASES: peeled rows, unmarked loads), or as floats (REDUCE_OPS_WARP_HELD=float):
# the same bits either way (one max, one scaling a value), out of place and in place, rows of
# special values among them. On sm_90 the kernel launched.
@requires_cuda
@pytest.mark.parametrize("cols,_,raw,__", WARP_HELD_CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
def test_reduce_scale_warp_rows_held_as_raw_words(monkeypatch, dtype, cols, _, raw, __):
    clear_row_knobs(monkeypatch)
    monkeypatch.delenv("REDUCE_OPS_WARP_HELD", raising=False)
    x = special_rows(make_input((300, cols), dtype, "cuda"), dtype)
    sm90 = torch.cuda.get_device_capability() == (9, 0)
    if sm90:
        assert held_raw_launches(lambda: reduce_ops.reduce_scale(x), "row_norm_warp_kernel") == [raw]
    out, scale = check_reduce_scale(x)
    check_reduce_scale(x, eps=1e-3)
    inplace_scale = check_reduce_scale_(x.clone())
    monkeypatch.setenv("REDUCE_OPS_WARP_HELD", "float")
    if sm90:
        assert held_raw_launches(lambda: reduce_ops.reduce_scale(x), "row_norm_warp_kernel") == [False]
    other_out, other_scale = reduce_ops.reduce_scale(x)
    assert_exactly_equal(out, other_out)
    assert_exactly_equal(scale, other_scale)
    assert_exactly_equal(inplace_scale, other_scale)


# The register kernels' next row (conftest.next_row_cases), rows of special values (zero, NaN,
# -inf, tiny, huge) among them, out of place and in place.
@next_row_cases
def test_reduce_scale_register_kernels_load_the_next_row_ahead(monkeypatch, ahead, dtype, strategy, shape):
    force_several_rows_per_block(monkeypatch, strategy, ahead)
    x = special_rows(make_input(shape, dtype, "cuda"), dtype)
    check_reduce_scale(x, eps=1e-3)
    check_reduce_scale_(x.clone())  # in place: the next row is read while this one is written


@requires_cuda
@pytest.mark.parametrize("strategy,dtype,shape", SMEM_48_KB_CASES, ids=str)
def test_reduce_scale_48_kb_of_dynamic_shared_memory(monkeypatch, strategy, dtype, shape):
    force_row_strategy(monkeypatch, strategy)
    check_reduce_scale(make_input(shape, dtype, "cuda"))
