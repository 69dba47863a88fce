"""``pcgeom group``: PLY files into Point-MAE patches (FPS + KNN), one process or split across torchrun ranks.

Each file's outputs are written into a private folder next to them and moved into place when complete
(the ``.pt`` last), so a killed run leaves no half-written output; under torchrun every rank plans the
whole sorted input list, processes every world-th file from its rank, and rank 0 prints the report of all.
"""

from __future__ import annotations

import sys

from pcgeom.cli.common import (backend_line, device_name, failure, labelled_colors, patch_labels, path_arg,
                               pick_device, positive_int, read_typed, start_file_run, memory_gb,
                               default_memory_gb)

HELP = "group PLY files into patches (FPS + KNN); write coloured PLYs, tensors and optional PNGs"
DESCRIPTION = (
    "For every INPUT (a .ply file, or a folder searched recursively for .ply files) writes "
    "OUT/<name>_patches.ply (the points with their normals and other scalar vertex properties, each in its "
    "own PLY type, coloured by patch, with an int 'patch' property), OUT/<name>_patches.pt "
    "(torch.load-able dict of centers (G,3), center_idx (G,), idx (G,k), neighborhoods (G,k,3)) and with "
    "--png OUT/<name>_patches.png.  Existing outputs are never replaced without --overwrite.  A bad file is "
    "reported and skipped; the exit status is 1 if any file failed.  Under torchrun "
    "(torchrun --nproc-per-node N -m pcgeom group ...) the files are split across the ranks, finished "
    "files are skipped on a rerun, and rank 0 prints the report of all ranks.  A file whose in-memory run would "
    "need more than --memory (estimated from its header) is grouped streamed, in chunks, with the same outputs."
)


def add_arguments(p) -> None:
    p.add_argument("inputs", nargs="+", type=path_arg, metavar="INPUT", help="PLY files or folders of PLY files")
    p.add_argument("--centers", type=positive_int, required=True, help="number of patches G per cloud")
    p.add_argument("--k", type=positive_int, required=True, help="neighbours per patch")
    p.add_argument("--out", type=path_arg, required=True, help="output folder (created if needed)")
    p.add_argument("--png", action="store_true", help="also render a picture of each cloud's patches")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs (never an input)")
    p.add_argument("--resume", action="store_true",
                   help="skip inputs whose outputs an earlier run with the same --centers/--k finished and redo "
                   "the rest (always on under torchrun)")
    p.add_argument("--device", type=device_name, default="auto", help="cpu, cuda, ... (default: cuda when available; "
                   "under torchrun each rank takes the GPU of its LOCAL_RANK)")
    p.add_argument("--renderer", default="auto", choices=["auto", "open3d", "matplotlib"], help="picture backend for --png")
    p.add_argument("--memory", type=memory_gb, default=None, metavar="GB",
                   help="memory budget in GB (default: half of the memory available when the run starts).  A file "
                   "whose in-memory run would need more (its vertex count x (2 x its row size + 40) bytes, from the "
                   "header) is grouped streamed, with the same outputs, in about 48 bytes a point plus chunks; --png "
                   "then draws at most 200,000 points plus the patches.  Python and torch take ~0.25 GB on top; under "
                   "torchrun the budget is each rank's")


