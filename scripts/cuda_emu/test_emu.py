"""Runs pcgeom's CUDA kernels on the CPU emulator and compares them with the CPU kernels.

Not part of the default test suite (it needs a ~1 min C++ build and is slow:
one OS thread per CUDA thread).  Run it after touching a ``*_cuda.cu`` file on
a machine without a GPU:

    python scripts/cuda_emu/build.py [--asan]
    python -m pytest -q scripts/cuda_emu/test_emu.py          # ~6 min on 2 cores
    python -m pytest -q scripts/cuda_emu/test_emu.py -k "not multi or quick"   # ~20 s (CI)
    # memcheck-like: out-of-bounds accesses abort with an AddressSanitizer report
    PCGEOM_CUDA_EMU_LIB=build/cuda_emu/libpcgeom_cuda_emu_asan.so ASAN_OPTIONS=detect_leaks=0 \\
        LD_PRELOAD=$(gcc -print-file-name=libasan.so) python -m pytest -q scripts/cuda_emu/test_emu.py

``torch.ops.pcgeom_emu.*`` are the CUDA kernels (same source, emulated);
``torch.ops.pcgeom.*`` on CPU tensors are the CPU kernels.  Answers must be
identical, bit for bit, on every kernel path (forced with the same environment
switches as tests/test_cuda.py).
"""

from __future__ import annotations

import os
import pathlib
import sys

import pytest
import torch

import pcgeom  # noqa: F401  (loads the CPU kernels)

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIB = pathlib.Path(os.environ.get("PCGEOM_CUDA_EMU_LIB", ROOT / "build" / "cuda_emu" / "libpcgeom_cuda_emu.so"))


@pytest.fixture(scope="module", autouse=True)
def emulated_kernels():
    if not LIB.exists():
        sys.path.insert(0, str(pathlib.Path(__file__).parent))
        import build

        build.main([])
    torch.ops.load_library(str(LIB))


E = lambda: torch.ops.pcgeom_emu  # noqa: E731
C = lambda: torch.ops.pcgeom  # noqa: E731


