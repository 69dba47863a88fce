"""Scale benchmark of issue 40: self-KNN, preprocess and group at 10^7-10^8 points, against peers.

For every size N (``--sizes``, default ``1e7,3e7,1e8``) a procedural urban scan
(:mod:`scan_generator`, beside this file) is generated once into ``--workdir``
(default ``/tmp/pcgeom-scale``; a file already there is reused), and each
measured step runs in its own subprocess, which is timed and whose peak RSS
is taken from ``os.wait4`` (the child's own ``ru_maxrss``):

* ``knn`` -- self-KNN, k = 16, int32 indices and float32 squared distances
  into memory-mapped files:
    * ``pcgeom``: :func:`pcgeom.knn_streamed` into ``torch.from_file`` maps;
    * ``scipy``: ``cKDTree(points).query(points, 16, workers=-1)`` (its answer
      is float64 distances and int64 indices, in memory, copied to the maps);
    * ``pykdtree``: ``KDTree(points).query(points, 16)`` (float32 / uint32, in
      memory, copied to the maps; OpenMP over the cores);
    * ``open3d``: ``open3d.core.nns.NearestNeighborSearch`` (``knn_index`` +
      ``knn_search``, the tensor API's batched KNN; ``KDTreeFlann`` answers one
      query per Python call and is not measured);
  the time is that of the search from points in memory (tree builds
  included); reading the PLY is not in it.
* ``preprocess`` -- ``pcgeom preprocess --voxel 0.05 --remove-statistical 20,2
  --normals 30`` (the CLI, whole process: read, compute, write; ``--memory GB``
  is passed when ``pcgeom preprocess --help`` offers it) against Open3D in
  memory: ``read_point_cloud``, ``voxel_down_sample(0.05)``,
  ``remove_statistical_outlier(20, 2.0)``, ``estimate_normals(KNN 30)``,
  ``write_point_cloud`` (whole process too).
* ``group`` -- ``pcgeom group --centers 4096 --k 64`` (the CLI, whole
  process; ``--memory`` likewise) against Open3D in memory:
  ``farthest_point_down_sample(4096)`` and a ``KDTreeFlann`` search of 64
  neighbours per centre, saved with ``numpy.save``.

Each child runs under a time limit (``--timeout``) and a memory limit
(``--memory-limit-gb``, default 80 % of RAM, on its anonymous + shared
memory, watched twice a second: the pages of a memory-mapped output are file
cache the kernel can drop, not the process's memory): one that passes either is killed and recorded as "out of time" /
"out of memory" (as is one the system kills or that raises MemoryError).
Outputs are deleted after each step.  A peer is not run at a larger size
once it ran out of time or memory at a smaller one.

Results are merged into ``--json`` (default ``benchmarks/RESULTS-scale.json``;
a new measurement replaces the one of the same tool, step and size), from
which ``--results`` (``benchmarks/RESULTS-scale.md``) and ``--plot``
(``docs/assets/benchmarks/scale.png``, shown in docs/guides/large-scenes.md) are rewritten: time and peak RSS per tool and size,
the ratios to pcgeom, and a linear fit ``t = a + b N`` per row.  So sizes can
be run one at a time, and ``--report-only`` redraws from the JSON.

Usage (the command of RESULTS-scale.md)::

    python benchmarks/bm_scale.py --sizes 1e7,3e7,1e8
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEPS = ("knn", "preprocess", "group")
TOOLS = {"knn": ("pcgeom", "scipy", "pykdtree", "open3d"), "preprocess": ("pcgeom", "open3d"),
         "group": ("pcgeom", "open3d")}
K = 16
PREPROCESS_ARGS = ["--voxel", "0.05", "--remove-statistical", "20,2", "--normals", "30"]
GROUP_ARGS = ["--centers", "4096", "--k", "64"]


# --- the children ---------------------------------------------------------------------------------


def _load_points(path):
    """The file's x, y, z as an (N, 3) float32 tensor, filled chunk by chunk (no second copy)."""
    import torch
    from pcgeom.io import iter_ply, ply_info

    n = ply_info(path).vertex_count
    pts = torch.empty((n, 3), dtype=torch.float32)
    for c in iter_ply(path, columns=["x", "y", "z"]):
        pts[c.offset:c.offset + c.points.shape[0]] = c.points
    return pts


