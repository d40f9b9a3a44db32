// topk_indices (SPEC 3): each row is read from global memory once, into shared memory.
//
// A row is split into CLUSTER contiguous chunks, one 1024-thread CTA each; CLUSTER > 1 runs the CTAs
// of a row as one thread-block cluster and adds their histograms through distributed shared memory
// (the host picks CLUSTER by shape: enough CTAs to fill the GPU, a chunk that fits shared memory).
// Each CTA copies its chunk to shared memory with 16-byte cp.async (all in flight at once), turns
// it into order-preserving 32-bit keys in place and counts their top 11 bits in a shared histogram.
// The row's histogram gives the threshold bucket; up to two more digit passes (11 and 10 bits),
// over the keys in shared memory only, narrow the bucket until it is one key or entirely selected. Because the whole row stays on
// chip there is no candidate buffer to overflow: ties, all-equal rows and +-inf need no other path.
// The write-out takes every key above the bucket and the first `remaining` keys inside it in column
// order; positions come from counts and scans (never from atomics), so reruns are bitwise equal.
// Rows with seq_len <= k write 0..seq_len-1 mapped, then -1, without reading the logits.

#if __CUDA_ARCH__ >= 900  // thread-block clusters and distributed shared memory are Hopper's
#define TOPK_CLUSTER_DIMS(n) __cluster_dims__(n, 1, 1)
#else  // earlier GPUs compile the cluster kernels as traps; the host launches them on sm_90+ only
#define TOPK_CLUSTER_DIMS(n)
#endif

// TOPK_THREADS (a CTA), MAX_K (the largest k), MAX_CHUNK (columns a CTA holds), FAST_CTAS_PER_SM_<VECS>,
// WIDE_FOLD, WIDE_DIRECT_SUM, WIDE_GROUPS and WIDE_EARLY come from topk_indices.py's DEFINES (-D options,
// their one definition; no defaults here).
static_assert(TOPK_THREADS == 1024, "the kernels are written for 1024 threads: 32 warps scanned by one warp, "
              "the fast kernel's 128 candidates x 8 rankers, the wide sum's 4096 bins / 4 per thread");
#define TOPK_WARPS (TOPK_THREADS / 32)
#define TOPK_BINS 2048   // 11-bit digits: bits 31..21, then 20..10, then 9..0 (10 bits)
static_assert(MAX_K <= 2 * TOPK_BINS, "the write-out stages k raw columns in the two digit histograms");

// Order-preserving key. Every NaN becomes the largest key (as torch.topk ranks NaN): NaN never
// reaches a long row that was validated, and this way no key falls below -inf's 0x007fffff, so
// the key-0 padding can never be inside a bucket even when validation is skipped.
// Branch-free: the sign's arithmetic shift flips every bit of a negative value and only the sign
// bit of a positive one (one LOP3), then one select for NaN.
__device__ __forceinline__ unsigned int sortable_key(float x) {
    const unsigned int u = __float_as_uint(x);
    const unsigned int flip = (unsigned int)((int)u >> 31) | 0x80000000u;
    return x != x ? 0xffffffffu : u ^ flip;
}

// raw / page_size for raw >= 0: a shift where page_size is a power of two (V4's 64; uniform over the
// grid, so no divergence), else the integer division (about 20 instructions a call)
__device__ __forceinline__ int page_of(int raw, int page_size) {
    return (page_size & (page_size - 1)) == 0 ? raw >> (__ffs(page_size) - 1) : raw / page_size;
}

__device__ __forceinline__ int mapped(const int* table_row, int raw, int page_size) {
    return table_row[raw / page_size] * page_size + raw % page_size;
}

// mapped() through page_of: the fast and wide kernels' (the older kernels keep mapped(), where the
// shift's second copy of each loop spills: the cluster kernel on sm_80, regs<4> on sm_90a)
__device__ __forceinline__ int mapped_paged(const int* table_row, int raw, int page_size) {
    const int page = page_of(raw, page_size);
    return table_row[page] * page_size + (raw - page * page_size);
}

// four floats copied to shared memory -> their keys, in place, counted by bits 31..21
__device__ __forceinline__ void keys_in_place(uint4* p, int* hist) {
    uint4 v = *p;
    v.x = sortable_key(__uint_as_float(v.x));
    v.y = sortable_key(__uint_as_float(v.y));
    v.z = sortable_key(__uint_as_float(v.z));
    v.w = sortable_key(__uint_as_float(v.w));
    *p = v;
    atomicAdd(&hist[v.x >> 21], 1);
    atomicAdd(&hist[v.y >> 21], 1);
    atomicAdd(&hist[v.z >> 21], 1);
    atomicAdd(&hist[v.w >> 21], 1);
}

// Cluster barrier: every thread of every CTA of the cluster; release/acquire orders shared-memory
// writes before it with distributed-shared-memory reads after it. Arrive and wait are split so a
// CTA can leave its reads behind and wait only before it exits.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }

// Read 16 aligned bytes at the same shared-memory offset in CTA `rank` of this cluster.
__device__ __forceinline__ int4 load_peer4(const int* local, unsigned int rank) {
    const unsigned int address = (unsigned int)__cvta_generic_to_shared(local);
    unsigned int remote;
    int4 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
    asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(remote) : "memory");
    return v;
}

// Read a 32-bit word at the same shared-memory offset in CTA `rank` of this cluster.
__device__ __forceinline__ int load_peer(const int* local, unsigned int rank) {
    const unsigned int address = (unsigned int)__cvta_generic_to_shared(local);
    unsigned int remote;
    int value;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(value) : "r"(remote) : "memory");
    return value;
}

// Exclusive block-wide scan; sets *total. Three barriers, the last one so warp_sums can be reused.
__device__ __forceinline__ int block_exclusive_scan(int value, int* warp_sums, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int inclusive = value;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, inclusive, off);
        if (lane >= off) inclusive += n;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        int w = warp_sums[lane];
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int n = __shfl_up_sync(0xffffffffu, w, off);
            if (lane >= off) w += n;
        }
        warp_sums[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    const int before = (warp ? warp_sums[warp - 1] : 0) + inclusive - value;
    *total = warp_sums[TOPK_WARPS - 1];
    __syncthreads();
    return before;
}

// a CTA's columns [begin, begin + m) of a row of n split over CLUSTER CTAs (rank `rank`): chunks a
// multiple of 4 long, so each keeps the row's 16-byte alignment. Every kernel of a row splits it so;
// returns the chunk
template <int CLUSTER>
__device__ __forceinline__ int cta_columns(int n, int rank, int& begin, int& m) {
    const int chunk = ((n + CLUSTER - 1) / CLUSTER + 3) & ~3;
    begin = min(n, rank * chunk);
    m = min(n, begin + chunk) - begin;
    return chunk;
}

template <int CLUSTER>
__device__ __forceinline__ void topk_row(const float* __restrict__ logits, long long columns,
                                         const int* __restrict__ seq_lens, const int* __restrict__ page_table,
                                         long long table_stride, int* __restrict__ out, int k, int page_size,
                                         int skip_up_to) {
    extern __shared__ __align__(16) unsigned int chunk_keys[];  // chunk length + 4 words (alignment shift)
    __shared__ __align__(16) int hist[2][TOPK_BINS];  // this CTA's counts; two so a pass never zeroes what a peer reads
    __shared__ __align__(16) int row_hist[CLUSTER > 1 ? TOPK_BINS : 4];  // the cluster's sum
    __shared__ int warp_sums[TOPK_WARPS];
    __shared__ int warp_above[TOPK_WARPS], warp_inside[TOPK_WARPS];
    __shared__ int cta_counts[2];        // keys above the bucket / inside it in this CTA (peers read them)
    __shared__ int cta_first[2];         // this CTA's first above / inside position in the row
    __shared__ int s_bin, s_above;

    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int rank = CLUSTER > 1 ? (int)blockIdx.x : 0;  // grid (CLUSTER, batch), cluster (CLUSTER, 1, 1)
    const int b = blockIdx.y;
    const int n = seq_lens[b];
    int* out_row = out + (long long)b * k;
    const int* table_row = page_table + (long long)b * table_stride;
    // Rows of seq_len <= skip_up_to (-1: none) are dsv4_topk_indices_fast's, launched before this
    // kernel on the same (mixed) batch; the same decision in every CTA of the cluster.
    if (n <= skip_up_to) return;
    if (n <= k) {  // the same for every CTA of the cluster, so no barrier is left waiting
        if (rank == 0)
            for (int i = t; i < k; i += TOPK_THREADS) out_row[i] = i < n ? mapped(table_row, i, page_size) : -1;
        return;
    }

    // this CTA's columns [begin, begin + m): a multiple of 4 long, so chunks keep the row's alignment
    int begin, m;
    const int chunk = cta_columns<CLUSTER>(n, rank, begin, m);
    const float* src = logits + (long long)b * columns + begin;
    // Key of column begin + c sits in word shift + c, so 16-byte groups of the buffer match 16-byte
    // groups of the row; columns before the row's first 16-byte boundary are loaded one by one. The
    // words before and after the chunk hold key 0 (below every real key: see sortable_key): never
    // selected and never in a bucket, so every scan reads whole groups without bounds checks.
    const int shift = (int)((reinterpret_cast<unsigned long long>(src) >> 2) & 3);
    const int head = min(m, (4 - shift) & 3);
    const int groups = (shift + m + 3) >> 2;
    unsigned int* keys = chunk_keys + shift;
    const uint4* groups4 = reinterpret_cast<const uint4*>(chunk_keys);

    for (int i = t; i < TOPK_BINS; i += TOPK_THREADS) {
        hist[0][i] = 0;
        hist[1][i] = 0;
    }
    if (t < shift) chunk_keys[t] = 0u;
    if (t < 4 * groups - shift - m) keys[m + t] = 0u;
    __syncthreads();

    // pass 1 (the only global read): the chunk goes to shared memory by 16-byte cp.async, all of
    // it in flight at once and no registers held (two commit groups: the first half's keys are
    // made while the second half arrives); each thread converts the vectors it copied itself, so
    // no barrier is needed in between. Keys in place, histogram of bits 31..21.
    {
        int* h = hist[0];
        const int vectors = (m - head) >> 2;
        const int tail = head + 4 * vectors;
        const int half = (vectors + 1) >> 1;
        const float4* src4 = reinterpret_cast<const float4*>(src + head);
        uint4* keys4 = reinterpret_cast<uint4*>(keys + head);  // shift + head is 0 or 4: 16-byte aligned
        for (int v = t; v < half; v += TOPK_THREADS) cp_async16(keys4 + v, src4 + v);
        cp_async_commit();
        for (int v = half + t; v < vectors; v += TOPK_THREADS) cp_async16(keys4 + v, src4 + v);
        cp_async_commit();
        if (t < head) {
            const unsigned int key = sortable_key(src[t]);
            keys[t] = key;
            atomicAdd(&h[key >> 21], 1);
        }
        if (t < m - tail) {
            const unsigned int key = sortable_key(src[tail + t]);
            keys[tail + t] = key;
            atomicAdd(&h[key >> 21], 1);
        }
        cp_async_wait<1>();
        for (int v = t; v < half; v += TOPK_THREADS) keys_in_place(keys4 + v, h);
        cp_async_wait<0>();
        for (int v = half + t; v < vectors; v += TOPK_THREADS) keys_in_place(keys4 + v, h);
    }

    // The bucket [lo, hi] holds the k-th largest key; `remaining` of its keys are still to take
    // (all keys above hi are taken). Each pass splits the bucket by the next digit. A key is in the
    // bucket iff key - lo <= hi - lo (unsigned), one compare.
    unsigned int lo = 0u, hi = 0xffffffffu;
    int remaining = k;
    for (int pass = 0; pass < 3; ++pass) {
        const int digit_shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
        const unsigned int digit_mask = pass == 2 ? 0x3ffu : 0x7ffu;
        int* h = hist[pass & 1];
        if (pass > 0) {  // digits of the keys inside the bucket, from shared memory
            const unsigned int width = hi - lo;
            for (int g = t; g < groups; g += TOPK_THREADS) {
                const uint4 key = groups4[g];
                if (key.x - lo <= width) atomicAdd(&h[(key.x >> digit_shift) & digit_mask], 1);
                if (key.y - lo <= width) atomicAdd(&h[(key.y >> digit_shift) & digit_mask], 1);
                if (key.z - lo <= width) atomicAdd(&h[(key.z >> digit_shift) & digit_mask], 1);
                if (key.w - lo <= width) atomicAdd(&h[(key.w >> digit_shift) & digit_mask], 1);
            }
        }
        const int* counts = h;
        if (CLUSTER > 1) {
            cluster_arrive();  // every CTA's histogram is complete
            cluster_wait();
            if (t < TOPK_BINS / 4) {  // four bins a thread, one 16-byte read per peer
                int4 sum = make_int4(0, 0, 0, 0);
#pragma unroll 2  // 32 registers: at most two peers' reads in flight
                for (int r = 0; r < CLUSTER; ++r) {
                    const int4 part = load_peer4(&h[4 * t], r);
                    sum.x += part.x;
                    sum.y += part.y;
                    sum.z += part.z;
                    sum.w += part.w;
                }
                reinterpret_cast<int4*>(row_hist)[t] = sum;
            }
            counts = row_hist;
        }
        __syncthreads();
        // hist[0] is free once pass 1 gets here: every thread and every peer is past pass 0's reads
        // (the barriers above); pass 2 counts into it after the scan's barriers below
        if (pass == 1)
            for (int i = t; i < TOPK_BINS; i += TOPK_THREADS) hist[0][i] = 0;

        // threshold bin: bins in descending order, two per thread; the bin where the keys above it
        // fall short of `remaining` and the keys in it reach it (exactly one bin qualifies)
        {
            const int a = TOPK_BINS - 1 - 2 * t;
            const int in_a = counts[a], in_b = counts[a - 1];
            int total;
            const int before = block_exclusive_scan(in_a + in_b, warp_sums, &total);
            if (before < remaining && before + in_a >= remaining) {
                s_bin = a;
                s_above = before;
            } else if (before + in_a < remaining && before + in_a + in_b >= remaining) {
                s_bin = a - 1;
                s_above = before + in_a;
            }
            __syncthreads();
        }
        const int bin = s_bin;
        const int inside = counts[bin];
        remaining -= s_above;
        lo |= (unsigned int)bin << digit_shift;
        hi = lo | ((digit_shift ? (1u << digit_shift) : 1u) - 1u);
        if (inside == remaining) break;  // the whole bucket is taken (same decision in every CTA)
    }

    // Write-out in column order: warp w owns a contiguous run of groups, walked 32 groups (128
    // columns) a step, lane l holding group step + l. Each lane's 4 keys give bit masks of the keys
    // above the bucket and inside it; positions are scans of their counts (warp, then warps, then
    // the CTAs before this one), first counted, then written.
    const unsigned int width = hi - lo;
    const int per_warp = (((groups + TOPK_WARPS - 1) / TOPK_WARPS) + 31) & ~31;
    const int w_begin = min(groups, warp * per_warp), w_end = min(groups, w_begin + per_warp);
    int n_above = 0, n_inside = 0;
    for (int g = w_begin + lane; g < w_end; g += 32) {
        const uint4 key = groups4[g];
        n_above += (key.x > hi) + (key.y > hi) + (key.z > hi) + (key.w > hi);
        n_inside += (key.x - lo <= width) + (key.y - lo <= width) + (key.z - lo <= width) + (key.w - lo <= width);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        n_above += __shfl_xor_sync(0xffffffffu, n_above, off);
        n_inside += __shfl_xor_sync(0xffffffffu, n_inside, off);
    }
    if (lane == 0) {
        warp_above[warp] = n_above;
        warp_inside[warp] = n_inside;
    }
    __syncthreads();
    if (warp == 0) {  // exclusive scans over the warps; lane 31 publishes the CTA's totals
        int above = warp_above[lane], in = warp_inside[lane];
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int x = __shfl_up_sync(0xffffffffu, above, off), y = __shfl_up_sync(0xffffffffu, in, off);
            if (lane >= off) {
                above += x;
                in += y;
            }
        }
        warp_above[lane] = above - warp_above[lane];
        warp_inside[lane] = in - warp_inside[lane];
        if (lane == 31) {
            cta_counts[0] = above;
            cta_counts[1] = in;
        }
    }
    int pos_above = 0, pos_inside = 0;  // keys of the CTAs before this one in the row
    if (CLUSTER > 1) {
        cluster_arrive();
        cluster_wait();
        for (int r = 0; r < rank; ++r) {
            pos_above += load_peer(&cta_counts[0], r);
            pos_inside += load_peer(&cta_counts[1], r);
        }
        cluster_arrive();  // done reading peers; waited for before exit (a CTA's shared memory must outlive the reads)
    } else {
        __syncthreads();
    }
    // This CTA's slots are two contiguous runs: above [cta_first[0], + cta_counts[0]) and inside
    // first_inside + [cta_first[1], + cta_counts[1]) cut at `remaining`. The walk below stages raw
    // columns in shared memory (hist is free: every peer is past its last histogram read, the
    // barrier above), then one pass maps its runs through the page table: the table reads are
    // then independent loads, one round trip, instead of a dependent load per taken column
    // inside the walk's branches. Hence k <= 2 * TOPK_BINS (the host checks; V4 uses 512..2048).
    if (t == 0) {  // kept in shared memory, not registers (32 a thread)
        cta_first[0] = pos_above;
        cta_first[1] = pos_inside;
    }
    int* const staging = &hist[0][0];  // raw columns, indexed by output slot
    pos_above += warp_above[warp];
    pos_inside += warp_inside[warp];
    const int first_inside = k - remaining;  // slots [0, k - remaining) hold the keys above the bucket
    const int column0 = begin - shift;       // column of word 0
    for (int step = w_begin; step < w_end && (n_above > 0 || pos_inside < remaining); step += 32) {
        const int g = step + lane;
        const uint4 key = g < w_end ? groups4[g] : make_uint4(0u, 0u, 0u, 0u);
        const unsigned int above_bits = (key.x > hi) | (key.y > hi) << 1 | (key.z > hi) << 2 | (key.w > hi) << 3;
        const unsigned int inside_bits = (key.x - lo <= width) | (key.y - lo <= width) << 1 |
                                         (key.z - lo <= width) << 2 | (key.w - lo <= width) << 3;
        if (__ballot_sync(0xffffffffu, (above_bits | inside_bits) != 0u) == 0u) continue;
        // inclusive warp scan of both counts packed (each at most 128 per step)
        const int mine = __popc(above_bits) | __popc(inside_bits) << 8;
        int scan = mine;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int x = __shfl_up_sync(0xffffffffu, scan, off);
            if (lane >= off) scan += x;
        }
        const int step_total = __shfl_sync(0xffffffffu, scan, 31);
        int slot_above = pos_above + ((scan - mine) & 0xff);
        int slot_inside = pos_inside + ((scan - mine) >> 8);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int column = column0 + 4 * g + j;
            if (above_bits >> j & 1u) staging[slot_above++] = column;
            if (inside_bits >> j & 1u) {
                if (slot_inside < remaining) staging[first_inside + slot_inside] = column;
                ++slot_inside;
            }
        }
        pos_above += step_total & 0xff;
        pos_inside += step_total >> 8;
        n_above -= step_total & 0xff;
    }
    {  // the staged columns of this CTA's slots, through the page table
        __syncthreads();
        const int n_above_cta = cta_counts[0], cta_inside = cta_first[1];
        const int n_inside_cta = max(0, min(cta_counts[1], remaining - cta_inside));
        for (int i = t; i < n_above_cta + n_inside_cta; i += TOPK_THREADS) {
            const int slot = i < n_above_cta ? cta_first[0] + i : first_inside + cta_inside + (i - n_above_cta);
            out_row[slot] = mapped(table_row, staging[slot], page_size);
        }
    }
    if (CLUSTER > 1) cluster_wait();
}

// One CTA per row (rows short enough or many enough to fill the GPU that way).
__global__ void __launch_bounds__(TOPK_THREADS, 2)
    dsv4_topk_indices(const float* logits, long long columns, const int* seq_lens, const int* page_table,
                      long long table_stride, int* out, int k, int page_size, int skip_up_to) {
    topk_row<1>(logits, columns, seq_lens, page_table, table_stride, out, k, page_size, skip_up_to);
}

// CLUSTER CTAs per row, one cluster per row.
template <int CLUSTER>
__global__ void TOPK_CLUSTER_DIMS(CLUSTER) __launch_bounds__(TOPK_THREADS, 2)
    dsv4_topk_indices_cluster(const float* logits, long long columns, const int* seq_lens, const int* page_table,
                              long long table_stride, int* out, int k, int page_size, int skip_up_to) {
#if __CUDA_ARCH__ >= 900
    topk_row<CLUSTER>(logits, columns, seq_lens, page_table, table_stride, out, k, page_size, skip_up_to);
#else
    __trap();
#endif
}

// ---------------------------------------------------------------------------------------------
// DSV4_TOPK_KERNEL=v2: one 1024-thread CTA per row, no cluster and no shared-memory copy of the row.
// The row is cut in tiles of 4096 x VECS columns; thread t holds vectors i*1024 + t of a tile in
// registers (coalesced float4 loads). A row of one tile is loaded once and stays in registers; a
// longer row is re-read tile by tile in every pass (from L2 after the first when the batch fits it).
// A column's place in its tile is the order (i, t, e) of vector, thread, element, so the write-out
// ranks keys in column order with one block scan of packed per-vector counts a tile. Digits and
// bucket rules are the cluster kernel's (11/11/10 bits of the order-preserving key, stop once the
// bucket is taken whole); each digit costs three block barriers and no block scan (warp scan, then
// a warp reduce of the warp totals). Output equals the cluster kernel's: keys above the bucket in
// column order, then the first `remaining` keys inside it in column order; no atomic decides a
// position. Columns at or past seq_len hold key 0, below every real key, and are never counted.

// Inclusive scan over a warp (of counts, or of packed counts whose fields never carry into each other).
template <typename T>
__device__ __forceinline__ T warp_inclusive(T v, int lane) {
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const T n = __shfl_up_sync(0xffffffffu, v, off);
        if (lane >= off) v += n;
    }
    return v;
}

// Raw bits of columns first + 4 * (i * 1024 + t) + 0..3 (past n: 0); all loads issued before any use.
template <int VECS>
__device__ __forceinline__ void load_tile(uint4 (&key)[VECS], const float* src, int first, int n, bool aligned, int t) {
#pragma unroll
    for (int i = 0; i < VECS; ++i) {
        const int c = first + 4 * (i * TOPK_THREADS + t);
        if (aligned && c + 3 < n) {
            const float4 v = *reinterpret_cast<const float4*>(src + c);
            key[i] = make_uint4(__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z), __float_as_uint(v.w));
        } else {
            key[i].x = c < n ? __float_as_uint(src[c]) : 0u;
            key[i].y = c + 1 < n ? __float_as_uint(src[c + 1]) : 0u;
            key[i].z = c + 2 < n ? __float_as_uint(src[c + 2]) : 0u;
            key[i].w = c + 3 < n ? __float_as_uint(src[c + 3]) : 0u;
        }
    }
}

// Raw bits -> order-preserving keys; columns at or past n -> key 0.
template <int VECS>
__device__ __forceinline__ void make_keys(uint4 (&key)[VECS], int first, int n, int t) {
#pragma unroll
    for (int i = 0; i < VECS; ++i) {
        const int c = first + 4 * (i * TOPK_THREADS + t);
        key[i].x = c < n ? sortable_key(__uint_as_float(key[i].x)) : 0u;
        key[i].y = c + 1 < n ? sortable_key(__uint_as_float(key[i].y)) : 0u;
        key[i].z = c + 2 < n ? sortable_key(__uint_as_float(key[i].z)) : 0u;
        key[i].w = c + 3 < n ? sortable_key(__uint_as_float(key[i].w)) : 0u;
    }
}

template <int VECS>
__global__ void __launch_bounds__(TOPK_THREADS, 1)
    dsv4_topk_indices_regs(const float* __restrict__ logits, long long columns, const int* __restrict__ seq_lens,
                           const int* __restrict__ page_table, long long table_stride, int* __restrict__ out, int k,
                           int page_size) {
    constexpr int PACKS = (VECS + 3) / 4;  // 16-bit count fields, four vectors per 64-bit word
    constexpr int TILE = 4 * TOPK_THREADS * VECS;
    __shared__ __align__(16) int hist[2][TOPK_BINS];
    __shared__ int warp_sums[TOPK_WARPS];
    __shared__ unsigned long long warp_packs[2 * PACKS][TOPK_WARPS];
    __shared__ int s_bin, s_above;

    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int b = blockIdx.x;
    const int n = seq_lens[b];
    int* out_row = out + (long long)b * k;
    const int* table_row = page_table + (long long)b * table_stride;
    if (n <= k) {
        for (int i = t; i < k; i += TOPK_THREADS) out_row[i] = i < n ? mapped(table_row, i, page_size) : -1;
        return;
    }
    const float* src = logits + (long long)b * columns;
    const bool aligned = (reinterpret_cast<unsigned long long>(src) & 15) == 0;
    const int tiles = (n + TILE - 1) / TILE;
    const bool resident = tiles == 1;  // the whole row stays in registers: loaded once

    uint4 key[VECS];
    if (resident) load_tile<VECS>(key, src, 0, n, aligned, t);
    for (int i = t; i < TOPK_BINS; i += TOPK_THREADS) hist[0][i] = 0;  // hist[1] is zeroed in digit 0
    __syncthreads();
    if (resident) make_keys<VECS>(key, 0, n, t);

    unsigned int lo = 0u, hi = 0xffffffffu;
    int remaining = k;
    for (int pass = 0; pass < 3; ++pass) {
        const int digit_shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
        const unsigned int digit_mask = pass == 2 ? 0x3ffu : 0x7ffu;
        int* h = hist[pass & 1];
        const unsigned int width = hi - lo;
        for (int tile = 0; tile < tiles; ++tile) {
            if (!resident) {
                load_tile<VECS>(key, src, tile * TILE, n, aligned, t);
                make_keys<VECS>(key, tile * TILE, n, t);
            }
#pragma unroll
            for (int i = 0; i < VECS; ++i) {  // key 0 (past seq_len) is never counted
                if (key[i].x != 0u && key[i].x - lo <= width) atomicAdd(&h[(key[i].x >> digit_shift) & digit_mask], 1);
                if (key[i].y != 0u && key[i].y - lo <= width) atomicAdd(&h[(key[i].y >> digit_shift) & digit_mask], 1);
                if (key[i].z != 0u && key[i].z - lo <= width) atomicAdd(&h[(key[i].z >> digit_shift) & digit_mask], 1);
                if (key[i].w != 0u && key[i].w - lo <= width) atomicAdd(&h[(key[i].w >> digit_shift) & digit_mask], 1);
            }
        }
        __syncthreads();
        // the other histogram's last reads (digit pass - 1) are behind the barriers of that digit
        for (int i = t; i < TOPK_BINS; i += TOPK_THREADS) hist[(pass + 1) & 1][i] = 0;
        // bins in descending order, two a thread: the bin where the keys above fall short of
        // `remaining` and the keys in it reach it (exactly one qualifies)
        const int a = TOPK_BINS - 1 - 2 * t;
        const int in_a = h[a], in_b = h[a - 1];
        int inclusive = in_a + in_b;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int x = __shfl_up_sync(0xffffffffu, inclusive, off);
            if (lane >= off) inclusive += x;
        }
        if (lane == 31) warp_sums[warp] = inclusive;
        __syncthreads();
        int warps_before = lane < warp ? warp_sums[lane] : 0;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) warps_before += __shfl_xor_sync(0xffffffffu, warps_before, off);
        const int before = warps_before + inclusive - (in_a + in_b);
        if (before < remaining && before + in_a >= remaining) {
            s_bin = a;
            s_above = before;
        } else if (before + in_a < remaining && before + in_a + in_b >= remaining) {
            s_bin = a - 1;
            s_above = before + in_a;
        }
        __syncthreads();
        const int bin = s_bin;
        const int inside = h[bin];
        remaining -= s_above;
        lo |= (unsigned int)bin << digit_shift;
        hi = lo | ((digit_shift ? (1u << digit_shift) : 1u) - 1u);
        if (inside == remaining) break;  // the whole bucket is taken (every thread decides the same)
    }

    // Write-out, a tile at a time. Per vector i, 16-bit fields: keys above the bucket (word p) and
    // inside it (word PACKS + p), field i % 4 of word i / 4; one scan over threads of all 2 * PACKS
    // words a tile. above_base / inside_base: keys of the tiles and vectors before, over all threads.
    const unsigned int width = hi - lo;
    const int first_inside = k - remaining;  // slots [0, k - remaining) hold the keys above the bucket
    int above_base = 0, inside_base = 0;
    for (int tile = 0; tile < tiles; ++tile) {
        if (!resident) {
            load_tile<VECS>(key, src, tile * TILE, n, aligned, t);
            make_keys<VECS>(key, tile * TILE, n, t);
            __syncthreads();  // warp_packs: the previous tile's reads are done
        }
        unsigned long long mine[2 * PACKS];
#pragma unroll
        for (int p = 0; p < 2 * PACKS; ++p) mine[p] = 0ull;
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            const uint4 q = key[i];
            const unsigned int above = (q.x > hi) + (q.y > hi) + (q.z > hi) + (q.w > hi);
            const unsigned int in = (q.x != 0u && q.x - lo <= width) + (q.y != 0u && q.y - lo <= width) +
                                    (q.z != 0u && q.z - lo <= width) + (q.w != 0u && q.w - lo <= width);
            mine[i / 4] += (unsigned long long)above << (16 * (i % 4));
            mine[PACKS + i / 4] += (unsigned long long)in << (16 * (i % 4));
        }
        unsigned long long incl[2 * PACKS];
