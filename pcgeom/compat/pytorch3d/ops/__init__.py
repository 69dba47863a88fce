"""``pytorch3d.ops`` served by pcgeom: the point ops; its mesh ops raise a named :class:`ImportError`.

``from pytorch3d.ops import knn_points, sample_points_from_meshes`` fails on the
second name with an error that names it and says the stand-in serves point ops
only (:func:`pcgeom.compat.pytorch3d.not_served_error`).
"""

from __future__ import annotations

from pcgeom.compat.pytorch3d import not_served_error
from pcgeom.compat.pytorch3d.ops.ball_query import ball_query
from pcgeom.compat.pytorch3d.ops.knn import knn_gather, knn_points
from pcgeom.compat.pytorch3d.ops.points_alignment import (
    ICPSolution,
    SimilarityTransform,
    corresponding_points_alignment,
    iterative_closest_point,
)
from pcgeom.compat.pytorch3d.ops.points_normals import (
    estimate_pointcloud_local_coord_frames,
    estimate_pointcloud_normals,
)
from pcgeom.compat.pytorch3d.ops.sample_farthest_points import sample_farthest_points
from pcgeom.compat.pytorch3d.ops.utils import (
    convert_pointclouds_to_tensor,
    eyes,
    get_point_covariances,
    is_pointclouds,
    masked_gather,
    wmean,
)

__all__ = [
    "ICPSolution", "SimilarityTransform", "corresponding_points_alignment", "iterative_closest_point",
    "ball_query", "convert_pointclouds_to_tensor", "estimate_pointcloud_local_coord_frames",
    "estimate_pointcloud_normals", "eyes", "get_point_covariances", "is_pointclouds", "knn_gather", "knn_points",
    "masked_gather", "sample_farthest_points", "wmean",
]

# pytorch3d.ops' other public names (v0.7.9): mesh, camera and volume ops, not served.
NOT_SERVED = frozenset({
    "GraphConv", "SubdivideMeshes", "add_pointclouds_to_volumes", "add_points_features_to_volume_densities_features",
    "box3d_overlap", "corresponding_cameras_alignment", "cot_laplacian", "cubify", "efficient_pnp",
    "interpolate_face_attributes", "laplacian", "mesh_face_areas_normals", "norm_laplacian", "packed_to_padded",
    "padded_to_packed", "sample_points_from_meshes", "taubin_smoothing", "vert_align",
})


def __getattr__(name: str):
    if name in NOT_SERVED:
        raise not_served_error(name, "pytorch3d.ops")
    raise AttributeError(f"module 'pytorch3d.ops' has no attribute {name!r}")
