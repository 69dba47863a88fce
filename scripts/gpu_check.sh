#!/usr/bin/env bash
# The GPU check of pcgeom's CUDA kernels, for a machine with an NVIDIA GPU.
# Unattended, under 8 minutes, in this order (most important first):
#
#   0. when dist/ holds the prebuilt CUDA wheel for this torch's CUDA major
#      (scripts/build_wheels.sh; the device runner carries dist/, an ignored folder:
#      run(carry=["dist"])), install THAT wheel, with no build, and check what users
#      get: `pcgeom doctor` (its cubin covers this GPU, no PTX JIT) and tests/test_cuda.py
#      run against the installed package from a copy of the tree without pcgeom/;
#   1. build the package in place against the installed torch, for this GPU's
#      architecture only (FORCE_CUDA=1, PCGEOM_REQUIRE_EXT=1);
#   2. tests/test_cuda.py: every kernel path vs the CPU kernels, bit for bit;
#   3. the GPU benchmark (benchmarks/gpu_bench.py) -> benchmarks/RESULTS-gpu.md;
#   4. compute-sanitizer memcheck on a small run of every kernel and path
#      (skipped, and said so, without the tool);
#   5. the whole test suite (tests are parametrised over devices, so every op
#      test also runs on cuda);
#   6. the Pointcept rows (benchmarks/bm_pointcept.py on cuda -> RESULTS-gpu.md), if time is left;
#   7. compute-sanitizer racecheck and synccheck (shared memory), if time is left.
#
#   bash scripts/gpu_check.sh            # PYTHON=... to choose the interpreter
#
# Every step's log and a summary go to benchmarks/RESULTS-gpu.md and, when $OUT
# is set (the device runner), to $OUT as well.  Exits non-zero if any step fails,
# after running the others.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 2
T0=$(date +%s)
LOGS=${OUT:-$REPO/build/gpu-check}
mkdir -p "$LOGS"
RESULTS=$REPO/benchmarks/RESULTS-gpu.md
SUMMARY=$LOGS/summary.md
: >"$SUMMARY"
FAILED=0
say() { echo "[gpu-check +$(( $(date +%s) - T0 ))s] $*"; }
record() { echo "- $*" | tee -a "$SUMMARY"; }

# A Python that has torch with CUDA.
PY=${PYTHON:-}
if [[ -z $PY ]]; then
  for cand in "$REPO/.venv/bin/python" python3 python; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
      PY=$cand
      break
    fi
  done
fi
if [[ -z $PY ]]; then
  echo "gpu_check: no Python with a CUDA-enabled torch and a visible GPU found (set PYTHON=...)" >&2
  exit 2
fi
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")}
export TORCHINDUCTOR_CACHE_DIR=$REPO/build/inductor-cache
ARCH=$("$PY" -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())")
say "python $PY; $("$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"); arch $ARCH; CUDA_HOME=$CUDA_HOME"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null | tee "$LOGS/nvidia-smi.txt" || true

finish() {
  {
    echo
    echo "## GPU check ($(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - T0 )) s)"
    echo
    cat "$SUMMARY"
  } >>"$RESULTS"
  if [[ -n ${OUT:-} ]]; then
    cp "$RESULTS" "$OUT/RESULTS-gpu.md" 2>/dev/null || true
  fi
  say "done; $( [[ $FAILED == 0 ]] && echo 'all steps passed' || echo "$FAILED step(s) FAILED" )"
}
trap finish EXIT

