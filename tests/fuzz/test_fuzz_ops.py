"""Differential fuzz of the ops (knn, ball_query, farthest_point_sample, knn_gather, chamfer_distance,
pack/unpack) against the float64/accumulation-dtype numpy oracles of tests/oracle.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("hypothesis")
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pcgeom  # noqa: E402
from tests.fuzz.strategies import LAYOUTS, as_layout, clouds, fuzz, lengths_tensor, make_points, packed_clouds  # noqa: E402
from tests.oracle import acc_np_dtype, fps_oracle_acc, knn_oracle_acc, round_to, sq_dist_acc  # noqa: E402

OUT_RTOL = {torch.float64: 1e-12, torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def check_rows(gd, gi, q, p, k, dtype, exact, radius2=None, order="distance", base=0):
    """One cloud's (M, k) answer against the oracle (q, p in the accumulation dtype)."""
    od, oi = knn_oracle_acc(q, p, k, radius2, order)
    gi = gi - np.where(gi >= 0, base, 0)
    assert ((gi >= -1) & (gi < max(p.shape[0], 1) if p.shape[0] else gi == -1)).all(), gi
    np.testing.assert_array_equal(gi == -1, oi == -1)
    if exact:
        np.testing.assert_array_equal(gi, oi)
        np.testing.assert_array_equal(gd, round_to(od, dtype))
        return
    rtol = 1e-12 if q.dtype == np.float64 else 1e-5
    safe = np.where(gi < 0, 0, gi)
    for m in range(q.shape[0]):
        valid = gi[m] >= 0
        assert len(set(gi[m][valid].tolist())) == int(valid.sum())
        true = sq_dist_acc(p[safe[m][valid]], q[m]) if p.shape[0] else np.zeros(0)
        np.testing.assert_allclose(true.astype(float), od[m][valid].astype(float), rtol=rtol, atol=0, equal_nan=True)
    np.testing.assert_allclose(gd, round_to(od, dtype), rtol=OUT_RTOL[dtype] + rtol, atol=0, equal_nan=True)


def query_cloud(c, self_query, M):
    if self_query:
        return c["x"]
    B, _, D = c["x"].shape
    return make_points(c["kind"], B * M, D, c["dtype"], c["seed"] + 1).reshape(B, M, D)


@fuzz(c=clouds(), k=st.integers(1, 30), self_query=st.booleans(), M=st.integers(0, 6),
      layout=st.sampled_from(LAYOUTS), use_lengths=st.booleans())
def test_knn(c, k, self_query, M, layout, use_lengths):
    dtype = c["dtype"]
    qx = query_cloud(c, self_query, M)
    q, p = as_layout(qx, dtype, layout), as_layout(c["x"], dtype, layout)
    pl = c["lengths"] if use_lengths else [p.shape[1]] * p.shape[0]
    kw = dict(points_lengths=lengths_tensor(pl)) if use_lengths else {}
    d, i = pcgeom.knn(q, p, k, **kw)
    assert d.dtype == dtype and i.dtype == torch.int64 and d.shape == i.shape == (q.shape[0], q.shape[1], k)
    for b in range(q.shape[0]):
        check_rows(d[b].double().numpy(), i[b].numpy(), q[b].double().numpy().astype(acc_np_dtype(dtype)),
                   p[b, : pl[b]].double().numpy().astype(acc_np_dtype(dtype)), k, dtype, c["exact"])


@fuzz(c=packed_clouds(), k=st.integers(1, 16))
def test_knn_packed(c, k):
    dtype = c["dtype"]
    x = torch.from_numpy(c["x"]).to(dtype)
    off = torch.tensor(c["offsets"])
    d, i = pcgeom.knn(x, x, k, query_offsets=off, points_offsets=off)
    assert d.shape == i.shape == (x.shape[0], k)
    lo = 0
    for hi in c["offsets"]:
        seg = c["x"][lo:hi].astype(acc_np_dtype(dtype))
        check_rows(d[lo:hi].double().numpy(), i[lo:hi].numpy(), seg, seg, k, dtype, c["exact"], base=lo)
        lo = hi


@fuzz(c=clouds(), k=st.integers(1, 12), radius=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 1e-30, 1e30, math.inf]),
      order=st.sampled_from(["distance", "index"]), layout=st.sampled_from(LAYOUTS), self_query=st.booleans(),
      M=st.integers(0, 5))
