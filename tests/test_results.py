"""Results store and roofline model: device lookup, speed-of-light floor, noise-aware verdicts,
the compare command's gate, and bench -> compare end to end on the CPU."""

import copy
import json

import pytest

from harness import results as RS
from harness import roofline
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
    assert RS.verdict(base, new) == want


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
        RS.load(path)


def test_bench_then_compare_on_the_cpu(tmp_path):
    out = tmp_path / "run.json"
    r = _cli("bench", "--backend", "torch", "--device", "cpu", "--cases", "quick", "--ops", "topk_indices", "--reps",
             "3", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = RS.load(out)
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
    r = _cli("bench", "--backend", "torch", "--device", "cpu", "--cases", "quick", "--ops", "indexer_logits",
             "--reps", "3", "--pytest-benchmark", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["benchmarks"] and {"min", "max", "mean", "median", "stddev", "rounds"} <= set(doc["benchmarks"][0]["stats"])
    import shutil
    import subprocess
    tool = shutil.which("pytest-benchmark")
    if tool is None:
        pytest.skip("pytest-benchmark is not installed")
    shown = subprocess.run([tool, "compare", str(out)], capture_output=True, text=True)
    assert shown.returncode == 0 and "indexer_logits" in shown.stdout, shown.stderr


def test_a_document_written_part_way_says_so(tmp_path):
    doc = json.loads(_doc(tmp_path / "a.json", [("a", 100)]).read_text())
    doc["complete"] = False
    (tmp_path / "a.json").write_text(json.dumps(doc))
    assert "stopped part-way" in RS.label(RS.load(tmp_path / "a.json"))
