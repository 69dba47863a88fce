"""Pointcept's Point Transformer v2 (m2) through pcgeom's shims vs pure-torch ops; knn_query alone.

Two workloads:

* ``step`` -- one training step (forward + ``loss.backward()``) of the unmodified
  ``PointTransformerV2`` (PT-v2m2, vendored in ``tests/upstream/pointcept``) on
  a packed batch of two clouds of ``--points`` points each (a 2 x 2 x 1 m box,
  Pointcept's default grid sizes), twice with the same weights:

  - ``shims``: ``pointops`` / ``torch_scatter`` / ``torch_cluster`` served by
    pcgeom (native packed KNN, gathers, segment reductions, grid clustering);
  - ``pure-torch``: the model's module globals swapped for plain-torch versions
    of the same ops: KNN per cloud from chunked ``torch.cdist`` (exact,
    non-matmul mode) + ``topk``,
    grouping by indexing (Pointcept's own code), ``segment_csr`` from
    ``scatter_reduce``, ``voxel_grid`` from the grid formula.

  Rows: ``model`` (the whole step) and ``ops`` (wall time inside the
  replaced calls -- knn_query, grouping, segment_csr, voxel_grid -- during the
  forward; their backward runs inside autograd's and is counted in ``model``
  only).

* ``knn`` -- ``pointops.knn_query(16, xyz, offset)`` (a self-query) on 8
  packed clouds of 50k..150k points: pcgeom vs pure torch (chunked cdist in its
  default matmul mode + topk per cloud, timed on ``--torch-fraction`` of the queries and scaled:
  its cost is linear in the number of queries) vs SciPy's ``cKDTree`` (one
  tree per cloud, ``workers=-1``).

Times: best and median of ``--repeats`` runs after a warm-up.  Usage::

    python benchmarks/bm_pointcept.py [--points 40000] [--repeats 3] [--workload step|knn|all]
                                       [--device cpu|cuda] [--out RESULTS.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types

import numpy as np
import torch

from pcgeom.bench.peers import use_vendored
from pcgeom.bench.timing import CallTimer, clock, interleaved


# --------------------------------------------------------------------------- pure-torch ops


def knn_query_torch(nsample, xyz, offset, new_xyz=None, new_offset=None, chunk=2048, exact=True):
    if new_xyz is None or new_offset is None:
        new_xyz, new_offset = xyz, offset
    off, noff = [0] + offset.tolist(), [0] + new_offset.tolist()
    idx = torch.full((new_xyz.shape[0], nsample), -1, dtype=torch.long, device=new_xyz.device)
    dist = torch.full((new_xyz.shape[0], nsample), 1e5, device=new_xyz.device)
    for b in range(len(off) - 1):
        p = xyz[off[b]:off[b + 1]]
        k = min(nsample, p.shape[0])
        for s in range(noff[b], noff[b + 1], chunk):
            e = min(s + chunk, noff[b + 1])
            # exact (non-matmul) distances in the training step, so both variants pick the same
            # neighbours; cdist's default matmul form (faster, ~1e-4 off) for the knn workload
            mode = "donot_use_mm_for_euclid_dist" if exact else "use_mm_for_euclid_dist_if_necessary"
            d = torch.cdist(new_xyz[s:e], p, compute_mode=mode)
            v, i = d.topk(k, dim=1, largest=False)
            idx[s:e, :k] = i + off[b]
            dist[s:e, :k] = v
    return idx.int(), dist


def grouping_torch(idx, feat, xyz, new_xyz=None, with_xyz=False):  # Pointcept's own pure-torch grouping
    if new_xyz is None:
        new_xyz = xyz
    m, nsample, c = idx.shape[0], idx.shape[1], feat.shape[1]
    xyz = torch.cat([xyz, torch.zeros([1, 3]).to(xyz.device)], dim=0)
    feat = torch.cat([feat, torch.zeros([1, c]).to(feat.device)], dim=0)
    grouped_feat = feat[idx.view(-1).long(), :].view(m, nsample, c)
    if with_xyz:
        mask = torch.sign(idx + 1)
        grouped_xyz = xyz[idx.view(-1).long(), :].view(m, nsample, 3) - new_xyz.unsqueeze(1)
        grouped_xyz = torch.einsum("n s c, n s -> n s c", grouped_xyz, mask.to(grouped_xyz.dtype))
        return torch.cat((grouped_xyz, grouped_feat), -1)
    return grouped_feat


def segment_csr_torch(src, indptr, reduce="sum"):
    seg = torch.repeat_interleave(torch.arange(indptr.numel() - 1, device=src.device), torch.diff(indptr))
    red = {"sum": "sum", "mean": "mean", "min": "amin", "max": "amax"}[reduce]
    out = src.new_zeros((indptr.numel() - 1,) + tuple(src.shape[1:]))
    return out.scatter_reduce(0, seg.view(-1, *([1] * (src.dim() - 1))).expand_as(src), src, red, include_self=False)


def voxel_grid_torch(pos, size, batch, start=None, end=None):
    p = torch.cat([pos, batch.to(pos.dtype)[:, None]], 1)
    sz = torch.tensor([float(size)] * pos.shape[1] + [1.0], dtype=pos.dtype, device=pos.device)
    nv = (p.max(0).values / sz).long() + 1
    v = (p / sz).long()
    mult = torch.cat([torch.ones(1, dtype=torch.long, device=pos.device), torch.cumprod(nv, 0)[:-1]])
    return (v * mult).sum(1)


# --------------------------------------------------------------------------- timing


def stats(ts):
    return min(ts), statistics.median(ts)


def bench_step(points, repeats, device):
    use_vendored("pointcept", standins=True)
    import pcgeom.compat

    pcgeom.compat.enable_shims()
    try:
        import timm.layers  # noqa: F401
    except ImportError:
        import timm.models.layers as _layers
        sys.modules["timm.layers"] = _layers
    from pointcept.models.point_transformer_v2 import point_transformer_v2m2_base as m

    torch.manual_seed(0)
    model = m.PointTransformerV2(in_channels=6, num_classes=13).to(device)
    model.train()
    g = torch.Generator().manual_seed(0)
    coord = (torch.rand(2 * points, 3, generator=g) * torch.tensor([2.0, 2.0, 1.0])).to(device)
    feat = torch.rand(2 * points, 6, generator=g).to(device)
    offset = torch.tensor([points, 2 * points], device=device)
    originals = {k: getattr(m, k) for k in ("pointops", "segment_csr", "voxel_grid")}
    torch_ops = types.SimpleNamespace(knn_query=knn_query_torch, grouping=grouping_torch)

    def run(variant):
        timer = CallTimer(device)  # the replaced ops' forward calls
        if variant == "shims":
            po = types.SimpleNamespace(knn_query=timer.wrap(originals["pointops"].knn_query),
                                       grouping=timer.wrap(originals["pointops"].grouping))
            m.pointops, m.segment_csr, m.voxel_grid = po, timer.wrap(originals["segment_csr"]), timer.wrap(originals["voxel_grid"])
        else:
            po = types.SimpleNamespace(knn_query=timer.wrap(torch_ops.knn_query), grouping=timer.wrap(torch_ops.grouping))
            m.pointops, m.segment_csr, m.voxel_grid = po, timer.wrap(segment_csr_torch), timer.wrap(voxel_grid_torch)
        model.zero_grad()
        t0 = clock(device)
        out = model({"coord": coord, "feat": feat, "offset": offset})
        out.square().mean().backward()
        total = clock(device) - t0
        for k, v in originals.items():
            setattr(m, k, v)
        return total, timer.t, out.detach()

    a, b = run("shims"), run("pure-torch")  # warm-up, and the two must agree
    agree = (a[2] - b[2]).abs().max().item()
    print(f"max |shims - pure-torch| logits: {agree:.3g}" + ("" if agree < 1e-3 else "  (WARNING: the two variants disagree)"))
    res = {"shims": ([], []), "pure-torch": ([], [])}
    for _ in range(repeats):
        for v in res:
            tot, ops, _ = run(v)
            res[v][0].append(tot)
            res[v][1].append(ops)
    return res, agree


def bench_knn(repeats, torch_fraction, device):
    from pcgeom.compat import pointops

    g = torch.Generator().manual_seed(1)
    sizes = [50_000, 150_000, 80_000, 120_000, 60_000, 140_000, 100_000, 90_000]
    xyz = (torch.rand(sum(sizes), 3, generator=g) * torch.tensor([6.0, 6.0, 3.0])).contiguous().to(device)
    offset = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device=device)
    idx, _ = pointops.knn_query(16, xyz, offset)  # warm-up
    # the pure-torch baseline on every 1/fraction-th query of each cloud, scaled to all queries
    step = max(1, int(round(1 / torch_fraction)))
    starts = [0] + offset.tolist()[:-1]
    sub = torch.cat([torch.arange(s, e, step) for s, e in zip(starts, offset.tolist())]).to(device)
    sub_off = torch.tensor(np.cumsum([len(range(s, e, step)) for s, e in zip(starts, offset.tolist())]),
                           dtype=torch.int32, device=device)
    ti, _ = knn_query_torch(16, xyz, offset, xyz[sub], sub_off, exact=False)
    d_ref = (xyz[idx[sub].long()] - xyz[sub][:, None]).norm(dim=-1)
    d_t = (xyz[ti.long()] - xyz[sub][:, None]).norm(dim=-1)
    if not torch.allclose(d_ref, d_t, atol=1e-3):  # the matmul form is ~1e-4 off
        raise SystemExit(f"pcgeom and pure-torch knn distances differ: {(d_ref - d_t).abs().max():.3g}")
    from scipy.spatial import cKDTree

    xn = xyz.cpu().numpy()

    def ckdtree():
        for s, e in zip(starts, offset.tolist()):
            cKDTree(xn[s:e]).query(xn[s:e], k=16, workers=-1)

    # pcgeom and pure torch were warmed up above (the latter by the check); cKDTree needs none
    out = interleaved({"pcgeom": lambda: pointops.knn_query(16, xyz, offset),
                       "pure-torch": lambda: knn_query_torch(16, xyz, offset, xyz[sub], sub_off, exact=False),
                       "cKDTree": ckdtree}, repeats, warmup=False, device=device)
    out["pure-torch"] = [t * xyz.shape[0] / sub.shape[0] for t in out["pure-torch"]]  # to all queries
    return out, sizes, sub.shape[0] / xyz.shape[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=40_000, help="points per cloud in the PTv2 step (two clouds)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workload", choices=["step", "knn", "all"], default="all")
    ap.add_argument("--torch-fraction", type=float, default=0.02, help="share of the queries the pure-torch KNN is timed on")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (SciPy's cKDTree always runs on the CPU)")
    ap.add_argument("--out", default=None, help="also append the report (markdown) to this file")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    lines = []

    def say(line=""):
        print(line)
        lines.append(line)

    if args.threads:
        torch.set_num_threads(args.threads)
    import pcgeom

    info = pcgeom.backend_info()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    say(f"bm_pointcept: torch {torch.__version__}, {where}, "
        f"native kernels: {'yes' if info['extension_loaded'] else 'no (pure torch)'} ({time.strftime('%Y-%m-%d %H:%M')})")
    if args.workload in ("step", "all"):
        res, agree = bench_step(args.points, args.repeats, device)
        say(f"\nPT-v2m2 training step on {device.type}, 2 x {args.points} points (best / median of {args.repeats}, "
            f"seconds; max |shims - pure-torch| logits {agree:.2g})")
        say("| row | shims best | shims median | pure-torch best | pure-torch median | speed-up best | speed-up median |")
        say("|---|---|---|---|---|---|---|")
        for row, j in (("model (forward + backward)", 0), ("ops (knn_query, grouping, segment_csr, voxel_grid; forward calls)", 1)):
            sb, sm = stats(res["shims"][j])
            tb, tm = stats(res["pure-torch"][j])
            say(f"| {row} | {sb:.3f} | {sm:.3f} | {tb:.3f} | {tm:.3f} | {tb / sb:.2f}x | {tm / sm:.2f}x |")
    if args.workload in ("knn", "all"):
        out, sizes, frac = bench_knn(args.repeats, args.torch_fraction, device)
        say(f"\nknn_query(16) self-query on {device.type}, 8 packed clouds of {min(sizes)}..{max(sizes)} points "
            f"({sum(sizes)} total); pure torch timed on {frac:.1%} of the queries and scaled; cKDTree on the CPU")
        say("| method | best (s) | median (s) | pcgeom speed-up (best) | (median) |")
        say("|---|---|---|---|---|")
        pb, pm = stats(out["pcgeom"])
        for k, ts in out.items():
            b, md = stats(ts)
            say(f"| {k} | {b:.3f} | {md:.3f} | {b / pb:.2f}x | {md / pm:.2f}x |")
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
