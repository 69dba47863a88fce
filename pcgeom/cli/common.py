"""What the subcommands share: devices, the backend line, argument types, patch colours, and the
input/output handling of the commands that process PLY files (group, preprocess)."""

from __future__ import annotations

import argparse


def pick_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"pcgeom: --device {name}: CUDA is not available in this torch ({torch.__version__})")
    return dev


def backend_line(device) -> str:
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


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def device_name(text: str) -> str:
    """argparse type for ``--device``: ``auto`` or a string ``torch.device`` accepts (``cpu``, ``cuda:1``)."""
    import torch

    if text == "auto":
        return text
    try:
        torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}") from None
    return text


def path_arg(text: str) -> str:
    """argparse type for a file or folder name: never empty (``--out "$DIR"`` with DIR unset would otherwise
    mean the current folder)."""
    if not text.strip() or "\x00" in text:
        raise argparse.ArgumentTypeError(f"expected a file or folder name, got {text!r}")
    return text


def finite_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text}")
    return v


def patch_labels(n_points: int, idx):
    """Per-point patch number (-1 = in no patch; where patches overlap the later one wins)."""
    import torch

    labels = torch.full((n_points,), -1, dtype=torch.int32)
    g = torch.arange(idx.shape[0], dtype=torch.int32)[:, None].expand_as(idx)
    valid = idx >= 0
    labels[idx[valid]] = g[valid]  # later patches are written last
    return labels


def labelled_colors(labels):
    import torch

    from pcgeom.vis import patch_colors

    palette = torch.from_numpy(patch_colors(int(labels.max()) + 1 if len(labels) else 0) * 255).round().to(torch.uint8)
    colors = torch.full((len(labels), 3), 204, dtype=torch.uint8)
    member = labels >= 0
    colors[member] = palette[labels[member].long()]
    return colors


def read_typed(src):
    """``(types, cloud)``: a PLY file's column types (:func:`~pcgeom.io.read_ply_types`) and its
    :func:`~pcgeom.io.read_ply` cloud, read at a precision that holds every stored coordinate and normal
    exactly (float64 when any is ``double``, ``int`` or ``uint``), so a writer given ``types`` writes the
    same values back."""
    import torch

    from pcgeom.io import read_ply, read_ply_types

    types = read_ply_types(src)
    wide = any(types.get(c) in ("double", "int", "uint") for c in ("x", "y", "z", "nx", "ny", "nz"))
    return types, read_ply(src, dtype=torch.float64 if wide else torch.float32)


_UNREADABLE_SHOWN = 5  # a folder such as / holds thousands of unreadable ones: name a few, count the rest


def ply_files(folder):
    """``(sorted .ply files under folder, [(subfolder, reason)] that could not be read)``.

    Symbolic links to folders are not followed (as ``Path.rglob`` does not); a folder that cannot be
    listed (no permission, removed meanwhile) is reported instead of ending the walk with a traceback."""
    import os
    from pathlib import Path

    unreadable = []

    def skip(exc):
        unreadable.append((Path(exc.filename) if exc.filename else folder, exc.strerror or str(exc)))

    found = []
    for root, dirs, names in os.walk(folder, onerror=skip):
        dirs.sort()
        for name in names:
            q = Path(root) / name
            if q.suffix.lower() == ".ply":
                try:
                    if q.is_file():
                        found.append(q)
                except OSError as exc:
                    unreadable.append((q, exc.strerror or str(exc)))
    return sorted(found), unreadable


def collect_inputs(inputs, out):
    """(source path, output stem relative to --out) for every PLY file; plus (input, error) for bad inputs.

    A folder input that holds ``out`` (or is ``out``) skips the files under ``out``: they are this
    command's outputs (of this run or an earlier one), so ``pcgeom group scans/ --out scans/patches``
    can be rerun without grouping its own outputs.  A folder that lies inside ``out``
    (``pcgeom preprocess scans/raw --out scans``) is read whole: its outputs land beside it, and an
    output that would really replace an input is refused file by file (:class:`~pcgeom.io.output.InputGuard`).
    """
    from pathlib import Path

    from pcgeom.io.output import is_partial

    out = Path(out).resolve()
    found, errors = [], []
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            plys, unreadable = ply_files(p)
            plys = [q for q in plys if not any(is_partial(part) for part in q.relative_to(p).parts)]
            for folder, why in unreadable[:_UNREADABLE_SHOWN]:
                errors.append((str(folder), f"cannot read this folder inside {raw}: {why}"))
            if len(unreadable) > _UNREADABLE_SHOWN:
                errors.append((raw, f"and {len(unreadable) - _UNREADABLE_SHOWN:,} more folders inside it cannot be read"))
            holds_out = out.is_relative_to(p.resolve())
            files = [q for q in plys if not (holds_out and q.resolve().is_relative_to(out))]
            if not plys:
                errors.append((raw, "folder holds no .ply files"))
            elif not files:
                where = "is --out" if out == p.resolve() else f"holds --out {out}"
                errors.append((raw, f"this folder {where}, and its {len(plys)} .ply "
                                    f"file{'s' if len(plys) != 1 else ''} all lie under --out, where this command "
                                    "writes; files there are not read from a folder input (they may be outputs "
                                    "of an earlier run); choose another --out, or give the files one by one"))
            found += [(q, q.relative_to(p).with_suffix("")) for q in files]
        elif p.is_file():
            found.append((p, Path(p.stem)))
        else:
            errors.append((raw, "no such file or folder"))
    return found, errors


def failure(exc: BaseException, src) -> str:
    """One bad file's reason for the report: the message, without read_ply's own path prefix."""
    why = str(exc) if isinstance(exc, (ValueError, TypeError, OSError, RuntimeError)) else f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError):
        why = f"MemoryError: not enough memory for this file{': ' + str(exc) if str(exc) else ''}"
    prefix = f"read_ply: {src}: "
    return why[len(prefix):] if why.startswith(prefix) else why


def plan_outputs(fn: str, out, files):
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


def start_file_run(cmd: str, inputs, out):
    """What group and preprocess do before their first file: collect the inputs, plan the outputs.

    Returns ``(files, failures, guard)`` (:func:`collect_inputs`, :func:`plan_outputs`), or the lines to
    print on stderr before exiting with status 1: why ``out`` cannot be written, or each input that failed
    and that there is no PLY file to process.
    """
    files, failures = collect_inputs(inputs, out)
    guard = plan_outputs(cmd, out, files)
    if isinstance(guard, str):
        return [guard]
    if not files:
        return [f"{cmd}: {name}: {why}" for name, why in failures] + [f"{cmd}: no PLY files to process"]
    return files, failures, guard


def memory_gb(text: str) -> float:
    """argparse type for ``--memory``: a finite number of GB > 0."""
    import argparse

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GB > 0, got {text!r}") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of GB > 0, got {text}")
    return v


def default_memory_gb() -> float:
    """Half of the memory available now (Linux ``MemAvailable``; else half of the physical memory)."""
    import os

    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 / 2 / 1e9
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 / 1e9
    except (ValueError, OSError, AttributeError):
        return 8.0
