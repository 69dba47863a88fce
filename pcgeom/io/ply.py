"""Reading and writing point clouds as PLY files.

The header is parsed and checked here *before* any data is read, so a damaged
or hostile file fails fast with a :class:`PlyFormatError` naming the file and
the problem instead of a huge allocation, a hang, or a bare traceback: every
element's declared count is bounded by the file size (binary: each row costs
at least its scalars plus its lists' length fields, and at least one byte even
without properties; ASCII: each row costs a line), so a header claiming a
billion (or 10^12) rows in a 100-byte file is refused before anything is
allocated.  The data is then decoded here with numpy -- fixed-size rows in one
vectorised read, list properties by walking only the rows present in the file
-- so time and memory stay proportional to the file size.  Writing uses
``plyfile``.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["PlyCloud", "PlyFormatError", "read_ply", "read_ply_types", "write_ply"]

# PLY scalar type names (both spellings of the spec) -> numpy type (no byte order).
_PLY_TYPES = {
    "char": "i1", "int8": "i1",
    "uchar": "u1", "uint8": "u1",
    "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2",
    "int": "i4", "int32": "i4",
    "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4",
    "double": "f8", "float64": "f8",
}
_FORMATS = {"ascii": None, "binary_little_endian": "<", "binary_big_endian": ">"}
# numpy types torch cannot hold natively are widened (never narrowed).
_TORCH_OF = {
    "u1": torch.uint8, "i1": torch.int8, "i2": torch.int16, "u2": torch.int32, "i4": torch.int32,
    "u4": torch.int64, "f4": torch.float32, "f8": torch.float64,
}
_MAX_HEADER_BYTES = 1 << 20
_XYZ = ("x", "y", "z")
_NORMALS = ("nx", "ny", "nz")
_COLORS = ("red", "green", "blue")


class PlyFormatError(ValueError):
    """A file is not a PLY file, or its header and data disagree.  The message names the file."""


class PlyCloud(NamedTuple):
    """The vertex element of a PLY file, as tensors.

    Attributes:
        points: ``(N, 3)`` floating tensor of ``x, y, z`` (float32 unless
            ``read_ply(dtype=...)`` asked otherwise).
        colors: ``(N, 3)`` tensor of ``red, green, blue`` or ``None`` when the
            file has no colours.  Kept in the file's type: ``uint8`` in
            ``[0, 255]`` for ``uchar`` colours (the usual case), ``float32`` for
            ``float`` colours, and so on.
        normals: ``(N, 3)`` tensor of ``nx, ny, nz`` (same dtype as ``points``)
            or ``None`` when the file has no normals.
        properties: every other scalar vertex property, by name, as an
            ``(N,)`` tensor of the stored type (``ushort`` widens to int32 and
            ``uint`` to int64, which torch can hold; ``alpha`` lands here).
    """

    points: torch.Tensor
    colors: torch.Tensor | None
    normals: torch.Tensor | None
    properties: dict[str, torch.Tensor]


class _Property(NamedTuple):
    name: str
    type: str  # numpy code, e.g. "f4"
    list_len_type: str | None  # set for list properties


class _Element(NamedTuple):
    name: str
    count: int
    properties: list[_Property]


class _Header(NamedTuple):
    format: str
    elements: list[_Element]
    size: int  # bytes up to and including the end_header line


def _fail(path, what: str) -> PlyFormatError:
    return PlyFormatError(f"read_ply: {os.fspath(path)}: {what}")


def _parse_header(path, f) -> _Header:
    first = f.readline(64)
    if not first:
        raise _fail(path, "the file is empty, not a PLY file")
    if first.rstrip(b"\r\n") != b"ply":
        raise _fail(path, f"not a PLY file: the first line must be 'ply', got {first[:40]!r}")
    size = len(first)
    fmt = None
    elements: list[_Element] = []
    lineno = 1
    while True:
        raw = f.readline(_MAX_HEADER_BYTES)
        lineno += 1
        size += len(raw)
        if not raw or not raw.endswith(b"\n"):
            if size >= _MAX_HEADER_BYTES:
                raise _fail(path, f"header longer than {_MAX_HEADER_BYTES} bytes without 'end_header'")
            raise _fail(path, "the header ends without an 'end_header' line (truncated file?)")
        if size > _MAX_HEADER_BYTES:
            raise _fail(path, f"header longer than {_MAX_HEADER_BYTES} bytes without 'end_header'")
        try:
            line = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise _fail(path, f"header line {lineno} is not ASCII text: {raw[:40]!r}") from None
        words = line.split()
        if not words or words[0] in ("comment", "obj_info"):
            continue
        key = words[0]
        if key == "end_header":
            break
        if key == "format":
            if len(words) != 3 or words[1] not in _FORMATS:
                raise _fail(path, f"header line {lineno}: expected 'format ascii|binary_little_endian|binary_big_endian 1.0', got {line!r}")
            if words[2] != "1.0":
                raise _fail(path, f"header line {lineno}: unsupported PLY version {words[2]!r} (only 1.0 exists)")
            fmt = words[1]
        elif key == "element":
            if len(words) != 3 or not re.fullmatch(r"\d+", words[2]):
                raise _fail(path, f"header line {lineno}: expected 'element <name> <count>' with a count >= 0, got {line!r}")
            if any(e.name == words[1] for e in elements):
                raise _fail(path, f"header line {lineno}: element {words[1]!r} is declared twice")
            elements.append(_Element(words[1], int(words[2]), []))
        elif key == "property":
            if not elements:
                raise _fail(path, f"header line {lineno}: 'property' before any 'element': {line!r}")
            elem = elements[-1]
            if len(words) == 3:
                ptype, pname, ltype = words[1], words[2], None
            elif len(words) == 5 and words[1] == "list":
                ltype, ptype, pname = words[2], words[3], words[4]
                if ltype not in _PLY_TYPES or _PLY_TYPES[ltype][0] == "f":
                    raise _fail(path, f"header line {lineno}: list length type must be an integer type, got {ltype!r}")
            else:
                raise _fail(path, f"header line {lineno}: expected 'property <type> <name>' or 'property list <type> <type> <name>', got {line!r}")
            if ptype not in _PLY_TYPES:
                raise _fail(path, f"header line {lineno}: unknown property type {ptype!r} for {elem.name}.{pname} (known: {', '.join(_PLY_TYPES)})")
            if any(p.name == pname for p in elem.properties):
                raise _fail(path, f"header line {lineno}: property {pname!r} of element {elem.name!r} is declared twice")
            elem.properties.append(_Property(pname, _PLY_TYPES[ptype], _PLY_TYPES[ltype] if ltype else None))
        else:
            raise _fail(path, f"header line {lineno}: unknown keyword {key!r}")
    if fmt is None:
        raise _fail(path, "the header has no 'format' line")
    return _Header(fmt, elements, size)


def _min_row_bytes(e: _Element) -> int:
    """The fewest bytes one binary row of ``e`` can take: its scalars, plus each list's length field.

    An element without properties (or whose lists are all empty) still
    counts one byte per row: a header cannot declare rows that take no space
    at all, so every declared count is bounded by the file size.
    """
    row = sum(int(p.list_len_type[1]) if p.list_len_type else int(p.type[1]) for p in e.properties)
    return max(row, 1)


def _check_body_size(path, f, header: _Header) -> int:
    """Refuses headers that declare more data than the file holds, before anything is allocated.

    Binary: every element needs at least ``count * _min_row_bytes`` bytes.
    ASCII: every row of every element needs a line (also rows of elements
    without properties).  The cost is bounded by the file size, never by the
    declared counts.  Returns the file size.
    """
    f.seek(0, os.SEEK_END)
    file_size = f.tell()
    available = file_size - header.size
    desc = ", ".join(f"{e.count} {e.name}" for e in header.elements)
    if header.format == "ascii":
        needed = sum(e.count for e in header.elements)
        lines = _count_lines(f, header.size, needed)
        if lines < needed:
            raise _fail(path, f"truncated file or wrong element count: the header declares {needed} data lines ({desc}) but only {lines} follow")
        return file_size
    needed = sum(e.count * _min_row_bytes(e) for e in header.elements)
    exact = all(p.list_len_type is None for e in header.elements for p in e.properties) and all(
        e.properties for e in header.elements)
    if available < needed:
        qual = "" if exact else "at least "
        raise _fail(
            path,
            f"truncated file or wrong element count: the header declares {desc}, which needs {qual}{needed} bytes "
            f"of {header.format} data, but only {available} bytes follow the header",
        )
    return file_size


def _count_lines(f, offset: int, wanted: int) -> int:
    """Lines from ``offset`` (a last line without newline counts), reading no further than ``wanted`` needs."""
    f.seek(offset)
    lines, last = 0, b"\n"
    while lines < wanted:
        chunk = f.read(1 << 20)
        if not chunk:
            break
        lines += chunk.count(b"\n")
        last = chunk[-1:]
    if last != b"\n":
        lines += 1
    return lines


def _vertex_element(path, header: _Header) -> _Element:
    vertex = next((e for e in header.elements if e.name == "vertex"), None)
    if vertex is None:
        names = ", ".join(repr(e.name) for e in header.elements) or "none"
        raise _fail(path, f"no 'vertex' element (elements: {names})")
    props = {p.name: p for p in vertex.properties}
    missing = [c for c in _XYZ if c not in props]
    if missing:
        have = ", ".join(props) or "none"
        raise _fail(path, f"the vertex element lacks {', '.join(missing)} (its properties: {have})")
    for group in (_XYZ, _NORMALS, _COLORS):
        for c in group:
            if c in props and props[c].list_len_type is not None:
                raise _fail(path, f"vertex property {c!r} must be a scalar, but the header declares it as a list")
    return vertex


def _column(data: np.ndarray, name: str) -> np.ndarray:
    col = data[name]
    return col.astype(col.dtype.newbyteorder("="), copy=False)


def _stack(data: np.ndarray, names, np_dtype) -> np.ndarray:
    return np.stack([_column(data, n).astype(np_dtype, copy=False) for n in names], axis=1)


def _fixed_row(e: _Element) -> bool:
    return all(p.list_len_type is None for p in e.properties)


def _read_vertex(path, f, header: _Header, vertex: _Element, file_size: int) -> np.ndarray:
    """The vertex rows as a structured array of its scalar properties (after ``_check_body_size``).

    Every layout is decoded here, without plyfile: fixed-size rows in one
    vectorised read, list properties by walking the rows that are present in
    the file (each costs at least a byte, so the walk is bounded by the file
    size, never by a declared count), with a vectorised fast path when every
    row's lists have the same lengths (triangle meshes).  Elements after the
    vertex element are not decoded.
    """
    scalars = [p for p in vertex.properties if p.list_len_type is None]
    if header.format == "ascii":
        return _read_ascii(path, f, header, vertex, scalars)
    order = _FORMATS[header.format]
    dtype = np.dtype([(p.name, order + p.type) for p in scalars])
    pos = header.size
    before = header.elements[: header.elements.index(vertex)]
    if all(_fixed_row(e) for e in before) and _fixed_row(vertex):
        pos += sum(e.count * _row_itemsize(e) for e in before)
        f.seek(pos)
        data = np.fromfile(f, dtype=dtype, count=vertex.count) if vertex.count and dtype.itemsize else np.zeros(vertex.count, dtype)
        if len(data) != vertex.count:
            raise _fail(path, f"truncated file: the vertex element needs {vertex.count * dtype.itemsize} bytes from "
                              f"offset {pos}, but the file ends at {file_size}")
        return data
    f.seek(pos)
    buf = np.fromfile(f, dtype=np.uint8)  # the body: bounded by the file size
    at = 0
    for e in before:
        at, _ = _walk_binary(path, buf, at, e, order, want=False)
    _, offsets = _walk_binary(path, buf, at, vertex, order, want=True)
    out = np.empty(vertex.count, dtype=dtype)
    for j, p in enumerate(scalars):
        size = int(p.type[1])
        pick = offsets[:, j, None] + np.arange(size)
        out[p.name] = buf[pick].reshape(-1).view(order + p.type) if vertex.count else np.empty(0, order + p.type)
    return out


def _row_itemsize(e: _Element) -> int:
    return sum(int(p.type[1]) for p in e.properties)


def _walk_binary(path, buf: np.ndarray, at: int, e: _Element, order: str, *, want: bool):
    """Walks the binary rows of ``e`` from byte ``at`` of ``buf``.

    Returns ``(end, offsets)``: where the element ends, and with ``want`` an
    ``(count, n_scalar)`` int64 array of each scalar property's byte offset
    per row.  Raises :class:`PlyFormatError` at the first row that runs past
    the end of the file or has a negative list length.
    """
    n_scalar = sum(1 for p in e.properties if p.list_len_type is None)
    offsets = np.empty((e.count, n_scalar), dtype=np.int64) if want else None
    end = len(buf)

    def row(k: int, pos: int, record: bool) -> tuple[int, list[int]]:
        lens, j = [], 0
        for p in e.properties:
            if p.list_len_type is None:
                if record:
                    offsets[k, j] = pos
                j += 1
                pos += int(p.type[1])
                continue
            ls = int(p.list_len_type[1])
            if pos + ls > end:
                break
            n = int(buf[pos:pos + ls].view(order + p.list_len_type)[0])
            if n < 0:
                raise _fail(path, f"malformed data at element {e.name!r} row {k}: property {p.name!r} has a negative list length {n}")
            lens.append(n)
            pos += ls + n * int(p.type[1])
            if pos > end:
                break
        if pos > end:
            raise _fail(path, f"truncated file: element {e.name!r} row {k} runs past the end of the file "
                              f"(the header declares {e.count} rows)")
        return pos, lens

    if e.count == 0:
        return at, offsets
    # Fast path: every row's lists as long as row 0's gives a fixed stride; check it vectorised.
    nxt, lens0 = row(0, at, False)
    stride = nxt - at
    m = min(e.count, (end - at) // stride)  # rows of that stride the file can hold (>= 1)
    k0 = 0
    if m > 1:
        ok = np.ones(m, dtype=bool)
        rel, li = 0, 0
        rel_scalar = []
        for p in e.properties:
            if p.list_len_type is None:
                rel_scalar.append(rel)
                rel += int(p.type[1])
                continue
            ls = int(p.list_len_type[1])
            field = np.ndarray((m,), dtype=order + p.list_len_type, buffer=buf, offset=at + rel, strides=(stride,))
            ok &= field == lens0[li]
            rel += ls + lens0[li] * int(p.type[1])
            li += 1
        bad = np.flatnonzero(~ok)
        k0 = int(bad[0]) if len(bad) else m
        if want and k0:
            offsets[:k0] = at + np.arange(k0, dtype=np.int64)[:, None] * stride + np.asarray(rel_scalar, dtype=np.int64)
    pos = at + k0 * stride
    # The other rows (other list lengths, or past what the stride fits): each consumes >= 1 byte of
    # the file and the walk stops at its end, so this loop is bounded by the file size.
    for k in range(k0, e.count):
        pos, _ = row(k, pos, want)
    return pos, offsets


def _read_ascii(path, f, header: _Header, vertex: _Element, scalars) -> np.ndarray:
    """The vertex rows of an ASCII file: the lines of earlier elements skipped, list values skipped per line."""
    order = "="
    dtype = np.dtype([(p.name, order + p.type) for p in scalars])
    skip = sum(e.count for e in header.elements[: header.elements.index(vertex)])
    offset = _line_offset(f, header.size, skip)
    if _fixed_row(vertex):
        return _read_ascii_rows(path, f, offset, vertex, dtype)
    out = np.empty(vertex.count, dtype=dtype)
    f.seek(offset)
    text = io.TextIOWrapper(f, encoding="ascii", errors="strict", newline=None)
    try:
        for k in range(vertex.count):  # lines present: _check_body_size counted them
            words = text.readline().split()
            vals, i = [], 0
            for p in vertex.properties:
                if p.list_len_type is None:
                    vals.append((p, words[i] if i < len(words) else None))
                    i += 1
                    continue
                if i >= len(words) or not re.fullmatch(r"\d+", words[i]):
                    raise _fail(path, f"malformed data at vertex row {k}: property {p.name!r} needs a list length, "
                                      f"got {words[i] if i < len(words) else 'end of line'!r}")
                i += 1 + int(words[i])
            if i != len(words) or any(w is None for _, w in vals):
                raise _fail(path, f"malformed data at vertex row {k}: expected the values of "
                                  f"{' '.join(p.name for p in vertex.properties)}, got {len(words)} values")
            for p, w in vals:
                out[p.name][k] = _ascii_value(path, k, p, w)
    except UnicodeDecodeError as exc:
        raise _fail(path, f"malformed data in the vertex rows: {exc}") from None
    finally:
        text.detach()
    return out


def _ascii_value(path, k: int, p: _Property, word: str):
    try:
        v = float(word)
    except ValueError:
        raise _fail(path, f"malformed data at vertex row {k}: property {p.name!r} got {word!r}") from None
    if p.type[0] in "iu":
        info = np.iinfo(np.dtype(p.type))
        if not (v == round(v) and info.min <= v <= info.max):
            raise _fail(path, f"malformed data at vertex row {k}: property {p.name!r} is {_PLY_NAME_OF[p.type]}, got {v:g}")
    return v


def _line_offset(f, offset: int, lines: int) -> int:
    """The byte offset ``lines`` lines after ``offset`` (the caller checked they exist)."""
    f.seek(offset)
    while lines > 0:
        chunk = f.read(1 << 20)
        if not chunk:
            break
        n = chunk.count(b"\n")
        if n < lines:
            lines -= n
            offset += len(chunk)
            continue
        at = -1
        for _ in range(lines):
            at = chunk.index(b"\n", at + 1)
        return offset + at + 1
    return offset


def _ascii_row_error(exc: Exception, vertex: _Element) -> str:
    """numpy's parse error in PLY terms: 0-based vertex rows, the header's columns, no numpy advice."""
    names = " ".join(p.name for p in vertex.properties)
    msg = str(exc)
    m = re.match(r"the number of columns changed from (\d+) to (\d+) at row (\d+)", msg)
    if m:
        before, now, row = (int(g) for g in m.groups())
        return (f"malformed data at vertex row {row - 1}: {now} values where the rows before it have {before}; "
                f"the header declares {len(vertex.properties)} ({names})")
    m = re.match(r"could not convert string (.+) to \w+ at row (\d+), column (\d+)", msg)
    if m:
        what, row, col = m.group(1), int(m.group(2)), int(m.group(3))
        prop = vertex.properties[col - 1].name if col <= len(vertex.properties) else f"column {col}"
        # numpy counts this message's rows from 0 (the column-count one from 1)
        return f"malformed data at vertex row {row}: {prop} is {what}, not a number"
    msg = msg.split("; use `usecols`")[0]  # numpy's advice is about its API, not the file
    return f"malformed data in the vertex rows: {msg}"


def _read_ascii_rows(path, f, offset: int, vertex: _Element, dtype: np.dtype) -> np.ndarray:
    out = np.empty(vertex.count, dtype=dtype)
    if vertex.count == 0:
        return out
    f.seek(offset)
    text = io.TextIOWrapper(f, encoding="ascii", errors="strict", newline=None)
    try:
        # float64 parses every PLY scalar exactly: 32-bit integers, and the
        # float32 nearest to a decimal (9 digits are far from a rounding tie).
        table = np.loadtxt(text, dtype=np.float64, max_rows=vertex.count, ndmin=2, comments=None)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _fail(path, _ascii_row_error(exc, vertex)) from None
    finally:
        text.detach()
    ncol = len(vertex.properties)
    if table.shape != (vertex.count, ncol):
        raise _fail(path, f"malformed data: expected {vertex.count} vertex lines of {ncol} values "
                          f"({' '.join(p.name for p in vertex.properties)}), got {table.shape[0]} lines of {table.shape[1]}")
    for j, p in enumerate(vertex.properties):
        col = table[:, j]
        if p.type[0] in "iu":
            info = np.iinfo(np.dtype(p.type))
            bad = ~((col == np.round(col)) & (col >= info.min) & (col <= info.max))
            if bad.any():
                row = int(np.argmax(bad))
                raise _fail(path, f"malformed data at vertex row {row}: property {p.name!r} is "
                                  f"{_PLY_NAME_OF[p.type]}, got {float(col[row]):g}")
        out[p.name] = col
    return out


def read_ply(path: str | os.PathLike, *, dtype: torch.dtype = torch.float32) -> PlyCloud:
    """Reads the points (and colours, normals, other vertex properties) of a PLY file.

    ASCII and binary (either byte order) PLY files are read; only the
    ``vertex`` element is returned, so a mesh reads as its vertices (faces and
    other elements are checked but ignored).  The header is validated before
    any data is allocated: a file that is not PLY, is truncated, declares more
    rows than it can hold (every element counts, also one without properties:
    a binary row costs at least one byte, an ASCII row a line, so time and
    memory stay proportional to the file size), lacks ``x``/``y``/``z``, or declares a coordinate,
    normal or colour as a list raises :class:`PlyFormatError` (a
    ``ValueError``) naming the file and the problem.  List-valued vertex
    properties other than those are skipped.

    Args:
        path: the file to read.
        dtype: floating dtype of ``points`` and ``normals`` (default float32;
            ``torch.float64`` keeps ``double`` coordinates exact).

    Returns:
        :class:`PlyCloud` ``(points, colors, normals, properties)``; see its
        docstring for shapes and dtypes.  Values are exactly those stored
        (converted to ``dtype`` for points and normals).

    Raises:
        PlyFormatError: malformed file (message starts with ``read_ply: <path>:``).
        FileNotFoundError: no such file.

    Example:
        >>> import torch, tempfile, os
        >>> from pcgeom.io import read_ply, write_ply
        >>> path = os.path.join(tempfile.mkdtemp(), "cloud.ply")
        >>> pts = torch.rand(100, 3)
        >>> rgb = torch.randint(0, 256, (100, 3), dtype=torch.uint8)
        >>> _ = write_ply(path, pts, colors=rgb)
        >>> cloud = read_ply(path)
        >>> torch.equal(cloud.points, pts), torch.equal(cloud.colors, rgb), cloud.normals
        (True, True, None)
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"read_ply: dtype must be a floating torch.dtype, got {dtype!r}")
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"read_ply: {path} is a folder, not a PLY file")
    with open(path, "rb") as f:
        header = _parse_header(path, f)
        vertex = _vertex_element(path, header)
        file_size = _check_body_size(path, f, header)
        data = _read_vertex(path, f, header, vertex, file_size)
    # Decode at the target precision (float64 only when asked) to avoid a wide temporary copy.
    np_float = np.float64 if dtype == torch.float64 else np.float32
    points = torch.from_numpy(_stack(data, _XYZ, np_float)).to(dtype)
    names = {p.name for p in vertex.properties}
    normals = None
    if all(n in names for n in _NORMALS):
        normals = torch.from_numpy(_stack(data, _NORMALS, np_float)).to(dtype)
    colors = None
    if all(c in names for c in _COLORS):
        types = {p.name: p.type for p in vertex.properties if p.name in _COLORS}
        common = np.result_type(*[np.dtype(t) for t in types.values()])
        colors = torch.from_numpy(_stack(data, _COLORS, common).astype(np.dtype(_np_code(common)), copy=False))
    used = set(_XYZ) | (set(_NORMALS) if normals is not None else set()) | (set(_COLORS) if colors is not None else set())
    properties = {}
    for p in vertex.properties:
        if p.name in used or p.list_len_type is not None:
            continue
        properties[p.name] = torch.from_numpy(np.ascontiguousarray(_column(data, p.name)).astype(np.dtype(_np_code(np.dtype(p.type))), copy=False))
    return PlyCloud(points, colors, normals, properties)


