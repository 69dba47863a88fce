"""The ``pcgeom`` command line (also ``python -m pcgeom``)."""

from __future__ import annotations

import argparse
import sys
import time


def _doctor(args) -> int:
    import torch

    import pcgeom

    info = pcgeom.backend_info()
    print("pcgeom", pcgeom.__version__)
    print(f"  torch              {info['torch_version']} (CUDA available: {info['cuda_available']})")
    print(f"  native library     {'loaded' if info['extension_loaded'] else 'NOT loaded'}")
    print(f"  native devices     {', '.join(info['native_devices']) or 'none'}")
    print(f"  stable ABI         {info['stable_abi']}")
    print(f"  built with torch   {info['built_with_torch']}")
    if info["load_error"]:
        print(f"  load error         {info['load_error']}")
    if info["cuda_load_error"] and info["cuda_load_error"] != "not built":
        print(f"  CUDA load error    {info['cuda_load_error']}")
    build = info.get("build") or {}
    for name, why in (build.get("failed") or {}).items():
        print(f"  build of {name} failed: {why.splitlines()[0][:200]}")
    if build.get("cuda_skipped"):
        print(f"  CUDA kernels       not built: {build['cuda_skipped']}")
    print()
    hints = []
    if info["disabled_by_env"]:
        hints.append("PCGEOM_DISABLE_EXT=1 is set: every op runs on the pure-torch path. Unset it to use the native kernels.")
    elif not info["extension_loaded"]:
        hints.append(
            "Every op runs on the pure-torch reference path: same answers, slower. To build the native kernels, "
            "install a C++ compiler and reinstall against your torch:\n"
            "    pip install --no-build-isolation --no-cache-dir --force-reinstall --no-deps pcgeom\n"
            "  (from a checkout: pip install --no-build-isolation --no-cache-dir -e .). "
            "Set PCGEOM_REQUIRE_EXT=1 to make a failed build an error instead of a fallback."
        )
    if torch.cuda.is_available() and "cuda" not in info["native_devices"] and info["extension_loaded"]:
        hints.append(
            "CUDA is available but has no native kernels: CUDA tensors use the pure-torch path. Rebuild with "
            "nvcc on PATH (CUDA_HOME set), e.g. FORCE_CUDA=1 pip install --no-build-isolation --no-cache-dir -e ."
        )
    if not hints:
        hints.append("All good: native kernels serve " + ", ".join(info["native_devices"]) + "; other devices use the pure-torch path.")
    _print_shims()
    for h in hints:
        print("* " + h)
    if args.check:
        return 0 if info["extension_loaded"] else 1
    return 0


def _print_shims() -> None:
    from pcgeom.compat import shims

    hook = shims.hook_status()
    state = "on for this environment" if hook["installed"] else "off (`pcgeom compat enable` turns them on)"
    if hook["installed"] and not hook["current"]:
        state += " -- stale hook, run `pcgeom compat enable` again"
    if hook["disabled_by_env"]:
        state += " -- PCGEOM_DISABLE_SHIMS is set"
    print(f"  import shims       {state}")
    for name, st in shims.shim_status().items():
        if st["real"]:
            what = f"real extension found ({st['real']}): the shim stays out of the way"
        elif st["served_by"] == "shim":
            what = f"served by {st['target']}"
        else:
            what = "not installed" + (f"; the shim would serve {st['target']}" if not hook["installed"] else "")
        print(f"    {name:<31} {what}")
    print()


