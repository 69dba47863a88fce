"""pytorch3d stand-in: normals / local frames, Umeyama alignment, ICP, ops.utils and transforms.

References are independent float64 brute forces in numpy: the biased covariance
of the K nearest points (the point included) and its eigen-decomposition; the
Umeyama closed form with pytorch3d's weighting.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pcgeom.compat.pytorch3d.ops import points_normals as pn
from pcgeom.compat.pytorch3d.ops.points_alignment import (
    SimilarityTransform,
    corresponding_points_alignment,
    iterative_closest_point,
)
from pcgeom.compat.pytorch3d.ops.points_normals import (
    estimate_pointcloud_local_coord_frames,
    estimate_pointcloud_normals,
)
from pcgeom.compat.pytorch3d.ops.utils import get_point_covariances, masked_gather, wmean
from pcgeom.compat.pytorch3d.structures import Pointclouds
from pcgeom.compat.pytorch3d.transforms import quaternion_to_matrix, random_rotations

pytestmark = pytest.mark.ops

F64 = torch.float64


def _knn_cov_np(x: np.ndarray, K: int):
    """Per point: the K nearest (itself included; random data has no ties) and their biased covariance."""
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    nn = np.argsort(d, axis=1, kind="stable")[:, :K]
    q = x[nn]
    c = q - q.mean(1, keepdims=True)
    return np.einsum("pki,pkj->pij", c, c) / K, q


def _ragged(seed, lengths, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, 3, generator=g, dtype=dtype) * torch.tensor([1.0, 0.6, 0.3], dtype=dtype)
            for n in lengths]


@pytest.mark.parametrize("K", [1, 4, 7, 16])
@pytest.mark.parametrize("disambiguate", [True, False])
def test_frames_equal_float64_brute_force_on_ragged_clouds(K, disambiguate):
    clouds = _ragged(0, [40, 17, 33])
    curv, frames = estimate_pointcloud_local_coord_frames(Pointclouds(clouds), K, disambiguate)
    assert curv.shape == (3, 40, 3) and frames.shape == (3, 40, 3, 3) and frames.dtype == F64
    for b, x in enumerate(clouds):
        n = len(x)
        cov, q = _knn_cov_np(x.numpy(), K)
        lam, vec = np.linalg.eigh(cov)
        np.testing.assert_allclose(curv[b, :n].numpy(), lam, rtol=0, atol=1e-13)
        f = frames[b, :n].numpy()
        if K >= 4:  # K <= 3 points span a plane at most: repeated eigenvalues, no unique directions
            dots = np.einsum("pci,pci->pi", f, vec)
            np.testing.assert_allclose(np.abs(dots), 1.0, rtol=0, atol=1e-9)
        np.testing.assert_allclose(np.einsum("pci,pcj->pij", f, f), np.broadcast_to(np.eye(3), (n, 3, 3)),
                                   rtol=0, atol=1e-12)
        if disambiguate:
            # SHOT: normal and last direction have >= K/2 offsets on their positive side; y = n x z.
            off = q - x.numpy()[:, None, :]
            for col in (0, 2):
                n_pos = (np.einsum("pkc,pc->pk", off, f[:, :, col]) > 0).sum(1)
                if K % 2 == 0:  # odd K can split evenly: then the solver's sign decides (tested below)
                    assert (n_pos >= K / 2).all()
            np.testing.assert_allclose(f[:, :, 1], np.cross(f[:, :, 0], f[:, :, 2]), rtol=0, atol=1e-12)
        else:
            # pytorch3d's closed-form solver builds the vector of the eigenvalue nearer the middle one as
            # the cross product of the other two: det +1 when l1 - l0 > l2 - l1, else -1 (columns (a x b, b, a))
            want = np.where(lam[:, 1] - lam[:, 0] > lam[:, 2] - lam[:, 1], 1.0, -1.0)
            np.testing.assert_allclose(np.linalg.det(f), want, rtol=0, atol=1e-12)
        assert (frames[b, n:] == 0).all() and (curv[b, n:] == 0).all()  # padded rows hold zeros


def test_normals_are_the_first_frame_column_and_tensor_equals_pointclouds():
    x = _ragged(1, [60])[0][None]
    for dis in (True, False):
        _, frames = estimate_pointcloud_local_coord_frames(x, 10, dis)
        n = estimate_pointcloud_normals(x, 10, dis)
        assert torch.equal(n, frames[..., 0])
        assert torch.equal(n, estimate_pointcloud_normals(Pointclouds([x[0]]), 10, dis))


def test_float32_within_float32_promises_and_far_from_origin():
    x = _ragged(2, [500])[0][None]
    ref = estimate_pointcloud_normals(x, 12)
    got = estimate_pointcloud_normals((x + 1000.0).float(), 12)  # the per-cloud mean is removed first
    assert got.dtype == torch.float32
    assert ((got.double() * ref).sum(-1) > 1 - 1e-6).float().mean() > 0.99


def test_planar_and_collinear_clouds():
    g = torch.Generator().manual_seed(3)
    xy = torch.rand(1, 200, 2, generator=g, dtype=F64)
    plane = torch.cat([xy, torch.zeros(1, 200, 1, dtype=F64)], 2)
    curv, frames = estimate_pointcloud_local_coord_frames(plane, 9)
    assert torch.equal(frames[..., 2, 0].abs(), torch.ones(1, 200, dtype=F64))
    assert curv[..., 0].abs().max() < 1e-16
    t = torch.rand(1, 50, 1, generator=g, dtype=F64)
    line = t * torch.tensor([1.0, 2.0, 2.0], dtype=F64) / 3
    n = estimate_pointcloud_normals(line, 5)
    assert torch.allclose(n.norm(dim=-1), torch.ones(1, 50, dtype=F64), atol=1e-12)
    assert (n @ torch.tensor([1.0, 2.0, 2.0], dtype=F64)).abs().max() < 1e-9  # orthogonal to the line


def test_symeig_signs_follow_the_closed_form_construction():
    # diag(1, 2, 4): the largest eigenvalue is the far one; the construction gives +e_z for it, its
    # basis u = -e_y, v = +e_x, then -e_y for the middle one and e_z x -e_y = +e_x for the smallest.
    cov = torch.diag(torch.tensor([1.0, 2.0, 4.0], dtype=F64))[None]
    lam, vec = torch.linalg.eigh(cov)
    signed = vec * pn._symeig3x3_signs(cov, lam, vec)[..., None, :]
    assert torch.equal(signed[0], torch.tensor([[1.0, 0, 0], [0, -1, 0], [0, 0, 1]], dtype=F64))
    # And the rule itself is invariant to the sign eigh happens to return.
    assert torch.equal(vec * pn._symeig3x3_signs(cov, lam, vec)[..., None, :],
                       -vec * pn._symeig3x3_signs(cov, lam, -vec)[..., None, :])


def test_odd_k_even_split_takes_the_flipped_solver_sign():
    # K = 3 on a square's corners: each neighbourhood is the point and its two adjacent corners,
    # whose offsets project 1 positive / 1 negative on the in-plane directions -> the rule flips
    # whatever the solver gave; with use_symeig_workaround=False that is eigh's sign.
    sq = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [1, 1.1, 0], [0, 1.1, 0]]], dtype=F64)
    _, fr = estimate_pointcloud_local_coord_frames(sq, 3, True, use_symeig_workaround=False)
    _, raw = estimate_pointcloud_local_coord_frames(sq, 3, False, use_symeig_workaround=False)
    off_sign = fr[..., 2] * raw[..., 2]
    assert torch.equal(off_sign.sum(-1).sign(), -torch.ones(1, 4, dtype=F64))


def test_normals_errors():
    x = torch.randn(2, 10, 3)
    with pytest.raises(ValueError, match="neighborhood_size"):
        estimate_pointcloud_normals(x, 10)  # pytorch3d requires more points than K
    with pytest.raises(ValueError, match="smallest has 4"):
        estimate_pointcloud_normals(Pointclouds([torch.randn(4, 3), torch.randn(9, 3)]), 5)
    with pytest.raises(ValueError, match="int >= 1, got 0"):
        estimate_pointcloud_normals(x, 0)
    with pytest.raises(ValueError, match=r"\(minibatch, N, 3\), got \(2, 10, 2\)"):
        estimate_pointcloud_normals(torch.randn(2, 10, 2), 3)


def test_normals_and_frames_gradcheck_float64():
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(1, 12, 3, generator=g, dtype=F64) * torch.tensor([1.0, 0.5, 0.2], dtype=F64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda p: estimate_pointcloud_normals(p, 6), (x,))
    assert torch.autograd.gradcheck(lambda p: estimate_pointcloud_local_coord_frames(p, 6), (x,))


def test_get_point_covariances_matches_brute_force_and_pads_like_upstream():
    x = _ragged(6, [20])[0][None]
    cov, knns = get_point_covariances(x, torch.tensor([20]), 5)
    ref, q = _knn_cov_np(x[0].numpy(), 5)
    np.testing.assert_allclose(cov[0].numpy(), ref, rtol=0, atol=1e-14)
    np.testing.assert_allclose(knns[0].numpy(), q, rtol=0, atol=0)
    # a cloud of 3 in a padded batch of 5, K = 4: slot 3 is 0; padded rows gather point 0 in slots < 3
    pts = torch.arange(15.0, dtype=F64).reshape(1, 5, 3)
    _, knns = get_point_covariances(pts, torch.tensor([3]), 4)
    assert (knns[0, :, 3] == 0).all()
    assert (knns[0, 3:, :3] == pts[0, 0]).all()


# ---- alignment -------------------------------------------------------------------------------


def _umeyama_np(X, Y, w, scale, reflect):
    """pytorch3d's weighting: centroids weighted by w, cross-covariance and variance by w**2."""
    w = np.ones(len(X)) if w is None else w
    W = w.sum() if w is not None else len(X)
    mx, my = (w[:, None] * X).sum(0) / W, (w[:, None] * Y).sum(0) / W
    xc, yc = w[:, None] * (X - mx), w[:, None] * (Y - my)
    C = xc.T @ yc / W
    U, S, Vt = np.linalg.svd(C)
    E = np.eye(X.shape[1])
    if not reflect:
        E[-1, -1] = np.linalg.det(U @ Vt)
    R = U @ E @ Vt
    s = (np.diag(E) * S).sum() / ((xc * xc).sum() / W) if scale else 1.0
    return R, my - s * mx @ R, s


