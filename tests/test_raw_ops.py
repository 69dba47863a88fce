"""Direct ``torch.ops.pcgeom.*`` calls with bad arguments: an error, never a crash.

The ops are public (users, ``torch.library.opcheck``, compiled graphs call them
without the Python wrappers), so every kernel checks its arguments at the
boundary (``csrc/common/checks.h``; the pure-torch path in
``pcgeom/ops/reference.py`` says the same).  ``CASES`` below holds, per op, a
valid call and a list of bad ones that each change one thing; every bad call
must raise ``RuntimeError``/``ValueError`` naming the op and the argument.

**A new op must add its cases here**: ``test_every_registered_op_has_cases``
fails for any op in the ``pcgeom`` namespace without them.

Also run by ``scripts/ci_asan_job.sh`` against an AddressSanitizer build of the
CPU kernels (where an out-of-bounds read aborts the process), and on the CUDA
kernels' code through the emulator (scripts/cuda_emu, ``PCGEOM_CUDA_EMU_LIB``).
On CUDA the kernels do not read index / length *values* on the host (that
would cost a device sync): they treat an index outside ``[0, N)`` like the
padding ``-1`` and clamp lengths and start indices, so those cases
(``values=True``) must merely run without a fault there.
"""

from __future__ import annotations

import os
import pathlib
import re
from dataclasses import dataclass
from typing import Callable

import pytest
import torch

import pcgeom  # noqa: F401  (defines torch.ops.pcgeom.*)
from pcgeom._backend import backend_info
from pcgeom.ops.registry import SCHEMAS

pytestmark = pytest.mark.ops

HUGE = 2**40


@dataclass
class Case:
    name: str
    make: Callable  # device -> tuple of op arguments
    match: str  # regex the message must contain after "<op>: " (the argument, the limit)
    values: bool = False  # a bad index/length *value*: CUDA kernels ignore/clamp it instead
    devices: tuple = ("cpu", "cuda")


def f32(*shape, d="cpu", dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g, dtype=torch.float64).to(device=d, dtype=dtype)


def i64(values, d="cpu", dtype=torch.int64):
    return torch.tensor(values, dtype=dtype, device=d)


def idx_tensor(B, M, K, N, d="cpu", seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-1, N, (B, M, K), generator=g).to(d)


# --------------------------------------------------------------------------- search ops

def _search(op, d, *, q=None, p=None, k=3, ql=None, pl=None, radius=0.5, index_order=False):
    q = f32(2, 5, 3, d=d) if q is None else q
    p = f32(2, 7, 3, d=d, seed=1) if p is None else p
    ql = i64([5, 4], d) if ql is None else ql
    pl = i64([7, 6], d) if pl is None else pl
    if op == "knn":
        return (q, p, k, ql, pl)
    return (q, p, radius, k, ql, pl, index_order)


