// cuda_wmma: fused attention forward on tensor cores through nvcuda::wmma (16x16x16, fp16 and
// bf16), 64x64 tiles, streaming softmax in fp32, causal block skipping, K/V staged with plain
// 16-byte loads (one buffer). The kernel body is in wmma_attention.cuh; lineage: the kernel
// team's "V2c-v6a Full WMMA".
//
// Grid: (B * H, ceil(S / 64)); block: 128 threads; dynamic shared memory WmmaSmem<D, 1>::TOTAL
// (D=64: 54,528 B, 4 CTAs/SM by smem, but at the 128 registers that allows ptxas spilled, so
// D=64 asks for 3 CTAs/SM = 168 registers; D=128: 79,104 B -> 2 CTAs/SM).
#include "wmma_attention.cuh"

ATTNWATCH_WMMA_ENTRY(attn_wmma_d64_fp16, 64, __half, false, 1, 3)
ATTNWATCH_WMMA_ENTRY(attn_wmma_d128_fp16, 128, __half, false, 1, 2)
ATTNWATCH_WMMA_ENTRY(attn_wmma_d64_bf16, 64, __nv_bfloat16, false, 1, 3)
ATTNWATCH_WMMA_ENTRY(attn_wmma_d128_bf16, 128, __nv_bfloat16, false, 1, 2)
