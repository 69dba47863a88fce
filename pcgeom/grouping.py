"""Patch grouping for masked point modelling: Point-MAE, Point-BERT, PointGPT, Point-M2AE.

:func:`group_patches` is the FPS + KNN "Group" step these models share: pick
``n_centers`` centres by farthest point sampling, take the ``k`` nearest points
of each centre and express them relative to it.  :func:`group_hierarchical`
repeats it on the previous level's centres (Point-M2AE).

Two FPS flavours are offered:

* ``fps="exact"`` (default, recommended): :func:`pcgeom.farthest_point_sample`,
  the exact greedy rule (ties to the lowest index, never a repeated point).
* ``fps="pointnet2"``: a pure-torch transcription of pointnet2_ops'
  ``furthest_point_sample`` CUDA kernel, the one Point-MAE and its successors
  were trained with, quirks included (see :func:`pointnet2_fps`).  Use it to
  reproduce the centres of published checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from einops import rearrange, repeat

from pcgeom._export_guard import exporting, require
from pcgeom import _pointnet2_kernel as pointnet2_kernel
from pcgeom import _validation as V
from pcgeom.ops import farthest_point_sample, knn

FPS_MODES = ("exact", "pointnet2")
_ORDERS = (None, "pointgpt")



def _context(fn: str, points, **params) -> str:
    shape = V.shape_str(points) if isinstance(points, torch.Tensor) else type(points).__name__
    args = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return f"points of shape {shape}, {args}"




def pointnet2_fps(points: torch.Tensor, n_samples: int) -> torch.Tensor:
    """pointnet2_ops' ``furthest_point_sample``, reproduced in pure torch.

    Follows the CUDA kernel of Pointnet2_PyTorch (used by Point-MAE, Point-BERT,
    PointGPT, Point-M2AE) rule for rule, vectorised over the batch:

    * the first sample is index 0 of every cloud;
    * points whose squared norm is ``<= 1e-3`` (``|p| <= 0.0316``) are never
      chosen after the first sample -- on origin-centred clouds this leaves a
      hole around the origin;
    * the running distance starts at ``1e10`` and is ``fmin(d2, running)`` with
      ``d2 = dx*dx + dy*dy + dz*dz`` evaluated in float32;
    * equal maxima are resolved like the kernel's thread-block reduction: with
      ``bs = 2**floor(log2 N)`` clamped to ``[1, 512]``, the winner is the
      smallest ``(bit_reverse(k mod bs), k div bs)`` (so *not* simply the lowest
      index);
    * when more samples are requested than there are eligible points, the
      kernel keeps returning already-chosen points (their distance is 0) by the
      same tie rule; a cloud without any eligible point repeats index 0.

    Distances are float32 whatever the input dtype (the kernel is float32-only).
    nvcc may contract the distance into fused multiply-adds, so on a GPU a
    difference in the last bit can flip a choice between two candidates whose
    distances agree to about 1e-7 relative; exact ties follow the rules above.

    Args:
        points: ``(B, N, 3)`` floating tensor.
        n_samples: int in ``[1, N]``.

    Returns:
        ``(B, n_samples)`` int64 indices in selection order (no gradient).

    Example:
        >>> import torch
        >>> from pcgeom.grouping import pointnet2_fps
        >>> pts = torch.tensor([[[0.0, 0, 0], [0.01, 0, 0], [1, 0, 0], [0, 2, 0]]])
        >>> pointnet2_fps(pts, 3).tolist()  # point 1 is too close to the origin
        [[0, 3, 2]]
    """
    fn = "pointnet2_fps"
    V.check_points(fn, "points", points, "(B, N, 3)")
    if points.shape[2] != 3:
        raise ValueError(f"{fn}: points must have shape (B, N, 3), got {V.shape_str(points)}")
    n_samples = V.check_int(fn, "n_samples", n_samples, minimum=1)
    B, N, _ = points.shape
    if not isinstance(N, torch.SymInt) and not isinstance(n_samples, torch.SymInt) and n_samples > N:
        raise ValueError(f"{fn}: n_samples={n_samples} exceeds the number of points N={N} (points shape {V.shape_str(points)})")
    return pointnet2_kernel.fps(points, n_samples)




def pointgpt_order(centers: torch.Tensor) -> torch.Tensor:
    """PointGPT's patch order: a greedy nearest-neighbour chain over the centres.

    Starts at centre 0 and repeatedly appends the not-yet-visited centre
    nearest to the last one (``torch.cdist`` distances, first index on ties),
    exactly like PointGPT's ``simplied_morton_sorting``.

    Args:
        centers: ``(B, G, D)`` floating tensor.

    Returns:
        ``(B, G)`` int64 permutation; ``centers.gather(1, order[..., None].expand(-1, -1, D))``
        is the chain.

    Example:
        >>> import torch
        >>> from pcgeom.grouping import pointgpt_order
        >>> c = torch.tensor([[[0.0, 0, 0], [5, 0, 0], [1, 0, 0], [2, 0, 0]]])
        >>> pointgpt_order(c).tolist()
        [[0, 2, 3, 1]]
    """
    V.check_points("pointgpt_order", "centers", centers, "(B, G, D)")
    return _pointgpt_order(centers)


def _pointgpt_order(centers: torch.Tensor) -> torch.Tensor:
    return _pointgpt_order_op(centers.detach())


@torch.library.custom_op("pcgeom_grouping::pointgpt_order", mutates_args=())
def _pointgpt_order_op(centers: torch.Tensor) -> torch.Tensor:
    B, G, _ = centers.shape
    c = centers
    if c.dtype in (torch.float16, torch.bfloat16):
        c = c.float()
    dist = torch.cdist(c, c)  # same op (and rounding) as PointGPT
    inf = torch.full_like(dist[:, 0], float("inf"))
    cur = torch.zeros(B, dtype=torch.int64, device=c.device)
    visited = torch.zeros(B, G, dtype=torch.bool, device=c.device)
    visited[:, 0] = True
    order = [cur]
    for _ in range(G - 1):
        row = dist.gather(1, repeat(cur, "b -> b 1 g", g=G)).squeeze(1)
        cur = torch.where(visited, inf, row).argmin(dim=1)
        visited = visited.scatter(1, cur[:, None], True)
        order.append(cur)
    return torch.stack(order, dim=1)


@_pointgpt_order_op.register_fake
def _pointgpt_order_fake(centers):
    return centers.new_empty(centers.shape[:2], dtype=torch.int64)


def gather_points(points: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``points[b, idx[b, ...]]`` for any index shape, differentiable w.r.t. points.

    Only for indices known to be in ``[0, N)`` (FPS and KNN results with
    ``k <= N``): a flat ``index_select`` over ``(B*N, D)`` rows is ~4x faster
    than ``gather`` with a D-expanded index, but an out-of-range index would
    read another cloud's row instead of raising.
    """
    B, N, D = points.shape
    offsets = torch.arange(B, device=idx.device, dtype=idx.dtype).mul_(N)
    flat = (rearrange(idx, "b ... -> b (...)") + offsets[:, None]).reshape(-1)
    out = points.reshape(B * N, D).index_select(0, flat)
    return out.reshape(*idx.shape, D)


