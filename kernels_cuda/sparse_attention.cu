// sparse_attention (SPEC 4). q [B, H, 512] bf16, kv [N, 512] bf16, indices [B, K] int32 (-1 skip),
// sink [H] fp32, out [B, H, 512] bf16, lse [B, H] fp32.
//
// One CTA of 4 warps per (query row, 16 heads); the K gathered rows stream through shared memory in
// tiles of 32 (cp.async, double-buffered; a -1 row is zero-filled and masked). bf16 tensor-core mma
// (m16n8k16, fp32 accumulate):
// - S = Q K^T: warp w multiplies the 16 heads by the tile over dims 128w .. 128w+127 (its Q
//   fragments stay in registers); the four partial S meet in shared memory in fixed order, so every
//   warp holds the full S at its fragment positions.
// - online softmax in fp32 (base 2), identical in every warp;
// - O += P V: P goes from the S accumulators straight into A fragments (same positions), V through
//   ldmatrix.trans; warp w owns output dims 128w .. 128w+127.
// The sink joins only the denominator: out = O / (l + exp(sink - m)).

// DIM, TILE, WARPS, KV_STRIDE and the other kernels' tile, stage and buffer counts (H64_WARPS, STAGES,
// WG_TILE, WG_STAGES, COMBINE_HEADS, COMBINE_SPLITS, FP8_PITCH, PIPE_TILE, PIPE_BF16_STAGES, PIPE_RAW_STAGES, FP8_LATE_RAW_STAGES,
// PAIR_BF16_BUFS, PAIR_FP8_BUFS, PAIR_RAW_STAGES) and the heads or rows a CTA takes (HEADS_PER_CTA,
// H64_HEADS, WG2_PAIR) and ws's WS_READY_FENCE, WS_EPILOGUE_SMEM, WS_FLAGS_SMEM, WS_SOFTMAX_FFMA, WS_PERSISTENT,
// WS_TAIL_SPLIT, WS_PRODUCER_AHEAD, WS_PRODUCER_PREFETCH, WS_PRODUCER_LEAN, WS_MATH_SPLIT, WS_ORDER_ROWS, WS_QO_EVICT_FIRST,
// WS_P_STMATRIX come
// from sparse_attention.py's DEFINES (-D options,
// their one definition; no defaults here): the kernels are written for the values asserted.
static_assert(DIM == 512, "a row is 1 KB: 64 16-byte pieces, 8 chunks of the 128-byte swizzle");
static_assert(TILE == 32 && WARPS == 4, "h16: 4 warps x 128 dims of a 32-row tile (h64: 8 warps' 4-row copies)");
static_assert(HEADS_PER_CTA == 16, "h16: a CTA's heads are one m16 MMA tile");
static_assert(H64_HEADS == 64, "h64, wgmma, pipe, pair: a CTA's heads are one 64-row block (wgmma's M)");
static_assert(WG2_PAIR == 128, "wgmma2: a pair of 64-row blocks, 128 gathered rows, per step");
static_assert(WS_READY_FENCE == 0 || WS_READY_FENCE == 1, "ws: the proxy fence after a ready wait, on or off");
static_assert(WS_EPILOGUE_SMEM == 0 || WS_EPILOGUE_SMEM == 1, "ws: O through shared memory and bulk copies, or not");
static_assert(WS_FLAGS_SMEM == 0 || WS_FLAGS_SMEM == 1, "ws: the valid-row flags from the producer, or from the index list");
static_assert(WS_SOFTMAX_FFMA == 0 || WS_SOFTMAX_FFMA == 1, "ws: P by FFMA and ex2.approx.ftz, or by exp2f");
static_assert(WS_PERSISTENT == 0 || WS_PERSISTENT == 1, "ws: unsplit launches as a persistent grid over the items, or not");
static_assert(WS_TAIL_SPLIT == 0 || (WS_TAIL_SPLIT == 1 && WS_PERSISTENT == 1),
              "ws: the persistent grid's last-round items split (docs/attn-s12a.md), or not");
static_assert(WS_PRODUCER_AHEAD == 0 || WS_PRODUCER_AHEAD == 1, "ws: the producer's indices two pairs ahead (and before Q), or one");
static_assert(WS_PRODUCER_PREFETCH == 0 || (WS_PRODUCER_PREFETCH == 1 && WS_PRODUCER_AHEAD == 1),
              "ws: the next pair's rows prefetched to L2 (on top of WS_PRODUCER_AHEAD), or not");
static_assert(WS_PRODUCER_LEAN == 0 || (WS_PRODUCER_LEAN == 1 && WS_PRODUCER_AHEAD == 0),
              "ws: only copies between a half's free wait and its ready arrival (docs/attn-s14d.md), or the default's fill");
static_assert(WS_MATH_SPLIT == 0 || (WS_MATH_SPLIT == 1 && WS_SOFTMAX_FFMA == 1),
              "ws: the own block's P V issued a k-step at a time among the exponentials (docs/attn-s13b.md), or not");
static_assert(WS_ORDER_ROWS == 0 || (WS_ORDER_ROWS == 1 && WS_TAIL_SPLIT == 0),
              "ws: the persistent items row-major (a row's head blocks adjacent; docs/attn-s14a.md), or head-block-major");
static_assert(WS_QO_EVICT_FIRST == 0 || WS_QO_EVICT_FIRST == 1, "ws: Q's loads and out's stores evict_first in L2, or normal");
static_assert(WS_P_STMATRIX == 0 || WS_P_STMATRIX == 1, "ws: P_A and P_B stored by stmatrix (docs/attn-s14b.md), or by st.shared");
// (WS_OUT_TMA, also from DEFINES: the persistent epilogue's out by TMA tensor stores, docs/attn-s14c.md)
static_assert(WS_OUT_TMA == 0 || (WS_OUT_TMA == 1 && WS_Q_TMA == 1),
              "ws: the persistent item's out by 2-D TMA stores over out's tensor map (beside Q's), or by row copies");
static_assert(KV_STRIDE == DIM * 2 + 16, "bytes per shared row: 16-byte aligned, 8 rows land on distinct banks");
#define SLICE (DIM / WARPS)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f


__device__ __forceinline__ void mma_bf16(float* c, const unsigned int* a, unsigned int b0, unsigned int b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// cp_async16 with an L2 prefetch of the surrounding 256 bytes: a gathered 1 KB row is fetched by 64
// threads, so DRAM sees 256-byte requests instead of 32-byte sectors one by one
__device__ __forceinline__ void cp_async16_l2_256(void* smem, const void* gmem) {
    const unsigned int dst = (unsigned int)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned int* r, const void* smem) {
    const unsigned int addr = (unsigned int)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned int* r, const void* smem) {
    const unsigned int addr = (unsigned int)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// The denominator of out = O / d for a row of running max m and sum l (base 2) with the sink s: exp(s - m) joins
// the sum; an empty row (l = 0, m = -inf) takes its exponent at m = 0
__device__ __forceinline__ float sink_denominator(float l, float m, float s) {
    return l + exp2f(s * LOG2E - (l > 0.f ? m : 0.f));
}
// the row's lse (natural log) from its running max m and sum l (base 2); -inf for an empty row
__device__ __forceinline__ float lse_of(float l, float m) { return l > 0.f ? (m + log2f(l)) * LN2 : -INFINITY; }

// bf16x2 bits of (lo, hi), round to nearest even
__device__ __forceinline__ unsigned int pack_bf16(float lo, float hi) {
    unsigned int d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
// the bf16 A fragments of P V (KS k-steps of 16 columns) from P in the S accumulator layout of
// m64nNk16 (s[4 nt + c]: column 8 nt + 2 t + (c & 1)): k-step ks is columns 16 ks .. +15
template <int KS>
__device__ __forceinline__ void p_fragments(const float (&s)[8 * KS], unsigned int (&p)[KS][4]) {
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
        p[ks][0] = pack_bf16(s[8 * ks], s[8 * ks + 1]);
        p[ks][1] = pack_bf16(s[8 * ks + 2], s[8 * ks + 3]);
        p[ks][2] = pack_bf16(s[8 * ks + 4], s[8 * ks + 5]);
        p[ks][3] = pack_bf16(s[8 * ks + 6], s[8 * ks + 7]);
    }
}

__device__ __forceinline__ unsigned int ld32(const unsigned short* p) { return *reinterpret_cast<const unsigned int*>(p); }

// The row maxima over the quad (the 4 threads t holding a row's columns in an mma / wgmma fragment)
__device__ __forceinline__ void quad_row_max(float& mx_lo, float& mx_hi) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
}

// The running row sums l rescaled by alpha plus this tile's, each thread's partial sums first reduced over the quad
__device__ __forceinline__ void add_quad_row_sums(float& l_lo, float& l_hi, float sum_lo, float sum_hi, float alpha_lo,
                                                  float alpha_hi) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, off);
        sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, off);
    }
    l_lo = l_lo * alpha_lo + sum_lo;
    l_hi = l_hi * alpha_hi + sum_hi;
}

// The online-softmax step shared by every kernel (tile_softmax, the wgmma2, mma and h64 kernels): given the tile's row maxima
// (base 2, already reduced over the row), s becomes P = exp2(S - m) with m the new running max, the
// running sums l take the tile's row sums (reduced over the quad), and alpha is the factor by which
// O must be rescaled (0 while m was -inf, 1 where the max stayed).
template <int NT>
__device__ __forceinline__ void softmax_update(float (&s)[4 * NT], float mx_lo, float mx_hi, float& m_lo, float& m_hi,
                                               float& l_lo, float& l_hi, float& alpha_lo, float& alpha_hi) {
    const float new_lo = fmaxf(m_lo, mx_lo), new_hi = fmaxf(m_hi, mx_hi);
    const float use_lo = new_lo == -INFINITY ? 0.f : new_lo, use_hi = new_hi == -INFINITY ? 0.f : new_hi;
    alpha_lo = exp2f(m_lo - use_lo);
    alpha_hi = exp2f(m_hi - use_hi);
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        s[4 * nt] = exp2f(s[4 * nt] - use_lo);
        s[4 * nt + 1] = exp2f(s[4 * nt + 1] - use_lo);
        s[4 * nt + 2] = exp2f(s[4 * nt + 2] - use_hi);
        s[4 * nt + 3] = exp2f(s[4 * nt + 3] - use_hi);
        sum_lo += s[4 * nt] + s[4 * nt + 1];
        sum_hi += s[4 * nt + 2] + s[4 * nt + 3];
    }
    add_quad_row_sums(l_lo, l_hi, sum_lo, sum_hi, alpha_lo, alpha_hi);
    m_lo = new_lo;
    m_hi = new_hi;
}

template <bool HAS_SINK>
__global__ void __launch_bounds__(WARPS * 32) dsv4_sparse_attention(const unsigned short* q, const unsigned short* kv,
                                                               const int* indices, const float* sink,
                                                               unsigned short* out, float* lse, int K, int heads,
                                                               float sm_scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* kv_s = smem;                                                 // [2][TILE] rows of KV_STRIDE
    float* s_part = reinterpret_cast<float*>(smem + 2 * TILE * KV_STRIDE);     // [WARPS][16][32 lanes]
    int* valid_s = reinterpret_cast<int*>(s_part + WARPS * 16 * 32);           // [2][TILE]
    const int b = blockIdx.x, h0 = blockIdx.y * 16;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int* idx_row = indices + (long long)b * K;
    const float scale2 = sm_scale * LOG2E;
    const bool row_lo = h0 + g < heads, row_hi = h0 + g + 8 < heads;

    // Q fragments of this warp's dims (heads past the end: zero rows)
    unsigned int a[8][4];
    {
        const unsigned short* q_lo = q + ((long long)b * heads + h0 + g) * DIM + warp * SLICE + 2 * t;
        const unsigned short* q_hi = q_lo + 8 * DIM;
#pragma unroll
        for (int ks = 0; ks < 8; ++ks) {
            a[ks][0] = row_lo ? ld32(q_lo + ks * 16) : 0u;
            a[ks][1] = row_hi ? ld32(q_hi + ks * 16) : 0u;
            a[ks][2] = row_lo ? ld32(q_lo + ks * 16 + 8) : 0u;
            a[ks][3] = row_hi ? ld32(q_hi + ks * 16 + 8) : 0u;
        }
    }

    auto fetch = [&](int tile, int buf) {
        unsigned char* dst = kv_s + buf * TILE * KV_STRIDE;
        for (int c = threadIdx.x; c < TILE * (DIM * 2 / 16); c += WARPS * 32) {
            const int r = c / (DIM * 2 / 16), piece = c % (DIM * 2 / 16);
            const int i = tile * TILE + r;
            const int idx = i < K ? idx_row[i] : -1;
            if (idx >= 0) {
                cp_async16(dst + r * KV_STRIDE + piece * 16,
                           reinterpret_cast<const unsigned char*>(kv) + (long long)idx * DIM * 2 + piece * 16);
            } else {  // zeros, so a masked row adds 0 * 0, never 0 * NaN
                *reinterpret_cast<uint4*>(dst + r * KV_STRIDE + piece * 16) = make_uint4(0u, 0u, 0u, 0u);
            }
            if (piece == 0) valid_s[buf * TILE + r] = idx >= 0;
        }
        cp_async_commit();
    };

    float o[SLICE / 8][4];
#pragma unroll
    for (int j = 0; j < SLICE / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
    const int tiles = (K + TILE - 1) / TILE;
    if (tiles > 0) fetch(0, 0);
    for (int i = 0; i < tiles; ++i) {
        const int buf = i & 1;
        if (i + 1 < tiles) {
            fetch(i + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const unsigned char* tile_s = kv_s + buf * TILE * KV_STRIDE;

        // partial S over this warp's dims
        float s[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
            const unsigned short* row =
                reinterpret_cast<const unsigned short*>(tile_s + (nt * 8 + g) * KV_STRIDE) + warp * SLICE + 2 * t;
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) mma_bf16(s[nt], a[ks], ld32(row + ks * 16), ld32(row + ks * 16 + 8));
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) s_part[(warp * 16 + nt * 4 + c) * 32 + lane] = s[nt][c];
        __syncthreads();

        // full S at this thread's positions, masked and scaled to base 2
        float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            const bool v0 = valid_s[buf * TILE + nt * 8 + 2 * t], v1 = valid_s[buf * TILE + nt * 8 + 2 * t + 1];
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int k = (nt * 4 + c) * 32 + lane;
                const float full = (s_part[k] + s_part[16 * 32 + k]) + (s_part[2 * 16 * 32 + k] + s_part[3 * 16 * 32 + k]);
                s[nt][c] = ((c & 1) ? v1 : v0) ? full * scale2 : -INFINITY;
            }
            mx_lo = fmaxf(mx_lo, fmaxf(s[nt][0], s[nt][1]));
            mx_hi = fmaxf(mx_hi, fmaxf(s[nt][2], s[nt][3]));
        }
        quad_row_max(mx_lo, mx_hi);
        float alpha_lo, alpha_hi;
        softmax_update<4>(reinterpret_cast<float(&)[16]>(s), mx_lo, mx_hi, m_lo, m_hi, l_lo, l_hi, alpha_lo, alpha_hi);
#pragma unroll
        for (int j = 0; j < SLICE / 8; ++j) {
            o[j][0] *= alpha_lo;
            o[j][1] *= alpha_lo;
            o[j][2] *= alpha_hi;
            o[j][3] *= alpha_hi;
        }

        // O += P V over this warp's output dims
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
            const unsigned int p[4] = {pack_bf16(s[2 * ks][0], s[2 * ks][1]), pack_bf16(s[2 * ks][2], s[2 * ks][3]),
                                       pack_bf16(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                                       pack_bf16(s[2 * ks + 1][2], s[2 * ks + 1][3])};
            const int mi = lane >> 3, r = lane & 7;
            const unsigned char* base = tile_s + (ks * 16 + (mi & 1) * 8 + r) * KV_STRIDE + (warp * SLICE + (mi >> 1) * 8) * 2;
#pragma unroll
            for (int j = 0; j < SLICE / 8; j += 2) {
                unsigned int v[4];
                ldmatrix_x4_trans(v, base + j * 8 * 2);
                mma_bf16(o[j], p, v[0], v[1]);
                mma_bf16(o[j + 1], p, v[2], v[3]);
            }
        }
        __syncthreads();  // the buffer and s_part are rewritten next
    }

    // out = O / (l [+ exp(sink - m)]); a row with no valid index: out 0, lse -inf
    float denom_lo = l_lo > 0.f ? l_lo : 1.f, denom_hi = l_hi > 0.f ? l_hi : 1.f;
    if (HAS_SINK) {
        if (row_lo) denom_lo = sink_denominator(l_lo, m_lo, sink[h0 + g]);
        if (row_hi) denom_hi = sink_denominator(l_hi, m_hi, sink[h0 + g + 8]);
    }
    const float inv_lo = 1.f / denom_lo, inv_hi = 1.f / denom_hi;
    unsigned short* out_lo = out + ((long long)b * heads + h0 + g) * DIM + warp * SLICE + 2 * t;
    unsigned short* out_hi = out_lo + 8 * DIM;
#pragma unroll
    for (int j = 0; j < SLICE / 8; ++j) {
        if (row_lo) *reinterpret_cast<unsigned int*>(out_lo + j * 8) = pack_bf16(o[j][0] * inv_lo, o[j][1] * inv_lo);
        if (row_hi) *reinterpret_cast<unsigned int*>(out_hi + j * 8) = pack_bf16(o[j][2] * inv_hi, o[j][3] * inv_hi);
    }
    if (warp == 0 && t == 0) {
        if (row_lo) lse[(long long)b * heads + h0 + g] = lse_of(l_lo, m_lo);
        if (row_hi) lse[(long long)b * heads + h0 + g + 8] = lse_of(l_hi, m_hi);
    }
}


// ---------------------------------------------------------------------------------------------
// dsv4_sparse_attention_h64: 64 heads per CTA, so each gathered row is read once for all of them
// (at H 128, twice: two CTAs), with split-K over the index list for short grids.
//
// 8 warps: warp w serves heads 16 (w & 3) .. +15 over the dims half (w >> 2) * 256 .. +255, so the
// two warps of a head group split the 512-wide dot and the 512-wide output (FlashMLA's split of the
// output across its two math warpgroups). Per tile of 32 gathered rows:
// - S = Q K^T over the warp's half (Q in shared memory, A fragments by ldmatrix: Q in registers
//   would take 64 more a thread and spill); the partner's partial S comes through
//   shared memory and each warp adds it to its own (a + b = b + a: both warps hold identical S);
// - online softmax in fp32 (base 2), identical in both warps of a head group;
// - O += P V over the warp's output half: P from the S accumulators, V through ldmatrix.trans.
// Tiles stream through STAGES shared buffers by cp.async, STAGES - 1 tiles ahead of the math.
// Heads past `heads` (H not a multiple of 64): the warp skips its math, still joins the barriers.
// SPLIT: this CTA covers indices [split * chunk, +chunk) and writes its output normalised by its own
// sum (fp32) and its lse; dsv4_sparse_attention_combine merges the splits and applies the sink.

static_assert(H64_WARPS == 8 && STAGES == 3, "h64: 4 groups of 16 heads x 2 halves of the dims; 3 stages "
              "(2 tiles in flight) fill Hopper's 227 KB with Q");
#define H64_HALF 256  // dims per warp

template <bool HAS_SINK, bool SPLIT>
__global__ void __launch_bounds__(H64_WARPS * 32, 1)
    dsv4_sparse_attention_h64(const unsigned short* q, const unsigned short* kv, const int* indices, const float* sink,
                              unsigned short* out, float* lse, float* part_out, float* part_lse, int K, int heads,
                              int chunk, float sm_scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* kv_s = smem;                                               // [STAGES][TILE] rows of KV_STRIDE
    float* s_part = reinterpret_cast<float*>(smem + STAGES * TILE * KV_STRIDE);  // [H64_WARPS][16][32 lanes]
    int* valid_s = reinterpret_cast<int*>(s_part + H64_WARPS * 16 * 32);     // [STAGES][TILE]
    unsigned char* q_s = reinterpret_cast<unsigned char*>(valid_s + STAGES * TILE);  // [64 heads] rows of KV_STRIDE
    const int b = blockIdx.x, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int group = warp & 3, half = warp >> 2, partner = warp ^ 4;
    const int h0 = blockIdx.y * 64 + group * 16;
    const bool active = h0 < heads;  // warp-uniform
    const bool row_lo = h0 + g < heads, row_hi = h0 + g + 8 < heads;
    const int k_begin = split * chunk;
    const int n = max(min(K - k_begin, chunk), 0);
    const int* idx_row = indices + (long long)b * K + k_begin;
    const float scale2 = sm_scale * LOG2E;

    // the CTA's 64 query heads into shared memory (heads past the end: zeros); they join the first
    // tile's commit group, so the first top-of-loop wait and barrier cover them
    const int cta_h0 = blockIdx.y * 64;
    for (int c = threadIdx.x; c < 64 * (DIM * 2 / 16); c += H64_WARPS * 32) {
        const int r = c / (DIM * 2 / 16), piece = c % (DIM * 2 / 16);
        if (cta_h0 + r < heads) {
            cp_async16(q_s + r * KV_STRIDE + piece * 16,
                       reinterpret_cast<const unsigned char*>(q) + ((long long)b * heads + cta_h0 + r) * DIM * 2 + piece * 16);
        } else {
            *reinterpret_cast<uint4*>(q_s + r * KV_STRIDE + piece * 16) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
    // ldmatrix.x4 address of this lane for the A fragment of k-step 0: rows group*16 + (lane & 15),
    // dims half*256 + (lane >> 4)*8; registers 0..3 come back as the m16n8k16 A fragment a0..a3
    const unsigned char* q_frag = q_s + (group * 16 + (lane & 15)) * KV_STRIDE + (half * H64_HALF + (lane >> 4) * 8) * 2;

    // Thread x copies 16-byte piece x % 64 of rows x / 64 + 4k (k < 8) of each tile. Its 8 indices
    // of a tile are loaded one tile before its copies are issued (load_idx, then fetch one
    // iteration later), so the index loads' latency hides behind a tile of math.
    constexpr int ROWS_PER_THREAD = TILE * (DIM * 2 / 16) / (H64_WARPS * 32);
    const int piece = threadIdx.x % (DIM * 2 / 16), row_first = threadIdx.x / (DIM * 2 / 16);
    int idx_next[ROWS_PER_THREAD];
    auto load_idx = [&](int tile) {
#pragma unroll
        for (int k = 0; k < ROWS_PER_THREAD; ++k) {
            const int i = tile * TILE + row_first + k * (H64_WARPS * 32 / (DIM * 2 / 16));
            idx_next[k] = i < n ? idx_row[i] : -1;
        }
    };
    // copies of one tile from idx_next; one commit group per call, empty past the end, so the
    // wait_group counts stay uniform
    auto fetch = [&](int tile, int buf) {
        if (tile * TILE < n) {
            unsigned char* dst = kv_s + buf * TILE * KV_STRIDE;
#pragma unroll
            for (int k = 0; k < ROWS_PER_THREAD; ++k) {
                const int r = row_first + k * (H64_WARPS * 32 / (DIM * 2 / 16)), idx = idx_next[k];
                if (idx >= 0) {
                    cp_async16_l2_256(dst + r * KV_STRIDE + piece * 16,
                                      reinterpret_cast<const unsigned char*>(kv) + (long long)idx * DIM * 2 + piece * 16);
                } else {  // zeros, so a masked row adds 0 * 0, never 0 * NaN
                    *reinterpret_cast<uint4*>(dst + r * KV_STRIDE + piece * 16) = make_uint4(0u, 0u, 0u, 0u);
                }
                if (piece == 0) valid_s[buf * TILE + r] = idx >= 0;
            }
        }
        cp_async_commit();
    };

    float o[H64_HALF / 8][4];
#pragma unroll
    for (int j = 0; j < H64_HALF / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
    const int tiles = (n + TILE - 1) / TILE;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        load_idx(s);
        fetch(s, s);
    }
    load_idx(STAGES - 1);
    for (int i = 0; i < tiles; ++i) {
        const int buf = i % STAGES;
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile i have landed
        __syncthreads();              // everyone's have; and everyone left tile i - 1, whose buffer is refilled now
        fetch(i + STAGES - 1, (i + STAGES - 1) % STAGES);
        load_idx(i + STAGES);
        const unsigned char* tile_s = kv_s + buf * TILE * KV_STRIDE;

        float s[4][4];
        if (active) {
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
            const unsigned short* row0 =
                reinterpret_cast<const unsigned short*>(tile_s + g * KV_STRIDE) + half * H64_HALF + 2 * t;
#pragma unroll
            for (int ks = 0; ks < 16; ++ks) {
                unsigned int a[4];
                ldmatrix_x4(a, q_frag + ks * 16 * 2);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    const unsigned short* row = row0 + nt * 8 * (KV_STRIDE / 2);
                    mma_bf16(s[nt], a, ld32(row + ks * 16), ld32(row + ks * 16 + 8));
                }
            }
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int c = 0; c < 4; ++c) s_part[(warp * 16 + nt * 4 + c) * 32 + lane] = s[nt][c];
        }
        __syncthreads();  // partials visible
        if (active) {
            float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const bool v0 = valid_s[buf * TILE + nt * 8 + 2 * t], v1 = valid_s[buf * TILE + nt * 8 + 2 * t + 1];
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const float full = s[nt][c] + s_part[(partner * 16 + nt * 4 + c) * 32 + lane];
                    s[nt][c] = ((c & 1) ? v1 : v0) ? full * scale2 : -INFINITY;
                }
                mx_lo = fmaxf(mx_lo, fmaxf(s[nt][0], s[nt][1]));
                mx_hi = fmaxf(mx_hi, fmaxf(s[nt][2], s[nt][3]));
            }
            quad_row_max(mx_lo, mx_hi);
            float alpha_lo, alpha_hi;
            softmax_update<4>(reinterpret_cast<float(&)[16]>(s), mx_lo, mx_hi, m_lo, m_hi, l_lo, l_hi, alpha_lo, alpha_hi);
#pragma unroll
            for (int j = 0; j < H64_HALF / 8; ++j) {
                o[j][0] *= alpha_lo;
                o[j][1] *= alpha_lo;
                o[j][2] *= alpha_hi;
                o[j][3] *= alpha_hi;
            }
#pragma unroll
            for (int ks = 0; ks < 2; ++ks) {
                const unsigned int p[4] = {pack_bf16(s[2 * ks][0], s[2 * ks][1]), pack_bf16(s[2 * ks][2], s[2 * ks][3]),
                                           pack_bf16(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                                           pack_bf16(s[2 * ks + 1][2], s[2 * ks + 1][3])};
                const int mi = lane >> 3, r = lane & 7;
                const unsigned char* base =
                    tile_s + (ks * 16 + (mi & 1) * 8 + r) * KV_STRIDE + (half * H64_HALF + (mi >> 1) * 8) * 2;
#pragma unroll
                for (int j = 0; j < H64_HALF / 8; j += 2) {
                    unsigned int v[4];
                    ldmatrix_x4_trans(v, base + j * 8 * 2);
                    mma_bf16(o[j], p, v[0], v[1]);
                    mma_bf16(o[j + 1], p, v[2], v[3]);
                }
            }
        }
        // no barrier here: the next tile's top barrier orders these reads of s_part and the buffer
        // before anyone rewrites them
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the CTA exits

    if (!active) return;
    const long long row = (long long)b * heads + h0 + g;  // this thread's low head; high = +8
    if (SPLIT) {  // output normalised by this split's own sum; lse of this split
        const long long prow = ((long long)b * gridDim.z + split) * heads + h0 + g;
        const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
        float* p_lo = part_out + prow * DIM + half * H64_HALF + 2 * t;
        float* p_hi = p_lo + 8 * DIM;
#pragma unroll
        for (int j = 0; j < H64_HALF / 8; ++j) {
            if (row_lo) *reinterpret_cast<float2*>(p_lo + j * 8) = make_float2(o[j][0] * inv_lo, o[j][1] * inv_lo);
            if (row_hi) *reinterpret_cast<float2*>(p_hi + j * 8) = make_float2(o[j][2] * inv_hi, o[j][3] * inv_hi);
        }
        if (half == 0 && t == 0) {
            if (row_lo) part_lse[prow] = lse_of(l_lo, m_lo);
            if (row_hi) part_lse[prow + 8] = lse_of(l_hi, m_hi);
        }
        return;
    }
    // out = O / (l [+ exp(sink - m)]); a row with no valid index: out 0, lse -inf
    float denom_lo = l_lo > 0.f ? l_lo : 1.f, denom_hi = l_hi > 0.f ? l_hi : 1.f;
    if (HAS_SINK) {
        if (row_lo) denom_lo = sink_denominator(l_lo, m_lo, sink[h0 + g]);
        if (row_hi) denom_hi = sink_denominator(l_hi, m_hi, sink[h0 + g + 8]);
    }
    const float inv_lo = 1.f / denom_lo, inv_hi = 1.f / denom_hi;
    unsigned short* out_lo = out + row * DIM + half * H64_HALF + 2 * t;
    unsigned short* out_hi = out_lo + 8 * DIM;
#pragma unroll
    for (int j = 0; j < H64_HALF / 8; ++j) {
        if (row_lo) *reinterpret_cast<unsigned int*>(out_lo + j * 8) = pack_bf16(o[j][0] * inv_lo, o[j][1] * inv_lo);
        if (row_hi) *reinterpret_cast<unsigned int*>(out_hi + j * 8) = pack_bf16(o[j][2] * inv_hi, o[j][3] * inv_hi);
    }
    if (half == 0 && t == 0) {
        if (row_lo) lse[row] = lse_of(l_lo, m_lo);
        if (row_hi) lse[row + 8] = lse_of(l_hi, m_hi);
    }
}

