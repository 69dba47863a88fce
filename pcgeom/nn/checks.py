"""Argument checks of a KNN gallery: feature matrices, label vectors and named choices.

Shared by everything that takes gallery rows -- :class:`pcgeom.nn.KNNClassifier`'s
constructor and :meth:`~pcgeom.nn.KNNClassifier.add`, and the loaders in
:mod:`pcgeom.nn.store` -- so a gallery is refused with the same message however
it arrives.  Every message names the calling function ``fn`` and the argument.
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V

#: dtypes accepted as class indices (stored as int64).


def check_choice(fn: str, name: str, value, choices) -> str:
    """``value`` if it is one of the strings ``choices``; TypeError / ValueError otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name} must be one of {choices}, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{fn}: {name} must be one of {choices}, got {value!r}")
    return value


def check_features(fn: str, name: str, t) -> None:
    """``t`` must be an ``(N, D)`` floating tensor with ``D >= 1`` (``N = 0`` is allowed)."""
    V.check_tensor(fn, name, t, 2, "(N, D)")
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if t.shape[1] < 1:
        raise ValueError(f"{fn}: {name} must have at least one feature (D >= 1), got shape {V.shape_str(t)}")


def as_labels(fn: str, name: str, labels, n: int, device) -> torch.Tensor:
    """Integer class indices ``(n,)`` as int64 on ``device`` (range checked by the caller)."""
    if not isinstance(labels, torch.Tensor):
        try:
            labels = torch.as_tensor(labels)
        except Exception as exc:
            raise TypeError(
                f"{fn}: {name} must be an integer tensor of class indices with shape ({n},), "
                f"got {type(labels).__name__}"
            ) from exc
    if labels.dtype not in V.INT_DTYPES:
        raise TypeError(
            f"{fn}: {name} must hold integer class indices (int8/16/32/64 or uint8), got dtype {labels.dtype}"
        )
    if labels.dim() != 1 or labels.shape[0] != n:
        raise ValueError(
            f"{fn}: {name} must have shape ({n},), one label per feature row, got {V.shape_str(labels)}"
        )
    return labels.to(device=device, dtype=torch.int64)


def check_label_range(fn: str, name: str, labels: torch.Tensor, num_classes: int) -> None:
    """Every label must be in ``[0, num_classes)``; the message names the first offending position."""
    if labels.numel() == 0:
        return
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= num_classes:
        bad = int(labels.argmin()) if lo < 0 else int(labels.argmax())
        raise ValueError(
            f"{fn}: {name} must be class indices in [0, num_classes={num_classes}), "
            f"got {name}[{bad}]={int(labels[bad])}"
        )
