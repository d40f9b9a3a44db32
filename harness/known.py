"""The ledger of known disagreements with the contract: failures that were seen, understood and
recorded, each with its reason and where it was seen. A failing (backend, case) whose op and
failure message match an entry is reported as "known" (the reason appended) instead of failing
the run; any other failure still fails, so a new disagreement is never hidden. An entry's message
pattern is a regular expression searched in the comparator's message: make it as narrow as the
disagreement (a bound on the error, the kind of state), so a worse failure does not match."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    backend: str  # registry name
    op: str
    message: str  # regular expression searched in the failure message
    reason: str
    seen: str  # package version, device and date


_TIES = ("with tied logits the selection changes between runs (each valid by the contract's tie rule, but not "
         "bitwise repeatable): which tied index a CTA keeps depends on the order its atomics land")

LEDGER = (
    Known("sglang", "compress", r"every difference lies in state the contract fixes but no later call reads",
          "SGLang writes only the state a later call reads: its ring keeps rows from the overlap block of the "
          "last emission on (the contract keeps the last min(W, length) positions), and its online kernel leaves a "
          "row as it was once the row's block closes (the block's next position resets it). Outputs agree.",
          "sglang 0.5.15, H200, 2026-11-30; still at sglang 0.5.23 (21 known in check --full), H200, 2026-12-01"),
    Known("sglang", "topk_indices", r"a second run gave different bits \(nondeterminism\)", _TIES,
          "sglang 0.5.15 topk_transform_512_v2, H200, 2026-11-30; sglang 0.5.23 topk_transform_paged_v2 (all-equal, "
          "heavy-ties, neg-inf-inside-seq-len, 65536-ties), H200, 2026-12-01"),
    Known("flashinfer", "topk_indices", r"a second run gave different bits \(nondeterminism\)", _TIES,
          "flashinfer-python 0.6.4, H200, 2026-11-30; flashinfer-python 0.7.4 (all-equal, heavy-ties, ties-at-the-cut, "
          "neg-inf-inside-seq-len, 65536-ties; its deterministic mode, backend flashinfer_deterministic, passes them), "
          "H200, 2026-12-01"),
)


def match(backend, op, message, ledger=None):
    """The ledger entry that explains this failure, or None."""
    for entry in LEDGER if ledger is None else ledger:
        if entry.backend == backend and entry.op == op and re.search(entry.message, message):
            return entry
    return None
