"""The timer and the timer cross-check on the CPU (wall clock: plumbing, not measurements)."""

import statistics

from harness import bench as BN
from harness import crosscheck


def test_time_call_stops_on_a_small_standard_error_and_reports_the_host_cost():
    calls = []
    t = BN.time_call(lambda: calls.append(sum(range(2000))), "cpu", warmup=3, reps=50, min_reps=10, rel_sem=0.5)
    assert t.clock == "wall" and t.samples == len(t.samples_us) and 10 <= t.samples < 50  # stopped early
    assert len(calls) == 3 + t.samples
    assert t.p10_us <= t.median_us <= t.p90_us and t.median_us == statistics.median(t.samples_us)
    assert t.host_us is not None and t.host_us > 0


def test_time_call_runs_to_reps_when_noise_stays_high():
    t = BN.time_call(lambda: None, "cpu", warmup=1, reps=12, min_reps=4, rel_sem=0.0, budget_s=60)
    assert t.samples == 12


def test_nvtx_labels_have_no_slash():
    # Nsight's --nvtx-include reads '/' as nesting of push/pop ranges
    label = BN.nvtx_label("topk_indices", "b64-16384", "cuda")
    assert "/" not in label and label.split(":") == ["topk_indices", "b64-16384", "cuda"]


def test_input_copies_outgrow_the_flush_buffer():
    class Flush:
        def numel(self):
            return 120 << 20
    assert BN._rotations(4 << 20, Flush()) == 30
    assert BN._rotations(1 << 30, Flush()) == 1
    assert BN._rotations(1, Flush()) == 32  # capped
    assert BN._rotations(4 << 20, None) == 1


def test_crosscheck_prints_every_clock(capsys):
    assert crosscheck.main(["topk_indices:long-k512:torch", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "topk_indices:long-k512:torch" in out and "events loop" in out and "do_bench" in out


def test_an_explicit_commit_wins_over_a_copied_git(monkeypatch):
    monkeypatch.setenv("HARNESS_GIT_COMMIT", "abc1234")
    env = BN.environment("cpu")
    assert env["git_commit"] == "abc1234" and env["git_commit_source"] == "HARNESS_GIT_COMMIT"
    monkeypatch.delenv("HARNESS_GIT_COMMIT")
    assert len(BN.environment("cpu")["git_commit"]) == 40  # this checkout's HEAD
