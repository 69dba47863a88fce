"""The import-shim opt-in: off by default, explicit, reversible, never shadowing a real extension.

Each scenario runs in a fresh interpreter (sys.meta_path and sys.modules are
process state), with its own sys.path.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from pcgeom import cli
from pcgeom.compat import shims


def _run(code, *, env_extra=None, cwd=None):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PCGEOM_DISABLE_SHIMS", None)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_registry_names_every_upstream_module():
    assert set(shims.SHIMS) == {"knn_cuda", "pointnet2_ops", "pointnet2_ops.pointnet2_utils",
                                "pointnet2_ops.pointnet2_modules", "chamfer", "torch_cluster", "torch_scatter",
                                "torch_scatter.composite", "simple_knn", "simple_knn._C", "pointops", "pointops_cuda",
                                "pyg_lib", "pyg_lib.ops", "pyg_lib.sampler"} | {
                                    n for n in shims.SHIMS if n.split(".")[0] == "pytorch3d"}
    assert {n for n in shims.SHIMS if n.startswith("pytorch3d")} >= {
        "pytorch3d", "pytorch3d.ops", "pytorch3d.ops.knn", "pytorch3d.loss", "pytorch3d.structures"}
    assert not set(shims.SHIMS) & set(shims.NOT_SERVED)
    for target in shims.SHIMS.values():
        assert target.startswith("pcgeom.compat.")


@pytest.mark.slow
def test_torch_cluster_served_through_the_opt_in():
    # PyG / DGCNN code imports the names directly from torch_cluster.
    _run("""
        import torch, pcgeom.compat
        try:
            import torch_cluster
        except ImportError:
            pass
        else:
            raise SystemExit("torch_cluster importable before the opt-in")
        pcgeom.compat.enable_shims()
        from torch_cluster import knn_graph, fps
        import torch_cluster
        assert torch_cluster.__pcgeom_shim__ == "pcgeom.compat.torch_cluster", torch_cluster.__pcgeom_shim__
        x = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
        batch = torch.tensor([0, 0, 0, 0])
        edge_index = knn_graph(x, k=2, batch=batch, loop=False)
        assert edge_index.shape == (2, 8), edge_index.shape
        # every node's two neighbours are the two points at distance 2 (not the diagonal)
        d = (x[edge_index[0]] - x[edge_index[1]]).pow(2).sum(-1)
        assert torch.equal(d, torch.full((8,), 4.0)), d
        assert fps(x, batch, ratio=0.5, random_start=False).tolist() == [0, 3]
        pcgeom.compat.disable_shims()
    """)


@pytest.mark.slow
def test_torch_scatter_composite_is_a_served_submodule():
    # Code written against torch_scatter's layout imports the composites from their package.
    _run("""
        import torch, pcgeom.compat
        pcgeom.compat.enable_shims()
        from torch_scatter.composite import scatter_softmax
        import torch_scatter
        assert torch_scatter.composite.__pcgeom_shim__ == "pcgeom.compat.torch_scatter.composite"
        assert torch_scatter.scatter_softmax is scatter_softmax and callable(torch_scatter.scatter)
        out = scatter_softmax(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))
        assert out.tolist() == [0.5, 0.5, 1.0], out
    """)


@pytest.mark.slow
def test_off_by_default_then_enable_disable_in_process():
    out = _run("""
        import sys, importlib
        import pcgeom, pcgeom.compat
        assert not any(getattr(f, "_pcgeom_shim_finder", False) for f in sys.meta_path), "patched without opt-in"
        for name in ("pointnet2_ops", "knn_cuda", "chamfer"):
            try:
                importlib.import_module(name)
            except ModuleNotFoundError:
                pass
            else:
                raise AssertionError(name + " importable without the opt-in")
        pcgeom.compat.enable_shims()
        import pointnet2_ops
        from pointnet2_ops import pointnet2_utils, pointnet2_modules
        from knn_cuda import KNN
        import chamfer
        assert pointnet2_ops.pointnet2_utils is pointnet2_utils and pointnet2_ops.__path__ == []
        assert pointnet2_utils.__pcgeom_shim__ == "pcgeom.compat.pointnet2_ops"
        assert pointnet2_modules.PointnetSAModule.__module__ == "pcgeom.compat.pointnet2_modules"
        assert chamfer.forward is pcgeom.compat.chamfer_ext.forward
        st = pcgeom.compat.shim_status()
        assert all(v["served_by"] == "shim" and v["real"] is None for v in st.values()), st
        pcgeom.compat.disable_shims()
        assert "pointnet2_ops" not in sys.modules
        try:
            import pointnet2_ops.pointnet2_utils
        except ModuleNotFoundError:
            print("disabled again")
    """)
    assert "disabled again" in out


@pytest.mark.slow
def test_a_real_extension_always_wins(tmp_path):
    # Fake "real" extensions on sys.path: they must be imported, not the shims.
    pkg = tmp_path / "pointnet2_ops"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    (pkg / "pointnet2_utils.py").write_text("REAL = True\n")
    (tmp_path / "knn_cuda.py").write_text("REAL = True\n")
    out = _run(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import pcgeom.compat
        pcgeom.compat.enable_shims()
        import pointnet2_ops, knn_cuda
        from pointnet2_ops import pointnet2_utils
        assert pointnet2_ops.REAL and knn_cuda.REAL and pointnet2_utils.REAL
        assert not hasattr(pointnet2_utils, "__pcgeom_shim__")
        # the real package has no pointnet2_modules: the shim must not graft one onto it
        try:
            import pointnet2_ops.pointnet2_modules
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("shim grafted onto a real package")
        st = pcgeom.compat.shim_status()
        assert st["knn_cuda"]["served_by"] == "real" and st["knn_cuda"]["real"].endswith("knn_cuda.py")
        assert st["chamfer"]["served_by"] == "shim"
        import chamfer
        assert chamfer.__pcgeom_shim__
        print("real wins")
    """)
    assert "real wins" in out


