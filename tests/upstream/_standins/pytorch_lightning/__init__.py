# Stand-in for pytorch_lightning (see ../README.md): the models only subclass LightningModule.
from torch import nn


class LightningModule(nn.Module):
    pass