def _center_first(idx: torch.Tensor, center_idx: torch.Tensor) -> torch.Tensor:
    """Puts each centre at slot 0 of its neighbour list, keeping the others' order.

    KNN already returns the centre first (its distance is exactly 0, and ties
    go to the lower index) unless an exact duplicate of it has a lower index.
    Then the centre is moved to the front and the entries before it shift by
    one; if more than k duplicates pushed it out, the last entry drops.
    """
    # The usual case is that no duplicate precedes any centre; on CPU checking
    # that is cheaper than the fix-up (on GPU the check would cost a sync).
    if not V.compiling() and idx.device.type == "cpu" and bool((idx[..., 0] == center_idx).all()):
        return idx
    k = idx.shape[-1]
    c = center_idx[..., None]
    hit = idx == c
    slot = torch.arange(k, device=idx.device)
    where_c = torch.where(hit, slot, k).amin(dim=-1, keepdim=True)  # k if absent
    shifted = torch.cat([c, idx[..., :-1]], dim=-1)
    return torch.where(slot <= where_c, shifted, idx)


def group_patches(points, n_centers, k, *, return_index=False, fps="exact", order=None):
    """Splits point clouds into ``n_centers`` local patches of ``k`` points (FPS + KNN).

    The "Group" step of Point-MAE (Pang et al., ECCV 2022), Point-BERT, PointGPT
    and Point-M2AE, without any compiled third-party extension:

    1. centres: ``n_centers`` points chosen by farthest point sampling starting
       at index 0 of every cloud (``fps`` selects the rule, see below);
    2. neighbours: the ``k`` nearest points of each centre by :func:`pcgeom.knn`,
       ascending by squared Euclidean distance, ties to the lower index, with
       the centre itself at slot 0 (its distance is exactly 0);
    3. neighbourhoods: the neighbours minus their centre (a translation only).

    Args:
        points: ``(B, N, D)`` float16/bfloat16/float32/float64 tensor (D = 3 for
            xyz; ``fps="pointnet2"`` requires D = 3).
        n_centers: number of patches G, an int in ``[1, N]``.
        k: points per patch, an int in ``[1, N]``.
        return_index: also return ``center_idx`` and ``idx``.
        fps: ``"exact"`` (default, recommended) uses
            :func:`pcgeom.farthest_point_sample`: exact greedy FPS, ties to the
            lowest index, no point chosen twice.  ``"pointnet2"`` reproduces
            pointnet2_ops' ``furthest_point_sample`` bit for bit on exact ties
            (see :func:`pcgeom.grouping.pointnet2_fps`): points within 0.0316 of
            the origin are never centres, and centres repeat when fewer than
            ``n_centers`` points are eligible.  Use it to reproduce published
            Point-MAE/PointGPT checkpoints; prefer ``"exact"`` otherwise.
        order: ``None`` keeps FPS order.  ``"pointgpt"`` reorders the patches
            along PointGPT's greedy nearest-neighbour chain over the centres
            (start at centre 0, then repeatedly the nearest unvisited centre,
            first index on ties); applied to every output.

    Returns:
        ``(neighborhoods, centers)``, or with ``return_index=True``
        ``(neighborhoods, centers, center_idx, idx)``:

        * ``neighborhoods (B, G, k, D)``: neighbour coordinates minus their
            centre, in the dtype of ``points``; ``neighborhoods[:, :, 0]`` is 0.
        * ``centers (B, G, D)``: the centre coordinates (exact copies of points).
        * ``center_idx (B, G)`` int64: index of each centre in ``points[b]``.
        * ``idx (B, G, k)`` int64: indices of the neighbours in ``points[b]``;
            ``idx[..., 0] == center_idx``.

        Both float outputs are differentiable with respect to ``points``.

    ``torch.compile(fullgraph=True)`` captures every mode, with static or
    dynamic shapes: FPS and KNN are pcgeom ops, and the sequential
    pointnet2-FPS and PointGPT loops run as opaque custom ops
    (``torch.ops.pcgeom_grouping.*``) rather than being unrolled.

    Raises:
        ValueError / TypeError: naming the argument, with the input shape and
            parameters, e.g. when ``n_centers`` or ``k`` exceeds N.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.rand(2, 1024, 3)
        >>> nbhd, ctr = pcgeom.group_patches(pts, n_centers=64, k=32)
        >>> nbhd.shape, ctr.shape
        (torch.Size([2, 64, 32, 3]), torch.Size([2, 64, 3]))
        >>> bool((nbhd[:, :, 0] == 0).all())
        True
    """
    fn = "group_patches"

    def ctx() -> str:  # built only when raising (no string work on the hot path)
        return _context(fn, points, n_centers=n_centers, k=k, fps=fps, order=order)

    try:
        V.check_points(fn, "points", points, "(B, N, D)")
        n_centers = V.check_int(fn, "n_centers", n_centers, minimum=1)
        k = V.check_int(fn, "k", k, minimum=1)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{exc} ({ctx()})") from exc
    if fps not in FPS_MODES:
        raise ValueError(f"{fn}: fps must be one of {FPS_MODES}, got {fps!r} ({ctx()})")
    if order not in _ORDERS:
        raise ValueError(f"{fn}: order must be None or 'pointgpt', got {order!r} ({ctx()})")
    B, N, D = points.shape
    if n_centers > N:
        raise ValueError(f"{fn}: n_centers={n_centers} exceeds the number of points N={N} ({ctx()})")
    if k > N:
        raise ValueError(f"{fn}: k={k} exceeds the number of points N={N} ({ctx()})")
    if fps == "pointnet2" and D != 3:
        raise ValueError(f"{fn}: fps='pointnet2' needs 3-D points (B, N, 3) like pointnet2_ops ({ctx()})")
    if exporting():  # the two size checks above, kept in the exported graph for every later N
        least = max(n_centers, k)
        points = require(points, torch.scalar_tensor(N, dtype=torch.int64) >= least,
                         f"{fn}: n_centers={n_centers} and k={k} need at least {least} points per cloud (N >= {least})")
    return group_patches_impl(points, n_centers, k, return_index, fps, order)


