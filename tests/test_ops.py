"""The op entries (harness/ops.py): one per op of the contract, each consistent with the op's
reference and its catalogue cases."""

import random

import pytest
import torch

import references
from harness import cases, check, contract, ops


def test_one_entry_per_contract_op():
    assert tuple(ops.ENTRIES) == contract.OPS
    with pytest.raises(KeyError, match="no op named 'attention'"):
        ops.entry("attention")


@pytest.mark.parametrize("op", contract.OPS)
def test_entry_names_what_the_reference_returns_and_writes(op):
    """The first quick case of each op, run by the reference: the named outputs are its return
    values (and the state where the entry says the op writes one), and the arguments it leaves
    unchanged are exactly those the entry does not name as written."""
    entry = ops.entry(op)
    case = next(c for c in cases.TESTS if c.op == op and c.family != "bad-input")
    x = cases.build(case)
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in x.args]
    calls = ops.calls(op, x)
    results = [getattr(references, op)(*a, **kw) for a, kw in calls]
    named = entry.named_outputs(x, results)
    returned = results[0] if isinstance(results[0], tuple) else (results[0],)
    assert len(returned) == len(entry.outputs)
    assert list(named) == list(entry.outputs) + (["state"] if entry.state is not None else [])
    for i, (old, new) in enumerate(zip(before, x.args)):
        if isinstance(old, torch.Tensor):
            assert check.same_bits(old, new) == (i != entry.state), (op, i)
    assert entry.compare(x, named, named).ok
    work = entry.work(x)
    assert work.bytes > 0


@pytest.mark.parametrize("op", contract.OPS)
def test_fuzzed_params_build_and_shrink_to_valid_params(op):
    """A fuzz draw is a valid set of the builder's keyword arguments, and so is every shrunk candidate
    (each differs from the draw)."""
    entry = ops.entry(op)
    params = entry.fuzz(random.Random(3))
    shrunk = cases.shrink_steps(cases.fuzz_case(op, 3))
    assert shrunk and all(c.params != params for c in shrunk)
    for case in (cases.fuzz_case(op, 3), shrunk[-1]):
        x = cases.build(case)
        assert isinstance(x.args[0], torch.Tensor)
