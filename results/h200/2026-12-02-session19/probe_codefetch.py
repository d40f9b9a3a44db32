"""Session 19: what does a CTA's first pass over code cost while its own chunk is in flight? 132 CTAs (1024 threads,
one an SM), each 128 KB of randn, cold (L2 flushed): issue the chunk's cp.async (two groups), then run a block of
N straight-line FMAs (8 chains, ~16 B of SASS each) that this launch has not run yet (code cold: mode "after"),
or run the same block once before issuing the loads and again after (mode "before": its second pass hits the
instruction cache), or no block (mode "none"); then wait, convert and count as the wide kernel's first phase. Cycles
(median / slowest CTA): the issue, the block's pass under the load, the whole phase; and, in mode "before", the
block's first pass with the memory quiet. If a pass over cold code under the flood costs far more than the same
pass with the memory quiet, the wide kernels' phase-1 copies (wide_select<1/2/4/8, 8>, each its own code) pay it."""
import statistics as st
import struct
import sys

import cupy as cp
import torch
from cupy.cuda import nvrtc

BLOCKS = (256, 1024, 4096)  # FMAs a block: 4, 16, 64 KB of SASS


def block(name, fmas, seed):
    """A __noinline__ function of `fmas` straight-line FMAs in 8 chains (~16 B of SASS each)."""
    def constant(i):  # (seed + i) * 1e-6 as PTX's hex float
        return struct.unpack("<I", struct.pack("<f", (seed + i) * 1e-6))[0]
    body = "".join(f"  asm volatile(\"fma.rn.f32 %0, %0, %1, 0f{constant(i):08X};\" : \"+f\"(x{i % 8}) : \"f\"(y));\n"
                   for i in range(fmas))
    return (f"__device__ __noinline__ float {name}(float a, float y) {{\n"
            "  float x0 = a, x1 = a + 1.f, x2 = a + 2.f, x3 = a + 3.f, x4 = a + 4.f, x5 = a + 5.f, x6 = a + 6.f,"
            " x7 = a + 7.f;\n" + body + "  return x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;\n}\n")


PREAMBLE = r"""
__device__ __forceinline__ unsigned int sortable_key(float x) {
    const unsigned int u = __float_as_uint(x);
    const unsigned int flip = (unsigned int)((int)u >> 31) | 0x80000000u;
    return x != x ? 0xffffffffu : u ^ flip;
}
__device__ __forceinline__ unsigned int coarse_bin(unsigned int key) {
    const unsigned int negative = ~(unsigned int)((int)key >> 31);
    const int top = (int)((key ^ negative) >> 17);
    const int c = min(max(top - (int)(0x4000u + (111u << 6)), 0), 2047);
    return 2048u + ((unsigned int)c ^ negative);
}
__device__ __forceinline__ unsigned int sa(const void* p) { return (unsigned int)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void convert_count(uint4* p, int* hist) {
    uint4 v = *p;
    v.x = sortable_key(__uint_as_float(v.x)); v.y = sortable_key(__uint_as_float(v.y));
    v.z = sortable_key(__uint_as_float(v.z)); v.w = sortable_key(__uint_as_float(v.w));
    *p = v;
    atomicAdd(&hist[coarse_bin(v.x)], 1); atomicAdd(&hist[coarse_bin(v.y)], 1);
    atomicAdd(&hist[coarse_bin(v.z)], 1); atomicAdd(&hist[coarse_bin(v.w)], 1);
}
// the wide kernel's first phase on one CTA's chunk: cp.async in two groups, then each half converted and counted
__device__ __forceinline__ void issue_chunk(const uint4* src, uint4* dst, int vectors) {
    const int t = threadIdx.x, half = (vectors + 1) / 2;
    for (int v = t; v < half; v += 1024)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa(dst + v)), "l"(src + v));
    asm volatile("cp.async.commit_group;");
    for (int v = half + t; v < vectors; v += 1024)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa(dst + v)), "l"(src + v));
    asm volatile("cp.async.commit_group;");
}
__device__ __forceinline__ void count_chunk(uint4* dst, int vectors, int* hist) {
    const int t = threadIdx.x, half = (vectors + 1) / 2;
    asm volatile("cp.async.wait_group 1;" ::: "memory");
    for (int v = t; v < half; v += 1024) convert_count(dst + v, hist);
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    for (int v = half + t; v < vectors; v += 1024) convert_count(dst + v, hist);
}
"""  # (probe_hog.py and probe_beside.py use it too)
SRC = PREAMBLE + "".join(block(f"blk{j}", n, 1000 * j) for j, n in enumerate(BLOCKS)) + r"""
__device__ __forceinline__ float run_block(int which, float a) {
    return which == 0 ? blk0(a, 0.999f) : which == 1 ? blk1(a, 0.999f) : blk2(a, 0.999f);
}
// mode: 0 none, 1 block after the issue (cold), 2 block before the issue and again after
extern "C" __global__ void __launch_bounds__(1024, 1) load_code(const float* in, int n, int mode, int which,
                                                                unsigned long long* out, float* sink) {
    extern __shared__ __align__(16) unsigned int sm[];
    __shared__ int hist[4096];
    const int t = threadIdx.x;
    for (int i = t; i < 4096; i += 1024) hist[i] = 0;
    const uint4* src = reinterpret_cast<const uint4*>(in + (size_t)blockIdx.x * n);
    uint4* dst = reinterpret_cast<uint4*>(sm);
    const int vectors = n / 4;
    float r = 0.f;
    __syncthreads();
    const unsigned long long c0 = clock64();
    if (mode == 2) r += run_block(which, (float)t);
    __syncthreads();
    const unsigned long long c1 = clock64();
    issue_chunk(src, dst, vectors);
    const unsigned long long c2 = clock64();
    if (mode >= 1) r += run_block(which, (float)t + 0.5f);
    __syncthreads();
    const unsigned long long c3 = clock64();
    count_chunk(dst, vectors, hist);
    __syncthreads();
    const unsigned long long c4 = clock64();
    if (t == 0) {
        unsigned long long* o = out + 4 * blockIdx.x;
        o[0] = c1 - c0; o[1] = c2 - c1; o[2] = c3 - c2; o[3] = c4 - c1;
    }
    if (r == 12345.f) sink[0] = r;
}
"""


