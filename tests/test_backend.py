"""The package's promises about building and loading: the schema agrees on
every path, the native library has no unstable ABI symbols, the fallback
is announced, import never compiles."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

import pcgeom
from pcgeom.ops.registry import OPS, SCHEMAS

pytestmark = pytest.mark.ops  # the op suite: also run on the pure-torch path

INFO = pcgeom.backend_info()
# The source tree; CI runs a copy of tests/ elsewhere and may point here explicitly.
ROOT = pathlib.Path(os.environ.get("PCGEOM_SOURCE_ROOT", pathlib.Path(__file__).resolve().parents[1]))


def test_backend_info_has_the_documented_keys():
    for key in ("extension_loaded", "native_devices", "stable_abi", "torch_version", "load_error"):
        assert key in INFO
    assert isinstance(INFO["native_devices"], list)
    assert INFO["torch_version"] == torch.__version__
    if INFO["extension_loaded"]:
        assert "cpu" in INFO["native_devices"] and INFO["stable_abi"] and INFO["load_error"] is None
    else:
        assert INFO["native_devices"] == [] and INFO["load_error"]


def test_registered_schemas_are_the_registry_s():
    # Natively the schemas come from csrc/ops.cpp's generated block, else from pcgeom.ops: either way the registry's.
    for name, schema in SCHEMAS.items():
        op = getattr(torch.ops.pcgeom, name).default
        expected = torch._C.parse_schema(f"pcgeom::{schema}")
        assert str(op._schema) == str(expected)


def test_every_registry_entry_points_at_real_files():
    import importlib

    for e in OPS:
        module, function = e.reference.split(":")
        assert callable(getattr(importlib.import_module(module), function)), e.reference
        importlib.import_module(e.module)
        test_file = ROOT / e.tests
        assert test_file.is_file(), f"{e.name}: test file {e.tests} missing"
        assert re.search(r"^pytestmark = .*pytest\.mark\.ops", test_file.read_text(), re.M), \
            f"{e.tests} is not marked as part of the op suite (pytestmark = pytest.mark.ops)"
        if (ROOT / "csrc").is_dir():
            assert (ROOT / e.cpu_source).is_file(), f"{e.name}: no {e.cpu_source}"
            assert re.search(rf'm\.impl\("{e.name}"', (ROOT / e.cpu_source).read_text()), \
                f"{e.cpu_source} does not register pcgeom::{e.name}"


def test_the_backend_loads_libraries_and_imports_no_op():
    # _backend is the ground floor: pcgeom.ops imports it, never the other way round (no import cycle).
    import ast

    import importlib.util

    # The module that imports (site-packages when CI checks an installed wheel), not necessarily ROOT's.
    tree = ast.parse(pathlib.Path(importlib.util.find_spec("pcgeom._backend").origin).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(m.startswith("pcgeom") for m in imported), imported


def test_generated_schema_header_is_the_registry_s():
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_config", ROOT / "csrc" / "build_config.py")
    if spec is None or not (ROOT / "csrc").is_dir() or not (ROOT / "pcgeom" / "ops" / "registry.py").is_file():
        pytest.skip("source tree not found (an installed wheel is under test)")
    build_config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_config)
    reg = build_config.registry()
    assert reg.SCHEMAS == SCHEMAS  # the by-path load sees the same table as the package
    text = reg.cpp_schema_definitions()
    assert text.count("m.def(") == len(OPS) and all(f'm.def("{s}");' in text for s in SCHEMAS.values())


def _native_library():
    import importlib.util

    spec = importlib.util.find_spec("pcgeom._C")
    if spec is None:
        pytest.skip("native library not built")
    return spec.origin


@pytest.mark.slow
def test_native_library_uses_only_the_stable_abi():
    path = _native_library()
    if shutil.which("nm") is None:
        pytest.skip("nm not available")
    out = subprocess.run(["nm", "-D", "--undefined-only", "-C", path], capture_output=True, text=True, check=True).stdout
    unstable = [line for line in out.splitlines() if any(ns in line for ns in ("at::", "c10::", "torch::"))]
    assert unstable == [], f"{len(unstable)} unstable C++ symbols, e.g. {unstable[:3]}"


def _run(code, **env):
    full_env = {k: v for k, v in os.environ.items() if k != "PCGEOM_DISABLE_EXT"}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


@pytest.mark.slow
def test_disable_env_forces_the_pure_torch_path():
    r = _run("import pcgeom, json; print(json.dumps(pcgeom.backend_info()['extension_loaded'])); "
             "import torch; print(pcgeom.knn(torch.rand(1, 4, 3), torch.rand(1, 6, 3), 2).idx.shape)",
             PCGEOM_DISABLE_EXT="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["false", "torch.Size([1, 4, 2])"]


@pytest.mark.slow
def test_doctor_reports_in_plain_words():
    r = subprocess.run([sys.executable, "-m", "pcgeom", "doctor"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "native library" in r.stdout and "torch" in r.stdout
    r = subprocess.run([sys.executable, "-m", "pcgeom", "doctor"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PCGEOM_DISABLE_EXT": "1"})
    assert "PCGEOM_DISABLE_EXT=1 is set" in r.stdout
    r = subprocess.run([sys.executable, "-m", "pcgeom", "doctor", "--check"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PCGEOM_DISABLE_EXT": "1"})
    assert r.returncode == 1


@pytest.mark.slow
def test_import_never_compiles():
    # No JIT: importing must not touch torch.utils.cpp_extension at all.
    r = _run("import sys, pcgeom; print('torch.utils.cpp_extension' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_ops_run_on_a_device_without_native_kernels():
    # The meta device has no kernel of ours: shapes come from the fake kernels.
    q = torch.empty(2, 5, 3, device="meta")
    d, i = pcgeom.knn(q, q, 4)
    assert d.shape == (2, 5, 4) and i.dtype == torch.int64


@pytest.mark.slow
def test_failed_inplace_build_removes_the_library_of_an_earlier_build(tmp_path):
    """An editable install loads pcgeom/_C from the source tree: after a failed
    rebuild, the library an earlier build left there must not be loaded as current."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.exists(os.path.join(root, "setup.py")):
        pytest.skip("needs the source tree")
    src = tmp_path / "src"
    shutil.copytree(root, src, ignore=shutil.ignore_patterns(".venv", "build", ".git", "*.so", "__pycache__",
                                                              "*.egg-info", "pcgeom-demo", "out"))
    stale = src / "pcgeom" / "_C.abi3.so"
    stale.write_bytes(b"an earlier build")
    env = {**os.environ, "CXX": "/bin/false", "CC": "/bin/false"}
    env.pop("PCGEOM_REQUIRE_EXT", None)
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=src,
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not stale.exists(), r.stdout + r.stderr
    info = json.loads((src / "pcgeom" / "_build_info.json").read_text())
    assert "pcgeom._C" in info["failed"]