// Merges the splits of the 64-heads-a-CTA kernels: one warp per (query row, head), COMBINE_HEADS heads a
// CTA, 16 dims a lane (dims 4 lane + 128 i: four coalesced float4 a split). lse = log sum_s exp(lse_s);
// out = sum_s exp(lse_s - lse) out_s / (1 + exp(sink - lse)). An empty split (lse_s = -inf) weighs 0; an
// all-empty row gives out 0, lse -inf. Sums run in split order (the same bits as one thread a dim would
// give). Latency is what it costs at decode (the partials sit in L2): the first COMBINE_SPLITS splits'
// partials are loaded before their weights are known, so a row of up to that many splits pays one L2
// round trip (the lse loads go out beside them), not one a split. (Two splits merge in clusters since session 11:
// this kernel serves the launches of more, which are few rows, so its registers are not bounded for residency.)
template <bool HAS_SINK>
__global__ void __launch_bounds__(COMBINE_HEADS * 32)
    dsv4_sparse_attention_combine(const float* part_out, const float* part_lse, const float* sink,
                                  unsigned short* out, float* lse, int heads, int splits) {
    // launched to overlap the split kernel (its CTAs trigger at their start): the partials are read
    // only once that grid is done and its writes are visible (a no-op under a plain launch)
    pdl_wait();
    const int b = blockIdx.x, h = blockIdx.y * COMBINE_HEADS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (h >= heads) return;
    const long long first = (long long)b * splits * heads + h;  // split s at first + s * heads
    auto load_part = [&](int s, float4 (&v)[4]) {
        const float* src = part_out + (first + (long long)s * heads) * DIM + 4 * lane;
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = *reinterpret_cast<const float4*>(src + 128 * i);
    };
    float4 v[COMBINE_SPLITS][4];
#pragma unroll
    for (int u = 0; u < COMBINE_SPLITS; ++u)
        if (u < splits) load_part(u, v[u]);
    float mx = -INFINITY;
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, part_lse[first + (long long)s * heads]);
    const float mx_use = mx == -INFINITY ? 0.f : mx;
    float total = 0.f;
    float4 acc[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < splits; s0 += COMBINE_SPLITS) {
        if (s0 > 0) {
#pragma unroll
            for (int u = 0; u < COMBINE_SPLITS; ++u)
                if (s0 + u < splits) load_part(s0 + u, v[u]);
        }
#pragma unroll
        for (int u = 0; u < COMBINE_SPLITS; ++u) {
            if (s0 + u >= splits) break;
            const float w = exp2f((part_lse[first + (long long)(s0 + u) * heads] - mx_use) * LOG2E);
            total += w;
            if (w > 0.f) {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    acc[i].x += w * v[u][i].x;
                    acc[i].y += w * v[u][i].y;
                    acc[i].z += w * v[u][i].z;
                    acc[i].w += w * v[u][i].w;
                }
            }
        }
    }
    const float row_lse = total > 0.f ? mx_use + log2f(total) * LN2 : -INFINITY;
    float scale = total > 0.f ? 1.f / total : 0.f;
    if (HAS_SINK && total > 0.f) scale /= 1.f + exp2f(fminf((sink[h] - row_lse) * LOG2E, 126.f));
    const long long row = (long long)b * heads + h;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        uint2 packed;
        packed.x = pack_bf16(acc[i].x * scale, acc[i].y * scale);
        packed.y = pack_bf16(acc[i].z * scale, acc[i].w * scale);
        *reinterpret_cast<uint2*>(out + row * DIM + 4 * lane + 128 * i) = packed;
    }
    if (lane == 0) lse[row] = row_lse;
}


// ---------------------------------------------------------------------------------------------
// dsv4_sparse_attention_wgmma (sm_90a): 64 heads per CTA of two warpgroups, Hopper's wgmma.
//
// Shared memory in the 128-byte-swizzle K-major layout of wgmma: a [rows x 512] bf16 matrix is
// 8 column chunks of 64 dims; chunk c is [rows] lines of 128 bytes at c * rows * 128, and the
// 16-byte unit j of line r sits at unit j ^ (r & 7) (1024-byte atoms of 8 lines). Q [64 heads]
// and the gathered rows of a tile [64] both use it; cp.async applies the swizzle on the write.
// Per tile of 64 gathered rows, warpgroup `half` (0, 1):
// - S_half = Q[:, half dims] K[:, half dims]^T: wgmma m64n64k16 x 16, A and B from shared memory
//   (K-major descriptors); the two partial S meet in shared memory (fp32) and each warpgroup adds
//   the other's, so both hold the full S (a + b = b + a: identical in both);
// - online softmax in fp32 (base 2) on the accumulator fragments;
// - O[:, half dims] += P V[:, half dims]: wgmma m64n256k16 x 4, A = P from registers (the S
//   accumulator of columns 16k..16k+15 is the A fragment of k-step k), B = the same gathered rows
//   read MN-major (the 256 dims are N and contiguous, the rows are K): LBO = the 8 KB between
//   64-dim chunks, SBO = the 1 KB between groups of 8 rows.
// Two stages: tile i + 1 is copied while tile i is multiplied. Heads past H (H not a multiple of
// 64, FP8 loader only) get zero Q rows and are not written.
// SPLIT as in the h64 kernel (dsv4_sparse_attention_combine merges the splits).

static_assert(WG_TILE == 64 && WG_STAGES == 2, "wgmma: a tile is S's N = 64 (4 k-steps of P V); tile i + 1 "
              "is copied while tile i is multiplied");
#define WG_CHUNK_BYTES(rows) ((rows) * 128)
#define WG_MAT_BYTES (WG_TILE * DIM * 2)  // 64 lines x 1 KB
// dynamic shared memory: 1024 bytes of alignment slack, Q, the stages, the S partials, the flags
#define WG_SHARED_BYTES (1024 + WG_MAT_BYTES + WG_STAGES * WG_MAT_BYTES + 2 * 4 * 32 * 32 * 4 + WG_STAGES * WG_TILE * 4)

// byte offset of the 16-byte piece `piece` (0..63) of line `r` in a swizzled [rows x 512] bf16 matrix
__device__ __forceinline__ unsigned int swizzled_offset(int rows, int r, int piece) {
    return (piece >> 3) * WG_CHUNK_BYTES(rows) + r * 128 + (((piece & 7) ^ (r & 7)) << 4);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_AVAILABLE 1
// wgmma shared memory descriptor, 128-byte swizzle (layout type 1); offsets in bytes
__device__ __forceinline__ unsigned long long wg_desc(unsigned int smem_addr, unsigned int lbo, unsigned int sbo) {
    return (unsigned long long)((smem_addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma
__device__ __forceinline__ void wg_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// d[64 x 64] += A[64 x 16] B[16 x 64]^T, both K-major in shared memory
__device__ __forceinline__ void wgmma_m64n64k16_ss(float* d, unsigned long long a, unsigned long long b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, 1, 0;\n"  // scale-d: accumulate into d
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b));
}

// d[64 x 32] = A[64 x 16] B[16 x 32]^T (+ d unless `accumulate` is 0), both K-major in shared memory;
// with 0, s need not be zeroed by other instructions while the previous tile's P V is still in flight
// (the LATE_PV pipe body)
__device__ __forceinline__ void wgmma_m64n32k16_ss_set(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %18, 0;\n"  // scale-d: accumulate into d, or overwrite it
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_m64n32k16_ss(float* d, unsigned long long a, unsigned long long b) {
    wgmma_m64n32k16_ss_set(d, a, b, 1);
}

#define WG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D32(i) WG_D8(i), WG_D8(i + 8), WG_D8(i + 16), WG_D8(i + 24)
// d[64 x 256] += A[64 x 16] (registers, bf16x2) B[16 x 256], B MN-major in shared memory (trans-b 1)
__device__ __forceinline__ void wgmma_m64n256k16_rs(float* d, const unsigned int* a, unsigned long long b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, 1, 0;\n"  // scale-d: accumulate into d
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n"
        "}\n"
        : WG_D32(0), WG_D32(32), WG_D32(64), WG_D32(96)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
// d[64 x 256] += A[64 x 16] B[16 x 256], A K-major and B MN-major (trans-b 1), both in shared memory
__device__ __forceinline__ void wgmma_m64n256k16_ss(float* d, unsigned long long a, unsigned long long b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, 1, 0;\n"  // scale-d: accumulate into d
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 1;\n"
        "}\n"
        : WG_D32(0), WG_D32(32), WG_D32(64), WG_D32(96)
        : "l"(a), "l"(b));
}
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
// named barrier `id` over the `count` threads that reach it (bar.sync waits)
__device__ __forceinline__ void wg_bar_sync(int id, int count = 128) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory"); }
#else
#define WG_AVAILABLE 0
#endif

// Row loaders of the wgmma kernel (the policy the kernel template takes), so the bf16 and the FP8
// op share every MMA, the softmax and the epilogue. A loader owns the shared memory after Q and:
// - load_idx(tile): reads this thread's indices of `tile` (one tile ahead of its copies, so the
//   index loads' latency hides behind a tile of math);
// - fetch(tile, buf): issues the copies of `tile` into stage `buf` and writes the tile's row flags
//   valid(buf); one commit group a call, empty past the split's end (uniform wait counts);
// - land(buf): called after the top barrier, once every thread's copies of the tile have landed;
//   returns the shared address of the tile in the swizzled bf16 layout above;
// - s_part(buf): where the two warpgroups exchange their partial S of that tile;
// - ANY_HEADS: whether H may be other than a multiple of 64 (then Q rows past H are zeros and
//   their outputs are not written);
// - FETCH_UNDER_S: whether fetch() is issued after the S wgmma (under it) rather than before land().
#if WG_AVAILABLE
struct WgBf16Rows {  // bf16 rows of 1 KB, copied straight into a swizzled tile of two stages
    static constexpr bool ANY_HEADS = false;  // launched for whole 64-head blocks only (h64 serves the rest)
    static constexpr bool FETCH_UNDER_S = true;  // land() is free: issue the copies under the S MMA
    static constexpr int SHARED_BYTES = WG_STAGES * WG_MAT_BYTES + 2 * 4 * 32 * 32 * 4 + WG_STAGES * WG_TILE * 4;
    const unsigned char* kv;
    const int* idx_row;
    int n;
    unsigned char* kv_s;  // [WG_STAGES][64 rows] swizzled, then the S partials, then the flags
    int piece, line_first;  // 64 pieces of 16 bytes a line; thread x copies piece x % 64 of lines x / 64 + 4k
    int idx_next[WG_TILE / 4];

    __device__ __forceinline__ WgBf16Rows(const unsigned short* kv_, const int* idx_row_, int n_, unsigned char* smem)
        : kv(reinterpret_cast<const unsigned char*>(kv_)), idx_row(idx_row_), n(n_), kv_s(smem),
          piece(threadIdx.x & 63), line_first(threadIdx.x >> 6) {}
    __device__ __forceinline__ float* s_part(int) {  // [2 halves][4 warps][32][32 lanes]
        return reinterpret_cast<float*>(kv_s + WG_STAGES * WG_MAT_BYTES);
    }
    __device__ __forceinline__ int* valid(int buf) {  // [WG_STAGES][64]
        return reinterpret_cast<int*>(kv_s + WG_STAGES * WG_MAT_BYTES + 2 * 4 * 32 * 32 * 4) + buf * WG_TILE;
    }
    __device__ __forceinline__ void load_idx(int tile) {
#pragma unroll
        for (int k = 0; k < WG_TILE / 4; ++k) {
            const int i = tile * WG_TILE + line_first + 4 * k;
            idx_next[k] = i < n ? idx_row[i] : -1;
        }
    }
    __device__ __forceinline__ void fetch(int tile, int buf) {
        if (tile * WG_TILE < n) {
            unsigned char* dst = kv_s + buf * WG_MAT_BYTES;
            int* flags = valid(buf);
#pragma unroll
            for (int k = 0; k < WG_TILE / 4; ++k) {
                const int r = line_first + 4 * k, idx = idx_next[k];
                if (idx >= 0) {
                    cp_async16_l2_256(dst + swizzled_offset(WG_TILE, r, piece), kv + (long long)idx * DIM * 2 + piece * 16);
                } else {  // zeros, so a masked row adds 0 * 0, never 0 * NaN
                    *reinterpret_cast<uint4*>(dst + swizzled_offset(WG_TILE, r, piece)) = make_uint4(0u, 0u, 0u, 0u);
                }
                if (piece == 0) flags[r] = idx >= 0;
            }
        }
        cp_async_commit();
    }
    __device__ __forceinline__ unsigned int land(int buf) {
        return (unsigned int)__cvta_generic_to_shared(kv_s) + buf * WG_MAT_BYTES;
    }
};

// FP8 cache records (SPEC 8): slot t at page t >> page_shift, o = t & (page_size - 1); its 576-byte
// record (448 e4m3, 64 bf16) at page + 576 o, its 8 scale bytes at page + 576 page_size + 8 o.
// The raw bytes of a tile land in one of two stages (cp.async: 36 pieces of 16 bytes a record and
// one 8-byte piece of scales, which are only 8-aligned); land() dequantises the stage into one bf16
// tile (e4m3 x 2^(byte - 127) is exact in bf16: a power-of-two scale) and synchronises. A stage is
// dead from its land() to its next fetch, so the S partials (32 KB) live in it meanwhile: Q 64 KB,
// the tile 64 KB and two stages of 37 KB fit where two bf16 stages and the partials would not.
// Unread: padding, other slots, byte 7 of a scale group; a -1 row loads nothing and becomes zeros.
#define FP8_RECORD 576                                 // bytes: 448 e4m3 then 64 bf16
#define FP8_NOPE 448                                   // e4m3 dims
static_assert(FP8_PITCH == FP8_RECORD + 16, "a staged row: record, 8 scale bytes, 8 spare (16-byte aligned)");
#define FP8_STAGE_BYTES (WG_TILE * FP8_PITCH)          // 37,888 >= the S partials' 32 KB
#define FP8_PIECES (FP8_RECORD / 16)                   // 36 copies of 16 bytes a record
#define FP8_PIECES_PER_THREAD (WG_TILE * FP8_PIECES / 256)  // 9
#define FP8_WG_SHARED_BYTES (1024 + WG_MAT_BYTES + WG_MAT_BYTES + WG_STAGES * FP8_STAGE_BYTES + WG_STAGES * WG_TILE * 4)

// 8-byte global -> shared copy that does not wait (.ca: the 16-byte-only .cg does not take 8)
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem) {
    const unsigned int dst = (unsigned int)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(gmem));
}

// two e4m3 (the low byte is the lower dim) times a power-of-two scale -> bf16x2, exact
__device__ __forceinline__ unsigned int e4m3x2_scaled_bf16x2(unsigned int two, float scale) {
    unsigned int h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"((unsigned short)(two & 0xffffu)));
    float lo, hi;
    asm("{\n.reg .f16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}\n" : "=f"(lo), "=f"(hi) : "r"(h2));
    return pack_bf16(lo * scale, hi * scale);
}

// e4m3 -> bf16 without conversion instructions (cvt runs at 16 a clock per SM on Hopper, 4x below
// the integer pipe: the cvt path spends about 3,600 clocks a 64-row tile on conversions alone).
// prmt puts bytes i, j of `word` at the low bytes of the two halves with their sign replicated
// above, (x << 4) & 0x87F0 per half keeps the sign at bit 15 and the 7 magnitude bits at 4..10:
// the bf16 whose value is e4m3 x 2^-120 (e4m3 subnormals become bf16 subnormals, which bf16
// multiplies keep). Selector 0x9180: bytes 0, 1; 0xB3A2: bytes 2, 3.
__device__ __forceinline__ unsigned int e4m3x2_bf16x2_bits(unsigned int word, unsigned int selector) {
    unsigned int v;
    asm("prmt.b32 %0, %1, 0, %2;\n" : "=r"(v) : "r"(word), "r"(selector));
    return (v << 4) & 0x87F087F0u;
}
__device__ __forceinline__ unsigned int bf16x2_mul(unsigned int a, unsigned int b) {
    unsigned int d;
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
// 8 e4m3 (dims 0..7 in bytes 0..7 of e) times 2^(s - 127), exact, as 8 bf16: x 2^(s - 7) in one
// multiply while that factor is a bf16 (s <= 134), else x 2^120 then x 2^(s - 127); each product
// is e4m3 times a power of two, exact in bf16 (the quantiser writes s >= 105)
__device__ __forceinline__ uint4 e4m3x8_scaled_bf16x8(uint2 e, unsigned int s) {
    const bool big = s > 134u;
    const unsigned int f = big ? 0x7B80u : (s + 120u) << 7;  // bf16 bits of 2^120, or of 2^(s - 7)
    const unsigned int f2 = f | (f << 16);
    uint4 v = make_uint4(bf16x2_mul(e4m3x2_bf16x2_bits(e.x, 0x9180u), f2), bf16x2_mul(e4m3x2_bf16x2_bits(e.x, 0xB3A2u), f2),
                         bf16x2_mul(e4m3x2_bf16x2_bits(e.y, 0x9180u), f2), bf16x2_mul(e4m3x2_bf16x2_bits(e.y, 0xB3A2u), f2));
    if (big) {  // only for scales above 2^7 (amax above 57344): never on V4's RMS-normalised rows
        const unsigned int g2 = (s << 7) | (s << 23);  // 2^(s - 127)
        v = make_uint4(bf16x2_mul(v.x, g2), bf16x2_mul(v.y, g2), bf16x2_mul(v.z, g2), bf16x2_mul(v.w, g2));
    }
    return v;
}

// FAST_DEQUANT: e4m3x8_scaled_bf16x8 (integer ops and bf16 multiplies) instead of the cvt path
template <bool FAST_DEQUANT>
struct WgFp8Rows {
    static constexpr bool ANY_HEADS = true;  // any H
    static constexpr bool FETCH_UNDER_S = false;  // copies issued before land()'s dequantisation, in flight under it
    static constexpr int SHARED_BYTES = WG_MAT_BYTES + WG_STAGES * FP8_STAGE_BYTES + WG_STAGES * WG_TILE * 4;
    const unsigned char* cache;
    long long page_stride;  // bytes; page offsets are 64-bit
    int page_shift;
    const int* idx_row;
    int n;
    unsigned char* tile_s;  // the bf16 tile (swizzled), then the two raw stages, then the flags
    int idx_next[FP8_PIECES_PER_THREAD];  // thread x copies pieces x + 256 k of the tile's 64 x 36

    __device__ __forceinline__ WgFp8Rows(const unsigned char* cache_, long long page_stride_, int page_shift_,
                                         const int* idx_row_, int n_, unsigned char* smem)
        : cache(cache_), page_stride(page_stride_), page_shift(page_shift_), idx_row(idx_row_), n(n_), tile_s(smem) {}
    __device__ __forceinline__ unsigned char* raw(int buf) { return tile_s + WG_MAT_BYTES + buf * FP8_STAGE_BYTES; }
    __device__ __forceinline__ float* s_part(int buf) { return reinterpret_cast<float*>(raw(buf)); }
    __device__ __forceinline__ int* valid(int buf) {
        return reinterpret_cast<int*>(tile_s + WG_MAT_BYTES + WG_STAGES * FP8_STAGE_BYTES) + buf * WG_TILE;
    }
    __device__ __forceinline__ void load_idx(int tile) {
#pragma unroll
        for (int k = 0; k < FP8_PIECES_PER_THREAD; ++k) {
            const int i = tile * WG_TILE + (threadIdx.x + 256 * k) / FP8_PIECES;
            idx_next[k] = i < n ? idx_row[i] : -1;
        }
    }
    __device__ __forceinline__ void fetch(int tile, int buf) {
        if (tile * WG_TILE < n) {
            unsigned char* dst = raw(buf);
            int* flags = valid(buf);
            const int slot_mask = (1 << page_shift) - 1;
#pragma unroll
            for (int k = 0; k < FP8_PIECES_PER_THREAD; ++k) {
                const int c = threadIdx.x + 256 * k, r = c / FP8_PIECES, piece = c % FP8_PIECES, idx = idx_next[k];
                if (idx >= 0) {
                    const unsigned char* page = cache + (long long)(idx >> page_shift) * page_stride;
                    const int o = idx & slot_mask;
                    // the L2::256B hint, as the bf16 rows: a record is 36 copies of 16 bytes from
                    // different threads, fetched from DRAM in 256-byte requests instead of sectors
                    cp_async16_l2_256(dst + r * FP8_PITCH + piece * 16, page + o * FP8_RECORD + piece * 16);
                    if (piece == 0) cp_async8(dst + r * FP8_PITCH + FP8_RECORD, page + (FP8_RECORD << page_shift) + 8 * o);
                }
                if (piece == 0) flags[r] = idx >= 0;
            }
        }
        cp_async_commit();
    }
    // dequantise the stage into the tile: thread x writes 16-byte piece x % 64 (dims 8 (x % 64) ..
    // +7) of lines x / 64 + 4k, as the bf16 loader copies them
    __device__ __forceinline__ unsigned int land(int buf) {
        const unsigned char* stage = raw(buf);
        const int* flags = valid(buf);
        const int piece = threadIdx.x & 63, line_first = threadIdx.x >> 6;
#pragma unroll 4
        for (int k = 0; k < WG_TILE / 4; ++k) {
            const int r = line_first + 4 * k;
            const unsigned char* rec = stage + r * FP8_PITCH;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);  // a -1 row: zeros, so it adds 0 * 0, never 0 * NaN
            if (flags[r]) {
                if (piece < FP8_NOPE / 8) {  // 8 e4m3 dims; scale of dims 64 i .. 64 i + 63 at byte i
                    const uint2 e = *reinterpret_cast<const uint2*>(rec + piece * 8);
                    const unsigned int s = rec[FP8_RECORD + (piece >> 3)];
                    if (FAST_DEQUANT) {
                        v = e4m3x8_scaled_bf16x8(e, s);
                    } else {
                        // ue8m0 byte s -> 2^(s - 127) as fp32 bits (s = 0 would give 0, not 2^-127:
                        // the quantiser writes s >= 105)
                        const float scale = __int_as_float((int)s << 23);
                        v = make_uint4(e4m3x2_scaled_bf16x2(e.x, scale), e4m3x2_scaled_bf16x2(e.x >> 16, scale),
                                       e4m3x2_scaled_bf16x2(e.y, scale), e4m3x2_scaled_bf16x2(e.y >> 16, scale));
                    }
                } else {  // 8 bf16 RoPE dims, as stored
                    v = *reinterpret_cast<const uint4*>(rec + FP8_NOPE + (piece - FP8_NOPE / 8) * 16);
                }
            }
            *reinterpret_cast<uint4*>(tile_s + swizzled_offset(WG_TILE, r, piece)) = v;
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes, async-proxy reads
        __syncthreads();  // the whole tile; and every thread is done reading the stage (the S partials go there)
        return (unsigned int)__cvta_generic_to_shared(tile_s);
    }
};

// aligned start of dynamic shared memory: 1024 bytes for the swizzle atoms (the swizzle works on
// shared address bits 4..9)
__device__ __forceinline__ unsigned char* wg_smem_base(unsigned char* smem_raw) {
    const unsigned int raw_addr = (unsigned int)__cvta_generic_to_shared(smem_raw);
    return smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u);
}

// O *= alpha by row (o[4 j + c]: the low row for c < 2). 128 multiplies a thread: skipped by a warp
// whose row maxima all stayed (alpha = 1 exactly), the common case once a long list's maximum has been seen
__device__ __forceinline__ void rescale_o(float (&o)[128], float alpha_lo, float alpha_hi) {
    if (__any_sync(0xffffffffu, alpha_lo != 1.f || alpha_hi != 1.f)) {
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            o[4 * j] *= alpha_lo;
            o[4 * j + 1] *= alpha_lo;
            o[4 * j + 2] *= alpha_hi;
            o[4 * j + 3] *= alpha_hi;
        }
    }
}

// The online softmax of one tile of NT x 8 gathered rows, shared by the wgmma and pipe bodies. s[4 nt + c]
// holds this warpgroup's partial S of row 16 wq + g + 8 (c >> 1), column 8 nt + 2 t + (c & 1);
// other[32 (4 nt + c)] the other warpgroup's at the same fragment position. Both warpgroups add the
// two in the same order (low half's first), so both hold identical S and run the same softmax; a
// column whose row flag is 0 becomes -inf. On return s holds P = exp2(S - m) (base 2, m the running
// row max), m and l (running sum) are updated and O is rescaled where a row max moved.
template <int NT>
__device__ __forceinline__ void tile_softmax(float (&s)[4 * NT], const float* other, const int* valid_s, int half,
                                             int t, float scale2, float& m_lo, float& m_hi, float& l_lo, float& l_hi,
                                             float (&o)[128]) {
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const bool v0 = valid_s[nt * 8 + 2 * t], v1 = valid_s[nt * 8 + 2 * t + 1];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const float mine_v = s[4 * nt + c], other_v = other[(4 * nt + c) * 32];
            const float full = half == 0 ? mine_v + other_v : other_v + mine_v;
            s[4 * nt + c] = ((c & 1) ? v1 : v0) ? full * scale2 : -INFINITY;
        }
        mx_lo = fmaxf(mx_lo, fmaxf(s[4 * nt], s[4 * nt + 1]));
        mx_hi = fmaxf(mx_hi, fmaxf(s[4 * nt + 2], s[4 * nt + 3]));
    }
    quad_row_max(mx_lo, mx_hi);
    float alpha_lo, alpha_hi;
    softmax_update<NT>(s, mx_lo, mx_hi, m_lo, m_hi, l_lo, l_hi, alpha_lo, alpha_hi);
    rescale_o(o, alpha_lo, alpha_hi);
}

// The epilogue of the wgmma kernels: this thread's O fragment (rows 16 wq + g (+8) of the CTA's 64
// heads, dims 256 half + 8 j + 2 t (+1) at o[4 j + c]) and its row max (base 2) and sum. SPLIT: the
// output normalised by this split's own sum (fp32) and the split's lse, for the combine kernel;
// else out = O / (l [+ exp(sink - m)]). A row with no valid index: out 0, lse -inf. Rows with
// row_lo / row_hi false (heads past H) are not written.
template <bool HAS_SINK, bool SPLIT>
__device__ __forceinline__ void wg_epilogue(const float* o, float m_lo, float m_hi, float l_lo, float l_hi, bool row_lo,
                                            bool row_hi, const float* sink, unsigned short* out, float* lse,
                                            float* part_out, float* part_lse, int heads) {
    const int b = blockIdx.x, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int half = warp >> 2, wq = warp & 3;
    const int h0 = blockIdx.y * 64 + wq * 16;
    const long long row = (long long)b * heads + h0 + g;  // this thread's low head; high = +8
    if (SPLIT) {
        const long long prow = ((long long)b * gridDim.z + split) * heads + h0 + g;
        const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
        float* p_lo = part_out + prow * DIM + half * 256 + 2 * t;
        float* p_hi = p_lo + 8 * DIM;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            if (row_lo) *reinterpret_cast<float2*>(p_lo + j * 8) = make_float2(o[4 * j] * inv_lo, o[4 * j + 1] * inv_lo);
            if (row_hi) *reinterpret_cast<float2*>(p_hi + j * 8) = make_float2(o[4 * j + 2] * inv_hi, o[4 * j + 3] * inv_hi);
        }
        if (half == 0 && t == 0) {
            if (row_lo) part_lse[prow] = lse_of(l_lo, m_lo);
            if (row_hi) part_lse[prow + 8] = lse_of(l_hi, m_hi);
        }
        return;
    }
    float denom_lo = l_lo > 0.f ? l_lo : 1.f, denom_hi = l_hi > 0.f ? l_hi : 1.f;
    if (HAS_SINK) {
        if (row_lo) denom_lo = sink_denominator(l_lo, m_lo, sink[h0 + g]);
        if (row_hi) denom_hi = sink_denominator(l_hi, m_hi, sink[h0 + g + 8]);
    }
    const float inv_lo = 1.f / denom_lo, inv_hi = 1.f / denom_hi;
    unsigned short* out_lo = out + row * DIM + half * 256 + 2 * t;
    unsigned short* out_hi = out_lo + 8 * DIM;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        if (row_lo) *reinterpret_cast<unsigned int*>(out_lo + j * 8) = pack_bf16(o[4 * j] * inv_lo, o[4 * j + 1] * inv_lo);
        if (row_hi) *reinterpret_cast<unsigned int*>(out_hi + j * 8) = pack_bf16(o[4 * j + 2] * inv_hi, o[4 * j + 3] * inv_hi);
    }
    if (half == 0 && t == 0) {
        if (row_lo) lse[row] = lse_of(l_lo, m_lo);
        if (row_hi) lse[row + 8] = lse_of(l_hi, m_hi);
    }
}

