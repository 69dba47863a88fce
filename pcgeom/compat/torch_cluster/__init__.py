"""``torch_cluster`` 1.6.3 served by pcgeom: every public name of the original
(``graclus_cluster``, ``grid_cluster``, ``fps``, ``nearest``, ``knn``,
``knn_graph``, ``radius``, ``radius_graph``, ``random_walk``,
``neighbor_sampler``, ``__version__``) with its signature and outputs, and the
``torch.ops.torch_cluster.*`` operators the original registers (PyG calls
``torch.ops.torch_cluster.random_walk`` directly), so PyG / DGCNN code that
does ``import torch_cluster`` runs unmodified and without a compiled extension.

The Python functions are TorchScript-scriptable like the originals
(``torch.jit.script(knn)`` works; the work itself runs in Python through
``torch.jit.ignore``, so scripted code calling them cannot be saved).

**Operators.**  Importing this module (the shim does it when a program imports
``torch_cluster``) registers ``torch.ops.torch_cluster.{fps, graclus, grid,
knn, nearest, radius, random_walk, neighbor_sampler, cuda_version}`` with the
original schemas -- but only when no real torch_cluster is installed and the
operator does not exist yet, so it never collides with the real extension.
``cuda_version()`` returns -1 (no compiled CUDA code).

Where torch_cluster is non-deterministic or differs between its CPU and CUDA
builds, pcgeom returns one answer on every device:

* ``radius`` / ``radius_graph``: neighbours are the points with distance
  **strictly below** ``r`` (``dist2 < r*r``, ``r*r`` rounded to the input
  dtype, as torch_cluster).  When more than ``max_num_neighbors`` qualify, the
  default ``order="index"`` keeps the **first ones in index order** -- what
  torch_cluster's CUDA kernel keeps, so models trained on GPU see the same
  neighbourhoods -- in increasing index order.  torch_cluster's CPU build keeps
  the first ones in nanoflann KD-tree visit order (neither nearest nor index
  order, and dependent on the tree).  ``order="distance"`` keeps pcgeom's
  **nearest** ones instead, ties to the lower index.  Float16 / bfloat16 inputs
  are searched in float32.
* ``knn`` / ``knn_graph``: torch_cluster's CPU path (nanoflann KD-tree) breaks
  distance ties arbitrarily and its CUDA path by scan order; pcgeom returns,
  per query in increasing order, the exact k nearest **nearest first, ties to
  the lower index**.  ``knn_graph(loop=False)`` gives every node exactly
  ``min(k, n_b - 1)`` other nodes (torch_cluster can return ``k + 1`` when more
  than ``k`` exact duplicates hide the node itself).  ``cosine=True`` ranks by
  cosine distance (both devices; torch_cluster supports it on CUDA only).
* ``fps``: ``random_start=True`` draws each cloud's start from torch's global
  generator (``torch.rand``; seed it with ``torch.manual_seed``) instead of
  C ``rand()``; the next samples follow pcgeom's rule (farthest, ties to the
  lowest index, never a point twice -- torch_cluster may repeat a point when a
  cloud has duplicates).  Sample count per cloud is ``ceil(ratio * n_b)`` as in
  torch_cluster.
* ``grid_cluster``: torch_cluster's formula exactly (voxel ``trunc((pos -
  start) / size)``, ids linearised with the first axis fastest over the box
  ``start..end``).
* ``nearest``: for each ``x`` the nearest ``y`` of the same cloud, ties to the
  lower index (torch_cluster's CPU path uses SciPy's ``vq`` on rescaled
  coordinates).
* ``graclus_cluster``: torch_cluster's CPU algorithm on every device (greedy
  heavy-edge matching over a random node order, the same ``torch.randperm``
  calls, so a seeded CPU run gives the original's clusters); torch_cluster's
  CUDA build runs a different, parallel proposal matching.
* ``random_walk``: with ``p == q == 1`` the original's uniform walk with the
  same ``torch.rand`` draws (a seeded run gives the original's walks on CPU and
  on CUDA); otherwise node2vec's rejection sampling with torch's generator (the
  original uses C ``rand()`` / time-seeded curand, and its chained acceptance
  test accepts any candidate with the ``1/q`` bound too, so for ``q < min(1,
  p)`` its walks are uniform; pcgeom accepts a return with ``1/p``, a neighbour
  of the previous node with ``1`` and any other node with ``1/q``, relative to
  their maximum, as the node2vec paper).
* ``neighbor_sampler``: ``size`` distinct neighbours per node, uniformly, from
  torch's generator, on every device (the original: CPU only, C ``rand()``).

Usage::

    import sys, pcgeom.compat.torch_cluster as tc
    sys.modules["torch_cluster"] = tc       # before PyG / your model imports it

or ``pcgeom compat enable`` / :func:`pcgeom.compat.enable_shims`.
"""


from pcgeom.compat.torch_cluster._ops import register_ops
from pcgeom.compat.torch_cluster.fps import fps
from pcgeom.compat.torch_cluster.graclus import graclus_cluster
from pcgeom.compat.torch_cluster.grid import grid_cluster
from pcgeom.compat.torch_cluster.knn import knn, knn_graph
from pcgeom.compat.torch_cluster.nearest import nearest
from pcgeom.compat.torch_cluster.radius import radius, radius_graph
from pcgeom.compat.torch_cluster.rw import random_walk
from pcgeom.compat.torch_cluster.sampler import neighbor_sampler

__version__ = "1.6.3"

__all__ = [
    "graclus_cluster", "grid_cluster", "fps", "nearest", "knn", "knn_graph", "radius", "radius_graph",
    "random_walk", "neighbor_sampler", "__version__",
]


register_ops()
