"""``pcgeom.knn_gather``: gather per-neighbour features with ``-1`` padding."""

from __future__ import annotations

import torch

from pcgeom import _validation as V


def knn_gather(x, idx) -> torch.Tensor:
    """Gathers ``x[b, idx[b, m, j]]`` into a ``(B, M, k, C)`` tensor.

    Args:
        x: ``(B, N, C)`` floating tensor (points or per-point features).
        idx: ``(B, M, k)`` int64 indices in ``[-1, N)``, e.g. from :func:`pcgeom.knn`.
            ``-1`` (padding) gathers zeros.

    Returns:
        ``(B, M, k, C)`` tensor in the dtype of ``x``; differentiable w.r.t. ``x``
        (gradients of ``-1`` slots are dropped), to any order (the backward, a
        scatter-add, has the gather as its own backward).

    Raises:
        TypeError, ValueError: bad shapes, dtypes, devices, or (eager mode) an
            index outside ``[-1, N)``.  A direct ``torch.ops.pcgeom.knn_gather``
            call checks the indices too (one pass) on the CPU; the CUDA kernel
            treats an out-of-range index like ``-1`` instead of syncing to check
            (docs/guides/limits.md).

    Example:
        >>> import torch, pcgeom
        >>> x = torch.arange(6.0).reshape(1, 3, 2)
        >>> pcgeom.knn_gather(x, torch.tensor([[[2, -1]]])).tolist()
        [[[[4.0, 5.0], [0.0, 0.0]]]]
    """
    fn = "knn_gather"
    V.check_tensor(fn, "x", x, 3, "(B, N, C)")
    if x.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: x must be float16, bfloat16, float32 or float64, got {x.dtype}")
    V.check_index_tensor(fn, "idx", idx, 3, "(B, M, k)")
    if idx.shape[0] != x.shape[0]:
        raise ValueError(f"{fn}: idx must have shape (B, M, k) with B={x.shape[0]} of x, got {tuple(idx.shape)}")
    if idx.device != x.device:
        raise ValueError(f"{fn}: x and idx must be on the same device, got {x.device} and {idx.device}")
    if not V.compiling() and idx.numel() > 0:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -1 or hi >= x.shape[1]:
            raise ValueError(f"{fn}: idx values must be in [-1, {x.shape[1]}), got min {lo}, max {hi}")
    return torch.ops.pcgeom.knn_gather(x, idx)


@torch.library.register_fake("pcgeom::knn_gather")
def _knn_gather_fake(x, idx):
    B, M, K = idx.shape
    return x.new_empty((B, M, K, x.shape[2]))


@torch.library.register_fake("pcgeom::knn_gather_backward")
def _knn_gather_backward_fake(grad, idx, n):
    return grad.new_empty((grad.shape[0], n, grad.shape[3]))


def call_first_order(op, *args):
    """Calls a backward op from a backward formula.

    In a first-order backward (grad mode off) the op's own autograd layer, a Python
    wrapper, would only redispatch to the kernel: call below it, as that wrapper does,
    so first-order gradients cost what they did before the backward ops had autograd.
    Under ``create_graph=True`` (grad mode on) or while compiling, the op goes through
    its autograd, so its result is differentiable.
    """
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return op(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def _setup_context(ctx, inputs, output):
    x, idx = inputs
    ctx.save_for_backward(idx)
    ctx.n = x.shape[1]


def _backward(ctx, grad):
    (idx,) = ctx.saved_tensors
    if grad is None or not ctx.needs_input_grad[0]:
        return None, None
    return call_first_order(torch.ops.pcgeom.knn_gather_backward.default, grad.contiguous(), idx, ctx.n), None


def _backward_setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


def _backward_backward(ctx, grad):
    # Gather and scatter-add over the same idx are adjoint: the backward of the
    # backward is the forward, so every order of derivative exists.
    (idx,) = ctx.saved_tensors
    if grad is None or not ctx.needs_input_grad[0]:
        return None, None, None
    return torch.ops.pcgeom.knn_gather(grad.contiguous(), idx), None, None


torch.library.register_autograd("pcgeom::knn_gather", _backward, setup_context=_setup_context)
torch.library.register_autograd("pcgeom::knn_gather_backward", _backward_backward,
                                setup_context=_backward_setup_context)
