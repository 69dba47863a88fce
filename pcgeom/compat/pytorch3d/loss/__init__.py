"""``pytorch3d.loss`` served by pcgeom: ``chamfer_distance``; the mesh losses raise a named :class:`ImportError`."""

from __future__ import annotations

from pcgeom.compat.pytorch3d import not_served_error
from pcgeom.compat.pytorch3d.loss.chamfer import chamfer_distance

__all__ = ["chamfer_distance"]

# pytorch3d.loss' other public names (v0.7.9): mesh losses, not served.
NOT_SERVED = frozenset({"mesh_edge_loss", "mesh_laplacian_smoothing", "mesh_normal_consistency",
                        "point_mesh_edge_distance", "point_mesh_face_distance"})


def __getattr__(name: str):
    if name in NOT_SERVED:
        raise not_served_error(name, "pytorch3d.loss")
    raise AttributeError(f"module 'pytorch3d.loss' has no attribute {name!r}")
