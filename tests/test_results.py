"""Results store and roofline model: device lookup, speed-of-light floor, noise-aware verdicts,
the compare command's gate, and bench -> compare end to end on the CPU."""

import copy
import json
import re

import pytest

from harness import results
from harness import roofline
from tests.test_cli import _main  # the CLI in this process: exit status, stdout, stderr
from tests.test_harness_check import _cli


@pytest.mark.parametrize("name,sms,mem,want", [
    ("NVIDIA H200", 132, 150e9, "H200"), ("NVIDIA H100 80GB HBM3", 132, 85e9, "H100-SXM"),
    ("NVIDIA H100 PCIe", 114, 85e9, "H100-PCIe"), ("NVIDIA A100-SXM4-40GB", 108, 42e9, "A100-SXM4-40GB"),
    ("NVIDIA A100-SXM4-80GB", 108, 85e9, "A100-SXM4-80GB"), ("NVIDIA B200", 148, 190e9, "B200"),
    ("NVIDIA GB200", 152, 190e9, "GB200"), ("NVIDIA GeForce RTX 4090", 128, 25e9, "RTX 4090"),
    ("NVIDIA L40S", 142, 48e9, "L40S"), ("NVIDIA GH200 480GB", 132, 100e9, None), ("Tesla T4", 40, 16e9, None)])
def test_device_lookup(name, sms, mem, want):
    got = roofline.device_peaks(name, sms, mem)
    assert (got.name if got else None) == want


def test_floor_takes_the_larger_of_bytes_and_flops():
    h200 = roofline.device_peaks("NVIDIA H200", 132)
    assert roofline.floor_us(roofline.Work(4_800_000_000, 0), h200) == pytest.approx(1000)  # 4.8 GB at 4.8 TB/s
    assert roofline.floor_us(roofline.Work(0, int(989e12)), h200) == pytest.approx(1e6)  # 989 TFLOP at 989/s
    assert roofline.floor_us(roofline.Work(4_800_000_000, int(989e12)), h200) == pytest.approx(1e6)


def timing(median, stdev, samples=30):
    return {"median_us": median, "stdev_us": stdev, "samples": samples, "p10_us": median - stdev,
            "p90_us": median + stdev}


@pytest.mark.parametrize("base,new,want", [
    (timing(100, 1), timing(100.5, 1), "same"),
    (timing(100, 1), timing(110, 1), "slower"),
    (timing(100, 1), timing(90, 1), "faster"),
    (timing(100, 40), timing(110, 40), "ambiguous"),  # past the gate, inside the noise
    (timing(100, 0.1), timing(102, 0.1), "same"),  # real but under the gate
])
def test_verdicts_come_from_the_spreads(base, new, want):
    assert results.verdict(base, new) == want


def _doc(path, medians, gpu="NVIDIA H200", commit="a" * 40):
    doc = {"schema": 1, "environment": {"gpu": gpu, "git_commit": commit, "device": "cuda"}, "calibration": {},
           "datasheet": None, "records": [{"op": "topk_indices", "case": c, "backend": "triton", "verdict": "pass",
                                           "timing": timing(m, 1.0), "pct_datasheet": 50.0} for c, m in medians]}
    path.write_text(json.dumps(doc))
    return path


def test_compare_gate_fails_on_a_real_slowdown(tmp_path):
    base = _doc(tmp_path / "base.json", [("a", 100), ("b", 200)])
    same = _doc(tmp_path / "same.json", [("a", 100.2), ("b", 199)], commit="b" * 40)
    slow = _doc(tmp_path / "slow.json", [("a", 100), ("b", 260)], commit="c" * 40)
    ok = _cli("compare", "--baseline", str(base), str(same))
    assert ok.returncode == 0 and "same" in ok.stdout and "slower" not in ok.stdout
    bad = _cli("compare", "--baseline", str(base), str(slow))
    assert bad.returncode == 1 and "topk_indices/b/triton" in bad.stdout
    side = _cli("compare", str(base), str(slow))
    assert side.returncode == 0 and "triton NVIDIA H200@aaaaaaa" in side.stdout and "(50%)" in side.stdout


