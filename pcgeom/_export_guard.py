"""Run-time size checks that survive ``torch.export`` / ONNX export, where eager pcgeom raises.

Eager pcgeom refuses some inputs with a ValueError (``group_patches`` with
fewer points than ``n_centers`` or ``k``, ``chamfer_distance`` with an empty
cloud).  Traced for export, those Python checks run once, on the example's
sizes, and the exported file would answer any later input -- with padding
gathered as if it were data.  :func:`require` puts the check into the traced
graph instead: ``torch.ops.pcgeom_export.require(x, ok, message)`` is ``x``
when every element of ``ok`` is true and raises ``ValueError(message)``
otherwise; its ONNX translation (:func:`pcgeom.onnx.translations.require_translation`)
is a ``Reshape`` of ``x`` to its own shape that gets an invalid target shape
when ``ok`` does not hold, so onnxruntime (or any runtime) stops with an error
naming the node, whose name is ``message``.

Only while exporting (``torch.compiler.is_exporting()``): eager calls have
already raised, and ``torch.compile`` keeps pcgeom's documented compiled
behaviour.
"""

from __future__ import annotations

import torch

__all__ = ["exporting", "require", "require_op"]


def exporting() -> bool:
    """Whether the caller is being traced by ``torch.export`` (``torch.onnx.export(dynamo=True)`` included).

    False inside a dynamo trace (``torch.compile``): torch 2.10's dynamo cannot trace
    ``torch.compiler.is_exporting()`` ("torch.* op returned non-Tensor") and the checks are
    for exported files only; :func:`pcgeom.onnx.export` traces non-strictly, outside dynamo.
    """
    if torch.compiler.is_dynamo_compiling():
        return False
    return torch.compiler.is_exporting()


@torch.library.custom_op("pcgeom_export::require", mutates_args=())
def require_op(x: torch.Tensor, ok: torch.Tensor, message: str) -> torch.Tensor:
    """``x`` (a copy: custom ops may not alias) if ``ok.all()``, else ``ValueError(message)``."""
    if not bool(ok.all()):
        raise ValueError(message)
    return x.clone()


@require_op.register_fake
def _require_fake(x, ok, message):
    return torch.empty_like(x)


def _require_backward(ctx, grad):
    # The check passes x through unchanged, so its gradient passes through too (a graph that is
    # traced for export and then differentiated must not fail on it).
    return grad, None, None


require_op.register_autograd(_require_backward)


def require(x: torch.Tensor, ok: torch.Tensor, message: str) -> torch.Tensor:
    """``x``, checked at run time by an exported graph: ``message`` is raised where ``ok`` has a False element.

    Call only under :func:`exporting`; ``ok`` is a bool tensor computed from
    ``x``'s (symbolic) sizes or from input values, e.g.
    ``torch.scalar_tensor(points.shape[1]) >= k``.
    """
    return torch.ops.pcgeom_export.require(x, ok, message)
