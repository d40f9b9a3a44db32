"""Bad input: every argument of every op is rejected with an InputError (a ValueError) that names it,
before anything is written. The reference backend goes through the same validators as every other."""

import pytest
import torch

import references
from harness import badinput
from harness import contract

@pytest.mark.parametrize("bad", badinput.BAD_INPUTS, ids=lambda b: f"{b.op}-{b.argument}-{b.what}".replace(" ", "_"))
def test_every_argument_is_validated(bad):
    a, kw, state = badinput.build(bad)
    _assert_rejected(getattr(references, bad.op), a, kw, bad.argument, written=[state] if state is not None else [])


def test_every_argument_of_every_op_has_a_bad_input():
    import inspect
    for op in ("compress", "indexer_logits", "topk_indices", "sparse_attention"):
        params = [p for p in inspect.signature(getattr(references, op)).parameters if p != "validate"]
        covered = {b.argument for b in badinput.BAD_INPUTS if b.op == op}
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
    x = badinput.BASES["topk"]("cpu")
    x.args[1][0] = 41  # a length past the logits: caught only by the data checks
    with pytest.raises(contract.InputError):
        x.call(references.topk_indices)
    with pytest.raises(contract.InputError, match="dtype"):  # shape and dtype checks always run
        references.topk_indices(x.args[0].double(), *x.args[1:], validate=False, **x.kwargs)


def test_a_wrong_width_blames_the_argument_the_other_two_disagree_with():
    x = badinput.BASES["ring"]("cpu")  # d = 8: kv_score [T, 32], ape [4, 16], state [S, 8, 32]
    kv, ape, state = x.args
    wide = torch.cat([kv, kv], 1)  # a valid width for d = 16
    with pytest.raises(contract.InputError) as err:
        references.compress(wide, ape, state, **x.kwargs)
    assert err.value.argument == "kv_score" and "d = 8" in str(err.value) and "64" in str(err.value)
    with pytest.raises(contract.InputError) as err:
        references.compress(kv, torch.cat([ape, ape], 1), state, **x.kwargs)
    assert err.value.argument == "ape" and "(4, 16)" in str(err.value) and "(4, 32)" in str(err.value)
    with pytest.raises(contract.InputError) as err:
        references.compress(kv, ape, torch.cat([state, state], 2), **x.kwargs)
    assert err.value.argument == "state"


def test_a_context_past_max_context_len_names_both_and_their_values():
    x = badinput.BASES["indexer"]("cpu")  # context_lens [70, 3], max_context_len 128
    a = list(x.args)
    a[3] = torch.tensor([70, 300], dtype=torch.int32)
    with pytest.raises(contract.InputError) as err:
        references.indexer_logits(*a, **x.kwargs)
    message = str(err.value)
    assert err.value.argument == "context_lens" and "context_lens[1] = 300" in message
    assert "max_context_len = 128" in message


def test_blames_wants_the_bad_argument_named_first():
    assert badinput.blames("compress", "kv_score: width 64, but ape and state agree on d = 8", "kv_score")
    assert not badinput.blames("compress", "ape: expected shape (4, 32) from kv_score's width", "kv_score")
    assert not badinput.blames("topk_indices", "page_size: must be positive", "k")  # k is not page_size's prefix
    assert badinput.blames("topk_indices", "k: expected an int >= 1, got 0 (page_size 64)", "k")
