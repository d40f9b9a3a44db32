"""The checker itself: it accepts correct backends, rejects every known-wrong one, says where, and
its repro commands reproduce exactly the failing case."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import backends
from harness import cases
from harness import check
from tests.known_wrong.impl import BUGS

ROOT = Path(__file__).resolve().parents[1]


def run_cases(name, ops=None, fuzz=0):
    backend = backends.load(name, "cpu")
    chosen = cases.select(ops) + cases.fuzz(ops or list(cases.contract.OPS), fuzz, seed=1)
    return [check.check_case(backend, case, "cpu") for case in chosen]


@pytest.mark.parametrize("name", ["reference", "tests.known_wrong.correct"])
def test_correct_backends_pass_every_quick_case(name):
    failures = [f"{r.case.id}: {r.message}" for r in run_cases(name, fuzz=3) if r.failed]  # skips: no planner
    assert not failures, failures


def first_failure(name, op):
    """The first quick case of op the backend fails (the rest need not run), or None."""
    backend = backends.load(name, "cpu")
    for case in cases.select([op]):
        r = check.check_case(backend, case, "cpu")
        if not r.ok:
            return r
    return None


# what the first failure of some fixtures must say (the checker names the cause, not only a symptom)
SAYS = {"attention_output_buffer_reused": "reused output buffer",
        "indexer_output_buffer_reused": "reused output buffer",
        "kv_score_width_blamed_on_ape": "not naming it first", "attention_masked_row_times_zero": "NaN pattern",
        "indexer_tail_left_unwritten": "NaN pattern"}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_every_known_wrong_backend_is_rejected(bug):
    op, what = BUGS[bug]
    first = first_failure(f"tests.known_wrong.{bug}", op)
    assert first is not None, f"{bug} ({what}) passed every {op} case"
    assert SAYS.get(bug, "") in first.message, first.message
    # the message names an output of the op and an element, or the bad argument
    assert first.message and first.case.op == op
    assert first.repro.startswith(f"python -m harness check --backend tests.known_wrong.{bug} --device cpu --ops {op}")


def test_skipped_validation_is_rejected_by_the_bad_input_family():
    results = run_cases("tests.known_wrong.skips_validation")
    failed = [r for r in results if not r.ok]
    assert failed and all(r.case.family == "bad-input" for r in failed)
    assert all(r.ok for r in results if r.case.family != "bad-input")


def test_a_failing_fuzz_case_shrinks_to_a_smaller_one_that_rebuilds_from_its_name():
    backend = backends.load("tests.known_wrong.topk_short_path_page_size_64", "cpu")
    failing = None
    for seed in range(40):
        r = check.check_case(backend, cases.fuzz_case("topk_indices", seed), "cpu")
        if r.failed:
            failing = r
            break
    assert failing is not None, "40 fuzz cases never drew a short row with a page size other than 64"
    small = check.shrink(backend, failing, "cpu", budget_s=60)
    assert small.failed and "~" in small.case.name and small.case.name.startswith(failing.case.name)
    before, after = failing.case.params, small.case.params
    assert len(after["seq_lens"]) <= len(before["seq_lens"]) and sum(after["seq_lens"]) < sum(before["seq_lens"])
    again = cases.find("topk_indices", small.case.name)  # the name alone rebuilds it
    assert repr(again.params) == repr(after)
    assert check.check_case(backend, again, "cpu").failed
    assert small.repro.endswith(f"--case {small.case.name}")
    r = _cli(*small.repro.split()[3:])  # the printed repro, run as printed, rebuilds the case and fails
    assert r.returncode != 0 and "0 passed, 1 failed" in r.stdout and "shrinking 1 failing fuzz case" in r.stdout


def _cli(*args, path=()):
    """The CLI in a subprocess from the repo root; `path`: more folders for PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *map(str, path)]))
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def test_cli_check_reference_passes_and_prints_tables():
    r = _cli("check", "--backend", "reference", "--device", "cpu", "--quick", "--ops", "topk_indices",
             "sparse_attention")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| family" in r.stdout and "sparse_attention" in r.stdout and " 0 failed" in r.stdout


def test_cli_failure_prints_a_repro_that_reproduces_it():
    r = _cli("check", "--backend", "tests.known_wrong.lse_base2", "--backend", "reference", "--device", "cpu",
             "--ops", "sparse_attention")
    assert r.returncode == 1
    assert "agreement" in r.stdout
    repro = next(line.split("repro: ", 1)[1] for line in r.stdout.splitlines() if "repro: " in line)
    again = _cli(*repro.split()[3:])
    assert again.returncode == 1 and "0 passed, 1 failed" in again.stdout, again.stdout


