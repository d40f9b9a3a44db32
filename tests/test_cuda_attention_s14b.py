"""DSV4_ATTENTION_P_STORE=stmatrix (docs/attn-s14b.md): the ws math warpgroups store P_A and P_B by 4 stmatrix.x4 a
thread (ws_stmatrix_p) instead of store_p_swizzled's 16 st.shared.b32. CPU: a numpy model of stmatrix that the
kernel's addresses write the bytes store_p_swizzled wrote; NVRTC (slow): the budget and no serialised wgmma; GPU: the
default's bits."""

import importlib
import re
from pathlib import Path

import numpy as np
import pytest
from tests.rebuilds import decode_positions, rebuilt_runs, skip_unless_ws, synced_call, ws_budget

attn = importlib.import_module("kernels_cuda.sparse_attention")  # the module (the package exports the op by that name)
CU = (Path(__file__).parent.parent / "kernels_cuda" / "sparse_attention.cu").read_text()


def test_p_store_defaults_to_stmatrix():  # since session 15
    assert attn.P_STORES == ("sts", "stmatrix")
    assert attn.P_STORE == "stmatrix" and attn.DEFINES["WS_P_STMATRIX"] == 1


def test_stmatrix_address_text_is_the_kernels():
    body = re.search(r"void ws_stmatrix_p\(.*?\n\}", CU, re.S).group(0)
    assert "const int lane = threadIdx.x & 31, mat = lane >> 3;" in body
    assert "const int row = ((threadIdx.x >> 5) & 3) * 16 + 8 * (mat & 1) + (lane & 7);" in body
    assert re.search(r"stmatrix_x4\(pb_addr \+ row \* 128 \+ \(\(\(2 \* ks \+ \(mat >> 1\)\) \^ \(lane & 7\)\) << 4\), "
                     r"p\[ks\]\[0\], p\[ks\]\[1\], p\[ks\]\[2\],\s+p\[ks\]\[3\]\);", body)


def _stmatrix_row_address(warp, lane, ks):
    """ws_stmatrix_p's address of lane `lane` (warp `warp`) for k-step ks, as the .cu computes it (pinned above)."""
    mat = lane >> 3
    row = (warp & 3) * 16 + 8 * (mat & 1) + (lane & 7)
    return row * 128 + (((2 * ks + (mat >> 1)) ^ (lane & 7)) << 4)


def test_stmatrix_store_writes_the_default_p_block():
    # stmatrix.m8n8.x4.b16: matrix i's row j goes to the address lane 8 i + j gives; lane l's register i holds row
    # l >> 2, columns 2 (l & 3), + 1 of matrix i (the mma layout), so its word lands at row_address(8 i + (l >> 2)) +
    # 4 (l & 3). The image must equal store_p_swizzled's: r * 128 + ((nt ^ g) << 4) + 4 t for s[4 nt + 2 h ..]
    rng = np.random.default_rng(14)
    default, stm = {}, {}
    for warp in range(4):
        p_of = {}
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            r_lo = (warp & 3) * 16 + g
            s = rng.integers(1, 2**31, size=32)  # distinct stand-ins for s[0..31]
            # p_fragments: p[ks][j] = pack_bf16(s[8 ks + 2 j], s[8 ks + 2 j + 1])
            p_of[lane] = [[(s[8 * ks + 2 * j], s[8 * ks + 2 * j + 1]) for j in range(4)] for ks in range(4)]
            for nt in range(8):
                default[r_lo * 128 + ((nt ^ g) << 4) + 4 * t] = (s[4 * nt], s[4 * nt + 1])
                default[(r_lo + 8) * 128 + ((nt ^ g) << 4) + 4 * t] = (s[4 * nt + 2], s[4 * nt + 3])
        for ks in range(4):
            for lane in range(32):
                for i in range(4):
                    at = _stmatrix_row_address(warp, 8 * i + (lane >> 2), ks) + 4 * (lane & 3)
                    assert at not in stm
                    stm[at] = p_of[lane][ks][i]
    assert len(default) == 64 * 64 * 2 // 4 and sorted(default) == list(range(0, 64 * 128, 4))
    assert stm == default


def test_stmatrix_rows_are_bank_conflict_free():
    # each 8-lane address group (one matrix) covers 8 distinct 16-byte bank groups: one wavefront a matrix
    for warp in range(4):
        for ks in range(4):
            for i in range(4):
                groups = {(_stmatrix_row_address(warp, 8 * i + j, ks) >> 4) & 7 for j in range(8)}
                assert len(groups) == 8


@pytest.mark.slow
def test_stmatrix_fits_the_ws_budget_without_spills_or_serialised_wgmma(monkeypatch):
    # NVRTC (no GPU) of the four ws instantiations under WS_P_STMATRIX: 168 registers, no spill or stack (13.0, the
    # GPU image's), no wgmma serialised (P_B's stmatrix reads the A fragments of the P V in flight)
    ws_budget(monkeypatch, {"WS_P_STMATRIX": 1})


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["split", "persistent", "h128", "short"])
def test_stmatrix_writes_the_defaults_bits_on_the_gpu(monkeypatch, shape):
    # the same call with the ws kernels built with the sts stores and under WS_P_STMATRIX: out and lse bit for
    # bit (the same P words at the same bytes). split: 64 rows of 64 heads, 2 splits in clusters (the one-item body);
    # persistent: 300 rows of 64 heads (the persistent body, 3 items on some CTAs); h128: 64 rows of 128 heads, K 1152;
    # short: 140 rows, K 640 (top-k 512 + window 128), most lists short (-1 padded, masked columns, pairs with one
    # block). A sink in each
    import torch
    from harness import inputs
    skip_unless_ws(attn)
    batch, heads, topk = {"split": (64, 64, 512), "persistent": (300, 64, 512), "h128": (64, 128, 1152),
                          "short": (140, 64, 512)}[shape]
    positions = decode_positions(batch)
    if shape == "short":
        positions = [1 + 9 * i for i in range(batch)]  # rows of 1 .. 1252 positions: most lists shorter than K
    x = inputs.attention_inputs(positions=positions, heads=heads, topk=topk, seed=batch + heads + 14, device="cuda")

    run = synced_call(attn.sparse_attention, x)
    default, stm = rebuilt_runs(monkeypatch, attn.DEFINES, [{"WS_P_STMATRIX": 0}, {"WS_P_STMATRIX": 1}], run)
    assert torch.equal(stm[0], default[0]) and torch.equal(stm[1], default[1])
    assert torch.isfinite(default[0].float()).all() and torch.isfinite(default[1]).all()
