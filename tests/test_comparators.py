"""The comparators (harness/comparators.py): NaN and inf positions, bounds that name the worst
element, the top-k tie rule, and the compress state check that fixes only what the contract fixes."""

import pytest
import torch

from harness import cases, check, comparators


def test_nan_and_inf_positions_must_match():
    ref = torch.tensor([1.0, float("-inf"), 2.0])
    assert comparators.elementwise(ref.clone(), ref, "x", atol=1e-3).ok
    assert not comparators.elementwise(torch.tensor([1.0, 0.0, 2.0]), ref, "x", atol=1e-3).ok
    nan = comparators.elementwise(torch.tensor([float("nan"), float("-inf"), 2.0]), ref, "x", atol=1e-3)
    assert not nan.ok and "NaN pattern" in nan.message and "x[0]" in nan.message


def test_bound_names_the_worst_element():
    ref = torch.zeros(3, 4)
    got = ref.clone()
    got[2, 1] = 0.5
    got[0, 0] = 0.1
    r = comparators.elementwise(got, ref, "out", atol=5e-3)
    assert not r.ok and "out[2, 1]" in r.message and "got 0.5" in r.message


def test_topk_accepts_any_tie_break_and_rejects_a_smaller_logit():
    logits = torch.tensor([[3.0, 1.0, 3.0, 2.0, 3.0]])
    seq, table = torch.tensor([5], dtype=torch.int32), torch.tensor([[0]], dtype=torch.int32)
    kw = dict(logits=logits, seq_lens=seq, page_table=table, k=2, page_size=8)
    ref = {"indices": torch.tensor([[0, 2]], dtype=torch.int32)}
    assert comparators.topk_indices({"indices": torch.tensor([[4, 0]], dtype=torch.int32)}, ref, **kw).ok
    bad = comparators.topk_indices({"indices": torch.tensor([[4, 3]], dtype=torch.int32)}, ref, **kw)
    assert not bad.ok and "not the 2 largest" in bad.message
    dup = comparators.topk_indices({"indices": torch.tensor([[4, 4]], dtype=torch.int32)}, ref, **kw)
    assert not dup.ok and "duplicate" in dup.message


def test_compress_state_check_fixes_only_what_the_spec_fixes():
    import references
    case = cases.find("compress", "c4-paged-prefill-released")
    x = cases.build(case)
    ref = check.run_op(references, case, x.clone())
    kw = x.kwargs
    totals = [a + b for a, b in zip(kw["prefix_lens"].tolist(), kw["extend_lens"].tolist())]
    kept = comparators.compress_kept_slots(x.args[2].shape, "paged", 4, totals, page_table=kw["page_table"])
    assert kept.any() and (~kept).any()
    free = {k: v.clone() for k, v in ref.items()}
    free["state"][~kept] = 123.0  # slots of positions not reached yet: the contract leaves them free
    assert check.compare_outputs(case, x, free, ref).ok
    named = set(kw["page_table"][kw["page_table"] >= 0].tolist())
    unnamed = next(p for p in range(x.args[2].shape[0]) if p not in named)
    touched = {k: v.clone() for k, v in ref.items()}
    touched["state"][unnamed, 0, 0] = 0.0  # a page the table does not name
    report = check.compare_outputs(case, x, touched, ref)
    assert not report.ok and f"state[{unnamed}, 0, 0]" in report.message


@pytest.mark.parametrize("name", ["c4-ring-mixed-batch", "c128-online-mixed-batch"])
def test_compress_state_check_says_when_only_state_nothing_reads_differs(name):
    import references
    case = cases.find("compress", name)
    x = cases.build(case)
    ref = check.run_op(references, case, x.clone())
    kw, mode = x.kwargs, case.params["mode"]
    totals = [a + b for a, b in zip(kw["prefix_lens"].tolist(), kw["extend_lens"].tolist())]
    where = (x.args[2].shape, mode, case.params["ratio"], totals, kw["state_rows"], None)
    kept, later = comparators.compress_kept_slots(*where), comparators.compress_read_later(*where)
    kept = torch.ones_like(later) if kept is None else kept
    dead, live = (kept & ~later).nonzero(), (kept & later).nonzero()
    assert len(dead) and len(live)
    for index, only_dead in ((dead[0], True), (live[-1], False)):
        got = {k: v.clone() for k, v in ref.items()}
        got["state"][tuple(index)] = 1234.0
        report = check.compare_outputs(case, x, got, ref)
        assert not report.ok and ("no later call reads" in report.message) == only_dead, report.message
