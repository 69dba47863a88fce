"""Stand-in for ``pointops_cuda``, the raw extension of POSTECH-CVLab/point-transformer.

About forty repositories vendor POSTECH's ``lib/pointops/functions/pointops.py``,
which does ``import pointops_cuda`` and calls its functions with sizes and
**preallocated output tensors**.  Served under that name by the shims, these
functions fill the caller's tensors as the CUDA kernels do (``=`` where the
kernel writes, ``+=`` where it accumulates), on CPU and GPU:

* ``furthestsampling_cuda(b, n_max, xyz, offset, new_offset, tmp, idx)`` --
  writes ``idx (m,)`` int32: per cloud, farthest point sampling from its first
  point (:func:`pcgeom.compat.pointops.farthest_point_sampling`; ties to the
  lowest index).  ``tmp`` (the kernel's scratch) is left untouched.
* ``knnquery_cuda(m, nsample, xyz, new_xyz, offset, new_offset, idx, dist2)``
  -- writes ``idx (m, nsample)`` int32 and ``dist2`` **squared** distances,
  ascending, ties to the lower index; where the cloud has fewer than
  ``nsample`` points the kernel's padding: the cloud's **first point** with
  ``dist2 = 1e10`` (not ``-1``).  No ``nsample <= 100`` cap.
* ``grouping_forward_cuda(m, nsample, c, input, idx, output)`` writes
  ``input[idx]``; ``grouping_backward_cuda(m, nsample, c, grad_output, idx,
  grad_input)`` adds the scattered gradient.
* ``interpolation_forward_cuda(n, c, k, input, idx, weight, output)`` adds
  ``sum_j input[idx_j] * weight_j``; ``interpolation_backward_cuda(n, c, k,
  grad_output, idx, weight, grad_input)`` adds its gradient.
* ``subtraction_forward_cuda(n, nsample, c, input1, input2, idx, output)``
  writes ``input1[i] - input2[idx[i, j]]``; ``subtraction_backward_cuda(n,
  nsample, c, idx, grad_output, grad_input1, grad_input2)`` adds the gradients.
* ``aggregation_forward_cuda(n, nsample, c, w_c, input, position, weight, idx,
  output)`` adds ``sum_j (input[idx_j] + position_j) * weight_j[c % w_c]``;
  ``aggregation_backward_cuda(..., grad_output, grad_input, grad_position,
  grad_weight)`` adds to ``grad_input`` / ``grad_weight`` and writes
  ``grad_position``.

Every index is checked to lie in range and every output's shape, dtype and
device against the sizes passed (the kernels read and write out of bounds
instead); errors name the argument.  Float32 outputs as in the original;
other float dtypes are accepted when inputs and outputs agree.  The sums are
deterministic on CPU (``index_add_``).

PointWeb (hszhao/PointWeb) ships a different, batched extension under the
same module name: padded ``(B, N, 3)`` clouds, channel-first ``(B, C, N)``
features.  It is **served too** (implemented in :mod:`pcgeom.compat.pointops_cuda.pointweb`;
POSTECH's in :mod:`pcgeom.compat.pointops_cuda.postech`):

* PointWeb-only names: ``ballquery_cuda``, ``gathering_forward_cuda`` /
  ``gathering_backward_cuda``, ``grouping_int_forward_cuda``,
  ``nearestneighbor_cuda``, ``featuredistribute_cuda``,
  ``featuregather_forward_cuda`` / ``featuregather_backward_cuda``,
  ``labelstat_idx_cuda``, ``labelstat_ballrange_cuda``,
  ``labelstat_and_ballquery_cuda``;
* the six names both extensions have (``furthestsampling_cuda``,
  ``knnquery_cuda``, ``grouping_forward_cuda`` / ``grouping_backward_cuda``,
  ``interpolation_forward_cuda`` / ``interpolation_backward_cuda``) dispatch
  per call: by argument count, and for ``knnquery_cuda`` (8 arguments in
  both) by the third argument, POSTECH's tensor ``xyz`` or PointWeb's int
  ``m``.  A call that fits neither raises a TypeError naming both
  signatures; a PointWeb-shaped call whose tensors do not fit raises
  :class:`PointWebArgumentError` (a ValueError, also a TypeError).

PointWeb's kernels are pointnet2's with changes, reproduced as written:
FPS starts at index 0 **without** pointnet2's near-origin skip, resolves
equal maxima like its block reduction (up to 1024 threads) and updates the
caller's ``temp``; ball query is strict ``d2 < radius**2`` in float32 with
first-hit padding and leaves empty balls **untouched**; KNN and
``nearestneighbor_cuda`` give squared distances, ties to the lower index,
index 0 where points run out; ``knnquery_cuda`` writes only the first
``nsample`` entries of ``dist2`` (the kernel never offsets that pointer --
pcgeom writes the first centre's, the kernel a racing thread's);
``featuredistribute_cuda`` gives -1 where every ``d2 >= 1e5``;
``interpolation_forward_cuda`` writes where POSTECH's adds.  Every
size, index range, dtype and device is checked, errors name the argument.

Example:
    >>> import torch
    >>> from pcgeom.compat import pointops_cuda
    >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [5, 0, 0]])
    >>> off = torch.tensor([1, 3], dtype=torch.int32)
    >>> idx = torch.zeros(3, 2, dtype=torch.int32); d2 = torch.zeros(3, 2)
    >>> pointops_cuda.knnquery_cuda(3, 2, xyz, xyz, off, off, idx, d2)
    >>> idx.tolist(), d2[0].tolist()
    ([[0, 0], [1, 2], [2, 1]], [0.0, 10000000000.0])
    >>> idx = torch.zeros(1, 3, 2, dtype=torch.int32); d2 = torch.zeros(1, 3, 2)
    >>> pointops_cuda.knnquery_cuda(1, 3, 3, 2, xyz[None], xyz[None], idx, d2)  # PointWeb: (b, n, m, nsample, ...)
    >>> idx.tolist()
    [[[0, 1], [1, 0], [2, 1]]]
"""

