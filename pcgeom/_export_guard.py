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

import contextlib

import torch

__all__ = ["exporting", "onnx_export_scope", "require", "require_op"]

_ONNX_EXPORT = False


@contextlib.contextmanager
def onnx_export_scope():
    """Marks a :func:`pcgeom.onnx.export` call, so that its dynamo (strict) trace keeps the checks too.

    torch.onnx traces non-strictly first and falls back to a strict, dynamo trace when the
    first fails on a data-dependent size (the packed layout's padded length is one); under
    dynamo :func:`exporting` cannot ask torch and reads this flag instead.
    """
    global _ONNX_EXPORT
    before, _ONNX_EXPORT = _ONNX_EXPORT, True
    try:
        yield
    finally:
        _ONNX_EXPORT = before


def exporting() -> bool:
    """Whether the caller is being traced by ``torch.export`` (``torch.onnx.export(dynamo=True)`` included).

    Inside a dynamo trace: only under :func:`onnx_export_scope` (:func:`pcgeom.onnx.export`'s
    strict fallback). torch 2.10's dynamo cannot trace ``torch.compiler.is_exporting()``
    ("torch.* op returned non-Tensor"), and ``torch.compile`` keeps pcgeom's documented
    compiled behaviour: the checks are for exported files only.
    """
    if torch.compiler.is_dynamo_compiling():
        return _ONNX_EXPORT
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