@pytest.mark.parametrize("scale", [False, True])
@pytest.mark.parametrize("reflect", [False, True])
@pytest.mark.parametrize("dim", [2, 3, 5])
def test_alignment_equals_float64_umeyama_with_weights(scale, reflect, dim):
    g = torch.Generator().manual_seed(7)
    X = torch.randn(4, 30, dim, generator=g, dtype=F64)
    Y = torch.randn(4, 30, dim, generator=g, dtype=F64)
    w = torch.rand(4, 30, generator=g, dtype=F64)
    for weights in (None, w):
        R, T, s = corresponding_points_alignment(X, Y, weights, scale, reflect)
        for b in range(4):
            Rr, Tr, sr = _umeyama_np(X[b].numpy(), Y[b].numpy(), None if weights is None else w[b].numpy(),
                                     scale, reflect)
            np.testing.assert_allclose(R[b].numpy(), Rr, rtol=0, atol=1e-12)
            np.testing.assert_allclose(T[b].numpy(), Tr, rtol=0, atol=1e-12)
            np.testing.assert_allclose(float(s[b]), sr, rtol=0, atol=1e-12)


def test_alignment_recovers_a_similarity_exactly_and_masks_pointclouds_padding():
    torch.manual_seed(8)
    lengths = [9, 25, 14]
    X = [torch.randn(n, 3, dtype=F64) for n in lengths]
    R = random_rotations(3, dtype=F64)
    T = torch.randn(3, 3, dtype=F64)
    s = torch.rand(3, dtype=F64) + 0.5
    Y = [s[i] * X[i] @ R[i] + T[i] for i in range(3)]
    R_, T_, s_ = corresponding_points_alignment(Pointclouds(X), Pointclouds(Y), estimate_scale=True)
    assert torch.allclose(R_, R, atol=1e-13) and torch.allclose(T_, T, atol=1e-13) and torch.allclose(s_, s, atol=1e-13)
    w = [torch.rand(n, dtype=F64) for n in lengths]
    R_, T_, s_ = corresponding_points_alignment(Pointclouds(X), Pointclouds(Y), w, estimate_scale=True)
    assert torch.allclose(R_, R, atol=1e-13) and torch.allclose(s_, s, atol=1e-13)


