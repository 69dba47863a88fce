"""``pcgeom preprocess``: voxel subsampling, outlier removal and normals for PLY files.

Shares group's input collection, output-safety rule (:mod:`pcgeom.io.output`) and report format.
"""

from __future__ import annotations

import argparse
import sys

from pcgeom.cli.common import (backend_line, device_name, failure, finite_float, path_arg, pick_device,
                               positive_int, read_typed, start_file_run, memory_gb, default_memory_gb)

HELP = "voxel-subsample, remove outliers from and estimate normals of PLY files"
DESCRIPTION = (
    "For every INPUT (a .ply file, or a folder searched recursively for .ply files) writes "
    "OUT/<name>.ply after, in this order: --voxel (pcgeom.grid_subsample, the first point per voxel), "
    "--remove-statistical (Open3D's remove_statistical_outlier), --remove-radius (Open3D's "
    "remove_radius_outlier) and --normals (pcgeom.estimate_normals, written as nx, ny, nz; oriented "
    "towards --viewpoint if given).  Colours, normals and other scalar vertex properties of the kept points "
    "are kept, each in its own PLY type with its exact value (coordinates too: --float64 only sets the "
    "precision computed in); new normals are written at the computed precision. "
    "Outputs are written to a temporary file and moved into place when complete; existing outputs are "
    "never replaced without --overwrite.  A bad file is reported and skipped; the exit status is 1 if "
    "any file failed.  A file whose in-memory run would need more than --memory (estimated from its "
    "header's vertex count and the steps asked for) is processed in spatial tiles instead "
    "(pcgeom.streaming.preprocess_streamed): the same output file, byte for byte, in bounded memory."
)


def add_arguments(p) -> None:
    p.add_argument("inputs", nargs="+", type=path_arg, metavar="INPUT", help="PLY files or folders of PLY files")
    p.add_argument("--out", type=path_arg, required=True, help="output folder (created if needed)")
    p.add_argument("--voxel", type=_positive_float, default=None, metavar="SIZE", help="voxel size of grid_subsample")
    p.add_argument("--remove-statistical", type=_pair((positive_int, _positive_float), "K,STD such as 20,2.0"),
                   default=None, metavar="K,STD", help="statistical outlier removal: K neighbours, STD ratio")
    p.add_argument("--remove-radius", type=_pair((_positive_float, positive_int), "R,MIN such as 0.05,16"),
                   default=None, metavar="R,MIN", help="radius outlier removal: radius R, at least MIN neighbours")
    p.add_argument("--normals", type=positive_int, default=None, metavar="K", help="estimate normals from K neighbours")
    p.add_argument("--viewpoint", type=_pair((finite_float, finite_float, finite_float), "x,y,z such as 0,0,10"), default=None,
                   metavar="x,y,z", help="orient the normals towards this point")
    p.add_argument("--float64", action="store_true", help="compute in float64 (Open3D's precision)")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs (never an input)")
    p.add_argument("--device", type=device_name, default="auto", help="cpu, cuda, ... (default: cuda when available)")
    p.add_argument("--memory", type=memory_gb, default=None, metavar="GB",
                   help="memory budget in GB (10^9 bytes): a file whose in-memory run would need more is streamed "
                        "in spatial tiles, with the same output (default: half the memory available when the "
                        "command starts, MemAvailable / 2)")
    p.add_argument("--block-points", type=positive_int, default=None, metavar="N",
                   help="stream every file, in tiles of N points (for testing and tuning; default: stream only "
                        "files larger than --memory, with the largest tile it holds)")


def _pair(kinds, what: str):
    """argparse type for "A,B" with the given converters (e.g. ``--remove-statistical 20,2.0``)."""

    def parse(text: str):
        parts = text.split(",")
        try:
            if len(parts) != len(kinds):
                raise ValueError
            return tuple(kind(part) for kind, part in zip(kinds, parts))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None

    return parse


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text}")
    return v


