// Prepended by _loader.source() to every .cu of this backend (NVRTC compiles them without the CUDA
// headers, which the CI machine does not have). A `#line` directive after it keeps compiler
// messages on the .cu file's own line numbers.

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// 16-byte global -> shared copy that does not wait (sm_80+), and its group fences
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned int dst = (unsigned int)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
