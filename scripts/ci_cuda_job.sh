#!/usr/bin/env bash
# CI job 2: the CUDA sources compile, and a stable-ABI binary built on torch
# 2.13.0 runs unchanged on torch 2.14.1.  Needs no GPU.
#
#   bash scripts/ci_cuda_job.sh PATH/TO/pcgeom-*.whl   (a wheel built against torch 2.13.0 CPU)
#
# Steps (each fails the job loudly):
#   1. a venv OUTSIDE the repo with torch==2.14.1 (the CUDA 13.0 build; ~5.5 GB,
#      2-3 min) + the test deps; reused on re-runs once a marker says it is complete;
#   2. ABI portability: the given 2.13.0-built wheel, installed with --no-deps into
#      that 2.14.1 venv, loads its native library and passes the op tests;
#   3. CUDA compile check: the package built from a copy of the source tree with
#      FORCE_CUDA=1 for sm_75, sm_80 and sm_90 (+PTX), every op has a CUDA kernel
#      registered, and the CPU ops still pass;
#   4. the CUDA kernels' code, built on the CPU emulator (scripts/cuda_emu), gives
#      the CPU kernels' answers bit for bit.
#
# Environment: PCGEOM_CI_CUDA_WORK (default ${TMPDIR:-/tmp}/pcgeom-ci-cuda),
# PYTHON (default python3), CUDA_HOME (default /usr/local/cuda).
set -euo pipefail

WHEEL=${1:?usage: scripts/ci_cuda_job.sh PATH/TO/pcgeom-WHEEL-built-on-torch-2.13.0.whl}
[[ -f $WHEEL ]] || { echo "ERROR: wheel not found: $WHEEL" >&2; exit 1; }
WHEEL=$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL")
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TORCH_VERSION=2.14.1
ARCHS="7.5;8.0;9.0+PTX"
WORK=${PCGEOM_CI_CUDA_WORK:-${TMPDIR:-/tmp}/pcgeom-ci-cuda}
VENV=$WORK/venv-torch$TORCH_VERSION
MARKER=$VENV/.pcgeom-ci-complete
PY=$VENV/bin/python
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PIP_DISABLE_PIP_VERSION_CHECK=1
# Test runs must not pick up the repo's own pcgeom folder or caches.
export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor-cache
export PYTHONDONTWRITEBYTECODE=1
unset PYTHONPATH || true

