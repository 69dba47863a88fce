"""Checks a built wheel's shared libraries against a manylinux policy, by their symbol versions.

``auditwheel show`` calls pcgeom's wheels ``linux_x86_64``: they link torch's own
libraries (``libc10.so``, ``libtorch_cpu.so``, ...) and, for CUDA, the CUDA runtime,
which the wheel must not carry and which auditwheel cannot find outside a torch
install.  The platform promise is still checkable: every versioned symbol a library
needs (``GLIBC_2.14``, ``GLIBCXX_3.4.21``, ...) must be one the policy allows, and
every library it links must be either on the policy's list (libc, libstdc++, ...)
or one of the libraries torch provides at run time.  The policy table is the one
shipped inside the installed ``auditwheel``, so the two tools cannot disagree.

    python scripts/check_wheel_abi.py dist/pcgeom-*.whl [--policy manylinux_2_28]
        [--torch-lib PATTERN ...]

Prints, per library, the highest version needed of each family and the libraries it
links; exits 1 on any violation.  Needs ``auditwheel`` (and its ``pyelftools``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import pathlib
import sys
import tempfile
import zipfile

# Provided by the torch the wheel is installed beside (never bundled).
TORCH_LIBS = ["libc10.so", "libtorch.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so",
              "libcudart.so.1[23]"]


def _version_key(v: str):
    return tuple(int(p) if p.isdigit() else -1 for p in v.split("."))


def policy_table(name: str, arch: str = "x86_64") -> tuple[dict[str, set[str]], set[str]]:
    import auditwheel

    path = pathlib.Path(auditwheel.__file__).parent / "policy" / "manylinux-policy.json"
    for entry in json.loads(path.read_text()):
        if entry["name"] == name or name in entry.get("aliases", []):
            return {k: set(v) for k, v in entry["symbol_versions"][arch].items()}, set(entry["lib_whitelist"])
    raise SystemExit(f"check_wheel_abi: policy {name!r} not in {path}")


def needs(path: pathlib.Path, system_libs: set[str]) -> tuple[list[str], dict[str, set[str]]]:
    """(DT_NEEDED libraries, {family: {version, ...}} needed from ``system_libs``) of one ELF file."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        dyn = elf.get_section_by_name(".dynamic")
        libs = [t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"] if dyn else []
        versions: dict[str, set[str]] = {}
        verneed = elf.get_section_by_name(".gnu.version_r")
        if verneed is not None:
            for need, auxes in verneed.iter_versions():
                if need.name not in system_libs:
                    continue  # versions of torch's own libraries (libcudart.so.13, ...) are torch's business
                for aux in auxes:
                    family, _, version = aux.name.partition("_")
                    versions.setdefault(family, set()).add(version)
    return libs, versions


def check(wheel: pathlib.Path, policy: str, torch_libs: list[str]) -> list[str]:
    allowed, whitelist = policy_table(policy)
    problems = []
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".so") or ".so." in n]
        if not names:
            problems.append(f"{wheel.name}: no shared library inside")
        for name in names:
            path = pathlib.Path(zf.extract(name, tmp))
            libs, versions = needs(path, whitelist)
            highest = {fam: max(vs, key=_version_key) for fam, vs in sorted(versions.items())}
            print(f"  {name}: needs {', '.join(f'{f}_{v}' for f, v in highest.items()) or 'no versioned symbols'}")
            print(f"  {' ' * len(name)}  links {', '.join(libs)}")
            for fam, vs in versions.items():
                for v in sorted(vs - allowed.get(fam, set()), key=_version_key):
                    problems.append(f"{name} needs {fam}_{v}, which {policy} does not allow")
            for lib in libs:
                if lib not in whitelist and not any(fnmatch.fnmatch(lib, p) for p in torch_libs):
                    problems.append(f"{name} links {lib}: neither on {policy}'s list nor provided by torch")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheels", nargs="+", type=pathlib.Path)
    ap.add_argument("--policy", default="manylinux_2_28")
    ap.add_argument("--torch-lib", action="append", default=None,
                    help="fnmatch pattern of a library torch provides (repeatable; default: torch's and the CUDA runtime)")
    args = ap.parse_args(argv)
    failed = False
    for wheel in args.wheels:
        print(f"{wheel.name} against {args.policy}:")
        problems = check(wheel, args.policy, args.torch_lib or TORCH_LIBS)
        for p in problems:
            print(f"  VIOLATION: {p}")
        print(f"  -> {'FAILS' if problems else 'meets'} {args.policy} (symbol versions and linked libraries)")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
