// The WMMA (tensor core) fused attention forward shared by cuda_wmma and cuda_wmma_cpasync.
//
// FlashAttention-2 style forward (Dao, 2023) written with the portable nvcuda::wmma API
// (16x16x16 fragments, fp16 or bf16 inputs, fp32 accumulation):
//
//   CTA   = 4 warps, BLOCK_M = 64 query rows of one (batch, head); warp w owns rows 16w..16w+15.
//   Q     : staged once in shared memory, then held in registers as D/16 matrix_a fragments.
//   Loop over key tiles of BLOCK_N = 64 (causal: only tiles at or left of the diagonal):
//     K, V tile -> shared memory (plain 16-byte loads, or cp.async multi-stage: LOAD_STAGES),
//     S = Q K^T  : 4 accumulator fragments per warp, stored to a per-warp fp32 scratch,
//     softmax    : two lanes per row (lane & 15 = row, lane >> 4 = which 32 columns), fp32,
//                  online: running max m and sum l per row, rescale = exp2(m_old - m_new),
//     P          : written as fp16/bf16 to a per-warp scratch, reloaded as matrix_a fragments,
//     O         += P V with the O accumulators in registers (D/16 fragments per warp),
//                  rescaled element-wise before each update.
//   End: O / l converted to the input dtype, 16-byte stores, rows >= S not written.
//
// The rescale needs each accumulator element's row, which the WMMA API leaves opaque. Rather
// than assume a hardware layout, the kernel measures it: it loads a 16x16 matrix whose every
// element holds its own row index into an accumulator fragment, so fragment element i's value
// *is* its row. Any conforming WMMA implementation gives the right map.
//
// Shared-memory rows are padded (+8 halves = 16 bytes for Q/K/V/P, +4 floats for the score
// scratch) so that the 8 rows a WMMA load touches per phase fall in different banks; padded
// strides stay multiples of 32 bytes per 16 rows, as load_matrix_sync requires.
#pragma once

#include <mma.h>

#include "attention_common.cuh"

namespace attnwatch {

constexpr int WMMA_BLOCK_M = 64;
constexpr int WMMA_BLOCK_N = 64;
constexpr int WMMA_WARPS = 4;
constexpr int WMMA_THREADS = 32 * WMMA_WARPS;
constexpr int SCORE_LD = WMMA_BLOCK_N + 4;  // floats per score-scratch row
constexpr int PROB_LD = WMMA_BLOCK_N + 8;   // elements per probability-scratch row

// Bytes of dynamic shared memory the kernel needs. Each entry stores its TOTAL in the cubin as
// `<entry>_smem_bytes` (ATTNWATCH_WMMA_ENTRY below); the host reads that number from the built
// cubin (kernels/cuda/launch.py) and the kernel traps if given less.
template <int D, int LOAD_STAGES>
struct WmmaSmem {
    static constexpr int LD = D + 8;
    static constexpr int Q_BYTES = WMMA_BLOCK_M * LD * 2;
    static constexpr int KV_TILE_BYTES = WMMA_BLOCK_N * LD * 2;
    static constexpr int SCORE_BYTES = WMMA_WARPS * 16 * SCORE_LD * 4;
    static constexpr int PROB_BYTES = WMMA_WARPS * 16 * PROB_LD * 2;
    static constexpr int ROW_BYTES = WMMA_WARPS * 16 * 4;
    static constexpr int TOTAL = Q_BYTES + 2 * LOAD_STAGES * KV_TILE_BYTES + SCORE_BYTES + PROB_BYTES + ROW_BYTES;
};

// --- tile loads -------------------------------------------------------------------------

// Copy rows [row0, row0 + ROWS) of a (S, D) matrix into shared memory (row stride LD),
// 16 bytes per thread per step; rows >= S become zeros.
template <int ROWS, int D, typename T>
__device__ __forceinline__ void load_tile_sync(T* dst, const T* __restrict__ src, int row0, int seq_len) {
    constexpr int LD = D + 8;
    constexpr int VECS_PER_ROW = D / 8;
    for (int i = threadIdx.x; i < ROWS * VECS_PER_ROW; i += WMMA_THREADS) {
        const int r = i / VECS_PER_ROW;
        const int c = (i % VECS_PER_ROW) * 8;
        uint4 value = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < seq_len) value = *reinterpret_cast<const uint4*>(src + static_cast<size_t>(row0 + r) * D + c);
        *reinterpret_cast<uint4*>(dst + r * LD + c) = value;
    }
}

