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

PointWeb (hszhao/PointWeb) ships a different, batched ``(B, N, 3)``
extension under the same module name (``ballquery_cuda``,
``gathering_forward_cuda``, ``featuredistribute_cuda``, ... and batched
variants of the names above).  It is **not served**: its calls are
recognised by their argument counts and types and rejected with an error
that says so, never answered with the wrong semantics.

Example:
    >>> import torch
    >>> from pcgeom.compat import pointops_cuda
    >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [5, 0, 0]])
    >>> off = torch.tensor([1, 3], dtype=torch.int32)
    >>> idx = torch.zeros(3, 2, dtype=torch.int32); d2 = torch.zeros(3, 2)
    >>> pointops_cuda.knnquery_cuda(3, 2, xyz, xyz, off, off, idx, d2)
    >>> idx.tolist(), d2[0].tolist()
    ([[0, 0], [1, 2], [2, 1]], [0.0, 10000000000.0])
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.compat import pointops as _po
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

_POINTWEB = ("pointops_cuda.{fn}: this call has the signature of PointWeb's batched (B, N, 3) extension, "
             "which pcgeom does not serve (only POSTECH point-transformer's packed pointops_cuda is served)")


def _int(fn, name, v, minimum=0):
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise TypeError(f"{fn}: {name} must be an int, got a tensor of shape {V._shape(v)}")
        v = int(v)
    return V.check_int(fn, name, v, minimum=minimum)


def _out(fn, name, t, shape, ref_device, dtype=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a preallocated torch.Tensor of shape {shape}, got {type(t).__name__}")
    if tuple(t.shape) != tuple(shape) and t.numel() != _numel(shape):
        raise ValueError(f"{fn}: {name} must have shape {tuple(shape)}, got {V._shape(t)}")
    if t.device != ref_device:
        raise ValueError(f"{fn}: {name} must be on {ref_device}, got {t.device}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{fn}: {name} must be {dtype}, got {t.dtype}")
    if dtype is None and t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be a floating tensor, got {t.dtype}")
    return t.view(shape) if t.is_contiguous() else t


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _write(dst, value, accumulate=False):
    """Writes into the caller's tensor (``copy_`` / ``add_``), whatever its memory layout."""
    with torch.no_grad():
        if accumulate:
            dst.add_(value.to(dst.dtype).view(dst.shape))
        else:
            dst.copy_(value.view(dst.shape))


def _feat(fn, name, t, shape):
    V.check_tensor(fn, name, t, len(shape), "(" + ", ".join(str(s) for s in shape) + ")")
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be a floating tensor, got {t.dtype}")
    for i, s in enumerate(shape):
        if s is not None and t.shape[i] != s:
            raise ValueError(f"{fn}: {name} must have shape {tuple(shape)}, got {V._shape(t)}")


def _idx(fn, name, idx, shape, n, device):
    if not isinstance(idx, torch.Tensor) or idx.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{fn}: {name} must be an int32 tensor of shape {shape}, got "
                        f"{idx.dtype if isinstance(idx, torch.Tensor) else type(idx).__name__}")
    if idx.numel() != _numel(shape):
        raise ValueError(f"{fn}: {name} must have shape {shape}, got {V._shape(idx)}")
    if idx.device != device:
        raise ValueError(f"{fn}: {name} must be on {device}, got {idx.device}")
    idx = idx.reshape(shape).long()
    if idx.numel():
        lo, hi = torch.stack([idx.min(), idx.max()]).tolist()
        if lo < 0 or hi >= n:
            raise ValueError(f"{fn}: {name} values must be in [0, {n}) (rows of the input), got min {lo}, max {hi}")
    return idx