def _compat(args) -> int:
    from pcgeom.compat import shims

    if args.action == "enable":
        try:
            pth = shims.install_hook(args.site_dir)
        except OSError as exc:
            print(f"pcgeom compat enable: cannot write the hook into {shims._site_dir(args.site_dir)}: {exc}. "
                  "Use a virtual environment you can write to, pass --site-dir, or call "
                  "pcgeom.compat.enable_shims() in the program instead.", file=sys.stderr)
            return 1
        print(f"pcgeom import shims enabled for this Python environment ({pth}).")
        print("Every later process serves these names where no real extension is installed:")
        print("  " + ", ".join(sorted(shims.SHIMS)))
        print("Run the repository's own command now; `pcgeom compat disable` undoes this.")
        return 0
    if args.action == "disable":
        gone = shims.uninstall_hook(args.site_dir)
        print("pcgeom import shims disabled for this Python environment" + (f" (removed {', '.join(map(str, gone))})." if gone else " (they were not enabled)."))
        return 0
    hook = shims.hook_status(args.site_dir)
    print(f"pcgeom import shims: {'enabled' if hook['installed'] else 'disabled'} in {hook['site_dir']}"
          + ("" if hook["current"] or not hook["installed"] else " (stale: run `pcgeom compat enable` again)"))
    for name, st in shims.shim_status().items():
        if st["real"]:
            where = f"real extension: {st['real']}"
        elif hook["installed"]:
            where = f"shim: {st['target']}"
        else:
            where = f"not installed (`pcgeom compat enable` would serve {st['target']})"
        print(f"  {name:<31} {where}")
    return 0


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"pcgeom: --device {name}: CUDA is not available in this torch ({torch.__version__})")
    return dev


def _backend_line(device) -> str:
    import pcgeom

    info = pcgeom.backend_info()
    native = set(info["native_devices"])
    if device.type in native:
        where = f"native {device.type.upper()} kernels"
    elif info["disabled_by_env"]:
        where = "pure-torch reference path (PCGEOM_DISABLE_EXT=1)"
    else:
        where = f"pure-torch reference path (no native {device.type.upper()} kernels; `pcgeom doctor` says why)"
    return f"{where}, torch {info['torch_version']}, device {device}"


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


def _patch_labels(n_points: int, idx):
    """Per-point patch number (-1 = in no patch; where patches overlap the later one wins)."""
    import torch

    labels = torch.full((n_points,), -1, dtype=torch.int32)
    g = torch.arange(idx.shape[0], dtype=torch.int32)[:, None].expand_as(idx)
    valid = idx >= 0
    labels[idx[valid]] = g[valid]  # later patches are written last
    return labels


