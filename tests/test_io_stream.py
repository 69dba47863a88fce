"""pcgeom.io streamed: iter_ply equals read_ply (and plyfile) chunk by chunk, PlyWriter equals write_ply, both in bounded memory.

The chunked reader is checked against plyfile's decoding (an independent reader) and against
``read_ply`` for every scalar type, both byte orders and ASCII, elements before and after the
vertex element, list properties, chunk sizes 1, primes and larger than the file, and read blocks
small enough that rows and lines straddle them.  The writer is checked byte for byte against
``write_ply`` and for its atomic publication under exceptions, SIGINT and SIGKILL.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import numpy as np
import plyfile
import pytest
import torch

from pcgeom.io import PlyChunk, PlyFormatError, PlyWriter, iter_ply, ply_info, read_ply, read_ply_types, write_ply

ROOT = Path(__file__).resolve().parents[1]
TYPES = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4", "uint": "u4", "float": "f4",
         "double": "f8"}
FORMATS = {"binary_little_endian": (False, "<"), "binary_big_endian": (False, ">"), "ascii": (True, "=")}


def _vertices(n: int, seed: int = 0, xyz: str = "f4") -> np.ndarray:
    """Rows with x, y, z, normals, 16-bit colours and one property of every PLY scalar type, at their extremes."""
    rng = np.random.default_rng(seed)
    fields = [("x", xyz), ("y", xyz), ("z", xyz), ("nx", "f4"), ("ny", "f4"), ("nz", "f4"),
              ("red", "u2"), ("green", "u2"), ("blue", "u2")] + [(f"p_{t}", c) for t, c in TYPES.items()]
    v = np.empty(n, dtype=fields)
    for c in "xyz":
        v[c] = rng.normal(size=n) * 10.0 ** rng.integers(-6, 6, size=n)
    for c in ("nx", "ny", "nz"):
        v[c] = rng.normal(size=n)
    for c in ("red", "green", "blue"):
        v[c] = rng.integers(0, 65536, size=n)
    for t, c in TYPES.items():
        if c[0] == "f":
            v[f"p_{t}"] = rng.normal(size=n) * (np.finfo(c).max / 1e3)
        else:
            info = np.iinfo(c)
            v[f"p_{t}"] = rng.integers(info.min, int(info.max) + 1, size=n, dtype=np.int64)
    return v


def _write_plyfile(path, elements, fmt) -> None:
    text, order = FORMATS[fmt]
    plyfile.PlyData(elements, text=text, byte_order=order).write(str(path))


def _faces(n: int, ragged: bool, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    f = np.empty(n, dtype=[("vertex_indices", object), ("flag", "u1")])
    f["vertex_indices"] = [rng.integers(0, 100, size=(k % 5 if ragged else 3)).astype("i4") for k in range(n)]
    f["flag"] = 7
    return f


def _cat(chunks: list[PlyChunk]):
    def cat(ts):
        return None if ts[0] is None else torch.cat(ts)
    props = {k: torch.cat([c.properties[k] for c in chunks]) for k in chunks[0].properties}
    return (cat([c.points for c in chunks]), cat([c.colors for c in chunks]), cat([c.normals for c in chunks]), props)


def _assert_same(got, cloud) -> None:
    """Streamed ``(points, colors, normals, properties)`` equals read_ply's cloud: values and dtypes."""
    for a, b in zip(got[:3], cloud[:3]):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == b.dtype and torch.equal(a, b) if not a.is_floating_point() else \
                a.dtype == b.dtype and torch.equal(a.nan_to_num(), b.nan_to_num())
    assert list(got[3]) == list(cloud.properties)
    for k, t in got[3].items():
        assert t.dtype == cloud.properties[k].dtype and torch.equal(t, cloud.properties[k]), k


