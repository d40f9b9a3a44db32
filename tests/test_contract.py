"""Bad input: every argument of every op is rejected with an InputError (a ValueError) that names it,
before anything is written. The reference backend goes through the same validators as every other."""

import pytest
import torch

import references as R
from harness import badinput as B
from harness import contract

@pytest.mark.parametrize("bad", B.BAD_INPUTS, ids=lambda b: f"{b.op}-{b.argument}-{b.what}".replace(" ", "_"))
def test_every_argument_is_validated(bad):
    a, kw, state = B.build(bad)
    _assert_rejected(getattr(R, bad.op), a, kw, bad.argument, written=[state] if state is not None else [])


def test_every_argument_of_every_op_has_a_bad_input():
    import inspect
    for op in ("compress", "indexer_logits", "topk_indices", "sparse_attention"):
        params = [p for p in inspect.signature(getattr(R, op)).parameters if p != "validate"]
        covered = {b.argument for b in B.BAD_INPUTS if b.op == op}
        assert set(params) <= covered, f"{op}: no bad input for {set(params) - covered}"


def _assert_rejected(op, a, kw, argument, written=()):
    before = [t.clone() for t in written]
    with pytest.raises(ValueError) as err:
        op(*a, **kw)
    assert isinstance(err.value, contract.InputError)
    assert err.value.argument == argument, str(err.value)
    assert str(err.value).startswith(argument + ":")
    for t, b in zip(written, before):
        assert torch.equal(t.nan_to_num(7.0), b.nan_to_num(7.0)), "state written before the error"


def test_validate_false_skips_only_the_data_checks():
    x = B.BASES["topk"]("cpu")
    x.args[1][0] = 41  # a length past the logits: caught only by the data checks
    with pytest.raises(contract.InputError):
        x.call(R.topk_indices)
    with pytest.raises(contract.InputError, match="dtype"):  # shape and dtype checks always run
        R.topk_indices(x.args[0].double(), *x.args[1:], validate=False, **x.kwargs)
