"""6D pose metrics: ADD, ADD-S and the summaries pose papers report.

* :func:`add` -- ADD (Hinterstoisser et al., ACCV 2012): mean distance between
  the model points under the predicted and the ground-truth pose.
* :func:`add_s` -- ADD-S ("ADI"): for each model point under the ground-truth
  pose, the distance to the **nearest** model point under the predicted pose,
  averaged.  This is the definition of the YCB-Video toolbox (``adi.m``) and of
  the BOP toolkit; nearest points come from :func:`pcgeom.knn` (exact, memory
  ``O(Nm)``).
* :func:`add_or_add_s` -- "ADD(-S)": ADD for ordinary objects, ADD-S for
  symmetric ones (the LineMOD protocol).
* :func:`add_accuracy` -- the fraction of poses with ADD(-S) **below** 10% of
  the object diameter (LineMOD), with :func:`object_diameter`;
  :func:`accuracy` -- the fraction below a fixed threshold (e.g. ADD-S < 2 cm).
* :func:`auc` / :func:`accuracy_curve` -- the area under the accuracy-threshold
  curve up to 0.1 m, computed exactly as the YCB-Video toolbox does (see
  :func:`auc` for the definition).

Poses map object coordinates to camera coordinates: ``x_cam = R @ x_obj + t``.
All distances are in the unit of the inputs (meters for the 0.1 m defaults).
"""

from __future__ import annotations

import numbers

import torch

from pcgeom import _validation as V
from pcgeom.ops import knn, knn_gather

__all__ = [
    "accuracy",
    "accuracy_curve",
    "add",
    "add_accuracy",
    "add_or_add_s",
    "add_s",
    "auc",
    "object_diameter",
]


# --------------------------------------------------------------------------- #
# input handling
# --------------------------------------------------------------------------- #