def _labelled_colors(labels):
    import torch

    from pcgeom.vis import patch_colors

    palette = torch.from_numpy(patch_colors(int(labels.max()) + 1 if len(labels) else 0) * 255).round().to(torch.uint8)
    colors = torch.full((len(labels), 3), 204, dtype=torch.uint8)
    member = labels >= 0
    colors[member] = palette[labels[member].long()]
    return colors


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT such as 1024x768, got {text!r}") from None
    return w, h


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _demo(args) -> int:
    from pathlib import Path

    import pcgeom
    import pcgeom.data
    from pcgeom.io import write_ply
    from pcgeom.io.output import write_atomic
    from pcgeom.vis import render_neighbourhoods

    out = Path(args.out)
    ply_path = out / f"{args.scan}_patches.ply"
    png_path = out / f"{args.scan}_patches.png"
    guard = _plan_outputs("pcgeom demo", out, [(pcgeom.data.path(args.scan), None)])
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
    device = _device(args.device)
    print(f"pcgeom {pcgeom.__version__} demo")
    print(f"backend   {_backend_line(device)}")

    t0 = time.perf_counter()
    full = pcgeom.data.path(args.scan)
    points, normals = pcgeom.data.load(args.scan, n_points=args.n_points, seed=args.seed, return_normals=True)
    t_load = time.perf_counter() - t0
    n_total = len(pcgeom.data.load(args.scan))
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
    labels = _patch_labels(len(points), idx_cpu)
    t0 = time.perf_counter()
    write_atomic(ply_path, lambda tmp: write_ply(tmp, points, colors=_labelled_colors(labels), normals=normals,
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


def _collect_inputs(inputs, out):
    """(source path, output stem relative to --out) for every PLY file; plus (input, error) for bad inputs.

    Files inside ``out`` are skipped, so ``pcgeom group scans/ --out scans/patches`` can be rerun
    without grouping its own outputs.
    """
    from pathlib import Path

    from pcgeom.io.output import is_partial

    out = Path(out).resolve()
    found, errors = [], []
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            plys = sorted(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() == ".ply"
                          and not any(is_partial(part) for part in q.relative_to(p).parts))
            files = [q for q in plys if not q.resolve().is_relative_to(out)]
            if not plys:
                errors.append((raw, "folder holds no .ply files"))
            elif not files:
                errors.append((raw, f"its {len(plys)} .ply file{'s' if len(plys) != 1 else ''} all lie inside "
                                    f"--out {out}, whose files are never read as inputs (outputs would replace "
                                    "them); choose another --out"))
            found += [(q, q.relative_to(p).with_suffix("")) for q in files]
        elif p.is_file():
            found.append((p, Path(p.stem)))
        else:
            errors.append((raw, "no such file or folder"))
    return found, errors


def _torchrun_ranks() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) when launched by torchrun (its environment variables), else None."""
    import os

    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return None
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))


def _rank_share(n_files: int, rank: int, world: int) -> list[int]:
    """The positions in the sorted input list that ``rank`` processes: every world-th, from its rank.

    Deterministic (the input list is sorted the same way on every rank) and balanced within one file.
    """
    return list(range(rank, n_files, world))


def _failure(exc: BaseException, src) -> str:
    """One bad file's reason for the report: the message, without read_ply's own path prefix."""
    why = str(exc) if isinstance(exc, (ValueError, TypeError, OSError, RuntimeError)) else f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError):
        why = f"MemoryError: not enough memory for this file{': ' + str(exc) if str(exc) else ''}"
    prefix = f"read_ply: {src}: "
    return why[len(prefix):] if why.startswith(prefix) else why


def _plan_outputs(fn: str, out, files):
    """The shared prologue of group and preprocess: --out must be a folder, inputs are never outputs.

    Returns the :class:`~pcgeom.io.output.InputGuard` over every input file, or the message
    saying why the run cannot start.
    """
    from pcgeom.io.output import InputGuard, check_out_folder

    try:
        check_out_folder(fn, out)
    except NotADirectoryError as exc:
        return str(exc)
    return InputGuard(src for src, _ in files)


def _group_one(src, base, targets, args, device, resume: bool):
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
    from pcgeom.io import read_ply, write_ply
    from pcgeom.vis import render_neighbourhoods

    from pcgeom.io.output import publish

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
        cloud = read_ply(src)
        pts = cloud.points
        if not torch.isfinite(pts).all():
            raise ValueError(f"{int((~torch.isfinite(pts).all(1)).sum())} points have NaN or infinite coordinates")
        if len(pts) < max(args.centers, args.k):
            raise ValueError(f"{len(pts)} points, fewer than --centers {args.centers} / --k {args.k}")
        nbhd, ctr, cidx, idx = pcgeom.group_patches(pts.to(device)[None], args.centers, args.k, return_index=True)
        idx0, ctr0 = idx[0].cpu(), ctr[0].cpu()
        base.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)  # left by a killed run
        partial.mkdir()
        labels = _patch_labels(len(pts), idx0)
        write_ply(partial / ply_t.name, pts, colors=_labelled_colors(labels), normals=cloud.normals,
                  properties={"patch": labels})
        if args.png:
            render_neighbourhoods(pts, ctr0, idx0, partial / targets[2].name, backend=args.renderer)
        result = {"centers": ctr0, "center_idx": cidx[0].cpu(), "idx": idx0, "neighborhoods": nbhd[0].cpu()}
        torch.save(result, partial / pt_t.name)
        for t in [ply_t] + targets[2:] + [pt_t]:  # the .pt last: its presence means "finished"
            publish(partial / t.name, t, overwrite=replace)
            moved.append(t)
        return "done"
    except Exception as exc:  # one bad file is reported, never the end of the run (Ctrl-C still is)
        if not replace:
            for t in moved:  # leave nothing half-made behind
                Path(t).unlink(missing_ok=True)
        return _failure(exc, src)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _group(args) -> int:
    launch = _torchrun_ranks()
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

    device = _device(args.device)
    if device.type == "cuda" and device.index is None and world > 1:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
    if args.png and args.renderer == "open3d":
        try:
            import open3d  # noqa: F401
        except ImportError as exc:
            say(f'pcgeom group: --renderer open3d needs Open3D: pip install "pcgeom[vis]" ({exc})', err=True)
            return 1
    out = Path(args.out)
    files, failures = _collect_inputs(args.inputs, out)
    guard = _plan_outputs("pcgeom group", out, files)
    if isinstance(guard, str):
        say(guard, err=True)
        return 1
    if not files:
        for name, why in failures:
            say(f"pcgeom group: {name}: {why}", err=True)
        say("pcgeom group: no PLY files to process", err=True)
        return 1
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
    results = []
    mine = [plan[i] for i in _rank_share(len(plan), rank, world)]
    bar = tqdm(mine, desc="grouping" if world == 1 else f"grouping (rank 0 of {world})", unit="file",
               disable=None if rank == 0 else True, file=sys.stderr)
    for i, src, base, targets, clash in bar:
        results.append((i, str(src), clash or _group_one(src, base, targets, args, device, resume)))
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
        f"({args.centers} patches x {args.k} neighbours; {_backend_line(device)})")
    if failures:
        say(f"pcgeom group: {len(failures)} failed:", err=True)
        for name, why in failures:
            say(f"  {name}: {why}", err=True)
        return 1
    return 0


# ---------------------------------------------------------------------------
# pcgeom preprocess: voxel subsampling, outlier removal and normals for PLY files.
# Reuses group's input collection, atomic moves and report format.


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
    """Preprocesses one file into ``target``; returns "done" or the reason it failed."""
    import torch

    import pcgeom
    from pcgeom.io import read_ply, write_ply
    from pcgeom.io.output import write_atomic

    if target.exists() and not args.overwrite:
        return f"output exists: {target} (pass --overwrite to replace)"
    try:
        cloud = read_ply(src, dtype=torch.float64 if args.float64 else torch.float32)
        pts = cloud.points
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
        if args.normals is not None:
            if len(p) == 0:
                raise ValueError("no points left for --normals after outlier removal")
            normals = pcgeom.estimate_normals(p, args.normals, viewpoint=args.viewpoint).normals.cpu()
        colors = None if cloud.colors is None else cloud.colors[keep]
        props = {name: v[keep] for name, v in cloud.properties.items()}
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, lambda tmp: write_ply(tmp, pts[keep], colors=colors, normals=normals, properties=props),
                     overwrite=args.overwrite)
        return "done", len(pts), len(keep)
    except Exception as exc:  # one bad file (even one too large for memory) is reported; the run goes on
        return _failure(exc, src)


def _preprocess(args) -> int:
    from pathlib import Path

    from tqdm import tqdm

    if not any(v is not None for v in (args.voxel, args.remove_statistical, args.remove_radius, args.normals)):
        print("pcgeom preprocess: nothing to do: give at least one of --voxel, --remove-statistical, "
              "--remove-radius, --normals", file=sys.stderr)
        return 2
    if args.viewpoint is not None and args.normals is None:
        print("pcgeom preprocess: --viewpoint orients the normals of --normals K; give --normals too", file=sys.stderr)
        return 2
    device = _device(args.device)
    out = Path(args.out)
    files, failures = _collect_inputs(args.inputs, out)
    guard = _plan_outputs("pcgeom preprocess", out, files)
    if isinstance(guard, str):
        print(guard, file=sys.stderr)
        return 1
    if not files:
        for name, why in failures:
            print(f"pcgeom preprocess: {name}: {why}", file=sys.stderr)
        print("pcgeom preprocess: no PLY files to process", file=sys.stderr)
        return 1
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
        status = _preprocess_one(src, target, args, device)
        if isinstance(status, tuple):
            done += 1
            n_in += status[1]
            n_out += status[2]
        else:
            failures.append((str(src), status))
    steps = [name for name, v in (("voxel", args.voxel), ("statistical", args.remove_statistical),
                                  ("radius", args.remove_radius), ("normals", args.normals)) if v is not None]
    print(f"pcgeom preprocess: {done} of {len(files)} file{'s' if len(files) != 1 else ''} written into {out} "
          f"({' + '.join(steps)}; {n_in:,} points in, {n_out:,} kept; {_backend_line(device)})")
    if failures:
        print(f"pcgeom preprocess: {len(failures)} failed:", file=sys.stderr)
        for name, why in failures:
            print(f"  {name}: {why}", file=sys.stderr)
        return 1
    return 0


def _add_preprocess_parser(sub) -> None:
    p = sub.add_parser(
        "preprocess",
        help="voxel-subsample, remove outliers from and estimate normals of PLY files",
        description="For every INPUT (a .ply file, or a folder searched recursively for .ply files) writes "
        "OUT/<name>.ply after, in this order: --voxel (pcgeom.grid_subsample, the first point per voxel), "
        "--remove-statistical (Open3D's remove_statistical_outlier), --remove-radius (Open3D's "
        "remove_radius_outlier) and --normals (pcgeom.estimate_normals, written as nx, ny, nz; oriented "
        "towards --viewpoint if given).  Colours and other vertex properties of the kept points are kept. "
        "Outputs are written to a temporary file and moved into place when complete; existing outputs are "
        "never replaced without --overwrite.  A bad file is reported and skipped; the exit status is 1 if "
        "any file failed.",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="PLY files or folders of PLY files")
    p.add_argument("--out", required=True, help="output folder (created if needed)")
    p.add_argument("--voxel", type=_positive_float, default=None, metavar="SIZE", help="voxel size of grid_subsample")
    p.add_argument("--remove-statistical", type=_pair((_positive, _positive_float), "K,STD such as 20,2.0"),
                   default=None, metavar="K,STD", help="statistical outlier removal: K neighbours, STD ratio")
    p.add_argument("--remove-radius", type=_pair((_positive_float, _positive), "R,MIN such as 0.05,16"),
                   default=None, metavar="R,MIN", help="radius outlier removal: radius R, at least MIN neighbours")
    p.add_argument("--normals", type=_positive, default=None, metavar="K", help="estimate normals from K neighbours")
    p.add_argument("--viewpoint", type=_pair((float, float, float), "x,y,z such as 0,0,10"), default=None,
                   metavar="x,y,z", help="orient the normals towards this point")
    p.add_argument("--float64", action="store_true", help="compute in float64 (Open3D's precision)")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs (never an input)")
    p.add_argument("--device", default="auto", help="cpu, cuda, ... (default: cuda when available)")
    p.set_defaults(func=_preprocess)


def _bench(args) -> int:
    # The benchmark lives in pcgeom.bench and parses its own options.
    from pcgeom import bench

    return bench.main(args.bench_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pcgeom", description="pcgeom: exact KNN and FPS for point clouds.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("doctor", help="show which kernels are in use and how to fix a missing build")
    p.add_argument("--check", action="store_true", help="exit 1 when the native library is not loaded")
    p.set_defaults(func=_doctor)
    p = sub.add_parser(
        "compat",
        help="turn the import shims (knn_cuda, pointnet2_ops, chamfer) on or off for this Python environment",
        description="enable: every later Python process of this environment serves knn_cuda, pointnet2_ops "
        "(+ .pointnet2_utils, .pointnet2_modules) and chamfer from pcgeom wherever the real extension is not "
        "installed (a real one always wins), until `disable`. It writes pcgeom-shims.pth and "
        "_pcgeom_shim_hook.py into site-packages; nothing is imported at start-up until a shimmed name is. "
        "status: shows the setting and, per name, whether a real extension was found.",
    )
    p.add_argument("action", choices=["enable", "disable", "status"])
    p.add_argument("--site-dir", default=None, help="site-packages folder to write to (default: this environment's)")
    p.set_defaults(func=_compat)
    p = sub.add_parser("bench", help="run the benchmark workloads against the installed peers", add_help=False)
    p.add_argument("bench_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=_bench)
    p = sub.add_parser(
        "demo",
        help="group a bundled real scan into patches; write a coloured PLY and a PNG picture",
        description="Loads a bundled scan (the Stanford Bunny by default), splits it into patches with "
        "farthest point sampling + KNN (pcgeom.group_patches), prints timings and the backend in use, and "
        "writes OUT/<scan>_patches.ply (points coloured by patch) and OUT/<scan>_patches.png (the picture).",
    )
    p.add_argument("--out", default="pcgeom-demo", help="output folder (default: pcgeom-demo)")
    p.add_argument("--overwrite", action="store_true", help="replace outputs left by an earlier run")
    p.add_argument("--scan", default="bunny", choices=["armadillo", "bunny", "chinese_dragon", "kitten"],
                   help="bundled scan (default: bunny)")
    p.add_argument("--n-points", type=_positive, default=16384, help="points drawn from the scan (default: 16384)")
    p.add_argument("--centers", type=_positive, default=32, help="number of patches G (default: 32)")
    p.add_argument("--k", type=_positive, default=256, help="neighbours per patch (default: 256)")
    p.add_argument("--seed", type=int, default=0, help="seed of the point subset (default: 0)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    p.add_argument("--renderer", default="auto", choices=["auto", "open3d", "matplotlib"],
                   help="picture backend (default: Open3D when installed, else matplotlib)")
    p.add_argument("--size", type=_size, default=(1024, 768), help="picture size WIDTHxHEIGHT (default: 1024x768)")
    p.set_defaults(func=_demo)
    p = sub.add_parser(
        "group",
        help="group PLY files into patches (FPS + KNN); write coloured PLYs, tensors and optional PNGs",
        description="For every INPUT (a .ply file, or a folder searched recursively for .ply files) writes "
        "OUT/<name>_patches.ply (the points coloured by patch, with a 'patch' property), OUT/<name>_patches.pt "
        "(torch.load-able dict of centers (G,3), center_idx (G,), idx (G,k), neighborhoods (G,k,3)) and with "
        "--png OUT/<name>_patches.png.  Existing outputs are never replaced without --overwrite.  A bad file is "
        "reported and skipped; the exit status is 1 if any file failed.  Under torchrun "
        "(torchrun --nproc-per-node N -m pcgeom group ...) the files are split across the ranks, finished "
        "files are skipped on a rerun, and rank 0 prints the report of all ranks.",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="PLY files or folders of PLY files")
    p.add_argument("--centers", type=_positive, required=True, help="number of patches G per cloud")
    p.add_argument("--k", type=_positive, required=True, help="neighbours per patch")
    p.add_argument("--out", required=True, help="output folder (created if needed)")
    p.add_argument("--png", action="store_true", help="also render a picture of each cloud's patches")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs (never an input)")
    p.add_argument("--resume", action="store_true",
                   help="skip inputs whose outputs an earlier run with the same --centers/--k finished and redo "
                   "the rest (always on under torchrun)")
    p.add_argument("--device", default="auto", help="cpu, cuda, ... (default: cuda when available; "
                   "under torchrun each rank takes the GPU of its LOCAL_RANK)")
    p.add_argument("--renderer", default="auto", choices=["auto", "open3d", "matplotlib"], help="picture backend for --png")
    p.set_defaults(func=_group)
    _add_preprocess_parser(sub)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        # argparse's REMAINDER cannot pass a leading option such as --help through,
        # so the benchmark's own parser gets its arguments untouched.
        from pcgeom import bench

        return bench.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
