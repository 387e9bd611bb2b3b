// cuda_scalar: fused attention forward with FP32 scalar math (no tensor cores).
//
// The baseline of the kernel team's lineage ("Phase 1 CUDA baseline"): one warp per query
// row, streaming (online) softmax over key tiles of 32, so the S x S score matrix never
// exists in memory.
//
//   CTA      = ROWS warps = ROWS consecutive query rows of one (batch, head).
//   Per tile: K and V (32 keys x D) are staged in shared memory as float.
//             Lane j computes the full dot product q . k_j (q broadcast from shared memory,
//             K rows padded to D + 1 floats so 32 lanes reading 32 rows hit 32 banks);
//             the warp reduces max and sum with shuffles once per tile;
//             each lane owns D / 32 output columns and accumulates p_j * V[j] for j < 32.
//   Causal:   tiles past the block's last row are skipped; keys j > row are -inf.
//   Tail:     keys >= S are -inf; query rows >= S compute nothing and write nothing.
//
// Grid: (B * H, ceil(S / ROWS)); block: 32 * ROWS threads; static shared memory only.
#include "attention_common.cuh"

namespace attnwatch {

constexpr int SCALAR_ROWS = 8;    // query rows (= warps) per CTA
constexpr int SCALAR_KEYS = 32;   // keys per tile (= lanes)

template <int D, typename T>
__device__ __forceinline__ void attention_scalar(const T* __restrict__ q, const T* __restrict__ k,
                                                 const T* __restrict__ v, T* __restrict__ out, int seq_len,
                                                 float scale_log2, int causal) {
    static_assert(D % 32 == 0, "each lane owns D / 32 output columns");
    constexpr int PER_LANE = D / 32;
    __shared__ float s_q[SCALAR_ROWS][D];
    __shared__ float s_k[SCALAR_KEYS][D + 1];
    __shared__ float s_v[SCALAR_KEYS][D];

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    // Reverse block order: with causal masking the last query blocks have the most work,
    // so they start first and the short ones fill the tail.
    const int first_row = (gridDim.y - 1 - blockIdx.y) * SCALAR_ROWS;
    const int row = first_row + warp;
    const size_t head = static_cast<size_t>(blockIdx.x) * seq_len * D;
    q += head;
    k += head;
    v += head;
    out += head;

    for (int i = threadIdx.x; i < SCALAR_ROWS * D; i += blockDim.x) {
        const int r = first_row + i / D;
        s_q[i / D][i % D] = r < seq_len ? to_float(q[static_cast<size_t>(r) * D + i % D]) : 0.0f;
    }

    const int key_end = causal ? min(seq_len, first_row + SCALAR_ROWS) : seq_len;
    float running_max = -CUDART_INF_F;
    float running_sum = 0.0f;
    float acc[PER_LANE];
#pragma unroll
    for (int e = 0; e < PER_LANE; ++e) acc[e] = 0.0f;

    for (int key0 = 0; key0 < key_end; key0 += SCALAR_KEYS) {
        __syncthreads();  // previous tile fully consumed (and s_q written, on the first pass)
        for (int i = threadIdx.x; i < SCALAR_KEYS * D; i += blockDim.x) {
            const int j = i / D, d = i % D;
            const bool valid = key0 + j < seq_len;
            const size_t offset = static_cast<size_t>(key0 + j) * D + d;
            s_k[j][d] = valid ? to_float(k[offset]) : 0.0f;
            s_v[j][d] = valid ? to_float(v[offset]) : 0.0f;
        }
        __syncthreads();

        const int key = key0 + lane;
        float score = 0.0f;
#pragma unroll 16
        for (int d = 0; d < D; ++d) score = fmaf(s_q[warp][d], s_k[lane][d], score);
        score *= scale_log2;
        if (key >= seq_len || (causal && key > row)) score = -CUDART_INF_F;

        const float new_max = fmaxf(running_max, warp_max(score));
        const float base = safe_base(new_max);
        const float rescale = exp2f(running_max - base);
        const float p = exp2f(score - base);
        running_sum = running_sum * rescale + warp_sum(p);
        running_max = new_max;
#pragma unroll
        for (int e = 0; e < PER_LANE; ++e) acc[e] *= rescale;
#pragma unroll 8
        for (int j = 0; j < SCALAR_KEYS; ++j) {
            const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
            for (int e = 0; e < PER_LANE; ++e) acc[e] = fmaf(pj, s_v[j][lane + 32 * e], acc[e]);
        }
    }

    if (row < seq_len) {
        const float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
#pragma unroll
        for (int e = 0; e < PER_LANE; ++e)
            out[static_cast<size_t>(row) * D + lane + 32 * e] = from_float<T>(acc[e] * inv);
    }
}

}  // namespace attnwatch

#define ATTNWATCH_SCALAR_ENTRY(NAME, D, T)                                                              \
    extern "C" __global__ void __launch_bounds__(32 * attnwatch::SCALAR_ROWS)                           \
        NAME(const T* q, const T* k, const T* v, T* out, int seq_len, float scale_log2, int causal) { \
        attnwatch::attention_scalar<D, T>(q, k, v, out, seq_len, scale_log2, causal);                  \
    }

ATTNWATCH_SCALAR_ENTRY(attn_scalar_d64_fp16, 64, __half)
ATTNWATCH_SCALAR_ENTRY(attn_scalar_d128_fp16, 128, __half)
ATTNWATCH_SCALAR_ENTRY(attn_scalar_d64_bf16, 64, __nv_bfloat16)
ATTNWATCH_SCALAR_ENTRY(attn_scalar_d128_bf16, 128, __nv_bfloat16)
