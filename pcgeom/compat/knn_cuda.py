"""Drop-in replacement for KNN_CUDA's ``KNN`` module (``from knn_cuda import KNN``).

Change the import to ``from pcgeom.compat.knn_cuda import KNN`` and nothing
else: same constructor, same ``forward(ref, query)`` argument order, same
layouts, same **Euclidean** (not squared) distances, same ascending order with
ties to the lower index.  Unlike the original it needs no JIT build, runs on
CPU too, never materialises the ``Nr x Nq`` distance matrix, and checks
``k <= Nr`` instead of reading out of bounds.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from pcgeom import _validation as V
from pcgeom.ops import knn
from pcgeom._rounding import sqrt_once

__all__ = ["KNN"]


class KNN(nn.Module):
    """k nearest neighbours of ``query`` points among ``ref`` points, KNN_CUDA style.

    Args:
        k: number of neighbours, an int >= 1 (at most the number of ref points).
        transpose_mode: ``False`` (KNN_CUDA's default): channels-first inputs
            ``ref (B, D, Nr)``, ``query (B, D, Nq)`` and outputs ``(B, k, Nq)``.
            ``True``: ``ref (B, Nr, D)``, ``query (B, Nq, D)`` and outputs
            ``(B, Nq, k)`` (what Point-MAE uses).

    ``forward(ref, query)`` returns ``(dist, idx)``:

    * ``dist``: float32 **Euclidean** distances, ascending along the k axis
      (the correctly rounded root of the float32 squared distance);
    * ``idx``: int64 0-based indices into the ref points, ties to the lower index.

    Like the original, inputs are cast to float32 and no gradient flows (the
    forward runs under ``torch.no_grad()``); use :func:`pcgeom.knn` for
    differentiable squared distances in any dtype.

    Raises:
        ValueError: (from ``forward``) ``ref`` / ``query`` not 3-D in the layout of ``transpose_mode``, not sharing
            B and D, on different devices, or ``k`` larger than the number of reference points.
        TypeError: (from ``forward``) inputs that are not floating tensors.

    Example:
        >>> import torch
        >>> from pcgeom.compat.knn_cuda import KNN
        >>> ref = torch.tensor([[[0.0, 0, 0], [3, 0, 0], [0, 4, 0]]])
        >>> dist, idx = KNN(k=2, transpose_mode=True)(ref, ref[:, :1])
        >>> dist.tolist(), idx.tolist()
        ([[[0.0, 3.0]]], [[[0, 1]]])
    """

    def __init__(self, k: int, transpose_mode: bool = False):
        super().__init__()
        self.k = V.check_int("KNN", "k", k, minimum=1)
        self.transpose_mode = bool(transpose_mode)

    def extra_repr(self) -> str:
        return f"k={self.k}, transpose_mode={self.transpose_mode}"

    def forward(self, ref: torch.Tensor, query: torch.Tensor):
        fn = "KNN"
        layout_r, layout_q = ("(B, Nr, D)", "(B, Nq, D)") if self.transpose_mode else ("(B, D, Nr)", "(B, D, Nq)")
        V.check_points(fn, "ref", ref, layout_r)
        V.check_points(fn, "query", query, layout_q)
        with torch.no_grad():
            r, q = ref.float(), query.float()
            if not self.transpose_mode:
                r = rearrange(r, "b d n -> b n d")
                q = rearrange(q, "b d n -> b n d")
            mode = f"transpose_mode={self.transpose_mode}"
            if r.shape[0] != q.shape[0] or r.shape[2] != q.shape[2]:
                raise ValueError(
                    f"{fn}: ref {V.shape_str(ref)} and query {V.shape_str(query)} must share B and D "
                    f"(layouts {layout_r} and {layout_q} with {mode})"
                )
            if ref.device != query.device:
                raise ValueError(f"{fn}: ref and query must be on the same device, got {ref.device} and {query.device}")
            if self.k > r.shape[1]:
                raise ValueError(
                    f"{fn}: k={self.k} exceeds the number of ref points Nr={r.shape[1]} "
                    f"(ref shape {V.shape_str(ref)}, layout {layout_r} with {mode})"
                )
            dist2, idx = knn(q, r, self.k)
            dist = sqrt_once(dist2, torch.float32)  # correctly rounded (torch's CPU sqrt can be one ulp off)
            if not self.transpose_mode:
                dist = rearrange(dist, "b n k -> b k n")
                idx = rearrange(idx, "b n k -> b k n")
        return dist, idx
