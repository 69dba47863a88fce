"""Loads pcgeom's native kernels and says which path serves each device.

Import never compiles anything.  The native library ``pcgeom._C`` (schemas + CPU
kernels) and ``pcgeom._C_cuda`` (CUDA kernels) were built at install time; this
module only loads them (and reports on them: :func:`backend_info`).  Whatever they
do not provide -- everything when the build was skipped or ``PCGEOM_DISABLE_EXT=1``
is set, CUDA on a CPU-only build, any other device -- :mod:`pcgeom.ops` serves with
the pure-torch references, registered under the same schemas from the op registry
(:mod:`pcgeom.ops.registry`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import warnings

import torch

NAMESPACE = "pcgeom"

_state = {
    "extension_loaded": False,
    "cuda_extension_loaded": False,
    "disabled_by_env": False,
    "load_error": None,
    "cuda_load_error": None,
}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _load_native(module: str) -> str | None:
    """Loads ``pcgeom.<module>`` if it was built; returns an error string or None.

    ``find_spec`` keeps an absent module quiet (a pure-Python install is normal),
    while a module that is present but fails to load is reported.
    ``PCGEOM_NATIVE_LIB=/path/lib.so`` loads that build of ``_C`` instead (and
    no CUDA library): scripts/ci_asan_job.sh runs the tests on an
    AddressSanitizer build of the CPU kernels this way.
    """
    override = os.environ.get("PCGEOM_NATIVE_LIB", "").strip()
    if override:
        if module != "_C":
            return f"not loaded: PCGEOM_NATIVE_LIB={override} replaces the native build"
        origin = override
    else:
        spec = importlib.util.find_spec(f"pcgeom.{module}")
        if spec is None or spec.origin is None:
            return "not built"
        origin = spec.origin
    try:
        torch.ops.load_library(origin)
    except Exception as exc:  # wrong torch / CUDA runtime, missing libs
        return f"{type(exc).__name__}: {exc}"
    return None


def has_kernel(name: str, key: str) -> bool:
    """True when ``pcgeom::<name>`` has a kernel registered for dispatch key ``key`` (e.g. "CPU")."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"{NAMESPACE}::{name}", key)


def _initialise() -> None:
    if _env_flag("PCGEOM_DISABLE_EXT"):
        _state["disabled_by_env"] = True
        _state["load_error"] = "disabled by PCGEOM_DISABLE_EXT=1"
    else:
        err = _load_native("_C")
        if err is None:
            _state["extension_loaded"] = True
        else:
            _state["load_error"] = err
            if err == "not built":
                _warn_unbuilt()
            else:
                warnings.warn(
                    f"pcgeom: the native library is present but failed to load ({err}); "
                    "using the pure-torch path. Run `pcgeom doctor` for details.",
                    RuntimeWarning,
                    stacklevel=3,
                )
        if _state["extension_loaded"]:
            cuda_err = cuda_library_mismatch(build_info(), torch.version.cuda)
            if cuda_err is None:
                cuda_err = _load_native("_C_cuda")
            if cuda_err is None:
                _state["cuda_extension_loaded"] = True
            else:
                _state["cuda_load_error"] = cuda_err


def _warn_unbuilt() -> None:
    """Says once, at import, why an install has no native kernels, when it was not asked for.

    pip shows a successful build's output only with -v, so a build that fell back to the
    pure-torch path (no compiler, a failed compile) would otherwise be silent.  A build
    skipped on purpose (PCGEOM_NO_EXT=1) and a source tree never built stay quiet.
    """
    build = build_info()
    reason = build.get("skipped") or "; ".join(
        f"{name}: {why.splitlines()[0][:200]}" for name, why in sorted((build.get("failed") or {}).items()))
    if not reason or reason.startswith("PCGEOM_NO_EXT"):
        return
    warnings.warn(
        f"pcgeom: native kernels were not built at install ({reason}); every op runs on the pure-torch "
        "path (same answers, slower). Run `pcgeom doctor` for the fix.",
        RuntimeWarning,
        stacklevel=4,
    )


def cuda_library_mismatch(build: dict, torch_cuda: str | None) -> str | None:
    """Why ``pcgeom._C_cuda`` must not be loaded into this torch, or None when it may be tried.

    The CUDA library links the CUDA runtime of its build (``libcudart.so.<major>``),
    which only a torch built for that CUDA major provides.  A CPU-only torch (or a
    CUDA wheel of the other major) therefore keeps the CPU kernels and reports why
    the CUDA ones are absent, instead of failing in the loader.

    Args:
        build: what setup.py recorded (:func:`build_info`); ``cuda_requested`` and
            ``cuda_version`` (e.g. ``"13.0"``) are read.
        torch_cuda: ``torch.version.cuda`` (None for a CPU-only or ROCm torch).

    Example:
        >>> cuda_library_mismatch({"cuda_requested": True, "cuda_version": "12.8"}, "13.0")
        'not loaded: built for CUDA 12.8, this torch has CUDA 13.0'
        >>> cuda_library_mismatch({"cuda_requested": True, "cuda_version": "13.0"}, "13.2") is None
        True
    """
    if not build.get("cuda_requested") or "pcgeom._C_cuda" in (build.get("failed") or {}):
        return None  # nothing built (the loader then says "not built") or an old build info: just try
    built = build.get("cuda_version")
    if torch_cuda is None:
        return "not loaded: this torch has no CUDA (the CPU kernels serve)"
    if built and built.split(".")[0] != torch_cuda.split(".")[0]:
        return f"not loaded: built for CUDA {built}, this torch has CUDA {torch_cuda}"
    return None


def build_info() -> dict:
    """What setup.py recorded about the native build (empty if unknown)."""
    path = os.path.join(os.path.dirname(__file__), "_build_info.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def backend_info() -> dict:
    """Describes which implementation serves pcgeom's ops in this process.

    Returns:
        dict with at least

        * ``extension_loaded`` (bool): the native library ``pcgeom._C`` is in use;
        * ``native_devices`` (list[str]): devices with native kernels, e.g. ``["cpu"]``
            or ``["cpu", "cuda"]``; every other device uses the pure-torch path;
        * ``stable_abi`` (bool): the native library was built on the LibTorch stable
            ABI, so it keeps working across torch upgrades without a rebuild;
        * ``torch_version`` (str), ``cuda_available`` (bool);
        * ``load_error`` (str or None): why the native library is not in use;
        * ``cuda_load_error`` (str or None), ``built_with_torch`` (str or None),
            ``disabled_by_env`` (bool), ``build`` (dict recorded by setup.py).

    Example:
        >>> import pcgeom
        >>> info = pcgeom.backend_info()
        >>> sorted(k for k in ("extension_loaded", "native_devices") if k in info)
        ['extension_loaded', 'native_devices']
    """
    devices = []
    if _state["extension_loaded"]:
        if has_kernel("knn", "CPU"):
            devices.append("cpu")
        if has_kernel("knn", "CUDA"):
            devices.append("cuda")
    build = build_info()
    return {
        "extension_loaded": _state["extension_loaded"],
        "native_devices": devices,
        "stable_abi": bool(_state["extension_loaded"] and build.get("stable_abi", True)),
        "torch_version": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "load_error": _state["load_error"],
        "cuda_extension_loaded": _state["cuda_extension_loaded"],
        "cuda_load_error": _state["cuda_load_error"],
        "disabled_by_env": _state["disabled_by_env"],
        "built_with_torch": build.get("built_with_torch"),
        "build": build,
    }


_initialise()
