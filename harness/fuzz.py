"""Fuzzing, per op: draw a case's parameters from the whole range the contract admits (CPU-affordable
sizes), edge values weighted up, and propose smaller variants of a failing case's parameters.

The seed fixes both the shape and the data. A failing fuzz case shrinks (cases.shrink_steps): a
shrunk case is named fuzz-<op>-<seed>~i.j.k, the original's candidates i, then j, then k, so its
name alone rebuilds it; the candidates' order is part of what a name means (never reorder them).
harness/ops.py reaches each op's pair through the op's entry.
"""

from __future__ import annotations

from harness import contract

# ---------------------------------------------------------------------------------------------
# drawing: fuzz_<op>(rng) -> the case's parameters (the keyword arguments of the op's builder)


def _edge(rng, edges, lo, hi, p_edge=0.6):
    """An edge value (a random one of `edges` within [lo, hi]) with probability p_edge, else uniform
    in [lo, hi]."""
    inside = [e for e in edges if lo <= e <= hi]
    if inside and rng.random() < p_edge:
        return rng.choice(inside)
    return rng.randint(lo, hi)


def fuzz_compress(rng):
    ratio = rng.choice(contract.RATIOS)
    r = ratio
    mode = rng.choice(contract.MODES if ratio == 128 else ("ring", "paged"))
    d = 512 if rng.random() < 0.08 else _edge(rng, [1, 2, 3, 8, 16, 32, 33, 64, 128], 1, 160)  # 512: V4's width
    big = d >= 128
    batch = _edge(rng, [1, 2, 7], 1, 8)
    span = 600 if big else 3000
    prefix = [_edge(rng, [0, 0, 1, 3, r - 1, r, r + 1, 2 * r - 1, 2 * r + 5, 8 * r + 3], 0, span // 2)
              for _ in range(batch)]
    steps = [[_edge(rng, [0, 0, 1, 1, 3, r - 1, r, r + 1, 2 * r + 3], 0, 3 * r + 5) for _ in range(batch)]
             for _ in range(_edge(rng, [1, 2], 1, 5))]
    params = dict(ratio=ratio, d=d, mode=mode, prefix=prefix, steps=steps,
                  score_scale=rng.choice([1.0, 1.0, 1.0, 30.0, 300.0, 3000.0]), spare=rng.randint(0, 4))
    if mode == "paged" and len(steps) == 1 and rng.random() < 0.5:
        params["release"] = True
    if mode != "paged" and rng.random() < 0.3:
        params["rows_order"] = "descending"
    return params


def fuzz_indexer_logits(rng):
    lens = [_edge(rng, [0, 1, 63, 64, 65, 127, 2047, 2048, 2049, 4095, 4097], 0, 5000, 0.7)
            for _ in range(_edge(rng, [1, 2], 1, 6))]
    return dict(context_lens=lens, heads=rng.choice([32, 64]),
                max_context_len=max(lens, default=0) + _edge(rng, [0, 0, 1, 63, 64], 0, 1200),
                key_scale=rng.choice([1.0, 1.0, 1.0, 1e-3, 1e4]))


def fuzz_topk_indices(rng):
    k = rng.choice(contract.TOPK_SUPPORTED_K)
    long_row = rng.random() < 0.1  # a row past 65536 columns (slow in an interpreter: rarely)
    lens = [_edge(rng, [0, 1, k - 1, k, k + 1, 2 * k, 2 * k + 1, 4096], 0, 4 * k, 0.7)
            for _ in range(_edge(rng, [1, 2], 1, 4))]
    if long_row:
        lens[0] = _edge(rng, [65535, 65536, 65537], 65535, 70000)
    params = dict(seq_lens=lens, columns=max(lens) + _edge(rng, [0, 0, 1, 64], 0, 300), k=k,
                  page_size=_edge(rng, [1, 2, 16, 32, 64, 64, 128, 256], 1, 300, 0.85),
                  distinct=rng.choice([None, None, None, 1, 2, 7, 40]),
                  tail=rng.choice(["garbage", "garbage", float("inf"), float("-inf"), float("nan")]))
    if rng.random() < 0.2:
        params["neg_inf_inside"] = rng.randint(1, max(1, min(lens) or 1))
    if rng.random() < 0.2:
        params["nan_in_short_rows"] = True
    return params


def fuzz_sparse_attention(rng):
    heads = 16 * rng.randint(1, 8)
    params = dict(heads=heads, sink=rng.random() < 0.8, pool_pad=rng.choice([(0, 0), (1, 2), (5, 0), (0, 3)]))
    if rng.random() < 0.3:
        k = _edge(rng, [1, 2, 63, 64, 65, 511, 512, 513, 640, 1152], 1, 1500)
        params["random"] = (k, _edge(rng, [1, 2, k], 1, 3000), rng.choice([0.0, 0.1, 0.5, 0.9, 1.0]))
        params["positions"] = [0] * _edge(rng, [1], 1, 4)
    else:
        ratio = rng.choice([4, 128])
        rows = _edge(rng, [1], 1, 4)
        positions = [_edge(rng, [0, 1, 126, 127, 128, 511, 4095, 65535], 0, 300000) for _ in range(rows)]
        if ratio == 4:
            topk = _edge(rng, [1, 16, 64, 512, 1024], 1, 1100)
        else:
            positions = [min(p, 128 * 1100) for p in positions]
            topk = max((p + 1) // 128 for p in positions) + _edge(rng, [0, 1], 0, 40)
        params.update(positions=positions, ratio=ratio, topk=topk)
    params.update(q_scale=rng.choice([1.0, 1.0, 20.0, 100.0]),
                  sm_scale=rng.choice([contract.ATTN_DIM ** -0.5, contract.ATTN_DIM ** -0.5, rng.uniform(0.01, 0.5)]),
                  empty_rows=[0] if rng.random() < 0.2 else [], duplicates=rng.random() < 0.2,
                  sink_scale=rng.choice([1.0, 1.0, 1.0, 40.0]))
    return params


def fuzz_sparse_attention_fp8(rng):
    params = fuzz_sparse_attention(rng)
    del params["pool_pad"]  # the slots are scattered over the pages instead
    if params.get("ratio") == 4:  # CPU-affordable pools: at most 4096 visible entries a row
        params["positions"] = [min(p, 16383) for p in params["positions"]]
    params.update(page_size=rng.choice([1, 2, 2, 4, 16, 64, 64, 128, 256]),
                  tile_log2=rng.choice([(-2.0, 2.0), (-2.0, 2.0), (-16.0, 3.0), (-24.0, -10.0)]),
                  rope_scale=rng.choice([1.0, 1.0, 2.0]))  # 2 at most: see cases' large-rope
    if rng.random() < 0.3:  # a stride past the engines': more bytes per page than the records need
        params["page_stride"] = contract.fp8_kv_page_stride(params["page_size"]) + 16 * rng.randint(1, 80)
    if params.get("random") and params["random"][1] > 1500:  # CPU-affordable pools of 584-byte slots
        params["random"] = (params["random"][0], 1500, params["random"][2])
    return params


# ---------------------------------------------------------------------------------------------
# shrinking: shrink_<op>(p, add) proposes smaller variants of params p through add(**changes), in a
# fixed order (fewer requests or steps first, then shorter lengths, narrower widths, plainer data);
# each is valid on its own


def _halve(v, floor=0):
    return max(floor, v // 2)


def candidates(shrink, p):
    """The distinct smaller variants of params p that `shrink` (an op's shrink_<op>) proposes, in order."""
    out = []

    def add(**changes):  # a change to a parameter the case does not set (or sets to the same) is no candidate
        changes = {k: v for k, v in changes.items() if k in p or v not in (None, False, 0, [], (0, 0))}
        q = {**p, **changes}
        if q != p and q not in out:
            out.append(q)
    shrink(p, add)
    return out


def shrink_compress(p, add):
    batch, r = len(p["prefix"]), p["ratio"]
    for b in range(batch) if batch > 1 else ():
        add(prefix=p["prefix"][:b] + p["prefix"][b + 1:], steps=[s[:b] + s[b + 1:] for s in p["steps"]])
    for i in range(len(p["steps"])) if len(p["steps"]) > 1 else ():
        add(steps=p["steps"][:i] + p["steps"][i + 1:], release=False)
    for b in range(batch):
        for v in (0, _halve(p["prefix"][b]), p["prefix"][b] - r):
            if 0 <= v < p["prefix"][b]:
                add(prefix=p["prefix"][:b] + [v] + p["prefix"][b + 1:])
        for i, step in enumerate(p["steps"]):
            for v in (0, _halve(step[b]), step[b] - r, step[b] - 1):
                if 0 <= v < step[b]:
                    add(steps=[s if j != i else s[:b] + [v] + s[b + 1:] for j, s in enumerate(p["steps"])],
                        release=False)
    for v in (1, 8, _halve(p["d"], 1)):
        if v < p["d"]:
            add(d=v)
    add(score_scale=1.0)
    add(release=False)
    add(rows_order=None)
    add(spare=0)


def shrink_indexer_logits(p, add):
    lens = p["context_lens"]
    for b in range(len(lens)) if len(lens) > 1 else ():
        add(context_lens=lens[:b] + lens[b + 1:], max_context_len=max(lens[:b] + lens[b + 1:]))
    for b in range(len(lens)):
        for v in (0, 1, _halve(lens[b]), lens[b] - 64, lens[b] - 1):
            if 0 <= v < lens[b]:
                add(context_lens=lens[:b] + [v] + lens[b + 1:])
    add(max_context_len=max(lens, default=0))
    add(heads=32)
    add(key_scale=1.0)


def shrink_topk_indices(p, add):
    lens, k = p["seq_lens"], p["k"]
    for b in range(len(lens)) if len(lens) > 1 else ():
        rest = lens[:b] + lens[b + 1:]
        add(seq_lens=rest, columns=max(rest), neg_inf_inside=min(p.get("neg_inf_inside") or 0, min(rest)) or None)
    for b in range(len(lens)):
        for v in (0, 1, k, k + 1, _halve(lens[b]), lens[b] - 1):
            if 0 <= v < lens[b]:
                new = lens[:b] + [v] + lens[b + 1:]
                add(seq_lens=new, neg_inf_inside=min(p.get("neg_inf_inside") or 0, min(new)) or None)
    add(columns=max(lens))
    for v in contract.TOPK_SUPPORTED_K:
        if v < k:
            add(k=v)
    add(page_size=64)
    add(distinct=None)
    add(neg_inf_inside=None)
    add(nan_in_short_rows=False)


def _shrink_attention_rows(p, add):
    """What the two attention ops' parameters share: rows, index sets, heads, then plainer data."""
    rows = len(p["positions"])
    for b in range(rows) if rows > 1 else ():
        add(positions=p["positions"][:b] + p["positions"][b + 1:],
            empty_rows=[e - (e > b) for e in p["empty_rows"] if e != b])
    if "random" in p:
        k, pool, invalid = p["random"]
        for v in (1, _halve(k, 1), k - 1):
            if 1 <= v < k:
                add(random=(v, pool, invalid))
    else:
        for b in range(rows):
            for v in (0, _halve(p["positions"][b]), p["positions"][b] - 128):
                if 0 <= v < p["positions"][b]:
                    add(positions=p["positions"][:b] + [v] + p["positions"][b + 1:])
        if p["ratio"] == 4:
            for v in (1, _halve(p["topk"], 1)):
                if v < p["topk"]:
                    add(topk=v)
    for v in (16, 16 * max(1, p["heads"] // 32)):
        if v < p["heads"]:
            add(heads=v)
    add(empty_rows=[])
    add(duplicates=False)
    add(q_scale=1.0)
    add(sink=False)
    add(sink_scale=1.0)


def shrink_sparse_attention(p, add):
    _shrink_attention_rows(p, add)
    add(pool_pad=(0, 0))


def shrink_sparse_attention_fp8(p, add):
    _shrink_attention_rows(p, add)
    add(page_size=64)
    add(page_stride=None)
    add(tile_log2=(-2.0, 2.0))
    add(rope_scale=1.0)