def test_ball_query(c, k, radius, order, layout, self_query, M):
    dtype = c["dtype"]
    qx = query_cloud(c, self_query, M)
    q, p = as_layout(qx, dtype, layout), as_layout(c["x"], dtype, layout)
    L = lengths_tensor(c["lengths"])
    try:
        d, i = pcgeom.ball_query(q, p, radius, k, points_lengths=L, order=order)
    except (ValueError, TypeError) as exc:
        # the documented refusal: radius must be a finite float >= 0 (inf is not documented as valid)
        assert not math.isfinite(radius) and "radius" in str(exc), exc
        return
    acc = acc_np_dtype(dtype)
    with np.errstate(over="ignore"):
        r2 = acc(radius * radius)  # formed in double, rounded once to the accumulation dtype
    for b in range(q.shape[0]):
        check_rows(d[b].double().numpy(), i[b].numpy(), q[b].double().numpy().astype(acc),
                   p[b, : c["lengths"][b]].double().numpy().astype(acc), k, dtype, c["exact"] or radius == 0.0,
                   radius2=r2, order=order)


@fuzz(c=clouds(n_min=0), n=st.integers(1, 30), layout=st.sampled_from(LAYOUTS), start=st.integers(0, 30))
def test_farthest_point_sample(c, n, layout, start):
    dtype = c["dtype"]
    p = as_layout(c["x"], dtype, layout)
    L = c["lengths"]
    starts = [start % max(l, 1) for l in L]
    try:
        idx = pcgeom.farthest_point_sample(p, n, lengths=lengths_tensor(L), start_index=torch.tensor(starts))
    except (ValueError, TypeError) as exc:
        # an empty cloud has no valid start index: the documented refusal names it
        assert min(L) == 0 and ("start_index" in str(exc) or "lengths" in str(exc)), exc
        return
    assert idx.shape == (p.shape[0], n) and idx.dtype == torch.int64
    for b in range(p.shape[0]):
        pts = p[b, : L[b]].double().numpy().astype(acc_np_dtype(dtype))
        got = idx[b].numpy()
        valid = got[got >= 0]
        assert (got[min(n, L[b]):] == -1).all() and len(valid) == min(n, L[b])
        assert len(np.unique(valid)) == len(valid) and (valid < L[b]).all()
        if c["exact"]:
            # NaN distances (NaN coordinates, or inf - inf between infinite coordinates) rank last, lowest
            # index first; the oracle propagates them through the running minimum as the docs' rule implies.
            np.testing.assert_array_equal(got, fps_oracle_acc(pts, n, starts[b]))


@fuzz(c=clouds(n_min=0), M=st.integers(0, 5), k=st.integers(1, 6), C=st.integers(1, 4), layout=st.sampled_from(LAYOUTS))
def test_knn_gather(c, M, k, C, layout):
    dtype = c["dtype"]
    B, N, _ = c["x"].shape
    rng = np.random.default_rng(c["seed"])
    feats = make_points(c["kind"], B * N, C, dtype, c["seed"] + 2).reshape(B, N, C)
    x = as_layout(feats, dtype, layout)
    idx = torch.from_numpy(rng.integers(-1, max(N, 0), (B, M, k)))
    got = pcgeom.knn_gather(x, idx).double().numpy()
    want = np.zeros((B, M, k, C))
    if N:
        want = np.where((idx.numpy() >= 0)[..., None], feats[np.arange(B)[:, None, None], np.maximum(idx.numpy(), 0)], 0.0)
    np.testing.assert_array_equal(got, want)
    if N:
        bad = idx.clone()
        bad[..., 0] = N  # one past the end: the documented refusal names the index range
        if bad.numel():
            with pytest.raises((ValueError, IndexError)) as ei:
                pcgeom.knn_gather(x, bad)
            assert ei.type is ValueError and "idx" in str(ei.value), ei.value


@fuzz(c=clouds(n_min=0, kinds=["uniform", "lattice", "repeated", "few_distinct", "extreme", "nonfinite"]),
      kind=st.sampled_from(["l2", "l1"]), reduction=st.sampled_from(["mean", "sum", "none"]), M=st.integers(0, 6))
