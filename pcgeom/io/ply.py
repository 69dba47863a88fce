"""Reading and writing point clouds as PLY files, whole or streamed in bounded chunks.

The header is parsed and checked here *before* any data is read, so a damaged
or hostile file fails fast with a :class:`PlyFormatError` naming the file and
the problem instead of a huge allocation, a hang, or a bare traceback: every
element's declared count is bounded by the file size (binary: each row costs
at least its scalars plus its lists' length fields, and at least one byte even
without properties; ASCII: each row costs a line), so a header claiming a
billion (or 10^12) rows in a 100-byte file is refused before anything is
allocated.  The data is then decoded here with numpy, in runs of a bounded
number of rows -- fixed-size rows in vectorised reads, list properties by
walking only the rows present in the file, one read block at a time -- so time
stays proportional to the file size and memory to the run.  There is one
decoder: :func:`read_ply` is :func:`iter_ply` with one run, and
:func:`write_ply` is :class:`PlyWriter` with one chunk, so the streamed and the
in-memory paths give the same values, types and errors.
"""

from __future__ import annotations

import io
import os
import re
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np
import torch

from pcgeom.io.output import publish, temporary_path

__all__ = ["PlyChunk", "PlyCloud", "PlyFormatError", "PlyInfo", "PlyWriter", "iter_ply", "ply_info", "read_ply",
           "read_ply_types", "write_ply"]

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
_READ_BLOCK = 1 << 20  # bytes read at a time when passing over list rows or ASCII lines
DEFAULT_CHUNK_POINTS = 1 << 20  # iter_ply's default rows per chunk
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
        if _text_after_lines(f, header.size, needed):
            raise _fail(path, f"wrong element count: the header declares {needed} data lines ({desc}) but more "
                              "data follows them (rows past a declared count would be dropped silently)")
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
    # A fixed-size layout with at least one more row of the last element after the declared data: the count
    # is too small, and the rows past it would be dropped silently. Less than a row (a trailing newline,
    # padding) is tolerated, as other readers do.
    if exact and header.elements and available - needed >= _min_row_bytes(header.elements[-1]):
        raise _fail(
            path,
            f"wrong element count: the header declares {desc}, which needs {needed} bytes of {header.format} data, "
            f"but {available} bytes follow the header ({available - needed} more: rows past a declared count "
            "would be dropped silently)",
        )
    return file_size


def _text_after_lines(f, offset: int, lines: int) -> bool:
    """Whether anything but whitespace follows the first ``lines`` lines from ``offset`` (read in blocks)."""
    f.seek(offset)
    seen = 0
    while True:
        chunk = f.read(1 << 20)
        if not chunk:
            return False
        if seen < lines:
            n = chunk.count(b"\n")
            if seen + n < lines:
                seen += n
                continue
            pos = -1
            for _ in range(lines - seen):
                pos = chunk.index(b"\n", pos + 1)
            seen, chunk = lines, chunk[pos + 1:]
        if chunk.strip():
            return True


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


# ---------------------------------------------------------------------------
# reading: one decoder, in runs of a bounded number of rows
#
# read_ply is iter_ply with one run as long as the element, so the two can never disagree: the same
# checks, the same values, the same errors.  Memory per run is its rows plus one read block.


def _row_itemsize(e: _Element) -> int:
    return sum(int(p.type[1]) for p in e.properties)


def _scalar_dtype(vertex: _Element, order: str) -> np.dtype:
    return np.dtype([(p.name, order + p.type) for p in vertex.properties if p.list_len_type is None])


def _vertex_runs(path, f, header: _Header, vertex: _Element, file_size: int, chunk: int):
    """Yields ``(first_row, rows)`` for consecutive runs of at most ``chunk`` vertex rows (after ``_check_body_size``).

    ``rows`` is a structured array holding (at least) every scalar vertex property; every run but
    the last holds exactly ``chunk`` rows.  Elements before the vertex element are passed over in
    bounded blocks; elements after it are not decoded.
    """
    if header.format == "ascii":
        yield from _ascii_runs(path, f, header, vertex, chunk)
        return
    order = _FORMATS[header.format]
    before = header.elements[: header.elements.index(vertex)]
    pos = header.size
    if all(_fixed_row(e) for e in before):
        pos += sum(e.count * _row_itemsize(e) for e in before)
    else:
        for e in before:
            pos = _skip_rows(path, f, pos, e, order, file_size)
    if _fixed_row(vertex):
        row = np.dtype([(p.name, order + p.type) for p in vertex.properties])
        f.seek(pos)
        for at in range(0, vertex.count, chunk):
            m = min(chunk, vertex.count - at)
            data = np.fromfile(f, dtype=row, count=m)
            if len(data) != m:
                raise _fail(path, f"truncated file: the vertex element needs {vertex.count * row.itemsize} bytes from "
                                  f"offset {pos}, but the file ends at {file_size}")
            yield at, data
        return
    yield from _list_vertex_runs(path, f, pos, vertex, order, file_size, chunk)


