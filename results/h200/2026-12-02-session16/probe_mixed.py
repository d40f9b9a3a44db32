"""Session 16: the mixed top-k batch's chains by class of rows: graph and event times of the planned call on
subsets of b64-mixed-to-262144's rows (each its own plan), 10 rotated input copies (outgrow the L2)."""
import os, sys, torch
import kernels_cuda
from harness import cases, timer
T = sys.modules["kernels_cuda.topk_indices"]
L = cases._TOPK_MIXED_64
dev = torch.device("cuda", 0)
g = torch.Generator(device=dev).manual_seed(0)
classes = {"all": L, "262144": [n for n in L if n == 262144], "131K": [n for n in L if 131072 < n < 262144],
           "66K": [n for n in L if 65536 < n <= 131072], "33-35K": [n for n in L if 32768 < n <= 65536],
           "solo": [n for n in L if n <= 32768], "no-262144": [n for n in L if n != 262144],
           "no-solo": [n for n in L if n > 32768]}
flush = timer.l2_flush_buffer(dev)
for k in [int(x) for x in os.environ.get("KS", "512").split(",")]:
    for name, lens in classes.items():
        B = len(lens)
        seq = torch.tensor(lens, dtype=torch.int32, device=dev)
        table = torch.randperm(B * 4096, device=dev, generator=g).to(torch.int32).reshape(B, 4096)
        copies = [torch.randn(B, 262144, device=dev, generator=g) for _ in range(10)]
        plan = kernels_cuda.topk_indices_plan(seq, table, k=k)
        calls = [lambda x=x: kernels_cuda.topk_indices(x, seq, table, k=k, plan=plan, validate=False) for x in copies]
        ev = timer.time_call(calls[0], dev, reps=30, flush=flush)
        gr = timer.time_graph(calls, dev)
        mixed = plan.data.get("mixed")
        print(f"{os.environ.get('DSV4_TOPK_MIXED', 'default'):14s} k{k:<5d} {name:10s} rows {B:3d} "
              f"places {mixed[2] if mixed else plan.data.get('places')} mixed {mixed is not None}  "
              f"events {ev.median_us:6.2f}  graph {gr.median_us:6.2f}", flush=True)
        del copies
