"""pcgeom.data: the bundled scans load, match their files, subsample reproducibly, and ship with the package."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import numpy as np
import plyfile
import pytest
import torch

import pcgeom.data
from conftest import DEVICES

EXPECTED = {"armadillo": 26002, "bunny": 37706, "chinese_dragon": 10000, "kitten": 5210}


def test_names():
    assert pcgeom.data.names() == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scan_matches_its_file_and_is_normalised(name):
    pts, nrm = pcgeom.data.load(name, return_normals=True)
    assert pts.shape == nrm.shape == (EXPECTED[name], 3)
    assert pts.dtype == nrm.dtype == torch.float32
    # Independent decoding of the shipped file.
    v = plyfile.PlyData.read(str(pcgeom.data.path(name)))["vertex"]
    np.testing.assert_array_equal(pts.numpy(), np.stack([v["x"], v["y"], v["z"]], 1))
    np.testing.assert_array_equal(nrm.numpy(), np.stack([v["nx"], v["ny"], v["nz"]], 1))
    lo, hi = pts.double().min(0).values, pts.double().max(0).values
    assert torch.allclose((lo + hi) / 2, torch.zeros(3, dtype=torch.float64), atol=1e-6)
    assert abs((hi - lo).max().item() - 1.0) < 1e-6
    assert torch.allclose(nrm.double().norm(dim=1), torch.ones(len(nrm), dtype=torch.float64), atol=1e-6)
    # Outward normals: most point away from the centroid (closed-ish surfaces).
    outward = ((pts - pts.mean(0)) * nrm).sum(1) > 0
    assert outward.float().mean() > 0.7
    assert torch.isfinite(pts).all()
    assert len(torch.unique(pts, dim=0)) == len(pts)


def test_subsample_is_a_reproducible_ordered_subset():
    full, full_n = pcgeom.data.load("kitten", return_normals=True)
    a, an = pcgeom.data.load("kitten", n_points=500, seed=3, return_normals=True)
    b = pcgeom.data.load("kitten", n_points=500, seed=3)
    c = pcgeom.data.load("kitten", n_points=500, seed=4)
    assert a.shape == (500, 3) and torch.equal(a, b) and not torch.equal(a, c)
    # Each row is a distinct row of the full scan, in file order, with its own normal.
    match = (a[:, None, :] == full[None, :, :]).all(-1)
    assert (match.sum(1) == 1).all()
    rows = match.float().argmax(1)
    assert (rows.diff() > 0).all()
    assert torch.equal(an, full_n[rows])
    assert torch.equal(pcgeom.data.load("kitten", n_points=len(full)), full)


def test_global_rng_untouched():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    pcgeom.data.load("bunny", n_points=100)
    assert torch.equal(torch.rand(3), expected)


def test_fresh_tensors():
    pts = pcgeom.data.load("kitten")
    pts.zero_()
    assert pcgeom.data.load("kitten").abs().sum() > 0


@pytest.mark.parametrize("device", DEVICES)
def test_device(device):
    pts, nrm = pcgeom.data.load("kitten", n_points=10, device=device, return_normals=True)
    assert pts.device.type == nrm.device.type == device


def test_errors():
    with pytest.raises(ValueError, match="unknown scan 'bunnie'; bundled scans: armadillo, bunny"):
        pcgeom.data.load("bunnie")
    with pytest.raises(TypeError, match="name must be a str"):
        pcgeom.data.load(3)
    with pytest.raises(ValueError, match="n_points=6000 exceeds the 5210 points of scan 'kitten'"):
        pcgeom.data.load("kitten", n_points=6000)
    with pytest.raises(ValueError, match="n_points must be >= 1, got 0"):
        pcgeom.data.load("kitten", n_points=0)
    with pytest.raises(TypeError, match="n_points must be an int"):
        pcgeom.data.load("kitten", n_points=10.0)
    with pytest.raises(TypeError, match="return_normals must be a bool"):
        pcgeom.data.load("kitten", return_normals=1)


def test_scans_are_package_data():
    # The files live inside the package and pyproject ships them in wheels.
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parents[1]
    pkg = Path(pcgeom.data.__file__).parent
    config = tomllib.loads((root / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["pcgeom"]
    for name in pcgeom.data.names():
        rel = pcgeom.data.path(name).relative_to(pkg.parent).as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{rel} not in package-data {globs}"
    assert "data/scans/README.md" in globs
    total = sum(pcgeom.data.path(n).stat().st_size for n in pcgeom.data.names())
    assert total < 4 * 2**20
