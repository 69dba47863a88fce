"""Runs one upstream case through pcgeom's shims; called by test_upstream.py in a fresh process.

    python drive.py point_mae|pointnet2|pointr_chamfer

The working directory is the vendored repository's root (as when running the
repository's own command); the unmodified upstream files import
``knn_cuda``, ``pointnet2_ops`` and ``chamfer`` by name and get pcgeom's
stand-ins.  Every result is compared with kernels64 (float64 transcriptions
of the original CUDA kernels): indices exactly, values to float32 rounding.

The whole models (Point-MAE, Pointnet2's SSG networks) run twice.  In float64
(a deep copy cast with ``.double()``, inputs too; pcgeom's ops and the
reference forwards take float64) the loss or output, the input gradient and
every parameter gradient must agree with the reference run to 1e-9 of their
norm: that is what says the shims' forward and backward are right, on any CPU
and any thread count.  In float32 (what users train in) indices must still be
equal, the loss or output agree to float32 rounding and every gradient be
finite; float32 gradients of a whole model are not compared, because torch's
own float32 reductions (matmuls, softmax, max-pool near-ties) move them by
~1e-3 from one CPU or thread count to another, which says nothing about the
shims.  PoinTr's Chamfer is one op: its float32 gradients are compared at
rtol 1e-4 (a handful of float32 terms per element: ~1e-7 is what float32
gives).
"""

import copy
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.getcwd())
sys.path.insert(1, HERE)
sys.path.append(os.path.join(HERE, "_standins"))  # last: a real installed package wins

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pcgeom.compat  # noqa: E402

import kernels64 as K  # noqa: E402

pcgeom.compat.enable_shims()


# float64 runs agree to summation-order rounding (measured worst: see the README); 1e-9 of the norm still
# catches a 1e-7 relative change of the reference.
REL64 = 1e-9
_worst64 = [0.0, "", 0]  # the largest relative float64 difference seen, where, how many compared: on the OK line


def close_norm(a, b, name, rel=REL64, floor=0.0):
    """|a - b| <= rel * |b| + floor in the Frobenius norm, for float64 runs (both must be float64)."""
    assert a.dtype == b.dtype == torch.float64, (name, a.dtype, b.dtype)
    a, b = a.detach(), b.detach()
    err, scale = (a - b).norm().item(), b.norm().item()
    r = err / max(scale, 1e-300)
    _worst64[2] += 1
    if r > _worst64[0]:
        _worst64[:2] = [r, name]
    if not err <= rel * scale + floor:
        raise AssertionError(f"{name}: |diff| {err:.3g} vs |ref| {scale:.3g} (relative {r:.3g}, limit {rel:g})")


def close_grads64(gp, rgp, name):
    """Every parameter gradient to REL64; one that cancels to ~0 (a bias before a batch norm) is rounding in
    both runs and is held to REL64 of the whole gradient's norm."""
    assert gp.keys() == rgp.keys() and len(gp) > 10, (len(gp), len(rgp))
    floor = REL64 * torch.cat([g.flatten() for g in rgp.values()]).norm().item()
    for n in gp:
        close_norm(gp[n], rgp[n], f"{name} grad {n}", floor=floor)


def finite(name, *grads):
    """float32 gradients: present and finite (their values are compared in float64, see the docstring)."""
    for g in grads:
        for n, t in (sorted(g.items()) if isinstance(g, dict) else [("d/d input", g)]):
            if t is None or not torch.isfinite(t).all():
                raise AssertionError(f"{name} {n}: missing or non-finite gradient")


def worst64():
    r, name, n = _worst64
    return f"{n} float64 comparisons, worst relative difference {r:.2g}" + (f" ({name})" if r else " (bit-identical)")


def close(a, b, name, rtol=1e-5, atol=1e-6):
    b = torch.as_tensor(b, dtype=a.dtype) if not isinstance(b, torch.Tensor) else b.to(a.dtype)
    if not torch.allclose(a, b, rtol=rtol, atol=atol):
        raise AssertionError(f"{name}: max abs diff {(a - b).abs().max().item():.3g}")


