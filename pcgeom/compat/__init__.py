"""Stand-ins for the compiled extensions that point-cloud code imports today.

Each module mirrors one original's public names and semantics:

* ``pcgeom.compat.point_mae``   -- Point-MAE's ``Group``, ``fps`` and Chamfer losses;
* ``pcgeom.compat.knn_cuda``    -- KNN_CUDA's ``KNN``;
* ``pcgeom.compat.densefusion`` -- DenseFusion's ``lib/knn`` ``KNearestNeighbor``;
* ``pcgeom.compat.pointnet2_ops`` / ``pointnet2_modules`` -- erikwijmans'
  ``pointnet2_ops.pointnet2_utils`` / ``pointnet2_modules``;
* ``pcgeom.compat.chamfer_ext`` -- the ``chamfer`` CUDA module of ``extensions/chamfer_dist``;
* ``pcgeom.compat.torch_cluster`` -- torch_cluster 1.6.3 (PyG 2.5 to 2.7);
* ``pcgeom.compat.pyg_lib``     -- pyg-lib 0.8.0's point-cloud ops and ``torch.ops.pyg.*`` (PyG 2.8).

To run an unmodified repository, serve them under the original module names:
``pcgeom compat enable`` (this Python environment, every later process) or
:func:`enable_shims` (this process).  See :mod:`pcgeom.compat.shims`.
"""

from pcgeom.compat.shims import SHIMS, disable_shims, enable_shims, shim_status

__all__ = ["SHIMS", "disable_shims", "enable_shims", "shim_status"]
