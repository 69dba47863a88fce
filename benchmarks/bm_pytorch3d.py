"""pytorch3d's point ops: pcgeom's stand-in against pytorch3d's own pure-torch paths, on the CPU.

pytorch3d's compiled CPU extension does not build against this torch (see
``docs/guides/pytorch3d.md``), so the peer of each row is the pure-torch code
pytorch3d itself ships, run unmodified:

* ``sample_farthest_points`` at 8 x 8192 -> 1024: upstream's
  ``sample_farthest_points_naive``, read from a pytorch3d checkout
  (``--pytorch3d-src``; the function's source is taken from
  ``pytorch3d/ops/sample_farthest_points.py`` and run with the stand-in's
  ``masked_gather``, because that module imports the missing ``_C`` at the top);
* ``chamfer_distance`` at 8 x 2048 vs 8 x 2048: pytorch3d has no pure-torch
  Chamfer (its ``loss/chamfer.py`` calls the compiled ``knn_points``, and the
  naive one of its tests loops over every pair in Python: hours at this size),
  so the peer is the dense pure-torch Chamfer users write without it: the
  ``(N, P1, P2)`` matrix of squared distances and its two minima (the stand-in
  never holds that matrix);
* ``knn_points`` (8, 4096, 3) K=16 and the self-KNN K=16 on 1,000,000 points
  (SuGaR / GaussianObject): pytorch3d has no pure-torch KNN, so these rows
  give the stand-in's time alone;
* ``estimate_pointcloud_normals`` K=50 on 200k points: upstream's own Python,
  unmodified -- ``ops/points_normals.py``, ``ops/utils.py`` and
  ``common/workaround/symeig3x3.py`` loaded from the checkout -- whose one
  compiled call, ``knn_points``, is served by the stand-in's (pcgeom.knn), so
  both sides spend the same KNN time.  The script reports how far the two
  answers are apart before timing.

A row whose peer is not available (no ``--pytorch3d-src`` and no installed
pytorch3d) says "not measured" there.  An installed pytorch3d (not the
stand-in) is used for the normals peer as it is.  Each function runs
``--repeats`` times after one warm-up; the table gives the best and the
median.  Usage::

    python benchmarks/bm_pytorch3d.py --pytorch3d-src /path/to/pytorch3d [--repeats 3] [--threads 2]
                                      [--rows fps,chamfer,knn,knn1m,normals]
                                      [--out benchmarks/RESULTS-pytorch3d.md]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import statistics
import sys
import time
import types

import torch

def _time(fn, repeats):
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out), statistics.median(out)


def _upstream_fps_naive(src):
    """pytorch3d's own ``sample_farthest_points_naive``, compiled from its file (whose top imports ``_C``)."""
    from pcgeom.compat.pytorch3d.ops.utils import masked_gather

    path = os.path.join(src, "pytorch3d", "ops", "sample_farthest_points.py")
    tree = ast.parse(open(path).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "sample_farthest_points_naive")
    ns = {}
    exec("from random import randint\nfrom typing import List, Optional, Tuple, Union\nimport torch\n", ns)
    ns["masked_gather"] = masked_gather
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), ns)
    return ns["sample_farthest_points_naive"]


def _upstream_normals(src):
    """pytorch3d's own ``estimate_pointcloud_normals`` from a checkout, with ``knn_points`` the stand-in's.

    An installed pytorch3d (not pcgeom's stand-in) is returned as it is.  Otherwise the three upstream
    files the function runs are loaded unmodified under their own names (``pytorch3d.ops.utils`` ...), for
    the time of loading only: ``sys.modules`` is restored afterwards.  Returns ``None`` without a peer.
    """
    if not src:
        try:
            from pytorch3d.ops import estimate_pointcloud_normals
        except ImportError:
            return None
        if getattr(sys.modules.get("pytorch3d.ops"), "__pcgeom_shim__", None) is not None:
            return None
        return estimate_pointcloud_normals
    from pcgeom.compat.pytorch3d.ops import knn as standin_knn

    names = ["pytorch3d", "pytorch3d.common", "pytorch3d.common.workaround", "pytorch3d.common.workaround.symeig3x3",
             "pytorch3d.ops", "pytorch3d.ops.knn", "pytorch3d.ops.utils", "pytorch3d.ops.points_normals"]
    saved = {n: sys.modules.pop(n) for n in names if n in sys.modules}

    def package(name):
        mod = types.ModuleType(name)
        mod.__path__ = []
        sys.modules[name] = mod
        return mod

    def load(name, rel):
        spec = importlib.util.spec_from_file_location(name, os.path.join(src, "pytorch3d", *rel.split("/")))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod

    try:
        for n in names[:3] + names[4:5]:
            package(n)
        sys.modules["pytorch3d.common.workaround"].symeig3x3 = load(
            "pytorch3d.common.workaround.symeig3x3", "common/workaround/symeig3x3.py").symeig3x3
        sys.modules["pytorch3d.ops.knn"] = standin_knn
        load("pytorch3d.ops.utils", "ops/utils.py")
        return load("pytorch3d.ops.points_normals", "ops/points_normals.py").estimate_pointcloud_normals
    finally:
        for n in names:
            sys.modules.pop(n, None)
        sys.modules.update(saved)


