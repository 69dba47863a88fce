"""CPU benchmark of pcgeom against the installed peers (``pcgeom bench``).

Runs the workloads of the project's benchmark plan (Point-MAE grouping, self
KNN graphs, scene-size clouds, feature-space KNN, FPS at three scales and the
Point-MAE ``group_patches`` step) on a uniform cube and on real surface scans
(the bundled scans of :mod:`pcgeom.data`), against every peer that is
installed (``pip install "pcgeom[bench]"``: scipy, pykdtree, faiss-cpu,
fpsample, open3d-cpu) and against the pure-torch code users write today.

Method, per workload and dataset:

* inputs are float32, made once with fixed seeds (outside the timing);
* what is timed is what a user pays per batch: building any index, the query,
  the Python loop over clouds for peers without batching, and the result as
  ``(B, M, k)`` / ``(B, S)`` torch tensors (squared distances as float32);
* every method runs once to warm up, then ``--repeats`` times *interleaved*
  (one call of each method per round, so load on a shared machine hits all
  alike); the best round of each is reported, and the ratio pcgeom / best
  peer from those (noise only adds time, so the best rounds compare the
  code, not the load); the ratio of the medians is reported beside it;
* all threads for everyone (torch, faiss and pykdtree/open3d through OpenMP,
  scipy ``workers=-1``; fpsample is single-threaded);
* every method's answer is checked on a subsample: pcgeom must equal the
  pure-torch reference bit for bit (indices and distances, or the FPS index
  sequence); KNN peers must return the true k smallest distances (float64
  brute force); FPS peers must return the reference sequence (fpsample) or
  the same set of points (open3d, which reorders it);
* peak memory (``--memory``, on by default without ``--quick``): each method
  runs in a fresh subprocess, warmed up on a 256-point copy of the input, and
  the reported figure is the resident-set high-water mark during one call
  minus the resident set before it (Linux ``/proc/self/clear_refs``).

Usage::

    pcgeom bench                        # everything (about 10 minutes on 2 quiet cores)
    pcgeom bench --quick                # fewer repeats, no memory/scaling (about 2 minutes)
    pcgeom bench --workloads knn-self-8k,fps-8k --repeats 9
    pcgeom bench --output my-results.md
    pcgeom bench --grid                 # shape grid against torch.cdist + topk (a few minutes)

Inside a pcgeom checkout the report is written to ``benchmarks/RESULTS.md``
unless ``--output`` says otherwise (``--output -`` writes nothing).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

import pcgeom
from pcgeom.ops import reference

# ---------------------------------------------------------------------------
# Workloads

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
MISS_REASONS = {
    "knn": "with k >= 16 a tree search keeps each query's k best keys in exact (distance, index) "
           "order -- a few dozen insertions per query, the same work pykdtree does (branch-free in the "
           "AVX2 copy); on a loaded machine single runs move by up to 2x",
    "knn-feat": "it is GEMM-bound: the symmetric tiles halve faiss's GEMM, and what is left is each "
                "query's candidate bookkeeping and the exact re-ranking, which faiss does not do",
    "group": "group_patches is FPS + KNN + two gathers; the KNN of 64 centres among 1024 points (tile "
             "path) is about two thirds of it",
    "fps": "the bucket FPS touches few points per step; the remaining cost is the tree build",
}

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
    workload: str
    dataset: str
    spec: dict
    points: torch.Tensor
    query: torch.Tensor | None = None  # None: self query
    np_points: np.ndarray | None = None
    np_query: np.ndarray | None = None


def make_inputs(workload: str, dataset: str, small: bool = False) -> Inputs:
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
# Methods.  Each returns a callable producing the standard output.


def _stack_knn(dists, idxs, squared: bool):
    d = torch.from_numpy(np.stack(dists)).to(torch.float32)
    if not squared:
        d = d * d
    return d, torch.from_numpy(np.stack(idxs).astype(np.int64, copy=False))


def _chunked_torch_knn(q, p, k):
    # What users write: cdist + topk, chunked over queries to bound memory.
    B, M, _ = q.shape
    N = p.shape[1]
    rows = max(1, (256 * 2**20) // (4 * N * max(B, 1)))
    ds, ids = [], []
    for s in range(0, M, rows):
        d = torch.cdist(q[:, s : s + rows], p).pow_(2)
        v, i = d.topk(k, dim=-1, largest=False)
        ds.append(v)
        ids.append(i)
    return torch.cat(ds, 1), torch.cat(ids, 1)


def _torch_fps(p, S):
    # What users write: a pure-torch FPS loop over the batch.
    B, N, _ = p.shape
    rows = torch.arange(B)
    out = torch.zeros(B, S, dtype=torch.int64)
    mind = torch.full((B, N), float("inf"))
    cur = torch.zeros(B, dtype=torch.int64)
    for s in range(S):
        out[:, s] = cur
        d = ((p - p[rows, cur][:, None]) ** 2).sum(-1)
        mind = torch.minimum(mind, d)
        cur = mind.argmax(-1)
    return out


def _available(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def knn_methods(inp: Inputs) -> dict:
    k = inp.spec["k"]
    p, q = inp.points, inp.query
    P = inp.np_points
    Q = P if inp.np_query is None else inp.np_query
    B = p.shape[0]
    m = {"pcgeom": lambda: tuple(pcgeom.knn(p if q is None else q, p, k))}
    m["torch"] = lambda: _chunked_torch_knn(p if q is None else q, p, k)
    if _available("scipy"):
        from scipy.spatial import cKDTree

        def run_scipy():
            out = [cKDTree(P[b]).query(Q[b], k=k, workers=-1) for b in range(B)]
            return _stack_knn([o[0].reshape(-1, k) for o in out], [o[1].reshape(-1, k) for o in out], False)

        m["scipy"] = run_scipy
    if _available("pykdtree"):
        from pykdtree.kdtree import KDTree

        def run_pykdtree():
            out = [KDTree(P[b]).query(Q[b], k=k) for b in range(B)]
            return _stack_knn([o[0].reshape(-1, k) for o in out], [o[1].reshape(-1, k) for o in out], False)

        m["pykdtree"] = run_pykdtree
    if _available("faiss"):
        import faiss

        def run_faiss():
            ds, ids = [], []
            for b in range(B):
                index = faiss.IndexFlatL2(P.shape[2])
                index.add(P[b])
                d, i = index.search(Q[b], k)
                ds.append(d)
                ids.append(i)
            return _stack_knn(ds, ids, True)

        m["faiss"] = run_faiss
    if _available("open3d"):
        import open3d as o3d

        def run_open3d():
            ds, ids = [], []
            for b in range(B):
                nns = o3d.core.nns.NearestNeighborSearch(o3d.core.Tensor(P[b]))
                nns.knn_index()
                i, d = nns.knn_search(o3d.core.Tensor(Q[b]), k)
                ids.append(i.numpy())
                ds.append(d.numpy())
            return _stack_knn(ds, ids, True)

        m["open3d"] = run_open3d
    return m


def fps_methods(inp: Inputs) -> dict:
    S = inp.spec["S"]
    p, P = inp.points, inp.np_points
    B = p.shape[0]
    m = {"pcgeom": lambda: pcgeom.farthest_point_sample(p, S)}
    m["torch"] = lambda: _torch_fps(p, S)
    if _available("fpsample"):
        import fpsample

        m["fpsample"] = lambda: torch.from_numpy(
            np.stack([fpsample.fps_sampling(P[b], S, start_idx=0) for b in range(B)]).astype(np.int64)
        )
        m["fpsample-kdline"] = lambda: torch.from_numpy(
            np.stack([fpsample.bucket_fps_kdline_sampling(P[b], S, h=7, start_idx=0) for b in range(B)]).astype(np.int64)
        )
    if _available("open3d"):
        import open3d as o3d

        def run_open3d():
            # open3d returns the sampled points, not indices: (B, S, 3) coordinates.
            out = []
            for b in range(B):
                pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(P[b].astype(np.float64)))
                out.append(np.asarray(pc.farthest_point_down_sample(S, 0).points, dtype=np.float32))
            return torch.from_numpy(np.stack(out))

        m["open3d"] = run_open3d
    return m


def _torch_group(p, G, k):
    idx = _torch_fps(p, G)
    rows = torch.arange(p.shape[0])[:, None]
    centers = p[rows, idx]
    d = torch.cdist(centers, p)
    nn = d.topk(k, dim=-1, largest=False).indices
    nbhd = p[rows[..., None], nn] - centers[:, :, None]
    return nbhd, centers


def group_methods(inp: Inputs) -> dict:
    G, k = inp.spec["G"], inp.spec["k"]
    p = inp.points
    if hasattr(pcgeom, "group_patches"):
        run = lambda: pcgeom.group_patches(p, G, k)  # noqa: E731
    else:  # composition of the public ops

        def run():
            idx = pcgeom.farthest_point_sample(p, G)
            centers = pcgeom.knn_gather(p, idx[:, :, None])[:, :, 0]
            nn = pcgeom.knn(centers, p, k).idx
            return pcgeom.knn_gather(p, nn) - centers[:, :, None], centers

    return {"pcgeom": run, "torch": lambda: _torch_group(p, G, k)}


def methods_for(inp: Inputs) -> dict:
    op = inp.spec["op"]
    ms = {"knn": knn_methods, "fps": fps_methods, "group": group_methods}[op](inp)
    return {name: fn for name, fn in ms.items() if (inp.workload, name) not in SKIPS}


# ---------------------------------------------------------------------------
# Correctness checks (on a subsample).


def _check_knn(inp: Inputs, name: str, out) -> str:
    dist2, idx = out
    k = inp.spec["k"]
    p = inp.points
    q = p if inp.query is None else inp.query
    B, M = q.shape[0], q.shape[1]
    g = torch.Generator().manual_seed(3)
    sel = torch.randperm(M, generator=g)[:48].sort().values
    clouds = range(min(B, 2))
    if name == "pcgeom":
        for b in clouds:
            qs = q[b : b + 1, sel]
            L = torch.tensor([p.shape[1]])
            rd, ri = reference.knn_reference(qs, p[b : b + 1], k, torch.tensor([len(sel)]), L)
            if not (torch.equal(ri[0], idx[b, sel]) and torch.equal(rd[0], dist2[b, sel])):
                return "MISMATCH vs reference"
        return "exact (= reference)"
    for b in clouds:
        q64 = q[b, sel].double()
        p64 = p[b].double()
        true = torch.cdist(q64, p64).pow(2).topk(k, dim=-1, largest=False).values
        got_idx = idx[b, sel].clamp(0, p.shape[1] - 1)
        got = ((q64[:, None] - p64[got_idx]) ** 2).sum(-1).sort(-1).values
        if not torch.allclose(got, true, rtol=1e-5, atol=1e-7):
            return "WRONG distances"
    return "ok (k smallest)"


# --quick checks FPS sequences on a prefix (the reference loop is slow on scenes).
QUICK_FPS_CHECK = None


def _check_fps(inp: Inputs, name: str, out) -> str:
    S = inp.spec["S"]
    p = inp.points[:1]
    n_check = S if QUICK_FPS_CHECK is None else min(S, QUICK_FPS_CHECK)  # cloud 0
    if name == "open3d" and n_check < S:
        return "not checked (--quick)"
    ref = reference.farthest_point_sample_reference(p, n_check, torch.tensor([p.shape[1]]), torch.tensor([0]))[0]
    if name == "open3d":
        got = out[0]
        want = inp.points[0, ref]
        a = got[np.lexsort(got.numpy().T[::-1])]
        b = want[np.lexsort(want.numpy().T[::-1])]
        return "same set, other order" if torch.equal(a, b) else "DIFFERENT set"
    got = out[0, :n_check]
    if torch.equal(got, ref):
        return "exact (= reference)" if n_check == S else f"exact (first {n_check} = reference)"
    own = ""
    if int(got[0]) != 0:
        # fpsample's bucket variant picks its own start: compare from there.
        ref = reference.farthest_point_sample_reference(p, n_check, torch.tensor([p.shape[1]]), got[:1])[0]
        if torch.equal(got, ref):
            return "exact from its own start" + ("" if n_check == S else f" (first {n_check})")
        own = " (own start)"
    first = int((got != ref).nonzero()[0, 0])
    return f"differs from step {first}{own}"


def _check_group(inp: Inputs, name: str, out) -> str:
    nbhd, centers = out[0], out[1]
    G, k = inp.spec["G"], inp.spec["k"]
    p = inp.points[:1]
    idx = reference.farthest_point_sample_reference(p, G, torch.tensor([p.shape[1]]), torch.tensor([0]))
    c = p[0, idx[0]]
    if not torch.equal(centers[0], c):
        return "different centres"
    _, nn = reference.knn_reference(c[None], p, k, torch.tensor([G]), torch.tensor([p.shape[1]]))
    want = p[0, nn[0]] - c[:, None]
    if torch.equal(nbhd[0], want):
        return "exact (= reference)"
    d_got = (nbhd[0].double() ** 2).sum(-1).sort(-1).values
    d_want = (want.double() ** 2).sum(-1).sort(-1).values
    return "ok (same distances)" if torch.allclose(d_got, d_want, rtol=1e-5, atol=1e-7) else "WRONG"


def check(inp: Inputs, name: str, out) -> str:
    try:
        return {"knn": _check_knn, "fps": _check_fps, "group": _check_group}[inp.spec["op"]](inp, name, out)
    except Exception as exc:  # a peer returning something unexpected
        return f"check failed: {type(exc).__name__}: {exc}"


# ---------------------------------------------------------------------------
# Timing and memory.


# A method whose warm-up call alone takes longer is not called again: its
# warm-up time is reported.
GIVE_UP_S = 5.0


def time_interleaved(methods: dict, repeats: int, slow_s: float, slow_rounds: int | None = None):
    """Best and median wall time (ms) per method; one warm-up call each, then
    rounds of one call per method.  Methods slower than slow_s are timed in a
    third of the rounds (at least one), or in `slow_rounds` rounds when given
    (0: the warm-up time is reported).  Returns (best, median, runs, outputs)."""
    if slow_rounds is None:
        slow_rounds = max(1, repeats // 3)
    outs, times, warm = {}, {n: [] for n in methods}, {}
    for name, fn in methods.items():
        t = time.perf_counter()
        outs[name] = fn()
        warm[name] = time.perf_counter() - t
    for r in range(repeats):
        for name, fn in methods.items():
            if warm[name] > GIVE_UP_S or (warm[name] > slow_s and r >= slow_rounds):
                continue
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    for name in methods:
        if not times[name]:
            times[name].append(warm[name])
    return ({n: 1e3 * min(v) for n, v in times.items()}, {n: 1e3 * statistics.median(v) for n, v in times.items()},
            {n: len(v) for n, v in times.items()}, outs)


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _hwm_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _memory_child(workload: str, dataset: str, method: str, threads: int) -> None:
    torch.set_num_threads(threads)
    small = make_inputs(workload, dataset, small=True)
    methods_for(small)[method]()  # lazy initialisation, thread pools
    inp = make_inputs(workload, dataset)
    fn = methods_for(inp)[method]
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark
    before = _rss_kb()
    fn()
    print(json.dumps({"mb": max(0, _hwm_kb() - before) / 1024}))


def measure_memory(workload: str, dataset: str, method: str, threads: int) -> float | None:
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    cmd = [sys.executable, "-m", "pcgeom.bench", "--_memory", workload, dataset, method, "--threads", str(threads)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        return float(json.loads(res.stdout.strip().splitlines()[-1])["mb"])
    except Exception:
        return None


def _scaling_child(kind: str, N: int, method: str, threads: int, repeats: int) -> None:
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    p = torch.rand(1, N, 3, generator=g)
    P = p[0].numpy()
    if kind == "knn":
        if method == "pcgeom":
            fn = lambda: pcgeom.knn(p, p, 16)  # noqa: E731
        else:
            from pykdtree.kdtree import KDTree

            fn = lambda: KDTree(P).query(P, k=16)  # noqa: E731
    else:
        S = N // 50
        if method == "pcgeom":
            fn = lambda: pcgeom.farthest_point_sample(p, S)  # noqa: E731
        else:
            import fpsample

            fn = lambda: fpsample.bucket_fps_kdline_sampling(P, S, h=7, start_idx=0)  # noqa: E731
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _rss_kb()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    mem = max(0, _hwm_kb() - before) / 1024
    print(json.dumps({"ms": 1e3 * statistics.median(times), "first_ms": 1e3 * times[0], "mb": mem}))


# ---------------------------------------------------------------------------
# Report.


@dataclass
class Row:
    workload: str
    dataset: str
    times: dict
    runs: dict
    checks: dict
    memory: dict = field(default_factory=dict)
    medians: dict = field(default_factory=dict)

    @property
    def peers(self):
        return {n: t for n, t in self.times.items() if n not in ("pcgeom", "torch")}

    def best_peer(self, times=None):
        """The fastest correct peer (from `times`, default the best rounds);
        for a workload whose target is the pure-torch path, torch."""
        times = self.times if times is None else times
        if TARGETS.get(self.workload, ("",))[0] == "torch":
            return ("torch", times["torch"]) if "torch" in times else (None, None)
        peers = {n: times[n] for n in self.peers
                 if not self.checks.get(n, "").startswith(("WRONG", "DIFF", "check"))}
        if not peers:
            return None, None
        n = min(peers, key=peers.get)
        return n, peers[n]


def _machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f", {kb / 2**20:.0f} GiB RAM"
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores{mem}, {platform.system()} {platform.release()}"


def _versions() -> str:
    import importlib.metadata as md

    parts = [f"torch {torch.__version__}", f"pcgeom {pcgeom.__version__} (native: {pcgeom.backend_info()['extension_loaded']})"]
    for dist in ("scipy", "pykdtree", "faiss-cpu", "fpsample", "open3d-cpu", "open3d"):
        try:
            parts.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(parts)


def _fmt(t) -> str:
    if t is None:
        return "-"
    return f"{t:,.0f}" if t >= 100 else (f"{t:.1f}" if t >= 10 else f"{t:.2f}")


def render(rows, scaling, args, threads, elapsed) -> str:
    names = []
    for r in rows:
        for n in r.times:
            if n not in names:
                names.append(n)
    order = ["pcgeom", "torch", "scipy", "pykdtree", "faiss", "open3d", "fpsample", "fpsample-kdline"]
    names = [n for n in order if n in names] + [n for n in names if n not in order]
    lines = []
    cmd = "pcgeom bench " + " ".join(args.argv)
    lines.append("# pcgeom CPU benchmark\n")
    lines.append(f"- command: `{cmd.strip()}`")
    lines.append(f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, wall time {elapsed / 60:.1f} min")
    lines.append(f"- machine: {_machine()}; {threads} threads for every method")
    lines.append(f"- software: {_versions()}")
    slow_note = ("are timed by their warm-up call alone" if args.quick else "get a third of the rounds")
    lines.append(f"- repeats: {args.repeats} interleaved rounds after one warm-up (best and median of them; "
                 f"methods slower than {args.slow:g} s per call {slow_note})")
    lines.append("")
    lines.append("Milliseconds per batch, best of the interleaved rounds (index build + query + output as "
                 "torch tensors). `ratio` = pcgeom / fastest correct peer (torch excluded; for group-mae, "
                 "pcgeom / the pure-torch path), from the best rounds: the machine is shared and noise only "
                 "adds time; `median ratio` = the same from the medians. `-` = not installed or skipped.\n")
    head = "| workload | data | " + " | ".join(names) + " | best peer | ratio | median ratio | target |"
    lines.append(head)
    lines.append("|" + "---|" * (len(names) + 6))
    for r in rows:
        bn, bt = r.best_peer()
        ratio = r.times["pcgeom"] / bt if bt else None
        _, mt = r.best_peer(r.medians) if r.medians else (None, None)
        mratio = r.medians["pcgeom"] / mt if mt else None
        tgt = TARGETS.get(r.workload)
        tgt_s = "-" if tgt is None else f"<= {tgt[1]:g}"
        if tgt is not None and ratio is not None:
            tgt_s += " met" if ratio <= tgt[1] else " **missed**"
        cells = [_fmt(r.times.get(n)) if (r.workload, n) not in SKIPS else "skipped" for n in names]
        lines.append(f"| {r.workload} | {r.dataset} | " + " | ".join(cells)
                     + f" | {bn or '-'} | {'-' if ratio is None else f'{ratio:.2f}'}"
                     + f" | {'-' if mratio is None else f'{mratio:.2f}'} | {tgt_s} |")
    missed = []
    for r in rows:
        bn, bt = r.best_peer()
        tgt = TARGETS.get(r.workload)
        if tgt is not None and bt and r.times["pcgeom"] / bt > tgt[1]:
            missed.append((r.workload, r.dataset, r.times["pcgeom"] / bt, tgt[1]))
    if missed:
        lines.append("")
        lines.append("Targets missed: " + "; ".join(f"{w} on {d} ({x:.2f} for <= {t:g}, {x / t - 1:.0%} over)"
                                                   for w, d, x, t in missed) + ".")
        for key in sorted({w if w in MISS_REASONS else WORKLOADS[w]["op"] for w, _, _, _ in missed}):
            if key in MISS_REASONS:
                lines.append(f"- {key}: {MISS_REASONS[key]}.")
    lines.append("")
    lines.append("Correctness on a subsample (pcgeom against the pure-torch reference, bit for bit; "
                 "peers against float64 brute force / the reference FPS sequence):\n")
    lines.append("| workload | data | " + " | ".join(names) + " |")
    lines.append("|" + "---|" * (len(names) + 2))
    for r in rows:
        lines.append(f"| {r.workload} | {r.dataset} | " + " | ".join(r.checks.get(n, "-") for n in names) + " |")
    if any(r.memory for r in rows):
        lines.append("")
        lines.append("Peak extra resident memory per call, MB (fresh process per method, warmed up on a "
                     "256-point copy; high-water mark during one call minus the resident set before it, "
                     "outputs included):\n")
        lines.append("| workload | data | " + " | ".join(names) + " |")
        lines.append("|" + "---|" * (len(names) + 2))
        for r in rows:
            if r.memory:
                lines.append(f"| {r.workload} | {r.dataset} | "
                             + " | ".join(_fmt(r.memory.get(n)) for n in names) + " |")
    if skipped := sorted({(w, m) for (w, m) in SKIPS if any(r.workload == w for r in rows)}):
        lines.append("")
        lines.append("Skipped: " + "; ".join(f"{m} on {w} ({SKIPS[(w, m)]})" for w, m in skipped) + ".")
    if scaling:
        lines.append("")
        lines.append("Scaling, uniform cube, one cloud: self-KNN k=16 and FPS with S = N/50 "
                     "(median ms over the runs shown, peak extra MB):\n")
        lines.append("| op | N | pcgeom ms | pcgeom MB | peer | peer ms | peer MB | ratio |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for s in scaling:
            pm, pr = s["pcgeom"], s["peer"]
            ratio = pm["ms"] / pr["ms"] if pm and pr else None
            lines.append(f"| {s['op']} | {s['N']:,} | {_fmt(pm and pm['ms'])} | {_fmt(pm and pm['mb'])} | "
                         f"{s['peer_name']} | {_fmt(pr and pr['ms'])} | {_fmt(pr and pr['mb'])} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    lines.append("")
    lines.append("Datasets: `cube` = uniform in the unit cube (seed 0); `sphere` = uniform on the unit sphere's "
                 "surface; `clustered` = 32 Gaussian blobs per cloud with widths from 0.002 to 0.2 (densities "
                 "100x apart); `scan` = the bundled scans "
                 "(bunny, armadillo, chinese_dragon, kitten, one per cloud in turn), subsampled, or "
                 "densified within the tangent plane when a workload needs more points than the scan "
                 "has; knn-feat on `scan` uses 64-D positional-encoding features of the scan points.")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Shape grid (--grid): pcgeom.knn against torch.cdist + topk, cell by cell.

# (B, M, N, D, k): a sparse grid over N = 16 ... 10^6, M = 1 ... N, k = 1 ... N,
# D = 2 ... 512 and B = 1 ... 1024, with the work of a cell (B * M * N * D)
# kept below about 2 * 10^9 so the whole grid runs in a few minutes on 2 cores.
# M == N means a self query (the same tensor as query and points).
GRID = [
    # tiny clouds, huge batches
    (1024, 16, 16, 3, 1), (1024, 16, 16, 3, 8), (1024, 16, 16, 3, 16), (1024, 64, 64, 64, 8),
    # small clouds, k a large share of N (normal estimation, KNN_CUDA's shape)
    (64, 224, 224, 3, 16), (64, 224, 224, 3, 100), (64, 224, 224, 3, 224), (1, 224, 224, 5, 100),
    (1, 1, 224, 3, 100),
    # 1024-point clouds: Point-MAE grouping, k from 1 to N
    (32, 64, 1024, 3, 32), (16, 1024, 1024, 3, 1), (16, 1024, 1024, 3, 16),
    (16, 1024, 1024, 3, 256), (16, 1024, 1024, 3, 1024), (128, 64, 1024, 3, 32),
    # other low dimensions
    (4, 4096, 4096, 2, 16), (4, 2048, 2048, 5, 64), (4, 2048, 2048, 8, 16),
    # larger clouds
    (8, 8192, 8192, 3, 16), (1, 8192, 8192, 3, 1024), (1, 1000, 100_000, 3, 16),
    (1, 1, 100_000, 3, 100_000), (1, 100, 1_000_000, 3, 16), (1, 1, 1_000_000, 3, 1),
    (1, 1, 1_000_000, 3, 1000), (1, 1, 1_000_000, 3, 1_000_000),
    # feature space
    (16, 1024, 1024, 16, 16), (32, 256, 256, 64, 20), (4, 4096, 4096, 64, 20),
    (4, 1, 4096, 64, 1), (1, 2048, 2048, 128, 100), (1, 2048, 2048, 128, 2048),
    (8, 512, 512, 512, 32), (1, 64, 16384, 512, 16), (1, 1, 65536, 256, 10),
]


def _grid_time(fn_a, fn_b, budget_s: float = 1.5, min_rounds: int = 3, max_rounds: int = 15):
    """Best times (s) of two callables over interleaved alternations (a, b, a, b, ...)
    after one warm-up call each; the number of rounds fits the budget."""
    t = time.perf_counter()
    fn_a()
    ta = time.perf_counter() - t
    t = time.perf_counter()
    fn_b()
    tb = time.perf_counter() - t
    rounds = int(min(max_rounds, max(min_rounds, budget_s / max(ta + tb, 1e-6))))
    best_a, best_b = ta, tb
    for _ in range(rounds):
        t = time.perf_counter()
        fn_a()
        best_a = min(best_a, time.perf_counter() - t)
        t = time.perf_counter()
        fn_b()
        best_b = min(best_b, time.perf_counter() - t)
    return best_a, best_b, rounds


def _grid_inputs(B, M, N, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(B, N, D, generator=g)
    q = p if M == N else torch.rand(B, M, D, generator=g)
    return q, p


def _grid_check(q, p, k, out) -> bool:
    # Bit for bit against the reference on the first cloud's first queries.
    sel = min(q.shape[1], 8)
    L = torch.tensor([p.shape[1]])
    rd, ri = reference.knn_reference(q[:1, :sel].contiguous(), p[:1], k, torch.tensor([sel]), L)
    return torch.equal(ri[0], out[1][0, :sel]) and torch.equal(rd[0], out[0][0, :sel])


def run_grid(cells, budget_s: float, log=print):
    rows = []
    for B, M, N, D, k in cells:
        q, p = _grid_inputs(B, M, N, D)
        fa = lambda: tuple(pcgeom.knn(q, p, k))  # noqa: E731
        fb = lambda: _chunked_torch_knn(q, p, k)  # noqa: E731
        exact = _grid_check(q, p, k, fa())
        ta, tb, rounds = _grid_time(fa, fb, budget_s)
        r = dict(B=B, M=M, N=N, D=D, k=k, pcgeom_ms=1e3 * ta, torch_ms=1e3 * tb, ratio=ta / tb,
                 rounds=rounds, exact=exact)
        rows.append(r)
        log(f"B={B:5d} M={M:7d} N={N:8d} D={D:4d} k={k:8d}  pcgeom {_fmt(1e3 * ta):>8s} ms  "
            f"cdist+topk {_fmt(1e3 * tb):>8s} ms  ratio {ta / tb:5.2f}  {'exact' if exact else 'MISMATCH'}",
            flush=True)
        del q, p
    return rows


GRID_BEGIN = "<!-- grid: begin (pcgeom bench --grid) -->"
GRID_END = "<!-- grid: end -->"

# Cells above 1.0 or 0.8 that are understood (filled in from the measured run).
GRID_NOTES = {
    (8, 512, 512, 512, 32): ("GEMM-bound: at D = 512 a 512-point cloud is only two 256-row tiles, so cdist's single multi-threaded BLAS call is as fast as pcgeom's half-size (symmetric) GEMM, and pcgeom then re-ranks each query's ~k candidates exactly (3 x 512 scalar flops each), which cdist never does; the tile path is slower still here (3 flops per coordinate pair without BLAS). Measured 0.73 to 1.26 over four earlier runs, 1.14 and 1.04 in the last two"),
    (1, 2048, 2048, 128, 100): ('GEMM-bound at the blocked/tile boundary (N * D = 2^18): both kernels are within 10 % of cdist here; the exact re-ranking of ~k candidates per query is what cdist does not pay'),
    (32, 256, 256, 64, 20): ("small high-D clouds: the tile path's exact distances cost 3 flops per coordinate pair against BLAS's fused ones; was 1.21 before the tile path"),
    (1024, 16, 16, 3, 1): ('16,384 queries of 16 points: about 125 ns per query, call and bookkeeping bound (cdist+topk is one batched kernel here)'),
    (1024, 16, 16, 3, 8): ('as for k = 1'),
}


def render_grid(rows, args, threads, elapsed) -> str:
    cmd = "pcgeom bench " + " ".join(args.argv)
    lines = [GRID_BEGIN, "## Shape grid: pcgeom.knn against torch.cdist + topk", ""]
    lines.append(f"- command: `{cmd.strip()}`")
    lines.append(f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, wall time {elapsed / 60:.1f} min")
    lines.append(f"- machine: {_machine()}; {threads} threads for both (shared machine: other jobs were running)")
    lines.append(f"- software: torch {torch.__version__}, pcgeom {pcgeom.__version__} "
                 f"(native: {pcgeom.backend_info()['extension_loaded']})")
    lines.append("- method: uniform points in the unit cube, float32; M = N is a self query. Each cell runs "
                 "one warm-up call of each, then interleaved alternations (pcgeom, cdist+topk, pcgeom, ...) "
                 "for about 1.5 s (3 to 15 rounds); the times are the best of each, ratio = pcgeom / "
                 "cdist+topk (noise only adds time, so the best runs compare the code, not the load). "
                 "cdist+topk is chunked over queries to stay under 256 MB, as `pcgeom bench` does. "
                 "`exact`: pcgeom equals the pure-torch reference bit for bit on the cell's first queries.")
    lines.append("")
    lines.append("| B | M | N | D | k | pcgeom ms | cdist+topk ms | ratio | rounds | check |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lines.append(f"| {r['B']:,} | {r['M']:,} | {r['N']:,} | {r['D']} | {r['k']:,} | {_fmt(r['pcgeom_ms'])} | "
                     f"{_fmt(r['torch_ms'])} | {r['ratio']:.2f} | {r['rounds']} | "
                     f"{'exact' if r['exact'] else 'MISMATCH'} |")
    ratios = [r["ratio"] for r in rows]
    over1 = [r for r in rows if r["ratio"] > 1.0]
    over08 = [r for r in rows if r["ratio"] > 0.8]
    lines.append("")
    lines.append(f"{len(rows)} cells: {len(rows) - len(over08)} at <= 0.8, {len(over08) - len(over1)} in (0.8, 1.0], "
                 f"{len(over1)} above 1.0; median ratio {statistics.median(ratios):.2f}.")
    for r in over08:
        key = (r["B"], r["M"], r["N"], r["D"], r["k"])
        note = GRID_NOTES.get(key)
        if note:
            lines.append(f"- B={r['B']} M={r['M']} N={r['N']} D={r['D']} k={r['k']} ({r['ratio']:.2f}): {note}")
    lines.append(GRID_END)
    return "\n".join(lines) + "\n"


def _merge_grid(path: str, block: str | None, report: str | None) -> str:
    """RESULTS.md with the grid block replaced (or appended) and/or the main
    report replaced, keeping whichever part is not being rewritten."""
    old = ""
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if GRID_BEGIN in old and GRID_END in old:
        a = old.index(GRID_BEGIN)
        b = old.index(GRID_END) + len(GRID_END)
        old_main = (old[:a] + old[b:]).rstrip() + "\n"
        old_block = old[a:b] + "\n"
    else:
        old_main, old_block = old, None
    main = report if report is not None else old_main
    grid = block if block is not None else old_block
    return main.rstrip() + "\n" + ("\n" + grid if grid else "")


# ---------------------------------------------------------------------------
# Entry point.


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pcgeom bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="3 rounds (methods slower than --slow: their warm-up call only), "
                         "no memory probe, no scaling report")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset of: " + ", ".join(WORKLOADS))
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated subset of: " + ", ".join(DATASETS))
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds (default 7, 3 with --quick)")
    ap.add_argument("--threads", type=int, default=None, help="threads for every method (default: all cores)")
    ap.add_argument("--slow", type=float, default=None,
                    help="methods slower than this many seconds per call get a third of the rounds "
                         "(default 1, 0.25 with --quick)")
    ap.add_argument("--memory", action=argparse.BooleanOptionalAction, default=None,
                    help="measure peak memory in subprocesses (default: on, off with --quick)")
    ap.add_argument("--scaling", action=argparse.BooleanOptionalAction, default=None,
                    help="scaling report at N = 1e4, 1e5, 1e6 (default: on, off with --quick)")
    ap.add_argument("--output", default=None, help="report file (default benchmarks/RESULTS.md inside a checkout; '-' for none)")
    ap.add_argument("--grid", action="store_true",
                    help="shape grid instead of the workloads: pcgeom.knn / (torch.cdist + topk) for "
                         f"{len(GRID)} shapes (B, M, N, D, k), a few minutes")
    ap.add_argument("--grid-budget", type=float, default=1.5,
                    help="seconds of interleaved alternations per grid cell (default 1.5)")
    ap.add_argument("--grid-cells", default=None,
                    help="with --grid: only these cells, e.g. 64x224x224x3x100,1x1x1000000x3x1 (BxMxNxDxk)")
    ap.add_argument("--_memory", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--_scaling", nargs=4, help=argparse.SUPPRESS)
    return ap


def _default_output() -> str | None:
    here = os.getcwd()
    pyproject = os.path.join(here, "pyproject.toml")
    if os.path.isdir(os.path.join(here, "benchmarks")) and os.path.isfile(pyproject):
        with open(pyproject) as f:
            if 'name = "pcgeom"' in f.read():
                return os.path.join("benchmarks", "RESULTS.md")
    return None


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:  # `pcgeom bench -- --quick`
        argv = argv[1:]
    args = _parser().parse_args(argv)
    args.argv = [a for a in argv if not a.startswith("--_")]
    threads = args.threads or os.cpu_count() or 1
    if args._memory:
        _memory_child(*args._memory, threads)
        return 0
    if args._scaling:
        kind, N, method, reps = args._scaling
        _scaling_child(kind, int(N), method, threads, int(reps))
        return 0
    torch.set_num_threads(threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    if _available("faiss"):
        import faiss

        faiss.omp_set_num_threads(threads)
    if args.grid:
        t_start = time.perf_counter()
        cells = GRID
        if args.grid_cells:
            cells = [tuple(int(x) for x in c.split("x")) for c in args.grid_cells.split(",") if c.strip()]
        rows = run_grid(cells, args.grid_budget)
        block = render_grid(rows, args, threads, time.perf_counter() - t_start)
        print()
        print(block)
        out = args.output if args.output is not None else _default_output()
        if out and out != "-":
            text = _merge_grid(out, block, None)
            os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
            with open(out, "w") as f:
                f.write(text)
            print(f"grid written to {out}")
        return 0
    global QUICK_FPS_CHECK
    QUICK_FPS_CHECK = 256 if args.quick else None
    if args.repeats is None:
        args.repeats = 3 if args.quick else 7
    if args.slow is None:
        args.slow = 0.25 if args.quick else 1.0
    memory = (not args.quick) if args.memory is None else args.memory
    scaling_on = (not args.quick) if args.scaling is None else args.scaling
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    for w in workloads:
        if w not in WORKLOADS:
            print(f"pcgeom bench: unknown workload {w!r}; choose from {', '.join(WORKLOADS)}", file=sys.stderr)
            return 2
    for d in datasets:
        if d not in DATASETS:
            print(f"pcgeom bench: unknown dataset {d!r}; choose from {', '.join(DATASETS)}", file=sys.stderr)
            return 2
    if not pcgeom.backend_info()["extension_loaded"]:
        print("pcgeom bench: the native kernels are not loaded (see `pcgeom doctor`); timing the pure-torch path.",
              file=sys.stderr)
    missing = [m for m in ("scipy", "pykdtree", "faiss", "fpsample", "open3d") if not _available(m)]
    if missing:
        print(f"pcgeom bench: peers not installed: {', '.join(missing)} (pip install \"pcgeom[bench]\")", file=sys.stderr)

    t_start = time.perf_counter()
    rows = []
    for w in workloads:
        for d in datasets:
            inp = make_inputs(w, d)
            methods = methods_for(inp)
            times, medians, runs, outs = time_interleaved(methods, args.repeats, args.slow,
                                                          0 if args.quick else None)
            checks = {n: check(inp, n, o) for n, o in outs.items()}
            del outs
            row = Row(w, d, times, runs, checks, medians=medians)
            if memory and d == "cube":
                row.memory = {n: measure_memory(w, d, n, threads) for n in methods}
            rows.append(row)
            bn, bt = row.best_peer()
            ratio = f"{times['pcgeom'] / bt:.2f} vs {bn}" if bt else "no peer"
            detail = ", ".join(f"{n} {_fmt(t)}" for n, t in times.items())
            print(f"{w:12s} {d:5s} ratio {ratio:24s} | {detail} ms", flush=True)
            bad = {n: c for n, c in checks.items() if not c.startswith(("exact", "ok", "same", "not checked"))}
            if bad:
                print(f"{'':18s} checks: {bad}", flush=True)

    scaling = []
    if scaling_on:
        for kind, peer in (("knn", "pykdtree"), ("fps", "fpsample-kdline")):
            peer_mod = "pykdtree" if kind == "knn" else "fpsample"
            for N in (10_000, 100_000, 1_000_000):
                reps = 3 if N < 1_000_000 else 1
                res = {"op": "self-KNN k=16" if kind == "knn" else "FPS S=N/50", "N": N, "peer_name": peer}
                for who in ("pcgeom", "peer"):
                    if who == "peer" and not _available(peer_mod):
                        res[who] = None
                        continue
                    cmd = [sys.executable, "-m", "pcgeom.bench", "--_scaling", kind, str(N),
                           "pcgeom" if who == "pcgeom" else peer, str(reps), "--threads", str(threads)]
                    try:
                        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                        res[who] = json.loads(out.stdout.strip().splitlines()[-1])
                    except Exception:
                        res[who] = None
                scaling.append(res)
                pm, pr = res["pcgeom"], res["peer"]
                print(f"scaling {res['op']:14s} N={N:>9,}: pcgeom {_fmt(pm and pm['ms'])} ms "
                      f"({_fmt(pm and pm['mb'])} MB), {peer} {_fmt(pr and pr['ms'])} ms ({_fmt(pr and pr['mb'])} MB)",
                      flush=True)

    elapsed = time.perf_counter() - t_start
    report = render(rows, scaling, args, threads, elapsed)
    print()
    print(report)
    out = args.output if args.output is not None else _default_output()
    if out and out != "-":
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        text = _merge_grid(out, None, report)  # keeps a grid section written by --grid
        with open(out, "w") as f:
            f.write(text)
        print(f"report written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
