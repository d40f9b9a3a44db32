"""The peer adapters' own parts on the CPU: layout conversions, the conversion cache, which cases
each declines, and each adapter end to end through the harness's checker with a stand-in for the
peer package that computes the peer's documented semantics on the peer's layout (so a conversion
mistake fails the SPEC comparison). The real packages run only on the GPU (kernels_peers/)."""

import base64
import fnmatch
import hashlib
import importlib.util
import math
import os
import sys
import types
import zipfile
from pathlib import Path

import pytest
import torch

from harness import backends
from harness import cases as C
from harness import check as K
from harness import contract
from kernels_peers import (_common, deepgemm_logits, flashinfer_topk, flashinfer_topk_deterministic, flashmla_sparse,
                           sglang_dsv4)


def _run(module, op, monkeypatch, fake_name, fake):
    """Every quick case of `op` through `module` with `fake` standing in for the peer package:
    (passed, skipped) case lists; any failure fails the test."""
    monkeypatch.setitem(sys.modules, fake_name, fake)
    backend = backends.Backend(module.__name__, module)
    passed, skipped = [], []
    for case in C.select([op]):
        r = K.check_case(backend, case, "cpu")
        assert not r.failed, f"{case.id}: {r.message}"
        (skipped if r.verdict == "skip" else passed).append(case.name)
    return passed, skipped


def test_token_page_table_follows_the_spec_mapping():
    g = torch.Generator().manual_seed(0)
    table = torch.randint(0, 50, (3, 5), generator=g, dtype=torch.int32)
    table[1, 2] = -1
    slots = _common.token_page_table(table, 4, 24)  # 24 columns: past the 5 x 4 the table covers
    assert slots.dtype == torch.int32 and slots.shape == (3, 24)
    for b in range(3):
        for t in range(24):
            page = table[b, t // 4].item() if t // 4 < 5 else -1
            assert slots[b, t].item() == (page * 4 + t % 4 if page >= 0 else -1)
    assert (_common.token_page_table(table[:, :0], 4, 3) == -1).all()


def test_conversion_cache_rebuilds_after_an_in_place_change():
    cache, built = _common.ConversionCache(size=2), []
    x = torch.arange(4)
    get = lambda: cache.get((x,), "tag", lambda: built.append(1) or x.sum().item())  # noqa: E731
    assert get() == 6 and get() == 6 and len(built) == 1
    x.add_(1)  # bumps the version
    assert get() == 10 and len(built) == 2


def test_a_peer_reports_a_missing_package():
    assert "CUDA devices only" in _common.unavailable("cpu", "deep_gemm")
    assert "no_such_package_xyz" in (_common.unavailable("cuda", "no_such_package_xyz") or "")


def test_every_peer_declines_the_ops_it_lacks_after_validation():
    backend = backends.Backend("flashmla", flashmla_sparse)
    declined = K.check_case(backend, C.find("topk_indices", "long-k512"), "cpu")
    assert declined.verdict == "skip" and "FlashMLA has no topk_indices kernel" in declined.message
    bad = [c for c in C.select(["compress"]) if c.family == "bad-input" and not c.name.startswith("bad-plan")]
    assert all(K.check_case(backend, c, "cpu").ok for c in bad)  # bad input still named first
    planless = [K.check_case(backend, c, "cpu") for c in C.select(["compress"]) if c.name.startswith("bad-plan")]
    assert planless and all(r.verdict == "skip" and "exports no compress_plan" in r.message for r in planless)


# --- DeepGEMM: the SPEC cache seen as [blocks, 64, 1, 132], q with next_n = 1, 2-D context_lens


def _fake_deep_gemm():
    def fp8_paged_mqa_logits(q, kv, weights, lens, block_table, schedule, max_len, clean_logits=False):
        assert q.shape[1] == 1 and lens.dim() == 2 and kv.shape[1:] == (64, 1, 132) and not clean_logits
        raw = kv.reshape(kv.shape[0], -1)  # DeepGEMM's block: 64 x 128 key bytes, then 64 float32 scales
        keys = raw[:, :64 * 128].contiguous().view(torch.float8_e4m3fn).float().view(-1, 64, 128)
        scales = raw[:, 64 * 128:].contiguous().view(torch.float32)
        out = torch.full((q.shape[0], max_len), math.nan)  # uncleaned: whatever lies past each context
        for b in range(q.shape[0]):
            n = int(lens[b, 0])
            blocks = block_table[b, :(n + 63) // 64].long()
            k, s = keys[blocks].reshape(-1, 128)[:n], scales[blocks].reshape(-1)[:n]
            out[b, :n] = (weights[b, :, None] * torch.relu((q[b, 0].float() @ k.T) * s)).sum(0)
        return out
    return types.SimpleNamespace(fp8_paged_mqa_logits=fp8_paged_mqa_logits, get_num_sms=lambda: 132,
                                 get_paged_mqa_logits_metadata=lambda lens, block, sms: torch.zeros(sms + 1, 2))


def test_deepgemm_adapter_layouts(monkeypatch):
    passed, skipped = _run(deepgemm_logits, "indexer_logits", monkeypatch, "deep_gemm", _fake_deep_gemm())
    assert passed and skipped  # H = 64 cases run, the others are declined


# --- FlashMLA: kv as [N, 1, 512], indices as [B, 1, K]


def _fake_flash_mla():
    def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None, use_legacy=False,
                             return_log2_lse=None):
        assert kv.shape[1] == 1 and indices.shape[1] == 1 and d_v == 512
        out = torch.zeros(q.shape, dtype=torch.float32)
        lse = torch.full(q.shape[:2], -math.inf)
        for b in range(q.shape[0]):
            idx = indices[b, 0]
            rows = kv[idx[idx >= 0].long(), 0].float()
            if not len(rows):
                continue
            s = (q[b].float() @ rows.T) * sm_scale
            lse[b] = torch.logsumexp(s, -1)
            o = torch.exp(s - lse[b, :, None]) @ rows
            if attn_sink is not None:
                o = o / (1 + torch.exp(attn_sink - lse[b]))[:, None]
            out[b] = o
        return out.to(torch.bfloat16), None, lse
    return types.SimpleNamespace(flash_mla_sparse_fwd=flash_mla_sparse_fwd)


def test_flashmla_adapter_layouts(monkeypatch):
    passed, skipped = _run(flashmla_sparse, "sparse_attention", monkeypatch, "flash_mla", _fake_flash_mla())
    assert passed and skipped  # H in (64, 128) with K a multiple of 64 run, the others are declined


# --- FlashMLA's FP8 decode: q [B, 1, H, 512], the pages as [pages, page_size, 1, 584] at the page
# stride, indices [B, 1, K]; lse [B, H, 1] with +inf for an empty row (as the kernel returns it)


def _fake_flash_mla_fp8():
    import kernels_torch
    calls = []

    def get_mla_metadata(*args, **kwargs):
        return types.SimpleNamespace(have_initialized=False), None

    def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                               num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=None, indices=None,
                               attn_sink=None, use_legacy=False, **rest):
        batch, s_q, heads, dim = q.shape
        pages, page_size, h_k, token_bytes = k_cache.shape
        assert (s_q, dim, h_k, token_bytes, head_dim_v) == (1, 512, 1, 584, 512) and heads in (64, 128)
        assert is_fp8_kvcache and use_legacy and not causal and block_table is None and not rest
        assert indices.shape == (batch, 1, indices.shape[2]) and indices.shape[2] % 64 == 0
        assert k_cache.stride()[1:] == (584, 584, 1)
        calls.append(k_cache.stride(0))
        cache = torch.as_strided(k_cache, (pages, k_cache.stride(0)), (k_cache.stride(0), 1))
        out, lse = kernels_torch.sparse_attention_fp8(q[:, 0], cache, indices[:, 0], page_size=page_size,
                                                      sm_scale=softmax_scale, attn_sink=attn_sink)
        return out[:, None], lse.masked_fill(torch.isneginf(lse), math.inf)[:, :, None]
    return types.SimpleNamespace(flash_mla_with_kvcache=flash_mla_with_kvcache, get_mla_metadata=get_mla_metadata,
                                 calls=calls)


