"""The case catalogue, as data: per op, test cases (small, adversarial, seeded) and benchmark cases
(V4-Flash / V4-Pro production shapes), plus a seeded fuzzer that draws more from the same spaces.

A case is (op, name, family, params, seed). `build(case, device)` turns it into an OpInputs; a
compress case with several `steps` is a chain of calls on one state. Every case rebuilds alone from
its name (fuzz cases from `fuzz-<op>-<seed>`), which is what the repro command relies on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import torch

from harness import badinput, contract
from harness import inputs as I


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
    # full: the edge cases again at V4's main KV width (the only width some peers' kernels are built for)
    cases += [replace(c, name=f"{c.name}-d512", tier="full", params={**c.params, "d": 512}) for c in cases]
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
        _c("topk_indices", "batch-64-16k", "long", 20, "full", seq_lens=[16384] * 48 + [513 + 300 * i for i in range(16)],
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
        _c("sparse_attention", "sm-scale-0.3", "scale", 11, positions=[700, 90], heads=16, ratio=4, topk=64,
           sm_scale=0.3),
        _c("sparse_attention", "sm-scale-0.01-hca", "scale", 12, positions=[3000], heads=32, ratio=128, topk=32,
           sm_scale=0.01),
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


def _b(op, name, seed, **params):
    return _c(op, name, "bench", seed, "bench", **params)


_DECODE_64 = [65536 + 97 * i for i in range(64)]  # decode positions around 64K tokens
# top-k rows of mixed lengths, as engines batch requests of different contexts: 512 to 262144 columns
_TOPK_MIXED_64 = [min(262144, (512 << (i % 10)) + 37 * i) for i in range(64)]
_DECODE_256 = [65536 + 97 * i for i in range(256)]
_HCA_64 = [(1 << 20) - 1 - 3 * i for i in range(64)]  # HCA decode near 1M tokens: 8192 visible entries
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
    ],
}


def _bad_input_cases():
    """Every argument of every op, wrong: the backend must raise ValueError naming it (badinput.py)."""
    return [_c(op, name, "bad-input", 0, bad=name) for op in contract.OPS for name, _ in badinput.names(op)]


TESTS = _compress_cases() + _indexer_cases() + _topk_cases() + _attention_cases() + _bad_input_cases()


def select(ops=None, tier="quick", names=None):
    """Test cases of the given ops; tier "quick" or "full" (quick plus production-sized)."""
    chosen = [c for c in TESTS if (ops is None or c.op in ops) and (tier == "full" or c.tier == "quick")]
    if names:
        chosen = [c for c in chosen + [c for c in TESTS if c not in chosen] if c.name in names]
    return chosen


def find(op, name):
    """A catalogue case or a fuzz case (`fuzz-<op>-<seed>`) by name."""
    prefix = f"fuzz-{op}-"
    if name.startswith(prefix):
        return fuzz_case(op, int(name[len(prefix):]))
    for case in TESTS + [c for cases in BENCH.values() for c in cases]:
        if case.op == op and case.name == name:
            return case
    raise KeyError(f"no {op} case named {name!r}")


# ---------------------------------------------------------------------------------------------
# fuzzing: a case drawn from the same spaces; the seed fixes both the shape and the data


def fuzz_case(op, seed):
    rng = random.Random(seed)
    name = f"fuzz-{op}-{seed}"
    if op == "compress":
        ratio = rng.choice(contract.RATIOS)
        mode = rng.choice(contract.MODES if ratio == 128 else ("ring", "paged"))
        batch = rng.randint(1, 4)
        prefix = [rng.choice([0, rng.randint(0, 3 * ratio)]) for _ in range(batch)]
        steps = [[rng.choice([0, 1, rng.randint(0, 2 * ratio + 3)]) for _ in range(batch)]
                 for _ in range(rng.randint(1, 3))]
        return _c(op, name, "fuzz", seed, ratio=ratio, d=rng.choice([16, 32]), mode=mode, prefix=prefix, steps=steps,
                  release=mode == "paged" and len(steps) == 1 and rng.random() < 0.5,
                  score_scale=rng.choice([1.0, 1.0, 30.0]))
    if op == "indexer_logits":
        lens = [rng.choice([0, 1, 64, rng.randint(0, 400)]) for _ in range(rng.randint(1, 6))]
        return _c(op, name, "fuzz", seed, context_lens=lens, heads=rng.choice([32, 64]),
                  max_context_len=max(lens) + rng.choice([0, 1, 63]))
    if op == "topk_indices":
        k = rng.choice([512, 1024])
        lens = [rng.choice([rng.randint(0, k), k, k + 1, rng.randint(k, 3 * k)]) for _ in range(rng.randint(1, 4))]
        return _c(op, name, "fuzz", seed, seq_lens=lens, columns=max(lens) + rng.randint(0, 70), k=k,
                  distinct=rng.choice([None, None, 1, 7]), tail=rng.choice([float("inf"), float("-inf"), float("nan")]),
                  page_size=rng.choice([64, 64, 16]))
    if op == "sparse_attention":
        heads = rng.choice([16, 32, 64, 128])
        if rng.random() < 0.3:
            k = rng.randint(1, 300)
            return _c(op, name, "fuzz", seed, random=(k, rng.randint(1, 600), rng.random() * 0.6), heads=heads)
        ratio = rng.choice([4, 128])
        positions = [rng.randint(0, 20000) for _ in range(rng.randint(1, 4))]
        topk = rng.choice([16, 64]) if ratio == 4 else max((p + 1) // 128 for p in positions) + rng.randint(0, 5)
        return _c(op, name, "fuzz", seed, positions=positions, heads=heads, ratio=ratio, topk=topk,
                  sink=rng.random() < 0.8, q_scale=rng.choice([1.0, 1.0, 20.0]),
                  sm_scale=rng.choice([contract.ATTN_DIM ** -0.5, rng.uniform(0.01, 0.5)]),
                  empty_rows=[0] if rng.random() < 0.2 else [], duplicates=rng.random() < 0.2)
    raise KeyError(op)


def fuzz(ops, count, seed):
    """`count` fuzz cases per op; case i of op o has seed seed*1000 + i (each rebuilds alone)."""
    return [fuzz_case(op, seed * 1000 + i) for op in ops for i in range(count)]


# ---------------------------------------------------------------------------------------------
# building


def build(case, device="cpu"):
    """OpInputs of a case; for a bad-input case, badinput.build's (args, kwargs, state)."""
    p = case.params
    if case.family == "bad-input":
        return badinput.build(dict(badinput.names(case.op))[p["bad"]], device)
    if case.op == "compress":
        totals = [sum(step[b] for step in p["steps"]) for b in range(len(p["prefix"]))]
        x = I.compress_inputs(ratio=p["ratio"], d=p["d"], prefix_lens=p["prefix"], extend_lens=totals, mode=p["mode"],
                              seed=case.seed, device=device, score_scale=p.get("score_scale", 1.0),
                              spare=p.get("spare", 2), release=p.get("release", False),
                              trim=case.tier == "bench")
        x.extra["steps"] = p["steps"]
        return x
    if case.op == "indexer_logits":
        return I.indexer_inputs(context_lens=p["context_lens"], heads=p["heads"], seed=case.seed, device=device,
                                max_context_len=p["max_context_len"], key_scale=p.get("key_scale", 1.0))
    if case.op == "topk_indices":
        x = I.topk_inputs(seq_lens=p["seq_lens"], columns=p["columns"], k=p["k"], page_size=p.get("page_size", 64),
                          seed=case.seed, device="cpu", distinct=p.get("distinct"), tail=p.get("tail", float("inf")))
        if p.get("neg_inf_inside"):  # -inf logits are still values: a row may have to select some
            for row, n in zip(x.args[0], p["seq_lens"]):
                row[torch.randperm(n, generator=I.generator(case.seed))[:p["neg_inf_inside"]]] = float("-inf")
        return I.to_device(x, device)
    if case.op == "sparse_attention":
        gen = I.generator(case.seed + 7919)
        if "prefill" in p:  # one request's prefill: each token its own window and top-k
            idx, pool = I.prefill_attention_indices(*p["prefill"], ratio=p["ratio"], topk=p["topk"], gen=gen)
            x = I.attention_inputs(positions=None, heads=p["heads"], seed=case.seed, device="cpu",
                                   sink=p.get("sink", True), indices=idx, pool_rows=pool)
        elif "random" in p:
            k, pool, invalid = p["random"]
            idx = I.random_indices(len(p.get("positions", [0, 0, 0])), k, pool, invalid, gen)
            x = I.attention_inputs(positions=None, heads=p["heads"], seed=case.seed, device="cpu",
                                   sink=p.get("sink", True), indices=idx, pool_rows=pool)
        else:
            x = I.attention_inputs(positions=p["positions"], heads=p["heads"], ratio=p["ratio"], topk=p["topk"],
                                   seed=case.seed, device="cpu", sink=p.get("sink", True),
                                   q_scale=p.get("q_scale", 1.0), sm_scale=p.get("sm_scale", contract.ATTN_DIM ** -0.5))
        idx = x.args[2]
        for row in p.get("empty_rows", []):
            idx[row] = -1
        if p.get("duplicates"):
            I.duplicate_some_indices(idx, gen)
        return I.to_device(x, device)
    raise KeyError(case.op)
