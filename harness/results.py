"""The results document of a `bench` run, written and read here, and comparisons of such documents.

A document: the schema version, the environment (who ran what where: GPU, driver, packages, the
harness's commit), the calibration, the datasheet roof and the records. Comparisons:
- several backends in one run (one GPU, one commit): side by side;
- one backend on several GPUs: side by side in % of each device's datasheet roof;
- a baseline and a new run on one GPU: per (op, case, backend) a verdict from both runs' sample
  spreads: faster, slower, same, or ambiguous (a change past the gate that the noise can explain);
  a case the baseline timed that is missing, declined or failing in the new run fails the gate by name.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import subprocess
import time
import tomllib
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from harness.timer import pci_bus_id

GATE = 0.05  # relative change that matters
Z = 2.0  # standard errors a change must clear to count as real


class InputError(ValueError):
    """A results file that is missing, unreadable or not a bench document: a usage error (exit 2)."""


# ---------------------------------------------------------------------------------------------
# the document: environment, writing, reading


DIST = "dsv4-sparse-harness"
# the package of every backend (and the tools the timer uses) as pip names it; the first installed name wins
PACKAGES = {"torch": ["torch"], "triton": ["triton"], "cupy": ["cupy-cuda13x", "cupy-cuda12x", "cupy"],
            "nvidia-cuda-nvrtc": ["nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"], "sglang": ["sglang"],
            "flashinfer-python": ["flashinfer-python"], "sgl-deep-gemm": ["sgl-deep-gemm"],
            "sgl-flash-mla": ["sgl-flash-mla"], "apache-tvm-ffi": ["apache-tvm-ffi"], "msgspec": ["msgspec"],
            "nvtx": ["nvtx"],
            "nvidia-ml-py": ["nvidia-ml-py"], "pytest-benchmark": ["pytest-benchmark"]}


def _version(*names):
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def harness_version():
    """The version of the harness that runs: pyproject.toml's beside the imported package when it runs
    from a source tree (the GPU machine runs a copied tree, nothing installed), else the installed
    distribution's."""
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        project = {}
    return project.get("version") if project.get("name") == DIST else _version(DIST)


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
           "harness_version": harness_version(), "packages": {k: _version(*names) for k, names in PACKAGES.items()}}
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


SCHEMA = 1  # what write_json writes
READABLE_SCHEMAS = (0, SCHEMA)  # what load reads


