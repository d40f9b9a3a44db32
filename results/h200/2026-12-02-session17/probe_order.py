"""Session 17: does the order of the mixed batch's places (and so which GPC each cluster lands in) move its time?
The planned call on b64-mixed-to-262144 (the bench case's own inputs) with its work list's places permuted: outputs
bitwise the plan's, then events (bench-like: spin, L2 flush) and graph medians. Under DSV4_TOPK_TRACE=1: one traced
call a variant (after a flush), each CTA's SM and the time its chunk landed; SMs grouped into GPCs by the clusters
that held them (union-find), bytes and land/end times by GPC."""
import json, sys, os
import torch
import kernels_cuda
from harness import cases, check, timer
T = sys.modules["kernels_cuda.topk_indices"]
TRACE = T.DEFINES["WIDE_TRACE"]
dev = torch.device("cuda", 0)
out_dir = sys.argv[1]
case_name = sys.argv[2] if len(sys.argv) > 2 else "b64-mixed-to-262144"
case = cases.find("topk_indices", case_name)
x = cases.build(case, dev)
calls = check.op_calls(case, x)
plans = check.make_plans(kernels_cuda, case, calls)
plan = plans[0]
cluster = plan["launch"][0]
work0 = plan["work"].clone()
places = work0.reshape(-1, cluster, 2)
P = places.shape[0]
lens = places[:, :, 1].cpu()
rows = places[:, :, 0].cpu()
nbytes = [int(sum(int(lens[p, j]) // max(1, int((rows[p] == rows[p, j]).sum())) for j in range(cluster)
                  if rows[p, j] >= 0)) * 4 for p in range(P)]
print("places", P, "MB each", [round(b / 2**20, 2) for b in nbytes])
heavy_first = sorted(range(P), key=lambda p: -nbytes[p])
il = []
h, l = heavy_first[:(P + 1) // 2], heavy_first[(P + 1) // 2:][::-1]
for i in range(P):
    il += [h[i]] if i < len(h) else []
    il += [l[i]] if i < len(l) else []
g = torch.Generator().manual_seed(7)
variants = {"made": list(range(P)), "reversed": list(range(P))[::-1], "interleave": il}
for s in range(3):
    variants[f"random{s}"] = torch.randperm(P, generator=g).tolist()


works = {name: places[order].reshape(-1).contiguous() for name, order in variants.items()}


def run_with(name, c=None, cc=None):
    plan.data["work"] = works[name]
    return check.run_calls(kernels_cuda, case, x if c is None else c, calls if cc is None else cc, plans,
                           validate=False)


ref = run_with("made")
flush = timer.l2_flush_buffer(dev)
result = {}
if TRACE:
    trace = __import__("kernels_cuda.topk_trace", fromlist=["read_trace"]).read_trace(0)
for name, order in variants.items():
    out = run_with(name)
    same = all(torch.equal(out[k], ref[k]) for k in ref)
    if not TRACE:
        ev = timer.time_call(lambda: run_with(name), dev, reps=60, flush=flush)
        copies = [x.clone() for _ in range(8)]
        gr = timer.time_graph([lambda c=c, cc=check.op_calls(case, c): run_with(name, c, cc) for c in copies], dev)
        result[name] = dict(order=order, same=same, events=ev.median_us, p10=ev.p10_us, graph=gr.median_us)
        print(f"{name:11s} bits {'same' if same else 'DIFFER'}  events {ev.median_us:6.2f} (p10 {ev.p10_us:6.2f})"
              f"  graph {gr.median_us:6.2f}  order {order}", flush=True)
        del copies
    else:
        reps = []
        for _ in range(4):
            trace.fill(0)
            flush.zero_()
            torch.cuda.synchronize(dev)
            run_with(name)
            torch.cuda.synchronize(dev)
            reps.append(trace.get()[: P * cluster].tolist())
        result[name] = dict(order=order, same=same, stamps=reps)
        s = torch.tensor(reps[-1], dtype=torch.int64)
        live = s[:, 0, 0] > 0
        t0 = s[live, 0, 0].min()
        end = (s[live, :9, 0].max() - t0) / 1e3
        print(f"{name:11s} bits {'same' if same else 'DIFFER'}  traced first entry to last stamp {float(end):6.2f} us",
              flush=True)
json.dump(dict(case=case_name, cluster=cluster, work=work0.cpu().tolist(), nbytes=nbytes, trace=TRACE,
               variants=result), open(os.path.join(out_dir, f"order-{'trace' if TRACE else 'time'}-{case_name}.json"),
                                      "w"))