def _skip_rows(path, f, pos: int, e: _Element, order: str, file_size: int):
    """Walks past the binary rows of ``e`` from byte ``pos``; returns where they end."""
    if not e.properties:  # rows without properties take no bytes
        return pos
    for _, _, _, _, end in _binary_blocks(path, f, pos, e, order, file_size, e.count, want=False):
        pos = end
    return pos


def _list_vertex_runs(path, f, pos: int, vertex: _Element, order: str, file_size: int, chunk: int):
    """Runs of vertex rows that hold list properties: scalars gathered by their byte offsets, lists skipped."""
    scalars = [p for p in vertex.properties if p.list_len_type is None]
    dtype = _scalar_dtype(vertex, order)
    out, filled, first = None, 0, 0
    for done, buf, offsets, n, _ in _binary_blocks(path, f, pos, vertex, order, file_size, chunk, want=True):
        if out is None:
            first, filled = done, 0
            out = np.empty(min(chunk, vertex.count - done), dtype=dtype)
        for j, p in enumerate(scalars):
            pick = offsets[:n, j, None] + np.arange(int(p.type[1]))
            out[p.name][filled:filled + n] = buf[pick].reshape(-1).view(order + p.type)
        filled += n
        if filled == len(out):
            yield first, out
            out = None


def _binary_blocks(path, f, pos: int, e: _Element, order: str, file_size: int, max_rows: int, *, want: bool):
    """Walks the binary rows of ``e`` from byte ``pos``, one read block at a time.

    Yields ``(first_row, block, offsets, n, end)``: ``n`` whole rows (up to the next multiple of ``max_rows``) found
    in ``block`` (a uint8 array read from the file), with ``want`` the byte offset in ``block`` of
    each row's scalar properties, and the file position after them.  A row longer than a block is
    read whole (the block doubles until it fits; bounded by the file size).
    """
    block, done = _READ_BLOCK, 0
    while done < e.count:
        f.seek(pos)
        buf = np.frombuffer(f.read(block), dtype=np.uint8)
        # never across a multiple of max_rows, so that each block feeds one chunk
        n, end, offsets = _walk_block(path, buf, e, order, done, min(max_rows - done % max_rows, e.count - done),
                                      eof=pos + len(buf) >= file_size, want=want)
        if n == 0:
            block *= 2
            continue
        pos += end
        yield done, buf, offsets, n, pos
        done += n
        block = _READ_BLOCK


