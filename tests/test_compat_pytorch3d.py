"""pcgeom.compat.pytorch3d: pytorch3d 0.7.9's point ops, checked against float64 brute force and upstream's rules."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pcgeom.compat.pytorch3d.loss import chamfer_distance
from pcgeom.compat.pytorch3d.ops import ball_query, knn_gather, knn_points, sample_farthest_points
from pcgeom.compat.pytorch3d.ops import knn as knn_module
from pcgeom.compat.pytorch3d.ops.sample_farthest_points import sample_farthest_points_naive
from pcgeom.compat.pytorch3d.structures import Pointclouds

pytestmark = pytest.mark.ops


def _clouds(N, P, D=3, seed=0, dtype=torch.float64, grid=False):
    g = torch.Generator().manual_seed(seed)
    if grid:  # integer lattice: many exactly equal distances
        return torch.randint(0, 3, (N, P, D), generator=g).to(dtype)
    return torch.randn(N, P, D, generator=g, dtype=dtype)


def _brute_knn(p1, p2, l1, l2, K, norm):
    """float64 loops: (dists, idx) with upstream's 0 padding, ties to the lower index."""
    N, P1, _ = p1.shape
    d_out = torch.zeros(N, P1, K, dtype=torch.float64)
    i_out = torch.zeros(N, P1, K, dtype=torch.int64)
    for n in range(N):
        for i in range(int(l1[n])):
            diff = p1[n, i].double() - p2[n, : int(l2[n])].double()
            d = diff.abs().sum(-1) if norm == 1 else diff.square().sum(-1)
            order = sorted(range(len(d)), key=lambda j: (float(d[j]), j))[:K]
            for k, j in enumerate(order):
                d_out[n, i, k], i_out[n, i, k] = d[j], j
    return d_out, i_out


# ----------------------------------------------------------------------------------------------- knn_points


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("grid", [False, True])
def test_knn_points_equals_brute_force_on_ragged_batches(norm, grid):
    p1, p2 = _clouds(3, 9, seed=1, grid=grid), _clouds(3, 7, seed=2, grid=grid)
    l1, l2 = torch.tensor([9, 4, 0]), torch.tensor([7, 2, 5])
    for K in (1, 3, 7, 9):  # K > lengths2 and K > P2: padded slots
        out = knn_points(p1, p2, l1, l2, norm=norm, K=K, return_nn=True)
        d, i = _brute_knn(p1, p2, l1, l2, K, norm)
        assert torch.equal(out.idx, i), (K, out.idx, i)
        torch.testing.assert_close(out.dists, d, rtol=0, atol=1e-12)
        pad = torch.arange(K)[None, None] >= l2[:, None, None]
        want_nn = torch.where(pad[..., None], 0.0, p2[torch.arange(3)[:, None, None], i])
        assert torch.equal(out.knn, want_nn)


