"""How pcgeom's kernels are compiled: the one copy of the flags and the generated schema header.

``setup.py`` (the real build), ``scripts/asan/build.py`` (AddressSanitizer build of the
CPU kernels) and ``scripts/cuda_emu/build.py`` (the CUDA kernels compiled for the CPU
emulator) all load this file by path, so the three builds cannot drift apart: same
ABI target, same numerics flags, same op schemas.  It imports only the standard
library.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

CSRC = pathlib.Path(__file__).resolve().parent
ROOT = CSRC.parent

# 2.10 is the first torch whose stable ABI has everything the kernels use.
TORCH_TARGET_VERSION = "0x020a000000000000"
PY_LIMITED_API = "0x030A0000"  # CPython 3.10 -> wheel tag cp310-abi3

# -ffp-contract=off: distances must be bit-identical to the reference path, so the
# compiler may not fuse a*a+b into an FMA (nvcc: --fmad=false for the same reason).
NUMERICS = ["-ffp-contract=off"]
# Keeps the binaries on glibc 2.28 (manylinux_2_28) when built on a newer glibc:
# see the header for the one symbol it removes. Force-included, host and CUDA.
GLIBC_FLOOR_HEADER = CSRC / "common" / "glibc_floor.h"
CXX_FLAGS = ["-O3", "-std=c++17", *NUMERICS, "-fvisibility=hidden", "-include", str(GLIBC_FLOOR_HEADER)]
# The dl* functions glibc_floor.h binds to their GLIBC_2.2.5 versions live in libdl.so.2 on
# glibc < 2.34 (a stub on newer ones). By file name: glibc >= 2.34 has only an empty libdl.a
# for -ldl; --no-as-needed so the linker keeps it.
LINK_FLAGS = ["-Wl,--no-as-needed", "-l:libdl.so.2"]
CXX_FLAGS_MSVC = ["/O2", "/std:c++17", "/fp:precise"]
DEFINES = [("TORCH_TARGET_VERSION", TORCH_TARGET_VERSION), ("Py_LIMITED_API", PY_LIMITED_API)]

# The header csrc/ops.cpp includes inside its STABLE_TORCH_LIBRARY block (git-ignored).
SCHEMA_HEADER = CSRC / "generated_schemas.h"


def define_flags() -> list[str]:
    """``DEFINES`` as ``-DNAME=VALUE`` compiler flags (for the scripts that call g++ directly)."""
    return [f"-D{name}={value}" for name, value in DEFINES]


def nvcc_flags(threads: int | None = None) -> list[str]:
    # --threads: one file (knn) dominates the build; compile its architectures in parallel.
    threads = threads or int(os.environ.get("PCGEOM_NVCC_THREADS", "2"))
    return ["-O3", "--fmad=false", "-std=c++17", "-DUSE_CUDA=1", f"--pre-include={GLIBC_FLOOR_HEADER}",
            f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}", f"--threads={threads}"]


def cuda_archs_from_flags(flags: list[str]) -> dict[str, list[str]]:
    """The cubins and PTX that nvcc's ``-gencode`` flags ask for, oldest first.

    ``["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90,code=compute_90"]``
    gives ``{"cubin": ["sm_90"], "ptx": ["compute_90"]}``; ``code=[sm_80,compute_80]`` lists both.
    """
    cubins, ptx = [], []
    for flag in flags:
        if "code=" not in flag:
            continue
        # rpartition: "-gencode=" itself ends in "code=".
        for code in flag.rpartition("code=")[2].strip("[]").split(","):
            code = code.strip()
            if code.startswith("sm_") and code not in cubins:
                cubins.append(code)
            elif code.startswith("compute_") and code not in ptx:
                ptx.append(code)

    def number(code):  # "sm_100a" -> 100 (torch hands the flags sorted as strings: sm_100 before sm_75)
        return int("".join(c for c in code.split("_", 1)[1] if c.isdigit()))

    return {"cubin": sorted(cubins, key=number), "ptx": sorted(ptx, key=number)}


def registry():
    """``pcgeom/ops/registry.py``, loaded by path (importing ``pcgeom`` would load torch and the old build)."""
    path = ROOT / "pcgeom" / "ops" / "registry.py"
    spec = importlib.util.spec_from_file_location("pcgeom_op_registry", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_schema_header(path: pathlib.Path = SCHEMA_HEADER) -> pathlib.Path:
    """Writes the ``m.def`` lines of every registered op; untouched when unchanged (no needless rebuild)."""
    text = ("// generated from pcgeom/ops/registry.py by csrc/build_config.py: do not edit, do not commit\n"
            + registry().cpp_schema_definitions("m") + "\n")
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path
