"""Builders of realistic inputs for the five ops, shared by tests, checks and benchmarks.

Everything random is drawn on the CPU from a seeded generator and then moved to the target device,
so a seed gives the same case on every device. Memory an op must not read (ring slots and pages
that hold no position, cache blocks and rows no table names, kv rows no index names, logits past the
valid length) holds garbage as an engine's free slots do: NaN, +-inf, huge and random bit patterns
mixed element by element, so a kernel that reads it, even to multiply it by 0, produces NaN or a
wrong value instead of passing by luck. Tables are wider than the contexts need (engines size them
for the model's longest context) and hold stale entries past the columns in use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness import contract

POISON = float("nan")
STALE_COLUMNS = 3  # table columns past the widest context's, with stale entries (engines size tables for max context);
# the case catalogue passes it and garbage=True; direct callers get exact tables and NaN poison by default
INT32_MIN = -2**31
SM_SCALE = contract.ATTN_DIM ** -0.5  # V4's softmax scale (contract §4): the attention builders' default


# ---------------------------------------------------------------------------------------------
# the bundle a builder returns


@dataclass
class OpInputs:
    """Positional tensors and keyword arguments of one op call, plus what built them."""

    args: tuple
    kwargs: dict
    extra: dict = field(default_factory=dict)

    def call(self, op, **overrides):
        return op(*self.args, **{**self.kwargs, **overrides})

    def clone(self):
        """A deep copy of every tensor, so a state updated in place by one call leaves this intact."""
        def copy(x):
            if isinstance(x, torch.Tensor) and x.dtype == torch.uint8 and x.is_contiguous() \
                    and x.data_ptr() % contract.FP8_KV_ALIGN == 0:  # a contract §8 cache stays aligned
                return aligned_bytes(tuple(x.shape), x.device).copy_(x)
            return x.clone() if isinstance(x, torch.Tensor) else x
        return OpInputs(tuple(copy(a) for a in self.args), {k: copy(v) for k, v in self.kwargs.items()},
                        dict(self.extra))


def generator(seed):
    return torch.Generator().manual_seed(seed)


def randn(gen, *shape, scale=1.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float32).mul_(scale)


_PATTERN = 4099  # a prime: rows of power-of-two width see the pattern at shifting offsets


def _garbage_pattern(dtype, gen):
    """_PATTERN values of `dtype` an engine's free memory may hold: NaN, +inf, -inf, +-huge and random
    bit patterns (any exponent), about a fifth each, in random order."""
    n = _PATTERN
    kind = torch.randint(0, 5, (n,), generator=gen)
    if dtype == torch.uint8:  # raw bytes (e4m3 keys): NaN codes 0x7F / 0xFF, +-448, random bytes
        choices = torch.tensor([0xFF, 0x7F, 0x7E, 0xFE], dtype=torch.uint8)
        special = choices[kind.clamp(max=3)]
        return torch.where(kind == 4, torch.randint(0, 256, (n,), generator=gen, dtype=torch.uint8), special)
    huge = 1e30 if dtype != torch.float16 else 6e4
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
    values = torch.stack([torch.full((n,), float("nan")), torch.full((n,), float("inf")),
                          torch.full((n,), float("-inf")), sign * huge, torch.zeros(n)])[kind, torch.arange(n)]
    values = values.to(dtype)
    bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[dtype]
    info = torch.iinfo(bits)
    rand = torch.randint(info.min, info.max, (n,), generator=gen, dtype=torch.int64).to(bits).view(dtype)
    return torch.where(kind == 4, rand, values)


def garbage(shape, dtype, gen):
    """A new tensor of `shape` filled with engine-like garbage (see _garbage_pattern), seeded."""
    pattern = _garbage_pattern(dtype, gen)
    numel = 1
    for s in shape:
        numel *= s
    start = int(torch.randint(0, _PATTERN, (1,), generator=gen))
    reps = -(-(numel + start) // _PATTERN)
    return pattern.repeat(reps)[start:start + numel].view(*shape).clone()


def stale_table_entries(table, used, gen, *, anything=True):
    """In place: each row b of an int32 table gets stale entries from column used[b] on, as an engine
    leaves them: -1 and pages other rows use; with `anything` (where the contract lets those entries
    be any int32) also values far outside the pool, negative ones included."""
    rows, columns = table.shape
    pool = torch.cat([torch.tensor([-1, -1], dtype=torch.int32), table[table >= 0].int().flatten()])
    wild = torch.tensor([INT32_MIN, 2**31 - 1, -7, 1 << 20, -(1 << 20)] if anything else [], dtype=torch.int32)
    for b in range(rows):
        n = columns - int(used[b])
        if n <= 0:
            continue
        pick = pool[torch.randint(0, len(pool), (n,), generator=gen)]
        if len(wild):
            far = wild[torch.randint(0, len(wild), (n,), generator=gen)]
            pick = torch.where(torch.rand(n, generator=gen) < 0.4, far, pick)
        table[b, int(used[b]):] = pick
    return table


# ---------------------------------------------------------------------------------------------
# FP8 quantisers (contract §2)


def quantize_fp8_rows(x, eps=1e-10):
    """Per-row e4m3 quantisation over the last dim: scale = amax(|x|)/448, x_fp8 = x/scale.
    Returns (x_fp8, scale float32 [...]); a row of zeros gets a tiny scale, not a NaN."""
    x = x.float()
    scale = x.abs().amax(dim=-1).clamp_min(eps) / contract.FP8_MAX
    x_fp8 = (x / scale[..., None]).clamp(-contract.FP8_MAX, contract.FP8_MAX).to(torch.float8_e4m3fn)
    return x_fp8, scale


def dequantize_fp8_rows(x_fp8, scale):
    return x_fp8.double() * scale.double()[..., None]


def quantize_indexer_queries(q, weights, softmax_scale=contract.INDEXER_DIM ** -0.5):
    """q float [B, H, 128], weights [B, H] -> (q_fp8, weights with softmax and query scales folded in).
    Valid because relu(c*x) = c*relu(x) for the positive query scale c."""
    q_fp8, q_scale = quantize_fp8_rows(q)
    return q_fp8, (weights.float() * q_scale * softmax_scale).float()


# ---------------------------------------------------------------------------------------------
# page tables and the paged indexer cache


def random_page_table(blocks_per_request, num_pages, gen, *, columns=None, released=None):
    """int32 [B, columns]: each request's blocks get distinct random pages of a pool of num_pages;
    columns past a request's blocks are -1, and so is every block in released[b] (a set)."""
    kept = [[blk for blk in range(n) if not (released and blk in released[b])]
            for b, n in enumerate(blocks_per_request)]
    needed = sum(len(k) for k in kept)
    if needed > num_pages:
        raise ValueError(f"{needed} blocks do not fit in {num_pages} pages")
    columns = max(blocks_per_request, default=0) if columns is None else columns
    pages = torch.randperm(num_pages, generator=gen)[:needed]
    table = torch.full((len(blocks_per_request), columns), -1, dtype=torch.int32)
    start = 0
    for b, blocks in enumerate(kept):
        table[b, blocks] = pages[start:start + len(blocks)].int()
        start += len(blocks)
    return table


