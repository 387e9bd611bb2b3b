// Masked row softmax: the middle kernel of the CUTLASS 3-kernel attention pipeline.
//
// Input:  scores S (fp16 or bf16), rows of `seq` valid columns with leading dimension `ld`
//         (ld >= seq, ld % 8 == 0 so that every row starts on a 16-byte boundary).
// Output: probs P (same type and layout): P[r, c] = softmax_c(scale * S[r, c]) over the
//         unmasked columns, 0 for masked ones. Causal masking keeps c <= r (Sq == Sk),
//         where r is the row's index inside its head.
//
// Arithmetic is fp32: exp2 with the scale pre-multiplied by log2(e), and a per-lane online
// max/sum (Milakov & Gimelshein, "Online normalizer calculation for softmax", 2018) merged
// across the warp with shuffles, so the row is read twice (statistics, then normalise) and
// written once. One warp per row, 16-byte vector loads and stores (8 elements per lane per
// step); padding columns [seq, ld) may be read (and are masked) and are written with zeros.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>
#include <stdint.h>

namespace attn3k {

constexpr int kSoftmaxWarpsPerBlock = 4;
constexpr int kSoftmaxVector = 8;  // elements per 16-byte access

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <typename T>
__global__ void __launch_bounds__(kSoftmaxWarpsPerBlock * 32)
masked_row_softmax(const T* __restrict__ scores, T* __restrict__ probs, int64_t total_rows,
                   int seq, int ld, float scale_log2e, int causal) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kSoftmaxWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= total_rows) return;
  const int row_in_head = int(row % seq);
  const int limit = causal ? row_in_head + 1 : seq;  // columns [0, limit) are kept
  const T* src = scores + row * int64_t(ld);
  T* dst = probs + row * int64_t(ld);

  // Pass 1: running max m and sum l of exp2(x - m) per lane over the kept columns.
  float m = -CUDART_INF_F;
  float l = 0.f;
  for (int c0 = lane * kSoftmaxVector; c0 < limit; c0 += 32 * kSoftmaxVector) {
    uint4 raw = *reinterpret_cast<const uint4*>(src + c0);
    const T* vals = reinterpret_cast<const T*>(&raw);
    float x[kSoftmaxVector];
    float chunk_max = -CUDART_INF_F;
#pragma unroll
    for (int i = 0; i < kSoftmaxVector; ++i) {
      x[i] = (c0 + i < limit) ? to_float(vals[i]) * scale_log2e : -CUDART_INF_F;
      chunk_max = fmaxf(chunk_max, x[i]);
    }
    const float m_new = fmaxf(m, chunk_max);  // finite: column c0 < limit is kept
    float chunk_sum = 0.f;
#pragma unroll
    for (int i = 0; i < kSoftmaxVector; ++i) chunk_sum += exp2f(x[i] - m_new);
    l = l * exp2f(m - m_new) + chunk_sum;
    m = m_new;
  }
  // Merge the lanes: lanes that saw no kept column carry (m = -inf, l = 0).
  float row_max = m;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, offset));
  float row_sum = (m == -CUDART_INF_F) ? 0.f : l * exp2f(m - row_max);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, offset);
  const float inv_sum = 1.f / row_sum;  // row_sum >= 1: the max element contributes exp2(0)

  // Pass 2: normalise kept columns, zero the masked ones (the P·V GEMM reads all of them).
  for (int c0 = lane * kSoftmaxVector; c0 < seq; c0 += 32 * kSoftmaxVector) {
    uint4 out_raw;
    T* out_vals = reinterpret_cast<T*>(&out_raw);
    if (c0 < limit) {
      uint4 raw = *reinterpret_cast<const uint4*>(src + c0);
      const T* vals = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < kSoftmaxVector; ++i) {
        const float p = (c0 + i < limit) ? exp2f(to_float(vals[i]) * scale_log2e - row_max) * inv_sum : 0.f;
        out_vals[i] = from_float<T>(p);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kSoftmaxVector; ++i) out_vals[i] = from_float<T>(0.f);
    }
    *reinterpret_cast<uint4*>(dst + c0) = out_raw;
  }
}

// Launches the softmax over `total_rows` rows on `stream`; returns the launch error.
template <typename T>
cudaError_t launch_masked_row_softmax(const T* scores, T* probs, int64_t total_rows, int seq, int ld,
                                      float scale, bool causal, cudaStream_t stream) {
  const float log2e = 1.4426950408889634f;
  const int64_t blocks = (total_rows + kSoftmaxWarpsPerBlock - 1) / kSoftmaxWarpsPerBlock;
  masked_row_softmax<T><<<dim3(unsigned(blocks)), dim3(kSoftmaxWarpsPerBlock * 32), 0, stream>>>(
      scores, probs, total_rows, seq, ld, scale * log2e, causal ? 1 : 0);
  return cudaGetLastError();
}

}  // namespace attn3k
