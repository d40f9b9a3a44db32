"""Each kernel inside the bench's CUDA-graph replay (back-to-back calls over rotated input copies, as
harness.timer.time_graph runs them), from the CUDA profiler: its duration, the period between one call's
kernel and the next call's, and how far consecutive calls overlap (PDL). Where ncu serialises the calls and
flushes the caches, this shows why a graph's per-call time can be under one kernel's duration.
usage: graph_kernels.py BACKEND OP CASE [CASE ...]"""
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from harness import backends, bench, cases, ops, timer

mod = backends.load(sys.argv[1]).module
op = sys.argv[2]
flush = timer.l2_flush_buffer("cuda")
for name in sys.argv[3:]:
    case = [c for group in cases.BENCH.values() for c in group if c.name == name and c.op == op][0]
    x = cases.build(case, "cuda")
    nbytes = ops.entry(case.op).work(x).bytes
    copies = [x] + [x.clone() for _ in range(bench._rotations(nbytes, flush) - 1)]
    calls = [bench._call(mod, case, c) for c in copies]
    n = max(len(calls), timer.GRAPH_CALLS // len(calls) * len(calls))
    for fn in calls:
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n):
            calls[i % len(calls)]()
    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            torch.cuda._sleep(2_000_000)
            graph.replay()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                     and "sleep" not in e.name), key=lambda e: e.time_range.start)
    by_name = {}
    for e in events:
        by_name.setdefault(e.name, []).append(e)
    print(f"== {sys.argv[1]} {name}: {n} calls a graph, {len(copies)} input copies")
    for kname, es in by_name.items():
        durs = [e.time_range.elapsed_us() for e in es]
        starts = [e.time_range.start for e in es]
        periods = [b - a for a, b in zip(starts, starts[1:]) if 0 < b - a < 1000]
        overlap = [es[i].time_range.end - es[i + 1].time_range.start for i in range(len(es) - 1)
                   if 0 < es[i + 1].time_range.start - es[i].time_range.start < 1000]
        period = statistics.median(periods) if periods else 0.0
        over = statistics.median(overlap) if overlap else 0.0
        print(f"  {kname[:90]:90s} n={len(es):4d} dur {statistics.median(durs):7.2f} us  period {period:7.2f}"
              f"  overlap with the next {over:6.2f}")