def test_knn_points_unpacks_into_three_and_pads_with_zero():
    p = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 2, 0]]])
    dists, idx, nn = knn_points(p, p[:, :2], lengths1=torch.tensor([2]), K=3)
    assert nn is None
    assert idx.tolist() == [[[0, 1, 0], [1, 0, 0], [0, 0, 0]]]
    assert dists.tolist() == [[[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]]
    assert knn_points(p, p, K=2, version=3, return_sorted=False).idx.tolist() == [[[0, 1], [1, 0], [2, 0]]]


@pytest.mark.parametrize("norm", [1, 2])
def test_knn_points_gradcheck_float64(norm):
    p1 = _clouds(2, 6, seed=3).requires_grad_()
    p2 = _clouds(2, 5, seed=4).requires_grad_()
    l1, l2 = torch.tensor([6, 3]), torch.tensor([5, 2])
    assert torch.autograd.gradcheck(lambda a, b: knn_points(a, b, l1, l2, norm=norm, K=3).dists, (p1, p2))


def test_knn_points_l1_gradient_uses_upstreams_sign_at_equal_coordinates():
    # upstream: sign = p1_d > p2_d ? 1 : -1, so an equal coordinate gets -1 (torch's abs would give 0)
    p1 = torch.tensor([[[1.0, 2.0, 3.0]]], requires_grad=True)
    p2 = torch.tensor([[[1.0, 0.0, 5.0]]], requires_grad=True)
    knn_points(p1, p2, norm=1, K=1).dists.sum().backward()
    assert p1.grad.tolist() == [[[-1.0, 1.0, -1.0]]]
    assert p2.grad.tolist() == [[[1.0, -1.0, 1.0]]]


def test_knn_points_l1_chunks_do_not_change_the_answer(monkeypatch):
    p1, p2 = _clouds(2, 23, seed=5), _clouds(2, 17, seed=6)
    l1, l2 = torch.tensor([23, 11]), torch.tensor([17, 4])
    whole = knn_points(p1, p2, l1, l2, norm=1, K=5)
    monkeypatch.setattr(knn_module, "_L1_BLOCK", 2 * 17 * 3)  # 3 rows per block: many block edges
    chunked = knn_points(p1, p2, l1, l2, norm=1, K=5)
    assert torch.equal(whole.idx, chunked.idx) and torch.equal(whole.dists, chunked.dists)


def test_knn_points_errors():
    x, y = torch.rand(2, 5, 3), torch.rand(2, 4, 3)
    with pytest.raises(ValueError, match="pts1 and pts2 must have the same batch dimension."):
        knn_points(x, y[:1])
    with pytest.raises(ValueError, match="pts1 and pts2 must have the same point dimension."):
        knn_points(x, y[..., :2])
    for norm in (0, 3):
        with pytest.raises(ValueError, match="Support for 1 or 2 norm."):
            knn_points(x, y, norm=norm)
    with pytest.raises(ValueError, match="knn_points: K must be >= 1, got 0"):
        knn_points(x, y, K=0)
    with pytest.raises(ValueError, match="lengths2 values must be in"):
        knn_points(x, y, lengths2=torch.tensor([5, 1]))


def test_knn_gather_zeroes_slots_past_lengths():
    x = torch.arange(12.0).reshape(2, 3, 2)
    idx = torch.tensor([[[2, 1, 0]], [[1, 0, 2]]])
    out = knn_gather(x, idx, torch.tensor([3, 1]))
    assert out.tolist() == [[[[4.0, 5.0], [2.0, 3.0], [0.0, 1.0]]], [[[8.0, 9.0], [0.0, 0.0], [0.0, 0.0]]]]
    assert knn_gather(x.long(), idx).dtype == torch.int64
    with pytest.raises(ValueError, match="x and idx must have same batch dimension."):
        knn_gather(x, idx[:1])
    with pytest.raises(ValueError, match=r"idx values must be in \[0, 3\)"):
        knn_gather(x, idx + 1)


# ----------------------------------------------------------------------------------------------- ball_query


def _brute_ball(p1, p2, l1, l2, K, radius):
    r2 = float(torch.tensor(radius, dtype=torch.float32) ** 2)  # squared in float32, as upstream
    N, P1, _ = p1.shape
    idx = torch.full((N, P1, K), -1)
    d_out = torch.zeros(N, P1, K, dtype=torch.float64)
    for n in range(N):
        for i in range(int(l1[n])):
            c = 0
            for j in range(int(l2[n])):
                d = float((p1[n, i].double() - p2[n, j].double()).square().sum())
                if d < r2 and c < K:
                    idx[n, i, c], d_out[n, i, c] = j, d
                    c += 1
    return d_out, idx


def test_ball_query_is_the_first_k_in_index_order_strictly_inside():
    p1, p2 = _clouds(2, 8, seed=7), _clouds(2, 30, seed=8)
    l1, l2 = torch.tensor([8, 5]), torch.tensor([30, 9])
    for K, r in ((3, 1.0), (10, 1.7), (40, 3.0)):
        out = ball_query(p1, p2, l1, l2, K=K, radius=r)
        d, i = _brute_ball(p1, p2, l1, l2, K, r)
        assert torch.equal(out.idx, i)
        torch.testing.assert_close(out.dists, d, rtol=0, atol=1e-12)
        assert torch.equal(out.knn, torch.where((i < 0)[..., None], 0.0, p2[torch.arange(2)[:, None, None], i.clamp_min(0)]))


def test_ball_query_boundary_uses_float32_radius_squared():
    # Points on a line around the ball's edge, a few ulps apart: inside exactly when x*x (in the input dtype)
    # < float32(radius)**2 squared in float32 -- for float64 input too, where 0.1 * 0.1 in double is not it.
    radius = 0.1
    r32 = torch.tensor(radius, dtype=torch.float32)
    r2 = r32 * r32
    for dtype in (torch.float32, torch.float64):
        edge = r2.to(dtype).sqrt()
        xs = [edge]
        for _ in range(6):
            xs = [torch.nextafter(xs[0], torch.tensor(0.0, dtype=dtype))] + xs + [
                torch.nextafter(xs[-1], torch.tensor(1.0, dtype=dtype))]
        xs.append(torch.tensor(radius, dtype=dtype))  # 0.1 itself: inside in float64 (0.01 < r2), not in double math
        cloud = torch.stack(xs)[None, :, None]
        got = ball_query(torch.zeros(1, 1, 1, dtype=dtype), cloud, K=len(xs), radius=radius).idx[0, 0]
        want = [j for j, x in enumerate(xs) if float(x * x) < float(r2)]
        assert 0 < len(want) < len(xs)
        assert got.tolist() == want + [-1] * (len(xs) - len(want)), dtype
    assert float(torch.tensor(0.1, dtype=torch.float64) ** 2) < float(r2)  # the float64 case is a real difference


def test_ball_query_errors_and_padding():
    x = torch.rand(1, 4, 3)
    with pytest.raises(ValueError, match="radius must be >= 0.0, got -0.5"):
        ball_query(x, x, radius=-0.5)
    with pytest.raises(ValueError, match="K must be >= 1, got 0"):
        ball_query(x, x, K=0)
    out = ball_query(x, x, K=2, radius=0.0, return_nn=False)
    assert out.idx.eq(-1).all() and out.dists.eq(0).all() and out.knn is None


def test_ball_query_gradcheck_float64():
    p1, p2 = _clouds(1, 4, seed=9).requires_grad_(), _clouds(1, 6, seed=10).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: ball_query(a, b, K=4, radius=2.0).dists, (p1, p2))


