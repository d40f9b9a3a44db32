"""Session 19: does other SMs' instruction fetch slow a CTA's chunk load? One launch of 132 CTAs (1024 threads, one an
SM): the first LOADERS CTAs each land their own 128 KB of randn (cp.async in two groups, converted and counted into
a 4096-bin shared histogram, as the wide kernel's first phase), the rest (hogs) at the same time: exit at once
(none), spin on clock64 for ~20000 cycles (spin: busy, no new code), or run straight-line code of FMAS distinct FMAs
(8 independent chains, ~96 KB of SASS): warp 0 on copy 0 (same: every hog fetches the same lines), warp 0 on copy j
% COPIES (distinct), or every warp on copy 0. Cold (L2 flushed) cycles of the loaders' phase (median / slowest) and
the hogs' own cycles; also warm. If straight-line code on the other SMs slows the loaders and a spin does not,
instruction fetch by the CTAs past their load is what holds the late loaders in the mixed batch."""
import statistics as st
import sys

import cupy as cp
import torch

from probe_codefetch import PREAMBLE, block, kernel

COPIES, FMAS = 4, 6144  # per copy: 6144 FMAs ~ 96 KB of SASS
HOG_COPY = "".join(block(f"hog{c}", FMAS, c * FMAS) for c in range(COPIES))

SRC = PREAMBLE + HOG_COPY + r"""
// hog: 0 none, 1 spin, 2 code (same copy, warp 0), 3 code (copy j % COPIES, warp 0), 4 code (same copy, every warp)
extern "C" __global__ void __launch_bounds__(1024, 1) load_beside(const float* in, int n, int loaders, int hog,
                                                                  unsigned long long* out, float* sink) {
    extern __shared__ __align__(16) unsigned int sm[];
    __shared__ int hist[4096];
    const int t = threadIdx.x;
    __syncthreads();
    const unsigned long long c0 = clock64();
    if ((int)blockIdx.x >= loaders) {
        const int j = (int)blockIdx.x - loaders;
        float r = 0.f;
        if (hog == 1) { while (clock64() - c0 < 20000) {} }
        else if (hog >= 2 && (hog == 4 || t < 32)) {
            const int c = hog == 3 ? j % 4 : 0;  // COPIES
            const float a = (float)t * 1e-3f, y = 0.999f;
            r = c == 0 ? hog0(a, y) : c == 1 ? hog1(a, y) : c == 2 ? hog2(a, y) : hog3(a, y);
        }
        __syncthreads();
        if (t == 0) { out[2 * blockIdx.x] = clock64() - c0; out[2 * blockIdx.x + 1] = 1; }
        if (r == 12345.f) sink[0] = r;
        return;
    }
    for (int i = t; i < 4096; i += 1024) hist[i] = 0;
    const uint4* src = reinterpret_cast<const uint4*>(in + (size_t)blockIdx.x * n);
    uint4* dst = reinterpret_cast<uint4*>(sm);
    const int vectors = n / 4;
    __syncthreads();
    issue_chunk(src, dst, vectors);
    count_chunk(dst, vectors, hist);
    __syncthreads();
    if (t == 0) { out[2 * blockIdx.x] = clock64() - c0; out[2 * blockIdx.x + 1] = 0; }
}
"""


def main():
    dev = torch.device("cuda", 0)
    kern = kernel(SRC, "load_beside")
    n, ctas = 32768, 132
    shared = 4 * n + 16
    x = torch.randn(ctas * n, device=dev)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    out = cp.zeros(2 * ctas, dtype=cp.uint64)
    sink = cp.zeros(1, dtype=cp.float32)
    xs = cp.asarray(x)
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def call(loaders, hog):
        kern((ctas,), (1024,), (xs, cp.int32(n), cp.int32(loaders), cp.int32(hog), out, sink),
             shared_mem=shared, stream=stream)

    rows = []
    for loaders in (92, 66):
        for hog, name in ((0, "none"), (1, "spin"), (2, "code same w0"), (3, "code distinct w0"), (4, "code same all")):
            for cold in (True, False):
                lm, lx, hm, ev = [], [], [], []
                call(loaders, hog)
                for _ in range(7):
                    if cold:
                        flush.zero_()
                    else:
                        call(loaders, hog)
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda._sleep(200000)
                    s.record()
                    call(loaders, hog)
                    e.record()
                    e.synchronize()
                    o = out.get().reshape(-1, 2)
                    ld = sorted(int(c) for c, h in o if h == 0)
                    hg = [int(c) for c, h in o if h == 1]
                    lm.append(st.median(ld)); lx.append(ld[-1]); hm.append(st.median(hg) if hg else 0)
                    ev.append(s.elapsed_time(e) * 1e3)
                rows.append((loaders, name, "cold" if cold else "warm", int(st.median(lm)), int(st.median(lx)),
                             int(st.median(hm)), st.median(ev)))
    print(f"{'loaders':>7s} {'hogs':14s} {'mode':5s} {'load med':>9s} {'load max':>9s} {'hog':>7s} {'events us':>9s}")
    for r in rows:
        print(f"{r[0]:7d} {r[1]:14s} {r[2]:5s} {r[3]:9d} {r[4]:9d} {r[5]:7d} {r[6]:9.2f}")


if __name__ == "__main__":
    sys.exit(main())
