"""SPEC 8, `sparse_attention_fp8`: the contract's validator, the harness's quantiser and cache
builder, the float64 reference against SPEC 4's, and the torch and Triton (interpreter) versions
against the reference."""

import pytest
import torch

import kernels_torch
import references as R
from harness import comparators, contract as C, inputs as I

SCALE = 512 ** -0.5


def small_case(page_size=64, heads=16, positions=(300, 5, 0), topk=64, seed=3, **kw):
    return I.attention_fp8_inputs(positions=list(positions), heads=heads, topk=topk, page_size=page_size,
                                  seed=seed, **kw)


# ---------------------------------------------------------------------------------------------
# contract


@pytest.mark.parametrize("page_size, stride", [(2, 1728), (64, 37440), (256, 149760), (1, 1152)])
def test_engine_page_stride_is_584_bytes_a_token_rounded_up_to_576(page_size, stride):
    assert C.fp8_kv_page_stride(page_size) == stride
    assert stride % C.FP8_KV_STRIDE_MULTIPLE == 0 and stride >= C.FP8_KV_TOKEN_BYTES * page_size


def _bad(mutate):
    x = small_case(page_size=2)
    q, cache, idx = x.args
    kwargs = dict(x.kwargs)
    args = [q, cache, idx]
    mutate(args, kwargs)
    return args, kwargs


@pytest.mark.parametrize("argument, mutate", [
    ("q", lambda a, k: a.__setitem__(0, a[0].float())),
    ("q", lambda a, k: a.__setitem__(0, a[0][..., :256].contiguous())),
    ("kv_cache", lambda a, k: a.__setitem__(1, a[1].view(torch.int8))),
    ("kv_cache", lambda a, k: a.__setitem__(1, a[1][:, :1168])),  # not contiguous
    ("kv_cache", lambda a, k: a.__setitem__(1, I.aligned_bytes((4, 1160)))),  # below 584 * 2
    ("kv_cache", lambda a, k: a.__setitem__(1, I.aligned_bytes((4, 1176)))),  # 1176 = 584 * 2 + 8, not 16k
    ("kv_cache", lambda a, k: a.__setitem__(1, I.aligned_bytes((4 * 1728 + 16,))[16:].view(4, 1728))),
    ("kv_cache", lambda a, k: a.__setitem__(1, I.aligned_bytes((0, 1728)))),
    ("indices", lambda a, k: a.__setitem__(2, a[2].long())),
    ("indices", lambda a, k: a.__setitem__(2, a[2][:2])),
    ("indices", lambda a, k: a[2].__setitem__((1, 3), -2)),
    ("indices", lambda a, k: a[2].__setitem__((2, 0), a[1].shape[0] * 2)),  # one past the last slot
    ("page_size", lambda a, k: k.__setitem__("page_size", 3)),
    ("page_size", lambda a, k: k.__setitem__("page_size", 512)),
    ("page_size", lambda a, k: k.__setitem__("page_size", 2.0)),
    ("kv_cache", lambda a, k: k.__setitem__("page_size", 4)),  # stride 1728 < 584 * 4
    ("sm_scale", lambda a, k: k.__setitem__("sm_scale", float("nan"))),
    ("attn_sink", lambda a, k: k.__setitem__("attn_sink", k["attn_sink"][:8].clone())),
])
@pytest.mark.parametrize("backend", [R, kernels_torch], ids=["reference", "torch"])
def test_bad_input_is_a_value_error_naming_the_argument(argument, mutate, backend):
    args, kwargs = _bad(mutate)
    with pytest.raises(C.InputError) as err:
        backend.sparse_attention_fp8(*args, **kwargs)
    assert err.value.argument == argument


def test_index_range_is_checked_only_when_validating():
    x = small_case(page_size=2)
    q, cache, idx = x.args
    idx = idx.clone()
    idx[0, 0] = cache.shape[0] * 2
    with pytest.raises(C.InputError):
        C.check_sparse_attention_fp8(q, cache, idx, **x.kwargs)
    layout = C.check_sparse_attention_fp8(q, cache, idx, **x.kwargs, validate=False)
    assert (layout.batch, layout.heads, layout.topk, layout.page_size, layout.page_stride) == (3, 16, 192, 2, 1728)


