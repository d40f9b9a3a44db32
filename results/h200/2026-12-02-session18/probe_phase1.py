"""Session 18: the mixed batch's first phase in the kernel against the same chunks in probe_mixed_load.py's kernel, in
one process. The kernel: a diagnostic trace build that stops every CTA after its first phase (DSV4_TOPK_TRACE=2, the
patch in phase1.patch: a CTA barrier, stamp 3, return), the planned call; the probe: probe_mixed_load's kernel as
8-CTA clusters on the plan's chunks (load + convert + count) with the kernel's shared memory. Cold (the L2 flushed,
then the harness's spin) and warm (right after the same launch): events of the launch (median of 10), and by class
of CTA (topk_trace's) the median cycles from the row known (the probe: its first barrier) to every thread's share
counted (stamp 3; the probe: its last barrier), and thread 0's (stamp 2). DSV4_TOPK_TRACE=3 (the same patch): every
CTA stops after the threshold instead (stamp 4: a cluster's rows through their sums over distributed shared memory),
so the first phase of the CTAs still loading runs beside the others' sums; its stamp 3 is the histograms met (a
cluster barrier for a row of several CTAs). 4, 5, 6: every CTA stops (after a barrier of its row's CTAs) after the
counts before it (stamp 5), the counting walk (6), the placing walk (7)."""
import importlib
import statistics as st

import cupy as cp
import numpy as np
import torch
from cupy.cuda import nvrtc

import kernels_cuda
import probe_mixed_load as probe
from harness import cases, check, timer
from kernels_cuda import topk_trace

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op
assert 2 <= T.DEFINES["WIDE_TRACE"] <= 6, "run with DSV4_TOPK_TRACE=2..6 on the patched snapshot"
dev = torch.device("cuda", 0)
case = cases.find("topk_indices", "b64-mixed-to-262144")
x = cases.build(case, dev)
calls = check.op_calls(case, x)
plans = check.make_plans(kernels_cuda, case, calls)
work = plans[0]["work"].cpu().numpy()
named = topk_trace.classes(work, plans[0]["launch"][0])
flush = timer.l2_flush_buffer(dev)


def timed(launch, cold):
    if cold:
        flush.zero_()
    else:
        launch()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(100000)
    s.record()
    launch()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) * 1e3


def by_class(cycles):
    """{class: median} of per-CTA cycle counts (CTAs with a chunk only)."""
    out = {}
    for i, (label, _) in named.items():
        if cycles[i] > 0:
            out.setdefault(label, []).append(cycles[i])
    return {k: int(st.median(v)) for k, v in out.items()}


trace = topk_trace.read_trace(0)


def kernel_call():
    check.run_calls(kernels_cuda, case, x, calls, plans, validate=False)


chunks = probe.chunks(probe.cases._TOPK_MIXED_64)
prog = nvrtc.createProgram(probe.SRC, "fill.cu", [], [])
nvrtc.compileProgram(prog, ["-std=c++17", "--gpu-architecture=sm_90a"])
mod = cp.cuda.function.Module()
mod.load(nvrtc.getCUBIN(prog))
fill8 = mod.get_function("fill8")
shared = 4 * (T.MAX_CHUNK + 4) + 38384 - (4 * 4096 + 8 * 16)  # the kernel's dynamic + static, less the probe's static
cp.cuda.driver.funcSetAttribute(fill8.ptr, 8, shared)
where = cp.asarray([v for pair in chunks for v in pair], dtype=cp.int64)
out = cp.zeros(2 * len(chunks), dtype=cp.uint64)
sink = cp.zeros(1, dtype=cp.uint32)
stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
xs = cp.asarray(x.args[0].reshape(-1))


def probe_call():
    fill8((len(chunks),), (1024,), (xs, where, 2, out, sink), shared_mem=shared, stream=stream)


kernel_call()
probe_call()
torch.cuda.synchronize()
for cold in (True, False):
    ev_k, ev_p, ks, k0s, ps = [], [], [], [], []
    for _ in range(10):
        trace.fill(0)
        torch.cuda.synchronize()
        ev_k.append(timed(kernel_call, cold))
        s = trace.get().astype(np.int64)
        ks.append(by_class(np.where(s[:, 3, 1] > 0, s[:, 3, 1] - s[:, 1, 1], 0)))
        k0s.append(by_class(np.where(s[:, 2, 1] > 0, s[:, 2, 1] - s[:, 1, 1], 0)))
        ev_p.append(timed(probe_call, cold))
        ps.append(by_class(out.get()[0::2].astype(np.int64)))
    mode = "cold" if cold else "warm"
    print(f"{mode}: events kernel (first phase only) {st.median(ev_k):.2f} us, probe {st.median(ev_p):.2f} us")
    print(f"{'class':16s} {'kernel all':>10s} {'kernel t0':>10s} {'probe':>8s}  (cycles, median over calls)")
    for label in sorted(ks[0], key=lambda k: -ks[0][k]):
        med = [int(st.median(d.get(label, 0) for d in rows)) for rows in (ks, k0s, ps)]
        print(f"{label:16s} {med[0]:10d} {med[1]:10d} {med[2]:8d}")
