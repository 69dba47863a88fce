"""The part of pytorch3d's ``pytorch3d.transforms.rotation_conversions`` that point-cloud alignment uses.

Quaternions are real part first, ``(w, x, y, z)``; matrices act on column
vectors (``R @ v``), as in pytorch3d.  Random rotations draw ``randn(n, 4)``
from the global generator exactly as pytorch3d does, so a seeded run draws
the same rotations.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

__all__ = ["quaternion_to_matrix", "random_quaternions", "random_rotation", "random_rotations",
           "standardize_quaternion"]


def quaternion_to_matrix(quaternions: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``(..., 3, 3)`` of quaternions ``(..., 4)``, real part first (need not be unit).

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.transforms import quaternion_to_matrix
        >>> quaternion_to_matrix(torch.tensor([0.0, 0.0, 0.0, 1.0])).tolist()   # 180 degrees about z
        [[-1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    if not isinstance(quaternions, torch.Tensor) or quaternions.dim() < 1 or quaternions.shape[-1] != 4:
        raise ValueError(f"quaternion_to_matrix: quaternions must have shape (..., 4), got "
                         f"{tuple(quaternions.shape) if isinstance(quaternions, torch.Tensor) else type(quaternions).__name__}")
    w, x, y, z = quaternions.unbind(-1)
    k = 2.0 / (quaternions * quaternions).sum(-1)  # 2 / |q|^2 makes any non-zero quaternion a rotation
    rows = (
        1 - k * (y * y + z * z), k * (x * y - z * w), k * (x * z + y * w),
        k * (x * y + z * w), 1 - k * (x * x + z * z), k * (y * z - x * w),
        k * (x * z - y * w), k * (y * z + x * w), 1 - k * (x * x + y * y),
    )
    return torch.stack(rows, -1).reshape(quaternions.shape[:-1] + (3, 3))


def standardize_quaternion(quaternions: torch.Tensor) -> torch.Tensor:
    """The same rotations with a non-negative real part (``q`` and ``-q`` are one rotation)."""
    return torch.where(quaternions[..., :1] < 0, -quaternions, quaternions)


def random_quaternions(n: int, dtype: Optional[torch.dtype] = None,
                       device: Optional[Union[str, torch.device]] = None) -> torch.Tensor:
    """``n`` unit quaternions ``(n, 4)`` uniform over rotations, real part non-negative.

    A normalised standard normal 4-vector is uniform on the 3-sphere; its sign
    is chosen so that the real part's sign bit is clear.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"random_quaternions: n must be an int >= 0, got {n!r}")
    q = torch.randn((n, 4), dtype=dtype, device=device)
    norm = torch.sqrt((q * q).sum(1))
    return q / torch.copysign(norm, q[:, 0])[:, None]


def random_rotations(n: int, dtype: Optional[torch.dtype] = None,
                     device: Optional[Union[str, torch.device]] = None) -> torch.Tensor:
    """``n`` rotation matrices ``(n, 3, 3)`` drawn uniformly (Haar measure on SO(3)).

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.transforms import random_rotations
        >>> R = random_rotations(4, dtype=torch.float64)
        >>> bool(torch.allclose(R @ R.transpose(1, 2), torch.eye(3, dtype=torch.float64))), bool(torch.allclose(torch.det(R), torch.ones(4, dtype=torch.float64)))
        (True, True)
    """
    return quaternion_to_matrix(random_quaternions(n, dtype=dtype, device=device))


def random_rotation(dtype: Optional[torch.dtype] = None,
                    device: Optional[Union[str, torch.device]] = None) -> torch.Tensor:
    """One uniformly random rotation matrix ``(3, 3)``."""
    return random_rotations(1, dtype, device)[0]
