"""DSV4_ATTENTION_Q=tma (docs/attn-s13a.md): the ws kernels' Q by TMA lands in exactly the swizzled layout the
producer's cp.async wrote (swizzled_offset), so the wgmma descriptors stay. A numpy model of a 2-D tiled TMA load
with CU_TENSOR_MAP_SWIZZLE_128B, run with the tensor map's arguments as sparse_attention.py encodes them and the
kernel's 8 copies (box c at dims 64 c, into chunk c of the tile), against swizzled_offset for every (head, 16-byte
piece) of a 64-head tile."""

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from harness import contract
from kernels_cuda import _loader
from tests.rebuilds import clear_loader_caches, decode_positions, skip_unless_ws, synced_call, tail_split

attn = importlib.import_module("kernels_cuda.sparse_attention")  # the module (the package exports the op by that name)
CU = (Path(__file__).parent.parent / "kernels_cuda" / "sparse_attention.cu").read_text()
BF16_BYTES = 2


def swizzled_offset(rows, r, piece):
    """sparse_attention.cu's swizzled_offset (its text is pinned by test_swizzled_offset_is_the_kernels)."""
    return (piece >> 3) * rows * 128 + r * 128 + (((piece & 7) ^ (r & 7)) << 4)


def test_swizzled_offset_is_the_kernels():
    body = re.search(r"unsigned int swizzled_offset\(int rows, int r, int piece\) \{\s*return ([^;]+);", CU).group(1)
    assert body == "(piece >> 3) * WG_CHUNK_BYTES(rows) + r * 128 + (((piece & 7) ^ (r & 7)) << 4)"
    assert "#define WG_CHUNK_BYTES(rows) ((rows) * 128)" in CU


def tma_swizzle_128b(offset):
    """CU_TENSOR_MAP_SWIZZLE_128B on a shared address (the destination 1024-byte aligned, as the tile is): the 16-byte
    unit within each 128-byte line (address bits 4..6) XOR the line's index within its 1024 bytes (bits 7..9)."""
    return offset ^ (((offset >> 7) & 7) << 4)


def tma_load_2d(global_bytes, dims, strides, box, coords, elem_bytes, swizzle):
    """Shared-memory image (bytes, box-sized) of one tiled 2-D TMA load: box element (x, y) (x innermost) from global
    element (coords[0] + x, coords[1] + y), written box-dense row by row, then the swizzle applied to each 16-byte
    unit's offset; out-of-bounds elements are zero (OOB_FILL_NONE)."""
    bx, by = box
    assert swizzle == attn.Q_TMA_SWIZZLE_128B and bx * elem_bytes <= 128  # the driver's rule for SWIZZLE_128B
    line = bx * elem_bytes
    image = np.zeros(bx * by * elem_bytes, dtype=np.uint8)
    for y in range(by):
        gy = coords[1] + y
        for x0 in range(0, line, 16):  # 16-byte units: the swizzle's grain
            gx = coords[0] + x0 // elem_bytes
            unit = np.zeros(16, dtype=np.uint8)
            if gy < dims[1] and gx < dims[0]:
                start = gy * strides[0] + gx * elem_bytes
                unit = global_bytes[start:start + 16]
            dst = tma_swizzle_128b(y * line + x0)
            image[dst:dst + 16] = unit
    return image


@pytest.mark.parametrize("batch,heads,row_block", [(2, 64, (1, 0)), (3, 128, (2, 1))])
def test_q_tma_lands_in_swizzled_offset_layout(batch, heads, row_block):
    rows = batch * heads
    data_type, dims, strides, box, swizzle, l2 = attn.q_tensor_map_args(rows)
    assert data_type == attn.Q_TMA_BF16 and dims == (contract.ATTN_DIM, rows) and strides == (1024,)
    assert box == (64, 64) and l2 in range(4)
    rng = np.random.default_rng(rows)
    q = rng.integers(1, 256, size=rows * dims[0] * BF16_BYTES, dtype=np.uint8)  # no zeros: a lost unit shows
    b, hb = row_block
    row0 = b * heads + hb * 64  # the kernels' (item % batch) * heads + (item / batch) * 64
    chunk_bytes = box[0] * box[1] * BF16_BYTES
    tile = np.zeros(8 * chunk_bytes, dtype=np.uint8)
    for c in range(8):  # ws_q_tma: copy c at coordinates {64 c, row0} into q_addr + c * WG_CHUNK_BYTES(64)
        tile[c * chunk_bytes:(c + 1) * chunk_bytes] = tma_load_2d(q, dims, strides, box, (64 * c, row0), BF16_BYTES,
                                                                   swizzle)
    assert chunk_bytes == 64 * 128  # WG_CHUNK_BYTES(64), the destination step in ws_q_tma
    for r in range(64):  # every (head, piece) where the producer's cp_async16 put it
        src = q[(row0 + r) * 1024:(row0 + r + 1) * 1024]
        for piece in range(64):
            off = swizzled_offset(64, r, piece)
            np.testing.assert_array_equal(tile[off:off + 16], src[piece * 16:piece * 16 + 16],
                                          f"head {r} piece {piece}")


