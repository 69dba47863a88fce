"""DenseFusion's pose-estimation losses, as drop-ins and as batched functions.

DenseFusion (Wang et al., "DenseFusion: 6D Object Pose Estimation by Iterative
Dense Fusion", CVPR 2019) trains a per-pixel pose network with ``lib/loss.py``
and an iterative refiner with ``lib/loss_refiner.py``.  Both need the
``lib/knn`` CUDA extension for symmetric objects, which no longer builds, is a
legacy autograd Function (an error since PyTorch 1.6, still unfixed in the
refiner by the popular fork), and materialises an ``Nm x (P*Nm)`` distance
matrix (500 MB for LineMOD, 27 GB for YCB with 2,600 mesh points).

This module offers two faces of the same math:

* :class:`Loss` and :class:`Loss_refine`: the original constructors, ``forward``
  signatures and return values, so switching is one import line::

      from pcgeom.losses.densefusion import Loss, Loss_refine
      # was: from lib.loss import Loss; from lib.loss_refiner import Loss_refine

* :func:`pose_loss` and :func:`refine_loss`: batched (``B > 1``) versions for
  new code, with a per-sample ``symmetric`` mask instead of ``idx``/``sym_list``.

Symmetric objects are matched with :func:`pcgeom.knn` (``k=1``), whose memory is
bounded by its inputs and outputs: the matching costs ``O(P*Nm)`` memory, the
size of the predicted point sets themselves, never ``O(P*Nm*Nm)``.

Conventions shared by everything here (the original's, reproduced exactly):

* quaternions are **scalar first** ``(w, x, y, z)`` and are normalised by
  their norm **without an epsilon** (a zero quaternion gives NaN, as before);
* the pose net predicts, for each input point ``p_i``, a rotation ``R_i`` and a
  translation **offset** ``t_i``: hypothesis ``i`` places model point ``m_j`` at
  ``R_i m_j + p_i + t_i``;
* the distance of a hypothesis is the **mean of L2 norms** (not squared) over
  the mesh points;
* for symmetric objects each *predicted* point is paired with its nearest
  *target* point (ties to the lower target index; no gradient through the
  choice), which is what DenseFusion's ``knn(target, pred)`` computes;
* the most confident hypothesis is ``argmax`` of the confidence (first on ties);
* ``new_points``/``new_target`` are the observed points and the **original**
  (not re-paired) target expressed in the frame of the chosen pose,
  ``(x - t) @ R`` i.e. ``R^T (x - t)``, and are detached.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import torch
from torch import nn

from pcgeom import _validation as V
from pcgeom.ops import knn

__all__ = [
    "Loss",
    "Loss_refine",
    "PoseLossResult",
    "RefineLossResult",
    "pose_loss",
    "quaternion_to_matrix",
    "refine_loss",
]


# --------------------------------------------------------------------------- #
# shared math
# --------------------------------------------------------------------------- #


def _rotation_from_unit_quaternion(q: torch.Tensor) -> torch.Tensor:
    # Written entry by entry in the same arithmetic form as DenseFusion so that
    # float32 results agree to the last bits, not just to rounding.
    w, x, y, z = q.unbind(-1)
    rows = (
        1.0 - 2.0 * (y**2 + z**2), 2.0 * x * y - 2.0 * w * z, 2.0 * w * y + 2.0 * x * z,
        2.0 * x * y + 2.0 * z * w, 1.0 - 2.0 * (x**2 + z**2), -2.0 * w * x + 2.0 * y * z,
        -2.0 * w * y + 2.0 * x * z, 2.0 * w * x + 2.0 * y * z, 1.0 - 2.0 * (x**2 + y**2),
    )
    return torch.stack(rows, dim=-1).unflatten(-1, (3, 3))


def quaternion_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices from (unnormalised) scalar-first quaternions.

    DenseFusion's convention: ``q = (w, x, y, z)`` is divided by its norm
    (no epsilon, so a zero quaternion gives NaN) and mapped to the usual
    rotation matrix ``R(q)``, which rotates column vectors: ``x' = R x``.

    Args:
        q: ``(..., 4)`` floating tensor, scalar part first.

    Returns:
        ``(..., 3, 3)`` tensor of the same dtype; differentiable.

    Raises:
        TypeError: ``q`` not a floating tensor.
        ValueError: ``q`` whose last dimension is not 4.

    Example:
        >>> import math, torch
        >>> from pcgeom.losses.densefusion import quaternion_to_matrix
        >>> h = math.sqrt(0.5)  # 90 degrees about z
        >>> quaternion_to_matrix(torch.tensor([h, 0, 0, h])).round().int().tolist()
        [[0, -1, 0], [1, 0, 0], [0, 0, 1]]
    """
    fn = "quaternion_to_matrix"
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"{fn}: q must be a torch.Tensor of shape (..., 4), got {type(q).__name__}")
    if q.dim() < 1 or q.shape[-1] != 4:
        raise ValueError(f"{fn}: q must have shape (..., 4), got {V.shape_str(q)}")
    _check_float(fn, "q", q)
    return _rotation_from_unit_quaternion(q / torch.norm(q, dim=-1, keepdim=True))


