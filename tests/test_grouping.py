"""pcgeom.group_patches / group_hierarchical / pointnet2_fps / pointgpt_order.

The oracles below are written independently of pcgeom (numpy, float64 unless
stated): an exact FPS loop, a brute-force sorted KNN, a literal simulation of
pointnet2_ops' FPS kernel (per-thread scan + shared-memory tree reduction), and
a transcription of PointGPT's chain ordering.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcgeom
from conftest import lattice_cloud, random_cloud, surface_cloud
from pcgeom.grouping import pointgpt_order, pointnet2_fps

# ----------------------------------------------------------------------------
# Oracles


def _np64(t):
    return t.detach().cpu().to(torch.float64).numpy()


def sq_dists(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(m, n) squared distances, coordinates summed in order."""
    out = np.zeros((a.shape[0], b.shape[0]), dtype=a.dtype)
    for d in range(a.shape[1]):
        diff = a[:, None, d] - b[None, :, d]
        out = out + diff * diff
    return out


def exact_fps(p: np.ndarray, m: int) -> np.ndarray:
    """Greedy FPS from index 0, ties to the lowest index, never repeating."""
    n = p.shape[0]
    chosen = [0]
    best = np.full(n, np.inf)
    taken = np.zeros(n, bool)
    taken[0] = True
    for _ in range(1, m):
        best = np.minimum(best, sq_dists(p[chosen[-1]][None], p)[0])
        cand = np.where(taken, -np.inf, best)
        nxt = int(np.argmax(cand))  # first maximum
        chosen.append(nxt)
        taken[nxt] = True
    return np.array(chosen)


def brute_knn(c: np.ndarray, p: np.ndarray, k: int):
    """Sorted k nearest (ties to the lower index): (dist2 (m, k), idx (m, k))."""
    d = sq_dists(c, p)
    idx = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(d, idx, 1), idx