#pragma unroll
        for (int p = 0; p < 2 * PACKS; ++p) {
            incl[p] = warp_inclusive(mine[p], lane);
            if (lane == 31) warp_packs[p][warp] = incl[p];
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < 2 * PACKS; ++p) {
            const unsigned long long w = warp_inclusive(warp_packs[p][lane], lane);  // over warps
            const unsigned long long before = (warp ? __shfl_sync(0xffffffffu, w, warp - 1) : 0ull);
            const unsigned long long total = __shfl_sync(0xffffffffu, w, 31);
            incl[p] = before + incl[p] - mine[p];  // exclusive over threads, per field
            mine[p] = total;                       // the tile's count per field
        }
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            const uint4 q = key[i];
            int slot_above = above_base + (int)((incl[i / 4] >> (16 * (i % 4))) & 0xffffu);
            int slot_inside = inside_base + (int)((incl[PACKS + i / 4] >> (16 * (i % 4))) & 0xffffu);
            above_base += (int)((mine[i / 4] >> (16 * (i % 4))) & 0xffffu);
            inside_base += (int)((mine[PACKS + i / 4] >> (16 * (i % 4))) & 0xffffu);
            const unsigned int e[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int column = tile * TILE + 4 * (i * TOPK_THREADS + t) + j;
                if (e[j] > hi) {
                    out_row[slot_above++] = mapped(table_row, column, page_size);
                } else if (e[j] != 0u && e[j] - lo <= width) {
                    if (slot_inside < remaining) out_row[first_inside + slot_inside] = mapped(table_row, column, page_size);
                    ++slot_inside;
                }
            }
        }
        if (above_base >= first_inside && inside_base >= remaining) break;  // every slot written (same in all threads)
    }
}

// ---------------------------------------------------------------------------------------------
// Default for tensors up to 16384 columns whose rows fit one wave (DSV4_TOPK_KERNEL unset):
// `dsv4_topk_indices_fast<VECS>`, one 1024-thread CTA per row, the row in registers (VECS float4 a
// thread, vector t + 1024 i; two CTAs an SM for VECS 1, one above). The chain is SGLang topk_v2's
// register path made exact and deterministic: one histogram of a 12-bit coarse bin, one threshold
// search, one block scan that places every key above the threshold bin (its column staged at its
// output slot) and every key inside it (to a small shared buffer), then an exact rank of those
// candidates by (key descending, column ascending); the k staged columns go through the page table
// in one pass. Positions come from the scan and the ranks, never from an atomic's return value, so
// the selection and the order are bitwise the same every run. A threshold bin holding more than
// FAST_CANDIDATES keys (heavy ties) takes the exact radix of the v2 kernel instead (digits of the
// bin's key range, over the keys in registers) and its column-order write-out. Launched with
// programmatic dependent launch when the grid is one wave: nothing global is read before
// pdl_wait(). (DSV4_TOPK_KERNEL=split also runs it on the short rows of wider tensors, before the
// wide kernel.)

#define FAST_BINS 4096
#define FAST_CANDIDATES 128   // threshold-bin keys ranked all-pairs (8 threads a candidate)
#define FAST_RANKERS 8        // threads per candidate in the ranking (FAST_CANDIDATES x 8 = 1024)
// The coarse bin: bits 30..17 of |x| (8 exponent bits, 6 mantissa bits) clamped to exponents
// 2^-16 .. 2^15, then mirrored by sign: 2048 bins a sign, 1/64 of an octave each (the fp16 bin of
// SGLang in fp32 terms). Monotone in the key, so a bin is a contiguous key range.
#define FAST_CODE_LO (111u << 6)
#define FAST_CODE_HI ((142u << 6) | 63u)
// Two CTAs an SM (32 registers) where the keys leave room: VECS 2 spills at 32 registers, VECS 4 takes 57.
// dsv4_topk_indices_half<VECS> (fast_half_row) runs two CTAs an SM for every VECS.
#define FAST_CTAS_PER_SM(vecs) \
    ((vecs) <= 1 ? FAST_CTAS_PER_SM_1 : (vecs) <= 2 ? FAST_CTAS_PER_SM_2 : FAST_CTAS_PER_SM_4)
static_assert(FAST_CTAS_PER_SM_1 == 2 && FAST_CTAS_PER_SM_2 == 1 && FAST_CTAS_PER_SM_4 == 1,
              "two CTAs an SM (32 registers) for VECS 1, one above (40 and 57 registers)");
static_assert(MAX_K <= FAST_BINS, "the fast kernel stages k slots in its histogram");
// FAST_CUTS (DSV4_TOPK_FAST_CUTS, read at import; its default in topk_indices.py): latency cuts of the
// fast kernel's one-CTA chain (docs/topk-s9a.md, "64 x 16384"), bits of:
#define FAST_EARLY_LOADS 1    // seq_len coherent after the PDL wait; the row's loads issued before it arrives
#define FAST_COUNT_PADDING 2  // the histogram counts key 0 and takes the padding out once: no test a key
#define FAST_VOTE_WRITE_OUT 4  // candidates ranked by warp votes straight into the output, one barrier fewer
// docs/topk-s11b.md (the fast kernel only, not half):
#define FAST_BIT_WALK 8        // one classification into above / inside bit masks, then only their set bits placed
#define FAST_ADDRESS_EARLY 16  // with FAST_EARLY_LOADS: the row's address and predicates made before the PDL wait
// keys masked past seq_len by vector (keys_before), not by a test a key (make_keys), and the histogram's
// zeroing barrier before the PDL wait, not between the loads and the atomics
#define FAST_KEYS_BY_VECTOR 32
// docs/topk-s13c.md (default; the fast kernel only, not half): the row's page-table entries read into shared
// memory while the row loads (one entry a thread, where the row has at most TOPK_THREADS pages), so the
// write-out maps through shared memory with no global load after the last barrier
#define FAST_TABLE_SHARED 64
// (with FAST_BIT_WALK) fast_bit_walk's slots in fewer instructions: fast_mask_walk (docs/topk-s13c.md)
#define FAST_MASK_WALK 128
// docs/topk-s14a.md: fast<1> built without FAST_TABLE_SHARED (its other cuts kept; fast<2> and fast<4>
// keep it): the short batch (rows <= k, the copy path, at fast<1>) ran 1.053 us at 63 and 1.078 at 255 with the
// same copy-path SASS, so the A/B of fast<1>'s 4 KB of shared memory and code against its chain
#define FAST_TABLE_SHARED_NOT_1 256
static_assert(FAST_CUTS >= 0 && FAST_CUTS <= 511 && (!(FAST_CUTS & FAST_MASK_WALK) || (FAST_CUTS & FAST_BIT_WALK)),
              "FAST_EARLY_LOADS | FAST_COUNT_PADDING | FAST_VOTE_WRITE_OUT | FAST_BIT_WALK | FAST_ADDRESS_EARLY | "
              "FAST_KEYS_BY_VECTOR | FAST_TABLE_SHARED | FAST_MASK_WALK (with FAST_BIT_WALK) | "
              "FAST_TABLE_SHARED_NOT_1");
// HALF_CUTS (DSV4_TOPK_HALF_CUTS, read at import; its default in topk_indices.py): cuts of dsv4_topk_indices_half's
// chain, bits of (docs/topk-s14a.md): 1 FAST_TABLE_SHARED's page-table copy in fast_half_row (the row's entries copied one a
// thread into shared memory by cp.async after the row's loads, waited for before the histogram's barrier; the
// write-out, the candidates' and the heavy ties' mapping from there: no global load after the last barrier; page
// sizes below 4 VECS keep the L2 prefetch and the global mapping)
#define HALF_TABLE_SHARED 1
// 2 (session 22; default with 1): FAST_KEYS_BY_VECTOR's order in fast_half_row: the histogram's zeroing barrier
// before the PDL wait, and each vector's fp16 keys counted as its load lands, not after a barrier behind the CTA's
// last load (SGLang's order). The same counts, so the same bits out
#define HALF_KEYS_BY_VECTOR 2
static_assert(HALF_CUTS >= 0 && HALF_CUTS <= 3, "HALF_TABLE_SHARED | HALF_KEYS_BY_VECTOR");

// Branch-free (the per-key step of every histogram): `negative` is all ones for x <= -0 (key's top
// bit clear); key ^ negative has top bits 0x4000 | code for either sign; c = the clamped code - LO
// (0..2047) and 2048 + (c ^ negative) is 2048 + c, or 2047 - c for x <= -0. Equal to
// 2048 + clamp(code) - LO / 2047 - (clamp(code) - LO) for every key (tests/test_cuda_topk.py checks
// this formula against that two-branch form over all 2^15 values of key >> 17).
__device__ __forceinline__ unsigned int coarse_bin(unsigned int key) {
    const unsigned int negative = ~(unsigned int)((int)key >> 31);
    const int top = (int)((key ^ negative) >> 17);  // 0x4000 | code
    const int c = min(max(top - (int)(0x4000u + FAST_CODE_LO), 0), (int)(FAST_CODE_HI - FAST_CODE_LO));
    return 2048u + ((unsigned int)c ^ negative);
}

// [lo, hi] of the keys whose coarse bin is `bin` (the inverse of coarse_bin).
__device__ __forceinline__ void coarse_bin_keys(unsigned int bin, unsigned int* lo, unsigned int* hi) {
    const unsigned int c = bin >= 2048u ? bin - 2048u : 2047u - bin;
    const unsigned int code_lo = c == 0u ? 0u : FAST_CODE_LO + c;
    const unsigned int code_hi = c == 2047u ? 0x3fffu : FAST_CODE_LO + c;
    const unsigned int top_lo = bin >= 2048u ? 0x4000u + code_lo : 0x3fffu - code_hi;
    const unsigned int top_hi = bin >= 2048u ? 0x4000u + code_hi : 0x3fffu - code_lo;
    *lo = top_lo << 17;
    *hi = (top_hi << 17) | 0x1ffffu;
}

// fast_threshold's and lean_threshold's block scan of the bins' counts, 4 bins a thread (one barrier):
// this thread's four counts and the keys in the bins below its first, 4t.
// REDUX: the warp sums' reduction by one redux.sync (sm_80+) instead of five shuffles and adds (the same sum)
template <bool REDUX = false>
__device__ __forceinline__ int4 bins_scan(const int* hist, int* warp_sums, int& below) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int4 v = reinterpret_cast<const int4*>(hist)[t];
    const int mine = v.x + v.y + v.z + v.w;
    int inclusive = mine;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int x = __shfl_up_sync(0xffffffffu, inclusive, off);
        if (lane >= off) inclusive += x;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    int before = lane < warp ? warp_sums[lane] : 0;
    if constexpr (REDUX) {
        before = (int)__reduce_add_sync(0xffffffffu, (unsigned int)before);
    } else {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) before += __shfl_xor_sync(0xffffffffu, before, off);
    }
    below = before + inclusive - mine;
    return v;
}

// Over FAST_BINS ascending bins holding `total` keys (4 bins a thread): the bin b with
// above(b) < need <= above(b) + count(b), where above(b) counts the keys in bins past b; exactly one
// exists when 1 <= need <= total. Result in s[0..2] = bin, above, count. Two barriers; `hist` is
// not read after the first, `s` is valid after the second.
template <bool REDUX = false>
__device__ __forceinline__ void fast_threshold(const int* hist, int total, int need, int* warp_sums, int* s) {
    const int t = threadIdx.x;
    int below;
    const int4 v = bins_scan<REDUX>(hist, warp_sums, below);
    int through = below;  // keys in bins below 4t
    const int count[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        through += count[e];
        const int above = total - through;
        if (above < need && above + count[e] >= need) {
            s[0] = 4 * t + e;
            s[1] = above;
            s[2] = count[e];
        }
    }
    __syncthreads();
}

// fast_threshold with fewer registers live across its first barrier (fast_half_row holds 8 words of
// keys a thread through it at 32 registers): the thread whose four bins hold the threshold reads them
// again after the barrier instead of keeping them. Same result.
__device__ __forceinline__ void lean_threshold(const int* hist, int total, int need, int* warp_sums, int* s) {
    const int t = threadIdx.x;
    int below;
    const int4 v = bins_scan(hist, warp_sums, below);
    int above = total - below;  // keys in bins 4t and up
    // the threshold bin is one of this thread's four
    if (above >= need && above - (v.x + v.y + v.z + v.w) < need) {
        const int4 w = reinterpret_cast<const int4*>(hist)[t];
        const int count[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            above -= count[e];  // keys in bins past 4t + e
            if (above < need && above + count[e] >= need) {
                s[0] = 4 * t + e;
                s[1] = above;
                s[2] = count[e];
            }
        }
    }
    __syncthreads();
}

// ---- Selection steps of dsv4_topk_indices_fast and dsv4_topk_indices_wide (one copy of each) ----

// Whether any of four keys is >= lo: a group with none is neither above nor inside the bucket
// [lo, hi], so the write-out walks skip it (nearly every group: about k + FAST_CANDIDATES keys of a
// row qualify) with three max and one compare instead of eight.
__device__ __forceinline__ bool any_at_or_above(uint4 q, unsigned int lo) {
    return max(max(q.x, q.y), max(q.z, q.w)) >= lo;
}

// Four keys' counts, packed: above the bucket [lo, hi] (key > hi) in bits 0..15, inside it in bits
// 16..31. Key 0 (padding) is below every real key (see sortable_key): never above, never inside.
__device__ __forceinline__ unsigned int classify4(uint4 q, unsigned int lo, unsigned int hi) {
    const unsigned int width = hi - lo;
    const unsigned int e[4] = {q.x, q.y, q.z, q.w};
    unsigned int packed = 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j) packed += e[j] > hi ? 1u : (e[j] != 0u && e[j] - lo <= width) ? 0x10000u : 0u;
    return packed;
}

// The keys of columns column .. column + 3 in column order: a key above the bucket goes to
// staging[slot_above++], a key inside it to inside(slot_inside++, key, column).
template <class Inside>
__device__ __forceinline__ void place4(uint4 q, int column, unsigned int lo, unsigned int hi, int* staging,
                                       int& slot_above, int& slot_inside, Inside inside) {
    const unsigned int width = hi - lo;
    const unsigned int e[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if (e[j] > hi) staging[slot_above++] = column + j;
        else if (e[j] != 0u && e[j] - lo <= width) inside(slot_inside++, e[j], column + j);
    }
}

// Four keys counted by coarse bin; PADDED: some may be key 0 (past seq_len), which is not counted.
template <bool PADDED>
__device__ __forceinline__ void count_coarse4(uint4 q, int* hist) {
    const unsigned int e[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
        if (!PADDED || e[j] != 0u) atomicAdd(&hist[coarse_bin(e[j])], 1);
}

// Heavy ties: exact radix digits over the bucket [lo, hi], 12 bits of key - lo from radix_shift
// ((hi - lo) >> shift < FAST_BINS), until the bucket is taken whole or is one key value.
__device__ __forceinline__ int radix_shift(unsigned int lo, unsigned int hi) {
    return max(0, 32 - __clz((int)(hi - lo)) - 12);
}

// four keys inside [lo, lo + width] counted by their digit (key 0 never)
__device__ __forceinline__ void count_digit4(uint4 q, unsigned int lo, unsigned int width, int shift, int* hist) {
    const unsigned int e[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
        if (e[j] != 0u && e[j] - lo <= width) atomicAdd(&hist[(e[j] - lo) >> shift], 1);
}

// After fast_threshold over a digit histogram (s = bin, keys above it, keys in it): the bucket
// narrowed to that digit. lo + span can pass 2^32 - 1 in the top bin, hence the comparison.
__device__ __forceinline__ void narrow_bucket(const int* s, int shift, int& remaining, int& inside, unsigned int& lo,
                                              unsigned int& hi) {
    remaining -= s[1];
    inside = s[2];
    lo += (unsigned int)s[0] << shift;  // <= hi
    const unsigned int span = (1u << shift) - 1u;
    if (hi - lo > span) hi = lo + span;
}

// Exclusive scan of packed counts over the CTA in thread order; *total (when not null) gets the
// CTA's sum. One barrier: `sums` may be written again only after another one.
__device__ __forceinline__ unsigned int block_scan_packed(unsigned int mine, int* sums, unsigned int* total) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const unsigned int inclusive = warp_inclusive(mine, lane);
    if (lane == 31) sums[warp] = (int)inclusive;
    __syncthreads();
    unsigned int before = lane < warp ? (unsigned int)sums[lane] : 0u;
    unsigned int all = total ? (unsigned int)sums[lane] : 0u;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        before += __shfl_xor_sync(0xffffffffu, before, off);
        if (total) all += __shfl_xor_sync(0xffffffffu, all, off);
    }
    if (total) *total = all;
    return before + inclusive - mine;
}

// Threshold-bin candidates (key, column) ranked all-pairs by (key descending, column ascending), a
// total order: FAST_RANKERS threads a candidate (every thread of the CTA takes part: shuffles), each
// counting a stride of the others. take(rank, column) runs once for each of the `remaining` best.
template <class Take>
__device__ __forceinline__ void rank_candidates(const uint2* candidates, int inside, int remaining, Take take) {
    const int t = threadIdx.x, me = t / FAST_RANKERS, part = t % FAST_RANKERS;
    const uint2 self = candidates[me < inside ? me : 0];
    int rank = 0;
    for (int j = part; j < inside; j += FAST_RANKERS) {
        const uint2 other = candidates[j];
        rank += other.x > self.x || (other.x == self.x && other.y < self.y);
    }
#pragma unroll
    for (int off = FAST_RANKERS / 2; off > 0; off >>= 1) rank += __shfl_xor_sync(0xffffffffu, rank, off);
    if (part == 0 && me < inside && rank < remaining) take(rank, (int)self.y);
}

// count staged raw columns through the page table into out (independent loads, coalesced stores)
__device__ __forceinline__ void write_mapped(int* out, const int* staged, int count, const int* table_row,
                                             int page_size) {
    for (int i = threadIdx.x; i < count; i += TOPK_THREADS) out[i] = mapped_paged(table_row, staged[i], page_size);
}

// write_mapped through the shared copy of the row's table entries (FAST_CUTS & FAST_TABLE_SHARED): the same values;
// not unrolled (a slot a thread at k <= 1024), so its divisions for other page sizes take no registers
__device__ __forceinline__ void write_mapped_shared(int* out, const int* staged, int count, const int* table_cache,
                                                    int page_size) {
#pragma unroll 1
    for (int i = threadIdx.x; i < count; i += TOPK_THREADS) out[i] = mapped_paged(table_cache, staged[i], page_size);
}

// The page-table entries of columns [first, first + count) pulled into L2 while the row loads, so
// the write-out's table reads (the last dependent loads of the chain) find them there: one 128-byte
// line a thread (32 entries), the last entry's line included. Entries past the row's valid pages are
// never touched (the contract sizes the table by seq_len).
__device__ __forceinline__ void prefetch_table(const int* table_row, int first, int count, int page_size) {
    if (count <= 0) return;
    const int p0 = page_of(first, page_size), p1 = page_of(first + count - 1, page_size);
    for (int p = p0 + 32 * (int)threadIdx.x; p < p1 + 32; p += 32 * TOPK_THREADS)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(table_row + min(p, p1)));
}

// HALF_TABLE_SHARED: a page-table entry copied to shared memory by cp.async (4 bytes), so no register holds it
// while it lands (fast_half_row is at its 32: a register for it spills half<2> and half<4>); visible to this
// thread after wait_page_entries(), to the CTA after a barrier past that. After the loads before it ("memory").
__device__ __forceinline__ void copy_page_entry(int* slot, const int* entry) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((unsigned int)__cvta_generic_to_shared(slot)),
                 "l"(entry)
                 : "memory");
}

__device__ __forceinline__ void wait_page_entries() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// ---- dsv4_topk_indices_half: the fast kernel's selection at 32 registers, on fp16 bins ----
// SGLang's TopKRegister<4> keeps a 16384-column row in registers at two 1024-thread CTAs an SM (32
// registers a thread), so 256 rows run in one wave. fast_half_row does the same with this file's
// exact, deterministic selection on SGLang's bins, those of the score rounded to fp16: the same k as
// the default fast kernel, in its own slot order. The host runs it where the default fast kernel
// would need more than one wave (256 x 16384: 10.9 us against wide1's 13.7 on the H200); a row
// that is alone on its SM runs the default (64 x 16384: 8.1 against 8.4). docs/topk-s9a.md has the
// details and the counts.
// - the row's keys stay in registers from the load to the counting walk as fp16 keys, two a
//   register, and nothing else does: the row, output and table pointers are made again where used;
// - every key is counted, key 0 (past seq_len) into bin 0, and one atomic takes the padding back out:
//   no test a key;
// - one walk over the keys in registers: those above the bucket become bits of one register
//   (vector i, element j at bit 4 i + j: ascending bits are the thread's column order), those inside
//   it set bits of another, appended to the candidate buffer after the walk with their whole keys
//   read again from the row, by the few threads that have any (an atomic gives the buffer slot; the
//   output slot is the rank by (key, column), so the buffer's order does not matter);
// - one block scan of the above bits' counts places them in thread order, visiting set bits only;
// - the above slots are mapped and the candidates ranked (and mapped) by all threads after one
//   barrier: no barrier between the ranking and the write-out.
// Heavy ties (the threshold bin past FAST_CANDIDATES keys) re-read the row (from L2) a vector at a
// time in each radix pass and in the column-order placement, as the default's radix path.

// a float4's bits
__device__ __forceinline__ uint4 raw_bits(float4 v) {
    return make_uint4(__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z), __float_as_uint(v.w));
}

// Keys of the raw bits of columns c .. c + 3; those at or past n key 0 (a branch on the vector holding
// n and those past it only: the other vectors pay no test a key).
__device__ __forceinline__ uint4 keys_before(uint4 raw, int c, int n) {
    uint4 q = make_uint4(sortable_key(__uint_as_float(raw.x)), sortable_key(__uint_as_float(raw.y)),
                         sortable_key(__uint_as_float(raw.z)), sortable_key(__uint_as_float(raw.w)));
    if (c + 4 > n) {
        q.x = c < n ? q.x : 0u;
        q.y = c + 1 < n ? q.y : 0u;
        q.z = c + 2 < n ? q.z : 0u;
        q.w = c + 3 < n ? q.w : 0u;
    }
    return q;
}

// The CTA's row index, read afresh (volatile: not kept in a register from one use to the next, so the
// row pointers made from it are not either)
__device__ __forceinline__ int fresh_row() {
    int b;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(b));
    return b;
}

// Two floats' fp16 values (cvt.rn: to nearest, ties to even, as numpy's float16)
// as order-preserving 16-bit keys, a's in the high half: a half's bits flipped whole when negative,
// else its sign bit (the sign replicated over each half by a byte permute). Rounding is monotone, so
// an fp16 key's 4096 bins (key >> 4) are contiguous fp32 key ranges; -0 and +0 stay apart, as in
// sortable_key, and every real value has a key of at least -inf's 0x03ff (key 0 is the padding).
__device__ __forceinline__ unsigned int half_keys2(unsigned int a, unsigned int b) {
    unsigned int h, sign;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(__uint_as_float(a)), "f"(__uint_as_float(b)));
    asm("prmt.b32 %0, %1, 0, 0xBB99;" : "=r"(sign) : "r"(h));
    return h ^ (sign | 0x80008000u);
}

// The thread's index, read afresh (as fresh_row)
__device__ __forceinline__ int fresh_thread() {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}

// rank_candidates by warp votes (SGLang's handle_tie): warp w ranks candidates w, w + 32, ... below
// `inside`, lane l comparing candidates l, l + 32, ... with it, a ballot counting those before it in
// (key descending, column ascending) order. The same ranks (a total order), one compare a lane for
// up to 32 candidates instead of inside / 8 a thread and three shuffles.
template <class Take>
__device__ __forceinline__ void rank_candidates_by_votes(const uint2* candidates, int inside, int remaining,
                                                         Take take) {
    const int t = fresh_thread();  // (an index shared with the code before would be held until here)
    const int lane = t & 31;
    for (int me = t >> 5; me < inside; me += TOPK_WARPS) {  // warp-uniform
        const uint2 self = candidates[me];
        int rank = 0;
        for (int j = lane; j - lane < inside; j += 32) {  // warp-uniform trips
            const uint2 other = candidates[min(j, inside - 1)];
            const bool before = j < inside && (other.x > self.x || (other.x == self.x && other.y < self.y));
            rank += __popc(__ballot_sync(0xffffffffu, before));
        }
        if (lane == 0 && rank < remaining) take(rank, (int)self.y);
    }
}

