"""pcgeom.compat.pointops / pointops_cuda against float64 transcriptions of the original kernels."""

import math
import os
import sys

import numpy as np
import pytest
import torch

import pcgeom
from pcgeom.compat import pointops as P
from pcgeom.compat import pointops_cuda as PC

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "upstream", "pointcept_oracle"))
import pointops64 as K  # noqa: E402


def packed(sizes, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    xyz = (torch.rand(sum(sizes), 3, generator=g) * scale).contiguous()
    offset = torch.tensor(np.cumsum(sizes), dtype=torch.int32)
    return xyz, offset


SIZES = [60, 3, 150, 1]
QSIZES = [20, 5, 40, 2]


def test_knn_query_matches_kernel_ragged():
    xyz, off = packed(SIZES, 0)
    q, qoff = packed(QSIZES, 1)
    idx, dist = P.knn_query(8, xyz, off, q, qoff)
    ri, rd2 = K.knn_query(8, xyz, off, q, qoff)
    assert idx.dtype == torch.int32 and idx.shape == (q.shape[0], 8)
    assert torch.equal(idx.long(), torch.as_tensor(ri))
    assert torch.allclose(dist.double(), torch.as_tensor(np.sqrt(rd2)), rtol=1e-5, atol=1e-6)
    # the 3-point and 1-point clouds pad with -1 and the kernel's sqrt(1e10)
    assert (idx[20:25, 3:] == -1).all() and (dist[20:25, 3:] == 1e5).all()
    # self-query when new_offset (or new_xyz) is None; long offsets accepted
    si, sd = P.knn_query(4, xyz, off.long(), q, None)
    ri, rd2 = K.knn_query(4, xyz, off)
    assert torch.equal(si.long(), torch.as_tensor(ri))
    assert (sd[:, 0] == 0).all()


def test_knn_query_ties_go_to_lower_index_and_no_cap():
    g = torch.stack(torch.meshgrid(torch.arange(6.0), torch.arange(6.0), torch.arange(6.0), indexing="ij"), -1)
    xyz = g.reshape(-1, 3).contiguous()
    off = torch.tensor([xyz.shape[0]], dtype=torch.int32)
    idx, dist = P.knn_query(200, xyz, off)  # > the kernel's best_dist[128]
    assert idx.shape == (216, 200) and (idx >= 0).all()
    d2 = ((xyz[idx.long()] - xyz[:, None]) ** 2).sum(-1)
    assert (d2[:, 1:] >= d2[:, :-1]).all()
    tie = (d2[:, 1:] == d2[:, :-1])
    assert (idx[:, 1:][tie] > idx[:, :-1][tie]).all()


def test_farthest_point_sampling_matches_kernel():
    xyz, off = packed([300, 40, 7], 2)
    new_off = torch.tensor([75, 85, 97], dtype=torch.int32)  # the 7-point cloud asks 12: repeats its first point
    idx = P.farthest_point_sampling(xyz, off, new_off)
    assert idx.dtype == torch.int32 and idx.shape == (97,)
    assert torch.equal(idx.long(), torch.as_tensor(K.farthest_point_sampling(xyz, off, new_off)))
    assert (idx[85 + 7:] == 340).all()


def test_farthest_point_sampling_duplicates_repeat_first_point():
    base = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 2, 0]])
    xyz = torch.cat([base, base, base[:1]]).contiguous()  # every point twice (or thrice)
    off, new_off = torch.tensor([7]), torch.tensor([6])
    idx = P.farthest_point_sampling(xyz, off, new_off)
    # points 1 and 4 tie: pcgeom takes the lower index, the kernel's reduction order takes 4;
    # once only distance-0 points are left both repeat the first point
    assert idx.tolist() == [0, 2, 1, 0, 0, 0]
    assert K.farthest_point_sampling(xyz, off, new_off).tolist() == [0, 2, 4, 0, 0, 0]