def search_cases(op):
    S = lambda **kw: (lambda d: _search(op, d, **kw))  # noqa: E731
    cases = [
        Case("valid", S(), ""),
        Case("query rank 2", lambda d: _search(op, d, q=f32(5, 3, d=d)), "query must have 3 dimensions"),
        Case("points rank 4", lambda d: _search(op, d, p=f32(2, 7, 3, 1, d=d)), "points must have 3 dimensions"),
        Case("points other batch", lambda d: _search(op, d, p=f32(3, 7, 3, d=d)), r"points must have shape \(B, N, D\) with size 2 in dimension 0"),
        Case("points other dimension", lambda d: _search(op, d, p=f32(2, 7, 4, d=d)), r"points must have shape \(B, N, D\) with size 3 in dimension 2"),
        Case("points other dtype", lambda d: _search(op, d, p=f32(2, 7, 3, d=d, dtype=torch.float64)), r"points must have the dtype of query \(float32\), got float64"),
        Case("integer query", lambda d: _search(op, d, q=i64([[[1, 2, 3]] * 5] * 2, d), p=i64([[[1, 2, 3]] * 7] * 2, d)), "query must be float16, bfloat16, float32 or float64, got int64"),
        Case("k = 0", S(k=0), "k must be >= 1, got 0"),
        Case("k = -5", S(k=-5), "k must be >= 1, got -5"),
        Case("huge k", S(k=HUGE), rf"k={HUGE} needs dist2 and idx of shape \(2, 5, {HUGE}\), [0-9.]+ (TiB|PiB)"),
        Case("query_lengths other batch", lambda d: _search(op, d, ql=i64([5, 4, 3], d)), r"query_lengths must have shape \(2,\), got \(3,\)"),
        Case("query_lengths int32", lambda d: _search(op, d, ql=i64([5, 4], d, torch.int32)), "query_lengths must be int64, got int32"),
        Case("points_lengths float", lambda d: _search(op, d, pl=torch.tensor([7.0, 6.0], device=d)), "points_lengths must be int64, got float32"),
        Case("points_lengths 2-D", lambda d: _search(op, d, pl=i64([[7, 6]], d)), r"points_lengths must have shape \(2,\)"),
        Case("query_lengths > M", lambda d: _search(op, d, ql=i64([6, 4], d)), r"query_lengths\[0\]=6 is outside \[0, 5\]", values=True),
        Case("points_lengths > N", lambda d: _search(op, d, pl=i64([7, 8], d)), r"points_lengths\[1\]=8 is outside \[0, 7\]", values=True),
        Case("points_lengths < 0", lambda d: _search(op, d, pl=i64([-1, 6], d)), r"points_lengths\[0\]=-1 is outside \[0, 7\]", values=True),
        Case("lengths on the CPU", lambda d: _search(op, d, pl=i64([7, 6], "cpu")), "points_lengths must be on the same", devices=("cuda",)),
        Case("points on the CPU", lambda d: _search(op, d, p=f32(2, 7, 3, d="cpu")), "points must be on the same", devices=("cuda",)),
    ]
    if op == "ball_query":
        cases += [
            Case("radius < 0", S(radius=-0.5), "radius must be >= 0, got -0.5"),
            Case("radius NaN", S(radius=float("nan")), "radius must be >= 0, got nan"),
            Case("index order, points other batch", lambda d: _search(op, d, p=f32(3, 7, 3, d=d), index_order=True), "points must have shape"),
            Case("index order, huge k", S(k=HUGE, index_order=True), rf"k={HUGE} needs dist2 and idx"),
            Case("index order, points_lengths > N", lambda d: _search(op, d, pl=i64([9, 6], d), index_order=True), r"points_lengths\[0\]=9 is outside \[0, 7\]", values=True),
        ]
    return cases


# --------------------------------------------------------------------------- knn_backward

def _knn_bwd(d, *, g=None, q=None, p=None, idx=None):
    q = f32(2, 5, 3, d=d) if q is None else q
    p = f32(2, 7, 3, d=d, seed=1) if p is None else p
    idx = idx_tensor(2, 5, 4, 7, d) if idx is None else idx
    g = f32(*idx.shape, d=d, seed=2) if g is None else g
    return (g, q, p, idx)


def _with(t, pos, value):
    t = t.clone()
    t.view(-1)[pos] = value
    return t


