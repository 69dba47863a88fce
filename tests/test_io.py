"""pcgeom.io: exact PLY round trips, independent decoding, and a clear error for each malformed file."""

from __future__ import annotations

import struct

import numpy as np
import plyfile
import pytest
import torch

from pcgeom.io import PlyCloud, PlyFormatError, read_ply, write_ply


def _cloud(n=257, seed=0):
    g = torch.Generator().manual_seed(seed)
    pts = torch.randn(n, 3, generator=g) * 10.0 ** torch.randint(-6, 6, (n, 1), generator=g)
    nrm = torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
    rgb = torch.randint(0, 256, (n, 3), generator=g, dtype=torch.uint8)
    return pts, nrm, rgb


@pytest.mark.parametrize("binary", [True, False])
def test_round_trip_exact_with_colours_normals_and_properties(tmp_path, binary):
    pts, nrm, rgb = _cloud()
    # Values whose shortest decimal form needs all 9 digits, and extremes.
    pts[0] = torch.tensor([1 / 3, -2.0**-149, 3.4028235e38])
    props = {
        "label": torch.arange(257, dtype=torch.int32) - 100,
        "intensity": torch.rand(257, dtype=torch.float64),
        "flag": torch.arange(257) % 2 == 0,
    }
    path = write_ply(tmp_path / "c.ply", pts, rgb, nrm, properties=props, binary=binary)
    cloud = read_ply(path)
    assert isinstance(cloud, PlyCloud)
    assert cloud.points.dtype == torch.float32 and torch.equal(cloud.points, pts)
    assert cloud.normals.dtype == torch.float32 and torch.equal(cloud.normals, nrm)
    assert cloud.colors.dtype == torch.uint8 and torch.equal(cloud.colors, rgb)
    assert torch.equal(cloud.properties["label"], props["label"])
    assert cloud.properties["intensity"].dtype == torch.float64
    assert torch.equal(cloud.properties["intensity"], props["intensity"])
    assert torch.equal(cloud.properties["flag"], props["flag"].to(torch.uint8))
    assert set(cloud.properties) == {"label", "intensity", "flag"}


@pytest.mark.parametrize("binary", [True, False])
def test_float64_points_stay_exact(tmp_path, binary):
    pts = torch.randn(50, 3, dtype=torch.float64) / 3
    write_ply(tmp_path / "d.ply", pts, binary=binary)
    assert torch.equal(read_ply(tmp_path / "d.ply", dtype=torch.float64).points, pts)
    assert torch.equal(read_ply(tmp_path / "d.ply").points, pts.float())


def test_written_file_is_standard_ply(tmp_path):
    # Decode with plyfile alone: the layout is what other tools expect.
    pts, nrm, rgb = _cloud(20)
    write_ply(tmp_path / "s.ply", pts, colors=rgb, normals=nrm)
    ply = plyfile.PlyData.read(str(tmp_path / "s.ply"))
    assert not ply.text and ply.byte_order == "<"
    v = ply["vertex"]
    assert [p.name for p in v.properties] == ["x", "y", "z", "nx", "ny", "nz", "red", "green", "blue"]
    assert v.data.dtype["x"] == np.dtype("<f4") and v.data.dtype["red"] == np.dtype("u1")
    np.testing.assert_array_equal(v["y"], pts[:, 1].numpy())
    np.testing.assert_array_equal(v["blue"], rgb[:, 2].numpy())


def test_reads_files_written_by_others(tmp_path):
    # Big-endian doubles with float colours, alpha and a face element, written by plyfile.
    n = 30
    rng = np.random.default_rng(0)
    vert = np.empty(n, dtype=[("x", ">f8"), ("y", ">f8"), ("z", ">f8"), ("red", ">f4"), ("green", ">f4"),
                             ("blue", ">f4"), ("alpha", "u1"), ("quality", ">u2")])
    for c in "xyz":
        vert[c] = rng.normal(size=n)
    for c in ("red", "green", "blue"):
        vert[c] = rng.random(n)
    vert["alpha"] = 200
    vert["quality"] = 60000
    faces = np.empty(2, dtype=[("vertex_indices", object)])
    faces["vertex_indices"] = [np.array([0, 1, 2], "i4"), np.array([3, 4, 5, 6], "i4")]
    plyfile.PlyData([plyfile.PlyElement.describe(vert, "vertex"), plyfile.PlyElement.describe(faces, "face")],
                    byte_order=">").write(str(tmp_path / "be.ply"))
    cloud = read_ply(tmp_path / "be.ply", dtype=torch.float64)
    ref = np.stack([vert["x"], vert["y"], vert["z"]], 1).astype("<f8")
    np.testing.assert_array_equal(cloud.points.numpy(), ref)
    assert cloud.colors.dtype == torch.float32
    np.testing.assert_array_equal(cloud.colors[:, 1].numpy(), vert["green"].astype("<f4"))
    assert cloud.normals is None
    assert cloud.properties["alpha"].dtype == torch.uint8
    assert cloud.properties["quality"].dtype == torch.int32 and int(cloud.properties["quality"][0]) == 60000