def _nearest_target(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """For each predicted point, its nearest target point.

    ``pred (S, H, Nm, 3)`` holds H hypotheses per sample, ``target (S, Nm, 3)``.
    Returns the re-paired target ``(S, H, Nm, 3)``.  The search goes through
    pcgeom.knn, so nothing of size ``Nm x (H*Nm)`` is ever allocated; the choice
    carries no gradient (gradients still reach ``target`` through the gather,
    as they did through DenseFusion's ``index_select``).
    """
    S, H, Nm, D = pred.shape
    with torch.no_grad():
        idx = knn(pred.detach().reshape(S, H * Nm, D), target.detach(), 1).idx   # (S, H*Nm, 1)
    # k=1 and Nm >= 1, so there is no -1 padding: a plain gather with an
    # expanded (stride-0) index costs no extra memory and no host sync.
    return torch.gather(target, 1, idx.expand(S, H * Nm, D)).reshape(S, H, Nm, D)


def _mean_distance(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # mean over mesh points of the L2 norm (not squared) of the residual
    return torch.mean(torch.norm(pred - target, dim=-1), dim=-1)


def _to_frame(x: torch.Tensor, t: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """``(x - t) @ R``: points ``x (B, N, 3)`` moved into the pose ``(R, t)``'s frame."""
    return torch.matmul(x - t[:, None, :], R)


# --------------------------------------------------------------------------- #
# validation helpers
# --------------------------------------------------------------------------- #


def _check_float(fn: str, name: str, t: torch.Tensor) -> None:
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be a floating tensor (float16/bfloat16/float32/float64), got {t.dtype}")


def _check_shape(fn: str, name: str, t, layout: str, sizes: tuple) -> None:
    """``t`` must be a floating tensor with ``len(sizes)`` dims; ``None`` is a wildcard."""
    V.check_tensor(fn, name, t, len(sizes), layout)
    if any(s is not None and int(a) != s for a, s in zip(t.shape, sizes)):
        want = "(" + ", ".join("*" if s is None else str(s) for s in sizes) + ")"
        raise ValueError(f"{fn}: {name} must have shape {layout} = {want}, got {V.shape_str(t)}")
    _check_float(fn, name, t)


def _check_same(fn: str, ref_name: str, ref: torch.Tensor, named: dict) -> None:
    for name, t in named.items():
        if t.dtype != ref.dtype:
            raise TypeError(f"{fn}: {name} must have the dtype of {ref_name} ({ref.dtype}), got {t.dtype}")
        if t.device != ref.device:
            raise ValueError(f"{fn}: {name} must be on the device of {ref_name} ({ref.device}), got {t.device}")


def _check_nonempty(fn: str, **sizes) -> None:
    for name, n in sizes.items():
        if n < 1:
            raise ValueError(f"{fn}: {name} must be >= 1, got {name}={n}")


def _check_w(fn: str, w) -> None:
    if isinstance(w, torch.Tensor):
        if w.numel() != 1:
            raise ValueError(f"{fn}: w must be a number or a one-element tensor, got shape {V.shape_str(w)}")
        return
    if isinstance(w, bool) or not isinstance(w, numbers.Real):
        raise TypeError(f"{fn}: w must be a float, got {type(w).__name__} {w!r}")


def _sym_set(fn: str, sym_list) -> set:
    try:
        values = sym_list.tolist() if isinstance(sym_list, torch.Tensor) else list(sym_list)
        return {int(v) for v in values}
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{fn}: sym_list must be a sequence of object indices (ints), got {sym_list!r}") from exc


def _object_indices(fn: str, idx) -> list:
    """Object indices of the batch as ints (DenseFusion passes a ``(1, 1)`` long tensor)."""
    if isinstance(idx, torch.Tensor):
        if idx.numel() == 0:
            raise ValueError(f"{fn}: idx must hold the object index, got an empty tensor of shape {V.shape_str(idx)}")
        if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
            raise TypeError(f"{fn}: idx must be an integer tensor (the object index), got {idx.dtype}")
        return [int(v) for v in idx.reshape(-1).tolist()]
    if isinstance(idx, numbers.Integral) and not isinstance(idx, bool):
        return [int(idx)]
    raise TypeError(f"{fn}: idx must be an integer tensor or int (the object index), got {type(idx).__name__}")


def _symmetric_mask(fn: str, symmetric, B: int, device) -> torch.Tensor:
    if symmetric is None:
        return torch.zeros(B, dtype=torch.bool, device=device)
    if isinstance(symmetric, bool):
        return torch.full((B,), symmetric, dtype=torch.bool, device=device)
    try:
        mask = torch.as_tensor(symmetric)
    except Exception as exc:
        raise TypeError(f"{fn}: symmetric must be None, a bool or a bool tensor of shape ({B},), "
                        f"got {type(symmetric).__name__}") from exc
    if mask.dtype != torch.bool:
        raise TypeError(f"{fn}: symmetric must be a bool tensor of shape ({B},), got dtype {mask.dtype}")
    if mask.shape != (B,):
        raise ValueError(f"{fn}: symmetric must have shape ({B},), got {V.shape_str(mask)}")
    return mask.to(device)


# --------------------------------------------------------------------------- #
# batched functional forms
# --------------------------------------------------------------------------- #


class PoseLossResult(NamedTuple):
    """Result of :func:`pose_loss` (first four fields mirror :class:`Loss`)."""

    loss: torch.Tensor
    """0-dim: ``mean over (b, i) of dis[b, i] * c[b, i] - w * log c[b, i]``."""
    dis: torch.Tensor
    """``(B,)``: mean distance of each sample's most confident hypothesis (not detached)."""
    new_points: torch.Tensor
    """``(B, P, 3)``: ``points`` in the frame of the chosen pose, detached."""
    new_target: torch.Tensor
    """``(B, Nm, 3)``: ``target`` in the frame of the chosen pose, detached."""
    R: torch.Tensor
    """``(B, 3, 3)``: rotation of the chosen hypothesis, detached."""
    t: torch.Tensor
    """``(B, 3)``: absolute translation ``points[b, i*] + pred_t[b, i*]``, detached."""


class RefineLossResult(NamedTuple):
    """Result of :func:`refine_loss` (first three fields mirror :class:`Loss_refine`)."""

    dis: torch.Tensor
    """``(B,)``: mean distance per sample (not detached; call ``dis.mean().backward()``)."""
    new_points: torch.Tensor
    """``(B, P, 3)``: ``points`` in the frame of the predicted pose, detached."""
    new_target: torch.Tensor
    """``(B, Nm, 3)``: ``target`` in the frame of the predicted pose, detached."""
    R: torch.Tensor
    """``(B, 3, 3)``: the predicted rotation, detached."""
    t: torch.Tensor
    """``(B, 3)``: the predicted translation, detached."""


def _hypothesis_distances(pred: torch.Tensor, target: torch.Tensor, sym: torch.Tensor) -> torch.Tensor:
    """``pred (B, H, Nm, 3)`` vs ``target (B, Nm, 3)`` -> ``dis (B, H)``; ``sym (B,)`` bool."""
    n_sym = int(sym.sum()) if sym.numel() else 0
    if n_sym == 0:
        return _mean_distance(pred, target[:, None])
    if n_sym == sym.numel():
        return _mean_distance(pred, _nearest_target(pred, target))
    sel = sym.nonzero().squeeze(1)
    paired = target[:, None].expand_as(pred).index_copy(0, sel, _nearest_target(pred[sel], target[sel]))
    return _mean_distance(pred, paired)


def pose_loss(pred_r, pred_t, pred_c, target, model_points, points, w, *, symmetric=None) -> PoseLossResult:
    """DenseFusion's pose-network loss over a batch of samples.

    For sample ``b`` and input point ``i`` the network predicts a quaternion
    ``pred_r[b, i]`` (scalar first, normalised here without epsilon), a
    translation offset ``pred_t[b, i]`` from the observed point ``points[b, i]``
    and a confidence ``pred_c[b, i]``.  Hypothesis ``i`` places model point
    ``m_j`` at ``R_i m_j + points[b, i] + pred_t[b, i]`` and scores::

        dis[b, i] = mean_j || R_i m_j + points[b, i] + pred_t[b, i] - target[b, j'] ||_2
        loss      = mean_{b, i} ( dis[b, i] * c[b, i] - w * log c[b, i] )

    with ``j' = j`` for ordinary objects and, where ``symmetric[b]``, ``j'`` the
    target point nearest to the predicted point (ties to the lower index, no
    gradient through the choice; matched with :func:`pcgeom.knn`, memory
    ``O(P * Nm)``).  With ``B = 1`` this is exactly :class:`Loss`.  DenseFusion
    switches the symmetric matching off once refinement starts
    (``refine=True``); pass ``symmetric=None`` for that.

    Args:
        pred_r: ``(B, P, 4)`` raw quaternions, scalar first.
        pred_t: ``(B, P, 3)`` translation offsets from ``points``.
        pred_c: ``(B, P, 1)`` or ``(B, P)`` confidences in ``(0, 1]`` (a sigmoid).
        target: ``(B, Nm, 3)`` model points in the ground-truth pose (row ``j``
            corresponds to ``model_points[b, j]``).
        model_points: ``(B, Nm, 3)`` model points in the object frame.
        points: ``(B, P, 3)`` observed points.
        w: confidence regulariser weight (DenseFusion: 0.015, times 0.3 after decay).
        symmetric: ``None`` (no sample symmetric), a bool for all samples, or a
            ``(B,)`` bool tensor.

    All tensors share one floating dtype and device.

    Returns:
        :class:`PoseLossResult` ``(loss, dis, new_points, new_target, R, t)``:
        ``loss`` 0-dim; ``dis (B,)`` the distance of each sample's most
        confident hypothesis ``i* = argmax_i c[b, i]`` (first on ties);
        ``new_points (B, P, 3)`` and ``new_target (B, Nm, 3)`` are ``points``
        and the original ``target`` in the frame of that pose,
        ``R^T (x - t)``, detached, ready for the refiner; ``R (B, 3, 3)`` and
        ``t (B, 3)`` are the chosen pose (``x_cam = R x_obj + t``), detached.
        Gradients flow to ``pred_r``, ``pred_t`` and ``pred_c`` through ``loss``
        and ``dis``.

    Raises:
        ValueError: tensors whose shapes do not fit the layouts above, empty sizes, a bad ``w`` or ``symmetric``.
        TypeError: tensors of different dtypes or devices, or not floating.

    Example:
        >>> import torch
        >>> from pcgeom.losses import pose_loss
        >>> g = torch.Generator().manual_seed(0)
        >>> B, P, Nm = 2, 8, 16
        >>> model = torch.randn(B, Nm, 3, generator=g)
        >>> points = torch.randn(B, P, 3, generator=g)
        >>> pred_r = torch.randn(B, P, 4, generator=g, requires_grad=True)
        >>> pred_t = torch.zeros(B, P, 3, requires_grad=True)
        >>> pred_c = torch.full((B, P, 1), 0.5, requires_grad=True)
        >>> out = pose_loss(pred_r, pred_t, pred_c, model + 1.0, model, points, 0.015,
        ...                 symmetric=torch.tensor([False, True]))
        >>> out.loss.backward()
        >>> out.dis.shape, out.new_points.shape, pred_r.grad.shape
        (torch.Size([2]), torch.Size([2, 8, 3]), torch.Size([2, 8, 4]))
    """
    fn = "pose_loss"
    _check_shape(fn, "pred_r", pred_r, "(B, P, 4)", (None, None, 4))
    B, P = int(pred_r.shape[0]), int(pred_r.shape[1])
    _check_shape(fn, "pred_t", pred_t, "(B, P, 3)", (B, P, 3))
    if isinstance(pred_c, torch.Tensor) and pred_c.dim() == 2:
        _check_shape(fn, "pred_c", pred_c, "(B, P)", (B, P))
    else:
        _check_shape(fn, "pred_c", pred_c, "(B, P, 1)", (B, P, 1))
    _check_shape(fn, "target", target, "(B, Nm, 3)", (B, None, 3))
    Nm = int(target.shape[1])
    _check_shape(fn, "model_points", model_points, "(B, Nm, 3)", (B, Nm, 3))
    _check_shape(fn, "points", points, "(B, P, 3)", (B, P, 3))
    _check_nonempty(fn, B=B, P=P, Nm=Nm)
    _check_same(fn, "pred_r", pred_r, {"pred_t": pred_t, "pred_c": pred_c, "target": target,
                                       "model_points": model_points, "points": points})
    _check_w(fn, w)
    sym = _symmetric_mask(fn, symmetric, B, pred_r.device)

    R = quaternion_to_matrix(pred_r)                                   # (B, P, 3, 3)
    t_abs = points + pred_t                                            # (B, P, 3)
    pred = torch.matmul(model_points[:, None], R.transpose(-1, -2)) + t_abs[:, :, None, :]
    dis = _hypothesis_distances(pred, target, sym)                     # (B, P)
    c = pred_c.reshape(B, P)
    loss = torch.mean(dis * c - w * torch.log(c))

    best = torch.argmax(c, dim=1)                                      # first max on ties
    rows = torch.arange(B, device=best.device)
    R_best = R[rows, best].detach()
    t_best = t_abs[rows, best].detach()
    new_points = _to_frame(points.detach(), t_best, R_best)
    new_target = _to_frame(target.detach(), t_best, R_best)
    return PoseLossResult(loss, dis[rows, best], new_points, new_target, R_best, t_best)


def refine_loss(pred_r, pred_t, target, model_points, points, *, symmetric=None) -> RefineLossResult:
    """DenseFusion's refiner loss over a batch of samples.

    The refiner predicts one residual pose per sample, ``pred_r[b]`` (quaternion,
    scalar first, normalised without epsilon) and an absolute translation
    ``pred_t[b]`` in the current frame (the frame of the previous estimate), and
    scores::

        dis[b] = mean_j || R_b m_j + pred_t[b] - target[b, j'] ||_2

    with ``j' = j``, or the nearest target point where ``symmetric[b]`` (ties to
    the lower index, no gradient through the choice, matched with
    :func:`pcgeom.knn`).  Unlike :func:`pose_loss` there is no per-point offset.
    With ``B = 1`` this is exactly :class:`Loss_refine`.  DenseFusion back-props
    each refinement iteration separately; for a batch use ``dis.mean().backward()``.

    Args:
        pred_r: ``(B, 4)`` raw quaternions, scalar first.
        pred_t: ``(B, 3)`` translations.
        target: ``(B, Nm, 3)`` target points in the current frame (``new_target``
            of the previous stage).
        model_points: ``(B, Nm, 3)`` model points in the object frame.
        points: ``(B, P, 3)`` observed points in the current frame
            (``new_points`` of the previous stage).
        symmetric: ``None``, a bool for all samples, or a ``(B,)`` bool tensor.

    All tensors share one floating dtype and device.

    Returns:
        :class:`RefineLossResult` ``(dis, new_points, new_target, R, t)``:
        ``dis (B,)``; ``new_points (B, P, 3)`` and ``new_target (B, Nm, 3)`` are
        ``points`` and ``target`` moved into the predicted pose's frame,
        ``R^T (x - t)``, detached, ready for the next iteration; ``R (B, 3, 3)``
        and ``t (B, 3)`` the predicted pose, detached.  Compose the estimate
        ``(R0, t0)`` with the refinement as ``(R0 @ R, R0 @ t + t0)``.

    Raises:
        ValueError: tensors whose shapes do not fit the layouts above, empty sizes, or a bad ``symmetric``.
        TypeError: tensors of different dtypes or devices, or not floating.

    Example:
        >>> import torch
        >>> from pcgeom.losses import refine_loss
        >>> model = torch.randn(4, 32, 3)
        >>> pred_r = torch.tensor([[1.0, 0, 0, 0]]).repeat(4, 1).requires_grad_()
        >>> pred_t = torch.zeros(4, 3, requires_grad=True)
        >>> out = refine_loss(pred_r, pred_t, model + 0.1, model, torch.randn(4, 50, 3))
        >>> out.dis.mean().backward()
        >>> [round(v, 4) for v in out.dis.tolist()]
        [0.1732, 0.1732, 0.1732, 0.1732]
    """
    fn = "refine_loss"
    _check_shape(fn, "pred_r", pred_r, "(B, 4)", (None, 4))
    B = int(pred_r.shape[0])
    _check_shape(fn, "pred_t", pred_t, "(B, 3)", (B, 3))
    _check_shape(fn, "target", target, "(B, Nm, 3)", (B, None, 3))
    Nm = int(target.shape[1])
    _check_shape(fn, "model_points", model_points, "(B, Nm, 3)", (B, Nm, 3))
    _check_shape(fn, "points", points, "(B, P, 3)", (B, None, 3))
    _check_nonempty(fn, B=B, Nm=Nm)
    _check_same(fn, "pred_r", pred_r, {"pred_t": pred_t, "target": target,
                                       "model_points": model_points, "points": points})
    sym = _symmetric_mask(fn, symmetric, B, pred_r.device)

    R = quaternion_to_matrix(pred_r)                                   # (B, 3, 3)
    pred = torch.matmul(model_points, R.transpose(-1, -2)) + pred_t[:, None, :]
    dis = _hypothesis_distances(pred[:, None], target, sym)[:, 0]      # (B,)
    R_d, t_d = R.detach(), pred_t.detach()
    new_points = _to_frame(points.detach(), t_d, R_d)
    new_target = _to_frame(target.detach(), t_d, R_d)
    return RefineLossResult(dis, new_points, new_target, R_d, t_d)


# --------------------------------------------------------------------------- #
# drop-in modules
# --------------------------------------------------------------------------- #


class Loss(nn.Module):
    """Drop-in for DenseFusion's ``lib.loss.Loss`` (pose-network loss).

    Same constructor, ``forward`` signature and return values as the original,
    same numbers (within float32 rounding; float64 inputs agree to ~1e-12), and
    no ``lib/knn`` extension: symmetric objects are matched with
    :func:`pcgeom.knn`, memory ``O(P * Nm)`` instead of the original's
    ``Nm x (P * Nm)`` distance matrix.  No legacy autograd; gradients flow to
    ``pred_r``, ``pred_t`` and ``pred_c``.  See :func:`pose_loss` for the math
    and a batched form.

    Args:
        num_points_mesh: Nm, the number of model points per object (500, or
            2600 for YCB once refinement starts).
        sym_list: indices of the symmetric objects (values of ``idx``), e.g.
            LineMOD ``[7, 8]``, YCB ``[12, 15, 18, 19, 20]``.

    ``forward(pred_r, pred_t, pred_c, target, model_points, idx, points, w, refine)``:

    * ``pred_r (bs, P, 4)``, ``pred_t (bs, P, 3)``, ``pred_c (bs, P, 1)``,
      ``target (bs, Nm, 3)``, ``model_points (bs, Nm, 3)``, ``points (bs, P, 3)``,
      one floating dtype and device; ``idx`` the object index (DenseFusion
      passes a ``(1, 1)`` long tensor); ``w`` a float; ``refine`` a bool.
    * The nearest-point matching is used iff ``not refine`` and ``idx[0]`` is
      in ``sym_list``.

    Returns ``(loss, dis, new_points, new_target)``: ``loss`` 0-dim;
    ``dis`` 0-dim, the distance of the most confident hypothesis (not
    detached); ``new_points (1, bs * P, 3)`` and ``new_target (1, Nm, 3)``
    detached, in the frame of that pose.

    DenseFusion always runs with ``bs = 1``.  For ``bs > 1`` this module
    reproduces the original literally (the chosen pose, ``dis``, ``new_points``
    and ``new_target`` refer to sample 0), except that it refuses the symmetric
    branch, where the original would pair every sample with sample 0's target;
    use :func:`pose_loss` for real batches.

    Raises:
        ValueError: (from ``forward``) tensors whose shapes do not fit, a bad ``idx`` or ``w``, or the symmetric
            branch with ``bs > 1``.
        TypeError: (from ``forward``) tensors of different dtypes or devices.

    Example:
        >>> import torch
        >>> from pcgeom.losses.densefusion import Loss
        >>> criterion = Loss(num_points_mesh=50, sym_list=[7, 8])
        >>> model = torch.randn(1, 50, 3)
        >>> points = torch.randn(1, 20, 3)
        >>> pred_r = torch.randn(1, 20, 4, requires_grad=True)
        >>> pred_t = torch.zeros(1, 20, 3, requires_grad=True)
        >>> pred_c = torch.rand(1, 20, 1).requires_grad_()
        >>> idx = torch.tensor([[7]])  # a symmetric object
        >>> loss, dis, new_points, new_target = criterion(
        ...     pred_r, pred_t, pred_c, model + 0.05, model, idx, points, 0.015, False)
        >>> loss.backward()
        >>> dis.shape, new_points.shape, new_target.shape
        (torch.Size([]), torch.Size([1, 20, 3]), torch.Size([1, 50, 3]))
    """

    def __init__(self, num_points_mesh, sym_list):
        super().__init__()
        self.num_pt_mesh = V.check_int("Loss", "num_points_mesh", num_points_mesh, minimum=1)
        _sym_set("Loss", sym_list)
        self.sym_list = sym_list

    def forward(self, pred_r, pred_t, pred_c, target, model_points, idx, points, w, refine):
        fn = "Loss"
        Nm = self.num_pt_mesh
        _check_shape(fn, "pred_c", pred_c, "(bs, P, 1)", (None, None, 1))
        bs, P = int(pred_c.shape[0]), int(pred_c.shape[1])
        _check_shape(fn, "pred_r", pred_r, "(bs, P, 4)", (bs, P, 4))
        _check_shape(fn, "pred_t", pred_t, "(bs, P, 3)", (bs, P, 3))
        _check_shape(fn, "target", target, "(bs, num_points_mesh, 3)", (bs, Nm, 3))
        _check_shape(fn, "model_points", model_points, "(bs, num_points_mesh, 3)", (bs, Nm, 3))
        _check_shape(fn, "points", points, "(bs, P, 3)", (bs, P, 3))
        _check_nonempty(fn, bs=bs, P=P)
        _check_same(fn, "pred_r", pred_r, {"pred_t": pred_t, "pred_c": pred_c, "target": target,
                                           "model_points": model_points, "points": points})
        _check_w(fn, w)
        objects = _object_indices(fn, idx)
        sym_set = _sym_set(fn, self.sym_list)
        symmetric = (not refine) and objects[0] in sym_set
        if symmetric and bs > 1:
            raise ValueError(
                f"{fn}: the symmetric-object branch supports bs=1 only (DenseFusion pairs every sample "
                f"with sample 0's target), got bs={bs}; use pcgeom.losses.pose_loss(..., symmetric=mask) "
                f"for batches")

        R = quaternion_to_matrix(pred_r)                                # (bs, P, 3, 3)
        t_abs = points + pred_t                                         # (bs, P, 3)
        pred = torch.matmul(model_points[:, None], R.transpose(-1, -2)) + t_abs[:, :, None, :]
        if symmetric:
            dis = _mean_distance(pred, _nearest_target(pred, target))   # (1, P)
        else:
            dis = _mean_distance(pred, target[:, None])                 # (bs, P)
        c = pred_c.reshape(bs * P)
        loss = torch.mean(dis.reshape(bs * P) * c - w * torch.log(c), dim=0)

        # The original picks which_max[0] (sample 0's best) and indexes the
        # flattened (bs*P) hypotheses with it, i.e. always a hypothesis of sample 0.
        # (index_select with a 1-element index, not t[which]: indexing with a
        # 0-dim tensor would sync with the device to read it.)
        which = torch.argmax(pred_c.reshape(bs, P), dim=1)[:1]          # (1,)
        R_best = R.reshape(bs * P, 3, 3).index_select(0, which).detach()     # (1, 3, 3)
        t_best = t_abs.reshape(bs * P, 3).index_select(0, which).detach()    # (1, 3)
        new_points = _to_frame(points.detach().reshape(1, bs * P, 3), t_best, R_best)
        new_target = _to_frame(target.detach()[:1], t_best, R_best)
        return loss, dis[0].index_select(0, which)[0], new_points, new_target


class Loss_refine(nn.Module):
    """Drop-in for DenseFusion's ``lib.loss_refiner.Loss_refine`` (refiner loss).

    Same constructor, ``forward`` signature and return values as the original,
    same numbers (within float32 rounding), no ``lib/knn`` extension and no
    legacy autograd (the original still crashes here for symmetric objects on
    PyTorch >= 1.6, even in the patched fork).  See :func:`refine_loss` for the
    math and a batched form.

    Args:
        num_points_mesh: Nm, the number of model points.
        sym_list: indices of the symmetric objects (values of ``idx``).

    ``forward(pred_r, pred_t, target, model_points, idx, points)``:

    * ``pred_r (1, 4)``, ``pred_t (1, 3)`` (any shape holding 4 and 3 values,
      as the original reshapes them), ``target (1, Nm, 3)``,
      ``model_points (1, Nm, 3)``, ``points (1, P, 3)``, one floating dtype and
      device; ``idx`` the object index.
    * Symmetric objects (``idx[0]`` in ``sym_list``) always use nearest-point
      matching: the refiner has no ``refine`` switch.

    Returns ``(dis, new_points, new_target)``: ``dis (1,)`` (not detached;
    DenseFusion calls ``dis.backward()``), ``new_points (1, P, 3)`` and
    ``new_target (1, Nm, 3)`` detached, in the frame of the predicted pose.

    Raises:
        ValueError: (from ``forward``) tensors whose shapes do not fit, or a bad ``idx``.
        TypeError: (from ``forward``) tensors of different dtypes or devices.

    Example:
        >>> import torch
        >>> from pcgeom.losses.densefusion import Loss_refine
        >>> criterion = Loss_refine(num_points_mesh=50, sym_list=[7, 8])
        >>> model = torch.randn(1, 50, 3)
        >>> pred_r = torch.tensor([[1.0, 0.0, 0.0, 0.0]], requires_grad=True)
        >>> pred_t = torch.zeros(1, 3, requires_grad=True)
        >>> dis, new_points, new_target = criterion(
        ...     pred_r, pred_t, model, model, torch.tensor([[3]]), torch.randn(1, 30, 3))
        >>> dis.backward()
        >>> dis.tolist(), new_points.shape
        ([0.0], torch.Size([1, 30, 3]))
    """

    def __init__(self, num_points_mesh, sym_list):
        super().__init__()
        self.num_pt_mesh = V.check_int("Loss_refine", "num_points_mesh", num_points_mesh, minimum=1)
        _sym_set("Loss_refine", sym_list)
        self.sym_list = sym_list

    def forward(self, pred_r, pred_t, target, model_points, idx, points):
        fn = "Loss_refine"
        Nm = self.num_pt_mesh
        for name, t, n in (("pred_r", pred_r, 4), ("pred_t", pred_t, 3)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
            if t.numel() != n:
                raise ValueError(f"{fn}: {name} must hold exactly {n} values (shape (1, {n}); the refiner "
                                 f"loss is single-sample, use pcgeom.losses.refine_loss for batches), "
                                 f"got shape {V.shape_str(t)}")
            _check_float(fn, name, t)
        _check_shape(fn, "target", target, "(1, num_points_mesh, 3)", (1, Nm, 3))
        _check_shape(fn, "model_points", model_points, "(1, num_points_mesh, 3)", (1, Nm, 3))
        _check_shape(fn, "points", points, "(1, P, 3)", (1, None, 3))
        _check_same(fn, "pred_r", pred_r, {"pred_t": pred_t, "target": target,
                                           "model_points": model_points, "points": points})
        objects = _object_indices(fn, idx)
        symmetric = objects[0] in _sym_set(fn, self.sym_list)

        R = quaternion_to_matrix(pred_r.reshape(1, 4))                  # (1, 3, 3)
        t = pred_t.reshape(1, 3)
        pred = torch.matmul(model_points, R.transpose(-1, -2)) + t[:, None, :]   # (1, Nm, 3)
        if symmetric:
            dis = _mean_distance(pred, _nearest_target(pred[:, None], target)[:, 0])
        else:
            dis = _mean_distance(pred, target)                          # (1,)
        R_d, t_d = R.detach(), t.detach()
        new_points = _to_frame(points.detach(), t_d, R_d)
        new_target = _to_frame(target.detach(), t_d, R_d)
        return dis, new_points, new_target
