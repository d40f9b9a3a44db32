"""Each kernel's device time inside the bench's own sequence (L2 flushed, a spin, then the timed call), from the
CUDA profiler (torch.profiler / CUPTI): where ncu serialises kernels and flushes caches between them, this shows the
kernels as the bench runs them, PDL overlap and L2 contents included.
usage: kernel_times.py BACKEND OP CASE [CASE ...]   (median over 20 calls; `span`: first start to last end)"""
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from harness import backends, bench, cases, timer

mod = backends.load(sys.argv[1]).module
op = sys.argv[2]
flush = timer.l2_flush_buffer("cuda")
for name in sys.argv[3:]:
    case = [c for group in cases.BENCH.values() for c in group if c.name == name and c.op == op][0]
    x = cases.build(case, "cuda")
    fn = bench._call(mod, case, x)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    calls = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            flush.zero_()
            torch.cuda._sleep(200000)
            torch.cuda.synchronize()
            fn()
            torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    skip = ("elementwise", "spin_kernel", "fill")  # the flush and the spin
    kern = [e for e in events if not any(w in e.name for w in skip)]
    kern.sort(key=lambda e: e.time_range.start)
    # group into calls: a gap over 50 us separates them (each call follows a sleep)
    groups, cur = [], []
    for e in kern:
        if cur and e.time_range.start - cur[-1].time_range.end > 50:
            groups.append(cur)
            cur = []
        cur.append(e)
    groups.append(cur)
    per_name = {}
    spans = []
    for g in groups:
        spans.append(g[-1].time_range.end - g[0].time_range.start)
        for i, e in enumerate(g):
            gap = e.time_range.start - g[i - 1].time_range.end if i else 0.0
            per_name.setdefault(e.name[:70], []).append((e.time_range.end - e.time_range.start, gap))
    print(f"## {sys.argv[1]} {name}: span median {statistics.median(spans):.1f} us over {len(groups)} calls")
    for k, v in per_name.items():
        dur, gap = statistics.median(d for d, _ in v), statistics.median(g for _, g in v)
        print(f"   {dur:7.1f} us (gap before {gap:5.1f})  {k}")
