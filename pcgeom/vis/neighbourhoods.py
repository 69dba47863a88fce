"""Pictures of point-cloud neighbourhoods: Open3D geometries, offscreen PNGs, an interactive window.

Open3D is optional (``pip install "pcgeom[vis]"``) and imported only when
needed.  PNGs are rendered with Open3D's legacy ``Visualizer`` in an invisible
window: with no display it falls back to EGL offscreen rendering on Mesa's
software rasteriser, so no GPU, X server or Xvfb is needed.  Without Open3D
(or without EGL) the PNG is drawn by matplotlib's Agg backend instead, with
the same camera, colours and framing.
"""

from __future__ import annotations

import colorsys
import contextlib
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

__all__ = [
    "Rendered",
    "neighbourhood_geometries",
    "patch_colors",
    "render_neighbourhoods",
    "show_neighbourhoods",
]

_INSTALL_HINT = 'pip install "pcgeom[vis]"  (Open3D: open3d-cpu==0.20.0)'
_SYSTEM_HINT = "apt-get install -y libusb-1.0-0 libegl1 libegl-mesa0 libgl1-mesa-dri"
_GREY = np.array([0.80, 0.80, 0.80])
_BACKENDS = ("auto", "open3d", "matplotlib")
# Camera presets for y-up data: (front, up).  "front" is the direction from the
# scene towards the camera (Open3D's convention).
_VIEWS = {
    "front": ((0.0, 0.0, 1.0), (0.0, 1.0, 0.0)),
    "back": ((0.0, 0.0, -1.0), (0.0, 1.0, 0.0)),
    "left": ((-1.0, 0.0, 0.0), (0.0, 1.0, 0.0)),
    "right": ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0)),
    "top": ((0.0, 1.0, 0.0), (0.0, 0.0, -1.0)),
    "bottom": ((0.0, -1.0, 0.0), (0.0, 0.0, 1.0)),
    "iso": ((-0.55, 0.35, 0.75), (0.0, 1.0, 0.0)),
}


class Rendered(NamedTuple):
    """What :func:`render_neighbourhoods` wrote: the PNG's ``path`` and the ``backend`` that drew it."""

    path: Path
    backend: str


def _require_open3d(fn: str):
    try:
        import open3d
    except ImportError as exc:
        extra = ""
        if "libusb" in str(exc):
            extra = f" Open3D is installed but a system library is missing ({exc}); install it with: {_SYSTEM_HINT}."
        raise ImportError(f"{fn} needs Open3D: {_INSTALL_HINT}.{extra}") from exc
    return open3d


