"""Run the CUDA top-k once per named bench case (under ncu: the third call of each is profiled)."""
import sys
import torch
from harness import cases, check, backends
cuda = backends.load("cuda").module
for name in sys.argv[1:]:
    case = [c for group in cases.BENCH.values() for c in group if c.name == name and c.op == "topk_indices"][0]
    x = cases.build(case, "cuda")
    torch.cuda.nvtx.range_push(name)
    for _ in range(3):
        check.run_op(cuda, case, x, planned=True)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    print("ran", name, flush=True)
