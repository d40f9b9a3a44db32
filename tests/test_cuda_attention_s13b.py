"""DSV4_ATTENTION_MATH=split (docs/attn-s13b.md): the ws math warpgroups' softmax reordered (max published before the
exponentials, the own block's P V a k-step at a time, sums after the issue, P_B stored from the bf16 fragments, the
valid-row flags tested in PTX). CPU: a numpy model that the fragment store writes the bytes store_p_swizzled wrote,
and that the PTX flag test masks the columns masked_row_max_raw masked; NVRTC (slow): the budget and no serialised
wgmma; GPU: the default's bits."""

import importlib
import re
from pathlib import Path

import numpy as np
import pytest
from tests.rebuilds import decode_positions, rebuilt_runs, skip_unless_ws, synced_call, ws_budget

attn = importlib.import_module("kernels_cuda.sparse_attention")  # the module (the package exports the op by that name)
CU = (Path(__file__).parent.parent / "kernels_cuda" / "sparse_attention.cu").read_text()


def test_split_is_opt_in():
    assert attn.MATHS == ("base", "split")
    assert attn.MATH == "base" and not attn.WS_MATH_SPLIT and attn.DEFINES["WS_MATH_SPLIT"] == 0


def _thread_rows(lane, warp):
    """A math thread's (r_lo, r_hi, g, t), as the ws kernel computes them (warp & 3: the warpgroup's quarter)."""
    g, t = lane >> 2, lane & 3
    r_lo = (warp & 3) * 16 + g
    return r_lo, r_lo + 8, g, t


def _store_p_swizzled(image, s_words, r_lo, r_hi, g, t):
    """store_p_swizzled with s already packed: s_words[(nt, half)] = pack_bf16(s[4 nt + 2 half], s[4 nt + 2 half + 1])
    (half 0: row lo, 1: row hi), at row * 128 + ((nt ^ g) << 4) + 4 t."""
    for nt in range(8):
        image[r_lo * 128 + ((nt ^ g) << 4) + 4 * t] = s_words[(nt, 0)]
        image[r_hi * 128 + ((nt ^ g) << 4) + 4 * t] = s_words[(nt, 1)]


def _store_p_fragments(image, p, r_lo, r_hi, g, t):
    """ws_store_p_fragments, as the .cu writes it (pinned by test_fragment_store_text_is_the_kernels)."""
    for ks in range(4):
        image[r_lo * 128 + (((2 * ks) ^ g) << 4) + 4 * t] = p[ks][0]
        image[r_hi * 128 + (((2 * ks) ^ g) << 4) + 4 * t] = p[ks][1]
        image[r_lo * 128 + (((2 * ks + 1) ^ g) << 4) + 4 * t] = p[ks][2]
        image[r_hi * 128 + (((2 * ks + 1) ^ g) << 4) + 4 * t] = p[ks][3]


def test_fragment_store_text_is_the_kernels():
    body = re.search(r"void ws_store_p_fragments\(.*?\n\}", CU, re.S).group(0)
    store = r"pb \+ (r_lo|r_hi) \* 128 \+ \(\(\((2 \* ks(?: \+ 1)?)\) \^ g\) << 4\) \+ 4 \* t\) = p\[ks\]\[(\d)\]"
    stores = re.findall(store, body)
    assert stores == [("r_lo", "2 * ks", "0"), ("r_hi", "2 * ks", "1"), ("r_lo", "2 * ks + 1", "2"),
                      ("r_hi", "2 * ks + 1", "3")]
    # p_fragments' packing, which both stores read: k-step ks is s[8 ks .. 8 ks + 7] in pairs
    pf = re.search(r"void p_fragments\(.*?\n\}", CU, re.S).group(0)
    for j in range(4):
        lo, hi = (f"8 * ks + {2 * j}" if j else "8 * ks"), f"8 * ks + {2 * j + 1}"
        assert f"p[ks][{j}] = pack_bf16(s[{lo}], s[{hi}]);" in pf


def test_fragment_store_writes_the_default_p_block():
    # every word of the 64 x 64 bf16 P block (8 KB: 2048 words) written once by the 128 threads of a warpgroup, the
    # fragment store's image equal to store_p_swizzled's for a random S (the words stand for the packed bf16 pairs)
    rng = np.random.default_rng(13)
    default, fragments = {}, {}
    for warp in range(4):
        for lane in range(32):
            r_lo, r_hi, g, t = _thread_rows(lane, warp)
            s = rng.integers(1, 2**31, size=32)  # distinct stand-ins for s[0..31]
            # pack_bf16(s[a], s[b]) as the pair (a, b): p_fragments' p[ks][j] = (s[8 ks + 2 j], s[8 ks + 2 j + 1])
            p = [[(s[8 * ks + 2 * j], s[8 * ks + 2 * j + 1]) for j in range(4)] for ks in range(4)]
            words = {(nt, h): (s[4 * nt + 2 * h], s[4 * nt + 2 * h + 1]) for nt in range(8) for h in range(2)}
            _store_p_swizzled(default, words, r_lo, r_hi, g, t)
            _store_p_fragments(fragments, p, r_lo, r_hi, g, t)
    assert len(default) == 64 * 64 * 2 // 4 and sorted(default) == list(range(0, 64 * 128, 4))
    assert fragments == default