def test_cli_unknown_backend_is_a_usage_error():
    r = _cli("check", "--backend", "no_such_module_xyz", "--device", "cpu")
    assert r.returncode == 2 and "registered names" in r.stderr


def test_a_known_disagreement_is_reported_not_failed(monkeypatch):
    import re
    from harness import known
    backend = backends.load("tests.known_wrong.lse_base2", "cpu")
    case = cases.find("sparse_attention", "no-sink")
    failing = check.check_case(backend, case, "cpu")
    assert failing.verdict == "fail"
    entry = known.Known(backend.name, "sparse_attention", re.escape(failing.message), "the reason", "seen here")
    monkeypatch.setattr(known, "LEDGER", (entry,))
    r = check.check_case(backend, case, "cpu")
    assert r.verdict == "known" and not r.failed and "the reason" in r.message and failing.message in r.message
    monkeypatch.setattr(known, "LEDGER", (known.Known(backend.name, "compress", ".*", "other op", "-"),))
    assert check.check_case(backend, case, "cpu").verdict == "fail"


def test_the_ledger_matches_what_was_seen_and_nothing_worse():
    from harness import known
    # contract §5's revised indexer bound admits DeepGEMM's fp8 MMA numerics: no indexer entry remains
    assert not known.match("deepgemm", "indexer_logits", "logits: row 0 relative L2 0.00123 > 0.0003")
    assert not known.match("deepgemm", "indexer_logits", "logits: -inf pattern differs at 3 elements")
    state_only = ("state: NaN pattern differs at 4 elements; every difference lies in state the contract fixes but no "
                  "later call reads (an engine may leave it unwritten)")
    assert known.match("sglang", "compress", state_only)
    assert not known.match("sglang", "compress", "out: 3 elements past the bound, worst out[0, 1]")
    assert known.match("flashinfer", "topk_indices", "indices: a second run gave different bits (nondeterminism)")
    assert not known.match("flashinfer", "topk_indices", "indices: row 0 selects 3 not the 4 largest")