def _check_streamed(path, vert: np.ndarray, chunks_sizes, dtype=torch.float32) -> None:
    """iter_ply at every chunk size == read_ply == plyfile's decoding of the same rows."""
    cloud = read_ply(path, dtype=dtype)
    np_float = np.float64 if dtype == torch.float64 else np.float32
    want = np.stack([vert[c].astype(np.float64) for c in "xyz"], 1).astype(np_float)
    np.testing.assert_array_equal(cloud.points.numpy(), want)
    for name in vert.dtype.names:
        if name in ("x", "y", "z", "nx", "ny", "nz", "red", "green", "blue") or vert.dtype[name] == object:
            continue
        np.testing.assert_array_equal(cloud.properties[name].numpy(), vert[name].astype(vert.dtype[name].newbyteorder("=")))
    n = len(vert)
    for chunk in chunks_sizes:
        chunks = list(iter_ply(path, chunk_points=chunk, dtype=dtype))
        assert [c.offset for c in chunks] == list(range(0, n, chunk))
        assert [len(c.points) for c in chunks] == [min(chunk, n - o) for o in range(0, n, chunk)]
        if n:
            _assert_same(_cat(chunks), cloud)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("xyz", ["f4", "f8"])
def test_every_scalar_type_streams_as_read_ply_reads_it(tmp_path, fmt, xyz):
    n = 61
    vert = _vertices(n, xyz=xyz)
    _write_plyfile(tmp_path / "v.ply", [plyfile.PlyElement.describe(vert, "vertex")], fmt)
    _check_streamed(tmp_path / "v.ply", vert, [1, 7, 13, n, n + 5, 10**9],
                    dtype=torch.float64 if xyz == "f8" else torch.float32)
    chunk = next(iter_ply(tmp_path / "v.ply", chunk_points=5))
    assert chunk.colors.dtype == torch.int32 and chunk.properties["p_uint"].dtype == torch.int64
    assert chunk.properties["p_char"].dtype == torch.int8 and chunk.properties["p_double"].dtype == torch.float64


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("layout", ["vertex_first", "faces_first", "faces_around"])
@pytest.mark.parametrize("ragged", [False, True])
@pytest.mark.parametrize("vertex_list", [False, True])
def test_elements_before_and_after_the_vertex_element(tmp_path, monkeypatch, fmt, layout, ragged, vertex_list):
    # Read blocks of 7 and 64 bytes: binary rows and ASCII lines straddle them, and a face row longer
    # than a block makes the block grow.
    if vertex_list and fmt == "binary_big_endian":
        pytest.skip("plyfile 1.1 writes the scalars of list-holding rows in native order in big-endian files")
    vert = _vertices(40, seed=3)
    if vertex_list:
        fields = [(name, vert.dtype[name]) for name in vert.dtype.names]
        fields.insert(2, ("ring", object))
        v2 = np.empty(len(vert), dtype=fields)
        for name in vert.dtype.names:
            v2[name] = vert[name]
        v2["ring"] = [np.arange(k % 4, dtype="i2") for k in range(len(vert))]
        vert = v2
    v = plyfile.PlyElement.describe(vert, "vertex")
    f = plyfile.PlyElement.describe(_faces(30, ragged), "face")
    g = plyfile.PlyElement.describe(_faces(9, not ragged, seed=2), "edge")
    elements = {"vertex_first": [v, f], "faces_first": [f, v], "faces_around": [f, v, g]}[layout]
    _write_plyfile(tmp_path / "m.ply", elements, fmt)
    for block in (7, 64, 1 << 20):
        monkeypatch.setattr("pcgeom.io.ply._READ_BLOCK", block)
        _check_streamed(tmp_path / "m.ply", vert, [1, 3, 40, 41])


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_one_row_files_and_runs(tmp_path, monkeypatch, fmt):
    # A field of a one-row record keeps the record's stride (here 43 bytes, not a multiple of 8): torch
    # refuses such an array unless it is copied.  read_ply's ASCII runs are joined into one table.
    vert = _vertices(1, seed=9, xyz="f8")
    _write_plyfile(tmp_path / "one.ply", [plyfile.PlyElement.describe(vert, "vertex")], fmt)
    _check_streamed(tmp_path / "one.ply", vert, [1, 2], dtype=torch.float64)
    vert = _vertices(10, seed=9)
    _write_plyfile(tmp_path / "ten.ply", [plyfile.PlyElement.describe(vert, "vertex")], fmt)
    monkeypatch.setattr("pcgeom.io.ply.DEFAULT_CHUNK_POINTS", 3)
    _check_streamed(tmp_path / "ten.ply", vert, [1, 4])


