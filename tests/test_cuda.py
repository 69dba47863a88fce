"""The CUDA kernels give the CPU kernels' answers, bit for bit.

Every GPU test compares the CUDA result with the CPU kernel on the same input
(identical indices and identical distance bits: both sum the same squares in
the same order with no FMA contraction) and, where cheap, with the pure-torch
reference.  Each kernel path is forced in turn through the environment
switches the CUDA host code reads on every call:

* ``PCGEOM_CUDA_KNN_PATH`` = ``brute`` | ``grid`` (``auto`` picks the grid for
  3-D clouds of >= 8192 points);
* ``PCGEOM_CUDA_FPS_PATH`` = ``single`` | ``multi`` (one block per cloud, or a
  cooperative multi-block launch).

The GPU tests skip without CUDA; the static checks at the top run everywhere.
"""

from __future__ import annotations

import os
import pathlib
import re

import pytest
import torch

import pcgeom
from conftest import clustered_cloud, lattice_cloud, random_cloud, surface_cloud
from pcgeom.ops.registry import OPS, SCHEMAS
from pcgeom.ops import reference

pytestmark = pytest.mark.ops  # the op suite: also run on the pure-torch path

# The source tree; CI runs a copy of tests/ elsewhere and points here explicitly.
ROOT = pathlib.Path(os.environ.get("PCGEOM_SOURCE_ROOT", pathlib.Path(__file__).resolve().parents[1]))
CSRC = ROOT / "csrc"

# Where each op's CUDA kernel is registered, from the op registry (pcgeom/ops/registry.py).
CUDA_SOURCES = {e.name: e.cuda_source.removeprefix("csrc/") for e in OPS}

needs_sources = pytest.mark.skipif(not CSRC.is_dir(), reason=f"source tree not found at {ROOT}")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# --------------------------------------------------------------------------- static


@needs_sources
def test_every_op_has_a_cuda_kernel_source():
    for op, rel in CUDA_SOURCES.items():
        assert (CSRC / rel).is_file(), f"registry entry {op!r}: no CUDA kernel source {rel}"
        text = (CSRC / rel).read_text()
        assert "PCGEOM_CUDA_KERNELS(m)" in text, f"{rel} does not register CUDA kernels"
        assert re.search(rf'm\.impl\("{op}"', text), f"{rel} does not register pcgeom::{op}"
    # The one registration macro (common/cuda_utils.cuh) opens the CUDA key of torch.ops.pcgeom on a real build.
    macro = (CSRC / "common" / "cuda_utils.cuh").read_text()
    assert re.search(r"#ifndef PCGEOM_CUDA_EMULATION\s*#define PCGEOM_CUDA_KERNELS\(m\) STABLE_TORCH_LIBRARY_IMPL\(pcgeom, CUDA, m\)",
                     macro), "PCGEOM_CUDA_KERNELS must register the CUDA key of the pcgeom library"
    # ...and no CUDA kernel is registered for an op the registry does not know.
    registered = {m for cu in CSRC.glob("*/*_cuda.cu") for m in re.findall(r'm\.impl\("(\w+)"', cu.read_text())}
    assert registered <= set(SCHEMAS), f"CUDA kernels for ops missing from pcgeom/ops/registry.py: {registered - set(SCHEMAS)}"


@needs_sources
def test_cuda_sources_stay_on_the_stable_abi():
    # An ATen/c10 header would tie the binary to one torch release (and with
    # TORCH_TARGET_VERSION set it does not even compile).
    banned = re.compile(r'#include\s*[<"](ATen/|c10/cuda/|torch/extension\.h|torch/torch\.h|pybind11)')
    files = sorted(CSRC.glob("*/*_cuda.cu")) + sorted(CSRC.glob("*/*.cuh"))
    assert files
    for f in files:
        assert not banned.search(f.read_text()), f"{f.relative_to(ROOT)} includes a non-stable header"


