"""The timer and the timer cross-check on the CPU (wall clock: plumbing, not measurements)."""

import importlib.metadata
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness import bench, crosscheck, exporters, results, timer


def test_time_call_stops_on_a_small_standard_error_and_reports_the_host_cost():
    calls = []
    # a 2 ms sleep keeps the spread small even on a loaded machine (a busy 2-core CI box made a
    # sum-over-range call noisy enough to run to `reps`); the budget bounds a pathological machine
    t = timer.time_call(lambda: calls.append(time.sleep(0.002)), "cpu", warmup=3, reps=50, min_reps=10, rel_sem=0.5,
                     budget_s=0.5)
    assert t.clock == "wall" and t.samples == len(t.samples_us) and 10 <= t.samples < 50  # stopped early
    assert len(calls) == 3 + t.samples
    assert t.p10_us <= t.median_us <= t.p90_us and t.median_us == statistics.median(t.samples_us)
    assert t.host_us is not None and t.host_us > 0


def test_time_call_runs_to_reps_when_noise_stays_high():
    t = timer.time_call(lambda: None, "cpu", warmup=1, reps=12, min_reps=4, rel_sem=0.0, budget_s=60)
    assert t.samples == 12


def test_nvtx_labels_have_no_slash():
    # Nsight's --nvtx-include reads '/' as nesting of push/pop ranges
    label = timer.nvtx_label("topk_indices", "b64-16384", "cuda")
    assert "/" not in label and label.split(":") == ["topk_indices", "b64-16384", "cuda"]


def test_input_copies_outgrow_the_flush_buffer():
    class Flush:
        def numel(self):
            return 120 << 20
    assert bench._rotations(4 << 20, Flush()) == 30
    assert bench._rotations(1 << 30, Flush()) == 1
    assert bench._rotations(1, Flush()) == 32  # capped
    assert bench._rotations(4 << 20, None) == 1


def test_crosscheck_prints_every_clock(capsys):
    assert crosscheck.main(["topk_indices:long-k512:torch", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "topk_indices:long-k512:torch" in out and "events loop" in out and "do_bench" in out


def test_an_explicit_commit_wins_over_a_copied_git(monkeypatch):
    monkeypatch.setenv("HARNESS_GIT_COMMIT", "abc1234")
    env = results.environment("cpu")
    assert env["git_commit"] == "abc1234" and env["git_commit_source"] == "HARNESS_GIT_COMMIT"
    monkeypatch.delenv("HARNESS_GIT_COMMIT")
    assert len(results.environment("cpu")["git_commit"]) == 40  # this checkout's HEAD


@pytest.mark.parametrize("samples", [[10.0, 11.0], [10.0, 11.0, 12.0], [5.0, 5.1, 5.2, 90.0], [3.0] * 4 + [40.0]])
def test_p10_and_p90_stay_within_the_samples_and_the_count_is_reported(samples):
    t = timer.timing_from(samples, "wall")
    assert min(samples) <= t.p10_us <= t.median_us <= t.p90_us <= max(samples)
    assert t.samples == len(samples) == len(t.samples_us)


class FakeNVML:
    """pynvml as far as telemetry uses it: two GPUs told apart by PCI bus id; the index lookup is a trap."""
    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0
    nvmlClocksEventReasonGpuIdle, nvmlClocksEventReasonSwPowerCap = 0x1, 0x4
    nvmlClocksEventReasonSwThermalSlowdown, nvmlClocksEventReasonHwSlowdown = 0x20, 0x8

    def __init__(self, reasons):
        self.reasons, self.asked = reasons, []

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        raise AssertionError("NVML's index ignores CUDA_VISIBLE_DEVICES")

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        self.asked.append(bus_id)
        return bus_id

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.reasons

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return 1980  # at the maximum: a clock ratio would see no throttling

    nvmlDeviceGetMaxClockInfo = nvmlDeviceGetClockInfo

    def nvmlDeviceGetTemperature(self, handle, kind):
        return 60

    def nvmlDeviceGetPowerUsage(self, handle):
        return 500_000


@pytest.mark.parametrize("reasons,throttled", [(0x20, True), (0x4 | 0x1, True), (0x1, False), (0, False)])
def test_telemetry_finds_the_torch_device_by_pci_bus_id_and_reads_nvml_reasons(monkeypatch, reasons, throttled):
    nvml = FakeNVML(reasons)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0, name="NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    got = timer.telemetry("cuda:1")  # under CUDA_VISIBLE_DEVICES=4,5 this is physical GPU 5: the bus id says so
    assert nvml.asked == ["00000000:3B:00.0"] and got["pci_bus_id"] == "00000000:3B:00.0"
    assert got["throttled"] is throttled
    assert ("sw_thermal_slowdown" in got["clock_event_reasons"]) == bool(reasons & 0x20)
    assert timer.throttled(got, {}) is throttled and timer.throttled({}, got) is throttled


def test_environment_records_the_harness_commit_not_the_current_directory(tmp_path, monkeypatch):
    root = Path(results.__file__).resolve().parent.parent
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode or Path(subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                                              capture_output=True, text=True).stdout.strip()).resolve() != root:
        pytest.skip("the harness is not a git checkout here")
    other = tmp_path / "elsewhere"
    other.mkdir()
    git = ["git", "-C", str(other), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "another project"], check=True)
    monkeypatch.chdir(other)
    monkeypatch.delenv("HARNESS_GIT_COMMIT", raising=False)
    env = results.environment("cpu")
    assert env["git_commit"] == head.stdout.strip() and str(root) in env["git_commit_source"]


