"""pcgeom.chamfer_distance against a float64 brute force (numpy), with gradcheck."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcgeom
from conftest import clustered_cloud, random_cloud, surface_cloud


def _np64(t):
    return t.detach().cpu().to(torch.float64).numpy()


def brute_chamfer(x, y, kind):
    """One cloud pair, float64: Point-MAE ChamferDistanceL2 / PoinTr ChamferDistanceL1."""
    d = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    a, b = d.min(1), d.min(0)
    if kind == "l2":
        return a.mean() + b.mean()
    return (np.sqrt(a).mean() + np.sqrt(b).mean()) / 2


def brute_batch(x, y, kind, xl=None, yl=None):
    x, y = _np64(x), _np64(y)
    B = x.shape[0]
    xl = [x.shape[1]] * B if xl is None else [int(v) for v in xl]
    yl = [y.shape[1]] * B if yl is None else [int(v) for v in yl]
    return np.array([brute_chamfer(x[b, : xl[b]], y[b, : yl[b]], kind) for b in range(B)])


@pytest.mark.parametrize("kind", ["l2", "l1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_chamfer_matches_bruteforce(device, kind, dtype):
    x = surface_cloud(3, 200, dtype=dtype, device=device, seed=1)
    y = clustered_cloud(3, 150, dtype=dtype, device=device, seed=2)
    ref = brute_batch(x, y, kind)
    tol = dict(rtol=1e-5, atol=1e-7) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-14)
    none = pcgeom.chamfer_distance(x, y, kind=kind, reduction="none")
    assert none.shape == (3,) and none.dtype == dtype
    np.testing.assert_allclose(_np64(none), ref, **tol)
    np.testing.assert_allclose(float(pcgeom.chamfer_distance(x, y, kind=kind)), ref.mean(), **tol)
    np.testing.assert_allclose(float(pcgeom.chamfer_distance(x, y, kind=kind, reduction="sum")), ref.sum(), **tol)
    # default kind is l2 and default reduction is mean
    if kind == "l2":
        assert torch.equal(pcgeom.chamfer_distance(x, y), pcgeom.chamfer_distance(x, y, kind="l2", reduction="mean"))


def test_chamfer_equals_point_mae_formula():
    """mean over the batch of per-cloud values == Point-MAE's mean(dist1) + mean(dist2) for equal sizes."""
    x = random_cloud(4, 32, dtype=torch.float64, seed=3)
    y = random_cloud(4, 32, dtype=torch.float64, seed=4)
    d = torch.cdist(x, y) ** 2
    point_mae = d.min(2).values.mean() + d.min(1).values.mean()
    torch.testing.assert_close(pcgeom.chamfer_distance(x, y), point_mae)
    poin_tr = (d.min(2).values.sqrt().mean() + d.min(1).values.sqrt().mean()) / 2
    torch.testing.assert_close(pcgeom.chamfer_distance(x, y, kind="l1"), poin_tr)


@pytest.mark.parametrize("kind", ["l2", "l1"])
def test_chamfer_ragged_lengths(device, kind):
    x = random_cloud(3, 50, dtype=torch.float64, device=device, seed=5)
    y = random_cloud(3, 40, dtype=torch.float64, device=device, seed=6)
    xl = torch.tensor([50, 7, 1], device=device)
    yl = torch.tensor([13, 40, 2], device=device)
    # padding content must not matter: fill it with far-away points
    xp, yp = x.clone(), y.clone()
    for b in range(3):
        xp[b, int(xl[b]):] = 1e6
        yp[b, int(yl[b]):] = -1e6
    got = pcgeom.chamfer_distance(xp, yp, x_lengths=xl, y_lengths=yl, kind=kind, reduction="none")
    np.testing.assert_allclose(_np64(got), brute_batch(x, y, kind, xl, yl), rtol=1e-12)
    # only one side ragged
    got = pcgeom.chamfer_distance(x, yp, y_lengths=yl, kind=kind, reduction="none")
    np.testing.assert_allclose(_np64(got), brute_batch(x, y, kind, None, yl), rtol=1e-12)
    # gradients of padded points are exactly zero, and finite elsewhere
    xp.requires_grad_()
    yp.requires_grad_()
    pcgeom.chamfer_distance(xp, yp, x_lengths=xl, y_lengths=yl, kind=kind).backward()
    for t, lens in ((xp, xl), (yp, yl)):
        assert torch.isfinite(t.grad).all()
        for b in range(3):
            assert bool((t.grad[b, int(lens[b]):] == 0).all())


@pytest.mark.parametrize("kind", ["l2", "l1"])
def test_chamfer_gradcheck(device, kind):
    x = random_cloud(2, 9, dtype=torch.float64, device=device, seed=7).requires_grad_()
    y = random_cloud(2, 6, dtype=torch.float64, device=device, seed=8).requires_grad_()
    torch.autograd.gradcheck(lambda a, b: pcgeom.chamfer_distance(a, b, kind=kind, reduction="none"), (x, y))
    xl = torch.tensor([9, 4], device=device)
    yl = torch.tensor([3, 6], device=device)
    torch.autograd.gradcheck(
        lambda a, b: pcgeom.chamfer_distance(a, b, x_lengths=xl, y_lengths=yl, kind=kind), (x, y)
    )


def test_chamfer_l2_gradient_matches_bruteforce():
    x = random_cloud(1, 20, dtype=torch.float64, seed=9).requires_grad_()
    y = random_cloud(1, 15, dtype=torch.float64, seed=10).requires_grad_()
    pcgeom.chamfer_distance(x, y).backward()
    x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    d = ((x2[0, :, None] - y2[0, None]) ** 2).sum(-1)
    (d.min(1).values.mean() + d.min(0).values.mean()).backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(y.grad, y2.grad)


