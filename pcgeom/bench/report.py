"""How results are written: the report's rows, its markdown and the machine and software lines.

``Row`` holds one (workload, dataset) result and picks the fastest correct
peer; ``render`` turns the rows (and the scaling report) into the markdown of
``benchmarks/RESULTS.md``; ``machine`` and ``fmt`` are shared with the shape
grid's report.
"""

from __future__ import annotations

import datetime
import os
import platform
from dataclasses import dataclass, field

import torch

import pcgeom
from pcgeom.bench.workloads import SKIPS, TARGETS, WORKLOADS

# Why pcgeom can fall short of a target (printed for the missed ones).
MISS_REASONS = {
    "knn": "with k >= 16 a tree search keeps each query's k best keys in exact (distance, index) "
           "order -- a few dozen insertions per query, the same work pykdtree does (branch-free in the "
           "AVX2 copy); on a loaded machine single runs move by up to 2x",
    "knn-feat": "it is GEMM-bound: the symmetric tiles halve faiss's GEMM, and what is left is each "
                "query's candidate bookkeeping and the exact re-ranking, which faiss does not do",
    "group": "group_patches is FPS + KNN + two gathers; the KNN of 64 centres among 1024 points (tile "
             "path) is about two thirds of it",
    "fps": "the bucket FPS touches few points per step; the remaining cost is the tree build",
}


@dataclass
class Row:
    """One workload on one dataset: best and median ms, rounds, check verdicts and peak MB, per method."""

    workload: str
    dataset: str
    times: dict
    runs: dict
    checks: dict
    memory: dict = field(default_factory=dict)
    medians: dict = field(default_factory=dict)

    @property
    def peers(self):
        return {n: t for n, t in self.times.items() if n not in ("pcgeom", "torch")}

    def best_peer(self, times=None):
        """The fastest correct peer (from `times`, default the best rounds);
        for a workload whose target is the pure-torch path, torch."""
        times = self.times if times is None else times
        if TARGETS.get(self.workload, ("",))[0] == "torch":
            return ("torch", times["torch"]) if "torch" in times else (None, None)
        peers = {n: times[n] for n in self.peers
                 if not self.checks.get(n, "").startswith(("WRONG", "DIFF", "check"))}
        if not peers:
            return None, None
        n = min(peers, key=peers.get)
        return n, peers[n]


def machine() -> str:
    """CPU model, logical cores, RAM and OS, in one line."""
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f", {kb / 2**20:.0f} GiB RAM"
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores{mem}, {platform.system()} {platform.release()}"


def _versions() -> str:
    """torch, pcgeom (and whether its native kernels are loaded) and the installed peers' versions."""
    import importlib.metadata as md

    parts = [f"torch {torch.__version__}", f"pcgeom {pcgeom.__version__} (native: {pcgeom.backend_info()['extension_loaded']})"]
    for dist in ("scipy", "pykdtree", "faiss-cpu", "fpsample", "open3d-cpu", "open3d"):
        try:
            parts.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(parts)


def fmt(t) -> str:
    """A time or size for a table: 3 significant-ish digits, thousands separated, ``-`` for None."""
    if t is None:
        return "-"
    return f"{t:,.0f}" if t >= 100 else (f"{t:.1f}" if t >= 10 else f"{t:.2f}")