def test_environment_records_versions_threads_and_a_run_id(monkeypatch):
    env, again = results.environment("cpu"), results.environment("cpu")
    assert env["harness_version"] == importlib.metadata.version("dsv4-sparse-harness")  # installed from this tree
    # a copied source tree with nothing installed (the GPU machine) still names its version
    monkeypatch.setattr(results, "_version", lambda *names: None)
    assert results.environment("cpu")["harness_version"] == env["harness_version"]
    assert {"torch", "triton", "cupy", "sglang", "flashinfer-python", "sgl-deep-gemm", "sgl-flash-mla"} <= set(
        env["packages"])
    assert env["packages"]["torch"] == importlib.metadata.version("torch")
    assert env["cpu_threads"] == torch.get_num_threads() and env["run_id"] != again["run_id"]


def test_pytest_benchmark_export_is_made_by_pytest_benchmark(tmp_path):
    stats_module = pytest.importorskip("pytest_benchmark.stats")
    import pytest_benchmark
    samples = [12.0, 10.0, 11.5, 30.0, 10.5]
    timing = timer.timing_from(samples, "wall")
    record = bench.Record("topk_indices", "long-k512", "torch", "pass", timing=timing, bytes=1000, flops=0)
    path = tmp_path / "pb.json"
    exporters.write_pytest_benchmark(path, "cpu", [record, bench.Record("topk_indices", "x", "torch", "skip")])
    doc = json.loads(path.read_text())
    want = stats_module.Stats()
    for x in samples:
        want.update(x * 1e-6)
    (entry,) = doc["benchmarks"]
    assert doc["version"] == pytest_benchmark.__version__ and "python_implementation" in doc["machine_info"]
    assert {k: entry["stats"][k] for k in want.fields} == pytest.approx(want.as_dict())
    assert entry["group"] == "topk_indices" and entry["param"] == "torch" and entry["stats"]["rounds"] == 5


# ---- one clock a case (bench.same_clock): a graph replay's time is never set against an events time
class _Inputs:
    def clone(self):
        return self


def _timed(backend, clock, median):
    r = bench.Record("topk_indices", "b64-65536", backend, "pass", bytes=16 << 20)
    r.timing = timer.Timing(median, median, median, 10, clock)
    return r


def _same_clock(monkeypatch, records, graph):
    from harness import cases
    monkeypatch.setattr(bench, "_call", lambda module, case, x: module)
    monkeypatch.setattr(bench, "time_graph", lambda calls, device, label=None: graph(calls[0]))
    backends = [SimpleNamespace(name=r.backend, module=r.backend) for r in records]
    case = cases.find("topk_indices", "b64-65536")
    return bench.same_clock(records, backends, case, "cuda", (_Inputs(), None), copy_gbps=3000.0)


def test_same_clock_times_the_events_backend_of_a_graphed_case_by_graph_and_redoes_its_rates(monkeypatch):
    ours, peer = _timed("cuda", "cuda-graph", 14.3), _timed("sglang", "cuda-events", 21.0)
    _same_clock(monkeypatch, [ours, peer], lambda backend: timer.Timing(16.0, 15.9, 16.2, 20, "cuda-graph"))
    assert peer.timing.clock == "cuda-graph" and peer.timing.median_us == 16.0
    assert peer.extra["events_median_us"] == 21.0 and "graphed_for" in peer.extra
    assert peer.gbps == pytest.approx((16 << 20) / 16e-6 / 1e9) and peer.pct_copy == pytest.approx(peer.gbps / 30)
    assert ours.timing.median_us == 14.3 and "graphed_for" not in ours.extra  # already on the graph's clock
    assert "mixed_clocks" not in peer.extra and "mixed_clocks" not in ours.extra


def test_same_clock_leaves_a_case_timed_by_events_alone(monkeypatch):
    ours, peer = _timed("cuda", "cuda-events", 21.4), _timed("sglang", "cuda-events", 22.9)

    def never(backend):
        raise AssertionError("no backend of an events-only case is graphed")
    _same_clock(monkeypatch, [ours, peer], never)
    assert (ours.timing.median_us, peer.timing.median_us) == (21.4, 22.9)


def test_same_clock_flags_a_case_whose_backend_cannot_be_captured(monkeypatch):
    ours, peer = _timed("cuda", "cuda-graph", 14.3), _timed("sglang", "cuda-events", 21.0)

    def syncs(backend):
        raise RuntimeError("operation not permitted when stream is capturing")
    _same_clock(monkeypatch, [ours, peer], syncs)
    assert peer.timing.clock == "cuda-events" and "capturing" in peer.extra["graph_error"]
    assert ours.extra["mixed_clocks"] == peer.extra["mixed_clocks"] == ["cuda-events", "cuda-graph"]