# ------------------------------------------------- 0. the prebuilt CUDA wheel
CUDA_MAJOR=$("$PY" -c "import torch; print(torch.version.cuda.split('.')[0])")
WHEEL=$(ls "$REPO"/dist/pcgeom_cu"$CUDA_MAJOR"-*-cp310-abi3-manylinux_*_x86_64.whl 2>/dev/null | head -1)
if [[ -n $WHEEL ]]; then
  say "installing the prebuilt wheel $(basename "$WHEEL")"
  CHECK=$(mktemp -d -t pcgeom-gpu-wheel.XXXXXX)
  # The tree without pcgeom/, so that every import resolves the installed wheel.
  tar -C "$REPO" --exclude=./pcgeom --exclude=./.venv --exclude=./build --exclude=./dist -cf - . | tar -C "$CHECK" -xf -
  # An editable install of the checkout would shadow the wheel: step 1 makes it again.
  "$PY" -m pip uninstall -q -y pcgeom pcgeom-cu12 pcgeom-cu13 >/dev/null 2>&1 || true
  if timeout 240 "$PY" -m pip install -q --no-deps --force-reinstall --no-cache-dir "$WHEEL" >"$LOGS/wheel.log" 2>&1 \
     && (cd "$CHECK" && "$PY" -m pcgeom doctor --check) >>"$LOGS/wheel.log" 2>&1 \
     && grep -q "installed from     prebuilt wheel pcgeom-cu$CUDA_MAJOR" "$LOGS/wheel.log" \
     && grep -q "visible GPU .*covered by the sm_${ARCH/./} cubin" "$LOGS/wheel.log" \
     && (cd "$CHECK" && PCGEOM_SOURCE_ROOT=$REPO timeout 200 "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py) >>"$LOGS/wheel.log" 2>&1; then
    record "prebuilt wheel $(basename "$WHEEL"): ok (doctor: $(grep 'visible GPU' "$LOGS/wheel.log" | sed 's/^ *//'); test_cuda: $(tail -1 "$LOGS/wheel.log"))"
  else
    FAILED=$((FAILED + 1))
    record "prebuilt wheel $(basename "$WHEEL"): FAILED (see wheel.log)"
    tail -40 "$LOGS/wheel.log"
  fi
  rm -rf "$CHECK"
  "$PY" -m pip uninstall -q -y "pcgeom-cu$CUDA_MAJOR" >/dev/null 2>&1 || true
else
  record "prebuilt wheel: none in dist/ for CUDA $CUDA_MAJOR (bash scripts/build_wheels.sh, then carry dist/)"
fi

# ------------------------------------------------------------------ 1. build
say "building (TORCH_CUDA_ARCH_LIST=$ARCH)"
rm -f pcgeom/_C*.so
if FORCE_CUDA=1 PCGEOM_REQUIRE_EXT=1 TORCH_CUDA_ARCH_LIST="$ARCH" MAX_JOBS=$(nproc) \
   timeout 240 "$PY" -m pip install -v --no-build-isolation --no-deps --no-cache-dir -e . >"$LOGS/build.log" 2>&1 \
   && "$PY" -c "import pcgeom, sys; i = pcgeom.backend_info(); print(i); sys.exit(i['native_devices'] != ['cpu', 'cuda'])" >>"$LOGS/build.log" 2>&1; then
  record "build for sm_${ARCH/./}: ok ($(tail -1 "$LOGS/build.log" | cut -c1-160))"
else
  record "build: FAILED (see build.log)"
  tail -30 "$LOGS/build.log"
  exit 1  # nothing else is meaningful
fi

BUDGET=470  # seconds for the whole check (the issue allows 8 minutes)
step() {  # step NAME TIMEOUT_S COMMAND...   (the timeout shrinks to what the budget has left)
  local name=$1 limit=$2
  shift 2
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  (( left < limit )) && limit=$left
  if (( limit < 20 )); then
    record "$name: SKIPPED, the 8-minute budget is spent"
    return
  fi
  say "$name (timeout ${limit}s)"
  local start
  start=$(date +%s)
  if timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1; then
    record "$name: ok in $(( $(date +%s) - start )) s ($(tail -1 "$LOGS/$name.log" | cut -c1-200))"
  else
    local rc=$?
    FAILED=$((FAILED + 1))
    record "$name: FAILED (exit $rc$( [[ $rc == 124 ]] && echo ', timed out'), $(( $(date +%s) - start )) s; see $name.log)"
    tail -40 "$LOGS/$name.log"
  fi
}

# ------------------------------------------------------------ 2. CUDA tests
step test_cuda 150 "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py

# -------------------------------------------------------------- 3. benchmark
step bench 150 "$PY" benchmarks/gpu_bench.py --out "$RESULTS"

# ------------------------------------------------------- 4. compute-sanitizer
SAN=$(command -v compute-sanitizer || true)
for c in "$CUDA_HOME/bin/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer; do
  [[ -z $SAN && -x $c ]] && SAN=$c
done
# No caching allocator under the sanitizer: every tensor is its own allocation,
# so an out-of-bounds access cannot land silently inside a cached block.
sanitize() {  # sanitize TOOL TIMEOUT [extra options]
  local tool=$1 limit=$2
  shift 2
  if [[ -z $SAN ]]; then
    record "compute-sanitizer $tool: SKIPPED, compute-sanitizer is not installed (looked on PATH and in $CUDA_HOME/bin)"
    return
  fi
  step "$tool" "$limit" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$SAN" --tool "$tool" --error-exitcode 1 "$@" \
    "$PY" benchmarks/gpu_bench.py --smoke
}
sanitize memcheck 150 --leak-check no

# ------------------------------------------------------- 5. the whole suite
# (tests/test_cuda.py already ran above)
step test_suite 300 "$PY" -m pytest -q -p no:cacheprovider tests --ignore=tests/test_cuda.py

# ------------------- 6. Pointcept rows (PT-v2m2 step, packed knn_query), if time is left
step bench_pointcept 90 "$PY" benchmarks/bm_pointcept.py --device cuda --points 40000 --repeats 3 --out "$RESULTS"

# ------------------------------- 7. shared-memory hazards, if time is left
sanitize racecheck 90
sanitize synccheck 60
exit $(( FAILED > 0 ))
