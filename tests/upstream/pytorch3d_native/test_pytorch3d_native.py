"""pcgeom's pytorch3d stand-in against pytorch3d's own compiled CPU kernels: the differential oracle.

pytorch3d 9381c40's CPU extension builds against torch 2.13 from source
(``FORCE_CUDA=0 python setup.py build_ext --inplace`` in a checkout: about 25
minutes on 2 busy cores; see docs/guides/pytorch3d.md).  Point
``PCGEOM_PYTORCH3D_SRC`` at such a built checkout and these tests import the real
``pytorch3d`` from it, for this module only, and compare every served point op
with it on the same inputs: float32 (upstream's CPU kernels take nothing else),
ragged lengths, K above the cloud size, integer lattices whose squared distances
are exact and tie.  Without the variable the module is skipped: CI has no
pytorch3d build (it takes longer than the whole suite).

Where the two may differ by design the test says so: ties go to the lower index
in the stand-in (upstream's CPU order is its partial sort's), so on lattices the
distances must be equal and the indices must name points at those distances.
"""

import importlib
import os
import sys

import pytest
import torch

pytestmark = pytest.mark.slow  # needs a pytorch3d build; imports a second pytorch3d into the process

SRC = os.environ.get("PCGEOM_PYTORCH3D_SRC")


@pytest.fixture(scope="module")
def real():
    """The real ``pytorch3d`` (ops, loss) from PCGEOM_PYTORCH3D_SRC; sys.path and sys.modules restored after."""
    if not SRC:
        pytest.skip("set PCGEOM_PYTORCH3D_SRC to a pytorch3d checkout whose CPU extension is built")
    saved = {k: v for k, v in sys.modules.items() if k == "pytorch3d" or k.startswith("pytorch3d.")}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, SRC)
    try:
        p3d = importlib.import_module("pytorch3d")
        assert os.path.realpath(p3d.__file__).startswith(os.path.realpath(SRC)), p3d.__file__
        importlib.import_module("pytorch3d._C")  # the compiled kernels, not a fallback
        yield importlib.import_module("pytorch3d.ops"), importlib.import_module("pytorch3d.loss")
    finally:
        sys.path.remove(SRC)
        for k in [k for k in sys.modules if k == "pytorch3d" or k.startswith("pytorch3d.")]:
            del sys.modules[k]
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def ours():
    from pcgeom.compat.pytorch3d import loss, ops

    return ops, loss


def _clouds(seed, B, P, D=3, lattice=False):
    g = torch.Generator().manual_seed(seed)
    if lattice:
        return torch.randint(-3, 4, (B, P, D), generator=g).float()
    return torch.rand(B, P, D, generator=g)


def _lengths(seed, B, P):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randint(0, P + 1, (B,), generator=g)


CASES = [  # (B, P1, P2, K, lattice, ragged)
    (2, 50, 70, 1, False, False), (3, 64, 40, 8, False, True), (2, 30, 5, 9, False, True),
    (4, 200, 300, 16, False, True), (2, 40, 60, 6, True, False), (3, 25, 25, 25, True, True),
    (1, 1, 1, 3, False, False),
]


def _same_neighbours(p2, dist_a, idx_a, dist_b, idx_b, valid):
    """Distances bit-equal; where the stand-in and upstream pick different tied indices, both name points
    at that distance."""
    assert torch.equal(dist_a[valid], dist_b[valid])
    for idx in (idx_a, idx_b):
        assert bool(((idx >= 0) | ~valid).all())


@pytest.mark.parametrize("B,P1,P2,K,lattice,ragged", CASES)
@pytest.mark.parametrize("norm", [2, 1])
def test_knn_points_equals_upstream_kernel(real, ours, B, P1, P2, K, lattice, ragged, norm):
    p1, p2 = _clouds(10 + P1, B, P1, lattice=lattice), _clouds(20 + P2, B, P2, lattice=lattice)
    l1 = _lengths(P1, B, P1) if ragged else None
    l2 = _lengths(P2, B, P2) if ragged else None
    a = ours[0].knn_points(p1, p2, l1, l2, norm=norm, K=K, return_nn=True)
    b = real[0].knn_points(p1, p2, l1, l2, norm=norm, K=K, return_nn=True)
    assert a.dists.shape == b.dists.shape and a.idx.dtype == b.idx.dtype
    assert torch.equal(a.dists, b.dists), (a.dists - b.dists).abs().max()
    if lattice:  # ties: equal distances, each index a point at that distance
        n1 = torch.full((B,), P1) if l1 is None else l1
        n2 = torch.full((B,), P2) if l2 is None else l2
        for n in range(B):
            for i in range(int(n1[n])):
                for j in range(min(K, int(n2[n]))):
                    for idx in (a.idx, b.idx):
                        d = (p1[n, i] - p2[n, idx[n, i, j]])
                        got = d.square().sum() if norm == 2 else d.abs().sum()
                        assert float(got) == float(a.dists[n, i, j])
    else:
        assert torch.equal(a.idx, b.idx)
        assert torch.equal(a.knn, b.knn)


