"""The ws producer with only copies between a half buffer's free wait and its ready arrival (docs/attn-s14d.md,
DSV4_ATTENTION_PRODUCER=lean, WS_PRODUCER_LEAN). CPU: models of what the lean producer computes ahead (the flag words
from its ballots, the flag word's address, the copies' sources, the index loads' bounds) against the default's
formulas; NVRTC (slow): the budget, and the SASS of each free wait to its arrival; GPU: the default's bits."""

import importlib
import os
import random
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from tests.rebuilds import decode_positions, rebuilt_runs, skip_unless_ws, synced_call, ws_budget

attn = importlib.import_module("kernels_cuda.sparse_attention")  # the module (the package exports the op by that name)
CU = (Path(__file__).parent.parent / "kernels_cuda" / "sparse_attention.cu").read_text()


def test_lean_is_the_default_producer():
    # the default since session 14's call 6 (prefill H64 656.8 -> 635.8 us, H128 2080.2 -> 2035.2; check --full 84/84)
    import os
    assert attn.PRODUCERS == ("loads", "ahead", "prefetch", "lean")
    if "DSV4_ATTENTION_PRODUCER" not in os.environ:
        assert attn.PRODUCER == "lean" and attn.DEFINES["WS_PRODUCER_LEAN"] == 1
    assert "WS_PRODUCER_LEAN == 1 && WS_PRODUCER_AHEAD == 0" in CU


def row0_of(lane, w):
    return 4 * w + (lane >> 3)  # lt >> 3 with lt = 32 w + lane


def ballot(pred):
    return sum(1 << lane for lane in range(32) if pred(lane))


def flag_part(ballots, w, l):
    """ws_flag_part (the default producer's word)."""
    word = 0
    for k in range(4):
        for e in range(2):
            word |= ((ballots[k] >> (8 * (2 * l + e))) & 1) << (2 * ((w >> 1) + 2 * k) + e)
    return word & 0xFFFF  # stored as u16


def lean_flag_word(ballots, lt):
    """WsLeanProducer::flag_word, with its 32-bit shifts."""
    l16 = (lt & 1) * 16
    mask = (0x180 << l16) & 0xFFFFFFFF
    b = [x & mask for x in ballots]
    word = ((b[0] >> 7) | (b[1] >> 3) | ((b[2] << 1) & 0xFFFFFFFF) | ((b[3] << 5) & 0xFFFFFFFF)) >> l16
    return ((word << ((lt >> 5) & 2)) & 0xFFFFFFFF) & 0xFFFF


@pytest.mark.parametrize("seed", range(6))
def test_lean_flag_words_are_ws_flag_parts(seed):
    # every validity pattern of a block's 64 rows: row 4 w + i + 16 k of warp w's lanes 8 i .. 8 i + 7
    gen = random.Random(seed)
    for _ in range(200):
        valid = [gen.random() < (0.5 if seed else 0.95) for _ in range(64)]
        for w in range(4):
            ballots = [ballot(lambda lane: valid[row0_of(lane, w) + 16 * k]) for k in range(4)]
            for l in range(2):
                assert lean_flag_word(ballots, 32 * w + l) == flag_part(ballots, w, l), (w, l)


def test_lean_flag_addresses_are_the_defaults():
    for blk in range(2):
        for w in range(4):
            for l in range(2):
                lt = 32 * w + l
                default = ((blk * 4 + 2 * (w & 1) + l) * 2 + (w >> 1)) * 2
                lean = ((2 * ((lt >> 5) & 1) + (lt & 1)) * 2 + ((lt >> 6) & 1)) * 2 + blk * 16
                assert lean == default


