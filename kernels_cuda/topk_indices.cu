// topk_indices (SPEC 3): one block of 1024 threads per row. Rows with seq_len <= k write
// 0..seq_len-1 mapped through the page table without reading the logits. Longer rows: floats map to
// order-preserving 32-bit keys; four 8-bit radix passes (shared-memory histograms of the keys that
// match the digits found so far) find the k-th largest key; a collecting pass writes every key
// above it and the first `remaining` keys equal to it, in column order (block-wide scans), so the
// selection and its order are deterministic.

#define THREADS 1024

__device__ __forceinline__ unsigned int sortable_key(float x) {
    const unsigned int u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ int mapped(const int* table_row, long long raw, int page_size) {
    return table_row[raw / page_size] * page_size + (int)(raw % page_size);
}

// Exclusive block-wide scan of a value < 2^16 packed per thread; returns the prefix, sets *total.
__device__ int block_exclusive_scan(int value, int* warp_sums, int* total) {
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
    *total = warp_sums[31];
    __syncthreads();
    return before;
}

__global__ void __launch_bounds__(THREADS) dsv4_topk_indices(const float* logits, long long columns, const int* seq_lens,
                                                        const int* page_table, long long table_stride, int* out,
                                                        int k, int page_size) {
    __shared__ int hist[256];
    __shared__ int warp_sums[32];
    __shared__ unsigned int s_prefix;
    __shared__ int s_remaining;
    const int b = blockIdx.x;
    const long long n = seq_lens[b];
    int* out_row = out + (long long)b * k;
    const int* table_row = page_table + b * table_stride;
    if (n <= k) {
        for (int i = threadIdx.x; i < k; i += blockDim.x) out_row[i] = i < n ? mapped(table_row, i, page_size) : -1;
        return;
    }
    const float* row = logits + (long long)b * columns;
    unsigned int prefix = 0u, mask = 0u;
    int remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (long long i = threadIdx.x; i < n; i += blockDim.x) {
            const unsigned int key = sortable_key(row[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int above = 0, cut = 0;
            for (int digit = 255; digit >= 0; --digit) {
                if (above + hist[digit] >= remaining) {
                    cut = digit;
                    break;
                }
                above += hist[digit];
            }
            s_prefix = prefix | ((unsigned int)cut << shift);
            s_remaining = remaining - above;
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        mask |= 255u << shift;
        __syncthreads();
    }
    const int first_equal = k - remaining;
    int taken_above = 0, taken_equal = 0;
    for (long long base = 0; base < n; base += blockDim.x) {
        const long long i = base + threadIdx.x;
        const unsigned int key = i < n ? sortable_key(row[i]) : 0u;
        const int above = i < n && key > prefix;
        const int equal = i < n && key == prefix;
        int total;
        const int rank = block_exclusive_scan(above | (equal << 16), warp_sums, &total);
        const int above_rank = rank & 0xffff, equal_rank = rank >> 16;
        if (above) {
            out_row[taken_above + above_rank] = mapped(table_row, i, page_size);
        } else if (equal && taken_equal + equal_rank < remaining) {
            out_row[first_equal + taken_equal + equal_rank] = mapped(table_row, i, page_size);
        }
        taken_above += total & 0xffff;
        taken_equal += total >> 16;
    }
}