KNN_BACKWARD = [
    Case("valid", lambda d: _knn_bwd(d), ""),
    # the two reports of issue 22: a points tensor of another dimension read past
    # the end, one of another batch size segfaulted
    Case("points other dimension", lambda d: _knn_bwd(d, p=f32(2, 7, 2, d=d)), r"points must have shape \(B, N, D\) with size 3 in dimension 2"),
    Case("points smaller batch", lambda d: _knn_bwd(d, p=f32(1, 7, 3, d=d)), r"points must have shape \(B, N, D\) with size 2 in dimension 0"),
    Case("points larger batch", lambda d: _knn_bwd(d, p=f32(3, 7, 3, d=d)), "points must have shape"),
    Case("points rank 2", lambda d: _knn_bwd(d, p=f32(7, 3, d=d)), "points must have 3 dimensions"),
    Case("query rank 4", lambda d: _knn_bwd(d, q=f32(2, 5, 3, 1, d=d)), "query must have 3 dimensions"),
    Case("grad rank 2", lambda d: _knn_bwd(d, g=f32(2, 20, d=d)), "grad_dist2 must have 3 dimensions"),
    Case("idx other batch", lambda d: _knn_bwd(d, idx=idx_tensor(1, 5, 4, 7, d), g=f32(2, 5, 4, d=d)), r"idx must have shape \(B, M, k\) with size 2 in dimension 0"),
    Case("idx other M", lambda d: _knn_bwd(d, idx=idx_tensor(2, 6, 4, 7, d), g=f32(2, 5, 4, d=d)), r"idx must have shape \(B, M, k\) with size 5 in dimension 1"),
    Case("grad other k", lambda d: _knn_bwd(d, g=f32(2, 5, 5, d=d)), r"grad_dist2 must have shape \(B, M, k\) with size 4 in dimension 2"),
    Case("grad other M", lambda d: _knn_bwd(d, g=f32(2, 3, 4, d=d)), "grad_dist2 must have shape"),
    Case("idx int32", lambda d: _knn_bwd(d, idx=idx_tensor(2, 5, 4, 7, d).int()), "idx must be int64, got int32"),
    Case("grad float64", lambda d: _knn_bwd(d, g=f32(2, 5, 4, d=d, dtype=torch.float64)), r"grad_dist2 must have the dtype of query \(float32\), got float64"),
    Case("points float16", lambda d: _knn_bwd(d, p=f32(2, 7, 3, d=d, dtype=torch.float16)), "points must have the dtype of query"),
    Case("integer query", lambda d: _knn_bwd(d, q=i64([[[1, 2, 3]] * 5] * 2, d), p=i64([[[1, 2, 3]] * 7] * 2, d), g=i64([[[1] * 4] * 5] * 2, d)), "query must be float16, bfloat16, float32 or float64"),
    Case("idx = N", lambda d: _knn_bwd(d, idx=_with(idx_tensor(2, 5, 4, 7, d), 13, 7)), r"idx values must be in \[-1, 7\), got 7", values=True),
    Case("idx huge", lambda d: _knn_bwd(d, idx=_with(idx_tensor(2, 5, 4, 7, d), 0, 2**40)), r"idx values must be in \[-1, 7\)", values=True),
    Case("idx < -1", lambda d: _knn_bwd(d, idx=_with(idx_tensor(2, 5, 4, 7, d), 39, -2)), r"idx values must be in \[-1, 7\), got -2", values=True),
    Case("idx on the CPU", lambda d: _knn_bwd(d, idx=idx_tensor(2, 5, 4, 7, "cpu")), "idx must be on the same", devices=("cuda",)),
]


# --------------------------------------------------------------------------- knn_gather

def _gather(d, *, x=None, idx=None):
    x = f32(2, 7, 4, d=d) if x is None else x
    idx = idx_tensor(2, 5, 3, 7, d) if idx is None else idx
    return (x, idx)


KNN_GATHER = [
    Case("valid", lambda d: _gather(d), ""),
    Case("x rank 2", lambda d: _gather(d, x=f32(7, 4, d=d)), "x must have 3 dimensions"),
    Case("idx rank 2", lambda d: _gather(d, idx=idx_tensor(2, 5, 3, 7, d)[0]), "idx must have 3 dimensions"),
    Case("idx other batch", lambda d: _gather(d, idx=idx_tensor(3, 5, 3, 7, d)), r"idx must have shape \(B, M, k\) with size 2 in dimension 0"),
    Case("idx int32", lambda d: _gather(d, idx=idx_tensor(2, 5, 3, 7, d).int()), "idx must be int64, got int32"),
    Case("integer x", lambda d: _gather(d, x=i64([[[1] * 4] * 7] * 2, d)), "x must be float16, bfloat16, float32 or float64, got int64"),
    Case("idx = N", lambda d: _gather(d, idx=_with(idx_tensor(2, 5, 3, 7, d), 29, 7)), r"idx values must be in \[-1, 7\), got 7", values=True),
    Case("idx < -1", lambda d: _gather(d, idx=_with(idx_tensor(2, 5, 3, 7, d), 3, -9)), r"idx values must be in \[-1, 7\), got -9", values=True),
    Case("x empty, idx 0", lambda d: _gather(d, x=f32(2, 0, 4, d=d), idx=torch.zeros(2, 5, 3, dtype=torch.long, device=d)), r"idx values must be in \[-1, 0\), got 0", values=True),
    Case("idx on the CPU", lambda d: _gather(d, idx=idx_tensor(2, 5, 3, 7, "cpu")), "idx must be on the same", devices=("cuda",)),
]