# ---------------------------------------------------------------------------------------------
# quantiser and cache


def test_quantiser_follows_the_spec_formula_tile_by_tile():
    x = torch.zeros(1, 512)
    x[0, :64] = torch.linspace(-3, 3, 64)  # amax 3: e = ceil(log2(3 / 448)) = -7
    x[0, 64:128] = 448 * 2.0 ** 5 * torch.linspace(-1, 1, 64)  # amax exactly 448 * 2^5: e = 5
    x[0, 128:192] = 1e-6  # below the 1e-4 clamp: e = ceil(log2(1e-4 / 448)) = -22
    x[0, 192:448] = torch.randn(256, generator=I.generator(0))
    x[0, 448:] = torch.linspace(-1000, 1000, 64)  # RoPE: kept in bf16
    x = x.bfloat16()
    e4m3, scale_bytes, rope = I.quantize_attention_rows(x)
    assert scale_bytes[0, :3].tolist() == [127 - 7, 127 + 5, 127 - 22]
    assert e4m3[0, 64:128].float().abs().max() == 448  # the tile's amax maps to e4m3's largest
    assert torch.equal(rope, x[:, 448:])
    # round to nearest even: 2^-7 * 17 / 8 lies halfway between e4m3 codes 2 and 2.25 (step 0.25 in [2, 4))
    half = torch.zeros(1, 512)
    half[0, 0], half[0, 1] = 3.0, 2.125 * 2.0 ** -7
    assert I.quantize_attention_rows(half.bfloat16())[0][0, 1].float() * 2.0 ** -7 == 2.0 * 2.0 ** -7


def test_dequantised_rows_are_exact_in_bf16_and_within_e4m3_rounding():
    x = I.attention_fp8_rows(64, I.generator(1))
    deq = I.dequantize_attention_rows(*I.quantize_attention_rows(x))
    assert torch.equal(deq.bfloat16().double(), deq)
    ref = x.double()
    nope_err = (deq[:, :448] - ref[:, :448]).abs()
    # e4m3 keeps 3 mantissa bits: relative error <= 2^-4 at normal codes; tiny values are absolute
    tile_amax = ref[:, :448].abs().unflatten(1, (7, 64)).amax(-1).repeat_interleave(64, dim=1)
    assert (nope_err <= torch.maximum(ref[:, :448].abs() * 2.0 ** -4, tile_amax * 2.0 ** -12)).all()
    assert nope_err.max() > 0  # the rows really were quantised
    assert torch.equal(deq[:, 448:], ref[:, 448:])


@pytest.mark.parametrize("page_size", [2, 64, 256])
def test_cache_holds_the_records_where_the_spec_says(page_size):
    x = small_case(page_size=page_size)
    q, cache, idx = x.args
    rows, slots = x.extra["rows"], x.extra["slots"]
    assert cache.data_ptr() % C.FP8_KV_ALIGN == 0 and cache.shape[1] == C.fp8_kv_page_stride(page_size)
    want = I.quantize_attention_rows(rows)
    got = I.read_attention_fp8_cache(cache, slots, page_size)
    assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8))
    assert torch.equal(got[1], want[1]) and torch.equal(got[2].view(torch.int16), want[2].view(torch.int16))
    # byte 7 of each written scale group is poisoned
    flat = cache.reshape(-1).long()
    page, o = slots // page_size, slots % page_size
    byte7 = page * cache.shape[1] + 576 * page_size + 8 * o + 7
    assert (flat[byte7] == 0xFF).all()
    # the index set reaches the first and the last slot of the pool; pages are scattered
    named = idx[idx >= 0]
    assert int(named.min()) == 0 and int(named.max()) == cache.shape[0] * page_size - 1
    assert (idx == -1).any()


# ---------------------------------------------------------------------------------------------
# the reference and the backends