@pytest.mark.slow
def test_environment_hook_via_pth(tmp_path):
    site_dir = tmp_path / "site-packages"
    pth = shims.install_hook(site_dir)
    assert pth.exists() and (site_dir / "_pcgeom_shim_hook.py").exists()
    assert shims.hook_status(site_dir)["installed"] and shims.hook_status(site_dir)["current"]
    # The hook runs at start-up (site.addsitedir processes the .pth as site.main does), installs only a
    # finder -- no torch, no pcgeom -- and the unmodified import then works.
    code = f"""
        import site, sys
        site.addsitedir({str(site_dir)!r})
        assert "torch" not in sys.modules and "pcgeom" not in sys.modules, "the hook imported heavy modules"
        finders = [f for f in sys.meta_path if getattr(f, "_pcgeom_shim_finder", False)]
        assert len(finders) == 1 and finders[0].origin == "environment"
        try:
            from pointnet2_ops import pointnet2_utils
        except ModuleNotFoundError:
            print("not served")
        else:
            print("served", pointnet2_utils.__pcgeom_shim__)
    """
    assert "served pcgeom.compat.pointnet2_ops" in _run(code)
    assert "not served" in _run(code.replace("len(finders) == 1 and finders[0].origin == \"environment\"", "not finders"),
                                env_extra={"PCGEOM_DISABLE_SHIMS": "1"})
    gone = shims.uninstall_hook(site_dir)
    assert len(gone) == 3 and not pth.exists()  # the .pth, the hook and its cached bytecode
    assert not list(site_dir.rglob("*.pyc"))
    assert not shims.hook_status(site_dir)["installed"]


def _read_at_start_up(monkeypatch, site_dir):
    """Makes ``site_dir`` one of this interpreter's start-up site folders, as a venv's site-packages is."""
    real = shims.start_up_site_dirs
    monkeypatch.setattr(shims, "start_up_site_dirs", lambda: [*real(), site_dir])


def test_cli_compat_and_doctor(tmp_path, capsys, monkeypatch):
    site_dir = str(tmp_path / "sp")
    _read_at_start_up(monkeypatch, tmp_path / "sp")
    assert cli.main(["compat", "enable", "--site-dir", site_dir]) == 0
    assert "enabled for this Python environment" in capsys.readouterr().out
    assert cli.main(["compat", "status", "--site-dir", site_dir]) == 0
    out = capsys.readouterr().out
    assert "enabled in" in out and "pointnet2_ops.pointnet2_modules" in out and "shim: pcgeom.compat" in out
    assert cli.main(["compat", "disable", "--site-dir", site_dir]) == 0
    assert "removed" in capsys.readouterr().out
    assert not os.path.exists(os.path.join(site_dir, shims.PTH_NAME))
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "import shims" in out and "knn_cuda" in out and "chamfer" in out


def test_stale_hook_is_reported(tmp_path):
    site_dir = tmp_path / "sp"
    shims.install_hook(site_dir)
    (site_dir / shims.PTH_NAME).write_text("import _pcgeom_shim_hook; _pcgeom_shim_hook.install(('knn_cuda',))\n")
    st = shims.hook_status(site_dir)
    assert st["installed"] and not st["current"]


def _startup_modules(python, env_extra=None) -> set:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PCGEOM_DISABLE_SHIMS")}
    env.update(env_extra or {})
    out = subprocess.run([python, "-c", "import sys; print('\\n'.join(sorted(sys.modules)))"], env=env,
                         capture_output=True, text=True, timeout=120, check=True, cwd=python.parents[2]).stdout
    return set(out.split())