def test_float_colours_are_quantised_and_validated(tmp_path):
    pts = torch.zeros(3, 3)
    write_ply(tmp_path / "f.ply", pts, colors=torch.tensor([[0.0, 0.5, 1.0]] * 3))
    assert read_ply(tmp_path / "f.ply").colors[0].tolist() == [0, 128, 255]
    with pytest.raises(ValueError, match=r"write_ply: floating colors must lie in \[0, 1\]"):
        write_ply(tmp_path / "g.ply", pts, colors=torch.full((3, 3), 2.0))
    with pytest.raises(ValueError, match=r"integer colors must lie in \[0, 255\]"):
        write_ply(tmp_path / "g.ply", pts, colors=torch.full((3, 3), 256))


def test_empty_cloud_round_trips(tmp_path):
    for binary in (True, False):
        p = write_ply(tmp_path / f"e{binary}.ply", torch.empty(0, 3), binary=binary)
        assert read_ply(p).points.shape == (0, 3)


def test_no_overwrite(tmp_path):
    path = tmp_path / "x.ply"
    write_ply(path, torch.zeros(2, 3))
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match=str(path)):
        write_ply(path, torch.ones(5, 3))
    assert path.read_bytes() == before
    write_ply(path, torch.ones(5, 3), overwrite=True)
    assert read_ply(path).points.shape == (5, 3)


