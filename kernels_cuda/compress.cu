// compress (SPEC 1). Memory layout: kv_score [T, E] row-major, E = 4d ([kv_ov|kv_cur|sc_ov|sc_cur])
// or 2d ([kv|sc]); ring state [S, W, E]; paged state [P, r, E]; online state [S, 3, d];
// ape [4, 2d] or [128, d]; out [N, d]. One thread per channel: loads are coalesced across a warp.

// One block per (output entry, 128 channels): a streaming softmax over the entry's window, whose
// rows come from kv_score from the prefix on and from the state before it.
template <int RATIO, int TERMS>
__global__ void dsv4_compress_pool(const float* kv, const float* state, const float* ape, float* out,
                              const int* entry_req, const int* entry_j, const int* prefix_lens,
                              const int* kv_start, const int* state_rows, const int* page_table,
                              long long table_stride, int d, int E, int ring, int paged) {
    const int e = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= d) return;
    const int b = entry_req[e];
    const long long j = entry_j[e];
    const long long prefix = prefix_lens[b];
    const long long start = kv_start[b];
    float m = -INFINITY, s = 0.f, acc = 0.f;
    for (int i = 0; i < TERMS; ++i) {
        const long long p = RATIO * j + i - (RATIO == 4 ? 4 : 0);
        if (p < 0) continue;  // C4 entry 0: no overlap block (value 0, logit -inf)
        const int half = (RATIO == 4 && i >= 4) ? 1 : 0;
        const int val_col = RATIO == 4 ? half * d : 0;
        const int sc_col = RATIO == 4 ? 2 * d + half * d : d;
        const float bias = RATIO == 4 ? ape[(i % 4) * 2 * d + half * d + c] : ape[(long long)i * d + c];
        const float* row;
        if (p >= prefix) {
            row = kv + (start + p - prefix) * E;
        } else if (paged) {
            row = state + ((long long)page_table[b * table_stride + p / RATIO] * RATIO + p % RATIO) * E;
        } else {
            row = state + ((long long)state_rows[b] * ring + p % ring) * E;
        }
        const float x = row[sc_col + c] + bias;
        const float y = row[val_col + c];
        const float m2 = fmaxf(m, x);
        const float a = expf(m - m2);  // 0 on the first term (m = -inf)
        const float w = expf(x - m2);
        s = s * a + w;
        acc = acc * a + w * y;
        m = m2;
    }
    out[(long long)e * d + c] = acc / s;
}

// One block per new row: copy it into the state if the state keeps it (ring: the request's last
// `ring` positions; paged: rows whose block has a page). Launched after dsv4_compress_pool.
__global__ void dsv4_compress_store(const float* kv, float* state, const int* row_req, const int* prefix_lens,
                               const int* extend_lens, const int* kv_start, const int* state_rows,
                               const int* page_table, long long table_stride, int E, int ratio, int ring,
                               int paged) {
    const int row = blockIdx.x;
    const int b = row_req[row];
    const long long p = (long long)prefix_lens[b] + (row - kv_start[b]);
    long long dst;
    if (paged) {
        const int page = page_table[b * table_stride + p / ratio];
        if (page < 0) return;
        dst = ((long long)page * ratio + p % ratio) * E;
    } else {
        if (p < (long long)prefix_lens[b] + extend_lens[b] - ring) return;
        dst = ((long long)state_rows[b] * ring + p % ring) * E;
    }
    const float* src = kv + (long long)row * E;
    for (int i = threadIdx.x; i < E; i += blockDim.x) state[dst + i] = src[i];
}

// Online ratio 128: one block per (128-block an extend touches, 128 channels), the SPEC recurrence
// over the block's new positions, starting from the running state when the block began earlier.
// New states go to new_state[b] (the first and last block of a request may be different blocks).
__global__ void dsv4_compress_online(const float* kv, const float* state, float* new_state, const float* ape,
                                float* out, const int* seg_req, const int* seg_block, const int* seg_out,
                                const int* seg_last, const int* prefix_lens, const int* extend_lens,
                                const int* kv_start, const int* state_rows, int d) {
    const int g_id = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= d) return;
    const int b = seg_req[g_id];
    const long long g = seg_block[g_id];
    const long long prefix = prefix_lens[b];
    const long long end = prefix + extend_lens[b];
    const long long lo = prefix > 128 * g ? prefix : 128 * g;
    const long long hi = end < 128 * g + 128 ? end : 128 * g + 128;
    float m = 0.f, s = 0.f, v = 0.f;
    if (lo > 128 * g) {
        const float* st = state + (long long)state_rows[b] * 3 * d;
        m = st[c];
        s = st[d + c];
        v = st[2 * d + c];
    }
    for (long long p = lo; p < hi; ++p) {
        const float* row = kv + (kv_start[b] + p - prefix) * 2 * d;
        const float x = row[d + c] + ape[(p % 128) * d + c];
        const float y = row[c];
        if (p % 128 == 0) {
            m = x;
            s = 1.f;
            v = y;
        } else {
            const float m2 = fmaxf(m, x);
            const float a = s * expf(m - m2);
            const float w = expf(x - m2);
            s = a + w;
            v = (v * a + y * w) / s;
            m = m2;
        }
    }
    if (seg_out[g_id] >= 0) out[(long long)seg_out[g_id] * d + c] = v;
    if (seg_last[g_id]) {
        float* ns = new_state + (long long)b * 3 * d;
        ns[c] = m;
        ns[d + c] = s;
        ns[2 * d + c] = v;
    }
}