def test_chamfer_l1_gradient_finite_at_coincident_points():
    """sqrt at 0: the original extensions give NaN; here the gradient is 0 there and exact elsewhere."""
    x = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [3, 0, 0]]], dtype=torch.float64, requires_grad=True)
    loss = pcgeom.chamfer_distance(x, y, kind="l1")
    loss.backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()
    # x[2] -> nearest y is y[0] at distance 1 (unit direction (0, 1, 0)), weight 1/3 * 1/2
    torch.testing.assert_close(x.grad[0, 2], torch.tensor([0.0, 1 / 6, 0], dtype=torch.float64))
    # y[2] -> nearest x is x[1] at distance 2, direction (1, 0, 0)
    torch.testing.assert_close(y.grad[0, 2], torch.tensor([1 / 6, 0.0, 0], dtype=torch.float64))
    # coincident pairs (x[0], y[0]) and (x[1], y[1]) contribute exactly 0
    torch.testing.assert_close(x.grad[0, 0], torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(x.grad[0, 1], torch.tensor([-1 / 6, 0.0, 0], dtype=torch.float64))
    assert float(pcgeom.chamfer_distance(x.detach(), x.detach(), kind="l1")) == 0.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_chamfer_low_precision(device, dtype):
    x = random_cloud(2, 64, dtype=dtype, device=device, seed=11)
    y = random_cloud(2, 48, dtype=dtype, device=device, seed=12)
    got = pcgeom.chamfer_distance(x, y, reduction="none")
    assert got.dtype == dtype
    # Not one rounding of an exact value: each nearest squared distance is the float32 sum rounded to the dtype
    # (pcgeom.knn's contract), the means are float32 sums in torch's own order, and the result is rounded to the
    # dtype once more.  So: the float64 mean of those per-point distances to within the final rounding (half a unit
    # in the last place, < eps/2 relative) plus the float32 sums' error (~1e-5 relative here): < eps relative.
    def nearest(a, b):  # (N,) float32 squared distance to the nearest point of b, coordinate order
        diff = a.astype(np.float32)[:, None, :] - b.astype(np.float32)[None, :, :]
        d2 = np.zeros(diff.shape[:2], dtype=np.float32)
        for c in range(diff.shape[2]):
            d2 = d2 + diff[..., c] * diff[..., c]
        return torch.from_numpy(d2.min(1)).to(dtype).double()

    xs, ys = _np64(x), _np64(y)
    ref = torch.stack([nearest(xs[b], ys[b]).mean() + nearest(ys[b], xs[b]).mean() for b in range(2)])
    assert (got.cpu().double() - ref).abs().le(torch.finfo(dtype).eps * ref).all(), (got, ref)
    # and the exact float64 answer on the same inputs: two roundings to the dtype (per point, then the result),
    # each < eps/2 relative, plus the float32 sums' error
    np.testing.assert_allclose(_np64(got), brute_batch(x, y, "l2"), rtol=2 * torch.finfo(dtype).eps)


def test_chamfer_single_points_and_asymmetric_sizes(device):
    x = torch.tensor([[[1.0, 2, 3]]], device=device)
    y = torch.tensor([[[1.0, 2, 5], [0, 0, 0], [1, 2, 2]]], device=device)
    # x->y: 1 ; y->x: (4 + 14 + 1) / 3
    torch.testing.assert_close(pcgeom.chamfer_distance(x, y), torch.tensor(1 + 19 / 3, device=device))


def test_chamfer_errors():
    x = torch.rand(2, 10, 3)
    with pytest.raises(ValueError, match=r"chamfer_distance: y must have shape \(B, N, D\) with the B and D of x \(2, \*, 3\), got \(2, 10, 2\)"):
        pcgeom.chamfer_distance(x, torch.rand(2, 10, 2))
    with pytest.raises(TypeError, match="same dtype"):
        pcgeom.chamfer_distance(x, x.double())
    with pytest.raises(ValueError, match="kind must be 'l2' or 'l1', got 'l3'"):
        pcgeom.chamfer_distance(x, x, kind="l3")
    with pytest.raises(ValueError, match="reduction must be 'mean', 'sum' or 'none', got 'max'"):
        pcgeom.chamfer_distance(x, x, reduction="max")
    with pytest.raises(ValueError, match=r"x_lengths\[1\]=0"):
        pcgeom.chamfer_distance(x, x, x_lengths=torch.tensor([3, 0]))
    with pytest.raises(ValueError, match=r"y_lengths values must be in \[0, 10\]"):
        pcgeom.chamfer_distance(x, x, y_lengths=torch.tensor([3, 11]))
    with pytest.raises(ValueError, match="both clouds need at least one point"):
        pcgeom.chamfer_distance(x, torch.rand(2, 0, 3))
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, D\), got \(10, 3\)"):
        pcgeom.chamfer_distance(x[0], x[0])


def test_chamfer_compile_fullgraph(device):
    torch._dynamo.reset()
    x = random_cloud(2, 30, device=device, seed=13)
    y = random_cloud(2, 20, device=device, seed=14)
    yl = torch.tensor([20, 11], device=device)

    def f(a, b):
        return pcgeom.chamfer_distance(a, b, y_lengths=yl) + pcgeom.chamfer_distance(a, b, kind="l1", reduction="sum")

    x1, y1 = x.clone().requires_grad_(), y.clone().requires_grad_()
    x2, y2 = x.clone().requires_grad_(), y.clone().requires_grad_()
    a = f(x1, y1)
    a.backward()
    b = torch.compile(f, fullgraph=True, backend="aot_eager")(x2, y2)
    b.backward()
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(y1.grad, y2.grad)
