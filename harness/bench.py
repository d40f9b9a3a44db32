"""Timing of backends on benchmark cases, against the roofline.

Each case is built once, checked once against the reference (validate=True), then timed with
validate=False: warm-up calls, then device events around each call with the L2 overwritten before
it and a spin kernel that hides the host's launch work, until the standard error of the mean is
small or the budget is spent; median and spread.
A call under GRAPH_BELOW_US is timed again as replays of a CUDA graph of many calls over rotated
input copies (a flush per call would cost more than the kernel), reported per call. NVML telemetry
brackets each measurement; an NVTX range names each timed call. On the CPU the timer falls back to
wall-clock and says so.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import os
import platform
import statistics
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

import references
from harness import cases as C
from harness import check as K
from harness import inputs as I
from harness import ops
from harness import roofline

COPY_BYTES = 1 << 30  # per direction, for the copy-bandwidth calibration
GRAPH_BELOW_US = 20.0  # calls shorter than this are re-timed as CUDA-graph replays
GRAPH_CALLS = 64  # calls per captured graph
NVTX_DOMAIN = "dsv4-harness"
SPIN_MIN_US, SPIN_MAX_US = 20.0, 5000.0  # the spin before each timed call (see time_call)
SPIN_CYCLES_PER_US = 2000  # at about 2 GHz; a slower clock only lengthens the spin


@dataclass
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    samples: int
    clock: str  # "cuda-events", "cuda-graph" (per call: replay time / calls_per_sample) or "wall"
    stdev_us: float = 0.0
    samples_us: list = field(default_factory=list)
    calls_per_sample: int = 1
    host_us: float | None = None  # host time to issue one call (median of the warm-up calls)


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


def time_call(fn, device, warmup=5, reps=30, *, min_reps=10, rel_sem=0.01, budget_s=2.0, flush=None,
              label=None):
    """Median and spread of calls after `warmup` calls: at least min_reps samples, then until the
    standard error of the mean is under rel_sem of the mean, `reps` samples or budget_s seconds.
    flush: a buffer written before each sample (outside the timed region) to evict the L2.
    label: an NVTX range around each timed call (Nsight filters on it).
    On CUDA a spin kernel, twice as long as the host takes to issue one call, runs before the start
    event, so the events time the device work and not the Python that launches it (host_us says
    what that costs); an op that waits on the device inside still shows the wait."""
    cuda = torch.device(device).type == "cuda"
    host = []
    for _ in range(warmup):
        t = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t) * 1e6)
    host_us = statistics.median(host[1:] or host) if host else 0.0
    samples = []
    if cuda:
        torch.cuda.synchronize()
        spin_cycles = int(min(SPIN_MAX_US, max(SPIN_MIN_US, 2 * host_us)) * SPIN_CYCLES_PER_US)
    began = time.perf_counter()
    while len(samples) < reps:
        if flush is not None:
            flush.zero_()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(spin_cycles)
            start.record()
            with _nvtx(label):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)
        else:
            t = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t) * 1e6)
        if len(samples) >= min_reps:
            mean = statistics.fmean(samples)
            sem = statistics.stdev(samples) / len(samples) ** 0.5
            if sem < rel_sem * mean or time.perf_counter() - began > budget_s:
                break
    return _timing(samples, "cuda-events" if cuda else "wall", host_us=host_us)


def nvtx_label(op, case, backend):
    """The NVTX range name of a timed call. No '/': Nsight's range filters read it as nesting.
    `ncu --nvtx --nvtx-include "dsv4-harness@<label>/"` (the slash: a push/pop range) profiles exactly the
    timed kernels."""
    return f"{op}:{case}:{backend}"


try:
    import nvtx as _nvtx_package
except ImportError:  # the bench extra is optional: torch's binding marks the default domain instead
    _nvtx_package = None


class _nvtx:
    """A push/pop NVTX range in NVTX_DOMAIN (the `nvtx` package), else in the default domain
    (torch's binding), or nothing without a label."""

    def __init__(self, label):
        self.label = label
        self.nvtx = _nvtx_package

    def __enter__(self):
        if self.label:
            if self.nvtx:
                self.nvtx.push_range(self.label, domain=NVTX_DOMAIN)
            else:
                torch.cuda.nvtx.range_push(self.label)

    def __exit__(self, *exc):
        if self.label:
            if self.nvtx:
                self.nvtx.pop_range(domain=NVTX_DOMAIN)
            else:
                torch.cuda.nvtx.range_pop()


def time_graph(calls, device, *, calls_per_graph=GRAPH_CALLS, reps=20, label=None):
    """Per-call time of a CUDA graph that runs `calls` (callables over distinct input copies, so
    together they outgrow the L2) round-robin, calls_per_graph in all; median of `reps` replays."""
    n = max(len(calls), calls_per_graph // len(calls) * len(calls))
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm-up off the capture, as torch's graph recipe asks
        for fn in calls:
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n):
            calls[i % len(calls)]()
    graph.replay()
    torch.cuda.synchronize(device)
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(SPIN_MIN_US * SPIN_CYCLES_PER_US))  # covers the replay's launch
        start.record()
        with _nvtx(label):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / n)
    return _timing(samples, "cuda-graph", calls_per_sample=n)