def test_swizzle_model_is_a_permutation_that_moves_units():
    """The model's swizzle is a bijection of 16-byte units within each 1024 bytes and not the identity (a model that
    wrote linearly would fail the layout test above at every line r % 8 != 0)."""
    offsets = np.array([tma_swizzle_128b(u * 16) for u in range(64 * 8)])
    assert sorted(offsets) == [u * 16 for u in range(64 * 8)]
    assert (offsets != np.arange(64 * 8) * 16).sum() == 7 * 8 * 8


def test_ws_q_tma_issues_the_modelled_copies():
    """ws_q_tma's text: 8 copies (c = 0..7) at {c * 64, row0} to q_addr + c * WG_CHUNK_BYTES(64), armed for the whole
    tile (WG_MAT_BYTES = 64 KB) on one barrier; bar_q counts one arrival under WS_Q_TMA."""
    body = re.search(r"void ws_q_tma\(.*?\n}\n", CU, re.S).group(0)
    assert '"n"(WG_MAT_BYTES)' in body and "for (int c = 0; c < 8; ++c)" in body
    assert "q_addr + c * WG_CHUNK_BYTES(64)" in body and '"r"(c * 64), "r"(row0)' in body
    assert "cp.async.bulk.tensor.2d" in body and "mbarrier::complete_tx::bytes" in body
    assert "mbar_init(bar_q, WS_Q_TMA ? 1 : 128)" in CU


def test_tmap_argument_kind():
    """A tmap parameter takes tensor_map_tiled's 128 bytes (and nothing else), passed through as one 128-byte value."""
    params = (("i32", "batch"), ("tmap", "q_map"))
    blob = bytes(range(1, 129))
    values = _loader.launch_values("k", params, (4, blob))
    assert values[1].tobytes() == blob and values[1].dtype.itemsize == _loader.TENSOR_MAP_BYTES
    for bad in (blob[:64], bytearray(blob), 7):
        with pytest.raises(TypeError):
            _loader.launch_values("k", params, (4, bad))


def test_the_switched_ws_header_declares_the_tmap_signature():
    """The ws kernel's second header (#elif !WS_OUT_TMA) is the first's parameter list plus the tensor map, as the
    default SIGNATURES entry says (WS_Q_TMA on); the third (WS_OUT_TMA, docs/attn-s14c.md) the second's plus out's."""
    headers = re.findall(r"__global__[^;{]*?\bdsv4_sparse_attention_ws\(([^)]*)\)", CU)
    assert len(headers) == 3
    plain = [" ".join(re.findall(r"\w+", h)) for h in headers]
    assert plain[1] == plain[0] + " const __grid_constant__ WsQTensorMap q_map"
    assert plain[2] == plain[1] + " const __grid_constant__ WsQTensorMap out_map"
    names = [d.split()[1] for d in attn.SIGNATURES["dsv4_sparse_attention_ws"]]
    # the default entry (WS_OUT_TMA on too): the two maps last
    assert names[-2:] == ["q_map", "out_map"] and plain[0].split()[-1] == names[-3] == "kv_policy"


def test_q_switch_defaults_to_tma():
    assert attn.Q_LOAD == "tma" and attn.WS_Q_TMA and attn.DEFINES["WS_Q_TMA"] == 1
    assert attn.SIGNATURES["dsv4_sparse_attention_ws"][-2] == "tmap q_map"


