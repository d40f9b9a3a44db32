"""`python -m harness <command>` (also `dsv4-harness`): check (conformance against the float64
reference), bench (timing against the roofline), calibrate (the device's measured ceilings), compare
(bench result files side by side, or a new run against a baseline) and report (markdown and plots)."""

from __future__ import annotations

import argparse
import os
import sys

from tabulate import tabulate

from harness import backends
from harness import cases
from harness import check
from harness import comparators
from harness import ops
from harness import roofline
from harness.contract import OPS

CPU_BENCH_PER_OP = 2  # quick cases per op that bench times on the CPU (plumbing, not measurement)


EXIT_STATUS = """exit status:
  0  pass: every case passed (check, bench), no case slower, missing or failing (compare --baseline)
  1  failure: a case failed, or the gate found a case slower, missing or failing in the new run
  2  usage or input error: a bad option or value, an unknown backend or case, a missing or malformed
     file, no device of the kind asked for, a missing optional extra (the message names it to install),
     a run stopped by a lost CUDA context; one line on stderr, no traceback"""

LISTS = "comma- or space-separated, or repeated"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """The epilog as written; every option with a default says it (None: the help says what happens)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and not any(action.default is v for v in (None, False, argparse.SUPPRESS)) \
                and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, as for every other usage error
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _names(choices=None):
    """An option that takes names in one style everywhere: `--x a,b`, `--x a b` and `--x a --x b` are the same."""
    class Names(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            names = list(getattr(namespace, self.dest) or [])
            for value in values:
                for name in filter(None, value.split(",")):
                    if choices and name not in choices:
                        parser.error(f"argument {option_string}: {name!r} is not one of {', '.join(choices)}")
                    names.append(name)
            setattr(namespace, self.dest, names)
    return Names


def _count(least):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} is less than {least}")
        return value
    parse.__name__ = f"count >= {least}"
    return parse


def _device_name(text):
    kind, _, index = text.partition(":")
    if text in ("auto", "cpu", "cuda") or (kind == "cuda" and index.isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a device: cpu, cuda, cuda:N or auto")


def _gate(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 10:
        raise argparse.ArgumentTypeError(f"{value} is not a relative slowdown (0.05 is 5 %)")
    return value


def main(argv=None):
    from harness import results
    try:
        return _run(argv)
    except results.InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (| head): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run(argv):
    parser = _Parser(prog="python -m harness", description=__doc__, epilog=EXIT_STATUS, formatter_class=_Formatter)
    sub = parser.add_subparsers(dest="command", required=True)
    kw = dict(epilog=EXIT_STATUS, formatter_class=_Formatter)
    registered = ", ".join(backends.REGISTERED)
    p = sub.add_parser("check", help="check backends against the float64 reference", **kw)
    p.add_argument("--backend", action=_names(), nargs="+", metavar="NAME",
                   help=f"registered name ({registered}) or a dotted module exporting the five ops; {LISTS}; "
                        "default: every available non-reference backend, else the reference")
    p.add_argument("--device", type=_device_name, default="auto", help="cpu, cuda, cuda:N or auto (cuda when there "
                                                                         "is one)")
    p.add_argument("--ops", action=_names(OPS), nargs="+", metavar="OP",
                   help=f"subset of {', '.join(OPS)}; {LISTS}; default: all")
    tier = p.add_mutually_exclusive_group()
    tier.add_argument("--quick", dest="tier", action="store_const", const="quick", help="small cases (the default)")
    tier.add_argument("--full", dest="tier", action="store_const", const="full", help="add production-sized cases")
    p.add_argument("--case", action=_names(), nargs="+", metavar="NAME",
                   help=f"only these cases (names as --list-cases prints them, or fuzz-<op>-<seed>); {LISTS}")
    p.add_argument("--list-cases", action="store_true", help="print the cases (op, family, tier, name, seed) and exit")
    p.add_argument("--fuzz", type=_count(0), default=0, metavar="N", help="add N fuzzed cases per op")
    p.add_argument("--seed", type=int, default=0, help="seed of the fuzzer (case i gets seed*1000+i)")
    p.add_argument("--verbose", "-v", action="store_true", help="a line per case")
    b = sub.add_parser("bench", help="time backends on benchmark cases against the roofline", **kw)
    b.add_argument("--backend", action=_names(), nargs="+", metavar="NAME",
                   help=f"registered name ({registered}) or a dotted module; {LISTS}; "
                        "default: every available backend but the reference (torch included)")
    b.add_argument("--cases", action=_names(), nargs="+", metavar="NAME",
                   help=f"benchmark sets ({', '.join(cases.BENCH)}), quick (the small test cases; on the CPU the first "
                        f"{CPU_BENCH_PER_OP} per op) or case names; {LISTS}; default: v4-flash")
    b.add_argument("--list-cases", action="store_true", help="print the benchmark sets and their cases and exit")
    b.add_argument("--device", type=_device_name, default="auto", help="cpu, cuda, cuda:N or auto")
    b.add_argument("--ops", action=_names(OPS), nargs="+", metavar="OP", help=f"subset of the ops; {LISTS}")
    b.add_argument("--reps", type=_count(1), default=30, help="timed calls per (case, backend), at most")
    b.add_argument("--out", metavar="FILE", help="write the JSON results document here")
    b.add_argument("--pytest-benchmark", metavar="FILE", help="also write pytest-benchmark's JSON layout here")
    b.add_argument("--flashinfer-trace", metavar="FILE", help="also write flashinfer-bench Trace lines (JSONL) here")
    cal = sub.add_parser("calibrate", help="measure copy bandwidth and bf16 / fp8 matmul rates on the device", **kw)
    cal.add_argument("--device", type=_device_name, default="auto", help="cpu, cuda, cuda:N or auto")
    cal.add_argument("--out", metavar="FILE", help="write the measurements as JSON")
    cmp = sub.add_parser("compare", help="compare bench result files: side by side, or against a baseline", **kw)
    cmp.add_argument("files", nargs="+", metavar="FILE")
    cmp.add_argument("--baseline", metavar="FILE",
                     help="judge every FILE against this run (same GPU): exit 1 when a case the baseline timed is "
                          "slower past the gate, missing, declined or failing in FILE, or when they share no case")
    cmp.add_argument("--gate", type=_gate, default=0.05, help="relative slowdown that fails")
    rep = sub.add_parser("report", help="markdown tables and PNG plots of bench result files (plots need the bench "
                                        "extra: matplotlib)", **kw)
    rep.add_argument("files", nargs="+", metavar="FILE")
    rep.add_argument("--out", default="report", metavar="DIR", help="folder for report.md and the plots")
    args = parser.parse_args(argv)
    commands = {"check": check_command, "bench": bench_command, "calibrate": calibrate_command,
                "compare": compare_command, "report": report_command}
    return commands[args.command](args)


def compare_command(args):
    from harness import results
    docs = [results.load(f) for f in args.files]
    if not args.baseline:
        rows, headers = results.side_by_side(docs)
        print(tabulate(rows, headers=headers, tablefmt="github"))
        return 0
    base = results.load(args.baseline)
    status = 0
    for doc in docs:
        if base["environment"].get("gpu") != doc["environment"].get("gpu"):
            print(f"warning: {doc['path']} ran on {doc['environment'].get('gpu')}, the baseline on "
                  f"{base['environment'].get('gpu')}", file=sys.stderr)
        changes = results.compare_runs(base, doc, args.gate)
        new_label, base_label = results.labels([doc, base])
        print(f"\n{new_label} against {base_label} (gate {args.gate:.0%})")
        print(tabulate([[*c.key, _us(c.base_us), _us(c.new_us), f"{c.ratio:.3f}" if c.ratio else "-", c.verdict,
                         c.message] for c in changes],
                       headers=["op", "case", "backend", "base us", "new us", "new/base", "verdict", "why"],
                       tablefmt="github"))
        compared = [c for c in changes if c.verdict != "new"]
        if not any(c.new_us is not None for c in compared):  # nothing measured in both: no evidence of a pass
            status = 1
            print(f"FAIL: {doc['path']} shares no timed case with the baseline {base['path']} "
                  f"({len(compared)} baseline cases, none timed in the new run)")
        for verdict, what in (("missing", "missing (absent, declined or untimed)"), ("failed", "failing"),
                              ("slower", "slower past the gate")):
            hit = [c for c in changes if c.verdict == verdict]
            if hit:
                status = 1
                print(f"FAIL: {len(hit)} {what}: " + ", ".join("/".join(c.key) for c in hit))
    return status


def _us(value):
    return "-" if value is None else f"{value:.1f}"


def calibrate_command(args):
    import json

    from harness import results, timer
    device = _device(args.device)
    measured = timer.calibrate(device)
    if not measured:
        print(f"calibrate: nothing to measure on {device} (needs a CUDA device)")
        return 0
    import torch
    props = torch.cuda.get_device_properties(device)
    peaks = roofline.peaks_of(device)
    rows = [["copy bandwidth (GB/s, read + write)", f"{measured['copy_gbps']:.0f}", peaks and peaks.hbm_gbps],
            ["bf16 matmul 8192^3 (TFLOP/s)", f"{measured['bf16_tflops']:.0f}", peaks and peaks.bf16_tflops]]
    if "fp8_tflops" in measured:
        rows.append(["fp8 scaled matmul 8192^3 (TFLOP/s)", f"{measured['fp8_tflops']:.0f}",
                     peaks and peaks.fp8_tflops])
    print(f"calibrate: {props.name}, {props.multi_processor_count} SMs; datasheet entry "
          f"{peaks.name if peaks else 'none'}")
    print(tabulate(rows, headers=["ceiling", "measured", "datasheet"], tablefmt="github"))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"environment": results.environment(device), "measured": measured,
                       "datasheet": peaks.__dict__ if peaks else None}, f, indent=1)
    return 0


def _device(arg):
    device = check.pick_device(arg)
    if device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            _usage_error(f"--device {arg}: no CUDA device here (torch {torch.__version__}, CUDA "
                         f"{torch.version.cuda or 'none: a CPU build'}); use --device cpu")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            _usage_error(f"--device {arg}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    if device == "cpu":  # Triton kernels can run on the CPU only in its interpreter, set before import
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return device


def _usage_error(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


# the extra to install when a registered backend's package is missing (the peers' own reasons name their wheels)
EXTRAS = {"triton": "pip install 'dsv4-sparse-harness[triton]'", "cuda": "pip install 'dsv4-sparse-harness[cuda]'"}


def _backends(names, device):
    if names:
        loaded = []
        for name in names:
            try:
                loaded.append(backends.load(name, device))
            except backends.BackendUnavailable as err:
                missing = any(w in str(err) for w in ("not installed", "No module named", "importing"))
                _usage_error(f"{err}" + (f" (install {EXTRAS[name]})" if missing and name in EXTRAS else ""))
        return loaded
    return _available(device) or [backends.load("reference", device)]


def _available(device):
    """Every registered backend but the reference that can run on the device; says once which cannot, and why."""
    reasons = backends.availability(device=device)
    unavailable = {n: why for n, why in reasons.items() if why is not None}
    if unavailable:
        print(f"not run, unavailable on {device}: {', '.join(unavailable)}")
        for why in unavailable.values():
            print(f"- {why}")
    return [backends.load(n, device) for n, why in reasons.items() if why is None and n != "reference"]


def _select_cases(args):
    ops = args.ops or list(OPS)
    if args.case:
        chosen = []
        for name in args.case:
            hits = []
            for op in ops:
                try:
                    hits.append(cases.find(op, name))
                except KeyError:
                    pass
            if not hits:
                print(f"error: no case named {name!r} among ops {', '.join(ops)}", file=sys.stderr)
                sys.exit(2)
            chosen += hits
        return chosen
    return cases.select(ops, args.tier or "quick") + cases.fuzz(ops, args.fuzz, args.seed)


class Progress:
    """One rewritten line on a terminal; in a log (stdout or stderr not a terminal) a line per case group
    (op and family) as it finishes; a line per case when verbose."""

    def __init__(self, total, verbose):
        self.total, self.done, self.verbose = total, 0, verbose
        self.tty = sys.stderr.isatty() and sys.stdout.isatty()
        self.group, self.group_results = None, []

    def _group_done(self):
        if self.group_results and not self.tty and not self.verbose:
            rs = self.group_results
            failed, skipped = sum(r.failed for r in rs), sum(r.verdict == "skip" for r in rs)
            print(f"[{self.done}/{self.total}] {self.group[0]} {self.group[1]}: {len(rs)} (backend, case) pairs, "
                  f"{failed} failed" + (f", {skipped} skipped" if skipped else "")
                  + f" ({sum(r.seconds for r in rs):.1f}s)", file=sys.stderr, flush=True)
        self.group_results = []

    def step(self, result):
        if (result.case.op, result.case.family) != self.group:
            self._group_done()
            self.group = (result.case.op, result.case.family)
        self.group_results.append(result)
        self.done += 1
        line = f"[{self.done}/{self.total}] {result.backend} {result.case.id}: {result.verdict} ({result.seconds:.2f}s)"
        if self.verbose and result.metrics:
            line += f" {_metrics(result)}"
        if self.verbose:
            print(line, file=sys.stderr)
        elif self.tty:
            print("\r" + line[:110].ljust(110), end="", file=sys.stderr, flush=True)

    def close(self):
        self._group_done()
        if self.tty and not self.verbose:
            print("\r" + " " * 110 + "\r", end="", file=sys.stderr, flush=True)


def _worst(results):
    """The worst errors of a group: max |err| and relative L2 of the main output."""
    worst = {}
    for r in results:
        for k, v in r.metrics.items():
            worst[k] = max(worst.get(k, 0.0), v)
    main = "out." if "out.max_abs_err" in worst else ""
    if f"{main}max_abs_err" in worst:
        return f"max|err| {worst[f'{main}max_abs_err']:.2e}, relL2 {worst.get(f'{main}rel_l2', 0.0):.2e}"
    return next((rule for r in results if r.case.family != "bad-input" and (rule := ops.entry(r.case.op).rule)), "")


def _metrics(result):
    return ", ".join(f"{k} {v:.2e}" for k, v in sorted(result.metrics.items()))


def _list_cases(chosen):
    print(tabulate([[c.op, c.family, c.tier, c.name, c.seed] for c in chosen],
                   headers=["op", "family", "tier", "name (for --case / --cases)", "seed"], tablefmt="github"))
    return 0


def check_command(args):
    if args.list_cases:
        return _list_cases(cases.select(args.ops or list(OPS), args.tier or "quick"))
    device = _device(args.device)
    loaded = _backends(args.backend, device)
    chosen = _select_cases(args)
    fuzz_note = f", fuzz {args.fuzz} per op from seed {args.seed}" if args.fuzz else ""
    print(f"check: {', '.join(b.name for b in loaded)} against the float64 reference on {device}; "
          f"{len(chosen)} cases ({args.tier or 'quick'}{fuzz_note})")
    progress = Progress(len(chosen) * len(loaded), args.verbose)
    results = {b.name: [] for b in loaded}
    lost = None
    for case in chosen:
        for backend in loaded:
            r = check.check_case(backend, case, device, keep_outputs=len(loaded) > 1)
            results[backend.name].append(r)
            progress.step(r)
            if r.verdict == "error" and check.cuda_context_lost(device):
                lost = r
                break
        if lost:
            break
    progress.close()

    failures = [r for rs in results.values() for r in rs if r.failed]
    if lost:
        _print_failures(failures)
        not_run = len(chosen) * len(loaded) - sum(map(len, results.values()))
        _context_lost(lost.backend, lost.case.id, lost.message, not_run)
        return 2
    skipped = [r for rs in results.values() for r in rs if r.verdict == "skip"]
    for op in OPS:
        families = sorted({c.family for c in chosen if c.op == op}, key=lambda f: [c.family for c in chosen].index(f))
        if not families:
            continue
        rows = []
        for fam in families:
            row = [fam, sum(1 for c in chosen if c.op == op and c.family == fam)]
            for b in loaded:
                group = [r for r in results[b.name] if r.case.op == op and r.case.family == fam]
                failed, skips = sum(r.failed for r in group), sum(r.verdict == "skip" for r in group)
                knowns = sum(r.verdict == "known" for r in group)
                verdict = f"FAIL {failed}" if failed else "SKIP" if skips == len(group) else "PASS"
                notes = [f"{knowns} known"] * bool(knowns) + [f"{skips} skipped"] * bool(skips and skips < len(group))
                if notes:
                    verdict += f" ({', '.join(notes)})"
                row += [verdict, _worst(group) + comparators.recall_summary([r.metrics for r in group])]
            rows.append(row)
        headers = ["family", "cases"] + [h for b in loaded for h in (b.name, "worst")]
        print(f"\n{op}")
        print(tabulate(rows, headers=headers, tablefmt="github"))

    if len(loaded) > 1:
        _agreement(loaded, results)

    _print_failures(failures)
    _shrink_fuzz_failures(loaded, failures, device)
    knowns = [r for rs in results.values() for r in rs if r.verdict == "known"]
    if knowns:
        print(f"\n{len(knowns)} known disagreements (harness/known.py; they do not fail the run):")
        for r in knowns:
            print(f"- {r.backend} {r.case.id}: {r.message}")
    if skipped:
        reasons = sorted({r.message for r in skipped})
        print(f"\n{len(skipped)} skipped (backend, case) pairs:")
        for reason in reasons:
            print(f"- {sum(r.message == reason for r in skipped)} x {reason}")
    total = sum(len(rs) for rs in results.values())
    print(f"\n{total - len(failures) - len(skipped) - len(knowns)} passed, {len(failures)} failed"
          + (f", {len(knowns)} known" if knowns else "") + (f", {len(skipped)} skipped" if skipped else ""))
    return 1 if failures else 0


def _shrink_fuzz_failures(loaded, failures, device, at_most=3):
    """Each failing fuzz case (the first few) shrunk to a small case that fails the same way, with its
    repro (the shrunk case's name encodes the shrink path, so --case rebuilds it alone)."""
    fuzzed = [r for r in failures if r.case.family == "fuzz"][:at_most]
    if fuzzed:
        print(f"\nshrinking {len(fuzzed)} failing fuzz case(s) (up to {check.SHRINK_BUDGET_S:.0f} s each):")
    modules = {b.name: b for b in loaded}
    for r in fuzzed:
        small = check.shrink(modules[r.backend], r, device)
        print(f"- {r.backend} {r.case.id} -> {small.case.id} {small.case.params}: {small.message}")
        print(f"  repro: {small.repro}")


def _print_failures(failures):
    if failures:
        print(f"\n{len(failures)} failing (backend, case) pairs:")
        for r in failures:
            print(f"- {r.backend} {r.case.id} (seed {r.case.seed}) {r.verdict.upper()}: {r.message}")
            print(f"  repro: {r.repro}")


def _agreement(loaded, results):
    """Backend x backend: on how many cases their outputs agree within the op's bounds."""
    rows = []
    for a in loaded:
        row = [a.name]
        for b in loaded:
            both = [(ra, rb) for ra, rb in zip(results[a.name], results[b.name]) if ra.outputs and rb.outputs]
            n = sum(check.agree(ra.case, ra.outputs["inputs"], ra.outputs["got"], rb.outputs["got"]) for ra, rb in both)
            row.append(f"{n}/{len(both)}")
        rows.append(row)
    print("\nagreement (cases with outputs where the two backends agree within the contract bounds)")
    print(tabulate(rows, headers=[""] + [b.name for b in loaded], tablefmt="github"))


def _bench_cases(names, ops, device):
    """The cases and a note on what was left out: on the CPU `quick` is cut to CPU_BENCH_PER_OP per op, since
    a wall-clock time there tests the plumbing only."""
    ops = ops or list(OPS)
    chosen, note = [], ""
    for name in names or ["v4-flash"]:
        if name in cases.BENCH:
            chosen += cases.BENCH[name]
        elif name == "quick":
            quick = [c for c in cases.select(ops) if c.family != "bad-input"]
            if device == "cpu":
                few = [c for op in ops for c in [c for c in quick if c.op == op][:CPU_BENCH_PER_OP]]
                note = f" (quick on the CPU: the first {CPU_BENCH_PER_OP} of each op's {len(quick)} cases)"
                quick = few
            chosen += quick
        else:
            hits = [c for group in cases.BENCH.values() for c in group if c.name == name]
            hits += [c for c in cases.TESTS if c.name == name]
            if not hits:
                _usage_error(f"no benchmark set or case named {name!r} (--list-cases prints them)")
            chosen += hits
    return [c for c in dict.fromkeys(chosen) if c.op in ops], note


def bench_command(args):
    if args.list_cases:
        return _list_cases([c for group in cases.BENCH.values() for c in group if c.op in (args.ops or OPS)])
    from harness import bench, exporters, results, timer
    device = _device(args.device)
    loaded = _backends(args.backend, device) if args.backend else _available(device)
    chosen, cases_note = _bench_cases(args.cases, args.ops, device)
    copy = timer.copy_bandwidth(device)
    peaks, flush = roofline.peaks_of(device), timer.l2_flush_buffer(device)
    clock = (f"CUDA events with the L2 flushed, CUDA-graph replays under {timer.GRAPH_BELOW_US:.0f} us"
             if device != "cpu" else "wall clock (CPU: plumbing only, not a measurement)")
    print(f"bench: {', '.join(b.name for b in loaded)} on {device}, {len(chosen)} cases{cases_note}, "
          f"up to {args.reps} reps, "
          f"median by {clock}" + (f"; copy bandwidth {copy:.0f} GB/s" if copy else ""))
    total = len(chosen) * len(loaded)
    records = []
    env = results.environment(device)
    for case in chosen:
        prepared = check.prepare(case, device)
        case_records = []
        for backend in loaded:
            r = bench.bench_case(backend, case, device, copy, prepared, reps=args.reps, peaks=peaks, flush=flush)
            records.append(r)
            case_records.append(r)
            t = f"{r.timing.median_us:.1f} us" if r.timing else "-"
            print(f"[{len(records)}/{total}] {backend.name} {case.id}: {r.verdict} {t}", file=sys.stderr)
            if args.out:  # after every record, so a run stopped by a time limit keeps what it measured
                _speedups(records)
                results.write_json(args.out, device, {"copy_gbps": copy}, records, peaks, env=env, complete=False)
            if r.verdict == "error" and check.cuda_context_lost(device):
                _context_lost(backend.name, case.id, r.message, total - len(records))
                return 2
        # one clock for the case's backends (a ratio of a graph replay to an events time compares launch gaps)
        regraphed = [r for r in bench.same_clock(case_records, loaded, case, device, prepared, copy, peaks, flush)
                     if "graphed_for" in r.extra]
        for r in regraphed:
            print(f"[same clock] {r.backend} {case.id}: {r.timing.median_us:.1f} us by graph "
                  f"({r.extra['events_median_us']:.1f} by events)", file=sys.stderr)
        if args.out and regraphed:  # (the records as written after each one, with the new clock)
            _speedups(records)
            results.write_json(args.out, device, {"copy_gbps": copy}, records, peaks, env=env, complete=False)
    _speedups(records)
    rates = device != "cpu"  # a wall-clock rate on the CPU measures the plumbing: left blank
    rows = [[r.op, r.case, r.backend, r.verdict, r.timing.clock if r.timing else "-",
             f"{r.timing.median_us:.1f}" if r.timing else "-",
             f"{r.timing.p10_us:.1f}-{r.timing.p90_us:.1f} ({r.timing.samples})" if r.timing else "-",
             f"{r.plan_timing.median_us:.1f}" if r.plan_timing else "-",
             f"{r.extra['per_step_us']:.0f} ({r.extra['layers']})" if "per_step_us" in r.extra else "-",
             f"{r.bytes / 1e6:.1f}", f"{r.gbps:.0f}" if rates else "-", f"{r.pct_copy:.0f}" if copy else "-",
             f"{r.pct_datasheet:.0f}" if r.pct_datasheet is not None else "-", f"{r.tflops:.1f}" if rates else "-",
             f"{r.speedup_vs_torch:.2f}x" if r.speedup_vs_torch else "-"] for r in records]
    print(tabulate(rows, headers=["op", "case", "backend", "check", "timer", "median us", "p10-p90 (n)", "plan us",
                                  "per step us (layers)", "MB", "GB/s", "% copy", "% roof", "TFLOP/s", "vs torch"],
                   tablefmt="github"))
    print("plan us: the backend's planner (contract section 7), once per forward step; "
          "per step = plan + layers x call, layers of the case's model (v4-flash 43, v4-pro 61)")
    for r in records:
        if r.verdict != "pass":
            print(f"- {r.backend} {r.op}/{r.case} {r.verdict.upper()}: {r.message}")  # skips say why
    if args.out:
        results.write_json(args.out, device, {"copy_gbps": copy}, records, peaks, env=env)
        print(f"wrote {args.out}")
    if args.pytest_benchmark:
        exporters.write_pytest_benchmark(args.pytest_benchmark, device, records, env=env)
    if args.flashinfer_trace:
        exporters.write_flashinfer_trace(args.flashinfer_trace, device, records)
    return 1 if any(r.verdict not in ("pass", "skip", "known") for r in records) else 0


def _context_lost(backend, case, message, not_run):
    print(f"\nstopped: {backend} {case} broke the CUDA context ({message}); {not_run} (backend, case) pairs were "
          f"not run. Run them in a new process without that backend or case.", file=sys.stderr)


def _speedups(records):
    """Each record's speed-up over the torch backend on the same case, where torch has run it."""
    base = {(r.op, r.case): r for r in records if r.backend == "torch" and r.timing}
    for r in records:
        ref = base.get((r.op, r.case))
        if ref and r.timing:
            r.speedup_vs_torch = ref.timing.median_us / r.timing.median_us


def report_command(args):
    from harness import report
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        _usage_error("report draws its plots with matplotlib, which is not installed: "
                     "pip install 'dsv4-sparse-harness[bench]'")
    for path in report.write(args.files, args.out):
        print(f"wrote {path}")
    return 0
