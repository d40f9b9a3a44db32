"""The timer: device events around each call with the L2 overwritten before it and a spin kernel that
hides the host's launch work, until the standard error of the mean is small or the budget is spent
(median and spread); CUDA-graph replays of many calls for calls too short to time alone; NVTX ranges
that name each timed call; NVML telemetry beside each measurement; the calibration of the device's
copy bandwidth and matmul rates. On the CPU it falls back to wall-clock and says so.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

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
    return timing_from(samples, "cuda-events" if cuda else "wall", host_us=host_us)


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
    return timing_from(samples, "cuda-graph", calls_per_sample=n)


def timing_from(samples, clock, calls_per_sample=1, host_us=None):
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
