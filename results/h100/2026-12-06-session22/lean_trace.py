"""Session 22: where 1 x 65536's k1024 spends its extra ~0.5 us (lean_regs<8, 2>, the trace build's stamps: thread 0
of each of the row's 8 CTAs), the bench cases b1-65536 and b1-65536-k1024, L2 flushed before each call. Phases: 0 entry
(before the PDL wait), 1 n known, 2 thread 0's keys counted, 3 the cluster barrier after the histograms and window
bounds, 4 the threshold read, 6 the counting scan, 7 placed, 5 past the write-out's cluster barrier, 8 done (rank 0:
ranked). Median over 30 calls of each CTA's stamp, us after the earliest entry of the call."""
import os
import statistics
import sys

import torch

import kernels_cuda
from harness import cases, check, timer
from kernels_cuda import _loader
from kernels_cuda.topk_trace import read_trace

topk = sys.modules["kernels_cuda.topk_indices"]
topk.DEFINES["WIDE_TRACE"] = 1
_loader.forget_builds()
device = torch.device("cuda", 0)
sms, clusters = topk._device(0)
ORDER = (0, 1, 2, 3, 4, 6, 7, 5, 8)
for name in ("b1-65536", "b1-65536-k1024"):
    case = cases.find("topk_indices", name)
    x = cases.build(case, device)
    calls = check.op_calls(case, x)
    plans = check.make_plans(kernels_cuda, case, calls)
    print(name, topk._launches_from_env(1, 65536, True, sms, clusters, os.environ)[0][:2])

    def call():
        check.run_calls(kernels_cuda, case, x, calls, plans, validate=False)

    call()
    flush = timer.l2_flush_buffer(device)
    trace = read_trace(0)
    runs = []
    for _ in range(30):
        trace.fill(0)
        flush.zero_()
        torch.cuda.synchronize(device)
        call()
        torch.cuda.synchronize(device)
        ns = trace.get()[:8, :, 0].astype("int64")
        origin = ns[:, 0].min()
        runs.append([[int(ns[r, p]) - origin if ns[r, p] else -1 for p in range(9)] for r in range(8)])
    print("rank " + " ".join(f"{p:>6d}" for p in ORDER))
    for r in range(8):
        cells = []
        for p in ORDER:
            at = [run[r][p] for run in runs if run[r][p] >= 0]
            cells.append(f"{statistics.median(at) / 1e3:6.2f}" if at else f"{'-':>6s}")
        print(f"{r:4d} " + " ".join(cells))
