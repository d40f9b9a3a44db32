"""Bad inputs, as data: for every argument of every op, calls the contract says must raise ValueError
naming that argument, before anything is written. `harness check` runs them as the `bad-input`
family of each op; tests/test_contract.py holds the reference to the stricter InputError.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness import inputs
from harness import ops


@dataclass(frozen=True)
class BadInput:
    op: str
    argument: str  # the argument the error must name
    what: str  # what is wrong, for the report
    base: str  # key of BASES
    mutate: object  # (args: list, kwargs: dict, device) -> None, in place


def other_device(device):
    """A device that is not `device`: meta on the CPU (no second device there), else the CPU."""
    return torch.device("meta") if torch.device(device).type == "cpu" else torch.device("cpu")


BASES = {
    "ring": lambda dev: inputs.compress_inputs(ratio=4, d=8, prefix_lens=[5, 0], extend_lens=[7, 4], mode="ring",
                                               seed=1, device=dev),
    "paged": lambda dev: inputs.compress_inputs(ratio=4, d=8, prefix_lens=[5, 0], extend_lens=[7, 4], mode="paged",
                                                seed=1, device=dev),
    "online": lambda dev: inputs.compress_inputs(ratio=128, d=8, prefix_lens=[5], extend_lens=[200], mode="online",
                                                 seed=1, device=dev),
    "indexer": lambda dev: inputs.indexer_inputs(context_lens=[70, 3], heads=32, seed=2, max_context_len=128,
                                                 device=dev),
    "topk": lambda dev: inputs.topk_inputs(seq_lens=[30, 5], columns=40, k=8, page_size=16, seed=3, device=dev),
    "attention": lambda dev: inputs.attention_inputs(positions=[40, 300], heads=16, topk=16, seed=4, device=dev),
    "attention_fp8": lambda dev: inputs.attention_fp8_inputs(positions=[40, 300], heads=16, topk=16, page_size=2,
                                                             seed=5, device=dev),
}


# mutation helpers: positional argument i, keyword argument name, one element of either
def arg(i, fn):
    def mutate(a, kw, dev):
        a[i] = fn(a[i], dev)
    return mutate


def kwarg(name, fn):
    def mutate(a, kw, dev):
        kw[name] = fn(kw.get(name), dev)
    return mutate


def item(where, index, value):
    def mutate(a, kw, dev):
        (a[where] if isinstance(where, int) else kw[where])[index] = value
    return mutate


def value(v):
    return lambda old, dev: v


def i32(*values):
    return lambda old, dev: torch.tensor(values, dtype=torch.int32, device=dev)


def cast(dtype):
    return lambda t, dev: t.to(dtype)


def elsewhere(t, dev):
    return t.to(other_device(dev))


def sliced(*index):
    return lambda t, dev: t[index].contiguous()


@dataclass(frozen=True)
class PlanOf:
    """Stands for a plan that the backend's own planner (contract §7) makes from the call's metadata with
    `changes` applied; check_bad_input makes it (a backend without that planner skips the case)."""
    changes: tuple  # (argument, value maker) pairs


def plan_of(**changes):
    def mutate(a, kw, dev):
        kw["plan"] = PlanOf(tuple(changes.items()))
    return mutate


def page_written_by_two(a, kw, dev):  # request 1's block 0 points at a page request 0 writes
    kw["page_table"][1, 0] = kw["page_table"][0, 2]


def at_size(where, index, of, dim=0):
    """One element set to exactly the size of another argument's dimension: the first index past it
    (a bound checked with > instead of >= lets it through)."""
    def mutate(a, kw, dev):
        size = (a[of] if isinstance(of, int) else kw[of]).shape[dim]
        (a[where] if isinstance(where, int) else kw[where])[index] = size
    return mutate


def wider_d(t, dev):  # every row twice as wide: 4*(2d) or 2*(2d), a valid width for another d
    return torch.cat([t, t], 1)


def aligned(rows, columns, dev):
    """A zeroed uint8 [rows, columns] whose data pointer is 256-byte aligned (a contract §8 cache)."""
    return inputs.aligned_bytes((rows, columns), dev).zero_()


def blames(op, message, argument):
    """Does the message name `argument` before any other argument of the op? (A message that names
    several must put the one at fault first, as the contract's "argument: ..." does.)"""
    import inspect
    import re

    import references
    positions = {}
    for name in inspect.signature(getattr(references, op)).parameters:
        hit = re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message)
        if hit:
            positions[name] = hit.start()
    return argument in positions and min(positions, key=positions.get) == argument


