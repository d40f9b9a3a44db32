"""Session 18: is the mixed batch's chain waiting on its own code after the bench's L2 flush? Trace build
(DSV4_TOPK_TRACE=1), the planned call on a second copy of the inputs (B) in three states: everything cold (flush,
then B), code warm and data cold (flush, a call on copy A, then B: A's call brings the same code path into L2, B's
rows stay cold), everything warm (B right after B). Median cycles a phase by class of CTA (topk_trace's classes),
and the first entry to the last stamp. (Call 7 ran a copy that called A with B's tensors: its "code warm" was all
warm.) usage: probe_code.py OUT_DIR [CASE]"""
import json
import os
import statistics as st
import sys

import numpy as np
import torch

import kernels_cuda
from harness import cases, check, timer
from kernels_cuda import topk_trace

T = sys.modules["kernels_cuda.topk_indices"]
assert T.DEFINES["WIDE_TRACE"], "run with DSV4_TOPK_TRACE=1"
dev = torch.device("cuda", 0)
name = sys.argv[2] if len(sys.argv) > 2 else "b64-mixed-to-262144"
case = cases.find("topk_indices", name)
xa, xb = cases.build(case, dev), cases.build(case, dev)  # the same values at other addresses
calls = {"a": check.op_calls(case, xa), "b": check.op_calls(case, xb)}  # (args, kwargs) on each copy's tensors
plans = check.make_plans(kernels_cuda, case, calls["b"])  # (the same metadata values: one plan serves both)
cluster = plans[0]["launch"][0]
named = topk_trace.classes(plans[0]["work"].cpu().numpy(), cluster)


def call(x):
    return check.run_calls(kernels_cuda, case, x, calls["a" if x is xa else "b"], plans, validate=False)


call(xa)
call(xb)
flush = timer.l2_flush_buffer(dev)
trace = topk_trace.read_trace(0)
runs = {"cold": [], "code warm": [], "warm": []}
for _ in range(5):
    for mode in runs:
        flush.zero_()
        torch.cuda.synchronize(dev)
        if mode == "code warm":
            call(xa)
        elif mode == "warm":
            call(xb)
        torch.cuda.synchronize(dev)
        trace.fill(0)
        torch.cuda.synchronize(dev)
        call(xb)
        torch.cuda.synchronize(dev)
        runs[mode].append(trace.get().astype(np.int64))
by_class = {}
for i, (label, _) in named.items():
    by_class.setdefault(label, []).append(i)
print("median cycles a phase (load+count, met, threshold, before, walk, placed, done) and us entry->done")
for label, ii in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
    for mode, stamps in runs.items():
        d = [int(st.median([s[i, p + 1, 1] - s[i, p, 1] for s in stamps for i in ii if s[i, 8, 1] > 0] or [0]))
             for p in range(1, 8)]
        e = st.median([(s[i, 8, 0] - s[i, 0, 0]) / 1e3 for s in stamps for i in ii if s[i, 8, 0] > 0] or [0])
        print(f"{label:16s} {len(ii):3d} {mode:9s} {d} {e:5.2f}")
for mode, stamps in runs.items():
    ends = [float((s[:, :9, 0].max() - s[s[:, 0, 0] > 0, 0, 0].min()) / 1e3) for s in stamps]
    print(f"first entry to last stamp, {mode}: {[round(e, 2) for e in ends]}")
with open(os.path.join(sys.argv[1], f"code-{name}.json"), "w") as f:
    json.dump({m: [s.tolist() for s in v] for m, v in runs.items()}, f)