def pack_indexer_cache(keys_fp8, scales, block_table, num_blocks, gen=None):
    """Per request b, keys_fp8[b] e4m3 [n_b, 128] and scales[b] float32 [n_b] -> uint8
    [num_blocks, 64*132]: entry t in block block_table[b, t // 64], row t % 64. Blocks and rows that
    hold no entry are 0xFF bytes (NaN keys and NaN scales), or with `gen` garbage: keys of random
    finite bytes (every third row all NaN), scales NaN / +-inf / huge / random, so that neither a
    NaN-dropping max nor a multiplication by 0 hides a read of them."""
    cache = torch.full((num_blocks, contract.INDEXER_BLOCK_BYTES), 0xFF, dtype=torch.uint8)
    if gen is not None:
        keys = garbage((num_blocks * contract.INDEXER_BLOCK, contract.INDEXER_DIM), torch.uint8, gen)
        keys = torch.where((keys & 0x7F) == 0x7F, keys - 1, keys)  # the NaN codes -> +-448
        keys[::3] = 0xFF
        cache[:, :contract.INDEXER_KEY_BYTES] = keys.view(num_blocks, contract.INDEXER_KEY_BYTES)
        cache[:, contract.INDEXER_KEY_BYTES:] = garbage((num_blocks, contract.INDEXER_BLOCK), torch.float32,
                                                        gen).view(torch.uint8)
    keys = cache[:, :contract.INDEXER_KEY_BYTES].view(num_blocks, contract.INDEXER_BLOCK, contract.INDEXER_DIM)
    scale_bytes = cache[:, contract.INDEXER_KEY_BYTES:].view(num_blocks, contract.INDEXER_BLOCK, 4)
    for b, (k, s) in enumerate(zip(keys_fp8, scales)):
        t = torch.arange(k.shape[0])
        blocks, rows = block_table[b].long()[t // contract.INDEXER_BLOCK], t % contract.INDEXER_BLOCK
        keys[blocks, rows] = k.view(torch.uint8)
        scale_bytes[blocks, rows] = s.float().contiguous().view(torch.uint8).view(-1, 4)
    return cache


# ---------------------------------------------------------------------------------------------
# compress: inputs and state built from each request's token history


class TrimmedRows:
    """Raw rows of one request for positions start.. only, indexed by absolute position (ints,
    position tensors, slices): a long prefix need not exist where no call reads it."""

    def __init__(self, start, rows):
        self.start, self.rows = start, rows

    def __getitem__(self, pos):
        if isinstance(pos, slice):
            lo = None if pos.start is None else pos.start - self.start
            hi = None if pos.stop is None else pos.stop - self.start
            if (lo is not None and lo < 0) or (hi is not None and hi < 0):
                raise IndexError(f"rows before position {self.start} were not drawn")
            return self.rows[lo:hi]
        return self.rows[pos - self.start]


def compress_inputs(*, ratio, d, prefix_lens, extend_lens, mode, seed, device="cpu", score_scale=1.0,
                    spare=2, release=False, trim=False, stale_columns=0, rows_order=None, garbage=False):
    """A compress call for requests with the given prefix and extend lengths.

    Every request gets a random history of raw rows for positions 0..prefix+extend-1
    (extra["history"][b]); kv_score holds the new part, the state the part a call may read.
    spare: unused state rows or pages in the pool. release: in paged mode only the blocks this call
    reads and the blocks a later call will read have pages; the rest are -1, as an engine that frees
    (or never allocates) them would leave them. trim: draw rows only from 2*ratio positions before each
    prefix (what any call can read; paged mode then implies release), so long contexts fit.
    stale_columns: paged tables are that much wider than the blocks in use, with stale entries (-1 or
    pages other requests use) past them. rows_order "descending": ring / online state rows from the
    last row down instead of a random permutation. garbage: every slot, row and page that holds no
    position holds garbage (else NaN)."""
    gen = generator(seed)
    junk = gen if garbage else None  # the generator the poisoned states draw garbage from
    width = contract.ROW_WIDTH_FACTOR[ratio] * d
    batch = len(prefix_lens)
    history = []
    release = release or (trim and mode == "paged")
    for p, e in zip(prefix_lens, extend_lens):
        start = max(0, p - 2 * ratio) if trim else 0
        rows = randn(gen, p + e - start, width)
        rows[:, width // 2:] *= score_scale  # the score half of the row
        history.append(TrimmedRows(start, rows) if start else rows)
    ape = randn(gen, *contract.APE_SHAPE[ratio](d), scale=0.5)
    kv_score = torch.cat([h[p:] for h, p in zip(history, prefix_lens)]) if batch else torch.zeros(0, width)
    kwargs = dict(ratio=ratio, prefix_lens=torch.tensor(prefix_lens, dtype=torch.int32),
                  extend_lens=torch.tensor(extend_lens, dtype=torch.int32), mode=mode)
    if mode == "paged":
        blocks = [contract.cdiv(p + e, ratio) for p, e in zip(prefix_lens, extend_lens)]
        released = [_unneeded_blocks(ratio, p, e) for p, e in zip(prefix_lens, extend_lens)] if release else None
        pool = sum(blocks) - sum(len(r) for r in released or []) + spare
        table = random_page_table(blocks, pool, gen, released=released, columns=max(blocks, default=0) + stale_columns)
        if stale_columns:  # the validator bounds every entry by the pool: -1 or pages in use
            stale_table_entries(table, blocks, gen, anything=False)
        state = paged_state(history, prefix_lens, ratio, width, table, pool, junk)
        kwargs["page_table"] = table
    else:
        rows = torch.randperm(batch + spare, generator=gen)[:batch].int()
        if rows_order == "descending":
            rows = torch.arange(batch + spare - 1, spare - 1, -1, dtype=torch.int32)
        if mode == "ring":
            state = ring_state(history, prefix_lens, ratio, width, rows, batch + spare, junk)
        else:
            state = online_state(history, prefix_lens, ape, rows, batch + spare, junk)
        kwargs["state_rows"] = rows
    inputs = OpInputs((kv_score, ape, state), kwargs, dict(history=history, seed=seed))
    return to_device(inputs, device)


def compress_steps(x, steps):
    """The calls of a chain: x was built with extend_lens = the per-request totals of `steps` (one
    extend list per call). Yields (kv_score, prefix_lens, extend_lens) of each call, in order, to be
    run on x's state and tables."""
    device = x.args[0].device
    done = x.kwargs["prefix_lens"].tolist()
    initial = list(done)
    for ext in steps:
        rows = [x.extra["history"][b][done[b]:done[b] + e] for b, e in enumerate(ext)]
        kv = torch.cat(rows) if rows else x.args[0][:0]
        yield (kv.to(device), torch.tensor(done, dtype=torch.int32, device=device),
               torch.tensor(ext, dtype=torch.int32, device=device))
        done = [d + e for d, e in zip(done, ext)]
    totals = [d - i for d, i in zip(done, initial)]
    if totals != x.kwargs["extend_lens"].tolist():
        raise ValueError(f"steps add up to extends {totals}, but the inputs were built for "
                         f"{x.kwargs['extend_lens'].tolist()}")


def _unneeded_blocks(ratio, prefix_len, extend_len):
    """Blocks an engine need not keep a page for: neither read by this call nor by the next
    emission after it (C4 keeps the overlap block too)."""
    total = prefix_len + extend_len
    read = {p // ratio for p in contract.compress_state_reads(ratio, prefix_len, extend_len)}
    later = contract.compress_state_reads(ratio, total, ratio)  # what the next emission reads
    first_later = (later[0] if len(later) else total) // ratio
    return set(range(first_later)) - read


def _poisoned(shape, gen):
    return torch.full(shape, POISON) if gen is None else garbage(shape, torch.float32, gen)


def ring_state(history, prefix_lens, ratio, width, state_rows, num_rows, gen=None):
    """float32 [num_rows, W, E]: request b's row keeps its last min(W, prefix) positions at p % W;
    every other slot is NaN (with `gen`: garbage)."""
    slots = contract.RING_WIDTH[ratio]
    state = _poisoned((num_rows, slots, width), gen)
    for b, p in enumerate(prefix_lens):
        pos = torch.arange(max(0, p - slots), p)
        state[int(state_rows[b]), pos % slots] = history[b][pos]
    return state


def paged_state(history, prefix_lens, ratio, width, page_table, num_pages, gen=None):
    """float32 [num_pages, r, E]: each prefix position whose block has a page sits at slot p % r;
    everything else is NaN (with `gen`: garbage)."""
    state = _poisoned((num_pages, ratio, width), gen)
    for b, p in enumerate(prefix_lens):
        pos = torch.arange(getattr(history[b], "start", 0), p)
        pages = page_table[b].long()[pos // ratio]
        keep = pages >= 0
        state[pages[keep], pos[keep] % ratio] = history[b][pos[keep]]
    return state


def online_state(history, prefix_lens, ape, state_rows, num_rows, gen=None):
    """float32 [num_rows, 3, d]: (max, sum, normalised mean) of the biased logits of the prefix's
    partial block; NaN (with `gen`: garbage) where the prefix ends on a block boundary (the op must
    start afresh) and in rows no request owns."""
    d = ape.shape[1]
    state = _poisoned((num_rows, contract.ONLINE_FIELDS, d), gen)
    for b, p in enumerate(prefix_lens):
        start = p - p % 128
        if start == p:
            continue
        block = history[b][start:p].double()
        logits = block[:, d:] + ape[:p - start].double()
        m = logits.max(dim=0).values
        w = torch.exp(logits - m)
        state[int(state_rows[b])] = torch.stack([m, w.sum(0), (w * block[:, :d]).sum(0) / w.sum(0)]).float()
    return state


# ---------------------------------------------------------------------------------------------
# indexer logits


def indexer_inputs(*, context_lens, heads=64, seed, device="cpu", max_context_len=None, spare_blocks=2,
                   key_scale=1.0, stale_columns=0, garbage=False):
    """Random keys per request quantised per entry into a paged cache with a random block table
    (stale_columns more columns than max_context_len needs; stale entries past each context's blocks);
    queries quantised per (row, head), weights with the scales folded in; with `garbage`, garbage in
    every cache block and row no entry fills (else 0xFF: NaN)."""
    gen = generator(seed)
    batch = len(context_lens)
    max_context_len = max(context_lens, default=0) if max_context_len is None else max_context_len
    keys = [randn(gen, n, contract.INDEXER_DIM, scale=key_scale) for n in context_lens]
    quantised = [quantize_fp8_rows(k) for k in keys]
    blocks = [contract.cdiv(n, contract.INDEXER_BLOCK) for n in context_lens]
    num_blocks = sum(blocks) + spare_blocks
    table = random_page_table(blocks, num_blocks, gen,
                              columns=max(1, contract.cdiv(max_context_len, 64)) + stale_columns)
    if stale_columns:  # entries past a context's blocks are never read: anything
        stale_table_entries(table, blocks, gen)
    cache = pack_indexer_cache([k for k, _ in quantised], [s for _, s in quantised], table, num_blocks,
                               gen if garbage else None)
    q_fp8, weights = quantize_indexer_queries(randn(gen, batch, heads, contract.INDEXER_DIM),
                                              randn(gen, batch, heads))
    inputs = OpInputs((q_fp8, weights, cache, torch.tensor(context_lens, dtype=torch.int32), table),
                      dict(max_context_len=max_context_len), dict(seed=seed))
    return to_device(inputs, device)


# ---------------------------------------------------------------------------------------------
# top-k


def topk_inputs(*, seq_lens, columns=None, k=512, page_size=64, seed, device="cpu", distinct=None,
                tail=float("inf"), stale_columns=0, neg_inf_inside=None, nan_in_short_rows=False):
    """Random logits [B, columns] with a random page table (stale_columns more columns than the
    logits need, stale entries past each row's pages). distinct: draw the valid logits from that many
    distinct values (heavy ties); tail: the value past each seq_len (+inf by default, so a kernel that
    ignores seq_lens selects it; "garbage": NaN, +-inf, huge and random values mixed).
    neg_inf_inside: that many -inf logits inside each row's seq_len (still values: a row may have to
    select some). nan_in_short_rows: NaN in about a third of each short row's logits (seq_len <= k:
    the short path reads no logit, so NaN there is valid input)."""
    gen = generator(seed)
    columns = max(seq_lens, default=0) if columns is None else columns
    logits = randn(gen, len(seq_lens), columns)
    if distinct is not None:
        logits = torch.randint(0, distinct, logits.shape, generator=gen).float() / max(distinct, 1)
    junk = garbage(logits.shape, torch.float32, gen) if tail == "garbage" else None
    for b, n in enumerate(seq_lens):
        logits[b, n:] = junk[b, n:] if junk is not None else tail
    blocks = [contract.cdiv(n, page_size) for n in seq_lens]
    table = random_page_table(blocks, sum(blocks) + 2, gen,
                              columns=max(1, contract.cdiv(columns, page_size)) + stale_columns)
    if stale_columns:  # pages past a row's seq_len are never read: anything
        stale_table_entries(table, blocks, gen)
    # each row's positions drawn from a generator of its own, seeded alike
    if neg_inf_inside:
        for row, n in zip(logits, seq_lens):
            row[torch.randperm(n, generator=generator(seed))[:neg_inf_inside]] = float("-inf")
    if nan_in_short_rows:
        for row, n in zip(logits, seq_lens):
            if n <= k:
                row[torch.randperm(n, generator=generator(seed))[:max(1, n // 3)]] = float("nan")
    inputs = OpInputs((logits, torch.tensor(seq_lens, dtype=torch.int32), table),
                      dict(k=k, page_size=page_size), dict(seed=seed))
    return to_device(inputs, device)


# ---------------------------------------------------------------------------------------------
# sparse attention


def attention_indices(positions, *, ratio, topk, window=128, gen):
    """Index rows the way the engines build them, for query rows at the given absolute positions.

    The pool is [window region: window rows per query row][compressed region: each row's entries].
    Each index row: the window part in ring order (slot i of the ring is valid iff it holds one of
    the last `window` positions, else -1), then the compressed part: ratio 4 (CSA) a random choice of
    min(topk, visible) visible entries, ratio 128 (HCA) all visible entries j < (p+1)//128, then -1.
    Returns (indices int32 [B, window + topk], pool rows)."""
    batch = len(positions)
    indices = torch.full((batch, window + topk), -1, dtype=torch.int32)
    base = batch * window
    for b, p in enumerate(positions):
        valid_slots = min(p + 1, window)  # positions max(0, p-window+1)..p fill slots 0..p early on
        indices[b, :valid_slots] = b * window + torch.arange(valid_slots, dtype=torch.int32)
        visible = (p + 1) // ratio
        if ratio == 4:
            chosen = torch.randperm(visible, generator=gen)[:topk]
        else:
            if visible > topk:
                raise ValueError(f"HCA row at position {p} sees {visible} entries > topk {topk}")
            chosen = torch.arange(visible)
        indices[b, window:window + len(chosen)] = (base + chosen).int()
        base += visible
    return indices, base


def prefill_attention_indices(start, tokens, *, ratio, topk, window=128, gen):
    """Index rows of one request's prefill: query tokens at positions start .. start+tokens-1, each
    with its own window (its last `window` raw positions, oldest first, -1 where the position would
    be negative) and its own compressed part (ratio 4: min(topk, visible) entries chosen at random
    among its visible j < (p+1)//ratio; ratio 128: all visible; then -1). The pool is
    [raw rows of positions start-window+1 .. start+tokens-1][the request's compressed entries].
    Vectorised (random keys and one topk), so 4096 tokens at 64K build in about a second.
    Returns (indices int32 [tokens, window + topk], pool rows)."""
    end = start + tokens
    raw_first = max(0, start - window + 1)
    raw_rows = end - raw_first
    pos = torch.arange(start, end)
    slot_pos = pos[:, None] - window + 1 + torch.arange(window)[None, :]  # oldest .. newest
    win = torch.where(slot_pos >= 0, slot_pos - raw_first, -1)
    visible = (pos + 1) // ratio
    entries = int(visible.max()) if tokens else 0
    if ratio == 4:
        keys = torch.rand(tokens, max(entries, 1), generator=gen)
        keys = keys.masked_fill(torch.arange(keys.shape[1])[None, :] >= visible[:, None], -1.0)
        take = min(topk, keys.shape[1])
        chosen = keys.topk(take, dim=1).indices
        chosen = torch.where(chosen < visible[:, None], chosen, -1)
    else:
        if entries > topk:
            raise ValueError(f"HCA prefill: the last token sees {entries} entries > topk {topk}")
        chosen = torch.arange(entries)[None, :].expand(tokens, entries)
        chosen = torch.where(chosen < visible[:, None], chosen, -1)
    comp = torch.full((tokens, topk), -1, dtype=torch.int64)
    comp[:, :chosen.shape[1]] = torch.where(chosen >= 0, chosen + raw_rows, -1)
    return torch.cat([win, comp], dim=1).int(), raw_rows + entries


def random_indices(rows, k, pool, invalid, gen):
    """int32 [rows, k] uniform over a pool of `pool` rows, each entry -1 with probability `invalid`
    (repeats may occur: duplicates count twice)."""
    idx = torch.randint(0, pool, (rows, k), generator=gen, dtype=torch.int32)
    return idx.masked_fill(torch.rand(rows, k, generator=gen) < invalid, -1)


def duplicate_some_indices(indices, gen):
    """In place: each row repeats about a quarter of its valid entries, in its -1 slots where it has
    them, else over other entries."""
    for row in indices:
        valid = (row >= 0).nonzero().flatten()
        if len(valid) < 2:
            continue
        n = max(1, len(valid) // 4)
        src = valid[torch.randint(0, len(valid), (n,), generator=gen)]
        free = (row < 0).nonzero().flatten()
        dst = free[:n] if len(free) >= n else valid[torch.randperm(len(valid), generator=gen)[:n]]
        row[dst] = row[src].clone()


def attention_inputs(*, positions, heads, ratio=4, topk=512, window=128, seed, device="cpu", sink=True,
                     q_scale=1.0, sm_scale=SM_SCALE, indices=None, pool_rows=None,
                     pool_pad=(0, 0), garbage=False, sink_scale=1.0):
    """q, kv and engine-like indices for decode rows at `positions`; pass indices and pool_rows to
    use an index set of your own. pool_pad (front, back): free rows before and after the rows the
    index set uses (the engine-like set's indices shift by front). garbage: every kv row no index
    names holds garbage."""
    gen = generator(seed)
    if indices is None:
        indices, pool_rows = attention_indices(positions, ratio=ratio, topk=topk, window=window, gen=gen)
    front, back = pool_pad
    if front:
        indices = torch.where(indices >= 0, indices + front, indices)
    pool_rows += front + back
    batch = indices.shape[0]
    q = randn(gen, batch, heads, contract.ATTN_DIM, scale=q_scale).bfloat16()
    kv = randn(gen, max(pool_rows, 1), contract.ATTN_DIM).bfloat16()
    if garbage:
        poison_unnamed_rows(kv, indices, gen)
    kwargs = dict(sm_scale=sm_scale, attn_sink=randn(gen, heads, scale=sink_scale) if sink else None)
    inputs = OpInputs((q, kv, indices), kwargs, dict(seed=seed))
    return to_device(inputs, device)


def poison_unnamed_rows(kv, indices, gen):
    """In place: every row of the pool kv that no entry of indices names gets garbage (a free slot of
    an engine's cache); call again after changing the indices."""
    named = torch.zeros(kv.shape[0], dtype=torch.bool)
    valid = indices[indices >= 0].long().cpu()
    named[valid] = True
    free = (~named).nonzero().flatten()
    if len(free):
        kv[free.to(kv.device)] = garbage((len(free), kv.shape[1]), kv.dtype, gen).to(kv.device)
    return kv


def to_device(inputs, device):
    device = torch.device(device)

    def move(x):
        return x.to(device) if isinstance(x, torch.Tensor) else x
    return OpInputs(tuple(move(a) for a in inputs.args), {k: move(v) for k, v in inputs.kwargs.items()},
                    inputs.extra)


# ---------------------------------------------------------------------------------------------
# sparse attention over the FP8 cache (contract §8)


def quantize_attention_rows(x):
    """contract §8's quantiser: bf16 rows [N, 512] -> (e4m3 dims 0..447 [N, 448] float8_e4m3fn, scale
    bytes [N, 7] uint8, RoPE dims 448..511 [N, 64] bfloat16). Per tile of 64 dims:
    a = max(amax|x|, 1e-4), e = ceil(log2(a / 448)), stored e4m3(RNE(clamp(x / 2**e, +-448))),
    scale byte 127 + e."""
    x = x.float()
    nope = x[:, :contract.FP8_KV_NOPE].reshape(x.shape[0], contract.FP8_KV_SCALES, contract.FP8_KV_TILE)
    amax = nope.abs().amax(dim=-1).double().clamp_min(1e-4)
    # float64 log2 is exact at powers of two, so a tile whose amax / 448 is one gets that exponent
    e = torch.ceil(torch.log2(amax / contract.FP8_MAX))
    # dividing a bf16 value by a power of two is exact in float32 (e >= -22: no overflow)
    scaled = (nope / torch.exp2(e).float()[..., None]).clamp_(-contract.FP8_MAX, contract.FP8_MAX)
    e4m3 = scaled.to(torch.float8_e4m3fn)  # round to nearest even
    scale_bytes = (e + contract.FP8_KV_SCALE_BIAS).to(torch.uint8)
    return (e4m3.reshape(x.shape[0], contract.FP8_KV_NOPE), scale_bytes,
            x[:, contract.FP8_KV_NOPE:].bfloat16())


def dequantize_attention_rows(e4m3, scale_bytes, rope, dtype=torch.float64):
    """contract §8's dequantised rows [N, 512]: e4m3 x 2**(byte - 127) per 64 dims, then the bf16 RoPE dims."""
    scales = torch.exp2(scale_bytes.to(torch.float64) - contract.FP8_KV_SCALE_BIAS)
    nope = e4m3.to(torch.float64).reshape(-1, contract.FP8_KV_SCALES, contract.FP8_KV_TILE) * scales[..., None]
    return torch.cat([nope.reshape(-1, contract.FP8_KV_NOPE), rope.to(torch.float64)], dim=1).to(dtype)


def aligned_bytes(shape, device="cpu", align=contract.FP8_KV_ALIGN):
    """An uninitialised contiguous uint8 tensor of `shape` whose data pointer is `align`-aligned
    (the CPU allocator guarantees only 64 bytes)."""
    numel = 1
    for s in shape:
        numel *= s
    raw = torch.empty(numel + align, dtype=torch.uint8, device=device)
    skip = (-raw.data_ptr()) % align
    return raw[skip:skip + numel].view(*shape)


def pack_attention_fp8_cache(rows, slots, num_pages, page_size, gen, *, page_stride=None):
    """A contract §8 cache uint8 [num_pages, page_stride] (engines' stride by default) holding the
    quantised bf16 `rows` [N, 512] at slot ids `slots` [N]. Every other byte is garbage (NaN codes,
    +-448, random bytes): unwritten slots, padding past 584 * page_size, and byte 7 of each written
    scale group, which holds 0xFF (a scale of 2**128, inf in fp32, were it read as one)."""
    stride = page_stride or contract.fp8_kv_page_stride(page_size)
    cache = aligned_bytes((num_pages, stride))
    cache.copy_(garbage((num_pages, stride), torch.uint8, gen))
    data = cache[:, :contract.FP8_KV_ROW_BYTES * page_size].view(num_pages, page_size, contract.FP8_KV_ROW_BYTES)
    scale_part = cache[:, contract.FP8_KV_ROW_BYTES * page_size:contract.FP8_KV_TOKEN_BYTES * page_size]
    groups = scale_part.view(num_pages, page_size, contract.FP8_KV_SCALE_BYTES)
    for start in range(0, len(slots), 1 << 16):  # in chunks: benchmark pools hold millions of rows
        chunk = slots[start:start + (1 << 16)].long()
        e4m3, scale_bytes, rope = quantize_attention_rows(rows[start:start + (1 << 16)])
        page, o = chunk // page_size, chunk % page_size
        data[page, o] = torch.cat([e4m3.view(torch.uint8), rope.contiguous().view(torch.uint8)], dim=1)  # LE
        groups[page, o] = torch.cat([scale_bytes, torch.full((len(chunk), 1), 0xFF, dtype=torch.uint8)], dim=1)
    return cache


def read_attention_fp8_cache(cache, slots, page_size):
    """The records at slot ids `slots` [N] of a contract §8 cache: (e4m3 [N, 448], scale bytes [N, 7],
    RoPE bf16 [N, 64]), read by byte offset as the contract states it (the harness's independent reader)."""
    flat = cache.reshape(-1)
    stride = cache.shape[1]
    slots = slots.long().cpu()
    page, o = slots // page_size, slots % page_size
    base = page * stride + contract.FP8_KV_ROW_BYTES * o
    data = flat.cpu()[base[:, None] + torch.arange(contract.FP8_KV_ROW_BYTES)]
    scale_at = page * stride + contract.FP8_KV_ROW_BYTES * page_size + contract.FP8_KV_SCALE_BYTES * o
    scale_bytes = flat.cpu()[scale_at[:, None] + torch.arange(contract.FP8_KV_SCALES)]
    return (data[:, :contract.FP8_KV_NOPE].contiguous().view(torch.float8_e4m3fn), scale_bytes,
            data[:, contract.FP8_KV_NOPE:].contiguous().view(torch.bfloat16))


def attention_fp8_rows(n, gen, *, tile_log2=(-2.0, 2.0), rope_scale=1.0):
    """bf16 rows [n, 512] as RMS-normalised rows look: each 64-dim tile of the e4m3 part its own
    magnitude 2**u, u uniform over tile_log2 (contract §8: 2^-2 .. 2^2), the RoPE part times rope_scale."""
    lo, hi = tile_log2
    tiles = torch.exp2(lo + (hi - lo) * torch.rand(n, contract.FP8_KV_SCALES, 1, generator=gen))
    nope = (randn(gen, n, contract.FP8_KV_SCALES, contract.FP8_KV_TILE) * tiles).reshape(n, contract.FP8_KV_NOPE)
    rope = randn(gen, n, contract.FP8_KV_ROPE, scale=rope_scale)
    return torch.cat([nope, rope], dim=1).bfloat16()


def scatter_slots(pool_rows, num_pages, page_size, indices, gen):
    """Slot ids for the logical pool rows 0..pool_rows-1, scattered over the pages at random, with
    two rows the indices name placed in the pool's first slot and its last, so every index set
    reaches both ends."""
    total = num_pages * page_size
    if pool_rows > total:
        raise ValueError(f"{pool_rows} rows do not fit {num_pages} pages of {page_size}")
    slots = torch.randperm(total, generator=gen)[:pool_rows]
    named = torch.unique(indices[indices >= 0].long())
    if len(named):
        for target, row in ((0, int(named[0])), (total - 1, int(named[-1]))):
            holder = (slots == target).nonzero().flatten()
            if len(holder):
                slots[holder[0]] = slots[row].clone()
            slots[row] = target
    return slots


def attention_fp8_inputs(*, positions=None, heads, ratio=4, topk=512, window=128, page_size=64, seed,
                         device="cpu", sink=True, q_scale=1.0, sm_scale=SM_SCALE,
                         indices=None, pool_rows=None, spare_pages=2, tile_log2=(-2.0, 2.0), rope_scale=1.0,
                         page_stride=None, sink_scale=1.0):
    """q, a contract §8 cache and engine-like indices (as attention_inputs) for decode rows at
    `positions`, or your own `indices` over `pool_rows` logical rows. The logical rows live in
    slots scattered over num_pages = ceil(pool_rows / page_size) + spare_pages pages; the indices
    returned are slot ids. extra holds the bf16 rows (`rows`) and their slots (`slots`)."""
    gen = generator(seed)
    if indices is None:
        indices, pool_rows = attention_indices(positions, ratio=ratio, topk=topk, window=window, gen=gen)
    pool_rows = max(pool_rows, 1)
    num_pages = -(-pool_rows // page_size) + spare_pages
    slots = scatter_slots(pool_rows, num_pages, page_size, indices, gen)
    rows = attention_fp8_rows(pool_rows, gen, tile_log2=tile_log2, rope_scale=rope_scale)
    cache = pack_attention_fp8_cache(rows, slots, num_pages, page_size, gen, page_stride=page_stride)
    slot_indices = torch.where(indices >= 0, slots[indices.long().clamp_min(0)].int(), -1).int()
    batch = indices.shape[0]
    q = randn(gen, batch, heads, contract.ATTN_DIM, scale=q_scale).bfloat16()
    kwargs = dict(page_size=page_size, sm_scale=sm_scale,
                  attn_sink=randn(gen, heads, scale=sink_scale) if sink else None)
    inputs = OpInputs((q, cache, slot_indices), kwargs, dict(seed=seed, rows=rows, slots=slots))
    return to_device(inputs, device)


# ---------------------------------------------------------------------------------------------
# case builders: a catalogue case's parameters (harness/cases.py) are the keyword arguments of its
# op's builder here (harness/ops.py names it), with seed, device and tier (the case's: "quick",
# "full" or "bench"). They build as an engine's memory looks: garbage in every free slot, row and
# page, tables wider than the contexts with stale entries past them.


def compress_case(*, prefix, steps, seed, device="cpu", tier="quick", **params):
    """A chain of compress calls on one state: after `prefix` positions per request, call i extends
    request b by steps[i][b] (ops.py splits the chain into calls). params: compress_inputs's ratio,
    d, mode, score_scale, spare, release, rows_order. Benchmark cases draw only the rows a call can
    read (trim), so that long contexts fit."""
    totals = [sum(step[b] for step in steps) for b in range(len(prefix))]
    x = compress_inputs(prefix_lens=prefix, extend_lens=totals, seed=seed, device=device, trim=tier == "bench",
                        garbage=True, stale_columns=STALE_COLUMNS, **params)
    x.extra["steps"] = steps
    return x


def indexer_case(*, seed, device="cpu", tier="quick", **params):
    """params: indexer_inputs's context_lens, heads, max_context_len, key_scale."""
    return indexer_inputs(seed=seed, device=device, garbage=True, stale_columns=STALE_COLUMNS, **params)


def topk_case(*, seed, device="cpu", tier="quick", tail="garbage", **params):
    """params: topk_inputs's seq_lens, columns, k, page_size, distinct, neg_inf_inside,
    nan_in_short_rows; past each seq_len the logits hold garbage unless `tail` says otherwise."""
    return topk_inputs(seed=seed, device=device, tail=tail, stale_columns=STALE_COLUMNS, **params)


def attention_case(*, heads, seed, device="cpu", tier="quick", positions=None, ratio=None, topk=None, prefill=None,
                   random=None, sink=True, q_scale=1.0, sm_scale=SM_SCALE, pool_pad=None, sink_scale=1.0,
                   empty_rows=(), duplicates=False):
    """sparse_attention's inputs over one of three index sets: engine-like decode rows at `positions`
    (attention_indices, with ratio and topk); `prefill` = (start, tokens), one request's prefill
    (prefill_attention_indices, with ratio and topk); `random` = (K, pool rows, fraction -1) for
    len(positions) rows (3 without positions). Then the rows in `empty_rows` are all -1, with
    `duplicates` each row repeats some of its entries, and every pool row no index names holds
    garbage. pool_pad: free pool rows before and after the used ones; by default (1, 2) for
    engine-like sets, (0, 0) for random ones; prefill sets have none. Prefill and random sets take
    q, sm_scale and the sinks at their plain defaults (q_scale, sm_scale and sink_scale shape
    engine-like sets only), as the catalogue has always built them: a fuzz seed keeps its inputs."""
    gen = generator(seed + 7919)  # the index sets and their edits draw apart from the data
    if prefill is not None:
        idx, pool = prefill_attention_indices(*prefill, ratio=ratio, topk=topk, gen=gen)
        x = attention_inputs(positions=None, heads=heads, seed=seed, sink=sink, indices=idx, pool_rows=pool)
    elif random is not None:
        k, pool, invalid = random
        idx = random_indices(3 if positions is None else len(positions), k, pool, invalid, gen)
        x = attention_inputs(positions=None, heads=heads, seed=seed, sink=sink, indices=idx, pool_rows=pool,
                             pool_pad=tuple(pool_pad) if pool_pad is not None else (0, 0), garbage=True)
    else:
        x = attention_inputs(positions=positions, heads=heads, ratio=ratio, topk=topk, seed=seed, sink=sink,
                             q_scale=q_scale, sm_scale=sm_scale, sink_scale=sink_scale, garbage=True,
                             pool_pad=tuple(pool_pad) if pool_pad is not None else (1, 2))
    idx = x.args[2]
    for row in empty_rows:
        idx[row] = -1
    if duplicates:
        duplicate_some_indices(idx, gen)
    poison_unnamed_rows(x.args[1], idx, gen)  # rows the edits above left unnamed
    return to_device(x, device)


def attention_fp8_case(*, heads, page_size, seed, device="cpu", tier="quick", positions=None, ratio=None, topk=None,
                       random=None, empty_rows=(), duplicates=False, **params):
    """sparse_attention_fp8's inputs: engine-like index rows at `positions` (ratio, topk) or `random`
    = (K, pool rows, fraction -1) for len(positions) rows (3 without), the -1 rows and duplicates
    as attention_case's, then the logical rows quantised into slots scattered over the pages.
    params: attention_fp8_inputs's sink, q_scale, sm_scale, sink_scale, tile_log2, rope_scale,
    page_stride."""
    gen = generator(seed + 7919)  # the index sets and their edits draw apart from the data
    if random is not None:
        k, pool, invalid = random
        idx = random_indices(3 if positions is None else len(positions), k, pool, invalid, gen)
    else:
        idx, pool = attention_indices(positions, ratio=ratio, topk=topk, gen=gen)
    for row in empty_rows:
        idx[row] = -1
    if duplicates:
        duplicate_some_indices(idx, gen)
    return attention_fp8_inputs(heads=heads, indices=idx, pool_rows=pool, page_size=page_size, seed=seed,
                                device=device, **params)
