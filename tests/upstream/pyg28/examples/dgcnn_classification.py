# Excerpt of pyg-team/pytorch_geometric examples/dgcnn_classification.py at tag 2.8.0.post1
# (commit d4e1c45689967a614a7f3d873ad4ba83c4a1f3bd; PyG 2.8.1 ships the same code; MIT licence, ../LICENSE, Copyright (c) 2023 PyG Team):
# the model's imports and its Net class, unchanged (lines 5-7, 12 and 91-108). The dataset, loaders
# and training loop are left out. Used by ../pcgeom_checks.py.

import torch
import torch.nn.functional as F
from torch.nn import Linear
from torch_geometric.nn import MLP, DynamicEdgeConv, global_max_pool


class Net(torch.nn.Module):
    def __init__(self, out_channels, k=20, aggr='max'):
        super().__init__()

        self.conv1 = DynamicEdgeConv(MLP([2 * 3, 64, 64, 64]), k, aggr)
        self.conv2 = DynamicEdgeConv(MLP([2 * 64, 128]), k, aggr)
        self.lin1 = Linear(128 + 64, 1024)

        self.mlp = MLP([1024, 512, 256, out_channels], dropout=0.5, norm=None)

    def forward(self, data):
        pos, batch = data.pos, data.batch
        x1 = self.conv1(pos, batch)
        x2 = self.conv2(x1, batch)
        out = self.lin1(torch.cat([x1, x2], dim=1))
        out = global_max_pool(out, batch)
        out = self.mlp(out)
        return F.log_softmax(out, dim=1)
