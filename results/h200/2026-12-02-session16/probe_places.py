"""Session 16: does the mixed batch's 17th 8-CTA place (a second wave past the H200's active clusters) cost? Graph
and event times of the default planned call on b64-mixed-to-262144 minus its shortest rows, with the plan's work
list as made and through fill_spares (16 places), 10 rotated input copies."""
import sys, torch
import kernels_cuda
from kernels_cuda import _loader
from harness import cases, timer
T = sys.modules["kernels_cuda.topk_indices"]
dev = torch.device("cuda", 0)
for kernel, cluster, shared in (("dsv4_topk_indices_wide<8>", 8, 163856), ("dsv4_topk_indices_wide<8>", 8, 131088)):
    T._opt_in(kernel, shared, dev)
    print(kernel, shared, "max active clusters", _loader.max_active_clusters("topk_indices.cu", kernel, dev, cluster,
                                                                              (T.THREADS,), shared))
L = sorted(cases._TOPK_MIXED_64)
g = torch.Generator(device=dev).manual_seed(0)
flush = timer.l2_flush_buffer(dev)
made = T.work_list
for k in (512, 1024):
    for drop in (0, 2, 6, 10):
        for fill in (False, True):
            lens = L[drop:]
            T.work_list = (lambda *a, lens=lens, k=k: T.fill_spares(made(*a), lens, k)) if fill else made
            B = len(lens)
            seq = torch.tensor(lens, dtype=torch.int32, device=dev)
            table = torch.randperm(B * 4096, device=dev, generator=g).to(torch.int32).reshape(B, 4096)
            copies = [torch.randn(B, 262144, device=dev, generator=g) for _ in range(10)]
            plan = kernels_cuda.topk_indices_plan(seq, table, k=k)
            calls = [lambda x=x: kernels_cuda.topk_indices(x, seq, table, k=k, plan=plan, validate=False)
                     for x in copies]
            outs = [c() for c in calls[:2]]
            ev = timer.time_call(calls[0], dev, reps=40, flush=flush)
            gr = timer.time_graph(calls, dev)
            print(f"k{k:<5d} drop {drop:2d} fill {fill:d} rows {B:3d} places {plan.data.get('places')}  "
                  f"events {ev.median_us:6.2f} (p10 {ev.p10_us:6.2f})  graph {gr.median_us:6.2f}", flush=True)
            del copies
