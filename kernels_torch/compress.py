"""Plain-PyTorch `compress` (SPEC 1): gather each entry's window of raw rows, softmax over the terms."""

import torch

from harness import contract


def _exclusive_cumsum(x):
    return torch.cumsum(x, 0) - x


def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
             validate=True):
    layout = contract.check_compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens,
                                     extend_lens=extend_lens, mode=mode, state_rows=state_rows,
                                     page_table=page_table, validate=validate)
    d, device = layout.d, kv_score.device
    prefix, extend = prefix_lens.long(), extend_lens.long()
    end, kv_start = prefix + extend, _exclusive_cumsum(extend.long())
    emitted = end // ratio - prefix // ratio
    n_out = int(emitted.sum()) if layout.batch else 0
    req = torch.repeat_interleave(torch.arange(layout.batch, device=device), emitted, output_size=n_out)
    j = prefix[req] // ratio + torch.arange(n_out, device=device) - _exclusive_cumsum(emitted)[req]
    if mode == "online":
        return _online(kv_score, ape, state, state_rows.long(), prefix, extend, kv_start, d)

    terms = 8 if ratio == 4 else 128
    p = ratio * j[:, None] - (4 if ratio == 4 else 0) + torch.arange(terms, device=device)  # [N, terms]
    rows = _rows(kv_score, state, ratio, mode, state_rows, page_table, req[:, None], p, prefix, kv_start)
    if ratio == 4:
        i = torch.arange(8, device=device)
        current = (i >= 4)[None, :, None]
        values = torch.where(current, rows[..., d:2 * d], rows[..., :d])
        bias = torch.cat([ape[:, :d], ape[:, d:]])  # [8, d]: overlap biases, then current biases
        logits = torch.where(current, rows[..., 3 * d:], rows[..., 2 * d:3 * d]) + bias
        logits = logits.masked_fill((p < 0)[..., None], float("-inf"))
        values = values.masked_fill((p < 0)[..., None], 0.0)
    else:
        values, logits = rows[..., :d], rows[..., d:] + ape
    out = (torch.softmax(logits, dim=1) * values).sum(1)
    _store(kv_score, state, ratio, mode, state_rows, page_table, prefix, extend, kv_start)
    return out


def _rows(kv_score, state, ratio, mode, state_rows, page_table, req, p, prefix, kv_start):
    """Raw rows of positions p ([N, terms]) of requests req: from kv_score from the prefix on, else
    from the state (positions < 0 give anything; the caller masks them)."""
    flat = state.view(-1, state.shape[-1])
    new = p >= prefix[req]
    new_rows = (kv_start[req] + p - prefix[req]).clamp(0, max(kv_score.shape[0] - 1, 0))
    pc = p.clamp_min(0)
    if mode == "ring":
        width = contract.RING_WIDTH[ratio]
        old_rows = state_rows.long()[req] * width + pc % width
    else:
        page = page_table.long()[req, pc // ratio].clamp_min(0)
        old_rows = page * ratio + pc % ratio
    from_new = kv_score[new_rows] if kv_score.shape[0] else flat[old_rows]
    return torch.where(new[..., None], from_new, flat[old_rows])


def _store(kv_score, state, ratio, mode, state_rows, page_table, prefix, extend, kv_start):
    total = kv_score.shape[0]
    if not total:
        return
    req = torch.repeat_interleave(torch.arange(len(prefix), device=kv_score.device), extend, output_size=total)
    p = prefix[req] + torch.arange(total, device=kv_score.device) - kv_start[req]
    flat = state.view(-1, state.shape[-1])
    if mode == "ring":
        width = contract.RING_WIDTH[ratio]
        keep = p >= prefix[req] + extend[req] - width
        dst = state_rows.long()[req] * width + p % width
    else:
        page = page_table.long()[req, p // ratio]
        keep = page >= 0
        dst = page * ratio + p % ratio
    flat[dst[keep]] = kv_score[keep]


def _online(kv_score, ape, state, state_rows, prefix, extend, kv_start, d):
    """Per (request, 128-block the extend touches): pool the new part as a tile, merge with the
    running state when the block began earlier, emit completed blocks, keep the last as state."""
    device = kv_score.device
    end = prefix + extend
    segments = torch.where(extend > 0, (end - 1) // 128 - prefix // 128 + 1, torch.zeros_like(extend))
    n_seg = int(segments.sum())
    if n_seg == 0:
        return kv_score.new_zeros(0, d)
    req = torch.repeat_interleave(torch.arange(len(prefix), device=device), segments, output_size=n_seg)
    local = torch.arange(n_seg, device=device) - _exclusive_cumsum(segments)[req]
    g = prefix[req] // 128 + local
    p = 128 * g[:, None] + torch.arange(128, device=device)
    live = (p >= prefix[req, None]) & (p < end[req, None])
    rows = kv_score[(kv_start[req, None] + p - prefix[req, None]).clamp(0, kv_score.shape[0] - 1)]
    y = rows[..., :d]
    x = (rows[..., d:] + ape).masked_fill(~live[..., None], float("-inf"))
    m = x.max(1).values
    w = torch.exp(x - m[:, None])
    s = w.sum(1)
    v = (w * y.masked_fill(~live[..., None], 0.0)).sum(1) / s
    old = state[state_rows[req]]  # [n_seg, 3, d]
    merge = (prefix[req] > 128 * g)[:, None]
    m0, s0, v0 = old[:, 0], old[:, 1], old[:, 2]
    mm = torch.maximum(m0, m)
    a0, a1 = s0 * torch.exp(m0 - mm), s * torch.exp(m - mm)
    m, s, v = (torch.where(merge, mm, m), torch.where(merge, a0 + a1, s),
               torch.where(merge, (v0 * a0 + v * a1) / (a0 + a1), v))
    complete = 128 * g + 127 < end[req]
    last = local == segments[req] - 1
    state[state_rows[req[last]]] = torch.stack([m[last], s[last], v[last]], 1)
    return v[complete]
