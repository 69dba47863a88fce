#!/usr/bin/env bash
# README command 2: set everything up on a fresh machine, then run the tests:
# the whole suite on the native kernels, then the op suite again on the
# pure-torch path (PCGEOM_DISABLE_EXT=1), which must give the same answers.
#   bash scripts/test.sh [extra pytest options]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PCGEOM_EXTRAS=${PCGEOM_EXTRAS:-test,vis} source scripts/setup_env.sh
PY="${PCGEOM_VENV:-.venv}/bin/python"
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$(mktemp -d -t pcgeom-inductor.XXXXXX)}
export MESA_SHADER_CACHE_DIR=${MESA_SHADER_CACHE_DIR:-$TORCHINDUCTOR_CACHE_DIR/mesa}

printf '\n== tests: native kernels\n'
"$PY" -m pytest -q "$@"
printf '\n== tests: op suite on the pure-torch path (PCGEOM_DISABLE_EXT=1)\n'
PCGEOM_DISABLE_EXT=1 "$PY" -m pytest -q -m ops "$@"
