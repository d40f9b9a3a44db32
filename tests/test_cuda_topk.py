"""The CUDA top-k's host routing and a numpy model of its wide kernel (kernels_cuda/topk_indices.cu),
on the CPU: which kernels one call launches, which path each row takes on the device, and that the
wide kernel's write-out (each CTA's runs placed from its peers' coarse histograms, the threshold-bin
candidates ranked in rank 0) writes every slot once with the k largest keys, lowest column first."""

import importlib

import numpy as np
import pytest

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op
H200 = (132, (1, 2, 4, 8))

# as in topk_indices.cu
THREADS, BINS, CANDIDATES = 1024, 4096, 128
CODE_LO, CODE_HI = 111 << 6, (142 << 6) | 63


def test_a_wide_tensor_is_one_launch_that_routes_rows_by_length():
    # the bench shapes: one launch of the wide kernel, no fast kernel before it (split keeps that); rows
    # on the whole cluster (groups off; the groups' bound and buffer: the tests of rows sized by length)
    for batch, columns in [(1, 65536), (64, 65536), (64, 262144), (64, 16385)]:
        runs = T.launches(batch, columns, True, *H200, groups=False)
        assert len(runs) == 1 and runs[0][0].startswith("dsv4_topk_indices_wide"), runs
        kernel, grid, shared, _, extra = runs[0]
        skip_up_to, solo_up_to, fold = extra[:3]
        assert extra[3:] == ((None,) if grid[0] > 1 else ())  # no work list: rows routed on the device
        chunk = T.chunk_columns(columns, grid[0])
        assert skip_up_to == -1 and fold == 1 and shared == 4 * (chunk + 4)
        assert solo_up_to == (min(T.SOLO_COLUMNS, chunk) if grid[0] > 1 else -1)
    split = T.launches(64, 262144, True, *H200, choice="split")
    assert [r[0] for r in split] == ["dsv4_topk_indices_fast<4>", "dsv4_topk_indices_wide<8>"]
    assert split[1][4] == (T.FAST_COLUMNS, -1, 1, None)  # the fast kernel's rows skipped, no solo rows
    assert T.launches(64, 262144, True, *H200, solo=0)[0][4][1] == -1
    assert T.launches(64, 262144, True, *H200, fold=False)[0][4][2] == T.WIDE_GROUPS
    assert T.launches(64, 262144, True, *H200, direct_sum=True)[0][4][2] == (T.WIDE_FOLD | T.WIDE_DIRECT_SUM
                                                                            | T.WIDE_GROUPS)
    # narrow tensors: the fast kernel while its grid is one wave (132 rows of 16384 at one CTA an SM,
    # 264 of 4096 at two), the half kernel (two CTAs an SM) past it, with PDL while that is one wave
    for batch, columns, kernel, pdl in [(64, 16384, "fast<4>", 1), (132, 16384, "fast<4>", 1),
                                        (133, 16384, "half<4>", 1), (256, 16384, "half<4>", 1),
                                        (265, 16384, "half<4>", 0), (132, 8192, "fast<2>", 1),
                                        (256, 8192, "half<2>", 1), (264, 4096, "fast<1>", 1),
                                        (265, 4096, "half<1>", 0)]:
        assert T.launches(batch, columns, True, *H200) == [(f"dsv4_topk_indices_{kernel}", (batch,), 0, bool(pdl),
                                                            (pdl,))], (batch, columns)
    assert T.launches(256, 16384, True, *H200, choice="wide")[0][0] == "dsv4_topk_indices_wide1"  # the A/B


def row_path(n, k, cluster, skip_up_to, solo_up_to):
    """The wide kernel's decision for a row of seq_len n (topk_row_wide), the same in every CTA."""
    if n <= skip_up_to:
        return "fast kernel"
    if n <= k:
        return "copy"
    if cluster > 1 and n <= solo_up_to:
        return "solo"
    return "cluster"


@pytest.mark.parametrize("groups", [True, False])
@pytest.mark.parametrize("choice", ["fast", "split"])
def test_every_row_of_a_mixed_batch_is_written_by_one_path_within_its_buffers(choice, groups):
    lens = [min(262144, (512 << (i % 10)) + 37 * i) for i in range(64)] + [0, 1, 511, 512, 513, 16384, 16385]
    lens += [40960, 40961, 81921, 163841]  # past the groups' bound at 1, 2 and 4 CTAs
    k = 512
    runs = T.launches(len(lens), 262144, True, 132, (1, 2, 4, 8), choice=choice, groups=groups)
    wide = runs[-1]
    cluster, (skip_up_to, solo_up_to, options) = wide[1][0], wide[4][:3]
    words = wide[2] // 4  # the chunk buffer, in keys
    fast = [r for r in runs if r[0].startswith("dsv4_topk_indices_fast")]
    for n in lens:
        path = row_path(n, k, cluster, skip_up_to, solo_up_to)
        if path == "fast kernel":  # which writes the rows it holds, and leaves the others
            assert fast and n <= 4 * THREADS * 4
        ctas = T.row_ctas(n, cluster, solo_up_to) if options & T.WIDE_GROUPS else cluster
        used = n if path == "solo" else T.chunk_columns(n, ctas)  # keys a CTA holds
        for shift in range(4):  # the row's 16-byte phase: whole groups of 4 words, key-0 padded
            assert 4 * ((shift + used + 3) >> 2) <= words, (n, path, shift)
        if choice == "fast":
            assert path != "fast kernel"
            bound = T.MAX_CHUNK if groups else T.SOLO_COLUMNS  # the groups' bound: a grid of 8 waves
            assert (path == "solo") == (k < n <= bound) and solo_up_to == bound, (n, path)


def sortable_key(x):
    u = x.astype(np.float32).view(np.uint32)
    key = np.where(u & 0x80000000, ~u, u | 0x80000000).astype(np.uint32)
    return np.where(np.isnan(x), np.uint32(0xFFFFFFFF), key).astype(np.uint32)


def coarse_bin(key):
    top = (key >> 17).astype(np.int64)
    pos = 2048 + np.clip(top - 0x4000, CODE_LO, CODE_HI) - CODE_LO
    neg = 2047 - (np.clip(0x3FFF - top, CODE_LO, CODE_HI) - CODE_LO)
    return np.where(top >= 0x4000, pos, neg)


def coarse_bin_keys(b):
    c = b - 2048 if b >= 2048 else 2047 - b
    code_lo = 0 if c == 0 else CODE_LO + c
    code_hi = 0x3FFF if c == 2047 else CODE_LO + c
    top_lo = 0x4000 + code_lo if b >= 2048 else 0x3FFF - code_hi
    top_hi = 0x4000 + code_hi if b >= 2048 else 0x3FFF - code_lo
    return top_lo << 17, (top_hi << 17) | 0x1FFFF


def test_the_branch_free_coarse_bin_equals_the_two_branch_form_for_every_key_top():
    """topk_indices.cu's coarse_bin (negative mask, one clamp of key ^ mask, 2048 + (c ^ mask)),
    written here line for line, against coarse_bin above, over all 2^15 values of key >> 17 (the
    bin reads nothing else), with the low 17 bits both clear and set."""
    for low in (0, 0x1FFFF):
        key = (np.arange(1 << 15, dtype=np.uint32) << np.uint32(17)) | np.uint32(low)
        negative = ~(key.view(np.int32) >> 31).view(np.uint32)
        top = ((key ^ negative) >> np.uint32(17)).astype(np.int64)
        c = np.minimum(np.maximum(top - (0x4000 + CODE_LO), 0), CODE_HI - CODE_LO).astype(np.uint32)
        assert np.array_equal((np.uint32(2048) + (c ^ negative)).astype(np.int64), coarse_bin(key))


def threshold(hist, need):
    """fast_threshold: the bin b with above(b) < need <= above(b) + hist[b], above(b) = keys in bins past b."""
    above = np.concatenate([np.cumsum(hist[::-1])[::-1][1:], [0]])
    (b,) = np.nonzero((above < need) & (above + hist >= need))
    assert len(b) == 1
    return int(b[0]), int(above[b[0]]), int(hist[b[0]])


