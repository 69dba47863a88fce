"""``pcgeom preprocess``: voxel, outliers and normals for PLY files, with group's file handling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcgeom
import pcgeom.data
from pcgeom import cli
from pcgeom.io import read_ply, read_ply_types, write_ply

# Every PLY scalar type, both spellings, and its numpy type (the spec; independent of pcgeom.io).
PLY_TYPES = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4", "uint": "u4",
             "float": "f4", "double": "f8", "int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2",
             "int32": "i4", "uint32": "u4", "float32": "f4", "float64": "f8"}
CANONICAL = {"i1": "char", "u1": "uchar", "i2": "short", "u2": "ushort", "i4": "int", "u4": "uint",
             "f4": "float", "f8": "double"}


def raw_ply(path, columns, fmt="binary_little_endian"):
    """Writes a PLY file by hand (not with pcgeom.io): ``columns`` is a list of (name, PLY type, values)."""
    n = len(columns[0][2])
    head = [f"ply\nformat {fmt} 1.0\nelement vertex {n}\n"] + [f"property {t} {name}\n" for name, t, _ in columns]
    head.append("end_header\n")
    with open(path, "wb") as f:
        f.write("".join(head).encode("ascii"))
        if fmt == "ascii":
            for i in range(n):
                f.write((" ".join(repr(float(v[i])) if PLY_TYPES[t][0] == "f" else str(int(v[i]))
                                  for _, t, v in columns) + "\n").encode("ascii"))
        else:
            order = "<" if fmt == "binary_little_endian" else ">"
            rec = np.empty(n, dtype=[(name, order + PLY_TYPES[t]) for name, t, _ in columns])
            for name, _, v in columns:
                rec[name] = v
            f.write(rec.tobytes())
    return path


def stored(path) -> dict:
    """Every vertex column of a PLY file as numpy values of its stored type, decoded by plyfile."""
    import plyfile

    v = plyfile.PlyData.read(str(path))["vertex"].data
    return {name: np.asarray(v[name]).astype(v.dtype[name].newbyteorder("=")) for name in v.dtype.names}


def _inputs(tmp_path):
    src = tmp_path / "scans"
    (src / "nested").mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    bunny = pcgeom.data.load("bunny", n_points=3000, seed=0)
    noisy = torch.cat([bunny, torch.rand(40, 3, generator=g) * 2 - 1])
    colors = torch.randint(0, 256, (len(noisy), 3), generator=g, dtype=torch.uint8)
    write_ply(src / "bunny.ply", noisy, colors=colors, properties={"label": torch.arange(len(noisy), dtype=torch.int32)})
    write_ply(src / "nested" / "dragon.ply", pcgeom.data.load("chinese_dragon", n_points=2000, seed=0))
    return src, noisy, colors


def test_preprocess_pipeline_matches_the_library(tmp_path, capsys):
    src, noisy, colors = _inputs(tmp_path)
    out = tmp_path / "out"
    rc = cli.main(["preprocess", str(src), "--out", str(out), "--remove-statistical", "20,2.0",
                   "--remove-radius", "0.02,3", "--normals", "16", "--viewpoint", "0,0,2"])
    assert rc == 0, capsys.readouterr().err
    assert "2 of 2 files written" in capsys.readouterr().out
    got = read_ply(out / "bunny.ply")
    keep = pcgeom.remove_statistical_outliers(noisy, 20, 2.0)
    kept = torch.arange(len(noisy))[keep]
    keep2 = pcgeom.remove_radius_outliers(noisy[kept], 0.02, 3)
    kept = kept[keep2]
    torch.testing.assert_close(got.points, noisy[kept], rtol=0, atol=0)
    assert torch.equal(got.colors, colors[kept])
    assert torch.equal(got.properties["label"], kept.to(torch.int32))
    want_n = pcgeom.estimate_normals(noisy[kept], 16, viewpoint=[0.0, 0.0, 2.0]).normals
    torch.testing.assert_close(got.normals, want_n, rtol=0, atol=0)
    assert len(kept) < len(noisy) - 30  # most of the 40 noise points went
    assert (out / "nested" / "dragon.ply").exists()


def test_preprocess_voxel_and_never_overwrites(tmp_path, capsys):
    src, noisy, _ = _inputs(tmp_path)
    out = tmp_path / "out"
    assert cli.main(["preprocess", str(src / "bunny.ply"), "--out", str(out), "--voxel", "0.01"]) == 0
    first = read_ply(out / "bunny.ply")
    sub = pcgeom.grid_subsample(noisy, 0.01)
    torch.testing.assert_close(first.points, noisy[sub.index], rtol=0, atol=0)
    capsys.readouterr()
    assert cli.main(["preprocess", str(src / "bunny.ply"), "--out", str(out), "--voxel", "0.05"]) == 1
    err = capsys.readouterr().err
    assert "output exists" in err and "--overwrite" in err
    assert len(read_ply(out / "bunny.ply").points) == len(first.points)  # untouched
    assert cli.main(["preprocess", str(src / "bunny.ply"), "--out", str(out), "--voxel", "0.05", "--overwrite"]) == 0
    assert len(read_ply(out / "bunny.ply").points) < len(first.points)
    assert not [p for p in out.iterdir() if "partial" in p.name]


def test_preprocess_reports_bad_files_and_arguments(tmp_path, capsys):
    src, _, _ = _inputs(tmp_path)
    (src / "broken.ply").write_text("ply\nformat nonsense\n")
    bad = torch.rand(50, 3)
    bad[3] = float("nan")
    write_ply(src / "nan.ply", bad)
    out = tmp_path / "out"
    rc = cli.main(["preprocess", str(src), str(tmp_path / "missing.ply"), "--out", str(out), "--normals", "8"])
    assert rc == 1
    cap = capsys.readouterr()
    assert "2 of 4 files written" in cap.out
    assert "broken.ply" in cap.err and "nan.ply" in cap.err and "NaN" in cap.err and "no such file" in cap.err
    assert not (out / "broken.ply").exists() and not (out / "nan.ply").exists()
    assert not [p for p in out.rglob("*") if "partial" in p.name]
    assert cli.main(["preprocess", str(src), "--out", str(out)]) == 2  # nothing to do
    for bad_args in (["--remove-statistical", "20"], ["--remove-radius", "0,3"], ["--voxel", "-1"],
                     ["--normals", "0"], ["--viewpoint", "1,2"]):
        with pytest.raises(SystemExit):
            cli.main(["preprocess", str(src), "--out", str(out), *bad_args])


@pytest.mark.parametrize("scale", [1e38, 3e38, 1e-38])
def test_preprocess_normals_at_float32_extremes(tmp_path, capsys, scale):
    # Coordinates near float32's largest (and smallest normal) values used to get (0, 0, 1) everywhere:
    # overflowing squared distances picked the neighbours by index, and the PCA's sums overflowed.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(600, 3, generator=g, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True)
    pts = (x * scale).float()
    src = tmp_path / "far.ply"
    write_ply(src, pts)
    out = tmp_path / "out"
    assert cli.main(["preprocess", str(src), "--out", str(out), "--normals", "16"]) == 0, capsys.readouterr().err
    got = read_ply(out / "far.ply")
    assert torch.equal(got.points, pts)
    # float64 brute force on the stored coordinates (scaled by a power of two so float64 squares stay small):
    # the unit vector of the smallest eigenvalue of each 16-neighbourhood's biased covariance.
    p = np.ldexp(pts.double().numpy(), -int(np.frexp(float(pts.abs().max()))[1]))
    d = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
    idx = np.argsort(d, axis=1, kind="stable")[:, :16]
    off = []
    for i, nb in enumerate(idx):
        q = p[nb] - p[nb].mean(0)
        want = np.linalg.eigh(q.T @ q / len(nb))[1][:, 0]
        cos = abs(float(np.dot(got.normals[i].double().numpy(), want)))
        off.append(np.degrees(np.arccos(min(cos, 1.0))))
    off = np.array(off)
    assert int((off > 1.0).sum()) <= 3 and off.max() < 10.0, (int((off > 1.0).sum()), off.max())


def _typed_scan(n=400, seed=0):
    """A surface with 16-bit colours (as LAS conversions write), double coordinates and one extra property per
    PLY type, each holding its type's extremes."""
    rng = np.random.default_rng(seed)
    pts = pcgeom.data.load("bunny", n_points=n, seed=seed).double().numpy() + rng.random((n, 3)) * 1e-9
    cols = [("x", "double", pts[:, 0]), ("y", "double", pts[:, 1]), ("z", "double", pts[:, 2]),
            ("red", "ushort", rng.integers(0, 65536, n)), ("green", "uint16", rng.integers(0, 65536, n)),
            ("blue", "ushort", np.r_[65535, 0, rng.integers(0, 65536, n - 2)])]
    for t in ("char", "uchar", "short", "ushort", "int", "uint", "int8", "uint8", "int16", "uint16", "int32", "uint32"):
        info = np.iinfo(PLY_TYPES[t])
        cols.append((f"p_{t}", t, np.r_[info.min, info.max, rng.integers(info.min, int(info.max) + 1, n - 2)]))
    cols.append(("p_float", "float", np.r_[np.float32(3.4028235e38), np.float32(1e-45), rng.random(n - 2)].astype("f4")))
    cols.append(("p_double", "float64", np.r_[1e308, 5e-324, rng.random(n - 2)]))
    return cols


