"""DSV4_ATTENTION_WS_OUT=tma (docs/attn-s14c.md): the persistent ws epilogue stages an item's bf16 out as the
128-byte-swizzled tile (Q's layout) and stores it by 2-D TMA tensor stores over out's tensor map, 4 a warpgroup,
instead of 120 row copies. CPU: a numpy model that the kernel's stmatrix addresses plus the TMA stores put every
O element at its out row and dim; NVRTC (slow): the budget and no serialised wgmma; GPU: the default's bits."""

import importlib
import importlib.util
import re
import struct
from pathlib import Path

import pytest
from tests.rebuilds import clear_loader_caches, decode_positions, skip_unless_ws, synced_call, tail_split, ws_budget

attn = importlib.import_module("kernels_cuda.sparse_attention")  # the module (the package exports the op by that name)
CU = (Path(__file__).parent.parent / "kernels_cuda" / "sparse_attention.cu").read_text()
CHUNK_BYTES, HALF_BYTES = 64 * 128, 4 * 64 * 128  # WG_CHUNK_BYTES(64), WS_HALF_BYTES


def test_ws_out_defaults_to_tma():
    # the default since session 15 (bulk under DSV4_ATTENTION_Q=copies: out's map is Q's map type)
    assert attn.WS_OUTS == ("bulk", "tma")
    assert attn.WS_OUT == "tma" and attn.WS_OUT_TMA and attn.DEFINES["WS_OUT_TMA"] == 1
    assert attn.SIGNATURES["dsv4_sparse_attention_ws"][-2:] == ("tmap q_map", "tmap out_map")


def test_ws_out_defaults_to_bulk_under_q_copies(monkeypatch):
    monkeypatch.delenv("DSV4_ATTENTION_WS_OUT", raising=False)
    monkeypatch.setenv("DSV4_ATTENTION_Q", "copies")
    spec = importlib.util.spec_from_file_location("_s14c_probe_copies", attn.__file__)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    assert probe.WS_OUT == "bulk" and probe.DEFINES["WS_OUT_TMA"] == 0
    assert "tmap out_map" not in probe.SIGNATURES["dsv4_sparse_attention_ws"]


def _epilogue():
    return re.search(r"void ws_persistent_epilogue\(.*?\n\}\n", CU, re.S).group(0)


