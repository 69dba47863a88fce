#!/usr/bin/env bash
# README command 2: set everything up on a fresh machine, then run the tests:
# the whole suite on the native kernels, then the op suite again on the
# pure-torch path (PCGEOM_DISABLE_EXT=1), which must give the same answers.
#   bash scripts/test.sh [extra pytest options]
#   bash scripts/test.sh -m "not slow"     # the fast lane: no subprocess, build, multi-process,
#                                          # upstream end-to-end, inductor or fuzz tests
# A marker expression (-m EXPR, several are and-ed) applies to both runs: the second
# run selects "ops and (EXPR)", since pytest keeps only the last -m it is given.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

args=()
mark=""
while [ $# -gt 0 ]; do
  case "$1" in
    -m) [ $# -ge 2 ] || { echo "ERROR: -m needs a marker expression" >&2; exit 2; }
        mark="${mark:+$mark and }($2)"; shift 2 ;;
    -m?*) mark="${mark:+$mark and }(${1#-m})"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

PCGEOM_EXTRAS=${PCGEOM_EXTRAS:-test,vis} source scripts/setup_env.sh
PY="${PCGEOM_VENV:-.venv}/bin/python"
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$(mktemp -d -t pcgeom-inductor.XXXXXX)}
export MESA_SHADER_CACHE_DIR=${MESA_SHADER_CACHE_DIR:-$TORCHINDUCTOR_CACHE_DIR/mesa}

# Both halves, each reported; fails if either failed (scripts/run_halves.sh).
bash scripts/run_halves.sh "$PY" "$mark" ${args[@]+"${args[@]}"}
