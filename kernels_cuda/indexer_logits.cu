// indexer_logits (SPEC 2). kv_cache [blocks, 64*132] bytes: 64 keys x 128 e4m3 (entry-major), then
// 64 float32 scales. One CTA of 4 warps per (request, BLOCKS_PER_CTA cache blocks): the query's
// e4m3 heads sit in shared memory and, as mma fragments, in registers; cache blocks stream through
// a double-buffered shared tile (cp.async); every warp multiplies its 16-head tiles by all 64 keys
// of the block with fp16 tensor-core mma (m16n8k16, fp32 accumulate) and reduces
// w[h] * relu(dot * scale) over its heads; the four warp sums meet in shared memory in fixed order.
//
// Why fp16: every e4m3 value is exact in fp16 and a product of two is exact in fp32, so only the
// fp32 accumulation rounds (Hopper's e4m3 MMA accumulates with fewer bits: relative L2 1.1e-4 with
// Triton, past the SPEC's 1e-5). The conversion is bit placement: an e4m3 byte's magnitude bits
// shifted into a half's exponent and mantissa give the value times 2^-8, subnormals included;
// the 2^16 of a product is folded into the key scale.
//
// Fragment order: the dot sums over k in any order, so thread (g, t) of a warp takes bytes
// 16t .. 16t+15 of each 64-byte half of a row (one 16-byte load) and k-step s of that half uses
// bytes 16t+4s .. 16t+4s+3: bytes 0-1 for the mma's k = 2t, 2t+1 and bytes 2-3 for k = 2t+8, 2t+9,
// for A (query rows) and B (key rows) alike.

// KEY_DIM, BLOCK_ENTRIES (the cache layout), WARPS, BLOCKS_PER_CTA, WG_THREADS, WG_HEADS come from
// indexer_logits.py's DEFINES (-D options, their one definition; no defaults here): the kernels are
// written for the values asserted.
static_assert(KEY_DIM == 128 && BLOCK_ENTRIES == 64, "a key row is 8 16-byte chunks (mma fragments, the wgmma "
              "swizzle row); a block is wgmma's M = 64 keys");
static_assert(WARPS == 4, "dsv4_indexer_logits sums the four warps' part[] rows");
static_assert(WG_THREADS == 128 && WG_HEADS == 64, "dsv4_indexer_logits_wgmma: one warpgroup, one n64 tile of heads");
#define BLOCK_BYTES (BLOCK_ENTRIES * (KEY_DIM + 4))
#define ROW_STRIDE 192  // padded shared row: 16-byte aligned; rows g and g+1 fall on opposite bank halves, so a
                        // quarter-warp's 16-byte fragment loads cover the 32 banks once
#define HEAD_CHUNK 64  // heads per pass (more heads: another pass over the keys)
#define TILES_PER_WARP (HEAD_CHUNK / 16 / WARPS)
#define KEY_CHUNKS (BLOCK_ENTRIES * KEY_DIM / 16 + BLOCK_ENTRIES * 4 / 16)  // 16-byte copies per block
static_assert(BLOCKS_PER_CTA >= 1 && (HEAD_CHUNK + 2 * BLOCK_ENTRIES) * ROW_STRIDE
              + (2 + WARPS + BLOCKS_PER_CTA) * BLOCK_ENTRIES * 4 <= 48 * 1024, "dsv4_indexer_logits' static shared memory");


// Two e4m3 bytes (in the low byte of each 16-bit half of `spread`) -> half2 bits of value * 2^-8.
__device__ __forceinline__ unsigned int e4m3x2_to_half2_scaled(unsigned int spread) {
    return ((spread & 0x00800080u) << 8) | ((spread & 0x007f007fu) << 7);
}

__device__ __forceinline__ unsigned int lo_pair(unsigned int w) { return e4m3x2_to_half2_scaled(__byte_perm(w, 0u, 0x4140)); }

__device__ __forceinline__ unsigned int hi_pair(unsigned int w) { return e4m3x2_to_half2_scaled(__byte_perm(w, 0u, 0x4342)); }

