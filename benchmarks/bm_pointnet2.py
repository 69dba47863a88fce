"""PointNet++ SSG classification, forward + backward: pcgeom's shims vs pure-torch ops.

Workload: the unmodified ``PointNet2ClassificationSSG`` of erikwijmans/
Pointnet2_PyTorch (vendored in ``tests/upstream/pointnet2_pytorch``), B=16
clouds of N=1024 points with normals (6 channels), float32, train mode, one
forward + ``loss.backward()``.

Methods (same model, same weights, same answers -- checked before timing):

* ``shims``      -- ``pointnet2_ops`` served by pcgeom (``enable_shims()``):
  native index-order ball query and KNN kernels, pointnet2-compatible FPS;
* ``pure-torch`` -- the same modules with the ops written in plain torch the
  way pure-PyTorch PointNet++ ports do it: an FPS loop over ``npoint``, ball
  query from the full ``(B, S, N)`` squared-distance matrix + sort, three_nn
  from the full distance matrix + topk.

Rows: ``model`` (the whole forward + backward) and ``ops`` (only the sampling
and grouping calls of the two set-abstraction layers: FPS, ball query and
grouping, which is what the shims replace).  Times are the best of
``--repeats`` interleaved runs after a warm-up.

Usage::

    python benchmarks/bm_pointnet2.py [--batch 16] [--points 1024] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import types

import torch

from pcgeom.bench.peers import use_vendored
from pcgeom.bench.timing import interleaved


# ---------------------------------------------------------------------------
# The pure-torch baseline of the pointnet2_ops calls (same semantics as the CUDA kernels).


def fps_torch(xyz, npoint):
    B, N, _ = xyz.shape
    eligible = (xyz * xyz).sum(-1) > 1e-3
    temp = torch.full((B, N), 1e10, device=xyz.device)
    temp = torch.where(eligible, temp, -1.0)
    far = torch.zeros(B, dtype=torch.long, device=xyz.device)
    out = torch.zeros(B, npoint, dtype=torch.long, device=xyz.device)
    rows = torch.arange(B, device=xyz.device)
    for i in range(1, npoint):
        d = ((xyz - xyz[rows, far].unsqueeze(1)) ** 2).sum(-1)
        temp = torch.where(eligible, torch.minimum(temp, d), temp)
        far = temp.argmax(-1)
        out[:, i] = far
    return out.int()


def ball_query_torch(radius, nsample, xyz, new_xyz):
    B, N, _ = xyz.shape
    S = new_xyz.shape[1]
    d2 = ((new_xyz.unsqueeze(2) - xyz.unsqueeze(1)) ** 2).sum(-1)  # (B, S, N)
    key = torch.arange(N, device=xyz.device).expand(B, S, N).clone()
    key[d2 >= radius * radius] = N
    idx = key.sort(dim=-1).values[..., :nsample]
    first = idx[..., :1].expand_as(idx)
    idx = torch.where(idx == N, first, idx)
    return torch.where(idx == N, 0, idx).int()


def three_nn_torch(unknown, known):
    d2 = ((unknown.unsqueeze(2) - known.unsqueeze(1)) ** 2).sum(-1)
    d, i = d2.topk(3, dim=-1, largest=False, sorted=True)
    return d.sqrt(), i.int()


def _baseline_ops():
    from pcgeom.compat import pointnet2_ops as P

    ns = types.SimpleNamespace(**{n: getattr(P, n) for n in P.__all__})
    ns.furthest_point_sample = fps_torch
    ns.three_nn = three_nn_torch

    class QueryAndGroup(torch.nn.Module):
        def __init__(self, radius, nsample, use_xyz=True):
            super().__init__()
            self.radius, self.nsample, self.use_xyz = radius, nsample, use_xyz

        def forward(self, xyz, new_xyz, features=None):
            idx = ball_query_torch(self.radius, self.nsample, xyz, new_xyz)
            gx = P.grouping_operation(xyz.transpose(1, 2), idx) - new_xyz.transpose(1, 2).unsqueeze(-1)
            if features is None:
                return gx
            gf = P.grouping_operation(features, idx)
            return torch.cat([gx, gf], dim=1) if self.use_xyz else gf

    ns.QueryAndGroup = QueryAndGroup
    return ns


# ---------------------------------------------------------------------------


def _load_model():
    use_vendored("pointnet2_pytorch", standins=True)
    import pcgeom.compat

    pcgeom.compat.enable_shims()
    from pointnet2.models.pointnet2_ssg_cls import PointNet2ClassificationSSG

    return PointNet2ClassificationSSG


def _step(model, pc, labels):
    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(pc), labels)
    loss.backward()
    return loss.detach()


def _ops_only(model, pc, ops):
    xyz = pc[..., :3].contiguous()
    feats = pc[..., 3:].transpose(1, 2).contiguous()
    with torch.no_grad():
        for mod in model.SA_modules[:2]:
            idx = ops.furthest_point_sample(xyz, mod.npoint)
            new_xyz = ops.gather_operation(xyz.transpose(1, 2), idx).transpose(1, 2).contiguous()
            g = mod.groupers[0]
            grouped = ops.QueryAndGroup(g.radius, g.nsample, g.use_xyz)(xyz, new_xyz, feats)
            xyz, feats = new_xyz, grouped.amax(dim=3)  # stand-in features of the right shape


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--points", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import pcgeom.compat.pointnet2_modules as M
    import pcgeom.compat.pointnet2_ops as P

    Model = _load_model()
    torch.manual_seed(0)
    shim_model = Model({"model.use_xyz": True})
    base_ops = _baseline_ops()
    saved = M._ops
    M._ops = base_ops
    try:
        base_model = Model({"model.use_xyz": True})
    finally:
        M._ops = saved
    base_model.load_state_dict(shim_model.state_dict())
    g = torch.Generator().manual_seed(1)
    xyz = torch.rand(args.batch, args.points, 3, generator=g) * 2 - 1
    pc = torch.cat([xyz / xyz.norm(dim=-1).max(), torch.rand(args.batch, args.points, 3, generator=g)], -1)
    labels = torch.randint(0, 40, (args.batch,), generator=g)

    # Same answers before timing (eval: no dropout randomness).
    shim_model.eval(), base_model.eval()
    with torch.no_grad():
        M._ops = base_ops
        try:
            b = base_model(pc)
        finally:
            M._ops = saved
        a = shim_model(pc)
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), f"outputs differ: {(a - b).abs().max():.3g}"
    shim_model.train(), base_model.train()

    def run_shim():
        _step(shim_model, pc, labels)

    def run_base():
        M._ops = base_ops
        try:
            _step(base_model, pc, labels)
        finally:
            M._ops = saved

    rows = {
        "model": (run_shim, run_base),
        "ops": (lambda: _ops_only(shim_model, pc, P), lambda: _ops_only(shim_model, pc, base_ops)),
    }
    print(f"PointNet++ SSG cls fwd+bwd, B={args.batch}, N={args.points}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, native: {pcgeom_native()}")
    print(f"| row | shims (s) | pure-torch (s) | speed-up |")
    print(f"|---|---|---|---|")
    for name, (fa, fb) in rows.items():
        times = interleaved([("shims", fa), ("pure-torch", fb)], args.repeats)  # after a warm-up of each
        ta, tb = times["shims"], times["pure-torch"]
        print(f"| {name} | {min(ta):.3f} | {min(tb):.3f} | {min(tb) / min(ta):.2f}x |", flush=True)


def pcgeom_native():
    import pcgeom

    return ", ".join(pcgeom.backend_info()["native_devices"]) or "none"


if __name__ == "__main__":
    main()