def test_reference_is_spec4_over_the_dequantised_rows():
    x = small_case(page_size=2, sink=True)
    q, cache, idx = x.args
    got = x.call(R.sparse_attention_fp8)
    rows, slots = x.extra["rows"], x.extra["slots"]
    kv = I.dequantize_attention_rows(*I.quantize_attention_rows(rows)).bfloat16()  # exact in bf16
    pool_of_slot = torch.full((cache.shape[0] * 2,), -1, dtype=torch.int32)
    pool_of_slot[slots] = torch.arange(len(slots), dtype=torch.int32)
    logical = torch.where(idx >= 0, pool_of_slot[idx.long().clamp_min(0)], -1).int()
    want = R.sparse_attention(q, kv, logical, sm_scale=SCALE, attn_sink=x.kwargs["attn_sink"])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert got[1].isfinite().all() and got[0].abs().max() > 0


def edge_cases():
    """Small SPEC 8 edge cases: page sizes 2, 64, 256; -1 rows, an empty row, duplicates, scales
    across the e4m3 range, a large RoPE part, no sink, K not a multiple of 64."""
    yield "page2", small_case(page_size=2)
    yield "page256", small_case(page_size=256, sink=False)
    gen = I.generator(7)
    idx = I.random_indices(4, 70, 500, 0.3, gen)
    idx[2] = -1  # an empty row
    I.duplicate_some_indices(idx, gen)
    yield "dups_empty_k70", I.attention_fp8_inputs(heads=32, indices=idx, pool_rows=500, page_size=64, seed=7)
    yield "scale_range", I.attention_fp8_inputs(heads=16, indices=I.random_indices(2, 64, 300, 0.1, gen),
                                                pool_rows=300, page_size=64, seed=8, tile_log2=(-16.0, 3.0))
    yield "rope_large", small_case(page_size=64, rope_scale=30.0, seed=9)
    # a stride past the engines' (a pool with more per page), so page bases assumed from page_size fail
    yield "wide_stride", small_case(page_size=2, heads=64, positions=(130,), seed=10, page_stride=1728 + 3 * 576)


def run(backend, x):
    out, lse = x.call(backend.sparse_attention_fp8)
    return {"out": out, "lse": lse}


@pytest.mark.parametrize("backend", ["kernels_torch", "kernels_triton"])
@pytest.mark.parametrize("name, case", list(edge_cases()), ids=[n for n, _ in edge_cases()])
def test_backend_matches_the_reference(name, case, backend):
    module = pytest.importorskip(backend)
    if getattr(module, "unavailable_reason", lambda d: None)("cpu"):
        pytest.skip(module.unavailable_reason("cpu"))
    report = comparators.sparse_attention_fp8(run(module, case), run(R, case))
    assert report.ok, report.message


def test_cache_bytes_no_index_names_do_not_reach_the_result():
    x = small_case(page_size=64)
    q, cache, idx = x.args
    slots = x.extra["slots"]
    named = torch.zeros(cache.shape[0] * 64, dtype=torch.bool)
    named[idx[idx >= 0].long()] = True
    # rewrite every byte outside the named records (other slots, byte 7, padding) with other garbage
    keep = torch.zeros(cache.numel(), dtype=torch.bool)
    for s in named.nonzero().flatten().tolist():
        page, o = divmod(s, 64)
        keep[page * cache.shape[1] + 576 * o:page * cache.shape[1] + 576 * (o + 1)] = True
        scales = page * cache.shape[1] + 576 * 64 + 8 * o
        keep[scales:scales + 7] = True
    other = cache.clone()
    other.view(-1)[~keep] = I.garbage((int((~keep).sum()),), torch.uint8, I.generator(99))
    assert not torch.equal(other, cache) and len(slots) > int(named.sum())
    moved = I.OpInputs((q, I.aligned_bytes(cache.shape).copy_(other), idx), x.kwargs)
    import kernels_triton
    for backend in (R, kernels_torch, kernels_triton):
        a, b = run(backend, x), run(backend, moved)
        assert torch.equal(a["out"], b["out"]) and torch.equal(a["lse"], b["lse"])


def test_empty_row_gives_zero_and_minus_inf():
    idx = torch.full((2, 64), -1, dtype=torch.int32)
    idx[1, :5] = torch.arange(5)
    x = I.attention_fp8_inputs(heads=16, indices=idx, pool_rows=5, page_size=2, seed=4)
    for backend in (R, kernels_torch):
        out, lse = x.call(backend.sparse_attention_fp8)
        assert (out[0] == 0).all() and torch.isneginf(lse[0]).all()
        assert lse[1].isfinite().all() and out[1].abs().max() > 0