__device__ __forceinline__ void mma_f16(float* c, const unsigned int* a, unsigned int b0, unsigned int b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The 8 words (two 16-byte loads) thread t holds of a 128-byte row in shared memory.
__device__ __forceinline__ void row_words(const unsigned char* row, int t, unsigned int* w) {
    const uint4 lo = *reinterpret_cast<const uint4*>(row + 16 * t);
    const uint4 hi = *reinterpret_cast<const uint4*>(row + 64 + 16 * t);
    w[0] = lo.x; w[1] = lo.y; w[2] = lo.z; w[3] = lo.w;
    w[4] = hi.x; w[5] = hi.y; w[6] = hi.z; w[7] = hi.w;
}

__global__ void __launch_bounds__(WARPS * 32) dsv4_indexer_logits(const unsigned char* q, const float* weights,
                                                             const unsigned char* cache, const int* context_lens,
                                                             const int* block_table, long long table_stride,
                                                             float* out, int max_len, int heads) {
    __shared__ __align__(16) unsigned char q_s[HEAD_CHUNK * ROW_STRIDE];
    __shared__ __align__(16) unsigned char k_s[2][BLOCK_ENTRIES * ROW_STRIDE];
    __shared__ __align__(16) float scale_s[2][BLOCK_ENTRIES];
    __shared__ float part[WARPS][BLOCK_ENTRIES];
    __shared__ float acc[BLOCKS_PER_CTA * BLOCK_ENTRIES];
    const int b = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int first = blockIdx.y * BLOCKS_PER_CTA;  // first cache block of this CTA
    const int ctx = context_lens[b];
    const int live_blocks = min(BLOCKS_PER_CTA, (ctx + BLOCK_ENTRIES - 1) / BLOCK_ENTRIES - first);
    const int* table_row = block_table + b * table_stride;

    // one cache block's keys and scales into buffer `buf`
    auto fetch = [&](int i, int buf) {
        const unsigned char* src = cache + (long long)table_row[first + i] * BLOCK_BYTES;
        for (int c = threadIdx.x; c < KEY_CHUNKS; c += WARPS * 32) {
            if (c < BLOCK_ENTRIES * 8) {
                cp_async16(&k_s[buf][(c >> 3) * ROW_STRIDE + (c & 7) * 16], src + c * 16);
            } else {
                const int s = c - BLOCK_ENTRIES * 8;
                cp_async16(&scale_s[buf][s * 4], src + BLOCK_ENTRIES * KEY_DIM + s * 16);
            }
        }
        cp_async_commit();
    };

    for (int h0 = 0; h0 < heads && live_blocks > 0; h0 += HEAD_CHUNK) {
        const int chunk = min(HEAD_CHUNK, heads - h0);
        const int tiles = (chunk + 15) / 16;
        __syncthreads();  // q_s and the buffers are free
        for (int c = threadIdx.x; c < tiles * 16 * 8; c += WARPS * 32) {
            const int r = c >> 3;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);  // heads past the end: zero rows (and zero weights)
            if (r < chunk) v = *reinterpret_cast<const uint4*>(q + ((long long)b * heads + h0 + r) * KEY_DIM + (c & 7) * 16);
            *reinterpret_cast<uint4*>(&q_s[r * ROW_STRIDE + (c & 7) * 16]) = v;
        }
        fetch(0, 0);
        __syncthreads();
        unsigned int a[TILES_PER_WARP][8][4];
        float w_lo[TILES_PER_WARP], w_hi[TILES_PER_WARP];
#pragma unroll
        for (int m = 0; m < TILES_PER_WARP; ++m) {
            const int tile = warp + m * WARPS;
            w_lo[m] = w_hi[m] = 0.f;
            if (tile < tiles) {
                unsigned int top[8], bottom[8];
                row_words(&q_s[(tile * 16 + g) * ROW_STRIDE], t, top);
                row_words(&q_s[(tile * 16 + g + 8) * ROW_STRIDE], t, bottom);
#pragma unroll
                for (int s = 0; s < 8; ++s) {
                    a[m][s][0] = lo_pair(top[s]);
                    a[m][s][1] = lo_pair(bottom[s]);
                    a[m][s][2] = hi_pair(top[s]);
                    a[m][s][3] = hi_pair(bottom[s]);
                }
                const int h = h0 + tile * 16 + g;
                if (h < heads) w_lo[m] = weights[(long long)b * heads + h];
                if (h + 8 < heads) w_hi[m] = weights[(long long)b * heads + h + 8];
            }
        }
        for (int i = 0; i < live_blocks; ++i) {
            const int buf = i & 1;
            if (i + 1 < live_blocks) {
                fetch(i + 1, buf ^ 1);
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
#pragma unroll 1
            for (int n = 0; n < BLOCK_ENTRIES / 8; ++n) {
                unsigned int kw[8];
                row_words(&k_s[buf][(n * 8 + g) * ROW_STRIDE], t, kw);
                const float s0 = scale_s[buf][n * 8 + 2 * t] * 65536.f;  // 2^16: both operands carry 2^-8
                const float s1 = scale_s[buf][n * 8 + 2 * t + 1] * 65536.f;
                float v0 = 0.f, v1 = 0.f;
#pragma unroll
                for (int m = 0; m < TILES_PER_WARP; ++m) {
                    if (warp + m * WARPS >= tiles) break;
                    float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                    for (int s = 0; s < 8; ++s) mma_f16(c, a[m][s], lo_pair(kw[s]), hi_pair(kw[s]));
                    v0 += w_lo[m] * fmaxf(c[0] * s0, 0.f) + w_hi[m] * fmaxf(c[2] * s0, 0.f);
                    v1 += w_lo[m] * fmaxf(c[1] * s1, 0.f) + w_hi[m] * fmaxf(c[3] * s1, 0.f);
                }
#pragma unroll
                for (int off = 4; off < 32; off <<= 1) {  // over g: the 16 heads of each tile
                    v0 += __shfl_xor_sync(0xffffffffu, v0, off);
                    v1 += __shfl_xor_sync(0xffffffffu, v1, off);
                }
                if (g == 0) {
                    part[warp][n * 8 + 2 * t] = v0;
                    part[warp][n * 8 + 2 * t + 1] = v1;
                }
            }
            __syncthreads();
            if (threadIdx.x < BLOCK_ENTRIES) {
                const int j = threadIdx.x;
                const float sum = (part[0][j] + part[1][j]) + (part[2][j] + part[3][j]);
                acc[i * BLOCK_ENTRIES + j] = h0 ? acc[i * BLOCK_ENTRIES + j] + sum : sum;
            }
        }
    }
    __syncthreads();
    float* out_row = out + (long long)b * max_len;
    for (int j = threadIdx.x; j < BLOCKS_PER_CTA * BLOCK_ENTRIES; j += WARPS * 32) {
        const long long e = (long long)first * BLOCK_ENTRIES + j;
        if (e < max_len) out_row[e] = e < ctx ? acc[j] : -INFINITY;
    }
}


// ---------------------------------------------------------------------------------------------
// Hopper path (sm_90a only): dsv4_indexer_logits_wgmma. fp8 tensor-core MMA (wgmma e4m3 x e4m3 ->
// f32, QGMMA in SASS) under SPEC 5's revised bound (rel. L2 3e-4 per row; QGMMA measured 1.0e-4 to
// 1.4e-4). One warpgroup (128 threads) per CTA, a persistent grid of as many CTAs as fit (4 per SM
// with 50.3 KB of shared memory each at the default 5 stages; the host asks the occupancy calculator):
// the live cache blocks of all requests (sum of ceil(context_len / 64)) are one list, cut into
// gridDim.x contiguous ranges of equal length, so unequal context lengths balance across the SMs.
// Per block: D[64 keys x 64 heads] = keys[64 x 128] . q[64 x 128]^T, four m64n64k32 steps that
// accumulate all 128 dims in the MMA chain (keys as M, heads as N, as DeepGEMM does: each thread then
// holds 16 heads of 2 keys, so the head sum is 16 FMAs and 2 shuffles and needs no shared memory);
// epilogue: ReLU, * head weight, sum over the heads, * key scale, -inf past context_len.
//
// Shared-memory layout of q and of each key stage: 64 rows of 128 bytes, K-major, in wgmma's
// 128-byte swizzle (16-byte chunk c of row r at r*128 + ((c ^ (r & 7)) * 16), 1024-byte aligned);
// cp.async writes that layout directly (a 1-D bulk copy cannot swizzle, and the unswizzled layout
// wants 16-byte core-matrix rows, not 128-byte ones). A STAGES-deep cp.async ring keeps up to
// 4 CTAs x (STAGES-1) x 8.4 KB in flight per SM. Rows past context_len within a block hold whatever the
// cache holds (possibly NaN): MMA columns are independent and the store selects -inf by index.
// Heads > 64 or another architecture: the fp16 mma.sync kernel above (the Python side dispatches).

// Ring depth: a template parameter (4, 5 or 6 are built; the launcher picks, DSV4_INDEXER_STAGES
// overrides). 5: 51456 B, 4 CTAs an SM; 4: 43008 B, 5 CTAs; 6: 59904 B, 3 CTAs. In flight an SM:
// CTAs x (stages - 1) blocks = 16, 15, 15; what differs is the CTA count, so the share size and the
// last-share tail (a share is floor or ceil of blocks / CTAs: at b64 x 16384 entries, 528 CTAs give
// 31 or 32 blocks, 3 % over the mean; 660 CTAs give 24 or 25, 0.8 %).
#define WG_KEY_TILE (BLOCK_ENTRIES * KEY_DIM)  // 8192 bytes, a multiple of the 1024-byte swizzle atom
// dynamic shared memory of a STAGES-deep ring: 1024 (alignment slack) + q + STAGES x (keys + scales)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ unsigned int swizzled(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

// wgmma shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart
// (stride byte offset); the leading byte offset is unused for swizzled K-major layouts (1 by
// convention); base offset 0 (the tile is 1024-byte aligned). Advancing along K by 32 bytes inside
// the 128-byte swizzle row adds 32 to the start address (the swizzle is applied to address bits).
__device__ __forceinline__ unsigned long long smem_desc(const void* tile) {
    const unsigned int addr = (unsigned int)__cvta_generic_to_shared(tile);
    unsigned long long d = (unsigned long long)((addr & 0x3FFFF) >> 4);
    d |= 1ull << 16;                       // leading byte offset (unused here) >> 4
    d |= (unsigned long long)(1024 >> 4) << 32;  // stride byte offset >> 4
    d |= 1ull << 62;                       // layout: 128-byte swizzle
    return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// generic-proxy writes of shared memory (st.shared, cp.async) made visible to wgmma's async proxy
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// An empty asm that "writes" every accumulator: the compiler can move no access of d across it
// (the wgmma asm statements name d, the fence and wait statements do not).
__device__ __forceinline__ void pin_registers(float* d) {
#pragma unroll
    for (int k = 0; k < 32; ++k) asm volatile("" : "+f"(d[k])::"memory");
}

// d[64 x 64] (+)= A[64 x 32] . B[64 x 32]^T (both K-major), e4m3 inputs, f32 accumulate; accumulate = 0 zeroes d first
__device__ __forceinline__ void wgmma_m64n64k32(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(accumulate)
        : "memory");
}

__device__ __forceinline__ int blocks_of(const int* context_lens, int b) { return (context_lens[b] + BLOCK_ENTRIES - 1) / BLOCK_ENTRIES; }

// sum over the CTA of one int per thread (every thread gets it); `red` holds 4 ints
__device__ __forceinline__ int cta_sum(int v, int* red) {
#pragma unroll
    for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    return red[0] + red[1] + red[2] + red[3];
}

// Position (request, block) of the live block with list index `start`: a chunked scan over the requests.
__device__ void find_block(const int* context_lens, int batch, long long start, int* red, int* b_out, int* j_out) {
    __shared__ int found[2];
    if (threadIdx.x == 0) found[0] = batch, found[1] = 0;
    long long base = 0;
    for (int b0 = 0; b0 < batch; b0 += WG_THREADS) {
        const int b = b0 + threadIdx.x;
        const int v = b < batch ? blocks_of(context_lens, b) : 0;
        int incl = v;  // inclusive scan over the warp, then over the 4 warps
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int n = __shfl_up_sync(0xffffffffu, incl, off);
            if ((threadIdx.x & 31) >= off) incl += n;
        }
        __syncthreads();
        if ((threadIdx.x & 31) == 31) red[threadIdx.x >> 5] = incl;
        __syncthreads();
        for (int w = 0; w < (threadIdx.x >> 5); ++w) incl += red[w];
        const long long lo = base + incl - v;
        if (v > 0 && start >= lo && start < lo + v) found[0] = b, found[1] = (int)(start - lo);
        base += red[0] + red[1] + red[2] + red[3];
        __syncthreads();
        if (base > start) break;
    }
    __syncthreads();
    *b_out = found[0];
    *j_out = found[1];
}

