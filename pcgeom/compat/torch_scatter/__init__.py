"""``torch_scatter`` served by pcgeom: every public name of torch_scatter 2.1.2
(``scatter`` and ``scatter_sum/add/mean/min/max/mul``, ``segment_csr`` /
``segment_coo`` and their ``segment_<reduce>_csr/coo`` forms, ``gather_csr`` /
``gather_coo``, ``scatter_std``, ``scatter_logsumexp``, ``scatter_softmax``,
``scatter_log_softmax``, ``__version__``) with the original signatures,
broadcasting, ``out=`` / ``dim_size=`` rules, ``(values, arg)`` outputs and
gradients, so PyG / Pointcept (PTv2, PTv3) code that does ``import
torch_scatter`` runs unmodified and without a compiled extension.

The functions are TorchScript-scriptable like the originals
(``torch.jit.script(scatter_max)`` works; the reduction itself runs in Python
through ``torch.jit.ignore``, so scripted code calling them cannot be saved).

Every reduction goes through :mod:`pcgeom.segment` (stable sort by index, then
one sequential pass per output element in index order; no atomics): the
values **and gradients** are the same on every run.  Where torch_scatter differs:

* ``scatter`` / ``segment_coo`` sums, means and products use atomics on CUDA
  (the original documents them as non-deterministic); pcgeom adds each slot's
  elements in their order along ``dim`` -- the order of torch_scatter's CPU
  kernel -- with float16/bfloat16 accumulated in float32 and rounded once
  (the original's ``scatter`` accumulates them in their own precision).
* ``min`` / ``max``: ties give the **lowest** position (torch_scatter's CPU
  rule; its CUDA ``arg`` is whichever thread won), and the gradient flows to
  that element only.  NaN propagates (torch's ``minimum`` / ``maximum``);
  ``+-inf`` are values like any other (the original's "slot still holds the
  dtype's limit -> 0" fill also hit genuine ``+-inf`` / ``finfo.max``).
  With ``out=``, ``arg`` is set only where a ``src`` element is strictly
  better than ``out``'s old value, else ``src.size(dim)`` (the original CPU
  ``segment_coo`` could leave another slot's position there).
* ``segment_csr`` / ``gather_csr`` / ``segment_coo`` / ``gather_coo`` check
  their index arguments (sorted pointers within range, indices in range) and
  raise :class:`ValueError` naming the argument, where the original reads out
  of bounds; ``gather_csr`` fills output rows outside ``indptr``'s range with
  0 instead of leaving them uninitialised.  ``segment_coo`` with an unsorted
  ``index`` returns the per-index reduction (the original's is undefined).
* The ``torch.ops.torch_scatter.*`` operators are not registered (no
  compiled library); call the Python functions.

Usage::

    import pcgeom.compat
    pcgeom.compat.enable_shims()          # or, once per environment: pcgeom compat enable
    from torch_scatter import scatter, segment_csr
"""

from pcgeom.compat.torch_scatter.composite import scatter_log_softmax, scatter_logsumexp, scatter_softmax, scatter_std
from pcgeom.compat.torch_scatter.scatter import (
    scatter,
    scatter_add,
    scatter_max,
    scatter_mean,
    scatter_min,
    scatter_mul,
    scatter_sum,
)
from pcgeom.compat.torch_scatter.segment_coo import (
    gather_coo,
    segment_add_coo,
    segment_coo,
    segment_max_coo,
    segment_mean_coo,
    segment_min_coo,
    segment_sum_coo,
)
from pcgeom.compat.torch_scatter.segment_csr import (
    gather_csr,
    segment_add_csr,
    segment_csr,
    segment_max_csr,
    segment_mean_csr,
    segment_min_csr,
    segment_sum_csr,
)

__version__ = "2.1.2"

__all__ = [
    "scatter_sum", "scatter_add", "scatter_mul", "scatter_mean", "scatter_min", "scatter_max", "scatter",
    "segment_sum_csr", "segment_add_csr", "segment_mean_csr", "segment_min_csr", "segment_max_csr", "segment_csr",
    "gather_csr",
    "segment_sum_coo", "segment_add_coo", "segment_mean_coo", "segment_min_coo", "segment_max_coo", "segment_coo",
    "gather_coo",
    "scatter_std", "scatter_logsumexp", "scatter_softmax", "scatter_log_softmax",
    "__version__",
]