def test_comparator_rejects_a_direction_error_the_elementwise_bound_allows():
    x = small_case(page_size=64)
    ref = run(R, x)
    bent = dict(ref)
    out = ref["out"].double()
    # 0.5% of each row's largest entry added everywhere: inside 1e-2 * max(1, |ref|), yet off in angle
    bent["out"] = (out + 0.005 * out.abs().amax(-1, keepdim=True).clamp_max(1.0)).bfloat16()
    assert comparators.sparse_attention(bent, ref).ok
    report = comparators.sparse_attention_fp8(bent, ref)
    assert not report.ok and "cosine" in report.message
    assert comparators.sparse_attention_fp8(run(kernels_torch, x), ref).ok


# ---------------------------------------------------------------------------------------------
# the harness around the op: fuzzer, work model, declining backends


def test_fuzzer_draws_every_page_size_stride_and_scale_range():
    from harness import cases
    draws = [cases.fuzz_case("sparse_attention_fp8", seed).params for seed in range(300)]
    assert {p["page_size"] for p in draws} == {1, 2, 4, 16, 64, 128, 256}
    strides = [(p["page_size"], p["page_stride"]) for p in draws if "page_stride" in p]
    assert strides and all(s > C.fp8_kv_page_stride(ps) and s % 16 == 0 for ps, s in strides)
    assert {tuple(p["tile_log2"]) for p in draws} == {(-2.0, 2.0), (-16.0, 3.0), (-24.0, -10.0)}
    assert any(p.get("empty_rows") for p in draws) and any(p.get("duplicates") for p in draws)
    assert any(p.get("random") for p in draws) and any(p.get("ratio") == 128 for p in draws)


def test_triton_passes_fuzz_cases():
    from harness import backends, cases, check
    backend = backends.load("triton", "cpu")
    for case in cases.fuzz(["sparse_attention_fp8"], 3, seed=11):
        r = check.check_case(backend, case, "cpu")
        assert r.verdict == "pass", f"{case.name}: {r.message}"


def test_roofline_counts_584_bytes_per_distinct_slot():
    from harness import roofline
    idx = torch.tensor([[0, 5, 5, -1], [5, 7, 9, 9]], dtype=torch.int32)
    x = I.attention_fp8_inputs(heads=16, indices=idx, pool_rows=10, page_size=2, seed=1)
    work = roofline.sparse_attention_fp8_work(x)
    distinct = 4  # the slots of logical rows 0, 5, 7, 9
    assert work.bytes == 2 * 16 * 512 * 2 * 2 + distinct * 584 + idx.numel() * 4 + 2 * 16 * 4
    assert work.flops == 4 * 16 * 512 * 7  # 7 valid picks, duplicates counted


@pytest.mark.parametrize("module", ["kernels_peers.flashmla_sparse", "kernels_peers.sglang_dsv4",
                                    "kernels_peers.deepgemm_logits", "kernels_peers.flashinfer_topk"])
def test_backends_without_the_kernel_validate_then_decline(module):
    import importlib
    op = importlib.import_module(module).sparse_attention_fp8
    x = small_case(page_size=2)
    with pytest.raises(C.Unsupported):
        x.call(op)
    args, kwargs = _bad(lambda a, k: k.__setitem__("page_size", 3))
    with pytest.raises(C.InputError):
        op(*args, **kwargs)


def test_cuda_validates_then_declines_off_hopper_with_the_reason():
    import kernels_cuda
    x = small_case(page_size=2)
    with pytest.raises(C.Unsupported, match="CUDA devices only"):
        x.call(kernels_cuda.sparse_attention_fp8)
    args, kwargs = _bad(lambda a, k: a.__setitem__(1, a[1][:, :1168]))  # not contiguous: checked first
    with pytest.raises(C.InputError) as err:
        kernels_cuda.sparse_attention_fp8(*args, **kwargs)
    assert err.value.argument == "kv_cache"
