"""`python -m harness report FILE ... [--out DIR]`: markdown tables and matplotlib plots (PNG) of
bench result files: per op a table of every timed (case, backend, run), then why each other record
did not pass (declined cases grouped by reason); a bar plot of % of the datasheet
roof (or of the measured copy bandwidth when the roof is unknown); a roofline scatter of the
records that do arithmetic. CPU runs (wall clock, plumbing only) have no roofline: they stay in the
tables and out of the plots, and the report says so. Runs that share a label are told apart by run id."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from harness import results


def is_cpu(doc):
    """A run timed by the CPU's wall clock: no datasheet roof, no measured bandwidth."""
    env = doc["environment"]
    return not env.get("gpu") and str(env.get("device", "")).startswith("cpu")


def _rows(docs):
    rows = []
    for doc, run in zip(docs, results.labels(docs)):
        cpu = is_cpu(doc)  # its rates are wall-clock plumbing: left blank rather than shown as 0 GB/s
        for r in doc["records"]:
            t = r.get("timing")
            rows.append({"op": r["op"], "case": r["case"], "backend": r["backend"], "run": run, "check": r["verdict"],
                         "message": r.get("message") or "", "cpu": cpu, "n": t["samples"] if t else None,
                         "us": t["median_us"] if t else None, "gbps": None if cpu else r.get("gbps", 0.0),
                         "pct_copy": None if cpu else r.get("pct_copy"), "pct_roof": r.get("pct_datasheet"),
                         "tflops": None if cpu else r.get("tflops", 0.0), "vs_torch": r.get("speedup_vs_torch"),
                         "plan_us": (r.get("plan_timing") or {}).get("median_us"),
                         "per_step_us": (r.get("extra") or {}).get("per_step_us"),
                         "layers": (r.get("extra") or {}).get("layers"),
                         "intensity": r["flops"] / r["bytes"] if r.get("bytes") else 0.0})
    return rows


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def markdown(docs):
    rows = _rows(docs)
    lines = ["# Benchmark report", "",
             "`median us` is one planned call (a layer); `plan us` the backend's planner (contract section 7), "
             "once per forward step; `per step us` = plan + layers x call for the case's model (layers in brackets).",
             ""]
    for doc, run in zip(docs, results.labels(docs)):
        env = doc["environment"]
        where = (f"CPU, {env.get('cpu_threads', '?')} threads, wall clock: no roofline" if is_cpu(doc) else
                 f"copy bandwidth {_fmt((doc.get('calibration') or {}).get('copy_gbps'), '.0f')} GB/s")
        lines.append(f"- `{doc['path']}` ({run}): {env.get('gpu', env.get('device'))}, harness "
                     f"{env.get('harness_version', '?')} at commit {env.get('git_commit')}, "
                     f"run {env.get('run_id', '?')}, "
                     f"torch {env.get('torch')}, triton {env.get('triton', '-')}, {where}")
    cpu = [doc for doc in docs if is_cpu(doc)]
    if cpu:
        lines += ["", f"CPU runs have no roofline (times are wall clock, plumbing only): "
                      f"{'no plots' if len(cpu) == len(docs) else 'they are left out of the plots'}."]
    for op in sorted({r["op"] for r in rows}):
        lines += ["", f"## {op}", ""]
        table = [[r["case"], r["backend"], r["run"], r["check"], _fmt(r["us"], ".1f"), _fmt(r["n"], "d"),
                  _fmt(r["plan_us"], ".1f"),
                  f"{r['per_step_us']:.0f} ({r['layers']})" if r["per_step_us"] is not None else "-",
                  _fmt(r["gbps"], ".0f"),
                  _fmt(r["pct_copy"], ".0f"), _fmt(r["pct_roof"], ".0f"), _fmt(r["tflops"], ".1f"),
                  _fmt(r["vs_torch"], ".2f")] for r in rows if r["op"] == op and r["check"] != "skip"]
        lines.append(tabulate(table, headers=["case", "backend", "run", "check", "median us", "n", "plan us",
                                              "per step us (layers)", "GB/s", "% copy", "% roof", "TFLOP/s",
                                              "x torch"], tablefmt="github"))
        lines += _not_passing([r for r in rows if r["op"] == op and r["check"] != "pass"])
    return "\n".join(lines) + "\n"


def _not_passing(rows):
    """One line per (verdict, backend, reason), naming its cases."""
    groups = {}
    for r in rows:
        groups.setdefault((r["check"], r["backend"], r["message"]), []).append(r["case"])
    lines = [f"- {check} {backend} ({', '.join(dict.fromkeys(cases))}): {message}"
             for (check, backend, message), cases in sorted(groups.items())]
    return ["", *lines] if lines else []


def _save(plt, fig, out_dir, name):
    fig.tight_layout()
    path = Path(out_dir) / name
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plots(docs, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in _rows(docs) if r["us"] and not r["cpu"]]  # a CPU run has no roofline to draw
    written = []
    if not rows:
        return written
    series = sorted({(r["backend"], r["run"]) for r in rows})
    labels = sorted({(r["op"], r["case"]) for r in rows})
    use_roof = all(r["pct_roof"] is not None for r in rows)
    fig, ax = plt.subplots(figsize=(max(8, len(labels) * 0.6), 5))
    width = 0.8 / len(series)
    for i, (backend, run) in enumerate(series):
        values = []
        for op, case in labels:
            hit = [r for r in rows if (r["op"], r["case"], r["backend"], r["run"]) == (op, case, backend, run)]
            pct = (hit[0]["pct_roof"] if use_roof else hit[0]["pct_copy"]) if hit else None
            values.append(pct or 0.0)
        ax.bar([x + i * width for x in range(len(labels))], values, width, label=f"{backend} {run}")
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))])
    ax.set_xticklabels([f"{op}\n{case}" for op, case in labels], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("% of datasheet roofline" if use_roof else "% of measured copy bandwidth")
    ax.legend(fontsize=7)
    written.append(_save(plt, fig, out_dir, "roof.png"))

    if not any(r["intensity"] > 0 for r in rows):  # nothing to place on a roofline
        return written
    fig, ax = plt.subplots(figsize=(7, 5))
    for backend, run in series:
        pts = [r for r in rows if (r["backend"], r["run"]) == (backend, run) and r["intensity"] > 0]
        ax.scatter([r["intensity"] for r in pts], [r["tflops"] for r in pts], label=f"{backend} {run}", s=18)
    for doc in docs:
        peaks = doc.get("datasheet")
        if peaks:
            xs = [10 ** (e / 10) for e in range(-20, 41)]
            ax.plot(xs, [min(peaks["bf16_tflops"], x * peaks["hbm_gbps"] / 1000) for x in xs], "k--", lw=0.8,
                    label=f"{peaks['name']} roof (bf16)")
            break
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOP per byte (fewest bytes)")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=7)
    written.append(_save(plt, fig, out_dir, "roofline.png"))
    return written


def write(files, out_dir):
    docs = [results.load(f) for f in files]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(markdown(docs))
    return [out / "report.md"] + plots(docs, out)
