"""Exporters of a bench run's records to other tools' formats: flashinfer-bench Trace lines (each case
as a flashinfer-bench workload) and pytest-benchmark's JSON layout."""

from __future__ import annotations

import inspect
import json
import platform
import statistics
import time
import uuid
from types import SimpleNamespace

import torch

import references
from harness.results import DIST, environment

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
    it ran (from the records' speedup_vs_torch). Correctness carries the worst absolute error
    (relative L2 and the rest under extra); the maximum relative error is not computed here and is
    written as "NaN"."""
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
