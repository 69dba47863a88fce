# Excerpt of pyg-team/pytorch_geometric examples/dgcnn_classification.py at tag 2.5.3
# (commit f1656e38543f16641ec463a0abe23c43f35d3c93; MIT licence, ../LICENSE, Copyright (c) 2023 PyG Team):
# its imports of the model's names and its `Net` class, unchanged (lines 3-5, 10 and 22-39). The dataset,
# loaders and training loop are left out. Used by tests/upstream/drive_onnx.py (case pyg_dgcnn).

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
