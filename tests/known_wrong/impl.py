"""A plain float32 implementation of the five ops with switchable classic bugs.

With no bug it is a second, independent implementation the harness must accept; each fixture module
beside this file turns on exactly one bug, and the harness must reject it. Written apart from the
reference (float32, vectorised per request) so a shared mistake is unlikely.
"""

import math

import torch

from harness import contract

BUGS = {  # name: (the op it breaks, what it does)
    "first_window_not_masked": ("compress",
                                "C4 entry 0 pools the missing overlap block as value 0, logit 0 (not -inf)"),
    "overlap_halves_swapped": ("compress",
                               "C4 takes the current half from the previous block and the overlap half from this one"),
    "emission_one_token_late": ("compress", "entry j is emitted at p = r*j + r instead of r*j + r - 1"),
    "online_not_rescaled": ("compress", "the online running sum and mean are not rescaled by exp(m - m')"),
    "compress_page_table_ignored": ("compress", "paged mode uses the logical block number as the page"),
    "ape_off_by_one": ("compress", "position bias ape[(i + 1) % r] instead of ape[i]"),
    "state_not_written_without_emission": ("compress", "a call that emits nothing skips the state write"),
    "released_page_written": ("compress", "a new row whose block has page -1 is written to page -1 (the last page)"),
    "ring_written_before_read": ("compress", "the ring is written before the window is read"),
    "neg_inf_tail_left_zero": ("indexer_logits", "logits past the context are 0 instead of -inf"),
    "missing_key_scale": ("indexer_logits", "the per-entry key scale is not applied"),
    "indexer_block_table_ignored": ("indexer_logits", "entry t is read from block t // 64, not from the block table"),
    "relu_missing": ("indexer_logits", "no ReLU on the per-head scores"),
    "topk_ignores_seq_lens": ("topk_indices", "selects among all columns, past seq_len too"),
    "topk_ignores_page_table": ("topk_indices", "returns logical indices without the page-table translation"),
    "topk_short_path_by_value": ("topk_indices", "rows with seq_len <= k are ordered by logit instead of ascending"),
    "topk_padding_zero": ("topk_indices", "padding is 0 instead of -1"),
    "minus_one_as_zero": ("sparse_attention", "index -1 reads kv row 0 instead of being skipped"),
    "sink_in_numerator": ("sparse_attention",
                          "the sink joins the softmax as a term whose value is the mean of the values"),
    "lse_includes_sink": ("sparse_attention", "the returned lse includes the sink"),
    "lse_base2": ("sparse_attention", "lse in base 2"),
    "duplicates_dropped": ("sparse_attention", "duplicate indices are counted once"),
    "no_max_subtraction": ("sparse_attention", "softmax without subtracting the max (overflows on large scores)"),
    # issue 20's causes: values the contract admits that the old catalogue never drew
    "attention_heads_past_64_dropped": ("sparse_attention", "H > 64 not a multiple of 64: the heads past the last "
                                                            "full tile of 64 are left 0 (lse -inf)"),
    "topk_short_path_page_size_64": ("topk_indices", "rows with seq_len <= k are translated with page_size 64"),
    "indexer_table_stride_assumed": ("indexer_logits", "the block table's row stride taken as "
                                                       "cdiv(max_context_len, 64), not its width"),
    "compress_table_stride_assumed": ("compress", "the page table's row stride taken as the blocks the longest "
                                                  "request needs, not its width"),
    # engine-like memory: garbage where nothing is named, outputs never written
    "attention_masked_row_times_zero": ("sparse_attention", "index -1 reads kv row 0 and weights it by 0 "
                                                            "(0 x garbage)"),
    "indexer_tail_rows_masked_additively": ("indexer_logits", "the last block's rows past the context are scored "
                                                              "(NaN-dropping fmax ReLU) and masked by adding -inf"),
    "indexer_tail_left_unwritten": ("indexer_logits", "logits past the context are never written (torch.empty)"),
    # results that must outlive the next call
    "attention_output_buffer_reused": ("sparse_attention", "out and lse are one cached buffer per shape, "
                                                           "rewritten by every call"),
    "indexer_output_buffer_reused": ("indexer_logits", "logits are one cached buffer per shape"),
    # size classes where kernels change path
    "indexer_second_chunk_dropped": ("indexer_logits", "entries past the first 2048 of a context are -inf"),
    "topk_column_index_16bit": ("topk_indices", "long rows keep column indices in 16 bits"),
    "attention_split_k_merged_by_count": ("sparse_attention", "K > 512 split in chunks of 512, merged weighted by "
                                                              "their valid counts instead of exp(lse)"),
    "compress_ape_tiled_by_128": ("compress", "channel c takes its position bias from column c % 128"),
    "online_max_stored_fp16": ("compress", "the online running max is stored in float16"),
    "empty_extend_state_reset": ("compress", "online: a request with no new tokens gets a fresh (-inf, 0, 0) state"),
    # the FP8 cache (contract §8)
    "fp8_scale_per_128_dims": ("sparse_attention_fp8", "one scale per 128 dims (scale i // 2 for dims 64i..)"),
    "fp8_rope_read_as_e4m3": ("sparse_attention_fp8", "the RoPE part read as 128 e4m3 bytes with the last scale"),
    "fp8_scales_at_wrong_offset": ("sparse_attention_fp8", "scale bytes read at 576 * page_size + 7 * o "
                                                           "(7 bytes a token, not 8)"),
    "fp8_page_stride_ignored": ("sparse_attention_fp8", "page p taken to start at 584 * page_size * p, "
                                                        "not at the cache's page stride"),
    # bad-input messages
    "kv_score_width_blamed_on_ape": ("compress", "d taken from kv_score's width, so a kv_score of another d is "
                                                 "reported as a bad ape"),
}


