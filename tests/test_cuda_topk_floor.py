"""DSV4_TOPK_WIDE_FLOOR (docs/topk-s17a.md): wide_select's histogram pass counts by atomic only the keys at or above a
floor bin from its chunk's first half. The floor's argument on a numpy model of the kernel's bins (no GPU), then the
kernels built with and without it writing the same bits on the GPU."""
import sys

import numpy as np
import pytest

import kernels_cuda  # noqa: F401  (registers kernels_cuda.topk_indices)

T = sys.modules["kernels_cuda.topk_indices"]
K_LIMIT = 32 * 32  # k <= 32 TOPK_WARPS: one lane's largest key a warp slot


def test_the_floor_is_on_by_default_and_in_the_defines():
    assert T.DEFINES["WIDE_FLOOR"] == T.WIDE_FLOOR and T.DEFINES["WIDE_FLOOR_COLUMNS"] == T.WIDE_FLOOR_COLUMNS
    assert T.WIDE_FLOOR_COLUMNS >= 4 * T.THREADS  # a first half of at least one 16-byte group a thread (2 for 8192)


def _floor_bin(bins_by_thread_max, k):
    """wide_floor_bin: per warp of 32 threads the highest B with >= ceil(k / 32) lanes at or above it; the least B."""
    need = -(-k // 32)
    floors = []
    for warp in bins_by_thread_max.reshape(-1, 32):
        b = 0
        for bit in range(11, -1, -1):
            if (warp >= (b | 1 << bit)).sum() >= need:
                b |= 1 << bit
        floors.append(b)
    return min(floors)


def _threshold(hist, total, need):
    """fast_threshold: the bin b with above(b) < need <= above(b) + count(b), above = total - keys in bins <= b."""
    through = np.cumsum(hist)
    above = total - through
    b = int(np.nonzero((above < need) & (above + hist >= need))[0][0])
    return b, int(above[b]), int(hist[b])


@pytest.mark.parametrize("k", [1, 64, 512, 1000, 1024])
@pytest.mark.parametrize("shape", ["normal", "ties", "mostly-low", "short-chunk"])
def test_a_floored_histogram_gives_the_full_histograms_threshold_and_bucket(k, shape):
    # rows of 1, 2 and 8 CTAs of 1024 threads on a model whose bins are any monotone map of the keys (the argument
    # needs only that): the summed histograms with each CTA's floor (skipped keys in bin 0) give the same threshold
    # bin, keys above it and keys in it as the exact ones, and every skipped key lies below the row's k-th largest
    rng = np.random.default_rng(k * 7 + len(shape))
    for ctas in (1, 2, 8):
        m = 2048 if shape == "short-chunk" else 16384
        if shape == "ties":
            bins = rng.integers(0, 5, (ctas, m)) * 800
        elif shape == "mostly-low":
            low = rng.random((ctas, m)) < 0.99
            bins = np.where(low, rng.integers(0, 3, (ctas, m)), rng.integers(0, 4096, (ctas, m)))
        else:
            bins = np.clip(np.round(rng.normal(2600, 300, (ctas, m))), 0, 4095).astype(np.int64)
        exact = sum(np.bincount(b, minlength=4096) for b in bins)
        floored = np.zeros(4096, np.int64)
        half = m // 2
        for b in bins:
            tops = np.zeros(1024, np.int64)  # thread t's largest of its first-half groups (t, t + 1024, ...)
            groups = b[:half].reshape(-1, 4).max(axis=1)
            for g, top in enumerate(groups):
                tops[g % 1024] = max(tops[g % 1024], top)
            floor = _floor_bin(tops, k)
            assert (b >= floor).sum() >= k  # the argument: k keys of this chunk at or above the floor
            floored += np.bincount(np.where(b >= floor, b, 0), minlength=4096)
        total = ctas * m
        assert floored.sum() == exact.sum() == total
        bin_, above, inside = _threshold(exact, total, k)
        assert _threshold(floored, total, k) == (bin_, above, inside)
        assert (floored[bin_:] == exact[bin_:]).all()  # every bin a count-before reads


@pytest.mark.gpu
@pytest.mark.parametrize("case", [
    dict(seq_lens=[65536, 40000, 65536, 20000], columns=65536, k=512),
    dict(seq_lens=[65536, 65000, 30000], columns=65536, k=1024),
    dict(seq_lens=[65536, 50000], columns=65536, k=2048),  # past K_LIMIT: floor off, the same path as before
    dict(seq_lens=[262144, 131072, 70000, 9000], columns=262144, k=512),
    dict(seq_lens=[65536, 40000], columns=65536, k=512, distinct=5),  # heavy ties: the radix over the bucket
    dict(seq_lens=[65536, 40000], columns=65536, k=1024, distinct=40),
    dict(seq_lens=[65536, 33000], columns=65536, k=512, neg_inf_inside=60000),  # most of each row -inf
    dict(seq_lens=[34000] * 6 + [65536] * 2, columns=65536, k=512),
])
@pytest.mark.parametrize("planned", [False, True])
def test_the_floor_writes_the_bits_of_the_build_without_it(monkeypatch, case, planned):
    import torch

    from harness import inputs
    from tests.rebuilds import rebuilt_runs
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the wide kernels' clusters are Hopper's")
    x = inputs.topk_inputs(seed=17 + len(case["seq_lens"]), device="cuda", **case)
    logits, seq_lens, table = x.args
    plan = kernels_cuda.topk_indices_plan(seq_lens, table, k=case["k"]) if planned else None

    def run():
        out = kernels_cuda.topk_indices(logits, seq_lens, table, k=case["k"], plan=plan)
        torch.cuda.synchronize()
        return out

    floor_off, floor_on = rebuilt_runs(monkeypatch, T.DEFINES, [{"WIDE_FLOOR": 0}, {"WIDE_FLOOR": 1}], run)
    assert torch.equal(floor_off, floor_on)
    assert (floor_on[:, :min(case["seq_lens"])] >= 0).all()
