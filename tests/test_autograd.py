"""Autograd of the ops and the softmax_backward operator (issue: autograd, torch.compile and
CUDA graphs for every op): gradients against torch in float64, double backward, opcheck of
softmax_backward, and compiled training steps against eager."""
import math

import pytest
import torch

import reduce_ops
from conftest import (INNER_STRATEGIES, ROW_STRATEGIES, SMEM_48_KB_CASES, assert_same_bits, cuda_kernels_run,
                      force_inner_strategy, force_load_marks, force_row_strategy, force_tile, launches_of,
                      make_input, off_16_bytes, requires_cuda, tile_row_cases)

F64 = torch.float64


def rand64(shape, device, requires_grad=True):
    return make_input(shape, F64, device).requires_grad_(requires_grad)


# ---- gradients against torch -----------------------------------------------------------------

SUM_DIMS = [None, 0, -1, (0, 2), [1, 2], (0, 1, 2)]


@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("dim", SUM_DIMS, ids=str)
def test_sum_gradcheck_over_dims(device, dim, keepdim):
    x = rand64((3, 4, 5), device)
    assert torch.autograd.gradcheck(lambda t: reduce_ops.sum(t, dim, keepdim), (x,))


@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
@pytest.mark.parametrize("dim", SUM_DIMS, ids=str)
def test_amax_gradcheck_over_dims(device, dim, keepdim):
    x = rand64((3, 4, 5), device)  # random float64: a unique max per slice
    assert torch.autograd.gradcheck(lambda t: reduce_ops.amax(t, dim, keepdim), (x,))


def test_amax_gradient_is_split_among_ties_like_torch(device):
    x = torch.tensor([[1.0, 3.0, 3.0, -2.0], [5.0, 5.0, 5.0, 0.0]], dtype=F64, device=device)
    ours = x.clone().requires_grad_(True)
    ref = x.clone().requires_grad_(True)
    g = torch.tensor([2.0, 3.0], dtype=F64, device=device)
    reduce_ops.amax(ours, 1).backward(g)
    torch.amax(ref, 1).backward(g)
    assert torch.equal(ours.grad, ref.grad)


@pytest.mark.parametrize("dim", [0, 1, -1, 2], ids=str)
def test_softmax_gradcheck_and_gradgradcheck_over_dims(device, dim):
    x = rand64((3, 4, 5), device)
    assert torch.autograd.gradcheck(lambda t: reduce_ops.softmax(t, dim), (x,))
    assert torch.autograd.gradgradcheck(lambda t: reduce_ops.softmax(t, dim), (x,))


def test_softmax_with_dtype_backward_returns_input_dtype(device):
    x = make_input((4, 33), torch.bfloat16, device).requires_grad_(True)
    y = reduce_ops.softmax(x, -1, dtype=torch.float32)
    assert y.dtype == torch.float32
    y.backward(torch.ones_like(y))
    assert x.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("eps", [0.0, 1e-3, 10.0], ids=["eps0", "eps_small", "eps_clamps"])
def test_reduce_scale_gradcheck_both_outputs(device, eps):
    x = rand64((4, 9), device)
    assert torch.autograd.gradcheck(lambda t: reduce_ops.reduce_scale(t, eps=eps), (x,))


def test_reduce_scale_gradient_matches_the_torch_expression(device):
    x = rand64((5, 17), device)
    g_out = make_input((5, 17), F64, device)
    g_scale = make_input((5, 1), F64, device)
    out, scale = reduce_ops.reduce_scale(x, eps=1e-6)
    torch.autograd.backward([out, scale], [g_out, g_scale])
    x_ref = x.detach().clone().requires_grad_(True)
    s_ref = x_ref.abs().amax(-1, keepdim=True).clamp_min(1e-6)
    torch.autograd.backward([x_ref / s_ref, s_ref], [g_out, g_scale])
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-12, atol=1e-12)


def test_reduce_scale_zero_row_has_zero_gradient(device):
    # out = 0 for a zero row (a constant), so no gradient flows into that row.
    x = rand64((3, 6), device, requires_grad=False)
    x[1] = 0
    x.requires_grad_(True)
    out, scale = reduce_ops.reduce_scale(x)
    (out.sum() + scale.sum()).backward()
    assert torch.equal(x.grad[1], torch.zeros(6, dtype=F64, device=device))
    assert torch.isfinite(x.grad).all()


def test_reduce_scale_inplace_refuses_a_tensor_that_requires_grad(device):
    # It overwrites the x its gradient needs: a leaf and a graph's inner tensor both raise, and
    # x is left as it was.
    leaf = rand64((3, 6), device)
    inner = leaf * 2
    for x in (leaf, inner):
        before = x.detach().clone()
        with pytest.raises(RuntimeError, match="reduce_scale_: x requires grad"):
            reduce_ops.reduce_scale_(x)
        assert torch.equal(x.detach(), before)
    with torch.no_grad():  # where no gradient is recorded, it runs
        scale = reduce_ops.reduce_scale_(inner)
    assert torch.equal(scale, before.abs().amax(-1, keepdim=True))


def test_reduce_scale_inplace_moves_the_version_counter(device):
    # As torch's in-place ops: a graph that saved x for its backward raises instead of using
    # the overwritten values.
    x = make_input((3, 6), F64, device)
    w = rand64((3, 6), device)
    y = w * x  # saves x for w's gradient
    version = x._version
    reduce_ops.reduce_scale_(x)
    assert x._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# ---- the softmax_backward operator -----------------------------------------------------------

