"""pcgeom.estimate_normals and pcgeom.ops.pca_normals against independent float64 references.

The reference here is numpy only: brute-force neighbours (ties to the lower
index) and ``numpy.linalg.eigh`` per neighbourhood.  Signs are compared after
applying the documented rule, so a wrong sign rule fails as well.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcgeom
from pcgeom.ops import pca_normals
from pcgeom.ops.reference import pca_normals_reference

pytestmark = pytest.mark.ops


def _np_knn(p, k):
    d = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
    n = len(p)
    order = np.lexsort((np.broadcast_to(np.arange(n), d.shape), d), axis=1)
    return order[:, : min(k, n)]


def _sign(n):
    big = np.argmax(np.abs(n))
    return n if n[big] >= 0 else -n


def _np_normals(p, k):
    """(normals, curvature) per point of one finite cloud ``p (n, 3)`` float64."""
    p = np.asarray(p, dtype=np.float64)
    idx = _np_knn(p, k)
    normals, curv = np.zeros((len(p), 3)), np.zeros(len(p))
    for i, nb in enumerate(idx):
        q = p[nb] - p[nb].mean(0)
        lam, vec = np.linalg.eigh(q.T @ q / len(nb))
        lam = np.maximum(lam, 0)
        if lam[2] == 0:  # one position: the documented (0, 0, 1)
            normals[i] = (0, 0, 1)
            continue
        if lam[1] <= 64 * np.finfo(np.float64).eps * lam[2]:  # a line: perpendicular, away from its main axes
            e = np.zeros(3)
            e[np.argmin(np.abs(vec[:, 2]))] = 1
            n = np.cross(vec[:, 2], e)
            normals[i] = _sign(n / np.linalg.norm(n))
        else:
            normals[i] = _sign(vec[:, 0])
        curv[i] = lam[0] / lam.sum()
    return normals, curv


def _noisy_surface(n, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, 2, generator=g, dtype=torch.float64) * 2 - 1
    z = 0.3 * torch.sin(2 * u[:, 0]) + 0.2 * u[:, 1] ** 2 + 0.01 * torch.randn(n, generator=g, dtype=torch.float64)
    return torch.cat([u, z[:, None]], 1).to(dtype)


def _check(normals, curvature, ref_n, ref_c, atol=1e-6):
    normals, curvature = normals.double().numpy(), curvature.double().numpy()
    err = np.abs(normals - ref_n).max()
    assert err < atol, f"normals differ by {err}"
    assert np.abs(curvature - ref_c).max() < atol


def test_padded_ragged_batch_matches_numpy_eigh():
    clouds = [_noisy_surface(300, 1), _noisy_surface(123, 2), _noisy_surface(7, 3)]
    lengths = torch.tensor([len(c) for c in clouds])
    padded = torch.zeros(3, 300, 3, dtype=torch.float64)
    for b, c in enumerate(clouds):
        padded[b, : len(c)] = c
    padded[1, 123:] = 1e6  # padding rows must never be read
    n, c = pcgeom.estimate_normals(padded, k=16, lengths=lengths)
    assert n.shape == (3, 300, 3) and c.shape == (3, 300) and n.dtype == torch.float64
    for b, cloud in enumerate(clouds):
        rn, rc = _np_normals(cloud.numpy(), 16)  # the third cloud is smaller than k: all 7 points
        _check(n[b, : len(cloud)], c[b, : len(cloud)], rn, rc)
        assert (n[b, len(cloud):] == 0).all() and (c[b, len(cloud):] == 0).all()


def test_packed_equals_per_cloud_with_duplicates():
    a, b = _noisy_surface(200, 4), _noisy_surface(150, 5)
    b[10:20] = b[0]  # ten exact duplicates of one point
    packed = torch.cat([a, b])
    n, c = pcgeom.estimate_normals(packed, k=12, offsets=torch.tensor([200, 350]))
    assert n.shape == (350, 3)
    for cloud, rows in ((a, slice(0, 200)), (b, slice(200, 350))):
        rn, rc = _np_normals(cloud.numpy(), 12)
        _check(n[rows], c[rows], rn, rc)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_accumulates_in_float32(dtype):
    p = _noisy_surface(400, 6)
    ref, _ = pcgeom.estimate_normals(p, k=20)
    n, c = pcgeom.estimate_normals(p.to(dtype), k=20)
    assert n.dtype == dtype and c.dtype == dtype
    cos = (n.double() * ref).sum(-1).abs()
    # float16/bfloat16 inputs are rounded coordinates; the normals of that rounded cloud stay close.
    assert cos.min() > (0.9999 if dtype == torch.float32 else 0.97)
    assert torch.isfinite(n).all()


def test_plane_is_exact_and_flat():
    g = torch.Generator().manual_seed(7)
    xy = torch.rand(500, 2, generator=g, dtype=torch.float64) * 4
    p = torch.cat([xy, (0.25 * xy[:, 0] - 0.5 * xy[:, 1] + 3)[:, None]], 1)  # z = x/4 - y/2 + 3
    n, c = pcgeom.estimate_normals(p, k=10)
    want = torch.tensor([-0.25, 0.5, 1.0], dtype=torch.float64)
    want = want / want.norm()  # largest component (z) positive: the sign rule
    torch.testing.assert_close(n, want.expand_as(n), atol=1e-12, rtol=0)
    assert float(c.max()) < 1e-14  # the coordinates are rounded: flat to float64 precision


def test_collinear_and_single_position_are_finite_and_documented():
    t = torch.linspace(-1, 1, 20, dtype=torch.float64)[:, None]
    d = torch.tensor([[0.6, 0.0, 0.8]], dtype=torch.float64)
    line = t * d + torch.tensor([1.0, 2, 3], dtype=torch.float64)
    n, c = pcgeom.estimate_normals(line, k=5)
    # The axis least aligned with the line is y: normal = cross(d, e_y), largest component positive.
    want = torch.linalg.cross(d, torch.tensor([[0.0, 1, 0]], dtype=torch.float64))
    want = _sign(want[0].numpy())
    torch.testing.assert_close(n, torch.as_tensor(want).expand_as(n), atol=1e-12, rtol=0)
    assert (c.abs() < 1e-12).all()
    same = torch.full((4, 3), 2.5, dtype=torch.float32)
    for cloud in (same, same[:1]):
        n, c = pcgeom.estimate_normals(cloud, k=3)
        assert (n == torch.tensor([0.0, 0.0, 1.0])).all() and (c == 0).all()
    n, c = pcgeom.estimate_normals(torch.tensor([[0.0, 0, 0], [1, 0, 0]]), k=30)  # two points: a line
    assert torch.isfinite(n).all() and torch.allclose(n.norm(dim=1), torch.ones(2))
    assert (n[:, 0].abs() < 1e-7).all()


def test_nan_and_inf_points():
    p = _noisy_surface(120, 8)
    bad = p.clone()
    bad[5] = float("nan")
    bad[17, 1] = float("inf")
    bad[60, 2] = -float("inf")
    n, c = pcgeom.estimate_normals(bad, k=10)
    finite = torch.isfinite(bad).all(1)
    assert torch.isnan(n[~finite]).all() and torch.isnan(c[~finite]).all()
    rn, rc = _np_normals(p[finite].numpy(), 10)  # finite points never see the bad ones
    _check(n[finite], c[finite], rn, rc)


def test_viewpoint_and_direction_orientation():
    g = torch.Generator().manual_seed(9)
    v = torch.randn(2, 400, 3, generator=g, dtype=torch.float64)
    sphere = v / v.norm(dim=-1, keepdim=True)
    sphere[1] += torch.tensor([5.0, 0, 0], dtype=torch.float64)
    centres = torch.tensor([[0.0, 0, 0], [5.0, 0, 0]], dtype=torch.float64)
    n_out, _ = pcgeom.estimate_normals(sphere, k=12, viewpoint=centres)
    radial = sphere - centres[:, None]
    # Oriented towards the centre of each sphere: inward, per cloud (PCA normals are nearly radial).
    assert ((n_out * radial).sum(-1) < -0.9).all()
    n_dir, _ = pcgeom.estimate_normals(sphere, k=12, direction=[0.0, 0.0, -1.0])
    assert ((n_dir[..., 2]) <= 0).all()
    n_def, _ = pcgeom.estimate_normals(sphere, k=12)
    torch.testing.assert_close(n_dir.abs(), n_def.abs())


def test_orientation_matches_open3d():
    o3d = pytest.importorskip("open3d")
    p = _noisy_surface(600, 10)
    pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(p.numpy()))
    pc.estimate_normals(o3d.geometry.KDTreeSearchParamKNN(knn=15))
    cam = np.array([0.3, -0.2, 4.0])
    pc.orient_normals_towards_camera_location(cam)
    ours, _ = pcgeom.estimate_normals(p, k=15, viewpoint=cam.tolist())
    theirs = torch.from_numpy(np.asarray(pc.normals))
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_kernel_agrees_with_reference_and_opcheck():
    p = torch.cat([_noisy_surface(90, 11)[None], _noisy_surface(90, 12)[None]]).float()
    idx = pcgeom.knn(p, p, 9).idx
    idx[0, :5, 4:] = -1  # padded neighbour slots
    n, c = pca_normals(p, idx)
    rn, rc = pca_normals_reference(p, idx)
    torch.testing.assert_close(n, rn, atol=2e-5, rtol=0)
    torch.testing.assert_close(c, rc, atol=1e-6, rtol=0)
    torch.library.opcheck(torch.ops.pcgeom.pca_normals.default, (p.double(), idx))


def test_empty_shapes():
    p = torch.rand(2, 10, 3)
    n, c = pca_normals(p, torch.zeros(2, 0, 4, dtype=torch.int64))
    assert n.shape == (2, 0, 3) and c.shape == (2, 0)
    n, c = pca_normals(p, torch.zeros(2, 3, 0, dtype=torch.int64))  # no neighbour slots
    assert (n == torch.tensor([0.0, 0.0, 1.0])).all() and (c == 0).all()
    n, c = pca_normals(torch.rand(2, 0, 3), torch.full((2, 3, 4), -1))  # empty clouds
    assert (n == torch.tensor([0.0, 0.0, 1.0])).all() and (c == 0).all()
    n, c = pcgeom.estimate_normals(torch.rand(0, 3), k=5)
    assert n.shape == (0, 3) and c.shape == (0,)
    n, c = pcgeom.estimate_normals(torch.rand(2, 6, 3), k=5, lengths=torch.tensor([0, 6]))
    assert (n[0] == 0).all() and torch.isfinite(n).all()


def test_gradcheck_float64():
    p = _noisy_surface(40, 13).requires_grad_(True)
    idx = pcgeom.knn(p.detach()[None], p.detach()[None], 8).idx

    def f(x):
        n, c = pca_normals(x[None], idx)
        return n, c

    assert torch.autograd.gradcheck(f, (p,), eps=1e-6, atol=1e-5)

    def g(x):  # through estimate_normals, oriented (the neighbour sets do not change under eps)
        return pcgeom.estimate_normals(x, k=8, viewpoint=[0.0, 0.0, 5.0])

    assert torch.autograd.gradcheck(g, (p,), eps=1e-6, atol=1e-5)


def test_bad_inputs_are_named():
    p = torch.rand(2, 10, 3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        pcgeom.estimate_normals(p, k=0)
    with pytest.raises(TypeError, match="k must be an int"):
        pcgeom.estimate_normals(p, k=2.5)
    with pytest.raises(ValueError, match=r"points must have shape \(B, N, 3\)"):
        pcgeom.estimate_normals(torch.rand(2, 10, 2))
    with pytest.raises(ValueError, match=r"points must have shape"):
        pcgeom.estimate_normals(torch.rand(10))
    with pytest.raises(TypeError, match="points must be float16, bfloat16, float32 or float64"):
        pcgeom.estimate_normals(torch.ones(2, 10, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="not both"):
        pcgeom.estimate_normals(p, viewpoint=[0, 0, 1], direction=[0, 0, 1])
    with pytest.raises(ValueError, match=r"viewpoint must have shape \(3,\) or \(2, 3\)"):
        pcgeom.estimate_normals(p, viewpoint=[0, 1])
    with pytest.raises(ValueError, match="offsets= is for packed"):
        pcgeom.estimate_normals(p, offsets=torch.tensor([10, 20]))
    with pytest.raises(ValueError, match="lengths values must be in"):
        pcgeom.estimate_normals(p, lengths=torch.tensor([11, 3]))
    with pytest.raises(ValueError, match=r"idx values must be in \[-1, 10\)"):
        pca_normals(p, torch.full((2, 4, 3), 10))
    with pytest.raises(TypeError, match="idx must be int64"):
        pca_normals(p, torch.zeros(2, 4, 3, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="idx values must be in"):
        torch.ops.pcgeom.pca_normals(p, torch.full((2, 4, 3), -2))
    with pytest.raises(RuntimeError, match=r"points must have shape \(B, N, 3\)"):
        torch.ops.pcgeom.pca_normals(torch.rand(2, 10, 4), torch.zeros(2, 4, 3, dtype=torch.int64))


@pytest.mark.parametrize("case", ["points_rank", "idx_rank", "points_d", "points_int", "idx_int32", "batch", "idx_low", "idx_high"])
def test_raw_op_rejects_bad_inputs(case):
    # Direct torch.ops calls skip the wrapper: the kernel (or the reference) must still refuse.
    p, idx = torch.rand(2, 10, 3), torch.zeros(2, 4, 3, dtype=torch.int64)
    args = {
        "points_rank": (torch.rand(10, 3), idx), "idx_rank": (p, idx[0]), "points_d": (torch.rand(2, 10, 4), idx),
        "points_int": (torch.ones(2, 10, 3, dtype=torch.int32), idx), "idx_int32": (p, idx.int()),
        "batch": (p, idx[:1]), "idx_low": (p, idx - 2), "idx_high": (p, idx + 10),
    }[case]
    with pytest.raises(RuntimeError, match="pca_normals: "):
        torch.ops.pcgeom.pca_normals(*args)


# --------------------------------------------------------------------------- round-off at the degenerate cases


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("path", ["op", "reference"])
def test_repeated_position_is_up_not_a_rounding_line(dtype, path):
    """k copies of one position: the float mean of equal copies can be an ulp
    off, which once left a rank-one covariance along (1, 1, 1) and the
    collinear answer (0, 0.7071, -0.7071) instead of the documented (0, 0, 1)."""
    f = pca_normals if path == "op" else pca_normals_reference
    g = torch.Generator().manual_seed(3)
    pos = torch.randn(600, 3, generator=g, dtype=torch.float64).to(dtype)
    up = torch.tensor([0.0, 0.0, 1.0], dtype=dtype)
    for k in (2, 3, 5, 7, 10, 13):
        pts = pos[:, None, :].expand(-1, k, -1).reshape(1, -1, 3)
        idx = torch.arange(pts.shape[1]).reshape(1, -1, k)
        idx[0, ::4, 0] = -1  # padding slots do not change "one position"
        n, c = f(pts, idx)
        assert (n[0] == up).all(), (k, int((n[0] != up).any(1).sum()))
        assert (c == 0).all()
    n, c = pcgeom.estimate_normals(torch.full((50, 3), 0.3, dtype=dtype), 10)
    assert (n == up).all() and (c == 0).all()


def _sign_rule_broken(n):
    """Rows whose largest-magnitude component (lowest axis on equal magnitudes) is negative."""
    a = n.double()
    big = a.abs().argmax(-1, keepdim=True)  # torch.argmax: the first maximum, i.e. the lowest axis
    return (a.gather(-1, big) < 0).squeeze(-1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("path", ["op", "reference"])
def test_half_precision_normals_follow_the_sign_rule_after_rounding(dtype, path):
    """Two components that differ in float32 can round to the same float16/
    bfloat16 magnitude; the rule is judged on the stored values (about one
    row in 1,500 of these random neighbourhoods, seeds chosen to hit it)."""
    f = pca_normals if path == "op" else pca_normals_reference
    ties = 0
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        pts = torch.randn(1, 4000, 3, generator=g).to(dtype)
        idx = torch.randint(0, 4000, (1, 4000, 6), generator=g)
        n, _ = f(pts, idx)
        assert not _sign_rule_broken(n).any(), (seed, n[_sign_rule_broken(n)].tolist())
        top = n.double().abs().sort(-1, descending=True).values
        ties += int((top[..., 0] == top[..., 1]).sum())
        # Otherwise unchanged: the float32-accumulated normal, rounded, up to the sign.
        n32, _ = f(pts.float(), idx)
        same = (n == n32.to(dtype)).all(-1) | (n == -n32.to(dtype)).all(-1)
        assert same.all()
    assert ties > 0  # the data does reach the rounded tie


# -- Extreme scales (float32 coordinates near 1e+-38, subnormal ones; half precision at its own extremes).
# The truth is the float64 brute force on the very coordinates the low-precision cloud holds.

_SCALES = {  # dtype: scales whose clouds are representable (not inf, not collapsed to 0) in that dtype
    torch.float32: [1e30, 1e-25, 1e38, 3e38, 1e-38, 1e-40, 2.0**-140],
    torch.bfloat16: [1e30, 1e-25, 1e38, 1e-38, 2.0**-128],
    torch.float16: [3e4, 60000.0, 1e-4, 2.0**-17],
    torch.float64: [1e200, 1e307, 1e-200, 1e-310],  # float64's own squares overflow / underflow too
}


def _shape(kind, n, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "sphere":
        x = torch.randn(n, 3, generator=g, dtype=torch.float64)
        return x / x.norm(dim=1, keepdim=True)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * 2 - 1
    return torch.cat([xy, 0.5 * xy[:, :1] - 0.25 * xy[:, 1:]], 1)  # the plane z = x/2 - y/4


def _angle_off(n, ref):
    """Per row, the angle in degrees between two unoriented normals (NaN rows count as 180).

    Directions only: a float16/bfloat16 normal rounded per component is up to ~0.4% off unit length,
    which read as a cosine would be ~5 degrees."""
    n, ref = torch.as_tensor(n).double(), torch.as_tensor(ref).double()
    cos = ((n / n.norm(dim=-1, keepdim=True)) * (ref / ref.norm(dim=-1, keepdim=True))).sum(-1).abs().clamp(max=1)
    return torch.nan_to_num(torch.rad2deg(torch.arccos(cos)), nan=180.0)


@pytest.mark.parametrize("kind", ["sphere", "plane"])
@pytest.mark.parametrize("dtype,scale", [(d, s) for d, ss in _SCALES.items() for s in ss])
def test_extreme_scales_answer_as_float64_does(kind, dtype, scale):
    # A float32 sphere * 1e30 had 1,490 of 1,500 normals more than 10 degrees off (overflowing squared
    # distances tie at inf, so the neighbours were chosen by index), 1,480 at * 1e-25 (underflow to 0),
    # and near 1e38 / at subnormal scales the PCA itself overflowed (the mean's sum) or underflowed.
    x = _shape(kind, 400, 1)
    p = (x * scale).to(dtype)
    p64 = p.double()
    assert torch.isfinite(p).all() and len(torch.unique(p64, dim=0)) > 300  # the test's premise
    n, c = pcgeom.estimate_normals(p, k=12)
    assert n.dtype == dtype and torch.isfinite(n).all() and torch.isfinite(c).all()
    # The float64 brute force of the same stored coordinates, rescaled by a power of two (exact) so that its
    # own float64 squares stay in range; normals and curvature do not depend on the scale.
    e = int(np.frexp(float(p64.abs().max()))[1])
    rn, rc = _np_normals(np.ldexp(p64.numpy(), -e), 12)
    off = _angle_off(n, rn)
    # Same neighbours as the float64 brute force; the rest is rounding (measured: at most 0.02 degrees in
    # float32, 0.15 in bfloat16, whose stored normal holds 8 bits per component).
    small = {torch.float32: 0.5, torch.float64: 1e-4}.get(dtype, 1.0)
    assert int((off > small).sum()) == 0, (int((off > small).sum()), float(off.max()))
    # And the answer is the one the same cloud gets at scale 1 (the power of two nearest the scale; exact).
    p1 = torch.from_numpy(np.ldexp(p64.numpy(), -e)).to(dtype)
    n1, c1 = pcgeom.estimate_normals(p1, k=12)
    assert torch.equal(n, n1) and torch.equal(c, c1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale_exp", [-110, -60, 0, 60, 126])
@pytest.mark.parametrize("path", ["op", "reference"])
def test_pca_normals_is_scale_free_for_powers_of_two(dtype, scale_exp, path):
    # The covariance step on its own, on the float64 brute force's neighbour sets: the mean's sum of k
    # coordinates near 1e38 overflowed float32, and 1 / the spread of subnormal ones did.  A power-of-two
    # scale must give the same bits as scale 1, and the gradient must scale by its inverse.
    f = pca_normals if path == "op" else pca_normals_reference
    if dtype == torch.float64:
        scale_exp *= 7  # float64's extremes: 2**-770 .. 2**882
    x = _noisy_surface(60, 21)
    idx = torch.from_numpy(_np_knn(x.numpy(), 9))[None]
    base = x.to(dtype)[None]
    scaled = base * 2.0 ** (scale_exp // 2) * 2.0 ** (scale_exp - scale_exp // 2)
    assert torch.equal(scaled.double() * 2.0 ** -(scale_exp // 2) * 2.0 ** -(scale_exp - scale_exp // 2),
                       base.double())  # exact (no subnormal): the premise
    n1, c1 = f(base, idx)
    n, c = f(scaled, idx)
    torch.testing.assert_close(n, n1, rtol=0, atol=0)
    torch.testing.assert_close(c, c1, rtol=0, atol=0)
    rn, rc = _np_normals(x.to(dtype).double().numpy(), 9)
    # (arccos near 1 resolves no better than ~1e-6 degrees in float64)
    assert float(_angle_off(n[0], rn).max()) < (1e-3 if dtype == torch.float32 else 1e-5)
    if path == "op":
        w = torch.randn(1, 60, 3, generator=torch.Generator().manual_seed(3), dtype=dtype)
        g1 = torch.autograd.grad(((f(base.requires_grad_(), idx).normals * w).sum()
                                  + f(base, idx).curvature.sum()), base)[0]
        s = scaled.detach().requires_grad_()
        gs = torch.autograd.grad(((f(s, idx).normals * w).sum() + f(s, idx).curvature.sum()), s)[0]
        assert torch.isfinite(gs).all()
        # n(s p) = n(p), so the gradient at s p is the gradient at p over s (a power of two: exact)
        back = gs.double() * 2.0 ** (scale_exp // 2) * 2.0 ** (scale_exp - scale_exp // 2)
        # Bit for bit, but for gradients the scale pushed into the subnormal range (a few quanta each).
        quantum = 2.0 ** ((-140 if dtype == torch.float32 else -1060) + scale_exp)
        torch.testing.assert_close(back, g1.double(), rtol=0, atol=quantum)
