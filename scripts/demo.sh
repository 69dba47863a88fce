#!/usr/bin/env bash
# README command 1: set everything up on a fresh machine, then run the demo on bundled data.
#   bash scripts/demo.sh [demo options, e.g. --out DIR --overwrite]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
# With no options the README command may be run again and again: it then
# refreshes its own outputs in pcgeom-demo/ (pcgeom demo alone never overwrites).
if [ "$#" -eq 0 ]; then set -- --out pcgeom-demo --overwrite; fi
printf '\n== pcgeom demo %s\n' "$*"
"${PCGEOM_VENV:-.venv}/bin/pcgeom" demo "$@"
