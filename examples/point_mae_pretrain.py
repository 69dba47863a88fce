"""Point-MAE pretraining on pcgeom's bundled 3-D scans, single process or DDP.

A small but complete masked autoencoder for point clouds (Pang et al., "Masked
Autoencoders for Point Cloud Self-supervised Learning", ECCV 2022):

1. every cloud is split into ``--groups`` patches of ``--group-size`` points
   by :func:`pcgeom.group_patches` (FPS centres + KNN, centred on their centre);
2. a mini-PointNet embeds each patch into a token;
3. a random ``--mask-ratio`` (60 %) of the patches per cloud is hidden; a
   transformer encodes the visible tokens (plus an MLP embedding of their
   centres);
4. a lighter transformer decoder gets the encoded tokens plus a learned mask
   token at every hidden centre and predicts the hidden patches' points;
5. the loss is the Chamfer-L2 distance (:func:`pcgeom.chamfer_distance`)
   between predicted and true hidden patches, as in Point-MAE.

Training clouds are drawn on the fly from the bundled scans (``pcgeom.data``):
a random scan, a random subset of ``--points`` points, normalised to the unit
sphere, randomly rotated and anisotropically scaled.  The training loss is
logged, and so is the loss on a fixed held-out batch before and after
training; a checkpoint (model, optimizer, arguments, loss history) is written
at the end.  An existing checkpoint is never replaced unless ``--overwrite``
is given.

The same script runs distributed (DistributedDataParallel; gloo on CPU, NCCL
on GPU); each rank draws its own clouds and masks, gradients are averaged::

    python examples/point_mae_pretrain.py                       # ~300 steps on CPU
    torchrun --nproc_per_node=2 examples/point_mae_pretrain.py  # 2 processes
    python examples/point_mae_pretrain.py --steps 2000 --device cuda --batch-size 64
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from einops import rearrange
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import pcgeom

DEFAULT_CHECKPOINT = Path("out") / "point_mae_pretrain" / "checkpoint.pt"


# ----------------------------------------------------------------------------
# data


def _generated_shapes(n: int = 8192, seed: int = 0) -> dict[str, torch.Tensor]:
    """Stand-ins used only when pcgeom.data is unavailable: sphere, torus, box surface."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(n, 3, generator=g)
    sphere = v / v.norm(dim=1, keepdim=True)
    u, w = torch.rand(n, generator=g) * 2 * math.pi, torch.rand(n, generator=g) * 2 * math.pi
    torus = torch.stack([(1 + 0.35 * torch.cos(w)) * torch.cos(u), (1 + 0.35 * torch.cos(w)) * torch.sin(u), 0.35 * torch.sin(w)], 1)
    box = torch.rand(n, 3, generator=g) * 2 - 1
    face = torch.randint(0, 3, (n,), generator=g)
    box[torch.arange(n), face] = torch.sign(box[torch.arange(n), face])
    return {"sphere": sphere, "torus": torus, "box": box * torch.tensor([1.0, 0.6, 0.3])}


def load_shapes(names: list[str] | None, pool: int = 8192) -> dict[str, torch.Tensor]:
    """The bundled scans as float32 (n, 3) tensors of at most ``pool`` points each.

    Like ShapeNet-55's 8,192-point objects from which Point-MAE draws 1,024
    points per sample.
    """
    try:
        import pcgeom.data as data
    except ImportError:
        print("pcgeom.data is not available: training on generated shapes instead", file=sys.stderr)
        return _generated_shapes(pool)
    names = names or data.names()
    return {n: data.load(n, n_points=min(pool, data.load(n).shape[0]), seed=0) for n in names}


def random_rotation(g: torch.Generator) -> torch.Tensor:
    """A uniformly random 3-D rotation (QR of a Gaussian matrix, signs fixed)."""
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=g))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def sample_batch(shapes: list[torch.Tensor], batch_size: int, n_points: int, g: torch.Generator) -> torch.Tensor:
    """(B, n_points, 3): random scan, random point subset, unit sphere, rotation, scaling."""
    clouds = []
    for _ in range(batch_size):
        s = shapes[int(torch.randint(len(shapes), (1,), generator=g))]
        p = s[torch.randperm(s.shape[0], generator=g)[:n_points]]
        p = p - p.mean(0)
        p = p / p.norm(dim=1).max()
        scale = 0.8 + 0.4 * torch.rand(3, generator=g)
        clouds.append((p @ random_rotation(g).T) * scale)
    return torch.stack(clouds)


# ----------------------------------------------------------------------------
# model


def mlp(*dims: int, norm: bool = False) -> nn.Sequential:
    """Linear layers with GELU between them (and LayerNorm before each GELU if ``norm``)."""
    layers: list[nn.Module] = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            if norm:
                layers.append(nn.LayerNorm(dims[i + 1]))
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


