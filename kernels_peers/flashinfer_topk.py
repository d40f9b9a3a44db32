"""FlashInfer's `top_k_page_table_transform` (package `flashinfer-python`) as the SPEC's
`topk_indices`.

Loading: `flashinfer.topk` is imported without running `flashinfer/__init__` (0.7 imports every
kernel family there, some needing packages the harness's machines lack, such as cuda-tile and the
CUTLASS DSL): a stand-in package with the real folder, as for SGLang (_common.stand_in). Which API
the installed release has is read from the function's signature, not guessed from its version.

Layouts: FlashInfer >= 0.7 takes the SPEC's block table as it is (`page_size=`, a power of two;
slot = page_table[b, t // page_size] * page_size + t % page_size). FlashInfer 0.6 (and 0.7 at a
page size that is not a power of two) reads one physical slot per token ([B, L]): the adapter's
`topk_indices_plan` (SPEC 7: once per step) builds it from the block table for every token the table
covers. Rows with seq_len <= k come back as the first seq_len slots in order, then -1, as the SPEC
asks.

Backend options (DSV4_FLASHINFER_TOPK, FlashInfer >= 0.7; MODES): "auto" (FlashInfer's own dispatch:
on Hopper CUB's DeviceBatchedTopK where it judges it faster, else its radix kernels),
"deterministic" (its deterministic mode: the radix kernels with a reproducible selection and order;
CUB is never taken; also registered as the backend `flashinfer_deterministic`), "cub" and "native"
(FLASHINFER_TOPK_ALGO=cub / =default, set around the call: force one family). The clusters kernel
is SM100 only. Not mapped: 0.7's other DeepSeek kernels (fp8_paged_mqa_logits, dsa_sparse_attention,
dsa_indexer_det_topk, deepseek_v41_decode) run on SM100/103/107 only, with no Hopper path.

Declined, FlashInfer 0.6 only: a call that takes its multi-CTA radix path (float32 rows: k > 2048,
or L > 32768 with at most L / 16384 rows) while some row is longer than k but shorter than L. There
FlashInfer 0.6.4 gives each CTA of a row one chunk of the L columns, and a CTA whose chunk starts
past its row's length computes a negative (unsigned) chunk size: an illegal address that breaks
the CUDA context (seen on the H200 at 2 x 262144 with lengths 262144 and 100000, k = 2048, and at
2 x 65536 with a row of 20000; equal lengths ran at every size tried). The rule is conservative:
it also declines short rows that stay inside their first chunks. FlashInfer 0.7's kernel
(RadixTopKKernel_Unified in include/flashinfer/topk.cuh) gives such a CTA an empty chunk, so 0.7
runs these calls (read in its source; to be confirmed on the GPU).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import re
import sys

from harness import contract, plans
from kernels_peers._common import declining, stand_in, token_page_table, unavailable

FILTERED_MAX_K = 2048
MODES = {"auto": None, "deterministic": None, "cub": "cub", "native": "default"}  # -> FLASHINFER_TOPK_ALGO
MODE = os.environ.get("DSV4_FLASHINFER_TOPK", "auto")
ALGO_VARIABLE = "FLASHINFER_TOPK_ALGO"
FIXED_CHUNKS = (0, 7)  # the first release whose multi-CTA kernel clamps a chunk past the row's length

compress, indexer_logits, sparse_attention, sparse_attention_fp8 = declining(
    "FlashInfer", "compress", "indexer_logits", "sparse_attention", "sparse_attention_fp8")


def unavailable_reason(device):
    return unavailable(device, "flashinfer")


def version():
    """The installed flashinfer-python's (major, minor), or None."""
    try:
        return tuple(int(x) for x in re.findall(r"\d+", importlib.metadata.version("flashinfer-python"))[:2])
    except importlib.metadata.PackageNotFoundError:
        return None


def _load():
    """`flashinfer.topk`; where `flashinfer` is not imported yet, under a stand-in package (its
    `__init__` is not run)."""
    if "flashinfer" not in sys.modules:
        stand_in("flashinfer", path=importlib.util.find_spec("flashinfer").submodule_search_locations[0])
    return importlib.import_module("flashinfer.topk")