def _dense_chamfer(a, b):
    """Mean-reduced squared Chamfer from the full ``(N, P1, P2)`` distance matrix, per-point terms too."""
    d = (a[:, :, None, :] - b[:, None, :, :]).square().sum(-1)
    ta, tb = d.min(2).values, d.min(1).values
    return (ta.mean(1) + tb.mean(1)).mean(), (ta, tb)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pytorch3d-src", default=os.environ.get("PYTORCH3D_SRC"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="fps,chamfer,knn,knn1m,normals",
                    help="comma-separated subset of fps, chamfer, knn, knn1m, normals")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    wanted = set(args.rows.split(","))
    unknown = wanted - {"fps", "chamfer", "knn", "knn1m", "normals"}
    if unknown:
        ap.error(f"--rows: unknown row(s) {sorted(unknown)}, expected a subset of fps,chamfer,knn,knn1m,normals")
    torch.set_num_threads(args.threads)
    from pcgeom.compat.pytorch3d.loss import chamfer_distance
    from pcgeom.compat.pytorch3d.ops import estimate_pointcloud_normals, knn_points, sample_farthest_points

    g = torch.Generator().manual_seed(0)
    rows = []

    def row(name, ours, peer=None, peer_name=None, check=None):
        o = _time(ours, args.repeats)
        p = _time(peer, args.repeats) if peer is not None else None
        if check is not None:
            check()
        rows.append((name, o, p, peer_name))
        print(rows[-1], flush=True)

    # every input is drawn, in this order, whichever rows run, so that a row sees the same data alone
    x = torch.rand(8, 8192, 3, generator=g)
    a, b = torch.rand(8, 2048, 3, generator=g), torch.rand(8, 2048, 3, generator=g)
    p = torch.rand(8, 4096, 3, generator=g)
    big = torch.rand(1, 1_000_000, 3, generator=g)
    sphere = torch.nn.functional.normalize(torch.randn(1, 200_000, 3, generator=g), dim=2)
    sphere = sphere + 0.01 * torch.randn(1, 200_000, 3, generator=g)  # a noisy unit sphere

    if "fps" in wanted:
        if args.pytorch3d_src:
            naive = _upstream_fps_naive(args.pytorch3d_src)

            def check():
                assert torch.equal(sample_farthest_points(x, K=1024)[1], naive(x, K=1024)[1]), "FPS indices differ"

            row("sample_farthest_points 8 x 8192 -> 1024", lambda: sample_farthest_points(x, K=1024),
                lambda: naive(x, K=1024), "upstream sample_farthest_points_naive", check)
        else:
            row("sample_farthest_points 8 x 8192 -> 1024", lambda: sample_farthest_points(x, K=1024),
                peer_name="upstream sample_farthest_points_naive")

    if "chamfer" in wanted:
        def check_cham():
            ours = chamfer_distance(a, b, point_reduction=None, batch_reduction=None)[0]
            ref = _dense_chamfer(a, b)[1]
            torch.testing.assert_close(ours[0], ref[0]), torch.testing.assert_close(ours[1], ref[1])

        row("chamfer_distance 8 x 2048 vs 8 x 2048", lambda: chamfer_distance(a, b),
            lambda: _dense_chamfer(a, b), "dense pure-torch Chamfer (N, P1, P2)", check_cham)

    if "knn" in wanted:
        row("knn_points (8, 4096, 3) K=16", lambda: knn_points(p, p, K=16))
    if "knn1m" in wanted:
        row("self-KNN K=16, 1,000,000 points", lambda: knn_points(big, big, K=16))

    if "normals" in wanted:
        name = "estimate_pointcloud_normals K=50, 200,000 points"
        upstream = _upstream_normals(args.pytorch3d_src)
        if upstream is None:
            row(name, lambda: estimate_pointcloud_normals(sphere, 50), peer_name="upstream's Python (points_normals.py)")
        else:
            # Upstream's closed-form float32 solver adds float32's eps to cross products of the covariance
            # rows, absolutely: on neighbourhoods ~0.03 across (this cloud) its normals are off by degrees.
            # So the answers are compared on 20k of the points scaled by 100, where both solvers are accurate.
            check = sphere[:, :20_000] * 100
            ours, theirs = estimate_pointcloud_normals(check, 50)[0], upstream(check, 50)[0]
            cos = (ours * theirs).sum(-1)
            assert bool((cos > 0.9999).all()), f"normals differ from upstream's: min cos {float(cos.min())}"
            row(name, lambda: estimate_pointcloud_normals(sphere, 50), lambda: upstream(sphere, 50),
                "upstream's Python (points_normals.py + utils.py + symeig3x3.py), knn_points the stand-in's")

    lines = ["| workload | stand-in best / median (s) | peer | peer best / median (s) | stand-in / peer |",
             "|---|---|---|---|---|"]
    for name, o, pp, pn in rows:
        # a peer that exists but is not available here is "not measured"; "-" where pytorch3d has none
        missing = "-" if pn is None else "not measured"
        ratio = f"{o[0] / pp[0]:.3f}" if pp else missing
        peer = f"{pp[0]:.3f} / {pp[1]:.3f}" if pp else missing
        lines.append(f"| {name} | {o[0]:.3f} / {o[1]:.3f} | {pn or '-'} | {peer} | {ratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        open(args.out, "w").write(text)


if __name__ == "__main__":
    main()
