"""Run backend BACKEND's op OP once per named bench case, three calls each (under ncu: profile one).
usage: ncu_any.py BACKEND OP CASE [CASE ...]"""
import sys
import torch
from harness import cases, check, backends
mod = backends.load(sys.argv[1]).module
op = sys.argv[2]
for name in sys.argv[3:]:
    case = [c for group in cases.BENCH.values() for c in group if c.name == name and c.op == op][0]
    x = cases.build(case, "cuda")
    for _ in range(3):
        check.run_op(mod, case, x, planned=True)
    torch.cuda.synchronize()
    print("ran", sys.argv[1], name, flush=True)
