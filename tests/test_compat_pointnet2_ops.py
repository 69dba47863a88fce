"""pcgeom.compat.pointnet2_ops / pointnet2_modules / chamfer_ext against the transcribed CUDA kernels."""

import os
import sys

import numpy as np
import pytest
import torch

from pcgeom._pointnet2_kernel import strict_radius
from pcgeom.compat import chamfer_ext
from pcgeom.compat import pointnet2_modules as M
from pcgeom.compat import pointnet2_ops as P
from conftest import random_cloud

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "upstream"))
import kernels64 as K  # noqa: E402


def _cloud(B, N, seed, near=0):
    x = random_cloud(B, N, seed=seed) * 2 - 1
    x[:, 1 : 1 + near] *= 0.01
    return x


def test_fps_int32_and_the_near_origin_rule():
    x = _cloud(2, 300, 1, near=5)
    idx = P.furthest_point_sample(x, 100)
    assert idx.dtype == torch.int32 and idx.shape == (2, 100)
    np.testing.assert_array_equal(idx.long().numpy(), K.fps(x, 100))
    # more samples than eligible points: indices repeat, exactly as the kernel repeats them
    y = _cloud(1, 40, 2, near=10)
    np.testing.assert_array_equal(P.furthest_point_sample(y, 40).long().numpy(), K.fps(y, 40))


def test_fps_native_path_equals_the_sequential_transcription():
    from pcgeom._pointnet2_kernel import fps as _pointnet2_fps
    from conftest import lattice_cloud

    lat = lattice_cloud(2, 6) - 2.5  # every distance ties: the kernel's tie rule decides
    cases = [(_cloud(2, 513, 11, near=6), 300), (_cloud(1, 1024, 12, near=3), 200), (lat, 150), (lat, 216),
             (lattice_cloud(1, 5) - 2, 60)]
    for x, n in cases:
        native = P._pointnet2_fps_native(x, n)
        assert native is not None
        assert torch.equal(native, _pointnet2_fps(x, n))
        np.testing.assert_array_equal(native.numpy(), K.fps(x, n))
    # Where the kernel repeats points (duplicates, too few eligible) or sees NaN: the transcription serves.
    dup = _cloud(2, 50, 13)
    dup[:, 25:] = dup[:, :25]
    few = _cloud(1, 30, 14, near=10)
    nan = _cloud(1, 30, 15)
    nan[0, 4, 1] = float("nan")
    for x, n in ((dup, 40), (few, 30), (nan, 10)):
        assert P._pointnet2_fps_native(x, n) is None
        assert torch.equal(P.furthest_point_sample(x, n).long(), _pointnet2_fps(x, n))
    np.testing.assert_array_equal(P.furthest_point_sample(dup, 40).long().numpy(), K.fps(dup, 40))


@pytest.mark.parametrize("radius,nsample", [(0.2, 16), (0.5, 64), (1e-4, 4), (0.0, 3)])
def test_ball_query_first_hits_padding_and_zero(radius, nsample):
    x = _cloud(2, 200, 3)
    q = torch.cat([x[:, :20], x[:, :2] + 5.0], dim=1)  # the last two balls are empty
    idx = P.ball_query(radius, nsample, x, q)
    assert idx.dtype == torch.int32 and idx.shape == (2, 22, nsample)
    np.testing.assert_array_equal(idx.long().numpy(), K.ball_query(radius, nsample, x, q))
    assert (idx[:, 20:] == 0).all()


def test_ball_query_boundary_is_strict():
    # A point at exactly the radius: outside for pointnet2 (d2 < r2), inside for pcgeom.ball_query.
    x = torch.tensor([[[0.0, 0, 0], [0.5, 0, 0], [0.25, 0, 0]]])
    assert P.ball_query(0.5, 3, x, x[:, :1]).tolist() == [[[0, 2, 0]]]
    import pcgeom
    assert pcgeom.ball_query(x[:, :1], x, 0.5, 3, order="index").idx.tolist() == [[[0, 1, 2]]]
    # the strict threshold is exact for many radii
    for r in np.linspace(0.01, 3.0, 97):
        r32 = torch.tensor(float(r), dtype=torch.float32)
        t = strict_radius(float(r), torch.float32)
        assert torch.tensor(t * t, dtype=torch.float64).float() == torch.nextafter(r32 * r32, torch.tensor(0.0))