def group_patches_impl(points, n_centers, k, return_index, fps, order, center_first=True):
    """The grouping itself, on validated arguments.

    ``center_first=False`` keeps the plain KNN order (ties to the lower index
    even when an exact duplicate of the centre precedes it), which is what
    KNN_CUDA returns; the compat modules use it for index-level parity.
    """
    if fps == "exact":
        center_idx = farthest_point_sample(points.detach(), n_centers)
    else:
        center_idx = pointnet2_kernel.fps(points, n_centers)
    if order == "pointgpt":
        # The chain only depends on the centres, so order them before the KNN.
        centers = gather_points(points.detach(), center_idx)
        center_idx = center_idx.gather(1, _pointgpt_order(centers))
    centers = gather_points(points, center_idx)
    _, idx = knn(centers.detach(), points.detach(), k)
    if center_first:
        idx = _center_first(idx, center_idx)
    # In place on the fresh gather output: ~3x faster than allocating another
    # (B, G, k, D) tensor, and autograd-safe (gather does not save its output).
    neighborhoods = gather_points(points, idx).sub_(rearrange(centers, "b g d -> b g 1 d"))
    if return_index:
        return neighborhoods, centers, center_idx, idx
    return neighborhoods, centers


class GroupLevel(NamedTuple):
    """One level of :func:`group_hierarchical`; indices refer to the level's input."""

    neighborhoods: torch.Tensor
    centers: torch.Tensor
    center_idx: torch.Tensor
    idx: torch.Tensor