def test_flashmla_fp8_adapter_layouts(monkeypatch):
    fake = _fake_flash_mla_fp8()
    passed, skipped = _run(flashmla_sparse, "sparse_attention_fp8", monkeypatch, "flash_mla", fake)
    assert passed and skipped  # H in (64, 128) with K a multiple of 64 run, the others are declined
    assert any(stride != 584 * 64 for stride in fake.calls)  # the engines' stride reaches the kernel


def test_flashmla_fp8_adapter_maps_an_empty_rows_lse(monkeypatch):
    from harness import inputs as I
    monkeypatch.setitem(sys.modules, "flash_mla", _fake_flash_mla_fp8())
    idx = torch.full((2, 64), -1, dtype=torch.int32)
    idx[1, :3] = torch.arange(3)
    x = I.attention_fp8_inputs(heads=64, indices=idx, pool_rows=3, page_size=2, seed=1)
    out, lse = x.call(flashmla_sparse.sparse_attention_fp8)
    assert torch.isneginf(lse[0]).all() and (out[0] == 0).all() and lse[1].isfinite().all()


# --- SGLang 0.5.2x's Triton FP8 sparse decode: FlashMLA's layouts, any H and K > 1, lse [B, 1, H] (+inf empty)


def _fake_sglang_triton_decode():
    import kernels_torch
    calls = []

    def triton_fp8_attention_fwd(q, k_cache, head_dim_v, softmax_scale, indices, attn_sink=None, **unused):
        batch, s_q, heads, dim = q.shape
        assert (s_q, dim, head_dim_v) == (1, 512, 512) and not unused and indices.shape[:2] == (batch, 1)
        pages, page_size = k_cache.shape[:2]  # the kernel's block size is dim 1 of the cache
        flat = k_cache.view(torch.uint8).reshape(pages, -1)  # as the kernel reads it: a view at the page stride
        assert flat.data_ptr() == k_cache.data_ptr() and flat.stride(0) == k_cache.stride(0)
        calls.append(flat.stride(0))
        cache = torch.as_strided(k_cache, (pages, k_cache.stride(0)), (k_cache.stride(0), 1))
        out, lse = kernels_torch.sparse_attention_fp8(q[:, 0], cache, indices[:, 0], page_size=page_size,
                                                      sm_scale=softmax_scale, attn_sink=attn_sink)
        return out[:, None], lse.masked_fill(torch.isneginf(lse), math.inf)[:, None, :]
    return types.SimpleNamespace(triton_fp8_attention_fwd=triton_fp8_attention_fwd, calls=calls)


