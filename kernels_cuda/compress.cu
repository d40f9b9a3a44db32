// compress (SPEC 1). Memory layout: kv_score [T, E] row-major, E = 4d ([kv_ov|kv_cur|sc_ov|sc_cur])
// or 2d ([kv|sc]); ring state [S, W, E]; paged state [P, r, E]; online state [S, 3, d];
// ape [4, 2d] or [128, d]; out [N, d].
//
// One CTA per (segment, channel tile): a segment is one ratio-block that a request's new positions
// touch (harness/plans.py). The CTA pools the block's entry when the call completes it and stores the
// block's new rows that the state keeps, so a decode step is one launch and a prefill reads each new
// row once. Each thread owns VEC consecutive channels (16-byte loads when VEC = 4). Reads of the state
// precede the writes that could replace them inside one CTA; across CTAs the planner proves there is no
// such overlap or splits the call into a pool launch and a store launch (ring: `pool`, `store` flags).

template <int VEC> struct Vec;
template <> struct Vec<4> {
    float v[4];
    __device__ __forceinline__ void load(const float* p) {
        const float4 x = *reinterpret_cast<const float4*>(p);
        v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
    }
    __device__ __forceinline__ void load_nc(const float* p) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(p));
        v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
    }
    __device__ __forceinline__ void store(float* p) const {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    }
};
template <> struct Vec<1> {
    float v[1];
    __device__ __forceinline__ void load(const float* p) { v[0] = *p; }
    __device__ __forceinline__ void load_nc(const float* p) { v[0] = __ldg(p); }
    __device__ __forceinline__ void store(float* p) const { *p = v[0]; }
};

// MODE_RING, MODE_PAGED, MODE_ONLINE (the template's MODE), C4_RING_WIDTH, C128_RING_WIDTH (positions a
// ring row keeps), SEGMENT_WIDTH, C4_THREADS, C128_RUN_THREADS, C128_MAX_GROUPS, C128_GROUP_LANES come
// from compress.py's DEFINES (-D options, their one definition; no defaults here).
static_assert(MODE_RING != MODE_PAGED && MODE_PAGED != MODE_ONLINE && MODE_ONLINE != MODE_RING, "three modes");
static_assert(C4_RING_WIDTH == 8 && C128_RING_WIDTH == 128, "a ring row keeps the blocks a pooled entry reads: "
              "C4 blocks g - 1 and g, C128 block g");

// A segment record (harness/plans.py, SEGMENT_FIELDS): 12 int32, read as three 16-byte loads.
static_assert(SEGMENT_WIDTH == 12, "segment_of reads a record as three int4");
struct Segment {
    int b;             // request
    int o;             // output row of the entry the call completes, or -1
    int last;          // the request's last segment
    int state;         // ring / online: the request's state row; paged: the page of block g (-1: none)
    int state_prev;    // paged: the page of block g - 1 (-1: none)
    long long g;       // block
    long long prefix;  // first new position
    long long end;     // one past the last new position
    long long start;   // kv_score row of position `prefix`
};

__device__ __forceinline__ Segment segment_of(const int* __restrict__ segments, int s) {
    const int4* r = reinterpret_cast<const int4*>(segments) + SEGMENT_WIDTH / 4 * s;
    const int4 a = r[0], b = r[1], c = r[2];
    Segment seg;
    seg.b = a.x;
    seg.g = a.y;
    seg.o = a.z;
    seg.last = a.w;
    seg.prefix = b.x;
    seg.end = b.y;
    seg.start = b.z;
    seg.state = b.w;
    seg.state_prev = c.x;
    return seg;
}

// The raw row of position p (in block g or g - 1): kv_score from the prefix on, else the state.
template <int RATIO, int MODE>
__device__ __forceinline__ const float* row_of(long long p, const Segment& seg, const float* kv, const float* state,
                                              int E) {
    if (p >= seg.prefix) return kv + (seg.start + p - seg.prefix) * E;
    if (MODE == MODE_PAGED) {
        const int page = p / RATIO == seg.g ? seg.state : seg.state_prev;
        return state + ((long long)page * RATIO + p % RATIO) * E;
    }
    constexpr int W = RATIO == 4 ? C4_RING_WIDTH : C128_RING_WIDTH;
    return state + ((long long)seg.state * W + p % W) * E;
}

