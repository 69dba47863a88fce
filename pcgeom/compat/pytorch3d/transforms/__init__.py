"""pcgeom's stand-in for ``pytorch3d.transforms``: the rotation helpers point-cloud alignment needs.

Served: ``quaternion_to_matrix``, ``random_quaternions``, ``random_rotation``,
``random_rotations``, ``standardize_quaternion`` (and the
``rotation_conversions`` module that holds them).  pytorch3d's other
transforms (``Transform3d``, ``so3_*``, Euler angles, ...) are not served:
asking for one raises an ``ImportError`` that names it.
"""

from pcgeom.compat.pytorch3d import not_served_error
from pcgeom.compat.pytorch3d.transforms import rotation_conversions
from pcgeom.compat.pytorch3d.transforms.rotation_conversions import (
    quaternion_to_matrix,
    random_quaternions,
    random_rotation,
    random_rotations,
    standardize_quaternion,
)

__all__ = ["quaternion_to_matrix", "random_quaternions", "random_rotation", "random_rotations",
           "rotation_conversions", "standardize_quaternion"]


# pytorch3d.transforms' other public names (v0.7.9), not served.
NOT_SERVED = frozenset({
    "Rotate", "RotateAxisAngle", "Scale", "Transform3d", "Translate", "acos_linear_extrapolation",
    "axis_angle_to_matrix", "axis_angle_to_quaternion", "euler_angles_to_matrix", "matrix_to_axis_angle",
    "matrix_to_euler_angles", "matrix_to_quaternion", "matrix_to_rotation_6d", "quaternion_apply",
    "quaternion_invert", "quaternion_multiply", "quaternion_raw_multiply", "quaternion_to_axis_angle",
    "rotation_6d_to_matrix", "se3_exp_map", "se3_log_map", "so3_exp_map", "so3_exponential_map", "so3_log_map",
    "so3_relative_angle", "so3_rotation_angle",
})


def __getattr__(name: str):
    if name in NOT_SERVED:
        raise not_served_error(name, "pytorch3d.transforms")
    raise AttributeError(f"module 'pytorch3d.transforms' has no attribute {name!r}")
