"""``pointops.aggregation``: ``aggregation`` (Pointcept ``libs/pointops/functions/aggregation.py``)."""

from __future__ import annotations

from pcgeom.compat.pointops._common import check_feat, check_idx
from pcgeom.packed_features import aggregate_neighbors

__all__ = ["aggregation"]


def aggregation(input, position, weight, idx):
    """Point Transformer v1's aggregation ``sum_j (input[idx_j] + position_j) * weight_j``.

    ``out[i, c] = sum_j (input[idx[i, j], c] + position[i, j, c]) * weight[i, j, c % w_c]``
    (see :func:`pcgeom.aggregate_neighbors`); ``idx = -1`` slots contribute 0.

    Args:
        input: ``(n, c)`` floating values.
        position: ``(n, nsample, c)`` positional encodings.
        weight: ``(n, nsample, w_c)`` attention weights (channels shared ``c % w_c``).
        idx: ``(n, nsample)`` int32/int64 rows of ``input`` in ``[-1, n)``.

    Returns:
        ``(n, c)``, differentiable w.r.t. ``input``, ``position`` and ``weight``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> pos = torch.zeros(2, 2, 2)
        >>> w = torch.full((2, 2, 1), 0.5)
        >>> pointops.aggregation(x, pos, w, torch.tensor([[0, 1], [1, 1]], dtype=torch.int32)).tolist()
        [[2.0, 3.0], [3.0, 4.0]]
    """
    fn = "aggregation"
    check_feat(fn, "input", input)
    idx = check_idx(fn, "idx", idx, None, input.shape[0], input.device)
    return aggregate_neighbors(input, idx, weight, position)