@pytest.mark.slow
def test_a_missing_compiler_is_named_at_build_import_and_doctor(tmp_path):
    """With no C++ compiler on PATH the build is skipped with a plain reason (not torch's
    "Error compiling objects for extension"), import warns once with that reason, and
    `pcgeom doctor` prints it."""
    if not (ROOT / "setup.py").exists():
        pytest.skip("needs the source tree")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", "build", ".git", "*.so", "__pycache__",
                                                             "*.egg-info", "pcgeom-demo", "out", "_build_info.json"))
    bare = tmp_path / "bin"  # a PATH with python's folder only: no c++, gcc or cc
    bare.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "CC", "PCGEOM_REQUIRE_EXT", "PCGEOM_DISABLE_EXT")}
    env["PATH"] = str(bare)
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=src,
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no C++ compiler found (CXX=c++: not on PATH)" in r.stderr
    assert "Error compiling objects" not in r.stdout + r.stderr
    info = json.loads((src / "pcgeom" / "_build_info.json").read_text())
    assert info["skipped"].startswith("no C++ compiler found (CXX=c++: not on PATH)")
    assert not list((src / "pcgeom").glob("_C*.so"))
    code = (
        "import sys, warnings; sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
        f"sys.path.insert(0, {str(src)!r}); warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    import pcgeom\n"
        "assert pcgeom.__file__.startswith(sys.path[0]), pcgeom.__file__\n"
        "msgs = [str(x.message) for x in w if 'native kernels were not built' in str(x.message)]\n"
        "print(len(msgs), 'no C++ compiler found (CXX=c++: not on PATH)' in msgs[0])\n"
        "import argparse, pcgeom.cli.doctor as d; d.run(argparse.Namespace(check=False))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "1 True"
    assert any(line.strip().startswith("native build       skipped: no C++ compiler found") for line in lines), r.stdout
    # PCGEOM_REQUIRE_EXT=1 turns the same situation into an error that says so
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=src,
                       capture_output=True, text=True, env={**env, "PCGEOM_REQUIRE_EXT": "1"}, timeout=600)
    assert r.returncode != 0 and "PCGEOM_REQUIRE_EXT=1 but no C++ compiler found" in r.stderr