def pointnet2_kernel_sim(p: np.ndarray, m: int, dtype=np.float32) -> np.ndarray:
    """pointnet2_ops furthest_point_sampling_kernel, thread by thread.

    One block of ``bs`` threads; thread t scans k = t, t+bs, ..., skips points
    with squared norm <= 1e-3 (a float compared with a double literal), keeps
    temp[k] = min(temp[k], d) and its first strict maximum (best starts at -1,
    besti at 0); then the tree ``update(t, t+s)`` for s = bs/2..1 keeps the
    left operand unless the right one is strictly larger.
    """
    p = p.astype(dtype)
    n = p.shape[0]
    bs = 1
    while bs * 2 <= n and bs * 2 <= 512:
        bs *= 2
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    mag = (x * x + y * y) + z * z
    eligible = mag.astype(np.float64) > 1e-3
    temp = np.full(n, 1e10, dtype=dtype)
    rounds = -(-n // bs)
    out = [0]
    old = 0
    for _ in range(1, m):
        dx, dy, dz = x - x[old], y - y[old], z - z[old]
        d = (dx * dx + dy * dy) + dz * dz
        temp = np.where(eligible, np.fmin(d, temp), temp)
        # per-thread scan in k order: column t of a (rounds, bs) grid
        val = np.full(rounds * bs, -np.inf)
        val[:n] = np.where(eligible, temp, -np.inf)
        val = val.reshape(rounds, bs)
        dists = np.full(bs, -1.0)
        dists_i = np.zeros(bs, dtype=np.int64)
        for r in range(rounds):  # strict '>' keeps the earliest k of a thread
            better = val[r] > dists
            dists = np.where(better, val[r], dists)
            dists_i = np.where(better, r * bs + np.arange(bs), dists_i)
        s = bs // 2
        while s >= 1:
            v1, v2 = dists[:s].copy(), dists[s : 2 * s].copy()
            i1, i2 = dists_i[:s].copy(), dists_i[s : 2 * s].copy()
            dists[:s] = np.maximum(v1, v2)
            dists_i[:s] = np.where(v2 > v1, i2, i1)
            s //= 2
        old = int(dists_i[0])
        out.append(old)
    return np.array(out)


def pointgpt_chain(c: torch.Tensor) -> np.ndarray:
    """PointGPT's simplied_morton_sorting for one cloud c (G, 3), as a permutation."""
    g = c.shape[0]
    d = torch.cdist(c[None], c[None])[0].clone()
    d.fill_diagonal_(float("inf"))
    d[:, 0] = float("inf")
    order = [0]
    for _ in range(g - 1):
        nxt = int(torch.argmin(d[order[-1]]))
        order.append(nxt)
        d[:, nxt] = float("inf")
    return np.array(order)


def center_first(idx: np.ndarray, centers: np.ndarray) -> np.ndarray:
    out = []
    for row, c in zip(idx, centers):
        rest = [int(v) for v in row if v != c]
        out.append([int(c)] + rest[: len(row) - 1])
    return np.array(out)


def assert_knn_rows_equivalent(idx, ref_idx, centers64, points64, rtol=1e-6):
    """idx may differ from the float64 reference only where distances tie to ~float32 rounding."""
    idx, ref_idx = np.asarray(idx), np.asarray(ref_idx)
    d_mine = np.take_along_axis(sq_dists(centers64, points64), idx, 1)
    d_ref = np.take_along_axis(sq_dists(centers64, points64), ref_idx, 1)
    np.testing.assert_allclose(d_mine, d_ref, rtol=rtol, atol=1e-12)
    diff = idx != ref_idx
    # near-ties are rare on random data: a systematic difference is a bug
    assert diff.sum() <= max(2, diff.size // 1000), f"{diff.sum()} of {diff.size} neighbours differ"


# ----------------------------------------------------------------------------
# group_patches, exact FPS


CLOUDS = {
    "random": lambda B, N, dtype, device, seed: random_cloud(B, N, dtype=dtype, device=device, seed=seed),
    "surface": lambda B, N, dtype, device, seed: surface_cloud(B, N, dtype=dtype, device=device, seed=seed),
}


@pytest.mark.parametrize("kind", ["random", "surface"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_group_patches_matches_bruteforce(device, kind, dtype):
    B, N, G, K = 2, 300, 24, 16
    pts = CLOUDS[kind](B, N, dtype, device, 3)
    nb, ctr, cidx, idx = pcgeom.group_patches(pts, G, K, return_index=True)
    assert nb.shape == (B, G, K, 3) and ctr.shape == (B, G, 3)
    assert cidx.shape == (B, G) and idx.shape == (B, G, K)
    assert cidx.dtype == idx.dtype == torch.int64
    assert nb.dtype == ctr.dtype == dtype
    for b in range(B):
        p64 = _np64(pts[b])
        ref_c = exact_fps(p64, G)
        np.testing.assert_array_equal(cidx[b].cpu().numpy(), ref_c)
        _, ref_i = brute_knn(p64[ref_c], p64, K)
        ref_i = center_first(ref_i, ref_c)
        if dtype == torch.float64:
            np.testing.assert_array_equal(idx[b].cpu().numpy(), ref_i)
        else:
            assert_knn_rows_equivalent(idx[b].cpu().numpy(), ref_i, p64[ref_c], p64)
    # outputs are exactly the gathered points minus their centre
    gathered = torch.stack([pts[b][idx[b]] for b in range(B)])
    assert torch.equal(ctr, torch.stack([pts[b][cidx[b]] for b in range(B)]))
    assert torch.equal(nb, gathered - ctr[:, :, None])
    assert torch.equal(idx[..., 0], cidx)
    assert bool((nb[:, :, 0] == 0).all())


def test_group_patches_lattice_ties(device):
    """Integer lattice: every distance is exact, so ties must follow the rules exactly."""
    pts = lattice_cloud(2, 6, dtype=torch.float32, device=device, seed=5)  # 216 points
    G, K = 20, 27
    _, _, cidx, idx = pcgeom.group_patches(pts, G, K, return_index=True)
    for b in range(2):
        p64 = _np64(pts[b])
        ref_c = exact_fps(p64, G)
        np.testing.assert_array_equal(cidx[b].cpu().numpy(), ref_c)
        _, ref_i = brute_knn(p64[ref_c], p64, K)
        np.testing.assert_array_equal(idx[b].cpu().numpy(), center_first(ref_i, ref_c))


def test_group_patches_center_first_with_duplicates(device):
    """An exact duplicate of a centre at a lower index: the centre itself still comes first."""
    g = torch.Generator().manual_seed(0)
    base = torch.rand(1, 20, 3, generator=g)
    pts = torch.cat([base, base], dim=1).to(device)  # point i and i + 20 coincide
    # With more centres than distinct points, FPS must pick second copies too.
    _, _, cidx, idx = pcgeom.group_patches(pts, 30, 5, return_index=True)
    assert bool((cidx >= 20).any())
    assert torch.equal(idx[..., 0], cidx)
    plain = pcgeom.knn(pts[0][cidx[0]][None], pts, 5).idx[0]
    moved = plain[:, 0] != cidx[0]
    assert torch.equal(moved, cidx[0] >= 20)  # the lower copy precedes it in plain KNN order
    assert torch.equal(idx[0, moved, 1], plain[moved, 0])
    assert torch.equal(idx[0, moved, 2:], plain[moved, 2:])


def test_group_patches_more_duplicates_than_k(device):
    pts = torch.zeros(1, 12, 3, device=device)
    pts[0, 10:] = 1.0  # ten copies of the origin, two of (1,1,1)
    nb, ctr, cidx, idx = pcgeom.group_patches(pts, 2, 4, return_index=True)
    assert cidx[0].tolist() == [0, 10]
    assert idx[0].tolist() == [[0, 1, 2, 3], [10, 11, 0, 1]]
    assert torch.equal(nb[0, 1, :2], torch.zeros(2, 3, device=device))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_group_patches_dtypes(device, dtype):
    pts = random_cloud(2, 128, dtype=dtype, device=device, seed=1)
    for fps in ("exact", "pointnet2"):
        nb, ctr = pcgeom.group_patches(pts, 16, 8, fps=fps)
        assert nb.dtype == ctr.dtype == dtype
        assert nb.device == pts.device


def test_group_patches_gradients(device):
    pts = random_cloud(1, 40, dtype=torch.float64, device=device, seed=2).requires_grad_()

    def f(p):
        nb, ctr = pcgeom.group_patches(p, 6, 5)
        return nb, ctr

    torch.autograd.gradcheck(f, (pts,))
    # gradients reach points: d(sum of neighbourhoods)/d(points) counts uses
    nb, ctr, cidx, idx = pcgeom.group_patches(pts, 6, 5, return_index=True)
    (nb.sum() + ctr.sum()).backward()
    expected = torch.zeros(40, dtype=torch.float64, device=device)
    expected.index_add_(0, idx[0].reshape(-1), torch.ones(30, dtype=torch.float64, device=device))
    expected.index_add_(0, cidx[0], torch.full((6,), 1.0 - 5, dtype=torch.float64, device=device))
    torch.testing.assert_close(pts.grad[0], expected[:, None].expand(-1, 3))


def test_group_patches_full_sizes(device):
    """n_centers = k = N is allowed: every point is a centre and a neighbour."""
    pts = random_cloud(2, 17, device=device, seed=4)
    nb, ctr, cidx, idx = pcgeom.group_patches(pts, 17, 17, return_index=True)
    assert torch.equal(cidx.sort(1).values, torch.arange(17, device=device).expand(2, -1))
    assert torch.equal(idx.sort(-1).values, torch.arange(17, device=device).expand(2, 17, -1))


# ----------------------------------------------------------------------------
# pointnet2 FPS


def _origin_centred(n, seed, near=0):
    """A unit-sphere-normalised cloud (like Point-MAE's pc_norm) with `near` points close to the origin."""
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(n, 3, generator=g, dtype=torch.float64)
    p = p - p.mean(0)
    p = p / p.norm(dim=1).max()
    if near:
        pos = torch.randperm(n - 1, generator=g)[:near] + 1
        p[pos] = (torch.rand(near, 3, generator=g, dtype=torch.float64) - 0.5) * 0.03
    return p.float()


@pytest.mark.parametrize(
    "n,m,near",
    [(1024, 64, 40), (2048, 128, 10), (1000, 100, 30), (700, 50, 0), (5, 3, 1), (7, 7, 0), (1, 1, 0), (2, 2, 0)],
)
def test_pointnet2_fps_matches_kernel(n, m, near):
    pts = _origin_centred(n, seed=n + m, near=near)
    got = pointnet2_fps(pts[None], m)[0].numpy()
    np.testing.assert_array_equal(got, pointnet2_kernel_sim(pts.numpy(), m))
    near_idx = set(np.nonzero((pts.double() ** 2).sum(1).numpy() <= 1e-3)[0].tolist()) - {0}
    assert not near_idx & set(got.tolist()), "a near-origin point was chosen"


def test_pointnet2_fps_more_samples_than_eligible():
    """npoint > eligible points: the kernel repeats points (by its tie rule); so must we."""
    pts = _origin_centred(600, seed=1, near=590)  # 10 eligible points (+ index 0 start)
    got = pointnet2_fps(pts[None], 40)[0].numpy()
    np.testing.assert_array_equal(got, pointnet2_kernel_sim(pts.numpy(), 40))
    assert len(set(got.tolist())) <= 11
    # a cloud with no eligible point at all repeats index 0
    tiny = torch.full((1, 33, 3), 1e-3)
    assert pointnet2_fps(tiny, 5)[0].tolist() == [0] * 5
    np.testing.assert_array_equal(pointnet2_kernel_sim(tiny[0].numpy(), 5), [0] * 5)


@pytest.mark.parametrize("n", [216, 1000, 1331])
def test_pointnet2_fps_lattice_ties(n):
    """Exact ties everywhere: the thread-block tie rule decides, and it is not 'lowest index'."""
    side = round(n ** (1 / 3))
    pts = lattice_cloud(1, side, seed=side)[0] - (side - 1) / 2
    got = pointnet2_fps(pts[None], 60)[0].numpy()
    np.testing.assert_array_equal(got, pointnet2_kernel_sim(pts.numpy(), 60))


def test_pointnet2_tie_rule_is_the_kernel_reduction():
    # Points 1 and 2 tie as farthest from point 0; threads 1 and 2 of a 4-thread
    # block hold them and the reduction tree keeps thread 2 (t=0 merges t=2 first).
    pts = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0.5, 0, 0]]])
    assert pointnet2_fps(pts, 2)[0].tolist() == [0, 2]
    assert pointnet2_kernel_sim(pts[0].numpy(), 2).tolist() == [0, 2]
    # the exact mode resolves the tie to the lowest index instead
    assert pcgeom.farthest_point_sample(pts, 2)[0].tolist() == [0, 1]