def same(a, b, name):
    a = torch.as_tensor(np.asarray(a)).long()
    b = torch.as_tensor(np.asarray(b)).long()
    if not torch.equal(a, b):
        raise AssertionError(f"{name}: {int((a != b).sum())} of {a.numel()} indices differ")


def gather_rows(x, idx):  # x (B, N, C), idx (B, ...) numpy -> (B, ..., C)
    i = torch.as_tensor(idx)
    return torch.stack([x[b][i[b]] for b in range(x.shape[0])])


def cloud(B, N, seed, near_origin=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, N, 3, generator=g) * 2 - 1
    x = x / x.norm(dim=-1).max()  # Point-MAE's pc_norm: into the unit sphere
    x[:, 1 : 1 + near_origin] *= 0.01  # inside pointnet2's near-origin skip
    return x.contiguous()


# ---------------------------------------------------------------------------


def point_mae():
    from models.Point_MAE import Point_MAE
    from tools.runner_finetune_excerpt import sample_train_points

    import knn_cuda
    from pointnet2_ops import pointnet2_utils
    assert knn_cuda.__pcgeom_shim__ and pointnet2_utils.__pcgeom_shim__

    class NS(types.SimpleNamespace):
        def get(self, k, d=None):
            return getattr(self, k, d)

    tc = NS(mask_ratio=0.6, trans_dim=96, depth=2, drop_path_rate=0.0, num_heads=6, encoder_dims=96,
            mask_type="rand", decoder_depth=1, decoder_num_heads=6)
    cfg = NS(transformer_config=tc, group_size=32, num_group=64, loss="cdl2")
    torch.manual_seed(0)
    model = Point_MAE(cfg)
    pts = cloud(2, 1024, 1, near_origin=3)

    # The grouping: pointnet2 FPS centres + KNN_CUDA neighbours, against the transcriptions.
    nb, ctr = model.group_divider(pts)
    cidx = K.fps(pts, 64)
    ref_ctr = gather_rows(pts, cidx)
    assert torch.equal(ctr, ref_ctr), "Point-MAE centres differ from the pointnet2 FPS transcription"
    nidx = K.knn(pts, ref_ctr, 32)
    assert torch.equal(nb, gather_rows(pts, nidx) - ref_ctr.unsqueeze(2)), "Point-MAE neighbourhoods differ"

    # Forward + backward of the whole pretrain model; the reference swaps in the transcribed
    # grouping and Chamfer (same weights, same mask RNG).
    def run(m, p):
        np.random.seed(0)
        torch.manual_seed(0)
        x = p.clone().requires_grad_(True)
        m.zero_grad()
        loss = m(x)
        loss.backward()
        return loss.detach(), x.grad, {n: q.grad.clone() for n, q in m.named_parameters() if q.grad is not None}

    class RefGroup(torch.nn.Module):
        def forward(self, xyz):
            c = gather_rows(xyz, K.fps(xyz, 64))
            return gather_rows(xyz, K.knn(xyz, c, 32)) - c.unsqueeze(2), c

    class RefChamferL2(torch.nn.Module):
        def forward(self, a, b):
            i1, i2 = K.chamfer_nearest(a, b), K.chamfer_nearest(b, a)
            d1 = ((a - gather_rows(b, i1)) ** 2).sum(-1)
            d2 = ((b - gather_rows(a, i2)) ** 2).sum(-1)
            return d1.mean() + d2.mean()

    def pair(m, x):
        res = run(m, x)
        shim_group, shim_loss = m.group_divider, m.loss_func
        m.group_divider, m.loss_func = RefGroup(), RefChamferL2()
        try:
            return res, run(m, x)
        finally:
            m.group_divider, m.loss_func = shim_group, shim_loss

    # float64: loss, d loss / d pts and every parameter gradient to REL64.
    (loss, gx, gp), (rloss, rgx, rgp) = pair(copy.deepcopy(model).double(), pts.double())
    close_norm(loss, rloss, "Point-MAE float64 loss")
    close_norm(gx, rgx, "Point-MAE float64 d loss / d pts")
    close_grads64(gp, rgp, "Point-MAE float64")
    # float32: the loss to float32 rounding, gradients finite.
    (loss, gx, gp), (rloss, rgx, rgp) = pair(model, pts)
    close(loss, rloss, "Point-MAE float32 loss")
    assert gp.keys() == rgp.keys()
    finite("Point-MAE float32", gx, gp, rgx, rgp)

    # The fine-tune runner's sampling (ModelNet: 1200 of 2048 then 1024; ScanObjectNN: 2048 of 2048).
    raw = cloud(1, 2048, 2, near_origin=4)
    for npoints in (1024, 2048):
        np.random.seed(1)
        out = sample_train_points(raw, npoints)
        np.random.seed(1)
        point_all = min(raw.shape[1], {1024: 1200, 2048: 2400}[npoints])
        ref_idx = K.fps(raw, point_all)[:, np.random.choice(point_all, npoints, False)]
        assert torch.equal(out, gather_rows(raw, ref_idx)), f"runner_finetune sampling (npoints={npoints}) differs"
    return "point_mae: grouping exact, loss and gradients match, runner sampling exact"


