"""Session 18: the mixed batch's first phase alone. probe_fill.py's kernel (cp.async of a CTA's chunk, then nothing /
converted and counted), each CTA on the chunk the plan gives it in b64-mixed-to-262144 (k 512: 17 places of 8 CTAs,
rows in a [64, 262144] tensor), launched as 8-CTA clusters (as wide<8>) or as plain CTAs, on the real row offsets
or on the same chunks packed end to end, with as much shared memory as the chunk needs, as wide<8>'s launch takes,
or 227 KB (the rest of the SM's 256 KB is its L1); cold (the L2 flushed before). Cycles of the CTAs of 32768
columns or more (median / slowest) and of all, and the launch's events. (Call 5 ran it with probe_fill.py's first,
wrong coarse bin: every key in one bin; call 6 with topk_indices.cu's.)"""
import importlib
import statistics as st

import cupy as cp
import torch
from cupy.cuda import nvrtc

from harness import cases

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op

SRC = r"""
__device__ __forceinline__ unsigned int sortable_key(float x) {
    const unsigned int u = __float_as_uint(x);
    const unsigned int flip = (unsigned int)((int)u >> 31) | 0x80000000u;
    return x != x ? 0xffffffffu : u ^ flip;
}
__device__ __forceinline__ unsigned int coarse_bin(unsigned int key) {
    const unsigned int negative = ~(unsigned int)((int)key >> 31);
    const int top = (int)((key ^ negative) >> 17);
    const int c = min(max(top - (int)(0x4000u + (111u << 6)), 0), 2047);  // FAST_CODE_LO, as topk_indices.cu
    return 2048u + ((unsigned int)c ^ negative);
}
__device__ __forceinline__ unsigned int sa(const void* p) { return (unsigned int)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void wait_bar(unsigned long long* bar) {
    for (;;) {
        unsigned int done;
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], 0;\n"
                     " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(sa(bar)) : "memory");
        if (done) return;
    }
}
__device__ __forceinline__ uint4 keys4(uint4 v) {
    v.x = sortable_key(__uint_as_float(v.x)); v.y = sortable_key(__uint_as_float(v.y));
    v.z = sortable_key(__uint_as_float(v.z)); v.w = sortable_key(__uint_as_float(v.w));
    return v;
}
__device__ __forceinline__ void count4(uint4 v, int* hist) {
    atomicAdd(&hist[coarse_bin(v.x)], 1); atomicAdd(&hist[coarse_bin(v.y)], 1);
    atomicAdd(&hist[coarse_bin(v.z)], 1); atomicAdd(&hist[coarse_bin(v.w)], 1);
}
// mode: 0 cp.async only, 1 cp.async + convert, 2 cp.async + convert + count, 3 bulk only, 4 bulk + convert,
// 5 bulk + convert + count, 6 registers + count, 7 registers + keys stored + count
template <int CLUSTER>
__device__ __forceinline__ void fill_body(const float* in, const long long* where, int mode, unsigned long long* out,
                                          unsigned int* sink) {
    extern __shared__ __align__(16) unsigned int sm[];
    __shared__ int hist[4096];
    __shared__ __align__(8) unsigned long long bars[16];
    const int t = threadIdx.x;
    for (int i = t; i < 4096; i += 1024) hist[i] = 0;
    const long long offset = where[2 * blockIdx.x];
    const int n = (int)where[2 * blockIdx.x + 1];
    const uint4* src = reinterpret_cast<const uint4*>(in + offset);
    uint4* dst = reinterpret_cast<uint4*>(sm);
    const int vectors = n / 4, pieces = (vectors + 1023) / 1024, half = (vectors + 1) / 2;
    __syncthreads();
    const unsigned long long c0 = clock64();
    unsigned int acc = 0;
    if (mode <= 2) {
        for (int v = t; v < half; v += 1024)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa(dst + v)), "l"(src + v));
        asm volatile("cp.async.commit_group;");
        for (int v = half + t; v < vectors; v += 1024)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa(dst + v)), "l"(src + v));
        asm volatile("cp.async.commit_group;");
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        for (int v = t; v < half; v += 1024) {
            if (mode >= 1) { uint4 k = keys4(dst[v]); dst[v] = k; if (mode == 2) count4(k, hist); }
        }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        for (int v = half + t; v < vectors; v += 1024) {
            if (mode >= 1) { uint4 k = keys4(dst[v]); dst[v] = k; if (mode == 2) count4(k, hist); }
        }
    } else if (mode <= 5) {
        if (t < pieces) {
            const unsigned int b = sa(&bars[t]);
            const unsigned int bytes = 16u * (unsigned int)min(1024, vectors - 1024 * t);
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                         ::"r"(b), "r"(bytes) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(sa(dst + 1024 * t)), "l"(src + 1024 * t), "r"(bytes), "r"(b) : "memory");
        }
        __syncthreads();
        for (int p = 0; p < pieces; ++p) {
            wait_bar(&bars[p]);
            const int v = 1024 * p + t;
            if (mode >= 4 && v < vectors) { uint4 k = keys4(dst[v]); dst[v] = k; if (mode == 5) count4(k, hist); }
        }
    } else {
        uint4 r[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int v = t + 1024 * i;
            r[i] = v < vectors ? __ldcg(src + v) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int v = t + 1024 * i;
            if (v < vectors) {
                const uint4 k = keys4(r[i]);
                if (mode == 7) dst[v] = k;
                count4(k, hist);
                acc ^= k.x;
            }
        }
    }
    __syncthreads();
    const unsigned long long c1 = clock64();
    if ((mode == 0 || mode == 3) && vectors > 1024) acc = dst[t].x ^ dst[vectors - 1 - t].y;
    acc ^= hist[t];
    if (acc == 0x12345678u) sink[0] = acc;
    if (t == 0) {
        unsigned int smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        out[2 * blockIdx.x] = c1 - c0;
        out[2 * blockIdx.x + 1] = smid;
    }
}
extern "C" __global__ void __launch_bounds__(1024, 1) fill(const float* in, const long long* where, int mode,
                                                           unsigned long long* out, unsigned int* sink) {
    fill_body<1>(in, where, mode, out, sink);
}
extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(1024, 1)
    fill8(const float* in, const long long* where, int mode, unsigned long long* out, unsigned int* sink) {
    fill_body<8>(in, where, mode, out, sink);
}
"""


