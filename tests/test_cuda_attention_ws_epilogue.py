"""The ws attention kernel's shared-memory epilogue (sparse_attention.cu, ws_epilogue) without a GPU: a numpy
model of where its stmatrix and float2 stores stage O in shared memory (every value once, at the row and dims
it belongs to, on distinct banks) and of its bulk copies out."""

import importlib
import os
import re
from pathlib import Path

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs CuPy and NVRTC (ci/install.sh), so there a missing one fails
    pytest.importorskip("cupy")

A = importlib.import_module("kernels_cuda.sparse_attention")
SOURCE = (Path(A.__file__).parent / "sparse_attention.cu").read_text()


def cu_define(name):
    """A `#define NAME (expr)` of the .cu over DIM, evaluated."""
    expr = re.search(rf"#define {name} (.*?)(?://|$)", SOURCE, re.M).group(1)
    return eval(expr, {"DIM": A.contract.ATTN_DIM})


BF16_PITCH, F32_PITCH = cu_define("WS_STAGE_BF16_PITCH"), cu_define("WS_STAGE_F32_PITCH")
STAGE_ROOM = 3 * A.WG_TILE * A.KV_ROW_BYTES  # Q and the two buffers: 192 KB from the aligned base


def fragment(thread, j, c):
    """(row, dim) of o[4 j + c] of math thread `thread` (the wgmma accumulator layout the kernel documents)."""
    warp, lane = thread >> 5, thread & 31
    g, t = lane >> 2, lane & 3
    return (warp & 3) * 16 + g + 8 * (c >> 1), (warp >> 2) * 256 + 8 * j + 2 * t + (c & 1)


def stmatrix_stores(j0, nj, pitch=BF16_PITCH):
    """ws_stage_bf16's stmatrix.x4 stores of fragments j0 .. j0 + nj - 1 (the kernel stores all 32) as (byte
    offset, (row, dim) of the value), per (warp, call, matrix) the 8 row addresses. stmatrix: lane l gives the
    address of row l & 7 of matrix l >> 3; lane 4 r + q's register i holds row r, columns 2 q, 2 q + 1 of
    matrix i."""
    stores, phases = [], []
    for warp in range(8):
        addr = {}
        for lane in range(32):
            mat = lane >> 3
            row = (warp & 3) * 16 + (lane & 7) + 8 * (mat & 1)
            addr[lane] = row * pitch + ((warp >> 2) * 256 + 8 * (j0 + (mat >> 1))) * 2
        for j in range(0, nj, 2):
            for mat in range(4):
                rows = [addr[8 * mat + r] + j * 16 for r in range(8)]
                phases.append(rows)
                for r in range(8):
                    for col in range(8):
                        lane = 4 * r + col // 2
                        # register `mat` of the call: o[4 (j0 + j) + c] with c = 0, 1 (low rows), 2, 3 (high)
                        # for j, then the same for j + 1: pack(v[4j], v[4j+1]), (v[4j+2], +3), (v[4j+4], +5), ...
                        jj, c = j0 + j + (mat >> 1), 2 * (mat & 1) + (col & 1)
                        stores.append((rows[r] + 2 * col, fragment(warp * 32 + lane, jj, c)))
    return stores, phases


