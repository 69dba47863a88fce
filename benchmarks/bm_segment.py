"""CPU benchmark of the deterministic segment reductions behind the torch_scatter stand-in.

Rows (issue 19), on PTv2-like shapes: ``N`` rows of ``C = 64`` float32
features reduced into ``G`` groups (random group ids, every group non-empty
on average ``N / G`` rows):

* ``scatter-sum`` / ``scatter-mean`` / ``scatter-max``: ``torch_scatter``'s
  ``scatter(src, index, dim=0, reduce=...)`` served by pcgeom, against the
  pure-torch composition users write, ``torch.zeros(G, C).scatter_reduce_(0,
  index[:, None].expand(N, C), src, "sum" | "mean" | "amax",
  include_self=False)`` (``scatter-max`` for pcgeom also returns the argmax,
  which the composition does not).
* ``scatter-sum-fwd-bwd``: the same sum, forward + backward.
* ``segment-csr-sum`` / ``segment-csr-max`` (+ ``-fwd-bwd``): ``segment_csr``
  over sorted groups (PTv2's / PTv3's grid pooling), against
  ``torch.segment_reduce(src, "sum" | "max", offsets=indptr)`` (whose max
  gradient is split between ties; pcgeom's goes to the first, as torch_scatter's).
* ``scatter-softmax``: ``scatter_softmax`` against the composition
  ``exp(x - amax[index]) / sum[index]`` with two ``scatter_reduce``.

Timing: the methods of a row are run interleaved, ``--repeats`` rounds after a
warm-up; the best time is reported (the machine is shared) with the ratio to
the composition.

Usage::

    python benchmarks/bm_segment.py                      # writes benchmarks/RESULTS-segment.md
    python benchmarks/bm_segment.py --n 50000 --repeats 3 --no-write
"""

from __future__ import annotations

import argparse
import os
import platform

import torch

import pcgeom.compat.torch_scatter as ts
from pcgeom.bench.timing import interleaved

HERE = os.path.dirname(os.path.abspath(__file__))


def inputs(n, c, g, seed=0):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randn(n, c, generator=gen)
    index = torch.randint(0, g, (n,), generator=gen)
    return src, index


def composition(src, index, g, reduce):
    n, c = src.shape
    return torch.zeros(g, c, dtype=src.dtype).scatter_reduce_(0, index[:, None].expand(n, c), src, reduce,
                                                               include_self=False)


def rows(n, c, g):
    src, index = inputs(n, c, g)
    srcg = src.clone().requires_grad_()
    sidx, perm = torch.sort(index, stable=True)
    ssrc = src[perm]
    ssrcg = ssrc.clone().requires_grad_()
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(torch.bincount(sidx, minlength=g), 0)])

    def fwd_bwd_pc():
        ts.scatter(srcg, index, 0, None, g, "sum").square().sum().backward()

    def fwd_bwd_torch():
        composition(srcg, index, g, "sum").square().sum().backward()

    def softmax_torch():
        mx = composition(src, index, g, "amax")
        e = (src - mx[index]).exp()
        return e / composition(e, index, g, "sum")[index]

    return {
        "scatter-sum": [("pcgeom scatter", lambda: ts.scatter(src, index, 0, None, g, "sum")),
                        ("torch scatter_reduce", lambda: composition(src, index, g, "sum"))],
        "scatter-mean": [("pcgeom scatter", lambda: ts.scatter(src, index, 0, None, g, "mean")),
                         ("torch scatter_reduce", lambda: composition(src, index, g, "mean"))],
        "scatter-max": [("pcgeom scatter_max (values + arg)", lambda: ts.scatter_max(src, index, 0, None, g)),
                        ("torch scatter_reduce", lambda: composition(src, index, g, "amax"))],
        "scatter-sum-fwd-bwd": [("pcgeom scatter", fwd_bwd_pc), ("torch scatter_reduce", fwd_bwd_torch)],
        "segment-csr-sum": [("pcgeom segment_csr", lambda: ts.segment_csr(ssrc, indptr)),
                            ("torch segment_reduce", lambda: torch.segment_reduce(ssrc, "sum", offsets=indptr))],
        "segment-csr-max": [("pcgeom segment_csr", lambda: ts.segment_csr(ssrc, indptr, reduce="max")),
                            ("torch segment_reduce", lambda: torch.segment_reduce(ssrc, "max", offsets=indptr))],
        "segment-csr-max-fwd-bwd": [("pcgeom segment_csr", lambda: ts.segment_csr(ssrcg, indptr, reduce="max").sum().backward()),
                                    ("torch segment_reduce",
                                     lambda: torch.segment_reduce(ssrcg, "max", offsets=indptr).sum().backward())],
        "scatter-softmax": [("pcgeom scatter_softmax", lambda: ts.scatter_softmax(src, index, 0, g)),
                            ("torch scatter_reduce", softmax_torch)],
    }


def bench(methods, repeats):
    """Best time (s) of each method over interleaved rounds after a warm-up."""
    return {name: min(ts_, default=float("inf")) for name, ts_ in interleaved(methods, repeats).items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--c", type=int, default=64)
    ap.add_argument("--groups", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    lines = [
        "# Segment reductions (torch_scatter stand-in): CPU benchmark",
        "",
        f"Command: `python benchmarks/bm_segment.py --n {a.n} --c {a.c} --groups {a.groups} --repeats {a.repeats}`",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}. **A busy shared machine** (other jobs compiling at the same time): "
        "best of the rounds, ratios are more telling than absolute times.",
        "",
        f"Shapes: {a.n} rows x {a.c} float32 features into {a.groups} groups (random ids).",
        "",
        "| row | method | ms | vs composition |",
        "|---|---|---:|---:|",
    ]
    for row, methods in rows(a.n, a.c, a.groups).items():
        best = bench(methods, a.repeats)
        ref = best[methods[-1][0]]
        for name, _ in methods:
            lines.append(f"| {row} | {name} | {best[name] * 1e3:.1f} | {best[name] / ref:.2f} |")
        print("\n".join(lines[-len(methods):]), flush=True)
    lines += ["", "pcgeom's results are deterministic (no atomics; see docs/guides/torch-scatter.md); on CPU the",
              "composition is deterministic too, on CUDA its sums are not."]
    if not a.no_write:
        with open(os.path.join(HERE, "RESULTS-segment.md"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