# ----------------------------------------------------------------------------------------------- FPS


def _brute_fps(points, length, K, start=0):
    pts = points[:length].double()
    chosen = [start]
    best = torch.full((length,), float("inf"), dtype=torch.float64)
    while len(chosen) < min(K, length):
        best = torch.minimum(best, (pts - pts[chosen[-1]]).square().sum(-1))
        cand = [(float(best[j]), -j) for j in range(length) if j not in chosen]
        chosen.append(-max(cand)[1])
    return chosen


@pytest.mark.parametrize("fps", [sample_farthest_points, sample_farthest_points_naive])
def test_sample_farthest_points_equals_brute_force(fps):
    pts = _clouds(3, 40, seed=11)
    lengths = torch.tensor([40, 13, 1])
    K = [20, 15, 3]
    sampled, idx = fps(pts, lengths, K=K)
    assert idx.shape == (3, 20) and sampled.dtype == torch.float64
    for n in range(3):
        want = _brute_fps(pts[n], int(lengths[n]), K[n])
        assert idx[n].tolist() == want + [-1] * (20 - len(want))
        assert torch.equal(sampled[n, : len(want)], pts[n, want]) and sampled[n, len(want):].eq(0).all()


def test_sample_farthest_points_ties_never_pick_a_point_twice():
    pts = torch.tensor([[[0.0, 0], [0, 0], [1, 0], [1, 0]]])
    for fps in (sample_farthest_points, sample_farthest_points_naive):
        assert fps(pts, K=4)[1].tolist() == [[0, 2, 1, 3]]


def test_sample_farthest_points_random_start_draws_like_upstream():
    pts = _clouds(4, 30, seed=12, dtype=torch.float32)
    torch.manual_seed(3)
    _, idx = sample_farthest_points(pts, K=5, random_start_point=True)
    torch.manual_seed(3)
    assert idx[:, 0].tolist() == torch.randint(high=30, size=(4,)).tolist()
    lengths = torch.tensor([30, 7, 12, 1])
    torch.manual_seed(4)
    _, idx = sample_farthest_points(pts, lengths, K=5, random_start_point=True)
    torch.manual_seed(4)
    assert idx[:, 0].tolist() == (lengths * torch.rand(4)).long().tolist()