def test_pointnet2_threshold_is_a_double_comparison():
    # |p|^2 slightly above 1e-3 in double but equal to float32(1e-3) is eligible in the kernel.
    v = np.float32(np.sqrt(np.float32(1e-3)))
    while (v * v) <= np.float32(1e-3) and float(v * v) <= 1e-3:
        v = np.nextafter(v, np.float32(1))
    pts = torch.tensor([[[5.0, 5, 5], [float(v), 0, 0], [0.001, 0, 0]]])
    got = pointnet2_fps(pts, 3)[0].tolist()
    np.testing.assert_array_equal(got, pointnet2_kernel_sim(pts[0].numpy(), 3))


def test_pointnet2_group_patches_uses_it(device):
    pts = _origin_centred(512, seed=9, near=20)[None].to(device)
    _, _, cidx, _ = pcgeom.group_patches(pts, 32, 8, return_index=True, fps="pointnet2")
    np.testing.assert_array_equal(cidx[0].cpu().numpy(), pointnet2_kernel_sim(pts[0].cpu().numpy(), 32))


# ----------------------------------------------------------------------------
# PointGPT order


def test_pointgpt_order_matches_transcription(device):
    pts = random_cloud(3, 400, device=device, seed=6)
    nb0, ctr0, cidx0, idx0 = pcgeom.group_patches(pts, 40, 8, return_index=True)
    nb, ctr, cidx, idx = pcgeom.group_patches(pts, 40, 8, return_index=True, order="pointgpt")
    for b in range(3):
        perm = pointgpt_chain(ctr0[b].cpu())
        assert perm[0] == 0 and sorted(perm.tolist()) == list(range(40))
        perm_t = torch.as_tensor(perm, device=device)
        assert torch.equal(cidx[b], cidx0[b][perm_t])
        assert torch.equal(ctr[b], ctr0[b][perm_t])
        assert torch.equal(idx[b], idx0[b][perm_t])
        assert torch.equal(nb[b], nb0[b][perm_t])
    # consecutive centres are chained greedily: each step is the nearest unvisited
    assert torch.equal(pointgpt_order(ctr0)[0].cpu(), torch.as_tensor(pointgpt_chain(ctr0[0].cpu())))


