"""Streamed ``pcgeom group``: FPS centres and their KNN patches of one PLY larger than memory.

:func:`group_streamed` writes the outputs of ``pcgeom group`` for one file -- the points coloured
by patch with an int ``patch`` property, the ``.pt`` of ``centers``, ``center_idx``, ``idx`` and
``neighborhoods``, optionally the picture -- equal to the in-memory command's: the PLY byte for
byte, the tensors equal.  Only the coordinates (float32, 12 bytes a point) and O(N) index arrays
are held whole; everything else goes through in chunks:

1. the coordinates are read with :func:`pcgeom.io.iter_ply` (x, y, z only) into one ``(N, 3)``
   float32 tensor, which is what the in-memory command groups (it casts to float32 too);
2. :func:`pcgeom.farthest_point_sample` over the whole cloud from index 0 (its one ``(N,)``
   distance array: 4 more bytes a point, freed afterwards);
3. the ``k`` nearest points of the ``G`` centres by :func:`pcgeom.knn_streamed` over spatial tiles
   (its ``(N,)`` tile permutation: 4 bytes a point, int32), bit for bit :func:`pcgeom.knn`, each centre at slot 0 of
   its patch as in :func:`pcgeom.group_patches`;
4. the per-point patch number (the last patch holding the point, ``-1`` for none) is looked up
   per chunk from the ``G * k`` sorted patch entries -- no ``(N,)`` label array, no ``(N, G)``
   anything -- while the PLY is read again with :func:`~pcgeom.io.iter_ply` and written with
   :class:`~pcgeom.io.PlyWriter` (columns in the input's own types, the input's colours and any
   ``patch`` column replaced by the patch colours and labels).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from pcgeom.io import PlyWriter, iter_ply, ply_info, read_ply_types
from pcgeom.io.output import publish, temporary_path
from pcgeom.ops import farthest_point_sample, knn_streamed
from pcgeom.ops.streamed import DEFAULT_BLOCK_POINTS

#: Bytes a point the streamed path holds whole: float32 coordinates (12), the FPS op's working arrays,
#: the KNN's tile permutation (8) and the transients of cutting the tiles (42 measured, with a margin).
STREAMED_BYTES_PER_POINT = 48
#: The in-memory command's peak, per point: this many times the vertex row's stored size ...
IN_MEMORY_ROW_FACTOR = 2
#: ... plus this many bytes (float32 copy, FPS, labels, colours); fitted to peak RSS at 10^6 points
#: for rows of 12, 27 and 43 bytes (64, 88 and 126 MB).
IN_MEMORY_BYTES_PER_POINT = 40
#: The most points drawn in the ``--png`` picture of a streamed run (besides the patch members).
PNG_POINTS = 200_000
_FLOOR = 1 << 20  # bytes: the smallest chunks (1024 rows) and tiles (1024 points) the budget must leave room for

_PLY_SIZE = {"char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "float": 4, "double": 8}
_REPLACED = ("red", "green", "blue", "patch")  # the columns the patch colours and labels take over
_COORDS_NORMALS = ("x", "y", "z", "nx", "ny", "nz")


class GroupedFile(NamedTuple):
    """What :func:`group_streamed` wrote: the PLY, the ``.pt`` and the picture (or ``None``)."""

    ply: Path
    pt: Path
    png: Path | None


def row_bytes(path) -> int:
    """The stored size of one vertex row of a PLY file (its scalar properties, as binary), from its header."""
    return sum(_PLY_SIZE[t] for t in read_ply_types(path).values())


def in_memory_bytes(path) -> int:
    """The estimated peak memory, in bytes, of grouping ``path`` in memory (``pcgeom group`` below its budget).

    From the header alone: ``N * (IN_MEMORY_ROW_FACTOR * row + IN_MEMORY_BYTES_PER_POINT)`` with ``N``
    the declared vertex count and ``row`` the vertex row's stored size (:func:`row_bytes`; ``27`` for
    float xyz, float normals, uchar colours, which gives 94 bytes a point).  The in-memory command
    holds the decoded rows, their tensors, a float32 copy, the labels and colours, and the rows it
    writes, all at once.
    """
    n = ply_info(path).vertex_count
    return n * (IN_MEMORY_ROW_FACTOR * row_bytes(path) + IN_MEMORY_BYTES_PER_POINT)


def streamed_bytes(n_points: int) -> int:
    """The least memory, in bytes, the streamed path needs for ``n_points`` points (its O(N) arrays)."""
    return n_points * STREAMED_BYTES_PER_POINT


def _gb(b: float) -> str:
    return f"{b / 1e9:.3g} GB"


def _sizes(fn, src, n, row, memory_bytes, block_points, chunk_points) -> tuple[int, int]:
    """``(block_points, chunk_points)``: those given, else what the budget leaves beyond the O(N) arrays."""
    from pcgeom.io.ply import DEFAULT_CHUNK_POINTS

    left = None
    if memory_bytes is not None:
        need = streamed_bytes(n)
        # the smallest chunks and tiles below still cost about 1 MB; a budget without it cannot run
        if memory_bytes < need + _FLOOR:
            raise ValueError(
                f"{fn}: a memory budget of {_gb(memory_bytes)} is too small to group {src} streamed: its "
                f"{n:,} points need about {_gb(need + _FLOOR)} ({STREAMED_BYTES_PER_POINT} bytes a point for the "
                f"coordinates and the FPS and tile arrays, plus 1 MB of chunks and tiles); give at least that")
        left = memory_bytes - need
    if chunk_points is None:
        # a chunk is held as the decoded rows, their tensors and the written record: about 4 rows + 16 bytes
        chunk_points = DEFAULT_CHUNK_POINTS if left is None else left // 2 // (4 * row + 16)
        chunk_points = int(min(max(chunk_points, 1024), DEFAULT_CHUNK_POINTS))
    if block_points is None:
        # a KNN search holds up to 8 blocks of candidates, ~40 bytes each with their gathered copies
        block_points = DEFAULT_BLOCK_POINTS if left is None else left // 2 // (8 * 40)
        block_points = int(min(max(block_points, 1024), DEFAULT_BLOCK_POINTS))
    return block_points, chunk_points


def _center_first(idx: torch.Tensor, center_idx: torch.Tensor) -> torch.Tensor:
    """Each centre at slot 0 of its row, the entries before it shifted by one, as :func:`pcgeom.group_patches`
    does.  Only a lower-indexed point at computed distance 0 can precede a centre: an exact duplicate (never
    with exact FPS, which picks the lowest of duplicates) or a distinct point whose squared distance
    underflows to 0 (|p - q| below about 2.6e-23 in float32)."""
    k = idx.shape[-1]
    c = center_idx[:, None]
    slot = torch.arange(k, device=idx.device)
    where_c = torch.where(idx == c, slot, k).amin(dim=-1, keepdim=True)  # k: pushed out of its own patch
    return torch.where(slot <= where_c, torch.cat([c, idx[:, :-1]], dim=-1), idx)


def _winners(idx: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(points, patch)``: every point in some patch, ascending, with the last patch that holds it.

    ``pcgeom group`` writes the patches in order, so where they overlap the later one wins; the
    row-major entries of ``idx`` already come in patch order, so a stable sort by point keeps
    that order within a point and its run's last entry is the winner.
    """
    g_count, k = idx.shape
    flat = idx.reshape(-1).cpu().numpy()
    g = np.repeat(np.arange(g_count, dtype=np.int32), k)
    keep = flat >= 0
    flat, g = flat[keep], g[keep]
    order = np.argsort(flat, kind="stable")
    flat, g = flat[order], g[order]
    last = np.ones(len(flat), dtype=bool)
    last[:-1] = flat[1:] != flat[:-1]
    return flat[last], g[last]