def model_row(rng, n, data):
    """A row of n scores for the models: rng's normal values; `data` "ties": they repeat (steps of 1/40), a few at
    the cut; "inf": 5 of them +inf and 50 -inf; anything else: as drawn."""
    row = rng.standard_normal(n).astype(np.float32)
    if data == "ties":
        row = np.round(row * 40) / 40
    if data == "inf":
        row[rng.choice(n, 5, replace=False)] = np.inf
        row[rng.choice(n, 50, replace=False)] = -np.inf
    return row


def cluster_bucket(hists, k):
    """The cluster's threshold bin from its CTAs' coarse histograms: (bin, keys still to take from it, keys in it,
    its key range lo, hi), or None where the bin holds more than CANDIDATES (the radix path)."""
    b, above_total, inside = threshold(sum(hists), k)
    if inside > CANDIDATES:
        return None
    return (b, k - above_total, inside, *coarse_bin_keys(b))


def rank_candidates(out, candidates, k, remaining, inside):
    """The model's last step: every slot above the bin written, the bin's candidates (slot -> (key, column)) in
    their slots 0 .. inside - 1, the `remaining` largest of them (ties by column) written after."""
    assert sorted(candidates) == list(range(inside)) and (out[:k - remaining] >= 0).all()
    for rank_of, (_, column) in enumerate(sorted(candidates.values(), key=lambda c: (-c[0], c[1]))[:remaining]):
        out[k - remaining + rank_of] = column
    return out


def kept_walk(words, lo, hi, kept):
    """wide_select's placing walk over one CTA's chunk buffer `words` (ranked path), line for line:
    thread t (threads in turn: the block scan's order) keeps its first `kept` groups' bits in its
    counting walk (classify_bits4 shifted by 4 i: above at 4 i + j, inside at FIELD + 4 i + j, in a
    32-bit mask up to 4 groups, 64-bit up to 8), places them in ascending bit order (bit 4 i + j of a
    kind is word 4 (t + 1024 i) + j), then its later groups by place4. The words of each kind, above
    and inside, in slot order."""
    field, width = (16, 32) if kept <= 4 else (32, 64)
    groups = len(words) >> 2
    q = words.reshape(groups, 4).astype(np.int64)
    above = q > hi
    inside = (q >= max(lo, 1)) & ~above  # at_or_above & ~above
    above_bits = (above << np.arange(4)).sum(1)
    inside_bits = (inside << np.arange(4)).sum(1)
    walks = ([], [])
    for t in np.unique(np.nonzero(above_bits | inside_bits)[0] % THREADS).tolist():
        bits = 0
        for i, g in enumerate(range(t, groups, THREADS)):
            if i < kept:
                bits |= int(above_bits[g] | inside_bits[g] << field) << 4 * i
        assert bits < 1 << width
        while bits:
            b = (bits & -bits).bit_length() - 1
            bits &= bits - 1
            of_kind = b & (field - 1)
            walks[b >= field].append(4 * (t + THREADS * (of_kind >> 2)) + (of_kind & 3))
        for g in range(t + kept * THREADS, groups, THREADS):
            for j in range(4):
                if above[g, j] or inside[g, j]:
                    walks[int(inside[g, j])].append(4 * g + j)
    return walks