def test_write_argument_errors(tmp_path):
    p = tmp_path / "w.ply"
    with pytest.raises(ValueError, match=r"write_ply: points must have shape \(N, 3\), got \(4, 2\)"):
        write_ply(p, torch.zeros(4, 2))
    with pytest.raises(TypeError, match="write_ply: points must be a floating tensor"):
        write_ply(p, torch.zeros(4, 3, dtype=torch.int32))
    with pytest.raises(TypeError, match="write_ply: points must be a torch.Tensor or numpy array"):
        write_ply(p, [[0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"normals must have shape \(4, 3\), got \(3, 3\)"):
        write_ply(p, torch.zeros(4, 3), normals=torch.zeros(3, 3))
    with pytest.raises(ValueError, match="clashes"):
        write_ply(p, torch.zeros(4, 3), properties={"x": torch.zeros(4)})
    with pytest.raises(ValueError, match="outside PLY's 32-bit"):
        write_ply(p, torch.zeros(2, 3), properties={"big": torch.tensor([0, 2**40])})
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_ply(tmp_path / "no" / "w.ply", torch.zeros(4, 3))
    assert not p.exists()


# ---------------------------------------------------------------------------
# malformed files: each case names the file and the problem


def _binary_header(n, props=("float x", "float y", "float z"), extra=""):
    lines = ["ply", "format binary_little_endian 1.0", f"element vertex {n}"]
    lines += [f"property {p}" for p in props]
    return ("\n".join(lines) + "\n" + extra + "end_header\n").encode()


def _bad(tmp_path, content: bytes, match: str):
    path = tmp_path / "bad.ply"
    path.write_bytes(content)
    with pytest.raises(PlyFormatError, match=match) as info:
        read_ply(path)
    assert str(path) in str(info.value) and str(info.value).startswith("read_ply: ")
    assert isinstance(info.value, ValueError)


def test_not_a_ply_file(tmp_path):
    _bad(tmp_path, b"OFF\n3 1 0\n", "not a PLY file")
    _bad(tmp_path, b"", "empty")
    _bad(tmp_path, b"\x89PNG\r\n\x1a\n" + bytes(100), "not a PLY file")


def test_header_without_end(tmp_path):
    _bad(tmp_path, b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\n", "end_header")


def test_header_errors(tmp_path):
    _bad(tmp_path, b"ply\nelement vertex 1\nproperty float x\nend_header\n", "no 'format' line")
    _bad(tmp_path, b"ply\nformat binary_middle_endian 1.0\nend_header\n", "format ascii")
    _bad(tmp_path, b"ply\nformat ascii 1.0\nelement vertex -3\nend_header\n", "count >= 0")
    _bad(tmp_path, b"ply\nformat ascii 1.0\nelement vertex 1\nproperty string x\nend_header\n0\n",
         "unknown property type 'string'")
    _bad(tmp_path, b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float x\nend_header\n0 0\n",
         "declared twice")
    _bad(tmp_path, b"ply\nformat ascii 1.0\nfoo bar\nend_header\n", "unknown keyword 'foo'")


def test_missing_xyz(tmp_path):
    _bad(tmp_path, _binary_header(1, ("float x", "float y")) + bytes(8), "lacks z")
    _bad(tmp_path, b"ply\nformat ascii 1.0\nelement face 0\nproperty list uchar int vertex_indices\nend_header\n",
         "no 'vertex' element")


def test_wrong_types(tmp_path):
    _bad(tmp_path, _binary_header(1, ("float x", "float y", "list uchar float z")) + bytes(9),
         "'z' must be a scalar")
    _bad(tmp_path, _binary_header(1, ("float x", "float y", "float z", "list uchar float nx")) + bytes(13),
         "'nx' must be a scalar")
    _bad(tmp_path, b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\n"
         b"end_header\n1.0 abc 3.0\n", "malformed")


def test_truncated_binary(tmp_path):
    pts = torch.rand(100, 3)
    write_ply(tmp_path / "ok.ply", pts)
    data = (tmp_path / "ok.ply").read_bytes()
    _bad(tmp_path, data[:-5], r"needs 1200 bytes .* only 1195 bytes follow")


def test_truncated_ascii(tmp_path):
    write_ply(tmp_path / "ok.ply", torch.rand(10, 3), binary=False)
    lines = (tmp_path / "ok.ply").read_bytes().splitlines(keepends=True)
    _bad(tmp_path, b"".join(lines[:-3]), "declares 10 data lines .* only 7 follow")
    # A line cut in half is caught by the parser.
    _bad(tmp_path, b"".join(lines[:-1]) + lines[-1][:3], "malformed data")


def test_header_claims_more_than_the_file_holds(tmp_path, monkeypatch):
    # A billion vertices declared in a tiny file must fail before anything is allocated.
    calls = []
    monkeypatch.setattr(plyfile.PlyData, "read", lambda *a, **k: calls.append(a))
    _bad(tmp_path, _binary_header(10**9) + bytes(24), r"1000000000 vertex, which needs 12000000000 bytes")
    _bad(tmp_path, b"ply\nformat ascii 1.0\nelement vertex 1000000000\nproperty float x\nproperty float y\n"
         b"property float z\nend_header\n0 0 0\n", "declares 1000000000 data lines")
    # Lists: each costs at least its length byte, so a lower bound is still enforced.
    _bad(tmp_path, _binary_header(1, extra="element face 5000000000\nproperty list uchar int vertex_indices\n")
         + bytes(12 + 10), r"at least 5000000012 bytes")
    assert calls == []


def test_rows_past_the_declared_count_are_refused(tmp_path):
    # A count smaller than the data used to read the declared rows and drop the rest without a word.
    rows = np.arange(12, dtype="<f4").tobytes()
    _bad(tmp_path, _binary_header(3) + rows, r"declares 3 vertex, which needs 36 bytes .* 48 bytes follow")
    text = b"".join(f"{i} {i} {i}\n".encode() for i in range(4))
    ascii_header = b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\nend_header\n"
    _bad(tmp_path, ascii_header + text, "declares 3 data lines .* more data follows")
    _bad(tmp_path, ascii_header + text.rstrip(), "declares 3 data lines .* more data follows")
    # less than a row after the data (a trailing newline, padding) and blank lines are tolerated
    (tmp_path / "ok.ply").write_bytes(_binary_header(4) + rows + b"\n")
    assert read_ply(tmp_path / "ok.ply").points.shape == (4, 3)
    (tmp_path / "ok2.ply").write_bytes(ascii_header.replace(b"vertex 3", b"vertex 4") + text + b"\n \n")
    assert read_ply(tmp_path / "ok2.ply").points.tolist() == [[float(i)] * 3 for i in range(4)]


def test_read_argument_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_ply(tmp_path / "missing.ply")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        read_ply(tmp_path)
    write_ply(tmp_path / "a.ply", torch.zeros(1, 3))
    with pytest.raises(TypeError, match="dtype must be a floating"):
        read_ply(tmp_path / "a.ply", dtype=torch.int32)


def test_crlf_ascii_header(tmp_path):
    body = "ply\r\nformat ascii 1.0\r\ncomment made on windows\r\nelement vertex 2\r\nproperty float x\r\n" \
           "property float y\r\nproperty float z\r\nend_header\r\n1 2 3\r\n4 5 6\r\n"
    (tmp_path / "w.ply").write_bytes(body.encode())
    assert read_ply(tmp_path / "w.ply").points.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_binary_with_faces_matches_struct_decoding(tmp_path):
    # A hand-packed mesh: decoded coordinates must equal what struct reads.
    verts = [(0.5, -1.25, 3.0), (1e-3, 2.0, -7.5), (4.0, 5.0, 6.0)]
    body = b"".join(struct.pack("<fff", *v) for v in verts) + struct.pack("<Biii", 3, 0, 1, 2)
    header = _binary_header(3, extra="element face 1\nproperty list uchar int vertex_indices\n")
    (tmp_path / "m.ply").write_bytes(header + body)
    got = read_ply(tmp_path / "m.ply").points
    assert got.tolist() == [list(struct.unpack("<fff", struct.pack("<fff", *v))) for v in verts]


def test_ascii_value_checks(tmp_path):
    head = b"ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\n" \
           b"property uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n"
    _bad(tmp_path, head + b"0 0 0 1 2 3\n0 0 0 1 300 3\n", r"vertex row 1: property 'green' is uchar, got 300")
    _bad(tmp_path, head + b"0 0 0 1 2.5 3\n0 0 0 1 2 3\n", r"vertex row 0: property 'green' is uchar, got 2.5")
    _bad(tmp_path, head + b"0 0 0 1 2 3 4\n0 0 0 1 2 3 4\n",
         r"vertex row 0: 7 values where the header declares 6 \(x y z red green blue\)")
    _bad(tmp_path, head + b"0 0 0 1 2 3\n0 0 0 1 2\n", r"vertex row 1: 5 values where the header declares 6")
    _bad(tmp_path, head + b"0 0 0 1 2 3\n0 0 abc 1 2 3\n", r"vertex row 1: z is 'abc', not a number")


@pytest.mark.parametrize("text", [True, False])
def test_vertex_after_a_list_element(tmp_path, text):
    # Layouts the fast paths do not cover go through plyfile; same answer.
    n = 7
    vert = np.zeros(n, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")])
    vert["x"], vert["y"], vert["z"] = np.arange(n) / 3, -np.arange(n), 2.0**-20
    faces = np.empty(2, dtype=[("vertex_indices", object)])
    faces["vertex_indices"] = [np.array([0, 1, 2], "i4"), np.array([3, 4, 5, 6], "i4")]
    plyfile.PlyData([plyfile.PlyElement.describe(faces, "face"), plyfile.PlyElement.describe(vert, "vertex")],
                    text=text).write(str(tmp_path / "fv.ply"))
    got = read_ply(tmp_path / "fv.ply").points
    np.testing.assert_array_equal(got.numpy(), np.stack([vert["x"], vert["y"], vert["z"]], 1))


# ---------------------------------------------------------------------------
# declared counts are bounded for every element, whatever its properties


def _hostile(fmt: str, extra: bytes = b"", first: bool = True, ring: bool = True) -> bytes:
    """The small file of the report: an element with no properties (or only a list) and 10^12 rows.

    With ``ring`` the vertex rows hold a list, which sent the old reader through plyfile's
    per-row loop (10^12 iterations for the property-less element before it).
    """
    blank = b"element blank 1000000000000\n" + extra
    vertex = b"element vertex 1\nproperty float x\nproperty float y\nproperty float z\n"
    vertex += b"property list uchar int ring\n" if ring else b""
    head = f"ply\nformat {fmt} 1.0\n".encode() + (blank + vertex if first else vertex + blank) + b"end_header\n"
    return head + (b"0 0 0" + (b" 0" if ring else b"") + b"\n" if fmt == "ascii" else bytes(12 + ring))


@pytest.mark.parametrize("fmt", ["binary_little_endian", "binary_big_endian", "ascii"])
@pytest.mark.parametrize("extra", [b"", b"property list uchar int idx\n"])
@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("ring", [True, False])
def test_a_tiny_file_declaring_10_12_rows_fails_fast(tmp_path, fmt, extra, first, ring):
    import time

    data = _hostile(fmt, extra, first, ring)
    assert len(data) < 250
    t0 = time.process_time()  # CPU time: a loaded machine must not fail a fast refusal
    match = r"1000000000000 blank.* needs at least" if fmt != "ascii" else "declares 1000000000001 data lines"
    _bad(tmp_path, data, match)
    assert time.process_time() - t0 < 1.0


def test_rows_without_properties_cost_a_byte(tmp_path):
    # Binary: as many property-less rows as there are bytes left is accepted, one more is not.
    head = lambda n: _binary_header(1, extra=f"element blank {n}\n")  # noqa: E731
    (tmp_path / "ok.ply").write_bytes(head(5) + struct.pack("<fff", 1, 2, 3) + bytes(5))
    assert read_ply(tmp_path / "ok.ply").points.tolist() == [[1, 2, 3]]
    _bad(tmp_path, head(6) + struct.pack("<fff", 1, 2, 3) + bytes(5), r"needs at least 18 bytes .* only 17")


def _mesh(n_vert, faces, text, vertex_first, byte_order="<", vertex_list=False):
    rng = np.random.default_rng(n_vert)
    fields = [("x", "f4"), ("y", "f4"), ("z", "f4")]
    if vertex_list:
        fields.insert(1, ("ring", object))  # a list between the coordinates
    vert = np.empty(n_vert, dtype=fields)
    for c in "xyz":
        vert[c] = rng.normal(size=n_vert).astype("f4")
    if vertex_list:
        vert["ring"] = [np.arange(k % 4, dtype="i2") for k in range(n_vert)]
    face = np.empty(len(faces), dtype=[("vertex_indices", object), ("flag", "u1")])
    face["vertex_indices"] = [np.asarray(f, "i4") for f in faces]
    face["flag"] = 7
    v, f = plyfile.PlyElement.describe(vert, "vertex"), plyfile.PlyElement.describe(face, "face")
    return plyfile.PlyData([v, f] if vertex_first else [f, v], text=text, byte_order=byte_order), vert


@pytest.mark.parametrize("text", [False, True])
@pytest.mark.parametrize("faces", [[[0, 1, 2]] * 50, [[0, 1, 2], [3, 4, 5, 6], [], [1, 2, 3]] * 10,
                                   [[0, 1, 2]] * 20 + [[1, 2, 3, 4]] + [[0, 1, 2]] * 5])
@pytest.mark.parametrize("vertex_list", [False, True])
def test_list_layouts_match_plyfile(tmp_path, text, faces, vertex_list):
    # Uniform and ragged list rows before the vertex element, and a list inside the vertex rows.
    # (plyfile 1.1 writes the scalars of list-holding rows in native order in big-endian files, so
    # that combination is not a reference: big-endian is covered by the list rows before the vertex.)
    for order in ("<",) if vertex_list else ("<", ">"):
        ply, vert = _mesh(40, faces, text, vertex_first=False, byte_order=order, vertex_list=vertex_list)
        ply.write(str(tmp_path / "m.ply"))
        got = read_ply(tmp_path / "m.ply").points.numpy()
        np.testing.assert_array_equal(got, np.stack([vert[c] for c in "xyz"], 1))


def test_ragged_list_rows_truncated_or_negative(tmp_path):
    ply, _ = _mesh(10, [[0, 1, 2], [3, 4, 5, 6]] * 3, text=False, vertex_first=False)
    ply.write(str(tmp_path / "m.ply"))
    data = (tmp_path / "m.ply").read_bytes()
    # The face rows hold more than the minimum, so the vertex rows are cut short.
    _bad(tmp_path, data[:-20], "truncated file")
    # A signed list length that is negative.
    head = _binary_header(1, extra="").replace(b"element vertex 1", b"element face 1\nproperty list char int v\n"
                                                                   b"element vertex 1")
    _bad(tmp_path, head + struct.pack("<b", -3) + bytes(12), "negative list length -3")
    # A list length that runs past the end of the file.
    _bad(tmp_path, head + struct.pack("<b", 100) + bytes(20), "row 0 runs past the end of the file")


_ALL_TYPES = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4", "uint": "u4", "float": "f4",
              "double": "f8", "int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2", "int32": "i4",
              "uint32": "u4", "float32": "f4", "float64": "f8"}


@pytest.mark.parametrize("binary", [True, False])
def test_types_write_every_column_back_in_its_ply_type(tmp_path, binary):
    from pcgeom.io import read_ply_types

    n = 6
    props, types = {}, {}
    for t, code in _ALL_TYPES.items():
        if code[0] == "f":
            info = np.finfo(code)
            v = np.array([info.max, -info.max, info.tiny, 0.0, -1.5, np.nan], dtype=code)
        else:
            info = np.iinfo(code)
            v = np.array([info.min, info.max, 0, 1, info.max // 3, info.min // 2], dtype=code)
        props[f"p_{t}"] = torch.from_numpy(v.astype({"u2": "i4", "u4": "i8"}.get(code, code)))  # as read_ply gives them
        types[f"p_{t}"] = t
    rgb = torch.tensor([[0, 300, 65535]] * n, dtype=torch.int32)
    pts = torch.rand(n, 3, dtype=torch.float64)
    path = write_ply(tmp_path / "t.ply", pts, colors=rgb, properties=props, binary=binary,
                     types={**types, "red": "uint16", "green": "ushort", "blue": "ushort", "x": "double",
                            "y": "float64", "z": "double"})
    back = plyfile.PlyData.read(str(path))["vertex"].data
    want = {"i1": "char", "u1": "uchar", "i2": "short", "u2": "ushort", "i4": "int", "u4": "uint", "f4": "float", "f8": "double"}
    got_types = read_ply_types(path)
    for t, code in _ALL_TYPES.items():
        assert got_types[f"p_{t}"] == want[code] and back[f"p_{t}"].dtype.kind + str(back[f"p_{t}"].dtype.itemsize) == code
        np.testing.assert_array_equal(back[f"p_{t}"], props[f"p_{t}"].numpy().astype(code))
    assert got_types["red"] == "ushort" and (back["green"] == 300).all() and (back["blue"] == 65535).all()
    cloud = read_ply(path, dtype=torch.float64)
    assert torch.equal(cloud.points, pts) and torch.equal(cloud.colors, rgb)


def test_types_refuse_what_the_type_cannot_hold(tmp_path):
    pts = torch.rand(3, 3)
    with pytest.raises(ValueError, match=r"red cannot be stored exactly as PLY uchar: row 0 holds 256"):
        write_ply(tmp_path / "a.ply", pts, colors=torch.tensor([[256, 0, 0]] * 3),
                  types={"red": "uchar", "green": "uchar", "blue": "uchar"})
    with pytest.raises(ValueError, match=r"x cannot be stored exactly as PLY float"):
        write_ply(tmp_path / "a.ply", torch.tensor([[0.1, 0, 0]], dtype=torch.float64), types={"x": "float"})
    with pytest.raises(ValueError, match=r"q cannot be stored exactly as PLY short: row 1 holds 0.5"):
        write_ply(tmp_path / "a.ply", pts, properties={"q": torch.tensor([1.0, 0.5, 2.0])}, types={"q": "short"})
    with pytest.raises(ValueError, match=r"types names 'nx', which is not a column being written"):
        write_ply(tmp_path / "a.ply", pts, types={"nx": "float"})
    with pytest.raises(ValueError, match=r"types\['x'\] must be a PLY scalar type .* got 'float16'"):
        write_ply(tmp_path / "a.ply", pts, types={"x": "float16"})
    with pytest.raises(ValueError, match="all of red, green, blue or none"):
        write_ply(tmp_path / "a.ply", pts, colors=torch.zeros(3, 3, dtype=torch.uint8), types={"red": "ushort"})
    assert not (tmp_path / "a.ply").exists()
    # a lone "red" column is a property like any other, and any printable PLY name is kept
    write_ply(tmp_path / "b.ply", pts, properties={"red": torch.arange(3), "scalar-Intensity": torch.ones(3)},
              types={"red": "ushort"})
    assert set(read_ply(tmp_path / "b.ply").properties) == {"red", "scalar-Intensity"}