# ---------------------------------------------------------------------------


def _ref_sa(mod, xyz, feats):
    """One PointnetSAModule from the transcribed kernels and the module's own MLP weights."""
    grouper, mlp = mod.groupers[0], mod.mlps[0]
    if mod.npoint is None:
        new_xyz = None
        g = xyz.transpose(1, 2).unsqueeze(2)
        if feats is not None:
            g = torch.cat([g, feats.unsqueeze(2)], dim=1)
    else:
        new_xyz = gather_rows(xyz, K.fps(xyz, mod.npoint))
        idx = K.ball_query(grouper.radius, grouper.nsample, xyz, new_xyz)
        gx = (gather_rows(xyz, idx) - new_xyz.unsqueeze(2)).permute(0, 3, 1, 2)
        g = gx
        if feats is not None:
            gf = gather_rows(feats.transpose(1, 2), idx).permute(0, 3, 1, 2)
            g = torch.cat([gx, gf], dim=1)
    f = mlp(g)
    return new_xyz, f.max(dim=3).values


def _ref_fp(mod, unknown, known, uf, kf):
    dist, idx = K.three_nn(unknown, known)
    recip = 1.0 / (torch.as_tensor(dist, dtype=unknown.dtype) + 1e-8)  # the shim's three_nn: dtype of the points
    w = recip / recip.sum(dim=2, keepdim=True)
    g = gather_rows(kf.transpose(1, 2), idx)  # (B, n, 3, C)
    interp = (g * w.unsqueeze(-1)).sum(2).transpose(1, 2)
    new = torch.cat([interp, uf], dim=1) if uf is not None else interp
    return mod.mlp(new.unsqueeze(-1)).squeeze(-1)


def _check_pointnet2(model, pc, ref_forward, name):
    model.eval()  # dropout off; batch norm uses its running statistics

    def run(m, p, fwd):
        x = p.clone().requires_grad_(True)
        m.zero_grad()
        out = fwd(x)
        out.square().mean().backward()
        return out.detach(), x.grad, {n: q.grad.clone() for n, q in m.named_parameters() if q.grad is not None}

    # float64: output, d/d input and every parameter gradient to REL64.
    m64 = copy.deepcopy(model).double()
    out, gx, gp = run(m64, pc.double(), m64)
    rout, rgx, rgp = run(m64, pc.double(), lambda x: ref_forward(m64, x))
    close_norm(out, rout, f"{name} float64 output")
    close_norm(gx, rgx, f"{name} float64 d/d input")
    close_grads64(gp, rgp, f"{name} float64")
    # float32: the output to float32 rounding, gradients finite.
    out, gx, gp = run(model, pc, model)
    rout, rgx, rgp = run(model, pc, lambda x: ref_forward(model, x))
    close(out, rout, f"{name} float32 output", rtol=1e-4, atol=1e-5)
    assert gp.keys() == rgp.keys()
    finite(f"{name} float32", gx, gp, rgx, rgp)


