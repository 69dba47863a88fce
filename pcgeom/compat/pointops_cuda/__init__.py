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
features.  It is **served too** (implemented in ``pcgeom.compat._pointweb``):

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

from pcgeom import _validation as V
from pcgeom.compat import _pointweb as _pw
from pcgeom.compat import pointops as _po
from pcgeom.compat._pointweb import _feat, _idx, _int, _out, _write
from pcgeom.compat._pointweb import (  # PointWeb's functions that POSTECH's extension does not have
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
from pcgeom.ops import knn as _pc_knn
from pcgeom.ops.packed import offsets_arg

__all__ = [
    "PointWebArgumentError",
    "aggregation_backward_cuda",
    "aggregation_forward_cuda",
    "ballquery_cuda",
    "featuredistribute_cuda",
    "featuregather_backward_cuda",
    "featuregather_forward_cuda",
    "furthestsampling_cuda",
    "gathering_backward_cuda",
    "gathering_forward_cuda",
    "grouping_backward_cuda",
    "grouping_forward_cuda",
    "grouping_int_forward_cuda",
    "interpolation_backward_cuda",
    "interpolation_forward_cuda",
    "knnquery_cuda",
    "labelstat_and_ballquery_cuda",
    "labelstat_ballrange_cuda",
    "labelstat_idx_cuda",
    "nearestneighbor_cuda",
    "subtraction_backward_cuda",
    "subtraction_forward_cuda",
]

def _tile(weight, c):
    """``(n, s, w_c)`` -> ``(n, s, c)`` with channel ``c`` reading ``weight[..., c % w_c]``."""
    w_c = weight.shape[-1]
    reps = -(-c // w_c)
    return weight.repeat(1, 1, reps)[..., :c] if (reps > 1 or w_c != c) else weight


# --------------------------------------------------------------------------- sampling / query


def _furthestsampling_postech(b, n_max, xyz, offset, new_offset, tmp, idx):
    """Writes farthest point samples of each packed cloud into ``idx (m,)`` int32.

    Args:
        b: number of clouds (``offset.numel()``).
        n_max: the largest cloud size (used by the kernel for its launch only).
        xyz: ``(n, 3)`` coordinates.
        offset: int ``(b,)`` cumulative end offsets of the points (``xyz``).
        new_offset: int ``(b,)`` cumulative end offsets of the samples.
        tmp: ``(n,)`` scratch (not written).
        idx: ``(m,)`` int32 output, ``m = new_offset[-1]``.
    """
    fn = "furthestsampling_cuda"
    if not isinstance(xyz, torch.Tensor) or xyz.dim() != 2:
        raise ValueError(f"{fn}: xyz must have shape (n, 3) (packed clouds), got "
                         f"{V._shape(xyz) if isinstance(xyz, torch.Tensor) else type(xyz).__name__}")
    b = _int(fn, "b", b, 1)
    if not isinstance(offset, torch.Tensor) or offset.numel() != b:
        raise ValueError(f"{fn}: offset must have b={b} entries, got "
                         f"{V._shape(offset) if isinstance(offset, torch.Tensor) else type(offset).__name__}")
    res = _po.farthest_point_sampling(xyz, offset, new_offset)
    _out(fn, "idx", idx, (res.shape[0],), xyz.device, torch.int32)
    _write(idx, res)


def _knnquery_postech(m, nsample, xyz, new_xyz, offset, new_offset, idx, dist2):
    """Writes the ``nsample`` nearest points (POSTECH's padding) into ``idx`` / ``dist2``.

    Args:
        m: number of queries (rows of ``new_xyz``).
        nsample: int >= 1.
        xyz: ``(n, 3)`` points.
        new_xyz: ``(m, 3)`` queries.
        offset: int ``(b,)`` cumulative end offsets of ``xyz``.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.
        idx: ``(m, nsample)`` int32 output: global rows, nearest first, ties to
            the lower index; missing neighbours are the cloud's first row.
        dist2: ``(m, nsample)`` float output: squared distances, ``1e10`` where missing.
    """
    fn = "knnquery_cuda"
    m = _int(fn, "m", m)
    nsample = _int(fn, "nsample", nsample, 1)
    if new_xyz is None:
        new_xyz = xyz
    _po._check_xyz(fn, "xyz", xyz)
    _po._check_xyz(fn, "new_xyz", new_xyz)
    if new_xyz.shape[0] != m:
        raise ValueError(f"{fn}: new_xyz must have m={m} rows, got {V._shape(new_xyz)}")
    if new_xyz.device != xyz.device or new_xyz.dtype != xyz.dtype:
        raise ValueError(f"{fn}: new_xyz must match xyz's device and dtype ({xyz.device}, {xyz.dtype}), "
                         f"got {new_xyz.device}, {new_xyz.dtype}")
    off = offsets_arg(fn, "offset", offset, xyz.shape[0], xyz.device)
    new_off = offsets_arg(fn, "new_offset", new_offset, m, xyz.device)
    if new_off.shape[0] != off.shape[0]:
        raise ValueError(f"{fn}: offset and new_offset must list the same number of clouds, "
                         f"got {off.shape[0]} and {new_off.shape[0]}")
    idx_out = _out(fn, "idx", idx, (m, nsample), xyz.device, torch.int32)
    d_out = _out(fn, "dist2", dist2, (m, nsample), xyz.device)
    with torch.no_grad():
        d, i = _pc_knn(new_xyz, xyz, nsample, query_offsets=new_off, points_offsets=off)
        starts = off - torch.diff(off, prepend=off.new_zeros(1))
        qb = torch.searchsorted(new_off, torch.arange(m, device=xyz.device), right=True)
        missing = i < 0
        i = torch.where(missing, starts[qb][:, None], i)
        d = torch.where(missing, torch.full((), 1e10, dtype=d.dtype, device=d.device), d)
    _write(idx_out, i)
    _write(d_out, d)


# --------------------------------------------------------------------------- feature ops


def _grouping_forward_postech(m, nsample, c, input, idx, output):
    """Writes ``output[i, j] = input[idx[i, j]]`` ``(m, nsample, c)``; ``idx`` in ``[0, n)``.
    """
    fn = "grouping_forward_cuda"
    m, nsample, c = _int(fn, "m", m), _int(fn, "nsample", nsample, 1), _int(fn, "c", c)
    _feat(fn, "input", input, (None, c))
    i = _idx(fn, "idx", idx, (m, nsample), input.shape[0], input.device)
    out = _out(fn, "output", output, (m, nsample, c), input.device)
    _write(out, input.index_select(0, i.reshape(-1)))


def _grouping_backward_postech(m, nsample, c, grad_output, idx, grad_input):
    """Adds the gradient of :func:`grouping_forward_cuda` into ``grad_input (n, c)``.
    """
    fn = "grouping_backward_cuda"
    m, nsample, c = _int(fn, "m", m), _int(fn, "nsample", nsample, 1), _int(fn, "c", c)
    _feat(fn, "grad_output", grad_output, (m, nsample, c))
    _feat(fn, "grad_input", grad_input, (None, c), grad_output.device)
    i = _idx(fn, "idx", idx, (m, nsample), grad_input.shape[0], grad_output.device)
    out = _out(fn, "grad_input", grad_input, tuple(grad_input.shape), grad_output.device)
    with torch.no_grad():
        out.index_add_(0, i.reshape(-1), grad_output.reshape(-1, c).to(out.dtype))


def _interpolation_forward_postech(n, c, k, input, idx, weight, output):
    """Adds ``sum_j input[idx[i, j]] * weight[i, j]`` into ``output (n, c)``.
    """
    fn = "interpolation_forward_cuda"
    n, c, k = _int(fn, "n", n), _int(fn, "c", c), _int(fn, "k", k, 1)
    _feat(fn, "input", input, (None, c))
    _feat(fn, "weight", weight, (n, k), input.device)
    i = _idx(fn, "idx", idx, (n, k), input.shape[0], input.device)
    out = _out(fn, "output", output, (n, c), input.device)
    g = input.index_select(0, i.reshape(-1)).view(n, k, c)
    _write(out, (g * weight.unsqueeze(-1)).sum(1), accumulate=True)


def _interpolation_backward_postech(n, c, k, grad_output, idx, weight, grad_input):
    """Adds the gradient of :func:`interpolation_forward_cuda` into ``grad_input (m, c)``.
    """
    fn = "interpolation_backward_cuda"
    n, c, k = _int(fn, "n", n), _int(fn, "c", c), _int(fn, "k", k, 1)
    _feat(fn, "grad_output", grad_output, (n, c))
    _feat(fn, "weight", weight, (n, k), grad_output.device)
    _feat(fn, "grad_input", grad_input, (None, c), grad_output.device)
    i = _idx(fn, "idx", idx, (n, k), grad_input.shape[0], grad_output.device)
    out = _out(fn, "grad_input", grad_input, tuple(grad_input.shape), grad_output.device)
    with torch.no_grad():
        contrib = grad_output.unsqueeze(1) * weight.unsqueeze(-1)
        out.index_add_(0, i.reshape(-1), contrib.reshape(-1, c).to(out.dtype))


def subtraction_forward_cuda(n, nsample, c, input1, input2, idx, output):
    """Writes ``output[i, j] = input1[i] - input2[idx[i, j]]`` ``(n, nsample, c)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.zeros(2, 1, 1)
        >>> x = torch.tensor([[1.0], [5.0]])
        >>> pointops_cuda.subtraction_forward_cuda(2, 1, 1, x, x, torch.tensor([[1], [0]], dtype=torch.int32), out)
        >>> out.flatten().tolist()
        [-4.0, 4.0]
    """
    fn = "subtraction_forward_cuda"
    n, nsample, c = _int(fn, "n", n), _int(fn, "nsample", nsample, 1), _int(fn, "c", c)
    _feat(fn, "input1", input1, (n, c))
    _feat(fn, "input2", input2, (None, c), input1.device)
    i = _idx(fn, "idx", idx, (n, nsample), input2.shape[0], input1.device)
    out = _out(fn, "output", output, (n, nsample, c), input1.device)
    _write(out, input1.unsqueeze(1) - input2.index_select(0, i.reshape(-1)).view(n, nsample, c))


def subtraction_backward_cuda(n, nsample, c, idx, grad_output, grad_input1, grad_input2):
    """Adds the gradients of :func:`subtraction_forward_cuda` into ``grad_input1`` / ``grad_input2``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> g1, g2 = torch.zeros(2, 1), torch.zeros(2, 1)
        >>> pointops_cuda.subtraction_backward_cuda(2, 1, 1, torch.tensor([[1], [1]], dtype=torch.int32),
        ...                                         torch.ones(2, 1, 1), g1, g2)
        >>> g1.flatten().tolist(), g2.flatten().tolist()
        ([1.0, 1.0], [0.0, -2.0])
    """
    fn = "subtraction_backward_cuda"
    n, nsample, c = _int(fn, "n", n), _int(fn, "nsample", nsample, 1), _int(fn, "c", c)
    _feat(fn, "grad_output", grad_output, (n, nsample, c))
    _feat(fn, "grad_input1", grad_input1, (n, c), grad_output.device)
    _feat(fn, "grad_input2", grad_input2, (None, c), grad_output.device)
    i = _idx(fn, "idx", idx, (n, nsample), grad_input2.shape[0], grad_output.device)
    g1 = _out(fn, "grad_input1", grad_input1, (n, c), grad_output.device)
    g2 = _out(fn, "grad_input2", grad_input2, tuple(grad_input2.shape), grad_output.device)
    with torch.no_grad():
        g1.add_(grad_output.sum(1).to(g1.dtype))
        g2.index_add_(0, i.reshape(-1), (-grad_output).reshape(-1, c).to(g2.dtype))


def aggregation_forward_cuda(n, nsample, c, w_c, input, position, weight, idx, output):
    """Adds ``sum_j (input[idx[i, j]] + position[i, j]) * weight[i, j, c % w_c]`` into ``output (n, c)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.zeros(1, 2)
        >>> pointops_cuda.aggregation_forward_cuda(1, 1, 2, 1, torch.tensor([[1.0, 2.0]]), torch.ones(1, 1, 2),
        ...     torch.full((1, 1, 1), 2.0), torch.tensor([[0]], dtype=torch.int32), out)
        >>> out.tolist()
        [[4.0, 6.0]]
    """
    fn = "aggregation_forward_cuda"
    n, nsample, c, w_c = _int(fn, "n", n), _int(fn, "nsample", nsample, 1), _int(fn, "c", c), _int(fn, "w_c", w_c, 1)
    _feat(fn, "input", input, (None, c))
    _feat(fn, "position", position, (n, nsample, c), input.device)
    _feat(fn, "weight", weight, (n, nsample, w_c), input.device)
    i = _idx(fn, "idx", idx, (n, nsample), input.shape[0], input.device)
    out = _out(fn, "output", output, (n, c), input.device)
    vals = input.index_select(0, i.reshape(-1)).view(n, nsample, c) + position
    _write(out, (vals * _tile(weight, c)).sum(1), accumulate=True)


def aggregation_backward_cuda(n, nsample, c, w_c, input, position, weight, idx, grad_output, grad_input,
                              grad_position, grad_weight):
    """Gradients of :func:`aggregation_forward_cuda`: adds to ``grad_input`` / ``grad_weight``, writes ``grad_position``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> gi, gp, gw = torch.zeros(1, 2), torch.zeros(1, 1, 2), torch.zeros(1, 1, 1)
        >>> pointops_cuda.aggregation_backward_cuda(1, 1, 2, 1, torch.tensor([[1.0, 2.0]]), torch.zeros(1, 1, 2),
        ...     torch.full((1, 1, 1), 2.0), torch.tensor([[0]], dtype=torch.int32), torch.ones(1, 2), gi, gp, gw)
        >>> gi.tolist(), gw.flatten().tolist()
        ([[2.0, 2.0]], [3.0])
    """
    fn = "aggregation_backward_cuda"
    n, nsample, c, w_c = _int(fn, "n", n), _int(fn, "nsample", nsample, 1), _int(fn, "c", c), _int(fn, "w_c", w_c, 1)
    _feat(fn, "input", input, (None, c))
    _feat(fn, "position", position, (n, nsample, c), input.device)
    _feat(fn, "weight", weight, (n, nsample, w_c), input.device)
    _feat(fn, "grad_output", grad_output, (n, c), input.device)
    i = _idx(fn, "idx", idx, (n, nsample), input.shape[0], input.device)
    gi = _out(fn, "grad_input", grad_input, tuple(input.shape), input.device)
    gp = _out(fn, "grad_position", grad_position, (n, nsample, c), input.device)
    gw = _out(fn, "grad_weight", grad_weight, (n, nsample, w_c), input.device)
    with torch.no_grad():
        wt = _tile(weight, c)
        go = grad_output.unsqueeze(1)
        gi.index_add_(0, i.reshape(-1), (go * wt).reshape(-1, c).to(gi.dtype))
        _write(gp, go * wt)
        vals = input.index_select(0, i.reshape(-1)).view(n, nsample, c) + position
        ch = torch.arange(c, device=input.device) % w_c
        gw.index_add_(2, ch, (go * vals).to(gw.dtype))


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
    return _dispatch("furthestsampling_cuda", args, kwargs, _furthestsampling_postech, _pw.furthestsampling_cuda)


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
    return _dispatch("knnquery_cuda", args, kwargs, _knnquery_postech, _pw.knnquery_cuda)


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
    return _dispatch("grouping_forward_cuda", args, kwargs, _grouping_forward_postech, _pw.grouping_forward_cuda)


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
    return _dispatch("grouping_backward_cuda", args, kwargs, _grouping_backward_postech, _pw.grouping_backward_cuda)


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
    return _dispatch("interpolation_forward_cuda", args, kwargs, _interpolation_forward_postech,
                     _pw.interpolation_forward_cuda)


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
    return _dispatch("interpolation_backward_cuda", args, kwargs, _interpolation_backward_postech,
                     _pw.interpolation_backward_cuda)