def test_three_nn_and_interpolate():
    u, k = _cloud(2, 50, 4), _cloud(2, 20, 5)
    dist, idx = P.three_nn(u, k)
    rd, ri = K.three_nn(u, k)
    assert idx.dtype == torch.int32
    np.testing.assert_array_equal(idx.long().numpy(), ri)
    np.testing.assert_allclose(dist.numpy(), rd, rtol=1e-6, atol=1e-7)
    f = random_cloud(2, 20, 8, seed=6).transpose(1, 2).contiguous().requires_grad_()  # (B, C=8, m=20)
    w = torch.rand(2, 50, 3, requires_grad=True)
    out = P.three_interpolate(f, idx, w)
    np.testing.assert_allclose(out.detach().numpy(), K.three_interpolate(f, ri, w), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert f.grad is not None and w.grad is None  # the original gives weight no gradient


def test_gather_and_grouping_gradients():
    f = torch.rand(2, 4, 10, dtype=torch.float64, requires_grad=True)
    i2 = torch.randint(0, 10, (2, 6), dtype=torch.int32)
    i3 = torch.randint(0, 10, (2, 5, 3), dtype=torch.int32)
    assert torch.autograd.gradcheck(lambda t: P.gather_operation(t, i2), (f,))
    assert torch.autograd.gradcheck(lambda t: P.grouping_operation(t, i3), (f,))
    assert torch.equal(P.grouping_operation(f, i3)[1, :, 2, 1], f[1, :, i3[1, 2, 1].item()])


def test_fp_and_sa_modules_state_dict_keys():
    sa = M.PointnetSAModuleMSG(npoint=16, radii=[0.2, 0.4], nsamples=[8, 16], mlps=[[3, 16, 32], [3, 16, 32]])
    keys = set(sa.state_dict())
    assert {"mlps.0.0.weight", "mlps.0.1.running_mean", "mlps.1.3.weight"} <= keys
    assert sa.state_dict()["mlps.0.0.weight"].shape == (16, 6, 1, 1)
    xyz = _cloud(2, 64, 7)
    new_xyz, feats = sa(xyz, xyz.transpose(1, 2).contiguous())
    assert new_xyz.shape == (2, 16, 3) and feats.shape == (2, 64, 16)
    fp = M.PointnetFPModule(mlp=[64 + 3, 32])
    assert set(fp.state_dict()) >= {"mlp.0.weight", "mlp.1.weight"}
    assert fp(xyz, new_xyz, xyz.transpose(1, 2), feats).shape == (2, 32, 64)


def test_chamfer_ext():
    a, b = _cloud(2, 30, 8), _cloud(2, 45, 9)
    d1, d2, i1, i2 = chamfer_ext.forward(a, b)
    np.testing.assert_array_equal(i1.long().numpy(), K.chamfer_nearest(a, b))
    np.testing.assert_array_equal(i2.long().numpy(), K.chamfer_nearest(b, a))
    g1, g2 = torch.rand(2, 30), torch.rand(2, 45)
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    ref = (g1 * ((x - y[torch.arange(2)[:, None], i1.long()]) ** 2).sum(-1)).sum() + (
        g2 * ((y - x[torch.arange(2)[:, None], i2.long()]) ** 2).sum(-1)).sum()
    ref.backward()
    ga, gb = chamfer_ext.backward(a, b, i1, i2, g1, g2)
    assert torch.allclose(ga, x.grad, atol=1e-6) and torch.allclose(gb, y.grad, atol=1e-6)


@pytest.mark.parametrize("change,exc,match", [
    (dict(idx1=torch.tensor([[0, 2]], dtype=torch.int32)), ValueError, r"idx1 must hold indices in \[0, 2\) of the other cloud, got 2"),
    (dict(idx2=torch.tensor([[0, -1]])), ValueError, r"idx2 must hold indices in \[0, 2\) of the other cloud, got -1"),
    (dict(idx1=torch.tensor([[0.0, 1.0]])), TypeError, r"idx1 must be an int32/int64 tensor"),
    (dict(grad_dist1=torch.ones(1, 3)), ValueError, r"grad_dist1 must have shape \(1, 2\)"),
    (dict(grad_dist2=torch.ones(1, 2, dtype=torch.int64)), TypeError, r"grad_dist2 must be a floating tensor"),
])
def test_chamfer_ext_backward_refuses_bad_indices_and_gradients_by_name(change, exc, match):
    """Out-of-range indices were an unnamed gather RuntimeError on CPU (and an out-of-bounds read on CUDA)."""
    a, b = torch.tensor([[[0.0, 0, 0], [2, 0, 0]]]), torch.tensor([[[0.0, 1, 0], [5, 0, 0]]])
    args = dict(idx1=torch.tensor([[0, 0]], dtype=torch.int32), idx2=torch.tensor([[0, 1]], dtype=torch.int32),
                grad_dist1=torch.ones(1, 2), grad_dist2=torch.ones(1, 2))
    args.update(change)
    with pytest.raises(exc, match="chamfer.backward: " + match):
        chamfer_ext.backward(a, b, args["idx1"], args["idx2"], args["grad_dist1"], args["grad_dist2"])


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda x: P.furthest_point_sample(x[..., :2], 4), ValueError, r"furthest_point_sample: xyz must have shape \(B, N, 3\)"),
        (lambda x: P.furthest_point_sample(x, 99), ValueError, r"npoint=99 exceeds the number of points N=10"),
        (lambda x: P.ball_query(0.1, 4, x, x[0]), ValueError, r"ball_query: new_xyz must have shape \(B, S, 3\)"),
        (lambda x: P.ball_query(-1.0, 4, x, x), ValueError, r"ball_query: radius must be >= 0"),
        (lambda x: P.ball_query(0.1, 0, x, x), ValueError, r"ball_query: nsample must be >= 1"),
        (lambda x: P.gather_operation(x.transpose(1, 2), torch.full((2, 3), 10)), ValueError, r"gather_operation: idx values must be in \[0, 10\)"),
        (lambda x: P.grouping_operation(x.transpose(1, 2), torch.zeros(2, 3, 4)), TypeError, r"grouping_operation: idx must be int32 or int64"),
        (lambda x: P.three_nn(x, x.double()), TypeError, r"three_nn: unknown and known must have the same dtype"),
        (lambda x: chamfer_ext.forward(x, x[:1]), ValueError, r"chamfer.forward: xyz2 must have shape"),
    ],
)
def test_errors_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call(random_cloud(2, 10, seed=10))
