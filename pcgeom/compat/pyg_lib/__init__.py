"""``pyg_lib`` 0.8.0 served by pcgeom, so PyG 2.8.x runs its point-cloud code without pyg-lib's wheels.

PyG 2.8 dropped torch_cluster: ``knn``, ``radius``, ``fps``, ``nearest``,
``voxel_grid``, ``graclus``, ``Node2Vec``, ``dropout_path`` ... call
``torch.ops.pyg.*`` and refuse to run unless ``import pyg_lib`` works.  This
package serves, under pyg-lib's names and schemas:

* ``torch.ops.pyg.{fps, knn, radius, nearest, grid_cluster, graclus_cluster,
  random_walk, neighbor_sample, hetero_neighbor_sample}`` -- defined when this
  package is imported and no real pyg-lib is installed (never twice), on the
  cores of pcgeom's torch_cluster stand-in, with fake kernels for ``torch.compile``;
* :mod:`pyg_lib.ops` and :mod:`pyg_lib.sampler`: pyg-lib's Python functions with
  its argument order, and nothing else, so PyG's import-time probe
  (``hasattr(pyg_lib.ops, ...)``, ``inspect.signature(pyg_lib.sampler.neighbor_sample)``,
  ``hasattr(pyg_lib, 'partition')``, ``torch.classes.pyg.*``) sees exactly what is served.

The rules where pyg-lib's CPU and CUDA kernels disagree or are not
deterministic, and what is deliberately left out, are in ``docs/guides/pyg.md``
("PyG 2.8").  Use it with ``pcgeom compat enable`` (every later process) or
:func:`pcgeom.compat.enable_shims` (this process); a real pyg-lib always wins.
"""

from pcgeom.compat.pyg_lib import ops, sampler  # noqa: F401  (pyg_lib imports both eagerly)
from pcgeom.compat.pyg_lib._ops import register_ops

__version__ = "0.8.0"

__all__ = ["cuda_version", "__version__"]


def cuda_version() -> int:
    """The CUDA version pyg-lib was compiled with: -1, pcgeom's stand-in has no compiled CUDA code.

    Example:
        >>> from pcgeom.compat.pyg_lib import cuda_version
        >>> cuda_version()
        -1
    """
    return -1


register_ops()