def pointnet2_cls():
    from pointnet2.models.pointnet2_ssg_cls import PointNet2ClassificationSSG

    from pointnet2_ops import pointnet2_modules, pointnet2_utils
    assert pointnet2_modules.__pcgeom_shim__ and pointnet2_utils.__pcgeom_shim__
    torch.manual_seed(0)
    model = PointNet2ClassificationSSG({"model.use_xyz": True})
    # The published checkpoints' keys (SA_modules.0.mlps.0.0.weight, ...) and shapes.
    sd = model.state_dict()
    assert sd["SA_modules.0.mlps.0.0.weight"].shape == (64, 6, 1, 1)  # xyz + normals, + 3 relative xyz
    assert sd["SA_modules.1.mlps.0.0.weight"].shape == (128, 131, 1, 1)
    assert sd["SA_modules.2.mlps.0.3.weight"].shape == (512, 256, 1, 1)

    def ref(m, pc):
        xyz, f = pc[..., :3], pc[..., 3:].transpose(1, 2)
        for mod in m.SA_modules:
            xyz, f = _ref_sa(mod, xyz, f)
        return m.fc_layer(f.squeeze(-1))

    g = torch.Generator().manual_seed(3)
    pc = torch.cat([cloud(2, 1024, 3, near_origin=2), torch.rand(2, 1024, 3, generator=g)], dim=-1)  # xyz + normals
    _check_pointnet2(model, pc, ref, "pointnet2 SSG cls")
    return "pointnet2_cls: forward and backward match"


def pointnet2_sem():
    from pointnet2.models.pointnet2_ssg_sem import PointNet2SemSegSSG

    torch.manual_seed(0)
    model = PointNet2SemSegSSG({"model.use_xyz": True})

    def ref(m, pc):
        xyz, feats = pc[..., :3], pc[..., 3:].transpose(1, 2)
        l_xyz, l_f = [xyz], [feats]
        for mod in m.SA_modules:
            a, b = _ref_sa(mod, l_xyz[-1], l_f[-1])
            l_xyz.append(a)
            l_f.append(b)
        for i in range(-1, -(len(m.FP_modules) + 1), -1):
            l_f[i - 1] = _ref_fp(m.FP_modules[i], l_xyz[i - 1], l_xyz[i], l_f[i - 1], l_f[i])
        return m.fc_lyaer(l_f[0])

    g = torch.Generator().manual_seed(4)
    pc = torch.cat([cloud(1, 1024, 4, near_origin=2), torch.rand(1, 1024, 6, generator=g)], dim=-1)
    _check_pointnet2(model, pc, ref, "pointnet2 SSG semseg")
    return "pointnet2_sem: forward and backward match"


# ---------------------------------------------------------------------------


def pointr_chamfer():
    from extensions.chamfer_dist import ChamferDistanceL1, ChamferDistanceL2

    import chamfer
    assert chamfer.__pcgeom_shim__
    a, b = cloud(3, 500, 5), cloud(3, 700, 6)
    i1, i2 = K.chamfer_nearest(a, b), K.chamfer_nearest(b, a)
    d1, d2, j1, j2 = chamfer.forward(a, b)
    assert j1.dtype == torch.int32 and j2.dtype == torch.int32
    same(j1, i1, "chamfer idx1")
    same(j2, i2, "chamfer idx2")
    for cls, f in ((ChamferDistanceL2, lambda u, v: u.mean() + v.mean()),
                   (ChamferDistanceL1, lambda u, v: (u.sqrt().mean() + v.sqrt().mean()) / 2)):
        x, y = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
        loss = cls()(x, y)
        loss.backward()
        rx, ry = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
        rl = f(((rx - gather_rows(ry, i1)) ** 2).sum(-1), ((ry - gather_rows(rx, i2)) ** 2).sum(-1))
        rl.backward()
        close(loss.detach(), rl.detach(), f"{cls.__name__} value")
        close(x.grad, rx.grad, f"{cls.__name__} d/d xyz1", rtol=1e-4, atol=1e-7)
        close(y.grad, ry.grad, f"{cls.__name__} d/d xyz2", rtol=1e-4, atol=1e-7)
    return "pointr_chamfer: indices exact, L1/L2 values and gradients match"


def pointnet2():
    return pointnet2_cls() + "; " + pointnet2_sem()


if __name__ == "__main__":
    msg = {"point_mae": point_mae, "pointnet2": pointnet2, "pointr_chamfer": pointr_chamfer}[sys.argv[1]]()
    print("OK", msg + (f"; {worst64()}" if _worst64[2] else ""))
