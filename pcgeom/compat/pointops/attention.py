"""``pointops.attention``: ``attention_relation_step``, ``attention_fusion_step`` (Pointcept ``libs/pointops/functions/attention.py``)."""

from __future__ import annotations

from pcgeom import _validation as V
from pcgeom.compat.pointops._common import check_idx, same_device
from pcgeom.segment import group_reduce

__all__ = ["attention_relation_step", "attention_fusion_step"]


def _check_pairs(fn, index_target, index_refer, n_target, n_refer, device):
    it = check_idx(fn, "index_target", index_target, None, n_target, device, 1, "(m,)", allow_missing=False)
    ir = check_idx(fn, "index_refer", index_refer, None, n_refer, device, 1, "(m,)", allow_missing=False)
    if it.shape[0] != ir.shape[0]:
        raise ValueError(f"{fn}: index_target and index_refer must have the same length, got {it.shape[0]} and {ir.shape[0]}")
    return it, ir


def attention_relation_step(query, key, weight, index_target, index_refer):
    """``out[r, g] = sum_c query[index_target[r], g, c] * key[index_refer[r], g, c] * weight[c]``.

    Args:
        query: ``(n, g, c)`` floating tensor.
        key: ``(n', g, c)`` floating tensor.
        weight: ``(c,)`` channel weights (all ones for plain scatter attention).
        index_target: ``(m,)`` int rows of ``query``.
        index_refer: ``(m,)`` int rows of ``key``.

    Returns:
        ``(m, g)``, differentiable w.r.t. ``query`` and ``key`` (the original's
        backward returns no gradient for ``weight``).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> q = torch.ones(2, 1, 2)
        >>> k = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])
        >>> i = torch.tensor([0, 0, 1], dtype=torch.int32)
        >>> j = torch.tensor([0, 1, 1], dtype=torch.int32)
        >>> pointops.attention_relation_step(q, k, torch.ones(2), i, j).tolist()
        [[3.0], [7.0], [7.0]]
    """
    fn = "attention_relation_step"
    V.check_tensor(fn, "query", query, 3, "(n, g, c)")
    V.check_tensor(fn, "key", key, 3, "(n, g, c)")
    if key.shape[1:] != query.shape[1:]:
        raise ValueError(f"{fn}: key must have shape (n, {query.shape[1]}, {query.shape[2]}) like query, got {V.shape_str(key)}")
    V.check_tensor(fn, "weight", weight, 1, "(c,)")
    if weight.shape[0] != query.shape[2]:
        raise ValueError(f"{fn}: weight must have shape ({query.shape[2]},), got {V.shape_str(weight)}")
    for name, t in (("query", query), ("key", key), ("weight", weight)):
        if t.dtype not in V.FLOAT_DTYPES:
            raise TypeError(f"{fn}: {name} must be a floating tensor, got {t.dtype}")
    same_device(fn, "query", query, key=key, weight=weight)
    it, ir = _check_pairs(fn, index_target, index_refer, query.shape[0], key.shape[0], query.device)
    return (query.index_select(0, it) * key.index_select(0, ir) * weight.detach()).sum(-1)


def attention_fusion_step(weight, value, index_target, index_refer):
    """``out[index_target[r], g] += weight[r, g] * value[index_refer[r], g]``, ``(n, g, c)``.

    Args:
        weight: ``(m, g)`` attention weights.
        value: ``(n, g, c)`` floating values; the output has ``n`` rows too.
        index_target: ``(m,)`` int output rows in ``[0, n)``.
        index_refer: ``(m,)`` int rows of ``value``.

    Returns:
        ``(n, g, c)``, differentiable w.r.t. ``weight`` and ``value``.  The sums
        are :func:`pcgeom.group_reduce`'s fixed-order ones: the same bits on
        every device and run (the kernel adds atomically, in no fixed order).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> v = torch.tensor([[[1.0]], [[10.0]]])
        >>> w = torch.tensor([[0.5], [0.5]])
        >>> i = torch.tensor([0, 0], dtype=torch.int32)
        >>> pointops.attention_fusion_step(w, v, i, torch.tensor([0, 1], dtype=torch.int32)).tolist()
        [[[5.5]], [[0.0]]]
    """
    fn = "attention_fusion_step"
    V.check_tensor(fn, "weight", weight, 2, "(m, g)")
    V.check_tensor(fn, "value", value, 3, "(n, g, c)")
    for name, t in (("weight", weight), ("value", value)):
        if t.dtype not in V.FLOAT_DTYPES:
            raise TypeError(f"{fn}: {name} must be a floating tensor, got {t.dtype}")
    if weight.shape[1] != value.shape[1]:
        raise ValueError(f"{fn}: weight must have shape (m, {value.shape[1]}) like value's groups, got {V.shape_str(weight)}")
    same_device(fn, "value", value, weight=weight)
    it, ir = _check_pairs(fn, index_target, index_refer, value.shape[0], value.shape[0], value.device)
    if it.shape[0] != weight.shape[0]:
        raise ValueError(f"{fn}: weight must have shape ({it.shape[0]}, g) like index_target, got {V.shape_str(weight)}")
    contrib = weight.unsqueeze(-1) * value.index_select(0, ir)
    return group_reduce(contrib, it, value.shape[0], "sum")
