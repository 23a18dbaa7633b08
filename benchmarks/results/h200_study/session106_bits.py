"""Outputs of the split row reductions (whole, few long rows, two groups' runs, one-round splits), saved by one
build and compared bit for bit by another: python session106_bits.py save|check FILE (CUDA)."""
import sys
import torch
import reduce_ops

torch.manual_seed(0)
CASES = [((1 << 20,), None), ((1 << 22,), None), ((1 << 24,), None), ((140003,), None), ((4, 65536), -1),
         ((8, 1 << 21), -1), ((3, 70001), -1), ((64, 5, 4096), (0, 2)), ((16, 1 << 20), -1), ((1 << 26,), None)]
out = {}
for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
    for shape, dim in CASES:
        x = (torch.randn(shape, device="cuda", dtype=torch.float64) * 3 + 0.5).to(dt)
        key = f"{dt}-{shape}-{dim}"
        out[key + "-sum"] = reduce_ops.sum(x, dim).cpu()
        out[key + "-sum32"] = reduce_ops.sum(x, dim, dtype=torch.float32).cpu() if dt != torch.float64 else out[key + "-sum"]
        out[key + "-amax"] = reduce_ops.amax(x, dim).cpu()
        for _ in range(3):  # the same bits on every run (slots and counters reset by each launch)
            again = reduce_ops.sum(x, dim).cpu()
            assert torch.equal(again.view(-1).view(torch.uint8), out[key + "-sum"].view(-1).view(torch.uint8)), key
if sys.argv[1] == "save":
    torch.save(out, sys.argv[2])
    print("saved", len(out))
else:
    ref = torch.load(sys.argv[2])
    bad = [k for k in ref if not torch.equal(ref[k].view(-1).view(torch.uint8), out[k].view(-1).view(torch.uint8))]
    print(f"{len(ref) - len(bad)} of {len(ref)} identical; differ: {bad[:10]}")
