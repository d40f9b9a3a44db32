"""SGLang's DeepSeek-V4 kernels (package `sglang`, compiled at first use through apache-tvm-ffi) as the
SPEC's `compress` and `topk_indices`.

Loading: importing all of `sglang` needs its whole serving stack, so `_load` imports only the
launchers, with light stand-ins for the packages above them. Two layouts, told apart by the folder
the installed package has (LAYOUTS):
- "kernels" (0.5.2x, e.g. 0.5.23): launchers in `sglang/kernels/ops/attention/dsv4`, JIT machinery in
  `sglang/kernels/jit` (which needs `msgspec`). Stand-ins: the `__init__`s of `sglang`, `sglang.kernels`,
  `.ops`, `.ops.attention` and `.dsv4` (each imports every kernel), `sglang.srt.utils` (the serving
  stack's utilities; the launchers want is_hip / is_xpu / is_gfx95_supported / is_cuda, all answered
  for a CUDA build) and `sglang.srt.layers.attention.dsa.utils` (two names for the fused norm-rope
  store, which this adapter does not call). `sglang.srt.environ` is the real one (standard library).
- "jit_kernel" (0.5.15): launchers in `sglang/jit_kernel/dsv4`; stand-ins for `sglang`, `sglang.utils`
  (the JIT helpers want `is_in_ci`) and `sglang.jit_kernel.dsv4`.
Both releases compress with the same v2 kernels (c4_v2.cuh, c128_v2.cuh, c128_online_v2.cuh: 0.5.15's
`compress.py` already launched them; its v1 ones were in `compress_old.py`, gone in 0.5.2x) and the
same plan builders; only the launchers' names and places differ (TOPK_NAMES).

compress, three SPEC modes onto SGLang's plans (decode and prefill kernels, C4 and C128):
- ring: SGLang's legacy ring buffer is the SPEC's ring seen as pages (C4: [S*2, 4, 4d], two pages
  of 4 positions per request, slot p % 8; C128: [S, 128, 2d]); `state_rows` are its request
  indices. SGLang writes only the rows a later emission reads (from the overlap block of the last
  emission on), where the SPEC keeps the last min(W, length) positions: the harness's state check
  shows where that differs. With DSV4_SGLANG_RING_PLAN=swa (0.5.2x) the same ring comes from the
  plan builders SGLang's engine runs (CompressorDecodePlan.generate / CompressorPrefillPlan.generate,
  a ring per request: C4 with use_req_ring and ring_size 8, which 0.5.23 takes with a unified KV
  pool; C128 with ring_size 128), instead of the legacy builders (generate_legacy, the default).
- paged (C4 only): SGLang's SWA-paged plans with one position per slot: req_to_token holds the
  SPEC's slot of every position (page_table[b, p // 4] * 4 + p % 4), full_to_state is the
  identity, and swa_page_size = ring_size = 4 make the state slot that slot (and make the prefill
  plan write every new row, as the SPEC asks). Declined where a block the call touches (the
  previous block to the last new one) has no page: SGLang's plans would index slot -1. C128's plans
  ignore the page table (a ring per request), so C128 paged is declined.
- online (C128, d = 512): SGLang's online state row is [max | sum | mean], the SPEC's [3, d];
  `state_rows` are its slots (req_pool_indices, state_slot_offset 0).
C4's `ape` [4, 2d] becomes SGLang's [8, d] (overlap rows, then current rows; once per ape, as an
engine does once per model). A call whose extends are all 1 takes the decode kernel (one output row
per request; the rows of requests that emitted are gathered), any other the prefill kernel (compact
output, the SPEC's order). SGLang's plan (CompressorDecodePlan / CompressorPrefillPlan) is the
adapter's `compress_plan` (SPEC 7), made once per step; a call without a plan makes one. Every extend
must be >= 1 and a call takes at most 65535 new tokens with 0.5.15 (MAX_TOKENS; 65536 online) and
65536 with 0.5.2x: the plans index tokens with 16 bits (0.5.2x's c_plan.cuh counts from 0).

topk_indices: the v2 kernel (topk_v2.cuh: `topk_transform_paged_v2`, 0.5.15's `topk_transform_512_v2`;
k <= 2048; its routing plan `plan_topk_v2` is the adapter's `topk_indices_plan`), or with
DSV4_SGLANG_TOPK=v1 the v1 kernel (`topk_transform_paged`, 0.5.15's `topk_transform_512`; k in
{512, 1024}, no plan). Not mapped: `topk_transform_bf16_small` (bf16 scores; the SPEC's logits are
float32, and rounding them to bf16 changes which columns win), the ragged v2 entry (contiguous KV
with per-row offsets, no page table) and the k-pool entries (GLM's pooled scores).

sparse_attention_fp8 (0.5.2x): see the function. Not mapped from 0.5.23 either: online_c128_mtp
(speculative decoding's staging of C128 states, no compressed output), the V4.1 compressors of ratio
1 and 2, tilelang_fp8_attention (needs the tilelang package), and the V4.1 index logits (FP4 K).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from pathlib import Path

import torch

from harness import contract, plans
from harness.contract import ATTN_DIM
from kernels_peers._common import ConversionCache, declining, stand_in, token_page_table, unavailable

TOPK_VERSION = os.environ.get("DSV4_SGLANG_TOPK", "v2")
RING_PLAN = os.environ.get("DSV4_SGLANG_RING_PLAN", "legacy")  # or "swa": see the module's docstring
HEAD_DIMS = (128, 512)
ONLINE_HEAD_DIM = 512
# new tokens a ring or paged plan takes (c_plan.cuh's kMaxTokens, a 16-bit index); the online plan takes 65536
MAX_TOKENS = {"jit_kernel": 65535, "kernels": 65536}
ONLINE_MAX_TOKENS = 65536
_cache = ConversionCache()
_root = None

indexer_logits, sparse_attention = declining("SGLang's dsv4 adapter", "indexer_logits", "sparse_attention")


# where each layout keeps the DSv4 launchers, and what its top-k launchers are called
LAYOUTS = {"kernels": "sglang.kernels.ops.attention.dsv4", "jit_kernel": "sglang.jit_kernel.dsv4"}
TOPK_NAMES = {"kernels": {"v1": "topk_transform_paged", "v2": "topk_transform_paged_v2"},
              "jit_kernel": {"v1": "topk_transform_512", "v2": "topk_transform_512_v2"}}


def unavailable_reason(device):
    reason = unavailable(device, "sglang", "tvm_ffi")
    if reason is None:
        try:
            kind = layout()
        except contract.Unsupported as err:  # a release with neither layout
            return str(err)
        if kind == "kernels" and importlib.util.find_spec("msgspec") is None:
            reason = ("package msgspec not installed (sglang >= 0.5.2x's JIT loader needs it; ci/peer_wheels.sh "
                      "fetches it)")
    return reason


def _package_root():
    global _root
    if _root is None:
        spec = importlib.util.find_spec("sglang")
        if spec is None:  # unavailable_reason says so first; a direct call gets a clear reason too
            raise contract.Unsupported("package sglang not installed (ci/peer_wheels.sh fetches the wheels)")
        _root = Path(spec.submodule_search_locations[0])
    return _root


def layout(root=None):
    """Which layout the installed sglang has ("kernels" or "jit_kernel"), from its folders."""
    return _layout_of(Path(root) if root is not None else _package_root())


@functools.lru_cache(maxsize=None)
def _layout_of(root):  # once per folder: the per-call launcher lookup reads it
    if (root / "kernels" / "ops" / "attention" / "dsv4").is_dir():
        return "kernels"
    if (root / "jit_kernel" / "dsv4").is_dir():
        return "jit_kernel"
    raise contract.Unsupported(f"sglang at {root} has neither kernels/ops/attention/dsv4 nor jit_kernel/dsv4")


def _srt_utils():
    """What the launchers import from sglang.srt.utils, for a CUDA build of torch."""
    hip = torch.version.hip is not None
    cuda_version = tuple(int(x) for x in (torch.version.cuda or "0.0").split(".")[:2])
    return dict(is_hip=lambda: hip, is_xpu=lambda: False, is_gfx95_supported=lambda: False,
                is_gfx942_supported=lambda: False, is_musa=lambda: False,
                is_cuda=lambda: torch.version.cuda is not None, get_cuda_version=lambda: cuda_version)


def _load(submodule):
    """The DSv4 launcher module `submodule` ("compress", "topk", "triton_sparse_decode") without importing
    the rest of sglang."""
    root = _package_root()
    kind = layout(root)
    name = f"{LAYOUTS[kind]}.{submodule}"
    if name not in sys.modules:
        stand_in("sglang", path=root)
        stand_in("sglang.utils", is_in_ci=lambda: False)
        if kind == "jit_kernel":
            stand_in("sglang.jit_kernel.dsv4", path=root / "jit_kernel" / "dsv4")
        else:
            for package in ("kernels", "kernels/ops", "kernels/ops/attention", "kernels/ops/attention/dsv4", "srt"):
                stand_in("sglang." + package.replace("/", "."), path=root / package)
            stand_in("sglang.srt.utils", path=root / "srt" / "utils", **_srt_utils())
            stand_in("sglang.srt.utils.common", **_srt_utils())
            for package in ("layers", "layers.attention", "layers.attention.dsa"):
                stand_in(f"sglang.srt.{package}")
            # the fused norm-rope store's tile (the value in sglang's dsa/utils.py) and ROCm's preshuffle switch
            stand_in("sglang.srt.layers.attention.dsa.utils", INDEXER_K_CACHE_PRESHUFFLE_TILE=16,
                      aiter_can_use_preshuffle_paged_mqa=lambda: False)
    return importlib.import_module(name)


def _topk_kernel(topk, version):
    """The top-k launcher of `version` ("v1", "v2") in the loaded module, under this layout's name."""
    return getattr(topk, TOPK_NAMES[layout()][version])