def _preprocess_one(src, target, args, device):
    """Preprocesses one file into ``target``.

    Returns ``(status, points read, points written)``: status is "done" or the reason it failed; a file
    that fails after it was read still counts its points as read.
    """
    import torch

    import pcgeom
    from pcgeom.io import write_ply
    from pcgeom.io.output import write_atomic
    from pcgeom.streaming.preprocess import plan_preprocess, preprocess_streamed

    if target.exists() and not args.overwrite:
        return f"output exists: {target} (pass --overwrite to replace)", 0, 0
    n_read = 0
    try:
        budget = int((args.memory if args.memory is not None else default_memory_gb()) * 1e9)
        plan = plan_preprocess(src, budget, statistical=args.remove_statistical, radius=args.remove_radius,
                               normals=args.normals, float64=args.float64, block_points=args.block_points)
        if plan.streamed:
            report: dict = {}
            try:
                done = preprocess_streamed(src, target, voxel=args.voxel, statistical=args.remove_statistical,
                                           radius=args.remove_radius, normals=args.normals,
                                           viewpoint=args.viewpoint, float64=args.float64,
                                           block_points=plan.block_points, device=device,
                                           overwrite=args.overwrite, report=report)
            finally:
                n_read = report.get("points_read", 0)
            return "done", done.points_read, done.points_written
        types, cloud = read_typed(src)
        n_read = len(cloud.points)
        compute = torch.float64 if args.float64 else torch.float32
        pts = cloud.points.to(compute)  # what is computed on; cloud.points keeps the stored values
        if not torch.isfinite(pts).all():
            raise ValueError(f"{int((~torch.isfinite(pts).all(1)).sum())} points have NaN or infinite coordinates")
        if len(pts) == 0:
            raise ValueError("the file holds no points")
        keep = torch.arange(len(pts))
        p = pts.to(device)
        if args.voxel is not None:
            sub = pcgeom.grid_subsample(p, args.voxel)
            keep, p = keep[sub.index.cpu()], p[sub.index]
        if args.remove_statistical is not None:
            k, std = args.remove_statistical
            m = pcgeom.remove_statistical_outliers(p, k, std)
            keep, p = keep[m.cpu()], p[m]
        if args.remove_radius is not None:
            r, n_min = args.remove_radius
            m = pcgeom.remove_radius_outliers(p, r, n_min)
            keep, p = keep[m.cpu()], p[m]
        normals = None if cloud.normals is None else cloud.normals[keep]
        props = {name: v[keep] for name, v in cloud.properties.items()}
        out_types = dict(types)
        if args.normals is not None:
            if len(p) == 0:
                raise ValueError("no points left for --normals after outlier removal")
            normals = pcgeom.estimate_normals(p, args.normals, viewpoint=args.viewpoint).normals.cpu()
            for c in ("nx", "ny", "nz"):  # replaced by the new normals, written at the computation's precision
                out_types.pop(c, None)
                props.pop(c, None)
        colors = None if cloud.colors is None else cloud.colors[keep]
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, lambda tmp: write_ply(tmp, cloud.points[keep], colors=colors, normals=normals,
                                                   properties=props, types=out_types),
                     overwrite=args.overwrite)
        return "done", n_read, len(keep)
    except Exception as exc:  # one bad file (even one too large for memory) is reported; the run goes on
        return failure(exc, src), n_read, 0


def run(args) -> int:
    from pathlib import Path

    from tqdm import tqdm

    if not any(v is not None for v in (args.voxel, args.remove_statistical, args.remove_radius, args.normals)):
        print("pcgeom preprocess: nothing to do: give at least one of --voxel, --remove-statistical, "
              "--remove-radius, --normals", file=sys.stderr)
        return 2
    if args.viewpoint is not None and args.normals is None:
        print("pcgeom preprocess: --viewpoint orients the normals of --normals K; give --normals too", file=sys.stderr)
        return 2
    device = pick_device(args.device)
    out = Path(args.out)
    start = start_file_run("pcgeom preprocess", args.inputs, out)
    if isinstance(start, list):
        for line in start:
            print(line, file=sys.stderr)
        return 1
    files, failures, guard = start
    seen: dict = {}
    done = n_in = n_out = 0
    for src, stem in tqdm(files, desc="preprocessing", unit="file", disable=None, file=sys.stderr):
        target = out / stem.parent / f"{stem.name}.ply"
        if target in seen:
            failures.append((str(src), f"its output {target} would collide with that of {seen[target]}; "
                             "process them separately"))
            continue
        seen[target] = src
        try:
            guard.check("pcgeom preprocess", target)
        except ValueError as exc:
            failures.append((str(src), str(exc).removeprefix("pcgeom preprocess: ")))
            continue
        status, n_read, n_written = _preprocess_one(src, target, args, device)
        n_in += n_read
        n_out += n_written
        if status == "done":
            done += 1
        else:
            failures.append((str(src), status))
    steps = [name for name, v in (("voxel", args.voxel), ("statistical", args.remove_statistical),
                                  ("radius", args.remove_radius), ("normals", args.normals)) if v is not None]
    print(f"pcgeom preprocess: {done} of {len(files)} file{'s' if len(files) != 1 else ''} written into {out} "
          f"({' + '.join(steps)}; {n_in:,} points read, {n_out:,} written; {backend_line(device)})")
    if failures:
        print(f"pcgeom preprocess: {len(failures)} failed:", file=sys.stderr)
        for name, why in failures:
            print(f"  {name}: {why}", file=sys.stderr)
        return 1
    return 0
