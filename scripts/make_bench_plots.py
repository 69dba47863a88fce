"""Draws the benchmark plots of the documentation from the results files the benchmarks write.

    python scripts/make_bench_plots.py [--results benchmarks] [--out docs/assets/benchmarks]

Reads ``benchmarks/RESULTS.md`` (``pcgeom bench`` and ``pcgeom bench --grid``) and
``benchmarks/RESULTS-distributed.md`` (``benchmarks/bm_distributed.py``) and writes

* ``workloads.png``: milliseconds per batch of pcgeom and every peer, per workload and data distribution;
* ``ratios.png``: pcgeom / the fastest correct peer per workload and distribution, with each workload's target;
* ``scaling.png``: self-KNN and FPS time against N, pcgeom and the best peer;
* ``distributed.png``: sharded KNN search time and resident memory per rank against the number of ranks;
* ``grid.png``: the shape grid (pcgeom.knn / torch.cdist + topk) as a heat map over N and D.

The tables are found by their column names, not by their position in the file, so the benchmarks may add rows,
columns, sections or notes; a table that is missing is reported and its plot skipped (exit status 1). Rerun this
after a benchmark run and commit the images: the docs show them as they are, never drawn by hand.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_MISSING = {"", "-", "skipped", "n/a", "—"}


# --------------------------------------------------------------------------- parsing
def parse_tables(text: str) -> list[dict]:
    """Every Markdown pipe table in ``text``: ``{"header": [...], "rows": [[...], ...], "heading": str}``.

    ``heading`` is the last Markdown heading above the table. Cells are stripped strings; rows with fewer cells
    than the header are padded with empty strings.
    """
    tables, heading = [], ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if (line.startswith("|") and i + 1 < len(lines)
                and re.fullmatch(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?", lines[i + 1].strip())):
            header = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                cells = _cells(lines[i].strip())
                rows.append(cells + [""] * (len(header) - len(cells)))
                i += 1
            tables.append({"header": header, "rows": rows, "heading": heading})
            continue
        i += 1
    return tables


def _cells(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|"):
        line = line[:-1]
    return [c.strip().strip("*").strip() for c in line.split("|")]


def number(cell: str) -> float | None:
    """``"2,583"`` -> 2583.0, ``"1.0 ms"`` -> 1.0, ``"10^6"`` -> 1e6, ``"-"`` / ``"skipped"`` -> None."""
    c = cell.strip().strip("*").replace(",", "").replace("\u202f", "").strip()
    if c.lower() in _MISSING:
        return None
    m = re.fullmatch(r"10\^(\d+)", c)
    if m:
        return 10.0 ** int(m.group(1))
    m = re.match(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?", c)
    return float(m.group(0)) if m else None


def find_table(tables: list[dict], *columns: str) -> dict | None:
    """The first table whose header holds all of ``columns`` (case-insensitive)."""
    want = [c.lower() for c in columns]
    for t in tables:
        head = [h.lower() for h in t["header"]]
        if all(c in head for c in want):
            return t
    return None


def column(table: dict, name: str) -> int:
    return [h.lower() for h in table["header"]].index(name.lower())


# --------------------------------------------------------------------------- plots
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "figure.dpi": 100,
                         "svg.hashsalt": "pcgeom", "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


METHOD_COLUMNS_END = ("best peer", "ratio", "median ratio", "target")


def workload_rows(table: dict):
    """``{workload: {data: {method: ms}}}`` and the method names, pcgeom first, from the main results table."""
    h = table["header"]
    iw, idata = column(table, "workload"), column(table, "data")
    methods = [name for j, name in enumerate(h) if j not in (iw, idata) and name.lower() not in METHOD_COLUMNS_END]
    out: dict = defaultdict(dict)
    for r in table["rows"]:
        out[r[iw]][r[idata]] = {m: number(r[h.index(m)]) for m in methods}
    return out, methods


def plot_workloads(table: dict, path: Path) -> None:
    plt = _plt()
    data, methods = workload_rows(table)
    workloads = list(data)
    cols = 4
    rows = math.ceil(len(workloads) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(15, 3.4 * rows), squeeze=False)
    cmap = plt.get_cmap("tab10")
    colour = {m: ("#d62728" if m == "pcgeom" else cmap((i + (i >= 3)) % 10)) for i, m in enumerate(methods)}
    for ax, w in zip(axes.flat, workloads):
        dists = list(data[w])
        present = [m for m in methods if any(data[w][d].get(m) for d in dists)]
        width = 0.8 / max(1, len(present))
        for j, m in enumerate(present):
            xs = [i + (j - (len(present) - 1) / 2) * width for i in range(len(dists))]
            ys = [data[w][d].get(m) or 0 for d in dists]
            ax.bar(xs, ys, width, color=colour[m], label=m, edgecolor="white", linewidth=0.3)
        ax.set_yscale("log")
        ax.set_xticks(range(len(dists)), dists)
        ax.set_title(w)
        ax.set_ylabel("ms per batch")
        ax.legend(fontsize=7, ncol=2, frameon=False)
    for ax in list(axes.flat)[len(workloads):]:
        ax.axis("off")
    fig.suptitle("pcgeom and each peer, per workload (lower is better)", y=1.0)
    fig.tight_layout()
    _save(fig, path)


def plot_ratios(table: dict, path: Path) -> None:
    plt = _plt()
    iw, idata, ir = column(table, "workload"), column(table, "data"), column(table, "ratio")
    it = column(table, "target")
    ratios: dict = defaultdict(dict)
    targets = {}
    for r in table["rows"]:
        ratios[r[iw]][r[idata]] = number(r[ir])
        m = re.search(r"<=\s*([\d.]+)", r[it])
        if m:
            targets[r[iw]] = float(m.group(1))
    workloads = list(ratios)
    dists = list(dict.fromkeys(d for w in workloads for d in ratios[w]))
    fig, ax = plt.subplots(figsize=(12, 3.8))
    width = 0.8 / len(dists)
    cmap = plt.get_cmap("Set2")
    for j, d in enumerate(dists):
        xs = [i + (j - (len(dists) - 1) / 2) * width for i in range(len(workloads))]
        ax.bar(xs, [ratios[w].get(d) or 0 for w in workloads], width, label=d, color=cmap(j))
    for i, w in enumerate(workloads):
        if w in targets:
            ax.hlines(targets[w], i - 0.45, i + 0.45, colors="black", linestyles="--", linewidth=1.2,
                      label="target" if i == 0 else None)
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_ylabel("pcgeom / fastest correct peer")
    ax.set_title("Ratio to the best peer (group-mae: to the pure-torch path); lower is better")
    ax.legend(ncol=len(dists) + 1, frameon=False, fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def plot_scaling(table: dict, path: Path) -> None:
    plt = _plt()
    iop, iN = column(table, "op"), column(table, "N")
    ip, ipeer, ipeerms = column(table, "pcgeom ms"), column(table, "peer"), column(table, "peer ms")
    series: dict = defaultdict(lambda: {"N": [], "pcgeom": [], "peer": [], "peer_name": ""})
    for r in table["rows"]:
        s = series[r[iop]]
        s["N"].append(number(r[iN]))
        s["pcgeom"].append(number(r[ip]))
        s["peer"].append(number(r[ipeerms]))
        s["peer_name"] = r[ipeer]
    fig, axes = plt.subplots(1, len(series), figsize=(5.2 * len(series), 3.8), squeeze=False)
    for ax, (op, s) in zip(axes.flat, series.items()):
        ax.loglog(s["N"], s["pcgeom"], "o-", color="#d62728", label="pcgeom")
        ax.loglog(s["N"], s["peer"], "s--", color="#1f77b4", label=s["peer_name"])
        for n, a, b in zip(s["N"], s["pcgeom"], s["peer"]):
            if a and b:
                ax.annotate(f"{a / b:.2f}x", (n, a), textcoords="offset points", xytext=(4, -12), fontsize=7)
        ax.set_xlabel("N points")
        ax.set_ylabel("ms (median)")
        ax.set_title(op)
        ax.legend(frameon=False)
    fig.suptitle("Scaling with N, one cloud in the uniform cube (labels: pcgeom / peer)", y=1.02)
    fig.tight_layout()
    _save(fig, path)


def plot_distributed(table: dict, path: Path) -> None:
    plt = _plt()
    ir = column(table, "ranks")
    isearch = column(table, "search s (slowest rank)")
    iown = column(table, "own-shard search s")
    ires = column(table, "resident MiB")
    by: dict = defaultdict(lambda: {"search": [], "own": [], "res": []})
    for r in table["rows"]:
        n = int(number(r[ir]))
        by[n]["search"].append(number(r[isearch]))
        by[n]["own"].append(number(r[iown]))
        by[n]["res"].append(number(r[ires]))
    ranks = sorted(by)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    a1.plot(ranks, [max(by[n]["search"]) for n in ranks], "o-", color="#d62728", label="search (slowest rank)")
    a1.plot(ranks, [sum(by[n]["own"]) / len(by[n]["own"]) for n in ranks], "s--", color="#1f77b4",
            label="own-shard search (mean over ranks)")
    a1.set_xlabel("ranks")
    a1.set_ylabel("seconds per 1,000 queries")
    a1.set_xticks(ranks)
    a1.set_ylim(bottom=0)
    a1.legend(frameon=False, fontsize=8)
    a1.set_title("Search time (shared 2-core machine)")
    a2.bar([str(n) for n in ranks], [max(by[n]["res"]) for n in ranks], color="#2ca02c")
    a2.set_xlabel("ranks")
    a2.set_ylabel("resident MiB per rank")
    a2.set_title("Memory per rank falls with the shard")
    fig.tight_layout()
    _save(fig, path)


def plot_grid(table: dict, path: Path) -> None:
    plt = _plt()
    import numpy as np

    iB, iM, iN, iD, ik = (column(table, c) for c in ("B", "M", "N", "D", "k"))
    iratio = column(table, "ratio")
    cells = []
    for r in table["rows"]:
        vals = [number(r[i]) for i in (iB, iM, iN, iD, ik, iratio)]
        if None not in vals:
            cells.append(vals)
    Ns = sorted({c[2] for c in cells})
    Ds = sorted({c[3] for c in cells})
    worst = np.full((len(Ds), len(Ns)), np.nan)
    count = np.zeros((len(Ds), len(Ns)), dtype=int)
    for B, M, N, D, k, ratio in cells:
        i, j = Ds.index(D), Ns.index(N)
        worst[i, j] = ratio if np.isnan(worst[i, j]) else max(worst[i, j], ratio)
        count[i, j] += 1
    fig, ax = plt.subplots(figsize=(11, 4.6))
    from matplotlib.colors import TwoSlopeNorm

    im = ax.imshow(np.ma.masked_invalid(worst), cmap="RdYlGn_r", aspect="auto",
                   norm=TwoSlopeNorm(vmin=0.0, vcenter=1.0, vmax=max(1.5, float(np.nanmax(worst)))))
    for i in range(len(Ds)):
        for j in range(len(Ns)):
            if count[i, j]:
                label = f"{worst[i, j]:.2f}" + (f"\n({count[i, j]})" if count[i, j] > 1 else "")
                ax.text(j, i, label, ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(Ns)), [_short(n) for n in Ns])
    ax.set_yticks(range(len(Ds)), [str(int(d)) for d in Ds])
    ax.set_xlabel("N (points per cloud)")
    ax.set_ylabel("D")
    below = sum(1 for c in cells if c[5] <= 0.8)
    ax.set_title(f"pcgeom.knn / (torch.cdist + topk) over {len(cells)} shapes: {below} at <= 0.8 "
                 f"(worst ratio per place; count in brackets)")
    fig.colorbar(im, ax=ax, label="ratio (lower is better)")
    fig.tight_layout()
    _save(fig, path)


def _short(n: float) -> str:
    n = int(n)
    if n >= 10**6 and n % 10**6 == 0:
        return f"{n // 10**6}M"
    if n >= 10**4 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks", help="folder of RESULTS*.md")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "assets" / "benchmarks", help="folder for the PNGs")
    args = ap.parse_args(argv)

    def tables_of(name):
        p = args.results / name
        if not p.is_file():
            print(f"missing {p}: its plots are skipped", file=sys.stderr)
            return []
        return parse_tables(p.read_text(encoding="utf-8"))

    cpu, dist = tables_of("RESULTS.md"), tables_of("RESULTS-distributed.md")
    jobs = [
        ("workloads.png", plot_workloads, find_table(cpu, "workload", "data", "pcgeom", "ratio", "target")),
        ("ratios.png", plot_ratios, find_table(cpu, "workload", "data", "pcgeom", "ratio", "target")),
        ("scaling.png", plot_scaling, find_table(cpu, "op", "N", "pcgeom ms", "peer", "peer ms")),
        ("distributed.png", plot_distributed,
         find_table(dist, "ranks", "search s (slowest rank)", "own-shard search s", "resident MiB")),
        ("grid.png", plot_grid, find_table(cpu, "B", "M", "N", "D", "k", "ratio")),
    ]
    status = 0
    for name, fn, table in jobs:
        if table is None or not table["rows"]:
            print(f"{name}: its table was not found in the results files; skipped", file=sys.stderr)
            status = 1
            continue
        fn(table, args.out / name)
    return status


if __name__ == "__main__":
    sys.exit(main())