def test_grouping_and_gradients():
    xyz, off = packed([8, 2], 3)
    feat = torch.randn(10, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    xyz = xyz.double()
    idx, _ = P.knn_query(3, xyz, off)
    out = P.grouping(idx, feat, xyz, with_xyz=True)
    assert torch.allclose(out, torch.as_tensor(K.grouping(idx.numpy(), feat, xyz, with_xyz=True)))
    assert (out[8:, 2:] == 0).all()  # -1 slots are zeros (relative coordinates too)
    f, x = feat.clone().requires_grad_(), xyz.clone().requires_grad_()
    torch.autograd.gradcheck(lambda f, x: P.grouping(idx, f, x, with_xyz=True), (f, x))
    assert torch.equal(P.grouping2(feat, idx), P.grouping(idx, feat, xyz))


def test_interpolation_matches_original_including_small_clouds():
    xyz, off = packed([40, 2], 4)  # the second cloud has fewer than k=3 points
    q, qoff = packed([25, 6], 5)
    feat = torch.randn(42, 4, generator=torch.Generator().manual_seed(1))
    out = P.interpolation(xyz, q, feat, off, qoff)
    ref, ridx, _ = K.interpolation(xyz, q, feat, off, qoff)
    assert (ridx[25:, 2] == -1).all()  # Python's feat[-1] is read there, as in the original
    assert torch.allclose(out.double(), torch.as_tensor(ref), rtol=1e-5, atol=1e-6)
    f = feat.clone().requires_grad_()
    P.interpolation2(xyz, q, f, off, qoff).sum().backward()
    _, ridx, w = K.interpolation(xyz, q, feat, off, qoff)
    gref = np.zeros((42,))
    np.add.at(gref, ridx[ridx >= 0], w[ridx >= 0])
    assert torch.allclose(f.grad[:, 0].double(), torch.as_tensor(gref), rtol=1e-5, atol=1e-6)


def test_ball_query_shell_and_subsample():
    xyz, off = packed([120, 30], 6)
    q, qoff = packed([10, 4], 7)
    for nsample, rmax, rmin in ((64, 0.3, 0.0), (5, 0.5, 0.1), (200, 0.4, 0.05)):
        idx, dist = P.ball_query(nsample, rmax, rmin, xyz, off, q, qoff)
        ri, rd2 = K.ball_query_spec(nsample, rmax, rmin, xyz, off, q, qoff)
        assert torch.equal(idx.long(), torch.as_tensor(ri)), (nsample, rmax, rmin)
        assert torch.allclose(dist.double(), torch.as_tensor(np.sqrt(rd2)), rtol=1e-5, atol=1e-6)
        # where the kernel is well defined (at most nsample candidates) it holds the same set
        ki, _, cnt = K.ball_query_kernel(nsample, rmax, rmin, xyz, off, q, qoff)
        for p in np.nonzero(cnt <= nsample)[0]:
            assert sorted(ki[p].tolist()) == sorted(idx[p].tolist())
    # a point at distance 0 is always a candidate, even inside min_radius
    idx, _ = P.ball_query(4, 0.5, 0.2, xyz, off)
    assert (idx[:, 0].long() == torch.arange(150)).all()


def test_random_ball_query_properties():
    xyz, off = packed([200, 50], 8)
    torch.manual_seed(0)
    idx, dist = P.random_ball_query(16, 0.3, 0.1, xyz, off)
    torch.manual_seed(0)
    idx2, _ = P.random_ball_query(16, 0.3, 0.1, xyz, off)
    assert torch.equal(idx, idx2)
    ri, _ = K.ball_query_spec(10 ** 4, 0.3, 0.1, xyz, off, xyz, off)
    for p in range(250):
        got = [i for i in idx[p].tolist() if i >= 0]
        cand = set(i for i in ri[p].tolist() if i >= 0)
        assert len(got) == len(set(got)) == min(16, len(cand)) and set(got) <= cand
    ok = idx >= 0
    d = (xyz[idx.long().clamp(min=0)] - xyz[:, None]).norm(dim=-1)
    assert torch.allclose(dist[ok], d[ok], atol=1e-6) and (dist[~ok] == 1e5).all()


def test_attention_vector_ops_and_gradients():
    g = torch.Generator().manual_seed(2)
    n, s, c, wc = 6, 3, 4, 2
    inp = torch.randn(n, c, generator=g, dtype=torch.float64)
    pos = torch.randn(n, s, c, generator=g, dtype=torch.float64)
    w = torch.randn(n, s, wc, generator=g, dtype=torch.float64)
    idx = torch.randint(0, n, (n, s), generator=g, dtype=torch.int32)
    assert torch.allclose(P.aggregation(inp, pos, w, idx), torch.as_tensor(K.aggregation(inp, pos, w, idx.numpy())))
    assert torch.allclose(P.subtraction(inp, inp, idx), torch.as_tensor(K.subtraction(inp, inp, idx.numpy())))
    args = [t.clone().requires_grad_() for t in (inp, pos, w)]
    torch.autograd.gradcheck(lambda a, b, c_: P.aggregation(a, b, c_, idx), args)
    q = torch.randn(n, 2, 3, generator=g, dtype=torch.float64)
    k = torch.randn(n, 2, 3, generator=g, dtype=torch.float64)
    cw = torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True)
    it = torch.randint(0, n, (20,), generator=g, dtype=torch.int32)
    ir = torch.randint(0, n, (20,), generator=g, dtype=torch.int32)
    rel = P.attention_relation_step(q, k, cw, it, ir)
    assert torch.allclose(rel, torch.as_tensor(K.attention_relation_step(q, k, cw, it, ir)))
    assert not rel.requires_grad  # the original's backward gives weight no gradient
    aw = torch.randn(20, 2, generator=g, dtype=torch.float64)
    fused = P.attention_fusion_step(aw, k, it, ir)
    assert torch.allclose(fused, torch.as_tensor(K.attention_fusion_step(aw, k, it, ir)))


