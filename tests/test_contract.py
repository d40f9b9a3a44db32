"""Bad input: every argument of every op is rejected with an InputError (a ValueError) that names it,
before anything is written. The reference backend goes through the same validators as every other."""

import pytest
import torch

import references as R
from harness import contract
from harness import inputs as I

META = torch.device("meta")  # a second device on a CPU-only machine


def i32(*values):
    return torch.tensor(values, dtype=torch.int32)


def ring():
    return I.compress_inputs(ratio=4, d=8, prefix_lens=[5, 0], extend_lens=[7, 4], mode="ring", seed=1)


def paged():
    return I.compress_inputs(ratio=4, d=8, prefix_lens=[5, 0], extend_lens=[7, 4], mode="paged", seed=1)


def online():
    return I.compress_inputs(ratio=128, d=8, prefix_lens=[5], extend_lens=[200], mode="online", seed=1)


def args(i, value):
    def mutate(a, kw):
        a[i] = value(a[i]) if callable(value) else value
    return mutate


def kwarg(name, value):
    def mutate(a, kw):
        kw[name] = value(kw[name]) if callable(value) and name in kw else value
    return mutate


def set_item(i_or_name, index, value):
    def mutate(a, kw):
        t = a[i_or_name] if isinstance(i_or_name, int) else kw[i_or_name]
        t[index] = value
    return mutate


def page_shared_with_written(a, kw):  # request 1's block 0 points at a page request 0 writes
    kw["page_table"][1, 0] = kw["page_table"][0, 2]


COMPRESS = [
    (ring, "kv_score", args(0, lambda t: t.double())),
    (ring, "kv_score", args(0, lambda t: t[None])),
    (ring, "kv_score", args(0, lambda t: t[:, :-1].contiguous())),
    (ring, "kv_score", args(0, lambda t: t[:-1].contiguous())),  # rows != sum(extend_lens)
    (ring, "kv_score", args(0, lambda t: t.t())),  # not contiguous
    (ring, "kv_score", args(0, "not a tensor")),
    (ring, "ape", args(1, lambda t: t[:, :-1].contiguous())),
    (ring, "ape", args(1, lambda t: t.half())),
    (ring, "ape", args(1, lambda t: t.to(META))),
    (ring, "state", args(2, lambda t: t[:, :4].contiguous())),
    (ring, "state", args(2, lambda t: t.double())),
    (paged, "state", args(2, lambda t: torch.zeros(t.shape[0], 8, t.shape[2]))),
    (online, "state", args(2, lambda t: torch.zeros(t.shape[0], 2, t.shape[2]))),
    (ring, "ratio", kwarg("ratio", 8)),
    (ring, "ratio", kwarg("ratio", 4.0)),
    (ring, "prefix_lens", kwarg("prefix_lens", i32(-1, 0))),
    (ring, "prefix_lens", kwarg("prefix_lens", lambda t: t.long())),
    (ring, "prefix_lens", kwarg("prefix_lens", lambda t: t.to(META))),
    (ring, "extend_lens", kwarg("extend_lens", i32(7, 4, 0))),
    (ring, "extend_lens", kwarg("extend_lens", i32(8, 3).neg())),
    (ring, "mode", kwarg("mode", "ragged")),
    (ring, "state_rows", kwarg("state_rows", None)),
    (ring, "state_rows", kwarg("state_rows", i32(0, 4))),
    (ring, "state_rows", kwarg("state_rows", i32(1, 1))),
    (ring, "state_rows", kwarg("state_rows", i32(-1, 1))),
    (ring, "state_rows", kwarg("state_rows", i32(0))),
    (online, "state_rows", kwarg("state_rows", i32(3))),
    (ring, "page_table", kwarg("page_table", torch.zeros(2, 4, dtype=torch.int32))),
    (paged, "page_table", kwarg("page_table", None)),
    (paged, "state_rows", kwarg("state_rows", i32(0, 1))),
    (paged, "page_table", set_item("page_table", (0, 0), 99)),
    (paged, "page_table", set_item("page_table", (0, 1), -1)),  # a page the call must read
    (paged, "page_table", set_item("page_table", (1, 0), -2)),
    (paged, "page_table", kwarg("page_table", lambda t: t[:, :1].contiguous())),  # too few columns
    (paged, "page_table", kwarg("page_table", lambda t: t[:1].contiguous())),
    (paged, "page_table", page_shared_with_written),
]


@pytest.mark.parametrize("build,argument,mutate", COMPRESS, ids=lambda v: v if isinstance(v, str) else "")
def test_compress_rejects(build, argument, mutate):
    x = build()
    a, kw = list(x.args), dict(x.kwargs)
    mutate(a, kw)
    _assert_rejected(R.compress, a, kw, argument, written=[t for t in a[2:3] if isinstance(t, torch.Tensor)])


def test_mode_online_needs_ratio_128():
    x = ring()
    with pytest.raises(contract.InputError, match="mode") as err:
        R.compress(*x.args, **{**x.kwargs, "mode": "online"})
    assert err.value.argument == "mode"


def indexer():
    return I.indexer_inputs(context_lens=[70, 3], heads=32, seed=2, max_context_len=128)