class PatchEncoder(nn.Module):
    """Mini-PointNet: shared per-point MLP, max-pool, concat the pooled feature back, MLP, max-pool.

    Point-MAE's encoder with narrower layers (3-128-256 | 512-512-C there) and
    LayerNorm where it has BatchNorm.  The normalisation matters: patch
    coordinates are a few hundredths, so without it the first layer's output
    is dominated by its bias and the tokens barely see the patch shape.
    """

    def __init__(self, dim: int, width: int = 64):
        super().__init__()
        self.first = mlp(3, width // 2, width, norm=True)
        self.second = mlp(2 * width, 2 * width, dim, norm=True)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:  # (B, G, k, 3) -> (B, G, C)
        f = self.first(patches)
        pooled = f.amax(dim=2, keepdim=True).expand_as(f)
        return self.second(torch.cat([pooled, f], dim=-1)).amax(dim=2)


def transformer(dim: int, depth: int, heads: int) -> nn.ModuleList:
    return nn.ModuleList(
        nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        for _ in range(depth)
    )


def take(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x[b, idx[b]] for x (B, G, ...) and idx (B, m)."""
    expanded = idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand(*idx.shape, *x.shape[2:])
    return x.gather(1, expanded)


class PointMAE(nn.Module):
    def __init__(self, groups=64, group_size=32, dim=128, depth=4, decoder_depth=2, heads=4, mask_ratio=0.6, fps="exact"):
        super().__init__()
        self.groups, self.group_size, self.fps = groups, group_size, fps
        self.n_mask = int(mask_ratio * groups)
        if not 0 < self.n_mask < groups:
            raise ValueError(f"mask_ratio={mask_ratio} must hide at least one and at most {groups - 1} of {groups} patches")
        self.patch_encoder = PatchEncoder(dim)
        self.pos_embed = mlp(3, 128, dim)
        self.encoder = transformer(dim, depth, heads)
        self.encoder_norm = nn.LayerNorm(dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        nn.init.trunc_normal_(self.mask_token, std=0.02)
        self.decoder_pos_embed = mlp(3, 128, dim)
        self.decoder = transformer(dim, decoder_depth, heads)
        self.decoder_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 3 * group_size)

    def forward(self, points: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Chamfer-L2 reconstruction loss of the masked patches; ``noise (B, G)`` picks the mask."""
        patches, centers = pcgeom.group_patches(points, self.groups, self.group_size, fps=self.fps)
        order = noise.argsort(dim=1)
        masked, visible = order[:, : self.n_mask], order[:, self.n_mask :]
        # Patches span a few hundredths; the network works in units of their RMS
        # radius (inputs divided, outputs multiplied), which speeds training up
        # several-fold over raw coordinates.  It is a constant, not a parameter.
        scale = patches.detach().square().sum(-1).mean().sqrt().clamp_min(1e-12)
        # Only visible patches are embedded: the hidden ones' tokens would be discarded.
        tokens = self.patch_encoder(take(patches, visible) / scale)
        vis_centers, mask_centers = take(centers, visible), take(centers, masked)

        x, pos = tokens, self.pos_embed(vis_centers)
        for block in self.encoder:
            x = block(x + pos)
        x = self.encoder_norm(x)

        B = points.shape[0]
        x = torch.cat([x, self.mask_token.expand(B, self.n_mask, -1)], dim=1)
        pos = self.decoder_pos_embed(torch.cat([vis_centers, mask_centers], dim=1))
        for block in self.decoder:
            x = block(x + pos)
        pred = self.head(self.decoder_norm(x[:, -self.n_mask :])) * scale

        pred = rearrange(pred, "b m (k c) -> (b m) k c", c=3)
        target = rearrange(take(patches, masked), "b m k c -> (b m) k c")
        return pcgeom.chamfer_distance(pred, target, kind="l2")


# ----------------------------------------------------------------------------
# training


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--steps", type=int, default=300, help="optimizer steps")
    ap.add_argument("--batch-size", type=int, default=16, help="clouds per step and per process")
    ap.add_argument("--points", type=int, default=1024, help="points per cloud")
    ap.add_argument("--groups", type=int, default=64, help="patches per cloud (Point-MAE: 64)")
    ap.add_argument("--group-size", type=int, default=32, help="points per patch (Point-MAE: 32)")
    ap.add_argument("--fps", choices=["exact", "pointnet2"], default="exact", help="FPS rule of group_patches")
    ap.add_argument("--mask-ratio", type=float, default=0.6)
    ap.add_argument("--dim", type=int, default=128, help="token width")
    ap.add_argument("--depth", type=int, default=4, help="encoder blocks")
    ap.add_argument("--decoder-depth", type=int, default=2, help="decoder blocks")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (AdamW)")
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--warmup", type=float, default=0.1, help="fraction of steps with linear warm-up")
    ap.add_argument("--shapes", nargs="*", default=None, help="bundled scans to train on (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--eval-clouds", type=int, default=32, help="size of the fixed held-out batch")
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT, help="where to save the final checkpoint")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing checkpoint")
    ap.add_argument(
        "--save-every-rank",
        action="store_true",
        help="also write <checkpoint>.rank<r>.pt from every process (to check that replicas agree)",
    )
    args = ap.parse_args(argv)
    for name in ("steps", "batch_size", "points", "groups", "group_size", "log_every", "eval_clouds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.groups > args.points or args.group_size > args.points:
        ap.error(f"--groups ({args.groups}) and --group-size ({args.group_size}) must not exceed --points ({args.points})")
    return args


def rank_path(path: Path, rank: int) -> Path:
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def save(obj, path: Path) -> None:
    """Writes atomically: a crash never leaves a half-written checkpoint behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def main(argv=None) -> dict:
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)

    # Refuse before any work (every rank checks, so none is left waiting).
    targets = [args.checkpoint] + ([rank_path(args.checkpoint, r) for r in range(world)] if args.save_every_rank else [])
    existing = [str(p) for p in targets if p.exists()]
    if existing and not args.overwrite:
        raise SystemExit(f"point_mae_pretrain: {', '.join(existing)} already exists; pass --overwrite to replace it")

    if world > 1:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        return _train(args, device, rank, world)
    finally:
        if world > 1:
            dist.destroy_process_group()


def _train(args, device, rank, world) -> dict:
    log = print if rank == 0 else (lambda *a, **k: None)
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    shapes = load_shapes(args.shapes)
    data_gen = torch.Generator().manual_seed(args.seed * 1000 + rank)  # each rank its own clouds and masks
    model = PointMAE(args.groups, args.group_size, args.dim, args.depth, args.decoder_depth, args.heads, args.mask_ratio, args.fps).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    warmup = max(1, int(args.warmup * args.steps))

    def lr_at(step):  # linear warm-up, then cosine to 1 % of the peak
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, args.steps - warmup)
        return 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    n_params = sum(p.numel() for p in model.parameters())
    log(
        f"Point-MAE pretraining: {n_params / 1e6:.2f} M parameters, {world} process(es) on {device}, "
        f"scans {', '.join(shapes)}, {args.batch_size} x {args.points} points per process, "
        f"{args.groups} patches x {args.group_size}, mask {args.mask_ratio:.0%}"
    )
    shape_list = list(shapes.values())
    # A fixed held-out batch (same clouds and masks on every rank) to measure
    # progress without the step-to-step noise of random batches.
    eval_gen = torch.Generator().manual_seed(args.seed + 12345)
    eval_points = sample_batch(shape_list, args.eval_clouds, args.points, eval_gen).to(device)
    eval_noise = torch.rand(args.eval_clouds, args.groups, generator=eval_gen).to(device)

    def evaluate() -> float:
        with torch.no_grad():
            return float(model(eval_points, eval_noise))

    eval_before = evaluate()
    log(f"held-out Chamfer-L2 x1000 before training: {1000 * eval_before:.3f}")
    losses: list[float] = []  # mean over processes
    local_losses: list[float] = []  # this process's own batches
    t0 = time.perf_counter()
    for step in range(args.steps):
        points = sample_batch(shape_list, args.batch_size, args.points, data_gen).to(device)
        noise = torch.rand(args.batch_size, args.groups, generator=data_gen).to(device)
        loss = ddp(points, noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        value = loss.detach().clone()
        local_losses.append(float(value))
        if world > 1:  # log the mean over all processes
            dist.all_reduce(value)
            value /= world
        losses.append(float(value))
        if (step + 1) % args.log_every == 0 or step == 0 or step + 1 == args.steps:
            recent = losses[-args.log_every :]
            log(
                f"step {step + 1:5d}/{args.steps}  Chamfer-L2 x1000 {1000 * sum(recent) / len(recent):8.3f}  "
                f"lr {sched.get_last_lr()[0]:.2e}  {(step + 1) / (time.perf_counter() - t0):5.1f} steps/s"
            )
    eval_after = evaluate()
    ckpt = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "step": args.steps,
        "world_size": world,
        "losses": losses,
        "local_losses": local_losses,
        "eval_loss": {"before": eval_before, "after": eval_after},
    }
    if rank == 0:
        save(ckpt, args.checkpoint)
        log(f"saved {args.checkpoint}")
    if args.save_every_rank:
        save(ckpt, rank_path(args.checkpoint, rank))
    n = max(1, len(losses) // 10)
    first, last = sum(losses[:n]) / n, sum(losses[-n:]) / n
    log(f"training loss x1000: first {n} steps {1000 * first:.3f} -> last {n} steps {1000 * last:.3f}")
    log(f"held-out Chamfer-L2 x1000: {1000 * eval_before:.3f} before -> {1000 * eval_after:.3f} after training")
    return {
        "losses": losses,
        "eval_loss": {"before": eval_before, "after": eval_after},
        "checkpoint": str(args.checkpoint),
        "world_size": world,
    }


if __name__ == "__main__":
    main()