// The kernel body (the comment above dsv4_sparse_attention_wgmma says what it does): Q at `smem`
// (64 swizzled lines), the gathered rows through `rows`; n = this split's indices.
template <bool HAS_SINK, bool SPLIT, class Rows>
__device__ __forceinline__ void wgmma_attention(Rows& rows, unsigned char* smem, const unsigned short* q,
                                                const float* sink, unsigned short* out, float* lse, float* part_out,
                                                float* part_lse, int n, int heads, float sm_scale) {
    unsigned char* q_s = smem;  // [64 heads] swizzled
    const unsigned int q_addr = (unsigned int)__cvta_generic_to_shared(q_s);
    // the combine kernel, launched with PDL, may be scheduled once every CTA of this grid has
    // started; its pdl_wait() holds it until this grid is done
    pdl_launch_dependents();

    const int b = blockIdx.x, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int half = warp >> 2, wq = warp & 3;  // warpgroup; warp within it (rows 16 wq .. +15)
    const int h0 = blockIdx.y * 64 + wq * 16;   // this thread's heads: h0 + g, h0 + g + 8
    // heads past H (only where the loader allows any H): computed, not written
    const bool row_lo = !Rows::ANY_HEADS || h0 + g < heads, row_hi = !Rows::ANY_HEADS || h0 + g + 8 < heads;
    const float scale2 = sm_scale * LOG2E;

    // Q into shared memory (heads past H: zeros); joins the first tile's commit group
    {
        const int piece = threadIdx.x & 63, line_first = threadIdx.x >> 6;  // 64 pieces of 16 bytes a line
        const unsigned char* q_rows = reinterpret_cast<const unsigned char*>(q) + ((long long)b * heads + blockIdx.y * 64) * DIM * 2;
#pragma unroll 4
        for (int r = line_first; r < 64; r += 4) {
            if (!Rows::ANY_HEADS || blockIdx.y * 64 + r < heads) {
                cp_async16(q_s + swizzled_offset(64, r, piece), q_rows + r * DIM * 2 + piece * 16);
            } else {
                *reinterpret_cast<uint4*>(q_s + swizzled_offset(64, r, piece)) = make_uint4(0u, 0u, 0u, 0u);
            }
        }
    }

    float o[128];  // O[rows 16 wq + g (+8), dims half * 256 + 8 j + 2 t (+1)] at o[4 j + c]
#pragma unroll
    for (int j = 0; j < 128; ++j) o[j] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
    const int tiles = (n + WG_TILE - 1) / WG_TILE;
    rows.load_idx(0);
    rows.fetch(0, 0);
    rows.load_idx(1);
    for (int i = 0; i < tiles; ++i) {
        const int buf = i & 1;
        cp_async_wait<0>();  // this thread's copies of tile i (and Q) have landed
        // the copies and zero stores were generic-proxy writes; wgmma reads through the async proxy
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();  // everyone's have; and everyone left tile i - 1, whose buffer is refilled now
        if (!Rows::FETCH_UNDER_S) {
            rows.fetch(i + 1, buf ^ 1);
            rows.load_idx(i + 2);
        }
        const unsigned int tile_addr = rows.land(buf);
        const int* valid_s = rows.valid(buf);
        float* s_part = rows.s_part(buf);

        // S over this warpgroup's 256 dims: chunks 4 half .. 4 half + 3, 4 k-steps of 32 bytes in each
        float s[32];
#pragma unroll
        for (int j = 0; j < 32; ++j) s[j] = 0.f;
#pragma unroll
        for (int j = 0; j < 32; ++j) wg_fence_operand(s[j]);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < 16; ++ks) {
            const unsigned int off = (half * 4 + (ks >> 2)) * WG_CHUNK_BYTES(64) + (ks & 3) * 32;
            wgmma_m64n64k16_ss(s, wg_desc(q_addr + off, 16, 1024), wg_desc(tile_addr + off, 16, 1024));
        }
        wg_commit();
        if (Rows::FETCH_UNDER_S) {  // the copies' issue under the S MMA, off the path to it
            rows.fetch(i + 1, buf ^ 1);
            rows.load_idx(i + 2);
        }
        wg_wait0();
#pragma unroll
        for (int j = 0; j < 32; ++j) wg_fence_operand(s[j]);
        float* mine = s_part + ((half * 4 + wq) * 32) * 32 + lane;
#pragma unroll
        for (int j = 0; j < 32; ++j) mine[j * 32] = s[j];
        __syncthreads();  // partials visible
        const float* other = s_part + (((half ^ 1) * 4 + wq) * 32) * 32 + lane;

        // s[4 nt + c]: row 16 wq + g + 8 (c >> 1), column 8 nt + 2 t + (c & 1)
        tile_softmax<8>(s, other, valid_s, half, t, scale2, m_lo, m_hi, l_lo, l_hi, o);

        // O += P V: k-step ks covers gathered rows 16 ks .. +15 (two 8-line groups, SBO 1 KB);
        // N = dims half * 256 .. +255 (4 chunks, LBO 8 KB)
        unsigned int p[4][4];
        p_fragments(s, p);
#pragma unroll
        for (int j = 0; j < 128; ++j) wg_fence_operand(o[j]);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
            wgmma_m64n256k16_rs(o, p[ks], wg_desc(tile_addr + half * 4 * WG_CHUNK_BYTES(64) + ks * 16 * 128,
                                                  WG_CHUNK_BYTES(64), 1024));
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int j = 0; j < 128; ++j) wg_fence_operand(o[j]);
        // no barrier here: the next tile's top barrier orders these reads of s_part and the tile
        // before anyone rewrites them
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the CTA exits

    wg_epilogue<HAS_SINK, SPLIT>(o, m_lo, m_hi, l_lo, l_hi, row_lo, row_hi, sink, out, lse, part_out, part_lse, heads);
}
#endif

template <bool HAS_SINK, bool SPLIT>
__global__ void __launch_bounds__(256, 1)
    dsv4_sparse_attention_wgmma(const unsigned short* q, const unsigned short* kv, const int* indices, const float* sink,
                                unsigned short* out, float* lse, float* part_out, float* part_lse, int K, int heads,
                                int chunk, float sm_scale) {
#if WG_AVAILABLE
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* smem = wg_smem_base(smem_raw);
    const int k_begin = blockIdx.z * chunk;
    const int n = max(min(K - k_begin, chunk), 0);
    WgBf16Rows rows(kv, indices + (long long)blockIdx.x * K + k_begin, n, smem + WG_MAT_BYTES);
    wgmma_attention<HAS_SINK, SPLIT>(rows, smem, q, sink, out, lse, part_out, part_lse, n, heads, sm_scale);
#else
    __trap();  // the Python side launches it only on sm_90a (Hopper); elsewhere the h64 kernel runs
#endif
}

// sparse_attention_fp8 (SPEC 8): the same kernel over the FP8 cache (kv_cache [pages, page_stride]
// bytes, page_size = 1 << page_shift), dequantised in shared memory by WgFp8Rows.
template <bool HAS_SINK, bool SPLIT, bool FAST_DEQUANT>
__global__ void __launch_bounds__(256, 1)
    dsv4_sparse_attention_fp8_wgmma(const unsigned short* q, const unsigned char* kv_cache, const int* indices,
                                    const float* sink, unsigned short* out, float* lse, float* part_out, float* part_lse,
                                    int K, int heads, int chunk, float sm_scale, int page_shift, long long page_stride) {
#if WG_AVAILABLE
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* smem = wg_smem_base(smem_raw);
    const int k_begin = blockIdx.z * chunk;
    const int n = max(min(K - k_begin, chunk), 0);
    WgFp8Rows<FAST_DEQUANT> rows(kv_cache, page_stride, page_shift, indices + (long long)blockIdx.x * K + k_begin, n,
                   smem + WG_MAT_BYTES);
    wgmma_attention<HAS_SINK, SPLIT>(rows, smem, q, sink, out, lse, part_out, part_lse, n, heads, sm_scale);
#else
    __trap();  // the Python side launches it only on sm_90a (Hopper)
#endif
}


// ---------------------------------------------------------------------------------------------
// The "pipe" kernels (sm_90a): 32-row tiles, so more of them fit in shared memory beside Q (64 KB)
// and the S partials (16 KB), and more gathered rows are in flight while the tensor cores work.
// The wgmma kernel has one 64-row tile in flight during a tile's math (bf16: 2 stages of 64 KB;
// FP8: dequantised between copy and MMAs, one bf16 tile). Here:
// - bf16 (PipeBf16Rows): 4 stages of 32 rows (214,528 bytes): tiles i + 1 .. i + 3 (96 rows) are in
//   flight while tile i is multiplied;
// - FP8 (PipeFp8Rows): two bf16 tiles and 4 raw stages of 32 records (225,024 bytes): raw tiles
//   i + 1 .. i + 4 in flight, and raw tile i + 1 is dequantised into the other bf16 tile while the
//   tensor cores multiply tile i (rows 0..15 under the S wgmma, rows 16..31 under the P V wgmma),
//   so the conversion leaves the critical path.
// Per tile i (two warpgroups, 64 heads, O split by dims as in the wgmma kernel):
//   rows.top(i): wait for the copies the tile needs, barrier (tile i whole; tile i - 1 finished by
//     everyone)
//   S = Q K^T (wgmma m64n32k16 x 16 a warpgroup, async); meanwhile rows.refill(i) issues the next
//     copies into the stage tile i - 1 (bf16) or tile i (FP8 raw) left, and rows.overlap(i, 0)
//   partial S exchange, online softmax (O rescaled only by warps whose row maxima moved)
//   O += P V (wgmma m64n256k16 x 2, P from registers, async); rows.overlap(i, 1)
// A loader owns the shared memory after Q and provides start, top, refill, flags (the tile's row
// flags, valid until the next top), overlap, s_part (16 KB), finish (after the loop: its own
// asynchronous work done) and ANY_HEADS as the wgmma loaders do.
static_assert(PIPE_TILE == 32 && PIPE_BF16_STAGES == 4 && PIPE_RAW_STAGES == 4 && FP8_LATE_RAW_STAGES == 3,
              "pipe: S is wgmma m64n32, 2 k-steps of P V a tile; the stage counts fill Hopper's 227 KB");
#define PIPE_BF16_BYTES (PIPE_TILE * DIM * 2)                          // 32 KB, chunks of 32 lines (4 KB)
#define PIPE_SPART_BYTES (2 * 4 * 16 * 32 * 4)                         // [2 halves][4 warps][16][32 lanes] fp32
#define PIPE_RAW_BYTES (PIPE_TILE * FP8_PITCH)                         // 18,944
#define PIPE_PIECES_PER_THREAD ((PIPE_TILE * FP8_PIECES + 255) / 256)  // 5 (the last for threads < 128)
#define BF16_PIPE_SHARED_BYTES (1024 + WG_MAT_BYTES + PIPE_BF16_STAGES * PIPE_BF16_BYTES + PIPE_SPART_BYTES + PIPE_BF16_STAGES * PIPE_TILE * 4)
#define FP8_PIPE_SHARED_BYTES \
    (1024 + WG_MAT_BYTES + 2 * PIPE_BF16_BYTES + PIPE_RAW_STAGES * PIPE_RAW_BYTES + PIPE_SPART_BYTES + PIPE_RAW_STAGES * PIPE_TILE * 4 + 2 * PIPE_TILE * 4)

// LATE_PV bodies: the two warpgroups' P blocks (64 lines of 128 bytes each) after the loader's
// region, 1024-aligned for the swizzle; the bf16 pipe and pair loaders both fit in LATE_SHARED_BYTES
#define LATE_P_AT(loader_bytes) (((loader_bytes) + 1023) / 1024 * 1024)
#define LATE_SHARED_BYTES (1024 + WG_MAT_BYTES + LATE_P_AT(PIPE_BF16_STAGES * PIPE_BF16_BYTES + PIPE_SPART_BYTES + 1024) + 2 * 64 * 128)
// the FP8 pipe with FP8_LATE_RAW_STAGES (3) raw stages instead of 4 (one 18,944-byte stage makes room for
// the P blocks)
#define FP8_LATE_SHARED_BYTES \
    (1024 + WG_MAT_BYTES + LATE_P_AT(2 * PIPE_BF16_BYTES + FP8_LATE_RAW_STAGES * PIPE_RAW_BYTES + PIPE_SPART_BYTES + FP8_LATE_RAW_STAGES * PIPE_TILE * 4 + 2 * PIPE_TILE * 4) + 2 * 64 * 128)

#if WG_AVAILABLE
struct PipeBf16Rows {  // bf16 rows of 1 KB, copied straight into 4 swizzled 32-row stages
    static constexpr bool ANY_HEADS = false;  // launched for whole 64-head blocks only
    static constexpr int SHARED_BYTES = PIPE_BF16_STAGES * PIPE_BF16_BYTES + PIPE_SPART_BYTES + PIPE_BF16_STAGES * PIPE_TILE * 4;
    const unsigned char* kv;
    const int* idx_row;
    int n, tiles;
    unsigned char* stages;  // [4][32 lines] swizzled, then the S partials, then the flags [4][32]
    int piece, line_first;  // thread x copies piece x % 64 of lines x / 64 + 4 k (k < 8)
    int idx_next[PIPE_TILE / 4];

    __device__ __forceinline__ PipeBf16Rows(const unsigned short* kv_, const int* idx_row_, int n_, unsigned char* smem)
        : kv(reinterpret_cast<const unsigned char*>(kv_)), idx_row(idx_row_), n(n_),
          tiles((n_ + PIPE_TILE - 1) / PIPE_TILE), stages(smem), piece(threadIdx.x & 63), line_first(threadIdx.x >> 6) {}
    __device__ __forceinline__ float* s_part() { return reinterpret_cast<float*>(stages + PIPE_BF16_STAGES * PIPE_BF16_BYTES); }
    __device__ __forceinline__ int* flags(int tile) {
        return reinterpret_cast<int*>(stages + PIPE_BF16_STAGES * PIPE_BF16_BYTES + PIPE_SPART_BYTES) + (tile % PIPE_BF16_STAGES) * PIPE_TILE;
    }
    __device__ __forceinline__ void load_idx(int tile, int (&ids)[PIPE_TILE / 4]) {
#pragma unroll
        for (int k = 0; k < PIPE_TILE / 4; ++k) {
            const int i = tile * PIPE_TILE + line_first + 4 * k;
            ids[k] = i < n ? idx_row[i] : -1;
        }
    }
    __device__ __forceinline__ void fetch(int tile, const int (&ids)[PIPE_TILE / 4]) {  // one commit group a call, empty past the end
        if (tile < tiles) {
            unsigned char* dst = stages + (tile % PIPE_BF16_STAGES) * PIPE_BF16_BYTES;
            int* f = flags(tile);
#pragma unroll
            for (int k = 0; k < PIPE_TILE / 4; ++k) {
                const int r = line_first + 4 * k, idx = ids[k];
                if (idx >= 0) {
                    cp_async16_l2_256(dst + swizzled_offset(PIPE_TILE, r, piece), kv + (long long)idx * DIM * 2 + piece * 16);
                } else {  // zeros, so a masked row adds 0 * 0, never 0 * NaN
                    *reinterpret_cast<uint4*>(dst + swizzled_offset(PIPE_TILE, r, piece)) = make_uint4(0u, 0u, 0u, 0u);
                }
                if (piece == 0) f[r] = idx >= 0;
            }
        }
        cp_async_commit();
    }
    __device__ __forceinline__ void start() {  // tiles 0 .. 2 (Q joins tile 0's group)
        // every index load first, then the copies: one index-load latency before the first copy
        // instead of one a tile (each fetch waits for its indices)
        int first[PIPE_BF16_STAGES - 1][PIPE_TILE / 4];
#pragma unroll
        for (int j = 0; j < PIPE_BF16_STAGES - 1; ++j) load_idx(j, first[j]);
        load_idx(PIPE_BF16_STAGES - 1, idx_next);
#pragma unroll
        for (int j = 0; j < PIPE_BF16_STAGES - 1; ++j) fetch(j, first[j]);
    }
    __device__ __forceinline__ unsigned int top(int i) {
        cp_async_wait<PIPE_BF16_STAGES - 2>();  // this thread's copies of tile i (and Q) have landed
        // the copies and zero stores were generic-proxy writes; wgmma reads through the async proxy
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();  // everyone's; and everyone left tile i - 1, whose stage refill() refills
        return (unsigned int)__cvta_generic_to_shared(stages) + (i % PIPE_BF16_STAGES) * PIPE_BF16_BYTES;
    }
    __device__ __forceinline__ void refill(int i) {
        fetch(i + PIPE_BF16_STAGES - 1, idx_next);
        load_idx(i + PIPE_BF16_STAGES, idx_next);
    }
    __device__ __forceinline__ void overlap(int, int) {}
    __device__ __forceinline__ void finish() {}
};

// The fetch of the pipe and pair FP8 loaders (WgFp8Rows copies the same way inline): thread x copies
// pieces x + 256 k of ROWS records of the loader's raw tile `tile` into rows of FP8_PITCH bytes, with
// piece 0 a record's 8 scale bytes and the row's flag (a -1 loads nothing, flag 0). It reads the
// loader's members where its fetch did: passing them as arguments changed the kernels' SASS.
template <int ROWS, class Loader, int PIECES_PER_THREAD>
__device__ __forceinline__ void fp8_fetch_records(Loader& rows, int tile, const int (&ids)[PIECES_PER_THREAD]) {
    unsigned char* dst = rows.raw(tile);
    int* f = rows.raw_flags(tile);
    const int slot_mask = (1 << rows.page_shift) - 1;
#pragma unroll
    for (int k = 0; k < PIECES_PER_THREAD; ++k) {
        const int c = threadIdx.x + 256 * k, r = c / FP8_PIECES, pc = c % FP8_PIECES, idx = ids[k];
        if (c < ROWS * FP8_PIECES) {
            if (idx >= 0) {
                const unsigned char* page = rows.cache + (long long)(idx >> rows.page_shift) * rows.page_stride;
                const int o = idx & slot_mask;
                cp_async16_l2_256(dst + r * FP8_PITCH + pc * 16, page + o * FP8_RECORD + pc * 16);  // as WgFp8Rows
                if (pc == 0) cp_async8(dst + r * FP8_PITCH + FP8_RECORD, page + (FP8_RECORD << rows.page_shift) + 8 * o);
            }
            if (pc == 0) f[r] = idx >= 0;
        }
    }
}

// FP8 records (SPEC 8) as WgFp8Rows reads them, staged raw in 4 stages of 32 and dequantised
// (e4m3x8_scaled_bf16x8) into two bf16 tiles, one tile ahead of the math. Row flags: the raw
// stage's are written with the copies and carried to the bf16 tile's by the dequantisation (the
// raw stage is refilled before tile i's softmax reads its flags).
template <int RAW_STAGES>  // PIPE_RAW_STAGES; FP8_LATE_RAW_STAGES in the LATE_PV kernel, whose P blocks need the room
struct PipeFp8RowsT {
    static constexpr bool ANY_HEADS = true;
    static constexpr int SHARED_BYTES = 2 * PIPE_BF16_BYTES + RAW_STAGES * PIPE_RAW_BYTES + PIPE_SPART_BYTES +
                                        RAW_STAGES * PIPE_TILE * 4 + 2 * PIPE_TILE * 4;
    const unsigned char* cache;
    long long page_stride;  // bytes; page offsets are 64-bit
    int page_shift;
    const int* idx_row;
    int n, tiles;
    unsigned char* bf16_s;  // [2][32 lines] swizzled, [4][32 rows of FP8_PITCH] raw, S partials, raw flags [4][32], tile flags [2][32]
    int piece, line_first;  // dequantisation: piece x % 64 of lines x / 64 + 4 k
    int idx_next[PIPE_PIECES_PER_THREAD];  // thread x copies pieces x + 256 k of the tile's 32 x 36

    __device__ __forceinline__ PipeFp8RowsT(const unsigned char* cache_, long long page_stride_, int page_shift_,
                                           const int* idx_row_, int n_, unsigned char* smem)
        : cache(cache_), page_stride(page_stride_), page_shift(page_shift_), idx_row(idx_row_), n(n_),
          tiles((n_ + PIPE_TILE - 1) / PIPE_TILE), bf16_s(smem), piece(threadIdx.x & 63), line_first(threadIdx.x >> 6) {}
    __device__ __forceinline__ unsigned char* raw(int tile) { return bf16_s + 2 * PIPE_BF16_BYTES + (tile % RAW_STAGES) * PIPE_RAW_BYTES; }
    __device__ __forceinline__ float* s_part() { return reinterpret_cast<float*>(bf16_s + 2 * PIPE_BF16_BYTES + RAW_STAGES * PIPE_RAW_BYTES); }
    __device__ __forceinline__ int* raw_flags(int tile) {
        return reinterpret_cast<int*>(bf16_s + 2 * PIPE_BF16_BYTES + RAW_STAGES * PIPE_RAW_BYTES + PIPE_SPART_BYTES) + (tile % RAW_STAGES) * PIPE_TILE;
    }
    __device__ __forceinline__ int* flags(int tile) {  // the bf16 tile's
        return reinterpret_cast<int*>(bf16_s + 2 * PIPE_BF16_BYTES + RAW_STAGES * PIPE_RAW_BYTES + PIPE_SPART_BYTES) + RAW_STAGES * PIPE_TILE + (tile & 1) * PIPE_TILE;
    }
    __device__ __forceinline__ void load_idx(int tile, int (&ids)[PIPE_PIECES_PER_THREAD]) {
#pragma unroll
        for (int k = 0; k < PIPE_PIECES_PER_THREAD; ++k) {
            const int c = threadIdx.x + 256 * k, i = tile * PIPE_TILE + c / FP8_PIECES;
            ids[k] = c < PIPE_TILE * FP8_PIECES && i < n ? idx_row[i] : -1;
        }
    }
    __device__ __forceinline__ void fetch(int tile, const int (&ids)[PIPE_PIECES_PER_THREAD]) {  // one commit group a call, empty past the end
        if (tile < tiles) fp8_fetch_records<PIPE_TILE>(*this, tile, ids);
        cp_async_commit();
    }
    // rows 16 part .. +15 of raw tile `tile` -> its bf16 tile (dims 8 piece .. +7 of lines line_first + 4 k)
    __device__ __forceinline__ void dequant(int tile, int part) {
        const unsigned char* stage = raw(tile);
        const int* rf = raw_flags(tile);
        int* tf = flags(tile);
        unsigned char* dst = bf16_s + (tile & 1) * PIPE_BF16_BYTES;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int r = part * 16 + line_first + 4 * k;
            const unsigned char* rec = stage + r * FP8_PITCH;
            const int valid = rf[r];
            uint4 v = make_uint4(0u, 0u, 0u, 0u);  // a -1 row: zeros, so it adds 0 * 0, never 0 * NaN
            if (valid) {
                if (piece < FP8_NOPE / 8) {  // 8 e4m3 dims; scale of dims 64 i .. 64 i + 63 at byte i
                    v = e4m3x8_scaled_bf16x8(*reinterpret_cast<const uint2*>(rec + piece * 8), rec[FP8_RECORD + (piece >> 3)]);
                } else {  // 8 bf16 RoPE dims, as stored
                    v = *reinterpret_cast<const uint4*>(rec + FP8_NOPE + (piece - FP8_NOPE / 8) * 16);
                }
            }
            *reinterpret_cast<uint4*>(dst + swizzled_offset(PIPE_TILE, r, piece)) = v;
            if (piece == 0) tf[r] = valid;
        }
    }
    __device__ __forceinline__ void start() {  // raw tiles 0 .. 3 (Q joins tile 0's group), then tile 0 dequantised
        int first[RAW_STAGES][PIPE_PIECES_PER_THREAD];  // as PipeBf16Rows::start: index loads first
#pragma unroll
        for (int j = 0; j < RAW_STAGES; ++j) load_idx(j, first[j]);
        load_idx(RAW_STAGES, idx_next);
#pragma unroll
        for (int j = 0; j < RAW_STAGES; ++j) fetch(j, first[j]);
        if (tiles > 0) {
            cp_async_wait<RAW_STAGES - 1>();  // this thread's copies of raw tile 0 and Q
            __syncthreads();                        // everyone's
            dequant(0, 0);
            dequant(0, 1);
        }
    }
    __device__ __forceinline__ unsigned int top(int i) {
        cp_async_wait<RAW_STAGES - 2>();  // this thread's copies of raw tile i + 1 have landed
        // the dequantised tile and Q were generic-proxy writes; wgmma reads through the async proxy
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();  // bf16 tile i whole, raw tile i + 1 landed; tile i - 1 finished by everyone
        return (unsigned int)__cvta_generic_to_shared(bf16_s) + (i & 1) * PIPE_BF16_BYTES;
    }
    __device__ __forceinline__ void refill(int i) {
        fetch(i + RAW_STAGES, idx_next);  // into the stage tile i left (dequantised during tile i - 1)
        load_idx(i + RAW_STAGES + 1, idx_next);
    }
    __device__ __forceinline__ void overlap(int i, int part) {  // while the tensor cores work on tile i
        if (i + 1 < tiles) dequant(i + 1, part);
    }
    __device__ __forceinline__ void finish() {}
};
// the launches' sizes (the Python side passes these) are the loaders' regions after the slack and Q
static_assert(1024 + WG_MAT_BYTES + PipeBf16Rows::SHARED_BYTES == BF16_PIPE_SHARED_BYTES, "bf16 pipe layout");
using PipeFp8Rows = PipeFp8RowsT<PIPE_RAW_STAGES>;
static_assert(1024 + WG_MAT_BYTES + PipeFp8Rows::SHARED_BYTES == FP8_PIPE_SHARED_BYTES, "FP8 pipe layout");
static_assert(1024 + WG_MAT_BYTES + LATE_P_AT(PipeFp8RowsT<FP8_LATE_RAW_STAGES>::SHARED_BYTES) + 2 * 64 * 128 == FP8_LATE_SHARED_BYTES,
              "FP8 LATE_PV pipe layout");