def reference_softmax_backward(grad, out, dim):
    return torch.ops.aten._softmax_backward_data(grad.double(), out.double(), dim, torch.float64)


# Those from (4, 6, 9) on are over a middle dim (the CUDA tiled inner kernels): many tiles and few, cols
# past the unrolled loop's step and not a multiple of it, inner a multiple of the pack or not,
# rows of threads in one warp and in 16 ((1100, 2048)), tiles of 64-byte rows held ((600, 4096); float32
# also (2, 700, 1024)) and streamed where 32-byte rows would hold ((1100, 4096)), scalar loads
# held 32 values a thread (float32; float64 16) and streamed (16-bit) ((600, 1023)); 16-bit inner dims
# a multiple of 4 but not 8 (8-byte packs): held ((2, 700, 1020), (1100, 2044)), held in 32-byte rows
# where 64-byte rows would stream ((1100, 4092)), streamed ((2100, 1020)).
BACKWARD_SHAPES = [((5, 1), -1), ((7, 33), -1), ((3, 1000), -1), ((2, 5000), 1), ((4, 6, 9), 1),
                   ((6, 5, 4), 0), ((3000, 64), 0), ((2, 700, 1024), 1), ((64, 21, 520), 1),
                   ((5, 9000, 8), 1), ((1, 70000, 16), 1), ((999, 13), 0), ((1100, 2048), 0),
                   ((600, 4096), 0), ((1100, 4096), 0), ((600, 1023), 0), ((2, 700, 1020), 1),
                   ((1100, 2044), 0), ((1100, 4092), 0), ((2100, 1020), 0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("shape,dim", BACKWARD_SHAPES, ids=str)
def test_softmax_backward_matches_aten(device, dtype, shape, dim):
    x = make_input(shape, dtype, device)
    out = torch.softmax(x.double(), dim).to(dtype)
    grad = make_input(shape, dtype, device)
    got = reduce_ops.softmax_backward(grad, out, dim)
    assert got.dtype == dtype and got.shape == x.shape and got.is_contiguous()
    ref = reference_softmax_backward(grad, out, dim)
    tol = {torch.float32: 1e-5, torch.float64: 1e-12}.get(dtype, 1e-2)
    # The error of grad_x scales with |out| * (|grad| + |<grad, out>|): compare in that unit.
    scale = out.double().abs() * (grad.double().abs() + (grad.double() * out.double()).sum(dim, keepdim=True).abs())
    assert ((got.double() - ref).abs() <= tol * scale + tol * 1e-3).all()


@requires_cuda
@pytest.mark.parametrize("strategy", INNER_STRATEGIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("shape,dim", [c for c in BACKWARD_SHAPES if c[1] not in (-1, len(c[0]) - 1)], ids=str)
def test_softmax_backward_inner_dims_every_cuda_strategy(monkeypatch, strategy, dtype, shape, dim):
    # The inner-dim dispatcher's two ways, forced (test_softmax's ..._inner_dims_every_cuda_strategy).
    force_inner_strategy(monkeypatch, strategy)
    test_softmax_backward_matches_aten("cuda", dtype, shape, dim)
    x = make_input(shape, dtype, "cuda")
    out, grad = torch.softmax(x, dim), make_input(shape, dtype, "cuda")
    assert torch.equal(reduce_ops.softmax_backward(grad, out, dim), reduce_ops.softmax_backward(grad, out, dim))


def assert_backward_close(got, grad, out, dtype):
    ref = reference_softmax_backward(grad, out, -1)
    tol = {torch.float32: 1e-5, torch.float64: 1e-12}.get(dtype, 1e-2)
    # The error of grad_x scales with |out| * (|grad| + |<grad, out>|): compare in that unit.
    scale = out.double().abs() * (grad.double().abs() + (grad.double() * out.double()).sum(-1, keepdim=True).abs())
    ok = ((got.double() - ref).abs() <= tol * scale + tol * 1e-3) | (torch.isnan(ref) & torch.isnan(got.double()))
    assert ok.all()


def backward_operands(rows, cols, dtype, nan_at=None):
    """grad and out (x's softmax in float64, cast to dtype) of random rows on the GPU; nan_at=(row,
    col) puts a NaN in x there, which makes that row's out NaN."""
    x = make_input((rows, cols), dtype, "cuda")
    if nan_at is not None:
        x[nan_at] = float("nan")
    out = torch.softmax(x.double(), -1).to(dtype)
    return make_input((rows, cols), dtype, "cuda"), out


def backward_launches(grad, out):
    """softmax_backward(grad, out, -1) and the names of the CUDA kernels it launched."""
    got = []
    names = cuda_kernels_run(lambda: got.append(reduce_ops.softmax_backward(grad, out, -1)))
    return got[0], names


def backward_warps(names):
    """The template arguments of the backward's warp kernel launches among `names`: the plain kernel
    and its 64-register twin (softmax_backward_warp_capped_kernel) alike."""
    return launches_of(names, "softmax_backward_warp_kernel", "softmax_backward_warp_capped_kernel")


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols", [(300, 128), (33, 1000), (9, 6000), (4, 40000), (2, 300000)],
                         ids=str)
def test_softmax_backward_every_cuda_strategy(dtype, rows, cols):
    # The automatic choice at row lengths that straddle its thresholds.
    x = make_input((rows, cols), dtype, "cuda")
    out = torch.softmax(x.double(), -1).to(dtype)
    grad = make_input((rows, cols), dtype, "cuda")
    assert_backward_close(reduce_ops.softmax_backward(grad, out, -1), grad, out, dtype)


@requires_cuda
@pytest.mark.parametrize("strategy", ROW_STRATEGIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols", [(33, 100), (33, 197), (17, 511), (9, 1000), (5, 4096), (3, 1021), (4, 4099),
                                       (5, 50257), (3, 70000), (2, 1 << 18)], ids=str)
def test_softmax_backward_forced_cuda_strategy(monkeypatch, strategy, dtype, rows, cols):
    force_row_strategy(monkeypatch, strategy)
    x = make_input((rows, cols), dtype, "cuda")
    x[0, cols // 2] = float("nan")  # a NaN row stays NaN
    out = torch.softmax(x.double(), -1).to(dtype)
    grad = make_input((rows, cols), dtype, "cuda")
    assert_backward_close(reduce_ops.softmax_backward(grad, out, -1), grad, out, dtype)


# Several rows per lane group or block (one wave of blocks, REDUCE_OPS_ROW_WAVES=1) or per
# cluster: a warp kernel, 2 and 4 packs per thread of a block, clusters of 2 to 16 blocks, a NaN
# row among finite ones; the staged clusters refill their stage every row, so several rows per
# cluster test its barrier. Clusters start in staggered phases, as on long inputs.
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("strategy,rows,cols",
                         [("warp", 40000, 128), ("block", 1500, 1000), ("block", 300, 4096), ("block", 150, 16384)]
                         + [(strategy, rows, cols) for strategy in ("cluster", "cluster-staged")
                            for rows, cols in [(70, 70000), (20, 1 << 18), (9, 1 << 19)]], ids=str)
def test_softmax_backward_register_kernels_run_several_rows(monkeypatch, dtype, strategy, rows, cols):
    force_row_strategy(monkeypatch, strategy)
    monkeypatch.setenv("REDUCE_OPS_ROW_WAVES", "1")
    monkeypatch.setenv("REDUCE_OPS_CLUSTER_STAGGER", "2000")
    x = make_input((rows, cols), dtype, "cuda")
    x[rows // 2, cols // 3] = float("nan")  # a NaN row stays NaN, its neighbours do not
    out = torch.softmax(x.double(), -1).to(dtype)
    grad = make_input((rows, cols), dtype, "cuda")
    assert_backward_close(reduce_ops.softmax_backward(grad, out, -1), grad, out, dtype)


# The backward's loads marked evict_last in the L2 (softmax_launch.h's row_loads_marked; by default
# only in calls that move 3 L2s or more) or plain, one wave of blocks: the warp kernel (its next
# rows in registers), the block kernel at 2 and 4 packs a thread, the staged clusters (out's
# share by a marked bulk copy) of 4 and, for float32, 16 blocks.
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("strategy,rows,cols",
                         [("warp", 40000, 128), ("warp", 9000, 256), ("block", 1500, 1000), ("block", 300, 6000),
                          ("cluster-staged", 70, 70000), ("cluster-staged", 20, 1 << 18)], ids=str)
def test_softmax_backward_loaded_marked_or_plain(monkeypatch, dtype, strategy, rows, cols):
    x = make_input((rows, cols), dtype, "cuda")
    x[rows // 2, cols // 3] = float("nan")  # a NaN row stays NaN, its neighbours do not
    out = torch.softmax(x.double(), -1).to(dtype)
    grad = make_input((rows, cols), dtype, "cuda")
    force_load_marks(monkeypatch, strategy, "marked")
    marked = reduce_ops.softmax_backward(grad, out, -1)
    assert_backward_close(marked, grad, out, dtype)
    force_load_marks(monkeypatch, strategy, "plain")
    assert_same_bits(reduce_ops.softmax_backward(grad, out, -1), marked)


# Short rows of whole 16-byte packs on the backward warp kernel (softmax_launch.h's launch_backward_rows):
# rows of 1, 2 and 3-4 packs on 1, 2 and 4 lanes a row, 5-8 on 8; under REDUCE_OPS_BACKWARD_LANES=8
# (the table before) all on 8, under =2 rows of a pack on 2. 700 rows (the last block's rows end
# inside it), a NaN row among them.
@requires_cuda
@pytest.mark.parametrize("fewest", ["auto", "8", "2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("packs", [1, 2, 3, 4, 5, 8])
def test_softmax_backward_short_rows_lanes_a_row(monkeypatch, fewest, dtype, packs):
    monkeypatch.delenv("REDUCE_OPS_STRATEGY", raising=False)
    if fewest != "auto":
        monkeypatch.setenv("REDUCE_OPS_BACKWARD_LANES", fewest)
    cols = packs * 16 // dtype.itemsize
    grad, out = backward_operands(700, cols, dtype, nan_at=(350, cols // 2))
    got, names = backward_launches(grad, out)
    lanes = [a[4] for a in backward_warps(names)]
    least = 1 if fewest == "auto" else int(fewest)
    assert lanes == [str(max(least, 1 << (packs - 1).bit_length()))], names
    assert_backward_close(got, grad, out, dtype)


# Rows of 33-48 whole 16-byte packs on 16 lanes a row at 3 packs a lane (launch_backward_rows'
# sixteen_lanes; 16-bit ones on the 64-register kernel), 32 on 32 lanes at one, 49 past them (16-bit
# rows on the register block, wider rows 2 packs over 32 lanes); REDUCE_OPS_BACKWARD_16_LANES=off
# gives 33-48 the layouts before. Aligned rows, and 16-bit rows of an odd length by their aligned
# middles (peeled; wider peeled rows of this length go an element a lane either way, float32's on
# softmax_backward_rows_kernel). 700 rows, a NaN row among them.
@requires_cuda
@pytest.mark.parametrize("sixteen", ["auto", "off"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("packs,peeled", [(32, False), (33, False), (37, False), (40, False), (41, False),
                                          (48, False), (49, False), (33, True), (40, True), (45, True),
                                          (48, True)], ids=str)
def test_softmax_backward_rows_of_33_to_48_packs(monkeypatch, sixteen, dtype, packs, peeled):
    monkeypatch.delenv("REDUCE_OPS_STRATEGY", raising=False)
    if sixteen == "off":
        monkeypatch.setenv("REDUCE_OPS_BACKWARD_16_LANES", "off")
    vec = 16 // dtype.itemsize
    cols = packs * vec + (vec // 2 if peeled else 0)  # peeled: `packs` whole packs and a half
    grad, out = backward_operands(700, cols, dtype, nan_at=(350, cols // 2))
    got, names = backward_launches(grad, out)
    # softmax_backward_warp_kernel<T, Acc, kVec, kPacks, kWidth, kLastLoads, kPeeled>: (packs a lane, lanes)
    warps = [(a[3], a[4]) for a in backward_warps(names)]
    capped = launches_of(names, "softmax_backward_warp_capped_kernel")
    blocks = launches_of(names, "softmax_backward_regs_kernel")
    sixteen_bit = dtype.itemsize == 2
    if peeled and dtype == torch.float32:  # element rows of 129-256: a warp a row, no loop
        assert not warps and [a[2:4] for a in launches_of(names, "softmax_backward_rows_kernel")] == \
            [[str(-(-cols // 32)), "32"]], names
    elif peeled and not sixteen_bit:
        assert [a[2] for a in backward_warps(names)] == ["1"], names
    elif packs == 32:
        assert warps == [("1", "32")] and not blocks, names
    elif packs <= 48 and sixteen == "auto":
        assert warps == [("3", "16")] and not blocks, names
        assert len(capped) == (1 if sixteen_bit else 0), names
    elif sixteen_bit:
        assert not warps and len(blocks) == 1, names
    else:
        assert warps == [("2", "32")] and not blocks, names
    assert_backward_close(got, grad, out, dtype)


# 16-bit rows of 65-80 whole 16-byte packs go a warp a row at 3 packs a lane (launch_backward_rows'
# three_packs), 81 and float32's 65 the register block; REDUCE_OPS_BACKWARD_3_PACKS=off gives the
# block there too. 700 rows, a NaN row among them.
@requires_cuda
@pytest.mark.parametrize("three", ["auto", "off"])
@pytest.mark.parametrize("dtype,packs", [(torch.bfloat16, 65), (torch.bfloat16, 72), (torch.float16, 80),
                                         (torch.bfloat16, 81), (torch.float32, 65)], ids=str)
def test_softmax_backward_16_bit_rows_of_65_to_80_packs(monkeypatch, three, dtype, packs):
    monkeypatch.delenv("REDUCE_OPS_STRATEGY", raising=False)
    if three == "off":
        monkeypatch.setenv("REDUCE_OPS_BACKWARD_3_PACKS", "off")
    cols = packs * 16 // dtype.itemsize
    grad, out = backward_operands(700, cols, dtype, nan_at=(350, cols // 2))
    got, names = backward_launches(grad, out)
    warps = [(a[3], a[4]) for a in backward_warps(names)]
    blocks = launches_of(names, "softmax_backward_regs_kernel")
    if three == "auto" and dtype.itemsize == 2 and packs <= 80:
        assert warps == [("3", "32")] and not blocks, names
    else:
        assert not warps and len(blocks) == 1, names
    assert_backward_close(got, grad, out, dtype)


# 16-bit rows of 49-64 whole packs take the register block a warp a row (1-warp blocks), on a grid of
# 16 waves of resident blocks (softmax_launch.h's small_block_grid) rather than a block a row, so each
# block runs several rows: 70000 rows (past 16 waves of 32 blocks on 132 SMs) of 50 packs, aligned
# and peeled, a NaN row among them; REDUCE_OPS_BACKWARD_BLOCK_WAVES=off gives a block a row.
@requires_cuda
@pytest.mark.parametrize("waves", ["auto", "1", "off"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("cols", [400, 401], ids=str)
def test_softmax_backward_one_warp_blocks_loop(monkeypatch, waves, dtype, cols):
    monkeypatch.delenv("REDUCE_OPS_STRATEGY", raising=False)
    monkeypatch.delenv("REDUCE_OPS_ROW_WAVES", raising=False)
    if waves != "auto":
        monkeypatch.setenv("REDUCE_OPS_BACKWARD_BLOCK_WAVES", waves)
    grad, out = backward_operands(70000, cols, dtype, nan_at=(69999, cols // 2))
    got, names = backward_launches(grad, out)
    # <T, Acc, kVec, kPacks, kCluster, ...>: the block, 2 packs a thread
    assert [(a[3], a[4]) for a in launches_of(names, "softmax_backward_regs_kernel")] == [("2", "false")], names
    assert_backward_close(got, grad, out, dtype)


# Rows that are not whole 16-byte packs: on tensors that start on 16-byte boundaries, the warp
# kernel up to 8 elements a lane (197), the "smem" kernel by packs with a head and a tail (511,
# 1021, 4099, 50257; several rows a block) and the "split" kernels so each segment (auto: the
# register kernels, test_softmax_backward_peeled_registers); on tensors one element off a boundary, an
# element at a time (REDUCE_OPS_BACKWARD_PEEL=off gives that path on aligned ones too). Each
# within the reference's tolerance.
@requires_cuda
@pytest.mark.parametrize("strategy", ["auto", "warp", "smem", "split"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols", [(300, 197), (300, 511), (1200, 1021), (700, 4099), (40, 50257)], ids=str)
def test_softmax_backward_unaligned_rows(monkeypatch, strategy, dtype, rows, cols):
    force_row_strategy(monkeypatch, strategy)
    x = make_input((rows, cols), dtype, "cuda")
    x[rows // 2, cols // 3] = float("nan")  # a NaN row stays NaN, its neighbours do not
    out = torch.softmax(x.double(), -1).to(dtype)
    grad = make_input((rows, cols), dtype, "cuda")
    assert_backward_close(reduce_ops.softmax_backward(grad, out, -1), grad, out, dtype)
    assert_backward_close(reduce_ops.softmax_backward(off_16_bytes(grad), off_16_bytes(out), -1), grad, out, dtype)


# Peeled rows by 16-byte packs in a warp (REDUCE_OPS_BACKWARD_WARP=packs) or an element a lane
# (elements): 4, 8 and 32 lanes, 1, 2 and 4 packs a lane, heads and tails of every length; within
# the reference's tolerance, on aligned tensors and one element off a boundary (the element kernels).
@requires_cuda
@pytest.mark.parametrize("mapping", ["packs", "elements"])
@pytest.mark.parametrize("strategy", ["auto", "warp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols", [(300, 3), (300, 20), (300, 37), (300, 77), (300, 150), (300, 197),
                                       (300, 263), (300, 511), (90, 1021), (33, 1031)], ids=str)
def test_softmax_backward_peeled_warp(monkeypatch, mapping, strategy, dtype, rows, cols):
    force_row_strategy(monkeypatch, strategy)
    monkeypatch.setenv("REDUCE_OPS_BACKWARD_WARP", mapping)
    x = make_input((rows, cols), dtype, "cuda")
    x[rows // 2, cols // 3] = float("nan")
    out = torch.softmax(x.double(), -1).to(dtype)
    grad = make_input((rows, cols), dtype, "cuda")
    assert_backward_close(reduce_ops.softmax_backward(grad, out, -1), grad, out, dtype)
    assert_backward_close(reduce_ops.softmax_backward(off_16_bytes(grad), off_16_bytes(out), -1), grad, out, dtype)


# The "tile" kernel (REDUCE_OPS_BACKWARD_TILE=on; automatic for 16-bit rows and float32 rows of
# up to 48; conftest.TILE_ROW_SHAPES): two stages, every lane mapping (REDUCE_OPS_TILE_LANES; one
# too narrow for the row falls back to the automatic one) and tile size (REDUCE_OPS_TILE_BYTES:
# one unit of rows, several tiles a block and a partial last one), within the reference's
# tolerance; on tensors one element off a boundary the kernel is not taken.
@requires_cuda
@pytest.mark.parametrize("lanes", ["auto", "1", "2", "4", "8", "16", "32"])
@pytest.mark.parametrize("tile_bytes", ["auto", "16", "3000"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=lambda d: str(d)[6:])
@tile_row_cases
def test_softmax_backward_tile(monkeypatch, lanes, tile_bytes, dtype, shape):
    force_tile(monkeypatch, "REDUCE_OPS_BACKWARD_TILE", dtype, shape, lanes, tile_bytes)
    rows, cols = shape
    x = make_input(shape, dtype, "cuda")
    x[rows // 2, cols // 3] = float("nan")
    out = torch.softmax(x.double(), -1).to(dtype)
    grad = make_input(shape, dtype, "cuda")
    if lanes == "auto" and tile_bytes == "auto":  # once a shape and dtype: the tile kernel ran
        names = cuda_kernels_run(lambda: reduce_ops.softmax_backward(grad, out, -1))
        assert any("softmax_backward_tile_kernel" in n for n in names), names
    assert_backward_close(reduce_ops.softmax_backward(grad, out, -1), grad, out, dtype)
    assert_backward_close(reduce_ops.softmax_backward(off_16_bytes(grad), off_16_bytes(out), -1), grad, out, dtype)


# The peeled "smem" kernel with grad's packs read again from the L2 rather than kept in shared
# memory (REDUCE_OPS_BACKWARD_SMEM=l2, l2_marked; the automatic rule's choice for float32 50257,
# 402 KB of both rows, whose "smem" runs only so): within the reference's tolerance, and the same
# bits as with both rows in shared memory (REDUCE_OPS_BACKWARD_SMEM=both) where they fit.
@requires_cuda
@pytest.mark.parametrize("mode", ["l2", "l2_marked"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols", [(300, 511), (700, 4099), (40, 50257)], ids=str)
def test_softmax_backward_grad_read_again(monkeypatch, mode, dtype, rows, cols):
    force_row_strategy(monkeypatch, "smem")
    x = make_input((rows, cols), dtype, "cuda")
    out = torch.softmax(x.double(), -1).to(dtype)
    grad = make_input((rows, cols), dtype, "cuda")
    monkeypatch.setenv("REDUCE_OPS_BACKWARD_SMEM", "both")
    both = reduce_ops.softmax_backward(grad, out, -1)
    monkeypatch.setenv("REDUCE_OPS_BACKWARD_SMEM", mode)
    got = reduce_ops.softmax_backward(grad, out, -1)
    assert_backward_close(got, grad, out, dtype)
    if 2 * cols * out.element_size() <= 200 * 1024:
        assert torch.equal(got, both)


# The peeled "smem" kernel on clusters (REDUCE_OPS_BACKWARD_SMEM=cluster, REDUCE_OPS_CLUSTER=C): C
# blocks a row, a segment each, partial dot products through distributed shared memory; segments
# of every misalignment, blocks past the row's end holding nothing (41 over 8 blocks), within the
# reference's tolerance.
@requires_cuda
@pytest.mark.parametrize("blocks", ["2", "3", "4", "8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols", [(64, 41), (300, 1031), (300, 4099), (40, 50257)], ids=str)
def test_softmax_backward_peeled_cluster(monkeypatch, blocks, dtype, rows, cols):
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("clusters need sm_90")
    force_row_strategy(monkeypatch, "smem")
    monkeypatch.setenv("REDUCE_OPS_BACKWARD_SMEM", "cluster")
    monkeypatch.setenv("REDUCE_OPS_CLUSTER", blocks)
    x = make_input((rows, cols), dtype, "cuda")
    x[rows // 2, cols // 3] = float("nan")
    out = torch.softmax(x.double(), -1).to(dtype)
    grad = make_input((rows, cols), dtype, "cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        got = reduce_ops.softmax_backward(grad, out, -1)
        torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages()]
    assert any("softmax_backward_smem_peeled_kernel" in n and "true>" in n for n in names), names
    assert_backward_close(got, grad, out, dtype)


# Peeled rows on the register kernels (softmax_backward_regs_kernel's kPeeled): a block a row
# ("block"), or clusters of 2-16 blocks ("cluster": REDUCE_OPS_CLUSTER=C, out's packs in shared
# memory or, "cluster-registers", both rows' in registers), rows of every misalignment (an odd
# length), blocks past the row's middle holding nothing (1021 on 8 blocks); the kernel named is the
# one that ran, within the reference's tolerance; on tensors one element off a boundary the
# register kernels are not taken (the element paths run).
@requires_cuda
@pytest.mark.parametrize("strategy,blocks", [("block", None), ("cluster", "2"), ("cluster", "4"), ("cluster", "8"),
                                             ("cluster", "16"), ("cluster-registers", "4")], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols", [(64, 41), (300, 1021), (300, 4099), (40, 50257), (8, 100003)], ids=str)
def test_softmax_backward_peeled_registers(monkeypatch, strategy, blocks, dtype, rows, cols):
    cluster = strategy.startswith("cluster")
    if cluster and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("clusters need sm_90")
    force_row_strategy(monkeypatch, strategy.partition("-")[0])
    monkeypatch.setenv("REDUCE_OPS_CLUSTER_HOLD", "registers" if strategy.endswith("registers") else "shared")
    if blocks is not None:
        monkeypatch.setenv("REDUCE_OPS_CLUSTER", blocks)
    grad, out = backward_operands(rows, cols, dtype, nan_at=(rows // 2, cols // 3))
    got, names = backward_launches(grad, out)
    vec = 16 // out.element_size()
    packs = -(-cols // vec)
    # The plan's own limits: a block holds 4 packs of each row a thread (1024 threads); a cluster's
    # blocks 8 (4 for float64) of grad with out's in shared memory, or 4 of each in registers.
    per_thread = 4 if (strategy != "cluster" or dtype == torch.float64) else 8
    fits = packs <= 4 * 1024 if strategy == "block" else packs <= int(blocks) * per_thread * 1024
    # <T, Acc, kVec, kPacks, kCluster, kOutShared, kLastLoads, kPeeled>
    regs = launches_of(names, "softmax_backward_regs_kernel")
    if fits:
        assert [(a[4], a[5], a[7]) for a in regs] == [(str(cluster).lower(), str(strategy == "cluster").lower(),
                                                       "true")], names
    assert_backward_close(got, grad, out, dtype)
    got_off, names = backward_launches(off_16_bytes(grad), off_16_bytes(out))
    assert not launches_of(names, "softmax_backward_regs_kernel"), names
    assert_backward_close(got_off, grad, out, dtype)


# The automatic choice for peeled rows (tensors on 16-byte boundaries): a warp up to a whole pack
# a lane or 48 packs (16-bit rows) or two (wider), the register block past that where it holds the row and
# the rows are many, then clusters (sm_90); REDUCE_OPS_BACKWARD_PEELED_REGS=off keeps every row
# off the register kernels (the peeled warp, "smem" and its clusters, the split, as before).
@requires_cuda
@pytest.mark.parametrize("regs", ["auto", "off"])
@pytest.mark.parametrize("dtype,rows,cols,kernel", [
    (torch.bfloat16, 4096, 263, "warp"),  # 32 whole packs: a pack a lane
    (torch.bfloat16, 4096, 300, "warp"),  # 37: 3 packs a lane over 16 lanes
    (torch.bfloat16, 4096, 401, "block"),  # 50
    (torch.bfloat16, 1024, 4099, "block"),
    (torch.bfloat16, 512, 50257, "cluster"),  # 6283 packs: past a block's 4096
    (torch.float32, 4096, 255, "warp"),  # 63 whole packs: an element a lane, a warp a row
    (torch.float32, 4096, 263, "block"),
    (torch.float32, 512, 50257, "cluster"),
], ids=str)
def test_softmax_backward_peeled_rows_automatic(monkeypatch, regs, dtype, rows, cols, kernel):
    force_row_strategy(monkeypatch, "auto")
    if regs == "off":
        monkeypatch.setenv("REDUCE_OPS_BACKWARD_PEELED_REGS", "off")
    if kernel == "cluster" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("clusters need sm_90")
    grad, out = backward_operands(rows, cols, dtype)
    got, names = backward_launches(grad, out)
    # <T, Acc, kVec, kPacks, kCluster, kOutShared, kLastLoads, kPeeled>
    launched = [("cluster" if a[4] == "true" else "block", a[7])
                for a in launches_of(names, "softmax_backward_regs_kernel")]
    warps = backward_warps(names) + launches_of(names, "softmax_backward_rows_kernel")
    if kernel == "warp":
        assert warps and launched == [], names
    else:
        assert launched == ([] if regs == "off" else [(kernel, "true")]), names
    assert_backward_close(got, grad, out, dtype)


# The backward's float32 element rows of 129-256 values on softmax_backward_rows_kernel
# (launch_backward_element_rows): a warp a row, ceil(cols / 32) values a lane, every count and each
# bound's sides. Rows of 68-255 values not whole packs stay element rows on 16-byte boundaries
# (contiguous), 129-255 of them take this kernel; the others start one element off 16 bytes, where
# rows past 128 values leave the warp (256). 300 rows (the last block's rows end inside it), a NaN
# and a large grad at a row's end (the element a lane's last slot repeats);
# REDUCE_OPS_BACKWARD_ELEMENT_ROWS=off and a forced "warp" take the looping warp kernel.
@requires_cuda
@pytest.mark.parametrize("cols,taken", [(77, False), (128, False), (129, True), (161, True), (193, True),
                                        (225, True), (255, True), (256, False), (257, False)], ids=str)
def test_softmax_backward_element_rows(monkeypatch, cols, taken):
    force_row_strategy(monkeypatch, "auto")
    monkeypatch.delenv("REDUCE_OPS_BACKWARD_ELEMENT_ROWS", raising=False)
    grad, out = backward_operands(300, cols, torch.float32, nan_at=(7, cols - 1))
    grad[3, -1] = 1e4  # counted twice (the repeat), it would move the row's dot far past tolerance
    if not (68 <= cols < 256 and cols % 4):
        grad, out = off_16_bytes(grad), off_16_bytes(out)
    got, names = backward_launches(grad, out)
    # <T, Acc, kPacks, kWidth>
    launched = [(a[2], a[3]) for a in launches_of(names, "softmax_backward_rows_kernel")]
    assert launched == ([(str(-(-cols // 32)), "32")] if taken else []), names
    assert_backward_close(got, grad, out, torch.float32)
    assert_backward_close(reduce_ops.softmax_backward(grad[:1], out[:1], -1), grad[:1], out[:1], torch.float32)
    for knob, value in (("REDUCE_OPS_BACKWARD_ELEMENT_ROWS", "off"), ("REDUCE_OPS_STRATEGY", "warp")):
        monkeypatch.setenv(knob, value)
        got_off, names = backward_launches(grad, out)
        assert not launches_of(names, "softmax_backward_rows_kernel"), names
        assert_backward_close(got_off, grad, out, torch.float32)
        monkeypatch.delenv(knob)


# 48 KB of dynamic shared memory exactly (conftest.SMEM_48_KB_CASES; the backward has no staged
# blocks, so "block-staged" runs its register block or, past it, a cluster).
@requires_cuda
@pytest.mark.parametrize("strategy,dtype,shape", SMEM_48_KB_CASES, ids=str)
def test_softmax_backward_48_kb_of_dynamic_shared_memory(monkeypatch, strategy, dtype, shape):
    force_row_strategy(monkeypatch, strategy)
    x = make_input(shape, dtype, "cuda")
    out = torch.softmax(x.double(), -1).to(dtype)
    grad = make_input(shape, dtype, "cuda")
    assert_backward_close(reduce_ops.softmax_backward(grad, out, -1), grad, out, dtype)


def test_softmax_backward_rejects_mismatched_operands(device):
    g = make_input((3, 4), torch.float32, device)
    with pytest.raises(RuntimeError, match="softmax_backward"):
        reduce_ops.softmax_backward(g, make_input((3, 5), torch.float32, device), -1)
    with pytest.raises(RuntimeError, match="softmax_backward"):
        reduce_ops.softmax_backward(g, make_input((3, 4), torch.float64, device), -1)
    with pytest.raises(IndexError):
        reduce_ops.softmax_backward(g, g, 2)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["", "requires_grad"])
def test_softmax_backward_opcheck(device, requires_grad):
    for shape, dim in [((4, 7), -1), ((3, 5, 6), 1)]:
        out = torch.softmax(make_input(shape, torch.float32, device), dim)
        grad = make_input(shape, torch.float32, device)
        out.requires_grad_(requires_grad)
        grad.requires_grad_(requires_grad)
        torch.library.opcheck(torch.ops.reduce_ops.softmax_backward.default, (grad, out, dim))


def test_softmax_backward_double_backward(device):
    grad = rand64((3, 7), device)
    out = torch.softmax(rand64((3, 7), device, requires_grad=False), -1).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda g, y: reduce_ops.softmax_backward(g, y, -1), (grad, out))


# ---- compiled training steps ---------------------------------------------------------------

def attention_block(q, k, v):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return reduce_ops.softmax(scores, -1) @ v


def quantize_step(x, w):
    # per-token absmax scaling of the activations, then a matmul: a fake-quant linear layer.
    q, scale = reduce_ops.reduce_scale(x, eps=1e-6)
    return (q @ w) * scale


def compiled_backends(device):
    return ["aot_eager"] + (["inductor"] if device == "cuda" else [])


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compiled_attention_block_forward_and_backward(device, dynamic):
    for backend in compiled_backends(device):
        torch._dynamo.reset()
        compiled = torch.compile(attention_block, backend=backend, fullgraph=True, dynamic=dynamic)
        for seq in (16, 40):
            q, k, v = (make_input((2, seq, 32), torch.float32, device).requires_grad_(True) for _ in range(3))
            g = make_input((2, seq, 32), torch.float32, device)
            expected = attention_block(q, k, v)
            grads_expected = torch.autograd.grad(expected, (q, k, v), g)
            got = compiled(q, k, v)
            grads_got = torch.autograd.grad(got, (q, k, v), g)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            for a, b in zip(grads_got, grads_expected):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_compiled_quantize_step_forward_and_backward(device):
    for backend in compiled_backends(device):
        torch._dynamo.reset()
        compiled = torch.compile(quantize_step, backend=backend, fullgraph=True)
        x = make_input((8, 64), torch.float32, device).requires_grad_(True)
        w = make_input((64, 16), torch.float32, device).requires_grad_(True)
        expected = quantize_step(x, w)
        grads_expected = torch.autograd.grad(expected.sum(), (x, w))
        got = compiled(x, w)
        grads_got = torch.autograd.grad(got.sum(), (x, w))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        for a, b in zip(grads_got, grads_expected):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@requires_cuda
def test_compiled_reduce_overhead_mode_forward_and_backward():
    # mode="reduce-overhead" runs the compiled graphs as CUDA graphs.
    torch._dynamo.reset()
    compiled = torch.compile(attention_block, mode="reduce-overhead", fullgraph=True)
    for step in range(3):  # the first calls record, the later ones replay
        q, k, v = (make_input((2, 24, 32), torch.float32, "cuda").requires_grad_(True) for _ in range(3))
        expected = attention_block(q, k, v)
        grads_expected = torch.autograd.grad(expected.sum(), (q, k, v))
        got = compiled(q, k, v)
        grads_got = torch.autograd.grad(got.sum(), (q, k, v))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        for a, b in zip(grads_got, grads_expected):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def every_op_step(x, w):
    # Each op with a differentiable input, with the arguments its backward keeps (dims, keepdim,
    # dtype, eps): what compiled autograd must carry into the traced backward.
    s = reduce_ops.softmax(x @ w, -1, dtype=torch.float64).float()
    q, scale = reduce_ops.reduce_scale(s, eps=1e-6)
    loss = reduce_ops.sum(q * scale, (0, -1)) + reduce_ops.sum(q, -1, True, dtype=torch.float64).sum()
    loss = loss + reduce_ops.amax(s, 0).sum() + reduce_ops.amax(s, [0, 1], keepdim=True).sum()
    return loss + (reduce_ops.softmax_backward(s, s.detach(), -1) * x).sum()


def test_compiled_autograd_traces_every_backward(device):
    # The backwards are C++ autograd Functions marked traceable: compiled autograd must trace
    # them (fullgraph: a node it cannot trace raises) and give eager's gradients.
    from torch._dynamo import compiled_autograd

    torch._dynamo.reset()
    for rows in (8, 12):  # a second shape: the traced backward is not tied to the first
        x = make_input((rows, 16), torch.float32, device).requires_grad_(True)
        w = make_input((16, 16), torch.float32, device).requires_grad_(True)
        expected = torch.autograd.grad(every_op_step(x, w), (x, w))
        loss = every_op_step(x, w)
        with compiled_autograd._enable(torch.compile(backend="aot_eager", fullgraph=True)):
            loss.backward()
        torch.testing.assert_close(x.grad, expected[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(w.grad, expected[1], rtol=1e-5, atol=1e-6)


def test_calls_that_need_no_gradient_record_no_graph(device):
    x = rand64((3, 5), device)
    with torch.no_grad():
        outs = [reduce_ops.sum(x, -1), reduce_ops.amax(x, 0), reduce_ops.softmax(x, -1),
                *reduce_ops.reduce_scale(x), reduce_ops.softmax_backward(x, x, -1)]
    assert all(o.grad_fn is None and not o.requires_grad for o in outs)
    # One operand of softmax_backward needing a gradient is enough for a graph.
    y = torch.softmax(rand64((3, 5), device, requires_grad=False), -1)
    assert reduce_ops.softmax_backward(x, y, -1).grad_fn is not None
    assert reduce_ops.softmax_backward(y, x, -1).grad_fn is not None