def same(a, b, what=""):
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def lattice(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    ax = torch.arange(n, dtype=torch.float32)
    grid = torch.stack(torch.meshgrid(ax, ax, ax, indexing="ij"), -1).reshape(-1, 3)
    return grid[torch.randperm(grid.shape[0], generator=g)][None]


def lens(x, *v):
    return torch.tensor(v if v else [x.shape[1]] * x.shape[0], dtype=torch.int64)


def check_knn(q, p, k, ql=None, pl=None, radius=None, what=""):
    ql = lens(q) if ql is None else ql
    pl = lens(p) if pl is None else pl
    if radius is None:
        a, b = E().knn(q, p, k, ql, pl), C().knn(q, p, k, ql, pl)
    else:
        a, b = E().ball_query(q, p, radius, k, ql, pl), C().ball_query(q, p, radius, k, ql, pl)
    same(a[1], b[1], f"{what} idx")
    same(a[0], b[0], f"{what} dist2")


@pytest.fixture(params=["brute", "grid"])
def knn_path(request, monkeypatch):
    monkeypatch.setenv("PCGEOM_CUDA_KNN_PATH", request.param)
    return request.param


@pytest.fixture(params=["single", "multi"])
def fps_path(request, monkeypatch):
    monkeypatch.setenv("PCGEOM_CUDA_FPS_PATH", request.param)
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k", [1, 5, 33])
def test_knn_ragged(knn_path, dtype, k):
    q, p = rand(3, 37, 3, dtype=dtype, seed=1), rand(3, 300, 3, dtype=dtype, seed=2)
    check_knn(q, p, k, lens(q, 37, 0, 20), lens(p, 300, 150, 7), what=f"{knn_path} {dtype} k={k}")


@pytest.mark.parametrize("D", [1, 2, 5, 64])
def test_knn_dimensions(D):
    q, p = rand(2, 20, D, seed=3), rand(2, 150, D, seed=4)
    check_knn(q, p, 6, what=f"D={D}")
    check_knn(q, p, 40, what=f"D={D} heap")


def test_knn_huge_dimension():
    q, p = rand(1, 3, 8192, dtype=torch.float64, seed=5), rand(1, 9, 8192, dtype=torch.float64, seed=6)
    check_knn(q, p, 4, what="D=8192")


@pytest.mark.parametrize("k", [4, 27, 60])
def test_knn_lattice_ties(knn_path, k):
    p = lattice(6)
    check_knn(p, p, k, what=f"lattice k={k}")
    check_knn(p[:, :30] + 0.5, p, k, what=f"lattice corners k={k}")


def test_knn_nan_inf(knn_path):
    p = rand(2, 120, 3, seed=9)
    p[0, 3] = float("nan")
    p[0, 10, 1] = float("inf")
    p[1, 50, 2] = -float("inf")
    q = rand(2, 20, 3, seed=10)
    q[0, 0] = float("nan")
    q[1, 1, 0] = float("inf")
    for k in (5, 40, 121):
        check_knn(q, p, k, what=f"nan k={k}")


def test_knn_empty(knn_path):
    for B, M, N in [(0, 5, 5), (2, 0, 5), (2, 5, 0)]:
        check_knn(torch.rand(B, M, 3), torch.rand(B, N, 3), 4, what=f"B={B} M={M} N={N}")
    q = rand(2, 10, 3)
    check_knn(q, q, 3, lens(q, 0, 0), lens(q, 0, 0), what="zero lengths")


@pytest.mark.parametrize("kind", ["uniform", "surface", "clustered"])
def test_knn_grid_auto_on_a_large_cloud(kind, monkeypatch):
    g = torch.Generator().manual_seed(11)
    if kind == "uniform":
        p = torch.rand(1, 9000, 3, generator=g)
    elif kind == "surface":
        v = torch.randn(1, 9000, 3, generator=g)
        p = v / v.norm(dim=-1, keepdim=True)
    else:
        c = torch.rand(8, 3, generator=g)
        w = torch.randint(0, 8, (9000,), generator=g)
        p = (c[w] + torch.randn(9000, 3, generator=g) * torch.logspace(-3, -1, 8)[w, None])[None]
    q = torch.cat([p[:, :150], torch.rand(1, 150, 3, generator=g) * 1.5 - 0.25], 1)
    monkeypatch.delenv("PCGEOM_CUDA_KNN_PATH", raising=False)
    check_knn(q, p, 16, what=f"{kind} grid k=16")
    check_knn(q, p, 40, lens(q, 200), lens(p, 7000), what=f"{kind} grid heap k=40")


def test_knn_grid_degenerate(monkeypatch):
    monkeypatch.setenv("PCGEOM_CUDA_KNN_PATH", "grid")
    g = torch.Generator().manual_seed(13)
    flat = torch.rand(1, 800, 3, generator=g)
    flat[..., 2] = 0.25
    line = torch.zeros(1, 800, 3)
    line[..., 0] = torch.rand(800, generator=g)
    cases = {
        "plane": flat, "line": line, "same": torch.full((1, 800, 3), 0.5),
        "huge": torch.rand(1, 800, 3, generator=g) * 1e30, "tiny": torch.rand(1, 800, 3, generator=g) * 1e-30,
        "1e200": torch.rand(1, 800, 3, generator=g, dtype=torch.float64) * 1e200,
    }
    for name, p in cases.items():
        check_knn(p[:, :60], p, 9, what=name)
        check_knn(p[:, :60] * 3 - 1, p, 9, what=f"{name} outside")
    # A query so far from a tiny cloud that its cell coordinate overflows
    # (finite distances, infinite cell units): must not stop after one shell.
    speck = torch.rand(1, 800, 3, generator=g, dtype=torch.float64) * 1e-200
    check_knn(torch.full((1, 4, 3), 1e150, dtype=torch.float64), speck, 9, what="far from a speck")


@pytest.mark.parametrize("radius", [0.0, 0.15, 1e9])
def test_ball_query(knn_path, radius):
    p, q = rand(2, 300, 3, seed=14), rand(2, 30, 3, seed=15)
    q[:, :3] = p[:, :3]
    check_knn(q, p, 16, pl=lens(p, 300, 100), radius=radius, what=f"ball r={radius}")
    check_knn(q, p, 40, radius=radius, what=f"ball heap r={radius}")
    lat = lattice(5)
    check_knn(lat, lat, 30, radius=1.0, what="lattice r=1")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("radius", [0.0, 0.15, 1e9])
def test_ball_query_index_order(dtype, radius):
    p, q = rand(2, 300, 3, dtype=dtype, seed=24), rand(2, 30, 3, dtype=dtype, seed=25)
    q[:, :3] = p[:, :3]
    ql, pl = lens(q, 30, 7), lens(p, 300, 100)
    for k in (1, 16, 64):
        a = E().ball_query(q, p, radius, k, ql, pl, True)
        b = C().ball_query(q, p, radius, k, ql, pl, True)
        same(a[1], b[1], f"index-order idx r={radius} k={k}")
        same(a[0], b[0], f"index-order dist2 r={radius} k={k}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_knn_backward(dtype):
    q, p = rand(3, 30, 4, dtype=dtype, seed=17), rand(3, 40, 4, dtype=dtype, seed=18)
    ql, pl = lens(q, 30, 11, 0), lens(p, 40, 20, 3)
    _, idx = C().knn(q, p, 7, ql, pl)
    g = torch.randn(3, 30, 7, generator=torch.Generator().manual_seed(0)).to(dtype)
    g[:, :, 2] = 0
    a, b = E().knn_backward(g, q, p, idx), C().knn_backward(g, q, p, idx)
    same(a[0], b[0], "grad query")
    same(a[1], b[1], "grad points")
    e = torch.empty(3, 30, 0, dtype=torch.int64)
    a, b = E().knn_backward(g[..., :0], q, p, e), C().knn_backward(g[..., :0], q, p, e)
    same(a[1], b[1], "grad points, k=0")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_knn_gather(dtype):
    g = torch.Generator().manual_seed(21)
    x = torch.randn(3, 40, 7, generator=g).to(dtype)
    idx = torch.randint(-1, 40, (3, 25, 9), generator=g)
    idx[1] = -1
    idx[2, :, :4] = 5
    grad = torch.randn(3, 25, 9, 7, generator=g).to(dtype)
    same(E().knn_gather(x, idx), C().knn_gather(x, idx), "gather")
    same(E().knn_gather_backward(grad, idx, 40), C().knn_gather_backward(grad, idx, 40), "gather backward")
    same(E().knn_gather_backward(grad[:, :0], idx[:, :0], 40), C().knn_gather_backward(grad[:, :0], idx[:, :0], 40), "empty")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_fps(fps_path, dtype):
    p = rand(3, 90, 3, dtype=dtype, seed=22)
    L, st = lens(p, 90, 41, 1), torch.tensor([7, 40, 0])
    same(E().farthest_point_sample(p, 24, L, st), C().farthest_point_sample(p, 24, L, st), "fps")
    same(E().farthest_point_sample(p, 100, L, st), C().farthest_point_sample(p, 100, L, st), "fps S > N")


def test_fps_multi_block_quick(monkeypatch):
    # The cooperative multi-block kernel, small enough for every CI run (the
    # emulator runs all its blocks' threads at once): 2 blocks share a cloud.
    monkeypatch.setenv("PCGEOM_CUDA_FPS_PATH", "multi")
    p = rand(1, 40, 3, seed=24)
    L, st = lens(p), torch.tensor([5])
    same(E().farthest_point_sample(p, 10, L, st), C().farthest_point_sample(p, 10, L, st), "multi quick")


@pytest.mark.parametrize("optin", ["600", "1000", "2000000"])
def test_fps_shared_memory_modes(monkeypatch, optin):
    # The emulated device's shared-memory limit decides where mind and the
    # points live: global memory, mind only, or both in shared memory.
    monkeypatch.setenv("PCGEOM_EMU_SMEM_OPTIN", optin)
    monkeypatch.setenv("PCGEOM_CUDA_FPS_PATH", "single")
    p = rand(2, 100, 3, seed=23)
    L, st = lens(p), torch.tensor([0, 99])
    same(E().farthest_point_sample(p, 30, L, st), C().farthest_point_sample(p, 30, L, st), f"optin={optin}")


def test_fps_ties_and_nan(fps_path):
    lat = lattice(4)
    L, st = lens(lat), torch.zeros(1, dtype=torch.int64)
    same(E().farthest_point_sample(lat, 64, L, st), C().farthest_point_sample(lat, 64, L, st), "lattice")
    p = rand(1, 60, 3, seed=25)
    p[0, 10] = float("nan")
    p[0, 20, 1] = float("inf")
    same(E().farthest_point_sample(p, 60, lens(p), st), C().farthest_point_sample(p, 60, lens(p), st), "nan")


def test_bad_values_are_clamped_not_out_of_bounds():
    q = rand(2, 6, 3)
    d, i = E().knn(q, q, 3, torch.tensor([9, -2]), torch.tensor([99, 6]))
    assert ((i >= -1) & (i < 6)).all()
    s = E().farthest_point_sample(q, 4, torch.tensor([6, 6]), torch.tensor([50, -3]))
    assert ((s >= 0) & (s < 6)).all()
    y = E().knn_gather(q, torch.tensor([[[7, -5]]] * 2))
    assert (y == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_pca_normals(dtype):
    g = torch.Generator().manual_seed(26)
    p = torch.rand(2, 60, 3, generator=g, dtype=torch.float64)
    p[0, :, 2] = 0.5 * p[0, :, 0]  # a plane
    p[1, 10:20] = p[1, 9]  # duplicates
    p[1, 30] = float("nan")
    p[1, 31, 0] = float("inf")
    p = p.to(dtype)
    idx = C().knn(p, p, 8, lens(p), lens(p, 60, 45))[1]
    idx[0, :4, 3:] = -1
    idx[1, 50] = 55  # a single position
    a, b = E().pca_normals(p, idx), C().pca_normals(p, idx)
    same(a[0], b[0], f"pca normals {dtype}")
    same(a[1], b[1], f"pca curvature {dtype}")
    e = torch.empty(2, 0, 8, dtype=torch.int64)
    same(E().pca_normals(p, e)[0], C().pca_normals(p, e)[0], "empty")
    # Out-of-range indices from a direct call are left out, never read.
    y = E().pca_normals(p, torch.full((2, 1, 3), 99))
    assert torch.equal(y[0].float(), torch.tensor([0.0, 0.0, 1.0]).expand(2, 1, 3))


# --------------------------------------------------------------------------- index math

def _as_padding(idx, n):
    return torch.where((idx >= 0) & (idx < n), idx, torch.full_like(idx, -1))


def test_out_of_range_indices_are_padding_in_the_cuda_kernels():
    # The CUDA kernels do not read index values on the host (no sync): any
    # index outside [0, N) must act exactly like the padding -1, in the gather,
    # in its backward and in knn's backward -- never an out-of-bounds access
    # (run under --asan to see one).
    g = torch.Generator().manual_seed(3)
    x = rand(2, 7, 5, seed=30)
    idx = torch.randint(-1, 7, (2, 6, 4), generator=g)
    idx.view(-1)[[0, 5, 17, 40, 47]] = torch.tensor([7, 2**40, -2, -(2**40), 9])
    pad = _as_padding(idx, 7)
    same(E().knn_gather(x, idx), C().knn_gather(x, pad), "gather, bad indices")
    grad = rand(2, 6, 4, 5, seed=31)
    same(E().knn_gather_backward(grad, idx, 7), C().knn_gather_backward(grad, pad, 7), "gather backward")
    q, p = rand(2, 6, 3, seed=32), rand(2, 7, 3, seed=33)
    gd = rand(2, 6, 4, seed=34)
    for a, b in zip(E().knn_backward(gd, q, p, idx), C().knn_backward(gd, q, p, pad)):
        same(a, b, "knn backward, bad indices")


def test_fps_clamps_lengths_and_starts_like_the_wrapper_would_reject():
    p = rand(3, 9, 3, seed=35)
    got = E().farthest_point_sample(p, 5, torch.tensor([12, -4, 9]), torch.tensor([2, 0, 40]))
    want = C().farthest_point_sample(p, 5, torch.tensor([9, 0, 9]), torch.tensor([2, 0, 8]))
    same(got, want, "clamped lengths / start")


CUDA_SOURCES = sorted((ROOT / "csrc").glob("*/*.cu")) + sorted((ROOT / "csrc").glob("*/*.cuh"))


def test_cuda_thread_indices_are_64_bit():
    """Static audit: every global thread index (blockIdx * blockDim + threadIdx)
    is formed in int64, and no 32-bit variable holds a block/grid product, so a
    grid-stride loop over more than 2**31 elements cannot wrap."""
    import re

    bad = []
    for path in CUDA_SOURCES:
        for no, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//")[0]
            # a product with blockIdx/gridDim must have an int64 operand
            for m in re.finditer(r"(blockIdx|gridDim)\.\w\s*\*\s*(\w+)", code):
                if not re.match(r"int64_t|kThreads|per_cloud", m.group(2)) and "int64_t(" not in code[: m.start()]:
                    bad.append(f"{path.name}:{no}: {line.strip()}")
            if re.search(r"\b(int|int32_t|unsigned|unsigned int)\s+\w+\s*=\s*[^;]*(blockIdx|gridDim)\.\w\s*\*", code):
                bad.append(f"{path.name}:{no}: {line.strip()}")
    assert not bad, "32-bit thread-index arithmetic:\n" + "\n".join(bad)
