"""RMSNorm, the second operator (memory-bound): its shapes, byte and FLOP model, float64
reference, tolerances and the Triton kernel of `rmsnorm_triton`.

The variants themselves live beside the attention ones (kernels/variants/rmsnorm_*.py); this
package holds what they share. Nothing here imports torch or Triton at module level.
"""