case "$WORK" in "$REPO"|"$REPO"/*) echo "ERROR: the work folder must be outside the repo" >&2; exit 1;; esac
mkdir -p "$WORK"
t0=$(date +%s)
step() { echo "[ci-cuda +$(( $(date +%s) - t0 ))s] $*"; }

# ---------------------------------------------------------------- 1. venv
if [[ -f $MARKER ]] && "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  step "reusing $VENV ($(cat "$MARKER"))"
else
  step "creating $VENV (torch==$TORCH_VERSION, CUDA build)"
  rm -rf "$VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION" numpy einops plyfile pytest scipy ninja setuptools wheel
  echo "torch==$TORCH_VERSION installed $(date -u +%FT%TZ)" > "$MARKER"
fi
"$PY" - <<EOF
import torch
assert torch.__version__.split("+")[0] == "$TORCH_VERSION", torch.__version__
assert torch.version.cuda and torch.version.cuda.startswith("13."), f"expected a CUDA 13 build of torch, got cuda={torch.version.cuda}"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPU visible: {torch.cuda.is_available()}")
EOF
[[ -x $CUDA_HOME/bin/nvcc ]] || { echo "ERROR: no nvcc at $CUDA_HOME/bin/nvcc" >&2; exit 1; }

# Tests run from a copy, in a folder outside the repo, so `import pcgeom`
# resolves the installed package and not the source tree.
TESTS=$WORK/tests
rm -rf "$TESTS"
cp -r "$REPO/tests" "$TESTS"
find "$TESTS" -name __pycache__ -prune -exec rm -rf {} +
# The op tests: every registry entry's test file (pcgeom/ops/registry.py, read by path) and the raw-op
# bad-input table, selected with the same `ops` marker as scripts/test.sh's pure-torch run.
mapfile -t OP_TESTS < <(python3 - "$REPO" "$TESTS" <<'EOF'
import importlib.util, pathlib, sys
repo, tests = map(pathlib.Path, sys.argv[1:3])
spec = importlib.util.spec_from_file_location("registry", repo / "pcgeom" / "ops" / "registry.py")
reg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reg)
for name in dict.fromkeys([pathlib.Path(e.tests).name for e in reg.OPS] + ["test_raw_ops.py"]):
    print(tests / name)
EOF
)
for t in "${OP_TESTS[@]}"; do [[ -f $t ]] || { echo "ERROR: op test file $t (from the registry) not found" >&2; exit 1; }; done
[[ ${#OP_TESTS[@]} -gt 0 ]] || { echo "ERROR: no op tests found in $REPO/tests" >&2; exit 1; }
run_pytest() { (cd "$WORK" && "$PY" -m pytest -q -p no:cacheprovider --rootdir "$TESTS" "$@"); }

# ------------------------------------------------- 2. ABI portability proof
step "installing the torch-2.13.0-built wheel $(basename "$WHEEL") into the torch $TORCH_VERSION venv"
"$VENV/bin/pip" install -q --no-deps --force-reinstall --no-cache-dir "$WHEEL"
(cd "$WORK" && "$PY" - <<'EOF'
import pcgeom
info = pcgeom.backend_info()
print({k: info[k] for k in ("extension_loaded", "native_devices", "built_with_torch", "torch_version", "load_error")})
assert info["extension_loaded"], f"the 2.13.0-built native library did not load on torch {info['torch_version']}: {info['load_error']}"
assert (info["built_with_torch"] or "").startswith("2.13.0"), f"expected a wheel built with torch 2.13.0, got {info['built_with_torch']}"
assert info["torch_version"].startswith("2.14.1"), info["torch_version"]
assert "cpu" in info["native_devices"], info
EOF
)
step "op tests of the 2.13.0 binary on torch $TORCH_VERSION"
run_pytest -m ops "${OP_TESTS[@]}"

# ------------------------------------------------------ 3. CUDA compile check
SRC=$WORK/src
rm -rf "$SRC"
mkdir -p "$SRC"
if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git -C "$REPO" ls-files -z --cached --others --exclude-standard \
    | (cd "$REPO" && xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) \
    | tar -C "$REPO" --null -T - -cf - | tar -C "$SRC" -xf -
else
  tar -C "$REPO" --exclude=.venv --exclude=build --exclude='*.so' --exclude='*.egg-info' -cf - . | tar -C "$SRC" -xf -
fi
rm -f "$SRC"/pcgeom/*.so "$SRC"/pcgeom/_build_info.json
step "building pcgeom with CUDA kernels (TORCH_CUDA_ARCH_LIST=$ARCHS, MAX_JOBS=2)"
BUILD_LOG=$WORK/build-cuda.log
if ! (cd "$SRC" && FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST="$ARCHS" PCGEOM_REQUIRE_EXT=1 MAX_JOBS=2 \
      "$VENV/bin/pip" install -v --no-build-isolation --no-deps --no-cache-dir --force-reinstall . >"$BUILD_LOG" 2>&1); then
  grep -nE "error|Error" "$BUILD_LOG" | head -40 || true
  tail -40 "$BUILD_LOG"
  echo "ERROR: the CUDA build failed (full log: $BUILD_LOG)" >&2
  exit 1
fi
for arch in 75 80 90; do
  grep -q "arch=compute_$arch,code=sm_$arch" "$BUILD_LOG" \
    || { echo "ERROR: nvcc was not asked for sm_$arch (see $BUILD_LOG)" >&2; exit 1; }
done
grep -q "arch=compute_90,code=compute_90" "$BUILD_LOG" \
  || { echo "ERROR: no compute_90 PTX was requested (see $BUILD_LOG)" >&2; exit 1; }
step "build done; checking the registered kernels"
(cd "$WORK" && "$PY" - <<'EOF'
import torch
import pcgeom
from pcgeom.ops.registry import SCHEMAS

info = pcgeom.backend_info()
print({k: info[k] for k in ("extension_loaded", "cuda_extension_loaded", "native_devices", "built_with_torch", "cuda_load_error")})
assert info["extension_loaded"], info["load_error"]
assert info["cuda_extension_loaded"], f"pcgeom._C_cuda did not load: {info['cuda_load_error']}"
assert (info["built_with_torch"] or "").startswith("2.14.1"), info["built_with_torch"]
assert info["build"].get("cuda_requested") and not info["build"].get("failed"), info["build"]
assert info["native_devices"] == ["cpu", "cuda"], info["native_devices"]
missing = [(op, key) for op in SCHEMAS for key in ("CPU", "CUDA")
           if not torch._C._dispatch_has_kernel_for_dispatch_key(f"pcgeom::{op}", key)]
assert not missing, f"ops without a native kernel: {missing}"
print(f"CUDA and CPU kernels registered for: {', '.join(SCHEMAS)}")

# Quick CPU check of the freshly built module against the pure-torch reference.
from pcgeom.ops import reference
g = torch.Generator().manual_seed(0)
q = torch.rand(2, 50, 3, generator=g)
p = torch.rand(2, 70, 3, generator=g)
ql = torch.tensor([50, 31])
pl = torch.tensor([70, 9])
d, i = pcgeom.knn(q, p, 12, query_lengths=ql, points_lengths=pl)
rd, ri = reference.knn_reference(q, p, 12, ql, pl)
assert torch.equal(i, ri) and torch.equal(d, rd), "knn (CPU kernel) differs from the reference"
s = pcgeom.farthest_point_sample(p, 16, lengths=pl)
assert torch.equal(s, reference.farthest_point_sample_reference(p, 16, pl, torch.zeros(2, dtype=torch.long))), "fps differs"
print("CPU kernels of the CUDA build agree with the reference")
EOF
)
if [[ -f $TESTS/test_cuda.py ]]; then
  step "tests/test_cuda.py (static checks; the GPU tests skip without a GPU)"
  PCGEOM_SOURCE_ROOT=$SRC run_pytest "$TESTS/test_cuda.py"
fi
# ------------------------------------------- 4. the kernels' logic, emulated
# No GPU here, so the same CUDA sources also run on the CPU emulator and must
# match the CPU kernels bit for bit (scripts/cuda_emu; the slow cooperative-
# launch cases are left to a full run of test_emu.py).
step "CUDA kernels on the CPU emulator (scripts/cuda_emu)"
(cd "$WORK" && "$PY" "$SRC/scripts/cuda_emu/build.py" >"$WORK/build-emu.log" 2>&1) \
  || { tail -30 "$WORK/build-emu.log"; echo "ERROR: the emulator build failed" >&2; exit 1; }
run_pytest "$SRC/scripts/cuda_emu/test_emu.py" -k "not multi or quick"
step "CUDA compile check passed"