// The pipe kernels' body: Q at `smem` (64 swizzled lines), the rows through `rows`; n = this
// split's indices.
// LATE_PV (pipe and bf16 pair loaders): P V(i) is left running while the loader's refill and overlap work, the
// next top (copy wait, barrier) and the next S are issued; the wait for S(i + 1) (wgmma groups
// complete in order) covers it, so the barrier after the S exchange is where every thread is done
// with tile i, and refill(i) / overlap(i, *) run after P V(i) is issued, relying only on every
// thread being done with tile i - 1. P goes to shared memory (LATE_P_BYTES after the loader's
// region, K-major 128-byte swizzle as in wgmma2) for a P V with both operands there: P in
// registers would have to stay untouched until P V(i) is done, and ptxas then waits for P V(i)
// before the next S, which reuses those registers. Without LATE_PV, P V(i) is waited for before
// the next top (the first release's order).
template <bool HAS_SINK, bool SPLIT, bool LATE_PV, class Rows>
__device__ __forceinline__ void pipe_attention(Rows& rows, unsigned char* smem, const unsigned short* q,
                                               const float* sink, unsigned short* out, float* lse, float* part_out,
                                               float* part_lse, int n, int heads, float sm_scale) {
    unsigned char* q_s = smem;  // [64 heads] swizzled
    const unsigned int q_addr = (unsigned int)__cvta_generic_to_shared(q_s);
    pdl_launch_dependents();  // as in wgmma_attention: the combine kernel's launch overlaps this grid
    const int b = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int half = warp >> 2, wq = warp & 3;  // warpgroup; warp within it (rows 16 wq .. +15)
    const int h0 = blockIdx.y * 64 + wq * 16;   // this thread's heads: h0 + g, h0 + g + 8
    // heads past H (only where the loader allows any H): computed, not written
    const bool row_lo = !Rows::ANY_HEADS || h0 + g < heads, row_hi = !Rows::ANY_HEADS || h0 + g + 8 < heads;
    const float scale2 = sm_scale * LOG2E;

    // Q into shared memory (heads past H: zeros); joins tile 0's commit group
    {
        const int piece = threadIdx.x & 63, line_first = threadIdx.x >> 6;
        const unsigned char* q_rows = reinterpret_cast<const unsigned char*>(q) + ((long long)b * heads + blockIdx.y * 64) * DIM * 2;
#pragma unroll 4
        for (int r = line_first; r < 64; r += 4) {
            if (!Rows::ANY_HEADS || blockIdx.y * 64 + r < heads) {
                cp_async16(q_s + swizzled_offset(64, r, piece), q_rows + r * DIM * 2 + piece * 16);
            } else {
                *reinterpret_cast<uint4*>(q_s + swizzled_offset(64, r, piece)) = make_uint4(0u, 0u, 0u, 0u);
            }
        }
    }

    float o[128];  // O[rows 16 wq + g (+8), dims half * 256 + 8 j + 2 t (+1)] at o[4 j + c]
#pragma unroll
    for (int j = 0; j < 128; ++j) o[j] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
    const int tiles = (n + PIPE_TILE - 1) / PIPE_TILE;
    float* s_part = rows.s_part();
    float* mine = s_part + ((half * 4 + wq) * 16) * 32 + lane;
    const float* other = s_part + (((half ^ 1) * 4 + wq) * 16) * 32 + lane;
    // LATE_PV: this warpgroup's P block [64 heads x 32 rows] bf16, in lines of 128 bytes
    unsigned char* p_s = smem + WG_MAT_BYTES + LATE_P_AT(Rows::SHARED_BYTES) + half * 64 * 128;
    static_assert(!LATE_PV || 1024 + WG_MAT_BYTES + LATE_P_AT(Rows::SHARED_BYTES) + 2 * 64 * 128 <= LATE_SHARED_BYTES,
                  "the LATE_PV P blocks past the launch's shared memory");
    rows.start();
#pragma unroll 1
    for (int i = 0; i < tiles; ++i) {
        const unsigned int tile_addr = rows.top(i);
        const int* valid_s = rows.flags(i);

        // S over this warpgroup's 256 dims: chunks 4 half .. 4 half + 3, 4 k-steps of 32 bytes in each
        float s[16];
        if (!LATE_PV) {
#pragma unroll
            for (int j = 0; j < 16; ++j) s[j] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < 16; ++j) wg_fence_operand(s[j]);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < 16; ++ks) {
            const unsigned int chunk_k = half * 4 + (ks >> 2), off = (ks & 3) * 32;
            const unsigned long long a = wg_desc(q_addr + chunk_k * WG_CHUNK_BYTES(64) + off, 16, 1024);
            const unsigned long long b = wg_desc(tile_addr + chunk_k * WG_CHUNK_BYTES(PIPE_TILE) + off, 16, 1024);
            if (LATE_PV) {
                wgmma_m64n32k16_ss_set(s, a, b, ks > 0);  // the first k-step overwrites s
            } else {
                wgmma_m64n32k16_ss(s, a, b);
            }
        }
        wg_commit();
        if (!LATE_PV) {
            // while the tensor cores compute S: the next copies (their issue off the path to the
            // MMAs), then the loader's overlapped work
            rows.refill(i);
            rows.overlap(i, 0);
        }
        wg_wait0();  // S(i); LATE_PV: and P V(i - 1), issued before it
#pragma unroll
        for (int j = 0; j < 16; ++j) wg_fence_operand(s[j]);
        if (LATE_PV) {
#pragma unroll
            for (int j = 0; j < 128; ++j) wg_fence_operand(o[j]);
        }
#pragma unroll
        for (int j = 0; j < 16; ++j) mine[j * 32] = s[j];
        __syncthreads();  // partials visible; LATE_PV: every thread's P V(i - 1) is done

        // s[4 nt + c]: row 16 wq + g + 8 (c >> 1), column 8 nt + 2 t + (c & 1) of the tile
        tile_softmax<4>(s, other, valid_s, half, t, scale2, m_lo, m_hi, l_lo, l_hi, o);

        // O += P V: k-step ks covers tile rows 16 ks .. +15 (two 8-line groups, SBO 1 KB);
        // N = dims half * 256 .. +255 (4 chunks, LBO 4 KB)
        if (LATE_PV) {
            // P (row r, column k) at r * 128 + ((k / 8) ^ (r & 7)) * 16 + (k & 7) * 2: this thread's
            // rows 16 wq + g (+8), columns 8 nt + 2 t (+1). The P block of tile i - 1 is free:
            // every thread's P V(i - 1) was done at the exchange barrier above
            const int r_lo = wq * 16 + g;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                *reinterpret_cast<unsigned int*>(p_s + r_lo * 128 + ((nt ^ g) << 4) + 4 * t) = pack_bf16(s[4 * nt], s[4 * nt + 1]);
                *reinterpret_cast<unsigned int*>(p_s + (r_lo + 8) * 128 + ((nt ^ g) << 4) + 4 * t) =
                    pack_bf16(s[4 * nt + 2], s[4 * nt + 3]);
            }
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes, async-proxy reads
            wg_bar_sync(1 + half);  // the warpgroup's whole P block
#pragma unroll
            for (int j = 0; j < 128; ++j) wg_fence_operand(o[j]);
            wg_fence();
            const unsigned int p_addr = (unsigned int)__cvta_generic_to_shared(p_s);
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
                wgmma_m64n256k16_ss(o, wg_desc(p_addr + ks * 32, 16, 1024),
                                    wg_desc(tile_addr + half * 4 * WG_CHUNK_BYTES(PIPE_TILE) + ks * 16 * 128,
                                            WG_CHUNK_BYTES(PIPE_TILE), 1024));
            wg_commit();
            // under P V(i), which stays in flight into the next tile
            rows.refill(i);
            rows.overlap(i, 0);
            rows.overlap(i, 1);
        } else {
            unsigned int p[2][4];
            p_fragments(s, p);
#pragma unroll
            for (int j = 0; j < 128; ++j) wg_fence_operand(o[j]);
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
                wgmma_m64n256k16_rs(o, p[ks], wg_desc(tile_addr + half * 4 * WG_CHUNK_BYTES(PIPE_TILE) + ks * 16 * 128,
                                                      WG_CHUNK_BYTES(PIPE_TILE), 1024));
            wg_commit();
            rows.overlap(i, 1);  // while the tensor cores compute P V
            wg_wait0();
#pragma unroll
            for (int j = 0; j < 128; ++j) wg_fence_operand(o[j]);
        }
        // no barrier here: the next top barrier orders these reads of s_part, the flags and the
        // tile before anyone rewrites them (LATE_PV: the tile's and the P block's, the exchange
        // barrier of the next tile)
    }
    // LATE_PV: the last P V. Only on the path through the loop: where a path with no tile joins one
    // with a wgmma in flight, or where the wait is conditional inside the loop, ptxas waits for
    // (or serialises) every wgmma
    if (LATE_PV && tiles > 0) {
        wg_wait0();
#pragma unroll
        for (int j = 0; j < 128; ++j) wg_fence_operand(o[j]);
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the CTA exits
    rows.finish();  // the loader's own copies (the pair loaders' copies to the peer CTA) likewise
    wg_epilogue<HAS_SINK, SPLIT>(o, m_lo, m_hi, l_lo, l_hi, row_lo, row_hi, sink, out, lse, part_out, part_lse, heads);
}
#endif

// LATE_PV: see pipe_attention (LATE_SHARED_BYTES of dynamic shared memory instead of BF16_PIPE_SHARED_BYTES)
template <bool HAS_SINK, bool SPLIT, bool LATE_PV = false>
__global__ void __launch_bounds__(256, 1)
    dsv4_sparse_attention_pipe(const unsigned short* q, const unsigned short* kv, const int* indices, const float* sink,
                               unsigned short* out, float* lse, float* part_out, float* part_lse, int K, int heads,
                               int chunk, float sm_scale) {
#if WG_AVAILABLE
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* smem = wg_smem_base(smem_raw);
    const int k_begin = blockIdx.z * chunk;
    const int n = max(min(K - k_begin, chunk), 0);
    PipeBf16Rows rows(kv, indices + (long long)blockIdx.x * K + k_begin, n, smem + WG_MAT_BYTES);
    pipe_attention<HAS_SINK, SPLIT, LATE_PV>(rows, smem, q, sink, out, lse, part_out, part_lse, n, heads, sm_scale);
#else
    __trap();  // the Python side launches it only on sm_90a (Hopper); elsewhere the h64 kernel runs
#endif
}

// LATE_PV: see pipe_attention (FP8_LATE_RAW_STAGES raw stages, FP8_LATE_SHARED_BYTES of dynamic shared memory)
template <bool HAS_SINK, bool SPLIT, bool LATE_PV = false>
__global__ void __launch_bounds__(256, 1)
    dsv4_sparse_attention_fp8_pipe(const unsigned short* q, const unsigned char* kv_cache, const int* indices,
                                   const float* sink, unsigned short* out, float* lse, float* part_out, float* part_lse,
                                   int K, int heads, int chunk, float sm_scale, int page_shift, long long page_stride) {
#if WG_AVAILABLE
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* smem = wg_smem_base(smem_raw);
    const int k_begin = blockIdx.z * chunk;
    const int n = max(min(K - k_begin, chunk), 0);
    PipeFp8RowsT<LATE_PV ? FP8_LATE_RAW_STAGES : PIPE_RAW_STAGES> rows(
        kv_cache, page_stride, page_shift, indices + (long long)blockIdx.x * K + k_begin, n, smem + WG_MAT_BYTES);
    pipe_attention<HAS_SINK, SPLIT, LATE_PV>(rows, smem, q, sink, out, lse, part_out, part_lse, n, heads, sm_scale);
#else
    __trap();  // the Python side launches it only on sm_90a (Hopper)
#endif
}


// ---------------------------------------------------------------------------------------------
// The "pair" kernels (sm_90a, H a multiple of 128): the pipe kernels' body with the two 64-head
// blocks of a query row as one cluster of 2 CTAs that share each gathered tile. At H 128 the pipe
// kernels gather every row twice (once a head block) and, for FP8, dequantise it twice; here CTA
// `rank` of the pair gathers (and dequantises) only rows 16 rank .. 16 rank + 15 of each 32-row
// tile into its own copy of the tile, then one thread sends them to the same place in the peer's
// shared memory with the bulk-copy engine (cp.async.bulk shared::cta -> shared::cluster, 8 chunks
// of 2 KB and the 64 bytes of row flags), completing on the peer's mbarrier of that buffer. The
// peer waits on that mbarrier before its S of the tile. No cluster barrier in the loop.
// Ordering (tile j, buffer j % BUFS): a CTA sends tile j + 1 at its top(j), after its barrier (its
// half of tile j + 1 is complete and was fenced for the async proxy) and after its wait for the
// peer's half of tile j. That wait means the peer sent tile j at its top(j - 1), after its own
// barrier there, so the peer has finished tile j - 2 and every older one: a buffer of BUFS >= 3
// is free in the peer when its next tile arrives. The sender waits for its bulk reads of a buffer
// (cp.async.bulk.wait_group.read) before its threads rewrite that buffer.
// - bf16 (PairBf16Rows): own rows cp.async'd straight into 4 swizzled 32-row buffers (tiles i + 2,
//   i + 3 in flight, tile i + 1 landed and sent, while tile i is multiplied).
// - FP8 (PairFp8Rows): own records staged raw in 5 stages of 16, dequantised two tiles ahead of the
//   math into 3 bf16 buffers (the tile sent at top(i) was dequantised during tile i - 1).
#if __CUDA_ARCH__ >= 900
#define PAIR_CLUSTER_DIMS __cluster_dims__(1, 2, 1)
#else  // earlier GPUs compile the pair kernels as traps; the host launches them on sm_90a only
#define PAIR_CLUSTER_DIMS
#endif
#define PAIR_ROWS (PIPE_TILE / 2)                                        // a CTA's rows of a tile: 16
#define PAIR_TX (8 * PAIR_ROWS * 128 + PAIR_ROWS * 4)                  // bytes sent a tile: 16,448
static_assert(PAIR_BF16_BUFS == 4 && PAIR_FP8_BUFS == 3 && PAIR_RAW_STAGES == 5, "pair: a buffer is free in the "
              "peer when its next tile arrives for BUFS >= 3; the counts fill Hopper's 227 KB");
#define PAIR_RAW_BYTES (PAIR_ROWS * FP8_PITCH)                           // 9,472
#define PAIR_FP8_PIECES_PER_THREAD ((PAIR_ROWS * FP8_PIECES + 255) / 256)  // 3 (the last for threads < 64)
// alignment slack, Q, the buffers, the S partials, the flags [BUFS][32], the mbarriers [BUFS]
#define BF16_PAIR_SHARED_BYTES \
    (1024 + WG_MAT_BYTES + PAIR_BF16_BUFS * PIPE_BF16_BYTES + PIPE_SPART_BYTES + PAIR_BF16_BUFS * PIPE_TILE * 4 + PAIR_BF16_BUFS * 8)
// alignment slack, Q, the bf16 buffers, the raw stages, the S partials, the raw flags [5][16], the
// tile flags [3][32], the mbarriers [3]
#define FP8_PAIR_SHARED_BYTES                                                                                  \
    (1024 + WG_MAT_BYTES + PAIR_FP8_BUFS * PIPE_BF16_BYTES + PAIR_RAW_STAGES * PAIR_RAW_BYTES + PIPE_SPART_BYTES + \
     PAIR_RAW_STAGES * PAIR_ROWS * 4 + PAIR_FP8_BUFS * PIPE_TILE * 4 + PAIR_FP8_BUFS * 8)

#if WG_AVAILABLE
__device__ __forceinline__ unsigned int cluster_rank() {
    unsigned int r;
    asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
// the shared::cluster address of shared::cta address `addr` in CTA `rank` of the cluster
__device__ __forceinline__ unsigned int cluster_map(unsigned int addr, unsigned int rank) {
    unsigned int r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ void cluster_sync_all() {  // every thread of both CTAs; release / acquire
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_init(unsigned int bar, unsigned int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// the initialisations visible to the cluster's async proxy (the peer's bulk copies complete on them)
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned int bar, unsigned int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned int bar, unsigned int parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// `bytes` from this CTA's shared memory at `src` to `dst` (shared::cluster: the peer's), completing
// `bytes` of transactions on the mbarrier at `bar` (shared::cluster, in the destination CTA)
__device__ __forceinline__ void bulk_copy_to_cluster(unsigned int dst, unsigned int src, unsigned int bytes, unsigned int bar) {
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "r"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// every bulk copy but the newest N has finished reading its source
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"); }

// The pair loaders' link to the peer CTA: the buffers' mbarriers and the send of a tile's own half.
// `buffers`: the swizzled 32-line bf16 buffers; `flags`: their row flags [BUFS][32]; `bars`: BUFS
// mbarriers, one phase a tile.
template <int BUFS>
struct PairLink {
    unsigned int rank, peer;           // this CTA's rank in the pair, the peer's
    unsigned int buffers, flags, bars;  // shared::cta addresses

    __device__ __forceinline__ PairLink(unsigned char* buffers_, int* flags_, unsigned long long* bars_)
        : rank(cluster_rank()), peer(cluster_rank() ^ 1u), buffers((unsigned int)__cvta_generic_to_shared(buffers_)),
          flags((unsigned int)__cvta_generic_to_shared(flags_)), bars((unsigned int)__cvta_generic_to_shared(bars_)) {}
    __device__ __forceinline__ void init() {  // thread 0, before the cluster barrier of start()
        for (int b = 0; b < BUFS; ++b) mbar_init(bars + 8 * b, 1);
        mbar_init_fence();
    }
    // thread 0: tile j's own rows (lines 16 rank .. +15 of each of the 8 chunks, and their flags)
    // to the peer, and the expectation of the peer's half of tile j on this CTA's mbarrier
    __device__ __forceinline__ void send(int j) {
        const int b = j % BUFS;
        mbar_arrive_expect_tx(bars + 8 * b, PAIR_TX);
        const unsigned int bar = cluster_map(bars + 8 * b, peer);
        const unsigned int own = buffers + b * PIPE_BF16_BYTES + rank * PAIR_ROWS * 128;
        const unsigned int dst = cluster_map(own, peer);
#pragma unroll
        for (int c = 0; c < 8; ++c)
            bulk_copy_to_cluster(dst + c * WG_CHUNK_BYTES(PIPE_TILE), own + c * WG_CHUNK_BYTES(PIPE_TILE), PAIR_ROWS * 128, bar);
        const unsigned int own_flags = flags + (b * PIPE_TILE + rank * PAIR_ROWS) * 4;
        bulk_copy_to_cluster(cluster_map(own_flags, peer), own_flags, PAIR_ROWS * 4, bar);
        bulk_commit();
    }
    // every thread: the peer's half of tile i has arrived
    __device__ __forceinline__ void wait(int i) { mbar_wait(bars + 8 * (i % BUFS), (i / BUFS) & 1); }
};

struct PairBf16Rows {  // bf16 rows of 1 KB, own rows copied straight into 4 swizzled 32-row buffers
    static constexpr bool ANY_HEADS = false;
    static constexpr int SHARED_BYTES =
        PAIR_BF16_BUFS * PIPE_BF16_BYTES + PIPE_SPART_BYTES + PAIR_BF16_BUFS * PIPE_TILE * 4 + PAIR_BF16_BUFS * 8;
    const unsigned char* kv;
    const int* idx_row;
    int n, tiles;
    unsigned char* bufs;  // [4][32 lines] swizzled, then the S partials, the flags [4][32], the mbarriers [4]
    PairLink<PAIR_BF16_BUFS> link;
    int piece, line_first;  // thread x copies piece x % 64 of own lines x / 64 + 4 k (k < 4)
    int idx_next[PAIR_ROWS / 4];

    __device__ __forceinline__ PairBf16Rows(const unsigned short* kv_, const int* idx_row_, int n_, unsigned char* smem)
        : kv(reinterpret_cast<const unsigned char*>(kv_)), idx_row(idx_row_), n(n_),
          tiles((n_ + PIPE_TILE - 1) / PIPE_TILE), bufs(smem),
          link(smem, reinterpret_cast<int*>(smem + PAIR_BF16_BUFS * PIPE_BF16_BYTES + PIPE_SPART_BYTES),
               reinterpret_cast<unsigned long long*>(smem + PAIR_BF16_BUFS * PIPE_BF16_BYTES + PIPE_SPART_BYTES +
                                                     PAIR_BF16_BUFS * PIPE_TILE * 4)),
          piece(threadIdx.x & 63), line_first(threadIdx.x >> 6) {}
    __device__ __forceinline__ float* s_part() { return reinterpret_cast<float*>(bufs + PAIR_BF16_BUFS * PIPE_BF16_BYTES); }
    __device__ __forceinline__ int* flags(int tile) {
        return reinterpret_cast<int*>(bufs + PAIR_BF16_BUFS * PIPE_BF16_BYTES + PIPE_SPART_BYTES) + (tile % PAIR_BF16_BUFS) * PIPE_TILE;
    }
    __device__ __forceinline__ void load_idx(int tile, int (&ids)[PAIR_ROWS / 4]) {
#pragma unroll
        for (int k = 0; k < PAIR_ROWS / 4; ++k) {
            const int i = tile * PIPE_TILE + link.rank * PAIR_ROWS + line_first + 4 * k;
            ids[k] = i < n ? idx_row[i] : -1;
        }
    }
    __device__ __forceinline__ void fetch(int tile, const int (&ids)[PAIR_ROWS / 4]) {  // one commit group a call
        if (tile < tiles) {
            unsigned char* dst = bufs + (tile % PAIR_BF16_BUFS) * PIPE_BF16_BYTES;
            int* f = flags(tile);
#pragma unroll
            for (int k = 0; k < PAIR_ROWS / 4; ++k) {
                const int r = link.rank * PAIR_ROWS + line_first + 4 * k, idx = ids[k];
                if (idx >= 0) {
                    cp_async16_l2_256(dst + swizzled_offset(PIPE_TILE, r, piece), kv + (long long)idx * DIM * 2 + piece * 16);
                } else {  // zeros, so a masked row adds 0 * 0, never 0 * NaN
                    *reinterpret_cast<uint4*>(dst + swizzled_offset(PIPE_TILE, r, piece)) = make_uint4(0u, 0u, 0u, 0u);
                }
                if (piece == 0) f[r] = idx >= 0;
            }
        }
        cp_async_commit();
    }
    __device__ __forceinline__ void start() {  // own halves of tiles 0 .. 2 (Q joins tile 0's group), tile 0 sent
        if (threadIdx.x == 0) link.init();
        int first[PAIR_BF16_BUFS - 1][PAIR_ROWS / 4];  // every index load first, then the copies
#pragma unroll
        for (int j = 0; j < PAIR_BF16_BUFS - 1; ++j) load_idx(j, first[j]);
        load_idx(PAIR_BF16_BUFS - 1, idx_next);
#pragma unroll
        for (int j = 0; j < PAIR_BF16_BUFS - 1; ++j) fetch(j, first[j]);
        cp_async_wait<PAIR_BF16_BUFS - 2>();  // this thread's copies of tile 0 and Q
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes, async-proxy reads
        cluster_sync_all();  // both CTAs' mbarriers initialised; this CTA's half of tile 0 complete
        if (threadIdx.x == 0 && tiles > 0) link.send(0);
    }
    __device__ __forceinline__ unsigned int top(int i) {
        cp_async_wait<PAIR_BF16_BUFS - 3>();  // this thread's copies of tile i + 1 have landed
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        if (threadIdx.x == 0) bulk_wait_read<1>();  // the send of tile i - 1 has read the buffer refill(i) rewrites
        __syncthreads();  // own half of tile i + 1 complete; everyone left tile i - 1
        link.wait(i);     // the peer's half of tile i
        if (threadIdx.x == 0 && i + 1 < tiles) link.send(i + 1);
        return link.buffers + (i % PAIR_BF16_BUFS) * PIPE_BF16_BYTES;
    }
    __device__ __forceinline__ void refill(int i) {  // tile i + 3 into the buffer tile i - 1 left
        fetch(i + PAIR_BF16_BUFS - 1, idx_next);
        load_idx(i + PAIR_BF16_BUFS, idx_next);
    }
    __device__ __forceinline__ void overlap(int, int) {}
    __device__ __forceinline__ void finish() {
        if (threadIdx.x == 0) bulk_wait_read<0>();  // no send may still read this CTA's shared memory
    }
};

// FP8 records (SPEC 8) as PipeFp8Rows reads them, own rows only: 5 raw stages of 16 records, each
// dequantised two tiles ahead of the math (raw tile i + 2 during tile i) into one of 3 bf16 buffers.
struct PairFp8Rows {
    static constexpr bool ANY_HEADS = false;
    const unsigned char* cache;
    long long page_stride;  // bytes; page offsets are 64-bit
    int page_shift;
    const int* idx_row;
    int n, tiles;
    unsigned char* bf16_s;  // [3][32 lines] swizzled, [5][16 rows of FP8_PITCH] raw, S partials,
                            // raw flags [5][16], tile flags [3][32], mbarriers [3]
    PairLink<PAIR_FP8_BUFS> link;
    int piece, line_first;  // dequantisation: piece x % 64 of own lines x / 64 + 4 k
    int idx_next[PAIR_FP8_PIECES_PER_THREAD];  // thread x copies pieces x + 256 k of the 16 x 36 own ones

    static constexpr int RAW_AT = PAIR_FP8_BUFS * PIPE_BF16_BYTES;
    static constexpr int SPART_AT = RAW_AT + PAIR_RAW_STAGES * PAIR_RAW_BYTES;
    static constexpr int RAW_FLAGS_AT = SPART_AT + PIPE_SPART_BYTES;
    static constexpr int FLAGS_AT = RAW_FLAGS_AT + PAIR_RAW_STAGES * PAIR_ROWS * 4;
    static constexpr int BARS_AT = FLAGS_AT + PAIR_FP8_BUFS * PIPE_TILE * 4;
    static constexpr int SHARED_BYTES = BARS_AT + PAIR_FP8_BUFS * 8;

    __device__ __forceinline__ PairFp8Rows(const unsigned char* cache_, long long page_stride_, int page_shift_,
                                           const int* idx_row_, int n_, unsigned char* smem)
        : cache(cache_), page_stride(page_stride_), page_shift(page_shift_), idx_row(idx_row_), n(n_),
          tiles((n_ + PIPE_TILE - 1) / PIPE_TILE), bf16_s(smem),
          link(smem, reinterpret_cast<int*>(smem + FLAGS_AT), reinterpret_cast<unsigned long long*>(smem + BARS_AT)),
          piece(threadIdx.x & 63), line_first(threadIdx.x >> 6) {}
    __device__ __forceinline__ unsigned char* raw(int tile) { return bf16_s + RAW_AT + (tile % PAIR_RAW_STAGES) * PAIR_RAW_BYTES; }
    __device__ __forceinline__ float* s_part() { return reinterpret_cast<float*>(bf16_s + SPART_AT); }
    __device__ __forceinline__ int* raw_flags(int tile) {
        return reinterpret_cast<int*>(bf16_s + RAW_FLAGS_AT) + (tile % PAIR_RAW_STAGES) * PAIR_ROWS;
    }
    __device__ __forceinline__ int* flags(int tile) {  // the bf16 buffer's, all 32 rows
        return reinterpret_cast<int*>(bf16_s + FLAGS_AT) + (tile % PAIR_FP8_BUFS) * PIPE_TILE;
    }
    __device__ __forceinline__ void load_idx(int tile, int (&ids)[PAIR_FP8_PIECES_PER_THREAD]) {
#pragma unroll
        for (int k = 0; k < PAIR_FP8_PIECES_PER_THREAD; ++k) {
            const int c = threadIdx.x + 256 * k, i = tile * PIPE_TILE + link.rank * PAIR_ROWS + c / FP8_PIECES;
            ids[k] = c < PAIR_ROWS * FP8_PIECES && i < n ? idx_row[i] : -1;
        }
    }
    __device__ __forceinline__ void fetch(int tile, const int (&ids)[PAIR_FP8_PIECES_PER_THREAD]) {  // one commit group a call
        if (tile < tiles) fp8_fetch_records<PAIR_ROWS>(*this, tile, ids);
        cp_async_commit();
    }
    // own rows 8 part .. +7 of raw tile `tile` -> lines 16 rank + 8 part .. of its bf16 buffer
    __device__ __forceinline__ void dequant(int tile, int part) {
        const unsigned char* stage = raw(tile);
        const int* rf = raw_flags(tile);
        int* tf = flags(tile);
        unsigned char* dst = bf16_s + (tile % PAIR_FP8_BUFS) * PIPE_BF16_BYTES;
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int r = part * 8 + line_first + 4 * k, line = link.rank * PAIR_ROWS + r;
            const unsigned char* rec = stage + r * FP8_PITCH;
            const int valid = rf[r];
            uint4 v = make_uint4(0u, 0u, 0u, 0u);  // a -1 row: zeros, so it adds 0 * 0, never 0 * NaN
            if (valid) {
                if (piece < FP8_NOPE / 8) {  // 8 e4m3 dims; scale of dims 64 i .. 64 i + 63 at byte i
                    v = e4m3x8_scaled_bf16x8(*reinterpret_cast<const uint2*>(rec + piece * 8), rec[FP8_RECORD + (piece >> 3)]);
                } else {  // 8 bf16 RoPE dims, as stored
                    v = *reinterpret_cast<const uint4*>(rec + FP8_NOPE + (piece - FP8_NOPE / 8) * 16);
                }
            }
            *reinterpret_cast<uint4*>(dst + swizzled_offset(PIPE_TILE, line, piece)) = v;
            if (piece == 0) tf[line] = valid;
        }
    }
    __device__ __forceinline__ void start() {  // raw 0 .. 4 (Q joins raw 0's group); tiles 0, 1 dequantised, tile 0 sent
        if (threadIdx.x == 0) link.init();
        int first[PAIR_RAW_STAGES][PAIR_FP8_PIECES_PER_THREAD];  // every index load first, then the copies
#pragma unroll
        for (int j = 0; j < PAIR_RAW_STAGES; ++j) load_idx(j, first[j]);
        load_idx(PAIR_RAW_STAGES, idx_next);
#pragma unroll
        for (int j = 0; j < PAIR_RAW_STAGES; ++j) fetch(j, first[j]);
        cp_async_wait<PAIR_RAW_STAGES - 2>();  // this thread's copies of raw tiles 0, 1 and Q
        cluster_sync_all();  // both CTAs' mbarriers initialised; everyone's raw tiles 0, 1 landed
        if (tiles > 0) {
            dequant(0, 0);
            dequant(0, 1);
        }
        if (tiles > 1) {
            dequant(1, 0);
            dequant(1, 1);
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes, async-proxy reads
        __syncthreads();  // own half of tile 0 complete
        if (threadIdx.x == 0 && tiles > 0) link.send(0);
    }
    __device__ __forceinline__ unsigned int top(int i) {
        cp_async_wait<PAIR_RAW_STAGES - 3>();  // this thread's copies of raw tile i + 2 have landed
        // the dequantised tile i + 1 (and Q): generic writes, read by the bulk copy and wgmma
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        if (threadIdx.x == 0) bulk_wait_read<1>();  // the send of tile i - 1 has read the buffer overlap(i) rewrites
        __syncthreads();  // own half of tile i + 1 complete, raw tile i + 2 landed; everyone left tile i - 1
        link.wait(i);     // the peer's half of tile i
        if (threadIdx.x == 0 && i + 1 < tiles) link.send(i + 1);
        return link.buffers + (i % PAIR_FP8_BUFS) * PIPE_BF16_BYTES;
    }
    __device__ __forceinline__ void refill(int i) {  // raw tile i + 5 into the stage of raw tile i (dequantised during tile i - 2)
        fetch(i + PAIR_RAW_STAGES, idx_next);
        load_idx(i + PAIR_RAW_STAGES + 1, idx_next);
    }
    __device__ __forceinline__ void overlap(int i, int part) {  // while the tensor cores work on tile i
        if (i + 2 < tiles) dequant(i + 2, part);
    }
    __device__ __forceinline__ void finish() {
        if (threadIdx.x == 0) bulk_wait_read<0>();  // no send may still read this CTA's shared memory
    }
};
static_assert(1024 + WG_MAT_BYTES + PairBf16Rows::SHARED_BYTES == BF16_PAIR_SHARED_BYTES, "bf16 pair layout");
static_assert(1024 + WG_MAT_BYTES + PairFp8Rows::SHARED_BYTES == FP8_PAIR_SHARED_BYTES, "FP8 pair layout");
#endif

// LATE_PV: see pipe_attention (LATE_SHARED_BYTES of dynamic shared memory instead of BF16_PAIR_SHARED_BYTES)
template <bool HAS_SINK, bool SPLIT, bool LATE_PV = false>
__global__ void __launch_bounds__(256, 1) PAIR_CLUSTER_DIMS
    dsv4_sparse_attention_pair(const unsigned short* q, const unsigned short* kv, const int* indices, const float* sink,
                               unsigned short* out, float* lse, float* part_out, float* part_lse, int K, int heads,
                               int chunk, float sm_scale) {
#if WG_AVAILABLE
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* smem = wg_smem_base(smem_raw);
    const int k_begin = blockIdx.z * chunk;
    const int n = max(min(K - k_begin, chunk), 0);
    PairBf16Rows rows(kv, indices + (long long)blockIdx.x * K + k_begin, n, smem + WG_MAT_BYTES);
    pipe_attention<HAS_SINK, SPLIT, LATE_PV>(rows, smem, q, sink, out, lse, part_out, part_lse, n, heads, sm_scale);
#else
    __trap();  // the Python side launches it only on sm_90a (Hopper) with H a multiple of 128
#endif
}

template <bool HAS_SINK, bool SPLIT>
__global__ void __launch_bounds__(256, 1) PAIR_CLUSTER_DIMS
    dsv4_sparse_attention_fp8_pair(const unsigned short* q, const unsigned char* kv_cache, const int* indices,
                                   const float* sink, unsigned short* out, float* lse, float* part_out, float* part_lse,
                                   int K, int heads, int chunk, float sm_scale, int page_shift, long long page_stride) {
#if WG_AVAILABLE
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* smem = wg_smem_base(smem_raw);
    const int k_begin = blockIdx.z * chunk;
    const int n = max(min(K - k_begin, chunk), 0);
    PairFp8Rows rows(kv_cache, page_stride, page_shift, indices + (long long)blockIdx.x * K + k_begin, n,
                     smem + WG_MAT_BYTES);
    pipe_attention<HAS_SINK, SPLIT, false>(rows, smem, q, sink, out, lse, part_out, part_lse, n, heads, sm_scale);
#else
    __trap();  // the Python side launches it only on sm_90a (Hopper) with H a multiple of 128
#endif
}

// ---------------------------------------------------------------------------------------------
// dsv4_sparse_attention_wgmma2 (sm_90a): FlashMLA's split of the work between the two warpgroups.
// The gathered rows go in pairs of 64-row blocks, block 0 of a pair in buffer 0, block 1 in
// buffer 1 (same swizzled layout as dsv4_sparse_attention_wgmma). Per pair, warpgroup c (0, 1):
// - S_c = Q K_c^T over all 512 dims (wgmma m64n64k16 x 32 from shared memory): no partial S to
//   exchange; each warpgroup has its own block;
// - the row maxima of both blocks meet in shared memory (both warpgroups take the same max, so
//   both rescale O and their partial row sums by the same alpha; the sums add at the end);
// - P_c (bf16) goes to shared memory in the K-major 128-byte-swizzle layout (one 64-dim chunk);
// - O[:, 256 c ..] += P_0 V_0[:, 256 c ..] + P_1 V_1[:, 256 c ..] (wgmma m64n256k16, A = P from
//   shared memory, B = the buffer read MN-major as in the wgmma kernel); each warpgroup owns half
//   of O.
// Warpgroup c copies block c into buffer c and waits only on its own copies (a 128-thread named
// barrier), so warpgroup 0 starts S on the next pair while buffer 1 still lands; buffer 0 is
// refilled as soon as both warpgroups' first P V group (the one reading it) is done, while the
// tensor cores still multiply buffer 1 (bar.arrive / bar.sync pairs: the signalling warpgroup
// does not wait). Both buffers' copies can be in flight together (128 KB a CTA, the wgmma
// kernel has 64 KB).
// Shared memory: alignment slack, Q, 2 buffers, P of both warpgroups, row max / sum exchange,
// the indices of two pairs.
// named barrier `id` over all 256 threads, arriving without waiting (wg_bar_sync waits)
__device__ __forceinline__ void wg_bar_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }
// P (bf16) of a 64 x 64 block from the S accumulator layout (rows r_lo, r_hi of the thread, r & 7 = g)
// into the K-major 128-byte-swizzle layout wgmma reads as A: element (row r, column k) at
// r * 128 + ((k / 8) ^ (r & 7)) * 16 + (k & 7) * 2
__device__ __forceinline__ void store_p_swizzled(unsigned char* pb, const float (&s)[32], int r_lo, int r_hi, int g, int t) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
        *reinterpret_cast<unsigned int*>(pb + r_lo * 128 + ((nt ^ g) << 4) + 4 * t) = pack_bf16(s[4 * nt], s[4 * nt + 1]);
        *reinterpret_cast<unsigned int*>(pb + r_hi * 128 + ((nt ^ g) << 4) + 4 * t) = pack_bf16(s[4 * nt + 2], s[4 * nt + 3]);
    }
}
// this thread's S columns of a block, scaled to base 2, -inf where bit 2 nt + e of `valid` is 0
// (column 8 nt + 2 t + e); returns the row maxima over the quad (the row's 64 columns)
__device__ __forceinline__ void masked_row_max(float (&s)[32], unsigned int valid, float scale2, float& mx_lo,
                                               float& mx_hi) {
    mx_lo = -INFINITY;
    mx_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
        const bool v0 = (valid >> (2 * nt)) & 1u, v1 = (valid >> (2 * nt + 1)) & 1u;
        s[4 * nt] = v0 ? s[4 * nt] * scale2 : -INFINITY;
        s[4 * nt + 1] = v1 ? s[4 * nt + 1] * scale2 : -INFINITY;
        s[4 * nt + 2] = v0 ? s[4 * nt + 2] * scale2 : -INFINITY;
        s[4 * nt + 3] = v1 ? s[4 * nt + 3] * scale2 : -INFINITY;
        mx_lo = fmaxf(mx_lo, fmaxf(s[4 * nt], s[4 * nt + 1]));
        mx_hi = fmaxf(mx_hi, fmaxf(s[4 * nt + 2], s[4 * nt + 3]));
    }
    quad_row_max(mx_lo, mx_hi);
}
#define WG2_SHARED_BYTES (1024 + 3 * WG_MAT_BYTES + 2 * 64 * 128 + 2 * 64 * 4 + 2 * WG2_PAIR * 4)

template <bool HAS_SINK, bool SPLIT>
__global__ void __launch_bounds__(256, 1)
    dsv4_sparse_attention_wgmma2(const unsigned short* q, const unsigned short* kv, const int* indices,
                                 const float* sink, unsigned short* out, float* lse, float* part_out,
                                 float* part_lse, int K, int heads, int chunk, float sm_scale) {
#if WG_AVAILABLE
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const unsigned int raw_addr = (unsigned int)__cvta_generic_to_shared(smem_raw);
    unsigned char* smem = smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u);
    unsigned char* q_s = smem;                                         // [64 heads] swizzled
    unsigned char* kv_s = q_s + WG_MAT_BYTES;                          // [2 buffers][64 rows] swizzled
    unsigned char* p_s = kv_s + 2 * WG_MAT_BYTES;                      // [2 blocks][64 heads x 64 rows] bf16 swizzled
    float* x_s = reinterpret_cast<float*>(p_s + 2 * 64 * 128);         // [2 warpgroups][64 heads]: row max, then row sum
    int* idx_s = reinterpret_cast<int*>(x_s + 2 * 64);                 // [2 pairs][128]
    const unsigned int q_addr = (unsigned int)__cvta_generic_to_shared(q_s);
    const unsigned int kv_addr = (unsigned int)__cvta_generic_to_shared(kv_s);
    const unsigned int p_addr = (unsigned int)__cvta_generic_to_shared(p_s);

    const int b = blockIdx.x, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int half = warp >> 2, wq = warp & 3;  // warpgroup; warp within it (rows 16 wq .. +15)
    const int r_lo = wq * 16 + g, r_hi = r_lo + 8;
    const int h0 = blockIdx.y * 64 + wq * 16;  // this thread's heads: h0 + g, h0 + g + 8
    const int k_begin = split * chunk;
    const int n = max(min(K - k_begin, chunk), 0);
    const int* idx_row = indices + (long long)b * K + k_begin;
    const float scale2 = sm_scale * LOG2E;
    const int pairs = (n + 127) / 128;

    const int lt = threadIdx.x & 127;  // thread within the warpgroup
    // warpgroup c loads block c of every pair into buffer c (so it waits only on its own copies) and
    // its first 64 threads load the block's indices (rows past the split's end read as -1)
    auto idx_of = [&](int p) { const int i = p * 128 + half * 64 + lt; return i < n ? idx_row[i] : -1; };
    auto fetch = [&](int p) {  // block `half` of pair p: 32 lines of 16 bytes a thread
        if (p < pairs) {
            const int* ids = idx_s + (p & 1) * 128 + half * 64;
            unsigned char* dst = kv_s + half * WG_MAT_BYTES;
            const int piece = lt & 63;
#pragma unroll 8
            for (int k = 0; k < 32; ++k) {
                const int r = (lt >> 6) + 2 * k, idx = ids[r];
                if (idx >= 0) {
                    cp_async16_l2_256(dst + swizzled_offset(WG_TILE, r, piece),
                                      reinterpret_cast<const unsigned char*>(kv) + (long long)idx * DIM * 2 + piece * 16);
                } else {  // zeros, so a masked row adds 0 * 0, never 0 * NaN
                    *reinterpret_cast<uint4*>(dst + swizzled_offset(WG_TILE, r, piece)) = make_uint4(0u, 0u, 0u, 0u);
                }
            }
        }
        cp_async_commit();
    };

    if (lt < 64) idx_s[half * 64 + lt] = idx_of(0);
    {  // Q: its own commit group
        const int piece = threadIdx.x & 63;
        const unsigned char* q_rows = reinterpret_cast<const unsigned char*>(q) + ((long long)b * heads + blockIdx.y * 64) * DIM * 2;
#pragma unroll 4
        for (int r = threadIdx.x >> 6; r < 64; r += 4)
            cp_async16(q_s + swizzled_offset(64, r, piece), q_rows + r * DIM * 2 + piece * 16);
        cp_async_commit();
    }
    wg_bar_sync(1 + half);  // this warpgroup's indices of pair 0
    fetch(0);
    cp_async_wait<1>();  // this thread's Q copies have landed
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();  // everyone's: all of Q

    float o[128];  // O[rows r_lo (r_hi), dims half * 256 + 8 j + 2 t (+1)] at o[4 j + c]
#pragma unroll
    for (int j = 0; j < 128; ++j) o[j] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;  // l: this warpgroup's blocks only
    const unsigned int own_addr = kv_addr + half * WG_MAT_BYTES;
    for (int j = 0; j < pairs; ++j) {
        cp_async_wait<0>();  // this thread's copies of its block have landed
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes, async-proxy reads
        wg_bar_sync(1 + half);  // the whole block has (the other warpgroup reads it after the barriers below)
        const int next_idx = lt < 64 ? idx_of(j + 1) : -1;  // stored before the P barrier
        const int* ids = idx_s + (j & 1) * 128 + half * 64;

        // S = Q K^T of this warpgroup's block: 8 chunks of 64 dims, 4 k-steps of 32 bytes in each
        float s[32];
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] = 0.f;
#pragma unroll
        for (int i = 0; i < 32; ++i) wg_fence_operand(s[i]);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < 32; ++ks) {
            const unsigned int off = (ks >> 2) * WG_CHUNK_BYTES(64) + (ks & 3) * 32;
            wgmma_m64n64k16_ss(s, wg_desc(q_addr + off, 16, 1024), wg_desc(own_addr + off, 16, 1024));
        }
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < 32; ++i) wg_fence_operand(s[i]);

        // s[4 nt + c]: row r_lo (c < 2) or r_hi, column 8 nt + 2 t + (c & 1) of the block
        unsigned int valid = 0;