def patch_colors(n: int) -> np.ndarray:
    """``n`` well-separated, saturated colours (float64 RGB in ``[0, 1]``, shape ``(n, 3)``).

    Hues step by the golden angle, so neighbouring patch numbers get very
    different colours and any ``n`` works; saturation and brightness alternate
    to separate hues that come back close to each other.  Deterministic.

    Args:
        n: int >= 0, the number of colours.

    Returns:
        ``(n, 3)`` float64 numpy array of RGB values in ``[0, 1]``.

    Raises:
        ValueError: ``n`` not an int >= 0.

    Example:
        >>> from pcgeom.vis import patch_colors
        >>> patch_colors(3).shape
        (3, 3)
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"patch_colors: n must be an int >= 0, got {n!r}")
    out = np.empty((int(n), 3))
    for i in range(int(n)):
        h = (0.03 + i * 0.6180339887498949) % 1.0
        s = (0.85, 0.65, 0.95)[i % 3]
        v = (0.92, 0.75)[(i // 3) % 2]
        out[i] = colorsys.hsv_to_rgb(h, s, v)
    return out


def _as_numpy(fn: str, name: str, t, layout: str, ndim: int) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        arr = (t.float() if t.dtype in (torch.float16, torch.bfloat16) else t).numpy()
    elif isinstance(t, np.ndarray):
        arr = t
    else:
        raise TypeError(f"{fn}: {name} must be a torch.Tensor or numpy array of shape {layout}, got {type(t).__name__}")
    if arr.ndim == ndim + 1:
        if arr.shape[0] != 1:
            raise ValueError(
                f"{fn}: {name} has a batch of {arr.shape[0]} clouds; pictures show one cloud: pass {name}[b] ({layout})"
            )
        arr = arr[0]
    if arr.ndim != ndim:
        raise ValueError(f"{fn}: {name} must have shape {layout} (or with a leading batch of 1), got {tuple(arr.shape)}")
    return arr


def _prepare(fn: str, points, centers, idx):
    pts = _as_numpy(fn, "points", points, "(N, 3)", 2)
    ctr = _as_numpy(fn, "centers", centers, "(G, 3)", 2)
    ix = _as_numpy(fn, "idx", idx, "(G, k)", 2)
    if pts.shape[1] != 3 or pts.dtype.kind != "f":
        raise ValueError(f"{fn}: points must be a floating (N, 3) array, got shape {tuple(pts.shape)} dtype {pts.dtype}")
    if ctr.shape[1] != 3 or ctr.dtype.kind != "f":
        raise ValueError(f"{fn}: centers must be a floating (G, 3) array, got shape {tuple(ctr.shape)} dtype {ctr.dtype}")
    if ix.dtype.kind not in "iu":
        raise TypeError(f"{fn}: idx must be an integer (G, k) array of indices into points, got dtype {ix.dtype}")
    if ix.shape[0] != ctr.shape[0]:
        raise ValueError(f"{fn}: idx must have one row per centre: centers is {tuple(ctr.shape)}, idx is {tuple(ix.shape)}")
    if pts.shape[0] == 0:
        raise ValueError(f"{fn}: points is empty")
    if ix.size and (ix.min() < -1 or ix.max() >= pts.shape[0]):
        raise ValueError(f"{fn}: idx values must be in [-1, {pts.shape[0] - 1}] (-1 = padding), got [{ix.min()}, {ix.max()}]")
    if not (np.isfinite(pts).all() and np.isfinite(ctr).all()):
        raise ValueError(f"{fn}: points and centers must be finite (no NaN or inf)")
    return pts.astype(np.float64), ctr.astype(np.float64), ix.astype(np.int64)


def _scene(fn, pts, ctr, ix, sphere_radius):
    """Colours and sizes shared by both renderers."""
    colors = np.tile(_GREY, (len(pts), 1))
    palette = patch_colors(len(ctr))
    member = np.zeros(len(pts), dtype=bool)
    for g in range(len(ctr)):
        valid = ix[g][ix[g] >= 0]
        colors[valid] = palette[g]
        member[valid] = True
    diag = float(np.linalg.norm(pts.max(0) - pts.min(0))) or 1.0  # 1.0: all points coincide
    radius = diag * 0.011 if sphere_radius is None else float(sphere_radius)
    if not radius > 0:
        raise ValueError(f"{fn}: sphere_radius must be > 0, got {sphere_radius!r}")
    return colors, member, palette, radius


def neighbourhood_geometries(points, centers, idx, *, sphere_radius: float | None = None) -> list:
    """Open3D geometries that show patches (e.g. from :func:`pcgeom.group_patches`) on their cloud.

    Args:
        points: ``(N, 3)`` floating tensor or array (a leading batch of 1 is accepted).
        centers: ``(G, 3)`` centre coordinates (``centers`` of ``group_patches``).
        idx: ``(G, k)`` integer indices into ``points`` of each centre's
            neighbours (``idx`` of ``group_patches(..., return_index=True)``,
            or ``pcgeom.knn(...).idx``); ``-1`` entries (padding) are skipped.
        sphere_radius: radius of the centre spheres (default 1.1 % of the
            cloud's bounding-box diagonal).

    Returns:
        ``[cloud, spheres, lines]``: an ``open3d.geometry.PointCloud`` of every
        point, light grey except each patch's neighbours in the patch colour
        (:func:`patch_colors`; where patches overlap, the later patch wins); a
        ``TriangleMesh`` with one sphere per centre in a darker shade of its
        patch colour; a ``LineSet`` joining each centre to its neighbours.

    Raises:
        ImportError: Open3D is not installed (names ``pip install "pcgeom[vis]"``).

    Example:
        >>> import pcgeom, pcgeom.data
        >>> from pcgeom.vis import neighbourhood_geometries
        >>> pts = pcgeom.data.load("kitten", n_points=2000)[None]
        >>> _, ctr, _, idx = pcgeom.group_patches(pts, 8, 32, return_index=True)
        >>> cloud, spheres, lines = neighbourhood_geometries(pts, ctr, idx)  # doctest: +SKIP
    """
    fn = "neighbourhood_geometries"
    pts, ctr, ix = _prepare(fn, points, centers, idx)
    o3d = _require_open3d(fn)
    colors, _, palette, radius = _scene(fn, pts, ctr, ix, sphere_radius)
    return _geometries(o3d, pts, ctr, ix, colors, palette, radius)


def _geometries(o3d, pts, ctr, ix, colors, palette, radius):
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pts))
    cloud.colors = o3d.utility.Vector3dVector(colors)
    spheres = o3d.geometry.TriangleMesh()
    for g in range(len(ctr)):
        s = o3d.geometry.TriangleMesh.create_sphere(radius=radius, resolution=12)
        s.translate(ctr[g])
        s.paint_uniform_color(palette[g] * 0.55)
        spheres += s
    spheres.compute_vertex_normals()
    starts, ends, line_colors = [], [], []
    for g in range(len(ctr)):
        valid = ix[g][ix[g] >= 0]
        starts.append(np.full(len(valid), g))
        ends.append(valid)
        line_colors.append(np.tile(palette[g] * 0.7, (len(valid), 1)))
    ends_all = np.concatenate(ends) if ends else np.empty(0, np.int64)
    lines = o3d.geometry.LineSet()
    # LineSet vertices: the centres first, then the neighbour points.
    lines.points = o3d.utility.Vector3dVector(np.concatenate([ctr, pts[ends_all]]) if len(ends_all) else ctr)
    pairs = np.stack([np.concatenate(starts) if starts else np.empty(0, np.int64), len(ctr) + np.arange(len(ends_all))], 1)
    lines.lines = o3d.utility.Vector2iVector(pairs.astype(np.int32))
    lines.colors = o3d.utility.Vector3dVector(np.concatenate(line_colors) if line_colors else np.empty((0, 3)))
    return [cloud, spheres, lines]


def _camera(fn: str, view, pts):
    """(front, up, lookat, zoom) as float arrays from a preset name or a dict."""
    zoom = 0.7
    lookat = (pts.max(0) + pts.min(0)) / 2
    if view is None:
        view = "iso"
    if isinstance(view, str):
        if view not in _VIEWS:
            raise ValueError(f"{fn}: view must be one of {', '.join(_VIEWS)} or a dict with 'front' and 'up', got {view!r}")
        front, up = _VIEWS[view]
    elif isinstance(view, dict):
        unknown = set(view) - {"front", "up", "lookat", "zoom"}
        if unknown or "front" not in view:
            raise ValueError(f"{fn}: a view dict needs 'front' and may have 'up', 'lookat', 'zoom'; got keys {sorted(view)}")
        front, up = view["front"], view.get("up", (0.0, 1.0, 0.0))
        lookat = np.asarray(view.get("lookat", lookat), dtype=np.float64)
        zoom = float(view.get("zoom", zoom))
    else:
        raise TypeError(f"{fn}: view must be None, a preset name or a dict, got {type(view).__name__}")
    front = np.asarray(front, dtype=np.float64)
    up = np.asarray(up, dtype=np.float64)
    if front.shape != (3,) or up.shape != (3,) or lookat.shape != (3,):
        raise ValueError(f"{fn}: view 'front', 'up' and 'lookat' must be 3-vectors")
    if np.linalg.norm(np.cross(front, up)) < 1e-9 * np.linalg.norm(front) * np.linalg.norm(up) or not np.linalg.norm(front):
        raise ValueError(f"{fn}: view 'front' and 'up' must be non-zero and not parallel, got {front.tolist()} and {up.tolist()}")
    if not zoom > 0:
        raise ValueError(f"{fn}: view 'zoom' must be > 0, got {zoom}")
    front = front / np.linalg.norm(front)
    right = np.cross(up, front)
    right /= np.linalg.norm(right)
    up = np.cross(front, right)
    return front, up, right, lookat, zoom


def _depth_cue(colors, member, pts, front, lookat):
    """Grey points fade with distance from the camera so the silhouette reads as 3-D."""
    depth = (pts - lookat) @ front  # larger = nearer the camera
    span = np.ptp(depth) or 1.0
    t = (depth - depth.min()) / span
    grey = (0.90 - 0.28 * t)[:, None]
    out = colors.copy()
    out[~member] = np.repeat(grey[~member], 3, axis=1)
    return out


@contextlib.contextmanager
def _filtered_stderr():
    """Hides the C-level noise of opening an EGL context ('XDG_RUNTIME_DIR is invalid', GLFW
    warnings) but passes any other message through, and exposes it to the caller."""
    captured = {"text": ""}
    try:
        fd = 2  # C libraries write to the process's fd 2 whatever sys.stderr is
        if sys.stderr is not None:
            sys.stderr.flush()
        saved = os.dup(fd)
    except OSError:  # no fd 2 at all
        yield captured
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield captured
        finally:
            if sys.stderr is not None:
                sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            captured["text"] = tmp.read().decode(errors="replace")
    noise = ("XDG_RUNTIME_DIR", "GLFW", "[Open3D INFO]", "EGLOffscreenContext", "No display detected")
    rest = [ln for ln in captured["text"].splitlines() if ln.strip() and not any(s in ln for s in noise)]
    if rest:
        print("\n".join(rest), file=sys.stderr)


def _add_framed(o3d, vis, geoms, pts, radius):
    """Adds geometries so the camera frames the whole cloud.

    Open3D's viewer treats a zero-volume bounding box (a flat cloud, e.g. a
    planar scan) as empty and frames the next geometry alone, which then clips
    the cloud away.  A line set with no lines, spanning the cloud's box padded
    by a sphere radius in every axis, fixes the frame and draws nothing.
    """
    lo, hi = pts.min(0) - radius, pts.max(0) + radius
    corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    frame = o3d.geometry.LineSet()
    frame.points = o3d.utility.Vector3dVector(corners)
    vis.add_geometry(frame, reset_bounding_box=True)
    for g in geoms:
        vis.add_geometry(g, reset_bounding_box=False)


class _NoOffscreen(RuntimeError):
    pass


def _render_open3d(o3d, pts, ctr, ix, colors, palette, radius, camera, size, point_size, out: Path):
    front, up, _, lookat, zoom = camera
    geoms = _geometries(o3d, pts, ctr, ix, colors, palette, radius)
    with o3d.utility.VerbosityContextManager(o3d.utility.VerbosityLevel.Error):
        vis = o3d.visualization.Visualizer()
        with _filtered_stderr() as err:
            ok = vis.create_window(window_name="pcgeom", width=size[0], height=size[1], visible=False)
        if not ok or vis.get_render_option() is None:
            raise _NoOffscreen(
                "Open3D could not open an offscreen OpenGL context (no display and no working EGL). "
                f"Install Mesa's EGL libraries: {_SYSTEM_HINT}. {err['text'].strip()}"
            )
        try:
            _add_framed(o3d, vis, geoms, pts, radius)
            opt = vis.get_render_option()
            opt.background_color = np.array([1.0, 1.0, 1.0])
            opt.point_size = float(point_size)
            opt.light_on = False  # flat colours: patches stay exactly their palette colour
            opt.line_width = 1.0
            ctl = vis.get_view_control()
            ctl.set_lookat(lookat)
            ctl.set_front(front)
            ctl.set_up(up)
            ctl.set_zoom(zoom)
            # The narrowest field of view switches Open3D to an orthographic camera,
            # the projection the matplotlib renderer uses: both give the same framing.
            ctl.change_field_of_view(step=-90.0)
            vis.poll_events()
            vis.update_renderer()
            vis.capture_screen_image(str(out), do_render=True)
        finally:
            vis.destroy_window()
    if not out.is_file() or out.stat().st_size == 0:
        raise _NoOffscreen("Open3D produced no image")


def _render_matplotlib(pts, ctr, ix, colors, palette, radius, camera, size, point_size, out: Path):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(f"render_neighbourhoods needs Open3D or matplotlib: {_INSTALL_HINT}") from exc

    front, up, right, lookat, zoom = camera

    def project(p):
        q = p - lookat
        return np.stack([q @ right, q @ up], axis=-1), q @ front

    xy, depth = project(pts)
    cxy, cdepth = project(ctr)
    half_w, half_h = _half_extent(pts, size, zoom)
    dpi = 100
    px_per_unit = size[1] / (2 * half_h)
    fig = Figure(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi, facecolor="white")
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    ax.set_facecolor("white")
    ax.set_xlim(-half_w, half_w)
    ax.set_ylim(-half_h, half_h)
    point_area = (point_size * 72.0 / dpi) ** 2
    centre_area = (2 * radius * px_per_unit * 72.0 / dpi) ** 2
    centre_colors = palette * 0.55
    # Orthographic painter's algorithm over points and centre discs together:
    # far first, near drawn over them, so centres behind the surface stay hidden.
    all_xy = np.concatenate([xy, cxy])
    all_depth = np.concatenate([depth, cdepth])
    all_colors = np.concatenate([colors, centre_colors])
    all_sizes = np.concatenate([np.full(len(xy), point_area), np.full(len(cxy), centre_area)])
    order = np.argsort(all_depth, kind="stable")
    ax.scatter(all_xy[order, 0], all_xy[order, 1], s=all_sizes[order], c=all_colors[order], marker="o",
               linewidths=0, zorder=1)
    # Lines cannot join the painter's order, so draw them (and their centre again,
    # on top) only for centres on the visible side: those no cloud point in
    # front of them covers, per a coarse z-buffer of cells one sphere radius wide.
    cell = np.floor(all_xy / max(radius, 1e-12)).astype(np.int64)
    keys = cell[: len(xy), 0] * 1_000_003 + cell[: len(xy), 1]
    uniq, inv = np.unique(keys, return_inverse=True)
    zmax = np.full(len(uniq), -np.inf)
    np.maximum.at(zmax, inv, depth)
    ckeys = cell[len(xy):, 0] * 1_000_003 + cell[len(xy):, 1]
    pos = np.clip(np.searchsorted(uniq, ckeys), 0, max(len(uniq) - 1, 0))
    front_z = np.where(uniq[pos] == ckeys, zmax[pos], -np.inf) if len(uniq) else np.full(len(ckeys), -np.inf)
    visible = cdepth >= front_z - 2.0 * radius
    segs, seg_colors = [], []
    for g in np.flatnonzero(visible):
        valid = ix[g][ix[g] >= 0]
        segs.extend(np.stack([np.broadcast_to(cxy[g], (len(valid), 2)), xy[valid]], 1))
        seg_colors.extend([palette[g] * 0.7] * len(valid))
    if segs:
        ax.add_collection(LineCollection(segs, colors=seg_colors, linewidths=0.6, alpha=0.85, zorder=2))
    vis_idx = np.flatnonzero(visible)
    if len(vis_idx):
        ax.scatter(cxy[vis_idx, 0], cxy[vis_idx, 1], s=centre_area, c=centre_colors[vis_idx], marker="o",
                   linewidths=0, zorder=3)
    fig.savefig(out, dpi=dpi, facecolor="white", format="png")


def _half_extent(pts, size, zoom):
    """Half width/height of the view in data units, framed like Open3D's legacy viewer:
    proportional to the bounding box's diagonal and to ``zoom`` (smaller is closer)."""
    half_diag = float(np.linalg.norm(pts.max(0) - pts.min(0))) / 2 or 1.0
    half_h = 1.25 * zoom * half_diag
    return half_h * size[0] / size[1], half_h


