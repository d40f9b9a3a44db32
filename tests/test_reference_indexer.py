"""Properties of the float64 reference `indexer_logits` (contract §2) and of the FP8 quantisers."""

import pytest
import torch

import references
from harness import contract
from harness import inputs


def dequantised_logits(q_fp8, weights, keys_fp8, scales, context_lens, max_context_len):
    """contract §2 a second way: dequantise the keys (not through the cache) and use one einsum."""
    out = torch.full((q_fp8.shape[0], max_context_len), float("-inf"), dtype=torch.float64)
    for b, n in enumerate(context_lens):
        k = inputs.dequantize_fp8_rows(keys_fp8[b], scales[b])  # [n, 128]
        scores = torch.einsum("hc,tc->ht", q_fp8[b].double(), k)
        out[b, :n] = torch.einsum("h,ht->t", weights[b].double(), scores.clamp_min(0))
    return out


@pytest.mark.parametrize("heads", [32, 64])
def test_matches_dequantise_then_matmul(heads):
    gen = inputs.generator(3)
    lens = [0, 1, 63, 64, 65, 200]
    keys = [inputs.quantize_fp8_rows(inputs.randn(gen, n, 128)) for n in lens]
    table = inputs.random_page_table([contract.cdiv(n, 64) for n in lens], 20, gen, columns=4)
    cache = inputs.pack_indexer_cache([k for k, _ in keys], [s for _, s in keys], table, 20)
    q_fp8, w = inputs.quantize_indexer_queries(inputs.randn(gen, len(lens), heads, 128),
                                               inputs.randn(gen, len(lens), heads))
    ctx = torch.tensor(lens, dtype=torch.int32)
    out = references.indexer_logits(q_fp8, w, cache, ctx, table, max_context_len=256)
    want = dequantised_logits(q_fp8, w, [k for k, _ in keys], [s for _, s in keys], lens, 256)
    assert out.dtype == torch.float32 and out.shape == (len(lens), 256)
    assert torch.equal(torch.isinf(out), torch.isinf(want))  # -inf exactly past the context
    assert torch.isfinite(out[torch.arange(256)[None, :] < ctx[:, None]]).all()
    assert (out[torch.isinf(out)] < 0).all()
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)


def test_block_table_is_followed():
    """The same keys packed under a different block table give the same logits."""
    x = inputs.indexer_inputs(context_lens=[130, 64, 7], heads=32, seed=5, max_context_len=192)
    out = x.call(references.indexer_logits)
    q, w, cache, ctx, table = x.args
    moved = torch.full_like(cache, 0xFF)
    new_table = table.clone()
    perm = torch.randperm(cache.shape[0], generator=inputs.generator(1))
    for b in range(table.shape[0]):
        for i in range(contract.cdiv(int(ctx[b]), 64)):  # the columns in use (later ones may hold stale entries)
            if table[b, i] >= 0:
                new_table[b, i] = perm[table[b, i]]
                moved[perm[table[b, i]]] = cache[table[b, i]]
    assert torch.equal(references.indexer_logits(q, w, moved, ctx, new_table, max_context_len=192), out)
    swapped = table.clone()
    swapped[0, [0, 1]] = table[0, [1, 0]]
    assert not torch.equal(references.indexer_logits(q, w, cache, ctx, swapped, max_context_len=192), out)


def test_negative_scores_are_cut_by_relu():
    x = inputs.indexer_inputs(context_lens=[50], heads=32, seed=8, max_context_len=64)
    q, w, cache, ctx, table = x.args
    neg = (-q.float()).to(torch.float8_e4m3fn)
    both = references.indexer_logits(torch.cat([q, neg], 1), torch.cat([w, w], 1), cache, ctx, table,
                                      max_context_len=64)
    alone = references.indexer_logits(q, w, cache, ctx, table, max_context_len=64)
    flipped = references.indexer_logits(neg, w, cache, ctx, table, max_context_len=64)
    # relu(x) + relu(-x) = |x|: the two halves add, and neither alone is the sum
    torch.testing.assert_close(both[:, :50], alone[:, :50] + flipped[:, :50], rtol=1e-6, atol=1e-5)
    assert not torch.allclose(alone[:, :50], both[:, :50])


def test_context_zero_and_padding():
    x = inputs.indexer_inputs(context_lens=[0, 64], heads=32, seed=2, max_context_len=100)
    out = x.call(references.indexer_logits)
    assert torch.isneginf(out[0]).all() and torch.isneginf(out[1, 64:]).all() and torch.isfinite(out[1, :64]).all()


