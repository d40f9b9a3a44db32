"""Comparators of contract §5: a backend's outputs (and state) against the float64 reference's.

Each check, in order: shape and dtype; the positions of NaN, +inf and -inf identical; the
elementwise bound of the op; relative L2 and cosine distance reported. Top-k is checked by the tie
rule instead. A failure names the output, the worst element and both values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness import contract

# contract §5: |got - ref| <= atol_scale * max-or-sum(1, |ref|)
COMPRESS_BOUND = 5e-3  # * (1 + |ref|)
INDEXER_REL_L2 = 3e-4  # per row, over the row's finite entries (contract §5, indexer bound revised)
RECALL_K = 512  # the indexer's top-k in V4-Flash: the recall metric selects this many per row
ATTN_OUT_BOUND = 1e-2  # * max(1, |ref|)
ATTN_LSE_BOUND = 1e-3  # absolute


@dataclass
class Comparison:
    """What one comparison found: ok, the first failure's message, and the metrics."""

    ok: bool = True
    message: str = ""
    metrics: dict = field(default_factory=dict)

    def fail(self, message):
        if self.ok:
            self.ok, self.message = False, message
        return self

    def merge(self, name, other):
        for k, v in other.metrics.items():
            self.metrics[f"{name}.{k}" if name else k] = v
        if not other.ok:
            self.fail(other.message)
        return self