def wide_model(row, n, k, cluster, phase, kernel_cluster=None):
    """wide_select's ranked path for one row (seq_len n > k; the row's first column at 16-byte phase
    `phase`), all CTAs of the cluster, in the kernel of `kernel_cluster` CTAs (default: cluster; a
    solo row is cluster 1 in a cluster kernel): the output slots' raw columns, or None where the
    threshold bin holds more than FAST_CANDIDATES keys (the radix path, not modelled)."""
    kept = T.WIDE_KEPT_GROUPS[cluster if kernel_cluster is None else kernel_cluster]
    keys = sortable_key(row[:n])
    chunk = (-(-n // cluster) + 3) & ~3
    ctas = []
    for rank in range(cluster):
        begin = min(n, rank * chunk)
        m = min(n, begin + chunk) - begin
        shift = (phase + begin) & 3  # chunks are multiples of 4 columns long: the row's phase
        words = np.zeros(4 * ((shift + m + 3) >> 2), np.uint32)  # key 0 around the chunk
        words[shift:shift + m] = keys[begin:begin + m]
        hist = np.bincount(coarse_bin(keys[begin:begin + m]), minlength=BINS)  # real keys only
        ctas.append((begin - shift, words, hist))
    bucket = cluster_bucket([h for _, _, h in ctas], k)
    if bucket is None:
        return None
    b, remaining, inside, lo, hi = bucket
    out = np.full(k, -1, np.int64)
    candidates = {}
    for rank, (column0, words, _) in enumerate(ctas):
        # the runs' starts from the peers' histograms (the fold) ...
        first_above = sum(int(h[b + 1:].sum()) for _, _, h in ctas[:rank])
        first_inside = sum(int(h[b]) for _, _, h in ctas[:rank])
        # ... equal the peers' own counting walks (the barrier exchange)
        walk = [(int((w > hi).sum()), int(((w != 0) & (w >= lo) & (w <= hi)).sum())) for _, w, _ in ctas[:rank]]
        assert (first_above, first_inside) == (sum(a for a, _ in walk), sum(i for _, i in walk))
        # the group walk: thread t holds groups t, t + 1024, ...; slots in (thread, step, element) order
        word = np.arange(len(words))
        group = word >> 2
        order = np.lexsort((word & 3, group // THREADS, group % THREADS))
        kind = lambda w: 0 if words[w] == 0 or words[w] < lo else 1 + (int(words[w]) > hi)  # 2: above, 1: inside
        # the kernel's walk (the first `kept` groups of a thread from their kept bits) gives each kind
        # the group walk's words in its order; its column is column0 + word in every rank
        above_words, inside_words = kept_walk(words, lo, hi, kept)
        assert above_words == [w for w in order if kind(w) == 2]
        assert inside_words == [w for w in order if kind(w) == 1]
        for slot, w in enumerate(above_words, first_above):
            assert out[slot] == -1
            out[slot] = column0 + w
        for slot, w in enumerate(inside_words, first_inside):
            assert slot not in candidates
            candidates[slot] = (int(words[w]), column0 + w)
    return rank_candidates(out, candidates, k, remaining, inside)


@pytest.mark.parametrize("cluster, kernel_cluster", [(1, 1), (2, 2), (4, 4), (8, 8), (1, 8), (2, 8), (4, 8)],
                         ids=["wide1", "wide2", "wide4", "wide8", "solo-in-wide8", "2-in-wide8", "4-in-wide8"])
@pytest.mark.parametrize("data", ["normal", "ties", "inf"])
def test_the_wide_kernels_write_out_is_the_k_largest_lowest_column_first(cluster, kernel_cluster, data):
    rng = np.random.default_rng(cluster * 10 + kernel_cluster + len(data))
    # 70001 at 2 CTAs: chunks of 35004 columns, past the 8 kept groups of threads 0..558
    rows = [(5000, 512, 0), (20011, 512, 3), (33000, 2048, 1), (4100, 1024, 2), (9000, 7, 0), (70001, 512, 1)]
    assert wide_model_writes_the_k_largest(rng, rows, data, cluster, kernel_cluster) >= 3


def wide_model_writes_the_k_largest(rng, rows, data, cluster, kernel_cluster):
    """Asserts wide_model's output on each (n, k, phase) of rows (rng's normal scores; `data` "ties":
    values repeat, a few at the cut; "inf": 5 +inf and 50 -inf among them) is the k largest keys,
    lowest column first at equal keys; returns how many rows it wrote (None: not the model's case)."""
    ran = 0
    for n, k, phase in rows:
        row = model_row(rng, n, data)
        out = wide_model(row, n, k, cluster, phase, kernel_cluster)
        if out is None:
            continue
        ran += 1
        keys = sortable_key(row)
        best = sorted(range(n), key=lambda c: (-int(keys[c]), c))[:k]
        assert len(set(out.tolist())) == k and sorted(out.tolist()) == sorted(best)
    return ran


def half_keys(x):
    """half_keys2's key of each float (topk_indices.cu): its fp16 value (round to nearest even, fp16
    infinity past 65504, as cvt.rn.f16x2.f32) with the bits flipped whole when negative, else the sign
    bit. No NaN here (validated rows have none)."""
    with np.errstate(over="ignore"):  # past 65520: fp16 infinity, as the GPU's conversion
        h = x.astype(np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)
    return np.where(h & 0x8000, h ^ 0xFFFF, h ^ 0x8000).astype(np.uint32)


def fast_half_model(row, n, k, vecs):
    """fast_half_row (dsv4_topk_indices_half) for one aligned row (k < n <= 4096 vecs), line for line:
    the keys of vector i = 1024 i + t in registers as fp16 keys (x, y in word 2 i, z, w in 2 i + 1, the
    first in the high half, 0 past n), all counted by their top 12 bits with the padding taken out of
    bin 0, the threshold, the counting walk on the words (bit 4 i + j: above the bin b iff the word half
    > (b << 20 | 0xfffff), at or above it iff >= b << 20), the above keys placed in thread order over
    their set bits, the candidates ranked by their whole fp32 keys, then column. The raw columns by
    slot, or None where the bin holds more than FAST_CANDIDATES keys (the radix path, not modelled)."""
    keys16 = np.zeros(4 * THREADS * vecs, np.uint32)
    keys16[:n] = half_keys(row[:n])
    q = keys16.reshape(vecs, THREADS, 4)
    words = np.stack([(q[:, :, 0] << 16) | q[:, :, 1], (q[:, :, 2] << 16) | q[:, :, 3]], axis=2).astype(np.uint32)
    first, second = words, (words << np.uint32(16)).astype(np.uint32)
    hist = np.bincount(np.concatenate([(first >> 20).ravel(), ((first >> 4) & 0xFFF).ravel()]), minlength=BINS)
    hist[0] -= 4 * THREADS * vecs - n
    assert np.array_equal(hist, np.bincount(keys16[:n] >> 4, minlength=BINS))
    b, above_total, inside = threshold(hist, k)
    if inside > CANDIDATES:
        return None
    above_word, from_word = (b << 20) | 0xFFFFF, max(b << 20, 0x10000)
    halves = np.stack([first, second], axis=3).reshape(vecs, THREADS, 4).astype(np.int64)
    above = halves > above_word
    inside_bits = (halves >= from_word) & ~above
    assert np.array_equal(above, q > 16 * b + 15) and np.array_equal(inside_bits, q >> 4 == b)
    keys = sortable_key(row[:n])
    # rounding is monotone: every key of a bin past b is above every key of b, and b's above those below
    in_bin = keys[(keys16[:n] >> 4) == b]
    assert (keys[(keys16[:n] >> 4) > b] > in_bin.max()).all() and (keys[(keys16[:n] >> 4) < b] < in_bin.min()).all()
    out = np.full(k, -1, np.int64)
    slot, candidates = 0, []
    for t in range(THREADS):
        bits = sum(int(above[i, t, j]) << (4 * i + j) for i in range(vecs) for j in range(4))
        while bits:
            bit = (bits & -bits).bit_length() - 1
            bits &= bits - 1
            out[slot] = 4 * (t + THREADS * (bit >> 2)) + (bit & 3)
            slot += 1
        candidates += [4 * (t + THREADS * i) + j for i in range(vecs) for j in range(4) if inside_bits[i, t, j]]
    assert slot == above_total and len(candidates) == inside
    out[above_total:] = sorted(candidates, key=lambda c: (-int(keys[c]), c))[:k - above_total]
    return out


def test_the_fp16_key_orders_as_the_score_and_keeps_every_zero_and_infinity_apart():
    # half_keys is monotone in the fp32 order of the scores (ties to even, both zeros, the 65520
    # overflow point, subnormals) and real scores never key 0, the padding's; every fp16 bin is a run
    x = np.array([-np.inf, -65520, -65519.99, -1.0, -2 ** -24, -2 ** -26, -0.0, 0.0, 2 ** -26, 2 ** -25,
                  3 * 2 ** -26, 1.0, 1.00048828125, 1.000732421875, 1.0009765625, 65504, 65519.99, 65520, np.inf],
                 np.float32)
    assert (np.diff(x) >= 0).all()
    assert (np.diff(half_keys(x).astype(np.int64)) >= 0).all() and half_keys(x).min() == 0x03FF
    assert half_keys(np.float32([-0.0, 0.0])).tolist() == [0x7FFF, 0x8000]
    rng = np.random.default_rng(7)
    y = np.sort(np.concatenate([rng.standard_normal(20000), rng.standard_normal(2000) * 1e4, rng.standard_normal(
        2000) * 1e-6]).astype(np.float32))
    assert (np.diff(half_keys(y).astype(np.int64)) >= 0).all()


def test_the_vote_ranking_ranks_every_candidate_once_in_key_then_column_order():
    # rank_candidates_by_votes (topk_indices.cu) line for line: warp w takes candidates w, w + 32, ...;
    # lane l compares candidates l, l + 32, ... (clamped reads past `inside`, not counted); the ballot's
    # popcount is the rank. Ties of keys (rounded scores) and counts 1..128 around the 32-lane steps.
    rng = np.random.default_rng(5)
    for inside in (1, 2, 31, 32, 33, 64, 65, 100, 128):
        keys = rng.integers(0, 6, inside).astype(np.int64)
        columns = rng.permutation(10000)[:inside]
        ranks = {}
        for warp in range(THREADS // 32):
            for me in range(warp, inside, THREADS // 32):
                rank, j0 = 0, 0
                while j0 < inside:  # for (j = lane; j - lane < inside; j += 32), every lane at once
                    js = j0 + np.arange(32)
                    other = np.minimum(js, inside - 1)
                    before = (js < inside) & ((keys[other] > keys[me]) | ((keys[other] == keys[me]) &
                                                                         (columns[other] < columns[me])))
                    rank += int(before.sum())
                    j0 += 32
                ranks[me] = rank
        order = sorted(range(inside), key=lambda c: (-keys[c], columns[c]))
        assert [ranks[c] for c in order] == list(range(inside))


@pytest.mark.parametrize("data", ["normal", "ties", "inf", "zeros"])
def test_the_half_kernels_selection_is_the_k_largest_lowest_column_first(data):
    # fast_half_model selects what wide_model at one CTA (the default fast kernel's order) does: the k
    # largest, lowest column first, each once, in its own order
    rng = np.random.default_rng(len(data))
    ran = 0
    for n, k, vecs in [(16384, 512, 4), (16384, 1024, 4), (16384, 2048, 4), (16001, 512, 4), (8192, 512, 2),
                       (5003, 1024, 2), (12289, 512, 4)]:
        row = model_row(rng, n, data)
        if data == "zeros":  # +0 and -0 at the cut (relu-like scores), keys 0x80000000 and 0x7fffffff
            row = np.where(row > 0.3, row, np.where(rng.random(n) < 0.5, np.float32(0), np.float32(-0.0)))
            row = row.astype(np.float32)
        keys = sortable_key(row)
        best = sorted(sorted(range(n), key=lambda c: (-int(keys[c]), c))[:k])
        half = fast_half_model(row, n, k, vecs)
        if half is None:
            continue
        ran += 1
        assert sorted(half.tolist()) == best and len(set(half.tolist())) == k, (n, k, vecs)
        default = wide_model(row, n, k, 1, 0)
        assert default is None or sorted(default.tolist()) == best
    assert ran >= 4


def test_the_half_kernel_fits_two_ctas_an_sm(monkeypatch):
    # half<4> (16 keys a thread: the tightest; half<1>/<2> in the build table) at 32 registers and no
    # spill or stack (the row's keys stay in registers), so 256 x 16384 is one wave of it
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", ["dsv4_topk_indices_half<4>"])
    _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    res = build.resources(log, lowered)["dsv4_topk_indices_half<4>"]
    assert res["registers"] <= 32 and res["spill_stores"] == 0 and res["stack"] == 0, res


def test_the_one_cta_an_sm_clusters_keep_every_group_of_the_bench_chunks():
    # the kept bits (WIDE_KEPT_GROUPS) cover a thread's whole share of the chunk at the bench shapes
    # that run the 2-, 4- and 8-CTA kernels, in a mask of 32 bits (wide1) or 64 (the clusters)
    for batch, columns in [(64, 262144), (64, 65536), (1, 65536), (64, 131072)]:
        (kernel, grid, _, _, _), = T.launches(batch, columns, True, *H200)
        cluster = grid[0]
        assert kernel == f"dsv4_topk_indices_wide<{cluster}>" and cluster in (2, 4, 8)
        groups = T.chunk_columns(columns, cluster) // 4  # 16-byte aligned rows (a shifted one has one more)
        assert -(-groups // THREADS) <= T.WIDE_KEPT_GROUPS[cluster] and 2 * 4 * T.WIDE_KEPT_GROUPS[cluster] <= 64
    assert 2 * 4 * T.WIDE_KEPT_GROUPS[1] <= 32


def test_the_wide_kernels_fit_what_the_host_counts_on():
    # two 1024-thread CTAs an SM need <= 32 registers; the host's two-per-SM chunk uses the static size
    pytest.importorskip("cupy")  # NVRTC through CuPy, as tests/test_cuda_build.py
    from kernels_cuda import _loader, build
    _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    res = build.resources(log, lowered)
    assert res["dsv4_topk_indices_wide1"]["registers"] <= 32 and res["dsv4_topk_indices_wide1"]["spill_stores"] == 0
    for cluster in (2, 4, 8):
        assert res[f"dsv4_topk_indices_wide<{cluster}>"]["smem"] == T.wide_static_shared(cluster)


def test_every_launch_passes_as_many_arguments_as_its_kernel_takes():
    # the wrapper passes 8 common arguments (logits .. page_size) and then the launch's extra ones
    import re
    from pathlib import Path
    source = (Path(T.__file__).parent / "topk_indices.cu").read_text()

    def parameters(kernel):
        name = kernel.split("<")[0]
        match = re.search(rf"\b{name}\(([^)]*)\)\s*{{", source)
        assert match, name
        return len(match.group(1).split(","))

    for choice in ("fast", "split", "wide", "cluster", "v2"):
        for batch, columns in [(64, 16384), (256, 16384), (64, 65536), (64, 262144), (1, 65536), (3, 3000)]:
            for kernel, _, _, _, extra in T.launches(batch, columns, True, *H200, choice=choice):
                assert parameters(kernel) == 8 + len(extra), (choice, kernel, extra)


@pytest.mark.parametrize("cluster", [4, 8])  # a pair reads the peer's histogram directly
def test_the_cluster_histogram_sum_gives_every_cta_every_bin(cluster):
    # wide_sum's reduce-scatter then all-gather, index for index: thread t of CTA `rank` reads group
    # rank * GROUPS + t / cluster of peer t % cluster, lanes of one group added by xor shuffles (the
    # group's lanes share a warp), lane peer 0 stores slice[t / cluster]; then group t of the sum is
    # group t % GROUPS of CTA t / GROUPS's slice
    rng = np.random.default_rng(cluster)
    hists = rng.integers(0, 1000, size=(cluster, BINS // 4, 4))  # [CTA, 16-byte group, bin]
    groups = BINS // 4 // cluster
    assert groups * cluster == THREADS and 32 % cluster == 0
    slices = np.zeros((cluster, groups, 4), np.int64)
    for rank in range(cluster):
        parts = np.array([hists[t % cluster, rank * groups + t // cluster] for t in range(THREADS)])
        for off in [1 << i for i in range(cluster.bit_length() - 1)]:  # xor shuffles within a warp
            parts = parts + parts[np.arange(THREADS) ^ off]
            assert all((t ^ off) // 32 == t // 32 for t in range(THREADS))
        for t in range(0, THREADS, cluster):  # lanes with peer 0
            slices[rank, t // cluster] = parts[t]
    for rank in range(cluster):
        gathered = np.array([slices[t // groups, t % groups] for t in range(THREADS)])
        assert (gathered == hists.sum(axis=0)).all()


MIXED = [min(262144, (512 << (i % 10)) + 37 * i) for i in range(64)]  # harness/cases.py's b64-mixed-to-262144


def rows_written(lens, k, cluster, solo_up_to, work=None, groups=False):
    """topk_row_wide's decisions over a whole grid: row -> [(path, CTAs on the row, rank in the row)] for
    every CTA that writes it (cluster y, rank r takes work[y][r], or row y without a work list; rank 0
    alone copies or selects a short row without one, its own CTA with one). groups (WIDE_GROUPS): a
    long row takes row_ctas CTAs, ranks 0 .. c - 1 without a work list (the rest exit), with one the
    rank in the row is rank % c, and the c CTAs of the row must be ranks base .. base + c - 1 with
    base a multiple of c (the kernel's assumption, asserted here)."""
    places = work if work is not None else [[b] * cluster for b in range(len(lens))]
    written = {}
    for rows in places:
        assert len(rows) == cluster
        for rank, b in enumerate(rows):
            if b < 0:
                continue
            owner = work is not None or rank == 0
            n = lens[b]
            path = "copy" if n <= k else "solo" if n <= solo_up_to else "cluster"
            if path != "cluster":
                if owner:
                    written.setdefault(b, []).append((path, 1, 0))
                continue
            c = T.row_ctas(n, cluster, solo_up_to) if groups and 4 <= cluster <= 8 else cluster
            if work is None and rank >= c:
                continue
            base = rank - rank % c
            assert rows[base:base + c] == [b] * c, (rows, b, c)  # the row's CTAs, aligned
            written.setdefault(b, []).append((path, c, rank % c))
    return written


@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_the_topk_plan_packs_the_mixed_batchs_short_rows_and_writes_each_row_as_the_device_routing(k):
    # DSV4_TOPK_GROUPS=0: every long row on the whole cluster
    (cluster, solo_up_to, groups), work = T.plan_route(MIXED, k, *H200, env={"DSV4_TOPK_GROUPS": "0"})
    assert (cluster, solo_up_to, groups) == (8, 16384, False)
    device = rows_written(MIXED, k, cluster, solo_up_to)
    planned = rows_written(MIXED, k, cluster, solo_up_to, work)
    # every row written by the same path: a short row by one CTA, as rank 0 (the code's rank argument),
    # a long row by the cluster's ranks 0..7 each once, on the same chunks
    assert planned == device and sorted(planned) == list(range(64))
    long_rows = [b for b, n in enumerate(MIXED) if n > max(solo_up_to, k)]
    assert len(long_rows) == 30 and len(work) == 30 + -(-(64 - 30) // 8)  # 35 places, not 64
    for rows in work:  # a place is one long row in every entry, or short rows only: never both
        if rows[0] in long_rows:
            assert rows == [rows[0]] * cluster
        else:
            assert all(b < 0 or MIXED[b] <= max(solo_up_to, k) for b in rows) and rows[0] >= 0
    # longest first: the places' CTA columns (a long row's chunk, a pack's longest row) never increase
    cost = [T.chunk_columns(MIXED[r[0]], cluster) if r[0] in long_rows else MIXED[r[0]] for r in work]
    assert cost == sorted(cost, reverse=True) and cost[0] == T.chunk_columns(262144, 8)
    # packs take the short rows longest first, each pack's rows in decreasing length
    packs = [b for r in work if r[0] not in long_rows for b in r if b >= 0]
    assert [MIXED[b] for b in packs] == sorted((n for n in MIXED if n <= max(solo_up_to, k)), reverse=True)


@pytest.mark.parametrize("lens", [[0, 1, 511, 512, 513, 16384, 16385, 262144], [300] * 40 + [70000], [262144] * 20,
                                  [5] * 17])
def test_a_topk_plan_covers_every_row_once_whatever_the_lengths(lens, monkeypatch):
    if len(lens) * 8 <= H200[0] and max(lens) > T.FAST_COLUMNS:  # one wave of 8-CTA rows: the lean kernels, no plan
        assert T.plan_route(lens, 512, *H200) is None
        monkeypatch.setattr(T, "LEAN", "0")  # the plan's coverage on wide<8>
    for env in [{"DSV4_TOPK_GROUPS": "0"}, {}]:
        route = T.plan_route(lens, 512, *H200, env=env)
        if max(lens) <= T.FAST_COLUMNS:  # one CTA a row already (the fast kernel or wide1): nothing to plan
            assert route is None
            continue
        (cluster, solo_up_to, groups), work = route
        assert groups == ("DSV4_TOPK_GROUPS" not in env)  # the default
        assert (rows_written(lens, 512, cluster, solo_up_to, work, groups)
                == rows_written(lens, 512, cluster, solo_up_to, groups=groups))
        assert all(b >= 0 for rows in work for b in rows[:1])  # no empty place


SHORT_LENS = [0, 1, 47, 48, 63, 64, 65, 100]  # around the pages of 16, 48 and 64; more rows per test below


def short_lens(k, page_size):
    """Rows of every kind <= k: empty, one column, a page's edges, k - 1 and k, and spread lengths."""
    return [n for n in SHORT_LENS if n <= k] + [page_size - 1, page_size, page_size + 1, k - 1, k] + [
        (37 * i) % (k + 1) for i in range(23)]


@pytest.mark.parametrize("k, page_size, stale", [(512, 64, 0), (1024, 64, 3), (2048, 48, 2), (100, 16, 0)])
def test_a_short_plan_holds_the_references_output(k, page_size, stale, monkeypatch):
    # every row <= k: the plan (CPU metadata, planned for no device) holds the contract's output, which the float64
    # reference gives on fresh random logits (NaN in the short rows: none is read), in a table exactly as wide as the
    # rows need or wider (stale entries past each row's pages)
    import torch

    from harness import inputs
    from references.topk_indices import topk_indices as reference
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    lens = short_lens(k, page_size)
    x = inputs.topk_inputs(seq_lens=lens, columns=k, k=k, page_size=page_size, seed=k + page_size,
                           stale_columns=stale, nan_in_short_rows=True)
    logits, seq_lens, page_table = x.args
    plan = T.topk_indices_plan(seq_lens, page_table, k=k, page_size=page_size)
    want = reference(logits, seq_lens, page_table, k=k, page_size=page_size)
    assert plan["short"].dtype == torch.int32 and torch.equal(plan["short"], want)


@pytest.mark.parametrize("lens, k, short", [([512] * 8, 512, True), ([512] * 7 + [513], 512, False), ([], 512, False),
                                            ([3] * 3, 127, False), ([3] * 4, 127, True), ([0, 0], 4, True)])
def test_a_short_plan_only_where_every_row_is_at_most_k_and_the_copy_is_whole_vectors(lens, k, short, monkeypatch):
    # one row past k: the shape's kernel; 3 x 127 int32s: no 16-byte copy of them; rows of no column in a table of no
    # page: all -1
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    pages = -(-max(lens, default=0) // 64)
    table = torch.arange(len(lens) * pages, dtype=torch.int32).reshape(len(lens), pages)
    plan = T.topk_indices_plan(torch.tensor(lens, dtype=torch.int32), table, k=k)
    assert (plan["short"] is not None) == short
    if short and not pages:
        assert plan["short"].tolist() == [[-1] * k] * len(lens)


@pytest.mark.parametrize("elements, ctas, pdl", [(64 * 512, 32, True), (256 * 2048, 512, True), (4, 1, True),
                                                (132 * 2048 * 4 + 4, 1057, False)])
def test_the_short_copy_covers_the_output_in_one_wave_with_pdl(elements, ctas, pdl):
    # 16 bytes a thread, COPY_THREADS a CTA; PDL (loads before the wait) where the grid is one wave (2048 threads an SM)
    assert T.copy_launch(elements, H200[0]) == ((ctas,), pdl)
    assert (ctas - 1) * 4 * T.COPY_THREADS < elements <= ctas * 4 * T.COPY_THREADS


def test_no_topk_plan_where_the_call_is_not_one_cluster_launch():
    assert T.plan_route(MIXED, 512, *H200, env={"DSV4_TOPK_KERNEL": "split"}) is None
    assert T.plan_route(MIXED, 512, *H200, env={"DSV4_TOPK_KERNEL": "cluster"}) is None
    assert T.plan_route([], 512, *H200) is None
    # the plan is for the call's cluster size and solo bound: 8 CTAs; the groups' bound by default
    (cluster, solo_up_to, _), work = T.plan_route(MIXED, 512, *H200)
    assert cluster == 8 and solo_up_to == T.MAX_CHUNK
    (cluster, solo_up_to, _), work = T.plan_route(MIXED, 512, *H200, env={"DSV4_TOPK_GROUPS": "0"})
    assert cluster == 8 and solo_up_to == min(T.SOLO_COLUMNS, T.chunk_columns(262144, 8))
    # solo rows off (and with them the groups): every row > k its own place, the copies packed
    (cluster, solo_up_to, _), work = T.plan_route(MIXED, 512, *H200, env={"DSV4_TOPK_SOLO": "0"})
    assert solo_up_to == -1 and len(work) == 63 + 1  # every row > k its own place, row 0 (512 = k) a pack


def test_rows_sized_by_length_leave_uniform_batches_as_they_were_and_fit_one_cta_an_sm():
    # WIDE_GROUPS (the default; DSV4_TOPK_GROUPS=0 off): a row of the launch's widest length keeps the
    # launch's cluster, so uniform batches split as before; the bound is MAX_CHUNK where the grid is more than a wave of
    # the fewest CTAs a row that fit, else the launch's chunk (1 x 65536 stays on 8 CTAs of 8192)
    max_shared = 227 * 1024  # the opt-in limit of a CTA on sm_90
    for batch, columns, up_to in [(64, 262144, T.MAX_CHUNK), (64, 65536, 32768), (1, 65536, 8192),
                                  (64, 131072, T.MAX_CHUNK), (8, 262144, 32768)]:
        (kernel, grid, shared, pdl, extra), = T.launches(batch, columns, True, *H200, groups=True)
        (kernel0, grid0, shared0, pdl0, extra0), = T.launches(batch, columns, True, *H200, groups=False)
        cluster = grid[0]
        assert (kernel, grid, pdl) == (kernel0, grid0, pdl0) and cluster in (2, 4, 8)
        assert extra == (-1, up_to, extra0[2] | T.WIDE_GROUPS, None)
        assert T.row_ctas(columns, cluster, up_to) == cluster  # the widest rows: the same chunks
        assert shared == 4 * (max(T.chunk_columns(columns, cluster), up_to) + 4) >= shared0
        assert shared + T.wide_static_shared(cluster) <= max_shared
    assert T.launches(batch, columns, True, *H200) == T.launches(batch, columns, True, *H200, groups=True)
    # the split path keeps its routing
    assert T.launches(64, 262144, True, *H200, choice="split", groups=True)[1][4] == (T.FAST_COLUMNS, -1, 1, None)


def test_the_early_trigger_is_a_bit_of_the_one_wave_cluster_launches_only():
    # DSV4_TOPK_EARLY (WIDE_EARLY): one-wave grids only (1 x 65536, 64 x 65536), launched with PDL; the
    # same launch otherwise
    for batch, columns in [(64, 262144), (1, 65536), (64, 65536), (64, 131072), (256, 131072)]:
        (kernel, grid, shared, pdl, extra), = T.launches(batch, columns, True, *H200, early=True)
        (kernel0, grid0, shared0, pdl0, extra0), = T.launches(batch, columns, True, *H200)
        assert (kernel, grid, shared, pdl, extra[:2], extra[3:]) == (kernel0, grid0, shared0, pdl0, extra0[:2],
                                                                      extra0[3:])
        one_wave = grid[0] > 1 and batch * grid[0] <= 132
        assert extra[2] == extra0[2] | T.WIDE_EARLY * one_wave and one_wave == pdl == (columns == 65536)


def test_rows_sized_by_length_take_the_fewest_ctas_whose_chunk_fits():
    # the mixed bench batch at 8 CTAs, bound 40960: 17K and 34K rows alone, 66K and 132K on 4 (66K: MIN_ROW_CTAS 4,
    # the default; on 2 at 2), 262144 on 8
    (kernel, grid, shared, _, (_, up_to, options, _)), = T.launches(64, 262144, True, *H200, groups=True)
    assert up_to == 40960 and options & T.WIDE_GROUPS
    ctas = {n: T.wide8_row_ctas(n, 512, up_to) for n in MIXED if n > 512}
    assert {n for n, c in ctas.items() if c == 1} == {n for n in MIXED if 512 < n <= 34840}
    assert T.MIN_ROW_CTAS == 4 and {c for n, c in ctas.items() if 65795 <= n <= 67645} == {4}
    assert {T.row_ctas(n, 8, up_to, least=2) for n in ctas if 65795 <= n <= 67645} == {2}
    assert {c for n, c in ctas.items() if 131368 <= n <= 133218} == {4}
    assert ctas[262144] == 8
    for n, c in ctas.items():  # the fewest: one step fewer would not fit
        assert T.chunk_columns(n, c) <= up_to and (c <= T.MIN_ROW_CTAS or T.chunk_columns(n, c // 2) > up_to)
    assert T.row_ctas(10 ** 6, 8, up_to) == 8  # never past the cluster
    # DSV4_TOPK_GROUPS_BOUND: another bound (a multiple of 4, at most MAX_CHUNK), the buffer sized for it
    for bound, expected in [(32768, 32768), (30001, 30000), (10 ** 6, T.MAX_CHUNK)]:
        (_, _, shared, _, (_, up_to, _, _)), = T.launches(64, 262144, True, *H200, groups=True, groups_bound=bound)
        assert up_to == expected and shared == 4 * (max(32768, expected) + 4)
    (_, up_to, _), work = T.plan_route(MIXED, 512, *H200, env={"DSV4_TOPK_GROUPS": "1",
                                                               "DSV4_TOPK_GROUPS_BOUND": "32768"})
    assert up_to == 32768 and rows_written(MIXED, 512, 8, up_to, work, True) == rows_written(MIXED, 512, 8, up_to,
                                                                                                groups=True)


@pytest.mark.parametrize("k", [512, 1024])
def test_the_topk_plan_packs_rows_of_the_same_cta_count_and_writes_each_row_as_the_device_routing(k):
    (cluster, up_to, groups), work = T.plan_route(MIXED, k, *H200, env={"DSV4_TOPK_GROUPS": "1"})
    assert (cluster, up_to, groups) == (8, 40960, True)
    planned = rows_written(MIXED, k, cluster, up_to, work, groups)  # asserts every row's CTAs aligned
    assert planned == rows_written(MIXED, k, cluster, up_to, groups=groups) and sorted(planned) == list(range(64))
    ctas = [{len(planned[b]) if planned[b][0][0] == "cluster" else 1 for b in rows if b >= 0} for rows in work]
    assert all(len(c) == 1 for c in ctas)  # one CTA count a place
    # 6 rows on 8, 12 on 4 (two a place: the 132K rows and the 66K ones), 46 alone or copies (eight a place)
    assert sorted(c for (c,) in ctas) == [1] * 6 + [4] * 6 + [8] * 6 and len(work) == 18
    cost = [T.chunk_columns(MIXED[r[0]], c) if c > 1 else MIXED[r[0]] for r, (c,) in zip(work, ctas)]
    assert cost == sorted(cost, reverse=True)  # longest first


@pytest.mark.gpu
@pytest.mark.parametrize("groups", ["0", "1"])
@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_the_topk_plan_gives_the_device_routings_bits_on_a_mixed_batch(monkeypatch, k, groups):
    monkeypatch.setenv("DSV4_TOPK_GROUPS", groups)  # rows sized by their length (1) or not
    # on the GPU (no check case has rows to pack): the mixed bench batch and the path boundaries, with
    # the plan's work list, with DSV4_TOPK_ROUTE=device and without a plan: the same bits, and the k
    # largest of each row (as the torch backend's set; random normal logits, no ties at the cut)
    import torch

    from harness import inputs
    from kernels_torch.topk_indices import topk_indices as torch_topk
    lens = MIXED + [0, 1, 511, 512, 513, 2048, 2049, 16384, 16385]
    x = inputs.topk_inputs(seq_lens=lens, columns=262144, k=k, page_size=64, seed=k, device="cuda")
    _, seq_lens, page_table = x.args
    plan = T.topk_indices_plan(seq_lens, page_table, k=k, page_size=64)
    assert plan["launch"] is not None and plan["places"] < len(lens)
    planned = x.call(T.topk_indices, k=k, validate=True, plan=plan)
    unplanned = x.call(T.topk_indices, k=k)
    monkeypatch.setenv("DSV4_TOPK_ROUTE", "device")
    device = x.call(T.topk_indices, k=k, plan=plan)
    assert torch.equal(planned, unplanned) and torch.equal(planned, device)
    expected = x.call(torch_topk, k=k)
    assert torch.equal(planned.sort(1).values, expected.sort(1).values)


@pytest.mark.gpu
@pytest.mark.parametrize("batch, columns, k",
                         [(64, 16384, 512), (256, 16384, 1024), (64, 16384, 2048), (40, 8192, 512)])
def test_the_fast_kernels_slots_on_the_gpu_are_the_models_in_order(batch, columns, k):
    # every slot, order included, as wide_model at one CTA places it (the default fast kernel's and
    # wide1's order), or fast_half_model where the host runs the half kernel (256 rows); a row ending
    # mid-vector and one ending mid-row; the page table is the identity
    import torch
    generator = torch.Generator(device="cuda").manual_seed(columns + k + batch)
    logits = torch.randn(batch, columns, generator=generator, device="cuda")
    seq_lens = torch.full((batch,), columns, dtype=torch.int32, device="cuda")
    seq_lens[0], seq_lens[1] = columns - 5, columns // 2 + 3
    page_table = torch.arange(-(-columns // 64), dtype=torch.int32, device="cuda").repeat(batch, 1)
    out = T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64).cpu().numpy()
    rows, lens = logits.cpu().numpy(), seq_lens.cpu().tolist()
    vecs = next(v for v in T.FAST_VECS if 4 * THREADS * v >= columns)
    sms, clusters = T._device(torch.cuda.current_device())
    (kernel, *_), = T.launches(batch, columns, True, sms, clusters)
    assert kernel == f"dsv4_topk_indices_{'half' if batch > T.FAST_CTAS_PER_SM[vecs] * sms else 'fast'}<{vecs}>"
    modelled = 0
    for b in list(range(8)) + [batch - 1]:
        expected = (fast_half_model(rows[b], lens[b], k, vecs) if "half" in kernel
                    else wide_model(rows[b], lens[b], k, 1, 0))
        if expected is None:
            continue
        modelled += 1
        assert np.array_equal(out[b], expected), b
    assert modelled >= 4


@pytest.mark.gpu
@pytest.mark.parametrize("batch, columns, k", [(1, 65536, 512), (64, 65536, 512), (64, 65536, 2048), (64, 262144, 512),
                                               (40, 70001, 1024)])
def test_the_wide_kernels_slots_on_the_gpu_are_the_models_in_order(monkeypatch, batch, columns, k):
    # every slot, order included, as wide_model places it (the kept bits of wide<2>/<4>/<8>, and the
    # later groups of 70001-column rows at 2 CTAs: chunks of 35004, threads with a 9th group, rows at
    # every 16-byte phase); the page table is the identity, so the output is the raw column. Rows
    # are checked where the threshold bin is small enough for the ranked path (random normal
    # logits: nearly always).
    import torch
    device_index = torch.cuda.current_device()
    sms, clusters = T._device(device_index)
    (kernel, grid, *_), = T.launches(batch, columns, columns % 4 == 0, sms, clusters)
    assert kernel.startswith("dsv4_topk_indices_wide")
    monkeypatch.delenv("DSV4_TOPK_GROUPS", raising=False)
    generator = torch.Generator(device="cuda").manual_seed(columns + k)
    logits = torch.randn(batch, columns, generator=generator, device="cuda")
    assert logits.data_ptr() % 16 == 0  # row b starts at phase b * columns % 4
    seq_lens = torch.full((batch,), columns, dtype=torch.int32, device="cuda")
    seq_lens[0] = columns - 5  # a row that ends mid-group
    pages = -(-columns // 64)
    page_table = torch.arange(pages, dtype=torch.int32, device="cuda").repeat(batch, 1)
    out = T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64).cpu().numpy()
    rows, lens = logits.cpu().numpy(), seq_lens.cpu().tolist()
    modelled = 0
    for b in range(min(batch, 8)):
        expected = wide_model(rows[b], lens[b], k, grid[0], b * columns % 4)
        if expected is None:
            continue
        modelled += 1
        assert np.array_equal(out[b], expected), (b, kernel)
    assert modelled >= 1


@pytest.mark.gpu
@pytest.mark.parametrize("planned", [False, True])
def test_rows_sized_by_length_on_the_gpu_are_the_models_slots_in_order(monkeypatch, planned):
    # WIDE_GROUPS (the default) on the mixed bench lengths (and a few more): every row's slots, order
    # included, as wide_model places it on row_ctas CTAs of the 8-CTA kernel (a row on 4 CTAs, or 2 at MIN_ROW_CTAS 2,
    # at ranks base .. base + c - 1 of a cluster, with the plan beside other rows); identity page table
    import torch
    monkeypatch.setenv("DSV4_TOPK_GROUPS", "1")
    lens = MIXED + [40960, 40961, 81920, 81921, 163840, 163841, 262143]
    columns, k = 262144, 512
    sms, clusters = T._device(torch.cuda.current_device())
    (kernel, grid, _, _, (_, up_to, options, _)), = T.launches(len(lens), columns, True, sms, clusters, groups=True)
    assert kernel == "dsv4_topk_indices_wide<8>" and options & T.WIDE_GROUPS
    generator = torch.Generator(device="cuda").manual_seed(9)
    logits = torch.randn(len(lens), columns, generator=generator, device="cuda")
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    page_table = torch.arange(columns // 64, dtype=torch.int32, device="cuda").repeat(len(lens), 1)
    plan = T.topk_indices_plan(seq_lens, page_table, k=k, page_size=64) if planned else None
    assert not planned or (plan["launch"], plan["groups"]) == ((8, up_to), True)
    out = T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64, plan=plan).cpu().numpy()
    rows = logits.cpu().numpy()
    modelled = set()
    for b, n in enumerate(lens):
        if n <= k:
            continue
        c = T.wide8_row_ctas(n, k, up_to)
        expected = wide_model(rows[b], n, k, c, b * columns % 4, 8)
        if expected is not None:
            modelled.add(c)
            assert np.array_equal(out[b], expected), (b, n, c)
    assert modelled == {1, T.MIN_ROW_CTAS, 4, 8}  # (rows on 2 CTAs only at DSV4_TOPK_MIN_ROW_CTAS=2)


@pytest.mark.gpu
def test_the_early_trigger_leaves_every_output_bit_as_it_was(monkeypatch):
    # WIDE_EARLY only lets the next kernel start up to its own wait: the same bits as without it, on
    # the one-wave shapes it is for and on others (no bit: the same launch), two calls back to back
    import torch

    from harness import inputs
    for lens, columns in [([65536], 65536), ([65536] * 64, 65536), (MIXED, 262144), ([70001] * 9, 70001)]:
        x = inputs.topk_inputs(seq_lens=lens, columns=columns, k=512, page_size=64, seed=len(lens), device="cuda")
        monkeypatch.setenv("DSV4_TOPK_EARLY", "0")
        before = x.call(T.topk_indices, k=512)
        monkeypatch.setenv("DSV4_TOPK_EARLY", "1")  # the next call's kernel overlaps this one's
        assert torch.equal(x.call(T.topk_indices, k=512), before), len(lens)
        assert torch.equal(x.call(T.topk_indices, k=512), before), len(lens)


# ---- DSV4_TOPK_LONG=wide16: the wide kernel's selection on 16-bit keys, two CTAs an SM ----

def test_the_high_halves_of_the_keys_classify_every_coarse_bucket_as_the_full_keys():
    # wide16 counts and classifies on key >> 16 alone while the bucket is a coarse bin: the bin reads
    # key bits 31..17 only, and every bin's bounds are whole 2^17 key ranges, so for every bin and key
    # "above" (key > hi) and "at or above" (key >= lo) agree with the high halves' tests
    rng = np.random.default_rng(16)
    keys = np.concatenate([rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32),
                           sortable_key(rng.standard_normal(1 << 14).astype(np.float32))])
    assert np.array_equal(coarse_bin(keys), coarse_bin(keys & np.uint32(0xFFFF0000)))
    high = (keys >> 16).astype(np.int64)
    for b in range(BINS):
        lo, hi = coarse_bin_keys(b)
        assert lo & 0x1FFFF == 0 and hi & 0x1FFFF == 0x1FFFF, b
        edges = np.array([lo, max(lo - 1, 0), hi, min(hi + 1, 0xFFFFFFFF)], np.uint32)
        for k_, h in ((keys, high), (edges, (edges >> 16).astype(np.int64))):
            assert np.array_equal(k_ > hi, h > hi >> 16) and np.array_equal(k_ >= lo, h >= lo >> 16), b
    # key 0 (padding) is the only key with high half 0: -inf's key is the least real one
    assert sortable_key(np.array([-np.inf], np.float32))[0] >> 16 == 0x7F


def test_wide16_replaces_only_the_many_row_long_8_cta_launches_and_fits_two_ctas_an_sm():
    (kernel, grid, shared, pdl, extra), = T.launches(64, 262144, True, *H200, long="wide16")
    assert (kernel, grid, pdl) == ("dsv4_topk_indices_wide16<8>", (8, 64), False)
    assert extra == (-1, T.WIDE16_CHUNK, T.WIDE_FOLD | T.WIDE_GROUPS, None)
    assert shared == 2 * T.WIDE16_CHUNK >= 2 * T.chunk_columns(262144, 8)  # 2 bytes a column
    static = T.wide_static_shared(8) + 32  # WideShared<8> and the Wide16Row
    assert T.WIDE16_CTAS_PER_SM * (shared + static + 1024) <= 228 * 1024  # (1 KB an SM's CTA reserves)
    assert T.launches(64, 262144, True, *H200) == T.launches(64, 262144, True, *H200, long="")
    (kernel_p, grid_p, shared_p, pdl_p, extra_p), = T.launches(64, 262144, True, *H200, long="wide16-prefetch")
    assert (kernel_p, grid_p, shared_p, pdl_p) == (kernel, grid, shared, pdl)
    assert extra_p == (*extra[:2], extra[2] | T.WIDE16_PREFETCH, None)
    with pytest.raises(ValueError, match="DSV4_TOPK_LONG"):
        T.launches(64, 262144, True, *H200, long="wide32")
    for batch, columns, aligned, options in [(64, 262144, False, {}), (64, 131072, True, {}), (64, 65536, True, {}),
                                             (16, 262144, True, {}), (64, 262144, True, {"groups": False}),
                                             (64, 262144, True, {"direct_sum": True}),
                                             (64, 262144, True, {"groups_bound": 20480}),
                                             (64, 262144, True, {"choice": "split"})]:
        runs = T.launches(batch, columns, aligned, *H200, long="wide16", **options)
        assert runs == T.launches(batch, columns, aligned, *H200, **options), (batch, columns, aligned, options)
        assert not any("wide16" in kernel for kernel, *_ in runs)


def test_a_wide16_plan_sizes_rows_by_the_16_bit_buffer_and_never_fits_a_wide_call():
    env = {"DSV4_TOPK_LONG": "wide16"}
    (cluster, up_to, groups), work = T.plan_route(MIXED, 512, *H200, env=env)
    assert (cluster, up_to, groups) == (8, T.WIDE16_CHUNK, True)
    assert work == T.work_list(MIXED, 8, T.WIDE16_CHUNK, 512, True, T.WIDE16_MIN_ROW_CTAS)
    (_, wide_up_to, _), _ = T.plan_route(MIXED, 512, *H200)
    assert wide_up_to != up_to  # _planned compares (cluster, solo bound): a plan of one never runs the other
    # every row of a wide16 launch fits its buffer: rank 0 alone up to the bound, else chunks within it
    for n in MIXED + [T.WIDE16_CHUNK, T.WIDE16_CHUNK + 1, 262144]:
        if n > T.WIDE16_CHUNK:
            assert T.chunk_columns(n, T.row_ctas(n, 8, T.WIDE16_CHUNK, T.WIDE16_MIN_ROW_CTAS)) <= T.WIDE16_CHUNK, n


def test_wide16_fits_two_ctas_an_sm(monkeypatch):
    # 32 registers (2 x 1024 x 32 = the register file), no spill, the static shared memory the host counts
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", ["dsv4_topk_indices_wide16<8>"])
    _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    res = build.resources(log, lowered)["dsv4_topk_indices_wide16<8>"]
    assert res["registers"] <= 32 and res["spill_stores"] == 0 and res["stack"] == 0, res
    assert res["smem"] == T.wide_static_shared(8) + 32


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["normal", "ties", "equal", "neg_inf", "k2048"])
def test_wide16_writes_the_wide_kernels_bits(monkeypatch, variant):
    # The same rows on the same CTAs as wide<8> (lengths where both bounds and least CTAs give the same row_ctas: not
    # in (36864, 73728] or (147456, 163840], asserted first), so the same bits, order included: the ranked
    # path, the heavy ties' radix and column-order walk (few distinct values, all equal), -inf inside
    # rows, garbage past seq_len; planned = unplanned; and the k largest (the harness's tie rule)
    import torch

    from harness import comparators, inputs
    from kernels_torch.topk_indices import topk_indices as torch_topk
    k = 2048 if variant == "k2048" else 512
    lens = [262144, 262143, 262141, 200001, 147456, 131073, 100001, 81920, 73729, 36864, 34840, 16385, 4097,
            k + 1, k, 7, 0] + MIXED[:7]
    assert all(T.wide8_row_ctas(n, k, T.MAX_CHUNK) == T.wide8_row_ctas(n, k, T.WIDE16_CHUNK, T.WIDE16_MIN_ROW_CTAS)
               for n in lens)
    options = {"ties": dict(distinct=3), "equal": dict(distinct=1), "neg_inf": dict(neg_inf_inside=100000)}
    x = inputs.topk_inputs(seq_lens=lens, columns=262144, k=k, page_size=64, seed=16, device="cuda", tail="garbage",
                           **options.get(variant, {}))
    logits, seq_lens, page_table = x.args
    sms, clusters = T._device(torch.cuda.current_device())
    monkeypatch.setenv("DSV4_TOPK_LONG", "wide16")
    (kernel, *_), = T._launches_from_env(len(lens), 262144, True, sms, clusters, {"DSV4_TOPK_LONG": "wide16"})
    assert kernel == "dsv4_topk_indices_wide16<8>"
    got = x.call(T.topk_indices, k=k)
    assert torch.equal(x.call(T.topk_indices, k=k), got)  # reruns
    plan = T.topk_indices_plan(seq_lens, page_table, k=k, page_size=64)
    assert torch.equal(x.call(T.topk_indices, k=k, plan=plan), got)
    monkeypatch.setenv("DSV4_TOPK_LONG", "wide16-prefetch")  # the chunk prefetched into L2 first
    assert torch.equal(x.call(T.topk_indices, k=k), got)
    monkeypatch.delenv("DSV4_TOPK_LONG")
    assert torch.equal(x.call(T.topk_indices, k=k), got)  # wide<8>'s bits
    report = comparators.topk_indices({"indices": got}, {"indices": x.call(torch_topk, k=k)}, logits=logits,
                                      seq_lens=seq_lens, page_table=page_table, k=k, page_size=64)
    assert report.ok, report


def test_wide16_deals_every_peer_group_pair_past_the_threshold_out_once():
    # wide16_select's runs' starts: pair p = t + 1024 i -> (peer p // groups_past, group first + p % groups_past)
    # covers each (peer before this CTA, 16-byte group holding a bin >= the threshold bin) once, so its sums
    # are wide_select's
    for rank in range(1, 8):
        for bin_ in (0, 1, 2047, 2048, 3181, 4094, 4095):
            first = bin_ >> 2
            groups_past = BINS // 4 - first
            pairs = [(p // groups_past, first + p % groups_past) for t in range(THREADS)
                     for p in range(t, rank * groups_past, THREADS)]
            assert sorted(pairs) == [(r, g) for r in range(rank) for g in range(first, BINS // 4)]
            assert all(4 * g + 3 >= bin_ for _, g in pairs)


@pytest.mark.gpu
@pytest.mark.parametrize("k, page_size, stale", [(512, 64, 0), (1024, 64, 3), (2048, 48, 2), (4096, 64, 0),
                                                 (100, 16, 0)])
def test_the_short_plans_copy_writes_the_shape_kernels_bits(monkeypatch, k, page_size, stale):
    # every row <= k: the planned call (dsv4_topk_indices_copy of the plan's rows) writes every slot as the unplanned
    # call (the shape's kernel) and DSV4_TOPK_SHORT=0's planned one, over a poisoned output block, in reruns and in a
    # CUDA graph (validate=False, replayed twice), and the float64 reference's output
    import torch

    from harness import inputs
    from references.topk_indices import topk_indices as reference
    lens = short_lens(k, page_size)
    x = inputs.topk_inputs(seq_lens=lens, columns=k, k=k, page_size=page_size, seed=k + page_size, device="cuda",
                           stale_columns=stale, nan_in_short_rows=True)
    logits, seq_lens, page_table = x.args
    plan = T.topk_indices_plan(seq_lens, page_table, k=k, page_size=page_size)
    assert plan["short"].device == logits.device and plan["launch"] is None
    launched = []
    real = T.launch
    monkeypatch.setattr(T, "launch", lambda name, kernel, *a, **kw: launched.append(kernel) or real(name, kernel, *a,
                                                                                                    **kw))

    def call(**kw):
        torch.full((len(lens), k), 0x7EADBEEF, dtype=torch.int32, device="cuda")  # freed: the output's block
        return x.call(T.topk_indices, k=k, page_size=page_size, **kw)

    planned = call(plan=plan)
    assert launched == ["dsv4_topk_indices_copy"]
    assert torch.equal(call(plan=plan), planned)
    unplanned = call()
    monkeypatch.setenv("DSV4_TOPK_SHORT", "0")
    switched_off = call(plan=plan)
    assert launched[-1] == launched[-2] != "dsv4_topk_indices_copy"
    monkeypatch.delenv("DSV4_TOPK_SHORT")
    assert torch.equal(unplanned, planned) and torch.equal(switched_off, planned)
    fewer = T.topk_indices_plan(seq_lens[:-4], page_table[:-4], k=k, page_size=page_size)  # other metadata, unchecked:
    call(plan=fewer, validate=False)  # its copy is never read past its rows: the shape's kernel
    assert launched[-1] == launched[-2]
    assert torch.equal(planned.cpu(), reference(logits.cpu(), seq_lens.cpu(), page_table.cpu(), k=k,
                                                page_size=page_size))
    call(plan=plan, validate=False)  # built and loaded outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = x.call(T.topk_indices, k=k, page_size=page_size, plan=plan, validate=False)
    for _ in range(2):
        captured.fill_(0x7EADBEEF)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, planned)