def read_ply_types(path: str | os.PathLike) -> dict[str, str]:
    """The PLY type of every scalar vertex property of a file, from its header alone.

    :func:`read_ply` hands values over as tensors torch can hold (``ushort`` widens to int32,
    ``uint`` to int64, coordinates and normals become ``dtype``); this says what the file stored,
    so a writer can keep it: ``write_ply(..., types=read_ply_types(src))`` writes every column back
    in its own type (``pcgeom preprocess`` and ``pcgeom group`` do).

    Args:
        path: the PLY file.

    Returns:
        ``{name: type}`` in header order for the vertex element's scalar properties (list
        properties are left out, as :func:`read_ply` skips them), each type in the spec's first
        spelling: ``char``, ``uchar``, ``short``, ``ushort``, ``int``, ``uint``, ``float`` or
        ``double`` (a header's ``int8``, ``uint8``, ... ``float64`` are the same types).

    Raises:
        PlyFormatError: as :func:`read_ply`, for a header it would refuse.

    Example:
        >>> import torch, tempfile, os
        >>> from pcgeom.io import read_ply_types, write_ply
        >>> path = os.path.join(tempfile.mkdtemp(), "c.ply")
        >>> _ = write_ply(path, torch.rand(4, 3), properties={"i": torch.arange(4, dtype=torch.int16)})
        >>> read_ply_types(path)
        {'x': 'float', 'y': 'float', 'z': 'float', 'i': 'short'}
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"read_ply_types: {path} is a folder, not a PLY file")
    with open(path, "rb") as f:
        vertex = _vertex_element(path, _parse_header(path, f))
    return {p.name: _PLY_NAME_OF[p.type] for p in vertex.properties if p.list_len_type is None}


def _np_code(dt: np.dtype) -> str:
    """The numpy type a torch tensor can hold for a stored PLY type (widening unsigned ints)."""
    code = dt.kind + str(dt.itemsize)
    return {"u2": "i4", "u4": "i8"}.get(code, code)


# ---------------------------------------------------------------------------
# writing

_PLY_NAME_OF = {"i1": "char", "u1": "uchar", "i2": "short", "u2": "ushort", "i4": "int", "u4": "uint", "f4": "float", "f8": "double"}
_ASCII_FMT = {"f4": "%.9g", "f8": "%.17g"}  # 9 / 17 significant digits round-trip float32 / float64 exactly


def _as_numpy(fn: str, name: str, t, shape_desc: str, ndim: int, n: int | None) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        if t.dtype == torch.bfloat16:
            t = t.float()
        arr = t.detach().cpu().numpy()
    elif isinstance(t, np.ndarray):
        arr = t
    else:
        raise TypeError(f"{fn}: {name} must be a torch.Tensor or numpy array of shape {shape_desc}, got {type(t).__name__}")
    if arr.ndim != ndim or (ndim == 2 and arr.shape[1] != 3) or (n is not None and arr.shape[0] != n):
        raise ValueError(f"{fn}: {name} must have shape {shape_desc}, got {tuple(arr.shape)}")
    return arr


def _float_code(fn: str, name: str, arr: np.ndarray) -> str:
    if arr.dtype.kind != "f":
        raise TypeError(f"{fn}: {name} must be a floating tensor (float16/bfloat16/float32/float64), got {arr.dtype}")
    return "f8" if arr.dtype == np.float64 else "f4"


def _color_array(fn: str, colors, n: int) -> np.ndarray:
    arr = _as_numpy(fn, "colors", colors, f"({n}, 3)", 2, n)
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype.kind in "iu":
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError(f"{fn}: integer colors must lie in [0, 255], got values in [{arr.min()}, {arr.max()}]")
        return arr.astype(np.uint8)
    if arr.dtype.kind == "f":
        if arr.size and not (np.isfinite(arr).all() and arr.min() >= 0.0 and arr.max() <= 1.0):
            raise ValueError(
                f"{fn}: floating colors must lie in [0, 1] (they are stored as 8-bit 0-255), got values in "
                f"[{np.nanmin(arr)}, {np.nanmax(arr)}]"
            )
        return np.rint(arr.astype(np.float64) * 255.0).astype(np.uint8)
    raise TypeError(f"{fn}: colors must be uint8 in [0, 255] or floating in [0, 1], got {arr.dtype}")


def _property_array(fn: str, name: str, value, n: int) -> tuple[np.ndarray, str]:
    arr = _as_numpy(fn, f"properties[{name!r}]", value, f"({n},)", 1, n)
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if kind == "b":
        return arr.astype(np.uint8), "u1"
    if kind == "f":
        return arr, ("f8" if size == 8 else "f4")
    if kind in "iu":
        if size <= 4:
            return arr, f"{kind}{size}"
        lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
        if kind == "u" and hi <= np.iinfo(np.uint32).max:
            return arr.astype(np.uint32), "u4"
        if kind == "i" and np.iinfo(np.int32).min <= lo and hi <= np.iinfo(np.int32).max:
            return arr.astype(np.int32), "i4"
        raise ValueError(f"{fn}: properties[{name!r}] has values in [{lo}, {hi}], outside PLY's 32-bit integer types")
    raise TypeError(f"{fn}: properties[{name!r}] must be a bool, integer or floating tensor, got {arr.dtype}")


def _exact_cast(fn: str, name: str, arr: np.ndarray, code: str) -> np.ndarray:
    """``arr`` as numpy type ``code``, refusing any value that type cannot hold exactly."""
    if arr.dtype.kind == "b":
        arr = arr.astype(np.uint8)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{fn}: {name} must be a bool, integer or floating tensor, got {arr.dtype}")
    target = np.dtype(code)
    with np.errstate(all="ignore"):
        if target.kind in "iu":
            info = np.iinfo(target)
            if arr.dtype.kind == "f":
                w = arr.astype(np.float64)
                bad = ~(np.isfinite(w) & (w == np.trunc(w)) & (w >= info.min) & (w <= info.max))
            else:
                bad = (arr < info.min) | (arr > info.max)
        elif arr.dtype.kind == "f":
            bad = ~((arr.astype(target).astype(arr.dtype) == arr) | np.isnan(arr))
        else:  # integers: exact in float64 up to 2**53, then compared there
            w = arr.astype(np.float64)
            bad = (np.abs(w) > 2.0**53) | (arr.astype(target).astype(np.float64) != w)
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"{fn}: {name} cannot be stored exactly as PLY {_PLY_NAME_OF[code]}: row {row} holds "
                         f"{arr[row].item()!r} ({int(bad.sum())} such values)")
    return arr.astype(target, copy=False)


def _check_types(fn: str, types, names: list[str], colors: bool) -> dict[str, str]:
    """``types`` validated against the columns being written; values are numpy codes."""
    if types is None:
        return {}
    if not isinstance(types, dict):
        raise TypeError(f"{fn}: types must be a dict of column name -> PLY type name, got {type(types).__name__}")
    out = {}
    for name, t in types.items():
        if name not in names:
            raise ValueError(f"{fn}: types names {name!r}, which is not a column being written "
                             f"(columns: {', '.join(names)})")
        if t not in _PLY_TYPES:
            raise ValueError(f"{fn}: types[{name!r}] must be a PLY scalar type ({', '.join(_PLY_TYPES)}), got {t!r}")
        out[name] = _PLY_TYPES[t]
    given = [c for c in _COLORS if c in out]
    if colors and given and len(given) != 3:
        raise ValueError(f"{fn}: types must name all of red, green, blue or none of them, got {', '.join(given)}")
    return out


def write_ply(
    path: str | os.PathLike,
    points,
    colors=None,
    normals=None,
    *,
    properties: dict | None = None,
    types: dict[str, str] | None = None,
    binary: bool = True,
    overwrite: bool = False,
) -> Path:
    """Writes a point cloud (with optional colours, normals and extra properties) as a PLY file.

    Coordinates keep their precision: float64 is stored as ``double``,
    float16/bfloat16/float32 as ``float``, so :func:`read_ply` gives back
    exactly what was written (binary and ASCII alike: ASCII uses 9 / 17
    significant digits, enough to round-trip float32 / float64 exactly).

    Args:
        path: the file to create.  An existing file is never replaced unless
            ``overwrite=True``.
        points: ``(N, 3)`` floating tensor or numpy array (any device; detached).
        colors: optional ``(N, 3)``: ``uint8`` (or other integers) in
            ``[0, 255]``, or floating in ``[0, 1]`` (scaled by 255 and rounded).
            Stored as ``uchar red, green, blue``.
        normals: optional ``(N, 3)`` floating, stored as ``nx, ny, nz``.
        properties: optional extra vertex properties, name -> ``(N,)`` tensor
            (bool -> ``uchar``; int8/16/32, uint8 -> same width; int64 must
            fit 32 bits; float16/32 -> ``float``; float64 -> ``double``).
            A name is any PLY property name (printable ASCII without spaces)
            other than a coordinate, normal or colour column written.
        types: optional PLY type per column, name -> type name (``char``,
            ``uchar``, ``short``, ``ushort``, ``int``, ``uint``, ``float``,
            ``double`` or their ``int8`` ... ``float64`` spellings), for any of
            ``x y z``, ``nx ny nz``, ``red green blue`` (all three or none) and
            the properties; :func:`read_ply_types` gives a file's.  A named
            column is stored as its values in that type, never scaled (so
            ``ushort`` colours 0-65535 and ``float`` colours 0-255 stay as they
            are), and a value the type cannot hold exactly raises ValueError.
        binary: binary little-endian (default) or ASCII.
        overwrite: replace an existing file.

    Returns:
        The path written, as a :class:`pathlib.Path`.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False.
        TypeError, ValueError: bad shapes, dtypes or values (message names the argument).

    Example:
        >>> import torch, tempfile, os
        >>> from pcgeom.io import read_ply, write_ply
        >>> path = os.path.join(tempfile.mkdtemp(), "normals.ply")
        >>> pts, nrm = torch.rand(10, 3), torch.nn.functional.normalize(torch.randn(10, 3), dim=1)
        >>> _ = write_ply(path, pts, normals=nrm, binary=False)
        >>> torch.equal(read_ply(path).normals, nrm)
        True
    """
    import plyfile

    fn = "write_ply"
    pts = _as_numpy(fn, "points", points, "(N, 3)", 2, None)
    n = pts.shape[0]
    columns: list[tuple[str, np.ndarray, str]] = []
    code = _float_code(fn, "points", pts)
    columns += [(c, pts[:, i], code) for i, c in enumerate(_XYZ)]
    if normals is not None:
        nrm = _as_numpy(fn, "normals", normals, f"({n}, 3)", 2, n)
        code = _float_code(fn, "normals", nrm)
        columns += [(c, nrm[:, i], code) for i, c in enumerate(_NORMALS)]
    names = list(_XYZ) + (list(_NORMALS) if normals is not None else []) + (list(_COLORS) if colors is not None else [])
    names += [k for k in (properties or {}) if k not in names]
    typed = _check_types(fn, types, names, colors is not None)
    if colors is not None:
        if _COLORS[0] in typed:  # stored as they are, in the named types
            rgb = _as_numpy(fn, "colors", colors, f"({n}, 3)", 2, n)
            columns += [(c, rgb[:, i], typed[c]) for i, c in enumerate(_COLORS)]
        else:
            rgb = _color_array(fn, colors, n)
            columns += [(c, rgb[:, i], "u1") for i, c in enumerate(_COLORS)]
    for name, value in (properties or {}).items():
        # a PLY header line is split on whitespace: any other printable ASCII name reads back as written
        if not isinstance(name, str) or not re.fullmatch(r"[!-~]+", name):
            raise ValueError(f"{fn}: property names must be printable ASCII without spaces, got {name!r}")
        if any(name == c[0] for c in columns):
            raise ValueError(f"{fn}: property {name!r} clashes with a coordinate, normal or colour column")
        if name in typed:
            arr = _as_numpy(fn, f"properties[{name!r}]", value, f"({n},)", 1, n)
            columns.append((name, arr, typed[name]))
        else:
            arr, code = _property_array(fn, name, value, n)
            columns.append((name, arr, code))
    columns = [(name, _exact_cast(fn, name, arr, typed[name]) if name in typed else arr, typed.get(name, code))
               for name, arr, code in columns]
    if not isinstance(binary, bool) or not isinstance(overwrite, bool):
        raise TypeError(f"{fn}: binary and overwrite must be bool, got {binary!r} and {overwrite!r}")

    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{fn}: {path} already exists; pass overwrite=True to replace it")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{fn}: folder {path.parent} does not exist")

    record = np.empty(n, dtype=[(name, "<" + code) for name, _, code in columns])
    for name, arr, _ in columns:
        record[name] = arr
    element = plyfile.PlyElement.describe(record, "vertex")
    data = plyfile.PlyData([element], text=not binary, byte_order="<", comments=["written by pcgeom"])
    # "x" refuses to clobber a file that appeared since the check above.
    with open(path, "wb" if overwrite else "xb") as f:
        try:
            if binary:
                data.write(f)
            else:
                # plyfile formats ASCII one row at a time with 18 digits; one
                # vectorised savetxt with exact-but-short formats is ~50x faster.
                f.write(data.header.encode("ascii") + b"\n")
                table = np.stack([arr.astype(np.float64) for _, arr, _ in columns], axis=1) if n else np.empty((0, len(columns)))
                np.savetxt(f, table, fmt=[_ASCII_FMT.get(code, "%d") for _, _, code in columns], delimiter=" ")
        except BaseException:
            f.close()
            path.unlink(missing_ok=True)
            raise
    return path
