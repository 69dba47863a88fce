"""``torch_scatter.composite``: the reductions built from the others (torch_scatter 2.1.2 ``composite/``)."""

from pcgeom.compat.torch_scatter.composite.logsumexp import scatter_logsumexp
from pcgeom.compat.torch_scatter.composite.softmax import scatter_log_softmax, scatter_softmax
from pcgeom.compat.torch_scatter.composite.std import scatter_std

__all__ = ["scatter_std", "scatter_logsumexp", "scatter_softmax", "scatter_log_softmax"]