// cp.async.cg (L2 only, 16 bytes); src-size 0 zero-fills the destination (tail rows).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    const unsigned dst_shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_shared), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

template <int ROWS, int D, typename T>
__device__ __forceinline__ void load_tile_async(T* dst, const T* __restrict__ src, int row0, int seq_len) {
    constexpr int LD = D + 8;
    constexpr int VECS_PER_ROW = D / 8;
    for (int i = threadIdx.x; i < ROWS * VECS_PER_ROW; i += WMMA_THREADS) {
        const int r = i / VECS_PER_ROW;
        const int c = (i % VECS_PER_ROW) * 8;
        const bool valid = row0 + r < seq_len;
        const T* from = valid ? src + static_cast<size_t>(row0 + r) * D + c : src;
        cp_async_16(dst + r * LD + c, from, valid);
    }
}

// --- the kernel body ----------------------------------------------------------------------

template <int D, typename T, bool CP_ASYNC, int LOAD_STAGES>
__device__ __forceinline__ void attention_wmma(const T* __restrict__ q, const T* __restrict__ k,
                                               const T* __restrict__ v, T* __restrict__ out, int seq_len,
                                               float scale_log2, int causal) {
    using namespace nvcuda;
    using Smem = WmmaSmem<D, LOAD_STAGES>;
    static_assert(D % 16 == 0, "D must be a multiple of the 16-wide WMMA tile");
    static_assert(CP_ASYNC || LOAD_STAGES == 1, "plain loads use one K/V buffer");
    constexpr int LD = Smem::LD;
    constexpr int D_FRAGS = D / 16;
    constexpr int N_FRAGS = WMMA_BLOCK_N / 16;
    using AFrag = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
    using BColFrag = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
    using BRowFrag = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
    using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

    extern __shared__ __align__(128) unsigned char smem[];
    if (dynamic_smem_bytes() < static_cast<unsigned>(Smem::TOTAL)) __trap();
    T* s_q = reinterpret_cast<T*>(smem);
    T* s_k = reinterpret_cast<T*>(smem + Smem::Q_BYTES);
    T* s_v = reinterpret_cast<T*>(smem + Smem::Q_BYTES + LOAD_STAGES * Smem::KV_TILE_BYTES);
    float* s_score = reinterpret_cast<float*>(smem + Smem::Q_BYTES + 2 * LOAD_STAGES * Smem::KV_TILE_BYTES);
    T* s_prob = reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(s_score) + Smem::SCORE_BYTES);
    float* s_row = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(s_prob) + Smem::PROB_BYTES);

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    // Longest (causal) query blocks first: blockIdx.y = 0 takes the last block.
    const int q0 = (gridDim.y - 1 - blockIdx.y) * WMMA_BLOCK_M;
    const size_t head = static_cast<size_t>(blockIdx.x) * seq_len * D;
    q += head;
    k += head;
    v += head;
    out += head;

    const int key_end = causal ? min(seq_len, q0 + WMMA_BLOCK_M) : seq_len;
    const int num_tiles = (key_end + WMMA_BLOCK_N - 1) / WMMA_BLOCK_N;
    constexpr int KV_ELEMS = WMMA_BLOCK_N * LD;

    if constexpr (CP_ASYNC) {
        // Prologue: Q and the first LOAD_STAGES - 1 K/V tiles in flight, one group each.
        load_tile_async<WMMA_BLOCK_M, D>(s_q, q, q0, seq_len);
#pragma unroll
        for (int stage = 0; stage < LOAD_STAGES - 1; ++stage) {
            if (stage < num_tiles) {
                load_tile_async<WMMA_BLOCK_N, D>(s_k + stage * KV_ELEMS, k, stage * WMMA_BLOCK_N, seq_len);
                load_tile_async<WMMA_BLOCK_N, D>(s_v + stage * KV_ELEMS, v, stage * WMMA_BLOCK_N, seq_len);
            }
            cp_async_commit();
        }
        cp_async_wait<LOAD_STAGES - 2>();  // Q (the oldest group) has landed
    } else {
        load_tile_sync<WMMA_BLOCK_M, D>(s_q, q, q0, seq_len);
    }

    // Measure the accumulator layout: element i of a fragment loaded from "row index" holds its row.
    float* my_score = s_score + warp * 16 * SCORE_LD;
    T* my_prob = s_prob + warp * 16 * PROB_LD;
    float* my_row_value = s_row + warp * 16;
    for (int i = lane; i < 256; i += 32) my_score[(i / 16) * SCORE_LD + i % 16] = static_cast<float>(i / 16);
    __syncthreads();  // Q tile and row-index matrix visible
    Acc probe;
    wmma::load_matrix_sync(probe, my_score, SCORE_LD, wmma::mem_row_major);
    int row_of[Acc::num_elements];