def _query_and_group_loop(nsample, xyz, new_xyz, offset, new_offset, dilation):
    """The original's Python loop over clouds (functions/utils.py), on the transcribed knn."""
    total = 1 + (nsample - 1) * (dilation + 1)
    ind, _ = K.knn_query(total, xyz, offset, new_xyz, new_offset)
    out = []
    be, nbe = offset.tolist(), new_offset.tolist()
    bs, nbs = [0] + be[:-1], [0] + nbe[:-1]
    for i in range(len(be)):
        soft = (be[i] - bs[i] - 1) / (nsample - 1) - 1 if be[i] - bs[i] < total else dilation
        out.append(ind[nbs[i]:nbe[i]][:, [int((soft + 1) * j) for j in range(nsample)]])
    return np.concatenate(out, 0)


def test_query_and_group_dilation():
    xyz, off = packed([80, 9, 3], 9)
    feat = torch.randn(92, 2, generator=torch.Generator().manual_seed(3))
    for nsample, dil in ((4, 2), (6, 0), (5, 1)):
        idx = P.query_and_group(nsample, xyz, xyz, feat, None, off, off, dilation=dil, with_feat=False)
        assert torch.equal(idx.long(), torch.as_tensor(_query_and_group_loop(nsample, xyz, xyz, off, off, dil)))
    out, idx = P.query_and_group(4, xyz, xyz, feat, None, off, off, dilation=2)
    li = idx.long() % 92  # the original's plain indexing: -1 is the last row
    assert torch.allclose(out[..., 3:], feat[li]) and torch.allclose(out[..., :3], xyz[li] - xyz[:, None])


def test_knn_query_and_group_and_batch_helpers():
    xyz, off = packed([10, 6], 10)
    feat = torch.randn(16, 3, generator=torch.Generator().manual_seed(4))
    g, idx = P.knn_query_and_group(feat, xyz, off, nsample=8, with_xyz=True)
    assert g.shape == (16, 8, 6) and torch.equal(g, P.grouping(idx, feat, xyz, with_xyz=True))
    g2, idx2 = P.ball_query_and_group(feat, xyz, off, max_radio=0.5, nsample=8)
    assert torch.equal(idx2, P.ball_query(8, 0.5, 0, xyz, off)[0])
    assert P.offset2batch(off).tolist() == K.offset2batch(off).tolist()
    b = P.batch2offset(P.offset2batch(off))
    assert b.dtype == torch.int32 and b.tolist() == off.tolist()
    assert pcgeom.batch_to_offsets(torch.tensor([0, 2, 2])).tolist() == [1, 1, 3]


