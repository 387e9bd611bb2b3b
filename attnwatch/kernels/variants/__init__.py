"""Built-in variants: each module listed here exposes its `VARIANTS`; `BUILTIN` is all of them,
in this order, and `kernels.registry` registers them on first use.

The list is explicit (no discovery by file name): a variant exists once its module is
imported here. Modules import torch, Triton, CuPy and flash_attn lazily, so this list
imports on a dashboard host that has none of them. No variant module imports the registry: the registry
imports this list, never the other way round (docs/design.md, "Layers and the direction of
imports").
"""

from . import sdpa, torch_3op
from . import cuda_kernels
from . import triton_fa2
from . import cutlass_3k
from . import fa4_cute
from . import rmsnorm_torch, rmsnorm_triton, rmsnorm_liger, rmsnorm_quack

BUILTIN = (
    *sdpa.VARIANTS,
    *torch_3op.VARIANTS,
    *cuda_kernels.VARIANTS,
    *triton_fa2.VARIANTS,
    *cutlass_3k.VARIANTS,
    *fa4_cute.VARIANTS,
    *rmsnorm_torch.VARIANTS,
    *rmsnorm_triton.VARIANTS,
    *rmsnorm_liger.VARIANTS,
    *rmsnorm_quack.VARIANTS,
)