def _as_float_tensor(fn: str, name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    return t


def _poses_and_model(fn, pred_R, pred_t, gt_R, gt_t, model_points, model_lengths):
    """Validates and batches the inputs; returns ``(pR, pt, gR, gt, model, lengths, unbatched)``."""
    for name, t in (("pred_R", pred_R), ("pred_t", pred_t), ("gt_R", gt_R), ("gt_t", gt_t),
                    ("model_points", model_points)):
        _as_float_tensor(fn, name, t)
    unbatched = pred_R.dim() == 2
    if unbatched:
        layouts = {"pred_R": (pred_R, 2, (3, 3), "(3, 3)"), "pred_t": (pred_t, 1, (3,), "(3,)"),
                   "gt_R": (gt_R, 2, (3, 3), "(3, 3)"), "gt_t": (gt_t, 1, (3,), "(3,)")}
    else:
        B = int(pred_R.shape[0]) if pred_R.dim() == 3 else None
        layouts = {"pred_R": (pred_R, 3, (B, 3, 3), "(B, 3, 3)"), "pred_t": (pred_t, 2, (B, 3), "(B, 3)"),
                   "gt_R": (gt_R, 3, (B, 3, 3), "(B, 3, 3)"), "gt_t": (gt_t, 2, (B, 3), "(B, 3)")}
    for name, (t, ndim, sizes, layout) in layouts.items():
        if t.dim() != ndim or tuple(int(s) for s in t.shape) != sizes:
            raise ValueError(f"{fn}: {name} must have shape {layout}"
                             + (f" with B={sizes[0]}" if not unbatched and name != "pred_R" else "")
                             + f", got {V.shape_str(t)}")
    if unbatched:
        pred_R, pred_t, gt_R, gt_t = pred_R[None], pred_t[None], gt_R[None], gt_t[None]
    B = int(pred_R.shape[0])
    ref = pred_R
    for name, t in (("pred_t", pred_t), ("gt_R", gt_R), ("gt_t", gt_t), ("model_points", model_points)):
        if t.dtype != ref.dtype:
            raise TypeError(f"{fn}: {name} must have the dtype of pred_R ({ref.dtype}), got {t.dtype}")
        if t.device != ref.device:
            raise ValueError(f"{fn}: {name} must be on the device of pred_R ({ref.device}), got {t.device}")
    if model_points.dim() == 2 and model_points.shape[1] == 3:
        model = model_points[None].expand(B, -1, -1)
    elif model_points.dim() == 3 and model_points.shape[0] == B and model_points.shape[2] == 3:
        model = model_points
    else:
        raise ValueError(f"{fn}: model_points must have shape (Nm, 3) or (B, Nm, 3) with B={B}, "
                         f"got {V.shape_str(model_points)}")
    if model.shape[1] == 0:
        raise ValueError(f"{fn}: model_points must hold at least one point, got shape {V.shape_str(model_points)}")
    lengths = None
    if model_lengths is not None:
        lengths = V.lengths_arg(fn, "model_lengths", model_lengths, B, int(model.shape[1]), model.device)
        if not V.compiling() and B > 0 and int(lengths.min()) < 1:
            raise ValueError(f"{fn}: model_lengths must be >= 1, got {lengths.tolist()}")
    return pred_R, pred_t, gt_R, gt_t, model, lengths, unbatched


def _transform(R: torch.Tensor, t: torch.Tensor, pts: torch.Tensor) -> torch.Tensor:
    return torch.matmul(pts, R.transpose(-1, -2)) + t[:, None, :]


def _masked_mean(d: torch.Tensor, lengths) -> torch.Tensor:
    if lengths is None:
        return d.mean(dim=-1)
    valid = torch.arange(d.shape[-1], device=d.device)[None, :] < lengths[:, None]
    return torch.where(valid, d, torch.zeros_like(d)).sum(-1) / lengths.to(d.dtype)


# --------------------------------------------------------------------------- #
# per-pose errors
# --------------------------------------------------------------------------- #


def add(pred_R, pred_t, gt_R, gt_t, model_points, *, model_lengths=None) -> torch.Tensor:
    """ADD: mean distance between corresponding model points under two poses.

    ``ADD = mean_j || (pred_R m_j + pred_t) - (gt_R m_j + gt_t) ||_2``.

    Args:
        pred_R: ``(B, 3, 3)`` predicted rotations (or ``(3, 3)`` for one pose).
        pred_t: ``(B, 3)`` predicted translations (or ``(3,)``).
        gt_R: ``(B, 3, 3)`` ground-truth rotations (or ``(3, 3)``).
        gt_t: ``(B, 3)`` ground-truth translations (or ``(3,)``).
        model_points: ``(Nm, 3)`` one model shared by the batch, or
            ``(B, Nm, 3)`` one per pose.
        model_lengths: optional int ``(B,)``: only ``model_points[b, :model_lengths[b]]``
            count (padded batches of different objects); each must be >= 1.

    All tensors share one floating dtype and device.

    Returns:
        ``(B,)`` ADD per pose (0-dim for unbatched input), in the inputs' unit
        and dtype; differentiable w.r.t. the poses.

    Raises:
        ValueError: rotations not ``(B, 3, 3)``, translations not ``(B, 3)``, model points neither ``(Nm, 3)`` nor
            ``(B, Nm, 3)`` with ``Nm >= 1``, inputs on different devices, bad ``model_lengths``.
        TypeError: inputs that are not floating tensors or differ in dtype.

    Example:
        >>> import torch
        >>> from pcgeom.metrics import add
        >>> model = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0]])
        >>> I = torch.eye(3)
        >>> flip = torch.diag(torch.tensor([-1.0, -1.0, 1.0]))  # 180 deg about z
        >>> add(flip, torch.zeros(3), I, torch.zeros(3), model).item()
        2.0
    """
    pR, pt, gR, gt, model, lengths, unbatched = _poses_and_model(
        "add", pred_R, pred_t, gt_R, gt_t, model_points, model_lengths)
    d = torch.norm(_transform(pR, pt, model) - _transform(gR, gt, model), dim=-1)
    out = _masked_mean(d, lengths)
    return out[0] if unbatched else out


def add_s(pred_R, pred_t, gt_R, gt_t, model_points, *, model_lengths=None) -> torch.Tensor:
    """ADD-S (ADI): mean distance from each ground-truth-posed model point to the nearest predicted one.

    ``ADD-S = mean_j min_k || (gt_R m_j + gt_t) - (pred_R m_k + pred_t) ||_2``:
    the YCB-Video toolbox's ``adi`` and the BOP toolkit's ``adi`` (nearest
    neighbours searched from the ground-truth points into the predicted ones).
    Note that DenseFusion's own evaluation scripts search the other way (from
    predicted into ground-truth points); the two differ slightly for
    non-uniformly sampled models.  The search is :func:`pcgeom.knn`.

    Args: as :func:`add`.

    Returns:
        ``(B,)`` ADD-S per pose (0-dim for unbatched input); differentiable
        w.r.t. the poses (the nearest-point choice itself carries no gradient).

    Raises: as :func:`add` (the same checks).

    Example:
        >>> import torch
        >>> from pcgeom.metrics import add_s
        >>> model = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0]])
        >>> flip = torch.diag(torch.tensor([-1.0, -1.0, 1.0]))  # a symmetry of this model
        >>> add_s(flip, torch.zeros(3), torch.eye(3), torch.zeros(3), model).item()
        0.0
    """
    pR, pt, gR, gt, model, lengths, unbatched = _poses_and_model(
        "add_s", pred_R, pred_t, gt_R, gt_t, model_points, model_lengths)
    est = _transform(pR, pt, model)
    ref = _transform(gR, gt, model)
    with torch.no_grad():
        idx = knn(ref.detach(), est.detach(), 1, query_lengths=lengths, points_lengths=lengths).idx
    # Distances recomputed from the gathered points (not sqrt(dist2)) so the
    # gradient stays finite where a distance is exactly zero.
    nearest = knn_gather(est, idx)[:, :, 0]
    d = torch.norm(ref - nearest, dim=-1)
    out = _masked_mean(d, lengths)
    return out[0] if unbatched else out


def add_or_add_s(pred_R, pred_t, gt_R, gt_t, model_points, symmetric, *, model_lengths=None) -> torch.Tensor:
    """ADD(-S): :func:`add_s` where ``symmetric``, :func:`add` elsewhere (the LineMOD protocol).

    Args:
        pred_R: ``(B, 3, 3)`` predicted rotations, as :func:`add`.
        pred_t: ``(B, 3)`` predicted translations.
        gt_R: ``(B, 3, 3)`` ground-truth rotations.
        gt_t: ``(B, 3)`` ground-truth translations.
        model_points: ``(Nm, 3)`` shared or ``(B, Nm, 3)`` per-pose model points.
        symmetric: a bool for every pose, or a ``(B,)`` bool tensor.
        model_lengths: optional int ``(B,)``, as :func:`add`.

    Returns:
        ``(B,)`` errors (0-dim for unbatched input).

    Raises:
        ValueError: rotations not ``(B, 3, 3)``, translations not ``(B, 3)``, model points neither ``(Nm, 3)`` nor
            ``(B, Nm, 3)`` with ``Nm >= 1``, inputs on different devices, bad ``model_lengths`` (or ``symmetric`` of
            the wrong shape).
        TypeError: inputs that are not floating tensors or differ in dtype (or ``symmetric`` not a bool / bool
            tensor).

    Example:
        >>> import torch
        >>> from pcgeom.metrics import add_or_add_s
        >>> model = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0]])
        >>> flip = torch.diag(torch.tensor([-1.0, -1.0, 1.0])).expand(2, 3, 3)
        >>> eye, zero = torch.eye(3).expand(2, 3, 3), torch.zeros(2, 3)
        >>> add_or_add_s(flip, zero, eye, zero, model, torch.tensor([False, True])).tolist()
        [2.0, 0.0]
    """
    fn = "add_or_add_s"
    if isinstance(symmetric, bool):
        f = add_s if symmetric else add
        return f(pred_R, pred_t, gt_R, gt_t, model_points, model_lengths=model_lengths)
    if not isinstance(symmetric, torch.Tensor) or symmetric.dtype != torch.bool:
        raise TypeError(f"{fn}: symmetric must be a bool or a bool tensor of shape (B,), got "
                        f"{symmetric.dtype if isinstance(symmetric, torch.Tensor) else type(symmetric).__name__}")
    d_add = add(pred_R, pred_t, gt_R, gt_t, model_points, model_lengths=model_lengths)
    if tuple(symmetric.shape) != tuple(d_add.shape):
        raise ValueError(f"{fn}: symmetric must have shape {tuple(d_add.shape)} (one flag per pose), "
                         f"got {V.shape_str(symmetric)}")
    if not bool(symmetric.any()):
        return d_add
    d_adds = add_s(pred_R, pred_t, gt_R, gt_t, model_points, model_lengths=model_lengths)
    return torch.where(symmetric.to(d_add.device), d_adds, d_add)


def object_diameter(model_points, *, model_lengths=None) -> torch.Tensor:
    """Object diameter: the largest distance between two model points.

    Exact (all pairs), in chunks so memory stays around 64 MB whatever Nm is;
    time is ``O(Nm^2)`` (about a second for 30k points).  LineMOD ships its
    diameters in ``models_info.yml``; use those when reproducing its numbers.

    Args:
        model_points: ``(Nm, 3)`` or ``(B, Nm, 3)`` floating tensor.
        model_lengths: optional int ``(B,)`` valid point counts (batched input only).

    Returns:
        0-dim (for ``(Nm, 3)``) or ``(B,)`` tensor in the input dtype; no gradient.

    Raises:
        ValueError: ``model_points`` neither ``(Nm, 3)`` nor ``(B, Nm, 3)`` with ``Nm >= 1``, or ``model_lengths``
            with unbatched points or values < 1.
        TypeError: ``model_points`` not a floating tensor.

    Example:
        >>> import torch
        >>> from pcgeom.metrics import object_diameter
        >>> object_diameter(torch.tensor([[0.0, 0, 0], [3, 4, 0], [1, 1, 0]])).item()
        5.0
    """
    fn = "object_diameter"
    _as_float_tensor(fn, "model_points", model_points)
    single = model_points.dim() == 2
    pts = model_points[None] if single else model_points
    if pts.dim() != 3 or pts.shape[2] != 3 or pts.shape[1] == 0:
        raise ValueError(f"{fn}: model_points must have shape (Nm, 3) or (B, Nm, 3) with Nm >= 1, "
                         f"got {V.shape_str(model_points)}")
    if single and model_lengths is not None:
        raise ValueError(f"{fn}: model_lengths needs batched model_points (B, Nm, 3)")
    B, N = int(pts.shape[0]), int(pts.shape[1])
    lengths = V.lengths_arg(fn, "model_lengths", model_lengths, B, N, pts.device).tolist()
    acc = torch.float64 if pts.dtype == torch.float64 else torch.float32
    out = torch.zeros(B, dtype=acc, device=pts.device)
    with torch.no_grad():
        for b in range(B):
            p = pts[b, : lengths[b]].to(acc)
            n = p.shape[0]
            chunk = max(1, (8 * 2**20) // max(1, n))
            best = torch.zeros((), dtype=acc, device=pts.device)
            for s in range(0, n, chunk):
                # exact differences, not the |a|^2+|b|^2-2ab expansion
                d = torch.cdist(p[s : s + chunk], p, compute_mode="donot_use_mm_for_euclid_dist")
                best = torch.maximum(best, d.max())
            out[b] = best
    out = out.to(pts.dtype)
    return out[0] if single else out


# --------------------------------------------------------------------------- #
# summaries over a dataset
# --------------------------------------------------------------------------- #


def _distances(fn: str, distances) -> torch.Tensor:
    if not isinstance(distances, torch.Tensor):
        try:
            distances = torch.as_tensor(distances, dtype=torch.float64)
        except Exception as exc:
            raise TypeError(f"{fn}: distances must be a 1-D tensor of pose errors, got {type(distances).__name__}") from exc
    if distances.dim() != 1:
        raise ValueError(f"{fn}: distances must have shape (N,), got {V.shape_str(distances)}")
    if not distances.is_floating_point():
        distances = distances.to(torch.float64)
    if distances.numel() == 0:
        raise ValueError(f"{fn}: distances must hold at least one pose error, got an empty tensor")
    d = distances.detach().to(torch.float64)
    if bool((d < 0).any()):
        raise ValueError(f"{fn}: distances must be >= 0, got min {float(d[~d.isnan()].min())}")
    return d


def accuracy(distances, threshold) -> torch.Tensor:
    """Fraction of poses whose error is strictly below ``threshold`` (e.g. ADD-S < 2 cm).

    Args:
        distances: ``(N,)`` pose errors (from :func:`add`, :func:`add_s`, ...);
            NaN or inf count as failures.
        threshold: a number, or an ``(N,)`` tensor of per-pose thresholds.

    Returns:
        0-dim float64 tensor in ``[0, 1]``.

    Raises:
        ValueError: ``distances`` not a non-empty 1-D tensor of errors >= 0, or a ``threshold`` tensor
            that is neither 0-dim nor of shape ``(N,)``.
        TypeError: ``distances`` not a sequence or tensor, or ``threshold`` not a number or tensor.

    Example:
        >>> import torch
        >>> from pcgeom.metrics import accuracy
        >>> accuracy(torch.tensor([0.01, 0.02, 0.03, float("nan")]), 0.025).item()
        0.5
    """
    fn = "accuracy"
    d = _distances(fn, distances)
    if isinstance(threshold, torch.Tensor):
        if threshold.dim() not in (0, 1) or (threshold.dim() == 1 and threshold.shape[0] != d.shape[0]):
            raise ValueError(f"{fn}: threshold must be a number or have shape ({d.shape[0]},), "
                             f"got {V.shape_str(threshold)}")
        thr = threshold.detach().to(device=d.device, dtype=torch.float64)
    elif isinstance(threshold, numbers.Real) and not isinstance(threshold, bool):
        thr = torch.tensor(float(threshold), dtype=torch.float64, device=d.device)
    else:
        raise TypeError(f"{fn}: threshold must be a number or a tensor, got {type(threshold).__name__}")
    return (d < thr).to(torch.float64).mean()


def add_accuracy(distances, diameter, fraction: float = 0.1) -> torch.Tensor:
    """Fraction of poses with ADD(-S) strictly below ``fraction`` x object diameter.

    The LineMOD protocol (Hinterstoisser et al. 2012; DenseFusion's
    ``eval_linemod.py`` tests ``dis < 0.1 * diameter``).

    Args:
        distances: ``(N,)`` ADD(-S) errors, e.g. from :func:`add_or_add_s`.
        diameter: the object diameter (a number), or ``(N,)`` per-pose diameters
            when poses of several objects are pooled (see :func:`object_diameter`).
        fraction: share of the diameter, 0.1 by default.

    Returns:
        0-dim float64 tensor in ``[0, 1]``.

    Raises:
        ValueError: ``distances`` not a non-empty 1-D tensor of errors >= 0, ``fraction < 0``, or a
            ``diameter`` tensor that is neither 0-dim nor of shape ``(N,)`` (named ``threshold`` in the message,
            as :func:`accuracy` checks it).
        TypeError: ``distances`` not a sequence or tensor, ``diameter`` not a number or tensor, or ``fraction``
            not a number.

    Example:
        >>> import torch
        >>> from pcgeom.metrics import add_accuracy
        >>> add_accuracy(torch.tensor([0.004, 0.012]), diameter=0.1).item()
        0.5
    """
    fn = "add_accuracy"
    fraction = V.check_float(fn, "fraction", fraction, minimum=0.0)
    if isinstance(diameter, torch.Tensor):
        thr = diameter.detach().to(torch.float64) * fraction
    elif isinstance(diameter, numbers.Real) and not isinstance(diameter, bool):
        thr = float(diameter) * fraction
    else:
        raise TypeError(f"{fn}: diameter must be a number or a tensor, got {type(diameter).__name__}")
    return accuracy(distances, thr)


def accuracy_curve(distances, max_distance: float = 0.1):
    """The accuracy-threshold curve of the YCB-Video toolbox, as plotted there.

    Errors above ``max_distance`` (and NaN/inf) are failures.  The sorted
    finite errors ``d_1 <= ... <= d_K`` become the thresholds, with accuracy
    ``k / N`` at ``d_k`` (``N`` counts every pose, failures included), framed
    by ``(0, 0)`` and ``(max_distance, K / N)``.

    Args:
        distances: ``(N,)`` pose errors (e.g. ADD-S per pose), in the unit of ``max_distance``.
        max_distance: the largest threshold, 0.1 (m) in the toolbox.

    Returns:
        ``(thresholds (K + 2,), accuracies (K + 2,))`` float64 tensors.

    Raises:
        ValueError: ``distances`` not a non-empty 1-D tensor of errors >= 0, or ``max_distance <= 0``.
        TypeError: ``distances`` not a sequence or tensor, or ``max_distance`` not a number.

    Example:
        >>> import torch
        >>> from pcgeom.metrics import accuracy_curve
        >>> x, y = accuracy_curve(torch.tensor([0.02, 0.5, 0.04], dtype=torch.float64))
        >>> x.tolist(), [round(v, 3) for v in y.tolist()]
        ([0.0, 0.02, 0.04, 0.1], [0.0, 0.333, 0.667, 0.667])
    """
    return _curve("accuracy_curve", distances, max_distance)


def _curve(fn: str, distances, max_distance):
    d = _distances(fn, distances)
    m = V.check_float(fn, "max_distance", max_distance)
    if not m > 0:
        raise ValueError(f"{fn}: max_distance must be > 0, got {m}")
    n = d.numel()
    d = torch.where(d > m, torch.full_like(d, float("inf")), d)
    d = torch.sort(d).values                                    # NaN and inf last
    K = int(torch.isfinite(d).sum())
    acc = torch.arange(1, n + 1, dtype=torch.float64, device=d.device) / n
    zero = d.new_zeros(1)
    if K == 0:
        return torch.cat([zero, d.new_full((1,), m)]), torch.cat([zero, zero])
    x = torch.cat([zero, d[:K], d.new_full((1,), m)])
    y = torch.cat([zero, acc[:K], acc[K - 1 : K]])
    return x, y


def auc(distances, max_distance: float = 0.1) -> torch.Tensor:
    """Area under the accuracy-threshold curve up to ``max_distance``, normalised to ``[0, 1]``.

    Exactly the YCB-Video toolbox (``plot_accuracy_keyframe.m``, ``VOCap``), the
    "AUC of ADD-S" (and of ADD) reported by PoseCNN, DenseFusion and followers:
    with the curve of :func:`accuracy_curve` ``(x_0 = 0, ..., x_{K+1} = max)``
    and its accuracies ``y``::

        AUC = sum over i with x_i != x_{i-1} of (x_i - x_{i-1}) * y_i  /  max_distance

    i.e. each interval ``(d_{k-1}, d_k]`` is credited with the accuracy reached
    at its right end, ``k / N``.  This equals
    ``(K * max - sum_{k<K} d_k) / (N * max)``; it differs from the exact
    integral of the step curve, ``mean(max(0, 1 - d / max))``, by
    ``d_K / (N * max) <= 1 / N``.  Errors above ``max_distance``, NaN and inf
    score 0; with no error below it the AUC is 0.

    Args:
        distances: ``(N,)`` pose errors (e.g. :func:`add_s` over a dataset), >= 0.
        max_distance: upper end of the threshold range, 0.1 (m) by default.

    Returns:
        0-dim float64 tensor in ``[0, 1]`` (multiply by 100 for the tables' numbers).

    Raises: as :func:`accuracy_curve` (the same curve, the same checks).

    Example:
        >>> import torch
        >>> from pcgeom.metrics import auc
        >>> round(auc(torch.tensor([0.0, 0.05, 0.2])).item(), 4)   # (2 * 0.1 - 0.0) / (3 * 0.1)
        0.6667
    """
    x, y = _curve("auc", distances, max_distance)
    y = torch.cummax(y, dim=0).values
    step = x[1:] != x[:-1]
    area = ((x[1:] - x[:-1]) * y[1:])[step].sum()
    return area / float(max_distance)
