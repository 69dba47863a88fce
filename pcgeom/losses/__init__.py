"""Losses built on pcgeom's ops.

* :mod:`pcgeom.losses.densefusion` -- DenseFusion's pose and refiner losses:
  drop-in ``Loss`` / ``Loss_refine`` modules and the batched
  :func:`pose_loss` / :func:`refine_loss`.
"""

from pcgeom.losses.densefusion import (
    PoseLossResult,
    RefineLossResult,
    pose_loss,
    quaternion_to_matrix,
    refine_loss,
)

__all__ = ["PoseLossResult", "RefineLossResult", "pose_loss", "quaternion_to_matrix", "refine_loss"]
