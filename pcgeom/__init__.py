"""pcgeom: exact, fast KNN and farthest point sampling for point clouds in PyTorch.

The ops (``knn``, ``ball_query``, ``knn_gather``, ``farthest_point_sample``) are
real torch ops: native CPU/CUDA kernels built at install time on the LibTorch
stable ABI, or the pure-torch reference path with identical answers when the
kernels are absent.  ``pcgeom.backend_info()`` / ``pcgeom doctor`` say which.
"""

from pcgeom._backend import backend_info
from pcgeom.ops import KNNResult, ball_query, farthest_point_sample, knn, knn_gather
from pcgeom.grouping import GroupLevel, group_hierarchical, group_patches
from pcgeom.chamfer import chamfer_distance
# Submodules users reach as attributes (pcgeom.nn.KNNClassifier, pcgeom.metrics.add, ...).
from pcgeom import compat, data, distributed, io, losses, metrics, nn  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "GroupLevel",
    "KNNResult",
    "backend_info",
    "ball_query",
    "chamfer_distance",
    "farthest_point_sample",
    "group_hierarchical",
    "group_patches",
    "knn",
    "knn_gather",
]