def torchrun_ranks() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) when launched by torchrun (its environment variables), else None."""
    import os

    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return None
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))


def rank_share(n_files: int, rank: int, world: int) -> list[int]:
    """The positions in the sorted input list that ``rank`` processes: every world-th, from its rank.

    Deterministic (the input list is sorted the same way on every rank) and balanced within one file.
    """
    return list(range(rank, n_files, world))


def _group_one(src, base, targets, args, device, resume: bool, budget: float):
    """Groups one file.  Returns "done", "skipped" (resume: finished earlier) or the reason it failed.

    Every output is written into a private folder next to the outputs and moved into place when
    complete, the ``.pt`` last, so a crash (even SIGKILL) never leaves a half-written output: at
    worst a stale private folder, which the next run for this file removes.  With ``resume``, a
    file whose ``.pt`` exists (with this run's --centers and --k) and whose other outputs exist
    is finished and skipped; partial outputs of an interrupted run are redone.
    """
    import shutil
    from pathlib import Path

    import torch

    import pcgeom
    from pcgeom.io import write_ply
    from pcgeom.vis import render_neighbourhoods

    from pcgeom.io import ply_info
    from pcgeom.streaming.group import group_streamed, in_memory_bytes

    ply_t, pt_t = targets[0], targets[1]
    partial = base.parent / f".{base.name}.pcgeom-partial"
    existing = [t for t in targets if t.exists()]
    replace = args.overwrite
    if existing and not args.overwrite:
        if not resume:
            return f"output exists: {', '.join(map(str, existing))} (pass --overwrite to replace)"
        if pt_t.exists():
            try:
                shape = tuple(torch.load(pt_t, weights_only=True, map_location="cpu")["idx"].shape)
            except Exception as exc:  # unreadable: not ours to replace silently
                return f"output exists and is unreadable: {pt_t} ({exc}); pass --overwrite to replace"
            if shape != (args.centers, args.k):
                return (f"output exists from a run with other settings ({shape[0]} patches x {shape[1]} "
                        f"neighbours): {pt_t} (pass --overwrite to replace)")
            if len(existing) == len(targets):
                shutil.rmtree(partial, ignore_errors=True)  # a run killed just after its last move
                return "skipped"
        replace = True  # what an interrupted run left for this file; redo it
    moved = []
    try:
        if in_memory_bytes(src) > budget:
            n = ply_info(src).vertex_count
            if n < max(args.centers, args.k):
                raise ValueError(f"{n} points, fewer than --centers {args.centers} / --k {args.k}")
            base.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(partial, ignore_errors=True)  # left by a killed run
            partial.mkdir()
            group_streamed(src, partial / ply_t.name, partial / pt_t.name, args.centers, args.k,
                           png_path=partial / targets[2].name if args.png else None, renderer=args.renderer,
                           memory_bytes=int(budget), device=device)
            return _publish(partial, targets, replace, moved)
        types, cloud = read_typed(src)
        pts = cloud.points.to(torch.float32)  # grouped in float32; cloud.points keeps the stored values
        if not torch.isfinite(pts).all():
            raise ValueError(f"{int((~torch.isfinite(pts).all(1)).sum())} points have NaN or infinite coordinates")
        if len(pts) < max(args.centers, args.k):
            raise ValueError(f"{len(pts)} points, fewer than --centers {args.centers} / --k {args.k}")
        nbhd, ctr, cidx, idx = pcgeom.group_patches(pts.to(device)[None], args.centers, args.k, return_index=True)
        idx0, ctr0 = idx[0].cpu(), ctr[0].cpu()
        base.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)  # left by a killed run
        partial.mkdir()
        labels = patch_labels(len(pts), idx0)
        # The input's columns in their own types, coloured by patch: its colours (and a column named
        # red/green/blue or patch) give way to the patch colours and labels.
        props = {n: v for n, v in cloud.properties.items() if n not in ("red", "green", "blue", "patch")}
        keep_types = {n: t for n, t in types.items() if n not in ("red", "green", "blue", "patch")}
        write_ply(partial / ply_t.name, cloud.points, colors=labelled_colors(labels), normals=cloud.normals,
                  properties={**props, "patch": labels}, types=keep_types)
        if args.png:
            render_neighbourhoods(pts, ctr0, idx0, partial / targets[2].name, backend=args.renderer)
        result = {"centers": ctr0, "center_idx": cidx[0].cpu(), "idx": idx0, "neighborhoods": nbhd[0].cpu()}
        torch.save(result, partial / pt_t.name)
        return _publish(partial, targets, replace, moved)
    except Exception as exc:  # one bad file is reported, never the end of the run (Ctrl-C still is)
        if not replace:
            for t in moved:  # leave nothing half-made behind
                Path(t).unlink(missing_ok=True)
        return failure(exc, src)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _publish(partial, targets, replace: bool, moved: list) -> str:
    """Moves a file's finished outputs from its private folder into place, the ``.pt`` last."""
    from pcgeom.io.output import publish

    for t in [targets[0]] + targets[2:] + [targets[1]]:  # the .pt last: its presence means "finished"
        publish(partial / t.name, t, overwrite=replace)
        moved.append(t)
    return "done"


def run(args) -> int:
    launch = torchrun_ranks()
    rank, world, local_rank = launch or (0, 1, 0)
    own_pg = False
    if world > 1:
        import datetime

        import torch.distributed as dist

        if not dist.is_initialized():
            # gloo on the CPU only carries the final report; ranks may finish hours apart.
            dist.init_process_group("gloo", timeout=datetime.timedelta(hours=24))
            own_pg = True
    try:
        return _group_ranked(args, rank, world, local_rank, resume=args.resume or launch is not None)
    finally:
        if own_pg:
            dist.destroy_process_group()


def _group_ranked(args, rank: int, world: int, local_rank: int, resume: bool) -> int:
    from pathlib import Path

    import torch
    from tqdm import tqdm

    def say(text: str, err: bool = False) -> None:
        if rank == 0:
            print(text, file=sys.stderr if err else sys.stdout)

    device = pick_device(args.device)
    if device.type == "cuda" and device.index is None and world > 1:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
    if args.png and args.renderer == "open3d":
        try:
            import open3d  # noqa: F401
        except ImportError as exc:
            say(f'pcgeom group: --renderer open3d needs Open3D: pip install "pcgeom[vis]" ({exc})', err=True)
            return 1
    out = Path(args.out)
    start = start_file_run("pcgeom group", args.inputs, out)
    if isinstance(start, list):
        for line in start:
            say(line, err=True)
        return 1
    files, failures, guard = start
    # Plan every file on every rank (same inputs, same order), so output collisions are found
    # across the whole input list, then process this rank's share.
    seen: dict[Path, Path] = {}
    plan = []
    for i, (src, stem) in enumerate(files):
        base = out / stem.parent / f"{stem.name}_patches"
        targets = [base.with_suffix(".ply"), base.with_suffix(".pt")] + ([base.with_suffix(".png")] if args.png else [])
        clash = None
        if base in seen:
            clash = f"its outputs {base}.* would collide with those of {seen[base]}; process them separately"
        else:
            seen[base] = src
            try:
                for t in targets:
                    guard.check("pcgeom group", t)
            except ValueError as exc:
                clash = str(exc).removeprefix("pcgeom group: ")
        plan.append((i, src, base, targets, clash))
    budget = (args.memory if args.memory is not None else default_memory_gb()) * 1e9
    results = []
    mine = [plan[i] for i in rank_share(len(plan), rank, world)]
    bar = tqdm(mine, desc="grouping" if world == 1 else f"grouping (rank 0 of {world})", unit="file",
               disable=None if rank == 0 else True, file=sys.stderr)
    for i, src, base, targets, clash in bar:
        results.append((i, str(src), clash or _group_one(src, base, targets, args, device, resume, budget)))
    if world > 1:
        import torch.distributed as dist

        every = [None] * world
        dist.all_gather_object(every, results)
        results = sorted(r for part in every for r in part)
    done = sum(1 for _, _, status in results if status == "done")
    skipped = sum(1 for _, _, status in results if status == "skipped")
    failures += [(name, status) for _, name, status in results if status not in ("done", "skipped")]
    extra = (f", {skipped} already done" if skipped else "") + (f", on {world} ranks" if world > 1 else "")
    say(f"pcgeom group: {done} of {len(files)} file{'s' if len(files) != 1 else ''} grouped into {out}{extra} "
        f"({args.centers} patches x {args.k} neighbours; {backend_line(device)})")
    if failures:
        say(f"pcgeom group: {len(failures)} failed:", err=True)
        for name, why in failures:
            say(f"  {name}: {why}", err=True)
        return 1
    return 0