def write_json(path, device, calibration, records, peaks=None, *, env=None, complete=True):
    """The run's document; complete=False marks one written part-way (the run may have been stopped)."""
    doc = {"schema": SCHEMA, "environment": env or environment(device), "calibration": calibration,
           "datasheet": asdict(peaks) if peaks else None, "complete": complete,
           "records": [asdict(r) for r in records]}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)  # a reader never sees half a document


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as err:
        raise InputError(f"{path}: cannot read it ({err.strerror or err})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not a JSON document ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise InputError(f"{path}: not a bench results document (no 'records' list)")
    if doc.get("schema") not in READABLE_SCHEMAS:
        raise InputError(f"{path}: unknown results schema {doc.get('schema')!r}")
    doc.setdefault("environment", {})
    doc["path"] = str(path)
    return doc


def label(doc):
    env = doc["environment"]
    commit = (env.get("git_commit") or "?")[:7]
    partial = "" if doc.get("complete", True) else " (stopped part-way)"
    return f"{env.get('gpu', env.get('device'))}@{commit}{partial}"


def labels(docs):
    """One label per document, distinct: runs that share GPU and commit are told apart by their run id,
    and copies of one run (the same run id) by their file names."""
    plain = [label(d) for d in docs]
    out = []
    for doc, text in zip(docs, plain):
        run_id = doc["environment"].get("run_id")
        out.append(f"{text} run {run_id[:8]}" if plain.count(text) > 1 and run_id else text)
    out = [f"{text} ({Path(doc['path']).name})" if out.count(text) > 1 else text for doc, text in zip(docs, out)]
    return [f"{text} #{i + 1}" if out.count(text) > 1 else text for i, text in enumerate(out)]  # one file twice


def records(doc):
    return {(r["op"], r["case"], r["backend"]): r for r in doc["records"] if r.get("timing")}


def _median_se(timing):
    """Standard error of the median: about 1.25 standard errors of the mean."""
    n = max(timing["samples"], 1)
    stdev = timing.get("stdev_us") or (timing["p90_us"] - timing["p10_us"]) / 2.56  # normal p10-p90 width
    return 1.25 * stdev / math.sqrt(n)


@dataclass
class Change:
    key: tuple
    base_us: float | None
    new_us: float | None
    ratio: float | None
    verdict: str  # faster, slower, same, ambiguous; missing or failed (the case no longer passes); new
    message: str = ""

    @property
    def fails_gate(self):
        return self.verdict in ("slower", "missing", "failed")


def verdict(base, new, gate=GATE):
    """base, new: record timings. A change counts as real past Z standard errors of the two medians
    and as large past the gate: real and large -> faster / slower; large but within the noise ->
    ambiguous; small -> same."""
    diff = new["median_us"] - base["median_us"]
    se = math.hypot(_median_se(base), _median_se(new))
    ratio = new["median_us"] / base["median_us"]
    real = abs(diff) > Z * se
    big = abs(ratio - 1) > gate
    if big and real:
        return "slower" if diff > 0 else "faster"
    if big:
        return "ambiguous"
    return "same"


def compare_runs(base_doc, new_doc, gate=GATE):
    """A Change per (op, case, backend) the baseline timed with a passing (or known) check: its verdict
    from the two timings, or `missing` (not in the new run, declined or untimed there) or `failed`
    (the new run's check failed or errored), which fail the gate like `slower`; then the new run's
    timed cases the baseline lacks, as `new`."""
    base = {k: r for k, r in records(base_doc).items() if r.get("verdict", "pass") in ("pass", "known")}
    new_all = {(r["op"], r["case"], r["backend"]): r for r in new_doc["records"]}
    out = []
    for key in sorted(base):
        b, n = base[key]["timing"], new_all.get(key)
        if n is None:
            out.append(Change(key, b["median_us"], None, None, "missing", "not in the new run"))
        elif n.get("verdict", "pass") in ("fail", "error"):
            out.append(Change(key, b["median_us"], None, None, "failed", f"{n['verdict']}: {n.get('message', '')}"))
        elif not n.get("timing"):
            why = f"{n.get('verdict')}: {n.get('message', '')}" if n.get("message") else "not timed"
            out.append(Change(key, b["median_us"], None, None, "missing", why))
        else:
            t = n["timing"]
            ratio = t["median_us"] / b["median_us"]
            out.append(Change(key, b["median_us"], t["median_us"], ratio, verdict(b, t, gate)))
    for key in sorted(records(new_doc).keys() - base.keys()):
        out.append(Change(key, None, new_all[key]["timing"]["median_us"], None, "new"))
    return out


def side_by_side(docs):
    """Rows (op, case, then per (doc, backend): median us and % roof) and their headers."""
    columns = []
    for doc in docs:
        for backend in sorted({r["backend"] for r in doc["records"]}):
            columns.append((doc, backend))
    keys = sorted({(r["op"], r["case"]) for doc in docs for r in doc["records"]})
    rows = []
    for op, case in keys:
        row = [op, case]
        for doc, backend in columns:
            r = records(doc).get((op, case, backend))
            if r is None:
                row.append("-")
            else:
                roof = r.get("pct_datasheet")
                row.append(f"{r['timing']['median_us']:.1f}" + (f" ({roof:.0f}%)" if roof is not None else ""))
        rows.append(row)
    names = dict(zip(map(id, docs), labels(docs)))
    headers = ["op", "case"] + [f"{backend} {names[id(doc)]}" for doc, backend in columns]
    return rows, headers
