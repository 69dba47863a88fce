"""Second-order gradients (issue #39, D1): gradients of gradients through every differentiable public function.

A gradient penalty, a Hessian-vector product or MAML differentiates a gradient.  The backward ops
(``knn_backward``, ``knn_gather_backward``) have autograd of their own, so such a gradient reaches
every parameter instead of being dropped with a UserWarning; ``gradgradcheck`` checks each function in
float64 (warnings are errors here: the dropped case used to pass with a warning and ``W.grad = None``).
The gradient-penalty examples are compared with a pure-torch float64 formula.  Run on both paths
(``-m ops``; scripts/test.sh runs it again with ``PCGEOM_DISABLE_EXT=1``).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import pcgeom
from pcgeom.compat import chamfer_ext, pointnet2_ops, pointops, torch_scatter

pytestmark = pytest.mark.ops  # the op suite: also run on the pure-torch path

F64 = torch.float64


def _rand(gen, *shape, scale=1.0):
    return (torch.rand(*shape, generator=gen, dtype=F64) * scale).requires_grad_()


def _finite(t):
    # padded slots hold +inf; finite differences of inf are NaN, and their gradient is 0 anyway
    return torch.where(torch.isfinite(t), t, torch.zeros((), dtype=t.dtype))


def _idx(gen, shape, n, pad=True):
    return torch.randint(-1 if pad else 0, n, shape, generator=gen)


# --------------------------------------------------------------------------- the cases
# Each builder takes (gen, s) with s = dict(B, N, M, k, D, C) and returns (function, float64 inputs).
# tests/fuzz/test_fuzz_second_order.py draws s and the seed; the tests below use SIZES.


def _knn(gen, s):
    B, N, M, k, D = s["B"], s["N"], s["M"], s["k"], s["D"]
    pl = torch.randint(0, N + 1, (B,), generator=gen)
    return (lambda q, p: _finite(pcgeom.knn(q, p, k, points_lengths=pl).dist2)), (_rand(gen, B, M, D), _rand(gen, B, N, D))


def _knn_packed(gen, s):
    N, M, k, D = s["N"], s["M"], s["k"], s["D"]
    qo, po = torch.tensor([M // 2, M]), torch.tensor([N // 2, N])
    return (lambda q, p: _finite(pcgeom.knn(q, p, k, query_offsets=qo, points_offsets=po).dist2)), \
        (_rand(gen, M, D), _rand(gen, N, D))


def _ball_query(order):
    def build(gen, s):
        B, N, M, k, D = s["B"], s["N"], s["M"], s["k"], s["D"]
        # a radius well inside the unit cube's distances: some points in, some out, few near the edge
        return (lambda q, p: _finite(pcgeom.ball_query(q, p, 0.55, k, order=order).dist2)), \
            (_rand(gen, B, M, D), _rand(gen, B, N, D))
    return build


def _knn_gather(gen, s):
    B, N, M, k, C = s["B"], s["N"], s["M"], s["k"], s["C"]
    idx = _idx(gen, (B, M, k), N)
    return (lambda x: pcgeom.knn_gather(x, idx)), (_rand(gen, B, N, C),)


def _knn_backward_op(gen, s):
    B, N, M, k, D = s["B"], s["N"], s["M"], s["k"], s["D"]
    idx = _idx(gen, (B, M, k), N)
    return (lambda g, q, p: torch.ops.pcgeom.knn_backward(g, q, p, idx)), \
        (_rand(gen, B, M, k), _rand(gen, B, M, D), _rand(gen, B, N, D))


def _knn_gather_backward_op(gen, s):
    B, N, M, k, C = s["B"], s["N"], s["M"], s["k"], s["C"]
    idx = _idx(gen, (B, M, k), N)
    return (lambda g: torch.ops.pcgeom.knn_gather_backward(g, idx, N)), (_rand(gen, B, M, k, C),)


def _group_features(gen, s):
    B, N, M, k, D, C = s["B"], s["N"], s["M"], s["k"], s["D"], s["C"]
    idx = _idx(gen, (B, M, k), N)
    return (lambda p, c, f: pcgeom.group_features(p, c, idx, f)), (_rand(gen, B, N, D), _rand(gen, B, M, D), _rand(gen, B, N, C))


def _interpolate_features(gen, s):
    B, N, M, k, D, C = s["B"], s["N"], s["M"], s["k"], s["D"], s["C"]
    pl = torch.randint(0, N + 1, (B,), generator=gen)
    return (lambda q, p, f: pcgeom.interpolate_features(q, p, f, k=k, points_lengths=pl)), \
        (_rand(gen, B, M, D), _rand(gen, B, N, D), _rand(gen, B, N, C))


def _chamfer(kind, reduction):
    def build(gen, s):
        B, N, M, D = s["B"], s["N"], s["M"], s["D"]
        xl = torch.randint(1, M + 1, (B,), generator=gen)
        return (lambda x, y: pcgeom.chamfer_distance(x, y, x_lengths=xl, kind=kind, reduction=reduction)), \
            (_rand(gen, B, M, D), _rand(gen, B, N, D))
    return build


def _normals_points(gen, n):
    # a noisy plane: the smallest eigenvalue of every neighbourhood is well separated
    p = torch.rand(1, n, 3, generator=gen, dtype=F64)
    p[..., 2] = p[..., 2] * 0.1 + 0.3 * p[..., 0]
    return p.requires_grad_()


def _pca_normals(gen, s):
    N = max(s["N"], 4)
    idx = torch.stack([torch.randperm(N, generator=gen)[:4] for _ in range(s["M"])])[None]
    return (lambda p: tuple(pcgeom.ops.pca_normals(p, idx))), (_normals_points(gen, N),)


def _estimate_normals(gen, s):
    N = max(s["N"], 5)
    return (lambda p: tuple(pcgeom.estimate_normals(p, k=5))), (_normals_points(gen, N),)


def _mean_neighbor_dist2(gen, s):
    B, N, k, D = s["B"], s["N"], s["k"], s["D"]
    # a one-point cloud has no neighbour: a non-finite mean, left out
    return (lambda p: _finite(pcgeom.mean_neighbor_dist2(p, k=k))), (_rand(gen, B, N, D),)


def _edge_features(gen, s):
    N, k, D = s["N"], s["k"], s["D"]
    return (lambda x: pcgeom.edge_features(x, min(k, N))), (_rand(gen, N, D),)


def _group_patches(gen, s):
    B, N, k, D = s["B"], s["N"], s["k"], s["D"]
    return (lambda p: tuple(pcgeom.group_patches(p, min(2, N), min(k, N)))), (_rand(gen, B, N, D),)


def _group_reduce(reduce):
    def build(gen, s):
        N, C = s["N"], s["C"]
        index = torch.randint(0, 3, (N,), generator=gen)
        return (lambda x: pcgeom.group_reduce(x, index, 3, reduce)), (_rand(gen, N, C),)
    return build


def _segment_reduce(gen, s):
    N, C = s["N"], s["C"]
    return (lambda x: pcgeom.segment_reduce(x, torch.tensor([N // 3, N // 3, N]), "mean")), (_rand(gen, N, C),)


def _group_gather(gen, s):
    M, C = s["M"], s["C"]
    index = torch.randint(0, 3, (M,), generator=gen)
    return (lambda x: pcgeom.group_gather(x, index)), (_rand(gen, 3, C),)


def _group_packed(gen, s):
    N, M, k, D = s["N"], s["M"], s["k"], s["D"]
    idx = _idx(gen, (M, k), N)
    return (lambda f, p, c: pcgeom.group_packed(f, idx, points=p, centers=c)), \
        (_rand(gen, N, s["C"]), _rand(gen, N, D), _rand(gen, M, D))


def _interpolate_packed(gen, s):
    # differentiable w.r.t. the features only (the weights are constants of the geometry, as documented)
    N, M, k, D, C = s["N"], s["M"], s["k"], s["D"], s["C"]
    q, p = torch.rand(M, D, generator=gen, dtype=F64), torch.rand(N, D, generator=gen, dtype=F64)
    return (lambda f: pcgeom.interpolate_packed(q, p, f, k)), (_rand(gen, N, C),)


def _aggregate_neighbors(gen, s):
    N, M, k, C = s["N"], s["M"], s["k"], s["C"]
    idx = _idx(gen, (M, k), N)
    return (lambda f, w, pos: pcgeom.aggregate_neighbors(f, idx, w, pos)), \
        (_rand(gen, N, C), _rand(gen, M, k, 1), _rand(gen, M, k, C))


def _add_s(gen, s):
    B, N = s["B"], s["N"]
    R = torch.linalg.qr(torch.randn(B, 3, 3, generator=gen, dtype=F64))[0]
    return (lambda R_, t, m: pcgeom.metrics.add_s(R_, t, R, torch.zeros(B, 3, dtype=F64), m)), \
        (R.clone().requires_grad_(), _rand(gen, B, 3), _rand(gen, B, N, 3))


def _pose_loss(gen, s):
    B, P, Nm = s["B"], s["M"], s["N"]
    target, model, pts = (torch.rand(B, Nm, 3, generator=gen, dtype=F64), torch.rand(B, Nm, 3, generator=gen, dtype=F64),
                          torch.rand(B, P, 3, generator=gen, dtype=F64))
    sym = torch.arange(B) % 2 == 0  # one symmetric sample (nearest-point matching), one ordinary
    return (lambda r, t, c: pcgeom.losses.pose_loss(r, t, c, target, model, pts, 0.015, symmetric=sym).loss), \
        (_rand(gen, B, P, 4), _rand(gen, B, P, 3), (0.5 + 0.5 * torch.rand(B, P, generator=gen, dtype=F64)).requires_grad_())


def _pointnet2_ops(gen, s):
    B, N, M, k, C = s["B"], s["N"], s["M"], s["k"], s["C"]
    gi = torch.randint(0, N, (B, M, k), generator=gen, dtype=torch.int32)
    ti = torch.randint(0, N, (B, M, 3), generator=gen, dtype=torch.int32)
    w = torch.rand(B, M, 3, generator=gen, dtype=F64)
    return (lambda f: (pointnet2_ops.grouping_operation(f, gi), pointnet2_ops.gather_operation(f, gi[..., 0]),
                       pointnet2_ops.three_interpolate(f, ti, w))), (_rand(gen, B, C, N),)


def _pointops(gen, s):
    N, M, k, C = s["N"], s["M"], s["k"], s["C"]
    xyz, new_xyz = torch.rand(N, 3, generator=gen, dtype=F64), torch.rand(M, 3, generator=gen, dtype=F64)
    idx = torch.randint(0, N, (M, k), generator=gen, dtype=torch.int32)
    off, new_off = torch.tensor([N], dtype=torch.int32), torch.tensor([M], dtype=torch.int32)
    return (lambda f, pos, w: (pointops.grouping(idx, f, xyz, new_xyz, with_xyz=True),
                               pointops.interpolation(xyz, new_xyz, f, off, new_off, k=min(3, N)),
                               pointops.aggregation(f[idx.long()[:, 0]] if M <= N else f[:1].expand(M, -1), pos, w, idx % min(M, N)),
                               pointops.subtraction(f[:1].expand(M, -1), f, idx))), \
        (_rand(gen, N, C), _rand(gen, M, k, C), _rand(gen, M, k, C))


def _torch_scatter(gen, s):
    N, C = max(s["N"], 3), s["C"]
    G = N // 2  # every group has >= 2 rows: a one-row std is sqrt(0), not differentiable
    index = torch.randperm(N, generator=gen) % G
    indptr = torch.tensor([0, N // 3, N // 3, N])
    return (lambda x: (torch_scatter.scatter(x, index, 0, dim_size=G + 1, reduce="mean"),
                       torch_scatter.scatter_softmax(x, index, 0), torch_scatter.scatter_logsumexp(x, index, 0, dim_size=G),
                       torch_scatter.scatter_std(x, index, 0, dim_size=G), torch_scatter.segment_csr(x, indptr, reduce="sum"),
                       torch_scatter.segment_csr(x.T, indptr[None], reduce="mean"), torch_scatter.gather_csr(x[:3], indptr))), \
        (_rand(gen, N, C),)


class _UpstreamChamfer(torch.autograd.Function):
    """extensions/chamfer_dist's ChamferFunction as Point-MAE / PoinTr write it, on the chamfer_ext stand-in."""

    @staticmethod
    def forward(ctx, xyz1, xyz2):
        dist1, dist2, idx1, idx2 = chamfer_ext.forward(xyz1, xyz2)
        ctx.save_for_backward(xyz1, xyz2, idx1, idx2)
        return dist1, dist2

    @staticmethod
    def backward(ctx, grad_dist1, grad_dist2):
        xyz1, xyz2, idx1, idx2 = ctx.saved_tensors
        return chamfer_ext.backward(xyz1, xyz2, idx1, idx2, grad_dist1, grad_dist2)


