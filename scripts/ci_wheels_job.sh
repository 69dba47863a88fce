#!/usr/bin/env bash
# CI job 5: the prebuilt wheels install and serve native kernels with NO compiler on PATH.
#
#   bash scripts/ci_wheels_job.sh                   # CI: build the CPU wheel and the CUDA 13 wheel
#                                                   # (fewer architectures), then the CI matrix
#   bash scripts/ci_wheels_job.sh --full --no-build # the whole matrix on the wheels in dist/
#                                                   # (what `scripts/build_wheels.sh --check` runs)
#
# Matrix (venv: torch; wheel):
#   CI and full   torch 2.10.0 (the oldest the README claims; the registry's build is CUDA 12.8)  <- CPU wheel
#                 torch 2.14.1 (the newest that installs; CUDA 13.0, the venv of ci_cuda_job.sh) <- CPU wheel
#                              (CI: the op suite of the fast lane only, -m "ops and not slow")
#                 torch 2.14.1                                                                   <- pcgeom-cu13
#   full only     torch 2.10.0 (CUDA 12.8)                                                       <- pcgeom-cu12
#                 torch 2.13.0 (CPU-only build)                                                  <- pcgeom-cu13
# In each: the wheel is installed (never the source tree) into the venv; PATH is cut to
# a farm of plain tools (no gcc, g++, cc, c++, clang or nvcc, asserted); `pcgeom doctor`
# must say the native kernels serve and that they came from that prebuilt wheel;
# `pcgeom` must import from site-packages; a CUDA wheel in a CUDA torch must register a
# CUDA kernel for every op of the registry (the dispatcher is asked); a CUDA wheel in a
# CPU-only torch must still serve the CPU kernels; and the fast test lane
# (-m "not slow") runs from a copy of the tracked tree WITHOUT its pcgeom/ folder, so
# every test imports the installed package.
#
# Environment: as scripts/build_wheels.sh (PCGEOM_WHEELS_WORK, PCGEOM_CI_CUDA_WORK, PYTHON);
# PCGEOM_WHEEL_CU13_ARCHS (CI default "7.5;12.0+PTX": the oldest cubin and the newest with PTX).
set -euo pipefail