INDEXER = [
    (indexer, "q_fp8", args(0, lambda t: t.float())),
    (indexer, "q_fp8", args(0, lambda t: t[:, :, :64].contiguous())),
    (indexer, "q_fp8", args(0, lambda t: t[:, :0].contiguous())),
    (indexer, "q_fp8", args(0, lambda t: t[0])),
    (indexer, "weights", args(1, lambda t: t[:, :-1].contiguous())),
    (indexer, "weights", args(1, lambda t: t.double())),
    (indexer, "weights", args(1, lambda t: t.to(META))),
    (indexer, "kv_cache", args(2, lambda t: t[:, :-4].contiguous())),
    (indexer, "kv_cache", args(2, lambda t: t.view(torch.int8))),
    (indexer, "context_lens", args(3, i32(70))),
    (indexer, "context_lens", args(3, i32(129, 3))),
    (indexer, "context_lens", args(3, i32(-1, 3))),
    (indexer, "block_table", set_item(4, (0, 1), 99)),
    (indexer, "block_table", set_item(4, (0, 0), -1)),
    (indexer, "block_table", args(4, lambda t: t[:, :1].contiguous())),
    (indexer, "block_table", args(4, lambda t: t[:1].contiguous())),
    (indexer, "max_context_len", kwarg("max_context_len", -1)),
    (indexer, "max_context_len", kwarg("max_context_len", 128.0)),
]


@pytest.mark.parametrize("build,argument,mutate", INDEXER, ids=lambda v: v if isinstance(v, str) else "")
def test_indexer_logits_rejects(build, argument, mutate):
    x = build()
    a, kw = list(x.args), dict(x.kwargs)
    mutate(a, kw)
    _assert_rejected(R.indexer_logits, a, kw, argument)


def topk():
    return I.topk_inputs(seq_lens=[30, 5], columns=40, k=8, page_size=16, seed=3)


TOPK = [
    (topk, "logits", args(0, lambda t: t.double())),
    (topk, "logits", args(0, lambda t: t[0])),
    (topk, "logits", set_item(0, (0, 3), float("nan"))),
    (topk, "seq_lens", args(1, i32(41, 5))),
    (topk, "seq_lens", args(1, i32(-3, 5))),
    (topk, "seq_lens", args(1, i32(30))),
    (topk, "seq_lens", args(1, lambda t: t.to(META))),
    (topk, "page_table", set_item(2, (0, 1), -1)),
    (topk, "page_table", args(2, lambda t: t[:, :1].contiguous())),
    (topk, "page_table", args(2, lambda t: t.long())),
    (topk, "k", kwarg("k", 0)),
    (topk, "k", kwarg("k", "512")),
    (topk, "page_size", kwarg("page_size", 0)),
]


@pytest.mark.parametrize("build,argument,mutate", TOPK, ids=lambda v: v if isinstance(v, str) else "")
def test_topk_indices_rejects(build, argument, mutate):
    x = build()
    a, kw = list(x.args), dict(x.kwargs)
    mutate(a, kw)
    _assert_rejected(R.topk_indices, a, kw, argument)


def attention():
    return I.attention_inputs(positions=[40, 300], heads=16, topk=16, seed=4)


ATTENTION = [
    (attention, "q", args(0, lambda t: t.float())),
    (attention, "q", args(0, lambda t: t[..., :256].contiguous())),
    (attention, "q", args(0, lambda t: t[:, :0].contiguous())),
    (attention, "kv", args(1, lambda t: t[:, :256].contiguous())),
    (attention, "kv", args(1, lambda t: t.half())),
    (attention, "kv", args(1, lambda t: t.to(META))),
    (attention, "indices", set_item(2, (1, 3), 10**6)),
    (attention, "indices", set_item(2, (0, 0), -2)),
    (attention, "indices", args(2, lambda t: t[:1].contiguous())),
    (attention, "indices", args(2, lambda t: t.long())),
    (attention, "sm_scale", kwarg("sm_scale", 0.0)),
    (attention, "sm_scale", kwarg("sm_scale", float("nan"))),
    (attention, "sm_scale", kwarg("sm_scale", torch.tensor(0.1))),
    (attention, "attn_sink", kwarg("attn_sink", torch.zeros(8))),
    (attention, "attn_sink", kwarg("attn_sink", lambda t: t.double())),
]


@pytest.mark.parametrize("build,argument,mutate", ATTENTION, ids=lambda v: v if isinstance(v, str) else "")
def test_sparse_attention_rejects(build, argument, mutate):
    x = build()
    a, kw = list(x.args), dict(x.kwargs)
    mutate(a, kw)
    _assert_rejected(R.sparse_attention, a, kw, argument)


def _assert_rejected(op, a, kw, argument, written=()):
    before = [t.clone() for t in written if t.device.type != "meta"]
    with pytest.raises(ValueError) as err:
        op(*a, **kw)
    assert isinstance(err.value, contract.InputError)
    assert err.value.argument == argument, str(err.value)
    assert str(err.value).startswith(argument + ":")
    for t, b in zip(written, before):
        assert torch.equal(t.nan_to_num(7.0), b.nan_to_num(7.0)), "state written before the error"


def test_validate_false_skips_only_the_data_checks():
    x = topk()
    x.args[1][0] = 41  # a length past the logits: caught only by the data checks
    with pytest.raises(contract.InputError):
        x.call(R.topk_indices)
    with pytest.raises(contract.InputError, match="dtype"):  # shape and dtype checks always run
        R.topk_indices(x.args[0].double(), *x.args[1:], validate=False, **x.kwargs)
