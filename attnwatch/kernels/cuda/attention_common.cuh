// Shared pieces of the attnwatch CUDA attention kernels.
//
// Layout (kernels/inputs.py): q, k, v, out are contiguous (B, H, S, D) tensors of fp16 or
// bf16; one CTA column works on one (batch, head) slice, which starts at bh * S * D.
// Scores are kept in the log2 domain: s * (1/sqrt(D)) * log2(e), so that exp2f does the
// softmax's exponential in one instruction.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

namespace attnwatch {

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

// The exponent base of an online-softmax row: its running maximum, or 0 while every score
// seen so far was masked (-inf), so that exp2(-inf - base) = 0 instead of NaN.
__device__ __forceinline__ float safe_base(float running_max) {
    return running_max == -CUDART_INF_F ? 0.0f : running_max;
}

// Dynamic shared memory actually provided at launch; kernels trap when it is smaller than
// their layout needs, so a host-side size mismatch is a launch failure, not silent corruption.
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
    unsigned bytes;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    return bytes;
}

}  // namespace attnwatch