#pragma unroll
        for (int c = 0; c < 16; ++c) valid |= (unsigned int)(ids[(c >> 1) * 8 + 2 * t + (c & 1)] >= 0) << c;
        float mx_lo, mx_hi;
        masked_row_max(s, valid, scale2, mx_lo, mx_hi);
        if (t == 0) {
            x_s[half * 64 + r_lo] = mx_lo;
            x_s[half * 64 + r_hi] = mx_hi;
        }
        __syncthreads();  // both blocks' row maxima
        // the same expression in both warpgroups, so both hold the same m
        float alpha_lo, alpha_hi;
        softmax_update<8>(s, fmaxf(x_s[r_lo], x_s[64 + r_lo]), fmaxf(x_s[r_hi], x_s[64 + r_hi]), m_lo, m_hi, l_lo,
                          l_hi, alpha_lo, alpha_hi);
        store_p_swizzled(p_s + half * 64 * 128, s, r_lo, r_hi, g, t);  // P of this block into p_s[half]
#pragma unroll
        for (int i = 0; i < 128; ++i) {
            o[i] *= (i & 2) ? alpha_hi : alpha_lo;
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // P: generic writes, async-proxy reads
        if (lt < 64) idx_s[((j + 1) & 1) * 128 + half * 64 + lt] = next_idx;  // pair j - 1's are done
        __syncthreads();  // both P blocks; the next pair's indices

        // O[:, half dims] += P_0 V_0 (group 1), then P_1 V_1 (group 2); k-step ks covers rows 16 ks .. +15
#pragma unroll
        for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
        wg_fence();
#pragma unroll
        for (int blk = 0; blk < 2; ++blk) {
#pragma unroll
            for (int ks = 0; ks < 4; ++ks)
                wgmma_m64n256k16_ss(o, wg_desc(p_addr + blk * 64 * 128 + ks * 32, 16, 1024),
                                    wg_desc(kv_addr + blk * WG_MAT_BYTES + half * 4 * WG_CHUNK_BYTES(64) + ks * 16 * 128,
                                            WG_CHUNK_BYTES(64), 1024));
            wg_commit();
        }
        wg_wait1();  // this warpgroup is done with buffer 0 (and P_0)
        // warpgroup 0 refills buffer 0 once warpgroup 1 is done with it too, while the tensor cores
        // multiply buffer 1; warpgroup 1 only signals
        if (half == 0) {
            wg_bar_sync(3, 256);
            fetch(j + 1);
        } else {
            wg_bar_arrive(3);
        }
        wg_wait0();
#pragma unroll
        for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
        // likewise buffer 1: warpgroup 0 goes on to its next block at once
        if (half == 1) {
            wg_bar_sync(4, 256);
            fetch(j + 1);
        } else {
            wg_bar_arrive(4);
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the CTA exits

    // the row sums of both warpgroups' blocks, added in the same order in both
    __syncthreads();
    if (t == 0) {
        x_s[half * 64 + r_lo] = l_lo;
        x_s[half * 64 + r_hi] = l_hi;
    }
    __syncthreads();
    l_lo = x_s[r_lo] + x_s[64 + r_lo];
    l_hi = x_s[r_hi] + x_s[64 + r_hi];

    const long long row = (long long)b * heads + h0 + g;  // this thread's low head; high = +8
    if (SPLIT) {
        const long long prow = ((long long)b * gridDim.z + split) * heads + h0 + g;
        const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
        float* p_lo = part_out + prow * DIM + half * 256 + 2 * t;
        float* p_hi = p_lo + 8 * DIM;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            *reinterpret_cast<float2*>(p_lo + j * 8) = make_float2(o[4 * j] * inv_lo, o[4 * j + 1] * inv_lo);
            *reinterpret_cast<float2*>(p_hi + j * 8) = make_float2(o[4 * j + 2] * inv_hi, o[4 * j + 3] * inv_hi);
        }
        if (half == 0 && t == 0) {
            part_lse[prow] = lse_of(l_lo, m_lo);
            part_lse[prow + 8] = lse_of(l_hi, m_hi);
        }
        return;
    }
    float denom_lo = l_lo > 0.f ? l_lo : 1.f, denom_hi = l_hi > 0.f ? l_hi : 1.f;
    if (HAS_SINK) {
        denom_lo = sink_denominator(l_lo, m_lo, sink[h0 + g]);
        denom_hi = sink_denominator(l_hi, m_hi, sink[h0 + g + 8]);
    }
    const float inv_lo = 1.f / denom_lo, inv_hi = 1.f / denom_hi;
    unsigned short* out_lo = out + row * DIM + half * 256 + 2 * t;
    unsigned short* out_hi = out_lo + 8 * DIM;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        *reinterpret_cast<unsigned int*>(out_lo + j * 8) = pack_bf16(o[4 * j] * inv_lo, o[4 * j + 1] * inv_lo);
        *reinterpret_cast<unsigned int*>(out_hi + j * 8) = pack_bf16(o[4 * j + 2] * inv_hi, o[4 * j + 3] * inv_hi);
    }
    if (half == 0 && t == 0) {
        lse[row] = lse_of(l_lo, m_lo);
        lse[row + 8] = lse_of(l_hi, m_hi);
    }
#else
    __trap();  // the Python side launches it only on sm_90a (Hopper); elsewhere the h64 kernel runs
#endif
}


// ---------------------------------------------------------------------------------------------
// dsv4_sparse_attention_ws (sm_90a): warp-specialised, FlashMLA's sparse-prefill schedule over our
// layouts. 384 threads: warpgroups 0 and 1 do the math, warpgroup 2 only gathers (setmaxnreg moves
// registers from it to the math warpgroups). The gathered rows go in pairs of 64-row blocks, block A
// (2j) in buffer 0, block B (2j + 1) in buffer 1, each buffer two halves: L = dims 0..255 (chunks
// 0..3, the first 32 KB of the swizzled matrix), R = dims 256..511. Each half has a `ready`
// mbarrier (its copies landed: cp.async.mbarrier.arrive.noinc of the 128 producer threads) and a
// `free` one (its last reader's wgmma done: 128 arrivals of that warpgroup), so a half is refilled
// as soon as it is read, not when the whole pair is. Per pair:
// - producer: K0L, K1R, K0R, K1L in that order (each after its `free` wait), then the next indices;
// - warpgroup 0: S_A = Q K_A^T (L then R half, issued at the end of the previous pair so it runs
//   under that pair's last P V), softmax of block A against its own max, hands its max to
//   warpgroup 1, O_L += P_A V_A,L (P from registers), frees K0L; takes the pair's max from
//   warpgroup 1, rescales P_A to it and stores it in shared memory, takes P_B, O_L += P_B V_B,L
//   (P from shared memory), frees K1L after issuing the next S_A;
// - warpgroup 1: S_B = Q K_B^T (R half first), softmax against max(own, warpgroup 0's): that is
//   the pair's max m; O_R += P_B V_B,R (registers), stores P_B; O_R += P_A V_A,R (shared memory);
//   frees K1R and K0R.
// Both warpgroups end a pair with the same running max m; each row sum l covers its own blocks and
// they add at the end. Four named barriers carry the handshakes (max of A, max of the pair, P_A
// stored, P_B stored): the side that only signals arrives without waiting.
// Masked rows (-1, or past the split's end) are zero-filled by the copy (src-size 0) and their S
// columns set to -inf from the indices, which each math thread reads itself (16 a pair), or under
// WS_FLAGS_SMEM from 16 bytes of flags the producer writes a pair (ws_flag_word; docs/attn-s11.md).
// Shared memory: alignment slack, Q, 2 buffers, P of both blocks, the max and sum exchange, 9 mbarriers
// (and the flags under WS_FLAGS_SMEM).
#define WS_THREADS 384
#define WS_MATH_REGS 216  // setmaxnreg: 2 x 128 x 216 + 128 x 72 = 384 x 168, the launch's registers
#define WS_PRODUCER_REGS 72
#define WS_SHARED_BYTES (1024 + 3 * WG_MAT_BYTES + 2 * 64 * 128 + 2 * 2 * 64 * 4 + 9 * 8 + WS_FLAGS_SMEM * 16 + WS_PERSISTENT * 8)
#define WS_HALF_BYTES (WG_MAT_BYTES / 2)  // 4 chunks of 64 dims
#if WS_Q_TMA
// WS_Q_TMA (DSV4_ATTENTION_Q=tma, docs/attn-s13a.md): Q arrives by TMA, not by the producer's cp.async. The kernels
// take q as a 2-D tensor map (a CUtensorMap: sparse_attention.py's q_tensor_map, cuTensorMapEncodeTiled) over the
// [batch x heads, 512] bf16 rows, box 64 dims x 64 heads, 128-byte swizzle: the box of dims 64 c .. 64 c + 63 lands as
// chunk c of the swizzled Q tile (swizzled_offset's layout; tests/test_attention_q_tma.py models it)
struct alignas(64) WsQTensorMap {
    unsigned long long opaque[16];
};
#define WS_Q_MAP_REF , const WsQTensorMap& q_map  // (the kernel parameter's own address: TMA reads it there)
#define WS_Q_MAP_ARG , q_map
#else
#define WS_Q_MAP_REF
#define WS_Q_MAP_ARG
#endif
#if WS_OUT_TMA
// WS_OUT_TMA (DSV4_ATTENTION_WS_OUT=tma, docs/attn-s14c.md): out has q's shape and row pitch, so its map is q's
// (q_tensor_map_args over out): the persistent epilogue stores chunk c of its swizzled staging as box {64 c, row0}
#define WS_OUT_MAP_REF , const WsQTensorMap& out_map
#define WS_OUT_MAP_ARG , out_map
#else
#define WS_OUT_MAP_REF
#define WS_OUT_MAP_ARG
#endif
// 0: __syncthreads; WS_BAR_OUT + warpgroup: WS_OUT_TMA's staging, a warpgroup's own (ids 6, 7)
enum WsBarrier { WS_BAR_MAX_A = 1, WS_BAR_MAX_PAIR, WS_BAR_P_A, WS_BAR_P_B, WS_BAR_SUMS, WS_BAR_OUT };

#if WG_AVAILABLE
__device__ __forceinline__ void mbar_arrive(unsigned int bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// one arrival on `bar` once every cp.async this thread issued before it has landed (the count the
// barrier was initialised with includes it: noinc)
__device__ __forceinline__ void cp_async_mbar_arrive(unsigned int bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// WS_QO_EVICT_FIRST (DSV4_ATTENTION_QO_POLICY=first, docs/attn-s14a.md): Q and out are each read or written once (256
// MB each at prefill H64), so they go through L2 as evict_first, as FlashMLA loads Q: they then replace one another
// rather than the gathered KV rows, which are read again (evict_last at prefill)
__device__ __forceinline__ unsigned long long ws_stream_policy() {
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
// one bulk copy of `bytes` from shared src to global dst, in the thread's bulk group; STREAM (out's rows, not the
// splits' fp32 partials, which the combine kernel reads back) under WS_QO_EVICT_FIRST: with the evict_first hint
template <bool STREAM>
__device__ __forceinline__ void ws_bulk_store(void* dst, unsigned int src, unsigned int bytes) {
    if constexpr (STREAM && WS_QO_EVICT_FIRST)
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;\n" ::"l"(dst),
                     "r"(src), "r"(bytes), "l"(ws_stream_policy())
                     : "memory");
    else
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
#if WS_Q_TMA
// (one thread) the 64 heads of Q rows row0 .. row0 + 63 into the swizzled tile at q_addr: bar_q armed for its 64 KB,
// then one TMA copy a 64-dim chunk (8 KB each), completing on bar_q
__device__ __forceinline__ void ws_q_tma(const WsQTensorMap& q_map, unsigned int q_addr, unsigned int bar_q, int row0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar_q), "n"(WG_MAT_BYTES) : "memory");
    const unsigned long long map = reinterpret_cast<unsigned long long>(&q_map);
#if WS_QO_EVICT_FIRST
    const unsigned long long policy = ws_stream_policy();
#endif
#pragma unroll
    for (int c = 0; c < 8; ++c)
#if WS_QO_EVICT_FIRST
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(
                q_addr + c * WG_CHUNK_BYTES(64)),
            "l"(map), "r"(c * 64), "r"(row0), "r"(bar_q), "l"(policy)
            : "memory");
#else
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                q_addr + c * WG_CHUNK_BYTES(64)),
            "l"(map), "r"(c * 64), "r"(row0), "r"(bar_q)
            : "memory");
#endif
}
#endif
// cp_async16_l2_256 that reads `bytes` (16 or 0) of the source and zero-fills the rest, under the L2
// cache policy `policy` (evict_last_policy)
__device__ __forceinline__ void cp_async16_l2_256_fill(unsigned int dst, const void* gmem, unsigned int bytes,
                                                       unsigned long long policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(gmem),
                 "r"(bytes), "l"(policy)
                 : "memory");
}
// an L2 policy that keeps the lines it touches past others (FlashMLA gathers under it): neighbouring
// prefill rows and the second 64-head CTA of a row at H 128 read the same cache rows again
__device__ __forceinline__ unsigned long long evict_last_policy() {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
// the gathers' L2 policy, the kernels' kv_policy argument (sparse_attention.py chooses it): 0 evict_last as above,
// where rows are read again (prefill: neighbouring query rows share most of theirs); 1 evict_normal; 2 evict_first,
// where each row is read about once (decode: every request its own rows), so they do not crowd out what is reused
__device__ __forceinline__ unsigned long long ws_kv_policy(int choice) {
    unsigned long long policy;
    if (choice == 2)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    else if (choice == 1)
        asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
    else
        policy = evict_last_policy();
    return policy;
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS)); }
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS)); }

// S += Q K^T over the 4 chunks of 64 dims from `chunk0`, Q and K swizzled [64 x 512] (16 k-steps).
// Each descriptor is the first one plus the step's offset in 16-byte units (the address field, bits
// 0..13, does not carry: shared addresses stay under 256 KB); the bases are made opaque so the
// compiler adds them here rather than keeping 64 descriptors live across the loop (they spilled)
__device__ __forceinline__ void wg_s_half(float* s, unsigned int q_addr, unsigned int k_addr, int chunk0) {
    asm volatile("" : "+r"(q_addr), "+r"(k_addr));
    const unsigned long long q_desc = wg_desc(q_addr + chunk0 * WG_CHUNK_BYTES(64), 16, 1024);
    const unsigned long long k_desc = wg_desc(k_addr + chunk0 * WG_CHUNK_BYTES(64), 16, 1024);
#pragma unroll
    for (int ks = 0; ks < 16; ++ks) {
        const unsigned int step = ((ks >> 2) * WG_CHUNK_BYTES(64) + (ks & 3) * 32) >> 4;
        wgmma_m64n64k16_ss(s, q_desc + step, k_desc + step);
    }
}
// O[:, 256 dims] += P V over a block's 64 rows; V = the half buffer at v_addr read MN-major (4 k-steps of
// 16 rows: SBO the 1 KB of 8 lines, LBO the 8 KB between chunks); P from registers (A fragments)
__device__ __forceinline__ void wg_pv_rs(float* o, const unsigned int (&p)[4][4], unsigned int v_addr) {
    asm volatile("" : "+r"(v_addr));  // as in wg_s_half
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_m64n256k16_rs(o, p[ks], wg_desc(v_addr + ks * 16 * 128, WG_CHUNK_BYTES(64), 1024));
}
// the same with P from shared memory (store_p_swizzled's layout at p_addr)
__device__ __forceinline__ void wg_pv_ss(float* o, unsigned int p_addr, unsigned int v_addr) {
    asm volatile("" : "+r"(p_addr), "+r"(v_addr));  // as in wg_s_half
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
        wgmma_m64n256k16_ss(o, wg_desc(p_addr + ks * 32, 16, 1024), wg_desc(v_addr + ks * 16 * 128, WG_CHUNK_BYTES(64), 1024));
}

// WS_FLAGS_SMEM: the producer's valid-row flags. Warp w of the producer holds the indices of rows
// 4 w + i + 16 k (i = lane / 8, k = 0..3) of each block (copy_half's mapping); the lanes 8 i of `ballots[k]` (each
// lane's ids >= 0) are those rows. Row r is column 8 nt + 2 t + e of the math thread with quad index t: here
// t = 2 (w & 1) + (i >> 1), nt = (w >> 1) + 2 k, e = i & 1. Returns, for t = 2 (w & 1) + l (l = 0, 1), the bits
// 2 nt + e the warp knows (the nt of parity w >> 1); the reader ORs the two warps' parts.
__device__ __forceinline__ unsigned int ws_flag_part(const unsigned int (&ballots)[4], int w, int l) {
    unsigned int word = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int e = 0; e < 2; ++e) word |= ((ballots[k] >> (8 * (2 * l + e))) & 1u) << (2 * ((w >> 1) + 2 * k) + e);
    return word;
}
// the math thread's 16 flags of its block (bit 2 nt + e: column 8 nt + 2 t + e), as valid_bits gives them,
// from the u16 flag_s[block][t][part] words
__device__ __forceinline__ unsigned int ws_flag_word(unsigned int flags_addr, int block, int t) {
    unsigned int both;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(both) : "r"(flags_addr + (block * 4 + t) * 4) : "memory");
    return both | (both >> 16);  // bits 16.. are never read (masked_row_max reads bits 0..15)
}

