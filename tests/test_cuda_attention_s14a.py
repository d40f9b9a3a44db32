"""The ws kernel's gathers at prefill (docs/attn-s14a.md): DSV4_ATTENTION_ORDER=rows (the persistent grid's items
row-major, a row's head blocks on neighbouring CTAs at once) and DSV4_ATTENTION_QO_POLICY=first (Q's TMA loads and
out's bulk stores evict_first in L2). CPU: a model of which items run together under each order, and the kernel text
that maps an item; NVRTC (slow): the budget; GPU: the default's bits under each switch."""

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
from tests.rebuilds import decode_positions, rebuilt_runs, skip_unless_ws, synced_call, ws_budget

attn = importlib.import_module("kernels_cuda.sparse_attention")  # the module (the package exports the op by that name)
CU = (Path(__file__).parent.parent / "kernels_cuda" / "sparse_attention.cu").read_text()
SWITCHES = {"order": "WS_ORDER_ROWS", "qo_policy": "WS_QO_EVICT_FIRST"}


def test_switch_defaults():
    # both the defaults since session 15: ORDER=rows (blocks under the tail split, whose pieces are head-block-major),
    # QO_POLICY=first (normal under Q's copies: the hint rides Q's TMA copies)
    assert attn.ORDERS == ("blocks", "rows") and attn.ORDER == "rows" and attn.DEFINES["WS_ORDER_ROWS"] == 1
    assert attn.QO_POLICIES == ("normal", "first") and attn.QO_POLICY == "first"
    assert attn.DEFINES["WS_QO_EVICT_FIRST"] == 1


@pytest.mark.parametrize("env,order", [({"DSV4_ATTENTION_TAIL": "split"}, "blocks"),
                                       ({"DSV4_ATTENTION_PRODUCER": "prefetch"}, "blocks"),
                                       ({"DSV4_ATTENTION_PRODUCER": "ahead"}, "rows")])
