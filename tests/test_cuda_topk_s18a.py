"""DSV4_TOPK_WIDE_BULK (read at import; docs/topk-s18a.md): the cluster kernels' chunks (wide<2/4/8>, lean<8/16>)
copied to shared memory by TMA bulk copies of up to 1024 16-byte vectors, one mbarrier a piece, each piece converted
and counted as it lands, instead of 16-byte cp.async in two commit groups. Here: the switch is off by default and
moves no launch; under it the kernels compile within one CTA an SM with the same static shared memory (and, where
cuobjdump is at hand, copy by UBLKCP and no longer by LDGSTS); on the GPU, bitwise the build without it on planned
mixed batches and on uniform shapes of every cluster kernel, aligned or not, with ties and +inf."""

import importlib
import os
import re
import shutil
import subprocess
import tempfile

import pytest
from tests.rebuilds import rebuilt_runs
from test_cuda_topk import H200
from test_cuda_topk_s14b import BATCHES

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op

# uniform shapes and the kernel each runs on the H200: 2-CTA rows, unaligned rows of 8 (chunks not a multiple of
# 16 KB: a short last piece), a small chunk (4 pieces, the last partial), a row alone on 8 CTAs
UNIFORM = {(64, 65536): "dsv4_topk_indices_wide<2>", (64, 65535): "dsv4_topk_indices_wide<2>",
           (8, 262143): "dsv4_topk_indices_wide<8>", (3, 100001): "dsv4_topk_indices_wide<8>",
           (1, 65535): "dsv4_topk_indices_wide<8>"}


def test_the_switch_is_off_by_default_and_moves_no_launch():
    assert T.DEFINES["WIDE_BULK"] == T.WIDE_BULK and T.WIDE_BULK in (0, 1)
    for (batch, columns), kernel in UNIFORM.items():
        (name, _, shared, _, _), = T.launches(batch, columns, columns % 4 == 0, *H200)
        assert name == kernel and shared <= 4 * (T.MAX_CHUNK + 4)  # at most WIDE_BULK_PIECES pieces a chunk
    assert -(-T.MAX_CHUNK // 4 // T.THREADS) == 10  # WIDE_BULK_PIECES, the mbarriers' 80 bytes in wide_static_shared


def _sass(cubin):
    """cuobjdump -sass of a cubin, or None where cuobjdump (or NVRTC 13.0, whose SASS the counts are of) is missing."""
    from cupy.cuda import nvrtc
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not cuobjdump or nvrtc.getVersion() != (13, 0):
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("bulk", [0, 1])
def test_the_bulk_kernels_fit_one_cta_an_sm_and_copy_by_tma(monkeypatch, bulk):
    # one CTA an SM: up to 64 registers, no spill, the static shared memory the host counts on; the SASS (where
    # cuobjdump is at hand) copies the chunk by UBLKCP under the switch (no LDGSTS left: the cp.async path is
    # compiled out of every copy of wide_select) and by LDGSTS without it
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    kernels = ["dsv4_topk_indices_wide<2>", "dsv4_topk_indices_wide<8>", "dsv4_topk_indices_lean<8>"]
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", kernels)
    monkeypatch.setitem(T.DEFINES, "WIDE_BULK", bulk)
    cubin, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    found = build.resources(log, lowered)
    for kernel, cluster in zip(kernels, (2, 8, 8)):
        res = found[kernel]
        assert res["registers"] <= 64 and res["spill_stores"] == 0 and res["stack"] == 0, (kernel, res)
        assert res["smem"] == T.wide_static_shared(cluster), (kernel, res)
    sass = _sass(cubin)
    if sass is None:
        return
    bodies = [b for b in re.split(r"\n\s*Function : ", sass)[1:]
              if re.match(r"_Z\d+dsv4_topk_indices_(wide|lean)ILi", b)]  # (the non-template kernels come along)
    assert len(bodies) == len(kernels)
    for body in bodies:
        copies, loads = len(re.findall(r"\bUBLKCP\b", body)), len(re.findall(r"\bLDGSTS\b", body))
        assert (copies > 0 and loads == 0) if bulk else (copies == 0 and loads > 0), (body[:40], copies, loads)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [512, 2048])
@pytest.mark.parametrize("shape", [*sorted(BATCHES), *(f"{b}x{c}" for b, c in UNIFORM)])
@pytest.mark.parametrize("variant", ["normal", "ties", "inf"])
def test_the_bulk_copy_writes_the_default_builds_bits(monkeypatch, shape, k, variant):
    # WIDE_BULK=1 against 0, bitwise, on fresh random logits with garbage past seq_len and a random page table:
    # the mixed batches planned (groups of 2 and 4 CTAs sharing a place, solo rows packed) and unplanned, the uniform
    # shapes on their own kernels; scores rounded to 1/40 (ties ranked), +inf in some rows; reruns equal; and the
    # default build's output right by the comparator against the reference
    import torch

    from harness import comparators, inputs
    from kernels_torch.topk_indices import topk_indices as torch_topk
    if shape in BATCHES:
        lens, columns = BATCHES[shape], max(262144, max(BATCHES[shape]))
    else:
        batch, columns = (int(v) for v in shape.split("x"))
        lens = [columns - 3 * (b % 2) for b in range(batch)]  # full rows and rows a few short of the width
    x = inputs.topk_inputs(seq_lens=lens, columns=columns, k=k, page_size=64, seed=1800 + k, device="cuda",
                           tail="garbage")
    logits, seq_lens, page_table = x.args
    if variant == "ties":
        logits.copy_(torch.round(logits * 40) / 40)
    if variant == "inf":
        generator = torch.Generator(device="cuda").manual_seed(k)
        for b, n in enumerate(lens):
            if b % 3 == 0 and n > 1000:
                logits[b, torch.randint(0, n, (3,), generator=generator, device="cuda")] = float("inf")
    plan = T.topk_indices_plan(seq_lens, page_table, k=k) if shape in BATCHES else None

    def run():
        got = x.call(T.topk_indices, k=k, plan=plan)
        assert torch.equal(x.call(T.topk_indices, k=k, plan=plan), got)  # reruns
        unplanned = x.call(T.topk_indices, k=k) if plan is not None else got
        torch.cuda.synchronize()
        return got, unplanned

    default, bulk = rebuilt_runs(monkeypatch, T.DEFINES, [{"WIDE_BULK": 0}, {"WIDE_BULK": 1}], run)
    assert torch.equal(default[1], default[0])
    for got in bulk:
        assert torch.equal(got, default[0])
    want = x.call(torch_topk, k=k)
    report = comparators.topk_indices({"indices": default[0]}, {"indices": want}, logits=logits, seq_lens=seq_lens,
                                      page_table=page_table, k=k, page_size=64)
    assert report.ok, report
