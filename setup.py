"""Build script for pcgeom's native kernels.

The kernels are compiled here, at install time, never at import. Two modules are
built against the LibTorch *stable ABI* (one binary keeps working across torch
upgrades):

* ``pcgeom._C``       -- the op schemas and the CPU kernels;
* ``pcgeom._C_cuda``  -- the CUDA kernels (only when torch has CUDA and nvcc is found).

Keeping CUDA in its own module means a CUDA build loaded on a CPU-only torch
loses only the CUDA kernels, never the CPU ones.

The build is optional.  If a compiler, ninja or nvcc fails, the failing module is
skipped and the package still installs; the pure-torch path then serves (see
``pcgeom doctor``).  Environment switches:

* ``PCGEOM_REQUIRE_EXT=1``  any build failure is an error (CI sets it);
* ``PCGEOM_NO_EXT=1``       skip the native build entirely;
* ``FORCE_CUDA=1``          build the CUDA module even without a visible GPU;
* ``PCGEOM_NO_CUDA=1``      never build the CUDA module;
* ``PCGEOM_PREBUILT_WHEEL=1`` records the build as a prebuilt wheel (set by
  ``scripts/build_wheels.sh``; ``pcgeom doctor`` says where pcgeom came from).
"""

import glob
import importlib.util
import json
import os
import shutil
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("csrc")