// A position in the live-block list: request b, its block j, and n = its block count (cached).
struct BlockCursor {
    int b, j, n;
    __device__ __forceinline__ void next(const int* context_lens, int batch) {
        if (++j < n) return;
        j = 0;
        do { ++b; } while (b < batch && (n = blocks_of(context_lens, b)) == 0);
    }
};

// Request b's queries (one 128-byte line a head) and weights toward L2, without waiting: the
// consumer's synchronous load of them at the request switch then hits L2 instead of DRAM, whose
// latency under this kernel's full load is microseconds, while the CTA's ring stops refilling.
__device__ __forceinline__ void prefetch_request_l2(const unsigned char* q, const float* weights, int b, int heads) {
    const int tid = threadIdx.x;
    if (tid < heads) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(q + ((long long)b * heads + tid) * KEY_DIM));
    else if (tid >= WG_HEADS && tid - WG_HEADS <= (heads * 4 + 127) / 128)  // one line more: the row may straddle
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(weights + (long long)b * heads + min((tid - WG_HEADS) * 32, heads - 1)));
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <int WG_STAGES>
__global__ void __launch_bounds__(WG_THREADS) dsv4_indexer_logits_wgmma(
        const unsigned char* __restrict__ q, const float* __restrict__ weights, const unsigned char* __restrict__ cache,
        const int* __restrict__ context_lens, const int* __restrict__ block_table, long long table_stride,
        float* __restrict__ out, int max_len, int heads, int batch) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    __shared__ int red[4];
    // the swizzle is applied to shared-window address bits: tiles start 1024-aligned in that window
    unsigned char* smem = smem_raw + ((1024 - ((unsigned int)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    unsigned char* q_s = smem;                                   // [64][128] swizzled
    unsigned char* k_s = smem + WG_KEY_TILE;                     // [STAGES][64][128] swizzled
    float* scale_s = (float*)(k_s + WG_STAGES * WG_KEY_TILE);    // [STAGES][64]
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    // A guess at this CTA's block-table entries, toward L2 while the context lengths load: the share
    // starts at fraction blockIdx / gridDim of the list, which for equal context lengths and a table
    // as wide as the longest request is the same fraction of the table. Right, the first fetch's table
    // load after the scan hits L2 instead of making a second DRAM round trip before any key is asked
    // for; wrong (unequal lengths, wider tables), a wasted 256-byte prefetch.
    if (tid < 2) {
        const long long table_ints = (long long)batch * table_stride;
        const long long at = table_ints * blockIdx.x / gridDim.x + tid * 32;  // two 128-byte lines
        if (at < table_ints) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(block_table + at));
    }

    // this CTA's contiguous range of the live-block list
    int mine = 0;
    for (int b = tid; b < batch; b += WG_THREADS) mine += blocks_of(context_lens, b);
    const long long total = cta_sum(mine, red);
    const long long lo = total * blockIdx.x / gridDim.x, hi = total * (blockIdx.x + 1) / gridDim.x;
    const int count = (int)(hi - lo);
    BlockCursor prod = {batch, 0, 0};  // the next block to fetch
    if (count > 0) {
        find_block(context_lens, batch, lo, red, &prod.b, &prod.j);
        prod.n = blocks_of(context_lens, prod.b);
    }
    BlockCursor cons = prod;  // the next block to compute

    int q_b = -1, q_ctx = 0;  // request whose queries sit in q_s, and its context length
    float w[16];  // weights of this thread's heads 8 (k / 2) + 2t + (k % 2): its accumulator columns
    auto load_weights = [&](int b) {
        q_ctx = context_lens[b];
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            const int h = 8 * (k >> 1) + 2 * t + (k & 1);
            w[k] = h < heads ? weights[(long long)b * heads + h] : 0.f;
        }
    };
    if (count > 0) {
        // The first request's queries go into q_s by cp.async in the first ring stage's copy group, so
        // they arrive with block 0 instead of being loaded after it (a round trip while the ring is full
        // and nothing new is requested); heads past H are zero rows. Its weights load into registers
        // now and are first used in block 0's epilogue.
        q_b = prod.b;
        for (int c = tid; c < WG_HEADS * 8; c += WG_THREADS) {
            const int r = c >> 3;
            if (r < heads) cp_async16(q_s + swizzled(r, c & 7), q + ((long long)q_b * heads + r) * KEY_DIM + (c & 7) * 16);
            else *reinterpret_cast<uint4*>(q_s + swizzled(r, c & 7)) = make_uint4(0u, 0u, 0u, 0u);
        }
        load_weights(q_b);
    }

    // The producer's cache block number is loaded one fetch ahead (`prod_block`), so a fetch issues its
    // copies without first waiting on a dependent load of the block table.
    auto table_at = [&](const BlockCursor& at) { return block_table[(long long)at.b * table_stride + at.j]; };
    int prod_block = count > 0 ? table_at(prod) : 0;
    // block prod_block into ring stage s, then the producer moves on (and loads the next block number):
    // thread tid copies key chunks tid + 128 k (k < 4: rows tid/8 + 16 k, all with the same row % 8, so
    // one swizzled offset) and threads 0..15 the 16 scale chunks
    const unsigned int key_dst = swizzled(tid >> 3, tid & 7);
    auto fetch_next = [&](int s) {
        const unsigned char* src = cache + (long long)prod_block * BLOCK_BYTES;
        unsigned char* dst = k_s + s * WG_KEY_TILE;
#pragma unroll
        for (int k = 0; k < BLOCK_ENTRIES * 8 / WG_THREADS; ++k)
            cp_async16(dst + key_dst + k * WG_THREADS * 16, src + (tid + k * WG_THREADS) * 16);
        if (tid < BLOCK_ENTRIES / 4) cp_async16(scale_s + s * BLOCK_ENTRIES + tid * 4, src + WG_KEY_TILE + tid * 16);
        const int was = prod.b;
        prod.next(context_lens, batch);
        if (prod.b < batch) {  // past this CTA's share the block is never fetched, but it exists
            prod_block = table_at(prod);
            if (prod.b != was) prefetch_request_l2(q, weights, prod.b, heads);
        }
    };

#pragma unroll 1
    for (int s = 0; s < WG_STAGES - 1; ++s) {
        if (s < count) fetch_next(s);
        cp_async_commit();
    }

    // While the first blocks are on their way: -inf past each request's last live block, every CTA a
    // strided share of every row; the lengths of 8 rows are loaded at once (one latency, not 8).
    for (int b0 = 0; b0 < batch; b0 += 8) {
        int first[8];  // a row's first entry past its live blocks (max_len: nothing to write)
#pragma unroll
        for (int k = 0; k < 8; ++k) first[k] = b0 + k < batch ? min(blocks_of(context_lens, b0 + k) * BLOCK_ENTRIES, max_len) : max_len;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            float* row = out + (long long)(b0 + k) * max_len;
            for (int e = first[k] + blockIdx.x * WG_THREADS + tid; e < max_len; e += gridDim.x * WG_THREADS) row[e] = -INFINITY;
        }
    }
    if (count == 0) return;

    const unsigned long long q_desc = smem_desc(q_s);
