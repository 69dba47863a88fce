"""Retrieval benchmark for ``pcgeom.nn.KNNClassifier``: gallery 100,000 x 128,
1,000 queries, k = 5, against faiss ``IndexFlatL2`` and pure-torch ``cdist`` + ``topk``.

For each method: median wall time over several runs (methods interleaved, so
drift in machine load hits all of them alike, after one warm-up run each), peak
extra memory during the call, and a correctness check against a float64
ground truth (exact index match, recall@k).

Peak memory on CPU is the process's resident-set high-water mark during the
call minus the resident set before it (Linux: ``/proc/self/clear_refs`` resets
the mark); on CUDA it is ``torch.cuda.max_memory_allocated`` above the
allocation before the call.  faiss always runs on the CPU.

Usage::

    python benchmarks/bm_knn_classifier.py                      # the retrieval workload
    python benchmarks/bm_knn_classifier.py --repeats 7 --threads 2
    python benchmarks/bm_knn_classifier.py --gallery 1000000 --queries 100   # memory at 1e6 x 128
    python benchmarks/bm_knn_classifier.py --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import pcgeom
from pcgeom.bench.timing import PeakMemory, interleaved
from pcgeom.nn import KNNClassifier

MiB = 2**20


# ---------------------------------------------------------------- methods
def make_methods(gallery: torch.Tensor, labels: torch.Tensor, k: int, device: torch.device):
    """name -> (callable(query) -> idx (M, k) on CPU as int64 numpy, note)."""
    methods = {}
    clf = KNNClassifier(gallery.to(device), labels.to(device), k=k)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def pcgeom_kneighbors(q):
        idx = clf.kneighbors(q).idx
        sync()
        return idx

    def pcgeom_forward(q):
        out = clf(q)  # search + uniform vote: (M, C) scores
        sync()
        return out

    def torch_cdist(q):
        # The usual hand-rolled version: an M x N distance matrix, then topk.
        idx = torch.cdist(q, clf.features).topk(k, dim=1, largest=False).indices
        sync()
        return idx

    methods["pcgeom KNNClassifier.kneighbors"] = (pcgeom_kneighbors, "exact, chunked")
    methods["pcgeom KNNClassifier.forward"] = (pcgeom_forward, "search + vote")
    methods["torch cdist + topk"] = (torch_cdist, "M x N matrix")
    try:
        import faiss
    except ImportError:
        print('faiss not installed (pip install "pcgeom[bench]" or faiss-cpu): its row is skipped')
    else:
        index = faiss.IndexFlatL2(gallery.shape[1])
        index.add(np.ascontiguousarray(gallery.numpy(), dtype=np.float32))

        def faiss_flat(q):
            qn = q.cpu().numpy() if q.device.type != "cpu" else q.numpy()
            _, idx = index.search(qn, k)
            return idx

        methods["faiss IndexFlatL2.search"] = (faiss_flat, "CPU, |q|^2+|p|^2-2qp")
    return methods


def ground_truth(query: torch.Tensor, gallery: torch.Tensor, k: int, chunk: int = 100):
    """float64 brute force; ties to the lower index.  Returns (dist2, idx)."""
    g = gallery.double()
    g2 = (g * g).sum(1)
    ds, ids = [], []
    for s in range(0, query.shape[0], chunk):
        q = query[s:s + chunk].double()
        d = (q * q).sum(1, keepdim=True) + g2[None] - 2 * q @ g.T
        # refine: exact differences on the 4k best candidates (removes expansion error)
        cand = d.topk(min(4 * k, g.shape[0]), dim=1, largest=False).indices
        exact = ((q[:, None, :] - g[cand]) ** 2).sum(-1)
        # lexicographic (dist, index): sort by index, then stably by distance
        o1 = torch.sort(cand, dim=1).indices
        cand, exact = cand.gather(1, o1), exact.gather(1, o1)
        o2 = torch.sort(exact, dim=1, stable=True).indices[:, :k]
        ids.append(cand.gather(1, o2))
        ds.append(exact.gather(1, o2))
    return torch.cat(ds), torch.cat(ids)


def check(idx, gt_d: torch.Tensor, gt_i: torch.Tensor, query: torch.Tensor, gallery: torch.Tensor) -> str:
    idx = torch.as_tensor(np.asarray(idx.cpu() if isinstance(idx, torch.Tensor) else idx)).long()
    exact = (idx == gt_i).all(1).double().mean().item()
    recall = np.mean([len(set(a) & set(b)) / gt_i.shape[1] for a, b in zip(idx.tolist(), gt_i.tolist())])
    # the k-th neighbour distance each method found, vs the truth
    d = ((query.double()[:, None, :] - gallery.double()[idx.clamp_min(0)]) ** 2).sum(-1)
    rel = ((d.max(1).values - gt_d[:, -1]).abs() / gt_d[:, -1].clamp_min(1e-30)).max().item()
    return f"{exact * 100:6.2f}% {recall * 100:7.3f}%  {rel:8.1e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gallery", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per method (median reported)")
    ap.add_argument("--threads", type=int, default=None, help="torch and faiss threads (default: torch's default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip", default="", help="comma-separated substrings of method names to skip")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        import faiss

        faiss.omp_set_num_threads(torch.get_num_threads())
    except ImportError:
        pass
    g = torch.Generator().manual_seed(args.seed)
    gallery = torch.randn(args.gallery, args.dim, generator=g)
    labels = torch.randint(0, 100, (args.gallery,), generator=g)
    query_cpu = torch.randn(args.queries, args.dim, generator=g)
    query = query_cpu.to(device)

    info = pcgeom.backend_info()
    print(f"KNN retrieval: gallery {args.gallery:,} x {args.dim}, {args.queries:,} queries, k = {args.k}, float32, "
          f"device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"pcgeom native={info['extension_loaded']}")
    methods = make_methods(gallery, labels, args.k, device)
    skip = [s.strip() for s in args.skip.split(",") if s.strip()]
    methods = {n: m for n, m in methods.items() if not any(s in n for s in skip)}

    t0 = time.perf_counter()
    gt_d, gt_i = ground_truth(query_cpu, gallery, args.k)
    print(f"float64 ground truth in {time.perf_counter() - t0:.1f} s")

    peaks, checks = {}, {}
    for name, (fn, _) in methods.items():  # warm-up + memory + correctness
        with PeakMemory(device) as pm:
            out = fn(query)
        peaks[name] = pm.extra_bytes
        checks[name] = "" if "forward" in name else check(out, gt_d, gt_i, query_cpu, gallery)
        del out
    times = interleaved({name: (lambda fn=fn: fn(query)) for name, (fn, _) in methods.items()}, args.repeats,
                        warmup=False)  # warmed up above

    med = {n: statistics.median(v) for n, v in times.items()}
    base = med.get("faiss IndexFlatL2.search")
    ours = med.get("pcgeom KNNClassifier.kneighbors")
    hdr = (f"{'method':34s} {'median s':>9s} {'min s':>8s} {'vs faiss':>9s} {'vs pcgeom':>9s} "
           f"{'peak MiB':>9s}  {'exact':>7s} {'recall':>8s}  {'kth rel err':>9s}  note")
    print()
    print(hdr)
    print("-" * len(hdr))
    for name, (_, note) in methods.items():
        m = med[name]
        r_f = f"{m / base:8.2f}x" if base else "      n/a"
        r_o = f"{m / ours:8.2f}x" if ours else "      n/a"
        print(f"{name:34s} {m:9.3f} {min(times[name]):8.3f} {r_f} {r_o} {peaks[name] / MiB:9.1f}  "
              f"{checks[name] or '    (scores, not indices)':28s}  {note}")
    print(f"\ngallery itself: {gallery.numel() * 4 / MiB:.0f} MiB; an M x N float32 distance matrix would be "
          f"{args.queries * args.gallery * 4 / MiB:.0f} MiB.  'vs faiss' < 1 means faster than faiss.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