def _maps(out_dir, n):
    import torch

    idx = torch.from_file(os.path.join(out_dir, "idx.i32"), shared=True, size=n * K, dtype=torch.int32).view(n, K)
    d2 = torch.from_file(os.path.join(out_dir, "dist2.f32"), shared=True, size=n * K, dtype=torch.float32).view(n, K)
    return idx, d2


def _child_knn(tool, ply, out_dir):
    import numpy as np
    import torch

    pts = _load_points(ply)
    n = pts.shape[0]
    idx, d2 = _maps(out_dir, n)
    t0 = time.perf_counter()
    if tool == "pcgeom":
        import pcgeom

        pcgeom.knn_streamed(pts, pts, K, out_dist2=d2, out_idx=idx, index_dtype=torch.int32, progress=False)
    elif tool == "scipy":
        from scipy.spatial import cKDTree

        x = pts.numpy()
        dd, ii = cKDTree(x).query(x, K, workers=-1)
        idx.numpy()[:] = ii
        d2.numpy()[:] = dd * dd
    elif tool == "pykdtree":
        from pykdtree.kdtree import KDTree

        x = pts.numpy()
        dd, ii = KDTree(x).query(x, k=K)
        idx.numpy()[:] = ii
        d2.numpy()[:] = dd * dd
    elif tool == "open3d":
        import open3d as o3d

        x = o3d.core.Tensor.from_numpy(pts.numpy())
        nns = o3d.core.nns.NearestNeighborSearch(x)
        nns.knn_index()
        ii, dd = nns.knn_search(x, K)
        idx.numpy()[:] = ii.numpy()
        d2.numpy()[:] = dd.numpy()  # Open3D's knn_search returns squared distances
    else:
        raise ValueError(tool)
    return {"seconds": time.perf_counter() - t0, "n": n, "first_row": idx[0].tolist()}


def _child_open3d_preprocess(ply, out_dir):
    import open3d as o3d

    t0 = time.perf_counter()
    pc = o3d.io.read_point_cloud(ply)
    n = len(pc.points)
    pc = pc.voxel_down_sample(0.05)
    pc, _ = pc.remove_statistical_outlier(20, 2.0)
    pc.estimate_normals(o3d.geometry.KDTreeSearchParamKNN(30))
    o3d.io.write_point_cloud(os.path.join(out_dir, "out.ply"), pc)
    return {"seconds": time.perf_counter() - t0, "n": n, "kept": len(pc.points)}


def _child_open3d_group(ply, out_dir):
    import numpy as np
    import open3d as o3d

    t0 = time.perf_counter()
    pc = o3d.io.read_point_cloud(ply)
    n = len(pc.points)
    centres = pc.farthest_point_down_sample(4096)
    tree = o3d.geometry.KDTreeFlann(pc)
    idx = np.stack([np.asarray(tree.search_knn_vector_3d(c, 64)[1]) for c in np.asarray(centres.points)])
    np.save(os.path.join(out_dir, "patches.npy"), idx)
    return {"seconds": time.perf_counter() - t0, "n": n}


def child_main(argv):
    step, tool, ply, out_dir = argv
    if step == "knn":
        res = _child_knn(tool, ply, out_dir)
    elif step == "preprocess":
        res = _child_open3d_preprocess(ply, out_dir)
    else:
        res = _child_open3d_group(ply, out_dir)
    print("BM_SCALE_RESULT " + json.dumps(res), flush=True)


# --- running one measured subprocess ----------------------------------------------------------------