// Where the state keeps new position p of block g, or nullptr: paged, the block's page if it has
// one; ring, the last W positions.
template <int RATIO, int MODE>
__device__ __forceinline__ float* kept_row(long long p, const Segment& seg, float* state, int E) {
    if (MODE == MODE_PAGED)
        return seg.state < 0 ? nullptr : state + ((long long)seg.state * RATIO + p % RATIO) * E;
    constexpr int W = RATIO == 4 ? C4_RING_WIDTH : C128_RING_WIDTH;
    if (p < seg.end - W) return nullptr;
    return state + ((long long)seg.state * W + p % W) * E;
}

// Ratio 4: entry g pools the overlap half of block g-1 and the current half of block g (8 terms).
template <int VEC, int MODE>
__global__ void __launch_bounds__(C4_THREADS, 4) dsv4_compress_c4(
        const float* __restrict__ kv, float* state, const float* __restrict__ ape, float* __restrict__ out,
        const int* __restrict__ segments, int d, int pool, int store, int pdl) {
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * VEC;
    if (c >= d) return;
    const int E = 4 * d;
    const Segment seg = segment_of(segments, blockIdx.x);  // the plan: no earlier kernel writes it
    if (pdl) {  // launched to overlap the kernel before: kv_score and the state may come from it.
        // Dependents launch once every CTA has waited: triggered before the wait, the CTAs of every
        // queued replay would pile up on the SMs, each spinning on the one before (measured slower)
        pdl_wait();
        pdl_launch_dependents();
    }
    const bool pooling = pool && seg.o >= 0;
    if (!pooling && !store) return;

    // block g: the current half of every row (pooled); new rows the state keeps are stored at once
    // (they go to slots of new positions, which no CTA reads)
    Vec<VEC> cur_kv[4], cur_sc[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const long long p = 4 * seg.g + i;
        const bool fresh = p >= seg.prefix && p < seg.end;
        float* dst = store && fresh ? kept_row<4, MODE>(p, seg, state, E) : nullptr;
        if (!(dst || (pooling && p < seg.end))) continue;
        const float* r = row_of<4, MODE>(p, seg, kv, state, E);
        if (fresh) {
            cur_kv[i].load_nc(r + d + c);
            cur_sc[i].load_nc(r + 3 * d + c);
        } else {
            cur_kv[i].load(r + d + c);
            cur_sc[i].load(r + 3 * d + c);
        }
        if (dst) {
            Vec<VEC> ov_kv, ov_sc;
            ov_kv.load_nc(r + c);
            ov_sc.load_nc(r + 2 * d + c);
            ov_kv.store(dst + c);
            cur_kv[i].store(dst + d + c);
            ov_sc.store(dst + 2 * d + c);
            cur_sc[i].store(dst + 3 * d + c);
        }
    }
    // block g-1: the overlap half (absent for entry 0: value 0, logit -inf, so no term)
    Vec<VEC> prev_kv[4], prev_sc[4];
    if (pooling && seg.g > 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const long long p = 4 * seg.g - 4 + i;
            const float* r = row_of<4, MODE>(p, seg, kv, state, E);
            if (p >= seg.prefix) {
                prev_kv[i].load_nc(r + c);
                prev_sc[i].load_nc(r + 2 * d + c);
            } else {
                prev_kv[i].load(r + c);
                prev_sc[i].load(r + 2 * d + c);
            }
        }
    }
    if (pooling) {
        Vec<VEC> bias_ov[4], bias_cur[4], result;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            bias_ov[i].load_nc(ape + i * 2 * d + c);
            bias_cur[i].load_nc(ape + i * 2 * d + d + c);
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            float x[8], m = -INFINITY;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                x[i] = seg.g > 0 ? prev_sc[i].v[k] + bias_ov[i].v[k] : -INFINITY;
                x[4 + i] = cur_sc[i].v[k] + bias_cur[i].v[k];
            }