def _timing(samples, clock, calls_per_sample=1, host_us=None):
    """Median, p10 and p90 by linear interpolation between the sorted samples (statistics' "inclusive"
    method, numpy's default), so they stay within the smallest and largest sample however few there are
    (the exclusive method extrapolates: a p10 under the fastest call, even negative); `samples` counts them."""
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=10, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 9
    return Timing(statistics.median(ordered), q[0], q[-1], len(ordered), clock,
                  statistics.stdev(ordered) if len(ordered) > 1 else 0.0, samples, calls_per_sample, host_us)


def l2_flush_buffer(device):
    """A buffer of twice the device's L2, or None off CUDA."""
    if torch.device(device).type != "cuda":
        return None
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
    return torch.empty(2 * l2, dtype=torch.uint8, device=device)


# NVML clock-event ("throttle") reasons: name -> the bit's name in pynvml, newer first then older
CLOCK_EVENT_REASONS = {
    "gpu_idle": "GpuIdle", "applications_clocks_setting": "ApplicationsClocksSetting",
    "sw_power_cap": "SwPowerCap", "hw_slowdown": "HwSlowdown", "sync_boost": "SyncBoost",
    "sw_thermal_slowdown": "SwThermalSlowdown", "hw_thermal_slowdown": "HwThermalSlowdown",
    "hw_power_brake_slowdown": "HwPowerBrakeSlowdown", "display_clock_setting": "DisplayClockSetting",
}
# the reasons that mean power or heat held the clocks down (idle, application clocks and sync boost do not)
THROTTLE_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown")


def pci_bus_id(device):
    """The torch device's PCI address as NVML writes it ("00000000:3B:00.0"), or None."""
    props = torch.cuda.get_device_properties(_cuda_index(device))
    parts = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
    return None if None in parts else f"{parts[0]:08X}:{parts[1]:02X}:{parts[2]:02X}.0"


def _cuda_index(device):
    index = torch.device(device).index
    return torch.cuda.current_device() if index is None else index


def nvml_handle(pynvml, device):
    """NVML's handle of the torch device. NVML numbers the machine's GPUs and ignores CUDA_VISIBLE_DEVICES, so
    torch's index would name another GPU under a mask: the handle is looked up by PCI bus id (else by UUID)."""
    bus_id = pci_bus_id(device)
    if bus_id:
        return pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
    uuid_ = getattr(torch.cuda.get_device_properties(_cuda_index(device)), "uuid", None)
    if uuid_ is None:
        raise LookupError("neither a PCI bus id nor a UUID for the device")
    return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid_}")


def clock_event_reasons(pynvml, handle):
    """The NVML clock-event reasons in force now, by name (CLOCK_EVENT_REASONS)."""
    get = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    mask = get(handle)
    names = []
    for name, bit in CLOCK_EVENT_REASONS.items():
        value = getattr(pynvml, f"nvmlClocksEventReason{bit}", getattr(pynvml, f"nvmlClocksThrottleReason{bit}", 0))
        if value and mask & value:
            names.append(name)
    return names


