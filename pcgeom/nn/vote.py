"""The classifier's vote: class scores and a confidence from ``(B, k)`` neighbours.

Plain torch on the distances and labels of the neighbours a search found, so it
runs on any device, under ``torch.compile`` and with autograd; the search
(:mod:`pcgeom.nn.search`) and the lookup of the neighbours' labels come first.
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V

#: The vote weightings (see :class:`pcgeom.nn.KNNClassifier`).
WEIGHTS = ("uniform", "distance", "softmax")


def check_neighbors(fn: str, dist2, idx) -> None:
    """``dist2`` and ``idx`` must be same-shaped ``(B, k)`` tensors, ``idx`` of integers."""
    V.check_tensor(fn, "dist2", dist2, 2, "(B, k)")
    V.check_index_tensor(fn, "idx", idx, 2, "(B, k)")
    if idx.shape != dist2.shape:
        raise ValueError(f"{fn}: dist2 and idx must have the same shape (B, k), got {V.shape_str(dist2)} and {V.shape_str(idx)}")


def class_scores(dist2: torch.Tensor, labels: torch.Tensor, num_classes: int, weights: str,
           temperature: float) -> torch.Tensor:
    """``(B, num_classes)`` vote shares summing to 1 per row.

    Args:
        dist2: ``(B, k)`` squared distances of the neighbours.
        labels: ``(B, k)`` int64 their class indices in ``[0, num_classes)``.
        num_classes: C.
        weights: one of :data:`WEIGHTS`.
        temperature: the softmax temperature (squared-distance units).

    Returns:
        float32 scores (float64 for float64 distances); differentiable through
        ``dist2`` for ``"distance"`` and ``"softmax"``.
    """
    B, k = labels.shape
    acc = dist2.dtype if dist2.dtype in (torch.float32, torch.float64) else torch.float32
    d = dist2.to(acc)
    out = torch.zeros((B, num_classes), dtype=acc, device=d.device)
    if weights == "uniform":
        # Integer vote counts, then one division: equal counts give
        # bit-equal scores, so class ties are real ties.
        return out.scatter_add_(1, labels, torch.ones_like(d)) / k
    if weights == "distance":
        zero = d == 0
        inv = torch.rsqrt(torch.where(zero, torch.ones_like(d), d))
        w = torch.where(zero.any(1, keepdim=True), zero.to(acc), inv)
        w = w / w.sum(1, keepdim=True)
    else:
        w = torch.softmax(-d / temperature, dim=1)
    return out.scatter_add(1, labels, w)


def neighbor_confidence(dist2: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """``(B,)`` ``1 - sqrt(d_same / d_other)`` in ``[0, 1]``, not differentiable.

    Args:
        dist2: ``(B, k)`` squared distances of the neighbours, ascending.
        same: ``(B, k)`` bool, whether each neighbour has the predicted label.

    Returns:
        float32 confidences (float64 for float64 distances); 0 where
        ``d_other`` is 0.
    """
    d = dist2.detach()
    if d.dtype not in (torch.float32, torch.float64):
        d = d.float()
    inf = torch.full_like(d, float("inf"))
    d_same = torch.where(same, d, inf).amin(1)
    # No other-class neighbour among the k: the nearest one is at least as
    # far as the k-th neighbour, which gives a lower bound.
    d_other = torch.minimum(torch.where(same, inf, d).amin(1), d[:, -1])
    ratio = (d_same / d_other.clamp_min(torch.finfo(d.dtype).tiny)).clamp(0, 1)
    conf = 1 - ratio.sqrt()
    return torch.where(d_other > 0, conf, torch.zeros_like(conf))