def test_alignment_errors_and_warnings():
    X = torch.randn(2, 5, 3)
    with pytest.raises(ValueError, match="same number of batches, points and dimensions"):
        corresponding_points_alignment(X, torch.randn(2, 6, 3))
    with pytest.raises(ValueError, match=r"weights should have the same first two dimensions as X: expected \(2, 5\)"):
        corresponding_points_alignment(X, X, torch.ones(2, 4))
    with pytest.raises(ValueError, match="number of weights"):
        corresponding_points_alignment(X, X, [torch.ones(5), torch.ones(4)])
    with pytest.warns(UserWarning, match="<= dim\\+1"):
        corresponding_points_alignment(X[:, :3], X[:, :3])


def test_alignment_gradcheck_float64():
    g = torch.Generator().manual_seed(9)
    X = torch.randn(2, 8, 3, generator=g, dtype=F64, requires_grad=True)
    Y = (X.detach() @ random_rotations(2, dtype=F64) + 0.1 * torch.randn(2, 8, 3, generator=g, dtype=F64)).requires_grad_()
    w = torch.rand(2, 8, generator=g, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: tuple(corresponding_points_alignment(a, b, c, True)), (X, Y, w))


def test_icp_converges_to_the_exact_transform_float64():
    torch.manual_seed(10)
    X = torch.randn(2, 200, 3, dtype=F64)
    ang = torch.tensor(0.1, dtype=F64)
    Rz = torch.tensor([[ang.cos(), -ang.sin(), 0], [ang.sin(), ang.cos(), 0], [0, 0, 1]], dtype=F64)
    T = torch.tensor([0.05, -0.02, 0.03], dtype=F64)
    perm = torch.randperm(200)
    Y = (X @ Rz + T)[:, perm]
    sol = iterative_closest_point(X, Y, max_iterations=100, relative_rmse_thr=1e-12)
    assert sol.converged
    assert torch.allclose(sol.RTs.R, Rz.expand(2, 3, 3), atol=1e-12)
    assert torch.allclose(sol.RTs.T, T.expand(2, 3), atol=1e-12)
    assert torch.allclose(sol.Xt, X @ Rz + T, atol=1e-12) and sol.rmse.max() < 1e-12
    assert len(sol.t_history) >= 2 and isinstance(sol.t_history[0], SimilarityTransform)