// WS_SOFTMAX_FFMA: e^x as the one MUFU (results under 2^-126 flush to 0: a weight 1e-38 of the row's maximum)
__device__ __forceinline__ float ws_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// masked_row_max over the raw S: masked columns -inf, the row maxima (quad-reduced) scaled to base 2 by
// scale2 (> 0, so max(s) scale2 = max(s scale2)); s stays unscaled for ws_softmax_update
__device__ __forceinline__ void ws_masked_row_max_raw(float (&s)[32], unsigned int valid, float scale2, float& mx_lo,
                                                      float& mx_hi) {
    mx_lo = -INFINITY;
    mx_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
        const bool v0 = (valid >> (2 * nt)) & 1u, v1 = (valid >> (2 * nt + 1)) & 1u;
        s[4 * nt] = v0 ? s[4 * nt] : -INFINITY;
        s[4 * nt + 1] = v1 ? s[4 * nt + 1] : -INFINITY;
        s[4 * nt + 2] = v0 ? s[4 * nt + 2] : -INFINITY;
        s[4 * nt + 3] = v1 ? s[4 * nt + 3] : -INFINITY;
        mx_lo = fmaxf(mx_lo, fmaxf(s[4 * nt], s[4 * nt + 1]));
        mx_hi = fmaxf(mx_hi, fmaxf(s[4 * nt + 2], s[4 * nt + 3]));
    }
    quad_row_max(mx_lo, mx_hi);
    mx_lo *= scale2;
    mx_hi *= scale2;
}
#if WS_MATH_SPLIT
// ws_masked_row_max_raw with each flag tested by one LOP3 writing a predicate, which the two columns of that flag
// (rows lo and hi) select on; written in C (`valid & bit`), the front end turned the test back into a shift, a mask
// and a compare (three integer instructions a flag). The same FSEL, FMNMX and values
__device__ __forceinline__ void ws_mask_pair(float& a, float& b, unsigned int valid, unsigned int bit) {
    asm("{\n\t.reg .pred p;\n\t.reg .b32 r;\n\t"
        "and.b32 r, %2, %3;\n\tsetp.ne.b32 p, r, 0;\n\t"
        "selp.f32 %0, %0, 0fFF800000, p;\n\tselp.f32 %1, %1, 0fFF800000, p;\n\t}"
        : "+f"(a), "+f"(b)
        : "r"(valid), "r"(bit));
}
__device__ __forceinline__ void ws_masked_row_max_bits(float (&s)[32], unsigned int valid, float scale2, float& mx_lo,
                                                       float& mx_hi) {
    mx_lo = -INFINITY;
    mx_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
        ws_mask_pair(s[4 * nt], s[4 * nt + 2], valid, 1u << (2 * nt));
        ws_mask_pair(s[4 * nt + 1], s[4 * nt + 3], valid, 2u << (2 * nt));
        mx_lo = fmaxf(mx_lo, fmaxf(s[4 * nt], s[4 * nt + 1]));
        mx_hi = fmaxf(mx_hi, fmaxf(s[4 * nt + 2], s[4 * nt + 3]));
    }
    quad_row_max(mx_lo, mx_hi);
    mx_lo *= scale2;
    mx_hi *= scale2;
}
#endif
// softmax_update for raw s: P = e2(s scale2 - m) by one FFMA and one MUFU an element
__device__ __forceinline__ void ws_softmax_update(float (&s)[32], float scale2, float mx_lo, float mx_hi, float& m_lo,
                                                  float& m_hi, float& l_lo, float& l_hi, float& alpha_lo,
                                                  float& alpha_hi) {
    const float new_lo = fmaxf(m_lo, mx_lo), new_hi = fmaxf(m_hi, mx_hi);
    const float use_lo = new_lo == -INFINITY ? 0.f : new_lo, use_hi = new_hi == -INFINITY ? 0.f : new_hi;
    alpha_lo = ws_ex2(m_lo - use_lo);
    alpha_hi = ws_ex2(m_hi - use_hi);
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
        s[4 * nt] = ws_ex2(fmaf(s[4 * nt], scale2, -use_lo));
        s[4 * nt + 1] = ws_ex2(fmaf(s[4 * nt + 1], scale2, -use_lo));
        s[4 * nt + 2] = ws_ex2(fmaf(s[4 * nt + 2], scale2, -use_hi));
        s[4 * nt + 3] = ws_ex2(fmaf(s[4 * nt + 3], scale2, -use_hi));
        sum_lo += s[4 * nt] + s[4 * nt + 1];
        sum_hi += s[4 * nt + 2] + s[4 * nt + 3];
    }
    add_quad_row_sums(l_lo, l_hi, sum_lo, sum_hi, alpha_lo, alpha_hi);
    m_lo = new_lo;
    m_hi = new_hi;
}

// The ws epilogue through shared memory (WS_EPILOGUE_SMEM). Once both math warpgroups' last wgmma is done (the
// sums barrier: each waited for its own), Q and the two buffers (192 KB from the aligned base) are free:
// the CTA's 64 rows of O are staged there and leave by one bulk copy a row (1 KB bf16, 2 KB fp32), not by
// 64 register stores a thread that each fill half of their 32-byte sectors. The staged pitches put a
// warp's stores on distinct banks: bf16 (1040 bytes = 260 words) an stmatrix's 8 rows of 16 bytes,
// fp32 (2080 bytes = 520 words) a half-warp's 4 rows x 32 bytes of float2.
#define WS_STAGE_BF16_PITCH (DIM * 2 + 16)
#define WS_STAGE_F32_PITCH (DIM * 4 + 32)
static_assert(64 * WS_STAGE_F32_PITCH <= 3 * WG_MAT_BYTES, "ws: the staged fp32 rows fit in Q and the two buffers");

__device__ __forceinline__ void stmatrix_x4(unsigned int addr, unsigned int a, unsigned int b, unsigned int c,
                                            unsigned int d) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b),
                 "r"(c), "r"(d)
                 : "memory");
}
// the 32 O fragments of this math thread (v[4 j + c], the accumulator layout) times inv by row, as bf16 to shared
// memory: one stmatrix.x4 for two j at address_of(j), its matrices (rows r_lo's 8, dims 8 j), (r_hi's, 8 j), (r_lo's,
// 8 j + 8), (r_hi's, 8 j + 8) in the mma layout the accumulator has (lane 4 g + t: row g, columns 2 t, 2 t + 1); lane l
// gives the address of row l & 7 of matrix l >> 3: row (warp & 3) * 16 + (l & 7) + 8 (mat & 1), 16-byte unit
// (warp >> 2) * 32 + j + (mat >> 1) of the row's 64
template <class AddressOf>
__device__ __forceinline__ void ws_stmatrix_o(AddressOf address_of, const float (&v)[128], float inv_lo, float inv_hi) {
#pragma unroll
    for (int j = 0; j < 32; j += 2)
        stmatrix_x4(address_of(j), pack_bf16(v[4 * j] * inv_lo, v[4 * j + 1] * inv_lo),
                    pack_bf16(v[4 * j + 2] * inv_hi, v[4 * j + 3] * inv_hi),
                    pack_bf16(v[4 * j + 4] * inv_lo, v[4 * j + 5] * inv_lo),
                    pack_bf16(v[4 * j + 6] * inv_hi, v[4 * j + 7] * inv_hi));
}
// ws_stmatrix_o into the staged rows at stage_addr (WS_STAGE_BF16_PITCH apart, unswizzled)
__device__ __forceinline__ void ws_stage_bf16(unsigned int stage_addr, const float (&v)[128], float inv_lo, float inv_hi) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, mat = lane >> 3;
    const int row = (warp & 3) * 16 + (lane & 7) + 8 * (mat & 1);
    const unsigned int addr = stage_addr + row * WS_STAGE_BF16_PITCH + ((warp >> 2) * 256 + 8 * (mat >> 1)) * 2;
    ws_stmatrix_o([&](int j) { return addr + j * 16; }, v, inv_lo, inv_hi);
}
// all 128 fragments times inv as fp32 into the staged rows (float2 stores)
__device__ __forceinline__ void ws_stage_f32(unsigned char* stage, const float (&o)[128], float inv_lo, float inv_hi) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int r_lo = (warp & 3) * 16 + g;
    float* lo = reinterpret_cast<float*>(stage + r_lo * WS_STAGE_F32_PITCH) + (warp >> 2) * 256 + 2 * t;
    float* hi = reinterpret_cast<float*>(stage + (r_lo + 8) * WS_STAGE_F32_PITCH) + (warp >> 2) * 256 + 2 * t;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        *reinterpret_cast<float2*>(lo + 8 * j) = make_float2(o[4 * j] * inv_lo, o[4 * j + 1] * inv_lo);
        *reinterpret_cast<float2*>(hi + 8 * j) = make_float2(o[4 * j + 2] * inv_hi, o[4 * j + 3] * inv_hi);
    }
}
// the 64 staged rows (pitch bytes apart) to the 64 contiguous global rows of row_bytes at dst. The generic
// stores are fenced to the async proxy and the 256 math threads meet; then lane 0 of math warp w copies rows
// 8 w .. 8 w + 7 and waits only for its reads of shared memory (which must outlive them; the CTA may then exit)
template <bool STREAM>
__device__ __forceinline__ void ws_bulk_store_rows(void* dst, unsigned int stage_addr, int pitch, int row_bytes) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    wg_bar_sync(WS_BAR_SUMS, 256);
    const int warp = __shfl_sync(0xffffffffu, threadIdx.x >> 5, 0);
    if ((threadIdx.x & 31) == 0) {
        unsigned char* dst_bytes = reinterpret_cast<unsigned char*>(dst);
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            const int row = 8 * warp + r;
            ws_bulk_store<STREAM>(dst_bytes + row * row_bytes, stage_addr + row * pitch, row_bytes);
        }
        bulk_commit();
        bulk_wait_read<0>();
    }
}

// The ws kernel's epilogue under WS_EPILOGUE_SMEM (else wg_epilogue): o, m, l as wg_epilogue's (the sums of
// both warpgroups added), stage = the aligned base of shared memory (free now). Not SPLIT: out = O / (l [+
// exp(sink - m)]) and lse. SPLIT: this split's partial (O / l, fp32) and lse, merged by the combine kernel.
template <bool HAS_SINK, bool SPLIT>
__device__ __forceinline__ void ws_epilogue(const float (&o)[128], float m_lo, float m_hi, float l_lo, float l_hi,
                                            unsigned char* stage, const float* sink, unsigned short* out, float* lse,
                                            float* part_out, float* part_lse, int heads) {
    const int b = blockIdx.x, splits = gridDim.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3, half = warp >> 2;
    const int r_lo = (warp & 3) * 16 + (lane >> 2), h0 = blockIdx.y * 64;
    const unsigned int stage_addr = (unsigned int)__cvta_generic_to_shared(stage);
    if (!SPLIT) {
        const long long row = (long long)b * heads + h0 + r_lo;  // this thread's low head; high = +8
        float denom_lo = l_lo > 0.f ? l_lo : 1.f, denom_hi = l_hi > 0.f ? l_hi : 1.f;
        if (HAS_SINK) {
            denom_lo = sink_denominator(l_lo, m_lo, sink[h0 + r_lo]);
            denom_hi = sink_denominator(l_hi, m_hi, sink[h0 + r_lo + 8]);
        }
        ws_stage_bf16(stage_addr, o, 1.f / denom_lo, 1.f / denom_hi);
        ws_bulk_store_rows<true>(out + ((long long)b * heads + h0) * DIM, stage_addr, WS_STAGE_BF16_PITCH, DIM * 2);
        if (half == 0 && t == 0) {
            lse[row] = lse_of(l_lo, m_lo);
            lse[row + 8] = lse_of(l_hi, m_hi);
        }
        return;
    }
    const long long first = (long long)b * splits * heads + h0 + r_lo;  // split s's low row at first + s * heads
    ws_stage_f32(stage, o, l_lo > 0.f ? 1.f / l_lo : 0.f, l_hi > 0.f ? 1.f / l_hi : 0.f);
    ws_bulk_store_rows<false>(part_out + ((long long)(b * splits + blockIdx.z) * heads + h0) * DIM, stage_addr,
                       WS_STAGE_F32_PITCH, DIM * 4);
    if (half == 0 && t == 0) {
        const long long prow = first + (long long)blockIdx.z * heads;
        part_lse[prow] = lse_of(l_lo, m_lo);
        part_lse[prow + 8] = lse_of(l_hi, m_hi);
    }
}
#if WS_PERSISTENT
#if WS_OUT_TMA
// (one thread) the staged out tile's chunks c0 .. c0 + 3 (the swizzled layout Q's tile has, at tile_addr) to out rows
// row0 .. row0 + 63 by one 2-D TMA store a chunk (box {64 c, row0}: 64 dims x 64 heads, 8 KB), in the thread's bulk
// group; under WS_QO_EVICT_FIRST with the evict_first hint, as the row copies have it. tile_addr is the whole tile's
// base, chunk c at tile_addr + c * 8 KB (session 14: given warpgroup 1's half, its stores read 32 KB past buffer 1, out
// of the CTA's shared memory on the H200: an illegal memory access; docs/attn-s14c.md)
__device__ __forceinline__ void ws_out_tma_chunks(const WsQTensorMap& out_map, unsigned int tile_addr, int c0, int row0) {
    const unsigned long long map = reinterpret_cast<unsigned long long>(&out_map);
#if WS_QO_EVICT_FIRST
    const unsigned long long policy = ws_stream_policy();
#endif
#pragma unroll
    for (int c = c0; c < c0 + 4; ++c)
#if WS_QO_EVICT_FIRST
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group.L2::cache_hint [%0, {%1, %2}], [%3], %4;\n" ::"l"(map),
                     "r"(c * 64), "r"(row0), "r"(tile_addr + c * WG_CHUNK_BYTES(64)), "l"(policy)
                     : "memory");
#else
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map),
                     "r"(c * 64), "r"(row0), "r"(tile_addr + c * WG_CHUNK_BYTES(64))
                     : "memory");
#endif
}
#endif
// WS_PERSISTENT's epilogue (unsplit): out = O / (l [+ exp(sink - m)]) as bf16, staged in buffer 1 at
// stage_addr (64 rows at pitch 1024, unit u of row r at ((u + r) mod 64) x 16), then lane 0 of math warp w
// copies rows 8 w .. 8 w + 7 out, two linear pieces a row (global units 0 .. 63 - r from staged unit r on,
// units 64 - r .. 63 from staged unit 0), waits for the reads and, where free_addr is not 0, arrives on it
// with count 32 (warps 0..3: rows 0..31, K1L's bytes; warps 4..7: K1R's), freeing the half for the producer.
// WS_OUT_TMA: staged as the swizzled tile (Q's layout: unit u of dims chunk c, row r at c * 8 KB + r * 128 +
// ((u ^ (r & 7)) << 4)); warpgroup h's dims are chunks 4 h .. 4 h + 3, i.e. buffer 1's half h (K1L, K1R), so each
// warpgroup meets on its own barrier, its thread 0 stores its 4 chunks by TMA (ws_out_tma_chunks), waits for their
// reads and frees its own half with one count-128 arrival
template <bool HAS_SINK>
__device__ __forceinline__ void ws_persistent_epilogue(const float (&o)[128], float m_lo, float m_hi, float l_lo,
                                                       float l_hi, unsigned int stage_addr, int b, int hb,
                                                       const float* sink, unsigned short* out, float* lse, int heads,
                                                       unsigned int free_addr WS_OUT_MAP_REF) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3, half = warp >> 2;
    const int r_lo = (warp & 3) * 16 + (lane >> 2), h0 = hb * 64;
    float denom_lo = l_lo > 0.f ? l_lo : 1.f, denom_hi = l_hi > 0.f ? l_hi : 1.f;
    if (HAS_SINK) {
        denom_lo = sink_denominator(l_lo, m_lo, sink[h0 + r_lo]);
        denom_hi = sink_denominator(l_hi, m_hi, sink[h0 + r_lo + 8]);
    }
    const float inv_lo = 1.f / denom_lo, inv_hi = 1.f / denom_hi;
    const int mat = lane >> 3;
    const int stage_row = (warp & 3) * 16 + (lane & 7) + 8 * (mat & 1);  // the row lane gives stmatrix (ws_stmatrix_o)
#if WS_OUT_TMA
    {  // ws_stmatrix_o into the swizzled tile: unit j + (mat >> 1) of chunk 4 half + j / 8 (j even, so the unit's XOR
       // with row & 7 = lane & 7 is (j & 7) ^ ((mat >> 1) ^ (lane & 7))); 8 rows of a matrix on 8 bank groups
        const unsigned int row_addr = stage_addr + half * WS_HALF_BYTES + stage_row * 128;
        const int swizzle = ((mat >> 1) ^ (lane & 7)) << 4;
        ws_stmatrix_o([&](int j) { return row_addr + (j >> 3) * WG_CHUNK_BYTES(64) + (((j & 7) << 4) ^ swizzle); }, o,
                      inv_lo, inv_hi);
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes, async-proxy (TMA) reads
    wg_bar_sync(WS_BAR_OUT + half, 128);
    if ((threadIdx.x & 127) == 0) {
        ws_out_tma_chunks(out_map, stage_addr, 4 * half, b * heads + h0);  // the tile's base (chunk 4 half: its half)
        bulk_commit();
        bulk_wait_read<0>();
        if (free_addr) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], 128;\n" ::"r"(free_addr) : "memory");
    }
#else
    {  // ws_stmatrix_o at the rotated units
        const int u0 = half * 32 + (mat >> 1) + stage_row;
        const unsigned int row_addr = stage_addr + stage_row * 1024;
        ws_stmatrix_o([&](int j) { return row_addr + ((u0 + j) & 63) * 16; }, o, inv_lo, inv_hi);
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes, async-proxy (bulk) reads
    wg_bar_sync(WS_BAR_SUMS, 256);
    const int w = __shfl_sync(0xffffffffu, warp, 0);
    if (lane == 0) {
        unsigned char* dst = reinterpret_cast<unsigned char*>(out + ((long long)b * heads + h0) * DIM);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = 8 * w + i;
            const unsigned int src = stage_addr + r * 1024;
            ws_bulk_store<true>(dst + r * 1024, src + r * 16, (64 - r) * 16);
            if (r > 0) ws_bulk_store<true>(dst + r * 1024 + (64 - r) * 16, src, r * 16);
        }
        bulk_commit();
        bulk_wait_read<0>();
        if (free_addr) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], 32;\n" ::"r"(free_addr) : "memory");
    }
#endif
    if (half == 0 && t == 0) {
        const long long row = (long long)b * heads + h0 + r_lo;
        lse[row] = lse_of(l_lo, m_lo);
        lse[row + 8] = lse_of(l_hi, m_hi);
    }
}
#if WS_TAIL_SPLIT
// WS_TAIL_SPLIT (docs/attn-s12a.md): the persistent grid's work pieces. The items of the last full round and
// before (w < full = items - items % gridDim.x) run whole as without it; each item past them (the tail: fewer
// than the grid, the last rows of the last head block) is cut into `splits` splits of `chunk` index rows, piece
// full + tail item x splits + split, so the last round runs about one split's time instead of one item's.
// split -1: a whole item.
struct WsPiece {
    int item, k0, n, split;
};
__device__ __forceinline__ WsPiece ws_piece(int w, int full, int splits, int n, int chunk) {
    if (w < full || splits == 1) return {w, 0, n, -1};
    const int p = w - full, split = p % splits, k0 = split * chunk;
    return {full + p / splits, k0, min(n - k0, chunk), split};
}
// a split piece's epilogue: O / l (fp32) and the split's lse to the partials of tail item `tail_item` (row
// (tail_item x splits + split) x heads + head, the layout the combine kernel reads). The CTA's last piece (every
// split piece where the host keeps pieces <= grid) stages the 64 rows at `stage` (Q and the buffers: no copy
// or wgmma uses them any more, nothing is prefetched) and stores them by bulk copies, as the one-item kernel's
// split epilogue; otherwise they go from registers (buffer 1 not written), then, after both warpgroups' sums
// are read (the barrier the bf16 epilogue takes too), K1L / K1R are freed as that epilogue's copying lanes free
// them (count 32 from lane 0 of each math warp) where free_addr is not 0
__device__ __forceinline__ void ws_tail_partial(const float (&o)[128], float m_lo, float m_hi, float l_lo, float l_hi,
                                                int tail_item, int split, int splits, int hb, float* part_out,
                                                float* part_lse, int heads, unsigned char* stage, bool last,
                                                unsigned int free_addr) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3, half = warp >> 2;
    const int r_lo = (warp & 3) * 16 + (lane >> 2);
    const long long prow0 = ((long long)tail_item * splits + split) * heads + hb * 64, prow = prow0 + r_lo;
    const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
    if (half == 0 && t == 0) {
        part_lse[prow] = lse_of(l_lo, m_lo);
        part_lse[prow + 8] = lse_of(l_hi, m_hi);
    }
    if (last) {
        ws_stage_f32(stage, o, inv_lo, inv_hi);
        ws_bulk_store_rows<false>(part_out + prow0 * DIM, (unsigned int)__cvta_generic_to_shared(stage), WS_STAGE_F32_PITCH,
                           DIM * 4);
        return;
    }
    float* p_lo = part_out + prow * DIM + half * 256 + 2 * t;
    float* p_hi = p_lo + 8 * DIM;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        *reinterpret_cast<float2*>(p_lo + j * 8) = make_float2(o[4 * j] * inv_lo, o[4 * j + 1] * inv_lo);
        *reinterpret_cast<float2*>(p_hi + j * 8) = make_float2(o[4 * j + 2] * inv_hi, o[4 * j + 3] * inv_hi);
    }
    wg_bar_sync(WS_BAR_SUMS, 256);
    if (lane == 0 && free_addr) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], 32;\n" ::"r"(free_addr) : "memory");
}
#endif
#endif
// The ws producer's pieces, shared by the one-item kernel and the persistent body.
// ids of pair `pair` (blocks A, B: rows row0 + 16k of this thread; -1 past the list's n entries)
__device__ __forceinline__ void ws_load_ids(int (&ids)[2][4], const int* idx_row, int n, int row0, int pair) {
#pragma unroll
    for (int blk = 0; blk < 2; ++blk)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int i = pair * 128 + blk * 64 + row0 + 16 * k;
            ids[blk][k] = i < n ? __ldg(idx_row + i) : -1;
        }
}
#if WS_PRODUCER_AHEAD
// after pair j's last fill: pair j + 1's indices (loaded a pair ago) become the current ones and pair `pair` = j + 2's
// are loaded, a whole pair before their first copy (-1 past the list: no load)
__device__ __forceinline__ void ws_ids_advance(int (&ids)[2][4], int (&ids_next)[2][4], const int* idx_row, int n,
                                               int row0, int pair) {
#pragma unroll
    for (int blk = 0; blk < 2; ++blk)
#pragma unroll
        for (int k = 0; k < 4; ++k) ids[blk][k] = ids_next[blk][k];
    ws_load_ids(ids_next, idx_row, n, row0, pair);
}
// (persistent) an item's index list, n ints from idx_row, towards L2: thread lt prefetches the line of int 32 lt (the
// last one's line for the thread just past the list: it need not start on a line), every address inside the list;
// lists past 4096 ints (HCA) only their first 4096
__device__ __forceinline__ void ws_prefetch_ids_l2(const int* idx_row, int n, int lt) {
    if (lt * 32 < n + 31 && n > 0) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(idx_row + min(lt * 32, n - 1)));
}
#if WS_PRODUCER_PREFETCH
// the valid rows of the pair in ids to L2, a bulk prefetch of 1 KB a row by the threads of unit 0 (8 rows each: every
// row of the pair once), so the copies that refill its half buffers hit L2; no cache hint (an evict_first line could
// leave L2 before its copy comes)
__device__ __forceinline__ void ws_prefetch_rows_l2(const int (&ids)[2][4], const unsigned char* kv_bytes, int unit) {
    if (unit == 0) {
#pragma unroll
        for (int blk = 0; blk < 2; ++blk)
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (ids[blk][k] >= 0)
                    asm volatile("cp.async.bulk.prefetch.L2.global [%0], 1024;\n" ::"l"(kv_bytes + (long long)ids[blk][k] * DIM * 2)
                                 : "memory");
    }
}
#endif
#endif
// half r_half of block blk's rows in ids into buffer blk (this thread's unit of each chunk line, at dst0 + constants)
__device__ __forceinline__ void ws_copy_half(const int (&ids)[2][4], int blk, int r_half, const unsigned char* kv_bytes,
                                             int unit, unsigned int dst0, unsigned long long policy) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int idx = ids[blk][k];
        const unsigned char* src = kv_bytes + (long long)max(idx, 0) * DIM * 2 + (r_half * 32 + unit) * 16;
        const unsigned int bytes = idx >= 0 ? 16u : 0u;  // a masked row: zeros, so it adds 0 * 0, never NaN
#pragma unroll
        for (int c = 0; c < 4; ++c)
            cp_async16_l2_256_fill(dst0 + blk * WG_MAT_BYTES + (r_half * 4 + c) * WG_CHUNK_BYTES(64) + k * 16 * 128,
                                   src + c * 128, bytes, policy);
    }
}
#if WS_FLAGS_SMEM
// block blk's flags of the pair in ids, written once its K0L (A) / K1R (B) is free (so its reader has read the
// last pair's: it read them before it freed that half) and published by a release arrival on that half's ready
// barrier `bar`, which the reader waits on first
__device__ __forceinline__ void ws_publish_flags(const int (&ids)[2][4], int blk, int lt, unsigned int flags_addr,
                                                 unsigned int bar) {
    unsigned int ballots[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) ballots[k] = __ballot_sync(0xffffffffu, ids[blk][k] >= 0);
    const int w = lt >> 5, l = lt & 31;
    if (l < 2) {
        const unsigned int word = ws_flag_part(ballots, w, l);
        asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(flags_addr + ((blk * 4 + 2 * (w & 1) + l) * 2 + (w >> 1)) * 2),
                     "h"((unsigned short)word)
                     : "memory");
        mbar_arrive(bar);
    }
}
#endif
// The ws math warpgroups' pieces, shared by the one-item kernel and the persistent body.
// bit 2 nt + e: column 8 nt + 2 t + e of warpgroup half's block of pair j holds a valid row
__device__ __forceinline__ unsigned int ws_valid_bits(const int* idx_row, int n, int j, int half, int t) {
    unsigned int v = 0;
#pragma unroll
    for (int c = 0; c < 16; ++c) {
        const int i = j * 128 + half * 64 + (c >> 1) * 8 + 2 * t + (c & 1);
        if (i < n && __ldg(idx_row + i) >= 0) v |= 1u << c;
    }
    return v;
}
// a landed S scaled to base 2, masked, its row maxima
__device__ __forceinline__ void ws_row_max(float (&s)[32], unsigned int valid, float scale2, float& mx_lo, float& mx_hi) {
#if WS_MATH_SPLIT
    ws_masked_row_max_bits(s, valid, scale2, mx_lo, mx_hi);
#elif WS_SOFTMAX_FFMA
    ws_masked_row_max_raw(s, valid, scale2, mx_lo, mx_hi);
#else
    masked_row_max(s, valid, scale2, mx_lo, mx_hi);
#endif
}
// the online softmax step of S to the row maxima mx (P in s, the running m, l and O's factors alpha)
__device__ __forceinline__ void ws_softmax_step(float (&s)[32], float scale2, float mx_lo, float mx_hi, float& m_lo,
                                                float& m_hi, float& l_lo, float& l_hi, float& alpha_lo, float& alpha_hi) {
#if WS_SOFTMAX_FFMA
    ws_softmax_update(s, scale2, mx_lo, mx_hi, m_lo, m_hi, l_lo, l_hi, alpha_lo, alpha_hi);
#else
    softmax_update<8>(s, mx_lo, mx_hi, m_lo, m_hi, l_lo, l_hi, alpha_lo, alpha_hi);
#endif
}
// after the softmax step: the running max to max_s[at ..] for the other warpgroup (named barrier `bar`, arrive
// only), O rescaled, O += P V of the own block's half at v_addr issued (P from registers)
__device__ __forceinline__ void ws_publish_and_pv_own(float (&o)[128], const float (&s)[32], unsigned int (&p)[4][4],
                                                      float* max_s, int at, int bar, float m_lo, float m_hi, int r_lo,
                                                      int r_hi, int t, float alpha_lo, float alpha_hi, unsigned int v_addr) {
    if (t == 0) {
        max_s[at + r_lo] = m_lo;
        max_s[at + r_hi] = m_hi;
    }
    wg_bar_arrive(bar);
    rescale_o(o, alpha_lo, alpha_hi);
    p_fragments(s, p);
#pragma unroll
    for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
    wg_fence();
    wg_pv_rs(o, p, v_addr);
    wg_commit();
}
#if WS_MATH_SPLIT
// WS_MATH_SPLIT (DSV4_ATTENTION_MATH=split, docs/attn-s13b.md): ws_softmax_step then ws_publish_and_pv_own, the same
// operations on the same values in a shorter chain to the tensor cores. The running max is published (and the other
// warpgroup signalled) before the exponentials, not after them; the row sums are added after the P V issue, not
// before it. INTERLEAVE: O is rescaled first and the P V goes out one k-step (16 columns: one m64n256k16) at a time,
// each right after its 8 exponentials, so the tensor cores start on it after a quarter of the block's MUFU work
// rather than all of it (a k-step's A fragments are written after the previous wgmma was issued: a wgmma.fence before
// each). Without it the exponentials come first and O is rescaled just before the issue, as in the default: in the
// persistent body's warpgroup 1 NVRTC 13.0 serialises every wgmma of the kernel (C7515) when anything is placed
// between the rescale and the issue (13.0 and 13.5 alike), and with the sums before the issue there it serialised them
// for registers (C7512). As built, NVRTC 13.0 (the GPU image's) fits every ws kernel in 168 registers without a spill;
// 13.5 spills 4 bytes in the persistent ones. The sums and the k-steps keep the default's order: the default's bits
template <bool INTERLEAVE>
__device__ __forceinline__ void ws_softmax_pv_split(float (&o)[128], float (&s)[32], unsigned int (&p)[4][4], float scale2,
                                                    float mx_lo, float mx_hi, float& m_lo, float& m_hi, float& l_lo,
                                                    float& l_hi, float& alpha_lo, float& alpha_hi, float* max_s, int at,
                                                    int bar, int r_lo, int r_hi, int t, unsigned int v_addr) {
    const float new_lo = fmaxf(m_lo, mx_lo), new_hi = fmaxf(m_hi, mx_hi);
    const float use_lo = new_lo == -INFINITY ? 0.f : new_lo, use_hi = new_hi == -INFINITY ? 0.f : new_hi;
    alpha_lo = ws_ex2(m_lo - use_lo);
    alpha_hi = ws_ex2(m_hi - use_hi);
    m_lo = new_lo;
    m_hi = new_hi;
    if (t == 0) {
        max_s[at + r_lo] = m_lo;
        max_s[at + r_hi] = m_hi;
    }
    wg_bar_arrive(bar);
    auto exp_step = [&](int ks) {
#pragma unroll
        for (int e = 0; e < 8; ++e) s[8 * ks + e] = ws_ex2(fmaf(s[8 * ks + e], scale2, (e & 2) ? -use_hi : -use_lo));
        p[ks][0] = pack_bf16(s[8 * ks], s[8 * ks + 1]);
        p[ks][1] = pack_bf16(s[8 * ks + 2], s[8 * ks + 3]);
        p[ks][2] = pack_bf16(s[8 * ks + 4], s[8 * ks + 5]);
        p[ks][3] = pack_bf16(s[8 * ks + 6], s[8 * ks + 7]);
    };
    if (!INTERLEAVE) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) exp_step(ks);
    }
    rescale_o(o, alpha_lo, alpha_hi);