def test_bf16_staging_puts_every_value_at_its_row_and_dim_on_distinct_banks():
    j0, nj = 0, 32
    stores, phases = stmatrix_stores(j0, nj)
    offsets = np.array([s[0] for s in stores])
    where = np.array([s[1] for s in stores])
    # every (row, dim) of the pass exactly once, at the staged row's pitch
    assert len(set(offsets.tolist())) == len(offsets) == 64 * 256 * nj // 16
    assert (offsets == where[:, 0] * BF16_PITCH + where[:, 1] * 2).all()
    assert sorted(set(where[:, 1].tolist())) == sorted(h * 256 + 8 * j + k for h in range(2)
                                                       for j in range(j0, j0 + nj) for k in range(8))
    # a matrix's 8 rows of 16 bytes: 8 distinct groups of 4 banks (one wavefront), 16-byte aligned
    for rows in phases:
        assert all(a % 16 == 0 for a in rows)
        assert len({(a // 16) % 8 for a in rows}) == 8, rows
    assert 64 * BF16_PITCH <= STAGE_ROOM


def test_bf16_staging_model_fails_an_unpadded_pitch():
    _, phases = stmatrix_stores(0, 32, pitch=A.contract.ATTN_DIM * 2)
    assert any(len({(a // 16) % 8 for a in rows}) < 8 for rows in phases)  # 1 KB rows: 8-way conflicts


def test_f32_staging_puts_every_value_at_its_row_and_dim_on_distinct_banks():
    seen = set()
    for warp in range(8):
        for j in range(32):
            for hi in range(2):
                words = {}
                for lane in range(32):
                    thread = warp * 32 + lane
                    row, dim = fragment(thread, j, 2 * hi)
                    assert fragment(thread, j, 2 * hi + 1) == (row, dim + 1)
                    at = row * F32_PITCH + dim * 4  # ws_stage_f32's float2 at (row, dim), dim even
                    assert at % 8 == 0 and (row, dim) not in seen
                    seen.add((row, dim))
                    words[lane] = (at // 4) % 32, (at // 4 + 1) % 32
                # 64-bit stores go as two half-warps: each one's 32 words on 32 banks
                for half in range(2):
                    banks = [b for lane in range(16 * half, 16 * half + 16) for b in words[lane]]
                    assert len(set(banks)) == 32, (warp, j, hi, half)
    assert len(seen) == 64 * 256
    assert 64 * F32_PITCH <= STAGE_ROOM and F32_PITCH % 16 == 0 and BF16_PITCH % 16 == 0


def test_bulk_copies_cover_the_64_rows_once_from_their_staged_pitch():
    # ws_bulk_store_rows: lane 0 of math warp w copies rows 8 w .. 8 w + 7, shared row r * pitch to
    # global row r * row_bytes (the CTA's 64 heads of out or of a split's partial are contiguous)
    rows = sorted(8 * w + r for w in range(8) for r in range(8))
    assert rows == list(range(64))
    body = re.search(r"void ws_bulk_store_rows\(.*?\n}\n", SOURCE, re.S).group(0)
    assert "8 * warp + r" in body and "row * row_bytes" in body and "row * pitch" in body
    assert "fence.proxy.async.shared::cta" in body.split("cp.async.bulk.global")[0]  # before the copies
    assert "wait_group.read" in SOURCE[SOURCE.find("bulk_wait_read"):]


def test_persistent_staging_rotates_units_and_two_bulk_pieces_rebuild_each_row():
    # ws_persistent_epilogue: O staged in buffer 1 at pitch 1024, 16-byte unit u of row r at ((u + r) mod 64);
    # a stmatrix matrix's lane l gives row (warp & 3) 16 + (l & 7) + 8 (mat & 1) at unit 32 half + (mat >> 1) + j
    staged = {}
    for warp in range(8):
        for j in range(0, 32, 2):
            for mat in range(4):
                rows = [(warp & 3) * 16 + r + 8 * (mat & 1) for r in range(8)]
                unit = (warp >> 2) * 32 + (mat >> 1) + j
                at = [r * 1024 + ((unit + r) & 63) * 16 for r in rows]
                assert len({(a // 16) % 8 for a in at}) == 8, (warp, j, mat)  # 8 bank groups: one wavefront
                for r, a in zip(rows, at):
                    assert a not in staged
                    staged[a] = (r, unit)
    assert len(staged) == 64 * 64 and max(staged) + 16 <= A.WG_TILE * A.KV_ROW_BYTES  # buffer 1's 64 KB
    # lane 0 of warp w copies rows 8 w .. 8 w + 7: global units 0 .. 63 - r from staged unit r, then (r > 0)
    # units 64 - r .. 63 from staged unit 0; warps 0..3 read only K1L's 32 KB, warps 4..7 only K1R's
    for w in range(8):
        for r in range(8 * w, 8 * w + 8):
            pieces = [(r * 1024 + r * 16, (64 - r) * 16, 0)] + ([(r * 1024, r * 16, (64 - r) * 16)] if r else [])
            rebuilt = {}
            for src, size, dst in pieces:
                assert size > 0 and size % 16 == 0 and src % 16 == 0
                assert (src // 32768, (src + size - 1) // 32768) == (w // 4, w // 4)  # K1L (0) or K1R (1)
                for k in range(size // 16):
                    rebuilt[dst // 16 + k] = staged[src + 16 * k]
            assert rebuilt == {u: (r, u) for u in range(64)}, r
    body = re.search(r"void ws_persistent_epilogue\(.*?\n}\n", SOURCE, re.S).group(0)
    assert "((u0 + j) & 63) * 16" in body and "row * 1024" in body and "(64 - r) * 16" in body
