"""``pcgeom demo``: group a bundled scan into patches, print the timings, write a PLY and a picture."""

from __future__ import annotations

import argparse
import sys
import time

from pcgeom.cli.common import (backend_line, device_name, labelled_colors, patch_labels, path_arg, pick_device,
                               plan_outputs, positive_int)

HELP = "group a bundled real scan into patches; write a coloured PLY and a PNG picture"
DESCRIPTION = (
    "Loads a bundled scan (the Stanford Bunny by default), splits it into patches with "
    "farthest point sampling + KNN (pcgeom.group_patches), prints timings and the backend in use, and "
    "writes OUT/<scan>_patches.ply (points coloured by patch) and OUT/<scan>_patches.png (the picture)."
)


def add_arguments(p) -> None:
    p.add_argument("--out", type=path_arg, default="pcgeom-demo", help="output folder (default: pcgeom-demo)")
    p.add_argument("--overwrite", action="store_true", help="replace outputs left by an earlier run")
    p.add_argument("--scan", default="bunny", choices=["armadillo", "bunny", "chinese_dragon", "kitten"],
                   help="bundled scan (default: bunny)")
    p.add_argument("--n-points", type=positive_int, default=16384, help="points drawn from the scan (default: 16384)")
    p.add_argument("--centers", type=positive_int, default=32, help="number of patches G (default: 32)")
    p.add_argument("--k", type=positive_int, default=256, help="neighbours per patch (default: 256)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the point subset (default: 0)")
    p.add_argument("--device", type=device_name, default="auto", help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    p.add_argument("--renderer", default="auto", choices=["auto", "open3d", "matplotlib"],
                   help="picture backend (default: Open3D when installed, else matplotlib)")
    p.add_argument("--size", type=_size, default=(1024, 768), help="picture size WIDTHxHEIGHT (default: 1024x768)")



def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT such as 1024x768, got {text!r}") from None
    if not (16 <= w <= 8192 and 16 <= h <= 8192):  # what render_neighbourhoods draws
        raise argparse.ArgumentTypeError(f"expected WIDTH and HEIGHT from 16 to 8192, got {text!r}")
    return w, h


def _seed(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not -(2**63) <= v < 2**64:  # what torch.Generator.manual_seed takes
        raise argparse.ArgumentTypeError(f"expected an integer in [-2**63, 2**64), got {v}")
    return v


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device, repeat: int = 5):
    """(result, median seconds) after one untimed warm-up call."""
    fn()
    _sync(device)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return out, sorted(times)[len(times) // 2]


def run(args) -> int:
    from pathlib import Path

    import pcgeom
    import pcgeom.data
    from pcgeom.io import write_ply
    from pcgeom.io.output import write_atomic
    from pcgeom.vis import render_neighbourhoods

    out = Path(args.out)
    ply_path = out / f"{args.scan}_patches.ply"
    png_path = out / f"{args.scan}_patches.png"
    guard = plan_outputs("pcgeom demo", out, [(pcgeom.data.path(args.scan), None)])
    try:
        if isinstance(guard, str):
            raise ValueError(guard)
        for t in (ply_path, png_path):
            guard.check("pcgeom demo", t)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    existing = [str(p) for p in (ply_path, png_path) if p.exists()]
    if existing and not args.overwrite:
        print(
            f"pcgeom demo: {' and '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; "
            f"pass --overwrite to replace, or --out OTHER_DIR",
            file=sys.stderr,
        )
        return 1
    device = pick_device(args.device)
    print(f"pcgeom {pcgeom.__version__} demo")
    print(f"backend   {backend_line(device)}")

    t0 = time.perf_counter()
    full = pcgeom.data.path(args.scan)
    n_total = len(pcgeom.data.load(args.scan))
    if args.n_points > n_total:
        print(f"pcgeom demo: --n-points {args.n_points} exceeds the {n_total:,} points of scan {args.scan}",
              file=sys.stderr)
        return 1
    points, normals = pcgeom.data.load(args.scan, n_points=args.n_points, seed=args.seed, return_normals=True)
    t_load = time.perf_counter() - t0
    G, k = args.centers, args.k
    if G > len(points) or k > len(points):
        print(f"pcgeom demo: --centers {G} and --k {k} must not exceed the {len(points)} points", file=sys.stderr)
        return 1
    print(f"data      {args.scan}: {len(points):,} of {n_total:,} points ({full.name}, bundled), loaded in {1e3 * t_load:.1f} ms")

    batch = points.to(device)[None]
    centre_idx, t_fps = _timed(lambda: pcgeom.farthest_point_sample(batch, G), device)
    centres = batch[0, centre_idx[0]][None]
    _, t_knn = _timed(lambda: pcgeom.knn(centres, batch, k), device)
    (_, ctr, _, idx), t_group = _timed(lambda: pcgeom.group_patches(batch, G, k, return_index=True), device)
    print(f"group     {G} patches x {k} neighbours (median of 5 runs after a warm-up):")
    print(f"            farthest_point_sample  {1e3 * t_fps:8.2f} ms   ({G} centres of {len(points):,} points)")
    print(f"            knn                    {1e3 * t_knn:8.2f} ms   ({k} neighbours of each centre)")
    print(f"            group_patches          {1e3 * t_group:8.2f} ms   (both + gather, as Point-MAE's Group)")

    out.mkdir(parents=True, exist_ok=True)
    idx_cpu, ctr_cpu = idx[0].cpu(), ctr[0].cpu()
    labels = patch_labels(len(points), idx_cpu)
    t0 = time.perf_counter()
    write_atomic(ply_path, lambda tmp: write_ply(tmp, points, colors=labelled_colors(labels), normals=normals,
                                                 properties={"patch": labels}), overwrite=args.overwrite)
    t_ply = time.perf_counter() - t0
    print(f"wrote     {ply_path}  ({len(points):,} points coloured by patch, 'patch' property) in {1e3 * t_ply:.1f} ms")
    t0 = time.perf_counter()
    try:
        rendered = []
        write_atomic(png_path, lambda tmp: rendered.append(render_neighbourhoods(
            points, ctr_cpu, idx_cpu, tmp, size=args.size, backend=args.renderer)), overwrite=args.overwrite)
        rendered = rendered[0]
    except (ImportError, RuntimeError) as exc:
        print(f"pcgeom demo: no picture: {exc}", file=sys.stderr)
        return 1
    t_png = time.perf_counter() - t0
    how = "Open3D, offscreen" if rendered.backend == "open3d" else "matplotlib (Agg)"
    if rendered.backend == "matplotlib" and args.renderer == "auto":
        how += '; pip install "pcgeom[vis]" for Open3D'
    print(f"wrote     {png_path}  ({args.size[0]}x{args.size[1]}, {how}) in {1e3 * t_png:.0f} ms")
    return 0