def _topk_metadata(seq_lens, page_table, k, page_size):
    return {"k": k, "page_size": page_size}, {"seq_lens": seq_lens, "page_table": page_table}


def topk_indices_plan(seq_lens, page_table, *, k=512, page_size=64, validate=True):
    """SGLang's routing plan of its top-k v2 kernel (`plan_topk_v2`, from seq_lens alone)."""
    contract.check_topk_metadata(seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    scalars, metadata = _topk_metadata(seq_lens, page_table, k, page_size)
    routing = _load("topk").plan_topk_v2(seq_lens) if TOPK_VERSION != "v1" and len(seq_lens) else None
    return plans.make_plan("topk_indices", seq_lens.device, scalars, metadata, routing=routing)


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True, plan=None):
    layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    out = torch.empty((layout.batch, k), dtype=torch.int32, device=logits.device)
    if not layout.batch:
        return out
    # the kernels' own RuntimeChecks (topk_v2.cuh), declined here with their reason instead of raised
    if page_size & (page_size - 1):
        raise contract.Unsupported(f"page_size={page_size}: SGLang's top-k kernels take a power-of-two page size")
    if logits.stride(0) % 4:
        raise contract.Unsupported(f"logits row stride {logits.stride(0)}: SGLang's top-k kernels load rows 16 bytes "
                                   "at a time (a stride that is a multiple of 4 floats)")
    topk = _load("topk")
    if TOPK_VERSION == "v1":
        if k not in (512, 1024):
            raise contract.Unsupported(f"k={k}: SGLang's top-k v1 kernel is built for k in (512, 1024)")
        _topk_kernel(topk, "v1")(logits, seq_lens, page_table, out, page_size)
        return out
    if k > 2048:
        raise contract.Unsupported(f"k={k}: SGLang's top-k v2 kernel takes k <= 2048")
    if plan is None:
        plan = topk_indices_plan(seq_lens, page_table, k=k, page_size=page_size, validate=False)
    else:
        plans.check_plan(plan, "topk_indices", logits.device, *_topk_metadata(seq_lens, page_table, k, page_size),
                         validate)
    _topk_kernel(topk, "v2")(logits, seq_lens, page_table, out, page_size, plan["routing"])
    return out


