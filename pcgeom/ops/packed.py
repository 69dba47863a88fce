"""The packed layout: clouds concatenated into one ``(N_total, D)`` tensor.

Point Transformer / Pointcept / Sonata batch point clouds by concatenation
plus cumulative **end** offsets: cloud ``b`` is rows
``offsets[b-1]:offsets[b]`` (``offsets[-1] == N_total``, cloud 0 starts at 0).
This module serves that layout on the same native kernels as the padded one:

* the offsets are value-checked once (one host sync, in eager mode only;
  under ``torch.compile(fullgraph=True)`` set
  ``torch._dynamo.config.capture_scalar_outputs = True`` so the padded sizes,
  which depend on the offsets' values, become unbacked sizes in the graph);
* the packed rows are padded with **one gather** to ``(B, max_len, D)`` with
  per-cloud lengths, the padded kernel runs (no Python loop over clouds), and
  the result is packed back with another gather, turning per-cloud indices into
  global ones.

The round trip costs two gathers of the inputs and one of the outputs -- a few
percent of the search on scene-size clouds (see benchmarks/RESULTS-packed.md).
Memory: the padded copy holds ``B * max_len`` rows, so a very ragged batch (one
cloud of 10^6 points next to many small ones) temporarily takes ``B`` times the
largest cloud; split such batches, or call the op once per size class.

Everything the padded ops guarantee holds here unchanged: exact squared
distances, ties to the lower index, ``-1`` / ``+inf`` padding, dtypes,
gradients through ``dist2`` (the gathers are differentiable).
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom._export_guard import exporting, require



def _check_packed(fn: str, name: str, t) -> None:
    V.check_tensor(fn, name, t, 2, "(N_total, D)")
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if t.shape[1] < 1:
        raise ValueError(f"{fn}: {name} must have at least one coordinate (D >= 1), got shape {tuple(t.shape)}")


def offsets_arg(fn: str, name: str, offsets, n_total: int, device) -> torch.Tensor:
    """Validates cumulative end offsets and returns them as int64 ``(B,)`` on ``device``.

    ``None`` means one cloud holding all ``n_total`` rows.  The value checks
    (non-decreasing, non-negative, last == n_total) cost one host sync.
    """
    if offsets is None:
        return torch.full((1,), n_total, dtype=torch.int64, device=device)
    if not isinstance(offsets, torch.Tensor):
        try:
            offsets = torch.as_tensor(offsets, dtype=torch.int64)
        except Exception as exc:
            raise TypeError(f"{fn}: {name} must be an integer tensor of shape (B,), got {type(offsets).__name__}") from exc
    if offsets.dtype not in V.INT_DTYPES:
        raise TypeError(f"{fn}: {name} must be an integer tensor of shape (B,), got dtype {offsets.dtype}")
    if offsets.dim() != 1 or offsets.shape[0] < 1:
        raise ValueError(f"{fn}: {name} must have shape (B,) with B >= 1 (cumulative end offsets), got {tuple(offsets.shape)}")
    V.check_host_readable(fn, name, offsets, device)
    offsets = offsets.to(device=device, dtype=torch.int64)
    if not V.compiling():
        # One sync for all three checks.
        steps = torch.diff(offsets, prepend=offsets.new_zeros(1))
        first_bad, last = torch.stack([
            torch.where(steps < 0, torch.arange(steps.shape[0], device=device), steps.shape[0]).min(),
            offsets[-1],
        ]).tolist()
        if first_bad < offsets.shape[0]:
            b = int(first_bad)
            prev = 0 if b == 0 else int(offsets[b - 1])
            raise ValueError(
                f"{fn}: {name} must be non-decreasing cumulative end offsets starting at >= 0, "
                f"got {name}[{b}]={int(offsets[b])} after {prev}"
            )
        if last != n_total:
            raise ValueError(
                f"{fn}: {name}[-1] must equal the number of packed rows {n_total}, got {last}"
            )
    elif exporting():
        # Eager refuses these offsets above; an exported file checks them at run time instead of
        # stopping in a Concat (no cloud) or answering with clouds cut at the wrong rows.
        offsets = require(offsets, torch.scalar_tensor(offsets.shape[0], dtype=torch.int64) >= 1,
                          f"{fn}: {name} must have shape (B,) with B >= 1 (cumulative end offsets), got B=0")
        steps = torch.diff(offsets, prepend=offsets.new_zeros(1))
        ok = torch.cat([steps >= 0, offsets[-1:] == n_total])
        offsets = require(offsets, ok, f"{fn}: {name} must be non-decreasing cumulative end offsets starting at "
                          f">= 0 whose last equals the number of packed rows")
    return offsets


def starts_lengths(offsets: torch.Tensor):
    starts = torch.cat([offsets.new_zeros(1), offsets[:-1]])
    return starts, offsets - starts


def _max_len(lengths: torch.Tensor) -> int:
    return int(lengths.max()) if lengths.numel() else 0


def _pad(packed: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, max_len: int, fill=0, masked=True):
    """``(N_total, *)`` -> ``(B, max_len, *)`` with one row gather.

    Rows past a cloud's end hold ``fill`` when ``masked``; otherwise they hold
    copies of real rows, which the kernels never read (they stop at the
    lengths) and which receive zero gradient.
    """
    B = starts.shape[0]
    ar = torch.arange(max_len, device=packed.device)
    valid = ar[None, :] < lengths[:, None]
    if packed.shape[0] == 0:
        return packed.new_full((B, max_len) + tuple(packed.shape[1:]), fill), valid
    rows = (starts[:, None] + ar[None, :]).clamp_(max=packed.shape[0] - 1)
    out = packed.index_select(0, rows.reshape(-1)).reshape((B, max_len) + tuple(packed.shape[1:]))
    if not masked:
        return out, valid
    mask = valid.reshape(valid.shape + (1,) * (packed.dim() - 1))
    return torch.where(mask, out, torch.full((), fill, dtype=packed.dtype, device=packed.device)), valid


def unpad_rows(offsets: torch.Tensor, n_total: int, max_len: int):
    """For each packed row: its cloud ``b`` and its row in the flattened ``(B * max_len, *)`` padded tensor."""
    ar = torch.arange(n_total, device=offsets.device)
    b = torch.searchsorted(offsets, ar, right=True)
    starts, _ = starts_lengths(offsets)
    return b, ar + (b * max_len - starts[b])


def unpad(padded: torch.Tensor, offsets: torch.Tensor, n_total: int, rows=None):
    """``(B, max_len, *)`` -> ``(N_total, *)``: one contiguous row gather."""
    B, L = padded.shape[:2]
    if rows is None:
        rows = unpad_rows(offsets, n_total, L)[1]
    return padded.reshape((B * L,) + tuple(padded.shape[2:])).index_select(0, rows)


def pack(padded, lengths):
    """Padded ``(B, N, *)`` -> packed ``(sum(lengths), *)`` plus cumulative end offsets.

    Args:
        padded: ``(B, N, *)`` tensor of any dtype.
        lengths: int ``(B,)``; only ``padded[b, :lengths[b]]`` is kept.

    Returns:
        ``(packed, offsets)``: ``packed (lengths.sum(), *)`` with the clouds in
        batch order, and ``offsets (B,)`` int64 with ``offsets[b] =
        lengths[:b+1].sum()`` (Pointcept's convention).  Differentiable w.r.t.
        ``padded``.

    Example:
        >>> import torch, pcgeom
        >>> x = torch.arange(6.0).reshape(2, 3, 1)
        >>> p, off = pcgeom.pack(x, torch.tensor([2, 1]))
        >>> p[:, 0].tolist(), off.tolist()
        ([0.0, 1.0, 3.0], [2, 3])
    """
    fn = "pack"
    if not isinstance(padded, torch.Tensor) or padded.dim() < 2:
        raise ValueError(f"pack: padded must be a torch.Tensor of shape (B, N, *), got "
                         f"{tuple(padded.shape) if isinstance(padded, torch.Tensor) else type(padded).__name__}")
    B, N = padded.shape[:2]
    lengths = V.lengths_arg(fn, "lengths", lengths, B, N, padded.device)
    offsets = torch.cumsum(lengths, 0)
    n_total = int(offsets[-1]) if B else 0
    return unpad(padded, offsets, n_total), offsets


def unpack(packed, offsets, fill=0):
    """Packed ``(N_total, *)`` -> padded ``(B, max_len, *)`` plus lengths.

    Args:
        packed: ``(N_total, *)`` tensor of any dtype.
        offsets: int ``(B,)`` cumulative end offsets, ``offsets[-1] == N_total``.
        fill: value of the padding rows (default 0).

    Returns:
        ``(padded, lengths)``: ``padded (B, max(lengths), *)`` and ``lengths (B,)``
        int64.  Differentiable w.r.t. ``packed``.

    Example:
        >>> import torch, pcgeom
        >>> x, n = pcgeom.unpack(torch.tensor([[0.0], [1], [3]]), torch.tensor([2, 3]))
        >>> x[..., 0].tolist(), n.tolist()
        ([[0.0, 1.0], [3.0, 0.0]], [2, 1])
    """
    fn = "unpack"
    if not isinstance(packed, torch.Tensor) or packed.dim() < 1:
        raise TypeError(f"unpack: packed must be a torch.Tensor of shape (N_total, *), got {type(packed).__name__}")
    offsets = offsets_arg(fn, "offsets", offsets, packed.shape[0], packed.device)
    starts, lengths = starts_lengths(offsets)
    out, _ = _pad(packed, starts, lengths, _max_len(lengths), fill)
    return out, lengths


def _pair_offsets(fn, query, points, query_offsets, points_offsets):
    _check_packed(fn, "query", query)
    _check_packed(fn, "points", points)
    if points.shape[1] != query.shape[1]:
        raise ValueError(f"{fn}: points must have shape (N_total, D) with the D of query ({query.shape[1]}), got {tuple(points.shape)}")
    if points.dtype != query.dtype:
        raise TypeError(f"{fn}: query and points must have the same dtype, got {query.dtype} and {points.dtype}")
    if points.device != query.device:
        raise ValueError(f"{fn}: query and points must be on the same device, got {query.device} and {points.device}")
    qo = offsets_arg(fn, "query_offsets", query_offsets, query.shape[0], query.device)
    po = offsets_arg(fn, "points_offsets", points_offsets, points.shape[0], query.device)
    if qo.shape[0] != po.shape[0]:
        raise ValueError(
            f"{fn}: query_offsets and points_offsets must list the same number of clouds, "
            f"got {qo.shape[0]} and {po.shape[0]}"
        )
    return qo, po


def _search_packed(fn, op, query, points, extra, k, query_offsets, points_offsets, lengths_given, tail=()):
    if lengths_given:
        raise ValueError(f"{fn}: packed (N_total, D) inputs take query_offsets= / points_offsets=, not *_lengths")
    qo, po = _pair_offsets(fn, query, points, query_offsets, points_offsets)
    k = V.check_int(fn, "k", k, minimum=1)
    qs, ql = starts_lengths(qo)
    ps, pl = starts_lengths(po)
    # One sync for both maxima: the padded shapes must be known.
    both = torch.stack([ql.max(), pl.max()]).tolist()
    ppad, _ = _pad(points, ps, pl, both[1], masked=False)
    # Only a saving (one padded copy instead of two): while tracing (torch.compile / export) the offsets'
    # values are unknown, so equal-but-distinct offsets pad twice rather than branch on data.
    self_search = query is points and (query_offsets is points_offsets
                                       or (not V.compiling() and bool(torch.equal(qo, po))))
    qpad = ppad if self_search else _pad(query, qs, ql, both[0], masked=False)[0]
    dist2, idx = op(qpad, ppad, *extra, k, ql, pl, *tail)
    b, rows = unpad_rows(qo, query.shape[0], both[0])
    dist2 = unpad(dist2, qo, query.shape[0], rows)
    idx = unpad(idx, qo, query.shape[0], rows)
    # Local -> global, in place on the fresh packed copy (the padded output
    # can be much larger for ragged batches).
    missing = idx < 0
    idx.add_(ps[b][:, None]).masked_fill_(missing, -1)
    return dist2, idx


def packed_knn(query, points, k, query_offsets, points_offsets, lengths_given=False):
    """Packed form of :func:`pcgeom.knn`: ``(M_total, k)`` dist2 / global idx."""
    return _search_packed("knn", torch.ops.pcgeom.knn, query, points, (), k,
                          query_offsets, points_offsets, lengths_given)


def packed_ball_query(query, points, radius, k, query_offsets, points_offsets, lengths_given=False,
                      index_order=False):
    """Packed form of :func:`pcgeom.ball_query`."""
    radius = V.check_float("ball_query", "radius", radius, minimum=0.0)
    return _search_packed("ball_query", torch.ops.pcgeom.ball_query, query, points, (radius,), k,
                          query_offsets, points_offsets, lengths_given, tail=(index_order,))


def packed_farthest_point_sample(sample, points, n_samples, offsets, start_index=0, lengths_given=False):
    """Packed form of :func:`pcgeom.farthest_point_sample`, on ``sample``, the padded sampler.

    ``n_samples`` is an int (the same count for every cloud) or an int ``(B,)``
    tensor of per-cloud counts; the result is ``idx (sum n_samples,)`` int64,
    cloud after cloud, global into the packed points, ``-1`` where a cloud has
    fewer points than samples.  ``start_index`` is local to each cloud.
    """
    fn = "farthest_point_sample"
    if lengths_given:
        raise ValueError(f"{fn}: packed (N_total, D) points take offsets=, not lengths=")
    _check_packed(fn, "points", points)
    off = offsets_arg(fn, "offsets", offsets, points.shape[0], points.device)
    B = off.shape[0]
    starts, lengths = starts_lengths(off)
    if isinstance(n_samples, torch.Tensor):
        if n_samples.dtype not in V.INT_DTYPES:
            raise TypeError(f"{fn}: n_samples must be an int or an integer tensor of shape ({B},), got dtype {n_samples.dtype}")
        if n_samples.dim() != 1 or n_samples.shape[0] != B:
            raise ValueError(f"{fn}: n_samples must be an int or have shape ({B},) (one count per cloud), got {tuple(n_samples.shape)}")
        counts = n_samples.to(device=points.device, dtype=torch.int64)
        mx = torch.stack([lengths.max(), counts.max(), counts.min()]).tolist()
        if mx[2] < 0:
            raise ValueError(f"{fn}: n_samples values must be >= 0, got min {mx[2]}")
        S = mx[1]
    else:
        S = V.check_int(fn, "n_samples", n_samples, minimum=1)
        counts = torch.full((B,), S, dtype=torch.int64, device=points.device)
        mx = [int(lengths.max())]
    ppad, _ = _pad(points, starts, lengths, mx[0], masked=False)
    idx = sample(ppad, max(S, 1), lengths=lengths, start_index=start_index)
    keep = torch.arange(idx.shape[1], device=idx.device)[None, :] < counts[:, None]
    idx = torch.where(idx >= 0, idx + starts[:, None], idx)
    return idx[keep]