// TABLE (HALF_CUTS & HALF_TABLE_SHARED): table_cache (TOPK_THREADS entries) takes the row's page-table entries
// (the fast kernel's FAST_TABLE_SHARED), and every mapping reads them there
template <int VECS, bool TABLE>
__device__ __forceinline__ void fast_half_row(const float* __restrict__ logits, long long columns, int n,
                                              const int* __restrict__ page_table, long long table_stride,
                                              int* __restrict__ out, int k, int page_size, int* hist,
                                              uint2* candidates, int* warp_sums, int* warp_sums2, int* s_threshold,
                                              int* s_candidates, int* table_cache) {
    const int t = threadIdx.x;
    const auto row = [&]() { return reinterpret_cast<const float4*>(logits + (long long)fresh_row() * columns); };
    const auto table_row = [&]() { return page_table + (long long)fresh_row() * table_stride; };
    const auto out_row = [&]() { return out + (long long)fresh_row() * k; };
    // Whether the row's entries are in the copy: at page sizes of at least 4 VECS every row this kernel selects
    // (n <= 4096 VECS) has at most TOPK_THREADS pages. A launch-wide test of an argument, made again where used (a
    // test of n would keep n live through the selection: a register half<4> does not have)
    const auto table_cached = [&]() { return TABLE && page_size >= 4 * VECS; };
    // a raw column through the shared copy, else the row's global entries
    const auto mapped_column = [&](int column) {
        return table_cached() ? mapped_paged(table_cache, column, page_size)
                              : mapped_paged(table_row(), column, page_size);
    };
    if (!table_cached()) {  // prefetch_table for one row of at most 16384 pages: one line a thread at most
        const int last = page_of(n - 1, page_size);
        if (32 * t < last + 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(table_row() + min(32 * t, last)));
    }
    // Every vector that starts before seq_len is one float4 load (it ends within the row: the host
    // launches this kernel on rows that start 16-byte aligned with `columns` % 4 == 0), all issued
    // first. The keys are kept as fp16 keys, two a register (vector i's x and y in top[2 i], z and w
    // in top[2 i + 1], the first of a pair in the high half): 16 keys take 8 registers through the
    // threshold search. The candidates' whole keys are read again.
    unsigned int top[2 * VECS];
    // a word's two fp16 keys counted by their top 12 bits (HALF_KEYS_BY_VECTOR: as its vector lands; fast_kernel
    // zeroed the histogram before its barrier then)
    constexpr bool by_vector = (HALF_CUTS & HALF_KEYS_BY_VECTOR) != 0;
    const auto count_word = [&](unsigned int word) {
        atomicAdd(&hist[word >> 20], 1);
        atomicAdd(&hist[(word >> 4) & 0xfffu], 1);
    };
    {
        const float4* src = row();
        uint4 key[VECS];
#pragma unroll
        for (int i = 0; i < VECS; ++i)
            key[i] = raw_bits(4 * (i * TOPK_THREADS + t) < n ? src[i * TOPK_THREADS + t]
                                                             : make_float4(0.f, 0.f, 0.f, 0.f));
        // TABLE: this thread's page-table entry into the shared copy, issued after the row's loads (cp.async: no
        // register holds it while it lands). Page t starts before n: t <= page_of(n - 1), by a product, not
        // page_of's shift or division, which the prefetch's test shares and would hold live across the loads
        if (table_cached() && (long long)t * page_size < n) copy_page_entry(table_cache + t, table_row() + t);
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            // (the column from a fresh thread index: the compiler would otherwise make the four
            // vectors' columns early, for the loads, and hold them to here)
            const int c = 4 * (i * TOPK_THREADS + fresh_thread());
            // fp16 keys, those at or past n key 0
            top[2 * i] = half_keys2(key[i].x, key[i].y);
            top[2 * i + 1] = half_keys2(key[i].z, key[i].w);
            if (c + 4 > n) {
                top[2 * i] &= c + 1 < n ? 0xffffffffu : c < n ? 0xffff0000u : 0u;
                top[2 * i + 1] &= c + 3 < n ? 0xffffffffu : c + 2 < n ? 0xffff0000u : 0u;
            }
            if (by_vector) {
                count_word(top[2 * i]);
                count_word(top[2 * i + 1]);
            }
        }
    }
    if (!by_vector) __syncthreads();  // the histogram is zeroed
    if (t == 0) atomicSub(&hist[0], 4 * TOPK_THREADS * VECS - n);  // the padding: its bin is 0
    if (!by_vector) {
#pragma unroll
        for (int p = 0; p < 2 * VECS; ++p) count_word(top[p]);
    }
    if (table_cached()) wait_page_entries();  // the copy is read after lean_threshold's barriers
    __syncthreads();
    lean_threshold(hist, n, k, warp_sums, s_threshold);
    const unsigned int bin = s_threshold[0];
    const int above_total = s_threshold[1];  // keys in bins past the threshold bin: all taken, < k
    int inside = s_threshold[2];              // keys in the threshold bin
    int remaining = k - above_total;          // of which this many are taken, 1 <= remaining <= inside
    int* const staging = hist;  // raw columns by output slot (hist's last reads: before lean_threshold's end)
    unsigned int lo, hi;  // the bin's whole-key range: set for the heavy ties only (below)

    if (inside <= FAST_CANDIDATES) {
        // An fp16 key is above the bin iff past 16 bin + 15, at or above it iff at least 16 bin, as
        // the high half of a word: (top > bin << 20 | 0xfffff), (top >= bin << 20). Key 0 (past
        // seq_len) is never inside: every real key is at least -inf's, 0x03ff.
        const unsigned int above_word = bin << 20 | 0xfffffu;
        const unsigned int from_word = max(bin << 20, 0x10000u);
        unsigned int above = 0u, at_or_above = 0u;
#pragma unroll
        for (int p = 0; p < 2 * VECS; ++p) {
            // (the second key moved up by a byte permute, not the histogram's shift: a common
            // subexpression would keep 8 more registers live through the threshold search)
            const unsigned int first = top[p], second = __byte_perm(top[p], 0u, 0x1044);
            above |= (unsigned int)(first > above_word) << (2 * p) |
                     (unsigned int)(second > above_word) << (2 * p + 1);
            at_or_above |= (unsigned int)(first >= from_word) << (2 * p) |
                           (unsigned int)(second >= from_word) << (2 * p + 1);
        }
        const unsigned int in = at_or_above & ~above;
        if (in != 0u) {  // about 2 % of the threads (the bin's ~25 keys of 16384): whole keys from the row
            int slot = atomicAdd(s_candidates, __popc(in));
            const float* src = logits + (long long)fresh_row() * columns;
            for (unsigned int m = in; m != 0u && slot < FAST_CANDIDATES; m &= m - 1u) {
                const int bit = __ffs(m) - 1;
                const int column = 4 * (t + TOPK_THREADS * (bit >> 2)) + (bit & 3);
                candidates[slot++] = make_uint2(sortable_key(src[column]), column);
            }
        }
        // warp_sums was last read before lean_threshold's second barrier
        int slot = (int)block_scan_packed((unsigned int)__popc(above), warp_sums, nullptr);
        for (unsigned int m = above; m != 0u; m &= m - 1u) {
            const int bit = __ffs(m) - 1;
            staging[slot++] = 4 * (t + TOPK_THREADS * (bit >> 2)) + (bit & 3);
        }
        __syncthreads();  // staging and the candidates are complete
        {  // the above keys' slots [0, above_total), and the `remaining` best candidates after them;
           // the counts read again past the barrier (not held in registers through the walks)
            // (the candidates appended, which are the bin's keys: a count that could differ, for
            // NaN scores passed unvalidated, never ranks an unwritten entry)
            const int above_total = s_threshold[1], inside = min(*s_candidates, FAST_CANDIDATES);
            if (table_cached())  // (not unrolled: the shared copy's form, as the fast kernel's)
                write_mapped_shared(out_row(), staging, above_total, table_cache, page_size);
            else
                write_mapped(out_row(), staging, above_total, table_row(), page_size);
            rank_candidates_by_votes(candidates, inside, k - above_total, [&](int rank, int column) {
                out_row()[above_total + rank] = mapped_column(column);
            });
        }
        return;
    }

    // Heavy ties: the default's radix over the bin's key range and its column-order placement, the
    // keys read again from the row a vector at a time (no key register lives into this branch).
    const auto keys_of = [&](int i) {
        return keys_before(raw_bits(row()[i * TOPK_THREADS + t]), 4 * (i * TOPK_THREADS + t), n);
    };
    {  // the bin's whole-key range: the least and the greatest key of the row in it (the keys of
       // other bins lie outside, rounding being monotone); candidates[0] is free here
        if (t == 0) candidates[0] = make_uint2(0xffffffffu, 0u);
        __syncthreads();
#pragma unroll 1
        for (int i = 0; i < VECS; ++i) {
            const int c = 4 * (i * TOPK_THREADS + t);
            if (c >= n) continue;
            const uint4 raw = raw_bits(row()[i * TOPK_THREADS + t]);
            const unsigned int xy = half_keys2(raw.x, raw.y), zw = half_keys2(raw.z, raw.w);
            const unsigned int in_bin[4] = {xy >> 20, (xy >> 4) & 0xfffu, zw >> 20, (zw >> 4) & 0xfffu};
            const unsigned int e[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (c + j < n && in_bin[j] == bin) {
                    atomicMin(&candidates[0].x, sortable_key(__uint_as_float(e[j])));
                    atomicMax(&candidates[0].y, sortable_key(__uint_as_float(e[j])));
                }
        }
        __syncthreads();
        lo = candidates[0].x;
        hi = candidates[0].y;
    }
    while (inside != remaining && hi != lo) {  // every thread decides the same
        const int shift = radix_shift(lo, hi);
        const unsigned int width = hi - lo;
        __syncthreads();  // the last pass's reads of hist and s_threshold are done
        reinterpret_cast<int4*>(hist)[t] = make_int4(0, 0, 0, 0);
        __syncthreads();
#pragma unroll 1
        for (int i = 0; i < VECS; ++i)
            if (4 * (i * TOPK_THREADS + t) < n) count_digit4(keys_of(i), lo, width, shift, hist);
        __syncthreads();
        fast_threshold(hist, inside, remaining, warp_sums, s_threshold);
        narrow_bucket(s_threshold, shift, remaining, inside, lo, hi);
    }
    const int first_inside = k - remaining;
    int above_base = 0, inside_base = 0;
#pragma unroll 1
    for (int i = 0; i < VECS; ++i) {
        const uint4 q = 4 * (i * TOPK_THREADS + t) < n ? keys_of(i) : make_uint4(0u, 0u, 0u, 0u);
        unsigned int total;
        const unsigned int before = block_scan_packed(classify4(q, lo, hi), i & 1 ? warp_sums2 : warp_sums, &total);
        int slot_above = above_base + (int)(before & 0xffffu);
        int slot_inside = inside_base + (int)(before >> 16);
        above_base += (int)(total & 0xffffu);
        inside_base += (int)(total >> 16);
        place4(q, 4 * (i * TOPK_THREADS + t), lo, hi, staging, slot_above, slot_inside,
               [&](int slot, unsigned int, int column) {
                   if (slot < remaining) staging[first_inside + slot] = column;
               });
    }
    __syncthreads();
    if (table_cached())
        write_mapped_shared(out_row(), staging, k, table_cache, page_size);
    else
        write_mapped(out_row(), staging, k, table_row(), page_size);
}

// FAST_CUTS & FAST_BIT_WALK (and LEAN_CUTS & LEAN_BIT_WALK): the counting and placing walks over a
// thread's VECS groups of four keys in registers (group i: columns 4 (i x 1024 + t) .. + 3 of the
// chunk) as one classification into two bit masks (group i, element j at bit 4 i + j: ascending bits
// are this thread's column order) and a walk over their set bits. The default runs classify4 and
// place4 on every group with a qualifying lane in the warp, which at k 512 of 16384 is nearly every
// group of every warp (docs/topk-s11b.md). The same slots in the same order: the keys above the
// bucket [lo, hi] in one run, those inside it in another. lo1 = max(lo, 1): key 0 (padding) is never
// inside, as classify4's `e != 0`.
template <int VECS>
__device__ __forceinline__ void classify_bits(const uint4 (&key)[VECS], unsigned int lo, unsigned int hi,
                                              unsigned int& above_bits, unsigned int& inside_bits) {
    static_assert(4 * VECS <= 32, "a bit a key in one word");
    const unsigned int lo1 = max(lo, 1u), width1 = hi - lo1;
    above_bits = 0u;
    inside_bits = 0u;
#pragma unroll
    for (int i = 0; i < VECS; ++i) {
        const unsigned int e[4] = {key[i].x, key[i].y, key[i].z, key[i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            above_bits |= (unsigned int)(e[j] > hi) << (4 * i + j);
            inside_bits |= (unsigned int)(e[j] - lo1 <= width1) << (4 * i + j);
        }
    }
}

// the packed counts of classify_bits' masks (above: bits 0..15, inside: 16..31), classify4's sum
__device__ __forceinline__ unsigned int packed_counts(unsigned int above_bits, unsigned int inside_bits) {
    return (unsigned int)__popc(above_bits) | ((unsigned int)__popc(inside_bits) << 16);
}

// The set bits of classify_bits' masks in group order: above(column) for a key above the bucket,
// inside(key, column) for one inside it; column = column0 + 4 (i x 1024 + t) + j.
template <int VECS, class Above, class Inside>
__device__ __forceinline__ void place_bits(const uint4 (&key)[VECS], unsigned int above_bits, unsigned int inside_bits,
                                           int column0, Above above, Inside inside) {
    const int t = threadIdx.x;
#pragma unroll
    for (int i = 0; i < VECS; ++i) {
        const int column = column0 + 4 * (i * TOPK_THREADS + t);
        for (unsigned int m = (above_bits >> (4 * i)) & 15u; m != 0u; m &= m - 1u) above(column + __ffs(m) - 1);
        for (unsigned int m = (inside_bits >> (4 * i)) & 15u; m != 0u; m &= m - 1u) {
            const int j = __ffs(m) - 1;
            inside(j == 0 ? key[i].x : j == 1 ? key[i].y : j == 2 ? key[i].z : key[i].w, column + j);
        }
    }
}

// The fast kernel's walks by classify_bits / place_bits: above keys to staging, inside ones to
// candidates, from this thread's slots on (one block scan of the packed counts: a row has at most
// 16384 keys, so no field carries).
template <int VECS>
__device__ __forceinline__ void fast_bit_walk(const uint4 (&key)[VECS], unsigned int lo, unsigned int hi, int* staging,
                                              uint2* candidates, int* warp_sums) {
    unsigned int above_bits, inside_bits;
    classify_bits<VECS>(key, lo, hi, above_bits, inside_bits);
    const unsigned int before = block_scan_packed(packed_counts(above_bits, inside_bits), warp_sums, nullptr);
    int slot_above = (int)(before & 0xffffu), slot_inside = (int)(before >> 16);
    place_bits<VECS>(key, above_bits, inside_bits, 0, [&](int column) { staging[slot_above++] = column; },
                     [&](unsigned int e, int column) {
                         candidates[slot_inside++] = make_uint2(e, (unsigned int)column);
                     });
}

// FAST_CUTS & FAST_MASK_WALK: fast_bit_walk's slots, in the same order, in fewer instructions (docs/topk-s13c.md):
// - the inside mask as the at-or-above mask (e >= lo1: one compare a key, as the above mask's, which ptxas packs
//   seven predicates at a time) less the above one: lo1 <= e <= hi iff e >= lo1 and not e > hi;
// - the scan's warp sums reduced by one redux.sync;
// - the above keys placed by one loop over the thread's whole mask (bit 4 i + j ascending is column order, so
//   the slots are place_bits' vector by vector): as many trips as the lane with the most above keys (~1-3 at
//   k 512), where place_bits' per-vector loops cost ~25 instructions a vector on nearly every warp.
// The inside keys (a few a row) keep place_bits' per-vector walk (their key picked from the vector's four).
template <int VECS>
__device__ __forceinline__ void fast_mask_walk(const uint4 (&key)[VECS], unsigned int lo, unsigned int hi, int* staging,
                                               uint2* candidates, int* warp_sums) {
    static_assert(4 * VECS <= 32, "a bit a key in one word");
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const unsigned int lo1 = max(lo, 1u);
    unsigned int above_bits = 0u, from_bits = 0u;
#pragma unroll
    for (int i = 0; i < VECS; ++i) {
        const unsigned int e[4] = {key[i].x, key[i].y, key[i].z, key[i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            above_bits |= (unsigned int)(e[j] > hi) << (4 * i + j);
            from_bits |= (unsigned int)(e[j] >= lo1) << (4 * i + j);
        }
    }
    const unsigned int inside_bits = from_bits & ~above_bits;
    // block_scan_packed (no total) with the warp sums reduced by redux.sync
    const unsigned int mine = packed_counts(above_bits, inside_bits);
    const unsigned int inclusive = warp_inclusive(mine, lane);
    if (lane == 31) warp_sums[warp] = (int)inclusive;
    __syncthreads();
    const unsigned int before =
        __reduce_add_sync(0xffffffffu, lane < warp ? (unsigned int)warp_sums[lane] : 0u) + inclusive - mine;
    int slot_above = (int)(before & 0xffffu), slot_inside = (int)(before >> 16);
#pragma unroll 1
    for (unsigned int m = above_bits; m != 0u; m &= m - 1u) {
        const int bit = __ffs(m) - 1;
        staging[slot_above++] = 4 * (t + TOPK_THREADS * (bit >> 2)) + (bit & 3);
    }
    place_bits<VECS>(key, 0u, inside_bits, 0, [](int) {}, [&](unsigned int e, int column) {
        candidates[slot_inside++] = make_uint2(e, (unsigned int)column);
    });
}

// The body of dsv4_topk_indices_fast (HALF false) and dsv4_topk_indices_half (HALF true: fast_half_row)
template <int VECS, bool HALF>
__device__ __forceinline__ void fast_kernel(const float* __restrict__ logits, long long columns,
                                            const int* __restrict__ seq_lens, const int* __restrict__ page_table,
                                            long long table_stride, int* __restrict__ out, int k, int page_size,
                                            int pdl) {
    // Rows past 4096 x VECS columns (a mixed batch wider than this kernel, DSV4_TOPK_KERNEL=split)
    // are left to the wide kernel, launched after this one on the same batch; rows <= k are written here.
    __shared__ __align__(16) int hist[FAST_BINS];
    __shared__ __align__(8) uint2 candidates[FAST_CANDIDATES];  // (key, column) of the threshold bin
    __shared__ int warp_sums[TOPK_WARPS], warp_sums2[TOPK_WARPS];
    __shared__ int s_threshold[3];
    __shared__ int s_candidates;  // HALF: candidates appended so far
    // FAST_CUTS & FAST_TABLE_SHARED (not fast<1> under FAST_TABLE_SHARED_NOT_1), HALF_CUTS & HALF_TABLE_SHARED: the
    // row's page-table entries, where it has at most TOPK_THREADS pages
    constexpr bool table_shared =
        HALF ? (HALF_CUTS & HALF_TABLE_SHARED) != 0
             : (FAST_CUTS & FAST_TABLE_SHARED) && !(VECS == 1 && (FAST_CUTS & FAST_TABLE_SHARED_NOT_1));
    __shared__ int table_cache[table_shared ? TOPK_THREADS : 1];

    const int t = threadIdx.x;
    const int b = blockIdx.x;
    reinterpret_cast<int4*>(hist)[t] = make_int4(0, 0, 0, 0);
    if (HALF && t == 0) s_candidates = 0;
    // FAST_CUTS & FAST_KEYS_BY_VECTOR: the barrier after the zeroing here, before the PDL wait (off the
    // chain), so a thread counts its keys as its own loads land: a barrier between the loads and the
    // atomics (where ptxas puts the keys' work before it) would hold every atomic until the last load.
    constexpr bool zeroed_early =
        HALF ? (HALF_CUTS & HALF_KEYS_BY_VECTOR) != 0 : (FAST_CUTS & FAST_KEYS_BY_VECTOR) != 0;
    if (zeroed_early) __syncthreads();
    // FAST_CUTS & FAST_ADDRESS_EARLY (with FAST_EARLY_LOADS): the row's pointer, seq_len's and the vectors'
    // in-bounds bits come from the arguments only, so they are made before pdl_wait() (pinned there by
    // an empty volatile asm, which keeps its place among the volatile ones): after the wait only the
    // loads issue, from one base with immediate offsets (~70 instructions a warp of 64-bit address
    // arithmetic and predicates off the chain, docs/topk-s11b.md).
    constexpr bool address_early = !HALF && (FAST_CUTS & FAST_EARLY_LOADS) && (FAST_CUTS & FAST_ADDRESS_EARLY);
    const float4* src_t = reinterpret_cast<const float4*>(logits + (long long)b * columns) + t;
    const int* seq_len_at = seq_lens + b;
    unsigned int in_bounds = 0u;  // bit i: this thread's vector i is before `columns` (and the early loads apply)
    if (address_early) {
        const bool loads = columns <= 4 * TOPK_THREADS * VECS && columns > k;
#pragma unroll
        for (int i = 0; i < VECS; ++i) in_bounds |= (unsigned int)(loads && 4 * (i * TOPK_THREADS + t) < columns) << i;
        asm volatile("" : "+l"(src_t), "+l"(seq_len_at), "+r"(in_bounds));
    }
    if (pdl) {  // launched to overlap the kernel before: the logits (and the metadata) may come from it
        pdl_launch_dependents();  // the next kernel's own pdl_wait() holds it until this grid is done
        pdl_wait();
    }
    // FAST_CUTS & FAST_EARLY_LOADS: seq_len and the row's loads issued together after pdl_wait(), by
    // coherent loads: ptxas hoists the plain `seq_lens[b]` (ld.global.nc: read-only to it) above
    // griddepcontrol.wait (ACQBULK in the SASS), a race with a kernel before that writes seq_lens;
    // a coherent load stays after it. Where every row this kernel selects fits it (columns <= 4096 x
    // VECS: not split's wider tensors) and some row may be longer than k, the row's vectors before
    // `columns` are loaded before seq_len is known (whole float4s, in bounds: rows start 16-byte
    // aligned and columns % 4 == 0; make_keys turns the columns past n into key 0), so the two global
    // round trips overlap instead of following each other. Volatile: not sunk past the seq_len tests.
    int n;
    if (address_early)
        asm volatile("ld.global.u32 %0, [%1];" : "=r"(n) : "l"(seq_len_at));
    else if (FAST_CUTS & FAST_EARLY_LOADS)
        asm volatile("ld.global.u32 %0, [%1];" : "=r"(n) : "l"(seq_lens + b));
    else
        n = seq_lens[b];
    const bool early = (FAST_CUTS & FAST_EARLY_LOADS) && !HALF && columns <= 4 * TOPK_THREADS * VECS && columns > k;
    const float4* src = reinterpret_cast<const float4*>(logits + (long long)b * columns);
    uint4 key[VECS];
    if (address_early) {
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            key[i] = make_uint4(0u, 0u, 0u, 0u);
            if ((in_bounds >> i) & 1u)
                asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"  // (ptxas folds i's offset in)
                             : "=r"(key[i].x), "=r"(key[i].y), "=r"(key[i].z), "=r"(key[i].w)
                             : "l"(src_t + i * TOPK_THREADS));
        }
    } else if (early) {
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            key[i] = make_uint4(0u, 0u, 0u, 0u);
            if (4 * (i * TOPK_THREADS + t) < columns)
                asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(key[i].x), "=r"(key[i].y), "=r"(key[i].z), "=r"(key[i].w)
                             : "l"(src + i * TOPK_THREADS + t));
        }
    }
    int* out_row = out + (long long)b * k;
    const int* table_row = page_table + (long long)b * table_stride;
    if (n <= k) {
        for (int i = t; i < k; i += TOPK_THREADS) out_row[i] = i < n ? mapped_paged(table_row, i, page_size) : -1;
        return;
    }
    if (n > 4 * TOPK_THREADS * VECS) return;  // uniform in the CTA, before any barrier
    if (HALF) {
        fast_half_row<VECS, table_shared>(logits, columns, n, page_table, table_stride, out, k, page_size, hist,
                                          candidates, warp_sums, warp_sums2, s_threshold, &s_candidates, table_cache);
        return;
    }
    // The host launches this kernel only on rows that start 16-byte aligned (`columns` % 4 == 0 and
    // an aligned base), so every vector before seq_len's is one float4 load, all issued first.