def chunks(lens, k=512):
    """(offset in a [B, 262144] tensor, columns) a CTA of the plan's wide<8> launch."""
    (cluster, _, _), places = T.plan_route(lens, k, *T._device(0))
    ctas = {}
    for place in places:
        for b in place:
            if b >= 0:
                ctas[b] = ctas.get(b, 0) + 1
    out = []
    for place in places:
        for j, b in enumerate(place):
            n = lens[b] if b >= 0 else 0
            if b < 0 or n <= k:
                out.append((0, 0))
                continue
            c = ctas[b]
            chunk = ((n + c - 1) // c + 3) & ~3
            begin = min(n, (j % c) * chunk)
            out.append((b * 262144 + begin, min(n, begin + chunk) - begin))
    return out


def main():
    lens = cases._TOPK_MIXED_64
    real = chunks(lens)
    packed, at = [], 0
    for _, m in real:
        packed.append((at, m))
        at += (m + 3) & ~3
    x = torch.randn(64 * 262144, device="cuda")
    prog = nvrtc.createProgram(SRC, "fill.cu", [], [])
    nvrtc.compileProgram(prog, ["-std=c++17", "--gpu-architecture=sm_90a"])
    mod = cp.cuda.function.Module()
    mod.load(nvrtc.getCUBIN(prog))
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    static = 4 * 4096 + 8 * 16  # the probe kernel's hist and mbarriers
    # dynamic shared memory: the largest chunk (as a launch sized to the plan), then as much as wide<8>'s launch takes
    # in all (4 (MAX_CHUNK + 4) dynamic + 38384 static; sm_90a), then the most a CTA may have (227 KB)
    sizes = [4 * max(m for _, m in real), 4 * (40960 + 4) + 38384 - static, 227 * 1024 - static]
    ctas = len(real)
    out = cp.zeros(2 * ctas, dtype=cp.uint64)
    sink = cp.zeros(1, dtype=cp.uint32)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    long = [i for i, (_, m) in enumerate(real) if m >= 32768]
    print(f"{ctas} CTAs, {sum(m for _, m in real) * 4 / 1e6:.1f} MB, {len(long)} of >= 32768 columns; cycles: "
          "median / slowest of those, slowest of all; events us (median of 10), cold")
    for name, shared, layout, where in [("fill8", sizes[1], "real", real), ("fill8", sizes[0], "real", real),
                                        ("fill8", sizes[2], "real", real), ("fill", sizes[0], "real", real),
                                        ("fill", sizes[1], "real", real), ("fill", sizes[0], "packed", packed)]:
        fn = mod.get_function(name)
        cp.cuda.driver.funcSetAttribute(fn.ptr, 8, shared)  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        w = cp.asarray([v for pair in where for v in pair], dtype=cp.int64)
        for mode, what in ((0, "load"), (2, "load+count")):
            cyc, ev = [], []
            for _ in range(10):
                flush.zero_()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda._sleep(100000)
                s.record()
                fn((ctas,), (1024,), (cp.asarray(x), w, mode, out, sink), shared_mem=shared, stream=stream)
                e.record()
                e.synchronize()
                ev.append(s.elapsed_time(e) * 1e3)
                c = out.get()[0::2]
                cyc.append((float(st.median(c[long])), float(c[long].max()), float(c.max())))
            print(f"{name:6s} {(shared + static) // 1024:3d} KB {layout:7s} {what:11s} "
                  f"{st.median(a for a, _, _ in cyc):7.0f} / "
                  f"{st.median(b for _, b, _ in cyc):7.0f} / {st.median(c for _, _, c in cyc):7.0f} "
                  f"{st.median(ev):6.2f} us")


if __name__ == "__main__":
    main()