#pragma unroll
    for (int i = 0; i < Acc::num_elements; ++i) row_of[i] = static_cast<int>(probe.x[i]);

    AFrag q_frag[D_FRAGS];
#pragma unroll
    for (int d = 0; d < D_FRAGS; ++d) wmma::load_matrix_sync(q_frag[d], s_q + warp * 16 * LD + d * 16, LD);

    Acc o_frag[D_FRAGS];
#pragma unroll
    for (int d = 0; d < D_FRAGS; ++d) wmma::fill_fragment(o_frag[d], 0.0f);

    const int my_row = lane & 15;  // softmax: row of this lane within the warp's 16
    const int my_half = lane >> 4;  // and which 32 of the tile's 64 columns
    const int query = q0 + warp * 16 + my_row;
    float running_max = -CUDART_INF_F;
    float running_sum = 0.0f;

    for (int tile = 0; tile < num_tiles; ++tile) {
        const int key0 = tile * WMMA_BLOCK_N;
        int stage = 0;
        if constexpr (CP_ASYNC) {
            stage = tile % LOAD_STAGES;
            const int ahead = tile + LOAD_STAGES - 1;
            if (ahead < num_tiles) {
                const int ahead_stage = ahead % LOAD_STAGES;
                load_tile_async<WMMA_BLOCK_N, D>(s_k + ahead_stage * KV_ELEMS, k, ahead * WMMA_BLOCK_N, seq_len);
                load_tile_async<WMMA_BLOCK_N, D>(s_v + ahead_stage * KV_ELEMS, v, ahead * WMMA_BLOCK_N, seq_len);
            }
            cp_async_commit();  // possibly empty: keeps the group count uniform
            cp_async_wait<LOAD_STAGES - 1>();  // this tile's group is complete
        } else {
            load_tile_sync<WMMA_BLOCK_N, D>(s_k, k, key0, seq_len);
            load_tile_sync<WMMA_BLOCK_N, D>(s_v, v, key0, seq_len);
        }
        __syncthreads();
        const T* tile_k = s_k + stage * KV_ELEMS;
        const T* tile_v = s_v + stage * KV_ELEMS;

        // S = Q K^T: K is row-major (key, d), i.e. K^T column-major with the same stride.
#pragma unroll
        for (int n = 0; n < N_FRAGS; ++n) {
            Acc score;
            wmma::fill_fragment(score, 0.0f);
#pragma unroll
            for (int d = 0; d < D_FRAGS; ++d) {
                BColFrag k_frag;
                wmma::load_matrix_sync(k_frag, tile_k + n * 16 * LD + d * 16, LD);
                wmma::mma_sync(score, q_frag[d], k_frag, score);
            }
            wmma::store_matrix_sync(my_score + n * 16, score, SCORE_LD, wmma::mem_row_major);
        }
        __syncwarp();

        // Online softmax over this lane's 32 columns of its row (partner lane: lane ^ 16).
        const bool masked_tile = key0 + WMMA_BLOCK_N > seq_len || (causal && key0 + WMMA_BLOCK_N - 1 > q0);
        // Two passes over the scratch row (max, then exp) keep 32 scores out of registers.
        const float* score_row = my_score + my_row * SCORE_LD + my_half * 32;
        const int first_key = key0 + my_half * 32;
        float tile_max = -CUDART_INF_F;
#pragma unroll
        for (int c = 0; c < 32; c += 4) {
            const float4 s4 = *reinterpret_cast<const float4*>(score_row + c);
            const float x[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int key = first_key + c + j;
                const bool hidden = masked_tile && (key >= seq_len || (causal && key > query));
                tile_max = fmaxf(tile_max, hidden ? -CUDART_INF_F : x[j] * scale_log2);
            }
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 16));
        const float new_max = fmaxf(running_max, tile_max);
        const float base = safe_base(new_max);
        const float rescale = exp2f(running_max - base);
        float tile_sum = 0.0f;
        T* prob_row = my_prob + my_row * PROB_LD + my_half * 32;