#pragma unroll
    for (int i = 0; i < VECS; ++i) {
        const int c = 4 * (i * TOPK_THREADS + t);
        if (early) {
            // loaded above
        } else if (c + 3 < n) {
            const float4 v = src[i * TOPK_THREADS + t];
            key[i] = make_uint4(__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z), __float_as_uint(v.w));
        } else {  // the vector holding seq_len, and those past it
            const float* tail = reinterpret_cast<const float*>(src) + c;
            key[i].x = c < n ? __float_as_uint(tail[0]) : 0u;
            key[i].y = c + 1 < n ? __float_as_uint(tail[1]) : 0u;
            key[i].z = c + 2 < n ? __float_as_uint(tail[2]) : 0u;
            key[i].w = 0u;  // c + 3 >= n
        }
    }
    // FAST_CUTS & FAST_TABLE_SHARED: the row's pages (every one before seq_len's last, none after: the contract
    // sizes the table by seq_len) read one a thread while the row is in flight, stored after the histogram
    // (long landed by then), mapped from shared memory in the write-out: no global load after the last barrier.
    // Volatile: issued after the row's loads, not before the wait. Uniform in the CTA; rows of more pages than
    // threads (page sizes below 16) prefetch the table into L2 and map from global memory as before.
    const int last_page = table_shared ? page_of(n - 1, page_size) : 0;
    const bool table_cached = table_shared && last_page < TOPK_THREADS;
    int page_entry = 0;
    if (table_cached && t <= last_page)
        asm volatile("ld.global.u32 %0, [%1];" : "=r"(page_entry) : "l"(table_row + t));
    if (!table_cached) prefetch_table(table_row, 0, n, page_size);  // while the row is in flight
    if constexpr (FAST_CUTS & FAST_KEYS_BY_VECTOR) {  // the same keys, a branch on the vector holding n only
#pragma unroll
        for (int i = 0; i < VECS; ++i) key[i] = keys_before(key[i], 4 * (i * TOPK_THREADS + t), n);
    } else {
        make_keys<VECS>(key, 0, n, t);  // columns at or past n: key 0, below every real key
    }
    if (!zeroed_early) __syncthreads();  // the histogram is zeroed
    if (FAST_CUTS & FAST_COUNT_PADDING) {
        // every key counted, no test a key: key 0 (past n) is bin 0's, and thread 0 takes it back out
        if (t == 0) atomicSub(&hist[0], 4 * TOPK_THREADS * VECS - n);
#pragma unroll
        for (int i = 0; i < VECS; ++i) count_coarse4<false>(key[i], hist);
    } else {
#pragma unroll
        for (int i = 0; i < VECS; ++i) count_coarse4<true>(key[i], hist);
    }
    __syncthreads();
    if (table_cached && t <= last_page) table_cache[t] = page_entry;  // read after fast_threshold's barriers
    constexpr bool mask_walk = !HALF && (FAST_CUTS & FAST_MASK_WALK);
    fast_threshold<mask_walk>(hist, n, k, warp_sums, s_threshold);
    const unsigned int bin = s_threshold[0];
    const int above_total = s_threshold[1];  // keys in bins past the threshold bin: all taken, < k
    int inside = s_threshold[2];              // keys in the threshold bin
    int remaining = k - above_total;          // of which this many are taken, 1 <= remaining <= inside

    // Raw columns are staged by output slot in shared memory (over the histogram: its last reads
    // were before fast_threshold's second barrier) and mapped through the page table at the end,
    // k consecutive slots, coalesced: no division or table load among the keys' registers.
    int* const staging = hist;
    unsigned int lo, hi;  // the threshold bin's keys: bin > threshold iff key > hi
    coarse_bin_keys(bin, &lo, &hi);
    if (inside <= FAST_CANDIDATES) {
        // One block scan of packed per-thread counts (above: bits 0..15, inside: 16..31; a row has at
        // most 16384 keys, so no field carries) places the keys in thread order. warp_sums was last
        // read before fast_threshold's second barrier.
        if constexpr (mask_walk) {
            fast_mask_walk<VECS>(key, lo, hi, staging, candidates, warp_sums);
        } else if constexpr (!HALF && (FAST_CUTS & FAST_BIT_WALK)) {
            fast_bit_walk<VECS>(key, lo, hi, staging, candidates, warp_sums);
        } else {
            unsigned int mine = 0u;
#pragma unroll
            for (int i = 0; i < VECS; ++i)
                if (any_at_or_above(key[i], lo)) mine += classify4(key[i], lo, hi);
            const unsigned int before = block_scan_packed(mine, warp_sums, nullptr);
            int slot_above = (int)(before & 0xffffu), slot_inside = (int)(before >> 16);
#pragma unroll
            for (int i = 0; i < VECS; ++i)
                if (any_at_or_above(key[i], lo))
                    place4(key[i], 4 * (i * TOPK_THREADS + t), lo, hi, staging, slot_above, slot_inside,
                           [&](int slot, unsigned int e, int column) {
                               candidates[slot] = make_uint2(e, (unsigned int)column);
                           });
        }
        __syncthreads();
        if (FAST_CUTS & FAST_VOTE_WRITE_OUT) {  // no staging of the ranks, no barrier before the write-out
            if (table_cached) {  // the same mapping, the entries from shared memory
                write_mapped_shared(out_row, staging, above_total, table_cache, page_size);
                rank_candidates_by_votes(candidates, inside, remaining, [&](int rank, int column) {
                    out_row[above_total + rank] = mapped_paged(table_cache, column, page_size);
                });
                return;
            }
            write_mapped(out_row, staging, above_total, table_row, page_size);
            rank_candidates_by_votes(candidates, inside, remaining, [&](int rank, int column) {
                out_row[above_total + rank] = mapped_paged(table_row, column, page_size);
            });
            return;
        }
        // the `remaining` best candidates go to slots above_total + rank
        rank_candidates(candidates, inside, remaining,
                        [&](int rank, int column) { staging[above_total + rank] = column; });
    } else {
        // Heavy ties in the threshold bin: the exact radix of the v2 kernel over the bin's key range.
        while (inside != remaining && hi != lo) {  // every thread decides the same
            const int shift = radix_shift(lo, hi);
            const unsigned int width = hi - lo;
            __syncthreads();  // the last pass's reads of hist and s_threshold are done
            reinterpret_cast<int4*>(hist)[t] = make_int4(0, 0, 0, 0);
            __syncthreads();
#pragma unroll
            for (int i = 0; i < VECS; ++i) count_digit4(key[i], lo, width, shift, hist);
            __syncthreads();
            fast_threshold(hist, inside, remaining, warp_sums, s_threshold);
            narrow_bucket(s_threshold, shift, remaining, inside, lo, hi);
        }
        // Column-order placement, a vector at a time (column 4 (1024 i + t) + j: vector, thread,
        // element order is column order): keys above the bucket in slots [0, k - remaining), then
        // the first `remaining` keys inside it by column. Per vector one block scan of packed
        // counts (at most 4096 each), warp sums double-buffered so one barrier a vector suffices.
        const int first_inside = k - remaining;
        int above_base = 0, inside_base = 0;
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            unsigned int total;
            const unsigned int before = block_scan_packed(classify4(key[i], lo, hi), i & 1 ? warp_sums2 : warp_sums,
                                                          &total);
            int slot_above = above_base + (int)(before & 0xffffu);
            int slot_inside = inside_base + (int)(before >> 16);
            above_base += (int)(total & 0xffffu);
            inside_base += (int)(total >> 16);
            place4(key[i], 4 * (i * TOPK_THREADS + t), lo, hi, staging, slot_above, slot_inside,
                   [&](int slot, unsigned int, int column) {
                       if (slot < remaining) staging[first_inside + slot] = column;
                   });
        }
    }
    __syncthreads();
    if (table_cached)
        write_mapped_shared(out_row, staging, k, table_cache, page_size);
    else
        write_mapped(out_row, staging, k, table_row, page_size);
}

template <int VECS>
__global__ void __launch_bounds__(TOPK_THREADS, FAST_CTAS_PER_SM(VECS))
    dsv4_topk_indices_fast(const float* __restrict__ logits, long long columns, const int* __restrict__ seq_lens,
                           const int* __restrict__ page_table, long long table_stride, int* __restrict__ out, int k,
                           int page_size, int pdl) {
    fast_kernel<VECS, false>(logits, columns, seq_lens, page_table, table_stride, out, k, page_size, pdl);
}

// A plan whose rows are all <= k (topk_indices_plan's `short`; DSV4_TOPK_SHORT=0 for the A/B): the call's output is
// metadata only (each row's columns < seq_len through the page table, -1 past them), made once by the planner, and
// the call copies it, 16 bytes a thread. The plan's rows are loaded before the PDL wait: the planner's work is
// complete when it returns (it synchronises after writing them), and no call writes them; so after the wait only the
// stores are left (the fast kernel's copy path: seq_len, then the page-table entries, then the stores). The output
// is written after it (its memory may be the kernel before's until then).
static_assert(COPY_THREADS % 32 == 0 && COPY_THREADS <= 1024, "COPY_THREADS (topk_indices.py's): whole warps");
__global__ void __launch_bounds__(COPY_THREADS)
    dsv4_topk_indices_copy(const int4* __restrict__ rows, int4* __restrict__ out, int vectors) {
    const int i = blockIdx.x * COPY_THREADS + threadIdx.x;
    int4 v = make_int4(0, 0, 0, 0);
    if (i < vectors) v = __ldg(rows + i);
    pdl_launch_dependents();  // the next kernel's own pdl_wait() holds it until this grid is done
    pdl_wait();
    if (i < vectors) out[i] = v;
}

// The fast kernel on fp16 bins at two CTAs an SM for every VECS (fast_half_row): the host's pick where
// the fast kernel's grid would need more than one wave
template <int VECS>
__global__ void __launch_bounds__(TOPK_THREADS, 2)
    dsv4_topk_indices_half(const float* __restrict__ logits, long long columns, const int* __restrict__ seq_lens,
                           const int* __restrict__ page_table, long long table_stride, int* __restrict__ out, int k,
                           int page_size, int pdl) {
    fast_kernel<VECS, true>(logits, columns, seq_lens, page_table, table_stride, out, k, page_size, pdl);
}

// ---------------------------------------------------------------------------------------------
// Default for tensors wider than 16384 columns: `dsv4_topk_indices_wide<CLUSTER>` (`wide1`: CLUSTER 1), one launch for the whole
// batch that routes each row by its own seq_len on the device: rows <= k are the plain copy; a row
// that fits one CTA's chunk buffer (seq_len <= solo_up_to, which the host sets) is selected by rank
// 0 alone, with no cluster barrier, while its peers exit; a longer row is split in CLUSTER
// contiguous chunks, one CTA each, as the cluster kernel above splits it (each chunk copied once to
// shared memory by cp.async as keys, padded with key 0). The selection is the fast kernel's: one
// 4096-bin coarse histogram summed over the cluster (distributed shared memory), one threshold
// search, one walk that counts keys above the threshold bin and inside it, one that places them:
// above keys staged in this CTA's run of slots (after the runs of the CTAs before it) and mapped
// through the page table in one coalesced pass; the threshold-bin keys (<= FAST_CANDIDATES in the
// row) into rank 0's candidate buffer by distributed shared-memory stores, where rank 0 ranks them
// by (key desc, column asc). Where a CTA's run starts follows from its peers' coarse histograms
// (their keys in bins past the threshold bin, and in it), read after the threshold search, so the
// common path has two cluster barriers: histograms complete, candidates delivered. Heavier ties:
// the exact radix over the bin's key range, cluster-wide, the runs exchanged at one more barrier,
// then a column-order walk (threads own groups t + 1024 s; one block scan a step s).

// A thread's first groups whose keys' bits the counting walk keeps for the placing walk, by kernel
// (SMEM: its cluster size; WIDE_KEPT_GROUPS_<SMEM> from topk_indices.py): wide1 (two CTAs an SM at 32
// registers) 4 groups in one register, chunks up to 16384 columns whole; the 2-, 4- and 8-CTA kernels
// (one CTA an SM, up to 64 registers) 8 groups in two, chunks up to 32768 whole (64 x 262144 at 8
// CTAs, 64 x 65536 at 2). Longer chunks walk their later groups as before.
#define WIDE_KEPT_GROUPS(smem)                                                                   \
    ((smem) == 1 ? WIDE_KEPT_GROUPS_1 : (smem) == 2 ? WIDE_KEPT_GROUPS_2 : (smem) == 4 ? WIDE_KEPT_GROUPS_4 \
     : WIDE_KEPT_GROUPS_8)

// The kept bits of KEPT groups: the keys above the bucket at bits 4 i + j (group i, key j), those
// inside it at FIELD + 4 i + j; 32 bits up to 4 groups, 64 up to 8.
template <bool WIDE>
struct KeptMaskOf {
    typedef unsigned int type;
};
template <>
struct KeptMaskOf<true> {
    typedef unsigned long long type;
};
template <int KEPT>
struct Kept {
    static_assert(KEPT >= 0 && KEPT <= 8, "two 32-bit fields at most");
    static constexpr int FIELD = KEPT <= 4 ? 16 : 32;  // bits a kind
    typedef typename KeptMaskOf<(KEPT > 4)>::type Mask;
};

__device__ __forceinline__ int lowest_bit(unsigned int m) { return __ffs(m) - 1; }
__device__ __forceinline__ int lowest_bit(unsigned long long m) { return __ffsll(m) - 1; }

// Four keys' bits: above the bucket [lo, hi] (key j > hi) at bit j, inside it at bit FIELD + j, branch
// free. Key 0, the padding, is never inside: no real key is 0 (see sortable_key), so the bucket is
// tested from max(lo, 1) and needs no test of its own.
template <class Mask, int FIELD>
__device__ __forceinline__ Mask classify_bits4(uint4 q, unsigned int lo, unsigned int hi) {
    const unsigned int from = max(lo, 1u);
    const unsigned int e[4] = {q.x, q.y, q.z, q.w};
    unsigned int above = 0u, at_or_above = 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        above |= (unsigned int)(e[j] > hi) << j;
        at_or_above |= (unsigned int)(e[j] >= from) << j;
    }
    return (Mask)above | (Mask)(at_or_above & ~above) << FIELD;
}

// four floats copied to shared memory -> their keys, in place, counted by coarse bin
__device__ __forceinline__ void coarse_keys_in_place(uint4* p, int* hist) {
    uint4 v = *p;
    v.x = sortable_key(__uint_as_float(v.x));
    v.y = sortable_key(__uint_as_float(v.y));
    v.z = sortable_key(__uint_as_float(v.z));
    v.w = sortable_key(__uint_as_float(v.w));
    *p = v;
    count_coarse4<false>(v, hist);
}

// Store 8 bytes at the same shared-memory offset in CTA `rank` of this cluster.
__device__ __forceinline__ void store_peer2(uint2* local, unsigned int rank, uint2 value) {
    const unsigned int address = (unsigned int)__cvta_generic_to_shared(local);
    unsigned int remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
    asm volatile("st.shared::cluster.v2.u32 [%0], {%1, %2};" ::"r"(remote), "r"(value.x), "r"(value.y) : "memory");
}

// Barrier over the CTA (CLUSTER 1) or the whole cluster, ordering shared-memory writes before it
// with (distributed) shared-memory reads after it.
template <int CLUSTER>
__device__ __forceinline__ void wide_barrier() {
    if (CLUSTER > 1) {
        cluster_arrive();
        cluster_wait();
    } else {
        __syncthreads();
    }
}

// options of the wide kernels (topk_row_wide): bits of their last argument
static_assert(WIDE_FOLD > 0 && WIDE_DIRECT_SUM > 0 && WIDE_GROUPS > 0 && WIDE_EARLY > 0
              && (WIDE_FOLD & (WIDE_FOLD - 1)) == 0 && (WIDE_DIRECT_SUM & (WIDE_DIRECT_SUM - 1)) == 0
              && (WIDE_GROUPS & (WIDE_GROUPS - 1)) == 0 && (WIDE_EARLY & (WIDE_EARLY - 1)) == 0
              && (WIDE_FOLD | WIDE_DIRECT_SUM | WIDE_GROUPS | WIDE_EARLY)
                     == WIDE_FOLD + WIDE_DIRECT_SUM + WIDE_GROUPS + WIDE_EARLY,
              "four distinct bits");

// DSV4_TOPK_WIDE_WINDOW (read at import; default 1 since session 21; docs/topk-s14b.md): wide_select's rows on 2 or
// more CTAs take the row's threshold and each CTA's counts before it from the window of the peers' bins
// (lean_window_bounds / lean_window_threshold, LEAN_WINDOW's) instead of the reduce-scatter, all-gather and fold: the
// same bits.
static_assert(WIDE_WINDOW == 0 || WIDE_WINDOW == 1, "WIDE_WINDOW is 0 or 1");
// DSV4_TOPK_WIDE_TABLE (read at import; default 0; docs/topk-s14b.md): a row selected alone in wide<4> / wide<8> maps
// its write-out through its page-table entries staged in shared memory during the load (see wide_select)
static_assert(WIDE_TABLE == 0 || WIDE_TABLE == 1, "WIDE_TABLE is 0 or 1");

// DSV4_TOPK_TRACE (read at import; default 0; kernels_cuda/topk_trace.py): `1` compiles the wide kernels (wide<2/4/8>;
// and lean_regs' ranked path, its own order of phases: see there) with thread 0 of every CTA stamping %globaltimer
// (ns, every SM's clock) and clock64 (its SM's cycles) at the phases
// of its chain into wide_trace[linear CTA][phase]; a diagnostic build (the stamps order nothing), never the default.
// WIDE_TRACE_CTAS and WIDE_TRACE_PHASES (topk_indices.py's DEFINES) size it; the phases: entry, row known, chunk
// counted, histograms met, threshold, counts before, walked, placed, done; the last column's ns: 1 + the CTA's SM.
static_assert(WIDE_TRACE == 0 || WIDE_TRACE == 1, "WIDE_TRACE is 0 or 1");
static_assert(WIDE_TRACE_CTAS > 0 && WIDE_TRACE_PHASES >= 10, "a row for every CTA stamped, a column for each phase and the SM");
#if WIDE_TRACE
__device__ unsigned long long wide_trace[WIDE_TRACE_CTAS][WIDE_TRACE_PHASES][2];
#endif
__device__ __forceinline__ void wide_stamp(int phase) {
#if WIDE_TRACE
    if (threadIdx.x == 0) {
        const unsigned int cta = blockIdx.x + gridDim.x * blockIdx.y;
        if (cta < WIDE_TRACE_CTAS) {
            unsigned long long ns;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
            wide_trace[cta][phase][0] = ns;
            wide_trace[cta][phase][1] = (unsigned long long)clock64();
            if (phase == 0) {  // the spare column: the SM (clusters sit in one GPC: their SMs name its members)
                unsigned int sm;
                asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
                wide_trace[cta][WIDE_TRACE_PHASES - 1][0] = sm + 1;  // (0: never entered)
            }
        }
    }
#endif
}

// Peers' 16-byte reads in flight together (more spill on sm_100 at 64 / 32 registers)
#define WIDE_PEER_READS(cluster) ((cluster) <= 4 ? (cluster) : 4)

// The reduce-scatter's first half (wide_sum's and wide16_sum's, CLUSTER > 2): thread t sums, over
// the CLUSTER lanes of its group, one peer's 16 bytes of this CTA's slice of the bins.
template <int CLUSTER>
__device__ __forceinline__ void sum_slice(const int* local, int* slice, int rank, int base, int t) {
    constexpr int GROUPS = FAST_BINS / 4 / CLUSTER;
    const int peer = t % CLUSTER, g = t / CLUSTER;
    const int group = rank * GROUPS + g;
    int4 part = peer == rank ? reinterpret_cast<const int4*>(local)[group]
                             : load_peer4(&local[4 * group], base + peer);
#pragma unroll
    for (int off = 1; off < CLUSTER; off <<= 1) {
        part.x += __shfl_xor_sync(0xffffffffu, part.x, off);
        part.y += __shfl_xor_sync(0xffffffffu, part.y, off);
        part.z += __shfl_xor_sync(0xffffffffu, part.z, off);
        part.w += __shfl_xor_sync(0xffffffffu, part.w, off);
    }
    if (peer == 0) reinterpret_cast<int4*>(slice)[g] = part;
}

// The reduce-scatter's second half, the all-gather (wide_sum's and wide16_sum's, CLUSTER > 2): thread
// t's 16 bytes of the sum from the slice's owner.
template <int CLUSTER>
__device__ __forceinline__ void gather_sum(const int* slice, int* sum, int rank, int base, int t) {
    constexpr int GROUPS = FAST_BINS / 4 / CLUSTER;
    const int owner = t / GROUPS;
    reinterpret_cast<int4*>(sum)[t] = owner == rank ? reinterpret_cast<const int4*>(slice)[t % GROUPS]
                                                    : load_peer4(&slice[4 * (t % GROUPS)], base + owner);
}

// The cluster's histograms (`local` in every CTA) summed into `sum` here (4 bins a thread, read back
// by the same thread only: fast_threshold). Reduce-scatter, then all-gather: CTA `rank` sums its
// slice of FAST_BINS / CLUSTER bins over the cluster into `slice` (one 16-byte distributed read a
// thread: the CLUSTER parts of a group in adjacent lanes, added by shuffles), and after a cluster
// barrier every CTA reads the CLUSTER slices (one 16-byte read a thread). 32 KB of distributed
// reads a CTA whatever CLUSTER, each in one round trip; every CTA reading every peer's whole
// histogram was CLUSTER x 16 KB (128 KB at 8, 256 KB at 16), where the SM-to-SM network's bandwidth
// is far below shared memory's. A pair of CTAs reads the peer's histogram directly (the same 32 KB,
// no barrier). Call after a wide_barrier that follows the counting; peers read `slice` until the
// next cluster barrier, and `local` until then too. The row's CTAs are ranks base .. base + CLUSTER - 1
// of the launch's cluster (base 0 unless a plan or the row's length puts several rows in one cluster);
// `rank` is this CTA's within the row.
template <int CLUSTER>
__device__ __forceinline__ void wide_sum(const int* local, int* slice, int* sum, int rank, int base, bool direct) {
    if (CLUSTER == 2) {  // own bins from shared memory, the peer's over the network
        const int t = threadIdx.x;
        const int4 a = reinterpret_cast<const int4*>(local)[t], b = load_peer4(&local[4 * t], base + (rank ^ 1));
        reinterpret_cast<int4*>(sum)[t] = make_int4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    } else if (CLUSTER > 2 && direct) {  // every peer's whole histogram (DSV4_TOPK_SUM=direct, for a side-by-side run)
        const int t = threadIdx.x;
        int4 total = make_int4(0, 0, 0, 0);
#pragma unroll 2  // as dc3d7cd's (more spills on sm_100)
        for (int r = 0; r < CLUSTER; ++r) {
            const int4 part = load_peer4(&local[4 * t], base + r);
            total.x += part.x;
            total.y += part.y;
            total.z += part.z;
            total.w += part.w;
        }
        reinterpret_cast<int4*>(sum)[t] = total;
    } else if (CLUSTER > 2) {
        constexpr int GROUPS = FAST_BINS / 4 / CLUSTER;  // 16-byte groups of bins in a slice
        static_assert(GROUPS * CLUSTER == TOPK_THREADS && 32 % CLUSTER == 0, "a group's parts in one warp");
        const int t = threadIdx.x;
        sum_slice<CLUSTER>(local, slice, rank, base, t);
        cluster_arrive();  // every slice is summed (release: the peers read it next)
        cluster_wait();
        gather_sum<CLUSTER>(slice, sum, rank, base, t);
    }
}

// block_scan_packed, then a barrier so `sums` can be written again right after
__device__ __forceinline__ unsigned int wide_scan(unsigned int mine, int* sums, unsigned int* total) {
    const unsigned int before = block_scan_packed(mine, sums, total);
    __syncthreads();
    return before;
}

// The wide kernels' static shared memory, one struct so a cluster kernel's rank 0 can run a row
// alone (wide_select<1, CLUSTER>) in the same memory. row_sum (the cluster's summed histogram) is
// FAST_BINS words only where the kernel runs clusters.
template <int CLUSTER>
struct __align__(16) WideShared {
    int hist[FAST_BINS];                          // this CTA's counts (peers read them)
    uint2 candidates[FAST_CANDIDATES];            // rank 0's: the row's threshold-bin keys
    unsigned long long warp_before[TOPK_WARPS];   // per warp: peers' keys before this CTA (above | inside << 32)
    int warp_sums[TOPK_WARPS];
    int s_threshold[3];
    int cta_counts[2];                            // keys above the bucket / inside it here (heavy ties)
    int s_first[2];                               // keys above / inside of the CTAs before this one
    // this CTA's slice of the sum (peers read it); the 8-CTA kernel's sized for a row on 4 of its CTAs
    __align__(16) int slice[CLUSTER > 2 ? FAST_BINS / (CLUSTER == 8 ? 4 : CLUSTER) : 4];
    __align__(16) int row_sum[CLUSTER > 1 ? FAST_BINS : 4];
};

// A peer's counts of bins first_bin .. first_bin + 3 added to before_here: bins past the threshold
// bin (keys above the bucket) to the low word, the threshold bin (inside) to the high word.
__device__ __forceinline__ void add_before(int4 part, unsigned int first_bin, unsigned int bin,
                                           unsigned long long& before_here) {
    const int count[4] = {part.x, part.y, part.z, part.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const unsigned int bin_e = first_bin + e;
        if (bin_e > bin) before_here += (unsigned long long)count[e];
        else if (bin_e == bin) before_here += (unsigned long long)count[e] << 32;
    }
}

__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// The keys above the bucket and inside it of the CTAs before this one (cluster ranks base ..
// base + rank - 1), from their packed totals exchanged at a cluster barrier (after the radix passes
// rewrote hist, or without the fold).
template <int SMEM>
__device__ __forceinline__ void wide_counts_before(WideShared<SMEM>& s, unsigned int cta_total, int rank, int base,
                                                   int& first_above, int& first_inside) {
    const int t = threadIdx.x;
    if (t == 0) {
        s.cta_counts[0] = (int)(cta_total & 0xffffu);
        s.cta_counts[1] = (int)(cta_total >> 16);
    }
    cluster_arrive();  // cta_counts published; every peer is past its reads of this CTA's hist
    cluster_wait();
    if (t < 32) {  // lane r < rank reads CTA r's counts (rank < 32), all in flight together
        int above = 0, in = 0;
        if (t < rank) {
            above = load_peer(&s.cta_counts[0], base + t);
            in = load_peer(&s.cta_counts[1], base + t);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            above += __shfl_xor_sync(0xffffffffu, above, off);
            in += __shfl_xor_sync(0xffffffffu, in, off);
        }
        if (t == 0) {
            s.s_first[0] = above;
            s.s_first[1] = in;
        }
    }
    __syncthreads();
    first_above = s.s_first[0];
    first_inside = s.s_first[1];
}

// This CTA's keys above the bucket written out from staging (complete at the CTA barrier) between
// the cluster barrier's arrive (release) and its wait.
template <int CLUSTER>
__device__ __forceinline__ void wide_write_staged(int* out, const int* staging, int count, const int* table_row,
                                                  int page_size) {
    if (CLUSTER > 1) cluster_arrive();
    __syncthreads();  // staging is complete
    write_mapped(out, staging, count, table_row, page_size);
    if (CLUSTER > 1) cluster_wait();
}

// A heavy-ties radix pass's end: the cluster's digit counts summed, the digit's threshold, the
// bucket narrowed to its digit.
template <int CLUSTER, int SMEM>
__device__ __forceinline__ void wide_radix_narrow(WideShared<SMEM>& s, int* counts, int rank, int base, bool direct,
                                                  int digit_shift, int& remaining, int& inside, unsigned int& lo,
                                                  unsigned int& hi) {
    wide_barrier<CLUSTER>();
    wide_sum<CLUSTER>(s.hist, s.slice, s.row_sum, rank, base, direct);
    fast_threshold(counts, inside, remaining, s.warp_sums, s.s_threshold);
    narrow_bucket(s.s_threshold, digit_shift, remaining, inside, lo, hi);
}

// A heavy-ties radix pass's start: every peer has read this CTA's hist (and s_threshold is read
// here), then hist is zeroed for this CTA's digit counts.
template <int CLUSTER, int SMEM>
__device__ __forceinline__ void wide_radix_clear(WideShared<SMEM>& s, int t) {
    wide_barrier<CLUSTER>();
    reinterpret_cast<int4*>(s.hist)[t] = make_int4(0, 0, 0, 0);
    __syncthreads();
}

// fast_threshold's result (in s_threshold) for the first `need` keys: the threshold bin (returned),
// the keys inside it, the ones of it still to take, and the bucket's key range [lo, hi].
__device__ __forceinline__ unsigned int read_threshold(const int* s_threshold, int need, int& inside, int& remaining,
                                                       unsigned int& lo, unsigned int& hi) {
    const unsigned int bin = s_threshold[0];
    const int above_total = s_threshold[1];
    inside = s_threshold[2];
    remaining = need - above_total;
    coarse_bin_keys(bin, &lo, &hi);
    return bin;
}

