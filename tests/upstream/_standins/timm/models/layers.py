# Stand-in for timm.models.layers (see ../../README.md): stochastic depth and truncated normal init.
import torch
from torch import nn
from torch.nn.init import trunc_normal_  # noqa: F401


class DropPath(nn.Module):
    def __init__(self, drop_prob=0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = 1 - self.drop_prob
        mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
        return x * mask / keep