def _chamfer_ext(gen, s):
    B, N, M = s["B"], s["N"], s["M"]
    return (lambda a, b: _UpstreamChamfer.apply(a, b)), (_rand(gen, B, M, 3), _rand(gen, B, N, 3))


CASES = {
    "knn": _knn, "knn_packed": _knn_packed, "ball_query": _ball_query("distance"),
    "ball_query_index_order": _ball_query("index"), "knn_gather": _knn_gather,
    "op_knn_backward": _knn_backward_op, "op_knn_gather_backward": _knn_gather_backward_op,
    "group_features": _group_features, "interpolate_features": _interpolate_features,
    "chamfer_l2_mean": _chamfer("l2", "mean"), "chamfer_l1_none": _chamfer("l1", "none"),
    "pca_normals": _pca_normals, "estimate_normals": _estimate_normals,
    "mean_neighbor_dist2": _mean_neighbor_dist2, "edge_features": _edge_features, "group_patches": _group_patches,
    "group_reduce_sum": _group_reduce("sum"), "group_reduce_max": _group_reduce("max"),
    "segment_reduce": _segment_reduce, "group_gather": _group_gather, "group_packed": _group_packed,
    "interpolate_packed": _interpolate_packed, "aggregate_neighbors": _aggregate_neighbors, "metrics_add_s": _add_s, "losses_pose_loss": _pose_loss,
    "compat_pointnet2_ops": _pointnet2_ops, "compat_pointops": _pointops, "compat_torch_scatter": _torch_scatter,
    "compat_chamfer_ext": _chamfer_ext,
}