// ---- LEAN_WINDOW (DSV4_TOPK_LEAN_FORM=window, read at import; default 1; docs/topk-s13b.md): the lean_regs
// kernel's threshold from a window of the peers' bins instead of the whole histograms' reduce-scatter,
// all-gather and fold. The row's threshold bin B is at least each CTA's own threshold bin c_r (the row's keys in
// bins >= c_r are at least that CTA's k) and at most the highest non-empty bin of any CTA, so only the bins in
// [max c_r, max top_r] travel: ~26 groups of 4 a peer at 1 x 65536 k 512 (~3 KB into a CTA) where the sums and the
// fold move ~55 KB into rank 7, with one cluster barrier fewer. The same B and the same counts before each CTA as
// the sums give, so the same bits out.
// LEAN_WINDOW, before the cluster barrier (the histogram of this CTA's m keys complete or not: one barrier first):
// this CTA's own threshold bin for k (0 if it holds fewer than k keys) in the low half of s.cta_counts[0], its
// highest non-empty bin (0 if none) in the high half, each written by the one thread whose four bins hold it.
// (cta_counts' own use, the heavy ties' counts, comes after a cluster barrier that follows the peers' reads.)
// Two levels, so that most warps issue ~15 instructions: each warp's total (its 128 bins) by one REDUX, the keys in
// the warps past it by another after a barrier; only the warp holding the threshold bin scans its lanes, and only
// the one holding the highest bin looks for it (a ballot).
template <int SMEM>
__device__ __forceinline__ void lean_window_bounds(WideShared<SMEM>& s, int m, int k) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    __syncthreads();  // this CTA's histogram is complete
    const int4 v = reinterpret_cast<const int4*>(s.hist)[t];  // bins 4t .. 4t + 3 (warp w: bins 128 w ..)
    const int mine = v.x + v.y + v.z + v.w;
    const int warp_total = (int)__reduce_add_sync(0xffffffffu, (unsigned int)mine);
    if (lane == 0) s.warp_sums[warp] = warp_total;
    __syncthreads();
    const int later = (int)__reduce_add_sync(0xffffffffu, lane > warp ? (unsigned int)s.warp_sums[lane] : 0u);
    unsigned short* const bounds = reinterpret_cast<unsigned short*>(&s.cta_counts[0]);
    const int count[4] = {v.x, v.y, v.z, v.w};
    if (later < k && later + warp_total >= k) {  // the threshold bin is this warp's (warp-uniform)
        int from_here = mine;  // keys in this warp's bins from 4t up
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int x = __shfl_down_sync(0xffffffffu, from_here, off);
            if (lane + off < 32) from_here += x;
        }
        int above = later + from_here;  // keys in bins 4t and up (every key of the chunk is counted: key 0 past m only)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            above -= count[e];  // keys in bins past 4t + e
            if (above < k && above + count[e] >= k) bounds[0] = (unsigned short)(4 * t + e);
        }
    }
    if (later == 0 && warp_total != 0) {  // the highest non-empty bin is this warp's (warp-uniform)
        const unsigned int holding = __ballot_sync(0xffffffffu, mine != 0);
        if (lane == 31 - __clz((int)holding))
            bounds[1] = (unsigned short)(4 * t + (count[3] ? 3 : count[2] ? 2 : count[1] ? 1 : 0));
    }
    if (t == 0) {  // no thread above found one
        if (m < k) bounds[0] = 0;
        if (m == 0) bounds[1] = 0;
    }
}

// LEAN_WINDOW, after the cluster barrier that follows lean_window_bounds in every CTA: the row's threshold bin in
// s.s_threshold (bin, keys above it, keys in it: fast_threshold's) and the keys of the CTAs before this one above
// it and in it in s.s_first, from the window's bins only; false (nothing written, no barrier passed) where the
// window is wider than the CTA reads at once (TOPK_THREADS / CLUSTER groups of 4 bins), the same in every CTA.
// Thread t reads peer t % CLUSTER's 16 bytes of the window's group t / CLUSTER (one round trip); shuffles sum them
// over the peers (and over the peers before this CTA); a suffix scan over the window finds the bin. Two barriers.
// The row's CTAs are cluster ranks base .. base + CLUSTER - 1 (wide_select's rows sized by length: WIDE_WINDOW);
// `rank` is this CTA's within the row.
template <int CLUSTER, int SMEM>
__device__ __forceinline__ bool lean_window_threshold(WideShared<SMEM>& s, int k, int rank, int base = 0) {
    constexpr int GROUPS = TOPK_THREADS / CLUSTER, SEGMENTS = 32 / CLUSTER;  // window groups; groups a warp
    static_assert(GROUPS * CLUSTER == TOPK_THREADS && SEGMENTS * CLUSTER == 32, "a group's peers in one warp");
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    unsigned int bounds = 0u;  // lane p: CTA p's (own threshold bin | highest bin << 16), all in flight together
    if (lane < CLUSTER)
        bounds = lane == rank ? (unsigned int)s.cta_counts[0] : (unsigned int)load_peer(&s.cta_counts[0], base + lane);
    const int first = (int)(__reduce_max_sync(0xffffffffu, bounds & 0xffffu) >> 2);  // the window's groups
    const int last = (int)(__reduce_max_sync(0xffffffffu, bounds >> 16) >> 2);
    if (last - first >= GROUPS) return false;
    const int last_warp = (last - first) / SEGMENTS;
    const bool in_window = warp <= last_warp;  // warps past the window hold none of it (warp-uniform)
    const int peer = t % CLUSTER, g = first + t / CLUSTER;
    int4 part = make_int4(0, 0, 0, 0), before = make_int4(0, 0, 0, 0);
    unsigned long long own = 0ull, from_here = 0ull;
    if (in_window) {
        if (g <= last)
            part = peer == rank ? reinterpret_cast<const int4*>(s.hist)[g] : load_peer4(&s.hist[4 * g], base + peer);
        if (peer < rank) before = part;
#pragma unroll
        for (int off = 1; off < CLUSTER; off <<= 1) {
            part.x += __shfl_xor_sync(0xffffffffu, part.x, off);
            part.y += __shfl_xor_sync(0xffffffffu, part.y, off);
            part.z += __shfl_xor_sync(0xffffffffu, part.z, off);
            part.w += __shfl_xor_sync(0xffffffffu, part.w, off);
            before.x += __shfl_xor_sync(0xffffffffu, before.x, off);
            before.y += __shfl_xor_sync(0xffffffffu, before.y, off);
            before.z += __shfl_xor_sync(0xffffffffu, before.z, off);
            before.w += __shfl_xor_sync(0xffffffffu, before.w, off);
        }
        // this group's keys (low word) and those of the CTAs before this one (high word), then summed over this
        // warp's groups from this one up
        own = (unsigned long long)(unsigned int)(part.x + part.y + part.z + part.w)
              | (unsigned long long)(unsigned int)(before.x + before.y + before.z + before.w) << 32;
        from_here = own;
#pragma unroll
        for (int off = CLUSTER; off < 32; off <<= 1) {
            const unsigned long long x = __shfl_down_sync(0xffffffffu, from_here, off);
            if (lane + off < 32) from_here += x;
        }
        if (lane == 0) s.warp_before[warp] = from_here;  // the warp's window groups
    }
    __syncthreads();
    if (in_window) {
        const unsigned long long later = lane > warp && lane <= last_warp ? s.warp_before[lane] : 0ull;
        const unsigned int later_all = __reduce_add_sync(0xffffffffu, (unsigned int)later);
        const unsigned int later_before = __reduce_add_sync(0xffffffffu, (unsigned int)(later >> 32));
        if (peer == 0 && g <= last) {
            int above = (int)(later_all + (unsigned int)from_here - (unsigned int)own);  // keys in groups past g
            int above_before = (int)(later_before + (unsigned int)(from_here >> 32) - (unsigned int)(own >> 32));
            const int count[4] = {part.x, part.y, part.z, part.w};
            const int count_before[4] = {before.x, before.y, before.z, before.w};
#pragma unroll
            for (int e = 3; e >= 0; --e) {  // above: keys in bins past 4 g + e
                if (above < k && above + count[e] >= k) {
                    s.s_threshold[0] = 4 * g + e;
                    s.s_threshold[1] = above;
                    s.s_threshold[2] = count[e];
                    s.s_first[0] = above_before;
                    s.s_first[1] = count_before[e];
                }
                above += count[e];
                above_before += count_before[e];
            }
        }
    }
    __syncthreads();  // s_threshold and s_first written
    return true;
}

// One row (seq_len n > k) by CLUSTER CTAs (this one is `rank` of them: cluster rank base + rank); SMEM:
// the kernel's WideShared (and its cluster size, >= CLUSTER).
// sm_100: a call, not inlined. wide<8> inlines four copies (1, 2, 4 and 8 CTAs a row); with the window's
// (WIDE_WINDOW) NVRTC 13.5 spills two of the kernel's registers across them there at the 64-register bound. Called,
// each copy is a leaf of its own allocation (no stack, no spill). Hopper, where it is measured, inlines them.
#if __CUDA_ARCH__ >= 1000
#define WIDE_SELECT_INLINE __noinline__
#else
#define WIDE_SELECT_INLINE __forceinline__
#endif
template <int CLUSTER, int SMEM>
__device__ WIDE_SELECT_INLINE void wide_select(const float* __restrict__ row, int n, int rank,
                                               int* __restrict__ out_row, const int* __restrict__ table_row, int k,
                                               int page_size, int options, WideShared<SMEM>& s, int base = 0) {
    const bool fold = options & WIDE_FOLD, direct = options & WIDE_DIRECT_SUM;
    extern __shared__ __align__(16) unsigned int chunk_keys[];  // chunk length + 4 words (alignment shift)
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;

    // the chunk, as in topk_row: columns [begin, begin + m), key of column begin + c in word shift + c
    int begin, m;
    const int chunk = cta_columns<CLUSTER>(n, rank, begin, m);
    const float* src = row + begin;
    const int shift = (int)((reinterpret_cast<unsigned long long>(src) >> 2) & 3);
    const int head = min(m, (4 - shift) & 3);
    const int groups = (shift + m + 3) >> 2;
    unsigned int* keys = chunk_keys + shift;
    const uint4* groups4 = reinterpret_cast<const uint4*>(chunk_keys);
    const int column0 = begin - shift;  // column of word 0

    // WIDE_TABLE (a row selected alone, in a kernel whose slice holds TOPK_THREADS words: wide<4>, wide<8>): the row's
    // page-table entries, one a thread where it has at most TOPK_THREADS pages, loaded while the chunk is in flight,
    // staged in the slice (free: no sums) after the histogram, and the write-out mapped from there (as the fast
    // kernel's FAST_TABLE_SHARED): no global load after the last barrier. Uniform in the CTA.
    constexpr bool table_kernel = CLUSTER == 1 && WIDE_TABLE && sizeof(s.slice) >= TOPK_THREADS * sizeof(int);
    const int last_page = table_kernel ? page_of(m - 1, page_size) : 0;  // (m = n > k >= 1 alone)
    const bool table_staged = table_kernel && last_page < TOPK_THREADS;
    int table_entry = 0;

    if (t < shift) chunk_keys[t] = 0u;
    if (t < 4 * groups - shift - m) keys[m + t] = 0u;
    __syncthreads();  // (also: hist is zeroed)
    {  // the only global read of the row, as in topk_row
        const int vectors = (m - head) >> 2;
        const int tail = head + 4 * vectors;
        const int half = (vectors + 1) >> 1;
        const float4* src4 = reinterpret_cast<const float4*>(src + head);
        uint4* keys4 = reinterpret_cast<uint4*>(keys + head);  // shift + head is 0 or 4: 16-byte aligned
        for (int v = t; v < half; v += TOPK_THREADS) cp_async16(keys4 + v, src4 + v);
        cp_async_commit();
        for (int v = half + t; v < vectors; v += TOPK_THREADS) cp_async16(keys4 + v, src4 + v);
        cp_async_commit();
        if (!table_staged) prefetch_table(table_row, begin, m, page_size);  // while the chunk is in flight
        else if (t <= last_page)  // volatile: issued after the chunk's copies (the contract sizes the table by seq_len)
            asm volatile("ld.global.u32 %0, [%1];" : "=r"(table_entry) : "l"(table_row + t));
        if (t < head) {
            const unsigned int key = sortable_key(src[t]);
            keys[t] = key;
            atomicAdd(&s.hist[coarse_bin(key)], 1);
        }
        if (t < m - tail) {
            const unsigned int key = sortable_key(src[tail + t]);
            keys[tail + t] = key;
            atomicAdd(&s.hist[coarse_bin(key)], 1);
        }
        cp_async_wait<1>();
        for (int v = t; v < half; v += TOPK_THREADS) coarse_keys_in_place(keys4 + v, s.hist);
        cp_async_wait<0>();
        for (int v = half + t; v < vectors; v += TOPK_THREADS) coarse_keys_in_place(keys4 + v, s.hist);
    }
    wide_stamp(2);  // thread 0's share of the chunk landed and counted
    int* const counts = CLUSTER > 1 ? s.row_sum : s.hist;
    // WIDE_WINDOW (a row on 2 or more CTAs): the threshold and the counts before this CTA from the window of the
    // peers' bins (s_threshold, s_first), or where the window is too wide, the sums as without it (the same in every
    // CTA of the row)
    bool windowed = false;
    if constexpr (CLUSTER > 1 && WIDE_WINDOW) {
        lean_window_bounds(s, m, k);  // hist counts exactly this CTA's m keys (the padding is never counted)
        wide_barrier<CLUSTER>();      // every CTA's histogram and window bounds are complete
        windowed = lean_window_threshold<CLUSTER>(s, k, rank, base);
        if (!windowed) wide_sum<CLUSTER>(s.hist, s.slice, s.row_sum, rank, base, direct);
    } else {
        wide_barrier<CLUSTER>();  // every CTA's histogram is complete
        wide_stamp(3);
        wide_sum<CLUSTER>(s.hist, s.slice, s.row_sum, rank, base, direct);
    }
    if (table_staged && t <= last_page) s.slice[t] = table_entry;  // read after fast_threshold's barriers
    const int* const map_row = table_staged ? (const int*)s.slice : table_row;  // the table, or its staged entries
    if (!windowed) fast_threshold(counts, n, k, s.warp_sums, s.s_threshold);
    int inside, remaining;
    unsigned int lo, hi;
    const unsigned int bin = read_threshold(s.s_threshold, k, inside, remaining, lo, hi);
    wide_stamp(4);
    // This CTA's keys above the bucket are staged by their index in its run of slots (over the
    // summed histogram, or hist for CLUSTER 1: both last read before fast_threshold's second
    // barrier; peers read hist, never row_sum).
    int* const staging = counts;
    // No radix pass: every CTA's hist still holds its coarse counts (the same decision in every CTA)
    const bool coarse = inside <= FAST_CANDIDATES;
    // Runs placed from the peers' histograms (fold, the default) or exchanged at a cluster barrier; where the window
    // gave the threshold, from its counts before this CTA (s_first), passed on as the fold's
    const bool from_hists = CLUSTER > 1 && coarse && (fold || windowed);

    if (!coarse) {
        // Heavy ties: the exact radix over the bucket, cluster-wide (see the fast kernel).
        // WIDE_WINDOW: every peer is past its reads of this CTA's window (hist, cta_counts) before either is written
        if (windowed) wide_barrier<CLUSTER>();
        while (inside != remaining && hi != lo) {  // the same in every CTA of the cluster
            const int digit_shift = radix_shift(lo, hi);
            const unsigned int width = hi - lo;
            wide_radix_clear<CLUSTER>(s, t);
            for (int g = t; g < groups; g += TOPK_THREADS) count_digit4(groups4[g], lo, width, digit_shift, s.hist);
            wide_radix_narrow<CLUSTER>(s, counts, rank, base, direct, digit_shift, remaining, inside, lo, hi);
        }
    }
    const bool ranked = inside <= FAST_CANDIDATES;  // else: the first `remaining` inside keys by column

    // Where this CTA's runs start, from the coarse histograms of the CTAs before it: their keys in
    // bins past the threshold bin (all above the bucket) and in it (inside), 4 bins a thread, summed
    // over the CTA (warp sums here, the warps' sums after wide_scan's barriers). Peers keep hist
    // unchanged until they exit, after the last cluster barrier, which follows these reads.
    if (from_hists) {
        unsigned long long before_here = 0ull;  // above | inside << 32 (each < 2^31: no carry)
        if (windowed) {  // (written before lean_window_threshold's last barrier; warp_before free since)
            if (t == 0) before_here = (unsigned int)s.s_first[0] | (unsigned long long)(unsigned int)s.s_first[1] << 32;
        } else if (rank > 0 && 4 * t + 3 >= (int)bin) {
            constexpr int READS = WIDE_PEER_READS(CLUSTER);
            for (int r0 = 0; r0 < rank; r0 += READS) {  // READS peers' 16 bytes in flight, then summed
                int4 part[READS];
#pragma unroll
                for (int j = 0; j < READS; ++j)
                    part[j] = r0 + j < rank ? load_peer4(&s.hist[4 * t], base + r0 + j) : make_int4(0, 0, 0, 0);
#pragma unroll
                for (int j = 0; j < READS; ++j) add_before(part[j], 4u * t, bin, before_here);
            }
        }
        before_here = warp_sum_u64(before_here);
        if (lane == 0) s.warp_before[warp] = before_here;
    }

    // Counting walk: this CTA's keys above the bucket and inside it. A thread's first KEPT groups
    // keep their keys' bits (classify_bits4; group i at bits 4 i, inside FIELD + 4 i), so the
    // placing walk visits the set bits only (about one key a thread) instead of re-reading and
    // re-classifying every group with a qualifying key in the warp (at 16384 columns nearly all:
    // ~600 qualifying keys leave few warps' groups empty; at 65536 about two thirds).
    wide_stamp(5);
    typedef Kept<WIDE_KEPT_GROUPS(SMEM)> K;
    typename K::Mask bits = 0u;
    unsigned int mine = 0u;
    {
        int i = 0;
        for (int g = t; g < groups; g += TOPK_THREADS, ++i) {
            const uint4 q = groups4[g];
            if (!any_at_or_above(q, lo)) continue;
            if (ranked && i < WIDE_KEPT_GROUPS(SMEM))
                bits |= classify_bits4<typename K::Mask, K::FIELD>(q, lo, hi) << (4 * i);
            else mine += classify4(q, lo, hi);
        }
        mine += (unsigned int)__popc((unsigned int)(bits & (((typename K::Mask)1u << K::FIELD) - 1u))) +
                ((unsigned int)__popc((unsigned int)(bits >> K::FIELD)) << 16);
    }
    unsigned int cta_total;
    static_assert(MAX_CHUNK < 65536, "a chunk's counts fit the packed 16-bit fields");
    unsigned int before = block_scan_packed(mine, s.warp_sums, &cta_total);  // fields < 2^16: a chunk <= MAX_CHUNK keys
    // warp_sums is written again only by the heavy ties' column-order walk (its block scans); the
    // ranked path never writes it, so it goes on without wide_scan's second barrier
    if (!ranked) __syncthreads();
    int first_above = 0, first_inside = 0;  // keys of the CTAs before this one in the row
    if (from_hists) {
        const unsigned long long all = warp_sum_u64(s.warp_before[lane]);  // written before block_scan_packed's barrier
        first_above = (int)(all & 0xffffffffull);
        first_inside = (int)(all >> 32);
    } else if (CLUSTER > 1) {
        wide_counts_before(s, cta_total, rank, base, first_above, first_inside);
    }
    const int cta_above = (int)(cta_total & 0xffffu);
    wide_stamp(6);

    if (ranked) {
        // Placing walk in thread order: above keys to staging, inside keys to rank 0's buffer.
        int slot_above = (int)(before & 0xffffu);
        int slot_inside = first_inside + (int)(before >> 16);
        const auto candidate = [&](int slot, unsigned int e, int column) {
            const uint2 c = make_uint2(e, (unsigned int)column);
            if (CLUSTER > 1) store_peer2(&s.candidates[slot], base, c);
            else s.candidates[slot] = c;
        };
        // The kept groups: bit 4 i + j of a kind is word 4 (t + 1024 i) + j, so ascending bits are
        // this thread's column order, as place4 over its groups in turn (each kind in its own slots).
        for (typename K::Mask m = bits; m != 0u; m &= m - 1u) {  // above bits first, then inside
            const int b = lowest_bit(m);
            const int of_kind = b & (K::FIELD - 1);  // 4 i + j
            const int word = 4 * (t + TOPK_THREADS * (of_kind >> 2)) + (of_kind & 3);
            if (b < K::FIELD) staging[slot_above++] = column0 + word;
            else candidate(slot_inside++, chunk_keys[word], column0 + word);
        }
        for (int g = t + WIDE_KEPT_GROUPS(SMEM) * TOPK_THREADS; g < groups; g += TOPK_THREADS) {
            const uint4 q = groups4[g];
            if (!any_at_or_above(q, lo)) continue;
            place4(q, column0 + 4 * g, lo, hi, staging, slot_above, slot_inside, candidate);
        }
        // The cluster barrier's arrive (release) before the write-out, its wait after: rank 0 ranks once
        // every CTA has delivered its candidates, not once every CTA's table reads have returned.
        // One CTA: the CTA barrier before the write-out orders the candidates too.
        wide_stamp(7);
        wide_write_staged<CLUSTER>(out_row + first_above, staging, cta_above, map_row, page_size);
        // past the wait the candidates are in rank 0; no peer reads this CTA any more
        if (rank == 0)  // keys above the bucket fill [0, k - remaining)
            rank_candidates(s.candidates, inside, remaining, [&](int rank_of, int column) {
                out_row[k - remaining + rank_of] = mapped_paged(map_row, column, page_size);
            });
        wide_stamp(8);
        return;
    }

    // Column-order placing walk (heavy ties): groups t + 1024 s, one block scan a step s (column
    // order is step, thread, element order); the inside keys' index in the row is first_inside +
    // the count before them, and the first `remaining` are taken.
    if (CLUSTER > 1) cluster_arrive();  // done reading the peers' counts; waited for before exit
    int above_base = 0, inside_base = first_inside;
    for (int step = 0; step * TOPK_THREADS < groups; ++step) {  // the same trip count in every thread
        const int g = step * TOPK_THREADS + t;
        const uint4 q = g < groups ? groups4[g] : make_uint4(0u, 0u, 0u, 0u);
        unsigned int step_total;
        const unsigned int step_before = wide_scan(classify4(q, lo, hi), s.warp_sums, &step_total);
        int slot_above = above_base + (int)(step_before & 0xffffu);
        int index_inside = inside_base + (int)(step_before >> 16);
        above_base += (int)(step_total & 0xffffu);
        inside_base += (int)(step_total >> 16);
        place4(q, column0 + 4 * g, lo, hi, staging, slot_above, index_inside,
               [&](int index, unsigned int, int column) {
                   if (index < remaining) out_row[k - remaining + index] = mapped_paged(table_row, column, page_size);
               });
    }
    __syncthreads();
    write_mapped(out_row + first_above, staging, cta_above, table_row, page_size);
    if (CLUSTER > 1) cluster_wait();
}

// The wide kernels' row: the copy of a row <= k, rank 0 alone on a row <= solo_up_to (a cluster
// kernel; the host keeps solo_up_to within the chunk buffer), else the cluster on its chunks.
// options: WIDE_FOLD (the runs' starts from the peers' histograms, else exchanged at a cluster
// barrier: DSV4_TOPK_FOLD=0), WIDE_DIRECT_SUM (every CTA reads every peer's histogram, else the
// reduce-scatter: DSV4_TOPK_SUM=direct).
// Rows of seq_len <= skip_up_to (-1: none) are dsv4_topk_indices_fast's, launched before this
// kernel on the same batch (DSV4_TOPK_KERNEL=split). Every decision here is the same in every CTA
// of the cluster, so no barrier is left waiting.
// work (a plan's, topk_indices_plan; null: cluster y takes row y, rank 0 its copy or solo work):
// [gridDim.y][CLUSTER] (row, seq_len) pairs, row -1 none (the plan's seq_lens: the same values).
// A long row fills all CLUSTER entries of its cluster (the cluster path, as without a plan); rows
// <= solo_up_to (or <= k) are packed one a CTA, and each CTA selects its own row alone exactly as
// rank 0 does (the same wide_select<1, CLUSTER> with rank 0, so the same bits), with no cluster
// barrier: the plan never mixes the two kinds in one cluster.
// WIDE_GROUPS (4- and 8-CTA kernels; the default, DSV4_TOPK_GROUPS=0 for the A/B): a row past solo_up_to takes the fewest
// CTAs, a power of two up to CLUSTER, whose chunks are <= solo_up_to columns (row_ctas), not always
// CLUSTER: without a plan ranks 0 .. c - 1 of its cluster (the others exit at once), with one the
// plan's c entries at ranks base .. base + c - 1 (base a multiple of c, so this CTA's rank in the row
// is rank % c), beside other rows' groups of the same c in the same cluster. Either way the row is
// split in the same c chunks by the same code, so planned and unplanned calls write the same bits.
// The groups of one cluster meet at every cluster barrier (a barrier waits for the non-exited threads
// of the whole cluster), each reading and writing only its own CTAs' shared memory.
// least: the fewest CTAs a row past up_to takes, 2 or 4 (topk_indices.py's row_ctas: WIDE_MIN_ROW_CTAS for the wide
// kernels, DSV4_TOPK_MIN_ROW_CTAS; WIDE16_MIN_ROW_CTAS for wide16, whose SASS at 32 registers stays as it was)
static_assert((WIDE_MIN_ROW_CTAS == 2 || WIDE_MIN_ROW_CTAS == 4) && WIDE16_MIN_ROW_CTAS == 2, "2 or 4 CTAs");
template <int CLUSTER>
__device__ __forceinline__ int row_ctas(int n, int up_to, int least) {
    int c = least < CLUSTER ? least : CLUSTER;
    while (c < CLUSTER && (((n + c - 1) / c + 3) & ~3) > up_to) c <<= 1;
    return c;
}