@needs_sources
def test_cuda_build_forbids_fma_contraction():
    # Fused multiply-adds would change the distance bits, and with them the
    # neighbour order on near-ties: the CUDA answers would stop matching the CPU.
    # The flags live in csrc/build_config.py, which setup.py loads.
    config = (CSRC / "build_config.py").read_text()
    assert '"--fmad=false"' in config and '"-ffp-contract=off"' in config
    assert "BUILD.nvcc_flags()" in (ROOT / "setup.py").read_text()
    for f in sorted(CSRC.glob("*/*_cuda.cu")):
        assert "fma(" not in f.read_text(), f"{f.name} calls fma explicitly"


# --------------------------------------------------------------------------- helpers


def assert_same(a: torch.Tensor, b: torch.Tensor, what: str = ""):
    """Identical values (NaN == NaN), dtype and shape."""
    a, b = a.detach().cpu(), b.detach().cpu()
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.fixture(params=["brute", "grid"])
def knn_path(request, monkeypatch):
    monkeypatch.setenv("PCGEOM_CUDA_KNN_PATH", request.param)
    return request.param


@pytest.fixture(params=["single", "multi"])
def fps_path(request, monkeypatch):
    monkeypatch.setenv("PCGEOM_CUDA_FPS_PATH", request.param)
    return request.param


def full_lengths(x):
    return torch.full((x.shape[0],), x.shape[1], dtype=torch.int64, device=x.device)


def knn_both(q, p, k, ql=None, pl=None, radius=None):
    """(cuda result, cpu result) of pcgeom.knn / ball_query."""
    out = []
    for dev in ("cuda", "cpu"):
        kw = dict(
            query_lengths=None if ql is None else ql.to(dev),
            points_lengths=None if pl is None else pl.to(dev),
        )
        if radius is None:
            out.append(pcgeom.knn(q.to(dev), p.to(dev), k, **kw))
        else:
            out.append(pcgeom.ball_query(q.to(dev), p.to(dev), radius, k, **kw))
    return out


def check_knn(q, p, k, ql=None, pl=None, radius=None, what=""):
    (gd, gi), (cd, ci) = knn_both(q, p, k, ql, pl, radius)
    assert gd.device.type == "cuda" and gi.dtype == torch.int64
    assert_same(gi, ci, f"{what} idx")
    assert_same(gd, cd, f"{what} dist2")
    return gd, gi


# --------------------------------------------------------------------------- knn


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k", [1, 5, 32, 33, 100])
def test_knn_random_ragged(knn_path, dtype, k):
    q = random_cloud(3, 37, dtype=dtype, seed=1)
    p = random_cloud(3, 300, dtype=dtype, seed=2)
    ql = torch.tensor([37, 0, 20])
    pl = torch.tensor([300, 150, 7])
    gd, gi = check_knn(q, p, k, ql, pl, what=f"{knn_path} {dtype} k={k}")
    if dtype == torch.float32:
        rd, ri = reference.knn_reference(q, p, k, ql, pl)
        assert_same(gi, ri, "vs reference idx")
        assert_same(gd, rd, "vs reference dist2")


