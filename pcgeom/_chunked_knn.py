"""Exact KNN over a gallery searched in bounded slices: the one chunk-and-merge.

A search kernel may keep per-call working copies of the rows it searches (a
transposed or float32 copy, normalised rows for the cosine metric); searching
the gallery in slices of at most ``chunk_bytes`` bounds those copies by the
slice, whatever the gallery size.  Merging the slices' top-k lists gives the
answer of one :func:`pcgeom.knn` call over the whole gallery, bit for bit.

Internal: the single-process search of :class:`pcgeom.nn.KNNClassifier` and
each rank's shard search in :mod:`pcgeom.distributed` both call
:func:`chunked_knn`; :func:`normalize_rows` is the one cosine normalisation of both.
"""

from __future__ import annotations

from typing import Callable

import torch

from pcgeom import _validation as V
from pcgeom.ops.knn import knn

#: The metrics of the gallery searches: squared L2, or squared L2 of L2-normalised rows.
METRICS = ("l2", "cosine")


def normalize_rows(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit L2 norm in the accumulation dtype, then rounded back to
    ``x.dtype``; rows of zeros stay zero.  The normalisation of ``metric="cosine"``
    in both :class:`pcgeom.nn.KNNClassifier` and :func:`pcgeom.distributed.knn`."""
    acc = V.acc_dtype(x.dtype)
    xa = x.to(acc)
    # Divide by max(|x|, tiny) so zero rows stay zero (no NaN, no gradient blow-up).
    norm = torch.linalg.vector_norm(xa, dim=-1, keepdim=True).clamp_min(torch.finfo(acc).tiny)
    return (xa / norm).to(x.dtype)


def chunked_knn(query: torch.Tensor, gallery: torch.Tensor, k: int, chunk_bytes: int, *,
                prepare: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`pcgeom.knn` of ``query`` over ``gallery``, slice by slice, merged.

    Each slice holds at most ``chunk_bytes`` of rows counted in the accumulation
    dtype (at least ``k`` rows).  Each slice's list is in (distance, index) order
    and the slices are in index order, so a stable sort of their concatenation
    by distance is the (distance, global index) order of one big search -- ties
    to the lower index, NaN after +inf, as in :func:`pcgeom.knn`.

    Args:
        query: ``(M, D)`` queries, as given to :func:`pcgeom.knn` (already
            prepared: normalised / cast like the gallery slices).
        gallery: ``(N, D)`` rows, ``N >= 1``, of the dtype and device of ``query``
            unless ``prepare`` converts each slice.
        k: neighbours per query, an int >= 1 (``k > N`` returns ``N`` columns).
        chunk_bytes: the slice budget.
        prepare: maps each ``(n, D)`` slice to the rows searched (e.g.
            ``normalize_rows`` then ``.to(float32)``), so the converted copy is
            never larger than a slice.  ``None``: the slice as it is.

    Returns:
        ``(dist (M, min(k, N)), idx (M, min(k, N)) int64)``: pcgeom.knn's
        distances in its output dtype, indices into ``gallery``.  No autograd:
        pass detached tensors.
    """
    n, D = gallery.shape
    rows = max(k, chunk_bytes // (D * torch.finfo(V.acc_dtype(gallery.dtype)).bits // 8))
    q = query[None]
    ds, ids = [], []
    for s in range(0, n, rows):
        e = min(n, s + rows)
        part = gallery[s:e] if prepare is None else prepare(gallery[s:e])
        d, i = knn(q, part[None], min(k, e - s))
        ds.append(d[0])
        ids.append(i[0] + s)
    if len(ds) == 1:
        return ds[0], ids[0]
    d, i = torch.cat(ds, 1), torch.cat(ids, 1)
    order = torch.sort(d, dim=1, stable=True).indices[:, :k]  # NaN sorts last, as in pcgeom.knn
    return d.gather(1, order), i.gather(1, order)
