"""Built-in variants; each module registers its variants on import.

The list is explicit (no discovery by file name): a variant exists once its module is
imported here. Modules import torch, Triton and CuPy lazily, so this list imports on a
dashboard host that has none of them.
"""

from kernels.variants import sdpa, torch_3op  # noqa: F401  (register on import)
from kernels.variants import cuda_kernels  # noqa: F401  (register on import)
from kernels.variants import triton_fa2  # noqa: F401  (register on import)
from kernels.variants import cutlass_3k  # noqa: F401  (register on import)