_modules = []


def kernel(src, name, shared_kb=184):
    """The CuPy function `name` of NVRTC's sm_90a build of `src`, allowed `shared_kb` KB of dynamic shared memory."""
    prog = nvrtc.createProgram(src, name + ".cu", [], [])
    try:
        nvrtc.compileProgram(prog, ["-std=c++17", "--gpu-architecture=sm_90a"])
    except Exception:
        print(nvrtc.getProgramLog(prog))
        raise
    mod = cp.cuda.function.Module()
    mod.load(nvrtc.getCUBIN(prog))
    function = mod.get_function(name)
    cp.cuda.driver.funcSetAttribute(function.ptr, 8, shared_kb * 1024)
    _modules.append(mod)  # (alive as long as the process)
    return function


def main():
    dev = torch.device("cuda", 0)
    kern = kernel(SRC, "load_code")
    n, ctas = 32768, 132
    shared = 4 * n + 16
    x = torch.randn(ctas * n, device=dev)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    out = cp.zeros(4 * ctas, dtype=cp.uint64)
    sink = cp.zeros(1, dtype=cp.float32)
    xs = cp.asarray(x)
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    rows = []
    for which, fmas in enumerate(BLOCKS):
        for mode, name in ((0, "none"), (1, "after (cold)"), (2, "before + after")):
            if which > 0 and mode == 0:
                continue
            cols = [[], [], [], [], []]
            for _ in range(9):
                flush.zero_()
                torch.cuda._sleep(200000)
                kern((ctas,), (1024,), (xs, cp.int32(n), cp.int32(mode), cp.int32(which), out, sink),
                     shared_mem=shared, stream=stream)
                torch.cuda.synchronize()
                o = out.get().reshape(-1, 4).astype("int64")
                for c in range(4):
                    cols[c].append(st.median(o[:, c]))
                cols[4].append(int(o[:, 3].max()))
            rows.append((fmas * 16 // 1024, name, *(int(st.median(c)) for c in cols)))
    print(f"{'block KB':>8s} {'mode':16s} {'pass before':>11s} {'issue':>6s} {'pass under load':>15s} "
          f"{'phase med':>9s} {'phase max':>9s}  (cycles; phase from after the first pass)")
    for r in rows:
        print(f"{r[0]:8d} {r[1]:16s} {r[2]:11d} {r[3]:6d} {r[4]:15d} {r[5]:9d} {r[6]:9d}")


if __name__ == "__main__":
    sys.exit(main())