from __future__ import annotations

import numbers

import torch

from pcgeom.compat.pointops_cuda import pointweb as _pointweb
from pcgeom.compat.pointops_cuda import postech as _postech
from pcgeom.compat.pointops_cuda.pointweb import (  # PointWeb's functions that POSTECH's extension does not have
    ballquery_cuda,
    featuredistribute_cuda,
    featuregather_backward_cuda,
    featuregather_forward_cuda,
    gathering_backward_cuda,
    gathering_forward_cuda,
    grouping_int_forward_cuda,
    labelstat_and_ballquery_cuda,
    labelstat_ballrange_cuda,
    labelstat_idx_cuda,
    nearestneighbor_cuda,
)
from pcgeom.compat.pointops_cuda.postech import (  # POSTECH's functions that PointWeb's extension does not have
    aggregation_backward_cuda,
    aggregation_forward_cuda,
    subtraction_backward_cuda,
    subtraction_forward_cuda,
)

# The served names: PointWeb's (the six POSTECH shares dispatch below), POSTECH's own four, and the error class.
__all__ = [
    "PointWebArgumentError",
    "aggregation_backward_cuda",
    "aggregation_forward_cuda",
    "subtraction_backward_cuda",
    "subtraction_forward_cuda",
] + _pointweb.__all__

# --------------------------------------------------------------------------- the names POSTECH and PointWeb share

_SIGNATURES = {
    "furthestsampling_cuda": ("(b, n_max, xyz, offset, new_offset, tmp, idx)", "(b, n, m, points, temp, idx)"),
    "knnquery_cuda": ("(m, nsample, xyz, new_xyz, offset, new_offset, idx, dist2)",
                      "(b, n, m, nsample, xyz, new_xyz, idx, dist2)"),
    "grouping_forward_cuda": ("(m, nsample, c, input, idx, output)", "(b, c, n, m, nsample, points, idx, out)"),
    "grouping_backward_cuda": ("(m, nsample, c, grad_output, idx, grad_input)",
                               "(b, c, n, m, nsample, grad_out, idx, grad_points)"),
    "interpolation_forward_cuda": ("(n, c, k, input, idx, weight, output)", "(b, c, m, n, points, idx, weight, out)"),
    "interpolation_backward_cuda": ("(n, c, k, grad_output, idx, weight, grad_input)",
                                    "(b, c, n, m, grad_out, idx, weight, grad_points)"),
}