@pytest.mark.parametrize("call, exc, match", [
    (lambda x, o: P.knn_query(4, x, torch.tensor([5, 3])), ValueError, "offset must be non-decreasing"),
    (lambda x, o: P.knn_query(4, x, torch.tensor([5, 9])), ValueError, r"offset\[-1\] must equal"),
    (lambda x, o: P.knn_query(0, x, o), ValueError, "nsample must be >= 1"),
    (lambda x, o: P.knn_query(4, x.long(), o), TypeError, "xyz must be float"),
    (lambda x, o: P.knn_query(4, x, o.float()), TypeError, "offset must be an integer tensor"),
    (lambda x, o: P.knn_query(4, x, o, x[:3], torch.tensor([1, 2])), ValueError, "new_offset must be non-decreasing|new_offset"),
    (lambda x, o: P.ball_query(4, 0.1, 0.2, x, o), ValueError, "min_radius must be < max_radius"),
    (lambda x, o: P.farthest_point_sampling(x, o, torch.tensor([3, 2])), ValueError, "new_offset must be non-decreasing"),
    (lambda x, o: P.farthest_point_sampling(x, torch.tensor([0, 10]), torch.tensor([1, 2])), ValueError, "cloud 0 of xyz is empty"),
    (lambda x, o: P.grouping(torch.tensor([[10]]), torch.ones(10, 1), x), ValueError, r"idx values must be in \[-1, 10\)"),
    (lambda x, o: P.grouping(torch.tensor([[-2]]), torch.ones(10, 1), x), ValueError, "idx values"),
    (lambda x, o: P.grouping(torch.tensor([[0.5]]), torch.ones(10, 1), x), TypeError, "idx must be int32 or int64"),
    (lambda x, o: P.attention_fusion_step(torch.ones(1, 1), torch.ones(2, 1, 1), torch.tensor([2]), torch.tensor([0])),
     ValueError, "index_target values must be in"),
    # offsets are read on the host: a tensor with no data (the meta device) is named, on either side
    (lambda x, o: P.knn_query(4, x, o.to("meta")), ValueError, "knn_query: offset must hold values on a real device"),
    (lambda x, o: P.farthest_point_sampling(x.to("meta"), o, o), ValueError, "offset must hold values on a real device"),
    (lambda x, o: P.query_and_group(2, x, x, torch.ones(10, 1, device="meta"), None, o, o), ValueError,
     "query_and_group: feat must be on cpu like xyz, got meta"),
    (lambda x, o: P.ball_query(2**61, 0.5, 0.0, x, o), RuntimeError, r"ball_query: nsample=2305843009213693952 is too large"),
    (lambda x, o: PC.aggregation_backward_cuda(10, 1, 2, 1, torch.ones(10, 2), torch.ones(10, 1, 2), torch.ones(10, 1, 1),
                                               torch.zeros(10, 1, dtype=torch.int32), torch.ones(10, 2),
                                               torch.zeros(10, 2).t(), torch.zeros(10, 1, 2), torch.zeros(10, 1, 1)),
     ValueError, r"aggregation_backward_cuda: grad_input must have shape \(10, 2\), got \(2, 10\) \(non-contiguous\)"),
    (lambda x, o: PC.interpolation_forward_cuda(10, 1, 1, torch.ones(10, 1), torch.zeros(10, 1, dtype=torch.int32),
                                                torch.ones(10, 1, device="meta"), torch.zeros(10, 1)),
     ValueError, "interpolation_forward_cuda: weight must be on cpu, got meta"),
])
def test_bad_input_named_errors(call, exc, match):
    xyz, off = packed([5, 5], 11)
    with pytest.raises(exc, match=match):
        call(xyz, off)


# --------------------------------------------------------------------------- pointops_cuda (POSTECH)