template <int CLUSTER>
__device__ __forceinline__ void topk_row_wide(const float* __restrict__ logits, long long columns,
                                              const int* __restrict__ seq_lens, const int* __restrict__ page_table,
                                              long long table_stride, int* __restrict__ out, int k, int page_size,
                                              int skip_up_to, int solo_up_to, int options,
                                              const int* __restrict__ work) {
    __shared__ WideShared<CLUSTER> s;
    const int t = threadIdx.x;
    const int rank = CLUSTER > 1 ? (int)blockIdx.x : 0;  // grid (CLUSTER, batch), cluster (CLUSTER, 1, 1)
    reinterpret_cast<int4*>(s.hist)[t] = make_int4(0, 0, 0, 0);
    const bool planned = CLUSTER > 1 && work != nullptr;
    // WIDE_EARLY (one-wave grids of the cluster kernels, which the host launches with PDL; opt-in,
    // DSV4_TOPK_EARLY=1): the next kernel on the stream may be scheduled on the SMs this grid leaves
    // free now, and run up to its own pdl_wait() (which returns only once this grid has finished and
    // its writes are visible): its CTAs start and zero their histograms while this one selects.
    if (CLUSTER > 1 && (options & WIDE_EARLY)) pdl_launch_dependents();
    wide_stamp(0);
    // Launched to overlap dsv4_topk_indices_fast (split) or the kernel before: past this wait the
    // logits and the metadata are final. No launch_dependents otherwise: a grid of several waves keeps
    // its SMs for itself.
    pdl_wait();
    // (row, seq_len) pairs: one 8-byte load, not a load of the row and then one of its seq_len
    const int2 entry = planned ? reinterpret_cast<const int2*>(work)[blockIdx.y * CLUSTER + rank]
                               : make_int2((int)blockIdx.y, 0);
    const int b = entry.x;
    if (b < 0) return;  // an empty place in the plan's last pack
    const bool owner = planned || rank == 0;  // writes the row's copy or selects it alone
    const int n = planned ? entry.y : seq_lens[b];
    wide_stamp(1);
    int* out_row = out + (long long)b * k;
    const int* table_row = page_table + (long long)b * table_stride;
    if (n <= skip_up_to) return;
    if (n <= k) {
        if (owner)
            for (int i = t; i < k; i += TOPK_THREADS) out_row[i] = i < n ? mapped_paged(table_row, i, page_size) : -1;
        return;
    }
    const float* row = logits + (long long)b * columns;
    if (CLUSTER > 1 && n <= solo_up_to) {
        if (owner) wide_select<1, CLUSTER>(row, n, 0, out_row, table_row, k, page_size, 0, s);
        return;
    }
    if constexpr (CLUSTER >= 4) {  // wide<2>'s rows take 2 CTAs whatever the option
        if (options & WIDE_GROUPS) {
            const int c = row_ctas<CLUSTER>(n, solo_up_to, WIDE_MIN_ROW_CTAS);  // the same in every CTA of the row
            if (!planned && rank >= c) return;                // before any barrier
            const int in_row = rank & (c - 1), base = rank - in_row;
            if (c == 2) {
                wide_select<2, CLUSTER>(row, n, in_row, out_row, table_row, k, page_size, options, s, base);
                return;
            }
            if constexpr (CLUSTER == 8) {
                if (c == 4) {
                    wide_select<4, CLUSTER>(row, n, in_row, out_row, table_row, k, page_size, options, s, base);
                    return;
                }
            }
        }
    }
    wide_select<CLUSTER, CLUSTER>(row, n, rank, out_row, table_row, k, page_size, options, s);
}

// dsv4_topk_indices_lean<CLUSTER> (opt-in, DSV4_TOPK_LEAN=8 or 16; docs/topk-s10a.md): a few long rows
// (1 x 65536), every row past k on all CLUSTER CTAs of its cluster. The whole kernel is one copy of
// wide_select<CLUSTER, CLUSTER> with the default options as constants (the fold, the reduce-scatter):
// wide<8> carries four (rank 0 alone, 2, 4 and 8 CTAs) and the other options' paths, 14016 SASS
// instructions for a one-shot chain that misses the instruction cache on its first pass. 16 CTAs
// (non-portable: the host sets the attribute) halve each CTA's chunk (4096 columns: one 16-byte group
// a thread). No plan, no solo rows, no skip (the host routes it only where none is asked for); the
// same selection code as wide<CLUSTER> on the same chunks, so the same bits at 8.
template <int CLUSTER>
__global__ void TOPK_CLUSTER_DIMS(CLUSTER) __launch_bounds__(TOPK_THREADS, 1)
    dsv4_topk_indices_lean(const float* logits, long long columns, const int* seq_lens, const int* page_table,
                           long long table_stride, int* out, int k, int page_size, int options) {
#if __CUDA_ARCH__ >= 900
    __shared__ WideShared<CLUSTER> s;
    const int t = threadIdx.x;
    reinterpret_cast<int4*>(s.hist)[t] = make_int4(0, 0, 0, 0);
    if (options & WIDE_EARLY) pdl_launch_dependents();  // as topk_row_wide
    pdl_wait();
    // seq_len by a coherent load, which ptxas keeps after griddepcontrol.wait (see fast_kernel)
    const int b = blockIdx.y;
    int n;
    asm volatile("ld.global.u32 %0, [%1];" : "=r"(n) : "l"(seq_lens + b));
    int* out_row = out + (long long)b * k;
    const int* table_row = page_table + (long long)b * table_stride;
    if (n <= k) {  // the same in every CTA of the cluster: no barrier is left waiting
        if (blockIdx.x == 0)
            for (int i = t; i < k; i += TOPK_THREADS) out_row[i] = i < n ? mapped_paged(table_row, i, page_size) : -1;
        return;
    }
    wide_select<CLUSTER, CLUSTER>(logits + (long long)b * columns, n, (int)blockIdx.x, out_row, table_row, k,
                                  page_size, WIDE_FOLD, s);
#else
    __trap();
#endif
}

// ---- LEAN_CUTS (DSV4_TOPK_LEAN_CUTS, read at import; its default in topk_indices.py): the lean_regs kernel's
// cluster chain without release barriers on it (docs/topk-s11b.md). Bits of:
#define LEAN_PUSH_SUM 1         // the histograms summed by red.async / st.async into mbarrier-counted slices
#define LEAN_PUSH_CANDIDATES 2  // (with 1) rank 0's candidates by st.async, the last cluster barrier an exit guard
#define LEAN_ADDRESS_EARLY 4    // the chunk's address and predicates, the zeroed histogram's barrier: before the wait
#define LEAN_BIT_WALK 8         // the counting and placing walks by classify_bits / place_bits (FAST_BIT_WALK's)
static_assert(LEAN_CUTS >= 0 && LEAN_CUTS <= 15 && (!(LEAN_CUTS & LEAN_PUSH_CANDIDATES) || (LEAN_CUTS & LEAN_PUSH_SUM)),
              "LEAN_PUSH_SUM | LEAN_PUSH_CANDIDATES (which needs LEAN_PUSH_SUM) | LEAN_ADDRESS_EARLY | LEAN_BIT_WALK");

__device__ __forceinline__ unsigned int shared_address(const void* p) {
    return (unsigned int)__cvta_generic_to_shared(p);
}

// The same shared-memory offset in CTA `rank` of the cluster (a shared::cluster address)
__device__ __forceinline__ unsigned int peer_address(unsigned int local, unsigned int rank) {
    unsigned int remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
}

// An mbarrier of one arrival, armed for `bytes` of asynchronous stores (its phase 0 completes once they land)
__device__ __forceinline__ void mbarrier_arm(unsigned long long* bar, unsigned int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                 ::"r"(shared_address(bar)), "r"(bytes) : "memory");
}

// Wait for phase 0 of an mbarrier of this CTA, acquiring at cluster scope what the asynchronous
// stores' complete-tx released (every peer's writes before its pushes). A phase that never
// completes traps after ~2^22 tries (a failed launch, not a hang).
__device__ __forceinline__ void mbarrier_wait_cluster(unsigned long long* bar) {
    const unsigned int address = shared_address(bar);
    for (int tries = 0;; ++tries) {
        unsigned int done;
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n"
                     " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(address) : "memory");
        if (done) return;
        if (tries > (1 << 22)) __trap();
    }
}

// An atomic add into a peer's shared word, counted (4 bytes) by the peer's mbarrier
__device__ __forceinline__ void red_async_add(unsigned int remote, int value, unsigned int remote_bar) {
    asm volatile("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%0], %1, [%2];"
                 ::"r"(remote), "r"(value), "r"(remote_bar) : "memory");
}

// 16 / 8 bytes stored into a peer's shared memory, counted by the peer's mbarrier
__device__ __forceinline__ void st_async4(unsigned int remote, int4 v, unsigned int remote_bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                 ::"r"(remote), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar) : "memory");
}
__device__ __forceinline__ void st_async2(unsigned int remote, uint2 v, unsigned int remote_bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];"
                 ::"r"(remote), "r"(v.x), "r"(v.y), "r"(remote_bar) : "memory");
}

// LEAN_PUSH_SUM, before the PDL wait: this CTA's slice of row_sum (TOPK_THREADS / CLUSTER 16-byte
// groups of bins from group rank x that) zeroed for the peers' adds, bars[0] armed for them ((CLUSTER - 1)
// slices of 16-byte groups), bars[1] for the other slices' sums, bars[2] initialised for the candidates
// (armed by rank 0 once it knows their count); then a release arrive at the cluster barrier, waited for
// only after the histogram, so no peer pushes into this CTA before all of it is in place.
template <int CLUSTER>
__device__ __forceinline__ void lean_push_setup(int* row_sum, unsigned long long* bars, int rank) {
    constexpr int OWN = TOPK_THREADS / CLUSTER;
    const int t = threadIdx.x;
    if (t < OWN) reinterpret_cast<int4*>(row_sum)[rank * OWN + t] = make_int4(0, 0, 0, 0);
    if (t == 0) {
        for (int i = 0; i < 3; ++i)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&bars[i])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        mbarrier_arm(&bars[0], 16u * OWN * (CLUSTER - 1));
        mbarrier_arm(&bars[1], 16u * OWN * (CLUSTER - 1));
    }
    cluster_arrive();
}

// LEAN_PUSH_SUM, after the histogram: the cluster's histograms summed into row_sum in every CTA with
// no release barrier on the chain. Each thread's 16-byte group of bins (group t) is added into its
// owner's row_sum (owner t / OWN) by four red.async; an owner, once bars[0] says its slice holds the
// peers' bins, adds its own and stores the sum into every peer's row_sum by st.async (one thread a
// group: it reads the slice once, then overwrites it) and into its own; every CTA waits for bars[1]
// and one CTA barrier (its own slice's stores). The complete-tx of red.async and st.async releases at
// cluster scope and the waits acquire there: a peer's histogram (complete at its CTA barrier, before
// its pushes) is visible to this CTA's later distributed reads of it (the fold).
template <int CLUSTER>
__device__ __forceinline__ void lean_push_sum(const int* hist, int* row_sum, unsigned long long* bars, int rank) {
    constexpr int OWN = TOPK_THREADS / CLUSTER;
    const int t = threadIdx.x;
    __syncthreads();  // this CTA's histogram is complete
    cluster_wait();   // every peer's slice is zeroed and its mbarriers armed (lean_push_setup's arrive)
    const int owner = t / OWN;
    if (owner != rank) {
        const int4 v = reinterpret_cast<const int4*>(hist)[t];
        const unsigned int to = peer_address(shared_address(&row_sum[4 * t]), owner);
        const unsigned int bar = peer_address(shared_address(&bars[0]), owner);
        red_async_add(to, v.x, bar);
        red_async_add(to + 4, v.y, bar);
        red_async_add(to + 8, v.z, bar);
        red_async_add(to + 12, v.w, bar);
    }
    if (t < OWN) {
        mbarrier_wait_cluster(&bars[0]);  // the peers' bins of this slice are in
        const int g = rank * OWN + t;
        const int4 a = reinterpret_cast<const int4*>(row_sum)[g], b = reinterpret_cast<const int4*>(hist)[g];
        const int4 sum = make_int4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
        const unsigned int local = shared_address(&row_sum[4 * g]), bar = shared_address(&bars[1]);
#pragma unroll
        for (int p = 1; p < CLUSTER; ++p) {
            const unsigned int peer = (unsigned int)((rank + p) % CLUSTER);
            st_async4(peer_address(local, peer), sum, peer_address(bar, peer));
        }
        reinterpret_cast<int4*>(row_sum)[g] = sum;
    }
    mbarrier_wait_cluster(&bars[1]);  // the other slices' sums are in
    __syncthreads();                  // and this CTA's own
}

static_assert((LEAN_WINDOW == 0 || LEAN_WINDOW == 1) && !(LEAN_WINDOW && (LEAN_CUTS & LEAN_PUSH_SUM)),
              "LEAN_WINDOW is 0 or 1, and not with LEAN_PUSH_SUM (both replace the histogram sum)");

// dsv4_topk_indices_lean_regs<CLUSTER, VECS> (opt-in; docs/topk-s10a.md): a row on CLUSTER CTAs with
// each CTA's chunk in registers, VECS 16-byte groups a thread (chunks <= 4096 x VECS columns, rows
// 16-byte aligned: the host routes it there only). DSV4_TOPK_LEAN=16r / 8r: 1 x 65536 as <16, 1> /
// <8, 2>; DSV4_TOPK_PAIRS=1: 64 x 16384 as <2, 2> (128 CTAs, a pair a row, instead of fast<4>). The
// steps and their order are wide_select's on the thread's groups t + 1024 i in registers instead of
// shared memory: no cp.async, no shared key buffer (no dynamic shared memory), no kept bits. The same
// chunks and the same slot order as wide_select<CLUSTER>: the above keys by CTA, then thread, group
// and element, the threshold-bin keys ranked in rank 0; the fold's peer reads spread over the CTA.
template <int CLUSTER, int VECS>
__global__ void TOPK_CLUSTER_DIMS(CLUSTER) __launch_bounds__(TOPK_THREADS, 1)
    dsv4_topk_indices_lean_regs(const float* logits, long long columns, const int* seq_lens, const int* page_table,
                                long long table_stride, int* out, int k, int page_size, int options) {
#if __CUDA_ARCH__ >= 900
    __shared__ WideShared<CLUSTER> s;
    // LEAN_PUSH_SUM's mbarriers: the sum's slices, the sums, the candidates (unreferenced otherwise)
    __shared__ __align__(8) unsigned long long bars[3];
    constexpr bool push_sum = LEAN_CUTS & LEAN_PUSH_SUM, push_candidates = LEAN_CUTS & LEAN_PUSH_CANDIDATES;
    constexpr bool address_early = LEAN_CUTS & LEAN_ADDRESS_EARLY, bit_walk = LEAN_CUTS & LEAN_BIT_WALK;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int rank = (int)blockIdx.x, b = (int)blockIdx.y;
    reinterpret_cast<int4*>(s.hist)[t] = make_int4(0, 0, 0, 0);
    if constexpr (push_sum) lean_push_setup<CLUSTER>(s.row_sum, bars, rank);
    const int width = (int)columns;  // <= CLUSTER x 4096 x VECS (the host's routing)
    int width_begin, width_m, width_chunk;
    // LEAN_ADDRESS_EARLY: the chunk's pointer (this thread's first group), seq_len's and the groups'
    // in-bounds bits from the arguments only, made before the PDL wait (pinned there, as fast_kernel's
    // FAST_ADDRESS_EARLY): after the wait only the loads issue.
    const float* chunk_t = logits;
    const int* seq_len_at = seq_lens + b;
    unsigned int in_bounds = 0u;
    if constexpr (address_early) {
        width_chunk = cta_columns<CLUSTER>(width, rank, width_begin, width_m);
        chunk_t = logits + (long long)b * columns + width_begin + 4 * t;
#pragma unroll
        for (int i = 0; i < VECS; ++i) in_bounds |= (unsigned int)(4 * (t + TOPK_THREADS * i) < width_m) << i;
        asm volatile("" : "+l"(chunk_t), "+l"(seq_len_at), "+r"(in_bounds));
        // hist is zeroed: no barrier between a thread's loads and its atomics (ptxas puts the keys'
        // work before such a barrier, which then holds every atomic until the last load lands)
        __syncthreads();
    }
    if (options & WIDE_EARLY) pdl_launch_dependents();  // as topk_row_wide
    wide_stamp(0);  // (DSV4_TOPK_TRACE's phases, as wide_select's; the ranked path's only)
    pdl_wait();
    // seq_len and this CTA's groups of a row as long as the tensor (`columns`, a multiple of 4 here)
    // issued together: coherent, volatile loads, which ptxas keeps after griddepcontrol.wait and
    // before the tests on n (as fast_kernel's FAST_EARLY_LOADS), so the row's round trip does not
    // wait for seq_len's. A seq_len that splits the row in other chunks loads them again below.
    int n;
    uint4 q[VECS];
    if constexpr (address_early) {
        asm volatile("ld.global.u32 %0, [%1];" : "=r"(n) : "l"(seq_len_at));
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            q[i] = make_uint4(0u, 0u, 0u, 0u);
            if ((in_bounds >> i) & 1u)  // whole float4s: width_m is a multiple of 4
                asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(q[i].x), "=r"(q[i].y), "=r"(q[i].z), "=r"(q[i].w)
                             : "l"(chunk_t + 4 * TOPK_THREADS * i));
        }
    } else {
        asm volatile("ld.global.u32 %0, [%1];" : "=r"(n) : "l"(seq_lens + b));
        width_chunk = cta_columns<CLUSTER>(width, rank, width_begin, width_m);
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            const int c = 4 * (t + TOPK_THREADS * i);
            q[i] = make_uint4(0u, 0u, 0u, 0u);
            if (c < width_m)  // whole float4s: width_m is a multiple of 4
                asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(q[i].x), "=r"(q[i].y), "=r"(q[i].z), "=r"(q[i].w)
                             : "l"(logits + (long long)b * columns + width_begin + c));
        }
    }
    int* const out_row = out + (long long)b * k;
    const int* const table_row = page_table + (long long)b * table_stride;
    if (n <= k) {  // the same in every CTA of the cluster: no barrier is left waiting
        if (rank == 0)
            for (int i = t; i < k; i += TOPK_THREADS) out_row[i] = i < n ? mapped_paged(table_row, i, page_size) : -1;
        if constexpr (push_sum) cluster_wait();  // lean_push_setup's arrive, waited for before exit
        return;
    }
    wide_stamp(1);
    // this CTA's columns [begin, begin + m) as wide_select's (a multiple of 4 from a 16-byte aligned
    // row start, so `begin` is aligned); group i of thread t: columns begin + 4 (t + 1024 i) .. + 3.
    // The same chunk as the tensor's (seq_len = columns, or close): the groups loaded above hold these
    // columns (begin = width_begin where begin < n; past m they are masked to key 0 below).
    int begin, m;
    const int chunk = cta_columns<CLUSTER>(n, rank, begin, m);
    if (chunk != width_chunk) {  // the same in every CTA of the cluster (no barrier inside)
        const float* const src = logits + (long long)b * columns + begin;
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            const int c = 4 * (t + TOPK_THREADS * i);
            q[i] = make_uint4(0u, 0u, 0u, 0u);
            if (c + 4 <= m) {
                q[i] = raw_bits(*reinterpret_cast<const float4*>(src + c));
            } else if (c < m) {  // the row's last vector (seq_len not a multiple of 4)
                q[i].x = __float_as_uint(src[c]);
                q[i].y = c + 1 < m ? __float_as_uint(src[c + 1]) : 0u;
                q[i].z = c + 2 < m ? __float_as_uint(src[c + 2]) : 0u;
            }
        }
    }
    prefetch_table(table_row, begin, m, page_size);  // while the row is in flight
#pragma unroll
    for (int i = 0; i < VECS; ++i) q[i] = keys_before(q[i], 4 * (t + TOPK_THREADS * i), m);  // key 0 past m
    if constexpr (!address_early) __syncthreads();  // hist is zeroed
#pragma unroll
    for (int i = 0; i < VECS; ++i) count_coarse4<!LEAN_WINDOW>(q[i], s.hist);
    // LEAN_WINDOW: every key counted, the padding (key 0 past m, coarse bin 0) too, without a branch a key; its
    // count taken out of bin 0 once (no real key is 0, so bin 0 is then exact)
    if (LEAN_WINDOW && t == 0 && 4 * TOPK_THREADS * VECS > m) atomicSub(&s.hist[0], 4 * TOPK_THREADS * VECS - m);
    wide_stamp(2);
    // LEAN_WINDOW: the threshold and the counts before this CTA from the window (s_threshold, s_first), or where
    // the window is too wide, the sums and the fold as without it (the same in every CTA of the cluster)
    bool windowed = false;
    if constexpr (push_sum) {
        lean_push_sum<CLUSTER>(s.hist, s.row_sum, bars, rank);
    } else if constexpr (LEAN_WINDOW) {
        lean_window_bounds(s, m, k);
        wide_barrier<CLUSTER>();  // every CTA's histogram and window bounds are complete
        wide_stamp(3);
        windowed = lean_window_threshold<CLUSTER>(s, k, rank);
        if (!windowed) wide_sum<CLUSTER>(s.hist, s.slice, s.row_sum, rank, 0, false);
    } else {
        wide_barrier<CLUSTER>();  // every CTA's histogram is complete
        wide_sum<CLUSTER>(s.hist, s.slice, s.row_sum, rank, 0, false);
    }
    if (!windowed) fast_threshold(s.row_sum, n, k, s.warp_sums, s.s_threshold);
    int inside, remaining;
    unsigned int lo, hi;
    const unsigned int bin = read_threshold(s.s_threshold, k, inside, remaining, lo, hi);
    wide_stamp(4);
    int* const staging = s.row_sum;  // last read before fast_threshold's second barrier
    const bool coarse = inside <= FAST_CANDIDATES;
    if (!coarse) {  // heavy ties: the exact radix over the bucket, cluster-wide (as wide_select)
        // LEAN_WINDOW: every peer is past its reads of this CTA's window (hist, cta_counts) before either is written
        if (windowed) wide_barrier<CLUSTER>();
        while (inside != remaining && hi != lo) {
            const int digit_shift = radix_shift(lo, hi);
            wide_radix_clear<CLUSTER>(s, t);
#pragma unroll
            for (int i = 0; i < VECS; ++i) count_digit4(q[i], lo, hi - lo, digit_shift, s.hist);
            wide_radix_narrow<CLUSTER>(s, s.row_sum, rank, 0, false, digit_shift, remaining, inside, lo, hi);
        }
    }
    const bool ranked = inside <= FAST_CANDIDATES;
    // LEAN_WINDOW, 8 CTAs, the windowed ranked path: rank 0 loads the row's page-table entries now (one a thread, up
    // to TOPK_THREADS pages: 1 x 65536 at page size 64; the prefetch put them in L2), they land during the walks, and
    // it stages them in its slice (free on this path: no sums) before the write-out, so that the candidates' write
    // after the last cluster barrier maps from shared memory instead of through a round trip to L2
    constexpr bool table_early_kernel = LEAN_WINDOW && sizeof(s.slice) >= TOPK_THREADS * sizeof(int);
    const int pages = table_early_kernel ? page_of(n - 1, page_size) + 1 : 0;  // the row's pages (n > k >= 1)
    const bool table_staged = table_early_kernel && rank == 0 && windowed && coarse && pages <= TOPK_THREADS;
    int table_entry = 0;
    if (table_staged && t < pages) table_entry = table_row[t];
    const int* const map_row = table_staged ? (const int*)s.slice : table_row;  // rank 0's, or the table

    // The fold: this CTA's runs start after the peers' keys past the threshold bin and in it, from
    // their coarse histograms (wide_select's sums), spread over the CTA: 32 / CLUSTER warps a peer,
    // peer p < rank read by warps p * 32 / CLUSTER .., a 16-byte group of bins a lane from the
    // threshold bin's up, 4 reads in flight a lane (k 512 of 65536 normal scores: ~240 groups, so
    // about one round trip at 16 and 8 CTAs). wide_select's threads of the top bins each read the
    // peers 4 at a time instead: 4 round trips in turn for rank 15 of 16.
    if (coarse && !windowed) {
        constexpr int WARPS_A_PEER = TOPK_WARPS / CLUSTER;
        static_assert(WARPS_A_PEER * CLUSTER == TOPK_WARPS, "whole warps a peer");
        unsigned long long before_here = 0ull;  // above | inside << 32
        if (warp / WARPS_A_PEER < rank) {
            constexpr int STRIDE = 32 * WARPS_A_PEER, READS = 4;
            const int peer = warp / WARPS_A_PEER;
            for (int g0 = (int)(bin >> 2) + 32 * (warp % WARPS_A_PEER) + lane; g0 < FAST_BINS / 4;
                 g0 += READS * STRIDE) {
                int4 part[READS];  // the reads in flight together, then summed
#pragma unroll
                for (int j = 0; j < READS; ++j)
                    part[j] = g0 + j * STRIDE < FAST_BINS / 4 ? load_peer4(&s.hist[4 * (g0 + j * STRIDE)], peer)
                                                              : make_int4(0, 0, 0, 0);
#pragma unroll
                for (int j = 0; j < READS; ++j) add_before(part[j], 4u * (g0 + j * STRIDE), bin, before_here);
            }
        }
        before_here = warp_sum_u64(before_here);
        if (lane == 0) s.warp_before[warp] = before_here;
        // LEAN_PUSH_CANDIDATES: this CTA's last distributed read is done (the fold's, summed above); the
        // exit guard's arrive (relaxed: it publishes nothing), waited for just before exit
        if constexpr (push_candidates) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    }

    // counting: this thread's groups, then its place in the CTA (thread, group, element order)
    unsigned int mine = 0u, above_bits = 0u, inside_bits = 0u;
    if constexpr (bit_walk) {
        classify_bits<VECS>(q, lo, hi, above_bits, inside_bits);
        mine = packed_counts(above_bits, inside_bits);
    } else {
#pragma unroll
        for (int i = 0; i < VECS; ++i)
            if (any_at_or_above(q[i], lo)) mine += classify4(q[i], lo, hi);
    }
    unsigned int cta_total;
    const unsigned int before = block_scan_packed(mine, s.warp_sums, &cta_total);
    wide_stamp(6);
    if (!ranked) __syncthreads();  // warp_sums is scanned again by the column-order walk
    int first_above, first_inside;  // keys of the CTAs before this one in the row
    if (coarse) {
        // written before block_scan_packed's barrier (LEAN_WINDOW: lean_window_threshold's, before its last one)
        const unsigned long long all = windowed ? (unsigned long long)(unsigned int)s.s_first[0]
                                                      | (unsigned long long)(unsigned int)s.s_first[1] << 32
                                                : warp_sum_u64(s.warp_before[lane]);
        first_above = (int)(all & 0xffffffffull);
        first_inside = (int)(all >> 32);
    } else {  // the radix passes rewrote hist: the CTAs' counts exchanged at a cluster barrier
        wide_counts_before(s, cta_total, rank, 0, first_above, first_inside);
    }
    const int cta_above = (int)(cta_total & 0xffffu);
    if (ranked) {  // above keys to staging, inside keys to rank 0's candidates, in thread order
        int slot_above = (int)(before & 0xffffu);
        int slot_inside = first_inside + (int)(before >> 16);
        if (push_candidates && coarse) {
            // the candidates to rank 0 by st.async, counted by its bars[2] (armed with the bytes rank 0
            // does not write itself), rank 0's own by plain stores: no release barrier before the ranking
            if (rank == 0 && t == 0) mbarrier_arm(&bars[2], 8u * (unsigned int)(inside - (int)(cta_total >> 16)));
            if (mine != 0u) {
                const unsigned int to = peer_address(shared_address(&s.candidates[0]), 0);
                const unsigned int bar = peer_address(shared_address(&bars[2]), 0);
                const auto candidate = [&](int slot, unsigned int e, int column) {
                    const uint2 c = make_uint2(e, (unsigned int)column);
                    if (rank == 0) s.candidates[slot] = c;
                    else st_async2(to + 8u * (unsigned int)slot, c, bar);
                };
                if constexpr (bit_walk) {
                    place_bits<VECS>(
                        q, above_bits, inside_bits, begin, [&](int column) { staging[slot_above++] = column; },
                        [&](unsigned int e, int column) { candidate(slot_inside++, e, column); });
                } else {
#pragma unroll
                    for (int i = 0; i < VECS; ++i)
                        if (any_at_or_above(q[i], lo))
                            place4(q[i], begin + 4 * (t + TOPK_THREADS * i), lo, hi, staging, slot_above, slot_inside,
                                   candidate);
                }
            }
            __syncthreads();  // staging complete (and rank 0's own candidates)
            write_mapped(out_row + first_above, staging, cta_above, table_row, page_size);
            if (rank == 0) {
                mbarrier_wait_cluster(&bars[2]);  // the peers' candidates are in
                rank_candidates(s.candidates, inside, remaining, [&](int rank_of, int column) {
                    out_row[k - remaining + rank_of] = mapped_paged(table_row, column, page_size);
                });
            }
            asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // no peer reads this CTA any more
            return;
        }
        if (mine != 0u) {
            if constexpr (bit_walk) {
                place_bits<VECS>(q, above_bits, inside_bits, begin, [&](int column) { staging[slot_above++] = column; },
                                 [&](unsigned int e, int column) {
                                     store_peer2(&s.candidates[slot_inside++], 0, make_uint2(e, (unsigned int)column));
                                 });
            } else {
#pragma unroll
                for (int i = 0; i < VECS; ++i)
                    if (any_at_or_above(q[i], lo))
                        place4(q[i], begin + 4 * (t + TOPK_THREADS * i), lo, hi, staging, slot_above, slot_inside,
                               [&](int slot, unsigned int e, int column) {
                                   store_peer2(&s.candidates[slot], 0, make_uint2(e, (unsigned int)column));
                               });
            }
        }
        // the candidates delivered (release) before the write-out, in rank 0 after it
        if (table_staged && t < pages) s.slice[t] = table_entry;  // before wide_write_staged's CTA barrier
        wide_stamp(7);
        wide_write_staged<CLUSTER>(out_row + first_above, staging, cta_above, map_row, page_size);
        wide_stamp(5);  // (the write-out and its cluster barrier passed, in the slot of phase 5, which this path lacks)
        if (rank == 0)
            rank_candidates(s.candidates, inside, remaining, [&](int rank_of, int column) {
                out_row[k - remaining + rank_of] = mapped_paged(map_row, column, page_size);
            });
        wide_stamp(8);
        return;
    }
    // heavy ties: column order is group i, then thread, then element; one block scan a group (as
    // wide_select's column-order walk), the first `remaining` inside keys taken
    cluster_arrive();  // done reading the peers' counts; waited for before exit
    int above_base = 0, inside_base = first_inside;