def _mask_raw(s, valid):
    """ws_masked_row_max_raw's columns: bit 2 nt + e of valid keeps s[4 nt + e] and s[4 nt + 2 + e]."""
    out = s.copy()
    for nt in range(8):
        for e in range(2):
            if not (valid >> (2 * nt + e)) & 1:
                out[4 * nt + e] = out[4 * nt + 2 + e] = -np.inf
    return out


def _mask_bits(s, valid):
    """ws_masked_row_max_bits: ws_mask_pair(s[4 nt], s[4 nt + 2], 1 << 2 nt), (s[4 nt + 1], s[4 nt + 3], 2 << 2 nt); the
    PTX keeps a pair where valid & bit != 0 (pinned by test_flag_test_text_is_the_kernels)."""
    out = s.copy()
    for nt in range(8):
        for (a, b), bit in (((4 * nt, 4 * nt + 2), 1 << (2 * nt)), ((4 * nt + 1, 4 * nt + 3), 2 << (2 * nt))):
            if not valid & bit:
                out[a] = out[b] = -np.inf
    return out


def test_flag_test_text_is_the_kernels():
    body = re.search(r"void ws_masked_row_max_bits\(.*?\n\}", CU, re.S).group(0)
    assert "ws_mask_pair(s[4 * nt], s[4 * nt + 2], valid, 1u << (2 * nt));" in body
    assert "ws_mask_pair(s[4 * nt + 1], s[4 * nt + 3], valid, 2u << (2 * nt));" in body
    pair = re.search(r"void ws_mask_pair\(.*?\n\}", CU, re.S).group(0)
    assert "and.b32 r, %2, %3" in pair and "setp.ne.b32 p, r, 0" in pair
    assert "selp.f32 %0, %0, 0fFF800000, p" in pair and "selp.f32 %1, %1, 0fFF800000, p" in pair


def test_flag_test_masks_the_default_columns():
    rng = np.random.default_rng(5)
    s = rng.standard_normal(32).astype(np.float32) * 4
    for valid in [0, 0xFFFF, 0x5555, 0xAAAA, 1, 0x8000, *rng.integers(0, 1 << 16, size=50)]:
        assert np.array_equal(_mask_bits(s, int(valid)), _mask_raw(s, int(valid)))


@pytest.mark.slow
def test_split_fits_the_ws_budget_without_spills_or_serialised_wgmma(monkeypatch):
    # NVRTC (no GPU) of the four ws instantiations under WS_MATH_SPLIT: 168 registers, no spill or stack, and no wgmma
    # serialised (C7515: the k-step issue in the persistent body's warpgroup 1; C7512: the sums before the issue there)
    ws_budget(monkeypatch, {"WS_MATH_SPLIT": 1})


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["split", "persistent", "h128"])
def test_split_writes_the_defaults_bits_on_the_gpu(monkeypatch, shape):
    # the same call with the ws kernels built under WS_MATH_SPLIT and with the process's own build: out and lse bit for
    # bit (the same operations on the same values in the same order). split: 64 rows of 64 heads, 2 splits in
    # clusters (the one-item body); persistent: 300 rows of 64 heads (the persistent body, 3 items on some CTAs); h128:
    # 64 rows of 128 heads, K 1152. Short rows (-1 padded lists, masked columns) and a sink in each
    import torch
    from harness import inputs
    skip_unless_ws(attn)
    if attn.WS_MATH_SPLIT or not attn.WS_SOFTMAX_FFMA:
        pytest.skip("compares the base build with split: run without DSV4_ATTENTION_MATH / WS_SOFTMAX set")
    batch, heads, topk = {"split": (64, 64, 512), "persistent": (300, 64, 512), "h128": (64, 128, 1152)}[shape]
    positions = decode_positions(batch)
    x = inputs.attention_inputs(positions=positions, heads=heads, topk=topk, seed=batch + heads, device="cuda")

    run = synced_call(attn.sparse_attention, x)
    default, split = rebuilt_runs(monkeypatch, attn.DEFINES, [{}, {"WS_MATH_SPLIT": 1}], run)
    assert torch.equal(split[0], default[0]) and torch.equal(split[1], default[1])
    assert torch.isfinite(default[0].float()).all() and torch.isfinite(default[1]).all()