FULL=0
BUILD=1
for arg in "$@"; do
  case "$arg" in
    --full) FULL=1 ;;
    --no-build) BUILD=0 ;;
    *) echo "ci_wheels_job.sh: unknown option $arg (use --full, --no-build)" >&2; exit 2 ;;
  esac
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIST=$REPO/dist
WORK=${PCGEOM_WHEELS_WORK:-${TMPDIR:-/tmp}/pcgeom-wheels}
CUDA_WORK=${PCGEOM_CI_CUDA_WORK:-${TMPDIR:-/tmp}/pcgeom-ci-cuda}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor-cache
unset PYTHONPATH CUDA_HOME CUDA_PATH CC CXX || true
case "$WORK" in "$REPO"|"$REPO"/*) echo "ERROR: PCGEOM_WHEELS_WORK must be outside the repo" >&2; exit 1;; esac
mkdir -p "$WORK"
T0=$(date +%s)
say() { echo "[ci-wheels +$(( $(date +%s) - T0 ))s] $*"; }
die() { echo "ERROR: $*" >&2; exit 1; }

if (( BUILD )); then
  say "building the wheels (scripts/build_wheels.sh; CUDA 13 for TORCH_CUDA_ARCH_LIST=${PCGEOM_WHEEL_CU13_ARCHS:-7.5;12.0+PTX})"
  PCGEOM_WHEEL_CU13_ARCHS=${PCGEOM_WHEEL_CU13_ARCHS:-7.5;12.0+PTX} PCGEOM_WHEELS_NO_CU12=1 bash "$REPO/scripts/build_wheels.sh"
fi

wheel() {  # wheel DIST_NAME -> the one file in dist/
  local f
  f=$(ls "$DIST/${1//-/_}"-*-cp310-abi3-manylinux_2_28_x86_64.whl 2>/dev/null | head -1)
  [[ -n $f ]] || return 1
  echo "$f"
}
CPU_WHEEL=$(wheel pcgeom) || die "no CPU wheel in $DIST (run scripts/build_wheels.sh)"
CU13_WHEEL=$(wheel pcgeom-cu13) || die "no pcgeom-cu13 wheel in $DIST (run scripts/build_wheels.sh)"
CU12_WHEEL=""
if (( FULL )); then
  CU12_WHEEL=$(wheel pcgeom-cu12) || {
    [[ ${PCGEOM_WHEELS_SKIP_CU12:-0} == 1 ]] || die "no pcgeom-cu12 wheel in $DIST: the full matrix needs it (PCGEOM_WHEELS_SKIP_CU12=1 to run the rest)"
    echo "WARNING: no pcgeom-cu12 wheel; PCGEOM_WHEELS_SKIP_CU12=1, so its rows are left out" >&2
    CU12_WHEEL=""
  }
fi

# venv PATH TORCH_REQUIREMENT (as build_wheels.sh: reused once complete), plus what the fast lane imports.
venv() {
  local dir=$1 req=$2 marker=$1/.pcgeom-ci-complete
  if ! [[ -f $marker ]] || ! "$dir/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '${req#torch==}')" 2>/dev/null; then
    say "creating $dir ($req)"
    rm -rf "$dir"
    "${PYTHON:-python3}" -m venv "$dir"
    "$dir/bin/pip" install -q "$req" numpy einops plyfile pytest scipy ninja setuptools wheel 2>&1 | grep -v "is ignored: it is neither" || true
    "$dir/bin/python" -c "import torch" || die "installing $req into $dir failed"
    echo "$req installed $(date -u +%FT%TZ)" >"$marker"
  fi
  "$dir/bin/pip" install -q pytest hypothesis tqdm 2>&1 | grep -v "is ignored: it is neither" || true
}

# A PATH with the plain tools the tests and pip use, and no compiler of any kind.
FARM=$WORK/no-compiler-bin
rm -rf "$FARM"
mkdir -p "$FARM"
for tool in bash sh env cat ls cp mv rm mkdir rmdir ln chmod touch find grep sed awk tr head tail wc sort uniq \
            cut date dirname basename readlink realpath mktemp uname id true false test sleep timeout tee xargs \
            diff cmp tar gzip unzip git nproc which; do
  p=$(command -v "$tool" 2>/dev/null) && ln -s "$p" "$FARM/$tool"
done

# A copy of the tracked tree without pcgeom/: the tests and the docs they read, not the package.
CHECK=$WORK/check-tree
rm -rf "$CHECK"
mkdir -p "$CHECK"
git -C "$REPO" ls-files -z --cached --others --exclude-standard \
  | (cd "$REPO" && xargs -0 -r sh -c 'for f; do case "$f" in pcgeom/*) ;; *) [ -e "$f" ] && printf "%s\0" "$f";; esac; done' sh) \
  | tar -C "$REPO" --null -T - -cf - | tar -C "$CHECK" -xf -
[[ ! -e $CHECK/pcgeom ]] || die "the check tree has a pcgeom/ folder"

SUMMARY=$WORK/matrix-summary.txt
: >"$SUMMARY"
MATRIX_FAILED=0  # every row runs; the job fails at the end if any did

# check LABEL VENV WHEEL DIST_NAME EXPECT(cpu|cuda|cuda-on-cpu-torch) [LANE]
# LANE: the marker expression of the test run, default the fast lane "not slow".
check() {
  local label=$1 venv=$2 whl=$3 dist=$4 expect=$5 lane=${6:-not slow} t
  t=$(date +%s)
  say "[$label] installing $(basename "$whl") into $venv"
  local before
  before=$("$venv/bin/python" -c "import torch; print(torch.__version__)")
  "$venv/bin/pip" uninstall -q -y pcgeom pcgeom-cu12 pcgeom-cu13 >/dev/null 2>&1 || true
  # [test]: what the fast lane imports (matplotlib, onnx, scipy, ...); torch itself must stay as it is.
  "$venv/bin/pip" install -q "$whl[test]" 2>&1 | grep -v "is ignored: it is neither" || true
  "$venv/bin/python" -c "import pcgeom" 2>/dev/null || die "[$label] installing $(basename "$whl") failed"
  [[ $("$venv/bin/python" -c "import torch; print(torch.__version__)") == "$before" ]] \
    || die "[$label] installing the wheel changed torch ($before)"
  (
    export PATH=$venv/bin:$FARM
    for cc in gcc g++ cc c++ clang clang++ nvcc x86_64-linux-gnu-gcc; do
      if command -v "$cc" >/dev/null 2>&1; then die "[$label] a compiler is on PATH: $(command -v "$cc")"; fi
    done
    cd "$CHECK"
    doctor=$("$venv/bin/pcgeom" doctor --check) || { echo "$doctor"; die "[$label] pcgeom doctor --check failed"; }
    echo "$doctor" | sed -n '1,/^$/p'
    echo "$doctor" | grep -q "native library     loaded" || die "[$label] doctor: native library not loaded"
    echo "$doctor" | grep -q "installed from     prebuilt wheel $dist " || die "[$label] doctor does not say the prebuilt wheel $dist serves"
    "$venv/bin/python" - "$expect" <<'EOF' || die "[$label] the installed wheel does not serve what it should"
import pathlib, sys
import torch
import pcgeom
from pcgeom.ops.registry import SCHEMAS

expect = sys.argv[1]
where = pathlib.Path(pcgeom.__file__).resolve()
assert "site-packages" in where.parts, f"pcgeom imported from {where}, not from site-packages"
info = pcgeom.backend_info()
assert info["extension_loaded"], info["load_error"]
cpu_missing = [op for op in SCHEMAS if not torch._C._dispatch_has_kernel_for_dispatch_key(f"pcgeom::{op}", "CPU")]
assert not cpu_missing, f"ops without a CPU kernel: {cpu_missing}"
if expect == "cuda":
    assert info["cuda_extension_loaded"], info["cuda_load_error"]
    missing = [op for op in SCHEMAS if not torch._C._dispatch_has_kernel_for_dispatch_key(f"pcgeom::{op}", "CUDA")]
    assert not missing, f"ops without a CUDA kernel: {missing}"
    assert info["native_devices"] == ["cpu", "cuda"], info["native_devices"]
    print(f"  CUDA kernels registered for all {len(SCHEMAS)} ops: {', '.join(SCHEMAS)}")
elif expect == "cuda-on-cpu-torch":
    assert torch.version.cuda is None, torch.version.cuda
    assert not info["cuda_extension_loaded"] and "this torch has no CUDA" in info["cuda_load_error"], info
    assert info["native_devices"] == ["cpu"], info["native_devices"]
    print(f"  CPU-only torch: CPU kernels serve; CUDA library {info['cuda_load_error']}")
else:
    assert info["native_devices"] == ["cpu"] and info["cuda_load_error"] == "not built", info
print(f"  pcgeom {pcgeom.__version__} from {where.parent}; torch {torch.__version__}; native {info['native_devices']}")
EOF
    say "[$label] tests (-m '$lane') against the installed wheel"
    PCGEOM_EXPECT_BUILD_ORIGIN=wheel PCGEOM_EXPECT_DISTRIBUTION=$dist \
      "$venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir "$CHECK" -m "$lane" tests \
      >"$WORK/fast-lane-$label.log" 2>&1 || { tail -60 "$WORK/fast-lane-$label.log"; die "[$label] the fast lane failed (log: $WORK/fast-lane-$label.log)"; }
    tail -1 "$WORK/fast-lane-$label.log"
  ) || { echo "$label: $(basename "$whl") on torch $before: FAILED after $(( $(date +%s) - t )) s (see above)" | tee -a "$SUMMARY"
         MATRIX_FAILED=$((MATRIX_FAILED + 1)); return 0; }
  echo "$label: $(basename "$whl") on torch $before: ok in $(( $(date +%s) - t )) s (-m '$lane': $(tail -1 "$WORK/fast-lane-$label.log"))" | tee -a "$SUMMARY"
}

V210=$WORK/venv-torch2.10.0
V2141=$CUDA_WORK/venv-torch2.14.1
mkdir -p "$CUDA_WORK"
venv "$V210" torch==2.10.0
venv "$V2141" torch==2.14.1
check cpu-on-torch2.10.0 "$V210" "$CPU_WHEEL" pcgeom cpu
# CI keeps its time: the CPU wheel on 2.14.1 runs the op suite of the fast lane; the
# whole fast lane runs there with the CUDA 13 wheel, whose CPU kernels are the same code.
check cpu-on-torch2.14.1 "$V2141" "$CPU_WHEEL" pcgeom cpu "$( (( FULL )) && echo "not slow" || echo "ops and not slow")"
check cu13-on-torch2.14.1 "$V2141" "$CU13_WHEEL" pcgeom-cu13 cuda
if (( FULL )); then
  if [[ -n $CU12_WHEEL ]]; then
    check cu12-on-torch2.10.0 "$V210" "$CU12_WHEEL" pcgeom-cu12 cuda
  fi
  V2130=$WORK/venv-torch2.13.0
  venv "$V2130" torch==2.13.0
  check cu13-on-torch2.13.0-cpu "$V2130" "$CU13_WHEEL" pcgeom-cu13 cuda-on-cpu-torch
fi
cat "$SUMMARY"
(( MATRIX_FAILED == 0 )) || die "$MATRIX_FAILED row(s) of the wheel matrix failed"
say "matrix passed in $(( $(date +%s) - T0 )) s"
