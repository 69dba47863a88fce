"""Drop-in replacements for the extensions that point-cloud code imports today.

Each module mirrors one original's public names and semantics, so switching is a
one-line import change:

* ``pcgeom.compat.point_mae``   -- Point-MAE's ``Group``;
* ``pcgeom.compat.knn_cuda``    -- KNN_CUDA's ``KNN``;
* ``pcgeom.compat.densefusion`` -- DenseFusion's ``lib/knn`` ``KNearestNeighbor``.
"""
