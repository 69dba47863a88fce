"""``pointops.subtraction``: ``subtraction`` (Pointcept ``libs/pointops/functions/subtraction.py``)."""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.compat.pointops._common import check_feat, check_idx, same_device
from pcgeom.ops import knn_gather as _knn_gather

__all__ = ["subtraction"]


def subtraction(input1, input2, idx):
    """``out[i, j] = input1[i] - input2[idx[i, j]]``, ``(n, nsample, c)``; zeros at ``idx = -1``.

    Args:
        input1: ``(n, c)`` floating tensor (the centres' values).
        input2: ``(n', c)`` floating tensor (the neighbours' values).
        idx: ``(n, nsample)`` int32/int64 rows of ``input2`` in ``[-1, n')``.

    Returns:
        ``(n, nsample, c)``, differentiable w.r.t. ``input1`` and ``input2``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> x = torch.tensor([[1.0], [4.0]])
        >>> pointops.subtraction(x, x, torch.tensor([[1], [0]], dtype=torch.int32)).tolist()
        [[[-3.0]], [[3.0]]]
    """
    fn = "subtraction"
    check_feat(fn, "input1", input1)
    check_feat(fn, "input2", input2)
    if input2.shape[1] != input1.shape[1]:
        raise ValueError(f"{fn}: input2 must have shape (n, {input1.shape[1]}) like input1, got {V.shape_str(input2)}")
    same_device(fn, "input1", input1, input2=input2)
    idx = check_idx(fn, "idx", idx, input1.shape[0], input2.shape[0], input1.device)
    diff = input1.unsqueeze(1) - _knn_gather(input2[None], idx[None])[0]
    return torch.where((idx >= 0).unsqueeze(-1), diff, diff.new_zeros(()))
