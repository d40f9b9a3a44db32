"""The kernel contract of docs/contract.md: layout constants and the one validator per op.

Every backend calls ``check_<op>`` before it launches anything, so bad input gets the same
``InputError`` (a ``ValueError`` naming the argument) from every backend, and nothing is written
before it. Checks that must read device data (lengths, tables, indices) run only with
``validate=True``; they copy the small integer tensors to the host once.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch

OPS = ("compress", "indexer_logits", "topk_indices", "sparse_attention", "sparse_attention_fp8")

# compress (contract §1)
RATIOS = (4, 128)
MODES = ("ring", "paged", "online")
RING_WIDTH = {4: 8, 128: 128}  # positions a ring row keeps
ROW_WIDTH_FACTOR = {4: 4, 128: 2}  # E = factor * d: [kv_ov|kv_cur|sc_ov|sc_cur] or [kv|sc]
APE_SHAPE = {4: lambda d: (4, 2 * d), 128: lambda d: (128, d)}
ONLINE_FIELDS = 3  # running max m, running sum s, running normalised mean v

# indexer logits (contract §2)
INDEXER_DIM = 128
INDEXER_BLOCK = 64  # compressed entries per cache block
INDEXER_KEY_BYTES = INDEXER_BLOCK * INDEXER_DIM  # e4m3 keys, entry-major, first
INDEXER_BLOCK_BYTES = INDEXER_BLOCK * (INDEXER_DIM + 4)  # then 64 float32 scales
FP8_MAX = 448.0  # largest finite float8_e4m3fn

# top-k (contract §3)
TOPK_SUPPORTED_K = (512, 1024, 2048)  # what kernels must support; the reference takes any k >= 1

# sparse attention (contract §4)
ATTN_DIM = 512

# sparse attention over the FP8 cache (contract §8): per token 448 e4m3 dims then 64 bf16 RoPE dims
# (576 bytes, at 576 * o in the page), and after the page's records 8 bytes per token at
# 576 * page_size + 8 * o: 7 ue8m0 scales (one per 64 dims of the e4m3 part) and a byte no one reads
FP8_KV_NOPE = 448  # dims stored as e4m3
FP8_KV_ROPE = ATTN_DIM - FP8_KV_NOPE  # dims stored as bf16
FP8_KV_TILE = 64  # dims per scale
FP8_KV_SCALES = FP8_KV_NOPE // FP8_KV_TILE  # 7
FP8_KV_ROW_BYTES = FP8_KV_NOPE + 2 * FP8_KV_ROPE  # 576
FP8_KV_SCALE_BYTES = 8  # 7 scales and an unspecified byte
FP8_KV_TOKEN_BYTES = FP8_KV_ROW_BYTES + FP8_KV_SCALE_BYTES  # 584
FP8_KV_SCALE_BIAS = 127  # ue8m0: scale = 2 ** (byte - 127)
FP8_KV_MAX_PAGE_SIZE = 256
FP8_KV_STRIDE_MULTIPLE = 16  # page stride in bytes
FP8_KV_ALIGN = 256  # bytes, the cache's data pointer

INT32_MAX = 2**31 - 1


class InputError(ValueError):
    """Invalid input to an op. ``argument`` names the offending argument."""

    def __init__(self, argument: str, message: str):
        super().__init__(f"{argument}: {message}")
        self.argument = argument


class Unsupported(NotImplementedError):
    """Valid input that a backend does not implement (a peer kernel's limits: heads, k, an op it
    lacks). Raised after validation; the harness reports the case as skipped with this reason."""


# ---------------------------------------------------------------------------------------------
# small building blocks


def _tensor(name, x, dtype, ndim, device=None):
    if not isinstance(x, torch.Tensor):
        raise InputError(name, f"expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype != dtype:
        raise InputError(name, f"expected dtype {dtype}, got {x.dtype}")
    if x.dim() != ndim:
        raise InputError(name, f"expected {ndim} dimensions, got shape {tuple(x.shape)}")
    if device is not None and x.device != device:
        raise InputError(name, f"expected device {device} (the device of the first tensor), got {x.device}")
    if not x.is_contiguous():
        raise InputError(name, "expected a contiguous tensor")
    return x


def _shape(name, x, expected):
    if tuple(x.shape) != tuple(expected):
        raise InputError(name, f"expected shape {tuple(expected)}, got {tuple(x.shape)}")


def _int(name, value, minimum=None, choices=None, maximum=INT32_MAX):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # Python or NumPy integers
        raise InputError(name, f"expected an int, got {type(value).__name__}")
    value = int(value)
    if choices is not None and value not in choices:
        raise InputError(name, f"expected one of {choices}, got {value}")
    if minimum is not None and value < minimum:
        raise InputError(name, f"expected an int >= {minimum}, got {value}")
    if value > maximum:
        raise InputError(name, f"expected an int <= {maximum}, got {value}")
    return value


def _host(x):
    return x.detach().cpu().tolist()


def _host_table(x):
    """A 2-D int tensor as an int64 NumPy array (tables hold millions of entries at 1M tokens)."""
    return x.detach().cpu().numpy().astype(np.int64)


def _range(name, values, lo, hi, what="value", row=None):
    """All of ``values`` lie in [lo, hi]: a list or 1-D array (row ``row`` of a 2-D argument if
    given) or a 2-D array. Vectorised; the message names the first value out of range."""
    arr = np.asarray(values, dtype=np.int64)
    bad = np.argwhere((arr < lo) | (arr > hi))
    if len(bad):
        at = tuple(int(i) for i in bad[0])
        where = at if row is None else (row, *at)
        index = ", ".join(str(i) for i in where)
        raise InputError(name, f"{name}[{index}] = {int(arr[at])}, expected {lo} <= {what} <= {hi}")


def _queries(name, q, dtype, dim):
    """A [B, H, dim] query tensor with at least one head; returns (B, H)."""
    _tensor(name, q, dtype, 3)
    batch, heads, got = q.shape
    if got != dim:
        raise InputError(name, f"expected head dim {dim}, got shape {tuple(q.shape)}")
    if heads == 0:
        raise InputError(name, "expected at least one head")
    return batch, heads


def _lengths_and_table(lens_name, lens, table_name, table):
    """An int32 [B] length per request and an int32 [B, columns] table on the lengths' device; B."""
    _tensor(lens_name, lens, torch.int32, 1)
    batch = lens.shape[0]
    _tensor(table_name, table, torch.int32, 2, lens.device)
    if table.shape[0] != batch:
        raise InputError(table_name, f"expected {batch} rows (one per request), got {table.shape[0]}")
    return batch


