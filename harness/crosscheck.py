"""`python -m harness.crosscheck OP:CASE:BACKEND ... [--ncu]`: the harness timer beside other clocks.

Per case, on the same inputs: the harness timer as `bench` runs it (events, cold L2), the same
without the flush (warm L2), plain events around a loop of back-to-back calls (mean per call, warm,
launches overlapped), `triton.testing.do_bench` (median; it clears a 256 MB buffer per call), and,
with --ncu, the summed kernel durations that Nsight Compute measures inside the harness's NVTX range
(`ncu --nvtx --nvtx-include dsv4-harness@<label>/`, clocks left alone, caches flushed per kernel).
Agreement says the timer measures the kernels and nothing else; a gap says where time goes.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import subprocess
import sys
import time

import torch
from tabulate import tabulate

from harness import backends
from harness import timer
from harness import cases
from harness import check

LOOP_CALLS = 50
INNER_REPS = 5  # timed calls of the run that ncu profiles


def parse(spec):
    op, case, backend = spec.split(":")
    return cases.find(op, case), backend


def setup(spec, device):
    case, backend_name = parse(spec)
    backend = backends.load(backend_name, device)
    x = check.prepare(case, device)[0].clone()
    fn = lambda: check.run_op(backend.module, case, x, validate=False)  # noqa: E731
    return case, backend, fn


def plain_events(fn, device, calls=LOOP_CALLS):
    """Mean per call of `calls` back-to-back calls between one pair of events (warm, overlapped)."""
    for _ in range(3):
        fn()
    if torch.device(device).type != "cuda":
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t) * 1e6 / calls
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def do_bench(fn, device):
    if torch.device(device).type != "cuda":
        return None
    import triton.testing
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def ncu_kernel_us(spec, label, ncu="ncu"):
    """Nsight Compute's summed gpu__time_duration of the kernels in each NVTX range of the inner
    run, median over the ranges, with every kernel's name."""
    cmd = [ncu, "--nvtx", "--nvtx-include", f"{timer.NVTX_DOMAIN}@{label}/", "--clock-control", "none",
           "--metrics", "gpu__time_duration.sum", "--csv", "--print-units", "base",
           sys.executable, "-m", "harness.crosscheck", "--inner", spec]
    run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    rows = [r for r in csv.reader(io.StringIO(_csv_part(run.stdout))) if len(r) > 5]
    if not rows:
        return None, f"ncu gave no rows (exit {run.returncode}): {(run.stderr or run.stdout)[-300:]}"
    head, body = rows[0], rows[1:]
    col = {name: i for i, name in enumerate(head)}
    per_kernel = [(r[col["Kernel Name"]], float(r[col["Metric Value"]].replace(",", "")) / 1e3) for r in body
                  if r[col["Metric Name"]] == "gpu__time_duration.sum"]
    # the inner run times INNER_REPS calls, each an NVTX range holding the same kernels in order
    per_call = len(per_kernel) // INNER_REPS
    if per_call == 0:
        return None, f"ncu profiled {len(per_kernel)} kernels for {INNER_REPS} calls"
    sums = sorted(sum(us for _, us in per_kernel[i * per_call:(i + 1) * per_call]) for i in range(INNER_REPS))
    names = sorted({n.split("(")[0] for n, _ in per_kernel})
    return sums[len(sums) // 2], ", ".join(names)


def _csv_part(text):
    """ncu prints its own ==PROF== lines and the program's output around the CSV."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    return "\n".join(lines)



def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m harness.crosscheck", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="+", metavar="OP:CASE:BACKEND")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--ncu", action="store_true", help="also run each case under Nsight Compute")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)  # the run ncu profiles
    args = parser.parse_args(argv)
    device = check.pick_device(args.device)
    if args.inner:  # INNER_REPS timed calls, each in its NVTX range, nothing else in a range
        case, backend, fn = setup(args.specs[0], device)
        timer.time_call(fn, device, warmup=2, reps=INNER_REPS, min_reps=INNER_REPS, rel_sem=1.0,
                     label=timer.nvtx_label(case.op, case.name, backend.name))
        return 0
    flush = timer.l2_flush_buffer(device)
    ncu = shutil.which("ncu") if args.ncu else None
    if args.ncu and not ncu:
        print("crosscheck: ncu is not on the PATH; its column stays empty", file=sys.stderr)
    rows = []
    for spec in args.specs:
        case, backend, fn = setup(spec, device)
        cold = timer.time_call(fn, device, flush=flush)
        warm = timer.time_call(fn, device)
        row = [spec, f"{cold.median_us:.1f}", f"{warm.median_us:.1f}", f"{plain_events(fn, device):.1f}"]
        bench = do_bench(fn, device)
        row.append(f"{bench:.1f}" if bench is not None else "-")
        if ncu:
            us, kernels = ncu_kernel_us(spec, timer.nvtx_label(case.op, case.name, backend.name), ncu)
            row += [f"{us:.1f}" if us is not None else "-", kernels]
        rows.append(row)
        print(f"done {spec}", file=sys.stderr)
    headers = ["case", "harness cold-L2 us", "harness warm us", f"events loop of {LOOP_CALLS} us", "do_bench us"]
    if ncu:
        headers += ["ncu kernels us", "kernels"]
    print(f"timer cross-check on {device} ({cold.clock})")
    print(tabulate(rows, headers=headers, tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
