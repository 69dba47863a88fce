"""PyG's knn_graph / radius_graph: PyG 2.8 + pcgeom's torch_cluster stand-in vs PyG 2.5.3 + compiled torch_cluster.

Two rows on ``--clouds`` clouds of ``--points`` points each, uniform in the
unit cube, batched by a sorted ``batch`` vector, on the CPU:

* ``knn_graph(x, k=16, batch)``;
* ``radius_graph(x, r, batch, max_num_neighbors=32)`` with ``r = --radius``
  (0.05: at 50k points a cloud a ball holds about 26 points, so the radius is
  set as torch_cluster users set it, to about the cap, and about 12% of the
  balls are full and capped).

Each side runs in an interpreter of its own, because the two need different
PyG versions first on ``sys.path``:

* ``stand-in``: torch_geometric 2.8.1 with ``pcgeom.compat.enable_shims()``
  (``import torch_cluster`` is pcgeom's stand-in);
* ``torch_cluster``: torch_geometric 2.5.3 with the compiled torch_cluster
  1.6.3, called as PyG calls it (``num_workers=1``: one thread) and again with
  ``num_workers`` = the thread count; the faster is the peer of each row.

The parent alternates single calls between the two processes
(``pcgeom.bench.timing.interleaved``), so both sides see the same load; the
ratio is stand-in time / torch_cluster time from the best rounds, and from
the medians.  Before timing it checks the answers: the same KNN edge set,
and for radius the same number of edges per centre (torch_cluster's CPU build
caps a full ball in KD-tree visit order, the stand-in in index order as the
CUDA build does, so the capped sets differ by design).

PyG versions are ``pip install --no-deps --target``-ed once into
``<venv>/pcgeom-test-pyg/<version>`` (where ``tests/test_pyg.py`` puts them)
unless ``--pyg-new`` / ``--pyg-old`` name folders.  torch_cluster must be
built once against this torch::

    pip install --no-build-isolation --no-deps --target /tmp/tc163 torch-cluster==1.6.3

(about 12 minutes on two cores).  Without it the report says so and gives the
stand-in's times alone.  Usage::

    python benchmarks/bm_pyg.py --torch-cluster /tmp/tc163 [--clouds 8] [--points 50000]
                                [--radius 0.05] [--repeats 7] [--threads 2] [--out benchmarks/RESULTS-pyg.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from pcgeom.bench.report import machine
from pcgeom.bench.timing import interleaved

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEW, OLD = "2.8.1", "2.5.3"


# --------------------------------------------------------------------------- the child processes


def _child(side: str, clouds: int, points: int, radius: float, threads: int) -> None:
    """One side: answers ``<op>`` (run it once), ``save <op> <path>`` and ``quit`` on stdin."""
    torch.set_num_threads(threads)
    if side == "stand-in":
        import pcgeom.compat

        pcgeom.compat.enable_shims()
    import torch_cluster
    import torch_geometric
    from torch_geometric.nn import knn_graph, radius_graph

    g = torch.Generator().manual_seed(0)
    x = torch.rand(clouds * points, 3, generator=g)
    batch = torch.arange(clouds).repeat_interleave(points)
    ops = {"knn": lambda: knn_graph(x, 16, batch),
           "radius": lambda: radius_graph(x, radius, batch, max_num_neighbors=32)}
    if side == "torch_cluster":
        ops["knn-workers"] = lambda: knn_graph(x, 16, batch, num_workers=threads)
        ops["radius-workers"] = lambda: radius_graph(x, radius, batch, max_num_neighbors=32, num_workers=threads)
    where = getattr(torch_cluster, "__file__", "?")
    print(json.dumps({"torch_geometric": torch_geometric.__version__,
                      "torch_cluster": getattr(torch_cluster, "__version__", "?"), "from": where,
                      "ops": sorted(ops)}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "quit":
            return
        if cmd[0] == "save":
            torch.save(ops[cmd[1]](), cmd[2])
        else:
            ops[cmd[0]]()
        print("done", flush=True)


class Side:
    """A child process serving one side's calls."""

    def __init__(self, side, pythonpath, args):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, *pythonpath]), PYTHONDONTWRITEBYTECODE="1")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", side, "--clouds", str(args.clouds),
             "--points", str(args.points), "--radius", repr(args.radius), "--threads", str(args.threads)],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(f"the {side} process could not start (exit code {self.proc.returncode})")
        self.info = json.loads(line)

    def ask(self, *cmd):
        self.proc.stdin.write(" ".join(cmd) + "\n")
        self.proc.stdin.flush()
        if self.proc.stdout.readline().strip() != "done":
            raise RuntimeError(f"a child process failed on {cmd}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait()


def _pyg_folder(version: str, given: str | None) -> str:
    if given:
        return given
    target = os.path.join(sys.prefix, "pcgeom-test-pyg", version)
    if not os.path.isdir(os.path.join(target, f"torch_geometric-{version}.dist-info")):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                        "--disable-pip-version-check", "--target", target, f"torch_geometric=={version}"], check=True)
    return target


def _torch_cluster_problem(folder: str | None) -> str | None:
    """Why the compiled torch_cluster cannot be used, or None."""
    if not folder:
        return "no --torch-cluster folder given"
    env = dict(os.environ, PYTHONPATH=folder)
    proc = subprocess.run([sys.executable, "-c", "import torch_cluster, sys; sys.stdout.write(torch_cluster.__file__)"],
                          env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1:] or ["no message"]
        return f"`import torch_cluster` from {folder} failed: {last[0]}"
    if not proc.stdout.startswith(folder.rstrip("/")):
        return f"`import torch_cluster` with {folder} first on the path found {proc.stdout} instead"
    return None