def test_sample_farthest_points_gradient_and_errors():
    pts = _clouds(2, 10, seed=13).requires_grad_()
    assert torch.autograd.gradcheck(lambda p: sample_farthest_points(p, torch.tensor([10, 4]), K=6)[0], (pts,))
    with pytest.raises(ValueError, match="K must be >= 1, got 0"):
        sample_farthest_points(pts, K=0)
    with pytest.raises(ValueError, match="K and points must have the same batch dimension"):
        sample_farthest_points(pts, K=[1, 2, 3])
    with pytest.raises(ValueError, match="A value in lengths was too large."):
        sample_farthest_points(pts, torch.tensor([11, 2]), K=2)
    # upstream's rule for a cloud asked for 0 samples: its start index, then padding; an empty cloud is padding
    _, idx = sample_farthest_points(pts.detach(), torch.tensor([0, 5]), K=[2, 0])
    assert idx.tolist() == [[-1, -1], [0, -1]]


# ----------------------------------------------------------------------------------------------- chamfer


def _brute_chamfer_terms(x, y, lx, ly, nx, ny, norm, abs_cosine):
    """Per-point float64 terms x -> y: (N, P1) distances and normal terms, 0 past lx and where y is empty."""
    N, P1, _ = x.shape
    dist = torch.zeros(N, P1, dtype=torch.float64)
    cos = torch.zeros(N, P1, dtype=torch.float64)
    for n in range(N):
        for i in range(int(lx[n])):
            if int(ly[n]) == 0:
                nn_normal = torch.zeros(3, dtype=torch.float64)
            else:
                diff = x[n, i].double() - y[n, : int(ly[n])].double()
                d = diff.abs().sum(-1) if norm == 1 else diff.square().sum(-1)
                j = int(torch.argmin(d))
                dist[n, i] = d[j]
                nn_normal = ny[n, j].double() if ny is not None else None
            if nx is not None:
                c = torch.nn.functional.cosine_similarity(nx[n, i].double(), nn_normal, dim=0, eps=1e-6)
                cos[n, i] = 1 - (c.abs() if abs_cosine else c)
    return dist, cos


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("point_reduction", ["mean", "sum", None])
@pytest.mark.parametrize("batch_reduction", ["mean", "sum", None])
def test_chamfer_distance_equals_brute_force(norm, point_reduction, batch_reduction):
    if point_reduction is None and batch_reduction is not None:
        pytest.skip("upstream rejects this combination (tested below)")
    x, y = _clouds(3, 12, seed=14), _clouds(3, 9, seed=15)
    nx, ny = _clouds(3, 12, seed=16), _clouds(3, 9, seed=17)
    lx, ly = torch.tensor([12, 5, 3]), torch.tensor([9, 0, 4])
    w = torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64)
    for abs_cosine in (True, False):
        loss, loss_n = chamfer_distance(x, y, lx, ly, nx, ny, weights=w, norm=norm, point_reduction=point_reduction,
                                        batch_reduction=batch_reduction, abs_cosine=abs_cosine)
        terms = []
        for a, b, la, lb, na, nb in ((x, y, lx, ly, nx, ny), (y, x, ly, lx, ny, nx)):
            d, c = _brute_chamfer_terms(a, b, la, lb, na, nb, norm, abs_cosine)
            d, c = d * w[:, None], c * w[:, None]
            if point_reduction is not None:
                d, c = d.sum(1), c.sum(1)
                if point_reduction == "mean":
                    d, c = d / la.clamp(min=1), c / la.clamp(min=1)
            terms.append((d, c))
        if point_reduction is None:
            for got, want in zip(loss, [t[0] for t in terms]):
                torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
            for got, want in zip(loss_n, [t[1] for t in terms]):
                torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
            continue
        want, want_n = terms[0][0] + terms[1][0], terms[0][1] + terms[1][1]
        if batch_reduction is not None:
            want, want_n = want.sum(), want_n.sum()
            if batch_reduction == "mean":
                want, want_n = want / w.sum(), want_n / w.sum()
        torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(loss_n, want_n, rtol=1e-12, atol=1e-12)


