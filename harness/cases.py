"""The case catalogue, as data: per op, test cases (small, adversarial, seeded) and benchmark cases
(V4-Flash / V4-Pro production shapes), plus a seeded fuzzer that draws more from the same spaces.

A case is (op, name, family, params, seed). `build(case, device)` turns it into an OpInputs; a
compress case with several `steps` is a chain of calls on one state. Every case rebuilds alone from
its name (fuzz cases from `fuzz-<op>-<seed>`), which is what the repro command relies on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from harness import badinput, contract
from harness.fuzz import candidates as shrink_candidates
from harness.ops import entry as op_entry


@dataclass(frozen=True)
class Case:
    op: str
    name: str
    family: str
    params: dict = field(hash=False)
    seed: int = 0
    tier: str = "quick"  # quick: every run (CPU-sized); full: adds production-sized shapes

    @property
    def id(self):
        return f"{self.op}/{self.name}"


def _c(op, name, family, seed, tier="quick", **params):
    return Case(op, name, family, params, seed, tier)


# ---------------------------------------------------------------------------------------------
# compress: params ratio, d, mode, prefix (list), steps (list of extend lists, one per call),
# optional release (paged: pages only for the blocks this call or the next one reads), score_scale, spare


def _compress_cases():
    cases = []
    for mode in ("ring", "paged"):
        m = mode
        cases += [
            _c("compress", f"c4-{m}-first-emission", "c4-first-emission", 1, ratio=4, d=32, mode=m, prefix=[0],
               steps=[[4]]),
            _c("compress", f"c4-{m}-prefill", "c4-prefill", 2, ratio=4, d=32, mode=m, prefix=[0], steps=[[37]]),
            _c("compress", f"c4-{m}-mid-block", "c4-chunked", 3, ratio=4, d=32, mode=m, prefix=[5], steps=[[10]]),
            _c("compress", f"c4-{m}-ends-mid-block", "c4-chunked", 4, ratio=4, d=32, mode=m, prefix=[8], steps=[[6]]),
            _c("compress", f"c4-{m}-short-extend", "c4-short-extend", 5, ratio=4, d=32, mode=m, prefix=[1, 4],
               steps=[[2, 3]]),
            _c("compress", f"c4-{m}-mixed-batch", "c4-mixed", 6, ratio=4, d=32, mode=m, prefix=[0, 3, 8, 13, 2, 6],
               steps=[[4, 0, 9, 30, 1, 2]]),
            _c("compress", f"c4-{m}-decode-chain", "c4-decode", 7, ratio=4, d=32, mode=m, prefix=[0, 2, 6],
               steps=[[1, 1, 1]] * 11),
            _c("compress", f"c4-{m}-chunk-chain", "c4-chunked", 8, ratio=4, d=32, mode=m, prefix=[0, 1],
               steps=[[3, 2], [2, 7], [6, 1], [1, 4], [9, 5]]),
            _c("compress", f"c4-{m}-large-scores", "c4-stability", 9, ratio=4, d=32, mode=m, prefix=[3],
               steps=[[25]], score_scale=300.0),
            _c("compress", f"c128-{m}-first-emission", "c128-first-emission", 10, ratio=128, d=32, mode=m,
               prefix=[0], steps=[[128]]),
            _c("compress", f"c128-{m}-many-blocks", "c128-prefill", 11, ratio=128, d=32, mode=m, prefix=[0],
               steps=[[3 * 128 + 5]]),
        ]
    cases.append(_c("compress", "c4-paged-released", "c4-paged-pages", 12, ratio=4, d=32, mode="paged",
                    prefix=[9, 20, 7], steps=[[7, 12, 1]], release=True, spare=5))
    cases.append(_c("compress", "c4-paged-prefill-released", "c4-paged-pages", 13, ratio=4, d=32, mode="paged",
                    prefix=[0, 3], steps=[[41, 30]], release=True, spare=3))
    for mode in ("ring", "paged", "online"):
        m = mode
        cases += [
            _c("compress", f"c128-{m}-mid-block", "c128-chunked", 20, ratio=128, d=32, mode=m, prefix=[100],
               steps=[[200]]),
            _c("compress", f"c128-{m}-short-extend", "c128-short-extend", 21, ratio=128, d=32, mode=m,
               prefix=[130, 0], steps=[[20, 127]]),
            _c("compress", f"c128-{m}-mixed-batch", "c128-mixed", 22, ratio=128, d=32, mode=m,
               prefix=[0, 127, 128, 300], steps=[[129, 1, 255, 40]]),
            _c("compress", f"c128-{m}-decode-chain", "c128-decode", 23, ratio=128, d=32, mode=m, prefix=[125, 254],
               steps=[[1, 1]] * 5),
            _c("compress", f"c128-{m}-large-scores", "c128-stability", 24, ratio=128, d=32, mode=m, prefix=[60],
               steps=[[200]], score_scale=300.0),
        ]
    cases.append(_c("compress", "c128-online-chunk-chain", "c128-chunked", 25, ratio=128, d=32, mode="online",
                    prefix=[0, 5], steps=[[100, 1], [30, 250], [1, 0], [140, 3]]))
    cases.append(_c("compress", "c128-paged-released", "c128-paged-pages", 26, ratio=128, d=32, mode="paged",
                    prefix=[300, 129], steps=[[100, 127]], release=True, spare=3))
    cases.append(_c("compress", "c128-paged-prefill-released", "c128-paged-pages", 27, ratio=128, d=32, mode="paged",
                    prefix=[0], steps=[[3 * 128 + 5]], release=True, spare=2))
    # requests with and without new tokens interleaved in every order (0 first, last, adjacent, alone),
    # the two steps complementary; prefixes that are multiples of nothing
    gaps = [[0, 7, 0, 0, 6, 13, 0], [5, 0, 9, 1, 0, 0, 3]]
    gaps128 = [[0, 200, 0, 0, 129, 1, 0], [3, 0, 127, 2, 0, 0, 130]]
    for mode in ("ring", "paged"):
        cases.append(_c("compress", f"c4-{mode}-interleaved-empty", "c4-mixed", 40, ratio=4, d=32, mode=mode,
                        prefix=[5, 2, 9, 0, 14, 7, 1001], steps=gaps))
    for mode in ("ring", "paged", "online"):
        cases.append(_c("compress", f"c128-{mode}-interleaved-empty", "c128-mixed", 41, ratio=128, d=16, mode=mode,
                        prefix=[130, 5, 255, 0, 389, 127, 1001], steps=gaps128))
    # chained calls with large scores: the running max must carry across calls
    cases.append(_c("compress", "c128-online-large-scores-chain", "c128-stability", 42, ratio=128, d=32,
                    mode="online", prefix=[60, 0, 131], steps=[[100, 140, 1], [30, 1, 0], [200, 0, 126]],
                    score_scale=300.0))
    cases.append(_c("compress", "c4-paged-large-scores-chain", "c4-stability", 43, ratio=4, d=32, mode="paged",
                    prefix=[3, 0], steps=[[9, 2], [1, 5], [6, 0]], score_scale=300.0))
    # state rows from the last row down (not in order, not starting at 0)
    cases.append(_c("compress", "c4-ring-rows-descending", "c4-mixed", 44, ratio=4, d=32, mode="ring",
                    prefix=[3, 10, 0], steps=[[6, 1, 4]], rows_order="descending", spare=3))
    cases.append(_c("compress", "c128-online-rows-descending", "c128-mixed", 45, ratio=128, d=32, mode="online",
                    prefix=[70, 0, 300], steps=[[100, 5, 1]], rows_order="descending", spare=3))
    # the widths of V4 (512 main KV, 128 indexer keys: more than one channel tile), and widths that are
    # not powers of two (a last partial tile)
    cases += [
        _c("compress", "c4-ring-d128", "c4-width", 46, ratio=4, d=128, mode="ring", prefix=[0, 6, 13],
           steps=[[9, 0, 7], [3, 2, 0]]),
        _c("compress", "c4-paged-d512", "c4-width", 47, ratio=4, d=512, mode="paged", prefix=[3, 0],
           steps=[[6, 9], [5, 0]]),
        _c("compress", "c128-online-d512", "c128-width", 48, ratio=128, d=512, mode="online", prefix=[100, 0],
           steps=[[30, 129], [2, 0]]),
        _c("compress", "c128-ring-d128", "c128-width", 49, ratio=128, d=128, mode="ring", prefix=[120, 0],
           steps=[[10, 128]]),
        _c("compress", "c128-paged-d512", "c128-width", 50, ratio=128, d=512, mode="paged", prefix=[127],
           steps=[[1]]),
        _c("compress", "c4-paged-d40", "c4-width", 51, ratio=4, d=40, mode="paged", prefix=[2, 9],
           steps=[[11, 3]]),
        _c("compress", "c128-online-d72", "c128-width", 52, ratio=128, d=72, mode="online", prefix=[126],
           steps=[[3]]),
        _c("compress", "c4-ring-d1", "c4-width", 53, ratio=4, d=1, mode="ring", prefix=[1, 0], steps=[[9, 4]]),
        # a call with no new token at all (kv_score of 0 rows): nothing emitted, nothing written
        _c("compress", "c4-paged-no-tokens", "c4-short-extend", 54, ratio=4, d=32, mode="paged", prefix=[6, 0],
           steps=[[0, 0]]),
        _c("compress", "c128-online-no-tokens", "c128-short-extend", 55, ratio=128, d=32, mode="online",
           prefix=[130, 5], steps=[[0, 0]]),
    ]
    # full: the edge cases again at V4's main KV width (the only width some peers' kernels are built for)
    cases += [replace(c, name=f"{c.name}-d512", tier="full", params={**c.params, "d": 512}) for c in cases
              if c.params["d"] in (16, 32)]
    # full: the real head dims (512 main KV, 128 indexer keys) and larger batches
    for d in (512, 128):
        for ratio, modes in ((4, ("ring", "paged")), (128, ("ring", "paged", "online"))):
            for m in modes:
                cases += [
                    _c("compress", f"c{ratio}-{m}-d{d}-prefill", f"c{ratio}-prefill", 30, "full", ratio=ratio, d=d,
                       mode=m, prefix=[0, 0], steps=[[4 * ratio + 3, 2 * ratio]]),
                    _c("compress", f"c{ratio}-{m}-d{d}-decode-batch", f"c{ratio}-decode", 31, "full", ratio=ratio,
                       d=d, mode=m, prefix=[ratio * i + i % ratio for i in range(32)], steps=[[1] * 32] * 3),
                ]
    return cases


# ---------------------------------------------------------------------------------------------
# indexer logits: params context_lens, heads, max_context_len, key_scale


def _indexer_cases():
    return [
        _c("indexer_logits", "context-edges-h64", "context-edges", 1, context_lens=[0, 1, 63, 64, 65, 130],
           heads=64, max_context_len=192),
        _c("indexer_logits", "context-edges-h32", "context-edges", 2, context_lens=[129, 0, 64, 5], heads=32,
           max_context_len=129),
        _c("indexer_logits", "max-len-not-multiple-of-64", "padding", 3, context_lens=[50, 77], heads=64,
           max_context_len=100),
        _c("indexer_logits", "all-empty", "padding", 4, context_lens=[0, 0], heads=32, max_context_len=64),
        _c("indexer_logits", "mixed-batch", "batch", 5, context_lens=[300, 17, 256, 1, 191, 64, 128, 2],
           heads=64, max_context_len=320),
        _c("indexer_logits", "large-keys", "magnitude", 6, context_lens=[200, 70], heads=64, max_context_len=256,
           key_scale=1e4),
        # past one 2048-entry chunk (where kernels split a context), at the chunk edges
        _c("indexer_logits", "past-2048-h64", "long", 9, context_lens=[2049, 0, 4100, 2048, 1], heads=64,
           max_context_len=4160),
        _c("indexer_logits", "past-2048-h32", "long", 10, context_lens=[2047, 3001], heads=32, max_context_len=3001),
        # max_context_len far past every context (engines pass the model's), table as wide
        _c("indexer_logits", "max-len-far-past", "padding", 11, context_lens=[5, 70, 0], heads=64,
           max_context_len=1000),
        _c("indexer_logits", "max-len-0", "padding", 12, context_lens=[0, 0], heads=32, max_context_len=0),
        _c("indexer_logits", "long-context-h64", "long", 7, "full", context_lens=[16384, 4000, 9999, 65],
           heads=64, max_context_len=16384),
        _c("indexer_logits", "long-context-h32", "long", 8, "full", context_lens=[65536, 777], heads=32,
           max_context_len=65600),
    ]


# ---------------------------------------------------------------------------------------------
# top-k: params seq_lens, columns, k, page_size, distinct (ties), tail (value past seq_len),
# neg_inf_inside (that many -inf logits inside each row's seq_len)


def _topk_cases():
    inf, nan = float("inf"), float("nan")
    return [
        _c("topk_indices", "short-rows", "short", 1, seq_lens=[0, 1, 100, 511, 512], columns=600, k=512),
        _c("topk_indices", "exactly-k-and-k+1", "boundary", 2, seq_lens=[512, 513, 1024, 1025], columns=1100, k=512),
        _c("topk_indices", "long-k512", "long", 3, seq_lens=[2000, 4096, 600], columns=4096, k=512),
        _c("topk_indices", "long-k1024", "long", 4, seq_lens=[3000, 1025, 1024], columns=3000, k=1024),
        _c("topk_indices", "long-k2048", "long", 5, seq_lens=[5000, 2049, 7], columns=5100, k=2048),
        _c("topk_indices", "all-equal", "ties", 6, seq_lens=[1000, 2000], columns=2000, k=512, distinct=1),
        _c("topk_indices", "heavy-ties", "ties", 7, seq_lens=[3000, 1500], columns=3000, k=512, distinct=5),
        _c("topk_indices", "ties-at-the-cut", "ties", 8, seq_lens=[4096], columns=4096, k=1024, distinct=40),
        _c("topk_indices", "tail-nan", "tail", 9, seq_lens=[700, 1500], columns=2048, k=512, tail=nan),
        _c("topk_indices", "tail-neg-inf", "tail", 10, seq_lens=[700, 1500], columns=2048, k=512, tail=-inf),
        _c("topk_indices", "neg-inf-inside-seq-len", "tail", 12, seq_lens=[600, 3000], columns=3000, k=512,
           neg_inf_inside=200),
        _c("topk_indices", "page-size-16", "pages", 11, seq_lens=[1000, 600], columns=1024, k=512, page_size=16),
        # page sizes other than 64 on short and long rows
        _c("topk_indices", "page-size-1", "pages", 13, seq_lens=[300, 700, 0], columns=700, k=512, page_size=1),
        _c("topk_indices", "page-size-16-short", "pages", 14, seq_lens=[200, 512, 17], columns=600, k=512,
           page_size=16),
        _c("topk_indices", "page-size-32", "pages", 15, seq_lens=[511, 2000, 33], columns=2000, k=512, page_size=32),
        _c("topk_indices", "page-size-128-k1024", "pages", 16, seq_lens=[100, 1500, 1024], columns=1600, k=1024,
           page_size=128),
        _c("topk_indices", "page-size-256-k2048", "pages", 17, seq_lens=[2048, 2049, 3000, 255], columns=3000,
           k=2048, page_size=256),
        _c("topk_indices", "nan-in-short-rows", "short", 24, seq_lens=[512, 3, 1500, 100], columns=1500, k=512,
           page_size=16, nan_in_short_rows=True),
        _c("topk_indices", "page-size-48", "pages", 23, seq_lens=[100, 1300], columns=1300, k=512, page_size=48),
        # rows past 65536 columns (16-bit column indices overflow there)
        _c("topk_indices", "past-65536-k2048", "long", 18, seq_lens=[70001, 5], columns=70001, k=2048,
           page_size=32),
        _c("topk_indices", "past-65536-k512", "long", 19, seq_lens=[65537], columns=65537, k=512),
        _c("topk_indices", "batch-64-16k", "long", 20, "full",
           seq_lens=[16384] * 48 + [513 + 300 * i for i in range(16)],
           columns=16384, k=512),
        _c("topk_indices", "262144-k2048", "long", 21, "full", seq_lens=[262144, 100000], columns=262144, k=2048),
        _c("topk_indices", "65536-ties", "ties", 22, "full", seq_lens=[65536] * 4, columns=65536, k=1024, distinct=8),
    ]


# ---------------------------------------------------------------------------------------------
# sparse attention: params positions, heads, ratio (4 CSA / 128 HCA index sets), topk, sink,
# q_scale, sm_scale; or random=(K, pool, invalid fraction) for arbitrary index sets; empty_rows,
# duplicates


def _attention_cases():
    return [
        _c("sparse_attention", "csa-decode-h64", "csa", 1, positions=[5, 127, 300, 5000], heads=64, ratio=4, topk=64),
        _c("sparse_attention", "csa-decode-h16", "heads", 2, positions=[1000, 33], heads=16, ratio=4, topk=64),
        _c("sparse_attention", "csa-decode-h128", "heads", 3, positions=[900, 4000], heads=128, ratio=4, topk=128),
        _c("sparse_attention", "hca-decode-h32", "hca", 4, positions=[130, 2000, 8191], heads=32, ratio=128, topk=64),
        _c("sparse_attention", "no-sink", "sink", 5, positions=[600, 70], heads=32, ratio=4, topk=64, sink=False),
        _c("sparse_attention", "empty-rows", "invalid", 6, positions=[600, 70, 900], heads=32, ratio=4, topk=64,
           empty_rows=[1]),
        _c("sparse_attention", "duplicates", "invalid", 7, positions=[2000, 3000], heads=16, ratio=4, topk=64,
           duplicates=True),
        _c("sparse_attention", "large-scores", "stability", 8, positions=[4000, 60], heads=32, ratio=4, topk=64,
           q_scale=100.0),
        # sinks far above and below the lse (the denominator's 1 + exp(sink - lse) at both ends)
        _c("sparse_attention", "large-sinks", "sink", 20, positions=[300, 5000, 40], heads=32, ratio=4, topk=64,
           sink_scale=40.0),
        _c("sparse_attention", "sm-scale-0.3", "scale", 11, positions=[700, 90], heads=16, ratio=4, topk=64,
           sm_scale=0.3),
        _c("sparse_attention", "sm-scale-0.01-hca", "scale", 12, positions=[3000], heads=32, ratio=128, topk=32,
           sm_scale=0.01),
        # head counts between the V4 ones (any multiple of 16 up to 128)
        _c("sparse_attention", "csa-decode-h80", "heads", 13, positions=[300, 4000], heads=80, ratio=4, topk=64),
        _c("sparse_attention", "csa-decode-h96", "heads", 14, positions=[77], heads=96, ratio=4, topk=32),
        _c("sparse_attention", "hca-decode-h112", "heads", 15, positions=[2500, 9], heads=112, ratio=128, topk=24),
        # K past 512 (where kernels split the index list), V4's 128 + 512 and 128 + 1024
        _c("sparse_attention", "csa-k640-h64", "long", 16, positions=[9000, 3000], heads=64, ratio=4, topk=512),
        _c("sparse_attention", "csa-k1152-h128", "long", 17, positions=[20000], heads=128, ratio=4, topk=1024),
        _c("sparse_attention", "hca-k700-h16", "long", 18, positions=[70000, 100], heads=16, ratio=128, topk=572),
        # the pool's first and last rows named (no free rows around the index set)
        _c("sparse_attention", "pool-edges", "sizes", 19, positions=[129, 40], heads=16, ratio=4, topk=16,
           pool_pad=(0, 0)),
        _c("sparse_attention", "k1", "sizes", 9, random=(1, 10, 0.0), heads=16),
        _c("sparse_attention", "k-odd-sparse", "sizes", 10, random=(77, 500, 0.5), heads=48),
        _c("sparse_attention", "v4-flash-decode", "csa", 20, "full", positions=[4096 + 997 * i for i in range(64)],
           heads=64, ratio=4, topk=512),
        _c("sparse_attention", "v4-pro-decode", "csa", 21, "full", positions=[8192 + 1501 * i for i in range(32)],
           heads=128, ratio=4, topk=1024),
        _c("sparse_attention", "hca-8192", "hca", 22, "full", positions=[(1 << 20) - 1, 500000], heads=64,
           ratio=128, topk=8192),
        _c("sparse_attention", "k9216-random", "sizes", 23, "full", random=(9216, 20000, 0.1), heads=128),
    ]


# ---------------------------------------------------------------------------------------------
# benchmark cases: production shapes (built only where they fit: the GPU)


# sparse_attention_fp8 (contract §8): as sparse_attention (positions / random, heads, ratio, topk) plus
# page_size, optional page_stride (bytes; default the engines'), tile_log2 (the range of each 64-dim
# tile's magnitude, log2), rope_scale, empty_rows, duplicates


def _attention_fp8_cases():
    op = "sparse_attention_fp8"
    return [
        _c(op, "csa-decode-page64", "csa", 31, positions=[5, 127, 300, 5000], heads=64, ratio=4, topk=64, page_size=64),
        _c(op, "c128-page2", "pages", 32, positions=[130, 2000, 8191], heads=32, ratio=128, topk=64, page_size=2),
        _c(op, "swa-page256", "pages", 33, positions=[700, 40], heads=16, ratio=4, topk=16, page_size=256),
        _c(op, "page1", "pages", 34, positions=[300], heads=16, ratio=4, topk=32, page_size=1),
        _c(op, "wide-page-stride", "pages", 35, positions=[900, 33], heads=16, ratio=4, topk=64, page_size=2,
           page_stride=1728 + 2 * 576 + 16),
        _c(op, "empty-rows", "invalid", 36, positions=[600, 70, 900], heads=32, ratio=4, topk=64, page_size=64,
           empty_rows=[1]),
        _c(op, "duplicates", "invalid", 37, positions=[2000, 3000], heads=16, ratio=4, topk=64, page_size=64,
           duplicates=True),
        _c(op, "no-sink", "sink", 38, positions=[600, 70], heads=32, ratio=4, topk=64, page_size=64, sink=False),
        _c(op, "scales-across-e4m3", "scale", 39, positions=[4000, 60], heads=16, ratio=4, topk=64, page_size=64,
           tile_log2=(-16.0, 3.0)),
        _c(op, "tiny-tiles", "scale", 40, positions=[1000], heads=16, ratio=4, topk=64, page_size=64,
           tile_log2=(-24.0, -14.0)),
        # RoPE dims at twice the quantised tiles' top magnitude. Not larger: contract §8 lets a kernel round P
        # to bf16, an error of about 2**-9 * |v| an element, and with RoPE rows at 4 (20 before) that alone
        # reaches §5's 1e-2 bound (a float64 model of such a kernel, 12 seeds: 0.98 of it at 4, 4.2 at 20,
        # 0.78 at 1 and 2); on the H200 the Triton (de45cfa) and CUDA (dc3d7cd) kernels failed it at 20
        _c(op, "large-rope", "scale", 41, positions=[3000, 90], heads=16, ratio=4, topk=64, page_size=64,
           rope_scale=2.0),
        _c(op, "h128", "heads", 42, positions=[900], heads=128, ratio=4, topk=64, page_size=64),
        _c(op, "h80", "heads", 43, positions=[300, 4000], heads=80, ratio=4, topk=32, page_size=64),
        _c(op, "k70-random", "sizes", 44, random=(70, 400, 0.3), heads=16, page_size=64),
        _c(op, "k1", "sizes", 45, random=(1, 10, 0.0), heads=16, page_size=2),
        _c(op, "v4-flash-decode", "csa", 46, "full", positions=[4096 + 997 * i for i in range(64)], heads=64,
           ratio=4, topk=512, page_size=64),
        _c(op, "v4-pro-decode", "csa", 47, "full", positions=[8192 + 1501 * i for i in range(32)], heads=128,
           ratio=4, topk=1024, page_size=64),
        _c(op, "hca-8192", "hca", 48, "full", positions=[(1 << 20) - 1, 500000], heads=64, ratio=128, topk=8192,
           page_size=2),
    ]


def _b(op, name, seed, **params):
    return _c(op, name, "bench", seed, "bench", **params)


_DECODE_64 = [65536 + 97 * i for i in range(64)]  # decode positions around 64K tokens
_DECODE_256 = [65536 + 97 * i for i in range(256)]
_HCA_64 = [(1 << 20) - 1 - 3 * i for i in range(64)]  # HCA decode near 1M tokens: 8192 visible entries
# top-k rows of mixed lengths, as engines batch requests of different contexts: 512 to 262144 columns
_TOPK_MIXED_64 = [min(262144, (512 << (i % 10)) + 37 * i) for i in range(64)]
# indexer contexts of mixed lengths in one batch: 1024 to 65536 entries (4K to 256K tokens)
_INDEXER_MIXED_64 = [min(65536, (1024 << (i % 7)) + 61 * i) for i in range(64)]
# MTP decode: rows at positions p and p+1 of each request; entry j is visible iff 4j + 3 <= p
_INDEXER_MTP_128 = [(p + d + 1) // 4 for p in _DECODE_64 for d in (0, 1)]
BENCH = {
    "v4-flash": [
        _b("compress", "c4-paged-prefill-64k", 100, ratio=4, d=512, mode="paged", prefix=[0], steps=[[65536]]),
        _b("compress", "c128-online-prefill-64k", 101, ratio=128, d=512, mode="online", prefix=[0], steps=[[65536]]),
        _b("compress", "c4-paged-decode-b64", 102, ratio=4, d=512, mode="paged", prefix=_DECODE_64,
           steps=[[1] * 64]),
        _b("compress", "c4-paged-decode-b512", 103, ratio=4, d=512, mode="paged",
           prefix=[4096 + 13 * i for i in range(512)], steps=[[1] * 512]),
        _b("compress", "c128-online-decode-b64", 104, ratio=128, d=512, mode="online", prefix=_DECODE_64,
           steps=[[1] * 64]),
        _b("compress", "c128-online-decode-b512", 105, ratio=128, d=512, mode="online",
           prefix=[4096 + 13 * i for i in range(512)], steps=[[1] * 512]),
        _b("compress", "c4-ring-decode-b64", 130, ratio=4, d=512, mode="ring", prefix=_DECODE_64, steps=[[1] * 64]),
        _b("compress", "c128-ring-decode-b64", 131, ratio=128, d=512, mode="ring", prefix=_DECODE_64,
           steps=[[1] * 64]),
        _b("compress", "c128-ring-prefill-64k", 132, ratio=128, d=512, mode="ring", prefix=[0], steps=[[65536]]),
        _b("compress", "c4-paged-decode-b1", 133, ratio=4, d=512, mode="paged", prefix=_DECODE_64[3:4],
           steps=[[1]]),
        _b("compress", "c128-online-decode-b1", 134, ratio=128, d=512, mode="online", prefix=[65535], steps=[[1]]),
        # chunked prefill: a 4096-token extend after a 60K prefix (the window read partly from the state)
        _b("compress", "c4-paged-chunk-4k-after-60k", 135, ratio=4, d=512, mode="paged", prefix=[61442],
           steps=[[4096]]),
        _b("compress", "c128-online-chunk-4k-after-60k", 136, ratio=128, d=512, mode="online", prefix=[61442],
           steps=[[4096]]),
        _b("compress", "c4-paged-decode-b64-d128", 137, ratio=4, d=128, mode="paged", prefix=_DECODE_64,
           steps=[[1] * 64]),  # the indexer's compressor (d = 128)
        _b("indexer_logits", "b64-64k-tokens", 106, context_lens=[16384] * 64, heads=64, max_context_len=16384),
        _b("indexer_logits", "b64-256k-tokens", 107, context_lens=[65536] * 64, heads=64, max_context_len=65536),
        _b("indexer_logits", "b1-256k-tokens", 180, context_lens=[65536], heads=64, max_context_len=65536),
        _b("indexer_logits", "b256-64k-tokens", 181, context_lens=[16384] * 256, heads=64, max_context_len=16384),
        _b("indexer_logits", "b64-mixed-4k-to-256k-tokens", 182, context_lens=_INDEXER_MIXED_64, heads=64,
           max_context_len=65536),
        _b("indexer_logits", "b64-64k-tokens-h32", 183, context_lens=[16384] * 64, heads=32, max_context_len=16384),
        # MTP: two query rows per request flattened into B (as SGLang's V4 indexer does); here each row has
        # its own cache blocks, so the case reads twice the bytes of an engine whose pairs share them
        _b("indexer_logits", "mtp-b64x2-64k-tokens", 184, context_lens=_INDEXER_MTP_128, heads=64,
           max_context_len=max(_INDEXER_MTP_128)),
        _b("topk_indices", "b64-16384", 108, seq_lens=[16384] * 64, columns=16384, k=512),
        _b("topk_indices", "b64-65536", 109, seq_lens=[65536] * 64, columns=65536, k=512),
        _b("topk_indices", "b64-262144", 110, seq_lens=[262144] * 64, columns=262144, k=512),
        _b("topk_indices", "b1-65536", 150, seq_lens=[65536], columns=65536, k=512),
        _b("topk_indices", "b256-16384", 151, seq_lens=[16384] * 256, columns=16384, k=512),
        _b("topk_indices", "b64-mixed-to-262144", 152, seq_lens=_TOPK_MIXED_64, columns=262144, k=512),
        _b("topk_indices", "b64-short", 153, seq_lens=[7 * i + 1 for i in range(64)], columns=512, k=512),
        _b("sparse_attention", "decode-b64-h64-k640", 111, positions=_DECODE_64, heads=64, ratio=4, topk=512),
        _b("sparse_attention", "decode-b64-h128-k1152", 112, positions=_DECODE_64, heads=128, ratio=4, topk=1024),
        _b("sparse_attention", "decode-b1-h64-k640", 170, positions=_DECODE_64[:1], heads=64, ratio=4, topk=512),
        _b("sparse_attention", "decode-b8-h64-k640", 171, positions=_DECODE_64[:8], heads=64, ratio=4, topk=512),
        _b("sparse_attention", "decode-b256-h64-k640", 172, positions=_DECODE_256, heads=64, ratio=4, topk=512),
        _b("sparse_attention", "hca-decode-b64-h64-k8320", 173, positions=_HCA_64, heads=64, ratio=128, topk=8192),
        _b("sparse_attention", "prefill-4096-h64-k640", 174, prefill=(65536 - 4096, 4096), heads=64, ratio=4,
           topk=512),
    ],
    "v4-pro": [
        _b("indexer_logits", "b64-256k-tokens", 120, context_lens=[65536] * 64, heads=64, max_context_len=65536),
        _b("topk_indices", "b64-65536-k1024", 121, seq_lens=[65536] * 64, columns=65536, k=1024),
        _b("topk_indices", "b64-65536-k2048", 154, seq_lens=[65536] * 64, columns=65536, k=2048),
        _b("topk_indices", "b1-65536-k1024", 155, seq_lens=[65536], columns=65536, k=1024),
        _b("topk_indices", "b256-16384-k1024", 156, seq_lens=[16384] * 256, columns=16384, k=1024),
        _b("topk_indices", "b64-mixed-to-262144-k1024", 157, seq_lens=_TOPK_MIXED_64, columns=262144, k=1024),
        _b("topk_indices", "b64-short-k1024", 158, seq_lens=[15 * i + 1 for i in range(64)], columns=1024, k=1024),
        _b("sparse_attention", "decode-b64-h128-k1152", 122, positions=_DECODE_64, heads=128, ratio=4, topk=1024),
        _b("sparse_attention", "hca-decode-b64-h128-k8320", 123, positions=[(1 << 20) - 1 - 3 * i for i in range(64)],
           heads=128, ratio=128, topk=8192),
        _b("sparse_attention", "decode-b1-1k-h128", 124, positions=[1023], heads=128, ratio=4, topk=1024),
        _b("sparse_attention", "decode-b1-h128-k1152", 175, positions=_DECODE_64[:1], heads=128, ratio=4, topk=1024),
        _b("sparse_attention", "decode-b8-h128-k1152", 176, positions=_DECODE_64[:8], heads=128, ratio=4, topk=1024),
        _b("sparse_attention", "decode-b256-h128-k1152", 177, positions=_DECODE_256, heads=128, ratio=4, topk=1024),
        _b("sparse_attention", "prefill-4096-h128-k1152", 178, prefill=(65536 - 4096, 4096), heads=128, ratio=4,
           topk=1024),
        _b("compress", "c4-paged-decode-b256", 125, ratio=4, d=512, mode="paged",
           prefix=[(1 << 19) + 7 * i for i in range(256)], steps=[[1] * 256]),
        _b("compress", "c128-online-decode-b256", 126, ratio=128, d=512, mode="online",
           prefix=[(1 << 19) + 7 * i for i in range(256)], steps=[[1] * 256]),
        _b("compress", "c4-paged-prefill-32k", 127, ratio=4, d=512, mode="paged", prefix=[0], steps=[[32768]]),
    ],
}
# the FP8 cache at the decode shapes (contract §8): CSA window + top-k over a C4-like pool of 64-token
# pages, HCA window + 8192 entries over a C128-like pool of 2-token pages
BENCH["v4-flash"] += [
    _b("sparse_attention_fp8", f"decode-b{len(p)}-h64-k640", 180 + i, positions=p, heads=64, ratio=4, topk=512,
       page_size=64) for i, p in enumerate((_DECODE_64[:1], _DECODE_64[:8], _DECODE_64, _DECODE_256))
] + [_b("sparse_attention_fp8", "hca-decode-b64-h64-k8320", 184, positions=_HCA_64, heads=64, ratio=128, topk=8192,
        page_size=2)]
BENCH["v4-pro"] += [
    _b("sparse_attention_fp8", f"decode-b{len(p)}-h128-k1152", 185 + i, positions=p, heads=128, ratio=4,
       topk=1024, page_size=64) for i, p in enumerate((_DECODE_64[:1], _DECODE_64[:8], _DECODE_64, _DECODE_256))
] + [_b("sparse_attention_fp8", "hca-decode-b64-h128-k8320", 189, positions=_HCA_64, heads=128, ratio=128,
        topk=8192, page_size=2)]


LAYERS = {"v4-flash": 43, "v4-pro": 61}  # per model (contract §6): a forward step runs the call this often


def preset_of(case):
    """The model whose benchmark set holds the case (its layer count prices a forward step);
    v4-flash for a case of no set."""
    return next((name for name, group in BENCH.items() if case in group), "v4-flash")


def _bad_input_cases():
    """Every argument of every op, wrong: the backend must raise ValueError naming it (badinput.py)."""
    return [_c(op, name, "bad-input", 0, bad=name) for op in contract.OPS for name, _ in badinput.names(op)]


TESTS = (_compress_cases() + _indexer_cases() + _topk_cases() + _attention_cases() + _attention_fp8_cases()
         + _bad_input_cases())


def select(ops=None, tier="quick", names=None):
    """Test cases of the given ops; tier "quick" or "full" (quick plus production-sized)."""
    chosen = [c for c in TESTS if (ops is None or c.op in ops) and (tier == "full" or c.tier == "quick")]
    if names:
        chosen = [c for c in chosen + [c for c in TESTS if c not in chosen] if c.name in names]
    return chosen


def find(op, name):
    """A catalogue case or a fuzz case (`fuzz-<op>-<seed>`, shrunk: `fuzz-<op>-<seed>~i.j`) by name."""
    if name.startswith(f"fuzz-{op}-"):
        try:
            return _find_fuzz(op, name)
        except (ValueError, IndexError):
            raise KeyError(f"no {op} case named {name!r} (fuzz-<op>-<seed>, shrunk ~i.j...)") from None
    for case in TESTS + [c for cases in BENCH.values() for c in cases]:
        if case.op == op and case.name == name:
            return case
    raise KeyError(f"no {op} case named {name!r}")


# ---------------------------------------------------------------------------------------------
# fuzzing (each op's drawing and shrinking: harness/fuzz.py): fuzz-<op>-<seed> rebuilds from its
# name; a shrunk case fuzz-<op>-<seed>~i.j.k is the original's candidate i, then its j, then its k


def fuzz_case(op, seed):
    return _c(op, f"fuzz-{op}-{seed}", "fuzz", seed, **op_entry(op).fuzz(random.Random(seed)))


def fuzz(ops, count, seed):
    """`count` fuzz cases per op; case i of op o has seed seed*1000 + i (each rebuilds alone)."""
    return [fuzz_case(op, seed * 1000 + i) for op in ops for i in range(count)]


def shrink_steps(case):
    """The shrunk candidates of a fuzz case, in order; candidate i is named <name>~i (or .i)."""
    sep = "." if "~" in case.name else "~"
    return [replace(case, name=f"{case.name}{sep}{i}", params=q)
            for i, q in enumerate(shrink_candidates(op_entry(case.op).shrink, case.params))]


def _find_fuzz(op, name):
    seed, _, path = name[len(f"fuzz-{op}-"):].partition("~")
    case = fuzz_case(op, int(seed))
    for step in path.split(".") if path else ():
        case = shrink_steps(case)[int(step)]
    return case


# ---------------------------------------------------------------------------------------------
# building


def build(case, device="cpu"):
    """OpInputs of a case (its op's builder, ops.py, with the case's params as keyword arguments);
    for a bad-input case, badinput.build's (args, kwargs, state)."""
    if case.family == "bad-input":
        return badinput.build(dict(badinput.names(case.op))[case.params["bad"]], device)
    return op_entry(case.op).build(seed=case.seed, device=device, tier=case.tier, **case.params)
