"""``pytorch3d`` 0.7.9's point ops, served by pcgeom (``pcgeom compat enable``; a real pytorch3d always wins).

Laid out as upstream: :mod:`~pcgeom.compat.pytorch3d.ops` (``knn_points``,
``knn_gather``, ``ball_query``, ``sample_farthest_points``, normals, ICP and the
helpers they use), :mod:`~pcgeom.compat.pytorch3d.loss` (``chamfer_distance``),
:mod:`~pcgeom.compat.pytorch3d.structures` (``Pointclouds``) and
:mod:`~pcgeom.compat.pytorch3d.transforms` (the rotations the alignment code needs).
Upstream's semantics, padding and error messages, on pcgeom's kernels; see
``docs/guides/pytorch3d.md`` for the rules and where pcgeom goes beyond upstream
(float64, tie rule, clear errors).

Everything else of pytorch3d -- meshes, rendering, I/O, implicitron -- is **not
served, and says so**: importing such a name raises an :class:`ImportError`
naming it (:func:`not_served_error`), never a half-working module; the
refused module names are ``pcgeom.compat.shims.NOT_SERVED``.
"""

from __future__ import annotations

__version__ = "0.7.9"

__all__ = ["__version__", "not_served_error"]


def not_served_error(name: str, module: str | None = None) -> ImportError:
    """The :class:`ImportError` for a pytorch3d name that pcgeom's stand-in does not serve.

    Args:
        name: the module (``"pytorch3d.renderer"``) or the name imported from a
            served module (``"sample_points_from_meshes"``).
        module: the served module the name was imported from, or None for a module.

    Returns:
        The error (raise it), naming ``name`` and saying that the stand-in serves
        pytorch3d's point ops only.

    Example:
        >>> from pcgeom.compat.pytorch3d import not_served_error
        >>> str(not_served_error("cubify", "pytorch3d.ops")).split(";")[0]
        "cannot import name 'cubify' from 'pytorch3d.ops'"
    """
    what = f"cannot import name {name!r} from {module!r}" if module else f"cannot import module {name!r}"
    return ImportError(
        f"{what}; pcgeom's pytorch3d stand-in serves pytorch3d's point ops only (knn_points, knn_gather, "
        "ball_query, sample_farthest_points, estimate_pointcloud_normals, iterative_closest_point, "
        "chamfer_distance, Pointclouds, ...), not meshes, rendering or I/O. Install the real pytorch3d for "
        "those (it always wins over the stand-in); see docs/guides/pytorch3d.md",
        name=module or name)