#pragma unroll
    for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
    asm volatile("" : "+r"(v_addr));  // as in wg_pv_rs
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        if (INTERLEAVE) exp_step(ks);
        if (INTERLEAVE || ks == 0) wg_fence();
        wgmma_m64n256k16_rs(o, p[ks], wg_desc(v_addr + ks * 16 * 128, WG_CHUNK_BYTES(64), 1024));
    }
    wg_commit();
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
        sum_lo += s[4 * nt] + s[4 * nt + 1];
        sum_hi += s[4 * nt + 2] + s[4 * nt + 3];
    }
    add_quad_row_sums(l_lo, l_hi, sum_lo, sum_hi, alpha_lo, alpha_hi);
}
// WS_MATH_SPLIT: store_p_swizzled from the bf16 A fragments p (p[ks][0..3]: row lo / hi of column pairs 16 ks + 2 t,
// then lo / hi of 16 ks + 8 + 2 t), the words p_fragments packed from the same s
__device__ __forceinline__ void ws_store_p_fragments(unsigned char* pb, const unsigned int (&p)[4][4], int r_lo, int r_hi,
                                                     int g, int t) {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        *reinterpret_cast<unsigned int*>(pb + r_lo * 128 + (((2 * ks) ^ g) << 4) + 4 * t) = p[ks][0];
        *reinterpret_cast<unsigned int*>(pb + r_hi * 128 + (((2 * ks) ^ g) << 4) + 4 * t) = p[ks][1];
        *reinterpret_cast<unsigned int*>(pb + r_lo * 128 + (((2 * ks + 1) ^ g) << 4) + 4 * t) = p[ks][2];
        *reinterpret_cast<unsigned int*>(pb + r_hi * 128 + (((2 * ks + 1) ^ g) << 4) + 4 * t) = p[ks][3];
    }
}
#endif
#if WS_P_STMATRIX
// WS_P_STMATRIX (DSV4_ATTENTION_P_STORE=stmatrix, docs/attn-s14b.md): a block's P as the bf16 words p (p_fragments'
// A fragments) into store_p_swizzled's layout at pb_addr by 4 stmatrix.x4 a thread instead of 16 st.shared.b32, as
// FlashMLA stores P. K-step ks's four 8 x 8 matrices (rows r_lo's 8, columns 16 ks ..), (r_hi's, 16 ks ..), (r_lo's,
// 16 ks + 8 ..), (r_hi's, 16 ks + 8 ..) are p[ks][0 .. 3] in the mma layout; lane l gives the address of row l & 7 of
// matrix l >> 3 (that row's r & 7 is l & 7: the swizzle's XOR). The same words at the same bytes: the same bits
__device__ __forceinline__ void ws_stmatrix_p(unsigned int pb_addr, const unsigned int (&p)[4][4]) {
    const int lane = threadIdx.x & 31, mat = lane >> 3;
    const int row = ((threadIdx.x >> 5) & 3) * 16 + 8 * (mat & 1) + (lane & 7);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
        stmatrix_x4(pb_addr + row * 128 + (((2 * ks + (mat >> 1)) ^ (lane & 7)) << 4), p[ks][0], p[ks][1], p[ks][2],
                    p[ks][3]);
}
#endif
// warpgroup 0 after its own P V: the pair's max from warpgroup 1, P_A, O and l to it (scale 0 while this row saw
// nothing), P_A stored for warpgroup 1 and O += P_B V_B,L (other_v) issued once P_B is stored
__device__ __forceinline__ void ws_pair_max_and_pv_other(float (&o)[128], float (&s)[32], const float* max_s,
                                                         unsigned char* p_s, unsigned int p_addr, unsigned int other_v,
                                                         int r_lo, int r_hi, int g, int t, float& m_lo, float& m_hi,
                                                         float& l_lo, float& l_hi) {
    wg_bar_sync(WS_BAR_MAX_PAIR, 256);
    const float pair_lo = max_s[64 + r_lo], pair_hi = max_s[64 + r_hi];
#if WS_SOFTMAX_FFMA
    const float sc_lo = m_lo == -INFINITY ? 0.f : ws_ex2(m_lo - pair_lo);
    const float sc_hi = m_hi == -INFINITY ? 0.f : ws_ex2(m_hi - pair_hi);
#else
    const float sc_lo = m_lo == -INFINITY ? 0.f : exp2f(m_lo - pair_lo);
    const float sc_hi = m_hi == -INFINITY ? 0.f : exp2f(m_hi - pair_hi);
#endif
    m_lo = pair_lo;
    m_hi = pair_hi;
    l_lo *= sc_lo;
    l_hi *= sc_hi;
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] *= (i & 2) ? sc_hi : sc_lo;
#if WS_P_STMATRIX
    unsigned int p_a[4][4];
    p_fragments(s, p_a);
    ws_stmatrix_p(p_addr, p_a);
#else
    store_p_swizzled(p_s, s, r_lo, r_hi, g, t);
#endif
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes, async-proxy reads
    wg_bar_arrive(WS_BAR_P_A);
    rescale_o(o, sc_lo, sc_hi);
    wg_bar_sync(WS_BAR_P_B, 256);  // P_B stored
#pragma unroll
    for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
    wg_fence();
    wg_pv_ss(o, p_addr + 64 * 128, other_v);
    wg_commit();
}
// The ws shared memory and mbarriers, shared by the one-item and the persistent body: both run one producer / math
// protocol (the ws_ helpers take these addresses) in one WS_SHARED_BYTES.
// Q, the two KV buffers, P, the warpgroups' maxima and sums, then the mbarriers: Q landed; ready[h] and free[h] of
// half buffer h = 2 buffer + (R half); PERSISTENT: q_free (Q's refill). After them WS_FLAGS_SMEM's
// u16 flag_s[block][t][part]: ready[K0L] and ready[K1R] also take the 8 flag writers' arrivals (lanes 0, 1 of the
// 4 producer warps) for blocks A and B.
template <bool PERSISTENT>
struct WsSmem {
    unsigned char* q_s;   // [64 heads] swizzled
    unsigned char* kv_s;  // [2 buffers][64 rows] swizzled
    unsigned char* p_s;   // [2 blocks][64 heads x 64 rows] bf16 swizzled
    float* max_s;         // [2 warpgroups][64 heads]
    float* sum_s;         // [2 warpgroups][64 heads]
    unsigned int q_addr, kv_addr, p_addr, bar_q;
    unsigned int q_free;      // PERSISTENT only
    unsigned int flags_addr;  // WS_FLAGS_SMEM only

    __device__ __forceinline__ explicit WsSmem(unsigned char* smem)
        : q_s(smem), kv_s(q_s + WG_MAT_BYTES), p_s(kv_s + 2 * WG_MAT_BYTES),
          max_s(reinterpret_cast<float*>(p_s + 2 * 64 * 128)), sum_s(max_s + 2 * 64),
          q_addr((unsigned int)__cvta_generic_to_shared(q_s)), kv_addr((unsigned int)__cvta_generic_to_shared(kv_s)),
          p_addr((unsigned int)__cvta_generic_to_shared(p_s)),
          bar_q((unsigned int)__cvta_generic_to_shared(sum_s + 2 * 64)), q_free(bar_q + 72),
          flags_addr(bar_q + (PERSISTENT ? 80 : 72)) {}
    __device__ __forceinline__ unsigned int ready(int h) const { return bar_q + 8 + 8 * h; }
    __device__ __forceinline__ unsigned int free_bar(int h) const { return bar_q + 40 + 8 * h; }
    // thread 0 initialises, every thread waits for it
    __device__ __forceinline__ void init_barriers() const {
        if (threadIdx.x == 0) {
            mbar_init(bar_q, WS_Q_TMA ? 1 : 128);  // the producer's 128 noinc arrivals, or WS_Q_TMA's expect_tx
            for (int h = 0; h < 4; ++h) {
                mbar_init(ready(h), WS_FLAGS_SMEM && (h == 0 || h == 3) ? 136 : 128);
                mbar_init(free_bar(h), 128);
            }
            if (PERSISTENT) mbar_init(q_free, 256);
            mbar_init_fence();
        }
        __syncthreads();
    }
};
#if WS_PRODUCER_LEAN
// WS_PRODUCER_LEAN (DSV4_ATTENTION_PRODUCER=lean, docs/attn-s14d.md): between a half buffer's free wait and its ready
// arrival the producer issues only that half's copies (16 a thread, one predicate a row) and the arrivals, as FlashMLA's
// does. Everything that needs only the indices is made before the pair's first free wait, where the producer waits
// anyway: the 8 rows' 64-bit source addresses (the right half at + 512, an immediate offset of the copies) and both
// blocks' flag words (4 ballots and a few shifts a block). A pair's 8 index loads take one base pointer and immediate
// offsets. The same copies, flags, barriers and order as the default producer: the same bits.
struct WsLeanProducer {
    const unsigned char* kv_unit;  // kv + this thread's 16-byte unit of a 128-byte line
    const int* idx_rows;           // the item's (piece's) index list + row0
    int rem;                       // its entries from row0 on (n - row0)
    unsigned int dst0;             // as ws_copy_half's
    unsigned long long policy;
    unsigned int flag_at;  // WS_FLAGS_SMEM: this lane's u16 of block A's flag words (block B's 16 bytes on)
    int writer;            // lanes 0, 1 of each warp store the flag words (ws_publish_flags' writers)
    int ids[2][4];         // the pair's: blocks A, B, rows row0 + 16 k (-1 masked: zero-filled)
    const unsigned char* src[2][4];  // their left halves at this thread's unit
    unsigned int flags[2];           // blocks A, B: the word this lane stores (writers only)

    __device__ __forceinline__ WsLeanProducer(const unsigned char* kv_bytes, int lt, unsigned int dst0_,
                                              unsigned long long policy_, unsigned int flags_addr)
        : kv_unit(kv_bytes + (lt & 7) * 16), idx_rows(nullptr), rem(0), dst0(dst0_), policy(policy_),
          flag_at(flags_addr + ((2 * ((lt >> 5) & 1) + (lt & 1)) * 2 + ((lt >> 6) & 1)) * 2), writer((lt & 31) < 2) {}
    // the item's (piece's) list: n entries at idx_row
    __device__ __forceinline__ void start(const int* idx_row, int n, int row0) {
        idx_rows = idx_row + row0;
        rem = n - row0;
    }
    // pair `pair`'s indices (-1 past the list: no load), as ws_load_ids
    __device__ __forceinline__ void load_ids(int pair) {
        const int* rows = idx_rows + pair * 128;
        const int left = rem - pair * 128;
#pragma unroll
        for (int blk = 0; blk < 2; ++blk)
#pragma unroll
            for (int k = 0; k < 4; ++k) ids[blk][k] = blk * 64 + 16 * k < left ? __ldg(rows + blk * 64 + 16 * k) : -1;
    }
    // ws_flag_part's word of this lane (l = lane & 1 of the writers) from block blk's ids. The 8 lanes 8 i .. 8 i + 7
    // of a warp vote the same row (i, k), so ballot k's bits 16 l + 7 and 16 l + 8 are rows i = 2 l and 2 l + 1
    // (e = 0, 1): masked by 0x180 << 16 l, one shift puts them at bits 16 l + 4 k + e
    __device__ __forceinline__ unsigned int flag_word(int blk, int lt) const {
        const unsigned int l16 = (lt & 1) * 16, mask = 0x180u << l16;
        unsigned int b[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) b[k] = __ballot_sync(0xffffffffu, ids[blk][k] >= 0) & mask;
        return (((b[0] >> 7) | (b[1] >> 3) | (b[2] << 1) | (b[3] << 5)) >> l16) << ((lt >> 5) & 2);
    }
    // the pair's addresses and flag words, before its first free wait: the empty asm makes each value opaque there,
    // so the compiler neither sinks its arithmetic past the wait nor redoes it after
    __device__ __forceinline__ void prepare(int lt) {
#pragma unroll
        for (int blk = 0; blk < 2; ++blk) {
#pragma unroll
            for (int k = 0; k < 4; ++k)  // one IMAD.WIDE.U32 a row (C++'s form took 4: a shift, LOP3 and LEA pair)
                asm volatile("mad.wide.u32 %0, %1, %2, %3;\n"
                             : "=l"(src[blk][k])
                             : "r"(max(ids[blk][k], 0)), "n"(DIM * 2), "l"(kv_unit));
#if WS_FLAGS_SMEM
            flags[blk] = flag_word(blk, lt);
            asm volatile("" : "+r"(flags[blk]));
#endif
        }
    }
    // half buffer h (2 buffer + R half) after its free wait: 4 copies a row (ignore-src for a masked row: zeros, as
    // src-size 0 writes them), the ready arrival, then (K0L, K1R) block h / 2's flag word and its writers' arrival
    template <bool PERSISTENT>
    __device__ __forceinline__ void fill(const WsSmem<PERSISTENT>& ws, int h, unsigned int parity) const {
        const int blk = h >> 1, r_half = h & 1;
        mbar_wait(ws.free_bar(h), parity);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const unsigned int dst = dst0 + blk * WG_MAT_BYTES + r_half * 4 * WG_CHUNK_BYTES(64) + k * 16 * 128;
            asm volatile(
                "{\n.reg .pred z;\nsetp.lt.s32 z, %2, 0;\n"
                "cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, z, %3;\n"
                "cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0+%4], [%1+128], 16, z, %3;\n"
                "cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0+%5], [%1+256], 16, z, %3;\n"
                "cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0+%6], [%1+384], 16, z, %3;\n}\n" ::"r"(dst),
                "l"(src[blk][k] + r_half * 512), "r"(ids[blk][k]), "l"(policy), "n"(WG_CHUNK_BYTES(64)),
                "n"(2 * WG_CHUNK_BYTES(64)), "n"(3 * WG_CHUNK_BYTES(64))
                : "memory");
        }
        cp_async_mbar_arrive(ws.ready(h));
#if WS_FLAGS_SMEM
        if (h == 0 || h == 3)  // (flags written after the free wait: the reader has read the last pair's)
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %3, 0;\n@p st.shared.u16 [%0], %1;\n"
                         "@p mbarrier.arrive.shared::cta.b64 _, [%2];\n}\n" ::"r"(flag_at + blk * 16),
                         "h"((unsigned short)flags[blk]), "r"(ws.ready(h)), "r"(writer)
                         : "memory");
#endif
    }
};
#endif
// S of warpgroup half's block into s: the half its producer copy lands first, then the other (ready barriers
// at bar_q + 8 + 8 h, free[K1L] at bar_q + 56). release_k1l (warpgroup 0, issuing under its P_B V_B,L): once that
// P V is done (the group before the first half's), K1L is freed before the second half's wait, so its refill is
// not held by it. WS_FLAGS_SMEM: the flags of the block whose S is issued to flag_word, read after the first wait
// (ready[K0L] for warpgroup 0, ready[K1R] for warpgroup 1: the barriers the flag writers arrive on); the switches
// are #if rather than constant conditions: with them off the kernel's text, and so its SASS, is the measured one
__device__ __forceinline__ void ws_issue_s(float (&s)[32], float (&o)[128], unsigned int parity, int first,
                                           bool release_k1l, int half, int t, unsigned int q_addr, unsigned int kv_addr,
                                           unsigned int bar_q, unsigned int& flag_word, unsigned int flags_addr) {
    const unsigned int k_addr = kv_addr + half * WG_MAT_BYTES;
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) wg_fence_operand(s[i]);
    mbar_wait(bar_q + 8 + 8 * (2 * half + first), parity);
#if WS_FLAGS_SMEM
    flag_word = ws_flag_word(flags_addr, half, t);
#endif
    // the copies were generic-proxy writes (cp.async), wgmma reads through the async proxy;
    // FlashMLA relies on the mbarrier alone (WS_READY_FENCE 0, opt-in until timed)
    if (WS_READY_FENCE) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    wg_fence();
    wg_s_half(s, q_addr, k_addr, 4 * first);
    wg_commit();
    if (release_k1l) {
        wg_wait1();
#pragma unroll
        for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
        mbar_arrive(bar_q + 40 + 8 * 2);  // K1L read for the last time
    }
    mbar_wait(bar_q + 8 + 8 * (2 * half + (first ^ 1)), parity);
    if (WS_READY_FENCE) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    // (NVRTC 13.0 injects this fence itself across the wait loop, C7519; 13.5 does not need it)
    wg_fence();
    wg_s_half(s, q_addr, k_addr, 4 * (first ^ 1));
    wg_commit();
}
// the row sums of both warpgroups' blocks, added in the same order in both (named barrier WS_BAR_SUMS)
__device__ __forceinline__ void ws_sum_both_halves(float* sum_s, int half, int r_lo, int r_hi, int t, float& l_lo,
                                                   float& l_hi) {
    if (t == 0) {
        sum_s[half * 64 + r_lo] = l_lo;
        sum_s[half * 64 + r_hi] = l_hi;
    }
    wg_bar_sync(WS_BAR_SUMS, 256);
    l_lo = sum_s[r_lo] + sum_s[64 + r_lo];
    l_hi = sum_s[r_hi] + sum_s[64 + r_hi];
}
#if WS_PERSISTENT
// WS_PERSISTENT (docs/attn-s11.md, (c)): the unsplit ws kernel as a persistent grid, at most one CTA an SM,
// each looping over the (row, head block) items blockIdx.x, + gridDim.x, ... (item = head block * batch +
// row, the order the one-item grid ran them in). The pair schedule is the one-item kernel's; across items:
// - the global pair count g carries the ready / free parities on; Q has its own phase an item (bar_q, the
//   producer's 128 noinc arrivals) and is refilled once both math warpgroups' last S of the item is done
//   (q_free: 256 arrivals, each math thread after its last finish_s), under that item's last P V;
// - an item's first pair fills buffer 0 first (K0L, K0R, K1R, K1L): buffer 1 may still hold the last item's
//   output, which the epilogue stages there (64 rows at pitch 1024, 16-byte unit u of row r at
//   ((u + r) mod 64), so a stmatrix's 8 rows of one unit land on 8 bank groups) once both warpgroups' last
//   P V are done (the sums barrier); the staged rows 0..31 lie in K1L, 32..63 in K1R, and the last pair's
//   free[K1L] / free[K1R] arrivals come from math warps 0..3 / 4..7's copying lanes (count 32 each) after
//   their bulk copies have read them, not from the warpgroups after their P V;
// - O, m, l restart an item; named barriers as in the one-item kernel (SUMS twice: sums, then the staging).
// Shared memory: the kernel's, then q_free (8 bytes) and the flags (WS_FLAGS_SMEM) after the 9 mbarriers.
// WS_ORDER_ROWS (DSV4_ATTENTION_ORDER=rows, docs/attn-s14a.md): item = row * head blocks + head block instead, as
// FlashMLA's grid orders its CTAs, so at H 128 a row's two head blocks run at once on CTAs c and c + 1 and the
// second gathers the rows the first has just brought to L2 (head-block-major, they run 31 rounds apart at prefill).
// (Index: int, or unsigned where the item is `item + gridDim.x`: the arithmetic the default's text had there)
template <class Index>
struct WsItem {
    Index b, hb;  // the query row, the head block
};
template <class Index>
__device__ __forceinline__ WsItem<Index> ws_item(Index item, int batch, int head_blocks) {
#if WS_ORDER_ROWS
    return {item / head_blocks, item % head_blocks};
#else
    (void)head_blocks;
    return {item % batch, item / batch};
#endif
}
template <bool HAS_SINK>
__device__ __forceinline__ void ws_persistent(const unsigned short* q, const unsigned short* kv, const int* indices,
                                              const float* sink, unsigned short* out, float* lse, float* part_out,
                                              float* part_lse, int K, int heads, int chunk, float sm_scale, int batch,
                                              int kv_policy WS_Q_MAP_REF WS_OUT_MAP_REF) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* smem = wg_smem_base(smem_raw);
    const WsSmem<true> ws(smem);
    ws.init_barriers();
    pdl_launch_dependents();

    const int items = batch * (heads / 64);
    const int n = max(K, 0);  // unsplit: every item's list is the whole row
#if WS_TAIL_SPLIT
    // the tail items' splits (ws_piece): chunk >= n (the host's choice where no split pays) leaves them whole
    const int full = items - items % gridDim.x, tail_splits = chunk > 0 && chunk < n ? (n + chunk - 1) / chunk : 1;
    const int work = full + (items - full) * tail_splits;
#endif
#if WS_Q_TMA
    // Q of this CTA's piece w (an item, or under WS_TAIL_SPLIT a split of one) by one math thread: the first now (thread
    // 0), each next one by refill_q (q_free complete: both warpgroups' last S are done with Q)
#if WS_TAIL_SPLIT
    const int q_pieces = work;
#else
    const int q_pieces = items;
#endif
    auto issue_q = [&](int w) {
#if WS_TAIL_SPLIT
        const int item = ws_piece(w, full, tail_splits, n, chunk).item;
#else
        const int item = w;
#endif
        const auto at = ws_item(item, batch, heads / 64);
        ws_q_tma(q_map, ws.q_addr, ws.bar_q, at.b * heads + at.hb * 64);
    };
    if (threadIdx.x == 0 && (int)blockIdx.x < q_pieces) issue_q(blockIdx.x);
