"""Real 3-D scans bundled with pcgeom, ready as tensors.

Four classic scans (credits and terms: ``scans/README.md`` next to this file,
and ``data/README.md`` in the source repository), each normalised so its
bounding box is centred at the origin with longest side 1, y pointing up,
stored as float32 binary PLY with unit outward normals:

========================  ========  ==================================================
name                      points    origin
========================  ========  ==================================================
``bunny``                 37,706    Stanford Bunny (Stanford 3D Scanning Repository)
``armadillo``             26,002    Stanford Armadillo (Stanford 3D Scanning Repository)
``chinese_dragon``        10,000    dragon figurine scan from CGAL's example data
``kitten``                5,210     kitten scan with its own normals, CGAL example data
========================  ========  ==================================================

Normals of the three meshes are area-weighted vertex normals of their
triangles; the kitten's are the ones shipped with the scan.  The conversion
is ``scripts/make_data.py`` in the source repository.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import torch

from pcgeom._validation import check_int

__all__ = ["load", "names", "path"]

_DESCRIPTIONS = {
    "armadillo": "Stanford Armadillo (Stanford 3D Scanning Repository, via CGAL's example data)",
    "bunny": "Stanford Bunny (Stanford 3D Scanning Repository, via CGAL's example data)",
    "chinese_dragon": "Chinese dragon figurine scan, 10k vertices (CGAL's example data)",
    "kitten": "kitten scan with normals (CGAL's example data)",
}


def names() -> list[str]:
    """The names of the bundled scans, sorted: ``['armadillo', 'bunny', 'chinese_dragon', 'kitten']``."""
    return sorted(_DESCRIPTIONS)


def _check_name(fn: str, name) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{fn}: name must be a str, one of {names()}, got {type(name).__name__}")
    if name not in _DESCRIPTIONS:
        raise ValueError(f"{fn}: unknown scan {name!r}; bundled scans: {', '.join(names())}")
    return name


def path(name: str) -> Path:
    """The bundled PLY file of a scan (readable with :func:`pcgeom.io.read_ply` or any PLY viewer).

    Args:
        name: one of :func:`names`.

    Returns:
        The file's ``pathlib.Path`` inside the installed package.

    Raises:
        ValueError: an unknown scan name.
        TypeError: ``name`` not a str.
        FileNotFoundError: the installation lacks the file (reinstall, or run ``scripts/make_data.py``).

    Example:
        >>> import pcgeom.data
        >>> pcgeom.data.path("bunny").name
        'bunny.ply'
    """
    _check_name("pcgeom.data.path", name)
    p = Path(str(resources.files("pcgeom.data").joinpath("scans", f"{name}.ply")))
    if not p.is_file():
        raise FileNotFoundError(
            f"pcgeom.data.path: the bundled scan {name!r} is missing at {p}; the installation is incomplete "
            "(reinstall pcgeom, or in a checkout run scripts/make_data.py)"
        )
    return p


@functools.lru_cache(maxsize=None)
def _read(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    from pcgeom.io import read_ply

    cloud = read_ply(path(name))
    return cloud.points, cloud.normals


def load(
    name: str,
    n_points: int | None = None,
    seed: int = 0,
    *,
    return_normals: bool = False,
    device: torch.device | str | None = None,
):
    """Loads a bundled scan as a float32 ``(N, 3)`` tensor (optionally with its normals).

    Args:
        name: one of :func:`names` (``"bunny"``, ``"armadillo"``, ``"chinese_dragon"``, ``"kitten"``).
        n_points: ``None`` for every point of the scan (in file order), or a
            number in ``[1, N]`` of points drawn uniformly without replacement;
            the subset keeps file order (indices ascending).
        seed: seed of the subset draw (a private ``torch.Generator``; the global
            RNG is untouched).  The same ``(name, n_points, seed)`` always gives
            the same points.
        return_normals: also return the ``(N, 3)`` float32 unit outward
            normals of the same points (every bundled scan has normals).
        device: where to put the tensors (default CPU).

    Returns:
        ``points`` of shape ``(N, 3)`` (or ``(n_points, 3)``), float32,
        centred with longest bounding-box side 1, y up; or
        ``(points, normals)`` when ``return_normals=True``.  Fresh tensors
        each call (safe to modify).

    Raises:
        ValueError: an unknown scan name, or ``n_points`` below 1 or above the scan's number of points.
        TypeError: ``name`` not a str, ``n_points`` not an int, ``return_normals`` not a bool.

    Example:
        >>> import pcgeom.data
        >>> pts = pcgeom.data.load("bunny")
        >>> pts.shape, pts.dtype
        (torch.Size([37706, 3]), torch.float32)
        >>> pts, nrm = pcgeom.data.load("kitten", n_points=1024, return_normals=True)
        >>> pts.shape, nrm.shape
        (torch.Size([1024, 3]), torch.Size([1024, 3]))
    """
    fn = "pcgeom.data.load"
    _check_name(fn, name)
    seed = check_int(fn, "seed", seed)
    if not isinstance(return_normals, bool):
        raise TypeError(f"{fn}: return_normals must be a bool, got {return_normals!r}")
    points, normals = _read(name)
    n = points.shape[0]
    if n_points is not None:
        n_points = check_int(fn, "n_points", n_points, minimum=1)
        if n_points > n:
            raise ValueError(f"{fn}: n_points={n_points} exceeds the {n} points of scan {name!r}")
        g = torch.Generator().manual_seed(seed)
        keep = torch.randperm(n, generator=g)[:n_points].sort().values
        points, normals = points[keep], normals[keep]
    else:
        points, normals = points.clone(), normals.clone()
    if device is not None:
        points, normals = points.to(device), normals.to(device)
    return (points, normals) if return_normals else points