def _check_kept(src_cols, out_path, *, skip=()):
    """Every column of the output has the input's type and, row for row (matched by coordinates), its value."""
    got, types = stored(out_path), read_ply_types(out_path)
    by_xyz = {tuple(r): i for i, r in enumerate(np.stack([c[2] for c in src_cols[:3]], 1).tolist())}
    rows = np.array([by_xyz[tuple(r)] for r in np.stack([got["x"], got["y"], got["z"]], 1).tolist()])
    for name, t, values in src_cols:
        if name in skip:
            continue
        assert types[name] == CANONICAL[PLY_TYPES[t]], (name, types[name], t)
        assert got[name].dtype == np.dtype(PLY_TYPES[t]), name
        np.testing.assert_array_equal(got[name], np.asarray(values).astype(PLY_TYPES[t])[rows], err_msg=name)
    return got, rows


@pytest.mark.parametrize("fmt", ["binary_little_endian", "binary_big_endian", "ascii"])
def test_preprocess_keeps_16_bit_colours_and_every_property_type_exactly(tmp_path, capsys, fmt):
    cols = _typed_scan()
    src = raw_ply(tmp_path / "scan.ply", cols, fmt)
    out = tmp_path / "out"
    assert cli.main(["preprocess", str(src), "--out", str(out), "--voxel", "0.005"]) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    got, rows = _check_kept(cols, out / "scan.ply")
    assert 50 < len(rows) < 400 and f"400 points read, {len(rows)} written" in text
    # the kept rows are the library's answer on the float32 coordinates
    pts = torch.from_numpy(np.stack([c[2] for c in cols[:3]], 1))
    assert sorted(rows.tolist()) == sorted(pcgeom.grid_subsample(pts.float(), 0.005).index.tolist())