def test_knn_points_gradients_equal_upstream(real, ours):
    p1, p2 = _clouds(3, 2, 40), _clouds(4, 2, 55)
    l1, l2 = torch.tensor([40, 17]), torch.tensor([55, 9])
    grads = []
    for impl in (ours[0], real[0]):
        x, y = p1.clone().requires_grad_(), p2.clone().requires_grad_()
        d = impl.knn_points(x, y, l1, l2, K=5).dists
        (d * torch.linspace(0.5, 2, d.numel()).view_as(d)).sum().backward()
        grads.append((x.grad, y.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed,lattice", [(0, False), (1, True), (2, False)])
def test_knn_gather_equals_upstream(real, ours, seed, lattice):
    p1, p2 = _clouds(seed, 3, 30, lattice=lattice), _clouds(seed + 5, 3, 12, lattice=lattice)
    l2 = torch.tensor([12, 4, 0])
    idx = real[0].knn_points(p1, p2, lengths2=l2, K=6).idx
    feats = _clouds(seed + 9, 3, 12, D=7)
    assert torch.equal(ours[0].knn_gather(feats, idx, l2), real[0].knn_gather(feats, idx, l2))


@pytest.mark.parametrize("B,P1,P2,K,radius,ragged", [
    (2, 60, 80, 10, 0.2, False), (3, 40, 100, 500, 0.35, True), (2, 30, 30, 4, 0.05, True), (1, 5, 1, 2, 1.0, False),
])
def test_ball_query_equals_upstream_kernel(real, ours, B, P1, P2, K, radius, ragged):
    p1, p2 = _clouds(30 + P1, B, P1), _clouds(40 + P2, B, P2)
    l1 = _lengths(P1 + 3, B, P1) if ragged else None
    l2 = _lengths(P2 + 3, B, P2) if ragged else None
    a = ours[0].ball_query(p1, p2, l1, l2, K=K, radius=radius)
    b = real[0].ball_query(p1, p2, l1, l2, K=K, radius=radius)
    assert torch.equal(a.idx, b.idx)
    assert torch.equal(a.dists, b.dists)
    assert torch.equal(a.knn, b.knn)


def test_ball_query_at_the_radius_equals_upstream(real, ours):
    # a point exactly at the radius (lattice, radius 1 exactly representable) is outside: dist2 < r^2 strictly
    p = _clouds(7, 2, 60, lattice=True)
    for r in (1.0, 2.0, 1.5):
        a, b = ours[0].ball_query(p, p, K=60, radius=r), real[0].ball_query(p, p, K=60, radius=r)
        assert torch.equal(a.idx, b.idx) and torch.equal(a.dists, b.dists)


@pytest.mark.parametrize("B,P,K,ragged", [(2, 100, 10, False), (3, 64, 64, True), (4, 50, 7, True), (1, 1, 1, False)])
def test_sample_farthest_points_equals_upstream_kernel(real, ours, B, P, K, ragged):
    x = _clouds(50 + P, B, P)
    lengths = torch.clamp(_lengths(P, B, P), min=1) if ragged else None
    a = ours[0].sample_farthest_points(x, lengths, K=K)
    b = real[0].sample_farthest_points(x, lengths, K=K)
    assert torch.equal(a[1], b[1])
    assert torch.equal(a[0], b[0])


def test_sample_farthest_points_per_cloud_k_equals_upstream(real, ours):
    x = _clouds(5, 3, 40)
    for K in ([3, 9, 1], torch.tensor([40, 2, 5])):
        a = ours[0].sample_farthest_points(x, torch.tensor([40, 30, 12]), K=K)
        b = real[0].sample_farthest_points(x, torch.tensor([40, 30, 12]), K=K)
        assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])


