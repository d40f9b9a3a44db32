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

// Programmatic dependent launch (sm_90+; no-ops before, and when the launch did not ask for it):
// pdl_wait() returns once the kernels this one depends on have finished and their writes are
// visible; pdl_launch_dependents() lets the next kernel on the stream be scheduled.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