def _gather_bwd(d, *, g=None, idx=None, n=7):
    idx = idx_tensor(2, 5, 3, 7, d) if idx is None else idx
    g = f32(2, 5, 3, 4, d=d) if g is None else g
    return (g, idx, n)


KNN_GATHER_BACKWARD = [
    Case("valid", lambda d: _gather_bwd(d), ""),
    Case("grad rank 3", lambda d: _gather_bwd(d, g=f32(2, 5, 3, d=d)), "grad must have 4 dimensions"),
    Case("idx rank 4", lambda d: _gather_bwd(d, idx=idx_tensor(2, 5, 3, 7, d)[..., None]), "idx must have 3 dimensions"),
    Case("idx other batch", lambda d: _gather_bwd(d, idx=idx_tensor(1, 5, 3, 7, d)), r"idx must have shape \(B, M, k\) with size 2 in dimension 0"),
    Case("idx other M", lambda d: _gather_bwd(d, idx=idx_tensor(2, 9, 3, 7, d)), r"idx must have shape \(B, M, k\) with size 5 in dimension 1"),
    Case("idx other k", lambda d: _gather_bwd(d, idx=idx_tensor(2, 5, 2, 7, d)), r"idx must have shape \(B, M, k\) with size 3 in dimension 2"),
    Case("idx int32", lambda d: _gather_bwd(d, idx=idx_tensor(2, 5, 3, 7, d).int()), "idx must be int64, got int32"),
    Case("integer grad", lambda d: _gather_bwd(d, g=i64([[[[1] * 4] * 3] * 5] * 2, d)), "grad must be float16, bfloat16, float32 or float64"),
    Case("n < 0", lambda d: _gather_bwd(d, n=-1), "n must be >= 0, got -1"),
    Case("huge n", lambda d: _gather_bwd(d, idx=torch.full((2, 5, 3), -1, device=d), n=HUGE), rf"n={HUGE} needs the gradient of shape \(2, {HUGE}, 4\)"),
    Case("idx >= n", lambda d: _gather_bwd(d, n=3, idx=_with(torch.zeros(2, 5, 3, dtype=torch.long, device=d), 7, 5)), r"idx values must be in \[-1, 3\), got 5", values=True),
    Case("idx < -1", lambda d: _gather_bwd(d, idx=_with(idx_tensor(2, 5, 3, 7, d), 0, -3)), r"idx values must be in \[-1, 7\), got -3", values=True),
    Case("idx on the CPU", lambda d: _gather_bwd(d, idx=idx_tensor(2, 5, 3, 7, "cpu")), "idx must be on the same", devices=("cuda",)),
]


# --------------------------------------------------------------------------- farthest_point_sample

def _fps(d, *, p=None, s=4, lengths=None, start=None):
    p = f32(2, 9, 3, d=d) if p is None else p
    lengths = i64([9, 5], d) if lengths is None else lengths
    start = i64([0, 2], d) if start is None else start
    return (p, s, lengths, start)