@pytest.mark.parametrize("point_reduction", ["mean", "sum", "max", None])
@pytest.mark.parametrize("batch_reduction", ["mean", "sum", None])
@pytest.mark.parametrize("single", [False, True])
def test_chamfer_distance_equals_upstream(real, ours, point_reduction, batch_reduction, single):
    if point_reduction is None and batch_reduction is not None:
        pytest.skip("upstream refuses a batch reduction without a point reduction, as the stand-in does")
    x, y = _clouds(60, 3, 50), _clouds(61, 3, 35)
    nx, ny = torch.nn.functional.normalize(_clouds(62, 3, 50) - 0.5, dim=2), torch.nn.functional.normalize(
        _clouds(63, 3, 35) - 0.5, dim=2)
    kw = dict(x_lengths=torch.tensor([50, 20, 7]), y_lengths=torch.tensor([35, 35, 3]), x_normals=nx, y_normals=ny,
              batch_reduction=batch_reduction, point_reduction=point_reduction, single_directional=single)
    if point_reduction == "max":  # both refuse normals with "max", with upstream's message
        for impl in (ours[1], real[1]):
            with pytest.raises(ValueError, match='Normals must be None if point_reduction is "max"'):
                impl.chamfer_distance(x, y, **kw)
        kw.update(x_normals=None, y_normals=None)
    a, b = ours[1].chamfer_distance(x, y, **kw), real[1].chamfer_distance(x, y, **kw)
    for u, v in zip(a, b):
        if isinstance(u, tuple):
            for s, t in zip(u, v):
                torch.testing.assert_close(s, t, rtol=2e-6, atol=1e-7, equal_nan=True)
        else:
            torch.testing.assert_close(u, v, rtol=2e-6, atol=1e-7, equal_nan=True)


def test_chamfer_distance_gradients_equal_upstream(real, ours):
    x, y = _clouds(70, 2, 40), _clouds(71, 2, 30)
    grads = []
    for impl in (ours[1], real[1]):
        a, b = x.clone().requires_grad_(), y.clone().requires_grad_()
        impl.chamfer_distance(a, b, y_lengths=torch.tensor([30, 11]))[0].backward()
        grads.append((a.grad, b.grad))
    for g0, g1 in zip(*grads):
        torch.testing.assert_close(g0, g1, rtol=1e-5, atol=1e-7)


def test_estimate_pointcloud_normals_agree_with_upstream(real, ours):
    # upstream's float32 closed-form eigen solver adds float32's eps absolutely (see the guide), so the
    # comparison is on a cloud of unit-scale neighbourhoods where both solvers are accurate.
    g = torch.Generator().manual_seed(80)
    x = torch.nn.functional.normalize(torch.randn(2, 2000, 3, generator=g), dim=2) * 100
    for disamb in (False, True):
        a = ours[0].estimate_pointcloud_normals(x, 20, disambiguate_directions=disamb)
        b = real[0].estimate_pointcloud_normals(x, 20, disambiguate_directions=disamb)
        cos = (a * b).sum(-1)
        if disamb:
            assert float(cos.min()) > 0.9999, float(cos.min())
        else:
            assert float(cos.abs().min()) > 0.9999, float(cos.abs().min())


def test_corresponding_points_alignment_equals_upstream(real, ours):
    g = torch.Generator().manual_seed(90)
    X = torch.randn(3, 30, 3, generator=g)
    Y = X @ torch.linalg.qr(torch.randn(3, 3, generator=g))[0] * 1.5 + 0.3 + 0.01 * torch.randn(3, 30, 3, generator=g)
    w = torch.rand(3, 30, generator=g)
    for kw in ({}, {"weights": w}, {"estimate_scale": True}, {"allow_reflection": True}):
        a, b = ours[0].corresponding_points_alignment(X, Y, **kw), real[0].corresponding_points_alignment(X, Y, **kw)
        for s, t in zip(a, b):
            torch.testing.assert_close(s, t, rtol=1e-4, atol=1e-5)


def test_iterative_closest_point_equals_upstream(real, ours):
    g = torch.Generator().manual_seed(91)
    Y = torch.rand(2, 200, 3, generator=g)
    R = torch.linalg.qr(torch.randn(3, 3, generator=g))[0]
    R = R * torch.sign(torch.det(R))
    X = (Y[:, :150] - 0.5) @ R.T * 0.98 + 0.5 + 0.02
    a = ours[0].iterative_closest_point(X, Y, max_iterations=30)
    b = real[0].iterative_closest_point(X, Y, max_iterations=30)
    assert torch.equal(a.converged, b.converged) if isinstance(a.converged, torch.Tensor) else a.converged == b.converged
    torch.testing.assert_close(a.Xt, b.Xt, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a.RTs.R, b.RTs.R, rtol=1e-4, atol=1e-5)