def _check(a_path, b_path, op, n):
    """The answers agree (see the module docstring); returns a line for the report."""
    a, b = torch.load(a_path), torch.load(b_path)
    if op == "knn":
        same = torch.equal(torch.sort(a[0] * n + a[1]).values, torch.sort(b[0] * n + b[1]).values)
        if not same:
            raise SystemExit("knn_graph: the stand-in and torch_cluster return different edge sets")
        return f"knn_graph: the same {a.shape[1]:,} edges"
    da, db = torch.bincount(a[1], minlength=n), torch.bincount(b[1], minlength=n)
    if not torch.equal(da, db):
        raise SystemExit(f"radius_graph: the edges per centre differ at {int((da != db).sum())} centres")
    full = int((da == 32).sum())
    return (f"radius_graph: the same number of edges at every centre ({a.shape[1]:,} in all; "
            f"{full:,} of {n:,} centres capped at 32)")


# --------------------------------------------------------------------------- the parent


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clouds", type=int, default=8)
    ap.add_argument("--points", type=int, default=50_000, help="points per cloud")
    ap.add_argument("--radius", type=float, default=0.05)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--torch-cluster", default=None, help="folder holding a compiled torch_cluster 1.6.3")
    ap.add_argument("--pyg-new", default=None, help=f"folder holding torch_geometric {NEW}")
    ap.add_argument("--pyg-old", default=None, help=f"folder holding torch_geometric {OLD}")
    ap.add_argument("--out", default=None, help="also write the report (markdown) to this file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args.child, args.clouds, args.points, args.radius, args.threads)

    lines = []

    def say(line=""):
        print(line, flush=True)
        lines.append(line)

    n = args.clouds * args.points
    problem = _torch_cluster_problem(args.torch_cluster)
    sides = {"stand-in": Side("stand-in", [_pyg_folder(NEW, args.pyg_new)], args)}
    if problem is None:
        sides["torch_cluster"] = Side("torch_cluster", [args.torch_cluster, _pyg_folder(OLD, args.pyg_old)], args)
    try:
        import pcgeom

        say("# PyG knn_graph / radius_graph: the stand-in against the compiled torch_cluster (CPU)\n")
        say("Command (the whole file below this line is its report):\n")
        say("    python benchmarks/bm_pyg.py " + " ".join(sys.argv[1:] if argv is None else argv) + "\n")
        say(f"bm_pyg: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average "
            f"{' / '.join(f'{v:.1f}' for v in os.getloadavg())} at the start")
        say(f"torch {torch.__version__}, {args.threads} threads per side, pcgeom native kernels: "
            f"{pcgeom.backend_info()['extension_loaded']}")
        for name, s in sides.items():
            say(f"- {name}: torch_geometric {s.info['torch_geometric']}, torch_cluster {s.info['torch_cluster']} "
                f"({'pcgeom stand-in' if name == 'stand-in' else 'compiled'})")
        if problem:
            say(f"- torch_cluster 1.6.3: NOT MEASURED, {problem}; no ratios below")
        say(f"\n{args.clouds} clouds x {args.points:,} points (uniform in the unit cube, one `batch` vector), "
            f"CPU; best / median of {args.repeats} interleaved rounds, ms per call")
        with tempfile.TemporaryDirectory() as tmp:
            checks = []
            for op in ("knn", "radius"):
                for name, s in sides.items():
                    s.ask("save", op, os.path.join(tmp, f"{name}-{op}.pt"))
                if problem is None:
                    checks.append(_check(os.path.join(tmp, f"stand-in-{op}.pt"),
                                         os.path.join(tmp, f"torch_cluster-{op}.pt"), op, n))
        for c in checks:
            say(f"- checked: {c}")
        say("")
        say("| call | side | best ms | median ms | stand-in / this, best | (median) |")
        say("|---|---|---|---|---|---|")
        calls = {"knn": "`knn_graph(x, k=16, batch)`",
                 "radius": f"`radius_graph(x, r={args.radius:g}, batch, max_num_neighbors=32)`"}
        labels = {"stand-in": f"PyG {NEW} + pcgeom stand-in", "torch_cluster": f"PyG {OLD} + torch_cluster 1.6.3",
                  "torch_cluster workers": f"PyG {OLD} + torch_cluster 1.6.3, num_workers={args.threads}"}
        summary = []
        for op, label in calls.items():
            methods = {"stand-in": lambda: sides["stand-in"].ask(op)}
            if problem is None:
                methods["torch_cluster"] = lambda: sides["torch_cluster"].ask(op)
                methods["torch_cluster workers"] = lambda: sides["torch_cluster"].ask(op + "-workers")
            times = interleaved(methods, args.repeats)  # every method warmed up once first
            best = {k: min(v) * 1e3 for k, v in times.items()}
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            for k in times:
                say(f"| {label} | {labels[k]} | {best[k]:.0f} | {med[k]:.0f} | "
                    f"{best['stand-in'] / best[k]:.2f} | ({med['stand-in'] / med[k]:.2f}) |")
            if problem is None:
                peer = min(("torch_cluster", "torch_cluster workers"), key=best.get)
                r_best, r_med = best["stand-in"] / best[peer], med["stand-in"] / med[peer]
                summary.append(f"- {label}: stand-in / fastest torch_cluster call = **{r_best:.2f}** best "
                               f"({r_med:.2f} median); target <= 0.5: {'met' if r_best <= 0.5 else 'NOT met'}")
            else:
                summary.append(f"- {label}: no ratio, torch_cluster was not measured")
        say("")
        for line in summary:
            say(line)
        say(f"\nload average {' / '.join(f'{v:.1f}' for v in os.getloadavg())} at the end")
    finally:
        for s in sides.values():
            s.close()
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
