"""What the benchmark runs on: the workloads, the datasets and the input factories.

The workloads of the project's benchmark plan (``WORKLOADS``: op, batch, sizes,
k or S), the datasets they run on (``DATASETS``: uniform cube, sphere surface,
clustered blobs, the bundled scans), which (workload, method) pairs are not
run (``SKIPS``) and the ratio each workload aims for (``TARGETS``); then the
factories that make the inputs, all from fixed seeds so every run (and every
peer) sees the same points.

The last four factories (``random_cloud``, ``lattice_cloud``, ``surface_cloud``,
``clustered_cloud``) are also the test suite's: ``tests/conftest.py`` imports
them from here, so the tests and the benchmark scripts share one set of inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

import pcgeom

WORKLOADS = {
    # name: op, batch B, points N, queries (None: self query), D, k or S (and G for group)
    "knn-mae": dict(op="knn", B=32, N=1024, M=64, D=3, k=32, what="Point-MAE grouping: 64 centres per cloud query their cloud"),
    "knn-self-8k": dict(op="knn", B=8, N=8192, M=None, D=3, k=16, what="every point queries its own cloud (normals, DGCNN graphs)"),
    "knn-scene": dict(op="knn", B=1, N=200_000, M=None, D=3, k=16, what="a scene-size cloud, self query"),
    "knn-feat": dict(op="knn", B=4, N=4096, M=None, D=64, k=20, what="feature-space KNN (DGCNN dynamic graph), self query"),
    "fps-mae": dict(op="fps", B=32, N=1024, D=3, S=64, what="Point-MAE centres"),
    "fps-8k": dict(op="fps", B=8, N=8192, D=3, S=1024, what="PointNet++-style downsampling"),
    "fps-scene": dict(op="fps", B=1, N=200_000, D=3, S=4096, what="scene downsampling"),
    "group-mae": dict(op="group", B=128, N=1024, D=3, G=64, k=32, what="group_patches end to end, Point-MAE pretraining batch"),
}
DATASETS = ("cube", "sphere", "clustered", "scan")

# (workload, method) -> why it is not run.  Figures: the project's peer table.
SKIPS = {
    ("knn-scene", "torch"): "brute force, about 2 minutes per call",
    ("knn-scene", "faiss"): "brute force (IndexFlatL2), about 30 s per call",
    ("fps-scene", "torch"): "pure-torch loop, about 7 s per call",
}

# Targets of the project (ratio pcgeom / best peer).
TARGETS = {
    "knn-mae": ("pykdtree", 0.5),
    "knn-self-8k": ("pykdtree", 0.5),
    "knn-scene": ("pykdtree", 0.5),
    "knn-feat": ("faiss", 0.8),
    "fps-mae": ("open3d", 0.5),
    "fps-8k": ("fpsample-kdline", 1.0),
    "fps-scene": ("fpsample-kdline", 1.0),
    "group-mae": ("torch", 0.1),  # >= 10x the pure-torch path
}

# Why pcgeom can fall short of a target (printed for the missed ones).
SCANS = ("bunny", "armadillo", "chinese_dragon", "kitten")


def _surface_cloud(N: int, seed: int) -> torch.Tensor:
    """N points on a real scan (cycling through the bundled scans by seed).

    Scans with fewer than N points are densified on their own surface: extra
    points are copies of random scan points moved within the tangent plane
    (normals from the scan) by about one point spacing, so the cloud stays a
    2-D manifold with the scan's shape and density variations.
    """
    name = SCANS[seed % len(SCANS)]
    pts, nrm = pcgeom.data.load(name, return_normals=True)
    n0 = pts.shape[0]
    g = torch.Generator().manual_seed(1000 + seed)
    if N <= n0:
        keep = torch.randperm(n0, generator=g)[:N].sort().values
        return pts[keep].contiguous()
    extra = N - n0
    base = torch.randint(0, n0, (extra,), generator=g)
    spacing = (1.0 / n0) ** 0.5  # longest side is 1: rough surface spacing
    step = torch.randn(extra, 3, generator=g) * spacing * 0.5
    n = nrm[base]
    step = step - (step * n).sum(-1, keepdim=True) * n  # tangent plane
    out = torch.cat([pts, pts[base] + step])
    return out[torch.randperm(N, generator=g)].contiguous()


def _features(xyz: torch.Tensor, D: int) -> torch.Tensor:
    """D-dimensional features of a surface: a fixed random projection of a
    multi-frequency positional encoding (intrinsic dimension 2, like features
    of a network's early layers on a scan)."""
    g = torch.Generator().manual_seed(7)
    freqs = 2.0 ** torch.arange(8, dtype=torch.float32)
    ang = xyz[:, :, None] * freqs * math.pi  # (N, 3, 8)
    enc = torch.cat([ang.sin(), ang.cos()], -1).reshape(xyz.shape[0], -1)  # (N, 48)
    proj = torch.randn(enc.shape[1], D, generator=g) / math.sqrt(enc.shape[1])
    return (enc @ proj).contiguous()


def _clustered(B: int, N: int, D: int, g: torch.Generator) -> torch.Tensor:
    """Clustered clouds with 100x density differences: 32 Gaussian blobs of
    one width (0.03) per cloud, centres uniform in the unit cube, holding
    shares of the points log-spaced over a factor of 100 (so the densest blob
    is 100x as dense as the sparsest, in any D)."""
    n_c = 32
    centres = torch.rand(B, n_c, D, generator=g)
    share = torch.logspace(0, 2, n_c)
    which = torch.multinomial(share.expand(B, n_c), N, replacement=True, generator=g)
    noise = torch.randn(B, N, D, generator=g) * 0.03
    return (torch.gather(centres, 1, which[..., None].expand(B, N, D)) + noise).contiguous()


def make_points(dataset: str, B: int, N: int, D: int) -> torch.Tensor:
    """(B, N, D) float32 points of one of ``DATASETS``, from fixed seeds."""
    if dataset in ("cube", "sphere", "clustered"):
        g = torch.Generator().manual_seed(0)
        if dataset == "cube":
            return torch.rand(B, N, D, generator=g)
        if dataset == "sphere":  # uniform on the unit sphere's surface (a 2-D manifold for D = 3)
            x = torch.randn(B, N, D, generator=g)
            return (x / x.norm(dim=-1, keepdim=True)).contiguous()
        return _clustered(B, N, D, g)
    clouds = []
    for b in range(B):
        xyz = _surface_cloud(N, b)
        clouds.append(xyz if D == 3 else _features(xyz, D))
    return torch.stack(clouds).contiguous()


@dataclass
class Inputs:
    """One workload's inputs on one dataset, as torch tensors and as the numpy arrays the peers take."""

    workload: str
    dataset: str
    spec: dict
    points: torch.Tensor
    query: torch.Tensor | None = None  # None: self query
    np_points: np.ndarray | None = None
    np_query: np.ndarray | None = None


def make_inputs(workload: str, dataset: str, small: bool = False) -> Inputs:
    """The inputs of `workload` on `dataset`: points (B, N, D), and for a KNN workload
    with M queries a fixed subset of the cloud's points as queries (B, M, D)."""
    spec = dict(WORKLOADS[workload])
    if small:  # the memory probe's warm-up copy (256 points: fpsample's tree needs 2**7)
        spec["N"] = 256
        spec["M"] = None if spec.get("M") is None else 16
        spec["k"] = min(spec.get("k", 1), 8)
        spec["S"] = min(spec.get("S", 1), 8)
        spec["G"] = min(spec.get("G", 1), 8)
    pts = make_points(dataset, spec["B"], spec["N"], spec["D"])
    inp = Inputs(workload, dataset, spec, pts)
    if spec["op"] == "knn" and spec.get("M") is not None:
        # Query points are cloud points (FPS centres in Point-MAE): a fixed subset.
        g = torch.Generator().manual_seed(1)
        sel = torch.randperm(spec["N"], generator=g)[: spec["M"]]
        inp.query = pts[:, sel].contiguous()
    inp.np_points = pts.numpy()
    inp.np_query = None if inp.query is None else inp.query.numpy()
    return inp



# ---------------------------------------------------------------------------
# The test suite's cloud factories (tests/conftest.py re-exports them): drawn in
# float64 from a fixed seed, then cast, so every dtype sees the same points.


def random_cloud(B, N, D=3, *, dtype=torch.float32, device="cpu", seed=0):
    """(B, N, D) points uniform in the unit cube."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(B, N, D, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)


def lattice_cloud(B, n_side, D=3, *, dtype=torch.float32, device="cpu", seed=0):
    """(B, n_side**D, D) points on an integer lattice, shuffled: many exact distance ties."""
    g = torch.Generator().manual_seed(seed)
    axes = [torch.arange(n_side, dtype=torch.float64)] * D
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, D)
    clouds = [grid[torch.randperm(grid.shape[0], generator=g)] for _ in range(B)]
    return torch.stack(clouds).to(device=device, dtype=dtype)


def surface_cloud(B, N, *, dtype=torch.float32, device="cpu", seed=0):
    """(B, N, 3) points on a unit sphere surface: a 2-D manifold in 3-D, like real scans."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(B, N, 3, generator=g, dtype=torch.float64)
    return (v / v.norm(dim=-1, keepdim=True)).to(device=device, dtype=dtype)


def clustered_cloud(B, N, *, dtype=torch.float32, device="cpu", seed=0):
    """(B, N, 3) points in 8 Gaussian clusters whose densities differ by ~100x."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.rand(B, 8, 3, generator=g, dtype=torch.float64)
    scales = torch.logspace(-3, -1, 8, dtype=torch.float64)
    which = torch.randint(0, 8, (B, N), generator=g)
    pts = centers.gather(1, which[..., None].expand(-1, -1, 3)) + torch.randn(B, N, 3, generator=g, dtype=torch.float64) * scales[which][..., None]
    return pts.to(device=device, dtype=dtype)