def group_hierarchical(points, n_centers: Sequence[int], k: Sequence[int], *, fps="exact") -> list[GroupLevel]:
    """Multi-scale grouping (Point-M2AE): each level groups the previous level's centres.

    Level 0 runs :func:`group_patches` on ``points``; level ``i > 0`` runs it on
    the centres of level ``i - 1``, exactly as Point-M2AE's hierarchical
    encoder does with ``num_groups=[512, 256, 64]``, ``group_sizes=[16, 8, 8]``.

    Args:
        points: ``(B, N, D)`` floating tensor.
        n_centers: centres per level, e.g. ``[512, 256, 64]``; each must not
            exceed the number of points of its input level.
        k: neighbours per level, e.g. ``[16, 8, 8]`` (same length).
        fps: ``"exact"`` or ``"pointnet2"``, used at every level.

    Returns:
        A list of :class:`GroupLevel` ``(neighborhoods (B,G_i,k_i,D), centers
        (B,G_i,D), center_idx (B,G_i), idx (B,G_i,k_i))``.  ``center_idx`` and
        ``idx`` index the input of that level: ``points`` for level 0, the
        level ``i-1`` centres otherwise.  To gather level ``i-1`` token features
        ``f (B, G_{i-1}, C)`` for level ``i``, use
        ``pcgeom.knn_gather(f, levels[i].idx)``; Point-M2AE's flat indices are
        ``levels[i].idx + torch.arange(B)[:, None, None] * G_{i-1}``, flattened.

    Raises:
        ValueError: ``n_centers`` and ``k`` of different lengths, or a level whose ``n_centers`` or ``k`` exceeds
            the points of the level below (the message names the level), or the errors of :func:`group_patches`.
        TypeError: ``n_centers`` or ``k`` not sequences of ints, or the errors of :func:`group_patches`.

    Example:
        >>> import torch, pcgeom
        >>> levels = pcgeom.group_hierarchical(torch.rand(2, 2048, 3), [512, 256, 64], [16, 8, 8])
        >>> [tuple(l.neighborhoods.shape) for l in levels]
        [(2, 512, 16, 3), (2, 256, 8, 3), (2, 64, 8, 3)]
    """
    fn = "group_hierarchical"
    try:
        n_centers = list(n_centers)
        k = list(k)
    except TypeError as exc:
        raise TypeError(f"{fn}: n_centers and k must be sequences of ints, got {type(n_centers).__name__} and {type(k).__name__}") from exc
    if len(n_centers) != len(k) or not n_centers:
        raise ValueError(
            f"{fn}: n_centers and k must be non-empty and of equal length, got n_centers={n_centers}, k={k}"
        )
    levels = []
    x = points
    for i, (g, kk) in enumerate(zip(n_centers, k)):
        try:
            nb, ctr, cidx, idx = group_patches(x, g, kk, return_index=True, fps=fps)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{fn}: level {i} (n_centers={n_centers}, k={k}): {exc}") from exc
        levels.append(GroupLevel(nb, ctr, cidx, idx))
        x = ctr
    return levels


__all__ = ["GroupLevel", "group_hierarchical", "group_patches", "pointgpt_order", "pointnet2_fps"]
