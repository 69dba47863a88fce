"""Point-cloud file I/O: PLY read/write with clear errors on malformed files.

``read_ply(path)`` returns a :class:`PlyCloud` ``(points, colors, normals,
properties)``; ``write_ply(path, points, colors=None, normals=None, *,
properties=None, types=None, binary=True, overwrite=False)`` never replaces an
existing file unless asked; ``read_ply_types(path)`` gives the PLY type of each
column, so ``write_ply(..., types=...)`` can write a file back in its own types.
"""

from pcgeom.io.ply import PlyCloud, PlyFormatError, read_ply, read_ply_types, write_ply

__all__ = ["PlyCloud", "PlyFormatError", "read_ply", "read_ply_types", "write_ply"]