def test_chamfer_distance(c, kind, reduction, M):
    dtype = c["dtype"]
    x = torch.from_numpy(c["x"]).to(dtype)
    B, N, D = x.shape
    y = torch.from_numpy(make_points(c["kind"], B * M, D, dtype, c["seed"] + 3).reshape(B, M, D)).to(dtype)
    xl = lengths_tensor(c["lengths"])
    try:
        out = pcgeom.chamfer_distance(x, y, x_lengths=xl, kind=kind, reduction=reduction)
    except ValueError as exc:
        assert (min(c["lengths"]) == 0 or M == 0) and ("x" in str(exc) or "y" in str(exc)), exc
        return
    assert min(c["lengths"]) > 0 and M > 0, "an empty cloud must be refused"
    acc = acc_np_dtype(dtype)
    per = []
    for b in range(B):
        xs = x[b, : c["lengths"][b]].double().numpy().astype(acc)
        ys = y[b].double().numpy().astype(acc)
        dx = knn_oracle_acc(xs, ys, 1)[0][:, 0].astype(float)
        dy = knn_oracle_acc(ys, xs, 1)[0][:, 0].astype(float)
        if kind == "l1":
            per.append((np.sqrt(dx).mean() + np.sqrt(dy).mean()) / 2)
        else:
            per.append(dx.mean() + dy.mean())
    per = np.array(per)
    want = per if reduction == "none" else (per.mean() if reduction == "mean" else per.sum())
    got = out.double().numpy()
    assert out.dtype == dtype
    rtol = 1e-10 if dtype == torch.float64 else (1e-5 if dtype == torch.float32 else 2e-2)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, round_to(np.asarray(want, dtype=acc), dtype) if np.all(np.isfinite(want)) else want,
                                   rtol=rtol, atol=0, equal_nan=True)


@fuzz(lens=st.lists(st.integers(0, 5), min_size=1, max_size=5), C=st.integers(1, 3),
      dtype=st.sampled_from([torch.float32, torch.float16, torch.int64, torch.bool]), fill=st.sampled_from([0, -1, 7]))
def test_pack_unpack(lens, C, dtype, fill):
    B, N = len(lens), max(lens) + 1
    rng = np.random.default_rng(sum(lens) * 31 + C)
    padded = torch.from_numpy(rng.integers(-5, 5, (B, N, C))).to(dtype)
    packed, off = pcgeom.pack(padded, torch.tensor(lens))
    want = np.concatenate([padded[b, : lens[b]].numpy() for b in range(B)]) if sum(lens) else np.zeros((0, C))
    np.testing.assert_array_equal(packed.numpy(), want.astype(packed.numpy().dtype))
    np.testing.assert_array_equal(off.numpy(), np.cumsum(lens))
    back, ln = pcgeom.unpack(packed, off, fill=fill)
    np.testing.assert_array_equal(ln.numpy(), lens)
    assert back.shape == (B, max(lens), C)
    for b in range(B):
        np.testing.assert_array_equal(back[b, : lens[b]].numpy(), padded[b, : lens[b]].numpy())
        np.testing.assert_array_equal(back[b, lens[b]:].numpy(), torch.full_like(back[b, lens[b]:], fill).numpy())


@pytest.mark.fuzz
@pytest.mark.parametrize("kind", ["l2", "l1"])
def test_chamfer_nan_coordinates_give_nan_in_both_kinds(kind):  # noqa: D103
    # Found by test_chamfer_distance: kind="l1" mapped a NaN distance to 0 (its safe sqrt treated every
    # non-positive value as 0), so a cloud with NaN coordinates scored a perfect match.
    x = torch.tensor([[[2.0, float("nan")]]])
    y = torch.tensor([[[0.0, 1.0]]])
    assert torch.isnan(pcgeom.chamfer_distance(x, y, kind=kind))


@pytest.mark.fuzz
@pytest.mark.parametrize("x, y, want", [(9.012222290039062e-05, 2.2649765014648438e-06, 8.7857e-05),
                                        (-4.601478576660156e-05, -31584.0, 31584.0)])
def test_chamfer_l1_half_precision_does_not_square_through_the_half_dtype(x, y, want):
    # Found by test_chamfer_distance: float16 kind="l1" took sqrt of knn's float16 dist2, which underflows to 0
    # (distance 8.8e-5) or overflows to inf (distance 31584) although the distance itself fits in float16.
    got = pcgeom.chamfer_distance(torch.tensor([[[x]]]).half(), torch.tensor([[[y]]]).half(), kind="l1")
    assert got.item() == pytest.approx(want, rel=1e-3)
