"""How the ops fit into PyTorch: registration, opcheck, autograd, torch.compile, CUDA graphs,
streams and devices (SPEC.md, "Names" and "Integration")."""
import inspect
import os
import subprocess
import sys
import warnings

import pytest
import torch

import reduce_ops
from conftest import (
    assert_exactly_equal, assert_same_bits, make_input, requires_cuda,
    requires_two_gpus,
)

OPS = ["sum", "amax", "softmax", "reduce_scale", "reduce_scale_"]
DIFFERENTIABLE_OPS = ["sum", "amax", "softmax", "reduce_scale"]

SCHEMAS = {
    "sum": "reduce_ops::sum(Tensor x, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "amax": "reduce_ops::amax(Tensor x, int[1]? dim=None, bool keepdim=False) -> Tensor",
    "softmax": "reduce_ops::softmax(Tensor x, int dim=-1, *, ScalarType? dtype=None) -> Tensor",
    "reduce_scale": "reduce_ops::reduce_scale(Tensor x, *, float eps=0.0) -> (Tensor, Tensor)",
    "reduce_scale_": "reduce_ops::reduce_scale_(Tensor(a!) x, *, float eps=0.0) -> Tensor",
}


# ---- names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", OPS)
def test_op_is_reachable_as_torch_ops(name):
    packet = getattr(torch.ops.reduce_ops, name)
    # compare in torch's canonical spelling (it prints 0.0 as "0.")
    assert str(packet.default._schema) == str(torch._C.parse_schema(SCHEMAS[name]))


@pytest.mark.parametrize("name", OPS)
def test_python_wrapper_signature(name):
    params = inspect.signature(getattr(reduce_ops, name)).parameters
    expected = {
        "sum": [("x", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty), ("dim", "POSITIONAL_OR_KEYWORD", None),
                ("keepdim", "POSITIONAL_OR_KEYWORD", False), ("dtype", "KEYWORD_ONLY", None)],
        "amax": [("x", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty), ("dim", "POSITIONAL_OR_KEYWORD", None),
                 ("keepdim", "POSITIONAL_OR_KEYWORD", False)],
        "softmax": [("x", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty), ("dim", "POSITIONAL_OR_KEYWORD", -1),
                    ("dtype", "KEYWORD_ONLY", None)],
        "reduce_scale": [("x", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty), ("eps", "KEYWORD_ONLY", 0.0)],
        "reduce_scale_": [("x", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty), ("eps", "KEYWORD_ONLY", 0.0)],
    }[name]
    got = [(p.name, p.kind.name, p.default) for p in params.values()]
    assert got == expected


@pytest.mark.parametrize("name", OPS)
def test_python_wrapper_and_torch_ops_agree(device, name):
    x = make_input((4, 5, 33), torch.float32, device, "sliced")
    args = {"sum": ((1,),), "amax": ([0, 2],), "softmax": (1,), "reduce_scale": (), "reduce_scale_": ()}[name]
    a = getattr(reduce_ops, name)(x.clone(), *args)
    b = getattr(torch.ops.reduce_ops, name)(x.clone(), *args)
    for u, v in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        assert_exactly_equal(u, v)


# ---- sample inputs ---------------------------------------------------------------------------

def sample_inputs(name, device, requires_grad=False):
    """(args, kwargs) lists for `name`: a few shapes, dims, dtypes and layouts."""
    def t(shape, dtype=torch.float32, layout="contiguous"):
        x = make_input(shape, dtype, device, layout)
        if requires_grad:
            x = x.detach().clone().requires_grad_(True) if layout == "contiguous" else \
                x.detach().requires_grad_(True)
        return x

    dtypes = [torch.float64] if requires_grad else [torch.float32, torch.bfloat16]
    samples = []
    for dtype in dtypes:
        if name == "sum":
            samples += [((t((5, 7, 13), dtype), [0, 2], True), {}),
                        ((t((5, 7, 13), dtype, "transposed"), [1], False), {}),
                        ((t((33,), dtype), None, False), {}),
                        ((t((4, 9), dtype), [-1], False), {"dtype": torch.float64 if requires_grad else torch.float32})]
        elif name == "amax":
            samples += [((t((5, 7, 13), dtype), [0, 2], True), {}),
                        ((t((5, 7, 13), dtype, "sliced"), [-1], False), {}),
                        ((t((33,), dtype), None, False), {})]
        elif name == "softmax":
            samples += [((t((5, 7, 13), dtype), -1), {}),
                        ((t((5, 7, 13), dtype, "permuted"), 0), {}),
                        ((t((4, 1025), dtype), 1), {"dtype": torch.float64 if requires_grad else torch.float32})]
        elif name in ("reduce_scale", "reduce_scale_"):
            samples += [((t((5, 7, 13), dtype),), {}),
                        ((t((4, 129), dtype, "sliced"),), {"eps": 1e-3}),
                        ((t((33,), dtype),), {})]
    return samples