#endif
    const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x >> 7, 0), lt = threadIdx.x & 127;
    auto pair_count = [&]() {
        int m = n;
        asm volatile("" : "+r"(m));
        return (m + 127) / 128;
    };

    if (warpgroup == 2) {  // the producer
        setmaxnreg_dec<WS_PRODUCER_REGS>();
        const int pairs = pair_count();
        const int unit = lt & 7, row0 = lt >> 3;
        const unsigned int dst0 = ws.kv_addr + row0 * 128 + ((unit ^ (row0 & 7)) << 4);
        const unsigned char* kv_bytes = reinterpret_cast<const unsigned char*>(kv);
        const unsigned long long policy = ws_kv_policy(kv_policy);
#if WS_PRODUCER_LEAN
        WsLeanProducer lean(kv_bytes, lt, dst0, policy, ws.flags_addr);
#else
        int ids[2][4];
#endif
        int g = 0, it = 0;  // global pair count, this CTA's item count
#if WS_TAIL_SPLIT
        for (int w = blockIdx.x; w < work; w += gridDim.x, ++it) {
            const WsPiece piece = ws_piece(w, full, tail_splits, n, chunk);
            const int item = piece.item, b = item % batch, hb = item / batch;
            const int* idx_row = indices + (long long)b * K + piece.k0;
            const int n = piece.n, pairs = (n + 127) / 128;  // this piece's (a split's, or the item's)
#else
        for (int item = blockIdx.x; item < items; item += gridDim.x, ++it) {
            const auto at = ws_item(item, batch, heads / 64);
            const int b = at.b, hb = at.hb;
            const int* idx_row = indices + (long long)b * K;
#endif
#if WS_PRODUCER_AHEAD
            // the item's pair 0 indices before the q_free wait (reached after the last item's last fill, about a pair
            // before Q is free) and the Q copies, so neither waits for the other; the next item's index list (and
            // the first item's own) to L2 now, so every later pair's index loads are L2 hits (the 8 registers of
            // a second pair in flight, as the split kernel keeps, spilled here)
            if (it == 0) ws_prefetch_ids_l2(idx_row, n, lt);
#if !WS_TAIL_SPLIT  // (under the tail split the next piece's index row is not prefetched)
            if (item + (int)gridDim.x < items)
                ws_prefetch_ids_l2(indices + (long long)ws_item(item + gridDim.x, batch, heads / 64).b * K, n, lt);
#endif
            ws_load_ids(ids, idx_row, n, row0, 0);
#if WS_PRODUCER_PREFETCH
            ws_prefetch_rows_l2(ids, kv_bytes, unit);  // (waits for those loads, under the last item's last pair)
#endif
#endif
#if WS_Q_TMA
            (void)hb;  // (Q's rows: the math thread's issue_q)
#else
            if (it > 0) mbar_wait(ws.q_free, (it - 1) & 1);  // the last item's S are done with Q
            {
                const unsigned char* q_rows = reinterpret_cast<const unsigned char*>(q) + ((long long)b * heads + hb * 64) * DIM * 2;
                const int piece = lt & 63;
#pragma unroll 8
                for (int r = lt >> 6; r < 64; r += 2)
                    cp_async16(ws.q_s + swizzled_offset(64, r, piece), q_rows + r * DIM * 2 + piece * 16);
                cp_async_mbar_arrive(ws.bar_q);
            }
#endif
#if WS_PRODUCER_LEAN
            lean.start(idx_row, n, row0);
            auto load_ids = [&](int pair) { lean.load_ids(pair); };
            auto fill = [&](int h, unsigned int parity) { lean.fill(ws, h, parity); };
#else
#if !WS_PRODUCER_AHEAD
            auto load_ids = [&](int pair) { ws_load_ids(ids, idx_row, n, row0, pair); };
#endif
            // half buffer h (2 buffer + R half) of the pair in ids, after its free wait; the flags of block
            // h / 2 with K0L / K1R (as in the one-item kernel). Called with constant h only (inlined, ids[h / 2]
            // stays in registers; a runtime h put ids on the stack)
            auto fill = [&](int h, unsigned int parity) {
                const int blk = h >> 1, r_half = h & 1;
                mbar_wait(ws.free_bar(h), parity);
#if WS_FLAGS_SMEM
                if (h == 0 || h == 3) ws_publish_flags(ids, blk, lt, ws.flags_addr, ws.ready(h));
#endif
                ws_copy_half(ids, blk, r_half, kv_bytes, unit, dst0, policy);
                cp_async_mbar_arrive(ws.ready(h));
            };
#endif
#if !WS_PRODUCER_AHEAD
            load_ids(0);
#endif
            for (int j = 0; j < pairs; ++j, ++g) {
                const unsigned int parity = (g & 1) ^ 1;
#if WS_PRODUCER_LEAN
                lean.prepare(lt);  // (waits for the pair's index loads, then the first free wait)
#endif
                fill(0, parity);
                if (j == 0) {  // an item's first pair: buffer 0 before buffer 1 (the last item's staged output)
                    fill(1, parity);
                    fill(3, parity);
                } else {
                    fill(3, parity);
                    fill(1, parity);
                }
                fill(2, parity);
#if WS_PRODUCER_AHEAD
                if (j + 1 < pairs) {  // (the next item's pair 0: at its top)
                    ws_load_ids(ids, idx_row, n, row0, j + 1);
#if WS_PRODUCER_PREFETCH
                    ws_prefetch_rows_l2(ids, kv_bytes, unit);  // waits for those loads (L2 hits: the list prefetch)
#endif
                }
#else
                load_ids(j + 1);
#endif
            }
        }
        cp_async_commit();
        cp_async_wait<0>();
        return;
    }

    setmaxnreg_inc<WS_MATH_REGS>();
    const int pairs = pair_count();
    const int half = warpgroup;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r_lo = (warp & 3) * 16 + g, r_hi = r_lo + 8;
    const float scale2 = sm_scale * LOG2E;
    float o[128];
    float s[32];
    unsigned int p[4][4];
    int g0 = 0, it = 0;  // the item's first global pair, this CTA's item count
#if WS_TAIL_SPLIT
    for (int w = blockIdx.x; w < work; w += gridDim.x, ++it) {
        const WsPiece piece = ws_piece(w, full, tail_splits, n, chunk);
        const int item = piece.item, b = item % batch, hb = item / batch;
        const int* idx_row = indices + (long long)b * K + piece.k0;
        const int n = piece.n, pairs = (n + 127) / 128;  // as the producer's
#else
    for (int item = blockIdx.x; item < items; item += gridDim.x, ++it, g0 += pairs) {
        const auto at = ws_item(item, batch, heads / 64);
        const int b = at.b, hb = at.hb;
        const int* idx_row = indices + (long long)b * K;
#endif
        auto valid_bits = [&](int j) { return ws_valid_bits(idx_row, n, j, half, t); };
        unsigned int flag_word = 0;  // (read with WS_FLAGS_SMEM only)
        // j the item's pair (the parity from g0 + j)
        auto issue_s = [&](int j, int first, bool release_k1l) {
            ws_issue_s(s, o, (g0 + j) & 1, first, release_k1l, half, t, ws.q_addr, ws.kv_addr, ws.bar_q, flag_word, ws.flags_addr);
        };
#pragma unroll
        for (int i = 0; i < 128; ++i) o[i] = 0.f;
        float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
        // this warpgroup's S landed; after the item's last, Q is free (q_free)
        auto finish_s = [&](unsigned int valid, float& mx_lo, float& mx_hi, bool last) {
            wg_wait0();
#pragma unroll
            for (int i = 0; i < 32; ++i) wg_fence_operand(s[i]);
            if (last) mbar_arrive(ws.q_free);
            ws_row_max(s, valid, scale2, mx_lo, mx_hi);
        };
        auto publish_and_pv_own = [&](int at, int bar, float alpha_lo, float alpha_hi, unsigned int v_addr) {
            ws_publish_and_pv_own(o, s, p, ws.max_s, at, bar, m_lo, m_hi, r_lo, r_hi, t, alpha_lo, alpha_hi, v_addr);
        };
#if WS_Q_TMA
        // pairs == 0 only where K == 0, so in every piece: no S reads Q, nothing refills it, only the first Q (issued
        // above) is waited for (a refill_q for that case, anywhere in the loop, made ptxas serialise the wgmmas, C7518)
        if (pairs > 0 || it == 0) mbar_wait(ws.bar_q, it & 1);
#else
        mbar_wait(ws.bar_q, it & 1);
#endif
        if (pairs == 0) mbar_arrive(ws.q_free);  // no S reads this item's Q
#if WS_Q_TMA
#if WS_TAIL_SPLIT
        const int next_piece = w + (int)gridDim.x;
#else
        const int next_piece = item + (int)gridDim.x;
#endif
        // the next piece's Q by warpgroup 1's thread 0 once this one's S are done with it (q_free), where no wgmma of
        // its warpgroup is in flight (under warpgroup 0's last P_B V_B,L, issuing it serialised the wgmmas: C7518,
        // WG.DP in a divergent path)
        auto refill_q = [&]() {
            if (threadIdx.x == 128 && next_piece < q_pieces) {
                mbar_wait(ws.q_free, it & 1);
                issue_q(next_piece);
            }
        };
#endif
        if (half == 0) {
            const unsigned int own_v = ws.kv_addr, other_v = ws.kv_addr + WG_MAT_BYTES;
#if WS_FLAGS_SMEM
            if (pairs > 0) issue_s(0, 0, false);
            unsigned int valid = flag_word;
#else
            unsigned int valid = valid_bits(0);
            if (pairs > 0) issue_s(0, 0, false);
#endif
            for (int j = 0; j < pairs; ++j) {
                float mx_lo, mx_hi, alpha_lo, alpha_hi;
                finish_s(valid, mx_lo, mx_hi, j + 1 == pairs);
#if WS_MATH_SPLIT
                ws_softmax_pv_split<true>(o, s, p, scale2, mx_lo, mx_hi, m_lo, m_hi, l_lo, l_hi, alpha_lo, alpha_hi, ws.max_s, 0,
                                          WS_BAR_MAX_A, r_lo, r_hi, t, own_v);
#else
                ws_softmax_step(s, scale2, mx_lo, mx_hi, m_lo, m_hi, l_lo, l_hi, alpha_lo, alpha_hi);
                publish_and_pv_own(0, WS_BAR_MAX_A, alpha_lo, alpha_hi, own_v);
#endif
                wg_wait0();
#pragma unroll
                for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
                mbar_arrive(ws.free_bar(0));
                ws_pair_max_and_pv_other(o, s, ws.max_s, ws.p_s, ws.p_addr, other_v, r_lo, r_hi, g, t, m_lo, m_hi, l_lo, l_hi);
                if (j + 1 < pairs) {
#if WS_FLAGS_SMEM
                    issue_s(j + 1, 0, true);
                    valid = flag_word;
#else
                    valid = valid_bits(j + 1);
                    issue_s(j + 1, 0, true);
#endif
                } else {
                    wg_wait0();  // K1L's last read done; freed after the epilogue's copies out of it
#pragma unroll
                    for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
                }
            }
        } else {
            const unsigned int own_v = ws.kv_addr + WG_MAT_BYTES + WS_HALF_BYTES, other_v = ws.kv_addr + WS_HALF_BYTES;
            for (int j = 0; j < pairs; ++j) {
#if WS_FLAGS_SMEM
                issue_s(j, 1, false);
                const unsigned int valid = flag_word;
#else
                const unsigned int valid = valid_bits(j);
                issue_s(j, 1, false);
#endif
                float mx_lo, mx_hi, alpha_lo, alpha_hi;
                finish_s(valid, mx_lo, mx_hi, j + 1 == pairs);
                wg_bar_sync(WS_BAR_MAX_A, 256);
#if WS_Q_TMA
                if (j + 1 == pairs) refill_q();  // warpgroup 0 published its max after its last S landed: q_free is done
#endif
#if WS_MATH_SPLIT
                ws_softmax_pv_split<false>(o, s, p, scale2, fmaxf(mx_lo, ws.max_s[r_lo]), fmaxf(mx_hi, ws.max_s[r_hi]), m_lo, m_hi,
                                           l_lo, l_hi, alpha_lo, alpha_hi, ws.max_s, 64, WS_BAR_MAX_PAIR, r_lo, r_hi, t, own_v);
                ws_store_p_fragments(ws.p_s + 64 * 128, p, r_lo, r_hi, g, t);
#else
                ws_softmax_step(s, scale2, fmaxf(mx_lo, ws.max_s[r_lo]), fmaxf(mx_hi, ws.max_s[r_hi]), m_lo, m_hi, l_lo, l_hi,
                                alpha_lo, alpha_hi);
                publish_and_pv_own(64, WS_BAR_MAX_PAIR, alpha_lo, alpha_hi, own_v);
#if WS_P_STMATRIX
                ws_stmatrix_p(ws.p_addr + 64 * 128, p);  // p: the own P V's A fragments (read, not written, in flight)
#else
                store_p_swizzled(ws.p_s + 64 * 128, s, r_lo, r_hi, g, t);
#endif
#endif
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                wg_bar_sync(WS_BAR_P_A, 256);
                wg_pv_ss(o, ws.p_addr, other_v);
                wg_commit();
                wg_bar_arrive(WS_BAR_P_B);
                wg_wait1();
                if (j + 1 < pairs) mbar_arrive(ws.free_bar(3));  // the last pair's: after the epilogue's copies
                wg_wait0();
#pragma unroll
                for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
                mbar_arrive(ws.free_bar(1));
            }
        }
        ws_sum_both_halves(ws.sum_s, half, r_lo, r_hi, t, l_lo, l_hi);  // and both last P V done: buffer 1 is free
#if WS_TAIL_SPLIT
        g0 += pairs;
        if (piece.split >= 0) {  // a tail item's split: its partial, merged by the combine kernel after the grid
            ws_tail_partial(o, m_lo, m_hi, l_lo, l_hi, item - full, piece.split, tail_splits, hb, part_out, part_lse,
                            heads, smem, w + (int)gridDim.x >= work, pairs > 0 ? ws.free_bar(half == 0 ? 2 : 3) : 0u);
            continue;
        }
#endif
        ws_persistent_epilogue<HAS_SINK>(o, m_lo, m_hi, l_lo, l_hi, ws.kv_addr + WG_MAT_BYTES, b, hb, sink, out, lse, heads,
                                         pairs > 0 ? ws.free_bar(half == 0 ? 2 : 3) : 0u WS_OUT_MAP_ARG);
    }
}
#endif

// A row's two splits launched as a 2-CTA cluster (cluster dims 1 x 1 x 2 given at launch: rank = blockIdx.z)
// and merge through distributed shared memory instead of fp32 partials in global memory and the combine kernel.
// After both CTAs' main loops (cluster barrier 1: the peer's Q and buffers are free), warpgroup `1 - rank` stores
// its unnormalised O half (dims (1 - rank) * 256 ..), its running max and sum into the peer's shared memory;
// after cluster barrier 2 warpgroup `rank` of each CTA merges dims rank * 256 .. + 255 of both splits, in split
// order (so the bits do not depend on which CTA merges), and writes them (and rank 0 the lse). The producer
// warpgroup joins both cluster barriers (every thread of the cluster arrives).
#define WS_MERGE_PITCH (256 * 4 + 32)                  // a received row: 256 fp32 (264 words: LDS.64 conflict-free)
#define WS_MERGE_ML_AT (64 * WS_MERGE_PITCH)           // then (m, l) of each of the 64 rows
#define WS_MERGE_OUT_AT (WS_MERGE_ML_AT + 64 * 8 + 128)  // then the merged bf16 rows (WS_STAGE_BF16_PITCH)
static_assert(WS_MERGE_OUT_AT % 128 == 0 && WS_MERGE_OUT_AT + 64 * WS_STAGE_BF16_PITCH <= 3 * WG_MAT_BYTES,
              "ws merge: the received half, its (m, l) and the merged rows fit in Q and the buffers");
__device__ __forceinline__ unsigned int cluster_ctas() {  // 1 where the launch gave no cluster
    unsigned int n;
    asm("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
    return n;
}
// cluster_sync_all's barrier without .aligned: the producer warpgroup reaches it at its own place in the code
__device__ __forceinline__ void ws_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void st_cluster_f32x2(unsigned int remote, float x, float y) {
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(remote), "f"(x), "f"(y) : "memory");
}
template <bool HAS_SINK>
__device__ __forceinline__ void ws_cluster_merge(float (&o)[128], float m_lo, float m_hi, float l_lo, float l_hi,
                                                 unsigned char* stage, const float* sink, unsigned short* out,
                                                 float* lse, int heads) {
    const int rank = blockIdx.z, b = blockIdx.x, h0 = blockIdx.y * 64;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3, half = warp >> 2;
    const int r_lo = (warp & 3) * 16 + g, r_hi = r_lo + 8;
    const unsigned int stage_addr = (unsigned int)__cvta_generic_to_shared(stage);
    ws_cluster_sync();  // 1: both CTAs are done with Q and the buffers
    if (half != rank) {  // the half the peer merges: to its shared memory
        const unsigned int peer = cluster_map(stage_addr, rank ^ 1);  // the window is linear: offsets carry over
        const unsigned int lo = peer + r_lo * WS_MERGE_PITCH + 8 * t, hi = lo + 8 * WS_MERGE_PITCH;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            st_cluster_f32x2(lo + 32 * j, o[4 * j], o[4 * j + 1]);
            st_cluster_f32x2(hi + 32 * j, o[4 * j + 2], o[4 * j + 3]);
        }
        if (t == 0) {
            st_cluster_f32x2(peer + WS_MERGE_ML_AT + 8 * r_lo, m_lo, l_lo);
            st_cluster_f32x2(peer + WS_MERGE_ML_AT + 8 * r_hi, m_hi, l_hi);
        }
    }
    ws_cluster_sync();  // 2: the peer's half landed here
    if (half != rank) return;
    const float2 peer_lo = *reinterpret_cast<const float2*>(stage + WS_MERGE_ML_AT + 8 * r_lo);
    const float2 peer_hi = *reinterpret_cast<const float2*>(stage + WS_MERGE_ML_AT + 8 * r_hi);
    // split 0's and split 1's (m, l): own is split `rank`
    const float m0_lo = rank ? peer_lo.x : m_lo, m1_lo = rank ? m_lo : peer_lo.x;
    const float l0_lo = rank ? peer_lo.y : l_lo, l1_lo = rank ? l_lo : peer_lo.y;
    const float m0_hi = rank ? peer_hi.x : m_hi, m1_hi = rank ? m_hi : peer_hi.x;
    const float l0_hi = rank ? peer_hi.y : l_hi, l1_hi = rank ? l_hi : peer_hi.y;
    const float mx_lo = fmaxf(m0_lo, m1_lo), mx_hi = fmaxf(m0_hi, m1_hi);
    const float w0_lo = m0_lo == -INFINITY ? 0.f : exp2f(m0_lo - mx_lo), w1_lo = m1_lo == -INFINITY ? 0.f : exp2f(m1_lo - mx_lo);
    const float w0_hi = m0_hi == -INFINITY ? 0.f : exp2f(m0_hi - mx_hi), w1_hi = m1_hi == -INFINITY ? 0.f : exp2f(m1_hi - mx_hi);
    const float sum_lo = __fadd_rn(__fmul_rn(l0_lo, w0_lo), __fmul_rn(l1_lo, w1_lo));
    const float sum_hi = __fadd_rn(__fmul_rn(l0_hi, w0_hi), __fmul_rn(l1_hi, w1_hi));
    float denom_lo = sum_lo > 0.f ? sum_lo : 1.f, denom_hi = sum_hi > 0.f ? sum_hi : 1.f;
    if (HAS_SINK) {
        denom_lo = sink_denominator(sum_lo, mx_lo, sink[h0 + r_lo]);
        denom_hi = sink_denominator(sum_hi, mx_hi, sink[h0 + r_hi]);
    }
    const float own_lo = rank ? w1_lo : w0_lo, other_lo = rank ? w0_lo : w1_lo;
    const float own_hi = rank ? w1_hi : w0_hi, other_hi = rank ? w0_hi : w1_hi;
    const float* recv_lo = reinterpret_cast<const float*>(stage + r_lo * WS_MERGE_PITCH) + 2 * t;
    const float* recv_hi = recv_lo + 8 * WS_MERGE_PITCH / 4;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const float2 p_lo = *reinterpret_cast<const float2*>(recv_lo + 8 * j);
        const float2 p_hi = *reinterpret_cast<const float2*>(recv_hi + 8 * j);
        // split 0's term first: the same bits in the CTA that merges these dims whichever its rank
        const float a0 = __fmul_rn(o[4 * j], own_lo), b0 = __fmul_rn(p_lo.x, other_lo);
        const float a1 = __fmul_rn(o[4 * j + 1], own_lo), b1 = __fmul_rn(p_lo.y, other_lo);
        const float a2 = __fmul_rn(o[4 * j + 2], own_hi), b2 = __fmul_rn(p_hi.x, other_hi);
        const float a3 = __fmul_rn(o[4 * j + 3], own_hi), b3 = __fmul_rn(p_hi.y, other_hi);
        o[4 * j] = rank ? __fadd_rn(b0, a0) : __fadd_rn(a0, b0);
        o[4 * j + 1] = rank ? __fadd_rn(b1, a1) : __fadd_rn(a1, b1);
        o[4 * j + 2] = rank ? __fadd_rn(b2, a2) : __fadd_rn(a2, b2);
        o[4 * j + 3] = rank ? __fadd_rn(b3, a3) : __fadd_rn(a3, b3);
    }
    ws_stage_bf16(stage_addr + WS_MERGE_OUT_AT, o, 1.f / denom_lo, 1.f / denom_hi);
    // this warpgroup's 64 half rows (512 bytes each, 1 KB apart in out): lane 0 of each warp copies 16
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    wg_bar_sync(6, 128);
    if (lane == 0) {
        unsigned char* dst = reinterpret_cast<unsigned char*>(out + ((long long)b * heads + h0) * DIM) + rank * 512;
        const unsigned int src = stage_addr + WS_MERGE_OUT_AT + rank * 512;
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            const int row = 16 * (warp & 3) + r;
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 512;\n" ::"l"(dst + row * DIM * 2),
                         "r"(src + row * WS_STAGE_BF16_PITCH)
                         : "memory");
        }
        bulk_commit();
        bulk_wait_read<0>();
    }
    if (rank == 0 && t == 0) {
        const long long row = (long long)b * heads + h0 + r_lo;
        lse[row] = lse_of(sum_lo, mx_lo);
        lse[row + 8] = lse_of(sum_hi, mx_hi);
    }
}
#endif  // WG_AVAILABLE: the ws helpers, the persistent body and the cluster merge

// (three headers, so that each parameter list reads as plain C: tests/test_cuda_loader.py finds SIGNATURES' list among
// them, tests/test_attention_q_tma.py checks the second is the first plus Q's tensor map, the third the second plus
// out's, WS_OUT_TMA)
template <bool HAS_SINK, bool SPLIT>
#if !WS_Q_TMA
__global__ void __launch_bounds__(WS_THREADS, 1)
    dsv4_sparse_attention_ws(const unsigned short* q, const unsigned short* kv, const int* indices, const float* sink,
                             unsigned short* out, float* lse, float* part_out, float* part_lse, int K, int heads,
                             int chunk, float sm_scale, int batch, int kv_policy) {
#elif !WS_OUT_TMA
__global__ void __launch_bounds__(WS_THREADS, 1)
    dsv4_sparse_attention_ws(const unsigned short* q, const unsigned short* kv, const int* indices, const float* sink,
                             unsigned short* out, float* lse, float* part_out, float* part_lse, int K, int heads,
                             int chunk, float sm_scale, int batch, int kv_policy, const __grid_constant__ WsQTensorMap q_map) {
#else
__global__ void __launch_bounds__(WS_THREADS, 1)
    dsv4_sparse_attention_ws(const unsigned short* q, const unsigned short* kv, const int* indices, const float* sink,
                             unsigned short* out, float* lse, float* part_out, float* part_lse, int K, int heads,
                             int chunk, float sm_scale, int batch, int kv_policy, const __grid_constant__ WsQTensorMap q_map,
                             const __grid_constant__ WsQTensorMap out_map) {
#endif
#if WG_AVAILABLE
#if WS_PERSISTENT
    if constexpr (!SPLIT) {  // unsplit launches: the persistent grid (split ones keep the one-item body below)
        ws_persistent<HAS_SINK>(q, kv, indices, sink, out, lse, part_out, part_lse, K, heads, chunk, sm_scale, batch,
                                kv_policy WS_Q_MAP_ARG WS_OUT_MAP_ARG);
        return;
    }
#endif
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* smem = wg_smem_base(smem_raw);
    const WsSmem<false> ws(smem);
    ws.init_barriers();
    pdl_launch_dependents();  // the combine kernel (PDL) may be scheduled; it waits for this grid

    const int b = blockIdx.x;
    const int k_begin = blockIdx.z * chunk;
    const int n = max(min(K - k_begin, chunk), 0);
    const int* idx_row = indices + (long long)b * K + k_begin;
#if WS_Q_TMA
    if (threadIdx.x == 0) ws_q_tma(q_map, ws.q_addr, ws.bar_q, b * heads + blockIdx.y * 64);  // math thread 0
#endif
    // warp-uniform as far as ptxas can tell (a shuffle's result): a role branch on threadIdx alone made
    // it serialise every wgmma (C7519, "WG.AR in divergent path")
    const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x >> 7, 0), lt = threadIdx.x & 127;
    // the pair count, computed by each role after its setmaxnreg: computed before the branch, NVRTC
    // 13.0 kept it on the stack across it (4 bytes spilled, reloaded in both loops)
    auto pair_count = [&]() {
        int m = n;
        asm volatile("" : "+r"(m));
        return (m + 127) / 128;
    };

    if (warpgroup == 2) {  // the producer
        setmaxnreg_dec<WS_PRODUCER_REGS>();
        const int pairs = pair_count();
#if WS_PRODUCER_AHEAD
        // pairs 0 and 1's indices before Q's 32 copies a thread: the first gathers then wait for one index round
        // trip, not for Q's burst (every SM's, at the start) and one after it
        int ids[2][4], ids_next[2][4];  // pair j's and pair j + 1's (ws_ids_advance)
        ws_load_ids(ids, idx_row, n, lt >> 3, 0);
        ws_load_ids(ids_next, idx_row, n, lt >> 3, 1);
#endif
#if !WS_Q_TMA
        {  // Q: thread lt copies piece lt % 64 of lines lt / 64 + 2k
            const unsigned char* q_rows =
                reinterpret_cast<const unsigned char*>(q) + ((long long)b * heads + blockIdx.y * 64) * DIM * 2;
            const int piece = lt & 63;
#pragma unroll 8
            for (int r = lt >> 6; r < 64; r += 2)
                cp_async16(ws.q_s + swizzled_offset(64, r, piece), q_rows + r * DIM * 2 + piece * 16);
            cp_async_mbar_arrive(ws.bar_q);
        }
#endif
        // thread lt copies 16-byte unit lt % 8 of each 128-byte chunk line of rows lt / 8 + 16k: 8
        // threads cover a line's 128 contiguous bytes. Rows r = row0 + 16k share r & 7 = row0 & 7, so
        // every destination is `dst0` plus a constant: swizzled_offset(64, r, 8 chunk + unit) =
        // chunk * 8 KB + r * 128 + ((unit ^ (r & 7)) << 4)
        const int unit = lt & 7, row0 = lt >> 3;
        const unsigned int dst0 = ws.kv_addr + row0 * 128 + ((unit ^ (row0 & 7)) << 4);
        const unsigned char* kv_bytes = reinterpret_cast<const unsigned char*>(kv);
        const unsigned long long policy = ws_kv_policy(kv_policy);
#if WS_PRODUCER_LEAN
        WsLeanProducer lean(kv_bytes, lt, dst0, policy, ws.flags_addr);
        lean.start(idx_row, n, row0);
        auto load_ids = [&](int pair) { lean.load_ids(pair); };
#else
#if !WS_PRODUCER_AHEAD
        int ids[2][4];  // blocks A, B of the next pair: rows row0 + 16k
        auto load_ids = [&](int pair) { ws_load_ids(ids, idx_row, n, row0, pair); };
#endif
        auto copy_half = [&](int blk, int r_half) { ws_copy_half(ids, blk, r_half, kv_bytes, unit, dst0, policy); };
#if WS_FLAGS_SMEM
        auto publish_flags = [&](int blk, unsigned int bar) { ws_publish_flags(ids, blk, lt, ws.flags_addr, bar); };
#endif
#endif
#if !WS_PRODUCER_AHEAD
        load_ids(0);
#endif
        for (int j = 0; j < pairs; ++j) {
            const unsigned int parity = (j & 1) ^ 1;  // a fresh barrier passes parity 1: the first pair waits for nothing
#if WS_PRODUCER_LEAN
            lean.prepare(lt);  // the default's order: K0L, K1R, K0R, K1L
            lean.fill(ws, 0, parity);
            lean.fill(ws, 3, parity);
            lean.fill(ws, 1, parity);
            lean.fill(ws, 2, parity);
#else
            mbar_wait(ws.free_bar(0), parity);
#if WS_FLAGS_SMEM
            publish_flags(0, ws.ready(0));
#endif
            copy_half(0, 0);
            cp_async_mbar_arrive(ws.ready(0));
            mbar_wait(ws.free_bar(3), parity);
#if WS_FLAGS_SMEM
            publish_flags(1, ws.ready(3));
#endif
            copy_half(1, 1);
            cp_async_mbar_arrive(ws.ready(3));
            mbar_wait(ws.free_bar(1), parity);
            copy_half(0, 1);
            cp_async_mbar_arrive(ws.ready(1));
            mbar_wait(ws.free_bar(2), parity);
            copy_half(1, 0);
            cp_async_mbar_arrive(ws.ready(2));
#endif
#if WS_PRODUCER_AHEAD
            ws_ids_advance(ids, ids_next, idx_row, n, row0, j + 2);
#if WS_PRODUCER_PREFETCH
            ws_prefetch_rows_l2(ids, kv_bytes, unit);  // pair j + 1's rows, loaded a pair ago: a pair before their copies
#endif
#else
            load_ids(j + 1);
#endif
        }
        cp_async_commit();  // (wait_group counts committed groups only)
        cp_async_wait<0>();  // no copy may still target shared memory when the CTA exits
        if (SPLIT && cluster_ctas() == 2) {  // ws_cluster_merge's two cluster barriers
            ws_cluster_sync();
            ws_cluster_sync();
        }
        return;
    }

    setmaxnreg_inc<WS_MATH_REGS>();
    const int pairs = pair_count();
    const int half = warpgroup;  // 0: block A and O's dims 0..255; 1: block B and dims 256..511
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r_lo = (warp & 3) * 16 + g, r_hi = r_lo + 8;  // this thread's rows (heads) of the CTA's 64
    const float scale2 = sm_scale * LOG2E;
    auto valid_bits = [&](int j) { return ws_valid_bits(idx_row, n, j, half, t); };
    unsigned int flag_word = 0;  // (read with WS_FLAGS_SMEM only)
    auto issue_s = [&](float (&s)[32], float (&o)[128], int j, int first, bool release_k1l) {
        ws_issue_s(s, o, j & 1, first, release_k1l, half, t, ws.q_addr, ws.kv_addr, ws.bar_q, flag_word, ws.flags_addr);
    };

    float o[128];  // O[rows r_lo (r_hi), dims half * 256 + 8 j + 2 t (+1)] at o[4 j + c]
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;  // l: this warpgroup's blocks only
    float s[32];
    unsigned int p[4][4];
    // this warpgroup's S landed: scaled to base 2, masked, its row maxima
    auto finish_s = [&](unsigned int valid, float& mx_lo, float& mx_hi) {
        wg_wait0();
#pragma unroll
        for (int i = 0; i < 32; ++i) wg_fence_operand(s[i]);
        ws_row_max(s, valid, scale2, mx_lo, mx_hi);
    };
    auto publish_and_pv_own = [&](int at, int bar, float alpha_lo, float alpha_hi, unsigned int v_addr) {
        ws_publish_and_pv_own(o, s, p, ws.max_s, at, bar, m_lo, m_hi, r_lo, r_hi, t, alpha_lo, alpha_hi, v_addr);
    };
    mbar_wait(ws.bar_q, 0);  // (the first S's fence covers Q too)
    if (half == 0) {
        const unsigned int own_v = ws.kv_addr, other_v = ws.kv_addr + WG_MAT_BYTES;  // V_A,L and V_B,L
        // the flags of the pair whose S is in flight, loaded before its issue (ptxas otherwise moved most of
        // the loads past the S wait, onto the path to the softmax)
#if WS_FLAGS_SMEM
        if (pairs > 0) issue_s(s, o, 0, 0, false);
        unsigned int valid = flag_word;
#else
        unsigned int valid = valid_bits(0);
        if (pairs > 0) issue_s(s, o, 0, 0, false);
#endif
        for (int j = 0; j < pairs; ++j) {
            float mx_lo, mx_hi, alpha_lo, alpha_hi;
            finish_s(valid, mx_lo, mx_hi);
#if WS_MATH_SPLIT
            ws_softmax_pv_split<true>(o, s, p, scale2, mx_lo, mx_hi, m_lo, m_hi, l_lo, l_hi, alpha_lo, alpha_hi, ws.max_s, 0,
                                      WS_BAR_MAX_A, r_lo, r_hi, t, own_v);
#else
            ws_softmax_step(s, scale2, mx_lo, mx_hi, m_lo, m_hi, l_lo, l_hi, alpha_lo, alpha_hi);
            publish_and_pv_own(0, WS_BAR_MAX_A, alpha_lo, alpha_hi, own_v);
#endif
            wg_wait0();
#pragma unroll
            for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
            mbar_arrive(ws.free_bar(0));  // K0L read for the last time
            ws_pair_max_and_pv_other(o, s, ws.max_s, ws.p_s, ws.p_addr, other_v, r_lo, r_hi, g, t, m_lo, m_hi, l_lo, l_hi);
            if (j + 1 < pairs) {  // the next S_A under this P V
#if WS_FLAGS_SMEM
                issue_s(s, o, j + 1, 0, true);
                valid = flag_word;
#else
                valid = valid_bits(j + 1);
                issue_s(s, o, j + 1, 0, true);
#endif
            } else {
                wg_wait0();
#pragma unroll
                for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
                mbar_arrive(ws.free_bar(2));  // K1L read for the last time
            }
        }
    } else {
        const unsigned int own_v = ws.kv_addr + WG_MAT_BYTES + WS_HALF_BYTES, other_v = ws.kv_addr + WS_HALF_BYTES;  // V_B,R, V_A,R
        for (int j = 0; j < pairs; ++j) {
#if WS_FLAGS_SMEM
            issue_s(s, o, j, 1, false);
            const unsigned int valid = flag_word;
#else
            const unsigned int valid = valid_bits(j);  // as warpgroup 0's
            issue_s(s, o, j, 1, false);
#endif
            float mx_lo, mx_hi, alpha_lo, alpha_hi;
            finish_s(valid, mx_lo, mx_hi);
            wg_bar_sync(WS_BAR_MAX_A, 256);  // warpgroup 0's max after block A
#if WS_MATH_SPLIT
            ws_softmax_pv_split<true>(o, s, p, scale2, fmaxf(mx_lo, ws.max_s[r_lo]), fmaxf(mx_hi, ws.max_s[r_hi]), m_lo, m_hi,
                                      l_lo, l_hi, alpha_lo, alpha_hi, ws.max_s, 64, WS_BAR_MAX_PAIR, r_lo, r_hi, t, own_v);
            ws_store_p_fragments(ws.p_s + 64 * 128, p, r_lo, r_hi, g, t);
#else
            ws_softmax_step(s, scale2, fmaxf(mx_lo, ws.max_s[r_lo]), fmaxf(mx_hi, ws.max_s[r_hi]), m_lo, m_hi, l_lo, l_hi,
                            alpha_lo, alpha_hi);
            publish_and_pv_own(64, WS_BAR_MAX_PAIR, alpha_lo, alpha_hi, own_v);
#if WS_P_STMATRIX
            ws_stmatrix_p(ws.p_addr + 64 * 128, p);  // p: the own P V's A fragments (read, not written, in flight)
#else
            store_p_swizzled(ws.p_s + 64 * 128, s, r_lo, r_hi, g, t);
#endif
#endif
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            wg_bar_sync(WS_BAR_P_A, 256);  // P_A stored
            wg_pv_ss(o, ws.p_addr, other_v);
            wg_commit();
            wg_bar_arrive(WS_BAR_P_B);
            wg_wait1();
            mbar_arrive(ws.free_bar(3));  // K1R read for the last time
            wg_wait0();
#pragma unroll
            for (int i = 0; i < 128; ++i) wg_fence_operand(o[i]);
            mbar_arrive(ws.free_bar(1));  // K0R read for the last time
        }
    }

    ws_sum_both_halves(ws.sum_s, half, r_lo, r_hi, t, l_lo, l_hi);
    if (SPLIT && cluster_ctas() == 2) {  // launched as 2-CTA clusters (sparse_attention.py)
        ws_cluster_merge<HAS_SINK>(o, m_lo, m_hi, l_lo, l_hi, smem, sink, out, lse, heads);
        return;
    }
    if (WS_EPILOGUE_SMEM)  // O staged in Q and the buffers
        ws_epilogue<HAS_SINK, SPLIT>(o, m_lo, m_hi, l_lo, l_hi, smem, sink, out, lse, part_out, part_lse, heads);
    else
        wg_epilogue<HAS_SINK, SPLIT>(o, m_lo, m_hi, l_lo, l_hi, true, true, sink, out, lse, part_out, part_lse, heads);
#else
    __trap();  // the Python side launches it only on sm_90a (Hopper); elsewhere the h64 kernel runs
#endif
}
