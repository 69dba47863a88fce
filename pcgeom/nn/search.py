"""The classifier's neighbour search: each query's k nearest gallery rows.

One process: :func:`search`, pcgeom.knn over the gallery in bounded slices (the
one chunk-and-merge, :func:`pcgeom._chunked_knn.chunked_knn`), plus the
distances' autograd path.  A gallery sharded across a process group:
:func:`search_sharded` (collective, through the engine of
:func:`pcgeom.distributed.knn`) and :func:`labels_at`, which reads the labels
of global indices wherever they are held.  Both return the neighbours a
single-process search over the whole gallery returns, bit for bit.
"""

from __future__ import annotations

from typing import Callable

import torch

from pcgeom import _collectives as C
from pcgeom import _validation as V
from pcgeom._chunked_knn import chunked_knn
from pcgeom._sharded_knn import sharded_knn


def check_query(fn: str, query, gallery: torch.Tensor) -> None:
    """``query`` must be ``(B, D)`` with the gallery's D, dtype and device."""
    g = gallery
    V.check_tensor(fn, "query", query, 2, f"(B, {g.shape[1]})")
    if query.shape[1] != g.shape[1]:
        raise ValueError(
            f"{fn}: query must have shape (B, D) with the gallery's D={g.shape[1]}, got {V.shape_str(query)}"
        )
    if query.dtype != g.dtype:
        raise TypeError(
            f"{fn}: query must have the gallery's dtype {g.dtype}, got {query.dtype} "
            "(convert one of them: .to(dtype) on the query or on the classifier)"
        )
    if query.device != g.device:
        raise ValueError(f"{fn}: query must be on the gallery's device {g.device}, got {query.device}")


def search(fn: str, q: torch.Tensor, g: torch.Tensor, k: int, chunk_bytes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k nearest rows of ``g`` for each row of ``q``, with gradients to both.

    Args:
        fn: the caller's name, for the error.
        q: ``(B, D)`` checked queries, in the metric's space (normalised for cosine).
        g: ``(N, D)`` the gallery, same dtype and device.
        k: neighbours, an int >= 1; ``k > N`` raises ValueError.
        chunk_bytes: the slice budget of the search.

    Returns:
        ``(dist2 (B, k), idx (B, k) int64)``: ascending, ties to the lower index.
        float32/float64: pcgeom.knn's distances exactly, differentiable when
        ``q`` or ``g`` requires grad; float16/bfloat16: recomputed in float32.
    """
    n = g.shape[0]
    if k > n:
        raise ValueError(
            f"{fn}: k={k} is larger than the gallery ({n} items); add items with add() or lower k"
        )
    B, D = q.shape
    # Select on detached tensors: pcgeom.knn's backward would build a dense
    # (N, D) gradient for the whole gallery; the few selected rows are
    # gathered below instead.
    d_sel, idx = chunked_knn(q.detach(), g.detach(), k, chunk_bytes)
    acc = V.acc_dtype(q.dtype)
    half = q.dtype in (torch.float16, torch.bfloat16)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or g.requires_grad)
    if not (half or needs_grad):
        return d_sel, idx
    nb = g.index_select(0, idx.reshape(-1)).reshape(B, k, D)
    diff = q.to(acc)[:, None, :] - nb.to(acc)
    d_re = (diff * diff).sum(-1)
    if half:
        return d_re, idx
    # Value: pcgeom.knn's distances exactly (d_re - d_re.detach() is 0);
    # gradient: that of the recomputed distances.
    return d_sel + (d_re - d_re.detach()), idx


def search_sharded(fn: str, group: C.Group, prepare: Callable[[], tuple[torch.Tensor, torch.Tensor, int]],
                   shard: torch.Tensor, chunk_bytes: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The single-process answer from a sharded gallery (collective, no autograd graph).

    ``prepare()`` validates this rank's arguments (inside the agreement step, so
    a bad value on one rank raises on every rank) and returns ``(query (B, D)
    in the metric's space, shard, k)``; ``shard`` is this rank's ``(N_r, D)`` rows.

    Returns:
        ``(dist2 (B, k), idx (B, k) int64 global, sizes)``: ``sizes`` every
        rank's row count.  float16/bfloat16 distances are recomputed in float32
        as :func:`search` does, on the rank holding each row.
    """
    d_sel, idx, sizes, q = sharded_knn(
        fn, group, prepare, op="KNNClassifier search", chunk_bytes=chunk_bytes,
        k_within_gallery=f" across {group.world} ranks",
    )
    if q.dtype in (torch.float16, torch.bfloat16):
        d_sel = _owned_distances(group, q, idx, shard, sum(sizes[: group.rank]))
    return d_sel, idx, sizes


def _owned(idx: torch.Tensor, offset: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which global indices this rank holds (rows ``offset .. offset + n``), and their local rows (0 elsewhere)."""
    own = (idx >= offset) & (idx < offset + n)
    return own, torch.where(own, idx - offset, torch.zeros_like(idx))


def _owned_distances(group: C.Group, q: torch.Tensor, idx: torch.Tensor, g: torch.Tensor,
                     offset: int) -> torch.Tensor:
    """float32 distances to the selected rows, as the single-process path recomputes them.

    The rank holding a row evaluates the same ``(B, k, D)`` expression as
    :func:`search` (other slots hold zero rows and are masked to 0), and one
    all_reduce sums them: adding exact zeros, so each value is the holder's, bit for bit.
    """
    B, k = idx.shape
    own, loc = _owned(idx, offset, g.shape[0])
    nb = torch.zeros((B, k, g.shape[1]), dtype=g.dtype, device=g.device)
    if g.shape[0]:
        nb = torch.where(own[..., None], g.index_select(0, loc.reshape(-1)).reshape(B, k, -1), nb)
    diff = q.to(torch.float32)[:, None, :] - nb.to(torch.float32)
    d_re = (diff * diff).sum(-1)
    return C.all_reduce_sum(group, torch.where(own, d_re, torch.zeros_like(d_re)))


def labels_at(group: C.Group | None, idx: torch.Tensor, labels: torch.Tensor, offset: int) -> torch.Tensor:
    """Labels of global gallery indices ``idx`` (a collective all_reduce when ``group`` is set).

    ``labels`` are this rank's (all of them without a group), ``offset`` the
    global index of its first row.
    """
    if group is None:
        return labels[idx]
    own, loc = _owned(idx, offset, labels.shape[0])
    lab = labels[loc] if labels.numel() else torch.zeros_like(idx)
    return C.all_reduce_sum(group, torch.where(own, lab, torch.zeros_like(lab)))
