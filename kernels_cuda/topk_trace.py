"""Where a planned wide top-k launch spends its time, CTA by CTA: one call of a bench case under the trace build
(DEFINES' WIDE_TRACE, which DSV4_TOPK_TRACE=1 also sets: thread 0 of every CTA of wide<2/4/8> stamps %globaltimer and
clock64 at each phase of its chain), the L2 flushed before it as the bench does, and a table of the phases by class
of row (CTAs a row, columns a CTA).

    python3 -m kernels_cuda.topk_trace [--case b64-mixed-to-262144] [--reps 5] [--out trace.json]

Needs a Hopper GPU. The phases (topk_indices.cu's wide_stamp): 0 entry (before pdl_wait), 1 the row known (the plan's
work entry read), 2 thread 0's share of the chunk landed and counted, 3 past the first barrier (every histogram of
the row complete), 4 the threshold known, 5 the counts before this CTA known, 6 the counting walk and its scan done,
7 placed (staging and the candidates written), 8 done (the write-out; rank 0: the candidates ranked). A copy row
stamps 0-1 only, the heavy-ties path 0-6. Times are ns after the launch's earliest entry stamp (the median CTA of a
class, and its slowest), from %globaltimer; `cycles` in the JSON are each CTA's own SM clock, and each CTA's last
column holds 1 + its SM (%smid; the CTAs of a cluster share a GPC)."""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys

PHASES = ("entry", "row", "counted", "met", "threshold", "before", "walked", "placed", "done")


def read_trace(device_index):
    """The module's wide_trace as a numpy array [CTAs, phases, (ns, cycles)] (a trace build's only)."""
    import cupy

    from kernels_cuda import _loader
    topk = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op
    module, _ = _loader._module("topk_indices.cu", device_index)
    with cupy.cuda.Device(device_index):
        ptr = module.get_global_var("wide_trace")  # (a global-scope variable: its name unmangled; an address)
        shape = (topk.TRACE_CTAS, topk.TRACE_PHASES, 2)
        memory = cupy.cuda.UnownedMemory(ptr, 8 * shape[0] * shape[1] * shape[2], module, device_index)
        return cupy.ndarray(shape, dtype=cupy.uint64, memptr=cupy.cuda.MemoryPointer(memory, 0))


def classes(work, cluster):
    """{linear CTA: (class name, row)} of a planned launch's work list ([places x cluster] (row, seq_len) pairs)."""
    rows = work.reshape(-1, 2).tolist()
    ctas_of = {}
    for b, _ in rows:
        if b >= 0:
            ctas_of[b] = ctas_of.get(b, 0) + 1
    named = {}
    for i, (b, n) in enumerate(rows):
        if b < 0:
            continue
        c = ctas_of[b]
        columns = -(-n // c)
        named[i] = (f"{c} CTA{'s' if c > 1 else ''} x {columns // 1024}K" if columns >= 1024 else f"1 CTA x {n}", b)
    return named


def summarise(stamps, named):
    """Rows of (class, CTAs, per phase the median and max ns after the earliest entry)."""
    ns = stamps[:, :, 0].astype("int64")
    live = [i for i in named if ns[i, 0] > 0]
    origin = min(int(ns[i, 0]) for i in live)
    by_class = {}
    for i in live:
        by_class.setdefault(named[i][0], []).append(i)
    table = []
    for name, ctas in sorted(by_class.items(), key=lambda kv: -max(int(ns[i].max()) for i in kv[1])):
        cells = []
        for p in range(len(PHASES)):
            at = [int(ns[i, p]) - origin for i in ctas if ns[i, p] > 0]
            cells.append((statistics.median(at), max(at)) if at else None)
        table.append((name, len(ctas), cells))
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="b64-mixed-to-262144", help="a topk_indices bench case (planned, wide<8>)")
    parser.add_argument("--reps", type=int, default=5, help="traced calls (the last is reported; the spread printed)")
    parser.add_argument("--out", help="JSON of every CTA's stamps, the work list and the table")
    args = parser.parse_args(argv)
    import torch

    import kernels_cuda
    from harness import cases, check, timer
    from kernels_cuda import _loader
    topk = sys.modules["kernels_cuda.topk_indices"]
    topk.DEFINES["WIDE_TRACE"] = 1  # this process's build of topk_indices.cu is the trace build
    _loader.forget_builds()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        sys.exit("topk_trace needs a Hopper GPU (the wide kernels' clusters)")
    device = torch.device("cuda", torch.cuda.current_device())
    case = cases.find("topk_indices", args.case)
    x = cases.build(case, device)
    calls = check.op_calls(case, x)  # the bench's call and plan (harness/bench.py's _call)
    plans = check.make_plans(kernels_cuda, case, calls)
    plan = plans[0]
    if len(calls) != 1 or plan.data.get("launch") is None:
        sys.exit(f"{args.case}: not one planned cluster launch (the trace reads the plan's work list)")
    cluster = plan["launch"][0]
    named = classes(plan["work"].cpu().numpy(), cluster)

    def call():
        check.run_calls(kernels_cuda, case, x, calls, plans, validate=False)

    call()  # compile and warm
    flush = timer.l2_flush_buffer(device)
    trace = read_trace(device.index)
    ends = []
    for _ in range(args.reps):
        trace.fill(0)
        flush.zero_()
        torch.cuda.synchronize(device)
        call()
        torch.cuda.synchronize(device)
        stamps = trace.get()
        ns = stamps[:, :, 0].astype("int64")
        live = [i for i in named if ns[i, 0] > 0]
        ends.append((max(int(ns[i].max()) for i in live) - min(int(ns[i, 0]) for i in live)) / 1e3)  # last stamps
    table = summarise(stamps, named)
    print(f"{args.case}: {len(named)} CTAs in {plan['places']} places of {cluster}; first entry to last done "
          f"{', '.join(f'{e:.2f}' for e in ends)} us over {args.reps} calls (the last below)")
    print(f"{'class':16s} {'CTAs':>4s} " + " ".join(f"{p:>11s}" for p in PHASES[1:]))
    for name, count, cells in table:
        print(f"{name:16s} {count:4d} " + " ".join(
            f"{c[0] / 1e3:5.2f}/{c[1] / 1e3:5.2f}" if c else f"{'-':>11s}" for c in cells[1:]))
    print("us after the earliest entry: median / slowest CTA of the class at the end of each phase")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"case": args.case, "cluster": cluster, "work": plan["work"].cpu().tolist(),
                       "stamps": stamps[: len(plan["work"]) // 2].tolist(), "ends_us": ends,
                       "table": [[name, count, cells] for name, count, cells in table]}, f)
        print("wrote", args.out)


if __name__ == "__main__":
    main()