def test_order_defaults_to_blocks_where_rows_does_not_build_clean(monkeypatch, env, order):
    # the tail split's pieces are head-block-major (static_assert); the prefetch producer spills under rows
    monkeypatch.delenv("DSV4_ATTENTION_ORDER", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location("_s14a_probe", attn.__file__)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    assert probe.ORDER == order and probe.DEFINES["WS_ORDER_ROWS"] == (order == "rows")


def item_of(item, batch, head_blocks, rows):
    """ws_item: (query row, head block) of persistent item `item` (rows: WS_ORDER_ROWS)."""
    return (item // head_blocks, item % head_blocks) if rows else (item % batch, item // batch)


def test_ws_item_text_is_the_model():
    body = re.search(r"WsItem<Index> ws_item\(.*?\n\}", CU, re.S).group(0)
    rows, blocks = body.split("#else")
    assert "return {item / head_blocks, item % head_blocks};" in rows
    assert "return {item % batch, item / batch};" in blocks
    # every place the persistent body maps an item (the producer, the math warpgroups, Q's TMA, the next item's index
    # list) goes through ws_item; the tail split's pieces keep their own (excluded under WS_ORDER_ROWS)
    persistent = re.search(r"void ws_persistent\(.*?\n\}\n#endif", CU, re.S).group(0)
    assert persistent.count("ws_item(") == 4
    assert len(re.findall(r"item % batch, hb = item / batch", persistent)) == 2  # the two WS_TAIL_SPLIT branches
    assert "WS_ORDER_ROWS == 1 && WS_TAIL_SPLIT == 0" in CU


def rounds(batch, heads, grid, rows):
    """[round][cta] = (row, head block) of the persistent grid: CTA c takes items c, c + grid, ..."""
    head_blocks = heads // 64
    items = batch * head_blocks
    return [[item_of(r * grid + c, batch, head_blocks, rows) for c in range(grid) if r * grid + c < items]
            for r in range(-(-items // grid))]


@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("batch, heads, grid", [(4096, 128, 132), (4096, 64, 132), (256, 128, 132), (64, 128, 128),
                                                (7, 128, 5), (300, 192, 132)])
def test_every_item_runs_once(batch, heads, grid, rows):
    seen = [x for rnd in rounds(batch, heads, grid, rows) for x in rnd]
    assert sorted(seen) == [(b, hb) for b in range(batch) for hb in range(heads // 64)]


def test_rows_runs_a_rows_head_blocks_together_at_prefill_h128():
    # prefill H128: head-block-major, a row's two head blocks run 31 rounds apart; row-major, on CTAs 2i and 2i + 1 of
    # the same round (132 is even), so the second block's gathers find the rows the first has just brought
    def round_of(rnds):
        return {x: r for r, rnd in enumerate(rnds) for x in rnd}

    blocks = round_of(rounds(4096, 128, 132, False))
    assert min(blocks[(b, 1)] - blocks[(b, 0)] for b in range(4096)) == 31
    by_rows = rounds(4096, 128, 132, True)
    for rnd in by_rows:
        for c in range(0, len(rnd), 2):
            assert rnd[c][0] == rnd[c + 1][0] and (rnd[c][1], rnd[c + 1][1]) == (0, 1)
    # and a round's distinct rows halve: 66 against 132
    assert len({b for b, _ in by_rows[0]}) == 66 and len({b for b, _ in rounds(4096, 128, 132, False)[0]}) == 132


def test_order_leaves_h64_as_it_is():
    assert rounds(4096, 64, 132, True) == rounds(4096, 64, 132, False)


def test_rows_refuses_the_tail_split(monkeypatch):
    import subprocess
    import sys
    env = {"DSV4_ATTENTION_ORDER": "rows", "DSV4_ATTENTION_TAIL": "split", "PATH": ""}
    r = subprocess.run([sys.executable, "-c", "import kernels_cuda.sparse_attention"], env=env, capture_output=True,
                       text=True, cwd=Path(__file__).parent.parent)
    assert r.returncode != 0 and "DSV4_ATTENTION_ORDER=rows: not with DSV4_ATTENTION_TAIL" in r.stderr


def test_qo_policy_hints_q_and_outs_stores_only():
    tma = re.search(r"void ws_q_tma\(.*?\n\}", CU, re.S).group(0)
    hinted, plain = tma.split("#else")
    assert ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;" in hinted and '"l"(policy)' in hinted
    assert "cache_hint" not in plain
    store = re.search(r"void ws_bulk_store\(.*?\n\}", CU, re.S).group(0)
    assert "if constexpr (STREAM && WS_QO_EVICT_FIRST)" in store
    policy = re.search(r"ws_stream_policy\(\) \{.*?\n\}", CU, re.S).group(0)
    assert "createpolicy.fractional.L2::evict_first.b64" in policy
    # out's rows stream; the splits' fp32 partials (read back by the combine kernel) do not
    assert len(re.findall(r"ws_bulk_store_rows<true>\(out", CU)) == 1
    assert len(re.findall(r"ws_bulk_store_rows<false>\(part_out", CU)) == 2
    assert len(re.findall(r"ws_bulk_store<true>\(dst", CU)) == 2  # the persistent epilogue's two pieces a row


@pytest.mark.slow
@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_switch_fits_the_ws_budget_without_spills(monkeypatch, switch):
    # NVRTC (no GPU) of the four ws instantiations under the switch: 168 registers, no spill or stack, no wgmma
    # serialised
    ws_budget(monkeypatch, {SWITCHES[switch]: 1})


@pytest.mark.gpu
@pytest.mark.parametrize("switch", sorted(SWITCHES))
@pytest.mark.parametrize("shape", ["prefill-h128", "prefill-h64", "persistent-h128", "split", "h128-b64"])
def test_switch_writes_the_defaults_bits_on_the_gpu(monkeypatch, switch, shape):
    # the same call with the ws kernels built with the switch off and on: out and lse bit for
    # bit (only which CTA takes an item, or the L2 policy, changes). prefill-h128 / -h64: one request's prefill (600
    # query tokens at 8K, each with its window and top-k: every list full, head blocks 31 rounds apart at H128 under
    # the default order only from 4096 rows, so this checks the mapping, not the timing); persistent-h128: 300 decode
    # rows of 128 heads, K 1152 (several items a CTA, both head blocks); split: 64 rows of 64 heads, 2 splits in
    # clusters (the one-item body: Q's hint); h128-b64: 64 rows of 128 heads (one item a CTA). Short rows (-1 padded
    # lists), fully invalid rows and a sink in each
    import torch
    from harness import inputs
    skip_unless_ws(attn)
    if not attn.WS_Q_TMA or attn.WS_TAIL_SPLIT:
        pytest.skip("compares the switch's two builds: run without DSV4_ATTENTION_Q, TAIL")
    if shape.startswith("prefill"):
        heads = 128 if shape.endswith("h128") else 64
        x = inputs.attention_case(heads=heads, seed=14 + heads, device="cuda", prefill=(8192 - 600, 600), ratio=4,
                                  topk=512 if heads == 64 else 1024, empty_rows=(3, 400))
        x.args[2][100, 200:] = -1  # short rows: one, and one of a single entry
        x.args[2][599, 1:] = -1
    else:
        batch, heads, topk = {"persistent-h128": (300, 128, 1152), "split": (64, 64, 512),
                              "h128-b64": (64, 128, 1152)}[shape]
        x = inputs.attention_inputs(positions=decode_positions(batch), heads=heads, topk=topk, seed=batch + heads,
                                    device="cuda")
        x.args[2][7] = -1
        x.args[2][9, 33:] = -1

    run = synced_call(attn.sparse_attention, x)
    default, switched = rebuilt_runs(monkeypatch, attn.DEFINES, [{SWITCHES[switch]: 0}, {SWITCHES[switch]: 1}], run)
    assert torch.equal(switched[0], default[0]) and torch.equal(switched[1], default[1])
    assert torch.isfinite(default[0].float()).all()