def test_ascii_crlf_and_a_last_line_without_newline(tmp_path, monkeypatch):
    vert = _vertices(9, seed=5)
    buf = io.BytesIO()
    plyfile.PlyData([plyfile.PlyElement.describe(vert, "vertex")], text=True).write(buf)
    data = buf.getvalue().replace(b"\n", b"\r\n").rstrip(b"\r\n")
    (tmp_path / "c.ply").write_bytes(data)
    for block in (5, 1 << 20):
        monkeypatch.setattr("pcgeom.io.ply._READ_BLOCK", block)
        _check_streamed(tmp_path / "c.ply", vert, [1, 2, 4, 9, 10])


def test_columns_pick_what_is_decoded(tmp_path):
    vert = _vertices(10)
    _write_plyfile(tmp_path / "v.ply", [plyfile.PlyElement.describe(vert, "vertex")], "binary_little_endian")
    (c,) = iter_ply(tmp_path / "v.ply", columns=["p_int", "red", "green", "blue"])
    assert c.normals is None and c.colors is not None and list(c.properties) == ["p_int"]
    (c,) = iter_ply(tmp_path / "v.ply", columns=["red", "green", "nx"])  # not all three: properties
    assert c.colors is None and c.normals is None and list(c.properties) == ["nx", "red", "green"]
    (c,) = iter_ply(tmp_path / "v.ply", columns=[])
    assert c.colors is None and c.normals is None and c.properties == {} and c.points.shape == (10, 3)
    with pytest.raises(ValueError, match=r"columns names 'intensity', which is not a vertex property of .*v.ply"):
        iter_ply(tmp_path / "v.ply", columns=["intensity"])
    with pytest.raises(TypeError, match="columns must be a list of vertex property names"):
        iter_ply(tmp_path / "v.ply", columns="red")


def test_argument_errors(tmp_path):
    write_ply(tmp_path / "a.ply", torch.zeros(3, 3))
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match=rf"iter_ply: chunk_points must be an int >= 1, got {bad!r}"):
            iter_ply(tmp_path / "a.ply", chunk_points=bad)
    with pytest.raises(TypeError, match="iter_ply: dtype must be a floating torch.dtype"):
        iter_ply(tmp_path / "a.ply", dtype=torch.int32)
    with pytest.raises(IsADirectoryError, match="iter_ply: .* is a folder"):
        iter_ply(tmp_path)
    with pytest.raises(FileNotFoundError):
        iter_ply(tmp_path / "none.ply")


def _hostile(fmt: str) -> bytes:
    head = (f"ply\nformat {fmt} 1.0\nelement blank 1000000000000\nproperty list uchar int idx\n"
            "element vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n").encode()
    return head + (b"0 0 0\n" if fmt == "ascii" else bytes(12)) + bytes(40)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_header_checks_run_before_iter_ply_returns(tmp_path, fmt):
    path = tmp_path / "h.ply"
    path.write_bytes(_hostile(fmt))
    with pytest.raises(PlyFormatError) as whole:
        read_ply(path)
    t0 = time.process_time()
    with pytest.raises(PlyFormatError) as streamed:
        iter_ply(path, chunk_points=1)  # raises here, not at the first next()
    assert str(streamed.value) == str(whole.value) and "1000000000000 blank" in str(whole.value)
    assert time.process_time() - t0 < 1.0
    if fmt != "ascii":  # ply_info checks binary counts from the file size; ASCII lines are counted when read
        with pytest.raises(PlyFormatError, match="1000000000000 blank"):
            ply_info(path)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_defect_in_the_body_raises_at_its_chunk_with_read_ply_s_message(tmp_path, fmt):
    vert = _vertices(30, seed=2)[["x", "y", "z", "p_uchar"]]
    vert = np.array(vert.tolist(), dtype=[("x", "f4"), ("y", "f4"), ("z", "f4"), ("p_uchar", "u1")])
    buf = io.BytesIO()
    text, order = FORMATS[fmt]
    # faces before the vertices, their last row cut short in binary files; a bad value at vertex row 20 in ASCII
    f = plyfile.PlyElement.describe(_faces(4, ragged=True), "face")
    plyfile.PlyData([f, plyfile.PlyElement.describe(vert, "vertex")], text=text, byte_order=order).write(buf)
    data = buf.getvalue()
    if text:
        lines = data.split(b"\n")
        at = lines.index(b"end_header") + 1 + 4 + 20
        lines[at] = lines[at].rsplit(b" ", 1)[0] + b" 256"
        data = b"\n".join(lines)
    else:
        data = data[:-5]
    path = tmp_path / "d.ply"
    path.write_bytes(data)
    with pytest.raises(PlyFormatError) as whole:
        read_ply(path)
    for chunk in (1, 7, 100):
        it = iter_ply(path, chunk_points=chunk)
        got = []
        with pytest.raises(PlyFormatError) as streamed:
            for c in it:
                got.append(c)
        assert str(streamed.value) == str(whole.value)
        assert str(whole.value).startswith(f"read_ply: {path}: ")
        if text:
            assert "vertex row 20: property 'p_uchar' is uchar, got 256" in str(whole.value)
            assert sum(len(c.points) for c in got) == 20 // chunk * chunk  # the chunks before it were handed out
        else:
            assert "truncated file" in str(whole.value)