def render_neighbourhoods(
    points,
    centers,
    idx,
    path: str | os.PathLike,
    *,
    size: tuple[int, int] = (1024, 768),
    view=None,
    backend: str = "auto",
    point_size: float = 4.0,
    sphere_radius: float | None = None,
    overwrite: bool = False,
) -> Rendered:
    """Renders patches on their cloud to a PNG, offscreen: no GPU, no display, no window.

    The picture (white background, flat colours): the cloud in light grey,
    shaded by depth; each patch's neighbours in its own colour
    (:func:`patch_colors`); the centres as larger spheres in a darker shade;
    a line from each centre to each of its neighbours.

    Args:
        points: ``(N, 3)`` floating tensor or array (a leading batch of 1 is accepted).
        centers: ``(G, 3)`` centre coordinates.
        idx: ``(G, k)`` integer indices into ``points`` (``-1`` = padding, skipped).
        path: the ``.png`` to write; never replaced unless ``overwrite=True``.
        size: ``(width, height)`` in pixels.
        view: the camera, looking at the centre of the cloud's bounding box:
            ``None`` (= ``"iso"``, a three-quarter view of y-up data), a preset
            (``"front"`` looks along -z, ``"back"``, ``"left"``, ``"right"``,
            ``"top"``, ``"bottom"``, ``"iso"``) or a dict with ``"front"``
            (3-vector from the scene towards the camera), optional ``"up"``
            (default +y), ``"lookat"`` and ``"zoom"`` (default 0.7; smaller is closer).
        backend: ``"open3d"`` (legacy ``Visualizer``, invisible window; EGL
            offscreen on Mesa when there is no display), ``"matplotlib"``
            (Agg, orthographic), or ``"auto"``: Open3D when installed and able
            to open an offscreen context, else matplotlib (with a warning in
            the second case).
        point_size: point diameter in pixels.
        sphere_radius: centre sphere radius in data units (default 1.1 % of the bounding-box diagonal).
        overwrite: replace an existing file.

    Returns:
        :class:`Rendered` ``(path, backend)``: the PNG written and ``"open3d"`` or ``"matplotlib"``.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False.
        ImportError: ``backend="open3d"`` without Open3D (names ``pip install "pcgeom[vis]"``).
        RuntimeError: ``backend="open3d"`` and no OpenGL context can be made
            (names the Mesa/EGL packages to install).

    Example:
        >>> import os, tempfile, pcgeom, pcgeom.data
        >>> from pcgeom.vis import render_neighbourhoods
        >>> pts = pcgeom.data.load("kitten", n_points=2000)[None]
        >>> _, ctr, _, idx = pcgeom.group_patches(pts, 8, 32, return_index=True)
        >>> out = render_neighbourhoods(pts, ctr, idx, os.path.join(tempfile.mkdtemp(), "k.png"),
        ...                             size=(320, 240), backend="matplotlib")
        >>> out.backend, out.path.stat().st_size > 0
        ('matplotlib', True)
    """
    fn = "render_neighbourhoods"
    pts, ctr, ix = _prepare(fn, points, centers, idx)
    if backend not in _BACKENDS:
        raise ValueError(f"{fn}: backend must be one of {_BACKENDS}, got {backend!r}")
    if (not isinstance(size, (tuple, list)) or len(size) != 2
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 16 <= v <= 8192 for v in size)):
        raise ValueError(f"{fn}: size must be (width, height) with integers in [16, 8192], got {size!r}")
    size = (int(size[0]), int(size[1]))
    if not (isinstance(point_size, (int, float)) and point_size > 0):
        raise ValueError(f"{fn}: point_size must be > 0, got {point_size!r}")
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"{fn}: path must end in .png, got {path}")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{fn}: {path} already exists; pass overwrite=True to replace it")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{fn}: folder {path.parent} does not exist")
    camera = _camera(fn, view, pts)
    colors, member, palette, radius = _scene(fn, pts, ctr, ix, sphere_radius)
    colors = _depth_cue(colors, member, pts, camera[0], camera[3])

    o3d = None
    if backend == "open3d":
        o3d = _require_open3d(fn)
    elif backend == "auto":
        try:
            o3d = _require_open3d(fn)
        except ImportError:
            o3d = None
    # Render next to the target and move it into place, so a failed render
    # never leaves a partial file and an existing file is only replaced on success.
    fd, tmp_name = tempfile.mkstemp(suffix=".png", prefix=".pcgeom-render-", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the PNG ordinary permissions
    try:
        used = "matplotlib"
        if o3d is not None:
            try:
                _render_open3d(o3d, pts, ctr, ix, colors, palette, radius, camera, size, point_size, tmp)
                used = "open3d"
            except _NoOffscreen as exc:
                if backend == "open3d":
                    raise RuntimeError(f"{fn}: {exc}") from None
                warnings.warn(f"{fn}: falling back to matplotlib: {exc}", RuntimeWarning, stacklevel=2)
        if used == "matplotlib":
            _render_matplotlib(pts, ctr, ix, colors, palette, radius, camera, size, point_size, tmp)
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if the file appeared meanwhile
            except FileExistsError:
                raise FileExistsError(f"{fn}: {path} already exists; pass overwrite=True to replace it") from None
            except OSError:
                os.replace(tmp, path)  # file systems without hard links
    finally:
        tmp.unlink(missing_ok=True)
    return Rendered(path, used)


def _has_display() -> bool:
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def show_neighbourhoods(
    points,
    centers,
    idx,
    *,
    size: tuple[int, int] = (1024, 768),
    point_size: float = 5.0,
    sphere_radius: float | None = None,
    window_name: str = "pcgeom neighbourhoods",
) -> None:
    """Opens an interactive Open3D window showing patches on their cloud (blocks until closed).

    Same geometries as :func:`neighbourhood_geometries`.  On Linux a display
    is required (``DISPLAY`` or ``WAYLAND_DISPLAY``): without one this raises
    at once, because Open3D would otherwise fall back to an invisible
    offscreen window and wait forever.  Use :func:`render_neighbourhoods` to
    get a PNG on a headless machine.

    Args:
        points: ``(N, 3)`` or ``(1, N, 3)`` cloud, as in :func:`neighbourhood_geometries`.
        centers: ``(G, 3)`` or ``(1, G, 3)`` patch centres.
        idx: ``(G, k)`` or ``(1, G, k)`` int64 neighbour indices (``-1`` slots are skipped).
        size: window ``(width, height)`` in pixels.
        point_size: point diameter in pixels.
        sphere_radius: centre sphere radius (default 1.1 % of the bounding-box diagonal).
        window_name: the window title.

    Raises:
        RuntimeError: no display, or the window could not be opened.
        ImportError: Open3D is not installed (names ``pip install "pcgeom[vis]"``).
    """
    fn = "show_neighbourhoods"
    pts, ctr, ix = _prepare(fn, points, centers, idx)
    if not _has_display():
        raise RuntimeError(
            f"{fn}: no display (DISPLAY and WAYLAND_DISPLAY are unset), so no window can open; "
            "use pcgeom.vis.render_neighbourhoods(points, centers, idx, 'picture.png') to render a PNG instead"
        )
    o3d = _require_open3d(fn)
    colors, _, palette, radius = _scene(fn, pts, ctr, ix, sphere_radius)
    geoms = _geometries(o3d, pts, ctr, ix, colors, palette, radius)
    vis = o3d.visualization.Visualizer()
    if not vis.create_window(window_name=window_name, width=int(size[0]), height=int(size[1]), visible=True):
        raise RuntimeError(f"{fn}: Open3D could not open a window on display {os.environ.get('DISPLAY') or os.environ.get('WAYLAND_DISPLAY')!r}")
    try:
        _add_framed(o3d, vis, geoms, pts, radius)
        opt = vis.get_render_option()
        opt.background_color = np.array([1.0, 1.0, 1.0])
        opt.point_size = float(point_size)
        opt.light_on = False
        vis.run()
    finally:
        vis.destroy_window()
