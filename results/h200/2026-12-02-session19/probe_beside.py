"""Session 19: which kind of work in other clusters slows a cluster's chunk load? One launch of 15 clusters of 8 CTAs
(1024 threads, one an SM, as the planned mixed batch's co-resident places): the first LOADERS CTAs each land their
own 135 KB of randn (cp.async in two groups, converted and counted into a 4096-bin shared histogram, as the wide
kernel's first phase); the other clusters at the same time, for ~24000 cycles, each of: nothing (a bare loop), spin
(clock64), shared atomics on random bins (the counting walk's kind), distributed shared memory reads of a peer's 16
B a thread (counts before / sums), distributed shared memory stores (candidates), cluster barriers in a loop, global
stores of 4 B a thread to a 2 MB buffer (write-out), global loads from a 1 MB L2-resident table. Cold (L2 flushed,
then a spin; once also with the L2 refilled by clean lines) cycles of the loaders' phase (median / slowest) and the
busy clusters' cycles. `gather`: the counts before's DSMEM reads (call 19); `launches`: clusters launched mid-load
(call 17)."""
import statistics as st
import sys

import cupy as cp
import torch

from probe_codefetch import PREAMBLE, kernel

SRC = PREAMBLE + r"""
__device__ __forceinline__ unsigned int peer(const void* p, unsigned int rank) {
    unsigned int r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(sa(p)), "r"(rank));
    return r;
}
// busy: 0 none, 1 spin, 2 shared atomics, 3 DSMEM loads, 4 DSMEM stores, 5 cluster barriers, 6 global stores,
// 7 global loads (L2-resident table), 8 DSMEM all ranks from rank 0, 9 DSMEM rank r from ranks 0..r-1
extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(1024, 1)
load_beside(const float* in, int n, int loaders, int busy, unsigned long long* out, int* gbuf, const int* table,
            int spin) {
    extern __shared__ __align__(16) unsigned int sm[];
    __shared__ int hist[4096];
    const int t = threadIdx.x;
    unsigned int rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    for (int i = t; i < 4096; i += 1024) hist[i] = 0;
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
    const unsigned long long c0 = clock64();
    if ((int)blockIdx.x >= loaders) {  // (whole clusters: loaders is a multiple of 8)
        unsigned int acc = t * 2654435761u, x = 0;
        const unsigned int other = peer(&hist[4 * (t & 1023)], (rank + 1) & 7), zero = peer(&hist[4 * t], 0);
        long long iters = 0;
        while (clock64() - c0 < spin) {
            ++iters;
            if (busy == 2) {
#pragma unroll 8
                for (int j = 0; j < 8; ++j) { acc = acc * 1664525u + 1013904223u; atomicAdd(&hist[acc >> 20], 1); }
            } else if (busy == 3) {
#pragma unroll 4
                for (int j = 0; j < 4; ++j) {
                    uint4 v;
                    asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
                                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(other) : "memory");
                    x += v.x ^ v.w;
                }
            } else if (busy == 4) {
#pragma unroll 4
                for (int j = 0; j < 4; ++j)
                    asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %1, %1, %1};"
                                 ::"r"(other), "r"(acc + j) : "memory");
            } else if (busy == 8) {  // every rank reads rank 0's bins (all-to-one, as the counts before rank 1..7)
                uint4 v;
                asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(zero) : "memory");
                x += v.x ^ v.w;
            } else if (busy == 9) {  // rank r reads ranks 0..r-1 in turn, 4 in flight (the counts before's loop)
                for (int r0 = 0; r0 < (int)rank; r0 += 4) {
                    uint4 v[4];
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (r0 + j < (int)rank)
                            asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
                                         : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w)
                                         : "r"(peer(&hist[4 * t], r0 + j)) : "memory");
                        else v[j] = make_uint4(0, 0, 0, 0);
#pragma unroll
                    for (int j = 0; j < 4; ++j) x += v[j].x ^ v[j].w;
                }
            } else if (busy == 5) {
                asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
            } else if (busy == 6) {
                gbuf[((blockIdx.x * 1024 + t) * 4 + (iters & 3)) & ((1 << 19) - 1)] = (int)acc;
            } else if (busy == 7) {
                acc = acc * 1664525u + 1013904223u;
                x += __ldcg(&table[acc >> 14]);  // (1 << 18 ints)
            }
        }
        asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
        if (t == 0) { out[2 * blockIdx.x] = clock64() - c0; out[2 * blockIdx.x + 1] = 1; }
        if (x == 0xdeadbeefu) gbuf[0] = (int)acc;
        return;
    }
    const uint4* src = reinterpret_cast<const uint4*>(in + (size_t)blockIdx.x * n);
    uint4* dst = reinterpret_cast<uint4*>(sm);
    const int vectors = n / 4;
    issue_chunk(src, dst, vectors);
    count_chunk(dst, vectors, hist);
    __syncthreads();
    if (t == 0) { out[2 * blockIdx.x] = clock64() - c0; out[2 * blockIdx.x + 1] = 0; }
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
"""
NAMES = ("none", "spin", "smem atomics", "dsmem loads", "dsmem stores", "cluster barriers", "global stores",
         "global loads L2", "dsmem gather to 0", "dsmem before-loop")


