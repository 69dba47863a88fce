#!/usr/bin/env bash
# The two test runs of scripts/test.sh, after its set-up:
#   bash scripts/run_halves.sh PYTHON MARK [pytest options...]
# runs the whole suite on the native kernels (selected by MARK, an -m expression, when it is
# not empty), then the op suite ("ops and (MARK)") on the pure-torch path (PCGEOM_DISABLE_EXT=1).
set -uo pipefail
PY=$1
mark=$2
shift 2
native_sel=()
[ -z "$mark" ] || native_sel=(-m "$mark")
ops_sel=(-m "ops${mark:+ and $mark}")

# Both halves always run (a failure in the first must not hide the second); the script then
# reports each and fails if either failed.  pytest's exit 5 (nothing selected) is accepted for one
# half, since a -k/-m filter may select no op test, but not for both.
rc_native=0
rc_pure=0
printf '\n== tests: native kernels\n'
"$PY" -m pytest -q ${native_sel[@]+"${native_sel[@]}"} "$@" || rc_native=$?
printf '\n== tests: op suite on the pure-torch path (PCGEOM_DISABLE_EXT=1)\n'
PCGEOM_DISABLE_EXT=1 "$PY" -m pytest -q "${ops_sel[@]}" "$@" || rc_pure=$?

verdict() { case "$1" in 0) echo "passed" ;; 5) echo "no test selected" ;; *) echo "FAILED (pytest exit $1)" ;; esac; }
printf '\n== summary\n  native kernels:   %s\n  pure-torch path:  %s\n' "$(verdict $rc_native)" "$(verdict $rc_pure)"
if [ $rc_native -eq 5 ] && [ $rc_pure -eq 5 ]; then echo "ERROR: no test was selected in either run" >&2; exit 5; fi
for rc in $rc_native $rc_pure; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit 1; fi
done
exit 0