def _private_bytes(pid):
    """The process's anonymous + shared-memory resident bytes (RssAnon + RssShmem): its own memory,
    without the file pages it maps (memory-mapped outputs, libraries), which the kernel can write
    back and drop."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("RssAnon", "RssShmem")))
        return sum(int(v.split()[0]) * 1024 for v in fields.values())
    except (OSError, ValueError):
        return 0


def measure(cmd, timeout, mem_limit, nice, env=None):
    """Runs ``cmd``; returns a dict: status (ok / out of time / out of memory / failed), wall seconds,
    peak RSS bytes (the child's ru_maxrss), the child's JSON result line if any, the output's tail."""
    log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bm_scale.{os.getpid()}.log"), "w+b")
    pre = (lambda: os.nice(nice)) if nice else None
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=pre, cwd=ROOT)
    killed, private = None, 0
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        private = max(private, _private_bytes(p.pid))
        if time.perf_counter() - t0 > timeout:
            killed = "out of time"
        elif private > mem_limit:
            killed = "out of memory"
        if killed:
            os.kill(p.pid, signal.SIGKILL)
            pid, status, ru = os.wait4(p.pid, 0)
            break
        time.sleep(0.5)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, with its rusage
    log.seek(0)
    out = log.read().decode("utf-8", "replace")
    log.close()
    os.unlink(log.name)
    res = None
    for line in out.splitlines():
        if line.startswith("BM_SCALE_RESULT "):
            res = json.loads(line[len("BM_SCALE_RESULT "):])
    if killed:
        st = killed
    elif p.returncode == 0:
        st = "ok"
    elif p.returncode == -signal.SIGKILL or "MemoryError" in out or "std::bad_alloc" in out \
            or "Cannot allocate memory" in out or "DefaultCPUAllocator: can't allocate" in out:
        st = "out of memory"
    else:
        st = "failed"
    return {"status": st, "wall_s": wall, "peak_rss": ru.ru_maxrss * 1024, "peak_private": private, "result": res,
            "tail": out[-2000:] if st != "ok" else ""}


# --- the harness ----------------------------------------------------------------------------------


def _has_memory_option(sub):
    out = subprocess.run([sys.executable, "-m", "pcgeom", sub, "--help"], capture_output=True, text=True, cwd=ROOT,
                         env=_env()).stdout
    return "--memory" in out


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _free(path):
    return shutil.disk_usage(path).free


def _size_label(n):
    e = len(str(n)) - 1
    m = n / 10 ** e
    return f"10^{e}" if m == 1 else f"{m:g}*10^{e}"


def _clear(folder):
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)