def compress_plan(prefix_lens, extend_lens, *, ratio, mode, state_rows=None, page_table=None, validate=True):
    """SGLang's compress plan for these lengths (its engine makes it once per forward step)."""
    meta = contract.check_compress_metadata(prefix_lens, extend_lens, ratio=ratio, mode=mode, state_rows=state_rows,
                                            page_table=page_table, validate=validate)
    if mode == "paged" and meta.ratio != 4:
        raise contract.Unsupported("mode='paged' at ratio 128: SGLang keeps C128 state in a ring per request "
                                   "(mode='ring') or online (mode='online'), not in pages")
    # the identity full_to_state must cover every page the table names (no per-layer pool size here)
    pages = int(page_table.max()) + 1 if page_table is not None and page_table.numel() else 1
    kind = layout()
    if mode == "ring" and RING_PLAN != "legacy" and (RING_PLAN != "swa" or kind != "kernels"):
        raise contract.Unsupported(f"DSV4_SGLANG_RING_PLAN={RING_PLAN!r}: 'legacy', or 'swa' with sglang >= 0.5.2x "
                                   "(its per-request ring plans)")
    engine_plan, emitted = plan_for(_load("compress"), mode, meta.ratio, prefix_lens, extend_lens, state_rows,
                                    page_table, max(pages, 1), max_tokens=MAX_TOKENS[kind], ring_plan=RING_PLAN)
    return plans.make_plan("compress", prefix_lens.device, {"ratio": meta.ratio, "mode": mode},
                           {"prefix_lens": prefix_lens, "extend_lens": extend_lens, "state_rows": state_rows,
                            "page_table": page_table}, engine=engine_plan, emitted=emitted)


