"""Row softmax in torch: the numerically safe form, one op per step."""

import torch


def softmax_torch(x: torch.Tensor) -> torch.Tensor:
    shifted = x - x.max(dim=-1, keepdim=True).values
    e = torch.exp(shifted.float())
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