def test_sglang_fp8_decode_adapter_layouts(monkeypatch):
    fake = _fake_sglang_triton_decode()
    monkeypatch.setattr(sglang_dsv4, "layout", lambda root=None: "kernels")
    monkeypatch.setattr(sglang_dsv4, "_load", lambda submodule: fake)
    passed, skipped = _run(sglang_dsv4, "sparse_attention_fp8", monkeypatch, "sglang_fake_decode", fake)
    assert passed and skipped == ["k1"]  # any H and K but K 1 (declined: the real kernel faulted there)
    assert any(stride != 584 * 64 for stride in fake.calls)  # the engines' stride reaches the kernel
    from harness import inputs as I
    idx = torch.full((2, 64), -1, dtype=torch.int32)
    idx[1, :3] = torch.arange(3)
    out, lse = I.attention_fp8_inputs(heads=64, indices=idx, pool_rows=3, page_size=2, seed=1).call(
        sglang_dsv4.sparse_attention_fp8)
    assert torch.isneginf(lse[0]).all() and (out[0] == 0).all() and lse[1].isfinite().all()
    monkeypatch.setattr(sglang_dsv4, "layout", lambda root=None: "jit_kernel")
    with pytest.raises(contract.Unsupported, match="before 0.5.2x"):
        I.attention_fp8_inputs(heads=64, indices=idx, pool_rows=3, page_size=2, seed=1).call(
            sglang_dsv4.sparse_attention_fp8)


# --- FlashInfer: 0.6's per-token slot table, 0.7's block table with page_size, the 0.6 decline


def _fake_flashinfer_06():
    """flashinfer.topk of 0.6: one physical slot per token, no options."""
    def top_k_page_table_transform(input, src_page_table, lengths, k, row_to_batch=None):
        out = torch.full((input.shape[0], k), -1, dtype=torch.int32)
        for i in range(input.shape[0]):
            n = int(lengths[i])
            chosen = torch.arange(n) if n <= k else torch.sort(input[i, :n], descending=True, stable=True).indices[:k]
            out[i, :len(chosen)] = src_page_table[i, chosen]
        return out
    return types.SimpleNamespace(top_k_page_table_transform=top_k_page_table_transform)