def telemetry(device):
    """SM clock (MHz), its maximum, temperature (C), power (W) and the clock-event reasons through NVML for
    the torch device (found by PCI bus id), or {}."""
    if torch.device(device).type != "cuda":
        return {}
    try:
        import pynvml
        pynvml.nvmlInit()
        h = nvml_handle(pynvml, device)
        reasons = clock_event_reasons(pynvml, h)
        return {"pci_bus_id": pci_bus_id(device),
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000, "clock_event_reasons": reasons,
                "throttled": any(r in THROTTLE_REASONS for r in reasons)}
    except Exception:  # no NVML on this machine: telemetry is optional
        return {}


def throttled(before, after):
    """Whether NVML said power or heat held the clocks down when the measurement began or ended."""
    return bool(before.get("throttled") or (after or {}).get("throttled"))


def copy_bandwidth(device):
    """Device-to-device copy: (bytes read + bytes written) / median time, in GB/s."""
    if torch.device(device).type != "cuda":
        return None
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    t = time_call(lambda: dst.copy_(src), device, warmup=3, reps=20)
    return 2 * COPY_BYTES / (t.median_us * 1e-6) / 1e9


def _rotations(nbytes, flush, most=32):
    """Input copies whose bytes together outgrow the L2 twice over (the flush buffer's size)."""
    size = flush.numel() if flush is not None else 0
    return max(1, min(most, -(-size // max(1, nbytes))))


def _call(module, case, x):
    """The timed call on inputs x, validate=False: with the backend's plans where it has a planner
    (made here, outside the timing, as an engine plans once per step), else as it plans for itself."""
    calls = K.op_calls(case, x)
    plans = K.make_plans(module, case, calls)
    return lambda: K.run_calls(module, case, x, calls, plans, validate=False)


def time_planner(module, case, x, device, reps=20):
    """Host wall-clock of the backend's planner for the case's calls, to the end of its device work
    (an engine pays it once per forward step), or None where the backend has no planner."""
    if K.planner(module, case.op) is None:
        return None
    calls = K.op_calls(case, x)
    cuda = torch.device(device).type == "cuda"
    samples = []
    for i in range(reps + 2):
        if cuda:
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        K.make_plans(module, case, calls, validate=False)  # timed as the op: validated once, outside
        if cuda:
            torch.cuda.synchronize(device)
        if i >= 2:  # two warm-up plans
            samples.append((time.perf_counter() - t) * 1e6)
    return _timing(samples, "wall")


def bench_case(backend, case, device, copy_gbps, prepared, reps=30, peaks=None, flush=None):
    """prepared: (inputs, reference outputs) from check.prepare, shared by every backend.
    peaks: the device's datasheet roof (roofline.device_peaks); flush: l2_flush_buffer(device)."""
    record = Record(case.op, case.name, backend.name, "pass")
    x = prepared[0].clone()
    checked = K.check_case(backend, case, device, prepared=prepared)  # works on its own copies
    record.verdict, record.message = checked.status, checked.message
    if checked.status == "skip":  # the backend declines this case: nothing to time
        return record
    record.extra["metrics"] = checked.metrics
    record.extra["workload"] = workload(case, x)
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
        # each input copy with its own plans; a call that synchronises cannot be captured (kept: events)
        copies = [x] + [prepared[0].clone() for _ in range(_rotations(work.bytes, flush) - 1)]
        try:
            graphed = time_graph([_call(backend.module, case, c) for c in copies], device, label=label)
            record.extra["events_median_us"] = record.timing.median_us
            record.extra["input_copies"] = len(copies)
            record.timing = graphed
        except RuntimeError as err:  # a backend whose op syncs cannot be captured: keep the events
            record.extra["graph_error"] = f"{type(err).__name__}: {str(err)[:200]}"
    after = telemetry(device)
    if before:
        record.extra["telemetry"] = {"before": before, "after": after}
        record.extra["throttled"] = throttled(before, after)
    layers = I.PRESETS[C.preset_of(case)].layers
    plan_us = record.plan_timing.median_us if record.plan_timing else 0.0
    record.extra.update(layers=layers, per_step_us=plan_us + layers * record.timing.median_us)
    seconds = record.timing.median_us * 1e-6
    record.gbps = work.bytes / seconds / 1e9
    record.tflops = work.flops / seconds / 1e12
    if copy_gbps:
        record.pct_copy = 100 * record.gbps / copy_gbps
    if peaks is not None:
        record.floor_us = roofline.floor_us(work, peaks)
        record.pct_datasheet = 100 * record.floor_us / record.timing.median_us
        if record.timing.median_us < 0.95 * record.floor_us:  # faster than the hardware can be
            record.verdict = "error"
            record.message = (f"{record.timing.median_us:.1f} us is under the roofline floor {record.floor_us:.1f} us "
                              f"({peaks.name} datasheet): the timer or the byte model is wrong")
    return record


def calibrate(device):
    """Measured ceilings: device copy bandwidth (read + write), a bf16 8192^3 matmul and, where the
    device has it, an fp8 e4m3 scaled matmul. {} off CUDA."""
    if torch.device(device).type != "cuda":
        return {}
    result = {"copy_gbps": copy_bandwidth(device)}
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    bm = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    t = time_call(lambda: a @ bm, device, warmup=3, reps=20)
    result["bf16_tflops"] = 2 * n ** 3 / (t.median_us * 1e-6) / 1e12
    try:
        a8 = a.to(torch.float8_e4m3fn)
        b8 = bm.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        t = time_call(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                      device, warmup=3, reps=20)
        result["fp8_tflops"] = 2 * n ** 3 / (t.median_us * 1e-6) / 1e12
    except (RuntimeError, AttributeError) as err:  # no fp8 matmul on this device or build
        result["fp8_error"] = str(err)[:200]
    return result


DIST = "dsv4-sparse-harness"
# the package of every backend (and the tools the timer uses) as pip names it; the first installed name wins
PACKAGES = {"torch": ["torch"], "triton": ["triton"], "cupy": ["cupy-cuda13x", "cupy-cuda12x", "cupy"],
            "nvidia-cuda-nvrtc": ["nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"], "sglang": ["sglang"],
            "flashinfer-python": ["flashinfer-python"], "sgl-deep-gemm": ["sgl-deep-gemm"],
            "sgl-flash-mla": ["sgl-flash-mla"], "apache-tvm-ffi": ["apache-tvm-ffi"], "nvtx": ["nvtx"],
            "nvidia-ml-py": ["nvidia-ml-py"], "pytest-benchmark": ["pytest-benchmark"]}


def _version(*names):
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def harness_source():
    """(commit, dirty, where it came from) of the harness that runs, whatever the current directory is:
    HARNESS_GIT_COMMIT if set (a copied tree whose .git may be stale); else git at the folder the harness
    package was imported from, if that folder is a git work tree's root (a checkout, an editable install);
    else the commit its wheel was built from (harness/BUILD_COMMIT); else the commit pip recorded when it
    installed from a VCS URL (direct_url.json); else nothing."""
    if os.environ.get("HARNESS_GIT_COMMIT"):
        return os.environ["HARNESS_GIT_COMMIT"], None, "HARNESS_GIT_COMMIT"
    root = Path(__file__).resolve().parent.parent
    try:
        git = ["git", "-C", str(root)]
        top = subprocess.run([*git, "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True)
        if Path(top.stdout.strip()).resolve() == root:
            head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
            dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
            return head.stdout.strip(), bool(dirty), f"git at {root}"
    except (OSError, subprocess.CalledProcessError):  # no git, or not a work tree (an installed wheel)
        pass
    stamp = root / "harness" / "BUILD_COMMIT"  # written into a wheel by its build (ci/build_backend.py)
    if stamp.is_file():
        commit, _, state = stamp.read_text().strip().partition(" ")
        return commit, state == "dirty", "the wheel's build (harness/BUILD_COMMIT)"
    try:
        direct = json.loads(importlib.metadata.distribution(DIST).read_text("direct_url.json") or "{}")
        if direct.get("vcs_info", {}).get("commit_id"):
            return direct["vcs_info"]["commit_id"], None, "direct_url.json"
    except (importlib.metadata.PackageNotFoundError, json.JSONDecodeError):
        pass
    return None, None, None


def _nvml_versions():
    try:
        import pynvml
        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return {"driver": driver.decode() if isinstance(driver, bytes) else driver,
                "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}"}
    except Exception:  # no NVML here: the versions are optional
        return {}


def environment(device):
    """Provenance of a run: a run id, the harness's version and commit (of the installed package, not the
    current directory), the version of every backend's package, and the device (GPU, driver, CUDA; on the
    CPU its thread count)."""
    env = {"run_id": str(uuid.uuid4()), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "python": platform.python_version(), "torch": torch.__version__, "device": str(device),
           "harness_version": _version(DIST), "packages": {k: _version(*names) for k, names in PACKAGES.items()}}
    if env["packages"]["triton"]:
        env["triton"] = env["packages"]["triton"]
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, sms=props.multi_processor_count, cuda=torch.version.cuda,
                   l2_bytes=getattr(props, "L2_cache_size", None), memory_bytes=props.total_memory,
                   pci_bus_id=pci_bus_id(device), **_nvml_versions())
    else:
        env.update(cpu=platform.processor() or platform.machine(), cpu_threads=torch.get_num_threads(),
                   cpu_count=os.cpu_count())
    env["git_commit"], dirty, env["git_commit_source"] = harness_source()
    if dirty is not None:
        env["git_dirty"] = dirty
    return env


SCHEMA = 1


def write_json(path, device, calibration, records, peaks=None, *, env=None, complete=True):
    """The run's document; complete=False marks one written part-way (the run may have been stopped)."""
    doc = {"schema": SCHEMA, "environment": env or environment(device), "calibration": calibration,
           "datasheet": asdict(peaks) if peaks else None, "complete": complete,
           "records": [asdict(r) for r in records]}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)  # a reader never sees half a document


def workload(case, x):
    """The case as a flashinfer-bench workload: integer axes from the case's parameters, each
    input random (a tensor) or a scalar, and a stable uuid from the op, case and seed."""
    names = list(inspect.signature(getattr(references, case.op)).parameters)
    inputs = {name: {"type": "random"} for name in names[:len(x.args)]}
    for name, value in x.kwargs.items():
        if isinstance(value, torch.Tensor):
            inputs[name] = {"type": "random"}
        elif isinstance(value, (bool, int, float)):
            inputs[name] = {"type": "scalar", "value": value}
    axes = {k: v for k, v in case.params.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0}
    key = f"dsv4/{case.op}/{case.name}/{case.seed}"
    return {"axes": axes, "inputs": inputs, "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, key))}


FLASHINFER_STATUS = {"pass": "PASSED", "fail": "INCORRECT_NUMERICAL", "known": "INCORRECT_NUMERICAL",
                     "error": "RUNTIME_ERROR"}


def write_flashinfer_trace(path, device, records):
    """The records as flashinfer-bench Trace lines (JSONL): definition `dsv4_<op>`, the case as the
    workload, the backend as the solution; latency, and the torch backend as the reference where
    it ran (from the records' speedup_vs_torch). Correctness carries the worst absolute error (relative L2 and the rest under extra);
    the maximum relative error is not computed here and is written as "NaN"."""
    env = environment(device)
    libs = {k: env[k] for k in ("torch", "triton", "cuda") if env.get(k)}
    hardware = (env.get("gpu") or "cpu").replace(" ", "_")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    with open(path, "w") as f:
        for r in (r for r in records if r.verdict != "skip"):
            status = FLASHINFER_STATUS.get(r.verdict, "RUNTIME_ERROR")
            metrics = r.extra.get("metrics", {})
            evaluation = {"status": status, "environment": {"hardware": hardware, "libs": libs},
                          "timestamp": stamp, "log": r.message}
            if status in ("PASSED", "INCORRECT_NUMERICAL"):
                worst = max((v for k, v in metrics.items() if k.endswith("max_abs_err")), default=0.0)
                evaluation["correctness"] = {"max_relative_error": "NaN", "max_absolute_error": worst,
                                             "extra": metrics}
            if status == "PASSED" and r.timing:
                perf = {"latency_ms": r.timing.median_us / 1e3}
                if r.speedup_vs_torch:  # set by the bench command where torch ran the case
                    perf.update(reference_latency_ms=r.timing.median_us * r.speedup_vs_torch / 1e3,
                                speedup_factor=r.speedup_vs_torch)
                evaluation["performance"] = perf
            f.write(json.dumps({"definition": f"dsv4_{r.op}", "workload": r.extra.get("workload"),
                                "solution": r.backend, "evaluation": evaluation}) + "\n")


def write_pytest_benchmark(path, device, records, env=None):
    """The same records in pytest-benchmark's JSON layout (seconds per call), for its compare tooling: built
    by pytest-benchmark itself (its Stats, machine info and document hook) where it is installed, else by
    hand in the same layout."""
    env = env or environment(device)
    timed = [r for r in records if r.timing]
    commit = {"id": env.get("git_commit"), "dirty": env.get("git_dirty"), "project": DIST, "branch": None,
              "time": None, "author_time": None}
    try:
        from pytest_benchmark.plugin import pytest_benchmark_generate_json, pytest_benchmark_generate_machine_info
        from pytest_benchmark.stats import Metadata
    except ImportError:  # the bench extra is optional
        doc = _pytest_benchmark_by_hand(env, timed, commit)
    else:
        benchmarks = []
        for r in timed:
            fixture = SimpleNamespace(name=f"{r.case}[{r.backend}]", fullname=f"{r.op}/{r.case}[{r.backend}]",
                                      group=r.op, param=r.backend, params={"backend": r.backend, "case": r.case},
                                      extra_info=_pytest_benchmark_extra(r), cprofile_stats=None, has_error=False)
            meta = Metadata(fixture, r.timing.calls_per_sample, {"timer": r.timing.clock})
            for x in r.timing.samples_us or [r.timing.median_us]:
                meta.stats.update(x * 1e-6)  # already per call (a graph's replay time / its calls)
            benchmarks.append(meta)
        machine = {**pytest_benchmark_generate_machine_info(), "gpu": env.get("gpu"), "device": env.get("device"),
                   "run_id": env.get("run_id")}
        doc = pytest_benchmark_generate_json(config=None, benchmarks=benchmarks, include_data=True,
                                             machine_info=machine, commit_info=commit)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def _pytest_benchmark_extra(r):
    return {"bytes": r.bytes, "flops": r.flops, "gbps": r.gbps, "verdict": r.verdict, "clock": r.timing.clock,
            "p10_us": r.timing.p10_us, "p90_us": r.timing.p90_us}


def _pytest_benchmark_by_hand(env, timed, commit):
    benchmarks = []
    for r in timed:
        s = sorted(x * 1e-6 for x in r.timing.samples_us) or [r.timing.median_us * 1e-6]
        q = statistics.quantiles(s, n=4, method="inclusive") if len(s) > 1 else [s[0]] * 3
        mean = statistics.fmean(s)
        benchmarks.append({
            "group": r.op, "name": f"{r.case}[{r.backend}]", "fullname": f"{r.op}/{r.case}[{r.backend}]",
            "params": {"backend": r.backend, "case": r.case}, "param": r.backend,
            "extra_info": _pytest_benchmark_extra(r), "options": {"timer": r.timing.clock},
            "stats": {"min": s[0], "max": s[-1], "mean": mean, "stddev": statistics.stdev(s) if len(s) > 1 else 0.0,
                      "rounds": len(s), "median": statistics.median(s), "iqr": q[2] - q[0], "q1": q[0], "q3": q[2],
                      "iqr_outliers": 0, "stddev_outliers": 0, "outliers": "0;0", "ld15iqr": s[0], "hd15iqr": s[-1],
                      "ops": 1 / mean if mean else 0.0, "total": sum(s), "data": s,
                      "iterations": r.timing.calls_per_sample}})
    return {"machine_info": {"node": platform.node(), "python_version": env["python"], "gpu": env.get("gpu"),
                             "run_id": env.get("run_id")},
            "commit_info": commit, "benchmarks": benchmarks, "datetime": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "version": "5.2.3"}