"""Sweep the Triton kernels' CONFIG on the GPU at benchmark shapes: `python -m harness.tune_triton [op ...]`.

Each variant is checked against the reference once, then timed (events, median); prints a table. The
kernels are reached through the registry (backends.load), their modules then by name.
"""

import sys

from tabulate import tabulate

from harness import backends, bench, cases, check

SWEEPS = {
    "sparse_attention": ("kernels_triton.sparse_attention", ["decode-b64-h64-k640", "decode-b64-h128-k1152"],
                         [dict(block_h=h, block_k=k, num_warps=w, num_stages=s) for h, k, w, s in
                          [(16, 64, 4, 2), (16, 64, 4, 3), (16, 128, 4, 2), (32, 64, 4, 2), (64, 64, 8, 2),
                           (64, 128, 8, 2), (64, 64, 8, 3)]]),
    "topk_indices": ("kernels_triton.topk_indices", ["b64-16384", "b64-262144"],
                     [dict(block=b, num_warps=w) for b, w in [(1024, 4), (2048, 8), (4096, 8), (4096, 16),
                                                              (8192, 16)]]),
    "indexer_logits": ("kernels_triton.indexer_logits", ["b64-64k-tokens", "b64-256k-tokens"],
                       [dict(tile=t, steps=s, num_warps=w) for t, s, w in
                        [(1, 8, 4), (2, 2, 4), (2, 4, 4), (4, 1, 4), (4, 2, 4), (4, 2, 8), (4, 4, 8)]]),
}


def main(ops):
    device = "cuda"
    backend = backends.load("triton", device)
    rows = []
    for op in ops:
        module_name, case_names, configs = SWEEPS[op]
        module = sys.modules[module_name]
        default = dict(module.CONFIG)  # a sweep's keys override the kernel's own choice
        for name in case_names:
            case = cases.find(op, name)
            prepared = check.prepare(case, device)
            for cfg in configs:
                module.CONFIG.update(cfg)
                r = bench.bench_case(backend, case, device, None, prepared, reps=20)
                rows.append([op, name, str(cfg), r.verdict, f"{r.timing.median_us:.1f}" if r.timing else "-",
                             f"{r.gbps:.0f}"])
                print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
        module.CONFIG.clear()
        module.CONFIG.update(default)
    print(tabulate(rows, headers=["op", "case", "config", "check", "median us", "GB/s"], tablefmt="github"))


if __name__ == "__main__":
    main(sys.argv[1:] or list(SWEEPS))
