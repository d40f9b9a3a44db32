"""The persistent ws grid's tail split (DSV4_ATTENTION_TAIL=split: WS_TAIL_SPLIT, docs/attn-s12a.md) without a GPU:
a numpy model of the kernel's work pieces (ws_piece: piece -> item, split, index rows) against the host's choice
(tail_split), and the whole call modelled in float64 from the launches the host makes (captured): the pieces'
outputs and partials where the kernel writes them, the combine kernel over the views it is given."""

import importlib
import os

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs CuPy and NVRTC (ci/install.sh), so there a missing one fails
    pytest.importorskip("cupy")

from kernels_cuda import _loader  # noqa: E402

A = importlib.import_module("kernels_cuda.sparse_attention")
SMS = 132


def ws_piece(w, full, splits, n, chunk):
    """sparse_attention.cu's ws_piece: (item, first index row, rows, split; -1 for a whole item) of piece w."""
    if w < full or splits == 1:
        return w, 0, n, -1
    p = w - full
    split = p % splits
    k0 = split * chunk
    return full + p // splits, k0, min(n - k0, chunk), split


def kernel_pieces(items, grid, n, chunk):
    """The persistent loop's pieces as (cta, round, item, k0, rows, split), and the kernel's tail split count (from
    chunk < n, as ws_persistent computes it)."""
    full = items - items % grid
    splits = -(-n // chunk) if 0 < chunk < n else 1
    work = full + (items - full) * splits
    return [(w % grid, w // grid, *ws_piece(w, full, splits, n, chunk)) for w in range(work)], splits


SHAPES = [(4096, 1, 640), (4096, 2, 1152), (256, 1, 640), (64, 2, 1152), (200, 2, 640), (133, 1, 8320), (131, 1, 640),
          (300, 2, 100), (1, 1, 640)]


@pytest.mark.parametrize("rows", [A.WG2_PAIR, A.WS_SPLIT_TILE])
@pytest.mark.parametrize("batch, head_blocks, topk", SHAPES)
def test_pieces_cover_every_index_row_of_every_item_once_within_the_grid(batch, head_blocks, topk, rows):
    items = batch * head_blocks
    grid = min(items, SMS)
    chunk, splits = A.tail_split(batch, head_blocks, grid, topk, rows)
    pieces, kernel_splits = kernel_pieces(items, grid, topk, chunk)
    assert kernel_splits == splits  # the kernel reads the host's count back from chunk
    covered = np.zeros((items, topk), dtype=np.int64)
    for _, _, item, k0, n, _ in pieces:
        covered[item, k0:k0 + n] += 1
    assert (covered == 1).all()
    full, tail = items - items % grid, items % grid
    split_pieces = [p for p in pieces if p[5] >= 0]
    if splits == 1:
        assert not split_pieces and len(pieces) == items
        return
    # the split pieces: all in the last round, at most one a CTA, each of whole `rows` blocks but the list's end
    assert len(split_pieces) == tail * splits <= grid
    assert {p[1] for p in split_pieces} == {full // grid} and len({p[0] for p in split_pieces}) == len(split_pieces)
    # so each is its CTA's last piece (w + grid >= work): ws_tail_partial's staged path, no frees needed after it
    assert all(rnd * grid + cta + grid >= len(pieces) for cta, rnd, *_ in split_pieces)
    assert all(k0 % rows == 0 and k0 % chunk == 0 and 0 < n <= chunk for _, _, _, k0, n, _ in split_pieces)
    # their items are the last `tail` rows of the last head block (where the combine's launch writes)
    assert sorted({p[2] for p in split_pieces}) == list(range(full, items))
    assert {(i // batch, i % batch) for i in range(full, items)} == {(head_blocks - 1, b)
                                                                      for b in range(batch - tail, batch)}


@pytest.mark.parametrize("rows, cases", [
    (A.WG2_PAIR, {(4096, 1, 640): (128, 5), (4096, 2, 1152): (128, 9), (256, 1, 640): (640, 1)}),
    # 64-row splits: 10 at H64; at H128 the grid's cap (132 // 8 = 16) rounds 72 rows up to 128
    (A.WS_SPLIT_TILE, {(4096, 1, 640): (64, 10), (4096, 2, 1152): (128, 9), (256, 1, 640): (640, 1)})])
def test_the_benchmark_shapes_split_as_the_note_says(rows, cases):
    for (batch, head_blocks, topk), want in cases.items():
        assert A.tail_split(batch, head_blocks, min(batch * head_blocks, SMS), topk, rows) == want


def _captured(monkeypatch, batch, heads, sms, sink, tail="split"):
    from harness import inputs
    launched = []

    def launch(name, expr, grid, block, args, device, shared_mem=0, pdl=False, cluster=None):
        _loader.launch_values(expr, _loader.signature(name, expr), args)  # the arguments fit the signature
        launched.append((expr, grid, pdl, args))

    monkeypatch.setattr(A, "launch", launch)
    monkeypatch.setattr(A, "choose_kernel", lambda *a: "ws")
    monkeypatch.setattr(A, "_sm_count", lambda device: sms)
    monkeypatch.setattr(A, "_shared_optin", lambda device: 232448)
    monkeypatch.setattr(A, "WS_PERSISTENT", True)
    monkeypatch.setattr(A, "SPLITS", 1)  # unsplit (the persistent grid) at these few rows
    monkeypatch.setattr(A, "WS_TAIL", tail)
    monkeypatch.setattr(A, "WS_TAIL_SPLIT", tail != "none")
    monkeypatch.setattr(A.torch.cuda, "get_device_capability", lambda device: (9, 0))
    x = inputs.attention_inputs(positions=[700 + 37 * b for b in range(batch)], heads=heads, seed=7, sink=sink)
    x.call(A.sparse_attention)
    return x, launched


def _attend(q, kv, idx, sm_scale):
    """float64 softmax over the valid entries of idx: (O / l, lse), lse -inf (O 0) where none is valid."""
    rows = kv[idx[idx >= 0]]
    if not len(rows):
        return np.zeros(q.shape), np.full(q.shape[0], -np.inf)
    s = sm_scale * q @ rows.T
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - m)
    return e @ rows / e.sum(axis=1, keepdims=True), (m + np.log(e.sum(axis=1, keepdims=True)))[:, 0]


def _flat(t):
    """A captured tensor view as the kernel sees it: its storage as a flat float64 array and the view's offset."""
    return np.full(t.untyped_storage().nbytes() // t.element_size(), np.nan), t.storage_offset()


@pytest.mark.parametrize("sink", [True, False])
@pytest.mark.parametrize("heads, batch, sms", [(128, 11, 16), (64, 19, 8)])
def test_the_captured_launches_put_every_row_together_from_its_pieces(monkeypatch, heads, batch, sms, sink):
    from references import sparse_attention as reference
    x, launched = _captured(monkeypatch, batch, heads, sms, sink)
    q, kv, indices = (t.double().numpy() if t.is_floating_point() else t.numpy() for t in x.args)
    sm_scale, attn_sink = x.kwargs["sm_scale"], x.kwargs["attn_sink"]
    (ws, grid, _, args), (combine, cgrid, pdl, cargs) = launched
    assert ws.startswith("dsv4_sparse_attention_ws<") and ws.endswith("false>") and grid[1:] == (1, 1)
    assert combine.startswith("dsv4_sparse_attention_combine<") and pdl
    K, chunk, items = args[8], args[10], batch * (heads // 64)
    assert args[12] == batch and grid[0] == min(items, sms)
    pieces, splits = kernel_pieces(items, grid[0], K, chunk)
    assert splits > 1 and cargs[6] == splits and cargs[5] == heads
    out, lse = np.full((batch, heads, q.shape[2]), np.nan), np.full((batch, heads), np.nan)
    part_out, part_lse = np.full(args[6].numel(), np.nan), np.full(args[7].numel(), np.nan)
    dim = q.shape[2]
    sink_h = attn_sink.double().numpy() if sink else None
    for _, _, item, k0, n, split in pieces:  # the kernel: whole items to out and lse, splits to the partials
        b, hb = item % batch, item // batch
        heads_of = slice(hb * 64, hb * 64 + 64)
        o, row_lse = _attend(q[b, heads_of], kv, indices[b, k0:k0 + n], sm_scale)
        if split < 0:
            scale = np.ones(64) if sink_h is None else 1 / (1 + np.exp(sink_h[heads_of] - row_lse))
            out[b, heads_of], lse[b, heads_of] = o * scale[:, None], row_lse
            continue
        full = items - items % grid[0]
        for r in range(64):  # ws_tail_partial's row
            prow = ((item - full) * splits + split) * heads + hb * 64 + r
            part_out[prow * dim:(prow + 1) * dim], part_lse[prow] = o[r], row_lse[r]
    # the combine kernel over its views (flat storage and offsets as its pointers see them)
    (_, po), (_, pl) = _flat(cargs[0]), _flat(cargs[1])
    out_flat, out_off = out.reshape(-1).copy(), cargs[3].storage_offset()
    lse_flat, lse_off = lse.reshape(-1).copy(), cargs[4].storage_offset()
    sink_off = cargs[2].storage_offset()
    for bx in range(cgrid[0]):
        for h in range(cgrid[1] * A.COMBINE_HEADS):
            first = bx * splits * heads + h
            parts = np.array([part_out[po + (first + s * heads) * dim:po + (first + s * heads + 1) * dim]
                              for s in range(splits)])
            lses = np.array([part_lse[pl + first + s * heads] for s in range(splits)])
            assert not np.isnan(parts).any() and not np.isnan(lses).any(), (bx, h)  # every read was written
            mx = lses.max()
            w = np.exp(lses - mx) if mx > -np.inf else np.zeros(splits)
            row_lse = mx + np.log(w.sum()) if w.sum() > 0 else -np.inf
            scale = 1 / w.sum() if w.sum() > 0 else 0.0
            if sink and w.sum() > 0:
                scale /= 1 + np.exp(sink_h[sink_off + h] - row_lse)
            out_flat[out_off + (bx * heads + h) * dim:out_off + (bx * heads + h + 1) * dim] = w @ parts * scale
            lse_flat[lse_off + bx * heads + h] = row_lse
    want_out, want_lse = reference(*x.args, **x.kwargs)
    got_out, got_lse = out_flat.reshape(out.shape), lse_flat.reshape(lse.shape)
    assert not np.isnan(got_out).any() and not np.isnan(got_lse).any()  # every row written
    # the reference rounds out to bf16 (8 bits: 2e-3 relative) and lse to fp32; a partial read or written at
    # another row, head or split is off by the whole value
    assert np.allclose(got_out, want_out.double().numpy(), rtol=8e-3, atol=1e-3)
    assert np.allclose(got_lse, want_lse.double().numpy(), rtol=1e-6, atol=1e-5)
    assert np.isnan(out).any()  # the tail rows were left to the combine (the model would pass vacuously otherwise)


def test_no_tail_split_without_the_switch_or_where_it_does_not_pay(monkeypatch):
    for tail, batch, heads, sms in (("none", 11, 128, 16), ("split", 16, 64, 8), ("split", 13, 64, 8)):
        _, launched = _captured(monkeypatch, batch, heads, sms, True, tail)
        # one ws launch and no combine: no tail (16 rows on 8 CTAs) / 5 tail items on 8 CTAs (8 // 5 = 1 split)
        assert [e.split("<")[0] for e, _, _, _ in launched] == ["dsv4_sparse_attention_ws"], (tail, batch)
        assert launched[0][3][10] >= launched[0][3][8]  # chunk >= K: the kernel keeps its items whole


# On a Hopper GPU only (skipped elsewhere, CI included): the switch is compile-time, so each build runs in its own
# process. Shapes that run unsplit (plans.attention_splits) as a persistent grid with a tail on 132 SMs: 140 rows H64
# K640 (8 tail items x 5 splits), 136 rows H128 K1152 (8 x 9, the last head block), 172 rows H64 K640 (40 x 3
# splits of 256, 256, 128 rows).
GPU_CASES = {"csa-h64": dict(batch=140, heads=64, ratio=4, topk=512),
             "csa-h128": dict(batch=136, heads=128, ratio=4, topk=1024),
             "csa-h64-wide": dict(batch=172, heads=64, ratio=4, topk=512)}
GPU_SCRIPT = r"""
import sys, torch
from harness import inputs
import kernels_cuda, references
saved = {}
for name, case in CASES.items():
    far = (1 << 20) - 1 if case["ratio"] == 128 else 60000
    x = inputs.attention_inputs(positions=[far - 97 * b for b in range(case["batch"])], heads=case["heads"],
                                ratio=case["ratio"], topk=case["topk"], seed=11, device="cuda")
    first, second = x.call(kernels_cuda.sparse_attention), x.call(kernels_cuda.sparse_attention)
    ref = x.call(references.sparse_attention) if sys.argv[2] == "ref" else (None, None)
    saved[name] = [t.cpu() if t is not None else None for t in (*first, *second, *ref)]
torch.save(saved, sys.argv[1])
"""


def _gpu_hopper():
    import torch
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)


@pytest.mark.skipif(not _gpu_hopper(), reason="needs a Hopper GPU (the ws kernel, sm_90a)")
def test_on_the_gpu_tail_rows_match_the_reference_and_the_rest_keep_their_bits(tmp_path):
    import subprocess
    import sys

    import torch

    from harness import plans
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = {}
    for tail in ("none", "split"):
        path = tmp_path / f"{tail}.pt"
        env = {**os.environ, "DSV4_ATTENTION_TAIL": tail, "PYTHONPATH": root}
        script = f"CASES = {GPU_CASES!r}\n{GPU_SCRIPT}"
        subprocess.run([sys.executable, "-c", script, str(path), "ref" if tail == "split" else "-"], env=env, cwd=root,
                       check=True)
        runs[tail] = torch.load(path)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name, case in GPU_CASES.items():
        out, lse, out2, lse2, ref_out, ref_lse = runs["split"][name]
        base_out, base_lse = runs["none"][name][:2]
        assert torch.equal(out, out2) and torch.equal(lse, lse2), name  # deterministic
        ref = ref_out.double()
        assert ((out.double() - ref).abs() <= 1e-2 * ref.abs().clamp(min=1)).all(), name
        close = (lse.double() - ref_lse.double()).abs() <= 1e-3
        assert torch.where(ref_lse.isinf(), lse == ref_lse, close).all(), name
        head_blocks = case["heads"] // 64
        items = case["batch"] * head_blocks
        tail = items % min(items, sms)
        assert plans.attention_splits(items, case["topk"] + 128, sms) == 1, name  # the persistent grid
        assert A.tail_split(case["batch"], head_blocks, min(items, sms), case["topk"] + 128, A.WG2_PAIR)[1] > 1, name
        whole = torch.ones(out.shape[:2], dtype=torch.bool)
        whole[case["batch"] - tail:, (head_blocks - 1) * 64:] = False  # the tail items, merged by the combine
        assert torch.equal(out[whole], base_out[whole]) and torch.equal(lse[whole], base_lse[whole]), name
