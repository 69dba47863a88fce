"""pcgeom.group_features / fill_missing / interpolate_features against float64 references."""

import numpy as np
import pytest
import torch

import pcgeom
from conftest import random_cloud


def _group_oracle(points, centers, idx, features):
    p, c, i = points.double().numpy(), centers.double().numpy(), idx.numpy()
    B, S, k = i.shape
    D = p.shape[2]
    C = 0 if features is None else features.shape[2]
    out = np.zeros((B, S, k, D + C))
    for b in range(B):
        for s in range(S):
            for j in range(k):
                if i[b, s, j] >= 0:
                    out[b, s, j, :D] = p[b, i[b, s, j]] - c[b, s]
                    if C:
                        out[b, s, j, D:] = features[b, i[b, s, j]].double().numpy()
    return out


def test_group_features_matches_oracle_with_padding():
    pts = random_cloud(2, 50, seed=1)
    ctr = pts[:, :7].clone()
    ctr[1, 3] += 10.0  # an empty ball
    feats = random_cloud(2, 50, 5, seed=2)
    idx = pcgeom.ball_query(ctr, pts, 0.25, 16, order="index").idx
    assert (idx[1, 3] == -1).all() and (idx == -1).any()
    got = pcgeom.group_features(pts, ctr, idx, feats)
    assert got.shape == (2, 7, 16, 8) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), _group_oracle(pts, ctr, idx, feats), rtol=0, atol=1e-6)
    assert torch.equal(pcgeom.group_features(pts, ctr, idx), got[..., :3])
    assert torch.equal(pcgeom.group_features(pts, ctr, idx, feats, use_points=False), got[..., 3:])


def test_fill_missing():
    idx = torch.tensor([[[4, 7, -1, -1], [-1, -1, -1, -1], [1, 2, 3, 0]]])
    assert pcgeom.fill_missing(idx).tolist() == [[[4, 7, 4, 4], [-1, -1, -1, -1], [1, 2, 3, 0]]]
    with pytest.raises(TypeError, match="fill_missing: idx must be int64, got torch.int32"):
        pcgeom.fill_missing(idx.int())


def test_group_features_gradcheck():
    pts = random_cloud(1, 12, dtype=torch.float64, seed=3).requires_grad_()
    ctr = random_cloud(1, 3, dtype=torch.float64, seed=4).requires_grad_()
    feats = random_cloud(1, 12, 2, dtype=torch.float64, seed=5).requires_grad_()
    idx = pcgeom.fill_missing(pcgeom.ball_query(ctr.detach(), pts.detach(), 0.6, 5, order="index").idx)
    assert torch.autograd.gradcheck(lambda a, b, c: pcgeom.group_features(a, b, idx, c), (pts, ctr, feats))


def _interp_oracle(q, p, f, k, eps, pl=None):
    qn, pn, fn = q.double().numpy(), p.double().numpy(), f.double().numpy()
    B, M = qn.shape[:2]
    out = np.zeros((B, M, fn.shape[2]))
    for b in range(B):
        L = pn.shape[1] if pl is None else int(pl[b])
        if L == 0:
            continue
        d2 = ((qn[b][:, None] - pn[b, :L][None]) ** 2).sum(-1)
        order = np.argsort(d2, axis=1, kind="stable")[:, :k]
        w = 1.0 / (np.sqrt(np.take_along_axis(d2, order, 1)) + eps)
        w = w / w.sum(1, keepdims=True)
        out[b] = (fn[b][order] * w[..., None]).sum(1)
    return out


@pytest.mark.parametrize("k", [1, 3, 8])
def test_interpolate_matches_oracle(device, k):
    q = random_cloud(2, 40, seed=6, device=device)
    p = random_cloud(2, 25, seed=7, device=device)
    f = random_cloud(2, 25, 4, seed=8, device=device)
    got = pcgeom.interpolate_features(q, p, f, k)
    np.testing.assert_allclose(got.cpu().numpy(), _interp_oracle(q.cpu(), p.cpu(), f.cpu(), k, 1e-8), rtol=1e-5, atol=1e-6)


def test_interpolate_ragged_fewer_points_than_k_and_exact_hits():
    q = random_cloud(3, 10, seed=9)
    p = random_cloud(3, 6, seed=10)
    q[0, 0] = p[0, 2]  # exact hit: (almost) exactly that point's features
    f = random_cloud(3, 6, 2, seed=11)
    pl = torch.tensor([6, 2, 0])
    got = pcgeom.interpolate_features(q, p, f, 3, points_lengths=pl)
    np.testing.assert_allclose(got.numpy(), _interp_oracle(q, p, f, 3, 1e-8, pl), rtol=1e-5, atol=1e-6)
    assert torch.allclose(got[0, 0], f[0, 2], atol=1e-6)
    assert (got[2] == 0).all()


def test_interpolate_gradients():
    q = random_cloud(1, 6, dtype=torch.float64, seed=12).requires_grad_()
    p = random_cloud(1, 9, dtype=torch.float64, seed=13).requires_grad_()
    f = random_cloud(1, 9, 3, dtype=torch.float64, seed=14).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b, c: pcgeom.interpolate_features(a, b, c, 3, eps=1e-3), (q, p, f))
    # an exact hit: finite gradients (no 0 * inf)
    q2 = p.detach()[:, :2].clone().requires_grad_()
    pcgeom.interpolate_features(q2, p, f, 3).sum().backward()
    assert torch.isfinite(q2.grad).all() and torch.isfinite(p.grad).all()


@pytest.mark.slow
def test_compile_fullgraph():
    q, p = random_cloud(2, 16, seed=15), random_cloud(2, 20, seed=16)
    f = random_cloud(2, 20, 3, seed=17)

    def layer(q, p, f):
        idx = pcgeom.fill_missing(pcgeom.ball_query(q, p, 0.4, 8, order="index").idx)
        g = pcgeom.group_features(p, q, idx, f)
        return g.amax(dim=2), pcgeom.interpolate_features(q, p, f, 3)

    got = torch.compile(layer, fullgraph=True)(q, p, f)
    want = layer(q, p, f)
    assert all(torch.allclose(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda p, c, i, f: pcgeom.group_features(p, c, i[:, :2], f), ValueError, r"group_features: idx must have shape \(B, S, k\) = \(2, 4, k\)"),
        (lambda p, c, i, f: pcgeom.group_features(p, c, i.int(), f), TypeError, r"group_features: idx must be int64"),
        (lambda p, c, i, f: pcgeom.group_features(p, c, i, f[:, :3]), ValueError, r"group_features: features must have shape \(B, N, C\) = \(2, 10, C\)"),
        (lambda p, c, i, f: pcgeom.group_features(p, c, i, None, use_points=False), ValueError, r"use_points=False needs features"),
        (lambda p, c, i, f: pcgeom.interpolate_features(c, p, f, 0), ValueError, r"interpolate_features: k must be >= 1"),
        (lambda p, c, i, f: pcgeom.interpolate_features(c, p, f.double()), TypeError, r"interpolate_features: features must have the dtype"),
        (lambda p, c, i, f: pcgeom.interpolate_features(c, p, f, eps=0.0), ValueError, r"eps must be > 0"),
    ],
)
def test_errors_name_the_argument(call, exc, match):
    p = random_cloud(2, 10, seed=18)
    c = p[:, :4]
    f = random_cloud(2, 10, 2, seed=19)
    i = pcgeom.ball_query(c, p, 0.5, 3, order="index").idx
    with pytest.raises(exc, match=match):
        call(p, c, i, f)
