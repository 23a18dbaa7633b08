"""Reproducer: an IndexError raised by a reduce_ops kernel on CUDA (0-d input, dim out of range)."""
import torch
import reduce_ops

for dev in ["cpu", "cuda"]:
    for x, d in [(torch.randn(3, device=dev), 2), (torch.tensor(2.0, device=dev), 1)]:
        try:
            reduce_ops.sum(x, d)
        except IndexError as e:
            print(dev, x.dim(), "IndexError:", e, flush=True)
print("no crash")