#pragma unroll
            for (int i = 0; i < 8; ++i) m = fmaxf(m, x[i]);
            float s = 0.f, acc = 0.f;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float w = expf(x[i] - m);  // 0 for a missing overlap term
                const float y = i < 4 ? (seg.g > 0 ? prev_kv[i].v[k] : 0.f) : cur_kv[i - 4].v[k];
                s += w;
                acc += w * y;
            }
            result.v[k] = acc / s;
        }
        result.store(out + (long long)seg.o * d + c);
    }
}

// Ratio 128: a CTA is blockDim.y groups of blockDim.x threads over the same blockDim.x x VEC
// channels; the block's positions are split into blockDim.y contiguous runs, one per group, each
// pooled in chunks of CHUNK into a running (max, sum, weighted sum) per channel, then merged in group
// order (deterministic) by group 0. The launcher picks 1 group of 128 threads for decode and for
// prefill whose segments fill the GPU, else groups of 32 (up to 16) so that few segments with many new
// positions still keep enough warps in flight. ring / paged:
// every position of a completed block is pooled, new rows are stored. online: only the new
// positions, starting from the running state when the block began earlier; the request's last
// segment writes the new running state (to `new_state[b]` when the planner found a request that
// reads its state in one segment and writes it in another, else in place). Splitting positions
// across warps keeps few-segment calls (a 4K-token chunk: 32 blocks) from running 128 positions
// one after another in a single thread.
// Online mode, one new position (a decode step) for VEC channels: row = [kv | sc] of the position,
// bias its ape row, st its running (m, s, v) or nullptr when the position opens the block, out the
// entry when the position closes it, dst where the new running state goes (or nullptr). The same
// operations in the same order as the general loop below (one unmasked term), so both give the same bits.
template <int VEC>
__device__ __forceinline__ void online_step(const float* row, const float* bias, const float* st, float* out,
                                            float* dst, int d) {
    Vec<VEC> y, x, b, m0, s0, v0;
    y.load_nc(row);
    x.load_nc(row + d);
    b.load_nc(bias);
    if (st) {
        m0.load(st);
        s0.load(st + d);
        v0.load(st + 2 * d);
    }
    Vec<VEC> m, s, v;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        const float xk = x.v[k] + b.v[k];
        if (st) {
            const float m2 = fmaxf(m0.v[k], xk);
            const float scale = expf(m0.v[k] - m2), w = expf(xk - m2);
            const float ac = w * y.v[k];
            s.v[k] = s0.v[k] * scale + w;
            v.v[k] = (v0.v[k] * s0.v[k] * scale + ac) / s.v[k];
            m.v[k] = m2;
        } else {
            m.v[k] = xk;
            s.v[k] = 1.f;
            v.v[k] = y.v[k];
        }
    }
    if (out) v.store(out);
    if (dst) {
        m.store(dst);
        s.store(dst + d);
        v.store(dst + 2 * d);
    }
}

// blocks (C128_RUN_THREADS, 1) and (C128_GROUP_LANES, groups <= C128_MAX_GROUPS): the bound covers both
constexpr int C128_MAX_THREADS = C128_MAX_GROUPS * C128_GROUP_LANES;
static_assert(C128_RUN_THREADS <= C128_MAX_THREADS, "the one-run block under the launch bound");

// Pools CHUNK positions (values y, raw logits x, biases) into a running (max m, sum s, weighted sum acc)
// per channel; positions from `valid` on are padding.
template <int VEC, int CHUNK>
__device__ __forceinline__ void pool_chunk(const Vec<VEC> (&y)[CHUNK], const Vec<VEC> (&x)[CHUNK],
                                           const Vec<VEC> (&bias)[CHUNK], long long valid, float (&m)[VEC],
                                           float (&s)[VEC], float (&acc)[VEC]) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        float xs[CHUNK], mc = -INFINITY;
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            xs[i] = i < valid ? x[i].v[k] + bias[i].v[k] : -INFINITY;
            mc = fmaxf(mc, xs[i]);
        }
        const float m2 = fmaxf(m[k], mc);
        const float scale = expf(m[k] - m2);  // 0 while nothing was pooled (m = -inf)
        float sc = 0.f, ac = 0.f;
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            const float w = expf(xs[i] - m2);
            sc += w;
            ac += w * (i < valid ? y[i].v[k] : 0.f);
        }
        s[k] = s[k] * scale + sc;
        acc[k] = acc[k] * scale + ac;
        m[k] = m2;
    }
}