def test_staging_address_text_is_the_kernels():
    body = _epilogue()
    assert "const int stage_row = (warp & 3) * 16 + (lane & 7) + 8 * (mat & 1);" in body
    assert "const unsigned int row_addr = stage_addr + half * WS_HALF_BYTES + stage_row * 128;" in body
    assert "const int swizzle = ((mat >> 1) ^ (lane & 7)) << 4;" in body
    assert "return row_addr + (j >> 3) * WG_CHUNK_BYTES(64) + (((j & 7) << 4) ^ swizzle);" in body
    assert "ws_out_tma_chunks(out_map, stage_addr, 4 * half, b * heads + h0);" in body
    assert "wg_bar_sync(WS_BAR_OUT + half, 128);" in body and "b64 _, [%0], 128;" in body
    stores = re.search(r"void ws_out_tma_chunks\(.*?\n\}\n", CU, re.S).group(0)
    assert "for (int c = c0; c < c0 + 4; ++c)" in stores
    assert stores.count('"r"(c * 64), "r"(row0), "r"(tile_addr + c * WG_CHUNK_BYTES(64))') == 2
    assert stores.count("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == 2
    # ws_stmatrix_o's registers: (v[4 j], v[4 j + 1]) lo, (v[4 j + 2], + 3) hi, then the same at j + 1
    payload = re.search(r"void ws_stmatrix_o\(.*?\n\}\n", CU, re.S).group(0)
    assert "stmatrix_x4(address_of(j), pack_bf16(v[4 * j] * inv_lo, v[4 * j + 1] * inv_lo)," in payload
    assert "pack_bf16(v[4 * j + 6] * inv_hi, v[4 * j + 7] * inv_hi));" in payload


def _stage_address(warp, lane, j):
    """The epilogue's stmatrix address (relative to stage_addr) of lane `lane` of math warp `warp` at j (pinned)."""
    mat, half = lane >> 3, warp >> 2
    stage_row = (warp & 3) * 16 + (lane & 7) + 8 * (mat & 1)
    swizzle = ((mat >> 1) ^ (lane & 7)) << 4
    return half * HALF_BYTES + stage_row * 128 + (j >> 3) * CHUNK_BYTES + (((j & 7) << 4) ^ swizzle)


def tma_swizzle_128b(offset):
    """CU_TENSOR_MAP_SWIZZLE_128B on a 1024-byte-aligned shared tile (tests/test_attention_q_tma.py's model)."""
    return offset ^ (((offset >> 7) & 7) << 4)


def test_staged_tile_stores_each_element_at_its_out_row_and_dim():
    # stmatrix.m8n8.x4.b16: matrix i's row r goes to the address lane 8 i + r gives; lane l's register i holds row
    # l >> 2, columns 2 (l & 3), + 1 of matrix i. Register i at j: O rows + 8 (i & 1), dims 8 (j + (i >> 1)) of the
    # warpgroup's 256 (the accumulator's v[4 j + c]: row g (+ 8), dim 8 j + 2 t). Each 4-byte word is tagged with its
    # (head, dim); the TMA store of chunk c reads box element (x, y) at c * 8 KB + swizzle(y * 128 + 2 x) and writes
    # out row row0 + y, dim 64 c + x
    tile = {}
    for warp in range(8):
        half = warp >> 2
        for j in range(0, 32, 2):
            for lane in range(32):
                for i in range(4):
                    head = (warp & 3) * 16 + (lane >> 2) + 8 * (i & 1)
                    dim = half * 256 + 8 * (j + (i >> 1)) + 2 * (lane & 3)
                    at = _stage_address(warp, 8 * i + (lane >> 2), j) + 4 * (lane & 3)
                    assert at not in tile and 0 <= at < 2 * HALF_BYTES
                    tile[at] = (head, dim)
                    # warpgroup h writes only its own half of buffer 1 (K1L, K1R), which its arrival frees
                    assert at // HALF_BYTES == half
    assert sorted(tile) == list(range(0, 2 * HALF_BYTES, 4))
    for c in range(8):  # ws_out_tma_chunks: chunk c at {64 c, row0}
        for y in range(64):
            for x in range(0, 64, 2):
                at = c * CHUNK_BYTES + tma_swizzle_128b(y * 128 + 2 * x)
                assert tile[at] == (y, 64 * c + x), (c, y, x)


def _c_value(expr, **names):
    """A C integer expression of the kernel text (+ - * << >> & ^, parentheses, the two byte macros) in Python."""
    py = expr.replace("WG_CHUNK_BYTES(64)", str(CHUNK_BYTES)).replace("WS_HALF_BYTES", str(HALF_BYTES))
    assert re.fullmatch(r"[\w\s+\-*()<>&^]+", py), expr
    return eval(py, {"__builtins__": {}}, names)


def test_each_warpgroups_tma_stores_read_the_chunks_it_staged():
    # session 14 (docs/attn-s14c.md, call 6): the call passed stage_addr + half * WS_HALF_BYTES as the tile and the
    # stores added c * 8 KB for c = 4 half ..: warpgroup 1 read 32 KB past buffer 1, out of the CTA's shared memory
    # (an illegal memory access at the first check case). Here the call's and the stores' own expressions (the
    # kernel text) give each store's shared source and global coordinate: chunk c must be read where
    # test_staged_tile_stores_each_element_at_its_out_row_and_dim puts it (c * 8 KB of the staged tile, inside the
    # warpgroup's half of buffer 1, which its arrival frees) and land at dims 64 c
    call = re.search(r"ws_out_tma_chunks\(out_map, ([^,]+), ([^,]+), ([^;]+)\);", _epilogue())
    tile_expr, c0_expr = call.group(1), call.group(2)
    stores = re.search(r"void ws_out_tma_chunks\(.*?\n\}\n", CU, re.S).group(0)
    loop = re.search(r"for \(int c = (\w+); c < ([^;]+); \+\+c\)", stores)
    operands = set(re.findall(r'"r"\((c \* 64)\), "r"\(row0\), "r"\(([^"]+)\)', stores))
    assert loop.group(1) == "c0" and len(operands) == 1  # both forms (with and without the L2 hint) alike
    (x_expr, src_expr), = operands
    read = {}
    for half in range(2):
        tile_addr, c0 = _c_value(tile_expr, stage_addr=0, half=half), _c_value(c0_expr, half=half)
        for c in range(c0, _c_value(loop.group(2), c0=c0)):
            src = _c_value(src_expr, tile_addr=tile_addr, c=c)
            assert src == c * CHUNK_BYTES and src // HALF_BYTES == half, (half, c, src)
            assert _c_value(x_expr, c=c) == 64 * c
            read[c] = src
    assert sorted(read) == list(range(8))  # the 8 chunks, each once


def test_staging_stmatrix_is_bank_conflict_free():
    # each matrix's 8 row addresses fall on 8 distinct 16-byte bank groups: one wavefront a matrix
    for warp in range(8):
        for j in range(0, 32, 2):
            for i in range(4):
                groups = {(_stage_address(warp, 8 * i + r, j) >> 4) & 7 for r in range(8)}
                assert len(groups) == 8


def test_ws_out_tma_needs_q_by_tma(monkeypatch):
    monkeypatch.setenv("DSV4_ATTENTION_WS_OUT", "tma")
    monkeypatch.setenv("DSV4_ATTENTION_Q", "copies")
    spec = importlib.util.spec_from_file_location("_s14c_probe", attn.__file__)
    with pytest.raises(ValueError, match="WS_OUT=tma"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    monkeypatch.setenv("DSV4_ATTENTION_Q", "tma")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    assert probe.WS_OUT_TMA and probe.DEFINES["WS_OUT_TMA"] == 1
    assert probe.SIGNATURES["dsv4_sparse_attention_ws"][-2:] == ("tmap q_map", "tmap out_map")


def _ws_out(monkeypatch, tma):
    """WS_OUT_TMA on or off for this test: the define, the ws signature with or without out's tmap, and the wrapper's
    flag (the loader's compiled-module and signature caches cleared)."""
    plain = tuple(a for a in attn.SIGNATURES["dsv4_sparse_attention_ws"] if a != "tmap out_map")
    monkeypatch.setitem(attn.DEFINES, "WS_OUT_TMA", int(tma))
    monkeypatch.setitem(attn.SIGNATURES, "dsv4_sparse_attention_ws", (*plain, "tmap out_map") if tma else plain)
    monkeypatch.setattr(attn, "WS_OUT_TMA", tma)
    clear_loader_caches()


@pytest.fixture
def ws_out_tma(monkeypatch):
    """_ws_out on for the test; after it, everything undone and the loader's caches cleared again (they would otherwise
    hand later tests the out_map signature and the WS_OUT_TMA build)."""
    _ws_out(monkeypatch, True)
    yield
    monkeypatch.undo()
    clear_loader_caches()


Q_TENSOR_MAP = attn.q_tensor_map  # the wrapper's (at import, before conftest's per-test stand-in)


def _fake_map(address, rows):  # a stand-in for cuTensorMapEncodeTiled's 128 bytes (no driver here): what it encodes
    return struct.pack("<QQ", address, rows).ljust(128, b"\0")


# (positions, heads, topk, forced splits, tail split): the launch paths of a ws call. The first is harness check's first
# case (csa-decode-h64, where WS_OUT=tma faulted on the H200): a persistent grid of 4 items. (The fault was not in the
# arguments, which this checks on every path, but in the stores' shared addresses: the test above)
LAUNCH_PATHS = {
    "persistent-csa-decode-h64": ([5, 127, 300, 5000], 64, 64, None, False),
    "persistent-h128": ([900, 4000, 70], 128, 64, None, False),
    "split-combine": ([4000, 60], 64, 512, 3, False),
    "split-cluster-merge": ([900, 30], 64, 512, 2, False),
    "persistent-tail-split": ([2000 + 7 * i for i in range(140)], 64, 512, None, True),
}


@pytest.mark.parametrize("path", list(LAUNCH_PATHS))
def test_every_ws_launch_under_ws_out_tma_fits_the_signature_and_maps_out(ws_out_tma, monkeypatch, path):
    # the launches captured (no GPU): each one's arguments fit the kernel's signature under WS_OUT_TMA (the loader's
    # launch_values), and the ws kernel's q_map / out_map encode q's / out's own address over batch x heads rows
    from harness import inputs
    from kernels_cuda import _loader
    if not attn.WS_Q_TMA:
        pytest.skip("WS_OUT_TMA needs Q by TMA")
    positions, heads, topk, splits, tail = LAUNCH_PATHS[path]
    # (conftest stands 128 zero bytes in for q_tensor_map: the wrapper's own, over a stand-in encoder, here)
    monkeypatch.setattr(attn, "q_tensor_map", Q_TENSOR_MAP)
    monkeypatch.setattr(attn, "_q_tensor_map", _fake_map)
    monkeypatch.setattr(attn, "choose_kernel", lambda *a: "ws")
    monkeypatch.setattr(attn, "_sm_count", lambda device: 132)
    monkeypatch.setattr(attn, "_shared_optin", lambda device: 232448)
    monkeypatch.setattr(attn, "SPLITS", splits)
    monkeypatch.setattr(attn, "WS_PERSISTENT", True)
    monkeypatch.setattr(attn, "WS_TAIL", "split" if tail else "none")
    monkeypatch.setattr(attn, "WS_TAIL_SPLIT", tail)
    monkeypatch.setattr(attn.torch.cuda, "get_device_capability", lambda device: (9, 0))
    monkeypatch.delenv("DSV4_ATTENTION_MERGE", raising=False)
    launched = []

    def launch(name, expr, grid, block, args, device, shared_mem=0, pdl=False, cluster=None):
        params = _loader.signature(name, expr)
        _loader.launch_values(expr, params, args)  # raises on a missing, extra or mistyped argument
        launched.append((expr, grid, cluster, dict(zip((n for _, n in params), args))))

    monkeypatch.setattr(attn, "launch", launch)
    x = inputs.attention_inputs(positions=positions, heads=heads, topk=topk, seed=14)
    out, _ = x.call(attn.sparse_attention)
    ws = [named for expr, _, _, named in launched if expr.startswith("dsv4_sparse_attention_ws<")]
    assert len(ws) == 1
    named = ws[0]
    q, rows = x.args[0], len(positions) * heads
    assert named["out"] is out and out.shape == q.shape and out.dtype == q.dtype
    assert named["q_map"] == _fake_map(q.data_ptr(), rows) and named["out_map"] == _fake_map(out.data_ptr(), rows)
    kernels = [expr.split("<")[0] for expr, _, _, _ in launched]
    expr, grid, cluster, _ = launched[0]
    if path.startswith("persistent"):  # unsplit: the grid of at most one CTA an SM, the TMA-stored epilogue
        assert expr.endswith(", false>") and grid[1:] == (1, 1) and grid[0] <= 132
        assert kernels[1:] == (["dsv4_sparse_attention_combine"] if tail else [])
    elif path == "split-cluster-merge":
        assert expr.endswith(", true>") and cluster == (1, 1, 2) and kernels == ["dsv4_sparse_attention_ws"]
    else:
        assert expr.endswith(", true>") and kernels == ["dsv4_sparse_attention_ws", "dsv4_sparse_attention_combine"]


@pytest.mark.slow
@pytest.mark.parametrize("policy,tail", [(0, 0), (1, 0), (0, 1)])
def test_ws_out_tma_fits_the_ws_budget_without_spills_or_serialised_wgmma(ws_out_tma, monkeypatch, policy, tail):
    # NVRTC (no GPU) of the four ws instantiations under WS_OUT_TMA (and with QO_POLICY=first's hinted stores, or the
    # tail split beside it): 168 registers, no spill or stack (13.0, the GPU image's), no wgmma serialised
    if not attn.WS_Q_TMA:
        pytest.skip("WS_OUT_TMA needs Q by TMA")
    ws_budget(monkeypatch, {"WS_QO_EVICT_FIRST": policy, "WS_TAIL_SPLIT": tail})  # (the fixture set WS_OUT_TMA)


# (batch, heads, topk, positions, sink): prefill-like and the decode shapes the persistent (unsplit) grid takes
GPU_SHAPES = {
    "prefill-300-h64-k640": (300, 64, 512, "long", True),
    "prefill-4096-h64-k640": (4096, 64, 512, "prefill", True),  # one request's 4096 tokens at 64K: one shared pool
    "prefill-301-h128-k1152": (301, 128, 1024, "long", False),
    "prefill-1000-h128-k1152": (1000, 128, 1024, "long", True),
    "short-333-h64-k640": (333, 64, 512, "short", True),  # most lists -1 padded, some rows fully invalid
    "decode-b256-h64-k640": (256, 64, 512, "long", True),
    "decode-b64-h128-k1152": (64, 128, 1024, "long", True),
    "decode-b131-h128-k1152": (131, 128, 1024, "short", False),
    "tail-split-300-h64-k640": (300, 64, 512, "tail", True),  # DSV4_ATTENTION_TAIL=split: whole items + partials
}


@pytest.mark.gpu
@pytest.mark.parametrize("shape", list(GPU_SHAPES))
def test_ws_out_tma_writes_the_defaults_bits_on_the_gpu(monkeypatch, shape):
    # the same call with the ws kernels built under WS_OUT_TMA and under the bulk row copies: out and lse bit for
    # bit (the same bf16 words at the same bytes of out). Batches not a multiple of the grid (132) or of 64; H128's
    # two head blocks (row0 = b * heads + 64); short: rows at positions 1 .. ~3000 (lists -1 padded, masked columns)
    # and every 7th row's list all -1 (out 0, or the sink's share; lse -inf)
    import torch
    from harness import inputs
    skip_unless_ws(attn)
    if not attn.WS_PERSISTENT:
        pytest.skip("the persistent ws kernel: run without DSV4_ATTENTION_PERSISTENT=0")
    if not attn.WS_Q_TMA:
        pytest.skip("compares the bulk build with tma: run with Q by TMA")
    batch, heads, topk, kind, sink = GPU_SHAPES[shape]
    seed = batch + heads + 140
    if kind == "prefill":  # (4096 decode rows' own pools would take ~100 GB of host memory: session 16's dead worker)
        x = inputs.attention_case(heads=heads, seed=seed, device="cuda", prefill=(65536, batch), ratio=4, topk=topk,
                                  sink=sink)
    else:
        positions = decode_positions(batch) if kind in ("long", "tail") else [1 + 9 * i for i in range(batch)]
        x = inputs.attention_inputs(positions=positions, heads=heads, topk=topk, seed=seed, device="cuda", sink=sink)
    if kind == "short":
        x.args[2][::7] = -1  # fully invalid rows

    run = synced_call(attn.sparse_attention, x)
    if kind == "tail":
        tail_split(monkeypatch, attn)
    try:
        _ws_out(monkeypatch, False)
        default = run()
        _ws_out(monkeypatch, True)
        tma = run()
        tma_again = run()  # a second call: out's map from the cache (a fresh out, maybe at another address)
    finally:
        monkeypatch.undo()
        clear_loader_caches()
    assert torch.equal(tma[0], default[0]) and torch.equal(tma[1], default[1])
    assert torch.equal(tma_again[0], default[0]) and torch.equal(tma_again[1], default[1])
    assert torch.isfinite(default[0].float()).all()
