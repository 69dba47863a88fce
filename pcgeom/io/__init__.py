"""Point-cloud file I/O: PLY read/write, whole or streamed in bounded chunks, with clear errors on malformed files.

``read_ply(path)`` returns a :class:`PlyCloud` ``(points, colors, normals,
properties)``; ``write_ply(path, points, colors=None, normals=None, *,
properties=None, types=None, binary=True, overwrite=False)`` never replaces an
existing file unless asked, and moves it into place only when complete;
``read_ply_types(path)`` gives the PLY type of each column, so
``write_ply(..., types=...)`` can write a file back in its own types.

For files larger than memory: ``iter_ply(path, chunk_points=...)`` yields
:class:`PlyChunk` s of at most ``chunk_points`` rows (the same values and
dtypes as ``read_ply``), ``ply_info(path)`` reads the header alone (element
counts, property types), and ``PlyWriter(path, ...)`` writes chunk by chunk
and publishes the file atomically on exit.
"""

from pcgeom.io.ply import (
    PlyChunk,
    PlyCloud,
    PlyFormatError,
    PlyInfo,
    PlyWriter,
    iter_ply,
    ply_info,
    read_ply,
    read_ply_types,
    write_ply,
)

__all__ = ["PlyChunk", "PlyCloud", "PlyFormatError", "PlyInfo", "PlyWriter", "iter_ply", "ply_info", "read_ply",
           "read_ply_types", "write_ply"]
