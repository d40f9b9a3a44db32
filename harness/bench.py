"""Benchmark runs: each case built once, checked once against the reference (validate=True), then
timed with validate=False by the timer (timer.py), its planner timed apart, and set against the
roofline (roofline.py) as a Record; the results document (results.py) holds the records.
A call under GRAPH_BELOW_US is timed again as replays of a CUDA graph of many calls over rotated
input copies (a flush per call would cost more than the kernel), reported per call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from harness import cases
from harness import check
from harness import exporters
from harness import ops
from harness import roofline
from harness.timer import (GRAPH_BELOW_US, Timing, nvtx_label, telemetry, throttled, time_call,
                           time_graph, timing_from)


@dataclass
class Record:
    op: str
    case: str
    backend: str
    verdict: str
    message: str = ""
    timing: Timing | None = None
    bytes: int = 0
    flops: int = 0
    gbps: float = 0.0
    tflops: float = 0.0
    pct_copy: float = 0.0
    speedup_vs_torch: float | None = None
    floor_us: float | None = None  # the datasheet roofline floor
    pct_datasheet: float | None = None  # floor / time
    extra: dict = field(default_factory=dict)
    plan_timing: Timing | None = None  # the backend's planner (contract §7), once per step; None: it has none


def _rotations(nbytes, flush, most=32):
    """Input copies whose bytes together outgrow the L2 twice over (the flush buffer's size)."""
    size = flush.numel() if flush is not None else 0
    return max(1, min(most, -(-size // max(1, nbytes))))


def _call(module, case, x):
    """The timed call on inputs x, validate=False: with the backend's plans where it has a planner
    (made here, outside the timing, as an engine plans once per step), else as it plans for itself."""
    calls = check.op_calls(case, x)
    plans = check.make_plans(module, case, calls)
    return lambda: check.run_calls(module, case, x, calls, plans, validate=False)


def time_planner(module, case, x, device, reps=20):
    """Host wall-clock of the backend's planner for the case's calls, to the end of its device work
    (an engine pays it once per forward step), or None where the backend has no planner."""
    if check.planner(module, case.op) is None:
        return None
    calls = check.op_calls(case, x)
    cuda = torch.device(device).type == "cuda"
    samples = []
    for i in range(reps + 2):
        if cuda:
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        check.make_plans(module, case, calls, validate=False)  # timed as the op: validated once, outside
        if cuda:
            torch.cuda.synchronize(device)
        if i >= 2:  # two warm-up plans
            samples.append((time.perf_counter() - t) * 1e6)
    return timing_from(samples, "wall")


def bench_case(backend, case, device, copy_gbps, prepared, reps=30, peaks=None, flush=None):
    """prepared: (inputs, reference outputs) from check.prepare, shared by every backend.
    peaks: the device's datasheet roof (roofline.device_peaks); flush: l2_flush_buffer(device).
    An events median under GRAPH_BELOW_US is timed again as graph replays (same_clock then puts the
    case's other backends on that clock)."""
    record = Record(case.op, case.name, backend.name, "pass")
    x = prepared[0].clone()
    checked = check.check_case(backend, case, device, prepared=prepared)  # works on its own copies
    record.verdict, record.message = checked.verdict, checked.message
    if checked.verdict == "skip":  # the backend declines this case: nothing to time
        return record
    record.extra["metrics"] = checked.metrics
    record.extra["workload"] = exporters.workload(case, x)
    work = ops.entry(case.op).work(x)
    record.bytes, record.flops = work.bytes, work.flops
    label = nvtx_label(case.op, case.name, backend.name)
    before = telemetry(device)
    try:
        record.plan_timing = time_planner(backend.module, case, x, device)
        record.timing = time_call(_call(backend.module, case, x), device, reps=reps, flush=flush, label=label)
    except Exception as err:  # a backend that cannot run this case still leaves the others
        record.verdict, record.message = "error", f"timing failed: {type(err).__name__}: {err}"
        return record
    if record.timing.clock == "cuda-events" and record.timing.median_us < GRAPH_BELOW_US:
        time_as_graph(record, backend, case, device, prepared, flush, x)
    after = telemetry(device)
    if before:
        record.extra["telemetry"] = {"before": before, "after": after}
        record.extra["throttled"] = throttled(before, after)
    return rates(record, case, copy_gbps, peaks)


def time_as_graph(record, backend, case, device, prepared, flush, x=None):
    """The record's events timing replaced by CUDA-graph replays of the call over rotated input copies, each
    with its own plans (the events median kept in extra); a call that synchronises cannot be captured: its
    events stay, and extra says why. False where it kept them."""
    x = prepared[0].clone() if x is None else x
    copies = [x] + [prepared[0].clone() for _ in range(_rotations(record.bytes, flush) - 1)]
    label = nvtx_label(case.op, case.name, backend.name)
    try:
        graphed = time_graph([_call(backend.module, case, c) for c in copies], device, label=label)
    except RuntimeError as err:  # a backend whose op syncs cannot be captured: keep the events
        record.extra["graph_error"] = f"{type(err).__name__}: {str(err)[:200]}"
        return False
    record.extra["events_median_us"] = record.timing.median_us
    record.extra["input_copies"] = len(copies)
    record.timing = graphed
    return True


def rates(record, case, copy_gbps, peaks):
    """The record's per-step time, rates and roofline from its timing (again after a change of clock)."""
    layers = cases.LAYERS[cases.preset_of(case)]
    plan_us = record.plan_timing.median_us if record.plan_timing else 0.0
    record.extra.update(layers=layers, per_step_us=plan_us + layers * record.timing.median_us)
    seconds = record.timing.median_us * 1e-6
    record.gbps = record.bytes / seconds / 1e9
    record.tflops = record.flops / seconds / 1e12
    if copy_gbps:
        record.pct_copy = 100 * record.gbps / copy_gbps
    if peaks is not None:
        record.floor_us = roofline.floor_us(roofline.Work(record.bytes, record.flops), peaks)
        record.pct_datasheet = 100 * record.floor_us / record.timing.median_us
        if record.timing.median_us < 0.95 * record.floor_us:  # faster than the hardware can be
            record.verdict = "error"
            record.message = (f"{record.timing.median_us:.1f} us is under the roofline floor {record.floor_us:.1f} us "
                              f"({peaks.name} datasheet): the timer or the byte model is wrong")
    return record


def same_clock(records, backends, case, device, prepared, copy_gbps, peaks=None, flush=None):
    """One clock for a case's backends, so that their ratio compares like with like: where one was timed as
    graph replays (its events under GRAPH_BELOW_US) and another by events (over it), the others are timed
    as graph replays too (FlashInfer's method for short calls; a peer at 21 us by events beside ours at 14 by
    graph had compared ~5 us of launch gaps, not kernels). A call that cannot be captured keeps its events
    and its record says so (extra["mixed_clocks"]). records: the case's, in the order of `backends`."""
    timed = [r for r in records if r.timing is not None and r.verdict != "error"]
    if not any(r.timing.clock == "cuda-graph" for r in timed):
        return records
    for record, backend in zip(records, backends):
        if (any(record is r for r in timed) and record.timing.clock == "cuda-events"
                and "graph_error" not in record.extra):
            if time_as_graph(record, backend, case, device, prepared, flush):
                record.extra["graphed_for"] = "same clock as the case's other backends"
                rates(record, case, copy_gbps, peaks)
    clocks = {r.timing.clock for r in timed}
    if len(clocks) > 1:
        for r in timed:
            r.extra["mixed_clocks"] = sorted(clocks)
    return records
