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

import probe_fill
from harness import cases

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op

# probe_fill's kernel with each CTA's chunk (offset, columns) from `where`, and entry points as plain CTAs and as
# 8-CTA clusters (calls 3, 5 and 6 ran this text written out; folded since onto probe_fill's source, which also
# carries its mode 8: the same code for the modes here, 0 and 2)
SRC = (probe_fill.SRC
       .replace("""extern "C" __global__ void __launch_bounds__(1024, 1) fill(const float* in, int n, int mode,
                                                           unsigned long long* out, unsigned int* sink) {""",
                """template <int CLUSTER>
__device__ __forceinline__ void fill_body(const float* in, const long long* where, int mode, unsigned long long* out,
                                          unsigned int* sink) {""")
       .replace("""    const uint4* src = reinterpret_cast<const uint4*>(in + (size_t)blockIdx.x * n);""",
                """    const long long offset = where[2 * blockIdx.x];
    const int n = (int)where[2 * blockIdx.x + 1];
    const uint4* src = reinterpret_cast<const uint4*>(in + offset);""")
       .replace("""    if (mode == 0 || mode == 3) acc = dst[t].x ^ dst[vectors - 1 - t].y;""",
                """    if ((mode == 0 || mode == 3) && vectors > 1024) acc = dst[t].x ^ dst[vectors - 1 - t].y;""")
       + """
extern "C" __global__ void __launch_bounds__(1024, 1) fill(const float* in, const long long* where, int mode,
                                                           unsigned long long* out, unsigned int* sink) {
    fill_body<1>(in, where, mode, out, sink);
}
extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(1024, 1)
    fill8(const float* in, const long long* where, int mode, unsigned long long* out, unsigned int* sink) {
    fill_body<8>(in, where, mode, out, sink);
}
""")
assert "fill_body<8>" in SRC and "where[2 * blockIdx.x]" in SRC


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