def _load_build_config():
    # The flags and the schema header generator, shared with scripts/asan and scripts/cuda_emu.
    spec = importlib.util.spec_from_file_location("pcgeom_build_config", os.path.join(HERE, CSRC, "build_config.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = _load_build_config()


def _flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


REQUIRE_EXT = _flag("PCGEOM_REQUIRE_EXT")
NO_EXT = _flag("PCGEOM_NO_EXT")


def _say(msg):
    # pip hides setup.py output unless -v; pcgeom doctor reports the outcome at run time.
    print(f"[pcgeom build] {msg}", file=sys.stderr, flush=True)


def _write_build_info(info, *roots):
    # Read by `pcgeom doctor`, which is where users see why a kernel is missing.
    for root in roots or (HERE,):
        folder = os.path.join(root, "pcgeom")
        if os.path.isdir(folder):
            with open(os.path.join(folder, "_build_info.json"), "w") as f:
                json.dump(info, f, indent=1, sort_keys=True)


def _sources(pattern):
    return sorted(glob.glob(os.path.join(CSRC, pattern), recursive=True))


def _cuda_wanted(torch, cuda_home):
    if _flag("PCGEOM_NO_CUDA"):
        return False, "PCGEOM_NO_CUDA=1"
    if torch.version.cuda is None:
        return False, "this torch build has no CUDA"
    if cuda_home is None or shutil.which("nvcc") is None and not os.path.exists(
        os.path.join(cuda_home or "", "bin", "nvcc")
    ):
        return False, "nvcc / CUDA_HOME not found"
    if not _flag("FORCE_CUDA") and not torch.cuda.is_available():
        return False, "no GPU visible (set FORCE_CUDA=1 to build the CUDA kernels anyway)"
    if not _sources("*/*_cuda.cu"):
        return False, "no CUDA sources"
    return True, None


def _missing_compiler():
    """The plain reason when the C++ compiler torch would call is absent, else None.

    torch's BuildExtension runs ``$CXX`` (default ``c++``); without this check a missing
    compiler surfaces as "Error compiling objects for extension", which names no cause.
    """
    if sys.platform == "win32":
        return None  # MSVC is found through the environment torch sets up, not PATH
    cxx = os.environ.get("CXX", "").strip() or "c++"
    exe = cxx.split()[0]
    if shutil.which(exe) is None:
        return (f"no C++ compiler found (CXX={cxx}: not on PATH); install one (Debian/Ubuntu: "
                "apt-get install g++) and reinstall, or install a prebuilt pcgeom wheel")
    return None


def _cuda_archs():
    # The -gencode flags torch hands nvcc (TORCH_CUDA_ARCH_LIST, else the visible GPU,
    # else torch's own list), as recorded facts for `pcgeom doctor`: which GPUs get a
    # cubin, and which only a PTX JIT compile. None when torch's helper is unavailable.
    try:
        from torch.utils.cpp_extension import _get_cuda_arch_flags
        flags = _get_cuda_arch_flags()
    except Exception as exc:  # private helper: a torch without it must not fail the build
        _say(f"could not read the CUDA architecture flags ({exc}); pcgeom doctor will not list them")
        return None
    return BUILD.cuda_archs_from_flags(flags)


def _extensions():
    info = {"built_with_torch": None, "stable_abi": True, "cuda_requested": False,
            "torch_target_version": "2.10", "skipped": None,
            "origin": "wheel" if _flag("PCGEOM_PREBUILT_WHEEL") else "source"}
    if NO_EXT:
        _say("PCGEOM_NO_EXT=1: installing without native kernels (pure-torch path)")
        info["skipped"] = "PCGEOM_NO_EXT=1"
        return [], {}, info
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
    except Exception as exc:  # torch missing in the build environment
        if REQUIRE_EXT:
            raise RuntimeError(
                "PCGEOM_REQUIRE_EXT=1 but torch cannot be imported at build time "
                f"({exc}); install torch first and build with --no-build-isolation"
            ) from exc
        _say(f"torch not importable at build time ({exc}); installing the pure-torch path. "
             "Install torch first and use `pip install --no-build-isolation .` to get native kernels.")
        info["skipped"] = f"torch not importable at build time: {exc}"
        return [], {}, info

    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    info["built_with_torch"] = torch.__version__
    if version < (2, 10):
        msg = f"torch {torch.__version__} is older than 2.10, the first with the stable ABI pcgeom uses"
        if REQUIRE_EXT:
            raise RuntimeError(msg)
        _say(msg + "; installing the pure-torch path")
        info["skipped"] = msg
        return [], {}, info

    no_compiler = _missing_compiler()
    if no_compiler:
        if REQUIRE_EXT:
            raise RuntimeError(f"PCGEOM_REQUIRE_EXT=1 but {no_compiler}")
        _say(no_compiler + "; installing the pure-torch path")
        info["skipped"] = no_compiler
        return [], {}, info

    define = list(BUILD.DEFINES)
    cxx = list(BUILD.CXX_FLAGS_MSVC if sys.platform == "win32" else BUILD.CXX_FLAGS)
    include = [os.path.join(HERE, CSRC)]
    link = [] if sys.platform == "win32" else list(BUILD.LINK_FLAGS)
    # csrc/ops.cpp's m.def block, generated from the op registry (pcgeom/ops/registry.py).
    BUILD.write_schema_header()

    exts = [
        CppExtension(
            "pcgeom._C",
            sources=_sources("ops.cpp") + _sources("*/*_cpu.cpp"),
            include_dirs=include,
            define_macros=define,
            extra_compile_args={"cxx": cxx},
            extra_link_args=link,
            py_limited_api=True,
        )
    ]
    want_cuda, why_not = _cuda_wanted(torch, CUDA_HOME)
    if want_cuda:
        info["cuda_requested"] = True
        info["cuda_version"] = torch.version.cuda
        info["cuda_archs"] = _cuda_archs()
        exts.append(
            CUDAExtension(
                "pcgeom._C_cuda",
                sources=_sources("common/module_cuda.cpp") + _sources("*/*_cuda.cu"),
                include_dirs=include,
                define_macros=define + [("USE_CUDA", "1")],
                extra_compile_args={"cxx": cxx, "nvcc": BUILD.nvcc_flags()},
                extra_link_args=link,
                py_limited_api=True,
            )
        )
    else:
        _say(f"CUDA kernels not built: {why_not}")
        info["cuda_skipped"] = why_not

    class OptionalBuildExt(BuildExtension.with_options(use_ninja=True)):
        """Builds each module independently; a failure drops that module only."""

        failed = {}
        built = set()

        @staticmethod
        def _record_failure(name, exc):
            if REQUIRE_EXT:
                raise exc
            OptionalBuildExt.failed[name] = f"{type(exc).__name__}: {exc}"
            _say(f"building {name} failed ({exc}); pcgeom will use the pure-torch path "
                 "for what it would have provided. Set PCGEOM_REQUIRE_EXT=1 to make this an error.")

        def _drop_stale_output(self, name):
            # A library left in build/ by an earlier build must not be shipped
            # as if this build had produced it.
            path = self.get_ext_fullpath(name)
            if os.path.exists(path):
                os.remove(path)

        def build_extensions(self):
            # torch's set-up (compiler probe, ABI check) can fail before any
            # single module is attempted: that too must not fail the install.
            try:
                super().build_extensions()
            except Exception as exc:
                for ext in self.extensions:
                    if ext.name not in OptionalBuildExt.built and ext.name not in OptionalBuildExt.failed:
                        self._record_failure(ext.name, exc)
                        self._drop_stale_output(ext.name)

        def build_extension(self, ext):
            try:
                super().build_extension(ext)
                OptionalBuildExt.built.add(ext.name)
            except Exception as exc:  # compiler, ninja or nvcc failure
                self._record_failure(ext.name, exc)
                self._drop_stale_output(ext.name)

        def _kept(self):
            return [e for e in self.extensions if e.name not in OptionalBuildExt.failed]

        def copy_extensions_to_source(self):
            # An in-place / editable build loads the library from the source
            # tree: one left there by an earlier build must go when this build
            # failed, or pcgeom would load it as if it were current.
            for name in OptionalBuildExt.failed:
                stale = os.path.join(HERE, self.get_ext_filename(name))
                if os.path.exists(stale):
                    os.remove(stale)
                    _say(f"removed {os.path.relpath(stale, HERE)} left by an earlier build")
            all_exts, self.extensions = self.extensions, self._kept()
            try:
                super().copy_extensions_to_source()
            finally:
                self.extensions = all_exts

        def get_outputs(self):
            all_exts, self.extensions = self.extensions, self._kept()
            try:
                return super().get_outputs()
            finally:
                self.extensions = all_exts

        def get_output_mapping(self):
            all_exts, self.extensions = self.extensions, self._kept()
            try:
                return super().get_output_mapping()
            finally:
                self.extensions = all_exts

        def run(self):
            super().run()
            info["failed"] = dict(OptionalBuildExt.failed)
            info["distribution"] = self.distribution.get_name()
            # In-place (editable) builds read the file from the source tree; others from build_lib.
            _write_build_info(info, HERE if self.inplace else self.build_lib)

    return exts, {"build_ext": OptionalBuildExt}, info


ext_modules, cmdclass, build_info = _extensions()
if not ext_modules:
    _write_build_info(build_info)

setup(
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    options={"bdist_wheel": {"py_limited_api": "cp310"}} if ext_modules else {},
)
