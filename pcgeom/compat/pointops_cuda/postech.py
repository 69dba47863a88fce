"""POSTECH-CVLab/point-transformer's packed ``pointops_cuda`` (``lib/pointops/src``), served by :mod:`pcgeom.compat.pointops_cuda`.

Packed ``(n, 3)`` clouds with cumulative end offsets; the functions fill the caller's preallocated outputs.
The names this extension shares with PointWeb's reach these through the package's per-call dispatcher.
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.compat.pointops._common import check_xyz
from pcgeom.compat.pointops.sampling import farthest_point_sampling
from pcgeom.compat.pointops_cuda._raw import feat_arg, idx_arg, int_arg, out_arg, write
from pcgeom.ops import knn as _pc_knn
from pcgeom.ops.packed import offsets_arg

__all__ = [
    "aggregation_backward_cuda",
    "aggregation_forward_cuda",
    "furthestsampling_cuda",
    "grouping_backward_cuda",
    "grouping_forward_cuda",
    "interpolation_backward_cuda",
    "interpolation_forward_cuda",
    "knnquery_cuda",
    "subtraction_backward_cuda",
    "subtraction_forward_cuda",
]


def _tile(weight, c):
    """``(n, s, w_c)`` -> ``(n, s, c)`` with channel ``c`` reading ``weight[..., c % w_c]``."""
    w_c = weight.shape[-1]
    reps = -(-c // w_c)
    return weight.repeat(1, 1, reps)[..., :c] if (reps > 1 or w_c != c) else weight


def furthestsampling_cuda(b, n_max, xyz, offset, new_offset, tmp, idx):
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
                         f"{V.shape_str(xyz) if isinstance(xyz, torch.Tensor) else type(xyz).__name__}")
    b = int_arg(fn, "b", b, 1)
    if not isinstance(offset, torch.Tensor) or offset.numel() != b:
        raise ValueError(f"{fn}: offset must have b={b} entries, got "
                         f"{V.shape_str(offset) if isinstance(offset, torch.Tensor) else type(offset).__name__}")
    res = farthest_point_sampling(xyz, offset, new_offset)
    out_arg(fn, "idx", idx, (res.shape[0],), xyz.device, torch.int32)
    write(idx, res)


def knnquery_cuda(m, nsample, xyz, new_xyz, offset, new_offset, idx, dist2):
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
    m = int_arg(fn, "m", m)
    nsample = int_arg(fn, "nsample", nsample, 1)
    if new_xyz is None:
        new_xyz = xyz
    check_xyz(fn, "xyz", xyz)
    check_xyz(fn, "new_xyz", new_xyz)
    if new_xyz.shape[0] != m:
        raise ValueError(f"{fn}: new_xyz must have m={m} rows, got {V.shape_str(new_xyz)}")
    if new_xyz.device != xyz.device or new_xyz.dtype != xyz.dtype:
        raise ValueError(f"{fn}: new_xyz must match xyz's device and dtype ({xyz.device}, {xyz.dtype}), "
                         f"got {new_xyz.device}, {new_xyz.dtype}")
    off = offsets_arg(fn, "offset", offset, xyz.shape[0], xyz.device)
    new_off = offsets_arg(fn, "new_offset", new_offset, m, xyz.device)
    if new_off.shape[0] != off.shape[0]:
        raise ValueError(f"{fn}: offset and new_offset must list the same number of clouds, "
                         f"got {off.shape[0]} and {new_off.shape[0]}")
    idx_out = out_arg(fn, "idx", idx, (m, nsample), xyz.device, torch.int32)
    d_out = out_arg(fn, "dist2", dist2, (m, nsample), xyz.device)
    with torch.no_grad():
        d, i = _pc_knn(new_xyz, xyz, nsample, query_offsets=new_off, points_offsets=off)
        starts = off - torch.diff(off, prepend=off.new_zeros(1))
        qb = torch.searchsorted(new_off, torch.arange(m, device=xyz.device), right=True)
        missing = i < 0
        i = torch.where(missing, starts[qb][:, None], i)
        d = torch.where(missing, torch.full((), 1e10, dtype=d.dtype, device=d.device), d)
    write(idx_out, i)
    write(d_out, d)


# --------------------------------------------------------------------------- feature ops


def grouping_forward_cuda(m, nsample, c, input, idx, output):
    """Writes ``output[i, j] = input[idx[i, j]]`` ``(m, nsample, c)``; ``idx`` in ``[0, n)``.
    """
    fn = "grouping_forward_cuda"
    m, nsample, c = int_arg(fn, "m", m), int_arg(fn, "nsample", nsample, 1), int_arg(fn, "c", c)
    feat_arg(fn, "input", input, (None, c))
    i = idx_arg(fn, "idx", idx, (m, nsample), input.shape[0], input.device)
    out = out_arg(fn, "output", output, (m, nsample, c), input.device)
    write(out, input.index_select(0, i.reshape(-1)))


def grouping_backward_cuda(m, nsample, c, grad_output, idx, grad_input):
    """Adds the gradient of :func:`grouping_forward_cuda` into ``grad_input (n, c)``.
    """
    fn = "grouping_backward_cuda"
    m, nsample, c = int_arg(fn, "m", m), int_arg(fn, "nsample", nsample, 1), int_arg(fn, "c", c)
    feat_arg(fn, "grad_output", grad_output, (m, nsample, c))
    feat_arg(fn, "grad_input", grad_input, (None, c), grad_output.device)
    i = idx_arg(fn, "idx", idx, (m, nsample), grad_input.shape[0], grad_output.device)
    out = out_arg(fn, "grad_input", grad_input, tuple(grad_input.shape), grad_output.device)
    with torch.no_grad():
        out.index_add_(0, i.reshape(-1), grad_output.reshape(-1, c).to(out.dtype))


def interpolation_forward_cuda(n, c, k, input, idx, weight, output):
    """Adds ``sum_j input[idx[i, j]] * weight[i, j]`` into ``output (n, c)``.
    """
    fn = "interpolation_forward_cuda"
    n, c, k = int_arg(fn, "n", n), int_arg(fn, "c", c), int_arg(fn, "k", k, 1)
    feat_arg(fn, "input", input, (None, c))
    feat_arg(fn, "weight", weight, (n, k), input.device)
    i = idx_arg(fn, "idx", idx, (n, k), input.shape[0], input.device)
    out = out_arg(fn, "output", output, (n, c), input.device)
    g = input.index_select(0, i.reshape(-1)).view(n, k, c)
    write(out, (g * weight.unsqueeze(-1)).sum(1), accumulate=True)


def interpolation_backward_cuda(n, c, k, grad_output, idx, weight, grad_input):
    """Adds the gradient of :func:`interpolation_forward_cuda` into ``grad_input (m, c)``.
    """
    fn = "interpolation_backward_cuda"
    n, c, k = int_arg(fn, "n", n), int_arg(fn, "c", c), int_arg(fn, "k", k, 1)
    feat_arg(fn, "grad_output", grad_output, (n, c))
    feat_arg(fn, "weight", weight, (n, k), grad_output.device)
    feat_arg(fn, "grad_input", grad_input, (None, c), grad_output.device)
    i = idx_arg(fn, "idx", idx, (n, k), grad_input.shape[0], grad_output.device)
    out = out_arg(fn, "grad_input", grad_input, tuple(grad_input.shape), grad_output.device)
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
    n, nsample, c = int_arg(fn, "n", n), int_arg(fn, "nsample", nsample, 1), int_arg(fn, "c", c)
    feat_arg(fn, "input1", input1, (n, c))
    feat_arg(fn, "input2", input2, (None, c), input1.device)
    i = idx_arg(fn, "idx", idx, (n, nsample), input2.shape[0], input1.device)
    out = out_arg(fn, "output", output, (n, nsample, c), input1.device)
    write(out, input1.unsqueeze(1) - input2.index_select(0, i.reshape(-1)).view(n, nsample, c))


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
    n, nsample, c = int_arg(fn, "n", n), int_arg(fn, "nsample", nsample, 1), int_arg(fn, "c", c)
    feat_arg(fn, "grad_output", grad_output, (n, nsample, c))
    feat_arg(fn, "grad_input1", grad_input1, (n, c), grad_output.device)
    feat_arg(fn, "grad_input2", grad_input2, (None, c), grad_output.device)
    i = idx_arg(fn, "idx", idx, (n, nsample), grad_input2.shape[0], grad_output.device)
    g1 = out_arg(fn, "grad_input1", grad_input1, (n, c), grad_output.device)
    g2 = out_arg(fn, "grad_input2", grad_input2, tuple(grad_input2.shape), grad_output.device)
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
    n, nsample, c, w_c = int_arg(fn, "n", n), int_arg(fn, "nsample", nsample, 1), int_arg(fn, "c", c), int_arg(fn, "w_c", w_c, 1)
    feat_arg(fn, "input", input, (None, c))
    feat_arg(fn, "position", position, (n, nsample, c), input.device)
    feat_arg(fn, "weight", weight, (n, nsample, w_c), input.device)
    i = idx_arg(fn, "idx", idx, (n, nsample), input.shape[0], input.device)
    out = out_arg(fn, "output", output, (n, c), input.device)
    vals = input.index_select(0, i.reshape(-1)).view(n, nsample, c) + position
    write(out, (vals * _tile(weight, c)).sum(1), accumulate=True)


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
    n, nsample, c, w_c = int_arg(fn, "n", n), int_arg(fn, "nsample", nsample, 1), int_arg(fn, "c", c), int_arg(fn, "w_c", w_c, 1)
    feat_arg(fn, "input", input, (None, c))
    feat_arg(fn, "position", position, (n, nsample, c), input.device)
    feat_arg(fn, "weight", weight, (n, nsample, w_c), input.device)
    feat_arg(fn, "grad_output", grad_output, (n, c), input.device)
    i = idx_arg(fn, "idx", idx, (n, nsample), input.shape[0], input.device)
    gi = out_arg(fn, "grad_input", grad_input, tuple(input.shape), input.device)
    gp = out_arg(fn, "grad_position", grad_position, (n, nsample, c), input.device)
    gw = out_arg(fn, "grad_weight", grad_weight, (n, nsample, w_c), input.device)
    with torch.no_grad():
        wt = _tile(weight, c)
        go = grad_output.unsqueeze(1)
        gi.index_add_(0, i.reshape(-1), (go * wt).reshape(-1, c).to(gi.dtype))
        write(gp, go * wt)
        vals = input.index_select(0, i.reshape(-1)).view(n, nsample, c) + position
        ch = torch.arange(c, device=input.device) % w_c
        gw.index_add_(2, ch, (go * vals).to(gw.dtype))
