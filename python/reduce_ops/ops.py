"""Python wrappers and fake (meta) implementations of the reduce_ops operators.

The kernels and their autograd live in C++ (``csrc/``, autograd in ``csrc/autograd.cpp``); this
file only forwards arguments and tells ``torch.compile`` the shape and dtype of each result.
"""
from typing import Optional, Sequence, Tuple, Union

import torch

_ops = torch.ops.reduce_ops
DimArg = Union[None, int, Sequence[int]]
# The wrappers call each op's overload directly and pass keyword arguments only when they differ
# from the schema's defaults: the packet's overload lookup and torch.ops' keyword handling cost
# 0.1 and 0.45 us a call (EPYC, 1024 floats: reduce_ops.sum 3.65 -> 3.2 us; torch's own 1.5).
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
    if dtype is None:
        return _ops.sum.default(x, _dim_list(dim), keepdim)
    return _ops.sum.default(x, _dim_list(dim), keepdim, dtype=dtype)


def amax(x: torch.Tensor, dim: DimArg = None, keepdim: bool = False) -> torch.Tensor:
    """Maximum of ``x`` over ``dim``, as ``torch.amax(x, dim, keepdim)``; None reduces every dim.

    A NaN in a reduced slice makes that result NaN; reducing over a dim of size 0 raises.
    """
    return _ops.amax.default(x, _dim_list(dim), keepdim)


def softmax(x: torch.Tensor, dim: int = -1, *, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Softmax of ``x`` along ``dim``, as ``torch.softmax(x, dim, dtype=dtype)``.

    Rows of any length work, up to the whole tensor (``softmax(x.flatten(), 0)``).
    A row that is all ``-inf`` gives NaN, as in torch.
    """
    if dtype is None:
        return _ops.softmax.default(x, dim)
    return _ops.softmax.default(x, dim, dtype=dtype)


def reduce_scale(x: torch.Tensor, *, eps: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Row-wise absmax scaling over the last dim: returns ``(out, scale)``.

    ``scale = max(amax(|x|, -1, keepdim=True), eps)`` computed and returned in float32
    (float64 for float64 input); ``out = x / scale`` in ``x.dtype``, except that a row whose
    scale is 0 gives 0. A NaN in a row makes that row's scale and out NaN.
    """
    if eps == 0.0:
        return _ops.reduce_scale.default(x)
    return _ops.reduce_scale.default(x, eps=eps)


def reduce_scale_(x: torch.Tensor, *, eps: float = 0.0) -> torch.Tensor:
    """In-place :func:`reduce_scale`: writes ``out`` into ``x`` and returns ``scale``.

    Not differentiable (it overwrites the ``x`` its gradient needs): raises if ``x`` requires grad
    while grad mode is on.
    """
    if eps == 0.0:
        return _ops.reduce_scale_.default(x)
    return _ops.reduce_scale_.default(x, eps=eps)


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
    return _ops.softmax_backward.default(grad, out, dim)