#pragma unroll
    for (int i = 0; i < VECS; ++i) {
        unsigned int step_total;
        const unsigned int step_before = wide_scan(classify4(q[i], lo, hi), s.warp_sums, &step_total);
        int slot_above = above_base + (int)(step_before & 0xffffu);
        int index_inside = inside_base + (int)(step_before >> 16);
        above_base += (int)(step_total & 0xffffu);
        inside_base += (int)(step_total >> 16);
        place4(q[i], begin + 4 * (t + TOPK_THREADS * i), lo, hi, staging, slot_above, index_inside,
               [&](int index, unsigned int, int column) {
                   if (index < remaining) out_row[k - remaining + index] = mapped_paged(table_row, column, page_size);
               });
    }
    __syncthreads();
    write_mapped(out_row + first_above, staging, cta_above, table_row, page_size);
    cluster_wait();
#else
    __trap();
#endif
}

// One CTA a row: two CTAs an SM on Hopper and later (32 registers, no spills there; the host counts
// on it only where the chunk's shared memory fits twice). Clusters (they spill at 32 registers) and
// earlier GPUs: one.
#if __CUDA_ARCH__ >= 900
#define TOPK_WIDE_MIN_BLOCKS(cluster) ((cluster) == 1 ? 2 : 1)
#else
#define TOPK_WIDE_MIN_BLOCKS(cluster) 1
#endif

__global__ void __launch_bounds__(TOPK_THREADS, TOPK_WIDE_MIN_BLOCKS(1))
    dsv4_topk_indices_wide1(const float* logits, long long columns, const int* seq_lens, const int* page_table,
                            long long table_stride, int* out, int k, int page_size, int skip_up_to, int solo_up_to,
                            int options) {
    topk_row_wide<1>(logits, columns, seq_lens, page_table, table_stride, out, k, page_size, skip_up_to, solo_up_to,
                     options, nullptr);
}

template <int CLUSTER>
__global__ void TOPK_CLUSTER_DIMS(CLUSTER) __launch_bounds__(TOPK_THREADS, TOPK_WIDE_MIN_BLOCKS(CLUSTER))
    dsv4_topk_indices_wide(const float* logits, long long columns, const int* seq_lens, const int* page_table,
                           long long table_stride, int* out, int k, int page_size, int skip_up_to, int solo_up_to,
                           int options, const int* work) {
#if __CUDA_ARCH__ >= 900
    topk_row_wide<CLUSTER>(logits, columns, seq_lens, page_table, table_stride, out, k, page_size, skip_up_to,
                           solo_up_to, options, work);
#else
    __trap();
#endif
}

// ---------------------------------------------------------------------------------------------
// DSV4_TOPK_LONG=wide16 (opt-in): `dsv4_topk_indices_wide16<CLUSTER>`, the wide kernel's selection with
// the chunk kept in shared memory as the HIGH 16 bits of each order-preserving key (2 bytes a column,
// not 4), so two 1024-thread CTAs share an SM (32 registers, 72 KB of keys + WideShared a CTA) and one
// CTA's latency chain (load -> histogram -> cluster sum -> threshold -> walks -> write-out) overlaps
// another's. For 64 x 262144 (8 CTAs a row, chunks of 32768) wide<8> runs 512 CTAs one an SM (about
// four waves of whole chains); here about two rounds of chains that share their SMs.
// Exact because the coarse bin (coarse_bin) depends on key bits 31..17 only, and a coarse bucket's
// bounds are whole 2^17 key ranges: key > hi iff key >> 16 > hi >> 16, key >= lo iff key >> 16 >= lo >> 16.
// So the histogram and the counting walk of the common path read only the 16-bit keys. The few groups of
// four columns holding a key at or above the bucket (~k / CLUSTER + the bucket's keys a CTA) are read
// again from global memory (L2: this CTA read them moments before) as full 32-bit keys for the placing
// walk, the candidates' exact ranks and the heavy ties' radix (a bucket narrowed below 2^17 keys): the
// same classification, walks and ranks as wide_select, so the same selection in the same output order
// (bitwise the wide kernel's wherever both give a row the same CTAs). Rows are 16-byte aligned (the
// host routes aligned tensors only) and chunks multiples of 4 columns, so a group is one float4.

// The raw bits of the chunk's group g (columns 4 g .. 4 g + 3 of src); columns at or past m are not read.
__device__ __forceinline__ uint4 chunk_raw4(const float* __restrict__ src, int g, int m) {
    const int c = 4 * g;
    if (c + 4 <= m) return raw_bits(__ldg(reinterpret_cast<const float4*>(src + c)));
    return make_uint4(c < m ? __float_as_uint(src[c]) : 0u, c + 1 < m ? __float_as_uint(src[c + 1]) : 0u,
                      c + 2 < m ? __float_as_uint(src[c + 2]) : 0u, c + 3 < m ? __float_as_uint(src[c + 3]) : 0u);
}

// The full keys of the chunk's group g, key 0 at or past m (as the wide kernel's padding).
__device__ __forceinline__ uint4 chunk_keys4(const float* __restrict__ src, int g, int m) {
    return keys_before(chunk_raw4(src, g, m), 4 * g, m);
}

// Four keys' high halves, two a word, the earlier column in the low half.
__device__ __forceinline__ uint2 high_halves4(uint4 q) {
    return make_uint2((q.x >> 16) | (q.y & 0xffff0000u), (q.z >> 16) | (q.w & 0xffff0000u));
}

// The largest of four 16-bit keys (one SIMD max, one max).
__device__ __forceinline__ unsigned int max_half4(uint2 h) {
    const unsigned int m = __vmaxu2(h.x, h.y);
    return max(m & 0xffffu, m >> 16);
}

// classify4 on 16-bit keys for a coarse bucket [lo16 << 16, (hi16 << 16) | 0xffff]: above in bits 0..15,
// inside in bits 16..31; key 0 (padding) is never inside (no real key's high half is 0: -inf's is 0x7f).
__device__ __forceinline__ unsigned int classify_halves4(uint2 h, unsigned int lo16, unsigned int hi16) {
    const unsigned int from = max(lo16, 1u);
    const unsigned int e[4] = {h.x & 0xffffu, h.x >> 16, h.y & 0xffffu, h.y >> 16};
    unsigned int packed = 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j) packed += e[j] > hi16 ? 1u : e[j] >= from ? 0x10000u : 0u;
    return packed;
}

// options bit of wide16 (topk_indices.py: DSV4_TOPK_LONG=wide16-prefetch): the chunk bulk-prefetched into L2
static_assert(WIDE16_PREFETCH > (WIDE_FOLD | WIDE_DIRECT_SUM | WIDE_GROUPS | WIDE_EARLY)
              && (WIDE16_PREFETCH & (WIDE16_PREFETCH - 1)) == 0, "a bit of its own");

// Groups a thread loads before it converts and counts them (8 registers of float4 in flight)
#define WIDE16_LOADS 2

// The row a wide16 CTA selects, in shared memory: at 32 registers the row's pointers are not kept in
// registers from one use to the next but made again from these (read through volatile: never cached).
struct Wide16Row {
    int b, n;                 // the row and its seq_len (topk_row_wide16)
    int begin, m;             // this CTA's columns [begin, begin + m) (wide16_select)
    unsigned int lo, hi;      // the bucket, once found (coarse, or narrowed by the heavy ties' radix)
    int inside, remaining;    // the row's keys in it, and how many of them are taken
};

__device__ __forceinline__ int fresh(const int& v) { return *reinterpret_cast<const volatile int*>(&v); }
__device__ __forceinline__ unsigned int fresh_u(const unsigned int& v) {
    return *reinterpret_cast<const volatile unsigned int*>(&v);
}

// The CTA's rank in its cluster, read afresh (as fresh_row)
__device__ __forceinline__ int fresh_cluster_rank() {
    int rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// wide_sum's reduce-scatter and all-gather (a pair: the peer's histogram read directly), the thread's
// index read afresh where used: at 32 registers nothing derived from it is held across the heavy ties'
// radix passes (ptxas hoisted wide_sum's indices out of them and spilled them).
template <int CLUSTER>
__device__ __forceinline__ void wide16_sum(const int* local, int* slice, int* sum, int rank, int base) {
    if (CLUSTER == 2) {
        const int t = fresh_thread();
        const int4 a = reinterpret_cast<const int4*>(local)[t], b = load_peer4(&local[4 * t], base + (rank ^ 1));
        reinterpret_cast<int4*>(sum)[t] = make_int4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    } else if (CLUSTER > 2) {
        constexpr int GROUPS = FAST_BINS / 4 / CLUSTER;  // 16-byte groups of bins in a slice
        static_assert(GROUPS * CLUSTER == TOPK_THREADS && 32 % CLUSTER == 0, "a group's parts in one warp");
        {
            const int t = fresh_thread();
            sum_slice<CLUSTER>(local, slice, rank, base, t);
        }
        cluster_arrive();  // every slice is summed (release: the peers read it next)
        cluster_wait();
        const int t = fresh_thread();
        gather_sum<CLUSTER>(slice, sum, rank, base, t);
    }
}

// wide16_select's and twin_select's shared steps. rank() and peer_base() are read afresh at each use (as
// there): this CTA's rank in the row and the cluster rank of the row's first CTA.

// Where this CTA's runs start, from the peers' coarse histograms: above | inside << 32 of the (peer, 16-byte
// group of bins) pairs of the peers before this CTA from the threshold bin's group up, dealt out over all
// threads (one distributed read a thread a round); each warp's sum into warp_before.
template <class Rank, class PeerBase>
__device__ __forceinline__ void peer_hists_before(const int* hist, unsigned long long* warp_before, unsigned int bin,
                                                  const Rank& rank, const PeerBase& peer_base) {
    unsigned long long before_here = 0ull;  // above | inside << 32
    const int first = (int)bin >> 2, groups_past = FAST_BINS / 4 - first;
    for (int pair = fresh_thread(); pair < rank() * groups_past; pair += TOPK_THREADS) {
        const int peer = pair / groups_past, g = first + pair - peer * groups_past;
        const int4 part = load_peer4(&hist[4 * g], peer_base() + peer);
        const int c[4] = {part.x, part.y, part.z, part.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const unsigned int b = 4u * g + e;
            if (b > bin) before_here += (unsigned long long)c[e];
            else if (b == bin) before_here += (unsigned long long)c[e] << 32;
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) before_here += __shfl_xor_sync(0xffffffffu, before_here, off);
    if ((fresh_thread() & 31) == 0) warp_before[fresh_thread() >> 5] = before_here;
}

// peer_hists_before's warp sums added up: this CTA's first slot above and first index inside
__device__ __forceinline__ void firsts_from_hists(const unsigned long long* warp_before, int& first_above,
                                                  int& first_inside) {
    unsigned long long all = warp_before[fresh_thread() & 31];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) all += __shfl_xor_sync(0xffffffffu, all, off);
    first_above = (int)(all & 0xffffffffull);
    first_inside = (int)(all >> 32);
}

// The same from the peers' published counts (cta_counts: above, inside, written by thread 0 before): the
// cluster barrier, then the counts of the peers before this CTA summed by the first warp.
template <class Rank, class PeerBase>
__device__ __forceinline__ void firsts_from_peers(const int* cta_counts, int* s_first, const Rank& rank,
                                                  const PeerBase& peer_base, int& first_above, int& first_inside) {
    cluster_arrive();  // cta_counts published; every peer is past its reads of this CTA's hist
    cluster_wait();
    if (fresh_thread() < 32) {
        int above = 0, in = 0;
        if (fresh_thread() < rank()) {
            above = load_peer(&cta_counts[0], peer_base() + fresh_thread());
            in = load_peer(&cta_counts[1], peer_base() + fresh_thread());
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            above += __shfl_xor_sync(0xffffffffu, above, off);
            in += __shfl_xor_sync(0xffffffffu, in, off);
        }
        if (fresh_thread() == 0) {
            s_first[0] = above;
            s_first[1] = in;
        }
    }
    __syncthreads();
    first_above = s_first[0];
    first_inside = s_first[1];
}

// Column-order placing walk (heavy ties) over a CTA's groups on full keys, the same trip count in every thread:
// a step's groups classified, scanned over the CTA and placed, the bucket's keys in column order taken while
// `remaining` last. passes(g, lo): group g may hold a key >= lo (else its keys count as 0); first_column(g):
// its first column in the row.
template <class Passes, class FullKeys, class FirstColumn, class OutRow, class TableRow>
__device__ __forceinline__ void column_order_walk(int groups, unsigned int lo, unsigned int hi, int remaining,
                                                  int inside_base, int* warp_sums, int* staging,
                                                  const Passes& passes, const FullKeys& full_keys,
                                                  const FirstColumn& first_column, const OutRow& out_row,
                                                  const TableRow& table_row, int k, int page_size) {
    int above_base = 0;
    for (int step = 0; step * TOPK_THREADS < groups; ++step) {  // the same trip count in every thread
        const int g = step * TOPK_THREADS + fresh_thread();
        const uint4 q = g < groups && passes(g, lo) ? full_keys(g) : make_uint4(0u, 0u, 0u, 0u);
        unsigned int step_total;
        const unsigned int step_before = wide_scan(classify4(q, lo, hi), warp_sums, &step_total);
        int slot_above = above_base + (int)(step_before & 0xffffu);
        int index_inside = inside_base + (int)(step_before >> 16);
        above_base += (int)(step_total & 0xffffu);
        inside_base += (int)(step_total >> 16);
        place4(q, first_column(g), lo, hi, staging, slot_above, index_inside, [&](int index, unsigned int, int column) {
            if (index < remaining) out_row()[k - remaining + index] = mapped_paged(table_row(), column, page_size);
        });
    }
}

// The row's coarse bucket from every CTA's histogram (the sum into counts): its bin (returned), the keys in it,
// how many of them are taken and its key range
template <int CLUSTER, int SMEM, class Row, class Rank, class PeerBase>
__device__ __forceinline__ unsigned int coarse_bucket(WideShared<SMEM>& s, int* counts, const Row& r, int k,
                                                      const Rank& rank, const PeerBase& peer_base, int& inside,
                                                      int& remaining, unsigned int& lo, unsigned int& hi) {
    wide_barrier<CLUSTER>();  // every CTA's histogram is complete
    wide16_sum<CLUSTER>(s.hist, s.slice, s.row_sum, rank(), peer_base());
    fast_threshold(counts, fresh(r.n), k, s.warp_sums, s.s_threshold);
    const unsigned int bin = s.s_threshold[0];
    inside = s.s_threshold[2];
    remaining = k - s.s_threshold[1];
    coarse_bin_keys(bin, &lo, &hi);
    return bin;
}

// Heavy ties: the exact radix over the bucket [lo, hi], cluster-wide, on the full keys of the groups that pass
// (passes(g, lo): group g may hold a key >= lo), until the bucket holds only keys taken (the same in every CTA)
template <int CLUSTER, int SMEM, class Passes, class FullKeys, class Rank, class PeerBase>
__device__ __forceinline__ void heavy_ties_radix(WideShared<SMEM>& s, int* counts, int groups, unsigned int& lo,
                                                 unsigned int& hi, int& inside, int& remaining, const Passes& passes,
                                                 const FullKeys& full_keys, const Rank& rank,
                                                 const PeerBase& peer_base) {
    while (inside != remaining && hi != lo) {  // the same in every CTA of the cluster
        const int digit_shift = radix_shift(lo, hi);
        const unsigned int width = hi - lo;
        wide_barrier<CLUSTER>();  // every peer has read this CTA's hist; s_threshold read here
        reinterpret_cast<int4*>(s.hist)[fresh_thread()] = make_int4(0, 0, 0, 0);
        __syncthreads();
        for (int g = fresh_thread(); g < groups; g += TOPK_THREADS)
            if (passes(g, lo)) count_digit4(full_keys(g), lo, width, digit_shift, s.hist);
        wide_barrier<CLUSTER>();
        wide16_sum<CLUSTER>(s.hist, s.slice, s.row_sum, rank(), peer_base());
        fast_threshold(counts, inside, remaining, s.warp_sums, s.s_threshold);
        narrow_bucket(s.s_threshold, digit_shift, remaining, inside, lo, hi);
    }
}

// The bucket into the row's shared record (Wide16Row or TwinRow) for the walks, which read it afresh
template <class Row>
__device__ __forceinline__ void store_bucket(Row& r, unsigned int lo, unsigned int hi, int inside, int remaining) {
    if (fresh_thread() == 0) {
        r.lo = lo;
        r.hi = hi;
        r.inside = inside;
        r.remaining = remaining;
    }
}

// wide_select on 16-bit keys (see above): one row (seq_len n > k, also in r.n) by CLUSTER CTAs, this one rank() of them
// (cluster rank base() + rank()); SMEM: the kernel's WideShared (and its cluster size, >= CLUSTER).
template <int CLUSTER, int SMEM>
__device__ __forceinline__ void wide16_select(const float* __restrict__ logits, long long columns,
                                              int* __restrict__ out, const int* __restrict__ page_table,
                                              long long table_stride, int k, int page_size, int options,
                                              WideShared<SMEM>& s, Wide16Row& r, int n) {
    const bool fold = options & WIDE_FOLD;  // (WIDE_DIRECT_SUM: the host never sets it here)
    extern __shared__ __align__(16) unsigned int chunk_keys[];  // here: groups of four 16-bit keys
    uint2* const halves = reinterpret_cast<uint2*>(chunk_keys);
    // the thread's index and this CTA's rank in the row (the row's CTAs are cluster ranks base() .. base() +
    // CLUSTER - 1: CLUSTER consecutive, aligned), read afresh where used rather than held in registers
    const auto tid = []() { return fresh_thread(); };
    const auto rank = []() { return CLUSTER > 1 ? fresh_cluster_rank() & (CLUSTER - 1) : 0; };
    const auto base = []() { return fresh_cluster_rank() & ~(CLUSTER - 1); };

    // this CTA's columns, as wide_select splits the row; src() is 16-byte aligned
    const int groups = [&]() {
        // cta_columns' split written out: calling it swaps an IMAD's operands in this kernel's SASS, as measured
        const int chunk = ((n + CLUSTER - 1) / CLUSTER + 3) & ~3;
        const int begin = min(n, rank() * chunk);
        const int m = min(n, begin + chunk) - begin;
        if (tid() == 0) {
            r.begin = begin;
            r.m = m;
        }
        return (m + 3) >> 2;
    }();
    const auto src = [&]() { return logits + (long long)fresh(r.b) * columns + fresh(r.begin); };
    const auto table_row = [&]() { return page_table + (long long)fresh(r.b) * table_stride; };
    const auto out_row = [&]() { return out + (long long)fresh(r.b) * k; };
    // the full keys of group g, from global memory (L2)
    const auto full_keys = [&](int g) { return chunk_keys4(src(), g, fresh(r.m)); };
    // whether group g may hold a key >= lo (a key >= lo has a high half >= lo >> 16)
    const auto passes = [&](int g, unsigned int lo) { return max_half4(halves[g]) >= lo >> 16; };

    __syncthreads();  // hist is zeroed; r.begin and r.m are written
    {
        const int m = fresh(r.m);
        prefetch_table(table_row(), fresh(r.begin), m, page_size);
        // the only full read of the chunk: WIDE16_LOADS float4 in flight a thread, then their keys' high
        // halves stored and their coarse bins counted
        const float* const from = src();
        if (options & WIDE16_PREFETCH) {
            // the chunk's whole float4 part requested into L2 at once (bulk prefetches of up to 16 KB by
            // the first threads), so the loop's later round trips find it there instead of each waiting
            // for DRAM in turn (two float4 a thread in flight: 4 round trips at 32768 columns)
            const int bytes = 16 * (m >> 2), piece = 16384 * tid();
            if (piece < bytes)
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(from + piece / 4),
                             "r"(min(16384, bytes - piece))
                             : "memory");
        }
        for (int g0 = tid(); g0 < groups; g0 += WIDE16_LOADS * TOPK_THREADS) {
            uint4 raw[WIDE16_LOADS];
#pragma unroll
            for (int j = 0; j < WIDE16_LOADS; ++j) {
                const int g = g0 + j * TOPK_THREADS;
                raw[j] = g < groups ? chunk_raw4(from, g, m) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int j = 0; j < WIDE16_LOADS; ++j) {
                const int g = g0 + j * TOPK_THREADS;
                if (g >= groups) break;
                const uint4 q = keys_before(raw[j], 4 * g, m);
                halves[g] = high_halves4(q);
                if (4 * g + 4 <= m) count_coarse4<false>(q, s.hist);
                else count_coarse4<true>(q, s.hist);
            }
        }
    }
    int* const counts = CLUSTER > 1 ? s.row_sum : s.hist;
    int inside, remaining;
    unsigned int lo, hi;
    const unsigned int bin = coarse_bucket<CLUSTER>(s, counts, r, k, rank, base, inside, remaining, lo, hi);
    int* const staging = counts;  // as wide_select
    const bool coarse = inside <= FAST_CANDIDATES;
    const bool from_hists = CLUSTER > 1 && coarse && fold;

    if (!coarse) {
        // Heavy ties: the exact radix over the bucket, cluster-wide, on full keys read again from global
        // memory for the groups that can hold one (a key >= lo has a high half >= lo >> 16)
        heavy_ties_radix<CLUSTER>(s, counts, groups, lo, hi, inside, remaining, passes, full_keys, rank, base);
    }
    const bool ranked = inside <= FAST_CANDIDATES;
    // the bucket for the walks after the counting one (past block_scan_packed's barrier), read from
    // shared memory there: not held in registers through the walks
    store_bucket(r, lo, hi, inside, remaining);

    // Where this CTA's runs start, from the peers' coarse histograms, as wide_select, but spread: the
    // (peer, 16-byte group of bins) pairs of the peers before this CTA and the groups from the threshold
    // bin's up are dealt out over all threads, one distributed read a thread a round (wide_select's threads
    // of those groups read the peers in turn: up to 7 round trips at rank 7 with one read in flight, here
    // one while the pairs are <= 1024, e.g. the ~230 groups past a normal row's threshold x 7 peers: 2).
    // The sum is over all pairs whatever their order: the same counts.
    if (from_hists) peer_hists_before(s.hist, s.warp_before, bin, rank, base);

    // Counting walk: the coarse bucket on the 16-bit keys alone; a narrowed one on the full keys
    unsigned int mine = 0u;
    for (int g = tid(); g < groups; g += TOPK_THREADS) {
        const uint2 h = halves[g];
        if (max_half4(h) < lo >> 16) continue;
        mine += coarse ? classify_halves4(h, lo >> 16, hi >> 16) : classify4(full_keys(g), lo, hi);
    }
    unsigned int cta_total;
    static_assert(WIDE16_CHUNK < 65536, "a chunk's counts fit the packed 16-bit fields");
    unsigned int before = block_scan_packed(mine, s.warp_sums, &cta_total);
    if (!ranked) __syncthreads();
    int first_above = 0, first_inside = 0;
    if (from_hists) firsts_from_hists(s.warp_before, first_above, first_inside);
    else if (CLUSTER > 1) {
        if (tid() == 0) {
            s.cta_counts[0] = (int)(cta_total & 0xffffu);
            s.cta_counts[1] = (int)(cta_total >> 16);
        }
        firsts_from_peers(s.cta_counts, s.s_first, rank, base, first_above, first_inside);
    }
    const int cta_above = (int)(cta_total & 0xffffu);

    if (ranked) {
        // Placing walk in thread order on the full keys of the groups that hold one at or above lo (the
        // same order as wide_select's: a thread's groups ascending, then their columns)
        const unsigned int lo = fresh_u(r.lo), hi = fresh_u(r.hi);
        int slot_above = (int)(before & 0xffffu);
        int slot_inside = first_inside + (int)(before >> 16);
        const auto candidate = [&](int slot, unsigned int e, int column) {
            const uint2 c = make_uint2(e, (unsigned int)column);
            if (CLUSTER > 1) store_peer2(&s.candidates[slot], base(), c);
            else s.candidates[slot] = c;
        };
        for (int g = tid(); g < groups; g += TOPK_THREADS) {
            if (max_half4(halves[g]) < lo >> 16) continue;
            place4(full_keys(g), fresh(r.begin) + 4 * g, lo, hi, staging, slot_above, slot_inside, candidate);
        }
        if (CLUSTER > 1) cluster_arrive();
        __syncthreads();  // staging is complete
        write_mapped(out_row() + first_above, staging, cta_above, table_row(), page_size);
        if (CLUSTER > 1) cluster_wait();  // the candidates are in rank 0; no peer reads this CTA any more
        if (rank() == 0) {
            const int remaining = fresh(r.remaining);
            rank_candidates(s.candidates, fresh(r.inside), remaining, [&](int rank_of, int column) {
                out_row()[k - remaining + rank_of] = mapped_paged(table_row(), column, page_size);
            });
        }
        return;
    }

    if (CLUSTER > 1) cluster_arrive();
    // Column-order placing walk (heavy ties), as wide_select's, on full keys
    column_order_walk(
        groups, fresh_u(r.lo), fresh_u(r.hi), fresh(r.remaining), first_inside, s.warp_sums, staging,
        passes, full_keys,
        [&](int g) { return fresh(r.begin) + 4 * g; }, out_row, table_row, k, page_size);
    __syncthreads();
    write_mapped(out_row() + first_above, staging, cta_above, table_row(), page_size);
    if (CLUSTER > 1) cluster_wait();
}

