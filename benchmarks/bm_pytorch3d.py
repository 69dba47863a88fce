"""pytorch3d's point ops: pcgeom's stand-in against pytorch3d's own compiled CPU kernels, on the CPU.

pytorch3d 9381c40's CPU extension builds against torch 2.13 from source (``FORCE_CUDA=0 python
setup.py build_ext --inplace`` in a checkout; see ``docs/guides/pytorch3d.md``).  Given such a
checkout (``--pytorch3d-src``, with ``pytorch3d/_C*.so`` in it), the peer of each row is the real
pytorch3d, imported from there and run as users run it:

* ``sample_farthest_points`` at 8 x 8192 -> 1024: its C++ CPU kernel;
* ``chamfer_distance`` at 8 x 2048 vs 8 x 2048: ``pytorch3d.loss.chamfer_distance`` (its compiled
  ``knn_points`` underneath);
* ``knn_points`` (8, 4096, 3) K=16: its CPU kernel (brute force over every pair);
* the self-KNN K=16 on 1,000,000 points (SuGaR / GaussianObject): its brute force does the same work
  for every query (all 10^6 points), so it is timed on the first ``--knn1m-peer-queries`` queries
  (default 10,000) and scaled to 10^6 queries; the table says so;
* ``estimate_pointcloud_normals`` K=50 on 200k points: upstream's function with its compiled
  ``knn_points``.

Before timing, each row checks that the two answers agree (indices equal, distances equal; normals on a
cloud scaled by 100, where upstream's float32 closed-form eigen solver is accurate -- see the guide).

Without a built checkout, the peers are pytorch3d's own pure-torch paths, run unmodified from the
checkout's sources: ``sample_farthest_points_naive`` and upstream's Python of
``estimate_pointcloud_normals`` with ``knn_points`` the stand-in's; Chamfer against the dense
``(N, P1, P2)`` pure-torch Chamfer; no KNN peer.  A row whose peer is not available says "not
measured" there.  Each function runs ``--repeats`` times after one warm-up; the table gives the best
and the median.  Usage::

    python benchmarks/bm_pytorch3d.py --pytorch3d-src /path/to/pytorch3d [--repeats 3] [--threads 2]
                                      [--rows fps,chamfer,knn,knn1m,normals] [--knn1m-peer-queries 10000]
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


def _compiled_pytorch3d(src):
    """``(pytorch3d.ops, pytorch3d.loss)`` of a checkout whose CPU extension is built, else ``None``.

    Imported from ``src`` under their own names; an installed pytorch3d, or pcgeom's stand-in, is
    never taken for it (the modules must come from ``src`` and ``pytorch3d._C`` must load).
    """
    import glob

    if not src or not glob.glob(os.path.join(src, "pytorch3d", "_C*.so")):
        return None
    for n in [n for n in sys.modules if n == "pytorch3d" or n.startswith("pytorch3d.")]:
        del sys.modules[n]
    sys.path.insert(0, src)
    p3d = importlib.import_module("pytorch3d")
    if not os.path.realpath(p3d.__file__).startswith(os.path.realpath(src)):
        raise RuntimeError(f"--pytorch3d-src {src}: imported pytorch3d from {p3d.__file__} instead")
    importlib.import_module("pytorch3d._C")
    return importlib.import_module("pytorch3d.ops"), importlib.import_module("pytorch3d.loss")


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
    ap.add_argument("--knn1m-peer-queries", type=int, default=10_000,
                    help="queries the compiled peer's brute-force self-KNN on 10^6 points is timed on (scaled to 10^6)")
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

    def row(name, ours, peer=None, peer_name=None, check=None, peer_scale=1.0):
        o = _time(ours, args.repeats)
        p = None
        if peer is not None:
            p = tuple(t * peer_scale for t in _time(peer, args.repeats))
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

    real = _compiled_pytorch3d(args.pytorch3d_src)
    if real is not None:
        r_ops, r_loss = real
        print(f"peer: pytorch3d's compiled CPU kernels from {args.pytorch3d_src}", flush=True)

    if "fps" in wanted:
        name = "sample_farthest_points 8 x 8192 -> 1024"
        if real is not None:
            def check():
                a, b = sample_farthest_points(x, K=1024), r_ops.sample_farthest_points(x, K=1024)
                assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0]), "FPS differs from pytorch3d's kernel"

            row(name, lambda: sample_farthest_points(x, K=1024), lambda: r_ops.sample_farthest_points(x, K=1024),
                "pytorch3d's C++ CPU kernel", check)
        elif args.pytorch3d_src:
            naive = _upstream_fps_naive(args.pytorch3d_src)

            def check():
                assert torch.equal(sample_farthest_points(x, K=1024)[1], naive(x, K=1024)[1]), "FPS indices differ"

            row(name, lambda: sample_farthest_points(x, K=1024),
                lambda: naive(x, K=1024), "upstream sample_farthest_points_naive", check)
        else:
            row(name, lambda: sample_farthest_points(x, K=1024), peer_name="upstream sample_farthest_points_naive")

    if "chamfer" in wanted:
        name = "chamfer_distance 8 x 2048 vs 8 x 2048"
        if real is not None:
            def check_cham():
                ours = chamfer_distance(a, b, point_reduction=None, batch_reduction=None)[0]
                ref = r_loss.chamfer_distance(a, b, point_reduction=None, batch_reduction=None)[0]
                assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1]), "Chamfer terms differ"

            row(name, lambda: chamfer_distance(a, b), lambda: r_loss.chamfer_distance(a, b),
                "pytorch3d.loss.chamfer_distance (compiled knn_points)", check_cham)
        else:
            def check_cham():
                ours = chamfer_distance(a, b, point_reduction=None, batch_reduction=None)[0]
                ref = _dense_chamfer(a, b)[1]
                torch.testing.assert_close(ours[0], ref[0]), torch.testing.assert_close(ours[1], ref[1])

            row(name, lambda: chamfer_distance(a, b),
                lambda: _dense_chamfer(a, b), "dense pure-torch Chamfer (N, P1, P2)", check_cham)

    if "knn" in wanted:
        name = "knn_points (8, 4096, 3) K=16"
        if real is not None:
            def check_knn():
                u, v = knn_points(p, p, K=16), r_ops.knn_points(p, p, K=16)
                assert torch.equal(u.dists, v.dists) and torch.equal(u.idx, v.idx), "KNN differs"

            row(name, lambda: knn_points(p, p, K=16), lambda: r_ops.knn_points(p, p, K=16),
                "pytorch3d's CPU kernel (brute force)", check_knn)
        else:
            row(name, lambda: knn_points(p, p, K=16))
    if "knn1m" in wanted:
        name = "self-KNN K=16, 1,000,000 points"
        if real is not None:
            q = args.knn1m_peer_queries
            head = big[:, :q]

            def check_big():
                u, v = knn_points(head, big, K=16), r_ops.knn_points(head, big, K=16)
                assert torch.equal(u.dists, v.dists) and torch.equal(u.idx, v.idx), "KNN differs"

            scale = big.shape[1] / q
            row(name, lambda: knn_points(big, big, K=16),
                lambda: r_ops.knn_points(head, big, K=16), f"pytorch3d's CPU kernel, timed on {q:,} of the queries "
                f"x {scale:g} (brute force: the same work per query)", check_big, peer_scale=scale)
        else:
            row(name, lambda: knn_points(big, big, K=16))

    if "normals" in wanted:
        name = "estimate_pointcloud_normals K=50, 200,000 points"
        upstream = r_ops.estimate_pointcloud_normals if real is not None else _upstream_normals(args.pytorch3d_src)
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
            peer_name = ("pytorch3d.ops.estimate_pointcloud_normals (compiled knn_points)" if real is not None else
                         "upstream's Python (points_normals.py + utils.py + symeig3x3.py), knn_points the stand-in's")
            row(name, lambda: estimate_pointcloud_normals(sphere, 50), lambda: upstream(sphere, 50), peer_name)

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
