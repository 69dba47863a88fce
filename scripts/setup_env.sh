#!/usr/bin/env bash
# Sets up everything pcgeom needs on a fresh machine (sourced by demo.sh and test.sh):
#   * system libraries Open3D needs for headless rendering (Debian/Ubuntu, when run as root);
#   * a virtual environment (.venv, or $PCGEOM_VENV) with torch and pcgeom's dependencies;
#   * pcgeom itself, its native kernels compiled against that torch (never at import).
# Environment: PYTHON (default python3), PCGEOM_VENV (default .venv),
# PCGEOM_TORCH (torch requirement, default torch==2.13.0), PCGEOM_EXTRAS (default vis),
# PCGEOM_REQUIRE_EXT=1 (a failed native build is an error), CI=true (every step must succeed),
# PCGEOM_REBUILD=1 (rebuild the kernels even though nothing they are built from changed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=${PCGEOM_VENV:-.venv}
TORCH_REQ=${PCGEOM_TORCH:-torch==2.13.0}
EXTRAS=${PCGEOM_EXTRAS:-vis}
STRICT=${CI:-false}

say() { printf '\n== %s\n' "$*"; }
fail_or_warn() {
  if [ "$STRICT" = "true" ]; then echo "ERROR: $*" >&2; exit 1; fi
  echo "WARNING: $*" >&2
}

# Open3D (the optional picture renderer) needs libusb and EGL/Mesa; without them
# pcgeom still works and draws its pictures with matplotlib instead.
SYS_PKGS="libusb-1.0-0 libegl1 libegl-mesa0 libgl1-mesa-dri"
if command -v dpkg >/dev/null 2>&1; then
  missing=""
  for p in $SYS_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    say "installing system packages:$missing"
    if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else SUDO="none"; fi
    if [ "$SUDO" = none ]; then
      fail_or_warn "cannot install$missing (not root, no sudo); Open3D pictures will fall back to matplotlib"
    else
      { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null; } \
        || fail_or_warn "apt-get install$missing failed; Open3D pictures will fall back to matplotlib"
    fi
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  say "creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip setuptools wheel ninja

say "installing $TORCH_REQ"
"$PY" -m pip install -q "$TORCH_REQ"

# The install is editable, so Python edits need no reinstall; the kernels are rebuilt only when
# what they are built from changed: the C++ sources, the build scripts, the op registry (it
# generates the schema header), the dependencies and extras, the torch, the compiler and the
# build switches.  PCGEOM_REBUILD=1 forces a rebuild.
stamp_file="$VENV/.pcgeom-build-stamp"
stamp=$("$PY" - "$EXTRAS" <<'PYEOF'
import glob, hashlib, os, shutil, sys
import torch
h = hashlib.sha256()
files = sorted(glob.glob("csrc/**/*", recursive=True)) + ["setup.py", "pyproject.toml", "pcgeom/ops/registry.py"]
for f in files:
    if os.path.isfile(f) and not f.endswith("generated_schemas.h"):
        h.update(f.encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(fh.read())
env = [os.environ.get(k, "") for k in ("CXX", "CC", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "PCGEOM_REQUIRE_EXT",
                                       "PCGEOM_NO_EXT", "FORCE_CUDA", "PCGEOM_NO_CUDA")]
cxx = os.environ.get("CXX", "").strip() or "c++"
meta = [os.getcwd(), sys.argv[1], torch.__version__, str(shutil.which(cxx.split()[0])), str(shutil.which("nvcc"))] + env
h.update("\0".join(meta).encode())
print(h.hexdigest())
PYEOF
)
built_ok=false
if [ -f pcgeom/_build_info.json ] && [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ] \
   && [ "${PCGEOM_REBUILD:-0}" != 1 ] \
   && "$PY" -c "import pcgeom, sys; sys.exit(not pcgeom.__file__.startswith('$PWD/'))" >/dev/null 2>&1; then
  built_ok=true
fi
if $built_ok; then
  say "pcgeom[$EXTRAS] is installed and its kernels are current (C++ sources, registry, torch and switches unchanged): no rebuild (PCGEOM_REBUILD=1 forces one)"
else
  say "building and installing pcgeom[$EXTRAS] (native kernels compile now, once)"
  rm -f "$stamp_file"
  # --no-build-isolation: compile against the torch installed above, not a fresh download.
  # --no-cache-dir: never reuse a cached wheel built without the kernels.
  build_start=$(date +%s)
  "$PY" -m pip install -q --no-build-isolation --no-cache-dir -e ".[$EXTRAS]"
  echo "   (built and installed in $(( $(date +%s) - build_start )) s)"
  echo "$stamp" > "$stamp_file"
fi
"$PY" -m pcgeom doctor
