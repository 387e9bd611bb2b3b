// cuda_wmma_cpasync: cuda_wmma with K/V tiles fetched by cp.async.cg into a 2-stage ring, so
// the next tile's global loads overlap this tile's tensor-core and softmax work (lineage: the
// kernel team's "V2c-v7a cp.async"). Same body as cuda_wmma (wmma_attention.cuh).
//
// Grid: (B * H, ceil(S / 64)); block: 128 threads; dynamic shared memory WmmaSmem<D, 2>::TOTAL
// (D=64: 72,960 B -> 3 CTAs/SM; D=128: 113,920 B -> 2 CTAs/SM).
#include "wmma_attention.cuh"

ATTNWATCH_WMMA_ENTRY(attn_wmma_cpasync_d64_fp16, 64, __half, true, 2, 3)
ATTNWATCH_WMMA_ENTRY(attn_wmma_cpasync_d128_fp16, 128, __half, true, 2, 2)
ATTNWATCH_WMMA_ENTRY(attn_wmma_cpasync_d64_bf16, 64, __nv_bfloat16, true, 2, 3)
ATTNWATCH_WMMA_ENTRY(attn_wmma_cpasync_d128_bf16, 128, __nv_bfloat16, true, 2, 2)
