"""The shape grid (``pcgeom bench --grid``): pcgeom.knn against torch.cdist + topk, cell by cell.

``GRID`` is a sparse grid of (B, M, N, D, k) shapes; ``run_grid`` times each
cell (``time_pair``) and checks it against the reference, ``render_grid``
writes the markdown block, and ``merge_grid`` puts that block (or a new main
report) into ``RESULTS.md`` without losing the other part.
"""

from __future__ import annotations

import datetime
import os
import statistics

import torch

import pcgeom
from pcgeom.bench.checks import check_grid_cell
from pcgeom.bench.peers import chunked_torch_knn
from pcgeom.bench.report import fmt, machine
from pcgeom.bench.timing import time_pair


# (B, M, N, D, k): a sparse grid over N = 16 ... 10^6, M = 1 ... N, k = 1 ... N,
# D = 2 ... 512 and B = 1 ... 1024, with the work of a cell (B * M * N * D)
# kept below about 2 * 10^9 so the whole grid runs in a few minutes on 2 cores.
# M == N means a self query (the same tensor as query and points).
GRID = [
    # tiny clouds, huge batches
    (1024, 16, 16, 3, 1), (1024, 16, 16, 3, 8), (1024, 16, 16, 3, 16), (1024, 64, 64, 64, 8),
    # small clouds, k a large share of N (normal estimation, KNN_CUDA's shape)
    (64, 224, 224, 3, 16), (64, 224, 224, 3, 100), (64, 224, 224, 3, 224), (1, 224, 224, 5, 100),
    (1, 1, 224, 3, 100),
    # 1024-point clouds: Point-MAE grouping, k from 1 to N
    (32, 64, 1024, 3, 32), (16, 1024, 1024, 3, 1), (16, 1024, 1024, 3, 16),
    (16, 1024, 1024, 3, 256), (16, 1024, 1024, 3, 1024), (128, 64, 1024, 3, 32),
    # other low dimensions
    (4, 4096, 4096, 2, 16), (4, 2048, 2048, 5, 64), (4, 2048, 2048, 8, 16),
    # larger clouds
    (8, 8192, 8192, 3, 16), (1, 8192, 8192, 3, 1024), (1, 1000, 100_000, 3, 16),
    (1, 1, 100_000, 3, 100_000), (1, 100, 1_000_000, 3, 16), (1, 1, 1_000_000, 3, 1),
    (1, 1, 1_000_000, 3, 1000), (1, 1, 1_000_000, 3, 1_000_000),
    # feature space
    (16, 1024, 1024, 16, 16), (32, 256, 256, 64, 20), (4, 4096, 4096, 64, 20),
    (4, 1, 4096, 64, 1), (1, 2048, 2048, 128, 100), (1, 2048, 2048, 128, 2048),
    (8, 512, 512, 512, 32), (1, 64, 16384, 512, 16), (1, 1, 65536, 256, 10),
]


def _grid_inputs(B, M, N, D, seed=0):
    # Uniform in the unit cube: query (B, M, D) and points (B, N, D); M == N is a self query (one tensor).
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(B, N, D, generator=g)
    q = p if M == N else torch.rand(B, M, D, generator=g)
    return q, p


def run_grid(cells, budget_s: float, log=print):
    """Time pcgeom.knn against chunked cdist + topk on each (B, M, N, D, k) cell; one dict per cell."""
    rows = []
    for B, M, N, D, k in cells:
        q, p = _grid_inputs(B, M, N, D)
        fa = lambda: tuple(pcgeom.knn(q, p, k))  # noqa: E731
        fb = lambda: chunked_torch_knn(q, p, k)  # noqa: E731
        exact = check_grid_cell(q, p, k, fa())
        ta, tb, rounds = time_pair(fa, fb, budget_s)
        r = dict(B=B, M=M, N=N, D=D, k=k, pcgeom_ms=1e3 * ta, torch_ms=1e3 * tb, ratio=ta / tb,
                 rounds=rounds, exact=exact)
        rows.append(r)
        log(f"B={B:5d} M={M:7d} N={N:8d} D={D:4d} k={k:8d}  pcgeom {fmt(1e3 * ta):>8s} ms  "
            f"cdist+topk {fmt(1e3 * tb):>8s} ms  ratio {ta / tb:5.2f}  {'exact' if exact else 'MISMATCH'}",
            flush=True)
        del q, p
    return rows


GRID_BEGIN = "<!-- grid: begin (pcgeom bench --grid) -->"
GRID_END = "<!-- grid: end -->"