@pytest.mark.parametrize("colours, ply_type", [
    (np.array([[0.0, 127.5, 255.0]] * 60), "float"),   # float colours in 0-255
    (np.array([[0.0, 0.5, 1.0]] * 60), "float"),       # float colours in [0, 1]: not quantised to 8 bits
    (np.array([[0.1, 0.25, 1.0]] * 60), "double"),
    (np.array([[0, 40000, 65535]] * 60), "ushort"),
])
def test_preprocess_float_and_wide_colours_keep_type_and_value(tmp_path, capsys, colours, ply_type):
    rng = np.random.default_rng(1)
    pts = rng.random((60, 3)).astype("f4")
    colours = colours + (rng.random((60, 3)) * 1e-3 if ply_type in ("float", "double") else 0)
    cols = [("x", "float", pts[:, 0]), ("y", "float", pts[:, 1]), ("z", "float", pts[:, 2]),
            ("red", ply_type, colours[:, 0]), ("green", ply_type, colours[:, 1]), ("blue", ply_type, colours[:, 2])]
    src = raw_ply(tmp_path / "c.ply", cols)
    out = tmp_path / "out"
    assert cli.main(["preprocess", str(src), "--out", str(out), "--remove-statistical", "8,3.0",
                     "--normals", "8"]) == 0, capsys.readouterr().err
    _check_kept(cols, out / "c.ply")
    assert read_ply_types(out / "c.ply")["nx"] == "float"  # new normals: the computed precision


