"""Properties of the float64 reference `sparse_attention` (contract §4)."""

import pytest
import torch

import references
from harness import inputs

SCALE = 512 ** -0.5


def dense_attention(q, kv, rows, sm_scale, sink):
    """Softmax attention over kv[rows] with the sink as one more logit in the denominator only."""
    k = kv[rows].double()
    scores = sm_scale * torch.einsum("hd,nd->hn", q.double(), k)
    lse = torch.logsumexp(scores, 1)
    if sink is not None:
        scores = torch.cat([scores, sink.double()[:, None]], 1)
    p = torch.softmax(scores, 1)[:, :len(rows)]
    return p @ k, lse


@pytest.mark.parametrize("heads", [16, 64])
@pytest.mark.parametrize("sink", [False, True])
def test_all_valid_rows_equal_dense_softmax(heads, sink):
    gen = inputs.generator(heads)
    idx = torch.stack([torch.randperm(300, generator=gen)[:40] for _ in range(3)]).int()
    x = inputs.attention_inputs(positions=None, heads=heads, seed=heads, sink=sink, indices=idx, pool_rows=300)
    out, lse = x.call(references.sparse_attention)
    q, kv, _ = x.args
    assert out.dtype == torch.bfloat16 and out.shape == q.shape and lse.dtype == torch.float32
    for b in range(3):
        want, want_lse = dense_attention(q[b], kv, idx[b].long(), SCALE, x.kwargs["attn_sink"])
        torch.testing.assert_close(out[b].double(), want, rtol=1e-2, atol=4e-3)
        torch.testing.assert_close(lse[b].double(), want_lse, rtol=0, atol=1e-5)


def test_sink_only_shrinks_the_output():
    x = inputs.attention_inputs(positions=[300, 7], heads=16, topk=32, seed=2, sink=True)
    out, lse = x.call(references.sparse_attention)
    plain, plain_lse = x.call(references.sparse_attention, attn_sink=None)
    assert torch.equal(lse, plain_lse)
    factor = 1 / (1 + torch.exp(x.kwargs["attn_sink"].double() - plain_lse.double()))
    torch.testing.assert_close(out.double(), (plain.double() * factor[..., None]), rtol=1e-2, atol=1e-3)


def test_empty_row_gives_zero_and_neg_inf():
    x = inputs.attention_inputs(positions=[50, 60], heads=16, topk=16, seed=3)
    x.args[2][1] = -1
    out, lse = x.call(references.sparse_attention)
    assert (out[1] == 0).all() and torch.isneginf(lse[1]).all() and torch.isfinite(lse[0]).all()


def test_minus_one_is_skipped_and_duplicates_count_twice():
    x = inputs.attention_inputs(positions=[900], heads=16, topk=64, seed=4)
    q, kv, idx = x.args
    valid = idx[0][idx[0] >= 0]
    packed = torch.cat([valid.flip(0), torch.full((7,), -1, dtype=torch.int32)])[None]
    out, lse = x.call(references.sparse_attention)
    out2, lse2 = references.sparse_attention(q, kv, packed, sm_scale=SCALE, attn_sink=x.kwargs["attn_sink"])
    torch.testing.assert_close(out2, out, rtol=1e-2, atol=1e-3)
    torch.testing.assert_close(lse2, lse, rtol=0, atol=1e-5)
    dup = torch.cat([valid, valid[:1]])[None]
    out3, lse3 = references.sparse_attention(q, kv, dup, sm_scale=SCALE)
    want, want_lse = dense_attention(q[0], kv, dup[0].long(), SCALE, None)
    torch.testing.assert_close(lse3[0].double(), want_lse, rtol=0, atol=1e-5)
    assert not torch.allclose(lse3, references.sparse_attention(q, kv, valid[None], sm_scale=SCALE)[1])


def test_large_magnitude_scores_are_stable():
    x = inputs.attention_inputs(positions=[2000, 130], heads=32, topk=128, seed=5, q_scale=200.0)
    out, lse = x.call(references.sparse_attention)
    assert torch.isfinite(out.float()).all() and torch.isfinite(lse).all() and lse.abs().max() > 100


def test_engine_index_sets():
    gen = inputs.generator(0)
    idx, pool = inputs.attention_indices([5, 127, 4000], ratio=4, topk=16, gen=gen)
    assert idx.shape == (3, 128 + 16)
    assert idx[0, :6].tolist() == list(range(6)) and (idx[0, 6:128] == -1).all()
    assert idx[1, :128].tolist() == list(range(128, 256)) and idx[2, :128].tolist() == list(range(256, 384))
    assert idx[0, 128:130].tolist() == [384, -1]  # position 5 sees (5+1)//4 = 1 entry, the pool's first
    assert (idx[0, 128:] >= 0).sum() == 1 and (idx[1, 128:] >= 0).sum() == 16 and (idx[2, 128:] >= 0).sum() == 16
    comp = idx[2, 128:]
    assert len(set(comp.tolist())) == 16 and (comp >= 384 + 1 + 32).all() and (comp < pool).all()
    hca, pool = inputs.attention_indices([255, 1023], ratio=128, topk=16, gen=gen)
    # HCA sees every entry j < (p+1)//128: 2 at position 255, 8 at 1023
    assert hca[0, 128:131].tolist() == [256, 257, -1] and hca[1, 128:137].tolist() == list(range(258, 266)) + [-1]
    assert pool == 266
