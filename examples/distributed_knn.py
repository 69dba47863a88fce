"""Exact KNN retrieval and classification over a gallery sharded across torchrun ranks.

Run it with (any number of ranks; gloo on the CPU)::

    torchrun --standalone --nproc-per-node 2 examples/distributed_knn.py

Each rank generates only its own rows of a 200,000 x 64 gallery (fixed seeds per row block, so
the gallery is the same whatever the number of ranks), then:

1. ``pcgeom.distributed.knn``: the 10 nearest gallery rows of 500 queries, identical on every rank
   and equal, bit for bit, to one ``pcgeom.knn`` over the whole gallery (checked on rank 0 by
   gathering the gallery, which a real job would not do);
2. ``KNNClassifier(shard, labels, k, process_group=...)``: predictions, equal to the single-process
   classifier's on rank 0;
3. ``save_sharded`` / ``load_sharded``: the gallery saved as one shard per rank plus a manifest,
   reloaded (on the same ranks here; any number of ranks can load it).

Use ``--backend nccl`` on GPUs (each rank takes the GPU of its ``LOCAL_RANK``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import torch
import torch.distributed as dist

import pcgeom
import pcgeom.distributed
from pcgeom.nn import KNNClassifier

BLOCK = 50_000


def gallery_rows(start: int, stop: int, dim: int, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [start, stop) of the global gallery: class-dependent clusters, fixed seed per block."""
    feats, labels = [], []
    for b in range(start // BLOCK, (stop + BLOCK - 1) // BLOCK):
        g = torch.Generator().manual_seed(1000 + b)
        lab = torch.randint(0, classes, (BLOCK,), generator=g)
        centres = torch.randn(classes, dim, generator=torch.Generator().manual_seed(7))
        f = centres[lab] + 2.5 * torch.randn(BLOCK, dim, generator=g)
        lo, hi = max(start, b * BLOCK) - b * BLOCK, min(stop, (b + 1) * BLOCK) - b * BLOCK
        feats.append(f[lo:hi])
        labels.append(lab[lo:hi])
    if not feats:
        return torch.empty(0, dim), torch.empty(0, dtype=torch.int64)
    return torch.cat(feats), torch.cat(labels)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--gallery", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--k", type=int, default=10)
    args = p.parse_args()

    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    classes = 10

    lo, hi = pcgeom.distributed.shard_bounds(args.gallery)
    shard, shard_labels = gallery_rows(lo, hi, args.dim, classes)
    shard, shard_labels = shard.to(device), shard_labels.to(device)
    queries, query_labels = gallery_rows(args.gallery, args.gallery + args.queries, args.dim, classes)
    queries = queries.to(device)

    t0 = time.perf_counter()
    dist2, idx = pcgeom.distributed.knn(queries, shard, args.k)
    t_knn = time.perf_counter() - t0

    clf = KNNClassifier(shard, shard_labels, k=args.k, weights="distance", process_group=dist.group.WORLD)
    t0 = time.perf_counter()
    pred = clf.predict(queries)
    t_pred = time.perf_counter() - t0
    accuracy = (pred.cpu() == query_labels).float().mean().item()

    # The check a real job would skip: assemble the whole gallery on rank 0 and search it there.
    parts = [None] * world
    dist.gather_object((shard.cpu(), shard_labels.cpu()), parts if rank == 0 else None, dst=0)
    if rank == 0:
        full = torch.cat([f for f, _ in parts])
        full_labels = torch.cat([lab for _, lab in parts])
        d0, i0 = pcgeom.knn(queries.cpu()[None], full[None], args.k)
        assert torch.equal(idx.cpu(), i0[0]) and torch.equal(dist2.cpu(), d0[0]), "sharded != single-process"
        single = KNNClassifier(full, full_labels, k=args.k, weights="distance")
        assert torch.equal(pred.cpu(), single.predict(queries.cpu())), "classifier differs"

    # Save one shard per rank plus a manifest; any number of ranks can load it back.
    folder = [tempfile.mkdtemp(prefix="pcgeom-gallery-") if rank == 0 else None]
    dist.broadcast_object_list(folder, src=0)
    path = clf.save_sharded(os.path.join(folder[0], "gallery"))
    again = KNNClassifier.load_sharded(path, process_group=dist.group.WORLD, device=device)
    assert torch.equal(again.predict(queries), pred)

    if rank == 0:
        print(f"{world} rank(s), gallery {args.gallery:,} x {args.dim} ({hi - lo:,} rows on rank 0), "
              f"{args.queries} queries, k={args.k}")
        print(f"  pcgeom.distributed.knn     {t_knn * 1e3:8.1f} ms  (= pcgeom.knn over the whole gallery, bit for bit)")
        print(f"  KNNClassifier.predict      {t_pred * 1e3:8.1f} ms  accuracy {100 * accuracy:.1f}% "
              "(= the single-process classifier)")
        print(f"  save_sharded/load_sharded  {path.name}/: {', '.join(sorted(os.listdir(path)))}")
    dist.barrier()
    if rank == 0:
        shutil.rmtree(folder[0])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