def test_preprocess_summary_counts_the_points_read_even_when_a_file_fails(tmp_path, capsys):
    bad = torch.rand(1000, 3)
    bad[7] = float("inf")
    write_ply(tmp_path / "inf.ply", bad)
    assert cli.main(["preprocess", str(tmp_path / "inf.ply"), "--out", str(tmp_path / "out"), "--voxel", "0.1"]) == 1
    out = capsys.readouterr().out
    assert "0 of 1 file written" in out and "1,000 points read, 0 written" in out and "0 points in" not in out


def test_group_keeps_every_column_in_its_type_and_colours_by_patch(tmp_path, capsys):
    cols = _typed_scan(600)
    cols.insert(3, ("nx", "double", np.full(600, 0.5)))
    cols.insert(4, ("ny", "float", np.full(600, -0.25, "f4")))
    cols.insert(5, ("nz", "double", np.full(600, 1.0)))
    cols.append(("patch", "uchar", np.full(600, 9)))  # replaced by this run's labels
    src = raw_ply(tmp_path / "scan.ply", cols, "binary_big_endian")
    out = tmp_path / "out"
    assert cli.main(["group", str(src), "--out", str(out), "--centers", "8", "--k", "32"]) == 0, capsys.readouterr().err
    got, rows = _check_kept(cols, out / "scan_patches.ply", skip=("red", "green", "blue", "patch"))
    assert sorted(rows.tolist()) == list(range(600))
    types = read_ply_types(out / "scan_patches.ply")
    assert types["red"] == "uchar" and types["patch"] == "int" and got["patch"].max() == 7
    res = torch.load(out / "scan_patches.pt", weights_only=True)
    pts32 = torch.from_numpy(np.stack([c[2] for c in cols[:3]], 1)).float()  # grouped in float32, as before
    assert torch.equal(res["neighborhoods"], pts32[res["idx"]] - res["centers"][:, None])


def test_a_folder_that_cannot_be_listed_is_reported_not_a_traceback(tmp_path, capsys, monkeypatch):
    # Found by the long CLI fuzz run: `pcgeom preprocess /` walked into /proc/1/cwd and ended in a
    # PermissionError traceback. An unreadable folder is now one line of the report; the rest is processed.
    import os

    src = tmp_path / "scans"
    (src / "a").mkdir(parents=True)
    (src / "locked").mkdir()
    write_ply(src / "a" / "x.ply", torch.rand(50, 3))
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert cli.main(["preprocess", str(src), "--out", str(tmp_path / "out"), "--voxel", "0.1"]) == 1
    cap = capsys.readouterr()
    assert "1 of 1 file written" in cap.out, cap.out
    assert f"{src / 'locked'}: cannot read this folder inside {src}: Permission denied" in cap.err, cap.err
    assert "Traceback" not in cap.err