// topk_row_wide with wide16_select: the same routing of rows (the copy, rank 0 alone up to solo_up_to,
// WIDE_GROUPS' row_ctas, a plan's work list), so the same CTAs a row as the wide kernel at the same bounds
// (the host keeps solo_up_to <= WIDE16_CHUNK, the chunk buffer).
template <int CLUSTER>
__device__ __forceinline__ void topk_row_wide16(const float* __restrict__ logits, long long columns,
                                                const int* __restrict__ seq_lens, const int* __restrict__ page_table,
                                                long long table_stride, int* __restrict__ out, int k, int page_size,
                                                int skip_up_to, int solo_up_to, int options,
                                                const int* __restrict__ work) {
    static_assert(CLUSTER == 8, "WideShared<8>'s slice holds a row on 4 of its CTAs");
    __shared__ WideShared<CLUSTER> s;
    __shared__ Wide16Row r;
    const int t = threadIdx.x;
    const int rank = (int)blockIdx.x;  // grid (CLUSTER, batch), cluster (CLUSTER, 1, 1)
    reinterpret_cast<int4*>(s.hist)[t] = make_int4(0, 0, 0, 0);
    const bool planned = work != nullptr;
    if (options & WIDE_EARLY) pdl_launch_dependents();
    pdl_wait();
    const int2 entry = planned ? reinterpret_cast<const int2*>(work)[blockIdx.y * CLUSTER + rank]
                               : make_int2((int)blockIdx.y, 0);
    const int b = entry.x;
    if (b < 0) return;
    const bool owner = planned || rank == 0;
    const int n = planned ? entry.y : seq_lens[b];
    if (n <= skip_up_to) return;
    if (n <= k) {
        int* out_row = out + (long long)b * k;
        const int* table_row = page_table + (long long)b * table_stride;
        if (owner)
            for (int i = t; i < k; i += TOPK_THREADS) out_row[i] = i < n ? mapped_paged(table_row, i, page_size) : -1;
        return;
    }
    if (t == 0) {  // read after wide16_select's first barrier
        r.b = b;
        r.n = n;
    }
    if (n <= solo_up_to) {
        if (owner) wide16_select<1, CLUSTER>(logits, columns, out, page_table, table_stride, k, page_size, 0, s, r, n);
        return;
    }
    if (options & WIDE_GROUPS) {
        const int c = row_ctas<CLUSTER>(n, solo_up_to, WIDE16_MIN_ROW_CTAS);
        if (!planned && rank >= c) return;
        if (c == 2) {
            wide16_select<2, CLUSTER>(logits, columns, out, page_table, table_stride, k, page_size, options, s, r, n);
            return;
        }
        if (c == 4) {
            wide16_select<4, CLUSTER>(logits, columns, out, page_table, table_stride, k, page_size, options, s, r, n);
            return;
        }
    }
    wide16_select<CLUSTER, CLUSTER>(logits, columns, out, page_table, table_stride, k, page_size, options, s, r, n);
}

// Two CTAs an SM: 32 registers a thread (2 x 1024 x 32 = the register file)
template <int CLUSTER>
__global__ void TOPK_CLUSTER_DIMS(CLUSTER) __launch_bounds__(TOPK_THREADS, 2)
    dsv4_topk_indices_wide16(const float* logits, long long columns, const int* seq_lens, const int* page_table,
                             long long table_stride, int* out, int k, int page_size, int skip_up_to, int solo_up_to,
                             int options, const int* work) {
#if __CUDA_ARCH__ >= 900
    topk_row_wide16<CLUSTER>(logits, columns, seq_lens, page_table, table_stride, out, k, page_size, skip_up_to,
                             solo_up_to, options, work);
#else
    __trap();
#endif
}

// ---------------------------------------------------------------------------------------------
// DSV4_TOPK_LONG_PLAN=twin (docs/topk-s11a.md, docs/topk-s12a.md): `dsv4_topk_indices_twin<4>`, wide<8>'s
// selection of a row on a 4-CTA cluster, CTA p holding wide<8>'s chunks 2p and 2p + 1 back to back (65536 columns
// at 262144), two CTAs an SM; `dsv4_topk_indices_twin<2>` the same on a 2-CTA cluster, CTA p holding chunks
// 4p .. 4p + 3 (131072 columns), one CTA an SM. 64 x 262144 is then 256 (128) CTAs, half (a quarter of)
// wide<8>'s per-CTA chains; 4-CTA clusters must sit in one GPC, so the H200 holds 62 of them at once (the
// lead's ncu), 2-CTA clusters one a TPC: 66. The chunk is read once from global memory into
// registers and counted; no key is kept in shared memory but one 16-bit word a group of four columns, the
// high half of the group's largest key (`max16`, 2 bytes a 4 columns). The walks test it against the
// bucket (a key >= lo has a high half >= lo >> 16, so max16 < lo >> 16 rules the group out, exactly for a
// coarse bucket, whose lo has its low 17 bits clear, and conservatively for a narrowed one) and read the
// few groups that pass again from global memory as full keys (wide16's chunk_keys4).
// The same bits as wide<8> on the same row: the sums, threshold and bucket are the row's; each CTA counts
// its chunks apart (a thread's groups t + 1024 i of each) and places chunk c's keys above the bucket before
// chunk c + 1's, each in wide<8>'s (thread, group, column) order, so its run is wide<8>'s CTAs of those chunks
// back to back; the heavy ties' column-order walk is column order over the CTA's columns, its chunks in turn; the threshold-bin candidates are ranked by (key, column) whatever their slots. The host
// routes it only from a plan whose rows are all copies or rows wide<8> splits over its 8 CTAs (the plan's
// call then equals the unplanned call on wide<8> bitwise); rows 16-byte aligned.

// The row a twin CTA selects (as Wide16Row: at 32 registers the row's pointers are made again from these)
template <int CHUNKS>
struct TwinRow {
    int b, n;                       // the row and its seq_len
    int begin, m;                   // this CTA's columns [begin, begin + m)
    int split;                      // groups of a wide<8> chunk: the CTA's chunk c starts at group c split
    unsigned int lo, hi;            // the bucket
    int inside, remaining;          // the row's keys in it, and how many of them are taken
    unsigned int total[CHUNKS];     // this CTA's packed counts (above | inside << 16), a chunk each
};

// the largest of four keys' high halves
__device__ __forceinline__ unsigned int max16_of4(uint4 q) { return max(max(q.x, q.y), max(q.z, q.w)) >> 16; }

// four floats' keys (sortable_key)
__device__ __forceinline__ uint4 keys_of4(uint4 raw) {
    return make_uint4(sortable_key(__uint_as_float(raw.x)), sortable_key(__uint_as_float(raw.y)),
                      sortable_key(__uint_as_float(raw.z)), sortable_key(__uint_as_float(raw.w)));
}

// A whole group's four keys counted by coarse bin and its max16 stored. bin_2048: the shared-memory address
// of the histogram's bin 2048, so coarse_bin's 2048 + (c ^ negative) is at bin_2048 + 4 (c ^ negative), c ^
// negative being c or -1 - c (mod 2^32): the same bins, one LEA a key for the address (ptxas kept an add of
// 2048 and a multiply-add for atomicAdd on the histogram's index).
__device__ __forceinline__ void twin_count4(uint4 q, int g, unsigned short* max16, unsigned int bin_2048) {
    max16[g] = (unsigned short)max16_of4(q);
    const unsigned int e[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const unsigned int negative = ~(unsigned int)((int)e[j] >> 31);
        const int top = (int)((e[j] ^ negative) >> 17);
        const int c = min(max(top - (int)(0x4000u + FAST_CODE_LO), 0), (int)(FAST_CODE_HI - FAST_CODE_LO));
        // ordered with the barriers after the loop as every volatile asm (no value is read back here)
        asm volatile("red.shared.add.u32 [%0], 1;" ::"r"(bin_2048 + 4u * ((unsigned int)c ^ negative)));
    }
}

// DSV4_TOPK_TWIN_FORM=onewalk (TWIN_ONE_WALK 1, docs/topk-s13a.md): twin<2>'s four counting walks and four placing
// walks each one pass over the CTA's chunks. A walk a chunk exposed one global latency for every iteration with a
// lane whose group passed max16 (its re-read used in the same iteration), ~5 a chunk for the slowest warp; here a
// thread's passing groups are a mask (chunk c's group i at bit 16 c + i) and their re-reads go four at a time.
// Groups of a wide<8> chunk a thread at most (MAX_CHUNK's): a chunk's 16 bits of the mask, a thread's counts in a
// chunk (<= 4 a group) in 8 bits
#define TWIN_GROUPS_A_THREAD ((MAX_CHUNK / 4 + TOPK_THREADS - 1) / TOPK_THREADS)
static_assert(TWIN_GROUPS_A_THREAD <= 16 && 4 * TWIN_GROUPS_A_THREAD < 256, "a chunk's bits and counts fit");

// The groups of `mask`, lowest bit first, four a wave: the wave's four re-reads (raw(c, i), the group's bits)
// issued before visit(c, i, bits) uses the first, so a warp waits about one latency a wave (one wave: <= 4
// groups a lane). The keys are made in visit: made here, each load's first use came before the next load.
template <class Raw, class Visit>
__device__ __forceinline__ void twin_waves(unsigned long long mask, const Raw& raw, const Visit& visit) {
    while (mask) {
        int bit[4];
        uint4 q[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            bit[j] = mask ? __ffsll((long long)mask) - 1 : -1;
            mask &= mask - 1;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (bit[j] >= 0) q[j] = raw(bit[j] >> 4, bit[j] & 15);
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (bit[j] >= 0) visit(bit[j] >> 4, bit[j] & 15, q[j]);
    }
}

// visit(c, g, keys) for the groups of `mask` (twin_waves) of a CTA's columns from `from` (m of them, `groups`
// groups, wide<8>'s chunks `split` groups long): the row's pointer and bounds held through the pass (64
// registers leave room), not read again for each load
template <class Visit>
__device__ __forceinline__ void twin_groups(unsigned long long mask, const float* from, int m, int split, int groups,
                                            int t, const Visit& visit) {
    const auto group_of = [&](int c, int i) { return min(groups, c * split) + t + TOPK_THREADS * i; };
    twin_waves(
        mask, [&](int c, int i) { return chunk_raw4(from, group_of(c, i), m); },
        [&](int c, int i, uint4 bits) {
            const int g = group_of(c, i);
            visit(c, g, keys_before(bits, 4 * g, m));
        });
}

// A chunk's 16 bits of a thread's counts (above in 8, inside in 8) as classify4's packing (above | inside << 16)
__device__ __forceinline__ unsigned int twin_unpack(unsigned long long counts, int c) {
    const unsigned int f = (unsigned int)(counts >> (16 * c)) & 0xffffu;
    return (f & 0xffu) | (f >> 8) << 16;
}

// block_scan_packed of N words at once (one barrier, not N): sums holds N * TOPK_WARPS words, written again only
// after another barrier
template <int N>
__device__ __forceinline__ void block_scan_packed_n(const unsigned int (&mine)[N], int* sums, unsigned int (&before)[N],
                                                    unsigned int (&total)[N]) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    unsigned int inclusive[N];
#pragma unroll
    for (int c = 0; c < N; ++c) inclusive[c] = mine[c];
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
#pragma unroll
        for (int c = 0; c < N; ++c) {
            const unsigned int x = __shfl_up_sync(0xffffffffu, inclusive[c], off);
            if (lane >= off) inclusive[c] += x;
        }
    }
    if (lane == 31) {
#pragma unroll
        for (int c = 0; c < N; ++c) sums[c * TOPK_WARPS + warp] = (int)inclusive[c];
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < N; ++c) {
        unsigned int b = lane < warp ? (unsigned int)sums[c * TOPK_WARPS + lane] : 0u;
        unsigned int all = (unsigned int)sums[c * TOPK_WARPS + lane];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            b += __shfl_xor_sync(0xffffffffu, b, off);
            all += __shfl_xor_sync(0xffffffffu, all, off);
        }
        before[c] = b + inclusive[c] - mine[c];
        total[c] = all;
    }
}

// wide16_select with max16 words for the halves, on wide<8>'s chunks CHUNKS rank() .. CHUNKS rank() + CHUNKS - 1
// (CHUNKS = 8 / CLUSTER; n > k)
template <int CLUSTER>
__device__ __forceinline__ void twin_select(const float* __restrict__ logits, long long columns,
                                            int* __restrict__ out, const int* __restrict__ page_table,
                                            long long table_stride, int k, int page_size, int options,
                                            WideShared<CLUSTER>& s, TwinRow<8 / CLUSTER>& r, int n) {
    constexpr int CHUNKS = 8 / CLUSTER;  // wide<8>'s chunks a CTA
    // float4 loads in flight a thread: 64 KB an SM at either residency (two CTAs of 1024 threads, or one);
    // DSV4_TOPK_TWIN_FORM=onewalk8: twin<2> unrolls 8 (ptxas keeps 6-8 in flight within its 64 registers)
    constexpr int LOADS = CLUSTER == 4 ? 2 : TWIN_LOADS_2;
    constexpr bool ONE_WALK = TWIN_ONE_WALK && CLUSTER == 2;  // twin<4>'s 32 registers keep the walks a chunk
    const bool fold = options & WIDE_FOLD;
    extern __shared__ __align__(16) unsigned int chunk_keys[];  // here: a group's max16, 2 bytes
    unsigned short* const max16 = reinterpret_cast<unsigned short*>(chunk_keys);
    const auto tid = []() { return fresh_thread(); };
    const auto rank = []() { return fresh_cluster_rank(); };  // the cluster is the row's
    const auto first_cta = []() { return 0; };                // its cluster rank

    const int groups = [&]() {
        const int chunk = ((n + 2 * 4 - 1) / (2 * 4) + 3) & ~3;  // wide<8>'s (cta_columns<8>)
        const int begin = min(n, CHUNKS * rank() * chunk);
        const int m = min(n, begin + CHUNKS * chunk) - begin;
        if (tid() == 0) {
            r.begin = begin;
            r.m = m;
            r.split = chunk >> 2;
        }
        return (m + 3) >> 2;
    }();
    const auto src = [&]() { return logits + (long long)fresh(r.b) * columns + fresh(r.begin); };
    const auto table_row = [&]() { return page_table + (long long)fresh(r.b) * table_stride; };
    const auto out_row = [&]() { return out + (long long)fresh(r.b) * k; };
    const auto full_keys = [&](int g) { return chunk_keys4(src(), g, fresh(r.m)); };
    const auto passes = [&](int g, unsigned int lo) { return max16[g] >= lo >> 16; };  // (as wide16_select's)
    // the groups of the CTA's chunk c (c a constant): [chunk_from(c), chunk_to(c)); the last ends at `groups`
    const auto chunk_from = [&](int c) { return c == 0 ? 0 : min(groups, c * fresh(r.split)); };
    const auto chunk_to = [&](int c) { return c == CHUNKS - 1 ? groups : min(groups, (c + 1) * fresh(r.split)); };

    __syncthreads();  // hist is zeroed; r.begin, r.m and r.split are written
    {
        const int m = fresh(r.m);
        prefetch_table(table_row(), fresh(r.begin), m, page_size);
        // the only full read of the chunks: the whole groups LOADS float4 in flight a thread, no bounds test a
        // group, then the few whole groups left, then the last group's columns before m (if m is not a multiple
        // of 4), key 0 past them
        const float4* const from = reinterpret_cast<const float4*>(src());
        const unsigned int hist = (unsigned int)__cvta_generic_to_shared(&s.hist[2048]);  // twin_count4's
        const int whole = m >> 2;
        int g = tid();
        for (; g + (LOADS - 1) * TOPK_THREADS < whole; g += LOADS * TOPK_THREADS) {
            uint4 raw[LOADS];
#pragma unroll
            for (int j = 0; j < LOADS; ++j) raw[j] = raw_bits(__ldg(from + g + j * TOPK_THREADS));
#pragma unroll
            for (int j = 0; j < LOADS; ++j) twin_count4(keys_of4(raw[j]), g + j * TOPK_THREADS, max16, hist);
        }
#pragma unroll
        for (int j = 0; j < LOADS - 1; ++j)
            if (g + j * TOPK_THREADS < whole)
                twin_count4(keys_of4(raw_bits(__ldg(from + g + j * TOPK_THREADS))), g + j * TOPK_THREADS, max16,
                            hist);
        if (tid() == 0 && whole < groups) {
            const uint4 q = keys_before(chunk_raw4(reinterpret_cast<const float*>(from), whole, m), 4 * whole, m);
            max16[whole] = (unsigned short)max16_of4(q);
            count_coarse4<true>(q, s.hist);
        }
    }
    int* const counts = s.row_sum;
    int inside, remaining;
    unsigned int lo, hi;
    const unsigned int bin = coarse_bucket<CLUSTER>(s, counts, r, k, rank, first_cta, inside, remaining, lo, hi);
    int* const staging = counts;  // as wide_select
    const bool coarse = inside <= FAST_CANDIDATES;
    const bool from_hists = coarse && fold;

    if (!coarse) {
        // Heavy ties: the exact radix over the bucket, cluster-wide, on the full keys of the groups that pass
        heavy_ties_radix<CLUSTER>(s, counts, groups, lo, hi, inside, remaining, passes, full_keys, rank, first_cta);
    }
    const bool ranked = inside <= FAST_CANDIDATES;
    store_bucket(r, lo, hi, inside, remaining);
    __syncthreads();  // the walks read the bucket from r (not held in registers through them)

    // Where this CTA's runs start, from the peers' coarse histograms (as wide16_select)
    if (from_hists) peer_hists_before(s.hist, s.warp_before, bin, rank, first_cta);

    // Counting walks, one a chunk (a thread's groups t + 1024 i of each, as wide<8>'s CTAs): packed counts,
    // each scanned over the CTA (each scan after the one before's barrier)
    const auto count_walk = [&](int from_group, int to_group) {
        const unsigned int lo_ = fresh_u(r.lo), hi_ = fresh_u(r.hi);
        unsigned int mine = 0u;
        for (int g = from_group + tid(); g < to_group; g += TOPK_THREADS)
            if (max16[g] >= lo_ >> 16) mine += classify4(full_keys(g), lo_, hi_);
        return mine;
    };
    unsigned int before[CHUNKS], total[CHUNKS];
    // (one walk) this thread's groups that pass max16, chunk c's group chunk_from(c) + t + 1024 i at bit 16 c + i:
    // the groups count_walk and place_walk visit, in the same order (chunk by chunk, i ascending)
    unsigned long long passing = 0ull;
    if (ONE_WALK) {
        {
            const unsigned int lo16 = fresh_u(r.lo) >> 16;
#pragma unroll
            for (int c = 0; c < CHUNKS; ++c) {
                const int from = chunk_from(c) + tid(), to = chunk_to(c);
#pragma unroll
                for (int i = 0; i < TWIN_GROUPS_A_THREAD; ++i) {
                    const int g = from + TOPK_THREADS * i;
                    if (g < to && max16[g] >= lo16) passing |= 1ull << (16 * c + i);
                }
            }
        }
        unsigned long long counted = 0ull;  // 16 bits a chunk: above | inside << 8
        {
            const unsigned int lo_ = fresh_u(r.lo), hi_ = fresh_u(r.hi);
            twin_groups(passing, src(), fresh(r.m), fresh(r.split), groups, tid(), [&](int c, int, uint4 q) {
                const unsigned int p = classify4(q, lo_, hi_);
                counted += (unsigned long long)((p & 0xffu) | (p >> 8)) << (16 * c);
            });
        }
        unsigned int mine[CHUNKS];
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) mine[c] = twin_unpack(counted, c);
        // the four words' warp sums in counts (staging), free from store_bucket's barrier above to the barrier
        // after r.total below (staging is written after it)
        block_scan_packed_n<CHUNKS>(mine, counts, before, total);
    } else {
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            const unsigned int mine = count_walk(chunk_from(c), chunk_to(c));
            before[c] = c < CHUNKS - 1 ? wide_scan(mine, s.warp_sums, &total[c])
                                       : block_scan_packed(mine, s.warp_sums, &total[c]);
        }
    }
    static_assert(MAX_CHUNK < 65536, "a chunk's counts fit the packed 16-bit fields");
    if (tid() == 0) {
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) r.total[c] = total[c];
    }
    __syncthreads();  // r.total is written; warp_sums may be written again
    // a chunk's packed counts are < 2^16 each, the CTA's inside count not: summed by field
    const auto above_before = [&](int c) {
        int sum = 0;
#pragma unroll
        for (int d = 0; d < c; ++d) sum += (int)(fresh_u(r.total[d]) & 0xffffu);
        return sum;
    };
    const auto inside_before = [&](int c) {
        int sum = 0;
#pragma unroll
        for (int d = 0; d < c; ++d) sum += (int)(fresh_u(r.total[d]) >> 16);
        return sum;
    };
    const int cta_above = above_before(CHUNKS);
    int first_above = 0, first_inside = 0;
    if (from_hists) firsts_from_hists(s.warp_before, first_above, first_inside);
    else {
        if (tid() == 0) {
            s.cta_counts[0] = cta_above;
            s.cta_counts[1] = inside_before(CHUNKS);
        }
        firsts_from_peers(s.cta_counts, s.s_first, rank, first_cta, first_above, first_inside);
    }

    if (ranked) {
        // Placing walks in wide<8>'s order: chunk c's keys from the run's slot after chunks 0 .. c - 1's
        const auto candidate = [&](int slot, unsigned int e, int column) {
            store_peer2(&s.candidates[slot], 0, make_uint2(e, (unsigned int)column));
        };
        const auto place_walk = [&](int from_group, int to_group, int slot_above, int slot_inside) {
            const unsigned int lo_ = fresh_u(r.lo), hi_ = fresh_u(r.hi);
            for (int g = from_group + tid(); g < to_group; g += TOPK_THREADS) {
                if (max16[g] < lo_ >> 16) continue;
                place4(full_keys(g), fresh(r.begin) + 4 * g, lo_, hi_, staging, slot_above, slot_inside, candidate);
            }
        };
        if (ONE_WALK) {
            // chunk c's first slots (above | inside << 16: < k and <= FAST_CANDIDATES here), then the lane's earlier
            // keys of chunk c (placed: 16 bits a chunk, as counts)
            unsigned int first[CHUNKS];
#pragma unroll
            for (int c = 0; c < CHUNKS; ++c)
                first[c] = (unsigned int)(above_before(c) + (int)(before[c] & 0xffffu))
                           | (unsigned int)(first_inside + inside_before(c) + (int)(before[c] >> 16)) << 16;
            unsigned long long placed = 0ull;
            const unsigned int lo_ = fresh_u(r.lo), hi_ = fresh_u(r.hi);
            const int begin = fresh(r.begin);
            twin_groups(passing, src(), fresh(r.m), fresh(r.split), groups, tid(), [&](int c, int g, uint4 q) {
                unsigned int from = first[0];
#pragma unroll
                for (int d = 1; d < CHUNKS; ++d)
                    if (c == d) from = first[d];
                from += twin_unpack(placed, c);
                int slot_above = (int)(from & 0xffffu), slot_inside = (int)(from >> 16);
                place4(q, begin + 4 * g, lo_, hi_, staging, slot_above, slot_inside, candidate);
                placed += (unsigned long long)((slot_above - (int)(from & 0xffffu))
                                               | (slot_inside - (int)(from >> 16)) << 8) << (16 * c);
            });
        } else {
#pragma unroll
            for (int c = 0; c < CHUNKS; ++c)
                place_walk(chunk_from(c), chunk_to(c), above_before(c) + (int)(before[c] & 0xffffu),
                           first_inside + inside_before(c) + (int)(before[c] >> 16));
        }
        cluster_arrive();
        __syncthreads();  // staging is complete
        write_mapped(out_row() + first_above, staging, cta_above, table_row(), page_size);
        cluster_wait();  // the candidates are in rank 0; no peer reads this CTA any more
        if (rank() == 0) {
            const int remaining = fresh(r.remaining);
            rank_candidates(s.candidates, fresh(r.inside), remaining, [&](int rank_of, int column) {
                out_row()[k - remaining + rank_of] = mapped_paged(table_row(), column, page_size);
            });
        }
        return;
    }

    // Column-order placing walk (heavy ties) over the CTA's columns (its chunks in turn), on full keys
    cluster_arrive();
    {
        const unsigned int lo_ = fresh_u(r.lo), hi_ = fresh_u(r.hi);
        const int remaining = fresh(r.remaining);
        column_order_walk(
            groups, lo_, hi_, remaining, first_inside, s.warp_sums, staging,
            passes, full_keys,
            [&](int g) { return fresh(r.begin) + 4 * g; }, out_row, table_row, k, page_size);
    }
    __syncthreads();
    write_mapped(out_row() + first_above, staging, cta_above, table_row(), page_size);
    cluster_wait();
}

// twin<4>: two CTAs an SM, 32 registers a thread; twin<2>: one CTA an SM, up to 64. Every row of the grid on one
// cluster (cluster y = row y): a copy (rank 0) or twin_select.
template <int CLUSTER>
__global__ void TOPK_CLUSTER_DIMS(CLUSTER) __launch_bounds__(TOPK_THREADS, CLUSTER == 4 ? 2 : 1)
    dsv4_topk_indices_twin(const float* logits, long long columns, const int* seq_lens, const int* page_table,
                           long long table_stride, int* out, int k, int page_size, int options) {
#if __CUDA_ARCH__ >= 900
    static_assert(CLUSTER == 4 || CLUSTER == 2, "wide<8>'s chunks two or four a CTA");
    __shared__ WideShared<CLUSTER> s;
    __shared__ TwinRow<8 / CLUSTER> r;
    const int t = threadIdx.x;
    reinterpret_cast<int4*>(s.hist)[t] = make_int4(0, 0, 0, 0);
    pdl_wait();
    // seq_len by a coherent load, which ptxas keeps after griddepcontrol.wait (see fast_kernel)
    const int b = blockIdx.y;
    int n;
    asm volatile("ld.global.u32 %0, [%1];" : "=r"(n) : "l"(seq_lens + b));
    if (n <= k) {  // the same in every CTA of the cluster: no barrier is left waiting
        int* out_row = out + (long long)b * k;
        const int* table_row = page_table + (long long)b * table_stride;
        if (blockIdx.x == 0)
            for (int i = t; i < k; i += TOPK_THREADS) out_row[i] = i < n ? mapped_paged(table_row, i, page_size) : -1;
        return;
    }
    if (t == 0) {  // read after twin_select's first barrier
        r.b = b;
        r.n = n;
    }
    twin_select<CLUSTER>(logits, columns, out, page_table, table_stride, k, page_size, options, s, r, n);
#else
    __trap();
#endif
}