def _where(index):
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def _special(got, ref, name):
    """Shape, dtype and the NaN / +inf / -inf pattern."""
    report = Comparison()
    if tuple(got.shape) != tuple(ref.shape):
        return report.fail(f"{name}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    if got.dtype != ref.dtype:
        return report.fail(f"{name}: dtype {got.dtype}, expected {ref.dtype}")
    if got.device != ref.device:
        return report.fail(f"{name}: on {got.device}, expected {ref.device} (the inputs' device)")
    g, r = got.double().cpu(), ref.double().cpu()
    for what, test in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        mismatch = test(g) != test(r)
        if mismatch.any():
            idx = mismatch.nonzero()[0]
            count = int(mismatch.sum())
            return report.fail(f"{name}: {what} pattern differs at {count} elements, first {name}{_where(idx)}: "
                               f"got {g[tuple(idx)].item():.6g}, expected {r[tuple(idx)].item():.6g}")
    return report


def _distances(g, r, report):
    finite = torch.isfinite(r) & torch.isfinite(g)
    g, r = g[finite], r[finite]
    if r.numel():
        norm = r.norm().item()
        report.metrics["rel_l2"] = (g - r).norm().item() / norm if norm else (g - r).norm().item()
        denom = (g.norm() * r.norm()).item()
        report.metrics["cos_dist"] = 1 - (g @ r).item() / denom if denom else 0.0
    return report


def elementwise(got, ref, name, *, atol, scale="sum"):
    """|got - ref| <= atol * (1 + |ref|) (scale="sum"), atol * max(1, |ref|) ("max") or atol ("abs")."""
    report = _special(got, ref, name)
    if not report.ok:
        return report
    g, r = got.double().cpu(), ref.double().cpu()
    finite = torch.isfinite(r)
    err = torch.where(finite, (g - r).abs(), torch.zeros_like(r))
    bound = atol * {"sum": lambda: 1 + r.abs(), "max": lambda: r.abs().clamp_min(1.0),
                    "abs": lambda: torch.ones_like(r)}[scale]()
    excess = torch.where(finite, err / bound, torch.zeros_like(r))
    report.metrics["max_abs_err"] = err.max().item() if err.numel() else 0.0
    _distances(g, r, report)
    if excess.numel() and excess.max() > 1:
        idx = torch.nonzero(excess == excess.max())[0]
        bad = int((excess > 1).sum())
        report.fail(f"{name}: {bad} elements past the bound, worst {name}{_where(idx)}: "
                    f"got {g[tuple(idx)].item():.6g}, expected {r[tuple(idx)].item():.6g} "
                    f"(|err| {err[tuple(idx)].item():.3g} > {bound[tuple(idx)].item():.3g})")
    return report


def exact(got, ref, name):
    """Bitwise equal values, NaN where the reference has NaN."""
    report = _special(got, ref, name)
    if report.ok:
        g, r = got.cpu(), ref.cpu()
        if g.is_floating_point():
            g, r = g.nan_to_num(0.0), r.nan_to_num(0.0)
        diff = g != r
        if diff.any():
            idx = diff.nonzero()[0]
            report.fail(f"{name}: {int(diff.sum())} elements differ, first {name}{_where(idx)}: "
                        f"got {got.cpu()[tuple(idx)].item()}, expected {ref.cpu()[tuple(idx)].item()}")
    return report


# ---------------------------------------------------------------------------------------------
# per op


def compress(got, ref, *, mode="ring", kept=None, read_later=None):
    """got/ref: dict with "out" and "state" (the state after the call). kept: the state the contract
    fixes after the call (compress_kept_slots; None compares all of it); the rest is free.
    read_later: the part of it a later call can read (compress_read_later): when the state differs
    only outside it, the message says so (an engine may skip writing state nothing reads)."""
    report = Comparison().merge("out", elementwise(got["out"], ref["out"], "out", atol=COMPRESS_BOUND))
    state = _compress_state(got["state"], ref["state"], mode, kept)
    if not state.ok and read_later is not None and _compress_state(got["state"], ref["state"], mode, read_later).ok:
        state.message += ("; every difference lies in state the contract fixes but no later call reads "
                          "(an engine may leave it unwritten)")
    return report.merge("state", state)


def _compress_state(g, r, mode, mask):
    """Online state within the bound, raw rows (copies) exact; only where mask (rows [S] online,
    slots [S, W] otherwise) is set, or everywhere without one."""
    if mask is not None and g.shape == r.shape:
        mask = mask.to(g.device)
        mask = mask[:, None, None] if mode == "online" else mask[..., None]
        g, r = torch.where(mask, g, 0.0), torch.where(mask, r, 0.0)
    if mode == "online":
        return elementwise(g, r, "state", atol=COMPRESS_BOUND)
    return exact(g, r, "state")


def compress_kept_slots(state_shape, mode, ratio, totals, state_rows=None, page_table=None):
    """The state the contract fixes after a call that leaves request b at totals[b] positions. Ring:
    the last min(W, total) positions of each request's row; paged: each position < total whose
    block has a page; both as bool [S, W], with every row or page no request owns (untouched).
    Online: None (all of it). Other slots (positions not yet reached, or too old for the ring) are
    free."""
    if mode == "online":
        return None
    start = (lambda t: max(0, t - state_shape[1])) if mode == "ring" else (lambda t: 0)
    return _state_slots(state_shape, mode, ratio, [(start(t), t) for t in totals], state_rows, page_table)


def compress_read_later(state_shape, mode, ratio, totals, state_rows=None, page_table=None):
    """The part of the kept state a later call can read: ring / paged, the slots of the window of
    the next emission that lies before totals[b] (bool [S, W]); online, the rows of requests that
    stopped inside a block (bool [S]: after a block closes, its next position resets the row).
    Rows or pages no request owns count as read (they must stay untouched)."""
    if mode == "online":
        rows = torch.ones(state_shape[0], dtype=torch.bool)
        for b, total in enumerate(totals):
            rows[int(state_rows[b])] = total == 0 or total % ratio != 0
        return rows
    spans = []
    for total in totals:
        reads = contract.compress_state_reads(ratio, total, ratio)  # what the next emission reads
        spans.append((reads.start, reads.stop) if len(reads) else (total, total))
    return _state_slots(state_shape, mode, ratio, spans, state_rows, page_table)


def _state_slots(state_shape, mode, ratio, spans, state_rows, page_table):
    """bool [S, W]: the slots of positions spans[b] = (start, end) of each request, and every ring
    row or page no request owns."""
    rows, width = state_shape[0], state_shape[1]
    mask = torch.ones(rows, width, dtype=torch.bool)
    if mode == "ring":
        for b, (start, end) in enumerate(spans):
            row = int(state_rows[b])
            mask[row] = False
            mask[row, [p % width for p in range(max(start, end - width), end)]] = True
        return mask
    table = page_table.cpu()
    mask[table[table >= 0].long()] = False
    for b, (start, end) in enumerate(spans):  # a page holds one block
        first, last = start // ratio, min(-(-int(end) // ratio), table.shape[1])
        if last <= first:
            continue
        pages = table[b, first:last].long()
        position = torch.arange(first * ratio, last * ratio).view(-1, ratio)
        reached, named = (position >= start) & (position < end), pages >= 0
        mask[pages[named]] |= reached[named]
    return mask


def indexer_logits(got, ref):
    """-inf pattern identical; per row, relative L2 over the row's finite entries <= INDEXER_REL_L2 (a
    norm over the whole tensor would hide one wrong row among many); recall of the top-k reported."""
    report = _special(got["logits"], ref["logits"], "logits")
    if not report.ok:
        return report
    g, r = got["logits"].double().cpu(), ref["logits"].double().cpu()
    _distances(g, r, report)
    finite = torch.isfinite(r)
    diff = torch.where(finite, g - r, 0.0)
    err = diff.abs()
    report.metrics["max_abs_err"] = err.max().item() if err.numel() else 0.0
    if not r.numel():
        return report
    ref_norm = torch.where(finite, r, 0.0).norm(dim=1)
    diff_norm = diff.norm(dim=1)
    row_rel = torch.where(ref_norm > 0, diff_norm / ref_norm.clamp_min(1e-300), diff_norm)  # a zero row: absolute
    report.metrics["row_rel_l2_max"] = row_rel.max().item()
    report.metrics["recall"] = topk_recall(g, r)
    worst_row = int(row_rel.argmax())
    if row_rel[worst_row] > INDEXER_REL_L2:
        col = int(err[worst_row].argmax())
        report.fail(f"logits: row {worst_row} relative L2 {row_rel[worst_row].item():.3g} > {INDEXER_REL_L2} "
                    f"({int((row_rel > INDEXER_REL_L2).sum())} of {r.shape[0]} rows over), worst in it "
                    f"logits[{worst_row}, {col}]: got {g[worst_row, col].item():.6g}, "
                    f"expected {r[worst_row, col].item():.6g}")
    return report


def topk_recall(got, ref, k=RECALL_K):
    """contract §5's recall: of the entries the top-k of `ref` selects per row (among its finite entries;
    all of them when a row has at most k), the share that the top-k of `got` selects too, over all rows.
    Ties in `ref` at the k-th value count as agreement whichever of them `got` picks."""
    kk = min(k, ref.shape[1])
    if kk == 0:
        return 1.0
    ref_vals, ref_sel = ref.topk(kk, dim=1)
    got_vals, got_sel = got.topk(kk, dim=1)
    valid = torch.isfinite(ref_vals)
    total = int(valid.sum())
    if total == 0:
        return 1.0
    # a got-selected entry agrees when its reference value reaches the reference's k-th value (ties)
    kth = torch.where(valid, ref_vals, float("inf")).min(dim=1, keepdim=True).values
    picked = ref.gather(1, got_sel)
    agree = torch.isfinite(got_vals) & torch.isfinite(picked) & (picked >= kth)
    return min(int(agree.sum()), total) / total


def recall_summary(metrics):
    """The `check` table's note on a group of indexer cases (metrics of each): the worst row's relative
    L2 (what the bound holds to) and the lowest recall; '' for other ops."""
    recalls = [m["recall"] for m in metrics if "recall" in m]
    if not recalls:
        return ""
    rows = max(m.get("row_rel_l2_max", 0.0) for m in metrics)
    return f", row relL2 {rows:.2e}, recall >= {min(recalls):.4f}"


def topk_indices(got, ref, *, logits, seq_lens, page_table, k, page_size):
    """Tie rule: per row, the valid entries are distinct, map through the page table exactly, and
    their logits sorted equal the reference selection's sorted logits; -1 padding identical."""
    out, want = got["indices"], ref["indices"]
    report = Comparison()
    if tuple(out.shape) != tuple(want.shape) or out.dtype != want.dtype or out.device != want.device:
        return report.fail(f"indices: {tuple(out.shape)} {out.dtype} on {out.device}, expected {tuple(want.shape)} "
                           f"{want.dtype} on {want.device}")
    out, want = out.cpu(), want.cpu()
    logits, table = logits.cpu().double(), page_table.cpu().long()
    for b, n in enumerate(seq_lens.tolist()):
        row, ref_row = out[b], want[b]
        count = min(n, k)
        if (row[:count] < 0).any() or (row[count:] != -1).any():
            return report.fail(f"indices: row {b} (seq_len {n}, k {k}) must hold {count} valid entries then -1 "
                               f"padding; got {_head(row)}")
        if n <= k:  # short path: exact
            if not torch.equal(row, ref_row):
                i = int((row != ref_row).nonzero()[0])
                return report.fail(f"indices: short row {b} (seq_len {n} <= k {k}) must be 0..{n - 1} mapped, "
                                   f"indices[{b}, {i}] = {int(row[i])}, expected {int(ref_row[i])}")
            continue
        physical = row[:count].long()
        if len(set(physical.tolist())) != count:
            return report.fail(f"indices: row {b} has duplicate entries: {_head(row)}")
        pages = table[b, :contract.cdiv(n, page_size)]
        logical = _logical(physical, pages, page_size, n)
        if None in logical:
            v = physical.tolist()[logical.index(None)]
            return report.fail(f"indices: row {b} holds {v}, which is no valid column through the page table "
                               f"(seq_len {n}, page_size {page_size})")
        got_vals = logits[b, logical].sort().values
        ref_vals = logits[b, _logical(ref_row[:count], pages, page_size, n)].sort().values
        if not torch.equal(got_vals, ref_vals):
            i = int((got_vals != ref_vals).nonzero()[0])
            return report.fail(f"indices: row {b} selects a logit {got_vals[i].item():.6g} where the top-{k} has "
                               f"{ref_vals[i].item():.6g} (sorted position {i}); not the {k} largest")
    return report


def _logical(row, pages, page_size, n):
    """Invert the page-table mapping of physical indices: logical columns, None where a value maps
    to no page of the row's table or to a column at or past n."""
    page_pos = {int(p): i for i, p in enumerate(pages.tolist())}
    out = []
    for v in row.tolist():
        blk = page_pos.get(v // page_size)
        col = None if blk is None else blk * page_size + v % page_size
        out.append(col if col is not None and col < n else None)
    return out


def _head(row, n=8):
    values = row.tolist()
    return "[" + ", ".join(map(str, values[:n])) + (", ...]" if len(values) > n else "]")


def sparse_attention(got, ref):
    report = Comparison()
    report.merge("out", elementwise(got["out"], ref["out"], "out", atol=ATTN_OUT_BOUND, scale="max"))
    lse = _special(got["lse"], ref["lse"], "lse")
    if lse.ok:
        lse = elementwise(got["lse"], ref["lse"], "lse", atol=ATTN_LSE_BOUND, scale="abs")
    return report.merge("lse", lse)


ATTN_FP8_COS_BOUND = 1e-5  # cosine distance of out per (row, head), contract §8


def sparse_attention_fp8(got, ref):
    """contract §8: section 4's bounds, plus the cosine distance of each (row, head) output vector."""
    report = sparse_attention(got, ref)
    if not report.ok:
        return report
    g = got["out"].double().cpu().flatten(0, -2)
    r = ref["out"].double().cpu().flatten(0, -2)
    denom = g.norm(dim=1) * r.norm(dim=1)
    used = denom > 0  # an empty row is 0 in both (the elementwise bound held)
    cos_dist = torch.where(used, 1 - (g * r).sum(dim=1) / torch.where(used, denom, 1.0), torch.zeros_like(denom))
    worst = int(cos_dist.argmax()) if cos_dist.numel() else 0
    report.metrics["out.max_row_cos_dist"] = cos_dist[worst].item() if cos_dist.numel() else 0.0
    if cos_dist.numel() and cos_dist[worst] > ATTN_FP8_COS_BOUND:
        heads = got["out"].shape[1]
        report.fail(f"out: cosine distance {cos_dist[worst].item():.3g} > {ATTN_FP8_COS_BOUND} at out"
                    f"[{worst // heads}, {worst % heads}] ({int((cos_dist > ATTN_FP8_COS_BOUND).sum())} rows past it)")
    return report
