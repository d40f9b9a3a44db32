"""The results store: load `bench` documents and compare them.

- several backends in one run (one GPU, one commit): side by side;
- one backend on several GPUs: side by side in % of each device's datasheet roof;
- a baseline and a new run on one GPU: per (op, case, backend) a verdict from both runs' sample
  spreads: faster, slower, same, or ambiguous (a change past the gate that the noise can explain);
  a case the baseline timed that is missing, declined or failing in the new run fails the gate by name.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

GATE = 0.05  # relative change that matters
Z = 2.0  # standard errors a change must clear to count as real


class InputError(ValueError):
    """A results file that is missing, unreadable or not a bench document: a usage error (exit 2)."""


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
    if doc.get("schema") not in (0, 1):
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