# Cells above 1.0 or 0.8 that are understood (filled in from the measured run).
GRID_NOTES = {
    (8, 512, 512, 512, 32): ("GEMM-bound: at D = 512 a 512-point cloud is only two 256-row tiles, so cdist's single multi-threaded BLAS call is as fast as pcgeom's half-size (symmetric) GEMM, and pcgeom then re-ranks each query's ~k candidates exactly (3 x 512 scalar flops each), which cdist never does; the tile path is slower still here (3 flops per coordinate pair without BLAS). Measured 0.73 to 1.26 over four earlier runs, 1.14 and 1.04 in the last two"),
    (1, 2048, 2048, 128, 100): ('GEMM-bound at the blocked/tile boundary (N * D = 2^18): both kernels are within 10 % of cdist here; the exact re-ranking of ~k candidates per query is what cdist does not pay'),
    (32, 256, 256, 64, 20): ("small high-D clouds: the tile path's exact distances cost 3 flops per coordinate pair against BLAS's fused ones; was 1.21 before the tile path"),
    (1024, 16, 16, 3, 1): ('16,384 queries of 16 points: about 125 ns per query, call and bookkeeping bound (cdist+topk is one batched kernel here)'),
    (1024, 16, 16, 3, 8): ('as for k = 1'),
}


def render_grid(rows, args, threads, elapsed) -> str:
    """The grid's markdown block, between ``GRID_BEGIN`` and ``GRID_END``."""
    cmd = "pcgeom bench " + " ".join(args.argv)
    lines = [GRID_BEGIN, "## Shape grid: pcgeom.knn against torch.cdist + topk", ""]
    lines.append(f"- command: `{cmd.strip()}`")
    lines.append(f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, wall time {elapsed / 60:.1f} min")
    lines.append(f"- machine: {machine()}; {threads} threads for both (shared machine: other jobs were running)")
    lines.append(f"- software: torch {torch.__version__}, pcgeom {pcgeom.__version__} "
                 f"(native: {pcgeom.backend_info()['extension_loaded']})")
    lines.append("- method: uniform points in the unit cube, float32; M = N is a self query. Each cell runs "
                 "one warm-up call of each, then interleaved alternations (pcgeom, cdist+topk, pcgeom, ...) "
                 "for about 1.5 s (3 to 15 rounds); the times are the best of each, ratio = pcgeom / "
                 "cdist+topk (noise only adds time, so the best runs compare the code, not the load). "
                 "cdist+topk is chunked over queries to stay under 256 MB, as `pcgeom bench` does. "
                 "`exact`: pcgeom equals the pure-torch reference bit for bit on the cell's first queries.")
    lines.append("")
    lines.append("| B | M | N | D | k | pcgeom ms | cdist+topk ms | ratio | rounds | check |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lines.append(f"| {r['B']:,} | {r['M']:,} | {r['N']:,} | {r['D']} | {r['k']:,} | {fmt(r['pcgeom_ms'])} | "
                     f"{fmt(r['torch_ms'])} | {r['ratio']:.2f} | {r['rounds']} | "
                     f"{'exact' if r['exact'] else 'MISMATCH'} |")
    ratios = [r["ratio"] for r in rows]
    over1 = [r for r in rows if r["ratio"] > 1.0]
    over08 = [r for r in rows if r["ratio"] > 0.8]
    lines.append("")
    lines.append(f"{len(rows)} cells: {len(rows) - len(over08)} at <= 0.8, {len(over08) - len(over1)} in (0.8, 1.0], "
                 f"{len(over1)} above 1.0; median ratio {statistics.median(ratios):.2f}.")
    for r in over08:
        key = (r["B"], r["M"], r["N"], r["D"], r["k"])
        note = GRID_NOTES.get(key)
        if note:
            lines.append(f"- B={r['B']} M={r['M']} N={r['N']} D={r['D']} k={r['k']} ({r['ratio']:.2f}): {note}")
    lines.append(GRID_END)
    return "\n".join(lines) + "\n"


def merge_grid(path: str, block: str | None, report: str | None) -> str:
    """RESULTS.md with the grid block replaced (or appended) and/or the main
    report replaced, keeping whichever part is not being rewritten."""
    old = ""
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if GRID_BEGIN in old and GRID_END in old:
        a = old.index(GRID_BEGIN)
        b = old.index(GRID_END) + len(GRID_END)
        old_main = (old[:a] + old[b:]).rstrip() + "\n"
        old_block = old[a:b] + "\n"
    else:
        old_main, old_block = old, None
    main = report if report is not None else old_main
    grid = block if block is not None else old_block
    return main.rstrip() + "\n" + ("\n" + grid if grid else "")