def test_unknown_schema_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"schema": 99, "records": []}))
    with pytest.raises(ValueError, match="schema"):
        results.load(path)


def test_bench_then_compare_on_the_cpu(tmp_path):
    out = tmp_path / "run.json"
    r = _cli("bench", "--backend", "torch", "--device", "cpu", "--cases", "quick", "--ops", "topk_indices", "--reps",
             "3", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = results.load(out)
    assert doc["schema"] == 1 and doc["records"] and all(rec["timing"]["samples"] >= 1 for rec in doc["records"])
    assert doc["complete"] is True and not list(tmp_path.glob("*.tmp"))
    twin = copy.deepcopy(doc)
    (tmp_path / "twin.json").write_text(json.dumps(twin))
    c = _cli("compare", "--baseline", str(out), str(tmp_path / "twin.json"))
    assert c.returncode == 0 and "slower" not in c.stdout


def test_report_writes_markdown_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    base = _doc(tmp_path / "base.json", [("a", 100), ("b", 200)])
    other = _doc(tmp_path / "other.json", [("a", 90)], gpu="NVIDIA B200", commit="d" * 40)
    r = _cli("report", str(base), str(other), "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## topk_indices" in md and "NVIDIA B200@ddddddd" in md and "| a " in md
    for png in ("roof.png",):  # these records do no arithmetic: no roofline scatter
        data = (tmp_path / "rep" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_pytest_benchmark_export_is_readable_by_pytest_benchmark(tmp_path):
    out = tmp_path / "pb.json"
    r = _cli("bench", "--backend", "torch", "--device", "cpu", "--cases", "short-rows,long-k512", "--ops",
             "topk_indices", "--reps", "3", "--pytest-benchmark", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["benchmarks"]
    assert {"min", "max", "mean", "median", "stddev", "rounds"} <= set(doc["benchmarks"][0]["stats"])
    import subprocess
    import sys
    pytest.importorskip("pytest_benchmark")
    # its CLI under this interpreter: a `pytest-benchmark` on PATH may belong to another Python
    shown = subprocess.run([sys.executable, "-c", "import sys; from pytest_benchmark.cli import main; sys.argv[0] = "
                            "'pytest-benchmark'; main()", "compare", str(out)], capture_output=True, text=True)
    assert shown.returncode == 0 and "topk_indices" in shown.stdout, shown.stderr


def test_a_document_written_part_way_says_so(tmp_path):
    doc = json.loads(_doc(tmp_path / "a.json", [("a", 100)]).read_text())
    doc["complete"] = False
    (tmp_path / "a.json").write_text(json.dumps(doc))
    assert "stopped part-way" in results.label(results.load(tmp_path / "a.json"))





def _edit(path, **changes):
    """The document at path with records changed: case -> None (dropped) or a dict merged into its record."""
    doc = json.loads(path.read_text())
    doc["records"] = [{**r, **changes[r["case"]]} if changes.get(r["case"]) else r for r in doc["records"]
                      if not (r["case"] in changes and changes[r["case"]] is None)]
    path.write_text(json.dumps(doc))
    return path


def test_the_gate_fails_on_a_case_that_vanished_by_name(tmp_path, capsys):
    base = _doc(tmp_path / "base.json", [("a", 100), ("b", 200)])
    new = _edit(_doc(tmp_path / "new.json", [("a", 100), ("b", 200)], commit="b" * 40), b=None)
    rc, out, _ = _main(capsys, "compare", "--baseline", base, new)
    assert rc == 1 and "missing" in out and "topk_indices/b/triton" in out, out


@pytest.mark.parametrize("change", [{"verdict": "fail", "message": "out: 3 elements past the bound"},
                                    {"verdict": "error", "message": "RuntimeError: boom", "timing": None},
                                    {"verdict": "skip", "message": "declines k > 2048", "timing": None}])
def test_the_gate_fails_on_a_case_that_fails_errs_or_is_declined_now(tmp_path, capsys, change):
    base = _doc(tmp_path / "base.json", [("a", 100), ("b", 200)])
    new = _edit(_doc(tmp_path / "new.json", [("a", 100), ("b", 200)], commit="b" * 40), b=change)
    rc, out, _ = _main(capsys, "compare", "--baseline", base, new)
    assert rc == 1 and "FAIL" in out and "topk_indices/b/triton" in out, out
    assert change["message"] in out  # the table says why


def test_the_gate_fails_when_the_runs_share_no_case(tmp_path, capsys):
    base = _doc(tmp_path / "base.json", [("a", 100)])
    new = _doc(tmp_path / "new.json", [("c", 100)], commit="b" * 40)
    rc, out, _ = _main(capsys, "compare", "--baseline", base, new)
    assert rc == 1 and "shares no timed case" in out and "topk_indices/a/triton" in out


def test_a_known_disagreement_and_a_new_case_do_not_fail_the_gate(tmp_path, capsys):
    base = _doc(tmp_path / "base.json", [("a", 100)])
    new = _edit(_doc(tmp_path / "new.json", [("a", 100), ("z", 5)], commit="b" * 40), a={"verdict": "known"})
    rc, out, _ = _main(capsys, "compare", "--baseline", base, new)
    assert rc == 0 and "new" in out, out


@pytest.mark.parametrize("command", ["compare", "compare --baseline {good}", "report"])
@pytest.mark.parametrize("content", [None, "{not json", '{"schema": 1}', '{"schema": 7, "records": []}'])
def test_a_missing_or_malformed_file_is_an_input_error(tmp_path, capsys, command, content):
    good = _doc(tmp_path / "good.json", [("a", 100)])
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    extra = ["--out", tmp_path / "rep"] if command == "report" else []
    rc, out, err = _main(capsys, *command.format(good=good).split(), bad, *extra)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "bad.json" in err, (rc, err)


def test_input_errors_exit_2_with_one_line_and_no_traceback(tmp_path):
    r = _cli("compare", "--baseline", str(tmp_path / "nowhere.json"), str(tmp_path / "nowhere.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_runs_with_the_same_label_stay_apart(tmp_path):
    docs = []
    for name, run_id, median in (("one.json", "11111111-aaaa", 100), ("two.json", "22222222-bbbb", 300)):
        path = _doc(tmp_path / name, [("a", median)])
        doc = json.loads(path.read_text())
        doc["environment"]["run_id"] = run_id
        path.write_text(json.dumps(doc))
        docs.append(results.load(path))
    assert results.label(docs[0]) == results.label(docs[1])  # same GPU and commit
    names = results.labels(docs)
    assert len(set(names)) == 2 and "11111111" in names[0] and "22222222" in names[1]
    rows, headers = results.side_by_side(docs)
    assert len(set(headers)) == len(headers) and rows[0][2:] == ["100.0 (50%)", "300.0 (50%)"]
    twins = [results.load(_doc(tmp_path / f"{n}.json", [("a", 100)])) for n in ("x", "y")]  # no run id at all
    assert len(set(results.labels(twins))) == 2 and len(set(results.labels([twins[0], twins[0]]))) == 2
    from harness import report
    md = report.markdown(docs)
    assert "run 11111111" in md and "run 22222222" in md


def test_report_says_cpu_runs_have_no_roofline_and_draws_no_empty_bars(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = _doc(tmp_path / "cpu.json", [("a", 100), ("b", 200)])
    doc = json.loads(path.read_text())
    del doc["environment"]["gpu"]
    doc["environment"]["device"] = "cpu"
    for r in doc["records"]:
        r.update(pct_datasheet=None, pct_copy=0.0, gbps=0.0)
    path.write_text(json.dumps(doc))
    rc, _, err = _main(capsys, "report", path, "--out", tmp_path / "rep")
    assert rc == 0, err
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "no roofline" in md and not (tmp_path / "rep" / "roof.png").exists()
    row = next(line for line in md.splitlines() if line.startswith("| a "))
    assert re.search(r"\|\s+30\s+\|", row) and not re.search(r"\|\s+0\s+\|", row), row  # n; no 0 GB/s
