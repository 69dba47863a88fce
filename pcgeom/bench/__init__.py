"""CPU benchmark of pcgeom against the installed peers (``pcgeom bench``).

Runs the workloads of the project's benchmark plan (Point-MAE grouping, self
KNN graphs, scene-size clouds, feature-space KNN, FPS at three scales and the
Point-MAE ``group_patches`` step) on a uniform cube and on real surface scans
(the bundled scans of :mod:`pcgeom.data`), against every peer that is
installed (``pip install "pcgeom[bench]"``: scipy, pykdtree, faiss-cpu,
fpsample, open3d-cpu) and against the pure-torch code users write today.

Method, per workload and dataset:

* inputs are float32, made once with fixed seeds (outside the timing);
* what is timed is what a user pays per batch: building any index, the query,
  the Python loop over clouds for peers without batching, and the result as
  ``(B, M, k)`` / ``(B, S)`` torch tensors (squared distances as float32);
* every method runs once to warm up, then ``--repeats`` times *interleaved*
  (one call of each method per round, so load on a shared machine hits all
  alike); the best round of each is reported, and the ratio pcgeom / best
  peer from those (noise only adds time, so the best rounds compare the
  code, not the load); the ratio of the medians is reported beside it;
* all threads for everyone (torch, faiss and pykdtree/open3d through OpenMP,
  scipy ``workers=-1``; fpsample is single-threaded);
* every method's answer is checked on a subsample: pcgeom must equal the
  pure-torch reference bit for bit (indices and distances, or the FPS index
  sequence); KNN peers must return the true k smallest distances (float64
  brute force); FPS peers must return the reference sequence (fpsample) or
  the same set of points (open3d, which reorders it);
* peak memory (``--memory``, on by default without ``--quick``): each method
  runs in a fresh subprocess, warmed up on a 256-point copy of the input, and
  the reported figure is the resident-set high-water mark during one call
  minus the resident set before it (Linux ``/proc/self/clear_refs``).

Usage::

    pcgeom bench                        # everything (about 10 minutes on 2 quiet cores)
    pcgeom bench --quick                # fewer repeats, no memory/scaling (about 2 minutes)
    pcgeom bench --workloads knn-self-8k,fps-8k --repeats 9
    pcgeom bench --output my-results.md
    pcgeom bench --grid                 # shape grid against torch.cdist + topk (a few minutes)

Inside a pcgeom checkout the report is written to ``benchmarks/RESULTS.md``
unless ``--output`` says otherwise (``--output -`` writes nothing).

The package, one idea per module: :mod:`~pcgeom.bench.workloads` (what runs
on what inputs), :mod:`~pcgeom.bench.peers` (the methods raced),
:mod:`~pcgeom.bench.checks` (whether their answers are right),
:mod:`~pcgeom.bench.timing` (how time and memory are measured),
:mod:`~pcgeom.bench.report` (the markdown report), :mod:`~pcgeom.bench.grid`
(``--grid``); this module is the command line.  Every name is importable from
``pcgeom.bench`` itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import torch

import pcgeom
from pcgeom.bench.checks import QUICK_FPS_CHECK, check, check_grid_cell
from pcgeom.bench.grid import GRID, GRID_BEGIN, GRID_END, GRID_NOTES, merge_grid, render_grid, run_grid
from pcgeom.bench.peers import (
    available,
    chunked_torch_knn,
    fps_methods,
    group_methods,
    knn_methods,
    methods_for,
    use_vendored,
)
from pcgeom.bench.report import MISS_REASONS, Row, fmt, machine, render
from pcgeom.bench.timing import (
    GIVE_UP_S,
    CallTimer,
    PeakMemory,
    clock,
    timed_call,
    interleaved,
    measure_memory,
    median_ms,
    memory_child,
    reset_peak_rss,
    scaling_child,
    status_kib,
    sync,
    time_interleaved,
    time_pair,
)
from pcgeom.bench.workloads import (
    DATASETS,
    SCANS,
    SKIPS,
    TARGETS,
    WORKLOADS,
    Inputs,
    clustered_cloud,
    lattice_cloud,
    make_inputs,
    make_points,
    random_cloud,
    surface_cloud,
)

__all__ = [
    # workloads
    "WORKLOADS", "DATASETS", "SKIPS", "TARGETS", "SCANS", "Inputs", "make_points", "make_inputs",
    "random_cloud", "lattice_cloud", "surface_cloud", "clustered_cloud",
    # peers
    "knn_methods", "fps_methods", "group_methods", "methods_for", "chunked_torch_knn", "available", "use_vendored",
    # checks
    "check", "check_grid_cell", "QUICK_FPS_CHECK",
    # timing
    "GIVE_UP_S", "time_interleaved", "measure_memory", "memory_child", "scaling_child", "interleaved", "time_pair",
    "timed_call", "median_ms", "CallTimer", "clock", "sync", "PeakMemory", "status_kib", "reset_peak_rss",
    # report
    "Row", "render", "MISS_REASONS", "fmt", "machine",
    # grid
    "GRID", "GRID_BEGIN", "GRID_END", "GRID_NOTES", "run_grid", "render_grid", "merge_grid",
    # command line
    "parser", "main",
]


def _selection(what: str, known) -> "callable":
    """argparse type for a comma-separated, non-empty subset of ``known`` (``--workloads``, ``--datasets``).

    An empty selection (``--workloads ,``, or ``--workloads "$W"`` with ``W`` unset) would measure
    nothing and then write an empty report over the results file, so it is refused like a typo."""

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        if not names:
            raise argparse.ArgumentTypeError(f"expected at least one {what} (comma-separated), got {text!r}; "
                                             f"choose from {', '.join(known)}")
        for n in names:
            if n not in known:
                raise argparse.ArgumentTypeError(f"unknown {what} {n!r}; choose from {', '.join(known)}")
        return list(dict.fromkeys(names))  # a name given twice is measured once

    return parse


MAX_THREADS = 1024


def _count(what: str, lo: int, hi: int | None = None):
    """argparse type for an integer in [lo, hi] (``--repeats`` >= 1, ``--threads`` 1..MAX_THREADS)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"expected {what}, got {v}")
        return v

    return parse


