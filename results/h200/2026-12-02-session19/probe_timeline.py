"""Session 19: every CTA's stamps (ns, cycles, SM) of the planned mixed batch under the current trace build
(DSV4_TOPK_TRACE=1..6 on the patched snapshot), 5 cold calls (L2 flushed, then a spin), saved to
$OUT/timeline-<TRACE>[-stop<STOP>].npz with the work list, for the CPU's analysis. STOP=4 (the trace build of
session 19's phase1.patch): every CTA stops after its threshold at run time (the same SASS as the whole kernel)."""
import importlib
import os

import numpy as np
import torch

import kernels_cuda
from harness import cases, check, timer
from kernels_cuda import topk_trace

T = importlib.import_module("kernels_cuda.topk_indices")
assert T.DEFINES["WIDE_TRACE"] >= 1, "a trace build"
dev = torch.device("cuda", 0)
case = cases.find("topk_indices", "b64-mixed-to-262144")
x = cases.build(case, dev)
calls = check.op_calls(case, x)
plans = check.make_plans(kernels_cuda, case, calls)
work = plans[0]["work"].cpu().numpy()
trace = topk_trace.read_trace(0)
stop = int(os.environ.get("STOP", "0"))  # session 19's run-time stop (the patched trace build's wide_stop)
if stop:
    import cupy

    from kernels_cuda import _loader
    module, _ = _loader._module("topk_indices.cu", 0)
    cupy.ndarray((1,), dtype=cupy.int32, memptr=cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(
        module.get_global_var("wide_stop"), 4, module, 0), 0)).fill(stop)
flush = timer.l2_flush_buffer(dev)
runs = []
check.run_calls(kernels_cuda, case, x, calls, plans, validate=False)
for _ in range(int(os.environ.get("CALLS", "6"))):
    trace.fill(0)
    flush.zero_()
    torch.cuda._sleep(100000)
    check.run_calls(kernels_cuda, case, x, calls, plans, validate=False)
    torch.cuda.synchronize()
    runs.append(trace.get()[:256].astype(np.int64))
name = f"timeline-{T.DEFINES['WIDE_TRACE']}" + (f"-stop{stop}" if stop else "") + ".npz"
np.savez(os.path.join(os.environ["OUT"], name), stamps=np.stack(runs[1:]),
         work=work)
print("saved", T.DEFINES["WIDE_TRACE"], "stop", stop)
