"""One entry per op: what the harness knows about an op beyond its contract section (docs/contract.md),
its validator (contract.py) and its float64 reference (references/).

`check`, `bench`, the case catalogue, the CLI and the roofline reach an op only through its entry,
so a new op is one entry here plus its section, validator, reference, cases, bad inputs and kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from harness import comparators, fuzz, inputs, roofline


@dataclass(frozen=True)
class Op:
    name: str
    # inputs of a catalogue case: build(seed=, device=, tier=, **case params) -> inputs.OpInputs
    build: Callable
    # names of the op's return values, in the order it returns them
    outputs: tuple
    # the positional argument the op updates in place, reported as output "state"; None: every input
    # is read-only
    state: int | None
    # compare(x, got, ref) -> comparators.Comparison: a backend's named outputs against the reference's on inputs x
    compare: Callable
    # work(x) -> roofline.Work: the fewest bytes and the flops of the case's call, for the roofline
    work: Callable
    # fuzz(random.Random) -> case params; shrink(params, add) proposes smaller params (fuzz.py)
    fuzz: Callable
    shrink: Callable
    # the calls a case makes on inputs x, as [(args, kwargs)]; None: one call with x's arguments
    calls: Callable | None = None
    # a rerun must return the same set per row, in any order (top-k), rather than the same bits
    rows_any_order: bool = False
    # with a plan and validate=False, a CUDA graph can capture the case's calls (contract section 7)
    graph_capturable: bool = True
    # how the comparator judges, for summaries, where it reports no error metric
    rule: str = ""

    def named_outputs(self, x, results):
        """The outputs of a case's calls by name: each return value (a chain's joined along its rows),
        then the state after the last call where the op writes one."""
        per_call = [r if isinstance(r, tuple) else (r,) for r in results]
        named = {name: values[0] if len(values) == 1 else torch.cat(values)
                 for name, *values in zip(self.outputs, *per_call)}
        if self.state is not None:
            named["state"] = x.args[self.state]
        return named


def _one_call(x):
    return [(tuple(x.args), dict(x.kwargs))]


# ---------------------------------------------------------------------------------------------
# compress: a case may be a chain of calls on one state


def _compress_calls(x):
    """One call, or a chain's steps (each step's kv_score and lengths built here, before any call,
    so that one CUDA graph can capture the calls)."""
    if len(x.extra["steps"]) <= 1:
        return _one_call(x)
    kv, ape, state = x.args
    kw = {k: v for k, v in x.kwargs.items() if k not in ("prefix_lens", "extend_lens")}
    return [((step_kv, ape, state), {**kw, "prefix_lens": p, "extend_lens": e})
            for step_kv, p, e in inputs.compress_steps(x, x.extra["steps"])]


def _compare_compress(x, got, ref):
    """The output, and the state the contract fixes after the chain (free slots ignored)."""
    kw = x.kwargs
    totals = [a + b for a, b in zip(kw["prefix_lens"].tolist(), kw["extend_lens"].tolist())]
    where = (x.args[2].shape, kw["mode"], kw["ratio"], totals, kw.get("state_rows"), kw.get("page_table"))
    return comparators.compress(got, ref, mode=kw["mode"], kept=comparators.compress_kept_slots(*where),
                                read_later=comparators.compress_read_later(*where))


def _compare_topk(x, got, ref):
    logits, seq_lens, table = x.args
    return comparators.topk_indices(got, ref, logits=logits, seq_lens=seq_lens, page_table=table, **x.kwargs)


ENTRIES = {op.name: op for op in (
    Op("compress", inputs.compress_case, outputs=("out",), state=2, compare=_compare_compress,
       work=roofline.compress_work, fuzz=fuzz.fuzz_compress, shrink=fuzz.shrink_compress, calls=_compress_calls),
    Op("indexer_logits", inputs.indexer_case, outputs=("logits",), state=None,
       compare=lambda x, got, ref: comparators.indexer_logits(got, ref), work=roofline.indexer_logits_work,
       fuzz=fuzz.fuzz_indexer_logits, shrink=fuzz.shrink_indexer_logits),
    Op("topk_indices", inputs.topk_case, outputs=("indices",), state=None, compare=_compare_topk,
       work=roofline.topk_indices_work, fuzz=fuzz.fuzz_topk_indices, shrink=fuzz.shrink_topk_indices,
       rows_any_order=True, rule="tie rule"),
    Op("sparse_attention", inputs.attention_case, outputs=("out", "lse"), state=None,
       compare=lambda x, got, ref: comparators.sparse_attention(got, ref), work=roofline.sparse_attention_work,
       fuzz=fuzz.fuzz_sparse_attention, shrink=fuzz.shrink_sparse_attention),
    Op("sparse_attention_fp8", inputs.attention_fp8_case, outputs=("out", "lse"), state=None,
       compare=lambda x, got, ref: comparators.sparse_attention_fp8(got, ref),
       work=roofline.sparse_attention_fp8_work, fuzz=fuzz.fuzz_sparse_attention_fp8,
       shrink=fuzz.shrink_sparse_attention_fp8),
)}


def entry(op) -> Op:
    """The entry of an op by name; KeyError naming it for an op the harness does not know."""
    try:
        return ENTRIES[op]
    except KeyError:
        raise KeyError(f"no op named {op!r} (known: {', '.join(ENTRIES)})") from None


def calls(op, x):
    """The calls a case of `op` makes on inputs x, as [(args, kwargs)]."""
    e = entry(op)
    return e.calls(x) if e.calls else _one_call(x)