_ = slice(None)
B = BadInput
BAD_INPUTS = [
    B("compress", "kv_score", "float64", "ring", arg(0, cast(torch.float64))),
    B("compress", "kv_score", "3-D", "ring", arg(0, lambda t, dev: t[None])),
    B("compress", "kv_score", "width not 4*d", "ring", arg(0, sliced(_, slice(0, -1)))),
    B("compress", "kv_score", "rows != sum(extend_lens)", "ring", arg(0, sliced(slice(0, -1)))),
    B("compress", "kv_score", "not contiguous", "ring", arg(0, lambda t, dev: t.t())),
    B("compress", "kv_score", "not a tensor", "ring", arg(0, value("kv"))),
    B("compress", "kv_score", "width 4*(2d): another d than ape and state", "ring", arg(0, wider_d)),
    B("compress", "kv_score", "width 2*(2d) at ratio 128: another d than ape and state", "online", arg(0, wider_d)),
    B("compress", "ape", "wrong shape", "ring", arg(1, sliced(_, slice(0, -1)))),
    B("compress", "ape", "float16", "ring", arg(1, cast(torch.float16))),
    B("compress", "ape", "on another device", "ring", arg(1, elsewhere)),
    B("compress", "ape", "[4, 4d]: another d than kv_score and state", "ring", arg(1, wider_d)),
    B("compress", "state", "rows of 4*(2d): another d than kv_score and ape", "ring",
      arg(2, lambda t, dev: torch.cat([t, t], 2))),
    B("compress", "state", "ring of 4 slots for ratio 4", "ring", arg(2, sliced(_, slice(0, 4)))),
    B("compress", "state", "float64", "ring", arg(2, cast(torch.float64))),
    B("compress", "state", "paged pages of 8 rows for ratio 4", "paged",
      arg(2, lambda t, dev: torch.zeros(t.shape[0], 8, t.shape[2], device=dev))),
    B("compress", "state", "online state of 2 fields", "online",
      arg(2, lambda t, dev: torch.zeros(t.shape[0], 2, t.shape[2], device=dev))),
    B("compress", "ratio", "ratio 8", "ring", kwarg("ratio", value(8))),
    B("compress", "ratio", "ratio 4.0 (float)", "ring", kwarg("ratio", value(4.0))),
    B("compress", "prefix_lens", "negative", "ring", kwarg("prefix_lens", i32(-1, 0))),
    B("compress", "extend_lens", "-1", "ring", kwarg("extend_lens", i32(8, -1))),
    B("compress", "prefix_lens", "int64", "ring", kwarg("prefix_lens", cast(torch.int64))),
    B("compress", "prefix_lens", "on another device", "ring", kwarg("prefix_lens", elsewhere)),
    B("compress", "extend_lens", "3 entries for 2 requests", "ring", kwarg("extend_lens", i32(7, 4, 0))),
    B("compress", "extend_lens", "negative", "ring", kwarg("extend_lens", i32(-8, -3))),
    B("compress", "mode", "unknown mode", "ring", kwarg("mode", value("ragged"))),
    B("compress", "mode", "online with ratio 4", "ring", kwarg("mode", value("online"))),
    B("compress", "state_rows", "missing in ring mode", "ring", kwarg("state_rows", value(None))),
    B("compress", "state_rows", "row past the state", "ring", kwarg("state_rows", i32(0, 4))),
    B("compress", "state_rows", "two requests on one row", "ring", kwarg("state_rows", i32(1, 1))),
    B("compress", "state_rows", "negative row", "ring", kwarg("state_rows", i32(-1, 1))),
    B("compress", "state_rows", "1 entry for 2 requests", "ring", kwarg("state_rows", i32(0))),
    B("compress", "state_rows", "row past the online state", "online", kwarg("state_rows", i32(3))),
    B("compress", "page_table", "given in ring mode", "ring",
      kwarg("page_table", lambda t, dev: torch.zeros(2, 4, dtype=torch.int32, device=dev))),
    B("compress", "page_table", "missing in paged mode", "paged", kwarg("page_table", value(None))),
    B("compress", "state_rows", "given in paged mode", "paged", kwarg("state_rows", i32(0, 1))),
    B("compress", "page_table", "page past the pool", "paged", item("page_table", (0, 0), 99)),
    B("compress", "page_table", "page = pool size", "paged", at_size("page_table", (0, 1), 2)),
    B("compress", "state_rows", "row = online state rows", "online", at_size("state_rows", 0, 2)),
    B("compress", "page_table", "-1 on a page the call must read", "paged", item("page_table", (0, 1), -1)),
    B("compress", "page_table", "page -2", "paged", item("page_table", (1, 0), -2)),
    B("compress", "page_table", "too few columns", "paged", kwarg("page_table", sliced(_, slice(0, 1)))),
    B("compress", "page_table", "1 row for 2 requests", "paged", kwarg("page_table", sliced(slice(0, 1)))),
    B("compress", "page_table", "a written page shared by two requests", "paged", page_written_by_two),
    B("compress", "plan", "made from other prefix_lens", "ring", plan_of(prefix_lens=i32(4, 0))),
    B("compress", "plan", "made from other extend_lens (same sum)", "ring", plan_of(extend_lens=i32(8, 3))),
    B("compress", "plan", "made from other state_rows", "ring", plan_of(state_rows=i32(2, 0))),
    B("compress", "plan", "made for ratio 128", "ring", plan_of(ratio=value(128))),
    B("compress", "plan", "made from another page table", "paged", plan_of(page_table=lambda t, dev: t.flip(0))),
    B("compress", "plan", "not a plan", "ring", kwarg("plan", value("plan"))),

    B("indexer_logits", "q_fp8", "float32", "indexer", arg(0, cast(torch.float32))),
    B("indexer_logits", "q_fp8", "head dim 64", "indexer", arg(0, sliced(_, _, slice(0, 64)))),
    B("indexer_logits", "q_fp8", "no heads", "indexer", arg(0, sliced(_, slice(0, 0)))),
    B("indexer_logits", "q_fp8", "2-D", "indexer", arg(0, lambda t, dev: t[0])),
    B("indexer_logits", "weights", "one head short", "indexer", arg(1, sliced(_, slice(0, -1)))),
    B("indexer_logits", "weights", "float64", "indexer", arg(1, cast(torch.float64))),
    B("indexer_logits", "weights", "on another device", "indexer", arg(1, elsewhere)),
    B("indexer_logits", "kv_cache", "rows of 8444 bytes", "indexer", arg(2, sliced(_, slice(0, -4)))),
    B("indexer_logits", "kv_cache", "int8", "indexer", arg(2, lambda t, dev: t.view(torch.int8))),
    B("indexer_logits", "context_lens", "1 entry for 2 requests", "indexer", arg(3, i32(70))),
    B("indexer_logits", "context_lens", "past max_context_len", "indexer", arg(3, i32(129, 3))),
    B("indexer_logits", "context_lens", "negative", "indexer", arg(3, i32(-1, 3))),
    B("indexer_logits", "block_table", "block past the cache", "indexer", item(4, (0, 1), 99)),
    B("indexer_logits", "block_table", "block = cache blocks", "indexer", at_size(4, (1, 0), 2)),
    B("indexer_logits", "block_table", "-2 on a needed block", "indexer", item(4, (1, 0), -2)),
    B("indexer_logits", "block_table", "-1 on a needed block", "indexer", item(4, (0, 0), -1)),
    B("indexer_logits", "block_table", "too few columns", "indexer", arg(4, sliced(_, slice(0, 1)))),
    B("indexer_logits", "block_table", "1 row for 2 requests", "indexer", arg(4, sliced(slice(0, 1)))),
    B("indexer_logits", "max_context_len", "negative", "indexer", kwarg("max_context_len", value(-1))),
    B("indexer_logits", "max_context_len", "float", "indexer", kwarg("max_context_len", value(128.0))),

    B("topk_indices", "logits", "float64", "topk", arg(0, cast(torch.float64))),
    B("topk_indices", "logits", "1-D", "topk", arg(0, lambda t, dev: t[0])),
    B("topk_indices", "logits", "NaN inside seq_len", "topk", item(0, (0, 3), float("nan"))),
    B("topk_indices", "logits", "NaN at the last column inside seq_len", "topk", item(0, (0, 29), float("nan"))),
    B("topk_indices", "seq_lens", "past the columns", "topk", arg(1, i32(41, 5))),
    B("topk_indices", "seq_lens", "negative", "topk", arg(1, i32(-3, 5))),
    B("topk_indices", "seq_lens", "-1", "topk", arg(1, i32(30, -1))),
    B("topk_indices", "seq_lens", "1 entry for 2 rows", "topk", arg(1, i32(30))),
    B("topk_indices", "seq_lens", "on another device", "topk", arg(1, elsewhere)),
    B("topk_indices", "page_table", "-1 on a needed page", "topk", item(2, (0, 1), -1)),
    B("topk_indices", "page_table", "page * page_size past int32", "topk", item(2, (0, 0), (2**31 - 1) // 16)),
    B("topk_indices", "page_table", "-2 on a needed page", "topk", item(2, (1, 0), -2)),
    B("topk_indices", "page_table", "too few columns", "topk", arg(2, sliced(_, slice(0, 1)))),
    B("topk_indices", "page_table", "int64", "topk", arg(2, cast(torch.int64))),
    B("topk_indices", "k", "k = 0", "topk", kwarg("k", value(0))),
    B("topk_indices", "k", "k as a string", "topk", kwarg("k", value("512"))),
    B("topk_indices", "page_size", "page_size = 0", "topk", kwarg("page_size", value(0))),
    B("topk_indices", "page_size", "page_size = -16", "topk", kwarg("page_size", value(-16))),
    B("topk_indices", "k", "k = -512", "topk", kwarg("k", value(-512))),

    B("sparse_attention_fp8", "q", "float32", "attention_fp8", arg(0, cast(torch.float32))),
    B("sparse_attention_fp8", "q", "head dim 448", "attention_fp8", arg(0, sliced(_, _, slice(0, 448)))),
    B("sparse_attention_fp8", "kv_cache", "int8", "attention_fp8", arg(1, lambda t, dev: t.view(torch.int8))),
    B("sparse_attention_fp8", "kv_cache", "viewed as float8_e4m3fn", "attention_fp8",
      arg(1, lambda t, dev: t.view(torch.float8_e4m3fn))),
    B("sparse_attention_fp8", "kv_cache", "page stride 584 * page_size + 8 (not a multiple of 16)", "attention_fp8",
      arg(1, lambda t, dev: aligned(t.shape[0], 584 * 2 + 8, dev))),
    B("sparse_attention_fp8", "kv_cache", "page stride below 584 * page_size", "attention_fp8",
      arg(1, lambda t, dev: aligned(t.shape[0], 576 * 2, dev))),
    B("sparse_attention_fp8", "kv_cache", "not contiguous", "attention_fp8", arg(1, lambda t, dev: t[:, :1168])),
    B("sparse_attention_fp8", "kv_cache", "data pointer 16 bytes past 256-byte alignment", "attention_fp8",
      arg(1, lambda t, dev: aligned(t.shape[0] * t.shape[1] + 16, 1, dev)[16:, 0].view(t.shape))),
    B("sparse_attention_fp8", "kv_cache", "no pages", "attention_fp8", arg(1, sliced(slice(0, 0)))),
    B("sparse_attention_fp8", "kv_cache", "on another device", "attention_fp8", arg(1, elsewhere)),
    B("sparse_attention_fp8", "indices", "slot = num_pages * page_size", "attention_fp8",
      lambda a, kw, dev: a[2].__setitem__((1, 3), a[1].shape[0] * kw["page_size"])),
    B("sparse_attention_fp8", "indices", "index -2", "attention_fp8", item(2, (0, 0), -2)),
    B("sparse_attention_fp8", "indices", "int64", "attention_fp8", arg(2, cast(torch.int64))),
    B("sparse_attention_fp8", "indices", "1 row for 2 query rows", "attention_fp8", arg(2, sliced(slice(0, 1)))),
    B("sparse_attention_fp8", "page_size", "3 (not a power of two)", "attention_fp8", kwarg("page_size", value(3))),
    B("sparse_attention_fp8", "page_size", "512", "attention_fp8", kwarg("page_size", value(512))),
    B("sparse_attention_fp8", "page_size", "0", "attention_fp8", kwarg("page_size", value(0))),
    B("sparse_attention_fp8", "page_size", "2.0 (float)", "attention_fp8", kwarg("page_size", value(2.0))),
    B("sparse_attention_fp8", "kv_cache", "page_size 4 on a cache of 2-slot pages", "attention_fp8",
      kwarg("page_size", value(4))),
    B("sparse_attention_fp8", "sm_scale", "NaN", "attention_fp8", kwarg("sm_scale", value(float("nan")))),
    B("sparse_attention_fp8", "attn_sink", "8 entries for 16 heads", "attention_fp8",
      kwarg("attn_sink", sliced(slice(0, 8)))),
    B("sparse_attention_fp8", "attn_sink", "float64", "attention_fp8", kwarg("attn_sink", cast(torch.float64))),

    B("sparse_attention", "q", "float32", "attention", arg(0, cast(torch.float32))),
    B("sparse_attention", "q", "head dim 256", "attention", arg(0, sliced(_, _, slice(0, 256)))),
    B("sparse_attention", "q", "no heads", "attention", arg(0, sliced(_, slice(0, 0)))),
    B("sparse_attention", "kv", "rows of 256", "attention", arg(1, sliced(_, slice(0, 256)))),
    B("sparse_attention", "kv", "float16", "attention", arg(1, cast(torch.float16))),
    B("sparse_attention", "kv", "on another device", "attention", arg(1, elsewhere)),
    B("sparse_attention", "indices", "index past kv", "attention", item(2, (1, 3), 10**6)),
    B("sparse_attention", "indices", "index -2", "attention", item(2, (0, 0), -2)),
    B("sparse_attention", "indices", "index = kv rows", "attention", at_size(2, (1, 7), 1)),
    B("sparse_attention", "indices", "index = kv rows in the last column", "attention", at_size(2, (0, -1), 1)),
    B("sparse_attention", "indices", "1 row for 2 query rows", "attention", arg(2, sliced(slice(0, 1)))),
    B("sparse_attention", "indices", "int64", "attention", arg(2, cast(torch.int64))),
    B("sparse_attention", "sm_scale", "0", "attention", kwarg("sm_scale", value(0.0))),
    B("sparse_attention", "sm_scale", "NaN", "attention", kwarg("sm_scale", value(float("nan")))),
    B("sparse_attention", "sm_scale", "inf", "attention", kwarg("sm_scale", value(float("inf")))),
    B("sparse_attention", "sm_scale", "negative", "attention", kwarg("sm_scale", value(-0.04))),
    B("sparse_attention", "sm_scale", "a tensor", "attention", kwarg("sm_scale", value(torch.tensor(0.1)))),
    B("sparse_attention", "attn_sink", "8 entries for 16 heads", "attention",
      kwarg("attn_sink", lambda t, dev: torch.zeros(8, device=dev))),
    B("sparse_attention", "attn_sink", "float64", "attention", kwarg("attn_sink", cast(torch.float64))),
    B("sparse_attention", "attn_sink", "on another device", "attention", kwarg("attn_sink", elsewhere)),
]


def build(bad: BadInput, device="cpu"):
    """(args, kwargs, state or None) of the bad call; the state is what must stay unwritten."""
    x = BASES[bad.base](device)
    a, kw = list(x.args), dict(x.kwargs)
    bad.mutate(a, kw, torch.device(device))
    written = ops.entry(bad.op).state
    state = a[written] if written is not None and isinstance(a[written], torch.Tensor) \
        and a[written].device.type != "meta" else None
    return a, kw, state


def names(op):
    """Stable case names per op: bad-<argument>-<n>."""
    counts, result = {}, []
    for bad in BAD_INPUTS:
        if bad.op == op:
            counts[bad.argument] = counts.get(bad.argument, 0) + 1
            result.append((f"bad-{bad.argument}-{counts[bad.argument]}", bad))
    return result