def test_pointops_cuda_fills_preallocated_outputs_like_postech():
    xyz, off = packed([50, 4], 12)
    q, qoff = packed([12, 3], 13)
    m, ns = q.shape[0], 6
    idx = torch.zeros(m, ns, dtype=torch.int32)
    d2 = torch.zeros(m, ns)
    PC.knnquery_cuda(m, ns, xyz, q, off, qoff, idx, d2)
    ri, rd2 = K.knn_query(ns, xyz, off, q, qoff, pad="first")
    assert torch.equal(idx.long(), torch.as_tensor(ri))  # pads with the cloud's first point (50), not -1
    assert (idx[12:, 4:] == 50).all() and (d2[12:, 4:] == 1e10).all()
    assert torch.allclose(d2.double(), torch.as_tensor(rd2), rtol=1e-5, atol=1e-6)

    new_off = torch.tensor([10, 13], dtype=torch.int32)
    fidx = torch.zeros(13, dtype=torch.int32)
    PC.furthestsampling_cuda(2, 50, xyz, off, new_off, torch.full((54,), 1e10), fidx)
    assert torch.equal(fidx.long(), torch.as_tensor(K.farthest_point_sampling(xyz, off, new_off)))

    g = torch.Generator().manual_seed(5)
    feat = torch.randn(54, 4, generator=g)
    out = torch.empty(m, ns, 4)
    PC.grouping_forward_cuda(m, ns, 4, feat, idx, out)
    assert torch.equal(out, feat[idx.long()])
    gi = torch.zeros(54, 4)
    PC.grouping_backward_cuda(m, ns, 4, torch.ones(m, ns, 4), idx, gi)
    assert torch.equal(gi[:, 0], torch.bincount(idx.long().flatten(), minlength=54).float())

    w = torch.rand(m, ns, generator=g)
    io = torch.ones(m, 4)  # the kernel accumulates into the caller's tensor
    PC.interpolation_forward_cuda(m, 4, ns, feat, idx, w, io)
    assert torch.allclose(io, 1 + (feat[idx.long()] * w[..., None]).sum(1), atol=1e-6)

    inp = torch.randn(m, 4, generator=g)
    pos = torch.randn(m, ns, 4, generator=g)
    wt = torch.randn(m, ns, 2, generator=g)
    sidx = torch.randint(0, m, (m, ns), generator=g, dtype=torch.int32)
    ao = torch.zeros(m, 4)
    PC.aggregation_forward_cuda(m, ns, 4, 2, inp, pos, wt, sidx, ao)
    assert torch.allclose(ao.double(), torch.as_tensor(K.aggregation(inp, pos, wt, sidx.numpy())), atol=1e-5)
    ga, gp, gw = torch.zeros(m, 4), torch.zeros(m, ns, 4), torch.zeros(m, ns, 2)
    go = torch.randn(m, 4, generator=g)
    PC.aggregation_backward_cuda(m, ns, 4, 2, inp, pos, wt, sidx, go, ga, gp, gw)
    a, p_, w_ = (t.clone().double().requires_grad_() for t in (inp, pos, wt))
    torch.autograd.backward(P.aggregation(a, p_, w_, sidx), go.double())
    assert torch.allclose(ga.double(), a.grad, atol=1e-5) and torch.allclose(gp.double(), p_.grad, atol=1e-5)
    assert torch.allclose(gw.double(), w_.grad, atol=1e-5)
    so = torch.empty(m, ns, 4)
    PC.subtraction_forward_cuda(m, ns, 4, inp, inp, sidx, so)
    assert torch.allclose(so.double(), torch.as_tensor(K.subtraction(inp, inp, sidx.numpy())))
    with pytest.raises(ValueError, match="idx values must be in"):
        PC.grouping_forward_cuda(1, 1, 4, feat, torch.tensor([[54]], dtype=torch.int32), torch.empty(1, 1, 4))
    # PointWeb's (b, n, m, nsample, ...) signature is served too; tensors that do not fit its sizes
    # are named (tests/test_compat_pointops_cuda_pointweb.py covers that extension)
    with pytest.raises(ValueError, match=r"knnquery_cuda \(PointWeb\): xyz must have shape \(1, 16, 3\), got \(1, 54, 3\)"):
        PC.knnquery_cuda(1, 16, 8, 4, xyz[None], q[None], idx, d2)