def _tile(weight, c):
    """``(n, s, w_c)`` -> ``(n, s, c)`` with channel ``c`` reading ``weight[..., c % w_c]``."""
    w_c = weight.shape[-1]
    reps = -(-c // w_c)
    return weight.repeat(1, 1, reps)[..., :c] if (reps > 1 or w_c != c) else weight


# --------------------------------------------------------------------------- sampling / query


def furthestsampling_cuda(b, n_max, xyz, offset, new_offset, tmp, idx=None, *extra):
    """Writes farthest point samples of each packed cloud into ``idx (m,)`` int32.

    Args:
        b: number of clouds (``offset.numel()``).
        n_max: the largest cloud size (used by the kernel for its launch only).
        xyz: ``(n, 3)`` coordinates.
        offset: int ``(b,)`` cumulative end offsets of the points (``xyz``).
        new_offset: int ``(b,)`` cumulative end offsets of the samples.
        tmp: ``(n,)`` scratch (not written).
        idx: ``(m,)`` int32 output, ``m = new_offset[-1]``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [4, 0, 0]])
        >>> idx = torch.zeros(2, dtype=torch.int32)
        >>> pointops_cuda.furthestsampling_cuda(1, 3, xyz, torch.tensor([3], dtype=torch.int32),
        ...                                     torch.tensor([2], dtype=torch.int32), torch.zeros(3), idx)
        >>> idx.tolist()
        [0, 2]
    """
    fn = "furthestsampling_cuda"
    if idx is None or extra or not isinstance(xyz, torch.Tensor) or xyz.dim() != 2:
        raise TypeError(_POINTWEB.format(fn=fn))
    b = _int(fn, "b", b, 1)
    if not isinstance(offset, torch.Tensor) or offset.numel() != b:
        raise ValueError(f"{fn}: offset must have b={b} entries, got "
                         f"{V._shape(offset) if isinstance(offset, torch.Tensor) else type(offset).__name__}")
    res = _po.farthest_point_sampling(xyz, offset, new_offset)
    _out(fn, "idx", idx, (res.shape[0],), xyz.device, torch.int32)
    _write(idx, res)


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

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> xyz = torch.tensor([[0.0, 0, 0], [2, 0, 0]])
        >>> off = torch.tensor([2], dtype=torch.int32)
        >>> idx = torch.zeros(2, 3, dtype=torch.int32); d2 = torch.zeros(2, 3)
        >>> pointops_cuda.knnquery_cuda(2, 3, xyz, xyz, off, off, idx, d2)
        >>> idx.tolist(), d2[1].tolist()
        ([[0, 1, 0], [1, 0, 0]], [0.0, 4.0, 10000000000.0])
    """
    fn = "knnquery_cuda"
    if not isinstance(xyz, torch.Tensor):  # PointWeb: (b, n, m, nsample, xyz, new_xyz, idx, dist2)
        raise TypeError(_POINTWEB.format(fn=fn))
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


def grouping_forward_cuda(m, nsample, c, input, idx, output, *extra):
    """Writes ``output[i, j] = input[idx[i, j]]`` ``(m, nsample, c)``; ``idx`` in ``[0, n)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.zeros(1, 2, 1)
        >>> pointops_cuda.grouping_forward_cuda(1, 2, 1, torch.tensor([[3.0], [4.0]]),
        ...                                     torch.tensor([[1, 0]], dtype=torch.int32), out)
        >>> out.flatten().tolist()
        [4.0, 3.0]
    """
    fn = "grouping_forward_cuda"
    if extra or not isinstance(input, torch.Tensor):  # PointWeb: (b, c, n, m, nsample, points, idx, out)
        raise TypeError(_POINTWEB.format(fn=fn))
    m, nsample, c = _int(fn, "m", m), _int(fn, "nsample", nsample, 1), _int(fn, "c", c)
    _feat(fn, "input", input, (None, c))
    i = _idx(fn, "idx", idx, (m, nsample), input.shape[0], input.device)
    out = _out(fn, "output", output, (m, nsample, c), input.device)
    _write(out, input.index_select(0, i.reshape(-1)))


def grouping_backward_cuda(m, nsample, c, grad_output, idx, grad_input, *extra):
    """Adds the gradient of :func:`grouping_forward_cuda` into ``grad_input (n, c)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> g = torch.zeros(2, 1)
        >>> pointops_cuda.grouping_backward_cuda(1, 2, 1, torch.ones(1, 2, 1),
        ...                                      torch.tensor([[1, 1]], dtype=torch.int32), g)
        >>> g.flatten().tolist()
        [0.0, 2.0]
    """
    fn = "grouping_backward_cuda"
    if extra or not isinstance(grad_output, torch.Tensor):
        raise TypeError(_POINTWEB.format(fn=fn))
    m, nsample, c = _int(fn, "m", m), _int(fn, "nsample", nsample, 1), _int(fn, "c", c)
    _feat(fn, "grad_output", grad_output, (m, nsample, c))
    _feat(fn, "grad_input", grad_input, (None, c))
    i = _idx(fn, "idx", idx, (m, nsample), grad_input.shape[0], grad_output.device)
    out = _out(fn, "grad_input", grad_input, tuple(grad_input.shape), grad_output.device)
    with torch.no_grad():
        out.index_add_(0, i.reshape(-1), grad_output.reshape(-1, c).to(out.dtype))


def interpolation_forward_cuda(n, c, k, input, idx, weight, output, *extra):
    """Adds ``sum_j input[idx[i, j]] * weight[i, j]`` into ``output (n, c)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.zeros(1, 1)
        >>> pointops_cuda.interpolation_forward_cuda(1, 1, 2, torch.tensor([[2.0], [4.0]]),
        ...     torch.tensor([[0, 1]], dtype=torch.int32), torch.tensor([[0.5, 0.5]]), out)
        >>> out.item()
        3.0
    """
    fn = "interpolation_forward_cuda"
    if extra or not isinstance(input, torch.Tensor):  # PointWeb: (b, c, m, n, points, idx, weight, out)
        raise TypeError(_POINTWEB.format(fn=fn))
    n, c, k = _int(fn, "n", n), _int(fn, "c", c), _int(fn, "k", k, 1)
    _feat(fn, "input", input, (None, c))
    _feat(fn, "weight", weight, (n, k))
    i = _idx(fn, "idx", idx, (n, k), input.shape[0], input.device)
    out = _out(fn, "output", output, (n, c), input.device)
    g = input.index_select(0, i.reshape(-1)).view(n, k, c)
    _write(out, (g * weight.unsqueeze(-1)).sum(1), accumulate=True)


def interpolation_backward_cuda(n, c, k, grad_output, idx, weight, grad_input, *extra):
    """Adds the gradient of :func:`interpolation_forward_cuda` into ``grad_input (m, c)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> g = torch.zeros(2, 1)
        >>> pointops_cuda.interpolation_backward_cuda(1, 1, 2, torch.ones(1, 1),
        ...     torch.tensor([[0, 1]], dtype=torch.int32), torch.tensor([[0.25, 0.75]]), g)
        >>> g.flatten().tolist()
        [0.25, 0.75]
    """
    fn = "interpolation_backward_cuda"
    if extra or not isinstance(grad_output, torch.Tensor):
        raise TypeError(_POINTWEB.format(fn=fn))
    n, c, k = _int(fn, "n", n), _int(fn, "c", c), _int(fn, "k", k, 1)
    _feat(fn, "grad_output", grad_output, (n, c))
    _feat(fn, "weight", weight, (n, k))
    _feat(fn, "grad_input", grad_input, (None, c))
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
    _feat(fn, "input2", input2, (None, c))
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
    _feat(fn, "grad_input1", grad_input1, (n, c))
    _feat(fn, "grad_input2", grad_input2, (None, c))
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
    _feat(fn, "position", position, (n, nsample, c))
    _feat(fn, "weight", weight, (n, nsample, w_c))
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
    _feat(fn, "position", position, (n, nsample, c))
    _feat(fn, "weight", weight, (n, nsample, w_c))
    _feat(fn, "grad_output", grad_output, (n, c))
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
