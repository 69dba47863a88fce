#!/usr/bin/env bash
# README command 1: set everything up on a fresh machine, then run the demo on bundled data.
#   bash scripts/demo.sh [demo options, e.g. --out DIR --overwrite]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
printf '\n== pcgeom demo %s\n' "$*"
"${PCGEOM_VENV:-.venv}/bin/pcgeom" demo "$@"