def test_pointgpt_order_ties_first_index():
    c = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [-1, 0, 0], [0, 3, 0]]])
    assert pointgpt_order(c)[0].tolist() == [0, 1, 2, 3]


# ----------------------------------------------------------------------------
# hierarchical


def test_group_hierarchical_levels(device):
    pts = random_cloud(2, 512, device=device, seed=8)
    levels = pcgeom.group_hierarchical(pts, [128, 64, 16], [16, 8, 8])
    prev = pts
    for lvl, (g, k) in zip(levels, [(128, 16), (64, 8), (16, 8)]):
        assert lvl.neighborhoods.shape == (2, g, k, 3)
        nb, ctr, cidx, idx = pcgeom.group_patches(prev, g, k, return_index=True)
        assert torch.equal(lvl.centers, ctr) and torch.equal(lvl.center_idx, cidx)
        assert torch.equal(lvl.idx, idx) and torch.equal(lvl.neighborhoods, nb)
        # indices refer to the previous level's points
        assert torch.equal(lvl.centers, torch.stack([prev[b][lvl.center_idx[b]] for b in range(2)]))
        prev = lvl.centers


def test_group_hierarchical_errors():
    pts = torch.rand(1, 100, 3)
    with pytest.raises(ValueError, match=r"level 1 .*n_centers=80 exceeds the number of points N=64"):
        pcgeom.group_hierarchical(pts, [64, 80], [8, 8])
    with pytest.raises(ValueError, match="equal length"):
        pcgeom.group_hierarchical(pts, [64, 32], [8])
    with pytest.raises(TypeError, match="sequences of ints"):
        pcgeom.group_hierarchical(pts, 64, 8)


