"""Python wrappers and fake (meta) implementations of the reduce_ops operators.

The kernels live in C++ (``csrc/``); this file only forwards arguments and tells
``torch.compile`` the shape and dtype of each result.
"""
from typing import Optional, Sequence, Tuple, Union

import torch

_ops = torch.ops.reduce_ops
DimArg = Union[None, int, Sequence[int]]
_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _dim_list(dim: DimArg) -> Optional[list]:
    if dim is None:
        return None
    if isinstance(dim, int):
        return [dim]
    return [int(d) for d in dim]


def sum(x: torch.Tensor, dim: DimArg = None, keepdim: bool = False, *,
        dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Sum of ``x`` over ``dim``, as ``torch.sum(x, dim, keepdim, dtype=dtype)``.

    ``dim`` is an int, a list or tuple of ints, or None for every dim. float16 and bfloat16
    accumulate in float32, float64 in float64. The result has the same bits on every run
    (fixed reduction order, no atomics).
    """
    return _ops.sum(x, _dim_list(dim), keepdim, dtype=dtype)


def amax(x: torch.Tensor, dim: DimArg = None, keepdim: bool = False) -> torch.Tensor:
    """Maximum of ``x`` over ``dim``, as ``torch.amax(x, dim, keepdim)``; None reduces every dim.

    A NaN in a reduced slice makes that result NaN; reducing over a dim of size 0 raises.
    """
    return _ops.amax(x, _dim_list(dim), keepdim)


def softmax(x: torch.Tensor, dim: int = -1, *, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Softmax of ``x`` along ``dim``, as ``torch.softmax(x, dim, dtype=dtype)``.

    Rows of any length work, up to the whole tensor (``softmax(x.flatten(), 0)``).
    A row that is all ``-inf`` gives NaN, as in torch.
    """
    return _ops.softmax(x, dim, dtype=dtype)


def reduce_scale(x: torch.Tensor, *, eps: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Row-wise absmax scaling over the last dim: returns ``(out, scale)``.

    ``scale = max(amax(|x|, -1, keepdim=True), eps)`` computed and returned in float32
    (float64 for float64 input); ``out = x / scale`` in ``x.dtype``, except that a row whose
    scale is 0 gives 0. A NaN in a row makes that row's scale and out NaN.
    """
    return _ops.reduce_scale(x, eps=eps)


def reduce_scale_(x: torch.Tensor, *, eps: float = 0.0) -> torch.Tensor:
    """In-place :func:`reduce_scale`: writes ``out`` into ``x`` and returns ``scale``."""
    return _ops.reduce_scale_(x, eps=eps)


# ---------------------------------------------------------------------------------------------
# Fake implementations: shapes, dtypes and the same argument errors as the kernels.

def _check_dtype(op: str, dtype: torch.dtype) -> None:
    if dtype not in _SUPPORTED:
        raise RuntimeError(f"reduce_ops.{op}: unsupported dtype {dtype}; expected float16, "
                           "bfloat16, float32 or float64")


def _wrap_dim(op: str, d: int, ndim: int) -> int:
    rank = max(ndim, 1)
    if d < -rank or d >= rank:
        raise IndexError(f"reduce_ops.{op}: dim {d} out of range for a tensor of {ndim} dims "
                         f"(expected to be in range of [{-rank}, {rank - 1}])")
    return d % rank


def _reduced_dims(op: str, x: torch.Tensor, dim: Optional[Sequence[int]]) -> list:
    if dim is None or len(dim) == 0:
        return list(range(x.dim()))
    dims = [_wrap_dim(op, d, x.dim()) for d in dim]
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"reduce_ops.{op}: dim {dims} has a dim that appears more than once")
    return [d for d in dims if d < x.dim()]


def _reduced_shape(x: torch.Tensor, dims: list, keepdim: bool) -> list:
    if keepdim:
        return [1 if i in dims else s for i, s in enumerate(x.shape)]
    return [s for i, s in enumerate(x.shape) if i not in dims]


@torch.library.register_fake("reduce_ops::sum")
def _sum_fake(x, dim=None, keepdim=False, *, dtype=None):
    _check_dtype("sum", x.dtype)
    out_dtype = x.dtype if dtype is None else dtype
    _check_dtype("sum", out_dtype)
    dims = _reduced_dims("sum", x, dim)
    return x.new_empty(_reduced_shape(x, dims, keepdim), dtype=out_dtype)


def _check_amax_nonempty(x, dim, dims) -> None:
    # torch raises RuntimeError for an empty tensor with no dim named, IndexError for a named one.
    if x.numel() != 0:
        return
    if dim is None or len(dim) == 0:
        raise RuntimeError("reduce_ops.amax: cannot reduce an empty tensor over every dim; "
                           "name the dims to reduce")
    for d in dims:
        if x.shape[d] == 0:
            raise IndexError(f"reduce_ops.amax: cannot reduce over dim {d} of size 0")


@torch.library.register_fake("reduce_ops::amax")
def _amax_fake(x, dim=None, keepdim=False):
    _check_dtype("amax", x.dtype)
    dims = _reduced_dims("amax", x, dim)
    _check_amax_nonempty(x, dim, dims)
    return x.new_empty(_reduced_shape(x, dims, keepdim))


@torch.library.register_fake("reduce_ops::softmax")
def _softmax_fake(x, dim=-1, *, dtype=None):
    _check_dtype("softmax", x.dtype)
    out_dtype = x.dtype if dtype is None else dtype
    _check_dtype("softmax", out_dtype)
    _wrap_dim("softmax", dim, x.dim())
    return x.new_empty(x.shape, dtype=out_dtype)


def _scale_shape(x: torch.Tensor) -> list:
    # Rows are the last dim; a 0-d tensor is one row of one element, as x.abs().amax(-1, True).
    return list(x.shape[:-1]) + [1] if x.dim() > 0 else []


def _scale_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _check_rows_nonempty(op: str, x: torch.Tensor) -> None:
    # The scale of a row of length 0 is an amax over nothing: torch raises, so do we.
    if x.dim() > 0 and x.shape[-1] == 0:
        raise IndexError(f"reduce_ops.{op}: rows (the last dim) have length 0")


@torch.library.register_fake("reduce_ops::reduce_scale")
def _reduce_scale_fake(x, *, eps=0.0):
    _check_dtype("reduce_scale", x.dtype)
    _check_rows_nonempty("reduce_scale", x)
    return x.new_empty(x.shape), x.new_empty(_scale_shape(x), dtype=_scale_dtype(x))


@torch.library.register_fake("reduce_ops::reduce_scale_")
def _reduce_scale_inplace_fake(x, *, eps=0.0):
    _check_dtype("reduce_scale_", x.dtype)
    _check_rows_nonempty("reduce_scale_", x)
    return x.new_empty(_scale_shape(x), dtype=_scale_dtype(x))


@torch.library.register_fake("reduce_ops::softmax_backward")
def _softmax_backward_fake(grad, out, dim):
    _check_dtype("softmax_backward", grad.dtype)
    if grad.shape != out.shape or grad.dtype != out.dtype:
        raise RuntimeError("reduce_ops.softmax_backward: grad and out differ in shape or dtype")
    _wrap_dim("softmax_backward", dim, grad.dim())
    return grad.new_empty(grad.shape)


def softmax_backward(grad: torch.Tensor, out: torch.Tensor, dim: int) -> torch.Tensor:
    """Gradient of softmax: ``out * (grad - (grad * out).sum(dim, keepdim=True))``.

    ``out`` is the softmax output; both tensors share shape and dtype.
    """
    return _ops.softmax_backward(grad, out, dim)


# ---------------------------------------------------------------------------------------------
# Autograd. Each backward is written with differentiable torch ops (and softmax_backward, which
# has a backward of its own), so double backward works too.

def _restore_reduced(grad: torch.Tensor, ctx) -> torch.Tensor:
    """grad with the reduced dims put back as size 1 (a keepdim=False result lost them)."""
    if not ctx.keepdim:
        for d in sorted(ctx.dims):
            grad = grad.unsqueeze(d)
    return grad


def _reduce_setup(ctx, inputs, output):
    x, dim, keepdim = inputs[0], inputs[1], inputs[2]
    ctx.dims = _reduced_dims("sum", x, dim)
    ctx.keepdim = keepdim
    ctx.shape = x.shape
    ctx.dtype = x.dtype


def _sum_setup(ctx, inputs, keyword_only_inputs, output):
    _reduce_setup(ctx, inputs, output)


def _sum_backward(ctx, grad):
    # d sum / dx = 1: the gradient broadcast back over the reduced dims.
    return _restore_reduced(grad, ctx).expand(ctx.shape).to(ctx.dtype), None, None


def _amax_setup(ctx, inputs, output):
    _reduce_setup(ctx, inputs, output)
    ctx.save_for_backward(inputs[0], output)


def _amax_backward(ctx, grad):
    # As torch: the gradient is split evenly among the elements equal to the max.
    x, out = ctx.saved_tensors
    tied = (x == _restore_reduced(out, ctx)).to(grad.dtype)
    count = tied.sum(ctx.dims, keepdim=True) if ctx.dims else tied
    return _restore_reduced(grad, ctx) * tied / count, None, None


def _softmax_setup(ctx, inputs, keyword_only_inputs, output):
    ctx.dim = inputs[1]
    ctx.dtype = inputs[0].dtype
    ctx.save_for_backward(output)


def _softmax_backward(ctx, grad):
    (out,) = ctx.saved_tensors
    return _ops.softmax_backward(grad.to(out.dtype), out, ctx.dim).to(ctx.dtype), None


def _softmax_backward_setup(ctx, inputs, output):
    grad, out, dim = inputs
    ctx.dim = dim
    ctx.save_for_backward(grad, out)


def _softmax_backward_backward(ctx, v):
    # gx = y * (g - <g, y>). Its vector-Jacobian products:
    #   d/dg: y * (v - <v, y>)                       = softmax_backward(v, y)
    #   d/dy: v * (g - <g, y>) - g * <v, y>
    grad, out = ctx.saved_tensors
    d = ctx.dim
    grad_grad = _ops.softmax_backward(v, out, d) if ctx.needs_input_grad[0] else None
    grad_out = None
    if ctx.needs_input_grad[1]:
        dot_gy = (grad * out).sum(d, keepdim=True)
        dot_vy = (v * out).sum(d, keepdim=True)
        grad_out = v * (grad - dot_gy) - grad * dot_vy
    return grad_grad, grad_out, None


def _reduce_scale_setup(ctx, inputs, keyword_only_inputs, output):
    ctx.eps = keyword_only_inputs.get("eps", 0.0)
    ctx.save_for_backward(inputs[0], output[1])


def _reduce_scale_backward(ctx, grad_out, grad_scale):
    # out_i = x_i / s with s = max(a, eps), a = max_j |x_j| over the row (a row with s == 0 has
    # out = 0, a constant). With g = grad_out and h = grad_scale:
    #   dL/dx_j = g_j / s + dL/ds * ds/dx_j,   dL/ds = h - sum_i g_i x_i / s^2,
    #   ds/dx_j = sign(x_j) / (number of ties) if |x_j| = a and a >= eps (clamp_min passes the
    #             gradient where a >= eps, as torch), else 0.
    x, scale = ctx.saved_tensors
    xs = x.to(scale.dtype)
    zero_row = scale == 0
    safe = torch.where(zero_row, torch.ones_like(scale), scale)
    dl_ds = torch.zeros_like(scale) if grad_scale is None else grad_scale
    grad_x = torch.zeros_like(xs)
    if grad_out is not None:
        g = torch.where(zero_row, torch.zeros_like(xs), grad_out.to(scale.dtype))
        grad_x = g / safe
        dl_ds = dl_ds - (g * xs).sum(-1, keepdim=True) / (safe * safe)
    absx = xs.abs()
    absmax = absx.amax(-1, keepdim=True)
    at_max = ((absx == absmax) & (absmax >= ctx.eps)).to(xs.dtype)
    ties = at_max.sum(-1, keepdim=True).clamp_min(1)
    grad_x = grad_x + at_max * torch.sign(xs) * dl_ds / ties
    return grad_x.to(x.dtype)


torch.library.register_autograd("reduce_ops::sum", _sum_backward, setup_context=_sum_setup)
torch.library.register_autograd("reduce_ops::amax", _amax_backward, setup_context=_amax_setup)
torch.library.register_autograd("reduce_ops::softmax", _softmax_backward, setup_context=_softmax_setup)
torch.library.register_autograd("reduce_ops::softmax_backward", _softmax_backward_backward,
                                setup_context=_softmax_backward_setup)
torch.library.register_autograd("reduce_ops::reduce_scale", _reduce_scale_backward,
                                setup_context=_reduce_scale_setup)