# ---- autograd detection ----------------------------------------------------------------------

_AUTOGRAD_MISSING = ("does not require grad", "not implemented", "autograd kernel was not registered",
                     "not registered", "does not have a grad_fn")


def autograd_missing_reason(name, device="cpu"):
    """None when autograd works for `name`, else why not (the test is then skipped).

    Tries a forward and a backward on a float64 input: an op with no autograd registration
    gives an output that does not require grad, raises, or warns that the autograd kernel was
    not registered (torch's fallback).
    """
    x = torch.randn(3, 5, dtype=torch.float64, device=device, requires_grad=True)
    op = getattr(torch.ops.reduce_ops, name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = op(x)
            out = out[0] if isinstance(out, tuple) else out
            if not out.requires_grad:
                return f"autograd is not registered for reduce_ops::{name} yet (output does not require grad)"
            out.sum().backward()
    except (RuntimeError, UserWarning, NotImplementedError) as e:
        message = str(e)
        if any(m in message for m in _AUTOGRAD_MISSING):
            return f"autograd is not registered for reduce_ops::{name} yet: {message.splitlines()[0][:200]}"
        raise
    if x.grad is None:
        return f"autograd is not registered for reduce_ops::{name} yet (no gradient reached x)"
    return None


def require_autograd(name, device="cpu"):
    reason = autograd_missing_reason(name, device)
    if reason is not None:
        pytest.skip(reason)


# ---- opcheck ---------------------------------------------------------------------------------

NO_AUTOGRAD_TEST_UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("name", OPS)
def test_opcheck(device, name):
    # Inputs do not require grad here; test_autograd_registration is run below, once autograd is in.
    for args, kwargs in sample_inputs(name, device):
        if name == "reduce_scale_":
            args = (args[0].clone(),) + args[1:]
        torch.library.opcheck(getattr(torch.ops.reduce_ops, name).default, args, kwargs,
                              test_utils=NO_AUTOGRAD_TEST_UTILS)


@pytest.mark.parametrize("name", DIFFERENTIABLE_OPS)
def test_opcheck_with_autograd(device, name):
    require_autograd(name, device)
    for args, kwargs in sample_inputs(name, device, requires_grad=True):
        torch.library.opcheck(getattr(torch.ops.reduce_ops, name).default, args, kwargs)


@pytest.mark.parametrize("name", DIFFERENTIABLE_OPS)
def test_gradcheck(device, name):
    require_autograd(name, device)
    for args, kwargs in sample_inputs(name, device, requires_grad=True):
        fn = getattr(reduce_ops, name)
        # amax and reduce_scale: random float64 inputs have a unique, well separated max,
        # so the finite differences never move the argmax.
        assert torch.autograd.gradcheck(lambda x: fn(x, *args[1:], **kwargs), (args[0],), eps=1e-6,
                                        atol=1e-7, rtol=1e-5)


def test_softmax_backward_matches_torch(device):
    require_autograd("softmax", device)
    for cols in (7, 1025, 70000):
        x = make_input((3, cols), torch.float32, device).requires_grad_(True)
        g = make_input((3, cols), torch.float32, device)
        reduce_ops.softmax(x, -1).backward(g)
        x_ref = x.detach().double().requires_grad_(True)
        torch.softmax(x_ref, -1).backward(g.double())
        torch.testing.assert_close(x.grad.double(), x_ref.grad, rtol=1e-4, atol=1e-7)


def test_softmax_backward_is_its_own_op(device):
    # SPEC: "softmax's backward is its own op with CPU and CUDA kernels" (not a chain of aten ops).
    require_autograd("softmax", device)
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    x = make_input((4, 129), torch.float32, device).requires_grad_(True)
    y = reduce_ops.softmax(x, -1)
    with Recorder() as recorder:
        y.backward(torch.ones_like(y))
    assert any(op.startswith("reduce_ops.") and "backward" in op for op in recorder.ops), recorder.ops


# ---- torch.compile ---------------------------------------------------------------------------

def every_op(x):
    s = reduce_ops.sum(x, (0, 2), keepdim=True)
    s32 = reduce_ops.sum(x, -1, dtype=torch.float32)
    a = reduce_ops.amax(x, [1])
    a_all = reduce_ops.amax(x)
    p = reduce_ops.softmax(x, -1)
    p0 = reduce_ops.softmax(x, 0, dtype=torch.float32)
    out, scale = reduce_ops.reduce_scale(x, eps=1e-6)
    y = x * 2  # a fresh buffer for the in-place op
    scale_ = reduce_ops.reduce_scale_(y)
    return s, s32, a, a_all, p, p0, out, scale, y, scale_


EXACT_RESULTS = {0, 1, 2, 3, 7, 9}  # sums are deterministic, maxima and scales exact


def compile_backends(device):
    backends = ["eager", "aot_eager"]
    if device == "cuda":
        backends.append("inductor")
    return backends


def check_compiled_matches_eager(fn, compiled, x):
    expected = fn(x)
    got = compiled(x)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape and g.dtype == e.dtype and g.device == e.device, i
        if i in EXACT_RESULTS:
            assert_exactly_equal(g, e)
        else:
            torch.testing.assert_close(g, e, equal_nan=True)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_torch_compile_fullgraph(device, backend, dynamic):
    if backend not in compile_backends(device):
        pytest.skip("inductor is exercised on CUDA only (CPU inductor needs a C++ build, slow on CI)")
    torch._dynamo.reset()
    compiled = torch.compile(every_op, backend=backend, fullgraph=True, dynamic=dynamic)
    for shape in [(4, 6, 33), (5, 3, 129), (2, 7, 1025)]:
        for dtype in (torch.float32, torch.bfloat16):
            check_compiled_matches_eager(every_op, compiled, make_input(shape, dtype, device))


def test_torch_compile_dynamic_does_not_recompile_per_shape(device):
    torch._dynamo.reset()
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    compiled = torch.compile(every_op, backend=counter, fullgraph=True, dynamic=True)
    for shape in [(4, 6, 33), (5, 3, 129), (6, 7, 1025)]:
        check_compiled_matches_eager(every_op, compiled, make_input(shape, torch.float32, device))
    assert counter.frame_count == 1, f"{counter.frame_count} compilations for 3 shapes"


# ---- CUDA: graphs, streams, devices, no host sync --------------------------------------------

@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(4, 6, 33), (3, 2, 70000), (1, 1, 1 << 20)], ids=str)
def test_cuda_graph_capture_and_replay(dtype, shape):
    static_x = make_input(shape, dtype, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as torch recommends
        for _ in range(2):
            every_op(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = every_op(static_x)
    for _ in range(3):
        new_x = make_input(shape, dtype, "cuda")
        static_x.copy_(new_x)
        graph.replay()
        torch.cuda.synchronize()
        expected = every_op(new_x)
        for i, (g, e) in enumerate(zip(static_out, expected)):
            if i in EXACT_RESULTS:
                assert_exactly_equal(g, e)
            else:
                torch.testing.assert_close(g, e, equal_nan=True)


@requires_cuda
def test_cuda_graphs_of_split_reductions_replay_concurrently():
    # A captured split reduction takes its last-block counters from a pool that each capture
    # draws its own slice of (no fill node in the graph). Two graphs replayed at once on two
    # streams, beside eager calls on a third, must not share counters: a shared one would pick
    # the wrong last block and fold a row before all its partials arrived.
    # (64, 5, 4096) over (0, 2): the runs of two groups of dims, each row split in 64 segments.
    cases = [((1 << 22,), None), ((5000, 8), 0), ((3, 70001), -1), ((20000, 24), 0), ((64, 5, 4096), (0, 2))]
    xs = [make_input(shape, torch.float32, "cuda") for shape, _ in cases]
    expected = [reduce_ops.sum(x, dim) for x, (_, dim) in zip(xs, cases)]
    graphs, outs = [], []
    for part in (cases[:2], cases[2:]):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs.append([reduce_ops.sum(xs[cases.index(c)], c[1]) for c in part])
        graphs.append(graph)
    streams = [torch.cuda.Stream() for _ in range(3)]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(20):
        for graph, stream in zip(graphs, streams):
            with torch.cuda.stream(stream):
                graph.replay()
        with torch.cuda.stream(streams[2]):
            eager = [reduce_ops.sum(x, dim) for x, (_, dim) in zip(xs, cases)]
    torch.cuda.synchronize()
    for got, want in zip(outs[0] + outs[1], expected):
        assert_exactly_equal(got, want)
    for got, want in zip(eager, expected):
        assert_exactly_equal(got, want)


@requires_cuda
def test_cuda_graphs_of_split_reductions_past_the_slot_pool():
    # Captured split reductions publish their partials in flagged slots taken from a module pool,
    # one piece a capture and stream, shared by the capture's reductions on that stream (a whole
    # float32 sum of 2^22 elements takes 1024 slots, the bfloat16 amax of (3, 70001) 27 of the
    # same piece). Past the pool (65536 slots), captures take zeroed buffers of their own (a fill
    # node). 80 graphs of both, replayed on new inputs after all are captured: eager's bits.
    x = make_input((1 << 22,), torch.float32, "cuda")
    y = make_input((3, 70001), torch.bfloat16, "cuda")

    def both():
        return reduce_ops.sum(x), reduce_ops.amax(y, -1)

    both()  # eager first: the pools' addresses are asked outside the captures
    graphs = []
    for _ in range(80):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = both()
        graphs.append((graph, outs))
    x.copy_(make_input(x.shape, x.dtype, "cuda"))
    y.copy_(make_input(y.shape, y.dtype, "cuda"))
    for graph, _ in graphs:
        graph.replay()
    torch.cuda.synchronize()
    expected = both()
    for _, outs in graphs:
        for got, want in zip(outs, expected):
            assert_exactly_equal(got, want)


# Column reductions whose segments' partials a second launch folds, a programmatic dependent of
# the first (reduce.cu's launch_fold_partial_words), and the knobs that take them there (read at
# capture): packed unaligned columns (REDUCE_OPS_COLS_PACKED=on): (8192, 77) and (4096, 197)
# split the rows over blocks, (5000, 8, 77) over dim 1 does not (one launch, 5000 outer indices);
# aligned columns split in segments (from 2 with REDUCE_OPS_COLS_FOLD_LAUNCH=2): (20000, 24) and
# (3, 3000, 16) in a few, (300000, 8) in more than 128 (a block a word), (4096, 2048) in a few
# with 512-1024 words of partials (a warp a word).
GRAPH_SECOND_LAUNCH_CASES = {
    "packed": ({"REDUCE_OPS_COLS_PACKED": "on"}, [((8192, 77), 0), ((4096, 197), 0), ((5000, 8, 77), 1)]),
    "aligned": ({"REDUCE_OPS_COLS_FOLD_LAUNCH": "2"},
                [((20000, 24), 0), ((3, 3000, 16), 1), ((300000, 8), 0), ((4096, 2048), 0)]),
}


@requires_cuda
@pytest.mark.parametrize("columns", list(GRAPH_SECOND_LAUNCH_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_cuda_graph_of_columns_folded_by_a_second_launch(monkeypatch, columns, dtype):
    # Captured, replayed on new inputs: eager's bits.
    env, cases = GRAPH_SECOND_LAUNCH_CASES[columns]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    xs = [make_input(shape, dtype, "cuda") for shape, _ in cases]
    for x, (_, dim) in zip(xs, cases):  # warm-up outside the capture
        reduce_ops.sum(x, dim)
        reduce_ops.amax(x, dim)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [(reduce_ops.sum(x, dim), reduce_ops.amax(x, dim)) for x, (_, dim) in zip(xs, cases)]
    for _ in range(3):
        for x, (shape, _) in zip(xs, cases):
            x.copy_(make_input(shape, dtype, "cuda"))
        graph.replay()
        torch.cuda.synchronize()
        for x, (_, dim), (got_sum, got_max) in zip(xs, cases, outs):
            assert_exactly_equal(got_sum, reduce_ops.sum(x, dim))
            assert_exactly_equal(got_max, reduce_ops.amax(x, dim))


@requires_cuda
def test_cuda_graph_of_split_inner_softmax(monkeypatch):
    # The split inner-dim softmax and its backward (REDUCE_OPS_STRATEGY=split, read at capture)
    # fold through last-block counters too: captured, replayed on new inputs, eager's bits.
    monkeypatch.setenv("REDUCE_OPS_STRATEGY", "split")
    static_x = make_input((20000, 24), torch.float32, "cuda")
    static_g = make_input((20000, 24), torch.float32, "cuda")
    reduce_ops.softmax(static_x, 0)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = reduce_ops.softmax(static_x, 0)
        gx = reduce_ops.softmax_backward(static_g, y, 0)
    for _ in range(3):
        static_x.copy_(make_input((20000, 24), torch.float32, "cuda"))
        static_g.copy_(make_input((20000, 24), torch.float32, "cuda"))
        graph.replay()
        torch.cuda.synchronize()
        want_y = reduce_ops.softmax(static_x, 0)
        assert_exactly_equal(y, want_y)
        assert_exactly_equal(gx, reduce_ops.softmax_backward(static_g, want_y, 0))


@requires_cuda
@pytest.mark.parametrize("name", OPS)
def test_ops_run_on_the_current_stream(name):
    # The side stream sleeps before it writes x; an op that launched on another stream would
    # read x before it is written.
    shape = (64, 4099)
    expected_x = make_input(shape, torch.float32, "cuda")
    expected = getattr(reduce_ops, name)(expected_x.clone())
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    x = torch.zeros(shape, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time on this stream only
        x.copy_(expected_x)
        got = getattr(reduce_ops, name)(x)
        got = tuple(g.clone() for g in got) if isinstance(got, tuple) else got.clone()
    side.synchronize()
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for g, e in zip(got, expected):
        if name in ("sum", "amax"):
            assert_exactly_equal(g, e)
        else:
            torch.testing.assert_close(g, e)


@requires_cuda
@pytest.mark.parametrize("name", OPS)
def test_ops_do_not_synchronize_the_host(name):
    x = make_input((64, 4099), torch.float32, "cuda")
    getattr(reduce_ops, name)(x.clone())  # first call may set things up
    torch.cuda.synchronize()
    y = x.clone()
    torch.cuda.set_sync_debug_mode("error")
    try:
        getattr(reduce_ops, name)(y)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@requires_two_gpus
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("shape", [(5, 7, 1025), (3, 1 << 18)], ids=str)  # (3, 2^18): the row clusters
def test_ops_on_a_second_cuda_device(name, shape):
    x1 = make_input(shape, torch.bfloat16, "cuda:1")
    x0 = x1.to("cuda:0")
    with torch.cuda.device(0):  # the current device is not the input's
        got = getattr(reduce_ops, name)(x1.clone())
    expected = getattr(reduce_ops, name)(x0.clone())
    for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        assert g.device == torch.device("cuda:1")
        assert_same_bits(g.cpu(), e.cpu())


@requires_two_gpus
@pytest.mark.parametrize("shape", [(5, 7, 1025), (3, 1 << 18)], ids=str)
def test_softmax_backward_on_a_second_cuda_device(shape):
    out1 = torch.softmax(make_input(shape, torch.bfloat16, "cuda:1"), -1)
    grad1 = make_input(shape, torch.bfloat16, "cuda:1")
    with torch.cuda.device(0):  # the current device is not the inputs'
        got = reduce_ops.softmax_backward(grad1, out1, -1)
    expected = reduce_ops.softmax_backward(grad1.to("cuda:0"), out1.to("cuda:0"), -1)
    assert got.device == torch.device("cuda:1")
    assert_same_bits(got.cpu(), expected.cpu())


# ---- CPU kernels: the same bits whatever the threads and the instruction set ------------------

def cpu_results():
    """Every CPU entry on inputs with vector tails, strided rows, long (chunked) rows, columns,
    NaN and -inf: {case: output}."""
    g = torch.Generator().manual_seed(11)
    results = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for shape in ((37, 1000), (3, 20011), (100003,), (5, 7, 9)):
            x = (torch.randn(shape, generator=g, dtype=torch.float64) * 30).to(dtype)
            x.view(-1)[::97] = float("-inf")
            if x.dim() == 2:
                x[1, 5] = float("nan")
            finite = x.nan_to_num(0.0, 0.0, 0.0)
            key = f"{dtype}-{shape}"
            results[key + "-sum"] = reduce_ops.sum(x, -1)
            results[key + "-sum0"] = reduce_ops.sum(finite, 0)
            results[key + "-sumall"] = reduce_ops.sum(finite)
            results[key + "-amax"] = reduce_ops.amax(x, -1)
            results[key + "-amax0"] = reduce_ops.amax(x, 0)
            results[key + "-softmax"] = reduce_ops.softmax(x, -1)
            results[key + "-softmax0"] = reduce_ops.softmax(x, 0)
            results[key + "-rs"] = reduce_ops.reduce_scale(finite)
            if x.dim() > 1:
                results[key + "-strided"] = reduce_ops.sum(x.transpose(0, -1), 0)
                out = reduce_ops.softmax(x, -1)
                results[key + "-backward"] = torch.ops.reduce_ops.softmax_backward(finite, out, -1)
            if dtype != torch.float64:
                results[key + "-widened"] = reduce_ops.softmax(x, -1, dtype=torch.float32)
    return results


def assert_same_results(first, other, what):
    for key, value in first.items():
        a_parts = value if isinstance(value, tuple) else (value,)
        b_parts = other[key] if isinstance(other[key], tuple) else (other[key],)
        for a, b in zip(a_parts, b_parts):
            try:
                assert_same_bits(a, b)
            except AssertionError:
                raise AssertionError(f"{key}: {what} differ") from None


def test_cpu_kernels_give_the_same_bits_whatever_the_thread_count():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cpu_results()
        torch.set_num_threads(3)  # an odd split of every task range
        assert torch.get_num_threads() == 3
        assert_same_results(one, cpu_results(), "1 and 3 threads")
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("cols", [3 * 8192 + 11, (1 << 18) + 8192 + 3], ids=["exp-kept", "exp-again"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64],
                         ids=lambda d: str(d)[6:])
def test_cpu_softmax_row_gives_the_same_bits_alone_or_among_many(dtype, cols):
    # Long rows go one task a row when there are rows enough for the threads (4 a thread; the
    # row's exp kept from the statistics pass up to 2^18 columns, taken again beyond) and one task
    # a chunk otherwise (exp taken again): the same bits either way. One thread makes 4 rows many.
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(4, cols, generator=g, dtype=torch.float64) * 30).to(dtype)
    x[2, 8192:16384] = float("-inf")  # a chunk of -inf only
    x[3, 0] = float("nan")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        many = reduce_ops.softmax(x, -1)
        for r in range(4):
            assert_same_bits(many[r:r + 1], reduce_ops.softmax(x[r:r + 1], -1))
    finally:
        torch.set_num_threads(threads)


# torch reads ATEN_CPU_CAPABILITY once per process, and the CPU kernels follow its choice.
_CPU_TARGET_SCRIPT = """
import sys, torch
sys.path.insert(0, sys.argv[2])
from test_integration import cpu_results
results = cpu_results()
results["capability"] = torch.backends.cpu.get_cpu_capability()
torch.save(results, sys.argv[1])
"""


def test_cpu_kernels_give_the_same_bits_on_every_instruction_set(tmp_path):
    runs = {}
    for capability in ("default", "avx2", "avx512"):
        path = tmp_path / f"{capability}.pt"
        env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
        subprocess.run([sys.executable, "-c", _CPU_TARGET_SCRIPT, str(path), os.path.dirname(__file__)],
                       env=env, check=True)
        results = torch.load(path)
        runs.setdefault(results.pop("capability"), results)
    if len(runs) < 2:
        pytest.skip(f"this CPU offers one instruction set to compare ({list(runs)})")
    (first_name, first), *others = runs.items()
    for name, results in others:
        assert_same_results(first, results, f"{first_name} and {name}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64],
                         ids=lambda d: str(d)[6:])
def test_cpu_row_reductions_give_the_same_bits_whatever_the_row_stride(dtype):
    # The lanes take a run's elements in one fixed order for every stride (bfloat16's even/odd
    # split included), so a strided row sums and maxes as its dense copy does. Magnitudes over
    # 2^-20..2^20 make the float partial sums round (sums of nearby bfloat16 values are exact in
    # any order), and the float32 result keeps what a bfloat16 one would round away.
    gen = torch.Generator().manual_seed(0)
    wide = torch.randn(6, 2 * 20003, generator=gen) * torch.exp2(torch.randint(-20, 21, (6, 2 * 20003), generator=gen))
    strided = wide.to(dtype)[:, ::2]
    dense = strided.contiguous()
    assert strided.stride(-1) == 2
    out_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    assert_same_bits(reduce_ops.sum(strided, -1, dtype=out_dtype), reduce_ops.sum(dense, -1, dtype=out_dtype))
    assert_same_bits(reduce_ops.amax(strided, -1), reduce_ops.amax(dense, -1))
