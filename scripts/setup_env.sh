#!/usr/bin/env bash
# Sets up everything pcgeom needs on a fresh machine (sourced by demo.sh and test.sh):
#   * system libraries Open3D needs for headless rendering (Debian/Ubuntu, when run as root);
#   * a virtual environment (.venv, or $PCGEOM_VENV) with torch and pcgeom's dependencies;
#   * pcgeom itself, its native kernels compiled against that torch (never at import).
# Environment: PYTHON (default python3), PCGEOM_VENV (default .venv),
# PCGEOM_TORCH (torch requirement, default torch==2.13.0), PCGEOM_EXTRAS (default vis),
# PCGEOM_REQUIRE_EXT=1 (a failed native build is an error), CI=true (every step must succeed).
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

say "building and installing pcgeom[$EXTRAS] (native kernels compile now, once)"
# --no-build-isolation: compile against the torch installed above, not a fresh download.
# --no-cache-dir: never reuse a cached wheel built without the kernels.
"$PY" -m pip install -q --no-build-isolation --no-cache-dir -e ".[$EXTRAS]"
"$PY" -m pcgeom doctor
