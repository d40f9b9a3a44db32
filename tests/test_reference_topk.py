"""Properties of the float64 reference `topk_indices` (contract §3)."""

import pytest
import torch

import references
from harness import inputs


def logical(out_row, table_row, page_size):
    """Invert the page mapping of one output row (pages in a table row are distinct)."""
    page_of = {int(p): i for i, p in enumerate(table_row.tolist()) if p >= 0}
    return [page_of[int(v) // page_size] * page_size + int(v) % page_size for v in out_row if v >= 0]


@pytest.mark.parametrize("k", [8, 512])
def test_short_path_is_every_valid_column_ascending(k):
    lens = [0, 1, k - 1, k]
    x = inputs.topk_inputs(seq_lens=lens, columns=k + 5, k=k, page_size=4, seed=1)
    x.args[0][:] = float("nan")  # the short path must not read the logits
    out = x.call(references.topk_indices)
    assert out.shape == (4, k) and out.dtype == torch.int32
    for b, n in enumerate(lens):
        assert logical(out[b], x.args[2][b], 4) == list(range(n))
        assert (out[b, n:] == -1).all()


@pytest.mark.parametrize("seq_len_offset", [1, 100, 1000])
@pytest.mark.parametrize("distinct", [None, 3])
def test_long_path_selects_k_largest_valid(seq_len_offset, distinct):
    k = 64
    lens = [k + seq_len_offset, k + seq_len_offset // 2 + 1]
    x = inputs.topk_inputs(seq_lens=lens, columns=max(lens) + 7, k=k, page_size=16, seed=seq_len_offset,
                           distinct=distinct)
    out = x.call(references.topk_indices)
    logits, _, table = x.args
    for b, n in enumerate(lens):
        raw = logical(out[b], table[b], 16)
        assert len(raw) == k == len(set(raw)) and all(0 <= r < n for r in raw)
        chosen = torch.zeros(n, dtype=torch.bool)
        chosen[raw] = True
        row = logits[b, :n]
        assert row[chosen].min() >= row[~chosen].max()  # the tie rule
        assert torch.equal(row[chosen].sort().values, torch.topk(row, k).values.sort().values)


def test_tail_past_seq_len_is_never_selected():
    x = inputs.topk_inputs(seq_lens=[600], columns=2048, k=512, seed=3, tail=float("inf"))
    out = x.call(references.topk_indices)
    assert max(logical(out[0], x.args[2][0], 64)) < 600


def test_mapping_is_page_times_size_plus_offset():
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0, 3.0, 2.0]])
    table = torch.tensor([[7, 2, 9]], dtype=torch.int32)
    out = references.topk_indices(logits, torch.tensor([6], dtype=torch.int32), table, k=3, page_size=2)
    # raw picks 1, 3, 4 -> pages 7, 2, 9 at offsets 1, 1, 0
    assert sorted(out[0].tolist()) == sorted([7 * 2 + 1, 2 * 2 + 1, 9 * 2 + 0])


def test_neg_inf_logits_inside_seq_len_still_count():
    logits = torch.full((1, 10), float("-inf"))
    logits[0, 3] = 1.0
    out = references.topk_indices(logits, torch.tensor([10], dtype=torch.int32), torch.tensor([[0]], dtype=torch.int32),
                         k=4, page_size=16)
    assert 3 in out[0].tolist() and (out[0] >= 0).all() and len(set(out[0].tolist())) == 4