@needs_cuda
@pytest.mark.parametrize("D", [1, 2, 3, 5, 16, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_knn_any_dimension(D, dtype):
    q = random_cloud(2, 50, D, dtype=dtype, seed=3)
    p = random_cloud(2, 400, D, dtype=dtype, seed=4)
    check_knn(q, p, 10, what=f"D={D}")
    check_knn(q, p, 40, what=f"D={D} heap")


@needs_cuda
def test_knn_huge_dimension_reads_points_from_global_memory():
    # 8192 float64 coordinates per point do not fit a shared-memory tile.
    q = random_cloud(1, 5, 8192, dtype=torch.float64, seed=5)
    p = random_cloud(1, 20, 8192, dtype=torch.float64, seed=6)
    check_knn(q, p, 3, what="D=8192")


@needs_cuda
@pytest.mark.parametrize("k", [4, 27, 60])
def test_knn_lattice_ties_go_to_the_lower_index(knn_path, k):
    # Integer lattice: masses of exactly equal distances, across cell borders.
    p = lattice_cloud(2, 7, seed=7)
    check_knn(p, p, k, what=f"lattice {knn_path} k={k}")
    q = p[:, :40] + 0.5  # queries at cell corners: 8 equidistant lattice points
    check_knn(q, p, k, what=f"lattice corners {knn_path} k={k}")


@needs_cuda
def test_knn_duplicates_and_k_larger_than_n(knn_path):
    base = random_cloud(2, 30, seed=8)
    p = torch.cat([base, base, base[:, :5]], dim=1)  # each point three or two times
    d, i = check_knn(p, p, 8, what="duplicates")
    assert (d[..., :2] == 0).all()
    d, i = check_knn(base, base, 45, pl=torch.tensor([30, 12]), what="k > N")
    assert (i[1, :, 12:] == -1).all() and torch.isinf(d[1, :, 12:]).all()


@needs_cuda
def test_knn_nan_and_inf_rows(knn_path):
    p = random_cloud(2, 200, seed=9)
    p[0, 3] = float("nan")
    p[0, 10, 1] = float("inf")
    p[1, 50, 2] = -float("inf")
    q = random_cloud(2, 40, seed=10)
    q[0, 0] = float("nan")
    q[1, 1, 0] = float("inf")
    for k in (5, 200, 201):
        d, i = check_knn(q, p, k, what=f"nan k={k}")
        assert ((i >= -1) & (i < 200)).all()


@needs_cuda
def test_knn_empty_inputs(knn_path):
    for B, M, N in [(0, 5, 5), (2, 0, 5), (2, 5, 0)]:
        q, p = torch.rand(B, M, 3), torch.rand(B, N, 3)
        check_knn(q, p, 4, what=f"empty B={B} M={M} N={N}")
    q = random_cloud(2, 10)
    check_knn(q, q, 3, ql=torch.tensor([0, 0]), pl=torch.tensor([0, 0]), what="zero lengths")


@needs_cuda
@pytest.mark.parametrize(
    "cloud", [random_cloud, surface_cloud, clustered_cloud], ids=["uniform", "surface", "clustered"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_knn_grid_path_on_large_clouds(cloud, dtype, monkeypatch):
    # auto takes the grid here (3-D, N >= 8192); it must agree with the brute
    # force and the CPU on uniform, surface-like and 100x-density-varying clouds.
    p = cloud(2, 20000, dtype=dtype, seed=11)
    q = torch.cat([p[:, :300], cloud(2, 300, dtype=dtype, seed=12) * 1.5 - 0.25], dim=1)
    pl = torch.tensor([20000, 12345])
    ql = torch.tensor([600, 450])
    gd, gi = check_knn(q, p, 16, ql, pl, what="grid k=16")
    monkeypatch.setenv("PCGEOM_CUDA_KNN_PATH", "brute")
    bd, bi = pcgeom.knn(q.cuda(), p.cuda(), 16, query_lengths=ql.cuda(), points_lengths=pl.cuda())
    assert_same(gi, bi, "grid vs brute idx")
    monkeypatch.setenv("PCGEOM_CUDA_KNN_PATH", "auto")
    check_knn(q, p, 50, ql, pl, what="grid heap k=50")


@needs_cuda
def test_knn_grid_degenerate_clouds(monkeypatch):
    monkeypatch.setenv("PCGEOM_CUDA_KNN_PATH", "grid")
    g = torch.Generator().manual_seed(13)
    flat = torch.rand(1, 3000, 3, generator=g)
    flat[..., 2] = 0.25  # a plane
    line = torch.zeros(1, 3000, 3)
    line[..., 0] = torch.rand(3000, generator=g)  # a segment
    same = torch.full((1, 3000, 3), 0.5)  # one point, 3000 times
    huge = torch.rand(1, 3000, 3, generator=g) * 1e30  # dist2 overflows float32
    tiny = torch.rand(1, 3000, 3, generator=g) * 1e-30  # dist2 underflows float32
    spread = torch.rand(1, 3000, 3, generator=g, dtype=torch.float64) * 1e200
    for name, p in [("plane", flat), ("line", line), ("same", same), ("huge", huge), ("tiny", tiny), ("1e200", spread)]:
        check_knn(p[:, :500], p, 9, what=name)
        check_knn(p[:, :200] * 3 - 1, p, 9, what=f"{name} outside")
    # So far from a tiny cloud that the query's cell coordinate overflows.
    speck = torch.rand(1, 3000, 3, generator=g, dtype=torch.float64) * 1e-200
    check_knn(torch.full((1, 4, 3), 1e150, dtype=torch.float64), speck, 9, what="far from a speck")


# --------------------------------------------------------------------------- ball_query


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("radius", [0.0, 0.1, 0.3, float("inf")])
def test_ball_query(knn_path, dtype, radius):
    p = random_cloud(2, 500, dtype=dtype, seed=14)
    q = random_cloud(2, 60, dtype=dtype, seed=15)
    q[:, :5] = p[:, :5]  # radius 0 still finds the point itself
    check_knn(q, p, 16, pl=torch.tensor([500, 321]), radius=radius, what=f"ball r={radius}")
    check_knn(q, p, 40, radius=radius, what=f"ball heap r={radius}")


@needs_cuda
def test_ball_query_lattice_boundary(knn_path):
    # Points exactly at the radius are inside (dist2 <= r^2), on every path.
    p = lattice_cloud(1, 8, seed=16)
    check_knn(p, p, 30, radius=1.0, what="lattice r=1")
    check_knn(p, p, 30, radius=2.0 ** 0.5, what="lattice r=sqrt2")


# --------------------------------------------------------------------------- gradients


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_knn_backward_is_deterministic_and_matches_cpu(dtype):
    q0 = random_cloud(3, 70, 4, dtype=dtype, seed=17)
    p0 = random_cloud(3, 90, 4, dtype=dtype, seed=18)
    p0[:, 60:] = p0[:, :30]  # duplicates: several slots point at the same point
    ql, pl = torch.tensor([70, 33, 0]), torch.tensor([90, 50, 5])
    w = torch.randn(3, 70, 12, dtype=dtype, generator=torch.Generator().manual_seed(0))
    w[:, :, 3] = 0  # zero upstream gradients are skipped, as on the CPU
    grads = {}
    for dev in ("cuda", "cpu", "cuda"):
        q = q0.to(dev).requires_grad_()
        p = p0.to(dev).requires_grad_()
        d, _ = pcgeom.knn(q, p, 12, query_lengths=ql.to(dev), points_lengths=pl.to(dev))
        torch.where(torch.isinf(d), 0, d * w.to(dev)).sum().backward()
        grads.setdefault(dev, []).append((q.grad.cpu(), p.grad.cpu()))
    (gq, gp), (gq2, gp2) = grads["cuda"]
    (cq, cp), = grads["cpu"]
    assert_same(gq, gq2, "repeat grad query")
    assert_same(gp, gp2, "repeat grad points")
    assert_same(gq, cq, "grad query vs cpu")
    assert_same(gp, cp, "grad points vs cpu")


@needs_cuda
def test_knn_gradcheck_float64():
    q = random_cloud(2, 6, dtype=torch.float64, device="cuda", seed=19).requires_grad_()
    p = random_cloud(2, 9, dtype=torch.float64, device="cuda", seed=20).requires_grad_()
    torch.autograd.gradcheck(lambda a, b: pcgeom.knn(a, b, 4).dist2, (q, p))
    torch.autograd.gradcheck(lambda a, b: pcgeom.ball_query(a, b, 0.6, 4).dist2, (q, p))


# --------------------------------------------------------------------------- knn_gather


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_knn_gather_and_backward_match_cpu(dtype):
    g = torch.Generator().manual_seed(21)
    x0 = torch.randn(3, 40, 7, generator=g).to(dtype)
    idx = torch.randint(-1, 40, (3, 25, 9), generator=g)
    idx[1] = -1
    idx[2, :, :4] = 5  # many slots on one point
    grad = torch.randn(3, 25, 9, 7, generator=g).to(dtype)
    outs = {}
    for dev in ("cuda", "cpu"):
        x = x0.to(dev).requires_grad_()
        y = pcgeom.knn_gather(x, idx.to(dev))
        y.backward(grad.to(dev))
        outs[dev] = (y, x.grad)
    assert_same(outs["cuda"][0], outs["cpu"][0], "gather")
    assert_same(outs["cuda"][1], outs["cpu"][1], "gather backward")
    assert (outs["cuda"][0][idx == -1] == 0).all()
    ref = reference.knn_gather_reference(x0, idx)
    assert_same(outs["cuda"][0], ref, "gather vs reference")


@needs_cuda
def test_knn_gather_empty():
    for B, N, M, K, C in [(0, 4, 2, 2, 3), (2, 0, 3, 2, 3), (2, 4, 0, 2, 3), (2, 4, 3, 0, 3), (2, 4, 3, 2, 0)]:
        x = torch.randn(B, N, C, device="cuda", requires_grad=True)
        idx = torch.full((B, M, K), -1, dtype=torch.int64, device="cuda")
        y = pcgeom.knn_gather(x, idx)
        assert y.shape == (B, M, K, C) and (y == 0).all()
        y.sum().backward()
        assert x.grad.shape == x.shape and (x.grad == 0).all()


# --------------------------------------------------------------------------- farthest_point_sample


def fps_both(p, S, lengths=None, start=0):
    out = []
    for dev in ("cuda", "cpu"):
        st = start.to(dev) if isinstance(start, torch.Tensor) else start
        ln = None if lengths is None else lengths.to(dev)
        out.append(pcgeom.farthest_point_sample(p.to(dev), S, lengths=ln, start_index=st))
    assert_same(out[0], out[1], "fps cuda vs cpu")
    return out[0]


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_fps_matches_cpu(fps_path, dtype):
    p = random_cloud(3, 500, dtype=dtype, seed=22)
    lengths = torch.tensor([500, 123, 1])
    start = torch.tensor([7, 122, 0])
    s = fps_both(p, 64, lengths, start)
    assert (s[1, 64:] == -1).all() and (s[2, 1:] == -1).all()
    fps_both(p, 600, lengths, start)  # more samples than points: -1 past lengths


@needs_cuda
def test_fps_ties_duplicates_and_nan(fps_path):
    lat = lattice_cloud(2, 6, seed=23)  # all ties: lowest index wins
    s = fps_both(lat, 216)
    assert all(len(set(r.tolist())) == 216 for r in s)  # never repeats
    dup = random_cloud(1, 50, seed=24).repeat(1, 3, 1)
    fps_both(dup, 150)
    nan = random_cloud(1, 100, seed=25)
    nan[0, 10] = float("nan")
    nan[0, 20, 1] = float("inf")
    s = fps_both(nan, 100)
    assert s[0, 1] == 20  # an inf coordinate is infinitely far: taken first
    assert s[0, -1] == 10  # a NaN point ranks below every number: taken last


@needs_cuda
@pytest.mark.parametrize("N", [1, 31, 32, 33, 1025, 70000])
def test_fps_sizes(fps_path, N):
    p = surface_cloud(2, N, seed=26)
    fps_both(p, min(N, 200), start=torch.tensor([0, N - 1]))


@needs_cuda
def test_fps_auto_paths_on_large_clouds(monkeypatch):
    monkeypatch.delenv("PCGEOM_CUDA_FPS_PATH", raising=False)
    p = clustered_cloud(1, 200000, seed=27)  # auto: multi-block
    fps_both(p, 64)
    p = clustered_cloud(8, 9000, seed=28, dtype=torch.float64)  # auto: one block per cloud
    fps_both(p, 128, lengths=torch.tensor([9000, 8999, 1, 0, 4096, 9000, 100, 5000]))


# --------------------------------------------------------------------------- plumbing


@needs_cuda
def test_runs_on_the_current_stream_and_device():
    p = random_cloud(2, 3000, device="cuda", seed=29)
    want_d, want_i = pcgeom.knn(p, p, 8)
    want_s = pcgeom.farthest_point_sample(p, 100)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        d, i = pcgeom.knn(p, p, 8)
        s = pcgeom.farthest_point_sample(p, 100)
    torch.cuda.current_stream().wait_stream(side)
    assert_same(i, want_i, "side stream idx")
    assert_same(d, want_d, "side stream dist2")
    assert_same(s, want_s, "side stream fps")
    if torch.cuda.device_count() > 1:
        p1 = p.to("cuda:1")
        d1, i1 = pcgeom.knn(p1, p1, 8)
        assert d1.device == p1.device
        assert_same(i1, want_i, "cuda:1")


@needs_cuda
def test_direct_op_calls_reject_mixed_devices():
    q = torch.rand(2, 5, 3, device="cuda")
    with pytest.raises(RuntimeError, match="same CUDA device"):
        torch.ops.pcgeom.knn(q, q, 2, torch.tensor([5, 5]), torch.tensor([5, 5]))
    with pytest.raises(RuntimeError, match="same CUDA device"):
        torch.ops.pcgeom.farthest_point_sample(q, 2, torch.tensor([5, 5]), torch.tensor([0, 0]))


@needs_cuda
def test_direct_op_calls_with_bad_values_stay_in_bounds():
    # The wrappers reject these; a direct call must still never read out of
    # bounds (lengths and start indices are clamped on the device).
    q = random_cloud(2, 6, device="cuda")
    d, i = torch.ops.pcgeom.knn(q, q, 3, torch.tensor([9, -2], device="cuda"), torch.tensor([99, 6], device="cuda"))
    torch.cuda.synchronize()
    assert ((i >= -1) & (i < 6)).all()
    s = torch.ops.pcgeom.farthest_point_sample(q, 4, torch.tensor([6, 6], device="cuda"), torch.tensor([50, -3], device="cuda"))
    torch.cuda.synchronize()
    assert ((s >= 0) & (s < 6)).all()
    y = torch.ops.pcgeom.knn_gather(q, torch.tensor([[[7, -5]]] * 2, device="cuda"))
    torch.cuda.synchronize()
    assert (y == 0).all()


@needs_cuda
def test_opcheck():
    q = random_cloud(2, 20, device="cuda", seed=30)
    ln = full_lengths(q)
    torch.library.opcheck(torch.ops.pcgeom.knn, (q, q, 4, ln, ln))
    torch.library.opcheck(torch.ops.pcgeom.farthest_point_sample, (q, 5, ln, torch.zeros_like(ln)))
    x = torch.randn(2, 20, 6, device="cuda", requires_grad=True)
    torch.library.opcheck(torch.ops.pcgeom.knn_gather, (x, torch.randint(-1, 20, (2, 7, 3), device="cuda")))


@pytest.mark.slow
@needs_cuda
def test_torch_compile_fullgraph():
    def group(p):
        centers = pcgeom.farthest_point_sample(p, 16)
        c = pcgeom.knn_gather(p, centers[..., None])[:, :, 0]
        d, i = pcgeom.knn(c, p, 8)
        return pcgeom.knn_gather(p, i) - c[:, :, None], d

    p = random_cloud(2, 256, device="cuda", seed=31).requires_grad_()
    eager = group(p)
    compiled = torch.compile(group, fullgraph=True)(p)
    assert_same(compiled[0], eager[0], "compiled groups")
    assert_same(compiled[1], eager[1], "compiled dist2")
    compiled[0].sum().backward()
    assert p.grad is not None and torch.isfinite(p.grad).all()
