"""``pcgeom preprocess``: voxel, outliers and normals for PLY files, with group's file handling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcgeom
import pcgeom.data
from pcgeom import cli
from pcgeom.io import read_ply, write_ply


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