#pragma unroll
        for (int c = 0; c < 32; c += 4) {
            const float4 s4 = *reinterpret_cast<const float4*>(score_row + c);
            const float x[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int key = first_key + c + j;
                const bool hidden = masked_tile && (key >= seq_len || (causal && key > query));
                const float p = hidden ? 0.0f : exp2f(x[j] * scale_log2 - base);
                tile_sum += p;
                prob_row[c + j] = from_float<T>(p);
            }
        }
        tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 16);
        running_sum = running_sum * rescale + tile_sum;
        running_max = new_max;
        if (my_half == 0) my_row_value[my_row] = rescale;
        __syncwarp();

        // O = rescale * O + P V.
        float row_rescale[Acc::num_elements];
#pragma unroll
        for (int i = 0; i < Acc::num_elements; ++i) row_rescale[i] = my_row_value[row_of[i]];
#pragma unroll
        for (int d = 0; d < D_FRAGS; ++d) {
#pragma unroll
            for (int i = 0; i < Acc::num_elements; ++i) o_frag[d].x[i] *= row_rescale[i];
        }
#pragma unroll
        for (int n = 0; n < N_FRAGS; ++n) {
            AFrag p_frag;
            wmma::load_matrix_sync(p_frag, my_prob + n * 16, PROB_LD);
#pragma unroll
            for (int d = 0; d < D_FRAGS; ++d) {
                BRowFrag v_frag;
                wmma::load_matrix_sync(v_frag, tile_v + n * 16 * LD + d * 16, LD);
                wmma::mma_sync(o_frag[d], p_frag, v_frag, o_frag[d]);
            }
        }
        __syncthreads();  // every warp is done with this K/V buffer before it is refilled
    }

    // Epilogue: O / l, one 16x16 fragment at a time through the warp's score scratch.
    if (my_half == 0) my_row_value[my_row] = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
    __syncwarp();
    float row_scale[Acc::num_elements];
#pragma unroll
    for (int i = 0; i < Acc::num_elements; ++i) row_scale[i] = my_row_value[row_of[i]];
    const int out_row = lane / 2;
    const int out_col = (lane % 2) * 8;
    const int out_query = q0 + warp * 16 + out_row;
#pragma unroll
    for (int d = 0; d < D_FRAGS; ++d) {
#pragma unroll
        for (int i = 0; i < Acc::num_elements; ++i) o_frag[d].x[i] *= row_scale[i];
        wmma::store_matrix_sync(my_score, o_frag[d], SCORE_LD, wmma::mem_row_major);
        __syncwarp();
        if (out_query < seq_len) {
            const float* src = my_score + out_row * SCORE_LD + out_col;
            alignas(16) T packed[8];
#pragma unroll
            for (int c = 0; c < 8; ++c) packed[c] = from_float<T>(src[c]);
            *reinterpret_cast<uint4*>(out + static_cast<size_t>(out_query) * D + d * 16 + out_col) =
                *reinterpret_cast<const uint4*>(packed);
        }
        __syncwarp();
    }
}

}  // namespace attnwatch

// MIN_BLOCKS: the CTAs per SM that the kernel's shared memory allows on an H100/H200
// (228 KB per SM); telling ptxas lets it use every register that occupancy leaves, instead of
// guessing a lower budget and spilling. NAME##_smem_bytes: the dynamic shared memory the launch
// must give, read by the host from the cubin (kernels/cubin_symbols.py).
#define ATTNWATCH_WMMA_ENTRY(NAME, D, T, CP_ASYNC, STAGES, MIN_BLOCKS)                                  \
    extern "C" __device__ const int NAME##_smem_bytes = attnwatch::WmmaSmem<D, STAGES>::TOTAL;          \
    extern "C" __global__ void __launch_bounds__(attnwatch::WMMA_THREADS, MIN_BLOCKS)                   \
        NAME(const T* q, const T* k, const T* v, T* out, int seq_len, float scale_log2, int causal) { \
        attnwatch::attention_wmma<D, T, CP_ASYNC, STAGES>(q, k, v, out, seq_len, scale_log2, causal);  \
    }