def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
             validate=True, plan=None):
    layout = contract.check_compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens,
                                     extend_lens=extend_lens, mode=mode, state_rows=state_rows,
                                     page_table=page_table, validate=validate)
    if mode == "paged" and ratio != 4:
        raise contract.Unsupported("mode='paged' at ratio 128: SGLang keeps C128 state in a ring per request "
                                   "(mode='ring') or online (mode='online'), not in pages")
    if layout.d not in HEAD_DIMS:
        raise contract.Unsupported(f"d={layout.d}: SGLang's compressors are built for d in {HEAD_DIMS}")
    if mode == "online" and layout.d != ONLINE_HEAD_DIM:
        raise contract.Unsupported(f"d={layout.d}: SGLang's online C128 compressor is built for d = {ONLINE_HEAD_DIM}")
    kernels = _load("compress")
    plan = plans.compress_call_plan(plan, prefix_lens, extend_lens, ratio=layout.ratio, mode=mode,
                                    state_rows=state_rows, page_table=page_table, validate=validate,
                                    device=kv_score.device, planner=compress_plan)
    bias = _cache.get((ape,), "ape", lambda: sglang_ape(ape, ratio))
    out = kernels.compress_forward(state_buffer(state, mode, ratio), kv_score, bias, plan["engine"], head_dim=layout.d,
                                   compress_ratio=ratio, is_online=mode == "online")
    emitted = plan["emitted"]
    return out if emitted is None else out.index_select(0, emitted)


def sglang_ape(ape, ratio):
    """C4: SPEC [4, 2d] (overlap bias | current bias per row) -> SGLang [8, d] (4 overlap rows,
    then 4 current rows). C128: the same [128, d]."""
    if ratio == 128:
        return ape
    d = ape.shape[1] // 2
    return torch.cat([ape[:, :d], ape[:, d:]]).contiguous()


def state_buffer(state, mode, ratio):
    """The SPEC state as the buffer SGLang's kernels take (a view): ring -> ring_pages; paged C4
    [P, 4, 4d] as it is; online [S, 3, d] -> [S, 1, 3d]."""
    if mode == "ring":
        return ring_pages(state, ratio)
    if mode == "online":
        return state.view(state.shape[0], 1, -1)
    return state


def ring_pages(state, ratio):
    """The SPEC ring [S, W, E] as SGLang's pages: C4 [S*2, 4, E] (slot p % 8 = page (p // 4) % 2,
    row p % 4), C128 [S, 128, E]. A view."""
    rows = 4 if ratio == 4 else 128
    return state.view(-1, rows, state.shape[-1])


def emitting_requests(prefix, ratio):
    """Decode (one new token per request): the requests whose token completes an entry."""
    return [b for b, p in enumerate(prefix) if (p + 1) % ratio == 0]


