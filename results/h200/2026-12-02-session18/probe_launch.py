"""Session 18: what the events of one launch cost beyond its kernel's work, by the shared memory its CTAs take. An empty
kernel (each CTA writes one word) of 132 or 136 1024-thread CTAs, plain or as 8-CTA clusters, with 0 to 200 KB of
dynamic shared memory, timed as the harness times a call (a spin kernel, then start and end events around it), with
and without the L2 flush before; median of 30, us."""
import statistics as st

import cupy as cp
import torch
from cupy.cuda import nvrtc

SRC = r"""
extern "C" __global__ void __launch_bounds__(1024, 1) empty(unsigned int* out) {
    extern __shared__ unsigned int sm[];
    if (threadIdx.x == 0) out[blockIdx.x] = blockIdx.x;
}
extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(1024, 1) empty8(unsigned int* out) {
    extern __shared__ unsigned int sm[];
    if (threadIdx.x == 0) out[blockIdx.x] = blockIdx.x;
}
"""


def main():
    prog = nvrtc.createProgram(SRC, "empty.cu", [], [])
    nvrtc.compileProgram(prog, ["-std=c++17", "--gpu-architecture=sm_90a"])
    mod = cp.cuda.function.Module()
    mod.load(nvrtc.getCUBIN(prog))
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    out = cp.zeros(256, dtype=cp.uint32)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    print("kernel  CTAs  shared KB   events us (no flush / flushed)")
    for name, ctas in (("empty", 132), ("empty8", 136)):
        fn = mod.get_function(name)
        for kb in (0, 48, 100, 160, 200):
            cp.cuda.driver.funcSetAttribute(fn.ptr, 8, kb * 1024)  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            row = []
            for flushed in (False, True):
                ev = []
                for _ in range(30):
                    if flushed:
                        flush.zero_()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda._sleep(100000)
                    s.record()
                    fn((ctas,), (1024,), (out,), shared_mem=kb * 1024, stream=stream)
                    e.record()
                    e.synchronize()
                    ev.append(s.elapsed_time(e) * 1e3)
                row.append(f"{st.median(ev):6.2f}")
            print(f"{name:7s} {ctas:4d} {kb:6d}      {row[0]} / {row[1]}")


if __name__ == "__main__":
    main()