def _palette(n: int) -> np.ndarray:
    from pcgeom.vis import patch_colors

    # the in-memory command's rounding: float64 * 255, rounded half to even, to uint8
    return torch.from_numpy(patch_colors(n) * 255).round().to(torch.uint8).numpy()


def _png(pts, centers, idx, path, renderer, overwrite):
    """The picture from a bounded subsample: every s-th point plus every patch member."""
    from pcgeom.vis import render_neighbourhoods

    n = pts.shape[0]
    members = torch.unique(idx[idx >= 0])
    step = max(1, -(-n // PNG_POINTS))
    rows = torch.unique(torch.cat([torch.arange(0, n, step, device=pts.device), members]))
    local = torch.searchsorted(rows, idx.clamp_min(0))  # members are all in rows
    local = torch.where(idx >= 0, local, torch.full_like(local, -1))
    render_neighbourhoods(pts.index_select(0, rows).cpu(), centers.cpu(), local.cpu(), path, backend=renderer,
                          overwrite=overwrite)


def group_streamed(src, ply_path, pt_path, n_centers: int, k: int, *, png_path=None, renderer: str = "auto",
                   memory_bytes: int | None = None, block_points: int | None = None,
                   chunk_points: int | None = None, device=None, overwrite: bool = False,
                   progress=None) -> GroupedFile:
    """``pcgeom group``'s outputs for one PLY file, in bounded memory, equal to the in-memory command's.

    Reads ``src`` twice in chunks (:func:`pcgeom.io.iter_ply`): once for the coordinates, which it
    groups as :func:`pcgeom.group_patches` does (exact FPS from index 0, then the ``k`` nearest points of
    every centre by the streamed KNN engine, centre first), and once to write ``ply_path`` chunk by chunk.
    The outputs are those of ``pcgeom group`` (see the module docstring and ``docs/cli.md``):

    * ``ply_path``: the file's points with their normals and every other scalar vertex property in its
      own PLY type, ``red, green, blue`` (uchar) by patch (grey 204 outside every patch) and an int
      ``patch`` (the last patch holding the point, ``-1`` for none); byte for byte the in-memory file;
    * ``pt_path``: ``torch.save`` of ``{"centers": (G, 3) float32, "center_idx": (G,) int64, "idx":
      (G, k) int64, "neighborhoods": (G, k, 3) float32}``, equal to the in-memory tensors;
    * ``png_path`` (optional): the picture, drawn from at most :data:`PNG_POINTS` points (every s-th)
      plus every patch member, so it differs from the in-memory picture on clouds above that size.

    Each output is written under a hidden temporary name and moved into place when complete, the
    ``.pt`` last, so an interrupted run (even SIGKILL) never leaves a half-written output under its
    name: at most a hidden ``*.pcgeom-partial*`` file.

    Memory: ``N * STREAMED_BYTES_PER_POINT`` (48) bytes for the O(N) arrays, plus the chunks and
    tiles: ``chunk_points`` rows and ``block_points``-point tiles (taken from ``memory_bytes`` when
    not given), plus O(G * k) for the patches.

    Args:
        src: the PLY file (binary either byte order, or ASCII).
        ply_path: the ``<name>_patches.ply`` output to create.
        pt_path: the ``<name>_patches.pt`` output to create.
        n_centers: G, an int in ``[1, N]``.
        k: points per patch, an int in ``[1, N]``.
        png_path: also draw the picture there (``renderer`` as ``render_neighbourhoods``' backend).
        memory_bytes: the budget; raises ValueError when it cannot hold the O(N) arrays and 1 MB of chunks and tiles.
        block_points: tile size of the KNN (:func:`pcgeom.knn_streamed`).
        chunk_points: rows per chunk read and written.
        device: where FPS and KNN run (default CPU); the coordinates live there.
        overwrite: replace existing outputs.
        progress: the KNN's progress bar, as :func:`pcgeom.knn_streamed`.

    Returns:
        :class:`GroupedFile` ``(ply, pt, png)``.

    Raises:
        ValueError: ``n_centers`` or ``k`` out of range or exceeding the file's points, non-finite
            coordinates, a budget too small (naming what is needed and what was given), or a malformed
            file (:class:`pcgeom.io.PlyFormatError`, e.g. one that ends early or whose count does not
            match its data).
        FileExistsError: an output exists and ``overwrite`` is False.

    Example:
        >>> import os, tempfile, torch
        >>> from pcgeom.io import read_ply, write_ply
        >>> from pcgeom.streaming import group_streamed
        >>> d = tempfile.mkdtemp()
        >>> _ = write_ply(os.path.join(d, "scan.ply"), torch.rand(5000, 3, generator=torch.Generator().manual_seed(0)))
        >>> out = group_streamed(os.path.join(d, "scan.ply"), os.path.join(d, "scan_patches.ply"),
        ...                      os.path.join(d, "scan_patches.pt"), 16, 32, block_points=256, chunk_points=1000)
        >>> res = torch.load(out.pt)
        >>> res["idx"].shape, bool((res["idx"][:, 0] == res["center_idx"]).all())
        (torch.Size([16, 32]), True)
        >>> read_ply(out.ply).properties["patch"].max().item()
        15
    """
    fn = "group_streamed"
    for name, v in (("n_centers", n_centers), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{fn}: {name} must be an int >= 1, got {v!r}")
    for name, v in (("block_points", block_points), ("chunk_points", chunk_points)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{fn}: {name} must be None or an int >= 1, got {v!r}")
    if memory_bytes is not None and not memory_bytes > 0:
        raise ValueError(f"{fn}: memory_bytes must be > 0, got {memory_bytes!r}")
    src, ply_path, pt_path = Path(src), Path(ply_path), Path(pt_path)
    png_path = None if png_path is None else Path(png_path)
    device = torch.device("cpu") if device is None else torch.device(device)
    types = read_ply_types(src)
    n = ply_info(src).vertex_count
    if n < max(n_centers, k):
        raise ValueError(f"{n} points, fewer than n_centers={n_centers} / k={k}")
    block_points, chunk_points = _sizes(fn, src, n, row_bytes(src), memory_bytes, block_points, chunk_points)
    for p in [ply_path, pt_path] + ([png_path] if png_path else []):
        if p.exists() and not overwrite:
            raise FileExistsError(f"output exists: {p} (pass --overwrite to replace)")
    # read at a precision that holds every stored coordinate and normal exactly, as the command does
    wide = any(types.get(c) in ("double", "int", "uint") for c in _COORDS_NORMALS)
    read_dtype = torch.float64 if wide else torch.float32

    # 1. the coordinates, grouped in float32 like the in-memory command
    pts = torch.empty((n, 3), dtype=torch.float32, device=device)
    got, bad = 0, 0
    for c in iter_ply(src, chunk_points=chunk_points, columns=[], dtype=read_dtype):
        m = c.points.shape[0]
        if c.offset != got or got + m > n:  # iter_ply checks counts; this guards the arithmetic below
            raise ValueError(f"{fn}: {src}: rows arrived out of order ({c.offset} after {got} of {n})")
        x = c.points.to(torch.float32)
        bad += int((~torch.isfinite(x).all(1)).sum())
        pts[got:got + m] = x
        got += m
    if got != n:
        raise ValueError(f"{fn}: {src}: read {got} rows, the header declares {n}")
    if bad:
        raise ValueError(f"{bad} points have NaN or infinite coordinates")

    # 2-3. FPS over the whole cloud, then the patches through the streamed KNN
    center_idx = farthest_point_sample(pts[None], n_centers)[0]
    centers = pts.index_select(0, center_idx)
    _, idx = knn_streamed(centers, pts, k, block_points=block_points, progress=progress)
    idx = _center_first(idx, center_idx)
    neighborhoods = pts.index_select(0, idx.reshape(-1)).view(n_centers, k, 3).sub_(centers[:, None])
    result = {"centers": centers.cpu(), "center_idx": center_idx.cpu(), "idx": idx.cpu(),
              "neighborhoods": neighborhoods.cpu()}

    # 4. the coloured, labelled PLY, chunk by chunk
    members, winner = _winners(idx)
    palette = _palette(int(winner.max()) + 1 if len(winner) else 0)
    keep_types = {c: t for c, t in types.items() if c not in _REPLACED}
    written: list[Path] = []
    try:
        with PlyWriter(ply_path, count=n, types=keep_types, overwrite=overwrite) as w:
            for c in iter_ply(src, chunk_points=chunk_points, dtype=read_dtype):
                m = c.points.shape[0]
                lo, hi = np.searchsorted(members, [c.offset, c.offset + m])
                labels = np.full(m, -1, dtype=np.int32)
                labels[members[lo:hi] - c.offset] = winner[lo:hi]
                colors = np.full((m, 3), 204, dtype=np.uint8)
                inside = labels >= 0
                colors[inside] = palette[labels[inside]]
                props = {p: v for p, v in c.properties.items() if p not in _REPLACED}
                props["patch"] = torch.from_numpy(labels)
                w.write(c.points, colors=torch.from_numpy(colors), normals=c.normals, properties=props)
        written.append(ply_path)
        if png_path is not None:
            _png(pts, centers, idx, png_path, renderer, overwrite)
            written.append(png_path)
        del pts
        tmp = temporary_path(pt_path)
        try:
            torch.save(result, tmp)
            publish(tmp, pt_path, overwrite=overwrite)  # last: its presence means "finished"
        finally:
            tmp.unlink(missing_ok=True)
    except BaseException:
        if not overwrite:
            for p in written:  # nothing half-made: the outputs come as a set
                p.unlink(missing_ok=True)
        raise
    return GroupedFile(ply_path, pt_path, png_path)


__all__ = ["GroupedFile", "IN_MEMORY_BYTES_PER_POINT", "IN_MEMORY_ROW_FACTOR", "PNG_POINTS",
           "STREAMED_BYTES_PER_POINT", "group_streamed", "in_memory_bytes", "row_bytes", "streamed_bytes"]
