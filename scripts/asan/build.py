"""Builds pcgeom's CPU kernels (csrc/ops.cpp + csrc/*/*_cpu.cpp) with AddressSanitizer.

The result, ``build/asan/libpcgeom_asan.so``, is the same library as the
installed ``pcgeom._C`` (same sources, schemas and namespace), compiled with
``-fsanitize=address``.  Load it instead of ``pcgeom._C`` with
``PCGEOM_NATIVE_LIB`` (pcgeom/_backend.py) in a process that preloads gcc's
libasan, so that any out-of-bounds read or write in a kernel aborts with a
report instead of returning garbage:

    python scripts/asan/build.py
    PCGEOM_NATIVE_LIB=build/asan/libpcgeom_asan.so ASAN_OPTIONS=detect_leaks=0 \\
        LD_PRELOAD=$(gcc -print-file-name=libasan.so) python -m pytest -q tests/test_raw_ops.py

scripts/ci_asan_job.sh does exactly that in CI.  Objects are rebuilt only when
a source or header changed (~1-2 min from scratch on 2 cores).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import os
import pathlib
import subprocess
import sys
import sysconfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "asan"
sys.path.insert(0, str(ROOT / "csrc"))
import build_config  # noqa: E402  (the flags and schemas setup.py uses)

# setup.py's ABI target and numerics; -O1 -g and the sanitizer instead of -O3.
FLAGS = ["-std=c++17", "-O1", "-g", "-fPIC", *build_config.NUMERICS, "-pthread",
         "-fsanitize=address", "-fno-omit-frame-pointer", *build_config.define_flags()]


def _stamp(src: pathlib.Path, flags: list) -> str:
    h = hashlib.sha256(" ".join(flags).encode())
    h.update(src.read_bytes())
    for hdr in sorted((ROOT / "csrc").rglob("*.h")):
        h.update(hdr.read_bytes())
    return h.hexdigest()


def main(argv=None) -> pathlib.Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("MAX_JOBS", "2")))
    args = ap.parse_args(argv)
    from torch.utils.cpp_extension import include_paths, library_paths

    OUT.mkdir(parents=True, exist_ok=True)
    build_config.write_schema_header()
    sources = [ROOT / "csrc" / "ops.cpp", *sorted((ROOT / "csrc").glob("*/*_cpu.cpp"))]
    inc = [f"-I{ROOT / 'csrc'}", f"-I{sysconfig.get_paths()['include']}"]
    inc += [f"-I{p}" for p in include_paths()]

    def compile_one(src: pathlib.Path) -> pathlib.Path:
        obj = OUT / (src.parent.name + "_" + src.stem + ".o")
        stamp = obj.with_suffix(".stamp")
        key = _stamp(src, FLAGS + inc)
        if obj.exists() and stamp.exists() and stamp.read_text() == key:
            return obj
        cmd = ["g++", *FLAGS, *inc, "-c", str(src), "-o", str(obj)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"compiling {src} failed:\n{res.stderr[-4000:]}")
        stamp.write_text(key)
        return obj

    print(f"compiling {len(sources)} sources with -fsanitize=address ({args.jobs} jobs)", flush=True)
    with cf.ThreadPoolExecutor(max(1, args.jobs)) as ex:
        objs = list(ex.map(compile_one, sources))
    lib = OUT / "libpcgeom_asan.so"
    libs = [f"-L{p}" for p in library_paths()] + [f"-Wl,-rpath,{p}" for p in library_paths()]
    cmd = ["g++", "-shared", "-fsanitize=address", *map(str, objs), "-o", str(lib), *libs,
           "-ltorch_cpu", "-lc10"]
    subprocess.run(cmd, check=True)
    print(f"built {lib}")
    return lib


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        sys.exit(1)
