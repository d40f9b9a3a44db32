"""Timing of backends on benchmark cases, against the roofline.

First version (the full timer with cold L2, CUDA graphs and telemetry is the benchmark issue's):
each case is built once, checked once against the reference (validate=True), then timed with
validate=False: warm-up calls, then device events around each of `reps` calls, median and spread.
On the CPU the timer falls back to wall-clock and says so.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field

import torch

from harness import check as K
from harness import roofline

COPY_BYTES = 1 << 30  # per direction, for the copy-bandwidth calibration


@dataclass
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    samples: int
    clock: str  # "cuda-events" or "wall"


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
    extra: dict = field(default_factory=dict)


def time_call(fn, device, warmup=5, reps=30):
    """Median and spread of `reps` calls after `warmup` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)
        clock = "cuda-events"
    else:
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t) * 1e6)
        clock = "wall"
    samples.sort()
    q = statistics.quantiles(samples, n=10) if len(samples) > 1 else [samples[0]] * 9
    return Timing(statistics.median(samples), q[0], q[-1], len(samples), clock)


def copy_bandwidth(device):
    """Device-to-device copy: (bytes read + bytes written) / median time, in GB/s."""
    if torch.device(device).type != "cuda":
        return None
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    t = time_call(lambda: dst.copy_(src), device, warmup=3, reps=20)
    return 2 * COPY_BYTES / (t.median_us * 1e-6) / 1e9


def _call(module, case, x):
    return lambda: K.run_op(module, case, x, validate=False)


def bench_case(backend, case, device, copy_gbps, prepared, reps=30):
    """prepared: (inputs, reference outputs) from check.prepare, shared by every backend."""
    record = Record(case.op, case.name, backend.name, "pass")
    x = prepared[0].clone()
    checked = K.check_case(backend, case, device, prepared=prepared)  # works on its own copies
    record.verdict, record.message = checked.status, checked.message
    work = roofline.work(case.op, x)
    record.bytes, record.flops = work.bytes, work.flops
    try:
        record.timing = time_call(_call(backend.module, case, x), device, reps=reps)
    except Exception as err:  # a backend that cannot run this case still leaves the others
        record.verdict, record.message = "error", f"timing failed: {type(err).__name__}: {err}"
        return record
    seconds = record.timing.median_us * 1e-6
    record.gbps = work.bytes / seconds / 1e9
    record.tflops = work.flops / seconds / 1e12
    if copy_gbps:
        record.pct_copy = 100 * record.gbps / copy_gbps
    return record


def environment(device):
    env = {"python": platform.python_version(), "torch": torch.__version__, "device": str(device)}
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        pass
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, sms=props.multi_processor_count, cuda=torch.version.cuda,
                   l2_bytes=getattr(props, "L2_cache_size", None), memory_bytes=props.total_memory)
    try:
        env["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                           check=True).stdout.strip()
        env["git_dirty"] = bool(subprocess.run(["git", "status", "--porcelain"], capture_output=True,
                                               text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):  # a copy of the tree without git (the device tool's)
        env["git_commit"] = os.environ.get("HARNESS_GIT_COMMIT")
    return env


def write_json(path, device, copy_gbps, records):
    doc = {"schema": 0, "environment": environment(device), "calibration": {"copy_gbps": copy_gbps},
           "records": [asdict(r) for r in records]}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