@pytest.mark.slow
def test_start_up_hook_imports_nothing_until_a_shimmed_name_is_looked_up(tmp_path):
    # A real environment (a venv, whose site-packages .pth files site.main runs at start-up), with
    # and without the hook: an interpreter that never imports a shimmed name loads only the hook
    # module itself, and nothing at all with PCGEOM_DISABLE_SHIMS=1.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site_dir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    bare = _startup_modules(python)
    pth = shims.install_hook(site_dir)
    # The names are derived from SHIMS when the hook is written (other shims added later are served too).
    assert all(repr(name) in pth.read_text() for name in shims.SHIMS)
    hooked = _startup_modules(python)
    assert hooked - bare == {shims.HOOK_NAME}, sorted(hooked - bare)
    assert "importlib.util" not in hooked
    assert _startup_modules(python, {"PCGEOM_DISABLE_SHIMS": "1"}) == bare
    # The hook is live: a shimmed name is answered by it (pcgeom is not installed in this venv,
    # so the finder declines after the lookup, which is when importlib.util is imported).
    probe = subprocess.run([python, "-c", "import sys; import importlib.util as u; print(u.find_spec('knn_cuda'), "
                            "[type(f).__name__ for f in sys.meta_path][-1])"], capture_output=True, text=True,
                           timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd=tmp_path)
    assert probe.stdout.split()[-1] == "ShimFinder", probe.stdout + probe.stderr


def test_help_and_enable_name_every_served_module_and_say_what_pyg_gets(tmp_path, capsys, monkeypatch):
    # The lists come from SHIMS: every served name, submodules included, in --help and in what enable prints.
    with pytest.raises(SystemExit):
        cli.main(["compat", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    _read_at_start_up(monkeypatch, tmp_path / "sp")
    assert cli.main(["compat", "enable", "--site-dir", str(tmp_path / "sp")]) == 0
    printed = capsys.readouterr().out
    assert {n.partition(".")[0] for n in shims.SHIMS} == {
        "chamfer", "knn_cuda", "pointnet2_ops", "pointops", "pointops_cuda", "pyg_lib", "pytorch3d", "simple_knn",
        "torch_cluster", "torch_scatter"}
    for text in (helptext, printed):
        assert f"{len(shims.SHIMS)} module names" in helptext
        for name in shims.SHIMS:
            top, _, sub = name.partition(".")
            assert top in text and (not sub or f".{sub}" in text), (name, text)
        assert "torch_geometric" in text and "2.8" in text
        assert "pyg_lib, torch_cluster, torch_scatter" in text


def test_enable_into_a_folder_this_python_never_reads_says_so(tmp_path, capsys):
    site_dir = tmp_path / "elsewhere"
    assert not shims.is_start_up_site_dir(site_dir) and shims.is_start_up_site_dir()
    assert cli.main(["compat", "enable", "--site-dir", str(site_dir)]) == 0  # written, as asked
    cap = capsys.readouterr()
    assert "enabled for this Python environment" not in cap.out + cap.err
    assert "every later process" not in (cap.out + cap.err).lower()
    assert f"does not read {site_dir} at start-up" in cap.err and "serves nothing" in cap.err
    assert (site_dir / shims.PTH_NAME).exists()
    assert cli.main(["compat", "status", "--site-dir", str(site_dir)]) == 0
    out = capsys.readouterr().out
    assert "does not read" in out and "shim: " not in out  # nothing is served here from that folder
    assert cli.main(["compat", "disable", "--site-dir", str(site_dir)]) == 0
    assert f"disabled in {site_dir}" in capsys.readouterr().out


def test_disable_on_a_read_only_site_packages_is_a_clear_message(tmp_path, capsys, monkeypatch):
    site_dir = tmp_path / "sp"
    shims.install_hook(site_dir)
    real_unlink = type(site_dir).unlink

    def unlink(self, *a, **k):  # as in a root-owned site-packages (tests may run as root, so chmod cannot say it)
        if self.parent == site_dir:
            raise PermissionError(13, "Permission denied", str(self))
        return real_unlink(self, *a, **k)

    monkeypatch.setattr(type(site_dir), "unlink", unlink)
    assert cli.main(["compat", "disable", "--site-dir", str(site_dir)]) == 1
    err = capsys.readouterr().err
    assert f"pcgeom compat disable: cannot remove the hook from {site_dir}" in err
    assert "Permission denied" in err and "stay enabled" in err and "PCGEOM_DISABLE_SHIMS=1" in err
    assert "Traceback" not in err
    assert shims.hook_status(site_dir)["installed"]  # the .pth goes first: left whole, not half