def _seconds(what: str, *, zero_ok: bool):
    """argparse type for a finite number of seconds, > 0 (or >= 0 with ``zero_ok``)."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(v) or v < 0 or (v == 0 and not zero_ok):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return v

    return parse


def _grid_cells(text: str) -> list[tuple[int, int, int, int, int]]:
    """argparse type for ``--grid-cells``: comma-separated ``BxMxNxDxk`` cells of positive integers, k <= N,
    whose inputs and result fit in this machine's memory."""
    cells = []
    for c in (c.strip() for c in text.split(",")):
        if not c:
            continue
        parts = c.split("x")
        if len(parts) != 5 or not all(re.fullmatch(r"\d+", x.strip()) for x in parts):
            raise argparse.ArgumentTypeError(f"expected cells BxMxNxDxk of five positive integers such as "
                                             f"64x224x224x3x100, got {c!r}")
        B, M, N, D, k = (int(x) for x in parts)
        if min(B, M, N, D, k) < 1:
            raise argparse.ArgumentTypeError(f"cell {c!r}: B, M, N, D and k must all be >= 1")
        if k > N:
            raise argparse.ArgumentTypeError(f"cell {c!r}: k={k} exceeds N={N} (the reference needs k <= N)")
        # float32 points (+ queries unless M == N) and the (dist2, idx) result, as run_grid allocates them
        need = 4 * B * D * (N + (0 if M == N else M)) + 12 * B * M * k
        ram = _physical_memory()
        if ram is not None and need > ram // 2:
            raise argparse.ArgumentTypeError(f"cell {c!r} needs {need / 2**30:.1f} GiB for its inputs and result, "
                                             f"more than half of this machine's {ram / 2**30:.1f} GiB")
        cells.append((B, M, N, D, k))
    if not cells:
        raise argparse.ArgumentTypeError(f"expected at least one cell BxMxNxDxk, got {text!r}")
    return cells


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def parser() -> argparse.ArgumentParser:
    """The ``pcgeom bench`` command line (the docs' CLI reference is generated from it)."""
    ap = argparse.ArgumentParser(prog="pcgeom bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="3 rounds (methods slower than --slow: their warm-up call only), "
                         "no memory probe, no scaling report")
    ap.add_argument("--workloads", type=_selection("workload", WORKLOADS), default=list(WORKLOADS),
                    help="comma-separated, non-empty subset of: " + ", ".join(WORKLOADS))
    ap.add_argument("--datasets", type=_selection("dataset", DATASETS), default=list(DATASETS),
                    help="comma-separated, non-empty subset of: " + ", ".join(DATASETS))
    ap.add_argument("--repeats", type=_count("a positive integer", 1), default=None,
                    help="timed rounds, >= 1 (default 7, 3 with --quick)")
    ap.add_argument("--threads", type=_count(f"an integer from 1 to {MAX_THREADS}", 1, MAX_THREADS), default=None,
                    help=f"threads for every method, 1 to {MAX_THREADS} (default: all cores)")
    ap.add_argument("--slow", type=_seconds("a finite number of seconds >= 0", zero_ok=True), default=None,
                    help="methods slower than this many seconds per call get a third of the rounds "
                         "(default 1, 0.25 with --quick)")
    ap.add_argument("--memory", action=argparse.BooleanOptionalAction, default=None,
                    help="measure peak memory in subprocesses (default: on, off with --quick)")
    ap.add_argument("--scaling", action=argparse.BooleanOptionalAction, default=None,
                    help="scaling report at N = 1e4, 1e5, 1e6 (default: on, off with --quick)")
    ap.add_argument("--output", default=None, help="report file (default benchmarks/RESULTS.md inside a checkout; '-' for none)")
    ap.add_argument("--grid", action="store_true",
                    help="shape grid instead of the workloads: pcgeom.knn / (torch.cdist + topk) for "
                         f"{len(GRID)} shapes (B, M, N, D, k), a few minutes")
    ap.add_argument("--grid-budget", type=_seconds("a finite number of seconds > 0", zero_ok=False), default=1.5,
                    help="seconds of interleaved alternations per grid cell, > 0 (default 1.5)")
    ap.add_argument("--grid-cells", type=_grid_cells, default=None,
                    help="with --grid: only these cells, e.g. 64x224x224x3x100,1x1x1000000x3x1 (BxMxNxDxk, "
                         "each >= 1, k <= N)")
    ap.add_argument("--_memory", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--_scaling", nargs=4, help=argparse.SUPPRESS)
    return ap


def _default_output() -> str | None:
    here = os.getcwd()
    pyproject = os.path.join(here, "pyproject.toml")
    if os.path.isdir(os.path.join(here, "benchmarks")) and os.path.isfile(pyproject):
        with open(pyproject) as f:
            if 'name = "pcgeom"' in f.read():
                return os.path.join("benchmarks", "RESULTS.md")
    return None


def main(argv=None) -> int:
    """``pcgeom bench [options]``: run the workloads (or ``--grid``), print and write the report."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:  # `pcgeom bench -- --quick`
        argv = argv[1:]
    args = parser().parse_args(argv)
    args.argv = [a for a in argv if not a.startswith("--_")]
    threads = args.threads or os.cpu_count() or 1
    if args._memory:
        memory_child(*args._memory, threads)
        return 0
    if args._scaling:
        kind, N, method, reps = args._scaling
        scaling_child(kind, int(N), method, threads, int(reps))
        return 0
    torch.set_num_threads(threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    if available("faiss"):
        import faiss

        faiss.omp_set_num_threads(threads)
    if args.grid:
        t_start = time.perf_counter()
        cells = GRID if args.grid_cells is None else args.grid_cells
        rows = run_grid(cells, args.grid_budget)
        out = args.output if args.output is not None else _default_output()
        if not rows:
            return _refuse_empty(out)
        block = render_grid(rows, args, threads, time.perf_counter() - t_start)
        print()
        print(block)
        if out and out != "-":
            _write_report(out, merge_grid(out, block, None))
            print(f"grid written to {out}")
        return 0
    fps_prefix = QUICK_FPS_CHECK if args.quick else None
    if args.repeats is None:
        args.repeats = 3 if args.quick else 7
    if args.slow is None:
        args.slow = 0.25 if args.quick else 1.0
    memory = (not args.quick) if args.memory is None else args.memory
    scaling_on = (not args.quick) if args.scaling is None else args.scaling
    workloads, datasets = args.workloads, args.datasets  # non-empty, known names (parser())
    if not pcgeom.backend_info()["extension_loaded"]:
        print("pcgeom bench: the native kernels are not loaded (see `pcgeom doctor`); timing the pure-torch path.",
              file=sys.stderr)
    missing = [m for m in ("scipy", "pykdtree", "faiss", "fpsample", "open3d") if not available(m)]
    if missing:
        print(f"pcgeom bench: peers not installed: {', '.join(missing)} (pip install \"pcgeom[bench]\")", file=sys.stderr)

    t_start = time.perf_counter()
    rows = []
    for w in workloads:
        for d in datasets:
            inp = make_inputs(w, d)
            methods = methods_for(inp)
            times, medians, runs, outs = time_interleaved(methods, args.repeats, args.slow,
                                                          0 if args.quick else None)
            checks = {n: check(inp, n, o, fps_prefix) for n, o in outs.items()}
            del outs
            row = Row(w, d, times, runs, checks, medians=medians)
            if memory and d == "cube":
                row.memory = {n: measure_memory(w, d, n, threads) for n in methods}
            rows.append(row)
            bn, bt = row.best_peer()
            ratio = f"{times['pcgeom'] / bt:.2f} vs {bn}" if bt else "no peer"
            detail = ", ".join(f"{n} {fmt(t)}" for n, t in times.items())
            print(f"{w:12s} {d:5s} ratio {ratio:24s} | {detail} ms", flush=True)
            bad = {n: c for n, c in checks.items() if not c.startswith(("exact", "ok", "same", "not checked"))}
            if bad:
                print(f"{'':18s} checks: {bad}", flush=True)

    scaling = []
    if scaling_on:
        for kind, peer in (("knn", "pykdtree"), ("fps", "fpsample-kdline")):
            peer_mod = "pykdtree" if kind == "knn" else "fpsample"
            for N in (10_000, 100_000, 1_000_000):
                reps = 3 if N < 1_000_000 else 1
                res = {"op": "self-KNN k=16" if kind == "knn" else "FPS S=N/50", "N": N, "peer_name": peer}
                for who in ("pcgeom", "peer"):
                    if who == "peer" and not available(peer_mod):
                        res[who] = None
                        continue
                    cmd = [sys.executable, "-m", "pcgeom.bench", "--_scaling", kind, str(N),
                           "pcgeom" if who == "pcgeom" else peer, str(reps), "--threads", str(threads)]
                    try:
                        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                        res[who] = json.loads(out.stdout.strip().splitlines()[-1])
                    except Exception:
                        res[who] = None
                scaling.append(res)
                pm, pr = res["pcgeom"], res["peer"]
                print(f"scaling {res['op']:14s} N={N:>9,}: pcgeom {fmt(pm and pm['ms'])} ms "
                      f"({fmt(pm and pm['mb'])} MB), {peer} {fmt(pr and pr['ms'])} ms ({fmt(pr and pr['mb'])} MB)",
                      flush=True)

    elapsed = time.perf_counter() - t_start
    out = args.output if args.output is not None else _default_output()
    if not rows:
        return _refuse_empty(out)
    report = render(rows, scaling, args, threads, elapsed)
    print()
    print(report)
    if out and out != "-":
        _write_report(out, merge_grid(out, None, report))  # keeps a grid section written by --grid
        print(f"report written to {out}")
    return 0


def _refuse_empty(out: str) -> int:
    # The parser refuses empty selections; this guards the results file against any other way to measure nothing.
    kept = f"; {out} is left as it was" if out and out != "-" else ""
    print(f"pcgeom bench: nothing was measured{kept}", file=sys.stderr)
    return 1


def _write_report(out: str, text: str) -> None:
    """Replaces ``out`` in one step, so an interrupted run leaves the old results, never half of the new."""
    from pcgeom.io.output import write_atomic

    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)

    def write(tmp):
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(text)

    write_atomic(out, write, overwrite=True)


if __name__ == "__main__":
    sys.exit(main())
