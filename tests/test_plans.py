"""Plans (contract §7): the shared compress planner's work list, the op-side check by value, and
the known-wrong plan backends (a stale plan trusted; a planned call that synchronises, which only a
CUDA-graph capture on a GPU can reject)."""

import random

import numpy as np
import pytest
import torch

from harness import backends, contract, plans
from harness import cases
from harness import check


def _i32(*values):
    return torch.tensor(values, dtype=torch.int32)


@pytest.mark.parametrize("ratio", contract.RATIOS)
def test_segments_cover_every_touched_block_and_emit_in_spec_order(ratio):
    rng = random.Random(ratio)
    for _ in range(50):
        batch = rng.randint(1, 5)
        prefix = [rng.randint(0, 3 * ratio) for _ in range(batch)]
        extend = [rng.choice([0, 1, rng.randint(0, 3 * ratio)]) for _ in range(batch)]
        rows = list(range(batch))
        records, n_out = plans.compress_segments(prefix, extend, ratio, "ring", state_rows=rows)
        expected_out, expected_blocks = [], []
        for b, (p, e) in enumerate(zip(prefix, extend)):
            expected_out += [(b, j) for j in contract.compress_emitted(ratio, p, e)]
            if e:
                expected_blocks += [(b, g) for g in range(p // ratio, (p + e - 1) // ratio + 1)]
        assert n_out == len(expected_out)
        assert [(int(r[0]), int(r[1])) for r in records] == expected_blocks
        emitted = sorted((int(r[2]), int(r[0]), int(r[1])) for r in records if r[2] >= 0)
        assert [(b, g) for _, b, g in emitted] == expected_out and [o for o, _, _ in emitted] == list(range(n_out))
        for r in records:  # the last segment of each request, its lengths, kv row and state row
            b, g = int(r[0]), int(r[1])
            assert r[3] == (g == (prefix[b] + extend[b] - 1) // ratio)
            assert (r[4], r[5], r[6], r[7]) == (prefix[b], prefix[b] + extend[b], sum(extend[:b]), b)


def test_paged_segments_carry_the_pages_of_their_block_and_the_one_before():
    table = np.array([[7, 3, -1, 9], [2, 5, 6, 8]])
    records, _ = plans.compress_segments([5, 0], [6, 3], 4, "paged", page_table=table)
    assert [(int(r[1]), int(r[7]), int(r[8])) for r in records] == [(1, 3, 7), (2, -1, 3), (0, 2, -1)]


def test_ring_conflict_and_online_split_are_found_from_the_lengths():
    assert not plans.ring_overwrites_reads([65536] * 3, [1] * 3, 4)  # decode: the new slot is never read
    assert plans.ring_overwrites_reads([5], [40], 4)  # the ring turns over while the window is still read
    assert not plans.ring_overwrites_reads([0], [40], 4)  # nothing read from the ring
    assert plans.online_state_split([100], [200])  # reads its state in block 0, writes it in block 2
    assert not plans.online_state_split([128, 5], [300, 1])


def test_a_plan_is_checked_by_value_and_names_plan():
    prefix, extend, rows = _i32(5, 0), _i32(7, 4), _i32(1, 0)
    plan = plans.compress_plan(prefix, extend, ratio=4, mode="ring", state_rows=rows)
    same = dict(ratio=4, mode="ring", state_rows=rows.clone(), page_table=None, validate=True, device="cpu")
    assert plans.check_compress_plan(plan, prefix.clone(), extend.clone(), **same) is plan
    for changed in (dict(prefix_lens=_i32(4, 0)), dict(extend_lens=_i32(8, 3)), dict(state_rows=_i32(0, 1)),
                    dict(mode="online"), dict(ratio=128)):
        kw = {**same, "prefix_lens": prefix, "extend_lens": extend, **changed}
        with pytest.raises(contract.InputError) as err:
            plans.check_compress_plan(plan, kw.pop("prefix_lens"), kw.pop("extend_lens"), **kw)
        assert err.value.argument == "plan"
    stale = {**same, "validate": False}  # nothing compared without validation ...
    assert plans.check_compress_plan(plan, _i32(4, 0), extend, **stale) is plan
    with pytest.raises(contract.InputError, match="plan"):  # ... but a plan must still be one of this op
        plans.check_compress_plan("a plan", prefix, extend, **stale)
    prefix.add_(1)  # a plan keeps its own copy: an in-place change of the metadata is a difference
    with pytest.raises(contract.InputError, match="prefix_lens"):
        plans.check_compress_plan(plan, prefix, extend, **same)


def test_a_stale_plan_trusted_under_validate_is_rejected_by_the_bad_input_family():
    backend = backends.load("tests.known_wrong.plan_stale_trusted", "cpu")
    results = [check.check_case(backend, c, "cpu") for c in cases.select(["compress"]) if c.name.startswith("bad-plan")]
    assert results and all(r.ok or "bad plan" in r.message for r in results)
    assert sum(r.verdict == "fail" for r in results) >= 4


def test_every_backend_with_a_planner_gives_the_same_bits_with_and_without_it():
    device = check.pick_device(None)  # on a GPU also a CUDA-graph replay of the planned calls
    for name in ("reference", "triton") + (("cuda",) if device == "cuda" else ()):
        backend = backends.load(name, device)
        for case_name in ("c4-paged-released", "c128-online-chunk-chain", "c4-ring-chunk-chain"):
            result = check.check_case(backend, cases.find("compress", case_name), device)
            assert result.ok, (name, case_name, result.message)


@pytest.mark.parametrize("package", ["kernels_triton", "kernels_cuda", "kernels_torch", "references"])
def test_every_planner_an_op_file_defines_is_the_one_the_harness_finds(package):
    # the harness looks planners up on the backend's package (check.planner): one defined in an op's
    # file but not exported there is never called (the CUDA top-k plan went unused so for a session)
    import importlib
    module = importlib.import_module(package)
    for op in contract.OPS:
        try:
            op_file = importlib.import_module(f"{package}.{op}")
        except ImportError:
            continue
        defined = getattr(op_file, f"{op}_plan", None)
        assert check.planner(module, op) is defined, (package, op)


@pytest.mark.gpu
def test_a_planned_call_that_synchronises_fails_the_graph_check():
    backend = backends.load("tests.known_wrong.plan_call_syncs", "cuda")
    result = check.check_case(backend, cases.find("compress", "c4-paged-decode-chain"), "cuda")
    assert result.verdict == "fail" and "CUDA graph" in result.message
