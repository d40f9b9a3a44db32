"""Session 19: are the mixed batch's late loaders held by address translation? In the trace build (DSV4_TOPK_TRACE=1),
the planned call timed after: the harness's flush (a 120 MB memset) alone; the flush, then one float read in every
2 MB of the inputs (the logits, seq_lens, page table: their pages' translations warm, a few KB into the L2); the
flush, then a read of 2 MB of every other 4 MB (the same pages, ~half the rows in L2: the control for the touch's
own L2 effect); no flush (all warm). For each: the launch's span (first entry to last stamp, us), the last place's
first phase done (us after the first entry), and each place's (CTAs of 32K+ columns) first phase, median of 8 calls.
Quantized stalls (many places finishing their first phase at one instant after a gap) point at the translation."""
import importlib
import statistics as st

import numpy as np
import torch

import kernels_cuda
from harness import cases, check, timer
from kernels_cuda import topk_trace

T = importlib.import_module("kernels_cuda.topk_indices")
assert T.DEFINES["WIDE_TRACE"] == 1, "run with DSV4_TOPK_TRACE=1"
dev = torch.device("cuda", 0)
case = cases.find("topk_indices", "b64-mixed-to-262144")
x = cases.build(case, dev)
calls = check.op_calls(case, x)
plans = check.make_plans(kernels_cuda, case, calls)
work = plans[0]["work"].cpu().numpy().reshape(-1, 8, 2)
trace = topk_trace.read_trace(0)
flush = timer.l2_flush_buffer(dev)
tensors = [a for a in x.args if isinstance(a, torch.Tensor) and a.is_cuda] + [
    v for v in x.kwargs.values() if isinstance(v, torch.Tensor) and v.is_cuda]
PAGE = 2 << 20


def touch(every):
    """One 4-byte read in each `every` bytes of every input (every = PAGE: the translations; 2 * PAGE with 2 MB read:
    half the bytes)."""
    total = torch.zeros((), device=dev)
    for a in tensors:
        b = a.reshape(-1).view(torch.uint8)
        if every == PAGE:
            total += b[::PAGE].float().sum()
        else:
            n = b.numel() // (2 * PAGE) * 2 * PAGE
            total += b[:n].view(-1, 2 * PAGE)[:, :PAGE].float().sum()
    return total


def run(mode):
    if mode != "warm":
        flush.zero_()
    if mode == "touch pages":
        touch(PAGE)
    elif mode == "read half":
        touch(2 * PAGE)
    trace.fill(0)
    torch.cuda._sleep(100000)
    check.run_calls(kernels_cuda, case, x, calls, plans, validate=False)
    torch.cuda.synchronize()
    s = trace.get()[:work.shape[0] * 8].astype(np.int64)
    ns = s[:, :, 0]
    org = ns[ns[:, 0] > 0, 0].min()
    span = (ns.max() - org) / 1e3
    places = {}
    for p in range(work.shape[0]):
        idx = [8 * p + j for j in range(8) if work[p, j, 0] >= 0 and ns[8 * p + j, 2] > 0]
        if idx and (s[idx[0], 2, 1] - s[idx[0], 1, 1]) > 0:
            places[p] = max((ns[i, 2] - org) / 1e3 for i in idx)
    return span, places


check.run_calls(kernels_cuda, case, x, calls, plans, validate=False)
print(f"inputs: {[(tuple(a.shape), str(a.dtype)) for a in tensors]}")
rows = []
for mode in ("flush", "touch pages", "read half", "flush", "touch pages", "warm"):
    spans, per = [], {}
    for _ in range(8):
        span, places = run(mode)
        spans.append(span)
        for p, c in places.items():
            per.setdefault(p, []).append(c)
    last = st.median(max(v[i] for v in per.values() if i < len(v)) for i in range(8))
    rows.append((mode, st.median(spans), min(spans), max(spans), last,
                 " ".join(f"{p}:{st.median(v):.1f}" for p, v in sorted(per.items()) if p < 12)))
print(f"{'mode':12s} {'span med':>8s} {'min':>6s} {'max':>6s} {'last ph1':>8s}  place: first phase done (us, median)")
for r in rows:
    print(f"{r[0]:12s} {r[1]:8.2f} {r[2]:6.2f} {r[3]:6.2f} {r[4]:8.2f}  {r[5]}")
