"""``pcgeom doctor``: which kernels serve this process, where they came from, and how to fix a missing build."""

from __future__ import annotations

import re

HELP = "show which kernels are in use, where they came from and how to fix a missing build"

# The prebuilt CUDA wheels, one per CUDA major of torch (scripts/build_wheels.sh).
CUDA_WHEELS = {"12": "pcgeom-cu12", "13": "pcgeom-cu13"}


def provenance(build: dict) -> str:
    """Where the running pcgeom's native build came from, in words, from ``_build_info.json``.

    Example:
        >>> provenance({"origin": "wheel", "distribution": "pcgeom-cu13", "built_with_torch": "2.14.1+cu130"})
        'prebuilt wheel pcgeom-cu13 (built with torch 2.14.1+cu130)'
        >>> provenance({})
        'unknown: no build record (_build_info.json) next to the package'
    """
    if not build:
        return "unknown: no build record (_build_info.json) next to the package"
    torch_note = f" (built with torch {build['built_with_torch']})" if build.get("built_with_torch") else ""
    if build.get("origin") == "wheel":
        return f"prebuilt wheel {build.get('distribution') or 'pcgeom'}{torch_note}"
    # Records from before the origin was kept are source builds: no wheel existed then.
    return f"source build{torch_note}" if not build.get("skipped") else f"source install without native kernels ({build['skipped']})"


def _arch_number(code: str) -> tuple[int, int, str]:
    # "sm_86" -> (8, 6, ""), "compute_100a" -> (10, 0, "a")
    m = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)([af]?)", code)
    if m is None:
        raise ValueError(f"not a CUDA architecture code: {code!r}")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def arch_coverage(capability: tuple[int, int], archs: dict) -> tuple[str, str | None]:
    """How a GPU of compute ``capability`` runs the compiled CUDA kernels.

    A cubin ``sm_XY`` runs on every GPU of major X and minor >= Y (``sm_XYa`` on
    X.Y only); PTX ``compute_XY`` is JIT-compiled by the driver for any GPU >= X.Y
    (the first call on that GPU pays the compile; the driver caches it).

    Args:
        capability: ``torch.cuda.get_device_capability()``, e.g. ``(9, 0)``.
        archs: ``{"cubin": ["sm_75", ...], "ptx": ["compute_120"]}`` as setup.py recorded.

    Returns:
        ``("cubin", "sm_86")`` (the best cubin), ``("ptx", "compute_120")`` or ``("none", None)``.

    Example:
        >>> archs = {"cubin": ["sm_75", "sm_80", "sm_90"], "ptx": ["compute_90"]}
        >>> arch_coverage((8, 6), archs), arch_coverage((12, 0), archs), arch_coverage((7, 0), archs)
        (('cubin', 'sm_80'), ('ptx', 'compute_90'), ('none', None))
    """
    major, minor = capability
    best = None
    for code in archs.get("cubin") or []:
        cmaj, cmin, suffix = _arch_number(code)
        runs = (cmaj == major and cmin == minor) if suffix == "a" else (cmaj == major and cmin <= minor)
        if runs and (best is None or _arch_number(best)[:2] < (cmaj, cmin)):
            best = code
    if best is not None:
        return "cubin", best
    for code in sorted(archs.get("ptx") or [], key=_arch_number, reverse=True):
        cmaj, cmin, suffix = _arch_number(code)
        if (cmaj, cmin) == (major, minor) if suffix else (cmaj, cmin) <= (major, minor):
            return "ptx", code
    return "none", None


def cuda_wheel_fix(build: dict, torch_cuda: str | None) -> str | None:
    """The install command that gives this torch CUDA kernels, when a prebuilt wheel lacks them.

    Returns None when the running build is not a prebuilt wheel, torch has no CUDA,
    or the wheel already matches torch's CUDA major.

    Example:
        >>> cuda_wheel_fix({"origin": "wheel", "distribution": "pcgeom", "cuda_requested": False}, "12.8")
        'pip uninstall -y pcgeom && pip install pcgeom-cu12'
    """
    if build.get("origin") != "wheel" or not torch_cuda:
        return None
    major = torch_cuda.split(".")[0]
    built = (build.get("cuda_version") or "").split(".")[0] if build.get("cuda_requested") else None
    if built == major:
        return None
    want = CUDA_WHEELS.get(major)
    if want is None:
        return (f"no prebuilt pcgeom wheel is made for CUDA {torch_cuda}; build from source with nvcc "
                "(FORCE_CUDA=1 pip install --no-build-isolation --no-cache-dir pcgeom)")
    return f"pip uninstall -y {build.get('distribution') or 'pcgeom'} && pip install {want}"


def installed_distributions() -> list[str]:
    """The installed distributions that provide the ``pcgeom`` package (pcgeom, pcgeom-cu12, ...)."""
    from importlib import metadata

    return sorted(set(metadata.packages_distributions().get("pcgeom", [])))


def add_arguments(p) -> None:
    p.add_argument("--check", action="store_true", help="exit 1 when the native library is not loaded")


