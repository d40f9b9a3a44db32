// sparse_attention (SPEC 4). q [B, H, 512] bf16, kv [N, 512] bf16, indices [B, K] int32 (-1 skip),
// sink [H] fp32, out [B, H, 512] bf16, lse [B, H] fp32. One block of 8 warps per (query row,
// 8 heads): each warp owns one head, each lane 16 of the 512 channels (32 contiguous bytes, so a
// warp reads a kv row in one coalesced pass; the block's other warps find it in L1). Online
// softmax in fp32; the sink joins only the denominator: out = acc / (l + exp(sink - m)).

#define DIM 512
#define PER_LANE 16
#define HEADS_PER_BLOCK 8

__device__ __forceinline__ float bf16_to_float(unsigned short x) { return __uint_as_float((unsigned int)x << 16); }

__device__ __forceinline__ unsigned short float_to_bf16(float f) {  // round to nearest even
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

__device__ __forceinline__ void load16(const unsigned short* p, float* v) {
    const uint4* src = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const uint4 w = src[half];
        const unsigned int words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[half * 8 + 2 * i] = __uint_as_float(words[i] << 16);
            v[half * 8 + 2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
        }
    }
}

template <bool HAS_SINK>
__global__ void __launch_bounds__(256) sparse_attention(const unsigned short* q, const unsigned short* kv,
                                                        const int* indices, const float* sink, unsigned short* out,
                                                        float* lse, int K, int heads, float sm_scale) {
    const int b = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = blockIdx.y * HEADS_PER_BLOCK + warp;
    if (h >= heads) return;
    const long long qrow = ((long long)b * heads + h) * DIM;
    float qv[PER_LANE], acc[PER_LANE], kvv[PER_LANE];
    load16(q + qrow + lane * PER_LANE, qv);
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) acc[i] = 0.f;
    float m = -INFINITY, l = 0.f;
    const int* idx_row = indices + (long long)b * K;
    for (int i = 0; i < K; ++i) {
        const int idx = idx_row[i];
        if (idx < 0) continue;
        load16(kv + (long long)idx * DIM + lane * PER_LANE, kvv);
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < PER_LANE; ++c) dot = fmaf(qv[c], kvv[c], dot);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        const float s = dot * sm_scale;
        const float m2 = fmaxf(m, s);
        const float a = expf(m - m2);  // 0 on the first valid index (m = -inf)
        const float p = expf(s - m2);
        l = l * a + p;
#pragma unroll
        for (int c = 0; c < PER_LANE; ++c) acc[c] = fmaf(p, kvv[c], acc[c] * a);
        m = m2;
    }
    const float m_safe = l > 0.f ? m : 0.f;
    float denom = l > 0.f ? l : 1.f;
    if (HAS_SINK) denom = l + expf(sink[h] - m_safe);
    unsigned short res[PER_LANE];
#pragma unroll
    for (int c = 0; c < PER_LANE; ++c) res[c] = float_to_bf16(acc[c] / denom);
    uint4* dst = reinterpret_cast<uint4*>(out + qrow + lane * PER_LANE);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        uint4 w;
        w.x = res[half * 8 + 0] | ((unsigned int)res[half * 8 + 1] << 16);
        w.y = res[half * 8 + 2] | ((unsigned int)res[half * 8 + 3] << 16);
        w.z = res[half * 8 + 4] | ((unsigned int)res[half * 8 + 5] << 16);
        w.w = res[half * 8 + 6] | ((unsigned int)res[half * 8 + 7] << 16);
        dst[half] = w;
    }
    if (lane == 0) lse[(long long)b * heads + h] = l > 0.f ? m + logf(l) : -INFINITY;
}