# ----------------------------------------------------------------------------
# errors


def test_group_patches_errors():
    pts = torch.rand(2, 10, 3)
    with pytest.raises(ValueError, match=r"n_centers=11 exceeds the number of points N=10 \(points of shape \(2, 10, 3\)"):
        pcgeom.group_patches(pts, 11, 4)
    with pytest.raises(ValueError, match=r"k=12 exceeds the number of points N=10 \(points of shape \(2, 10, 3\), n_centers=4, k=12"):
        pcgeom.group_patches(pts, 4, 12)
    with pytest.raises(ValueError, match=r"group_patches: points must have shape \(B, N, D\), got \(10, 3\)"):
        pcgeom.group_patches(pts[0], 4, 4)
    with pytest.raises(TypeError, match="group_patches: k must be an int, got float"):
        pcgeom.group_patches(pts, 4, 4.0)
    with pytest.raises(TypeError, match="group_patches: n_centers must be an int, got bool"):
        pcgeom.group_patches(pts, True, 4)
    with pytest.raises(ValueError, match="group_patches: n_centers must be >= 1, got 0"):
        pcgeom.group_patches(pts, 0, 4)
    with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64"):
        pcgeom.group_patches(pts.long(), 4, 4)
    with pytest.raises(ValueError, match="fps must be one of"):
        pcgeom.group_patches(pts, 4, 4, fps="fast")
    with pytest.raises(ValueError, match="order must be None or 'pointgpt'"):
        pcgeom.group_patches(pts, 4, 4, order="morton")
    with pytest.raises(ValueError, match="fps='pointnet2' needs 3-D points"):
        pcgeom.group_patches(torch.rand(2, 10, 2), 4, 4, fps="pointnet2")
    with pytest.raises(ValueError, match="pointnet2_fps: n_samples=11 exceeds"):
        pointnet2_fps(pts, 11)