def run(args) -> int:
    import torch

    import pcgeom

    info = pcgeom.backend_info()
    print("pcgeom", pcgeom.__version__)
    print(f"  torch              {info['torch_version']} (CUDA available: {info['cuda_available']})")
    print(f"  native library     {'loaded' if info['extension_loaded'] else 'NOT loaded'}")
    print(f"  native devices     {', '.join(info['native_devices']) or 'none'}")
    print(f"  stable ABI         {info['stable_abi']}")
    print(f"  built with torch   {info['built_with_torch']}")
    build = info.get("build") or {}
    print(f"  installed from     {provenance(build)}")
    dists = installed_distributions()
    if len(dists) > 1:
        print(f"  distributions      {', '.join(dists)} all install the pcgeom package over one another")
    archs = build.get("cuda_archs") if build.get("cuda_requested") else None
    if archs:
        print(f"  CUDA architectures cubins {', '.join(archs['cubin']) or 'none'}; PTX {', '.join(archs['ptx']) or 'none'}"
              f" (CUDA {build.get('cuda_version')})")
    elif build.get("cuda_requested"):
        print("  CUDA architectures not recorded by this build")
    else:
        print("  CUDA architectures none: CPU kernels only")
    coverage = None
    if torch.cuda.is_available():
        cap = torch.cuda.get_device_capability()
        where = f"{torch.cuda.get_device_name()}, sm_{cap[0]}{cap[1]}"
        if archs and info["cuda_extension_loaded"]:
            coverage = arch_coverage(cap, archs)
            said = {"cubin": f"covered by the {coverage[1]} cubin",
                    "ptx": f"no cubin: the driver JIT-compiles the {coverage[1]} PTX (slow first call, then cached)",
                    "none": "NOT covered: no cubin and no PTX it can run; CUDA calls will fail"}[coverage[0]]
            print(f"  visible GPU        {where}: {said}")
        else:
            print(f"  visible GPU        {where}: no pcgeom CUDA kernels loaded")
    if info["load_error"]:
        print(f"  load error         {info['load_error']}")
    if info["cuda_load_error"] and info["cuda_load_error"] != "not built":
        print(f"  CUDA load error    {info['cuda_load_error']}")
    if build.get("skipped"):
        print(f"  native build       skipped: {build['skipped']}")
    for name, why in (build.get("failed") or {}).items():
        print(f"  build of {name} failed: {why.splitlines()[0][:200]}")
    if build.get("cuda_skipped"):
        print(f"  CUDA kernels       not built: {build['cuda_skipped']}")
    print()
    hints = []
    if info["disabled_by_env"]:
        hints.append("PCGEOM_DISABLE_EXT=1 is set: every op runs on the pure-torch path. Unset it to use the native kernels.")
    elif not info["extension_loaded"]:
        hints.append(
            "Every op runs on the pure-torch reference path: same answers, slower. To build the native kernels, "
            "install a C++ compiler and reinstall against your torch:\n"
            "    pip install --no-build-isolation --no-cache-dir --force-reinstall --no-deps pcgeom\n"
            "  (from a checkout: pip install --no-build-isolation --no-cache-dir -e .). "
            "Set PCGEOM_REQUIRE_EXT=1 to make a failed build an error instead of a fallback."
        )
    fix = cuda_wheel_fix(build, torch.version.cuda) if info["extension_loaded"] else None
    if fix:
        hints.append(
            f"torch {info['torch_version']} has CUDA {torch.version.cuda} but this prebuilt wheel has no CUDA kernels "
            f"for it, so CUDA tensors use the pure-torch path. Install the matching CUDA wheel:\n    {fix}"
        )
    elif torch.cuda.is_available() and "cuda" not in info["native_devices"] and info["extension_loaded"]:
        hints.append(
            "CUDA is available but has no native kernels: CUDA tensors use the pure-torch path. Rebuild with "
            "nvcc on PATH (CUDA_HOME set), e.g. FORCE_CUDA=1 pip install --no-build-isolation --no-cache-dir -e ."
        )
    if coverage and coverage[0] == "none":
        hints.append("This GPU's architecture is not in the CUDA build: rebuild from source for it, e.g. "
                     "TORCH_CUDA_ARCH_LIST=\"%d.%d\" FORCE_CUDA=1 pip install --no-build-isolation --no-cache-dir pcgeom"
                     % torch.cuda.get_device_capability())
    if len(dists) > 1:
        hints.append(f"Several distributions install pcgeom ({', '.join(dists)}): keep one, "
                     "e.g. pip uninstall -y " + " ".join(dists) + " && pip install " + dists[-1])
    if not hints:
        hints.append("All good: native kernels serve " + ", ".join(info["native_devices"]) + "; other devices use the pure-torch path.")
    print_shims()
    for h in hints:
        print("* " + h)
    if args.check:
        return 0 if info["extension_loaded"] else 1
    return 0


def print_shims() -> None:
    from pcgeom.compat import shims

    hook = shims.hook_status()
    state = "on for this environment" if hook["installed"] else "off (`pcgeom compat enable` turns them on)"
    if hook["installed"] and not hook["current"]:
        state += " -- stale hook, run `pcgeom compat enable` again"
    if hook["disabled_by_env"]:
        state += " -- PCGEOM_DISABLE_SHIMS is set"
    print(f"  import shims       {state}")
    for name, st in shims.shim_status().items():
        if st["real"]:
            what = f"real extension found ({st['real']}): the shim stays out of the way"
        elif st["served_by"] == "shim":
            what = f"served by {st['target']}"
        else:
            what = "not installed" + (f"; the shim would serve {st['target']}" if not hook["installed"] else "")
        print(f"    {name:<31} {what}")
    print()