def test_ply_info_reads_the_header_alone(tmp_path):
    vert = _vertices(12)
    f = plyfile.PlyElement.describe(_faces(5, ragged=True), "face")
    _write_plyfile(tmp_path / "m.ply", [plyfile.PlyElement.describe(vert, "vertex"), f], "binary_big_endian")
    info = ply_info(tmp_path / "m.ply")
    assert info.format == "binary_big_endian" and info.elements == {"vertex": 12, "face": 5}
    assert info.vertex_count == 12
    assert info.properties["face"] == {"vertex_indices": "list uchar int", "flag": "uchar"}
    assert {k: v for k, v in info.properties["vertex"].items()} == read_ply_types(tmp_path / "m.ply")
    assert info.properties["vertex"]["p_uint"] == "uint" and info.properties["vertex"]["red"] == "ushort"
    assert (tmp_path / "m.ply").read_bytes()[info.header_bytes - 11:info.header_bytes] == b"end_header\n"
    # no vertex element: still a PLY header
    (tmp_path / "e.ply").write_bytes(b"ply\nformat ascii 1.0\nelement face 0\nproperty list uchar int v\nend_header\n")
    assert ply_info(tmp_path / "e.ply").vertex_count == 0
    with pytest.raises(PlyFormatError, match=r"read_ply: .*x.ply: not a PLY file"):
        (tmp_path / "x.ply").write_bytes(b"OFF\n")
        ply_info(tmp_path / "x.ply")


# ---------------------------------------------------------------------------
# writing