def paged_slots(page_table, prefix, extend, ratio=4):
    """req_to_token for SGLang's paged plans: the SPEC slot of every position [B, max end] (int32).
    Declines a call where a block it touches, from the one before the prefix's last to the last new
    one, has no page (SGLang's plans look up every such position)."""
    table = page_table.cpu()
    for b, (p, e) in enumerate(zip(prefix, extend)):
        first, last = max(0, p // ratio - 1), (p + e - 1) // ratio
        if last >= table.shape[1] or (table[b, first:last + 1] < 0).any():
            raise contract.Unsupported(f"request {b}: a block in {first}..{last} has no page; SGLang's paged plans "
                                       "read and write every position from the previous block on")
    return token_page_table(page_table, ratio, max(p + e for p, e in zip(prefix, extend)))


def plan_for(kernels, mode, ratio, prefix_lens, extend_lens, state_rows, page_table, state_len,
             max_tokens=MAX_TOKENS["jit_kernel"], ring_plan="legacy"):
    """(SGLang plan, rows of the decode output to keep or None) for these lengths; declines what
    SGLang's plans cannot express (`max_tokens`: new tokens a ring or paged plan takes; `ring_plan`:
    the ring's builders, "legacy" or "swa")."""
    prefix, extend = prefix_lens.tolist(), extend_lens.tolist()
    if any(e == 0 for e in extend):
        raise contract.Unsupported("an extend of 0 tokens: SGLang's plans need at least one new token per request")
    limit = ONLINE_MAX_TOKENS if mode == "online" else max_tokens
    if sum(extend) > limit:
        raise contract.Unsupported(f"{sum(extend)} new tokens: SGLang's plans take at most {limit} per call")
    device = prefix_lens.device
    seq = (prefix_lens + extend_lens).long()
    decode = all(e == 1 for e in extend)
    keep = torch.tensor(emitting_requests(prefix, ratio), dtype=torch.long, device=device) if decode else None
    Decode, Prefill = kernels.CompressorDecodePlan, kernels.CompressorPrefillPlan
    if mode == "ring" and ring_plan == "swa":
        # one ring of `window` positions a request (C4: two pages of 4, C128: one of 128); the plans
        # then read neither req_to_token nor full_to_state, so a one-element stand-in serves for both
        rid, window, req_ring = state_rows.long(), 8 if ratio == 4 else 128, ratio == 4
        unused_r2t = torch.zeros((1, 1), dtype=torch.int32, device=device)
        unused_f2s = torch.zeros(1, dtype=torch.long, device=device)
        if decode:
            return Decode.generate(ratio, rid, unused_r2t, unused_f2s, seq, window, window, req_ring), keep
        return Prefill.generate(ratio, rid, seq.cpu(), extend_lens.long().cpu(), unused_r2t, unused_f2s, window, window,
                                sum(extend), use_req_ring=req_ring), keep
    if mode == "ring":
        rid = state_rows.long()
        if decode:
            return Decode.generate_legacy(ratio, rid, seq), keep
        return Prefill.generate_legacy(ratio, rid, seq.cpu(), extend_lens.long().cpu(), sum(extend), device), keep
    if mode == "online":
        rid, unused = state_rows.long(), torch.zeros((1, 1), dtype=torch.int32, device=device)  # slot = rid
        if decode:
            return Decode.generate_online(seq, rid, unused), keep
        return Prefill.generate_online(seq, extend_lens.long(), rid, unused, sum(extend)), keep
    slots = paged_slots(page_table, prefix, extend, ratio)
    rid = torch.arange(len(prefix), dtype=torch.long, device=device)  # a request's row of `slots`
    identity = torch.arange(state_len * ratio, dtype=torch.long, device=device)  # full_to_state
    if decode:
        return Decode.generate(ratio, rid, slots, identity, seq, ratio, ratio), keep
    return Prefill.generate(ratio, rid, seq.cpu(), extend_lens.long().cpu(), slots, identity, ratio, ratio,
                            sum(extend)), keep


def sparse_attention_fp8(q, kv_cache, indices, *, page_size, sm_scale, attn_sink=None, validate=True):
    """SGLang 0.5.2x's Triton FP8 sparse decode (`triton_sparse_decode.triton_fp8_attention_fwd`, the
    kernel its engine runs with SGLANG_HACK_FLASHMLA_BACKEND=triton in place of FlashMLA's; fused
    gather, dequantisation and attention over the V4 cache, split-K past 8192 indices), SPEC 8.
    Layouts as FlashMLA's adapter: q [B, 1, H, 512]; the cache's first 584 * page_size bytes of each
    page as [pages, page_size, 1, 584] (the kernel takes the page size from dim 1 and the page stride
    from dim 0's stride); indices [B, 1, K] slot ids. Its lse (natural log, without the sink) is +inf
    for a row with no valid index: mapped to SPEC's -inf. Any H and K > 1; 0.5.15 has no such kernel."""
    dims = contract.check_sparse_attention_fp8(q, kv_cache, indices, page_size=page_size, sm_scale=sm_scale,
                                               attn_sink=attn_sink, validate=validate)
    if layout() != "kernels":
        raise contract.Unsupported("sglang before 0.5.2x has no Triton FP8 sparse decode kernel")
    if dims.topk == 1:  # seen on the H200 (0.5.23, session 8): an illegal address, which ends the process's
        # CUDA context and with it a check's other cases; the cause is not isolated
        raise contract.Unsupported("sglang's Triton FP8 decode faults (illegal memory access) at K 1")
    decode = _load("triton_sparse_decode")
    pages = kv_cache[:, :contract.FP8_KV_TOKEN_BYTES * page_size].view(
        dims.num_pages, page_size, 1, contract.FP8_KV_TOKEN_BYTES)
    out, lse = decode.triton_fp8_attention_fwd(q.view(dims.batch, 1, dims.heads, ATTN_DIM), pages, ATTN_DIM,
                                               float(sm_scale), indices.view(dims.batch, 1, dims.topk),
                                               attn_sink=attn_sink)
    lse = lse.reshape(dims.batch, dims.heads)
    return out.view(dims.batch, dims.heads, ATTN_DIM), lse.masked_fill(lse == float("inf"), float("-inf"))