// The 64K prefill (268 MB of reads, 66 us at the 4.05 TB/s read floor) ran at 75-77 us on the H200 with
// this loop, as SGLang's kernel (76.3-76.4), and no change to the loop moved it: 2.5x the bytes in flight
// through a cp.async ring 78.7, 6 positions a round 77.0, staggered starting points per CTA 76.8,
// evict-first loads 76.7 (860584d .. 1634247; docs/perf-notes.md).
template <int VEC, int MODE>
__global__ void __launch_bounds__(C128_MAX_THREADS, 1) dsv4_compress_c128(
        const float* __restrict__ kv, float* state, float* new_state, const float* __restrict__ ape,
        float* __restrict__ out, const int* __restrict__ segments, int d, int pool, int store, int pdl) {
    constexpr int CHUNK = 4;
    // (max, sum, weighted sum) of groups 1.., C128_GROUP_LANES x VEC channels each: dynamic, sized by the
    // host, so the one-group launches (decode, prefill) take no shared memory from L1
    extern __shared__ float partial[];  // [blockDim.y - 1][3][C128_GROUP_LANES * VEC]
    const int lane = threadIdx.x, group = threadIdx.y, groups = blockDim.y;
    const int c = (blockIdx.y * blockDim.x + lane) * VEC;
    const bool active = c < d;
    const int E = 2 * d;
    const Segment seg = segment_of(segments, blockIdx.x);  // the plan: no earlier kernel writes it
    if (pdl) {  // launched to overlap the kernel before: kv_score and the state may come from it.
        // Dependents launch once every CTA has waited: triggered before the wait, the CTAs of every
        // queued replay would pile up on the SMs, each spinning on the one before (measured slower)
        pdl_wait();
        pdl_launch_dependents();
    }
    const int o = seg.o;
    const long long base = 128 * seg.g;
    const long long lo = seg.prefix > base ? seg.prefix : base;  // first new position in the block
    const long long hi = seg.end < base + 128 ? seg.end : base + 128;
    const bool pooling = pool && (MODE == MODE_ONLINE || o >= 0);
    const bool storing = store && MODE != MODE_ONLINE;
    if (!pooling && !storing) return;  // the same for every thread of the CTA

    if (MODE == MODE_ONLINE && hi - lo == 1 && groups == 1) {  // decode: one new position, one update
        if (!pooling || !active) return;  // (no barrier on this path)
        online_step<VEC>(kv + (seg.start + lo - seg.prefix) * E + c, ape + (lo - base) * d + c,
                         lo > base ? state + (long long)seg.state * 3 * d + c : nullptr,
                         o >= 0 ? out + (long long)o * d + c : nullptr,
                         !seg.last ? nullptr
                         : (new_state ? new_state + (long long)seg.b * 3 * d : state + (long long)seg.state * 3 * d) + c,
                         d);
        return;
    }
    float m[VEC], s[VEC], acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        m[k] = -INFINITY;
        s[k] = 0.f;
        acc[k] = 0.f;
    }
    const float* st = MODE == MODE_ONLINE ? state + (long long)seg.state * 3 * d : nullptr;
    if (MODE == MODE_ONLINE && active && group == 0 && lo > base) {  // the block began in an earlier call
        Vec<VEC> m0, s0, v0;
        m0.load(st + c);
        s0.load(st + d + c);
        v0.load(st + 2 * d + c);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            m[k] = m0.v[k];
            s[k] = s0.v[k];
            acc[k] = v0.v[k] * s0.v[k];
        }
    }
    // online reads only new positions; ring / paged pool the whole block, or store the new rows
    const long long first = (MODE == MODE_ONLINE || !pooling) ? lo : base;
    const long long last = (MODE == MODE_ONLINE || !pooling) ? hi : base + 128;
    const long long per_group = (last - first + groups - 1) / groups;
    const long long mine_lo = first + group * per_group;
    const long long mine_hi = mine_lo + per_group < last ? mine_lo + per_group : last;
    for (long long p0 = mine_lo; active && p0 < mine_hi; p0 += CHUNK) {
        Vec<VEC> y[CHUNK], x[CHUNK], bias[CHUNK];
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            const long long p = p0 + i;
            if (p < mine_hi) {
                if (pooling) bias[i].load_nc(ape + (p - base) * d + c);
                const float* r = row_of<128, MODE == MODE_PAGED ? MODE_PAGED : MODE_RING>(p, seg, kv, state, E);
                if (p >= seg.prefix) {
                    y[i].load_nc(r + c);
                    x[i].load_nc(r + d + c);
                } else {
                    y[i].load(r + c);
                    x[i].load(r + d + c);
                }
            }
        }
        if (storing) {
#pragma unroll
            for (int i = 0; i < CHUNK; ++i) {
                const long long p = p0 + i;
                if (p < seg.prefix || p >= hi || p >= mine_hi) continue;
                float* dst = kept_row<128, MODE == MODE_PAGED ? MODE_PAGED : MODE_RING>(p, seg, state, E);
                if (!dst) continue;
                y[i].store(dst + c);
                x[i].store(dst + d + c);
            }
        }
        if (pooling) pool_chunk<VEC, CHUNK>(y, x, bias, mine_hi - p0, m, s, acc);
    }
    if (!pooling) return;
    if (group > 0) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            float* mine = partial + (group - 1) * 3 * C128_GROUP_LANES * VEC + lane * VEC + k;
            mine[0] = m[k];
            mine[C128_GROUP_LANES * VEC] = s[k];
            mine[2 * C128_GROUP_LANES * VEC] = acc[k];
        }
    }
    __syncthreads();
    if (group > 0 || !active) return;
    for (int w = 0; w < groups - 1; ++w) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float* theirs = partial + w * 3 * C128_GROUP_LANES * VEC + lane * VEC + k;
            const float m1 = theirs[0];
            if (m1 == -INFINITY) continue;  // a warp with no positions
            const float m2 = fmaxf(m[k], m1);
            const float a = expf(m[k] - m2), b = expf(m1 - m2);
            s[k] = s[k] * a + theirs[C128_GROUP_LANES * VEC] * b;
            acc[k] = acc[k] * a + theirs[2 * C128_GROUP_LANES * VEC] * b;
            m[k] = m2;
        }
    }
    Vec<VEC> v;
