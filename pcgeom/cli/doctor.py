"""``pcgeom doctor``: which kernels serve this process, and how to fix a missing build."""

from __future__ import annotations

HELP = "show which kernels are in use and how to fix a missing build"


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
    if info["load_error"]:
        print(f"  load error         {info['load_error']}")
    if info["cuda_load_error"] and info["cuda_load_error"] != "not built":
        print(f"  CUDA load error    {info['cuda_load_error']}")
    build = info.get("build") or {}
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
    if torch.cuda.is_available() and "cuda" not in info["native_devices"] and info["extension_loaded"]:
        hints.append(
            "CUDA is available but has no native kernels: CUDA tensors use the pure-torch path. Rebuild with "
            "nvcc on PATH (CUDA_HOME set), e.g. FORCE_CUDA=1 pip install --no-build-isolation --no-cache-dir -e ."
        )
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
