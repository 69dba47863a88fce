"""pcgeom: exact, fast KNN and farthest point sampling for point clouds in PyTorch.

The ops (``knn``, ``ball_query``, ``knn_gather``, ``farthest_point_sample``) are
real torch ops: native CPU/CUDA kernels built at install time on the LibTorch
stable ABI, or the pure-torch reference path with identical answers when the
kernels are absent.  ``pcgeom.backend_info()`` / ``pcgeom doctor`` say which.
PointNet++'s feature ops (``group_features``, ``fill_missing``,
``interpolate_features``) build on them; ``pcgeom.compat`` serves opt-in stand-ins
(``pcgeom compat enable``) for the extensions point-cloud code imports: KNN_CUDA,
pointnet2_ops, chamfer, simple_knn, torch_cluster, torch_scatter, pyg_lib,
Pointcept's pointops / pointops_cuda and pytorch3d's point ops;
``pcgeom.compat.shims.SHIMS`` lists every served name.
"""

from pcgeom._backend import backend_info
from pcgeom.ops import KNNResult, ball_query, farthest_point_sample, knn, knn_gather, pack, unpack
from pcgeom.ops import StreamedBlock, ball_query_blocks, ball_query_streamed, knn_blocks, knn_streamed
from pcgeom.grouping import GroupLevel, group_hierarchical, group_patches
from pcgeom.chamfer import chamfer_distance
from pcgeom.features import fill_missing, group_features, interpolate_features
from pcgeom.graph import edge_features, knn_graph, radius_graph
from pcgeom.grid import GridSubsampleResult, grid_subsample
from pcgeom.packed_features import aggregate_neighbors, batch_to_offsets, group_packed, interpolate_packed, offsets_to_batch
from pcgeom.segment import group_gather, group_reduce, segment_reduce
from pcgeom.serialization import SerializedOrder, serialize
from pcgeom.normals import NormalsResult, estimate_normals
from pcgeom.outliers import mean_neighbor_dist2, remove_radius_outliers, remove_statistical_outliers
# Submodules users reach as attributes (pcgeom.nn.KNNClassifier, pcgeom.metrics.add, ...).
from pcgeom import compat, data, distributed, io, losses, metrics, nn  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "GridSubsampleResult",
    "GroupLevel",
    "KNNResult",
    "NormalsResult",
    "aggregate_neighbors", "batch_to_offsets", "group_packed", "interpolate_packed", "offsets_to_batch",
    "SerializedOrder",
    "StreamedBlock", "ball_query_blocks", "ball_query_streamed", "knn_blocks", "knn_streamed",  # out-of-core
    "backend_info",
    "ball_query",
    "chamfer_distance",
    "edge_features",
    "estimate_normals",
    "farthest_point_sample",
    "fill_missing",
    "grid_subsample",
    "group_features",
    "group_hierarchical",
    "group_patches",
    "interpolate_features",
    "knn",
    "knn_gather",
    "knn_graph",
    "mean_neighbor_dist2",
    "pack",
    "radius_graph",
    "remove_radius_outliers",
    "remove_statistical_outliers",
    "serialize",
    "unpack",
    "group_gather", "group_reduce", "segment_reduce",  # pcgeom.segment
]