def cdiv(a, b):
    return -(-a // b)


# ---------------------------------------------------------------------------------------------
# compress


def compress_emitted(ratio, prefix_len, extend_len):
    """The entries j emitted by one request's call: those with r*j + r - 1 in the new positions."""
    return range(prefix_len // ratio, (prefix_len + extend_len) // ratio)


def compress_state_reads(ratio, prefix_len, extend_len):
    """Positions one request reads from the state (ring or paged): the part of the first emitted
    entry's window that lies before the prefix. Empty when the call emits nothing."""
    emitted = compress_emitted(ratio, prefix_len, extend_len)
    if len(emitted) == 0:
        return range(0)
    j = emitted[0]
    window_start = ratio * j - 4 if ratio == 4 else ratio * j  # C4 also reads block j-1 (overlap)
    return range(max(0, window_start), prefix_len)


@dataclass(frozen=True)
class CompressLayout:
    ratio: int
    mode: str
    d: int  # compressed head dim
    width: int  # E, the raw row width
    batch: int
    # host copies of the lengths; None when validate=False (the caller reads them when it must)
    prefix_lens: list | None
    extend_lens: list | None


@dataclass(frozen=True)
class CompressMetadata:
    """The metadata of a compress call as checked: host copies of the lengths (and of the state rows
    or page table) when validated, else None."""
    ratio: int
    mode: str
    batch: int
    prefix_lens: list | None
    extend_lens: list | None
    state_rows: list | None
    page_table: np.ndarray | None


def check_compress_metadata(prefix_lens, extend_lens, *, ratio, mode, state_rows=None, page_table=None,
                            validate=True, device=None) -> CompressMetadata:
    """What compress's metadata arguments allow on their own (the planner's checks, contract §7): dtypes,
    shapes, one device, and with validate the lengths, distinct state rows and the pages the call
    reads or writes. Checks against the per-layer tensors (rows of kv_score, sizes of the state) are
    check_compress's."""
    ratio = _int("ratio", ratio, choices=RATIOS)
    if mode not in MODES:
        raise InputError("mode", f"expected one of {MODES}, got {mode!r}")
    if mode == "online" and ratio != 128:
        raise InputError("mode", "online mode exists for ratio 128 only")
    _tensor("prefix_lens", prefix_lens, torch.int32, 1, device)
    device = prefix_lens.device
    batch = prefix_lens.shape[0]
    _tensor("extend_lens", extend_lens, torch.int32, 1, device)
    _shape("extend_lens", extend_lens, (batch,))
    if mode == "paged":
        if state_rows is not None:
            raise InputError("state_rows", "is for ring and online modes; paged mode takes page_table")
        if page_table is None:
            raise InputError("page_table", "is required in paged mode")
        _tensor("page_table", page_table, torch.int32, 2, device)
        if page_table.shape[0] != batch:
            raise InputError("page_table", f"expected {batch} rows (one per request), got {page_table.shape[0]}")
    else:
        if page_table is not None:
            raise InputError("page_table", f"is for paged mode; {mode} mode takes state_rows")
        if state_rows is None:
            raise InputError("state_rows", f"is required in {mode} mode")
        _tensor("state_rows", state_rows, torch.int32, 1, device)
        _shape("state_rows", state_rows, (batch,))
    if not validate:
        return CompressMetadata(ratio, mode, batch, None, None, None, None)

    prefix, extend = _host(prefix_lens), _host(extend_lens)
    _range("prefix_lens", prefix, 0, INT32_MAX)
    _range("extend_lens", extend, 0, INT32_MAX)
    for b in range(batch):
        if prefix[b] + extend[b] > INT32_MAX:
            raise InputError("extend_lens", f"request {b}: prefix + extend exceeds int32 positions")
    rows = table = None
    if mode == "paged":
        table = _host_table(page_table)
        _check_compress_pages(ratio, table, prefix, extend)
    else:
        rows = _host(state_rows)
        _range("state_rows", rows, 0, INT32_MAX, "row of state")
        if len(set(rows)) != len(rows):
            raise InputError("state_rows", "two requests share a state row")
    return CompressMetadata(ratio, mode, batch, prefix, extend, rows, table)


def _compress_head_dim(ratio, mode, kv_score, ape, state):
    """d, from the arguments that agree on it: kv_score's width (factor * d), ape's (ratio 4: 2d, 128:
    d) and the state's (E or online d). One that disagrees with the other two is the one named; when
    no two agree, kv_score's width decides (and the first other argument off it is named)."""
    factor = ROW_WIDTH_FACTOR[ratio]
    width = kv_score.shape[1]
    from_kv = width // factor if width and width % factor == 0 else None
    ape_width = ape.shape[1] if ape.shape[0] == APE_SHAPE[ratio](1)[0] else None
    from_ape = ape_width if ratio == 128 else (ape_width // 2 if ape_width and ape_width % 2 == 0 else None)
    state_width = state.shape[2]
    from_state = state_width if mode == "online" else (state_width // factor if state_width % factor == 0 else None)
    from_ape, from_state = from_ape or None, from_state or None
    if from_ape is not None and from_ape == from_state and from_kv != from_ape:
        raise InputError("kv_score", f"ratio {ratio} rows are {factor}*d wide and ape {tuple(ape.shape)} and state "
                                     f"{tuple(state.shape)} agree on d = {from_ape}, so width {factor * from_ape} "
                                     f"is expected; got width {width}")
    if from_kv is None:
        raise InputError("kv_score", f"ratio {ratio} rows are {factor}*d wide, got width {width}")
    if from_state == from_kv and from_ape != from_kv:
        raise InputError("ape", f"expected shape {APE_SHAPE[ratio](from_kv)} (d = {from_kv}: kv_score's width "
                                f"{width} and the state {tuple(state.shape)} agree), got {tuple(ape.shape)}")
    return from_kv


def check_compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None,
                   page_table=None, validate=True) -> CompressLayout:
    _tensor("kv_score", kv_score, torch.float32, 2)
    device = kv_score.device
    meta = check_compress_metadata(prefix_lens, extend_lens, ratio=ratio, mode=mode, state_rows=state_rows,
                                   page_table=page_table, validate=validate, device=device)
    ratio, batch = meta.ratio, meta.batch
    _tensor("ape", ape, torch.float32, 2, device)
    _tensor("state", state, torch.float32, 3, device)
    d = _compress_head_dim(ratio, mode, kv_score, ape, state)
    factor = ROW_WIDTH_FACTOR[ratio]
    width = factor * d
    _shape("ape", ape, APE_SHAPE[ratio](d))
    if mode == "paged":
        if tuple(state.shape[1:]) != (ratio, width):
            raise InputError("state", f"paged state is [pages, {ratio}, {width}], got {tuple(state.shape)}")
    else:
        row_shape = (RING_WIDTH[ratio], width) if mode == "ring" else (ONLINE_FIELDS, d)
        if tuple(state.shape[1:]) != row_shape:
            raise InputError("state", f"{mode} state is [rows, {row_shape[0]}, {row_shape[1]}], "
                                      f"got {tuple(state.shape)}")

    if not validate:
        return CompressLayout(ratio, mode, d, width, batch, None, None)

    prefix, extend = meta.prefix_lens, meta.extend_lens
    if sum(extend) != kv_score.shape[0]:
        raise InputError("kv_score", f"expected sum(extend_lens) = {sum(extend)} rows, got {kv_score.shape[0]}")
    if mode == "paged":
        _range("page_table", meta.page_table, -1, state.shape[0] - 1, "page of state")
    else:
        _range("state_rows", meta.state_rows, 0, state.shape[0] - 1, "row of state")
    return CompressLayout(ratio, mode, d, width, batch, prefix, extend)


def _check_compress_pages(ratio, table, prefix, extend):
    """Pages read must be present; a page written belongs to one (request, block) only."""
    max_blocks = table.shape[1]
    _range("page_table", table, -1, INT32_MAX, "page")
    owners = {}  # page -> {(request, block)} over every page the call touches
    written = set()
    for b, row in enumerate(table):
        read_blocks = {p // ratio for p in compress_state_reads(ratio, prefix[b], extend[b])}
        write_blocks = {p // ratio for p in range(prefix[b], prefix[b] + extend[b])}
        last = max(read_blocks | write_blocks, default=-1)
        if last >= max_blocks:
            raise InputError("page_table", f"request {b} uses block {last} but the table has {max_blocks} columns")
        for blk in sorted(read_blocks):
            if row[blk] < 0:
                raise InputError("page_table", f"request {b} must read block {blk} (positions "
                                               f"{blk * ratio}..{blk * ratio + ratio - 1}) but its page is -1")
        for blk in read_blocks | write_blocks:
            if row[blk] >= 0:
                owners.setdefault(int(row[blk]), set()).add((b, blk))
        written.update(int(row[blk]) for blk in write_blocks if row[blk] >= 0)
    for page in sorted(written):
        if len(owners[page]) > 1:
            users = ", ".join(f"request {b} block {blk}" for b, blk in sorted(owners[page]))
            raise InputError("page_table", f"page {page} is written by this call and also used by {users}")


# ---------------------------------------------------------------------------------------------
# indexer logits


@dataclass(frozen=True)
class IndexerLayout:
    batch: int
    heads: int
    context_lens: list | None


def check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len,
                         validate=True) -> IndexerLayout:
    batch, heads = _queries("q_fp8", q_fp8, torch.float8_e4m3fn, INDEXER_DIM)
    device = q_fp8.device
    _tensor("weights", weights, torch.float32, 2, device)
    _shape("weights", weights, (batch, heads))
    _tensor("kv_cache", kv_cache, torch.uint8, 2, device)
    if kv_cache.shape[1] != INDEXER_BLOCK_BYTES:
        raise InputError("kv_cache", f"expected [num_blocks, {INDEXER_BLOCK_BYTES}] "
                                     f"(64 x 128 e4m3 keys then 64 float32 scales), got {tuple(kv_cache.shape)}")
    _shape("context_lens", _tensor("context_lens", context_lens, torch.int32, 1, device), (batch,))
    lens = check_indexer_metadata(context_lens, block_table, max_context_len=max_context_len, validate=validate)
    if not validate:
        return IndexerLayout(batch, heads, None)
    table = _host_table(block_table)
    for b, n in enumerate(lens):
        _range("block_table", table[b][:cdiv(n, INDEXER_BLOCK)], 0, kv_cache.shape[0] - 1, "block of kv_cache", row=b)
    return IndexerLayout(batch, heads, lens)


def check_indexer_metadata(context_lens, block_table, *, max_context_len, validate=True):
    """What the indexer's metadata allows on its own (its planner's checks, contract §7); the blocks
    against the cache's size are check_indexer_logits'. Host context lengths when validated."""
    _lengths_and_table("context_lens", context_lens, "block_table", block_table)
    _int("max_context_len", max_context_len, minimum=0)
    if not validate:
        return None
    lens = _host(context_lens)
    max_blocks = block_table.shape[1]
    over = [b for b, n in enumerate(lens) if n > max_context_len]
    if over:
        raise InputError("context_lens", f"context_lens[{over[0]}] = {lens[over[0]]} exceeds max_context_len = "
                                         f"{max_context_len} (the logits' width): raise max_context_len to at "
                                         f"least {max(lens)} or shorten the context")
    _range("context_lens", lens, 0, max_context_len, "context_len")
    table = _host_table(block_table)
    for b, n in enumerate(lens):
        needed = cdiv(n, INDEXER_BLOCK)
        if needed > max_blocks:
            raise InputError("block_table", f"request {b} has {n} entries = {needed} blocks, "
                                            f"but the table has {max_blocks} columns")
        _range("block_table", table[b][:needed], 0, INT32_MAX, "block of kv_cache", row=b)
    return lens


# ---------------------------------------------------------------------------------------------
# top-k


@dataclass(frozen=True)
class TopkLayout:
    batch: int
    columns: int
    seq_lens: list | None


def check_topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True) -> TopkLayout:
    _tensor("logits", logits, torch.float32, 2)
    device = logits.device
    batch, columns = logits.shape
    _shape("seq_lens", _tensor("seq_lens", seq_lens, torch.int32, 1, device), (batch,))
    _tensor("page_table", page_table, torch.int32, 2, device)
    _int("k", k, minimum=1)
    _int("page_size", page_size, minimum=1)
    if validate:
        _range("seq_lens", _host(seq_lens), 0, columns, "seq_len (columns of logits)")
    lens = check_topk_metadata(seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    if not validate:
        return TopkLayout(batch, columns, None)
    if batch and columns:  # rows on the long path (seq_len > k) are compared, so no NaN may be there
        read = (torch.arange(columns, device=device)[None, :] < seq_lens[:, None]) & (seq_lens[:, None] > k)
        bad = torch.isnan(logits) & read
        if bool(bad.any()):
            b, t = (int(i) for i in bad.nonzero()[0])
            raise InputError("logits", f"NaN at row {b}, column {t}, inside seq_lens[{b}] = {lens[b]}")
    return TopkLayout(batch, columns, lens)


def check_topk_metadata(seq_lens, page_table, *, k=512, page_size=64, validate=True):
    """What top-k's metadata allows on its own (its planner's checks, contract §7); seq_lens against the
    logits' width is check_topk_indices'. Host seq_lens when validated."""
    _lengths_and_table("seq_lens", seq_lens, "page_table", page_table)
    _int("k", k, minimum=1)
    _int("page_size", page_size, minimum=1)
    if not validate:
        return None
    lens = _host(seq_lens)
    _range("seq_lens", lens, 0, INT32_MAX, "seq_len")
    table = _host_table(page_table)
    max_pages = page_table.shape[1]
    for b, n in enumerate(lens):
        needed = cdiv(n, page_size)
        if needed > max_pages:
            raise InputError("page_table", f"request {b} has {n} columns = {needed} pages, "
                                           f"but the table has {max_pages} columns")
        _range("page_table", table[b][:needed], 0, INT32_MAX // page_size - 1,
               "page (needed: the first ceil(seq_len/page_size) pages)", row=b)
    return lens


# ---------------------------------------------------------------------------------------------
# sparse attention


@dataclass(frozen=True)
class AttentionLayout:
    batch: int
    heads: int
    topk: int  # K, indices per row


def check_sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True) -> AttentionLayout:
    batch, heads = _queries("q", q, torch.bfloat16, ATTN_DIM)
    device = q.device
    _tensor("kv", kv, torch.bfloat16, 2, device)
    if kv.shape[1] != ATTN_DIM:
        raise InputError("kv", f"expected [N, {ATTN_DIM}], got {tuple(kv.shape)}")
    _attention_rest(indices, sm_scale, attn_sink, validate, batch=batch, heads=heads, device=device,
                    rows=kv.shape[0], rows_are="rows of kv")
    return AttentionLayout(batch, heads, indices.shape[1])


def _attention_rest(indices, sm_scale, attn_sink, validate, *, batch, heads, device, rows, rows_are):
    """What both attention ops share: indices int32 [batch, K] within [-1, rows) (when validated),
    sm_scale a finite float > 0, attn_sink float32 [heads] or None."""
    _tensor("indices", indices, torch.int32, 2, device)
    if indices.shape[0] != batch:
        raise InputError("indices", f"expected {batch} rows (one per query row), got {indices.shape[0]}")
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, numbers.Real) or not math.isfinite(sm_scale) \
            or sm_scale <= 0:
        raise InputError("sm_scale", f"expected a finite float > 0, got {sm_scale!r}")
    if attn_sink is not None:
        _tensor("attn_sink", attn_sink, torch.float32, 1, device)
        _shape("attn_sink", attn_sink, (heads,))
    if validate and indices.numel():
        lo, hi = int(indices.min()), int(indices.max())
        if lo < -1 or hi >= rows:
            bad = ((indices < -1) | (indices >= rows)).nonzero()[0]
            b, i = int(bad[0]), int(bad[1])
            raise InputError("indices", f"indices[{b}, {i}] = {int(indices[b, i])}, expected -1 <= index < "
                                        f"{rows} ({rows_are})")


# ---------------------------------------------------------------------------------------------
# sparse attention over the FP8 cache


@dataclass(frozen=True)
class AttentionFp8Layout:
    batch: int
    heads: int
    topk: int  # K, indices per row
    num_pages: int
    page_size: int
    page_stride: int  # bytes

    @property
    def slots(self):
        return self.num_pages * self.page_size


def fp8_kv_page_stride(page_size):
    """The page stride the engines use: 584 bytes a token rounded up to a multiple of 576."""
    return cdiv(FP8_KV_TOKEN_BYTES * page_size, FP8_KV_ROW_BYTES) * FP8_KV_ROW_BYTES


def check_sparse_attention_fp8(q, kv_cache, indices, *, page_size, sm_scale, attn_sink=None,
                               validate=True) -> AttentionFp8Layout:
    batch, heads = _queries("q", q, torch.bfloat16, ATTN_DIM)
    device = q.device
    page_size = _int("page_size", page_size, minimum=1, maximum=FP8_KV_MAX_PAGE_SIZE)
    if page_size & (page_size - 1):
        raise InputError("page_size", f"expected a power of two <= {FP8_KV_MAX_PAGE_SIZE}, got {page_size}")
    _tensor("kv_cache", kv_cache, torch.uint8, 2, device)
    num_pages, stride = kv_cache.shape
    if num_pages < 1:
        raise InputError("kv_cache", f"expected at least one page, got shape {tuple(kv_cache.shape)}")
    if stride % FP8_KV_STRIDE_MULTIPLE or stride < FP8_KV_TOKEN_BYTES * page_size:
        raise InputError("kv_cache", f"expected a page stride that is a multiple of {FP8_KV_STRIDE_MULTIPLE} "
                                     f"and >= {FP8_KV_TOKEN_BYTES} * page_size = {FP8_KV_TOKEN_BYTES * page_size} "
                                     f"bytes, got {stride}")
    if kv_cache.data_ptr() % FP8_KV_ALIGN:
        raise InputError("kv_cache", f"expected a data pointer aligned to {FP8_KV_ALIGN} bytes, "
                                     f"got one {kv_cache.data_ptr() % FP8_KV_ALIGN} bytes past it")
    if num_pages * page_size > INT32_MAX:
        raise InputError("kv_cache", f"{num_pages} pages x {page_size} slots exceed int32 slot ids")
    _attention_rest(indices, sm_scale, attn_sink, validate, batch=batch, heads=heads, device=device,
                    rows=num_pages * page_size, rows_are="num_pages * page_size slots of kv_cache")
    return AttentionFp8Layout(batch, heads, indices.shape[1], num_pages, page_size, stride)