def _chunks_of(n: int, k: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    pts = torch.randn(n, 3, generator=g, dtype=torch.float64)
    nrm = torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
    rgb = torch.randint(0, 256, (n, 3), generator=g, dtype=torch.uint8)
    lab = torch.randint(-5, 40000, (n,), generator=g)
    whole = (pts, rgb, nrm, {"label": lab})
    parts = [(pts[i:i + k], rgb[i:i + k], nrm[i:i + k], {"label": lab[i:i + k]}) for i in range(0, n, k)]
    return whole, parts


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("k", [1, 7, 100, 1000])
def test_writer_chunks_equal_write_ply_byte_for_byte(tmp_path, binary, k):
    (pts, rgb, nrm, props), parts = _chunks_of(100, k)
    types = {"x": "double", "y": "double", "z": "double", "label": "int"}
    write_ply(tmp_path / "whole.ply", pts, rgb, nrm, properties=props, types=types, binary=binary)
    with PlyWriter(tmp_path / "counted.ply", count=100, types=types, binary=binary) as w:
        for p, c, nr, pr in parts:
            w.write(p, c, nr, properties=pr)
    assert (tmp_path / "counted.ply").read_bytes() == (tmp_path / "whole.ply").read_bytes()
    with PlyWriter(tmp_path / "open.ply", types=types, binary=binary) as w:
        for p, c, nr, pr in parts:
            w.write(p, c, nr, properties=pr)
    assert w.written == 100 and w.columns["label"] == "int" and w.columns["red"] == "uchar"
    # count=None: the header kept 20 characters for the count; everything else is the same file
    padded = (tmp_path / "open.ply").read_bytes()
    assert padded.replace(b"element vertex 100" + b" " * 17 + b"\n", b"element vertex 100\n") == \
        (tmp_path / "whole.ply").read_bytes()
    assert plyfile.PlyData.read(str(tmp_path / "open.ply"))["vertex"].count == 100
    cloud = read_ply(tmp_path / "open.ply", dtype=torch.float64)
    assert torch.equal(cloud.points, pts) and torch.equal(cloud.properties["label"], props["label"].int())
    assert not [p for p in tmp_path.iterdir() if "pcgeom-partial" in p.name]


def test_writer_types_are_fixed_by_the_first_chunk(tmp_path):
    with PlyWriter(tmp_path / "a.ply") as w:
        w.write(torch.zeros(2, 3), properties={"i": torch.tensor([1, 2])})  # int64 that fits: int
        assert w.columns == {"x": "float", "y": "float", "z": "float", "i": "int"}
        with pytest.raises(ValueError, match=r"PlyWriter.write: x cannot be stored exactly as PLY float: row 0"):
            w.write(torch.tensor([[0.1, 0, 0]], dtype=torch.float64), properties={"i": torch.tensor([3])})
        with pytest.raises(ValueError, match=r"PlyWriter.write: i cannot be stored exactly as PLY int: row 1 holds 0.5"):
            w.write(torch.zeros(2, 3), properties={"i": torch.tensor([3.0, 0.5])})
        with pytest.raises(ValueError, match=r"properties\['i'\] has values in \[3, 2147483648\], outside PLY's 32-bit"):
            w.write(torch.zeros(2, 3), properties={"i": torch.tensor([3, 2**31])})
        with pytest.raises(ValueError, match=r"this chunk's columns \(x, y, z, nx, ny, nz, i\) differ from the first"):
            w.write(torch.zeros(1, 3), normals=torch.zeros(1, 3), properties={"i": torch.tensor([3])})
        w.write(torch.ones(1, 3, dtype=torch.float64), properties={"i": torch.tensor([-7])})  # exact: fine
    cloud = read_ply(tmp_path / "a.ply")
    assert cloud.points.tolist() == [[0, 0, 0], [0, 0, 0], [1, 1, 1]] and cloud.properties["i"].tolist() == [1, 2, -7]


def test_writer_empty_and_argument_errors(tmp_path):
    with PlyWriter(tmp_path / "e.ply", types={"x": "double", "label": "ushort"}):
        pass
    assert read_ply_types(tmp_path / "e.ply") == {"x": "double", "y": "float", "z": "float", "label": "ushort"}
    assert read_ply(tmp_path / "e.ply").points.shape == (0, 3)
    with pytest.raises(FileExistsError, match="PlyWriter: .*e.ply already exists; pass overwrite=True"):
        PlyWriter(tmp_path / "e.ply")
    with pytest.raises(FileNotFoundError, match="PlyWriter: folder .*none does not exist"):
        PlyWriter(tmp_path / "none" / "a.ply")
    for bad in (-1, 2.0, True):
        with pytest.raises(ValueError, match=rf"PlyWriter: count must be None or an int >= 0, got {bad!r}"):
            PlyWriter(tmp_path / "a.ply", count=bad)
    with pytest.raises(TypeError, match="PlyWriter: binary and overwrite must be bool"):
        PlyWriter(tmp_path / "a.ply", binary="yes")
    with pytest.raises(ValueError, match=r"PlyWriter.write: points must have shape \(N, 3\), got \(4, 2\)"):
        with PlyWriter(tmp_path / "a.ply") as w:
            w.write(torch.zeros(4, 2))
    w = PlyWriter(tmp_path / "a.ply", count=3)
    w.write(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="4 rows would exceed count=3"):
        w.write(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"2 rows were written to .*a.ply, but count=3 was declared; nothing"):
        w.close()
    with pytest.raises(ValueError, match="the writer of .*a.ply is closed"):
        w.write(torch.zeros(1, 3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.ply"]


def test_writer_publishes_only_on_success(tmp_path):
    target = tmp_path / "out.ply"
    with pytest.raises(RuntimeError, match="boom"):
        with PlyWriter(target) as w:
            w.write(torch.zeros(5, 3))
            assert [p.name for p in tmp_path.iterdir()] == [w._tmp.name]  # written under the private name
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    # a file that appears meanwhile is kept without overwrite, replaced with it
    w = PlyWriter(target)
    w.write(torch.zeros(5, 3))
    target.write_bytes(b"theirs")
    with pytest.raises(FileExistsError, match="out.ply already exists"):
        w.close()
    assert target.read_bytes() == b"theirs" and [p.name for p in tmp_path.iterdir()] == ["out.ply"]
    with PlyWriter(target, overwrite=True) as w:
        w.write(torch.ones(2, 3))
    assert read_ply(target).points.tolist() == [[1, 1, 1]] * 2
    # an abandoned writer removes its temporary file when it is collected
    w = PlyWriter(tmp_path / "gone.ply")
    w.write(torch.zeros(3, 3))
    tmp = w._tmp
    assert tmp.exists()
    del w
    assert not tmp.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["out.ply"]


_WRITE_FOREVER = textwrap.dedent("""
    import sys, torch
    from pcgeom.io import PlyWriter
    with PlyWriter(sys.argv[1]) as w:
        for i in range(10**6):
            w.write(torch.rand(10000, 3))
            if i == 3:
                print("writing", flush=True)
""")


@pytest.mark.slow  # subprocesses
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_writer_leaves_nothing_under_the_final_name(tmp_path, sig):
    target = tmp_path / "big.ply"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", _WRITE_FOREVER, str(target)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing", proc.stderr.read()
        partial = [p for p in tmp_path.iterdir() if "pcgeom-partial" in p.name]
        assert len(partial) == 1 and partial[0].stat().st_size > 0
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert not target.exists()
    left = [p.name for p in tmp_path.iterdir()]
    if sig == signal.SIGINT:  # KeyboardInterrupt inside the with: the temporary file is removed
        assert left == [] and "KeyboardInterrupt" in proc.stderr.read()
    else:  # SIGKILL: only the hidden temporary name is left, never the final one
        assert len(left) == 1 and left[0].startswith(".big.ply.") and left[0].endswith(".pcgeom-partial.ply")


# ---------------------------------------------------------------------------
# memory bounded by the chunk, not the file


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow  # writes and reads files of tens of MB
@pytest.mark.parametrize("fmt", ["binary_little_endian", "ascii", "faces_first"])
def test_memory_is_bounded_by_the_chunk(tmp_path, fmt):
    # Millions of points (binary) written with PlyWriter and read with iter_ply in chunks of 2**14 rows:
    # peak numpy/Python memory stays near a chunk and a read block, far below the file, while
    # read_ply's peak is the whole cloud.  (tracemalloc sees numpy's buffers and Python's bytes.)
    n, k = (3_000_000, 1 << 14) if fmt != "ascii" else (200_000, 1 << 12)
    path = tmp_path / "big.ply"
    g = torch.Generator().manual_seed(0)

    def write():
        with PlyWriter(path, binary=fmt != "ascii") as w:
            for i in range(0, n, k):
                m = min(k, n - i)
                w.write(torch.rand(m, 3, generator=g), colors=torch.randint(0, 256, (m, 3), generator=g,
                        dtype=torch.uint8), properties={"i": torch.arange(i, i + m, dtype=torch.int32)})

    if fmt == "faces_first":  # 1M triangles before the vertices, passed over block by block
        write()
        body = path.read_bytes()
        end = body.index(b"end_header\n") + len(b"end_header\n")
        tris = np.zeros(1_000_000, dtype=[("n", "u1"), ("v", "<i4", 3)])
        tris["n"] = 3
        head = body[:end].replace(b"element vertex", b"element face 1000000\nproperty list uchar int vertex_indices\n"
                                                    b"element vertex")
        path.unlink()
        path.write_bytes(head + tris.tobytes() + body[end:])
        write_peak = None
    else:
        write_peak = _peak(write)
    size = path.stat().st_size
    total = []

    def stream():
        for c in iter_ply(path, chunk_points=k):
            assert c.properties["i"][0].item() == c.offset  # the rows arrive in order, each once
            total.append(len(c.points))

    peak = _peak(stream)
    assert sum(total) == n
    # two read blocks and a chunk's rows, arrays and tensors (ASCII: its text, and numpy's parser's buffers)
    bound = 2 * (1 << 20) + 200 * k if fmt != "ascii" else 4 * (1 << 20) + 400 * k
    assert peak < bound, (peak, bound, size)
    assert size > 3 * peak  # far below the file
    whole = _peak(lambda: read_ply(path))
    assert whole > size // 2  # the in-memory reader holds the cloud (so this test can tell them apart)
    if write_peak is not None:
        assert write_peak < bound, (write_peak, bound)
