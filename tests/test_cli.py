"""The command line as a new user and a CI job meet it: help with defaults, exit statuses and every
registered backend; --list-cases; one list style; usage errors in one line with exit 2 (missing extras
named); unavailable backends said once; a progress line per case group in logs; a short CPU bench."""

import re
import sys

import pytest
import torch

from harness import backends
from harness import cases
from harness import cli


def _main(capsys, *args):
    """The CLI in this process (cheap): exit status, stdout, stderr."""
    try:
        rc = cli.main([str(a) for a in args])
    except SystemExit as stop:
        rc = stop.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("command", ["check", "bench"])
def test_help_lists_every_backend_the_defaults_and_the_exit_statuses(capsys, command):
    rc, out, _ = _main(capsys, command, "--help")
    assert rc == 0
    flat = " ".join(out.split())  # argparse wraps lines
    assert all(name in flat for name in backends.REGISTERED)
    assert "(default: auto)" in flat and "--list-cases" in flat
    assert "exit status" in out and re.search(r"^\s+2\s+usage or input error", out, re.M)
    if command == "bench":
        assert "(default: 30)" in flat and "v4-flash" in flat


def test_list_cases_prints_the_names_that_case_accepts(capsys):
    rc, out, _ = _main(capsys, "check", "--list-cases", "--ops", "topk_indices")
    names = [line.split("|")[4].strip() for line in out.splitlines()[2:]]
    assert rc == 0 and names == [c.name for c in cases.select(["topk_indices"])]
    assert all(cases.find("topk_indices", name) for name in names)
    rc, out, _ = _main(capsys, "bench", "--list-cases")
    assert rc == 0 and all(c.name in out for group in cases.BENCH.values() for c in group)


def test_every_list_option_takes_commas_spaces_and_repeats_alike(capsys):
    outs = [_main(capsys, "check", "--list-cases", *argv)[1] for argv in
            (["--ops", "topk_indices,sparse_attention"], ["--ops", "topk_indices", "sparse_attention"],
             ["--ops", "topk_indices", "--ops", "sparse_attention"])]
    assert outs[0] == outs[1] == outs[2] and "sparse_attention" in outs[0] and "compress" not in outs[0]
    rc, _, err = _main(capsys, "check", "--list-cases", "--ops", "topk_indices,attention")
    assert rc == 2 and "'attention'" in err


@pytest.mark.parametrize("argv,says", [
    (["bench", "--reps", "0"], "--reps"), (["check", "--fuzz", "-3"], "--fuzz"),
    (["check", "--device", "gpu"], "--device"), (["bench", "--cases", "no-such-set", "--device", "cpu"], "no-such-set"),
    (["check", "--case", "no-such-case", "--device", "cpu", "--backend", "reference"], "no-such-case"),
    (["compare", "--gate", "-1", "x.json"], "--gate"), (["check", "--backend", "no_such_module", "--device", "cpu"],
                                                          "no_such_module")])
def test_usage_errors_exit_2_with_one_line(capsys, argv, says):
    rc, out, err = _main(capsys, *argv)
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_asking_for_cuda_without_a_gpu_is_a_usage_error(capsys):
    rc, _, err = _main(capsys, "check", "--device", "cuda", "--backend", "reference")
    assert rc == 2 and "no CUDA device" in err and len(err.strip().splitlines()) == 1


def test_a_missing_optional_extra_is_named(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    rc, _, err = _main(capsys, "report", tmp_path / "x.json")
    assert rc == 2 and "dsv4-sparse-harness[bench]" in err and "matplotlib" in err

    def no_cupy(name, device=None):
        raise backends.BackendUnavailable(f"backend {name!r} cannot run on {device}: CuPy is not installed "
                                          "(No module named 'cupy'); pip install cupy-cuda13x")
    monkeypatch.setattr(backends, "load", no_cupy)
    rc, _, err = _main(capsys, "check", "--backend", "cuda", "--device", "cpu")
    assert rc == 2 and "dsv4-sparse-harness[cuda]" in err and len(err.strip().splitlines()) == 1


def test_unavailable_backends_are_named_once_at_the_top_and_logs_get_a_line_per_group(capsys):
    rc, out, err = _main(capsys, "check", "--device", "cpu", "--ops", "topk_indices", "--case",
                         "short-rows,exactly-k-and-k+1")
    assert rc == 0, out + err
    reasons = {n: why for n, why in backends.availability(device="cpu").items() if why}
    assert reasons and out.startswith("not run, unavailable on cpu: ")  # cuda at least: this is a CPU
    assert all(out.count(why) == 1 for why in reasons.values())
    groups = [line for line in err.splitlines() if re.match(r"\[\d+/\d+\] topk_indices \S+: ", line)]
    assert [g.split()[2] for g in groups] == ["short:", "boundary:"], err  # capsys is not a terminal


def test_bench_on_the_cpu_times_a_few_quick_cases_and_says_so():
    quick = [c for c in cases.select() if c.family != "bad-input"]
    few, note = cli._bench_cases(["quick"], None, "cpu")
    assert 0 < len(few) <= cli.CPU_BENCH_PER_OP * len(cases.contract.OPS)
    assert {c.op for c in few} == {c.op for c in quick}
    assert "CPU" in note and str(len(quick)) in note
    every, note = cli._bench_cases(["quick"], None, "cuda")
    assert every == quick and note == ""


def test_bench_on_the_cpu_prints_no_rates(capsys):
    rc, out, err = _main(capsys, "bench", "--backend", "torch", "--device", "cpu", "--cases", "long-k512", "--ops",
                         "topk_indices", "--reps", "2")
    assert rc == 0, out + err
    lines = out.splitlines()
    header = [c.strip() for c in next(line for line in lines if line.startswith("| op")).split("|")]
    row = [c.strip() for c in next(line for line in lines if "| long-k512" in line).split("|")]
    assert row[header.index("GB/s")] == "-" and row[header.index("TFLOP/s")] == "-"
    assert float(row[header.index("median us")]) > 0 and row[header.index("p10-p90 (n)")].endswith("(2)")