@pytest.mark.slow
def test_failed_compiler_still_installs_the_pure_torch_path(tmp_path):
    """A broken compiler must not fail `pip install`: the package installs
    without the native library, records why, and runs on the pure-torch path."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.exists(os.path.join(root, "setup.py")):
        pytest.skip("needs the source tree")
    target = tmp_path / "site"
    env = {**os.environ, "CXX": "/bin/false", "CC": "/bin/false"}
    env.pop("PCGEOM_REQUIRE_EXT", None)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-cache-dir",
         "--target", str(target), root],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert not list((target / "pcgeom").glob("_C*.so"))
    code = (
        "import sys; sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
        f"sys.path.insert(0, {str(target)!r}); "
        "import pcgeom, torch; i = pcgeom.backend_info(); "
        "assert pcgeom.__file__.startswith(sys.path[0]), pcgeom.__file__; "
        "print(i['extension_loaded'], i['load_error'], sorted(i['build']['failed'])); "
        "print(pcgeom.knn(torch.rand(1, 5, 3), torch.rand(1, 5, 3), 2).idx.shape)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k != "PCGEOM_DISABLE_EXT"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["False not built ['pcgeom._C']", "torch.Size([1, 5, 2])"]


@pytest.mark.parametrize("build, torch_cuda, expected", [
    ({"cuda_requested": True, "cuda_version": "13.0"}, None, "not loaded: this torch has no CUDA (the CPU kernels serve)"),
    ({"cuda_requested": True, "cuda_version": "12.8"}, "13.0", "not loaded: built for CUDA 12.8, this torch has CUDA 13.0"),
    ({"cuda_requested": True, "cuda_version": "13.0"}, "12.8", "not loaded: built for CUDA 13.0, this torch has CUDA 12.8"),
    ({"cuda_requested": True, "cuda_version": "13.0"}, "13.2", None),  # same major: one libcudart.so.13
    ({"cuda_requested": True, "cuda_version": "13.0", "failed": {"pcgeom._C_cuda": "nvcc"}}, None, None),  # nothing to load
    ({"cuda_requested": False}, "13.0", None),
    ({}, None, None),  # no record: the loader decides
])
def test_cuda_library_loads_only_into_a_torch_of_its_cuda_major(build, torch_cuda, expected):
    from pcgeom._backend import cuda_library_mismatch

    assert cuda_library_mismatch(build, torch_cuda) == expected


def test_build_record_says_where_pcgeom_came_from():
    # setup.py records the origin; scripts/ci_wheels_job.sh sets PCGEOM_EXPECT_BUILD_ORIGIN=wheel
    # (and the distribution) when it runs this file against an installed prebuilt wheel.
    build = INFO["build"]
    expected = os.environ.get("PCGEOM_EXPECT_BUILD_ORIGIN")
    if expected:
        assert build.get("origin") == expected, build
        dist = os.environ.get("PCGEOM_EXPECT_DISTRIBUTION")
        assert dist is None or build.get("distribution") == dist, build
        if expected == "wheel":
            assert "site-packages" in pathlib.Path(pcgeom.__file__).parts, pcgeom.__file__
    elif INFO["extension_loaded"] and build.get("built_with_torch"):
        assert build.get("origin") in ("source", "wheel"), build
    if build.get("cuda_requested") and not build.get("failed"):
        assert build["cuda_version"] and build["cuda_archs"]["cubin"], build


def test_build_records_the_cubins_and_ptx_nvcc_is_given():
    import importlib.util

    path = ROOT / "csrc" / "build_config.py"
    if not path.is_file():
        pytest.skip("source tree not found (an installed wheel is under test)")
    spec = importlib.util.spec_from_file_location("build_config", path)
    build_config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_config)
    # The flags as torch.utils.cpp_extension hands them (sorted as strings) for "7.5;9.0+PTX;10.0a".
    flags = ["-gencode=arch=compute_100a,code=sm_100a", "-gencode=arch=compute_75,code=sm_75",
             "-gencode=arch=compute_90,code=compute_90", "-gencode=arch=compute_90,code=sm_90"]
    assert build_config.cuda_archs_from_flags(flags) == {"cubin": ["sm_75", "sm_90", "sm_100a"], "ptx": ["compute_90"]}
    assert build_config.cuda_archs_from_flags(["-gencode=arch=compute_80,code=[sm_80,compute_80]", "-O3"]) \
        == {"cubin": ["sm_80"], "ptx": ["compute_80"]}
