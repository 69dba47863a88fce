"""The opt-in that serves pcgeom's stand-ins under the upstream extensions' module names.

``SHIMS`` maps each served module name to the pcgeom module implementing it;
adding a shim is one line here.  ``NOT_SERVED`` names upstream modules that a
stand-in deliberately leaves out (pytorch3d's renderer, I/O, meshes): importing
one through the shims raises the stand-in's named :class:`ImportError` instead
of "No module named ...".  Two switches, both explicit and reversible:

* :func:`enable_shims` / :func:`disable_shims` -- the current process only;
* ``pcgeom compat enable`` / ``disable`` / ``status`` -- the active Python
  environment, every later process, until disabled (:func:`install_hook`
  writes ``pcgeom-shims.pth`` + ``_pcgeom_shim_hook.py`` into site-packages;
  the hook imports neither torch nor pcgeom at start-up).

Either way a name is served only when no other finder on ``sys.meta_path``
can find it, so a real installed extension always wins, and nothing is
imported or patched until the program imports a shimmed name.  A served
module is a fresh module object of that name holding the public names of the
pcgeom module (``module.__pcgeom_shim__`` names it); packages (``pointnet2_ops``)
import their served submodules eagerly, like the originals.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import pathlib
import sys
import sysconfig
import types

from pcgeom.compat import _shim_hook

SHIMS: dict[str, str] = {
    "knn_cuda": "pcgeom.compat.knn_cuda",
    "pointnet2_ops": "pcgeom.compat.pointnet2_ops",
    "pointnet2_ops.pointnet2_utils": "pcgeom.compat.pointnet2_ops",
    "pointnet2_ops.pointnet2_modules": "pcgeom.compat.pointnet2_modules",
    "chamfer": "pcgeom.compat.chamfer_ext",
    "torch_cluster": "pcgeom.compat.torch_cluster",
    "pointops": "pcgeom.compat.pointops",
    "pointops_cuda": "pcgeom.compat.pointops_cuda",
    "torch_scatter": "pcgeom.compat.torch_scatter",
    "torch_scatter.composite": "pcgeom.compat.torch_scatter.composite",
    "simple_knn": "pcgeom.compat.simple_knn",
    "simple_knn._C": "pcgeom.compat.simple_knn",
    "pyg_lib": "pcgeom.compat.pyg_lib",
    "pyg_lib.ops": "pcgeom.compat.pyg_lib.ops",
    "pyg_lib.sampler": "pcgeom.compat.pyg_lib.sampler",
    # pytorch3d's point ops, laid out as upstream (its package __init__ files import these eagerly too)
    "pytorch3d": "pcgeom.compat.pytorch3d",
    "pytorch3d.ops": "pcgeom.compat.pytorch3d.ops",
    "pytorch3d.ops.knn": "pcgeom.compat.pytorch3d.ops.knn",
    "pytorch3d.ops.ball_query": "pcgeom.compat.pytorch3d.ops.ball_query",
    "pytorch3d.ops.sample_farthest_points": "pcgeom.compat.pytorch3d.ops.sample_farthest_points",
    "pytorch3d.ops.points_normals": "pcgeom.compat.pytorch3d.ops.points_normals",
    "pytorch3d.ops.points_alignment": "pcgeom.compat.pytorch3d.ops.points_alignment",
    "pytorch3d.ops.utils": "pcgeom.compat.pytorch3d.ops.utils",
    "pytorch3d.loss": "pcgeom.compat.pytorch3d.loss",
    "pytorch3d.loss.chamfer": "pcgeom.compat.pytorch3d.loss.chamfer",
    "pytorch3d.structures": "pcgeom.compat.pytorch3d.structures",
    "pytorch3d.structures.pointclouds": "pcgeom.compat.pytorch3d.structures.pointclouds",
    "pytorch3d.transforms": "pcgeom.compat.pytorch3d.transforms",
    "pytorch3d.transforms.rotation_conversions": "pcgeom.compat.pytorch3d.transforms.rotation_conversions",
}

# Upstream module name -> the stand-in package whose ``not_served_error(name)`` says why it is left out.
NOT_SERVED: dict[str, str] = dict.fromkeys((
    "pytorch3d.common", "pytorch3d.datasets", "pytorch3d.implicitron", "pytorch3d.io", "pytorch3d.renderer",
    "pytorch3d.utils", "pytorch3d.vis", "pytorch3d.structures.meshes", "pytorch3d.structures.volumes",
    "pytorch3d.structures.utils",
    "pytorch3d.loss.mesh_edge_loss", "pytorch3d.loss.mesh_laplacian_smoothing",
    "pytorch3d.loss.mesh_normal_consistency", "pytorch3d.loss.point_mesh_distance",
    "pytorch3d.ops.cameras_alignment", "pytorch3d.ops.cubify", "pytorch3d.ops.graph_conv",
    "pytorch3d.ops.interp_face_attrs", "pytorch3d.ops.iou_box3d", "pytorch3d.ops.laplacian_matrices",
    "pytorch3d.ops.marching_cubes", "pytorch3d.ops.mesh_face_areas_normals", "pytorch3d.ops.mesh_filtering",
    "pytorch3d.ops.packed_to_padded", "pytorch3d.ops.perspective_n_points", "pytorch3d.ops.points_to_volumes",
    "pytorch3d.ops.sample_points_from_meshes", "pytorch3d.ops.subdivide_meshes", "pytorch3d.ops.vert_align",
), "pcgeom.compat.pytorch3d")

PTH_NAME = "pcgeom-shims.pth"
HOOK_NAME = "_pcgeom_shim_hook"

__all__ = ["NOT_SERVED", "SHIMS", "disable_shims", "enable_shims", "hook_status", "install_hook",
           "is_start_up_site_dir", "shim_status", "start_up_site_dirs", "uninstall_hook"]


def _children(name: str) -> list[str]:
    return [n for n in SHIMS if n.startswith(name + ".") and "." not in n[len(name) + 1 :]]


def finder_names() -> tuple[str, ...]:
    """Every name the shim finder answers for: the served ones and the refused ones."""
    return tuple(sorted(set(SHIMS) | set(NOT_SERVED)))


class _ShimLoader:
    """Builds the served module from its pcgeom implementation (the heavy import happens here)."""

    def create_module(self, spec):
        return None  # default module creation

    def exec_module(self, module):
        name = module.__spec__.name
        if name in NOT_SERVED:
            raise importlib.import_module(NOT_SERVED[name]).not_served_error(name)
        target = importlib.import_module(SHIMS[name])
        module.__pcgeom_shim__ = target.__name__  # marks it served, so the finder serves its children
        # children first: importing one sets it as an attribute, which the package's own name must then
        # override where they clash (pytorch3d.ops.ball_query is the function, as upstream's __init__ leaves it)
        for child in _children(name):
            importlib.import_module(child)
        public = getattr(target, "__all__", None) or [n for n in vars(target) if not n.startswith("_")]
        for attr in public:
            value = getattr(target, attr)
            if isinstance(value, types.ModuleType) and f"{name}.{attr}" in SHIMS:
                continue  # the served child module, not pcgeom's, as sys.modules has it
            setattr(module, attr, value)
        if hasattr(target, "__version__"):
            module.__version__ = target.__version__
        module.__doc__ = target.__doc__
        if "__getattr__" in vars(target):  # a package that names what it does not serve (pytorch3d.ops)
            module.__getattr__ = target.__getattr__


def shim_spec(fullname: str, finder) -> importlib.machinery.ModuleSpec:
    is_pkg = bool(_children(fullname))
    target = SHIMS.get(fullname) or NOT_SERVED[fullname]
    spec = importlib.machinery.ModuleSpec(fullname, _ShimLoader(), origin=f"pcgeom shim ({target})", is_package=is_pkg)
    if is_pkg:
        spec.submodule_search_locations = []
    return spec


def _is_shim(module) -> bool:
    return getattr(module, "__pcgeom_shim__", None) is not None


def enable_shims() -> None:
    """Serves the names of :data:`SHIMS` in this process (where no real extension is installed).

    Nothing is imported until the program imports one of those names.  A name
    already imported (a real extension) is left alone.  Undo with
    :func:`disable_shims`; for every later process use ``pcgeom compat enable``.

    Example:
        >>> import pcgeom.compat
        >>> pcgeom.compat.enable_shims()
        >>> from pointnet2_ops import pointnet2_utils   # pcgeom's stand-in, unless the real one is installed
        >>> pcgeom.compat.disable_shims()
    """
    _shim_hook.install(finder_names(), origin="process")
    importlib.invalidate_caches()


def disable_shims() -> None:
    """Stops serving shims in this process and forgets the shim modules already imported.

    Both the in-process finder and the environment's start-up hook (for this
    process) are removed; the environment setting itself is unchanged (see
    ``pcgeom compat disable``).  Modules that already hold a reference to a
    shim keep it.
    """
    for origin in ("process", "environment"):
        _shim_hook.uninstall(origin)
    for name in sorted(SHIMS, reverse=True):  # children first
        mod = sys.modules.get(name)
        if mod is not None and _is_shim(mod):
            del sys.modules[name]
    importlib.invalidate_caches()


def _real_origin(name: str) -> str | None:
    """Where a real (non-shim) module of this name would be loaded from, or None."""
    finder = _shim_hook.ShimFinder((), "probe")
    parent, _, _ = name.rpartition(".")
    path = None
    if parent:
        p = sys.modules.get(parent)
        if p is not None and not _is_shim(p):
            path = getattr(p, "__path__", None)
        else:
            pspec = None if (p is not None and _is_shim(p)) else finder.real_spec(parent)
            if pspec is None or pspec.submodule_search_locations is None:
                return None
            path = list(pspec.submodule_search_locations)
        if path is None:
            return None
    mod = sys.modules.get(name)
    if mod is not None and not _is_shim(mod):
        return getattr(mod, "__file__", None) or "already imported"
    spec = finder.real_spec(name, path)
    if spec is None:
        return None
    return spec.origin or "found"


def shim_status() -> dict[str, dict]:
    """Per served name: ``{"real": origin or None, "served_by": "real"|"shim"|None, "imported": bool}``.

    ``served_by`` says what an import would give now: the real extension when
    one is installed, the shim when a shim finder is active, else None
    (the import would fail).
    """
    active = bool(_shim_hook.installed_finders())
    out = {}
    for name in SHIMS:
        real = _real_origin(name)
        mod = sys.modules.get(name)
        if mod is not None:
            served = "shim" if _is_shim(mod) else "real"
        else:
            served = "real" if real else ("shim" if active else None)
        out[name] = {"real": real, "served_by": served, "imported": mod is not None, "target": SHIMS[name]}
    return out


# ---------------------------------------------------------------------------
# The environment-wide switch (pcgeom compat enable / disable / status).


def site_dir_of(site_dir=None) -> pathlib.Path:
    return pathlib.Path(site_dir or sysconfig.get_paths()["purelib"])


def start_up_site_dirs() -> list[pathlib.Path]:
    """The folders whose ``.pth`` files this interpreter runs at start-up (where a hook takes effect).

    ``site.getsitepackages()``, the user site folder when this interpreter reads it
    (not under ``-s`` / ``-I`` / ``PYTHONNOUSERSITE``), and this environment's ``purelib`` / ``platlib``.
    Folders on ``PYTHONPATH`` or ``sys.path`` alone are not among them: Python imports from them but
    never runs their ``.pth`` files.
    """
    import site

    dirs = list(getattr(site, "getsitepackages", lambda: [])())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    paths = sysconfig.get_paths()
    dirs += [paths["purelib"], paths["platlib"]]
    return list(dict.fromkeys(pathlib.Path(d) for d in dirs))


def is_start_up_site_dir(site_dir=None) -> bool:
    """Whether this interpreter runs the ``.pth`` files of ``site_dir`` at start-up (:func:`start_up_site_dirs`).

    A hook written anywhere else serves nothing to this interpreter; ``pcgeom compat enable --site-dir``
    says so.

    Example:
        >>> import tempfile
        >>> from pcgeom.compat import shims
        >>> shims.is_start_up_site_dir(), shims.is_start_up_site_dir(tempfile.mkdtemp())
        (True, False)
    """
    d = site_dir_of(site_dir).resolve()
    return any(d == s.resolve() for s in start_up_site_dirs())


def _pth_line() -> str:
    """The ``.pth`` line: names taken from :data:`SHIMS` now; nothing imported when PCGEOM_DISABLE_SHIMS is set.

    ``site`` runs ``import`` lines of ``.pth`` files at start-up, with ``os``
    and ``sys`` already loaded, so the check costs no import; otherwise only
    the hook module itself (which imports nothing new) is loaded.
    """
    names = finder_names()
    off = repr(_shim_hook.OFF_VALUES)
    return (f"import os, sys; os.environ.get('PCGEOM_DISABLE_SHIMS', '').strip().lower() in {off} "
            f"or __import__({HOOK_NAME!r}).install({names!r})\n")


def _hook_source() -> str:
    return pathlib.Path(_shim_hook.__file__).read_text()


def install_hook(site_dir=None) -> pathlib.Path:
    """Writes the start-up hook into ``site_dir`` (default: this environment's site-packages).

    The ``.pth`` line carries the names of :data:`SHIMS` as they are now and
    checks ``PCGEOM_DISABLE_SHIMS`` before importing anything; the hook module
    is byte-compiled here, so an interpreter that never imports a shimmed name
    only loads that one small module at start-up (measured in
    ``docs/guides/robustness.md``).

    Args:
        site_dir: the folder to write to (default: this environment's site-packages).

    Returns:
        The path of the ``.pth`` file.  Idempotent; re-running it refreshes
        the hook (e.g. after a pcgeom upgrade added a shim).

    Raises:
        OSError: the folder cannot be written.

    Example:
        >>> import tempfile
        >>> from pcgeom.compat import shims
        >>> d = tempfile.mkdtemp()
        >>> shims.install_hook(d).name, shims.hook_status(d)["current"]
        ('pcgeom-shims.pth', True)
        >>> len(shims.uninstall_hook(d))
        3
    """
    d = site_dir_of(site_dir)
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{HOOK_NAME}.py").write_text(_hook_source())
    try:  # cached bytecode, so start-up never compiles the hook (even under PYTHONDONTWRITEBYTECODE)
        import py_compile

        py_compile.compile(str(d / f"{HOOK_NAME}.py"), doraise=True)
    except (OSError, py_compile.PyCompileError):
        pass  # the hook still works, compiled at start-up
    pth = d / PTH_NAME
    pth.write_text("# pcgeom import shims: `pcgeom compat disable` removes this file\n" + _pth_line())
    return pth


def uninstall_hook(site_dir=None) -> list[pathlib.Path]:
    """Removes the start-up hook from ``site_dir``; returns the files removed.

    Raises:
        OSError: a hook file cannot be removed (a read-only site-packages); the ``.pth`` file goes
            first, so the hook is either off or left whole.
    """
    d = site_dir_of(site_dir)
    gone = []
    import importlib.util

    for p in (d / PTH_NAME, d / f"{HOOK_NAME}.py", pathlib.Path(importlib.util.cache_from_source(str(d / f"{HOOK_NAME}.py")))):
        if p.exists():
            p.unlink()
            gone.append(p)
    return gone


def hook_status(site_dir=None) -> dict:
    """``{"installed": bool, "current": bool, "pth": path, "site_dir": path, "disabled_by_env": bool,
    "read_at_start_up": bool}`` (the last: :func:`is_start_up_site_dir`).

    ``current`` is False when the installed hook predates this pcgeom (other
    names or code): run ``pcgeom compat enable`` again.
    """
    d = site_dir_of(site_dir)
    pth, hook = d / PTH_NAME, d / f"{HOOK_NAME}.py"
    installed = pth.exists() and hook.exists()
    current = installed and pth.read_text().endswith(_pth_line()) and hook.read_text() == _hook_source()
    return {"installed": installed, "current": bool(current), "pth": str(pth), "site_dir": str(d),
            "disabled_by_env": _shim_hook.disabled_by_env(), "read_at_start_up": is_start_up_site_dir(d)}


def _served_module_type() -> type:  # for isinstance checks in tests
    return types.ModuleType
