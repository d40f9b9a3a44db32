"""The case catalogue and its fuzzer: names unique, edge cases covered, fuzz cases that rebuild from
their names and draw every value class the contract admits, and inputs that look like an engine's
memory (garbage where nothing is named, tables wider than needed)."""

import torch

from harness import cases, check


def test_fuzz_cases_rebuild_identically_from_their_name():
    for op in cases.contract.OPS:
        case = cases.fuzz([op], 1, seed=42)[0]
        again = cases.find(op, case.name)
        assert repr(again) == repr(case)  # (NaN params make == false)
        a, b = cases.build(case), cases.build(again)
        for x, y in zip(a.args, b.args):
            assert check.same_bits(x, y)


def test_fuzzer_draws_every_admitted_value_class():
    """Over a few hundred draws each parameter reaches its edges and its whole range (issue 20)."""
    draws = {op: [cases.fuzz_case(op, seed).params for seed in range(400)] for op in cases.contract.OPS}
    comp = draws["compress"]
    assert {p["ratio"] for p in comp} == {4, 128} and {p["mode"] for p in comp} == {"ring", "paged", "online"}
    ds = {p["d"] for p in comp}
    assert {1, 128, 512} <= ds and any(d % 2 for d in ds if d > 1) and len(ds) > 30
    extends = [e for p in comp for step in p["steps"] for e in step]
    assert 0 in extends and 1 in extends and max(extends) > 2 * 128 and any(len(p["steps"]) >= 4 for p in comp)
    assert any(0 in step and any(step) for p in comp for step in p["steps"])  # with and without tokens
    assert {p["score_scale"] for p in comp} >= {1.0, 300.0} and any(p.get("rows_order") for p in comp)
    idx = draws["indexer_logits"]
    lens = [n for p in idx for n in p["context_lens"]]
    assert {0, 1, 64, 2048, 2049} <= set(lens) and max(lens) > 4096 and {p["heads"] for p in idx} == {32, 64}
    assert any(p["max_context_len"] > max(p["context_lens"]) + 64 for p in idx)
    topk = draws["topk_indices"]
    assert {p["k"] for p in topk} == {512, 1024, 2048}
    sizes = {p["page_size"] for p in topk}
    assert {1, 16, 32, 64, 128, 256} <= sizes and any(s & (s - 1) for s in sizes)  # a non-power of two too
    assert any(n > 65536 for p in topk for n in p["seq_lens"])
    rows = [(n, p["k"]) for p in topk for n in p["seq_lens"]]
    assert any(n == k for n, k in rows) and any(n == k + 1 for n, k in rows)
    attn = draws["sparse_attention"]
    assert {p["heads"] for p in attn} == {16 * i for i in range(1, 9)}
    ks = [p["random"][0] if "random" in p else 128 + p["topk"] for p in attn]
    assert min(ks) == 1 and max(ks) > 1024 and any(k > 512 for k in ks)
    assert {tuple(p["pool_pad"]) for p in attn} >= {(0, 0), (1, 2)}


def test_unnamed_memory_holds_garbage_and_tables_are_wider_than_needed():
    from harness import inputs
    x = cases.build(cases.find("sparse_attention", "csa-decode-h64"))
    kv, idx = x.args[1].float(), x.args[2]
    named = torch.zeros(kv.shape[0], dtype=torch.bool)
    named[idx[idx >= 0].long()] = True
    free = kv[~named]
    assert not named[0] and not named[-1] and free.numel()  # free rows before and after the index set
    assert torch.isnan(free).any() and torch.isposinf(free).any() and torch.isneginf(free).any()
    assert torch.isfinite(kv[named]).all()
    y = cases.build(cases.find("indexer_logits", "mixed-batch"))
    lens, table = y.args[3], y.args[4]
    assert table.shape[1] > cases.contract.cdiv(y.kwargs["max_context_len"], 64)
    stale = torch.cat([table[b, cases.contract.cdiv(int(n), 64):] for b, n in enumerate(lens)])
    assert (stale >= y.args[2].shape[0]).any() and (stale < -1).any()  # anything: the contract never reads them
    z = cases.build(cases.find("compress", "c4-paged-mixed-batch"))
    state, pages = z.args[2], z.kwargs["page_table"]
    assert pages.shape[1] > max(cases.contract.cdiv(int(p + e), 4) for p, e in zip(z.kwargs["prefix_lens"],
                                                                                   z.kwargs["extend_lens"]))
    assert pages.min() >= -1 and pages.max() < state.shape[0]  # compress bounds every entry by the pool
    unnamed = [p for p in range(state.shape[0]) if p not in set(pages.flatten().tolist())]
    assert unnamed and not torch.isfinite(state[unnamed]).all()
    assert inputs.garbage((3, 4099), torch.float32, inputs.generator(0)).isnan().float().mean() > 0.1


def test_catalogue_names_are_unique_and_cover_the_edge_cases():
    ids = [c.id for c in cases.TESTS]
    assert len(ids) == len(set(ids))
    families = {c.family for c in cases.TESTS}
    for needed in ("c4-first-emission", "c4-short-extend", "c4-decode", "c128-decode", "c4-paged-pages", "ties",
                   "short", "boundary", "tail", "invalid", "stability", "heads", "context-edges", "padding",
                   "bad-input"):
        assert needed in families
    modes = {(c.params.get("ratio"), c.params.get("mode")) for c in cases.TESTS if c.op == "compress"}
    assert {(4, "ring"), (4, "paged"), (128, "ring"), (128, "paged"), (128, "online")} <= modes