def test_quantiser_reaches_448_and_round_trips():
    x = inputs.randn(inputs.generator(0), 300, 128, scale=37.0)
    x_fp8, scale = inputs.quantize_fp8_rows(x)
    assert x_fp8.dtype == torch.float8_e4m3fn and scale.shape == (300,)
    assert torch.equal(x_fp8.float().abs().amax(1), torch.full((300,), 448.0))
    back = inputs.dequantize_fp8_rows(x_fp8, scale)
    rel = (back - x.double()).abs() / x.double().abs().amax(1, keepdim=True)
    assert rel.max() <= 2 ** -4  # e4m3 keeps 3 mantissa bits: relative step 2^-3, rounding half of it
    zeros_fp8, zero_scale = inputs.quantize_fp8_rows(torch.zeros(2, 128))
    assert torch.isfinite(zero_scale).all() and (zeros_fp8.float() == 0).all()


def test_pack_puts_entry_t_in_block_table_t_div_64_row_t_mod_64():
    gen = inputs.generator(4)
    k, s = inputs.quantize_fp8_rows(inputs.randn(gen, 70, 128))
    table = torch.tensor([[3, 1]], dtype=torch.int32)
    cache = inputs.pack_indexer_cache([k], [s], table, 4)
    keys = cache[:, :contract.INDEXER_KEY_BYTES].reshape(4, 64, 128)
    scales = cache[:, contract.INDEXER_KEY_BYTES:].contiguous().view(torch.float32)
    assert torch.equal(keys[3, 5], k[5].view(torch.uint8)) and torch.equal(keys[1, 2], k[66].view(torch.uint8))
    assert scales[3, 5] == s[5] and scales[1, 2] == s[66]
    assert (cache[0] == 0xFF).all() and torch.isnan(scales[1, 6:]).all()


@pytest.fixture(scope="module")
def long_and_short_rows():
    """Reference logits of a long row (4000 entries) and a short one (64): the short row is under 2 %
    of the tensor's entries, so its error barely moves a norm over the whole tensor."""
    x = inputs.indexer_inputs(context_lens=[4000, 64], heads=32, seed=11, max_context_len=4096)
    return x.call(references.indexer_logits)


def _relative_noise(ref, rel, seed):
    noise = torch.randn(ref.shape, generator=inputs.generator(seed), dtype=torch.float64) * rel
    return torch.where(torch.isfinite(ref), ref.double() * (1 + noise), ref.double()).float()


def test_comparator_passes_fp8_mma_sized_error_and_fails_bf16_rounding(long_and_short_rows):
    from harness import comparators
    ref = long_and_short_rows
    ok = comparators.indexer_logits({"logits": _relative_noise(ref, 1e-4, 1)}, {"logits": ref})
    assert ok.ok, ok.message
    assert 5e-5 < ok.metrics["row_rel_l2_max"] < comparators.INDEXER_REL_L2
    rounded = comparators.indexer_logits({"logits": ref.bfloat16().float()}, {"logits": ref})
    assert not rounded.ok and "relative L2" in rounded.message


def test_comparator_bound_holds_per_row(long_and_short_rows):
    """One row 1e-3 off fails, although the norm over the whole tensor stays inside the bound."""
    from harness import comparators
    ref = long_and_short_rows
    got = ref.clone()
    got[1, :64] *= 1 + 1e-3
    report = comparators.indexer_logits({"logits": got}, {"logits": ref})
    assert report.metrics["rel_l2"] < comparators.INDEXER_REL_L2  # a whole-tensor norm would pass it
    assert not report.ok and report.message.startswith("logits: row 1 relative L2 0.001")


def test_recall_counts_the_reference_selection_that_the_backend_keeps(long_and_short_rows):
    from harness import comparators
    ref = long_and_short_rows
    same = comparators.indexer_logits({"logits": ref.clone()}, {"logits": ref})
    assert same.ok and same.metrics["recall"] == 1.0
    got = ref.clone()
    top = int(ref[0].argmax())
    got[0, top] = ref[0, :4000].min() - 1  # the best entry of row 0 falls out of the backend's top 512
    report = comparators.indexer_logits({"logits": got}, {"logits": ref})
    # row 0 selects 512 of 4000, row 1 all of its 64 entries: one of 576 lost
    assert report.metrics["recall"] == pytest.approx(575 / 576)
    assert not report.ok  # and that entry's error breaks the bound
