"""Point-cloud file I/O: PLY read/write with clear errors on malformed files.

``read_ply(path)`` returns a :class:`PlyCloud` ``(points, colors, normals,
properties)``; ``write_ply(path, points, colors=None, normals=None, *,
properties=None, binary=True, overwrite=False)`` never replaces an existing
file unless asked.
"""

from pcgeom.io.ply import PlyCloud, PlyFormatError, read_ply, write_ply

__all__ = ["PlyCloud", "PlyFormatError", "read_ply", "write_ply"]