def _fake_flashinfer_07(calls):
    """flashinfer.topk of 0.7: the block table with page_size (a power of two), deterministic mode;
    records each call's options."""
    def top_k_page_table_transform(input, src_page_table, lengths, k, row_to_batch=None, deterministic=False,
                                   tie_break=0, dsa_graph_safe=False, row_starts=None, page_table_row_starts=None,
                                   *, page_size=1, out=None, out_raw_indices=None):
        assert page_size > 0 and page_size & (page_size - 1) == 0 and src_page_table.is_contiguous()
        calls.append({"page_size": page_size, "deterministic": deterministic})
        out = torch.full((input.shape[0], k), -1, dtype=torch.int32)
        for i in range(input.shape[0]):
            n = int(lengths[i])
            raw = torch.arange(n) if n <= k else torch.sort(input[i, :n], descending=True, stable=True).indices[:k]
            out[i, :len(raw)] = src_page_table[i, raw // page_size] * page_size + raw % page_size
        return out
    return types.SimpleNamespace(top_k_page_table_transform=top_k_page_table_transform)


def _use_flashinfer(monkeypatch, topk, version):
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.topk", topk)
    monkeypatch.setattr(flashinfer_topk, "version", lambda: version)


def test_flashinfer_06_adapter_layouts(monkeypatch):
    _use_flashinfer(monkeypatch, _fake_flashinfer_06(), (0, 6))
    passed, skipped = _run(flashinfer_topk, "topk_indices", monkeypatch, "flashinfer.topk", _fake_flashinfer_06())
    assert passed and not skipped


def test_flashinfer_07_pages_itself_where_the_page_size_is_a_power_of_two(monkeypatch):
    calls = []
    _use_flashinfer(monkeypatch, _fake_flashinfer_07(calls), (0, 7))
    passed, skipped = _run(flashinfer_topk, "topk_indices", monkeypatch, "flashinfer.topk", _fake_flashinfer_07(calls))
    assert passed and not skipped and calls
    assert {c["page_size"] for c in calls} > {1}  # the block table went in as it is
    logits, seq = torch.randn(2, 300), torch.tensor([300, 200], dtype=torch.int32)
    table = torch.arange(2 * 10, dtype=torch.int32).view(2, 10)
    calls.clear()
    flashinfer_topk.topk_indices(logits, seq, table, k=64, page_size=30)  # not a power of two: token slots
    assert calls == [{"page_size": 1, "deterministic": False}]


def test_flashinfer_modes(monkeypatch):
    calls = []
    _use_flashinfer(monkeypatch, _fake_flashinfer_07(calls), (0, 7))
    logits, seq = torch.randn(2, 300), torch.tensor([300, 200], dtype=torch.int32)
    table = torch.arange(2 * 5, dtype=torch.int32).view(2, 5)
    monkeypatch.setattr(flashinfer_topk, "MODE", "deterministic")
    flashinfer_topk.topk_indices(logits, seq, table, k=64)
    assert calls[-1] == {"page_size": 64, "deterministic": True}
    monkeypatch.setattr(flashinfer_topk, "MODE", "auto")  # the registered variant passes its mode
    flashinfer_topk_deterministic.topk_indices(logits, seq, table, k=64)
    assert calls[-1] == {"page_size": 64, "deterministic": True}
    seen = []
    topk = sys.modules["flashinfer.topk"]
    fake = topk.top_k_page_table_transform

    def record_algo(input, src_page_table, lengths, k, row_to_batch=None, deterministic=False, *, page_size=1):
        seen.append(os.environ.get("FLASHINFER_TOPK_ALGO"))
        return fake(input, src_page_table, lengths, k, deterministic=deterministic, page_size=page_size)
    monkeypatch.setattr(topk, "top_k_page_table_transform", record_algo)
    monkeypatch.setenv("FLASHINFER_TOPK_ALGO", "theirs")
    flashinfer_topk.topk_indices(logits, seq, table, k=64, mode="native")
    flashinfer_topk.topk_indices(logits, seq, table, k=64, mode="cub")
    flashinfer_topk.topk_indices(logits, seq, table, k=64)
    assert seen == ["default", "cub", "theirs"] and os.environ["FLASHINFER_TOPK_ALGO"] == "theirs"  # set per call
    monkeypatch.delenv("FLASHINFER_TOPK_ALGO")
    flashinfer_topk.topk_indices(logits, seq, table, k=64, mode="cub")
    assert seen[-1] == "cub" and "FLASHINFER_TOPK_ALGO" not in os.environ
    monkeypatch.setattr(topk, "top_k_page_table_transform", fake)
    monkeypatch.setattr(flashinfer_topk, "MODE", "fastest")
    with pytest.raises(contract.Unsupported, match="DSV4_FLASHINFER_TOPK='fastest'"):
        flashinfer_topk.topk_indices(logits, seq, table, k=64)
    _use_flashinfer(monkeypatch, _fake_flashinfer_06(), (0, 6))  # 0.6 has neither mode nor switch
    monkeypatch.setattr(flashinfer_topk, "MODE", "auto")
    with pytest.raises(contract.Unsupported, match="no deterministic mode"):
        flashinfer_topk_deterministic.topk_indices(logits, seq, table, k=64)


def test_flashinfer_declines_partial_rows_on_its_multi_cta_path_before_07(monkeypatch):
    _use_flashinfer(monkeypatch, _fake_flashinfer_06(), (0, 6))
    logits, table = torch.randn(2, 40000), torch.arange(2 * 625, dtype=torch.int32).view(2, 625)
    i32 = lambda *v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    with pytest.raises(contract.Unsupported, match="multi-CTA"):  # 2 rows <= 40000 / 16384: multi-CTA
        flashinfer_topk.topk_indices(logits, i32(40000, 10000), table, k=512)
    assert flashinfer_topk.topk_indices(logits, i32(40000, 40000), table, k=512).shape == (2, 512)
    assert flashinfer_topk.topk_indices(logits, i32(40000, 300), table, k=512).shape == (2, 512)  # short path
    many = torch.randn(3, 40000)  # 3 rows > 2: the filtered path, which handles any length
    assert flashinfer_topk.topk_indices(many, i32(40000, 10000, 5), table[[0, 1, 1]], k=512).shape == (3, 512)
    _use_flashinfer(monkeypatch, _fake_flashinfer_07([]), (0, 7))  # 0.7 clamps the chunk: it runs
    assert flashinfer_topk.topk_indices(logits, i32(40000, 10000), table, k=512).shape == (2, 512)


# --- SGLang: the ring as pages, the C4 bias rows, the decode rows kept, the plans' limits


def test_sglang_ring_pages_are_the_spec_ring():
    state = torch.randn(3, 8, 16)
    pages = sglang_dsv4.ring_pages(state, 4)
    assert pages.shape == (6, 4, 16) and pages.data_ptr() == state.data_ptr()
    for row in range(3):
        for p in range(16):  # SGLang: page row*2 + (p // 4) % 2, slot p % 4
            assert torch.equal(pages[row * 2 + (p // 4) % 2, p % 4], state[row, p % 8])
    assert sglang_dsv4.ring_pages(torch.randn(2, 128, 8), 128).shape == (2, 128, 8)


def test_sglang_ape_rows():
    ape = torch.randn(4, 2 * 8)
    bias = sglang_dsv4.sglang_ape(ape, 4)
    assert bias.shape == (8, 8)
    assert torch.equal(bias[:4], ape[:, :8]) and torch.equal(bias[4:], ape[:, 8:])
    assert sglang_dsv4.sglang_ape(torch.randn(128, 8), 128).shape == (128, 8)


class _PlanRecorder:
    """SGLang's plan classes, recording each generator's name and arguments."""
    calls = []

    keywords = []

    def __getattr__(self, name):
        return lambda *args, **kw: self.calls.append((name, args)) or self.keywords.append(kw) or name


def _plan_kernels():
    _PlanRecorder.calls = []
    return types.SimpleNamespace(CompressorDecodePlan=_PlanRecorder(), CompressorPrefillPlan=_PlanRecorder())


def _i32(*values):
    return torch.tensor(values, dtype=torch.int32)


def test_sglang_ring_plans():
    kernels = _plan_kernels()
    plan, keep = sglang_dsv4.plan_for(kernels, "ring", 4, _i32(3, 4, 11), _i32(1, 1, 1), _i32(2, 0, 1), None, 3)
    name, (ratio, rid, seq) = _PlanRecorder.calls[-1]
    assert name == "generate_legacy" and ratio == 4 and rid.dtype == torch.int64 and rid.tolist() == [2, 0, 1]
    assert seq.tolist() == [4, 5, 12]
    assert keep.tolist() == [0, 2]  # positions 3 and 11 complete an entry, 4 does not
    plan, keep = sglang_dsv4.plan_for(kernels, "ring", 128, _i32(0, 100), _i32(130, 5), _i32(0, 1), None, 2)
    name, (ratio, rid, seq, ext, tokens, device) = _PlanRecorder.calls[-1]
    assert keep is None and seq.tolist() == [130, 105] and ext.tolist() == [130, 5] and tokens == 135
    with pytest.raises(contract.Unsupported, match="extend of 0"):
        sglang_dsv4.plan_for(kernels, "ring", 4, _i32(0, 4), _i32(3, 0), _i32(0, 1), None, 2)
    with pytest.raises(contract.Unsupported, match="65535"):
        sglang_dsv4.plan_for(kernels, "ring", 4, _i32(0), _i32(70000), _i32(0), None, 1)
    with pytest.raises(contract.Unsupported, match="65535"):  # 0.5.15: a 16-bit count
        sglang_dsv4.plan_for(kernels, "ring", 4, _i32(0), _i32(65536), _i32(0), None, 1)
    new = sglang_dsv4.MAX_TOKENS["kernels"]  # 0.5.2x: a 16-bit index from 0
    sglang_dsv4.plan_for(kernels, "ring", 4, _i32(0), _i32(65536), _i32(0), None, 1, max_tokens=new)
    assert _PlanRecorder.calls[-1][1][-2] == 65536
    with pytest.raises(contract.Unsupported, match="65536"):
        sglang_dsv4.plan_for(kernels, "ring", 4, _i32(0), _i32(65537), _i32(0), None, 1, max_tokens=new)


def test_sglang_ring_through_the_engines_swa_plans():
    kernels = _plan_kernels()
    sglang_dsv4.plan_for(kernels, "ring", 4, _i32(3, 4), _i32(1, 1), _i32(2, 0), None, 3, ring_plan="swa")
    name, (ratio, rid, r2t, f2s, seq, swa_page, ring, req_ring) = _PlanRecorder.calls[-1]
    assert name == "generate" and (ratio, swa_page, ring, req_ring) == (4, 8, 8, True)  # two pages of 4 a request
    assert rid.tolist() == [2, 0] and seq.tolist() == [4, 5] and r2t.numel() == f2s.numel() == 1
    sglang_dsv4.plan_for(kernels, "ring", 128, _i32(0, 100), _i32(130, 5), _i32(0, 1), None, 2, ring_plan="swa")
    name, (ratio, rid, seq, ext, r2t, f2s, swa_page, ring, tokens) = _PlanRecorder.calls[-1]
    assert name == "generate" and (swa_page, ring, tokens) == (128, 128, 135) and seq.device.type == "cpu"
    assert _PlanRecorder.keywords[-1] == {"use_req_ring": False}  # C128's plans keep a ring per request anyway


def test_sglang_online_plans_use_the_state_rows_as_slots():
    kernels = _plan_kernels()
    plan, keep = sglang_dsv4.plan_for(kernels, "online", 128, _i32(127, 5), _i32(1, 1), _i32(3, 1), None, 4)
    name, (seq, rid, unused) = _PlanRecorder.calls[-1]
    assert name == "generate_online" and seq.tolist() == [128, 6] and rid.tolist() == [3, 1]
    assert keep.tolist() == [0]
    sglang_dsv4.plan_for(kernels, "online", 128, _i32(0), _i32(65536), _i32(0), None, 1)  # 16-bit index of the last
    name, (seq, ext, rid, unused, tokens) = _PlanRecorder.calls[-1]
    assert seq.tolist() == [65536] and ext.tolist() == [65536] and tokens == 65536
    with pytest.raises(contract.Unsupported, match="65536"):
        sglang_dsv4.plan_for(kernels, "online", 128, _i32(0), _i32(65537), _i32(0), None, 1)


def test_sglang_paged_plans_look_up_spec_slots():
    kernels = _plan_kernels()
    table = _i32(5, 2, 7, -1, -1, 4, 0, 1).view(2, 4)  # request 1 has no page for block 0 (released)
    plan, keep = sglang_dsv4.plan_for(kernels, "paged", 4, _i32(11, 13), _i32(1, 1), None, table, 8)
    name, (ratio, rid, slots, identity, seq, swa_page, ring) = _PlanRecorder.calls[-1]
    assert name == "generate" and (ratio, swa_page, ring) == (4, 4, 4) and rid.tolist() == [0, 1]
    assert identity.tolist() == list(range(32)) and seq.tolist() == [12, 14] and keep.tolist() == [0]
    assert slots.shape == (2, 14) and slots[0, 11].item() == 7 * 4 + 3 and slots[1, 13].item() == 1 * 4 + 1
    with pytest.raises(contract.Unsupported, match="no page"):  # request 1's previous block (0) is released
        sglang_dsv4.plan_for(kernels, "paged", 4, _i32(11, 5), _i32(1, 1), None, table, 8)
    sglang_dsv4.plan_for(kernels, "paged", 4, _i32(0, 12), _i32(9, 3), None, table, 8)
    name, (ratio, rid, seq, ext, slots, identity, swa_page, ring, tokens) = _PlanRecorder.calls[-1]
    assert seq.device.type == "cpu" and seq.tolist() == [9, 15] and ext.tolist() == [9, 3] and tokens == 12


def test_sglang_state_buffers_are_views():
    online = torch.randn(3, 3, 512)
    buffer = sglang_dsv4.state_buffer(online, "online", 128)
    assert buffer.shape == (3, 1, 1536) and buffer.data_ptr() == online.data_ptr()
    assert torch.equal(buffer[1, 0, 512:1024], online[1, 1])  # [max | sum | mean]
    paged = torch.randn(5, 4, 16)
    assert sglang_dsv4.state_buffer(paged, "paged", 4) is paged


def test_sglang_declines_what_it_does_not_map():
    backend = backends.Backend("sglang", sglang_dsv4)
    paged = [c for c in C.select(["compress"]) if c.params.get("mode") == "paged" and c.params["ratio"] == 128][0]
    r = K.check_case(backend, paged, "cpu")
    assert r.verdict == "skip" and "mode='paged' at ratio 128" in r.message


def test_stand_ins_leave_the_package_findable(tmp_path, monkeypatch):
    # the registry asks find_spec whether a peer is there; a registered stand-in must answer it
    # (the nightly's conformance tests load backends again after SGLang's stand-ins are in)
    (tmp_path / "jit_kernel").mkdir()
    monkeypatch.delitem(sys.modules, "dsv4_fake_pkg", raising=False)
    _common.stand_in("dsv4_fake_pkg", path=tmp_path)
    try:
        spec = importlib.util.find_spec("dsv4_fake_pkg")
        assert spec.submodule_search_locations == [str(tmp_path)]
        assert "dsv4_fake_pkg" not in (_common.unavailable("cuda", "dsv4_fake_pkg") or "")
    finally:
        sys.modules.pop("dsv4_fake_pkg", None)


def test_sglang_loads_only_the_launchers():
    pytest.importorskip("sglang")  # where the wheel is installed: the stand-ins must let these import
    topk = sglang_dsv4._load("topk")
    assert sglang_dsv4._topk_kernel(topk, "v1") and sglang_dsv4._topk_kernel(topk, "v2") and topk.plan_topk_v2
    assert sglang_dsv4._load("compress").compress_forward


def test_conversion_cache_is_not_fooled_by_reused_memory():
    cache = _common.ConversionCache()
    first = torch.arange(1000)
    # noqa below: ruff takes the lambda's `first` for a use after the `del` (the lambda runs before it)
    assert cache.get((first,), "t", lambda: first.sum().item()) == sum(range(1000))  # noqa: F821
    del first  # the cache keeps it alive, so the next tensor cannot take its memory and its key
    second = torch.arange(1000) * 2
    assert cache.get((second,), "t", lambda: second.sum().item()) == 2 * sum(range(1000))


# --- ci/slim_wheel.py: a valid wheel of the kept files, the rest dropped


def _slim_wheel_module():
    spec = importlib.util.spec_from_file_location("slim_wheel", Path(__file__).parent.parent / "ci" / "slim_wheel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_slim_wheel_keeps_the_patterns_and_rewrites_record(tmp_path):
    slim = _slim_wheel_module()
    src = tmp_path / "pkg-1.2.3-py3-none-any.whl"
    files = {"pkg/__init__.py": b"x = 1\n", "pkg/kept/a.cuh": b"// a\n", "pkg/kept/deep/b.h": b"// b\n",
             "pkg/dropped.py": b"import huge\n", "pkg-1.2.3.dist-info/METADATA": b"Name: pkg\nVersion: 1.2.3\n",
             "pkg-1.2.3.dist-info/WHEEL": b"Wheel-Version: 1.0\n", "pkg-1.2.3.dist-info/RECORD": b"stale\n"}
    with zipfile.ZipFile(src, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    out = slim.slim(src, tmp_path / "out", ["pkg/__init__.py", "pkg/kept/*"])
    assert out.name == "pkg-1.2.3+slim-py3-none-any.whl"
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        assert names == {"pkg/__init__.py", "pkg/kept/a.cuh", "pkg/kept/deep/b.h", "pkg-1.2.3+slim.dist-info/METADATA",
                         "pkg-1.2.3+slim.dist-info/WHEEL", "pkg-1.2.3+slim.dist-info/RECORD"}
        assert b"Version: 1.2.3+slim" in z.read("pkg-1.2.3+slim.dist-info/METADATA")
        record = [line.split(",") for line in z.read("pkg-1.2.3+slim.dist-info/RECORD").decode().splitlines()]
        assert {r[0] for r in record} == names
        for name, digest, size in record:
            if name.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = z.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data)


def test_slim_profiles_keep_what_the_adapters_load():
    profiles = _slim_wheel_module().PROFILES
    kept = lambda profile, name: any(fnmatch.fnmatchcase(name, p) for p in profiles[profile])  # noqa: E731
    dsv4 = sglang_dsv4.LAYOUTS["kernels"].replace(".", "/")
    for name in (f"{dsv4}/compress.py", f"{dsv4}/topk.py", f"{dsv4}/kv_layout.py", f"{dsv4}/candidate_table.py",
                 "sglang/kernels/jit/utils/compile/loader.py", "sglang/kernels/jit/include/sgl_kernel/tensor.h",
                 "sglang/srt/environ.py", "sglang/kernels/jit/csrc/occupancy/cluster_probe.cuh",
                 f"{dsv4}/triton_sparse_decode/__init__.py",
                 f"{dsv4}/triton_sparse_decode/triton_mla_kernels_decode_fused.py",
                 *(f"sglang/kernels/jit/csrc/deepseek_v4/{f}.cuh"
                   for f in ("c4_v2", "c128_v2", "c128_online_v2", "c_plan", "topk_v1", "topk_v2"))):
        assert kept("sglang", name), name
    assert not kept("sglang", "sglang/srt/utils/common.py") and not kept("sglang", "sglang/srt/layers/linear.py")
    for name in ("flashinfer/topk.py", "flashinfer/jit/topk.py", "flashinfer/jit/core.py", "flashinfer/utils.py",
                 "flashinfer/trace/templates/sampling.py", "flashinfer/data/csrc/topk.cu",
                 "flashinfer/data/csrc/cub_topk.cu", "flashinfer/data/include/flashinfer/topk.cuh",
                 "flashinfer/data/cccl/cub/cub/device/device_topk.cuh"):
        assert kept("flashinfer", name), name
    assert not kept("flashinfer", "flashinfer/data/csrc/fmha_v2/fmha.cu")
    assert not kept("flashinfer", "flashinfer/cake_sampling.py")
    assert not kept("flashinfer", "flashinfer/data/cutlass/x.h")


# --- loading: the stand-ins answer every import the launchers make, and no package __init__ runs


def _tree(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


_RAISES = "raise ImportError('this __init__ pulls in the serving stack')\n"


@pytest.fixture
def fresh_modules(monkeypatch):
    """Drop the packages a test builds from sys.modules afterwards (and any before)."""
    def drop():
        for name in [m for m in sys.modules if m.split(".")[0] in ("sglang", "flashinfer")]:
            del sys.modules[name]
    drop()
    yield
    drop()


def test_sglang_kernels_layout_loads_through_its_stand_ins(tmp_path, monkeypatch, fresh_modules):
    dsv4 = "sglang/kernels/ops/attention/dsv4"
    _tree(tmp_path, {
        "sglang/__init__.py": _RAISES, "sglang/kernels/__init__.py": _RAISES, "sglang/kernels/ops/__init__.py": _RAISES,
        "sglang/kernels/ops/attention/__init__.py": _RAISES, f"{dsv4}/__init__.py": _RAISES,
        "sglang/srt/__init__.py": _RAISES, "sglang/srt/utils/__init__.py": _RAISES,
        "sglang/srt/environ.py": "envs = 'real environ'\n",
        "sglang/kernels/jit/__init__.py": "",
        "sglang/kernels/jit/utils.py": "from sglang.srt.utils.common import is_cuda, get_cuda_version\n"
                                       "from sglang.srt.environ import envs\n",
        f"{dsv4}/compress.py": "from sglang.kernels.jit.utils import envs\n"
                               "from sglang.srt.layers.attention.dsa.utils import (INDEXER_K_CACHE_PRESHUFFLE_TILE,\n"
                               "    aiter_can_use_preshuffle_paged_mqa)\n"
                               "from sglang.srt.utils import is_gfx95_supported, is_hip, is_xpu\n"
                               "from .utils import make_name\n"
                               "assert not is_hip() and not is_xpu() and not aiter_can_use_preshuffle_paged_mqa()\n"
                               "compress_forward = (envs, INDEXER_K_CACHE_PRESHUFFLE_TILE)\n",
        f"{dsv4}/utils.py": "make_name = str\n",
        f"{dsv4}/topk.py": "from sglang.srt.utils import is_xpu\n"
                           "topk_transform_paged, topk_transform_paged_v2, plan_topk_v2 = 'v1', 'v2', 'plan'\n",
    })
    monkeypatch.setattr(sglang_dsv4, "_root", tmp_path / "sglang")
    assert sglang_dsv4.layout() == "kernels"
    assert sglang_dsv4._load("compress").compress_forward == ("real environ", 16)
    topk = sglang_dsv4._load("topk")
    assert (sglang_dsv4._topk_kernel(topk, "v1"), sglang_dsv4._topk_kernel(topk, "v2")) == ("v1", "v2")
    assert importlib.util.find_spec("sglang").submodule_search_locations == [str(tmp_path / "sglang")]


def test_sglang_jit_kernel_layout_loads_through_its_stand_ins(tmp_path, monkeypatch, fresh_modules):
    _tree(tmp_path, {
        "sglang/__init__.py": _RAISES, "sglang/jit_kernel/__init__.py": "",
        "sglang/jit_kernel/utils.py": "from sglang.utils import is_in_ci\nassert not is_in_ci()\n",
        "sglang/jit_kernel/dsv4/__init__.py": _RAISES,
        "sglang/jit_kernel/dsv4/topk.py": "from sglang.jit_kernel.utils import is_in_ci\n"
                                          "topk_transform_512, topk_transform_512_v2 = 'v1', 'v2'\n",
    })
    monkeypatch.setattr(sglang_dsv4, "_root", tmp_path / "sglang")
    assert sglang_dsv4.layout() == "jit_kernel"
    topk = sglang_dsv4._load("topk")
    assert (sglang_dsv4._topk_kernel(topk, "v1"), sglang_dsv4._topk_kernel(topk, "v2")) == ("v1", "v2")
    with pytest.raises(contract.Unsupported, match="neither"):
        sglang_dsv4.layout(tmp_path)


def test_flashinfer_topk_loads_without_its_package_init(tmp_path, monkeypatch, fresh_modules):
    _tree(tmp_path, {"flashinfer/__init__.py": _RAISES, "flashinfer/utils.py": "x = 1\n",
                     "flashinfer/topk.py": "from .utils import x\n"
                                           "def top_k_page_table_transform(input, src_page_table, lengths, k, *,"
                                           " page_size=1):\n    return x\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    topk = flashinfer_topk._load()
    assert topk.top_k_page_table_transform(None, None, None, 1) == 1
    assert "page_size" in flashinfer_topk._parameters(topk.top_k_page_table_transform)


def test_sglang_swa_ring_plans_need_the_kernels_layout(tmp_path, monkeypatch, fresh_modules):
    _tree(tmp_path, {"sglang/__init__.py": _RAISES, "sglang/jit_kernel/dsv4/__init__.py": _RAISES})
    monkeypatch.setattr(sglang_dsv4, "_root", tmp_path / "sglang")
    monkeypatch.setattr(sglang_dsv4, "RING_PLAN", "swa")
    with pytest.raises(contract.Unsupported, match="'swa' with sglang >= 0.5.2x"):
        sglang_dsv4.compress_plan(_i32(3, 4), _i32(1, 1), ratio=4, mode="ring", state_rows=_i32(0, 1))


def test_deepgemm_reports_why_it_does_not_load(monkeypatch):
    # as torch.ops.load_library fails on a _C.so linked against another torch: its message wraps dlopen's
    import builtins
    real_import = builtins.__import__

    def import_failing(name, *args, **kwargs):
        if name == "deep_gemm":
            try:
                raise OSError("_C.so: undefined symbol: _ZN3c104cuda19CUDAErrorLogCaptureC1Ev")
            except OSError as dlopen:
                raise OSError("Could not load this library: /tmp/site/deep_gemm/_C.so") from dlopen
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(deepgemm_logits, "unavailable", lambda device, *packages: None)
    monkeypatch.setattr(builtins, "__import__", import_failing)
    reason = deepgemm_logits.unavailable_reason("cuda")
    assert reason.startswith(f"deep_gemm does not load with torch {torch.__version__}")
    assert "Could not load this library" in reason and "CUDAErrorLogCapture" in reason