def test_lean_copies_and_loads_are_the_defaults():
    # the sources: kv + unit * 16 + max(idx, 0) * 1024 (+ 512 for the right half) + c * 128 against ws_copy_half's
    # kv + max(idx, 0) * 1024 + (r_half * 32 + unit) * 16 + c * 128; the index loads' bound against ws_load_ids' i < n
    for idx in (-1, 0, 1, 4095, 2**20):
        for unit in range(8):
            for r_half in range(2):
                for c in range(4):
                    lean = unit * 16 + max(idx, 0) * 1024 + r_half * 512 + c * 128
                    assert lean == max(idx, 0) * 1024 + (r_half * 32 + unit) * 16 + c * 128
    for n in (0, 1, 63, 64, 127, 128, 129, 640, 1152, 1153):
        for row0 in range(16):
            for pair in range((n + 127) // 128 + 1):
                for blk in range(2):
                    for k in range(4):
                        i = pair * 128 + blk * 64 + row0 + 16 * k
                        assert (blk * 64 + 16 * k < (n - row0) - pair * 128) == (i < n)


def test_lean_fill_text():
    # between the free wait and the arrival: the copies only (one ignore-src predicate a row); the flag word after
    fill = re.search(r"void fill\(const WsSmem<PERSISTENT>& ws.*?\n    \}\n", CU, re.S).group(0)
    after_wait = fill.split("mbar_wait(ws.free_bar(h), parity);")[1]
    copies, rest = after_wait.split("cp_async_mbar_arrive(ws.ready(h));")
    assert copies.count("cp.async.cg.shared.global") == 4 and "setp.lt.s32 z" in copies and "ballot" not in copies
    assert "st.shared.u16" in rest
    assert CU.count("lean.prepare(lt);") == 2  # both producers, before the pair's first fill


def producer_paths(sass, function):
    """The steady pair of the producer in `function` (cuobjdump text): per free wait, the instructions from its retry
    branch to its ARRIVES (NOPs and ptxas' `@!PT LDS` fillers not counted)."""
    body = re.split(r"\n\s*Function : ", sass)
    body = next(b for b in body if b.startswith(function))
    ins = [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", body)]
    start = next(i for i, s in enumerate(ins) if "USETMAXREG.DEALLOC" in s)
    paths, pending, count = [], None, None
    for s in ins[start:]:
        if pending and s.startswith("@!" + pending + " ") and "BRA" in s:
            pending, count = None, 0
            continue
        m = re.search(r"TRYWAIT (P\d)", s)
        if m:
            pending = m.group(1)
        if count is not None:
            if "ARRIVES" in s:
                paths.append(count)
                count = None
            elif not (s.startswith("NOP") or s.startswith("@!PT LDS")):
                count += 1
    return paths


@pytest.mark.slow
def test_lean_fits_the_budget_and_copies_right_after_each_free(monkeypatch):
    # NVRTC (no GPU) of the four ws instantiations under WS_PRODUCER_LEAN: 168 registers, no spill or stack, no wgmma
    # serialised; where cuobjdump is at hand, every free wait of the producer is followed by at most 16 copies and 9
    # other instructions before its arrival (the default's K0L and K1R take about 100 each)
    cubin = ws_budget(monkeypatch, {"WS_PRODUCER_LEAN": 1})[0]
    from cupy.cuda import nvrtc
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not cuobjdump or nvrtc.getVersion() != (13, 0):
        return
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    for function in re.findall(r"Function : (\S+)", sass):
        paths = producer_paths(sass, function)
        assert len(paths) >= 4 and max(paths) <= 16 + 9, (function, paths)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["prefill-h64", "prefill-h128", "persistent-h128", "split", "h128-b64", "b4"])
def test_lean_writes_the_defaults_bits_on_the_gpu(monkeypatch, shape):
    # the same call with the ws kernels built under WS_PRODUCER_LEAN and with the process's own build: out and lse bit
    # for bit. prefill-h64 / -h128: one request's prefill (600 query tokens at 8K, K 640 / 1152, persistent, several
    # items a CTA); persistent-h128: 300 decode rows of 128 heads, K 1152; split: 64 rows of 64 heads (2 splits in
    # clusters, the one-item body); h128-b64: 64 rows of 128 heads (one item a CTA); b4: 4 rows of 64 heads (many
    # splits, the combine kernel, splits ending inside a pair). Short rows (-1 padded lists, a single entry), fully
    # invalid rows, a sink, and garbage in every pool row no index names (pool row 0 too in the decode sets: a masked
    # row's copy must write zeros, not read it)
    import torch

    from harness import inputs
    skip_unless_ws(attn)
    if attn.PRODUCER not in ("loads", "lean"):
        pytest.skip("compares the loads producer with lean: run without DSV4_ATTENTION_PRODUCER=ahead / prefetch")
    if shape.startswith("prefill"):
        heads = 128 if shape.endswith("h128") else 64
        x = inputs.attention_case(heads=heads, seed=41 + heads, device="cuda", prefill=(8192 - 600, 600), ratio=4,
                                  topk=512 if heads == 64 else 1024, empty_rows=(3, 400))
        x.args[2][100, 200:] = -1
        x.args[2][599, 1:] = -1
    else:
        batch, heads, topk = {"persistent-h128": (300, 128, 1024), "split": (64, 64, 512),
                              "h128-b64": (64, 128, 1024), "b4": (4, 64, 512)}[shape]
        x = inputs.attention_inputs(positions=decode_positions(batch), heads=heads, topk=topk, seed=batch + heads + 14,
                                    device="cuda", pool_pad=(1, 2), garbage=True)
        x.args[2][0] = -1
        if batch > 9:
            x.args[2][7] = -1
            x.args[2][9, 33:] = -1
        inputs.poison_unnamed_rows(x.args[1], x.args[2].cpu(), inputs.generator(5))

    run = synced_call(attn.sparse_attention, x)
    # the loads producer (whichever is the default) against lean
    default, lean = rebuilt_runs(monkeypatch, attn.DEFINES, [{"WS_PRODUCER_LEAN": 0}, {"WS_PRODUCER_LEAN": 1}], run)
    assert torch.equal(lean[0], default[0]) and torch.equal(lean[1], default[1])
    assert torch.isfinite(default[0].float()).all()
