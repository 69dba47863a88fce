"""pcgeom.vis: real offscreen renders (Open3D when installed, matplotlib always), geometry contents, errors.

No test opens a window: show_neighbourhoods is only called with the display removed.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import torch

import pcgeom
import pcgeom.data
from pcgeom.vis import neighbourhoods as nb
from pcgeom.vis import neighbourhood_geometries, patch_colors, render_neighbourhoods, show_neighbourhoods

SIZE = (320, 240)


@pytest.fixture(autouse=True)
def _mesa_cache(tmp_path_factory, monkeypatch):
    # Keep Mesa's shader cache out of the home folder.
    monkeypatch.setenv("MESA_SHADER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mesa"))


@pytest.fixture(scope="module")
def kitten_patches():
    pts = pcgeom.data.load("kitten", n_points=2000)[None]
    _, ctr, _, idx = pcgeom.group_patches(pts, 12, 48, return_index=True)
    return pts[0], ctr[0], idx[0]


def _image(path):
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _assert_rich_picture(img, palette, *, min_found):
    assert img.shape[:2] == (SIZE[1], SIZE[0])
    white = (img == 255).all(-1)
    assert 0.03 < (~white).mean() < 0.9, "blank or fully covered picture"
    assert (img[0] == 255).all() and (img[:, 0] == 255).all(), "background must be white"
    colours = np.unique(img.reshape(-1, 3) // 8, axis=0)
    assert len(colours) > 20, f"only {len(colours)} distinct colours"
    # The patch colours themselves appear (flat shading keeps them exact up to rounding).
    target = np.round(palette * 255).astype(int)
    pix = img.reshape(-1, 3).astype(int)
    found = sum(bool((np.abs(pix - c).max(1) <= 2).any()) for c in target)
    assert found >= min_found, f"only {found} of {len(target)} patch colours visible"


def _plane_scene():
    """A square grid in z = 0 with one patch at the upper left (x < 0, y > 0)."""
    g = torch.linspace(-1, 1, 40)
    pts = torch.stack(torch.meshgrid(g, g, indexing="xy"), -1).reshape(-1, 2)
    pts = torch.cat([pts, torch.zeros(len(pts), 1)], 1)
    centre = torch.tensor([-0.6, 0.6, 0.0])
    idx = torch.cdist(centre[None], pts).topk(60, largest=False).indices
    return pts, centre[None], idx


def _colour_centroid(img, colour):
    hits = np.argwhere((np.abs(img.astype(int) - np.round(colour * 255).astype(int)).max(-1) <= 2))
    assert len(hits) > 20, "patch colour not found"
    return hits.mean(0)  # (row, col)


def test_patch_colors_are_distinct():
    pal = patch_colors(64)
    assert pal.shape == (64, 3) and pal.min() >= 0 and pal.max() <= 1
    assert np.array_equal(pal, patch_colors(64))
    d = np.linalg.norm(pal[:, None] - pal[None], axis=-1)[np.triu_indices(64, 1)]
    assert d.min() > 0.02
    # Neighbouring patch numbers look very different.
    assert np.linalg.norm(np.diff(pal[:32], axis=0), axis=1).min() > 0.3
    # None is grey-ish: every colour is saturated.
    assert (pal.max(1) - pal.min(1)).min() > 0.3
    with pytest.raises(ValueError):
        patch_colors(-1)


def test_matplotlib_render(tmp_path, kitten_patches):
    pts, ctr, idx = kitten_patches
    out = render_neighbourhoods(pts, ctr, idx, tmp_path / "k.png", size=SIZE, backend="matplotlib")
    assert out.backend == "matplotlib" and out.path == tmp_path / "k.png"
    _assert_rich_picture(_image(out.path), patch_colors(len(ctr)), min_found=6)
    assert not list(tmp_path.glob(".pcgeom-render-*")), "temporary file left behind"


@pytest.mark.parametrize("backend", ["matplotlib", "open3d"])
def test_camera_orientation(tmp_path, backend):
    if backend == "open3d":
        pytest.importorskip("open3d")
    pts, ctr, idx = _plane_scene()
    out = render_neighbourhoods(pts, ctr, idx, tmp_path / "p.png", size=SIZE, view="front", backend=backend)
    row, col = _colour_centroid(_image(out.path), patch_colors(1)[0])
    assert col < SIZE[0] * 0.45 and row < SIZE[1] * 0.45, (row, col)  # upper left, as seen from +z
    out = render_neighbourhoods(pts, ctr, idx, tmp_path / "b.png", size=SIZE, view="back", backend=backend)
    row, col = _colour_centroid(_image(out.path), patch_colors(1)[0])
    assert col > SIZE[0] * 0.55 and row < SIZE[1] * 0.45, (row, col)  # mirrored from behind


def test_open3d_offscreen_render(tmp_path, kitten_patches):
    pytest.importorskip("open3d")
    pts, ctr, idx = kitten_patches
    out = render_neighbourhoods(pts, ctr, idx, tmp_path / "k.png", size=SIZE, backend="open3d")
    assert out.backend == "open3d"
    _assert_rich_picture(_image(out.path), patch_colors(len(ctr)), min_found=6)
    # "auto" picks Open3D when it works.
    assert render_neighbourhoods(pts, ctr, idx, tmp_path / "a.png", size=SIZE).backend == "open3d"


def test_open3d_geometries(kitten_patches):
    o3d = pytest.importorskip("open3d")
    pts, ctr, idx = kitten_patches
    idx = idx.clone()
    idx[0, -5:] = -1  # padding is skipped
    cloud, spheres, lines = neighbourhood_geometries(pts[None], ctr[None], idx[None])
    assert isinstance(cloud, o3d.geometry.PointCloud) and isinstance(lines, o3d.geometry.LineSet)
    assert isinstance(spheres, o3d.geometry.TriangleMesh)
    np.testing.assert_allclose(np.asarray(cloud.points), pts.double().numpy())
    colors = np.asarray(cloud.colors)
    member = np.zeros(len(pts), bool)
    member[idx[idx >= 0].numpy()] = True
    assert np.allclose(colors[~member], nb._GREY)
    assert not np.isclose(colors[member], nb._GREY).all(1).any()
    # The last patch owns its points (later patches win on overlap).
    np.testing.assert_allclose(colors[idx[-1].numpy()], np.tile(patch_colors(len(ctr))[-1], (idx.shape[1], 1)))
    assert len(lines.lines) == int((idx >= 0).sum())
    line_pts = np.asarray(lines.points)
    ends = np.asarray(lines.lines)
    # Each line starts at its centre and ends at a neighbour.
    np.testing.assert_allclose(line_pts[ends[: idx.shape[1] - 5, 0]], np.tile(ctr[0].double().numpy(), (idx.shape[1] - 5, 1)))
    np.testing.assert_allclose(line_pts[ends[: idx.shape[1] - 5, 1]], pts[idx[0, :-5]].double().numpy())
    # One sphere per centre, centred on it.
    verts = np.asarray(spheres.vertices).reshape(len(ctr), -1, 3)
    np.testing.assert_allclose(verts.mean(1), ctr.double().numpy(), atol=1e-6)


def test_auto_falls_back_to_matplotlib_without_offscreen(tmp_path, kitten_patches, monkeypatch):
    pytest.importorskip("open3d")
    pts, ctr, idx = kitten_patches

    def no_context(*a, **k):
        raise nb._NoOffscreen("no EGL (simulated)")

    monkeypatch.setattr(nb, "_render_open3d", no_context)
    with pytest.warns(RuntimeWarning, match="falling back to matplotlib: no EGL"):
        out = render_neighbourhoods(pts, ctr, idx, tmp_path / "a.png", size=SIZE)
    assert out.backend == "matplotlib" and out.path.is_file()
    with pytest.raises(RuntimeError, match="render_neighbourhoods: no EGL"):
        render_neighbourhoods(pts, ctr, idx, tmp_path / "b.png", size=SIZE, backend="open3d")
    assert not (tmp_path / "b.png").exists() and not list(tmp_path.glob(".pcgeom-render-*"))


def test_without_open3d(tmp_path, kitten_patches, monkeypatch):
    pts, ctr, idx = kitten_patches
    monkeypatch.setitem(sys.modules, "open3d", None)  # import open3d -> ImportError
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing extra is not worth a warning
        assert render_neighbourhoods(pts, ctr, idx, tmp_path / "a.png", size=SIZE).backend == "matplotlib"
    with pytest.raises(ImportError, match=r'pip install "pcgeom\[vis\]"'):
        render_neighbourhoods(pts, ctr, idx, tmp_path / "b.png", size=SIZE, backend="open3d")
    with pytest.raises(ImportError, match=r'neighbourhood_geometries needs Open3D: pip install "pcgeom\[vis\]"'):
        neighbourhood_geometries(pts, ctr, idx)


def test_show_without_display_raises_instead_of_hanging(kitten_patches, monkeypatch):
    pts, ctr, idx = kitten_patches
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    with pytest.raises(RuntimeError, match="show_neighbourhoods: no display.*render_neighbourhoods"):
        show_neighbourhoods(pts, ctr, idx)


def test_never_overwrites(tmp_path, kitten_patches):
    pts, ctr, idx = kitten_patches
    target = tmp_path / "x.png"
    target.write_bytes(b"precious")
    with pytest.raises(FileExistsError, match=str(target)):
        render_neighbourhoods(pts, ctr, idx, target, size=SIZE, backend="matplotlib")
    assert target.read_bytes() == b"precious"
    render_neighbourhoods(pts, ctr, idx, target, size=SIZE, backend="matplotlib", overwrite=True)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_argument_errors(tmp_path, kitten_patches):
    pts, ctr, idx = kitten_patches
    p = tmp_path / "e.png"
    r = render_neighbourhoods
    with pytest.raises(ValueError, match=r"points has a batch of 2 clouds"):
        r(torch.stack([pts, pts]), ctr, idx, p, backend="matplotlib")
    with pytest.raises(ValueError, match=r"idx values must be in \[-1, 1999\]"):
        r(pts, ctr, idx + 2000, p, backend="matplotlib")
    with pytest.raises(ValueError, match="one row per centre"):
        r(pts, ctr[:3], idx, p, backend="matplotlib")
    with pytest.raises(TypeError, match="idx must be an integer"):
        r(pts, ctr, idx.float(), p, backend="matplotlib")
    with pytest.raises(ValueError, match="must be finite"):
        r(pts.clone().fill_(float("nan")), ctr, idx, p, backend="matplotlib")
    with pytest.raises(ValueError, match="backend must be one of"):
        r(pts, ctr, idx, p, backend="vtk")
    with pytest.raises(ValueError, match="view must be one of"):
        r(pts, ctr, idx, p, view="sideways")
    with pytest.raises(ValueError, match="not parallel"):
        r(pts, ctr, idx, p, view={"front": (0, 1, 0), "up": (0, 2, 0)})
    with pytest.raises(ValueError, match="size must be"):
        r(pts, ctr, idx, p, size=(0, 10))
    with pytest.raises(ValueError, match="must end in .png"):
        r(pts, ctr, idx, tmp_path / "e.jpg")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        r(pts, ctr, idx, tmp_path / "nope" / "e.png")
    assert not list(tmp_path.iterdir())


def test_no_renderer_at_all(tmp_path, kitten_patches, monkeypatch):
    pts, ctr, idx = kitten_patches
    monkeypatch.setitem(sys.modules, "open3d", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ImportError, match=r'needs Open3D or matplotlib: pip install "pcgeom\[vis\]"'):
        render_neighbourhoods(pts, ctr, idx, tmp_path / "a.png", size=SIZE)
    assert not list(tmp_path.iterdir())
