"""``pytorch3d.structures`` served by pcgeom: ``Pointclouds`` and its joins; ``Meshes`` / ``Volumes`` raise a named ImportError."""

from __future__ import annotations

from pcgeom.compat.pytorch3d import not_served_error
from pcgeom.compat.pytorch3d.structures.pointclouds import (
    Pointclouds,
    join_pointclouds_as_batch,
    join_pointclouds_as_scene,
)

__all__ = ["Pointclouds", "join_pointclouds_as_batch", "join_pointclouds_as_scene"]

# pytorch3d.structures' other public names (v0.7.9), not served.
NOT_SERVED = frozenset({"Meshes", "Volumes", "join_meshes_as_batch", "join_meshes_as_scene", "list_to_packed",
                        "list_to_padded", "packed_to_list", "padded_to_list", "meshes", "volumes", "utils"})


def __getattr__(name: str):
    if name in NOT_SERVED:
        raise not_served_error(name, "pytorch3d.structures")
    raise AttributeError(f"module 'pytorch3d.structures' has no attribute {name!r}")
