"""reduce-ops: fast reductions (sum, amax), softmax and row-wise ReduceScale for PyTorch.

Every op is a registered ATen operator, also reachable as ``torch.ops.reduce_ops.<name>``,
with CPU and CUDA kernels and a fake implementation for ``torch.compile``.
"""
import torch  # noqa: F401  (loads libtorch before our library)

from . import _C  # noqa: F401  (registers the operators)
from .ops import amax, reduce_scale, reduce_scale_, softmax, softmax_backward, sum  # noqa: A004

__all__ = ["sum", "amax", "softmax", "softmax_backward", "reduce_scale", "reduce_scale_",
           "has_cuda_kernels"]
__version__ = "0.1.0"


def has_cuda_kernels() -> bool:
    """True when this build carries the CUDA kernels (it may still run on a machine with no GPU)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("reduce_ops::sum", "CUDA")