WS_OUT_TMA = attn.WS_OUT_TMA  # the process's setting (the default: on), before a test switches it


def _q_load(monkeypatch, tma=True):
    """WS_Q_TMA on (tma) or off for this test: the define, the ws signature with or without its tmap, and the
    wrapper's flag (the loader's compiled-module and signature caches cleared, so that build and signature are
    used). Out's TMA stores (WS_OUT_TMA) take Q's map type: off with Q's copies, else the process's setting."""
    maps = ("tmap q_map", "tmap out_map")
    plain = tuple(a for a in attn.SIGNATURES["dsv4_sparse_attention_ws"] if a not in maps)
    out_tma = tma and WS_OUT_TMA
    monkeypatch.setitem(attn.DEFINES, "WS_Q_TMA", int(tma))
    monkeypatch.setitem(attn.DEFINES, "WS_OUT_TMA", int(out_tma))
    monkeypatch.setitem(attn.SIGNATURES, "dsv4_sparse_attention_ws", (*plain, *maps[:tma + out_tma]))
    monkeypatch.setattr(attn, "WS_Q_TMA", tma)
    monkeypatch.setattr(attn, "WS_OUT_TMA", out_tma)
    clear_loader_caches()


@pytest.mark.slow
@pytest.mark.parametrize("tail,ahead", [(0, 0), (1, 1)])
def test_q_tma_fits_the_ws_budget_without_spills_or_serialised_wgmma(monkeypatch, tail, ahead):
    # NVRTC (no GPU) of the four ws instantiations under WS_Q_TMA (and with the tail split and the ahead producer,
    # the other opt-in switches Q's refill meets): 168 registers, no spill or stack, and no wgmma serialised (C7518:
    # the refill first sat under warpgroup 0's last P V, in a divergent path, and ptxas serialised every wgmma)
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    _q_load(monkeypatch)
    if tail:
        tail_split(monkeypatch, attn)
    monkeypatch.setitem(attn.DEFINES, "WS_PRODUCER_AHEAD", ahead)
    monkeypatch.setitem(attn.DEFINES, "WS_PRODUCER_LEAN", 0)  # ahead is a form of the loads producer
    exprs = [e for e in _loader.KERNELS["sparse_attention.cu"] if e.startswith("dsv4_sparse_attention_ws<")]
    assert len(exprs) == 4
    monkeypatch.setitem(_loader.KERNELS, "sparse_attention.cu", exprs)
    _, lowered, log = _loader.compile_cubin("sparse_attention.cu", "sm_90a")
    assert "C7518" not in log
    res = build.resources(log, lowered)
    for expr in exprs:
        r = res[expr]
        assert r["registers"] <= 168 and r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, (expr, r)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["split", "persistent", "h128", "tail"])
def test_q_tma_writes_the_defaults_bits_on_the_gpu(monkeypatch, shape):
    # the same call with the ws kernels built under WS_Q_TMA and with the process's own build: out and lse bit for
    # bit. split: 64 rows of 64 heads, 2 splits in clusters (decode b64 H64); persistent: 300 rows of 64 heads (3
    # items on some CTAs: Q refilled by refill_q); h128: 64 rows of 128 heads, K 1152 (both head blocks' Q rows);
    # tail: persistent with the tail split (its pieces' Q rows). Short rows (-1 padded lists) and a sink in each
    import torch
    from harness import inputs
    skip_unless_ws(attn)
    batch, heads, topk = {"split": (64, 64, 512), "persistent": (300, 64, 512), "h128": (64, 128, 1024),
                          "tail": (300, 64, 512)}[shape]
    positions = decode_positions(batch)
    x = inputs.attention_inputs(positions=positions, heads=heads, topk=topk, seed=batch + heads, device="cuda")
    if shape == "tail":
        tail_split(monkeypatch, attn)

    run = synced_call(attn.sparse_attention, x)
    try:
        _q_load(monkeypatch, tma=False)
        default = run()
        _q_load(monkeypatch, tma=True)
        tma = run()
    finally:
        monkeypatch.undo()
        clear_loader_caches()
    assert torch.equal(tma[0], default[0]) and torch.equal(tma[1], default[1])
    assert torch.isfinite(default[0].float()).all() and torch.isfinite(default[1]).all()
