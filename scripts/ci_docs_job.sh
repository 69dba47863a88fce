#!/usr/bin/env bash
# CI job 3: the documentation site, from a fresh clone, exactly as the README says to build it.
#
#   bash scripts/ci_docs_job.sh
#
#   1. a fresh clone of this repository's HEAD, and a venv outside the repo with torch (installed first, as the
#      README says) and then `pip install ".[docs]"` (the package itself builds without kernels here: the
#      docs need none, and job 1 tests the native build);
#   2. `mkdocs build --strict` (every warning is an error: broken links and anchors, missing references,
#      docstring problems mkdocstrings reports);
#   3. tests/test_docs.py against that site: every public name has an API entry, the CLI reference is `--help`,
#      the benchmark page has its tables and plots (the Python blocks of the docs and the docstring examples run
#      in job 1, on the native kernels: this venv has the pure-torch path only, where the larger examples take
#      minutes);
#   4. the site in real headless chromium (Debian's package, installed here if missing): the home page and the
#      API page render their content without console errors; the screenshots are kept and their folder printed.
#
# Environment: PCGEOM_CI_DOCS_WORK (default ${TMPDIR:-/tmp}/pcgeom-ci-docs), PYTHON (default python3),
# PCGEOM_TORCH (default torch==2.13.0).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${PCGEOM_CI_DOCS_WORK:-${TMPDIR:-/tmp}/pcgeom-ci-docs}
PYTHON=${PYTHON:-python3}
TORCH_REQ=${PCGEOM_TORCH:-torch==2.13.0}
VENV=$WORK/venv
CLONE=$WORK/clone
SITE=$WORK/site
SHOTS=$WORK/screenshots
mkdir -p "$WORK"

echo "-- docs 1/4: fresh clone + venv + pip install \".[docs]\""
rm -rf "$CLONE" "$SITE" "$SHOTS"
git clone -q "$REPO" "$CLONE"
if [ ! -x "$VENV/bin/python" ]; then "$PYTHON" -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "$TORCH_REQ"
# The docs need no native kernels; CI's PCGEOM_REQUIRE_EXT is for job 1's build.
(cd "$CLONE" && env -u PCGEOM_REQUIRE_EXT "$VENV/bin/python" -m pip install -q --no-cache-dir ".[docs]" pytest)

echo "-- docs 2/4: mkdocs build --strict"
(cd "$CLONE" && "$VENV/bin/python" -m mkdocs build --strict -d "$SITE")

echo "-- docs 3/4: tests/test_docs.py"
(cd "$CLONE" && PCGEOM_DOCS_SITE="$SITE" "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_docs.py \
  -k "not test_every_python_block_runs and not test_docstring_examples_run")

echo "-- docs 4/4: headless chromium"
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
"$VENV/bin/python" "$CLONE/scripts/docs_browser_check.py" --site "$SITE" --out "$SHOTS" --chromium "$(command -v chromium)"
echo "docs screenshots (test artefacts): $SHOTS"
ls -l "$SHOTS"