def run(args):
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    steps = [s for s in args.steps.split(",") if s]
    peers = set(p for p in args.tools.split(",") if p)
    os.makedirs(args.workdir, exist_ok=True)
    data = _load_json(args.json)
    mem_flag = {s: _has_memory_option(s) for s in ("preprocess", "group")}
    gave_up = set()  # (step, tool) that ran out of time or memory at a smaller size
    data["host"] = _host()
    data["command"] = "python benchmarks/bm_scale.py " + " ".join(args.argv)
    for n in sorted(sizes):
        ply = os.path.join(args.workdir, f"scan-{n}-seed{args.seed}.ply")
        if not os.path.exists(ply):
            need = n * 14 + (1 << 20)
            if _free(args.workdir) < need * 1.1:
                print(f"bm_scale: not enough disk for {ply} ({need / 2**30:.1f} GiB)", file=sys.stderr)
                continue
            t = time.perf_counter()
            subprocess.run([sys.executable, os.path.join(HERE, "scan_generator.py"), ply, "--points", str(n),
                            "--seed", str(args.seed)], check=True, env=_env(), cwd=ROOT)
            print(f"bm_scale: generated {ply} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        out_dir = os.path.join(args.workdir, "out")
        for step in steps:
            for tool in TOOLS[step]:
                if tool not in peers or (step, tool) in gave_up:
                    continue
                _clear(out_dir)
                need = {"knn": n * K * 8, "preprocess": n * 40, "group": n * 40}[step]
                if _free(args.workdir) < need * 1.2:
                    rec = {"status": "not enough disk", "wall_s": None, "peak_rss": None, "result": None}
                else:
                    if step == "knn" or tool != "pcgeom":
                        cmd = [sys.executable, os.path.abspath(__file__), "--child", step, tool, ply, out_dir]
                    else:
                        cmd = [sys.executable, "-m", "pcgeom", step, ply, "--out", out_dir, "--device", "cpu"]
                        cmd += PREPROCESS_ARGS if step == "preprocess" else GROUP_ARGS
                        if mem_flag[step]:
                            cmd += ["--memory", str(args.pcgeom_memory_gb)]
                    print(f"bm_scale: N={n} {step} {tool} ...", file=sys.stderr, flush=True)
                    rec = measure(cmd, args.timeout, args.memory_limit_gb * 2**30, args.nice, _env())
                    rec["cmd"] = " ".join(os.path.basename(c) if c == sys.executable else c for c in cmd[1:])
                _clear(out_dir)
                # The step's own time: the search for KNN (points already in memory), the whole process otherwise.
                res = rec.get("result") or {}
                rec["seconds"] = res.get("seconds") if step == "knn" else (rec["wall_s"] if rec["status"] == "ok"
                                                                             else None)
                rec["load"] = os.getloadavg()[0]
                rec["when"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
                print(f"bm_scale: N={n} {step} {tool}: {rec['status']} {rec['seconds']} s, "
                      f"{(rec['peak_rss'] or 0) / 2**30:.2f} GiB", file=sys.stderr, flush=True)
                if rec["status"] != "ok" and rec.get("tail"):
                    print(rec["tail"][-800:], file=sys.stderr)
                if rec["status"] in ("out of time", "out of memory"):
                    gave_up.add((step, tool))
                data["runs"][f"{step}|{tool}|{n}"] = rec
                _save_json(args.json, data)
        if not args.keep_scans:
            os.unlink(ply)
    shutil.rmtree(os.path.join(args.workdir, "out"), ignore_errors=True)
    report(args, data)


def _load_json(path):
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"runs": {}}


def _save_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _host():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    import torch

    return {"cpu": cpu, "cores": os.cpu_count(), "ram_gib": round(mem / 2**30, 1), "python": platform.python_version(),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "versions": _versions()}


def _versions():
    from importlib import metadata

    out = {}
    for mod in ("open3d", "scipy", "pykdtree", "numpy"):
        try:
            out[mod] = metadata.version(mod)
        except metadata.PackageNotFoundError:  # a wheel under another name (open3d-cpu): ask the module
            try:
                out[mod] = getattr(__import__(mod), "__version__", "?")
            except ImportError:
                out[mod] = "not installed"
    return out


# --- the report -----------------------------------------------------------------------------------


def fit(points):
    """Least squares ``t = a + b N`` over ``[(N, t)]``: ``(a, b)``; ``b`` is the cost per point."""
    if len(points) < 2:
        return None
    import numpy as np

    x = np.array([p[0] for p in points], float)
    y = np.array([p[1] for p in points], float)
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


def _cell(rec):
    if rec is None:
        return "not run", ""
    if rec["status"] != "ok":
        extra = f" after {rec['wall_s']:.0f} s" if rec.get("wall_s") else ""
        return rec["status"] + extra, (f"{rec['peak_rss'] / 2**30:.2f} GiB" if rec.get("peak_rss") else "")
    anon = f" ({rec['peak_private'] / 2**30:.2f} anon)" if rec.get("peak_private") else ""
    return f"{rec['seconds']:.1f} s", f"{rec['peak_rss'] / 2**30:.2f} GiB{anon}"


def report(args, data):
    runs = data["runs"]
    sizes = sorted({int(k.split("|")[2]) for k in runs})
    host = data.get("host", {})
    lines = [
        "# Scale benchmark: 10^7 - 10^8 points (issue 40)",
        "",
        "Generated by `benchmarks/bm_scale.py` from `benchmarks/RESULTS-scale.json`; do not edit by hand.",
        "",
        "Command (each size can be run on its own; its rows replace those of the same size):",
        "",
        "```",
        "python benchmarks/bm_scale.py --sizes 1e7,3e7,1e8",
        "```",
        "",
        f"Host: {host.get('cpu', '?')}, {host.get('cores', '?')} cores, {host.get('ram_gib', '?')} GiB RAM; "
        f"Python {host.get('python', '?')}, torch {host.get('torch', '?')} ({host.get('threads', '?')} threads), "
        + ", ".join(f"{k} {v}" for k, v in sorted(host.get("versions", {}).items())) + ".",
        "",
        "Input: `benchmarks/scan_generator.py` (terrain, buildings, trees, sensor falloff, 1 cm noise, 0.1 % "
        "outliers; float32 x, y, z + ushort intensity, binary PLY), seed 0.  Time: the KNN rows time the search "
        "with the points in memory (tree builds included, reading the PLY not); the preprocess and group rows "
        "time the whole process (read, compute, write).  Peak RSS: the process's `ru_maxrss`, which counts "
        "the written pages of the memory-mapped outputs (1.28 GB at 10^7 points, 12.8 GB at 10^8) as long as "
        "they stay resident; \"anon\" is the peak of RssAnon + RssShmem sampled twice a second: the "
        "process's own memory, which the memory limit (--memory-limit-gb) applies to.  Each row ran in its "
        "own process; the load average is the one when the row finished.",
        "",
    ]
    for step in STEPS:
        title = {"knn": f"Self-KNN, k = {K}, int32 indices + float32 squared distances to memory-mapped files",
                 "preprocess": "Preprocess: `--voxel 0.05 --remove-statistical 20,2 --normals 30`",
                 "group": "Group: `--centers 4096 --k 64`"}[step]
        lines += [f"## {title}", "", "| tool | " + " | ".join(f"N = {_size_label(n)}" for n in sizes)
                  + " | fit t = a + b N |",
                  "|---|" + "---|" * len(sizes) + "---|"]
        for tool in TOOLS[step]:
            recs = [runs.get(f"{step}|{tool}|{n}") for n in sizes]
            if not any(recs):
                continue
            cells = []
            for n, rec in zip(sizes, recs):
                t, m = _cell(rec)
                ref = runs.get(f"{step}|pcgeom|{n}")
                ratio = ""
                if tool != "pcgeom" and rec and rec["status"] == "ok" and ref and ref["status"] == "ok":
                    ratio = f", {rec['seconds'] / ref['seconds']:.2f}x pcgeom's time"
                load = f", load {rec['load']:.1f}" if rec and rec.get("load") is not None else ""
                cells.append(f"{t}, {m}{ratio}{load}" if m else t)
            f = fit([(n, r["seconds"]) for n, r in zip(sizes, recs) if r and r["status"] == "ok"])
            fs = f"{f[0]:.1f} s + {f[1] * 1e6:.2f} us x N" if f else "-"
            lines.append(f"| {tool} | " + " | ".join(cells) + f" | {fs} |")
        lines.append("")
    if args.note is not None:
        data["note"] = args.note
        _save_json(args.json, data)
    if data.get("note"):
        lines += ["## Notes", "", data["note"], ""]
    plot_rel = os.path.relpath(args.plot, ROOT)
    lines += [f"The plot (time and peak RSS against N, log-log, with the linear fits): `{plot_rel}`, shown in "
              "docs/guides/large-scenes.md (section Benchmark).", ""]
    with open(args.results, "w") as f:
        f.write("\n".join(lines))
    plot(args.plot, runs, sizes)
    print(f"bm_scale: wrote {args.results} and {args.plot}", file=sys.stderr)


def plot(path, runs, sizes):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    styles = {"pcgeom": "-", "scipy": "--", "pykdtree": "-.", "open3d": ":"}
    colours = {"knn": "C0", "preprocess": "C1", "group": "C2"}
    for step in STEPS:
        for tool in TOOLS[step]:
            pts = [(n, runs[f"{step}|{tool}|{n}"]) for n in sizes if f"{step}|{tool}|{n}" in runs]
            ok = [(n, r) for n, r in pts if r["status"] == "ok"]
            if not ok:
                continue
            label = f"{step}: {tool}"
            mk = "o" if tool == "pcgeom" else "s"
            axes[0].loglog([n for n, _ in ok], [r["seconds"] for _, r in ok], mk, color=colours[step],
                           linestyle=styles[tool] if tool != "pcgeom" else "none", label=label)
            axes[1].loglog([n for n, _ in ok], [r["peak_rss"] / 2**30 for _, r in ok], mk + styles[tool],
                           color=colours[step], label=label)
            f = fit([(n, r["seconds"]) for n, r in ok])
            if f and tool == "pcgeom":
                xs = np.geomspace(min(sizes), max(max(sizes), 1e8), 50)
                ys = f[0] + f[1] * xs
                keep = ys > 0  # a fit with a negative intercept has no log below its root
                extra = " (dashed past the largest N: extrapolated)" if max(sizes) < 1e8 else ""
                axes[0].loglog(xs[keep & (xs <= max(sizes))], ys[keep & (xs <= max(sizes))], "-",
                               color=colours[step], alpha=0.6,
                               label=f"{step}: pcgeom fit, {f[1] * 1e6:.2f} us/point{extra}")
                axes[0].loglog(xs[keep & (xs >= max(sizes))], ys[keep & (xs >= max(sizes))], "--",
                               color=colours[step], alpha=0.35)
    axes[0].set(xlabel="points N", ylabel="time (s)", title="time (pcgeom: dots + linear fit)")
    axes[1].set(xlabel="points N", ylabel="peak RSS (GiB)", title="peak RSS")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        return child_main(argv[1:])
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1e7,3e7,1e8", help="comma-separated point counts")
    ap.add_argument("--steps", default=",".join(STEPS), help="of knn,preprocess,group")
    ap.add_argument("--tools", default="pcgeom,scipy,pykdtree,open3d", help="tools to run (pcgeom and peers)")
    ap.add_argument("--workdir", default="/tmp/pcgeom-scale", help="scans and outputs (outputs deleted per step)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-scans", action="store_true", help="keep the generated PLY files for a later run")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per step before 'out of time'")
    ap.add_argument("--memory-limit-gb", type=float, default=round(0.8 * mem / 2**30, 1),
                    help="peak RSS per step before 'out of memory' (default 80%% of RAM)")
    ap.add_argument("--pcgeom-memory-gb", type=float, default=6.0,
                    help="--memory passed to pcgeom preprocess / group when they offer it")
    ap.add_argument("--nice", type=int, default=0, help="niceness of the measured processes")
    ap.add_argument("--json", default=os.path.join(HERE, "RESULTS-scale.json"))
    ap.add_argument("--results", default=os.path.join(HERE, "RESULTS-scale.md"))
    ap.add_argument("--plot", default=os.path.join(ROOT, "docs", "assets", "benchmarks", "scale.png"))
    ap.add_argument("--note", default=None, help="a paragraph for the Notes section, kept in --json for later runs "
                    "(say if the machine was shared); --note '' removes it")
    ap.add_argument("--report-only", action="store_true", help="redraw the table and plot from --json")
    args = ap.parse_args(argv)
    args.argv = argv
    if args.report_only:
        report(args, _load_json(args.json))
    else:
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
