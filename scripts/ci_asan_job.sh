#!/usr/bin/env bash
# CI job 3: direct torch.ops.pcgeom.* calls with bad arguments are errors, never
# out-of-bounds accesses -- checked under AddressSanitizer, on the CPU kernels
# and on the CUDA kernels' code (through the CPU emulator, scripts/cuda_emu).
#
#   bash scripts/ci_asan_job.sh          (uses .venv/bin/python, or $PYTHON)
#
# Steps (each fails the job loudly; ~2-3 min on 2 cores from scratch, objects are cached
# in build/asan and build/cuda_emu):
#   1. the CPU kernels built with -fsanitize=address (scripts/asan/build.py);
#   2. tests/test_raw_ops.py on that build (PCGEOM_NATIVE_LIB, libasan preloaded),
#      after checking that the process really serves the ops from it;
#   3. the CUDA kernels built on the emulator with --asan, and the same bad-input
#      cases run on them (PCGEOM_CUDA_EMU_LIB).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PY=${PYTHON:-$REPO/.venv/bin/python}
t0=$(date +%s)
step() { echo "[ci-asan +$(( $(date +%s) - t0 ))s] $*"; }

LIBASAN=$(gcc -print-file-name=libasan.so)
LIBSTDCXX=$(gcc -print-file-name=libstdc++.so)
[[ -f $LIBASAN ]] || { echo "ERROR: gcc has no libasan.so ($LIBASAN); install libasan for gcc" >&2; exit 1; }
# libstdc++ is preloaded too: python itself does not link it, and ASan's
# __cxa_throw interceptor must find it at start-up or the first C++ exception
# (every bad-argument error) dies in "CHECK failed: real___cxa_throw".
PRELOAD="$LIBASAN $LIBSTDCXX"
# allocator_may_return_null: the huge-k cases must see a failed allocation
# (and turn it into an error naming k), not an ASan "allocation-size-too-big" abort.
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:halt_on_error=1:exitcode=86
export PYTHONDONTWRITEBYTECODE=1

step "1. CPU kernels with AddressSanitizer"
"$PY" scripts/asan/build.py
ASAN_LIB=$REPO/build/asan/libpcgeom_asan.so

step "2. tests/test_raw_ops.py on the ASan build"
PCGEOM_NATIVE_LIB=$ASAN_LIB LD_PRELOAD=$PRELOAD "$PY" - <<'PYEOF'
import os, torch, pcgeom
info = pcgeom.backend_info()
assert info["extension_loaded"] and "cpu" in info["native_devices"], info["load_error"]
# the ops must be served by the ASan library, not by an installed pcgeom._C
maps = open("/proc/self/maps").read()
assert os.environ["PCGEOM_NATIVE_LIB"] in maps, "the ASan library is not mapped"
assert "pcgeom/_C" not in maps, "pcgeom._C was loaded beside the ASan library"
assert "libasan" in maps, "libasan is not loaded: ASan reports would be missing"
print("serving pcgeom ops from", os.environ["PCGEOM_NATIVE_LIB"])
PYEOF
PCGEOM_NATIVE_LIB=$ASAN_LIB LD_PRELOAD=$PRELOAD "$PY" -m pytest -q -p no:cacheprovider --capture=sys tests/test_raw_ops.py \
  || { echo "ERROR: tests/test_raw_ops.py failed under AddressSanitizer (exit 86 = an ASan report above)" >&2; exit 1; }
# The op suites' own error tests exercise the same boundaries with real shapes.
PCGEOM_NATIVE_LIB=$ASAN_LIB LD_PRELOAD=$PRELOAD "$PY" -m pytest -q -p no:cacheprovider --capture=sys \
  tests/test_knn_gather.py tests/test_farthest_point_sample.py -k "error or invalid or bad or raise or reject" \
  || { echo "ERROR: op error tests failed under AddressSanitizer" >&2; exit 1; }

step "3. CUDA kernels on the emulator with AddressSanitizer"
"$PY" scripts/cuda_emu/build.py --asan > build/cuda_emu-asan.log 2>&1 \
  || { tail -30 build/cuda_emu-asan.log; echo "ERROR: the emulator ASan build failed" >&2; exit 1; }
PCGEOM_CUDA_EMU_LIB=$REPO/build/cuda_emu/libpcgeom_cuda_emu_asan.so LD_PRELOAD=$PRELOAD \
  "$PY" -m pytest -q -p no:cacheprovider --capture=sys tests/test_raw_ops.py -k emulated \
  || { echo "ERROR: the emulated CUDA kernels failed the bad-input cases under AddressSanitizer" >&2; exit 1; }
PCGEOM_CUDA_EMU_LIB=$REPO/build/cuda_emu/libpcgeom_cuda_emu_asan.so LD_PRELOAD=$PRELOAD \
  "$PY" -m pytest -q -p no:cacheprovider --capture=sys scripts/cuda_emu/test_emu.py \
  -k "out_of_range or clamps_lengths or bad_values or thread_indices" \
  || { echo "ERROR: the CUDA kernels' index guards failed on the emulator under AddressSanitizer" >&2; exit 1; }
step "ASan job passed"
