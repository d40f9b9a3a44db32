"""The CI scripts, run on the CPU with stand-ins for python3, nvidia-smi and compute-sanitizer on PATH:
the nightly and the sanitizer stay inside the CUDA_VISIBLE_DEVICES mask they are given, every stage's
failure fails the nightly, stages run one by one (a workflow step each), install.sh says what it does, and
the example workflow has what a CI maintainer needs."""

import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

FAKE_PYTHON = r'''#!/usr/bin/env bash
echo "python3 $* | CVD=${CUDA_VISIBLE_DEVICES-unset}" >>"$FAKE_LOG"
case "$*" in
    *device_count*) echo "${FAKE_GPUS:-2}" ;;
    *get_device_name*) echo h200 ;;
    "-c import cupy") exit 1 ;;
    *availability*) echo "--backend torch" ;;
    "-m harness calibrate"*) exit "${FAKE_CALIBRATE_RC:-0}" ;;
    "-m harness bench"*)
        while [ $# -gt 0 ]; do [ "$1" = --out ] && echo '{}' >"$2"; shift; done ;;
    "-m harness report"*)
        mkdir -p "$OUT/report" && echo "# report" >"$OUT/report/report.md"; exit "${FAKE_REPORT_RC:-0}" ;;
esac
exit 0
'''

FAKE_SANITIZER = r'''#!/usr/bin/env bash
echo "compute-sanitizer $* | CVD=${CUDA_VISIBLE_DEVICES-unset}" >>"$FAKE_LOG"
echo "========= ERROR SUMMARY: 0 errors"
echo "10 passed, 0 failed"
'''

FAKE_NVIDIA_SMI = r'''#!/usr/bin/env bash
for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; done
'''


@pytest.fixture
def fakes(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python3", FAKE_PYTHON), ("compute-sanitizer", FAKE_SANITIZER),
                       ("nvidia-smi", FAKE_NVIDIA_SMI)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "no-wheels").mkdir()
    log = tmp_path / "calls.log"
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "GITHUB_STEP_SUMMARY")}
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", FAKE_LOG=str(log), OUT=str(tmp_path / "out"),
               WHEELS=str(tmp_path / "no-wheels"))

    def run(script, *args, **extra):
        r = subprocess.run(["bash", str(ROOT / "ci" / script), *args], env={**env, **extra}, capture_output=True,
                           text=True, timeout=120)
        calls = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        return r, calls
    run.tmp = tmp_path
    return run


def _pins(calls, what):
    return [c.rsplit("CVD=", 1)[1] for c in calls if what in c]


def test_sanitize_spreads_its_tools_over_the_masked_gpus_only(fakes):
    r, calls = fakes("sanitize.sh", CUDA_VISIBLE_DEVICES="5,7")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(_pins(calls, "--tool")) == ["5", "5", "7"]  # not 0, 1, 2 of the machine's eight
    r, calls = fakes("sanitize.sh")  # no mask: the machine's GPUs
    assert sorted(_pins(calls, "--tool")) == ["0", "1", "2"]


def test_nightly_bench_shards_stay_inside_the_mask(fakes):
    r, calls = fakes("nightly.sh", "bench", CUDA_VISIBLE_DEVICES="5,7", NIGHTLY_PARALLEL_BENCH="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(_pins(calls, "harness bench")) == ["5", "7"]
    r, calls = fakes("nightly.sh", "bench", CUDA_VISIBLE_DEVICES="GPU-aa,GPU-bb", FAKE_GPUS="2")
    assert _pins(calls, "harness bench") == ["GPU-aa", "GPU-bb"]  # UUID masks too


@pytest.mark.parametrize("stage,fail", [("calibrate", "FAKE_CALIBRATE_RC"), ("report", "FAKE_REPORT_RC")])
def test_every_nightly_stage_failure_fails_the_job(fakes, stage, fail):
    before = ["bench"] if stage == "report" else []
    r, _ = fakes("nightly.sh", *before, stage)
    assert r.returncode == 0, r.stdout + r.stderr
    r, _ = fakes("nightly.sh", *before, stage, **{fail: "1"})
    assert r.returncode == 1 and f"stage {stage} failed" in r.stdout


def test_nightly_runs_the_stages_it_is_given_and_writes_junit(fakes):
    r, calls = fakes("nightly.sh", "calibrate")
    assert r.returncode == 0 and any("harness calibrate" in c for c in calls)
    assert not any("-m pytest" in c or "harness bench" in c for c in calls)
    r, calls = fakes("nightly.sh", "conformance", GITHUB_STEP_SUMMARY=str(fakes.tmp / "summary.md"))
    (pytest_call,) = [c for c in calls if "-m pytest" in c]
    assert "--junitxml" in pytest_call and "conformance.xml" in pytest_call
    assert "## conformance" in (fakes.tmp / "summary.md").read_text()
    r, _ = fakes("nightly.sh", "no-such-stage")
    assert r.returncode == 2 and "unknown stage" in r.stdout


def test_install_says_what_it_does(fakes):
    python = fakes.tmp / "bin" / "python3"
    env = {"PYTHON": str(python)}
    r, calls = fakes("install.sh", **env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any("torch" in line for line in lines) and any("extras" in line for line in lines) and "done" in lines[-1]
    assert any("pip install" in c and "-e .[test,triton,cuda,bench]" in c for c in calls)


def test_the_example_workflow_has_what_a_ci_maintainer_needs():
    text = (ROOT / "ci" / "nightly-workflow.example.yml").read_text()
    flow = yaml.safe_load(text)
    (job,) = flow["jobs"].values()
    steps = job["steps"]
    assert flow["concurrency"]["group"] and all("timeout-minutes" in s for s in steps)
    assert not any(s.get("continue-on-error") for s in steps) and "|| true" not in text
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "python3 -m venv" in runs and "GITHUB_PATH" in runs
    assert "ci/peer_wheels.sh" in runs and "GITHUB_STEP_SUMMARY" in runs
    stages = shlex.split(next(line for line in (ROOT / "ci" / "nightly.sh").read_text().splitlines()
                              if line.startswith("all_stages="))[len("all_stages=("):-1])
    for stage in stages:  # one step per stage, so the run's page shows which one failed
        (step,) = [s for s in steps if f"ci/nightly.sh {stage}" in s.get("run", "")]
        assert "!cancelled()" in step.get("if", ""), stage  # runs after an earlier stage failed
    assert any("conformance.xml" in str(s.get("with", {}).get("path", "")) for s in steps)  # the JUnit XML