def test_chamfer_max_single_directional_and_pointclouds():
    x, y = _clouds(2, 7, seed=18), _clouds(2, 5, seed=19)
    dx, _ = _brute_chamfer_terms(x, y, [7, 7], [5, 5], None, None, 2, True)
    dy, _ = _brute_chamfer_terms(y, x, [5, 5], [7, 7], None, None, 2, True)
    loss, none = chamfer_distance(x, y, point_reduction="max", batch_reduction=None)
    assert none is None
    torch.testing.assert_close(loss, torch.maximum(dx.max(1).values, dy.max(1).values), rtol=1e-12, atol=0)
    single, _ = chamfer_distance(x, y, single_directional=True, point_reduction=None, batch_reduction=None)
    torch.testing.assert_close(single, dx, rtol=1e-12, atol=0)
    pcl_x = Pointclouds([x[0], x[1, :3]], normals=[x[0] + 1, x[1, :3] + 1])
    pcl_y = Pointclouds(y, normals=y + 1)
    a = chamfer_distance(pcl_x, pcl_y)
    b = chamfer_distance(pcl_x.points_padded(), y, x_lengths=torch.tensor([7, 3]),
                         x_normals=pcl_x.normals_padded(), y_normals=y + 1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_chamfer_gradcheck_including_the_normals_term():
    x, y = _clouds(2, 5, seed=20).requires_grad_(), _clouds(2, 4, seed=21).requires_grad_()
    nx, ny = _clouds(2, 5, seed=22).requires_grad_(), _clouds(2, 4, seed=23).requires_grad_()
    lx, ly = torch.tensor([5, 3]), torch.tensor([4, 2])

    def f(a, b, na, nb):
        loss, loss_n = chamfer_distance(a, b, lx, ly, na, nb, abs_cosine=False)
        return loss + 0.5 * loss_n

    assert torch.autograd.gradcheck(f, (x, y, nx, ny))


def test_chamfer_errors():
    x = torch.rand(2, 4, 3)
    with pytest.raises(ValueError, match="Batch reduction must be None if point_reduction is None"):
        chamfer_distance(x, x, point_reduction=None)
    with pytest.raises(ValueError, match="Support for 1 or 2 norm."):
        chamfer_distance(x, x, norm=3)
    with pytest.raises(ValueError, match='Normals must be None if point_reduction is "max"'):
        chamfer_distance(x, x, x_normals=x, point_reduction="max")
    with pytest.raises(ValueError, match="weights cannot be negative."):
        chamfer_distance(x, x, weights=torch.tensor([1.0, -1.0]))


# ----------------------------------------------------------------------------------------------- Pointclouds


def test_pointclouds_representations_and_empty_clouds():
    a, c = torch.rand(3, 3), torch.rand(2, 3)
    pcl = Pointclouds([a, torch.zeros(0, 3), c], features=[torch.ones(3, 2), torch.zeros(0, 2), torch.zeros(2, 2)])
    assert len(pcl) == 3 and not pcl.isempty() and pcl[1].isempty() and Pointclouds([]).isempty()
    assert pcl.num_points_per_cloud().tolist() == [3, 0, 2]
    padded = pcl.points_padded()
    assert padded.shape == (3, 3, 3) and torch.equal(padded[0], a) and padded[1].eq(0).all() and padded[2, 2].eq(0).all()
    assert torch.equal(pcl.points_packed(), torch.cat([a, c]))
    assert torch.equal(padded.reshape(-1, 3)[pcl.padded_to_packed_idx()], pcl.points_packed())
    assert pcl.cloud_to_packed_first_idx().tolist() == [0, 3, 3]
    assert pcl.packed_to_cloud_idx().tolist() == [0, 0, 0, 2, 2]
    assert pcl.features_padded().shape == (3, 3, 2) and pcl.normals_padded() is None
    sub = pcl[torch.tensor([True, False, True])]
    assert sub.num_points_per_cloud().tolist() == [3, 2] and sub.points_list()[1] is c
    copy = pcl.clone()
    assert torch.equal(copy.points_packed(), pcl.points_packed()) and copy.points_list()[0] is not a
    assert pcl.to("cpu") is pcl and pcl.to("cpu", copy=True) is not pcl
    with pytest.raises(ValueError, match="Clouds in list must be of shape Px3 or empty"):
        Pointclouds([torch.rand(3, 2)])
    with pytest.raises(ValueError, match="A cloud has mismatched numbers of points and inputs"):
        Pointclouds([a], normals=[torch.rand(2, 3)])


def test_pointclouds_of_only_empty_clouds_keep_their_dtype():
    # found by tests/fuzz/test_fuzz_pytorch3d.py: all-empty float64 clouds came back float32, and
    # chamfer_distance(float64 x, all-empty y) then refused the mixed dtypes
    empty = Pointclouds([torch.zeros(0, 3, dtype=torch.float64), torch.zeros(0, 3, dtype=torch.float64)])
    assert empty.points_padded().dtype == torch.float64 and empty.points_packed().dtype == torch.float64
    assert empty.points_padded().shape == (2, 0, 3)
    x = Pointclouds([torch.tensor([[2.0, 1, 0]], dtype=torch.float64)])
    loss, _ = chamfer_distance(x, Pointclouds([torch.zeros(0, 3, dtype=torch.float64)]))
    assert loss.dtype == torch.float64 and loss.item() == 0.0  # padding distance 0 both ways


# ----------------------------------------------------------------------------------------------- the shims


def _run(code, extra_path=None):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PCGEOM_DISABLE_SHIMS")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(([extra_path] if extra_path else []) + [root])
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=os.path.dirname(root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_served_through_the_opt_in_and_mesh_names_refused():
    out = _run("""
        import pcgeom.compat
        try:
            import pytorch3d
        except ModuleNotFoundError:
            pass
        else:
            raise SystemExit("pytorch3d importable before the opt-in")
        pcgeom.compat.enable_shims()
        import torch
        from pytorch3d.ops import knn_points, knn_gather, ball_query, sample_farthest_points
        from pytorch3d.ops.knn import _KNN
        from pytorch3d.loss import chamfer_distance
        from pytorch3d.structures import Pointclouds
        import pytorch3d.ops
        assert pytorch3d.ops.ball_query is ball_query and pytorch3d.ops.knn.knn_points is knn_points
        x = torch.rand(1, 5, 3)
        assert isinstance(knn_points(x, x, K=2), _KNN)
        for stmt, name in [("from pytorch3d.ops import knn_points, sample_points_from_meshes", "sample_points_from_meshes"),
                           ("import pytorch3d.renderer", "pytorch3d.renderer"), ("import pytorch3d.io", "pytorch3d.io"),
                           ("from pytorch3d.structures import Meshes", "Meshes"),
                           ("from pytorch3d.structures.meshes import Meshes", "pytorch3d.structures.meshes"),
                           ("from pytorch3d.loss import mesh_edge_loss", "mesh_edge_loss")]:
            try:
                exec(stmt)
            except ImportError as e:
                assert name in str(e) and "point ops only" in str(e), str(e)
            else:
                raise SystemExit("no ImportError: " + stmt)
        pcgeom.compat.disable_shims()
        print("served")
    """)
    assert "served" in out


@pytest.mark.slow
def test_an_installed_pytorch3d_wins_in_either_import_order(tmp_path):
    pkg = tmp_path / "pytorch3d"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("REAL = True\n")
    (pkg / "ops" / "__init__.py").write_text("REAL = True\n")
    for first in ("real", "shims"):
        out = _run(f"""
            import sys
            import pcgeom.compat
            if {first!r} == "real":
                import pytorch3d.ops
                pcgeom.compat.enable_shims()
            else:
                pcgeom.compat.enable_shims()
                import pcgeom.compat.pytorch3d.ops  # the stand-in itself may be imported first
                import pytorch3d.ops
            import pytorch3d
            assert pytorch3d.REAL and pytorch3d.ops.REAL and not hasattr(pytorch3d, "__pcgeom_shim__")
            try:
                import pytorch3d.loss  # not in the fake: the stand-in must not graft one onto the real package
            except ModuleNotFoundError:
                print("real wins")
        """, extra_path=str(tmp_path))
        assert "real wins" in out, first