FARTHEST_POINT_SAMPLE = [
    Case("valid", lambda d: _fps(d), ""),
    Case("points rank 2", lambda d: _fps(d, p=f32(9, 3, d=d)), "points must have 3 dimensions"),
    Case("integer points", lambda d: _fps(d, p=i64([[[1, 2, 3]] * 9] * 2, d)), "points must be float16, bfloat16, float32 or float64, got int64"),
    Case("n_samples < 0", lambda d: _fps(d, s=-1), "n_samples must be >= 0, got -1"),
    Case("huge n_samples", lambda d: _fps(d, s=HUGE), rf"n_samples={HUGE} needs the indices of shape \(2, {HUGE}\), [0-9.]+ TiB"),
    Case("lengths other batch", lambda d: _fps(d, lengths=i64([9], d)), r"lengths must have shape \(2,\), got \(1,\)"),
    Case("lengths int32", lambda d: _fps(d, lengths=i64([9, 5], d, torch.int32)), "lengths must be int64, got int32"),
    Case("start_index other batch", lambda d: _fps(d, start=i64([0, 0, 0], d)), r"start_index must have shape \(2,\), got \(3,\)"),
    Case("start_index float", lambda d: _fps(d, start=torch.zeros(2, device=d)), "start_index must be int64, got float32"),
    Case("lengths > N", lambda d: _fps(d, lengths=i64([10, 5], d)), r"lengths\[0\]=10 is outside \[0, 9\]", values=True),
    Case("lengths < 0", lambda d: _fps(d, lengths=i64([9, -2], d)), r"lengths\[1\]=-2 is outside \[0, 9\]", values=True),
    Case("start_index >= lengths", lambda d: _fps(d, start=i64([0, 5], d)), r"start_index\[1\]=5 is outside \[0, 5\)", values=True),
    Case("start_index < 0", lambda d: _fps(d, start=i64([-1, 0], d)), r"start_index\[0\]=-1 is outside \[0, 9\)", values=True),
    Case("lengths on the CPU", lambda d: _fps(d, lengths=i64([9, 5], "cpu")), "lengths must be on the same", devices=("cuda",)),
]


# --------------------------------------------------------------------------- pca_normals

def _pca(d, *, p=None, idx=None):
    p = f32(2, 9, 3, d=d) if p is None else p
    idx = idx_tensor(2, 6, 4, 9, d) if idx is None else idx
    return (p, idx)


PCA_NORMALS = [
    Case("valid", lambda d: _pca(d), ""),
    Case("points rank 2", lambda d: _pca(d, p=f32(9, 3, d=d)), "points must have 3 dimensions"),
    Case("idx rank 2", lambda d: _pca(d, idx=idx_tensor(2, 6, 4, 9, d)[0]), "idx must have 3 dimensions"),
    Case("points D=4", lambda d: _pca(d, p=f32(2, 9, 4, d=d)), r"points must have shape \(B, N, 3\) with size 3 in dimension 2"),
    Case("integer points", lambda d: _pca(d, p=i64([[[1, 2, 3]] * 9] * 2, d)), "points must be float16, bfloat16, float32 or float64, got int64"),
    Case("idx int32", lambda d: _pca(d, idx=idx_tensor(2, 6, 4, 9, d).int()), "idx must be int64, got int32"),
    Case("idx other batch", lambda d: _pca(d, idx=idx_tensor(3, 6, 4, 9, d)), r"idx must have shape \(B, M, k\) with size 2 in dimension 0"),
    Case("idx = N", lambda d: _pca(d, idx=_with(idx_tensor(2, 6, 4, 9, d), 11, 9)), r"idx values must be in \[-1, 9\), got 9", values=True),
    Case("idx < -1", lambda d: _pca(d, idx=_with(idx_tensor(2, 6, 4, 9, d), 2, -5)), r"idx values must be in \[-1, 9\), got -5", values=True),
    Case("idx on the CPU", lambda d: _pca(d, idx=idx_tensor(2, 6, 4, 9, "cpu")), "idx must be on the same", devices=("cuda",)),
]


