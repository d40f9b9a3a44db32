"""Float64 reference of SPEC 1, `compress`: softmax-gated pooling of raw rows into compressed entries.

Read it as the spec. Per request: gather the raw rows of every position a pooled window needs (from
the state before the prefix, from `kv_score` after), pool each completed window, then, once every
request has read what it needs, write the new rows (or the online running state) back.
"""

import torch

from harness import contract, plans

compress_plan = plans.compress_plan  # exported so the plan contract (SPEC 7) is exercised on every device


def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
             validate=True, plan=None):
    layout = contract.check_compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens,
                                     extend_lens=extend_lens, mode=mode, state_rows=state_rows,
                                     page_table=page_table, validate=validate)
    if plan is not None:  # checked as every backend checks it; the reference needs nothing from it
        plans.check_compress_plan(plan, prefix_lens, extend_lens, ratio=layout.ratio, mode=mode,
                                  state_rows=state_rows, page_table=page_table, validate=validate,
                                  device=kv_score.device)
    prefix, extend = prefix_lens.tolist(), extend_lens.tolist()
    starts = [sum(extend[:b]) for b in range(layout.batch)]  # first kv_score row of each request
    ape64 = ape.double()

    if mode == "online":
        entries = _online(kv_score, ape64, state, state_rows.tolist(), prefix, extend, starts, layout.d)
    else:
        rows_of = [_gather_rows(kv_score, state, b, ratio, mode, state_rows, page_table, prefix[b], extend[b],
                                starts[b]) for b in range(layout.batch)]  # every read happens here
        entries = []
        for b in range(layout.batch):
            for j in contract.compress_emitted(ratio, prefix[b], extend[b]):
                entries.append(_pool_c4(rows_of[b], ape64, j, layout.d) if ratio == 4
                               else _pool_c128(rows_of[b], ape64, j, layout.d))
        for b in range(layout.batch):
            _store_rows(kv_score, state, b, ratio, mode, state_rows, page_table, prefix[b], extend[b], starts[b])

    if not entries:
        return kv_score.new_zeros((0, layout.d))
    return torch.stack(entries).float()


def _gather_rows(kv_score, state, b, ratio, mode, state_rows, page_table, prefix, extend, start):
    """position -> raw float64 row, for the state positions the call reads and all new positions."""
    rows = {}
    for p in contract.compress_state_reads(ratio, prefix, extend):
        if mode == "ring":
            rows[p] = state[int(state_rows[b]), p % contract.RING_WIDTH[ratio]].double()
        else:  # paged: block p // ratio, slot p % ratio
            rows[p] = state[int(page_table[b, p // ratio]), p % ratio].double()
    for i in range(extend):
        rows[prefix + i] = kv_score[start + i].double()
    return rows


def _pool(values, logits):
    """Per channel: sum over terms of softmax(logits) * values; both [terms, d]."""
    return (torch.softmax(logits, dim=0) * values).sum(dim=0)


def _pool_c4(rows, ape, j, d):
    """Entry j of ratio 4: positions 4j-4..4j-1 give their overlap half, 4j..4j+3 their current half."""
    values, logits = [], []
    for i in range(4):
        p = 4 * j - 4 + i
        if p < 0:  # the first entry has no overlap block: value 0, logit -inf
            values.append(torch.zeros(d, dtype=torch.float64, device=ape.device))
            logits.append(torch.full((d,), float("-inf"), dtype=torch.float64, device=ape.device))
        else:
            values.append(rows[p][0:d])
            logits.append(rows[p][2 * d:3 * d] + ape[i, :d])
    for i in range(4):
        p = 4 * j + i
        values.append(rows[p][d:2 * d])
        logits.append(rows[p][3 * d:4 * d] + ape[i, d:])
    return _pool(torch.stack(values), torch.stack(logits))


def _pool_c128(rows, ape, j, d):
    """Entry j of ratio 128: positions 128j..128j+127, value kv, logit sc + ape[i]."""
    block = torch.stack([rows[128 * j + i] for i in range(128)])
    return _pool(block[:, :d], block[:, d:] + ape)


def _store_rows(kv_score, state, b, ratio, mode, state_rows, page_table, prefix, extend, start):
    """Write the new raw rows a later call may need: the ring keeps the last W positions; paged
    mode writes every new row whose block has a page."""
    if mode == "ring":
        width = contract.RING_WIDTH[ratio]
        row = int(state_rows[b])
        for i in range(max(0, extend - width), extend):
            state[row, (prefix + i) % width] = kv_score[start + i]
    else:
        for i in range(extend):
            p = prefix + i
            page = int(page_table[b, p // ratio])
            if page >= 0:
                state[page, p % ratio] = kv_score[start + i]


def _online(kv_score, ape, state, state_rows, prefix, extend, starts, d):
    """Ratio 128 with a running (max, sum, mean) per request instead of raw rows."""
    entries = []
    for b, row in enumerate(state_rows):
        if extend[b] == 0:
            continue
        m, s, v = (state[row, f].double() for f in range(contract.ONLINE_FIELDS))
        for i in range(extend[b]):
            p = prefix[b] + i
            raw = kv_score[starts[b] + i].double()
            y, x = raw[:d], raw[d:] + ape[p % 128]
            if p % 128 == 0:
                m, s, v = x, torch.ones_like(x), y
            else:
                m_new = torch.maximum(m, x)
                a, e = s * torch.exp(m - m_new), torch.exp(x - m_new)
                m, s, v = m_new, a + e, (v * a + y * e) / (a + e)
            if p % 128 == 127:
                entries.append(v)
        state[row] = torch.stack([m, s, v]).float()
    return entries
