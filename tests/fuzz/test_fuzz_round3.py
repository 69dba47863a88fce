"""Fuzz round 3: the public names ``scripts/fuzz_coverage.py`` found without a fuzz test.

pointnet2's modules (set abstraction, multi-scale, feature propagation, the shared MLP) against a float64
brute force that groups by hand and applies the module's own weights; pointops_cuda's entry points
that serve both POSTECH's and PointWeb's signature (knnquery, furthestsampling, grouping and
interpolation backward) and ``labelstat_and_ballquery_cuda``; pointops' ``interpolation2``;
Point-MAE's ``fps``; ``pcgeom.backend_info``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("hypothesis")
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pcgeom  # noqa: E402
from pcgeom.compat import point_mae, pointnet2_modules, pointops, pointops_cuda  # noqa: E402
from tests.fuzz.strategies import clouds, fuzz, make_points, packed_clouds  # noqa: E402
from tests.fuzz.test_fuzz_round2 import _pointnet2_fps_kernel  # noqa: E402
from tests.oracle import fps_oracle_acc, knn_oracle_acc, sq_dist_acc  # noqa: E402

EXACT_KINDS = ["lattice", "repeated", "few_distinct", "collinear", "planar"]


def _ball_first_hits(p32: np.ndarray, q32: np.ndarray, radius: float, ns: int) -> np.ndarray:
    """pointnet2's ball query for one centre: the first ``ns`` indices with float32 ``d2 < r**2``, padded
    with the first hit (0 when there is none)."""
    with np.errstate(invalid="ignore"):
        hits = np.flatnonzero(sq_dist_acc(p32, q32) < np.float32(radius) * np.float32(radius))[:ns]
    return np.zeros(ns, np.int64) if len(hits) == 0 else np.concatenate([hits, np.full(ns - len(hits), hits[0])])


def _mlp_oracle(mlp: torch.nn.Sequential, g: np.ndarray) -> np.ndarray:
    """``g (C, ...)`` through the shared MLP in float64 by hand: 1x1 convolution, eval-mode batch norm, ReLU."""
    for layer in mlp:
        if isinstance(layer, torch.nn.Conv2d):
            w = layer.weight.detach().double().numpy()[:, :, 0, 0]
            g = np.tensordot(w, g, axes=(1, 0))
            if layer.bias is not None:
                g = g + layer.bias.detach().double().numpy().reshape((-1,) + (1,) * (g.ndim - 1))
        elif isinstance(layer, torch.nn.BatchNorm2d):
            sh = (-1,) + (1,) * (g.ndim - 1)
            mean, var = layer.running_mean.double().numpy(), layer.running_var.double().numpy()
            gamma, beta = layer.weight.detach().double().numpy(), layer.bias.detach().double().numpy()
            g = (g - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + layer.eps) * gamma.reshape(sh) + beta.reshape(sh)
        else:
            assert isinstance(layer, torch.nn.ReLU)
            g = np.maximum(g, 0.0)
    return g


def _check_mlp_layout(mlp, spec, bn):
    kinds = [type(m).__name__ for m in mlp]
    assert kinds == (["Conv2d", "BatchNorm2d", "ReLU"] if bn else ["Conv2d", "ReLU"]) * (len(spec) - 1)
    convs = [m for m in mlp if isinstance(m, torch.nn.Conv2d)]
    assert [tuple(c.weight.shape) for c in convs] == [(o, i, 1, 1) for i, o in zip(spec[:-1], spec[1:])]
    assert all((c.bias is None) == bn for c in convs)


# ---------------------------------------------------------------- pointnet2_modules


@fuzz(weight=0.5, c=clouds(n_min=1, n_max=12, d_choices=(3,), kinds=EXACT_KINDS, dtypes=[torch.float64], b_max=2),
      npoint=st.one_of(st.none(), st.integers(1, 6)), radii=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.5]), min_size=1,
                                                                       max_size=2),
      ns=st.integers(1, 5), C=st.integers(0, 2), use_xyz=st.booleans(), bn=st.booleans(), seed=st.integers(0, 2**31))
def test_pointnet2_set_abstraction(c, npoint, radii, ns, C, use_xyz, bn, seed):
    x_np = c["x"]
    B, N, _ = x_np.shape
    if npoint is not None:
        npoint = min(npoint, N)
    if C == 0 and not use_xyz:
        use_xyz = True  # nothing to group otherwise
    torch.manual_seed(seed)
    outs = [int(o) for o in np.random.default_rng(seed).integers(1, 4, len(radii))]
    mlps = [[C, o] for o in outs]
    if len(radii) == 1 and seed % 2:
        sa = pointnet2_modules.PointnetSAModule(mlp=mlps[0], npoint=npoint, radius=radii[0], nsample=ns, bn=bn,
                                                use_xyz=use_xyz)
    else:
        sa = pointnet2_modules.PointnetSAModuleMSG(npoint=npoint, radii=radii, nsamples=[ns] * len(radii), mlps=mlps,
                                                   bn=bn, use_xyz=use_xyz)
    assert all(m[0] == C + 3 * use_xyz for m in mlps)  # the original's in-place +3
    for mlp, m in zip(sa.mlps, mlps):
        _check_mlp_layout(mlp, m, bn)
    sa = sa.double().eval()
    if bn:  # non-trivial running statistics, so that the oracle's batch norm is checked too
        for mod in sa.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-1, 1)
                mod.running_var.uniform_(0.5, 2)
    x = torch.from_numpy(x_np)
    feats_np = np.random.default_rng(seed + 1).integers(-3, 4, (B, C, N)).astype(float)
    with torch.no_grad():
        new_xyz, new_f = sa(x, torch.from_numpy(feats_np) if C else None)
    S = 1 if npoint is None else npoint
    assert new_f.shape == (B, sum(outs), S) and new_f.dtype == torch.float64
    for b in range(B):
        if npoint is None:
            assert new_xyz is None
            centres, groups = None, [np.arange(N)]
        else:
            cidx = _pointnet2_fps_kernel(x_np[b].astype(np.float32), npoint)
            np.testing.assert_array_equal(new_xyz[b].numpy(), x_np[b][cidx])
            centres = x_np[b][cidx]
        want = []
        for r, mlp in zip(radii, sa.mlps):
            cols = []
            for s in range(S):
                if centres is None:
                    gi = np.arange(N)
                    rel = x_np[b].T  # GroupAll: absolute coordinates
                else:
                    gi = _ball_first_hits(x_np[b].astype(np.float32), centres[s].astype(np.float32), r, ns)
                    rel = (x_np[b][gi] - centres[s]).T
                parts = ([rel] if use_xyz else []) + ([feats_np[b][:, gi]] if C else [])
                g = np.concatenate(parts, 0)[:, None, :]  # (C_in, 1, nsample)
                cols.append(_mlp_oracle(mlp, g)[:, 0, :].max(1))
            want.append(np.stack(cols, 1))
        np.testing.assert_allclose(new_f[b].numpy(), np.concatenate(want, 0), rtol=1e-12, atol=1e-12)


@fuzz(weight=0.5, c=clouds(n_min=1, n_max=10, d_choices=(3,), kinds=EXACT_KINDS, dtypes=[torch.float64], b_max=2),
      n=st.integers(1, 6), C1=st.integers(0, 2), C2=st.integers(1, 2), known_none=st.booleans(), bn=st.booleans(),
      seed=st.integers(0, 2**31))
def test_pointnet2_feature_propagation(c, n, C1, C2, known_none, bn, seed):
    known = c["x"]
    B, m, _ = known.shape
    unknown = make_points(c["kind"], B * n, 3, torch.float64, c["seed"] + 1).reshape(B, n, 3)
    rng = np.random.default_rng(seed)
    uf = rng.integers(-3, 4, (B, C1, n)).astype(float) if C1 else None
    kf = rng.integers(-3, 4, (B, C2, 1 if known_none else m)).astype(float)
    torch.manual_seed(seed)
    spec = [C1 + C2, int(rng.integers(1, 4)), int(rng.integers(1, 4))]
    fp = pointnet2_modules.PointnetFPModule(mlp=spec, bn=bn)
    _check_mlp_layout(fp.mlp, spec, bn)
    # build_shared_mlp on its own: the original's layout, and the hand-written MLP on a random (B, C, n, k) input
    shared = pointnet2_modules.build_shared_mlp(spec, bn=bn)
    _check_mlp_layout(shared, spec, bn)
    shared = shared.double().eval()
    probe = rng.normal(size=(B, spec[0], n, 2))
    with torch.no_grad():
        got = shared(torch.from_numpy(probe)).numpy()
    np.testing.assert_allclose(got, np.stack([_mlp_oracle(shared, probe[b]) for b in range(B)]), rtol=1e-10, atol=1e-12)
    fp = fp.double().eval()
    with torch.no_grad():
        out = fp(torch.from_numpy(unknown), None if known_none else torch.from_numpy(known),
                 None if uf is None else torch.from_numpy(uf), torch.from_numpy(kf))
    assert out.shape == (B, spec[-1], n)
    for b in range(B):
        if known_none:
            interp = np.repeat(kf[b], n, 1)
        else:
            d2, oi = knn_oracle_acc(unknown[b], known[b], 3)
            ok = oi >= 0
            w = np.where(ok, 1.0 / (np.sqrt(np.where(ok, d2, 0.0)) + 1e-8), 0.0)  # missing slots: dist inf, weight 0
            w = w / w.sum(1, keepdims=True)
            interp = np.einsum("nj,cnj->cn", w, kf[b][:, np.maximum(oi, 0)])
        g = np.concatenate([interp] + ([uf[b]] if C1 else []), 0)[:, :, None]
        np.testing.assert_allclose(out[b].numpy(), _mlp_oracle(fp.mlp, g)[:, :, 0], rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- pointops_cuda: the names both signatures share


@fuzz(c=clouds(n_min=1, n_max=10, d_choices=(3,), kinds=EXACT_KINDS + ["nonfinite"], dtypes=[torch.float32], b_max=2),
      m=st.integers(1, 5), radius=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]), nsample=st.integers(1, 6),
      nclass=st.integers(1, 3))
def test_pointops_cuda_labelstat_and_ballquery(c, m, radius, nsample, nclass):
    xyz_np = c["x"].astype(np.float32)
    b, n, _ = xyz_np.shape
    new_np = make_points(c["kind"], b * m, 3, torch.float32, c["seed"] + 1).reshape(b, m, 3).astype(np.float32)
    labels = torch.from_numpy(np.random.default_rng(c["seed"]).integers(0, 3, (b, n, nclass)).astype(np.int32))
    idx = torch.full((b, m, nsample), 7777, dtype=torch.int32)
    stat = torch.full((b, m, nclass), -5, dtype=torch.int32)
    pointops_cuda.labelstat_and_ballquery_cuda(b, n, m, radius, nsample, nclass, torch.from_numpy(new_np),
                                               torch.from_numpy(xyz_np), labels, idx, stat)
    r2 = np.float32(radius) * np.float32(radius)
    for bb in range(b):
        for i in range(m):
            with np.errstate(invalid="ignore"):
                hits = np.flatnonzero(sq_dist_acc(xyz_np[bb], new_np[bb, i]) < r2)[:nsample]
            # empty balls leave idx as the caller filled it; found points count once each
            want = np.full(nsample, 7777) if len(hits) == 0 else np.concatenate(
                [hits, np.full(nsample - len(hits), hits[0])])
            np.testing.assert_array_equal(idx[bb, i].numpy(), want)
            np.testing.assert_array_equal(stat[bb, i].numpy(), labels[bb].numpy()[hits].sum(0))


@fuzz(c=packed_clouds(kinds=EXACT_KINDS, d_choices=(3,), min_len=1, n_max=10, dtypes=[torch.float32]),
      nsample=st.integers(1, 6))
def test_pointops_cuda_knnquery_both_signatures(c, nsample):
    x = torch.from_numpy(c["x"]).float()
    off = torch.tensor(c["offsets"], dtype=torch.int32)
    n = x.shape[0]
    idx = torch.full((n, nsample), -7, dtype=torch.int32)
    d2 = torch.full((n, nsample), -7.0)
    pointops_cuda.knnquery_cuda(n, nsample, x, x, off, off, idx, d2)  # POSTECH: packed
    lo = 0
    for hi in c["offsets"]:
        od, oi = knn_oracle_acc(c["x"][lo:hi].astype(np.float32), c["x"][lo:hi].astype(np.float32), nsample)
        # missing neighbours: the cloud's first row, squared distance 1e10
        np.testing.assert_array_equal(idx[lo:hi].numpy(), np.where(oi >= 0, oi + lo, lo))
        np.testing.assert_array_equal(d2[lo:hi].numpy(), np.where(oi >= 0, od, np.float32(1e10)))
        lo = hi
    # PointWeb: batched (b, n, 3), the first cloud repeated so that every cloud has n points
    first = c["x"][: c["offsets"][0]].astype(np.float32)
    bx = torch.from_numpy(np.stack([first, first[::-1].copy()]))
    nb = first.shape[0]
    m = max(1, nb // 2)
    bidx = torch.full((2, m, nsample), -7, dtype=torch.int32)
    bd2 = torch.full((2, m, nsample), -7.0)
    pointops_cuda.knnquery_cuda(2, nb, m, nsample, bx, bx[:, :m].contiguous(), bidx, bd2)
    for bb in range(2):
        od, oi = knn_oracle_acc(bx[bb, :m].numpy(), bx[bb].numpy(), nsample)
        np.testing.assert_array_equal(bidx[bb].numpy(), np.maximum(oi, 0))  # missing: index 0
    # only the first nsample entries of dist2 are written (the kernel's unadvanced pointer): the first centre's
    od, _ = knn_oracle_acc(bx[0, :1].numpy(), bx[0].numpy(), nsample)
    np.testing.assert_array_equal(bd2.reshape(-1)[:nsample].numpy(), od[0])
    assert bool((bd2.reshape(-1)[nsample:] == -7.0).all())


@fuzz(c=packed_clouds(kinds=["uniform"], d_choices=(3,), min_len=1, n_max=12, dtypes=[torch.float32]),
      frac=st.floats(0.1, 1.0))
def test_pointops_cuda_furthestsampling_both_signatures(c, frac):
    # uniform random points: no distance ties, so greedy FPS has one answer whatever the tie rule
    x = torch.from_numpy(c["x"]).float()
    off = torch.tensor(c["offsets"], dtype=torch.int32)
    counts = [max(1, int(frac * n)) for n in c["lens"]]
    new_off = torch.tensor(np.cumsum(counts), dtype=torch.int32)
    idx = torch.full((int(new_off[-1]),), -7, dtype=torch.int32)
    pointops_cuda.furthestsampling_cuda(len(c["lens"]), max(c["lens"]), x, off, new_off, torch.zeros(x.shape[0]), idx)
    lo, s = 0, 0
    for hi, k in zip(c["offsets"], counts):
        np.testing.assert_array_equal(idx[s:s + k].numpy() - lo, fps_oracle_acc(c["x"][lo:hi].astype(np.float32), k, 0))
        lo, s = hi, s + k
    # PointWeb: batched, temp read and written (each point's running distance to the first m - 1 samples)
    first = c["x"][: c["offsets"][0]].astype(np.float32)
    n = first.shape[0]
    m = max(1, int(frac * n))
    temp = torch.full((1, n), 1e10)
    bidx = torch.full((1, m), -7, dtype=torch.int32)
    pointops_cuda.furthestsampling_cuda(1, n, m, torch.from_numpy(first[None]), temp, bidx)
    want = fps_oracle_acc(first, m, 0)
    np.testing.assert_array_equal(bidx[0].numpy(), want)
    run = np.full(n, np.float32(1e10), np.float32)
    for j in want[: m - 1]:
        run = np.minimum(run, sq_dist_acc(first, first[j]))
    np.testing.assert_array_equal(temp[0].numpy(), run)


@fuzz(n=st.integers(1, 6), m=st.integers(1, 6), c=st.integers(1, 3), k=st.integers(1, 4),
      dtype=st.sampled_from([torch.float32, torch.float64]), seed=st.integers(0, 2**31))
def test_pointops_cuda_backward_both_signatures(n, m, c, k, dtype, seed):
    """grouping / interpolation backward in both signatures: they add into their output (a random base)."""
    rng = np.random.default_rng(seed)
    T = lambda a: torch.tensor(a, dtype=dtype)  # noqa: E731
    I = lambda a: torch.from_numpy(np.ascontiguousarray(a)).int()  # noqa: E731
    ints = lambda shape: rng.integers(-3, 4, shape).astype(float)  # noqa: E731
    # POSTECH grouping_backward: grad_output (m, k, c), idx (m, k) into n rows
    go, idx, base = ints((m, k, c)), rng.integers(0, n, (m, k)), ints((n, c))
    gi = T(base)
    pointops_cuda.grouping_backward_cuda(m, k, c, T(go), I(idx), gi)
    want = base.copy()
    np.add.at(want, idx.reshape(-1), go.reshape(-1, c))
    np.testing.assert_array_equal(gi.double().numpy(), want)
    # POSTECH interpolation_backward: grad_output (n, c), idx / weight (n, k) into m rows
    go, idx, w, base = ints((n, c)), rng.integers(0, m, (n, k)), ints((n, k)), ints((m, c))
    gi = T(base)
    pointops_cuda.interpolation_backward_cuda(n, c, k, T(go), I(idx), T(w), gi)
    want = base.copy()
    np.add.at(want, idx.reshape(-1), (w[..., None] * go[:, None, :]).reshape(-1, c))
    np.testing.assert_array_equal(gi.double().numpy(), want)
    # PointWeb grouping_backward: grad_out (b, c, m, k), idx (b, m, k) into grad_points (b, c, n)
    b = 2
    go, idx, base = ints((b, c, m, k)), rng.integers(0, n, (b, m, k)), ints((b, c, n))
    gp = T(base)
    pointops_cuda.grouping_backward_cuda(b, c, n, m, k, T(go), I(idx), gp)
    want = base.copy()
    for bb in range(b):
        for i in range(m):
            for j in range(k):
                want[bb, :, idx[bb, i, j]] += go[bb, :, i, j]
    np.testing.assert_array_equal(gp.double().numpy(), want)
    # PointWeb interpolation_backward (b, c, n, m): grad_out (b, c, n), idx / weight (b, n, 3) into (b, c, m)
    go, idx, w, base = ints((b, c, n)), rng.integers(0, m, (b, n, 3)), ints((b, n, 3)), ints((b, c, m))
    gp = T(base)
    pointops_cuda.interpolation_backward_cuda(b, c, n, m, T(go), I(idx), T(w), gp)
    want = base.copy()
    for bb in range(b):
        for i in range(n):
            for j in range(3):
                want[bb, :, idx[bb, i, j]] += w[bb, i, j] * go[bb, :, i]
    np.testing.assert_array_equal(gp.double().numpy(), want)


# ---------------------------------------------------------------- pointops.interpolation2, point_mae.fps


@fuzz(c=packed_clouds(kinds=["lattice", "repeated", "few_distinct"], d_choices=(3,), min_len=1, dtypes=[torch.float64]),
      C=st.integers(1, 3), k=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_pointops_interpolation2(c, C, k, seed):
    # the autograd form: weights 1 / (d + 1e-8) over the k nearest of the same cloud, missing slots contribute 0
    x = torch.from_numpy(c["x"])
    off = torch.tensor(c["offsets"], dtype=torch.int32)
    feat_np = np.random.default_rng(seed).normal(size=(x.shape[0], C))
    feat = torch.from_numpy(feat_np).requires_grad_(True)
    q_np = make_points(c["kind"], x.shape[0], 3, torch.float64, c["seed"] + 3)
    got = pointops.interpolation2(x, torch.from_numpy(q_np), feat, off, off, k)
    got.sum().backward()
    want_grad = np.zeros(x.shape[0])
    lo = 0
    for hi in c["offsets"]:
        d2, oi = knn_oracle_acc(q_np[lo:hi], c["x"][lo:hi], k)
        for r in range(hi - lo):
            ok = oi[r] >= 0
            d = np.where(ok, np.sqrt(np.where(ok, d2[r], 0.0)), 1e5)
            w = 1.0 / (d + 1e-8)
            w = w / w.sum()  # the padding distance 1e5 stays in the normaliser, as in interpolation
            rows = lo + oi[r][ok]
            np.testing.assert_allclose(got[lo + r].detach().numpy(), (w[ok][:, None] * feat_np[rows]).sum(0),
                                       rtol=1e-9, atol=1e-12)
            np.add.at(want_grad, rows, w[ok])
        lo = hi
    np.testing.assert_allclose(feat.grad.numpy(), np.repeat(want_grad[:, None], C, 1), rtol=1e-9, atol=1e-12)


@fuzz(c=clouds(n_min=1, n_max=16, d_choices=(3,), b_max=2), number=st.integers(0, 18))
def test_point_mae_fps(c, number):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    N = x.shape[1]
    if not 1 <= number <= N:
        with pytest.raises(ValueError, match="number"):
            point_mae.fps(x, number)
        return
    got = point_mae.fps(x, number)
    assert got.shape == (x.shape[0], number, 3) and got.dtype == x.dtype
    for b in range(x.shape[0]):
        pts = x[b].float().numpy()
        if not np.isfinite(pts).all():
            continue  # the kernel transcription follows float comparisons that NaN makes order-dependent
        cidx = _pointnet2_fps_kernel(pts, number)
        np.testing.assert_array_equal(got[b].double().numpy(), c["x"][b][cidx])


# ---------------------------------------------------------------- pcgeom.backend_info


@fuzz(weight=0.25, c=clouds(n_min=1, n_max=8, d_choices=(3,), b_max=1), k=st.integers(1, 4))
def test_backend_info(c, k):
    # the description is stable across calls and op use, JSON-serialisable, a fresh copy, and true of this process
    before = pcgeom.backend_info()
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    pcgeom.knn(x, x, k)
    info = pcgeom.backend_info()
    json.dumps(info)
    assert info == before
    info["extension_loaded"] = "mutated"
    info["native_devices"].append("mutated")
    assert pcgeom.backend_info() == before
    assert before["torch_version"] == torch.__version__
    assert before["cuda_available"] == torch.cuda.is_available()
    assert set(before["native_devices"]) <= {"cpu", "cuda"}
    assert before["extension_loaded"] == ("cpu" in before["native_devices"])
    assert (before["load_error"] is None) == before["extension_loaded"]
    assert ("cuda" in before["native_devices"]) == bool(before.get("cuda_extension_loaded"))