# ----------------------------------------------------------------------------
# torch.compile


def test_group_patches_compile_fullgraph(device):
    torch._dynamo.reset()
    pts = random_cloud(2, 64, dtype=torch.float32, device=device, seed=11)

    def f(p):
        nb, ctr, cidx, idx = pcgeom.group_patches(p, 8, 6, return_index=True)
        nb2, ctr2, cidx2, _ = pcgeom.group_patches(p, 16, 4, return_index=True, fps="pointnet2", order="pointgpt")
        return nb.square().sum() + ctr.sum() + nb2.sum() + ctr2.square().sum(), cidx, idx, cidx2

    p1 = pts.clone().requires_grad_()
    p2 = pts.clone().requires_grad_()
    a = f(p1)
    a[0].backward()
    b = torch.compile(f, fullgraph=True, backend="aot_eager")(p2)
    b[0].backward()
    torch.testing.assert_close(a[0], b[0])
    assert all(torch.equal(x, y) for x, y in zip(a[1:], b[1:]))
    torch.testing.assert_close(p1.grad, p2.grad)


def test_loop_ops_opcheck(device):
    """The pointnet2 FPS and PointGPT loops are custom ops (so compile does not unroll them)."""
    pts = random_cloud(2, 50, device=device, seed=13)
    torch.library.opcheck(torch.ops.pcgeom_grouping.pointnet2_fps.default, (pts, 7))
    torch.library.opcheck(torch.ops.pcgeom_grouping.pointgpt_order.default, (pts[:, :9],))


# ----------------------------------------------------------------------------
# real scans


@pytest.mark.parametrize("name", ["bunny", "kitten"])
def test_group_patches_on_scans(name):
    # The scans are tracked in git and shipped in the package: any error loading them (a PLY-reader regression,
    # a missing file) is a failure, never a skip.
    pts = pcgeom.data.load(name, n_points=1024, seed=1)
    pts = pts - pts.mean(0)
    pts = (pts / pts.norm(dim=1).max())[None]
    nb, ctr, cidx, idx = pcgeom.group_patches(pts, 64, 32, return_index=True, fps="pointnet2")
    p64 = _np64(pts[0])
    np.testing.assert_array_equal(cidx[0].numpy(), pointnet2_kernel_sim(pts[0].numpy(), 64))
    _, ref_i = brute_knn(p64[cidx[0].numpy()], p64, 32)
    assert_knn_rows_equivalent(idx[0].numpy(), center_first(ref_i, cidx[0].numpy()), p64[cidx[0].numpy()], p64)