class PointWebArgumentError(ValueError, TypeError):
    """A call with PointWeb's signature whose tensors or sizes do not fit (a ValueError).

    Also a TypeError: on the names POSTECH and PointWeb share, such a call may
    have been meant for the other signature (and before PointWeb's extension
    was served, pcgeom rejected every PointWeb-shaped call with a TypeError).
    """


def _is_int(v):
    if isinstance(v, torch.Tensor):
        return v.dim() == 0 and not v.is_floating_point() and not v.is_complex()
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _dispatch(fn, args, kwargs, postech, pointweb):
    """POSTECH's or PointWeb's function, by argument count and, where the counts agree, the third argument."""
    pt, pw = _SIGNATURES[fn]
    n_pt, n_pw = pt.count(",") + 1, pw.count(",") + 1
    family = None
    if not kwargs:
        if len(args) == n_pt == n_pw:  # knnquery_cuda: POSTECH passes the tensor xyz third, PointWeb the int m
            family = postech if isinstance(args[2], torch.Tensor) and args[2].dim() > 0 else (
                pointweb if _is_int(args[2]) else None)
        elif len(args) == n_pt:
            family = postech
        elif len(args) == n_pw:
            family = pointweb
    if family is None:
        got = ", ".join(type(a).__name__ for a in args) + (f"; keywords {sorted(kwargs)}" if kwargs else "")
        raise TypeError(f"pointops_cuda.{fn}: takes POSTECH point-transformer's {fn}{pt} or PointWeb's "
                        f"{fn}{pw}, positional only like the compiled extension; got {len(args)} "
                        f"arguments ({got})")
    if family is postech:
        return postech(*args)
    try:
        return pointweb(*args)
    except ValueError as exc:
        if isinstance(exc, TypeError):
            raise
        raise PointWebArgumentError(*exc.args) from None


def furthestsampling_cuda(*args, **kwargs):
    """Farthest point sampling into a preallocated ``idx``: POSTECH's packed or PointWeb's batched signature.

    * POSTECH ``(b, n_max, xyz (n, 3), offset (b,), new_offset (b,), tmp, idx (m,))``:
      per cloud from its first point, ties to the lowest index (``tmp`` untouched).
    * PointWeb ``(b, n, m, points (b, n, 3), temp (b, n), idx (b, m))``: from
      index 0 with the kernel's block-reduction tie rule, ``temp`` updated
      (see PointWeb's section of the module docstring).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [4, 0, 0]])
        >>> idx = torch.zeros(2, dtype=torch.int32)
        >>> pointops_cuda.furthestsampling_cuda(1, 3, xyz, torch.tensor([3], dtype=torch.int32),
        ...                                     torch.tensor([2], dtype=torch.int32), torch.zeros(3), idx)
        >>> idx.tolist()
        [0, 2]
        >>> idx = torch.zeros(1, 2, dtype=torch.int32)
        >>> pointops_cuda.furthestsampling_cuda(1, 3, 2, xyz[None], torch.full((1, 3), 1e10), idx)
        >>> idx.tolist()
        [[0, 2]]
    """
    return _dispatch("furthestsampling_cuda", args, kwargs, _postech.furthestsampling_cuda, _pointweb.furthestsampling_cuda)


def knnquery_cuda(*args, **kwargs):
    """K nearest neighbours into preallocated ``idx`` / ``dist2``: POSTECH's packed or PointWeb's batched signature.

    * POSTECH ``(m, nsample, xyz (n, 3), new_xyz (m, 3), offset, new_offset,
      idx (m, nsample), dist2 (m, nsample))``: squared distances ascending,
      ties to the lower index, missing neighbours = the cloud's first point
      with ``dist2 = 1e10``.
    * PointWeb ``(b, n, m, nsample, xyz (b, n, 3), new_xyz (b, m, 3),
      idx (b, m, nsample), dist2)``: ties to the lower index, missing
      neighbours index 0; only the first ``nsample`` entries of ``dist2`` are
      written, as the kernel does.

    Told apart by the third argument: the tensor ``xyz`` (POSTECH) or the int ``m`` (PointWeb).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> xyz = torch.tensor([[0.0, 0, 0], [2, 0, 0]])
        >>> off = torch.tensor([2], dtype=torch.int32)
        >>> idx = torch.zeros(2, 3, dtype=torch.int32); d2 = torch.zeros(2, 3)
        >>> pointops_cuda.knnquery_cuda(2, 3, xyz, xyz, off, off, idx, d2)
        >>> idx.tolist(), d2[1].tolist()
        ([[0, 1, 0], [1, 0, 0]], [0.0, 4.0, 10000000000.0])
        >>> idx = torch.zeros(1, 2, 3, dtype=torch.int32); d2 = torch.zeros(1, 2, 3)
        >>> pointops_cuda.knnquery_cuda(1, 2, 2, 3, xyz[None], xyz[None], idx, d2)
        >>> idx.tolist()
        [[[0, 1, 0], [1, 0, 0]]]
    """
    return _dispatch("knnquery_cuda", args, kwargs, _postech.knnquery_cuda, _pointweb.knnquery_cuda)