def render(rows, scaling, args, threads, elapsed) -> str:
    """The markdown report of a run: the timing, correctness, memory and scaling tables."""
    names = []
    for r in rows:
        for n in r.times:
            if n not in names:
                names.append(n)
    order = ["pcgeom", "torch", "scipy", "pykdtree", "faiss", "open3d", "fpsample", "fpsample-kdline"]
    names = [n for n in order if n in names] + [n for n in names if n not in order]
    lines = []
    cmd = "pcgeom bench " + " ".join(args.argv)
    lines.append("# pcgeom CPU benchmark\n")
    lines.append(f"- command: `{cmd.strip()}`")
    lines.append(f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, wall time {elapsed / 60:.1f} min")
    lines.append(f"- machine: {machine()}; {threads} threads for every method")
    lines.append(f"- software: {_versions()}")
    slow_note = ("are timed by their warm-up call alone" if args.quick else "get a third of the rounds")
    lines.append(f"- repeats: {args.repeats} interleaved rounds after one warm-up (best and median of them; "
                 f"methods slower than {args.slow:g} s per call {slow_note})")
    lines.append("")
    lines.append("Milliseconds per batch, best of the interleaved rounds (index build + query + output as "
                 "torch tensors). `ratio` = pcgeom / fastest correct peer (torch excluded; for group-mae, "
                 "pcgeom / the pure-torch path), from the best rounds: the machine is shared and noise only "
                 "adds time; `median ratio` = the same from the medians. `-` = not installed or skipped.\n")
    head = "| workload | data | " + " | ".join(names) + " | best peer | ratio | median ratio | target |"
    lines.append(head)
    lines.append("|" + "---|" * (len(names) + 6))
    for r in rows:
        bn, bt = r.best_peer()
        ratio = r.times["pcgeom"] / bt if bt else None
        _, mt = r.best_peer(r.medians) if r.medians else (None, None)
        mratio = r.medians["pcgeom"] / mt if mt else None
        tgt = TARGETS.get(r.workload)
        tgt_s = "-" if tgt is None else f"<= {tgt[1]:g}"
        if tgt is not None and ratio is not None:
            tgt_s += " met" if ratio <= tgt[1] else " **missed**"
        cells = [fmt(r.times.get(n)) if (r.workload, n) not in SKIPS else "skipped" for n in names]
        lines.append(f"| {r.workload} | {r.dataset} | " + " | ".join(cells)
                     + f" | {bn or '-'} | {'-' if ratio is None else f'{ratio:.2f}'}"
                     + f" | {'-' if mratio is None else f'{mratio:.2f}'} | {tgt_s} |")
    missed = []
    for r in rows:
        bn, bt = r.best_peer()
        tgt = TARGETS.get(r.workload)
        if tgt is not None and bt and r.times["pcgeom"] / bt > tgt[1]:
            missed.append((r.workload, r.dataset, r.times["pcgeom"] / bt, tgt[1]))
    if missed:
        lines.append("")
        lines.append("Targets missed: " + "; ".join(f"{w} on {d} ({x:.2f} for <= {t:g}, {x / t - 1:.0%} over)"
                                                   for w, d, x, t in missed) + ".")
        for key in sorted({w if w in MISS_REASONS else WORKLOADS[w]["op"] for w, _, _, _ in missed}):
            if key in MISS_REASONS:
                lines.append(f"- {key}: {MISS_REASONS[key]}.")
    lines.append("")
    lines.append("Correctness on a subsample (pcgeom against the pure-torch reference, bit for bit; "
                 "peers against float64 brute force / the reference FPS sequence):\n")
    lines.append("| workload | data | " + " | ".join(names) + " |")
    lines.append("|" + "---|" * (len(names) + 2))
    for r in rows:
        lines.append(f"| {r.workload} | {r.dataset} | " + " | ".join(r.checks.get(n, "-") for n in names) + " |")
    if any(r.memory for r in rows):
        lines.append("")
        lines.append("Peak extra resident memory per call, MB (fresh process per method, warmed up on a "
                     "256-point copy; high-water mark during one call minus the resident set before it, "
                     "outputs included):\n")
        lines.append("| workload | data | " + " | ".join(names) + " |")
        lines.append("|" + "---|" * (len(names) + 2))
        for r in rows:
            if r.memory:
                lines.append(f"| {r.workload} | {r.dataset} | "
                             + " | ".join(fmt(r.memory.get(n)) for n in names) + " |")
    if skipped := sorted({(w, m) for (w, m) in SKIPS if any(r.workload == w for r in rows)}):
        lines.append("")
        lines.append("Skipped: " + "; ".join(f"{m} on {w} ({SKIPS[(w, m)]})" for w, m in skipped) + ".")
    if scaling:
        lines.append("")
        lines.append("Scaling, uniform cube, one cloud: self-KNN k=16 and FPS with S = N/50 "
                     "(median ms over the runs shown, peak extra MB):\n")
        lines.append("| op | N | pcgeom ms | pcgeom MB | peer | peer ms | peer MB | ratio |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for s in scaling:
            pm, pr = s["pcgeom"], s["peer"]
            ratio = pm["ms"] / pr["ms"] if pm and pr else None
            lines.append(f"| {s['op']} | {s['N']:,} | {fmt(pm and pm['ms'])} | {fmt(pm and pm['mb'])} | "
                         f"{s['peer_name']} | {fmt(pr and pr['ms'])} | {fmt(pr and pr['mb'])} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    lines.append("")
    lines.append("Datasets: `cube` = uniform in the unit cube (seed 0); `sphere` = uniform on the unit sphere's "
                 "surface; `clustered` = 32 Gaussian blobs per cloud with widths from 0.002 to 0.2 (densities "
                 "100x apart); `scan` = the bundled scans "
                 "(bunny, armadillo, chinese_dragon, kitten, one per cloud in turn), subsampled, or "
                 "densified within the tangent plane when a workload needs more points than the scan "
                 "has; knn-feat on `scan` uses 64-D positional-encoding features of the scan points.")
    return "\n".join(lines) + "\n"