SIZES = dict(B=2, N=6, M=4, k=3, D=3, C=2)


def check_second_order(name: str, seed: int, s: dict, fast_mode: bool = True) -> None:
    """gradcheck and gradgradcheck of one case in float64, with warnings as errors (a dropped second
    order used to be only a UserWarning).  ``fast_mode`` compares random projections of the Jacobians
    (a dropped second order still gives 0 against a non-zero finite difference)."""
    fn, inputs = CASES[name](torch.Generator().manual_seed(seed), s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gradcheck(fn, inputs, fast_mode=fast_mode)
        assert gradgradcheck(fn, inputs, fast_mode=fast_mode)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradgradcheck(name):
    check_second_order(name, 0, SIZES)


def test_third_order_through_knn_and_gather():
    gen = torch.Generator().manual_seed(1)
    q, p, f = _rand(gen, 2, 4, 3), _rand(gen, 2, 5, 3), _rand(gen, 2, 5, 2)

    def grads(q, p, f):
        d, i = pcgeom.knn(q, p, 3)
        y = (d ** 2).sum() + (pcgeom.knn_gather(f * p.sum(-1, keepdim=True), i) ** 2).sum()
        return torch.autograd.grad(y, (q, p, f), create_graph=True)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gradgradcheck(grads, (q, p, f), fast_mode=True)  # third and fourth derivatives


# --------------------------------------------------------------------------- the gradient penalty of the issue


def _sq(a, b):
    return ((a[:, :, None, :] - b[:, None, :, :]) ** 2).sum(-1)


def _brute_knn_dist2(q, p, k):
    return _sq(q, p).topk(k, dim=2, largest=False).values


def _brute_gather(x, idx):
    g = x[torch.arange(x.shape[0])[:, None, None], idx.clamp_min(0)]
    return torch.where((idx >= 0)[..., None], g, torch.zeros((), dtype=x.dtype))


def _brute_chamfer(a, b):
    d = _sq(a, b)
    return (d.min(2).values.mean(1) + d.min(1).values.mean(1)).mean()


def _brute_interpolate(q, p, f, k):
    d2, idx = _sq(q, p).topk(k, dim=2, largest=False)
    r = 1.0 / (d2.sqrt() + 1e-8)
    return (_brute_gather(f, idx) * (r / r.sum(-1, keepdim=True))[..., None]).sum(2)


_TARGET = torch.rand(2, 8, 3, generator=torch.Generator().manual_seed(7), dtype=F64)
_FEATS = torch.rand(2, 8, 4, generator=torch.Generator().manual_seed(8), dtype=F64)
_IDX = torch.randint(-1, 9, (2, 4, 3), generator=torch.Generator().manual_seed(9))
_WEIGHTS = torch.rand(2, 9, 3, generator=torch.Generator().manual_seed(10), dtype=F64)

# (pcgeom loss, pure-torch loss) of y = x @ W (2, 9, 3)
PENALTY_LOSSES = {
    "chamfer_distance": (lambda y: pcgeom.chamfer_distance(y, _TARGET), lambda y: _brute_chamfer(y, _TARGET)),
    "knn_dist2": (lambda y: (pcgeom.knn(y, _TARGET, 3).dist2 * _WEIGHTS).sum(),
                  lambda y: (_brute_knn_dist2(y, _TARGET, 3) * _WEIGHTS).sum()),
    "knn_gather": (lambda y: (pcgeom.knn_gather(y, _IDX) ** 2).sum(), lambda y: (_brute_gather(y, _IDX) ** 2).sum()),
    "group_features": (lambda y: (pcgeom.group_features(y, y[:, :4], _IDX) ** 2).sum(),
                       lambda y: (torch.where((_IDX >= 0)[..., None], _brute_gather(y, _IDX) - y[:, :4, None], 0) ** 2).sum()),
    "interpolate_features": (lambda y: (pcgeom.interpolate_features(y, _TARGET, _FEATS) ** 2).sum(),
                             lambda y: (_brute_interpolate(y, _TARGET, _FEATS, 3) ** 2).sum()),
}


@pytest.mark.parametrize("name", sorted(PENALTY_LOSSES))
def test_gradient_penalty_reaches_the_weights(name):
    ours, brute = PENALTY_LOSSES[name]
    gen = torch.Generator().manual_seed(3)
    x = _rand(gen, 2, 9, 3)
    W = torch.randn(3, 3, generator=gen, dtype=F64).requires_grad_()

    def penalty(loss):
        x.grad = W.grad = None
        (gx,) = torch.autograd.grad(loss(x @ W), x, create_graph=True)
        (gx ** 2).sum().backward()
        return x.grad, W.grad

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gx, gW = penalty(ours)
    rx, rW = penalty(brute)
    assert gW is not None and gx is not None
    assert rW.abs().max() > 1e-3  # the penalty really depends on W
    torch.testing.assert_close(gW, rW, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gx, rx, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("call", ["group_reduce", "segment_reduce", "torch_scatter"])
def test_product_second_order_is_refused_by_name(call):
    gen = torch.Generator().manual_seed(6)
    x = _rand(gen, 6, 2)
    key = torch.tensor([0, 1, 0, 1, 2, 2])
    fn = {"group_reduce": lambda x: pcgeom.group_reduce(x, key, 3, "prod"),
          "segment_reduce": lambda x: pcgeom.segment_reduce(x, torch.tensor([2, 2, 6]), "prod"),
          "torch_scatter": lambda x: torch_scatter.scatter_mul(x, key, 0, dim_size=3)}[call]
    assert gradcheck(fn, (x,))  # the first order is there
    (g,) = torch.autograd.grad((fn(x) * x[:3]).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=r"reduce='prod' .* has no second-order gradient"):
        g.sum().backward()


def test_backward_ops_pass_opcheck():
    gen = torch.Generator().manual_seed(4)
    idx = _idx(gen, (2, 5, 3), 7)
    g, q, p = _rand(gen, 2, 5, 3), _rand(gen, 2, 5, 3), _rand(gen, 2, 7, 3)
    torch.library.opcheck(torch.ops.pcgeom.knn_backward.default, (g, q, p, idx))
    torch.library.opcheck(torch.ops.pcgeom.knn_gather_backward.default, (_rand(gen, 2, 5, 3, 4), idx, 7))


# --------------------------------------------------------------------------- torch.compile


def _penalty_weights(loss_fn):
    gen = torch.Generator().manual_seed(5)
    x = _rand(gen, 2, 9, 3)
    W = torch.randn(3, 3, generator=gen, dtype=F64).requires_grad_()
    (gx,) = torch.autograd.grad(loss_fn(x, W), x, create_graph=True)
    (gx ** 2).sum().backward()
    return W.grad


def _chamfer_loss(x, W):
    return pcgeom.chamfer_distance(x @ W, _TARGET) + (pcgeom.knn_gather(x @ W, _IDX) ** 2).sum()


def _brute_loss(x, W):
    return _brute_chamfer(x @ W, _TARGET) + (_brute_gather(x @ W, _IDX) ** 2).sum()


def test_compiled_forward_double_backward_eager_backend():
    # dynamo captures the ops in one graph (fullgraph) and autograd runs their registrations
    torch._dynamo.reset()
    compiled = torch.compile(_chamfer_loss, backend="eager", fullgraph=True)
    got = _penalty_weights(compiled)
    assert got is not None
    torch.testing.assert_close(got, _penalty_weights(_brute_loss), rtol=1e-10, atol=1e-12)


@pytest.mark.slow  # compiles with inductor
def test_compiled_double_backward_is_refused_by_name_not_dropped():
    # AOTAutograd (inductor, aot_eager) compiles a first-order backward; torch refuses a second order
    # through it with a named error, so a penalty never silently loses the compiled part.
    torch._dynamo.reset()
    compiled = torch.compile(_chamfer_loss, backend="inductor", fullgraph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        _penalty_weights(compiled)