def test_shims_serve_pointops_and_pointops_cuda():
    import pcgeom.compat

    pcgeom.compat.enable_shims()
    try:
        import pointops
        import pointops_cuda
        assert pointops.__pcgeom_shim__ == "pcgeom.compat.pointops"
        assert pointops_cuda.__pcgeom_shim__ == "pcgeom.compat.pointops_cuda"
        assert {"knn_query", "interpolation2", "offset2batch"} <= set(dir(pointops))
    finally:
        pcgeom.compat.disable_shims()


def test_fps_size_error_names_new_offset():
    # The table that cannot be allocated is named by the caller's argument, not by the inner pcgeom op.
    from pcgeom.compat import pointops as po

    with pytest.raises(RuntimeError, match=r"^farthest_point_sampling: new_offset=.*1099511627776.*8\.0 TiB"):
        po.farthest_point_sampling(torch.rand(10, 3), torch.tensor([10], dtype=torch.int32), torch.tensor([2**40]))


def test_distances_are_rounded_once_to_the_output_dtype():
    # Issue #30 fuzz find: bfloat16 ball_query took the root of the bfloat16-rounded squared distance
    # (18.1875 -> 18.25 -> 4.28125); the root of 18.1875 is 4.2647..., which rounds to 4.25.
    xyz = torch.tensor([[3.0, 1.0, 1.75], [0.25, -2.25, 1.5]], dtype=torch.bfloat16)
    off = torch.tensor([2], dtype=torch.int32)
    assert P.ball_query(2, 100.0, 0.0, xyz, off)[1][0].tolist() == [0.0, 4.25]
    assert P.random_ball_query(2, 100.0, 0.0, xyz, off)[1][0].sort().values.tolist() == [0.0, 4.25]
    assert P.knn_query(2, xyz, off)[1][0].tolist() == [0.0, 4.25]
    from pcgeom.compat import pointnet2_ops
    assert pointnet2_ops.three_nn(xyz[None, :1], xyz[None])[0][0, 0].tolist() == [0.0, 4.25, float("inf")]
    # the shell test and the order use the float32 squared distance: 18.1875 < 4.2656**2 = 18.196,
    # though its bfloat16 rounding 18.25 is not
    idx, _ = P.ball_query(2, 4.265625, 0.0, xyz, off)
    assert idx[0].tolist() == [0, 1]
    # float64: torch's CPU sqrt(2.0) is one ulp low; the answer is the correctly rounded root
    x64 = torch.tensor([[0.0, 0, 0], [1, -1, 0]], dtype=torch.float64)
    assert P.ball_query(2, 2.0, 0.0, x64, off)[1][0, 1].item() == math.sqrt(2.0)
    assert P.knn_query(2, x64, off)[1][0, 1].item() == math.sqrt(2.0)
    # float32: torch's CPU sqrt(267.0) is one ulp off too (267 = 11**2 + 11**2 + 5**2)
    x32 = torch.tensor([[0.0, 0, 0], [11, 11, 5]])
    want = float(np.sqrt(np.float32(267.0)))
    assert P.knn_query(2, x32, off)[1][0, 1].item() == want
    from pcgeom.compat.knn_cuda import KNN
    assert KNN(2, transpose_mode=True)(x32[None], x32[None, :1])[0][0, 0, 1].item() == want


def test_round_once_decides_float32_midpoints_by_the_float64_value():
    from pcgeom._rounding import round_once
    y = torch.tensor([1 + 2**-8 + 2**-40, 1 + 2**-8 - 2**-40, 1 + 2**-8, 65519.999, 65520.0], dtype=torch.float64)
    assert round_once(y[:3], torch.bfloat16).tolist() == [1 + 2**-7, 1.0, 1.0]  # torch's cast gives 1.0 for all three
    assert round_once(y[3:], torch.float16).tolist() == [65504.0, float("inf")]
