"""Two implementations of a row softmax: a Triton kernel and a torch one."""

from mykernels.softmax_torch import softmax_torch
from mykernels.softmax_triton import softmax_triton

__all__ = ["softmax_torch", "softmax_triton"]