#pragma unroll
    for (int k = 0; k < VEC; ++k) v.v[k] = acc[k] / s[k];
    if (o >= 0) v.store(out + (long long)o * d + c);
    if (MODE == MODE_ONLINE && seg.last) {
        float* dst = new_state ? new_state + (long long)seg.b * 3 * d : state + (long long)seg.state * 3 * d;
        Vec<VEC> mv, sv;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            mv.v[k] = m[k];
            sv.v[k] = s[k];
        }
        mv.store(dst + c);
        sv.store(dst + d + c);
        v.store(dst + 2 * d + c);
    }
}

// Online mode, after dsv4_compress_c128 wrote to scratch: each request's last segment's new
// running state goes to the request's state row. One CTA per segment.
__global__ void dsv4_compress_online_commit(float* state, const float* __restrict__ new_state,
                                            const int* __restrict__ segments, int d) {
    const Segment seg = segment_of(segments, blockIdx.x);
    pdl_wait();  // after dsv4_compress_c128 (a no-op unless launched to overlap it)
    pdl_launch_dependents();
    if (!seg.last) return;
    float* dst = state + (long long)seg.state * 3 * d;
    const float* src = new_state + (long long)seg.b * 3 * d;
    for (int i = threadIdx.x; i < 3 * d; i += blockDim.x) dst[i] = src[i];
}