def _call(topk, algo, *args, **kwargs):
    """topk.top_k_page_table_transform with FLASHINFER_TOPK_ALGO = `algo` for this call only (FlashInfer
    reads its backend switch from the environment at each call; another backend in the process may
    want another)."""
    if algo is None:
        return topk.top_k_page_table_transform(*args, **kwargs)
    previous = os.environ.get(ALGO_VARIABLE)
    os.environ[ALGO_VARIABLE] = algo
    try:
        return topk.top_k_page_table_transform(*args, **kwargs)
    finally:
        if previous is None:
            del os.environ[ALGO_VARIABLE]
        else:
            os.environ[ALGO_VARIABLE] = previous


def _parameters(fn):
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: the 0.6 API
        return set()


def _multi_cta(rows, columns, k):
    """FlashInfer 0.6.4's choice for float32 logits (ShouldUseFilteredTopK, on a GPU with the
    shared memory for its filtered kernel)."""
    return k > FILTERED_MAX_K or columns <= k or (columns > 32768 and rows <= columns // 16384)


def _native_pages(page_size, parameters):
    """Whether FlashInfer reads the block table itself (0.7's page_size=, a power of two)."""
    return "page_size" in parameters and page_size & (page_size - 1) == 0


def topk_indices_plan(seq_lens, page_table, *, k=512, page_size=64, validate=True):
    """The table FlashInfer reads (the block table where it pages itself, else the per-token slot
    table for every token the block table covers), the page size to pass, and the host lengths the
    0.6 decline rule reads (so a planned call need not copy them)."""
    contract.check_topk_metadata(seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    parameters = _parameters(_load().top_k_page_table_transform)
    if _native_pages(page_size, parameters):
        table, pages = page_table.contiguous(), {"page_size": page_size}
    else:
        table, pages = token_page_table(page_table, page_size, page_table.shape[1] * page_size), {}
    old_chunks = (version() or FIXED_CHUNKS) < FIXED_CHUNKS
    return plans.make_plan("topk_indices", seq_lens.device, {"k": k, "page_size": page_size},
                           {"seq_lens": seq_lens, "page_table": page_table}, table=table, pages=pages,
                           parameters=parameters, lens=seq_lens.tolist() if old_chunks else None)


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True, plan=None, mode=None):
    """`mode`: one of MODES (default: DSV4_FLASHINFER_TOPK, else "auto")."""
    layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    mode = mode or MODE
    if mode not in MODES:
        raise contract.Unsupported(f"DSV4_FLASHINFER_TOPK={mode!r}: expected one of {', '.join(MODES)}")
    if plan is None:
        plan = topk_indices_plan(seq_lens, page_table, k=k, page_size=page_size, validate=False)
    else:
        plans.check_plan(plan, "topk_indices", logits.device, {"k": k, "page_size": page_size},
                         {"seq_lens": seq_lens, "page_table": page_table}, validate)
    options = dict(plan["pages"])
    if mode != "auto":
        if "deterministic" not in plan["parameters"]:
            raise contract.Unsupported(f"top-k mode {mode}: this FlashInfer (before 0.7) has one top-k dispatch, no "
                                       "deterministic mode and no backend switch")
        options["deterministic"] = mode == "deterministic"
    if plan["lens"] is not None and _multi_cta(layout.batch, layout.columns, k) and any(
            k < n < layout.columns for n in plan["lens"]):
        raise contract.Unsupported("a row longer than k but shorter than the logits on FlashInfer's multi-CTA "
                                   "path: FlashInfer 0.6.4 reads past it (illegal address)")
    # FlashInfer reads the table by its own row stride and only below each row's length, so a table
    # as wide as the block table covers serves logits of any width (its source checks that it is
    # contiguous, not its width)
    topk = sys.modules.get("flashinfer.topk") or _load()
    return _call(topk, MODES[mode], logits, plan["table"], seq_lens, k, **options)