# The per-op table.  Every op registered in the pcgeom namespace needs an entry
# with at least one valid call and three bad ones.
CASES = {
    "knn": search_cases("knn"),
    "ball_query": search_cases("ball_query"),
    "knn_backward": KNN_BACKWARD,
    "knn_gather": KNN_GATHER,
    "knn_gather_backward": KNN_GATHER_BACKWARD,
    "farthest_point_sample": FARTHEST_POINT_SAMPLE,
    "pca_normals": PCA_NORMALS,
}


def registered_ops(namespace="pcgeom") -> set:
    # Names with a leading underscore are test-only ops (e.g. _knn_cpu_plan), not part of the op set.
    names = {n.split("::", 1)[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
             if n.startswith(f"{namespace}::") and not n.split("::", 1)[1].startswith("_")}
    if namespace == "pcgeom":
        names |= set(SCHEMAS)
    return names


def test_every_registered_op_has_cases():
    ops = registered_ops()
    assert set(SCHEMAS) <= ops, (set(SCHEMAS) - ops, ops)
    missing = sorted(op for op in ops if op not in CASES)
    assert not missing, f"ops without bad-input cases in tests/test_raw_ops.py CASES: {missing}"
    thin = sorted(op for op in ops if sum(c.name != "valid" for c in CASES[op]) < 3
                  or not any(c.name == "valid" for c in CASES[op]))
    assert not thin, f"ops needing a 'valid' case and at least three bad ones: {thin}"
    stale = sorted(set(CASES) - ops)
    assert not stale, f"cases for ops that are not registered: {stale}"


def _params(devices):
    out = []
    for op, cases in CASES.items():
        for c in cases:
            for dev in devices:
                if dev in c.devices:
                    out.append(pytest.param(op, c, dev, id=f"{op}-{c.name.replace(' ', '_')}-{dev}"))
    return out


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _native(dev: str) -> bool:
    return dev in backend_info()["native_devices"]


def check_case(fn, op, case, args, *, clamps: bool):
    if case.name == "valid":
        out = fn(*args)
        if isinstance(out, torch.Tensor) and out.is_cuda:
            torch.cuda.synchronize()
        return
    if case.values and clamps:
        # CUDA kernels (and the emulator) do not read these values on the host:
        # the call must run to completion without touching memory out of bounds.
        fn(*args)
        if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            torch.cuda.synchronize()
        return
    with pytest.raises((RuntimeError, ValueError)) as info:
        fn(*args)
    msg = str(info.value)
    assert re.search(rf"{op}: .*{case.match}", msg, re.S), f"{op} / {case.name}: unexpected message:\n{msg}"
    assert "API call failed" not in msg, msg


@pytest.mark.parametrize("op,case,dev", _params(DEVICES))
def test_bad_input_is_an_error(op, case, dev):
    args = case.make(torch.device(dev))
    check_case(getattr(torch.ops.pcgeom, op), op, case, args, clamps=dev == "cuda" and _native(dev))


# --------------------------------------------------------------------------- CUDA kernels, emulated

EMU_LIB = os.environ.get("PCGEOM_CUDA_EMU_LIB")


@pytest.fixture(scope="module")
def emu():
    if not EMU_LIB:
        pytest.skip("set PCGEOM_CUDA_EMU_LIB to an emulator build (scripts/cuda_emu/build.py) to run the CUDA kernels' checks")
    if not pathlib.Path(EMU_LIB).exists():
        pytest.fail(f"PCGEOM_CUDA_EMU_LIB={EMU_LIB} does not exist")
    torch.ops.load_library(EMU_LIB)
    return torch.ops.pcgeom_emu


@pytest.mark.parametrize("op,case,dev", [p for p in _params(["cuda"])])
def test_bad_input_is_an_error_on_the_emulated_cuda_kernels(emu, op, case, dev):
    if "on the same" in case.match:
        pytest.skip("the emulator's device memory is host memory: no device mismatch to make")
    args = case.make(torch.device("cpu"))  # the emulator's "device" tensors are CPU tensors
    check_case(getattr(emu, op), op, case, args, clamps=True)
