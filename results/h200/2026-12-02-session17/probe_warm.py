"""Session 17: is the mixed batch's post-load chain paying cold memory (code or data) after the bench's L2 flush?
Trace build: the planned call after a flush (cold) and right after another call (warm: the code and the row in L2),
median phase durations (cycles) by class; then (default build, same process if untraced) events medians with and
without the flush."""
import json, sys, os, statistics as st
import numpy as np, torch
import kernels_cuda
from harness import cases, check, timer
T = sys.modules["kernels_cuda.topk_indices"]
TRACE = T.DEFINES["WIDE_TRACE"]
dev = torch.device("cuda", 0)
name = sys.argv[2] if len(sys.argv) > 2 else "b64-mixed-to-262144"
case = cases.find("topk_indices", name)
x = cases.build(case, dev)
calls = check.op_calls(case, x)
plans = check.make_plans(kernels_cuda, case, calls)
C = plans[0]["launch"][0]
work = plans[0]["work"].cpu().numpy().reshape(-1, 2)


def call():
    return check.run_calls(kernels_cuda, case, x, calls, plans, validate=False)


call()
flush = timer.l2_flush_buffer(dev)
if not TRACE:
    for fl in (True, False):
        ev = timer.time_call(call, dev, reps=60, flush=flush if fl else None)
        print(f"{name} events {'flushed' if fl else 'no flush'}: median {ev.median_us:.2f} p10 {ev.p10_us:.2f}")
    sys.exit()
trace = __import__("kernels_cuda.topk_trace", fromlist=["read_trace"]).read_trace(0)
ctas = {}
for b, n in work:
    if b >= 0:
        ctas[b] = ctas.get(b, 0) + 1
cls = {}
for i, (b, n) in enumerate(work):
    if b >= 0 and n > 512:
        c = ctas[b]
        cls.setdefault(f"{c}x{-(-n // c) // 1024}K", []).append(i)
runs = {"cold": [], "warm": []}
for _ in range(4):
    for mode in ("cold", "warm"):
        if mode == "cold":
            flush.zero_()
        else:
            call()
        torch.cuda.synchronize(dev)
        trace.fill(0)
        torch.cuda.synchronize(dev)
        call()
        torch.cuda.synchronize(dev)
        runs[mode].append(trace.get()[: len(work)].astype(np.int64))
print("median cycles a phase (1->2 load+count, 2->3 met, 3->4 threshold, 4->5 before, 5->6 walk, 6->7 placed, "
      "7->8 done) and ns entry->done; cold / warm")
for key in sorted(cls, key=lambda k: (-int(k.split('x')[0]) * int(k.split('x')[1][:-1]))):
    ii = cls[key]
    row = []
    for mode in ("cold", "warm"):
        d = [int(st.median([s[i, p + 1, 1] - s[i, p, 1] for s in runs[mode] for i in ii])) for p in range(1, 8)]
        e = st.median([(s[i, 8, 0] - s[i, 0, 0]) / 1e3 for s in runs[mode] for i in ii])
        row.append(f"{d} {e:5.2f}")
    print(f"{key:8s} {len(ii):3d} cold {row[0]}\n{'':12s} warm {row[1]}")
ends = {m: [float((s[:, :9, 0].max() - s[s[:, 0, 0] > 0, 0, 0].min()) / 1e3) for s in runs[m]] for m in runs}
print("first entry to last stamp, us:", {m: [round(e, 2) for e in v] for m, v in ends.items()})
json.dump({m: [s.tolist() for s in v] for m, v in runs.items()},
          open(os.path.join(sys.argv[1], f"warm-{name}.json"), "w"))