def make_backend(bug=None):
    if bug is not None and bug not in BUGS:
        raise KeyError(bug)
    on = bug.__eq__ if bug else (lambda name: False)

    def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
                 validate=True):
        factor = contract.ROW_WIDTH_FACTOR.get(ratio, 1)
        if on("kv_score_width_blamed_on_ape") and ratio in contract.RATIOS and isinstance(kv_score, torch.Tensor) \
                and kv_score.dim() == 2 and isinstance(ape, torch.Tensor) and kv_score.shape[1] % factor == 0:
            d = kv_score.shape[1] // factor
            if tuple(ape.shape) != contract.APE_SHAPE[ratio](d):
                want = contract.APE_SHAPE[ratio](d)
                raise contract.InputError("ape", f"expected shape {want}, got {tuple(ape.shape)}")
        layout = contract.check_compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens,
                                         extend_lens=extend_lens, mode=mode, state_rows=state_rows,
                                         page_table=page_table, validate=validate)
        d = layout.d
        if on("compress_ape_tiled_by_128") and d > 128:
            c = torch.arange(d, device=ape.device) % 128
            ape = ape[:, torch.cat([c, d + c])] if ratio == 4 else ape[:, c]
        if on("compress_table_stride_assumed") and mode == "paged":
            stride = max(contract.cdiv(p + n, ratio) for p, n in zip(prefix_lens.tolist(), extend_lens.tolist()))
            flat = page_table.flatten()
            page_table = torch.stack([flat[b * stride:b * stride + page_table.shape[1]] if b * stride
                                      + page_table.shape[1] <= flat.numel() else
                                      torch.cat([flat[b * stride:], flat.new_full((b * stride + page_table.shape[1]
                                                                                   - flat.numel(),), -1)])
                                      for b in range(page_table.shape[0])])
        if mode == "online":
            return _online(kv_score, ape, state, state_rows, prefix_lens.tolist(), extend_lens.tolist(), d, on)
        width = contract.RING_WIDTH[ratio] if mode == "ring" else ratio
        outs, writes, start = [], [], 0
        for b, (p0, n) in enumerate(zip(prefix_lens.tolist(), extend_lens.tolist())):
            new = kv_score[start:start + n]
            start += n

            def slot(p):  # (state index tuple) of position p
                if mode == "ring":
                    return int(state_rows[b]), p % width
                blk = p // ratio
                page = blk if on("compress_page_table_ignored") else int(page_table[b, blk])
                return page, p % ratio
            if on("ring_written_before_read") and mode == "ring":
                for i in range(n):
                    state[slot(p0 + i)] = new[i]
            first, last = p0 // ratio, (p0 + n) // ratio  # entries j with r*j + r - 1 in [p0, p0 + n)
            if on("emission_one_token_late"):  # ... with r*j + r in [p0, p0 + n)
                first, last = max(0, -(-p0 // ratio) - 1), (p0 + n - 1) // ratio
            lo = max(0, ratio * first - (4 if ratio == 4 else 0))
            hist = torch.stack([state[slot(p)] for p in range(lo, p0)]) if p0 > lo else new[:0]
            rows = torch.cat([hist, new])  # rows[i] is position lo + i
            for j in range(first, last):
                get = lambda p: rows[p - lo]  # noqa: E731
                outs.append(_pool_c4(get, ape, j, d, on) if ratio == 4 else _pool_c128(get, ape, j, d, on))
            if on("state_not_written_without_emission") and last == first:
                continue
            for i in range(n):
                p = p0 + i
                if mode == "paged" and page_table[b, p // ratio] < 0 and not on("released_page_written") \
                        and not on("compress_page_table_ignored"):
                    continue
                writes.append((slot(p), new[i]))
        for where, row in writes:
            state[where] = row
        return torch.stack(outs) if outs else kv_score.new_zeros(0, d)

    def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
        layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                               max_context_len=max_context_len, validate=validate)
        nb = kv_cache.shape[0]
        keys = kv_cache[:, :contract.INDEXER_KEY_BYTES].contiguous().view(torch.float8_e4m3fn).float().view(nb, 64, 128)
        scales = kv_cache[:, contract.INDEXER_KEY_BYTES:].contiguous().view(torch.float32).view(nb, 64)
        fill = 0.0 if on("neg_inf_tail_left_zero") else float("-inf")
        out = torch.full((layout.batch, max_context_len), fill, device=q_fp8.device)
        if on("indexer_output_buffer_reused"):
            out = _cached(("indexer", layout.batch, max_context_len), out)
        if on("indexer_tail_left_unwritten"):
            out = torch.empty((layout.batch, max_context_len), device=q_fp8.device)
        if on("indexer_table_stride_assumed"):
            stride = contract.cdiv(max_context_len, 64)
            flat = block_table.flatten()
            block_table = torch.stack([flat[b * stride:b * stride + stride] for b in range(layout.batch)]) \
                if layout.batch * stride <= flat.numel() else block_table
        for b, n in enumerate(context_lens.tolist()):
            span = n
            if on("indexer_tail_rows_masked_additively"):
                span = min(contract.cdiv(n, 64) * 64, max_context_len)
            t = torch.arange(span, device=q_fp8.device)
            blk = t // 64 if on("indexer_block_table_ignored") else block_table[b].long()[t // 64]
            k, s = keys[blk, t % 64], scales[blk, t % 64]
            scores = q_fp8[b].float() @ k.T
            if not on("missing_key_scale"):
                scores = scores * s
            if on("indexer_tail_rows_masked_additively"):
                scores = torch.fmax(scores, torch.zeros_like(scores))  # fmaxf: a NaN score becomes 0
                out[b, :span] = weights[b] @ scores + torch.where(t < n, 0.0, float("-inf"))
                continue
            if not on("relu_missing"):
                scores = scores.clamp_min(0)
            out[b, :n] = weights[b] @ scores
            if on("indexer_second_chunk_dropped"):
                out[b, 2048:n] = float("-inf")
        return out

    def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True):
        layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size,
                                             validate=validate)
        pad = 0 if on("topk_padding_zero") else -1
        out = torch.full((layout.batch, k), pad, dtype=torch.int32, device=logits.device)
        for b, n in enumerate(seq_lens.tolist()):
            valid = logits.shape[1] if on("topk_ignores_seq_lens") else n
            if n <= k:
                raw = torch.arange(n, device=logits.device)
                if on("topk_short_path_by_value"):
                    raw = logits[b, :n].argsort(descending=True)
            else:
                raw = torch.topk(logits[b, :valid].nan_to_num(float("-inf")), k).indices
                if on("topk_column_index_16bit"):
                    raw = raw & 0xFFFF
            size = 64 if on("topk_short_path_page_size_64") and n <= k else page_size
            if on("topk_ignores_page_table"):
                out[b, :len(raw)] = raw.int()
            else:
                out[b, :len(raw)] = (page_table[b].long()[raw // size] * size + raw % size).int()
        return out

    def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
        layout = contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink,
                                                 validate=validate)
        out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        lse = torch.full((layout.batch, layout.heads), float("-inf"), device=q.device)
        for b in range(layout.batch):
            idx = indices[b].long()
            if on("attention_masked_row_times_zero"):
                k = kv[idx.clamp_min(0)].float()
                s = sm_scale * (q[b].float() @ k.T)
                s = s.masked_fill(idx[None, :] < 0, float("-inf"))
                m = s.max(1).values.clamp_min(-1e30)  # an empty row: no NaN from -inf - -inf
                e = torch.exp(s - m[:, None])
                total = e.sum(1)
                lse[b] = torch.where(total > 0, m + torch.log(total), float("-inf"))
                out[b] = (e @ k) / total.clamp_min(1e-30)[:, None]  # exp(-inf) = 0 times the row read
                if attn_sink is not None:
                    out[b] = out[b] / (1 + torch.exp(attn_sink - lse[b]))[:, None]
                continue
            idx = idx.clamp_min(0) if on("minus_one_as_zero") else idx[idx >= 0]
            if on("duplicates_dropped"):
                idx = idx.unique()
            if idx.numel() == 0:
                continue
            k = kv[idx].float()
            s = sm_scale * (q[b].float() @ k.T)
            if on("attention_split_k_merged_by_count") and idx.numel() > 512:
                parts = [(sm_scale * (q[b].float() @ kv[c].float().T), kv[c].float()) for c in idx.split(512)]
                outs = [torch.softmax(sc, 1) @ kc for sc, kc in parts]
                counts = [float(kc.shape[0]) for _, kc in parts]
                lse[b] = torch.logsumexp(s, 1)
                out[b] = sum(o * c for o, c in zip(outs, counts)) / sum(counts)
                if attn_sink is not None:
                    out[b] = out[b] / (1 + torch.exp(attn_sink - lse[b]))[:, None]
                continue
            if on("no_max_subtraction"):
                e = torch.exp(s)
                total = e.sum(1)
                lse[b], out[b] = torch.log(total), (e @ k) / total[:, None]
            else:
                m = s.max(1).values
                e = torch.exp(s - m[:, None])
                total = e.sum(1)
                lse[b], out[b] = m + torch.log(total), (e @ k) / total[:, None]
            if attn_sink is not None:
                if on("sink_in_numerator"):
                    w = torch.sigmoid(lse[b] - attn_sink)  # share of the real terms
                    out[b] = out[b] * w[:, None] + (1 - w)[:, None] * k.mean(0)
                else:
                    out[b] = out[b] / (1 + torch.exp(attn_sink - lse[b]))[:, None]
                if on("lse_includes_sink"):
                    lse[b] = torch.logaddexp(lse[b], attn_sink)
            if on("lse_base2"):
                lse[b] = lse[b] / math.log(2)
        if on("attention_heads_past_64_dropped") and layout.heads > 64 and layout.heads % 64:
            full = layout.heads // 64 * 64
            out[:, full:], lse[:, full:] = 0.0, float("-inf")
        if on("attention_output_buffer_reused"):
            return (_cached(("attention-out", tuple(q.shape)), out.bfloat16()),
                    _cached(("attention-lse", tuple(lse.shape)), lse))
        return out.bfloat16(), lse

    def sparse_attention_fp8(q, kv_cache, indices, *, page_size, sm_scale, attn_sink=None, validate=True):
        layout = contract.check_sparse_attention_fp8(q, kv_cache, indices, page_size=page_size, sm_scale=sm_scale,
                                                     attn_sink=attn_sink, validate=validate)
        slots = indices[indices >= 0].long().unique()
        flat = kv_cache.reshape(-1)
        page, o = slots // page_size, slots % page_size
        stride = 584 * page_size if on("fp8_page_stride_ignored") else layout.page_stride
        record = (page * stride + 576 * o)[:, None]
        scale_bytes = 7 if on("fp8_scales_at_wrong_offset") else 8
        scale_at = (page * stride + 576 * page_size + scale_bytes * o)[:, None]
        # the bug may read past the cache: clamp its offsets into it (a wrong value, not a crash)
        last = flat.numel() - 1
        e4m3 = flat[(record + torch.arange(448)).clamp_max(last)].view(torch.float8_e4m3fn).float()
        tile = torch.arange(448) // (128 if on("fp8_scale_per_128_dims") else 64)
        scales = torch.pow(2.0, flat[(scale_at + torch.arange(7)).clamp_max(last)].float() - 127)
        nope = e4m3 * scales[:, tile]
        rope_bytes = flat[(record + 448 + torch.arange(128)).clamp_max(last)]
        if on("fp8_rope_read_as_e4m3"):
            rope = rope_bytes[:, :64].view(torch.float8_e4m3fn).float() * scales[:, 6:7]
        else:
            rope = rope_bytes.contiguous().view(torch.bfloat16).float()
        kv = torch.cat([nope, rope], 1).bfloat16()  # exact: e4m3 times a power of two
        row_of = torch.full((layout.slots,), -1, dtype=torch.int32, device=indices.device)
        row_of[slots] = torch.arange(len(slots), dtype=torch.int32, device=indices.device)
        compact = torch.where(indices >= 0, row_of[indices.long().clamp_min(0)], -1).int()
        return sparse_attention(q, kv if len(slots) else kv.new_zeros(1, 512), compact, sm_scale=sm_scale,
                                attn_sink=attn_sink, validate=False)

    return compress, indexer_logits, topk_indices, sparse_attention, sparse_attention_fp8


_BUFFERS = {}


def _cached(key, value):
    """The one buffer kept for `key`, overwritten with value (what a backend that caches its outputs
    to spare allocations returns)."""
    buf = _BUFFERS.get(key)
    if buf is None or buf.shape != value.shape or buf.dtype != value.dtype or buf.device != value.device:
        buf = _BUFFERS[key] = torch.empty_like(value)
    return buf.copy_(value)


def _pool_c4(get, ape, j, d, on):
    vals, logits = [], []
    for i in range(4):
        a = (i + 1) % 4 if on("ape_off_by_one") else i
        p = 4 * j - 4 + i
        if p < 0:
            vals.append(torch.zeros(d, device=ape.device))
            logits.append(torch.full((d,), 0.0 if on("first_window_not_masked") else float("-inf"), device=ape.device))
            continue
        row = get(p)
        ov = row[d:2 * d] if on("overlap_halves_swapped") else row[:d]
        vals.append(ov)
        logits.append(row[2 * d:3 * d] + ape[a, :d])
    for i in range(4):
        a = (i + 1) % 4 if on("ape_off_by_one") else i
        row = get(4 * j + i)
        cur = row[:d] if on("overlap_halves_swapped") else row[d:2 * d]
        vals.append(cur)
        logits.append(row[3 * d:] + ape[a, d:])
    vals, logits = torch.stack(vals), torch.stack(logits)
    return (torch.softmax(logits, 0) * vals).sum(0)


def _pool_c128(get, ape, j, d, on):
    rows = torch.stack([get(128 * j + i) for i in range(128)])
    bias = ape.roll(-1, 0) if on("ape_off_by_one") else ape
    return (torch.softmax(rows[:, d:] + bias, 0) * rows[:, :d]).sum(0)


def _online(kv_score, ape, state, state_rows, prefix, extend, d, on):
    outs, start = [], 0
    for b, (p0, n) in enumerate(zip(prefix, extend)):
        row = int(state_rows[b])
        m, s, v = state[row, 0].clone(), state[row, 1].clone(), state[row, 2].clone()
        wrote = False
        for i in range(n):
            p = p0 + i
            y, x = kv_score[start + i, :d], kv_score[start + i, d:] + ape[(p + on("ape_off_by_one")) % 128]
            if on("emission_one_token_late") and p % 128 == 0 and p > 0:
                outs.append(v.clone())
                wrote = True
            if p % 128 == 0:
                m, s, v = x, torch.ones_like(x), y
            else:
                m2 = torch.maximum(m, x)
                a = s if on("online_not_rescaled") else s * torch.exp(m - m2)
                e = torch.exp(x - m2)
                m, s, v = m2, a + e, (v * a + y * e) / (a + e)
            if p % 128 == 127 and not on("emission_one_token_late"):
                outs.append(v.clone())
                wrote = True
        start += n
        if on("online_max_stored_fp16"):
            m = m.half().float()
        if n and not (on("state_not_written_without_emission") and not wrote):
            state[row] = torch.stack([m, s, v])
        if n == 0 and on("empty_extend_state_reset"):
            state[row] = torch.stack([torch.full_like(m, float("-inf")), torch.zeros_like(s), torch.zeros_like(v)])
    return torch.stack(outs) if outs else kv_score.new_zeros(0, d)
