"""Time and peak memory of DenseFusion's symmetric-object loss: pcgeom vs the original formulation.

Workload: one forward + backward of ``Loss`` (pose network, ``refine=False``)
on a symmetric object, float32, at DenseFusion's two sizes:

* LineMOD: P = 500 hypotheses, Nm = 500 mesh points;
* YCB:     P = 1000 hypotheses, Nm = 2600 mesh points (``num_pt_mesh_large``).

Methods:

* ``pcgeom``   -- :class:`pcgeom.losses.densefusion.Loss` (nearest target point
  per predicted point through :func:`pcgeom.knn`, memory ``O(P * Nm)``);
* ``original`` -- the original formulation transcribed to torch: the full
  ``Nm x (P * Nm)`` float32 distance matrix (``torch.cdist``), ``argmin`` over
  the target points, ``index_select``.  This is what ``lib/knn`` allocates on the
  GPU.  It is skipped when the matrix would not fit in half the free memory.

Each measurement runs in a fresh subprocess, so the peak is clean: peak extra
memory is the resident-set high-water mark during the call minus the resident
set before it (Linux ``/proc/self/clear_refs`` resets the mark; on CUDA,
``torch.cuda.max_memory_allocated`` above the allocation before the call).
Times are the median over ``--repeats`` runs after one warm-up (the warm-up is
skipped for configurations slower than ``--warmup-limit`` seconds).

Usage::

    python benchmarks/bm_densefusion.py                 # both configs, both methods
    python benchmarks/bm_densefusion.py --configs linemod --repeats 5
    python benchmarks/bm_densefusion.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CONFIGS = {"linemod": (500, 500), "ycb": (1000, 2600)}
MiB = 2**20


def _mem_available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _inputs(P, Nm, device, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    model = torch.randn(1, Nm, 3, generator=g) * 0.05
    target = model + torch.tensor([0.0, 0.0, 0.8])
    points = target[:, torch.randint(0, Nm, (P,), generator=g)] + 0.003 * torch.randn(1, P, 3, generator=g)
    pred_r = torch.randn(1, P, 4, generator=g)
    pred_t = torch.tensor([0.0, 0.0, 0.8]) - points + 0.01 * torch.randn(1, P, 3, generator=g)
    pred_c = torch.sigmoid(torch.randn(1, P, 1, generator=g))
    out = [pred_r, pred_t, pred_c, target, model, points]
    return [x.to(device).requires_grad_(i < 3) for i, x in enumerate(out)]


def _original_formulation(pred_r, pred_t, pred_c, target, model_points, idx, points, w, refine):
    """lib/loss.py's symmetric branch with lib/knn replaced by its dense equivalent."""
    import torch

    from pcgeom.losses.densefusion import quaternion_to_matrix

    bs, P, _ = pred_c.shape
    Nm = model_points.shape[1]
    R = quaternion_to_matrix(pred_r).reshape(P, 3, 3)
    model = model_points.view(1, Nm, 3).repeat(P, 1, 1)
    pred = torch.bmm(model, R.transpose(1, 2)) + (points + pred_t).reshape(P, 1, 3)
    T = target[0]                                                     # (Nm, 3)
    Q = pred.reshape(P * Nm, 3)
    d = torch.cdist(T.detach(), Q.detach())                           # (Nm, P*Nm): the matrix
    inds = d.argmin(dim=0)
    del d
    paired = T.index_select(0, inds).view(P, Nm, 3)
    dis = torch.norm(pred - paired, dim=2).mean(1)
    c = pred_c.view(P)
    loss = torch.mean(dis * c - w * torch.log(c))
    return loss, dis[torch.argmax(c)], None, None


def _child(method: str, config: str, device_name: str, repeats: int, warmup_limit: float, threads: int) -> dict:
    import torch

    if threads:
        torch.set_num_threads(threads)
    from pcgeom.bench.timing import PeakMemory, interleaved, timed_call
    from pcgeom.losses.densefusion import Loss

    P, Nm = CONFIGS[config]
    device = torch.device(device_name)
    fn = Loss(Nm, [0]) if method == "pcgeom" else _original_formulation
    args = _inputs(P, Nm, device)
    idx = torch.tensor([[0]], device=device)

    def run():
        for a in args[:3]:
            a.grad = None
        loss, dis, _, _ = fn(*args[:5], idx, args[5], 0.015, False)
        (loss + dis).backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return float(loss)

    # peak memory and time of the first (cold) run, in a clean process
    with PeakMemory(device) as pm:
        loss, first = timed_call(run)
    peak = pm.extra_bytes

    times = [first]
    if repeats > 1 or first < warmup_limit:
        times = interleaved({"run": run}, max(1, repeats), warmup=False)["run"]
    return {"method": method, "config": config, "P": P, "Nm": Nm, "device": device_name,
            "time_s": statistics.median(times), "runs": len(times), "peak_bytes": peak, "loss": loss,
            "threads": torch.get_num_threads()}


def _fits(config: str, device: str) -> tuple[bool, str]:
    P, Nm = CONFIGS[config]
    need = Nm * P * Nm * 4
    if device.startswith("cuda"):
        import torch

        free = torch.cuda.mem_get_info()[0]
    else:
        free = _mem_available_bytes() or 0
    ok = need < 0.5 * free
    return ok, f"needs a {need / 2**30:.1f} GiB distance matrix, {free / 2**30:.1f} GiB free"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--methods", nargs="+", default=["pcgeom", "original"], choices=["pcgeom", "original"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup-limit", type=float, default=10.0,
                   help="configs whose first run is slower than this (s) are timed once")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args._child:
        row = _child(args._child[0], args._child[1], args.device, args.repeats, args.warmup_limit, args.threads)
        print("ROW " + json.dumps(row))
        return 0

    import torch

    import pcgeom

    print(f"pcgeom {pcgeom.__version__} | torch {torch.__version__} | device {args.device} | "
          f"threads {args.threads or torch.get_num_threads()} | backend {pcgeom.backend_info().get('native_devices')}")
    print(f"{'config':8s} {'P':>5s} {'Nm':>5s} {'method':9s} {'time (s)':>9s} {'peak extra memory':>18s}  loss")
    rows = []
    for config in args.configs:
        for method in args.methods:
            P, Nm = CONFIGS[config]
            if method == "original":
                ok, why = _fits(config, args.device)
                if not ok:
                    print(f"{config:8s} {P:5d} {Nm:5d} {method:9s} {'-':>9s} {'does not fit':>18s}  ({why})")
                    rows.append({"method": method, "config": config, "P": P, "Nm": Nm, "skipped": why})
                    continue
            cmd = [sys.executable, os.path.abspath(__file__), "--_child", method, config, "--device", args.device,
                   "--repeats", str(args.repeats), "--warmup-limit", str(args.warmup_limit),
                   "--threads", str(args.threads)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            line = next((ln for ln in res.stdout.splitlines() if ln.startswith("ROW ")), None)
            if res.returncode != 0 or line is None:
                err = (res.stderr.strip().splitlines() or ["killed"])[-1]
                print(f"{config:8s} {P:5d} {Nm:5d} {method:9s} {'-':>9s} {'failed':>18s}  ({err})")
                rows.append({"method": method, "config": config, "P": P, "Nm": Nm, "failed": err})
                continue
            row = json.loads(line[4:])
            rows.append(row)
            print(f"{config:8s} {P:5d} {Nm:5d} {method:9s} {row['time_s']:9.2f} "
                  f"{row['peak_bytes'] / MiB:15.0f} MiB  {row['loss']:.6f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