#pragma unroll 1
    for (int i = 0; i < count; ++i) {
        const int s = i % WG_STAGES;
        cp_async_wait<WG_STAGES - 2>();  // this thread's copies of block i have landed
        fence_proxy_async();
        __syncthreads();  // everyone's have; iteration i-1 is done with its stage (and with q_s)
        if (i + WG_STAGES - 1 < count) fetch_next((i + WG_STAGES - 1) % WG_STAGES);  // the stage block i-1 used
        cp_async_commit();
        if (cons.b != q_b) {  // a new request (past the first): its queries (heads past H: zero rows, zero
                              // weights), L2 hits since the producer prefetched them
            q_b = cons.b;
            for (int c = tid; c < WG_HEADS * 8; c += WG_THREADS) {
                const int r = c >> 3;
                uint4 v = make_uint4(0u, 0u, 0u, 0u);
                if (r < heads) v = *reinterpret_cast<const uint4*>(q + ((long long)q_b * heads + r) * KEY_DIM + (c & 7) * 16);
                *reinterpret_cast<uint4*>(q_s + swizzled(r, c & 7)) = v;
            }
            load_weights(q_b);
            fence_proxy_async();
            __syncthreads();
        }

        float d[32];
#pragma unroll
        for (int k = 0; k < 32; ++k) d[k] = 0.f;
        const unsigned long long k_desc = smem_desc(k_s + s * WG_KEY_TILE);
        pin_registers(d);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < KEY_DIM / 32; ++k) wgmma_m64n64k32(d, k_desc + 2 * k, q_desc + 2 * k, k);  // +32 bytes
        wgmma_commit();
        wgmma_wait_all();
        pin_registers(d);  // no read of d may be scheduled above the wait

        // d[4n + 0/1]: key 16*warp + g, heads 8n + 2t, +1; d[4n + 2/3]: key + 8, the same heads.
        // The key scale comes after the sum over heads: relu(x * s) = s * relu(x) for s >= 0, and SPEC 2's
        // scales are amax / 448 >= 0 (a NaN scale of a row past the context stays in its own key).
        float lo = 0.f, hi = 0.f;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                lo += w[2 * n + e] * fmaxf(d[4 * n + e], 0.f);
                hi += w[2 * n + e] * fmaxf(d[4 * n + 2 + e], 0.f);
            }
        }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {  // over t: the 4 lanes that hold a key's 64 heads
            lo += __shfl_xor_sync(0xffffffffu, lo, off);
            hi += __shfl_xor_sync(0xffffffffu, hi, off);
        }
        const int key = 16 * warp + g;
        const float* sc = scale_s + s * BLOCK_ENTRIES;
        const int e_lo = cons.j * BLOCK_ENTRIES + key, e_hi = e_lo + 8;  // entries of the request
        float* row = out + (long long)cons.b * max_len;
        if (t == 0 && e_lo < max_len) row[e_lo] = e_lo < q_ctx ? lo * sc[key] : -INFINITY;
        if (t == 1 && e_hi < max_len) row[e_hi] = e_hi < q_ctx ? hi * sc[key + 8] : -INFINITY;
        cons.next(context_lens, batch);
    }
    cp_async_wait<0>();
#else
    // Built for another architecture: wgmma exists only on sm_90a. The host dispatches here only on
    // Hopper; a launch anywhere else stops loudly instead of leaving the output unwritten.
    __trap();
#endif
}