def main():
    dev = torch.device("cuda", 0)
    kern = kernel(SRC, "load_beside")
    n, ctas = 33824, 120
    shared = 4 * n + 16
    x = torch.randn(ctas * n, device=dev)  # (loaders only read the first 64 chunks)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    out = cp.zeros(2 * 320, dtype=cp.uint64)
    gbuf = cp.zeros(1 << 19, dtype=cp.int32)
    table = cp.arange(1 << 18, dtype=cp.int32)
    xs = cp.asarray(x)
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def call(loaders, busy, grid=ctas, spin=24000):
        kern((grid,), (1024,), (xs, cp.int32(n), cp.int32(loaders), cp.int32(busy), out, gbuf, table, cp.int32(spin)),
             shared_mem=shared, stream=stream)

    clean = torch.empty(128 << 20, dtype=torch.uint8, device=dev)
    if "gather" in sys.argv[1:]:  # session 19's second pass: the counts before's all-to-one reads
        for loaders in (64, 32):
            for busy in (0, 3, 8, 9):
                lm, lx = [], []
                for _ in range(9):
                    flush.zero_()
                    torch.cuda._sleep(200000)
                    call(loaders, busy)
                    torch.cuda.synchronize()
                    ld = sorted(int(c) for c in out.get().reshape(-1, 2)[:loaders, 0])
                    lm.append(st.median(ld)); lx.append(ld[-1])
                print(f"{loaders:7d} {NAMES[busy]:18s} {int(st.median(lm)):9d} {int(st.median(lx)):9d}")
        return
    if "launches" in sys.argv[1:]:
        return launches(call, flush, out, table)
    rows = []
    runs = [(64, b, nm, True) for b, nm in enumerate(NAMES[:8])] + [
        (64, 0, "none, L2 clean", False), (32, 0, "none", True), (32, 1, "spin", True), (32, 3, "dsmem loads", True),
        (32, 6, "global stores", True), (8, 0, "none", True), (8, 1, "spin", True)]
    for loaders, busy, name, dirty in runs:
        lm, lx, hm, ev = [], [], [], []
        call(loaders, busy)
        for _ in range(9):
            flush.zero_()
            if not dirty:
                clean.sum()  # L2 refilled with clean lines: the loads evict nothing dirty
            table.sum()  # the table L2-resident again
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(200000)
            s.record()
            call(loaders, busy)
            e.record()
            e.synchronize()
            o = out.get().reshape(-1, 2)
            ld = sorted(int(c) for c, h in o[:loaders])
            hg = [int(c) for c, h in o[loaders:]]
            lm.append(st.median(ld)); lx.append(ld[-1]); hm.append(st.median(hg) if hg else 0)
            ev.append(s.elapsed_time(e) * 1e3)
        rows.append((loaders, name, int(st.median(lm)), int(st.median(lx)), int(st.median(hm)), st.median(ev)))
    print(f"{'loaders':>7s} {'busy clusters':18s} {'load med':>9s} {'load max':>9s} {'busy':>7s} {'events us':>9s}")
    for r in rows:
        print(f"{r[0]:7d} {r[1]:18s} {r[2]:9d} {r[3]:9d} {r[4]:7d} {r[5]:9.2f}")


def launches(call, flush, out, table):
    """Clusters launched while the loaders load: 64 loaders (8 clusters), the rest spin `spin` cycles and exit; a grid
    of 15 clusters (all resident), 17 (2 wait for an exit), 25 or 40 (more launched as the short ones exit)."""
    print(f"{'grid':>4s} {'spin':>6s} {'load med':>9s} {'load max':>9s} {'events us':>9s}")
    for grid, spin in ((120, 24000), (120, 1000), (136, 1000), (136, 24000), (200, 1000), (320, 1000), (320, 4000)):
        lm, lx, ev = [], [], []
        for _ in range(9):
            flush.zero_()
            table.sum()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(200000)
            s.record()
            call(64, 0, grid, spin)
            e.record()
            e.synchronize()
            ld = sorted(int(c) for c in out.get().reshape(-1, 2)[:64, 0])
            lm.append(st.median(ld)); lx.append(ld[-1]); ev.append(s.elapsed_time(e) * 1e3)
        print(f"{grid:4d} {spin:6d} {int(st.median(lm)):9d} {int(st.median(lx)):9d} {st.median(ev):9.2f}")


if __name__ == "__main__":
    sys.exit(main())
