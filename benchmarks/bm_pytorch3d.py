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
  give the stand-in's time alone.

Each function runs ``--repeats`` times after one warm-up; the table gives the
best and the median.  Usage::

    python benchmarks/bm_pytorch3d.py --pytorch3d-src /path/to/pytorch3d [--repeats 3] [--threads 2]
                                      [--out benchmarks/RESULTS-pytorch3d.md]
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import time

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
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from pcgeom.compat.pytorch3d.loss import chamfer_distance
    from pcgeom.compat.pytorch3d.ops import knn_points, sample_farthest_points

    g = torch.Generator().manual_seed(0)
    rows = []

    def row(name, ours, peer=None, peer_name="-", check=None):
        o = _time(ours, args.repeats)
        p = _time(peer, args.repeats) if peer is not None else None
        if check is not None:
            check()
        rows.append((name, o, p, peer_name))
        print(rows[-1], flush=True)

    x = torch.rand(8, 8192, 3, generator=g)
    if args.pytorch3d_src:
        naive = _upstream_fps_naive(args.pytorch3d_src)

        def check():
            assert torch.equal(sample_farthest_points(x, K=1024)[1], naive(x, K=1024)[1]), "FPS indices differ"

        row("sample_farthest_points 8 x 8192 -> 1024", lambda: sample_farthest_points(x, K=1024),
            lambda: naive(x, K=1024), "upstream sample_farthest_points_naive", check)
    else:
        row("sample_farthest_points 8 x 8192 -> 1024", lambda: sample_farthest_points(x, K=1024))

    a, b = torch.rand(8, 2048, 3, generator=g), torch.rand(8, 2048, 3, generator=g)

    def check_cham():
        ours = chamfer_distance(a, b, point_reduction=None, batch_reduction=None)[0]
        ref = _dense_chamfer(a, b)[1]
        torch.testing.assert_close(ours[0], ref[0]), torch.testing.assert_close(ours[1], ref[1])

    row("chamfer_distance 8 x 2048 vs 8 x 2048", lambda: chamfer_distance(a, b), lambda: _dense_chamfer(a, b),
        "dense pure-torch Chamfer (N, P1, P2)", check_cham)

    p = torch.rand(8, 4096, 3, generator=g)
    row("knn_points (8, 4096, 3) K=16", lambda: knn_points(p, p, K=16))
    big = torch.rand(1, 1_000_000, 3, generator=g)
    row("self-KNN K=16, 1,000,000 points", lambda: knn_points(big, big, K=16))

    lines = ["| workload | stand-in best / median (s) | peer | peer best / median (s) | stand-in / peer |",
             "|---|---|---|---|---|"]
    for name, o, pp, pn in rows:
        ratio = f"{o[0] / pp[0]:.3f}" if pp else "-"
        peer = f"{pp[0]:.3f} / {pp[1]:.3f}" if pp else "-"
        lines.append(f"| {name} | {o[0]:.3f} / {o[1]:.3f} | {pn} | {peer} | {ratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        open(args.out, "w").write(text)


if __name__ == "__main__":
    main()