def _walk_block(path, buf: np.ndarray, e: _Element, order: str, first: int, rows: int, *, eof: bool, want: bool):
    """The whole rows of ``e`` at the start of ``buf`` (at most ``rows``), numbered from ``first``.

    Returns ``(n, end, offsets)``: how many rows lie wholly in ``buf``, where they end, and with
    ``want`` an ``(rows, n_scalar)`` int64 array of each scalar property's byte offset per row.
    A row cut by the end of ``buf`` ends the walk, unless ``buf`` reaches the end of the file
    (``eof``): then it is a truncated file.  A negative list length is an error.  Each row costs
    at least one byte, so the walk is bounded by the block, never by a declared count.
    """
    n_scalar = sum(1 for p in e.properties if p.list_len_type is None)
    offsets = np.empty((rows, n_scalar), dtype=np.int64) if want else None
    end = len(buf)

    def cut(k: int):
        if eof:
            raise _fail(path, f"truncated file: element {e.name!r} row {first + k} runs past the end of the file "
                              f"(the header declares {e.count} rows)")
        return None

    def row(k: int, pos: int, record: bool):
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
                return cut(k)
            n = int(buf[pos:pos + ls].view(order + p.list_len_type)[0])
            if n < 0:
                raise _fail(path, f"malformed data at element {e.name!r} row {first + k}: property {p.name!r} has a "
                                  f"negative list length {n}")
            lens.append(n)
            pos += ls + n * int(p.type[1])
            if pos > end:
                return cut(k)
        if pos > end:
            return cut(k)
        return pos, lens

    if rows == 0:
        return 0, 0, offsets
    r0 = row(0, 0, False)
    if r0 is None:
        return 0, 0, offsets
    # Fast path: every row's lists as long as row 0's gives a fixed stride; check it vectorised.
    stride, lens0 = r0
    m = min(rows, end // stride)  # rows of that stride the block can hold (>= 1)
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
            field = np.ndarray((m,), dtype=order + p.list_len_type, buffer=buf, offset=rel, strides=(stride,))
            ok &= field == lens0[li]
            rel += ls + lens0[li] * int(p.type[1])
            li += 1
        bad = np.flatnonzero(~ok)
        k0 = int(bad[0]) if len(bad) else m
        if want and k0:
            offsets[:k0] = np.arange(k0, dtype=np.int64)[:, None] * stride + np.asarray(rel_scalar, dtype=np.int64)
    pos = k0 * stride
    # The other rows (other list lengths, or past what the stride fits): each consumes >= 1 byte of
    # the block and the walk stops at its end.
    for k in range(k0, rows):
        r = row(k, pos, want)
        if r is None:
            return k, pos, offsets
        pos = r[0]
    return rows, pos, offsets


class _Lines:
    """The lines of a file from a byte offset, handed out ``n`` at a time, reading one block at a time.

    A last line without a newline counts as a line (as ``_count_lines`` counts it).
    """

    def __init__(self, f, offset: int) -> None:
        f.seek(offset)
        self._f, self._buf, self._at = f, b"", 0

    def take(self, n: int, keep: bool = True) -> bytes:
        parts = []
        while n > 0:
            if self._at >= len(self._buf):
                self._buf, self._at = self._f.read(_READ_BLOCK), 0
                if not self._buf:
                    break
            buf, at = self._buf, self._at
            stop = -1
            if n <= 64:  # a few lines: find them one by one, not by scanning the whole block
                while n > 0:
                    i = buf.find(b"\n", at if stop < 0 else stop + 1)
                    if i < 0:
                        break
                    stop, n = i, n - 1
            else:
                c = buf.count(b"\n", at)
                if c >= n:
                    stop = at + int(np.flatnonzero(np.frombuffer(buf, np.uint8, offset=at) == 10)[n - 1])
                    n = 0
                else:
                    n -= c
            if stop < 0 or n > 0:  # the block ends first: all of it, and read on
                if keep:
                    parts.append(buf[at:])
                self._at = len(buf)
                continue
            if keep:
                parts.append(buf[at:stop + 1])
            self._at = stop + 1
        return b"".join(parts)


def _ascii_runs(path, f, header: _Header, vertex: _Element, chunk: int):
    """Runs of the vertex lines of an ASCII file: the lines of earlier elements passed over, block by block."""
    lines = _Lines(f, header.size)
    skip = sum(e.count for e in header.elements[: header.elements.index(vertex)])
    while skip:  # every line before the vertex element is a row of an earlier element (checked by _check_body_size)
        step = min(skip, 1 << 16)
        lines.take(step, keep=False)
        skip -= step
    dtype = _scalar_dtype(vertex, "=")
    for at in range(0, vertex.count, chunk):
        m = min(chunk, vertex.count - at)
        raw = lines.take(m)
        if _fixed_row(vertex):
            yield at, _ascii_table(path, raw, m, at, vertex, dtype)
        else:
            yield at, _ascii_list_rows(path, _ascii_lines(path, raw, m, at), at, vertex, dtype)


def _ascii_lines(path, raw: bytes, m: int, at: int) -> list[str]:
    """The ``m`` lines of ``raw`` (vertex rows from ``at``) as text; a byte that is not ASCII names its row."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        row = at + raw.count(b"\n", 0, exc.start)
        raise _fail(path, f"malformed data at vertex row {row}: byte {raw[exc.start]:#04x} is not ASCII text") from None
    return text.replace("\r\n", "\n").split("\n")[:m]


def _ascii_table(path, raw: bytes, m: int, at: int, vertex: _Element, dtype: np.dtype) -> np.ndarray:
    """Vertex rows ``at`` .. ``at + m - 1`` (the ``m`` lines of ``raw``) of fixed-size ASCII rows, parsed in one vectorised call."""
    ncol = len(vertex.properties)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy warns on a block of blank lines; the shape check says more
            # float64 parses every PLY scalar exactly: 32-bit integers, and the
            # float32 nearest to a decimal (9 digits are far from a rounding tie).
            # (loadtxt reads a text stream faster than a str held in a StringIO.)
            text = io.TextIOWrapper(io.BytesIO(raw), encoding="ascii", errors="strict", newline=None)
            table = np.loadtxt(text, dtype=np.float64, ndmin=2, comments=None)
        failure = None if table.shape == (m, ncol) else f"got {table.shape[0]} lines of {table.shape[1]} values"
    except UnicodeDecodeError:
        _ascii_lines(path, raw, m, at)  # raises, naming the row
        raise
    except ValueError as exc:
        failure = str(exc).split("; use `usecols`")[0]  # numpy's advice is about its API, not the file
    if failure is not None:
        raise _fail(path, _ascii_diagnosis(_ascii_lines(path, raw, m, at), at, vertex) or
                    f"malformed data in vertex rows {at} to {at + m - 1}: expected {m} lines of {ncol} values "
                    f"({' '.join(p.name for p in vertex.properties)}); {failure}")
    out = np.empty(m, dtype=dtype)
    for j, p in enumerate(vertex.properties):
        col = table[:, j]
        if p.type[0] in "iu":
            info = np.iinfo(np.dtype(p.type))
            bad = ~((col == np.round(col)) & (col >= info.min) & (col <= info.max))
            if bad.any():
                row = int(np.argmax(bad))
                raise _fail(path, f"malformed data at vertex row {at + row}: property {p.name!r} is "
                                  f"{_PLY_NAME_OF[p.type]}, got {float(col[row]):g}")
        out[p.name] = col
    return out


def _ascii_diagnosis(rows: list[str], at: int, vertex: _Element) -> str | None:
    """The first malformed line of a block numpy refused, in PLY terms (its vertex row and column)."""
    names = " ".join(p.name for p in vertex.properties)
    for i, line in enumerate(rows):
        words = line.split()
        if len(words) != len(vertex.properties):
            return (f"malformed data at vertex row {at + i}: {len(words)} values where the header declares "
                    f"{len(vertex.properties)} ({names})")
        for p, w in zip(vertex.properties, words):
            try:
                float(w)
            except ValueError:
                return f"malformed data at vertex row {at + i}: {p.name} is {w!r}, not a number"
    return None


def _ascii_list_rows(path, rows: list[str], at: int, vertex: _Element, dtype: np.dtype) -> np.ndarray:
    """Vertex rows that hold list properties, one line at a time: scalars parsed, list values skipped."""
    out = np.empty(len(rows), dtype=dtype)
    for r, line in enumerate(rows):
        k = at + r
        words = line.split()
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
            out[p.name][r] = _ascii_value(path, k, p, w)
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


def _open_checked(path, f):
    """``(header, vertex, file_size)`` of an open PLY file, after every check made before data is read."""
    header = _parse_header(path, f)
    vertex = _vertex_element(path, header)
    return header, vertex, _check_body_size(path, f, header)


def _tensors(data: np.ndarray, vertex: _Element, dtype: torch.dtype, wanted: set | None):
    """``(points, colors, normals, properties)`` of decoded vertex rows, as :class:`PlyCloud` holds them."""
    # Decode at the target precision (float64 only when asked) to avoid a wide temporary copy.
    np_float = np.float64 if dtype == torch.float64 else np.float32
    points = torch.from_numpy(_stack(data, _XYZ, np_float)).to(dtype)
    names = {p.name for p in vertex.properties if wanted is None or p.name in wanted}
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
        if p.name in used or p.list_len_type is not None or p.name not in names:
            continue
        # a fresh copy: a field of a 1-row record keeps the record's stride, which torch refuses
        properties[p.name] = torch.from_numpy(_column(data, p.name).astype(np.dtype(_np_code(np.dtype(p.type)))))
    return points, colors, normals, properties


def _check_dtype(fn: str, dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{fn}: dtype must be a floating torch.dtype, got {dtype!r}")


def _check_file(fn: str, path) -> Path:
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{fn}: {path} is a folder, not a PLY file")
    return path


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
    properties other than those are skipped.  This is :func:`iter_ply` with one
    chunk as long as the file: the same decoder, values and errors.

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
    _check_dtype("read_ply", dtype)
    path = _check_file("read_ply", path)
    with open(path, "rb") as f:
        header, vertex, file_size = _open_checked(path, f)
        # Binary rows arrive as one run (one read); ASCII text is parsed in runs of DEFAULT_CHUNK_POINTS
        # lines, so that the text of the whole file is never held next to the table.
        chunk = DEFAULT_CHUNK_POINTS if header.format == "ascii" else vertex.count
        data = None
        for at, rows in _vertex_runs(path, f, header, vertex, file_size, max(chunk, 1)):
            if data is None:
                if len(rows) == vertex.count:
                    data = rows
                    continue
                data = np.empty(vertex.count, dtype=rows.dtype)
            data[at:at + len(rows)] = rows
    if data is None:
        data = np.empty(0, dtype=_scalar_dtype(vertex, "="))
    return PlyCloud(*_tensors(data, vertex, dtype, None))


class PlyChunk(NamedTuple):
    """Consecutive rows of a PLY file's vertex element, as :func:`iter_ply` yields them.

    Attributes:
        points: ``(M, 3)`` floating tensor of ``x, y, z`` (``dtype`` of :func:`iter_ply`).
        colors: ``(M, 3)`` ``red, green, blue`` in the file's type (as :class:`PlyCloud`), or ``None``.
        normals: ``(M, 3)`` ``nx, ny, nz`` (same dtype as ``points``), or ``None``.
        properties: every other scalar vertex property asked for, name -> ``(M,)`` tensor
            (``ushort`` widens to int32 and ``uint`` to int64, as :func:`read_ply` gives them).
        offset: the file row of ``points[0]``: chunk ``i`` starts at row ``i * chunk_points``.
    """

    points: torch.Tensor
    colors: torch.Tensor | None
    normals: torch.Tensor | None
    properties: dict[str, torch.Tensor]
    offset: int


def _check_columns(fn: str, path, vertex: _Element, columns) -> set | None:
    if columns is None:
        return None
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise TypeError(f"{fn}: columns must be a list of vertex property names, got {columns!r}")
    props = {p.name: p for p in vertex.properties}
    scalars = ", ".join(p.name for p in vertex.properties if p.list_len_type is None)
    for c in columns:
        if c not in props:
            raise ValueError(f"{fn}: columns names {c!r}, which is not a vertex property of {os.fspath(path)} "
                             f"(its scalar properties: {scalars})")
        if props[c].list_len_type is not None:
            raise ValueError(f"{fn}: columns names {c!r}, a list property of {os.fspath(path)}; only scalar "
                             f"properties are read (its scalar properties: {scalars})")
    return set(columns)


def iter_ply(
    path: str | os.PathLike,
    *,
    chunk_points: int = DEFAULT_CHUNK_POINTS,
    columns: list[str] | None = None,
    dtype: torch.dtype = torch.float32,
) -> Iterator[PlyChunk]:
    """Reads a PLY file's vertex element in chunks of at most ``chunk_points`` rows, in bounded memory.

    The same decoder as :func:`read_ply` (which is this with one chunk): binary little- and
    big-endian and ASCII files, elements before or after the vertex element (their rows are
    passed over one read block at a time), list properties skipped.  Concatenating the chunks
    gives exactly :func:`read_ply`'s tensors, values and dtypes, for any ``chunk_points``.

    Every check that needs no data runs when ``iter_ply`` is called, before it returns: the
    header, the ``vertex`` element and its ``x``/``y``/``z``, and every element's count
    against the file size (an ASCII file's lines are counted, one block at a time).  A defect
    found in the data (a bad value, a list row running past the end) raises when its chunk is
    reached, so the chunks before it have been handed out; the message is the one
    :func:`read_ply` gives for the same file (it starts with ``read_ply: <path>:``).

    Memory: about ``chunk_points`` rows (the decoded chunk and its tensors) plus one 1 MiB read
    block, whatever the file size; a single list row longer than a block is read whole.

    Args:
        path: the PLY file.
        chunk_points: rows per chunk, an int >= 1 (default 1,048,576); every chunk but the last
            holds exactly this many.
        columns: vertex properties to decode besides ``x, y, z`` (default: all of them).
            ``colors`` come only when ``red``, ``green`` and ``blue`` are all named, ``normals``
            when ``nx``, ``ny`` and ``nz`` are; other names land in ``properties``.
        dtype: floating dtype of ``points`` and ``normals``, as in :func:`read_ply`.

    Returns:
        An iterator of :class:`PlyChunk` ``(points, colors, normals, properties, offset)``; a file
        without vertices yields none.  The file is opened again when iteration starts and closed
        when it ends (or the iterator is closed).

    Raises:
        PlyFormatError: as :func:`read_ply`.
        TypeError, ValueError: bad ``chunk_points``, ``columns`` or ``dtype`` (the message names it).

    Example:
        >>> import torch, tempfile, os
        >>> from pcgeom.io import iter_ply, read_ply, write_ply
        >>> path = os.path.join(tempfile.mkdtemp(), "big.ply")
        >>> _ = write_ply(path, torch.rand(1000, 3), properties={"i": torch.arange(1000, dtype=torch.int32)})
        >>> chunks = list(iter_ply(path, chunk_points=300))
        >>> [(c.offset, len(c.points)) for c in chunks]
        [(0, 300), (300, 300), (600, 300), (900, 100)]
        >>> torch.equal(torch.cat([c.points for c in chunks]), read_ply(path).points)
        True
    """
    fn = "iter_ply"
    _check_dtype(fn, dtype)
    if isinstance(chunk_points, bool) or not isinstance(chunk_points, int) or chunk_points < 1:
        raise ValueError(f"{fn}: chunk_points must be an int >= 1, got {chunk_points!r}")
    path = _check_file(fn, path)
    with open(path, "rb") as f:
        header, vertex, file_size = _open_checked(path, f)
    wanted = _check_columns(fn, path, vertex, columns)
    return _chunks(path, header, vertex, file_size, chunk_points, wanted, dtype)


def _chunks(path, header: _Header, vertex: _Element, file_size: int, chunk: int, wanted, dtype) -> Iterator[PlyChunk]:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size != file_size or _parse_header(path, f) != header:
            raise _fail(path, "the file changed between iter_ply's checks and its first chunk")
        for at, data in _vertex_runs(path, f, header, vertex, file_size, chunk):
            yield PlyChunk(*_tensors(data, vertex, dtype, wanted), at)


@dataclass(frozen=True)
class PlyInfo:
    """What a PLY header declares, as :func:`ply_info` reads it.

    Attributes:
        format: ``"ascii"``, ``"binary_little_endian"`` or ``"binary_big_endian"``.
        elements: element name -> declared row count, in header order.
        properties: element name -> {property name -> PLY type}, in header order; a scalar's type
            in the spec's first spelling (``char`` ... ``double``), a list's as
            ``"list <length type> <value type>"``.
        header_bytes: the header's size (the body starts there).
    """

    format: str
    elements: dict[str, int]
    properties: dict[str, dict[str, str]]
    header_bytes: int

    @property
    def vertex_count(self) -> int:
        """The declared number of vertices (0 when the file has no vertex element)."""
        return self.elements.get("vertex", 0)


def ply_info(path: str | os.PathLike) -> PlyInfo:
    """A PLY file's format, element counts and property types, from its header, without reading the body.

    The header is checked as :func:`read_ply` checks it, and so (for binary files, from the file
    size alone) are the element counts: a count the file cannot hold raises.  An ASCII file's
    lines are counted only when it is read (:func:`read_ply`, :func:`iter_ply`).  The file need
    not have a vertex element.

    Args:
        path: the PLY file.

    Returns:
        :class:`PlyInfo` ``(format, elements, properties, header_bytes)``.

    Raises:
        PlyFormatError: a header :func:`read_ply` would refuse.

    Example:
        >>> import torch, tempfile, os
        >>> from pcgeom.io import ply_info, write_ply
        >>> path = os.path.join(tempfile.mkdtemp(), "c.ply")
        >>> _ = write_ply(path, torch.rand(5, 3), colors=torch.zeros(5, 3, dtype=torch.uint8))
        >>> info = ply_info(path)
        >>> info.format, info.elements, info.vertex_count
        ('binary_little_endian', {'vertex': 5}, 5)
        >>> info.properties["vertex"]["red"]
        'uchar'
    """
    path = _check_file("ply_info", path)
    with open(path, "rb") as f:
        header = _parse_header(path, f)
        if header.format != "ascii":
            _check_body_size(path, f, header)

    def kind(p: _Property) -> str:
        if p.list_len_type is None:
            return _PLY_NAME_OF[p.type]
        return f"list {_PLY_NAME_OF[p.list_len_type]} {_PLY_NAME_OF[p.type]}"

    return PlyInfo(header.format, {e.name: e.count for e in header.elements},
                   {e.name: {p.name: kind(p) for p in e.properties} for e in header.elements}, header.size)


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


def _prepare(fn: str, points, colors, normals, properties, types) -> list[tuple[str, np.ndarray, str]]:
    """The columns ``(name, values, numpy code)`` to write for one chunk, validated as :func:`write_ply` documents."""
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
    if properties is not None and not isinstance(properties, dict):
        raise TypeError(f"{fn}: properties must be a dict of name -> (N,) tensor, got {type(properties).__name__}")
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
    return [(name, _exact_cast(fn, name, arr, typed[name]) if name in typed else arr, typed.get(name, code))
            for name, arr, code in columns]


_COUNT_WIDTH = 20  # characters kept for a vertex count filled in at the end: any count below 10**20


def _discard(f, tmp: Path) -> None:
    f.close()
    tmp.unlink(missing_ok=True)


class PlyWriter:
    """Writes a PLY file chunk by chunk, in bounded memory, and puts it in place atomically at the end.

    The file is written under a private temporary name next to ``path`` (a hidden
    ``.<name>.<random>.pcgeom-partial.ply``, :func:`pcgeom.io.output.temporary_path`) and moved to
    ``path`` in one step by :meth:`close`, so ``path`` never holds a half-written file: an
    exception inside the ``with`` block (KeyboardInterrupt from SIGINT too) or :meth:`abort`
    removes the temporary file, and after a SIGKILL only the hidden temporary is left.  A
    writer that is garbage-collected unclosed removes its temporary file too.

    The first :meth:`write` fixes the columns and their PLY types, exactly as :func:`write_ply`
    would choose them for that chunk (``types`` names any of them); every later chunk must give
    the same columns, and its values must fit those types exactly (ValueError naming the column
    and row otherwise).  Pass ``types`` to fix a type up front (say ``double`` when later chunks
    may need it).  A writer closed without any :meth:`write` writes an empty cloud: ``x, y, z``
    and the other columns named in ``types``, in their types (``float`` when not named).

    The vertex count is in the header, written before the first row.  With ``count`` given it
    is written as it is, and :meth:`close` refuses a different number of rows (nothing is
    published); with ``count=None`` the header keeps 20 characters for it (the count followed
    by spaces, which every PLY reader splits away) and :meth:`close` fills them in.

    Args:
        path: the file to create.  An existing file is never replaced unless ``overwrite=True``
            (checked when the writer opens and again at the move).
        count: the number of rows that will be written, or ``None`` to count them.
        types: optional PLY type per column, as :func:`write_ply` takes it
            (:func:`read_ply_types` gives a file's).
        binary: binary little-endian (default) or ASCII (9 / 17 significant digits for
            ``float`` / ``double``, so values read back exactly).
        overwrite: replace an existing file.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False.
        FileNotFoundError: the folder of ``path`` does not exist.
        TypeError, ValueError: bad arguments or chunks (the message names the argument).

    Example:
        >>> import torch, tempfile, os
        >>> from pcgeom.io import PlyWriter, iter_ply, read_ply
        >>> path = os.path.join(tempfile.mkdtemp(), "out.ply")
        >>> with PlyWriter(path, types={"label": "ushort"}) as w:
        ...     for i in range(3):
        ...         pts = torch.full((4, 3), float(i))
        ...         w.write(pts, properties={"label": torch.full((4,), i)})
        >>> w.written, os.path.exists(path)
        (12, True)
        >>> read_ply(path).properties["label"].tolist()
        [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    """

    _fn = "PlyWriter"

    def __init__(self, path: str | os.PathLike, *, count: int | None = None, types: dict[str, str] | None = None,
                 binary: bool = True, overwrite: bool = False) -> None:
        fn = self._fn
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
            raise ValueError(f"{fn}: count must be None or an int >= 0, got {count!r}")
        if not isinstance(binary, bool) or not isinstance(overwrite, bool):
            raise TypeError(f"{fn}: binary and overwrite must be bool, got {binary!r} and {overwrite!r}")
        if types is not None and not isinstance(types, dict):
            raise TypeError(f"{fn}: types must be a dict of column name -> PLY type name, got {type(types).__name__}")
        path = Path(path)
        if path.exists() and not overwrite:
            raise FileExistsError(f"{fn}: {path} already exists; pass overwrite=True to replace it")
        if not path.parent.is_dir():
            raise FileNotFoundError(f"{fn}: folder {path.parent} does not exist")
        self.path, self.count = path, count
        self._types, self._binary, self._overwrite = types, binary, overwrite
        self._layout: list[tuple[str, str]] | None = None
        self._written, self._count_at, self._done = 0, 0, False
        self._tmp = temporary_path(path)
        self._file = open(self._tmp, "xb")  # "x": created here, so its mode follows the umask
        self._cleanup = weakref.finalize(self, _discard, self._file, self._tmp)

    @property
    def written(self) -> int:
        """Rows written so far."""
        return self._written

    @property
    def columns(self) -> dict[str, str] | None:
        """Column name -> PLY type, in file order, once the first chunk fixed them (else ``None``)."""
        return None if self._layout is None else {name: _PLY_NAME_OF[code] for name, code in self._layout}

    def write(self, points, colors=None, normals=None, *, properties: dict | None = None) -> None:
        """Appends rows: the arguments of :func:`write_ply` (``points`` ``(M, 3)``, ...) for ``M`` more rows.

        ``M = 0`` is allowed.  The first call fixes the columns (see the class); a later call
        with other columns, or values the fixed types cannot hold exactly, raises ValueError
        and writes nothing of that chunk.
        """
        if self._done:
            raise ValueError(f"{self._fn}.write: the writer of {self.path} is closed")
        self._put(_prepare(f"{self._fn}.write", points, colors, normals, properties, self._types))

    def _put(self, columns: list[tuple[str, np.ndarray, str]]) -> None:
        fn = f"{self._fn}.write"
        names = [c[0] for c in columns]
        if self._layout is not None:
            fixed = [name for name, _ in self._layout]
            if names != fixed:
                raise ValueError(f"{fn}: this chunk's columns ({', '.join(names)}) differ from the first chunk's "
                                 f"({', '.join(fixed)}); every chunk gives the same colors, normals and properties")
            columns = [(name, _exact_cast(fn, name, arr, code0) if code != code0 else arr, code0)
                       for (name, arr, code), (_, code0) in zip(columns, self._layout)]
        n = len(columns[0][1])
        if self.count is not None and self._written + n > self.count:
            raise ValueError(f"{fn}: {self._written + n} rows would exceed count={self.count}")
        if self._layout is None:
            self._layout = [(name, code) for name, _, code in columns]
            self._file.write(self._header())
        if n:
            if self._binary:
                record = np.empty(n, dtype=[(name, "<" + code) for name, _, code in columns])
                for name, arr, _ in columns:
                    record[name] = arr
                self._file.write(record.view(np.uint8))
            else:
                # plyfile formats ASCII one row at a time with 18 digits; one
                # vectorised savetxt with exact-but-short formats is ~50x faster.
                table = np.stack([arr.astype(np.float64) for _, arr, _ in columns], axis=1)
                np.savetxt(self._file, table, fmt=[_ASCII_FMT.get(code, "%d") for _, _, code in columns], delimiter=" ")
        self._written += n

    def _header(self) -> bytes:
        fmt = "binary_little_endian" if self._binary else "ascii"
        head = f"ply\nformat {fmt} 1.0\ncomment written by pcgeom\nelement vertex "
        self._count_at = len(head)
        count = str(self.count) if self.count is not None else "0".ljust(_COUNT_WIDTH)
        props = "".join(f"property {_PLY_NAME_OF[code]} {name}\n" for name, code in self._layout)
        return (head + count + "\n" + props + "end_header\n").encode("ascii")

    def close(self) -> Path:
        """Finishes the file and moves it to ``path`` in one step; returns ``path``.

        Raises ValueError (and publishes nothing) when ``count`` was given and a different number
        of rows was written; FileExistsError when ``path`` appeared meanwhile and ``overwrite``
        is False.  Either way the temporary file is removed.  Closing twice is a no-op.
        """
        if self._done:
            return self.path
        try:
            if self._layout is None:
                names = list(_XYZ) + [k for k in (self._types or {}) if k not in _XYZ]
                types = _check_types(f"{self._fn}.close", self._types, names, False)
                self._put([(name, np.empty(0, types.get(name, "f4")), types.get(name, "f4")) for name in names])
            if self.count is not None and self._written != self.count:
                raise ValueError(f"{self._fn}: {self._written} rows were written to {self.path}, but count="
                                 f"{self.count} was declared; nothing was published")
            if self.count is None:
                self._file.seek(self._count_at)
                self._file.write(str(self._written).ljust(_COUNT_WIDTH).encode("ascii"))
            self._file.close()
            try:
                publish(self._tmp, self.path, overwrite=self._overwrite)
            except FileExistsError:
                raise FileExistsError(f"{self._fn}: {self.path} already exists; pass overwrite=True to replace it") from None
        finally:
            self._done = True
            self._cleanup()  # the temporary file, unless it was moved into place
        return self.path

    def abort(self) -> None:
        """Stops without publishing: the temporary file is removed and ``path`` is left as it was."""
        self._done = True
        self._cleanup()

    def __enter__(self) -> "PlyWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class _WritePly(PlyWriter):
    _fn = "write_ply"  # write_ply's messages name write_ply


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
    The file is written as :class:`PlyWriter` writes one chunk: under a
    temporary name, moved into place when complete.

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
    fn = "write_ply"
    columns = _prepare(fn, points, colors, normals, properties, types)
    with _WritePly(path, count=len(columns[0][1]), types=types, binary=binary, overwrite=overwrite) as w:
        w._put(columns)
    return w.path
