"""Drop-in for DenseFusion's ``lib/knn`` extension (``KNearestNeighbor``).

For code that keeps its own copies of ``lib/loss.py`` / ``lib/loss_refiner.py``
and only needs the CUDA extension gone::

    from pcgeom.compat.densefusion import KNearestNeighbor
    # was: from lib.knn.__init__ import KNearestNeighbor

Both call styles in the wild work:

* the original instance call ``knn = KNearestNeighbor(1); inds = knn(ref, query)``
  (a legacy autograd Function, an error on PyTorch >= 1.6);
* the static style of the PyTorch-1.6 fork (j96w/DenseFusion PR #170),
  ``inds = KNearestNeighbor.apply(ref, query)`` with k fixed to 1.

Indices are **1-based**, as the original returned them (callers subtract 1).
The search is :func:`pcgeom.knn`: exact, ties to the lower index, any device,
float16/bfloat16/float32/float64, no ``Nr x Nq`` scratch matrix.  There is no
gradient (the original had no backward either).

Prefer :mod:`pcgeom.losses.densefusion`, which replaces the whole loss files.
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.ops import knn

__all__ = ["KNearestNeighbor"]


def _knn_one_based(ref, query, k: int, fn: str) -> torch.Tensor:
    V.check_tensor(fn, "ref", ref, 3, "(B, D, Nr)")
    V.check_tensor(fn, "query", query, 3, "(B, D, Nq)")
    if ref.shape[0] != query.shape[0] or ref.shape[1] != query.shape[1]:
        raise ValueError(f"{fn}: ref (B, D, Nr) and query (B, D, Nq) must share B and D, "
                         f"got {V.shape_str(ref)} and {V.shape_str(query)}")
    if ref.device != query.device:
        raise ValueError(f"{fn}: ref and query must be on the same device, got {ref.device} and {query.device}")
    if k > ref.shape[2]:
        raise ValueError(f"{fn}: k={k} exceeds the number of reference points Nr={ref.shape[2]}")
    # The original cast both inputs to float32; keep the precision the caller has
    # and only promote when the two differ or are not floating.
    dtype = torch.promote_types(ref.dtype, query.dtype)
    if dtype not in V.FLOAT_DTYPES:
        dtype = torch.float32
    with torch.no_grad():
        r = ref.detach().to(dtype).transpose(1, 2)
        q = query.detach().to(dtype).transpose(1, 2)
        idx = knn(q, r, k).idx                        # (B, Nq, k), 0-based
    return (idx + 1).transpose(1, 2).contiguous()     # (B, k, Nq), 1-based


class _Apply:
    """``KNearestNeighbor.apply``: k=1 on the class (PR #170 style), the instance's k on an instance."""

    def __get__(self, obj, objtype=None):
        k = 1 if obj is None else obj.k

        def apply(ref, query):
            return _knn_one_based(ref, query, k, "KNearestNeighbor.apply")

        return apply


class KNearestNeighbor:
    """DenseFusion's ``KNearestNeighbor(k)``: the k nearest ``ref`` points of each query point.

    Args:
        k: number of neighbours (DenseFusion uses 1).

    Call ``KNearestNeighbor(k)(ref, query)`` or ``KNearestNeighbor.apply(ref, query)`` (k=1):

    * ``ref``: ``(B, D, Nr)`` reference points, channels first.
    * ``query``: ``(B, D, Nq)`` query points, channels first, same B and D.

    Returns:
        ``(B, k, Nq)`` int64 **1-based** indices into ``ref[b]`` (``ref[b, :, i - 1]``),
        nearest first, ties to the lower index; on the inputs' device; no gradient.

    Raises:
        ValueError: ``ref`` (B, D, Nr) and ``query`` (B, D, Nq) not 3-D, not sharing B and D, on different devices,
            or ``k`` larger than Nr.
        TypeError: ``ref`` or ``query`` not a torch.Tensor.

    Example:
        >>> import torch
        >>> from pcgeom.compat.densefusion import KNearestNeighbor
        >>> ref = torch.tensor([[[0.0, 1.0, 5.0]]])        # (1, 1, 3): points 0, 1, 5 on a line
        >>> query = torch.tensor([[[0.9, 4.0]]])          # (1, 1, 2)
        >>> KNearestNeighbor(1)(ref, query).tolist()
        [[[2, 3]]]
        >>> KNearestNeighbor.apply(ref, query).tolist()
        [[[2, 3]]]
    """

    apply = _Apply()

    def __init__(self, k=1):
        self.k = V.check_int("KNearestNeighbor", "k", k, minimum=1)

    def __call__(self, ref, query) -> torch.Tensor:
        return _knn_one_based(ref, query, self.k, "KNearestNeighbor")

    forward = __call__

    def __repr__(self) -> str:
        return f"KNearestNeighbor(k={self.k})"
