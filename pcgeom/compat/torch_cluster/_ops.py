"""``torch.ops.torch_cluster.*``: the original's operators, defined when no real torch_cluster is installed.

Registered when :mod:`pcgeom.compat.torch_cluster` is imported, with the original schemas, on top of the
Python stand-ins of the other modules of this package.
"""

from typing import List, Optional

import torch
from torch import Tensor

from pcgeom.compat._installed import real_package_installed
from pcgeom.compat.torch_cluster._common import as_2d, ptr_offsets
from pcgeom.compat.torch_cluster.fps import fps_impl
from pcgeom.compat.torch_cluster.graclus import graclus_op
from pcgeom.compat.torch_cluster.grid import grid_cluster
from pcgeom.compat.torch_cluster.knn import knn_offsets
from pcgeom.compat.torch_cluster.nearest import nearest_offsets
from pcgeom.compat.torch_cluster.radius import radius_offsets
from pcgeom.compat.torch_cluster.rw import random_walk_op
from pcgeom.compat.torch_cluster.sampler import neighbor_sampler_op


def _op_fps(src: Tensor, ptr: Tensor, ratio: Tensor, random_start: bool) -> Tensor:
    return fps_impl(src, None, ratio, random_start, None, ptr)


def _op_grid(pos: Tensor, size: Tensor, start: Optional[Tensor], end: Optional[Tensor]) -> Tensor:
    return grid_cluster(pos, size, start, end)


def _op_knn(x: Tensor, y: Tensor, ptr_x: Optional[Tensor], ptr_y: Optional[Tensor], k: int, cosine: bool,
            num_workers: int) -> Tensor:
    x, y = as_2d(x), as_2d(y)
    return knn_offsets(x, y, k, ptr_offsets("knn", "ptr_x", ptr_x, x.shape[0], x.device),
                        ptr_offsets("knn", "ptr_y", ptr_y, y.shape[0], x.device), cosine)


def _op_nearest(x: Tensor, y: Tensor, ptr_x: Tensor, ptr_y: Tensor) -> Tensor:
    x, y = as_2d(x), as_2d(y)
    return nearest_offsets(x, y, ptr_offsets("nearest", "ptr_x", ptr_x, x.shape[0], x.device),
                            ptr_offsets("nearest", "ptr_y", ptr_y, y.shape[0], x.device))


def _op_radius(x: Tensor, y: Tensor, ptr_x: Optional[Tensor], ptr_y: Optional[Tensor], r: float,
               max_num_neighbors: int, num_workers: int, ignore_same_index: bool) -> Tensor:
    x, y = as_2d(x), as_2d(y)
    return radius_offsets(x, y, r, ptr_offsets("radius", "ptr_x", ptr_x, x.shape[0], x.device),
                           ptr_offsets("radius", "ptr_y", ptr_y, y.shape[0], x.device),
                           int(max_num_neighbors), ignore_same_index, "index")


def _op_cuda_version() -> int:
    return -1


_OPS = {
    "fps": ("fps(Tensor src, Tensor ptr, Tensor ratio, bool random_start) -> Tensor", _op_fps),
    "graclus": ("graclus(Tensor rowptr, Tensor col, Tensor? weight) -> Tensor", graclus_op),
    "grid": ("grid(Tensor pos, Tensor size, Tensor? start, Tensor? end) -> Tensor", _op_grid),
    "knn": ("knn(Tensor x, Tensor y, Tensor? ptr_x, Tensor? ptr_y, int k, bool cosine, int num_workers) -> Tensor",
            _op_knn),
    "nearest": ("nearest(Tensor x, Tensor y, Tensor ptr_x, Tensor ptr_y) -> Tensor", _op_nearest),
    "radius": ("radius(Tensor x, Tensor y, Tensor? ptr_x, Tensor? ptr_y, float r, int max_num_neighbors, "
               "int num_workers, bool ignore_same_index) -> Tensor", _op_radius),
    "random_walk": ("random_walk(Tensor rowptr, Tensor col, Tensor start, int walk_length, float p, float q) "
                    "-> (Tensor, Tensor)", random_walk_op),
    "neighbor_sampler": ("neighbor_sampler(Tensor start, Tensor rowptr, int count, float factor) -> Tensor",
                         neighbor_sampler_op),
    "cuda_version": ("cuda_version() -> int", _op_cuda_version),
}

_LIB: Optional[torch.library.Library] = None  # kept alive: dropping it would unregister the ops


def _has_op(name: str) -> bool:
    try:
        getattr(torch.ops.torch_cluster, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _real_torch_cluster_installed() -> bool:
    """Whether a compiled torch_cluster package is on ``sys.path`` (its ``_version_*`` libraries ship beside it)."""
    return real_package_installed("torch_cluster", "_version")


def register_ops() -> List[str]:
    """Defines the missing ``torch.ops.torch_cluster.*`` operators; returns their names.

    Nothing is defined when a real torch_cluster is installed (found on
    ``sys.path``): its library defines them when it is imported.
    """
    global _LIB
    if _real_torch_cluster_installed():
        return []
    missing = [name for name in _OPS if not _has_op(name)]
    if not missing:
        return []
    if _LIB is None:
        _LIB = torch.library.Library("torch_cluster", "FRAGMENT")
    for name in missing:
        schema, fn = _OPS[name]
        _LIB.define(schema)
        _LIB.impl(name, fn, "CompositeExplicitAutograd")
    return missing
