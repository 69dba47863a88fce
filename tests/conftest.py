"""Shared test grid: devices (CUDA only when present), dtypes and input factories.

The benchmarks reuse the factories below, so tests and benchmarks see the same inputs.
"""

from __future__ import annotations

import os

import pytest
import torch

# Keep inductor's cache inside a temp folder, not the user's home.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".inductor-cache"))

# tests/upstream/pyg is driven by tests/test_pyg.py in its own interpreters (one per PyG version); the main run
# must not even import its conftest.py, which would shadow this module as `conftest` for `from conftest import ...`.
collect_ignore = ["upstream/pyg"]

# The op suite: run a second time on the pure-torch path (scripts/test.sh, -m ops).
OP_TEST_FILES = {
    "test_knn.py", "test_ball_query.py", "test_knn_gather.py", "test_farthest_point_sample.py",
    "test_compile.py", "test_backend.py", "test_cpu_paths.py", "test_cuda.py",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "ops: the op suite, run on both the native and the pure-torch path")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in OP_TEST_FILES:
            item.add_marker(pytest.mark.ops)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


def random_cloud(B, N, D=3, *, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(B, N, D, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)


def lattice_cloud(B, n_side, D=3, *, dtype=torch.float32, device="cpu", seed=0):
    """Points on an integer lattice, shuffled: many exact distance ties."""
    g = torch.Generator().manual_seed(seed)
    axes = [torch.arange(n_side, dtype=torch.float64)] * D
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, D)
    clouds = [grid[torch.randperm(grid.shape[0], generator=g)] for _ in range(B)]
    return torch.stack(clouds).to(device=device, dtype=dtype)


def surface_cloud(B, N, *, dtype=torch.float32, device="cpu", seed=0):
    """Points on a unit sphere surface: a 2-D manifold in 3-D, like real scans."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(B, N, 3, generator=g, dtype=torch.float64)
    return (v / v.norm(dim=-1, keepdim=True)).to(device=device, dtype=dtype)


def clustered_cloud(B, N, *, dtype=torch.float32, device="cpu", seed=0):
    """Clusters whose densities differ by ~100x."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.rand(B, 8, 3, generator=g, dtype=torch.float64)
    scales = torch.logspace(-3, -1, 8, dtype=torch.float64)
    which = torch.randint(0, 8, (B, N), generator=g)
    pts = centers.gather(1, which[..., None].expand(-1, -1, 3)) + torch.randn(B, N, 3, generator=g, dtype=torch.float64) * scales[which][..., None]
    return pts.to(device=device, dtype=dtype)


# --- tests/fuzz: the long differential fuzz run (docs/guides/robustness.md) ---
def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run tests/fuzz with the long hypothesis profile (same as PCGEOM_FUZZ_LONG=1)")


def pytest_sessionstart(session):
    # Before collection, so tests/fuzz/strategies.py sees it when it picks its profile at import.
    if session.config.getoption("--fuzz-long"):
        os.environ["PCGEOM_FUZZ_LONG"] = "1"
