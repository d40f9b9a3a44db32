"""The results store: load `bench` documents and compare them.

- several backends in one run (one GPU, one commit): side by side;
- one backend on several GPUs: side by side in % of each device's datasheet roof;
- a baseline and a new run on one GPU: per (op, case, backend) a verdict from both runs' sample
  spreads: faster, slower, same, or ambiguous (a change past the gate that the noise can explain).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

GATE = 0.05  # relative change that matters
Z = 2.0  # standard errors a change must clear to count as real


def load(path):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") not in (0, 1):
        raise ValueError(f"{path}: unknown results schema {doc.get('schema')!r}")
    doc["path"] = str(path)
    return doc


def label(doc):
    env = doc["environment"]
    commit = (env.get("git_commit") or "?")[:7]
    partial = "" if doc.get("complete", True) else " (stopped part-way)"
    return f"{env.get('gpu', env.get('device'))}@{commit}{partial}"


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
    base_us: float
    new_us: float
    ratio: float
    verdict: str  # faster, slower, same, ambiguous


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
    base, new = records(base_doc), records(new_doc)
    out = []
    for key in sorted(base.keys() & new.keys()):
        b, n = base[key]["timing"], new[key]["timing"]
        out.append(Change(key, b["median_us"], n["median_us"], n["median_us"] / b["median_us"], verdict(b, n, gate)))
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
    headers = ["op", "case"] + [f"{backend} {label(doc)}" for doc, backend in columns]
    return rows, headers
