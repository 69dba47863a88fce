"""pcgeom.compat.pointops_cuda with PointWeb's batched signatures, against float64 transcriptions of its kernels.

``tests/upstream/pointweb/pointweb64.py`` transcribes each bound kernel of
hszhao/PointWeb's ``lib/pointops`` (written from the ``.cu``, without pcgeom
code) with the extension's own signatures, so every case below calls the
stand-in and the transcription the same way on copies of the same
preallocated outputs: indices must be equal, values equal to float32
rounding, and what the kernel leaves untouched must stay untouched.  The last
test runs PointWeb's unchanged segmentation model through the shims
(``tests/upstream/pointweb/drive_pointweb.py``).
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import DEVICES
from pcgeom.compat.pointops_cuda import pointweb as PW
from pcgeom.compat import pointops_cuda as PC

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "upstream", "pointweb")
sys.path.insert(0, HERE)
import pointweb64 as K  # noqa: E402


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def both(fn, *args, outs):
    """Runs the stand-in and the transcription on clones of ``outs``; returns both lists of outputs."""
    a = [o.clone() for o in outs]
    b = [o.clone() for o in outs]
    getattr(PC, fn)(*args, *a)
    getattr(K, fn)(*args, *b)
    return a, b


def assert_same(a, b, what=""):
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        if x.is_floating_point():
            assert torch.allclose(x.double(), y.double(), rtol=2e-6, atol=1e-6, equal_nan=True), what
        else:
            assert torch.equal(x, y), f"{what}: {(x != y).sum().item()} indices differ"


def lattice(nx, ny, nz, B=2):
    g = torch.stack(torch.meshgrid(torch.arange(nx * 1.0), torch.arange(ny * 1.0), torch.arange(nz * 1.0),
                                   indexing="ij"), -1)
    return g.reshape(1, -1, 3).repeat(B, 1, 1).contiguous()


def i32(*shape, fill=0):
    return torch.full(shape, fill, dtype=torch.int32)


# --------------------------------------------------------------------------- ball query and label statistics


def test_ballquery_first_hit_padding_empty_balls_untouched_strict_radius():
    B, N, M, ns = 2, 200, 30, 10
    xyz = torch.rand(B, N, 3, generator=_gen(0))
    new = torch.cat([xyz[:, :20] + 0.01, torch.full((B, 10, 3), 5.0)], 1).contiguous()  # the last 10 balls are empty
    for radius, nsample in ((0.15, ns), (0.15, 1), (0.4, 3)):
        a, b = both("ballquery_cuda", B, N, M, radius, nsample, new, xyz, outs=[i32(B, M, nsample, fill=7)])
        assert_same(a, b, f"r={radius} nsample={nsample}")
        assert (a[0][:, 20:] == 7).all()  # empty balls: the kernel writes nothing
    # fewer points in the ball than nsample: the first hit repeats
    few = both("ballquery_cuda", B, N, M, 0.05, 16, new, xyz, outs=[i32(B, M, 16, fill=7)])[0][0]
    row = few[0, 0]
    assert (row[row != row[0]] > row[0]).all() and (row == row[0]).sum() > 1
    # strict d2 < r**2: lattice points at distance exactly 1 are out, with duplicates they count twice
    lat = torch.cat([lattice(3, 3, 1, B=1), lattice(3, 3, 1, B=1)[:, :2]], 1).contiguous()
    a, b = both("ballquery_cuda", 1, 11, 1, 1.0, 6, lat[:, 4:5].contiguous(), lat, outs=[i32(1, 1, 6, fill=-5)])
    assert_same(a, b)
    assert a[0].tolist() == [[[4, 4, 4, 4, 4, 4]]]
    a, b = both("ballquery_cuda", 1, 11, 1, 1.0, 6, lat[:, :1].contiguous(), lat, outs=[i32(1, 1, 6)])
    assert_same(a, b)
    assert a[0].tolist() == [[[0, 9, 0, 0, 0, 0]]]  # point 9 duplicates point 0


def test_labelstat_functions():
    B, N, M, ns, C = 2, 150, 25, 6, 4
    xyz = torch.rand(B, N, 3, generator=_gen(1))
    new = torch.cat([xyz[:, :20], torch.full((B, 5, 3), 9.0)], 1).contiguous()
    lab = torch.randint(0, 3, (B, N, C), generator=_gen(2), dtype=torch.int32)
    a, b = both("labelstat_ballrange_cuda", B, N, M, 0.3, C, new, xyz, lab, outs=[i32(B, M, C, fill=9)])
    assert_same(a, b, "ballrange")
    assert (a[0][:, 20:] == 0).all()  # written (zeroed) even for empty balls
    a, b = both("labelstat_and_ballquery_cuda", B, N, M, 0.3, ns, C, new, xyz, lab,
                outs=[i32(B, M, ns, fill=3), i32(B, M, C, fill=9)])
    assert_same(a, b, "and_ballquery")
    assert (a[0][:, 20:] == 3).all() and (a[1][:, 20:] == 0).all()
    for nsample in (ns, 1):
        idx = torch.randint(0, N, (B, M, nsample), generator=_gen(3), dtype=torch.int32)
        a, b = both("labelstat_idx_cuda", B, N, M, nsample, C, lab, idx, outs=[i32(B, M, C, fill=9)])
        assert_same(a, b, "idx")


# --------------------------------------------------------------------------- knn / nearest neighbours


def test_knnquery_ties_padding_and_the_unadvanced_dist2():
    B, N, M = 2, 120, 17
    xyz = torch.rand(B, N, 3, generator=_gen(4))
    new = torch.rand(B, M, 3, generator=_gen(5))
    for n, nsample in ((N, 8), (N, 1), (5, 8), (N, 210)):  # 210 > the kernel's best[200]: no cap here
        p = xyz[:, :n].contiguous()
        a, b = both("knnquery_cuda", B, n, M, nsample, p, new, outs=[i32(B, M, nsample), torch.full((B, M, nsample), -3.0)])
        assert_same(a, b, f"n={n} nsample={nsample}")
        idx, d2 = a
        assert (d2.view(-1)[nsample:] == -3).all()  # only the first nsample entries are written
        if n < nsample:
            assert (idx[..., n:] == 0).all() and torch.isinf(d2.view(-1)[n:nsample]).all()
    # lattice ties and duplicate points: ties go to the lower index
    lat = torch.cat([lattice(4, 4, 2), lattice(4, 4, 2)[:, :5]], 1).contiguous()
    n = lat.shape[1]
    a, b = both("knnquery_cuda", 2, n, n, 9, lat, lat, outs=[i32(2, n, 9), torch.zeros(2, n, 9)])
    assert_same(a, b, "lattice")
    assert a[0][0, 0, :2].tolist() == [0, 32]  # point 32 duplicates point 0


def test_nearestneighbor_squared_ties_and_fewer_than_three():
    B, n, m = 2, 40, 30
    unk = torch.rand(B, n, 3, generator=_gen(6))
    known = torch.rand(B, m, 3, generator=_gen(7))
    for mm in (m, 2, 1):
        kn = known[:, :mm].contiguous()
        a, b = both("nearestneighbor_cuda", B, n, mm, unk, kn, outs=[torch.zeros(B, n, 3), i32(B, n, 3, fill=4)])
        assert_same(a, b, f"m={mm}")
        if mm < 3:
            assert torch.isinf(a[0][..., mm:]).all() and (a[1][..., mm:] == 0).all()
    a, _ = both("nearestneighbor_cuda", B, n, m, unk, known, outs=[torch.zeros(B, n, 3), i32(B, n, 3)])
    ref = ((unk[:, :, None] - known[:, None]) ** 2).sum(-1).sort(-1).values[..., :3]
    assert torch.allclose(a[0], ref, atol=1e-6)  # squared, not Euclidean
    nan = known[:, :3].clone()
    nan[:, 1] = float("nan")  # a NaN distance fails every `<`: the slot keeps (1e40 -> inf, 0)
    a, b = both("nearestneighbor_cuda", B, n, 3, unk, nan, outs=[torch.zeros(B, n, 3), i32(B, n, 3, fill=4)])
    assert_same(a, b, "NaN")
    assert torch.isinf(a[0][..., 2]).all() and (a[1][..., 2] == 0).all()
    a, b = both("knnquery_cuda", B, 3, n, 3, nan, unk, outs=[i32(B, n, 3), torch.zeros(B, n, 3)])
    assert_same(a, b, "NaN knn")
    lat = lattice(3, 3, 3)
    a, b = both("nearestneighbor_cuda", 2, 27, 27, lat, lat, outs=[torch.zeros(2, 27, 3), i32(2, 27, 3)])
    assert_same(a, b, "lattice ties")
    assert a[1][0, 13].tolist() == [13, 4, 10]


def test_featuredistribute_far_points_get_minus_one():
    B, n, m = 2, 50, 60
    mx = torch.rand(B, n, 3, generator=_gen(8))
    xyz = torch.cat([torch.rand(B, m - 3, 3, generator=_gen(9)), torch.full((B, 3, 3), 400.0)], 1).contiguous()
    a, b = both("featuredistribute_cuda", B, n, m, mx, xyz, outs=[i32(B, m, fill=5)])
    assert_same(a, b)
    assert (a[0][:, -3:] == -1).all() and (a[0][:, :-3] >= 0).all()
    lat = lattice(3, 3, 1)
    a, b = both("featuredistribute_cuda", 2, 9, 1, lat, torch.full((2, 1, 3), 0.5), outs=[i32(2, 1)])
    assert_same(a, b, "ties")
    assert a[0].tolist() == [[0], [0]]


# --------------------------------------------------------------------------- farthest point sampling


def _fps_both(B, n, m, pts, temp=None, force_loop=False, monkeypatch=None):
    temp = torch.full((B, n), 1e10) if temp is None else temp
    if force_loop:
        monkeypatch.setattr(PW, "_fps_native", lambda *a: None)
    a, b = both("furthestsampling_cuda", B, n, m, pts, outs=[temp, i32(B, m, fill=-9)])
    if force_loop:
        monkeypatch.undo()
    return a, b


@pytest.mark.parametrize("force_loop", [False, True])
def test_furthestsampling_matches_kernel(force_loop, monkeypatch):
    pts = torch.rand(2, 700, 3, generator=_gen(10)) * 2 - 1
    pts[:, 1:6] *= 0.01  # near the origin: PointWeb does not skip them (pointnet2 does)
    for n, m in ((700, 200), (700, 1), (1, 3), (3, 7)):  # 3 points, 7 samples: repeats
        p = pts[:, :n].contiguous()
        a, b = _fps_both(2, n, m, p, force_loop=force_loop, monkeypatch=monkeypatch)
        assert_same(a, b, f"n={n} m={m}")
    # lattice ties, block sizes 512 (n=600) and 1024 (n=1152, beyond pointnet2's 512 threads), duplicates
    for shape, m in (((10, 10, 6), 120), ((12, 12, 8), 150), ((3, 3, 3), 40)):
        lat = lattice(*shape)
        a, b = _fps_both(2, lat.shape[1], m, lat, force_loop=force_loop, monkeypatch=monkeypatch)
        assert_same(a, b, f"lattice {shape}")
    # the caller's temp takes part (not only 1e10) and is written back
    temp = torch.full((2, 700), 1e10)
    temp[:, 100:300] = 0.01
    a, b = _fps_both(2, 700, 50, pts, temp=temp, force_loop=force_loop, monkeypatch=monkeypatch)
    assert_same(a, b, "temp")
    assert not ((a[1][:, :, None] >= 100) & (a[1][:, :, None] < 300)).any()


def test_furthestsampling_no_near_origin_skip_and_block_size():
    pts = torch.tensor([[[0.0, 0, 0], [0.01, 0, 0], [1, 0, 0], [0, 2, 0]]])
    idx, temp = i32(1, 4), torch.full((1, 4), 1e10)
    PC.furthestsampling_cuda(1, 4, 4, pts, temp, idx)
    assert idx.tolist() == [[0, 3, 2, 1]]  # pointnet2 would never take point 1
    assert torch.allclose(temp, torch.tensor([[0.0, 1e-4, 0.0, 0.0]]))  # distances to the first m-1 samples
    # 1152 points, two at the same farthest distance: with 1024 threads point 1024 (thread 0, second round)
    # wins, with pointnet2's 512 threads point 512 (thread 0, second round) would
    pts = 1 + 0.1 * torch.rand(1, 1152, 3, generator=_gen(16))
    pts[0, 0] = 0
    pts[0, 512] = torch.tensor([10.0, 0, 0])
    pts[0, 1024] = torch.tensor([0.0, 10, 0])
    a, b = _fps_both(1, 1152, 2, pts)
    assert_same(a, b)
    assert a[1].tolist() == [[0, 1024]]
    from pcgeom.compat import pointnet2_ops
    assert pointnet2_ops.furthest_point_sample(pts, 2).tolist() == [[0, 512]]


# --------------------------------------------------------------------------- feature ops and gradients


def _feature_cases(seed=11):
    g = _gen(seed)
    B, C, n, m, ns = 2, 5, 60, 20, 7
    f = torch.randn(B, C, n, generator=g)
    idx = torch.randint(0, n, (B, m, ns), generator=g, dtype=torch.int32)
    idx[:, 0] = 3  # repeated indices accumulate
    return g, B, C, n, m, ns, f, idx


def test_grouping_and_gathering_forward_backward():
    g, B, C, n, m, ns, f, idx = _feature_cases()
    for nsample in (ns, 1):
        i = idx[..., :nsample].contiguous()
        a, b = both("grouping_forward_cuda", B, C, n, m, nsample, f, i, outs=[torch.full((B, C, m, nsample), 9.0)])
        assert_same(a, b, "grouping")
        go = torch.randn(B, C, m, nsample, generator=g)
        a, b = both("grouping_backward_cuda", B, C, n, m, nsample, go, i, outs=[torch.ones(B, C, n)])
        assert_same(a, b, "grouping backward")  # accumulates into the caller's ones
        x = f.double().requires_grad_()
        torch.autograd.backward(x.gather(2, i.long().view(B, 1, -1).expand(B, C, -1)), go.double().view(B, C, -1))
        assert torch.allclose(a[0].double() - 1, x.grad, atol=1e-5)
    a, b = both("grouping_int_forward_cuda", B, C, n, m, ns, torch.randint(-50, 50, (B, C, n), generator=g), idx,
                outs=[torch.zeros(B, C, m, ns, dtype=torch.long)])
    assert_same(a, b, "grouping_int")
    gi = idx[..., 0].contiguous()
    for fwd, bwd, order in (("gathering_forward_cuda", "gathering_backward_cuda", (B, C, n, m)),
                            ("featuregather_forward_cuda", "featuregather_backward_cuda", (B, n, m, C))):
        a, b = both(fwd, *order, f, gi, outs=[torch.full((B, C, m), 9.0)])
        assert_same(a, b, fwd)
        go = torch.randn(B, C, m, generator=g)
        a, b = both(bwd, *order, go, gi, outs=[torch.ones(B, C, n)])
        assert_same(a, b, bwd)
        x = f.double().requires_grad_()
        torch.autograd.backward(x.gather(2, gi.long().view(B, 1, m).expand(B, C, m)), go.double())
        assert torch.allclose(a[0].double() - 1, x.grad, atol=1e-5)


def test_interpolation_writes_and_its_backward_adds():
    g, B, C, n, m, ns, f, idx = _feature_cases(12)
    i3 = idx[..., :3].contiguous()
    w = torch.rand(B, m, 3, generator=g)
    a, b = both("interpolation_forward_cuda", B, C, n, m, f, i3, w, outs=[torch.full((B, C, m), 9.0)])
    assert_same(a, b, "forward")
    ref = (f.gather(2, i3.long().view(B, 1, -1).expand(B, C, -1)).view(B, C, m, 3) * w[:, None]).sum(-1)
    assert torch.allclose(a[0], ref, atol=1e-6)  # written: the 9s are gone (POSTECH's adds)
    go = torch.randn(B, C, m, generator=g)
    a, b = both("interpolation_backward_cuda", B, C, m, n, go, i3, w, outs=[torch.ones(B, C, n)])
    assert_same(a, b, "backward")
    x = f.double().requires_grad_()
    y = (x.gather(2, i3.long().view(B, 1, -1).expand(B, C, -1)).view(B, C, m, 3) * w.double()[:, None]).sum(-1)
    torch.autograd.backward(y, go.double())
    assert torch.allclose(a[0].double() - 1, x.grad, atol=1e-5)


def test_float64_and_non_contiguous_outputs():
    xyz = torch.rand(2, 50, 3, dtype=torch.float64, generator=_gen(13))
    idx = torch.zeros(2, 8, 2, dtype=torch.int32).transpose(1, 2)  # (2, 2, 8) non-contiguous view
    d2 = torch.zeros(2, 2, 8, dtype=torch.float64)
    PC.knnquery_cuda(2, 50, 2, 8, xyz, xyz[:, :2], idx, d2)
    ref = torch.cdist(xyz[:, :2], xyz).pow(2).topk(8, largest=False)
    assert torch.equal(idx.long(), ref.indices) and torch.allclose(d2[0, 0], ref.values[0, 0])


@pytest.mark.parametrize("device", DEVICES)
def test_every_function_on_each_device(device):
    g = _gen(17)
    B, N, M, ns, C, L = 2, 150, 24, 6, 5, 3
    xyz = torch.rand(B, N, 3, generator=g).to(device)
    new = torch.cat([xyz[:, :20] + 0.01, torch.full((B, 4, 3), 7.0, device=device)], 1).contiguous()
    idx = torch.randint(0, N, (B, M, ns), generator=g, dtype=torch.int32).to(device)
    f = torch.randn(B, C, N, generator=g).to(device)
    lab = torch.randint(0, 3, (B, N, L), generator=g, dtype=torch.int32).to(device)
    w = torch.rand(B, M, 3, generator=g).to(device)

    def z(*shape, dtype=torch.float32, fill=0):
        return torch.full(shape, fill, dtype=dtype, device=device)

    cases = [
        ("ballquery_cuda", (B, N, M, 0.2, ns, new, xyz), [z(B, M, ns, dtype=torch.int32, fill=7)]),
        ("knnquery_cuda", (B, N, M, ns, xyz, new), [z(B, M, ns, dtype=torch.int32), z(B, M, ns, fill=-3)]),
        ("furthestsampling_cuda", (B, N, 40, xyz), [z(B, N, fill=1e10), z(B, 40, dtype=torch.int32)]),
        ("nearestneighbor_cuda", (B, M, N, new, xyz), [z(B, M, 3), z(B, M, 3, dtype=torch.int32)]),
        ("featuredistribute_cuda", (B, M, N, new, xyz * 300), [z(B, N, dtype=torch.int32)]),
        ("labelstat_idx_cuda", (B, N, M, ns, L, lab, idx), [z(B, M, L, dtype=torch.int32)]),
        ("labelstat_ballrange_cuda", (B, N, M, 0.2, L, new, xyz, lab), [z(B, M, L, dtype=torch.int32)]),
        ("labelstat_and_ballquery_cuda", (B, N, M, 0.2, ns, L, new, xyz, lab),
         [z(B, M, ns, dtype=torch.int32, fill=5), z(B, M, L, dtype=torch.int32)]),
        ("grouping_forward_cuda", (B, C, N, M, ns, f, idx), [z(B, C, M, ns)]),
        ("grouping_backward_cuda", (B, C, N, M, ns, torch.randn(B, C, M, ns, generator=g).to(device), idx),
         [z(B, C, N, fill=1)]),
        ("grouping_int_forward_cuda", (B, C, N, M, ns, torch.randint(0, 9, (B, C, N), generator=g).to(device), idx),
         [z(B, C, M, ns, dtype=torch.long)]),
        ("gathering_forward_cuda", (B, C, N, M, f, idx[..., 0].contiguous()), [z(B, C, M)]),
        ("gathering_backward_cuda", (B, C, N, M, torch.randn(B, C, M, generator=g).to(device),
                                     idx[..., 0].contiguous()), [z(B, C, N, fill=1)]),
        ("featuregather_forward_cuda", (B, N, M, C, f, idx[..., 1].contiguous()), [z(B, C, M)]),
        ("featuregather_backward_cuda", (B, N, M, C, torch.randn(B, C, M, generator=g).to(device),
                                         idx[..., 1].contiguous()), [z(B, C, N, fill=1)]),
        ("interpolation_forward_cuda", (B, C, N, M, f, idx[..., :3].contiguous(), w), [z(B, C, M, fill=9)]),
        ("interpolation_backward_cuda", (B, C, M, N, torch.randn(B, C, M, generator=g).to(device),
                                         idx[..., :3].contiguous(), w), [z(B, C, N, fill=1)]),
    ]
    for fn, args, outs in cases:
        a, b = both(fn, *args, outs=outs)
        assert all(t.device == xyz.device for t in a)
        assert_same([t.cpu() for t in a], [t.cpu() for t in b], fn)


# --------------------------------------------------------------------------- dispatch and bad input


def test_postech_calls_keep_the_postech_path():
    xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [5, 0, 0], [9, 0, 0]])
    off = torch.tensor([2, 4], dtype=torch.int32)
    idx, d2 = i32(4, 3), torch.zeros(4, 3)
    PC.knnquery_cuda(4, 3, xyz, xyz, off, off, idx, d2)  # POSTECH: pads with the cloud's first point, 1e10
    assert idx.tolist() == [[0, 1, 0], [1, 0, 0], [2, 3, 2], [3, 2, 2]] and d2[2, 2] == 1e10
    idx, d2 = i32(2, 2, 3), torch.zeros(2, 2, 3)
    PC.knnquery_cuda(2, 2, 2, 3, xyz.view(2, 2, 3), xyz.view(2, 2, 3), idx, d2)  # PointWeb: pads with 0, inf
    assert idx.tolist() == [[[0, 1, 0], [1, 0, 0]], [[0, 1, 0], [1, 0, 0]]] and torch.isinf(d2[0, 0, 2])
    fidx = i32(2)
    PC.furthestsampling_cuda(1, 4, xyz, torch.tensor([4], dtype=torch.int32), torch.tensor([2], dtype=torch.int32),
                             torch.zeros(4), fidx)
    assert fidx.tolist() == [0, 3]
    out = torch.ones(4, 1)
    PC.interpolation_forward_cuda(4, 1, 1, xyz[:, :1], i32(4, 1), torch.ones(4, 1), out)
    assert out.flatten().tolist() == [1.0] * 4  # POSTECH adds (0 + 1)


@pytest.mark.parametrize("fn,args", [
    ("knnquery_cuda", (1, 2, 3)),
    ("knnquery_cuda", (1, 2, 3.0, 4, None, None, None, None)),
    ("furthestsampling_cuda", (1, 2, 3, 4, 5)),
    ("grouping_forward_cuda", (1,) * 7),
    ("interpolation_backward_cuda", (1,) * 6),
])
def test_a_call_matching_neither_signature_names_both(fn, args):
    with pytest.raises(TypeError, match=rf"POSTECH point-transformer's {fn}\(.*\) or PointWeb's {fn}\(b, .*got {len(args)} arguments"):
        getattr(PC, fn)(*args)


def test_keywords_are_refused_like_the_compiled_extension():
    with pytest.raises(TypeError, match="positional only"):
        PC.grouping_forward_cuda(1, 1, 1, torch.zeros(1, 1), i32(1, 1), output=torch.zeros(1, 1, 1))


def test_bad_input_names_the_argument():
    xyz = torch.rand(2, 10, 3, generator=_gen(14))
    f = torch.rand(2, 4, 10, generator=_gen(15))
    with pytest.raises(TypeError, match="idx must be torch.int32, got torch.float32"):
        PC.ballquery_cuda(2, 10, 4, 0.2, 3, xyz[:, :4], xyz, torch.zeros(2, 4, 3))
    with pytest.raises(ValueError, match=r"new_xyz must have shape \(2, 5, 3\)"):
        PC.ballquery_cuda(2, 10, 5, 0.2, 3, xyz[:, :4], xyz, i32(2, 5, 3))
    with pytest.raises(ValueError, match="radius must be >= 0"):
        PC.ballquery_cuda(2, 10, 4, -0.2, 3, xyz[:, :4], xyz, i32(2, 4, 3))
    with pytest.raises(ValueError, match="nsample must be >= 1"):
        PC.knnquery_cuda(2, 10, 4, 0, xyz, xyz[:, :4], i32(2, 4, 0), torch.zeros(2, 4, 0))
    # a PointWeb call whose tensors do not fit its sizes: a ValueError, and a TypeError (maybe meant for POSTECH)
    with pytest.raises(PC.PointWebArgumentError, match=r"knnquery_cuda \(PointWeb\): xyz must have shape \(2, 12, 3\)"):
        PC.knnquery_cuda(2, 12, 4, 3, xyz, xyz[:, :4], i32(2, 4, 3), torch.zeros(2, 4, 3))
    assert issubclass(PC.PointWebArgumentError, ValueError) and issubclass(PC.PointWebArgumentError, TypeError)
    with pytest.raises(ValueError, match=r"idx values must be in \[0, 10\).*max 10"):
        PC.grouping_forward_cuda(2, 4, 10, 1, 1, f, i32(2, 1, 1, fill=10), torch.zeros(2, 4, 1, 1))
    with pytest.raises(ValueError, match=r"distribute_idx values must be in \[0, 10\).*min -1"):
        PC.featuregather_forward_cuda(2, 10, 1, 4, f, i32(2, 1, fill=-1), torch.zeros(2, 4, 1))
    with pytest.raises(ValueError, match=r"out must have shape \(2, 4, 1, 2\)"):
        PC.grouping_forward_cuda(2, 4, 10, 1, 2, f, i32(2, 1, 2), torch.zeros(2, 4, 1, 1))
    with pytest.raises(TypeError, match="b must be an int"):
        PC.gathering_forward_cuda(2.0, 4, 10, 1, f, i32(2, 1), torch.zeros(2, 4, 1))
    with pytest.raises(TypeError, match="points must be int64"):
        PC.grouping_int_forward_cuda(2, 4, 10, 1, 1, f, i32(2, 1, 1), torch.zeros(2, 4, 1, 1, dtype=torch.long))
    with pytest.raises(TypeError, match="label_stat must be an int32"):
        PC.labelstat_idx_cuda(2, 10, 1, 1, 4, f.transpose(1, 2), i32(2, 1, 1), i32(2, 1, 4))
    with pytest.raises(ValueError, match="temp must hold running distances >= 0"):
        PC.furthestsampling_cuda(2, 10, 3, xyz, -torch.ones(2, 10), i32(2, 3))
    with pytest.raises(ValueError, match="m=3 samples from clouds of n=0"):
        PC.furthestsampling_cuda(2, 0, 3, xyz[:, :0], torch.ones(2, 0), i32(2, 3))
    # mixed devices (the meta device stands in for a second one)
    meta = xyz.to("meta")
    with pytest.raises(ValueError, match="xyz must be on cpu like new_xyz"):
        PC.ballquery_cuda(2, 10, 4, 0.2, 3, xyz[:, :4], meta, i32(2, 4, 3))
    with pytest.raises(ValueError, match="known must be on cpu like unknown"):
        PC.nearestneighbor_cuda(2, 4, 10, xyz[:, :4], meta, torch.zeros(2, 4, 3), i32(2, 4, 3))
    with pytest.raises(ValueError, match="idx must be on meta"):
        PC.gathering_forward_cuda(2, 4, 10, 1, f.to("meta"), i32(2, 1), torch.zeros(2, 4, 1, device="meta"))
    with pytest.raises(ValueError, match="dist2 must be on cpu"):
        PC.nearestneighbor_cuda(2, 4, 10, xyz[:, :4], xyz, torch.zeros(2, 4, 3, device="meta"), i32(2, 4, 3))


def test_shim_serves_pointweb_names():
    import pcgeom.compat

    pcgeom.compat.enable_shims()
    import pointops_cuda

    assert pointops_cuda.__pcgeom_shim__ == "pcgeom.compat.pointops_cuda"
    assert {"ballquery_cuda", "featuredistribute_cuda", "labelstat_and_ballquery_cuda",
            "nearestneighbor_cuda"} <= set(dir(pointops_cuda))


# --------------------------------------------------------------------------- PointWeb's model end to end


@pytest.mark.slow
def test_pointweb_seg_through_shims_matches_the_transcription():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "drive_pointweb.py")], cwd=HERE, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert "OK pointweb" in proc.stdout