def test_check_and_bench_stop_when_a_backend_breaks_the_cuda_context(tmp_path, monkeypatch, capsys):
    from harness import cli
    (tmp_path / "crashing_backend.py").write_text(
        "def _crash(*args, **kwargs):\n"
        "    raise RuntimeError('CUDA error: an illegal memory access was encountered')\n"
        "compress = indexer_logits = topk_indices = sparse_attention = sparse_attention_fp8 = _crash\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(check, "cuda_context_lost", lambda device: True)  # as after a real illegal address
    for argv in (["check", "--ops", "sparse_attention"],
                 ["bench", "--cases", "quick", "--ops", "sparse_attention", "--reps", "2"]):
        assert cli.main([*argv, "--backend", "crashing_backend", "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert "crashing_backend sparse_attention/" in err and "broke the CUDA context" in err
        assert "pairs were not run" in err


def test_cli_bench_on_cpu_writes_a_results_document(tmp_path):
    import json
    out = tmp_path / "bench.json"
    r = _cli("bench", "--backend", "torch", "--backend", "tests.known_wrong.lse_base2", "--device", "cpu",
             "--cases", "quick", "--ops", "sparse_attention", "--reps", "2", "--out", str(out),
             "--flashinfer-trace", str(tmp_path / "trace.jsonl"))
    assert r.returncode == 1, r.stdout  # the wrong backend's verdicts fail the run
    assert "wall clock" in r.stdout and "vs torch" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == 1 and doc["environment"]["device"] == "cpu" and doc["datasheet"] is None
    records = doc["records"]
    assert {r["backend"] for r in records} == {"torch", "tests.known_wrong.lse_base2"}
    for rec in records:
        assert rec["timing"]["clock"] == "wall" and rec["timing"]["median_us"] > 0 and rec["bytes"] > 0
    assert any(rec["verdict"] == "fail" for rec in records if rec["backend"] != "torch")
    assert all(rec["verdict"] == "pass" for rec in records if rec["backend"] == "torch")
    _check_flashinfer_trace(tmp_path / "trace.jsonl", len(records))


def _check_flashinfer_trace(path, expected):
    """Each line follows flashinfer-bench's Trace rules: PASSED has correctness and performance,
    INCORRECT_NUMERICAL correctness only; workload axes are non-negative ints, inputs typed."""
    import json
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == expected
    statuses = set()
    for t in lines:
        ev, wl = t["evaluation"], t["workload"]
        statuses.add(ev["status"])
        assert t["definition"] == "dsv4_sparse_attention" and t["solution"] in ("torch", "tests.known_wrong.lse_base2")
        assert wl["uuid"] and all(isinstance(v, int) and v >= 0 for v in wl["axes"].values())
        assert {"q", "kv", "indices", "sm_scale"} <= set(wl["inputs"])
        assert wl["inputs"]["q"] == {"type": "random"} and wl["inputs"]["sm_scale"]["type"] == "scalar"
        assert ev["environment"]["hardware"] and ev["timestamp"]
        if ev["status"] == "PASSED":
            assert ev["correctness"]["max_absolute_error"] >= 0 and ev["performance"]["latency_ms"] > 0
            if t["solution"] != "torch":
                assert ev["performance"]["speedup_factor"] > 0
        else:
            assert ev["status"] == "INCORRECT_NUMERICAL" and "performance" not in ev and ev["correctness"]
    assert statuses == {"PASSED", "INCORRECT_NUMERICAL"}


def test_an_output_that_is_an_input_view_is_rejected(tmp_path, monkeypatch):
    (tmp_path / "aliasing_backend.py").write_text(
        "import references\n"
        "from references import compress, indexer_logits, topk_indices, sparse_attention_fp8\n"
        "def sparse_attention(q, kv, indices, **kw):\n"
        "    out, lse = references.sparse_attention(q, kv, indices, **kw)\n"
        "    q.copy_(out)\n"
        "    return q, lse\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    backend = backends.load("aliasing_backend", "cpu")
    result = check.check_case(backend, cases.find("sparse_attention", "csa-decode-h64"), "cpu")
    assert not result.ok and "shares memory with an input" in result.message


def test_flashinfer_trace_lines_parse_with_flashinfer_bench(tmp_path):
    # flashinfer-bench 0.1.2's pydantic Trace model accepted these lines when checked by hand; here it
    # runs where the package is installed
    trace = pytest.importorskip("flashinfer_bench.data.trace")
    path = tmp_path / "trace.jsonl"
    r = _cli("bench", "--backend", "torch", "--device", "cpu", "--cases", "quick", "--ops", "topk_indices",
             "--reps", "2", "--flashinfer-trace", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    for line in path.read_text().splitlines():
        assert trace.Trace.model_validate_json(line).evaluation.status.value == "PASSED"


PARTIAL_BACKEND = (
    "from harness import contract\n"
    "import references\n"
    "from references import compress, indexer_logits, sparse_attention, sparse_attention_fp8\n"
    "def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True):\n"
    "    contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)\n"
    "    if k != 512:\n"
    "        raise contract.Unsupported(f'k={k}: this kernel is built for k=512 only')\n"
    "    return references.topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size)\n")


def test_a_declined_case_is_skipped_with_its_reason(tmp_path, monkeypatch):
    (tmp_path / "partial_backend.py").write_text(PARTIAL_BACKEND)
    monkeypatch.syspath_prepend(str(tmp_path))
    backend = backends.load("partial_backend", "cpu")
    declined = check.check_case(backend, cases.find("topk_indices", "long-k1024"), "cpu")
    assert declined.verdict == "skip" and not declined.failed and "k=1024" in declined.message
    assert check.check_case(backend, cases.find("topk_indices", "long-k512"), "cpu").ok
    bad = [c for c in cases.select(["topk_indices"]) if c.family == "bad-input"][0]
    assert check.check_case(backend, bad, "cpu").ok  # validation still comes first


def test_cli_counts_skips_apart_from_failures(tmp_path):
    (tmp_path / "partial_backend.py").write_text(PARTIAL_BACKEND)
    run = lambda *a: _cli(*a, path=[tmp_path])  # noqa: E731
    r = run("check", "--backend", "partial_backend", "--device", "cpu", "--ops", "topk_indices")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped" in r.stdout and "k=2048: this kernel is built for k=512 only" in r.stdout
    assert " 0 failed, " in r.stdout
    out = tmp_path / "bench.json"
    b = run("bench", "--backend", "partial_backend", "--device", "cpu", "--cases", "long-k512,long-k1024", "--ops",
            "topk_indices", "--reps", "2", "--out", str(out))  # named: on the CPU quick keeps only 2 cases per op
    assert b.returncode == 0, b.stdout + b.stderr
    import json
    verdicts = {r["case"]: (r["verdict"], r["timing"]) for r in json.loads(out.read_text())["records"]}
    assert verdicts["long-k1024"][0] == "skip" and verdicts["long-k1024"][1] is None
    assert verdicts["long-k512"][0] == "pass" and verdicts["long-k512"][1]
