"""Properties of the float64 reference `compress` (contract §1)."""

import pytest
import torch

import references
from harness import contract
from harness import inputs


def pooled_directly(history, ape, ratio, d):
    """contract §1 written a second way, vectorised over every entry of one full history [n, E]."""
    n = history.shape[0] // ratio
    h = history[:n * ratio].double().reshape(n, ratio, history.shape[1])
    ape = ape.double()
    if ratio == 128:
        values, logits = h[:, :, :d], h[:, :, d:] + ape
    else:
        cur_v, cur_l = h[:, :, d:2 * d], h[:, :, 3 * d:] + ape[:, d:]
        ov_v, ov_l = h[:, :, :d], h[:, :, 2 * d:3 * d] + ape[:, :d]
        # entry j takes the overlap half of block j-1; block -1 is (value 0, logit -inf)
        ov_v = torch.cat([torch.zeros_like(ov_v[:1]), ov_v[:-1]])
        ov_l = torch.cat([torch.full_like(ov_l[:1], float("-inf")), ov_l[:-1]])
        values, logits = torch.cat([ov_v, cur_v], 1), torch.cat([ov_l, cur_l], 1)
    return (torch.softmax(logits, dim=1) * values).sum(1)


def expected_entries(x, ratio, d):
    """What a call must return: the entries its extends complete, from each full history."""
    ape = x.args[1]
    prefix, extend = x.kwargs["prefix_lens"].tolist(), x.kwargs["extend_lens"].tolist()
    parts = [pooled_directly(h, ape, ratio, d)[p // ratio:(p + e) // ratio]
             for h, p, e in zip(x.extra["history"], prefix, extend)]
    return torch.cat(parts) if parts else torch.zeros(0, d, dtype=torch.float64)


def run_in_chunks(ratio, mode, d, lengths, schedule, seed):
    """Feed each request its history in the chunks of schedule[b] on one state; return all entries
    in request-then-j order and the state."""
    steps = [[s[i] if i < len(s) else 0 for s in schedule] for i in range(max(len(s) for s in schedule))]
    x = inputs.compress_inputs(ratio=ratio, d=d, prefix_lens=[0] * len(lengths), extend_lens=lengths, mode=mode,
                               seed=seed)
    kw = {k: v for k, v in x.kwargs.items() if k not in ("prefix_lens", "extend_lens")}
    outputs = [[] for _ in lengths]
    for kv, prefix, extend in inputs.compress_steps(x, steps):
        out = references.compress(kv, x.args[1], x.args[2], prefix_lens=prefix, extend_lens=extend, **kw)
        offset = 0
        for b, (p, e) in enumerate(zip(prefix.tolist(), extend.tolist())):
            n = len(contract.compress_emitted(ratio, p, e))
            outputs[b].append(out[offset:offset + n])
            offset += n
        assert offset == out.shape[0]
    return torch.cat([torch.cat(o) for o in outputs]), x.args[2]


MODES = [(4, "ring"), (4, "paged"), (128, "ring"), (128, "paged"), (128, "online")]


@pytest.mark.parametrize("ratio,mode", MODES)
def test_matches_the_spec_written_vectorised(ratio, mode):
    d = 8
    x = inputs.compress_inputs(ratio=ratio, d=d, prefix_lens=[0, 3, 4, 5, 130, 255, 7],
                               extend_lens=[9, 1, 4, 300, 126, 1, 0], mode=mode, seed=11)
    out = x.call(references.compress)
    assert out.dtype == torch.float32 and out.shape == (len(expected_entries(x, ratio, d)), d)
    torch.testing.assert_close(out.double(), expected_entries(x, ratio, d), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("ratio,mode", MODES)
def test_decode_equals_prefill_equals_any_chunking(ratio, mode):
    lengths = [2 * ratio + 3, ratio + 1, 3 * ratio]
    prefill = [[n] for n in lengths]
    decode = [[1] * n for n in lengths]
    chunked = [[1, ratio - 1, ratio + 2, 1], [ratio, 1], [ratio // 2, ratio // 2 + 1, 2 * ratio - 1]]
    ref, _ = run_in_chunks(ratio, mode, 8, lengths, prefill, seed=5)
    for schedule in (decode, chunked):
        out, _ = run_in_chunks(ratio, mode, 8, lengths, schedule, seed=5)
        if mode == "online":  # the running state is rounded to float32 between calls
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        else:  # raw float32 rows are stored exactly, so chunking changes nothing
            assert torch.equal(out, ref)


def test_ring_equals_paged_equals_online():
    kw = dict(ratio=128, d=16, prefix_lens=[0, 100, 128, 300], extend_lens=[256, 200, 130, 90], seed=3)
    ring = inputs.compress_inputs(mode="ring", **kw).call(references.compress)
    paged = inputs.compress_inputs(mode="paged", **kw).call(references.compress)
    online = inputs.compress_inputs(mode="online", **kw).call(references.compress)
    assert torch.equal(ring, paged)
    torch.testing.assert_close(online, ring, rtol=1e-5, atol=1e-5)
    kw4 = dict(kw, ratio=4, prefix_lens=[0, 1, 6, 8], extend_lens=[3, 30, 2, 9])
    assert torch.equal(inputs.compress_inputs(mode="ring", **kw4).call(references.compress),
                       inputs.compress_inputs(mode="paged", **kw4).call(references.compress))


@pytest.mark.parametrize("mode", ["ring", "paged"])
def test_first_emission_at_position_3_pools_only_the_current_half(mode):
    d = 8
    x = inputs.compress_inputs(ratio=4, d=d, prefix_lens=[0], extend_lens=[8], mode=mode, seed=7)
    out = x.clone().call(references.compress)
    kv, ape = x.args[0].double(), x.args[1].double()
    logits = kv[:4, 3 * d:] + ape[:, d:]
    expect0 = (torch.softmax(logits, 0) * kv[:4, d:2 * d]).sum(0)
    torch.testing.assert_close(out[0].double(), expect0, rtol=1e-6, atol=1e-6)
    # the overlap half of positions 0..3 feeds entry 1 only
    y = x.clone()
    y.args[0][:4, :d] += 10
    y.args[0][:4, 2 * d:3 * d] += 3
    out2 = y.call(references.compress)
    assert torch.equal(out2[0], out[0]) and not torch.allclose(out2[1], out[1])


@pytest.mark.parametrize("ratio,mode", MODES)
def test_short_extend_emits_nothing_and_updates_state(ratio, mode):
    prefix, extend = ratio + 1, ratio - 3  # ends before the block does
    x = inputs.compress_inputs(ratio=ratio, d=8, prefix_lens=[prefix], extend_lens=[extend], mode=mode, seed=9)
    out = x.call(references.compress)
    assert out.shape == (0, 8)
    after = inputs.compress_inputs(ratio=ratio, d=8, prefix_lens=[prefix + extend], extend_lens=[0], mode=mode, seed=9)
    # same seed: same history, rows, pages; the state after the call is the state of the longer prefix
    _assert_states_equal(x.args[2], after.args[2], mode)


@pytest.mark.parametrize("ratio,mode", MODES)
def test_state_after_a_call_is_the_state_of_the_longer_prefix(ratio, mode):
    kw = dict(ratio=ratio, d=8, mode=mode, seed=21)
    prefix, extend = [0, 2, ratio + 5, 3 * ratio - 1], [ratio * 2 + 1, 20, ratio, 1]
    x = inputs.compress_inputs(prefix_lens=prefix, extend_lens=extend, **kw)
    x.call(references.compress)
    if mode == "paged":  # the page table of x covers the full lengths: rebuild its state from it
        want = inputs.paged_state(x.extra["history"], [p + e for p, e in zip(prefix, extend)], ratio,
                             x.args[0].shape[1], x.kwargs["page_table"], x.args[2].shape[0])
    else:
        build = inputs.ring_state if mode == "ring" else None
        rows, n = x.kwargs["state_rows"], x.args[2].shape[0]
        total = [p + e for p, e in zip(prefix, extend)]
        want = (build(x.extra["history"], total, ratio, x.args[0].shape[1], rows, n) if build else
                inputs.online_state(x.extra["history"], total, x.args[1], rows, n))
        if mode == "online":  # rows whose history ends on a block boundary keep the last block's state
            for b, t in enumerate(total):
                if t % 128 == 0:
                    want[int(rows[b])] = x.args[2][int(rows[b])]
    _assert_states_equal(x.args[2], want, mode)


def _assert_states_equal(got, want, mode):
    if mode == "online":
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    else:
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        assert torch.equal(got.nan_to_num(0), want.nan_to_num(0))


@pytest.mark.parametrize("ratio", [4, 128])
def test_paged_never_touches_a_page_the_table_does_not_name(ratio):
    x = inputs.compress_inputs(ratio=ratio, d=8, prefix_lens=[3 * ratio + 2, 5 * ratio],
                               extend_lens=[ratio, 2 * ratio + 1], mode="paged", seed=13, spare=4, release=True)
    table, state = x.kwargs["page_table"], x.args[2]
    assert (table == -1).any()  # release made holes
    named = set(table[table >= 0].tolist())
    unnamed = [p for p in range(state.shape[0]) if p not in named]
    state[unnamed] = 12345.0  # a value no op would write
    before = state.clone()
    out = x.call(references.compress)
    assert torch.equal(state[unnamed], before[unnamed])
    torch.testing.assert_close(out.double(), expected_entries(x, ratio, 8), rtol=1e-6, atol=1e-6)


def test_reads_happen_before_the_writes_that_overwrite_them():
    # C4 ring of 8 slots, prefix 6, extend 12: the first entry (j=1) needs positions 0..7, whose
    # slots 0..5 the extend overwrites with positions 8..13 within the same call.
    x = inputs.compress_inputs(ratio=4, d=8, prefix_lens=[6], extend_lens=[12], mode="ring", seed=17)
    torch.testing.assert_close(x.call(references.compress).double(), expected_entries(x, 4, 8), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("ratio,mode", MODES)
def test_validate_false_gives_the_same_result(ratio, mode):
    x = inputs.compress_inputs(ratio=ratio, d=8, prefix_lens=[1, ratio], extend_lens=[2 * ratio, 3], mode=mode, seed=2)
    assert torch.equal(x.clone().call(references.compress), x.call(references.compress, validate=False))


def test_large_scores_stay_finite():
    x = inputs.compress_inputs(ratio=128, d=8, prefix_lens=[0], extend_lens=[256], mode="online", seed=4,
                               score_scale=300.0)
    out = x.clone().call(references.compress)
    assert torch.isfinite(out).all()
    ring = inputs.compress_inputs(ratio=128, d=8, prefix_lens=[0], extend_lens=[256], mode="ring", seed=4,
                                  score_scale=300.0)
    torch.testing.assert_close(out, ring.call(references.compress), rtol=1e-5, atol=1e-5)