def test_icp_pointclouds_equal_per_cloud_runs_and_bad_init():
    torch.manual_seed(11)
    X = [torch.randn(n, 3, dtype=F64) for n in (30, 50, 41)]
    Y = [x[: len(x) - 3] @ random_rotations(1, dtype=F64)[0] * 0.2 + 0.1 for x in X]  # other lengths
    sol = iterative_closest_point(Pointclouds(X), Pointclouds(Y), max_iterations=5)
    assert isinstance(sol.Xt, Pointclouds)
    for i in range(3):
        one = iterative_closest_point(X[i][None], Y[i][None], max_iterations=5)
        # batched runs all 5 iterations unless every cloud converges; compare at the same iteration count
        it = min(len(one.t_history), len(sol.t_history)) - 1
        assert torch.allclose(sol.t_history[it].R[i], one.t_history[it].R[0], atol=1e-12)
    with pytest.raises(ValueError, match="init_transform"):
        iterative_closest_point(X[0][None], Y[0][None], init_transform=SimilarityTransform(torch.eye(3), None, None))
    with pytest.raises(ValueError, match="same number of batches and data dimensions"):
        iterative_closest_point(torch.randn(1, 5, 3), torch.randn(2, 5, 3))


# ---- utils and transforms -----------------------------------------------------------------------


def test_masked_gather_and_wmean():
    pts = torch.arange(12.0).reshape(1, 4, 3)
    assert masked_gather(pts, torch.tensor([[3, -1, 0]])).tolist() == [[[9.0, 10, 11], [0, 0, 0], [0, 1, 2]]]
    assert masked_gather(pts, torch.tensor([[[1, -1]]])).shape == (1, 1, 2, 3)
    with pytest.raises(ValueError, match="same batch dimension"):
        masked_gather(pts, torch.zeros(2, 3, dtype=torch.long))
    x = torch.tensor([[[1.0, 2.0], [3.0, 6.0]]])
    assert wmean(x, torch.tensor([[1.0, 3.0]])).tolist() == [[[2.5, 5.0]]]
    assert wmean(x).tolist() == [[[2.0, 4.0]]]
    with pytest.raises(ValueError, match="not compatible"):
        wmean(x, torch.ones(1, 3))


def test_rotations():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        R = random_rotations(64, dtype=F64)
    assert torch.allclose(R @ R.transpose(1, 2), torch.eye(3, dtype=F64).expand(64, 3, 3), atol=1e-14)
    assert torch.allclose(torch.det(R), torch.ones(64, dtype=F64), atol=1e-14)
    c, s = np.cos(0.3), np.sin(0.3)  # 0.6 rad about x: q = (cos 0.3, sin 0.3, 0, 0)
    Rx = quaternion_to_matrix(torch.tensor([c, s, 0.0, 0.0], dtype=F64))
    a = 0.6
    assert torch.allclose(Rx, torch.tensor([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]],
                                           dtype=F64), atol=1e-15)
    with pytest.raises(ImportError, match="Transform3d"):
        from pcgeom.compat.pytorch3d.transforms import Transform3d  # noqa: F401