def grouping_forward_cuda(*args, **kwargs):
    """Feature grouping into a preallocated output: POSTECH ``(m, nsample, c, input (n, c), idx, output (m, nsample, c))``
    or PointWeb ``(b, c, n, m, nsample, points (b, c, n), idx (b, m, nsample), out (b, c, m, nsample))``; both write.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.zeros(1, 2, 1)
        >>> pointops_cuda.grouping_forward_cuda(1, 2, 1, torch.tensor([[3.0], [4.0]]),
        ...                                     torch.tensor([[1, 0]], dtype=torch.int32), out)
        >>> out.flatten().tolist()
        [4.0, 3.0]
    """
    return _dispatch("grouping_forward_cuda", args, kwargs, _postech.grouping_forward_cuda, _pointweb.grouping_forward_cuda)


def grouping_backward_cuda(*args, **kwargs):
    """Adds the grouping gradient: POSTECH ``(m, nsample, c, grad_output, idx, grad_input (n, c))`` or
    PointWeb ``(b, c, n, m, nsample, grad_out (b, c, m, nsample), idx, grad_points (b, c, n))``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> g = torch.zeros(2, 1)
        >>> pointops_cuda.grouping_backward_cuda(1, 2, 1, torch.ones(1, 2, 1),
        ...                                      torch.tensor([[1, 1]], dtype=torch.int32), g)
        >>> g.flatten().tolist()
        [0.0, 2.0]
    """
    return _dispatch("grouping_backward_cuda", args, kwargs, _postech.grouping_backward_cuda, _pointweb.grouping_backward_cuda)


def interpolation_forward_cuda(*args, **kwargs):
    """Weighted neighbour sums: POSTECH ``(n, c, k, input (m, c), idx (n, k), weight (n, k), output (n, c))``
    **adds** into ``output``; PointWeb ``(b, c, m, n, points (b, c, m), idx (b, n, 3), weight (b, n, 3),
    out (b, c, n))`` **writes** it.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.zeros(1, 1)
        >>> pointops_cuda.interpolation_forward_cuda(1, 1, 2, torch.tensor([[2.0], [4.0]]),
        ...     torch.tensor([[0, 1]], dtype=torch.int32), torch.tensor([[0.5, 0.5]]), out)
        >>> out.item()
        3.0
    """
    return _dispatch("interpolation_forward_cuda", args, kwargs, _postech.interpolation_forward_cuda,
                     _pointweb.interpolation_forward_cuda)


def interpolation_backward_cuda(*args, **kwargs):
    """Adds the interpolation gradient: POSTECH ``(n, c, k, grad_output, idx, weight, grad_input (m, c))`` or
    PointWeb ``(b, c, n, m, grad_out (b, c, n), idx (b, n, 3), weight (b, n, 3), grad_points (b, c, m))``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> g = torch.zeros(2, 1)
        >>> pointops_cuda.interpolation_backward_cuda(1, 1, 2, torch.ones(1, 1),
        ...     torch.tensor([[0, 1]], dtype=torch.int32), torch.tensor([[0.25, 0.75]]), g)
        >>> g.flatten().tolist()
        [0.25, 0.75]
    """
    return _dispatch("interpolation_backward_cuda", args, kwargs, _postech.interpolation_backward_cuda,
                     _pointweb.interpolation_backward_cuda)
