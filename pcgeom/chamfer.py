"""``pcgeom.chamfer_distance``: Chamfer distance between batched, ragged point clouds."""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom._export_guard import exporting, require
from pcgeom._rounding import ordered_sum
from pcgeom.ops import knn

_KINDS = ("l2", "l1")
_REDUCTIONS = ("mean", "sum", "none")






def _directed(query, points, query_lengths, points_lengths, valid, kind):
    """Per-cloud mean over valid query points of the (squared) distance to the nearest point (sums in index order)."""
    acc = V.acc_dtype(query.dtype)
    # float16/bfloat16 search in float32 (the neighbours are the same: knn ranks in float32 anyway) so that the
    # squared distances are not rounded to the half dtype, where they underflow to 0 or overflow to inf while
    # the distances themselves fit (1e-4 or 3e4 in float16): kind="l1" would return 0 or inf.
    d2 = knn(query.to(acc), points.to(acc), 1, query_lengths=query_lengths, points_lengths=points_lengths).dist2[..., 0]
    d = V.safe_sqrt(d2) if kind == "l1" else d2
    if valid is None:
        return (ordered_sum(d) / d.shape[1]).to(acc)
    # Padded rows hold +inf: select, never multiply (inf * 0 = NaN).
    d = torch.where(valid, d, torch.zeros_like(d))
    return (ordered_sum(d) / valid.sum(dim=1).to(torch.float64)).to(acc)


def chamfer_distance(x, y, *, x_lengths=None, y_lengths=None, kind="l2", reduction="mean"):
    """Chamfer distance between two batches of point clouds, exactly and memory-bounded.

    For clouds ``X = x[b, :x_lengths[b]]`` and ``Y = y[b, :y_lengths[b]]``:

    * ``kind="l2"`` (Point-MAE's ``ChamferDistanceL2``):
      ``mean_{p in X} min_{q in Y} |p - q|^2  +  mean_{q in Y} min_{p in X} |p - q|^2``;
    * ``kind="l1"`` (PoinTr's ``ChamferDistanceL1``):
      ``(mean_{p in X} min_{q in Y} |p - q|  +  mean_{q in Y} min_{p in X} |p - q|) / 2``,
      with Euclidean (not squared) distances.

    Nearest neighbours come from :func:`pcgeom.knn` with ``k=1``, so no
    ``N x M`` distance matrix is ever built.

    Args:
        x: ``(B, N, D)`` float16/bfloat16/float32/float64 tensor, N >= 1.
        y: ``(B, M, D)`` tensor of the same B, D, dtype and device, M >= 1.
        x_lengths: optional int ``(B,)``; only ``x[b, :x_lengths[b]]`` counts.
        y_lengths: optional int ``(B,)``; only ``y[b, :y_lengths[b]]`` counts.
            Every cloud needs at least one point (checked in eager mode and, at
            run time, in an exported ONNX file; under ``torch.compile`` an
            empty cloud gives NaN or inf).
        kind: ``"l2"`` (default) or ``"l1"``, as above.
        reduction: ``"mean"`` (default): the average of the per-cloud values,
            which equals Point-MAE's ``mean(dist1) + mean(dist2)`` for
            equal-sized clouds; ``"sum"``: their sum; ``"none"``: the ``(B,)``
            per-cloud values.

    Returns:
        A 0-dim tensor (or ``(B,)`` for ``reduction="none"``) in the dtype of
        ``x``.  Squared distances are computed in float32 (float64 for
        float64 input); means and sums add them in float64, in index order,
        and round once (an exported model returns the same bits).
        Differentiable with respect to ``x`` and ``y``, to any order
        (``create_graph=True`` gradient penalties work); for ``kind="l1"`` the
        gradient of a point lying exactly on its nearest neighbour is 0
        (not the NaN that ``sqrt`` at 0 produces in the original extensions).

    Raises:
        ValueError: unknown ``kind`` or ``reduction``; ``x`` / ``y`` of different B or D; a cloud with no point
            (``x_lengths[b] == 0``); lengths of the wrong shape or outside ``[0, N]``.
        TypeError: ``x`` / ``y`` not floating tensors, of different dtypes or devices; lengths not integer tensors.

    Example:
        >>> import torch, pcgeom
        >>> x = torch.tensor([[[0.0, 0, 0], [1, 0, 0]]])
        >>> y = torch.tensor([[[0.0, 0, 0], [0, 2, 0], [1, 1, 0]]])
        >>> round(pcgeom.chamfer_distance(x, y).item(), 4)  # (0 + 1) / 2 + (0 + 4 + 1) / 3
        2.1667
        >>> pcgeom.chamfer_distance(x, y, kind="l1").item()  # ((0 + 1) / 2 + (0 + 2 + 1) / 3) / 2
        0.75
    """
    fn = "chamfer_distance"
    V.check_points(fn, "x", x, "(B, N, D)")
    V.check_points(fn, "y", y, "(B, M, D)")
    V.check_pair(fn, "x", x, "y", y)
    if kind not in _KINDS:
        raise ValueError(f"{fn}: kind must be 'l2' or 'l1', got {kind!r}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{fn}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    B, N, _ = x.shape
    M = y.shape[1]
    if N == 0 or M == 0:
        raise ValueError(
            f"{fn}: both clouds need at least one point, got x of shape {V.shape_str(x)} and y of shape {V.shape_str(y)}"
        )
    xl = None if x_lengths is None else V.lengths_arg(fn, "x_lengths", x_lengths, B, N, x.device)
    yl = None if y_lengths is None else V.lengths_arg(fn, "y_lengths", y_lengths, B, M, x.device)
    if not V.compiling() and B > 0:
        for name, lens in (("x_lengths", xl), ("y_lengths", yl)):
            if lens is not None and bool((lens == 0).any()):
                b = int((lens == 0).nonzero()[0, 0])
                raise ValueError(f"{fn}: {name}[{b}]=0, but every cloud needs at least one point")
    if exporting():  # the empty-cloud checks above, kept in the exported graph for every later size
        ok = [torch.scalar_tensor(torch.sym_min(N, M), dtype=torch.int64, device=x.device).reshape(1) >= 1]
        ok += [lens >= 1 for lens in (xl, yl) if lens is not None]
        x = require(x, torch.cat(ok), f"{fn}: every cloud needs at least one point (N >= 1, M >= 1, lengths >= 1)")
    x_valid = None if xl is None else torch.arange(N, device=x.device) < xl[:, None]
    y_valid = None if yl is None else torch.arange(M, device=x.device) < yl[:, None]
    d_xy = _directed(x, y, xl, yl, x_valid, kind)
    d_yx = _directed(y, x, yl, xl, y_valid, kind)
    per_cloud = d_xy + d_yx
    if kind == "l1":
        per_cloud = per_cloud / 2
    # Means and sums in index order in float64 (_rounding.ordered_sum), rounded once: an exported model sums in the
    # same order, so it returns these bits; B = 0 gives the mean of nothing, NaN, there too.
    if reduction == "mean":
        out = (ordered_sum(per_cloud) / B).to(per_cloud.dtype)
    elif reduction == "sum":
        out = ordered_sum(per_cloud).to(per_cloud.dtype)
    else:
        out = per_cloud
    return out.to(x.dtype)


__all__ = ["chamfer_distance"]
