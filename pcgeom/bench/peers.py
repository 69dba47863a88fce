"""Who the benchmark races: the methods of each workload, pcgeom's and its peers'.

For a workload's inputs, ``knn_methods`` / ``fps_methods`` / ``group_methods``
(``methods_for`` picks by op) return ``{name: callable}``; each callable does
what a user pays per batch -- any index build, the query, the Python loop over
clouds for peers without batching -- and returns the standard output as torch
tensors: ``(dist2 (B, M, k) float32, idx (B, M, k) int64)`` for KNN, indices
``(B, S)`` int64 for FPS (open3d: the sampled points ``(B, S, 3)``), and
``(neighbourhoods (B, G, k, 3), centres (B, G, 3))`` for grouping.  The peers
are the installed libraries and the pure-torch code users write today
(``chunked_torch_knn``, the FPS loop).  ``use_vendored`` puts the upstream code
vendored in a checkout's ``tests/upstream`` on ``sys.path`` for the benchmark
scripts that race it.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import torch

import pcgeom
from pcgeom.bench.workloads import SKIPS, Inputs



def _stack_knn(dists, idxs, squared: bool):
    d = torch.from_numpy(np.stack(dists)).to(torch.float32)
    if not squared:
        d = d * d
    return d, torch.from_numpy(np.stack(idxs).astype(np.int64, copy=False))


def chunked_torch_knn(q, p, k):
    """What users write: cdist + topk, chunked over queries to bound memory (about 256 MB).

    q (B, M, D), p (B, N, D) -> (squared distances (B, M, k), indices (B, M, k) int64)."""
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


def available(module: str) -> bool:
    """Whether `module` is installed (found without importing it)."""
    return importlib.util.find_spec(module) is not None


def knn_methods(inp: Inputs) -> dict:
    k = inp.spec["k"]
    p, q = inp.points, inp.query
    P = inp.np_points
    Q = P if inp.np_query is None else inp.np_query
    B = p.shape[0]
    m = {"pcgeom": lambda: tuple(pcgeom.knn(p if q is None else q, p, k))}
    m["torch"] = lambda: chunked_torch_knn(p if q is None else q, p, k)
    if available("scipy"):
        from scipy.spatial import cKDTree

        def run_scipy():
            out = [cKDTree(P[b]).query(Q[b], k=k, workers=-1) for b in range(B)]
            return _stack_knn([o[0].reshape(-1, k) for o in out], [o[1].reshape(-1, k) for o in out], False)

        m["scipy"] = run_scipy
    if available("pykdtree"):
        from pykdtree.kdtree import KDTree

        def run_pykdtree():
            out = [KDTree(P[b]).query(Q[b], k=k) for b in range(B)]
            return _stack_knn([o[0].reshape(-1, k) for o in out], [o[1].reshape(-1, k) for o in out], False)

        m["pykdtree"] = run_pykdtree
    if available("faiss"):
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
    if available("open3d"):
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
    if available("fpsample"):
        import fpsample

        m["fpsample"] = lambda: torch.from_numpy(
            np.stack([fpsample.fps_sampling(P[b], S, start_idx=0) for b in range(B)]).astype(np.int64)
        )
        m["fpsample-kdline"] = lambda: torch.from_numpy(
            np.stack([fpsample.bucket_fps_kdline_sampling(P[b], S, h=7, start_idx=0) for b in range(B)]).astype(np.int64)
        )
    if available("open3d"):
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
    """The methods of the input's op, less those ``SKIPS`` leaves out of its workload."""
    op = inp.spec["op"]
    ms = {"knn": knn_methods, "fps": fps_methods, "group": group_methods}[op](inp)
    return {name: fn for name, fn in ms.items() if (inp.workload, name) not in SKIPS}



# ---------------------------------------------------------------------------
# Upstream code vendored in a checkout (tests/upstream), for the benchmark scripts.

UPSTREAM = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "tests", "upstream")


def use_vendored(folder: str | None = None, *, standins: bool = False) -> str:
    """Put vendored upstream code of a pcgeom checkout first on ``sys.path``; returns the folder put there.

    `folder` names a folder of ``tests/upstream`` whose packages then import by
    their own names (``"pointcept"``: ``import pointcept``; ``"pointnet2_pytorch"``:
    ``import pointnet2``).  None puts ``tests/`` there instead, so the vendored
    packages import as ``upstream.<folder>`` (``upstream.pointcept_serialization``)
    -- not ``tests/upstream`` itself, whose ``torch_cluster`` / ``torch_scatter``
    folders would shadow the real packages.  ``standins=True`` also appends
    ``tests/upstream/_standins`` (minimal timm / torchvision / pytorch_lightning
    modules the vendored models import), last, so installed copies win.  The
    vendored code lives in a checkout only: FileNotFoundError elsewhere.
    """
    path = os.path.dirname(UPSTREAM) if folder is None else os.path.join(UPSTREAM, folder)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path} not found: the vendored upstream code is in a pcgeom checkout only")
    if path not in sys.path:
        sys.path.insert(0, path)
    extra = os.path.join(UPSTREAM, "_standins")
    if standins and extra not in sys.path:
        sys.path.append(extra)
    return path
